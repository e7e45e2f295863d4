//! How a call begins: plain text up to an opener, then what follows the opener.

use super::family::Family;
use super::{leading_ws, JsonCalls, State};
use crate::parsers::markers::Scan;
use crate::parsers::CallSink;

impl JsonCalls {
    /// Plain text: content up to a call opener.
    pub(super) fn text(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        if self.calls_in_content() {
            if let Some(used) = self.text_before_content_call(rest, sink) {
                return used;
            }
        }
        let bytes = rest.as_bytes();
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

    /// Text while calls written in the content are read: content up to the first `{`
    /// or `[` that comes before any marker, less the whitespace just before it (which
    /// goes with a call); trailing whitespace waits for what follows it. `None`: a
    /// marker comes first, for [`Self::text`] to handle.
    fn text_before_content_call(
        &mut self,
        rest: &str,
        sink: &mut CallSink,
    ) -> Option<Option<usize>> {
        let (marker_at, found) = match self.sets.text.scan(rest) {
            Scan::Found { start, .. } => (start, true),
            Scan::Partial { hold_from } => (hold_from, false),
        };
        let opener = self.content_opener(&rest[..marker_at]);
        if opener.is_none() && found {
            return None;
        }
        self.boundary = false;
        let cut = opener.unwrap_or(marker_at);
        let ws_from = rest[..cut].trim_end_matches([' ', '\t', '\n', '\r']).len();
        if ws_from > 0 {
            sink.content(&rest[..ws_from]);
            return Some(Some(ws_from));
        }
        if opener.is_none() {
            // Whitespace, maybe a marker's first bytes: they belong to what follows.
            return Some(None);
        }
        self.start_in_content();
        Some(Some(0))
    }

    /// Where a call in the content may open: the first `{` or `[`, except a `{` right
    /// after a `>` (Dynamo's jail starts on a token that begins with `{` or `[`, and
    /// tokenizers merge `>{`, so `<tool_call>{…}` is text to a family without that tag).
    fn content_opener(&self, text: &str) -> Option<usize> {
        let bytes = text.as_bytes();
        let mut from = 0;
        while let Some(i) = text[from..].find(['{', '[']).map(|i| from + i) {
            let after_gt = if i == 0 {
                self.after_gt
            } else {
                bytes[i - 1] == b'>'
            };
            if !(bytes[i] == b'{' && after_gt) {
                return Some(i);
            }
            from = i + 1;
        }
        None
    }

    /// After a start marker: what kind of call this is.
    pub(super) fn open(&mut self, rest: &str, sink: &mut CallSink) -> Option<usize> {
        let bytes = rest.as_bytes();
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
}
