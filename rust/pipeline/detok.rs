//! The backend decoder: token ids → text, with hidden stop ids (EOS), stop
//! strings and `min_tokens`, as Dynamo's frontend does it.
//!
//! Text is released only when the decoded string grew and does not end in
//! U+FFFD, so a character split across tokens comes out whole. Stop strings are
//! matched over the tail of earlier text plus the new piece. Like Dynamo 1.6.1,
//! text that may still grow into a stop string that is cut from the output is
//! held back until it either completes (then dropped) or cannot (then released);
//! a choice that ends any other way releases what is held.
//!
//! For byte-level BPE tokenizers (GPT-2 style decoder) each token's bytes come
//! from a table built once per tokenizer, so a step never calls the tokenizer;
//! the window logic is the same as with the tokenizer's own `decode`.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, Weak};

use tokenizers::{DecoderWrapper, Tokenizer};

use super::frames::EngineOutput;

/// How decoding options are set for one choice.
#[derive(Debug, Clone, Default)]
pub struct DecodeOptions {
    pub skip_special_tokens: bool,
    /// Ids whose text is dropped and that end the choice (EOS); inside
    /// `min_tokens` they are decoded like any other token.
    pub hidden_stop_ids: Vec<u32>,
    pub stop: Vec<String>,
    pub include_stop_str_in_output: bool,
    pub min_tokens: u32,
}

/// What one frame did to the choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Step {
    /// Tokens consumed, through the one that stopped the choice.
    pub tokens: u32,
    /// A hidden stop id or a stop string ended the choice.
    pub stopped: bool,
    /// It was a stop string.
    pub by_string: bool,
}

/// A failure inside the tokenizer's decode.
#[derive(Debug, thiserror::Error)]
#[error("detokenize: {0}")]
pub struct DetokError(String);

/// Every token's bytes, as the byte-level decoder turns it back into bytes.
pub struct ByteTable {
    bytes: Vec<u8>,
    /// `bytes[ends[id - 1]..ends[id]]` is token `id` (`ends[-1]` = 0).
    ends: Vec<u32>,
    special: Vec<bool>,
}

type TableCache = Mutex<Vec<(Weak<Tokenizer>, Arc<ByteTable>)>>;

impl ByteTable {
    /// The table for this tokenizer, built on first use; `None` unless its
    /// decoder is plain byte-level.
    pub fn for_tokenizer(tokenizer: &Arc<Tokenizer>) -> Option<Arc<ByteTable>> {
        static CACHE: TableCache = Mutex::new(Vec::new());
        if !matches!(tokenizer.get_decoder(), Some(DecoderWrapper::ByteLevel(_))) {
            return None;
        }
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        cache.retain(|(weak, _)| weak.strong_count() > 0);
        if let Some((_, table)) = cache
            .iter()
            .find(|(weak, _)| std::ptr::eq(weak.as_ptr(), Arc::as_ptr(tokenizer)))
        {
            return Some(table.clone());
        }
        let table = Arc::new(Self::build(tokenizer));
        cache.push((Arc::downgrade(tokenizer), table.clone()));
        Some(table)
    }

    fn build(tokenizer: &Tokenizer) -> Self {
        // GPT-2's byte ↔ char map, inverted: printable bytes stand for
        // themselves, the rest were shifted to U+0100 and up.
        let mut char_byte = [None::<u8>; 512];
        let mut shifted = 0u32;
        for b in 0..=255u8 {
            let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            let c = if printable {
                char::from(b)
            } else {
                shifted += 1;
                char::from_u32(255 + shifted).expect("below the surrogate range")
            };
            char_byte[c as usize] = Some(b);
        }
        let max_id = tokenizer
            .get_added_tokens_decoder()
            .keys()
            .copied()
            .chain(
                tokenizer
                    .get_vocab_size(false)
                    .checked_sub(1)
                    .map(|n| n as u32),
            )
            .max()
            .unwrap_or(0);
        let added = tokenizer.get_added_vocabulary();
        let mut table = Self {
            bytes: Vec::with_capacity(8 * (max_id as usize + 1)),
            ends: Vec::with_capacity(max_id as usize + 1),
            special: Vec::with_capacity(max_id as usize + 1),
        };
        for id in 0..=max_id {
            let token = tokenizer.id_to_token(id).unwrap_or_default();
            let start = table.bytes.len();
            for c in token.chars() {
                match char_byte.get(c as usize).copied().flatten() {
                    Some(b) => table.bytes.push(b),
                    None => {
                        // Like the decoder: a token with any unmapped char is taken as UTF-8.
                        table.bytes.truncate(start);
                        table.bytes.extend_from_slice(token.as_bytes());
                        break;
                    }
                }
            }
            table.ends.push(table.bytes.len() as u32);
            table.special.push(added.is_special_token(&token));
        }
        table
    }

    fn token(&self, id: u32, skip_special_tokens: bool) -> &[u8] {
        let id = id as usize;
        if id >= self.ends.len() || (skip_special_tokens && self.special[id]) {
            return &[];
        }
        let start = if id == 0 {
            0
        } else {
            self.ends[id - 1] as usize
        };
        &self.bytes[start..self.ends[id] as usize]
    }
}

/// Incremental decoder for one choice.
pub struct Detokenizer {
    tokenizer: Arc<Tokenizer>,
    table: Option<Arc<ByteTable>>,
    options: DecodeOptions,
    /// Ids from the start of the last released window onward (tokenizer path).
    ids: Vec<u32>,
    /// Bytes of the same window (table path).
    window: Vec<u8>,
    /// Decoded text of the window's first `prefix_len` ids (or bytes).
    prefix: String,
    prefix_len: usize,
    /// The last `jail_max` bytes of checked text, where a stop string may begin.
    jail: String,
    /// Bytes at the end of `jail` not released yet: they may start a stop string.
    held: usize,
    /// The longest stop string's length.
    jail_max: usize,
    generated: u32,
    token_ends: Vec<usize>,
}

impl Detokenizer {
    pub fn new(tokenizer: Arc<Tokenizer>, options: DecodeOptions) -> Self {
        let table = ByteTable::for_tokenizer(&tokenizer);
        Self::with_table(tokenizer, table, options)
    }

    /// Always through the tokenizer's own `decode`: the reference the table path is tested against.
    pub fn without_table(tokenizer: Arc<Tokenizer>, options: DecodeOptions) -> Self {
        Self::with_table(tokenizer, None, options)
    }

    fn with_table(
        tokenizer: Arc<Tokenizer>,
        table: Option<Arc<ByteTable>>,
        options: DecodeOptions,
    ) -> Self {
        let jail_max = options.stop.iter().map(String::len).max().unwrap_or(0);
        Self {
            tokenizer,
            table,
            options,
            ids: Vec::with_capacity(8),
            window: Vec::with_capacity(32),
            prefix: String::new(),
            prefix_len: 0,
            jail: String::new(),
            held: 0,
            jail_max,
            generated: 0,
            token_ends: Vec::new(),
        }
    }

    /// Decode one frame, appending its visible text to `out`.
    pub fn step(&mut self, frame: &EngineOutput, out: &mut String) -> Result<Step, DetokError> {
        self.token_ends.clear();
        if let Some(text) = &frame.text {
            // The engine decoded already: pass it through untouched, after
            // what was held if this is the choice's last frame.
            if frame.finish_reason.is_some() {
                self.flush(out);
            }
            out.push_str(text);
            let tokens = frame.token_ids.len() as u32;
            self.generated += tokens;
            return Ok(Step {
                tokens,
                ..Step::default()
            });
        }
        let mut step = Step::default();
        for &id in &frame.token_ids {
            self.generated += 1;
            step.tokens += 1;
            let start = out.len();
            let hidden = self.options.hidden_stop_ids.contains(&id);
            // Inside min_tokens nothing stops, and a hidden id is text like any other.
            let armed = self.generated >= self.options.min_tokens;
            if armed && hidden {
                // The EOS's own text is dropped, but what was held is not part of it.
                self.flush(out);
                self.token_ends.push(out.len());
                step.stopped = true;
                return Ok(step);
            }
            // Taken out and put back: no reference-count traffic per token.
            match self.table.take() {
                Some(table) => {
                    self.table_next(&table, id, out);
                    self.table = Some(table);
                }
                None => self.decode_next(id, out)?,
            }
            if armed && self.jail_max > 0 && out.len() > start && self.cut_at_stop(out, start) {
                step.stopped = true;
                step.by_string = true;
            }
            self.token_ends.push(out.len());
            if step.stopped {
                return Ok(step);
            }
        }
        if frame.finish_reason.is_some() {
            // The engine ended the choice: what was held can no longer become a stop string.
            self.flush(out);
            if let Some(end) = self.token_ends.last_mut() {
                *end = out.len();
            }
        }
        Ok(step)
    }

    /// Release the text held as a possible start of a stop string (the choice is ending).
    pub fn flush(&mut self, out: &mut String) {
        if self.held > 0 {
            out.push_str(&self.jail[self.jail.len() - self.held..]);
            self.held = 0;
        }
    }

    /// Where each token of the last step ended in its `out` (for per-token log probs).
    pub fn token_ends(&self) -> &[usize] {
        &self.token_ends
    }

    fn decode(&self, ids: &[u32]) -> Result<String, DetokError> {
        self.tokenizer
            .decode(ids, self.options.skip_special_tokens)
            .map_err(|e| DetokError(e.to_string()))
    }

    fn decode_next(&mut self, id: u32, out: &mut String) -> Result<(), DetokError> {
        self.ids.push(id);
        let text = self.decode(&self.ids)?;
        if text.len() <= self.prefix.len() || text.ends_with('\u{FFFD}') {
            return Ok(());
        }
        match text.strip_prefix(self.prefix.as_str()) {
            Some(new) => out.push_str(new),
            // The window decoded differently with more context; release the new
            // token's own text rather than nothing.
            None => out.push_str(&self.decode(&[id])?),
        }
        self.ids.drain(..self.prefix_len);
        self.prefix = self.decode(&self.ids)?;
        self.prefix_len = self.ids.len();
        Ok(())
    }

    /// `decode_next` on bytes: the same window and prefix, no tokenizer call.
    fn table_next(&mut self, table: &ByteTable, id: u32, out: &mut String) {
        let token = table.token(id, self.options.skip_special_tokens);
        self.window.extend_from_slice(token);
        let text = String::from_utf8_lossy(&self.window);
        if text.len() <= self.prefix.len() || text.ends_with('\u{FFFD}') {
            return;
        }
        match text.strip_prefix(self.prefix.as_str()) {
            Some(new) => out.push_str(new),
            None => out.push_str(&String::from_utf8_lossy(token)),
        }
        self.window.drain(..self.prefix_len);
        self.prefix.clear();
        match String::from_utf8_lossy(&self.window) {
            Cow::Borrowed(s) => self.prefix.push_str(s),
            Cow::Owned(s) => self.prefix = s,
        }
        self.prefix_len = self.window.len();
    }

    /// Append the piece `out[start..]` to the jail (the last bytes of text) and
    /// look for the stop strings in list order. On a match `out` gets the text
    /// up to the stop string (through it when it is kept); otherwise everything
    /// but a tail that could still start a cut stop string, which is held.
    fn cut_at_stop(&mut self, out: &mut String, start: usize) -> bool {
        let release_from = self.jail.len() - self.held;
        self.jail.push_str(&out[start..]);
        out.truncate(start);
        let found = self
            .options
            .stop
            .iter()
            .find_map(|stop| self.jail.find(stop.as_str()).map(|at| (at, stop.len())));
        if let Some((at, len)) = found {
            let end = if self.options.include_stop_str_in_output {
                at + len
            } else {
                at
            };
            if end > release_from {
                out.push_str(&self.jail[release_from..end]);
            }
            self.held = 0;
            return true;
        }
        self.held = if self.options.include_stop_str_in_output {
            0
        } else {
            self.stop_prefix_at_end()
        };
        out.push_str(&self.jail[release_from..self.jail.len() - self.held]);
        let mut cut = self.jail.len().saturating_sub(self.jail_max);
        while !self.jail.is_char_boundary(cut) {
            cut -= 1;
        }
        self.jail.drain(..cut);
        false
    }

    /// The longest end of the jail that is a proper prefix of a stop string
    /// (in bytes, starting on a character boundary).
    fn stop_prefix_at_end(&self) -> usize {
        let jail = self.jail.as_bytes();
        let mut best = 0;
        for stop in &self.options.stop {
            let longest = stop.len().saturating_sub(1).min(jail.len());
            for len in (best + 1..=longest).rev() {
                let from = jail.len() - len;
                if self.jail.is_char_boundary(from) && stop.as_bytes().starts_with(&jail[from..]) {
                    best = len;
                    break;
                }
            }
        }
        best
    }
}
