//! No parser panics or loses its invariant, whatever the model writes or however it
//! is cut: streamed output under any chunking equals `parse()`, for every reasoning ×
//! tool-call pair. The inputs are random marker fragments and malformed outputs made
//! from the golden cases by splicing, truncating and doubling their markup and by
//! inserting long bodies (past every name and hold bound), broken JSON and unicode.

mod parsers_cases;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use _core::parsers::chat::{parse, ChatOptions};
use _core::parsers::{reasoning_parsers, tool_call_parsers, ChatParser, Delta, Message, Tools};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

const TOOLS: &str = r#"[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"object"}}}}}]"#;

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
    // Closers and wrappers the list above leaves out, and common malformations.
    "<｜tool▁calls▁end｜>",
    "<|tool_calls_section_end|>",
    "<|tool_call_section_begin|>",
    "<|start|>assistant",
    "<|constrain|>json",
    "[/TOOL_CALLS]",
    "<|python_start|>",
    "<|python_end|>",
    "<|python_tag|>",
    "<tool_calls>",
    "</tool_calls>",
    "<TOOLCALL>",
    "</TOOLCALL>",
    "</parameter1>",
    "</minimax:tool_call>",
    "<｜DSML｜parameter name=\"a\" string=\"true\">",
    "</｜DSML｜parameter>",
    "</｜DSML｜invoke>",
    "</｜DSML｜function_calls>",
    "<｜tool_calls_begin｜>",
    "<steptml:invoke name=\"f\">",
    "<mm:think>",
    "</mm:think>",
    "<|open|>think<|sep|>",
    "<|close|>think<|sep|>",
    "<|channel>thought\n",
    "<channel|>",
    "Here is my thought process:",
    "Here is my response:",
    "```json\n",
    "\\\"",
    "\\u00e9",
    "NaN",
    "-Infinity",
    "f(1, 'x')",
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

fn run(options: &ChatOptions, pieces: &[&str]) -> (Message, usize) {
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

/// What two runs must agree on (ids are random).
fn view(m: &Message) -> (&str, &str, Vec<(&str, &str)>) {
    let calls = m.tool_calls.iter();
    let calls = calls.map(|c| (c.name.as_str(), c.arguments.as_str()));
    (&m.content, &m.reasoning, calls.collect())
}

fn options(reasoning: Option<&str>, tool_call: Option<&str>, tools: Arc<Tools>) -> ChatOptions {
    ChatOptions {
        reasoning: reasoning.map(str::to_owned),
        tool_call: tool_call.map(str::to_owned),
        tools,
        ..ChatOptions::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn feed_never_panics_and_whole_equals_pieces(
        reasoning in prop::sample::select(reasoning_parsers()).prop_map(|p| p.name),
        tool_call in prop::sample::select(tool_call_parsers()).prop_map(|p| p.name),
        pieces in any_text(),
    ) {
        let tools = Arc::new(Tools::from_json(TOOLS.as_bytes()).unwrap());
        let options = options(Some(reasoning), Some(tool_call), tools);
        let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let (streamed, streamed_errors) = run(&options, &pieces);
        let (whole, whole_errors) = run(&options, &[&pieces.concat()]);
        prop_assert_eq!(view(&streamed), view(&whole));
        prop_assert_eq!(streamed_errors, whole_errors);
    }
}

/// Golden-case texts by family, and the tools each tool-call family's cases declare.
struct Corpus {
    reasoning: BTreeMap<String, Vec<String>>,
    tool_call: BTreeMap<String, Vec<String>>,
    tools: BTreeMap<String, Arc<Tools>>,
}

fn corpus() -> &'static Corpus {
    static CORPUS: OnceLock<Corpus> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut corpus = Corpus {
            reasoning: BTreeMap::new(),
            tool_call: BTreeMap::new(),
            tools: BTreeMap::new(),
        };
        for case in parsers_cases::load() {
            if let Some(name) = &case.options.reasoning {
                let texts = corpus.reasoning.entry(name.clone()).or_default();
                texts.push(case.text.clone());
            }
            if let Some(name) = &case.options.tool_call {
                let texts = corpus.tool_call.entry(name.clone()).or_default();
                texts.push(case.text.clone());
                let tools = case.options.tools.clone();
                corpus.tools.entry(name.clone()).or_insert(tools);
            }
        }
        corpus
    })
}

/// A long run: past the 1 KB name bounds and past 4 KB, plain, unicode, or JSON-ish.
fn long_body(kind: u8, len: u16) -> String {
    let len = 1000 + usize::from(len) % 5000;
    match kind % 4 {
        0 => "y".repeat(len),
        1 => "é世".repeat(len / 5),
        2 => format!("{{\"a\": \"{}\"}}", "x\\\"{".repeat(len / 4)),
        _ => "{[\"".repeat(len / 3),
    }
}

/// One change to a base text. Positions are fractions of the text's length.
#[derive(Debug, Clone)]
enum Edit {
    Delete {
        at: u16,
        len: u8,
    },
    /// Copy a stretch elsewhere: doubled markers, stray ends, repeated calls.
    Copy {
        from: u16,
        len: u8,
        to: u16,
    },
    Piece {
        at: u16,
        piece: usize,
    },
    /// A marker cut short.
    Truncated {
        at: u16,
        piece: usize,
        keep: u8,
    },
    Long {
        at: u16,
        kind: u8,
        len: u16,
    },
    Noise {
        at: u16,
        text: String,
    },
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn position(text: &str, fraction: u16) -> usize {
    floor_boundary(
        text,
        text.len() * usize::from(fraction) / usize::from(u16::MAX),
    )
}

impl Edit {
    fn apply(&self, text: &mut String) {
        match self {
            Edit::Delete { at, len } => {
                let at = position(text, *at);
                let end = floor_boundary(text, at + usize::from(*len));
                text.replace_range(at..end, "");
            }
            Edit::Copy { from, len, to } => {
                let from = position(text, *from);
                let end = floor_boundary(text, from + usize::from(*len));
                let copy = text[from..end].to_owned();
                text.insert_str(position(text, *to), &copy);
            }
            Edit::Piece { at, piece } => text.insert_str(position(text, *at), PIECES[*piece]),
            Edit::Truncated { at, piece, keep } => {
                let piece = PIECES[*piece];
                let keep = floor_boundary(piece, usize::from(*keep) % piece.len().max(1));
                text.insert_str(position(text, *at), &piece[..keep]);
            }
            Edit::Long { at, kind, len } => {
                text.insert_str(position(text, *at), &long_body(*kind, *len))
            }
            Edit::Noise { at, text: noise } => text.insert_str(position(text, *at), noise),
        }
    }
}

fn edit() -> impl Strategy<Value = Edit> {
    let piece = 0..PIECES.len();
    prop_oneof![
        (any::<u16>(), any::<u8>()).prop_map(|(at, len)| Edit::Delete { at, len }),
        (any::<u16>(), any::<u8>(), any::<u16>()).prop_map(|(from, len, to)| Edit::Copy {
            from,
            len,
            to
        }),
        (any::<u16>(), piece.clone()).prop_map(|(at, piece)| Edit::Piece { at, piece }),
        (any::<u16>(), piece, any::<u8>()).prop_map(|(at, piece, keep)| Edit::Truncated {
            at,
            piece,
            keep
        }),
        (any::<u16>(), any::<u8>(), any::<u16>()).prop_map(|(at, kind, len)| Edit::Long {
            at,
            kind,
            len
        }),
        (any::<u16>(), "\\PC{1,8}").prop_map(|(at, text)| Edit::Noise { at, text }),
    ]
}

/// A malformed output for one reasoning × tool-call pair, and how to cut it.
#[derive(Debug, Clone)]
struct Output {
    reasoning: Option<&'static str>,
    tool_call: Option<&'static str>,
    in_reasoning: Option<bool>,
    typed: bool,
    text: String,
    cuts: Vec<u16>,
}

impl Output {
    fn options(&self, stream_arguments: bool) -> ChatOptions {
        let declared = self.tool_call.and_then(|t| corpus().tools.get(t));
        let tools = match declared {
            Some(tools) if self.typed => tools.clone(),
            _ => Arc::default(),
        };
        ChatOptions {
            in_reasoning: self.in_reasoning,
            stream_arguments,
            ..options(self.reasoning, self.tool_call, tools)
        }
    }

    /// Single characters, seven-byte pieces and the generated cuts.
    fn chunkings(&self) -> Vec<Vec<&str>> {
        let text = self.text.as_str();
        let chars = text.char_indices().map(|(i, c)| &text[i..i + c.len_utf8()]);
        let mut sevens = Vec::new();
        let mut start = 0;
        while start < text.len() {
            let mut end = (start + 7).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            sevens.push(&text[start..end]);
            start = end;
        }
        let mut bounds: Vec<usize> = self.cuts.iter().map(|&c| position(text, c)).collect();
        bounds.extend([0, text.len()]);
        bounds.sort_unstable();
        bounds.dedup();
        let cut = bounds.windows(2).map(|w| &text[w[0]..w[1]]).collect();
        vec![chars.collect(), sevens, cut]
    }

    /// Streamed equals batch under every chunking, with whole calls and, when nothing
    /// was malformed, with streamed arguments.
    fn check(&self) -> Result<(), TestCaseError> {
        let (batch, errors) = parse(&self.text, &self.options(false)).unwrap();
        for pieces in self.chunkings() {
            let (streamed, streamed_errors) = run(&self.options(false), &pieces);
            prop_assert_eq!(view(&streamed), view(&batch), "{} pieces", pieces.len());
            prop_assert_eq!(streamed_errors, errors.len(), "{} pieces", pieces.len());
            if errors.is_empty() {
                let (streamed, _) = run(&self.options(true), &pieces);
                prop_assert_eq!(view(&streamed), view(&batch), "{} pieces", pieces.len());
            }
        }
        Ok(())
    }
}

/// Outputs for one pair: golden texts of both families joined, then edited.
fn outputs(
    reasoning: Option<&'static str>,
    tool_call: Option<&'static str>,
) -> impl Strategy<Value = Output> {
    let bases = prop::collection::vec((any::<bool>(), any::<usize>()), 1..4);
    let edits = prop::collection::vec(edit(), 0..6);
    let in_reasoning = prop::option::of(any::<bool>());
    let cuts = prop::collection::vec(any::<u16>(), 0..16);
    (bases, edits, in_reasoning, any::<bool>(), cuts).prop_map(
        move |(bases, edits, in_reasoning, typed, cuts)| {
            let corpus = corpus();
            let own = |pool: &'static BTreeMap<String, Vec<String>>, name: Option<&str>| {
                name.and_then(|n| pool.get(n)).map(Vec::as_slice)
            };
            let pools: Vec<&[String]> = [
                own(&corpus.reasoning, reasoning),
                own(&corpus.tool_call, tool_call),
            ]
            .into_iter()
            .flatten()
            .collect();
            let mut text = String::new();
            for (other, pick) in bases {
                match pools.get(usize::from(other) % pools.len().max(1)) {
                    Some(pool) => text.push_str(&pool[pick % pool.len()]),
                    None => text.push_str(PIECES[pick % PIECES.len()]),
                }
            }
            for edit in &edits {
                edit.apply(&mut text);
            }
            Output {
                reasoning,
                tool_call,
                in_reasoning,
                typed,
                text,
                cuts,
            }
        },
    )
}

fn families(parsers: &'static [_core::parsers::ParserInfo]) -> Vec<Option<&'static str>> {
    std::iter::once(None)
        .chain(parsers.iter().map(|p| Some(p.name)))
        .collect()
}

fn any_pair_output() -> impl Strategy<Value = Output> {
    let reasoning = prop::sample::select(families(reasoning_parsers()));
    let tool_call = prop::sample::select(families(tool_call_parsers()));
    (reasoning, tool_call).prop_flat_map(|(r, t)| outputs(r, t))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn malformed_output_streams_as_it_parses(output in any_pair_output()) {
        output.check()?;
    }
}

/// Every pair, not only the ones random sampling reaches: a few outputs each.
#[test]
fn every_pair_streams_malformed_output_as_it_parses() {
    let mut runner = TestRunner::deterministic();
    for reasoning in families(reasoning_parsers()) {
        for tool_call in families(tool_call_parsers()) {
            let strategy = outputs(reasoning, tool_call);
            for _ in 0..4 {
                let output = strategy.new_tree(&mut runner).unwrap().current();
                if let Err(e) = output.check() {
                    panic!("{e}\n{output:?}");
                }
            }
        }
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
        let pieces: Vec<&str> = text
            .as_bytes()
            .chunks(4096)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        run(&options, &pieces);
    }
}
