//! A prompt against the model's context length: the byte-length bound never
//! overstates a prompt's tokens, and a prompt it proves too long is refused with
//! the reference's context-overflow error before it is tokenized.

mod common;

use _core::pipeline::model::ModelCard;
use _core::pipeline::preprocess::Preprocessor;
use _core::pipeline::tokens::{max_bytes_per_token, min_tokens};
use common::{model_dir, tokenizer};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Pieces that make long tokens, split characters, added tokens and digit runs.
const PIECES: &[&str] = &[
    " ",
    "    ",
    "\n",
    "\n\n",
    "\t",
    "a",
    "hello",
    " world",
    "1234567",
    "ü",
    "世界",
    "👋",
    "<think>",
    "</think>",
    "<｜User｜>",
    "<｜end▁of▁sentence｜>",
    "----",
    "====",
    "\u{0}",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_bound_never_exceeds_the_token_count(
        parts in prop::collection::vec((prop::sample::select(PIECES), 1usize..300), 1..40)
    ) {
        let text: String = parts.iter().map(|(piece, n)| piece.repeat(*n)).collect();
        let tokenizer = tokenizer();
        let tokens = tokenizer.encode_fast(text.as_str(), false).unwrap().get_ids().len();
        let bound = min_tokens(text.len(), max_bytes_per_token(&tokenizer));
        prop_assert!(bound <= tokens, "{bound} > {tokens}");
    }
}

fn model(context_length: u32) -> Preprocessor {
    let card = ModelCard::from_dir(model_dir(), Some("m"), None, None)
        .unwrap()
        .with_context_length(context_length);
    Preprocessor::new(card).unwrap()
}

fn overflow_message(err_body: &[u8]) -> String {
    let body: Value = serde_json::from_slice(err_body).unwrap();
    assert_eq!(body["type"], "Bad Request");
    assert_eq!(body["code"], 400);
    body["message"].as_str().unwrap().to_owned()
}

/// The number in "your messages resulted in N tokens".
fn reported_tokens(message: &str) -> usize {
    let (_, rest) = message.split_once("resulted in ").unwrap();
    rest.split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_prompt_proven_too_long_is_refused_with_the_proven_size() {
    let pre = model(1000);
    let bound = max_bytes_per_token(&tokenizer()).expect("byte-level BPE");
    // Spaces make the longest tokens, so only the bound can tell this is too long.
    let text = " ".repeat(bound * 1000);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": text}]});
    let err = pre.chat(body.to_string().as_bytes(), "x").unwrap_err();
    assert_eq!(err.status, 400);
    let message = overflow_message(&err.body);
    assert!(message.starts_with(
        "This model's maximum context length is 1000 tokens. However, your messages resulted in "
    ));
    assert!(message.ends_with(" tokens. Please reduce the length of the messages."));
    let prompt = pre
        .render_chat(&serde_json::from_value(body).unwrap())
        .unwrap();
    assert_eq!(
        reported_tokens(&message),
        min_tokens(prompt.len(), Some(bound))
    );

    let completion = json!({"model": "m", "prompt": " ".repeat(bound * 1000)});
    let err = pre
        .completions(completion.to_string().as_bytes(), "x")
        .unwrap_err();
    assert_eq!(reported_tokens(&overflow_message(&err.body)), 1000);
}

#[test]
fn a_prompt_the_bound_cannot_settle_is_counted_exactly() {
    let pre = model(1000);
    // One token a word: far fewer bytes a token than the bound assumes.
    let text = "a ".repeat(1200);
    let exact = tokenizer().encode_fast(text.as_str(), false).unwrap().len();
    assert!(exact >= 1000 && min_tokens(text.len(), max_bytes_per_token(&tokenizer())) < 1000);
    let body = json!({"model": "m", "prompt": text});
    let err = pre
        .completions(body.to_string().as_bytes(), "x")
        .unwrap_err();
    assert_eq!(reported_tokens(&overflow_message(&err.body)), exact);
}
