//! Reasoning and tool calls in one pass: the reasoning stage's content output
//! feeds the tool stage, and reasoning ends implicitly at a tool-start marker.

use std::sync::Arc;

use super::registry::{ReasoningFamily, ToolCallFamily, UnknownParser};
use super::{CallSink, Delta, Message, ParseError, ReasoningParse, ToolParse, Tools};

pub struct ChatParser {
    reasoning: Option<Box<dyn ReasoningParse>>,
    tools: Option<Box<dyn ToolParse>>,
    sink: CallSink,
    /// Reasoning stage output, reused across feeds.
    staged: Delta,
    /// The last `feed` or `finish` passed answer text (not reasoning) to the tool stage.
    answered: bool,
}

/// Options shared by every way of building a [`ChatParser`] by parser names.
#[derive(Debug, Clone, Default)]
pub struct ChatOptions {
    pub reasoning: Option<String>,
    pub tool_call: Option<String>,
    pub tools: Arc<Tools>,
    pub stream_arguments: bool,
    pub in_reasoning: Option<bool>,
    /// Reproduce Dynamo 1.6.1's streaming exactly, quirks included: its `<think>`
    /// parsers release a lone `<` that ends a longer piece of content, so the
    /// result then depends on how the text was cut. Only the pipeline sets this,
    /// for byte parity with the reference; the standalone parsers never do.
    pub reference_streaming: bool,
}

impl ChatOptions {
    /// The names resolved to their families; the one step that can fail.
    pub fn resolve(&self) -> Result<ChatParserSpec, UnknownParser> {
        Ok(ChatParserSpec {
            reasoning: self
                .reasoning
                .as_deref()
                .map(ReasoningFamily::resolve)
                .transpose()?,
            tool_call: self
                .tool_call
                .as_deref()
                .map(ToolCallFamily::resolve)
                .transpose()?,
            tools: self.tools.clone(),
            stream_arguments: self.stream_arguments,
            in_reasoning: self.in_reasoning,
            reference_streaming: self.reference_streaming,
        })
    }
}

/// [`ChatOptions`] with the parser names resolved: what a server keeps, and builds a
/// parser from per response without a way to fail.
#[derive(Debug, Clone, Default)]
pub struct ChatParserSpec {
    pub reasoning: Option<ReasoningFamily>,
    pub tool_call: Option<ToolCallFamily>,
    pub tools: Arc<Tools>,
    pub stream_arguments: bool,
    pub in_reasoning: Option<bool>,
    pub reference_streaming: bool,
}

impl ChatParser {
    /// Fails only for a parser name no family answers to.
    pub fn new(options: &ChatOptions) -> Result<Self, UnknownParser> {
        Ok(Self::from_spec(&options.resolve()?))
    }

    pub fn from_spec(spec: &ChatParserSpec) -> Self {
        let tools = spec
            .tool_call
            .map(|family| family.build(spec.tools.clone()));
        let exit_markers = tools.as_ref().map_or(&[][..], |t| t.start_markers());
        let reasoning = spec
            .reasoning
            .map(|family| family.build(spec.in_reasoning, exit_markers, spec.reference_streaming));
        Self {
            reasoning,
            tools,
            sink: CallSink::new(spec.stream_arguments),
            staged: Delta::default(),
            answered: false,
        }
    }

    /// Feed the next piece of model text; what can be released is appended to `out`.
    pub fn feed(&mut self, text: &str, out: &mut Delta) {
        match self.reasoning.as_mut() {
            Some(reasoning) => {
                self.staged.clear();
                reasoning.feed(text, &mut self.staged);
                out.reasoning.push_str(&self.staged.reasoning);
                let content = std::mem::take(&mut self.staged.content);
                self.answered = !content.is_empty();
                self.content(&content, out);
                self.staged.content = content;
            }
            None => {
                self.answered = !text.is_empty();
                self.content(text, out);
            }
        }
    }

    /// End of output: everything held is released to `out`.
    pub fn finish(&mut self, out: &mut Delta) {
        self.answered = false;
        if let Some(reasoning) = self.reasoning.as_mut() {
            self.staged.clear();
            reasoning.finish(&mut self.staged);
            out.reasoning.push_str(&self.staged.reasoning);
            let content = std::mem::take(&mut self.staged.content);
            self.answered = !content.is_empty();
            self.content(&content, out);
        }
        if let Some(tools) = self.tools.as_mut() {
            tools.finish(&mut self.sink);
            self.sink.drain_into(out);
        }
    }

    fn content(&mut self, text: &str, out: &mut Delta) {
        if text.is_empty() {
            return;
        }
        match self.tools.as_mut() {
            Some(tools) => {
                tools.feed(text, &mut self.sink);
                self.sink.drain_into(out);
            }
            None => out.content.push_str(text),
        }
    }

    /// The last `feed` or `finish` released answer text, tool-call markup included
    /// (as opposed to reasoning, or nothing at all).
    pub fn answered(&self) -> bool {
        self.answered
    }

    pub fn errors(&self) -> &[ParseError] {
        self.sink.errors()
    }
}

/// Parse a whole output at once. Calls come out whole; the result equals the
/// concatenation of any streamed run over the same text.
pub fn parse(
    text: &str,
    options: &ChatOptions,
) -> Result<(Message, Vec<ParseError>), UnknownParser> {
    Ok(parse_with(text, &options.resolve()?))
}

/// [`parse`] with the parser names resolved already.
pub fn parse_with(text: &str, spec: &ChatParserSpec) -> (Message, Vec<ParseError>) {
    let mut parser = ChatParser::from_spec(&ChatParserSpec {
        stream_arguments: false,
        ..spec.clone()
    });
    let mut delta = Delta::default();
    parser.feed(text, &mut delta);
    parser.finish(&mut delta);
    let mut message = Message::default();
    message.push(&delta);
    (message, parser.errors().to_vec())
}
