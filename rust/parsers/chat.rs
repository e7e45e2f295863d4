//! Reasoning and tool calls in one pass: the reasoning stage's content output
//! feeds the tool stage, and reasoning ends implicitly at a tool-start marker.

use std::sync::Arc;

use super::dialect::{Dialect, SpaceBeforeCalls};
use super::options::{empty_content_gets_reasoning, reasoning_off};
use super::registry::{ReasoningFamily, ToolCallFamily, UnknownParser};
use super::template::Template;
use super::{CallSink, Delta, Message, ParseError, ReasoningParse, ToolParse, Tools};

pub struct ChatParser {
    reasoning: Option<Box<dyn ReasoningParse>>,
    tools: Option<Box<dyn ToolParse>>,
    sink: CallSink,
    /// Reasoning stage output, reused across feeds.
    staged: Delta,
    /// The reasoning so far, kept when an empty reply's content is to get it at the end
    /// (Nemotron in the vLLM and SGLang dialects).
    fallback: Option<String>,
    /// Some content other than whitespace, or a call, has been released.
    answered: bool,
    /// The last `feed` or `finish` passed answer text (not reasoning) to the tool stage.
    answered_last: bool,
}

/// Options shared by every way of building a [`ChatParser`] by parser names.
#[derive(Debug, Clone, Default)]
pub struct ChatOptions {
    pub reasoning: Option<String>,
    pub tool_call: Option<String>,
    pub tools: Arc<Tools>,
    pub stream_arguments: bool,
    pub in_reasoning: Option<bool>,
    /// The request switched thinking on or off (see [`super::options`]).
    pub thinking: Option<bool>,
    /// Nemotron's `force_nonempty_content` (see [`super::options`]).
    pub force_nonempty_content: bool,
    /// Whose behaviour to reproduce where the servers differ.
    pub dialect: Dialect,
    /// Reproduce Dynamo 1.6.1's streaming exactly, quirks included: its `<think>`
    /// parsers release a lone `<` that ends a longer piece of content, so the
    /// result then depends on how the text was cut. Only the pipeline sets this,
    /// for byte parity with the reference; the standalone parsers never do.
    pub reference_streaming: bool,
    /// The template the `response_template` / `beam` families parse with (the
    /// checkpoint's `response_template`; `beam` has its own built in).
    pub response_template: Option<Arc<Template>>,
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
            thinking: self.thinking,
            force_nonempty_content: self.force_nonempty_content,
            dialect: self.dialect,
            reference_streaming: self.reference_streaming,
            response_template: self.response_template.clone(),
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
    pub thinking: Option<bool>,
    pub force_nonempty_content: bool,
    pub dialect: Dialect,
    pub reference_streaming: bool,
    pub response_template: Option<Arc<Template>>,
}

impl ChatParserSpec {
    /// The reasoning family that runs: the name as the dialect reads it, none when
    /// the request switched it off (Dynamo's gate; see [`super::options`]).
    pub fn active_reasoning(&self) -> Option<ReasoningFamily> {
        let dialect = self.dialect;
        let reference = self.reference_streaming;
        self.reasoning
            .map(|f| f.read_by(dialect, reference))
            .filter(|f| {
                !(dialect.gates_reasoning()
                    && reasoning_off(
                        f.switch(),
                        self.thinking,
                        self.force_nonempty_content,
                        reference,
                    ))
            })
    }
}

impl ChatParser {
    /// Fails only for a parser name no family answers to.
    pub fn new(options: &ChatOptions) -> Result<Self, UnknownParser> {
        Ok(Self::from_spec(&options.resolve()?))
    }

    pub fn from_spec(spec: &ChatParserSpec) -> Self {
        let dialect = spec.dialect;
        let tools = spec.tool_call.map(|family| {
            let schema_tools = if spec.tools.dialect() == dialect {
                spec.tools.clone()
            } else {
                Arc::new(spec.tools.in_dialect(dialect))
            };
            family.build_with(schema_tools, spec.response_template.clone())
        });
        let exit_markers = match (&tools, spec.reasoning) {
            (Some(t), Some(r)) if dialect.call_ends_reasoning(r.name()) => t.start_markers(),
            _ => &[][..],
        };
        let (thinking, nonempty) = (spec.thinking, spec.force_nonempty_content);
        let family = spec
            .reasoning
            .map(|f| f.read_by(dialect, spec.reference_streaming));
        let fallback = family
            .filter(|f| {
                !dialect.gates_reasoning()
                    && empty_content_gets_reasoning(f.name(), thinking, nonempty)
            })
            .map(|_| String::new());
        let reasoning = spec.active_reasoning().map(|family| {
            // Thinking off: the template did not open reasoning.
            let in_reasoning = spec
                .in_reasoning
                .or((thinking == Some(false)).then_some(false))
                .or(dialect.starts_in_reasoning(family.name()));
            family.build_with(
                in_reasoning,
                exit_markers,
                spec.reference_streaming,
                spec.response_template.clone(),
            )
        });
        Self {
            reasoning,
            tools,
            sink: CallSink::with_dialect(
                spec.stream_arguments,
                dialect,
                spec.tool_call.map_or(SpaceBeforeCalls::Kept, |f| {
                    dialect.space_before_calls(f.name(), f.spelling())
                }),
                spec.tools.clone(),
            ),
            staged: Delta::default(),
            fallback,
            answered: false,
            answered_last: false,
        }
    }

    /// Feed the next piece of model text; what can be released is appended to `out`.
    pub fn feed(&mut self, text: &str, out: &mut Delta) {
        match self.reasoning.as_mut() {
            Some(reasoning) => {
                self.staged.clear();
                reasoning.feed(text, &mut self.staged);
                self.keep_reasoning();
                out.reasoning.push_str(&self.staged.reasoning);
                let content = std::mem::take(&mut self.staged.content);
                self.answered_last = !content.is_empty();
                self.content(&content, out);
                self.staged.content = content;
            }
            None => {
                self.answered_last = !text.is_empty();
                self.content(text, out);
            }
        }
    }

    fn keep_reasoning(&mut self) {
        if let Some(kept) = self.fallback.as_mut() {
            kept.push_str(&self.staged.reasoning);
        }
    }

    /// End of output: everything held is released to `out`.
    pub fn finish(&mut self, out: &mut Delta) {
        self.answered_last = false;
        if let Some(reasoning) = self.reasoning.as_mut() {
            self.staged.clear();
            reasoning.finish(&mut self.staged);
            self.keep_reasoning();
            out.reasoning.push_str(&self.staged.reasoning);
            let content = std::mem::take(&mut self.staged.content);
            self.answered_last = !content.is_empty();
            self.content(&content, out);
        }
        if let Some(tools) = self.tools.as_mut() {
            let (content_at, calls_at) = (out.content.len(), out.calls.len());
            tools.finish(&mut self.sink);
            self.sink.finish();
            self.sink.drain_into(out);
            self.note_answer(out, content_at, calls_at);
        }
        // vLLM's streaming fallback: an empty reply repeats its reasoning as content.
        if let Some(kept) = self.fallback.take() {
            if !self.answered {
                out.content.push_str(&kept);
            }
        }
    }

    fn content(&mut self, text: &str, out: &mut Delta) {
        if text.is_empty() {
            return;
        }
        let (content_at, calls_at) = (out.content.len(), out.calls.len());
        match self.tools.as_mut() {
            Some(tools) => {
                tools.feed(text, &mut self.sink);
                self.sink.drain_into(out);
            }
            None => out.content.push_str(text),
        }
        self.note_answer(out, content_at, calls_at);
    }

    /// Whether what `out` gained since `content_at` / `calls_at` answers the request.
    fn note_answer(&mut self, out: &Delta, content_at: usize, calls_at: usize) {
        self.answered |= out.calls.len() > calls_at || !out.content[content_at..].trim().is_empty();
    }

    /// The last `feed` or `finish` released answer text, tool-call markup included
    /// (as opposed to reasoning, or nothing at all).
    pub fn answered_last(&self) -> bool {
        self.answered_last
    }

    pub fn errors(&self) -> &[ParseError] {
        self.sink.errors()
    }

    /// The reasoning stage alone: content comes out as text (the tool family's
    /// start markers still end reasoning), for a server that runs its own tool
    /// stage on it (the pipeline's copy of Dynamo's tool-call jail).
    pub fn without_tool_stage(mut self) -> Self {
        self.tools = None;
        self
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
