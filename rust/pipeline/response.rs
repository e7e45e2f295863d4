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
use super::guided_calls::{GuidedCalls, Shape};
use super::jail::{last_value_per_key, JailRules, Parsed, Released, ToolJail};
use super::logprobs::{self, TokenLogprob};
use super::plan::{ResponsePlan, Surface, ToolChoiceMode};
use super::sse;
use crate::parsers::calls::new_call_id;
use crate::parsers::chat::{parse_with, ChatParserSpec};
use crate::parsers::json::is_valid;
use crate::parsers::tools::harmony_whole;
use crate::parsers::tools::json_calls::default_whole::{self, Reading};
use crate::parsers::tools::json_calls::hermes_whole::{self, Repair};
use crate::parsers::tools::json_calls::{basic_whole, dsv31_whole, pythonic_whole};
use crate::parsers::{CallDelta, ChatParser, Delta};
use serde_json::value::RawValue;

/// The message Dynamo shows for any engine failure (the engine's own text stays inside).
pub const INTERNAL_ERROR: &str = "Internal server error";

/// A finished unary completions choice, owned, for a batch to merge.
pub struct OwnedCompletionChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<Vec<u8>>,
    pub finish_reason: Option<&'static str>,
}

struct Choice {
    index: u32,
    detok: Detokenizer,
    parser: Option<ChatParser>,
    /// The next chunk is this choice's first (Dynamo stamps the role on it).
    first: bool,
    finished: bool,
    had_calls: bool,
    /// A forced tool choice: calls wait for the last chunk, which Dynamo sends
    /// with the finish reason on it.
    held_calls: Vec<crate::parsers::CallDelta>,
    /// A forced tool choice: the answer text, released only if no call was parsed.
    jailed: String,
    /// The reasoning stage has passed answer text: from then on, under a forced
    /// tool choice, every frame's content (empty too) goes into the jail.
    answered_once: bool,
    /// A step before this one went through `emit`.
    stepped: bool,
    /// Under a forced tool choice with a reasoning stage (Dynamo's streaming),
    /// nothing but whitespace has come yet: such frames are answer text.
    leading_space: bool,
    /// Tools in play (not forced): Dynamo's tool-call jail on the content.
    jail: Option<ToolJail>,
    /// A forced tool choice: the guided JSON answer.
    guided: Option<GuidedCalls>,
    /// Calls the end parse of bare guided call objects adds to the finish chunk.
    guided_end_calls: Option<Vec<CallDelta>>,
    /// After a forced choice's guided JSON: the characters whose JSON value, opening
    /// a piece the jail holds nothing of, Dynamo's guided scan reads as more calls
    /// (a named choice: `{`, another call to its tool; `required`: `[`/`{`).
    guided_openers: &'static str,
    /// Such an object is streaming: the call index it takes.
    next_named: Option<usize>,
    /// mistral and llama3_json under `required`, after the guided list: a list the
    /// jail holds (mistral: `[TOOL_CALLS][…]` too) is read by the guided scan again.
    rescan_lists: bool,
    /// Calls the jail released so far (the next release's indexes go on from here).
    calls_released: usize,
    /// The last text the reasoning stage released was reasoning (not answer).
    in_reasoning: bool,
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
        let usage = Usage {
            prompt_tokens: plan.prompt_tokens,
            ..Usage::default()
        };
        Self {
            plan,
            tokenizer,
            choices: Vec::with_capacity(1),
            usage,
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

    /// With a reasoning parser Dynamo always reports `reasoning_tokens`, 0 included.
    fn reasoning_tokens(&self) -> Option<u32> {
        self.plan
            .parsers
            .as_ref()
            .is_some_and(|p| p.reasoning.is_some())
            .then(|| self.choices.iter().map(|c| c.reasoning_tokens).sum())
    }

    /// Take one engine frame (JSON bytes); append what is to be sent now.
    pub fn feed(&mut self, frame: &[u8], out: &mut Vec<u8>) {
        if self.closed {
            return;
        }
        self.fed = true;
        self.announce(out);
        let mut output = EngineOutput::default();
        match parse_frame(frame, &mut output) {
            Ok(Frame::Output) => self.output(&output, out),
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
        self.usage.reasoning_tokens = self.reasoning_tokens();
        if self.plan.batch_part.is_some() {
            return; // the batch writes the usage, [DONE], or the merged body
        }
        if !self.plan.stream && self.plan.unary_harmony_cleanup {
            // Dynamo's unary aggregator re-reads a harmony answer that holds
            // `<|channel|>`: its cleaned content replaces the text (its calls are
            // not kept, live-checked without tools and with `tool_choice: none`;
            // a named choice keeps the text, `required` too unless it holds
            // `<|channel|>commentary`: `x<|channel|>commentary` says `x`).
            let marker = match self.plan.tool_choice {
                ToolChoiceMode::Required => HARMONY_REQUIRED_REREAD,
                _ if self.plan.tool_choice.forces_calls() => "",
                _ => harmony_whole::CHANNEL,
            };
            for choice in &mut self.choices {
                if choice.calls.is_empty() && !marker.is_empty() && choice.content.contains(marker)
                {
                    choice.content = harmony_whole::parse_whole(&choice.content).content;
                }
            }
        }
        if let Some(spec) = self.plan.parsers.as_ref().filter(|spec| {
            !self.plan.stream
                && spec.reference_streaming
                && self.plan.surface == Surface::Chat
                && (!self.plan.tool_choice.forces_calls()
                    || spec.tool_call.is_some_and(|f| f.name() == "kimi_k2"))
                && spec.tool_call.is_some_and(|f| {
                    matches!(
                        f.name(),
                        "qwen3_coder"
                            | "default"
                            | "mistral"
                            | "hermes"
                            | "deepseek_v3_1"
                            | "llama3_json"
                            | "kimi_k2"
                    )
                })
        }) {
            // Dynamo's unary aggregator reads a qwen3_coder, `default`, mistral,
            // hermes, deepseek_v3_1, llama3_json or kimi_k2 (forced choice too: it
            // installs no guided JSON for kimi) answer without calls again (cut
            // by length: when it holds a start marker; the jail let it out as text;
            // live-checked: `fine<tool_call> ` says `fine`, `hi <|python_tag|>{"a"`
            // says `hi `, `x<｜tool▁calls▁begin｜>\n` says `x`, llama3_json's
            // `x '{"a":1} <|python_tag|>` says `x '{"a":1} `, while `<tool_call>|>`
            // that stopped keeps its text).
            let jail = family_jail(spec);
            let default = spec.tool_call.is_some_and(|f| f.name() == "default");
            let hermes = spec.tool_call.is_some_and(|f| f.name() == "hermes");
            let kimi = spec.tool_call.is_some_and(|f| f.name() == "kimi_k2");
            for choice in &mut self.choices {
                if !choice.calls.is_empty() {
                    continue;
                }
                if hermes {
                    // Its hermes parse of an answer without calls (live-checked:
                    // `ok {"name":"f","parameters":{"a": "` + `</tool_call>` + `"}}`
                    // streams as text, the unary answer is the call, content `ok`).
                    // Bare JSON is closed too (live-checked: a stop string's cut left
                    // `Hello 42[{A}` as text, the unary answer is the call A).
                    let parse = hermes_whole::parse_whole(&choice.content, Repair::Always);
                    if !parse.calls.is_empty() {
                        answer_with_calls(choice, parse.content, parse.calls);
                    }
                    continue;
                }
                if default {
                    // It reads a `default` answer without calls again whole, as at
                    // the end of output (live-checked: a `<TOOLCALL>` block closed
                    // around JSON cut inside a string is closed and read).
                    let parse = default_whole::parse_whole(&choice.content, Reading::End);
                    if !parse.calls.is_empty() {
                        answer_with_calls(choice, parse.content, parse.calls);
                        continue;
                    }
                }
                if kimi {
                    // Its kimi_k2 parse of the answer: calls found replace the text
                    // (ids as written); without any, an answer cut by length is cut
                    // at its first start marker outside a quoted span (live-checked,
                    // seed 20261216 #3449: a length cut that went back to reasoning
                    // inside the arguments streams the held `<|tool_call_begin|>…`
                    // as content, the unary content is null).
                    let Some(parsed) = jail.reread(&choice.content) else {
                        continue;
                    };
                    if !parsed.calls.is_empty() {
                        answer_with_parsed(choice, parsed);
                    } else if choice.finish_reason == Some("length") {
                        cut_at_first_marker(choice, &jail);
                    }
                    continue;
                }
                if choice.finish_reason != Some("length") {
                    // qwen3_coder's own reading at the end finds calls the stream
                    // let out as text (`<function=</tool_call>`).
                    if let Some(parsed) = jail.recovered(&choice.content, true) {
                        let calls = parsed.calls.into_iter().map(|c| (c.name, c.arguments));
                        answer_with_calls(choice, parsed.content, calls.collect());
                    }
                    continue;
                }
                if let Some(parsed) = jail.reread(&choice.content) {
                    // qwen3_coder's own reading as at the end of output, as when the
                    // model stopped (seed 20261209 #1276: `x<function=ok</tool_call>y`
                    // cut by length is the call `ok</tool_call`, content `x`).
                    let recovered = parsed
                        .calls
                        .is_empty()
                        .then(|| jail.recovered(&choice.content, true))
                        .flatten();
                    if let Some(parsed) = recovered {
                        let calls = parsed.calls.into_iter().map(|c| (c.name, c.arguments));
                        answer_with_calls(choice, parsed.content, calls.collect());
                        continue;
                    }
                    if parsed.calls.is_empty() {
                        // Without calls it cuts the text at the first start marker
                        // outside a quoted span, else keeps it whole (live-checked:
                        // `{"a<TOOLCALL>[{"name": "y` says all of it).
                        cut_at_first_marker(choice, &jail);
                        continue;
                    }
                    answer_with_parsed(choice, parsed);
                }
            }
        }
        if !self.plan.stream {
            // Dynamo's unary answer drops the last call when its arguments are not
            // JSON and the output was cut by length (taken as cut off; the stream
            // keeps it; live-checked with kimi_k2 and harmony: only the last one,
            // a non-JSON call before it stays). It does so after its re-read, which
            // skips an answer whose stream made calls, even ones dropped here.
            for choice in &mut self.choices {
                if choice.finish_reason == Some("length")
                    && choice.calls.last().is_some_and(|c| !is_valid(&c.arguments))
                {
                    choice.calls.pop();
                }
            }
        }
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
        let order = self.ordered_choices();
        let surface = self.plan.surface;
        let rendered = self.rendered_logprobs(&order);
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
                let choices = completion_choices(&order, &rendered);
                chunks::write_completion(out, &env, &choices, &self.usage);
            }
        }
    }

    fn ordered_choices(&self) -> Vec<&Choice> {
        let mut order: Vec<&Choice> = self.choices.iter().collect();
        order.sort_by_key(|c| c.index);
        order
    }

    fn rendered_logprobs(&self, order: &[&Choice]) -> Vec<Option<Vec<u8>>> {
        order
            .iter()
            .map(|c| logprobs::render(self.plan.surface, &c.logprobs))
            .collect()
    }

    /// The usage so far (a batch sums its parts').
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// A finished unary completions part: its choices in index order, with their
    /// rendered logprobs, for the batch to merge.
    pub fn unary_completion_choices(&self, merge: &mut Vec<OwnedCompletionChoice>) {
        let order = self.ordered_choices();
        let rendered = self.rendered_logprobs(&order);
        for (c, lp) in order.into_iter().zip(rendered) {
            merge.push(OwnedCompletionChoice {
                index: c.index,
                text: c.content.clone(),
                logprobs: lp,
                finish_reason: c.finish_reason,
            });
        }
    }

    fn slot(&mut self, index: u32) -> usize {
        let index = index + self.plan.batch_part.unwrap_or(0);
        if let Some(slot) = self.choices.iter().position(|c| c.index == index) {
            return slot;
        }
        let parsers = self.plan.parsers.as_ref();
        // Dynamo jails the content of a chat answer with tools in play (its streaming,
        // so only in its dialect); a forced tool choice holds the whole answer instead
        // (see `emit`).
        let jail = parsers
            .filter(|spec| spec.reference_streaming && self.plan.surface == Surface::Chat)
            .and_then(|spec| {
                let family = spec.tool_call?;
                let markers = family.build(spec.tools.clone()).start_markers();
                let rules = JailRules::for_family(family.name(), markers);
                (!self.plan.tool_choice.forces_calls() || rules.jails_forced_choice_as_auto())
                    .then(|| ToolJail::new(rules, spec))
            });
        // Dynamo reads the answer to a forced tool choice as guided JSON, with a
        // tool-call parser too (its streaming, so only in its dialect there).
        let forced_guided = self.plan.surface == Surface::Chat
            && self.plan.tool_choice.forces_calls()
            && jail.is_none()
            && parsers.map_or(true, |spec| {
                spec.tool_call.is_none() || spec.reference_streaming
            });
        let guided = forced_guided.then(|| {
            GuidedCalls::new(match &self.plan.tool_choice {
                ToolChoiceMode::Named(name) => Some(name.clone()),
                _ => None,
            })
        });
        let parser = parsers.map(|spec| {
            let parser = ChatParser::from_spec(spec);
            if jail.is_some() || guided.is_some() {
                parser.without_tool_stage()
            } else {
                parser
            }
        });
        let jailed_as_auto = jail.is_some();
        self.choices.push(Choice {
            index,
            detok: Detokenizer::new(self.tokenizer.clone(), self.plan.decode.clone()),
            parser,
            jail,
            guided,
            calls_released: 0,
            first: true,
            finished: false,
            had_calls: false,
            held_calls: Vec::new(),
            guided_end_calls: None,
            guided_openers: "",
            next_named: None,
            rescan_lists: false,
            jailed: String::new(),
            answered_once: false,
            stepped: false,
            // Not under kimi_k2's jail, which runs a forced choice as auto
            // (live-checked: its leading `  ` is reasoning).
            leading_space: self.plan.tool_choice.forces_calls()
                && !jailed_as_auto
                && parsers.is_some_and(|s| s.reference_streaming && s.active_reasoning().is_some()),
            in_reasoning: false,
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
        let first_step = !std::mem::replace(&mut choice.stepped, true);
        self.delta.clear();
        let mut answered = false;
        match choice.parser.as_mut() {
            Some(parser) => {
                parser.feed(&self.piece, &mut self.delta);
                answered = parser.answered_last();
                if ending {
                    parser.finish(&mut self.delta);
                    answered |= parser.answered_last();
                }
            }
            None => self.delta.content.push_str(&self.piece),
        }
        if choice.leading_space {
            // Dynamo answers a forced tool choice with the whitespace-only frames
            // that open the output, reasoning or not (live-checked, deepseek_r1).
            // The first frame with other text decides: one that opens with JSON
            // (`{`/`[`) where the reasoning stage would read reasoning is the guided
            // answer, with no reasoning parsed in it at all (`</think>` stays text);
            // anything else, `<think>` too, goes on through the reasoning stage
            // (live-checked, deepseek_r1; qwen3's content-first parser still runs).
            let blank = self.piece.trim().is_empty();
            if blank && !self.delta.reasoning.is_empty() {
                let reasoning = std::mem::take(&mut self.delta.reasoning);
                self.delta.content.insert_str(0, &reasoning);
                answered = true;
            } else if !blank
                && !self.delta.reasoning.is_empty()
                && self.piece.trim_start().starts_with(['{', '['])
            {
                self.delta.reasoning.clear();
                self.delta.content.clone_from(&self.piece);
                choice.parser = None;
                answered = true;
            }
            choice.leading_space = blank;
        }
        if choice.jail.is_some() {
            return self.emit_after_guided(slot, tokens, finish, ending, answered, out);
        }
        // The step's answer text went into the forced tool choice's jail.
        let mut held = false;
        if let Some(guided) = choice.guided.as_mut() {
            // Held: answer text went in, or, with no tool parser, no text came at
            // all (a cut character; with one, that frame makes its role chunk);
            // text the reasoning parser took still makes its chunk.
            let tool_parser = self
                .plan
                .parsers
                .as_ref()
                .is_some_and(|s| s.tool_call.is_some());
            held = !self.delta.content.is_empty() || (self.piece.is_empty() && !tool_parser);
            match guided.feed(&self.delta.content) {
                Shape::Json => {
                    self.delta.content.clear();
                    if self.plan.stream {
                        guided.fragments(&mut self.delta.calls);
                    } else if ending {
                        guided.whole(&mut self.delta.calls);
                    }
                    let called = guided.released_any() || !self.delta.calls.is_empty();
                    // Once the guided value closed, Dynamo streams the rest of the
                    // answer as under the `auto` tool jail (live-checked, hermes):
                    // text as content, a block's calls at the end, numbered on.
                    let closed = (tool_parser && !ending)
                        .then(|| guided.closed_at())
                        .flatten();
                    if !self.plan.stream && closed.is_some() {
                        guided.whole(&mut self.delta.calls);
                    }
                    let called = called || !self.delta.calls.is_empty();
                    let list_without_calls = closed.filter(|&at| {
                        !called
                            && self.plan.stream
                            && self.plan.tool_choice == ToolChoiceMode::Required
                            && is_filled_list(&guided.text()[..at])
                    });
                    if let Some(at) = list_without_calls {
                        // A `required` list with no call in it (`[1]`, `[{"a":1}]`;
                        // `[]` is held to the end): Dynamo sends it as content once it
                        // closed, the rest streams as after guided calls, the finish
                        // reason in a chunk of its own (live-checked, every fuzzed
                        // family).
                        let json = guided.text()[..at].to_owned();
                        let tail = guided.tail(at).0.to_owned();
                        let spec = self.plan.parsers.as_ref().expect("a tool parser");
                        choice.jail = Some(family_jail(spec).holding_to_end());
                        choice.guided = None;
                        self.emit_list_as_content(slot, &json, out);
                        return self.emit_tail_after_guided(slot, tail, finish, ending, out);
                    }
                    if let Some(at) = closed.filter(|_| called) {
                        let (tail, taken) = guided.tail(at);
                        let tail = tail.to_owned();
                        let spec = self.plan.parsers.as_ref().expect("a tool parser");
                        choice.jail = Some(family_jail(spec).holding_to_end());
                        choice.calls_released = taken;
                        // hermes too (live-checked: `{A} x {B}`, `{A}{ ` are two calls).
                        // Under `required` the values the family's jail opens on: a
                        // list or call object (`default`), a list (pythonic), each
                        // streamed as guided calls, indexes going on (live-checked);
                        // mistral's and llama3_json's lists are rescanned from the jail.
                        let json_family =
                            |f: &str| matches!(f, "llama3_json" | "mistral" | "hermes" | "default");
                        let family = spec.tool_call.map_or("", |f| f.name());
                        choice.guided_openers = match &self.plan.tool_choice {
                            ToolChoiceMode::Named(_) if json_family(family) => "{",
                            ToolChoiceMode::Required if matches!(family, "hermes" | "default") => {
                                "{["
                            }
                            ToolChoiceMode::Required if family == "pythonic" => "[",
                            _ => "",
                        };
                        choice.rescan_lists = self.plan.tool_choice == ToolChoiceMode::Required
                            && spec
                                .tool_call
                                .is_some_and(|f| matches!(f.name(), "mistral" | "llama3_json"));
                        self.emit_guided(slot, tokens, None, false, answered, out);
                        return self.emit_tail_after_guided(slot, tail, finish, ending, out);
                    }
                    // Guided JSON that never closed (bare call objects; hermes,
                    // llama3_json, mistral, pythonic, qwen3_coder): Dynamo also parses
                    // the whole answer and sends the calls at indexes the guided JSON
                    // left free (`{"n": 2}<tool_call>{A}…` adds A at 0; qwen3_coder: `{A}`
                    // + two `<tool_call>` blocks adds the second block at 1) with the
                    // finish reason, `"content":""` once it parsed any (live-checked).
                    let spec = self.plan.parsers.as_ref();
                    let end_calls = (ending && called && guided.closed_at().is_none())
                        .then(|| {
                            free_index_calls(
                                spec,
                                guided,
                                &self.delta.calls,
                                self.plan.stream,
                                named_tool(&self.plan.tool_choice),
                            )
                        })
                        .flatten();
                    if called || !ending {
                        if !self.plan.stream {
                            if let Some(calls) = end_calls {
                                self.delta.calls.extend(calls);
                                join_fragments(&mut self.delta.calls);
                            }
                        } else {
                            choice.guided_end_calls = end_calls;
                        }
                        return self.emit_guided(slot, tokens, finish, ending, answered, out);
                    }
                    // JSON with no call in it (`[]`): Dynamo sends it as held text.
                    self.delta.content = guided.take_text();
                }
                // Not the JSON: the forced tool choice's jail below holds it.
                Shape::Text => self.delta.content = guided.take_text(),
                Shape::Undecided if ending => self.delta.content = guided.take_text(),
                Shape::Undecided => self.delta.content.clear(),
            }
        }
        // Dynamo jails the whole answer of a forced tool choice and decides at the end.
        let mut finish = finish;
        // Calls were parsed and all dropped: the last chunk says `"content":""`.
        let mut emptied = false;
        // The held answer went out as text at the end.
        let mut released_held = false;
        if self.plan.tool_choice.forces_calls() {
            choice.answered_once |= answered;
            held |= choice.answered_once;
            choice.jailed.push_str(&self.delta.content);
            self.delta.content.clear();
            self.delta.calls_at = 0;
            choice.held_calls.append(&mut self.delta.calls);
            if ending && choice.guided.is_some() {
                // The held answer is parsed whole by the tool-call parser, if any.
                if let Some(spec) = self.plan.parsers.as_ref().filter(|s| s.tool_call.is_some()) {
                    choice.held_calls = if spec.tool_call.is_some_and(|f| f.name() == "harmony") {
                        numbered_calls(harmony_held_calls(&choice.jailed))
                    } else {
                        held_answer_calls(spec, &choice.jailed)
                    };
                }
            }
            if ending {
                let parsed = !choice.held_calls.is_empty();
                let mut calls = std::mem::take(&mut choice.held_calls);
                if let ToolChoiceMode::Named(name) = &self.plan.tool_choice {
                    // The named tool's calls keep their order, indexed anew.
                    calls.retain(|c| c.name.as_deref() == Some(name.as_str()));
                    for (index, call) in calls.iter_mut().enumerate() {
                        call.index = index;
                    }
                }
                let jailed = std::mem::take(&mut choice.jailed);
                let named = match &self.plan.tool_choice {
                    ToolChoiceMode::Named(name) => Some(name.as_str()),
                    _ => None,
                };
                let reread = (!parsed && !self.plan.stream)
                    .then(|| reread_unary(&self.plan, &jailed, named))
                    .flatten();
                if !calls.is_empty() {
                    self.delta.calls = calls;
                } else if let Some((calls, content)) = reread {
                    self.delta.calls = calls;
                    self.delta.content = content;
                } else if !parsed && !jailed.is_empty() {
                    // Unary keeps it whole only when the model stopped by itself;
                    // otherwise only the text before a start marker, if any.
                    if self.plan.stream || finish == Some("stop") {
                        released_held = true;
                        self.delta.content = jailed;
                    } else if harmony_required(&self.plan) {
                        // Harmony under `required`: Dynamo's own start marker,
                        // `<|channel|>commentary`, keeps the answer whole for the
                        // unary re-reading in `finish` (live-checked: `x<|channel|>
                        // final<|message|>yo <|start|>assistant<|channel|>commentary
                        // to=functions.f <|` says `yo <|start|>…`); without it nothing
                        // is kept, a `<|channel|>analysis to=` block included.
                        if jailed.contains(HARMONY_REQUIRED_REREAD) {
                            self.delta.content = jailed;
                        }
                    } else if let Some(at) = first_start_marker(&self.plan, &jailed) {
                        self.delta.content = jailed[..at].to_owned();
                    }
                } else if !parsed && !first_step && self.delta.reasoning.is_empty() {
                    // Nothing to release after the first step went out: Dynamo sends
                    // no last chunk at all, so the finish reason is lost too, whether
                    // the reasoning parser passed reasoning or only dropped text
                    // (deepseek_r1's held `<thin`, harmony's header `l`) or a step
                    // decoded to nothing (a special token, a stop string's held
                    // start; pythonic, no reasoning parser). A last step
                    // with reasoning text keeps it on its chunk, and an output that
                    // ends in its first step gets it with the role (live-checked:
                    // `ok t` cut by a stop string; EOS alone; `<` cut by a stop).
                    finish = None;
                }
                emptied = parsed && self.delta.calls.is_empty();
            }
        }
        let finish = settle_step(
            choice,
            &mut self.delta,
            self.plan.parallel_tool_calls,
            tokens,
            answered,
            finish,
            ending,
        );
        if !self.plan.stream {
            return fold_unary(choice, &mut self.delta, &mut self.logprobs);
        }
        let index = choice.index;
        // Answer text the tool jail swallowed: Dynamo's chunk (and the role on it) is
        // gone; the role rides on the next chunk that goes out.
        let swallowed = (answered || held)
            && self.delta.is_empty()
            && finish.is_none()
            && self.plan.surface == Surface::Chat;
        if swallowed {
            return;
        }
        let role = std::mem::take(&mut choice.first);
        let running = self.plan.continuous_usage.then(|| Usage {
            reasoning_tokens: self.reasoning_tokens(),
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
        let text = if emptied {
            Some("")
        } else {
            non_empty(&self.delta.content)
        };
        let reasoning = non_empty(&self.delta.reasoning);
        if self.delta.calls.is_empty() {
            let mut role = role;
            if released_held && reasoning.is_some() && text.is_some() {
                // The step's reasoning goes out before the jail's release at the
                // end (live-checked: `\n` + `r` held by a stop string's start).
                let delta = ChatDelta {
                    reasoning,
                    role: std::mem::take(&mut role),
                    ..ChatDelta::default()
                };
                sse::begin_event(out);
                chunks::write_chat_chunk(out, &env, index, &delta, None, None, usage);
                sse::end_event(out);
            }
            let delta = ChatDelta {
                content: text,
                tool_calls: &[],
                role,
                reasoning: reasoning.filter(|_| !released_held || text.is_none()),
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
        // The role rides on the first chunk that goes out.
        let lead_role = role && (!before.is_empty() || reasoning.is_some());
        let lead = ChatDelta {
            content: non_empty(before),
            tool_calls: &[],
            role: lead_role,
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
            role: role && !lead_role,
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

    /// `emit` for a choice under the tool jail, where (llama3_json and hermes, named
    /// choice, after its guided object) an object that opens a piece while the jail holds
    /// nothing streams as another call to the named tool, as the guided object did,
    /// its index the next one (live-checked: `{A};{B} x {C}` is three calls with
    /// `;` and ` x ` as content; `{A}{"city":"b` streams the cut `B`; an object
    /// after `<|python_tag|>` is the jail's).
    fn emit_after_guided(
        &mut self,
        slot: usize,
        tokens: u32,
        finish: Option<&'static str>,
        ending: bool,
        answered: bool,
        out: &mut Vec<u8>,
    ) {
        let choice = &mut self.choices[slot];
        let jail_free = choice.jail.as_ref().is_some_and(|j| !j.is_holding());
        // The step that opens such an object sends nothing: its text goes out with
        // the next step's (live-checked: tokens `{"` + `ci` stream as `{"ci`).
        let mut opening = false;
        let openers = choice.guided_openers;
        // A value `required` openers started may be no JSON (`[f(…)]`); a named
        // choice's object and a list the jail held for the rescan are read as JSON.
        let required_opener = openers.contains('[');
        if choice.next_named.is_none()
            && jail_free
            && self
                .delta
                .content
                .trim_start()
                .starts_with(|c| openers.contains(c))
        {
            choice.next_named = Some(choice.calls_released);
            let name = match &self.plan.tool_choice {
                ToolChoiceMode::Named(name) => Some(name.clone()),
                _ => None,
            };
            choice.guided = Some(GuidedCalls::new(name));
            opening = true;
        }
        let (Some(base), Some(guided)) = (choice.next_named, choice.guided.as_mut()) else {
            return self.emit_jailed(slot, tokens, finish, ending, answered, out);
        };
        let brings_text = !self.delta.content.is_empty();
        // The output ended in a step that brings no text after an object opened.
        let ends_bare = ending && !brings_text;
        guided.feed(&std::mem::take(&mut self.delta.content));
        if required_opener && opens_no_json(guided.text()) {
            // Not JSON after all (a pythonic `[f(…)]`): Dynamo's guided scan reads
            // nothing of it and the jail holds it (live-checked, pythonic).
            self.delta.content = guided.take_text();
            choice.next_named = None;
            return self.emit_jailed(slot, tokens, finish, ending, answered, out);
        }
        // The opening step sends nothing even when the object closes in it: its
        // call and the text after it go with the next step's (live-checked: the
        // token `{}\n` then "```" stream the call, then "\n```" as one chunk).
        let closed = guided.closed_at().filter(|_| !opening || ending);
        let named_next = openers == "{";
        // A named choice's object left open at the end with no step of text after
        // the one that opened it: the step that opens Dynamo's jail is never
        // scanned, its end-of-output parse alone decides (seed 20261226 #2551: a
        // lone `{`, then EOS, goes out as text).
        let unread = ending && closed.is_none() && named_next && guided.one_step();
        // Nor does a step that brings no text (a stop string's held start) send the
        // opening step's (seed 20261229 #2694: `}{` + `"` + `name` held by the stop
        // `":{}}` streams `{"name`).
        let waits = (opening || !brings_text) && closed.is_none() && !ending;
        if unread {
            // Nothing read: the end parse below decides.
        } else if self.plan.stream && !waits {
            guided.fragments(&mut self.delta.calls);
        } else if ending || closed.is_some() {
            guided.whole(&mut self.delta.calls);
        }
        // A rescanned `[TOOL_CALLS]` list: at the end, the family's parse of it adds
        // its calls at the indexes the scan left free, as for guided JSON that never
        // closed (live-checked: `[TOOL_CALLS][{"name": 7}, {B}]` streams B at the
        // next index but one, the end adds B at the next).
        // A value rescanned under `required` that the output ends inside is held to
        // the end as a `[TOOL_CALLS]` list is (Dynamo's jail never saw it close;
        // live-checked: `[x` + `y` after a guided list goes out as written with the
        // finish reason). A named choice's next object that never closed is held
        // to the end too (it is no JSON, `{'tz': 'CET'}`, or cut): the family's
        // parse of all the text after it adds the named tool's calls at the next
        // indexes, numbered on from the object's own, one at its index going on
        // only with what it adds to the bytes streamed, and the finish chunk says
        // `"content":""` once it finds the tool's call (seed 20261226 #534: a
        // `<TOOLCALL>` list's second call; #20261223.1616, hermes: `{x}` +
        // `{"name":"get_weather","parameters":{'c': 1}}` + two blocks of that tool
        // adds the second at index 2; #20261218.3636: `{é<|python_tag|>{T};{W}`
        // cut by length adds no call).
        let held_end = ending
            && guided.closed_at().is_none()
            && (self.plan.tool_choice == ToolChoiceMode::Required || named_next);
        let named = named_tool(&self.plan.tool_choice);
        let spec = self.plan.parsers.as_ref();
        let mut end_calls = held_end
            .then(|| free_index_calls(spec, guided, &self.delta.calls, self.plan.stream, named))
            .flatten();
        for call in self
            .delta
            .calls
            .iter_mut()
            .chain(end_calls.iter_mut().flatten())
        {
            call.index += base;
        }
        if held_end && end_calls.is_none() && !guided.released_any() && self.delta.calls.is_empty()
        {
            // A rescanned value that let out no call and whose end parse finds
            // none: Dynamo's jail releases the held text as written with the
            // finish reason (live-checked, llama3_json: `[{A}]` + "```json\n"
            // + `{"city": …}\n```call` ends with that object and "```call").
            // A named choice's text whose calls are all other tools' says nothing.
            let dropped = named.is_some()
                && free_index_calls(spec, guided, &[], self.plan.stream, None).is_some();
            let text = guided.take_text();
            if !dropped {
                self.delta.content = text;
            }
        }
        if let Some(calls) = end_calls {
            if self.plan.stream {
                choice.guided_end_calls = Some(calls);
            } else {
                self.delta.calls.extend(calls);
                join_fragments(&mut self.delta.calls);
            }
        }
        let Some(at) = closed else {
            return self.emit_guided(slot, tokens, finish, ending, answered, out);
        };
        let (tail, taken) = guided.tail(at);
        let tail = tail.to_owned();
        if self.plan.stream && (opening || ends_bare) && ending && openers == "{" && tail.is_empty()
        {
            // An object the output's last frame opened and closed goes out as the
            // jail's end-of-output release does: after a bare finish chunk when a
            // usage chunk is to come, the call carrying the finish reason
            // (live-checked, hermes: `{A}}` + `x` + `{}` under a named choice).
            choice.next_named = None;
            choice.calls_released = base + 1;
            choice.guided_end_calls = Some(std::mem::take(&mut self.delta.calls));
            if self.plan.include_usage {
                self.write_bare_finish(slot, out);
            }
            return self.emit_guided(slot, tokens, finish, ending, answered, out);
        }
        let json = &guided.text()[..at];
        if required_opener
            && !guided.released_any()
            && self.delta.calls.is_empty()
            && is_filled_list(json)
        {
            // A list with no call in it (`[1]`) goes out as content once it closed,
            // as the first one does (live-checked, `default`).
            let json = json.to_owned();
            choice.next_named = None;
            if self.plan.stream {
                self.emit_list_as_content(slot, &json, out);
            } else {
                choice.content.push_str(&json);
            }
            return self.emit_tail_after_guided(slot, tail, finish, ending, out);
        }
        choice.next_named = None;
        // A named choice's object is one call; a `required` value takes its indexes.
        choice.calls_released = base + if openers == "{" { 1 } else { taken };
        self.emit_guided(slot, tokens, None, false, answered, out);
        self.emit_tail_after_guided(slot, tail, finish, ending, out)
    }

    /// A chunk that says only the finish reason `tool_calls`.
    fn write_bare_finish(&mut self, slot: usize, out: &mut Vec<u8>) {
        let choice = &mut self.choices[slot];
        let delta = ChatDelta {
            role: std::mem::take(&mut choice.first),
            ..ChatDelta::default()
        };
        let index = choice.index;
        let env = self.envelope();
        sse::begin_event(out);
        chunks::write_chat_chunk(out, &env, index, &delta, Some("tool_calls"), None, None);
        sse::end_event(out);
    }

    /// A closed guided list with no call in it, streamed as a content chunk of its own.
    fn emit_list_as_content(&mut self, slot: usize, json: &str, out: &mut Vec<u8>) {
        let choice = &mut self.choices[slot];
        let role = std::mem::take(&mut choice.first);
        let index = choice.index;
        let delta = ChatDelta {
            content: Some(json),
            tool_calls: &[],
            role,
            reasoning: None,
        };
        let env = self.envelope();
        sse::begin_event(out);
        chunks::write_chat_chunk(out, &env, index, &delta, None, None, None);
        sse::end_event(out);
    }

    /// The text after a closed guided value, as a step of its own under the jail.
    fn emit_tail_after_guided(
        &mut self,
        slot: usize,
        tail: String,
        finish: Option<&'static str>,
        ending: bool,
        out: &mut Vec<u8>,
    ) {
        self.logprobs.clear();
        self.delta.clear();
        self.delta.content = tail;
        self.emit_after_guided(slot, 0, finish, ending, false, out)
    }

    /// `emit` for a forced tool choice answered with guided JSON (no tool-call parser):
    /// each step's argument fragments go out as their own chunk with `"content":""`,
    /// and the finish reason follows in an empty chunk of its own.
    fn emit_guided(
        &mut self,
        slot: usize,
        tokens: u32,
        finish: Option<&'static str>,
        ending: bool,
        answered: bool,
        out: &mut Vec<u8>,
    ) {
        let choice = &mut self.choices[slot];
        let end_calls = choice.guided_end_calls.take();
        let finish = settle_step(
            choice,
            &mut self.delta,
            self.plan.parallel_tool_calls,
            tokens,
            answered,
            finish,
            ending,
        );
        if !self.plan.stream {
            return fold_unary(choice, &mut self.delta, &mut self.logprobs);
        }
        let index = choice.index;
        let named = match &self.plan.tool_choice {
            ToolChoiceMode::Named(name) => Some(name.as_str()),
            _ => None,
        };
        let held_to_end = choice
            .guided
            .as_ref()
            .and_then(|g| held_answer_end(self.plan.parsers.as_ref(), g, named));
        let says_empty = match held_to_end {
            Some(parsed) => parsed,
            None => choice.guided.as_ref().is_some_and(|g| g.is_one_bare_call()),
        };
        let reasoning = non_empty(&self.delta.reasoning);
        let has_calls = !self.delta.calls.is_empty();
        let mut role = if has_calls || reasoning.is_some() || finish.is_some() {
            std::mem::take(&mut choice.first)
        } else {
            false
        };
        let running = self.plan.continuous_usage.then(|| Usage {
            reasoning_tokens: self.reasoning_tokens(),
            ..self.usage
        });
        let usage = running.as_ref();
        let env = self.envelope();
        let rendered = logprobs::render(self.plan.surface, &self.logprobs);
        if has_calls || reasoning.is_some() {
            let delta = ChatDelta {
                content: has_calls.then_some(""),
                tool_calls: &self.delta.calls,
                role: std::mem::take(&mut role),
                reasoning,
            };
            sse::begin_event(out);
            chunks::write_chat_chunk(out, &env, index, &delta, None, rendered.as_deref(), usage);
            sse::end_event(out);
        }
        if finish.is_some() && ending && held_to_end.is_some() && self.plan.include_usage {
            // With a usage chunk to come, the answer the reference still held at
            // the end (guided JSON that never closed) is released after a bare
            // finish chunk, as the jail's end-of-output release is (live-checked,
            // llama3_json, mistral, `default`: `{A}`, `{A} hi`, `[TOOL_CALLS][A]`; hermes
            // and qwen3_coder: `{`, `{A}{B}`, `[{A}`), saying `tool_calls` even when the
            // output was cut by length.
            let delta = ChatDelta {
                role: std::mem::take(&mut role),
                ..ChatDelta::default()
            };
            let called = Some("tool_calls");
            sse::begin_event(out);
            chunks::write_chat_chunk(out, &env, index, &delta, called, None, usage);
            sse::end_event(out);
        }
        if finish.is_some() {
            let released = non_empty(&self.delta.content);
            let delta = ChatDelta {
                role,
                content: released.or((says_empty || end_calls.is_some()).then_some("")),
                tool_calls: end_calls.as_deref().unwrap_or_default(),
                ..ChatDelta::default()
            };
            sse::begin_event(out);
            chunks::write_chat_chunk(out, &env, index, &delta, finish, None, usage);
            sse::end_event(out);
        }
    }

    /// `emit` for a choice under Dynamo's tool-call jail: the content goes through
    /// the jail; what it releases goes out as the reference orders it — the parsed
    /// held text first, then text after the jail's end, then text that never
    /// entered it — each as its own chunk. While text is held, the piece's finish
    /// reason waits for the release at the end.
    fn emit_jailed(
        &mut self,
        slot: usize,
        tokens: u32,
        finish: Option<&'static str>,
        ending: bool,
        answered: bool,
        out: &mut Vec<u8>,
    ) {
        let choice = &mut self.choices[slot];
        let jail = choice.jail.as_mut().expect("a jailed choice");
        let mut released = Released::default();
        let harmony = jail.skips_emptied_frames();
        // Harmony text held whole here is released by `finish` below, as the end
        // of output releases it.
        let held_whole = harmony && ending && jail.hold_uncalled(&self.delta.content);
        if !held_whole && (ending || !self.delta.content.is_empty() || !harmony) {
            jail.feed(&self.delta.content, &mut released);
        }
        // mistral and llama3_json under `required`, after the guided list: JSON the
        // jail holds is read by Dynamo's guided scan again, its calls streaming on at
        // the next indexes (live-checked). A list the start guess jailed ends where it
        // closes, the text after it streams; mistral's `[TOOL_CALLS][…]` and bare
        // call objects are held to the end, what follows them is lost.
        let rescanned = (choice.rescan_lists && !ending)
            .then(|| jail.held_text())
            .flatten()
            .filter(|h| {
                // mistral's marker counts once a list follows it (live-checked:
                // `[TOOL_CALLS]f[ARGS]{…}` stays held, the text as written).
                let list = h.strip_prefix("[TOOL_CALLS]").map(str::trim_start);
                let opens = list.map_or(h.trim_start(), |l| l).starts_with(['[', '{'])
                    && list.map_or(true, |l| l.starts_with('['));
                // Dynamo's scan runs over all the jail holds, so a list after
                // other `[TOOL_CALLS]` pieces streams once it lets a call out.
                opens || (list.is_some() && GuidedCalls::scan_calls(h))
            })
            .map(|h| h.starts_with("[TOOL_CALLS]") || h.trim_start().starts_with('{'))
            .map(|held_to_end| (held_to_end, jail.take_held()));
        let held = jail.is_holding();
        let forced = self.plan.tool_choice.forces_calls() && !jail.jails_forced_choice_as_auto();
        // The output ended with text held: the reference releases it after the piece.
        let finalized = if ending { jail.finish() } else { None };
        count_reasoning(choice, &self.delta, tokens, answered);
        let parallel = self.plan.parallel_tool_calls;
        let mut parts: Vec<JailedPart> = Vec::with_capacity(4);
        let named = match &self.plan.tool_choice {
            ToolChoiceMode::Named(name) => Some(name.as_str()),
            _ => None,
        };
        let finalized = finalized.map(|parsed| only_named(parsed, named, forced));
        let calls_before = choice.calls_released > 0;
        if harmony && !released.passed.is_empty() && !released.parsed.is_empty() {
            // Harmony: text a held marker prefix lets out before a call's envelope
            // goes before the call (the reference's jail opens on the envelope's
            // header a frame earlier; live-checked: `x<` then a call says `x`, `<`,
            // the call; seed 20261212 #274).
            parts.push(JailedPart::text(std::mem::take(&mut released.passed), None));
        }
        for parsed in std::mem::take(&mut released.parsed) {
            parts.push(JailedPart::parsed(
                only_named(parsed, named, forced),
                finish,
                parallel,
                &mut choice.calls_released,
            ));
        }
        if !released.trailing.is_empty() {
            parts.push(JailedPart::text(
                std::mem::take(&mut released.trailing),
                finish,
            ));
        }
        let reasoning = std::mem::take(&mut self.delta.reasoning);
        let passed = std::mem::take(&mut released.passed);
        // The piece's own chunk: text that passed, its reasoning, or (nothing held,
        // nothing released) the bare finish reason.
        // Harmony: calls the last frame released leave the finish reason its own chunk.
        let finish_alone = harmony && ending && parts.iter().all(|p| p.finish.is_none());
        if !passed.is_empty()
            || !reasoning.is_empty()
            || (parts.is_empty() && !held)
            || (finish_alone && finalized.is_none())
        {
            // Text that passed beside a marker prefix the end releases (a stop
            // string cut the output there: `<` + `<｜t`) leaves the finish reason to
            // that release (live-checked, deepseek_v3_1).
            let finish = if finalized.is_some() && !passed.is_empty() {
                None
            } else {
                finish
            };
            parts.push(JailedPart {
                content: (!passed.is_empty()).then_some(passed),
                calls: Vec::new(),
                finish,
                reasoning: (!reasoning.is_empty()).then_some(reasoning),
                released: false,
            });
        }
        if finish.is_some() {
            terminal_whitespace_dropped(&mut parts, calls_before, finish, held);
            // Calls the output's last frame released carry its finish reason when
            // nothing else does (seed 20261210 #4222: a stop string cutting `>x`
            // of `</tool_call>x` sends the call with `tool_calls`).
            if !held && finalized.is_none() && parts.iter().all(|p| p.finish.is_none()) {
                if let Some(last) = parts.last_mut() {
                    last.finish = finish;
                }
            }
        }
        if let Some(parsed) = finalized {
            // With a usage chunk to come, the reference's last frame passes the
            // jail as a bare finish chunk before the release, once calls went out
            // (`tool_calls` even when the output was cut by length; live-checked).
            if self.plan.include_usage && choice.calls_released > 0 {
                parts.push(JailedPart {
                    finish: Some("tool_calls"),
                    ..JailedPart::text(String::new(), None)
                });
            }
            // The release at the end of output carries the finish reason, calls or not.
            parts.push(JailedPart {
                finish,
                ..JailedPart::parsed(parsed, finish, parallel, &mut choice.calls_released)
            });
        }
        if harmony {
            // Harmony: a release of nothing that text after it in the frame follows
            // makes no chunk, that text carries the finish reason (seed 20261242
            // #1550: a held `<|call|>` ended by a stop string's last frame `a`
            // says `a` alone).
            if let Some(last) = parts.iter().rposition(|p| p.finish.is_some()) {
                parts = parts
                    .into_iter()
                    .enumerate()
                    .filter(|(at, part)| *at >= last || !part.releases_nothing())
                    .map(|(_, part)| part)
                    .collect();
            }
        }
        if ending {
            choice.finished = true;
        }
        let mut logprobs = std::mem::take(&mut self.logprobs);
        for part in parts {
            let choice = &mut self.choices[slot];
            choice.had_calls |= !part.calls.is_empty();
            // Dynamo rewrites `stop` on any chunk of a choice that had calls.
            let finish = part.finish.map(|f| match f {
                "stop" if choice.had_calls => "tool_calls",
                other => other,
            });
            if ending && finish.is_some() {
                choice.finish_reason = finish;
            }
            if !self.plan.stream {
                choice.logprobs.append(&mut logprobs);
                if let Some(text) = &part.content {
                    choice.content.push_str(text);
                }
                if let Some(text) = &part.reasoning {
                    choice.reasoning.push_str(text);
                }
                choice
                    .calls
                    .extend(part.calls.into_iter().map(|c| WholeCall {
                        id: c.id.unwrap_or_default(),
                        name: c.name.unwrap_or_default(),
                        arguments: c.arguments,
                    }));
                continue;
            }
            let index = choice.index;
            // Answer text the jail swallowed, or a release of nothing (a block that
            // closed without a call) once the role went out, makes no chunk: the
            // role rides on the next. A release of nothing that would be the
            // choice's first chunk says `"content":""` with the role
            // (live-checked: `<TOOLCALL></TOOLCALL>`, mistral's ` [/TOOL_CALLS]`).
            let first_release = part.released && choice.first;
            if (answered || part.released)
                && !first_release
                && part.says_nothing()
                && finish.is_none()
            {
                continue;
            }
            let role = std::mem::take(&mut choice.first);
            let running = self.plan.continuous_usage.then(|| Usage {
                reasoning_tokens: self.reasoning_tokens(),
                ..self.usage
            });
            let rendered = logprobs::render(self.plan.surface, &logprobs);
            logprobs.clear();
            let env = self.envelope();
            // A release always says `"content"`, empty or not; other parts only
            // when they have text.
            let content = if part.released {
                part.content.as_deref()
            } else {
                part.content.as_deref().and_then(non_empty)
            };
            let delta = ChatDelta {
                content,
                tool_calls: &part.calls,
                role,
                reasoning: part.reasoning.as_deref(),
            };
            if delta.is_empty() && finish.is_none() && rendered.is_none() {
                continue;
            }
            sse::begin_event(out);
            chunks::write_chat_chunk(
                out,
                &env,
                index,
                &delta,
                finish,
                rendered.as_deref(),
                running.as_ref(),
            );
            sse::end_event(out);
        }
        if let Some((held_to_end, list)) = rescanned {
            let choice = &mut self.choices[slot];
            choice.next_named = Some(choice.calls_released);
            choice.guided = Some(if held_to_end {
                GuidedCalls::open_ended()
            } else {
                GuidedCalls::new(None)
            });
            self.delta.clear();
            self.delta.content = list;
            self.emit_after_guided(slot, 0, None, false, false, out);
        }
    }
}

/// The last frame's parts, as Dynamo's jail normalizes them: once a call went
/// out (before, or earlier in the frame), a part with only whitespace content is
/// dropped (live-checked, mistral: ` ` left by a stop string after the calls
/// makes a bare finish chunk, and no trailing space in the unary answer); the
/// finish reason then goes on the last part left, or on a bare chunk of its own.
/// With text still `held`, none of them keeps it: the release at the end of
/// output carries it (live-checked, `default`: ` <` cut by a stop string sends
/// ` ` without a finish reason, then `<` with it).
fn terminal_whitespace_dropped(
    parts: &mut Vec<JailedPart>,
    calls_before: bool,
    finish: Option<&'static str>,
    held: bool,
) {
    let mut saw_calls = calls_before;
    let before = parts.len();
    parts.retain(|part| {
        saw_calls |= !part.calls.is_empty();
        !part.calls.is_empty()
            || !saw_calls
            || part.reasoning.is_some()
            || !part.content.as_deref().is_some_and(|c| c.trim().is_empty())
    });
    if parts.len() == before && !held {
        return;
    }
    for part in parts.iter_mut() {
        part.finish = None;
    }
    if held {
        return;
    }
    match parts.last_mut() {
        Some(last) => last.finish = finish,
        None => parts.push(JailedPart {
            content: None,
            calls: Vec::new(),
            finish,
            reasoning: None,
            released: false,
        }),
    }
}

/// A release under a forced named tool choice (kimi_k2 jails it as auto): calls
/// to other tools are dropped (live-checked: a release of only those makes no
/// chunk, and the finish reason stays `stop`).
/// Under a forced choice Dynamo's jail reads the text after the guided JSON in its
/// guided mode, whose release of calls says no text beside them, nor does one whose
/// calls the name all dropped (live-checked, pythonic: `>[f(a=1)]` after a named
/// object releases f with `"content":""`, the `>` lost).
fn only_named(mut parsed: Parsed, named: Option<&str>, forced: bool) -> Parsed {
    if forced && !parsed.calls.is_empty() {
        parsed.content.clear();
    }
    if let Some(name) = named {
        parsed.calls.retain(|call| call.name == name);
    }
    parsed
}

/// The jail of the request's own tool-call family, to read an answer whole as the
/// reference does.
fn family_jail(spec: &ChatParserSpec) -> ToolJail {
    let (name, markers) = spec.tool_call.map_or(("", &[][..]), |f| {
        (f.name(), f.build(spec.tools.clone()).start_markers())
    });
    ToolJail::new(JailRules::for_family(name, markers), spec)
}

/// The calls in a forced tool choice's held answer, as Dynamo reads it at the end
/// (not harmony): `default`, pythonic and mistral by Dynamo's whole parses; with
/// qwen3_coder and deepseek_v3_1, JSON call objects ending the answer (read from
/// its first `{`/`[`) win over the family's calls; else the family's parse, where
/// (hermes, qwen3_coder) a `<tool_call>` block the output ends inside is no call,
/// and deepseek_v3_1's section counts only closed.
fn held_answer_calls(spec: &ChatParserSpec, answer: &str) -> Vec<CallDelta> {
    let whole = match spec.tool_call.map(|f| f.name()) {
        // Dynamo's bare JSON reading, else its `default` parse, both without the
        // end of output's repair (live-checked: `<|python_tag|>{A}\n{B}` is the
        // call A; `{"name":"f","parameters":"` stays text).
        Some("default") => Some(default_whole::forced_calls(answer)),
        // Its pythonic parse: `days=-2` is no literal, a list that is not valid
        // Python (`[f(a='x')][g()]`) gives no call. Without a call, its basic JSON
        // parse, JSON cut short not closed (live-checked: `k{A}` and `k [{A},{B}]`
        // are calls, `k {A}\n{B}`, `k {A} tail` and `k [1] {A}` stay text).
        Some("pythonic") => Some(pythonic_held_calls(answer)),
        // Live-checked: `,{"name":"","arguments":{` and `[TOOL_CALLS]e[ARGS]{}`
        // stay text, `[TOOL_CALLS][{A}]```json…]` is no call (the text goes out
        // whole), `[TOOL_CALLS]f[ARGS]{…}[TOOL_CALLS][{A}, {B}]` is A and B.
        Some("mistral") => Some(mistral_held_calls(answer)),
        Some("llama3_json") => Some(llama3_held_calls(answer)),
        // Its hermes parse of the closed blocks, JSON not closed (live-checked:
        // several blocks are one JSON list, so one broken block leaves them all
        // text; a fenced object followed by text is no call). With no block closed,
        // its bare JSON reading: the text from the first `{`/`[` as written
        // (live-checked: `hi <tool_call>{A}` is A, `<tool_call>{"name":"f",
        // "arguments":{"a":1` stays text).
        // Blocks that give no call leave the bare reading too (seed 20261227 #1122:
        // `<tool_call>{A}` whose `"</tool_call>"` stands in a string is A; with text
        // after the JSON, or a `</tool_call>` after it, it stays text).
        Some("hermes") => Some({
            let blocks = answer.contains("</tool_call>").then(|| {
                hermes_whole::parse_whole(
                    closed_blocks(answer, "<tool_call>", "</tool_call>"),
                    Repair::Never,
                )
                .calls
            });
            match blocks {
                Some(calls) if !calls.is_empty() => calls,
                // A marker in that text makes it no JSON (live-checked: `ok [
                // <tool_call>{A}` streams as text).
                _ => answer
                    .find(['{', '['])
                    .filter(|&at| !answer[at..].contains("<tool_call>"))
                    .map_or_else(Vec::new, |at| {
                        hermes_whole::parse_whole(&answer[at..], Repair::Never).calls
                    }),
            }
        }),
        _ => None,
    };
    if let Some(calls) = whole {
        return numbered_calls(calls);
    }
    let qwen3_coder = spec.tool_call.is_some_and(|f| f.name() == "qwen3_coder");
    let dsv31 = spec.tool_call.is_some_and(|f| f.name() == "deepseek_v3_1");
    if qwen3_coder || dsv31 {
        if let Some(calls) = trailing_json_calls(answer) {
            return calls;
        }
    }
    if dsv31 {
        // Its parse as the jail runs it mid-stream: a section counts closed only.
        return numbered_calls(dsv31_whole::parse_whole(answer, false).calls);
    }
    let tools = ChatParserSpec {
        reasoning: None,
        stream_arguments: false,
        ..spec.clone()
    };
    let whole_answer = answer;
    let answer = match spec.tool_call.map(|f| f.name()) {
        Some("qwen3_coder") => closed_blocks(answer, "<tool_call>", "</tool_call>"),
        _ => answer,
    };
    let (message, _) = parse_with(answer, &tools);
    if qwen3_coder && message.tool_calls.is_empty() {
        // Its own reading of the held answer, blocks closed as above (live-checked,
        // streaming: `<function=</function></tool_call>` is the call `</function`).
        if let Some(parsed) = family_jail(spec).recovered(whole_answer, false) {
            return numbered_calls(parsed.calls.into_iter().map(|c| (c.name, c.arguments)));
        }
    }
    message
        .tool_calls
        .into_iter()
        .map(|call| CallDelta {
            index: call.index,
            id: Some(call.id),
            arguments: match qwen3_coder.then(|| last_value_per_key(&call.arguments)) {
                Some(Some(unique)) => unique,
                _ => call.arguments,
            },
            name: Some(call.name),
        })
        .collect()
}

const DSV31_SECTION: &str = "<｜tool▁calls▁begin｜>";

/// The held answer up to its last block end: a block the output ends inside is
/// no call in a forced choice's answer (live-checked: hermes `hi <tool_call>
/// {"name":"get_ti` streams as text; qwen3_coder drops a `<tool_call><function=f>`
/// left open after a whole block, where its jail reads a call). With no block
/// closed, everything from the first opener on is text (live-checked, qwen3_coder:
/// `<tool_call><function=f>…<tool_call>` is no call).
fn closed_blocks<'a>(answer: &'a str, open: &str, close: &str) -> &'a str {
    match (answer.rfind(open), answer.rfind(close)) {
        (Some(at), Some(end)) if at > end => &answer[..end + close.len()],
        (Some(_), None) => answer.find(open).map_or(answer, |at| &answer[..at]),
        _ => answer,
    }
}

/// A JSON call object, or an array of them, that ends a forced choice's answer
/// after other text is its calls, their arguments as written (live-checked,
/// qwen3_coder: `hi ;[{"name":"get_time","arguments":{"tz": ""}}]` is the call
/// with `{"tz": ""}`, also after a whole `<tool_call>` block; `parameters` count
/// too; JSON followed by text is not read, nor JSON after an earlier `{`/`[`).
fn trailing_json_calls(answer: &str) -> Option<Vec<CallDelta>> {
    let text = answer.trim_end();
    if !text.ends_with(['}', ']']) {
        return None;
    }
    type CallObject = std::collections::BTreeMap<String, Box<RawValue>>;
    let call = |object: &CallObject| {
        let name: String = serde_json::from_str(object.get("name")?.get()).ok()?;
        let arguments = object
            .get("parameters")
            .or_else(|| object.get("arguments"))?;
        Some((name, arguments.get().to_owned()))
    };
    // Read from the first `{` or `[` only (live-checked: `[{A}]x<tool_call>y{B}`
    // is text, `<tool_call>…</paramet{B}` is B).
    text.find(['{', '[']).and_then(|at| {
        let json = &text[at..];
        let objects: Vec<CallObject> = match serde_json::from_str(json) {
            Ok(objects) => objects,
            Err(_) => vec![serde_json::from_str(json).ok()?],
        };
        let calls: Option<Vec<(String, String)>> = objects.iter().map(call).collect();
        let calls = calls.filter(|calls| !calls.is_empty())?;
        Some(numbered_calls(calls))
    })
}

/// The unary answer to a forced tool choice whose held text streamed out without
/// calls is read again whole, as Dynamo's unary aggregator does (live-checked):
/// hermes by its whole parse (`hi <tool_call>{"name":"get_ti` is the call `get_ti`
/// with `{}` and the content `hi`), deepseek_v3_1 by its parser, an unclosed
/// section too, the content the text before the section as written (`hi `);
/// mistral by its whole objects after the marker; `default` by its end-of-output
/// parse; each but hermes only once a start marker stands outside a quoted span
/// ([`reread_start_markers`]). A named choice keeps the text when no call to its
/// tool is read.
fn reread_unary(
    plan: &ResponsePlan,
    answer: &str,
    named: Option<&str>,
) -> Option<(Vec<CallDelta>, String)> {
    let spec = plan.parsers.as_ref()?;
    let family = spec.tool_call?.name();
    let starts = reread_start_markers(family);
    if !starts.is_empty()
        && starts
            .iter()
            .all(|m| unquoted_marker_at(answer, m).is_none())
    {
        return None;
    }
    let (calls, content): (Vec<(String, String)>, String) = match family {
        // Only an answer with a `<tool_call>` block: bare JSON cut short stays text
        // (live-checked: `{"name":"get_ti` under `required`).
        "hermes" if answer.contains("<tool_call>") && !answer.contains("</tool_call>") => {
            let parse = hermes_whole::parse_closed_whole(answer);
            (!parse.calls.is_empty()).then_some((parse.calls, parse.content))?
        }
        "hermes" => reread_hermes(answer)?,
        // mistral by its whole objects after the first marker, cut JSON not
        // closed (live-checked: a named choice's `[TOOL_CALLS][{A}]```json…]`,
        // text in the stream, is the call A; `,{"name":"","arguments":{` stays text).
        // A `[TOOL_CALLS]…[/TOOL_CALLS]` pair without a call keeps the text
        // (live-checked: `[TOOL_CALLS][{A}][TOOL_CALLS]f[ARGS]{}[/TOOL_CALLS]`).
        "mistral" if basic_whole::paired_as_written(answer).is_some() => return None,
        // With an end marker anywhere, by its end-of-output parse: the list after
        // the marker whole or nothing (live-checked, seed 20261238 #3336:
        // `[/TOOL_CALLS][TOOL_CALLS][{A}, {'city': ''}]` stays text).
        "mistral" if answer.contains("[/TOOL_CALLS]") => basic_whole::parse_mistral(answer, true),
        "mistral" => {
            let parse = basic_whole::parse_whole_objects(answer, "[TOOL_CALLS]", false);
            (parse.calls, parse.content.unwrap_or_default())
        }
        // `default` by its end-of-output parse (live-checked:
        // `x <|python_tag|>{"name":"f","arguments":{"a":"b`, text in the stream, is
        // f with `{"a":"b"}` and the content `x`).
        "default" => {
            let parse = default_whole::parse_whole(answer, Reading::End);
            (parse.calls, parse.content)
        }
        "qwen3_coder" => {
            // Its own reading as at the end of output when the jail's finds no call
            // (live-checked: `<function=g><tool_call>` streams as text, is `g` here),
            // without the request's tools: values stay strings (live-checked:
            // `<parameter=days>\n3\n` is `"3"`, `false` is `"false"`).
            let untyped = ChatParserSpec {
                tools: Arc::default(),
                ..spec.clone()
            };
            let jail = family_jail(&untyped);
            let parsed = jail
                .reread(answer)
                .filter(|p| !p.calls.is_empty())
                .or_else(|| jail.recovered(answer, true))?;
            let calls = parsed.calls.into_iter();
            (
                calls.map(|c| (c.name, c.arguments)).collect(),
                parsed.content,
            )
        }
        "deepseek_v3_1" => {
            // Its parser reads the answer trimmed (live-checked, seed 20261217
            // #2963: `\n\n` before the section says no content).
            let trimmed = answer.trim();
            let before = trimmed
                .find(DSV31_SECTION)
                .or_else(|| trimmed.find(dsv31_whole::BARE_CALL))
                .map_or(trimmed, |at| &trimmed[..at]);
            (
                dsv31_whole::parse_whole(answer, true).calls,
                before.to_owned(),
            )
        }
        _ => return None,
    };
    let calls = numbered_calls(
        calls
            .into_iter()
            .filter(|(name, _)| named.map_or(true, |n| n == name)),
    );
    (!calls.is_empty()).then_some((calls, content))
}

/// The start markers of which one must stand outside a quoted span before Dynamo's
/// unary aggregator reads an answer again (its `first_unquoted_native_tool_call_marker`;
/// live-checked per family, each a case that stays text: mistral
/// `` `\t[TOOL_CALLS][{A}]```json…``` `` (seed 20261226 #2810), `default` a bare
/// `{"name":"f","arguments":"`, qwen3_coder `` `<function=get_weather>…</function>` ``,
/// deepseek_v3_1 a quoted section). Hermes reads bare JSON first, so has none here.
fn reread_start_markers(family: &str) -> &'static [&'static str] {
    match family {
        "mistral" => &["[TOOL_CALLS]"],
        "default" => &default_whole::STARTS,
        "qwen3_coder" => &["<tool_call>", "<function="],
        "deepseek_v3_1" => &[DSV31_SECTION],
        _ => &[],
    }
}

/// Where `marker` first stands in `text` outside a quoted span, as Dynamo's unary
/// aggregator looks for a native marker before it reads a forced choice's
/// answer again (live-checked: `"<TOOLCALL>{…` stays text). A `"`, `'` or `` ` ``
/// opens a span only when the same quote, unescaped, comes later; a `'` after
/// a letter or digit, or before one with no `'` later, is an apostrophe, and
/// one between two letters or digits never ends a span.
fn unquoted_marker_at(text: &str, marker: &str) -> Option<usize> {
    const QUOTES: [char; 3] = ['"', '\'', '`'];
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let alnum = |i: Option<usize>| {
        i.and_then(|i| chars.get(i))
            .is_some_and(|(_, c)| c.is_alphanumeric())
    };
    let internal = |i: usize| alnum(i.checked_sub(1)) && alnum(Some(i + 1));
    // later[i][q]: an unescaped QUOTES[q] stands at i or after.
    let mut later = vec![[false; 3]; chars.len() + 2];
    for i in (0..chars.len()).rev() {
        let c = chars[i].1;
        later[i] = if c == '\\' {
            later[i + 2]
        } else {
            let mut next = later[i + 1];
            if let Some(q) = QUOTES.iter().position(|&q| q == c) {
                next[q] |= !(c == '\'' && internal(i));
            }
            next
        };
    }
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, &(offset, c)) in chars.iter().enumerate() {
        if let Some(open) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == open && !(open == '\'' && internal(i)) {
                quote = None;
            }
            continue;
        }
        let apostrophe =
            c == '\'' && (alnum(i.checked_sub(1)) || (alnum(Some(i + 1)) && !later[i + 1][1]));
        if let Some(q) = QUOTES.iter().position(|&q| q == c) {
            if !apostrophe && later[i + 1][q] {
                quote = Some(c);
                continue;
            }
        }
        if text[offset..].starts_with(marker) {
            return Some(offset);
        }
    }
    None
}

/// Dynamo's unary aggregator's hermes parse of an answer the stream let out
/// without calls: its calls and content, if any. JSON in `<tool_call>` blocks that
/// does not parse is read again closed, one block or several as their list
/// (live-checked: `[{A}, {"tz": "` gives `"]"`); bare JSON is not (`{"name":"get_ti`
/// under `required` stays text).
fn reread_hermes(answer: &str) -> Option<(Vec<(String, String)>, String)> {
    let repair = if answer.contains("<tool_call>") {
        Repair::Always
    } else {
        Repair::Never
    };
    let parse = hermes_whole::parse_whole(answer, repair);
    (!parse.calls.is_empty()).then_some((parse.calls, parse.content))
}

/// The end parse of a guided answer that never closed, as the family reads it
/// (hermes: JSON as written, an object the output leaves open is no call;
/// llama3_json and mistral: their basic JSON parse, cut JSON not closed;
/// qwen3_coder, pythonic and harmony: their held answer's parse; all live-checked): its
/// calls at the indexes the guided JSON left free (streamed: not sent yet; unary:
/// not among `whole`), `None` when it parsed none or the family has no such parse.
fn free_index_calls(
    spec: Option<&ChatParserSpec>,
    guided: &GuidedCalls,
    whole: &[CallDelta],
    stream: bool,
    named: Option<&str>,
) -> Option<Vec<CallDelta>> {
    let text = guided.text();
    let mut calls = match spec.and_then(|s| s.tool_call).map(|f| f.name()) {
        Some("llama3_json") => {
            numbered_calls(basic_whole::parse_whole(text, "<|python_tag|>", false).calls)
        }
        Some("mistral") => numbered_calls(mistral_held_calls(text)),
        Some("pythonic") => numbered_calls(pythonic_held_calls(text)),
        // deepseek_v3_1 too (seed 20261208 #1932: a closed section after guided
        // elements gives its calls at indexes 0 and 1, the guided call took 3), and
        // hermes: its closed blocks only (live-checked: `{"city":"x"} <tool_call>{A}`
        // under `required` adds no call), else the bare reading of the whole text,
        // which an open block leaves no JSON (seed 20261234 #526: `{A}` +
        // `<tool_call>{B` cut there ends with a bare finish chunk).
        Some("hermes" | "qwen3_coder" | "deepseek_v3_1") => held_answer_calls(spec?, text),
        // Live-checked: a guided `{A,}` cut by a call block in the final body, then a
        // commentary call `g`: `g` at 1 with the finish reason.
        Some("harmony") => numbered_calls(harmony_held_calls(text)),
        // Live-checked: `{A}<TOOLCALL>[{B},{C}]</TOOLCALL>` streams A, then adds C.
        Some("default") => numbered_calls(default_whole::forced_calls(text)),
        _ => return None,
    };
    // A named choice counts only its tool's calls (live-checked, llama3_json:
    // `{<|python_tag|>{"name":"","arguments":{}}` ends with a bare finish chunk),
    // numbered anew: one at an index the guided JSON took is dropped (Dynamo's
    // jail compacts the indexes after its named filter; live-checked:
    // `{x<|python_tag|>{T};{W}` streams no second call).
    calls.retain(|c| named.map_or(true, |n| c.name.as_deref() == Some(n)));
    for (index, call) in calls.iter_mut().enumerate() {
        call.index = index;
    }
    if calls.is_empty() {
        return None;
    }
    // A call at an index the guided JSON already sent goes on with what its
    // arguments add to the bytes sent, if they start with them; else it is
    // dropped (live-checked, pythonic: `[get_time(tz='a\nb')][{"name":
    // "get_weather","arguments":{"` cut there goes on with `tz":"a\nb"}`).
    let sent = |index: usize| {
        if stream {
            guided.sent_arguments(index)
        } else {
            whole
                .iter()
                .find(|w| w.index == index)
                .map(|w| w.arguments.as_str())
        }
    };
    Some(
        calls
            .into_iter()
            .filter_map(|mut call| match sent(call.index) {
                None => Some(call),
                Some(sent) => {
                    let rest = call
                        .arguments
                        .strip_prefix(sent)
                        .filter(|r| !r.is_empty())?;
                    call.arguments = rest.to_owned();
                    call.id = None;
                    call.name = None;
                    Some(call)
                }
            })
            .collect(),
    )
}

/// Unary: a call's fragment found at the end joins the call at its index.
fn join_fragments(calls: &mut Vec<CallDelta>) {
    calls.sort_by_key(|c| c.index);
    let mut joined: Vec<CallDelta> = Vec::with_capacity(calls.len());
    for call in calls.drain(..) {
        match joined.last_mut() {
            Some(last) if last.index == call.index && call.id.is_none() => {
                last.arguments.push_str(&call.arguments);
            }
            _ => joined.push(call),
        }
    }
    *calls = joined;
}

/// A forced choice's guided answer that never closed (bare call objects, mistral's
/// `[TOOL_CALLS][…]`), held to the end of output: `Some` when the reference then
/// sends a bare finish chunk before a usage chunk (live-checked on every family
/// here), holding whether the last chunk says `"content":""`, which is whether
/// the family's end parse finds calls in it. llama3_json, mistral, pythonic: the
/// basic JSON parse (llama3_json: its bare JSON reading first), cut JSON not closed (`{A}` and `[TOOL_CALLS][A] }` do, `{A} hi`,
/// `{A}{B}` and `[TOOL_CALLS][A]]` — read to the last `]` — do not; pythonic's own
/// parse first); deepseek_v3_1: trailing call objects, then its own parse; hermes:
/// one whole bare call object; qwen3_coder: that, or calls its held answer's parse
/// finds (`{A} hi <tool_call>…</tool_call>`; cut JSON `{"name":"f","arguments":{}`
/// is none); `default`: its forced-choice parse. A named choice counts only its
/// tool's calls. `None` for other families, or once the guided value closed.
fn held_answer_end(
    spec: Option<&ChatParserSpec>,
    guided: &GuidedCalls,
    named: Option<&str>,
) -> Option<bool> {
    if guided.closed_at().is_some() {
        return None;
    }
    let text = guided.text();
    let calls = match spec.and_then(|s| s.tool_call).map(|f| f.name()) {
        Some("llama3_json") => llama3_held_calls(text),
        // Each piece after a marker read to its last bracket (`[TOOL_CALLS][A]]`
        // is no call), as its held answer is read.
        Some("mistral") => mistral_held_calls(text),
        // No call found: the finish chunk is bare too (a second `{}` with usage).
        Some("pythonic") => pythonic_held_calls(text),
        // Its bare JSON parse, then its own (live-checked: `{"name":"","arguments":{`
        // cut there, with usage to come, gets the bare finish chunk, then a
        // second one saying nothing).
        Some("deepseek_v3_1") => {
            let json = trailing_json_calls(text).is_some_and(|calls| !calls.is_empty());
            // A named choice counts only its tool's section calls (live-checked,
            // seed 20261217 #4093: a `launch_rocket` section in a named
            // `get_weather` object's text ends with a bare finish chunk).
            let section = dsv31_whole::parse_whole(text, false).calls;
            return Some(
                json || section
                    .iter()
                    .any(|(name, _)| named.map_or(true, |n| n == name)),
            );
        }
        Some("hermes") => return Some(guided.is_one_bare_call()),
        // A named choice counts only its tool's calls here too (seed 20261237 #3681:
        // a `get_time` block in a named `get_weather` object's string ends bare).
        Some("qwen3_coder") => {
            let parsed = spec.is_some_and(|s| {
                held_answer_calls(s, text)
                    .iter()
                    .any(|c| named.map_or(true, |n| c.name.as_deref() == Some(n)))
            });
            return Some(guided.is_one_bare_call() || parsed);
        }
        // Live-checked: `{"name":"","parameters":{` and a named `{` make the bare
        // finish chunk too.
        Some("default") => default_whole::forced_calls(text),
        // Live-checked: `{x}{"name":"f","parameters":{'a'}}…` under `required` and
        // a named `{<…` end with two bare finish chunks.
        Some("harmony") => harmony_held_calls(text),
        _ => return None,
    };
    // A named choice counts only its tool's calls (live-checked, `default` and
    // llama3_json: `{<|python_tag|>{"name":"","arguments":{}}` says no content).
    Some(
        calls
            .iter()
            .any(|(name, _)| named.map_or(true, |n| n == name)),
    )
}

/// The tool a named choice forces, if any.
fn named_tool(choice: &ToolChoiceMode) -> Option<&str> {
    match choice {
        ToolChoiceMode::Named(name) => Some(name.as_str()),
        _ => None,
    }
}

/// llama3_json's reading of a forced choice's held answer: bare JSON first
/// (markers or not; live-checked: `<|python_tag|></<tool_cfine{A}` is the call
/// A), then its basic JSON parse, JSON cut short not closed: every piece around
/// `<|python_tag|>`, the one before the first marker too (live-checked:
/// `[{A}]…<|python_tag|>x` is A; `<|python_tag|>{A}{B}` is the call A); without
/// the marker, the JSON from the first `{`/`[` (`x {A}\n{B}` stays text).
fn llama3_held_calls(answer: &str) -> Vec<(String, String)> {
    bare_json_or(answer, || {
        basic_whole::parse_whole(answer, "<|python_tag|>", false).calls
    })
}

/// Dynamo's jail reads a forced choice's held answer as bare JSON first (the
/// text from its first `{`/`[` read whole, JSON cut short not closed, no marker
/// read), and only without a call by the family's own parser.
fn bare_json_or(
    answer: &str,
    family: impl FnOnce() -> Vec<(String, String)>,
) -> Vec<(String, String)> {
    let bare = default_whole::bare_calls(answer);
    if bare.is_empty() {
        family()
    } else {
        bare
    }
}

/// harmony's reading of a forced choice's held answer (live-checked:
/// `x<|con[{A}]` and `<|call|>ok{A}` are the call A).
fn harmony_held_calls(answer: &str) -> Vec<(String, String)> {
    bare_json_or(answer, || harmony_whole::parse_whole(answer).calls)
}

/// pythonic's reading of a forced choice's held answer (live-checked:
/// `{A}[f(n=8)]<|python_start|>[g(…)]` is neither: a bare finish chunk).
fn pythonic_held_calls(answer: &str) -> Vec<(String, String)> {
    bare_json_or(answer, || {
        pythonic_whole::parse_whole(answer)
            .ok()
            .map(|p| p.calls)
            .unwrap_or_default()
    })
}

/// mistral's reading of a forced choice's held answer: with a `[TOOL_CALLS]…
/// [/TOOL_CALLS]` pair, only the pairs' insides; else each piece after a
/// `[TOOL_CALLS]` that opens with `[`/`{` read to its last `]`/`}`, arguments
/// as written; without the marker, its basic JSON parse, cut JSON not closed.
fn mistral_held_calls(answer: &str) -> Vec<(String, String)> {
    let calls = basic_whole::paired_as_written(answer)
        .or_else(|| basic_whole::marked_as_written(answer, "[TOOL_CALLS]"))
        .unwrap_or_else(|| basic_whole::parse_whole(answer, "[TOOL_CALLS]", false).calls);
    if calls.is_empty() && answer.contains("[/TOOL_CALLS]") && !answer.contains("[TOOL_CALLS]") {
        // A bare end marker: its parse strips it and reads the JSON again (seed
        // 20261227 #4847: `{A}[/TOOL_CALLS]` under `required` is A, so the last
        // chunk says `"content":""`).
        return basic_whole::parse_mistral(answer, false).0;
    }
    calls
}

/// A unary answer read again whole: its content and calls (new ids); a model
/// that stopped by itself then finished with `tool_calls`.
fn answer_with_calls(choice: &mut Choice, content: String, calls: Vec<(String, String)>) {
    choice.content = content;
    choice.calls = calls
        .into_iter()
        .map(|(name, arguments)| WholeCall {
            id: new_call_id(),
            name,
            arguments,
        })
        .collect();
    if choice.finish_reason == Some("stop") {
        choice.finish_reason = Some("tool_calls");
    }
}

/// The answer as the family's whole re-read gives it: its calls with the ids it
/// wrote, the finish reason `tool_calls` where the model stopped.
fn answer_with_parsed(choice: &mut Choice, parsed: Parsed) {
    choice.content = parsed.content;
    choice.calls = parsed
        .calls
        .into_iter()
        .map(|c| WholeCall {
            id: c.id,
            name: c.name,
            arguments: c.arguments,
        })
        .collect();
    if choice.finish_reason == Some("stop") {
        choice.finish_reason = Some("tool_calls");
    }
}

/// Cuts the answer at the family's first start marker outside a quoted span.
fn cut_at_first_marker(choice: &mut Choice, jail: &ToolJail) {
    let cut = jail
        .start_markers()
        .iter()
        .filter_map(|m| unquoted_marker_at(&choice.content, m))
        .min();
    if let Some(at) = cut {
        choice.content.truncate(at);
    }
}

/// Whether `text`, opening with `{` or `[`, goes on with what no JSON value can
/// (`[get_time(`, `{x`); `false` while it cannot tell yet.
fn opens_no_json(text: &str) -> bool {
    let mut chars = text.trim_start().chars();
    let opener = chars.next();
    match (opener, chars.find(|c| !c.is_whitespace())) {
        (Some('{'), Some(c)) => !matches!(c, '"' | '}'),
        (Some('['), Some(c)) => {
            !(matches!(c, '{' | '[' | '"' | ']' | '-' | 't' | 'f' | 'n') || c.is_ascii_digit())
        }
        _ => false,
    }
}

fn is_filled_list(json: &str) -> bool {
    serde_json::from_str::<Vec<&serde_json::value::RawValue>>(json)
        .is_ok_and(|items| !items.is_empty())
}

/// Whole-parse calls as deltas: numbered from 0 in order, each with a new id.
fn numbered_calls(calls: impl IntoIterator<Item = (String, String)>) -> Vec<CallDelta> {
    calls
        .into_iter()
        .enumerate()
        .map(|(index, (name, arguments))| CallDelta {
            index,
            id: Some(new_call_id()),
            name: Some(name),
            arguments,
        })
        .collect()
}

/// What makes the unary answer of a harmony `required` choice re-read whole:
/// Dynamo's harmony start marker, the other being this after `<|start|>assistant`.
const HARMONY_REQUIRED_REREAD: &str = "<|channel|>commentary";
const HARMONY_ASSISTANT_COMMENTARY: &str = "<|start|>assistant<|channel|>commentary";

/// Harmony's unary re-reading (reference mode) under `tool_choice: required`.
fn harmony_required(plan: &ResponsePlan) -> bool {
    plan.unary_harmony_cleanup && plan.tool_choice == ToolChoiceMode::Required
}

/// Where the first tool-call start marker of the request's family begins, as
/// Dynamo's unary cut finds it: pythonic's `<|python_start|>` is none there
/// (live-checked: `s<|python_start|>` cut by the length limit says nothing), nor
/// is a marker inside a quoted span (live-checked, mistral: `"ok [TOOL_CALLS]x"`
/// says nothing, `a "ok [TOOL_CALLS]x" more [TOOL_CALLS] b` says up to the second).
fn first_start_marker(plan: &ResponsePlan, text: &str) -> Option<usize> {
    let spec = plan.parsers.as_ref()?;
    if spec.tool_call.is_some_and(|f| f.name() == "pythonic") {
        return None;
    }
    // Dynamo's deepseek_v3_1 start marker is its section's only; a bare
    // `<｜tool▁call▁begin｜>` is not one (live-checked: a named choice's answer
    // cut by length with only that marker says nothing).
    if spec.tool_call.is_some_and(|f| f.name() == "deepseek_v3_1") {
        return unquoted_marker_at(text, DSV31_SECTION);
    }
    // Harmony's are Dynamo's two, a recipient or not (live-checked, named
    // choice: `ab <|channel|>commentary<|message|>yo` says `ab `; an `analysis
    // to=functions.f` block or `<|start|>assistant to=functions.f` says nothing).
    if spec.tool_call.is_some_and(|f| f.name() == "harmony") {
        return [HARMONY_ASSISTANT_COMMENTARY, HARMONY_REQUIRED_REREAD]
            .iter()
            .filter_map(|m| unquoted_marker_at(text, m))
            .min();
    }
    let markers = spec.tool_call?.build(spec.tools.clone()).start_markers();
    // qwen3_coder's jail also opens on a bare `<function=` (live-checked: a
    // `required` answer cut by length at `…Hellois<function=` says `…Hellois`).
    let bare = spec
        .tool_call
        .is_some_and(|f| f.name() == "qwen3_coder")
        .then(|| unquoted_marker_at(text, "<function="))
        .flatten();
    markers
        .iter()
        .filter_map(|m| unquoted_marker_at(text, m))
        .chain(bare)
        .min()
}

/// Fold one step's delta into a unary choice.
fn fold_unary(choice: &mut Choice, delta: &mut Delta, logprobs: &mut Vec<TokenLogprob>) {
    choice.logprobs.append(logprobs);
    choice.content.push_str(&delta.content);
    choice.reasoning.push_str(&delta.reasoning);
    choice
        .calls
        .extend(delta.calls.drain(..).map(|c| WholeCall {
            id: c.id.unwrap_or_default(),
            name: c.name.unwrap_or_default(),
            arguments: c.arguments,
        }));
}

/// One chunk the jail's release makes.
struct JailedPart {
    content: Option<String>,
    calls: Vec<CallDelta>,
    finish: Option<&'static str>,
    reasoning: Option<String>,
    /// The jail's release of held text.
    released: bool,
}

impl JailedPart {
    /// Held text, parsed: its calls (indexed on from the calls released before;
    /// the chunk has no finish reason), or the text as it was.
    fn parsed(
        parsed: Parsed,
        finish: Option<&'static str>,
        parallel: bool,
        released: &mut usize,
    ) -> Self {
        let Parsed { calls, content } = parsed;
        let first = *released;
        *released += calls.len();
        if calls.is_empty() {
            return Self {
                released: true,
                ..Self::text(content, finish)
            };
        }
        let calls = calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| (first + i, call))
            .filter(|&(index, _)| parallel || index == 0)
            .map(|(index, call)| CallDelta {
                index,
                id: Some(call.id),
                name: Some(call.name),
                arguments: call.arguments,
            })
            .collect();
        Self {
            content: Some(content),
            calls,
            finish: None,
            reasoning: None,
            released: true,
        }
    }

    fn text(content: String, finish: Option<&'static str>) -> Self {
        Self {
            content: Some(content),
            calls: Vec::new(),
            finish,
            reasoning: None,
            released: false,
        }
    }

    /// No text, reasoning or call.
    fn says_nothing(&self) -> bool {
        self.calls.is_empty()
            && self.reasoning.is_none()
            && self.content.as_deref().map_or(true, str::is_empty)
    }

    /// The jail's release of nothing.
    fn releases_nothing(&self) -> bool {
        self.released && self.says_nothing()
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

/// Dynamo's `reasoning_tokens`: a frame's tokens count when its reasoning stage
/// released reasoning, or released nothing while the last text it released was
/// reasoning (a `</think>`, a held marker prefix, the hidden EOS). A `<think>` before
/// any reasoning, and everything after answer text, counts nowhere. `answered`: the
/// reasoning stage passed answer text on this frame (tool markup included).
/// What every step does before its chunks: the calls kept, the reasoning tokens
/// counted, and the finish reason as it goes out (`stop` becomes `tool_calls` once
/// calls were made; a reply cut by the length limit keeps `length`, calls or not).
fn settle_step(
    choice: &mut Choice,
    delta: &mut Delta,
    parallel_tool_calls: bool,
    tokens: u32,
    answered: bool,
    finish: Option<&'static str>,
    ending: bool,
) -> Option<&'static str> {
    if !parallel_tool_calls {
        delta.calls.retain(|c| c.index == 0);
    }
    count_reasoning(choice, delta, tokens, answered);
    choice.had_calls |= !delta.calls.is_empty();
    let finish = finish.map(|f| match f {
        "stop" if choice.had_calls => "tool_calls",
        other => other,
    });
    if ending {
        choice.finished = true;
        choice.finish_reason = finish;
    }
    finish
}

fn count_reasoning(choice: &mut Choice, delta: &Delta, tokens: u32, answered: bool) {
    if !delta.reasoning.is_empty() || (!answered && choice.in_reasoning) {
        choice.reasoning_tokens += tokens;
        choice.in_reasoning = true;
    }
    if answered {
        choice.in_reasoning = false;
    }
}

fn completion_choices<'a>(
    order: &[&'a Choice],
    rendered: &'a [Option<Vec<u8>>],
) -> Vec<CompletionChoice<'a>> {
    order
        .iter()
        .zip(rendered)
        .map(|(c, lp)| CompletionChoice {
            index: c.index,
            text: &c.content,
            logprobs: lp.as_deref(),
            finish_reason: c.finish_reason,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::unquoted_marker_at;

    #[test]
    fn a_marker_in_a_closed_quote_is_prose() {
        assert_eq!(unquoted_marker_at("x <TOOLCALL>{", "<TOOLCALL>"), Some(2));
        assert_eq!(
            unquoted_marker_at(r#""<TOOLCALL>{"a":"#, "<TOOLCALL>"),
            None
        );
        // A quote that never closes quotes nothing; an apostrophe is no quote.
        assert_eq!(unquoted_marker_at(r#"" <TOOLCALL>"#, "<TOOLCALL>"), Some(2));
        assert_eq!(
            unquoted_marker_at("it's <TOOLCALL> 'x'", "<TOOLCALL>"),
            Some(5)
        );
        assert_eq!(unquoted_marker_at("'<TOOLCALL>' ok", "<TOOLCALL>"), None);
    }
}
