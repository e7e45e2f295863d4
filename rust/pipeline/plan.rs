//! What the response side needs to know about a request. The request side builds
//! it while validating and preprocessing; the response side reads it per frame.

use std::sync::Arc;

use crate::parsers::Tools;

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
    /// `chatcmpl-<uuid>` or `cmpl-<uuid>`.
    pub response_id: String,
    /// Unix seconds, fixed at request start.
    pub created: u64,
    /// The request's `model` string, echoed back.
    pub model: String,
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// Number of choices (`n`).
    pub n: u32,
    pub prompt_tokens: u32,
    /// Completions `echo`: the prompt text to put in front of the output.
    pub echo_prompt: Option<String>,
    pub logprobs: bool,
    pub top_logprobs: Option<u32>,
    pub stop: Vec<String>,
    /// Token ids whose text is dropped and that end the output (EOS).
    pub hidden_stop_ids: Vec<u32>,
    pub include_stop_str_in_output: bool,
    pub min_tokens: Option<u32>,
    pub max_tokens: Option<u32>,
    pub skip_special_tokens: bool,
    /// Canonical parser names; `None` when off for this request.
    pub reasoning_parser: Option<String>,
    pub tool_call_parser: Option<String>,
    pub tools: Arc<Tools>,
    /// The chat template already opened reasoning.
    pub in_reasoning: Option<bool>,
    /// The request's thinking switch and Nemotron's `force_nonempty_content`, from
    /// its `chat_template_args` (see `parsers::options`).
    pub thinking: Option<bool>,
    pub force_nonempty_content: bool,
    /// The id the response ids are built from (`chatcmpl-<request_id>`).
    pub request_id: String,
    /// How the request constrained tool use; `Required`/`Named` drop non-tool text.
    pub tool_choice: ToolChoiceMode,
    /// `parallel_tool_calls: false` keeps only the first call.
    pub parallel_tool_calls: bool,
    /// `stream_options.continuous_usage_stats`: usage on every chunk.
    pub continuous_usage: bool,
    /// The client's own stop token ids (`stop` as token ids, root `stop_token_ids`).
    /// They are also in `hidden_stop_ids` (their text is dropped); kept apart so a
    /// stop on one can be reported as the `stop_reason`, which EOS never is.
    pub user_stop_ids: Vec<u32>,
    /// `nvext.annotations` events to send before the first chunk of a stream, as
    /// (event name, JSON-encoded comment): `request_id`, `formatted_prompt`, `token_ids`.
    pub annotation_events: Vec<(String, String)>,
    /// `nvext.extra_fields`: response `nvext` extras the client asked for.
    pub extra_fields: Vec<String>,
}

/// The request's `tool_choice`, as the response side needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoiceMode {
    Auto,
    None,
    Required,
    Named(String),
}
