//! Server-sent events as axum 0.8 writes them for Dynamo 1.6.1:
//! `data: <json>\n\n`, the in-stream error event, and `data: [DONE]`.

use super::error::{stream_error_type, write_error_fields};

/// Open a `data:` event; the JSON payload follows, then [`end_event`].
pub fn begin_event(out: &mut Vec<u8>) {
    out.extend_from_slice(b"data: ");
}

pub fn end_event(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\n\n");
}

/// A named event with a comment and no data (the `nvext.annotations` events).
pub fn write_annotation(out: &mut Vec<u8>, name: &str, comment: &str) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\n: ");
    // A comment is one line: newlines become spaces.
    out.extend(
        comment
            .bytes()
            .map(|b| if b == b'\n' || b == b'\r' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\n\n");
}

/// The natural end of a stream.
pub fn write_done(out: &mut Vec<u8>) {
    out.extend_from_slice(b"data: [DONE]\n\n");
}

/// An error after the 200 went out: OpenAI-style envelope, then `[DONE]`.
pub fn write_error(out: &mut Vec<u8>, status: u16, message: &str) {
    begin_event(out);
    out.extend_from_slice(b"{\"error\":{");
    write_error_fields(out, message, stream_error_type(status), status);
    out.extend_from_slice(b"}}");
    end_event(out);
    write_done(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotation_event_bytes() {
        let mut out = Vec::new();
        write_annotation(&mut out, "request_id", "\"abc\"\nx");
        assert_eq!(out, b"event: request_id\n: \"abc\" x\n\n");
    }

    #[test]
    fn error_event_bytes() {
        let mut out = Vec::new();
        write_error(&mut out, 500, "Internal server error");
        assert_eq!(
            out,
            b"data: {\"error\":{\"message\":\"Internal server error\",\"type\":\"internal_server_error\",\"code\":500}}\n\ndata: [DONE]\n\n"
        );
    }
}
