//! `Pipeline` and `Exchange`: the frontend pipeline for the loopback endpoint.
//! Request bodies come in as bytes and every response byte goes out as bytes; no
//! Python object is made per token beyond the bytes handed to the socket.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use super::detach_if_large;
use super::errors::{request_error, tokenizer_error};
use crate::parsers::dialect::{Dialect, UnknownDialect};
use crate::pipeline::batch::CompletionBatch;
use crate::pipeline::error::{is_json_content_type, HttpError};
use crate::pipeline::frames::batch_frames;
use crate::pipeline::model::ModelCard;
use crate::pipeline::preprocess::{Prepared, Preprocessor};
use crate::pipeline::response::ResponseState;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One served model: tokenizer loaded and chat template compiled once.
#[pyclass(module = "shakedown._core", frozen)]
pub struct Pipeline {
    preprocessor: Arc<Preprocessor>,
    /// `/v1/models` reports the time the model was attached.
    created: u64,
}

#[pymethods]
impl Pipeline {
    #[new]
    #[pyo3(signature = (model_dir, *, served_name=None, reasoning_parser=None, tool_call_parser=None, context_length=None, parser_dialect="dynamo"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model_dir: PathBuf,
        served_name: Option<&str>,
        reasoning_parser: Option<&str>,
        tool_call_parser: Option<&str>,
        context_length: Option<u32>,
        parser_dialect: &str,
    ) -> PyResult<Self> {
        let dialect: Dialect = parser_dialect
            .parse()
            .map_err(|e: UnknownDialect| PyValueError::new_err(e.to_string()))?;
        // Reading the tokenizer and compiling the template take a while: let other
        // threads run meanwhile.
        let preprocessor = py.detach(|| {
            let mut card =
                ModelCard::from_dir(&model_dir, served_name, reasoning_parser, tool_call_parser)?;
            if let Some(n) = context_length {
                card = card.with_context_length(n);
            }
            card = card.with_parser_dialect(dialect);
            Preprocessor::new(card)
        })?;
        Ok(Self {
            preprocessor: Arc::new(preprocessor),
            created: now_secs(),
        })
    }

    #[getter]
    fn served_name(&self) -> &str {
        &self.preprocessor.card().served_name
    }

    #[getter]
    fn context_length(&self) -> u32 {
        self.preprocessor.card().context_length
    }

    #[getter]
    fn reasoning_parser(&self) -> Option<&str> {
        self.preprocessor.card().reasoning_parser.map(|f| f.name())
    }

    #[getter]
    fn tool_call_parser(&self) -> Option<&str> {
        self.preprocessor.card().tool_call_parser.map(|f| f.name())
    }

    #[getter]
    fn parser_dialect(&self) -> &'static str {
        self.preprocessor.card().parser_dialect.name()
    }

    /// True when the chat template does not read `reasoning_content`, so an assistant's
    /// reasoning is folded into its content as `<think>…</think>` (as the reference does).
    #[getter]
    fn folds_reasoning(&self) -> bool {
        self.preprocessor.folds_reasoning()
    }

    #[getter]
    fn eos_token_ids(&self) -> Vec<u32> {
        self.preprocessor.card().eos_token_ids.clone()
    }

    /// The `GET /v1/models` body.
    fn models_body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.preprocessor.card().models_body(self.created))
    }

    /// Validate and preprocess a `/v1/chat/completions` body; `request_id` defaults to a
    /// fresh UUID v4.
    #[pyo3(signature = (body, request_id=None))]
    fn chat(&self, py: Python<'_>, body: &[u8], request_id: Option<String>) -> PyResult<Exchange> {
        let request_id = request_id.unwrap_or_else(fresh_request_id);
        let prepared =
            detach_if_large(py, body.len(), || self.preprocessor.chat(body, &request_id))?;
        Ok(Exchange::new(py, self, prepared, &request_id))
    }

    /// Validate and preprocess a `/v1/completions` body; `request_id` defaults to a
    /// fresh UUID v4.
    #[pyo3(signature = (body, request_id=None))]
    fn completions(
        &self,
        py: Python<'_>,
        body: &[u8],
        request_id: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let request_id = request_id.unwrap_or_else(fresh_request_id);
        let mut parts = detach_if_large(py, body.len(), || {
            self.preprocessor.completions_parts(body, &request_id)
        })?;
        if parts.len() == 1 {
            let exchange = Exchange::new(py, self, parts.remove(0), &request_id);
            return Ok(Py::new(py, exchange)?.into_any());
        }
        let ids: Vec<String> = (0..parts.len())
            .map(|i| format!("{request_id}-{i}"))
            .collect();
        let (state, requests) = CompletionBatch::new(
            format!("cmpl-{request_id}"),
            parts,
            &self.preprocessor.tokenizer(),
        );
        let batch = Batch {
            engine_requests: requests
                .iter()
                .map(|r| PyBytes::new(py, r).unbind())
                .collect(),
            request_ids: ids,
            request_id,
            state,
            out: Vec::with_capacity(512),
        };
        Ok(Py::new(py, batch)?.into_any())
    }

    /// Token ids for `text`, without special tokens added (for scripted engines).
    fn tokenize(&self, py: Python<'_>, text: &str) -> PyResult<Vec<u32>> {
        detach_if_large(py, text.len(), || {
            self.preprocessor.tokenizer().encode(text, false)
        })
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| tokenizer_error("tokenize", e))
    }

    /// Text for token ids, special tokens kept (as the reference decoder does).
    fn decode(&self, py: Python<'_>, ids: Vec<u32>) -> PyResult<String> {
        detach_if_large(py, ids.len() * 4, || {
            self.preprocessor.tokenizer().decode(&ids, false)
        })
        .map_err(|e| tokenizer_error("decode", e))
    }
}

/// A request id as the reference makes one: a UUID v4, hyphenated.
fn fresh_request_id() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// One request in flight: the engine request to send, and the response being built.
#[pyclass(module = "shakedown._core")]
pub struct Exchange {
    state: ResponseState,
    engine_request: Py<PyBytes>,
    request_id: Py<PyString>,
    stream: bool,
    out: Vec<u8>,
}

impl Exchange {
    fn new(py: Python<'_>, pipeline: &Pipeline, prepared: Prepared, request_id: &str) -> Self {
        let stream = prepared.plan.stream;
        Self {
            state: ResponseState::new(prepared.plan, pipeline.preprocessor.tokenizer()),
            engine_request: PyBytes::new(py, &prepared.engine_request).unbind(),
            request_id: PyString::new(py, request_id).unbind(),
            stream,
            out: Vec::with_capacity(512),
        }
    }

    fn take<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes = PyBytes::new(py, &self.out);
        self.out.clear();
        bytes
    }
}

#[pymethods]
impl Exchange {
    #[getter]
    fn stream(&self) -> bool {
        self.stream
    }

    /// The engine request (PreprocessedRequest) as JSON bytes.
    #[getter]
    fn engine_request(&self, py: Python<'_>) -> Py<PyBytes> {
        self.engine_request.clone_ref(py)
    }

    /// The request's id (the engine context's, and the response id's suffix).
    #[getter]
    fn request_id(&self, py: Python<'_>) -> Py<PyString> {
        self.request_id.clone_ref(py)
    }

    /// HTTP status for the response: 200 unless a unary request failed.
    #[getter]
    fn status(&self) -> u16 {
        self.state.status()
    }

    /// Every choice has finished (a stop string or the length limit hit): the
    /// engine can be told to stop.
    #[getter]
    fn finished(&self) -> bool {
        self.state.is_finished()
    }

    /// One engine output frame (JSON bytes), or a JSON array of frames (a batch: fed in
    /// order until the response finishes), in; the bytes to send now out (may be empty).
    fn feed<'py>(&mut self, py: Python<'py>, frame: &[u8]) -> Bound<'py, PyBytes> {
        let (state, out) = (&mut self.state, &mut self.out);
        detach_if_large(py, frame.len(), || match batch_frames(frame) {
            Some(frames) => {
                for one in frames {
                    state.feed(one, out);
                    if state.is_finished() {
                        break;
                    }
                }
            }
            None => state.feed(frame, out),
        });
        self.take(py)
    }

    /// End of the engine stream: the closing SSE frames, or the whole unary body.
    fn finish<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        self.state.finish(&mut self.out);
        self.take(py)
    }

    /// The engine failed: an error event and `[DONE]` (the stream keeps its 200),
    /// or the unary error body with `status`.
    #[pyo3(signature = (message, status=500))]
    fn fail<'py>(&mut self, py: Python<'py>, message: &str, status: u16) -> Bound<'py, PyBytes> {
        self.state.fail_with(status, message, &mut self.out);
        self.state.finish(&mut self.out);
        self.take(py)
    }
}

/// Several prompts of one `/v1/completions` request: one engine request per prompt,
/// one response merged from them (see `pipeline::batch`).
#[pyclass(module = "shakedown._core", name = "CompletionBatch")]
pub struct Batch {
    state: CompletionBatch,
    engine_requests: Vec<Py<PyBytes>>,
    request_ids: Vec<String>,
    request_id: String,
    out: Vec<u8>,
}

impl Batch {
    fn take<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes = PyBytes::new(py, &self.out);
        self.out.clear();
        bytes
    }
}

#[pymethods]
impl Batch {
    #[getter]
    fn stream(&self) -> bool {
        self.state.is_stream()
    }

    /// The request's id (the response id's suffix).
    #[getter]
    fn request_id(&self) -> &str {
        &self.request_id
    }

    /// One engine request per prompt, as JSON bytes.
    #[getter]
    fn engine_requests(&self, py: Python<'_>) -> Vec<Py<PyBytes>> {
        self.engine_requests
            .iter()
            .map(|r| r.clone_ref(py))
            .collect()
    }

    /// Each prompt's engine context id: `<request id>-I`.
    #[getter]
    fn request_ids(&self) -> Vec<String> {
        self.request_ids.clone()
    }

    #[getter]
    fn status(&self) -> u16 {
        self.state.status()
    }

    /// The batch failed: every prompt's engine can stop.
    #[getter]
    fn closed(&self) -> bool {
        self.state.is_closed()
    }

    /// Prompt `part` has all its choices (or the batch failed).
    fn part_finished(&self, part: usize) -> PyResult<bool> {
        self.check(part)?;
        Ok(self.state.part_finished(part))
    }

    /// One engine frame of prompt `part` in (a JSON array is a batch of frames);
    /// the bytes to send now out.
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        part: usize,
        frame: &[u8],
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.check(part)?;
        let (state, out) = (&mut self.state, &mut self.out);
        detach_if_large(py, frame.len(), || match batch_frames(frame) {
            Some(frames) => {
                for one in frames {
                    state.feed(part, one, out);
                    if state.part_finished(part) {
                        break;
                    }
                }
            }
            None => state.feed(part, frame, out),
        });
        Ok(self.take(py))
    }

    /// The engine stream of prompt `part` ended: its closing chunks.
    fn finish_part<'py>(&mut self, py: Python<'py>, part: usize) -> PyResult<Bound<'py, PyBytes>> {
        self.check(part)?;
        self.state.finish_part(part, &mut self.out);
        Ok(self.take(py))
    }

    /// Every prompt's stream ended: the usage chunk and `[DONE]`, or the merged body.
    fn finish<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        self.state.finish(&mut self.out);
        self.take(py)
    }

    /// An engine failed: an error event and `[DONE]`, or the unary error body.
    #[pyo3(signature = (message, status=500))]
    fn fail<'py>(&mut self, py: Python<'py>, message: &str, status: u16) -> Bound<'py, PyBytes> {
        self.state.fail(status, message, &mut self.out);
        self.take(py)
    }
}

impl Batch {
    fn check(&self, part: usize) -> PyResult<()> {
        if part < self.state.len() {
            Ok(())
        } else {
            Err(PyValueError::new_err(format!(
                "no prompt {part} in this batch"
            )))
        }
    }
}

/// The reference's flat error body `{"message","type","code"}` for a status.
#[pyfunction]
fn error_body<'py>(py: Python<'py>, status: u16, message: &str) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &HttpError::new(status, message).body)
}

/// The reference's 404 for a path it does not route, as a `RequestError`.
#[pyfunction]
fn route_not_found<'py>(py: Python<'py>, method: &str, path: &str) -> PyResult<Bound<'py, PyAny>> {
    request_error(py, HttpError::route_not_found(method, path))
}

/// The reference's 413 for a body over `DYN_HTTP_BODY_LIMIT_MB`, as a `RequestError`.
#[pyfunction]
fn payload_too_large(py: Python<'_>, limit_mb: usize) -> PyResult<Bound<'_, PyAny>> {
    request_error(py, HttpError::payload_too_large(limit_mb))
}

/// The reference's 415 for a body that is not JSON, as a `RequestError`.
#[pyfunction]
fn unsupported_media_type(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    request_error(py, HttpError::unsupported_media_type())
}

/// The reference's 503 for a known model whose engine is not serving yet.
#[pyfunction]
fn model_not_ready<'py>(py: Python<'py>, model: &str) -> PyResult<Bound<'py, PyAny>> {
    request_error(py, HttpError::model_not_ready(model))
}

/// Whether a `content-type` value is JSON as the reference's extractor decides it.
#[pyfunction]
#[pyo3(name = "is_json_content_type")]
fn json_content_type(value: Option<&str>) -> bool {
    is_json_content_type(value)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Pipeline>()?;
    m.add_class::<Exchange>()?;
    m.add_class::<Batch>()?;
    m.add_function(wrap_pyfunction!(error_body, m)?)?;
    m.add_function(wrap_pyfunction!(route_not_found, m)?)?;
    m.add_function(wrap_pyfunction!(payload_too_large, m)?)?;
    m.add_function(wrap_pyfunction!(unsupported_media_type, m)?)?;
    m.add_function(wrap_pyfunction!(model_not_ready, m)?)?;
    m.add_function(wrap_pyfunction!(json_content_type, m)?)?;
    Ok(())
}
