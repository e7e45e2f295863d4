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
//! - a name, id or header that reaches the call's end marker, or runs past
//!   `MAX_NAME`, breaks the call at a byte fixed by the text alone (never by how
//!   it was cut), and parsing resumes there;
//! - a call still open at `finish` is dropped, as Dynamo's hermes does. A call
//!   whose arguments completed but whose closing marker never came is kept
//!   (Dynamo's default end-of-output recovery; kimi_k2 PR #8208), except for
//!   hermes, whose Dynamo config drops any block that never closes;
//! - an opener that may just be prose (`{` or `[` at the start of the output,
//!   a pythonic `[` anywhere, `functools`, `<|python_tag|>`) is held until the
//!   call's name proves it is a call, and released as content otherwise;
//! - whitespace between a call and what follows it (`;` too for llama3_json) is
//!   markup, not content.

pub mod basic_whole;
pub mod default_whole;
pub mod dsv31_whole;
mod family;
pub mod hermes_whole;
mod in_content;
pub mod kimi_whole;
mod named;
mod objects;
mod olmo3;
mod opening;
mod pythonic;
pub mod pythonic_whole;
mod wrapper;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::value::RawValue;

use family::{sets, Family, Sets, DS_CALL_BEGIN, FAMILIES, KIMI_CALL_BEGIN};
use pythonic::ListScan;
use wrapper::Wrapper;

use crate::parsers::dialect::Dialect;
use crate::parsers::json::JsonScanner;
use crate::parsers::{CallSink, ToolParse, Tools};

/// A piece of text around a start marker as Dynamo's whole parses take its JSON:
/// trimmed, opening with `{` (`[`), cut at its last `}` (`]`).
pub fn cut_json_piece(piece: &str) -> Option<&str> {
    let piece = piece.trim();
    let close = match piece.as_bytes().first()? {
        b'{' => '}',
        b'[' => ']',
        _ => return None,
    };
    Some(&piece[..=piece.rfind(close)?])
}

/// The first JSON value `text` starts with, and the rest after it.
fn first_value(text: &str) -> Option<(&str, &str)> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<&RawValue>();
    let value = values.next()?.ok()?;
    Some((value.get(), &text[values.byte_offset()..]))
}

/// A call object as Dynamo's whole-text parses read one: a string `name`, and the
/// first of `keys` present, as written (`None` when none is).
fn call_object(json: &str, keys: &[&str]) -> Option<(String, Option<String>)> {
    let members: BTreeMap<String, &RawValue> = serde_json::from_str(json).ok()?;
    let name: String = serde_json::from_str(members.get("name")?.get()).ok()?;
    let arguments = keys.iter().find_map(|key| members.get(*key));
    Some((name, arguments.map(|raw| raw.get().to_owned())))
}

/// The elements of a JSON list that `call` reads as calls; `None` when `json` is
/// no list.
fn list_calls(
    json: &str,
    call: impl Fn(&str) -> Option<(String, String)>,
) -> Option<Vec<(String, String)>> {
    let items: Vec<&RawValue> = serde_json::from_str(json).ok()?;
    Some(
        items
            .into_iter()
            .filter_map(|item| call(item.get()))
            .collect(),
    )
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
    /// A JSON value in the content that may be a call (`in_content`).
    InContent,
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
    /// `Close` has passed over text that is not closing markup (reported at `finish`
    /// if the end marker never comes, so the text is not lost silently).
    closing_text: bool,
    wrapper: Wrapper,
    py: ListScan,
    py_text: String,
    /// Calls written in the content are read (Dynamo's JSON families).
    content_calls: bool,
    /// A `{` or `[` in the content was not a call: no later one is tried.
    content_calls_ended: bool,
    /// The last byte consumed was `>` (a `{` right after a tag opens no call).
    after_gt: bool,
    content_scan: JsonScanner,
    /// Where the JSON value starts in `raw` (after its leading whitespace).
    content_json_from: Option<usize>,
    /// Bare arguments are gathered and re-serialised compactly (Dynamo's DeepSeek
    /// V3/V3.1, Kimi K2 and Harmony parsers hand out `{"city":"Paris"}` whatever the
    /// spacing).
    compact_args: bool,
    args_text: String,
    /// Reading Kimi K2 arguments that are not JSON (`named::raw_args`).
    raw_args: bool,
}

impl JsonCalls {
    fn new(family: Family, tools: Arc<Tools>) -> Self {
        let family = match family {
            Family::Internlm if tools.dialect() == Dialect::Sglang => Family::InternlmSpaced,
            family => family,
        };
        // Dynamo's JSON families: calls in the content, and any arguments value.
        let content_calls =
            sets(family).spec.calls_in_content && tools.dialect() == Dialect::Dynamo;
        let compact_args = tools.dialect() == Dialect::Dynamo
            && matches!(
                family,
                Family::DeepseekV3 | Family::DeepseekV31 | Family::KimiK2 | Family::Harmony
            );
        let mut wrapper = Wrapper::new(sets(family).spec.keys);
        wrapper.any_arguments = content_calls;
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
            closing_text: false,
            wrapper,
            py: ListScan::new(),
            py_text: String::new(),
            content_calls,
            content_calls_ended: false,
            after_gt: false,
            content_scan: JsonScanner::new(),
            content_json_from: None,
            compact_args,
            args_text: String::new(),
            raw_args: false,
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
    // One caller, on the hot path: keep the dispatch inside `run`'s loop (measured: ~4%
    // fewer instructions per chunk than a call per step).
    #[inline(always)]
    fn step(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        match self.state {
            State::Text => self.text(rest, sink),
            State::Open => self.open(rest, sink),
            State::List | State::ListNext => self.list(rest, sink),
            State::Wrapper => self.wrapper(rest, sink),
            State::After => self.after(rest, sink),
            State::Section => self.section(rest),
            State::Name => self.name(rest, sink),
            State::Fence => self.fence(rest, sink),
            State::Args => self.args(rest, sink),
            State::Close | State::Skip => self.close_or_skip(rest, sink),
            State::Python => self.python(rest, sink),
            State::InContent => self.in_content(rest, sink),
        }
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
            if n > 0 {
                self.after_gt = rest.as_bytes()[n - 1] == b'>';
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
        if self.state == State::InContent && self.finish_in_content(&held, sink) {
            self.commit();
        } else if self.state == State::InContent {
            sink.content(&self.raw);
        } else if self.tentative {
            sink.content(&self.raw);
            sink.content(&held);
        } else {
            match self.state {
                State::Text => sink.content(&held),
                // Dynamo keeps a whole call whose block never closed (hermes measured),
                // and closes a call cut inside its object (hermes, jamba, nemotron_deci).
                State::After if sink.has_open_call() && self.content_calls => sink.end_call(),
                // Not after a marker with no end of its own (`<|python_tag|>`,
                // `functools`, `[TOOL_CALLS]`): Dynamo drops those.
                State::Wrapper
                    if self.content_calls
                        && self.sets.after.is_some()
                        && self.family != Family::Mistral
                        && self.wrapper.close_cut(sink) =>
                {
                    sink.end_call()
                }
                State::After if sink.has_open_call() => {
                    sink.drop_call("the call's end marker never came")
                }
                State::Close if sink.has_open_call() => {
                    sink.drop_call("the call's end marker never came")
                }
                State::Close if self.closing_text => sink.error(
                    "text after a call was taken for its closing markup: its end marker never came",
                ),
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
        self.closing_text = false;
        self.raw.clear();
        self.tentative = false;
        self.release = false;
        self.boundary = true;
        self.content_calls_ended = false;
        self.after_gt = false;
        self.raw_args = false;
        self.state = State::Text;
    }

    fn start_markers(&self) -> &'static [&'static str] {
        self.sets.spec.starts
    }
}

#[cfg(test)]
mod tests;
