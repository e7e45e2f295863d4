use super::build;
use crate::parsers::dialect::Dialect;
use crate::parsers::Delta;

/// Feed `pieces` one by one; returns (reasoning, content) and every per-feed delta.
fn run(
    family: &'static str,
    in_reasoning: Option<bool>,
    exits: &'static [&'static str],
    pieces: &[&str],
) -> (String, String, Vec<Delta>) {
    let mut parser = build(family, in_reasoning, exits, false, Dialect::Dynamo);
    let mut deltas = Vec::new();
    for piece in pieces {
        let mut d = Delta::default();
        parser.feed(piece, &mut d);
        deltas.push(d);
    }
    let mut d = Delta::default();
    parser.finish(&mut d);
    deltas.push(d);
    let reasoning = deltas.iter().map(|d| d.reasoning.as_str()).collect();
    let content = deltas.iter().map(|d| d.content.as_str()).collect();
    (reasoning, content, deltas)
}

/// Every split of `text` at each pair of char boundaries gives the same result as one feed.
fn all_two_and_three_splits(family: &'static str, exits: &'static [&'static str], text: &str) {
    let whole = run(family, None, exits, &[text]);
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    for &i in &bounds {
        for &j in bounds.iter().filter(|&&j| j >= i) {
            let got = run(family, None, exits, &[&text[..i], &text[i..j], &text[j..]]);
            assert_eq!(
                (&got.0, &got.1),
                (&whole.0, &whole.1),
                "{family} split {i},{j}"
            );
        }
    }
}

#[test]
fn multibyte_marker_is_held_on_char_boundaries() {
    // `◁` is three bytes; pieces split only between chars, never inside one.
    let (r, c, deltas) = run("kimi", None, &[], &["a◁", "/thi", "nk▷b", "◁", "think▷x"]);
    // A stray closer in content is dropped (Dynamo streaming), its neighbours kept.
    assert_eq!((r.as_str(), c.as_str()), ("x", "ab"));
    // Nothing that could still be a marker was released early.
    assert_eq!(deltas[0].content, "a");
    let (r, c, _) = run("kimi", None, &[], &["◁think▷ü◁", "/think▷end"]);
    assert_eq!((r.as_str(), c.as_str()), ("ü", "end"));
}

#[test]
fn held_text_is_at_most_one_marker() {
    let (_, _, deltas) = run("qwen3", None, &[], &["<think>abc</thi", "nk>done"]);
    assert_eq!(deltas[0].reasoning, "abc");
    assert_eq!(deltas[1].content, "done");
}

#[test]
fn false_prefix_is_released_intact() {
    let (r, c, _) = run("deepseek_r1", None, &[], &["<think>a</", "answer> b"]);
    assert_eq!((r.as_str(), c.as_str()), ("a</answer> b", ""));
    let (r, c, _) = run("basic", None, &[], &["<th", "is is"]);
    assert_eq!((r.as_str(), c.as_str()), ("", "<this is"));
    // A lone `<` at the very end is released at finish.
    let (r, c, _) = run("basic", None, &[], &["x <"]);
    assert_eq!((r.as_str(), c.as_str()), ("", "x <"));
}

#[test]
fn forced_opener_dropped_only_at_start() {
    let (r, c, _) = run("deepseek_r1", None, &[], &["<", "think>plan</think>Sure."]);
    assert_eq!((r.as_str(), c.as_str()), ("plan", "Sure."));
    let (r, _, _) = run("deepseek_r1", None, &[], &["x<think>y"]);
    assert_eq!(r, "x<think>y");
    // An opener prefix that is all the output is reasoning text.
    let (r, _, _) = run("deepseek_r1", None, &[], &["<thi"]);
    assert_eq!(r, "<thi");
}

#[test]
fn exit_marker_goes_to_content_intact() {
    const EXITS: &[&str] = &["<tool_call>"];
    let (r, c, _) = run(
        "qwen3",
        Some(true),
        EXITS,
        &["why<tool_", "call>{}</tool_call>"],
    );
    assert_eq!(
        (r.as_str(), c.as_str()),
        ("why", "<tool_call>{}</tool_call>")
    );
    // deepseek_r1 keeps tool markup in reasoning, as Dynamo does.
    let (r, c, _) = run("deepseek_r1", None, EXITS, &["<tool_call>{}</tool_call>"]);
    assert_eq!((r.as_str(), c.as_str()), ("<tool_call>{}</tool_call>", ""));
}

#[test]
fn gemma_label_waits_for_the_whole_opener() {
    let (r, c, _) = run(
        "gemma4",
        None,
        &[],
        &["hi <|channel>tho", "ught\nstep<channel|>ok"],
    );
    assert_eq!((r.as_str(), c.as_str()), ("step", "hi ok"));
    let (r, _, _) = run("gemma4", None, &[], &["<|channel>thou"]);
    assert_eq!(r, "thou");
}

#[test]
fn harmony_tool_message_reaches_content_intact() {
    let text = "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}<|call|>";
    let (r, c, _) = run("gpt_oss", None, &[], &[text]);
    assert_eq!(r, "think");
    assert_eq!(
        c,
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}<|call|>"
    );
    all_two_and_three_splits("gpt_oss", &[], text);
}

#[test]
fn splits_agree_with_one_feed() {
    all_two_and_three_splits("kimi", &[], "a◁think▷ü◁/think▷b◁/think▷");
    all_two_and_three_splits("gemma4", &[], "<|channel>thought\nx<channel|>y");
    all_two_and_three_splits(
        "kimi_k2",
        &["<|tool_calls_section_begin|>"],
        "<think>r<|tool_calls_section_begin|>z",
    );
    all_two_and_three_splits(
        "granite",
        &[],
        "Here is my thought process: a Here's my response: b",
    );
}

#[test]
fn append_think_prefixes_content_once() {
    let (r, c, _) = run("minimax_append_think", None, &[], &["", "a", "b</think>c"]);
    assert_eq!((r.as_str(), c.as_str()), ("", "<think>ab</think>c"));
}

/// Every reasoning fixture, cut at every char boundary (and at every pair of
/// boundaries for short texts), gives the fixture's expected split.
#[test]
fn fixtures_survive_every_cut() {
    use crate::parsers::registry::ReasoningFamily;
    use crate::parsers::template::Template;
    use serde_json::Value;
    use std::sync::Arc;

    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parsers/reasoning");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let doc: Value =
            serde_json::from_slice(&std::fs::read(entry.unwrap().path()).unwrap()).unwrap();
        for case in doc["cases"].as_array().unwrap() {
            let name = case
                .get("reasoning")
                .unwrap_or(&doc["reasoning"])
                .as_str()
                .unwrap();
            let in_reasoning = case.get("in_reasoning").and_then(Value::as_bool);
            let dialect: Dialect = case
                .get("dialect")
                .and_then(Value::as_str)
                .map_or(Dialect::Dynamo, |d| d.parse().unwrap());
            let template = case
                .get("response_template")
                .or(doc.get("response_template"))
                .map(|t| Arc::new(Template::from_value(t).unwrap()));
            let text = case["text"].as_str().unwrap();
            let want = (
                case["expect"]["reasoning_content"].as_str().unwrap_or(""),
                case["expect"]["content"].as_str().unwrap_or(""),
            );
            let bounds: Vec<usize> = text
                .char_indices()
                .map(|(i, _)| i)
                .chain([text.len()])
                .collect();
            let pairs = if bounds.len() <= 60 {
                bounds.clone()
            } else {
                vec![text.len()]
            };
            for &i in &bounds {
                for &j in pairs.iter().filter(|&&j| j >= i) {
                    // The name as the case's dialect reads it, as `ChatParser` does.
                    let mut parser = ReasoningFamily::resolve(name)
                        .unwrap()
                        .read_by(dialect, false)
                        .build_with(in_reasoning, &[], false, template.clone());
                    let mut out = Delta::default();
                    for piece in [&text[..i], &text[i..j], &text[j..]] {
                        parser.feed(piece, &mut out);
                    }
                    parser.finish(&mut out);
                    let got = (out.reasoning.as_str(), out.content.as_str());
                    assert_eq!(got, want, "{name} {:?} cut at {i},{j}", case["name"]);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 1000, "only {checked} splits checked");
}

#[test]
fn lone_lt_passes_only_when_reproducing_the_reference() {
    let pieces = ["x</think>Done.<", "/think>tail"];
    let feed_all = |reference: bool| {
        let mut parser = build("deepseek_r1", None, &[], reference, Dialect::Dynamo);
        let mut out = Delta::default();
        for piece in pieces {
            parser.feed(piece, &mut out);
        }
        parser.finish(&mut out);
        out
    };
    // The standalone parser is chunking-independent: the stray `</think>` is dropped
    // whole, as when the text arrives in one piece.
    let strict = feed_all(false);
    let mut whole = build("deepseek_r1", None, &[], false, Dialect::Dynamo);
    let mut expected = Delta::default();
    whole.feed(&pieces.concat(), &mut expected);
    whole.finish(&mut expected);
    assert_eq!(strict.content, expected.content);
    // Dynamo 1.6.1 releases the lone `<` ending the first piece, so the marker
    // cut after it stays text.
    let reference = feed_all(true);
    assert_eq!(reference.content, "Done.</think>tail");
}
