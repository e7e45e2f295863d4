//! Whose behaviour to reproduce where Dynamo 1.6.1, vLLM 0.34 and SGLang 0.5.23 read
//! the same output differently. Dynamo is the default; each difference switched here
//! is a row of `docs/parsers.md` ("Dialects") with the server code that shows it.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    #[default]
    Dynamo,
    Vllm,
    Sglang,
}

impl Dialect {
    pub const NAMES: [&'static str; 3] = ["dynamo", "vllm", "sglang"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// A fresh tool-call id in the server's form: Dynamo `call-<uuid>`, vLLM
    /// `chatcmpl-tool-<16 hex>`, SGLang `call_<24 hex>`. A model's own id (Kimi) is kept
    /// by every server and does not come from here.
    pub fn new_call_id(self) -> String {
        let uuid = uuid::Uuid::new_v4();
        match self {
            Dialect::Dynamo => {
                let mut id = String::with_capacity(41);
                id.push_str("call-");
                id.push_str(
                    uuid.hyphenated()
                        .encode_lower(&mut uuid::Uuid::encode_buffer()),
                );
                id
            }
            Dialect::Vllm => format!("chatcmpl-tool-{:016x}", uuid.as_u64_pair().1),
            Dialect::Sglang => {
                let mut hex = uuid.simple().to_string();
                hex.truncate(24);
                format!("call_{hex}")
            }
        }
    }

    /// Whether a tag-shaped value whose type no schema gives stays text. vLLM and
    /// SGLang keep it a string; Dynamo reads JSON-looking text (`42`, `true`, `[1]`) as JSON.
    pub fn untyped_values_are_text(self) -> bool {
        self != Dialect::Dynamo
    }

    /// Whether a request can switch a family's reasoning parsing off (Dynamo's PRE.2
    /// gate). vLLM and SGLang keep parsing; thinking off only means output starts
    /// outside reasoning, and Nemotron's empty content gets the reasoning at the end.
    pub fn gates_reasoning(self) -> bool {
        self == Dialect::Dynamo
    }

    /// Whether output that opens with no reasoning marker starts inside reasoning, where
    /// this server's parser for the family decides otherwise than Dynamo's (`None`: the
    /// family's own default). vLLM's Qwen3, GLM-4.5 and Seed-OSS parsers read unmarked
    /// output as reasoning (up to a tool call); vLLM's and SGLang's Mistral parsers, and
    /// SGLang's Kimi K2 and Nemotron 3 detectors, read it as content.
    pub fn starts_in_reasoning(self, family: &str) -> Option<bool> {
        match (self, family) {
            (Dialect::Vllm, "qwen3" | "glm45" | "seed_oss") => Some(true),
            (Dialect::Vllm | Dialect::Sglang, "mistral") => Some(false),
            (Dialect::Sglang, "kimi_k2" | "nemotron_v3") => Some(false),
            _ => None,
        }
    }

    /// Whether a tool call's start marker ends reasoning that never closed. vLLM and
    /// SGLang run their reasoning parser first and apart, so for a family whose reasoning
    /// parser does not itself know the call marker the call stays reasoning.
    pub fn call_ends_reasoning(self, family: &str) -> bool {
        !matches!(
            (self, family),
            (Dialect::Vllm | Dialect::Sglang, "step3") | (Dialect::Sglang, "minimax_m2")
        )
    }

    /// Whether reasoning is at most one span and its markers mean nothing once it is
    /// over or before it opened: SGLang's base reasoning detector splits at the first
    /// closer only, so a closer with no opener (output starting outside reasoning),
    /// and any marker after the span, stay content as written.
    pub fn one_reasoning_span(self, family: &str) -> bool {
        self.reasoning_opener_is_text(family)
            || self == Dialect::Sglang
                && matches!(
                    family,
                    "deepseek_r1"
                        | "deepseek_v4"
                        | "qwen3"
                        | "glm45"
                        | "kimi"
                        | "kimi_k2"
                        | "mistral"
                        | "step3"
                        | "nemotron_v3"
                        | "minimax_m2"
                        | "hunyuan"
                        | "gemma4"
                )
    }

    /// Whether reasoning that a tool call ends (no closer) loses its trailing
    /// whitespace. vLLM's MiniMax M2, GLM-4.5/4.7 and Kimi K2 parsers strip it; its
    /// Qwen3 and Seed-OSS parsers keep it.
    pub fn trims_reasoning_before_calls(self, family: &str) -> bool {
        self == Dialect::Vllm && matches!(family, "minimax_m2" | "glm45" | "kimi_k2")
    }

    /// Whether the reasoning opener is plain text: vLLM's Step3 parser takes everything
    /// before the first `</think>` as reasoning, a leading `<think>` included.
    pub fn reasoning_opener_is_text(self, family: &str) -> bool {
        self == Dialect::Vllm && family == "step3"
    }

    /// Whether a reasoning family's own tool-region markers end its reasoning with no
    /// tool parser's help. SGLang's `minimax` reasoning is its Qwen3 detector, which
    /// ends reasoning at `<tool_call>` only, never at `<minimax:tool_call>`.
    pub fn own_exits_end_reasoning(self, family: &str) -> bool {
        !matches!((self, family), (Dialect::Sglang, "minimax_m2"))
    }

    /// What becomes of whitespace right before a tool call, for a tool-call family
    /// asked for as `spelling`. vLLM never hands out whitespace-only content beside calls,
    /// except that its parser-engine families (Qwen3-Coder, GLM-4.5/4.7, Seed-OSS, Gemma 4,
    /// MiniMax M2) stream the whitespace between calls once some text came first; SGLang
    /// keeps content as written, but its DSML detectors (DeepSeek V3.2, V4, V4.1) drop the
    /// blank line the chat template puts before the block, and its `qwen25` detector (also
    /// `qwen`; not `hermes`) takes the whitespace between two calls as their separator.
    /// vLLM's response-template parser (`hf`, `beam`) hands out content as written.
    pub fn space_before_calls(self, family: &str, spelling: &str) -> SpaceBeforeCalls {
        if self == Dialect::Sglang && matches!(spelling, "qwen25" | "qwen") {
            return SpaceBeforeCalls::BetweenCallsDropped;
        }
        match (self, family) {
            (
                Dialect::Vllm,
                "qwen3_coder" | "glm45" | "glm47" | "seed_oss" | "gemma4" | "minimax_m2",
            ) => SpaceBeforeCalls::BlankDroppedUntilText,
            (Dialect::Vllm, "response_template" | "beam") => SpaceBeforeCalls::Kept,
            (Dialect::Vllm, _) => SpaceBeforeCalls::BlankDropped,
            (Dialect::Sglang, "deepseek_v3_2" | "deepseek_v4" | "deepseek_v4_1") => {
                SpaceBeforeCalls::BlankLineDropped
            }
            _ => SpaceBeforeCalls::Kept,
        }
    }

    /// Whether a call to a tool the request did not declare is dropped (with its text).
    /// SGLang drops it; Dynamo and vLLM hand it out.
    pub fn drops_undeclared_tools(self) -> bool {
        self == Dialect::Sglang
    }
}

/// Whitespace right before a tool call (after the previous call, reasoning or text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceBeforeCalls {
    /// Content as written (Dynamo).
    Kept,
    /// Whitespace-only content before a call (between calls, after reasoning) is
    /// dropped; text's own trailing whitespace stays.
    BlankDropped,
    /// As `BlankDropped` until the reply has had some text; from then on whitespace
    /// beside calls stays.
    BlankDroppedUntilText,
    /// A blank line (`\n\n`) ending the content right before a call is dropped; any
    /// other whitespace stays.
    BlankLineDropped,
    /// Whitespace-only content between two calls is dropped; any other whitespace stays.
    BetweenCallsDropped,
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A dialect name nobody knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown parser dialect `{0}`; valid dialects: dynamo, vllm, sglang")]
pub struct UnknownDialect(pub String);

impl FromStr for Dialect {
    type Err = UnknownDialect;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name.trim().to_ascii_lowercase().as_str() {
            "dynamo" => Ok(Dialect::Dynamo),
            "vllm" => Ok(Dialect::Vllm),
            "sglang" => Ok(Dialect::Sglang),
            _ => Err(UnknownDialect(name.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_each_servers_form() {
        let dynamo = Dialect::Dynamo.new_call_id();
        assert!(dynamo.starts_with("call-") && dynamo.len() == 41);
        let vllm = Dialect::Vllm.new_call_id();
        assert!(vllm.starts_with("chatcmpl-tool-") && vllm.len() == 30);
        let sglang = Dialect::Sglang.new_call_id();
        assert!(sglang.starts_with("call_") && sglang.len() == 29);
        assert!(sglang[5..].bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn sglangs_qwen25_spelling_reads_blank_between_calls_as_their_separator() {
        let sglang = |spelling| Dialect::Sglang.space_before_calls("hermes", spelling);
        assert_eq!(sglang("qwen25"), SpaceBeforeCalls::BetweenCallsDropped);
        assert_eq!(sglang("hermes"), SpaceBeforeCalls::Kept);
        assert_eq!(
            Dialect::Vllm.space_before_calls("hermes", "qwen25"),
            SpaceBeforeCalls::BlankDropped
        );
    }

    #[test]
    fn names_round_trip() {
        for name in Dialect::NAMES {
            assert_eq!(name.parse::<Dialect>().unwrap().name(), name);
        }
        assert!("tgi".parse::<Dialect>().is_err());
    }
}
