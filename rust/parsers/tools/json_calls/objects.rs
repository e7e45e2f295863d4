//! Calls written as objects (`{"name": ..., "arguments": ...}`, alone or in a list)
//! and pythonic call lists.

use super::family::Family;
use super::pythonic::{self, ListStep};
use super::wrapper::WStep;
use super::{leading_ws, JsonCalls, State};
use crate::parsers::markers::Scan;
use crate::parsers::CallSink;

impl JsonCalls {
    /// In a list of call objects: the next element, `,` or `]`.
    pub(super) fn list(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        let bytes = rest.as_bytes();
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

    /// Inside a `{"name": ..., "arguments": ...}` object.
    pub(super) fn wrapper(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
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

    /// Dynamo dialect: whitespace after a call is markup only before the call's end
    /// marker (or hermes' next object in the block); otherwise it is content, as is a
    /// llama3 `;` (measured: `[…] ok` keeps ` ok`, `{…}; {…}` keeps `;`). `None`:
    /// no whitespace here, for [`Self::after`] to go on.
    fn space_after_call(&mut self, rest: &str, sink: &mut CallSink) -> Option<Option<usize>> {
        let ws = leading_ws(rest);
        if ws == 0 {
            return None;
        }
        if ws == rest.len() {
            return Some(None);
        }
        let next = &rest[ws..];
        let markup = match &self.sets.after {
            Some(after) => match after.scan(next) {
                Scan::Found { start: 0, .. } => true,
                Scan::Partial { hold_from: 0 } => return Some(None),
                _ => false,
            },
            None => false,
        } || self.sets.spec.needs_end && sink.has_open_call() && next.starts_with('{');
        if markup {
            return Some(Some(ws));
        }
        if self.sets.spec.needs_end && sink.has_open_call() {
            // Text between the call and its end marker: `after` decides.
            return None;
        }
        self.state = State::Text;
        Some(Some(0))
    }

    /// After a call object or list: its optional end marker.
    pub(super) fn after(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        let bytes = rest.as_bytes();
        if self.content_calls {
            if let Some(step) = self.space_after_call(rest, sink) {
                return step;
            }
        }
        let llama = self.family == Family::Llama3Json;
        let skip = rest
            .bytes()
            .position(|b| !(matches!(b, b' ' | b'\t' | b'\n' | b'\r') || llama && b == b';'))
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

    /// A pythonic call list, up to its closing `]`; its calls are built whole.
    pub(super) fn python(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        match self.py.feed(rest.as_bytes()) {
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
        }
    }
}
