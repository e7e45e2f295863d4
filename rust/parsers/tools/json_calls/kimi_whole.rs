//! Dynamo 1.6.1's kimi_k2 parser over a whole text, as its tool jail runs it
//! (measured against its frontend; only the pipeline's reference mode uses it):
//!
//! - a call is `<|tool_call_begin|>`, an id `name:index` (`[\w.-]+:\d+`, a leading
//!   `functions.` is not part of the name), `<|tool_call_argument_begin|>`, then
//!   the arguments up to the first `<|tool_call_end|>` — JSON strings are not
//!   looked into, so `{"city": "New York<|tool_call_end|>` ends there;
//! - but when the arguments open with a whole JSON value (read on through the
//!   call's block, so `<|tool_call_end|>` may sit inside its strings), a
//!   `<|tool_call_end|>` follows it, and no `<|tool_call_begin|>` comes before
//!   that, the arguments are that value alone (`{}x`, `[1] [2]`, `{}<|tool_`);
//!   a number or literal must end at a delimiter (`1x` stays as written);
//! - whitespace around the id and the arguments is ignored; arguments that parse
//!   as JSON are written compact, others are kept as written (`x y`, `{"a":1,}`);
//! - the call's id is the id as written.

use serde::de::IgnoredAny;
use serde_json::Value;

use super::family::{
    KIMI_ARGS_BEGIN, KIMI_CALL_BEGIN, KIMI_CALL_END, KIMI_SECTIONS_BEGIN, KIMI_SECTIONS_END,
    KIMI_SECTION_BEGIN, KIMI_SECTION_END,
};

/// One call read whole: its id as written, its name and its arguments.
pub struct WholeCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Every call in `text`, in order.
pub fn parse_whole(text: &str) -> Vec<WholeCall> {
    let mut calls = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(KIMI_CALL_BEGIN) {
        let begin = from + at + KIMI_CALL_BEGIN.len();
        match call_at(&text[begin..block_end(text, from + at)]) {
            Some((call, used)) => {
                calls.push(call);
                from = begin + used;
            }
            None => from = begin,
        }
    }
    calls
}

/// Where the block the parser reads the call at `at` from ends: its section's
/// end marker (or the text's end), or for a call outside sections the next
/// section's start.
fn block_end(text: &str, at: usize) -> usize {
    let mut cursor = 0;
    while let Some(start) = first_section(&text[cursor..]).map(|s| cursor + s) {
        if at < start {
            return start;
        }
        let Some(end) = [KIMI_SECTIONS_END, KIMI_SECTION_END]
            .iter()
            .filter_map(|m| text[start..].find(m).map(|e| start + e + m.len()))
            .min()
        else {
            return text.len();
        };
        if at < end {
            return end;
        }
        cursor = end;
    }
    text.len()
}

/// Where the first section opens (either spelling of the section marker).
pub fn first_section(text: &str) -> Option<usize> {
    [KIMI_SECTIONS_BEGIN, KIMI_SECTION_BEGIN]
        .iter()
        .filter_map(|m| text.find(m))
        .min()
}

/// Whether the parse of `text` without calls says any text (the jail then lets
/// the held text out as it was, else drops it): the text outside its sections
/// once one opens (an unclosed one runs to the end), else the text before the
/// first marker of a call or a section's end (live-checked:
/// `<|tool_call_begin|>x<|tool_calls_section_begin|>…` goes out whole).
pub fn says_text_without_calls(text: &str) -> bool {
    let first = |text: &str, markers: &[&str]| markers.iter().filter_map(|m| text.find(m)).min();
    let starts = [KIMI_SECTIONS_BEGIN, KIMI_SECTION_BEGIN];
    let ends = [KIMI_SECTIONS_END, KIMI_SECTION_END];
    if first(text, &starts).is_none() {
        let orphans = [
            KIMI_CALL_BEGIN,
            KIMI_CALL_END,
            KIMI_ARGS_BEGIN,
            ends[0],
            ends[1],
        ];
        let before = first(text, &orphans).map_or(text, |at| &text[..at]);
        return !before.trim().is_empty();
    }
    let mut rest = text;
    while let Some(at) = first(rest, &starts) {
        if !rest[..at].trim().is_empty() {
            return true;
        }
        let Some(end) = ends
            .iter()
            .filter_map(|m| rest[at..].find(m).map(|e| at + e + m.len()))
            .min()
        else {
            return false;
        };
        rest = &rest[end..];
    }
    !rest.trim().is_empty()
}

/// The call whose id starts `text` (after its begin marker, up to its block's
/// end), and the bytes it used.
fn call_at(text: &str) -> Option<(WholeCall, usize)> {
    let rest = text.trim_start();
    let id_len = function_id_len(rest)?;
    let id = &rest[..id_len];
    let after_id = rest[id_len..].trim_start();
    let args_from = after_id.strip_prefix(KIMI_ARGS_BEGIN)?.trim_start();
    let end = args_from.find(KIMI_CALL_END)?;
    let raw = leading_json(args_from).unwrap_or_else(|| args_from[..end].trim());
    let arguments = match serde_json::from_str::<Value>(raw) {
        Ok(value) => value.to_string(),
        Err(_) => raw.to_owned(),
    };
    let used = text.len() - args_from.len() + end + KIMI_CALL_END.len();
    let name = id.rsplit_once(':').map_or(id, |(name, _)| name);
    let name = name
        .strip_prefix("functions.")
        .filter(|n| !n.is_empty())
        .unwrap_or(name);
    let call = WholeCall {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments,
    };
    Some((call, used))
}

/// The JSON value opening `region` when a `<|tool_call_end|>` follows it before
/// any `<|tool_call_begin|>`.
fn leading_json(region: &str) -> Option<&str> {
    let mut values = serde_json::Deserializer::from_str(region).into_iter::<IgnoredAny>();
    values.next()?.ok()?;
    let len = values.byte_offset();
    let after = &region[len..];
    let end = after.find(KIMI_CALL_END)?;
    after
        .find(KIMI_CALL_BEGIN)
        .map_or(true, |next| end < next)
        .then(|| region[..len].trim())
}

/// The length of the `[\w.-]+:\d+` id opening `text` (the longest such id).
fn function_id_len(text: &str) -> Option<usize> {
    let word = |c: char| c.is_alphanumeric() || matches!(c, '_' | '.' | '-');
    let name_len = text.find(|c: char| !word(c)).unwrap_or(text.len());
    let after = text[name_len..].strip_prefix(':')?;
    let digits = after
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(after.len());
    (name_len > 0 && digits > 0).then_some(name_len + 1 + digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<(String, String, String)> {
        parse_whole(text)
            .into_iter()
            .map(|c| (c.id, c.name, c.arguments))
            .collect()
    }

    fn call(id: &str, name: &str, args: &str) -> (String, String, String) {
        (id.to_owned(), name.to_owned(), args.to_owned())
    }

    #[test]
    fn arguments_run_to_the_first_call_end() {
        let text = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0\
            <|tool_call_argument_begin|>{\"city\": \"New York<|tool_call_end|> \
            <|tool_call_begin|>get_time:1<|tool_call_argument_begin|>{\"tz\": \"Z\\u00fcrich\"}\
            <|tool_call_end|><|tool_calls_section_end|>";
        assert_eq!(
            read(text),
            [
                call(
                    "functions.get_weather:0",
                    "get_weather",
                    "{\"city\": \"New York"
                ),
                call("get_time:1", "get_time", "{\"tz\":\"Zürich\"}"),
            ]
        );
    }

    #[test]
    fn arguments_that_are_not_json_are_kept_trimmed() {
        let text = "<|tool_call_begin|> f:0 <|tool_call_argument_begin|> x y <|tool_call_end|>";
        assert_eq!(read(text), [call("f:0", "f", "x y")]);
    }

    #[test]
    fn text_outside_the_sections_is_said() {
        let section = "<|tool_calls_section_begin|><|tool_call_begin|>f:0<|tool_call_argu";
        assert!(says_text_without_calls(&format!(
            "<|tool_call_begin|>x{section}"
        )));
        assert!(!says_text_without_calls(section));
        assert!(!says_text_without_calls("<|tool_call_begin|>x"));
        assert!(says_text_without_calls("x <|tool_call_end|>"));
        assert!(says_text_without_calls(
            "<|tool_calls_section_begin|>y<|tool_calls_section_end|> z"
        ));
    }

    #[test]
    fn a_leading_json_value_before_the_call_end_is_the_arguments() {
        let args = |body: &str| {
            let text = format!(
                "<|tool_calls_section_begin|><|tool_call_begin|>f:0<|tool_call_argument_begin|>\
                 {body}<|tool_call_end|><|tool_calls_section_end|>"
            );
            read(&text).pop().map(|c| c.2)
        };
        assert_eq!(args("{}<|tool_").as_deref(), Some("{}"));
        assert_eq!(args("{\"a\":1} {\"b\":2}").as_deref(), Some("{\"a\":1}"));
        assert_eq!(args("[1]x").as_deref(), Some("[1]"));
        assert_eq!(args("\"s\"x").as_deref(), Some("\"s\""));
        assert_eq!(args("1x").as_deref(), Some("1x"));
        assert_eq!(args("x {}").as_deref(), Some("x {}"));
        // A call opening before the value's call end keeps the text as written.
        assert_eq!(
            args("{}x<|tool_call_begin|>").as_deref(),
            Some("{}x<|tool_call_begin|>")
        );
        // A string may hold the call end marker.
        assert_eq!(
            args("{\"a\":\"<|tool_call_end|>\"}").as_deref(),
            Some("{\"a\":\"<|tool_call_end|>\"}")
        );
    }

    #[test]
    fn a_malformed_id_is_no_call() {
        let text = "<|tool_call_begin|>f x:0<|tool_call_argument_begin|>{}<|tool_call_end|>";
        assert!(read(text).is_empty());
        assert!(read("<|tool_call_begin|>f:0<|tool_call_argument_begin|>{}").is_empty());
    }
}
