//! Differences the live fuzzer found between this pipeline and Dynamo 1.6.1, one
//! fixture per class (tests/fixtures/pipeline/fuzz/, shared with pytest; written by
//! `python -m shakedown.parity.fuzz`).
//!
//! Each fixture holds the parser pair, the engine's token ids, and per mode the
//! request body and the reference's response bytes (ids and `created` masked). The
//! body goes through the whole pipeline; the ids are fed as the mocker emits them:
//! one token a frame, usage on the first, then an empty `length` frame.

mod common;

use std::path::PathBuf;

use _core::pipeline::model::ModelCard;
use _core::pipeline::preprocess::Preprocessor;
use _core::pipeline::response::ResponseState;
use common::{mocker_frames, model_dir, REQUEST_ID};
use serde_json::Value;

const MODEL: &str = "dsref";

fn fixtures() -> Vec<(PathBuf, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pipeline/fuzz");
    let mut out: Vec<(PathBuf, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir:?}: {e}"))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            (path, value)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Generated ids (`chatcmpl-…`, `cmpl-…`, `call-…`) and `created` masked as the
/// fixtures store them (`shakedown.parity.normalize.mask_generated`).
fn mask(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let next = ["\"chatcmpl-", "\"cmpl-", "\"call-", "\"created\":"]
            .iter()
            .filter_map(|m| rest.find(m).map(|at| (at, *m)))
            .min();
        let Some((at, marker)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..at + marker.len()]);
        rest = &rest[at + marker.len()..];
        if marker.ends_with(':') {
            out.push('0');
            rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(rest.len());
            // Idempotent: an already masked id (`<id>`) has no id characters.
            if end > 0 {
                out.push_str("<id>");
                rest = &rest[end..];
            }
        }
    }
}

fn run(pre: &Preprocessor, path: &str, body: &Value, ids: &[u32]) -> (u16, String) {
    let bytes = body.to_string().into_bytes();
    let prepared = match path {
        "/v1/chat/completions" => pre.chat(&bytes, REQUEST_ID),
        "/v1/completions" => pre.completions(&bytes, REQUEST_ID),
        other => panic!("unknown path {other}"),
    };
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(err) => return (err.status, mask(&String::from_utf8_lossy(&err.body))),
    };
    let engine: Value = serde_json::from_slice(&prepared.engine_request).unwrap();
    let prompt_tokens = engine["token_ids"].as_array().map_or(0, Vec::len);
    let mut state = ResponseState::new(prepared.plan, pre.tokenizer());
    let mut out = Vec::new();
    for frame in mocker_frames(ids, prompt_tokens, 0) {
        state.feed(&frame, &mut out);
        if state.is_finished() {
            break;
        }
    }
    state.finish(&mut out);
    (state.status(), mask(std::str::from_utf8(&out).unwrap()))
}

#[test]
fn fuzz_findings_match_the_reference() {
    let all = fixtures();
    assert!(
        !all.is_empty(),
        "no fixtures in tests/fixtures/pipeline/fuzz"
    );
    let mut failures = Vec::new();
    for (file, fixture) in &all {
        let name = |key: &str| fixture[key].as_str();
        let card = ModelCard::from_dir(
            model_dir(),
            Some(MODEL),
            name("reasoning_parser"),
            name("tool_call_parser"),
        )
        .unwrap();
        let pre = Preprocessor::new(card).unwrap();
        let ids: Vec<u32> = fixture["token_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        for mode in ["unary", "stream"] {
            let Some(case) = fixture.get(mode) else {
                continue;
            };
            let (status, got) = run(&pre, name("path").unwrap(), &case["body"], &ids);
            let expected = mask(case["expected"].as_str().unwrap());
            if status != case["status"].as_u64().unwrap() as u16 || got != expected {
                failures.push(format!(
                    "{} [{mode}]\n  expected {}\n  got      {status} {got}",
                    file.file_name().unwrap().to_string_lossy(),
                    case["expected"].as_str().unwrap(),
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
