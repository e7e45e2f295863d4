//! Parsers driven by a response template: the declarative description of an
//! assistant message that a checkpoint ships as `response_template` in its
//! tokenizer config (vLLM's `hf` and `beam`, SGLang's `response_template` and
//! `beam` parsers). The template names up to three fields — `thinking`,
//! `content`, `tool_calls` — each a region between an opener and a closer (a
//! literal, a list of literals or a pattern) whose body a content parser reads.
//! Beam checkpoints' template is built in (SGLang's fallback profile).
//!
//! Two stages, as the servers split them: the reasoning stage releases thinking as
//! reasoning and the rest as text, tool regions verbatim; the tool stage turns each
//! tool region into calls when it closes and releases thinking and content bodies
//! as content.

mod scan;
mod values;

use std::sync::{Arc, OnceLock};

use regex_automata::hybrid::dfa::DFA;
use serde_json::{Map, Value};

use scan::{Event, Scanner};
use values::{apply_transform, coerce_calls, dotall, validate_transform, Content};

use super::dialect::Dialect;
use super::schema::write_json;
use super::{CallSink, Delta, ReasoningParse, ToolParse, Tools};

/// A template the servers would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid response_template: {0}")]
pub struct TemplateError(pub String);

const THINKING: &str = "thinking";
const CONTENT: &str = "content";
const TOOL_CALLS: &str = "tool_calls";

/// A region's opener or closer.
#[derive(Debug)]
struct Anchor {
    /// The literals, for a literal anchor; `None` for a pattern.
    literals: Option<Vec<String>>,
    /// One literal is a strict prefix of another, so a match can still grow.
    can_extend: bool,
    /// The pattern, with its named captures.
    regex: Option<fancy_regex::Regex>,
    /// The pattern as a lazy DFA, to tell whether more text could still match it.
    dfa: Option<DFA>,
}

impl Anchor {
    fn new(
        scope: &str,
        spec: &Map<String, Value>,
        literal_key: &str,
        pattern_key: &str,
    ) -> Result<Option<Self>, TemplateError> {
        let err = |m: String| TemplateError(format!("{scope}: {m}"));
        match (spec.get(literal_key), spec.get(pattern_key)) {
            (Some(_), Some(_)) => Err(err(format!("both '{literal_key}' and '{pattern_key}'"))),
            (Some(raw), None) => {
                let mut literals: Vec<String> = match raw {
                    Value::String(s) => vec![s.clone()],
                    Value::Array(items) if !items.is_empty() => items
                        .iter()
                        .map(|v| v.as_str().map(str::to_owned))
                        .collect::<Option<_>>()
                        .ok_or_else(|| err(format!("'{literal_key}' must hold strings")))?,
                    _ => return Err(err(format!("'{literal_key}' must be a string or a list"))),
                };
                if literals.iter().any(String::is_empty) {
                    return Err(err(format!("'{literal_key}' literals cannot be empty")));
                }
                let mut seen = Vec::new();
                literals.retain(|l| {
                    let new = !seen.contains(l);
                    seen.push(l.clone());
                    new
                });
                let can_extend = literals
                    .iter()
                    .any(|a| literals.iter().any(|b| a != b && a.starts_with(b.as_str())));
                Ok(Some(Anchor {
                    literals: Some(literals),
                    can_extend,
                    regex: None,
                    dfa: None,
                }))
            }
            (None, Some(pattern)) => {
                let pattern = pattern
                    .as_str()
                    .ok_or_else(|| err(format!("'{pattern_key}' must be a string")))?;
                let regex =
                    dotall(pattern).map_err(|e| err(format!("invalid {pattern_key}: {e}")))?;
                let dfa = DFA::new(&format!("(?s:{pattern})")).map_err(|e| {
                    err(format!(
                        "{pattern_key} must be a pattern without look-around: {e}"
                    ))
                })?;
                Ok(Some(Anchor {
                    literals: None,
                    can_extend: false,
                    regex: Some(regex),
                    dfa: Some(dfa),
                }))
            }
            (None, None) => Ok(None),
        }
    }

    /// The text the anchor matches, when it is one fixed string.
    fn literal_text(&self, pattern: Option<&str>) -> Vec<String> {
        match (&self.literals, pattern) {
            (Some(literals), _) => literals.clone(),
            (None, Some(pattern)) => unescape_literal(pattern).into_iter().collect(),
            (None, None) => Vec::new(),
        }
    }
}

/// A pattern that matches one fixed string (escapes only), as that string.
fn unescape_literal(pattern: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let next = chars.next()?;
                if next.is_alphanumeric() {
                    return None;
                }
                out.push(next);
            }
            '.' | '^' | '$' | '*' | '+' | '?' | '(' | ')' | '[' | ']' | '{' | '}' | '|' => {
                return None
            }
            c => out.push(c),
        }
    }
    Some(out)
}

#[derive(Debug)]
struct Field {
    name: String,
    open: Option<Anchor>,
    close: Option<Anchor>,
    content: Content,
    transform: Option<Value>,
    transform_each: bool,
}

impl Field {
    fn new(name: &str, spec: &Value) -> Result<Self, TemplateError> {
        const KEYS: &[&str] = &[
            "open",
            "open_pattern",
            "close",
            "close_pattern",
            "content",
            "content_args",
            "repeats",
            "join",
            "optional",
            "transform",
            "transform_each",
        ];
        let scope = format!("field '{name}'");
        let spec = spec
            .as_object()
            .ok_or_else(|| TemplateError(format!("{scope} must be an object")))?;
        if let Some(unknown) = spec.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(TemplateError(format!("{scope}: unknown key '{unknown}'")));
        }
        let content_name = spec
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or("text");
        let content = Content::new(&scope, content_name, spec.get("content_args"))?;
        let open = Anchor::new(&scope, spec, "open", "open_pattern")?;
        let close = Anchor::new(&scope, spec, "close", "close_pattern")?;
        let transform = spec.get("transform").filter(|t| !t.is_null()).cloned();
        let transform_each = spec.get("transform_each").and_then(Value::as_bool) == Some(true);
        match &transform {
            Some(t) => validate_transform(&scope, t)?,
            None if transform_each => {
                return Err(TemplateError(format!(
                    "{scope}: transform_each without a transform"
                )))
            }
            None => {
                let named = [&open, &close]
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.regex.as_ref())
                    .any(|r| r.capture_names().flatten().next().is_some());
                if named {
                    return Err(TemplateError(format!(
                        "{scope}: named groups in a pattern reach the output only through a transform"
                    )));
                }
            }
        }
        let text_only = content.is_text() && transform.is_none() && spec.get("join").is_none();
        if (name == THINKING || name == CONTENT) && !text_only {
            return Err(TemplateError(format!(
                "{scope} must be plain text to be streamed"
            )));
        }
        Ok(Field {
            name: name.to_owned(),
            open,
            close,
            content,
            transform,
            transform_each,
        })
    }

    /// The field with no delimiters: text outside every region.
    fn plain(name: &str) -> Self {
        Field {
            name: name.to_owned(),
            open: None,
            close: None,
            content: Content::Text { strip: true },
            transform: None,
            transform_each: false,
        }
    }

    /// The value of a region with this `body`, opened with `captures`.
    fn value(
        &self,
        body: &str,
        captures: Map<String, Value>,
        tools: &Tools,
    ) -> Result<Value, String> {
        let parsed = self.content.parse(body)?;
        let mut value = match &self.transform {
            None => parsed,
            Some(t) if self.transform_each => {
                let Value::Array(items) = parsed else {
                    return Err(format!(
                        "field '{}': transform_each needs a list",
                        self.name
                    ));
                };
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    let Value::Object(item) = item else {
                        return Err(format!(
                            "field '{}': transform_each needs objects",
                            self.name
                        ));
                    };
                    let mut scope = captures.clone();
                    scope.extend(item);
                    out.push(apply_transform(t, &scope)?);
                }
                Value::Array(out)
            }
            Some(t) => {
                let mut scope = captures;
                scope.insert(CONTENT.into(), parsed);
                apply_transform(t, &scope)?
            }
        };
        if self.name == TOOL_CALLS {
            coerce_calls(&mut value, tools);
        }
        Ok(value)
    }
}

/// A loaded response template.
#[derive(Debug)]
pub struct Template {
    fields: Vec<Field>,
    /// The field text outside every region belongs to.
    implicit: Option<usize>,
    thinking: Option<usize>,
    tool_calls: Option<usize>,
    /// Literal forms of the start anchor: where an assistant message begins.
    message_start: Vec<String>,
}

impl Template {
    /// From the `response_template` object of a tokenizer config.
    pub fn from_value(spec: &Value) -> Result<Self, TemplateError> {
        let err = |m: &str| TemplateError(m.to_owned());
        let spec = spec
            .as_object()
            .ok_or_else(|| err("it must be an object"))?;
        if spec.get("version").is_some_and(|v| v.as_i64() != Some(1)) {
            return Err(err("only version 1 is known"));
        }
        const KEYS: &[&str] = &[
            "version",
            "defaults",
            "fields",
            "start_anchor",
            "start_anchor_pattern",
        ];
        if let Some(unknown) = spec.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(TemplateError(format!("unknown key '{unknown}'")));
        }
        let defaults = spec.get("defaults").and_then(Value::as_object);
        if defaults.is_some_and(|d| d.keys().any(|k| k != "role")) {
            return Err(err("defaults other than 'role' cannot be served"));
        }
        let raw_fields = spec
            .get("fields")
            .and_then(Value::as_object)
            .filter(|f| !f.is_empty())
            .ok_or_else(|| err("'fields' must be a non-empty object"))?;
        let mut fields = Vec::with_capacity(raw_fields.len() + 1);
        for (name, field) in raw_fields {
            if ![THINKING, CONTENT, TOOL_CALLS].contains(&name.as_str()) {
                return Err(TemplateError(format!(
                    "field '{name}' cannot be served; the fields are thinking, content, tool_calls"
                )));
            }
            fields.push(Field::new(name, field)?);
        }
        let implicit: Vec<usize> = (0..fields.len())
            .filter(|&i| fields[i].open.is_none())
            .collect();
        if implicit.len() > 1 {
            return Err(err("at most one field may leave out its opener"));
        }
        let index = |fields: &[Field], name: &str| fields.iter().position(|f| f.name == name);
        if index(&fields, TOOL_CALLS).is_some_and(|i| implicit.contains(&i)) {
            return Err(err("field 'tool_calls' needs an opener"));
        }
        // Text outside every region is content when no field claims it.
        let implicit = match implicit.first() {
            Some(&i) => i,
            None => {
                fields.push(Field::plain(CONTENT));
                fields.len() - 1
            }
        };
        let start = Anchor::new(
            "response_template",
            spec,
            "start_anchor",
            "start_anchor_pattern",
        )?
        .ok_or_else(|| err("it must define 'start_anchor' or 'start_anchor_pattern'"))?;
        let message_start =
            start.literal_text(spec.get("start_anchor_pattern").and_then(Value::as_str));
        Ok(Template {
            thinking: index(&fields, THINKING),
            tool_calls: index(&fields, TOOL_CALLS),
            implicit: Some(implicit),
            fields,
            message_start,
        })
    }

    pub fn from_json(text: &str) -> Result<Self, TemplateError> {
        let value: Value = serde_json::from_str(text).map_err(|e| TemplateError(e.to_string()))?;
        Self::from_value(&value)
    }

    /// Beam checkpoints' template: Harmony-style channels with XML-inline arguments.
    pub fn beam() -> Arc<Template> {
        static BEAM: OnceLock<Arc<Template>> = OnceLock::new();
        BEAM.get_or_init(|| {
            let spec = serde_json::json!({
                "defaults": {"role": "assistant"},
                "start_anchor_pattern": r"<\|start\|>assistant",
                "fields": {
                    "thinking": {
                        "open": "<|channel|>analysis<|message|>",
                        "close": "<|end|><|start|>assistant",
                    },
                    "content": {
                        "open": "<|channel|>final<|message|>",
                        "close": ["<|return|>", "<|end|>", "<|call|>"],
                    },
                    "tool_calls": {
                        "open_pattern": r" to=(?P<name>[^\s<]+)<\|channel\|>analysis <\|constrain\|>xml<\|message\|>",
                        "close": ["<|end|><|start|>assistant", "<|call|>"],
                        "repeats": true,
                        "content": "xml-inline",
                        "content_args": {
                            "tag_pattern": "<rfl:parameter name=\"(?P<key>[^\"]+)\">\\n(?P<value>.*?)\\n(?:</rfl:parameter>|(?=<rfl:parameter name=\"))",
                            "value_parser": {"name": "text", "args": {"strip": false}},
                        },
                        "transform": {
                            "type": "function",
                            "function": {"name": "{name}", "arguments": "{content}"},
                        },
                    },
                },
            });
            Arc::new(Template::from_value(&spec).expect("the built-in Beam template is valid"))
        })
        .clone()
    }

    /// Whether the template has a `thinking` field (a reasoning parser needs one).
    pub fn has_thinking(&self) -> bool {
        self.thinking.is_some()
    }

    /// Whether the template has a `tool_calls` field (a tool-call parser needs one).
    pub fn has_tool_calls(&self) -> bool {
        self.tool_calls.is_some()
    }

    /// Every field's opener and closer, in the order `2 * field + closer`.
    fn anchors(&self) -> impl Iterator<Item = Option<&Anchor>> {
        self.fields
            .iter()
            .flat_map(|f| [f.open.as_ref(), f.close.as_ref()])
    }
}

/// The template a family parses with: the one given, else Beam's for `beam`; none
/// for `response_template` without one (its text then passes through as content).
fn template_for(family: &str, given: Option<Arc<Template>>) -> Option<Arc<Template>> {
    given.or_else(|| (family == "beam").then(Template::beam))
}

/// Whether a family is template-driven.
pub fn is_template_family(family: &str) -> bool {
    matches!(family, "response_template" | "beam")
}

/// Runs the scanner over each piece and hands its events on.
struct Regions {
    template: Arc<Template>,
    scanner: Scanner,
    tools: Arc<Tools>,
    events: Vec<Event>,
}

impl Regions {
    fn new(template: Arc<Template>, in_reasoning: bool, tools: Arc<Tools>) -> Self {
        let in_field = template.thinking.filter(|_| in_reasoning);
        Self {
            scanner: Scanner::new(&template, in_field),
            template,
            tools,
            events: Vec::new(),
        }
    }

    fn feed(&mut self, text: &str) -> Vec<Event> {
        self.scanner
            .feed(&self.template, &self.tools, text, &mut self.events);
        std::mem::take(&mut self.events)
    }

    fn finish(&mut self) -> Vec<Event> {
        self.scanner
            .finish(&self.template, &self.tools, &mut self.events);
        std::mem::take(&mut self.events)
    }
}

/// Thinking to reasoning; everything else as text, tool regions verbatim.
struct ReasoningStage {
    regions: Option<Regions>,
}

impl ReasoningStage {
    fn route(&self, events: Vec<Event>, out: &mut Delta) {
        let Some(regions) = &self.regions else { return };
        let template = &regions.template;
        for event in events {
            match event {
                Event::Chunk { field, text } if Some(field) == template.thinking => {
                    out.reasoning.push_str(&text)
                }
                Event::Chunk { text, .. } => out.content.push_str(&text),
                Event::Open { field, raw } | Event::Close { field, raw, .. }
                    if Some(field) == template.tool_calls =>
                {
                    out.content.push_str(&raw)
                }
                _ => {}
            }
        }
    }
}

impl ReasoningParse for ReasoningStage {
    fn feed(&mut self, text: &str, out: &mut Delta) {
        match self.regions.as_mut() {
            Some(regions) => {
                let events = regions.feed(text);
                self.route(events, out);
            }
            None => out.content.push_str(text),
        }
    }

    fn finish(&mut self, out: &mut Delta) {
        if let Some(regions) = self.regions.as_mut() {
            let events = regions.finish();
            self.route(events, out);
        }
    }
}

/// Tool regions to calls as they close; thinking and content bodies as content.
struct ToolStage {
    regions: Option<Regions>,
    /// SGLang drops a call whose closer never came; vLLM parses it as written.
    drop_cut_off: bool,
}

impl ToolStage {
    fn route(&self, events: Vec<Event>, sink: &mut CallSink) {
        let Some(regions) = &self.regions else { return };
        let template = &regions.template;
        for event in events {
            match event {
                Event::Chunk { field, text } if Some(field) != template.tool_calls => {
                    sink.content(&text)
                }
                Event::Close {
                    field,
                    value,
                    cut_off,
                    ..
                } if Some(field) == template.tool_calls => match value {
                    _ if cut_off && self.drop_cut_off => {
                        sink.error("a tool call was cut off before its closer; dropped")
                    }
                    Err(e) => sink.error(format!("a malformed tool call was dropped: {e}")),
                    Ok(value) => emit_calls(&value, regions.tools.json_style(), sink),
                },
                _ => {}
            }
        }
    }
}

/// The calls of one tool region, or none (with an error) if any is incomplete.
fn emit_calls(value: &Value, style: super::schema::JsonStyle, sink: &mut CallSink) {
    let items = match value {
        Value::Array(items) => items.as_slice(),
        one => std::slice::from_ref(one),
    };
    let mut calls = Vec::with_capacity(items.len());
    for item in items {
        let function = item.get("function");
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let arguments = function
            .and_then(|f| f.get("arguments"))
            .filter(|a| !a.is_null());
        match (name.filter(|n| !n.is_empty()), arguments) {
            (Some(name), Some(arguments)) => calls.push((name, arguments)),
            _ => {
                sink.error("an incomplete tool call (no name or no arguments) was dropped");
                return;
            }
        }
    }
    for (name, arguments) in calls {
        sink.begin_call(name, None);
        match arguments {
            Value::String(text) => sink.arguments(text),
            other => {
                let mut text = String::new();
                write_json(other, style, &mut text);
                sink.arguments(&text);
            }
        }
        sink.end_call();
    }
}

impl ToolParse for ToolStage {
    fn feed(&mut self, text: &str, sink: &mut CallSink) {
        match self.regions.as_mut() {
            Some(regions) => {
                let events = regions.feed(text);
                self.route(events, sink);
            }
            None => sink.content(text),
        }
    }

    fn finish(&mut self, sink: &mut CallSink) {
        if let Some(regions) = self.regions.as_mut() {
            let events = regions.finish();
            self.route(events, sink);
        }
    }

    fn start_markers(&self) -> &'static [&'static str] {
        // The reasoning stage reads the same template, so it needs no exit markers.
        &[]
    }
}

/// The reasoning stage of a template family.
pub fn reasoning_parser(
    family: &str,
    template: Option<Arc<Template>>,
    in_reasoning: Option<bool>,
) -> Box<dyn ReasoningParse> {
    let regions = template_for(family, template)
        .map(|t| Regions::new(t, in_reasoning == Some(true), Arc::new(Tools::default())));
    Box::new(ReasoningStage { regions })
}

/// The tool stage of a template family.
pub fn tool_parser(
    family: &str,
    template: Option<Arc<Template>>,
    tools: Arc<Tools>,
) -> Box<dyn ToolParse> {
    let drop_cut_off = tools.dialect() == Dialect::Sglang;
    let regions = template_for(family, template).map(|t| Regions::new(t, false, tools));
    Box::new(ToolStage {
        regions,
        drop_cut_off,
    })
}

#[cfg(test)]
mod tests;
