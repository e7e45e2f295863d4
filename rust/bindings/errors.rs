//! Every error the core raises, mapped to its Python class here and nowhere else.
//! Each public class is a `ShakedownError` and the builtin that fits (`ValueError`
//! for all of these: they are about values the caller passed). Classes with two
//! bases can't come from `create_exception!`, so they are made with `type()` the
//! first time they are needed, and the module exports those same objects.

use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyTuple, PyType};

use crate::parsers::UnknownParser;
use crate::pipeline::error::HttpError;
use crate::pipeline::model::ModelError;

/// The package's exception classes.
#[derive(Clone, Copy)]
enum Class {
    Shakedown,
    UnknownParser,
    InvalidTools,
    Request,
    Model,
}

impl Class {
    const ALL: [Class; 5] = [
        Class::Shakedown,
        Class::UnknownParser,
        Class::InvalidTools,
        Class::Request,
        Class::Model,
    ];

    fn name(self) -> &'static str {
        match self {
            Class::Shakedown => "ShakedownError",
            Class::UnknownParser => "UnknownParserError",
            Class::InvalidTools => "InvalidToolsError",
            Class::Request => "RequestError",
            Class::Model => "ModelError",
        }
    }

    fn doc(self) -> &'static str {
        match self {
            Class::Shakedown => "Base class of every error shakedown raises.",
            Class::UnknownParser => {
                "A parser name that no family answers to; the message lists the valid names."
            }
            Class::InvalidTools => "A `tools` list a parser can't use (not tool definitions).",
            Class::Request => {
                "A request the reference frontend would reject. `status` is the HTTP status and \
                 `body` the exact error body it would send."
            }
            Class::Model => "A model directory that can't be served (missing or invalid files).",
        }
    }

    fn cell(self) -> &'static PyOnceLock<Py<PyType>> {
        static CLASSES: [PyOnceLock<Py<PyType>>; 5] = [
            PyOnceLock::new(),
            PyOnceLock::new(),
            PyOnceLock::new(),
            PyOnceLock::new(),
            PyOnceLock::new(),
        ];
        &CLASSES[self as usize]
    }

    fn get(self, py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
        let class = self.cell().get_or_try_init(py, || {
            let bases = match self {
                Class::Shakedown => PyTuple::new(py, [py.get_type::<PyException>()])?,
                _ => PyTuple::new(
                    py,
                    [Class::Shakedown.get(py)?, py.get_type::<PyValueError>()],
                )?,
            };
            let namespace = PyDict::new(py);
            namespace.set_item("__doc__", self.doc())?;
            namespace.set_item("__module__", "shakedown")?;
            py.get_type::<PyType>()
                .call1((self.name(), bases, namespace))?
                .cast_into::<PyType>()
                .map(Bound::unbind)
                .map_err(PyErr::from)
        })?;
        Ok(class.bind(py).clone())
    }

    fn raise(self, message: String) -> PyErr {
        Python::attach(|py| match self.get(py) {
            Ok(class) => PyErr::from_type(class, message),
            Err(err) => err,
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for class in Class::ALL {
        m.add(class.name(), class.get(m.py())?)?;
    }
    Ok(())
}

/// A `tools` value the parsers can't read.
pub struct InvalidTools(pub String);

impl From<InvalidTools> for PyErr {
    fn from(err: InvalidTools) -> Self {
        Class::InvalidTools.raise(format!("invalid tools: {}", err.0))
    }
}

impl From<UnknownParser> for PyErr {
    fn from(err: UnknownParser) -> Self {
        Class::UnknownParser.raise(err.to_string())
    }
}

impl From<ModelError> for PyErr {
    fn from(err: ModelError) -> Self {
        match err {
            ModelError::UnknownParser(err) => err.into(),
            other => Class::Model.raise(other.to_string()),
        }
    }
}

/// A rejected request as a `RequestError` instance: the message is the body, and it
/// carries the status and body the reference would send.
pub fn request_error(py: Python<'_>, err: HttpError) -> PyResult<Bound<'_, PyAny>> {
    let instance = Class::Request.get(py)?.call1((err.body_str(),))?;
    instance.setattr("status", err.status)?;
    instance.setattr("body", PyBytes::new(py, &err.body))?;
    Ok(instance)
}

impl From<HttpError> for PyErr {
    fn from(err: HttpError) -> Self {
        Python::attach(|py| match request_error(py, err) {
            Ok(instance) => PyErr::from_value(instance),
            Err(failed) => failed,
        })
    }
}

/// A failure of the model's tokenizer on a caller's input.
pub fn tokenizer_error(what: &str, err: impl std::fmt::Display) -> PyErr {
    Class::Model.raise(format!("{what}: {err}"))
}
