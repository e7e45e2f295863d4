//! The request side of the pipeline against the Dynamo 1.6.1 captures: engine
//! requests byte for byte, every error capture's status and body, prompt token
//! counts of every chat/completions capture, and template rendering.
//!
mod common;

use std::fs;
use std::path::Path;

use _core::pipeline::error::{is_json_content_type, HttpError};
use _core::pipeline::model::ModelCard;
use _core::pipeline::plan::{Surface, ToolChoiceMode};
use _core::pipeline::preprocess::{Prepared, Preprocessor};
use _core::pipeline::validate::parse_chat;
use common::{
    captures, model_dir, preprocessor, read_request, read_response, request_names, CapturedRequest,
};
use serde_json::Value;

/// What the serving router does before the preprocessor, with the same errors.
fn route(pre: &Preprocessor, req: &CapturedRequest) -> Result<Prepared, HttpError> {
    if req.path != "/v1/chat/completions" && req.path != "/v1/completions" {
        return Err(HttpError::route_not_found(&req.method, &req.path));
    }
    if req.method != "POST" {
        return Err(HttpError::method_not_allowed());
    }
    if !is_json_content_type(req.content_type.as_deref()) {
        return Err(HttpError::unsupported_media_type());
    }
    req.prepare(pre)
}

fn without_mdc_sum(json: &[u8]) -> String {
    let mut value: Value = serde_json::from_slice(json).unwrap();
    let removed = value.as_object_mut().unwrap().shift_remove("mdc_sum");
    assert!(removed.is_some_and(|v| v.as_str().is_some_and(|s| s.len() == 64)));
    serde_json::to_string(&value).unwrap()
}

const SPY_ORDER: [&str; 8] = [
    "spy-chat-stream-tool",
    "spy-chat-unary-sampling",
    "spy-completions-unary",
    "spy-chat-unary-json-format",
    "spy-chat-unary-tool-choice-required",
    "spy-err-engine-fails-before-first-token-stream",
    "spy-err-engine-fails-mid-stream",
    "spy-err-engine-fails-unary",
];

#[test]
fn spy_engine_requests_match_reference() {
    let pre = preprocessor("spy");
    let log = fs::read_to_string(captures().join("spy-preprocessed-requests.jsonl")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), SPY_ORDER.len());
    for (name, expected) in SPY_ORDER.iter().zip(lines) {
        let prepared = route(pre, &read_request(name))
            .unwrap_or_else(|e| panic!("{name}: unexpected error {e}"));
        assert_eq!(
            without_mdc_sum(&prepared.engine_request),
            without_mdc_sum(expected.as_bytes()),
            "{name}"
        );
    }
}

#[test]
fn engine_request_text_is_compact_and_ordered() {
    let pre = preprocessor("spy");
    let prepared = route(pre, &read_request("spy-chat-unary-sampling")).unwrap();
    let text = String::from_utf8(prepared.engine_request).unwrap();
    assert!(text.starts_with(
        r#"{"model":"spy","token_ids":[0,7153,9708,16,128803,19923,128804],"stop_conditions":{"max_tokens":10,"stop":["xyz"],"#
    ));
    assert!(
        text.contains(r#""temperature":0.699999988079071,"top_p":0.8999999761581421,"top_k":40,"#)
    );
    assert!(
        text.ends_with(r#""annotations":["foo:bar"],"routing":{},"router_config_override":null}"#)
    );
}

#[test]
fn every_error_capture_is_reproduced() {
    let pre = preprocessor("dsref");
    let mut checked = 0;
    for name in request_names().iter().filter(|n| n.starts_with("err-")) {
        let (status, body) = read_response(name);
        match route(pre, &read_request(name)) {
            Err(err) => {
                assert_eq!(err.status, status, "{name}: status");
                // The capture's body ends with a newline the reference did not send.
                assert_eq!(err.body_str(), body.trim_end(), "{name}: body");
            }
            Ok(prepared) => {
                assert_eq!(
                    status, 200,
                    "{name}: accepted but the reference said {status}"
                );
                assert_eq!(prepared.plan.n, 2, "{name}");
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 21, "error captures found");
}

#[test]
fn prompt_tokens_match_every_capture() {
    let pre = preprocessor("dsref");
    let mut checked = 0;
    for name in request_names() {
        let name = name.as_str();
        if !(name.starts_with("chat-") || name.starts_with("completions-")) {
            continue;
        }
        let (_, body) = read_response(name);
        let Some(pos) = body.rfind("\"prompt_tokens\":") else {
            continue;
        };
        let digits: String = body[pos + 16..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let expected: u32 = digits.parse().unwrap();
        let prepared = route(pre, &read_request(name)).unwrap();
        assert_eq!(prepared.plan.prompt_tokens, expected, "{name}");
        checked += 1;
    }
    assert_eq!(checked, 28, "captures with usage found");
}

/// Every successful capture's request is accepted; the rest of their checks
/// (bytes out) belong to the response side.
#[test]
fn every_successful_capture_is_accepted() {
    let pre = preprocessor("dsref");
    let mut checked = 0;
    for name in request_names() {
        let name = name.as_str();
        // This one's request file carries a note about the mocker's flags after the body.
        if !(name.starts_with("chat-") || name.starts_with("completions-"))
            || name == "chat-stream-mocker-reasoning-flag"
        {
            continue;
        }
        let prepared =
            route(pre, &read_request(name)).unwrap_or_else(|e| panic!("{name}: rejected with {e}"));
        let v: Value = serde_json::from_slice(&prepared.engine_request).unwrap();
        assert_eq!(v["model"], "dsref", "{name}");
        checked += 1;
    }
    assert_eq!(checked, 41, "request captures found");
}

#[test]
fn omitted_max_tokens_is_null_for_chat() {
    let pre = preprocessor("dsref");
    let prepared = route(pre, &read_request("chat-unary-no-max-tokens")).unwrap();
    let v: Value = serde_json::from_slice(&prepared.engine_request).unwrap();
    assert_eq!(v["stop_conditions"]["max_tokens"], Value::Null);
    assert_eq!(
        v["annotations"],
        serde_json::json!(["output_replay_id:text:0"])
    );
}

fn render(pre: &Preprocessor, body: &str) -> String {
    pre.render_chat(&parse_chat(body.as_bytes()).unwrap())
        .unwrap()
}

const TOOLS: &str = r#"[{"type":"function","function":{"name":"get_weather","description":"Get weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]"#;

#[test]
fn template_renders_tools_like_python() {
    let pre = preprocessor("dsref");
    let body = format!(
        r#"{{"model":"dsref","messages":[{{"role":"user","content":"Hi"}}],"tools":{TOOLS}}}"#
    );
    assert_eq!(
        render(pre, &body),
        "<｜begin▁of▁sentence｜><｜begin▁sys｜>You can call tools.\n<tools>\n\
         {\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get weather\", \
         \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n\
         </tools>\nReply with <tool_call>{\"name\": NAME, \"arguments\": ARGS}</tool_call> to call one.<｜end▁sys｜>\
         <｜User｜>Hi<｜Assistant｜>"
    );
}

#[test]
fn template_omits_tools_for_tool_choice_none() {
    let pre = preprocessor("dsref");
    let body = format!(
        r#"{{"model":"dsref","messages":[{{"role":"user","content":"Hi"}}],"tools":{TOOLS},"tool_choice":"none"}}"#
    );
    assert_eq!(
        render(pre, &body),
        "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>"
    );
    let prepared = pre.chat(body.as_bytes(), "x").unwrap();
    assert_eq!(prepared.plan.tool_choice, ToolChoiceMode::None);
    let parsers = prepared.plan.parsers.unwrap();
    assert_eq!(parsers.reasoning.unwrap().name(), "deepseek_r1");
    assert!(parsers.tool_call.is_none());
    assert!(parsers.tools.is_empty());
}

#[test]
fn template_multi_turn_with_tool_results() {
    let pre = preprocessor("dsref");
    let body = r#"{"model":"dsref","messages":[
        {"role":"system","content":"Be brief."},
        {"role":"user","content":[{"type":"text","text":"Weather"},{"type":"text","text":"in Paris?"}]},
        {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
        {"role":"tool","tool_call_id":"call_1","content":"sunny"},
        {"role":"assistant","content":"It is sunny."},
        {"role":"user","content":"Thanks"}],"add_generation_prompt":false}"#;
    assert_eq!(
        render(pre, body),
        "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Weather\nin Paris?\
         <｜Assistant｜><tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}</tool_call><｜end▁of▁sentence｜>\
         <｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>\
         <｜Assistant｜>It is sunny.<｜end▁of▁sentence｜><｜User｜>Thanks"
    );
}

#[test]
fn chat_template_args_override_context() {
    let pre = preprocessor("dsref");
    let body = r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"chat_template_args":{"bos_token":"[B]","add_generation_prompt":false}}"#;
    assert_eq!(render(pre, body), "[B]<｜User｜>Hi");
}

#[test]
fn plan_carries_what_the_response_side_needs() {
    let pre = preprocessor("dsref");
    let body = format!(
        r#"{{"model":"dsref","messages":[{{"role":"user","content":"Hi"}}],"tools":{TOOLS},"stream":true,
            "stream_options":{{"include_usage":true}},"stop":["How"],"logprobs":true,"top_logprobs":2,
            "max_tokens":7,"nvext":{{"annotations":["request_id","output_replay_id:x:0"]}}}}"#
    );
    let plan = pre.chat(body.as_bytes(), "rid").unwrap().plan;
    assert_eq!(plan.surface, Surface::Chat);
    assert_eq!(plan.response_id, "chatcmpl-rid");
    assert!(plan.stream && plan.include_usage && plan.logprobs);
    assert_eq!(plan.decode.stop, vec!["How".to_owned()]);
    assert_eq!(plan.decode.hidden_stop_ids, vec![1]);
    let parsers = plan.parsers.unwrap();
    assert_eq!(parsers.reasoning.unwrap().name(), "deepseek_r1");
    assert_eq!(parsers.tool_call.unwrap().name(), "hermes");
    assert!(parsers.tools.get("get_weather").is_some());
    assert_eq!(
        plan.annotation_events,
        vec![("request_id".to_owned(), "\"rid\"".to_owned())]
    );

    let completion = pre
        .completions(
            br#"{"model":"dsref","prompt":"Say hello","echo":true}"#,
            "c",
        )
        .unwrap();
    assert_eq!(completion.plan.response_id, "cmpl-c");
    assert!(completion.plan.parsers.is_none());
    // Omitted max_tokens on completions is filled with the room left in the context.
    let v: Value = serde_json::from_slice(&completion.engine_request).unwrap();
    assert_eq!(v["stop_conditions"]["max_tokens"], 32768 - 2);
}

#[test]
fn ignore_eos_clears_eos_ids() {
    let pre = preprocessor("dsref");
    let body = br#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"ignore_eos":true,"top_k":0}"#;
    let prepared = pre.chat(body, "x").unwrap();
    let v: Value = serde_json::from_slice(&prepared.engine_request).unwrap();
    assert_eq!(v["eos_token_ids"], serde_json::json!([]));
    assert_eq!(v["stop_conditions"]["ignore_eos"], Value::Bool(true));
    assert_eq!(v["sampling_options"]["top_k"], serde_json::json!(-1));
    assert!(prepared.plan.decode.hidden_stop_ids.is_empty());
}

#[test]
fn validation_messages() {
    let pre = preprocessor("dsref");
    let cases: [(&str, u16, &str); 11] = [
        (
            r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"n":2,"temperature":0}"#,
            400,
            "Validation: When n > 1, temperature must be greater than 0 to ensure diverse outputs. Got n=2, temperature=0",
        ),
        (
            r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"name":"a b"}}]}"#,
            400,
            "Validation: Function at index 0 has an invalid name: \"a b\". Only a-z, A-Z, 0-9, underscores, and dashes are allowed.",
        ),
        (
            r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"stop":["a",""]}"#,
            400,
            "Validation: Stop sequence at index 1 cannot be empty",
        ),
        (
            r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}"#,
            400,
            "Validation: `messages[1].tool_calls[0].function.arguments` must be a valid JSON object string",
        ),
        (
            r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"thinking":{"type":"maybe"}}"#,
            400,
            "Validation: `thinking.type` must be `enabled`, `disabled`, or `adaptive`",
        ),
        (
            r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"functions":[]}"#,
            501,
            "Validation: `functions` is deprecated. Please migrate to use `tools` instead.",
        ),
        (
            r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"a":1,"b":2}"#,
            400,
            "Validation: Unsupported parameter(s): `a`, `b`",
        ),
        (
            r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"stream_options":{"include_usage":true}}"#,
            400,
            "Validation: The 'stream_options' field is only allowed when 'stream' is set to true.",
        ),
        (
            r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"tools":[]}"#,
            400,
            "Validation: tools array cannot be empty; omit the field entirely to disable tool use",
        ),
        (
            r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":2000000}"#,
            400,
            "Validation: Max completion tokens must not exceed 1048576, got 2000000",
        ),
        (
            r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"cache_salt":""}"#,
            400,
            "Validation: Parameter 'cache_salt' must be a non-empty string if provided.",
        ),
    ];
    for (body, status, message) in cases {
        let err = pre.chat(body.as_bytes(), "x").unwrap_err();
        assert_eq!(err.status, status, "{body}");
        let v: Value = serde_json::from_slice(&err.body).unwrap();
        assert_eq!(v["message"], message, "{body}");
    }
}

#[test]
fn models_body_matches_capture_shape() {
    let card = ModelCard::from_dir(model_dir(), Some("dsref"), None, None)
        .unwrap()
        .with_context_length(0);
    let (_, body) = read_response("models");
    assert_eq!(
        String::from_utf8(card.models_body(1796215888)).unwrap(),
        body.trim_end()
    );
}

#[test]
fn model_card_reads_the_directory() {
    let card = ModelCard::from_dir(model_dir(), None, Some("deepseek-r1"), Some("qwen25")).unwrap();
    assert_eq!(card.served_name, dir_name(&model_dir()));
    assert_eq!(card.context_length, 32768);
    assert_eq!(card.eos_token_ids, vec![1]);
    assert_eq!(card.reasoning_parser.map(|f| f.name()), Some("deepseek_r1"));
    assert_eq!(card.tool_call_parser.map(|f| f.name()), Some("hermes"));
    assert_eq!(card.bos_token.as_deref(), Some("<｜begin▁of▁sentence｜>"));
    assert!(ModelCard::from_dir(model_dir(), None, Some("nope"), None).is_err());
}

fn dir_name(path: &Path) -> String {
    path.canonicalize()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn lenient_retry_accepts_raw_control_characters_and_bad_utf8() {
    let pre = preprocessor("dsref");
    let mut body =
        b"{\"model\":\"dsref\",\"messages\":[{\"role\":\"user\",\"content\":\"a\nb\xff\"}]}"
            .to_vec();
    let prepared = pre.chat(&body, "x").unwrap();
    let expected = pre.chat(
        "{\"model\":\"dsref\",\"messages\":[{\"role\":\"user\",\"content\":\"a\\nb\u{fffd}\"}]}"
            .as_bytes(),
        "x",
    );
    assert_eq!(prepared.engine_request, expected.unwrap().engine_request);

    // Still broken after the repair: the first error is reported.
    body.truncate(body.len() - 2);
    let err = pre.chat(&body, "x").unwrap_err();
    assert_eq!(err.status, 400);
    assert!(err
        .body_str()
        .contains("Failed to deserialize the JSON body into the target type: control character"));
}

#[test]
fn type_errors_point_at_the_end_of_the_body() {
    let pre = preprocessor("dsref");
    let body = br#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"temperature":"hot","max_tokens":4}"#;
    let err = pre.chat(body, "x").unwrap_err();
    let v: Value = serde_json::from_slice(&err.body).unwrap();
    assert_eq!(
        v["message"],
        format!(
            "Failed to deserialize the JSON body into the target type: invalid type: string \"hot\", expected f32 at line 1 column {}",
            body.len()
        )
    );
}

#[test]
fn tool_parameters_get_type_and_properties_in_the_prompt() {
    let pre = preprocessor("dsref");
    let body = r#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],
        "tools":[{"type":"function","function":{"name":"ping","parameters":{}}},
                 {"type":"function","function":{"name":"now","parameters":{"required":[]}}}]}"#;
    let prompt = render(pre, body);
    assert!(prompt.contains(
        "{\"type\": \"function\", \"function\": {\"name\": \"ping\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}}\n"
    ));
    assert!(prompt.contains(
        "{\"name\": \"now\", \"parameters\": {\"required\": [], \"type\": \"object\", \"properties\": {}}}"
    ));
}

#[test]
fn named_tool_choice_constrains_to_that_tools_parameters() {
    let pre = preprocessor("spy");
    let body = format!(
        r#"{{"model":"spy","messages":[{{"role":"user","content":"Hi"}}],"tools":{TOOLS},
            "tool_choice":{{"type":"function","function":{{"name":"get_weather"}}}}}}"#
    );
    let prepared = pre.chat(body.as_bytes(), "x").unwrap();
    let v: Value = serde_json::from_slice(&prepared.engine_request).unwrap();
    assert_eq!(
        v["sampling_options"]["guided_decoding"],
        serde_json::json!({"json": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}})
    );
    assert_eq!(v["require_reasoning"], Value::Bool(true));
    assert_eq!(
        prepared.plan.tool_choice,
        ToolChoiceMode::Named("get_weather".into())
    );

    let unknown = body.replace(r#"{"name":"get_weather"}}"#, r#"{"name":"nope"}}"#);
    let err = pre.chat(unknown.as_bytes(), "x").unwrap_err();
    assert_eq!(err.status, 400);
}

#[test]
fn thinking_and_reasoning_effort_reach_the_template() {
    let pre = Preprocessor::new(
        ModelCard::from_dir(model_dir(), Some("m"), None, None)
            .map(|mut card| {
                card.chat_template = Some(
                    "{{ thinking }}|{{ thinking_mode }}|{{ enable_thinking }}|{{ reasoning_effort }}"
                        .into(),
                );
                card
            })
            .unwrap(),
    )
    .unwrap();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"thinking":{"type":"enabled"},"reasoning_effort":"none"}"#;
    assert_eq!(render(&pre, body), "True|enabled|False|none");
    let body = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"reasoning_effort":"low","chat_template_args":{"enable_thinking":true}}"#;
    assert_eq!(render(&pre, body), "||True|low");
}

#[test]
fn a_body_that_is_not_an_object_names_the_reference_type() {
    let pre = preprocessor("dsref");
    let err = pre.chat(b"[]", "x").unwrap_err();
    let v: Value = serde_json::from_slice(&err.body).unwrap();
    assert_eq!(
        v["message"],
        "Failed to deserialize the JSON body into the target type: invalid type: sequence, expected struct NvCreateChatCompletionRequest at line 1 column 0"
    );
}

#[test]
fn client_stop_token_ids_reach_the_engine_and_hide_their_text() {
    let pre = preprocessor("dsref");
    let body = br#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"stop":[7,9],"stop_token_ids":[11]}"#;
    let prepared = pre.chat(body, "x").unwrap();
    let v: Value = serde_json::from_slice(&prepared.engine_request).unwrap();
    assert_eq!(v["stop_conditions"]["stop"], Value::Null);
    assert_eq!(
        v["stop_conditions"]["stop_token_ids"],
        serde_json::json!([7, 9])
    );
    assert_eq!(
        v["stop_conditions"]["stop_token_ids_hidden"],
        serde_json::json!([1])
    );
    assert_eq!(prepared.plan.decode.hidden_stop_ids, vec![1, 7, 9]);

    let body =
        br#"{"model":"dsref","messages":[{"role":"user","content":"Hi"}],"stop_token_ids":[11]}"#;
    let plan = pre.chat(body, "x").unwrap().plan;
    assert_eq!(plan.decode.hidden_stop_ids, vec![1, 11]);
}
