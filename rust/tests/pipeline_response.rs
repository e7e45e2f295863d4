//! The response side against the Dynamo 1.6.1 captures, byte for byte (ids and
//! `created` normalised), and the behaviour the captures do not cover.
//!
//! Each captured request goes through the preprocessor for its plan; the frames the
//! reference engine sent for it are replayed (see `common::replay_frames`).

mod common;

use std::sync::OnceLock;

use _core::pipeline::model::ModelCard;
use _core::pipeline::plan::ResponsePlan;
use _core::pipeline::preprocess::Preprocessor;
use _core::pipeline::response::ResponseState;
use common::{
    encode, model_dir, normalize, preprocessor, read_request, read_response, tokenizer, with_eos,
    EOS,
};
use serde_json::{json, Value};

/// Feed every frame the reference engine sent, then close: the status and the
/// normalised bytes.
fn check(name: &str) {
    let request = read_request(name);
    let model = request.json()["model"].as_str().unwrap().to_owned();
    let prepared = request.prepare(preprocessor(&model)).unwrap();
    let frames = common::replay_frames(name, &prepared.engine_request);
    let mut state = ResponseState::new(prepared.plan, tokenizer());
    let mut out = Vec::new();
    for frame in &frames {
        state.feed(frame, &mut out);
        if state.is_finished() {
            break;
        }
    }
    state.finish(&mut out);
    let (status, expected) = read_response(name);
    assert_eq!(state.status(), status, "{name}");
    assert_eq!(
        normalize(std::str::from_utf8(&out).unwrap()),
        normalize(&expected),
        "{name}"
    );
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

/// The reference model with deepseek_r1 + hermes, and the same model with only a
/// tool-call parser (text stays content unless a request carries tools).
fn reasoning_model() -> &'static Preprocessor {
    preprocessor("m")
}

fn plain_model() -> &'static Preprocessor {
    static PRE: OnceLock<Preprocessor> = OnceLock::new();
    PRE.get_or_init(|| {
        let card = ModelCard::from_dir(model_dir(), Some("m"), None, Some("hermes")).unwrap();
        Preprocessor::new(card).unwrap()
    })
}

/// A chat request (one user message, then `extra`'s fields) through `model`.
fn chat(model: &Preprocessor, extra: Value) -> ResponsePlan {
    let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    model.chat(body.to_string().as_bytes(), "rid").unwrap().plan
}

fn completion(extra: Value) -> ResponsePlan {
    let mut body = json!({"model": "m", "prompt": "Hi"});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    plain_model()
        .completions(body.to_string().as_bytes(), "rid")
        .unwrap()
        .plan
}

/// Feed JSON frames and close; returns the SSE data payloads (or the unary body).
fn drive(plan: ResponsePlan, frames: &[Value]) -> (u16, Vec<String>) {
    let mut state = ResponseState::new(plan, tokenizer());
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
    let plan = chat(plain_model(), json!({"stream": true, "logprobs": true}));
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
    let plan = completion(json!({"logprobs": 1}));
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
    let plan = chat(plain_model(), json!({}));
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
    let (_, events) = drive(chat(plain_model(), json!({"stream": true})), &frames);
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
    let plan = completion(json!({"stream": true, "stream_options": {"include_usage": true}}));
    let mut state = ResponseState::new(plan, tokenizer());
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
    let (status, body) = drive(chat(plain_model(), json!({})), &frames);
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
    let (status, body) = drive(chat(plain_model(), json!({})), std::slice::from_ref(&error));
    assert_eq!(status, 400);
    // The body of chat-unary-no-max-tokens.http, verbatim.
    assert_eq!(
        body[0],
        r#"{"message":"`max_output_tokens` (or `max_tokens`) is required by the mocker worker","type":"Bad Request","code":400}"#
    );
    let (status, events) = drive(chat(plain_model(), json!({"stream": true})), &[error]);
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
    let plan = chat(plain_model(), json!({"logprobs": true}));
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
    let plan = chat(
        plain_model(),
        json!({"stream": true, "nvext": {"annotations": ["request_id", "output_replay_id:x:0"]}}),
    );
    let mut state = ResponseState::new(plan, tokenizer());
    let mut out = Vec::new();
    state.feed(
        json!({"token_ids": [token("Hi")]}).to_string().as_bytes(),
        &mut out,
    );
    state.finish(&mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("event: request_id\n: \"rid\"\n\ndata: {"),
        "{text}"
    );
    assert_eq!(text.matches("event: ").count(), 1);
}

#[test]
fn continuous_usage_rides_on_every_chunk() {
    let plan = chat(
        plain_model(),
        json!({"stream": true, "stream_options": {"continuous_usage_stats": true}}),
    );
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
    let plan = chat(
        plain_model(),
        json!({"tools": [{"type": "function", "function": {"name": "f"}}],
               "parallel_tool_calls": false}),
    );
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

/// A chat request to the deepseek_r1 + hermes model, with the weather tool or none.
fn chat_plan(stream: bool, tool_choice: Value, with_tools: bool) -> ResponsePlan {
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let extra = if with_tools {
        json!({"stream": stream, "tools": tools, "tool_choice": tool_choice})
    } else {
        json!({"stream": stream})
    };
    chat(reasoning_model(), extra)
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
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(
        last["choices"][0],
        json!({"index": 0, "delta": {}, "finish_reason": "tool_calls", "logprobs": null})
    );
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

// ------------------------------------------------------- several completions prompts

fn batch(extra: Value) -> (_core::pipeline::batch::CompletionBatch, Vec<Vec<u8>>) {
    let mut body = json!({"model": "m", "prompt": [[1, 2, 3], [4, 5]], "max_tokens": 8});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let parts = plain_model()
        .completions_parts(body.to_string().as_bytes(), "rid")
        .unwrap();
    _core::pipeline::batch::CompletionBatch::new("cmpl-rid".into(), parts, &tokenizer())
}

#[test]
fn several_prompts_are_one_engine_request_each() {
    let (_, requests) = batch(json!({"n": 2}));
    let ids: Vec<Value> = requests
        .iter()
        .map(|r| serde_json::from_slice::<Value>(r).unwrap()["token_ids"].clone())
        .collect();
    assert_eq!(ids, vec![json!([1, 2, 3]), json!([4, 5])]);
    // A single prompt in a list is no batch.
    let one = plain_model()
        .completions_parts(br#"{"model":"m","prompt":["Hi"]}"#, "rid")
        .unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].plan.response_id, "cmpl-rid");
    assert_eq!(one[0].plan.batch_part, None);
}

#[test]
fn several_prompts_unary_merge_choices_in_index_order_and_sum_usage() {
    let (mut state, _) = batch(json!({"n": 2}));
    let mut out = Vec::new();
    // Prompt 1 finishes first; the body still lists prompt 0's choice first.
    let stop = json!({"token_ids": [EOS], "finish_reason": "stop"}).to_string();
    state.feed(
        1,
        json!({"token_ids": [300]}).to_string().as_bytes(),
        &mut out,
    );
    state.feed(1, stop.as_bytes(), &mut out);
    state.finish_part(1, &mut out);
    state.feed(
        0,
        json!({"token_ids": [301, 302]}).to_string().as_bytes(),
        &mut out,
    );
    state.feed(0, stop.as_bytes(), &mut out);
    state.finish_part(0, &mut out);
    assert!(out.is_empty(), "a unary part sends nothing");
    state.finish(&mut out);
    let body: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(body["id"], "cmpl-rid");
    let indexes: Vec<&Value> = body["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["index"])
        .collect();
    assert_eq!(indexes, vec![&json!(0), &json!(2)]);
    assert_eq!(body["usage"]["prompt_tokens"], 5);
    assert_eq!(body["usage"]["completion_tokens"], 5);
    assert_eq!(state.status(), 200);
}

#[test]
fn several_prompts_stream_part_ids_one_usage_chunk_one_done() {
    let (mut state, _) = batch(json!({"stream": true, "stream_options": {"include_usage": true}}));
    let mut out = Vec::new();
    let stop = json!({"token_ids": [EOS], "finish_reason": "stop"}).to_string();
    for part in [1, 0] {
        state.feed(
            part,
            json!({"token_ids": [300]}).to_string().as_bytes(),
            &mut out,
        );
        state.feed(part, stop.as_bytes(), &mut out);
        state.finish_part(part, &mut out);
    }
    state.finish(&mut out);
    let text = String::from_utf8(out).unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.iter().filter(|e| **e == "data: [DONE]").count(), 1);
    assert_eq!(events.last(), Some(&"data: [DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
        .collect();
    let (usage, parts) = chunks.split_last().unwrap();
    assert_eq!(usage["id"], "cmpl-rid");
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["prompt_tokens"], 5);
    assert_eq!(usage["usage"]["completion_tokens"], 4);
    for chunk in parts {
        let index = chunk["choices"][0]["index"].as_u64().unwrap();
        assert_eq!(chunk["id"], format!("cmpl-rid-{index}"));
        assert!(chunk["usage"].is_null());
    }
}

#[test]
fn a_failed_frame_on_one_prompt_fails_the_batch() {
    let (mut state, _) = batch(json!({"stream": true}));
    let mut out = Vec::new();
    state.feed(
        0,
        json!({"token_ids": [300]}).to_string().as_bytes(),
        &mut out,
    );
    state.feed(1, b"not json", &mut out);
    assert!(state.is_closed() && state.part_finished(0));
    state.feed(
        0,
        json!({"token_ids": [301]}).to_string().as_bytes(),
        &mut out,
    );
    state.finish(&mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert_eq!(text.matches("[DONE]").count(), 1);
    assert!(text.contains("\"error\""), "{text}");
}

// --- template families: the checkpoint's response_template ------------------------

/// The reference model's files in a fresh directory, its tokenizer config carrying
/// `response_template` (left out when `None`).
fn model_dir_with(name: &str, response_template: Option<Value>) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "shakedown-response-template-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["tokenizer.json", "config.json", "generation_config.json"] {
        std::fs::copy(model_dir().join(file), dir.join(file)).unwrap();
    }
    let config = std::fs::read(model_dir().join("tokenizer_config.json")).unwrap();
    let mut config: Value = serde_json::from_slice(&config).unwrap();
    if let Some(template) = response_template {
        config["response_template"] = template;
    }
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    dir
}

/// Markers no fixed family reads, so only the checkpoint's template can split them.
fn reflect_template() -> Value {
    json!({"start_anchor": "<|im_start|>assistant\n", "fields": {
        "thinking": {"open": "<reflect>", "close": "</reflect>"},
        "tool_calls": {"open": "<call>", "close": "</call>", "content": "json",
            "transform": {"type": "function",
                "function": {"name": "{content.name}", "arguments": "{content.arguments}"}}}}})
}

fn template_model(name: &str, reasoning: &str, tool_call: &str) -> Preprocessor {
    let dir = model_dir_with(name, Some(reflect_template()));
    let card = ModelCard::from_dir(&dir, Some("m"), Some(reasoning), Some(tool_call));
    std::fs::remove_dir_all(&dir).unwrap();
    Preprocessor::new(card.unwrap()).unwrap()
}

#[test]
fn template_families_parse_with_the_checkpoints_response_template() {
    let text = r#"<reflect>plan</reflect>Sure.<call>{"name": "get_weather", "arguments": {"city": "Paris"}}</call>"#;
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    // `hf` is vLLM's name for the family; `beam` reads the checkpoint's template when
    // it has one (its built-in one otherwise).
    for (name, reasoning, tool_call) in [
        ("hf", "hf", "hf"),
        ("rt", "response_template", "response_template"),
        ("beam", "beam", "beam"),
    ] {
        let model = template_model(&format!("parse-{name}"), reasoning, tool_call);
        let plan = chat(&model, json!({"tools": tools}));
        let (status, body) = drive(plan, &token_frames(text));
        assert_eq!(status, 200, "{name}: {body:?}");
        let body: Value = serde_json::from_str(&body[0]).unwrap();
        let message = &body["choices"][0]["message"];
        assert_eq!(message["reasoning_content"], "plan", "{name}: {body}");
        assert_eq!(message["content"], "Sure.", "{name}: {body}");
        let call = &message["tool_calls"][0]["function"];
        assert_eq!(call["name"], "get_weather", "{name}: {body}");
        assert_eq!(call["arguments"], r#"{"city":"Paris"}"#, "{name}: {body}");
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");

        // Streamed: the same reply in chunks.
        let plan = chat(&model, json!({"tools": tools, "stream": true}));
        let (_, events) = drive(plan, &token_frames(text));
        let (mut reasoning, mut content, mut arguments) =
            (String::new(), String::new(), String::new());
        for event in &events[..events.len() - 1] {
            let delta = &serde_json::from_str::<Value>(event).unwrap()["choices"][0]["delta"];
            reasoning += delta["reasoning_content"].as_str().unwrap_or("");
            content += delta["content"].as_str().unwrap_or("");
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                arguments += call["function"]["arguments"].as_str().unwrap_or("");
            }
        }
        assert_eq!(
            (reasoning.as_str(), content.as_str(), arguments.as_str()),
            ("plan", "Sure.", r#"{"city":"Paris"}"#),
            "{name}: {events:?}"
        );
    }
}

#[test]
fn a_template_family_without_a_usable_template_is_refused_at_load() {
    let load = |name: &str, template: Option<Value>, reasoning, tool_call| {
        let dir = model_dir_with(&format!("load-{name}"), template);
        let card = ModelCard::from_dir(&dir, Some("m"), reasoning, tool_call);
        std::fs::remove_dir_all(&dir).unwrap();
        card.map(|c| c.response_template.is_some())
            .map_err(|e| e.to_string())
    };
    let err = load("missing", None, Some("hf"), None).unwrap_err();
    assert!(
        err.contains(
            "reasoning parser 'response_template' needs the checkpoint's response_template"
        ) && err.contains("tokenizer_config.json has none"),
        "{err}"
    );
    let err = load("bad", Some(json!({"fields": {}})), None, Some("hf")).unwrap_err();
    assert!(
        err.contains("(tool-call parser 'response_template'): invalid response_template: 'fields' must be a non-empty object"),
        "{err}"
    );
    // A reasoning parser needs the thinking field, a tool-call parser the tool_calls one.
    let no_thinking = json!({"start_anchor": "<|im_start|>assistant\n",
        "fields": {"tool_calls": reflect_template()["fields"]["tool_calls"].clone()}});
    let err = load("nothink", Some(no_thinking.clone()), Some("hf"), Some("hf")).unwrap_err();
    assert!(
        err.contains("the response_template has no 'thinking' field"),
        "{err}"
    );
    assert_eq!(
        load("toolsonly", Some(no_thinking), None, Some("hf")),
        Ok(true)
    );
    // Beam falls back to its built-in template; other families never read the key.
    assert_eq!(load("beam", None, Some("beam"), Some("beam")), Ok(false));
    let err = load("beambad", Some(json!([])), Some("beam"), None).unwrap_err();
    assert!(
        err.contains("invalid response_template: it must be an object"),
        "{err}"
    );
    assert_eq!(
        load(
            "other",
            Some(json!([])),
            Some("deepseek_r1"),
            Some("hermes")
        ),
        Ok(false)
    );
}
