//! Reasoning parsers: one delimited state machine configured per family, plus
//! Harmony channels (gpt_oss) and MiniMax's append-think passthrough.
//!
//! Forced starts follow Dynamo where Dynamo defines the family (deepseek_r1,
//! step3, nemotron_v3, kimi_k2, mistral, minimax_m2 start inside reasoning;
//! basic, qwen3, glm45, kimi, nemotron_deci, granite do not). Families Dynamo
//! lacks follow the model's chat template: kimi_k3's prompt opens the think
//! channel, deepseek_v4 and minimax_m3 leave it to `in_reasoning`.

mod added;
mod delimited;
mod harmony;
mod harmony_reference;
mod muse;
mod reference;

use delimited::{Delimited, Family};

use super::markers::Held;
use super::{Delta, ReasoningParse};

/// A parser that scans its held marker start and the new text as one piece.
trait HeldRun {
    fn held(&mut self) -> &mut Held;
    /// Consume `text`; without `last`, a possible marker start at the end is held.
    fn consume(&mut self, text: &str, last: bool, out: &mut Delta);
}

fn feed_held<P: HeldRun>(parser: &mut P, text: &str, out: &mut Delta) {
    if parser.held().tail.is_empty() {
        parser.consume(text, false, out);
        return;
    }
    let buf = parser.held().join(text);
    parser.consume(&buf, false, out);
    parser.held().reuse(buf);
}

fn finish_held<P: HeldRun>(parser: &mut P, out: &mut Delta) {
    let buf = std::mem::take(&mut parser.held().tail);
    parser.consume(&buf, true, out);
}

const THINK: &[&str] = &["<think>"];
const UNTHINK: &[&str] = &["</think>"];

const fn think(name: &'static str, forced: bool) -> Family {
    Family {
        name,
        openers: THINK,
        closers: UNTHINK,
        forced,
        labels: &[],
        honours_exits: true,
        own_exits: &[],
        multi_span: true,
        drop_stray: true,
        framing: &[],
        lone_byte_passes: true,
    }
}

static BASIC: Family = think("basic", false);
/// Dynamo's captures show tool markup staying inside deepseek_r1 reasoning
/// (`chat-unary-toolcall-without-think`), so tool markers do not end it.
static DEEPSEEK_R1: Family = Family {
    honours_exits: false,
    ..think("deepseek_r1", true)
};
static DEEPSEEK_V4: Family = Family {
    own_exits: &["<｜DSML｜tool_calls>", "<｜DSML｜invoke name="],
    ..think("deepseek_v4", false)
};
static QWEN3: Family = think("qwen3", false);
static GLM45: Family = think("glm45", false);
static KIMI: Family = Family {
    openers: &["◁think▷"],
    lone_byte_passes: false,
    closers: &["◁/think▷"],
    ..think("kimi", false)
};
static KIMI_K2: Family = Family {
    own_exits: &["<|tool_calls_section_begin|>"],
    ..think("kimi_k2", true)
};
/// XTML: `<|open|>think<|sep|>…<|close|>think<|sep|><|open|>response<|sep|>…`.
/// The response/message wrappers are framing and are dropped; the tools
/// region is left intact for a tool parser. Opening the response channel also
/// ends an unclosed think channel.
static KIMI_K3: Family = Family {
    openers: &["<|open|>think<|sep|>"],
    lone_byte_passes: false,
    closers: &["<|close|>think<|sep|>", "<|open|>response<|sep|>"],
    own_exits: &["<|open|>tools<|sep|>"],
    framing: &[
        "<|open|>response<|sep|>",
        "<|close|>response<|sep|>",
        "<|close|>message<|sep|>",
        "<|end_of_msg|>",
    ],
    ..think("kimi_k3", true)
};
static MISTRAL: Family = Family {
    openers: &["[THINK]"],
    lone_byte_passes: false,
    closers: &["[/THINK]"],
    ..think("mistral", true)
};
/// Plain-text phrases; like Dynamo, one span only, and a later phrase is text.
static GRANITE: Family = Family {
    openers: &["Here's my thought process:", "Here is my thought process:"],
    lone_byte_passes: false,
    closers: &["Here's my response:", "Here is my response:"],
    multi_span: false,
    drop_stray: false,
    ..think("granite", false)
};
static STEP3: Family = think("step3", true);
static NEMOTRON_V3: Family = think("nemotron_v3", true);
static NEMOTRON_DECI: Family = think("nemotron_deci", false);
static MINIMAX_M2: Family = Family {
    own_exits: &["<minimax:tool_call>", "<invoke name="],
    ..think("minimax_m2", true)
};
static MINIMAX_M3: Family = Family {
    openers: &["<mm:think>"],
    lone_byte_passes: false,
    closers: &["</mm:think>"],
    ..think("minimax_m3", false)
};
/// `<|channel>thought\n…<channel|>`; the `thought\n` label is part of the
/// opener, and a bare `<|channel>` (label missing) opens reasoning too.
/// Like Dynamo's Gemma 4 parser, a stray closer in content is left alone.
static GEMMA4: Family = Family {
    openers: &["<|channel>thought\n", "<|channel>"],
    lone_byte_passes: false,
    closers: &["<channel|>"],
    drop_stray: false,
    labels: &["thought\n"],
    ..think("gemma4", false)
};

/// MiniMax M2 "append think": no split at all; content gets a leading `<think>`
/// (the template consumed it) so clients see the model's own markup.
struct AppendThink {
    started: bool,
}

impl ReasoningParse for AppendThink {
    fn feed(&mut self, text: &str, out: &mut Delta) {
        if text.is_empty() {
            return;
        }
        if !self.started {
            self.started = true;
            out.content.push_str("<think>");
        }
        out.content.push_str(text);
    }

    fn finish(&mut self, _out: &mut Delta) {}
}

/// A parser for a canonical family name (see `registry`).
pub fn build(
    family: &'static str,
    in_reasoning: Option<bool>,
    exit_markers: &'static [&'static str],
    reference_streaming: bool,
) -> Box<dyn ReasoningParse> {
    match family {
        "gpt_oss" if reference_streaming => {
            Box::new(harmony_reference::ReferenceHarmony::new(in_reasoning))
        }
        "gpt_oss" => Box::new(harmony::Harmony::new(in_reasoning)),
        "minimax_append_think" => Box::new(AppendThink { started: false }),
        "muse" => Box::new(muse::Muse::new(in_reasoning)),
        // The families Dynamo runs through its plain `<think>` parser.
        "deepseek_r1" | "qwen3" | "basic" | "glm45" | "step3" | "nemotron_v3" | "nemotron_deci"
            if reference_streaming =>
        {
            let forced = delimited_family(family).is_some_and(|f| f.forced);
            Box::new(reference::ReferenceThink::new(
                "<think>",
                "</think>",
                in_reasoning.unwrap_or(forced),
            ))
        }
        _ => {
            let config = delimited_family(family).unwrap_or(&BASIC);
            Box::new(Delimited::new(
                config,
                in_reasoning,
                exit_markers,
                reference_streaming,
            ))
        }
    }
}

/// Whether a rendered prompt ends by opening `family`'s reasoning (the chat template
/// injected the opener), so the output starts inside it.
pub fn prompt_opens_reasoning(family: &str, prompt: &str) -> bool {
    let prompt = prompt.trim_end();
    delimited_family(family).is_some_and(|f| {
        f.openers
            .iter()
            .any(|opener| prompt.ends_with(opener.trim_end()))
    })
}

/// The configuration of a delimited family.
fn delimited_family(family: &str) -> Option<&'static Family> {
    Some(match family {
        "deepseek_r1" => &DEEPSEEK_R1,
        "deepseek_v4" => &DEEPSEEK_V4,
        "qwen3" => &QWEN3,
        "glm45" => &GLM45,
        "kimi" => &KIMI,
        "kimi_k2" => &KIMI_K2,
        "kimi_k3" => &KIMI_K3,
        "mistral" => &MISTRAL,
        "granite" => &GRANITE,
        "step3" => &STEP3,
        "nemotron_v3" => &NEMOTRON_V3,
        "nemotron_deci" => &NEMOTRON_DECI,
        "minimax_m2" => &MINIMAX_M2,
        "minimax_m3" => &MINIMAX_M3,
        "gemma4" => &GEMMA4,
        "basic" => &BASIC,
        _ => return added::family(family),
    })
}

#[cfg(test)]
mod tests;
