//! The postprocessing hot path (detokenize + parse + frame) for a streamed
//! 1,000-token reply with reasoning and a tool call, per token, in Rust.
//!
//!     python tests/fixtures/build_model.py && cargo bench --bench pipeline

use std::path::PathBuf;
use std::time::Instant;

use _core::pipeline::model::ModelCard;
use _core::pipeline::preprocess::Preprocessor;
use _core::pipeline::response::ResponseState;

const PARAGRAPH: &str =
    "The forecast for Zürich shows light rain in the morning, clearing by noon; \
temperatures stay between 7 and 12 °C. 東京の天気は晴れ。 ";

fn reply(reasoning_paragraphs: usize) -> String {
    format!(
        "<think>{}</think>Here is the forecast. {}<tool_call>{{\"name\": \"get_weather\", \
\"arguments\": {{\"city\": \"Zürich\", \"days\": 3, \"fields\": [\"temp\", \"rain\"]}}}}</tool_call>",
        PARAGRAPH.repeat(reasoning_paragraphs),
        PARAGRAPH.repeat(4)
    )
}

fn main() {
    let dir = std::env::var_os("SHAKEDOWN_TEST_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("tests/fixtures/model-deepseek"));
    let card = ModelCard::from_dir(&dir, Some("dsref"), Some("deepseek_r1"), Some("hermes"))
        .unwrap_or_else(|e| panic!("{e}; run python tests/fixtures/build_model.py"));
    let pre = Preprocessor::new(card).unwrap();
    let tokenizer = pre.tokenizer();
    let mut paragraphs = 1;
    let ids = loop {
        let ids = tokenizer
            .encode(reply(paragraphs), false)
            .unwrap()
            .get_ids()
            .to_vec();
        if ids.len() >= 1000 {
            break ids;
        }
        paragraphs += 1;
    };
    let frames: Vec<Vec<u8>> = ids
        .iter()
        .map(|id| format!("{{\"token_ids\":[{id}]}}").into_bytes())
        .chain([b"{\"token_ids\":[1],\"finish_reason\":\"stop\"}".to_vec()])
        .collect();
    let body =
        br#"{"model":"dsref","messages":[{"role":"user","content":"Weather?"}],"stream":true,
"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}"#;
    let mut out = Vec::with_capacity(1 << 20);
    let mut per_token: Vec<f64> = (0..201)
        .map(|_| {
            let plan = pre.chat(body, "bench").unwrap().plan;
            let mut state = ResponseState::new(plan, tokenizer.clone());
            out.clear();
            let start = Instant::now();
            for frame in &frames {
                state.feed(frame, &mut out);
            }
            state.finish(&mut out);
            start.elapsed().as_nanos() as f64 / frames.len() as f64
        })
        .collect();
    assert!(out.ends_with(b"data: [DONE]\n\n"));
    assert!(std::str::from_utf8(&out)
        .unwrap()
        .contains("\"name\":\"get_weather\""));
    per_token.sort_by(f64::total_cmp);
    println!(
        "postprocess (detokenize + parse + frame), {} tokens streamed: median {:.0} ns/token, p90 {:.0} ns/token, {} bytes out",
        frames.len(),
        per_token[per_token.len() / 2],
        per_token[per_token.len() * 9 / 10],
        out.len()
    );
}
