//! OpenAI chat and completions JSON, written straight into the output buffer
//! with Dynamo 1.6.1's exact key order and key presence.

use crate::parsers::CallDelta;

/// The fields every chunk of one response repeats.
#[derive(Debug, Clone, Copy)]
pub struct Envelope<'a> {
    pub id: &'a str,
    pub created: u64,
    pub model: &'a str,
}

/// Token accounting for the usage object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// From the engine's `prompt_tokens_details`; `None` when it sent none.
    pub cached_tokens: Option<Option<u32>>,
    /// `Some` when a reasoning parser ran (chat only).
    pub reasoning_tokens: Option<u32>,
}

/// A chat delta's parts; empty parts are left out.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChatDelta<'a> {
    pub content: Option<&'a str>,
    pub tool_calls: &'a [CallDelta],
    pub role: bool,
    pub reasoning: Option<&'a str>,
}

impl ChatDelta<'_> {
    pub fn is_empty(&self) -> bool {
        self.content.is_none()
            && self.tool_calls.is_empty()
            && !self.role
            && self.reasoning.is_none()
    }
}

/// One whole tool call of a unary message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WholeCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// The aggregated message of one unary chat choice.
#[derive(Debug, Clone, Copy)]
pub struct ChatMessage<'a> {
    pub index: u32,
    pub content: &'a str,
    pub tool_calls: &'a [WholeCall],
    pub reasoning: &'a str,
    pub finish_reason: Option<&'a str>,
    pub logprobs: Option<&'a [u8]>,
}

/// A JSON string literal, escaped the way serde_json does it.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xf) as usize]);
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn write_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => write_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

pub fn write_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// An `f32` as serde_json prints it (shortest round-trip form); Dynamo keeps log probs as f32.
pub fn write_f32(out: &mut Vec<u8>, x: f32) {
    if x.is_finite() {
        out.extend_from_slice(ryu::Buffer::new().format_finite(x).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

fn write_head(out: &mut Vec<u8>, env: &Envelope) {
    out.extend_from_slice(b"{\"id\":");
    write_str(out, env.id);
    out.extend_from_slice(b",\"choices\":[");
}

fn write_tail(out: &mut Vec<u8>, env: &Envelope, object: &[u8]) {
    out.extend_from_slice(b"],\"created\":");
    write_u64(out, env.created);
    out.extend_from_slice(b",\"model\":");
    write_str(out, env.model);
    out.extend_from_slice(object);
}

fn write_call_function(out: &mut Vec<u8>, id: &str, name: &str, arguments: &str) {
    out.extend_from_slice(b"\"id\":");
    write_str(out, id);
    out.extend_from_slice(b",\"type\":\"function\",\"function\":{\"name\":");
    write_str(out, name);
    out.extend_from_slice(b",\"arguments\":");
    write_str(out, arguments);
    out.extend_from_slice(b"}}");
}

/// `{"id",...,"object":"chat.completion.chunk"}` with one choice.
pub fn write_chat_chunk(
    out: &mut Vec<u8>,
    env: &Envelope,
    index: u32,
    delta: &ChatDelta,
    finish_reason: Option<&str>,
    logprobs: Option<&[u8]>,
    usage: Option<&Usage>,
) {
    write_head(out, env);
    out.extend_from_slice(b"{\"index\":");
    write_u64(out, index.into());
    out.extend_from_slice(b",\"delta\":{");
    let mut sep = false;
    let mut key = |out: &mut Vec<u8>, name: &[u8]| {
        if sep {
            out.push(b',');
        }
        sep = true;
        out.extend_from_slice(name);
    };
    if let Some(content) = delta.content {
        key(out, b"\"content\":");
        write_str(out, content);
    }
    if !delta.tool_calls.is_empty() {
        key(out, b"\"tool_calls\":[");
        for (i, call) in delta.tool_calls.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"index\":");
            write_u64(out, call.index as u64);
            out.push(b',');
            if call.id.is_none() && call.name.is_none() {
                // A later fragment of a call's arguments: only what it adds.
                out.extend_from_slice(b"\"function\":{\"arguments\":");
                write_str(out, &call.arguments);
                out.extend_from_slice(b"}}");
                continue;
            }
            write_call_function(
                out,
                call.id.as_deref().unwrap_or_default(),
                call.name.as_deref().unwrap_or_default(),
                &call.arguments,
            );
        }
        out.push(b']');
    }
    if delta.role {
        key(out, b"\"role\":\"assistant\"");
    }
    if let Some(reasoning) = delta.reasoning {
        key(out, b"\"reasoning_content\":");
        write_str(out, reasoning);
    }
    out.extend_from_slice(b"},\"finish_reason\":");
    write_opt_str(out, finish_reason);
    out.extend_from_slice(b",\"logprobs\":");
    out.extend_from_slice(logprobs.unwrap_or(b"null"));
    out.push(b'}');
    write_tail(out, env, b",\"object\":\"chat.completion.chunk\"");
    if let Some(usage) = usage {
        out.extend_from_slice(b",\"usage\":");
        write_usage(out, usage, false);
    }
    out.push(b'}');
}

fn write_usage(out: &mut Vec<u8>, usage: &Usage, completions: bool) {
    out.extend_from_slice(b"{\"prompt_tokens\":");
    write_u64(out, usage.prompt_tokens.into());
    out.extend_from_slice(b",\"completion_tokens\":");
    write_u64(out, usage.completion_tokens.into());
    out.extend_from_slice(b",\"total_tokens\":");
    write_u64(
        out,
        u64::from(usage.prompt_tokens) + u64::from(usage.completion_tokens),
    );
    if let Some(cached) = usage.cached_tokens {
        out.extend_from_slice(if completions {
            b",\"prompt_tokens_details\":{\"audio_tokens\":null,\"cached_tokens\":".as_slice()
        } else {
            b",\"prompt_tokens_details\":{\"cached_tokens\":".as_slice()
        });
        match cached {
            Some(n) => write_u64(out, n.into()),
            None => out.extend_from_slice(b"null"),
        }
        out.push(b'}');
    }
    if let Some(reasoning_tokens) = usage.reasoning_tokens.filter(|_| !completions) {
        out.extend_from_slice(b",\"completion_tokens_details\":{\"reasoning_tokens\":");
        write_u64(out, reasoning_tokens.into());
        out.push(b'}');
    }
    out.push(b'}');
}

/// The trailing `"choices":[]` chunk that carries usage.
pub fn write_chat_usage_chunk(out: &mut Vec<u8>, env: &Envelope, usage: &Usage) {
    write_head(out, env);
    write_tail(
        out,
        env,
        b",\"object\":\"chat.completion.chunk\",\"usage\":",
    );
    write_usage(out, usage, false);
    out.push(b'}');
}

/// The whole unary chat body.
pub fn write_chat_completion(
    out: &mut Vec<u8>,
    env: &Envelope,
    choices: &[ChatMessage],
    usage: &Usage,
) {
    write_head(out, env);
    for (i, choice) in choices.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"index\":");
        write_u64(out, choice.index.into());
        out.extend_from_slice(b",\"message\":{\"content\":");
        write_opt_str(out, Some(choice.content).filter(|c| !c.is_empty()));
        out.extend_from_slice(b",\"refusal\":null");
        if !choice.tool_calls.is_empty() {
            out.extend_from_slice(b",\"tool_calls\":[");
            for (j, call) in choice.tool_calls.iter().enumerate() {
                if j > 0 {
                    out.push(b',');
                }
                out.push(b'{');
                write_call_function(out, &call.id, &call.name, &call.arguments);
            }
            out.push(b']');
        }
        out.extend_from_slice(b",\"role\":\"assistant\"");
        // Dynamo leaves the key out when there is no reasoning (no `null`).
        if !choice.reasoning.is_empty() {
            out.extend_from_slice(b",\"reasoning_content\":");
            write_str(out, choice.reasoning);
        }
        out.extend_from_slice(b"},\"finish_reason\":");
        write_opt_str(out, choice.finish_reason);
        out.extend_from_slice(b",\"logprobs\":");
        out.extend_from_slice(choice.logprobs.unwrap_or(b"null"));
        out.push(b'}');
    }
    write_tail(out, env, b",\"object\":\"chat.completion\",\"usage\":");
    write_usage(out, usage, false);
    out.push(b'}');
}

const COMPLETION_OBJECT: &[u8] =
    b",\"system_fingerprint\":null,\"object\":\"text_completion\",\"usage\":";

fn write_completion_choice(
    out: &mut Vec<u8>,
    index: u32,
    text: &str,
    logprobs: Option<&[u8]>,
    finish_reason: Option<&str>,
    finish_key_always: bool,
) {
    out.extend_from_slice(b"{\"text\":");
    write_str(out, text);
    out.extend_from_slice(b",\"index\":");
    write_u64(out, index.into());
    if let Some(logprobs) = logprobs {
        out.extend_from_slice(b",\"logprobs\":");
        out.extend_from_slice(logprobs);
    }
    if finish_reason.is_some() || finish_key_always {
        out.extend_from_slice(b",\"finish_reason\":");
        write_opt_str(out, finish_reason);
    }
    out.push(b'}');
}

/// One streamed completions chunk (`"usage":null` unless usage runs continuously).
pub fn write_completion_chunk(
    out: &mut Vec<u8>,
    env: &Envelope,
    index: u32,
    text: &str,
    logprobs: Option<&[u8]>,
    finish_reason: Option<&str>,
    usage: Option<&Usage>,
) {
    write_head(out, env);
    write_completion_choice(out, index, text, logprobs, finish_reason, false);
    write_tail(out, env, COMPLETION_OBJECT);
    match usage {
        Some(usage) => write_usage(out, usage, true),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
}

/// The trailing completions usage chunk.
pub fn write_completion_usage_chunk(out: &mut Vec<u8>, env: &Envelope, usage: &Usage) {
    write_head(out, env);
    write_tail(out, env, COMPLETION_OBJECT);
    write_usage(out, usage, true);
    out.push(b'}');
}

/// One unary completions choice.
#[derive(Debug, Clone, Copy)]
pub struct CompletionChoice<'a> {
    pub index: u32,
    pub text: &'a str,
    pub logprobs: Option<&'a [u8]>,
    pub finish_reason: Option<&'a str>,
}

/// The whole unary completions body.
pub fn write_completion(
    out: &mut Vec<u8>,
    env: &Envelope,
    choices: &[CompletionChoice],
    usage: &Usage,
) {
    write_head(out, env);
    for (i, choice) in choices.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_completion_choice(
            out,
            choice.index,
            choice.text,
            choice.logprobs,
            choice.finish_reason,
            true,
        );
    }
    write_tail(out, env, COMPLETION_OBJECT);
    write_usage(out, usage, true);
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(s: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escaping_matches_serde_json() {
        for s in [
            "plain",
            "q\"uote\\back",
            "\n\r\t\u{8}\u{c}",
            "\u{1}\u{1f}\u{7f}",
            "ü世界👋",
            "</tool_call>",
        ] {
            assert_eq!(escaped(s), serde_json::to_string(s).unwrap());
        }
    }

    #[test]
    fn chat_chunk_shape() {
        let env = Envelope {
            id: "chatcmpl-x",
            created: 7,
            model: "m",
        };
        let mut out = Vec::new();
        let delta = ChatDelta {
            role: true,
            ..Default::default()
        };
        write_chat_chunk(&mut out, &env, 0, &delta, None, None, None);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"id":"chatcmpl-x","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null,"logprobs":null}],"created":7,"model":"m","object":"chat.completion.chunk"}"#
        );
    }
}
