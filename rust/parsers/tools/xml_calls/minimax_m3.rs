//! MiniMax-M3: every tag is prefixed by the namespace marker `]<]minimax[>[`, and
//! parameters are elements named after the argument, which may nest:
//!
//! ```text
//! ]<]minimax[>[<tool_call>
//! ]<]minimax[>[<invoke name="create_order">
//! ]<]minimax[>[<user_id>42]<]minimax[>[</user_id>
//! ]<]minimax[>[<items>]<]minimax[>[<item>book]<]minimax[>[</item>]<]minimax[>[</items>
//! ]<]minimax[>[</invoke>
//! ]<]minimax[>[</tool_call>
//! ```
//!
//! An element with children is an object (repeated names collect into a list), or an
//! array when its schema says so; a leaf is typed by its schema and stays a string
//! without one; text beside children goes under `$text`. As in vLLM, a call's
//! arguments go out whole when its invoke closes (a repeated name turns an already
//! seen value into a list, so partial arguments would not be prefix-stable); an
//! element that is malformed or never closed ends the arguments before it.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};

use super::{feed_at_markers, MarkerDriven};
use crate::parsers::markers::{Held, MarkerSet};
use crate::parsers::schema::{schema_type, write_json, write_typed_value, JsonStyle, ValueKind};
use crate::parsers::{CallSink, ToolParse, Tools};

const NS: &str = "]<]minimax[>[";
const BLOCK_OPEN: &str = "]<]minimax[>[<tool_call>";
const BLOCK_CLOSE: &str = "]<]minimax[>[</tool_call>";
const INVOKE_OPEN: &str = "]<]minimax[>[<invoke name=\"";
const HEAD_END: &str = "\">";
const INVOKE_CLOSE: &str = "]<]minimax[>[</invoke>";
const START: &[&str] = &[BLOCK_OPEN];
/// Longest function name accepted before `">`.
const NAME_CAP: usize = 1024;
/// Deepest element nesting read; deeper elements end the arguments.
const MAX_DEPTH: usize = 128;
/// The field that holds an element's own text when it also has children.
const MIXED_TEXT: &str = "$text";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Text,
    /// Inside the block, between invokes.
    Block,
    /// Reading the function name.
    Head,
    /// Gathering an invoke's parameter elements.
    Args,
}

struct Sets {
    text: MarkerSet,
    block: MarkerSet,
    head: MarkerSet,
    args: MarkerSet,
}

fn sets() -> &'static Sets {
    static SETS: OnceLock<Sets> = OnceLock::new();
    SETS.get_or_init(|| Sets {
        text: MarkerSet::new(&[BLOCK_OPEN]),
        block: MarkerSet::new(&[INVOKE_OPEN, BLOCK_CLOSE]),
        // Also `Block`'s markers, which it looks for after a name overflows (see
        // `MarkerDriven::room`).
        head: MarkerSet::new(&[HEAD_END, INVOKE_OPEN, BLOCK_CLOSE]),
        args: MarkerSet::new(&[INVOKE_CLOSE, BLOCK_CLOSE]),
    })
}

pub(super) struct MinimaxM3Parser {
    tools: Arc<Tools>,
    state: State,
    held: Held,
    name: String,
    body: String,
    calls_in_block: usize,
}

impl MinimaxM3Parser {
    pub(super) fn new(tools: Arc<Tools>) -> Self {
        Self {
            tools,
            state: State::Text,
            held: Held::default(),
            name: String::new(),
            body: String::new(),
            calls_in_block: 0,
        }
    }

    fn end_call(&mut self, sink: &mut CallSink) {
        let schema = self.tools.get(&self.name).map(|t| &t.parameters);
        let params = parse_params(&self.body);
        let mut arguments = String::new();
        write_json(
            &object(params, schema),
            self.tools.json_style(),
            &mut arguments,
        );
        sink.arguments(&arguments);
        sink.end_call();
        self.body.clear();
    }
}

impl MarkerDriven for MinimaxM3Parser {
    type Marker = &'static str;

    fn held(&mut self) -> &mut Held {
        &mut self.held
    }

    fn legal(&self) -> &'static MarkerSet {
        let s = sets();
        match self.state {
            State::Text => &s.text,
            State::Block => &s.block,
            State::Head => &s.head,
            State::Args => &s.args,
        }
    }

    fn meaning(&self, index: usize) -> &'static str {
        self.legal().marker(index)
    }

    fn absorb(&mut self, text: &str, sink: &mut CallSink) {
        match self.state {
            State::Text => sink.content(text),
            State::Head => self.name.push_str(text),
            State::Args => self.body.push_str(text),
            // Whitespace between invokes is markup.
            State::Block => {}
        }
    }

    fn room(&self) -> Option<usize> {
        (self.state == State::Head).then(|| NAME_CAP.saturating_sub(self.name.len()))
    }

    fn overflow(&mut self, sink: &mut CallSink) {
        sink.error("MiniMax-M3 invoke name never closed");
        self.name.clear();
        self.state = State::Block;
    }

    fn on_marker(&mut self, marker: &'static str, sink: &mut CallSink) {
        self.state = match (self.state, marker) {
            (State::Text, BLOCK_OPEN) => {
                self.calls_in_block = 0;
                State::Block
            }
            (State::Block, INVOKE_OPEN) => {
                self.name.clear();
                State::Head
            }
            (State::Head, HEAD_END) => {
                let name = self.name.trim();
                if name.is_empty() {
                    sink.error("MiniMax-M3 invoke without a function name");
                    State::Block
                } else {
                    sink.begin_call(name, None);
                    let name = name.to_owned();
                    self.name = name;
                    self.body.clear();
                    self.calls_in_block += 1;
                    State::Args
                }
            }
            (State::Args, INVOKE_CLOSE) => {
                self.end_call(sink);
                State::Block
            }
            (State::Args, BLOCK_CLOSE) => {
                sink.drop_call("invoke not closed before the end of the block");
                self.body.clear();
                State::Text
            }
            (State::Head, INVOKE_OPEN) => {
                sink.error("MiniMax-M3 invoke name never closed");
                self.name.clear();
                State::Head
            }
            (State::Head, BLOCK_CLOSE) => {
                sink.error("MiniMax-M3 invoke name never closed");
                State::Text
            }
            (State::Block, BLOCK_CLOSE) => {
                if self.calls_in_block == 0 {
                    sink.error("tool-call block without a call");
                }
                State::Text
            }
            (state, _) => state,
        };
    }
}

impl ToolParse for MinimaxM3Parser {
    fn feed(&mut self, text: &str, sink: &mut CallSink) {
        feed_at_markers(self, text, sink);
    }

    fn finish(&mut self, sink: &mut CallSink) {
        let held = std::mem::take(&mut self.held.tail);
        match self.state {
            State::Text => sink.content(&held),
            State::Block if self.calls_in_block > 0 => {}
            State::Block | State::Head => sink.error("tool-call block not closed"),
            State::Args => sink.drop_call("output ended inside the call"),
        }
        self.state = State::Text;
        self.body.clear();
    }

    fn start_markers(&self) -> &'static [&'static str] {
        START
    }
}

/// An element: its text, or its children in order (with any text beside them).
enum Element<'a> {
    Leaf(&'a str),
    Children(Vec<(&'a str, Element<'a>)>, String),
}

/// The parameter elements of an invoke body, up to the first malformed one.
fn parse_params(body: &str) -> Vec<(&str, Element<'_>)> {
    let mut params = Vec::new();
    let mut pos = 0;
    loop {
        pos += body[pos..].len() - body[pos..].trim_start().len();
        if !body[pos..].starts_with(NS) {
            return params;
        }
        match parse_element(body, pos, 1) {
            Some((name, element, end)) => {
                params.push((name, element));
                pos = end;
            }
            None => return params,
        }
    }
}

/// The element whose open tag starts at `pos` (at its namespace marker), and where it ends.
fn parse_element(text: &str, pos: usize, depth: usize) -> Option<(&str, Element<'_>, usize)> {
    if depth > MAX_DEPTH {
        return None;
    }
    let name_start = pos + NS.len() + 1;
    if !text[pos + NS.len()..].starts_with('<') {
        return None;
    }
    let name_len = text[name_start..].find('>')?;
    let name = &text[name_start..name_start + name_len];
    if name.is_empty() || name.starts_with('/') || name.trim().is_empty() {
        return None;
    }
    let mut pos = name_start + name_len + 1;
    let body_start = pos;
    let mut own_text = String::new();
    let mut children = Vec::new();
    loop {
        let marker = pos + text[pos..].find(NS)?;
        if let Some(rest) = text[marker + NS.len()..].strip_prefix("</") {
            // Only this element's own close tag is legal here.
            if !(rest.starts_with(name) && rest[name.len()..].starts_with('>')) {
                return None;
            }
            let end = marker + NS.len() + "</>".len() + name.len();
            if children.is_empty() {
                return Some((name, Element::Leaf(&text[body_start..marker]), end));
            }
            own_text.push_str(&text[pos..marker]);
            if own_text.trim().is_empty() {
                own_text.clear();
            }
            return Some((name, Element::Children(children, own_text), end));
        }
        own_text.push_str(&text[pos..marker]);
        let (child, value, end) = parse_element(text, marker, depth + 1)?;
        children.push((child, value));
        pos = end;
    }
}

fn container_kind(schema: Option<&Value>) -> Option<ValueKind> {
    let kind = schema_type(schema?).kind;
    matches!(kind, ValueKind::Array | ValueKind::Object).then_some(kind)
}

/// Named elements as an object typed by `schema`; a repeated name collects its values.
fn object(elements: Vec<(&str, Element<'_>)>, schema: Option<&Value>) -> Value {
    let properties = schema.and_then(|s| s.get("properties"));
    let additional = schema.and_then(|s| s.get("additionalProperties"));
    let mut map = Map::new();
    let mut repeated: HashSet<&str> = HashSet::new();
    for (name, element) in elements {
        let child_schema = properties.and_then(|p| p.get(name)).or(additional);
        let value = convert(element, child_schema);
        match map.get_mut(name) {
            None => {
                map.insert(name.to_owned(), value);
            }
            Some(Value::Array(items)) if repeated.contains(name) => items.push(value),
            Some(existing) => {
                let first = existing.take();
                *existing = Value::Array(vec![first, value]);
                repeated.insert(name);
            }
        }
    }
    Value::Object(map)
}

fn convert(element: Element<'_>, schema: Option<&Value>) -> Value {
    match element {
        Element::Leaf(text) => {
            let Some(schema) = schema else {
                return Value::String(text.to_owned());
            };
            let ty = schema_type(schema);
            match ty.kind {
                // The template renders an empty list or object as an empty element.
                ValueKind::Array if text.trim().is_empty() => Value::Array(Vec::new()),
                ValueKind::Object if text.trim().is_empty() => Value::Object(Map::new()),
                ValueKind::String | ValueKind::Unknown => Value::String(text.to_owned()),
                _ => {
                    let mut json = String::new();
                    write_typed_value(text, ty, JsonStyle::Compact, &mut json);
                    serde_json::from_str(&json).unwrap_or_else(|_| Value::String(text.to_owned()))
                }
            }
        }
        Element::Children(children, mixed) => {
            if container_kind(schema) == Some(ValueKind::Array) {
                let items = schema.and_then(|s| s.get("items"));
                return Value::Array(
                    children
                        .into_iter()
                        .map(|(_, c)| convert(c, items))
                        .collect(),
                );
            }
            let mut value = object(children, schema);
            if !mixed.is_empty() {
                if let Value::Object(map) = &mut value {
                    map.entry(MIXED_TEXT).or_insert(Value::String(mixed));
                }
            }
            value
        }
    }
}
