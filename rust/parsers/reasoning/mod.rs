//! Reasoning parsers, one state machine shared by the `<think>`-style families.
//! (Placeholder until the families land.)

use super::{Delta, ReasoningParse};

struct Passthrough;

impl ReasoningParse for Passthrough {
    fn feed(&mut self, text: &str, out: &mut Delta) {
        out.content.push_str(text);
    }
    fn finish(&mut self, _out: &mut Delta) {}
}

pub fn build(
    _family: &'static str,
    _in_reasoning: Option<bool>,
    _exit_markers: &'static [&'static str],
) -> Box<dyn ReasoningParse> {
    Box::new(Passthrough)
}
