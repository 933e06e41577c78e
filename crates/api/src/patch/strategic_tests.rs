//! Behaviour tests for the strategic merge patch engine, cases written from Kubernetes'
//! documented and observed behaviour.

use super::*;
use crate::catalogue::RESOURCES;
use crate::patch::PatchErrorKind;
use serde_json::json;

const POD: &str = "io.k8s.api.core.v1.Pod";
const DEPLOYMENT: &str = "io.k8s.api.apps.v1.Deployment";

fn smp(schema: &str, original: Value, patch: Value) -> R<Value> {
    let by_ref = apply(schema, &original, &patch);
    let owned = apply_owned(schema, original, &patch);
    assert_eq!(by_ref, owned, "apply and apply_owned agree");
    owned
}

fn pod_spec(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
}

fn deployment_containers(containers: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": 1, "template": {"spec": {"containers": containers}}}
    })
}

fn template_patch(spec: Value) -> Value {
    json!({"spec": {"template": {"spec": spec}}})
}

fn containers_of(d: &Value) -> &Value {
    &d["spec"]["template"]["spec"]["containers"]
}

/// (description, original containers, patch to the pod template spec, resulting containers)
#[test]
fn container_lists_merge_by_name() {
    let two = json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]);
    let cases = [
        (
            "patching one container keeps the others",
            two.clone(),
            json!({"containers": [{"name": "b", "image": "b:2"}]}),
            json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}]),
        ),
        (
            "a new container goes before the object's other containers",
            two.clone(),
            json!({"containers": [{"name": "c", "image": "c:1"}]}),
            json!([{"name": "c", "image": "c:1"}, {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]),
        ),
        (
            "$patch: delete removes the item with that name",
            two.clone(),
            json!({"containers": [{"name": "a", "$patch": "delete"}]}),
            json!([{"name": "b", "image": "b:1"}]),
        ),
        (
            "$patch: delete of a missing name changes nothing",
            two.clone(),
            json!({"containers": [{"name": "zz", "$patch": "delete"}]}),
            two.clone(),
        ),
        (
            "$patch: replace makes the other items the whole list",
            two.clone(),
            json!({"containers": [{"$patch": "replace"}, {"name": "c", "image": "c:1"}]}),
            json!([{"name": "c", "image": "c:1"}]),
        ),
        (
            "$setElementOrder orders the result",
            two.clone(),
            json!({"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}),
            json!([{"name": "b", "image": "b:1"}, {"name": "a", "image": "a:1"}]),
        ),
        (
            "$setElementOrder places a new item where it says",
            two.clone(),
            json!({
                "$setElementOrder/containers": [{"name": "a"}, {"name": "c"}, {"name": "b"}],
                "containers": [{"name": "c", "image": "c:1"}]
            }),
            json!([{"name": "a", "image": "a:1"}, {"name": "c", "image": "c:1"}, {"name": "b", "image": "b:1"}]),
        ),
        (
            "patched items follow the patch order; object-only items go before later ones",
            json!([{"name": "a"}, {"name": "x"}, {"name": "b"}]),
            json!({"containers": [{"name": "b", "image": "b"}, {"name": "a", "image": "a"}]}),
            json!([{"name": "x"}, {"name": "b", "image": "b"}, {"name": "a", "image": "a"}]),
        ),
        (
            "null members of an appended item are dropped",
            two.clone(),
            json!({"containers": [{"name": "c", "image": null, "env": [{"name": "X", "value": null}]}]}),
            json!([{"name": "c", "env": [{"name": "X"}]}, {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]),
        ),
        (
            "null deletes a member of a merged item",
            two.clone(),
            json!({"containers": [{"name": "a", "image": null}]}),
            json!([{"name": "a"}, {"name": "b", "image": "b:1"}]),
        ),
    ];
    for (what, containers, patch, want) in cases {
        let got = smp(
            DEPLOYMENT,
            deployment_containers(containers),
            template_patch(patch),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(containers_of(&got), &want, "{what}");
        assert_eq!(got["spec"]["replicas"], 1, "{what}: untouched fields stay");
    }
}

#[test]
fn set_element_order_with_deletions_orders_like_kubernetes() {
    // Kubernetes merges the list in place before ordering it, so the object-only item `d`
    // lands before the new item `c` here (the deletion of `a` freed the slot `c` took).
    let original = deployment_containers(json!([
        {"name": "a"}, {"name": "b", "image": "b"}, {"name": "d", "image": "d"}
    ]));
    let patch = template_patch(json!({
        "$setElementOrder/containers": [{"name": "b"}, {"name": "c"}],
        "containers": [{"name": "c", "image": "c"}, {"name": "a", "$patch": "delete"}]
    }));
    let got = smp(DEPLOYMENT, original, patch).unwrap();
    assert_eq!(
        containers_of(&got),
        &json!([{"name": "b", "image": "b"}, {"name": "d", "image": "d"}, {"name": "c", "image": "c"}])
    );
}

#[test]
fn nested_lists_merge_by_their_own_keys() {
    let original = deployment_containers(json!([{
        "name": "a",
        "image": "a:1",
        "args": ["--x", "--y"],
        "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
        "ports": [{"containerPort": 80, "name": "http"}],
        "volumeMounts": [{"name": "v", "mountPath": "/data"}]
    }]));
    let patch = template_patch(json!({"containers": [{
        "name": "a",
        "args": ["--z"],
        "env": [{"name": "Y", "value": "3"}, {"name": "Z", "value": "4"}],
        "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}],
        "volumeMounts": [{"name": "w", "mountPath": "/data"}]
    }]}));
    let got = smp(DEPLOYMENT, original, patch).unwrap();
    assert_eq!(
        containers_of(&got),
        &json!([{
            "name": "a",
            "image": "a:1",
            "args": ["--z"],
            "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "3"}, {"name": "Z", "value": "4"}],
            "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}, {"containerPort": 443}],
            "volumeMounts": [{"name": "w", "mountPath": "/data"}]
        }])
    );
}

#[test]
fn kubectl_apply_style_patches_with_nested_directives_apply() {
    let original = deployment_containers(json!([
        {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
        {"name": "b", "image": "b:1"}
    ]));
    let patch = template_patch(json!({
        "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
        "containers": [{
            "name": "a",
            "image": "a:2",
            "$setElementOrder/env": [{"name": "Y"}, {"name": "X"}],
            "env": [{"name": "Y", "value": "2"}]
        }]
    }));
    let got = smp(DEPLOYMENT, original, patch).unwrap();
    assert_eq!(
        containers_of(&got),
        &json!([
            {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}
        ])
    );
}

#[test]
fn volumes_merge_by_name_and_retain_keys_switches_the_source() {
    let original = pod_spec(json!({
        "containers": [{"name": "a"}],
        "volumes": [{"name": "v", "emptyDir": {}}, {"name": "w", "secret": {"secretName": "s"}}]
    }));
    let patch = json!({"spec": {"volumes": [{
        "name": "v",
        "$retainKeys": ["configMap", "name"],
        "configMap": {"name": "cm"}
    }]}});
    let got = smp(POD, original, patch).unwrap();
    assert_eq!(
        got["spec"]["volumes"],
        json!([{"name": "v", "configMap": {"name": "cm"}}, {"name": "w", "secret": {"secretName": "s"}}])
    );
}

#[test]
fn retain_keys_clears_unlisted_members_of_a_deployment_strategy() {
    let original =
        json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
    let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
    let got = smp(DEPLOYMENT, original.clone(), patch).unwrap();
    assert_eq!(got, json!({"spec": {"strategy": {"type": "Recreate"}}}));

    let bad =
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {"maxSurge": 2}}}});
    let err = smp(DEPLOYMENT, original.clone(), bad).unwrap_err();
    assert_eq!(err.kind(), PatchErrorKind::BadRequest);
    assert_eq!(err.message(), "invalid patch format of retainKeys");

    let bad = json!({"spec": {"strategy": {"$retainKeys": "type"}}});
    let err = smp(DEPLOYMENT, original, bad).unwrap_err();
    assert_eq!(err.message(), "invalid patch format of retainKeys");
}

#[test]
fn lists_without_a_merge_strategy_are_replaced_whole() {
    let original = pod_spec(json!({
        "containers": [{"name": "a", "command": ["sh"], "args": ["-c", "x"]}],
        "tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]
    }));
    let patch = json!({"spec": {
        "tolerations": [{"key": "c", "operator": "Exists", "value": null}],
        "containers": [{"name": "a", "args": ["y"]}]
    }});
    let got = smp(POD, original, patch).unwrap();
    assert_eq!(
        got["spec"]["tolerations"],
        json!([{"key": "c", "operator": "Exists"}])
    );
    assert_eq!(
        got["spec"]["containers"],
        json!([{"name": "a", "command": ["sh"], "args": ["y"]}])
    );
}

/// (description, original finalizers, patch to metadata, resulting finalizers)
#[test]
fn finalizers_merge_as_a_set() {
    let cases = [
        (
            "new values join; patch values lead, object values keep their place",
            json!(["a", "b"]),
            json!({"finalizers": ["c", "a"]}),
            json!(["c", "a", "b"]),
        ),
        (
            "duplicates collapse",
            json!(["a", "a"]),
            json!({"finalizers": ["a"]}),
            json!(["a"]),
        ),
        (
            "$deleteFromPrimitiveList removes values",
            json!(["a", "b", "c"]),
            json!({"$deleteFromPrimitiveList/finalizers": ["b", "x"]}),
            json!(["a", "c"]),
        ),
        (
            "kubectl apply's order and delete lists together",
            json!(["a", "b", "c"]),
            json!({"$setElementOrder/finalizers": ["c", "a"], "$deleteFromPrimitiveList/finalizers": ["b"]}),
            json!(["c", "a"]),
        ),
        (
            "null removes the list",
            json!(["a"]),
            json!({"finalizers": null}),
            Value::Null,
        ),
        (
            "an empty patch list changes nothing",
            json!(["a"]),
            json!({"finalizers": []}),
            json!(["a"]),
        ),
    ];
    for (what, finalizers, patch, want) in cases {
        let original = json!({"metadata": {"name": "x", "finalizers": finalizers}});
        let got = smp(POD, original, json!({"metadata": patch}))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let have = got["metadata"]
            .get("finalizers")
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(have, want, "{what}");
    }
    // A delete list for a list the object lacks adds nothing.
    let got = smp(
        POD,
        json!({"metadata": {"name": "x"}}),
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
    )
    .unwrap();
    assert_eq!(got, json!({"metadata": {"name": "x"}}));
}

#[test]
fn owner_references_merge_by_uid() {
    let original =
        json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a", "kind": "ReplicaSet"}]}});
    let got = smp(
        POD,
        original.clone(),
        json!({"metadata": {"ownerReferences": [{"uid": "1", "controller": true}]}}),
    )
    .unwrap();
    assert_eq!(
        got["metadata"]["ownerReferences"],
        json!([{"uid": "1", "name": "a", "kind": "ReplicaSet", "controller": true}])
    );
    let got = smp(
        POD,
        original,
        json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}}),
    )
    .unwrap();
    assert_eq!(
        got["metadata"]["ownerReferences"],
        json!([{"uid": "2", "name": "b"}, {"uid": "1", "name": "a", "kind": "ReplicaSet"}])
    );
}

#[test]
fn other_keyed_lists_merge_by_their_keys() {
    let svc = "io.k8s.api.core.v1.Service";
    let original = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
    let got = smp(
        svc,
        original,
        json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
    )
    .unwrap();
    assert_eq!(
        got["spec"]["ports"],
        json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
    );

    let original = json!({"status": {"conditions": [
        {"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}
    ]}});
    let got = smp(
        POD,
        original,
        json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    )
    .unwrap();
    assert_eq!(
        got["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}])
    );

    let original = pod_spec(json!({"imagePullSecrets": [{"name": "a"}]}));
    let got = smp(
        POD,
        original,
        json!({"spec": {"imagePullSecrets": [{"name": "b"}]}}),
    )
    .unwrap();
    assert_eq!(
        got["spec"]["imagePullSecrets"],
        json!([{"name": "b"}, {"name": "a"}])
    );
}

/// (description, original metadata, patch to metadata, resulting metadata)
#[test]
fn maps_merge_recursively_with_null_and_directives() {
    let cases = [
        (
            "labels merge key by key",
            json!({"labels": {"a": "1", "b": "2"}}),
            json!({"labels": {"b": "3", "c": "4"}}),
            json!({"labels": {"a": "1", "b": "3", "c": "4"}}),
        ),
        (
            "null deletes a label",
            json!({"labels": {"a": "1", "b": "2"}}),
            json!({"labels": {"a": null}}),
            json!({"labels": {"b": "2"}}),
        ),
        (
            "null for a missing member is ignored",
            json!({"labels": {"a": "1"}}),
            json!({"labels": {"zz": null}, "annotations": null}),
            json!({"labels": {"a": "1"}}),
        ),
        (
            "$patch: replace replaces the map",
            json!({"labels": {"a": "1", "b": "2"}}),
            json!({"labels": {"$patch": "replace", "c": "3"}}),
            json!({"labels": {"c": "3"}}),
        ),
        (
            "$patch: delete empties the map",
            json!({"labels": {"a": "1"}}),
            json!({"labels": {"$patch": "delete"}}),
            json!({"labels": {}}),
        ),
        (
            "a new map carrying $patch is not added",
            json!({"name": "x"}),
            json!({"labels": {"$patch": "replace", "a": "1"}}),
            json!({"name": "x"}),
        ),
        (
            "a value of another type replaces",
            json!({"labels": {"a": "1"}}),
            json!({"labels": "oops"}),
            json!({"labels": "oops"}),
        ),
    ];
    for (what, metadata, patch, want) in cases {
        let got = smp(
            POD,
            json!({"metadata": metadata}),
            json!({"metadata": patch}),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(got["metadata"], want, "{what}");
    }
}

#[test]
fn new_members_are_added_without_nulls_or_directives() {
    let original = pod_spec(json!({"containers": [{"name": "a"}]}));
    let patch = json!({"spec": {"affinity": {
        "nodeAffinity": null,
        "podAffinity": {"x": null, "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "k", "labelSelector": null},
            {"$patch": "delete", "topologyKey": "gone"}
        ]}
    }}});
    let got = smp(POD, original, patch).unwrap();
    assert_eq!(
        got["spec"]["affinity"],
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "k"}]}})
    );
}

#[test]
fn replace_strategy_fields_are_replaced_whole() {
    let pdb = "io.k8s.api.policy.v1.PodDisruptionBudget";
    let original = json!({"spec": {"minAvailable": 1, "selector": {
        "matchLabels": {"a": "1"},
        "matchExpressions": [{"key": "b", "operator": "Exists"}]
    }}});
    let got = smp(
        pdb,
        original,
        json!({"spec": {"selector": {"matchLabels": {"c": "3"}}}}),
    )
    .unwrap();
    assert_eq!(
        got["spec"],
        json!({"minAvailable": 1, "selector": {"matchLabels": {"c": "3"}}})
    );
}

#[test]
fn primitives_and_type_changes_replace() {
    let original = json!({"spec": {"replicas": 3, "paused": false, "minReadySeconds": 1}});
    let patch = json!({"spec": {"replicas": 5, "paused": "yes", "minReadySeconds": null}});
    let got = smp(DEPLOYMENT, original, patch).unwrap();
    assert_eq!(got, json!({"spec": {"replicas": 5, "paused": "yes"}}));
}

#[test]
fn null_and_empty_patches_change_nothing() {
    let original = pod_spec(json!({"containers": [{"name": "a"}]}));
    assert_eq!(smp(POD, original.clone(), Value::Null).unwrap(), original);
    assert_eq!(smp(POD, original.clone(), json!({})).unwrap(), original);
}

/// (description, schema, original, patch, kind, message)
#[test]
fn malformed_or_inapplicable_patches_fail_like_kubernetes() {
    let two = deployment_containers(json!([{"name": "a"}, {"name": "b"}]));
    let cases = [
        (
            "a list item without its merge key",
            DEPLOYMENT,
            two.clone(),
            template_patch(json!({"containers": [{"image": "x"}]})),
            PatchErrorKind::Internal,
            "map: map[image:x] does not contain declared merge key: name".to_string(),
        ),
        (
            "an object item without its merge key",
            DEPLOYMENT,
            deployment_containers(json!([{"image": "y"}])),
            template_patch(json!({"containers": [{"name": "a"}]})),
            PatchErrorKind::Internal,
            "map: map[image:y] does not contain declared merge key: name".to_string(),
        ),
        (
            "$patch: merge in a list",
            DEPLOYMENT,
            two.clone(),
            template_patch(json!({"containers": [{"$patch": "merge"}]})),
            PatchErrorKind::Internal,
            "merging lists cannot yet be specified in the patch".to_string(),
        ),
        (
            "an unknown list directive",
            DEPLOYMENT,
            two.clone(),
            template_patch(json!({"containers": [{"name": "a", "$patch": "zap"}]})),
            PatchErrorKind::Internal,
            "unknown patch type: zap in map: map[$patch:zap name:a]".to_string(),
        ),
        (
            "$patch: merge in a map",
            POD,
            json!({"metadata": {"labels": {"x": "1"}}}),
            json!({"metadata": {"labels": {"$patch": "merge", "a": "1"}}}),
            PatchErrorKind::Internal,
            "unknown patch type: merge in map: map[$patch:merge a:1]".to_string(),
        ),
        (
            "a field the schema does not know, where both sides are objects",
            POD,
            pod_spec(json!({"weird": {"a": 1}})),
            json!({"spec": {"weird": {"b": 2}}}),
            PatchErrorKind::Internal,
            "unable to find api field in struct PodSpec for the json field \"weird\"".to_string(),
        ),
        (
            "a $setElementOrder list that disagrees with the patch list",
            DEPLOYMENT,
            two.clone(),
            template_patch(json!({
                "$setElementOrder/containers": [{"name": "a"}],
                "containers": [{"name": "b", "image": "x"}]
            })),
            PatchErrorKind::Internal,
            "The order in patch list:\n[map[image:x name:b]]\n doesn't match $setElementOrder list:\n[map[name:a]]\n".to_string(),
        ),
        (
            "a $setElementOrder that is not a list",
            DEPLOYMENT,
            two.clone(),
            template_patch(json!({"$setElementOrder/containers": "a"})),
            PatchErrorKind::Internal,
            "expected a []interface {}, but received a string".to_string(),
        ),
        (
            "a malformed $setElementOrder key",
            DEPLOYMENT,
            two.clone(),
            template_patch(json!({"$setElementOrderX": []})),
            PatchErrorKind::BadRequest,
            "invalid patch format of setElementOrder list".to_string(),
        ),
        (
            "a malformed $deleteFromPrimitiveList key",
            POD,
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}}),
            PatchErrorKind::BadRequest,
            "invalid patch format of primitive list".to_string(),
        ),
        (
            "a list of lists",
            POD,
            json!({"metadata": {"finalizers": []}}),
            json!({"metadata": {"finalizers": [["a"]]}}),
            PatchErrorKind::Unprocessable,
            "lists of lists are not supported".to_string(),
        ),
        (
            "list items of mixed types",
            POD,
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"finalizers": [1]}}),
            PatchErrorKind::Internal,
            "list element types are not identical: [[a] [1]]".to_string(),
        ),
        (
            "objects in a merged list of primitives",
            POD,
            json!({"metadata": {"finalizers": []}}),
            json!({"metadata": {"finalizers": [{"a": 1}]}}),
            PatchErrorKind::Internal,
            "cannot merge lists without merge key for string".to_string(),
        ),
        (
            "a patch that is not an object",
            POD,
            json!({}),
            json!([1]),
            PatchErrorKind::BadRequest,
            "json: cannot unmarshal array into Go value of type map[string]interface {}".to_string(),
        ),
        (
            "a schema that is not a built-in type",
            "com.example.v1.Widget",
            json!({}),
            json!({}),
            PatchErrorKind::BadRequest,
            "strategic merge patch format is not supported".to_string(),
        ),
    ];
    for (what, schema, original, patch, kind, message) in cases {
        let err = smp(schema, original, patch).expect_err(what);
        assert_eq!(
            (err.kind(), err.message()),
            (kind, message.as_str()),
            "{what}"
        );
    }
}

#[test]
fn deeply_nested_patches_are_rejected_without_recursing() {
    let mut inner = json!("x");
    for _ in 0..(crate::patch::MAX_DEPTH + 10) {
        inner = json!({ "a": inner });
    }
    let err = smp(POD, json!({}), json!({"metadata": {"annotations": inner}})).unwrap_err();
    assert_eq!(err.kind(), PatchErrorKind::BadRequest);
}

#[test]
fn every_catalogue_kind_has_a_schema_in_the_table() {
    // Reviews are only ever created, never patched.
    let reviews = ["authentication.k8s.io", "authorization.k8s.io"];
    for r in RESOURCES.iter().filter(|r| !reviews.contains(&r.group)) {
        let name = schema_name(r.group, r.version, r.kind)
            .unwrap_or_else(|| panic!("{}/{} {}", r.group, r.version, r.kind));
        assert!(name.ends_with(&format!(".{}", r.kind)), "{name}");
        assert!(super::by_name(name).is_some(), "{name}");
        // An empty patch applies to every kind.
        assert_eq!(
            apply(name, &json!({"kind": r.kind}), &json!({})).unwrap(),
            json!({"kind": r.kind})
        );
    }
    assert_eq!(schema_name("apps", "v1", "Deployment"), Some(DEPLOYMENT));
    assert_eq!(
        schema_name("", "v1", "Event"),
        Some("io.k8s.api.core.v1.Event")
    );
    assert_eq!(
        schema_name("events.k8s.io", "v1", "Event"),
        Some("io.k8s.api.events.v1.Event")
    );
    assert_eq!(
        schema_name_for_group_kind("autoscaling", "HorizontalPodAutoscaler"),
        Some("io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler")
    );
    assert_eq!(
        schema_name("autoscaling", "v1", "HorizontalPodAutoscaler"),
        Some("io.k8s.api.autoscaling.v1.HorizontalPodAutoscaler")
    );
    assert_eq!(schema_name("example.com", "v1", "Widget"), None);
}

#[test]
fn the_table_is_sorted_for_binary_search() {
    use crate::patch::strategy_table::{BY_NAME, TYPES};
    assert!(BY_NAME.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(BY_NAME.len(), TYPES.len());
    for (name, ty) in BY_NAME {
        assert_eq!(TYPES[*ty as usize].name, *name);
    }
    for t in &TYPES {
        assert!(t.fields.windows(2).all(|w| w[0].0 < w[1].0), "{}", t.name);
    }
}

/// (type, field, strategy)
#[test]
fn the_table_records_kubernetes_patch_strategies() {
    let cases = [
        (
            "io.k8s.api.core.v1.PodSpec",
            "containers",
            Some(Strategy::Merge("name")),
        ),
        (
            "io.k8s.api.core.v1.PodSpec",
            "initContainers",
            Some(Strategy::Merge("name")),
        ),
        (
            "io.k8s.api.core.v1.PodSpec",
            "volumes",
            Some(Strategy::MergeRetainKeys("name")),
        ),
        (
            "io.k8s.api.core.v1.PodSpec",
            "tolerations",
            Some(Strategy::None),
        ),
        (
            "io.k8s.api.core.v1.PodSpec",
            "hostAliases",
            Some(Strategy::Merge("ip")),
        ),
        (
            "io.k8s.api.core.v1.Container",
            "env",
            Some(Strategy::Merge("name")),
        ),
        (
            "io.k8s.api.core.v1.Container",
            "ports",
            Some(Strategy::Merge("containerPort")),
        ),
        (
            "io.k8s.api.core.v1.Container",
            "volumeMounts",
            Some(Strategy::Merge("mountPath")),
        ),
        ("io.k8s.api.core.v1.Container", "args", Some(Strategy::None)),
        ("io.k8s.api.core.v1.Container", "image", None),
        (
            "io.k8s.api.core.v1.ServiceSpec",
            "ports",
            Some(Strategy::Merge("port")),
        ),
        (
            "io.k8s.api.core.v1.NodeSpec",
            "taints",
            Some(Strategy::None),
        ),
        (
            "io.k8s.api.core.v1.NodeSpec",
            "podCIDRs",
            Some(Strategy::Merge("")),
        ),
        (
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "finalizers",
            Some(Strategy::Merge("")),
        ),
        (
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "ownerReferences",
            Some(Strategy::Merge("uid")),
        ),
        (
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "labels",
            Some(Strategy::None),
        ),
        (
            "io.k8s.api.apps.v1.DeploymentSpec",
            "strategy",
            Some(Strategy::RetainKeys),
        ),
        (
            "io.k8s.api.policy.v1.PodDisruptionBudgetSpec",
            "selector",
            Some(Strategy::Replace),
        ),
        (
            "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration",
            "webhooks",
            Some(Strategy::Merge("name")),
        ),
        (
            "io.k8s.api.admissionregistration.v1.ValidatingWebhook",
            "rules",
            Some(Strategy::None),
        ),
        (
            "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
            "variables",
            Some(Strategy::Merge("name")),
        ),
        (
            "io.k8s.api.storage.v1.CSINodeSpec",
            "drivers",
            Some(Strategy::Merge("name")),
        ),
        ("io.k8s.api.core.v1.PodSpec", "nonexistent", None),
    ];
    for (ty, field, want) in cases {
        assert_eq!(field_strategy(ty, field), want, "{ty}.{field}");
    }
    assert_eq!(
        field_type("io.k8s.api.core.v1.PodSpec", "containers"),
        Some("io.k8s.api.core.v1.Container")
    );
    assert_eq!(
        field_type("io.k8s.api.apps.v1.Deployment", "spec"),
        Some("io.k8s.api.apps.v1.DeploymentSpec")
    );
    assert_eq!(
        Strategy::MergeRetainKeys("name").as_str(),
        "merge,retainKeys"
    );
    assert_eq!(Strategy::Merge("").merge_key(), None);
}
