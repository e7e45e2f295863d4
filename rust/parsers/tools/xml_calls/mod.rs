//! Tool-call formats whose arguments are not JSON on the wire: tag-shaped parameter
//! lists typed by the request's tool schemas, and Gemma 4's own object syntax.
//!
//! Shared conventions:
//! - Arguments are built as JSON with `", "` and `": "` separators and non-ASCII kept
//!   as is (Python's `json.dumps(ensure_ascii=False)`), keys in the order written.
//!   Value typing is [`crate::parsers::schema::write_typed_value`].
//! - Plain string values stream as they arrive; other values go out when they close
//!   (their type depends on the whole text). The pieces always join to the whole-call JSON.
//! - Text outside calls is content, byte for byte, in streaming and batch alike; text
//!   between tags inside a call block is markup and dropped.
//! - A call cut off by the end of output, or one that can't be read, is dropped with a
//!   recorded reason, never ended with partial arguments. A call closed by its own end
//!   tag stands even if the block around it never closes.

use std::sync::Arc;

use crate::parsers::markers::{Bounded, Held, MarkerSet, Scan};
use crate::parsers::{CallSink, ToolParse, Tools};

mod families;
mod gemma4;
mod minimax_m3;
mod tagged;

/// The parser for `family`, or `None` when the family is not one of these formats.
pub fn build(family: &'static str, tools: &Arc<Tools>) -> Option<Box<dyn ToolParse>> {
    let format = match family {
        "qwen3_coder" => &tagged::QWEN3_CODER,
        "glm45" | "glm47" => &tagged::GLM,
        "minimax_m2" => &families::MINIMAX_M2,
        "deepseek_v3_2" => &families::DEEPSEEK_V3_2,
        "deepseek_v4" => &families::DEEPSEEK_V4,
        "step3" => &families::STEP3,
        "seed_oss" => &families::SEED_OSS,
        "zaya" => &families::ZAYA,
        "dots" => &families::DOTS,
        "hunyuan" => &families::HUNYUAN,
        "iquest_q1" => &families::IQUEST_Q1,
        "deepseek_v4_1" => &families::DEEPSEEK_V4_1,
        "gigachat35" => &families::GIGACHAT35,
        "kimi_k3" => &families::KIMI_K3,
        "muse" => &families::MUSE,
        "hy_v4" => &families::HY_V4,
        "k2_horizon" => &families::K2_HORIZON,
        "minicpm5" => &families::MINICPM5,
        "gemma4" => {
            return Some(Box::new(gemma4::Gemma4Parser::new(
                &gemma4::GEMMA4,
                tools.clone(),
            )))
        }
        "functiongemma" => {
            return Some(Box::new(gemma4::Gemma4Parser::new(
                &gemma4::FUNCTION_GEMMA,
                tools.clone(),
            )))
        }
        "minimax_m3" => return Some(Box::new(minimax_m3::MinimaxM3Parser::new(tools.clone()))),
        _ => return None,
    };
    Some(Box::new(tagged::TaggedParser::new(format, tools.clone())))
}

/// A parser that reads its input split at the markers legal in its current state.
trait MarkerDriven {
    /// What a found marker means to the parser.
    type Marker: Copy;

    fn held(&mut self) -> &mut Held;

    /// The markers legal in the current state.
    fn legal(&self) -> &'static MarkerSet;

    /// What `legal().marker(index)` means, read before the text ahead of it is absorbed.
    fn meaning(&self, index: usize) -> Self::Marker;

    /// Text between markers, in the current state.
    fn absorb(&mut self, text: &str, sink: &mut CallSink);

    fn on_marker(&mut self, marker: Self::Marker, sink: &mut CallSink);

    /// How many more bytes the field read in the current state may take, if it is
    /// bounded (a name that never ends must not hold the whole output). The state's
    /// markers must include those its overflow state looks for.
    fn room(&self) -> Option<usize> {
        None
    }

    /// The bounded field passed its bound: give it up and leave the state.
    fn overflow(&mut self, _sink: &mut CallSink) {}
}

/// [`ToolParse::feed`] for a [`MarkerDriven`] parser: the held tail and `text` are scanned
/// as one, and a new tail that may still become a marker is held for the next feed.
fn feed_at_markers<P: MarkerDriven>(parser: &mut P, text: &str, sink: &mut CallSink) {
    let buf = parser.held().join(text);
    let mut pos = 0;
    while pos < buf.len() {
        let rest = &buf[pos..];
        let scan = match parser.room() {
            None => parser.legal().scan(rest),
            Some(room) => match parser.legal().scan_bounded(rest, room) {
                Bounded::Within(scan) => scan,
                Bounded::Overflow { at } => {
                    parser.overflow(sink);
                    pos += at;
                    continue;
                }
            },
        };
        match scan {
            Scan::Found { start, end, marker } => {
                let marker = parser.meaning(marker);
                parser.absorb(&rest[..start], sink);
                parser.on_marker(marker, sink);
                pos += end;
            }
            Scan::Partial { hold_from } => {
                parser.absorb(&rest[..hold_from], sink);
                parser.held().tail.push_str(&rest[hold_from..]);
                break;
            }
        }
    }
    parser.held().reuse(buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::tools::test_support::{self, pieces_of};
    use crate::parsers::{CallSink, Delta, Message};

    const FAMILIES: &[&str] = &[
        "qwen3_coder",
        "glm45",
        "glm47",
        "minimax_m2",
        "deepseek_v3_2",
        "deepseek_v4",
        "step3",
        "gemma4",
        "seed_oss",
        "zaya",
        "dots",
        "hunyuan",
        "iquest_q1",
        "deepseek_v4_1",
        "gigachat35",
        "kimi_k3",
        "minimax_m3",
        "muse",
        "hy_v4",
        "k2_horizon",
        "functiongemma",
        "minicpm5",
    ];

    /// One `write_file(content=VALUE)` call in each family's syntax.
    fn call_text(family: &str, value: &str) -> String {
        match family {
            "qwen3_coder" => format!(
                "<tool_call>\n<function=write_file>\n<parameter=content>\n{value}\n</parameter>\n</function>\n</tool_call>"
            ),
            "glm45" | "glm47" => format!(
                "<tool_call>write_file\n<arg_key>content</arg_key>\n<arg_value>{value}</arg_value>\n</tool_call>"
            ),
            "minimax_m2" => format!(
                "<minimax:tool_call>\n<invoke name=\"write_file\">\n<parameter name=\"content\">{value}</parameter>\n</invoke>\n</minimax:tool_call>"
            ),
            "deepseek_v3_2" | "deepseek_v4" => {
                let outer = if family == "deepseek_v4" { "tool_calls" } else { "function_calls" };
                format!(
                    "<｜DSML｜{outer}>\n<｜DSML｜invoke name=\"write_file\">\n<｜DSML｜parameter name=\"content\" string=\"true\">{value}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜{outer}>"
                )
            }
            "step3" => format!(
                "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"write_file\"><steptml:parameter name=\"content\">{value}</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>"
            ),
            "gemma4" => format!("<|tool_call>call:write_file{{content:<|\"|>{value}<|\"|>}}<tool_call|>"),
            "seed_oss" | "zaya" => {
                let tag = if family == "seed_oss" { "seed:tool_call" } else { "zyphra_tool_call" };
                format!(
                    "<{tag}>\n<function=write_file>\n<parameter=content>\n{value}\n</parameter>\n</function>\n</{tag}>"
                )
            }
            "dots" => format!(
                "<dots_function_call>\n<invoke name=\"write_file\">\n<parameter name=\"content\">{value}</parameter>\n</invoke>\n</dots_function_call>"
            ),
            "hunyuan" => format!(
                "<tool_calls>\n<tool_call>write_file<tool_sep>\n<arg_key>content</arg_key>\n<arg_value>{value}</arg_value>\n</tool_call>\n</tool_calls>"
            ),
            "iquest_q1" => format!(
                "<iquest_tool_call>write_file\n<arg_key>content</arg_key>\n<arg_value>{value}</arg_value>\n</iquest_tool_call>"
            ),
            "deepseek_v4_1" => format!(
                "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"write_file\">\n<｜DSML｜ parameter name=\"content\" string=\"true\">{value}</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"
            ),
            "gigachat35" => format!(
                "<｜GCML｜tool_calls>\n<｜GCML｜invoke name=\"write_file\">\n<｜GCML｜parameter name=\"content\" string=\"true\">{value}</｜GCML｜parameter>\n</｜GCML｜invoke>\n</｜GCML｜tool_calls>"
            ),
            "minimax_m3" => format!(
                "]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"write_file\">\n]<]minimax[>[<content>{value}]<]minimax[>[</content>\n]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>"
            ),
            "functiongemma" => format!(
                "<start_function_call>call:write_file{{content:<escape>{value}<escape>}}<end_function_call>"
            ),
            "minicpm5" => format!(
                "<function name=\"write_file\"><param name=\"content\">{value}</param></function>"
            ),
            "hy_v4" => format!(
                "<tool_calls>\n<tool_call>write_file<arg_key>content</arg_key><arg_value>{value}</arg_value></tool_call>\n</tool_calls>"
            ),
            "k2_horizon" => format!(
                "<ifm|tool_calls><ifm|tool_call>write_file<ifm|arg_key>content</ifm|arg_key><ifm|arg_type>string</ifm|arg_type><ifm|arg_value>{value}</ifm|arg_value></ifm|tool_call></ifm|tool_calls>"
            ),
            "muse" => format!(
                "<atem:function_calls>\n<atem:invoke name=\"write_file\">\n<atem:parameter name=\"content\">{value}</atem:parameter>\n</atem:invoke>\n</atem:function_calls>"
            ),
            "kimi_k3" => format!(
                "<|open|>tools<|sep|><|open|>call tool=\"write_file\" index=\"1\"<|sep|><|open|>argument key=\"content\" type=\"string\"<|sep|>{value}<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"
            ),
            other => panic!("no sample for {other}"),
        }
    }

    /// `write_file(content: string)`, so string values take the streaming path.
    fn string_tools() -> Arc<Tools> {
        Arc::new(
            Tools::from_value(&serde_json::json!([{"name": "write_file", "parameters": {
                "type": "object", "properties": {"content": {"type": "string"}}}}]))
            .unwrap(),
        )
    }

    fn floor_boundary(text: &str, mut at: usize) -> usize {
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        at
    }

    fn run(
        family: &'static str,
        tools: &Arc<Tools>,
        pieces: &[&str],
        stream: bool,
    ) -> (Message, usize) {
        let mut parser = build(family, tools).expect("family builds");
        test_support::run(parser.as_mut(), pieces, stream)
    }

    /// Deterministic xorshift, so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn other_families_are_not_built_here() {
        assert!(build("hermes", &Arc::new(Tools::default())).is_none());
    }

    #[test]
    fn megabyte_value_streams_in_linear_pieces() {
        // Ends in text, not whitespace: Dynamo's Qwen3-Coder trims a value whole.
        let value: String = "é<a href=\"x\">\\ ".repeat(70_000) + "z";
        assert!(value.len() > 1_000_000);
        let mut expected = String::from("{\"content\":");
        crate::parsers::schema::write_json_str(&value, &mut expected);
        expected.push('}');
        let typed = string_tools();
        let untyped = Arc::new(Tools::default());
        for family in FAMILIES {
            let text = call_text(family, &value);
            for (stream, tools) in [
                (false, &typed),
                (true, &typed),
                (false, &untyped),
                (true, &untyped),
            ] {
                let (message, errors) = run(family, tools, &pieces_of(&text, 4096), stream);
                assert_eq!(errors, 0, "{family}");
                assert_eq!(message.tool_calls.len(), 1, "{family}");
                assert!(
                    message.tool_calls[0].arguments == expected,
                    "{family}: arguments differ"
                );
                assert!(message.content.is_empty(), "{family}");
            }
        }
    }

    #[test]
    fn string_values_stream_before_they_close() {
        let tools = string_tools();
        // Gemma 4 and Muse send a parameter when it closes (a value's type depends on
        // its whole text), MiniMax-M3 a whole invoke.
        for family in FAMILIES
            .iter()
            .filter(|f| !matches!(**f, "gemma4" | "functiongemma" | "minimax_m3" | "muse"))
        {
            let text = call_text(family, "abc\ndef\n");
            let cut = text.find("def").unwrap() + 2;
            let mut parser = build(family, &tools).unwrap();
            let mut sink = CallSink::new(true);
            let mut delta = Delta::default();
            parser.feed(&text[..cut], &mut sink);
            sink.drain_into(&mut delta);
            assert_eq!(delta.calls.len(), 1, "{family}");
            assert_eq!(
                delta.calls[0].arguments, "{\"content\":\"abc\\nde",
                "{family}"
            );
            parser.feed(&text[cut..], &mut sink);
            parser.finish(&mut sink);
            delta.clear();
            sink.drain_into(&mut delta);
            // Qwen3-Coder's own newline around the value is markup; the value's is kept,
            // except by Dynamo's, which trims the value whole.
            let tail = if *family == "qwen3_coder" {
                "f\"}"
            } else {
                "f\\n\"}"
            };
            assert_eq!(delta.calls[0].arguments, tail, "{family}");
        }
    }

    #[test]
    fn many_calls_in_one_chunk() {
        for family in FAMILIES {
            let one = call_text(family, "x");
            let text = format!("a{one}b{one}c{one}d");
            let (message, errors) = run(family, &string_tools(), &[&text], true);
            assert_eq!(errors, 0, "{family}");
            assert_eq!(message.content, "abcd", "{family}");
            let indices: Vec<usize> = message.tool_calls.iter().map(|c| c.index).collect();
            assert_eq!(indices, [0, 1, 2], "{family}");
        }
    }

    #[test]
    fn garbage_never_panics_and_never_ends_invalid_json() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let typed = string_tools();
        let untyped = Arc::new(Tools::default());
        let noise = [
            "<", ">", "\"", "{", "}", "[", "]", ":", ",", "é", "🌍", "null", "\n", "</",
        ];
        for family in FAMILIES {
            let base = format!(
                "a{}b{}c",
                call_text(family, "v<1>\n"),
                call_text(family, "{\"k\": [1]}")
            );
            let mut calls_seen = 0;
            for round in 0..300 {
                // Valid output with a few random cuts, copies and insertions.
                let mut text = base.clone();
                for _ in 0..rng.below(4) {
                    let at = floor_boundary(&text, rng.below(text.len() + 1));
                    let to = floor_boundary(&text, (at + rng.below(12)).min(text.len()));
                    match rng.below(3) {
                        0 => text.replace_range(at..to, ""),
                        1 => {
                            let copy = text[at..to].to_owned();
                            text.insert_str(at, &copy);
                        }
                        _ => text.insert_str(at, noise[rng.below(noise.len())]),
                    }
                }
                let tools = if round % 2 == 0 { &typed } else { &untyped };
                let size = 1 + rng.below(9);
                let (message, errors) = run(family, tools, &pieces_of(&text, size), false);
                calls_seen += message.tool_calls.len();
                for call in &message.tool_calls {
                    let parsed: serde_json::Value = serde_json::from_str(&call.arguments)
                        .unwrap_or_else(|e| {
                            panic!("{family}: {e} in {:?} from {text:?}", call.arguments)
                        });
                    assert!(parsed.is_object(), "{family}: {text:?}");
                }
                // Streamed arguments must never panic, and must assemble to the same
                // message whenever nothing had to be dropped.
                let (streamed, _) = run(family, tools, &pieces_of(&text, size), true);
                if errors == 0 {
                    let view = |m: &Message| {
                        let calls: Vec<(String, String)> = m
                            .tool_calls
                            .iter()
                            .map(|c| (c.name.clone(), c.arguments.clone()))
                            .collect();
                        (m.content.clone(), calls)
                    };
                    assert_eq!(view(&streamed), view(&message), "{family}: {text:?}");
                }
            }
            // Most rounds keep a call intact; if none did, this test checked nothing.
            assert!(calls_seen > 100, "{family}: only {calls_seen} calls");
        }
    }

    #[test]
    fn deep_gemma_nesting_is_dropped_not_recursed() {
        let body = "[".repeat(100_000);
        let text = format!("<|tool_call>call:f{{a:{body}}}<tool_call|>");
        let (message, errors) = run("gemma4", &string_tools(), &[&text], false);
        assert!(message.tool_calls.is_empty());
        assert_eq!(errors, 1);
    }

    #[test]
    fn endless_name_is_bounded() {
        let name = "n".repeat(100_000);
        for (family, open) in [
            ("qwen3_coder", "<tool_call>\n<function="),
            ("glm47", "<tool_call>"),
            ("minimax_m2", "<minimax:tool_call><invoke name=\""),
            ("gemma4", "<|tool_call>call:"),
        ] {
            let text = format!("{open}{name}");
            let (message, errors) = run(family, &string_tools(), &pieces_of(&text, 1000), false);
            assert!(message.tool_calls.is_empty(), "{family}");
            assert!(errors >= 1, "{family}");
        }
    }

    #[test]
    fn minimax_m3_name_gives_up_where_the_text_says() {
        let (open, close) = ("]<]minimax[>[<tool_call>", "]<]minimax[>[</tool_call>");
        let invoke = "]<]minimax[>[<invoke name=\"";
        let call = format!("{invoke}get_time\">]<]minimax[>[</invoke>");
        let view = |pieces: &[&str]| {
            let (message, errors) = run("minimax_m3", &string_tools(), pieces, false);
            let calls = message.tool_calls.iter();
            let calls: Vec<(String, String)> = calls
                .map(|c| (c.name.clone(), c.arguments.clone()))
                .collect();
            (message.content, calls, errors)
        };
        // An unclosed name ends at the next invoke, or gives up after 1 KB; either way
        // the next invoke is read, however the text was cut.
        for name in ["n".repeat(20), "n".repeat(5000)] {
            let text = format!("{open}{invoke}{name}{call}{close}");
            let whole = view(&[&text]);
            assert_eq!(whole.1, [("get_time".to_owned(), "{}".to_owned())]);
            for size in [1, 7, 1000] {
                let cut = view(&pieces_of(&text, size));
                assert_eq!(cut, whole, "{} bytes in {size}-byte pieces", name.len());
            }
        }
    }

    #[test]
    fn start_markers_open_calls() {
        for family in FAMILIES {
            let parser = build(family, &Arc::new(Tools::default())).unwrap();
            let markers = parser.start_markers();
            assert!(
                markers
                    .iter()
                    .any(|m| call_text(family, "v").starts_with(m)),
                "{family}: {markers:?}"
            );
        }
    }
}
