//! Prompt tokenization, and what lets a prompt that cannot fit the context be
//! refused before it is tokenized: tokenizing megabytes holds hundreds of bytes of
//! bookkeeping per token for seconds.

use tokenizers::models::ModelWrapper;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{SplitDelimiterBehavior, Tokenizer};

/// The most prompt bytes one token can stand for, when this tokenizer certainly
/// turns every byte of a text into part of some token; then a text of `n` bytes
/// has at least `n / max` tokens. `None` when text may be dropped or one token may
/// span an unbounded run: any normalizer, a pre-tokenizer that removes text, a model
/// that is not byte-level BPE over the whole byte alphabet, an added token that
/// strips the whitespace around it, truncation.
pub fn max_bytes_per_token(tokenizer: &Tokenizer) -> Option<usize> {
    let no_normalizer = match tokenizer.get_normalizer() {
        None => true,
        Some(NormalizerWrapper::Sequence(steps)) => steps.as_ref().is_empty(),
        Some(_) => false,
    };
    let byte_level = tokenizer
        .get_pre_tokenizer()
        .is_some_and(|p| keeps_every_byte(p) && has_byte_level(p));
    let ModelWrapper::BPE(bpe) = tokenizer.get_model() else {
        return None;
    };
    if !no_normalizer || !byte_level || tokenizer.get_truncation().is_some() {
        return None;
    }
    let vocab = bpe.get_vocab();
    // With a token for every byte, BPE never drops one as unknown.
    let every_byte = ByteLevel::alphabet()
        .into_iter()
        .all(|c| vocab.contains_key(c.encode_utf8(&mut [0; 4]) as &str));
    let added = tokenizer.get_added_tokens_decoder();
    if !every_byte || added.values().any(|t| t.lstrip || t.rstrip) {
        return None;
    }
    // A byte-level token is one alphabet character per byte.
    let longest = vocab.keys().map(|t| t.chars().count()).max()?;
    let longest_added = added.values().map(|t| t.content.len()).max().unwrap_or(0);
    Some(longest.max(longest_added).max(1))
}

/// Every pre-tokenization step splits without removing anything.
fn keeps_every_byte(pre: &PreTokenizerWrapper) -> bool {
    match pre {
        PreTokenizerWrapper::ByteLevel(_) | PreTokenizerWrapper::Digits(_) => true,
        PreTokenizerWrapper::Split(split) => split.behavior != SplitDelimiterBehavior::Removed,
        PreTokenizerWrapper::Punctuation(p) => p.behavior != SplitDelimiterBehavior::Removed,
        PreTokenizerWrapper::Sequence(steps) => steps.as_ref().iter().all(keeps_every_byte),
        _ => false,
    }
}

fn has_byte_level(pre: &PreTokenizerWrapper) -> bool {
    match pre {
        PreTokenizerWrapper::ByteLevel(_) => true,
        PreTokenizerWrapper::Sequence(steps) => steps.as_ref().iter().any(has_byte_level),
        _ => false,
    }
}

/// The fewest tokens a prompt of `bytes` bytes can have (0 when unknown).
pub fn min_tokens(bytes: usize, max_bytes_per_token: Option<usize>) -> usize {
    max_bytes_per_token.map_or(0, |max| bytes.div_ceil(max))
}

/// Above this many prompt bytes, memory the tokenizer freed is handed back to the
/// system (its bookkeeping for a large prompt is many times the prompt's size).
const RELEASE_AFTER_BYTES: usize = 1 << 20;

/// Token ids of `text`, no special tokens added (as the reference encodes prompts).
pub fn encode(tokenizer: &Tokenizer, text: &str) -> tokenizers::Result<Vec<u32>> {
    let ids = tokenizer
        .encode_fast(text, false)
        .map(|encoding| encoding.get_ids().to_vec());
    if text.len() >= RELEASE_AFTER_BYTES {
        release_freed_memory();
    }
    ids
}

/// glibc keeps freed heap pages mapped; trimming returns them to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_freed_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_freed_memory() {}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::{json, Value};

    /// The packaged tiny model's tokenizer (byte-level BPE), edited by `change`.
    fn tiny(change: impl FnOnce(&mut Value)) -> Tokenizer {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/python/shakedown/models/tiny/tokenizer.json"
        );
        let mut doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        change(&mut doc);
        doc.to_string().parse().unwrap()
    }

    #[test]
    fn byte_level_bpe_has_a_bound() {
        let bound = max_bytes_per_token(&tiny(|_| {})).unwrap();
        assert!(bound >= 1);
    }

    #[test]
    fn no_bound_when_text_may_vanish_or_merge_without_limit() {
        let changes: [fn(&mut Value); 5] = [
            |t| t["normalizer"] = json!({"type": "Lowercase"}),
            |t| t["pre_tokenizer"] = json!({"type": "Whitespace"}),
            |t| {
                t["pre_tokenizer"] = json!({"type": "Sequence", "pretokenizers": [
                    {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": false},
                    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]})
            },
            |t| t["added_tokens"][0]["lstrip"] = json!(true),
            |t| {
                t["truncation"] = json!({"direction": "Right", "max_length": 8,
                    "strategy": "LongestFirst", "stride": 0})
            },
        ];
        for change in changes {
            assert_eq!(max_bytes_per_token(&tiny(change)), None);
        }
    }

    #[test]
    fn min_tokens_rounds_up_and_knows_when_it_knows_nothing() {
        assert_eq!(min_tokens(10, Some(4)), 3);
        assert_eq!(min_tokens(0, Some(4)), 0);
        assert_eq!(min_tokens(10, None), 0);
    }
}
