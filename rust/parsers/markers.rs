//! Finding markers in streamed text, holding back only what might still become one.

use aho_corasick::{AhoCorasick, MatchKind};

/// A set of literal markers legal in one parser state.
#[derive(Debug, Clone)]
pub struct MarkerSet {
    finder: AhoCorasick,
    markers: Vec<&'static str>,
    starts_marker: [bool; 256],
}

/// Result of scanning a piece of pending text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// `markers[marker]` occupies `start..end`.
    Found {
        start: usize,
        end: usize,
        marker: usize,
    },
    /// No complete marker; `text[..hold_from]` is safe to release and
    /// `text[hold_from..]` may be the beginning of a marker.
    Partial { hold_from: usize },
}

/// Result of scanning text that fills a field of bounded length (a call's name or
/// header), which ends at a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bounded {
    /// The field may still end at a marker within its bound.
    Within(Scan),
    /// No marker starts within the bound: the field is broken. `text[..at]` belongs
    /// to it and scanning resumes at `at`, which depends only on the text, never on
    /// how it was cut, so streamed and whole input give up at the same byte.
    Overflow { at: usize },
}

/// Text held back at the end of a feed because it may be the start of a marker, and a
/// buffer, reused across feeds, that rejoins it with the next feed.
#[derive(Debug, Default)]
pub struct Held {
    pub tail: String,
    scratch: String,
}

impl Held {
    /// The held tail followed by `text`, in the reused buffer; the tail is emptied.
    /// Hand the buffer back with [`Held::reuse`].
    pub fn join(&mut self, text: &str) -> String {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.push_str(&self.tail);
        buf.push_str(text);
        self.tail.clear();
        buf
    }

    pub fn reuse(&mut self, buf: String) {
        self.scratch = buf;
    }
}

impl MarkerSet {
    pub fn new(markers: &[&'static str]) -> Self {
        let finder = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(markers)
            .expect("marker automaton");
        let mut starts_marker = [false; 256];
        for m in markers {
            starts_marker[m.as_bytes()[0] as usize] = true;
        }
        Self {
            finder,
            markers: markers.to_vec(),
            starts_marker,
        }
    }

    pub fn marker(&self, i: usize) -> &'static str {
        self.markers[i]
    }

    /// The earliest complete marker in `text`, or how much of `text` can be released.
    /// A marker found at the very end that is a proper prefix of a longer marker
    /// is still held, since the longer one may be arriving.
    pub fn scan(&self, text: &str) -> Scan {
        if let Some(m) = self.finder.find(text) {
            let (start, end) = (m.start(), m.end());
            // Everything from the match on may still be the start of a longer
            // marker (`<|channel>t` of `<|channel>thought\n`), not only a bare match.
            let rest = &text[start..];
            let could_grow = self
                .markers
                .iter()
                .any(|longer| longer.len() > rest.len() && longer.starts_with(rest));
            if !could_grow {
                return Scan::Found {
                    start,
                    end,
                    marker: m.pattern().as_usize(),
                };
            }
            return Scan::Partial { hold_from: start };
        }
        Scan::Partial {
            hold_from: self.hold_from(text),
        }
    }

    /// [`MarkerSet::scan`] for a field with `room` bytes left before its bound. A
    /// marker starting after the bound (or text past it that can't start one) makes
    /// the field overflow one character past its bound. Markers that must stay
    /// visible after an overflow belong in this set: one that starts past the bound
    /// starts at or after the overflow point.
    pub fn scan_bounded(&self, text: &str, room: usize) -> Bounded {
        let scan = self.scan(text);
        let (Scan::Found { start: end, .. } | Scan::Partial { hold_from: end }) = scan;
        if end <= room {
            return Bounded::Within(scan);
        }
        let mut at = room + 1;
        while !text.is_char_boundary(at) {
            at += 1;
        }
        Bounded::Overflow { at }
    }

    /// Start of the longest suffix of `text` that is a proper prefix of some marker,
    /// on a character boundary; `text.len()` when nothing needs holding.
    pub fn hold_from(&self, text: &str) -> usize {
        let bytes = text.as_bytes();
        let longest = self.markers.iter().map(|m| m.len()).max().unwrap_or(1);
        let window = bytes.len().saturating_sub(longest - 1);
        for pos in window..bytes.len() {
            if !self.starts_marker[bytes[pos] as usize] || !text.is_char_boundary(pos) {
                continue;
            }
            let tail = &bytes[pos..];
            if self
                .markers
                .iter()
                .any(|m| m.len() > tail.len() && m.as_bytes().starts_with(tail))
            {
                return pos;
            }
        }
        bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_partial_marker_on_char_boundary() {
        let set = MarkerSet::new(&["◁/think▷"]);
        let text = "abc◁/thi";
        assert_eq!(set.scan(text), Scan::Partial { hold_from: 3 });
        assert_eq!(set.hold_from("abc"), 3);
    }

    #[test]
    fn finds_earliest_marker() {
        let set = MarkerSet::new(&["</think>", "<tool_call>"]);
        match set.scan("a<tool_call>b</think>") {
            Scan::Found { start, end, marker } => {
                assert_eq!((start, end), (1, 12));
                assert_eq!(set.marker(marker), "<tool_call>");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn holds_marker_that_could_grow() {
        let set = MarkerSet::new(&["<|channel>", "<|channel>thought\n"]);
        assert_eq!(set.scan("x<|channel>"), Scan::Partial { hold_from: 1 });
        assert_eq!(set.scan("x<|channel>tho"), Scan::Partial { hold_from: 1 });
        assert!(matches!(set.scan("x<|channel>t y"), Scan::Found { .. }));
    }

    #[test]
    fn bounded_field_overflows_at_the_same_byte_however_cut() {
        let set = MarkerSet::new(&["<|message|>", "<|call|>"]);
        let text = format!("{}<|call|>Z", "é".repeat(10));
        assert_eq!(
            set.scan_bounded(&text, 30),
            Bounded::Within(Scan::Found {
                start: 20,
                end: 28,
                marker: 1
            })
        );
        // Whole: the marker starts past the bound.
        assert_eq!(set.scan_bounded(&text, 6), Bounded::Overflow { at: 8 });
        // Cut before the marker: the released text already passes the bound.
        assert_eq!(
            set.scan_bounded(&text[..12], 6),
            Bounded::Overflow { at: 8 }
        );
        // A possible marker start within the bound is held, not an overflow.
        assert_eq!(
            set.scan_bounded("ab<|me", 2),
            Bounded::Within(Scan::Partial { hold_from: 2 })
        );
    }

    #[test]
    fn lone_angle_is_held_then_released() {
        let set = MarkerSet::new(&["<tool_call>"]);
        assert_eq!(set.hold_from("text <"), 5);
        assert_eq!(set.hold_from("text <x"), 7);
    }
}
