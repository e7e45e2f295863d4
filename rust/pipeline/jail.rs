//! Dynamo 1.6.1's tool-call jail, as its frontend runs it on each choice's content
//! (after the reasoning parser): text streams through until a start trigger, then
//! everything is held until the family's end marker (or a whole parse finds calls),
//! and the held text is parsed at once and released in one piece.
//!
//! Start triggers, per content piece (one engine frame's text):
//! - a complete start marker anywhere: the text before it passes, the rest is held;
//! - a proper prefix of a start marker ending the piece: held aside, and joined to
//!   the next piece (`<to` + `ol_call>`);
//! - otherwise the family's start heuristic on the held prefix plus the piece
//!   ([`Trigger`]).
//!
//! At the end of output whatever is held (a marker prefix included) is parsed and
//! released with the finish reason. Only the pipeline (which reproduces the
//! reference) uses this module; the standalone parsers stream calls as they close.

use crate::parsers::calls::new_call_id;
use crate::parsers::chat::{parse_with, ChatParserSpec};
use crate::parsers::json::{JsonScanner, Scanned};
use crate::parsers::tools::harmony_whole::{self, parse_whole as parse_whole_harmony};
use crate::parsers::tools::json_calls::default_whole::{self, Reading};
use crate::parsers::tools::json_calls::{
    basic_whole, cut_json_piece, dsv31_whole, hermes_whole, kimi_whole, pythonic_whole,
};
use crate::parsers::ToolCall;
use serde_json::value::RawValue;

/// How a family's start is guessed from a piece of text when no marker matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    /// JSON families: a start marker or a prefix of one (three bytes or more
    /// anywhere, shorter ones at the end), or any `{` / `[`.
    Json,
    /// Marker families: a start marker, or a prefix of one ending the text.
    Marker,
    /// DeepSeek V3.1: as `Marker`, on the text with its surrounding whitespace
    /// trimmed (`< ` ends with `<`), or a bare `<｜tool▁call▁begin｜>` anywhere:
    /// the whole piece is held then, the text before it too.
    TrimmedMarker,
    /// Pythonic: any `[`.
    Pythonic,
    /// Harmony: as `Marker`, or a `<|channel|>` or `<|call|>` anywhere
    /// (live-checked: the whole piece is held, and the jail's end is looked for
    /// from the next piece on).
    Harmony,
}

/// One family's jail: its start and end markers and its start heuristic.
#[derive(Debug, Clone, Copy)]
pub struct JailRules {
    starts: &'static [&'static str],
    ends: &'static [&'static str],
    trigger: Trigger,
    forced_as_auto: bool,
    /// A whole parse with calls keeps only the text before the first start marker.
    content_before_start: bool,
    /// The jail also ends where a whole parse finds calls (families without an
    /// end marker, and `default`, whose `</TOOLCALL>` is optional).
    ends_on_calls: bool,
    /// Held text is read by Dynamo's own hermes parse
    /// ([`hermes_whole`](crate::parsers::tools::json_calls::hermes_whole)).
    hermes_whole: bool,
    /// Held text is read by Dynamo's own kimi_k2 parse
    /// ([`kimi_whole`](crate::parsers::tools::json_calls::kimi_whole)).
    kimi_whole: bool,
    /// Held text is read by Dynamo's own deepseek_v3_1 parse
    /// ([`dsv31_whole`](crate::parsers::tools::json_calls::dsv31_whole)).
    dsv31_whole: bool,
    /// Held text is read by Dynamo's own `default` parse
    /// ([`default_whole`](crate::parsers::tools::json_calls::default_whole)).
    default_whole: bool,
    /// Held text without calls is read by Dynamo's basic JSON parse with this one
    /// start marker ([`basic_whole`](crate::parsers::tools::json_calls::basic_whole)):
    /// a bare list says the text before it (llama3_json).
    basic_marker: Option<&'static str>,
    /// Dynamo's mistral jail: held text is read by its mistral parse
    /// ([`basic_whole::parse_mistral`]) and the jail ends as its JSON-boundary
    /// completion decides ([`MistralEnd`]).
    mistral: bool,
    /// A piece around a start marker reads as the JSON value that starts it once
    /// cut at its last bracket, whatever follows (llama3_json, live-checked:
    /// `<|python_tag|>{A}}` is the call A); else the whole cut piece must parse.
    first_value_pieces: bool,
    /// Held text without a call is kept as text when no end marker closed it
    /// and it lacks these inner markers (qwen3_coder's `<function=` and
    /// `<parameter=`: Dynamo reads such a block as plain text; live-checked:
    /// `<tool_call>x<parameter=y>` says nothing).
    unclosed_kept_without: &'static [&'static str],
    /// A start marker that opens a call without the family's opener, and that
    /// opener: the reference reads the block as if the opener came first
    /// (qwen3_coder's bare `<function=`, live-checked).
    bare_opener: Option<(&'static str, &'static str)>,
    /// A parameter written twice is one key, its last value where it first stood
    /// (qwen3_coder: Dynamo collects parameters in a map, live-checked).
    unique_keys: bool,
}

impl JailRules {
    /// The rules for a tool-call family (by canonical name); `markers` are the
    /// family parser's start markers, used for families the table does not name.
    pub fn for_family(name: &str, markers: &'static [&'static str]) -> Self {
        let (starts, ends, trigger): (&'static [&'static str], &'static [&'static str], _) =
            match name {
                "hermes" | "qwen25" => (&["<tool_call>"], &["</tool_call>"], Trigger::Json),
                "default" => (
                    &["<TOOLCALL>", "<|python_tag|>"],
                    &["</TOOLCALL>"],
                    Trigger::Json,
                ),
                "nemotron_deci" => (&["<TOOLCALL>"], &["</TOOLCALL>"], Trigger::Json),
                "mistral" => (&["[TOOL_CALLS]"], &["[/TOOL_CALLS]"], Trigger::Json),
                "llama3_json" => (&["<|python_tag|>"], &[], Trigger::Json),
                "phi4" => (&["functools"], &[], Trigger::Json),
                "pythonic" => (&[], &[], Trigger::Pythonic),
                // A bare `<function=` opens a call too (live-checked).
                "qwen3_coder" => (
                    &["<tool_call>", "<function="],
                    &["</tool_call>"],
                    Trigger::Marker,
                ),
                // Dynamo's singular section markers count too (live-checked:
                // `<|tool_call_s` is held as a marker prefix).
                "kimi_k2" => (
                    &[
                        "<|tool_calls_section_begin|>",
                        "<|tool_call_begin|>",
                        "<|tool_call_section_begin|>",
                    ],
                    &["<|tool_calls_section_end|>", "<|tool_call_section_end|>"],
                    Trigger::Marker,
                ),
                "harmony" => (
                    &[
                        "<|start|>assistant<|channel|>commentary",
                        "<|channel|>commentary",
                    ],
                    &[harmony_whole::CALL],
                    Trigger::Harmony,
                ),
                "deepseek_v3" => (
                    &["<｜tool▁calls▁begin｜>"],
                    &["<｜tool▁calls▁end｜>"],
                    Trigger::Marker,
                ),
                "deepseek_v3_1" => (
                    &["<｜tool▁calls▁begin｜>"],
                    &["<｜tool▁calls▁end｜>"],
                    Trigger::TrimmedMarker,
                ),
                _ => (markers, &[], Trigger::Marker),
            };
        Self {
            starts,
            ends,
            trigger,
            forced_as_auto: name == "kimi_k2",
            content_before_start: matches!(
                name,
                "kimi_k2" | "deepseek_v3_1" | "llama3_json" | "qwen3_coder"
            ),
            ends_on_calls: ends.is_empty() || name == "default",
            hermes_whole: name == "hermes",
            kimi_whole: name == "kimi_k2",
            dsv31_whole: name == "deepseek_v3_1",
            default_whole: name == "default",
            basic_marker: match name {
                "llama3_json" => Some("<|python_tag|>"),
                _ => None,
            },
            mistral: name == "mistral",
            first_value_pieces: name == "llama3_json",
            unclosed_kept_without: match name {
                "qwen3_coder" => &[QWEN3_FUNCTION, "<parameter="],
                _ => &[],
            },
            bare_opener: (name == "qwen3_coder").then_some(("<function=", "<tool_call>")),
            unique_keys: name == "qwen3_coder",
        }
    }

    /// Whether a forced tool choice (`required`, named) runs this family's usual
    /// jail rather than holding the whole answer (kimi_k2, live-checked).
    pub fn jails_forced_choice_as_auto(&self) -> bool {
        self.forced_as_auto
    }

    /// Whether JSON after a start marker holds a call object with neither
    /// `arguments` nor `parameters`: the reference reads no call from it
    /// (`<|python_tag|>{"name":"t"}`), where the standalone parsers read `{}`.
    fn call_without_arguments(&self, text: &str) -> bool {
        let lacks = |v: &serde_json::Value| {
            v.as_object()
                .is_some_and(|o| !o.contains_key("arguments") && !o.contains_key("parameters"))
        };
        self.starts.iter().any(|m| {
            text.split(m).skip(1).any(|after| {
                let mut values = serde_json::Deserializer::from_str(after.trim_start()).into_iter();
                match values.next() {
                    Some(Ok(serde_json::Value::Array(items))) => items.iter().any(lacks),
                    Some(Ok(value)) => lacks(&value),
                    _ => false,
                }
            })
        })
    }

    /// Whether some piece after a start marker lets the jail end (see `piece_closes`;
    /// `<|python_tag|>{…}{"` ends on the first object).
    fn marked_json_closes(&self, text: &str) -> bool {
        self.starts
            .iter()
            .any(|m| text.split(m).skip(1).any(|piece| self.piece_closes(piece)))
    }

    /// Whether a piece after a start marker lets the jail end: llama3_json's once
    /// a value in it closed, JSON or not (see `json_boundary_closes`); else once
    /// it reads as JSON.
    fn piece_closes(&self, piece: &str) -> bool {
        if self.first_value_pieces {
            json_boundary_closes(piece)
        } else {
            self.piece_reads(piece)
        }
    }

    /// Whether a piece around a start marker reads as JSON (see `first_value_pieces`).
    fn piece_reads(&self, piece: &str) -> bool {
        if self.first_value_pieces {
            // A piece opening with `[` reads only when, cut at its last `]`, it is
            // one list with elements (live-checked, seed 20261219 #1429:
            // `[{A}]]weather()\n<|python_tag|>{"name":"g","paramete` is dropped).
            match cut_json_piece(piece).filter(|cut| cut.starts_with('[')) {
                Some(list) => serde_json::from_str::<Vec<&RawValue>>(list)
                    .is_ok_and(|items| !items.is_empty()),
                None => default_whole::piece_value(piece).is_some(),
            }
        } else {
            json_piece_parses(piece)
        }
    }

    /// Whether the parse of marked text without calls says the text before the
    /// first marker: some piece around a marker reads as JSON (see
    /// `marked_json_closes`), and that text is not blank. Otherwise the parser
    /// says nothing and the held text is dropped.
    fn says_text_before(&self, text: &str) -> bool {
        self.first_start(text)
            .is_some_and(|at| !text[..at].trim().is_empty())
            && self
                .starts
                .iter()
                .any(|m| text.split(m).any(|piece| self.piece_reads(piece)))
    }

    /// The family's start heuristic (the reference's `detect_tool_call_start`).
    fn detects_start(&self, text: &str) -> bool {
        match self.trigger {
            Trigger::Json => {
                let text = text.trim();
                !text.is_empty()
                    && (text.contains(['{', '['])
                        || self.starts.iter().any(|m| {
                            text.contains(m)
                                || prefixes(m).any(|p| {
                                    text == p
                                        || (p.len() >= 3 && text.contains(p))
                                        || text.ends_with(p)
                                })
                        }))
            }
            Trigger::Marker => self.marker_or_prefix_ends(text),
            // The marker prefix is looked for at the end of the trimmed text
            // (live-checked: a held `<|start|>` then `  ` opens the jail).
            Trigger::Harmony => {
                self.marker_or_prefix_ends(text.trim_end())
                    || text.contains(harmony_whole::CHANNEL)
                    || text.contains(harmony_whole::CALL)
            }
            Trigger::TrimmedMarker => {
                let text = text.trim();
                self.marker_or_prefix_ends(text) || text.contains(dsv31_whole::BARE_CALL)
            }
            Trigger::Pythonic => text.trim().contains('['),
        }
    }

    /// A start marker anywhere, or a prefix of one ending `text`.
    fn marker_or_prefix_ends(&self, text: &str) -> bool {
        self.starts
            .iter()
            .any(|m| text.contains(m) || prefixes(m).any(|p| text.ends_with(p)))
    }

    /// Where the first of the family's start markers begins in `text`.
    fn first_start(&self, text: &str) -> Option<usize> {
        self.starts.iter().filter_map(|m| text.find(m)).min()
    }

    /// Whether `text` holds a complete start marker.
    fn has_start(&self, text: &str) -> bool {
        self.starts.iter().any(|m| text.contains(m))
    }

    /// What the reference's marker matcher looks for: the start markers, or, for a
    /// family without any, a placeholder meant never to match (whose prefixes, `_`
    /// and `__`, still hold text back).
    fn patterns(&self) -> &'static [&'static str] {
        if self.starts.is_empty() {
            &["__NEVER_MATCH__"]
        } else {
            self.starts
        }
    }

    /// Where the leftmost start pattern begins, and its length.
    fn find_start(&self, text: &str) -> Option<(usize, usize)> {
        self.patterns()
            .iter()
            .filter_map(|m| text.find(m).map(|at| (at, m.len())))
            .min_by_key(|&(at, _)| at)
    }

    /// The earliest suffix of `text` that is a proper prefix of a start pattern.
    /// Harmony: a text whose last non-space is `<` or `<|` holds that tail (spaces
    /// after it too) for the next piece, as a marker prefix would be
    /// (live-checked: `<\n` at the end goes out with the finish reason).
    fn harmony_open_tail(&self, text: &str) -> Option<usize> {
        if self.trigger != Trigger::Harmony {
            return None;
        }
        let trimmed = text.trim_end();
        ["<|", "<"]
            .into_iter()
            .find(|short| trimmed.ends_with(short))
            .and_then(|short| text.rfind(short))
    }

    /// Harmony: text before a held marker prefix that holds `<|channel|>` is not
    /// let out; the jail opens on the whole text instead (live-checked: a held
    /// `<|channel|>` then `<|start|>` is jailed whole, while a held `<|start|>`
    /// then `<|channel|>` lets `<|start|>` out).
    fn harmony_opens_before(&self, passed: &str) -> bool {
        self.trigger == Trigger::Harmony && passed.contains(harmony_whole::CHANNEL)
    }

    fn partial_suffix(&self, text: &str) -> Option<usize> {
        text.char_indices().map(|(i, _)| i).find(|&i| {
            let tail = &text[i..];
            self.patterns()
                .iter()
                .any(|m| m.len() > tail.len() && m.starts_with(tail))
        })
    }
}

/// A piece of text around a start marker, read as Dynamo reads it: one that opens
/// with `{` (`[`) is cut at its last `}` (`]`) and counts when that is JSON.
fn json_piece_parses(piece: &str) -> bool {
    cut_json_piece(piece)
        .is_some_and(|json| serde_json::from_str::<serde_json::Value>(json).is_ok())
}

/// The non-empty proper prefixes of a marker, on char boundaries.
fn prefixes(marker: &str) -> impl Iterator<Item = &str> {
    marker
        .char_indices()
        .skip(1)
        .map(move |(i, _)| &marker[..i])
}

/// What the jail lets out of one piece, in the order the reference sends it.
#[derive(Debug, Default)]
pub struct Released {
    /// The held text, parsed: calls (with the text around them), or, with no
    /// calls, the held text as it was (nothing if it had a start marker). More
    /// than one when text after a jail's end opens and ends another.
    pub parsed: Vec<Parsed>,
    /// Text after the end of the jail, in the same piece, that passed the jail
    /// again (a start marker or its prefix in it is held as in any piece).
    pub trailing: String,
    /// Text that never entered the jail.
    pub passed: String,
}

#[derive(Debug)]
pub struct Parsed {
    pub calls: Vec<ToolCall>,
    pub content: String,
}

/// One choice's jail.
pub struct ToolJail {
    rules: JailRules,
    /// The tool stage alone, to parse held text whole.
    tools: ChatParserSpec,
    jailed: bool,
    held: String,
    /// A start-marker prefix that ended the last piece.
    partial: String,
    /// Held text waits for the end of output (no end marker, no calls end it).
    to_end: bool,
    /// The mistral jail's completion state.
    mistral: MistralEnd,
    /// The `default` jail's scan for closed JSON values.
    json_end: JsonBoundary,
}

impl ToolJail {
    pub fn new(rules: JailRules, spec: &ChatParserSpec) -> Self {
        Self {
            rules,
            tools: ChatParserSpec {
                reasoning: None,
                stream_arguments: false,
                ..spec.clone()
            },
            jailed: false,
            held: String::new(),
            partial: String::new(),
            to_end: false,
            mistral: MistralEnd::default(),
            json_end: JsonBoundary::default(),
        }
    }

    /// The jail after a forced tool choice's guided JSON: Dynamo holds what it jails
    /// there to the end of output and parses it whole (live-checked, hermes: text
    /// after a `<tool_call>` block is dropped).
    pub fn holding_to_end(self) -> Self {
        Self {
            to_end: true,
            ..self
        }
    }

    /// Dynamo's jail sees no frame but the last whose content the harmony
    /// reasoning parser emptied (live-checked: a `<|call|>` held before such
    /// frames is released only by the last one, with the finish reason).
    pub fn skips_emptied_frames(&self) -> bool {
        self.rules.trigger == Trigger::Harmony
    }

    /// Text is held, jailed or as a marker prefix (a finish reason waits for it).
    pub fn is_holding(&self) -> bool {
        self.jailed || !self.partial.is_empty()
    }

    /// The text held since the jail opened (none while free).
    pub fn held_text(&self) -> Option<&str> {
        self.jailed.then_some(self.held.as_str())
    }

    /// Harmony's last frame, when it brings no text: when the held text read
    /// whole makes no call, the reference releases it whole at the end of output,
    /// no end marker looked for (live-checked: a held `<|call|>\n` says `""`, its
    /// `\n` no trailing text). A last frame with text ends the jail as any frame
    /// does (seed 20261242 #1550: a held `<|call|>` then a stop string's `a` says
    /// `a`; ` ` says ` `). False, and nothing taken, otherwise.
    pub fn hold_uncalled(&mut self, piece: &str) -> bool {
        if !self.jailed
            || self.to_end
            || self.rules.trigger != Trigger::Harmony
            || !piece.is_empty()
        {
            return false;
        }
        let text = format!("{}{piece}", self.held);
        if !parse_whole_harmony(&text).calls.is_empty() {
            return false;
        }
        self.held = text;
        true
    }

    /// Stop holding: the held text goes to the caller.
    pub fn take_held(&mut self) -> String {
        self.jailed = false;
        std::mem::take(&mut self.held)
    }

    /// Take one piece of content.
    pub fn feed(&mut self, piece: &str, out: &mut Released) {
        if self.jailed {
            self.held.push_str(piece);
            if !self.to_end {
                self.try_end(out);
            }
        } else {
            self.feed_free(piece, out, false);
        }
    }

    /// A piece while nothing is jailed. Text after a jail's end comes back here
    /// (`after_end`): the reference matches markers in it again, so `</tool_call><`
    /// holds its `<` for the next piece (live-checked); what passes goes to
    /// `trailing` then.
    fn feed_free(&mut self, piece: &str, out: &mut Released, after_end: bool) {
        let combined = std::mem::take(&mut self.partial) + piece;
        let passed = if after_end {
            &mut out.trailing
        } else {
            &mut out.passed
        };
        if let Some((at, _)) = self.rules.find_start(&combined) {
            // Harmony: text before the marker that holds `<|channel|>` is jailed
            // with it (Dynamo's jail, complete-marker path; seed 20261215 #1).
            let at = if self.rules.harmony_opens_before(&combined[..at]) {
                0
            } else {
                at
            };
            passed.push_str(&combined[..at]);
            self.held = combined[at..].to_owned();
            self.jailed = true;
            self.mistral = MistralEnd::default();
            self.json_end = JsonBoundary::default();
            // Dynamo checks a jail's end on the piece a marker opens it, but not
            // on text after a jail's end that opens another (its trailing-text
            // path; followed for `default`).
            let unchecked = after_end && self.rules.default_whole;
            if !self.to_end && !unchecked {
                self.try_end(out);
            }
        } else if let Some(at) = match self.rules.partial_suffix(&combined) {
            Some(at) => Some(at).filter(|&at| !self.rules.harmony_opens_before(&combined[..at])),
            // Harmony's open tail (`<` then a space) lets the text before it out,
            // `<|channel|>` in it or not (Dynamo splits it off before looking for
            // a start; live-checked: a held `<|channel|>` then `< ` + `/` sends
            // `<|channel|>`, then `< /`; seed 20261222 #876).
            None => self.rules.harmony_open_tail(&combined),
        } {
            passed.push_str(&combined[..at]);
            self.partial = combined[at..].to_owned();
        } else if self.rules.detects_start(&combined) {
            self.held = combined;
            self.jailed = true;
            self.mistral = MistralEnd::default();
            self.json_end = JsonBoundary::default();
        } else {
            passed.push_str(&combined);
        }
    }

    /// End of output: the held text, parsed, if any.
    pub fn finish(&mut self) -> Option<Parsed> {
        let partial = std::mem::take(&mut self.partial);
        let held = if std::mem::take(&mut self.jailed) {
            std::mem::take(&mut self.held)
        } else if self.rules.trigger == Trigger::Harmony && !partial.is_empty() {
            // Harmony: a marker prefix held at the end goes out as written.
            return Some(Parsed {
                calls: Vec::new(),
                content: partial,
            });
        } else {
            partial
        };
        if held.is_empty() {
            return None;
        }
        if self.to_end && self.rules.default_whole {
            // After guided JSON, Dynamo's forced-choice finalize reads what it held
            // (no repair; calls say no content; live-checked: `<TOOLCALL>[{A},
            // {"name":"` after a guided list stays text).
            let calls = default_whole::forced_calls(&held);
            return Some(calls_or_text(calls, held));
        }
        if self.to_end && self.rules.mistral {
            // After guided JSON, Dynamo's forced-choice finalize reads what it held
            // as the held answer (live-checked: `[TOOL_CALLS][{A}, {B}][ARGS]x` after
            // a named object is no call, the text as written).
            let calls = basic_whole::paired_as_written(&held)
                .or_else(|| basic_whole::marked_as_written(&held, "[TOOL_CALLS]"))
                .unwrap_or_else(|| basic_whole::parse_whole(&held, "[TOOL_CALLS]", false).calls);
            return Some(calls_or_text(calls, held));
        }
        if self.to_end && (self.rules.bare_opener.is_some() || self.rules.dsv31_whole) {
            // After guided JSON, Dynamo's forced-choice finalize reads qwen3_coder's
            // and deepseek_v3_1's held text as bare JSON first (live-checked: two
            // closed blocks and then `[{A}]` after a guided list is the call A).
            let calls = default_whole::bare_calls(&held);
            if !calls.is_empty() {
                return Some(calls_or_text(calls, held));
            }
        }
        // Then qwen3_coder's closed blocks only give calls: the text after the last
        // `</tool_call>` is not read, and without one the held text goes out as
        // written (seed 20261228 #3215: `<tool_call>\n<function=get_weather>👋`, a
        // function closed in a block that is not, or such a block after a closed
        // one, after a named object or a `required` list).
        let read = match held.rfind(QWEN3_CLOSE) {
            _ if !self.to_end || self.rules.bare_opener.is_none() => held.len(),
            Some(at) => at + QWEN3_CLOSE.len(),
            None => return Some(calls_or_text(Vec::new(), held)),
        };
        // After guided JSON, Dynamo's forced-choice finalize reads hermes' held text
        // without closing cut JSON (live-checked: `}{"name":"` stays text),
        // qwen3_coder's without its end-of-output reading (a bare function without
        // both end tags is text: `<function=get_weather>👋` after a named object),
        // and deepseek_v3_1's by its mid-stream parse, a section counting closed
        // only (a section whose second call is cut at `<｜` goes out as text, its
        // whole first call with it).
        let reading = if self.to_end
            && (self.rules.hermes_whole
                || self.rules.bare_opener.is_some()
                || self.rules.dsv31_whole)
        {
            Reading::Streaming
        } else {
            Reading::End
        };
        let mut parsed = self.parse_at(&held[..read], reading);
        if self.to_end && parsed.calls.is_empty() && self.rules.trigger == Trigger::Pythonic {
            // After guided JSON Dynamo reads held text as the forced choice's answer:
            // its basic JSON parse too (live-checked, pythonic: a JSON list of calls
            // after a named choice's object is a call).
            let calls = basic_whole::parse_whole(&held, "<|python_start|>", false).calls;
            if !calls.is_empty() {
                parsed = Parsed {
                    calls: numbered(calls),
                    content: String::new(),
                };
            }
        }
        if self.to_end && parsed.calls.is_empty() && self.rules.hermes_whole {
            // As in the held answer, blocks that give no call leave hermes' bare JSON
            // reading (live-checked: `<tool_call>{A}` whose `"</tool_call>"` stands
            // in a string is A after a named object).
            let bare = held
                .find(['{', '['])
                .filter(|&at| !held[at..].contains("<tool_call>"));
            if let Some(at) = bare {
                let calls = hermes_whole::parse_whole(&held[at..], hermes_whole::Repair::Never);
                parsed.calls = numbered(calls.calls);
            }
        }
        if self.to_end && !parsed.calls.is_empty() && self.rules.basic_marker.is_some() {
            // After guided JSON, held text with calls says only them (live-checked,
            // llama3_json: `[{A}][{B}]<|python_tag|>{C}` after a named object is C
            // and no content).
            parsed.content.clear();
        }
        if self.to_end && parsed.calls.is_empty() {
            // After guided JSON, held text without a call goes out as written, a
            // closed block too (live-checked, hermes and qwen3_coder).
            return Some(Parsed {
                calls: Vec::new(),
                content: held,
            });
        }
        if self.to_end && self.rules.hermes_whole {
            // Dynamo's forced-choice finalize says no text beside the calls it
            // found (live-checked, hermes: `<tooé` + a call object says only the call).
            parsed.content.clear();
        }
        Some(parsed)
    }

    /// The jail ends at the first end marker or, where the family allows it (see
    /// `ends_on_calls`) or no start marker opened it (JSON a start guess jailed),
    /// where a whole parse finds calls.
    fn try_end(&mut self, out: &mut Released) {
        // mistral and `default` end at Dynamo's JSON-boundary completion.
        if self.rules.mistral || self.rules.default_whole {
            let completion = if self.rules.mistral {
                self.mistral_completion()
            } else {
                self.default_completion()
            };
            if let Some((end, parsed)) = completion {
                self.end_at(end, parsed, out);
            }
            return;
        }
        let find_end = |ends: &[&str]| {
            ends.iter()
                .find_map(|m| self.held.find(m).map(|at| at + m.len()))
        };
        let end = if self.rules.dsv31_whole {
            self.dsv31_end()
        } else {
            find_end(self.rules.ends)
        };
        let end = match end {
            // qwen3_coder's end marker ends the jail as Dynamo's completion decides.
            Some(marker_end) if self.rules.bare_opener.is_some() => {
                let Some((end, parsed)) = self.qwen3_completion(marker_end) else {
                    return;
                };
                self.end_at(end, parsed, out);
                return;
            }
            Some(end) => end,
            None if (self.rules.ends_on_calls || !self.rules.has_start(&self.held))
                && self.could_be_whole()
                && !self.parse(&self.held).calls.is_empty() =>
            {
                self.held.len()
            }
            None => return,
        };
        let parsed = self.parse(&self.held[..end]);
        self.end_at(end, parsed, out);
    }

    /// Ends the jail at `end` of the held text with its parse; what follows is
    /// free text again.
    fn end_at(&mut self, end: usize, parsed: Parsed, out: &mut Released) {
        let held = self.take_held();
        out.parsed.push(parsed);
        if end < held.len() {
            self.feed_free(&held[end..], out, true);
        }
    }

    /// Whether Dynamo's qwen3_coder jail ends now that its end marker arrived
    /// (ending at `marker_end`), where, and what it releases: held text whose
    /// whole parse finds no call ends at the marker; else the jail ends at the
    /// parser's end position ([`qwen3_end_position`]), where the text up to it
    /// must parse to calls again, or holds on to the end of output (live-checked:
    /// `<function=f</function>x"</tool_call>y` holds, a call with nothing after it).
    fn qwen3_completion(&self, marker_end: usize) -> Option<(usize, Parsed)> {
        let parsed = self.parse(&self.held);
        // A cut at the held text's end reads what the whole parse read.
        let whole = |end: usize| end == self.held.len();
        if parsed.calls.is_empty() {
            if whole(marker_end) {
                return Some((marker_end, parsed));
            }
            return Some((marker_end, self.parse(&self.held[..marker_end])));
        }
        let end = qwen3_end_position(&self.held);
        if whole(end) {
            return Some((end, parsed));
        }
        let again = self.parse(&self.held[..end]);
        (!again.calls.is_empty()).then_some((end, again))
    }

    /// Where Dynamo's deepseek_v3_1 jail ends, if it does now: once the held text
    /// parses to calls, at the parser's end position (the section's end, else past
    /// the bare calls that follow one another), where the text up to it must parse
    /// to calls again; or at a `<｜tool▁calls▁end｜>` after text without calls.
    fn dsv31_end(&self) -> Option<usize> {
        let held = self.held.as_str();
        if self.parse(held).calls.is_empty() {
            return self
                .rules
                .ends
                .iter()
                .find_map(|m| held.find(m).map(|at| at + m.len()));
        }
        let end = dsv31_whole::end_position(held);
        (end == held.len() || !self.parse(&held[..end]).calls.is_empty()).then_some(end)
    }

    /// Whether Dynamo's `default` jail is complete now, where it ends and what
    /// it releases: at a `</TOOLCALL>`, the whole held text is parsed (no call:
    /// the jail ends after the marker and releases the parse of the text up to
    /// it); else only once a top-level JSON value closed (counted from the newest
    /// start marker; live-checked: `{…}<|python_tag|>son {"cs", 1}` ends where
    /// the `}` closes, with the first object's call), when the whole held text
    /// parses to calls.
    fn default_completion(&mut self) -> Option<(usize, Parsed)> {
        if let Some(at) = self.held.find(DEFAULT_END) {
            let parsed = self.parse(&self.held);
            if parsed.calls.is_empty() {
                let end = at + DEFAULT_END.len();
                return Some((end, self.parse(&self.held[..end])));
            }
            return self.default_complete(parsed);
        }
        if !self.json_end.new_end(&self.held, self.rules.starts) {
            return None;
        }
        let parsed = self.parse(&self.held);
        if parsed.calls.is_empty() {
            return None;
        }
        self.default_complete(parsed)
    }

    /// Calls the `default` parse found: the jail ends after the first
    /// `</TOOLCALL>` and the `<TOOLCALL>…</TOOLCALL>` blocks right after it, else
    /// at the end of the held text; a cut before the end must parse to calls
    /// again (else the jail holds on).
    fn default_complete(&self, parsed: Parsed) -> Option<(usize, Parsed)> {
        let end = default_end_position(&self.held);
        if end == self.held.len() {
            return Some((end, parsed));
        }
        let again = self.parse(&self.held[..end]);
        (!again.calls.is_empty()).then_some((end, again))
    }

    /// Whether Dynamo's mistral jail is complete now, where it ends and what it
    /// releases (see [`MistralEnd`]).
    fn mistral_completion(&mut self) -> Option<(usize, Parsed)> {
        if let Some(parsed) = self.mistral.pending.take() {
            match self.mistral_complete(parsed) {
                Completion::Done(end, parsed) => return Some((end, parsed)),
                Completion::Pending(parsed) => self.mistral.pending = Some(parsed),
                Completion::Invalid => {}
            }
        }
        let mut from = self
            .mistral
            .end_from
            .min(self.held.len())
            .saturating_sub(MISTRAL_END.len() - 1);
        while !self.held.is_char_boundary(from) {
            from -= 1;
        }
        match self.held[from..].find(MISTRAL_END) {
            Some(at) => {
                let end = from + at + MISTRAL_END.len();
                let parsed = self.parse(&self.held);
                if parsed.calls.is_empty() {
                    return Some((end, self.parse(&self.held[..end])));
                }
                match self.mistral_complete(parsed) {
                    Completion::Done(end, parsed) => return Some((end, parsed)),
                    Completion::Pending(parsed) => {
                        self.mistral.pending = Some(parsed);
                        self.mistral.end_from = self.held.len();
                    }
                    Completion::Invalid => {}
                }
                return None;
            }
            None => self.mistral.end_from = self.held.len(),
        }
        if self.mistral.scan.new_end(&self.held, &[MISTRAL_START]) {
            let parsed = self.parse(&self.held);
            if !parsed.calls.is_empty() {
                match self.mistral_complete(parsed) {
                    Completion::Done(end, parsed) => return Some((end, parsed)),
                    Completion::Pending(parsed) => self.mistral.pending = Some(parsed),
                    Completion::Invalid => {}
                }
            }
        }
        None
    }

    /// Calls a streaming parse found: the jail ends where the reference puts
    /// its end (a cut before the end must parse to calls again), or waits.
    fn mistral_complete(&self, parsed: Parsed) -> Completion {
        match mistral_end_position(&self.held) {
            None => Completion::Pending(parsed),
            Some(end) if end < self.held.len() => {
                let again = self.parse(&self.held[..end]);
                if again.calls.is_empty() {
                    Completion::Invalid
                } else {
                    Completion::Done(end, again)
                }
            }
            Some(end) => Completion::Done(end, parsed),
        }
    }

    /// Bare JSON (no start marker) is read from its first `{` or `[` to the end of
    /// the held text: a value followed by more text is no call in the reference.
    fn bare_json_with_trailing_text(&self, text: &str) -> bool {
        if self.rules.starts.iter().any(|m| text.contains(m)) {
            return false;
        }
        let text = text.trim();
        let Some(at) = text.find(['{', '[']) else {
            return false;
        };
        let json = &text[at..];
        matches!(JsonScanner::new().feed(json.as_bytes()), Scanned::Done(n) if n < json.len())
    }

    /// The reference's whole parse is strict: JSON and Python lists parse only once
    /// every bracket they opened is closed; JSON after a start marker is read as
    /// Dynamo reads it (`{x <|python_tag|>{…}`: the JSON after the marker counts).
    fn could_be_whole(&self) -> bool {
        match (self.rules.trigger, self.rules.first_start(&self.held)) {
            // Dynamo's pythonic parser finds the first whole call list in the
            // text: `[f()][g(` reads `[f()]` and ends the jail.
            (
                Trigger::Marker | Trigger::TrimmedMarker | Trigger::Harmony | Trigger::Pythonic,
                _,
            ) => true,
            (Trigger::Json, Some(_)) => self.rules.marked_json_closes(&self.held),
            (_, from) => brackets_closed(&self.held[from.unwrap_or(0)..]),
        }
    }

    /// The family's start markers.
    pub fn start_markers(&self) -> &'static [&'static str] {
        self.rules.starts
    }

    /// Whether a forced tool choice runs this jail as under `auto` (kimi_k2).
    pub fn jails_forced_choice_as_auto(&self) -> bool {
        self.rules.forced_as_auto
    }

    /// Dynamo's unary aggregator reads an answer again whole (qwen3_coder): the
    /// calls the jail's parse finds, and the text before the first start marker
    /// as written, whether calls were found or not (live-checked: `fine<tool_call> `
    /// says `fine`, `ok <tool_call><function=f>` says `ok `).
    pub fn reread(&self, text: &str) -> Option<Parsed> {
        let at = self.rules.first_start(text)?;
        if self.rules.kimi_whole {
            // kimi_k2's parse, its content as a release with calls says it.
            return Some(self.parse_kimi(text));
        }
        if self.rules.mistral {
            // mistral's end-of-output parse says the text before the marker,
            // trailing space kept (live-checked: `ok [TOx[TOOL_CALLS]f[ARGS]{}`
            // cut by length says `ok [TOx`).
            let (calls, content) = basic_whole::parse_mistral(text, true);
            return Some(Parsed {
                calls: numbered(calls),
                content,
            });
        }
        // `default` reads as at the end of output (live-checked, seed 20261210
        // #4980: `{A}; {B}<TOOLCALL>[{C}, {"n` cut by length is no call, `{A}; {B}`),
        // and so does qwen3_coder (seed 20261232 #4075: a bare `<function=x>` before
        // an open block is a call of its own beside the block's).
        let reading = if self.rules.default_whole || self.rules.bare_opener.is_some() {
            Reading::End
        } else {
            Reading::Streaming
        };
        // qwen3_coder: a bare `<function=` before the first block that reads as no
        // call is text said with the rest (live-checked: `x<function=👩ok<tool_call>…`
        // says `x<function=👩ok`, `x<function=g>ok<tool_call>…` says `x`).
        let at = match self.rules.bare_opener {
            Some((_, opener)) => match text.find(opener) {
                Some(open) if open > at && !self.bare_gap_call(&text[..open], true) => open,
                _ => at,
            },
            None => at,
        };
        Some(Parsed {
            calls: self.parse_at(text, reading).calls,
            content: text[..at].to_owned(),
        })
    }

    fn parse(&self, text: &str) -> Parsed {
        self.parse_at(text, Reading::Streaming)
    }

    /// The whole parse of held text; `reading` says whether output is over
    /// (families whose parser reads more then).
    fn parse_at(&self, text: &str, reading: Reading) -> Parsed {
        if self.rules.mistral {
            return parse_mistral(text, reading);
        }
        if self.rules.default_whole {
            return parse_default(text, reading);
        }
        if self.rules.trigger == Trigger::Pythonic {
            return parse_pythonic(text);
        }
        if self.rules.kimi_whole {
            return self.parse_kimi(text);
        }
        if self.rules.dsv31_whole {
            return parse_dsv31(text, reading);
        }
        if self.rules.trigger == Trigger::Harmony {
            return parse_harmony(text);
        }
        if self.rules.hermes_whole {
            // JSON is closed only where the output cut it (live-checked: a guessed
            // jail's `{"name":"f","arguments":{"a": "` + `</tool_call>` is no call).
            let repair = match reading {
                Reading::Streaming => hermes_whole::Repair::Never,
                Reading::End => hermes_whole::Repair::Unclosed,
            };
            let parse = hermes_whole::parse_whole(text, repair);
            if parse.calls.is_empty() {
                // Held text with a start marker and no call says the text before
                // the marker, its trailing whitespace dropped (live-checked: a
                // guessed jail's `{x<tool_call>y` releases `{x`, ` {x ` + `<tool_call>`
                // releases ` {x`, `<  <tool_call>` releases `<`).
                if let Some(at) = self.rules.first_start(text) {
                    let content = if hermes_whole::lone_empty_block(text) {
                        String::new()
                    } else {
                        text[..at].trim_end().to_owned()
                    };
                    return Parsed {
                        calls: Vec::new(),
                        content,
                    };
                }
                // The end marker that ended a guessed jail is not said, and the
                // text is trimmed (live-checked: `{"a":"` + `</tool_call>` releases
                // `{"a":"`, ` [1]\n` + `</tool_call>` releases `[1]`).
                let mut parsed = self.no_calls(text);
                if self
                    .rules
                    .ends
                    .iter()
                    .any(|end| parsed.content.contains(end))
                {
                    for end in self.rules.ends {
                        parsed.content = parsed.content.replace(end, "");
                    }
                    parsed.content = parsed.content.trim().to_owned();
                }
                return parsed;
            }
            return Parsed {
                calls: numbered(parse.calls),
                content: parse.content,
            };
        }
        if let Some(marker) = self.rules.basic_marker {
            return self.parse_basic(text, marker);
        }
        // The reference trims the held text before parsing it (a string cut by the
        // end of output loses its trailing spaces before it is closed).
        let whole = text.trim_end();
        let opened;
        // A bare `<function=` is read as a block only where no `<tool_call>` follows
        // (live-checked: `<function=x<tool_call>…</tool_call>` is the block's call,
        // `<function=x` its content).
        let opener_in_text = self
            .rules
            .bare_opener
            .is_some_and(|(_, opener)| whole.contains(opener));
        let whole = match self.rules.bare_opener {
            Some((bare, opener)) if !opener_in_text => match self.rules.find_start(whole) {
                Some((at, _)) if whole[at..].starts_with(bare) => {
                    opened = format!("{opener}{}", &whole[at..]);
                    opened.as_str()
                }
                _ => whole,
            },
            _ => whole,
        };
        let (mut message, _) = parse_with(whole, &self.tools);
        // Before the end of output Dynamo reads bare functions only once both end
        // tags are there (live-checked: `<function=g></tool_call>` is text).
        let bare_cut = self.rules.bare_opener.is_some()
            && !opener_in_text
            && reading == Reading::Streaming
            && !(whole.contains(QWEN3_FUNCTION_END) && whole.contains(QWEN3_CLOSE));
        if bare_cut {
            message.tool_calls.clear();
        }
        let eof = reading == Reading::End;
        // A bare function in the text around the blocks is a call of its own in
        // Dynamo's reading, before the blocks' calls (live-checked:
        // `<function=|><tool_call><function=a>` at the end is `|` and `a`).
        let bare_gap = opener_in_text && self.bare_gap_call(text.trim_end(), eof);
        if (message.tool_calls.is_empty() || bare_gap) && self.rules.bare_opener.is_some() {
            if let Some(parsed) = self.xml_recovery(text.trim_end(), eof) {
                return parsed;
            }
        }
        if message.tool_calls.is_empty()
            || (self.rules.trigger == Trigger::Json && self.bare_json_with_trailing_text(text))
            || (self.rules.trigger == Trigger::Json && self.rules.call_without_arguments(text))
        {
            return self.no_calls(text);
        }
        // The reference's parsers trim the text around calls; kimi_k2's and
        // deepseek_v3_1's keep only the text before the first start marker.
        let start = match self.rules.bare_opener {
            Some((_, opener)) if opener_in_text => text.find(opener),
            _ => self.rules.first_start(text),
        };
        let content = match start {
            // The text before a `<tool_call>` after a bare `<function=` is said as
            // written (live-checked: `<function=x ` + `<tool_call>…`).
            Some(at) if opener_in_text => &text[..at],
            Some(at) if self.rules.content_before_start => text[..at].trim(),
            _ => message.content.trim(),
        };
        let mut calls = message.tool_calls;
        if self.rules.unique_keys {
            for call in &mut calls {
                if let Some(arguments) = last_value_per_key(&call.arguments) {
                    call.arguments = arguments;
                }
            }
        }
        Parsed {
            calls,
            content: content.to_owned(),
        }
    }

    /// A qwen3_coder answer without calls read again whole by Dynamo's own reading
    /// (`eof`: as at the end of output, as its unary aggregator does; live-checked:
    /// `ok <function=</tool_call> yes` streams as text, its unary answer is the
    /// call `</tool_call`, content `ok `).
    pub fn recovered(&self, text: &str, eof: bool) -> Option<Parsed> {
        self.rules.bare_opener?;
        self.xml_recovery(text.trim_end(), eof)
    }

    /// Dynamo 1.6.1's own qwen3_coder reading where the tag machine finds no call:
    /// a `<function=` outside a `<tool_call>` block (before the first one, or with
    /// none at all) is read up to its `</function>` once both end tags are in the
    /// text or the output is over (`eof`), a block not closed only at the end, and
    /// a function's name runs to the first `>` (live-checked: `<function=g><tool_call>`
    /// is the call `g`, `<function=a\n<b>` the call `a\n<b`).
    fn xml_recovery(&self, text: &str, eof: bool) -> Option<Parsed> {
        let mut calls = Vec::new();
        let mut content = String::new();
        let mut cursor = 0;
        while cursor < text.len() {
            let next = text[cursor..].find(QWEN3_OPEN).map(|at| cursor + at);
            let gap = &text[cursor..next.unwrap_or(text.len())];
            let inner = gap.find(QWEN3_FUNCTION).filter(|&at| {
                eof || (gap[at..].contains(QWEN3_FUNCTION_END) && gap[at..].contains(QWEN3_CLOSE))
            });
            let found = inner.map_or_else(Vec::new, |at| self.function_blocks(&gap[at..]));
            if calls.is_empty() {
                let said = if found.is_empty() {
                    gap.len()
                } else {
                    inner.unwrap_or(0)
                };
                content.push_str(&gap[..said]);
            }
            calls.extend(found);
            let Some(start) = next else { break };
            match text[start..].find(QWEN3_CLOSE) {
                Some(end) => {
                    let end = start + end + QWEN3_CLOSE.len();
                    calls.extend(self.function_blocks(&text[start..end]));
                    cursor = end;
                }
                None => {
                    let block = &text[start..];
                    let looks_like_call =
                        block.contains(QWEN3_FUNCTION) || block.contains("<parameter=");
                    if eof && looks_like_call {
                        calls.extend(self.function_blocks(block));
                    } else if calls.is_empty() && !looks_like_call {
                        content.push_str(block);
                    }
                    break;
                }
            }
        }
        if calls.is_empty() {
            return None;
        }
        Some(Parsed {
            calls: numbered(calls),
            content,
        })
    }

    /// Whether a `<function=` outside the `<tool_call>` blocks (before, between or
    /// after them) is a call in Dynamo's reading: at the end of output, or with
    /// both end tags after it in its stretch of text.
    fn bare_gap_call(&self, text: &str, eof: bool) -> bool {
        let mut cursor = 0;
        loop {
            let next = text[cursor..].find(QWEN3_OPEN).map(|at| cursor + at);
            let gap = &text[cursor..next.unwrap_or(text.len())];
            if let Some(at) = gap.find(QWEN3_FUNCTION) {
                let tail = &gap[at..];
                let closed = tail.contains(QWEN3_FUNCTION_END) && tail.contains(QWEN3_CLOSE);
                if (eof || closed) && !self.function_blocks(tail).is_empty() {
                    return true;
                }
            }
            let Some(start) = next else { return false };
            match text[start..].find(QWEN3_CLOSE) {
                Some(end) => cursor = start + end + QWEN3_CLOSE.len(),
                None => return false,
            }
        }
    }

    /// The `<function=NAME>BODY</function>` calls in `block` as Dynamo's pattern
    /// finds them: NAME up to the first `>` (trimmed, quotes dropped), BODY up to
    /// `</function>` or the end; a call cut inside its last parameter's value is
    /// dropped.
    fn function_blocks(&self, block: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut pos = 0;
        while let Some(at) = block[pos..].find(QWEN3_FUNCTION) {
            let head = pos + at + QWEN3_FUNCTION.len();
            let Some(gt) = block[head..].find('>') else {
                break;
            };
            if gt == 0 {
                pos += at + 1;
                continue;
            }
            let body_start = head + gt + 1;
            let (body, terminated) = match block[body_start..].find(QWEN3_FUNCTION_END) {
                Some(end) => {
                    pos = body_start + end + QWEN3_FUNCTION_END.len();
                    (&block[body_start..body_start + end], true)
                }
                None => {
                    pos = block.len();
                    (&block[body_start..], false)
                }
            };
            let name = strip_quotes(block[head..head + gt].trim());
            let cut = !terminated
                && body.rfind("<parameter=").is_some_and(|p| {
                    !body[p..].contains("</parameter>") && !body[p..].contains(QWEN3_CLOSE)
                });
            if name.is_empty() || cut {
                continue;
            }
            if let Some(arguments) = self.function_arguments(name, body) {
                out.push((name.to_owned(), arguments));
            }
        }
        out
    }

    /// A function body's parameters as the tag machine reads them in a block of
    /// its own (a name with markup in it is no declared tool: its values untyped).
    fn function_arguments(&self, name: &str, body: &str) -> Option<String> {
        if let Some((open, key)) = key_through_close(body) {
            // The tag machine reads that `</tool_call>` as the block's end; Dynamo's
            // pattern as the end of the name, its value empty (live-checked:
            // `<parameter=city{"tz":"</tool_call>` is `{"city{\"tz\":\"</tool_call":""}`).
            let before = self.function_arguments(name, &body[..open])?;
            let Some(key) = key else { return Some(before) };
            // The pairs read before it, then the key with its empty value (a key
            // seen before keeps its place and takes that value).
            let entries = serde_json::from_str::<Entries>(&before).ok()?.0;
            let pairs = entries.iter().map(|(k, v)| (k.as_str(), v.get()));
            return object_of(pairs.chain([(key, "\"\"")]));
        }
        if !body.contains("<parameter=") {
            return Some("{}".to_owned());
        }
        let label = if name.contains('<') { "_" } else { name };
        let block =
            format!("{QWEN3_OPEN}{QWEN3_FUNCTION}{label}>{body}{QWEN3_FUNCTION_END}{QWEN3_CLOSE}");
        let (message, _) = parse_with(&block, &self.tools);
        let [call] = <[ToolCall; 1]>::try_from(message.tool_calls).ok()?;
        Some(last_value_per_key(&call.arguments).unwrap_or(call.arguments))
    }

    /// Dynamo's basic JSON parse (llama3_json). Without calls: a bare list
    /// says the text before it (`[1]` goes out as nothing); marked text follows
    /// the family's rules (`no_calls`).
    fn parse_basic(&self, text: &str, marker: &str) -> Parsed {
        let parse = basic_whole::parse_whole(text, marker, true);
        if !parse.calls.is_empty() {
            let content = match self.rules.first_start(text) {
                Some(at) => text[..at].trim(),
                None => parse.content.as_deref().unwrap_or_default(),
            };
            return Parsed {
                calls: numbered(parse.calls),
                content: content.to_owned(),
            };
        }
        self.basic_no_calls(text, marker, parse.content)
    }

    /// Held text without calls after the basic parse said `content`.
    fn basic_no_calls(&self, text: &str, marker: &str, content: Option<String>) -> Parsed {
        match (text.find(marker), content) {
            (None, Some(content)) => Parsed {
                calls: Vec::new(),
                content,
            },
            _ => self.no_calls(text),
        }
    }

    /// kimi_k2's calls; a release with calls says only the text before the
    /// section marker, a `<|tool_call_begin|>` before it kept (live-checked:
    /// `<|tool_call_begin|>x<|tool_calls_section_begin|>…` says
    /// `<|tool_call_begin|>x`), else the text before the first start marker.
    fn parse_kimi(&self, text: &str) -> Parsed {
        let calls = kimi_whole::parse_whole(text);
        if calls.is_empty() {
            let says = kimi_whole::says_text_without_calls(text);
            return Parsed {
                calls: Vec::new(),
                content: if says { text.to_owned() } else { String::new() },
            };
        }
        let section = kimi_whole::first_section(text);
        // Before a section its trailing whitespace stays (live-checked:
        // `<|tool_call_begin|>  ` + a section says `<|tool_call_begin|>  `).
        let content = match section.or_else(|| self.rules.first_start(text)) {
            Some(at) if section.is_some() => text[..at].trim_start(),
            Some(at) => text[..at].trim(),
            None => text.trim(),
        };
        Parsed {
            calls: calls
                .into_iter()
                .enumerate()
                .map(|(index, call)| ToolCall {
                    index,
                    id: call.id,
                    name: call.name,
                    arguments: call.arguments,
                })
                .collect(),
            content: content.to_owned(),
        }
    }

    /// Held text without a call: dropped whole when it has a start marker; but a
    /// jail its own-end marker opened keeps it whole once a family start marker
    /// follows (live-checked, deepseek_v3_1); so does an unclosed block the family
    /// reads as text (`unclosed_kept_without`), and a JSON family's text that
    /// holds JSON but no call, with text before the marker (the parser says that
    /// text, and the jail then releases all it held: mistral's
    /// `{"city":…}[TOOL_CALLS]f[ARGS]{…}`).
    fn no_calls(&self, text: &str) -> Parsed {
        let kept_without = self.rules.unclosed_kept_without;
        let read_as_text = (!kept_without.is_empty()
            && !kept_without.iter().any(|inner| text.contains(inner))
            && !self.rules.ends.iter().any(|end| text.contains(end)))
            || self
                .rules
                .bare_opener
                // Held text a bare `<function=` opened that gives no call is text too
                // (live-checked, qwen3_coder: `<function=` says `<function=`,
                // `<function=x<tool_call>\n<` and `<function=<tool_call><function=f>`
                // at the end go out whole; `<tool_call><function=` says nothing).
                .is_some_and(|(bare, _)| text.starts_with(bare));
        let kept_whole = read_as_text
            || (self.rules.trigger == Trigger::Json && self.rules.says_text_before(text));
        let marked = self.rules.has_start(text) && !kept_whole;
        Parsed {
            calls: Vec::new(),
            content: if marked {
                String::new()
            } else {
                text.to_owned()
            },
        }
    }
}

/// Dynamo's deepseek_v3_1 parse over held text (its section need not close at the
/// end of output); without calls the jail lets the held text out as it was,
/// unless the parser says nothing.
fn parse_dsv31(text: &str, reading: Reading) -> Parsed {
    let whole = dsv31_whole::parse_whole(text, reading == Reading::End);
    let content = match (whole.calls.is_empty(), whole.content.is_empty()) {
        (true, false) => text.to_owned(),
        _ => whole.content,
    };
    Parsed {
        calls: numbered(whole.calls),
        content,
    }
}

/// Dynamo's mistral parse over held text; without calls the jail lets the held
/// text out as it was, unless the parser says nothing (a marker with no JSON
/// after it, an end marker): then nothing.
fn parse_mistral(text: &str, reading: Reading) -> Parsed {
    let (calls, normal) = basic_whole::parse_mistral(text, reading == Reading::End);
    if calls.is_empty() {
        return Parsed {
            calls: Vec::new(),
            content: if normal.is_empty() {
                String::new()
            } else {
                text.to_owned()
            },
        };
    }
    Parsed {
        calls: numbered(calls),
        content: normal,
    }
}

const QWEN3_OPEN: &str = "<tool_call>";
const QWEN3_CLOSE: &str = "</tool_call>";
const QWEN3_FUNCTION: &str = "<function=";
const QWEN3_FUNCTION_END: &str = "</function>";

/// Where Dynamo's qwen3_coder parser says held text's calls end: after the first
/// `</tool_call>` and the whole blocks that follow it across whitespace; with no
/// `<tool_call>` but a bare `<function=`, after the first `</function>`, the
/// `</function>`s right after it, and one `</tool_call>` after those; with no end
/// tag, the end of the text.
fn qwen3_end_position(text: &str) -> usize {
    let bare = !text.contains(QWEN3_OPEN) && text.contains(QWEN3_FUNCTION);
    let (open, close) = if bare {
        (QWEN3_FUNCTION, QWEN3_FUNCTION_END)
    } else {
        (QWEN3_OPEN, QWEN3_CLOSE)
    };
    let Some(first) = text.find(close) else {
        return text.len();
    };
    let mut cursor = first + close.len();
    loop {
        let rest = &text[cursor..];
        let trimmed = rest.trim_start();
        let gap = rest.len() - trimmed.len();
        if bare && trimmed.starts_with(close) {
            cursor += gap + close.len();
        } else if bare && trimmed.starts_with(QWEN3_CLOSE) {
            return cursor + gap + QWEN3_CLOSE.len();
        } else if trimmed.starts_with(open) {
            let from = cursor + gap + open.len();
            match text[from..].find(close) {
                Some(at) => cursor = from + at + close.len(),
                None => return cursor,
            }
        } else {
            return cursor;
        }
    }
}

const QWEN3_PARAMETER: &str = "<parameter=";
const QWEN3_PARAMETER_END: &str = "</parameter>";

/// A function body's last parameter tag when Dynamo's pattern (a name up to the
/// first `>`, a value up to `</parameter>` or the end) reads the block's closing
/// `</tool_call>` into its name: where the tag starts, and the name (trimmed,
/// quotes dropped; `None` when nothing is left, which Dynamo skips).
fn key_through_close(body: &str) -> Option<(usize, Option<&str>)> {
    let mut pos = 0;
    let mut last = None;
    while let Some(at) = body[pos..].find(QWEN3_PARAMETER) {
        let open = pos + at;
        let head = open + QWEN3_PARAMETER.len();
        let Some(gt) = body[head..].find('>').filter(|&gt| gt > 0) else {
            pos = open + 1;
            continue;
        };
        let value = head + gt + 1;
        last = Some((open, &body[head..head + gt], value));
        pos = body[value..]
            .find(QWEN3_PARAMETER_END)
            .map_or(body.len(), |end| value + end + QWEN3_PARAMETER_END.len());
    }
    let (open, raw, value) = last?;
    let closing = &QWEN3_CLOSE[..QWEN3_CLOSE.len() - 1];
    if value != body.len() || !raw.ends_with(closing) {
        return None;
    }
    let key = strip_quotes(raw.trim());
    Some((open, (!key.is_empty()).then_some(key)))
}

/// A name between matching quotes loses them (Dynamo's XML parsers).
fn strip_quotes(name: &str) -> &str {
    let quoted = name.len() >= 2
        && ((name.starts_with('"') && name.ends_with('"'))
            || (name.starts_with('\'') && name.ends_with('\'')));
    if quoted {
        &name[1..name.len() - 1]
    } else {
        name
    }
}

const DEFAULT_START: &str = "<TOOLCALL>";
const DEFAULT_END: &str = "</TOOLCALL>";

/// Where Dynamo's `default` jail ends once calls parsed (it reads the family as
/// nemotron_deci does): after the first `</TOOLCALL>` and the blocks that follow
/// it with only whitespace between, else at the end of the held text.
fn default_end_position(held: &str) -> usize {
    let Some(at) = held.find(DEFAULT_END) else {
        return held.len();
    };
    let mut end = at + DEFAULT_END.len();
    while let Some(block) = held[end..].trim_start().strip_prefix(DEFAULT_START) {
        let from = held.len() - block.len();
        match held[from..].find(DEFAULT_END) {
            Some(close) => end = from + close + DEFAULT_END.len(),
            None => break,
        }
    }
    end
}

const MISTRAL_START: &str = "[TOOL_CALLS]";
const MISTRAL_END: &str = "[/TOOL_CALLS]";

/// How Dynamo's jail decides that a mistral jail is complete (its JSON-boundary
/// strategy): the held text is parsed only when a `[/TOOL_CALLS]` shows up or a
/// top-level JSON value closes (counted from the newest `[TOOL_CALLS]`); calls
/// found wait (`pending`) until the end position is known — after the end
/// marker, else at the last `]` once text other than whitespace (and other than
/// the start of `[/TOOL_CALLS]`) follows it.
#[derive(Debug, Default)]
struct MistralEnd {
    pending: Option<Parsed>,
    /// Where the search for `[/TOOL_CALLS]` goes on.
    end_from: usize,
    scan: JsonBoundary,
}

/// The reference's incremental scan for closed top-level JSON values: each
/// closing is reported once; a new start marker restarts the scan after it
/// (mistral's `[TOOL_CALLS]`, `default`'s two markers).
#[derive(Debug, Default)]
struct JsonBoundary {
    scanned: usize,
    last_marker_end: Option<usize>,
    started: bool,
    depth: usize,
    in_string: bool,
    escape: bool,
    last_complete: Option<usize>,
    reported: Option<usize>,
}

impl JsonBoundary {
    fn new_end(&mut self, text: &str, starts: &[&str]) -> bool {
        let newest = starts
            .iter()
            .filter_map(|start| {
                text.match_indices(start)
                    .map(|(at, m)| at + m.len())
                    .filter(|end| self.last_marker_end.map_or(true, |last| *end > last))
                    .last()
            })
            .max();
        if let Some(end) = newest {
            *self = Self {
                scanned: end,
                last_marker_end: Some(end),
                ..Self::default()
            };
        }
        for (offset, c) in text[self.scanned..].char_indices() {
            if self.step(c) {
                self.last_complete = Some(self.scanned + offset + 1);
            }
        }
        self.scanned = text.len();
        if self.last_complete != self.reported {
            self.reported = self.last_complete;
            return self.last_complete.is_some();
        }
        false
    }

    /// One character of the scan: anything before a `{` or `[` is skipped, then
    /// brackets count outside `"` strings (a `'` is no quote); true where a
    /// top-level value closes.
    fn step(&mut self, c: char) -> bool {
        if !self.started {
            if c == '{' || c == '[' {
                self.started = true;
                self.depth = 1;
            }
        } else if self.escape {
            self.escape = false;
        } else if self.in_string {
            match c {
                '\\' => self.escape = true,
                '"' => self.in_string = false,
                _ => {}
            }
        } else {
            match c {
                '"' => self.in_string = true,
                '{' | '[' => self.depth += 1,
                '}' | ']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        self.started = false;
                        return true;
                    }
                }
                _ => {}
            }
        }
        false
    }
}

/// What the reference makes of calls a streaming parse found.
enum Completion {
    Done(usize, Parsed),
    Pending(Parsed),
    Invalid,
}

/// Where Dynamo's mistral jail ends once calls parsed: after `[/TOOL_CALLS]`
/// (and any that follow it); without it, at the last `]` — with a start marker
/// only once text follows that is neither whitespace nor the start of the end
/// marker (`None`: wait).
fn mistral_end_position(held: &str) -> Option<usize> {
    let json_end = held.rfind(']').map_or(held.len(), |at| at + 1);
    if !held.contains(MISTRAL_START) {
        return Some(json_end);
    }
    if let Some(at) = held.find(MISTRAL_END) {
        let mut end = at + MISTRAL_END.len();
        while let Some(rest) = held[end..].trim_start().strip_prefix(MISTRAL_END) {
            end = held.len() - rest.len();
        }
        return Some(end);
    }
    let tail = held[json_end..].trim_start();
    (!tail.is_empty() && !MISTRAL_END.starts_with(tail)).then_some(json_end)
}

/// A JSON object's text with each key once, at its first place with its last
/// value (values as written); `None` when no key repeats or it is no object.
pub fn last_value_per_key(arguments: &str) -> Option<String> {
    let entries = serde_json::from_str::<Entries>(arguments).ok()?.0;
    let repeats = entries
        .iter()
        .enumerate()
        .any(|(i, (key, _))| entries[..i].iter().any(|(k, _)| k == key));
    if !repeats {
        return None;
    }
    object_of(entries.iter().map(|(k, v)| (k.as_str(), v.get())))
}

/// The compact JSON object of `pairs` (values as written), each key once, at its
/// first place with its last value.
fn object_of<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> Option<String> {
    let mut unique: Vec<(&str, &str)> = Vec::new();
    for (key, value) in pairs {
        match unique.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => unique.push((key, value)),
        }
    }
    let mut out = String::from("{");
    for (i, (key, value)) in unique.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key).ok()?);
        out.push(':');
        out.push_str(value);
    }
    out.push('}');
    Some(out)
}

/// A JSON object's entries in order, repeated keys kept.
struct Entries(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// Calls read as (name, arguments), numbered and given ids.
fn numbered(calls: Vec<(String, String)>) -> Vec<ToolCall> {
    calls
        .into_iter()
        .enumerate()
        .map(|(index, (name, arguments))| ToolCall {
            index,
            id: new_call_id(),
            name,
            arguments,
        })
        .collect()
}

/// Dynamo's pythonic parser over the held text: a call list that is not valid
/// Python loses the whole text (the reference releases an empty content).
fn parse_pythonic(text: &str) -> Parsed {
    match pythonic_whole::parse_whole(text) {
        Ok(parse) if !parse.calls.is_empty() => Parsed {
            calls: numbered(parse.calls),
            content: parse.content,
        },
        Ok(_) => Parsed {
            calls: Vec::new(),
            content: text.to_owned(),
        },
        Err(_) => Parsed {
            calls: Vec::new(),
            content: String::new(),
        },
    }
}

/// Dynamo's `default` parser over the held text. Without calls the jail lets
/// the held text out as it was, unless the parser says nothing (a marker with
/// no JSON after it, `<TOOLCALL></TOOLCALL>`): then nothing (live-checked:
/// `<|python_tag|>{"name":"f"}  ` goes out whole).
fn parse_default(text: &str, reading: Reading) -> Parsed {
    let parse = default_whole::parse_whole(text, reading);
    if parse.calls.is_empty() {
        return Parsed {
            calls: Vec::new(),
            content: if parse.content.is_empty() {
                String::new()
            } else {
                text.to_owned()
            },
        };
    }
    Parsed {
        calls: numbered(parse.calls),
        content: parse.content,
    }
}

/// Dynamo's harmony parser over the held text: its calls, and its content (the
/// cleaned text when nothing parsed as Harmony messages).
fn parse_harmony(text: &str) -> Parsed {
    let parse = parse_whole_harmony(text);
    Parsed {
        calls: numbered(parse.calls),
        content: parse.content,
    }
}

/// Whether the brackets (`{}` / `[]`, outside string literals) opened from the
/// first one on are all closed again at the end of `text`.
/// A forced choice's held text read at the end: its calls with no text beside
/// them, else the text as written.
fn calls_or_text(calls: Vec<(String, String)>, held: String) -> Parsed {
    Parsed {
        content: if calls.is_empty() {
            held
        } else {
            String::new()
        },
        calls: numbered(calls),
    }
}

fn brackets_closed(text: &str) -> bool {
    let Some(start) = text.find(['{', '[']) else {
        return false;
    };
    let mut scan = BracketScan::default();
    text[start..].chars().for_each(|c| scan.step(c));
    scan.depth == 0 && scan.quote.is_none()
}

/// Whether a JSON-looking value closes in `piece`, as Dynamo's jail boundary
/// scan ([`JsonBoundary`]) reads it (live-checked: `x {}`, `": {"c": 1}}`,
/// `{'}'` and `x ] [1]` close; `{x`, `"{" {}` and `'{' {}` hold).
fn json_boundary_closes(piece: &str) -> bool {
    let mut scan = JsonBoundary::default();
    piece.chars().any(|c| scan.step(c))
}

/// Bracket depth outside quoted spans (`"` or `'`, with escapes), a char at a time.
#[derive(Default)]
struct BracketScan {
    depth: usize,
    quote: Option<char>,
    escaped: bool,
}

impl BracketScan {
    fn step(&mut self, c: char) {
        match self.quote {
            Some(_) if self.escaped => self.escaped = false,
            Some(_) if c == '\\' => self.escaped = true,
            Some(q) if c == q => self.quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' => self.quote = Some(c),
                '{' | '[' => self.depth += 1,
                '}' | ']' => self.depth = self.depth.saturating_sub(1),
                _ => {}
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{default_end_position, json_boundary_closes, last_value_per_key, object_of};

    #[test]
    fn a_json_boundary_closes_on_brackets_outside_double_quotes() {
        for closed in [
            r#"{tz:"a"}"#,
            "[x]",
            r#" {"a": }"#,
            "{x}}",
            "{a:1} more",
            "{'}': 1}",
            "x {}",
            r#"": {"c": 1}}"#,
            "{'a}'",
            "x ] [1]",
            r#"x {"a":"}"}"#,
        ] {
            assert!(json_boundary_closes(closed), "{closed}");
        }
        for open in [
            r#"{"a":"}""#,
            "{x",
            r#"{"a\"}":1"#,
            "",
            "x",
            r#""{" {}"#,
            "'{' {}",
        ] {
            assert!(!json_boundary_closes(open), "{open}");
        }
    }

    #[test]
    fn a_default_jail_ends_after_its_consecutive_blocks() {
        let two = "<TOOLCALL>[a]</TOOLCALL> \n<TOOLCALL>[b]</TOOLCALL> x";
        assert_eq!(default_end_position(two), two.len() - 2);
        let text_between = "<TOOLCALL>[a]</TOOLCALL> x <TOOLCALL>[b]</TOOLCALL>";
        assert_eq!(default_end_position(text_between), 24);
        assert_eq!(default_end_position("<|python_tag|>{} x"), 18);
    }

    #[test]
    fn a_repeated_key_keeps_its_first_place_and_last_value() {
        assert_eq!(
            last_value_per_key(r#"{"city":"A","days":3,"city":"B"}"#).as_deref(),
            Some(r#"{"city":"B","days":3}"#)
        );
        assert_eq!(
            last_value_per_key(r#"{"a":1.50,"a":[1, 2]}"#).as_deref(),
            Some(r#"{"a":[1, 2]}"#)
        );
        assert_eq!(last_value_per_key(r#"{"a":1,"b":2}"#), None);
        let pairs = [("a", "1"), ("é\n", r#""x""#), ("a", r#""""#)];
        assert_eq!(
            object_of(pairs.into_iter()).as_deref(),
            Some(r#"{"a":"","é\n":"x"}"#)
        );
        assert_eq!(last_value_per_key("[1]"), None);
    }
}
