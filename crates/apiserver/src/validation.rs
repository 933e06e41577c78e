//! Field validation against the kind's schema: unknown fields (Strict, Warn, Ignore) and type
//! errors, before anything is stored.

use capstan_api::catalogue::ResourceInfo;
use capstan_api::schema::Schemas;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::registry::Strategy;
use crate::request::Query;

/// [`check_field_validation`] of a patched object, where only what the patch reached can be
/// new: a merge or strategic merge patch (of a built-in kind) without directives at its top
/// changes only the top-level members it names, and the rest of the object was checked when
/// it was stored — so only those members are checked (a status patch does not walk the spec).
pub fn check_patched(
    info: &ResourceInfo,
    strategy: &dyn Strategy,
    query: &Query,
    patch_type: crate::patch::PatchType,
    patch: &Value,
    obj: &mut Value,
) -> ApiResult<Vec<String>> {
    use crate::patch::PatchType;
    let members = match (patch_type, patch.as_object()) {
        (PatchType::Merge | PatchType::Strategic, Some(p))
            if !info.custom && !p.keys().any(|k| k.starts_with('$')) =>
        {
            p
        }
        _ => return check_field_validation(info, strategy, query, obj),
    };
    let Some(map) = obj.as_object_mut() else {
        return check_field_validation(info, strategy, query, obj);
    };
    let mut touched = serde_json::Map::new();
    for k in members.keys() {
        if let Some((k, v)) = map.remove_entry(k) {
            touched.insert(k, v);
        }
    }
    let mut part = Value::Object(touched);
    let result = check_field_validation(info, strategy, query, &mut part);
    if let (Value::Object(part), Some(map)) = (part, obj.as_object_mut()) {
        map.extend(part);
    }
    result
}

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
