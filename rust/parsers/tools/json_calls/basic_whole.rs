//! Dynamo 1.6.1's basic JSON parser over a whole text, as its tool jail runs it
//! for the single-marker JSON families (`llama3_json`'s `<|python_tag|>`,
//! `mistral`'s `[TOOL_CALLS]`); measured against its frontend, only the
//! pipeline's reference mode uses it:
//!
//! - with the marker in the text, the content is the trimmed text before the
//!   first one; each piece between markers that starts with `{` (`[`) is cut at
//!   its last `}` (`]`) and kept when that is JSON (a list gives its elements);
//!   JSON the output cut short is no call here (`<|python_tag|>{"name":"f","ar`),
//!   and no JSON at all leaves no content either;
//! - without it, the JSON runs from the first `{` or `[` to the end, the text
//!   before it is the content; JSON cut short is closed (open string, lists and
//!   objects) and read again;
//! - a call is an object with a string `name` and `parameters`, else `arguments`
//!   (any JSON, as written; a list after the marker has its elements written
//!   again compact); in a list, elements that are not calls are
//!   skipped, and a list that parses says only the text before it, calls or not
//!   (`x [1]` → `x`).

use serde_json::Value;

use super::in_content::closed;
use super::{cut_json_piece, first_value};

/// What the parse found: calls (name, compact JSON arguments) and the content,
/// `None` when nothing read as calls and the text stays as it is.
#[derive(Debug, PartialEq, Eq)]
pub struct WholeParse {
    pub calls: Vec<(String, String)>,
    pub content: Option<String>,
}

/// Parse `text` as Dynamo's basic JSON parser does with one start `marker`;
/// `close_cut`: bare JSON cut short is closed and read again (the jail's parse;
/// a forced tool choice's held answer is read without it).
pub fn parse_whole(text: &str, marker: &str, close_cut: bool) -> WholeParse {
    let text = text.trim();
    match text.find(marker) {
        Some(at) => marked(text, marker, text[..at].trim()),
        None => bare(text, close_cut),
    }
}

/// Parse `text` as Dynamo's mistral parser does: as [`parse_whole`], but only
/// the text right after the first `[TOOL_CALLS]` is read, and only whole objects
/// count: one, or the elements of a list up to the first that is not whole
/// (`[{…}, {"name":"b"` reads the first; `{…}}` reads the object;
/// `[TOOL_CALLS][TOOL_CALLS]{…}` reads nothing).
pub fn parse_whole_objects(text: &str, marker: &str, close_cut: bool) -> WholeParse {
    let text = text.trim();
    let Some(at) = text.find(marker) else {
        return bare(text, close_cut);
    };
    let after = text[at + marker.len()..].trim_start();
    let items = match after.as_bytes().first() {
        Some(b'{') => first_value(after).map(|(v, _)| v).into_iter().collect(),
        Some(b'[') => whole_elements(&after[1..]),
        _ => Vec::new(),
    };
    if items.is_empty() {
        return WholeParse {
            calls: Vec::new(),
            content: Some(String::new()),
        };
    }
    WholeParse {
        calls: items.into_iter().filter_map(call).collect(),
        content: Some(text[..at].trim().to_owned()),
    }
}

/// The calls in a forced tool choice's held answer with `marker` in it, as
/// Dynamo's `llama3_json` reads it at the end of output (live-checked): after each
/// marker, the JSON values separated by `;`, up to the first thing that is neither
/// (`{A}; {B}` is the calls A and B, `{A}{B}` and `{A}x; {B}` the call A).
/// `None` without the marker.
pub fn marked_values(text: &str, marker: &str) -> Option<Vec<(String, String)>> {
    let (_, after) = text.split_once(marker)?;
    let mut calls = Vec::new();
    for piece in after.split(marker) {
        let mut rest = piece.trim_start();
        while let Some((json, after)) = first_value(rest) {
            if json.starts_with('[') {
                calls.extend(list_calls(json).unwrap_or_default());
            } else {
                calls.extend(call(json));
            }
            match after.trim_start().strip_prefix(';') {
                Some(next) => rest = next.trim_start(),
                None => break,
            }
        }
    }
    Some(calls)
}

/// The calls in a forced tool choice's held answer with `marker` in it, as
/// Dynamo's mistral reads it at the end of output (live-checked): every piece
/// around a marker that opens with `{` (`[`) is read to its last `}` (`]`), a
/// list's elements and all arguments as written. `None` without the marker.
pub fn marked_as_written(text: &str, marker: &str) -> Option<Vec<(String, String)>> {
    text.find(marker)?;
    let mut calls = Vec::new();
    for json in text.split(marker).filter_map(cut_json_piece) {
        if json.starts_with('[') {
            calls.extend(list_calls(json).unwrap_or_default());
        } else {
            calls.extend(call(json));
        }
    }
    Some(calls)
}

/// The whole elements at the start of a list's insides, up to the first that is not.
fn whole_elements(mut rest: &str) -> Vec<&str> {
    let mut found = Vec::new();
    while let Some((value, after)) = first_value(rest) {
        found.push(value);
        match after.trim_start().strip_prefix(',') {
            Some(next) => rest = next,
            None => break,
        }
    }
    found
}

fn marked(text: &str, marker: &str, before: &str) -> WholeParse {
    // The pieces that read as JSON, joined as one list: a list's elements are
    // written again compact, an object stays as written.
    let mut items = Vec::new();
    for json in text.split(marker).filter_map(cut_json_piece) {
        match serde_json::from_str::<Value>(json) {
            Ok(Value::Array(list)) if json.starts_with('[') => {
                items.extend(list.iter().map(Value::to_string));
            }
            Ok(_) if json.starts_with('{') => items.push(json.to_owned()),
            _ => {}
        }
    }
    if items.is_empty() {
        return WholeParse {
            calls: Vec::new(),
            content: Some(String::new()),
        };
    }
    WholeParse {
        calls: list_calls(&format!("[{}]", items.join(","))).unwrap_or_default(),
        content: Some(before.to_owned()),
    }
}

fn bare(text: &str, close_cut: bool) -> WholeParse {
    let Some(at) = text.find(['{', '[']) else {
        return unread();
    };
    let (before, json) = (text[..at].trim(), text[at..].trim());
    let said = |calls| WholeParse {
        calls,
        content: Some(before.to_owned()),
    };
    if let Some(one) = call(json) {
        return said(vec![one]);
    }
    if let Some(calls) = list_calls(json) {
        return said(calls);
    }
    if !close_cut {
        return unread();
    }
    let json = closed(json);
    if let Some(one) = call(&json) {
        return said(vec![one]);
    }
    match list_calls(&json) {
        Some(calls) if !calls.is_empty() => said(calls),
        _ => unread(),
    }
}

fn unread() -> WholeParse {
    WholeParse {
        calls: Vec::new(),
        content: None,
    }
}

fn list_calls(json: &str) -> Option<Vec<(String, String)>> {
    super::list_calls(json, call)
}

/// A call object: a string `name`, and `parameters` or else `arguments` as written.
fn call(json: &str) -> Option<(String, String)> {
    let (name, arguments) = super::call_object(json, &["parameters", "arguments"])?;
    Some((name, arguments?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: &str = "<|python_tag|>";

    fn parse(text: &str) -> (Vec<(String, String)>, Option<String>) {
        let parse = parse_whole(text, TAG, true);
        (parse.calls, parse.content)
    }

    fn one(name: &str, args: &str) -> Vec<(String, String)> {
        vec![(name.to_owned(), args.to_owned())]
    }

    #[test]
    fn bare_json_cut_short_is_closed() {
        assert_eq!(
            parse(r#"<|p>{"name":"","arguments":{"#),
            (one("", "{}"), Some("<|p>".into()))
        );
        assert_eq!(
            parse(r#"x [{"name":"a","arguments":{}}, {"name":"c""#),
            (one("a", "{}"), Some("x".into()))
        );
        // Closing does not make `"b":` a value.
        assert_eq!(parse(r#"{"name":"a","arguments":{"b":"#), (vec![], None));
        assert_eq!(parse("[1, 2"), (vec![], None));
        let unclosed = parse_whole(r#"{"name":"","arguments":{"#, TAG, false);
        assert_eq!((unclosed.calls, unclosed.content), (vec![], None));
    }

    #[test]
    fn a_bare_list_says_the_text_before_it() {
        assert_eq!(parse("x [1]"), (vec![], Some("x".into())));
        assert_eq!(parse("[]"), (vec![], Some("".into())));
        assert_eq!(parse(r#"{"a":1}"#), (vec![], None));
    }

    #[test]
    fn json_after_the_marker_is_not_closed() {
        assert_eq!(
            parse(r#"<|python_tag|>{"name":"a","arguments":{"b":"#),
            (vec![], Some("".into()))
        );
        assert_eq!(
            parse(r#"<|python_tag|>n{"name":"a","arguments":{}}"#),
            (vec![], Some("".into()))
        );
        assert_eq!(
            parse(r#"hi <|python_tag|>{"name":"a","arguments":{}} bye"#),
            (one("a", "{}"), Some("hi".into()))
        );
    }

    #[test]
    fn mistral_reads_whole_objects_only() {
        let read = |text| {
            let parse = parse_whole_objects(text, "[TOOL_CALLS]", true);
            (parse.calls, parse.content)
        };
        assert_eq!(
            read(r#"[TOOL_CALLS][{"name":"a","arguments":{}}, {"name":"b","arguments":{"c":1}"#),
            (one("a", "{}"), Some("".into()))
        );
        assert_eq!(
            read(r#"[TOOL_CALLS]{"name":"a","parameters":1}}"#),
            (one("a", "1"), Some("".into()))
        );
        assert_eq!(
            read(r#"[TOOL_CALLS][{"name":"a","arguments":{"b":1}"#),
            (vec![], Some("".into()))
        );
        assert_eq!(
            read(r#"[TOOL_CALLS][{"name":"e","":{}}]"#),
            (vec![], Some("".into()))
        );
        assert_eq!(
            read(r#"[TOOL_CALLS][TOOL_CALLS]{"name":"a","arguments":{}}"#),
            (vec![], Some("".into()))
        );
    }

    #[test]
    fn held_answer_values_end_at_the_first_non_separator() {
        let (a, b) = (
            r#"{"name":"a","arguments":{}}"#,
            r#"{"name":"b","arguments":{"c":1}}"#,
        );
        let read = |text: &str| marked_values(text, TAG);
        let both = [one("a", "{}"), one("b", r#"{"c":1}"#)].concat();
        assert_eq!(read(&format!("x{TAG}{a}; {b};")), Some(both.clone()));
        assert_eq!(read(&format!("{TAG}{a}{TAG} {b}")), Some(both));
        assert_eq!(read(&format!("{TAG}{a}{b}")), Some(one("a", "{}")));
        assert_eq!(read(&format!("{TAG}{a} x; {b}")), Some(one("a", "{}")));
        assert_eq!(read(&format!("{TAG}x; {b}")), Some(vec![]));
        assert_eq!(read(a), None);
    }

    #[test]
    fn held_answer_pieces_are_read_to_their_last_bracket_as_written() {
        let (a, b) = (
            r#"{"name":"a","arguments":{"x": 1}}"#,
            r#"{"name":"b","arguments":{}}"#,
        );
        let read = |text: &str| marked_as_written(text, "[TOOL_CALLS]");
        assert_eq!(
            read(&format!("[TOOL_CALLS]f[ARGS]{{}}[TOOL_CALLS][{a}, {b}]")),
            Some([one("a", r#"{"x": 1}"#), one("b", "{}")].concat())
        );
        assert_eq!(read(&format!("[TOOL_CALLS][{a}] x]")), Some(vec![]));
        assert_eq!(
            read(&format!("[TOOL_CALLS][{a}] x[")).map(|c| c.len()),
            Some(1)
        );
        assert_eq!(read(a), None);
    }

    #[test]
    fn calls_need_a_name_and_arguments() {
        assert_eq!(
            parse(r#"<|python_tag|>[{"name":"a","arguments":{"b": 1}}, {"name":"c"}]"#),
            (one("a", r#"{"b":1}"#), Some("".into()))
        );
        assert_eq!(
            parse(r#"{"name":"a","parameters":{"x": 1},"arguments":{}}"#),
            (one("a", r#"{"x": 1}"#), Some("".into()))
        );
        assert_eq!(parse(r#"{"name":"a"}"#), (vec![], None));
    }
}
