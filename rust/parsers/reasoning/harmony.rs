//! gpt-oss (Harmony): messages are `<|start|>role<|channel|>name ...<|message|>body<|end|>`.
//!
//! `analysis` bodies are reasoning; `final`, `commentary` and unknown channels are
//! content. A message addressed to a recipient (`to=functions.X` in its header)
//! is a tool call: it goes to content intact, from `<|channel|>` (or from
//! `<|start|>` when the recipient sits in the role part) through its `<|call|>`,
//! so the harmony tool parser sees the whole envelope. Text outside any message
//! is content. The tool parser's exit markers are not needed: the header decides.
//! Like Dynamo, a second analysis message is joined to earlier reasoning with `\n`.

use std::sync::OnceLock;

use super::super::markers::{Held, MarkerSet, Scan};
use super::super::{Delta, ReasoningParse};
use super::{feed_held, finish_held, HeldRun};
use crate::parsers::tools::harmony_whole::{CALL, CHANNEL, END, MESSAGE, RETURN, START};

/// Markers that end a body; the two openers also start the next message.
const BODY_MARKERS: &[&str] = &[END, RETURN, CALL, START, CHANNEL];
const OPENERS: &[&str] = &[START, CHANNEL];
const HEADER_END: &[&str] = &[MESSAGE];

struct Sets {
    between: MarkerSet,
    header: MarkerSet,
    body: MarkerSet,
}

fn sets() -> &'static Sets {
    static SETS: OnceLock<Sets> = OnceLock::new();
    SETS.get_or_init(|| Sets {
        between: MarkerSet::new(OPENERS),
        header: MarkerSet::new(HEADER_END),
        body: MarkerSet::new(BODY_MARKERS),
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Body {
    Reasoning,
    Content,
    /// A tool call, passed through intact.
    Call,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Between,
    /// Collecting a header (kept in `header`, opener included).
    Header,
    Body(Body),
}

pub(super) struct Harmony {
    state: State,
    header: String,
    held: Held,
    /// Some reasoning has been released.
    reasoned: bool,
    /// A new analysis message began after earlier reasoning: separate it.
    separate: bool,
}

impl Harmony {
    pub fn new(in_reasoning: Option<bool>) -> Self {
        let state = if in_reasoning == Some(true) {
            State::Body(Body::Reasoning)
        } else {
            State::Between
        };
        Self {
            state,
            header: String::new(),
            held: Held::default(),
            reasoned: false,
            separate: false,
        }
    }

    /// The header is complete: decide where the body goes.
    fn open_body(&mut self, out: &mut Delta) -> Body {
        let header = self.header.as_str();
        let channel_at = header.find(CHANNEL);
        let recipient_at = header.find("to=");
        let body = match (recipient_at, channel_at) {
            (Some(r), Some(c)) if r > c => {
                out.content.push_str(&header[c..]);
                Body::Call
            }
            (Some(_), _) => {
                out.content.push_str(header);
                Body::Call
            }
            (None, Some(c)) => {
                let name = header[c + CHANNEL.len()..]
                    .split(|ch: char| ch.is_whitespace() || ch == '<')
                    .next()
                    .unwrap_or("");
                if name == "analysis" {
                    self.separate = self.reasoned;
                    Body::Reasoning
                } else {
                    Body::Content
                }
            }
            (None, None) => Body::Content,
        };
        if body == Body::Call {
            out.content.push_str(MESSAGE);
        }
        self.header.clear();
        body
    }

    fn emit(&mut self, body: Body, text: &str, out: &mut Delta) {
        match body {
            Body::Reasoning if !text.is_empty() => {
                if self.separate {
                    out.reasoning.push('\n');
                    self.separate = false;
                }
                self.reasoned = true;
                out.reasoning.push_str(text);
            }
            Body::Reasoning => {}
            Body::Content | Body::Call => out.content.push_str(text),
        }
    }

    /// Plain text in the current state.
    fn text(&mut self, text: &str, out: &mut Delta) {
        match self.state {
            State::Between => out.content.push_str(text),
            State::Header => self.header.push_str(text),
            State::Body(body) => self.emit(body, text, out),
        }
    }
}

impl HeldRun for Harmony {
    fn held(&mut self) -> &mut Held {
        &mut self.held
    }

    fn consume(&mut self, buf: &str, last: bool, out: &mut Delta) {
        let sets = sets();
        let mut pos = 0;
        while pos < buf.len() {
            let rest = &buf[pos..];
            let set = match self.state {
                State::Between => &sets.between,
                State::Header => &sets.header,
                State::Body(_) => &sets.body,
            };
            let (start, end) = match set.scan(rest) {
                Scan::Found { start, end, .. } => (start, end),
                Scan::Partial { hold_from } if !last => {
                    self.text(&rest[..hold_from], out);
                    self.held.tail.push_str(&rest[hold_from..]);
                    return;
                }
                // No marker in these sets is a prefix of another, so at the end
                // a held tail is never a marker.
                Scan::Partial { .. } => {
                    self.text(rest, out);
                    return;
                }
            };
            self.text(&rest[..start], out);
            let marker = &rest[start..end];
            pos += end;
            match self.state {
                State::Between => {
                    self.header.push_str(marker);
                    self.state = State::Header;
                }
                State::Header => {
                    let body = self.open_body(out);
                    self.state = State::Body(body);
                }
                State::Body(body) => {
                    if marker == START || marker == CHANNEL {
                        self.header.push_str(marker);
                        self.state = State::Header;
                    } else {
                        if body == Body::Call {
                            out.content.push_str(marker);
                        }
                        self.state = State::Between;
                    }
                }
            }
        }
    }
}

impl ReasoningParse for Harmony {
    fn feed(&mut self, text: &str, out: &mut Delta) {
        feed_held(self, text, out);
    }

    fn finish(&mut self, out: &mut Delta) {
        finish_held(self, out);
        // A header that never reached `<|message|>` was not one.
        if self.state == State::Header {
            out.content.push_str(&self.header);
            self.header.clear();
            self.state = State::Between;
        }
    }
}
