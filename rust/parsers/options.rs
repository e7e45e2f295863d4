//! Per-request options that change how reasoning is parsed, and how a request's
//! `chat_template_kwargs` (`chat_template_args`) switch them, as Dynamo 1.6.1 reads
//! them (its preprocessor's PRE.2 table).
//!
//! - `thinking`: the request switched thinking off (`Some(false)`) or on. For the
//!   names Dynamo gates on the switch (Kimi K2.5, Nemotron 3, DeepSeek R1/V3.2/V4),
//!   thinking off turns reasoning parsing off: the whole output is content; DeepSeek
//!   V3/V3.1, Gemma 4 and Mistral parse reasoning only when it is switched on
//!   (Mistral by `reasoning_effort`). For the others it only means the template did
//!   not open reasoning, so output starts outside it unless `in_reasoning` says otherwise.
//! - `force_nonempty_content`: Nemotron's switch; Dynamo turns reasoning parsing off
//!   for the Nemotron 3 family when it is set, and ignores it for other families.
//! - `in_reasoning` (on [`super::chat::ChatOptions`]): the prompt already opened
//!   reasoning; the pipeline derives it from the rendered prompt
//!   ([`super::reasoning::prompt_opens_reasoning`]), standalone callers pass it (or
//!   SGLang's `force_reasoning`).

use serde_json::{Map, Value};

/// How a gated name reads the thinking switch from `chat_template_args`.
struct Gate {
    /// A family, or the switch a name reads ([`super::registry::ReasoningFamily::switch`]).
    name: &'static str,
    /// Boolean keys whose `false` switches thinking off (and `true` on).
    bool_keys: &'static [&'static str],
    /// A string key and the value that switches thinking off, or with `opt_in` on.
    mode_values: &'static [(&'static str, &'static str)],
    /// `reasoning_effort` other than `"none"` switches thinking on, `"none"` off.
    effort: bool,
    /// Reasoning is parsed only when the request switches thinking on.
    opt_in: bool,
    /// `force_nonempty_content: true` also turns reasoning parsing off.
    nonempty_content: bool,
}

const OPT_OUT: Gate = Gate {
    name: "",
    bool_keys: &[],
    mode_values: &[],
    effort: false,
    opt_in: false,
    nonempty_content: false,
};

const GATES: &[Gate] = &[
    Gate {
        name: "kimi_k2",
        bool_keys: &["thinking"],
        ..OPT_OUT
    },
    Gate {
        name: "nemotron_v3",
        bool_keys: &["enable_thinking"],
        nonempty_content: true,
        ..OPT_OUT
    },
    Gate {
        name: "deepseek_r1",
        bool_keys: &["thinking"],
        mode_values: &[("thinking_mode", "chat")],
        ..OPT_OUT
    },
    Gate {
        name: "deepseek_v3",
        bool_keys: &["thinking", "enable_thinking"],
        mode_values: &[("thinking_mode", "thinking")],
        opt_in: true,
        ..OPT_OUT
    },
    Gate {
        name: "deepseek_v4",
        bool_keys: &["thinking"],
        mode_values: &[("thinking_mode", "chat")],
        ..OPT_OUT
    },
    Gate {
        name: "gemma4",
        bool_keys: &["thinking", "enable_thinking"],
        opt_in: true,
        ..OPT_OUT
    },
    Gate {
        name: "mistral",
        effort: true,
        opt_in: true,
        ..OPT_OUT
    },
];

/// Keys any family's template may read as the thinking switch.
const SWITCH_KEYS: &[&str] = &["enable_thinking", "thinking"];

fn gate(name: &str) -> Option<&'static Gate> {
    GATES.iter().find(|g| g.name == name)
}

/// Whether reasoning parsing is off for this request (`switch`: the name's gate):
/// thinking switched off for a gated name, or `force_nonempty_content` for Nemotron 3.
/// An opt-in name is off unless switched on where the request is known (`strict`,
/// the pipeline, as Dynamo's frontend); a standalone caller who passed no switch
/// keeps its reasoning.
pub fn reasoning_off(
    switch: &str,
    thinking: Option<bool>,
    force_nonempty_content: bool,
    strict: bool,
) -> bool {
    gate(switch).is_some_and(|g| {
        if g.opt_in {
            thinking == Some(false) || strict && thinking.is_none()
        } else {
            thinking == Some(false) || g.nonempty_content && force_nonempty_content
        }
    })
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

/// The thinking switch a request's `chat_template_args` (with `thinking` and
/// `reasoning_effort` merged in) set for a name's gate (`switch`): the gate's own
/// keys when Dynamo gates it, `enable_thinking` or `thinking` otherwise.
pub fn thinking_from_args(switch: &str, args: Option<&Map<String, Value>>) -> Option<bool> {
    let args = args?;
    let Some(g) = gate(switch) else {
        return SWITCH_KEYS.iter().find_map(|k| args.get(*k)?.as_bool());
    };
    if let Some(on) = g.bool_keys.iter().find_map(|k| args.get(*k)?.as_bool()) {
        return Some(on);
    }
    if g.effort {
        if let Some(effort) = args.get("reasoning_effort").and_then(Value::as_str) {
            return Some(effort != "none");
        }
    }
    g.mode_values.iter().find_map(|(k, value)| {
        let matches = args.get(*k)?.as_str()? == *value;
        Some(matches == g.opt_in)
    })
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
        assert!(reasoning_off("deepseek_r1", Some(false), false, true));
        assert!(!reasoning_off("deepseek_r1", Some(true), false, true));
        assert!(!reasoning_off("qwen3", Some(false), false, true));
        assert!(reasoning_off("nemotron_v3", None, true, true));
        assert!(!reasoning_off("deepseek_r1", None, true, true));
    }

    #[test]
    fn opt_in_names_parse_only_when_switched_on() {
        // As the live Dynamo 1.6.1 frontend: no switch, no reasoning.
        for switch in ["deepseek_v3", "gemma4", "mistral"] {
            assert!(reasoning_off(switch, None, false, true));
            assert!(!reasoning_off(switch, Some(true), false, true));
            assert!(reasoning_off(switch, Some(false), false, false));
            // A standalone caller who passed no switch keeps the reasoning.
            assert!(!reasoning_off(switch, None, false, false));
        }
        let on = |switch, v: Value| thinking_from_args(switch, Some(&args(v)));
        assert_eq!(
            on("deepseek_v3", json!({"enable_thinking": true})),
            Some(true)
        );
        assert_eq!(
            on("deepseek_v3", json!({"thinking_mode": "thinking"})),
            Some(true)
        );
        assert_eq!(
            on("deepseek_v3", json!({"thinking_mode": "x"})),
            Some(false)
        );
        assert_eq!(on("gemma4", json!({"thinking_mode": "thinking"})), None);
        // Mistral reads the effort only; `thinking` does not switch it.
        assert_eq!(on("mistral", json!({"thinking": true})), None);
        assert_eq!(
            on("mistral", json!({"reasoning_effort": "low"})),
            Some(true)
        );
        assert_eq!(
            on("mistral", json!({"reasoning_effort": "none"})),
            Some(false)
        );
        // R1 keeps reading `thinking_mode` as an off switch.
        assert_eq!(on("deepseek_r1", json!({"thinking_mode": "x"})), Some(true));
    }
}
