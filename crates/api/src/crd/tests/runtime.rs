//! Pruning, defaulting, list types, embedded resources, printer columns, selectable fields and
//! scale for custom resources (cases from apiextensions' pruning, defaulting, listtype,
//! objectmeta and tableconvertor tests).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::{crd, messages};
use crate::crd::algorithms::{apply_defaults, validate_list_sets_and_maps, Defaults, Pruner};
use crate::crd::CompiledVersion;
use crate::schema::Schemas;

fn prune(schema: Option<Value>, mut obj: Value, resource: bool) -> (Value, Vec<String>) {
    let arena = schema.map(|s| Schemas::from_json_schema(&s).unwrap());
    let root = arena.as_ref().and_then(|a| a.root());
    let mut p = Pruner::new();
    if resource {
        p.prune_resource(&mut obj, root);
    } else {
        p.prune_value(&mut obj, root);
    }
    (obj, p.unknown)
}

#[test]
fn pruning_follows_structural_pruning() {
    let items = json!({"items": {"properties": {"a": {}, "c": {}}}});
    assert_eq!(
        prune(
            Some(items),
            json!([{"a": 1}, {"b": 1}, {"a": 1, "b": 2, "c": 3}]),
            false
        ),
        (
            json!([{"a": 1}, {}, {"a": 1, "c": 3}]),
            vec!["[1].b".to_string(), "[2].b".to_string()]
        )
    );
    assert_eq!(
        prune(None, json!([{"a": 1}, {"b": 1}]), false),
        (
            json!([{}, {}]),
            vec!["[0].a".to_string(), "[1].b".to_string()]
        )
    );
    let schema = json!({"properties": {
        "array": {"items": {"properties": {"a": {}, "c": {}}}},
        "specified": {"properties": {"a": {}, "c": {}}},
    }});
    let (obj, pruned) = prune(
        Some(schema),
        json!({"array": [{"a": 1}, {"b": 1}, {"a": 1, "b": 2, "c": 3}], "unspecified": {"a": 1}, "specified": {"a": 1, "b": 2, "c": 3}}),
        false,
    );
    assert_eq!(
        obj,
        json!({"array": [{"a": 1}, {}, {"a": 1, "c": 3}], "specified": {"a": 1, "c": 3}})
    );
    assert_eq!(
        pruned,
        vec!["array[1].b", "array[2].b", "specified.b", "unspecified"]
    );

    // x-kubernetes-preserve-unknown-fields keeps unknown keys; known ones are still pruned.
    let schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
        "pruning": {"type": "object", "properties": {"preserving": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
        "preserving": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"pruning": {"type": "object"}}},
        "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"specified": {"type": "object"}}}},
    }});
    let (obj, pruned) = prune(
        Some(schema),
        json!({
            "unspecified": "bar",
            "pruning": {"unspecified": "bar", "apiVersion": "unknown", "preserving": {"unspecified": "bar"}},
            "preserving": {"unspecified": "bar", "pruning": {"unspecified": "bar"}},
            "map": {"foo": {"specified": {"unspecified": "bar"}, "unspecified": "bar"}},
        }),
        false,
    );
    assert_eq!(
        obj,
        json!({
            "unspecified": "bar",
            "pruning": {"preserving": {"unspecified": "bar"}},
            "preserving": {"unspecified": "bar", "pruning": {}},
            "map": {"foo": {"specified": {}}},
        })
    );
    assert_eq!(
        pruned,
        vec![
            "map.foo.specified.unspecified",
            "map.foo.unspecified",
            "preserving.pruning.unspecified",
            "pruning.apiVersion",
            "pruning.unspecified",
        ]
    );
    // At a resource root the meta fields stay; in embedded resources too.
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object"}}},
        }},
    }});
    let (obj, pruned) = prune(
        Some(schema),
        json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "x"}, "foo": 1,
               "spec": {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "bar": 1, "spec": {"x": 1}}}}),
        true,
    );
    assert_eq!(
        obj,
        json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "x"},
               "spec": {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}}}})
    );
    assert_eq!(
        pruned,
        vec!["foo", "spec.template.bar", "spec.template.spec.x"]
    );
}

fn defaulted(schema: Value, mut obj: Value) -> Value {
    let arena = Schemas::from_json_schema(&schema).unwrap();
    let mut defaults = Defaults::new();
    for id in 0..arena.len() as u32 {
        if let Some(d) = arena.get(id).schema().default.clone() {
            defaults.insert(id, d);
        }
    }
    apply_defaults(&mut obj, arena.root(), &defaults);
    obj
}

#[test]
fn defaulting_follows_structural_defaulting() {
    let items = json!({"items": {"properties": {"a": {"default": "A"}, "b": {"default": "B"}, "c": {"default": "C"}}}});
    assert_eq!(
        defaulted(items, json!([{"a": 1}, {"b": 1}, {"c": 1}])),
        json!([{"a": 1, "b": "B", "c": "C"}, {"a": "A", "b": 1, "c": "C"}, {"a": "A", "b": "B", "c": 1}])
    );
    let schema = json!({"properties": {
        "array": {"items": {"properties": {"a": {"default": "A"}, "b": {"default": "B"}}}},
        "object": {"properties": {"a": {"default": "N"}, "b": {"default": "O"}}},
        "additionalProperties": {"additionalProperties": {"properties": {"a": {"default": "alpha"}, "b": {"default": "beta"}}}},
        "foo": {"default": "bar"},
    }});
    assert_eq!(
        defaulted(
            schema,
            json!({"array": [{"a": 1}, {"b": 2}], "object": {"a": 1}, "additionalProperties": {"x": {"a": 1}, "y": {"b": 2}}})
        ),
        json!({"array": [{"a": 1, "b": "B"}, {"a": "A", "b": 2}], "object": {"a": 1, "b": "O"},
               "additionalProperties": {"x": {"a": 1, "b": "beta"}, "y": {"a": "alpha", "b": 2}}, "foo": "bar"})
    );
    let empty_and_null = json!({"items": {"properties": {"a": {"default": "A"}}}});
    assert_eq!(
        defaulted(
            empty_and_null,
            json!([{}, {"a": 1}, {"a": 0}, {"a": ""}, {"a": null}, {"a": []}, {"a": {}}])
        ),
        json!([{"a": "A"}, {"a": 1}, {"a": 0}, {"a": ""}, {"a": "A"}, {"a": []}, {"a": {}}])
    );
    let nullable = json!({"items": {"properties": {"a": {"default": "A", "nullable": true}}}});
    assert_eq!(
        defaulted(nullable, json!([{"a": null}])),
        json!([{"a": null}])
    );
    // Defaults apply inside defaulted values.
    let nested =
        json!({"properties": {"spec": {"default": {}, "properties": {"x": {"default": 1}}}}});
    assert_eq!(defaulted(nested, json!({})), json!({"spec": {"x": 1}}));
}

fn list_errors(schema: Value, obj: Value) -> Vec<String> {
    let arena = Schemas::from_json_schema(&schema).unwrap();
    let errs = validate_list_sets_and_maps("", arena.root().unwrap(), obj.as_object().unwrap());
    errs.into_iter().map(|e| e.message).collect()
}

#[test]
fn list_sets_and_maps_report_duplicates() {
    let set = json!({"properties": {"field": {"type": "array", "x-kubernetes-list-type": "set", "items": {}}}});
    assert_eq!(
        list_errors(
            set.clone(),
            json!({"field": ["a", "b", "a", "a", 1, 1.0, 1]})
        ),
        vec![
            "field[2]: Duplicate value: \"a\"",
            "field[6]: Duplicate value: 1"
        ]
    );
    assert_eq!(
        list_errors(set, json!({"field": [{"a": 1}, {"a": 1}, [1], [1]]})),
        vec![
            "field[1]: Duplicate value: map[string]interface {}{\"a\":1}",
            "field[3]: Duplicate value: []interface {}{1}",
        ]
    );
    let map = json!({"properties": {"field": {"type": "array", "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["k"], "items": {"type": "object", "properties": {"k": {}, "v": {}}}}}});
    assert_eq!(
        list_errors(
            map.clone(),
            json!({"field": [{"k": "a", "v": 1}, {"k": "a", "v": 2}, {"v": 3}, {"v": 4}]})
        ),
        vec![
            "field[1]: Duplicate value: map[string]interface {}{\"k\":\"a\"}",
            "field[3]: Duplicate value: map[string]interface {}{}",
        ]
    );
    assert_eq!(
        list_errors(map, json!({"field": [{"k": "a"}, "x"]})),
        vec!["field[1]: Invalid value: \"x\": must be an object for an array of list-type map"]
    );
    let multi = json!({"properties": {"field": {"type": "array", "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["k1", "k2"], "items": {"type": "object"}}}});
    assert_eq!(
        list_errors(
            multi,
            json!({"field": [{"k1": "a", "k2": 1}, {"k1": "a", "k2": 2}, {"k2": 1, "k1": "a", "x": 0}]})
        ),
        vec!["field[2]: Duplicate value: map[string]interface {}{\"k1\":\"a\", \"k2\":1}"]
    );
}

fn with_schema(schema: Value) -> Value {
    let mut c = crd();
    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = schema;
    c
}

#[test]
fn compiled_version_validates_custom_resources() {
    let c = crd();
    let v = CompiledVersion::compile(&c, "v1").unwrap();
    assert_eq!(
        (v.group(), v.version(), v.kind(), v.namespaced()),
        ("example.com", "v1", "Foo", true)
    );
    let good = json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "a", "namespace": "ns"},
                      "spec": {"replicas": 1}});
    assert!(
        v.validate(&good, None).is_empty(),
        "{:?}",
        v.validate(&good, None)
    );
    let bad = json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "A_b", "namespace": "ns"},
                     "spec": {"replicas": "many"}});
    assert_eq!(
        messages(&v.validate(&bad, None)),
        vec![
            "metadata.name: Invalid value: \"A_b\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
        ]
    );
    let wrong_kind = json!({"apiVersion": "example.com/v2", "kind": "Bar", "metadata": {"name": "a", "namespace": "ns"}});
    assert_eq!(
        messages(&v.validate(&wrong_kind, None)),
        vec![
            "apiVersion: Invalid value: \"example.com/v2\": must be example.com/v1",
            "kind: Invalid value: \"Bar\": must be Foo",
        ]
    );
    // The reason of a type error is Kubernetes' TypeInvalid.
    let errs = v.validate(&bad, None);
    assert!(errs.iter().any(|e| e.reason == "FieldValueTypeInvalid"));
}

#[test]
fn prune_and_default_on_decode() {
    let c = with_schema(json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "replicas": {"type": "integer", "default": 1},
            "mode": {"type": "string", "default": "fast"},
            "opt": {"type": "string"},
            "nullable": {"type": "string", "nullable": true},
        }},
    }}));
    let v = CompiledVersion::compile(&c, "v1").unwrap();
    let mut obj = json!({"apiVersion": "example.com/v1", "kind": "Foo",
        "metadata": {"name": "a", "bogus": 1, "labels": {"a": "b"}},
        "spec": {"extra": true, "opt": null, "nullable": null, "mode": null}, "status2": {}});
    let unknown = v.prune(&mut obj);
    assert_eq!(unknown, vec!["metadata.bogus", "spec.extra", "status2"]);
    v.default(&mut obj);
    assert_eq!(
        obj,
        json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "a", "labels": {"a": "b"}},
               "spec": {"nullable": null, "mode": "fast", "replicas": 1}})
    );
    assert_eq!(
        v.decode_error(&json!({"metadata": {"labels": "x"}})).as_deref(),
        Some("json: cannot unmarshal string into Go struct field ObjectMeta.labels of type map[string]string")
    );
}

#[test]
fn embedded_resources_are_checked() {
    let c = with_schema(json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                         "x-kubernetes-preserve-unknown-fields": true},
        }},
    }}));
    let v = CompiledVersion::compile(&c, "v1").unwrap();
    let obj = json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "a", "namespace": "n"},
        "spec": {"template": {"apiVersion": "a/b/c", "kind": "1Bad", "metadata": {"name": "Bad_Name"}}}});
    assert_eq!(
        messages(&v.validate(&obj, None)),
        vec![
            "spec.template.apiVersion: Invalid value: \"a/b/c\": unexpected GroupVersion string: a/b/c",
            "spec.template.kind: Invalid value: \"1Bad\": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
        ]
    );
    let missing = json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "a", "namespace": "n"},
        "spec": {"template": {"metadata": {"bogus": 1}}}});
    assert_eq!(
        messages(&v.validate(&missing, None)),
        vec![
            "spec.template.apiVersion: Required value: must not be empty",
            "spec.template.kind: Required value: must not be empty",
        ]
    );
    let mut m = missing.clone();
    assert_eq!(v.prune(&mut m), vec!["spec.template.metadata.bogus"]);
    assert_eq!(m["spec"]["template"]["metadata"], json!({}));
    let bad_type = json!({"spec": {"template": {"apiVersion": 1}}});
    assert_eq!(
        v.decode_error(&bad_type).as_deref(),
        Some("spec.template.apiVersion: Invalid value: 1: must be a string")
    );
}

#[test]
fn list_types_ratchet_on_update() {
    let c = with_schema(json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        }},
    }}));
    let v = CompiledVersion::compile(&c, "v1").unwrap();
    let obj = |tags: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Foo",
        "metadata": {"name": "a", "namespace": "n"}, "spec": {"tags": tags}})
    };
    let dup = obj(json!(["a", "a"]));
    assert_eq!(
        messages(&v.validate(&dup, None)),
        vec!["spec.tags[1]: Duplicate value: \"a\""]
    );
    // Already broken before the update: not reported again.
    assert!(v
        .validate(&obj(json!(["a", "a", "b"])), Some(&dup))
        .is_empty());
    assert_eq!(v.validate(&dup, Some(&obj(json!(["a"])))).len(), 1);
}

#[test]
fn printer_columns_and_cells() {
    let mut c = crd();
    c["spec"]["versions"][0]["additionalPrinterColumns"] = json!([
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
        {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status", "priority": 1},
        {"name": "Spec", "type": "string", "jsonPath": ".spec.obj", "description": "the object"},
        {"name": "On", "type": "boolean", "jsonPath": ".spec.on"},
        {"name": "Created", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Missing", "type": "string", "jsonPath": ".spec.nothing"},
    ]);
    let v = CompiledVersion::compile(&c, "v1").unwrap();
    let cols = v.columns();
    assert_eq!(cols.len(), 8);
    assert_eq!(
        (cols[0].name.as_str(), cols[0].format.as_str()),
        ("Name", "name")
    );
    assert!(cols[0]
        .description
        .starts_with("Name must be unique within a namespace"));
    assert_eq!(
        cols[2].description,
        "Custom resource definition column (in JSONPath format): .spec.ratio"
    );
    assert_eq!(cols[3].priority, 1);
    assert_eq!(cols[4].description, "the object");
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let created = crate::meta::format_time(now - Duration::from_secs(12 * 3600 + 30 * 60));
    let obj = json!({"metadata": {"name": "x", "creationTimestamp": created},
        "spec": {"replicas": 3.7, "ratio": 2, "obj": {"b": "<", "a": 1}, "on": true},
        "status": {"conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]}});
    assert_eq!(
        v.cells(&obj, now),
        vec![
            json!("x"),
            json!(3),
            json!(2),
            json!("True"),
            json!("{\"a\":1,\"b\":\"\\u003c\"}"),
            json!(true),
            json!("12h"),
            Value::Null
        ]
    );
    // Without columns: Name and Age.
    let plain = CompiledVersion::compile(&crd(), "v1").unwrap();
    let names: Vec<&str> = plain.columns().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec!["Name", "Age"]);
    assert_eq!(plain.columns()[1].type_, "date");
    let cells = plain.cells(
        &json!({"metadata": {"name": "y", "creationTimestamp": "bogus"}}),
        SystemTime::now(),
    );
    assert_eq!(cells, vec![json!("y"), json!("<invalid>")]);
    let cells = plain.cells(&json!({"metadata": {"name": "y"}}), SystemTime::now());
    assert_eq!(cells, vec![json!("y"), Value::Null]);
}

#[test]
fn selectable_fields_and_scale() {
    let mut c = crd();
    c["spec"]["versions"][0]["selectableFields"] =
        json!([{"jsonPath": ".spec.color"}, {"jsonPath": ".spec.replicas"}]);
    c["spec"]["versions"][0]["subresources"] = json!({"status": {}, "scale": {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}});
    let v = CompiledVersion::compile(&c, "v1").unwrap();
    assert_eq!(v.selectable_fields(), vec!["spec.color", "spec.replicas"]);
    let obj = json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "a", "namespace": "n"},
                     "spec": {"color": "red", "replicas": 2}});
    assert_eq!(v.field_value(&obj, "spec.color").as_deref(), Some("red"));
    assert_eq!(v.field_value(&obj, "spec.replicas").as_deref(), Some("2"));
    assert_eq!(v.field_value(&json!({}), "spec.color").as_deref(), Some(""));
    assert_eq!(
        v.field_value(&obj, "metadata.namespace").as_deref(),
        Some("n")
    );
    assert_eq!(v.field_value(&obj, "spec.other"), None);
    assert!(v.has_status());
    let scale = v.scale().unwrap();
    assert_eq!(
        scale.label_selector_path.as_deref(),
        Some(".status.selector")
    );
    let bad = json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "a", "namespace": "n"},
                     "spec": {"replicas": -1}, "status": {"replicas": 2147483648i64, "selector": 5}});
    let msgs = messages(&v.validate(&bad, None));
    assert!(
        msgs.contains(
            &".spec.replicas: Invalid value: -1: should be a non-negative integer".to_string()
        ),
        "{msgs:?}"
    );
    assert!(msgs.contains(&".status.replicas: Invalid value: 2147483648: should be less than or equal to 2147483647".to_string()), "{msgs:?}");
    assert!(msgs.contains(&".status.selector: Invalid value: \"\": .status.selector accessor error: 5 is of the type int64, expected string".to_string()), "{msgs:?}");
    let status_errs = v.validate_status(
        &json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "a", "namespace": "n"}, "status": {"replicas": "x"}}),
        &obj,
    );
    assert_eq!(
        messages(&status_errs),
        vec![
            ".status.replicas: Invalid value: 0: .status.replicas accessor error: x is of the type string, expected int64",
            "status.replicas: Invalid value: \"string\": replicas in body must be of type integer: \"string\"",
        ]
    );
}

#[test]
fn typed_schema_declares_object_meta() {
    let v = CompiledVersion::compile(&crd(), "v1").unwrap();
    let typed = v.schema();
    assert!(typed.property("apiVersion").is_some());
    let md = typed.property("metadata").unwrap();
    assert_eq!(md.name(), Some(crate::schema::OBJECT_META));
    assert!(md
        .property("labels")
        .and_then(|l| l.additional_properties())
        .is_some());
    assert!(typed.lookup("spec.replicas").is_some());
    assert!(v
        .validation_schema()
        .unwrap()
        .property("metadata")
        .is_none());
    assert!(CompiledVersion::compile(&crd(), "v9").is_err());
}
