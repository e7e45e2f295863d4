//! The chat prompt: a parsed request rendered through the model's template the way
//! the reference renders it, and the message text helpers around it.

use serde_json::{json, Map, Value};

use super::error::HttpError;
use super::model::ModelCard;
use super::request::{
    Content, Message, NvCreateChatCompletionRequest, ReasoningEffort, Tool, ToolChoice,
};
use super::template::ChatTemplate;
use super::validate::thinking_mode;

/// The chat prompt text the template produces for a parsed request.
/// The args merged last into the template context: the client's own
/// `chat_template_args`, with `thinking` and `reasoning_effort` mapped in.
pub fn template_args(request: &NvCreateChatCompletionRequest) -> Map<String, Value> {
    let mut args = request.chat_template_args.clone().unwrap_or_default();
    if let Some(mode) = request
        .template_ext
        .thinking
        .as_ref()
        .and_then(|t| thinking_mode(t).ok())
    {
        if mode != "adaptive" {
            args.insert("thinking".into(), Value::Bool(mode == "enabled"));
        }
        args.insert("thinking_mode".into(), mode.into());
    }
    if let Some(effort) = request.fields.reasoning_effort {
        args.entry("enable_thinking")
            .or_insert(Value::Bool(effort != ReasoningEffort::None));
        args.insert("reasoning_effort".into(), effort.as_str().into());
    }
    args
}

pub fn render_chat(
    template: &ChatTemplate,
    card: &ModelCard,
    request: &NvCreateChatCompletionRequest,
) -> Result<String, HttpError> {
    let f = &request.fields;

    let exclude_tools =
        f.tool_choice == Some(ToolChoice::None) && card.exclude_tools_when_tool_choice_none;
    let tools = match (&f.tools, exclude_tools) {
        (Some(t), false) if !t.is_empty() => Some(tools_for_template(t)),
        _ => None,
    };

    let messages: Vec<Value> = f
        .messages
        .iter()
        .map(|m| message_for_template(m, template))
        .collect();
    let continue_final = request.template_ext.continue_final_message == Some(true);
    let add_generation_prompt = request
        .template_ext
        .add_generation_prompt
        .unwrap_or(!continue_final);

    let mut context = Map::new();
    context.insert("messages".into(), Value::Array(messages));
    context.insert("tools".into(), tools.clone().unwrap_or(Value::Null));
    let token = |t: &Option<String>| t.clone().map(Value::String).unwrap_or(Value::Null);
    context.insert("bos_token".into(), token(&card.bos_token));
    context.insert("eos_token".into(), token(&card.eos_token));
    context.insert("unk_token".into(), token(&card.unk_token));
    context.insert(
        "add_generation_prompt".into(),
        Value::Bool(add_generation_prompt),
    );
    for (key, value) in template_args(request) {
        context.insert(key, value);
    }

    let rendered = template
        .render(&Value::Object(context), tools.is_some())
        .map_err(|_| HttpError::internal("Failed to apply prompt template"))?;
    if continue_final {
        return Ok(cut_after_final_message(rendered, &f.messages));
    }
    Ok(rendered)
}

/// Tools as the template sees them: the OpenAI list, with a parameters object
/// that lacks `type` / `properties` given `"object"` / `{}` (appended, as the
/// reference does; templates often index `parameters.properties`).
fn tools_for_template(tools: &[Tool]) -> Value {
    let mut value = serde_json::to_value(tools).unwrap_or(Value::Null);
    for tool in value.as_array_mut().into_iter().flatten() {
        if let Some(Value::Object(params)) = tool.pointer_mut("/function/parameters") {
            if !params.contains_key("type") {
                params.insert("type".into(), "object".into());
            }
            if !params.contains_key("properties") {
                params.insert("properties".into(), Value::Object(Map::new()));
            }
        }
    }
    value
}

/// One message as the template sees it: text-only part arrays joined with "\n",
/// image parts reduced to placeholders, tool-call arguments parsed into objects
/// unless the template handles strings, reasoning folded into content when the
/// template does not read it.
fn message_for_template(message: &Message, template: &ChatTemplate) -> Value {
    let mut value = serde_json::to_value(message).unwrap_or(Value::Null);
    let Some(map) = value.as_object_mut() else {
        return value;
    };
    if let Some(content) = map.get_mut("content") {
        if let Value::Array(parts) = content {
            let texts: Option<Vec<&str>> = parts
                .iter()
                .map(|p| {
                    (p.get("type").and_then(Value::as_str) == Some("text"))
                        .then(|| p.get("text").and_then(Value::as_str))
                        .flatten()
                })
                .collect();
            if let Some(texts) = texts.filter(|t| !t.is_empty()) {
                *content = Value::String(texts.join("\n"));
            } else {
                for part in parts.iter_mut() {
                    let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                    if let Some(placeholder) = match kind {
                        "image_url" => Some("image"),
                        "input_audio" => Some("audio"),
                        "video_url" => Some("video"),
                        _ => None,
                    } {
                        *part = json!({"type": placeholder});
                    }
                }
            }
        }
    }
    if let Message::Assistant(assistant) = message {
        if !template.keeps_argument_strings() {
            if let Some(Value::Array(calls)) = map.get_mut("tool_calls") {
                for call in calls {
                    if let Some(args) = call.pointer_mut("/function/arguments") {
                        if let Some(parsed) = args
                            .as_str()
                            .and_then(|s| serde_json::from_str::<Value>(s).ok())
                        {
                            *args = parsed;
                        }
                    }
                }
            }
        }
        if let (Some(reasoning), false) = (
            &assistant.reasoning_content,
            template.reads_reasoning_content(),
        ) {
            let text = match &assistant.content {
                Some(Content::Text(t)) => t.as_str(),
                _ => "",
            };
            map.remove("reasoning_content");
            map.insert(
                "content".into(),
                Value::String(format!("<think>{reasoning}</think>{text}")),
            );
        }
    }
    value
}

fn content_text(content: &Content) -> String {
    match content {
        Content::Text(t) => t.clone(),
        Content::Parts(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn message_text(message: &Message) -> String {
    match message {
        Message::Developer(m) | Message::System(m) | Message::User(m) => content_text(&m.content),
        Message::Assistant(m) => m.content.as_ref().map(content_text).unwrap_or_default(),
        Message::Tool(m) => content_text(&m.content),
        Message::Function(m) => m.content.clone().unwrap_or_default(),
    }
}

pub(super) fn last_message_text(messages: &[Message]) -> String {
    messages.last().map(message_text).unwrap_or_default()
}

/// `continue_final_message`: end the prompt right after the final message's text.
fn cut_after_final_message(mut rendered: String, messages: &[Message]) -> String {
    let last = last_message_text(messages);
    let needle = last.trim();
    if !needle.is_empty() {
        if let Some(pos) = rendered.rfind(needle) {
            rendered.truncate(pos + needle.len());
        }
    }
    rendered
}
