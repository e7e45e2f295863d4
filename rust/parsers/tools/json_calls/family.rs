//! The JSON-call families: their markers, and the few choices that tell them apart.

use std::sync::OnceLock;

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
}

pub(super) const FAMILIES: [(&str, Family); 11] = [
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
    }
}

impl Family {
    fn spec(self) -> Spec {
        match self {
            Family::Hermes => Spec {
                after: &["</tool_call>"],
                needs_end: true,
                skip: &["</tool_call>"],
                ..spec(&["<tool_call>"])
            },
            Family::Llama3Json => Spec {
                bare: Some(b'{'),
                tentative_start: true,
                ..spec(&["<|python_tag|>"])
            },
            Family::Mistral => Spec {
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
                close: &["<|call|>"],
                skip: &["<|call|>"],
                ..spec(HARMONY_STARTS)
            },
            Family::Jamba => Spec {
                after: &["</tool_calls>"],
                skip: &["</tool_calls>"],
                ..spec(&["<tool_calls>"])
            },
            Family::Phi4 => Spec {
                tentative_start: true,
                ..spec(&["functools"])
            },
            Family::NemotronDeci => Spec {
                after: &["</TOOLCALL>"],
                skip: &["</TOOLCALL>"],
                ..spec(&["<TOOLCALL>"])
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
