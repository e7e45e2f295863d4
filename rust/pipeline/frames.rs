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

/// What one frame means to the response, besides the output it fills in.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// The frame's output went into the caller's `EngineOutput`.
    Output,
    /// The engine failed; the message is the engine's own (not shown to clients).
    Error(String),
    /// An envelope with nothing for the response (side-channel annotations).
    Skip,
}

/// The wire shape's fields: a bare output, or an `Annotated` envelope around one, the
/// output's fields beside the envelope's (no `flatten`: it buffers every frame). Read
/// by hand, as serde's derive would read the struct, so that the bare fields land in
/// the caller's `EngineOutput` rather than in a struct moved out through several
/// returns (a frame is a few hundred bytes of struct per token).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Data,
    Event,
    Comment,
    TokenIds,
    Tokens,
    Text,
    LogProbs,
    TopLogprobs,
    FinishReason,
    Index,
    CompletionUsage,
    Other,
}

const KEYS: [&str; 11] = [
    "data",
    "event",
    "comment",
    "token_ids",
    "tokens",
    "text",
    "log_probs",
    "top_logprobs",
    "finish_reason",
    "index",
    "completion_usage",
];

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl de::Visitor<'_> for Visit {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Key, E> {
                const ALL: [Key; 11] = [
                    Key::Data,
                    Key::Event,
                    Key::Comment,
                    Key::TokenIds,
                    Key::Tokens,
                    Key::Text,
                    Key::LogProbs,
                    Key::TopLogprobs,
                    Key::FinishReason,
                    Key::Index,
                    Key::CompletionUsage,
                ];
                Ok(KEYS
                    .iter()
                    .position(|k| *k == name)
                    .map_or(Key::Other, |i| ALL[i]))
            }
        }
        deserializer.deserialize_identifier(Visit)
    }
}

/// The envelope's own fields.
#[derive(Default)]
struct Envelope {
    data: Option<EngineOutput>,
    event: Option<String>,
    comment: Option<Vec<String>>,
}

/// Reads a frame: the bare output's fields into `.0`, the envelope's returned.
struct Fill<'a>(&'a mut EngineOutput);

impl<'de> de::DeserializeSeed<'de> for Fill<'_> {
    type Value = Envelope;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Envelope, D::Error> {
        deserializer.deserialize_struct("Wire", &KEYS, self)
    }
}

impl<'de> de::Visitor<'de> for Fill<'_> {
    type Value = Envelope;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("struct Wire")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Envelope, A::Error> {
        let out = self.0;
        let mut envelope = Envelope::default();
        let mut seen = 0u16;
        while let Some(key) = map.next_key::<Key>()? {
            if key != Key::Other {
                let bit = 1 << key as u16;
                if seen & bit != 0 {
                    return Err(de::Error::duplicate_field(KEYS[key as usize]));
                }
                seen |= bit;
            }
            match key {
                Key::Data => envelope.data = map.next_value()?,
                Key::Event => envelope.event = map.next_value()?,
                Key::Comment => envelope.comment = map.next_value()?,
                Key::TokenIds => out.token_ids = map.next_value()?,
                Key::Tokens => out.tokens = map.next_value()?,
                Key::Text => out.text = map.next_value()?,
                Key::LogProbs => out.log_probs = map.next_value()?,
                Key::TopLogprobs => out.top_logprobs = map.next_value()?,
                Key::FinishReason => out.finish_reason = map.next_value()?,
                Key::Index => out.index = map.next_value()?,
                Key::CompletionUsage => out.completion_usage = map.next_value()?,
                Key::Other => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(envelope)
    }

    /// serde's sequence form of a struct (fields in order, the missing ones defaulted),
    /// which the derived reader accepted too.
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Envelope, A::Error> {
        fn next<'de, T: Deserialize<'de> + Default, A: de::SeqAccess<'de>>(
            seq: &mut A,
        ) -> Result<T, A::Error> {
            Ok(seq.next_element()?.unwrap_or_default())
        }
        let out = self.0;
        let envelope = Envelope {
            data: next(&mut seq)?,
            event: next(&mut seq)?,
            comment: next(&mut seq)?,
        };
        out.token_ids = next(&mut seq)?;
        out.tokens = next(&mut seq)?;
        out.text = next(&mut seq)?;
        out.log_probs = next(&mut seq)?;
        out.top_logprobs = next(&mut seq)?;
        out.finish_reason = next(&mut seq)?;
        out.index = next(&mut seq)?;
        out.completion_usage = next(&mut seq)?;
        Ok(envelope)
    }
}

/// A frame that is not valid JSON of the expected shape.
#[derive(Debug, thiserror::Error)]
#[error("malformed engine frame: {0}")]
pub struct FrameError(#[from] serde_json::Error);

/// Parse one frame from its JSON bytes; its output goes into `output`, which must
/// come in as `EngineOutput::default()`.
pub fn parse_frame(bytes: &[u8], output: &mut EngineOutput) -> Result<Frame, FrameError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let wire = de::DeserializeSeed::deserialize(Fill(output), &mut de)?;
    de.end()?;
    if wire.event.as_deref() == Some("error") {
        return Ok(Frame::Error(wire.comment.unwrap_or_default().join("; ")));
    }
    if let Some(data) = wire.data {
        *output = data;
    } else if wire.event.is_some() {
        return Ok(Frame::Skip);
    }
    Ok(match output.finish_reason.take() {
        Some(FinishReason::Error(message)) => Frame::Error(message),
        other => {
            output.finish_reason = other;
            Frame::Output
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame as the tests read it: its output, when it has one.
    fn parse(bytes: &[u8]) -> Result<Result<EngineOutput, Frame>, FrameError> {
        let mut output = EngineOutput::default();
        Ok(match parse_frame(bytes, &mut output)? {
            Frame::Output => Ok(output),
            other => Err(other),
        })
    }

    #[test]
    fn bare_mocker_frame() {
        let frame = parse(br#"{"token_ids": [128821], "tokens": null, "text": null, "output_type": "text", "cum_log_probs": null, "log_probs": null, "top_logprobs": null, "finish_reason": null, "index": null, "completion_usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8, "prompt_tokens_details": {"audio_tokens": null, "cached_tokens": 0}}}"#).unwrap();
        let out = frame.expect("expected output");
        assert_eq!(out.token_ids, vec![128821]);
        let details = out.completion_usage.unwrap().prompt_tokens_details.unwrap();
        assert_eq!(details.cached_tokens, Some(0));
    }

    #[test]
    fn annotated_data_and_error() {
        // The envelope's output stands in for the bare fields beside it.
        let frame = parse(br#"{"token_ids":[7],"data":{"token_ids":[],"finish_reason":"length"}}"#);
        let out = frame.unwrap().expect("expected output");
        assert_eq!(out.finish_reason, Some(FinishReason::Length));
        assert!(out.token_ids.is_empty());
        let frame = parse(br#"{"event":"error","comment":["boom"]}"#).unwrap();
        assert_eq!(frame, Err(Frame::Error("boom".into())));
        let frame = parse(br#"{"token_ids":[],"finish_reason":{"error":"bad"}}"#).unwrap();
        assert_eq!(frame, Err(Frame::Error("bad".into())));
        let frame = parse(br#"{"event":"request_id","comment":["\"x\""]}"#).unwrap();
        assert_eq!(frame, Err(Frame::Skip));
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
        assert!(parse(br#"{"token_ids":[],"finish_reason":"maybe"}"#).is_err());
        assert!(parse(b"{").is_err());
    }

    #[test]
    fn read_as_the_derived_struct_was() {
        // A repeated field is an error, an unknown one is skipped, null is not a list.
        assert!(parse(br#"{"token_ids":[1],"token_ids":[2]}"#).is_err());
        assert!(parse(br#"{"event":"x","event":"x"}"#).is_err());
        assert!(parse(br#"{"token_ids":null}"#).is_err());
        let out = parse(br#"{"output_type":"text","token_ids":[3],"extra":{"a":[1]}}"#);
        assert_eq!(out.unwrap().unwrap().token_ids, vec![3]);
        // serde's sequence form: fields in order, the missing ones defaulted.
        let out = parse(br#"[null,null,null,[4,5]]"#).unwrap().unwrap();
        assert_eq!(out.token_ids, vec![4, 5]);
        assert!(parse(br#"[null,null,null,[4],null,null,null,null,null,null,null,1]"#).is_err());
        assert!(parse(b"7").is_err());
        assert!(parse(br#"{"token_ids":[1]} x"#).is_err());
    }
}
