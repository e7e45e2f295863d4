//! The delimited state machine shared by every marker-pair family.
//!
//! Semantics follow Dynamo's streaming `BasicReasoningParser`, which is
//! what its pipeline runs (the batch path, which trims, is never used there):
//! - whitespace is kept exactly as the model wrote it;
//! - a forced family starts inside reasoning and drops an opener only at the
//!   very start of the output; an opener later inside reasoning is plain text.
//!   The same holds when the caller sets `in_reasoning` (Dynamo's override
//!   would keep that opener as reasoning text; a leaked marker is never wanted);
//! - after a closer, an opener starts a further span (spans concatenate) and a
//!   stray closer in content is dropped;
//! - an exit marker ends reasoning and goes, with everything after it, to content.

use std::sync::{Mutex, OnceLock};

use super::super::markers::{Held, MarkerSet, Scan};
use super::super::{Delta, ReasoningParse};
use super::{feed_held, finish_held, HeldRun};

/// How one family's markers behave.
pub(super) struct Family {
    pub name: &'static str,
    pub openers: &'static [&'static str],
    pub closers: &'static [&'static str],
    /// Output starts inside reasoning unless the caller says otherwise.
    pub forced: bool,
    /// Role labels dropped, like an opener, at the start of a forced output
    /// (Gemma 4's `thought\n` when the template already opened the channel).
    pub labels: &'static [&'static str],
    /// The tool parser's start markers end reasoning (Dynamo's deepseek_r1 keeps
    /// tool markup inside reasoning, as its captures show).
    pub honours_exits: bool,
    /// Markers of the family's own tool region; they end reasoning even without a tool parser.
    pub own_exits: &'static [&'static str],
    /// After a closer, look for further openers.
    pub multi_span: bool,
    /// Drop a closer met in content (Dynamo's "lossless split" for `<think>` families).
    pub drop_stray: bool,
    /// Channel framing that is removed from content (Kimi K3's XTML wrappers).
    pub framing: &'static [&'static str],
    /// Dynamo's `<think>` parser (followed with `reference_streaming`) holds a
    /// possible marker start in content only from two bytes on: a lone `<` after other text goes straight out (so
    /// `.<` + `tool` stays as is), and a marker cut right after it is not
    /// recognised. A piece that is just `<` is still held (char-by-char input).
    pub lone_byte_passes: bool,
}

/// How a dialect reads a family's markers (see [`super::super::dialect::Dialect`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Reading {
    /// One span at most; a closer before it and every marker after it are text.
    pub one_span: bool,
    /// The family's own tool-region markers end reasoning.
    pub own_exits: bool,
    /// Reasoning that a tool call ends loses its trailing whitespace.
    pub trim_at_exit: bool,
    /// Openers are text: nothing is dropped at the start, nothing opens reasoning.
    pub opener_is_text: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Open,
    Close,
    Exit,
    Framing,
}

/// The markers legal in one state, with what each one means.
struct Stage {
    set: MarkerSet,
    markers: Vec<&'static str>,
    kinds: Vec<Kind>,
}

impl Stage {
    fn new(groups: &[(&[&'static str], Kind)]) -> Option<Self> {
        let mut markers = Vec::new();
        let mut kinds = Vec::new();
        for (group, kind) in groups {
            for m in group.iter() {
                if !m.is_empty() && !markers.contains(m) {
                    markers.push(*m);
                    kinds.push(*kind);
                }
            }
        }
        (!markers.is_empty()).then(|| Self {
            set: MarkerSet::new(&markers),
            markers,
            kinds,
        })
    }

    /// Like `MarkerSet::scan`, but at end of output nothing can still grow:
    /// a complete marker at the hold point counts (the longest one wins).
    fn scan(&self, text: &str, last: bool) -> Scan {
        let scan = self.set.scan(text);
        match scan {
            Scan::Partial { hold_from } if last && hold_from < text.len() => {
                let tail = &text[hold_from..];
                self.markers
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| tail.starts_with(**m))
                    .max_by_key(|(_, m)| m.len())
                    .map_or(
                        Scan::Partial {
                            hold_from: text.len(),
                        },
                        |(i, m)| Scan::Found {
                            start: hold_from,
                            end: hold_from + m.len(),
                            marker: i,
                        },
                    )
            }
            other => other,
        }
    }
}

struct Stages {
    reasoning: Stage,
    content: Option<Stage>,
}

/// Marker automata are built once per (family, exit markers, reading) and shared.
fn stages(
    family: &'static Family,
    exits: &'static [&'static str],
    reading: Reading,
) -> &'static Stages {
    type Entry = (
        &'static str,
        &'static [&'static str],
        Reading,
        &'static Stages,
    );
    static CACHE: OnceLock<Mutex<Vec<Entry>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(Vec::new()));
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, _, _, s)) = cache
        .iter()
        .find(|(name, ex, r, _)| *name == family.name && *ex == exits && *r == reading)
    {
        return s;
    }
    let tool_exits: &[&'static str] = if family.honours_exits { exits } else { &[] };
    let own_exits: &[&'static str] = if reading.own_exits {
        family.own_exits
    } else {
        &[]
    };
    let reasoning = Stage::new(&[
        (family.closers, Kind::Close),
        (own_exits, Kind::Exit),
        (tool_exits, Kind::Exit),
    ])
    .expect("every family has a closer");
    let stray: &[&'static str] = if family.drop_stray && !reading.one_span {
        family.closers
    } else {
        &[]
    };
    let openers: &[&'static str] = if reading.opener_is_text {
        &[]
    } else {
        family.openers
    };
    let content = Stage::new(&[
        (openers, Kind::Open),
        (stray, Kind::Close),
        (family.framing, Kind::Framing),
    ]);
    let built: &'static Stages = Box::leak(Box::new(Stages { reasoning, content }));
    cache.push((family.name, exits, reading, built));
    built
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Forced start, nothing seen yet: an opener here is dropped.
    Leading,
    Reasoning,
    Content,
    /// Reasoning is over for good (single-span families): no more markers.
    Passthrough,
}

pub(super) struct Delimited {
    family: &'static Family,
    stages: &'static Stages,
    state: State,
    /// Text that may still become a marker, at most one marker long.
    held: Held,
    /// The family's lone-`<` quirk, when reproducing the reference's streaming.
    lone_byte_passes: bool,
    /// Reasoning ends for good after its first span.
    one_span: bool,
    /// Whitespace ending the reasoning so far, held while a tool call could still
    /// end it (only with [`Reading::trim_at_exit`]).
    trailing_space: Option<String>,
}

impl Delimited {
    pub fn new(
        family: &'static Family,
        in_reasoning: Option<bool>,
        exits: &'static [&'static str],
        reference_streaming: bool,
        reading: Reading,
    ) -> Self {
        let state = if in_reasoning.unwrap_or(family.forced) {
            if reading.opener_is_text {
                State::Reasoning
            } else {
                State::Leading
            }
        } else {
            State::Content
        };
        Self {
            family,
            stages: stages(family, exits, reading),
            state,
            held: Held::default(),
            lone_byte_passes: family.lone_byte_passes && reference_streaming,
            one_span: reading.one_span,
            trailing_space: reading.trim_at_exit.then(String::new),
        }
    }

    /// Reasoning text, its trailing whitespace held where a tool call would drop it.
    fn reasoning(&mut self, text: &str, out: &mut Delta) {
        let Some(space) = self.trailing_space.as_mut() else {
            out.reasoning.push_str(text);
            return;
        };
        let body = text.trim_end();
        if !body.is_empty() {
            out.reasoning.push_str(space);
            space.clear();
            out.reasoning.push_str(body);
        }
        space.push_str(&text[body.len()..]);
    }

    fn after_span(&self) -> State {
        if self.family.multi_span && !self.one_span {
            State::Content
        } else {
            State::Passthrough
        }
    }
}

impl HeldRun for Delimited {
    fn held(&mut self) -> &mut Held {
        &mut self.held
    }

    /// Consume `buf`; without `last`, a possible marker start at the end is kept in `held`.
    fn consume(&mut self, buf: &str, last: bool, out: &mut Delta) {
        let mut pos = 0;
        while pos < buf.len() {
            let rest = &buf[pos..];
            match self.state {
                State::Leading => {
                    let leading = || self.family.openers.iter().chain(self.family.labels);
                    if !last && leading().any(|m| m.len() > rest.len() && m.starts_with(rest)) {
                        self.held.tail.push_str(rest);
                        return;
                    }
                    let opener = leading()
                        .filter(|m| rest.starts_with(**m))
                        .max_by_key(|m| m.len());
                    pos += opener.map_or(0, |m| m.len());
                    self.state = State::Reasoning;
                }
                State::Passthrough => {
                    out.content.push_str(rest);
                    return;
                }
                State::Reasoning => match self.stages.reasoning.scan(rest, last) {
                    Scan::Found { start, end, marker } => {
                        let exit = self.stages.reasoning.kinds[marker] == Kind::Exit;
                        self.reasoning(&rest[..start], out);
                        match self.trailing_space.as_mut() {
                            Some(space) if exit => space.clear(),
                            Some(space) => out.reasoning.push_str(&std::mem::take(space)),
                            None => {}
                        }
                        if exit {
                            // The tool stage needs the marker itself.
                            out.content.push_str(&rest[start..end]);
                        }
                        self.state = self.after_span();
                        pos += end;
                    }
                    Scan::Partial { hold_from } => {
                        self.reasoning(&rest[..hold_from], out);
                        self.held.tail.push_str(&rest[hold_from..]);
                        return;
                    }
                },
                State::Content => {
                    let Some(stage) = &self.stages.content else {
                        out.content.push_str(rest);
                        return;
                    };
                    match stage.scan(rest, last) {
                        Scan::Found { start, end, marker } => {
                            out.content.push_str(&rest[..start]);
                            if stage.kinds[marker] == Kind::Open {
                                self.state = State::Reasoning;
                            }
                            pos += end;
                        }
                        Scan::Partial { hold_from }
                            if self.lone_byte_passes
                                && hold_from > 0
                                && rest.len() - hold_from < 2 =>
                        {
                            out.content.push_str(rest);
                            return;
                        }
                        Scan::Partial { hold_from } => {
                            out.content.push_str(&rest[..hold_from]);
                            self.held.tail.push_str(&rest[hold_from..]);
                            return;
                        }
                    }
                }
            }
        }
    }
}

impl ReasoningParse for Delimited {
    fn feed(&mut self, text: &str, out: &mut Delta) {
        feed_held(self, text, out);
    }

    fn finish(&mut self, out: &mut Delta) {
        finish_held(self, out);
        if let Some(space) = self.trailing_space.as_mut() {
            out.reasoning.push_str(space);
            space.clear();
        }
    }
}
