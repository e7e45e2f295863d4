//! Log probs: what the engine reported per token, cut to the tokens the decoder
//! consumed, and written in the chat or completions shape.

use super::chunks;
use super::frames::EngineOutput;
use super::plan::Surface;

/// This frame's log probs, one entry per token the decoder consumed (`tokens`), into
/// `out`. Like Dynamo's backend, a token's text is what the decoder released for it
/// (`piece` cut at `ends`); only engine-decoded frames keep the engine's own strings.
/// `text_chars` counts the choice's characters so far (completions `text_offset`).
pub(super) fn collect(
    surface: Surface,
    output: &EngineOutput,
    tokens: usize,
    (piece, ends): (&str, &[usize]),
    text_chars: &mut usize,
    out: &mut Vec<TokenLogprob>,
) {
    let Some(log_probs) = output.log_probs.as_ref() else {
        return;
    };
    let mut start = 0;
    for (i, (&id, &lp)) in output
        .token_ids
        .iter()
        .zip(log_probs)
        .take(tokens)
        .enumerate()
    {
        let token = match ends.get(i) {
            Some(&end) => {
                let released = piece.get(start..end).unwrap_or_default().to_owned();
                start = end;
                released
            }
            None => output
                .tokens
                .as_ref()
                .and_then(|t| t.get(i).cloned().flatten())
                .unwrap_or_default(),
        };
        let mut top: Vec<(String, f32)> = Vec::new();
        let mut has_sampled = false;
        for alt in output
            .top_logprobs
            .as_ref()
            .and_then(|t| t.get(i))
            .into_iter()
            .flatten()
        {
            has_sampled |= alt.token_id == id;
            top.push((alt.token.clone().unwrap_or_default(), alt.logprob as f32));
        }
        if !has_sampled && surface == Surface::Chat {
            top.push((token.clone(), lp as f32));
        }
        let offset = *text_chars;
        *text_chars += token.chars().count();
        out.push(TokenLogprob {
            token,
            logprob: lp as f32,
            top,
            offset,
        });
    }
}

/// One sampled token's log prob with its alternatives.
#[derive(Debug, Clone)]
pub(super) struct TokenLogprob {
    token: String,
    logprob: f32,
    top: Vec<(String, f32)>,
    /// Characters of choice text before this token (completions `text_offset`).
    offset: usize,
}

/// A token's UTF-8 bytes as a JSON array, `null` for an empty token.
fn write_bytes(out: &mut Vec<u8>, token: &str) {
    if token.is_empty() {
        out.extend_from_slice(b"null");
        return;
    }
    out.push(b'[');
    for (i, b) in token.bytes().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        chunks::write_u64(out, b.into());
    }
    out.push(b']');
}

/// Chat: `{"content":[{"token","logprob","bytes","top_logprobs":[…]}],"refusal":null}`.
fn write_chat_logprobs(out: &mut Vec<u8>, entries: &[TokenLogprob]) {
    out.extend_from_slice(b"{\"content\":[");
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"token\":");
        chunks::write_str(out, &e.token);
        out.extend_from_slice(b",\"logprob\":");
        chunks::write_f32(out, e.logprob);
        out.extend_from_slice(b",\"bytes\":");
        write_bytes(out, &e.token);
        out.extend_from_slice(b",\"top_logprobs\":[");
        for (j, (token, lp)) in e.top.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"token\":");
            chunks::write_str(out, token);
            out.extend_from_slice(b",\"logprob\":");
            chunks::write_f32(out, *lp);
            out.extend_from_slice(b",\"bytes\":");
            write_bytes(out, token);
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"],\"refusal\":null}");
}

/// Completions: `{"tokens","token_logprobs","top_logprobs":[{tok:lp}],"text_offset"}`.
fn write_completion_logprobs(out: &mut Vec<u8>, entries: &[TokenLogprob]) {
    out.extend_from_slice(b"{\"tokens\":[");
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        chunks::write_str(out, &e.token);
    }
    out.extend_from_slice(b"],\"token_logprobs\":[");
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        chunks::write_f32(out, e.logprob.max(-9999.0));
    }
    out.extend_from_slice(b"],\"top_logprobs\":[");
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        for (j, (token, lp)) in e.top.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            chunks::write_str(out, token);
            out.push(b':');
            chunks::write_f32(out, lp.max(-9999.0));
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"text_offset\":[");
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        chunks::write_u64(out, e.offset as u64);
    }
    out.extend_from_slice(b"]}");
}

/// The `logprobs` value of a chunk or choice; `None` when there is nothing to show.
pub(super) fn render(surface: Surface, entries: &[TokenLogprob]) -> Option<Vec<u8>> {
    if entries.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(64 * entries.len());
    match surface {
        Surface::Chat => write_chat_logprobs(&mut out, entries),
        Surface::Completions => write_completion_logprobs(&mut out, entries),
    }
    Some(out)
}
