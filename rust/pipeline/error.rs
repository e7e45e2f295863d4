//! An HTTP error as the reference frontend sends it: a status plus the exact body
//! bytes. Bodies are flat `{"message","type","code"}` with `type` the reason phrase,
//! not OpenAI's nested `{"error":{…}}`; after a stream's 200 the same error travels
//! as an OpenAI-style event whose `type` is a snake_case error kind.

use std::fmt;

use super::chunks::{write_str, write_u64};

/// The serde prefix axum's `Json` extractor puts in front of every body error.
const DESERIALIZE_PREFIX: &str = "Failed to deserialize the JSON body into the target type: ";

/// What the reference names each status: the reason phrase of a flat body, and the
/// `type` of an in-stream error event.
const STATUSES: &[(u16, &str, &str)] = &[
    (400, "Bad Request", "invalid_request_error"),
    (401, "Unauthorized", "authentication_error"),
    (403, "Forbidden", "authentication_error"),
    (404, "Not Found", "not_found_error"),
    (405, "Method Not Allowed", INTERNAL),
    (408, "Request Timeout", "timeout_error"),
    (409, "Conflict", INTERNAL),
    (413, "Payload Too Large", "invalid_request_error"),
    (415, "Unsupported Media Type", INTERNAL),
    (422, "Unprocessable Entity", "invalid_request_error"),
    (429, "Too Many Requests", INTERNAL),
    (499, "Client Closed Request", "request_cancelled"),
    (500, "Internal Server Error", INTERNAL),
    (501, "Not Implemented", "not_implemented_error"),
    (503, "Service Unavailable", "service_unavailable"),
    (504, "Gateway Timeout", "timeout_error"),
    (529, "Overloaded", INTERNAL),
];

const INTERNAL: &str = "internal_server_error";

fn status_names(status: u16) -> Option<&'static (u16, &'static str, &'static str)> {
    STATUSES.iter().find(|(code, _, _)| *code == status)
}

/// The reason phrase the reference puts in a flat body's `type`.
pub fn reason_phrase(status: u16) -> &'static str {
    status_names(status).map_or("Unknown", |(_, reason, _)| reason)
}

/// The `type` of an in-stream error event for a status.
pub fn stream_error_type(status: u16) -> &'static str {
    status_names(status).map_or(INTERNAL, |(_, _, kind)| kind)
}

/// `"message":…,"type":…,"code":…`, the fields both error shapes share.
pub fn write_error_fields(out: &mut Vec<u8>, message: &str, kind: &str, status: u16) {
    out.extend_from_slice(b"\"message\":");
    write_str(out, message);
    out.extend_from_slice(b",\"type\":");
    write_str(out, kind);
    out.extend_from_slice(b",\"code\":");
    write_u64(out, status.into());
}

/// Append a flat error body; `details` is raw JSON for the optional `details` key.
pub fn write_flat_body(out: &mut Vec<u8>, status: u16, message: &str, details: Option<&str>) {
    out.push(b'{');
    write_error_fields(out, message, reason_phrase(status), status);
    if let Some(details) = details {
        out.extend_from_slice(b",\"details\":");
        out.extend_from_slice(details.as_bytes());
    }
    out.push(b'}');
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    pub status: u16,
    /// The response body; empty for the bare 405 the reference sends.
    pub body: Vec<u8>,
}

impl HttpError {
    /// A flat error body with the reason phrase as `type`.
    pub fn new(status: u16, message: &str) -> Self {
        let mut body = Vec::with_capacity(message.len() + 48);
        write_flat_body(&mut body, status, message, None);
        Self { status, body }
    }

    /// 400 `Validation: <text>`.
    pub fn validation(text: &str) -> Self {
        Self::new(400, &format!("Validation: {text}"))
    }

    /// 400 for a body serde could not turn into the request type.
    pub fn deserialize(err: &serde_json::Error) -> Self {
        Self::new(400, &format!("{DESERIALIZE_PREFIX}{err}"))
    }

    /// 501 for the deprecated `functions` / `function_call` fields.
    pub fn not_implemented_validation(text: &str) -> Self {
        Self::new(501, &format!("Validation: {text}"))
    }

    /// 400 for a prompt of `prompt_tokens` tokens that does not fit the context.
    pub fn context_overflow(limit: usize, prompt_tokens: usize) -> Self {
        Self::new(
            400,
            &format!(
                "This model's maximum context length is {limit} tokens. However, your messages \
                 resulted in {prompt_tokens} tokens. Please reduce the length of the messages."
            ),
        )
    }

    pub fn model_not_found() -> Self {
        Self::new(404, "Model not found")
    }

    pub fn route_not_found(method: &str, path: &str) -> Self {
        Self::new(404, &format!("Route not found: {method} {path}"))
    }

    /// 405: no body; the router adds `allow: POST` (or `GET`).
    pub fn method_not_allowed() -> Self {
        Self {
            status: 405,
            body: Vec::new(),
        }
    }

    pub fn payload_too_large(limit_mb: usize) -> Self {
        Self::new(
            413,
            &format!(
                "Request body exceeds the limit of {limit_mb} MB set by DYN_HTTP_BODY_LIMIT_MB"
            ),
        )
    }

    pub fn unsupported_media_type() -> Self {
        Self::new(415, "Expected request with Content-Type application/json")
    }

    /// 503 for a known model whose engine is not serving yet.
    pub fn model_not_ready(model: &str) -> Self {
        Self::new(
            503,
            &format!(
                "Model `{model}` is not ready to serve requests yet. The deployment may still \
                 be starting up or is not fully provisioned. Please retry shortly."
            ),
        )
    }

    pub fn internal(message: &str) -> Self {
        Self::new(500, message)
    }

    pub fn body_str(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap_or("")
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HTTP {}: {}", self.status, self.body_str())
    }
}

impl std::error::Error for HttpError {}

/// Whether a `content-type` header value is JSON the way axum's `Json` extractor
/// decides it: `application/json` or any `application/*+json`, parameters ignored.
pub fn is_json_content_type(value: Option<&str>) -> bool {
    let Some(value) = value else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json")
            || subtype
                .rsplit_once('+')
                .is_some_and(|(_, suffix)| suffix.eq_ignore_ascii_case("json")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_body_bytes() {
        assert_eq!(
            HttpError::new(415, "x \"y\"").body_str(),
            r#"{"message":"x \"y\"","type":"Unsupported Media Type","code":415}"#
        );
        let mut out = Vec::new();
        write_flat_body(&mut out, 500, "m", Some(r#"{"backend_status":500}"#));
        assert_eq!(
            out,
            br#"{"message":"m","type":"Internal Server Error","code":500,"details":{"backend_status":500}}"#
        );
    }

    #[test]
    fn every_status_is_named_once() {
        let mut codes: Vec<u16> = STATUSES.iter().map(|(code, _, _)| *code).collect();
        codes.dedup();
        assert_eq!(codes.len(), STATUSES.len());
        assert!(codes.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(reason_phrase(418), "Unknown");
        assert_eq!(stream_error_type(418), INTERNAL);
        assert_eq!(stream_error_type(413), "invalid_request_error");
    }

    #[test]
    fn json_content_types() {
        for yes in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/vnd.x+json",
        ] {
            assert!(is_json_content_type(Some(yes)), "{yes}");
        }
        for no in ["text/plain", "application/jsonx", "json", ""] {
            assert!(!is_json_content_type(Some(no)), "{no}");
        }
        assert!(!is_json_content_type(None));
    }
}
