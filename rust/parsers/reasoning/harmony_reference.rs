//! Dynamo 1.6.1's gpt_oss reasoning parser (openai-harmony's streaming parser,
//! started on an assistant header), reproduced on text for the pipeline's
//! reference mode (`ChatOptions::reference_streaming`). It loses text a model
//! writes outside Harmony's grammar, so the standalone parsers never use it
//! (they run [`super::harmony`]). What the live reference does, as the
//! differential fuzzer pinned it down:
//!
//! - the output starts inside a header: everything up to `<|message|>` (other
//!   markers too) is the first message's header;
//! - a header names its channel after `<|channel|>`; beside it at most a
//!   recipient and a content type (`assistant` dropped first; after `<|start|>`
//!   a role first); more words, or an empty channel, are a parse error;
//! - `analysis` bodies are reasoning (dropped when their header has a recipient
//!   or a content type), `final` and recipient-less `commentary` bodies are
//!   content, a `commentary` body to a `functions.…` recipient is a
//!   tool call (its envelope goes to content from `<|channel|>`, for the harmony
//!   tool parser); other recipients, other channels, and no channel, are dropped;
//! - `<|end|>`, `<|return|>` and `<|call|>` end a body; other markers inside
//!   one are text; a new message of a kind that already wrote text is
//!   separated from it by `\n`;
//! - between messages only `<|start|>` opens a header; anything else, and a
//!   header that does not parse, drops text up to the next `<|start|>`;
//! - a piece of output (one feed, with any marker prefix held before it) that
//!   holds `<|call|>` also goes to content whole, as written, after what it
//!   released (the tool parser finds calls in it);
//! - a call (a `commentary` body with a recipient) is held, its header rebuilt
//!   as `<|channel|>…<|message|>` when its body begins, and goes to content
//!   when its body ends (`<|call|>`, `<|end|>` or `<|return|>`), from its last
//!   `<|channel|>` on (one written in its body starts it again), followed by
//!   the piece that ended it as written; a call the output cuts is dropped;
//! - a parse error, and each piece dropped while resynchronizing, drops
//!   everything the piece released, but a call the piece ended still goes out,
//!   followed by the piece up to its end marker (`<|end|>[` gives `…<|end|>`);
//! - whatever is still held when the output ends is dropped.

use std::sync::OnceLock;

use super::super::markers::{Held, MarkerSet, Scan};
use super::super::{Delta, ReasoningParse};
use super::{feed_held, HeldRun};
use crate::parsers::tools::harmony_whole::{
    parse_header, CALL, CHANNEL, END, MARKERS as SPECIALS, MESSAGE, RETURN, START,
};

fn specials() -> &'static MarkerSet {
    static SET: OnceLock<MarkerSet> = OnceLock::new();
    SET.get_or_init(|| MarkerSet::new(SPECIALS))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Body {
    Reasoning,
    Content,
    /// A tool call: its text goes to content as written.
    Call,
    Dropped,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Collecting a header; `role_known` for the first one (the assistant's).
    Header {
        role_known: bool,
    },
    Body(Body),
    /// After a message: only `<|start|>` may come.
    ExpectStart,
    /// After a parse error: dropping up to the next `<|start|>`.
    Resync,
}

pub(super) struct ReferenceHarmony {
    state: State,
    header: String,
    held: Held,
    /// Reasoning, and content, were written: a next message of that kind is separated.
    reasoned: bool,
    answered: bool,
    separate: bool,
    /// The piece being consumed holds `<|call|>`: it goes out whole at its end.
    whole: bool,
    /// The call being held: its rebuilt header and its body so far.
    call: String,
    /// The piece being consumed ended a call: the call, then the piece, go out.
    call_ended: bool,
    /// Where the end marker of that call ends in the piece.
    call_end: usize,
    /// The piece being consumed met a parse error.
    failed: bool,
}

impl ReferenceHarmony {
    pub fn new(in_reasoning: Option<bool>) -> Self {
        let state = if in_reasoning == Some(true) {
            State::Body(Body::Reasoning)
        } else {
            State::Header { role_known: true }
        };
        Self {
            state,
            header: String::new(),
            held: Held::default(),
            reasoned: false,
            answered: false,
            separate: false,
            whole: false,
            call: String::new(),
            call_ended: false,
            call_end: 0,
            failed: false,
        }
    }

    /// The header reached `<|message|>`: the body it opens, or `None` when it
    /// does not parse. A call's rebuilt header starts the held call.
    fn open_body(&mut self, role_known: bool) -> Option<Body> {
        let header = std::mem::take(&mut self.header);
        let parsed = parse_header(&header, role_known)?;
        let body = match parsed.channel {
            // An analysis header with a recipient or a content type drops its
            // body (live-checked: `s<|channel|>analysis`, `analysis to=x`,
            // `analysis <|constrain|>json`); `final` keeps its body with them.
            Some("analysis") if parsed.bare => {
                self.separate = self.reasoned;
                Body::Reasoning
            }
            // Only a recipient `functions.…` makes a call (live-checked: `to=g`,
            // `to=functions` and `to=browser.x` bodies are dropped).
            Some("commentary")
                if parsed.recipient.as_deref().is_some_and(|r| {
                    r.strip_prefix("to=").unwrap_or(r).starts_with("functions.")
                }) =>
            {
                self.call.clear();
                self.call.push_str(CHANNEL);
                self.call.push_str(parsed.after_channel.unwrap_or(""));
                self.call.push_str(MESSAGE);
                Body::Call
            }
            Some("final") | Some("commentary")
                if parsed.channel == Some("final") || parsed.recipient.is_none() =>
            {
                self.separate = self.answered;
                Body::Content
            }
            _ => Body::Dropped,
        };
        Some(body)
    }

    fn text(&mut self, text: &str, out: &mut Delta) {
        match self.state {
            State::Header { .. } => self.header.push_str(text),
            State::Body(Body::Call) if !self.whole => self.call.push_str(text),
            State::Body(body @ (Body::Reasoning | Body::Content)) if !text.is_empty() => {
                let (target, wrote) = if body == Body::Reasoning {
                    (&mut out.reasoning, &mut self.reasoned)
                } else {
                    (&mut out.content, &mut self.answered)
                };
                if self.separate {
                    target.push('\n');
                    self.separate = false;
                }
                *wrote = true;
                target.push_str(text);
            }
            State::Body(_) => {}
            State::ExpectStart | State::Resync if !text.is_empty() => self.fail(),
            State::ExpectStart | State::Resync => {}
        }
    }

    fn marker(&mut self, marker: &str, out: &mut Delta) {
        self.state = match self.state {
            State::Header { role_known } if marker == MESSAGE => match self.open_body(role_known) {
                Some(body) => State::Body(body),
                None => {
                    self.failed = true;
                    State::Resync
                }
            },
            State::Header { .. } => {
                self.header.push_str(marker);
                self.state
            }
            State::Body(body) if [END, RETURN, CALL].contains(&marker) => {
                self.call_ended |= body == Body::Call;
                State::ExpectStart
            }
            State::Body(_) => {
                self.text(marker, out);
                self.state
            }
            State::ExpectStart | State::Resync if marker == START => {
                State::Header { role_known: false }
            }
            State::ExpectStart | State::Resync => {
                self.failed = true;
                State::Resync
            }
        };
    }

    fn fail(&mut self) {
        self.failed = true;
        self.state = State::Resync;
    }
}

impl HeldRun for ReferenceHarmony {
    fn held(&mut self) -> &mut Held {
        &mut self.held
    }

    fn consume(&mut self, buf: &str, last: bool, out: &mut Delta) {
        let (content, reasoning) = (out.content.len(), out.reasoning.len());
        let ready = self.piece(buf, last, out);
        if self.failed {
            out.content.truncate(content);
            out.reasoning.truncate(reasoning);
            if self.call_ended {
                self.release_call(out);
                out.content.push_str(&buf[..self.call_end]);
            }
        } else if self.call_ended {
            self.release_call(out);
            out.content.push_str(&buf[..ready]);
        } else if self.whole {
            out.content.push_str(&buf[..ready]);
        }
        self.whole = false;
        self.call_ended = false;
        self.failed = false;
    }
}

impl ReferenceHarmony {
    /// The held call goes to content from its last `<|channel|>` on: the
    /// reference rebuilds it from the last channel token it read, so a
    /// `<|channel|>` written in the body cuts off what came before
    /// (live-checked: `…<|message|>{"a` + `b<|channel|>commentary to=functions.g`
    /// + `…{"x":1}` + `<|call|>` calls `g`).
    fn release_call(&mut self, out: &mut Delta) {
        let call = std::mem::take(&mut self.call);
        let from = call.rfind(CHANNEL).unwrap_or(0);
        out.content.push_str(&call[from..]);
    }

    /// Consume one piece; returns how much of it was not held.
    fn piece(&mut self, buf: &str, last: bool, out: &mut Delta) -> usize {
        // A held tail is a proper prefix of a marker: never a whole `<|call|>`.
        self.whole = buf.contains(CALL);
        let mut pos = 0;
        while pos < buf.len() {
            let rest = &buf[pos..];
            match specials().scan(rest) {
                Scan::Found { start, end, .. } => {
                    self.text(&rest[..start], out);
                    let ended = self.call_ended;
                    self.marker(&rest[start..end], out);
                    if self.call_ended && !ended {
                        self.call_end = pos + end;
                    }
                    pos += end;
                }
                Scan::Partial { hold_from } if !last => {
                    self.text(&rest[..hold_from], out);
                    self.held.tail.push_str(&rest[hold_from..]);
                    break;
                }
                Scan::Partial { .. } => {
                    self.text(rest, out);
                    break;
                }
            }
        }
        buf.len() - self.held.tail.len()
    }
}

impl ReasoningParse for ReferenceHarmony {
    fn feed(&mut self, text: &str, out: &mut Delta) {
        feed_held(self, text, out);
    }

    /// The reference drops a held marker prefix, an unfinished header and a
    /// call the output cut.
    fn finish(&mut self, _out: &mut Delta) {
        self.held.tail.clear();
        self.header.clear();
        self.call.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(pieces: &[&str]) -> String {
        let mut parser = ReferenceHarmony::new(None);
        let mut out = Delta::default();
        for piece in pieces {
            parser.feed(piece, &mut out);
        }
        parser.finish(&mut out);
        out.content
    }

    #[test]
    fn a_held_call_goes_out_from_its_last_channel_marker() {
        let head = "<|channel|>commentary to=functions.f<|message|>{\"a";
        assert_eq!(
            content(&[
                head,
                "b<|channel|>commentary to=functions.g",
                " json<|message|>{}",
                "<|call|>"
            ]),
            "<|channel|>commentary to=functions.g json<|message|>{}<|call|>"
        );
        assert_eq!(
            content(&[head, "b}", "<|call|>"]),
            "<|channel|>commentary to=functions.f<|message|>{\"ab}<|call|>"
        );
    }
}
