//! Gemma 4: `<|tool_call>call:NAME{key:<|"|>text<|"|>,n:42,o:{k:[1,2]}}<tool_call|>`.
//! Keys are bare, strings sit between `<|"|>` delimiters, everything else is bare
//! (numbers, booleans, nested `{}` and `[]`). The name streams as soon as `{` opens the
//! arguments, and each top-level parameter is converted and sent when the `,` or `}`
//! after it arrives (a bare value's end, and so its type, is known only then).
//! FunctionGemma writes the same syntax with other delimiters.

use std::sync::{Arc, OnceLock};

use super::{feed_at_markers, MarkerDriven};
use crate::parsers::dialect::Dialect;
use crate::parsers::markers::{Held, MarkerSet};
use crate::parsers::schema::{write_json_str, write_typed_value, ParamType};
use crate::parsers::{CallSink, ToolParse, Tools};

/// The literal delimiters of one dialect of this syntax.
pub(super) struct Syntax {
    call_open: &'static str,
    call_close: &'static str,
    /// Both ends of a string.
    quote: &'static str,
    start: [&'static str; 1],
    sets: OnceLock<Sets>,
}

const fn syntax(call_open: &'static str, call_close: &'static str, quote: &'static str) -> Syntax {
    Syntax {
        call_open,
        call_close,
        quote,
        start: [call_open],
        sets: OnceLock::new(),
    }
}

pub(super) static GEMMA4: Syntax = syntax("<|tool_call>", "<tool_call|>", "<|\"|>");

/// FunctionGemma: `<start_function_call>call:NAME{key:<escape>text<escape>}<end_function_call>`.
pub(super) static FUNCTION_GEMMA: Syntax =
    syntax("<start_function_call>", "<end_function_call>", "<escape>");

/// What a marker means, whatever the dialect spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Marker {
    Open,
    Close,
    Quote,
    Brace,
}
/// Longest `call:NAME` head accepted before `{`.
const HEAD_CAP: usize = 1024;
/// Nesting deeper than this is treated as garbage rather than recursed into.
const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Text,
    /// Reading `call:NAME` up to `{`.
    Head,
    /// Inside the arguments, outside any string.
    Body,
    /// Inside a `<|"|>` string.
    Quoted,
    /// After a malformed head: dropped up to the call's end.
    Skip,
}

struct Sets {
    text: MarkerSet,
    head: MarkerSet,
    body: MarkerSet,
    quoted: MarkerSet,
    skip: MarkerSet,
}

impl Syntax {
    fn sets(&self) -> &Sets {
        self.sets.get_or_init(|| Sets {
            text: MarkerSet::new(&[self.call_open]),
            head: MarkerSet::new(&["{", self.call_close]),
            body: MarkerSet::new(&[self.quote, self.call_close]),
            quoted: MarkerSet::new(&[self.quote]),
            skip: MarkerSet::new(&[self.call_close]),
        })
    }

    fn meaning(&self, marker: &str) -> Marker {
        if marker == self.call_open {
            Marker::Open
        } else if marker == self.call_close {
            Marker::Close
        } else if marker == self.quote {
            Marker::Quote
        } else {
            Marker::Brace
        }
    }
}

pub(super) struct Gemma4Parser {
    syntax: &'static Syntax,
    tools: Arc<Tools>,
    state: State,
    held: Held,
    head: String,
    /// The open call's name, for schema lookups.
    name: String,
    /// Raw text of the current top-level `key:value` entry.
    entry: String,
    /// Bracket depth outside strings; 1 is the top level of the arguments object.
    depth: usize,
    /// Whether a parameter has been sent (`{` written).
    args_open: bool,
    fragment: String,
}

impl Gemma4Parser {
    pub(super) fn new(syntax: &'static Syntax, tools: Arc<Tools>) -> Self {
        Self {
            syntax,
            tools,
            state: State::Text,
            held: Held::default(),
            head: String::new(),
            name: String::new(),
            entry: String::new(),
            depth: 0,
            args_open: false,
            fragment: String::new(),
        }
    }
}

impl MarkerDriven for Gemma4Parser {
    type Marker = Marker;

    fn held(&mut self) -> &mut Held {
        &mut self.held
    }

    fn legal(&self) -> &'static MarkerSet {
        let s = self.syntax.sets();
        match self.state {
            State::Text => &s.text,
            State::Head => &s.head,
            State::Body => &s.body,
            State::Quoted => &s.quoted,
            State::Skip => &s.skip,
        }
    }

    fn absorb(&mut self, text: &str, sink: &mut CallSink) {
        match self.state {
            State::Text => sink.content(text),
            State::Head => self.head.push_str(text),
            State::Body => self.absorb_body(text, sink),
            State::Quoted => self.entry.push_str(text),
            State::Skip => {}
        }
    }

    fn room(&self) -> Option<usize> {
        (self.state == State::Head).then(|| HEAD_CAP.saturating_sub(self.head.len()))
    }

    fn overflow(&mut self, sink: &mut CallSink) {
        sink.error("Gemma tool call head never reached `{`");
        self.state = State::Skip;
    }

    fn meaning(&self, index: usize) -> Marker {
        self.syntax.meaning(self.legal().marker(index))
    }

    fn on_marker(&mut self, marker: Marker, sink: &mut CallSink) {
        let quote = self.syntax.quote;
        self.state = match (self.state, marker) {
            (State::Text, Marker::Open) => {
                self.head.clear();
                State::Head
            }
            (State::Head, Marker::Brace) => {
                let head = self.head.trim();
                match head.strip_prefix("call:").map(str::trim) {
                    Some(name) if !name.is_empty() => {
                        sink.begin_call(name, None);
                        self.name.clear();
                        self.name.push_str(name);
                        self.entry.clear();
                        self.depth = 1;
                        self.args_open = false;
                        State::Body
                    }
                    _ => {
                        sink.error(format!("Gemma tool call head `{head}` is not `call:NAME`"));
                        State::Skip
                    }
                }
            }
            (State::Head, Marker::Close) => {
                sink.error("Gemma tool call without arguments");
                State::Text
            }
            (State::Body, Marker::Quote) if self.depth > 0 => {
                self.entry.push_str(quote);
                State::Quoted
            }
            (State::Body, Marker::Quote) => {
                sink.drop_call("text after the arguments object");
                State::Skip
            }
            (State::Quoted, Marker::Quote) => {
                self.entry.push_str(quote);
                State::Body
            }
            (State::Body, Marker::Close) => {
                self.close_call(sink);
                State::Text
            }
            (State::Skip, Marker::Close) => State::Text,
            (state, _) => state,
        };
    }
}

impl Gemma4Parser {
    /// Argument text outside strings: split top-level entries at `,` and at the `}`
    /// that closes the arguments.
    fn absorb_body(&mut self, text: &str, sink: &mut CallSink) {
        let mut start = 0;
        for (i, b) in text.bytes().enumerate() {
            if self.depth == 0 {
                if !b.is_ascii_whitespace() {
                    sink.drop_call("text after the arguments object");
                    self.state = State::Skip;
                    return;
                }
                continue;
            }
            match b {
                b'{' | b'[' => self.depth += 1,
                b',' | b'}' if self.depth == 1 => {
                    self.entry.push_str(&text[start..i]);
                    start = i + 1;
                    if b == b'}' {
                        self.depth = 0;
                    }
                    if !self.send_entry(sink) {
                        self.state = State::Skip;
                        return;
                    }
                }
                b']' if self.depth == 1 => {
                    sink.drop_call("`]` without `[`");
                    self.state = State::Skip;
                    return;
                }
                b'}' | b']' => self.depth -= 1,
                _ => {}
            }
        }
        if self.depth > 0 {
            self.entry.push_str(&text[start..]);
        }
    }

    /// Convert one `key:value` entry and send it; false (call dropped) if unreadable.
    fn send_entry(&mut self, sink: &mut CallSink) -> bool {
        if self.entry.trim().is_empty() {
            // `{}` or a trailing comma.
            return true;
        }
        let fragment = &mut self.fragment;
        fragment.clear();
        fragment.push_str(if self.args_open {
            self.tools.json_style().item_separator()
        } else {
            "{"
        });
        let mut reader = Reader {
            quote: self.syntax.quote,
            text: &self.entry,
            pos: 0,
            tools: &self.tools,
            tool: &self.name,
        };
        let read = reader.member(fragment, 0).and_then(|()| {
            if reader.rest().trim().is_empty() {
                Ok(())
            } else {
                Err("expected `,` or `}` after a value")
            }
        });
        self.entry.clear();
        match read {
            Ok(()) => {
                self.args_open = true;
                sink.arguments(fragment);
                true
            }
            Err(reason) => {
                sink.drop_call(reason);
                false
            }
        }
    }

    fn close_call(&mut self, sink: &mut CallSink) {
        if self.depth > 0 {
            sink.drop_call("arguments object not closed");
            return;
        }
        sink.arguments(if self.args_open { "}" } else { "{}" });
        sink.end_call();
    }
}

/// Converts Gemma's argument syntax to JSON in one pass.
struct Reader<'a> {
    quote: &'static str,
    text: &'a str,
    pos: usize,
    tools: &'a Tools,
    tool: &'a str,
}

type Read = Result<(), &'static str>;

impl<'a> Reader<'a> {
    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.rest().starts_with(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    /// A `<|"|>…<|"|>` string's contents, the opening delimiter already consumed.
    fn quoted(&mut self) -> Result<&'a str, &'static str> {
        let text: &'a str = self.text;
        let rest = &text[self.pos..];
        let end = rest.find(self.quote).ok_or("string not closed")?;
        self.pos += end + self.quote.len();
        Ok(&rest[..end])
    }

    /// Text up to (not including) the first of `stops` outside a string.
    fn bare(&mut self, stops: &[char]) -> &'a str {
        let text: &'a str = self.text;
        let rest = &text[self.pos..];
        let end = rest.find(stops).unwrap_or(rest.len());
        self.pos += end;
        rest[..end].trim()
    }

    fn object(&mut self, out: &mut String, depth: usize) -> Read {
        if depth > MAX_DEPTH {
            return Err("arguments nested too deeply");
        }
        if !self.eat('{') {
            return Err("expected `{`");
        }
        out.push('{');
        let mut first = true;
        loop {
            if self.eat('}') {
                out.push('}');
                return Ok(());
            }
            if !first {
                out.push_str(self.tools.json_style().item_separator());
            }
            self.member(out, depth)?;
            first = false;
            if !self.eat(',') && !self.rest().trim_start().starts_with('}') {
                return Err("expected `,` or `}` after a value");
            }
        }
    }

    /// `key:value`, written as `"key": value`. Top-level (`depth` 0) values are typed by
    /// the tool's schema; nested bare values by the unknown-parameter rule.
    fn member(&mut self, out: &mut String, depth: usize) -> Read {
        self.skip_ws();
        let key = if self.rest().starts_with(self.quote) {
            self.pos += self.quote.len();
            self.quoted()?
        } else {
            self.bare(&[':', ',', '}'])
        };
        if key.is_empty() {
            return Err("empty argument name");
        }
        write_json_str(key, out);
        if !self.eat(':') {
            return Err("expected `:` after an argument name");
        }
        out.push_str(self.tools.json_style().key_separator());
        let ty = if depth == 0 {
            self.tools.param_type(self.tool, key)
        } else {
            ParamType::UNKNOWN
        };
        self.value(out, ty, depth)
    }

    fn array(&mut self, out: &mut String, depth: usize) -> Read {
        if depth > MAX_DEPTH {
            return Err("arguments nested too deeply");
        }
        self.eat('[');
        out.push('[');
        let mut first = true;
        loop {
            if self.eat(']') {
                out.push(']');
                return Ok(());
            }
            if !first {
                out.push_str(self.tools.json_style().item_separator());
            }
            self.value(out, ParamType::UNKNOWN, depth)?;
            first = false;
            if !self.eat(',') && !self.rest().trim_start().starts_with(']') {
                return Err("expected `,` or `]` after a value");
            }
        }
    }

    fn value(&mut self, out: &mut String, ty: ParamType, depth: usize) -> Read {
        self.skip_ws();
        let rest = self.rest();
        if rest.starts_with(self.quote) {
            self.pos += self.quote.len();
            let text = self.quoted()?;
            write_json_str(text, out);
            Ok(())
        } else if rest.starts_with('{') {
            self.object(out, depth + 1)
        } else if rest.starts_with('[') {
            self.array(out, depth + 1)
        } else {
            let token = self.bare(&[',', '}', ']']);
            if token.is_empty() {
                return Err("missing value");
            }
            write_typed_value(token, ty, self.tools.json_style(), out);
            Ok(())
        }
    }
}

impl ToolParse for Gemma4Parser {
    fn feed(&mut self, text: &str, sink: &mut CallSink) {
        feed_at_markers(self, text, sink);
    }

    fn finish(&mut self, sink: &mut CallSink) {
        let held = std::mem::take(&mut self.held.tail);
        match self.state {
            State::Text => sink.content(&held),
            State::Head | State::Skip => sink.error("Gemma tool call not closed"),
            // Dynamo keeps a call whose arguments closed but whose end marker never came
            // (measured).
            State::Body if self.depth == 0 && self.tools.dialect() == Dialect::Dynamo => {
                self.close_call(sink)
            }
            State::Body | State::Quoted => sink.drop_call("output ended inside the call"),
        }
        self.state = State::Text;
        self.entry.clear();
    }

    fn start_markers(&self) -> &'static [&'static str] {
        &self.syntax.start
    }
}
