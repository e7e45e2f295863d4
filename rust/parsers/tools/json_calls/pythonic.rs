//! Python-literal call lists: `[f(a=1, b='x'), g()]`.
//!
//! [`ListScan`] follows the list byte by byte (brackets, quotes, escapes) to
//! find where it closes and to tell early whether it starts like a call list
//! at all; [`convert`] then turns the closed list into JSON arguments once,
//! written compactly as Dynamo's serde_json serialization writes them.

/// How far the opening of the list looks like `[name(`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prefix {
    Bracket,
    Start,
    Ident,
    AfterIdent,
    Valid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListStep {
    /// All bytes consumed, the list is still open.
    More,
    /// The list closed after this many bytes.
    Closed(usize),
    /// The text at this offset is not the start of a call list.
    NotCalls(usize),
}

#[derive(Debug)]
pub(super) struct ListScan {
    depth: usize,
    quote: u8,
    escape: bool,
    prefix: Prefix,
}

impl ListScan {
    pub(super) fn new() -> Self {
        Self {
            depth: 0,
            quote: 0,
            escape: false,
            prefix: Prefix::Bracket,
        }
    }

    pub(super) fn reset(&mut self) {
        *self = Self::new();
    }

    /// True once the text is known to open a call (`[name(`).
    pub(super) fn is_call_list(&self) -> bool {
        self.prefix == Prefix::Valid
    }

    pub(super) fn feed(&mut self, bytes: &[u8]) -> ListStep {
        for (i, &b) in bytes.iter().enumerate() {
            if self.prefix != Prefix::Valid {
                self.prefix = match (self.prefix, b) {
                    (Prefix::Bracket, b'[') => Prefix::Start,
                    (Prefix::Start, b' ' | b'\t' | b'\n' | b'\r') => Prefix::Start,
                    (Prefix::Start, b']') => Prefix::Start,
                    (Prefix::Start, c) if c.is_ascii_alphabetic() || c == b'_' => Prefix::Ident,
                    (Prefix::Ident, c) if c.is_ascii_alphanumeric() || c == b'_' || c == b'.' => {
                        Prefix::Ident
                    }
                    (Prefix::Ident | Prefix::AfterIdent, b' ' | b'\t') => Prefix::AfterIdent,
                    (Prefix::Ident | Prefix::AfterIdent, b'(') => Prefix::Valid,
                    _ => return ListStep::NotCalls(i),
                };
            }
            if self.quote != 0 {
                if self.escape {
                    self.escape = false;
                } else if b == b'\\' {
                    self.escape = true;
                } else if b == self.quote {
                    self.quote = 0;
                }
                continue;
            }
            match b {
                b'\'' | b'"' => self.quote = b,
                b'[' | b'(' | b'{' => self.depth += 1,
                b']' | b')' | b'}' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return ListStep::Closed(i + 1);
                    }
                }
                _ => {}
            }
        }
        ListStep::More
    }
}

/// Deepest literal nesting accepted; the converter recurses once per level.
const MAX_DEPTH: usize = 128;

struct Conv<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    /// Also read JSON's `true`, `false` and `null` (Olmo 3 writes them).
    json_literals: bool,
}

/// Convert a closed call list into `(name, JSON arguments)` pairs.
pub(super) fn convert(text: &str) -> Result<Vec<(String, String)>, String> {
    convert_list(text, false)
}

/// [`convert`], optionally reading JSON's literals as well as Python's.
pub(super) fn convert_list(
    text: &str,
    json_literals: bool,
) -> Result<Vec<(String, String)>, String> {
    let mut c = Conv {
        s: text.as_bytes(),
        text,
        i: 0,
        json_literals,
    };
    c.ws();
    c.expect(b'[')?;
    let mut calls = Vec::new();
    loop {
        c.ws();
        if c.eat(b']') {
            break;
        }
        let name = c.dotted_name()?;
        c.ws();
        c.expect(b'(')?;
        let mut args = String::from("{");
        let mut first = true;
        loop {
            c.ws();
            if c.eat(b')') {
                break;
            }
            let key = c.ident()?;
            c.ws();
            if !c.eat(b'=') {
                return Err(format!("positional argument in call to `{name}`"));
            }
            c.ws();
            if !first {
                args.push(',');
            }
            first = false;
            push_json_str(&mut args, &key);
            args.push(':');
            c.value(&mut args, 0)?;
            c.ws();
            if !c.eat(b',') {
                c.ws();
                c.expect(b')')?;
                break;
            }
        }
        args.push('}');
        calls.push((name, args));
        c.ws();
        if !c.eat(b',') {
            c.ws();
            c.expect(b']')?;
            break;
        }
    }
    Ok(calls)
}

fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl Conv<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, b: u8) -> Result<(), String> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(format!("expected `{}` at byte {}", b as char, self.i))
        }
    }

    fn ident(&mut self) -> Result<String, String> {
        let start = self.i;
        while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == b'_') {
            self.i += 1;
        }
        if self.i == start || self.s[start].is_ascii_digit() {
            return Err(format!("expected a name at byte {start}"));
        }
        Ok(self.text[start..self.i].to_owned())
    }

    fn dotted_name(&mut self) -> Result<String, String> {
        let mut name = self.ident()?;
        while self.eat(b'.') {
            name.push('.');
            name.push_str(&self.ident()?);
        }
        Ok(name)
    }

    fn value(&mut self, out: &mut String, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("literal nested too deeply".into());
        }
        match self.peek() {
            Some(b'\'' | b'"') => {
                let mut s = String::new();
                // Adjacent literals concatenate, as in Python.
                while matches!(self.peek(), Some(b'\'' | b'"')) {
                    self.string(&mut s)?;
                    self.ws();
                }
                push_json_str(out, &s);
                Ok(())
            }
            Some(b'[') => self.sequence(out, b']', depth),
            Some(b'(') => self.sequence(out, b')', depth),
            Some(b'{') => self.dict(out, depth),
            Some(c) if c.is_ascii_digit() || c == b'-' || c == b'+' || c == b'.' => {
                self.number(out)
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let word = self.ident()?;
                out.push_str(match word.as_str() {
                    "True" => "true",
                    "False" => "false",
                    "None" => "null",
                    "true" | "false" | "null" if self.json_literals => word.as_str(),
                    _ => return Err(format!("unsupported value `{word}`")),
                });
                Ok(())
            }
            _ => Err(format!("expected a value at byte {}", self.i)),
        }
    }

    fn sequence(&mut self, out: &mut String, close: u8, depth: usize) -> Result<(), String> {
        self.i += 1;
        out.push('[');
        let mut first = true;
        loop {
            self.ws();
            if self.eat(close) {
                break;
            }
            if !first {
                out.push(',');
            }
            first = false;
            self.value(out, depth + 1)?;
            self.ws();
            if !self.eat(b',') {
                self.ws();
                self.expect(close)?;
                break;
            }
        }
        out.push(']');
        Ok(())
    }

    fn dict(&mut self, out: &mut String, depth: usize) -> Result<(), String> {
        self.i += 1;
        out.push('{');
        let mut first = true;
        loop {
            self.ws();
            if self.eat(b'}') {
                break;
            }
            if !first {
                out.push(',');
            }
            first = false;
            // JSON keys are strings; Python's json.dumps stringifies scalar keys the same way.
            let mut key = String::new();
            self.value(&mut key, depth + 1)?;
            if key.starts_with('"') {
                out.push_str(&key);
            } else if key.starts_with(['[', '{']) {
                return Err("unhashable dict key".into());
            } else {
                push_json_str(out, &key);
            }
            self.ws();
            self.expect(b':')?;
            self.ws();
            out.push(':');
            self.value(out, depth + 1)?;
            self.ws();
            if !self.eat(b',') {
                self.ws();
                self.expect(b'}')?;
                break;
            }
        }
        out.push('}');
        Ok(())
    }

    fn number(&mut self, out: &mut String) -> Result<(), String> {
        let start = self.i;
        let mut negative = false;
        while let Some(sign @ (b'-' | b'+')) = self.peek() {
            negative ^= sign == b'-';
            self.i += 1;
            self.ws();
        }
        let body_start = self.i;
        while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == b'.' || c == b'_'
            || ((c == b'-' || c == b'+') && matches!(self.s[self.i - 1], b'e' | b'E')))
        {
            self.i += 1;
        }
        let body: String = self.text[body_start..self.i]
            .chars()
            .filter(|&c| c != '_')
            .collect();
        let bad = || format!("bad number `{}`", &self.text[start..self.i]);
        if negative {
            out.push('-');
        }
        let lower = body.to_ascii_lowercase();
        for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
            if let Some(digits) = lower.strip_prefix(prefix) {
                let v = u128::from_str_radix(digits, radix).map_err(|_| bad())?;
                out.push_str(&v.to_string());
                return Ok(());
            }
        }
        // Python allows `.5`, `5.` and `1.e3`; JSON wants a digit on both sides.
        let mut fixed = String::with_capacity(body.len() + 2);
        let mut prev = b'\0';
        for c in body.bytes() {
            if c == b'.' && !prev.is_ascii_digit() {
                fixed.push('0');
            }
            if matches!(c, b'e' | b'E') && prev == b'.' {
                fixed.push('0');
            }
            fixed.push(c as char);
            prev = c;
        }
        if prev == b'.' {
            fixed.push('0');
        }
        // Python 3 forbids leading zeros on non-zero integers; strip them anyway.
        let mut fixed = fixed.as_str();
        while fixed.len() > 1 && fixed.starts_with('0') && fixed.as_bytes()[1].is_ascii_digit() {
            fixed = &fixed[1..];
        }
        if !crate::parsers::json::is_valid(fixed)
            || !fixed.as_bytes().first().is_some_and(u8::is_ascii_digit)
        {
            return Err(bad());
        }
        out.push_str(fixed);
        Ok(())
    }

    fn string(&mut self, out: &mut String) -> Result<(), String> {
        let quote = self.s[self.i];
        let triple = self.s[self.i..].starts_with(&[quote, quote, quote]);
        self.i += if triple { 3 } else { 1 };
        loop {
            let Some(c) = self.peek() else {
                return Err("unterminated string".into());
            };
            if c == quote {
                if !triple {
                    self.i += 1;
                    return Ok(());
                }
                if self.s[self.i..].starts_with(&[quote, quote, quote]) {
                    self.i += 3;
                    return Ok(());
                }
            }
            if c == b'\\' {
                self.i += 1;
                self.escape(out)?;
                continue;
            }
            let run_end = self.s[self.i..]
                .iter()
                .position(|&x| x == quote || x == b'\\')
                .map_or(self.s.len(), |k| self.i + k.max(1));
            out.push_str(&self.text[self.i..run_end]);
            self.i = run_end;
        }
    }

    fn hex(&mut self, n: usize) -> Result<u32, String> {
        let digits = self
            .text
            .get(self.i..self.i + n)
            .ok_or("truncated escape")?;
        let v = u32::from_str_radix(digits, 16).map_err(|_| "bad hex escape")?;
        self.i += n;
        Ok(v)
    }

    fn escape(&mut self, out: &mut String) -> Result<(), String> {
        let Some(c) = self.peek() else {
            return Err("unterminated string".into());
        };
        self.i += 1;
        let ch = match c {
            b'\n' => return Ok(()),
            b'\\' => '\\',
            b'\'' => '\'',
            b'"' => '"',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'v' => '\u{b}',
            b'a' => '\u{7}',
            b'0' => '\0',
            b'x' => char::from_u32(self.hex(2)?).ok_or("bad escape")?,
            b'u' => char::from_u32(self.hex(4)?).ok_or("bad escape")?,
            b'U' => char::from_u32(self.hex(8)?).ok_or("bad escape")?,
            _ => {
                // Unknown escapes keep their backslash in Python.
                self.i -= 1;
                out.push('\\');
                return Ok(());
            }
        };
        out.push(ch);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_literals() {
        let calls = convert(
            r#"[f(a=1, b='x\'y', c="é", d=-2.5, e=True, f=None, g=[1, (2, 3)], h={'k': {"n": .5}}), g()]"#,
        )
        .unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(
            calls[0].1,
            r#"{"a":1,"b":"x'y","c":"é","d":-2.5,"e":true,"f":null,"g":[1,[2,3]],"h":{"k":{"n":0.5}}}"#
        );
        assert_eq!(calls[1], ("g".into(), "{}".into()));
    }

    #[test]
    fn numbers() {
        let one = |v: &str| convert(&format!("[f(x={v})]")).map(|c| c[0].1.clone());
        assert_eq!(one("0").unwrap(), r#"{"x":0}"#);
        assert_eq!(one("1_000").unwrap(), r#"{"x":1000}"#);
        assert_eq!(one("0x1F").unwrap(), r#"{"x":31}"#);
        assert_eq!(one("5.").unwrap(), r#"{"x":5.0}"#);
        assert_eq!(one("1e-3").unwrap(), r#"{"x":1e-3}"#);
        assert_eq!(one("0.25").unwrap(), r#"{"x":0.25}"#);
        assert!(one("1.2.3").is_err());
        assert!(one("inf").is_err());
    }

    #[test]
    fn rejects_positional_and_deep() {
        assert!(convert("[f(1)]").is_err());
        let deep = format!("[f(a={}{})]", "[".repeat(1000), "]".repeat(1000));
        assert!(convert(&deep).is_err());
    }

    #[test]
    fn scan_finds_close_and_prefix() {
        let mut s = ListScan::new();
        assert_eq!(s.feed(b"[f(a='])')"), ListStep::More);
        assert!(s.is_call_list());
        assert_eq!(s.feed(b"] x"), ListStep::Closed(1));
        s.reset();
        assert_eq!(s.feed(b"[1] see"), ListStep::NotCalls(1));
    }
}
