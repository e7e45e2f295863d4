//! Dynamo 1.6.1's `default` tool parser over a whole text, as its tool jail runs it
//! (measured against its frontend; only the pipeline's reference mode uses it).
//! The start markers are `<TOOLCALL>` then `<|python_tag|>`, each tried with the
//! end marker `</TOOLCALL>` and then with none:
//!
//! - no start marker: the JSON is the text from its first `{` or `[` on, the
//!   content the text before it;
//! - with an end marker: the trimmed insides of every `<TOOLCALL>…</TOOLCALL>`
//!   pair (one as it is, several as the JSON list of them); at the end of output
//!   ([`Reading::End`]), when no pair closed, the text after the marker if it
//!   starts like JSON (the value that starts it, whatever follows);
//! - with none: the pieces of text around the marker (before it too) that start
//!   with `{` (`[`), each cut at its last `}` (`]`), give the JSON value that
//!   starts them (`{…}, {"y":1}` gives `{…}`); none says "no JSON after the
//!   marker" (the content is then empty);
//! - the first marker that yields JSON wins; the content is the text before it;
//! - a call is an object with a string `name` and `parameters` or `arguments`
//!   (any JSON, as written); a list gives its elements that are calls (an empty
//!   result then still says the content); at the end of output JSON cut short is
//!   closed (open string, lists, objects) and read again.

use serde_json::value::RawValue;

use super::cut_json_piece;
use super::in_content::closed;

pub const STARTS: [&str; 2] = ["<TOOLCALL>", "<|python_tag|>"];
const END: &str = "</TOOLCALL>";

/// When the parse runs: the jail's check for its end while output still comes,
/// or the end of output (which also reads an unclosed block and closes JSON cut
/// short).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    Streaming,
    End,
}

/// A whole parse: the calls (name, JSON arguments) and the content the parser
/// says beside them (trimmed; empty when a marker had no JSON after it).
pub struct WholeParse {
    pub calls: Vec<(String, String)>,
    pub content: String,
}

/// Parse `text` as Dynamo's `default` parser does.
pub fn parse_whole(text: &str, reading: Reading) -> WholeParse {
    let trimmed = text.trim();
    let none = |content: &str| WholeParse {
        calls: Vec::new(),
        content: content.to_owned(),
    };
    if trimmed.is_empty() {
        return none("");
    }
    let (json, content) = match extract(trimmed, reading) {
        Extracted::Json(json, content) => (json, content),
        Extracted::Bare => match trimmed.find(['{', '[']) {
            Some(at) => (trimmed[at..].to_owned(), trimmed[..at].trim()),
            None => return none(trimmed),
        },
        Extracted::NoJsonAfterMarker => return none(""),
    };
    if let Some(calls) = calls_in(&json, true) {
        return WholeParse {
            calls,
            content: content.to_owned(),
        };
    }
    if reading == Reading::End {
        let repaired = closed(&json);
        if repaired != json {
            if let Some(calls) = calls_in(&repaired, false) {
                return WholeParse {
                    calls,
                    content: content.to_owned(),
                };
            }
        }
    }
    none(trimmed)
}

enum Extracted<'a> {
    /// The JSON to read and the content before its marker.
    Json(String, &'a str),
    /// No start marker in the text.
    Bare,
    /// A marker without JSON after it.
    NoJsonAfterMarker,
}

fn extract(text: &str, reading: Reading) -> Extracted<'_> {
    if !STARTS.iter().any(|m| text.contains(m)) {
        return Extracted::Bare;
    }
    for start in STARTS {
        let before = text.find(start).map_or("", |at| text[..at].trim());
        if let Some(json) = between(text, start, reading) {
            return if json.is_empty() {
                Extracted::NoJsonAfterMarker
            } else {
                Extracted::Json(json, before)
            };
        }
        if let Some(json) = around(text, start) {
            return if json.is_empty() {
                Extracted::NoJsonAfterMarker
            } else {
                Extracted::Json(json, before)
            };
        }
    }
    // Not reached: a marker in the text makes `around` answer.
    Extracted::Bare
}

/// The insides of the `start…</TOOLCALL>` pairs (shortest, in order), or at the
/// end of output the JSON-looking text after an unclosed `start`.
fn between(text: &str, start: &str, reading: Reading) -> Option<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(start) {
        let inner = &rest[at + start.len()..];
        let Some(end) = inner.find(END) else { break };
        found.push(inner[..end].trim());
        rest = &inner[end + END.len()..];
    }
    match found.as_slice() {
        [] => {}
        [one] => return Some((*one).to_owned()),
        many => return Some(format!("[{}]", many.join(","))),
    }
    if reading == Reading::End {
        let at = text.find(start)?;
        let tail = text[at + start.len()..].trim();
        if tail.starts_with(['{', '[']) {
            // The value that starts it, whatever follows; else all of it, to close.
            return Some(first_value(tail).unwrap_or(tail).to_owned());
        }
    }
    None
}

/// The pieces around `start` that read as JSON (see the module's notes), as one
/// list; `Some("")` when the marker is there but none reads.
fn around(text: &str, start: &str) -> Option<String> {
    if !text.contains(start) {
        return None;
    }
    let mut items: Vec<String> = Vec::new();
    for piece in text.split(start) {
        // A piece opening with `[` counts only when all of it, cut at its last
        // `]`, is one JSON list (live-checked, seed 20261210 #1709:
        // `[{A}]>x{"a": [1]}<|python_tag|>{B}` is B alone).
        if let Some(cut) = cut_json_piece(piece).filter(|cut| cut.starts_with('[')) {
            if let Ok(list) = serde_json::from_str::<Vec<&RawValue>>(cut) {
                items.extend(list.iter().map(|item| item.get().to_owned()));
            }
            continue;
        }
        for value in piece_values(piece) {
            if value.starts_with('[') {
                if let Ok(list) = serde_json::from_str::<Vec<&RawValue>>(value) {
                    items.extend(list.iter().map(|item| item.get().to_owned()));
                }
            } else {
                items.push(value.to_owned());
            }
        }
    }
    Some(if items.is_empty() {
        String::new()
    } else {
        format!("[{}]", items.join(","))
    })
}

/// A piece of text around a marker, read as Dynamo reads it: one that opens with
/// `{` (`[`) is cut at its last `}` (`]`), and the JSON value that starts it is
/// taken, whatever follows (`{…}}` reads `{…}`; llama3_json reads its
/// `<|python_tag|>` pieces so too, live-checked).
pub fn piece_value(piece: &str) -> Option<&str> {
    first_value(cut_json_piece(piece)?)
}

/// The JSON values a piece around a marker gives: the one that starts it (see
/// `piece_value`) and those after it separated by `;`, up to the first thing
/// that is neither (live-checked: `{A};{B}<|python_tag|>{C}` is A, B and C;
/// `{f}, {"y":1}` only f).
pub fn piece_values(piece: &str) -> Vec<&str> {
    let mut values = Vec::new();
    let Some(mut rest) = cut_json_piece(piece) else {
        return values;
    };
    while let Some((value, after)) = super::first_value(rest) {
        values.push(value);
        match after.trim_start().strip_prefix(';') {
            Some(next) => rest = next.trim_start(),
            None => break,
        }
    }
    values
}

/// The JSON value that starts `text`, whatever follows it.
fn first_value(text: &str) -> Option<&str> {
    super::first_value(text).map(|(value, _)| value)
}

/// Dynamo's bare-JSON reading of a forced tool choice's answer (its parse with no
/// start marker and no repair): the text from its first `{` or `[` on, read
/// whole, gives the calls (a `required` answer cut short, `{"name":"f",
/// "parameters":"`, gives none).
pub fn bare_calls(text: &str) -> Vec<(String, String)> {
    let trimmed = text.trim();
    trimmed
        .find(['{', '['])
        .and_then(|at| calls_in(trimmed[at..].trim(), true))
        .unwrap_or_default()
}

/// How Dynamo reads a forced tool choice's answer held to the end of output:
/// its bare JSON reading, else its `default` parse, both without the end of
/// output's repair.
pub fn forced_calls(text: &str) -> Vec<(String, String)> {
    let bare = bare_calls(text);
    if bare.is_empty() {
        parse_whole(text, Reading::Streaming).calls
    } else {
        bare
    }
}

/// The calls in `json`: one call object, or a list's elements that are calls
/// (`empty_list_counts`: a list without calls is still an answer).
fn calls_in(json: &str, empty_list_counts: bool) -> Option<Vec<(String, String)>> {
    if let Some(call) = call(json, &["parameters", "arguments"]) {
        return Some(vec![call]);
    }
    let calls = super::list_calls(json, |item| call(item, &["arguments", "parameters"]))?;
    (empty_list_counts || !calls.is_empty()).then_some(calls)
}

/// A call object: a string `name` and the first of `keys` present, as written.
fn call(json: &str, keys: &[&str]) -> Option<(String, String)> {
    let (name, arguments) = super::call_object(json, keys)?;
    Some((name, arguments?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, reading: Reading) -> (Vec<(String, String)>, String) {
        let p = parse_whole(text, reading);
        (p.calls, p.content)
    }

    fn one(name: &str, args: &str) -> Vec<(String, String)> {
        vec![(name.to_owned(), args.to_owned())]
    }

    #[test]
    fn python_tag_pieces_are_cut_at_their_last_brace() {
        let text = r#"<|python_tag|>{"name":"f","arguments":{}};"#;
        assert_eq!(
            parse(text, Reading::Streaming),
            (one("f", "{}"), String::new())
        );
    }

    #[test]
    fn an_unclosed_marker_is_read_at_the_end_of_output_only() {
        let text = r#"x <|python_tag|>{"name":"f","arguments":{"a":"b"#;
        assert_eq!(parse(text, Reading::Streaming), (vec![], String::new()));
        assert_eq!(
            parse(text, Reading::End),
            (one("f", r#"{"a":"b"}"#), "x".to_owned())
        );
    }

    #[test]
    fn unread_json_after_a_marker_says_the_whole_text_at_the_end() {
        // The text after the marker does not start with a value, so it is no
        // call, and the parser says the text as it was.
        let text = r#"<|python_tag|>{"name":"f","param{"name":"g","arguments":{}}} a"#;
        assert_eq!(parse(text, Reading::End), (vec![], text.to_owned()));
        // A first value that is no call is no call either.
        let text = r#"q <|python_tag|>{"name":"f","x":1} {"name":"g","arguments":{}}"#;
        assert_eq!(parse(text, Reading::End), (vec![], text.to_owned()));
    }

    #[test]
    fn a_block_without_json_says_nothing() {
        assert_eq!(
            parse("<TOOLCALL></TOOLCALL>", Reading::End),
            (vec![], String::new())
        );
        assert_eq!(
            parse("a <TOOLCALL>x", Reading::Streaming),
            (vec![], String::new())
        );
    }

    #[test]
    fn the_first_marker_with_json_wins() {
        let text = r#"<|python_tag|>{bad}<TOOLCALL>[{"name":"f","arguments":{"c":""#;
        assert_eq!(
            parse(text, Reading::End),
            (one("f", r#"{"c":""}"#), "<|python_tag|>{bad}".to_owned())
        );
    }

    #[test]
    fn a_call_needs_a_name_and_arguments() {
        let text = r#"<TOOLCALL>[{"name":"f"},{"name":"g","parameters":[1]}]</TOOLCALL>"#;
        assert_eq!(parse(text, Reading::End), (one("g", "[1]"), String::new()));
        let text = r#"<TOOLCALL>{"name":"f"}</TOOLCALL>"#;
        assert_eq!(parse(text, Reading::End), (vec![], text.to_owned()));
    }

    #[test]
    fn pieces_around_a_marker_give_their_first_value() {
        let text =
            r#"{"name":"f","arguments":{}}, {"y":1} <|python_tag|>{"name":"g","arguments":{}}}"#;
        let calls = [one("f", "{}"), one("g", "{}")].concat();
        assert_eq!(
            parse(text, Reading::Streaming),
            (calls, r#"{"name":"f","arguments":{}}, {"y":1}"#.to_owned())
        );
    }

    #[test]
    fn an_unclosed_marker_gives_its_first_value_at_the_end() {
        let text = "<|python_tag|>{\"name\":\"f\",\"arguments\":{}}\n{\"name\":\"g\"";
        assert_eq!(parse(text, Reading::End), (one("f", "{}"), String::new()));
    }

    #[test]
    fn a_piece_gives_its_values_separated_by_semicolons() {
        let text = r#"{"name":"a","arguments":{}};{"name":"b","arguments":{}}<|python_tag|>{"name":"c","arguments":{}}"#;
        let calls = [one("a", "{}"), one("b", "{}"), one("c", "{}")].concat();
        assert_eq!(parse(text, Reading::Streaming).0, calls);
    }

    #[test]
    fn bare_json_is_read_whole_without_repair() {
        assert_eq!(
            bare_calls(r#"k {"name":"f","arguments":{}}"#),
            one("f", "{}")
        );
        assert!(bare_calls(r#"{"name":"f","parameters":""#).is_empty());
        assert!(bare_calls(r#"{"name":"f","arguments":{}} hi"#).is_empty());
    }

    #[test]
    fn an_invalid_list_is_no_call() {
        let text = r#"<TOOLCALL>[{"name":"f","arguments":{}},]</TOOLCALL>"#;
        assert_eq!(parse(text, Reading::End), (vec![], text.to_owned()));
    }
}
