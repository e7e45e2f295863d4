//! Tool-call formats whose arguments are JSON written by the model.
//!
//! One state machine serves every family; a family is a set of markers plus a
//! few choices (which opener starts a call, whether calls sit in a section,
//! how a name is written). Argument bytes are forwarded verbatim as soon as the
//! [`JsonScanner`] has accepted them; pythonic lists are the one format whose
//! JSON is built here.
//!
//! Policies shared by all families:
//! - text before, between and after calls is content, streamed and batch alike;
//! - a call whose JSON breaks is dropped (`drop_call`) and the rest of its
//!   markup is skipped up to the family's end marker (Dynamo's hermes drops the
//!   whole block silently);
//! - a call still open at `finish` is dropped, as Dynamo's hermes does. A call
//!   whose arguments completed but whose closing marker never came is kept
//!   (Dynamo's default end-of-output recovery; kimi_k2 PR #8208), except for
//!   hermes, whose Dynamo config drops any block that never closes;
//! - an opener that may just be prose (`{` or `[` at the start of the output,
//!   a pythonic `[` anywhere, `functools`, `<|python_tag|>`) is held until the
//!   call's name proves it is a call, and released as content otherwise;
//! - whitespace between a call and what follows it (`;` too for llama3_json) is
//!   markup, not content.

mod olmo3;
mod pythonic;
mod wrapper;

use std::sync::{Arc, OnceLock};

use pythonic::{ListScan, ListStep};
use wrapper::{Keys, WStep, Wrapper};

use crate::parsers::json::{JsonScanner, Scanned};
use crate::parsers::markers::{MarkerSet, Scan};
use crate::parsers::{CallSink, ToolParse, Tools};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
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
}

const FAMILIES: [(&str, Family); 22] = [
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
];

const DS_CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const DS_CALLS_END: &str = "<｜tool▁calls▁end｜>";
const DS_CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const DS_CALL_END: &str = "<｜tool▁call▁end｜>";
const DS_SEP: &str = "<｜tool▁sep｜>";
const KIMI_SECTIONS_BEGIN: &str = "<|tool_calls_section_begin|>";
const KIMI_SECTION_BEGIN: &str = "<|tool_call_section_begin|>";
const KIMI_SECTIONS_END: &str = "<|tool_calls_section_end|>";
const KIMI_SECTION_END: &str = "<|tool_call_section_end|>";
const KIMI_CALL_BEGIN: &str = "<|tool_call_begin|>";
const KIMI_ARGS_BEGIN: &str = "<|tool_call_argument_begin|>";
const KIMI_CALL_END: &str = "<|tool_call_end|>";
const MISTRAL_CALLS: &str = "[TOOL_CALLS]";
const MISTRAL_ARGS: &str = "[ARGS]";
const MISTRAL_CALL_ID: &str = "[CALL_ID]";
const INKLING_ENDS: &[&str] = &["<|end_message|>", "<|content_model_end_sampling|>"];
const PLAMO_REQUESTS_BEGIN: &str = "<|plamo:begin_tool_requests:plamo|>";
const PLAMO_REQUESTS_END: &str = "<|plamo:end_tool_requests:plamo|>";
const PLAMO_REQUEST_BEGIN: &str = "<|plamo:begin_tool_request:plamo|>";
const PLAMO_REQUEST_END: &str = "<|plamo:end_tool_request:plamo|>";
const PLAMO_NAME_BEGIN: &str = "<|plamo:begin_tool_name:plamo|>";
/// The name's end and the arguments' header, which the template writes together.
const PLAMO_NAME_END: &str = "<|plamo:end_tool_name:plamo|><|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>";
const PLAMO_ARGS_END: &str = "<|plamo:end_tool_arguments:plamo|>";

/// Harmony call openers: the full header and the bare channel forms, with the
/// recipient in the channel or in the role position.
const HARMONY_STARTS: &[&str] = &[
    "<|start|>assistant<|channel|>commentary to=",
    "<|start|>assistant<|channel|>analysis to=",
    "<|start|>assistant to=",
    "<|channel|>commentary to=",
    "<|channel|>analysis to=",
];

/// The markers of one family, by parser state.
struct Spec {
    starts: &'static [&'static str],
    /// A byte that opens a call when it is the first non-space of the output.
    bare: Option<u8>,
    /// Openers looked for in text that do not end reasoning (too common in prose).
    text_only: &'static [&'static str],
    /// Held as content until a name proves the call (prose-like openers).
    tentative_start: bool,
    /// Between calls of a section: the next call's marker or the section's end.
    section: &'static [&'static str],
    /// End of a call's name, id or header.
    name_end: &'static [&'static str],
    /// End of a call whose arguments are a bare object.
    close: &'static [&'static str],
    /// Optional end marker after a wrapper object or a list.
    after: &'static [&'static str],
    /// A call counts only once its `after` marker arrives (Dynamo's hermes drops
    /// a call whose block never closes, even with a complete body).
    needs_end: bool,
    /// Where a broken call's markup ends and parsing can resume.
    skip: &'static [&'static str],
    /// How the family spells the call object's keys.
    keys: Keys,
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
struct Sets {
    spec: Spec,
    text: MarkerSet,
    section: Option<MarkerSet>,
    name_end: Option<MarkerSet>,
    close: Option<MarkerSet>,
    after: Option<MarkerSet>,
    skip: Option<MarkerSet>,
}

fn sets(family: Family) -> &'static Sets {
    static SETS: [OnceLock<Sets>; FAMILIES.len()] = [const { OnceLock::new() }; FAMILIES.len()];
    SETS[family as usize].get_or_init(|| {
        let spec = family.spec();
        let opt = |m: &[&'static str]| (!m.is_empty()).then(|| MarkerSet::new(m));
        Sets {
            text: MarkerSet::new(&[spec.starts, spec.text_only].concat()),
            section: opt(spec.section),
            name_end: opt(spec.name_end),
            close: opt(spec.close),
            after: opt(spec.after),
            skip: opt(spec.skip),
            spec,
        }
    })
}

pub fn build(family: &'static str, tools: &Arc<Tools>) -> Option<Box<dyn ToolParse>> {
    if family == "olmo3" {
        return Some(Box::new(olmo3::Olmo3::new()));
    }
    let (_, family) = FAMILIES.iter().find(|(name, _)| *name == family)?;
    Some(Box::new(JsonCalls::new(*family, tools.clone())))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Plain text: looking for a call opener.
    Text,
    /// After a start marker: whitespace, then `{`, `[` or a name.
    Open,
    /// In a list of wrapper objects, expecting an element or `]`.
    List,
    /// After a list element: `,` or `]`.
    ListNext,
    /// Inside a `{"name": ..., "arguments": ...}` object.
    Wrapper,
    /// After a call or list: an optional closing marker.
    After,
    /// Inside a call section, between calls.
    Section,
    /// Reading a call's name (or id, or Harmony header) up to its end marker.
    Name,
    /// DeepSeek V3's code fence before the arguments.
    Fence,
    /// A bare arguments object.
    Args,
    /// After the arguments: everything up to the call's end marker is markup.
    Close,
    /// A broken call: discard up to a point where calls can resume.
    Skip,
    /// Inside a pythonic call list, up to its closing `]`.
    Python,
}

fn leading_ws(text: &str) -> usize {
    text.bytes()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .unwrap_or(text.len())
}

/// Longest name, id or header accepted before the call is declared broken.
const MAX_NAME: usize = 1024;

struct JsonCalls {
    family: Family,
    /// The request's tools; only Kimi's bare-counter ids consult them.
    tools: Arc<Tools>,
    sets: &'static Sets,
    state: State,
    /// Input not consumed yet (a possible marker prefix), carried to the next feed.
    pending: String,
    /// Only whitespace has been seen since the output (or the last llama call) began.
    boundary: bool,
    /// The current call is not proven yet; `raw` holds its text for release as content.
    tentative: bool,
    raw: String,
    release: bool,
    /// The list being read holds no element yet.
    list_first: bool,
    in_list: bool,
    name: String,
    /// The name, put aside while a Mistral `[CALL_ID]` is read.
    aside: String,
    args: JsonScanner,
    args_started: bool,
    wrapper: Wrapper,
    py: ListScan,
    py_text: String,
}

impl JsonCalls {
    fn new(family: Family, tools: Arc<Tools>) -> Self {
        Self {
            family,
            tools,
            sets: sets(family),
            state: State::Text,
            pending: String::new(),
            boundary: true,
            tentative: false,
            raw: String::new(),
            release: false,
            list_first: false,
            in_list: false,
            name: String::new(),
            aside: String::new(),
            args: JsonScanner::new(),
            args_started: false,
            wrapper: Wrapper::new(sets(family).spec.keys),
            py: ListScan::new(),
            py_text: String::new(),
        }
    }

    /// The current call is broken. Unproven text goes back to content; otherwise the
    /// call is dropped and its markup skipped.
    fn fail(&mut self, why: &str, sink: &mut CallSink) {
        if self.tentative {
            self.release = true;
            return;
        }
        if sink.has_open_call() {
            sink.drop_call(why.to_owned());
        } else {
            sink.error(format!("malformed tool call: {why}"));
        }
        self.state = State::Skip;
    }

    fn start_tentative(&mut self) {
        self.tentative = true;
        self.raw.clear();
    }

    fn commit(&mut self) {
        self.tentative = false;
        self.raw.clear();
    }

    fn enter_name(&mut self) {
        self.name.clear();
        self.aside.clear();
        self.state = State::Name;
    }

    fn on_start(&mut self, marker: &'static str) {
        match self.family {
            Family::DeepseekV3 | Family::DeepseekV31 | Family::KimiK2 | Family::Plamo3 => {
                if marker == DS_CALL_BEGIN || marker == KIMI_CALL_BEGIN {
                    self.enter_name();
                } else {
                    self.state = State::Section;
                }
            }
            Family::Harmony => self.enter_name(),
            _ => {
                if self.sets.spec.tentative_start {
                    self.start_tentative();
                }
                self.state = State::Open;
            }
        }
    }

    /// Consume a prefix of `rest`; `None` when all of `rest` must wait for more input.
    fn step(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        let bytes = rest.as_bytes();
        match self.state {
            State::Text => {
                if self.boundary {
                    let ws = leading_ws(rest);
                    if ws > 0 {
                        sink.content(&rest[..ws]);
                        return Some(ws);
                    }
                    // `[TOOL_CALLS]` starts with the bare opener `[`: a marker wins.
                    if Some(bytes[0]) == self.sets.spec.bare {
                        match self.sets.text.scan(rest) {
                            Scan::Partial { hold_from: 0 } => return None,
                            Scan::Found { start: 0, .. } => {}
                            _ => {
                                self.boundary = false;
                                self.start_tentative();
                                self.state = State::Open;
                                return Some(0);
                            }
                        }
                    }
                    self.boundary = false;
                }
                match self.sets.text.scan(rest) {
                    // Content first, so a tentative call's raw text starts at its marker.
                    Scan::Found { start, .. } if start > 0 => {
                        sink.content(&rest[..start]);
                        Some(start)
                    }
                    Scan::Found { end, marker, .. } => {
                        let marker = self.sets.text.marker(marker);
                        if self.sets.spec.text_only.contains(&marker) {
                            // The opener is the call's first byte: leave it to `Open`.
                            self.start_tentative();
                            self.state = State::Open;
                            return Some(0);
                        }
                        self.on_start(marker);
                        Some(end)
                    }
                    Scan::Partial { hold_from } => {
                        sink.content(&rest[..hold_from]);
                        (hold_from > 0).then_some(hold_from)
                    }
                }
            }
            State::Open => {
                let ws = leading_ws(rest);
                if ws > 0 {
                    return Some(ws);
                }
                match bytes[0] {
                    // LFM2 writes either list: `[name(` is pythonic, `[{` or `[]` is JSON.
                    b'[' if self.family == Family::Lfm2 => {
                        let inner = &rest[1..];
                        let ws = leading_ws(inner);
                        match inner.as_bytes().get(ws) {
                            None => None,
                            Some(b'{' | b']') => {
                                self.in_list = true;
                                self.list_first = true;
                                self.state = State::List;
                                Some(1)
                            }
                            Some(_) => {
                                self.py.reset();
                                self.py_text.clear();
                                self.state = State::Python;
                                Some(0)
                            }
                        }
                    }
                    b'[' if self.family == Family::Pythonic => {
                        self.py.reset();
                        self.py_text.clear();
                        self.state = State::Python;
                        Some(0)
                    }
                    b'{' if self.family != Family::Pythonic => {
                        self.wrapper.reset();
                        self.in_list = false;
                        self.state = State::Wrapper;
                        Some(0)
                    }
                    b'[' if self.family != Family::Pythonic => {
                        self.in_list = true;
                        self.list_first = true;
                        self.state = State::List;
                        Some(1)
                    }
                    _ if self.family == Family::Mistral && !self.tentative => {
                        self.enter_name();
                        Some(0)
                    }
                    _ => {
                        self.fail("expected `{` or `[` after the call marker", sink);
                        Some(0)
                    }
                }
            }
            State::List | State::ListNext => {
                let ws = leading_ws(rest);
                if ws > 0 {
                    return Some(ws);
                }
                match (self.state, bytes[0]) {
                    (State::List, b'{') => {
                        self.wrapper.reset();
                        self.state = State::Wrapper;
                        Some(0)
                    }
                    (State::ListNext, b',') => {
                        self.state = State::List;
                        self.list_first = false;
                        Some(1)
                    }
                    (_, b']') if !(self.tentative && self.list_first) => {
                        self.state = State::After;
                        Some(1)
                    }
                    _ => {
                        self.fail("expected a call object in the list", sink);
                        Some(0)
                    }
                }
            }
            State::Wrapper => {
                let step = self.wrapper.step(rest, sink);
                if self.tentative && self.wrapper.begun() {
                    self.commit();
                }
                match step {
                    WStep::More => Some(rest.len()),
                    WStep::Done(n) => {
                        if !self.sets.spec.needs_end || self.in_list {
                            sink.end_call();
                        }
                        self.state = if self.in_list {
                            State::ListNext
                        } else {
                            State::After
                        };
                        Some(n)
                    }
                    WStep::Fail(n, why) => {
                        self.fail(why, sink);
                        Some(n)
                    }
                }
            }
            State::After => {
                let llama = self.family == Family::Llama3Json;
                let skip = rest
                    .bytes()
                    .position(|b| {
                        !(matches!(b, b' ' | b'\t' | b'\n' | b'\r') || llama && b == b';')
                    })
                    .unwrap_or(rest.len());
                if skip > 0 {
                    return Some(skip);
                }
                let needs_end = self.sets.spec.needs_end && sink.has_open_call();
                // Hermes models sometimes put several call objects in one block.
                if needs_end && bytes[0] == b'{' {
                    sink.end_call();
                    self.wrapper.reset();
                    self.in_list = false;
                    self.state = State::Wrapper;
                    return Some(0);
                }
                self.state = State::Text;
                self.boundary = llama;
                let Some(after) = &self.sets.after else {
                    return Some(0);
                };
                match after.scan(rest) {
                    Scan::Found { start: 0, end, .. } => {
                        sink.end_call();
                        Some(end)
                    }
                    Scan::Partial { hold_from: 0 } => {
                        self.state = State::After;
                        None
                    }
                    _ if needs_end => {
                        self.fail("text between the call and its end marker", sink);
                        Some(0)
                    }
                    _ => Some(0),
                }
            }
            State::Section => {
                let ws = leading_ws(rest);
                if ws > 0 {
                    return Some(ws);
                }
                let section = self.sets.section.as_ref()?;
                match section.scan(rest) {
                    Scan::Found {
                        start: 0,
                        end,
                        marker,
                    } => {
                        let marker = section.marker(marker);
                        if marker == DS_CALL_BEGIN
                            || marker == KIMI_CALL_BEGIN
                            || marker == PLAMO_NAME_BEGIN
                        {
                            self.enter_name();
                        } else if marker != PLAMO_REQUEST_BEGIN && marker != PLAMO_REQUEST_END {
                            self.state = State::Text;
                        }
                        Some(end)
                    }
                    Scan::Partial { hold_from: 0 } => None,
                    // Anything else ends the section implicitly; it is content again.
                    _ => {
                        self.state = State::Text;
                        Some(0)
                    }
                }
            }
            State::Name => {
                let set = self.sets.name_end.as_ref()?;
                let (taken, found) = match set.scan(rest) {
                    Scan::Found { start, end, marker } => (start, Some((end, set.marker(marker)))),
                    Scan::Partial { hold_from } => (hold_from, None),
                };
                self.name.push_str(&rest[..taken]);
                if self.name.len() > MAX_NAME {
                    self.fail("call name too long", sink);
                    return Some(taken);
                }
                let Some((end, marker)) = found else {
                    return (taken > 0).then_some(taken);
                };
                match marker {
                    DS_SEP if self.family == Family::DeepseekV3 => self.name.clear(),
                    "\n" if self.name.trim().is_empty() => {}
                    MISTRAL_CALL_ID => std::mem::swap(&mut self.name, &mut self.aside),
                    _ => {
                        if !self.aside.is_empty() {
                            std::mem::swap(&mut self.name, &mut self.aside);
                        }
                        self.open_named_call(sink);
                    }
                }
                Some(end)
            }
            State::Fence => {
                let ws = leading_ws(rest);
                if ws > 0 {
                    return Some(ws);
                }
                if bytes[0] == b'{' {
                    self.state = State::Args;
                    return Some(0);
                }
                for fence in ["```json", "```"] {
                    if rest.starts_with(fence) {
                        return Some(fence.len());
                    }
                    if fence.starts_with(rest) {
                        return None;
                    }
                }
                self.fail("expected a JSON code block", sink);
                Some(0)
            }
            State::Args => {
                if !self.args_started {
                    let ws = leading_ws(rest);
                    if ws > 0 {
                        return Some(ws);
                    }
                    if bytes[0] != b'{' {
                        // The call's end marker right away: a call without parameters.
                        if let Some(close) = &self.sets.close {
                            match close.scan(rest) {
                                Scan::Found { start: 0, .. } => {
                                    sink.arguments("{}");
                                    sink.end_call();
                                    self.state = State::Close;
                                    return Some(0);
                                }
                                Scan::Partial { hold_from: 0 } => return None,
                                _ => {}
                            }
                        }
                        self.fail("arguments are not a JSON object", sink);
                        return Some(0);
                    }
                    self.args_started = true;
                    self.args.reset();
                }
                match self.args.feed(bytes) {
                    Scanned::More => {
                        sink.arguments(rest);
                        Some(rest.len())
                    }
                    Scanned::Done(n) => {
                        sink.arguments(&rest[..n]);
                        sink.end_call();
                        self.state = if self.sets.close.is_some() {
                            State::Close
                        } else {
                            State::Text
                        };
                        Some(n)
                    }
                    Scanned::Invalid(k, why) => {
                        sink.arguments(&rest[..k]);
                        self.fail(why, sink);
                        Some(k)
                    }
                }
            }
            State::Close | State::Skip => {
                let set = if self.state == State::Close {
                    self.sets.close.as_ref()
                } else {
                    self.sets.skip.as_ref()
                };
                let Some(set) = set else {
                    return Some(rest.len());
                };
                match set.scan(rest) {
                    Scan::Found { start, end, marker } => {
                        match set.marker(marker) {
                            // A new Mistral call resynchronises; leave its marker to Text.
                            MISTRAL_CALLS => {
                                self.state = State::Text;
                                return Some(start);
                            }
                            // LFM2's end marker is spelled like Kimi's call end; only
                            // sectioned families go back to their section.
                            DS_CALL_END | KIMI_CALL_END | PLAMO_ARGS_END
                                if self.sets.section.is_some() =>
                            {
                                self.state = State::Section
                            }
                            _ => self.state = State::Text,
                        }
                        Some(end)
                    }
                    Scan::Partial { hold_from } => (hold_from > 0).then_some(hold_from),
                }
            }
            State::Python => match self.py.feed(bytes) {
                ListStep::More => {
                    self.py_text.push_str(rest);
                    if self.tentative && self.py.is_call_list() {
                        self.commit();
                    }
                    Some(rest.len())
                }
                ListStep::NotCalls(k) => {
                    self.fail("not a call list", sink);
                    Some(k)
                }
                ListStep::Closed(n) => {
                    self.py_text.push_str(&rest[..n]);
                    if !self.py.is_call_list() {
                        self.fail("not a call list", sink);
                        return Some(n);
                    }
                    if self.tentative {
                        self.commit();
                    }
                    self.state = State::After;
                    match pythonic::convert(&self.py_text) {
                        Ok(calls) => {
                            for (name, args) in calls {
                                sink.begin_call(&name, None);
                                sink.arguments(&args);
                                sink.end_call();
                            }
                        }
                        Err(why) => {
                            sink.error(format!("malformed pythonic tool call: {why}"));
                            self.state = State::Skip;
                        }
                    }
                    Some(n)
                }
            },
        }
    }

    fn open_named_call(&mut self, sink: &mut CallSink) {
        let raw = self.name.trim();
        let (name, id) = match self.family {
            Family::KimiK2 => {
                // `functions.NAME:IDX`; the id is kept as the model wrote it.
                let bare = raw.strip_prefix("functions.").unwrap_or(raw);
                let name = match bare.rsplit_once(':') {
                    Some((n, idx)) if idx.bytes().all(|b| b.is_ascii_digit()) => n,
                    _ => bare,
                };
                // A bare counter id (`0`) names no function; with a single tool
                // declared the call can only be that one.
                let only_tool = match (self.tools.iter().next(), self.tools.iter().nth(1)) {
                    (Some(def), None) => Some(def.name.as_str()),
                    _ => None,
                };
                let name = match only_tool {
                    Some(tool) if name.bytes().all(|b| b.is_ascii_digit()) => tool,
                    _ => name,
                };
                (name, Some(raw.to_owned()))
            }
            Family::Harmony => {
                let recipient = raw
                    .split(|c: char| c.is_whitespace() || c == '<')
                    .next()
                    .unwrap_or("");
                (
                    recipient.strip_prefix("functions.").unwrap_or(recipient),
                    None,
                )
            }
            _ => (raw, None),
        };
        if name.is_empty() {
            self.fail("empty call name", sink);
            return;
        }
        sink.begin_call(name, id);
        self.args_started = false;
        self.state = if self.family == Family::DeepseekV3 {
            State::Fence
        } else {
            State::Args
        };
    }

    fn run(&mut self, buf: &str, sink: &mut CallSink) -> usize {
        let mut pos = 0;
        while pos < buf.len() {
            let rest = &buf[pos..];
            let Some(n) = self.step(rest, sink) else {
                break;
            };
            if self.tentative {
                self.raw.push_str(&rest[..n]);
            }
            pos += n;
            if self.release {
                self.release = false;
                self.tentative = false;
                sink.content(&self.raw);
                self.raw.clear();
                self.state = State::Text;
            }
        }
        pos
    }
}

impl ToolParse for JsonCalls {
    fn feed(&mut self, text: &str, sink: &mut CallSink) {
        if self.pending.is_empty() {
            let used = self.run(text, sink);
            self.pending.push_str(&text[used..]);
        } else {
            let mut buf = std::mem::take(&mut self.pending);
            buf.push_str(text);
            let used = self.run(&buf, sink);
            buf.drain(..used);
            self.pending = buf;
        }
    }

    fn finish(&mut self, sink: &mut CallSink) {
        let held = std::mem::take(&mut self.pending);
        if self.tentative {
            sink.content(&self.raw);
            sink.content(&held);
        } else {
            match self.state {
                State::Text => sink.content(&held),
                State::After if sink.has_open_call() => {
                    sink.drop_call("the call's end marker never came")
                }
                State::After | State::Section | State::Close | State::Skip => {}
                _ => {
                    if sink.has_open_call() {
                        sink.drop_call("unterminated tool call");
                    } else {
                        sink.error("unterminated tool call");
                    }
                }
            }
        }
        self.pending = held;
        self.pending.clear();
        self.raw.clear();
        self.tentative = false;
        self.release = false;
        self.boundary = true;
        self.state = State::Text;
    }

    fn start_markers(&self) -> &'static [&'static str] {
        self.sets.spec.starts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::tools::test_support::{pieces_of, run};
    use crate::parsers::{Delta, Message};
    use proptest::prelude::*;

    fn run_pieces(family: Family, pieces: &[&str], stream: bool) -> (Message, usize) {
        run(&mut JsonCalls::new(family, Arc::default()), pieces, stream)
    }

    fn names(m: &Message) -> Vec<(&str, &str)> {
        m.tool_calls
            .iter()
            .map(|c| (c.name.as_str(), c.arguments.as_str()))
            .collect()
    }

    #[test]
    fn name_is_not_sent_before_it_is_complete() {
        let mut parser = JsonCalls::new(Family::Hermes, Arc::default());
        let mut sink = CallSink::new(true);
        let mut delta = Delta::default();
        parser.feed("<tool_call>{\"name\": \"get_wea", &mut sink);
        sink.drain_into(&mut delta);
        assert!(delta.calls.is_empty());
        parser.feed("ther\", \"arguments\": {\"a\": tr", &mut sink);
        sink.drain_into(&mut delta);
        assert_eq!(delta.calls[0].name.as_deref(), Some("get_weather"));
        // Verbatim bytes are final once scanned, so the half literal is already out.
        assert_eq!(delta.calls[0].arguments, "{\"a\": tr");
    }

    #[test]
    fn megabyte_arguments_stream_without_holding() {
        let value = "x{\\\"".repeat(256 * 1024);
        let text = format!(
            "<tool_call>{{\"name\": \"f\", \"arguments\": {{\"v\": \"{value}\"}}}}</tool_call>"
        );
        let mut parser = JsonCalls::new(Family::Hermes, Arc::default());
        let mut sink = CallSink::new(true);
        let mut delta = Delta::default();
        let mut sent = 0;
        for piece in pieces_of(&text, 7) {
            parser.feed(piece, &mut sink);
            assert!(parser.pending.len() <= "</tool_call>".len());
            delta.clear();
            sink.drain_into(&mut delta);
            sent += delta.calls.iter().map(|c| c.arguments.len()).sum::<usize>();
        }
        parser.finish(&mut sink);
        assert_eq!(sent, value.len() + "{\"v\": \"\"}".len());
        assert!(sink.errors().is_empty());
    }

    #[test]
    fn deep_nesting_and_unbalanced_braces_do_not_panic() {
        let deep = format!(
            "<tool_call>{{\"name\": \"f\", \"arguments\": {{\"a\": {}{}}}}}</tool_call>",
            "[".repeat(200_000),
            "]".repeat(200_000)
        );
        let (m, errors) = run_pieces(Family::Hermes, &[&deep], false);
        assert_eq!((m.tool_calls.len(), errors), (1, 0));
        for text in [
            "<tool_call>{{{{{{",
            "<tool_call>}}}}</tool_call>",
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}}}}}</tool_call>",
            "[[[[[[[[",
            "[f(a=[[[[[[[[",
            "<｜tool▁call▁begin｜>f<｜tool▁sep｜>}}}}",
        ] {
            for family in FAMILIES.map(|(_, f)| f) {
                run_pieces(family, &pieces_of(text, 1), false);
                run_pieces(family, &[text], true);
            }
        }
        let py = format!("[f(a={}{})]", "[".repeat(100_000), "]".repeat(100_000));
        let (m, errors) = run_pieces(Family::Pythonic, &[&py], false);
        assert_eq!((m.tool_calls.len(), errors), (0, 1));
    }

    #[test]
    fn calls_in_one_chunk_and_streamed_arguments_agree() {
        let text = "a<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_call>b<tool_call>{\"name\": \"g\"}</tool_call>c";
        let (whole, _) = run_pieces(Family::Hermes, &[text], false);
        let (streamed, _) = run_pieces(Family::Hermes, &pieces_of(text, 1), true);
        assert_eq!(
            whole,
            Message {
                tool_calls: whole.tool_calls.clone(),
                ..streamed.clone()
            }
        );
        assert_eq!(names(&whole), [("f", "{\"x\": 1}"), ("g", "{}")]);
        assert_eq!(names(&whole), names(&streamed));
        assert_eq!(whole.content, "abc");
    }

    #[test]
    fn kimi_start_markers_cover_both_section_spellings() {
        let parser = JsonCalls::new(Family::KimiK2, Arc::default());
        assert!(parser.start_markers().contains(&KIMI_SECTION_BEGIN));
        assert!(parser.start_markers().contains(&KIMI_SECTIONS_BEGIN));
        let harmony = JsonCalls::new(Family::Harmony, Arc::default());
        assert!(harmony.start_markers().contains(&"<|channel|>analysis to="));
    }

    const PIECES: &[&str] = &[
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        "[",
        "]",
        "\"",
        "\\",
        ":",
        ",",
        " ",
        "\n",
        "\"name\"",
        "\"arguments\"",
        "\"f\"",
        "1",
        "-2.5",
        "true",
        "nul",
        "é",
        "👋",
        "[TOOL_CALLS]",
        "[ARGS]",
        "<|python_tag|>",
        "functools",
        "(",
        ")",
        "'",
        "=",
        "g",
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>",
        "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>",
        "functions.f:0",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
        "<|channel|>commentary to=",
        "<|message|>",
        "<|call|>",
        "<tool_calls>",
        "<TOOLCALL>",
        "```json",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_chunking_gives_the_batch_result(
            parts in proptest::collection::vec(0..PIECES.len(), 0..40),
            step in 1usize..9,
        ) {
            let text: String = parts.iter().map(|&i| PIECES[i]).collect();
            for family in FAMILIES.map(|(_, f)| f) {
                let (batch, batch_errors) = run_pieces(family, &[&text], false);
                let (chunked, chunked_errors) = run_pieces(family, &pieces_of(&text, step), false);
                prop_assert_eq!(&batch, &Message { tool_calls: batch.tool_calls.clone(), ..chunked.clone() });
                prop_assert_eq!(names(&batch), names(&chunked));
                prop_assert_eq!(batch_errors, chunked_errors);
                for call in &batch.tool_calls {
                    prop_assert!(crate::parsers::json::is_valid(&call.arguments), "{}", call.arguments);
                }
                if batch_errors == 0 {
                    let (streamed, _) = run_pieces(family, &pieces_of(&text, step), true);
                    prop_assert_eq!(&batch.content, &streamed.content);
                    prop_assert_eq!(names(&batch), names(&streamed));
                }
            }
        }
    }
}

/// Timing probe, run on demand:
/// `CARGO_PROFILE_DEV_OPT_LEVEL=3 cargo test --lib json_calls::perf -- --ignored --nocapture`.
#[cfg(test)]
mod perf {
    use super::*;
    use crate::parsers::Delta;

    #[test]
    #[ignore]
    fn nanoseconds_per_token_sized_chunk() {
        let args = format!(
            "{{\"query\": \"{}\", \"n\": [1, 2.5, true], \"nested\": {{\"k\": \"é世界\"}}}}",
            "word ".repeat(400)
        );
        let samples = [
            (
                Family::Hermes,
                format!("{}<tool_call>\n{{\"name\": \"search\", \"arguments\": {args}}}\n</tool_call>", "Some text. ".repeat(40)),
            ),
            (
                Family::KimiK2,
                format!("{}<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>{args}<|tool_call_end|><|tool_calls_section_end|>", "Some text. ".repeat(40)),
            ),
            (
                Family::Pythonic,
                format!("[search(query='{}', n=3)]", "word ".repeat(400)),
            ),
        ];
        for (family, text) in samples {
            let pieces: Vec<&str> = {
                let mut out = Vec::new();
                let mut i = 0;
                while i < text.len() {
                    let mut j = (i + 3).min(text.len());
                    while !text.is_char_boundary(j) {
                        j += 1;
                    }
                    out.push(&text[i..j]);
                    i = j;
                }
                out
            };
            let rounds = 200;
            let start = std::time::Instant::now();
            let mut delta = Delta::default();
            for _ in 0..rounds {
                let mut parser = JsonCalls::new(family, Arc::default());
                let mut sink = CallSink::new(true);
                for piece in &pieces {
                    parser.feed(piece, &mut sink);
                    delta.clear();
                    sink.drain_into(&mut delta);
                }
                parser.finish(&mut sink);
            }
            let per = start.elapsed().as_nanos() as f64 / (rounds * pieces.len()) as f64;
            println!("{family:?}: {per:.0} ns per 3-byte chunk");
        }
    }
}
