//! API errors and their `Status` form. Store errors become API errors here and nowhere else.

use capstan_api::catalogue::ResourceInfo;
use capstan_store::StoreError;
use serde_json::{json, Value};

pub use capstan_api::field::FieldError;

/// An error answered with a `Status` object.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    /// Seconds a client should wait before retrying (Retry-After), for 429/5xx.
    pub retry_after: Option<u32>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn not_found(info: &ResourceInfo, name: &str) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", info.group_resource()),
        );
        e.details = Some(details(info, name));
        e
    }

    pub fn not_found_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn already_exists(info: &ResourceInfo, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", info.group_resource()),
        );
        e.details = Some(details(info, name));
        e
    }

    pub fn conflict(info: &ResourceInfo, name: &str, why: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                info.group_resource()
            ),
        );
        e.details = Some(details(info, name));
        e
    }

    pub fn modified(info: &ResourceInfo, name: &str) -> Self {
        Self::conflict(
            info,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn invalid(info: &ResourceInfo, name: &str, errors: Vec<FieldError>) -> Self {
        Self::invalid_kind(info.group, info.kind, name, errors)
    }

    /// A 422 for an object of `group`/`kind` (Kubernetes' `NewInvalid`).
    pub fn invalid_kind(group: &str, kind: &str, name: &str, errors: Vec<FieldError>) -> Self {
        let summary = if errors.len() == 1 {
            errors[0].message.clone()
        } else {
            format!(
                "[{}]",
                errors
                    .iter()
                    .map(|e| e.message.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.reason, "message": e.message.split_once(": ").map(|x| x.1).unwrap_or(&e.message), "field": e.field}))
            .collect();
        // Kubernetes names the kind here (details and message), not the resource.
        let mut d = json!({"name": name, "kind": kind});
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            d["group"] = Value::String(group.to_string());
            format!("{kind}.{group}")
        };
        d["causes"] = Value::Array(causes);
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!("{qualified} \"{name}\" is invalid: {summary}"),
            details: Some(d),
            retry_after: None,
        }
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {content_type:?})"),
        )
    }

    pub fn too_large() -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728",
        )
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        if self.reason == "BadRequest"
            || self.reason == "MethodNotAllowed" && self.details.is_none()
        {
            // Kubernetes leaves `reason` out of some 400s; clients accept both.
        }
        s
    }

    /// Map a store error for `info`/`name`. The one place store errors become API errors.
    pub fn from_store(e: StoreError, info: &ResourceInfo, name: &str) -> Self {
        match e {
            StoreError::NotFound { .. } => Self::not_found(info, name),
            StoreError::AlreadyExists { .. } => Self::already_exists(info, name),
            StoreError::Conflict { .. } => Self::modified(info, name),
            StoreError::Compacted { requested, .. } => {
                Self::gone(format!("too old resource version: {requested}"))
            }
            StoreError::FutureRevision { requested, current } => {
                let mut e = Self::new(
                    504,
                    "Timeout",
                    format!("Too large resource version: {requested}, current: {current}"),
                );
                e.details = Some(
                    json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
                );
                e.retry_after = Some(1);
                e
            }
            StoreError::TooLarge { .. } => Self::too_large(),
            StoreError::LeaseNotFound(_) | StoreError::Unavailable(_) | StoreError::Corrupt(_) => {
                let mut e = Self::internal(e.to_string());
                e.retry_after = Some(1);
                e
            }
        }
    }
}

fn details(info: &ResourceInfo, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": info.plural});
    if !info.group.is_empty() {
        d["group"] = Value::String(info.group.to_string());
    }
    d
}

/// The `Status` of a successful delete that removed the object at once.
pub fn success_status(info: &ResourceInfo, name: &str, uid: &str) -> Value {
    let mut d = details(info, name);
    d["uid"] = Value::String(uid.to_string());
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": d,
    })
}
