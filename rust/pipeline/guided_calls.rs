//! A forced `tool_choice` with no tool-call parser: the engine decoded guided JSON
//! (`[{"name", "parameters"}, ...]` for `required`, the arguments object for a named
//! tool), and Dynamo 1.6.1 turns that JSON into calls. Streaming, each call's
//! arguments go out as their raw text grows. An answer that does not open with the
//! JSON is plain text.
//!
//! Dynamo's guided streaming is a forward scan over the answer as it grows (facts
//! from its `guided_stream` lexer, live-checked): a call object's keys are read at
//! its depth, each waiting for its `:` (a string in that place is skipped, so
//! `{"name":"","parameters""ge":{` still opens the arguments); a call goes out once
//! its string `name` is known and its `parameters`/`arguments` value opened with
//! `{`; its bytes go out up to the object's closing `}` at each step, the element
//! around it need not close. An element whose name or arguments take another kind
//! of value (`"parameters":e`), or that names both spellings, never goes out, but
//! keeps its index. A `required` answer that is call objects without the array
//! (`{"name", "arguments"}`, one or several) streams the same way.

use crate::parsers::dialect::Dialect;
use crate::parsers::CallDelta;

/// How the answer opened: undecided while it is only whitespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Undecided,
    Json,
    Text,
}

/// One call the scan let out: its arguments are `text[start..bound]` so far.
#[derive(Debug, Clone)]
struct Call {
    name: String,
    start: usize,
    bound: usize,
}

/// Where the scan sits in a call object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Key,
    Colon,
    Value,
}

/// The element (call object) being read.
#[derive(Debug, Default)]
struct Element {
    name: Option<String>,
    args_start: Option<usize>,
    args_end: Option<usize>,
    in_args: bool,
    alias_seen: bool,
    /// Never a call, and no more bytes once it was one.
    blocked: bool,
    committed: bool,
}

/// The forward scan of one answer (Dynamo's guided streaming, as its facts go).
#[derive(Debug)]
struct Scan {
    /// The named tool: the answer is its arguments object.
    named: Option<String>,
    scanned: usize,
    depth: i32,
    in_string: bool,
    escape: bool,
    /// Where a string the scan reads (a key, or the `name` value) opened.
    literal_start: Option<usize>,
    /// Depth of a call object's keys: 2 in an array, 1 for bare objects.
    key_depth: i32,
    root_seen: bool,
    disabled: bool,
    slot: Slot,
    key: Option<String>,
    element: Element,
    /// The element's index: every element takes one, call or not.
    index: usize,
    /// The current element opened (so it takes an index).
    opened: bool,
    calls: Vec<Option<Call>>,
}

impl Scan {
    fn new(named: Option<String>) -> Self {
        Self {
            named,
            scanned: 0,
            depth: 0,
            in_string: false,
            escape: false,
            literal_start: None,
            key_depth: 1,
            root_seen: false,
            disabled: false,
            slot: Slot::Key,
            key: None,
            element: Element::default(),
            index: 0,
            opened: false,
            calls: Vec::new(),
        }
    }

    /// Scan the text added since the last step.
    fn advance(&mut self, text: &str) {
        if self.disabled || text.len() <= self.scanned {
            return;
        }
        let mut cut = self.scanned;
        for (relative, ch) in text[self.scanned..].char_indices() {
            let at = self.scanned + relative;
            cut = at + ch.len_utf8();
            if self.named.is_some() {
                self.step_named(at, ch);
            } else {
                self.step_required(text, at, cut, ch);
            }
            if self.disabled {
                break;
            }
        }
        self.scanned = cut;
        self.commit();
        self.flush(cut);
    }

    /// One character of a named choice's arguments object (only whitespace before it).
    fn step_named(&mut self, at: usize, ch: char) {
        if !self.root_seen {
            if ch == '{' {
                self.root_seen = true;
                self.depth = 1;
                self.element.args_start = Some(at);
            } else if !ch.is_whitespace() {
                self.disabled = true;
            }
            return;
        }
        if self.element.args_end.is_some() {
            return;
        }
        if self.in_string {
            match ch {
                _ if self.escape => self.escape = false,
                '\\' => self.escape = true,
                '"' => self.in_string = false,
                _ => {}
            }
            return;
        }
        match ch {
            '"' => self.in_string = true,
            '{' | '[' => self.depth += 1,
            '}' | ']' => {
                self.depth -= 1;
                if self.depth == 0 {
                    self.element.args_end = Some(at + 1);
                }
            }
            _ => {}
        }
    }

    /// One character of a `required` answer.
    fn step_required(&mut self, text: &str, at: usize, cut: usize, ch: char) {
        if self.in_string {
            match ch {
                _ if self.escape => self.escape = false,
                '\\' => self.escape = true,
                '"' => {
                    self.in_string = false;
                    self.close_literal(text, at);
                }
                _ => {}
            }
            return;
        }
        let at_keys = self.depth == self.key_depth;
        let alias = matches!(self.key.as_deref(), Some("parameters" | "arguments"));
        let name_key = self.key.as_deref() == Some("name");
        match ch {
            '"' => {
                if !self.root_seen {
                    self.disabled = true;
                    return;
                }
                self.in_string = true;
                let wanted = at_keys
                    && match self.slot {
                        Slot::Key => true,
                        Slot::Value => name_key,
                        Slot::Colon => false,
                    };
                self.literal_start = wanted.then_some(at);
            }
            '{' | '[' => {
                if !self.root_seen {
                    self.root_seen = true;
                    self.key_depth = if ch == '[' { 2 } else { 1 };
                }
                let at_keys = self.depth == self.key_depth;
                let opens_args = ch == '{' && at_keys && self.slot == Slot::Value && alias;
                let opens_element = ch == '{' && self.depth == self.key_depth - 1;
                let name_not_string = at_keys && self.slot == Slot::Value && name_key;
                self.depth += 1;
                if opens_args {
                    if self.element.args_start.is_some() {
                        self.element.blocked = true;
                    } else {
                        self.element.args_start = Some(at);
                        self.element.in_args = true;
                    }
                } else if opens_element {
                    self.slot = Slot::Key;
                    self.key = None;
                    self.opened = true;
                } else if name_not_string {
                    self.element.blocked = true;
                }
                self.commit();
            }
            '}' | ']' => {
                let closes_args =
                    ch == '}' && self.element.in_args && self.depth == self.key_depth + 1;
                let closes_element = ch == '}' && at_keys;
                self.depth -= 1;
                if closes_args {
                    self.element.args_end = Some(at + 1);
                    self.element.in_args = false;
                    self.commit();
                    self.flush(cut);
                } else if closes_element {
                    self.commit();
                    self.flush(cut);
                    self.index += 1;
                    self.element = Element::default();
                    self.slot = Slot::Key;
                    self.key = None;
                    self.opened = false;
                }
            }
            ':' if at_keys && self.slot == Slot::Colon => self.slot = Slot::Value,
            ',' if at_keys => {
                self.slot = Slot::Key;
                self.key = None;
            }
            _ if ch.is_whitespace() => {}
            _ => {
                if !self.root_seen {
                    self.disabled = true;
                } else if at_keys && self.slot == Slot::Value && (alias || name_key) {
                    // A literal (`null`, `7`, or no JSON at all) as the name or the
                    // arguments: this element is no call.
                    self.element.blocked = true;
                }
            }
        }
    }

    /// A string the scan reads closed at `end`: a key, or the call's name.
    fn close_literal(&mut self, text: &str, end: usize) {
        let Some(start) = self.literal_start.take() else {
            return;
        };
        // A string that does not decode is skipped (the slot stays).
        let Ok(literal) = serde_json::from_str::<String>(&text[start..=end]) else {
            return;
        };
        match self.slot {
            Slot::Key => {
                if matches!(literal.as_str(), "parameters" | "arguments") {
                    // Both spellings in one element: no call (no more bytes).
                    self.element.blocked |= self.element.alias_seen;
                    self.element.alias_seen = true;
                }
                self.key = Some(literal);
                self.slot = Slot::Colon;
            }
            Slot::Value if self.key.as_deref() == Some("name") => {
                self.element.name = Some(literal);
            }
            _ => {}
        }
    }

    /// The element becomes a call once its name is known and its arguments opened.
    fn commit(&mut self) {
        let element = &mut self.element;
        if element.committed || element.blocked {
            return;
        }
        let Some(start) = element.args_start else {
            return;
        };
        let Some(name) = self.named.clone().or_else(|| element.name.clone()) else {
            return;
        };
        element.committed = true;
        if self.calls.len() <= self.index {
            self.calls.resize(self.index + 1, None);
        }
        self.calls[self.index] = Some(Call {
            name,
            start,
            bound: start,
        });
    }

    /// The call's arguments may go out up to `cut`, never past their closing `}`.
    fn flush(&mut self, cut: usize) {
        if !self.element.committed || self.element.blocked {
            return;
        }
        let bound = self.element.args_end.unwrap_or(cut).min(cut);
        if let Some(Some(call)) = self.calls.get_mut(self.index) {
            call.bound = call.bound.max(bound);
        }
    }

    /// How many indexes the elements took so far (a named choice's object: one).
    fn taken(&self) -> usize {
        if self.named.is_some() {
            return 1;
        }
        self.index + usize::from(self.opened)
    }
}

/// The guided-JSON answer of one choice.
pub struct GuidedCalls {
    /// The named tool, or `None` for `required` (names come from the array).
    named: Option<String>,
    text: String,
    shape: Shape,
    scan: Scan,
    /// Per call index: its id and how many bytes of its arguments went out.
    sent: Vec<Option<(String, usize)>>,
    /// Read again from text the jail held after the guided value (mistral's
    /// `[TOOL_CALLS][…]`): it never closes, all of it is held to the end.
    open_ended: bool,
    /// How many steps brought text.
    steps: usize,
}

impl GuidedCalls {
    pub fn new(named: Option<String>) -> Self {
        Self {
            scan: Scan::new(named.clone()),
            named,
            text: String::new(),
            shape: Shape::Undecided,
            sent: Vec::new(),
            open_ended: false,
            steps: 0,
        }
    }

    /// A `required` scan over text the jail held after the guided value closed.
    pub fn open_ended() -> Self {
        Self {
            open_ended: true,
            ..Self::new(None)
        }
    }

    /// Whether Dynamo's guided scan, run over `held` (text a jail holds after a
    /// `required` list) from its start, lets a call out: its root is the first
    /// bracket, so `[TOOL_CALLS]f[ARGS]{…}` takes no element (its `{` stands at the
    /// root's depth) while a later `[TOOL_CALLS][{…` opens one (seed 20261216 #1719).
    pub fn scan_calls(held: &str) -> bool {
        let mut scan = Scan::new(None);
        scan.advance(held);
        scan.calls.iter().any(Option::is_some)
    }

    /// Take one step of answer text; returns the shape the answer has now.
    pub fn feed(&mut self, piece: &str) -> Shape {
        self.steps += usize::from(!piece.is_empty());
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
        if self.shape == Shape::Json {
            self.scan.advance(&self.text);
        }
        self.shape
    }

    /// Whether only one step brought text so far: Dynamo's jail opened on it and
    /// its guided scan, which reads only the steps after that one, read nothing.
    pub fn one_step(&self) -> bool {
        self.steps <= 1
    }

    /// All the text taken so far (what goes out when the answer is not the JSON).
    pub fn take_text(&mut self) -> String {
        std::mem::take(&mut self.text)
    }

    /// The arguments' new fragments since the last call (streaming).
    pub fn fragments(&mut self, out: &mut Vec<CallDelta>) {
        for (index, call) in self.scan.calls.iter().enumerate() {
            let Some(call) = call else {
                continue;
            };
            if self.sent.len() <= index {
                self.sent.resize(index + 1, None);
            }
            let first = self.sent[index].is_none();
            let (id, done) =
                self.sent[index].get_or_insert_with(|| (Dialect::Dynamo.new_call_id(), call.start));
            if call.bound <= *done && !first {
                continue;
            }
            out.push(CallDelta {
                index,
                id: first.then(|| id.clone()),
                name: first.then(|| call.name.clone()),
                arguments: self.text[*done..call.bound].to_owned(),
            });
            *done = call.bound;
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
        if self.open_ended {
            return None;
        }
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

    /// The arguments a call at `index` sent so far (streaming).
    pub fn sent_arguments(&self, index: usize) -> Option<&str> {
        let (_, done) = self.sent.get(index)?.as_ref()?;
        let call = self.scan.calls.get(index)?.as_ref()?;
        Some(&self.text[call.start..*done])
    }

    /// The text after `closed_at`, and how many call indexes the JSON took.
    pub fn tail(&self, at: usize) -> (&str, usize) {
        (&self.text[at..], self.scan.taken())
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
        for (index, call) in self.scan.calls.iter().enumerate() {
            let Some(call) = call else {
                continue;
            };
            out.push(CallDelta {
                index,
                id: Some(Dialect::Dynamo.new_call_id()),
                name: Some(call.name.clone()),
                arguments: self.text[call.start..call.bound].to_owned(),
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each step's fragments, as (index, arguments).
    fn stream(named: Option<&str>, pieces: &[&str]) -> Vec<Vec<(usize, String)>> {
        let mut calls = GuidedCalls::new(named.map(str::to_owned));
        pieces
            .iter()
            .map(|piece| {
                calls.feed(piece);
                let mut out = Vec::new();
                calls.fragments(&mut out);
                out.into_iter().map(|c| (c.index, c.arguments)).collect()
            })
            .collect()
    }

    fn args(text: &str) -> Vec<(usize, String, String)> {
        let mut calls = GuidedCalls::new(None);
        calls.feed(text);
        let mut out = Vec::new();
        calls.whole(&mut out);
        out.into_iter()
            .map(|c| (c.index, c.name.unwrap(), c.arguments))
            .collect()
    }

    #[test]
    fn required_array_yields_each_element_arguments() {
        let text = r#" [{"name": "a", "parameters": {"x": "}"}}, {"name": "b", "arguments": {}}]"#;
        assert_eq!(
            args(text),
            [
                (0, "a".into(), r#"{"x": "}"}"#.into()),
                (1, "b".into(), "{}".into())
            ]
        );
    }

    #[test]
    fn the_closing_brace_goes_out_with_its_object() {
        let steps = stream(
            None,
            &[r#"[{"name": "f", "parameters": {""#, r#"x": 1}"#, "}]"],
        );
        let want = |s: &str| vec![(0, s.to_owned())];
        assert_eq!(steps, [want("{\""), want("x\": 1}"), vec![]]);
        let whole = stream(None, &[r#"[{"name":"f","arguments":"#, "{}", "}]"]);
        assert_eq!(whole, [vec![], want("{}"), vec![]]);
    }

    #[test]
    fn named_arguments_close_at_once() {
        let steps = stream(Some("f"), &["{\"", "x\": 1}", " tail"]);
        let want = |s: &str| vec![(0, s.to_owned())];
        assert_eq!(steps, [want("{\""), want("x\": 1}"), vec![]]);
    }

    #[test]
    fn text_before_the_json_is_not_a_call() {
        let mut calls = GuidedCalls::new(None);
        assert_eq!(calls.feed("  \n"), Shape::Undecided);
        assert_eq!(calls.feed("Hi ["), Shape::Text);
    }

    #[test]
    fn a_key_waits_for_its_colon() {
        // A string where the `:` belongs is skipped (#246).
        assert_eq!(
            args(r#"{"name":"","parameters""ge":{,"me}}"#),
            [(0, String::new(), r#"{,"me}}"#.into())]
        );
        // `"name"` never got its value: no call.
        assert!(args(r#"{"name""","arguments"{"#).is_empty());
        assert_eq!(args(r#"{"name" : "f", "arguments": {}}"#).len(), 1);
    }

    #[test]
    fn a_value_of_another_kind_is_no_call_but_keeps_its_index() {
        assert!(args(r#"{"name":"","parameters":e""{}"#).is_empty());
        assert!(args(r#"{"name":"","parameters":fl{}"#).is_empty());
        assert!(args(r#"[{"name":7,"arguments":{}}]"#).is_empty());
        assert!(args(r#"[{"arguments":{},"name":"f","parameters":{}}]"#).is_empty());
        // Already out when the second spelling comes: the call stays as it went.
        assert_eq!(
            args(r#"[{"name":"f","arguments":{"a":1},"parameters":{"b":2}}]"#),
            [(0, "f".into(), r#"{"a":1}"#.into())]
        );
        let text = r#"[{"name":"f","arguments":null},{"name":"g","arguments":{}}]"#;
        assert_eq!(args(text), [(1, "g".into(), "{}".into())]);
    }

    #[test]
    fn a_name_after_the_arguments_still_makes_a_call() {
        let steps = stream(None, &[r#"[{"arguments":{"a":1},"#, r#""name":"f"}]"#]);
        assert_eq!(steps, [vec![], vec![(0, r#"{"a":1}"#.to_owned())]]);
    }

    #[test]
    fn a_bare_object_that_is_no_call_keeps_its_index() {
        let mut calls = GuidedCalls::new(None);
        calls.feed(r#"{"n": 2}<tool_call>{"name":"f","arguments":{}}"#);
        let mut out = Vec::new();
        calls.fragments(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].index, out[0].arguments.as_str()), (1, "{}"));
        assert_eq!(calls.sent_arguments(1), Some("{}"));
        assert_eq!(calls.sent_arguments(0), None);
        assert_eq!(calls.closed_at(), None);
    }

    #[test]
    fn a_rescanned_marker_list_never_closes() {
        let mut calls = GuidedCalls::open_ended();
        calls.feed(r#"[TOOL_CALLS][{"name": 7}, {"name":"b","arguments":{}}] tail"#);
        let mut out = Vec::new();
        calls.fragments(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].index, out[0].arguments.as_str()), (1, "{}"));
        assert!(calls.closed_at().is_none());
        // A plain scan's list ends where it closes as JSON.
        let mut plain = GuidedCalls::new(None);
        plain.feed(r#"[{"name":"b","arguments":{}}] tail"#);
        assert_eq!(plain.closed_at(), Some(29));
        let mut reopened = GuidedCalls::open_ended();
        reopened.feed(r#"[{"name":"b","arguments":{}}] tail"#);
        assert_eq!(reopened.closed_at(), None);
    }

    #[test]
    fn only_steps_with_text_count_as_read() {
        let mut calls = GuidedCalls::new(Some("f".into()));
        calls.feed("{");
        calls.feed("");
        assert!(calls.one_step());
        calls.feed("\"a\"");
        assert!(!calls.one_step());
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
        let mut list = GuidedCalls::new(None);
        list.feed(r#"[{"name":"f","arguments":{}}, 1] x"#);
        assert_eq!(list.tail(32), (" x", 1));
    }
}
