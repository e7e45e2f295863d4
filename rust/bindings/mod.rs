//! The PyO3 layer: thin wrappers that move bytes and strings across, nothing more.

use pyo3::prelude::*;

mod errors;
mod parsers;
mod pipeline;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    parsers::register(m)?;
    pipeline::register(m)?;
    Ok(())
}
