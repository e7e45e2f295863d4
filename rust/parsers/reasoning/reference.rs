//! Dynamo 1.6.1's streaming `<think>` parser, reproduced byte for byte for the
//! pipeline's reference mode (`ChatOptions::reference_streaming`). Its results
//! depend on how the text was cut and it loses text, so the standalone parsers
//! never use it (they run [`super::delimited`]). What the live reference does,
//! as the differential fuzzer pinned it down:
//!
//! - text is buffered per feed; a `<think>` at the very start of the buffer is
//!   dropped once per reasoning span (again after each `</think>`), so a second
//!   `<think>`, or one cut in two pieces after other reasoning, stays as text;
//! - inside reasoning, a tail that may start `</think>` is held from two bytes
//!   on; before the span's `<think>` was dropped, a whole buffer that may still
//!   become `<think>` waits (a lone `<`, but not `}<`);
//! - in content, `<think>` opens a further span and a stray `</think>` is
//!   dropped; a tail that may start either is held from two bytes on, so a lone
//!   `<` goes straight out;
//! - whatever is still held when the output ends is dropped.

use super::super::{Delta, ReasoningParse};

pub(super) struct ReferenceThink {
    open: &'static str,
    close: &'static str,
    in_reasoning: bool,
    /// This span's leading `<think>` was dropped (or reasoning began at one).
    stripped: bool,
    buffer: String,
}

impl ReferenceThink {
    pub fn new(open: &'static str, close: &'static str, in_reasoning: bool) -> Self {
        Self {
            open,
            close,
            in_reasoning,
            stripped: false,
            buffer: String::new(),
        }
    }
}

/// The length of the longest suffix of `text` that is a prefix of `marker`.
fn overlap(text: &str, marker: &str) -> usize {
    (1..=marker.len().min(text.len()))
        .rev()
        .find(|&n| marker.is_char_boundary(n) && text.ends_with(&marker[..n]))
        .unwrap_or(0)
}

/// Where `marker` first occurs in `text`. The texts are a token or two long: `str::find`
/// would build a two-way searcher for `marker` on every call, which costs more than
/// checking each occurrence of the marker's first byte.
fn find(text: &str, marker: &str) -> Option<usize> {
    let (hay, needle) = (text.as_bytes(), marker.as_bytes());
    let Some(&first) = needle.first() else {
        return Some(0);
    };
    let mut from = 0;
    while let Some(i) = memchr::memchr(first, &hay[from..]) {
        let at = from + i;
        if hay[at..].starts_with(needle) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// An overlap counts from `min` bytes on.
fn at_least(n: usize, min: usize) -> usize {
    if n >= min {
        n
    } else {
        0
    }
}

impl ReasoningParse for ReferenceThink {
    fn feed(&mut self, text: &str, out: &mut Delta) {
        self.buffer.push_str(text);
        let mut pos = 0;
        loop {
            let rest = &self.buffer[pos..];
            if !self.stripped && rest.starts_with(self.open) {
                pos += self.open.len();
                self.stripped = true;
                self.in_reasoning = true;
                continue;
            }
            if self.in_reasoning {
                if let Some(at) = find(rest, self.close) {
                    out.reasoning.push_str(&rest[..at]);
                    pos += at + self.close.len();
                    self.in_reasoning = false;
                    self.stripped = false;
                    continue;
                }
                // Before the span's `<think>`, a buffer that may still become one waits whole.
                if !self.stripped && self.open.starts_with(rest) {
                    break;
                }
                let cut = rest.len() - at_least(overlap(rest, self.close), 2);
                out.reasoning.push_str(&rest[..cut]);
                pos += cut;
                break;
            }
            let open = find(rest, self.open);
            let close = find(rest, self.close);
            match (open, close) {
                (Some(o), c) if c.map_or(true, |c| o < c) => {
                    out.content.push_str(&rest[..o]);
                    pos += o + self.open.len();
                    self.in_reasoning = true;
                    self.stripped = true;
                }
                (_, Some(c)) => {
                    out.content.push_str(&rest[..c]);
                    pos += c + self.close.len();
                }
                _ => {
                    let hold = at_least(overlap(rest, self.open).max(overlap(rest, self.close)), 2);
                    let cut = rest.len() - hold;
                    out.content.push_str(&rest[..cut]);
                    pos += cut;
                    break;
                }
            }
        }
        self.buffer.drain(..pos);
    }

    fn finish(&mut self, _out: &mut Delta) {
        self.buffer.clear();
    }
}
