//! Tool-call formats. JSON-argument formats forward the model's argument bytes
//! verbatim; XML-style formats build JSON typed by the tool's schema.

use std::sync::Arc;

use super::{ToolParse, Tools};

pub mod json_calls;
pub mod xml_calls;

/// Build the parser for a canonical family name (the registry resolves aliases).
pub fn build(family: &'static str, tools: Arc<Tools>) -> Box<dyn ToolParse> {
    json_calls::build(family, &tools)
        .or_else(|| xml_calls::build(family, &tools))
        .unwrap_or_else(|| panic!("tool-call family `{family}` is registered but not built"))
}
