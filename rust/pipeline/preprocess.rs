//! OpenAI request → the engine request (`PreprocessedRequest`) JSON exactly as the
//! reference frontend builds it, plus the `ResponsePlan` the response side reads.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokenizers::Tokenizer;

use super::detok::DecodeOptions;
use super::engine_request::{
    engine_request, required_tools_schema, tool_parameters, EngineFields, Stops,
};
use super::error::HttpError;
use super::model::{ModelCard, ModelError};
use super::plan::{ResponsePlan, Surface, ToolChoiceMode};
use super::prompt::{last_message_text, render_chat, template_args};
use super::request::{
    NvCreateChatCompletionRequest, NvCreateCompletionRequest, Prompt, ResponseFormat,
    StreamOptions, ToolChoice,
};
use super::template::ChatTemplate;
use super::tokens::{self, max_bytes_per_token, min_tokens};
use super::validate::{parse_chat, parse_completion};
use crate::parsers::chat::ChatParserSpec;
use crate::parsers::dialect::Dialect;
use crate::parsers::options::{force_nonempty_content_from_args, thinking_from_args};
use crate::parsers::reasoning::prompt_opens_reasoning;
use crate::parsers::Tools;

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
    /// See [`max_bytes_per_token`]: what proves a prompt too long untokenized.
    max_bytes_per_token: Option<usize>,
}

impl std::fmt::Debug for Preprocessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preprocessor")
            .field("card", &self.card)
            .field("template", &self.template)
            .finish_non_exhaustive()
    }
}

/// What the response side needs from a request of either surface.
struct ReplyFields<'a> {
    surface: Surface,
    model: &'a str,
    stream: Option<bool>,
    stream_options: Option<&'a StreamOptions>,
    n: Option<u8>,
    parsers: Option<ChatParserSpec>,
    tool_choice: ToolChoiceMode,
    parallel_tool_calls: bool,
    unary_harmony_cleanup: bool,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Preprocessor {
    pub fn new(card: ModelCard) -> Result<Self, ModelError> {
        let template = match &card.chat_template {
            Some(t) => Some(ChatTemplate::new(t, card.tool_use_template.as_deref())?),
            None => None,
        };
        Ok(Self {
            max_bytes_per_token: max_bytes_per_token(&card.tokenizer),
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

    /// A prompt of `prompt_tokens` tokens must leave room in the context.
    fn check_context(&self, prompt_tokens: usize) -> Result<(), HttpError> {
        let limit = self.card.context_length as usize;
        if limit > 0 && prompt_tokens >= limit {
            return Err(HttpError::context_overflow(limit, prompt_tokens));
        }
        Ok(())
    }

    /// Tokenize a prompt, unless its length alone proves it cannot fit: then it is
    /// refused as the reference refuses it, with the proven minimum as its size.
    fn encode(&self, text: &str) -> Result<Vec<u32>, HttpError> {
        self.check_context(min_tokens(text.len(), self.max_bytes_per_token))?;
        tokens::encode(&self.card.tokenizer, text)
            .map_err(|_| HttpError::internal("Failed to tokenize prompt"))
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
        render_chat(template, &self.card, request)
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

        let tools = match &f.tools {
            Some(list) => serde_json::to_value(list)
                .map_err(|e| e.to_string())
                .and_then(|v| Tools::from_value(&v))
                .map_err(|e| HttpError::validation(&e))?,
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
        let ext = &request.common;
        let explicit_guided = ext.guided_json.is_some()
            || ext.guided_regex.is_some()
            || ext.guided_grammar.is_some()
            || ext.guided_choice.as_ref().is_some_and(|c| !c.is_empty());
        if tool_choice.forces_calls() && explicit_guided {
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

        let tools_active = !tools.is_empty() && tool_choice != ToolChoiceMode::None;
        // The template opened the family's reasoning (`<think>`, `[THINK]`, ...) at the
        // end of the prompt: the output starts inside it.
        let reasoning = self
            .card
            .reasoning_parser
            .map(|f| f.read_by(Dialect::Dynamo, true));
        let in_reasoning = reasoning
            .zip(prompt.as_deref())
            .is_some_and(|(family, p)| prompt_opens_reasoning(family.name(), p))
            .then_some(true);
        let template_args = reasoning.is_some().then(|| template_args(&request));
        let template_args = template_args.as_ref();
        let mut parsers = ChatParserSpec {
            reasoning,
            tool_call: self.card.tool_call_parser.filter(|_| tools_active),
            tools: Arc::new(if tools_active {
                tools
            } else {
                Tools::default()
            }),
            stream_arguments: false,
            in_reasoning,
            thinking: reasoning.and_then(|f| thinking_from_args(f.switch(), template_args)),
            force_nonempty_content: force_nonempty_content_from_args(template_args),
            // Dynamo's unless the worker asked for another server's reading; Dynamo's
            // streaming quirks only in Dynamo's, and not for the template families,
            // which Dynamo lacks (they stream as vLLM's parser does).
            dialect: self.card.parser_dialect,
            reference_streaming: self.card.parser_dialect == Dialect::Dynamo
                && !self.card.uses_response_template(),
            response_template: self.card.response_template.clone(),
        };
        // Switched off, no reasoning parser runs: no `reasoning_tokens` either.
        parsers.reasoning = parsers.active_reasoning();
        let reply = ReplyFields {
            surface: Surface::Chat,
            model: &f.model,
            stream: f.stream,
            stream_options: f.stream_options.as_ref(),
            n: f.n,
            parsers: (parsers.reasoning.is_some() || parsers.tool_call.is_some())
                .then_some(parsers),
            tool_choice,
            parallel_tool_calls: f.parallel_tool_calls != Some(false),
            unary_harmony_cleanup: self.card.parser_dialect == Dialect::Dynamo
                && self
                    .card
                    .tool_call_parser
                    .is_some_and(|f| f.name() == "harmony"),
        };
        let engine = EngineFields {
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
            logprobs: (f.logprobs == Some(true))
                .then(|| f.top_logprobs.map(u32::from).unwrap_or(1)),
            guided_json,
        };
        Ok(self.prepare(&engine, reply, &token_ids, prompt.as_deref(), request_id))
    }

    /// `/v1/completions` with one prompt: no template, no BOS; token prompts pass through.
    pub fn completions(&self, body: &[u8], request_id: &str) -> Result<Prepared, HttpError> {
        let mut parts = self.completions_parts(body, request_id)?;
        match parts.len() {
            1 => Ok(parts.remove(0)),
            _ => Err(HttpError::validation(
                "Batch prompts (more than one prompt) are not supported",
            )),
        }
    }

    /// `/v1/completions`, one engine request per prompt. A single prompt is prepared
    /// as it always was; several are parts of a batch (Dynamo 1.6.1): part `I` has the
    /// id `<request id>-I` and numbers its choices from `I × n`.
    pub fn completions_parts(
        &self,
        body: &[u8],
        request_id: &str,
    ) -> Result<Vec<Prepared>, HttpError> {
        let request: NvCreateCompletionRequest = parse_completion(body)?;
        self.check_model(&request.fields.model)?;
        let prompts: Vec<(Option<&str>, Option<&[u32]>)> = match &request.fields.prompt {
            Prompt::String(s) => vec![(Some(s.as_str()), None)],
            Prompt::StringArray(items) => items.iter().map(|s| (Some(s.as_str()), None)).collect(),
            Prompt::IntegerArray(ids) => vec![(None, Some(ids.as_slice()))],
            Prompt::ArrayOfIntegerArray(items) => items
                .iter()
                .map(|ids| (None, Some(ids.as_slice())))
                .collect(),
        };
        if prompts.len() == 1 {
            let (prompt, ids) = prompts[0];
            return Ok(vec![
                self.completion(&request, prompt, ids, request_id, None)?
            ]);
        }
        let n = u32::from(request.fields.n.unwrap_or(1));
        prompts
            .iter()
            .enumerate()
            .map(|(i, &(prompt, ids))| {
                let part_id = format!("{request_id}-{i}");
                let offset = i as u32 * n;
                self.completion(&request, prompt, ids, &part_id, Some(offset))
            })
            .collect()
    }

    fn completion(
        &self,
        request: &NvCreateCompletionRequest,
        prompt: Option<&str>,
        token_ids: Option<&[u32]>,
        request_id: &str,
        batch_part: Option<u32>,
    ) -> Result<Prepared, HttpError> {
        let f = &request.fields;
        let nvext = request.nvext.as_ref();
        let token_ids = match (nvext.and_then(|n| n.token_data.clone()), token_ids, prompt) {
            (Some(ids), _, _) => ids,
            (None, Some(ids), _) => ids.to_vec(),
            (None, None, Some(p)) => self.encode(p)?,
            (None, None, None) => Vec::new(),
        };
        self.check_context(token_ids.len())?;

        // Completions fill an omitted max_tokens with the room left in the context.
        let context = self.card.context_length as usize;
        let max_tokens = f
            .max_tokens
            .or_else(|| (context > 0).then(|| (context - token_ids.len()) as u32));
        // Completions are never reasoning- or tool-parsed; `echo` is accepted and ignored.
        let reply = ReplyFields {
            surface: Surface::Completions,
            model: &f.model,
            stream: f.stream,
            stream_options: f.stream_options.as_ref(),
            n: f.n,
            parsers: None,
            tool_choice: ToolChoiceMode::None,
            parallel_tool_calls: true,
            unary_harmony_cleanup: false,
        };
        let engine = EngineFields {
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
            logprobs: f.logprobs.map(u32::from),
            guided_json: None,
        };
        let mut prepared = self.prepare(&engine, reply, &token_ids, prompt, request_id);
        prepared.plan.batch_part = batch_part;
        Ok(prepared)
    }

    /// The engine request bytes and the response plan, for either surface.
    fn prepare(
        &self,
        engine: &EngineFields<'_>,
        reply: ReplyFields<'_>,
        token_ids: &[u32],
        prompt: Option<&str>,
        request_id: &str,
    ) -> Prepared {
        let stops = Stops::new(engine, &self.card);
        // A parser that reads special-token markers needs the detokenizer to keep them;
        // everything else skips special tokens unless the request says otherwise, as
        // Dynamo 1.6.1 does.
        // `/v1/completions` too (live-checked: gpt_oss, and the harmony and kimi_k2
        // tool parsers alone, keep `<｜begin▁of▁sentence｜>` in its text).
        let card = &self.card;
        let reasoning_keeps = card
            .reasoning_parser
            .is_some_and(|f| f.read_by(Dialect::Dynamo, true).info().keeps_special_tokens);
        let keeps_special_tokens = reasoning_keeps
            || card
                .tool_call_parser
                .is_some_and(|f| f.info().keeps_special_tokens);
        let skip_special_tokens = if keeps_special_tokens {
            Some(false)
        } else {
            engine.ext.skip_special_tokens
        };
        let annotations: Vec<String> = engine
            .nvext
            .and_then(|n| n.annotations.clone())
            .unwrap_or_default();
        let engine_request = engine_request(
            &self.card,
            engine,
            token_ids,
            &stops,
            skip_special_tokens,
            &annotations,
        );

        let stream = reply.stream == Some(true);
        let options = reply.stream_options;
        let prefix = match reply.surface {
            Surface::Chat => "chatcmpl",
            Surface::Completions => "cmpl",
        };
        let plan = ResponsePlan {
            surface: reply.surface,
            response_id: format!("{prefix}-{request_id}"),
            created: now_secs(),
            model: reply.model.to_owned(),
            stream,
            include_usage: stream && options.is_some_and(|o| o.include_usage),
            continuous_usage: options.and_then(|o| o.continuous_usage_stats) == Some(true),
            n: u32::from(reply.n.unwrap_or(1)),
            prompt_tokens: token_ids.len() as u32,
            logprobs: engine.logprobs.is_some(),
            decode: DecodeOptions {
                skip_special_tokens: skip_special_tokens != Some(false),
                hidden_stop_ids: stops.hidden_ids(),
                stop: stops.strings.unwrap_or_default(),
                include_stop_str_in_output: engine.ext.include_stop_str_in_output == Some(true),
                min_tokens: engine.ext.min_tokens.unwrap_or(0),
            },
            parsers: reply.parsers,
            tool_choice: reply.tool_choice,
            parallel_tool_calls: reply.parallel_tool_calls,
            unary_harmony_cleanup: reply.unary_harmony_cleanup,
            annotation_events: annotation_events(&annotations, request_id, prompt, token_ids),
            batch_part: None,
        };
        Prepared {
            engine_request,
            plan,
        }
    }
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
