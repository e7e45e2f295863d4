//! shakedown's core: the frontend pipeline and streaming parsers, with no Python in it.
//! The PyO3 layer lives in `bindings` behind the `python` feature.

pub mod parsers;
pub mod pipeline;

#[cfg(feature = "python")]
mod bindings;
