//! Muse (Spark, Glimmer): messages are `<|start|>assistant to=RECIPIENT<|message|>body`
//! ended by `<|eom|>` or `<|eot|>`. The chat template ends the prompt at
//! `<|start|>assistant`, so the first header is just ` to=self<|message|>`.
//!
//! `to=self` bodies are reasoning (a later one is joined with `\n`); `to=user` and
//! `to=commentary` bodies, and text outside any message, are content; `to=developer`
//! bodies are dropped; any other recipient is a tool, whose body (the ATEM block) goes
//! to content for the muse tool parser. Headers and terminators are framing.

use std::sync::OnceLock;

use super::super::markers::{Held, MarkerSet, Scan};
use super::super::{Delta, ReasoningParse};
use super::{feed_held, finish_held, HeldRun};

const START: &str = "<|start|>";
const MESSAGE: &str = "<|message|>";
const EOM: &str = "<|eom|>";
const EOT: &str = "<|eot|>";
/// The recipient part of a header.
const TO: &str = "to=";

struct Sets {
    between: MarkerSet,
    header: MarkerSet,
    body: MarkerSet,
}

fn sets() -> &'static Sets {
    static SETS: OnceLock<Sets> = OnceLock::new();
    SETS.get_or_init(|| Sets {
        between: MarkerSet::new(&[START]),
        header: MarkerSet::new(&[MESSAGE]),
        body: MarkerSet::new(&[EOM, EOT, START]),
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Reasoning,
    Content,
    Dropped,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// The very start: the first header may come without `<|start|>assistant`.
    Opening,
    Between,
    Header,
    Body(Route),
}

pub(super) struct Muse {
    state: State,
    header: String,
    held: Held,
    reasoned: bool,
    separate: bool,
}

impl Muse {
    pub fn new(in_reasoning: Option<bool>) -> Self {
        Self {
            state: match in_reasoning {
                Some(true) => State::Body(Route::Reasoning),
                Some(false) => State::Between,
                None => State::Opening,
            },
            header: String::new(),
            held: Held::default(),
            reasoned: false,
            separate: false,
        }
    }

    fn route(&mut self) -> Route {
        let recipient = self.header.find(TO).map_or("user", |at| {
            self.header[at + TO.len()..]
                .split(|c: char| c.is_whitespace() || c == '<')
                .next()
                .unwrap_or("")
        });
        let route = match recipient {
            "self" => {
                self.separate = self.reasoned;
                Route::Reasoning
            }
            "developer" => Route::Dropped,
            _ => Route::Content,
        };
        self.header.clear();
        route
    }

    fn text(&mut self, text: &str, out: &mut Delta) {
        match self.state {
            State::Opening | State::Between | State::Body(Route::Content) => {
                out.content.push_str(text)
            }
            State::Header => self.header.push_str(text),
            State::Body(Route::Reasoning) if !text.is_empty() => {
                if self.separate {
                    out.reasoning.push('\n');
                    self.separate = false;
                }
                self.reasoned = true;
                out.reasoning.push_str(text);
            }
            State::Body(_) => {}
        }
    }
}

impl HeldRun for Muse {
    fn held(&mut self) -> &mut Held {
        &mut self.held
    }

    fn consume(&mut self, buf: &str, last: bool, out: &mut Delta) {
        let sets = sets();
        let mut pos = 0;
        while pos < buf.len() {
            let rest = &buf[pos..];
            if self.state == State::Opening {
                let ws = rest.len() - rest.trim_start().len();
                let head = &rest[ws..];
                if head.starts_with(TO) {
                    // ` to=self` continues the prompt's `<|start|>assistant`: all header.
                    self.state = State::Header;
                    pos += ws;
                } else if !last && TO.starts_with(head) {
                    self.held.tail.push_str(rest);
                    return;
                } else {
                    self.state = State::Between;
                }
                continue;
            }
            let set = match self.state {
                State::Header => &sets.header,
                State::Body(_) => &sets.body,
                _ => &sets.between,
            };
            let (start, end) = match set.scan(rest) {
                Scan::Found { start, end, .. } => (start, end),
                Scan::Partial { hold_from } if !last => {
                    self.text(&rest[..hold_from], out);
                    self.held.tail.push_str(&rest[hold_from..]);
                    return;
                }
                // No marker here is a prefix of another: a held tail is text.
                Scan::Partial { .. } => {
                    self.text(rest, out);
                    return;
                }
            };
            self.text(&rest[..start], out);
            let marker = &rest[start..end];
            pos += end;
            self.state = match self.state {
                State::Header => State::Body(self.route()),
                _ if marker == START => {
                    self.header.push_str(START);
                    State::Header
                }
                _ => State::Between,
            };
        }
    }
}

impl ReasoningParse for Muse {
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
