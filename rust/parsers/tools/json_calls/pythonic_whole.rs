//! Dynamo 1.6.1's pythonic parser over a whole text, as its tool jail runs it
//! (measured against its frontend; only the pipeline's reference mode uses it):
//!
//! - `<|python_start|>` / `<|python_end|>` are removed and the text trimmed;
//! - the call list is the first place matching the shape `[name(key=…, …), …]`
//!   ([`find_list`]): a name right after `[` and right before `(`, every argument
//!   `key=` followed by any text on the line up to the next `,` or `)`;
//! - that list is read as a Python expression ([`eval_list`]): a syntax error fails
//!   the whole parse; elements that are not calls of a plain name are skipped, so are
//!   arguments whose value is not a literal (`x`, `-2`, `1+2`, a tuple or set);
//!   floats are written as JSON numbers, integers beyond 64 bits as strings;
//! - the text before the list is the content; the text after it is dropped.

use crate::parsers::json::is_valid;

const TAGS: [&str; 2] = ["<|python_start|>", "<|python_end|>"];

/// A whole parse: the calls (name, JSON arguments) and the content beside them.
pub struct WholeParse {
    pub calls: Vec<(String, String)>,
    pub content: String,
}

/// Parse `text` as Dynamo's pythonic parser does. `Err` when the list it found is
/// not valid Python (Dynamo then releases nothing of the text).
pub fn parse_whole(text: &str) -> Result<WholeParse, String> {
    let mut stripped = text.to_owned();
    for tag in TAGS {
        stripped = stripped.replace(tag, "");
    }
    let stripped = stripped.trim();
    let Some((start, end)) = find_list(stripped) else {
        return Ok(WholeParse {
            calls: Vec::new(),
            content: stripped.to_owned(),
        });
    };
    let calls = eval_list(&stripped[start..end])?;
    Ok(WholeParse {
        calls,
        content: stripped[..start].trim().to_owned(),
    })
}

// ---------------------------------------------------------------- the list's shape

/// One step of the shape matcher (a tiny backtracking automaton).
#[derive(Clone, Copy)]
enum Step {
    Char(char),
    /// `a`-`z`, `A`-`Z`.
    Letter,
    /// A word character (Unicode letters, digits, `_`).
    Word,
    Space,
    /// Anything but a newline.
    NotNewline,
    /// Try the first target, then the second.
    Split(usize, usize),
    Jump(usize),
    Done,
}

struct Shape(Vec<Step>);

impl Shape {
    fn at(&self) -> usize {
        self.0.len()
    }

    fn push(&mut self, step: Step) {
        self.0.push(step);
    }

    /// `x*` (greedy) around the steps `body` adds.
    fn star(&mut self, body: impl FnOnce(&mut Self)) {
        let split = self.at();
        self.push(Step::Split(0, 0));
        body(self);
        self.push(Step::Jump(split));
        let out = self.at();
        self.0[split] = Step::Split(split + 1, out);
    }

    /// `x?` (greedy).
    fn optional(&mut self, body: impl FnOnce(&mut Self)) {
        let split = self.at();
        self.push(Step::Split(0, 0));
        body(self);
        let out = self.at();
        self.0[split] = Step::Split(split + 1, out);
    }

    /// Any text on the line, as little as possible.
    fn lazy_any(&mut self) {
        let split = self.at();
        self.push(Step::Split(0, 0));
        self.push(Step::NotNewline);
        self.push(Step::Jump(split));
        self.0[split] = Step::Split(split + 3, split + 1);
    }

    fn name(&mut self) {
        self.push(Step::Letter);
        self.star(|s| s.push(Step::Word));
    }

    fn spaces(&mut self) {
        self.star(|s| s.push(Step::Space));
    }

    /// `name(key=…, key=…)`; the last argument is followed by one space at most
    /// (`last_spaces` false) or any number of them.
    fn call(&mut self, last_spaces: bool) {
        self.name();
        self.push(Step::Char('('));
        self.star(|s| {
            s.name();
            s.push(Step::Char('='));
            s.lazy_any();
            s.push(Step::Char(','));
            s.spaces();
        });
        self.optional(|s| {
            s.name();
            s.push(Step::Char('='));
            s.lazy_any();
            if last_spaces {
                s.spaces();
            } else {
                s.optional(|s| s.push(Step::Space));
            }
        });
        self.push(Step::Char(')'));
    }

    fn list() -> Self {
        let mut s = Shape(Vec::new());
        s.push(Step::Char('['));
        s.star(|s| {
            s.call(false);
            s.push(Step::Char(','));
            s.spaces();
        });
        // One or more final calls.
        let again = s.at();
        s.call(true);
        s.spaces();
        let split = s.at();
        s.push(Step::Split(again, split + 1));
        s.push(Step::Char(']'));
        s.push(Step::Done);
        s
    }

    /// Where the shape matched from `start` ends, preferring earlier alternatives.
    fn run(&self, text: &str, start: usize, seen: &mut Vec<bool>) -> Option<usize> {
        let width = text.len() + 1;
        seen.clear();
        seen.resize(self.0.len() * width, false);
        let mut stack = vec![(0usize, start)];
        while let Some((mut pc, mut pos)) = stack.pop() {
            loop {
                let slot = pc * width + pos;
                if seen[slot] {
                    break;
                }
                seen[slot] = true;
                let next = text[pos..].chars().next();
                let takes = |ok: bool| ok.then(|| pos + next.map_or(0, char::len_utf8));
                let moved = match self.0[pc] {
                    Step::Char(c) => takes(next == Some(c)),
                    Step::Letter => takes(next.is_some_and(|c| c.is_ascii_alphabetic())),
                    Step::Word => takes(next.is_some_and(|c| c.is_alphanumeric() || c == '_')),
                    Step::Space => takes(next.is_some_and(char::is_whitespace)),
                    Step::NotNewline => takes(next.is_some_and(|c| c != '\n')),
                    Step::Split(first, second) => {
                        stack.push((second, pos));
                        pc = first;
                        continue;
                    }
                    Step::Jump(to) => {
                        pc = to;
                        continue;
                    }
                    Step::Done => return Some(pos),
                };
                match moved {
                    Some(to) => {
                        pc += 1;
                        pos = to;
                    }
                    None => break,
                }
            }
        }
        None
    }
}

/// The first call list in `text` (byte range), as Dynamo's pythonic parser finds it.
pub fn find_list(text: &str) -> Option<(usize, usize)> {
    let shape = Shape::list();
    let mut seen = Vec::new();
    text.match_indices('[')
        .find_map(|(start, _)| shape.run(text, start, &mut seen).map(|end| (start, end)))
}

// ---------------------------------------------------------------- the list as Python

/// A Python expression, as far as the calls need it.
enum Expr {
    /// A literal, as JSON text (`None` for a literal JSON cannot hold: bytes, complex).
    Literal(Option<String>),
    List(Vec<Expr>),
    Dict(Vec<(Option<Expr>, Expr)>),
    Call {
        name: Option<String>,
        keywords: Vec<(Option<String>, Expr)>,
    },
    /// A plain name (a callee).
    Name(String),
    /// Anything else (an operation, a tuple, a set...).
    Other,
}

impl Expr {
    /// The JSON of a literal value; `None` when the value is not one.
    fn json(&self) -> Option<String> {
        match self {
            Expr::Literal(json) => json.clone(),
            Expr::List(items) => {
                let items: Option<Vec<String>> = items.iter().map(Expr::json).collect();
                Some(format!("[{}]", items?.join(",")))
            }
            Expr::Dict(entries) => {
                let mut out: Vec<(String, String)> = Vec::new();
                for (key, value) in entries {
                    let key = key.as_ref()?.json()?;
                    let key = match serde_json::from_str::<serde_json::Value>(&key).ok()? {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    let value = value.json()?;
                    match out.iter_mut().find(|(k, _)| *k == key) {
                        Some(slot) => slot.1 = value,
                        None => out.push((key, value)),
                    }
                }
                let fields: Vec<String> = out
                    .into_iter()
                    .map(|(k, v)| format!("{}:{v}", json_string(&k)))
                    .collect();
                Some(format!("{{{}}}", fields.join(",")))
            }
            Expr::Name(_) | Expr::Call { .. } | Expr::Other => None,
        }
    }
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// The calls of a Python list of calls.
fn eval_list(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut p = Py {
        text,
        pos: 0,
        depth: 0,
    };
    let expr = p.expression()?;
    p.space();
    if p.pos != text.len() {
        return Err(format!("unexpected text at byte {}", p.pos));
    }
    let Expr::List(items) = expr else {
        return Ok(Vec::new());
    };
    let mut calls = Vec::new();
    for item in items {
        let Expr::Call {
            name: Some(name),
            keywords,
        } = item
        else {
            continue;
        };
        let args: Vec<String> = keywords
            .iter()
            .filter_map(|(key, value)| {
                Some(format!("{}:{}", json_string(key.as_ref()?), value.json()?))
            })
            .collect();
        calls.push((name, format!("{{{}}}", args.join(","))));
    }
    Ok(calls)
}

const MAX_DEPTH: usize = 128;

/// A recursive-descent reader of Python expressions: literals exactly, the rest
/// only as far as telling valid syntax from invalid.
struct Py<'a> {
    text: &'a str,
    pos: usize,
    depth: usize,
}

impl Py<'_> {
    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn space(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.space();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str) -> Result<(), String> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(format!("expected `{token}` at byte {}", self.pos))
        }
    }

    fn word(&mut self) -> Option<&str> {
        self.space();
        let rest = self.rest();
        let first = rest.chars().next()?;
        if !(first.is_alphabetic() || first == '_') {
            return None;
        }
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        Some(&rest[..len])
    }

    /// Whether the next word is `word` (not just a prefix of a longer name).
    fn at_word(&mut self, word: &str) -> bool {
        self.word() == Some(word)
    }

    fn expression(&mut self) -> Result<Expr, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err("expression nested too deeply".into());
        }
        let result = self.operation();
        self.depth -= 1;
        result
    }

    /// Operands joined by operators: any operator makes the value a non-literal.
    fn operation(&mut self) -> Result<Expr, String> {
        let mut expr = self.unary()?;
        loop {
            self.space();
            let rest = self.rest();
            let symbol = [
                "**", "//", "<<", ">>", "<=", ">=", "==", "!=", "+", "-", "*", "/", "%", "@", "&",
                "|", "^", "<", ">",
            ]
            .into_iter()
            .find(|op| rest.starts_with(op));
            if let Some(op) = symbol {
                self.pos += op.len();
            } else {
                match self.word() {
                    Some(word @ ("and" | "or" | "in" | "is")) => {
                        self.pos += word.len();
                        if self.at_word("not") {
                            self.pos += "not".len();
                        }
                    }
                    Some("not") => {
                        self.pos += "not".len();
                        if !self.at_word("in") {
                            return Err("`not` without `in`".into());
                        }
                        self.pos += "in".len();
                    }
                    Some("if") => {
                        self.pos += "if".len();
                        self.operation()?;
                        if !self.at_word("else") {
                            return Err("`if` without `else`".into());
                        }
                        self.pos += "else".len();
                        self.operation()?;
                        return Ok(Expr::Other);
                    }
                    _ => return Ok(expr),
                }
            }
            self.unary()?;
            expr = Expr::Other;
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        self.space();
        if self.at_word("not") {
            self.pos += "not".len();
            self.unary()?;
            return Ok(Expr::Other);
        }
        if matches!(self.peek(), Some('-' | '+' | '~')) {
            self.pos += 1;
            self.unary()?;
            return Ok(Expr::Other);
        }
        let mut expr = self.atom()?;
        // Trailers: calls, subscripts, attributes.
        loop {
            self.space();
            match self.peek() {
                Some('(') => {
                    self.pos += 1;
                    let keywords = self.arguments()?;
                    let name = match expr {
                        Expr::Name(name) => Some(name),
                        _ => None,
                    };
                    expr = Expr::Call { name, keywords };
                }
                Some('[') => {
                    self.pos += 1;
                    self.expression()?;
                    self.expect("]")?;
                    expr = Expr::Other;
                }
                Some('.') => {
                    self.pos += 1;
                    let len = self.word().ok_or("expected a name after `.`")?.len();
                    self.pos += len;
                    expr = Expr::Other;
                }
                _ => return Ok(expr),
            }
        }
    }

    /// A call's arguments after `(`: keywords by name (`None` for `**x`).
    fn arguments(&mut self) -> Result<Vec<(Option<String>, Expr)>, String> {
        let mut keywords: Vec<(Option<String>, Expr)> = Vec::new();
        loop {
            if self.eat(")") {
                return Ok(keywords);
            }
            if self.eat("**") {
                self.expression()?;
                keywords.push((None, Expr::Other));
            } else if self.eat("*") {
                self.expression()?;
            } else {
                let start = self.pos;
                let key = self.word().map(str::to_owned);
                let keyword = key.filter(|k| {
                    let after = &self.text[self.pos + k.len()..];
                    let after = after.trim_start();
                    after.starts_with('=') && !after.starts_with("==")
                });
                if let Some(key) = keyword {
                    self.pos += key.len();
                    self.expect("=")?;
                    let value = self.expression()?;
                    if keywords
                        .iter()
                        .any(|(k, _)| k.as_deref() == Some(key.as_str()))
                    {
                        return Err(format!("keyword argument `{key}` repeated"));
                    }
                    keywords.push((Some(key), value));
                } else {
                    self.pos = start;
                    self.expression()?;
                    if !keywords.is_empty() {
                        return Err("positional argument follows keyword argument".into());
                    }
                }
            }
            if !self.eat(",") {
                self.expect(")")?;
                return Ok(keywords);
            }
        }
    }

    fn atom(&mut self) -> Result<Expr, String> {
        self.space();
        let Some(c) = self.peek() else {
            return Err("expected a value at the end".into());
        };
        match c {
            '[' => {
                self.pos += 1;
                let items = self.items("]")?;
                Ok(Expr::List(items))
            }
            '(' => {
                self.pos += 1;
                if self.eat(")") {
                    return Ok(Expr::Other);
                }
                let inner = self.expression()?;
                if self.eat(")") {
                    return Ok(inner);
                }
                self.expect(",")?;
                self.items(")")?;
                Ok(Expr::Other)
            }
            '{' => {
                self.pos += 1;
                self.dict_or_set()
            }
            '\'' | '"' => self.strings(),
            c if c.is_ascii_digit()
                || (c == '.' && self.rest()[1..].starts_with(|d: char| d.is_ascii_digit())) =>
            {
                self.number()
            }
            c if c.is_alphabetic() || c == '_' => {
                let word = self.word().unwrap_or_default().to_owned();
                if is_string_prefix(&word)
                    && self.text[self.pos + word.len()..].starts_with(['\'', '"'])
                {
                    return self.strings();
                }
                self.pos += word.len();
                Ok(match word.as_str() {
                    "True" => Expr::Literal(Some("true".into())),
                    "False" => Expr::Literal(Some("false".into())),
                    "None" => Expr::Literal(Some("null".into())),
                    "and" | "or" | "not" | "in" | "is" | "if" | "else" | "lambda" | "for"
                    | "def" | "class" | "return" | "import" | "from" | "while" | "with"
                    | "yield" | "await" | "async" | "del" | "pass" | "raise" | "try" | "except"
                    | "finally" | "global" | "nonlocal" | "assert" | "break" | "continue"
                    | "elif" | "as" => return Err(format!("unexpected keyword `{word}`")),
                    _ => Expr::Name(word),
                })
            }
            _ => Err(format!("unexpected `{c}` at byte {}", self.pos)),
        }
    }

    /// Comma-separated expressions up to `close` (a trailing comma allowed).
    fn items(&mut self, close: &str) -> Result<Vec<Expr>, String> {
        let mut items = Vec::new();
        loop {
            if self.eat(close) {
                return Ok(items);
            }
            items.push(self.expression()?);
            if !self.eat(",") {
                self.expect(close)?;
                return Ok(items);
            }
        }
    }

    fn dict_or_set(&mut self) -> Result<Expr, String> {
        let mut entries = Vec::new();
        let mut is_set = None;
        loop {
            if self.eat("}") {
                break;
            }
            if self.eat("**") {
                self.expression()?;
                entries.push((None, Expr::Other));
                is_set = Some(false);
            } else {
                let key = self.expression()?;
                let set = *is_set.get_or_insert_with(|| !self.eat(":"));
                if !set {
                    if !entries.is_empty() {
                        self.expect(":")?;
                    }
                    let value = self.expression()?;
                    entries.push((Some(key), value));
                }
            }
            if !self.eat(",") {
                self.expect("}")?;
                break;
            }
        }
        Ok(if is_set == Some(true) {
            Expr::Other
        } else {
            Expr::Dict(entries)
        })
    }

    /// Adjacent string literals, joined.
    fn strings(&mut self) -> Result<Expr, String> {
        let mut text = String::new();
        let (mut bytes, mut formatted, mut any) = (false, false, false);
        loop {
            self.space();
            let prefix_len = self
                .word()
                .filter(|w| is_string_prefix(w))
                .map_or(0, str::len);
            if !self.text[self.pos + prefix_len..].starts_with(['\'', '"']) {
                break;
            }
            let prefix = self.text[self.pos..self.pos + prefix_len].to_ascii_lowercase();
            self.pos += prefix_len;
            let is_bytes = prefix.contains('b');
            if any && is_bytes != bytes {
                return Err("cannot mix bytes and nonbytes literals".into());
            }
            bytes = is_bytes;
            formatted |= prefix.contains('f');
            any = true;
            self.string(prefix.contains('r'), &mut text)?;
        }
        Ok(Expr::Literal(
            (!bytes && !formatted).then(|| json_string(&text)),
        ))
    }

    fn string(&mut self, raw: bool, out: &mut String) -> Result<(), String> {
        let rest = self.rest();
        let quote = rest.chars().next().ok_or("expected a string")?;
        let triple: String = std::iter::repeat(quote).take(3).collect();
        let is_triple = rest.starts_with(&triple);
        self.pos += if is_triple { 3 } else { 1 };
        loop {
            let rest = self.rest();
            let Some(c) = rest.chars().next() else {
                return Err("unterminated string".into());
            };
            if is_triple && rest.starts_with(&triple) {
                self.pos += 3;
                return Ok(());
            }
            if !is_triple && c == quote {
                self.pos += 1;
                return Ok(());
            }
            if !is_triple && c == '\n' {
                return Err("unterminated string".into());
            }
            self.pos += c.len_utf8();
            if c != '\\' {
                out.push(c);
                continue;
            }
            let Some(e) = self.peek() else {
                return Err("unterminated string".into());
            };
            self.pos += e.len_utf8();
            if raw {
                out.push('\\');
                out.push(e);
                continue;
            }
            match e {
                '\n' => {}
                '\\' | '\'' | '"' => out.push(e),
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'v' => out.push('\u{b}'),
                'a' => out.push('\u{7}'),
                '0'..='7' => {
                    let mut value = e.to_digit(8).unwrap_or(0);
                    for _ in 0..2 {
                        match self.peek().and_then(|d| d.to_digit(8)) {
                            Some(d) => {
                                value = value * 8 + d;
                                self.pos += 1;
                            }
                            None => break,
                        }
                    }
                    out.push(char::from_u32(value).ok_or("bad escape")?);
                }
                'x' | 'u' | 'U' => {
                    let n = match e {
                        'x' => 2,
                        'u' => 4,
                        _ => 8,
                    };
                    let digits = self.rest().get(..n).ok_or("truncated escape")?;
                    let value = u32::from_str_radix(digits, 16).map_err(|_| "bad escape")?;
                    self.pos += n;
                    out.push(char::from_u32(value).ok_or("bad escape")?);
                }
                _ => {
                    out.push('\\');
                    out.push(e);
                }
            }
        }
    }

    fn number(&mut self) -> Result<Expr, String> {
        let rest = self.rest();
        let mut len = 0;
        let bytes = rest.as_bytes();
        while len < bytes.len() {
            let b = bytes[len];
            let exponent_sign = (b == b'-' || b == b'+')
                && len > 0
                && matches!(bytes[len - 1], b'e' | b'E')
                && !rest[..len].to_ascii_lowercase().starts_with("0x");
            if b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || exponent_sign {
                len += 1;
            } else {
                break;
            }
        }
        let token = rest[..len].to_owned();
        self.pos += len;
        let bad = || format!("invalid number `{token}`");
        if token.contains("__") || token.ends_with('_') {
            return Err(bad());
        }
        let clean: String = token.chars().filter(|&c| c != '_').collect();
        let lower = clean.to_ascii_lowercase();
        if lower.ends_with('j') {
            let body = &lower[..lower.len() - 1];
            body.parse::<f64>().map_err(|_| bad())?;
            return Ok(Expr::Literal(None));
        }
        for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
            if let Some(digits) = lower.strip_prefix(prefix) {
                return integer(digits, radix).ok_or_else(bad);
            }
        }
        if lower.contains(['.', 'e']) {
            let value: f64 = lower.parse().map_err(|_| bad())?;
            if !lower
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'-' | b'+'))
            {
                return Err(bad());
            }
            return Ok(Expr::Literal(Some(if value.is_finite() {
                ryu::Buffer::new().format_finite(value).to_owned()
            } else {
                "null".to_owned()
            })));
        }
        if lower.len() > 1 && lower.starts_with('0') && lower.bytes().any(|b| b != b'0') {
            return Err("leading zeros in a decimal integer".into());
        }
        integer(&lower, 10).ok_or_else(bad)
    }
}

/// An integer literal: a JSON number within 64 bits, else its decimal text as a string.
fn integer(digits: &str, radix: u32) -> Option<Expr> {
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    if let Ok(v) = u64::from_str_radix(digits, radix) {
        return Some(Expr::Literal(Some(v.to_string())));
    }
    // Beyond 64 bits: Dynamo writes the number's decimal digits as a string.
    let mut decimal: Vec<u32> = vec![0];
    for c in digits.chars() {
        let mut carry = c.to_digit(radix)?;
        for d in decimal.iter_mut() {
            let v = *d * radix + carry;
            *d = v % 10;
            carry = v / 10;
        }
        while carry > 0 {
            decimal.push(carry % 10);
            carry /= 10;
        }
    }
    let text: String = decimal
        .iter()
        .rev()
        .map(|&d| char::from_digit(d, 10).unwrap_or('0'))
        .collect();
    debug_assert!(is_valid(&text));
    Some(Expr::Literal(Some(json_string(&text))))
}

fn is_string_prefix(word: &str) -> bool {
    matches!(
        word.to_ascii_lowercase().as_str(),
        "r" | "u" | "b" | "f" | "br" | "rb" | "fr" | "rf"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(text: &str) -> Result<Vec<(String, String)>, String> {
        parse_whole(text).map(|p| p.calls)
    }

    #[test]
    fn the_list_is_found_by_its_shape() {
        assert_eq!(find_list("a [f(x=1), g()] b"), Some((2, 15)));
        assert_eq!(find_list("[x] [f(a=1)]"), Some((4, 12)));
        // No space after `[` or before `(`, no dotted name, no positional argument.
        for text in [
            "[ f(a=1)]",
            "[f (a=1)]",
            "[a.b(x=1)]",
            "[f(1)]",
            "[f(a='x\ny')]",
        ] {
            assert_eq!(find_list(text), None, "{text}");
        }
        // The first `)]` on the line ends it, in a string too.
        assert_eq!(find_list("[f(a=')]')]"), Some((0, 8)));
    }

    #[test]
    fn literals_only() {
        let one = |text: &str| calls(text).unwrap().remove(0).1;
        assert_eq!(
            one("[f(a=-2, b='x', c=1+2, d=y, e=(1, 2), g={1})]"),
            r#"{"b":"x"}"#
        );
        assert_eq!(
            one("[f(a=1e-3, b=5., c=2.50, d=0x10, e=1_000, g=10000000000000000000000)]"),
            r#"{"a":0.001,"b":5.0,"c":2.5,"d":16,"e":1000,"g":"10000000000000000000000"}"#
        );
        assert_eq!(
            one("[f(a={'z': [1, None], 2: True})]"),
            r#"{"a":{"z":[1,null],"2":true}}"#
        );
        assert_eq!(one("[f(a=[1, -2], b='a' \"b\")]"), r#"{"b":"ab"}"#);
        assert_eq!(calls("[f(a=1), 3, g.h(), k()]").unwrap().len(), 2);
    }

    #[test]
    fn syntax_errors_fail_the_parse() {
        for text in [
            "[f(a=)]",
            "[f(a=1, 2)]",
            "[f(a=1), g(=)]",
            "[f(a=')]')]",
            "[f(a=1, a=2)]",
        ] {
            assert!(parse_whole(text).is_err(), "{text}");
        }
    }

    #[test]
    fn content_is_the_text_before() {
        let parsed = parse_whole("<|python_start|> hi [f(a=1)] tail").unwrap();
        assert_eq!(parsed.content, "hi");
        assert_eq!(parsed.calls.len(), 1);
        let parsed = parse_whole(" [x] y ").unwrap();
        assert_eq!((parsed.calls.len(), parsed.content.as_str()), (0, "[x] y"));
    }
}
