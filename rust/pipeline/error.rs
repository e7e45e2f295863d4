//! An HTTP error as the reference frontend sends it: a status plus the exact body
//! bytes. Bodies are flat `{"message","type","code"}` with `type` the reason phrase,
//! not OpenAI's nested `{"error":{…}}`.

use std::fmt;

use serde::Serialize;

/// The reference's default body limit (`DYN_HTTP_BODY_LIMIT_MB`).
pub const DEFAULT_BODY_LIMIT_MB: usize = 45;

/// The serde prefix axum's `Json` extractor puts in front of every body error.
const DESERIALIZE_PREFIX: &str = "Failed to deserialize the JSON body into the target type: ";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    pub status: u16,
    /// The response body; empty for the bare 404/405 the reference sends.
    pub body: Vec<u8>,
}

#[derive(Serialize)]
struct FlatBody<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    code: u16,
}

/// The canonical reason phrase, which the reference uses as `type`.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        499 => "Client Closed Request",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Unknown",
    }
}

impl HttpError {
    /// A flat error body with the reason phrase as `type`.
    pub fn new(status: u16, message: &str) -> Self {
        Self::with_type(status, message, reason_phrase(status))
    }

    pub fn with_type(status: u16, message: &str, kind: &str) -> Self {
        let body = serde_json::to_vec(&FlatBody {
            message,
            kind,
            code: status,
        })
        .expect("a flat error body always serialises");
        Self { status, body }
    }

    /// A status with no body at all (axum's defaults for 405 and disabled routes).
    pub fn empty(status: u16) -> Self {
        Self {
            status,
            body: Vec::new(),
        }
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

    pub fn model_not_found() -> Self {
        Self::new(404, "Model not found")
    }

    pub fn route_not_found(method: &str, path: &str) -> Self {
        Self::new(404, &format!("Route not found: {method} {path}"))
    }

    /// 405: empty body; the caller adds `allow: POST` (or `GET`).
    pub fn method_not_allowed() -> Self {
        Self::empty(405)
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

    pub fn service_unavailable(message: &str) -> Self {
        Self::new(503, message)
    }

    /// 503 for a known model whose engine is not serving yet.
    pub fn model_not_ready(model: &str) -> Self {
        Self::service_unavailable(&format!(
            "Model `{model}` is not ready to serve requests yet. The deployment may still be \
             starting up or is not fully provisioned. Please retry shortly."
        ))
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

/// 415 unless the content type is JSON.
pub fn check_content_type(value: Option<&str>) -> Result<(), HttpError> {
    if is_json_content_type(value) {
        Ok(())
    } else {
        Err(HttpError::unsupported_media_type())
    }
}
