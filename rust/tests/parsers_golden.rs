//! Golden parser cases from `tests/fixtures/parsers/`, shared with pytest.
//!
//! Each case is checked batch (`parse`) and streamed under several chunkings,
//! with whole calls and with streamed arguments; all must give the expected message.

mod parsers_cases;

use _core::parsers::chat::{parse, ChatOptions};
use _core::parsers::{ChatParser, Delta, Message};
use serde_json::Value;

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
    let all = parsers_cases::load();
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

/// Malformed outputs give the recorded answer, batch and under every chunking. Ids and
/// error counts are not recorded there (Dynamo's answers carry neither in a comparable form).
#[test]
fn malformed_outputs_give_the_recorded_answer() {
    let all = parsers_cases::load_malformed();
    assert!(!all.is_empty(), "no malformed cases found");
    fn view(m: &Message) -> (&str, Vec<(&str, &str)>) {
        let calls = m.tool_calls.iter();
        let calls = calls.map(|c| (c.name.as_str(), c.arguments.as_str()));
        (&m.content, calls.collect())
    }
    for case in &all {
        let want_calls: Vec<(&str, &str)> = case.expect["tool_calls"]
            .as_array()
            .expect("tool_calls")
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap(),
                    c["arguments"].as_str().unwrap(),
                )
            })
            .collect();
        let want = (case.expect["content"].as_str().unwrap(), want_calls);
        let (message, _) = parse(&case.text, &case.options).unwrap();
        assert_eq!(view(&message), want, "{} [parse]", case.label);
        for (how, pieces) in chunkings(&case.text) {
            let (message, _) = stream(&pieces, &case.options);
            assert_eq!(view(&message), want, "{} [{how}]", case.label);
        }
    }
}
