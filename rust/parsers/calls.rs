//! Where tool parsers put what they find. The sink owns the call bookkeeping
//! every format shares: indices, ids, whole-call versus streamed arguments, and
//! malformed calls recorded as state instead of raised.

use std::sync::Arc;

use super::dialect::{Dialect, SpaceBeforeCalls};
use super::{CallDelta, Delta, Tools};

/// Why a call (or a stretch of text) was not handed out as a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The call's index when it had one; `None` for errors outside any call.
    pub index: Option<usize>,
    pub message: String,
}

#[derive(Debug)]
struct OpenCall {
    index: usize,
    id: String,
    name: String,
    /// Arguments gathered so far; used only when arguments are not streamed.
    arguments: String,
    /// A call to an undeclared tool in a dialect that drops it: nothing is released.
    undeclared: bool,
}

/// Collects content and call deltas from a tool parser.
#[derive(Debug)]
pub struct CallSink {
    stream_arguments: bool,
    /// Whose id form new calls get, and whose rules for text beside calls.
    dialect: Dialect,
    /// The request's tools, for dialects that drop calls to undeclared ones.
    tools: Arc<Tools>,
    space_before_calls: SpaceBeforeCalls,
    /// Content other than whitespace since the last call (or the start).
    text_since_call: bool,
    /// A call has begun.
    called: bool,
    /// Content other than whitespace since the start.
    text_seen: bool,
    content: String,
    /// Trailing whitespace of the content, held while a call may follow (dialects that
    /// trim around calls): dropped if one does, released before any other text.
    held_space: String,
    calls: Vec<CallDelta>,
    /// Length of `content` when the first of `calls` was released.
    calls_at: usize,
    open: Option<OpenCall>,
    next_index: usize,
    errors: Vec<ParseError>,
}

/// Dynamo's tool-call id form.
pub fn new_call_id() -> String {
    Dialect::Dynamo.new_call_id()
}

impl CallSink {
    /// With `stream_arguments` false, each call is released whole once it ends.
    pub fn new(stream_arguments: bool) -> Self {
        Self::with_dialect(
            stream_arguments,
            Dialect::Dynamo,
            SpaceBeforeCalls::Kept,
            Arc::default(),
        )
    }

    /// Like [`CallSink::new`], following `dialect` for ids, whitespace beside calls
    /// and calls to tools missing from `tools`.
    pub fn with_dialect(
        stream_arguments: bool,
        dialect: Dialect,
        space_before_calls: SpaceBeforeCalls,
        tools: Arc<Tools>,
    ) -> Self {
        Self {
            stream_arguments,
            dialect,
            tools,
            space_before_calls,
            text_since_call: false,
            called: false,
            text_seen: false,
            content: String::new(),
            held_space: String::new(),
            calls: Vec::new(),
            calls_at: 0,
            open: None,
            next_index: 0,
            errors: Vec::new(),
        }
    }

    pub fn content(&mut self, text: &str) {
        if self.space_before_calls == SpaceBeforeCalls::Kept {
            self.content.push_str(text);
            return;
        }
        let body = text.trim_end();
        if body.is_empty() {
            self.held_space.push_str(text);
            return;
        }
        self.content.push_str(&self.held_space);
        self.held_space.clear();
        self.text_since_call = true;
        self.text_seen = true;
        self.content.push_str(body);
        self.held_space.push_str(&text[body.len()..]);
    }

    /// End of output: whitespace held for a call that never came is content after all.
    pub fn finish(&mut self) {
        self.content.push_str(&self.held_space);
        self.held_space.clear();
    }

    fn release(&mut self, call: CallDelta) {
        if self.calls.is_empty() {
            self.calls_at = self.content.len();
        }
        self.calls.push(call);
    }

    /// Open a call. `id` is the model's own id where the format carries one (Kimi).
    pub fn begin_call(&mut self, name: &str, id: Option<String>) {
        if self.open.is_some() {
            self.drop_call("a new call began before the previous one ended");
        }
        match self.space_before_calls {
            SpaceBeforeCalls::BlankDropped if self.text_since_call => {
                self.content.push_str(&self.held_space);
            }
            SpaceBeforeCalls::BlankDroppedUntilText if self.text_seen => {
                self.content.push_str(&self.held_space);
            }
            SpaceBeforeCalls::BlankLineDropped => {
                let kept = self.held_space.strip_suffix("\n\n");
                self.content.push_str(kept.unwrap_or(&self.held_space));
            }
            SpaceBeforeCalls::BetweenCallsDropped if self.text_since_call || !self.called => {
                self.content.push_str(&self.held_space);
            }
            _ => {}
        }
        self.held_space.clear();
        self.text_since_call = false;
        self.called = true;
        let undeclared = self.dialect.drops_undeclared_tools()
            && !self.tools.is_empty()
            && self.tools.get(name).is_none();
        if undeclared {
            self.errors.push(ParseError {
                index: None,
                message: format!("tool call `{name}`: the request declares no such tool"),
            });
            self.open = Some(OpenCall {
                index: self.next_index,
                id: String::new(),
                name: name.to_owned(),
                arguments: String::new(),
                undeclared,
            });
            return;
        }
        let index = self.next_index;
        self.next_index += 1;
        let id = id.unwrap_or_else(|| self.dialect.new_call_id());
        if self.stream_arguments {
            self.release(CallDelta {
                index,
                id: Some(id.clone()),
                name: Some(name.to_owned()),
                arguments: String::new(),
            });
        }
        self.open = Some(OpenCall {
            index,
            id,
            name: name.to_owned(),
            arguments: String::new(),
            undeclared,
        });
    }

    /// Append a fragment of the open call's arguments (bytes proven stable).
    pub fn arguments(&mut self, fragment: &str) {
        if fragment.is_empty() {
            return;
        }
        let Some(open) = self.open.as_mut() else {
            return;
        };
        if open.undeclared {
            return;
        }
        if !self.stream_arguments {
            open.arguments.push_str(fragment);
            return;
        }
        match self.calls.last_mut() {
            Some(last) if last.index == open.index => last.arguments.push_str(fragment),
            _ => {
                let index = open.index;
                self.release(CallDelta {
                    index,
                    id: None,
                    name: None,
                    arguments: fragment.to_owned(),
                });
            }
        }
    }

    /// The open call is complete and its arguments are a valid JSON object.
    pub fn end_call(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        if !self.stream_arguments && !open.undeclared {
            self.release(CallDelta {
                index: open.index,
                id: Some(open.id),
                name: Some(open.name),
                arguments: open.arguments,
            });
        }
    }

    /// The open call turned out malformed or unterminated. Whole-call mode drops it
    /// (and gives its index to the next call); streamed mode can't take back what
    /// it sent, so the call just stops. Either way the reason is recorded.
    pub fn drop_call(&mut self, reason: impl Into<String>) {
        let Some(open) = self.open.take() else {
            return;
        };
        if open.undeclared {
            return;
        }
        if !self.stream_arguments {
            self.next_index = open.index;
        }
        self.errors.push(ParseError {
            index: Some(open.index),
            message: format!("tool call `{}`: {}", open.name, reason.into()),
        });
    }

    /// An error that belongs to no open call (text that looked like a call but wasn't).
    pub fn error(&mut self, message: impl Into<String>) {
        self.errors.push(ParseError {
            index: None,
            message: message.into(),
        });
    }

    pub fn has_open_call(&self) -> bool {
        self.open.is_some()
    }

    /// How many calls have been opened (the next call's index).
    pub fn call_count(&self) -> usize {
        self.next_index
    }

    /// Move what was collected into `out`.
    pub fn drain_into(&mut self, out: &mut Delta) {
        if out.calls.is_empty() && !self.calls.is_empty() {
            out.calls_at = out.content.len() + self.calls_at;
        }
        out.content.push_str(&self.content);
        self.content.clear();
        out.calls.append(&mut self.calls);
    }

    pub fn errors(&self) -> &[ParseError] {
        &self.errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_mode_drops_malformed_and_reuses_index() {
        let mut sink = CallSink::new(false);
        sink.begin_call("f", None);
        sink.arguments("{bad");
        sink.drop_call("invalid JSON");
        sink.begin_call("g", None);
        sink.arguments("{}");
        sink.end_call();
        let mut out = Delta::default();
        sink.drain_into(&mut out);
        assert_eq!(out.calls.len(), 1);
        assert_eq!(out.calls[0].index, 0);
        assert_eq!(out.calls[0].name.as_deref(), Some("g"));
        assert_eq!(sink.errors().len(), 1);
        assert_eq!(sink.errors()[0].index, Some(0));
    }

    #[test]
    fn streamed_fragments_merge_within_one_drain() {
        let mut sink = CallSink::new(true);
        sink.begin_call("f", Some("functions.f:0".into()));
        sink.arguments("{\"a\"");
        sink.arguments(":1}");
        sink.end_call();
        let mut out = Delta::default();
        sink.drain_into(&mut out);
        assert_eq!(out.calls.len(), 1);
        assert_eq!(out.calls[0].id.as_deref(), Some("functions.f:0"));
        assert_eq!(out.calls[0].arguments, "{\"a\":1}");
    }

    #[test]
    fn records_where_calls_fall_in_the_content() {
        let mut sink = CallSink::new(false);
        sink.content("before ");
        sink.begin_call("f", None);
        sink.arguments("{}");
        sink.end_call();
        sink.content("after");
        let mut out = Delta {
            content: "earlier ".into(),
            ..Delta::default()
        };
        sink.drain_into(&mut out);
        assert_eq!(&out.content[..out.calls_at], "earlier before ");
        assert_eq!(&out.content[out.calls_at..], "after");
    }

    fn sink(dialect: Dialect, space: SpaceBeforeCalls) -> CallSink {
        let tools = Tools::from_json(br#"[{"type": "function", "function": {"name": "f"}}]"#);
        CallSink::with_dialect(false, dialect, space, Arc::new(tools.unwrap()))
    }

    fn call(sink: &mut CallSink, name: &str) {
        sink.begin_call(name, None);
        sink.arguments("{}");
        sink.end_call();
    }

    #[test]
    fn blank_content_before_a_call_is_dropped_but_text_keeps_its_space() {
        let mut s = sink(Dialect::Vllm, SpaceBeforeCalls::BlankDropped);
        s.content("\n");
        call(&mut s, "f");
        s.content(" \n");
        call(&mut s, "f");
        s.content("Done.\n");
        call(&mut s, "f");
        s.content("\n");
        s.finish();
        let mut out = Delta::default();
        s.drain_into(&mut out);
        assert_eq!(out.content, "Done.\n\n");
        assert_eq!(out.calls.len(), 3);
    }

    #[test]
    fn only_a_blank_line_right_before_a_call_is_dropped() {
        for (pieces, kept) in [
            (&["Sure. ", "\n\n"][..], "Sure. "),
            (&["Sure.\n", "\n\n"], "Sure.\n"),
            (&["Sure.", "\n"], "Sure.\n"),
            (&["\n\n"], ""),
        ] {
            let mut s = sink(Dialect::Sglang, SpaceBeforeCalls::BlankLineDropped);
            for piece in pieces {
                s.content(piece);
            }
            call(&mut s, "f");
            let mut out = Delta::default();
            s.drain_into(&mut out);
            assert_eq!(out.content, kept, "{pieces:?}");
            assert_eq!(out.calls_at, kept.len());
        }
    }

    #[test]
    fn blank_content_before_calls_is_dropped_only_until_text() {
        let mut s = sink(Dialect::Vllm, SpaceBeforeCalls::BlankDroppedUntilText);
        s.content("\n\n");
        call(&mut s, "f");
        s.content("\n");
        call(&mut s, "g");
        s.content("Text.\n");
        call(&mut s, "h");
        s.content("\n");
        call(&mut s, "i");
        let mut out = Delta::default();
        s.drain_into(&mut out);
        assert_eq!(out.content, "Text.\n\n");
        assert_eq!(out.calls.len(), 4);
    }

    #[test]
    fn only_blank_content_between_two_calls_is_dropped() {
        let mut s = sink(Dialect::Sglang, SpaceBeforeCalls::BetweenCallsDropped);
        s.content("\n");
        call(&mut s, "f");
        s.content("\n");
        call(&mut s, "f");
        s.content(" Text.\n\n");
        call(&mut s, "f");
        s.content("\n");
        s.finish();
        let mut out = Delta::default();
        s.drain_into(&mut out);
        assert_eq!(out.content, "\n Text.\n\n\n");
        assert_eq!(out.calls.len(), 3);
    }

    #[test]
    fn sglang_drops_calls_to_undeclared_tools() {
        let mut s = sink(Dialect::Sglang, SpaceBeforeCalls::Kept);
        call(&mut s, "launch");
        call(&mut s, "f");
        let mut out = Delta::default();
        s.drain_into(&mut out);
        assert_eq!(out.calls.len(), 1);
        assert_eq!(out.calls[0].index, 0);
        assert_eq!(out.calls[0].name.as_deref(), Some("f"));
        assert_eq!(s.errors().len(), 1);
        let mut vllm = sink(Dialect::Vllm, SpaceBeforeCalls::Kept);
        call(&mut vllm, "launch");
        vllm.drain_into(&mut out);
        assert_eq!(out.calls.len(), 2);
    }

    #[test]
    fn ids_have_dynamo_form() {
        let id = new_call_id();
        assert!(id.starts_with("call-"));
        assert_eq!(id.len(), 41);
    }
}
