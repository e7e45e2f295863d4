//! The request's tool definitions, as the parsers need them: names, and the JSON
//! schema of each parameter so XML-style values can be typed.

use serde_json::Value;

use super::dialect::Dialect;

/// One OpenAI function tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: String,
    /// The `parameters` JSON schema (`{}` when absent).
    pub parameters: Value,
}

/// The tools a request declared.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tools {
    defs: Vec<ToolDef>,
    /// Whose reading of values and arguments the parsers reproduce.
    dialect: Dialect,
}

impl Tools {
    /// From a JSON array of OpenAI tool definitions (`{"type":"function","function":{...}}`);
    /// bare function objects (`{"name":..,"parameters":..}`) are accepted too.
    pub fn from_value(value: &Value) -> Result<Self, String> {
        let Some(items) = value.as_array() else {
            return Err("tools must be a JSON array".into());
        };
        let mut defs = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let function = item.get("function").unwrap_or(item);
            let Some(name) = function.get("name").and_then(Value::as_str) else {
                return Err(format!("tools[{i}] has no function name"));
            };
            defs.push(ToolDef {
                name: name.to_owned(),
                parameters: function
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Default::default())),
            });
        }
        Ok(Self {
            defs,
            dialect: Dialect::Dynamo,
        })
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, String> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        Self::from_value(&value)
    }

    pub fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&ToolDef> {
        self.defs.iter().find(|d| d.name == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ToolDef> {
        self.defs.iter()
    }
}

/// The JSON type a parameter's schema asks for, as far as XML-style values care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    String,
    Integer,
    Number,
    Boolean,
    Object,
    Array,
    Null,
    /// Unknown tool or parameter, or a schema without a usable type.
    Unknown,
}

/// A parameter's kind, and whether `null` is also allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamType {
    pub kind: ValueKind,
    pub nullable: bool,
}

impl ParamType {
    pub const UNKNOWN: Self = Self {
        kind: ValueKind::Unknown,
        nullable: false,
    };
    pub const STRING: Self = Self {
        kind: ValueKind::String,
        nullable: false,
    };
}

fn kind_named(name: &str) -> Option<ValueKind> {
    Some(match name {
        "string" => ValueKind::String,
        "integer" => ValueKind::Integer,
        "number" => ValueKind::Number,
        "boolean" => ValueKind::Boolean,
        "object" => ValueKind::Object,
        "array" => ValueKind::Array,
        "null" => ValueKind::Null,
        _ => return None,
    })
}

/// The first non-null type a schema allows (`type` string or list, then `anyOf`/`oneOf`),
/// and whether it also allows null.
pub fn schema_type(schema: &Value) -> ParamType {
    let mut kind = None;
    let mut nullable = schema.get("nullable").and_then(Value::as_bool) == Some(true);
    let mut note = |k: ValueKind| {
        if k == ValueKind::Null {
            nullable = true;
        } else if kind.is_none() {
            kind = Some(k);
        }
    };
    match schema.get("type") {
        Some(Value::String(t)) => kind_named(t).into_iter().for_each(&mut note),
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|t| t.as_str().and_then(kind_named))
            .for_each(&mut note),
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        for branch in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let inner = schema_type(branch);
            if inner.nullable {
                note(ValueKind::Null);
            }
            if inner.kind != ValueKind::Unknown {
                note(inner.kind);
            }
        }
    }
    if kind.is_none() {
        if schema.get("properties").is_some() {
            kind = Some(ValueKind::Object);
        } else if schema.get("items").is_some() {
            kind = Some(ValueKind::Array);
        }
    }
    let kind = kind.unwrap_or(if nullable {
        ValueKind::Null
    } else {
        ValueKind::Unknown
    });
    ParamType { kind, nullable }
}

impl ToolDef {
    /// The declared type of parameter `param`; `UNKNOWN` when the schema does not list it.
    pub fn param_type(&self, param: &str) -> ParamType {
        match self.parameters.get("properties").and_then(|p| p.get(param)) {
            Some(schema) => schema_type(schema),
            None => ParamType::UNKNOWN,
        }
    }
}

impl Tools {
    /// The declared type of `tool`'s parameter `param`; `UNKNOWN` for an unknown tool or parameter.
    pub fn param_type(&self, tool: &str, param: &str) -> ParamType {
        let ty = self
            .get(tool)
            .map_or(ParamType::UNKNOWN, |def| def.param_type(param));
        if ty.kind == ValueKind::Unknown && self.dialect.untyped_values_are_text() {
            return ParamType::STRING;
        }
        ty
    }

    /// The same tools, read in `dialect`'s way.
    pub fn in_dialect(&self, dialect: Dialect) -> Self {
        Self {
            defs: self.defs.clone(),
            dialect,
        }
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// How arguments built from these tools' values are spaced in the dialect.
    pub fn json_style(&self) -> JsonStyle {
        match self.dialect {
            Dialect::Dynamo => JsonStyle::Compact,
            Dialect::Vllm | Dialect::Sglang => JsonStyle::Python,
        }
    }
}

/// How the JSON a parser builds (XML-style arguments) is spaced. Dynamo re-serialises
/// with serde_json (`{"k":1,"j":[1,2]}`); vLLM and SGLang use Python's
/// `json.dumps(ensure_ascii=False)` (`{"k": 1, "j": [1, 2]}`). Non-ASCII is kept either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JsonStyle {
    #[default]
    Compact,
    Python,
}

impl JsonStyle {
    /// Between items of an array or object.
    pub fn item_separator(self) -> &'static str {
        match self {
            JsonStyle::Compact => ",",
            JsonStyle::Python => ", ",
        }
    }

    /// Between a key and its value.
    pub fn key_separator(self) -> &'static str {
        match self {
            JsonStyle::Compact => ":",
            JsonStyle::Python => ": ",
        }
    }
}

impl serde_json::ser::Formatter for JsonStyle {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.before_item(writer, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.before_item(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(self.key_separator().as_bytes())
    }
}

impl JsonStyle {
    /// The item separator before every array item and object key but the first.
    fn before_item<W: ?Sized + std::io::Write>(
        self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(self.item_separator().as_bytes())
        }
    }
}

/// Append `value` as JSON spaced in `style`.
pub fn write_json<T: serde::Serialize + ?Sized>(value: &T, style: JsonStyle, out: &mut String) {
    let mut bytes = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut bytes, style);
    value
        .serialize(&mut ser)
        .expect("serializing JSON into memory cannot fail");
    out.push_str(std::str::from_utf8(&bytes).expect("serde_json writes UTF-8"));
}

/// Append `text` as a JSON string.
pub fn write_json_str(text: &str, out: &mut String) {
    out.push('"');
    escape_json_into(text, out);
    out.push('"');
}

/// Append `text` escaped for the inside of a JSON string, as serde_json escapes it, so a
/// string streamed in pieces matches the same string written whole.
pub fn escape_json_into(text: &str, out: &mut String) {
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&text[start..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&text[start..]);
}

fn null_text(text: &str) -> bool {
    matches!(text, "null" | "None")
}

fn write_integer(text: &str, out: &mut String) -> bool {
    if let Ok(n) = text.parse::<i64>() {
        out.push_str(itoa::Buffer::new().format(n));
        return true;
    }
    if let Ok(n) = text.parse::<u64>() {
        out.push_str(itoa::Buffer::new().format(n));
        return true;
    }
    // "3.0" for an integer parameter: the value is integral, so say 3.
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
            out.push_str(itoa::Buffer::new().format(f as i64));
            true
        }
        _ => false,
    }
}

/// A number; integral values are written as integers ("42.0" → 42), as vLLM and Dynamo do.
fn write_number(text: &str, out: &mut String) -> bool {
    if write_integer(text, out) {
        return true;
    }
    // Also spellings JSON lacks but models write (".5", "+2.5").
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() => {
            write_json(&f, JsonStyle::Compact, out);
            true
        }
        _ => false,
    }
}

/// A JSON document of the wanted shape (`None`: any non-string value).
fn write_parsed(text: &str, want: Option<ValueKind>, style: JsonStyle, out: &mut String) -> bool {
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    let fits = match want {
        Some(ValueKind::Object) => value.is_object(),
        Some(ValueKind::Array) => value.is_array(),
        _ => !value.is_string(),
    };
    if fits {
        write_json(&value, style, out);
    }
    fits
}

/// Append the JSON for an XML-style parameter value typed by `ty`.
///
/// Strings are kept exactly; other kinds are read from the trimmed text, and a value
/// that does not fit its kind falls back to the raw string. For an unknown tool or
/// parameter the text is taken as JSON when it is a number, boolean, null, object or
/// array, and as a string otherwise.
pub fn write_typed_value(raw: &str, ty: ParamType, style: JsonStyle, out: &mut String) {
    let text = raw.trim();
    if ty.nullable && null_text(text) {
        out.push_str("null");
        return;
    }
    let done = match ty.kind {
        ValueKind::String => false,
        ValueKind::Integer => write_integer(text, out),
        ValueKind::Number => write_number(text, out),
        ValueKind::Boolean => match text {
            "true" | "True" => {
                out.push_str("true");
                true
            }
            "false" | "False" => {
                out.push_str("false");
                true
            }
            _ => false,
        },
        ValueKind::Object | ValueKind::Array => write_parsed(text, Some(ty.kind), style, out),
        ValueKind::Null => {
            if null_text(text) {
                out.push_str("null");
                true
            } else {
                false
            }
        }
        ValueKind::Unknown => write_parsed(text, None, style, out),
    };
    if !done {
        write_json_str(raw, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Tools {
        Tools::from_value(
            &json!([{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object",
                "properties": {
                    "s": {"type": "string"},
                    "i": {"type": "integer"},
                    "n": {"type": "number"},
                    "b": {"type": "boolean"},
                    "o": {"type": "object"},
                    "a": {"type": "array", "items": {"type": "integer"}},
                    "maybe_i": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
                    "listed": {"type": ["null", "number"]},
                    "one": {"oneOf": [{"type": "string"}, {"type": "null"}]},
                    "untyped": {"description": "anything"}
                }
            }}}]),
        )
        .unwrap()
    }

    fn typed(param: &str, raw: &str) -> String {
        let mut out = String::new();
        write_typed_value(
            raw,
            tools().param_type("f", param),
            JsonStyle::Python,
            &mut out,
        );
        out
    }

    #[test]
    fn escaping_matches_serde_json() {
        let text = "q\"b\\n\nr\rt\tb\u{8}f\u{c}z\u{0}\u{1f}\u{7f}é🌍";
        let mut ours = String::new();
        write_json_str(text, &mut ours);
        assert_eq!(ours, serde_json::to_string(text).unwrap());
    }

    #[test]
    fn schema_types_resolve() {
        let t = tools();
        assert_eq!(t.param_type("f", "i").kind, ValueKind::Integer);
        let maybe = t.param_type("f", "maybe_i");
        assert_eq!((maybe.kind, maybe.nullable), (ValueKind::Integer, true));
        let listed = t.param_type("f", "listed");
        assert_eq!((listed.kind, listed.nullable), (ValueKind::Number, true));
        assert_eq!(t.param_type("f", "one").kind, ValueKind::String);
        assert_eq!(t.param_type("f", "untyped"), ParamType::UNKNOWN);
        assert_eq!(t.param_type("f", "missing"), ParamType::UNKNOWN);
        assert_eq!(t.param_type("g", "i"), ParamType::UNKNOWN);
    }

    #[test]
    fn values_coerce_or_fall_back_to_strings() {
        assert_eq!(typed("s", "42"), "\"42\"");
        assert_eq!(typed("s", " a\"b\n"), "\" a\\\"b\\n\"");
        assert_eq!(typed("i", " 42\n"), "42");
        assert_eq!(typed("i", "3.0"), "3");
        assert_eq!(typed("i", "three"), "\"three\"");
        assert_eq!(typed("n", "2.50"), "2.5");
        assert_eq!(typed("n", ".5"), "0.5");
        assert_eq!(typed("n", "42.0"), "42");
        assert_eq!(typed("n", "1e3"), "1000");
        assert_eq!(typed("n", "-0.25"), "-0.25");
        assert_eq!(typed("b", "True"), "true");
        assert_eq!(typed("b", "yes"), "\"yes\"");
        assert_eq!(
            typed("o", "{\"x\":[1,{\"y\":\"é\"}],\"a\":null}"),
            "{\"x\": [1, {\"y\": \"é\"}], \"a\": null}"
        );
        assert_eq!(typed("o", "[1]"), "\"[1]\"");
        assert_eq!(typed("a", "[1,2]"), "[1, 2]");
        assert_eq!(typed("maybe_i", "None"), "null");
        assert_eq!(typed("maybe_i", "7"), "7");
        assert_eq!(typed("i", "null"), "\"null\"");
        assert_eq!(typed("one", "null"), "null");
        assert_eq!(typed("untyped", "12"), "12");
        assert_eq!(typed("untyped", "\"q\""), "\"\\\"q\\\"\"");
        assert_eq!(typed("missing", "hello"), "\"hello\"");
        assert_eq!(typed("missing", "{\"k\": true}"), "{\"k\": true}");
    }
}
