//! Dynamo 1.6.1's deepseek_v3_1 parser over a whole text, as its tool jail and
//! unary aggregator run it (measured against its frontend; only the pipeline's
//! reference mode uses it):
//!
//! - the text is trimmed first; without `<｜tool▁calls▁begin｜>` only a bare
//!   `<｜tool▁call▁begin｜>` makes it markup (its calls, else nothing at all);
//! - with the section marker, calls count only once a `<｜tool▁calls▁end｜>`
//!   follows somewhere, or at the end of output (`recover`);
//! - a call is the text from a `<｜tool▁call▁begin｜>` to the first
//!   `<｜tool▁call▁end｜>` after it, wherever it stands (JSON strings are not
//!   looked into), split at its first `<｜tool▁sep｜>`: the name, trimmed, must
//!   be there and hold no bracket or brace; the arguments, trimmed, must be one
//!   JSON value (read again with each line's indent turned into one space), and
//!   are written compact;
//! - the content of an answer with calls is the text before the first start
//!   marker (the section's, else the bare call's), as the trim left it.

use serde_json::Value;

use super::family::{DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, DS_CALL_END, DS_SEP};

/// The bare call marker: the jail holds a piece holding it whole.
pub const BARE_CALL: &str = DS_CALL_BEGIN;

/// What the parser reads in a text: its calls (name, arguments) and the text it
/// says (empty where it says nothing: the jail then drops what it held).
pub struct Whole {
    pub calls: Vec<(String, String)>,
    pub content: String,
}

/// The parse of `text`; `recover` at the end of output (a section need not close).
pub fn parse_whole(text: &str, recover: bool) -> Whole {
    let text = text.trim();
    let said = |calls: Vec<(String, String)>, content: &str| Whole {
        calls,
        content: content.to_owned(),
    };
    let Some(section) = text.find(DS_CALLS_BEGIN) else {
        let Some(bare) = text.find(DS_CALL_BEGIN) else {
            return said(Vec::new(), text);
        };
        let calls = calls(text);
        let content = if calls.is_empty() { "" } else { &text[..bare] };
        return said(calls, content);
    };
    let before = &text[..section];
    if !recover && !text.contains(DS_CALLS_END) {
        return said(Vec::new(), before);
    }
    said(calls(text), before)
}

/// Where the jail ends once `text` parsed to calls: the first
/// `<｜tool▁calls▁end｜>` in a section (else the whole text); without a section,
/// past the first `<｜tool▁call▁end｜>` and the stray call ends and whole bare
/// calls right after it (whitespace between them).
pub fn end_position(text: &str) -> usize {
    if text.contains(DS_CALLS_BEGIN) {
        return text
            .find(DS_CALLS_END)
            .map_or(text.len(), |at| at + DS_CALLS_END.len());
    }
    let Some(first) = text.find(DS_CALL_END) else {
        return text.len();
    };
    let mut end = first + DS_CALL_END.len();
    loop {
        let rest = &text[end..];
        let next = rest.trim_start();
        let gap = rest.len() - next.len();
        if next.starts_with(DS_CALL_END) {
            end += gap + DS_CALL_END.len();
        } else if next.starts_with(DS_CALL_BEGIN) {
            match next.find(DS_CALL_END) {
                Some(at) => end += gap + at + DS_CALL_END.len(),
                None => return end,
            }
        } else {
            return end;
        }
    }
}

/// Every call block in `text`, in order, that reads as a call.
fn calls(text: &str) -> Vec<(String, String)> {
    let mut calls = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(DS_CALL_BEGIN) {
        let begin = from + at + DS_CALL_BEGIN.len();
        let Some(len) = text[begin..].find(DS_CALL_END) else {
            break;
        };
        calls.extend(call(&text[begin..begin + len]));
        from = begin + len + DS_CALL_END.len();
    }
    calls
}

/// One block's call, if it is one.
fn call(block: &str) -> Option<(String, String)> {
    let (name, arguments) = block.split_once(DS_SEP)?;
    let name = name.trim();
    if name.is_empty() || name.contains(['{', '}', '[', ']']) {
        return None;
    }
    let arguments = arguments.trim();
    let value = serde_json::from_str::<Value>(arguments).or_else(|_| {
        let joined: Vec<&str> = arguments.lines().map(str::trim_start).collect();
        serde_json::from_str::<Value>(&joined.join(" "))
    });
    Some((name.to_owned(), value.ok()?.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> (String, String) {
        (name.to_owned(), args.to_owned())
    }

    #[test]
    fn a_name_with_a_bracket_is_no_call() {
        let text = "<｜tool▁call▁begin｜>]<｜tool▁sep｜>{\"y\":\"h\"}<｜tool▁call▁end｜>";
        let whole = parse_whole(text, true);
        assert!(whole.calls.is_empty());
        assert_eq!(whole.content, "");
    }

    #[test]
    fn calls_run_to_the_first_call_end_anywhere() {
        let text = "hi <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": \
            \"x<｜tool▁call▁end｜><｜tool▁call▁begin｜>g<｜tool▁sep｜>{\n  \"b\": 1\n}\
            <｜tool▁call▁end｜> <｜tool▁calls▁end｜>";
        let whole = parse_whole(text, false);
        assert_eq!(whole.calls, [call("g", "{\"b\":1}")]);
        assert_eq!(whole.content, "hi ");
    }

    #[test]
    fn an_open_section_counts_only_at_the_end() {
        let text =
            "x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>[1]<｜tool▁call▁end｜>";
        assert!(parse_whole(text, false).calls.is_empty());
        assert_eq!(parse_whole(text, true).calls, [call("f", "[1]")]);
    }
}
