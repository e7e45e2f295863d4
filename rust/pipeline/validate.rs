//! Request validation with the reference's order, status codes and messages.

use serde_json::{Map, Value};

use super::error::HttpError;
use super::request::{
    parse_body, CommonExt, Message, NvCreateChatCompletionRequest, NvCreateCompletionRequest,
    Prompt, ResponseFormat, Stop, StreamOptions, Tool, ToolChoice,
};

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
