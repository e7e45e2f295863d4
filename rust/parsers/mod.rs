//! Streaming reasoning and tool-call parsers.
//!
//! Every parser is a push parser: `feed` takes the next piece of model text and
//! appends what can be released to a [`Delta`]; `finish` flushes whatever was
//! held back. Work per `feed` is proportional to the new text plus at most the
//! longest marker held from the previous call.

pub mod calls;
pub mod chat;
pub mod dialect;
pub mod json;
pub mod markers;
pub mod options;
pub mod reasoning;
pub mod registry;
pub mod schema;
pub mod template;
pub mod tools;

pub use calls::{CallSink, ParseError};
pub use chat::ChatParser;
pub use registry::{
    new_reasoning_parser, new_tool_parser, reasoning_parsers, tool_call_parsers, ParserInfo,
    ReasoningFamily, ToolCallFamily, UnknownParser,
};
pub use schema::Tools;

/// One call's part of a delta. `id` and `name` are set only on a call's first delta.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallDelta {
    pub index: usize,
    pub id: Option<String>,
    pub name: Option<String>,
    pub arguments: String,
}

/// What one `feed` or `finish` released. Empty strings mean "nothing".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delta {
    pub content: String,
    pub reasoning: String,
    pub calls: Vec<CallDelta>,
    /// `content[..calls_at]` was released before the first call and the rest after
    /// it, so a server can keep the model's order when it frames them apart.
    pub calls_at: usize,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.content.is_empty() && self.reasoning.is_empty() && self.calls.is_empty()
    }

    pub fn clear(&mut self) {
        self.content.clear();
        self.reasoning.clear();
        self.calls.clear();
        self.calls_at = 0;
    }
}

/// A complete tool call, as `parse` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub index: usize,
    pub id: String,
    pub name: String,
    /// The arguments as a JSON object, serialized.
    pub arguments: String,
}

/// The whole message, as a non-streaming server returns it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
}

impl Message {
    /// Fold a streamed delta into the message. Calls are joined by index.
    pub fn push(&mut self, delta: &Delta) {
        self.content.push_str(&delta.content);
        self.reasoning.push_str(&delta.reasoning);
        for call in &delta.calls {
            match self.tool_calls.iter_mut().find(|c| c.index == call.index) {
                Some(existing) => existing.arguments.push_str(&call.arguments),
                None => self.tool_calls.push(ToolCall {
                    index: call.index,
                    id: call.id.clone().unwrap_or_default(),
                    name: call.name.clone().unwrap_or_default(),
                    arguments: call.arguments.clone(),
                }),
            }
        }
    }
}

/// Splits model text into reasoning and content.
pub trait ReasoningParse: Send + Sync {
    /// Append the releasable part of `text` to `out.reasoning` / `out.content`.
    fn feed(&mut self, text: &str, out: &mut Delta);
    /// Release everything still held.
    fn finish(&mut self, out: &mut Delta);
}

/// Finds tool calls in content text.
pub trait ToolParse: Send + Sync {
    /// Consume `text`; plain text goes to `sink.content`, calls through the sink's call methods.
    fn feed(&mut self, text: &str, sink: &mut CallSink);
    /// End of output: release held text, close or drop an unterminated call.
    fn finish(&mut self, sink: &mut CallSink);
    /// Markers that open a call. Reasoning ends implicitly at any of them, so the
    /// combined parser hands these to the reasoning stage as exit markers.
    fn start_markers(&self) -> &'static [&'static str];
}
