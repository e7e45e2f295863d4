//! A Hugging Face model directory read the way the reference frontend reads a
//! model deployment card: tokenizer, chat template, EOS ids, context length.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokenizers::Tokenizer;

use crate::parsers::dialect::Dialect;
use crate::parsers::template::{is_template_family, Template};
use crate::parsers::{ReasoningFamily, ToolCallFamily, UnknownParser};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("cannot load tokenizer {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error(transparent)]
    UnknownParser(#[from] UnknownParser),
    #[error("chat template: {0}")]
    Template(#[from] minijinja::Error),
    #[error("{0}")]
    Invalid(String),
}

/// Everything the pipeline needs about one served model.
#[derive(Clone)]
pub struct ModelCard {
    /// What clients put in `model`.
    pub served_name: String,
    pub source_path: PathBuf,
    /// Effective context length; 0 when unknown.
    pub context_length: u32,
    /// Parser families, resolved once; `None` when off.
    pub reasoning_parser: Option<ReasoningFamily>,
    pub tool_call_parser: Option<ToolCallFamily>,
    /// Whose reading of the output the parsers follow (Dynamo's unless the worker asks).
    pub parser_dialect: Dialect,
    /// The checkpoint's `response_template`, read when a parser family is template-driven
    /// (`response_template`/`hf`, `beam`); `None` for `beam` means its built-in one.
    pub response_template: Option<Arc<Template>>,
    /// From generation_config.json (else config.json, else the tokenizer's eos token).
    pub eos_token_ids: Vec<u32>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub unk_token: Option<String>,
    /// The default chat template, and the `tool_use` variant when the config names one.
    pub chat_template: Option<String>,
    pub tool_use_template: Option<String>,
    /// Tools are left out of the prompt for `tool_choice: "none"` (reference default).
    pub exclude_tools_when_tool_choice_none: bool,
    /// Checksum of the card, sent as `mdc_sum` in every engine request.
    pub mdc_sum: String,
    pub tokenizer: Arc<Tokenizer>,
}

impl std::fmt::Debug for ModelCard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelCard")
            .field("served_name", &self.served_name)
            .field("source_path", &self.source_path)
            .field("context_length", &self.context_length)
            .field("reasoning_parser", &self.reasoning_parser)
            .field("tool_call_parser", &self.tool_call_parser)
            .field("eos_token_ids", &self.eos_token_ids)
            .finish_non_exhaustive()
    }
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, ModelError> {
    fs::read(path).map_err(|source| ModelError::Io {
        path: path.to_owned(),
        source,
    })
}

/// A JSON file that may be absent; a present but broken file is an error.
fn read_json_opt(path: &Path) -> Result<Option<(Value, Vec<u8>)>, ModelError> {
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = read_bytes(path)?;
    let value = serde_json::from_slice(&bytes).map_err(|source| ModelError::Json {
        path: path.to_owned(),
        source,
    })?;
    Ok(Some((value, bytes)))
}

/// `bos_token` etc. are either a string or an AddedToken object with `content`.
fn special_token(config: &Value, key: &str) -> Option<String> {
    match config.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// `eos_token_id` is an int or a list of ints.
fn token_ids(value: Option<&Value>) -> Vec<u32> {
    match value {
        Some(Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_u64().map(|v| v as u32))
            .collect(),
        _ => Vec::new(),
    }
}

/// `chat_template` is a string or a list of `{name, template}`; returns
/// (default, tool_use).
fn split_templates(value: &Value) -> (Option<String>, Option<String>) {
    match value {
        Value::String(s) => (Some(s.clone()), None),
        Value::Array(items) => {
            let named = |wanted: &str| {
                items.iter().find_map(|item| {
                    (item.get("name")?.as_str()? == wanted)
                        .then(|| item.get("template")?.as_str().map(str::to_owned))
                        .flatten()
                })
            };
            (named("default"), named("tool_use"))
        }
        _ => (None, None),
    }
}

/// The checkpoint's `response_template` for the template families, read as vLLM 0.34 and
/// SGLang 0.5.23 read it: the tokenizer config's `response_template` object. `beam` falls
/// back to its built-in template (SGLang's fallback); `response_template` (`hf`) cannot
/// serve without one. As vLLM checks at startup, a reasoning parser needs the template's
/// `thinking` field and a tool-call parser its `tool_calls` field.
fn response_template(
    tokenizer_config: Option<&Value>,
    path: &Path,
    reasoning: Option<ReasoningFamily>,
    tool_call: Option<ToolCallFamily>,
) -> Result<Option<Arc<Template>>, ModelError> {
    let reasoning = reasoning
        .map(ReasoningFamily::name)
        .filter(|n| is_template_family(n));
    let tool_call = tool_call
        .map(ToolCallFamily::name)
        .filter(|n| is_template_family(n));
    if reasoning.is_none() && tool_call.is_none() {
        return Ok(None);
    }
    let parsers = [("reasoning", reasoning), ("tool-call", tool_call)]
        .into_iter()
        .filter_map(|(kind, name)| Some(format!("{kind} parser '{}'", name?)))
        .collect::<Vec<_>>()
        .join(" and ");
    let Some(spec) = tokenizer_config.and_then(|t| t.get("response_template")) else {
        if reasoning == Some("response_template") || tool_call == Some("response_template") {
            return Err(ModelError::Invalid(format!(
                "the {parsers} needs the checkpoint's response_template: {} has none",
                path.display()
            )));
        }
        return Ok(None);
    };
    let template = Template::from_value(spec)
        .map_err(|e| ModelError::Invalid(format!("{} ({parsers}): {e}", path.display())))?;
    for (needed, has, field) in [
        (reasoning.is_some(), template.has_thinking(), "thinking"),
        (tool_call.is_some(), template.has_tool_calls(), "tool_calls"),
    ] {
        if needed && !has {
            return Err(ModelError::Invalid(format!(
                "{} ({parsers}): the response_template has no '{field}' field",
                path.display()
            )));
        }
    }
    Ok(Some(Arc::new(template)))
}

/// Architectural context: config.json `max_position_embeddings` (or under
/// `text_config`), else the tokenizer's `model_max_length` when it is a real bound.
fn context_length(config: Option<&Value>, tokenizer_config: Option<&Value>) -> u32 {
    let from_config = config.and_then(|c| {
        c.get("max_position_embeddings")
            .or_else(|| c.get("text_config")?.get("max_position_embeddings"))
            .and_then(Value::as_u64)
    });
    let from_tokenizer = tokenizer_config
        .and_then(|t| t.get("model_max_length")?.as_u64())
        .filter(|&v| v <= u32::MAX as u64);
    from_config
        .or(from_tokenizer)
        .map(|v| v.min(u32::MAX as u64) as u32)
        .unwrap_or(0)
}

impl ModelCard {
    /// Read a model directory. `served_name` defaults to the directory name; parser
    /// names are resolved to their families (unknown names are an error).
    pub fn from_dir(
        dir: impl AsRef<Path>,
        served_name: Option<&str>,
        reasoning_parser: Option<&str>,
        tool_call_parser: Option<&str>,
    ) -> Result<Self, ModelError> {
        let reasoning_parser = reasoning_parser.map(ReasoningFamily::resolve).transpose()?;
        let tool_call_parser = tool_call_parser.map(ToolCallFamily::resolve).transpose()?;
        let dir = dir.as_ref();
        let source_path = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());

        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer_bytes = read_bytes(&tokenizer_path)?;
        let tokenizer =
            Tokenizer::from_bytes(&tokenizer_bytes).map_err(|e| ModelError::Tokenizer {
                path: tokenizer_path.clone(),
                message: e.to_string(),
            })?;

        let tokenizer_config_path = dir.join("tokenizer_config.json");
        let tokenizer_config = read_json_opt(&tokenizer_config_path)?;
        let config = read_json_opt(&dir.join("config.json"))?;
        let generation_config = read_json_opt(&dir.join("generation_config.json"))?;
        let template_file = dir.join("chat_template.jinja");
        let template_json = read_json_opt(&dir.join("chat_template.json"))?;

        let tc = tokenizer_config.as_ref().map(|(v, _)| v);
        let (mut chat_template, tool_use_template) = tc
            .and_then(|t| t.get("chat_template"))
            .map(split_templates)
            .unwrap_or((None, None));
        // A separate template file takes precedence (newer HF layouts put it there).
        if template_file.is_file() {
            let bytes = read_bytes(&template_file)?;
            chat_template = Some(String::from_utf8(bytes).map_err(|_| {
                ModelError::Invalid(format!("{} is not UTF-8", template_file.display()))
            })?);
        } else if let Some((value, _)) = &template_json {
            if let Some(t) = value.get("chat_template").and_then(Value::as_str) {
                chat_template = Some(t.to_owned());
            }
        }

        let response_template = response_template(
            tc,
            &tokenizer_config_path,
            reasoning_parser,
            tool_call_parser,
        )?;

        let bos_token = tc.and_then(|t| special_token(t, "bos_token"));
        let eos_token = tc.and_then(|t| special_token(t, "eos_token"));
        let unk_token = tc.and_then(|t| special_token(t, "unk_token"));

        let mut eos_token_ids = token_ids(
            generation_config
                .as_ref()
                .and_then(|(v, _)| v.get("eos_token_id")),
        );
        if eos_token_ids.is_empty() {
            eos_token_ids = token_ids(config.as_ref().and_then(|(v, _)| v.get("eos_token_id")));
        }
        if eos_token_ids.is_empty() {
            if let Some(id) = eos_token.as_deref().and_then(|t| tokenizer.token_to_id(t)) {
                eos_token_ids.push(id);
            }
        }

        let served_name = match served_name {
            Some(name) => name.to_owned(),
            None => source_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        if served_name.is_empty() {
            return Err(ModelError::Invalid("served model name is empty".into()));
        }

        let context_length = context_length(config.as_ref().map(|(v, _)| v), tc);

        // A stable card checksum over the name, the path and every file read, each
        // length-prefixed so the parts cannot run into each other. The reference
        // uses blake3; the value is opaque to engines.
        let mut sum = Sha256::new();
        let mut part = |bytes: &[u8]| {
            sum.update((bytes.len() as u64).to_le_bytes());
            sum.update(bytes);
        };
        part(served_name.as_bytes());
        part(source_path.to_string_lossy().as_bytes());
        part(&tokenizer_bytes);
        for (_, bytes) in [
            &tokenizer_config,
            &config,
            &generation_config,
            &template_json,
        ]
        .into_iter()
        .flatten()
        {
            part(bytes);
        }
        if let Some(t) = &chat_template {
            part(t.as_bytes());
        }
        part(&context_length.to_le_bytes());

        Ok(Self {
            served_name,
            source_path,
            context_length,
            reasoning_parser,
            tool_call_parser,
            parser_dialect: Dialect::Dynamo,
            response_template,
            eos_token_ids,
            bos_token,
            eos_token,
            unk_token,
            chat_template,
            tool_use_template,
            exclude_tools_when_tool_choice_none: true,
            mdc_sum: format!("{:x}", sum.finalize()),
            tokenizer: Arc::new(tokenizer),
        })
    }

    /// The runtime-advertised context length overrides the model files (the
    /// reference mocker advertises 0, which `/v1/models` then reports).
    pub fn with_context_length(mut self, context_length: u32) -> Self {
        self.context_length = context_length;
        self
    }

    /// Parse replies as `dialect`'s server does (`shakedown serve --parser-dialect`).
    pub fn with_parser_dialect(mut self, dialect: Dialect) -> Self {
        self.parser_dialect = dialect;
        self
    }

    /// Whether a parser family reads a response template (`response_template`/`hf`, `beam`).
    pub fn uses_response_template(&self) -> bool {
        self.reasoning_parser
            .is_some_and(|f| is_template_family(f.name()))
            || self
                .tool_call_parser
                .is_some_and(|f| is_template_family(f.name()))
    }

    pub fn tokenizer(&self) -> Arc<Tokenizer> {
        Arc::clone(&self.tokenizer)
    }

    /// The `GET /v1/models` body, for a model attached at `created`.
    pub fn models_body(&self, created: u64) -> Vec<u8> {
        let body = serde_json::json!({
            "object": "list",
            "data": [{
                "id": self.served_name,
                "object": "model",
                "created": created,
                "owned_by": "nvidia",
                "context_window": self.context_length,
            }],
        });
        serde_json::to_vec(&body).expect("a models body always serialises")
    }
}
