//! OpenAI request bodies as the reference frontend parses and validates them.
//!
//! The types mirror the reference's shapes on purpose: the standard request is
//! `#[serde(flatten)]`ed next to the root-level extensions and a catch-all, so serde
//! buffers the body and every type error reports the position of the end of the
//! body — exactly the `at line L column C` the reference prints.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::HttpError;

/// The reference's upper bound on `max_tokens` / `max_completion_tokens`.
pub const MAX_TOKENS_LIMIT: u32 = 1_048_576;

/// Root keys accepted without being modelled (handed to the engine as-is).
const PASS_THROUGH: [&str; 6] = [
    "cache_salt",
    "stop_token_ids",
    "detokenize",
    "allowed_token_ids",
    "bad_words_token_ids",
    "logprob_token_ids",
];

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

pub fn parse_chat(body: &[u8]) -> Result<NvCreateChatCompletionRequest, HttpError> {
    let request: NvCreateChatCompletionRequest = parse_body(body)?;
    validate_chat(&request)?;
    Ok(request)
}

pub fn parse_completion(body: &[u8]) -> Result<NvCreateCompletionRequest, HttpError> {
    let request: NvCreateCompletionRequest = parse_body(body)?;
    validate_completion(&request)?;
    Ok(request)
}

fn check(condition: bool, message: impl FnOnce() -> String) -> Result<(), HttpError> {
    if condition {
        Ok(())
    } else {
        Err(HttpError::validation(&message()))
    }
}

fn is_token_id_array(value: &Value) -> bool {
    value.as_array().is_some_and(|items| {
        items
            .iter()
            .all(|v| v.as_u64().is_some_and(|n| n <= u32::MAX as u64))
    })
}

/// Unmodelled root keys: pass-through keys are type-checked, the rest rejected.
fn validate_other(other: &Map<String, Value>) -> Result<(), HttpError> {
    let unsupported: Vec<String> = other
        .keys()
        .filter(|k| !PASS_THROUGH.contains(&k.as_str()))
        .map(|k| format!("`{k}`"))
        .collect();
    if !unsupported.is_empty() {
        return Err(HttpError::validation(&format!(
            "Unsupported parameter(s): {}",
            unsupported.join(", ")
        )));
    }
    if let Some(salt) = other.get("cache_salt") {
        check(salt.is_string(), || "`cache_salt` must be a string".into())?;
        check(salt.as_str() != Some(""), || {
            "Parameter 'cache_salt' must be a non-empty string if provided.".into()
        })?;
    }
    for key in ["stop_token_ids", "allowed_token_ids", "logprob_token_ids"] {
        if let Some(v) = other.get(key) {
            check(is_token_id_array(v), || {
                format!("`{key}` must be an array of token IDs")
            })?;
        }
    }
    if let Some(v) = other.get("detokenize") {
        check(v.is_boolean(), || "`detokenize` must be a boolean".into())?;
    }
    if let Some(v) = other.get("bad_words_token_ids") {
        let ok = v
            .as_array()
            .is_some_and(|rows| rows.iter().all(is_token_id_array));
        check(ok, || {
            "`bad_words_token_ids` must be an array of token ID arrays".into()
        })?;
    }
    Ok(())
}

/// Token ids from a pass-through key already checked by `validate_other`.
pub fn token_id_list(other: &Map<String, Value>, key: &str) -> Option<Vec<u32>> {
    other.get(key)?.as_array().map(|items| {
        items
            .iter()
            .filter_map(|v| v.as_u64().map(|n| n as u32))
            .collect()
    })
}

fn validate_range(name: &str, value: Option<f32>, lo: f32, hi: f32) -> Result<(), HttpError> {
    match value {
        Some(v) if !(lo..=hi).contains(&v) => Err(HttpError::validation(&format!(
            "{name} must be between {lo} and {hi}, got {v}"
        ))),
        _ => Ok(()),
    }
}

fn validate_max_tokens(label: &str, value: Option<u32>) -> Result<(), HttpError> {
    match value {
        Some(0) => Err(HttpError::validation(&format!(
            "{label} must be greater than 0, got 0"
        ))),
        Some(v) if v > MAX_TOKENS_LIMIT => Err(HttpError::validation(&format!(
            "{label} must not exceed {MAX_TOKENS_LIMIT}, got {v}"
        ))),
        _ => Ok(()),
    }
}

const MAX_STOP_SEQUENCES: usize = 32;

fn validate_stop(stop: Option<&Stop>) -> Result<(), HttpError> {
    match stop {
        Some(Stop::String(s)) => check(!s.is_empty(), || "Stop sequence cannot be empty".into()),
        Some(Stop::StringArray(items)) => {
            check(!items.is_empty(), || {
                "Stop sequences array cannot be empty".into()
            })?;
            check(items.len() <= MAX_STOP_SEQUENCES, || {
                format!(
                    "Maximum of {MAX_STOP_SEQUENCES} stop sequences allowed, got {}",
                    items.len()
                )
            })?;
            match items.iter().position(String::is_empty) {
                Some(i) => check(false, || {
                    format!("Stop sequence at index {i} cannot be empty")
                }),
                None => Ok(()),
            }
        }
        Some(Stop::TokenIds(items)) => {
            check(!items.is_empty(), || {
                "Stop token IDs array cannot be empty".into()
            })?;
            check(items.len() <= MAX_STOP_SEQUENCES, || {
                format!(
                    "Maximum of {MAX_STOP_SEQUENCES} stop token IDs allowed, got {}",
                    items.len()
                )
            })
        }
        None => Ok(()),
    }
}

fn validate_logit_bias(bias: Option<&Map<String, Value>>) -> Result<(), HttpError> {
    for (token, value) in bias.into_iter().flatten() {
        check(token.parse::<u32>().is_ok(), || {
            "Logit bias key must be a non-negative 32-bit integer token id".into()
        })?;
        let Some(number) = value.as_f64() else {
            return Err(HttpError::validation(&format!(
                "Logit bias value for token '{token}' must be a number, got {value:?}"
            )));
        };
        let number = number as f32;
        check((-100.0..=100.0).contains(&number), || {
            format!("Logit bias for token '{token}' must be between -100 and 100, got {number}")
        })?;
    }
    Ok(())
}

fn validate_model(model: &str) -> Result<(), HttpError> {
    check(!model.trim().is_empty(), || "Model cannot be empty".into())
}

fn validate_user(user: Option<&str>) -> Result<(), HttpError> {
    check(user.map_or(true, |u| !u.trim().is_empty()), || {
        "User ID cannot be empty".into()
    })
}

fn validate_n(n: Option<u8>) -> Result<(), HttpError> {
    match n {
        Some(v) if !(1..=128).contains(&v) => Err(HttpError::validation(&format!(
            "n must be between 1 and 128, got {v}"
        ))),
        _ => Ok(()),
    }
}

fn validate_n_with_temperature(n: Option<u8>, temperature: Option<f32>) -> Result<(), HttpError> {
    let temperature = temperature.unwrap_or(1.0);
    match n {
        Some(n) if n > 1 && temperature == 0.0 => Err(HttpError::validation(&format!(
            "When n > 1, temperature must be greater than 0 to ensure diverse outputs. Got n={n}, temperature={temperature}"
        ))),
        _ => Ok(()),
    }
}

fn validate_stream_options(
    stream: Option<bool>,
    options: Option<&StreamOptions>,
) -> Result<(), HttpError> {
    check(options.is_none() || stream == Some(true), || {
        "The 'stream_options' field is only allowed when 'stream' is set to true.".into()
    })
}

/// The vLLM-style root extensions, in the reference's order.
fn validate_common(common: &CommonExt) -> Result<(), HttpError> {
    if let Some(r) = common.repetition_penalty {
        check(r > 0.0 && r <= 2.0, || {
            format!("Repetition penalty must be between 0 and 2, got {r}")
        })?;
    }
    validate_range("Min_p", common.min_p, 0.0, 1.0)?;
    if let Some(k) = common.top_k {
        check(k >= -1, || {
            "Top_k must be null or greater than or equal to -1".into()
        })?;
    }
    Ok(())
}

fn validate_chat(request: &NvCreateChatCompletionRequest) -> Result<(), HttpError> {
    let f = &request.fields;
    // Checked by the HTTP handler before the request's own validation.
    if f.functions.is_some() {
        return Err(HttpError::not_implemented_validation(
            "`functions` is deprecated. Please migrate to use `tools` instead.",
        ));
    }
    if f.function_call.is_some() {
        return Err(HttpError::not_implemented_validation(
            "`function_call` is deprecated. Please migrate to use `tool_choice` instead.",
        ));
    }
    check(!f.messages.is_empty(), || {
        "The 'messages' field cannot be empty. At least one message is required.".into()
    })?;
    validate_stream_options(f.stream, f.stream_options.as_ref())?;

    validate_other(&request.other)?;
    if let Some(args) = &request.chat_template_args {
        check(!args.contains_key("chat_template"), || {
            "`chat_template` is not supported inside `chat_template_args`".into()
        })?;
    }
    validate_tool_call_arguments(&f.messages)?;
    validate_model(&f.model)?;
    validate_range("Frequency penalty", f.frequency_penalty, -2.0, 2.0)?;
    validate_logit_bias(f.logit_bias.as_ref())?;
    if let Some(k) = f.top_logprobs {
        check(k <= 20, || {
            format!("Top_logprobs must be between 0 and 20, got {k}")
        })?;
    }
    validate_max_tokens("Max tokens", f.max_tokens)?;
    validate_max_tokens("Max completion tokens", f.max_completion_tokens)?;
    validate_n(f.n)?;
    validate_range("Presence penalty", f.presence_penalty, -2.0, 2.0)?;
    validate_response_format(f.response_format.as_ref(), &request.common)?;
    validate_stop(f.stop.as_ref())?;
    validate_range("Temperature", f.temperature, 0.0, 2.0)?;
    validate_range("Top_p", f.top_p, 0.0, 1.0)?;
    validate_tools(f.tools.as_deref())?;
    validate_tool_choice(f.tool_choice.as_ref(), f.tools.as_deref())?;
    validate_user(f.user.as_deref())?;
    validate_common(&request.common)?;
    validate_n_with_temperature(f.n, f.temperature)?;

    let t = &request.template_ext;
    check(
        !(t.continue_final_message == Some(true) && t.add_generation_prompt == Some(true)),
        || "Cannot set both `continue_final_message` and `add_generation_prompt` to True.".into(),
    )?;
    if let Some(thinking) = &t.thinking {
        thinking_mode(thinking).map_err(|m| HttpError::validation(&m))?;
    }
    Ok(())
}

/// `thinking`: a bool, or `{type: enabled|disabled|adaptive}`.
pub fn thinking_mode(value: &Value) -> Result<&'static str, String> {
    if let Some(enabled) = value.as_bool() {
        return Ok(if enabled { "enabled" } else { "disabled" });
    }
    let Some(object) = value.as_object() else {
        return Err("`thinking` must be a boolean or an object with `type` set to `enabled`, `disabled`, or `adaptive`".into());
    };
    match object.get("type").and_then(Value::as_str) {
        Some("enabled") => Ok("enabled"),
        Some("disabled") => Ok("disabled"),
        Some("adaptive") => Ok("adaptive"),
        _ => Err("`thinking.type` must be `enabled`, `disabled`, or `adaptive`".into()),
    }
}

/// Earlier assistant tool calls must carry a JSON object string (or nothing).
fn validate_tool_call_arguments(messages: &[Message]) -> Result<(), HttpError> {
    for (i, message) in messages.iter().enumerate() {
        let Message::Assistant(assistant) = message else {
            continue;
        };
        for (j, call) in assistant.tool_calls.iter().flatten().enumerate() {
            let arguments = &call.function.arguments;
            if arguments.trim().is_empty() {
                continue;
            }
            let field = format!("`messages[{i}].tool_calls[{j}].function.arguments`");
            match serde_json::from_str::<Value>(arguments) {
                Err(e) => {
                    return Err(HttpError::validation(&format!(
                        "{field} must be a valid JSON object string: {e}"
                    )))
                }
                Ok(v) if !v.is_object() => {
                    return Err(HttpError::validation(&format!(
                        "{field} must be a valid JSON object string"
                    )))
                }
                Ok(_) => {}
            }
        }
    }
    Ok(())
}

const MAX_TOOLS: usize = 1536;
const MAX_FUNCTION_NAME_LENGTH: usize = 96;

fn validate_tools(tools: Option<&[Tool]>) -> Result<(), HttpError> {
    let Some(tools) = tools else {
        return Ok(());
    };
    check(!tools.is_empty(), || {
        "tools array cannot be empty; omit the field entirely to disable tool use".into()
    })?;
    check(tools.len() <= MAX_TOOLS, || {
        format!(
            "Maximum of {MAX_TOOLS} tools are supported, got {}",
            tools.len()
        )
    })?;
    for (i, tool) in tools.iter().enumerate() {
        let name = &tool.function.name;
        check(name.len() <= MAX_FUNCTION_NAME_LENGTH, || {
            format!(
                "Function name at index {i} exceeds {MAX_FUNCTION_NAME_LENGTH} character limit, got {} characters",
                name.len()
            )
        })?;
        check(!name.trim().is_empty(), || {
            format!("Function name at index {i} cannot be empty")
        })?;
        check(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            || {
                format!(
                    "Function at index {i} has an invalid name: \"{name}\". Only a-z, A-Z, 0-9, underscores, and dashes are allowed."
                )
            },
        )?;
    }
    Ok(())
}

fn validate_tool_choice(
    choice: Option<&ToolChoice>,
    tools: Option<&[Tool]>,
) -> Result<(), HttpError> {
    let tools = tools.unwrap_or(&[]);
    match choice {
        Some(ToolChoice::Required) => check(!tools.is_empty(), || {
            "tool_choice is \"required\" but tools is empty".into()
        }),
        Some(ToolChoice::Named(named)) => {
            let name = &named.function.name;
            check(tools.iter().any(|t| &t.function.name == name), || {
                format!("tool named \"{name}\" in tool_choice is not present in tools")
            })
        }
        _ => Ok(()),
    }
}

fn validate_response_format(
    format: Option<&ResponseFormat>,
    common: &CommonExt,
) -> Result<(), HttpError> {
    let Some(format) = format else {
        return Ok(());
    };
    if let ResponseFormat::JsonSchema { json_schema } = format {
        check(!json_schema.name.is_empty(), || {
            "`response_format.json_schema.name` cannot be empty".into()
        })?;
        check(json_schema.schema.is_some(), || {
            "`response_format.json_schema.schema` is required when `response_format.type` is `json_schema`".into()
        })?;
        check(json_schema.schema != Some(Value::Bool(false)), || {
            "`response_format.json_schema.schema` cannot be false because it is unsatisfiable"
                .into()
        })?;
    }
    let guided = common.guided_json.is_some()
        || common.guided_regex.is_some()
        || common.guided_choice.is_some()
        || common.guided_grammar.is_some();
    check(!guided, || {
        "`response_format` cannot be used together with `guided_json`, `guided_regex`, `guided_choice`, or `guided_grammar`".into()
    })
}

fn validate_prompt(prompt: &Prompt) -> Result<(), HttpError> {
    match prompt {
        Prompt::String(s) => check(!s.is_empty(), || "Prompt string cannot be empty".into()),
        Prompt::StringArray(items) => {
            check(!items.is_empty(), || {
                "Prompt string array cannot be empty".into()
            })?;
            match items.iter().position(String::is_empty) {
                Some(i) => check(false, || {
                    format!("Prompt string at index {i} cannot be empty")
                }),
                None => Ok(()),
            }
        }
        Prompt::IntegerArray(items) => check(!items.is_empty(), || {
            "Prompt integer array cannot be empty".into()
        }),
        Prompt::ArrayOfIntegerArray(items) => {
            check(!items.is_empty(), || {
                "Prompt array of integer arrays cannot be empty".into()
            })?;
            match items.iter().position(Vec::is_empty) {
                Some(i) => check(false, || {
                    format!("Prompt integer array at index {i} cannot be empty")
                }),
                None => Ok(()),
            }
        }
    }
}

fn validate_completion(request: &NvCreateCompletionRequest) -> Result<(), HttpError> {
    let f = &request.fields;
    validate_stream_options(f.stream, f.stream_options.as_ref())?;
    validate_other(&request.other)?;
    validate_model(&f.model)?;
    validate_prompt(&f.prompt)?;
    if let Some(suffix) = &f.suffix {
        check(suffix.len() <= 10_000, || {
            "Suffix is too long, maximum 10000 characters".into()
        })?;
    }
    validate_max_tokens("Max tokens", f.max_tokens)?;
    validate_range("Temperature", f.temperature, 0.0, 2.0)?;
    validate_range("Top_p", f.top_p, 0.0, 1.0)?;
    validate_n(f.n)?;
    if let Some(k) = f.logprobs {
        check(k <= 5, || {
            format!("Logprobs must be between 0 and 5, got {k}")
        })?;
    }
    validate_stop(f.stop.as_ref())?;
    validate_range("Presence penalty", f.presence_penalty, -2.0, 2.0)?;
    validate_range("Frequency penalty", f.frequency_penalty, -2.0, 2.0)?;
    if let Some(best_of) = f.best_of {
        check(best_of <= 20, || {
            format!("Best_of must be between 0 and 20, got {best_of}")
        })?;
        if let Some(n) = f.n {
            check(best_of >= n, || {
                format!(
                    "Best_of must be greater than or equal to n, got best_of={best_of} and n={n}"
                )
            })?;
        }
    }
    validate_logit_bias(f.logit_bias.as_ref())?;
    validate_user(f.user.as_deref())?;
    validate_common(&request.common)?;
    validate_n_with_temperature(f.n, f.temperature)
}
