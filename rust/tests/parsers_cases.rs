//! The golden parser cases in `tests/fixtures/parsers/`, as the Rust tests read them
//! (pytest reads the same files through `tests/parser_cases.py`).

// Each test crate that includes this module reads only some of the fields.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use _core::parsers::chat::ChatOptions;
use _core::parsers::dialect::Dialect;
use _core::parsers::template::Template;
use _core::parsers::Tools;
use serde_json::Value;

pub struct Case {
    /// `file.json: case name`.
    pub label: String,
    /// How generated call ids start in the case's dialect.
    pub id_prefix: &'static str,
    pub text: String,
    pub options: ChatOptions,
    pub expect: Value,
}

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

/// Every case; a key a case leaves out is taken from its file.
pub fn load() -> Vec<Case> {
    let mut out = Vec::new();
    for file in fixture_files() {
        let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for case in doc["cases"].as_array().expect("cases array") {
            let pick = |key: &str| case.get(key).or_else(|| doc.get(key)).cloned();
            let name = |key: &str| pick(key).and_then(|v| v.as_str().map(str::to_owned));
            let tools = match pick("tools") {
                Some(v) if !v.is_null() => Tools::from_value(&v).unwrap(),
                _ => Tools::default(),
            };
            let options = ChatOptions {
                reasoning: name("reasoning"),
                tool_call: name("tool_call"),
                tools: Arc::new(tools),
                stream_arguments: false,
                in_reasoning: pick("in_reasoning").and_then(|v| v.as_bool()),
                thinking: pick("thinking").and_then(|v| v.as_bool()),
                force_nonempty_content: pick("force_nonempty_content")
                    .and_then(|v| v.as_bool())
                    .unwrap_or(false),
                dialect: name("dialect")
                    .map(|d| d.parse().unwrap())
                    .unwrap_or_default(),
                reference_streaming: false,
                response_template: pick("response_template").map(|t| {
                    Arc::new(Template::from_value(&t).expect("a valid response_template"))
                }),
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
                    case.get("name").and_then(Value::as_str).unwrap_or_default()
                ),
                text: case["text"].as_str().expect("text").to_owned(),
                options,
                expect: case["expect"].clone(),
            });
        }
    }
    out
}

/// The malformed outputs of `malformed.json`, each expecting Dynamo 1.6.1's answer or,
/// where recorded, shakedown's own (see docs/parsers.md).
pub fn load_malformed() -> Vec<Case> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parsers");
    let doc: Value = serde_json::from_slice(&std::fs::read(root.join("malformed.json")).unwrap())
        .expect("malformed.json");
    let mut out = Vec::new();
    for case in doc["cases"].as_array().expect("cases array") {
        let family = case["tool_call"].as_str().expect("tool_call");
        let file: Value = serde_json::from_slice(
            &std::fs::read(root.join(format!("tools/{family}.json"))).unwrap(),
        )
        .unwrap();
        let options = ChatOptions {
            tool_call: Some(family.to_owned()),
            tools: Arc::new(Tools::from_value(&file["tools"]).unwrap()),
            ..ChatOptions::default()
        };
        let expect = match case.get("shakedown") {
            Some(ours) => ours.clone(),
            None => case["dynamo"].clone(),
        };
        out.push(Case {
            id_prefix: "call-",
            label: format!(
                "malformed.json: {family}/{}",
                case["kind"].as_str().unwrap_or("")
            ),
            text: case["text"].as_str().expect("text").to_owned(),
            options,
            expect,
        });
    }
    out
}
