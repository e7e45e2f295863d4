//! OpenAI request → the engine request (`PreprocessedRequest`) JSON exactly as the
//! reference frontend builds it, plus the `ResponsePlan` the response side reads.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{json, Map, Value};
use tokenizers::Tokenizer;

use super::error::HttpError;
use super::model::ModelCard;
use super::plan::{ResponsePlan, Surface, ToolChoiceMode};
use super::request::{
    parse_chat, parse_completion, thinking_mode, token_id_list, CommonExt, Content, Message,
    NvCreateChatCompletionRequest, NvCreateCompletionRequest, NvExt, Prompt, ReasoningEffort,
    ResponseFormat, Stop, Tool, ToolChoice,
};
use super::template::ChatTemplate;
use crate::parsers::Tools;

/// Tool-call parsers whose markers are special tokens the detokenizer must keep:
/// chat requests to such a model get `skip_special_tokens: false` (as do those of a
/// `gpt_oss` reasoning model). Everything else skips special tokens unless the
/// request says otherwise, as Dynamo 1.6.1 does.
const NEEDS_SPECIAL_TOKENS: [&str; 3] = ["harmony", "kimi_k2", "gemma4"];
const REASONING_NEEDS_SPECIAL_TOKENS: [&str; 1] = ["gpt_oss"];

/// A request ready for the engine.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The engine request JSON (compact, reference field order).
    pub engine_request: Vec<u8>,
    pub plan: ResponsePlan,
}

/// One model's request side: tokenizer loaded and template compiled once.
pub struct Preprocessor {
    card: Arc<ModelCard>,
    template: Option<ChatTemplate>,
}

impl std::fmt::Debug for Preprocessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preprocessor")
            .field("card", &self.card)
            .field("template", &self.template)
            .finish()
    }
}

// ---------------------------------------------------------------- engine request shape

#[derive(Serialize)]
struct EngineRequest<'a> {
    model: &'a str,
    token_ids: &'a [u32],
    stop_conditions: StopConditions,
    sampling_options: SamplingOptions,
    output_options: OutputOptions,
    eos_token_ids: &'a [u32],
    mdc_sum: &'a str,
    annotations: &'a [String],
    routing: Map<String, Value>,
    router_config_override: Option<Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    require_reasoning: bool,
}

#[derive(Serialize, Default)]
struct StopConditions {
    max_tokens: Option<u32>,
    stop: Option<Vec<String>>,
    stop_token_ids: Option<Vec<u32>>,
    stop_token_ids_visible: Option<Vec<u32>>,
    stop_token_ids_hidden: Option<Vec<u32>>,
    min_tokens: Option<u32>,
    ignore_eos: Option<bool>,
    max_thinking_tokens: Option<u32>,
}

/// Sampling values travel as f32 and are widened for JSON (0.7 → 0.699999988079071).
#[derive(Serialize, Default)]
struct SamplingOptions {
    n: Option<u8>,
    best_of: Option<u8>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    repetition_penalty: Option<f64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i32>,
    min_p: Option<f64>,
    use_beam_search: Option<bool>,
    length_penalty: Option<f64>,
    seed: Option<i64>,
    include_stop_str_in_output: Option<bool>,
    guided_decoding: Option<GuidedDecoding>,
}

#[derive(Serialize, Default)]
struct GuidedDecoding {
    #[serde(skip_serializing_if = "Option::is_none")]
    json: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    regex: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    choice: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grammar: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backend: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    whitespace_pattern: Option<String>,
}

#[derive(Serialize, Default)]
struct OutputOptions {
    logprobs: Option<u32>,
    prompt_logprobs: Option<u32>,
    skip_special_tokens: Option<bool>,
    formatted_prompt: Option<String>,
    return_tokens_as_token_ids: Option<bool>,
}

fn widen(v: Option<f32>) -> Option<f64> {
    v.map(f64::from)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The request fields both surfaces map the same way.
struct Common<'a> {
    max_tokens: Option<u32>,
    stop: Option<&'a Stop>,
    other: &'a Map<String, Value>,
    ext: &'a CommonExt,
    nvext: Option<&'a NvExt>,
    n: Option<u8>,
    best_of: Option<u8>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    seed: Option<i64>,
    logprobs: Option<u32>,
    guided_json: Option<Value>,
}

impl Preprocessor {
    pub fn new(card: ModelCard) -> Result<Self, minijinja::Error> {
        let template = match &card.chat_template {
            Some(t) => Some(ChatTemplate::new(t, card.tool_use_template.as_deref())?),
            None => None,
        };
        Ok(Self {
            card: Arc::new(card),
            template,
        })
    }

    pub fn card(&self) -> &ModelCard {
        &self.card
    }

    pub fn tokenizer(&self) -> Arc<Tokenizer> {
        self.card.tokenizer()
    }

    /// Whether an assistant's `reasoning_content` reaches the template folded into its
    /// content as `<think>…</think>`, because the template does not read the field.
    pub fn folds_reasoning(&self) -> bool {
        self.template
            .as_ref()
            .is_some_and(|t| !t.reads_reasoning_content())
    }

    fn check_model(&self, model: &str) -> Result<(), HttpError> {
        if model == self.card.served_name {
            Ok(())
        } else {
            Err(HttpError::model_not_found())
        }
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, HttpError> {
        self.card
            .tokenizer
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|_| HttpError::internal("Failed to tokenize prompt"))
    }

    fn check_context(&self, prompt_tokens: usize) -> Result<(), HttpError> {
        let limit = self.card.context_length as usize;
        if limit > 0 && prompt_tokens >= limit {
            return Err(HttpError::new(
                400,
                &format!(
                    "This model's maximum context length is {limit} tokens. However, your \
                     messages resulted in {prompt_tokens} tokens. Please reduce the length of \
                     the messages."
                ),
            ));
        }
        Ok(())
    }

    /// `/v1/chat/completions`: validate, render, tokenize, build the engine request.
    pub fn chat(&self, body: &[u8], request_id: &str) -> Result<Prepared, HttpError> {
        let request = parse_chat(body)?;
        self.check_model(&request.fields.model)?;
        let f = &request.fields;
        let nvext = request.nvext.as_ref();

        let prompt = if nvext.and_then(|n| n.token_data.as_ref()).is_some() {
            None
        } else if nvext.and_then(|n| n.use_raw_prompt) == Some(true) {
            Some(last_message_text(&f.messages))
        } else {
            Some(self.render_chat(&request)?)
        };
        let token_ids = match (nvext.and_then(|n| n.token_data.clone()), &prompt) {
            (Some(ids), _) => ids,
            (None, Some(p)) => self.encode(p)?,
            (None, None) => Vec::new(),
        };
        self.check_context(token_ids.len())?;

        let tools_value = f
            .tools
            .as_ref()
            .map(|t| serde_json::to_value(t).unwrap_or(Value::Null));
        let tools = match &tools_value {
            Some(v) => Tools::from_value(v).map_err(|e| HttpError::validation(&e))?,
            None => Tools::default(),
        };
        let tool_choice = match &f.tool_choice {
            None | Some(ToolChoice::Auto) => ToolChoiceMode::Auto,
            Some(ToolChoice::None) => ToolChoiceMode::None,
            Some(ToolChoice::Required) => ToolChoiceMode::Required,
            Some(ToolChoice::Named(n)) => ToolChoiceMode::Named(n.function.name.clone()),
        };

        let mut guided_json = match &f.response_format {
            Some(ResponseFormat::JsonObject) => Some(json!({"type": "object"})),
            Some(ResponseFormat::JsonSchema { json_schema }) => json_schema.schema.clone(),
            Some(ResponseFormat::Text) | None => None,
        };
        let forced = matches!(
            tool_choice,
            ToolChoiceMode::Required | ToolChoiceMode::Named(_)
        );
        let ext = &request.common;
        let explicit_guided = ext.guided_json.is_some()
            || ext.guided_regex.is_some()
            || ext.guided_grammar.is_some()
            || ext.guided_choice.as_ref().is_some_and(|c| !c.is_empty());
        if forced && explicit_guided {
            return Err(HttpError::new(
                400,
                "guided decoding cannot be used in the same request as tool_choice=\"required\" or a named tool_choice.",
            ));
        }
        // A forced tool choice constrains the call, not the content, so it replaces
        // any response_format schema: the required array, or the named tool's parameters.
        if let Some(list) = f.tools.as_deref() {
            match &tool_choice {
                ToolChoiceMode::Required => guided_json = Some(required_tools_schema(list)),
                ToolChoiceMode::Named(name) => {
                    guided_json = list
                        .iter()
                        .find(|t| &t.function.name == name)
                        .map(tool_parameters)
                }
                _ => {}
            }
        }

        let logprobs =
            (f.logprobs == Some(true)).then(|| f.top_logprobs.map(u32::from).unwrap_or(1));
        let common = Common {
            max_tokens: f.max_completion_tokens.or(f.max_tokens),
            stop: f.stop.as_ref(),
            other: &request.other,
            ext: &request.common,
            nvext,
            n: f.n,
            best_of: None,
            presence_penalty: f.presence_penalty,
            frequency_penalty: f.frequency_penalty,
            temperature: f.temperature,
            top_p: f.top_p,
            seed: f.seed,
            logprobs,
            guided_json,
        };

        let tools_active = !tools.is_empty() && tool_choice != ToolChoiceMode::None;
        let tool_call_parser = if tools_active {
            self.card.tool_call_parser.clone()
        } else {
            None
        };
        let in_reasoning = prompt
            .as_deref()
            .is_some_and(|p| p.trim_end().ends_with("<think>"))
            .then_some(true);
        let stream = f.stream == Some(true);
        let plan = ResponsePlan {
            surface: Surface::Chat,
            response_id: format!("chatcmpl-{request_id}"),
            created: now_secs(),
            model: f.model.clone(),
            stream,
            include_usage: stream && f.stream_options.as_ref().is_some_and(|o| o.include_usage),
            n: u32::from(f.n.unwrap_or(1)),
            prompt_tokens: token_ids.len() as u32,
            echo_prompt: None,
            logprobs: logprobs.is_some(),
            top_logprobs: f.top_logprobs.map(u32::from),
            stop: Vec::new(),
            hidden_stop_ids: Vec::new(),
            include_stop_str_in_output: request.common.include_stop_str_in_output == Some(true),
            min_tokens: request.common.min_tokens,
            max_tokens: common.max_tokens,
            skip_special_tokens: false,
            reasoning_parser: self.card.reasoning_parser.clone(),
            tool_call_parser,
            tools: Arc::new(if tools_active {
                tools
            } else {
                Tools::default()
            }),
            in_reasoning,
            request_id: request_id.to_owned(),
            tool_choice,
            parallel_tool_calls: f.parallel_tool_calls != Some(false),
            continuous_usage: f
                .stream_options
                .as_ref()
                .and_then(|o| o.continuous_usage_stats)
                == Some(true),
            user_stop_ids: Vec::new(),
            annotation_events: Vec::new(),
            extra_fields: Vec::new(),
        };
        self.finish(common, &token_ids, prompt.as_deref(), plan)
    }

    /// `/v1/completions`: no template, no BOS; token prompts pass through.
    pub fn completions(&self, body: &[u8], request_id: &str) -> Result<Prepared, HttpError> {
        let request: NvCreateCompletionRequest = parse_completion(body)?;
        self.check_model(&request.fields.model)?;
        let f = &request.fields;
        let nvext = request.nvext.as_ref();

        let (prompt, token_ids) = match &f.prompt {
            Prompt::String(s) => (Some(s.clone()), None),
            Prompt::StringArray(items) if items.len() == 1 => (Some(items[0].clone()), None),
            Prompt::IntegerArray(ids) => (None, Some(ids.clone())),
            Prompt::ArrayOfIntegerArray(items) if items.len() == 1 => {
                (None, Some(items[0].clone()))
            }
            _ => {
                return Err(HttpError::validation(
                    "Batch prompts (more than one prompt) are not supported",
                ))
            }
        };
        let token_ids = match (nvext.and_then(|n| n.token_data.clone()), token_ids, &prompt) {
            (Some(ids), _, _) | (None, Some(ids), _) => ids,
            (None, None, Some(p)) => self.encode(p)?,
            (None, None, None) => Vec::new(),
        };
        self.check_context(token_ids.len())?;

        // Completions fill an omitted max_tokens with the room left in the context.
        let context = self.card.context_length as usize;
        let max_tokens = f
            .max_tokens
            .or_else(|| (context > 0).then(|| (context - token_ids.len()) as u32));

        let logprobs = f.logprobs.map(u32::from);
        let common = Common {
            max_tokens,
            stop: f.stop.as_ref(),
            other: &request.other,
            ext: &request.common,
            nvext,
            n: f.n,
            best_of: f.best_of,
            presence_penalty: f.presence_penalty,
            frequency_penalty: f.frequency_penalty,
            temperature: f.temperature,
            top_p: f.top_p,
            seed: f.seed,
            logprobs,
            guided_json: None,
        };
        let stream = f.stream == Some(true);
        let plan = ResponsePlan {
            surface: Surface::Completions,
            response_id: format!("cmpl-{request_id}"),
            created: now_secs(),
            model: f.model.clone(),
            stream,
            include_usage: stream && f.stream_options.as_ref().is_some_and(|o| o.include_usage),
            n: u32::from(f.n.unwrap_or(1)),
            prompt_tokens: token_ids.len() as u32,
            // The reference accepts `echo` and ignores it.
            echo_prompt: None,
            logprobs: logprobs.is_some(),
            top_logprobs: logprobs,
            stop: Vec::new(),
            hidden_stop_ids: Vec::new(),
            include_stop_str_in_output: request.common.include_stop_str_in_output == Some(true),
            min_tokens: request.common.min_tokens,
            max_tokens,
            skip_special_tokens: false,
            // Completions are never reasoning- or tool-parsed.
            reasoning_parser: None,
            tool_call_parser: None,
            tools: Arc::new(Tools::default()),
            in_reasoning: None,
            request_id: request_id.to_owned(),
            tool_choice: ToolChoiceMode::None,
            parallel_tool_calls: true,
            continuous_usage: f
                .stream_options
                .as_ref()
                .and_then(|o| o.continuous_usage_stats)
                == Some(true),
            user_stop_ids: Vec::new(),
            annotation_events: Vec::new(),
            extra_fields: Vec::new(),
        };
        self.finish(common, &token_ids, prompt.as_deref(), plan)
    }

    /// Build the engine request bytes and complete the plan's stop/output fields.
    fn finish(
        &self,
        c: Common<'_>,
        token_ids: &[u32],
        prompt: Option<&str>,
        mut plan: ResponsePlan,
    ) -> Result<Prepared, HttpError> {
        let ignore_eos = c.ext.ignore_eos == Some(true);
        let stop_strings = match c.stop {
            Some(Stop::String(s)) => Some(vec![s.clone()]),
            Some(Stop::StringArray(items)) => Some(items.clone()),
            _ => None,
        };
        // Token ids in `stop` win; the root `stop_token_ids` is the fallback.
        let stop_ids: Option<Vec<u32>> = match c.stop {
            Some(Stop::TokenIds(ids)) => Some(ids.clone()),
            _ => token_id_list(c.other, "stop_token_ids"),
        };
        let eos: Vec<u32> = if ignore_eos {
            Vec::new()
        } else {
            self.card.eos_token_ids.clone()
        };

        let guided = GuidedDecoding {
            json: c.guided_json.or_else(|| c.ext.guided_json.clone()),
            regex: c.ext.guided_regex.clone(),
            choice: c.ext.guided_choice.clone().filter(|v| !v.is_empty()),
            grammar: c.ext.guided_grammar.clone(),
            backend: c.ext.guided_decoding_backend.clone(),
            whitespace_pattern: c.ext.guided_whitespace_pattern.clone(),
        };
        // `backend` / `whitespace_pattern` only modify a constraint.
        let has_guided = guided.json.is_some()
            || guided.regex.is_some()
            || guided.choice.is_some()
            || guided.grammar.is_some();
        let mut sampling = SamplingOptions {
            n: c.n,
            best_of: c.best_of,
            presence_penalty: widen(c.presence_penalty),
            frequency_penalty: widen(c.frequency_penalty),
            repetition_penalty: widen(c.ext.repetition_penalty),
            temperature: widen(c.temperature),
            top_p: widen(c.top_p),
            top_k: c.ext.top_k.map(|k| if k == 0 { -1 } else { k }),
            min_p: widen(c.ext.min_p),
            use_beam_search: None,
            length_penalty: None,
            seed: c.seed,
            include_stop_str_in_output: c.ext.include_stop_str_in_output,
            guided_decoding: has_guided.then_some(guided),
        };
        if c.nvext.and_then(|n| n.greed_sampling) == Some(true) {
            // Greedy = every sampling knob left to the engine's greedy default.
            sampling.presence_penalty = None;
            sampling.frequency_penalty = None;
            sampling.repetition_penalty = None;
            sampling.temperature = None;
            sampling.top_p = None;
            sampling.top_k = None;
            sampling.min_p = None;
        }

        let card = &self.card;
        let keeps_special_tokens = plan.surface == Surface::Chat
            && (card
                .tool_call_parser
                .as_deref()
                .is_some_and(|p| NEEDS_SPECIAL_TOKENS.contains(&p))
                || card
                    .reasoning_parser
                    .as_deref()
                    .is_some_and(|p| REASONING_NEEDS_SPECIAL_TOKENS.contains(&p)));
        let skip_special_tokens = if keeps_special_tokens {
            Some(false)
        } else {
            c.ext.skip_special_tokens
        };

        let annotations: Vec<String> = c
            .nvext
            .and_then(|n| n.annotations.clone())
            .unwrap_or_default();
        let mut routing = Map::new();
        if let Some(n) = c.nvext {
            let pins = [
                ("backend_instance_id", n.backend_instance_id),
                ("prefill_worker_id", n.prefill_worker_id),
                ("decode_worker_id", n.decode_worker_id),
                ("dp_rank", n.dp_rank.map(u64::from)),
                ("prefill_dp_rank", n.prefill_dp_rank.map(u64::from)),
            ];
            for (key, value) in pins {
                if let Some(v) = value {
                    routing.insert(key.into(), v.into());
                }
            }
        }
        let cache_salt = c
            .other
            .get("cache_salt")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| c.nvext.and_then(|n| n.cache_salt.clone()));
        if let Some(salt) = cache_salt {
            routing.insert("cache_salt".into(), salt.into());
        }

        let request = EngineRequest {
            model: &self.card.served_name,
            token_ids,
            stop_conditions: StopConditions {
                max_tokens: c.max_tokens,
                stop: if ignore_eos {
                    None
                } else {
                    stop_strings.clone()
                },
                stop_token_ids: if ignore_eos { None } else { stop_ids.clone() },
                stop_token_ids_visible: None,
                stop_token_ids_hidden: (!eos.is_empty()).then(|| eos.clone()),
                min_tokens: c.ext.min_tokens,
                ignore_eos: c.ext.ignore_eos,
                max_thinking_tokens: c.nvext.and_then(|n| n.max_thinking_tokens),
            },
            sampling_options: sampling,
            output_options: OutputOptions {
                logprobs: c.logprobs,
                prompt_logprobs: c.ext.prompt_logprobs,
                skip_special_tokens,
                formatted_prompt: None,
                return_tokens_as_token_ids: c.ext.return_tokens_as_token_ids,
            },
            eos_token_ids: &eos,
            mdc_sum: &self.card.mdc_sum,
            annotations: &annotations,
            routing,
            router_config_override: None,
            // Guided output must wait until reasoning is over.
            require_reasoning: has_guided && self.card.reasoning_parser.is_some(),
        };
        let engine_request =
            serde_json::to_vec(&request).map_err(|e| HttpError::internal(&e.to_string()))?;

        // The decoder drops the text of the client's stop token ids like EOS.
        plan.hidden_stop_ids = eos;
        if !ignore_eos {
            plan.stop = stop_strings.unwrap_or_default();
            plan.user_stop_ids = stop_ids.unwrap_or_default();
            for id in &plan.user_stop_ids {
                if !plan.hidden_stop_ids.contains(id) {
                    plan.hidden_stop_ids.push(*id);
                }
            }
        }
        plan.skip_special_tokens = skip_special_tokens != Some(false);
        plan.annotation_events =
            annotation_events(&annotations, &plan.request_id, prompt, token_ids);
        plan.extra_fields = c
            .nvext
            .and_then(|n| n.extra_fields.clone())
            .unwrap_or_default();
        Ok(Prepared {
            engine_request,
            plan,
        })
    }

    /// The chat prompt text the template produces for a parsed request.
    pub fn render_chat(
        &self,
        request: &NvCreateChatCompletionRequest,
    ) -> Result<String, HttpError> {
        let template = self
            .template
            .as_ref()
            .ok_or_else(|| HttpError::internal("Failed to apply prompt template"))?;
        let f = &request.fields;
        let card = &self.card;

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
        // `thinking` and `reasoning_effort` become template args, merged last
        // with the client's own `chat_template_args`.
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
        if let Some(effort) = f.reasoning_effort {
            args.entry("enable_thinking")
                .or_insert(Value::Bool(effort != ReasoningEffort::None));
            args.insert("reasoning_effort".into(), effort.as_str().into());
        }
        for (key, value) in args {
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

fn last_message_text(messages: &[Message]) -> String {
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

/// A tool's parameters schema, with the reference's default when absent.
fn tool_parameters(tool: &Tool) -> Value {
    tool.function
        .parameters
        .clone()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}))
}

/// The guided-decoding schema for `tool_choice: "required"`: an array of
/// `{name, parameters}` objects, one `anyOf` branch per tool.
fn required_tools_schema(tools: &[Tool]) -> Value {
    let branches: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "properties": {
                    "name": {"type": "string", "enum": [t.function.name]},
                    "parameters": tool_parameters(t),
                },
                "required": ["name", "parameters"],
            })
        })
        .collect();
    json!({
        "type": "array",
        "minItems": 1,
        "items": {"type": "object", "anyOf": branches},
    })
}

/// Side-channel events a client asked for with `nvext.annotations`.
fn annotation_events(
    annotations: &[String],
    request_id: &str,
    prompt: Option<&str>,
    token_ids: &[u32],
) -> Vec<(String, String)> {
    annotations
        .iter()
        .filter_map(|a| {
            let comment = match a.as_str() {
                "request_id" => Value::String(request_id.to_owned()).to_string(),
                "formatted_prompt" => Value::String(prompt.unwrap_or("").to_owned()).to_string(),
                "token_ids" => serde_json::to_string(token_ids).ok()?,
                _ => return None,
            };
            Some((a.clone(), comment))
        })
        .collect()
}

/// `GET /v1/models` body for one served model.
pub fn models_body(card: &ModelCard, created: u64) -> Vec<u8> {
    let body = json!({
        "object": "list",
        "data": [{
            "id": card.served_name,
            "object": "model",
            "created": created,
            "owned_by": "nvidia",
            "context_window": card.context_length,
        }],
    });
    serde_json::to_vec(&body).unwrap_or_default()
}
