//! Field validation against the kind's schema: unknown fields (Strict, Warn, Ignore) and type
//! errors, before anything is stored.

use capstan_api::catalogue::ResourceInfo;
use capstan_api::schema::Schemas;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::registry::Strategy;
use crate::request::Query;

/// Prune fields the kind does not have and check types. With `fieldValidation=Strict` unknown
/// fields are a 400; otherwise they are dropped (as Kubernetes' typed decoding does) and, with
/// `Warn` (the default), returned as warnings.
pub fn check_field_validation(
    info: &ResourceInfo,
    strategy: &dyn Strategy,
    query: &Query,
    obj: &mut Value,
) -> ApiResult<Vec<String>> {
    let mode = query.str("fieldValidation");
    if !matches!(mode, "" | "Strict" | "Warn" | "Ignore") {
        return Err(ApiError::bad_request(format!(
            "fieldValidation: Invalid value: {mode:?}: must be one of Strict, Warn, or Ignore"
        )));
    }
    let unknown = if let Some((type_errors, unknown)) = strategy.check_fields(obj) {
        if let Some(first) = type_errors.first() {
            return Err(ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: {first}",
                info.kind, info.version, info.kind
            )));
        }
        unknown
    } else {
        let Some(schema) = Schemas::builtin().for_kind(info.group, info.version, info.kind) else {
            return Ok(Vec::new());
        };
        let type_errors = schema.check_types(obj);
        if let Some(first) = type_errors.first() {
            return Err(ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: {}",
                info.kind, info.version, info.kind, first.message
            )));
        }
        schema.prune(obj)
    };
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let messages: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field \"{p}\""))
        .collect();
    match mode {
        "Strict" => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            messages.join(", ")
        ))),
        "Ignore" => Ok(Vec::new()),
        _ => Ok(messages),
    }
}
