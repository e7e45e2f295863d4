//! Golden parser cases from `tests/fixtures/parsers/`, shared with pytest.
//!
//! Each case is checked batch (`parse`) and streamed under several chunkings,
//! with whole calls and with streamed arguments; all must give the expected message.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use _core::parsers::chat::{parse, ChatOptions};
use _core::parsers::dialect::Dialect;
use _core::parsers::{ChatParser, Delta, Message, Tools};
use serde_json::Value;

fn fixture_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parsers");
    let mut files = Vec::new();
    for kind in ["reasoning", "tools", "chat"] {
        let Ok(entries) = std::fs::read_dir(root.join(kind)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

struct Case {
    label: String,
    /// How generated call ids start in the case's dialect.
    id_prefix: &'static str,
    text: String,
    options: ChatOptions,
    expect: Value,
}

fn opt_str(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for file in fixture_files() {
        let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for case in doc["cases"].as_array().expect("cases array") {
            let pick = |key: &str| case.get(key).or_else(|| doc.get(key)).cloned();
            let tools = match pick("tools") {
                Some(v) if !v.is_null() => Tools::from_value(&v).unwrap(),
                _ => Tools::default(),
            };
            let options = ChatOptions {
                reasoning: pick("reasoning")
                    .as_ref()
                    .and_then(|v| v.as_str().map(str::to_owned)),
                tool_call: pick("tool_call")
                    .as_ref()
                    .and_then(|v| v.as_str().map(str::to_owned)),
                tools: Arc::new(tools),
                stream_arguments: false,
                in_reasoning: pick("in_reasoning").and_then(|v| v.as_bool()),
                thinking: pick("thinking").and_then(|v| v.as_bool()),
                force_nonempty_content: pick("force_nonempty_content")
                    .and_then(|v| v.as_bool())
                    .unwrap_or(false),
                dialect: pick("dialect")
                    .and_then(|v| v.as_str().map(|d| d.parse().unwrap()))
                    .unwrap_or_default(),
                reference_streaming: false,
            };
            out.push(Case {
                id_prefix: match options.dialect {
                    Dialect::Dynamo => "call-",
                    Dialect::Vllm => "chatcmpl-tool-",
                    Dialect::Sglang => "call_",
                },
                label: format!(
                    "{}: {}",
                    file.file_name().unwrap().to_string_lossy(),
                    opt_str(case, "name").unwrap_or_default()
                ),
                text: case["text"].as_str().expect("text").to_owned(),
                options,
                expect: case["expect"].clone(),
            });
        }
    }
    out
}

fn check(
    label: &str,
    how: &str,
    message: &Message,
    errors: usize,
    expect: &Value,
    id_prefix: &str,
) {
    let want_content = expect.get("content").and_then(Value::as_str).unwrap_or("");
    let want_reasoning = expect
        .get("reasoning_content")
        .and_then(Value::as_str)
        .unwrap_or("");
    assert_eq!(message.content, want_content, "{label} [{how}] content");
    assert_eq!(
        message.reasoning, want_reasoning,
        "{label} [{how}] reasoning"
    );
    let want_calls = expect
        .get("tool_calls")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        message.tool_calls.len(),
        want_calls.len(),
        "{label} [{how}] call count: {:?}",
        message.tool_calls
    );
    for (i, (got, want)) in message.tool_calls.iter().zip(&want_calls).enumerate() {
        assert_eq!(got.index, i, "{label} [{how}] index");
        assert_eq!(
            Some(got.name.as_str()),
            want["name"].as_str(),
            "{label} [{how}] name {i}"
        );
        assert_eq!(
            Some(got.arguments.as_str()),
            want["arguments"].as_str(),
            "{label} [{how}] arguments {i}"
        );
        match want.get("id").and_then(Value::as_str) {
            Some(id) => assert_eq!(got.id, id, "{label} [{how}] id {i}"),
            None => assert!(
                got.id.starts_with(id_prefix),
                "{label} [{how}] id {i}: {}",
                got.id
            ),
        }
    }
    if let Some(n) = expect.get("errors").and_then(Value::as_u64) {
        assert_eq!(errors as u64, n, "{label} [{how}] error count");
    }
}

/// Chunkings every case must survive: single characters, small pieces, halves, whole.
fn chunkings(text: &str) -> Vec<(String, Vec<&str>)> {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let by = |step: usize| -> Vec<&str> {
        let mut pieces = Vec::new();
        let mut i = 0;
        while i + 1 < bounds.len() {
            let j = (i + step).min(bounds.len() - 1);
            pieces.push(&text[bounds[i]..bounds[j]]);
            i = j;
        }
        pieces
    };
    let mid = bounds[bounds.len() / 2];
    vec![
        ("chars".into(), by(1)),
        ("pairs".into(), by(2)),
        ("threes".into(), by(3)),
        ("sevens".into(), by(7)),
        ("halves".into(), vec![&text[..mid], &text[mid..]]),
        ("whole".into(), vec![text]),
    ]
}

fn stream(pieces: &[&str], options: &ChatOptions) -> (Message, usize) {
    let mut parser = ChatParser::new(options).unwrap();
    let mut message = Message::default();
    let mut delta = Delta::default();
    for piece in pieces {
        delta.clear();
        parser.feed(piece, &mut delta);
        message.push(&delta);
    }
    delta.clear();
    parser.finish(&mut delta);
    message.push(&delta);
    (message, parser.errors().len())
}

#[test]
fn golden_cases_batch_and_streamed() {
    let all = cases();
    assert!(!all.is_empty(), "no parser fixtures found");
    for case in &all {
        let (message, errors) = parse(&case.text, &case.options).unwrap();
        check(
            &case.label,
            "parse",
            &message,
            errors.len(),
            &case.expect,
            case.id_prefix,
        );
        let clean = errors.is_empty();
        for (how, pieces) in chunkings(&case.text) {
            let (message, errors) = stream(&pieces, &case.options);
            check(
                &case.label,
                &format!("whole calls, {how}"),
                &message,
                errors,
                &case.expect,
                case.id_prefix,
            );
            // Streamed arguments can't take back a call that later turns out malformed,
            // so only clean cases must agree in that mode.
            if clean {
                let mut streamed = case.options.clone();
                streamed.stream_arguments = true;
                let (message, errors) = stream(&pieces, &streamed);
                check(
                    &case.label,
                    &format!("streamed arguments, {how}"),
                    &message,
                    errors,
                    &case.expect,
                    case.id_prefix,
                );
            }
        }
    }
}
