//! Dynamo 1.6.1's harmony tool parser over a whole text, as its tool-call jail
//! parses held text and its unary aggregator re-parses a chat answer holding
//! `<|channel|>` (tools in the request or not). Only the pipeline's reference
//! mode uses it; the standalone harmony parser streams calls as they close.
//! What the live reference does, as the differential fuzzer pinned it down:
//!
//! - a text without any Harmony marker reads as nothing (all of it header);
//! - the text is first read as Harmony messages started inside an assistant
//!   header (the header rules are [`parse_header`]'s); `<|end|>`, `<|return|>`
//!   and `<|call|>` end a body, anything but `<|start|>` after one, or a header
//!   still open at the end, fails the reading. Read, `final` bodies and
//!   recipient-less `commentary` bodies are the content (as written), a
//!   `commentary` body to `functions.NAME` is a call once the text holds a
//!   `<|call|>`, whichever marker ended it (cut by the end of the text,
//!   nothing), the rest is dropped;
//! - failed, calls are recovered from `<|channel|>commentary to=functions.NAME
//!   …<|message|>ARGS<|call|>` blocks (`analysis` too, an optional
//!   `<|start|>assistant` before them), and the text around them is cleaned up,
//!   in this order: `commentary` blocks (to their `<|call|>` or the end) and a
//!   `commentary` header left open go, `analysis` blocks (to `<|call|>`/`<|end|>`
//!   or the end) go, a `final` block gives its body, `<|message|>` payloads (to
//!   `<|call|>` or the end) go, the Harmony markers are stripped and the result
//!   is trimmed;
//! - call arguments are compact JSON, or the trimmed text when it is not JSON.

use std::sync::OnceLock;

// The Harmony format's special tokens, for every harmony parser.
pub(crate) const START: &str = "<|start|>";
pub(crate) const CHANNEL: &str = "<|channel|>";
pub(crate) const MESSAGE: &str = "<|message|>";
pub(crate) const CONSTRAIN: &str = "<|constrain|>";
pub(crate) const END: &str = "<|end|>";
pub(crate) const RETURN: &str = "<|return|>";
pub(crate) const CALL: &str = "<|call|>";
pub(crate) const MARKERS: &[&str] = &[START, CHANNEL, MESSAGE, CONSTRAIN, END, RETURN, CALL];
const ROLES: &[&str] = &["user", "assistant", "system", "developer", "tool"];
/// Written before a block's channel by a model that restates its header.
const ASSISTANT_START: &str = "<|start|>assistant";

/// A header openai-harmony accepts.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Header<'a> {
    pub role: String,
    /// The word after `<|channel|>`.
    pub channel: Option<&'a str>,
    pub recipient: Option<String>,
    /// The header from just after `<|channel|>` on.
    pub after_channel: Option<&'a str>,
    /// Nothing beside the role and the channel (no recipient, no content type).
    pub bare: bool,
}

/// Read a message header: the channel after `<|channel|>`; beside it at most a
/// recipient and a content type (the role dropped first: `role_known` for the
/// assistant's first header; after `<|start|>` a role comes first). More words,
/// or an empty channel, do not parse.
pub(crate) fn parse_header(header: &str, role_known: bool) -> Option<Header<'_>> {
    let (channel, rest, after_channel) = match header.find(CHANNEL) {
        Some(at) => {
            let after = &header[at + CHANNEL.len()..];
            let len = after
                .find(|c: char| c.is_whitespace() || c == '<')
                .unwrap_or(after.len());
            if len == 0 {
                return None;
            }
            let rest = format!("{}{}", &header[..at], &after[len..]);
            (Some(&after[..len]), rest, Some(after))
        }
        None => (None, header.to_owned(), None),
    };
    let rest = rest.trim().replace(CONSTRAIN, &format!(" {CONSTRAIN}"));
    let mut parts: Vec<&str> = rest.split_ascii_whitespace().collect();
    let mut role = "assistant";
    if !role_known {
        let first = *parts.first()?;
        if ROLES.contains(&first) {
            role = first;
        } else if parts.len() > 1 || first.starts_with("to=") {
            parts.remove(0);
            role = "tool";
        } else {
            return None;
        }
    }
    if parts.first() == Some(&role) {
        parts.remove(0);
    }
    let bare = parts.is_empty();
    let mut recipient = None;
    if let Some(last) = parts.pop() {
        // A lone word is the recipient, a content type too (`<|channel|>commentary
        // <|constrain|>json` has the recipient `<|constrain|>json`; live-checked).
        if last.starts_with("to=") || parts.is_empty() {
            recipient = Some(last);
        } else {
            recipient = parts.pop();
        }
    }
    if !parts.is_empty() {
        return None;
    }
    Some(Header {
        role: role.to_owned(),
        channel,
        recipient: recipient.map(str::to_owned),
        after_channel,
        bare,
    })
}

/// The reference's reading of a whole text: its calls (name, arguments) and content.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct WholeParse {
    pub calls: Vec<(String, String)>,
    pub content: String,
}

/// Parse `text` as Dynamo 1.6.1's harmony tool parser does (see the module doc).
pub fn parse_whole(text: &str) -> WholeParse {
    // A text without any Harmony marker is all header: it reads as nothing
    // (live-checked: a jailed `<|c x y` or `<|channel|\nx y` releases `""`).
    if !MARKERS.iter().any(|m| text.contains(m)) {
        return WholeParse::default();
    }
    read_messages(text).unwrap_or_else(|| {
        let recovered = recover(text);
        // Without `<|channel|>` or `<|message|>` there is nothing to recover: a
        // text left after cleaning goes out as written (live-checked: a jailed
        // `<|start|>  x<|end|>` releases itself, `<|start|>  <|end|>` `""`).
        if recovered.content.is_empty() || text.contains(CHANNEL) || text.contains(MESSAGE) {
            recovered
        } else {
            WholeParse {
                calls: Vec::new(),
                content: text.to_owned(),
            }
        }
    })
}

/// The earliest Harmony marker at or after `from`: (start, marker).
fn next_marker(text: &str, from: usize) -> Option<(usize, &'static str)> {
    let mut at = from;
    while let Some(found) = text[at..].find("<|") {
        let start = at + found;
        if let Some(m) = MARKERS.iter().find(|m| text[start..].starts_with(**m)) {
            return Some((start, m));
        }
        at = start + 2;
    }
    None
}

enum Reading {
    Header { role_known: bool },
    Body,
    ExpectStart,
}

/// The text as Harmony messages; `None` where openai-harmony fails it.
fn read_messages(text: &str) -> Option<WholeParse> {
    let mut out = WholeParse::default();
    let mut state = Reading::Header { role_known: true };
    let mut header = String::new();
    let mut body = String::new();
    let mut open: Option<(String, Option<String>, Option<String>)> = None;
    // Dynamo reads a message to `functions.…` as a call, `<|end|>` ending it too,
    // once the text holds a `<|call|>` (seed 20261250 #161, live-checked).
    let calls_counted = text.contains(CALL);
    let mut pos = 0;
    loop {
        let next = next_marker(text, pos);
        let plain = &text[pos..next.map_or(text.len(), |(at, _)| at)];
        match state {
            Reading::Header { .. } => header.push_str(plain),
            Reading::Body => body.push_str(plain),
            Reading::ExpectStart if !plain.is_empty() => return None,
            Reading::ExpectStart => {}
        }
        let Some((at, marker)) = next else { break };
        pos = at + marker.len();
        state = match state {
            Reading::Header { role_known } if marker == MESSAGE => {
                let parsed = parse_header(&header, role_known)?;
                open = Some((
                    parsed.role,
                    parsed.channel.map(str::to_owned),
                    parsed.recipient,
                ));
                header.clear();
                Reading::Body
            }
            Reading::Header { role_known } => {
                header.push_str(marker);
                Reading::Header { role_known }
            }
            Reading::Body if [END, RETURN, CALL].contains(&marker) => {
                close_message(open.take(), &mut body, calls_counted, &mut out);
                Reading::ExpectStart
            }
            Reading::Body => {
                body.push_str(marker);
                Reading::Body
            }
            Reading::ExpectStart if marker == START => Reading::Header { role_known: false },
            Reading::ExpectStart => return None,
        };
    }
    match state {
        Reading::Header { .. } => None,
        Reading::Body => {
            close_message(open.take(), &mut body, false, &mut out);
            Some(out)
        }
        Reading::ExpectStart => Some(out),
    }
}

/// One message read: a call (only where `called`), content, or nothing.
fn close_message(
    open: Option<(String, Option<String>, Option<String>)>,
    body: &mut String,
    called: bool,
    out: &mut WholeParse,
) {
    let text = std::mem::take(body);
    let Some((role, channel, recipient)) = open else {
        return;
    };
    if role != "assistant" {
        return;
    }
    // An empty recipient (`to=`) is none to Dynamo's parser (live-checked:
    // `<|channel|>commentary to=<|message|>x` says `x`).
    let recipient = recipient.filter(|r| !r.strip_prefix("to=").unwrap_or(r).is_empty());
    match (channel.as_deref(), recipient) {
        (Some("commentary"), Some(recipient)) => {
            let recipient = recipient.strip_prefix("to=").unwrap_or(&recipient);
            // The name is all the recipient after `functions.`, dots and all
            // (live-checked: `to=functions.a.b` names `a.b`).
            if let Some(name) = recipient.strip_prefix("functions.") {
                if called && !name.is_empty() {
                    out.calls.push((name.to_owned(), arguments(&text)));
                }
            }
        }
        (Some("final"), _) | (Some("commentary"), None) => out.content.push_str(&text),
        _ => {}
    }
}

/// Call arguments as the reference hands them out: compact JSON, else the text.
fn arguments(raw: &str) -> String {
    let raw = raw.trim();
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(value) => value.to_string(),
        Err(_) => raw.to_owned(),
    }
}

/// Where a block of `channel` opens at or after `from`: (start, end of
/// `<|channel|>CHANNEL`), the start taking in a `<|start|>assistant` right before.
fn find_block(text: &str, from: usize, channel: &str) -> Option<(usize, usize)> {
    let mut at = from;
    loop {
        let found = at + text[at..].find(CHANNEL)?;
        let word_end = found + CHANNEL.len();
        if text[word_end..].starts_with(channel) {
            return Some((block_start(text, from, found), word_end + channel.len()));
        }
        at = word_end;
    }
}

/// Where a block whose `<|channel|>` is at `found` starts: at a
/// `<|start|>assistant` right before it (at or after `from`), else at `found`.
/// Matched with `ends_with`: the bytes before may cut a character.
fn block_start(text: &str, from: usize, found: usize) -> usize {
    match found.checked_sub(ASSISTANT_START.len()) {
        Some(s) if s >= from && text[..found].ends_with(ASSISTANT_START) => s,
        _ => found,
    }
}

/// Where the first of `closers` at or after `from` begins and ends, or the end
/// of the text (twice).
fn close_at(text: &str, from: usize, closers: &[&str]) -> (usize, usize) {
    closers
        .iter()
        .filter_map(|c| {
            text[from..]
                .find(c)
                .map(|at| (from + at, from + at + c.len()))
        })
        .min()
        .unwrap_or((text.len(), text.len()))
}

/// The text with each block of `channel` (`<|channel|>CHANNEL…<|message|>BODY`
/// up to one of `closers` or the end; with `bare`, nothing between the channel
/// and `<|message|>`) replaced by its body, or removed.
fn rewrite_blocks(
    text: &str,
    channel: &str,
    bare: bool,
    closers: &[&str],
    keep_body: bool,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    let mut from = 0;
    while let Some((start, word_end)) = find_block(text, from, channel) {
        let message = if bare {
            if !text[word_end..].starts_with(MESSAGE) {
                from = word_end;
                continue;
            }
            word_end
        } else {
            match text[word_end..].find(MESSAGE) {
                Some(at) => word_end + at,
                None => break,
            }
        };
        let body = message + MESSAGE.len();
        let (body_end, end) = close_at(text, body, closers);
        out.push_str(&text[pos..start]);
        if keep_body {
            out.push_str(&text[body..body_end]);
        }
        pos = end;
        from = end;
    }
    out.push_str(&text[pos..]);
    out
}

/// A failed reading: calls from their blocks, and the rest cleaned up.
fn recover(text: &str) -> WholeParse {
    let mut out = WholeParse::default();
    let mut residual = String::with_capacity(text.len());
    let mut pos = 0;
    while let Some((start, name, args, end)) = next_call_block(text, pos) {
        residual.push_str(&text[pos..start]);
        out.calls.push((name.to_owned(), arguments(args)));
        pos = end;
    }
    residual.push_str(&text[pos..]);
    // In Dynamo's order: a commentary block can swallow the `<|message|>` an
    // earlier analysis header waits for (live-checked: `<|channel|>analysis
    // <|messag…x<|channel|>commentary to=functions.f<|message|>{` says
    // `analysis<|messag…x`; seed 20261223 #4866).
    let text = rewrite_blocks(&residual, "commentary", false, &[CALL], false);
    let text = match find_block(&text, 0, "commentary") {
        Some((start, _)) => text[..start].to_owned(),
        None => text,
    };
    let text = rewrite_blocks(&text, "analysis", false, &[CALL, END], false);
    let text = rewrite_blocks(&text, "final", true, &[RETURN, END], true);
    let text = strip_payloads(&text);
    let mut text = text;
    for marker in MARKERS {
        text = text.replace(marker, "");
    }
    out.content = text.trim().to_owned();
    out
}

/// `<|message|>` payloads (to `<|call|>` or the end) removed.
fn strip_payloads(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    while let Some(at) = text[pos..].find(MESSAGE).map(|at| pos + at) {
        out.push_str(&text[pos..at]);
        pos = close_at(text, at + MESSAGE.len(), &[CALL]).1;
    }
    out.push_str(&text[pos..]);
    out
}

/// A recovered call's name: Dynamo's `[\w.\-]+`, whose `\w` is Unicode's word
/// class (letters, marks, decimal digits, connector punctuation, joiners), not
/// `char::is_alphanumeric` (live-checked: `to=functions.g½weather` names `g`,
/// `to=functions.cafe\u{301}` names `cafe\u{301}`; seed 20261226 #2925).
fn recovered_name() -> &'static fancy_regex::Regex {
    static NAME: OnceLock<fancy_regex::Regex> = OnceLock::new();
    NAME.get_or_init(|| fancy_regex::Regex::new(r"\A[\w.\-]+").expect("name pattern"))
}

/// The next call block at or after `from`: (start, name, arguments, end).
fn next_call_block(text: &str, from: usize) -> Option<(usize, &str, &str, usize)> {
    const TO_FUNCTIONS: &str = " to=functions.";
    let mut at = from;
    loop {
        let found = at + text[at..].find(CHANNEL)?;
        let word = found + CHANNEL.len();
        at = word;
        let Some(channel) = ["commentary", "analysis"]
            .into_iter()
            .find(|c| text[word..].starts_with(c))
        else {
            continue;
        };
        let name_start = word + channel.len();
        if !text[name_start..].starts_with(TO_FUNCTIONS) {
            continue;
        }
        let name_start = name_start + TO_FUNCTIONS.len();
        let Some(name) = recovered_name().find(&text[name_start..]).ok().flatten() else {
            continue;
        };
        let name_end = name_start + name.end();
        let message = name_end + text[name_end..].find(MESSAGE)?;
        let args_start = message + MESSAGE.len();
        let call = args_start + text[args_start..].find(CALL)?;
        return Some((
            block_start(text, from, found),
            &text[name_start..name_end],
            &text[args_start..call],
            call + CALL.len(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(text: &str) -> String {
        parse_whole(text).content
    }

    #[test]
    fn blocks_after_multibyte_text_do_not_cut_a_character() {
        // 19 bytes before `<|channel|>`: one past `<|start|>assistant`'s length
        // lands inside the first `é`.
        assert_eq!(
            content("x ßeok ok<|message|><|channel|>commentary"),
            "x ßeok ok"
        );
        let parse =
            parse_whole("éééééééééx<|channel|>commentary to=functions.f<|message|>{}<|call|>");
        assert_eq!(parse.calls, [("f".to_owned(), "{}".to_owned())]);
        assert_eq!(parse.content, "éééééééééx");
    }

    #[test]
    fn messages_that_read_keep_final_and_plain_commentary_bodies() {
        assert_eq!(content("hi<|channel|>final<|message|>yo"), "yo");
        assert_eq!(content("<|channel|>commentary<|message|>yo"), "yo");
        // an empty recipient is none
        assert_eq!(content("<|channel|>commentary to=<|message|>yo"), "yo");
        assert_eq!(content("<|channel|>commentary to=g<|message|>yo"), "");
        assert_eq!(content("  A  <|channel|>final<|message|>  B  "), "  B  ");
        assert_eq!(
            content("A<|channel|>final<|message|>B<|channel|>final<|message|>C"),
            "B<|channel|>final<|message|>C"
        );
        // analysis, another channel, a commentary body to someone else: nothing
        assert_eq!(content("hi<|channel|>analysis<|message|>think"), "");
        assert_eq!(content("<|channel|>x<|message|>B"), "");
        assert_eq!(content("hi<|channel|>commentary<|message|>yo"), "");
        assert_eq!(content("A<|message|>B<|channel|>x"), "");
    }

    #[test]
    fn a_call_that_reads_is_a_call() {
        let parse = parse_whole(
            "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{\"tz\": 1}<|call|>",
        );
        assert_eq!(
            parse.calls,
            [("get_time".to_owned(), r#"{"tz":1}"#.to_owned())]
        );
        assert_eq!(parse.content, "");
        let parse =
            parse_whole("<|channel|>commentary to=functions.get_time<|message|>{tz:1<|call|>");
        assert_eq!(parse.calls, [("get_time".to_owned(), "{tz:1".to_owned())]);
        let cut = parse_whole("<|channel|>commentary to=functions.get_time<|message|>{\"a\":1}");
        assert_eq!(cut, WholeParse::default());
    }

    #[test]
    fn a_failed_reading_recovers_calls_and_cleans_the_rest() {
        let parse = parse_whole(
            "hi <|call|><|channel|>commentary to=functions.get_time<|message|>{\"tz\":\"x\"}<|call|>",
        );
        assert_eq!(
            parse.calls,
            [("get_time".to_owned(), r#"{"tz":"x"}"#.to_owned())]
        );
        assert_eq!(parse.content, "hi");
        assert_eq!(content("  hi  <|channel|>x"), "hi  x");
        assert_eq!(content("A <|constrain|> B<|channel|>x"), "A  Bx");
        assert_eq!(content("A<|channel|>commentary to=functions.get_time"), "A");
        assert_eq!(content("A<|channel|>commentary x y<|message|>B"), "A");
        assert_eq!(
            content("A<|channel|>analysis to=functions.x y<|message|>B"),
            "A"
        );
        assert_eq!(
            content("A<|channel|>commentary to=functions.get_time<|message|>{}<|call|>\nB<|channel|>final<|message|>C"),
            "A\nBC"
        );
        assert_eq!(
            content("A<|channel|>commentary to=functions.get_time<|message|>{}<|call|>\nB<|message|>C<|channel|>D"),
            "A\nB"
        );
        assert_eq!(content("<|call|>"), "");
        assert_eq!(
            content(
                "<|channel|>analysis<|messag x<|channel|>commentary to=functions.f<|message|>{"
            ),
            "analysis<|messag x"
        );
    }

    #[test]
    fn call_names_follow_the_reading_that_found_them() {
        let names = |text: &str| -> Vec<String> {
            parse_whole(text)
                .calls
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        // Read as messages: all of the recipient after `functions.`.
        let read = |name: &str| {
            format!("<|channel|>commentary to=functions.{name}<|message|>{{}}<|call|>")
        };
        assert_eq!(names(&read("a.b")), ["a.b"]);
        assert_eq!(names(&read("g½weather")), ["g½weather"]);
        // Recovered (a header inside a header fails the reading): Unicode's word
        // class, `.` and `-` (live-checked, one probe each).
        let recovered = |name: &str| {
            format!(
                "<|channel|>commentary to=functions.{name}<|start|>assistant<|channel|>commentary to=functions.f<|message|>{{}}<|call|>"
            )
        };
        for (name, read_as) in [
            ("g½weather", "g"),
            ("a²b", "a"),
            ("g👋x", "g"),
            ("a—b", "a"),
            ("g\u{a0}x", "g"),
            ("cafe\u{301}x", "cafe\u{301}x"),
            ("a\u{203f}b", "a\u{203f}b"),
            ("a\u{200d}b", "a\u{200d}b"),
            ("a\u{216b}b", "a\u{216b}b"),
            ("Grüße日本語ß", "Grüße日本語ß"),
            ("a.b-c_d", "a.b-c_d"),
        ] {
            assert_eq!(names(&recovered(name)), [read_as], "{name}");
        }
        // No name at all: the search goes on to the next block.
        assert_eq!(names(&recovered("½x")), ["f"]);
    }

    #[test]
    fn a_failed_reading_without_channel_or_message_is_as_written() {
        assert_eq!(content("<|start|>  x<|end|>"), "<|start|>  x<|end|>");
        assert_eq!(content("<|start|>  x  "), "<|start|>  x  ");
        assert_eq!(content("<|start|>  <|constrain|>"), "");
        assert_eq!(content("<|start|>  x<|channel|>y"), "xy");
    }

    #[test]
    fn a_text_without_markers_reads_as_nothing() {
        assert_eq!(parse_whole("<|c x y"), WholeParse::default());
        assert_eq!(parse_whole("<|channel|\nx y"), WholeParse::default());
        assert_eq!(content("<|channel|> x y"), "x y");
    }

    #[test]
    fn headers_take_a_recipient_and_a_content_type_beside_the_channel() {
        let header = parse_header("A<|channel|>final x", true).unwrap();
        assert_eq!(header.channel, Some("final"));
        assert_eq!(header.recipient.as_deref(), Some("A"));
        assert!(parse_header("A<|channel|>commentary to=functions.f", true).is_none());
        assert!(parse_header("<|channel|> x", true).is_none());
        let header = parse_header("<|channel|>commentary <|constrain|>json", true).unwrap();
        assert_eq!(header.recipient.as_deref(), Some("<|constrain|>json"));
        let header = parse_header("<|channel|>commentary tc<|constrain|>", false).unwrap();
        assert_eq!(
            (header.role.as_str(), header.recipient.as_deref()),
            ("tool", Some("<|constrain|>"))
        );
        assert_eq!(
            parse_header("user<|channel|>final", false).unwrap().role,
            "user"
        );
    }
}
