//! The backend decoder on its own: token ids → text with hidden EOS, stop strings,
//! `min_tokens`, special tokens, and the byte table against the tokenizer's decode.

mod common;

use _core::pipeline::detok::{DecodeOptions, Detokenizer};
use _core::pipeline::frames::{EngineOutput, FinishReason};
use common::{encode, tokenizer, with_eos, EOS};

fn decode_all(ids: &[u32], options: DecodeOptions) -> (Vec<String>, bool) {
    decode_with(Detokenizer::new(tokenizer(), options), ids)
}

fn decode_with(mut detok: Detokenizer, ids: &[u32]) -> (Vec<String>, bool) {
    let mut pieces = Vec::new();
    for &id in ids {
        let frame = EngineOutput {
            token_ids: vec![id],
            ..Default::default()
        };
        let mut piece = String::new();
        let step = detok.step(&frame, &mut piece).unwrap();
        pieces.push(piece);
        if step.stopped {
            return (pieces, true);
        }
    }
    (pieces, false)
}

fn eos_options() -> DecodeOptions {
    DecodeOptions {
        hidden_stop_ids: vec![EOS],
        ..Default::default()
    }
}

#[test]
fn split_characters_come_out_whole() {
    let ids = encode("Grüße, 世界! 👋");
    let (pieces, stopped) = decode_all(&ids, DecodeOptions::default());
    assert!(!stopped);
    assert_eq!(pieces.concat(), "Grüße, 世界! 👋");
    assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')));
    // The emoji spans several tokens: the first ones release nothing.
    assert!(pieces.iter().any(String::is_empty), "{pieces:?}");
}

#[test]
fn hidden_eos_stops_without_text() {
    let (pieces, stopped) = decode_all(&with_eos("Hi there"), eos_options());
    assert!(stopped);
    assert_eq!(pieces.last().unwrap(), "");
    assert_eq!(pieces.concat(), "Hi there");
}

#[test]
fn special_tokens_kept_unless_skipped() {
    // BOS is special in this tokenizer; `<think>` is an ordinary added token.
    let ids = [&[0][..], &encode("<think>a</think>b")].concat();
    let (kept, _) = decode_all(&ids, DecodeOptions::default());
    assert_eq!(kept.concat(), "<｜begin▁of▁sentence｜><think>a</think>b");
    let skip = DecodeOptions {
        skip_special_tokens: true,
        ..Default::default()
    };
    let (skipped, _) = decode_all(&ids, skip);
    assert_eq!(skipped.concat(), "<think>a</think>b");
}

#[test]
fn stop_string_cuts_the_current_piece_only() {
    let options = DecodeOptions {
        stop: vec!["How".into()],
        ..eos_options()
    };
    let (pieces, stopped) = decode_all(&with_eos("Hello there! How can I help?"), options);
    assert!(stopped);
    assert_eq!(pieces.concat(), "Hello there! ");
    assert_eq!(pieces.last().unwrap(), " ");
}

#[test]
fn stop_string_spanning_tokens_is_held_back_then_cut() {
    // "lo th" starts inside "Hello" and ends in " there": "lo" is held until the
    // match completes, then dropped (Dynamo 1.6.1, as the parity suite shows).
    let options = DecodeOptions {
        stop: vec!["lo th".into()],
        ..eos_options()
    };
    let (pieces, stopped) = decode_all(&with_eos("Hello there!"), options);
    assert!(stopped);
    assert_eq!(pieces.concat(), "Hel");
}

#[test]
fn held_stop_string_start_is_released_when_it_cannot_match() {
    let options = DecodeOptions {
        stop: vec!["lo th".into()],
        ..eos_options()
    };
    // "lo" is held after "Hello", released whole once "!" rules the match out.
    let (pieces, stopped) = decode_all(&with_eos("Hello!"), options.clone());
    assert!(stopped, "ends on the EOS");
    assert_eq!(pieces.concat(), "Hello!");
    // Held text at the EOS is released, not dropped.
    let (pieces, _) = decode_all(&with_eos("Hello"), options.clone());
    assert_eq!(pieces.concat(), "Hello");
    // A stop string kept in the output is never held.
    let kept = DecodeOptions {
        include_stop_str_in_output: true,
        ..options
    };
    let (pieces, _) = decode_all(&with_eos("Hello there!"), kept);
    assert_eq!(pieces.concat(), "Hello th");
}

#[test]
fn stop_strings_are_tried_in_list_order() {
    // Both match in " there"; the first listed wins even though it starts later.
    let options = DecodeOptions {
        stop: vec!["ere".into(), "the".into()],
        ..eos_options()
    };
    let (pieces, _) = decode_all(&with_eos("Hello there!"), options);
    assert_eq!(pieces.concat(), "Hello th");
}

#[test]
fn include_stop_str_keeps_the_match() {
    let options = DecodeOptions {
        stop: vec!["How".into()],
        include_stop_str_in_output: true,
        ..eos_options()
    };
    let (pieces, _) = decode_all(&with_eos("Hello there! How can I help?"), options);
    assert_eq!(pieces.concat(), "Hello there! How");
}

#[test]
fn min_tokens_holds_stops_back() {
    let ids = with_eos("Hello there!");
    let early_eos = [&[EOS][..], &ids].concat();
    let options = DecodeOptions {
        min_tokens: 2,
        ..eos_options()
    };
    let (pieces, stopped) = decode_all(&early_eos, options);
    assert!(stopped);
    // Inside min_tokens an EOS is not a stop: Dynamo decodes it like any token.
    assert_eq!(pieces.concat(), "<｜end▁of▁sentence｜>Hello there!");
    assert_eq!(pieces.len(), early_eos.len());
}

#[test]
fn engine_text_passes_through() {
    let mut detok = Detokenizer::new(tokenizer(), eos_options());
    let frame = EngineOutput {
        token_ids: vec![5, 6],
        text: Some("given".into()),
        ..Default::default()
    };
    let mut piece = String::new();
    let step = detok.step(&frame, &mut piece).unwrap();
    assert_eq!(piece, "given");
    assert_eq!(step.tokens, 2);
}

#[test]
fn byte_table_matches_the_tokenizers_decode() {
    // Pseudo-random ids over the whole vocabulary (byte tokens, split
    // characters, added and special tokens) and over the mocker's 1000..2000.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |range: u32| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % u64::from(range)) as u32
    };
    let vocab = tokenizer().get_vocab_size(true) as u32;
    let mut runs: Vec<Vec<u32>> = vec![
        encode("<think>ü</think>Grüße, 世界! 👋 <tool_call>{\"a\": 1}</tool_call>"),
        (0..400).map(|_| 1000 + next(1000)).collect(),
        (0..400).map(|_| next(vocab)).collect(),
    ];
    runs.push((0..400).map(|_| next(300)).collect());
    for ids in &runs {
        for skip_special_tokens in [false, true] {
            let options = DecodeOptions {
                skip_special_tokens,
                ..Default::default()
            };
            let fast = decode_with(Detokenizer::new(tokenizer(), options.clone()), ids);
            let slow = decode_with(Detokenizer::without_table(tokenizer(), options), ids);
            assert_eq!(
                fast, slow,
                "skip_special_tokens={skip_special_tokens} ids={ids:?}"
            );
        }
    }
}

#[test]
fn held_stop_string_start_is_released_when_the_engine_ends() {
    let options = DecodeOptions {
        stop: vec!["lo th".into()],
        ..eos_options()
    };
    let mut detok = Detokenizer::new(tokenizer(), options);
    let ids = encode("Hello");
    let mut text = String::new();
    for (i, &id) in ids.iter().enumerate() {
        let frame = EngineOutput {
            token_ids: vec![id],
            finish_reason: (i + 1 == ids.len()).then_some(FinishReason::Length),
            ..Default::default()
        };
        let step = detok.step(&frame, &mut text).unwrap();
        assert!(!step.stopped);
    }
    assert_eq!(text, "Hello");
}
