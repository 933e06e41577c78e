//! RFC 7386 JSON Merge Patch, applied as kube-apiserver v1.32 applies it (evanphx/json-patch
//! v4): objects merge recursively, `null` deletes a member, anything else (arrays included)
//! replaces. Values that land where nothing (or a non-object) was have their `null` members
//! dropped, as Kubernetes does; a patch that is not an object or array is a 400.

use serde_json::{Map, Value};

use super::{deeper_than, PatchError, MAX_DEPTH};

/// Kubernetes' text for a merge patch that is not a JSON object or array.
const BAD_PATCH: &str = "Invalid JSON Patch";

/// Apply `patch` to a copy of `doc`.
pub fn apply(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    check(patch)?;
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => {
            let mut d = d.clone();
            merge_objects(&mut d, p);
            Ok(Value::Object(d))
        }
        _ => Ok(pruned(patch)),
    }
}

/// Apply `patch` to `doc`, consuming it (no copy of the document is made).
pub fn apply_owned(mut doc: Value, patch: &Value) -> Result<Value, PatchError> {
    check(patch)?;
    match (&mut doc, patch) {
        (Value::Object(d), Value::Object(p)) => {
            merge_objects(d, p);
            Ok(doc)
        }
        _ => Ok(pruned(patch)),
    }
}

fn check(patch: &Value) -> Result<(), PatchError> {
    if !matches!(patch, Value::Object(_) | Value::Array(_)) {
        return Err(PatchError::bad_request(BAD_PATCH));
    }
    if deeper_than(patch, MAX_DEPTH) {
        return Err(PatchError::too_deep());
    }
    Ok(())
}

fn merge_objects(doc: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (k, pv) in patch {
        if pv.is_null() {
            doc.remove(k);
            continue;
        }
        match doc.get_mut(k) {
            Some(cur @ Value::Object(_)) => match (cur, pv) {
                (Value::Object(c), Value::Object(p)) => merge_objects(c, p),
                // An object replaced by a non-object patch value keeps that value as given.
                (cur, pv) => *cur = pv.clone(),
            },
            // Nothing (or null, or a non-object) there: the patch value, nulls pruned.
            Some(cur) => *cur = pruned(pv),
            None => {
                doc.insert(k.clone(), pruned(pv));
            }
        }
    }
}

/// A copy of `v` without null object members, at any depth (null array items stay). This is
/// also the result when the patch is an array or the document is not an object.
fn pruned(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, x)| !x.is_null())
                .map(|(k, x)| (k.clone(), pruned(x)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(pruned).collect()),
        other => other.clone(),
    }
}

/// A merge patch that turns `original` into `modified`: members that changed (recursively for
/// objects), were added, or (as null) were removed. Arrays are compared whole. For inputs that
/// are not both objects the patch is `modified` itself.
pub fn create(original: &Value, modified: &Value) -> Value {
    match (original, modified) {
        (Value::Object(o), Value::Object(m)) => Value::Object(diff(o, m)),
        _ => modified.clone(),
    }
}

fn diff(original: &Map<String, Value>, modified: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, mv) in modified {
        match (original.get(k), mv) {
            (Some(Value::Object(o)), Value::Object(m)) => {
                let d = diff(o, m);
                if !d.is_empty() {
                    out.insert(k.clone(), Value::Object(d));
                }
            }
            (Some(ov), mv) if ov == mv => {}
            (_, mv) => {
                out.insert(k.clone(), mv.clone());
            }
        }
    }
    for k in original.keys() {
        if !modified.contains_key(k) {
            out.insert(k.clone(), Value::Null);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::PatchErrorKind;
    use serde_json::json;

    #[test]
    fn merge_patches_follow_rfc_7386_examples() {
        // The examples of RFC 7386 appendix A, as (target, patch, result).
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
        ];
        for (doc, patch, want) in cases {
            assert_eq!(apply(&doc, &patch).unwrap(), want, "{doc} + {patch}");
            assert_eq!(
                apply_owned(doc.clone(), &patch).unwrap(),
                want,
                "{doc} + {patch}"
            );
        }
    }

    #[test]
    fn merge_patches_handle_kubernetes_objects() {
        let pod = json!({
            "metadata": {"name": "p", "labels": {"app": "web", "tier": "fe"}},
            "spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b"}]}
        });
        let patch = json!({
            "metadata": {"labels": {"tier": null, "new": "x"}},
            "spec": {"containers": [{"name": "a", "image": "a:2", "x": null}]}
        });
        // Lists are replaced whole (a list is not an object, so the new value's nulls go).
        assert_eq!(
            apply(&pod, &patch).unwrap(),
            json!({
                "metadata": {"name": "p", "labels": {"app": "web", "new": "x"}},
                "spec": {"containers": [{"name": "a", "image": "a:2"}]}
            })
        );
    }

    #[test]
    fn nulls_are_pruned_where_a_value_lands_on_nothing() {
        let cases = [
            (
                json!({}),
                json!({"a": {"b": null, "c": [null, {"d": null}]}}),
                json!({"a": {"c": [null, {}]}}),
            ),
            (
                json!({"a": 1}),
                json!({"a": {"b": null, "c": 1}}),
                json!({"a": {"c": 1}}),
            ),
            (
                json!({"a": null}),
                json!({"a": {"b": null}}),
                json!({"a": {}}),
            ),
            (
                json!({"a": {"x": 1}}),
                json!({"a": [{"b": null}]}),
                json!({"a": [{"b": null}]}),
            ),
            (
                json!({"a": 1}),
                json!([{"b": null}, null]),
                json!([{}, null]),
            ),
        ];
        for (doc, patch, want) in cases {
            assert_eq!(apply(&doc, &patch).unwrap(), want, "{doc} + {patch}");
        }
    }

    #[test]
    fn non_object_patches_are_bad_requests() {
        for patch in [json!(null), json!("x"), json!(1), json!(true)] {
            let err = apply(&json!({"a": 1}), &patch).unwrap_err();
            assert_eq!(err.kind(), PatchErrorKind::BadRequest);
            assert_eq!(err.message(), "Invalid JSON Patch");
        }
    }

    #[test]
    fn deep_patches_are_rejected_not_recursed() {
        let mut patch = json!(1);
        for _ in 0..(MAX_DEPTH + 5) {
            patch = json!({ "a": patch });
        }
        let err = apply(&json!({}), &patch).unwrap_err();
        assert_eq!(err.kind(), PatchErrorKind::BadRequest);
    }

    #[test]
    fn created_patches_turn_original_into_modified() {
        let cases = [
            (json!({"a": 1}), json!({"a": 1}), json!({})),
            (json!({"a": 1}), json!({"a": 2}), json!({"a": 2})),
            (json!({"a": 1, "b": 2}), json!({"a": 1}), json!({"b": null})),
            (
                json!({"a": {"x": 1, "y": 2}}),
                json!({"a": {"x": 1, "y": 3}}),
                json!({"a": {"y": 3}}),
            ),
            (json!({"a": [1, 2]}), json!({"a": [1]}), json!({"a": [1]})),
            (json!({"a": {"x": 1}}), json!({"a": "s"}), json!({"a": "s"})),
            (json!({}), json!({"a": {"b": 1}}), json!({"a": {"b": 1}})),
        ];
        for (original, modified, want) in cases {
            let patch = create(&original, &modified);
            assert_eq!(patch, want, "{original} -> {modified}");
            assert_eq!(apply(&original, &patch).unwrap(), modified);
        }
        assert_eq!(create(&json!([1]), &json!([2])), json!([2]));
    }
}
