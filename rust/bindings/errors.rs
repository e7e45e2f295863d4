//! The package's exception hierarchy. Classes that are also `ValueError`s need two
//! bases, which `create_exception!` can't express, so they are made with `type()`
//! once at import and kept here.

use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyTuple, PyType};

use crate::parsers::UnknownParser;

static SHAKEDOWN_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static UNKNOWN_PARSER_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static REQUEST_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static MODEL_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn make_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: Bound<'py, PyTuple>,
    doc: &str,
) -> PyResult<Bound<'py, PyType>> {
    let namespace = PyDict::new(py);
    namespace.set_item("__doc__", doc)?;
    namespace.set_item("__module__", "shakedown")?;
    let class = py
        .get_type::<PyType>()
        .call1((name, bases, namespace))?
        .cast_into::<PyType>()?;
    Ok(class)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let base = make_class(
        py,
        "ShakedownError",
        PyTuple::new(py, [py.get_type::<PyException>()])?,
        "Base class of every error shakedown raises.",
    )?;
    let value_error = py.get_type::<PyValueError>();
    let unknown = make_class(
        py,
        "UnknownParserError",
        PyTuple::new(py, [base.clone(), value_error.clone()])?,
        "A parser name that no family answers to; the message lists the valid names.",
    )?;
    let request = make_class(
        py,
        "RequestError",
        PyTuple::new(py, [base.clone(), value_error.clone()])?,
        "A request the reference frontend would reject. `status` is the HTTP status and \
         `body` the exact error body it would send.",
    )?;
    let model = make_class(
        py,
        "ModelError",
        PyTuple::new(py, [base.clone(), value_error])?,
        "A model directory that can't be served (missing or invalid files).",
    )?;
    for (name, class, cell) in [
        ("ShakedownError", &base, &SHAKEDOWN_ERROR),
        ("UnknownParserError", &unknown, &UNKNOWN_PARSER_ERROR),
        ("RequestError", &request, &REQUEST_ERROR),
        ("ModelError", &model, &MODEL_ERROR),
    ] {
        m.add(name, class)?;
        let _ = cell.set(py, class.clone().unbind());
    }
    Ok(())
}

fn raise(py: Python<'_>, cell: &PyOnceLock<Py<PyType>>, message: String) -> PyErr {
    match cell.get(py) {
        Some(class) => PyErr::from_type(class.bind(py).clone(), message),
        None => PyValueError::new_err(message),
    }
}

pub fn unknown_parser(py: Python<'_>, err: UnknownParser) -> PyErr {
    raise(py, &UNKNOWN_PARSER_ERROR, err.to_string())
}

pub fn model_error(py: Python<'_>, message: String) -> PyErr {
    raise(py, &MODEL_ERROR, message)
}

pub fn shakedown_error(py: Python<'_>, message: String) -> PyErr {
    raise(py, &SHAKEDOWN_ERROR, message)
}

/// A rejected request, carrying the status and body the reference would send.
pub fn request_error(py: Python<'_>, message: &str, status: u16, body: &[u8]) -> PyErr {
    let Some(class) = REQUEST_ERROR.get(py) else {
        return PyValueError::new_err(message.to_owned());
    };
    let made = class.bind(py).call1((message,)).and_then(|err| {
        err.setattr("status", status)?;
        err.setattr("body", PyBytes::new(py, body))?;
        Ok(err)
    });
    match made {
        Ok(err) => PyErr::from_value(err),
        Err(err) => err,
    }
}
