//! The PyO3 layer: thin wrappers that move bytes and strings across, nothing more.

use pyo3::prelude::*;

mod errors;
mod parsers;
mod pipeline;

/// The extension's Rust code allocates through mimalloc: a request's parse, template and
/// tokenization make many small short-lived allocations, which glibc's malloc/free served
/// at a quarter of `Pipeline.chat`'s time. Python's own objects still use its allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Inputs at least this large are worked on with the GIL released; for smaller ones,
/// handing the GIL over and taking it back costs about as much as the work.
const DETACH_FROM_BYTES: usize = 16 * 1024;

/// Run pure-Rust `work` on an input of `size` bytes, detached from the interpreter
/// when it is large enough for other threads to gain from it.
fn detach_if_large<T: Send>(py: Python<'_>, size: usize, work: impl FnOnce() -> T + Send) -> T {
    if size >= DETACH_FROM_BYTES {
        py.detach(work)
    } else {
        work()
    }
}

/// Every class is safe to share between threads (immutable, or borrow-checked by
/// PyO3), so the module runs without the GIL on free-threaded Python.
#[pymodule(gil_used = false)]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    parsers::register(m)?;
    pipeline::register(m)?;
    Ok(())
}
