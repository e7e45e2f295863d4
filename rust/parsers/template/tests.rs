use serde_json::json;

use super::*;
use crate::parsers::tools::test_support::{pieces_of, run};
use crate::parsers::Message;

fn reason(family: &str, template: Option<Arc<Template>>, pieces: &[&str]) -> Delta {
    let mut parser = reasoning_parser(family, template, None);
    let mut out = Delta::default();
    for piece in pieces {
        parser.feed(piece, &mut out);
    }
    parser.finish(&mut out);
    out
}

const BEAM_CALL: &str = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=get_weather<|channel|>analysis <|constrain|>xml<|message|><rfl:parameter name=\"city\">\nParis\n</rfl:parameter><|call|>";

#[test]
fn beam_splits_reasoning_and_calls_under_any_cut() {
    let whole = reason("beam", None, &[BEAM_CALL]);
    assert_eq!(whole.reasoning, "Need weather.");
    assert!(whole.content.starts_with(" to=get_weather<|channel|>"));
    let tools = Arc::new(Tools::default());
    for size in [1, 2, 3, 5, 8, 400] {
        let pieces = pieces_of(BEAM_CALL, size);
        assert_eq!(reason("beam", None, &pieces), whole, "{size}");
        let mut parser = tool_parser("beam", None, tools.clone());
        let (message, errors): (Message, usize) = run(parser.as_mut(), &pieces, false);
        assert_eq!(errors, 0);
        assert_eq!(message.content, "Need weather.", "{size}");
        assert_eq!(message.tool_calls.len(), 1);
        assert_eq!(message.tool_calls[0].arguments, "{\"city\":\"Paris\"}");
    }
}

#[test]
fn the_thinking_closer_completes_at_the_stop_token() {
    let out = reason("beam", None, &["<|channel|>analysis<|message|>plan<|end|>"]);
    assert_eq!((out.reasoning.as_str(), out.content.as_str()), ("plan", ""));
}

#[test]
fn invalid_templates_are_refused() {
    for bad in [
        json!({"fields": {"content": {}}}),
        json!({"start_anchor": "<a>", "fields": {}}),
        json!({"start_anchor": "<a>", "fields": {"answer": {}}}),
        json!({"start_anchor": "<a>", "fields": {"tool_calls": {"content": "json"}}}),
        json!({"start_anchor": "<a>", "fields": {"content": {"content": "json"}}}),
        json!({"start_anchor": "<a>", "fields": {"tool_calls": {"open_pattern": "<(?P<n>x)>"}}}),
    ] {
        assert!(Template::from_value(&bad).is_err(), "{bad}");
    }
}

#[test]
fn a_pattern_opener_is_held_until_it_resolves() {
    let spec = json!({"start_anchor": "<s>", "fields": {
        "tool_calls": {"open_pattern": "<call (?P<name>\\w+)>", "close": "</call>",
            "content": "json", "transform": {"function": {"name": "{name}", "arguments": "{content}"}}}}});
    let template = Arc::new(Template::from_value(&spec).unwrap());
    let text = "a <call b <call f>{\"x\": 1}</call> c";
    for size in [1, 2, 4, 100] {
        let mut parser = tool_parser("response_template", Some(template.clone()), Arc::default());
        let (message, _) = run(parser.as_mut(), &pieces_of(text, size), false);
        assert_eq!(message.content, "a <call b  c", "{size}");
        assert_eq!(message.tool_calls[0].name, "f");
        assert_eq!(message.tool_calls[0].arguments, "{\"x\":1}");
    }
}
