//! Server-side printing for `kubectl get`: Tables and PartialObjectMetadata.

use std::time::SystemTime;

use capstan_api::catalogue::ResourceInfo;
pub use capstan_api::table::IncludeObject;
use capstan_api::table::{ListMeta, TableOptions};
use serde_json::{json, Value};

/// A meta.k8s.io/v1 Table of `objects` with the list metadata `list_meta`
/// (`{"resourceVersion": .., "continue": .., "remainingItemCount": ..}`).
pub fn table(
    info: &ResourceInfo,
    objects: &[&Value],
    include: IncludeObject,
    list_meta: Value,
) -> Value {
    let s = |k: &str| list_meta.get(k).and_then(Value::as_str).map(str::to_string);
    let opts = TableOptions {
        include_object: include,
        list_meta: ListMeta {
            resource_version: s("resourceVersion"),
            continue_: s("continue"),
            remaining_item_count: list_meta.get("remainingItemCount").and_then(Value::as_i64),
        },
        ..Default::default()
    };
    capstan_api::table::build_with(info.group, info.kind, objects, &opts, SystemTime::now())
}

/// The PartialObjectMetadata of the object whose JSON is `json`, written as the JSON
/// [`partial_metadata`] encodes to, with the metadata's bytes copied as they are instead of
/// parsing the object (a metadata watch of pods reads every pod written). False, and nothing
/// written, when `json` is not an object.
pub fn write_partial_metadata(json: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(members) = crate::rawjson::members(json) else {
        return false;
    };
    let metadata = members
        .iter()
        .find(|(k, _)| *k == b"metadata")
        .map_or(&b"{}"[..], |(_, v)| v);
    out.extend_from_slice(
        br#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":"#,
    );
    out.extend_from_slice(metadata);
    out.push(b'}');
    true
}

/// The object's PartialObjectMetadata (apiVersion, kind and metadata only).
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_metadata_from_bytes_is_what_encoding_the_object_gives() {
        for obj in [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n",
                "labels": {"a": "b\"c"}, "ownerReferences": [{"uid": "u", "kind": "ReplicaSet"}],
                "resourceVersion": "7"}, "spec": {"containers": [{"name": "c"}]}}),
            json!({"kind": "Thing", "spec": {"metadata": {"name": "inner"}}}),
            json!({}),
        ] {
            let json = serde_json::to_vec(&obj).unwrap();
            let mut raw = Vec::new();
            assert!(write_partial_metadata(&json, &mut raw));
            assert_eq!(
                String::from_utf8(raw).unwrap(),
                serde_json::to_string(&partial_metadata(&obj)).unwrap()
            );
        }
        let mut out = b"x".to_vec();
        assert!(!write_partial_metadata(b"[1]", &mut out));
        assert!(!write_partial_metadata(b"{\"metadata\":", &mut out));
        assert_eq!(out, b"x");
    }
}
