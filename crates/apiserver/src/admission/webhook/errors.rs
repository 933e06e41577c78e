//! How webhook failures become API errors (Kubernetes' `webhook/errors` and
//! `util/webhook/error.go`): failures to talk to a webhook are subject to its failurePolicy
//! and answer 500 when they fail the request; a webhook's denial carries the webhook's own
//! status.

use capstan_api::field::go_quote;
use serde_json::{json, Value};

use crate::error::ApiError;

/// Why calling one webhook did not yield a verdict.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The webhook could not be called, or answered nonsense (Kubernetes'
    /// `ErrCallingWebhook`): ignored under `failurePolicy: Ignore`, a 500 otherwise.
    #[error("failed calling webhook {}: {reason}", go_quote(.webhook))]
    Calling { webhook: String, reason: String },
    /// The webhook denied the request, or calling it is not allowed for this request: the
    /// request fails whatever the failurePolicy.
    #[error("{}", .0.message)]
    Rejected(ApiError),
}

impl CallError {
    pub fn calling(webhook: &str, reason: impl Into<String>) -> Self {
        CallError::Calling {
            webhook: webhook.to_string(),
            reason: reason.into(),
        }
    }

    /// The error the request fails with.
    pub fn into_api_error(self) -> ApiError {
        match self {
            c @ CallError::Calling { .. } => internal_error(&c.to_string()),
            CallError::Rejected(e) => e,
        }
    }
}

/// Kubernetes' `NewInternalError`: 500, "Internal error occurred: ...", the error as a cause.
pub fn internal_error(err: &str) -> ApiError {
    let mut e = ApiError::internal(format!("Internal error occurred: {err}"));
    e.details = Some(json!({"causes": [{"message": err}]}));
    e
}

/// Kubernetes' `NewForbidden` for `group_resource` `name`.
pub fn forbidden(group: &str, resource: &str, name: &str, err: &str) -> ApiError {
    let gr = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let mut e = ApiError::new(
        403,
        "Forbidden",
        format!("{gr} {} is forbidden: {err}", go_quote(name)),
    );
    e.details = Some(json!({"name": name, "group": group, "kind": resource}));
    e
}

/// The status reasons Kubernetes defines; a webhook's own reason outside these is dropped.
const REASONS: &[&str] = &[
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "StoreReadError",
    "Timeout",
    "TooManyRequests",
    "BadRequest",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "Expired",
    "ServiceUnavailable",
];

/// Kubernetes' `ToStatusErr`: the webhook's `response.status` as the request's error, its
/// message prefixed with the webhook's name, its code at least 400 (400 when it gave none).
/// A reason Kubernetes does not define is left out (capstan's errors carry only those).
pub fn rejection(webhook: &str, status: Option<&Value>) -> ApiError {
    let empty = json!({});
    let status = status.filter(|s| s.is_object()).unwrap_or(&empty);
    let text = |k: &str| status.get(k).and_then(Value::as_str).unwrap_or("");
    let denied_by = format!("admission webhook {} denied the request", go_quote(webhook));
    let message = match (text("message"), text("reason")) {
        ("", "") => format!("{denied_by} without explanation"),
        ("", reason) => format!("{denied_by}: {reason}"),
        (message, _) => format!("{denied_by}: {message}"),
    };
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(400);
    let reason = REASONS
        .iter()
        .find(|r| **r == text("reason"))
        .copied()
        .unwrap_or("");
    let mut e = ApiError::new(code, reason, message);
    e.details = status.get("details").filter(|d| d.is_object()).cloned();
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_carry_the_webhooks_status() {
        let e = rejection(
            "deny.example.com",
            Some(&json!({"code": 403, "message": "no labels", "reason": "Forbidden"})),
        );
        assert_eq!(
            (e.code, e.reason, e.message.as_str()),
            (
                403,
                "Forbidden",
                "admission webhook \"deny.example.com\" denied the request: no labels"
            )
        );
        let e = rejection("d.example.com", None);
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "admission webhook \"d.example.com\" denied the request without explanation"
        );
        let e = rejection(
            "d.example.com",
            Some(&json!({"code": 200, "reason": "Nope"})),
        );
        assert_eq!((e.code, e.reason), (400, ""));
        assert_eq!(
            e.message,
            "admission webhook \"d.example.com\" denied the request: Nope"
        );
    }

    #[test]
    fn call_failures_are_internal_errors() {
        let e =
            CallError::calling("h.example.com", "failed to call webhook: boom").into_api_error();
        assert_eq!(e.code, 500);
        assert_eq!(
            e.message,
            "Internal error occurred: failed calling webhook \"h.example.com\": failed to call webhook: boom"
        );
    }
}
