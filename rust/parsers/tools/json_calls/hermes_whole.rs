//! Dynamo 1.6.1's hermes parser over a whole text, as its tool jail runs it
//! (measured against its frontend; only the pipeline's reference mode uses it):
//!
//! - with `<tool_call>` in the text, the content is the text before the first one;
//!   each block runs from a `<tool_call>` to the next `</tool_call>`, even one
//!   inside a JSON string (`{"tz": "a</tool_call>` is then a broken block); one
//!   block is read as it is, several as the JSON list of them;
//! - no block closed: the text after the first `<tool_call>`, when it starts like
//!   JSON, is read; else the whole text is the JSON, and with a call its content
//!   too (`{"name":"` + `<tool_call>` closed is the call `<tool_call>`);
//! - no `<tool_call>`: the JSON from the first `{` or `[` to the end;
//! - JSON that does not parse is read again closed (open string, lists and
//!   objects: `{"tz":"P` → `{"tz":"P"}`) as [`Repair`] says: never where the jail
//!   ends at `</tool_call>` or a forced choice's streamed answer is read, JSON the
//!   output cut at its end, and any JSON (the list of several blocks too: `[{A},
//!   {"tz": "` → `{"tz": "]"}`) in the unary aggregator's re-read;
//! - a call is an object with a string `name`; its arguments are `parameters`,
//!   else `arguments`, as written (any JSON: `null`, `"x"`), else `{}`; in a list,
//!   elements that are not calls are skipped. JSON must be strict, whole.

use super::in_content::closed;

const START: &str = "<tool_call>";
const END: &str = "</tool_call>";

/// A whole parse: the calls (name, JSON arguments) and the content beside them.
pub struct WholeParse {
    pub calls: Vec<(String, String)>,
    pub content: String,
}

/// Which JSON that does not parse is read again closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repair {
    /// None (the jail's end at `</tool_call>`, a forced choice's streamed answer:
    /// live-checked, `{"city": "` + `</tool_call>` is no call).
    Never,
    /// JSON the end of output left open: after a `<tool_call>` no block closed,
    /// or bare JSON.
    Unclosed,
    /// Any (the unary aggregator's re-read, live-checked: one closed block
    /// missing its last `}` is a call; several are closed as their list).
    Always,
}

/// Parse `text` as Dynamo's hermes parser does (no calls: an empty list).
pub fn parse_whole(text: &str, repair: Repair) -> WholeParse {
    let text = text.trim();
    let mut said_whole = false;
    let (content, json, closable) = match text.find(START) {
        Some(at) => {
            let blocks = blocks(&text[at..]);
            let content = text[..at].trim();
            let tail = text[at + START.len()..].trim();
            match blocks.as_slice() {
                [] if tail.starts_with(['{', '[']) => (content, tail.to_owned(), true),
                [] => {
                    said_whole = true;
                    (content, text.to_owned(), true)
                }
                [one] => (content, (*one).to_owned(), false),
                many => (content, format!("[{}]", many.join(",")), false),
            }
        }
        None => match text.find(['{', '[']) {
            Some(at) => (text[..at].trim(), text[at..].to_owned(), true),
            None => (text, String::new(), false),
        },
    };
    let closable = match repair {
        Repair::Never => false,
        Repair::Unclosed => closable,
        Repair::Always => true,
    };
    let calls = if closable && !json.starts_with(['{', '[']) {
        Vec::new()
    } else {
        calls_in(&json)
            .or_else(|| closable.then(|| calls_in(&closed(&json))).flatten())
            .unwrap_or_default()
    };
    WholeParse {
        content: if said_whole && !calls.is_empty() {
            text
        } else {
            content
        }
        .to_owned(),
        calls,
    }
}

/// A forced choice's answer with `<tool_call>` and no block closed, as Dynamo's
/// unary aggregator reads it again: the whole text's open string and brackets
/// closed, the text before the marker counting (a `"` there opens a string), then
/// read with no repair (live-checked: `hi <tool_call>{"name":"x` and
/// `"" <tool_call>{"name":"x` are the call `x`; `"<tool_call>{"name":"x`, with or
/// without a closing `"`, stays text). Brackets before the marker are not closed
/// (live-checked: `ok [ <tool_call>{"name":"x` is the call `x`, content `ok [`).
pub fn parse_closed_whole(text: &str) -> WholeParse {
    let text = text.trim();
    let (before, from_marker) = text.split_at(text.find(START).unwrap_or(0));
    let quoted = closed(before)[before.len()..]
        .trim_start_matches('\\')
        .starts_with('"');
    let text = if quoted {
        closed(text)
    } else {
        format!("{before}{}", closed(from_marker))
    };
    parse_whole(&text, Repair::Never)
}

/// Whether the text's only closed block is empty: Dynamo's parse then says nothing,
/// not even the text before it (live-checked: a guessed jail's `{x<tool_call></tool_call>`
/// says nothing; two blocks are read as their list, never empty).
pub fn lone_empty_block(text: &str) -> bool {
    text.find(START)
        .is_some_and(|at| matches!(blocks(&text[at..]).as_slice(), [""]))
}

/// The trimmed insides of the closed blocks, each to the first end tag after it.
fn blocks(mut text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    while let Some(at) = text.find(START) {
        let inner = &text[at + START.len()..];
        let Some(end) = inner.find(END) else { break };
        found.push(inner[..end].trim());
        text = &inner[end + END.len()..];
    }
    found
}

/// The calls in a JSON value: one call object, or a list (its non-calls skipped).
fn calls_in(json: &str) -> Option<Vec<(String, String)>> {
    if let Some(call) = call(json) {
        return Some(vec![call]);
    }
    super::list_calls(json, call)
}

fn call(json: &str) -> Option<(String, String)> {
    let (name, arguments) = super::call_object(json, &["parameters", "arguments"])?;
    Some((name, arguments.unwrap_or_else(|| "{}".to_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(text: &str) -> Vec<(String, String)> {
        parse_whole(text, Repair::Unclosed).calls
    }

    fn one(name: &str, args: &str) -> Vec<(String, String)> {
        vec![(name.to_owned(), args.to_owned())]
    }

    #[test]
    fn an_end_tag_inside_a_string_breaks_the_block() {
        assert!(
            calls(r#"<tool_call>{"name":"f","arguments":{"a":"x</tool_call>"}}</tool_call>"#)
                .is_empty()
        );
    }

    #[test]
    fn an_unclosed_block_is_closed() {
        assert_eq!(
            calls(r#"<tool_call>{"name":"f","arguments":{"a":"P "#),
            one("f", r#"{"a":"P"}"#)
        );
        assert_eq!(calls(r#"<tool_call>{"name":""#), one("", "{}"));
        assert!(calls(r#"<tool_call>{"name":"f","arguments":{},"#).is_empty());
        assert!(calls("<tool_call>hello").is_empty());
        let closed_whole = |text| parse_closed_whole(text).calls;
        assert_eq!(closed_whole(r#"hi <tool_call>{"name":"x"#), one("x", "{}"));
        assert!(closed_whole(r#""<tool_call>{"name":"x"#).is_empty());
        assert!(closed_whole(r#""<tool_call>{"name":"x""#).is_empty());
        let parse = parse_closed_whole(r#"ok [ <tool_call>{"name":"x","arguments":{"a":"b"#);
        assert_eq!(parse.calls, one("x", r#"{"a":"b"}"#));
        assert_eq!(parse.content, "ok [");
        // Live-checked: the whole text is read when no JSON follows the marker.
        let parse = parse_whole(r#"{"name":"a<tool_call>x"#, Repair::Unclosed);
        assert_eq!(parse.calls, one("a<tool_call>x", "{}"));
        assert_eq!(parse.content, r#"{"name":"a<tool_call>x"#);
    }

    #[test]
    fn repair_says_which_json_is_closed() {
        let open = r#"{"name":"f","arguments":{"a": ""#;
        assert!(parse_whole(open, Repair::Never).calls.is_empty());
        assert_eq!(
            parse_whole(open, Repair::Unclosed).calls,
            one("f", r#"{"a": ""}"#)
        );
        let block = r#"hi <tool_call>{"name":"f","arguments":{"a":"x"}</tool_call>"#;
        assert!(parse_whole(block, Repair::Unclosed).calls.is_empty());
        let parse = parse_whole(block, Repair::Always);
        assert_eq!(parse.calls, one("f", r#"{"a":"x"}"#));
        assert_eq!(parse.content, "hi");
        let list = r#"<tool_call>{"name":"f"}</tool_call><tool_call>{"name":"g","arguments":{"a": "</tool_call>"#;
        assert!(parse_whole(list, Repair::Never).calls.is_empty());
        assert_eq!(
            parse_whole(list, Repair::Always).calls,
            [one("f", "{}"), one("g", r#"{"a": "]"}"#)].concat()
        );
    }

    #[test]
    fn arguments_are_kept_as_written() {
        assert_eq!(
            calls(r#"<tool_call>{"name":"f","arguments":null}</tool_call>"#),
            one("f", "null")
        );
        assert_eq!(
            calls(r#"<tool_call>{"name":"f"}</tool_call>"#),
            one("f", "{}")
        );
        assert_eq!(
            calls(
                r#"<tool_call>{"name":"f","arguments":{"a": 1},"parameters":{"b": 2}}</tool_call>"#
            ),
            one("f", r#"{"b": 2}"#)
        );
        assert!(calls(r#"<tool_call>{"name":1,"arguments":{}}</tool_call>"#).is_empty());
    }

    #[test]
    fn list_elements_that_are_not_calls_are_skipped() {
        let parsed =
            calls(r#"<tool_call>[{"name":"f","arguments":{}}, 3, {"name":"g"}]</tool_call>"#);
        assert_eq!(parsed, [one("f", "{}"), one("g", "{}")].concat());
    }

    #[test]
    fn content_is_the_text_before_the_first_block() {
        let parse = parse_whole(
            r#" hi <tool_call>{"name":"f"}</tool_call> x "#,
            Repair::Never,
        );
        assert_eq!(parse.content, "hi");
        assert_eq!(parse.calls, one("f", "{}"));
    }
}
