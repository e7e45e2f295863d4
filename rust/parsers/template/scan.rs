//! The region scanner: model text split into the template's regions as it streams.
//! A delimiter is committed only once no later byte can change it (a literal no other
//! literal extends, or a pattern match followed by a byte it cannot take); text from
//! the earliest delimiter still pending is held. So any cut of the text gives the
//! regions the whole text gives.

use regex_automata::hybrid::dfa::Cache;
use regex_automata::{Anchored, Input};
use serde_json::{Map, Value};

use super::{Anchor, Template};
use crate::parsers::Tools;

/// What the scanner found, in order.
#[derive(Debug)]
pub enum Event {
    /// A region began; `raw` is its opener as written (empty for the implicit one).
    Open { field: usize, raw: String },
    /// Body text of the open region.
    Chunk { field: usize, text: String },
    /// The region ended. `raw` is its closer as written (empty at end of text or at
    /// the next opener); `cut_off`: ended by the end of the text, closer missing.
    Close {
        field: usize,
        raw: String,
        value: Result<Value, String>,
        cut_off: bool,
    },
}

struct Hit {
    start: usize,
    end: usize,
    captures: Map<String, Value>,
}

pub struct Scanner {
    buf: String,
    pos: usize,
    current: Option<usize>,
    opened: bool,
    body: String,
    captures: Map<String, Value>,
    /// One lazy-DFA cache per delimiter pattern (indexed as `Template::anchors`).
    caches: Vec<Option<Cache>>,
}

impl Scanner {
    /// `in_field`: the prompt already opened that field.
    pub fn new(template: &Template, in_field: Option<usize>) -> Self {
        let caches = template
            .anchors()
            .map(|a| a.and_then(|a| a.dfa.as_ref()).map(|d| d.create_cache()))
            .collect();
        Self {
            buf: String::new(),
            pos: 0,
            current: in_field.or(template.implicit),
            opened: in_field.is_some(),
            body: String::new(),
            captures: Map::new(),
            caches,
        }
    }

    pub fn feed(
        &mut self,
        template: &Template,
        tools: &Tools,
        text: &str,
        events: &mut Vec<Event>,
    ) {
        self.buf.push_str(text);
        self.process(template, tools, false, events);
        // What is consumed is never read again.
        self.buf.drain(..self.pos);
        self.pos = 0;
    }

    pub fn finish(&mut self, template: &Template, tools: &Tools, events: &mut Vec<Event>) {
        let rest = self.closer_rest(template);
        self.buf.push_str(&rest);
        self.process(template, tools, false, events);
        self.process(template, tools, true, events);
        self.buf.clear();
        self.pos = 0;
    }

    /// The rest of a closer that the output stopped inside, when only the next
    /// message's start anchor is missing (the stop token ended the text there).
    fn closer_rest(&self, template: &Template) -> String {
        let Some(field) = self.current.filter(|f| Some(*f) != template.implicit) else {
            return String::new();
        };
        let text = format!("{}{}", self.body, &self.buf[self.pos..]);
        let closers = template.fields[field]
            .close
            .as_ref()
            .and_then(|c| c.literals.as_ref());
        for closer in closers.into_iter().flatten() {
            for anchor in &template.message_start {
                if anchor.is_empty() || !closer.ends_with(anchor.as_str()) || closer == anchor {
                    continue;
                }
                for cut in (closer.len() - anchor.len()..closer.len()).rev() {
                    if closer.is_char_boundary(cut) && text.ends_with(&closer[..cut]) {
                        return closer[cut..].to_owned();
                    }
                }
            }
        }
        String::new()
    }

    fn process(&mut self, template: &Template, tools: &Tools, eos: bool, events: &mut Vec<Event>) {
        loop {
            let (best, hold) = self.scan(template, eos);
            if let Some((is_open, field, hit)) = best {
                if hit.start > self.pos {
                    let text = self.buf[self.pos..hit.start].to_owned();
                    self.accumulate(&text, events);
                }
                self.pos = hit.end;
                if is_open {
                    self.close(template, tools, String::new(), false, events);
                    self.current = Some(field);
                    self.opened = true;
                    self.body.clear();
                    self.captures = hit.captures;
                    let raw = self.buf[hit.start..hit.end].to_owned();
                    events.push(Event::Open { field, raw });
                } else {
                    let had_content = self.opened;
                    let raw = self.buf[hit.start..hit.end].to_owned();
                    self.close(template, tools, raw, false, events);
                    if !had_content && hit.start == hit.end {
                        break;
                    }
                }
                continue;
            }
            if eos {
                if self.pos < self.buf.len() {
                    let text = self.buf[self.pos..].to_owned();
                    self.accumulate(&text, events);
                    self.pos = self.buf.len();
                }
                let explicit = self.current.is_some_and(|f| Some(f) != template.implicit);
                self.close(template, tools, String::new(), explicit, events);
                break;
            }
            if hold > self.pos {
                let text = self.buf[self.pos..hold].to_owned();
                self.accumulate(&text, events);
                self.pos = hold;
            }
            break;
        }
    }

    /// The delimiters that matter now: the open region's closer, or, outside any
    /// explicit region, every opener and the implicit region's closer.
    fn watched(&self, template: &Template) -> Vec<(bool, usize)> {
        match self.current {
            Some(f) if Some(f) != template.implicit => {
                if template.fields[f].close.is_some() {
                    vec![(false, f)]
                } else {
                    Vec::new()
                }
            }
            _ => {
                let mut watch: Vec<(bool, usize)> = (0..template.fields.len())
                    .filter(|&f| template.fields[f].open.is_some())
                    .map(|f| (true, f))
                    .collect();
                if let Some(i) = template
                    .implicit
                    .filter(|&i| template.fields[i].close.is_some())
                {
                    watch.push((false, i));
                }
                watch
            }
        }
    }

    /// The earliest delimiter that can be committed now (longest on ties, openers
    /// first), and where held text starts.
    fn scan(&mut self, template: &Template, eos: bool) -> (Option<(bool, usize, Hit)>, usize) {
        let mut hold = self.buf.len();
        let mut best: Option<(bool, usize, Hit)> = None;
        for (is_open, field) in self.watched(template) {
            let f = &template.fields[field];
            let anchor = if is_open {
                f.open.as_ref()
            } else {
                f.close.as_ref()
            };
            let Some(anchor) = anchor else { continue };
            let cache = &mut self.caches[2 * field + usize::from(!is_open)];
            let (hit, pending) = find(anchor, cache.as_mut(), &self.buf, self.pos, eos);
            if let Some(p) = pending {
                hold = hold.min(p);
            }
            let Some(hit) = hit else { continue };
            let better = match &best {
                None => true,
                Some((b_open, b_field, b)) => {
                    let key = |start: usize, end: usize, open: bool, name: &str| {
                        (start, usize::MAX - (end - start), !open, name.to_owned())
                    };
                    key(hit.start, hit.end, is_open, &f.name)
                        < key(b.start, b.end, *b_open, &template.fields[*b_field].name)
                }
            };
            if better {
                best = Some((is_open, field, hit));
            }
        }
        if best.as_ref().is_some_and(|(_, _, b)| b.start >= hold) {
            best = None;
        }
        (best, hold)
    }

    fn accumulate(&mut self, text: &str, events: &mut Vec<Event>) {
        let Some(field) = self.current else { return };
        if text.is_empty() {
            return;
        }
        if !self.opened {
            events.push(Event::Open {
                field,
                raw: String::new(),
            });
            self.opened = true;
        }
        self.body.push_str(text);
        events.push(Event::Chunk {
            field,
            text: text.to_owned(),
        });
    }

    fn close(
        &mut self,
        template: &Template,
        tools: &Tools,
        raw: String,
        cut_off: bool,
        events: &mut Vec<Event>,
    ) {
        if let Some(field) = self.current.filter(|_| self.opened) {
            let captures = std::mem::take(&mut self.captures);
            let value = template.fields[field].value(&self.body, captures, tools);
            events.push(Event::Close {
                field,
                raw,
                value,
                cut_off,
            });
        }
        self.current = template.implicit;
        self.captures.clear();
        self.body.clear();
        self.opened = false;
    }
}

/// The leftmost match of `anchor` in `buf[from..]` that can be committed, and the
/// leftmost start of one that more text could still make or change.
fn find(
    anchor: &Anchor,
    cache: Option<&mut Cache>,
    buf: &str,
    from: usize,
    eos: bool,
) -> (Option<Hit>, Option<usize>) {
    let (complete, partial) = match &anchor.literals {
        Some(literals) => {
            let mut complete: Option<(usize, usize)> = None;
            for lit in literals {
                if let Some(at) = buf[from..].find(lit.as_str()) {
                    let cand = (from + at, from + at + lit.len());
                    if complete.map_or(true, |(s, e)| cand.0 < s || (cand.0 == s && cand.1 > e)) {
                        complete = Some(cand);
                    }
                }
            }
            let partial = if eos {
                None
            } else {
                let longest = literals.iter().map(String::len).max().unwrap_or(0);
                let low = buf
                    .len()
                    .saturating_sub(longest.saturating_sub(1))
                    .max(from);
                (low..buf.len()).find(|&p| {
                    buf.is_char_boundary(p)
                        && literals
                            .iter()
                            .any(|l| l.len() > buf.len() - p && l.starts_with(&buf[p..]))
                })
            };
            let complete = complete.map(|(start, end)| Hit {
                start,
                end,
                captures: Map::new(),
            });
            (complete, partial)
        }
        None => {
            let regex = anchor
                .regex
                .as_ref()
                .expect("a pattern anchor has its regex");
            let complete = regex.captures_from_pos(buf, from).ok().flatten().map(|c| {
                let whole = c.get(0).expect("group 0");
                let mut captures = Map::new();
                for name in regex.capture_names().flatten() {
                    if let Some(m) = c.name(name) {
                        captures.insert(name.to_owned(), Value::String(m.as_str().to_owned()));
                    }
                }
                Hit {
                    start: whole.start(),
                    end: whole.end(),
                    captures,
                }
            });
            let partial = match (eos, cache, anchor.dfa.as_ref()) {
                (false, Some(cache), Some(dfa)) => {
                    let limit = complete.as_ref().map_or(buf.len(), |h| h.start);
                    (from..limit)
                        .find(|&p| buf.is_char_boundary(p) && alive_to_end(dfa, cache, buf, p))
                }
                _ => None,
            };
            (complete, partial)
        }
    };
    let complete_start = complete.as_ref().map(|h| h.start);
    if let Some(p) = partial.filter(|&p| complete_start.map_or(true, |s| p <= s)) {
        return (None, Some(p));
    }
    match complete {
        Some(hit) => {
            // A match reaching the end of the text could still grow.
            let grows =
                !eos && hit.end == buf.len() && (anchor.literals.is_none() || anchor.can_extend);
            if grows {
                (None, Some(hit.start))
            } else {
                (Some(hit), partial)
            }
        }
        None => (None, partial),
    }
}

/// Whether the pattern, anchored at `start`, is still alive after the last byte.
fn alive_to_end(
    dfa: &regex_automata::hybrid::dfa::DFA,
    cache: &mut Cache,
    buf: &str,
    start: usize,
) -> bool {
    let input = Input::new(buf).range(start..).anchored(Anchored::Yes);
    let Ok(mut state) = dfa.start_state_forward(cache, &input) else {
        return false;
    };
    for &byte in &buf.as_bytes()[start..] {
        match dfa.next_state(cache, state, byte) {
            Ok(next) if !next.is_dead() && !next.is_quit() => state = next,
            _ => return false,
        }
    }
    true
}
