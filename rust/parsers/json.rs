//! Incremental JSON scanning for streamed tool-call arguments.
//! (Placeholder until the JSON formats land.)
