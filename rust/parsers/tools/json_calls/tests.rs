//! The JSON-call state machine on its own, every family, any chunking.

use super::family::{KIMI_SECTIONS_BEGIN, KIMI_SECTION_BEGIN};
use super::*;
use crate::parsers::tools::test_support::{pieces_of, run};
use crate::parsers::{Delta, Message};
use proptest::prelude::*;

fn run_pieces(family: Family, pieces: &[&str], stream: bool) -> (Message, usize) {
    run(&mut JsonCalls::new(family, Arc::default()), pieces, stream)
}

fn names(m: &Message) -> Vec<(&str, &str)> {
    m.tool_calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.as_str()))
        .collect()
}

#[test]
fn name_is_not_sent_before_it_is_complete() {
    let mut parser = JsonCalls::new(Family::Hermes, Arc::default());
    let mut sink = CallSink::new(true);
    let mut delta = Delta::default();
    parser.feed("<tool_call>{\"name\": \"get_wea", &mut sink);
    sink.drain_into(&mut delta);
    assert!(delta.calls.is_empty());
    parser.feed("ther\", \"arguments\": {\"a\": tr", &mut sink);
    sink.drain_into(&mut delta);
    assert_eq!(delta.calls[0].name.as_deref(), Some("get_weather"));
    // Verbatim bytes are final once scanned, so the half literal is already out.
    assert_eq!(delta.calls[0].arguments, "{\"a\": tr");
}

#[test]
fn megabyte_arguments_stream_without_holding() {
    let value = "x{\\\"".repeat(256 * 1024);
    let text = format!(
        "<tool_call>{{\"name\": \"f\", \"arguments\": {{\"v\": \"{value}\"}}}}</tool_call>"
    );
    let mut parser = JsonCalls::new(Family::Hermes, Arc::default());
    let mut sink = CallSink::new(true);
    let mut delta = Delta::default();
    let mut sent = 0;
    for piece in pieces_of(&text, 7) {
        parser.feed(piece, &mut sink);
        assert!(parser.pending.len() <= "</tool_call>".len());
        delta.clear();
        sink.drain_into(&mut delta);
        sent += delta.calls.iter().map(|c| c.arguments.len()).sum::<usize>();
    }
    parser.finish(&mut sink);
    assert_eq!(sent, value.len() + "{\"v\": \"\"}".len());
    assert!(sink.errors().is_empty());
}

#[test]
fn deep_nesting_and_unbalanced_braces_do_not_panic() {
    let deep = format!(
        "<tool_call>{{\"name\": \"f\", \"arguments\": {{\"a\": {}{}}}}}</tool_call>",
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    let (m, errors) = run_pieces(Family::Hermes, &[&deep], false);
    assert_eq!((m.tool_calls.len(), errors), (1, 0));
    for text in [
        "<tool_call>{{{{{{",
        "<tool_call>}}}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}}}}}</tool_call>",
        "[[[[[[[[",
        "[f(a=[[[[[[[[",
        "<｜tool▁call▁begin｜>f<｜tool▁sep｜>}}}}",
    ] {
        for family in FAMILIES.map(|(_, f)| f) {
            run_pieces(family, &pieces_of(text, 1), false);
            run_pieces(family, &[text], true);
        }
    }
    let py = format!("[f(a={}{})]", "[".repeat(100_000), "]".repeat(100_000));
    let (m, errors) = run_pieces(Family::Pythonic, &[&py], false);
    assert_eq!((m.tool_calls.len(), errors), (0, 1));
}

#[test]
fn calls_in_one_chunk_and_streamed_arguments_agree() {
    let text = "a<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_call>b<tool_call>{\"name\": \"g\"}</tool_call>c";
    let (whole, _) = run_pieces(Family::Hermes, &[text], false);
    let (streamed, _) = run_pieces(Family::Hermes, &pieces_of(text, 1), true);
    assert_eq!(
        whole,
        Message {
            tool_calls: whole.tool_calls.clone(),
            ..streamed.clone()
        }
    );
    assert_eq!(names(&whole), [("f", "{\"x\": 1}"), ("g", "{}")]);
    assert_eq!(names(&whole), names(&streamed));
    assert_eq!(whole.content, "abc");
}

#[test]
fn kimi_start_markers_cover_both_section_spellings() {
    let parser = JsonCalls::new(Family::KimiK2, Arc::default());
    assert!(parser.start_markers().contains(&KIMI_SECTION_BEGIN));
    assert!(parser.start_markers().contains(&KIMI_SECTIONS_BEGIN));
    let harmony = JsonCalls::new(Family::Harmony, Arc::default());
    assert!(harmony.start_markers().contains(&"<|channel|>analysis to="));
}

const PIECES: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "\\",
    ":",
    ",",
    " ",
    "\n",
    "\"name\"",
    "\"arguments\"",
    "\"f\"",
    "1",
    "-2.5",
    "true",
    "nul",
    "é",
    "👋",
    "[TOOL_CALLS]",
    "[ARGS]",
    "<|python_tag|>",
    "functools",
    "(",
    ")",
    "'",
    "=",
    "g",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>",
    "functions.f:0",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<|channel|>commentary to=",
    "<|message|>",
    "<|call|>",
    "<tool_calls>",
    "<TOOLCALL>",
    "```json",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_chunking_gives_the_batch_result(
        parts in proptest::collection::vec(0..PIECES.len(), 0..40),
        step in 1usize..9,
    ) {
        let text: String = parts.iter().map(|&i| PIECES[i]).collect();
        for family in FAMILIES.map(|(_, f)| f) {
            let (batch, batch_errors) = run_pieces(family, &[&text], false);
            let (chunked, chunked_errors) = run_pieces(family, &pieces_of(&text, step), false);
            prop_assert_eq!(&batch, &Message { tool_calls: batch.tool_calls.clone(), ..chunked.clone() });
            prop_assert_eq!(names(&batch), names(&chunked));
            prop_assert_eq!(batch_errors, chunked_errors);
            // Dynamo's Kimi K2 hands out arguments that are not JSON as written.
            for call in batch.tool_calls.iter().filter(|_| family != Family::KimiK2) {
                prop_assert!(crate::parsers::json::is_valid(&call.arguments), "{}", call.arguments);
            }
            if batch_errors == 0 {
                let (streamed, _) = run_pieces(family, &pieces_of(&text, step), true);
                prop_assert_eq!(&batch.content, &streamed.content);
                prop_assert_eq!(names(&batch), names(&streamed));
            }
        }
    }
}
