//! The JSON-call families: their markers, and the few choices that tell them apart.

use std::sync::OnceLock;

use super::wrapper::Keys;
use crate::parsers::markers::MarkerSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    Hermes,
    Llama3Json,
    Mistral,
    Pythonic,
    DeepseekV3,
    DeepseekV31,
    KimiK2,
    Harmony,
    Jamba,
    Phi4,
    NemotronDeci,
    Longcat,
    Internlm,
    Inkling,
    Cohere,
    Gigachat3,
    Lfm2,
    Apertus,
    Granite20bFc,
    Granite,
    Xlam,
    Plamo3,
    Default,
}

pub(super) const FAMILIES: [(&str, Family); 23] = [
    ("hermes", Family::Hermes),
    ("llama3_json", Family::Llama3Json),
    ("mistral", Family::Mistral),
    ("pythonic", Family::Pythonic),
    ("deepseek_v3", Family::DeepseekV3),
    ("deepseek_v3_1", Family::DeepseekV31),
    ("kimi_k2", Family::KimiK2),
    ("harmony", Family::Harmony),
    ("jamba", Family::Jamba),
    ("phi4", Family::Phi4),
    ("nemotron_deci", Family::NemotronDeci),
    ("longcat", Family::Longcat),
    ("internlm", Family::Internlm),
    ("inkling", Family::Inkling),
    ("cohere_command", Family::Cohere),
    ("gigachat3", Family::Gigachat3),
    ("lfm2", Family::Lfm2),
    ("apertus", Family::Apertus),
    ("granite_20b_fc", Family::Granite20bFc),
    ("granite", Family::Granite),
    ("xlam", Family::Xlam),
    ("plamo3", Family::Plamo3),
    ("default", Family::Default),
];

pub(super) const DS_CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
pub(super) const DS_CALLS_END: &str = "<｜tool▁calls▁end｜>";
pub(super) const DS_CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
pub(super) const DS_CALL_END: &str = "<｜tool▁call▁end｜>";
pub(super) const DS_SEP: &str = "<｜tool▁sep｜>";
pub(super) const KIMI_SECTIONS_BEGIN: &str = "<|tool_calls_section_begin|>";
pub(super) const KIMI_SECTION_BEGIN: &str = "<|tool_call_section_begin|>";
pub(super) const KIMI_SECTIONS_END: &str = "<|tool_calls_section_end|>";
pub(super) const KIMI_SECTION_END: &str = "<|tool_call_section_end|>";
pub(super) const KIMI_CALL_BEGIN: &str = "<|tool_call_begin|>";
pub(super) const KIMI_ARGS_BEGIN: &str = "<|tool_call_argument_begin|>";
pub(super) const KIMI_CALL_END: &str = "<|tool_call_end|>";
pub(super) const MISTRAL_CALLS: &str = "[TOOL_CALLS]";
pub(super) const MISTRAL_ARGS: &str = "[ARGS]";
pub(super) const MISTRAL_CALL_ID: &str = "[CALL_ID]";
const INKLING_ENDS: &[&str] = &["<|end_message|>", "<|content_model_end_sampling|>"];
const PLAMO_REQUESTS_BEGIN: &str = "<|plamo:begin_tool_requests:plamo|>";
pub(super) const PLAMO_REQUESTS_END: &str = "<|plamo:end_tool_requests:plamo|>";
pub(super) const PLAMO_REQUEST_BEGIN: &str = "<|plamo:begin_tool_request:plamo|>";
pub(super) const PLAMO_REQUEST_END: &str = "<|plamo:end_tool_request:plamo|>";
pub(super) const PLAMO_NAME_BEGIN: &str = "<|plamo:begin_tool_name:plamo|>";
/// The name's end and the arguments' header, which the template writes together.
const PLAMO_NAME_END: &str = "<|plamo:end_tool_name:plamo|><|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>";
pub(super) const PLAMO_ARGS_END: &str = "<|plamo:end_tool_arguments:plamo|>";

/// Harmony's call end.
pub(super) const HARMONY_CALL: &str = "<|call|>";

/// Harmony call openers: the full header and the bare channel forms, with the
/// recipient in the channel or in the role position.
pub(super) const HARMONY_STARTS: &[&str] = &[
    "<|start|>assistant<|channel|>commentary to=",
    "<|start|>assistant<|channel|>analysis to=",
    "<|start|>assistant to=",
    "<|channel|>commentary to=",
    "<|channel|>analysis to=",
];

/// The markers of one family, by parser state.
pub(super) struct Spec {
    pub(super) starts: &'static [&'static str],
    /// A byte that opens a call when it is the first non-space of the output.
    pub(super) bare: Option<u8>,
    /// Openers looked for in text that do not end reasoning (too common in prose).
    pub(super) text_only: &'static [&'static str],
    /// Held as content until a name proves the call (prose-like openers).
    pub(super) tentative_start: bool,
    /// Between calls of a section: the next call's marker or the section's end.
    pub(super) section: &'static [&'static str],
    /// End of a call's name, id or header.
    pub(super) name_end: &'static [&'static str],
    /// End of a call whose arguments are a bare object.
    pub(super) close: &'static [&'static str],
    /// Optional end marker after a wrapper object or a list.
    pub(super) after: &'static [&'static str],
    /// A call counts only once its `after` marker arrives (Dynamo's hermes drops
    /// a call whose block never closes, even with a complete body).
    pub(super) needs_end: bool,
    /// Where a broken call's markup ends and parsing can resume.
    pub(super) skip: &'static [&'static str],
    /// How the family spells the call object's keys.
    pub(super) keys: Keys,
    /// Dynamo's JSON parsers also take a call object (or list of them) written
    /// anywhere in the content, bare or in a fence (see `in_content`).
    pub(super) calls_in_content: bool,
}

const fn spec(starts: &'static [&'static str]) -> Spec {
    Spec {
        starts,
        bare: None,
        text_only: &[],
        tentative_start: false,
        section: &[],
        name_end: &[],
        close: &[],
        after: &[],
        needs_end: false,
        skip: &[],
        keys: Keys {
            name: None,
            args: None,
            keyed: false,
        },
        calls_in_content: false,
    }
}

impl Family {
    fn spec(self) -> Spec {
        match self {
            Family::Hermes => Spec {
                calls_in_content: true,
                after: &["</tool_call>"],
                needs_end: true,
                skip: &["</tool_call>"],
                ..spec(&["<tool_call>"])
            },
            Family::Llama3Json => Spec {
                calls_in_content: true,
                bare: Some(b'{'),
                tentative_start: true,
                ..spec(&["<|python_tag|>"])
            },
            Family::Mistral => Spec {
                calls_in_content: true,
                bare: Some(b'['),
                name_end: &[MISTRAL_ARGS, MISTRAL_CALL_ID],
                after: &["[/TOOL_CALLS]"],
                skip: &[MISTRAL_CALLS],
                ..spec(&[MISTRAL_CALLS])
            },
            // Dynamo finds the list anywhere in the text, not only at its start.
            Family::Pythonic => Spec {
                text_only: &["["],
                after: &["<|python_end|>"],
                skip: &["<|python_end|>"],
                ..spec(&["<|python_start|>"])
            },
            Family::DeepseekV3 | Family::DeepseekV31 => Spec {
                section: &[DS_CALL_BEGIN, DS_CALLS_END],
                name_end: if self == Family::DeepseekV3 {
                    &[DS_SEP, "\n"]
                } else {
                    &[DS_SEP]
                },
                close: &[DS_CALL_END],
                skip: &[DS_CALL_END, DS_CALLS_END],
                ..spec(&[DS_CALLS_BEGIN, DS_CALL_BEGIN])
            },
            Family::KimiK2 => Spec {
                section: &[KIMI_CALL_BEGIN, KIMI_SECTIONS_END, KIMI_SECTION_END],
                name_end: &[KIMI_ARGS_BEGIN],
                close: &[KIMI_CALL_END],
                skip: &[KIMI_CALL_END, KIMI_SECTIONS_END, KIMI_SECTION_END],
                ..spec(&[KIMI_SECTIONS_BEGIN, KIMI_SECTION_BEGIN, KIMI_CALL_BEGIN])
            },
            Family::Harmony => Spec {
                name_end: &["<|message|>"],
                close: &[HARMONY_CALL],
                skip: &[HARMONY_CALL],
                ..spec(HARMONY_STARTS)
            },
            Family::Jamba => Spec {
                calls_in_content: true,
                after: &["</tool_calls>"],
                skip: &["</tool_calls>"],
                ..spec(&["<tool_calls>"])
            },
            Family::Phi4 => Spec {
                calls_in_content: true,
                tentative_start: true,
                ..spec(&["functools"])
            },
            Family::NemotronDeci => Spec {
                calls_in_content: true,
                after: &["</TOOLCALL>"],
                skip: &["</TOOLCALL>"],
                ..spec(&["<TOOLCALL>"])
            },
            // Dynamo's fallback JSON parser: an object or list after `<TOOLCALL>` or
            // `<|python_tag|>`, or in the content. It knows no end marker, so a
            // `</TOOLCALL>` after the call stays content.
            Family::Default => Spec {
                calls_in_content: true,
                ..spec(&["<TOOLCALL>", "<|python_tag|>"])
            },
            // LongCat-Flash: hermes' object in its own tags.
            Family::Longcat => Spec {
                after: &["</longcat_tool_call>"],
                skip: &["</longcat_tool_call>"],
                ..spec(&["<longcat_tool_call>"])
            },
            // InternLM2 / Intern-S1: `<|action_start|><|plugin|>` (a space may sit
            // between the two tokens), the object, `<|action_end|>`.
            Family::Internlm => Spec {
                after: &["<|action_end|>"],
                skip: &["<|action_end|>"],
                ..spec(&["<|action_start|><|plugin|>", "<|action_start|> <|plugin|>"])
            },
            // Inkling's typed block: `<|message_model|><|content_invoke_tool_json|>`,
            // `{"name": ..., "args": {...}}`, `<|end_message|>`.
            Family::Inkling => Spec {
                after: INKLING_ENDS,
                skip: INKLING_ENDS,
                keys: Keys {
                    args: Some("args"),
                    ..Keys::default()
                },
                ..spec(&[
                    "<|message_model|><|content_invoke_tool_json|>",
                    "<|content_invoke_tool_json|>",
                ])
            },
            // Cohere Command: `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": F,
            // "parameters": {...}}, ...]<|END_ACTION|>`; the model's counter id is dropped.
            Family::Cohere => Spec {
                after: &["<|END_ACTION|>"],
                skip: &["<|END_ACTION|>"],
                keys: Keys {
                    name: Some("tool_name"),
                    ..Keys::default()
                },
                ..spec(&["<|START_ACTION|>"])
            },
            // GigaChat 3: one object after `<|function_call|>` (or the plain-text
            // `function call<|role_sep|>` header), optionally closed by `</s>`.
            Family::Gigachat3 => Spec {
                after: &["</s>"],
                ..spec(&["<|function_call|>", "function call<|role_sep|>\n"])
            },
            // LFM2: a pythonic list, or a list of call objects, between its markers.
            Family::Lfm2 => Spec {
                after: &["<|tool_call_end|>"],
                skip: &["<|tool_call_end|>"],
                ..spec(&["<|tool_call_start|>"])
            },
            // Apertus: `<|tools_prefix|>[{"F": {...}}, ...]<|tools_suffix|>`, each call an
            // object whose one key is the function's name.
            Family::Apertus => Spec {
                after: &["<|tools_suffix|>"],
                skip: &["<|tools_suffix|>"],
                keys: Keys {
                    keyed: true,
                    ..Keys::default()
                },
                ..spec(&["<|tools_prefix|>"])
            },
            // Granite 20B FC: each call object after its own `<function_call>`.
            Family::Granite20bFc => spec(&["<function_call>"]),
            // Granite 3.0/3.1: a list of call objects after `<|tool_call|>` (3.0, a
            // special token) or `<tool_call>` (3.1); the list's `]` ends it.
            Family::Granite => spec(&["<|tool_call|>", "<tool_call>"]),
            // xLAM: a list of call objects as the whole output (held as content until a
            // name proves it), or after `[TOOL_CALLS]`, `<tool_call>` or a ```json fence.
            Family::Xlam => Spec {
                bare: Some(b'['),
                tentative_start: true,
                after: &["</tool_call>", "```"],
                ..spec(&["[TOOL_CALLS]", "<tool_call>", "```json"])
            },
            // PLaMo 3: `<|plamo:begin_tool_requests:plamo|>`, then per call a request
            // holding a name and its JSON arguments, then the requests' end.
            Family::Plamo3 => Spec {
                section: &[
                    PLAMO_REQUEST_BEGIN,
                    PLAMO_NAME_BEGIN,
                    PLAMO_REQUEST_END,
                    PLAMO_REQUESTS_END,
                ],
                name_end: &[PLAMO_NAME_END],
                close: &[PLAMO_ARGS_END],
                skip: &[PLAMO_ARGS_END, PLAMO_REQUESTS_END],
                ..spec(&[PLAMO_REQUESTS_BEGIN])
            },
        }
    }
}

/// A family's marker automata, built once per process.
pub(super) struct Sets {
    pub(super) spec: Spec,
    pub(super) text: MarkerSet,
    pub(super) section: Option<MarkerSet>,
    pub(super) name_end: Option<MarkerSet>,
    pub(super) close: Option<MarkerSet>,
    pub(super) after: Option<MarkerSet>,
    pub(super) skip: Option<MarkerSet>,
}

pub(super) fn sets(family: Family) -> &'static Sets {
    static SETS: [OnceLock<Sets>; FAMILIES.len()] = [const { OnceLock::new() }; FAMILIES.len()];
    SETS[family as usize].get_or_init(|| {
        let spec = family.spec();
        let opt = |m: &[&'static str]| (!m.is_empty()).then(|| MarkerSet::new(m));
        Sets {
            text: MarkerSet::new(&[spec.starts, spec.text_only].concat()),
            section: opt(spec.section),
            // A name also stops at the markers that end a broken call, so neither a
            // call without arguments nor an overlong name swallows them.
            name_end: (!spec.name_end.is_empty())
                .then(|| MarkerSet::new(&[spec.name_end, spec.skip].concat())),
            close: opt(spec.close),
            after: opt(spec.after),
            skip: opt(spec.skip),
            spec,
        }
    })
}
