//! Engine output frames as they arrive over the request plane: `LLMEngineOutput`
//! JSON, bare or wrapped in an `Annotated` envelope (`{data, event, comment}`),
//! where `event: "error"` carries the engine's error in `comment`. An engine may
//! hand over several outputs at once as a JSON array of frames (a batch).

use serde::de::{self, Deserializer};
use serde::Deserialize;
use serde_json::value::RawValue;

/// Why the engine ended a choice. `Error` is not a finish reason on the way out:
/// it turns the rest of the response into an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    Eos,
    Stop,
    Length,
    Cancelled,
    ContentFilter,
    Error(String),
}

impl FinishReason {
    /// The OpenAI spelling; `None` for `Error`.
    pub fn openai(&self) -> Option<&'static str> {
        match self {
            Self::Eos | Self::Stop | Self::Cancelled => Some("stop"),
            Self::Length => Some("length"),
            Self::ContentFilter => Some("content_filter"),
            Self::Error(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for FinishReason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Name(String),
            Error { error: String },
        }
        match Raw::deserialize(deserializer)? {
            Raw::Error { error } => Ok(Self::Error(error)),
            Raw::Name(name) => match name.as_str() {
                "eos" => Ok(Self::Eos),
                "stop" => Ok(Self::Stop),
                "length" => Ok(Self::Length),
                "cancelled" | "abort" => Ok(Self::Cancelled),
                "content_filter" => Ok(Self::ContentFilter),
                "error" => Ok(Self::Error(String::new())),
                other => Err(de::Error::unknown_variant(
                    other,
                    &[
                        "eos",
                        "stop",
                        "length",
                        "error",
                        "cancelled",
                        "abort",
                        "content_filter",
                    ],
                )),
            },
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct PromptTokensDetails {
    #[serde(default)]
    pub audio_tokens: Option<u32>,
    #[serde(default)]
    pub cached_tokens: Option<u32>,
}

/// Usage as the engine reports it; only `prompt_tokens_details` reaches the client.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct CompletionUsage {
    #[serde(default)]
    pub prompt_tokens: u32,
    #[serde(default)]
    pub completion_tokens: u32,
    #[serde(default)]
    pub total_tokens: u32,
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// One alternative in a token's top log probs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TopLogprob {
    #[serde(default)]
    pub rank: Option<u32>,
    pub token_id: u32,
    #[serde(default)]
    pub token: Option<String>,
    pub logprob: f64,
}

/// `LLMEngineOutput`: the tokens of one engine step for one choice.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct EngineOutput {
    #[serde(default)]
    pub token_ids: Vec<u32>,
    /// Per-token strings, when the engine sends them (used for log probs).
    #[serde(default)]
    pub tokens: Option<Vec<Option<String>>>,
    /// Already-decoded text; when set it is used as-is instead of detokenizing.
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub log_probs: Option<Vec<f64>>,
    #[serde(default)]
    pub top_logprobs: Option<Vec<Vec<TopLogprob>>>,
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    #[serde(default)]
    pub index: Option<u32>,
    #[serde(default)]
    pub completion_usage: Option<CompletionUsage>,
}

/// What one frame means to the response.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Output(EngineOutput),
    /// The engine failed; the message is the engine's own (not shown to clients).
    Error(String),
    /// An envelope with nothing for the response (side-channel annotations).
    Skip,
}

/// The wire shape: a bare output, or an `Annotated` envelope around one. The
/// output's fields sit beside the envelope's (no `flatten`: it buffers every frame).
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    data: Option<EngineOutput>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    comment: Option<Vec<String>>,
    #[serde(default)]
    token_ids: Vec<u32>,
    #[serde(default)]
    tokens: Option<Vec<Option<String>>>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    log_probs: Option<Vec<f64>>,
    #[serde(default)]
    top_logprobs: Option<Vec<Vec<TopLogprob>>>,
    #[serde(default)]
    finish_reason: Option<FinishReason>,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    completion_usage: Option<CompletionUsage>,
}

/// A frame that is not valid JSON of the expected shape.
#[derive(Debug, thiserror::Error)]
#[error("malformed engine frame: {0}")]
pub struct FrameError(#[from] serde_json::Error);

/// Parse one frame from its JSON bytes.
pub fn parse_frame(bytes: &[u8]) -> Result<Frame, FrameError> {
    let wire: Wire = serde_json::from_slice(bytes)?;
    if wire.event.as_deref() == Some("error") {
        return Ok(Frame::Error(wire.comment.unwrap_or_default().join("; ")));
    }
    if let Some(data) = wire.data {
        return Ok(output_frame(data));
    }
    if wire.event.is_some() {
        return Ok(Frame::Skip);
    }
    Ok(output_frame(EngineOutput {
        token_ids: wire.token_ids,
        tokens: wire.tokens,
        text: wire.text,
        log_probs: wire.log_probs,
        top_logprobs: wire.top_logprobs,
        finish_reason: wire.finish_reason,
        index: wire.index,
        completion_usage: wire.completion_usage,
    }))
}

/// The frames of a batch (a JSON array of frames), each as its own JSON bytes; `None`
/// when `bytes` is not an array (one frame, or a malformed one).
pub fn batch_frames(bytes: &[u8]) -> Option<Vec<&[u8]>> {
    if bytes.trim_ascii_start().first() != Some(&b'[') {
        return None;
    }
    let items: Vec<&RawValue> = serde_json::from_slice(bytes).ok()?;
    Some(
        items
            .into_iter()
            .map(|item| item.get().as_bytes())
            .collect(),
    )
}

fn output_frame(output: EngineOutput) -> Frame {
    match output.finish_reason {
        Some(FinishReason::Error(message)) => Frame::Error(message),
        _ => Frame::Output(output),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_mocker_frame() {
        let frame = parse_frame(br#"{"token_ids": [128821], "tokens": null, "text": null, "output_type": "text", "cum_log_probs": null, "log_probs": null, "top_logprobs": null, "finish_reason": null, "index": null, "completion_usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8, "prompt_tokens_details": {"audio_tokens": null, "cached_tokens": 0}}}"#).unwrap();
        let Frame::Output(out) = frame else {
            panic!("expected output")
        };
        assert_eq!(out.token_ids, vec![128821]);
        let details = out.completion_usage.unwrap().prompt_tokens_details.unwrap();
        assert_eq!(details.cached_tokens, Some(0));
    }

    #[test]
    fn annotated_data_and_error() {
        let frame = parse_frame(br#"{"data":{"token_ids":[],"finish_reason":"length"}}"#).unwrap();
        assert!(matches!(
            frame,
            Frame::Output(EngineOutput {
                finish_reason: Some(FinishReason::Length),
                ..
            })
        ));
        let frame = parse_frame(br#"{"event":"error","comment":["boom"]}"#).unwrap();
        assert_eq!(frame, Frame::Error("boom".into()));
        let frame = parse_frame(br#"{"token_ids":[],"finish_reason":{"error":"bad"}}"#).unwrap();
        assert_eq!(frame, Frame::Error("bad".into()));
        let frame = parse_frame(br#"{"event":"request_id","comment":["\"x\""]}"#).unwrap();
        assert_eq!(frame, Frame::Skip);
    }

    #[test]
    fn batch_splits_into_frames() {
        let batch = br#" [{"token_ids":[1]}, {"token_ids":[],"finish_reason":"length"}]"#;
        let frames = batch_frames(batch).unwrap();
        assert_eq!(
            frames,
            vec![
                &br#"{"token_ids":[1]}"#[..],
                &br#"{"token_ids":[],"finish_reason":"length"}"#[..]
            ]
        );
        assert_eq!(batch_frames(b"[]").unwrap().len(), 0);
        assert!(batch_frames(br#"{"token_ids":[1]}"#).is_none());
        // Not a well-formed array: handled as one (malformed) frame.
        assert!(batch_frames(b"[{").is_none());
    }

    #[test]
    fn unknown_finish_reason_is_an_error() {
        assert!(parse_frame(br#"{"token_ids":[],"finish_reason":"maybe"}"#).is_err());
        assert!(parse_frame(b"{").is_err());
    }
}
