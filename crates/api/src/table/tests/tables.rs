//! Default columns, column coverage of the catalogue, and whole Table objects.

use serde_json::{json, Value};

use super::*;

use super::pods::crash_looping_pod;
use crate::catalogue::RESOURCES;
use crate::table::*;

#[test]
fn default_columns_for_kinds_without_printer() {
    assert_eq!(
        names("rbac.authorization.k8s.io", "Role"),
        ["Name", "Created At"]
    );
    assert_eq!(columns("", "LimitRange")[1].type_, "date");
    let role = json!({"metadata": {"name": "reader", "creationTimestamp": "2024-05-01T10:00:00Z"}});
    assert_eq!(
        cells("rbac.authorization.k8s.io", "Role", &role),
        vec![json!("reader"), json!("2024-05-01T10:00:00Z")]
    );
}

#[test]
fn every_catalogue_kind_has_a_row_per_column() {
    for r in RESOURCES {
        let obj = json!({"metadata": {"name": "x", "creationTimestamp": ago(1)}});
        let c = row(r.group, r.kind, &obj, now());
        assert_eq!(
            c.len(),
            columns(r.group, r.kind).len(),
            "{}/{}",
            r.group,
            r.kind
        );
        if r.kind != "Event" {
            assert_eq!(columns(r.group, r.kind)[0].name, "Name", "{}", r.kind);
        }
    }
    // Events lead with "Last Seen"; everything else with the name.
    assert_eq!(columns("", "Event")[0].name, "Last Seen");
}

#[test]
fn full_table() {
    let pod = crash_looping_pod();
    let t = build("", "Pod", &[&pod], IncludeObject::Metadata, now());
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(t["metadata"], json!({}));
    assert_eq!(
        t["columnDefinitions"][0],
        json!({"name": "Name", "type": "string", "format": "name",
        "description": "", "priority": 0})
    );
    assert_eq!(t["columnDefinitions"][5]["priority"], 1);
    assert_eq!(t["rows"][0]["cells"][2], "CrashLoopBackOff");
    assert_eq!(
        t["rows"][0]["object"],
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": pod["metadata"]})
    );
    assert!(t["rows"][0].get("conditions").is_none());

    let t = build("", "Pod", &[&pod], IncludeObject::None, now());
    assert_eq!(t["rows"][0]["object"], Value::Null);
    let mut bare = pod.clone();
    bare.as_object_mut().unwrap().remove("apiVersion");
    let t = build("apps", "Deployment", &[&bare], IncludeObject::Object, now());
    assert_eq!(t["rows"][0]["object"]["apiVersion"], "apps/v1");

    let spec = json!({"definitions": {OBJECT_META: {"properties": {"name": {"description": "The name."}}}}});
    let describe = openapi_describer(&spec);
    let opts = TableOptions {
        no_headers: true,
        list_meta: ListMeta {
            resource_version: Some("42".into()),
            continue_: Some("abc".into()),
            remaining_item_count: Some(3),
        },
        describe: Some(&describe),
        ..Default::default()
    };
    let t = build_with("", "Pod", &[], &opts, now());
    assert_eq!(t["columnDefinitions"], Value::Null);
    assert_eq!(t["rows"], json!([]));
    assert_eq!(
        t["metadata"],
        json!({"resourceVersion": "42", "continue": "abc", "remainingItemCount": 3})
    );
    assert_eq!(NAME.description_text(Some(&describe)), "The name.");
    assert_eq!(
        POD_NAME_READY_TEXT,
        columns("", "Pod")[1].description_text(None)
    );

    // The default convertor leaves an empty table's rows unset.
    let t = build("", "LimitRange", &[], IncludeObject::Metadata, now());
    assert_eq!(t["rows"], Value::Null);
    assert_eq!(
        ListMeta::of_object(&json!({"metadata": {"resourceVersion": "7"}}))
            .resource_version
            .as_deref(),
        Some("7")
    );
}

const POD_NAME_READY_TEXT: &str =
    "The aggregate readiness state of this pod for accepting traffic.";

#[test]
fn completed_pod_row_carries_condition() {
    let done = json!({"metadata": {"name": "d"}, "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "c", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}});
    let t = build("", "Pod", &[&done], IncludeObject::None, now());
    assert_eq!(t["rows"][0]["conditions"][0]["reason"], "Failed");
    assert_eq!(t["rows"][0]["cells"][2], "Error");
}

#[test]
fn include_object_parameter() {
    assert_eq!(IncludeObject::parse(""), Ok(IncludeObject::Metadata));
    assert_eq!(IncludeObject::parse("Object"), Ok(IncludeObject::Object));
    assert_eq!(IncludeObject::parse("None"), Ok(IncludeObject::None));
    assert_eq!(
        IncludeObject::parse("all").unwrap_err(),
        "Unable to convert to Table as requested: includeObject: Invalid value: \"all\": \
         must be 'Metadata', 'Object', 'None', or empty"
    );
}
