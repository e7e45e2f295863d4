//! The tag-shaped formats: a block marker opens the calls, each call names a function and
//! lists `key → text value` parameters between tags, and the values are typed by the
//! tool's JSON schema. Qwen3-Coder, GLM-4.5/4.7, MiniMax-M2, DeepSeek DSML and Step-3
//! differ only in their literal tags, so one state machine reads them all.
//!
//! Arguments are built per parameter: `{"k": v` when the first value closes, `, "k2": v2`
//! for each next one and `}` at the end of the call, so streamed fragments concatenate to
//! exactly the whole-call JSON.

use std::sync::{Arc, OnceLock};

use super::{feed_at_markers, MarkerDriven};
use crate::parsers::dialect::Dialect;
use crate::parsers::markers::{Held, MarkerSet};
use crate::parsers::schema::{
    escape_json_into, write_json, write_json_str, write_typed_value, ParamType, ValueKind,
};
use crate::parsers::{CallSink, ToolParse, Tools};

/// Longest function or parameter name accepted; longer ones mean the tag never closed.
const NAME_CAP: usize = 1024;

/// How a parameter tag says its value is typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ValueTyping {
    /// From the tool's schema.
    Schema,
    /// DSML `string="true"`: the text is the string.
    Text,
    /// DSML `string="false"`: the text is JSON (schema typing if it is not).
    Json,
}

/// What a marker means in the state where it is legal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    BlockOpen,
    BlockClose,
    InvokeOpen,
    InvokeClose,
    /// End of the function-name tag.
    HeadEnd,
    ParamOpen,
    /// End of the parameter-name tag.
    KeyEnd(ValueTyping),
    /// GLM's `<arg_value>` after `</arg_key>`.
    ValueOpen,
    ParamClose,
}

/// The literal tags of one format.
pub(super) struct Format {
    pub(super) block_open: &'static str,
    pub(super) block_close: &'static str,
    /// `None` when the name follows the block marker directly (GLM).
    pub(super) invoke_open: Option<&'static str>,
    /// The end of the name tag; without `invoke_open`, a suffix trimmed from the name.
    pub(super) head_end: &'static str,
    pub(super) invoke_close: &'static str,
    pub(super) param_open: &'static str,
    pub(super) key_ends: &'static [(&'static str, ValueTyping)],
    pub(super) value_open: Option<&'static str>,
    pub(super) param_close: &'static str,
    /// Qwen3-Coder writes values on their own lines: one newline each side is markup.
    pub(super) trim_newlines: bool,
    /// Qwen3-Coder models sometimes leave out `</parameter>`: the next parameter or the
    /// end of the function then ends the value, as vLLM, SGLang and Dynamo accept; the
    /// end of the function ends a parameter name too.
    pub(super) value_ends_at_next_tag: bool,
    /// The template may write a call's name twice (`get_weather.get_weather`); when
    /// only the single name is declared, that is the call's name (Muse).
    pub(super) doubled_namespace: bool,
    pub(super) tables: OnceLock<Tables>,
}

pub(super) const SCHEMA_TYPED: &[(&str, ValueTyping)] = &[("\">", ValueTyping::Schema)];

pub(super) static QWEN3_CODER: Format = Format {
    block_open: "<tool_call>",
    block_close: "</tool_call>",
    invoke_open: Some("<function="),
    head_end: ">",
    invoke_close: "</function>",
    param_open: "<parameter=",
    key_ends: &[(">", ValueTyping::Schema)],
    value_open: None,
    param_close: "</parameter>",
    trim_newlines: true,
    value_ends_at_next_tag: true,
    doubled_namespace: false,
    tables: OnceLock::new(),
};

/// GLM-4.5 puts a newline after the name and between tags, GLM-4.7 does not; both read alike.
pub(super) static GLM: Format = Format {
    block_open: "<tool_call>",
    block_close: "</tool_call>",
    invoke_open: None,
    head_end: "<arg_key>",
    invoke_close: "</tool_call>",
    param_open: "<arg_key>",
    key_ends: &[("</arg_key>", ValueTyping::Schema)],
    value_open: Some("<arg_value>"),
    param_close: "</arg_value>",
    trim_newlines: false,
    value_ends_at_next_tag: false,
    doubled_namespace: false,
    tables: OnceLock::new(),
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Plain content.
    Text,
    /// Inside a block, between calls.
    Block,
    /// Reading a function name.
    Head,
    /// Inside a call, between parameters.
    Invoke,
    /// Reading a parameter name.
    Key,
    /// Between GLM's `</arg_key>` and `<arg_value>`.
    AfterKey,
    /// Reading a value.
    Value,
    /// After a malformed call: everything up to the block's end is dropped.
    Skip,
}

const STATES: usize = 8;

fn state_slot(state: State) -> usize {
    state as usize
}

/// The markers legal in one state, with what each means there.
struct Legal {
    set: MarkerSet,
    roles: Vec<Role>,
}

impl Legal {
    fn new(entries: &[(&'static str, Role)]) -> Self {
        let markers: Vec<&'static str> = entries.iter().map(|(m, _)| *m).collect();
        Self {
            set: MarkerSet::new(&markers),
            roles: entries.iter().map(|(_, r)| *r).collect(),
        }
    }
}

pub(super) struct Tables {
    by_state: [Legal; STATES],
    start: [&'static str; 1],
}

impl Format {
    fn tables(&'static self) -> &'static Tables {
        self.tables.get_or_init(|| {
            let close = (self.block_close, Role::BlockClose);
            let invoke_close = if self.invoke_close == self.block_close {
                close
            } else {
                (self.invoke_close, Role::InvokeClose)
            };
            // Name tags also end at the block's end, which `Skip` looks for after a name
            // overflows (see `MarkerDriven::room`).
            let mut key_ends: Vec<(&'static str, Role)> = self
                .key_ends
                .iter()
                .map(|(m, t)| (*m, Role::KeyEnd(*t)))
                .collect();
            key_ends.push(close);
            // A parameter name the function's end cuts is no parameter: Dynamo takes
            // the function's body first (live-checked, seed 20261245 #371:
            // `<parameter=</function>` says `{}`).
            if self.value_ends_at_next_tag {
                key_ends.push(invoke_close);
            }
            let head = match self.invoke_open {
                // The name runs to the first parameter or the end of the call: GLM
                // (whose block tag opens the call), or an invoke tag whose name is
                // followed directly by its first parameter (Hunyuan v4, K2 Horizon).
                None => Legal::new(&[(self.param_open, Role::ParamOpen), close]),
                Some(_) if self.head_end == self.param_open => {
                    let mut ends = vec![(self.param_open, Role::ParamOpen), invoke_close];
                    if invoke_close != close {
                        ends.push(close);
                    }
                    Legal::new(&ends)
                }
                Some(_) => Legal::new(&[(self.head_end, Role::HeadEnd), close]),
            };
            let mut invoke = vec![(self.param_open, Role::ParamOpen), invoke_close];
            if invoke_close != close {
                invoke.push(close);
            }
            let block = match self.invoke_open {
                Some(open) => Legal::new(&[(open, Role::InvokeOpen), close]),
                None => Legal::new(&[close]),
            };
            let mut value_ends = vec![(self.param_close, Role::ParamClose)];
            if self.value_ends_at_next_tag {
                value_ends.extend([(self.param_open, Role::ParamOpen), invoke_close, close]);
            }
            let value = Legal::new(&value_ends);
            // In `State` order; `state_slot` indexes this.
            let by_state = [
                Legal::new(&[(self.block_open, Role::BlockOpen)]),
                block,
                head,
                Legal::new(&invoke),
                Legal::new(&key_ends),
                // Only GLM reaches `AfterKey`; the others never consult this set.
                Legal::new(&[(self.value_open.unwrap_or(self.param_close), Role::ValueOpen)]),
                value,
                Legal::new(&[close]),
            ];
            Tables {
                by_state,
                start: [self.block_open],
            }
        })
    }
}

/// A streaming parser for one tag-shaped format.
pub(super) struct TaggedParser {
    format: &'static Format,
    tables: &'static Tables,
    tools: Arc<Tools>,
    state: State,
    held: Held,
    /// Function name, then (while a call is open) kept for schema lookups.
    name: String,
    key: String,
    typing: ValueTyping,
    value: String,
    /// The JSON fragment being handed to the sink, reused.
    fragment: String,
    /// Whether the open call has written `{` yet.
    args_open: bool,
    /// The current value is a plain string, written out escaped as it arrives.
    streaming_value: bool,
    /// Some of the current value has been seen (for dropping its first newline).
    value_started: bool,
    /// A newline held back because it may be the value's last (markup) one.
    newline_held: bool,
    /// Whitespace at the end of the value so far, held until text follows it (values
    /// trimmed whole, Dynamo's Qwen3-Coder).
    held_ws: String,
    calls_in_block: usize,
}

impl TaggedParser {
    pub(super) fn new(format: &'static Format, tools: Arc<Tools>) -> Self {
        Self {
            format,
            tables: format.tables(),
            tools,
            state: State::Text,
            held: Held::default(),
            name: String::new(),
            key: String::new(),
            typing: ValueTyping::Schema,
            value: String::new(),
            fragment: String::new(),
            args_open: false,
            streaming_value: false,
            value_started: false,
            newline_held: false,
            held_ws: String::new(),
            calls_in_block: 0,
        }
    }

    /// The markers legal in the current state, with what each means there.
    fn legal_here(&self) -> &'static Legal {
        &self.tables.by_state[state_slot(self.state)]
    }
}

impl MarkerDriven for TaggedParser {
    type Marker = Role;

    fn held(&mut self) -> &mut Held {
        &mut self.held
    }

    fn legal(&self) -> &'static MarkerSet {
        &self.legal_here().set
    }

    fn meaning(&self, index: usize) -> Role {
        self.legal_here().roles[index]
    }

    fn absorb(&mut self, text: &str, sink: &mut CallSink) {
        if text.is_empty() {
            return;
        }
        match self.state {
            State::Text => sink.content(text),
            State::Head => self.name.push_str(text),
            State::Key => self.key.push_str(text),
            State::Value if self.streaming_value => self.stream_value(text, sink),
            State::Value => self.value.push_str(text),
            // Whitespace and wrapper text between tags is markup.
            State::Block | State::Invoke | State::AfterKey | State::Skip => {}
        }
    }

    fn room(&self) -> Option<usize> {
        match self.state {
            State::Head => Some(NAME_CAP.saturating_sub(self.name.len())),
            State::Key => Some(NAME_CAP.saturating_sub(self.key.len())),
            _ => None,
        }
    }

    fn overflow(&mut self, sink: &mut CallSink) {
        if self.state == State::Key {
            sink.drop_call("parameter name tag never closed");
        } else {
            sink.error("tool-call name tag never closed");
        }
        self.state = State::Skip;
    }

    fn on_marker(&mut self, role: Role, sink: &mut CallSink) {
        self.state = match (self.state, role) {
            (State::Text, Role::BlockOpen) => {
                self.calls_in_block = 0;
                if self.format.invoke_open.is_some() {
                    State::Block
                } else {
                    self.name.clear();
                    State::Head
                }
            }
            (State::Block, Role::InvokeOpen) => {
                self.name.clear();
                State::Head
            }
            (State::Head, Role::HeadEnd) => self.begin_call(sink, State::Invoke),
            (State::Head, Role::BlockClose) if self.format.invoke_open.is_some() => {
                sink.error("tool-call name tag never closed");
                State::Text
            }
            (State::Head, Role::ParamOpen) => self.begin_call(sink, State::Key),
            (State::Head, Role::BlockClose) => match self.begin_call(sink, State::Invoke) {
                State::Invoke => self.end_call(sink, State::Text),
                _ => State::Text,
            },
            (State::Head, Role::InvokeClose) => match self.begin_call(sink, State::Invoke) {
                State::Invoke => self.end_call(sink, State::Block),
                _ => State::Block,
            },
            (State::Invoke, Role::ParamOpen) => {
                self.key.clear();
                State::Key
            }
            (State::Invoke, Role::InvokeClose) => self.end_call(sink, State::Block),
            (State::Invoke, Role::BlockClose) => self.end_call(sink, State::Text),
            (State::Key, Role::BlockClose) => {
                sink.drop_call("parameter name tag never closed");
                State::Text
            }
            (State::Key, Role::InvokeClose) => self.end_call(sink, State::Block),
            (State::Key, Role::KeyEnd(typing)) => {
                self.typing = typing;
                if self.format.value_open.is_some() {
                    State::AfterKey
                } else {
                    self.open_value(sink)
                }
            }
            (State::AfterKey, Role::ValueOpen) => self.open_value(sink),
            (State::Value, Role::ParamClose) => {
                self.close_value(sink);
                State::Invoke
            }
            (State::Value, Role::ParamOpen) if self.dynamo_qwen3() => {
                self.absorb(self.format.param_open, sink);
                State::Value
            }
            (State::Value, Role::BlockClose) if self.dynamo_qwen3() => {
                self.absorb(self.format.block_close, sink);
                self.close_value(sink);
                self.end_call(sink, State::Text)
            }
            (State::Value, Role::ParamOpen) => {
                self.close_value(sink);
                self.key.clear();
                State::Key
            }
            (State::Value, Role::InvokeClose) => {
                self.close_value(sink);
                self.end_call(sink, State::Block)
            }
            (State::Value, Role::BlockClose) => {
                self.close_value(sink);
                self.end_call(sink, State::Text)
            }
            (State::Block | State::Skip, Role::BlockClose) => {
                if self.state == State::Block && self.calls_in_block == 0 {
                    sink.error("tool-call block without a call");
                }
                State::Text
            }
            // Every state's marker set holds only the roles handled above.
            (state, _) => state,
        };
    }
}

impl TaggedParser {
    /// The name tag closed: open the call, or skip the block if the name is unusable.
    fn begin_call(&mut self, sink: &mut CallSink, next: State) -> State {
        let mut name = self.name.trim();
        if self.format.invoke_open.is_none() {
            // A block tag that opens the call may end its name with `head_end` (MiniCPM5's `">`).
            name = name
                .strip_suffix(self.format.head_end)
                .unwrap_or(name)
                .trim();
        }
        if name.is_empty() {
            sink.error("tool call without a function name");
            return State::Skip;
        }
        if self.format.doubled_namespace && self.tools.get(name).is_none() {
            if let Some((head, tail)) = name.split_once('.') {
                if head == tail && self.tools.get(head).is_some() {
                    name = head;
                }
            }
        }
        sink.begin_call(name, None);
        // Keep the trimmed name for schema lookups; `key` is free until a parameter opens.
        self.key.clear();
        self.key.push_str(name);
        std::mem::swap(&mut self.name, &mut self.key);
        self.key.clear();
        self.args_open = false;
        self.calls_in_block += 1;
        next
    }

    fn end_call(&mut self, sink: &mut CallSink, next: State) -> State {
        sink.arguments(if self.args_open { "}" } else { "{}" });
        sink.end_call();
        next
    }

    /// Start of the fragment for the current parameter: `{"k": ` or `, "k": `.
    fn param_prefix(&mut self) {
        let fragment = &mut self.fragment;
        fragment.clear();
        let style = self.tools.json_style();
        fragment.push_str(if self.args_open {
            style.item_separator()
        } else {
            "{"
        });
        write_json_str(self.key.trim(), fragment);
        fragment.push_str(style.key_separator());
        self.args_open = true;
    }

    /// Dynamo 1.6.1's Qwen3-Coder reading (measured): a value is trimmed whole and ends
    /// only at `</parameter>` or `</function>`; a `<parameter=` inside it is text, and a
    /// `</tool_call>` that comes first is its last text.
    fn dynamo_qwen3(&self) -> bool {
        std::ptr::eq(self.format, &QWEN3_CODER) && self.tools.dialect() == Dialect::Dynamo
    }

    /// The current parameter's type. A value no schema types is text: Dynamo 1.6.1
    /// (measured: qwen3_coder, glm47, minimax_m2), vLLM and SGLang all keep `3` or
    /// `{"a": 1}` written between tags as a string when neither the tool nor the
    /// parameter is declared (`null` aside, below).
    fn param_type(&self) -> ParamType {
        let ty = self.tools.param_type(&self.name, self.key.trim());
        if ty.kind != ValueKind::Unknown {
            return ty;
        }
        // Dynamo reads an untyped `null` as null, except in GLM's tags (measured).
        ParamType {
            nullable: self.tools.dialect() == Dialect::Dynamo && !std::ptr::eq(self.format, &GLM),
            ..ParamType::STRING
        }
    }

    /// A value begins. Plain strings stream (their JSON is known byte by byte); any other
    /// type is decided only by the whole text, so it is gathered until the value closes.
    fn open_value(&mut self, sink: &mut CallSink) -> State {
        self.value.clear();
        self.value_started = false;
        self.newline_held = false;
        self.held_ws.clear();
        let ty = self.param_type();
        self.streaming_value = match self.typing {
            ValueTyping::Text => true,
            ValueTyping::Json => false,
            ValueTyping::Schema => ty == ParamType::STRING,
        };
        if self.streaming_value {
            self.param_prefix();
            self.fragment.push('"');
            sink.arguments(&self.fragment);
        }
        State::Value
    }

    fn stream_value(&mut self, text: &str, sink: &mut CallSink) {
        let mut text = text;
        if self.dynamo_qwen3() {
            // The value is trimmed whole: leading whitespace is dropped, trailing
            // whitespace waits to see whether more text follows it.
            if !self.value_started {
                text = text.trim_start();
                if text.is_empty() {
                    return;
                }
            }
            let body = text.trim_end();
            let fragment = &mut self.fragment;
            fragment.clear();
            if !body.is_empty() {
                escape_json_into(&self.held_ws, fragment);
                self.held_ws.clear();
                escape_json_into(body, fragment);
            }
            self.held_ws.push_str(&text[body.len()..]);
            self.value_started = true;
            sink.arguments(fragment);
            return;
        }
        let fragment = &mut self.fragment;
        fragment.clear();
        if self.format.trim_newlines {
            if !self.value_started {
                text = text.strip_prefix('\n').unwrap_or(text);
            }
            if text.is_empty() {
                self.value_started = true;
                return;
            }
            if self.newline_held {
                fragment.push_str("\\n");
                self.newline_held = false;
            }
            if let Some(rest) = text.strip_suffix('\n') {
                text = rest;
                self.newline_held = true;
            }
        }
        self.value_started = true;
        escape_json_into(text, fragment);
        sink.arguments(fragment);
    }

    fn close_value(&mut self, sink: &mut CallSink) {
        if self.streaming_value {
            // A held newline here is the value's last one: markup, dropped.
            sink.arguments("\"");
            return;
        }
        let key_type = self.param_type();
        self.param_prefix();
        let mut value = self.value.as_str();
        if self.dynamo_qwen3() {
            value = value.trim();
        } else if self.format.trim_newlines {
            value = value.strip_prefix('\n').unwrap_or(value);
            value = value.strip_suffix('\n').unwrap_or(value);
        }
        let qwen3_boolean = self.dynamo_qwen3() && key_type.kind == ValueKind::Boolean;
        let fragment = &mut self.fragment;
        let style = self.tools.json_style();
        // Dynamo's Qwen3-Coder reads a declared boolean as `true` only when the text
        // says so (any case); any other text but `null` is `false` (live-checked:
        // a `metric` value holding markup is `false`).
        let lower = value.to_lowercase();
        if qwen3_boolean && lower != "null" {
            fragment.push_str(if lower == "true" { "true" } else { "false" });
            sink.arguments(fragment);
            self.value.clear();
            return;
        }
        match self.typing {
            ValueTyping::Text => write_json_str(value, fragment),
            ValueTyping::Json => match serde_json::from_str::<serde_json::Value>(value.trim()) {
                Ok(parsed) => write_json(&parsed, style, fragment),
                Err(_) => write_typed_value(value, key_type, style, fragment),
            },
            ValueTyping::Schema => write_typed_value(value, key_type, style, fragment),
        }
        sink.arguments(fragment);
        self.value.clear();
    }
}

impl ToolParse for TaggedParser {
    fn feed(&mut self, text: &str, sink: &mut CallSink) {
        feed_at_markers(self, text, sink);
    }

    fn finish(&mut self, sink: &mut CallSink) {
        let held = std::mem::take(&mut self.held.tail);
        match self.state {
            State::Text => sink.content(&held),
            // Calls already closed by their own end tag stand without the block's end.
            State::Block if self.calls_in_block > 0 => {}
            State::Block | State::Skip | State::Head => {
                sink.error("tool-call block not closed");
            }
            // Dynamo's Qwen3-Coder keeps a call cut off between its parameters (measured).
            State::Invoke
                if std::ptr::eq(self.format, &QWEN3_CODER)
                    && self.tools.dialect() == Dialect::Dynamo =>
            {
                self.end_call(sink, State::Text);
            }
            State::Invoke | State::Key | State::AfterKey | State::Value => {
                sink.drop_call("output ended inside the call");
            }
        }
        self.state = State::Text;
        self.value.clear();
    }

    fn start_markers(&self) -> &'static [&'static str] {
        &self.tables.start
    }
}
