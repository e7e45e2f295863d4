//! (Placeholder until the families land.)
use std::sync::Arc;

use crate::parsers::{ToolParse, Tools};

pub fn build(_family: &'static str, _tools: &Arc<Tools>) -> Option<Box<dyn ToolParse>> {
    None
}
