//! The frontend's pipeline with no HTTP in it: OpenAI request → engine request →
//! engine output frames → the bytes the reference frontend sends.

pub mod chunks;
pub mod detok;
pub mod error;
pub mod frames;
pub mod model;
pub mod plan;
pub mod preprocess;
pub mod request;
pub mod response;
pub mod sse;
pub mod template;
