//! Tool-call formats. JSON-argument formats forward the model's argument bytes
//! verbatim; XML-style formats build JSON typed by the tool's schema.

use std::sync::Arc;

use super::{ToolParse, Tools};

pub mod harmony_whole;
pub mod json_calls;
pub mod xml_calls;

/// Build the parser for a canonical family name (the registry resolves aliases).
pub fn build(family: &'static str, tools: Arc<Tools>) -> Box<dyn ToolParse> {
    json_calls::build(family, &tools)
        .or_else(|| xml_calls::build(family, &tools))
        .unwrap_or_else(|| panic!("tool-call family `{family}` is registered but not built"))
}

/// Drivers shared by the tool-call format tests.
#[cfg(test)]
pub(crate) mod test_support {
    use crate::parsers::{CallSink, Delta, Message, ToolParse};

    /// Feeds `pieces` as a stream would, draining the sink after each piece and after
    /// `finish`; returns the assembled message and how many errors the sink recorded.
    pub(crate) fn run(
        parser: &mut dyn ToolParse,
        pieces: &[&str],
        stream: bool,
    ) -> (Message, usize) {
        let mut sink = CallSink::new(stream);
        let mut message = Message::default();
        let mut delta = Delta::default();
        for piece in pieces {
            parser.feed(piece, &mut sink);
            delta.clear();
            sink.drain_into(&mut delta);
            message.push(&delta);
        }
        parser.finish(&mut sink);
        delta.clear();
        sink.drain_into(&mut delta);
        message.push(&delta);
        (message, sink.errors().len())
    }

    /// `text` cut into pieces of `size` bytes, each widened to end on a char boundary.
    pub(crate) fn pieces_of(text: &str, size: usize) -> Vec<&str> {
        let mut out = Vec::new();
        let mut start = 0;
        while start < text.len() {
            let mut end = (start + size).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            out.push(&text[start..end]);
            start = end;
        }
        out
    }
}
