//! A region's value: its body read by the field's content parser (`text`, `int`,
//! `float`, `bool`, `json`, `xml-inline`, `kv-lines`), then reshaped by the field's
//! `transform`, with tool-call arguments cast to the declared parameter types.

use fancy_regex::Regex;
use serde_json::{Map, Value};

use super::TemplateError;
use crate::parsers::Tools;

/// A content parser with its `content_args`.
#[derive(Debug)]
pub enum Content {
    Text {
        strip: bool,
    },
    Int {
        strip: bool,
    },
    Float {
        strip: bool,
    },
    Bool {
        strip: bool,
    },
    Json(JsonArgs),
    XmlInline {
        tag: Regex,
        value: Option<Box<Content>>,
        merge_duplicates: bool,
    },
    KvLines {
        strip: bool,
        line_sep: String,
        kv_sep: String,
        value: Option<Box<Content>>,
    },
}

#[derive(Debug)]
pub struct JsonArgs {
    strip: bool,
    unquoted_keys: bool,
    string_delims: Vec<(String, String)>,
    allow_non_json: bool,
}

fn arg_bool(args: &Map<String, Value>, key: &str, default: bool) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(default)
}

fn arg_str(args: &Map<String, Value>, key: &str, default: &str) -> String {
    args.get(key)
        .and_then(Value::as_str)
        .unwrap_or(default)
        .to_owned()
}

impl Content {
    /// The parser `name` configured by `args` (a JSON object or absent).
    pub fn new(scope: &str, name: &str, args: Option<&Value>) -> Result<Self, TemplateError> {
        let empty = Map::new();
        let args = match args {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(map)) => map,
            Some(_) => {
                return Err(TemplateError(format!(
                    "{scope}: content_args must be an object"
                )))
            }
        };
        let strip = arg_bool(args, "strip", true);
        let sub = |key: &str| -> Result<Option<Box<Content>>, TemplateError> {
            match args.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(spec) => {
                    let name = spec.get("name").and_then(Value::as_str).unwrap_or("text");
                    Ok(Some(Box::new(Content::new(scope, name, spec.get("args"))?)))
                }
            }
        };
        Ok(match name {
            "text" => Content::Text { strip },
            "int" => Content::Int { strip },
            "float" => Content::Float { strip },
            "bool" => Content::Bool { strip },
            "json" => {
                let mut string_delims = Vec::new();
                for pair in args
                    .get("string_delims")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    match pair.as_array().map(Vec::as_slice) {
                        Some([Value::String(open), Value::String(close)]) => {
                            string_delims.push((open.clone(), close.clone()))
                        }
                        _ => {
                            return Err(TemplateError(format!(
                                "{scope}: string_delims must be [open, close] pairs"
                            )))
                        }
                    }
                }
                Content::Json(JsonArgs {
                    strip,
                    unquoted_keys: arg_bool(args, "unquoted_keys", false),
                    string_delims,
                    allow_non_json: arg_bool(args, "allow_non_json", false),
                })
            }
            "xml-inline" => {
                let pattern = args
                    .get("tag_pattern")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        TemplateError(format!(
                            "{scope}: xml-inline needs a 'tag_pattern' content_arg"
                        ))
                    })?;
                let tag = dotall(pattern)
                    .map_err(|e| TemplateError(format!("{scope}: invalid tag_pattern: {e}")))?;
                if !tag.capture_names().flatten().any(|n| n == "key") {
                    return Err(TemplateError(format!(
                        "{scope}: tag_pattern needs a named group 'key'"
                    )));
                }
                Content::XmlInline {
                    tag,
                    value: sub("value_parser")?,
                    merge_duplicates: arg_bool(args, "merge_duplicates", false),
                }
            }
            "kv-lines" => Content::KvLines {
                strip,
                line_sep: arg_str(args, "line_sep", "\n"),
                kv_sep: arg_str(args, "kv_sep", ":"),
                value: sub("value_parser")?,
            },
            other => {
                return Err(TemplateError(format!(
                    "{scope}: unknown content parser '{other}'; available: bool, float, int, \
                     json, kv-lines, text, xml-inline"
                )))
            }
        })
    }

    /// Its chunks are the value's own text (as opposed to raw bytes of a structure).
    pub fn is_text(&self) -> bool {
        matches!(self, Content::Text { .. })
    }

    pub fn parse(&self, text: &str) -> Result<Value, String> {
        let trim = |strip: bool| if strip { text.trim() } else { text };
        match self {
            Content::Text { strip } => Ok(Value::String(trim(*strip).to_owned())),
            Content::Int { strip } => trim(*strip)
                .parse::<i64>()
                .map(Value::from)
                .map_err(|e| format!("int: {e}")),
            Content::Float { strip } => trim(*strip)
                .parse::<f64>()
                .ok()
                .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number))
                .ok_or_else(|| format!("float: {:?}", trim(*strip))),
            Content::Bool { strip } => Ok(Value::Bool(matches!(
                trim(*strip).to_lowercase().as_str(),
                "true" | "1"
            ))),
            Content::Json(args) => args.parse(text),
            Content::XmlInline {
                tag,
                value,
                merge_duplicates,
            } => {
                let mut out = Map::new();
                for found in tag.captures_iter(text) {
                    let found = found.map_err(|e| format!("xml-inline: {e}"))?;
                    let key = found.name("key").map_or("", |m| m.as_str()).to_owned();
                    let raw = found.name("value").map_or("", |m| m.as_str());
                    let parsed = sub_parse(value.as_deref(), raw)?;
                    match out.get_mut(&key) {
                        Some(Value::Array(items)) if *merge_duplicates => items.push(parsed),
                        Some(existing) if *merge_duplicates => {
                            let first = existing.take();
                            *existing = Value::Array(vec![first, parsed]);
                        }
                        _ => {
                            out.insert(key, parsed);
                        }
                    }
                }
                Ok(Value::Object(out))
            }
            Content::KvLines {
                strip,
                line_sep,
                kv_sep,
                value,
            } => {
                let cut = |s: &'_ str| -> String { if *strip { s.trim() } else { s }.to_owned() };
                let mut out = Map::new();
                for line in text.split(line_sep.as_str()) {
                    let line = cut(line);
                    let Some((key, raw)) = line.split_once(kv_sep.as_str()) else {
                        continue;
                    };
                    out.insert(cut(key), sub_parse(value.as_deref(), &cut(raw))?);
                }
                Ok(Value::Object(out))
            }
        }
    }
}

fn sub_parse(parser: Option<&Content>, raw: &str) -> Result<Value, String> {
    match parser {
        None => Ok(Value::String(raw.to_owned())),
        Some(parser) => parser.parse(raw),
    }
}

/// A pattern compiled as the servers compile theirs: `.` matches newlines too.
pub fn dotall(pattern: &str) -> Result<Regex, String> {
    Regex::new(&format!("(?s:{pattern})")).map_err(|e| e.to_string())
}

impl JsonArgs {
    fn parse(&self, text: &str) -> Result<Value, String> {
        let mut working = text.to_owned();
        let mut captured = Vec::new();
        if !self.string_delims.is_empty() && text.contains(['\u{1}', '\u{2}']) {
            return Err("json: the text holds the reserved characters \\x01/\\x02".into());
        }
        // Strings between custom delimiters become placeholders, so that neither
        // quoting nor key rewriting touches them, then real JSON strings.
        for (open, close) in &self.string_delims {
            let mut out = String::with_capacity(working.len());
            let mut rest = working.as_str();
            while let Some(at) = rest.find(open.as_str()) {
                let after = &rest[at + open.len()..];
                let Some(end) = after.find(close.as_str()) else {
                    break;
                };
                out.push_str(&rest[..at]);
                out.push_str(&format!("\u{1}{}\u{2}", captured.len()));
                captured.push(after[..end].to_owned());
                rest = &after[end + close.len()..];
            }
            out.push_str(rest);
            working = out;
        }
        if self.unquoted_keys {
            working = quote_bare_keys(&working);
        }
        for (i, s) in captured.iter().enumerate() {
            working = working.replace(
                &format!("\u{1}{i}\u{2}"),
                &Value::String(s.clone()).to_string(),
            );
        }
        match serde_json::from_str::<Value>(&working) {
            Ok(value) => Ok(value),
            Err(_) if self.allow_non_json => Ok(Value::String(
                if self.strip { text.trim() } else { text }.to_owned(),
            )),
            Err(e) => Err(format!("json: {e}")),
        }
    }
}

/// `{key: 1, other: 2}` → `{"key": 1, "other": 2}`: a run of word characters right
/// after `{` or `,` and right before `:` is quoted.
fn quote_bare_keys(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut rest = text;
    let mut after_opener = false;
    while let Some(c) = rest.chars().next() {
        if after_opener {
            let word = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if word > 0 && rest[word..].starts_with(':') {
                out.push('"');
                out.push_str(&rest[..word]);
                out.push_str("\":");
                rest = &rest[word + 1..];
                after_opener = false;
                continue;
            }
        }
        after_opener = c == '{' || c == ',';
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A `{name}` or `{name.key}` placeholder filling a whole string: its path.
fn placeholder(text: &str) -> Option<Vec<&str>> {
    let inner = text.strip_prefix('{')?.strip_suffix('}')?;
    let parts: Vec<&str> = inner.split('.').collect();
    let word = |p: &&str| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_');
    parts.iter().all(word).then_some(parts)
}

/// Whether `text` holds a placeholder anywhere.
fn holds_placeholder(text: &str) -> bool {
    text.match_indices('{').any(|(at, _)| {
        text[at..]
            .find('}')
            .is_some_and(|end| placeholder(&text[at..=at + end]).is_some())
    })
}

/// A transform may only use whole-string placeholders.
pub fn validate_transform(scope: &str, transform: &Value) -> Result<(), TemplateError> {
    match transform {
        Value::Object(map) => map.values().try_for_each(|v| validate_transform(scope, v)),
        Value::Array(items) => items.iter().try_for_each(|v| validate_transform(scope, v)),
        Value::String(s) if holds_placeholder(s) && placeholder(s).is_none() => Err(TemplateError(
            format!("{scope}: transform string {s:?} mixes a placeholder with text"),
        )),
        _ => Ok(()),
    }
}

/// `transform` with every placeholder replaced by its value in `scope`.
pub fn apply_transform(transform: &Value, scope: &Map<String, Value>) -> Result<Value, String> {
    Ok(match transform {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), apply_transform(v, scope)?)))
                .collect::<Result<_, String>>()?,
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| apply_transform(v, scope))
                .collect::<Result<_, _>>()?,
        ),
        Value::String(s) => match placeholder(s) {
            None => transform.clone(),
            Some(path) => {
                let mut value = scope
                    .get(path[0])
                    .ok_or_else(|| format!("transform placeholder {s} is not defined"))?;
                for key in &path[1..] {
                    value = value
                        .as_object()
                        .and_then(|m| m.get(*key))
                        .ok_or_else(|| format!("transform placeholder {s}: no key {key}"))?;
                }
                value.clone()
            }
        },
        other => other.clone(),
    })
}

/// The JSON types a parameter schema allows (its `type`, `anyOf`/`oneOf`, `nullable`).
fn schema_types(schema: &Value, out: &mut Vec<String>) {
    match schema.get("type") {
        Some(Value::String(t)) => out.push(t.clone()),
        Some(Value::Array(ts)) => {
            out.extend(ts.iter().filter_map(Value::as_str).map(str::to_owned))
        }
        _ => {}
    }
    for union in ["anyOf", "oneOf"] {
        for choice in schema
            .get(union)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            schema_types(choice, out);
        }
    }
    if schema.get("nullable").and_then(Value::as_bool) == Some(true)
        && !out.iter().any(|t| t == "null")
    {
        out.push("null".into());
    }
}

/// `raw` as the first of `types` it reads as; the text itself otherwise.
fn coerce(raw: &str, types: &[String]) -> Value {
    for ty in types {
        match ty.as_str() {
            "integer" => {
                if let Ok(n) = raw.trim().parse::<i64>() {
                    return n.into();
                }
                if let Ok(f) = raw.trim().parse::<f64>() {
                    if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 {
                        return (f as i64).into();
                    }
                }
            }
            "number" => {
                if let Ok(f) = raw.trim().parse::<f64>() {
                    if !f.is_finite() {
                        continue;
                    }
                    if f.fract() == 0.0 && !raw.contains('.') && f.abs() < 9.0e15 {
                        return (f as i64).into();
                    }
                    if let Some(n) = serde_json::Number::from_f64(f) {
                        return Value::Number(n);
                    }
                }
            }
            "boolean" => match raw.trim().to_lowercase().as_str() {
                "true" | "1" => return Value::Bool(true),
                "false" | "0" => return Value::Bool(false),
                _ => {}
            },
            "null" if matches!(raw.trim(), "null" | "None") => return Value::Null,
            "object" | "array" => {
                if let Ok(v) = serde_json::from_str::<Value>(raw) {
                    if (ty == "object" && v.is_object()) || (ty == "array" && v.is_array()) {
                        return v;
                    }
                }
            }
            _ => {}
        }
    }
    Value::String(raw.to_owned())
}

/// Cast the string arguments of each call in `value` to its tool's parameter types.
pub fn coerce_calls(value: &mut Value, tools: &Tools) {
    if let Value::Array(items) = value {
        items.iter_mut().for_each(|item| coerce_calls(item, tools));
        return;
    }
    let Some(function) = value.get_mut("function").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(tool) = function
        .get("name")
        .and_then(Value::as_str)
        .and_then(|n| tools.get(n))
    else {
        return;
    };
    let Some(properties) = tool.parameters.get("properties").and_then(Value::as_object) else {
        return;
    };
    let Some(arguments) = function.get_mut("arguments").and_then(Value::as_object_mut) else {
        return;
    };
    for (key, argument) in arguments.iter_mut() {
        let mut types = Vec::new();
        if let Some(schema) = properties.get(key) {
            schema_types(schema, &mut types);
        }
        if types.is_empty() {
            continue;
        }
        match argument {
            Value::String(raw) => *argument = coerce(raw, &types),
            // Duplicate keys gathered by `merge_duplicates`.
            Value::Array(items) if !types.iter().any(|t| t == "array") => {
                for item in items.iter_mut() {
                    if let Value::String(raw) = item {
                        *item = coerce(raw, &types);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_dialect_knobs() {
        let args = json!({"unquoted_keys": true, "string_delims": [["<|\"|>", "<|\"|>"]]});
        let parser = Content::new("t", "json", Some(&args)).unwrap();
        let value = parser
            .parse("{city:<|\"|>Paris, \"FR\"<|\"|>,n:2}")
            .unwrap();
        assert_eq!(value, json!({"city": "Paris, \"FR\"", "n": 2}));
        let lax = Content::new("t", "json", Some(&json!({"allow_non_json": true}))).unwrap();
        assert_eq!(lax.parse(" nope ").unwrap(), json!("nope"));
    }

    #[test]
    fn transforms_fill_whole_placeholders_only() {
        let t = json!({"function": {"name": "{name}", "arguments": "{content.args}"}});
        let scope = json!({"name": "f", "content": {"args": {"a": 1}}});
        let out = apply_transform(&t, scope.as_object().unwrap()).unwrap();
        assert_eq!(
            out,
            json!({"function": {"name": "f", "arguments": {"a": 1}}})
        );
        assert!(validate_transform("t", &json!("call {name}")).is_err());
        assert!(validate_transform("t", &json!("{name}")).is_ok());
    }

    #[test]
    fn arguments_take_their_declared_types() {
        let tools = Tools::from_value(&json!([{"type": "function", "function": {"name": "f",
            "parameters": {"properties": {"n": {"type": "integer"}, "x": {"type": "number"},
            "b": {"type": "boolean"}, "o": {"type": "object"}, "s": {"type": "string"}}}}}]))
        .unwrap();
        let mut call = json!({"function": {"name": "f", "arguments":
            {"n": "3.0", "x": "2.5", "b": "False", "o": "{\"k\": 1}", "s": "7"}}});
        coerce_calls(&mut call, &tools);
        assert_eq!(
            call["function"]["arguments"],
            json!({"n": 3, "x": 2.5, "b": false, "o": {"k": 1}, "s": "7"})
        );
    }
}
