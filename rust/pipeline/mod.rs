//! The frontend's pipeline with no HTTP in it: OpenAI request → engine request →
//! engine output frames → the bytes the reference frontend sends.

pub mod chunks;
pub mod detok;
pub mod frames;
pub mod plan;
pub mod response;
pub mod sse;
