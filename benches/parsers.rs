//! Parser throughput in Rust: the same outputs as `benches/corpus.py`, cut into
//! token-sized pieces by the DeepSeek tokenizer, at 2 KB, 32 KB and 256 KB.
//!
//!     python tests/fixtures/build_model.py && cargo bench --bench parsers

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use _core::parsers::chat::ChatOptions;
use _core::parsers::{ChatParser, Delta, Tools};

const PARAGRAPH: &str =
    "The forecast for Zürich shows light rain in the morning, clearing by noon; \
temperatures stay between 7 and 12 °C. 東京の天気は晴れ。 Winds are calm. ";
const ARGS: &str = r#"{"city": "Zürich", "days": 3, "units": "metric", "filters": {"hourly": true, "fields": ["temp", "rain", "wind"], "note": "a {brace} \"quote\""}}"#;
const TOOLS: &str = r#"[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"units":{"type":"string"},"filters":{"type":"object"}}}}}]"#;

const FORMATS: &[(&str, Option<&str>, &str)] = &[
    ("hermes", None, "hermes"),
    ("qwen3_coder", None, "qwen3_coder"),
    ("kimi_k2", None, "kimi_k2"),
    ("deepseek_v3_1", None, "deepseek_v3_1"),
    ("harmony", Some("gpt_oss"), "harmony"),
    ("deepseek_r1+hermes", Some("deepseek_r1"), "hermes"),
];

fn call_text(fmt: &str, index: usize) -> String {
    match fmt {
        "hermes" | "deepseek_r1+hermes" => {
            format!("<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {ARGS}}}\n</tool_call>")
        }
        "qwen3_coder" => "<tool_call>\n<function=get_weather>\n<parameter=city>\nZürich\n</parameter>\n\
<parameter=days>\n3\n</parameter>\n<parameter=units>\nmetric\n</parameter>\n<parameter=filters>\n\
{\"hourly\": true, \"fields\": [\"temp\", \"rain\", \"wind\"], \"note\": \"a {brace} \\\"quote\\\"\"}\n\
</parameter>\n</function>\n</tool_call>"
            .to_owned(),
        "kimi_k2" => format!(
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:{index}\
<|tool_call_argument_begin|>{ARGS}<|tool_call_end|><|tool_calls_section_end|>"
        ),
        "deepseek_v3_1" => format!(
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{ARGS}\
<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
        ),
        "harmony" => format!(
            "<|start|>assistant<|channel|>commentary to=functions.get_weather \
<|constrain|>json<|message|>{ARGS}<|call|>"
        ),
        other => panic!("no generator for {other}"),
    }
}

fn output_text(fmt: &str, size: usize) -> String {
    let mut text = String::new();
    if fmt == "deepseek_r1+hermes" {
        text.push_str(&format!("<think>{}</think>", PARAGRAPH.repeat(3)));
    }
    if fmt == "harmony" {
        text.push_str(&format!(
            "<|channel|>analysis<|message|>{}<|end|>",
            PARAGRAPH.repeat(3)
        ));
    }
    let mut index = 0;
    while text.len() < size {
        text.push_str(PARAGRAPH);
        text.push_str(&call_text(fmt, index));
        index += 1;
    }
    text
}

/// One piece per token, multi-byte characters held until complete, as a streaming detokenizer cuts.
fn token_pieces(tokenizer: &tokenizers::Tokenizer, text: &str) -> Vec<String> {
    let ids = tokenizer.encode(text, false).unwrap().get_ids().to_vec();
    let mut pieces = Vec::with_capacity(ids.len());
    let mut window = Vec::new();
    for id in ids {
        window.push(id);
        let decoded = tokenizer.decode(&window, false).unwrap();
        if decoded.ends_with('\u{fffd}') {
            continue;
        }
        pieces.push(decoded);
        window.clear();
    }
    assert_eq!(pieces.concat(), text, "pieces must reassemble the text");
    pieces
}

fn median_ns(rounds: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<u128> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_nanos()
        })
        .collect();
    times.sort_unstable();
    times[rounds / 2] as f64
}

fn main() {
    let dir = std::env::var_os("SHAKEDOWN_TEST_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("tests/fixtures/model-deepseek"));
    let tokenizer =
        tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run python tests/fixtures/build_model.py",
                dir.display()
            )
        });
    let tools = Arc::new(Tools::from_json(TOOLS.as_bytes()).unwrap());
    println!("format                 ns/piece  2KB    32KB   256KB   per-byte 256KB/2KB");
    for (fmt, reasoning, tool_call) in FORMATS {
        let options = ChatOptions {
            reasoning: reasoning.map(str::to_owned),
            tool_call: Some((*tool_call).to_owned()),
            tools: tools.clone(),
            stream_arguments: true,
            in_reasoning: None,
            reference_streaming: false,
        };
        let mut per_piece = Vec::new();
        let mut per_byte = Vec::new();
        for size in [2 << 10, 32 << 10, 256 << 10] {
            let text = output_text(fmt, size);
            let pieces = token_pieces(&tokenizer, &text);
            let rounds = if size > 100_000 { 9 } else { 51 };
            let ns = median_ns(rounds, || {
                let mut parser = ChatParser::new(&options).unwrap();
                let mut delta = Delta::default();
                for piece in &pieces {
                    delta.clear();
                    parser.feed(piece, &mut delta);
                }
                parser.finish(&mut delta);
                std::hint::black_box(&delta);
            });
            per_piece.push(ns / pieces.len() as f64);
            per_byte.push(ns / text.len() as f64);
        }
        println!(
            "{fmt:22} {:8.0} {:6.0} {:7.0}   {:5.2}x",
            per_piece[0],
            per_piece[1],
            per_piece[2],
            per_byte[2] / per_byte[0]
        );
    }
}
