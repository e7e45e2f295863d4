//! Reasoning and tool calls in one pass: the reasoning stage's content output
//! feeds the tool stage, and reasoning ends implicitly at a tool-start marker.

use std::sync::Arc;

use super::registry::{new_reasoning_parser, new_tool_parser, UnknownParser};
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

/// Options shared by every way of building a [`ChatParser`].
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

impl ChatParser {
    pub fn new(options: &ChatOptions) -> Result<Self, UnknownParser> {
        let tools = match &options.tool_call {
            Some(name) => Some(new_tool_parser(name, options.tools.clone())?),
            None => None,
        };
        let exit_markers = tools.as_ref().map_or(&[][..], |t| t.start_markers());
        let reasoning = match &options.reasoning {
            Some(name) => Some(new_reasoning_parser(
                name,
                options.in_reasoning,
                exit_markers,
                options.reference_streaming,
            )?),
            None => None,
        };
        Ok(Self {
            reasoning,
            tools,
            sink: CallSink::new(options.stream_arguments),
            staged: Delta::default(),
            answered: false,
        })
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
    let mut options = options.clone();
    options.stream_arguments = false;
    let mut parser = ChatParser::new(&options)?;
    let mut delta = Delta::default();
    parser.feed(text, &mut delta);
    parser.finish(&mut delta);
    let mut message = Message::default();
    message.push(&delta);
    Ok((message, parser.errors().to_vec()))
}
