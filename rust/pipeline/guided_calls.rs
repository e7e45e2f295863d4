//! A forced `tool_choice` with no tool-call parser: the engine decoded guided JSON
//! (`[{"name", "parameters"}, ...]` for `required`, the arguments object for a named
//! tool), and Dynamo 1.6.1 turns that JSON into calls. Streaming, each call's
//! arguments go out as their raw text grows; in an array the brace that closes them,
//! when it comes alone, waits until their element closes too. An answer that does not open with the JSON
//! is plain text.
//!
//! Live-checked beyond the guided shape: an element's arguments are its `parameters`
//! or its `arguments` object (a string value is no call), and a `required` answer
//! that is call objects without the array (`{"name", "arguments"}`, one or several)
//! streams the same way.

use crate::parsers::dialect::Dialect;
use crate::parsers::CallDelta;

/// How the answer opened: undecided while it is only whitespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Undecided,
    Json,
    Text,
}

/// One call found in the JSON text so far.
#[derive(Debug, Default)]
struct Span {
    name: Option<String>,
    /// Byte range of the arguments object in the text; `end` once it closed.
    start: Option<usize>,
    end: Option<usize>,
    /// The call's whole JSON (its array element, or the named arguments) closed.
    closed: bool,
}

/// The guided-JSON answer of one choice.
pub struct GuidedCalls {
    /// The named tool, or `None` for `required` (names come from the array).
    named: Option<String>,
    text: String,
    shape: Shape,
    /// Per call index: its id and how many bytes of its arguments went out (`None`
    /// for an element that is no call: its index stays taken).
    sent: Vec<Option<(String, usize)>>,
}

impl GuidedCalls {
    pub fn new(named: Option<String>) -> Self {
        Self {
            named,
            text: String::new(),
            shape: Shape::Undecided,
            sent: Vec::new(),
        }
    }

    /// Take one step of answer text; returns the shape the answer has now.
    pub fn feed(&mut self, piece: &str) -> Shape {
        self.text.push_str(piece);
        if self.shape == Shape::Undecided {
            let named = self.named.is_some();
            self.shape = match self.text.trim_start().chars().next() {
                None => Shape::Undecided,
                Some('{') => Shape::Json,
                Some('[') if !named => Shape::Json,
                Some(_) => Shape::Text,
            };
        }
        self.shape
    }

    /// All the text taken so far (what goes out when the answer is not the JSON).
    pub fn take_text(&mut self) -> String {
        std::mem::take(&mut self.text)
    }

    /// The arguments' new fragments since the last call (streaming).
    pub fn fragments(&mut self, ending: bool, out: &mut Vec<CallDelta>) {
        for (index, span) in self.spans().into_iter().enumerate() {
            let (Some(start), Some(name)) = (span.start, span.name) else {
                continue;
            };
            let mut end = span.end.unwrap_or(self.text.len());
            if self.sent.len() <= index {
                self.sent.resize(index + 1, None);
            }
            let first = self.sent[index].is_none();
            let (id, done) =
                self.sent[index].get_or_insert_with(|| (Dialect::Dynamo.new_call_id(), start));
            // The closing brace waits for its element only when it is all that is
            // new (`"}`, ` }`, `}}` or `{}` go out at once; live-checked).
            if span.end.is_some() && !span.closed && !ending && end - *done == 1 {
                end -= 1;
            }
            if end <= *done && !first {
                continue;
            }
            out.push(CallDelta {
                index,
                id: first.then(|| id.clone()),
                name: first.then_some(name),
                arguments: self.text[*done..end].to_owned(),
            });
            *done = end;
        }
    }

    /// A call's first fragment went out (streaming).
    pub fn released_any(&self) -> bool {
        self.sent.iter().any(Option::is_some)
    }

    /// Where the guided JSON value ended, once it closed: a named choice's object or a
    /// `required` array (bare call objects have no end: the next one may follow).
    /// Dynamo streams what follows as under the `auto` tool jail (live-checked).
    pub fn closed_at(&self) -> Option<usize> {
        let start = self.text.len() - self.text.trim_start().len();
        match (self.text[start..].chars().next(), &self.named) {
            // Only a value that is JSON (`{""}` is none: what follows is dropped).
            (Some('{'), Some(_)) | (Some('['), None) => closing(&self.text, start).filter(|&end| {
                serde_json::from_str::<serde::de::IgnoredAny>(&self.text[start..end]).is_ok()
            }),
            _ => None,
        }
    }

    /// The answer so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// A call went out at `index` (streaming).
    pub fn sent_at(&self, index: usize) -> bool {
        self.sent.get(index).is_some_and(Option::is_some)
    }

    /// The text after `closed_at`, and how many call indexes the JSON took.
    pub fn tail(&self, at: usize) -> (&str, usize) {
        (&self.text[at..], self.spans().len())
    }

    /// A `required` answer that is exactly one whole call object, no array around it
    /// and nothing after it: Dynamo's last chunk then says `"content":""`
    /// (live-checked, mistral; `{…} hi`, `{…}{…}`, a cut object or an array: `{}`).
    pub fn is_one_bare_call(&self) -> bool {
        self.named.is_none()
            && matches!(
                serde_json::from_str::<serde_json::Value>(&self.text),
                Ok(serde_json::Value::Object(_))
            )
    }

    /// Every call whole (unary).
    pub fn whole(&self, out: &mut Vec<CallDelta>) {
        for (index, span) in self.spans().into_iter().enumerate() {
            let (Some(start), Some(name)) = (span.start, span.name) else {
                continue;
            };
            out.push(CallDelta {
                index,
                id: Some(Dialect::Dynamo.new_call_id()),
                name: Some(name),
                arguments: self.text[start..span.end.unwrap_or(self.text.len())].to_owned(),
            });
        }
    }

    /// The calls in the text so far.
    fn spans(&self) -> Vec<Span> {
        if let Some(name) = &self.named {
            let start = self.text.find('{');
            let end = start.and_then(|s| closing(&self.text, s));
            return vec![Span {
                name: Some(name.clone()),
                start,
                end,
                closed: end.is_some(),
            }];
        }
        // Call objects without the array are read as its elements.
        let call_depth = if self.text.trim_start().starts_with('{') {
            1
        } else {
            2
        };
        elements(&self.text, call_depth)
    }
}

/// The end (exclusive) of the JSON object or array opening at `start`, once it closed.
fn closing(text: &str, start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_str = false;
    let mut escaped = false;
    for (i, b) in text.bytes().enumerate().skip(start) {
        if in_str {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The `{"name", "parameters" | "arguments"}` calls of a `required` answer, as far as
/// it goes: the elements of an array (call objects at depth 2), or bare call objects
/// one after another (depth 1).
fn elements(text: &str, call_depth: usize) -> Vec<Span> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let mut depth = 0usize;
    let mut key: Option<String> = None;
    let mut expect_key = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' => {
                let Some(end) = string_end(bytes, i) else {
                    break;
                };
                if depth == call_depth {
                    let value: Option<String> = serde_json::from_str(&text[i..end]).ok();
                    if expect_key {
                        // A key needs its `:` and a value that starts like JSON
                        // (`{"name""",…` and `{"name":"","parameters":e""{}` are no
                        // call: the answer is text; live-checked).
                        let after = text[end..].trim_start();
                        let starts = after.strip_prefix(':').map(|v| starts_json(v.trim_start()));
                        match starts {
                            Some(Some(true)) => {}
                            Some(None) => break,
                            None if after.is_empty() => break,
                            _ => {
                                spans.pop();
                                break;
                            }
                        }
                        key = value;
                        expect_key = false;
                    } else if key.as_deref() == Some("name") {
                        if let Some(span) = spans.last_mut() {
                            let span: &mut Span = span;
                            span.name = value;
                        }
                    }
                }
                i = end;
                continue;
            }
            b'{' | b'[' if depth == call_depth => {
                let is_args =
                    b == b'{' && matches!(key.as_deref(), Some("parameters" | "arguments"));
                let end = closing(text, i);
                if is_args {
                    if let Some(span) = spans.last_mut() {
                        span.start = Some(i);
                        span.end = end;
                    }
                }
                match end {
                    Some(end) => {
                        i = end;
                        continue;
                    }
                    None => break,
                }
            }
            b'{' | b'[' => {
                depth += 1;
                if depth == call_depth {
                    spans.push(Span::default());
                    expect_key = true;
                }
            }
            b'}' | b']' => {
                if depth == call_depth {
                    if let Some(span) = spans.last_mut() {
                        span.closed = true;
                    }
                }
                depth = depth.saturating_sub(1);
            }
            b',' if depth == call_depth => expect_key = true,
            _ => {}
        }
        i += 1;
    }
    spans
}

/// Whether `text` starts like a JSON value (`None`: too little of it yet): a
/// string, object, array or number, or a literal as far as it goes (`fa`, not `fl`).
fn starts_json(text: &str) -> Option<bool> {
    let literal = match text.bytes().next()? {
        b'"' | b'{' | b'[' | b'-' | b'0'..=b'9' => return Some(true),
        b't' => "true",
        b'f' => "false",
        b'n' => "null",
        _ => return Some(false),
    };
    let word = text.len()
        - text
            .trim_start_matches(|c: char| c.is_ascii_alphabetic())
            .len();
    let word = &text[..word];
    if !literal.starts_with(word) {
        Some(false)
    } else if word.len() < literal.len() && word.len() == text.len() {
        None
    } else {
        Some(word.len() == literal.len())
    }
}

/// The end (exclusive) of the string literal opening at `start`, once it closed.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(start + 1) {
        match b {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'"' => return Some(i + 1),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_start_like_json_or_wait() {
        for text in [r#""a"#, "{", "[", "-", "7", "true", "false}", "null,"] {
            assert_eq!(starts_json(text), Some(true), "{text}");
        }
        for text in ["e\"\"{}", "fl{", "tru}", "truex", "x"] {
            assert_eq!(starts_json(text), Some(false), "{text}");
        }
        for text in ["", "f", "fa", "nul"] {
            assert_eq!(starts_json(text), None, "{text}");
        }
    }

    #[test]
    fn required_array_yields_each_element_arguments() {
        let text = r#" [{"name": "a", "parameters": {"x": "}"}}, {"name": "b", "parameters": {}}]"#;
        let spans = elements(text, 2);
        assert_eq!(spans.len(), 2);
        let args: Vec<_> = spans
            .iter()
            .map(|s| {
                (
                    s.name.clone().unwrap(),
                    &text[s.start.unwrap()..s.end.unwrap()],
                )
            })
            .collect();
        assert_eq!(args, [("a".into(), r#"{"x": "}"}"#), ("b".into(), "{}")]);
    }

    #[test]
    fn closing_brace_waits_for_its_element() {
        let mut calls = GuidedCalls::new(None);
        let mut out = Vec::new();
        for piece in ["[{\"name\": \"f\", \"parameters\": {\"", "x\": 1}", "}]"] {
            assert_eq!(calls.feed(piece), Shape::Json);
            calls.fragments(false, &mut out);
        }
        let args: Vec<_> = out.iter().map(|c| c.arguments.as_str()).collect();
        assert_eq!(args, ["{\"", "x\": 1", "}"]);
        assert_eq!(out[0].name.as_deref(), Some("f"));
        assert!(out[1].id.is_none() && out[1].name.is_none());
    }

    #[test]
    fn named_arguments_close_at_once() {
        let mut calls = GuidedCalls::new(Some("f".into()));
        let mut out = Vec::new();
        for piece in ["{\"", "x\": 1}"] {
            calls.feed(piece);
            calls.fragments(false, &mut out);
        }
        let args: Vec<_> = out.iter().map(|c| c.arguments.as_str()).collect();
        assert_eq!(args, ["{\"", "x\": 1}"]);
    }

    #[test]
    fn text_before_the_json_is_not_a_call() {
        let mut calls = GuidedCalls::new(None);
        assert_eq!(calls.feed("  \n"), Shape::Undecided);
        assert_eq!(calls.feed("Hi ["), Shape::Text);
    }

    #[test]
    fn a_key_without_its_colon_is_no_call() {
        assert!(elements(r#"{"name""","arguments"{"#, 1).is_empty());
        assert_eq!(elements(r#"{"name" : "f", "arguments": {}}"#, 1).len(), 1);
    }

    #[test]
    fn a_bare_object_that_is_no_call_keeps_its_index() {
        let mut calls = GuidedCalls::new(None);
        calls.feed(r#"{"n": 2}<tool_call>{"name":"f","arguments":{}}"#);
        let mut out = Vec::new();
        calls.fragments(true, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].index, out[0].arguments.as_str()), (1, "{}"));
        assert!(calls.sent_at(1) && !calls.sent_at(0));
        assert_eq!(calls.closed_at(), None);
    }

    #[test]
    fn the_guided_value_ends_where_it_closes_as_json() {
        let mut named = GuidedCalls::new(Some("f".into()));
        named.feed(r#" {"a": 1} hi"#);
        assert_eq!(named.closed_at(), Some(9));
        assert_eq!(named.tail(9), (" hi", 1));
        let mut broken = GuidedCalls::new(Some("f".into()));
        broken.feed(r#"{""}}"#);
        assert_eq!(broken.closed_at(), None);
    }
}
