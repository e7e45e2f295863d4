//! The `{"name": ..., "arguments": {...}}` object most JSON formats wrap a call in.
//!
//! The wrapper is walked key by key; values go through a [`JsonScanner`]. The
//! call opens as soon as the name string is complete, and from then on the
//! arguments object streams verbatim. Arguments that come before the name are
//! held until the name arrives.

use crate::parsers::json::{is_valid, JsonScanner, Scanned};
use crate::parsers::CallSink;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum W {
    Open,
    KeyOrEnd,
    Key,
    KeyStr { escape: bool },
    Colon,
    ValueStart,
    Value,
    CommaOrEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Args,
    Other,
}

/// What a step over the wrapper did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WStep {
    /// Everything was consumed; the object is still open.
    More,
    /// The object closed after this many bytes; its arguments are complete and
    /// the caller decides when the call ends.
    Done(usize),
    /// The byte at this offset (or the object as a whole) is not a valid call.
    Fail(usize, &'static str),
}

/// How a family spells the wrapper's keys.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Keys {
    /// Another name for `name` (Cohere's `tool_name`).
    pub(super) name: Option<&'static str>,
    /// Another name for `arguments`, besides `parameters` (Inkling's `args`).
    pub(super) args: Option<&'static str>,
    /// The object's one key is the call's name and its value the arguments (Apertus).
    pub(super) keyed: bool,
}

#[derive(Debug)]
pub(super) struct Wrapper {
    keys: Keys,
    st: W,
    key: String,
    field: Field,
    value: JsonScanner,
    name_raw: String,
    /// Arguments seen before the call could open, or non-object arguments.
    args_buf: String,
    args_object: bool,
    has_args: bool,
    /// The name is known and the call is open on the sink.
    begun: bool,
    /// Arguments that are not an object (`["Paris"]`, `"x"`) are forwarded as written
    /// (Dynamo 1.6.1), not a broken call.
    pub(super) any_arguments: bool,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Wrapper {
    pub(super) fn new(keys: Keys) -> Self {
        Self {
            keys,
            st: W::Open,
            key: String::new(),
            field: Field::Other,
            value: JsonScanner::new(),
            name_raw: String::new(),
            args_buf: String::new(),
            args_object: false,
            has_args: false,
            begun: false,
            any_arguments: false,
        }
    }

    pub(super) fn reset(&mut self) {
        self.st = W::Open;
        self.key.clear();
        self.name_raw.clear();
        self.args_buf.clear();
        self.args_object = false;
        self.has_args = false;
        self.begun = false;
    }

    /// Whether the call has been opened on the sink (its name is known).
    pub(super) fn begun(&self) -> bool {
        self.begun
    }

    pub(super) fn step(&mut self, text: &str, sink: &mut CallSink) -> WStep {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match self.st {
                W::Open => match b {
                    b'{' => self.st = W::KeyOrEnd,
                    _ if is_ws(b) => {}
                    _ => return WStep::Fail(i, "expected `{`"),
                },
                W::KeyOrEnd | W::Key => match b {
                    b'"' => {
                        self.key.clear();
                        self.st = W::KeyStr { escape: false };
                    }
                    b'}' if self.st == W::KeyOrEnd => return self.close(i + 1, sink),
                    _ if is_ws(b) => {}
                    _ => return WStep::Fail(i, "expected a key"),
                },
                W::KeyStr { escape: true } => {
                    if !b.is_ascii() {
                        return WStep::Fail(i, "bad escape in key");
                    }
                    self.key.push('\\');
                    self.key.push(b as char);
                    self.st = W::KeyStr { escape: false };
                }
                W::KeyStr { escape: false } => {
                    let special = bytes[i..]
                        .iter()
                        .position(|&c| c == b'"' || c == b'\\' || c < 0x20);
                    let Some(k) = special else {
                        self.key.push_str(&text[i..]);
                        return WStep::More;
                    };
                    self.key.push_str(&text[i..i + k]);
                    i += k;
                    match bytes[i] {
                        b'"' => self.st = W::Colon,
                        b'\\' => self.st = W::KeyStr { escape: true },
                        _ => return WStep::Fail(i, "control character in key"),
                    }
                }
                W::Colon => match b {
                    b':' if self.keys.keyed => {
                        // The key is the name (still JSON-escaped); the value, the arguments.
                        self.name_raw.clear();
                        self.name_raw.push('"');
                        self.name_raw.push_str(&self.key);
                        self.name_raw.push('"');
                        if let Err(why) = self.open_call(sink) {
                            return WStep::Fail(i, why);
                        }
                        self.field = Field::Args;
                        self.value.reset();
                        self.st = W::ValueStart;
                    }
                    b':' => {
                        self.field = match self.key.as_str() {
                            "name" => Field::Name,
                            "arguments" | "parameters" => Field::Args,
                            key if Some(key) == self.keys.name => Field::Name,
                            key if Some(key) == self.keys.args => Field::Args,
                            _ => Field::Other,
                        };
                        if self.field == Field::Args && self.has_args {
                            return WStep::Fail(i, "duplicate arguments key");
                        }
                        self.value.reset();
                        self.st = W::ValueStart;
                    }
                    _ if is_ws(b) => {}
                    _ => return WStep::Fail(i, "expected `:`"),
                },
                W::ValueStart => {
                    if !is_ws(b) {
                        if self.field == Field::Args {
                            self.has_args = true;
                            self.args_object = b == b'{';
                            self.args_buf.clear();
                        }
                        self.st = W::Value;
                        continue;
                    }
                }
                W::Value => match self.value.feed(&bytes[i..]) {
                    Scanned::More => {
                        self.take(&text[i..], sink);
                        return WStep::More;
                    }
                    Scanned::Done(n) => {
                        self.take(&text[i..i + n], sink);
                        i += n;
                        self.st = W::CommaOrEnd;
                        if self.field == Field::Name {
                            if let Err(why) = self.open_call(sink) {
                                return WStep::Fail(i, why);
                            }
                        }
                        continue;
                    }
                    Scanned::Invalid(k, why) => {
                        self.take(&text[i..i + k], sink);
                        return WStep::Fail(i + k, why);
                    }
                },
                W::CommaOrEnd => match b {
                    b',' => self.st = W::Key,
                    b'}' => return self.close(i + 1, sink),
                    _ if is_ws(b) => {}
                    _ => return WStep::Fail(i, "expected `,` or `}`"),
                },
            }
            i += 1;
        }
        WStep::More
    }

    /// Route scanned value bytes to where the current key wants them.
    fn take(&mut self, piece: &str, sink: &mut CallSink) {
        match self.field {
            Field::Name => self.name_raw.push_str(piece),
            Field::Args if self.begun && self.args_object => sink.arguments(piece),
            Field::Args => self.args_buf.push_str(piece),
            Field::Other => {}
        }
    }

    /// The output ended inside the object: close it as Dynamo 1.6.1 does (open string,
    /// lists and objects closed) and say whether that leaves a whole call, whose
    /// arguments are then complete on the sink.
    pub(super) fn close_cut(&mut self, sink: &mut CallSink) -> bool {
        if !self.begun && self.st == W::Value && self.field == Field::Name {
            // Cut inside the name: closed, it names the call (`"get_` is `get_`).
            let Some(closing) = self.value.closing() else {
                return false;
            };
            self.name_raw.push_str(&closing);
            if self.open_call(sink).is_err() {
                return false;
            }
            return matches!(self.close(0, sink), WStep::Done(_));
        }
        if !self.begun {
            return false;
        }
        let in_args = self.st == W::Value && self.field == Field::Args;
        let closing = match self.st {
            W::Value => match self.value.closing() {
                Some(closing) => closing,
                None => return false,
            },
            W::CommaOrEnd | W::KeyOrEnd => String::new(),
            _ => return false,
        };
        if in_args && self.args_object {
            sink.arguments(&closing);
        } else if in_args {
            self.args_buf.push_str(&closing);
        }
        matches!(self.close(0, sink), WStep::Done(_))
    }

    fn open_call(&mut self, sink: &mut CallSink) -> Result<(), &'static str> {
        if self.begun {
            return Err("duplicate `name` key");
        }
        let name: String =
            serde_json::from_str(&self.name_raw).map_err(|_| "`name` is not a string")?;
        if name.is_empty() {
            return Err("empty `name`");
        }
        self.begun = true;
        sink.begin_call(&name, None);
        if self.has_args && self.args_object {
            sink.arguments(&self.args_buf);
            self.args_buf.clear();
        }
        Ok(())
    }

    fn close(&mut self, consumed: usize, sink: &mut CallSink) -> WStep {
        if !self.begun {
            return WStep::Fail(consumed, "no `name` key");
        }
        if !self.has_args {
            sink.arguments("{}");
        } else if !self.args_object {
            // Some models send the arguments as a JSON string holding the object,
            // or null for no arguments.
            let trimmed = self.args_buf.trim();
            if trimmed == "null" {
                sink.arguments("{}");
            } else if self.any_arguments {
                // Dynamo hands out the value as written, a string holding JSON too.
                sink.arguments(trimmed);
            } else {
                match serde_json::from_str::<String>(trimmed) {
                    Ok(inner) if inner.trim_start().starts_with('{') && is_valid(&inner) => {
                        sink.arguments(inner.trim())
                    }
                    _ => return WStep::Fail(consumed, "arguments are not a JSON object"),
                }
            }
        }
        WStep::Done(consumed)
    }
}
