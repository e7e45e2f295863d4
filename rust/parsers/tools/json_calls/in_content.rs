//! Calls written in the content (Dynamo dialect): a `{"name": ..., "arguments": ...}`
//! object, or a list of them, anywhere in the text, bare or inside a ```` ```json ````
//! fence. Dynamo 1.6.1's JSON families (hermes, llama3_json, mistral, phi4, jamba,
//! nemotron_deci, default) all read them so; measured against its frontend:
//!
//! - the whole JSON value must be complete and valid, with a string `name` and an
//!   `arguments` or `parameters` member (any JSON; its bytes are kept as written);
//!   extra members are ignored; a list counts when every element is such a call;
//! - the whitespace just before a call goes with it; the text after it stays as written;
//! - the first `{` or `[` that does not turn out to be a call ends the search: it and
//!   the rest of the output stay content (markers still open calls);
//! - a call cut off by the end of output is closed (open string, objects, lists) and
//!   kept when it then reads as a call.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{leading_ws, JsonCalls, State};
use crate::parsers::json::Scanned;
use crate::parsers::CallSink;

/// One call object; members other than these are ignored.
#[derive(Deserialize)]
struct CallObject<'a> {
    name: String,
    #[serde(borrow, default)]
    parameters: Option<&'a RawValue>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

/// The calls `json` holds as a whole, or `None` when it is not a call (or list of calls).
fn calls_in(json: &str) -> Option<Vec<(String, &str)>> {
    fn one(text: &str) -> Option<(String, &str)> {
        let call: CallObject = serde_json::from_str(text).ok()?;
        let args = call.parameters.or(call.arguments)?;
        Some((call.name, args.get()))
    }
    if json.starts_with('[') {
        let items: Vec<&RawValue> = serde_json::from_str(json).ok()?;
        if items.is_empty() {
            return None;
        }
        items.into_iter().map(|item| one(item.get())).collect()
    } else {
        one(json).map(|call| vec![call])
    }
}

/// `text` cut off inside a JSON value, closed: an open string ended, open lists and
/// objects closed innermost first.
pub(super) fn closed(text: &str) -> String {
    let mut stack = Vec::new();
    let (mut in_string, mut escape) = (false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escape => escape = false,
                b'\\' => escape = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => stack.push(b'}'),
            b'[' => stack.push(b']'),
            b'}' | b']' => {
                stack.pop();
            }
            _ => {}
        }
    }
    let mut out = String::with_capacity(text.len() + stack.len() + 2);
    out.push_str(text);
    if escape {
        out.push('\\');
    }
    if in_string {
        out.push('"');
    }
    out.extend(stack.iter().rev().map(|&b| b as char));
    out
}

impl JsonCalls {
    /// Whether a bare `{` or `[` in the text may still open a call.
    pub(super) fn calls_in_content(&self) -> bool {
        self.content_calls && !self.content_calls_ended
    }

    /// A possible call starts here: the whitespace before it, then its JSON value.
    pub(super) fn start_in_content(&mut self) {
        self.start_tentative();
        self.content_scan.reset();
        self.content_json_from = None;
        self.state = State::InContent;
    }

    /// Reading a possible call: its leading whitespace, then the JSON value.
    pub(super) fn in_content(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        if self.content_json_from.is_none() {
            let ws = leading_ws(rest);
            if ws > 0 {
                return Some(ws);
            }
            self.content_json_from = Some(self.raw.len());
        }
        match self.content_scan.feed(rest.as_bytes()) {
            Scanned::More => Some(rest.len()),
            Scanned::Done(n) => {
                let from = self.content_json_from.unwrap_or(0);
                let mut json = std::mem::take(&mut self.raw);
                json.push_str(&rest[..n]);
                if self.emit_calls(&json[from..], sink) {
                    self.commit();
                    self.state = State::Text;
                } else {
                    self.raw = json;
                    self.raw.truncate(self.raw.len() - n);
                    self.give_up_in_content();
                }
                Some(n)
            }
            Scanned::Invalid(n, _) => {
                self.give_up_in_content();
                Some(n)
            }
        }
    }

    /// Not a call: what was held is content, and so is every later bare `{` or `[`.
    fn give_up_in_content(&mut self) {
        self.release = true;
        self.content_calls_ended = true;
    }

    /// The output ended inside a possible call: closed, it may still read as one.
    /// Returns whether it did (otherwise the held text is the caller's to release).
    pub(super) fn finish_in_content(&mut self, held: &str, sink: &mut CallSink) -> bool {
        let from = self.content_json_from.unwrap_or(self.raw.len());
        let mut text = std::mem::take(&mut self.raw);
        text.push_str(held);
        let done = from < text.len() && self.emit_calls(&closed(&text[from..]), sink);
        self.raw = text;
        done
    }

    fn emit_calls(&self, json: &str, sink: &mut CallSink) -> bool {
        let Some(calls) = calls_in(json) else {
            return false;
        };
        for (name, args) in calls {
            sink.begin_call(&name, None);
            sink.arguments(args);
            sink.end_call();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_need_a_name_and_arguments() {
        let call = calls_in(r#"{"name": "f", "arguments": { "a" : 1 }, "id": 3}"#).unwrap();
        assert_eq!(call, vec![("f".to_owned(), r#"{ "a" : 1 }"#)]);
        let call = calls_in(r#"{"parameters": "x", "name": "f"}"#).unwrap();
        assert_eq!(call, vec![("f".to_owned(), r#""x""#)]);
        assert!(calls_in(r#"{"name": "f"}"#).is_none());
        assert!(calls_in(r#"{"name": 1, "arguments": {}}"#).is_none());
        assert!(calls_in("[]").is_none());
        assert!(calls_in(r#"[{"name": "f", "arguments": {}}, 1]"#).is_none());
        assert_eq!(
            calls_in(r#"[{"name": "f", "arguments": {}}, {"name": "g", "parameters": []}]"#)
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn cut_values_are_closed() {
        assert_eq!(closed(r#"{"a": {"b": "c"#), r#"{"a": {"b": "c"}}"#);
        assert_eq!(closed(r#"[{"a": "x\"#), r#"[{"a": "x\\"}]"#);
        assert_eq!(closed(r#"{"a": "}{"#), r#"{"a": "}{"}"#);
    }
}
