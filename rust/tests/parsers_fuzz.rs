//! No parser panics or loses text, whatever the model writes or however it is cut.

use std::sync::Arc;

use _core::parsers::chat::ChatOptions;
use _core::parsers::{reasoning_parsers, tool_call_parsers, ChatParser, Delta, Message, Tools};
use proptest::prelude::*;

const TOOLS: &str = r#"[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"object"}}}}}]"#;

/// Fragments that look like pieces of every family's markup.
const PIECES: &[&str] = &[
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "{",
    "}",
    "\"",
    "\\",
    "<",
    ">",
    "[",
    "]",
    "<|",
    "|>",
    "◁think▷",
    "◁/think▷",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[THINK]",
    "[/THINK]",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "functions.f:0",
    "<|channel|>",
    "analysis",
    "commentary to=functions.f",
    "<|message|>",
    "<|call|>",
    "<|end|>",
    "<function=f>",
    "<parameter=a>",
    "</parameter>",
    "</function>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "<minimax:tool_call>",
    "<invoke name=\"f\">",
    "<parameter name=\"a\">",
    "</invoke>",
    "<｜DSML｜function_calls>",
    "<｜DSML｜invoke name=\"f\">",
    "<|tool_call>",
    "<tool_call|>",
    "call:f",
    "<|\"|>",
    "\"name\": \"f\"",
    "\"arguments\": ",
    "1",
    "true",
    "null",
    " ",
    "\n",
    "é",
    "世界",
    "👋",
];

fn any_text() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop_oneof![
            prop::sample::select(PIECES).prop_map(str::to_owned),
            "\\PC{0,6}",
        ],
        0..40,
    )
}

fn run(options: &ChatOptions, pieces: &[String]) -> Message {
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
    message
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn feed_never_panics_and_whole_equals_pieces(
        reasoning in prop::sample::select(reasoning_parsers()).prop_map(|p| p.name),
        tool_call in prop::sample::select(tool_call_parsers()).prop_map(|p| p.name),
        pieces in any_text(),
    ) {
        let options = ChatOptions {
            reasoning: Some(reasoning.to_owned()),
            tool_call: Some(tool_call.to_owned()),
            tools: Arc::new(Tools::from_json(TOOLS.as_bytes()).unwrap()),
            stream_arguments: false,
            in_reasoning: None,
            thinking: None,
            force_nonempty_content: false,
            dialect: Default::default(),
            reference_streaming: false,
        };
        let streamed = run(&options, &pieces);
        let whole = run(&options, &[pieces.concat()]);
        prop_assert_eq!(&streamed.content, &whole.content);
        prop_assert_eq!(&streamed.reasoning, &whole.reasoning);
        let names = |m: &Message| m.tool_calls.iter().map(|c| (c.name.clone(), c.arguments.clone())).collect::<Vec<_>>();
        prop_assert_eq!(names(&streamed), names(&whole));
    }
}

#[test]
fn one_megabyte_of_arguments_and_unbalanced_braces() {
    let big = format!("{{\"a\": \"{}\"}}", "x{[".repeat(350_000));
    let text = format!(
        "<tool_call>{{\"name\": \"f\", \"arguments\": {big}}}</tool_call>{}",
        "{".repeat(10_000)
    );
    for entry in tool_call_parsers() {
        let options = ChatOptions {
            tool_call: Some(entry.name.to_owned()),
            ..ChatOptions::default()
        };
        let pieces: Vec<String> = text
            .as_bytes()
            .chunks(4096)
            .map(|c| String::from_utf8(c.to_vec()).unwrap())
            .collect();
        run(&options, &pieces);
    }
}
