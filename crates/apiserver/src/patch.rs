//! PATCH: JSON patch, JSON merge patch, strategic merge patch and (until server-side apply
//! lands) apply patches, on top of the stored object.

use capstan_api::catalogue::ResourceInfo;
use capstan_api::patch::{self as engines, PatchError, PatchErrorKind};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(content_type: &str) -> ApiResult<Self> {
        match content_type {
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(PatchType::Apply),
            other => Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"),
            )),
        }
    }
}

/// The answer kube-apiserver gives for each kind of patch failure.
fn patch_error(e: PatchError) -> ApiError {
    match e.kind() {
        PatchErrorKind::BadRequest => ApiError::bad_request(e.to_string()),
        PatchErrorKind::Unprocessable => {
            tracing::debug!(error = %e, "patch does not apply");
            ApiError::new(422, "Invalid", engines::GENERIC_UNPROCESSABLE_MESSAGE)
        }
        PatchErrorKind::TooLarge => ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: {e}"),
        ),
        PatchErrorKind::Internal => ApiError::new(500, "", e.to_string()),
    }
}

/// `old` with `patch` applied.
pub fn apply(info: &ResourceInfo, t: PatchType, old: &Value, patch: &Value) -> ApiResult<Value> {
    match t {
        PatchType::Json => engines::json::apply(old, patch).map_err(patch_error),
        PatchType::Merge | PatchType::Apply => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            engines::merge::apply(old, patch).map_err(patch_error)
        }
        // Custom resources have no patch strategies: Kubernetes does not accept the media type.
        PatchType::Strategic if info.custom => Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        )),
        PatchType::Strategic => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "a strategic merge patch must be a JSON object",
                ));
            }
            let schema = engines::strategic::schema_name(info.group, info.version, info.kind);
            engines::strategic::apply(schema.unwrap_or(""), old, patch).map_err(patch_error)
        }
    }
}

/// A patch of an autoscaling/v1 Scale (it has no merge keys: merge semantics).
pub fn apply_scale(t: PatchType, scale: &Value, patch: &Value) -> ApiResult<Value> {
    match t {
        PatchType::Json => engines::json::apply(scale, patch).map_err(patch_error),
        _ => engines::merge::apply(scale, patch).map_err(patch_error),
    }
}
