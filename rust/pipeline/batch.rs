//! Several prompts in one `/v1/completions` request, as Dynamo 1.6.1 answers them:
//! one engine request per prompt (a part), the parts' choices numbered `I × n + j`.
//! Streaming: each part's chunks as they arrive (id `cmpl-<id>-I`), then one usage
//! chunk with the summed usage (id `cmpl-<id>`) and one `[DONE]`. Unary: one body
//! with every choice in index order and the summed usage.

use std::sync::Arc;

use tokenizers::Tokenizer;

use super::chunks::{self, CompletionChoice, Envelope, Usage};
use super::plan::ResponsePlan;
use super::preprocess::Prepared;
use super::response::ResponseState;
use super::sse;

/// The response side of a batch: one `ResponseState` per part.
pub struct CompletionBatch {
    parts: Vec<ResponseState>,
    response_id: String,
    created: u64,
    model: String,
    stream: bool,
    include_usage: bool,
    /// The status of the first failure, which ends every part.
    failed: Option<u16>,
    closed: bool,
}

impl CompletionBatch {
    /// `response_id` is the request's own (`cmpl-<request id>`); `prepared` its parts.
    pub fn new(
        response_id: String,
        prepared: Vec<Prepared>,
        tokenizer: &Arc<Tokenizer>,
    ) -> (Self, Vec<Vec<u8>>) {
        let first: &ResponsePlan = &prepared[0].plan;
        let (created, model, stream, include_usage) = (
            first.created,
            first.model.clone(),
            first.stream,
            first.include_usage,
        );
        let mut requests = Vec::with_capacity(prepared.len());
        let mut parts = Vec::with_capacity(prepared.len());
        for part in prepared {
            requests.push(part.engine_request);
            parts.push(ResponseState::new(part.plan, tokenizer.clone()));
        }
        let batch = Self {
            parts,
            response_id,
            created,
            model,
            stream,
            include_usage,
            failed: None,
            closed: false,
        };
        (batch, requests)
    }

    pub fn len(&self) -> usize {
        self.parts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    pub fn is_stream(&self) -> bool {
        self.stream
    }

    /// 200, or the status of the first part that failed a unary request.
    pub fn status(&self) -> u16 {
        self.failed.unwrap_or(200)
    }

    /// The batch failed or was closed: every part's engine can stop.
    pub fn is_closed(&self) -> bool {
        self.closed || self.failed.is_some()
    }

    /// Part `index` has every choice finished (or failed).
    pub fn part_finished(&self, index: usize) -> bool {
        self.is_closed() || self.parts[index].is_finished()
    }

    /// One engine frame of part `index` in; the bytes to send now appended to `out`.
    /// A frame that fails its part fails the batch (nothing of it is sent yet).
    pub fn feed(&mut self, index: usize, frame: &[u8], out: &mut Vec<u8>) {
        if self.is_closed() {
            return;
        }
        let part = &mut self.parts[index];
        let start = out.len();
        part.feed(frame, out);
        // A failed frame: the part wrote the error body, or the error event and
        // `[DONE]`; that is the batch's answer, and every other part stops.
        if part.status() != 200 || (self.stream && out[start..].ends_with(DONE)) {
            self.failed = Some(part.status());
            self.closed = true;
        }
    }

    /// The engine stream of part `index` ended: its closing chunks.
    pub fn finish_part(&mut self, index: usize, out: &mut Vec<u8>) {
        if !self.is_closed() {
            self.parts[index].finish(out);
        }
    }

    /// Every part ended: the summed usage chunk and `[DONE]`, or the merged body.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.is_closed() {
            return;
        }
        self.closed = true;
        let usage = self.usage();
        let env = Envelope {
            id: &self.response_id,
            created: self.created,
            model: &self.model,
        };
        if self.stream {
            if self.include_usage {
                sse::begin_event(out);
                chunks::write_completion_usage_chunk(out, &env, &usage);
                sse::end_event(out);
            }
            sse::write_done(out);
            return;
        }
        let mut merged = Vec::new();
        for part in &self.parts {
            part.unary_completion_choices(&mut merged);
        }
        merged.sort_by_key(|c| c.index);
        let choices: Vec<CompletionChoice> = merged
            .iter()
            .map(|c| CompletionChoice {
                index: c.index,
                text: &c.text,
                logprobs: c.logprobs.as_deref(),
                finish_reason: c.finish_reason,
            })
            .collect();
        chunks::write_completion(out, &env, &choices, &usage);
    }

    /// An engine failed (or the server is stopping): an error event and `[DONE]`,
    /// or the unary error body with `status`.
    pub fn fail(&mut self, status: u16, message: &str, out: &mut Vec<u8>) {
        if self.is_closed() {
            return;
        }
        self.failed = Some(if self.stream { 200 } else { status });
        self.closed = true;
        // The first part writes the error in the reference's shape.
        let part = &mut self.parts[0];
        part.fail_with(status, message, out);
    }

    fn usage(&self) -> Usage {
        self.parts.iter().fold(Usage::default(), |sum, part| {
            let u = part.usage();
            Usage {
                prompt_tokens: sum.prompt_tokens + u.prompt_tokens,
                completion_tokens: sum.completion_tokens + u.completion_tokens,
                cached_tokens: match (sum.cached_tokens, u.cached_tokens) {
                    (Some(Some(a)), Some(Some(b))) => Some(Some(a + b)),
                    (None, c) | (c, None) => c,
                    (c, _) => c,
                },
                reasoning_tokens: None,
            }
        })
    }
}

const DONE: &[u8] = b"data: [DONE]\n\n";
