//! OpenAI request bodies as the reference frontend parses them (validation is in
//! `validate`).
//!
//! The types mirror the reference's shapes on purpose: the standard request is
//! `#[serde(flatten)]`ed next to the root-level extensions and a catch-all, so serde
//! buffers the body and every type error reports the position of the end of the
//! body — exactly the `at line L column C` the reference prints.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::HttpError;

// ---------------------------------------------------------------- messages

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(
    tag = "role",
    rename_all = "lowercase",
    rename = "ChatCompletionRequestMessage"
)]
pub enum Message {
    Developer(TextMessage),
    System(TextMessage),
    User(TextMessage),
    Assistant(Box<AssistantMessage>),
    Tool(ToolMessage),
    Function(FunctionMessage),
}

/// A string, or an array of content parts (`text`, `image_url`, ...).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged, rename = "ChatCompletionRequestMessageContent")]
pub enum Content {
    Text(String),
    Parts(Vec<Value>),
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct TextMessage {
    pub content: Content,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct AssistantMessage {
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<MessageToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_call: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename = "ChatCompletionMessageToolCall")]
pub struct MessageToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: FunctionType,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FunctionType {
    Function,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ToolMessage {
    pub content: Content,
    pub tool_call_id: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct FunctionMessage {
    #[serde(default)]
    pub content: Option<String>,
    pub name: String,
}

// ---------------------------------------------------------------- tools

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename = "ChatCompletionTool")]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: FunctionType,
    pub function: FunctionObject,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct FunctionObject {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase", rename = "ChatCompletionToolChoiceOption")]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    #[serde(untagged)]
    Named(NamedToolChoice),
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename = "ChatCompletionNamedToolChoice")]
pub struct NamedToolChoice {
    #[serde(rename = "type")]
    pub kind: FunctionType,
    pub function: FunctionName,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct FunctionName {
    pub name: String,
}

// ---------------------------------------------------------------- shared fields

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, rename = "Stop")]
pub enum Stop {
    String(String),
    StringArray(Vec<String>),
    TokenIds(Vec<u32>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename = "ChatCompletionStreamOptions")]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
    #[serde(default)]
    pub continuous_usage_stats: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchemaFormat },
}

#[derive(Debug, Clone, Deserialize)]
pub struct JsonSchemaFormat {
    #[serde(default)]
    pub description: Option<String>,
    pub name: String,
    #[serde(default)]
    pub schema: Option<Value>,
    #[serde(default)]
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

/// Root-level extensions shared by chat and completions (vLLM-style).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CommonExt {
    pub ignore_eos: Option<bool>,
    pub min_tokens: Option<u32>,
    pub top_k: Option<i32>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub include_stop_str_in_output: Option<bool>,
    pub guided_json: Option<Value>,
    pub guided_regex: Option<String>,
    pub guided_grammar: Option<String>,
    pub guided_choice: Option<Vec<String>>,
    pub guided_decoding_backend: Option<String>,
    pub guided_whitespace_pattern: Option<String>,
    pub skip_special_tokens: Option<bool>,
    pub prompt_logprobs: Option<u32>,
    pub return_tokens_as_token_ids: Option<bool>,
    pub media_io_kwargs: Option<Value>,
    pub mm_processor_kwargs: Option<Value>,
}

/// Chat-only template controls that sit at the root.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChatTemplateExt {
    pub add_generation_prompt: Option<bool>,
    pub continue_final_message: Option<bool>,
    pub thinking: Option<Value>,
}

/// The `nvext` object. Unknown keys are rejected, as in 1.6.1.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvExt {
    pub annotations: Option<Vec<String>>,
    pub greed_sampling: Option<bool>,
    pub use_raw_prompt: Option<bool>,
    pub token_data: Option<Vec<u32>>,
    pub backend_instance_id: Option<u64>,
    pub prefill_worker_id: Option<u64>,
    pub decode_worker_id: Option<u64>,
    pub dp_rank: Option<u32>,
    pub prefill_dp_rank: Option<u32>,
    pub max_thinking_tokens: Option<u32>,
    pub cache_salt: Option<String>,
    pub extra_fields: Option<Vec<String>>,
    pub agent_hints: Option<Value>,
    pub router: Option<Value>,
    pub routing_constraints: Option<Value>,
    pub request_timestamp_ms: Option<f64>,
    pub metadata_upload: Option<Value>,
    pub session_control: Option<Value>,
}

// ---------------------------------------------------------------- chat

/// The standard OpenAI chat request fields.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatFields {
    pub messages: Vec<Message>,
    pub model: String,
    pub store: Option<bool>,
    pub reasoning_effort: Option<ReasoningEffort>,
    pub metadata: Option<Value>,
    pub frequency_penalty: Option<f32>,
    pub logit_bias: Option<Map<String, Value>>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u8>,
    pub max_tokens: Option<u32>,
    pub max_completion_tokens: Option<u32>,
    pub n: Option<u8>,
    pub modalities: Option<Value>,
    pub prediction: Option<Value>,
    pub audio: Option<Value>,
    pub presence_penalty: Option<f32>,
    pub response_format: Option<ResponseFormat>,
    pub seed: Option<i64>,
    pub service_tier: Option<Value>,
    pub stop: Option<Stop>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub tools: Option<Vec<Tool>>,
    pub tool_choice: Option<ToolChoice>,
    pub parallel_tool_calls: Option<bool>,
    pub user: Option<String>,
    pub web_search_options: Option<Value>,
    pub function_call: Option<Value>,
    pub functions: Option<Value>,
}

/// A chat request. Named as in the reference: serde prints the name in type errors.
#[derive(Debug, Clone, Deserialize)]
pub struct NvCreateChatCompletionRequest {
    #[serde(flatten)]
    pub fields: ChatFields,
    #[serde(flatten)]
    pub common: CommonExt,
    #[serde(flatten)]
    pub template_ext: ChatTemplateExt,
    #[serde(default)]
    pub nvext: Option<NvExt>,
    #[serde(default, alias = "chat_template_kwargs")]
    pub chat_template_args: Option<Map<String, Value>>,
    /// Every other root key, in body order.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

// ---------------------------------------------------------------- completions

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, rename = "Prompt")]
pub enum Prompt {
    String(String),
    StringArray(Vec<String>),
    IntegerArray(Vec<u32>),
    ArrayOfIntegerArray(Vec<Vec<u32>>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct CompletionFields {
    pub model: String,
    pub prompt: Prompt,
    pub suffix: Option<String>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub n: Option<u8>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub logprobs: Option<u8>,
    pub echo: Option<bool>,
    pub stop: Option<Stop>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub best_of: Option<u8>,
    pub logit_bias: Option<Map<String, Value>>,
    pub user: Option<String>,
    pub seed: Option<i64>,
}

/// A completions request, named as in the reference.
#[derive(Debug, Clone, Deserialize)]
pub struct NvCreateCompletionRequest {
    #[serde(flatten)]
    pub fields: CompletionFields,
    #[serde(flatten)]
    pub common: CommonExt,
    #[serde(default)]
    pub nvext: Option<NvExt>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

// ---------------------------------------------------------------- parsing

/// Deserialise a body the way the reference's JSON extractor does, including its
/// lenient second try: invalid UTF-8 replaced and raw control characters inside
/// strings escaped. When that fails too, the first error is the one reported.
pub fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, HttpError> {
    match serde_json::from_slice(body) {
        Ok(value) => Ok(value),
        Err(first) => match repair_json(body) {
            Some(repaired) => {
                serde_json::from_slice(&repaired).map_err(|_| HttpError::deserialize(&first))
            }
            None => Err(HttpError::deserialize(&first)),
        },
    }
}

/// The repaired body, or `None` when there was nothing to repair.
fn repair_json(body: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(body);
    let mut changed = matches!(text, std::borrow::Cow::Owned(_));
    let mut out = String::with_capacity(text.len() + 16);
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string && !escaped && (c as u32) < 0x20 {
            out.push_str(&format!("\\u{:04x}", c as u32));
            changed = true;
            continue;
        }
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        }
        out.push(c);
    }
    changed.then(|| out.into_bytes())
}
