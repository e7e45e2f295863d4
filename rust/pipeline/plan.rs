//! What the response side needs to know about a request. The preprocessor builds
//! it (`Preprocessor::chat` / `completions`); the response side reads it per frame.

use super::detok::DecodeOptions;
use crate::parsers::chat::ChatParserSpec;

/// Which OpenAI surface the request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    Chat,
    Completions,
}

/// Everything about one request that shapes its response.
#[derive(Debug, Clone)]
pub struct ResponsePlan {
    pub surface: Surface,
    /// `chatcmpl-<request id>` or `cmpl-<request id>`.
    pub response_id: String,
    /// Unix seconds, fixed at request start.
    pub created: u64,
    /// The request's `model` string, echoed back.
    pub model: String,
    pub stream: bool,
    /// `stream_options.include_usage`: a usage chunk closes the stream.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats`: usage on every chunk.
    pub continuous_usage: bool,
    /// Number of choices (`n`).
    pub n: u32,
    pub prompt_tokens: u32,
    pub logprobs: bool,
    /// How each choice's tokens become text.
    pub decode: DecodeOptions,
    /// Chat with a reasoning or tool-call parser on: the parsers each choice gets.
    pub parsers: Option<ChatParserSpec>,
    /// How the request constrained tool use; `Required`/`Named` drop non-tool text.
    pub tool_choice: ToolChoiceMode,
    /// `parallel_tool_calls: false` keeps only the first call.
    pub parallel_tool_calls: bool,
    /// Dynamo's unary aggregator re-reads a chat answer holding `<|channel|>`
    /// with the worker's harmony tool parser, tools in the request or not
    /// (its dialect only; see `parsers::tools::harmony_whole`).
    pub unary_harmony_cleanup: bool,
    /// One prompt of several in `/v1/completions`: its choices are numbered from here
    /// (`I × n`), and the batch, not this part, closes the response.
    pub batch_part: Option<u32>,
    /// `nvext.annotations` events to send before the first chunk of a stream, as
    /// (event name, JSON-encoded comment): `request_id`, `formatted_prompt`, `token_ids`.
    pub annotation_events: Vec<(String, String)>,
}

/// The request's `tool_choice`, as the response side needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoiceMode {
    Auto,
    None,
    Required,
    Named(String),
}

impl ToolChoiceMode {
    /// `required` or a named tool: the output is the calls, nothing else.
    pub fn forces_calls(&self) -> bool {
        matches!(self, Self::Required | Self::Named(_))
    }
}
