//! One request's response side: engine frames in, the bytes Dynamo 1.6.1's
//! frontend would send out (SSE events while streaming, one body for unary).
//!
//! Per choice: detokenize (hidden EOS, stop strings) → reasoning and tool-call
//! parsing (chat only) → chunk. Unary responses fold the very same deltas.

use std::sync::Arc;

use tokenizers::Tokenizer;

use super::chunks::{self, ChatDelta, ChatMessage, CompletionChoice, Envelope, Usage, WholeCall};
use super::detok::Detokenizer;
use super::error::write_flat_body;
use super::frames::{parse_frame, EngineOutput, Frame};
use super::logprobs::{self, TokenLogprob};
use super::plan::{ResponsePlan, Surface};
use super::sse;
use crate::parsers::{ChatParser, Delta};

/// The message Dynamo shows for any engine failure (the engine's own text stays inside).
pub const INTERNAL_ERROR: &str = "Internal server error";

struct Choice {
    index: u32,
    detok: Detokenizer,
    parser: Option<ChatParser>,
    /// The next chunk is this choice's first (Dynamo stamps the role on it).
    first: bool,
    finished: bool,
    had_calls: bool,
    /// Streaming with a forced tool choice: calls wait for the last chunk,
    /// which Dynamo sends with the finish reason on it.
    held_calls: Vec<crate::parsers::CallDelta>,
    /// Tokens whose side (reasoning or answer) is not known yet.
    pending_tokens: u32,
    /// The last released text was reasoning (or nothing yet with a reasoning parser).
    in_reasoning: bool,
    /// A stop string ended the choice: tokens that released nothing before it
    /// are not reasoning (Dynamo counts them nowhere).
    stopped_by_string: bool,
    // Unary fold.
    content: String,
    reasoning: String,
    calls: Vec<WholeCall>,
    finish_reason: Option<&'static str>,
    logprobs: Vec<TokenLogprob>,
    reasoning_tokens: u32,
    /// Characters of text so far (completions `text_offset`).
    text_chars: usize,
}

/// Response state for one request.
pub struct ResponseState {
    plan: ResponsePlan,
    tokenizer: Arc<Tokenizer>,
    choices: Vec<Choice>,
    usage: Usage,
    /// Tool-call parsing is on (Dynamo's jail); it changes how trailing
    /// reasoning tokens are counted.
    jail: bool,
    status: u16,
    closed: bool,
    /// The `nvext.annotations` events went out (they lead a stream).
    announced: bool,
    /// The engine sent at least one frame.
    fed: bool,
    piece: String,
    delta: Delta,
    logprobs: Vec<TokenLogprob>,
}

impl ResponseState {
    pub fn new(plan: ResponsePlan, tokenizer: Arc<Tokenizer>) -> Self {
        let jail = plan.parsers.as_ref().is_some_and(|p| p.tool_call.is_some());
        let usage = Usage {
            prompt_tokens: plan.prompt_tokens,
            ..Usage::default()
        };
        Self {
            plan,
            tokenizer,
            choices: Vec::with_capacity(1),
            usage,
            jail,
            status: 200,
            closed: false,
            announced: false,
            fed: false,
            piece: String::new(),
            delta: Delta::default(),
            logprobs: Vec::new(),
        }
    }

    /// HTTP status of the response: 200, or 500 after a unary engine failure.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// All `n` choices have finished (or the response failed): the engine can stop.
    pub fn is_finished(&self) -> bool {
        self.closed
            || (self.choices.len() >= self.plan.n.max(1) as usize
                && self.choices.iter().all(|c| c.finished))
    }

    fn envelope(&self) -> Envelope<'_> {
        Envelope {
            id: &self.plan.response_id,
            created: self.plan.created,
            model: &self.plan.model,
        }
    }

    /// Before anything else a stream sends: the requested annotation events.
    fn announce(&mut self, out: &mut Vec<u8>) {
        if self.announced || !self.plan.stream {
            return;
        }
        self.announced = true;
        for (name, comment) in &self.plan.annotation_events {
            sse::write_annotation(out, name, comment);
        }
    }

    /// Take one engine frame (JSON bytes); append what is to be sent now.
    pub fn feed(&mut self, frame: &[u8], out: &mut Vec<u8>) {
        if self.closed {
            return;
        }
        self.fed = true;
        self.announce(out);
        match parse_frame(frame) {
            Ok(Frame::Output(output)) => self.output(&output, out),
            Ok(Frame::Skip) => {}
            // A 4xx the engine reports as `{"message","code"}` reaches the client;
            // any other failure, and malformed frames, become a generic 500.
            Ok(Frame::Error(message)) => match client_error(&message) {
                Some((code, message)) => self.fail_with(code, &message, out),
                None => self.fail(INTERNAL_ERROR, out),
            },
            Err(_) => self.fail(INTERNAL_ERROR, out),
        }
    }

    /// The engine failed: an in-stream error event (streaming) or a 500 body (unary).
    pub fn fail(&mut self, message: &str, out: &mut Vec<u8>) {
        self.fail_with(500, message, out);
    }

    /// Fail with a given HTTP status: streaming keeps its 200 and sends the
    /// OpenAI-style error event; unary gets the status and Dynamo's flat body.
    pub fn fail_with(&mut self, status: u16, message: &str, out: &mut Vec<u8>) {
        if self.closed {
            return;
        }
        self.announce(out);
        self.closed = true;
        if self.plan.stream {
            sse::write_error(out, status, message);
        } else {
            self.status = status;
            // An engine that failed before sending anything: Dynamo 1.6.1 adds the
            // backend's status (an error frame does not get it).
            let details = (status == 500 && !self.fed).then_some(r#"{"backend_status":500}"#);
            write_flat_body(out, status, message, details);
        }
    }

    /// The engine stream ended: append the closing events, or the unary body.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.closed {
            return;
        }
        self.announce(out);
        self.closed = true;
        for slot in 0..self.choices.len() {
            if !self.choices[slot].finished {
                self.piece.clear();
                self.choices[slot].detok.flush(&mut self.piece);
                self.emit(slot, 0, None, true, out);
            }
        }
        self.usage.reasoning_tokens = self.choices.iter().map(|c| c.reasoning_tokens).sum();
        let env = self.envelope();
        if self.plan.stream {
            if self.plan.include_usage {
                sse::begin_event(out);
                match self.plan.surface {
                    Surface::Chat => chunks::write_chat_usage_chunk(out, &env, &self.usage),
                    Surface::Completions => {
                        chunks::write_completion_usage_chunk(out, &env, &self.usage)
                    }
                }
                sse::end_event(out);
            }
            sse::write_done(out);
            return;
        }
        let mut order: Vec<&Choice> = self.choices.iter().collect();
        order.sort_by_key(|c| c.index);
        let surface = self.plan.surface;
        let rendered: Vec<Option<Vec<u8>>> = order
            .iter()
            .map(|c| logprobs::render(surface, &c.logprobs))
            .collect();
        match surface {
            Surface::Chat => {
                let messages: Vec<ChatMessage> = order
                    .iter()
                    .zip(&rendered)
                    .map(|(c, lp)| ChatMessage {
                        index: c.index,
                        content: &c.content,
                        tool_calls: &c.calls,
                        reasoning: &c.reasoning,
                        finish_reason: c.finish_reason,
                        logprobs: lp.as_deref(),
                    })
                    .collect();
                chunks::write_chat_completion(out, &env, &messages, &self.usage);
            }
            Surface::Completions => {
                let choices: Vec<CompletionChoice> = order
                    .iter()
                    .zip(&rendered)
                    .map(|(c, lp)| CompletionChoice {
                        index: c.index,
                        text: &c.content,
                        logprobs: lp.as_deref(),
                        finish_reason: c.finish_reason,
                    })
                    .collect();
                chunks::write_completion(out, &env, &choices, &self.usage);
            }
        }
    }

    fn slot(&mut self, index: u32) -> usize {
        if let Some(slot) = self.choices.iter().position(|c| c.index == index) {
            return slot;
        }
        let parsers = self.plan.parsers.as_ref();
        self.choices.push(Choice {
            index,
            detok: Detokenizer::new(self.tokenizer.clone(), self.plan.decode.clone()),
            parser: parsers.map(ChatParser::from_spec),
            first: true,
            finished: false,
            had_calls: false,
            held_calls: Vec::new(),
            pending_tokens: 0,
            in_reasoning: parsers
                .is_some_and(|p| p.reasoning.is_some() && p.in_reasoning != Some(false)),
            stopped_by_string: false,
            content: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
            finish_reason: None,
            logprobs: Vec::new(),
            reasoning_tokens: 0,
            text_chars: 0,
        });
        self.choices.len() - 1
    }

    fn output(&mut self, output: &EngineOutput, out: &mut Vec<u8>) {
        let slot = self.slot(output.index.unwrap_or(0));
        if self.choices[slot].finished {
            return;
        }
        if let Some(details) = output
            .completion_usage
            .as_ref()
            .and_then(|u| u.prompt_tokens_details.as_ref())
        {
            self.usage.cached_tokens = Some(details.cached_tokens);
        }
        self.piece.clear();
        let step = match self.choices[slot].detok.step(output, &mut self.piece) {
            Ok(step) => step,
            Err(_) => return self.fail(INTERNAL_ERROR, out),
        };
        self.usage.completion_tokens += step.tokens;
        self.choices[slot].stopped_by_string = step.by_string;
        let finish = if step.stopped {
            Some("stop")
        } else {
            output.finish_reason.as_ref().and_then(|f| f.openai())
        };
        self.logprobs.clear();
        if self.plan.logprobs {
            let choice = &mut self.choices[slot];
            logprobs::collect(
                self.plan.surface,
                output,
                step.tokens as usize,
                (&self.piece, choice.detok.token_ends()),
                &mut choice.text_chars,
                &mut self.logprobs,
            );
        }
        self.emit(slot, step.tokens, finish, false, out);
    }

    /// Turn `self.piece` (and, at the end, whatever the parsers hold) into the
    /// choice's next chunk(s), or fold it into the unary message.
    fn emit(
        &mut self,
        slot: usize,
        tokens: u32,
        finish: Option<&'static str>,
        stream_end: bool,
        out: &mut Vec<u8>,
    ) {
        let ending = finish.is_some() || stream_end;
        let choice = &mut self.choices[slot];
        self.delta.clear();
        match choice.parser.as_mut() {
            Some(parser) => {
                parser.feed(&self.piece, &mut self.delta);
                if ending {
                    parser.finish(&mut self.delta);
                }
            }
            None => self.delta.content.push_str(&self.piece),
        }
        if self.plan.tool_choice.forces_calls() {
            self.delta.content.clear();
            self.delta.calls_at = 0;
            if self.plan.stream {
                choice.had_calls |= !self.delta.calls.is_empty();
                choice.held_calls.append(&mut self.delta.calls);
                if ending {
                    std::mem::swap(&mut self.delta.calls, &mut choice.held_calls);
                }
            }
        }
        if !self.plan.parallel_tool_calls {
            self.delta.calls.retain(|c| c.index == 0);
        }
        let settle = ending && !self.jail && !choice.stopped_by_string;
        count_reasoning(choice, &self.delta, tokens, settle);
        choice.had_calls |= !self.delta.calls.is_empty();
        let finish = finish.map(|f| if choice.had_calls { "tool_calls" } else { f });
        if ending {
            choice.finished = true;
            choice.finish_reason = finish;
        }
        if !self.plan.stream {
            choice.logprobs.append(&mut self.logprobs);
            choice.content.push_str(&self.delta.content);
            choice.reasoning.push_str(&self.delta.reasoning);
            choice
                .calls
                .extend(self.delta.calls.drain(..).map(|c| WholeCall {
                    id: c.id.unwrap_or_default(),
                    name: c.name.unwrap_or_default(),
                    arguments: c.arguments,
                }));
            return;
        }
        let index = choice.index;
        let role = std::mem::take(&mut choice.first);
        let running = self.plan.continuous_usage.then(|| Usage {
            reasoning_tokens: self.choices.iter().map(|c| c.reasoning_tokens).sum(),
            ..self.usage
        });
        let usage = running.as_ref();
        let env = Envelope {
            id: &self.plan.response_id,
            created: self.plan.created,
            model: &self.plan.model,
        };
        let rendered = logprobs::render(self.plan.surface, &self.logprobs);
        if self.plan.surface == Surface::Completions {
            let text = self.delta.content.as_str();
            if text.is_empty() && finish.is_none() && rendered.is_none() {
                return;
            }
            sse::begin_event(out);
            chunks::write_completion_chunk(
                out,
                &env,
                index,
                text,
                rendered.as_deref(),
                finish,
                usage,
            );
            sse::end_event(out);
            return;
        }
        let text = non_empty(&self.delta.content);
        let reasoning = non_empty(&self.delta.reasoning);
        if self.delta.calls.is_empty() {
            let delta = ChatDelta {
                content: text,
                tool_calls: &[],
                role,
                reasoning,
            };
            if delta.is_empty() && finish.is_none() && rendered.is_none() {
                return;
            }
            sse::begin_event(out);
            chunks::write_chat_chunk(out, &env, index, &delta, finish, rendered.as_deref(), usage);
            sse::end_event(out);
            return;
        }
        // Dynamo releases a call as its own chunk with `"content":""`; text the
        // same step released before it goes out first, text after it next.
        let (before, after) = self.delta.content.split_at(self.delta.calls_at);
        let lead = ChatDelta {
            content: non_empty(before),
            tool_calls: &[],
            role,
            reasoning,
        };
        if !lead.is_empty() {
            sse::begin_event(out);
            chunks::write_chat_chunk(out, &env, index, &lead, None, None, usage);
            sse::end_event(out);
        }
        let calls = ChatDelta {
            content: Some(""),
            tool_calls: &self.delta.calls,
            role: false,
            reasoning: None,
        };
        let trail = ChatDelta {
            content: non_empty(after),
            tool_calls: &[],
            role: false,
            reasoning: None,
        };
        sse::begin_event(out);
        if trail.is_empty() {
            chunks::write_chat_chunk(out, &env, index, &calls, finish, rendered.as_deref(), usage);
        } else {
            chunks::write_chat_chunk(out, &env, index, &calls, None, rendered.as_deref(), usage);
            sse::end_event(out);
            sse::begin_event(out);
            chunks::write_chat_chunk(out, &env, index, &trail, finish, None, usage);
        }
        sse::end_event(out);
    }
}

/// An engine error that is the client's fault: `{"message": …, "code": 4xx}`.
fn client_error(text: &str) -> Option<(u16, String)> {
    #[derive(serde::Deserialize)]
    struct Reported {
        message: String,
        code: u16,
    }
    let reported: Reported = serde_json::from_str(text).ok()?;
    (400..500)
        .contains(&reported.code)
        .then_some((reported.code, reported.message))
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// Dynamo's `reasoning_tokens`, as the captures show it: the tokens released
/// while reasoning (including `<think>`, excluding `</think>`). Tokens that
/// released nothing are settled by the next text; at the end they count as
/// reasoning only if reasoning never closed and no tool jail ran.
fn count_reasoning(choice: &mut Choice, delta: &Delta, tokens: u32, settle_at_end: bool) {
    choice.pending_tokens += tokens;
    if !delta.content.is_empty() || !delta.calls.is_empty() {
        choice.pending_tokens = 0;
        choice.in_reasoning = false;
    } else if !delta.reasoning.is_empty() || (settle_at_end && choice.in_reasoning) {
        choice.reasoning_tokens += choice.pending_tokens;
        choice.pending_tokens = 0;
        choice.in_reasoning = true;
    }
}
