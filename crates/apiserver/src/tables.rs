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

/// The object's PartialObjectMetadata (apiVersion, kind and metadata only).
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}
