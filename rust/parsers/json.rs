//! Incremental JSON scanning for streamed tool-call arguments.
//!
//! [`JsonScanner`] is a push-down automaton over bytes: it validates one JSON
//! value as it arrives and says where the value ends, without building it.
//! Arguments are forwarded verbatim, so every byte the scanner accepted is
//! final the moment it is scanned; nothing is re-parsed or re-serialized.

/// Where a scanner stands after a `feed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scanned {
    /// All bytes were consumed and the value is not finished yet.
    More,
    /// The value ended; it took this many bytes of the fed slice.
    Done(usize),
    /// The byte at this offset of the fed slice cannot continue the value.
    Invalid(usize, &'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpDigits,
}

impl Num {
    fn can_end(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::ExpDigits)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lex {
    /// A value must start here (whitespace allowed).
    Value,
    /// Just after `[`: a value or `]`.
    ValueOrClose,
    /// Just after `{`: a key or `}`.
    KeyOrClose,
    /// After `,` in an object: a key.
    Key,
    Colon,
    CommaOrClose,
    Str {
        key: bool,
    },
    Escape {
        key: bool,
    },
    Hex {
        key: bool,
        left: u8,
    },
    Number(Num),
    Literal {
        word: &'static [u8],
        at: u8,
    },
    Done,
}

/// Validates one JSON value pushed in pieces. O(1) work per byte; the only
/// memory is one byte per open container.
#[derive(Debug, Clone)]
pub struct JsonScanner {
    lex: Lex,
    /// Open containers, innermost last: `true` for an object.
    stack: Vec<bool>,
}

impl Default for JsonScanner {
    fn default() -> Self {
        Self::new()
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl JsonScanner {
    pub fn new() -> Self {
        Self {
            lex: Lex::Value,
            stack: Vec::new(),
        }
    }

    /// What closes a value cut off here (an open string, then the open lists and
    /// objects, innermost first), or `None` when no suffix makes it valid JSON (cut
    /// inside a key, a literal, an escape, or where a value or key must follow).
    pub fn closing(&self) -> Option<String> {
        let mut out = String::new();
        match self.lex {
            Lex::Str { key: false } => out.push('"'),
            Lex::Escape { key: false } => out.push_str("\\\""),
            Lex::Number(n) if n.can_end() => {}
            Lex::ValueOrClose | Lex::KeyOrClose | Lex::CommaOrClose | Lex::Done => {}
            _ => return None,
        }
        out.extend(
            self.stack
                .iter()
                .rev()
                .map(|&object| if object { '}' } else { ']' }),
        );
        Some(out)
    }

    /// Start over for a new value, keeping the allocation.
    pub fn reset(&mut self) {
        self.lex = Lex::Value;
        self.stack.clear();
    }

    /// True if the value could end right here (a top-level number awaiting its delimiter).
    pub fn can_end_here(&self) -> bool {
        self.stack.is_empty() && matches!(self.lex, Lex::Number(n) if n.can_end())
    }

    /// Scan the next bytes. Stops at the end of the value; later bytes are left unread.
    pub fn feed(&mut self, bytes: &[u8]) -> Scanned {
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match self.lex {
                Lex::Str { key } => {
                    // Fast path over plain string bytes.
                    let run = bytes[i..]
                        .iter()
                        .position(|&c| c == b'"' || c == b'\\' || c < 0x20);
                    match run {
                        None => return Scanned::More,
                        Some(k) => {
                            i += k;
                            match bytes[i] {
                                b'"' => {
                                    if key {
                                        self.lex = Lex::Colon;
                                    } else if self.end_value() {
                                        return Scanned::Done(i + 1);
                                    }
                                }
                                b'\\' => self.lex = Lex::Escape { key },
                                _ => return Scanned::Invalid(i, "control character in string"),
                            }
                        }
                    }
                }
                Lex::Escape { key } => {
                    self.lex = match b {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Lex::Str { key },
                        b'u' => Lex::Hex { key, left: 4 },
                        _ => return Scanned::Invalid(i, "bad escape in string"),
                    }
                }
                Lex::Hex { key, left } => {
                    if !b.is_ascii_hexdigit() {
                        return Scanned::Invalid(i, "bad \\u escape in string");
                    }
                    self.lex = if left == 1 {
                        Lex::Str { key }
                    } else {
                        Lex::Hex {
                            key,
                            left: left - 1,
                        }
                    };
                }
                Lex::Value | Lex::ValueOrClose => {
                    if is_ws(b) {
                    } else if b == b']' && self.lex == Lex::ValueOrClose {
                        if self.close() {
                            return Scanned::Done(i + 1);
                        }
                    } else if let Err(why) = self.begin_value(b) {
                        return Scanned::Invalid(i, why);
                    } else if self.lex == Lex::Done {
                        return Scanned::Done(i + 1);
                    }
                }
                Lex::KeyOrClose | Lex::Key => {
                    if is_ws(b) {
                    } else if b == b'"' {
                        self.lex = Lex::Str { key: true };
                    } else if b == b'}' && self.lex == Lex::KeyOrClose {
                        if self.close() {
                            return Scanned::Done(i + 1);
                        }
                    } else {
                        return Scanned::Invalid(i, "expected an object key");
                    }
                }
                Lex::Colon => {
                    if b == b':' {
                        self.lex = Lex::Value;
                    } else if !is_ws(b) {
                        return Scanned::Invalid(i, "expected `:` after key");
                    }
                }
                Lex::CommaOrClose => {
                    let in_object = self.stack.last().copied().unwrap_or(false);
                    match b {
                        b',' => self.lex = if in_object { Lex::Key } else { Lex::Value },
                        b'}' if in_object => {
                            if self.close() {
                                return Scanned::Done(i + 1);
                            }
                        }
                        b']' if !in_object => {
                            if self.close() {
                                return Scanned::Done(i + 1);
                            }
                        }
                        _ if is_ws(b) => {}
                        _ => return Scanned::Invalid(i, "expected `,` or a closing bracket"),
                    }
                }
                Lex::Number(n) => {
                    let next = match (n, b) {
                        (Num::Minus, b'0') => Some(Num::Zero),
                        (Num::Minus, b'1'..=b'9') => Some(Num::Int),
                        (Num::Int, b'0'..=b'9') => Some(Num::Int),
                        (Num::Zero | Num::Int, b'.') => Some(Num::Dot),
                        (Num::Dot | Num::Frac, b'0'..=b'9') => Some(Num::Frac),
                        (Num::Zero | Num::Int | Num::Frac, b'e' | b'E') => Some(Num::Exp),
                        (Num::Exp, b'+' | b'-') => Some(Num::ExpSign),
                        (Num::Exp | Num::ExpSign | Num::ExpDigits, b'0'..=b'9') => {
                            Some(Num::ExpDigits)
                        }
                        _ => None,
                    };
                    match next {
                        Some(n) => self.lex = Lex::Number(n),
                        None if n.can_end() => {
                            // The delimiter belongs to what follows the number.
                            if self.end_value() {
                                return Scanned::Done(i);
                            }
                            continue;
                        }
                        None => return Scanned::Invalid(i, "malformed number"),
                    }
                }
                Lex::Literal { word, at } => {
                    if b != word[at as usize] {
                        return Scanned::Invalid(i, "malformed literal");
                    }
                    if at as usize + 1 == word.len() {
                        if self.end_value() {
                            return Scanned::Done(i + 1);
                        }
                    } else {
                        self.lex = Lex::Literal { word, at: at + 1 };
                    }
                }
                Lex::Done => return Scanned::Done(i),
            }
            i += 1;
        }
        Scanned::More
    }

    fn begin_value(&mut self, b: u8) -> Result<(), &'static str> {
        self.lex = match b {
            b'{' => {
                self.stack.push(true);
                Lex::KeyOrClose
            }
            b'[' => {
                self.stack.push(false);
                Lex::ValueOrClose
            }
            b'"' => Lex::Str { key: false },
            b'-' => Lex::Number(Num::Minus),
            b'0' => Lex::Number(Num::Zero),
            b'1'..=b'9' => Lex::Number(Num::Int),
            b't' => Lex::Literal {
                word: b"true",
                at: 1,
            },
            b'f' => Lex::Literal {
                word: b"false",
                at: 1,
            },
            b'n' => Lex::Literal {
                word: b"null",
                at: 1,
            },
            _ => return Err("expected a JSON value"),
        };
        Ok(())
    }

    /// A scalar ended; true if that finished the whole value.
    fn end_value(&mut self) -> bool {
        if self.stack.is_empty() {
            self.lex = Lex::Done;
            true
        } else {
            self.lex = Lex::CommaOrClose;
            false
        }
    }

    /// A container closed; true if that finished the whole value.
    fn close(&mut self) -> bool {
        self.stack.pop();
        self.end_value()
    }
}

/// Whether `text` is exactly one JSON value (surrounding whitespace allowed).
pub fn is_valid(text: &str) -> bool {
    let trimmed = text.trim_matches(|c: char| c.is_ascii() && is_ws(c as u8));
    let mut scanner = JsonScanner::new();
    match scanner.feed(trimmed.as_bytes()) {
        Scanned::Done(n) => n == trimmed.len(),
        Scanned::More => scanner.can_end_here(),
        Scanned::Invalid(..) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(text: &str) -> Scanned {
        JsonScanner::new().feed(text.as_bytes())
    }

    #[test]
    fn finds_end_of_object_verbatim() {
        let text = r#"{"a": [1, 2.5e-3, -0, true, null], "b": {"c": "x\"}\\"}}tail"#;
        assert_eq!(whole(text), Scanned::Done(text.len() - 4));
    }

    #[test]
    fn byte_by_byte_equals_whole() {
        let text = r#"{"k":"é\u00e9","n":[{},[],""],"z":1.0}"#;
        let mut s = JsonScanner::new();
        let bytes = text.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            let r = s.feed(std::slice::from_ref(b));
            if i + 1 < bytes.len() {
                assert_eq!(r, Scanned::More, "at {i}");
            } else {
                assert_eq!(r, Scanned::Done(1));
            }
        }
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "{city: 1}",
            "{\"a\" 1}",
            "{\"a\":01}",
            "{\"a\":tru}",
            "{\"a\":1,}",
            "[1 2]",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\n\"}",
            "}",
            "{\"a\":1]",
        ] {
            assert!(
                matches!(whole(bad), Scanned::Invalid(..)),
                "{bad} -> {:?}",
                whole(bad)
            );
        }
    }

    #[test]
    fn top_level_number_needs_delimiter() {
        let mut s = JsonScanner::new();
        assert_eq!(s.feed(b"12"), Scanned::More);
        assert!(s.can_end_here());
        assert_eq!(s.feed(b"3,"), Scanned::Done(1));
    }

    #[test]
    fn validity() {
        assert!(is_valid(" {\"a\": 1} "));
        assert!(is_valid("12"));
        assert!(!is_valid("{\"a\": 1} x"));
        assert!(!is_valid("{"));
    }

    const PIECES: &[&str] = &[
        "{", "}", "[", "]", ":", ",", " ", "\"", "\"k\"", "\\", "\\n", "\\u00e9", "0", "7", "-",
        ".", "e", "+", "true", "fals", "null", "x", "é", "\n",
    ];

    proptest::proptest! {
        #[test]
        fn agrees_with_serde_json(parts in proptest::collection::vec(0..PIECES.len(), 1..30)) {
            let text: String = parts.iter().map(|&i| PIECES[i]).collect();
            let serde = serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok();
            proptest::prop_assert_eq!(is_valid(&text), serde, "{:?}", text);
        }
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        let text = "[".repeat(100_000) + &"]".repeat(100_000);
        assert_eq!(whole(&text), Scanned::Done(text.len()));
    }
}
