//! Dynamo 1.6.1's basic JSON parser over a whole text, as its tool jail runs it
//! for the single-marker JSON families (`llama3_json`'s `<|python_tag|>`,
//! `mistral`'s `[TOOL_CALLS]`); measured against its frontend, only the
//! pipeline's reference mode uses it:
//!
//! - with the marker in the text, the content is the trimmed text before the
//!   first one; each piece around markers that starts with `{` (`[`) is cut at
//!   its last `}` (`]`) and gives the JSON value that starts it (`{A}}` gives
//!   `{A}`; a list gives its elements, as written);
//!   JSON the output cut short is no call here (`<|python_tag|>{"name":"f","ar`),
//!   and no JSON at all leaves no content either;
//! - without it, the JSON runs from the first `{` or `[` to the end, the text
//!   before it is the content; JSON cut short is closed (open string, lists and
//!   objects) and read again;
//! - a call is an object with a string `name` and `parameters`, else `arguments`
//!   (any JSON, as written); in a list, elements that are not calls are
//!   skipped, and a list that parses says only the text before it, calls or not
//!   (`x [1]` → `x`).

use serde_json::value::RawValue;

use super::default_whole::piece_values;
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
    // Dynamo's mistral normal text keeps the space before the marker (its
    // `try_parse_normal_text`; the text was trimmed as a whole only).
    WholeParse {
        calls: items.into_iter().filter_map(call).collect(),
        content: Some(text[..at].to_owned()),
    }
}

const MISTRAL_START: &str = "[TOOL_CALLS]";
const MISTRAL_END: &str = "[/TOOL_CALLS]";

/// Dynamo 1.6.1's mistral parse of a whole text (its `dynamo-parsers` 10.0.7):
/// the calls and the normal text. `at_end`: the end-of-output reading, which
/// recovers more (the JSON after the first marker read whole, else its
/// leading whole objects; JSON cut short closed; markers stripped).
///
/// - `[TOOL_CALLS]…[/TOOL_CALLS]` pairs give their insides (several: a list);
///   at the end only, without a pair, the text after the first marker when it
///   opens with `{`/`[`; else every piece between markers: one opening with
///   `{` gives its `;`-separated objects, one opening with `[` is cut at its
///   last `]` and gives its elements (`[TOOL_CALLS]x[TOOL_CALLS][{…}]` is a call);
/// - no marker: the JSON from the first `{`/`[` on, the text before it trimmed;
/// - the normal text of marked text is the text before the first marker, its
///   trailing space kept; a marker with no JSON makes it empty, and so does an
///   end marker (or, at the end, any marker) once nothing parsed;
/// - a list's call objects take `arguments` before `parameters`, a lone
///   object the other way round; arguments as written.
pub fn parse_mistral(text: &str, at_end: bool) -> (Vec<(String, String)>, String) {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return (Vec::new(), String::new());
    }
    let marked = trimmed.find(MISTRAL_START);
    let (json, normal, no_json): (std::borrow::Cow<str>, &str, bool) = match marked {
        None => match trimmed.find(['{', '[']) {
            Some(at) => (trimmed[at..].trim().into(), trimmed[..at].trim(), false),
            None => (trimmed.into(), trimmed, false),
        },
        Some(at) => {
            let before = &trimmed[..at];
            match paired(trimmed).or_else(|| {
                let tail = trimmed[at + MISTRAL_START.len()..].trim();
                (at_end && tail.starts_with(['{', '['])).then(|| tail.to_owned())
            }) {
                Some(json) => (json.into(), before, false),
                None => {
                    let items = piece_items(trimmed);
                    if items.is_empty() {
                        (String::new().into(), before, true)
                    } else {
                        (format!("[{}]", items.join(",")).into(), before, false)
                    }
                }
            }
        }
    };
    let json = json.as_ref();
    if let Some(calls) = mistral_calls(json) {
        return (calls, normal.to_owned());
    }
    if at_end && marked.is_some() && !trimmed.contains(MISTRAL_END) {
        let leading = leading_objects(json);
        let calls = if leading.is_empty() {
            Vec::new()
        } else {
            mistral_calls(&format!("[{}]", leading.join(","))).unwrap_or_default()
        };
        return (calls, normal.to_owned());
    }
    if at_end {
        if let Some(calls) = mistral_calls(&closed(json)).filter(|c| !c.is_empty()) {
            return (calls, normal.to_owned());
        }
    }
    if no_json {
        return (Vec::new(), String::new());
    }
    let has_marker = trimmed.contains(MISTRAL_START) || trimmed.contains(MISTRAL_END);
    if has_marker && (at_end || trimmed.contains(MISTRAL_END)) {
        let mut payload = json.trim();
        while let Some(rest) = payload.strip_prefix(MISTRAL_START) {
            payload = rest.trim();
        }
        while let Some(rest) = payload.strip_suffix(MISTRAL_END) {
            payload = rest.trim();
        }
        return (mistral_calls(payload).unwrap_or_default(), String::new());
    }
    (Vec::new(), trimmed.to_owned())
}

/// The insides of every `[TOOL_CALLS]…[/TOOL_CALLS]` pair, trimmed (several
/// joined as a list).
fn paired(text: &str) -> Option<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(MISTRAL_START) {
        let inside = &rest[at + MISTRAL_START.len()..];
        let Some(end) = inside.find(MISTRAL_END) else {
            break;
        };
        found.push(inside[..end].trim());
        rest = &inside[end + MISTRAL_END.len()..];
    }
    match found.len() {
        0 => None,
        1 => Some(found[0].to_owned()),
        _ => Some(format!("[{}]", found.join(","))),
    }
}

/// The JSON values of the pieces between markers, as written: a piece opening
/// with `{` gives its objects up to the first not followed by `;`, one opening
/// with `[` its elements once cut at its last `]` it is a list.
fn piece_items(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    for piece in text.split(MISTRAL_START).map(str::trim) {
        if piece.starts_with('{') {
            let mut rest = piece;
            while let Some((value, after)) = first_value(rest) {
                items.push(value);
                match after.trim_start().strip_prefix(';') {
                    Some(next) => rest = next.trim_start(),
                    None => break,
                }
            }
        } else if let Some(list) = cut_json_piece(piece).filter(|p| p.starts_with('[')) {
            if let Ok(elements) = serde_json::from_str::<Vec<&serde_json::value::RawValue>>(list) {
                items.extend(elements.into_iter().map(|e| e.get()));
            }
        }
    }
    items
}

/// The whole objects a cut list (or object run) starts with, up to the first
/// that is not a whole object followed by `,`.
fn leading_objects(json: &str) -> Vec<&str> {
    let trimmed = json.trim();
    let mut rest = trimmed.strip_prefix('[').unwrap_or(trimmed).trim_start();
    let mut found = Vec::new();
    while let Some((value, after)) = first_value(rest) {
        if !value.starts_with('{') {
            break;
        }
        found.push(value);
        match after.trim_start().strip_prefix(',') {
            Some(next) => rest = next.trim_start(),
            None => break,
        }
    }
    found
}

/// mistral's call shapes: a list's call objects (`arguments` first), or one
/// call object (`parameters` first); `None` when `json` is neither.
fn mistral_calls(json: &str) -> Option<Vec<(String, String)>> {
    if let Some(calls) = super::list_calls(json, |item| {
        let (name, arguments) = super::call_object(item, &["arguments", "parameters"])?;
        Some((name, arguments?))
    }) {
        return Some(calls);
    }
    match super::call_object(json, &["parameters", "arguments"]) {
        Some((name, Some(arguments))) => Some(vec![(name, arguments)]),
        _ => None,
    }
}

/// The calls in a forced tool choice's held answer with `marker` in it, as
/// Dynamo's mistral reads it at the end of output (live-checked): every piece
/// around a marker that opens with `[` is read to its last `]`, one that opens
/// with `{` as its `;`-separated values, whatever follows them (seed 20261241
/// #3638: `{A}[{B}][TOOL_CALLS]` is A); a list's elements and all arguments as
/// written. `None` without the marker.
pub fn marked_as_written(text: &str, marker: &str) -> Option<Vec<(String, String)>> {
    text.find(marker)?;
    let mut calls = Vec::new();
    for piece in text.split(marker).map(str::trim) {
        if piece.starts_with('{') {
            calls.extend(piece_values(piece).into_iter().filter_map(call));
        } else if let Some(list) = cut_json_piece(piece) {
            calls.extend(list_calls(list).unwrap_or_default());
        }
    }
    Some(calls)
}

/// The calls in a forced tool choice's held answer with a `[TOOL_CALLS]…[/TOOL_CALLS]`
/// pair in it, as Dynamo's mistral reads it at the end of output (live-checked):
/// only the pairs' insides (several: one list), arguments as written
/// (`[TOOL_CALLS][{A}][/TOOL_CALLS] x` is A; `[TOOL_CALLS]x[TOOL_CALLS][{A}][/TOOL_CALLS]`
/// none). `None` without a pair.
pub fn paired_as_written(text: &str) -> Option<Vec<(String, String)>> {
    let json = paired(text)?;
    Some(mistral_calls(&json).unwrap_or_default())
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
    // The pieces around the marker that give a JSON value (the value that starts
    // the piece cut at its last bracket, `{A}}` gives `{A}`), joined as one list:
    // a list's elements and an object as written.
    let mut items = Vec::new();
    for piece in text.split(marker) {
        // A piece opening with `[` counts only when, cut at its last `]`, it is one
        // list (live-checked: `[{A}][{B}]<|python_tag|>{C}` and `<|python_tag|>[{A}]]`
        // give no call from it).
        if let Some(list) = cut_json_piece(piece).filter(|p| p.starts_with('[')) {
            if let Ok(list) = serde_json::from_str::<Vec<&RawValue>>(list) {
                items.extend(list.iter().map(|item| item.get()));
            }
            continue;
        }
        for json in piece_values(piece) {
            if json.starts_with('[') {
                if let Ok(list) = serde_json::from_str::<Vec<&RawValue>>(json) {
                    items.extend(list.iter().map(|item| item.get()));
                }
            } else {
                items.push(json);
            }
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
    fn a_marked_piece_gives_the_value_that_starts_it() {
        assert_eq!(
            parse(r#"<|python_tag|>{"name":"a","arguments":{}}}"#),
            (one("a", "{}"), Some("".into()))
        );
        // Text before the marker is a piece too; the content is that text.
        assert_eq!(
            parse(r#"{"name":"a","arguments":{}}}<|python_tag|>"#),
            (
                one("a", "{}"),
                Some(r#"{"name":"a","arguments":{}}}"#.into())
            )
        );
        assert_eq!(
            parse(r#"{"a":1} x}<|python_tag|>"#),
            (vec![], Some(r#"{"a":1} x}"#.into()))
        );
    }

    #[test]
    fn a_list_piece_must_be_one_list() {
        let (a, c) = (
            r#"{"name":"a","arguments":{}}"#,
            r#"{"name":"c","arguments":{"x":1}}"#,
        );
        assert_eq!(
            parse(&format!("[{a}][{a}]{TAG}{c}")),
            (one("c", r#"{"x":1}"#), Some(format!("[{a}][{a}]")))
        );
        assert_eq!(
            parse(&format!("{TAG}[{a}]]")),
            (vec![], Some(String::new()))
        );
        assert_eq!(
            parse(&format!("{TAG}[{a}] x")),
            (one("a", "{}"), Some(String::new()))
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
    fn mistral_parse_streaming_and_at_the_end() {
        let c = r#"[{"name":"c","arguments":{"x": 1}}]"#;
        let c_call = one("c", r#"{"x": 1}"#);
        // Streaming: every piece between markers; at the end the JSON after the
        // first marker is read whole, then its leading whole objects.
        let cut = format!("[TOOL_CALLS][1][TOOL_CALLS]{c}");
        assert_eq!(parse_mistral(&cut, false), (c_call.clone(), String::new()));
        assert_eq!(parse_mistral(&cut, true), (vec![], String::new()));
        let after_text = format!("ok [TOOL_CALLS]x[TOOL_CALLS]{c}");
        assert_eq!(
            parse_mistral(&after_text, true),
            (c_call.clone(), "ok ".into())
        );
        // A list's leading whole objects, at the end only.
        let open = r#"[TOOL_CALLS][{"name":"a","parameters":{}}, {"name":"b""#;
        assert_eq!(parse_mistral(open, true), (one("a", "{}"), String::new()));
        assert_eq!(parse_mistral(open, false), (vec![], String::new()));
        // The `[ARGS]` form is no call: the text before the marker.
        let args = "hi [TOOL_CALLS]f[ARGS]{}";
        assert_eq!(parse_mistral(args, true), (vec![], "hi ".into()));
        assert_eq!(parse_mistral(args, false), (vec![], String::new()));
        // Pairs with the end marker; markers stripped once nothing parsed.
        let paired = format!("x [TOOL_CALLS]{c}[/TOOL_CALLS] y");
        assert_eq!(parse_mistral(&paired, false), (c_call, "x ".into()));
        assert_eq!(
            parse_mistral("[TOOL_CALLS]nope[/TOOL_CALLS]", false),
            (vec![], String::new())
        );
        // Bare JSON: the trimmed text before it; no call keeps the whole text.
        assert_eq!(
            parse_mistral(r#"x {"a": 1}"#, true),
            (vec![], r#"x {"a": 1}"#.into())
        );
    }

    #[test]
    fn held_answer_values_end_at_the_first_non_separator() {
        let (a, b) = (
            r#"{"name":"a","arguments":{}}"#,
            r#"{"name":"b","arguments":{"c":1}}"#,
        );
        let read = |text: &str| parse_whole(text, TAG, false).calls;
        let both = [one("a", "{}"), one("b", r#"{"c":1}"#)].concat();
        assert_eq!(read(&format!("x{TAG}{a}; {b};")), both.clone());
        assert_eq!(read(&format!("{TAG}{a}{TAG} {b}")), both.clone());
        assert_eq!(read(&format!("{TAG}{a}{b}")), one("a", "{}"));
        assert_eq!(read(&format!("{TAG}{a} x; {b}")), one("a", "{}"));
        assert_eq!(read(&format!("{TAG}x; {b}")), vec![]);
        // The piece before the first marker is read too.
        assert_eq!(read(&format!("{a} x {TAG}<b>{b}")), one("a", "{}"));
        assert_eq!(read(&format!("[{a}]```{b}```{TAG}{b}")), both);
    }

    #[test]
    fn held_answer_pieces_are_read_as_written() {
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
        // A `{` piece gives its `;`-separated objects, whatever follows them.
        assert_eq!(
            read(&format!("{a}[{b}][TOOL_CALLS]")),
            Some(one("a", r#"{"x": 1}"#))
        );
        assert_eq!(
            read(&format!("{a}; {b}}} x[TOOL_CALLS]")),
            Some([one("a", r#"{"x": 1}"#), one("b", "{}")].concat())
        );
    }

    #[test]
    fn held_answer_pairs_are_read_alone() {
        let a = r#"{"name":"a","arguments":{"x": 1}}"#;
        let read = |text: &str| paired_as_written(text);
        assert_eq!(
            read(&format!("[TOOL_CALLS][{a}][/TOOL_CALLS] tail")),
            Some(one("a", r#"{"x": 1}"#))
        );
        assert_eq!(
            read(&format!("[TOOL_CALLS]x[TOOL_CALLS][{a}][/TOOL_CALLS]")),
            Some(vec![])
        );
        assert_eq!(read(&format!("[TOOL_CALLS][{a}]")), None);
    }

    #[test]
    fn calls_need_a_name_and_arguments() {
        assert_eq!(
            parse(r#"<|python_tag|>[{"name":"a","arguments":{"b": 1}}, {"name":"c"}]"#),
            (one("a", r#"{"b": 1}"#), Some("".into()))
        );
        assert_eq!(
            parse(r#"{"name":"a","parameters":{"x": 1},"arguments":{}}"#),
            (one("a", r#"{"x": 1}"#), Some("".into()))
        );
        assert_eq!(parse(r#"{"name":"a"}"#), (vec![], None));
    }
}
