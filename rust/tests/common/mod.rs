//! What the pipeline tests share: the DeepSeek model dir, the Dynamo 1.6.1 captures
//! in tests/fixtures/pipeline/captures, the frames the reference engines sent for
//! them (the mocker's script is replay_script.json beside them), and the masking of
//! per-request values.
//!
//! Needs the model dir: `python tests/fixtures/build_model.py` (or set
//! SHAKEDOWN_TEST_MODEL_DIR).

// Each test crate that includes this module uses only part of it.
#![allow(dead_code)]

use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use _core::pipeline::error::HttpError;
use _core::pipeline::model::ModelCard;
use _core::pipeline::preprocess::{Prepared, Preprocessor};
use serde_json::{json, Value};
use tokenizers::Tokenizer;

/// The model's EOS token id.
pub const EOS: u32 = 1;

/// The request id the tests give every request (a UUID, so `normalize` masks it).
pub const REQUEST_ID: &str = "5ca58340-679f-4bc2-8c34-0350dd5b2254";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn captures() -> PathBuf {
    fixtures().join("pipeline/captures")
}

pub fn model_dir() -> PathBuf {
    let dir = std::env::var_os("SHAKEDOWN_TEST_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| fixtures().join("model-deepseek"));
    assert!(
        dir.join("tokenizer.json").is_file(),
        "model dir {} is missing: run python tests/fixtures/build_model.py",
        dir.display()
    );
    dir
}

/// The reference harness's model: served as `served`, deepseek_r1 + hermes; loaded
/// once per name for the whole test binary.
pub fn preprocessor(served: &str) -> &'static Preprocessor {
    static LOADED: Mutex<Vec<&'static Preprocessor>> = Mutex::new(Vec::new());
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pre) = loaded.iter().find(|p| p.card().served_name == served) {
        return pre;
    }
    let card = ModelCard::from_dir(
        model_dir(),
        Some(served),
        Some("deepseek_r1"),
        Some("hermes"),
    )
    .expect("model card");
    let pre: &'static Preprocessor = Box::leak(Box::new(
        Preprocessor::new(card).expect("template compiles"),
    ));
    loaded.push(pre);
    pre
}

pub fn tokenizer() -> Arc<Tokenizer> {
    static TOKENIZER: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    TOKENIZER
        .get_or_init(|| {
            let path = model_dir().join("tokenizer.json");
            Arc::new(Tokenizer::from_file(&path).unwrap_or_else(|e| panic!("{path:?}: {e}")))
        })
        .clone()
}

pub fn encode(text: &str) -> Vec<u32> {
    tokenizer().encode(text, false).unwrap().get_ids().to_vec()
}

/// `text`'s tokens, then EOS.
pub fn with_eos(text: &str) -> Vec<u32> {
    let mut ids = encode(text);
    ids.push(EOS);
    ids
}

/// A `.request` capture: method, path, content-type, body.
pub struct CapturedRequest {
    pub method: String,
    pub path: String,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

impl CapturedRequest {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The request through the preprocessor of its surface.
    pub fn prepare(&self, pre: &Preprocessor) -> Result<Prepared, HttpError> {
        if self.path == "/v1/chat/completions" {
            pre.chat(&self.body, REQUEST_ID)
        } else {
            pre.completions(&self.body, REQUEST_ID)
        }
    }
}

pub fn read_request(name: &str) -> CapturedRequest {
    let text = fs::read_to_string(captures().join(format!("{name}.request"))).unwrap();
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let (method, path) = lines.next().unwrap().split_once(' ').unwrap();
    let content_type = lines.find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-type")
            .then(|| v.trim().to_owned())
    });
    CapturedRequest {
        method: method.to_owned(),
        path: path.to_owned(),
        content_type,
        body: body.trim_end_matches('\n').as_bytes().to_vec(),
    }
}

/// A `.http` capture: status and body.
pub fn read_response(name: &str) -> (u16, String) {
    let text = fs::read_to_string(captures().join(format!("{name}.http"))).unwrap();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .or_else(|| text.split_once("\n\n"));
    (status, body.map(|(_, b)| b).unwrap_or("").to_owned())
}

/// Capture names (without extension) with a `.request` file, sorted.
pub fn request_names() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(captures())
        .unwrap()
        .filter_map(|entry| {
            let file = entry.unwrap().file_name().into_string().unwrap();
            file.strip_suffix(".request").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

/// The reference mocker's replay script: session -> turns, a trailing `<EOS>` for EOS.
fn replay_script() -> &'static Value {
    static SCRIPT: OnceLock<Value> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        let path = fixtures().join("pipeline/replay_script.json");
        serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
    })
}

/// What the reference harness's spy worker replied to every `spy-*` request.
const SPY_REPLY: &str = r#"<think>plan</think>Sure.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>"#;

fn annotations(request: &Value) -> Vec<String> {
    request["nvext"]["annotations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}

/// The engine frames the reference sent for a capture, as JSON bytes: the mocker's
/// replay (one token a frame, usage on the first, a closing empty `length` frame)
/// or the spy worker's reply (cut at `max_tokens`, failing at `fail_after:N`).
/// `engine_request` is what the pipeline sent the engine for it.
pub fn replay_frames(name: &str, engine_request: &[u8]) -> Vec<Vec<u8>> {
    let engine: Value = serde_json::from_slice(engine_request).unwrap();
    let request = read_request(name).json();
    let frames = if name.starts_with("spy-") {
        let fail_after = annotations(&request)
            .iter()
            .find_map(|a| a.strip_prefix("fail_after:")?.parse().ok());
        spy_frames(
            SPY_REPLY,
            engine["stop_conditions"]["max_tokens"].as_u64(),
            fail_after,
        )
    } else {
        let replay = annotations(&request)
            .into_iter()
            .find_map(|a| a.strip_prefix("output_replay_id:").map(str::to_owned))
            .unwrap_or_else(|| panic!("{name} names no replay row"));
        let (session, turn) = replay.split_once(':').unwrap();
        let text = replay_script()[session][turn.parse::<usize>().unwrap()]
            .as_str()
            .unwrap();
        let (_, expected) = read_response(name);
        let (text, eos) = match text.strip_suffix("<EOS>") {
            Some(text) => (text, true),
            None => (text, false),
        };
        let mut ids = encode(text);
        if eos {
            ids.push(EOS);
        }
        return mocker_frames(
            &ids,
            engine["token_ids"].as_array().unwrap().len(),
            cached_tokens(&expected),
        );
    };
    frames.iter().map(|f| f.to_string().into_bytes()).collect()
}

/// The reference mocker's prefix-cache hits, as its reply reported them.
fn cached_tokens(body: &str) -> u64 {
    body.rfind("\"cached_tokens\":").map_or(0, |at| {
        body[at + 16..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .fold(0, |n, d| n * 10 + u64::from(d - b'0'))
    })
}

/// The reference mocker's frames for `ids`, as JSON bytes: one token a frame, usage
/// on the first, a closing empty `length` frame.
pub fn mocker_frames(ids: &[u32], prompt: usize, cached: u64) -> Vec<Vec<u8>> {
    let usage = |completion: usize| {
        json!({"prompt_tokens": prompt, "completion_tokens": completion,
               "total_tokens": prompt + completion,
               "prompt_tokens_details": {"audio_tokens": null, "cached_tokens": cached}})
    };
    let mut frames: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let mut frame = json!({"token_ids": [id], "tokens": null, "text": null,
                                   "finish_reason": null, "index": null});
            if i == 0 {
                frame["completion_usage"] = usage(1);
            }
            frame
        })
        .collect();
    frames.push(json!({"token_ids": [], "finish_reason": "length",
                       "completion_usage": usage(ids.len())}));
    frames.iter().map(|f| f.to_string().into_bytes()).collect()
}

fn spy_frames(reply: &str, max_tokens: Option<u64>, fail_after: Option<usize>) -> Vec<Value> {
    let mut ids = encode(reply);
    let full = ids.len();
    if let Some(max) = max_tokens {
        ids.truncate(max as usize);
    }
    let mut frames = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        if fail_after == Some(i) {
            frames.push(json!({"event": "error",
                               "comment": [format!("spy engine failure after {i} tokens")]}));
            return frames;
        }
        frames.push(json!({"token_ids": [id]}));
    }
    frames.push(if ids.len() < full {
        json!({"token_ids": [], "finish_reason": "length"})
    } else {
        json!({"token_ids": [EOS], "finish_reason": "stop"})
    });
    frames
}

/// Replace `cmpl-`/`chatcmpl-`/`call-` uuids and `created` values with placeholders.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let next = ["cmpl-", "call-", "\"created\":"]
            .iter()
            .filter_map(|m| rest.find(m).map(|at| (at, *m)))
            .min();
        let Some((at, marker)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..at + marker.len()]);
        rest = &rest[at + marker.len()..];
        if marker.starts_with('"') {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            out.push_str("<created>");
            rest = &rest[digits..];
        } else {
            let is_uuid = rest.len() >= 36
                && rest.as_bytes()[..36]
                    .iter()
                    .all(|b| b.is_ascii_hexdigit() || *b == b'-');
            if is_uuid {
                out.push_str("<uuid>");
                rest = &rest[36..];
            }
        }
    }
}
