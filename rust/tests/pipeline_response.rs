//! The response side against Dynamo 1.6.1 captures, byte for byte (ids and
//! `created` normalised), plus the decoder's edge cases.
//!
//! Each fixture in tests/fixtures/pipeline/response/ holds the plan, the engine
//! script and the captured body (see make_fixtures.py there). The script is
//! tokenized here exactly as the reference harness did, and replayed frame by
//! frame the way the mocker (one token a frame, usage on the first, a closing
//! empty `length` frame) or the spy worker emitted it.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use _core::parsers::Tools;
use _core::pipeline::detok::{DecodeOptions, Detokenizer};
use _core::pipeline::frames::{EngineOutput, FinishReason};
use _core::pipeline::plan::{ResponsePlan, Surface, ToolChoiceMode};
use _core::pipeline::response::ResponseState;
use serde_json::{json, Value};
use tokenizers::Tokenizer;

const EOS: u32 = 1;

fn model_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("SHAKEDOWN_TEST_MODEL_DIR") {
        return PathBuf::from(dir);
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/model-deepseek");
    assert!(
        dir.join("tokenizer.json").is_file(),
        "no DeepSeek model dir: run `python tests/fixtures/build_model.py` or set \
         SHAKEDOWN_TEST_MODEL_DIR (e.g. to a dir built by dynamo-ref-build-model.py)"
    );
    dir
}

fn tokenizer() -> Arc<Tokenizer> {
    static TOKENIZER: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    TOKENIZER
        .get_or_init(|| {
            let path = model_dir().join("tokenizer.json");
            Arc::new(Tokenizer::from_file(&path).unwrap_or_else(|e| panic!("{path:?}: {e}")))
        })
        .clone()
}

fn encode(text: &str) -> Vec<u32> {
    tokenizer().encode(text, false).unwrap().get_ids().to_vec()
}

fn load(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pipeline/response")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn plan_of(fixture: &Value) -> ResponsePlan {
    let p = &fixture["plan"];
    let chat = p["surface"] == "chat";
    let tools = match &p["tools"] {
        Value::Null => Tools::default(),
        tools => Tools::from_value(tools).unwrap(),
    };
    let name = |v: &Value| v.as_str().map(str::to_owned);
    ResponsePlan {
        surface: if chat {
            Surface::Chat
        } else {
            Surface::Completions
        },
        response_id: format!(
            "{}-00000000-0000-4000-8000-000000000000",
            if chat { "chatcmpl" } else { "cmpl" }
        ),
        created: 1_796_215_889,
        model: p["model"].as_str().unwrap().to_owned(),
        stream: p["stream"].as_bool().unwrap(),
        include_usage: p["include_usage"].as_bool().unwrap(),
        n: p["n"].as_u64().unwrap() as u32,
        prompt_tokens: p["prompt_tokens"].as_u64().unwrap() as u32,
        echo_prompt: None,
        logprobs: p["logprobs"].as_bool().unwrap(),
        top_logprobs: None,
        stop: match &p["stop"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a.iter().map(|s| s.as_str().unwrap().to_owned()).collect(),
            _ => Vec::new(),
        },
        hidden_stop_ids: vec![EOS],
        include_stop_str_in_output: false,
        min_tokens: p["min_tokens"].as_u64().map(|n| n as u32),
        max_tokens: p["max_tokens"].as_u64().map(|n| n as u32),
        skip_special_tokens: false,
        reasoning_parser: name(&p["reasoning_parser"]),
        tool_call_parser: name(&p["tool_call_parser"]),
        tools: Arc::new(tools),
        in_reasoning: None,
        thinking: None,
        force_nonempty_content: false,
        request_id: "00000000-0000-4000-8000-000000000000".into(),
        tool_choice: match &p["tool_choice"] {
            Value::String(s) if s == "none" => ToolChoiceMode::None,
            Value::String(s) if s == "required" => ToolChoiceMode::Required,
            Value::Object(named) => {
                ToolChoiceMode::Named(named["function"]["name"].as_str().unwrap().to_owned())
            }
            _ => ToolChoiceMode::Auto,
        },
        parallel_tool_calls: p["parallel_tool_calls"].as_bool().unwrap(),
        continuous_usage: false,
        user_stop_ids: Vec::new(),
        annotation_events: Vec::new(),
        extra_fields: Vec::new(),
    }
}

/// The frames the reference engine sent for this fixture, as JSON bytes.
fn frames_of(fixture: &Value) -> Vec<Vec<u8>> {
    let engine = &fixture["engine"];
    let mut ids = encode(engine["text"].as_str().unwrap());
    let mut frames = Vec::new();
    match engine["kind"].as_str().unwrap() {
        "mocker_replay" => {
            if engine["eos"].as_bool().unwrap() {
                ids.push(EOS);
            }
            let prompt = fixture["plan"]["prompt_tokens"].as_u64().unwrap();
            let usage = |completion: usize| {
                json!({"prompt_tokens": prompt, "completion_tokens": completion,
                       "total_tokens": prompt + completion as u64,
                       "prompt_tokens_details": {"audio_tokens": null,
                                                 "cached_tokens": engine["cached_tokens"]}})
            };
            for (i, id) in ids.iter().enumerate() {
                let mut frame = json!({"token_ids": [id], "tokens": null, "text": null,
                                       "finish_reason": null, "index": null});
                if i == 0 {
                    frame["completion_usage"] = usage(1);
                }
                frames.push(frame);
            }
            frames.push(json!({"token_ids": [], "finish_reason": "length",
                               "completion_usage": usage(ids.len())}));
        }
        "spy" => {
            let full = ids.len();
            if let Some(max) = engine["max_tokens"].as_u64() {
                ids.truncate(max as usize);
            }
            let fail_after = engine["fail_after"].as_u64().map(|n| n as usize);
            for (i, id) in ids.iter().enumerate() {
                if fail_after == Some(i) {
                    frames.push(json!({"event": "error",
                                       "comment": [format!("spy engine failure after {i} tokens")]}));
                    return frames.iter().map(|f| f.to_string().into_bytes()).collect();
                }
                frames.push(json!({"token_ids": [id]}));
            }
            frames.push(if ids.len() < full {
                json!({"token_ids": [], "finish_reason": "length"})
            } else {
                json!({"token_ids": [EOS], "finish_reason": "stop"})
            });
        }
        other => panic!("unknown engine kind {other}"),
    }
    frames.iter().map(|f| f.to_string().into_bytes()).collect()
}

/// Replace `cmpl-`/`chatcmpl-`/`call-` uuids and `created` values with placeholders.
fn normalize(text: &str) -> String {
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

/// Feed every frame, then close; returns the status and the normalised bytes.
fn run(fixture: &Value) -> (u16, String) {
    let mut state = ResponseState::new(plan_of(fixture), tokenizer()).unwrap();
    let mut out = Vec::new();
    let frames = frames_of(fixture);
    for frame in &frames {
        state.feed(frame, &mut out);
        if state.is_finished() {
            break;
        }
    }
    state.finish(&mut out);
    (
        state.status(),
        normalize(std::str::from_utf8(&out).unwrap()),
    )
}

fn check(name: &str) {
    let fixture = load(name);
    let (status, got) = run(&fixture);
    let expected = normalize(fixture["expected"].as_str().unwrap());
    assert_eq!(status, fixture["status"].as_u64().unwrap() as u16, "{name}");
    assert_eq!(got, expected, "{name}");
}

macro_rules! captures {
    ($($test:ident => $name:literal,)*) => {
        $(#[test]
        fn $test() {
            check($name);
        })*
    };
}

// Completions: no parsers involved.
captures! {
    completions_unary => "completions-unary",
    completions_stream => "completions-stream",
    completions_stream_usage => "completions-stream-usage",
    completions_token_prompt => "completions-token-prompt",
    completions_echo => "completions-echo",
    spy_completions_unary => "spy-completions-unary",
    spy_err_engine_fails_before_first_token_stream => "spy-err-engine-fails-before-first-token-stream",
    spy_err_engine_fails_unary => "spy-err-engine-fails-unary",
}

// Chat: these need the deepseek_r1 reasoning parser (and hermes where tools are on).
captures! {
    chat_stream_text => "chat-stream-text",
    chat_stream_text_usage => "chat-stream-text-usage",
    chat_stream_tool => "chat-stream-tool",
    chat_stream_tool_usage => "chat-stream-tool-usage",
    chat_stream_twotools => "chat-stream-twotools",
    chat_stream_content_after_toolcall => "chat-stream-content-after-toolcall",
    chat_stream_malformed_toolcall_json => "chat-stream-malformed-toolcall-json",
    chat_stream_toolcall_without_think => "chat-stream-toolcall-without-think",
    chat_stream_unicode => "chat-stream-unicode",
    chat_stream_logprobs => "chat-stream-logprobs",
    chat_stream_n2 => "chat-stream-n2",
    chat_stream_noeos_length => "chat-stream-noeos-length",
    chat_unary_text => "chat-unary-text",
    chat_unary_tool => "chat-unary-tool",
    chat_unary_twotools => "chat-unary-twotools",
    chat_unary_tool_choice_named => "chat-unary-tool-choice-named",
    chat_unary_tool_choice_none => "chat-unary-tool-choice-none",
    chat_unary_tool_choice_required => "chat-unary-tool-choice-required",
    chat_unary_tool_text_without_tools => "chat-unary-tool-text-without-tools",
    chat_unary_tool_truncated => "chat-unary-tool-truncated",
    chat_unary_truncated_max_tokens => "chat-unary-truncated-max-tokens",
    chat_unary_stop_seq => "chat-unary-stop-seq",
    chat_unary_unicode => "chat-unary-unicode",
    chat_unary_logprobs => "chat-unary-logprobs",
    chat_unary_plain_no_think => "chat-unary-plain-no-think",
    chat_unary_conv_turn0 => "chat-unary-conv-turn0",
    chat_unary_conv_turn1 => "chat-unary-conv-turn1",
    chat_unary_multiturn_toolresult => "chat-unary-multiturn-toolresult",
    chat_unary_malformed_toolcall_json => "chat-unary-malformed-toolcall-json",
    chat_unary_unknown_tool_name => "chat-unary-unknown-tool-name",
    chat_unary_content_after_toolcall => "chat-unary-content-after-toolcall",
    chat_unary_noeos_length => "chat-unary-noeos-length",
    spy_chat_stream_tool => "spy-chat-stream-tool",
    spy_chat_unary_sampling => "spy-chat-unary-sampling",
    spy_chat_unary_json_format => "spy-chat-unary-json-format",
    spy_chat_unary_tool_choice_required => "spy-chat-unary-tool-choice-required",
    spy_err_engine_fails_mid_stream => "spy-err-engine-fails-mid-stream",
}

// --- the decoder on its own -------------------------------------------------

fn decode_all(ids: &[u32], options: DecodeOptions) -> (Vec<String>, bool) {
    decode_with(Detokenizer::new(tokenizer(), options), ids)
}

fn decode_with(mut detok: Detokenizer, ids: &[u32]) -> (Vec<String>, bool) {
    let mut pieces = Vec::new();
    for &id in ids {
        let frame = EngineOutput {
            token_ids: vec![id],
            ..Default::default()
        };
        let mut piece = String::new();
        let step = detok.step(&frame, &mut piece).unwrap();
        pieces.push(piece);
        if step.stopped {
            return (pieces, true);
        }
    }
    (pieces, false)
}

fn with_eos(text: &str) -> Vec<u32> {
    let mut ids = encode(text);
    ids.push(EOS);
    ids
}

fn eos_options() -> DecodeOptions {
    DecodeOptions {
        hidden_stop_ids: vec![EOS],
        ..Default::default()
    }
}

#[test]
fn split_characters_come_out_whole() {
    let ids = encode("Grüße, 世界! 👋");
    let (pieces, stopped) = decode_all(&ids, DecodeOptions::default());
    assert!(!stopped);
    assert_eq!(pieces.concat(), "Grüße, 世界! 👋");
    assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')));
    // The emoji spans several tokens: the first ones release nothing.
    assert!(pieces.iter().any(String::is_empty), "{pieces:?}");
}

#[test]
fn hidden_eos_stops_without_text() {
    let (pieces, stopped) = decode_all(&with_eos("Hi there"), eos_options());
    assert!(stopped);
    assert_eq!(pieces.last().unwrap(), "");
    assert_eq!(pieces.concat(), "Hi there");
}

#[test]
fn special_tokens_kept_unless_skipped() {
    // BOS is special in this tokenizer; `<think>` is an ordinary added token.
    let ids = [&[0][..], &encode("<think>a</think>b")].concat();
    let (kept, _) = decode_all(&ids, DecodeOptions::default());
    assert_eq!(kept.concat(), "<｜begin▁of▁sentence｜><think>a</think>b");
    let skip = DecodeOptions {
        skip_special_tokens: true,
        ..Default::default()
    };
    let (skipped, _) = decode_all(&ids, skip);
    assert_eq!(skipped.concat(), "<think>a</think>b");
}

#[test]
fn stop_string_cuts_the_current_piece_only() {
    let options = DecodeOptions {
        stop: vec!["How".into()],
        ..eos_options()
    };
    let (pieces, stopped) = decode_all(&with_eos("Hello there! How can I help?"), options);
    assert!(stopped);
    assert_eq!(pieces.concat(), "Hello there! ");
    assert_eq!(pieces.last().unwrap(), " ");
}

#[test]
fn stop_string_spanning_tokens_is_held_back_then_cut() {
    // "lo th" starts inside "Hello" and ends in " there": "lo" is held until the
    // match completes, then dropped (Dynamo 1.6.1, as the parity suite shows).
    let options = DecodeOptions {
        stop: vec!["lo th".into()],
        ..eos_options()
    };
    let (pieces, stopped) = decode_all(&with_eos("Hello there!"), options);
    assert!(stopped);
    assert_eq!(pieces.concat(), "Hel");
}

#[test]
fn held_stop_string_start_is_released_when_it_cannot_match() {
    let options = DecodeOptions {
        stop: vec!["lo th".into()],
        ..eos_options()
    };
    // "lo" is held after "Hello", released whole once "!" rules the match out.
    let (pieces, stopped) = decode_all(&with_eos("Hello!"), options.clone());
    assert!(stopped, "ends on the EOS");
    assert_eq!(pieces.concat(), "Hello!");
    // Held text at the EOS is released, not dropped.
    let (pieces, _) = decode_all(&with_eos("Hello"), options.clone());
    assert_eq!(pieces.concat(), "Hello");
    // A stop string kept in the output is never held.
    let kept = DecodeOptions {
        include_stop_str_in_output: true,
        ..options
    };
    let (pieces, _) = decode_all(&with_eos("Hello there!"), kept);
    assert_eq!(pieces.concat(), "Hello th");
}

#[test]
fn stop_strings_are_tried_in_list_order() {
    // Both match in " there"; the first listed wins even though it starts later.
    let options = DecodeOptions {
        stop: vec!["ere".into(), "the".into()],
        ..eos_options()
    };
    let (pieces, _) = decode_all(&with_eos("Hello there!"), options);
    assert_eq!(pieces.concat(), "Hello th");
}

#[test]
fn include_stop_str_keeps_the_match() {
    let options = DecodeOptions {
        stop: vec!["How".into()],
        include_stop_str_in_output: true,
        ..eos_options()
    };
    let (pieces, _) = decode_all(&with_eos("Hello there! How can I help?"), options);
    assert_eq!(pieces.concat(), "Hello there! How");
}

#[test]
fn min_tokens_holds_stops_back() {
    let ids = with_eos("Hello there!");
    let early_eos = [&[EOS][..], &ids].concat();
    let options = DecodeOptions {
        min_tokens: 2,
        ..eos_options()
    };
    let (pieces, stopped) = decode_all(&early_eos, options);
    assert!(stopped);
    // Inside min_tokens an EOS is not a stop: Dynamo decodes it like any token.
    assert_eq!(pieces.concat(), "<｜end▁of▁sentence｜>Hello there!");
    assert_eq!(pieces.len(), early_eos.len());
}

#[test]
fn engine_text_passes_through() {
    let mut detok = Detokenizer::new(tokenizer(), eos_options());
    let frame = EngineOutput {
        token_ids: vec![5, 6],
        text: Some("given".into()),
        ..Default::default()
    };
    let mut piece = String::new();
    let step = detok.step(&frame, &mut piece).unwrap();
    assert_eq!(piece, "given");
    assert_eq!(step.tokens, 2);
}

#[test]
fn byte_table_matches_the_tokenizers_decode() {
    // Pseudo-random ids over the whole vocabulary (byte tokens, split
    // characters, added and special tokens) and over the mocker's 1000..2000.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |range: u32| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % u64::from(range)) as u32
    };
    let vocab = tokenizer().get_vocab_size(true) as u32;
    let mut runs: Vec<Vec<u32>> = vec![
        encode("<think>ü</think>Grüße, 世界! 👋 <tool_call>{\"a\": 1}</tool_call>"),
        (0..400).map(|_| 1000 + next(1000)).collect(),
        (0..400).map(|_| next(vocab)).collect(),
    ];
    runs.push((0..400).map(|_| next(300)).collect());
    for ids in &runs {
        for skip_special_tokens in [false, true] {
            let options = DecodeOptions {
                skip_special_tokens,
                ..Default::default()
            };
            let fast = decode_with(Detokenizer::new(tokenizer(), options.clone()), ids);
            let slow = decode_with(Detokenizer::without_table(tokenizer(), options), ids);
            assert_eq!(
                fast, slow,
                "skip_special_tokens={skip_special_tokens} ids={ids:?}"
            );
        }
    }
}

#[test]
fn normalize_replaces_ids_and_created() {
    assert_eq!(
        normalize(
            r#"{"id":"chatcmpl-25e6ee91-f8c6-4af0-ac2a-69b64244ce80","created":1796215889,"x":"call-85d3ce17-2d6f-4151-a731-f174b2560484"}"#
        ),
        r#"{"id":"chatcmpl-<uuid>","created":<created>,"x":"call-<uuid>"}"#
    );
}

// --- behaviour the captures do not cover --------------------------------------

fn plan(surface: Surface, stream: bool) -> ResponsePlan {
    let fixture = json!({"plan": {
        "surface": if surface == Surface::Chat { "chat" } else { "completions" },
        "model": "m", "stream": stream, "include_usage": false, "n": 1, "prompt_tokens": 3,
        "logprobs": false, "stop": [], "min_tokens": null, "max_tokens": null,
        "reasoning_parser": null, "tool_call_parser": null, "tools": null,
        "tool_choice": "auto", "parallel_tool_calls": true}});
    plan_of(&fixture)
}

/// Feed JSON frames and close; returns the SSE data payloads (or the unary body).
fn drive(plan: ResponsePlan, frames: &[Value]) -> (u16, Vec<String>) {
    let mut state = ResponseState::new(plan, tokenizer()).unwrap();
    let mut out = Vec::new();
    for frame in frames {
        state.feed(frame.to_string().as_bytes(), &mut out);
    }
    state.finish(&mut out);
    let text = String::from_utf8(out).unwrap();
    let events = match text.strip_prefix("data: ") {
        Some(_) => text
            .split_terminator("\n\n")
            .map(|e| e.strip_prefix("data: ").unwrap().to_owned())
            .collect(),
        None => vec![text],
    };
    (state.status(), events)
}

fn token(text: &str) -> u32 {
    let ids = encode(text);
    assert_eq!(ids.len(), 1, "{text:?} is not one token");
    ids[0]
}

#[test]
fn chat_logprobs_from_the_engine() {
    let mut plan = plan(Surface::Chat, true);
    plan.logprobs = true;
    let (hi, there) = (token("Hi"), token(" there"));
    let frames = [
        json!({"token_ids": [hi], "log_probs": [-0.5],
               "top_logprobs": [[{"rank": 1, "token_id": there, "token": " there", "logprob": -0.25}]]}),
        json!({"token_ids": [EOS], "finish_reason": "stop"}),
    ];
    let (_, events) = drive(plan, &frames);
    let first: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(
        first["choices"][0]["logprobs"],
        json!({"content": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105],
                            "top_logprobs": [
                                {"token": " there", "logprob": -0.25, "bytes": [32, 116, 104, 101, 114, 101]},
                                {"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}]}],
               "refusal": null})
    );
    // The EOS frame carries no log probs of its own.
    let last: Value = serde_json::from_str(&events[1]).unwrap();
    assert_eq!(last["choices"][0]["logprobs"], Value::Null);
    assert_eq!(events[2], "[DONE]");
}

#[test]
fn completions_logprobs_from_the_engine() {
    let mut plan = plan(Surface::Completions, false);
    plan.logprobs = true;
    let (hi, there) = (token("Hi"), token(" there"));
    let frames = [
        json!({"token_ids": [hi, there], "log_probs": [-0.5, -20000.0],
               "top_logprobs": [[{"token_id": hi, "token": "Hi", "logprob": -0.5}],
                                [{"token_id": there, "token": " there", "logprob": -20000.0}]]}),
        json!({"token_ids": [], "finish_reason": "length"}),
    ];
    let (status, body) = drive(plan, &frames);
    assert_eq!(status, 200);
    let body: Value = serde_json::from_str(&body[0]).unwrap();
    assert_eq!(
        body["choices"][0],
        json!({"text": "Hi there", "index": 0,
               "logprobs": {"tokens": ["Hi", " there"], "token_logprobs": [-0.5, -9999.0],
                            "top_logprobs": [{"Hi": -0.5}, {" there": -9999.0}],
                            "text_offset": [0, 2]},
               "finish_reason": "length"})
    );
}

#[test]
fn choices_follow_the_engine_index() {
    let plan = plan(Surface::Chat, false);
    let (a, b) = (token("A"), token("B"));
    let frames = [
        json!({"token_ids": [a], "index": 0}),
        json!({"token_ids": [b], "index": 1}),
        json!({"token_ids": [EOS], "index": 1, "finish_reason": "stop"}),
        json!({"token_ids": [], "index": 0, "finish_reason": "length"}),
    ];
    let (_, body) = drive(plan, &frames);
    let body: Value = serde_json::from_str(&body[0]).unwrap();
    let choices = body["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    assert_eq!(choices[0]["message"]["content"], "A");
    assert_eq!(choices[0]["finish_reason"], "length");
    assert_eq!(choices[1]["index"], 1);
    assert_eq!(choices[1]["message"]["content"], "B");
    assert_eq!(choices[1]["finish_reason"], "stop");
    assert_eq!(body["usage"]["completion_tokens"], 3);
}

#[test]
fn text_and_finish_in_one_frame_share_a_chunk() {
    let (hi, there) = (token("Hi"), token(" there"));
    let frames = [
        json!({"token_ids": [hi]}),
        json!({"token_ids": [there], "finish_reason": "length"}),
        json!({"token_ids": [hi]}),
    ];
    let (_, events) = drive(plan(Surface::Chat, true), &frames);
    assert_eq!(events.len(), 3, "{events:?}");
    let first: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"content": "Hi", "role": "assistant"})
    );
    let last: Value = serde_json::from_str(&events[1]).unwrap();
    assert_eq!(last["choices"][0]["delta"], json!({"content": " there"}));
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(events[2], "[DONE]");
}

#[test]
fn malformed_frame_is_an_engine_error() {
    let mut plan = plan(Surface::Completions, true);
    plan.include_usage = true;
    let mut state = ResponseState::new(plan, tokenizer()).unwrap();
    let mut out = Vec::new();
    state.feed(
        json!({"token_ids": [token("Hi")]}).to_string().as_bytes(),
        &mut out,
    );
    state.feed(b"{\"token_ids\":", &mut out);
    assert!(state.is_finished());
    state.feed(
        json!({"token_ids": [token("Hi")]}).to_string().as_bytes(),
        &mut out,
    );
    state.finish(&mut out);
    let text = String::from_utf8(out).unwrap();
    let events: Vec<&str> = text.split_terminator("\n\n").collect();
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(
        events[1],
        r#"data: {"error":{"message":"Internal server error","type":"internal_server_error","code":500}}"#
    );
    assert_eq!(events[2], "data: [DONE]");
}

#[test]
fn engine_error_before_any_token_fails_unary_with_500() {
    let frames = [json!({"token_ids": [], "finish_reason": {"error": "out of memory"}})];
    let (status, body) = drive(plan(Surface::Chat, false), &frames);
    assert_eq!(status, 500);
    assert_eq!(
        body[0],
        r#"{"message":"Internal server error","type":"Internal Server Error","code":500}"#
    );
}

#[test]
fn engine_client_errors_keep_their_status() {
    // How chat-unary-no-max-tokens came back: the mocker refused the request.
    let message = "`max_output_tokens` (or `max_tokens`) is required by the mocker worker";
    let error = json!({"event": "error",
                       "comment": [json!({"message": message, "code": 400}).to_string()]});
    let (status, body) = drive(plan(Surface::Chat, false), std::slice::from_ref(&error));
    assert_eq!(status, 400);
    // The body of chat-unary-no-max-tokens.http, verbatim.
    assert_eq!(
        body[0],
        r#"{"message":"`max_output_tokens` (or `max_tokens`) is required by the mocker worker","type":"Bad Request","code":400}"#
    );
    let (status, events) = drive(plan(Surface::Chat, true), &[error]);
    assert_eq!(status, 200);
    assert_eq!(
        events,
        [
            json!({"error": {"message": message, "type": "invalid_request_error", "code": 400}})
                .to_string(),
            "[DONE]".to_owned()
        ]
    );
}

#[test]
fn logprob_tokens_are_the_decoders_pieces() {
    // A character split across tokens: the first token released nothing, so
    // its log-prob entry is the empty string (bytes null), as in Dynamo.
    let ids = encode("👋");
    assert!(ids.len() > 1, "{ids:?}");
    let mut plan = plan(Surface::Chat, false);
    plan.logprobs = true;
    let frames = [
        json!({"token_ids": ids, "log_probs": vec![-1.0; ids.len()]}),
        json!({"token_ids": [EOS], "finish_reason": "stop"}),
    ];
    let (_, body) = drive(plan, &frames);
    let body: Value = serde_json::from_str(&body[0]).unwrap();
    let content = body["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(content.len(), ids.len());
    assert_eq!(content[0]["token"], "");
    assert_eq!(content[0]["bytes"], Value::Null);
    let last = &content[ids.len() - 1];
    assert_eq!(last["token"], "👋");
    assert_eq!(last["bytes"], json!([240, 159, 145, 139]));
    assert_eq!(body["choices"][0]["message"]["content"], "👋");
}

#[test]
fn annotation_events_lead_the_stream() {
    let mut plan = plan(Surface::Chat, true);
    plan.annotation_events = vec![("request_id".into(), "\"abc\"".into())];
    let mut state = ResponseState::new(plan, tokenizer()).unwrap();
    let mut out = Vec::new();
    state.feed(
        json!({"token_ids": [token("Hi")]}).to_string().as_bytes(),
        &mut out,
    );
    state.finish(&mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("event: request_id\n: \"abc\"\n\ndata: {"),
        "{text}"
    );
    assert_eq!(text.matches("event: ").count(), 1);
}

#[test]
fn continuous_usage_rides_on_every_chunk() {
    let mut plan = plan(Surface::Chat, true);
    plan.continuous_usage = true;
    let frames = [
        json!({"token_ids": [token("Hi")]}),
        json!({"token_ids": [token(" there")]}),
        json!({"token_ids": [EOS], "finish_reason": "stop"}),
    ];
    let (_, events) = drive(plan, &frames);
    let completion: Vec<Value> = events[..3]
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).unwrap()["usage"]["completion_tokens"].clone())
        .collect();
    assert_eq!(completion, [json!(1), json!(2), json!(3)]);
}

#[test]
fn parallel_tool_calls_false_keeps_the_first_call() {
    let mut plan = plan(Surface::Chat, false);
    plan.tool_call_parser = Some("hermes".into());
    plan.tools = Arc::new(
        Tools::from_value(&json!([{"type": "function", "function": {"name": "f"}}])).unwrap(),
    );
    plan.parallel_tool_calls = false;
    let text = r#"<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>"#;
    let frames: Vec<Value> = encode(text)
        .into_iter()
        .map(|id| json!({"token_ids": [id]}))
        .chain([json!({"token_ids": [EOS], "finish_reason": "stop"})])
        .collect();
    let (_, body) = drive(plan, &frames);
    let body: Value = serde_json::from_str(&body[0]).unwrap();
    let calls = body["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["function"]["arguments"], "{}");
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
}

#[test]
fn held_stop_string_start_is_released_when_the_engine_ends() {
    let options = DecodeOptions {
        stop: vec!["lo th".into()],
        ..eos_options()
    };
    let mut detok = Detokenizer::new(tokenizer(), options);
    let ids = encode("Hello");
    let mut text = String::new();
    for (i, &id) in ids.iter().enumerate() {
        let frame = EngineOutput {
            token_ids: vec![id],
            finish_reason: (i + 1 == ids.len()).then_some(FinishReason::Length),
            ..Default::default()
        };
        let step = detok.step(&frame, &mut text).unwrap();
        assert!(!step.stopped);
    }
    assert_eq!(text, "Hello");
}

fn chat_plan(stream: bool, tool_choice: Value, with_tools: bool) -> ResponsePlan {
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let fixture = json!({"plan": {
        "surface": "chat", "model": "m", "stream": stream, "include_usage": false, "n": 1,
        "prompt_tokens": 3, "logprobs": false, "stop": [], "min_tokens": null,
        "max_tokens": null, "reasoning_parser": "deepseek_r1",
        "tool_call_parser": if with_tools { json!("hermes") } else { Value::Null },
        "tools": if with_tools { tools } else { Value::Null },
        "tool_choice": tool_choice, "parallel_tool_calls": true}});
    plan_of(&fixture)
}

fn token_frames(text: &str) -> Vec<Value> {
    with_eos(text)
        .into_iter()
        .map(|id| json!({"token_ids": [id]}))
        .collect()
}

#[test]
fn forced_tool_choice_streams_the_calls_with_the_finish() {
    let text = r#"<think>plan</think><tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>"#;
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    for choice in [json!("required"), named] {
        let (_, events) = drive(chat_plan(true, choice, true), &token_frames(text));
        let last = &events[events.len() - 2];
        assert!(last.contains(r#""tool_calls":[{"index":0"#), "{events:?}");
        assert!(
            last.contains(r#""finish_reason":"tool_calls""#),
            "{events:?}"
        );
        assert_eq!(
            events.iter().filter(|e| e.contains("tool_calls")).count(),
            1
        );
        assert_eq!(events.last().unwrap(), "[DONE]");
    }
    // `auto` still sends each call as soon as it is parsed, then a closing chunk.
    let (_, events) = drive(chat_plan(true, json!("auto"), true), &token_frames(text));
    assert!(events[events.len() - 2].ends_with(
        r#""delta":{},"finish_reason":"tool_calls","logprobs":null}],"created":1796215889,"model":"m","object":"chat.completion.chunk"}"#
    ));
}

#[test]
fn a_lone_lt_after_text_is_not_held_without_a_tool_parser() {
    // ".<" is one token: Dynamo sends it whole, not "." then "<tool".
    let text = "<think>plan</think>Sure.<tool_call>{}";
    let (_, events) = drive(chat_plan(true, json!("auto"), false), &token_frames(text));
    let contents: Vec<Value> = events
        .iter()
        .filter(|e| e.starts_with('{'))
        .map(|e| {
            serde_json::from_str::<Value>(e).unwrap()["choices"][0]["delta"]["content"].clone()
        })
        .filter(|c| !c.is_null())
        .collect();
    assert_eq!(contents[..3], [json!("Sure"), json!(".<"), json!("tool")]);
}
