//! Olmo 3: `<function_calls>`, then one pythonic call per line (JSON's `true`, `false`
//! and `null` are read too), then `</function_calls>`. The block is converted once it
//! closes, with the pythonic list converter; a block that does not convert is reported
//! and dropped, one that never closes likewise.

use std::sync::OnceLock;

use super::pythonic::convert_list;
use crate::parsers::markers::{Held, MarkerSet, Scan};
use crate::parsers::{CallSink, ToolParse};

const OPEN: &str = "<function_calls>";
const CLOSE: &str = "</function_calls>";
const START: &[&str] = &[OPEN];

struct Sets {
    text: MarkerSet,
    block: MarkerSet,
}

fn sets() -> &'static Sets {
    static SETS: OnceLock<Sets> = OnceLock::new();
    SETS.get_or_init(|| Sets {
        text: MarkerSet::new(START),
        block: MarkerSet::new(&[CLOSE]),
    })
}

pub(super) struct Olmo3 {
    in_block: bool,
    held: Held,
    block: String,
}

impl Olmo3 {
    pub(super) fn new() -> Self {
        Self {
            in_block: false,
            held: Held::default(),
            block: String::new(),
        }
    }

    fn close_block(&mut self, sink: &mut CallSink) {
        let mut list = String::with_capacity(self.block.len() + 2);
        list.push('[');
        for line in self.block.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if list.len() > 1 {
                list.push_str(", ");
            }
            list.push_str(line);
        }
        list.push(']');
        self.block.clear();
        match convert_list(&list, true) {
            Ok(calls) if calls.is_empty() => sink.error("tool-call block without a call"),
            Ok(calls) => {
                for (name, arguments) in calls {
                    sink.begin_call(&name, None);
                    sink.arguments(&arguments);
                    sink.end_call();
                }
            }
            Err(why) => sink.error(format!("malformed Olmo 3 tool call: {why}")),
        }
    }
}

impl ToolParse for Olmo3 {
    fn feed(&mut self, text: &str, sink: &mut CallSink) {
        let buf = self.held.join(text);
        let mut rest = buf.as_str();
        while !rest.is_empty() {
            let set = if self.in_block {
                &sets().block
            } else {
                &sets().text
            };
            match set.scan(rest) {
                Scan::Found { start, end, .. } => {
                    if self.in_block {
                        self.block.push_str(&rest[..start]);
                        self.close_block(sink);
                    } else {
                        sink.content(&rest[..start]);
                    }
                    self.in_block = !self.in_block;
                    rest = &rest[end..];
                }
                Scan::Partial { hold_from } => {
                    if self.in_block {
                        self.block.push_str(&rest[..hold_from]);
                    } else {
                        sink.content(&rest[..hold_from]);
                    }
                    self.held.tail.push_str(&rest[hold_from..]);
                    break;
                }
            }
        }
        self.held.reuse(buf);
    }

    fn finish(&mut self, sink: &mut CallSink) {
        let held = std::mem::take(&mut self.held.tail);
        if self.in_block {
            sink.error("Olmo 3 tool-call block not closed");
            self.block.clear();
            self.in_block = false;
        } else {
            sink.content(&held);
        }
    }

    fn start_markers(&self) -> &'static [&'static str] {
        START
    }
}
