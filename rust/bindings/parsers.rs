//! `shakedown.parsers`: push parsers whose `feed` returns a small delta object.
//! Fields are converted on access, so a feed that releases nothing costs one
//! allocation.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use super::detach_if_large;
use super::errors::InvalidTools;
use crate::parsers::template::Template;
use crate::parsers::{self, chat::ChatOptions, dialect::Dialect, Tools};

fn none_if_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// Python's repr of an optional string, near enough for debugging output.
fn repr_opt(s: Option<&str>) -> String {
    s.map_or_else(|| "None".to_owned(), |s| format!("{s:?}"))
}

/// One call's part of a streamed delta.
#[pyclass(module = "shakedown._core", frozen, get_all)]
pub struct CallDelta {
    index: usize,
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

#[pymethods]
impl CallDelta {
    fn __repr__(&self) -> String {
        format!(
            "CallDelta(index={}, id={}, name={}, arguments={:?})",
            self.index,
            repr_opt(self.id.as_deref()),
            repr_opt(self.name.as_deref()),
            self.arguments
        )
    }
}

/// What one `feed` or `finish` released.
#[pyclass(module = "shakedown._core", frozen)]
pub struct Delta {
    inner: parsers::Delta,
}

#[pymethods]
impl Delta {
    #[getter]
    fn content(&self) -> Option<&str> {
        none_if_empty(&self.inner.content)
    }

    #[getter]
    fn reasoning_content(&self) -> Option<&str> {
        none_if_empty(&self.inner.reasoning)
    }

    #[getter]
    fn calls(&self) -> Vec<CallDelta> {
        self.inner
            .calls
            .iter()
            .map(|c| CallDelta {
                index: c.index,
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .collect()
    }

    fn __bool__(&self) -> bool {
        !self.inner.is_empty()
    }

    fn __repr__(&self) -> String {
        format!(
            "Delta(content={}, reasoning_content={}, calls={})",
            repr_opt(self.content()),
            repr_opt(self.reasoning_content()),
            self.inner.calls.len()
        )
    }
}

/// Tools as JSON text (a `str`) or as the objects `json.dumps` takes. The text is the
/// cache key: a caller that passes the same tools on every reply as one string (the vLLM
/// plugin) has them read once, not per reply.
fn tools_from_py(py: Python<'_>, tools: Option<&Bound<'_, PyAny>>) -> PyResult<Arc<Tools>> {
    let Some(tools) = tools.filter(|t| !t.is_none()) else {
        return Ok(Arc::default());
    };
    if let Ok(text) = tools.cast::<PyString>() {
        return tools_from_text(text.to_str()?);
    }
    let text: String = py
        .import("json")?
        .call_method1("dumps", (tools,))?
        .extract()?;
    Ok(Arc::new(
        Tools::from_json(text.as_bytes()).map_err(InvalidTools)?,
    ))
}

/// The last few tool lists given as text, read once each.
static TOOLS_BY_TEXT: Mutex<Vec<(String, Arc<Tools>)>> = Mutex::new(Vec::new());
const TOOLS_CACHED: usize = 16;

fn tools_from_text(text: &str) -> PyResult<Arc<Tools>> {
    let mut cache = TOOLS_BY_TEXT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(at) = cache.iter().position(|(key, _)| key == text) {
        let hit = cache.remove(at);
        let tools = hit.1.clone();
        cache.push(hit);
        return Ok(tools);
    }
    let tools = Arc::new(Tools::from_json(text.as_bytes()).map_err(InvalidTools)?);
    if cache.len() == TOOLS_CACHED {
        cache.remove(0);
    }
    cache.push((text.to_owned(), tools.clone()));
    Ok(tools)
}

/// The checkpoint's `response_template` (an object, or its JSON text), read once per
/// distinct text as tools are.
fn template_from_py(
    py: Python<'_>,
    template: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Arc<Template>>> {
    let Some(template) = template.filter(|t| !t.is_none()) else {
        return Ok(None);
    };
    let text: String = match template.cast::<PyString>() {
        Ok(text) => text.to_str()?.to_owned(),
        Err(_) => py
            .import("json")?
            .call_method1("dumps", (template,))?
            .extract()?,
    };
    let mut cache = TEMPLATES_BY_TEXT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(at) = cache.iter().position(|(key, _)| *key == text) {
        let hit = cache.remove(at);
        let loaded = hit.1.clone();
        cache.push(hit);
        return Ok(Some(loaded));
    }
    let loaded =
        Arc::new(Template::from_json(&text).map_err(|e| PyValueError::new_err(e.to_string()))?);
    if cache.len() == TEMPLATES_CACHED {
        cache.remove(0);
    }
    cache.push((text, loaded.clone()));
    Ok(Some(loaded))
}

static TEMPLATES_BY_TEXT: Mutex<Vec<(String, Arc<Template>)>> = Mutex::new(Vec::new());
const TEMPLATES_CACHED: usize = 8;

fn parse_errors<'py>(
    py: Python<'py>,
    errors: &[parsers::ParseError],
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for err in errors {
        let item = PyDict::new(py);
        item.set_item("index", err.index)?;
        item.set_item("message", &err.message)?;
        list.append(item)?;
    }
    Ok(list)
}

/// The shared engine behind the three public parser classes.
struct Engine {
    parser: parsers::ChatParser,
}

impl Engine {
    fn new(options: &ChatOptions) -> PyResult<Self> {
        Ok(Self {
            parser: parsers::ChatParser::new(options)?,
        })
    }

    fn feed(&mut self, py: Python<'_>, text: &str) -> Delta {
        let mut inner = parsers::Delta::default();
        detach_if_large(py, text.len(), || self.parser.feed(text, &mut inner));
        Delta { inner }
    }

    fn finish(&mut self) -> Delta {
        let mut inner = parsers::Delta::default();
        self.parser.finish(&mut inner);
        Delta { inner }
    }
}

/// Splits streamed model text into `reasoning_content` and `content`.
#[pyclass(module = "shakedown._core")]
pub struct ReasoningParser {
    engine: Engine,
}

#[pymethods]
impl ReasoningParser {
    /// `tool_call`: a tool-call family whose calls end reasoning, as in `ChatParser`;
    /// the call's text comes out as content, for a tool parser run apart.
    #[new]
    #[pyo3(signature = (name, *, in_reasoning=None, thinking=None, force_reasoning=false, force_nonempty_content=false, dialect="dynamo", tool_call=None, response_template=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: &str,
        in_reasoning: Option<bool>,
        thinking: Option<bool>,
        force_reasoning: bool,
        force_nonempty_content: bool,
        dialect: &str,
        tool_call: Option<&str>,
        response_template: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let options = ChatOptions {
            response_template: template_from_py(py, response_template)?,
            reasoning: Some(name.to_owned()),
            tool_call: tool_call.map(str::to_owned),
            in_reasoning: starts_inside(in_reasoning, force_reasoning),
            thinking,
            force_nonempty_content,
            dialect: dialect_from(dialect)?,
            ..ChatOptions::default()
        };
        let parser = parsers::ChatParser::new(&options)?.without_tool_stage();
        Ok(Self {
            engine: Engine { parser },
        })
    }

    fn feed(&mut self, py: Python<'_>, text: &str) -> Delta {
        self.engine.feed(py, text)
    }

    fn finish(&mut self) -> Delta {
        self.engine.finish()
    }
}

/// Finds tool calls in streamed content.
#[pyclass(module = "shakedown._core")]
pub struct ToolCallParser {
    engine: Engine,
}

#[pymethods]
impl ToolCallParser {
    #[new]
    #[pyo3(signature = (name, *, tools=None, stream_arguments=true, dialect="dynamo", response_template=None))]
    fn new(
        py: Python<'_>,
        name: &str,
        tools: Option<&Bound<'_, PyAny>>,
        stream_arguments: bool,
        dialect: &str,
        response_template: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let options = ChatOptions {
            response_template: template_from_py(py, response_template)?,
            tool_call: Some(name.to_owned()),
            tools: tools_from_py(py, tools)?,
            stream_arguments,
            dialect: dialect_from(dialect)?,
            ..ChatOptions::default()
        };
        Ok(Self {
            engine: Engine::new(&options)?,
        })
    }

    fn feed(&mut self, py: Python<'_>, text: &str) -> Delta {
        self.engine.feed(py, text)
    }

    fn finish(&mut self) -> Delta {
        self.engine.finish()
    }

    #[getter]
    fn errors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        parse_errors(py, self.engine.parser.errors())
    }
}

/// Reasoning and tool calls in one pass.
#[pyclass(module = "shakedown._core")]
pub struct ChatParser {
    engine: Engine,
}

#[pymethods]
impl ChatParser {
    #[new]
    #[pyo3(signature = (*, reasoning=None, tool_call=None, tools=None, stream_arguments=true, in_reasoning=None, thinking=None, force_reasoning=false, force_nonempty_content=false, dialect="dynamo", response_template=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        reasoning: Option<&str>,
        tool_call: Option<&str>,
        tools: Option<&Bound<'_, PyAny>>,
        stream_arguments: bool,
        in_reasoning: Option<bool>,
        thinking: Option<bool>,
        force_reasoning: bool,
        force_nonempty_content: bool,
        dialect: &str,
        response_template: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let options = ChatOptions {
            reasoning: reasoning.map(str::to_owned),
            tool_call: tool_call.map(str::to_owned),
            tools: tools_from_py(py, tools)?,
            stream_arguments,
            in_reasoning: starts_inside(in_reasoning, force_reasoning),
            thinking,
            force_nonempty_content,
            dialect: dialect_from(dialect)?,
            reference_streaming: false,
            response_template: template_from_py(py, response_template)?,
        };
        Ok(Self {
            engine: Engine::new(&options)?,
        })
    }

    fn feed(&mut self, py: Python<'_>, text: &str) -> Delta {
        self.engine.feed(py, text)
    }

    fn finish(&mut self) -> Delta {
        self.engine.finish()
    }

    #[getter]
    fn errors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        parse_errors(py, self.engine.parser.errors())
    }
}

/// A complete tool call.
#[pyclass(module = "shakedown._core", frozen, get_all)]
pub struct ToolCall {
    index: usize,
    id: String,
    name: String,
    arguments: String,
}

#[pymethods]
impl ToolCall {
    fn __repr__(&self) -> String {
        format!(
            "ToolCall(index={}, id={:?}, name={:?}, arguments={:?})",
            self.index, self.id, self.name, self.arguments
        )
    }
}

/// A whole parsed message.
#[pyclass(module = "shakedown._core", frozen)]
pub struct Message {
    inner: parsers::Message,
    errors: Vec<parsers::ParseError>,
}

#[pymethods]
impl Message {
    #[getter]
    fn content(&self) -> Option<&str> {
        none_if_empty(&self.inner.content)
    }

    #[getter]
    fn reasoning_content(&self) -> Option<&str> {
        none_if_empty(&self.inner.reasoning)
    }

    #[getter]
    fn tool_calls(&self) -> Vec<ToolCall> {
        self.inner
            .tool_calls
            .iter()
            .map(|c| ToolCall {
                index: c.index,
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .collect()
    }

    #[getter]
    fn errors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        parse_errors(py, &self.errors)
    }

    fn __repr__(&self) -> String {
        let calls: Vec<String> = self.tool_calls().iter().map(ToolCall::__repr__).collect();
        format!(
            "Message(content={}, reasoning_content={}, tool_calls=[{}])",
            repr_opt(self.content()),
            repr_opt(self.reasoning_content()),
            calls.join(", ")
        )
    }
}

/// `dynamo` (the default), `vllm` or `sglang`; anything else is a `ValueError`.
fn dialect_from(name: &str) -> PyResult<Dialect> {
    name.parse()
        .map_err(|e: parsers::dialect::UnknownDialect| PyValueError::new_err(e.to_string()))
}

/// SGLang's `force_reasoning` is `in_reasoning=True` under another name.
fn starts_inside(in_reasoning: Option<bool>, force_reasoning: bool) -> Option<bool> {
    in_reasoning.or(force_reasoning.then_some(true))
}

/// Parse a whole output at once; equal to the concatenation of any streamed run.
#[pyfunction]
#[pyo3(signature = (text, *, reasoning=None, tool_call=None, tools=None, in_reasoning=None, thinking=None, force_reasoning=false, force_nonempty_content=false, dialect="dynamo", response_template=None))]
#[allow(clippy::too_many_arguments)]
fn parse(
    py: Python<'_>,
    text: &str,
    reasoning: Option<&str>,
    tool_call: Option<&str>,
    tools: Option<&Bound<'_, PyAny>>,
    in_reasoning: Option<bool>,
    thinking: Option<bool>,
    force_reasoning: bool,
    force_nonempty_content: bool,
    dialect: &str,
    response_template: Option<&Bound<'_, PyAny>>,
) -> PyResult<Message> {
    let options = ChatOptions {
        reasoning: reasoning.map(str::to_owned),
        tool_call: tool_call.map(str::to_owned),
        tools: tools_from_py(py, tools)?,
        stream_arguments: false,
        in_reasoning: starts_inside(in_reasoning, force_reasoning),
        thinking,
        force_nonempty_content,
        dialect: dialect_from(dialect)?,
        reference_streaming: false,
        response_template: template_from_py(py, response_template)?,
    };
    let spec = options.resolve()?;
    let (inner, errors) =
        detach_if_large(py, text.len(), || parsers::chat::parse_with(text, &spec));
    Ok(Message { inner, errors })
}

fn names(table: &[parsers::ParserInfo]) -> Vec<(&'static str, Vec<&'static str>)> {
    table.iter().map(|p| (p.name, p.aliases.to_vec())).collect()
}

/// Canonical reasoning parser names, each with its aliases.
#[pyfunction]
fn reasoning_parsers() -> Vec<(&'static str, Vec<&'static str>)> {
    names(parsers::reasoning_parsers())
}

/// Canonical tool-call parser names, each with its aliases.
#[pyfunction]
fn tool_call_parsers() -> Vec<(&'static str, Vec<&'static str>)> {
    names(parsers::tool_call_parsers())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Delta>()?;
    m.add_class::<CallDelta>()?;
    m.add_class::<ReasoningParser>()?;
    m.add_class::<ToolCallParser>()?;
    m.add_class::<ChatParser>()?;
    m.add_class::<ToolCall>()?;
    m.add_class::<Message>()?;
    m.add_function(wrap_pyfunction!(parse, m)?)?;
    m.add_function(wrap_pyfunction!(reasoning_parsers, m)?)?;
    m.add_function(wrap_pyfunction!(tool_call_parsers, m)?)?;
    Ok(())
}
