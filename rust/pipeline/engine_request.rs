//! The engine request (`PreprocessedRequest`) JSON exactly as the reference frontend
//! builds it from a validated request of either surface.

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::model::ModelCard;
use super::request::{CommonExt, NvExt, Stop, Tool};
use super::validate::token_id_list;

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

/// The request fields both surfaces map to the engine the same way.
pub(super) struct EngineFields<'a> {
    pub max_tokens: Option<u32>,
    pub stop: Option<&'a Stop>,
    pub other: &'a Map<String, Value>,
    pub ext: &'a CommonExt,
    pub nvext: Option<&'a NvExt>,
    pub n: Option<u8>,
    pub best_of: Option<u8>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<i64>,
    pub logprobs: Option<u32>,
    /// The surface's own constraint (`response_format`, a forced tool choice).
    pub guided_json: Option<Value>,
}

/// Where the engine and the decoder stop: what the client asked for, and EOS.
pub(super) struct Stops {
    /// `stop` strings; `None` under `ignore_eos`.
    pub strings: Option<Vec<String>>,
    /// Token ids in `stop`, else the root `stop_token_ids`; `None` under `ignore_eos`.
    pub ids: Option<Vec<u32>>,
    /// The model's EOS ids; empty under `ignore_eos`.
    pub eos: Vec<u32>,
}

impl Stops {
    pub fn new(fields: &EngineFields<'_>, card: &ModelCard) -> Self {
        if fields.ext.ignore_eos == Some(true) {
            return Self {
                strings: None,
                ids: None,
                eos: Vec::new(),
            };
        }
        let strings = match fields.stop {
            Some(Stop::String(s)) => Some(vec![s.clone()]),
            Some(Stop::StringArray(items)) => Some(items.clone()),
            _ => None,
        };
        // Token ids in `stop` win; the root `stop_token_ids` is the fallback.
        let ids = match fields.stop {
            Some(Stop::TokenIds(ids)) => Some(ids.clone()),
            _ => token_id_list(fields.other, "stop_token_ids"),
        };
        Self {
            strings,
            ids,
            eos: card.eos_token_ids.clone(),
        }
    }

    /// Ids whose text the decoder drops and that end a choice: EOS, then the client's.
    pub fn hidden_ids(&self) -> Vec<u32> {
        let mut hidden = self.eos.clone();
        for id in self.ids.iter().flatten() {
            if !hidden.contains(id) {
                hidden.push(*id);
            }
        }
        hidden
    }
}

fn guided_decoding(fields: &EngineFields<'_>) -> Option<GuidedDecoding> {
    let ext = fields.ext;
    let guided = GuidedDecoding {
        json: fields
            .guided_json
            .clone()
            .or_else(|| ext.guided_json.clone()),
        regex: ext.guided_regex.clone(),
        choice: ext.guided_choice.clone().filter(|v| !v.is_empty()),
        grammar: ext.guided_grammar.clone(),
        backend: ext.guided_decoding_backend.clone(),
        whitespace_pattern: ext.guided_whitespace_pattern.clone(),
    };
    // `backend` / `whitespace_pattern` only modify a constraint.
    let constrains = guided.json.is_some()
        || guided.regex.is_some()
        || guided.choice.is_some()
        || guided.grammar.is_some();
    constrains.then_some(guided)
}

fn sampling_options(fields: &EngineFields<'_>, guided: Option<GuidedDecoding>) -> SamplingOptions {
    let ext = fields.ext;
    let mut sampling = SamplingOptions {
        n: fields.n,
        best_of: fields.best_of,
        presence_penalty: widen(fields.presence_penalty),
        frequency_penalty: widen(fields.frequency_penalty),
        repetition_penalty: widen(ext.repetition_penalty),
        temperature: widen(fields.temperature),
        top_p: widen(fields.top_p),
        top_k: ext.top_k.map(|k| if k == 0 { -1 } else { k }),
        min_p: widen(ext.min_p),
        use_beam_search: None,
        length_penalty: None,
        seed: fields.seed,
        include_stop_str_in_output: ext.include_stop_str_in_output,
        guided_decoding: guided,
    };
    if fields.nvext.and_then(|n| n.greed_sampling) == Some(true) {
        // Greedy = every sampling knob left to the engine's greedy default.
        sampling.presence_penalty = None;
        sampling.frequency_penalty = None;
        sampling.repetition_penalty = None;
        sampling.temperature = None;
        sampling.top_p = None;
        sampling.top_k = None;
        sampling.min_p = None;
    }
    sampling
}

/// Worker pins and the cache salt, as the router reads them.
fn routing(fields: &EngineFields<'_>) -> Map<String, Value> {
    let mut routing = Map::new();
    if let Some(n) = fields.nvext {
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
    let cache_salt = fields
        .other
        .get("cache_salt")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| fields.nvext.and_then(|n| n.cache_salt.clone()));
    if let Some(salt) = cache_salt {
        routing.insert("cache_salt".into(), salt.into());
    }
    routing
}

/// The engine request's JSON bytes (compact, the reference's field order).
pub(super) fn engine_request(
    card: &ModelCard,
    fields: &EngineFields<'_>,
    token_ids: &[u32],
    stops: &Stops,
    skip_special_tokens: Option<bool>,
    annotations: &[String],
) -> Vec<u8> {
    let guided = guided_decoding(fields);
    // Guided output must wait until reasoning is over.
    let require_reasoning = guided.is_some() && card.reasoning_parser.is_some();
    let request = EngineRequest {
        model: &card.served_name,
        token_ids,
        stop_conditions: StopConditions {
            max_tokens: fields.max_tokens,
            stop: stops.strings.clone(),
            stop_token_ids: stops.ids.clone(),
            stop_token_ids_visible: None,
            stop_token_ids_hidden: (!stops.eos.is_empty()).then(|| stops.eos.clone()),
            min_tokens: fields.ext.min_tokens,
            ignore_eos: fields.ext.ignore_eos,
            max_thinking_tokens: fields.nvext.and_then(|n| n.max_thinking_tokens),
        },
        sampling_options: sampling_options(fields, guided),
        output_options: OutputOptions {
            logprobs: fields.logprobs,
            prompt_logprobs: fields.ext.prompt_logprobs,
            skip_special_tokens,
            formatted_prompt: None,
            return_tokens_as_token_ids: fields.ext.return_tokens_as_token_ids,
        },
        eos_token_ids: &stops.eos,
        mdc_sum: &card.mdc_sum,
        annotations,
        routing: routing(fields),
        router_config_override: None,
        require_reasoning,
    };
    serde_json::to_vec(&request).expect("an engine request always serialises")
}

/// A tool's parameters schema, with the reference's default when absent.
pub(super) fn tool_parameters(tool: &Tool) -> Value {
    tool.function
        .parameters
        .clone()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}))
}

/// The guided-decoding schema for `tool_choice: "required"`: an array of
/// `{name, parameters}` objects, one `anyOf` branch per tool.
pub(super) fn required_tools_schema(tools: &[Tool]) -> Value {
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
