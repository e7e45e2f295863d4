//! The frontend's pipeline with no HTTP in it: OpenAI request → engine request →
//! engine output frames → the bytes the reference frontend sends.

pub mod batch;
pub mod chunks;
pub mod detok;
mod engine_request;
pub mod error;
pub mod frames;
mod guided_calls;
mod jail;
mod logprobs;
pub mod model;
pub mod plan;
pub mod preprocess;
mod prompt;
pub mod request;
pub mod response;
pub mod sse;
pub mod template;
pub mod tokens;
pub mod validate;
