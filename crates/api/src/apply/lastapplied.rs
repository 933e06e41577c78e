//! The client-side apply annotation, `kubectl.kubernetes.io/last-applied-configuration`, as
//! Kubernetes' field manager treats it when the applier is `kubectl`: conflicts on fields the
//! annotation shows kubectl applied client-side (and still holding those values) do not stop
//! the apply, and after an apply an existing annotation is rewritten to the new configuration.

use serde_json::{Map, Value};

use super::ops::{compare, to_field_set, validate};
use super::set::FieldSet;
use super::typed::Ty;
use super::value::go_json;

/// The annotation's name.
pub const ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Kubernetes' limit on the total size of an object's annotations (keys and values).
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

fn annotation(obj: &Value) -> Option<&str> {
    obj.get("metadata")?
        .get("annotations")?
        .get(ANNOTATION)?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// The fields of the last-applied configuration that the live object still holds with the
/// same values: conflicts on these are the client-side applier's own, and may be taken over.
/// None when there is no usable annotation (absent, not JSON, no kind, another version,
/// not valid for the schema).
pub(crate) fn allowed_conflicts(ty: Ty<'_>, live: &Value, api_version: &str) -> Option<FieldSet> {
    let last: Value = serde_json::from_str(annotation(live)?).ok()?;
    let kind = last.get("kind").and_then(Value::as_str).unwrap_or("");
    if !last.is_object() || kind.is_empty() {
        return None;
    }
    if last.get("apiVersion").and_then(Value::as_str).unwrap_or("") != api_version {
        return None;
    }
    if !validate(ty, &last, false).is_empty() {
        return None;
    }
    let set = to_field_set(ty, &last);
    let cmp = compare(ty, &last, live);
    Some(
        set.difference(&cmp.modified)
            .difference(&cmp.added)
            .difference(&cmp.removed),
    )
}

/// The annotation's value for an applied configuration: the configuration without the
/// annotation itself, as Go's JSON encoder writes it (sorted keys, HTML-escaped, newline).
fn build(config: &Value) -> String {
    let mut copy = config.clone();
    if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        match meta.get_mut("annotations") {
            Some(Value::Object(a)) => {
                a.remove(ANNOTATION);
            }
            Some(Value::Null) => {
                meta.remove("annotations");
            }
            _ => {}
        }
    }
    let mut out = go_json(&copy);
    out.push('\n');
    out
}

/// After an apply by kubectl: when the object carries the annotation, rewrite it to this
/// configuration (dropping it when the annotations would outgrow Kubernetes' limit).
pub(crate) fn sync_annotation(obj: &mut Value, config: &Value) {
    if annotation(obj).is_none() {
        return;
    }
    let value = build(config);
    let Some(annotations) = obj
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    annotations.insert(ANNOTATION.into(), Value::String(value));
    if total_size(annotations) > TOTAL_ANNOTATION_SIZE_LIMIT {
        annotations.remove(ANNOTATION);
    }
}

fn total_size(annotations: &Map<String, Value>) -> usize {
    annotations
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum()
}
