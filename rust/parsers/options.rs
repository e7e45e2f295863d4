//! Per-request options that change how reasoning is parsed, and how a request's
//! `chat_template_kwargs` (`chat_template_args`) switch them, as Dynamo 1.6.1 reads
//! them (its preprocessor's PRE.2 table).
//!
//! - `thinking`: the request switched thinking off (`Some(false)`) or on. For the
//!   families whose templates Dynamo gates on the switch (Kimi K2.5, Nemotron 3,
//!   DeepSeek R1/V3/V4, Gemma 4), thinking off turns reasoning parsing off: the whole
//!   output is content. For the others it only means the template did not open
//!   reasoning, so output starts outside it unless `in_reasoning` says otherwise.
//! - `force_nonempty_content`: Nemotron's switch; Dynamo turns reasoning parsing off
//!   for the Nemotron 3 family when it is set, and ignores it for other families.
//! - `in_reasoning` (on [`super::chat::ChatOptions`]): the prompt already opened
//!   reasoning; the pipeline derives it from the rendered prompt
//!   ([`super::reasoning::prompt_opens_reasoning`]), standalone callers pass it (or
//!   SGLang's `force_reasoning`).

use serde_json::{Map, Value};

/// How a gated family reads the thinking switch from `chat_template_args`.
struct Gate {
    family: &'static str,
    /// Boolean keys whose `false` switches thinking off (and `true` on).
    bool_keys: &'static [&'static str],
    /// String keys and the value that switches thinking off.
    off_values: &'static [(&'static str, &'static str)],
    /// `force_nonempty_content: true` also turns reasoning parsing off.
    nonempty_content: bool,
}

const GATES: &[Gate] = &[
    Gate {
        family: "kimi_k2",
        bool_keys: &["thinking"],
        off_values: &[],
        nonempty_content: false,
    },
    Gate {
        family: "nemotron_v3",
        bool_keys: &["enable_thinking"],
        off_values: &[],
        nonempty_content: true,
    },
    Gate {
        family: "deepseek_r1",
        bool_keys: &["thinking"],
        off_values: &[("thinking_mode", "chat")],
        nonempty_content: false,
    },
    Gate {
        family: "deepseek_v4",
        bool_keys: &["thinking"],
        off_values: &[("thinking_mode", "chat")],
        nonempty_content: false,
    },
    Gate {
        family: "gemma4",
        bool_keys: &["enable_thinking"],
        off_values: &[],
        nonempty_content: false,
    },
];

/// Keys any family's template may read as the thinking switch.
const SWITCH_KEYS: &[&str] = &["enable_thinking", "thinking"];

fn gate(family: &str) -> Option<&'static Gate> {
    GATES.iter().find(|g| g.family == family)
}

/// Whether reasoning parsing is off for this request: thinking switched off for a
/// gated family, or `force_nonempty_content` for Nemotron 3.
pub fn reasoning_off(family: &str, thinking: Option<bool>, force_nonempty_content: bool) -> bool {
    gate(family)
        .is_some_and(|g| thinking == Some(false) || g.nonempty_content && force_nonempty_content)
}

/// Where the vLLM and SGLang dialects keep parsing: whether an empty reply's content
/// gets the reasoning at the end (their Nemotron 3 fallback for thinking off or
/// `force_nonempty_content`).
pub fn empty_content_gets_reasoning(
    family: &str,
    thinking: Option<bool>,
    force_nonempty_content: bool,
) -> bool {
    family == "nemotron_v3" && (thinking == Some(false) || force_nonempty_content)
}

/// The thinking switch a request's `chat_template_args` set for a reasoning family:
/// the family's own keys when Dynamo gates it, `enable_thinking` or `thinking` otherwise.
pub fn thinking_from_args(family: &str, args: Option<&Map<String, Value>>) -> Option<bool> {
    let args = args?;
    let (bool_keys, off_values) = match gate(family) {
        Some(g) => (g.bool_keys, g.off_values),
        None => (SWITCH_KEYS, &[][..]),
    };
    if let Some(on) = bool_keys.iter().find_map(|k| args.get(*k)?.as_bool()) {
        return Some(on);
    }
    off_values
        .iter()
        .find_map(|(k, off)| Some(args.get(*k)?.as_str()? != *off))
}

/// `force_nonempty_content: true` in a request's `chat_template_args`.
pub fn force_nonempty_content_from_args(args: Option<&Map<String, Value>>) -> bool {
    args.and_then(|a| a.get("force_nonempty_content"))
        .and_then(Value::as_bool)
        == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn each_gated_family_reads_its_own_keys() {
        let kimi_off = args(json!({"thinking": false}));
        assert_eq!(thinking_from_args("kimi_k2", Some(&kimi_off)), Some(false));
        // Kimi's template does not read `enable_thinking`.
        let enable_off = args(json!({"enable_thinking": false}));
        assert_eq!(thinking_from_args("kimi_k2", Some(&enable_off)), None);
        assert_eq!(
            thinking_from_args("nemotron_v3", Some(&enable_off)),
            Some(false)
        );
        let chat_mode = args(json!({"thinking_mode": "chat"}));
        assert_eq!(
            thinking_from_args("deepseek_v4", Some(&chat_mode)),
            Some(false)
        );
        let thinking_mode = args(json!({"thinking_mode": "thinking"}));
        assert_eq!(
            thinking_from_args("deepseek_r1", Some(&thinking_mode)),
            Some(true)
        );
        assert_eq!(thinking_from_args("qwen3", Some(&enable_off)), Some(false));
        assert_eq!(thinking_from_args("qwen3", None), None);
    }

    #[test]
    fn a_prompt_opens_reasoning_with_the_familys_own_opener() {
        use crate::parsers::reasoning::prompt_opens_reasoning;
        assert!(prompt_opens_reasoning(
            "deepseek_r1",
            "<｜Assistant｜><think>\n"
        ));
        assert!(prompt_opens_reasoning(
            "seed_oss",
            "<seed:bos>assistant\n<seed:think>"
        ));
        assert!(prompt_opens_reasoning("mistral", "[INST]hi[/INST][THINK]"));
        assert!(prompt_opens_reasoning(
            "gemma4",
            "<start_of_turn>model\n<|channel>thought\n"
        ));
        assert!(!prompt_opens_reasoning("seed_oss", "assistant\n<think>"));
        assert!(!prompt_opens_reasoning("qwen3", "<think>\n\n</think>\n\n"));
        // Channel and passthrough families have no opener a prompt could end with.
        assert!(!prompt_opens_reasoning(
            "gpt_oss",
            "<|channel|>analysis<|message|>"
        ));
    }

    #[test]
    fn only_gated_families_turn_reasoning_off() {
        assert!(reasoning_off("deepseek_r1", Some(false), false));
        assert!(!reasoning_off("deepseek_r1", Some(true), false));
        assert!(!reasoning_off("qwen3", Some(false), false));
        assert!(reasoning_off("nemotron_v3", None, true));
        assert!(!reasoning_off("deepseek_r1", None, true));
    }
}
