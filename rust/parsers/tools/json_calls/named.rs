//! Calls written as marker-delimited parts: a name (or id, or header), then a bare
//! arguments object, then the call's end marker (DeepSeek, Kimi, Harmony, Mistral v11).

use super::family::{
    Family, DS_CALL_BEGIN, DS_CALL_END, DS_SEP, HARMONY_CALL, KIMI_CALL_BEGIN, KIMI_CALL_END,
    MISTRAL_CALLS, MISTRAL_CALL_ID, PLAMO_ARGS_END, PLAMO_NAME_BEGIN, PLAMO_REQUEST_BEGIN,
    PLAMO_REQUEST_END,
};
use super::{leading_ws, JsonCalls, State, MAX_NAME};
use crate::parsers::json::Scanned;
use crate::parsers::markers::{Bounded, Scan};
use crate::parsers::CallSink;

impl JsonCalls {
    /// Between the calls of a section: the next call or the section's end.
    pub(super) fn section(&mut self, rest: &str) -> Option<usize> {
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

    /// A call's name, id or header, bounded by `MAX_NAME`.
    pub(super) fn name(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        let set = self.sets.name_end.as_ref()?;
        let room = MAX_NAME.saturating_sub(self.name.len());
        let scan = match set.scan_bounded(rest, room) {
            Bounded::Within(scan) => scan,
            Bounded::Overflow { at } => {
                self.fail("call name too long", sink);
                return Some(at);
            }
        };
        let (taken, found) = match scan {
            Scan::Found { start, end, marker } => (start, Some((end, set.marker(marker)))),
            Scan::Partial { hold_from } => (hold_from, None),
        };
        self.name.push_str(&rest[..taken]);
        let Some((end, marker)) = found else {
            return (taken > 0).then_some(taken);
        };
        if self.sets.spec.skip.contains(&marker) {
            // The call's markup ended before its name did; `Skip` takes the marker.
            self.fail("call without arguments", sink);
            return Some(taken);
        }
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

    /// DeepSeek V3's code fence before the arguments.
    pub(super) fn fence(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        let bytes = rest.as_bytes();
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

    /// A bare arguments object, forwarded verbatim.
    pub(super) fn args(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        let bytes = rest.as_bytes();
        if self.raw_args {
            return self.raw_args(rest, sink);
        }
        if !self.args_started {
            let ws = leading_ws(rest);
            if ws > 0 {
                return Some(ws);
            }
            // Dynamo takes a list too (`["Paris"]`), and Kimi's any text.
            let list = self.compact_args && bytes[0] == b'[';
            if bytes[0] != b'{' && !list {
                // The call's end marker right away: a call without parameters.
                if let Some(close) = &self.sets.close {
                    match close.scan(rest) {
                        Scan::Found { start: 0, .. } => {
                            // Dynamo's DeepSeek V3.1 reads no arguments as invalid JSON.
                            if self.compact_args && self.family == Family::DeepseekV31 {
                                self.fail("arguments are not a JSON object", sink);
                                return Some(0);
                            }
                            // Dynamo's Kimi K2 hands out the empty text as it is.
                            if !(self.compact_args && self.family == Family::KimiK2) {
                                sink.arguments("{}");
                            }
                            sink.end_call();
                            self.state = State::Close;
                            return Some(0);
                        }
                        Scan::Partial { hold_from: 0 } => return None,
                        _ => {}
                    }
                }
                if self.compact_args && self.family == Family::KimiK2 {
                    self.args_text.clear();
                    self.raw_args = true;
                    return Some(0);
                }
                self.fail("arguments are not a JSON object", sink);
                return Some(0);
            }
            self.args_started = true;
            self.args.reset();
            self.args_text.clear();
        }
        // Dynamo's DeepSeek V3.1 cuts the call at its end marker before reading the
        // arguments: JSON left open there (`{"city` + the marker) is no call, and
        // the marker is not read as part of a string.
        let mut json = bytes;
        let mut closes = false;
        if self.compact_args && self.family == Family::DeepseekV31 {
            if let Some(close) = &self.sets.close {
                match close.scan(rest) {
                    Scan::Found { start, .. } => (json, closes) = (&bytes[..start], true),
                    Scan::Partial { hold_from: 0 } => return None,
                    Scan::Partial { hold_from } => json = &bytes[..hold_from],
                }
            }
        }
        match self.args.feed(json) {
            Scanned::More => {
                self.take_args(&rest[..json.len()], sink);
                if closes {
                    self.fail("the call ends inside its arguments", sink);
                }
                Some(json.len())
            }
            Scanned::Done(n) => {
                self.take_args(&rest[..n], sink);
                if self.compact_args {
                    let text = std::mem::take(&mut self.args_text);
                    match serde_json::from_str::<serde_json::Value>(&text) {
                        Ok(value) => sink.arguments(&value.to_string()),
                        Err(_) => sink.arguments(&text),
                    }
                }
                // Dynamo keeps such a call only once its own end marker comes.
                if !(self.compact_args && self.sets.close.is_some()) {
                    sink.end_call();
                }
                self.state = if self.sets.close.is_some() {
                    State::Close
                } else {
                    State::Text
                };
                Some(n)
            }
            Scanned::Invalid(k, why) => {
                self.take_args(&rest[..k], sink);
                if self.compact_args && self.family == Family::KimiK2 {
                    // Dynamo's Kimi K2 keeps arguments that are not JSON as written.
                    self.raw_args = true;
                } else {
                    self.fail(why, sink);
                }
                Some(k)
            }
        }
    }

    /// Kimi K2 arguments that are not JSON: their text, up to the call's end marker.
    fn raw_args(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        let close = self.sets.close.as_ref()?;
        let (taken, found) = match close.scan(rest) {
            Scan::Found { start, .. } => (start, true),
            Scan::Partial { hold_from } => (hold_from, false),
        };
        self.args_text.push_str(&rest[..taken]);
        if !found {
            return (taken > 0).then_some(taken);
        }
        self.raw_args = false;
        let text = std::mem::take(&mut self.args_text);
        sink.arguments(text.trim());
        self.state = State::Close;
        Some(taken)
    }

    /// Argument bytes: forwarded as they come, or gathered to be written compactly.
    fn take_args(&mut self, piece: &str, sink: &mut CallSink) {
        if self.compact_args {
            self.args_text.push_str(piece);
        } else {
            sink.arguments(piece);
        }
    }

    /// Markup after a call, or a broken call's rest, up to where parsing resumes.
    pub(super) fn close_or_skip(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        // The skip markers include the close markers, so markup after a call also ends
        // at its section's end when the call's own end marker is misspelled or missing.
        let Some(set) = self.sets.skip.as_ref() else {
            return Some(rest.len());
        };
        let (taken, found) = match set.scan(rest) {
            Scan::Found { start, end, marker } => (start, Some((end, set.marker(marker)))),
            Scan::Partial { hold_from } => (hold_from, None),
        };
        if self.state == State::Close {
            // Whitespace and DeepSeek V3's closing fence are the expected markup.
            let unexpected = rest[..taken].trim_matches(|c: char| c.is_whitespace() || c == '`');
            self.closing_text |= !unexpected.is_empty();
        }
        let Some((end, marker)) = found else {
            return (taken > 0).then_some(taken);
        };
        self.closing_text = false;
        if self.state == State::Close && sink.has_open_call() {
            if matches!(marker, DS_CALL_END | KIMI_CALL_END | HARMONY_CALL) {
                sink.end_call();
            } else {
                sink.drop_call(format!(
                    "the call's end marker never came (`{marker}` first)"
                ));
            }
        }
        match marker {
            // A new Mistral call resynchronises; leave its marker to Text.
            MISTRAL_CALLS => {
                self.state = State::Text;
                return Some(taken);
            }
            // LFM2's end marker is spelled like Kimi's call end; only sectioned families
            // go back to their section.
            DS_CALL_END | KIMI_CALL_END | PLAMO_ARGS_END if self.sets.section.is_some() => {
                self.state = State::Section
            }
            _ => self.state = State::Text,
        }
        Some(end)
    }
}
