//! The three patch formats `kubectl patch` and controllers send, applied to objects held as
//! `serde_json::Value`, with the outcomes (including error texts and HTTP codes) of
//! kube-apiserver v1.32:
//!
//! - [`json`]: RFC 6902 JSON Patch (`application/json-patch+json`);
//! - [`merge`]: RFC 7386 JSON Merge Patch (`application/merge-patch+json`);
//! - [`strategic`]: Kubernetes' strategic merge patch (`application/strategic-merge-patch+json`)
//!   for the built-in kinds, driven by the facts in `strategy_table`.
//!
//! Every engine bounds its work: nesting deeper than [`MAX_DEPTH`] is rejected with an error
//! rather than recursed into, and JSON patches are limited in operations and copied bytes.

use serde_json::Value;

pub(crate) mod gofmt;
pub mod json;
pub mod merge;
mod schema;
pub mod strategic;
mod strategy_table;

/// The deepest nesting of objects and arrays a patch (or, for JSON patch, a patched object)
/// may have. Kubernetes objects nest far less (a pod spec is about 12 levels deep).
pub const MAX_DEPTH: usize = 100;

/// The message Kubernetes sends, in place of the engine's own text, when a patch cannot be
/// applied (HTTP 422, reason `Invalid`).
pub const GENERIC_UNPROCESSABLE_MESSAGE: &str =
    "the server rejected our request due to an error in our request";

/// How the API server must answer a [`PatchError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchErrorKind {
    /// 400 Bad Request (reason `BadRequest`): the patch document itself is malformed. The
    /// status message is the error's message.
    BadRequest,
    /// 422 Unprocessable Entity (reason `Invalid`): the patch is well-formed but does not apply
    /// to this object. Kubernetes v1.32 does not pass the engine's text on: the status message
    /// is [`GENERIC_UNPROCESSABLE_MESSAGE`] with no causes. The error's own message (the
    /// engine's text, e.g. `add operation does not apply: doc is missing path: ...`) is for logs.
    Unprocessable,
    /// 413 Request Entity Too Large (reason `RequestEntityTooLarge`): too many JSON patch
    /// operations. The status message is `Request entity too large: <message>`.
    TooLarge,
    /// 500 Internal Server Error with an empty reason: Kubernetes passes the strategic merge
    /// engine's other errors through unconverted, so the status message is the error's message
    /// (kubectl prints `Error from server: <message>`).
    Internal,
}

/// A patch that cannot be applied; [`kind`](PatchError::kind) tells the HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PatchError {
    kind: PatchErrorKind,
    message: String,
}

impl PatchError {
    pub fn new(kind: PatchErrorKind, message: impl Into<String>) -> Self {
        PatchError {
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(PatchErrorKind::BadRequest, message)
    }

    pub(crate) fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(PatchErrorKind::Unprocessable, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(PatchErrorKind::Internal, message)
    }

    pub(crate) fn too_deep() -> Self {
        Self::bad_request(format!(
            "the patch is nested more than {MAX_DEPTH} levels deep"
        ))
    }

    pub fn kind(&self) -> PatchErrorKind {
        self.kind
    }

    /// The engine's own text (evanphx/json-patch's or Kubernetes' strategic merge wording).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HTTP status code Kubernetes answers with.
    pub fn http_status(&self) -> u16 {
        match self.kind {
            PatchErrorKind::BadRequest => 400,
            PatchErrorKind::Unprocessable => 422,
            PatchErrorKind::TooLarge => 413,
            PatchErrorKind::Internal => 500,
        }
    }

    /// The `reason` of the `Status` Kubernetes answers with ("" for the pass-through 500).
    pub fn status_reason(&self) -> &'static str {
        match self.kind {
            PatchErrorKind::BadRequest => "BadRequest",
            PatchErrorKind::Unprocessable => "Invalid",
            PatchErrorKind::TooLarge => "RequestEntityTooLarge",
            PatchErrorKind::Internal => "",
        }
    }

    /// The `message` of the `Status` Kubernetes answers with.
    pub fn status_message(&self) -> String {
        match self.kind {
            PatchErrorKind::Unprocessable => GENERIC_UNPROCESSABLE_MESSAGE.to_string(),
            PatchErrorKind::TooLarge => format!("Request entity too large: {}", self.message),
            PatchErrorKind::BadRequest | PatchErrorKind::Internal => self.message.clone(),
        }
    }
}

/// Whether `v` nests objects/arrays more than `max` levels deep (a scalar is depth 0). Walks
/// iteratively, so it is safe on any value.
pub(crate) fn deeper_than(v: &Value, max: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = vec![(v, 0)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                if d >= max {
                    return true;
                }
                stack.extend(a.iter().map(|c| (c, d + 1)));
            }
            Value::Object(o) => {
                if d >= max {
                    return true;
                }
                stack.extend(o.values().map(|c| (c, d + 1)));
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn error_kinds_map_to_kubernetes_status_codes_and_messages() {
        let cases = [
            (PatchErrorKind::BadRequest, 400, "BadRequest", "m"),
            (
                PatchErrorKind::Unprocessable,
                422,
                "Invalid",
                GENERIC_UNPROCESSABLE_MESSAGE,
            ),
            (
                PatchErrorKind::TooLarge,
                413,
                "RequestEntityTooLarge",
                "Request entity too large: m",
            ),
            (PatchErrorKind::Internal, 500, "", "m"),
        ];
        for (kind, code, reason, msg) in cases {
            let e = PatchError::new(kind, "m");
            assert_eq!(e.http_status(), code);
            assert_eq!(e.status_reason(), reason);
            assert_eq!(e.status_message(), msg);
            assert_eq!(e.to_string(), "m");
        }
    }

    #[test]
    fn depth_is_measured_in_containers() {
        assert!(!deeper_than(&json!(1), 0));
        assert!(!deeper_than(&json!({}), 1));
        assert!(deeper_than(&json!({"a": {}}), 1));
        assert!(!deeper_than(&json!({"a": [1]}), 2));
        assert!(deeper_than(&json!({"a": [[1]]}), 2));
    }
}
