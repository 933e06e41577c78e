use serde_json::{json, Value};

use super::*;
use crate::catalogue::RESOURCES;

fn kind(group: &str, version: &str, kind: &str) -> SchemaRef<'static> {
    Schemas::builtin()
        .for_kind(group, version, kind)
        .unwrap_or_else(|| panic!("no schema for {group}/{version} {kind}"))
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "labels": {"app": "web", "tier": "frontend"},
            "annotations": {"deployment.kubernetes.io/revision": "3", "any.key/x": "y"},
            "finalizers": ["example.com/keep"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Thing", "name": "t", "uid": "u1"}],
            "managedFields": [{
                "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
                "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}, ".": {}}}
            }],
            "creationTimestamp": null
        },
        "spec": {
            "replicas": 3,
            "revisionHistoryLimit": 10,
            "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["frontend"]}]
            },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}
            },
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "containers": [{
                        "name": "nginx",
                        "image": "nginx:1.27",
                        "args": ["--port", "8080"],
                        "env": [
                            {"name": "A", "value": "1"},
                            {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                        ],
                        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                        "resources": {
                            "limits": {"cpu": "500m", "memory": "128Mi", "example.com/gpu": 1},
                            "requests": {"cpu": 0.25, "memory": "64Mi"}
                        },
                        "readinessProbe": {
                            "httpGet": {"path": "/healthz", "port": "http"},
                            "initialDelaySeconds": 5
                        },
                        "livenessProbe": {"tcpSocket": {"port": 8080}},
                        "securityContext": {"capabilities": {"drop": ["ALL"]}, "runAsNonRoot": true},
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]
                    }],
                    "volumes": [
                        {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
                        {"name": "cfg", "configMap": {"name": "cfg", "items": [{"key": "k", "path": "p"}]}}
                    ],
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                             "labelSelector": {"matchLabels": {"app": "web"}}}
                    }]}},
                    "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]
                }
            }
        },
        "status": {"replicas": 3, "conditions": [{"type": "Available", "status": "True",
                    "lastUpdateTime": "2024-01-01T00:00:00Z"}]}
    })
}

#[test]
fn every_catalogue_kind_has_a_schema_and_a_list() {
    for r in RESOURCES {
        let s = kind(r.group, r.version, r.kind);
        assert!(s.property("metadata").is_some(), "{}", r.kind);
        if r.has_verb("list") {
            let list = kind(r.group, r.version, &r.list_kind());
            let items = list.property("items").and_then(|i| i.items()).unwrap();
            assert_eq!(items.id(), s.id(), "{}", r.kind);
        }
    }
    // Kinds any group-version takes.
    assert!(Schemas::builtin()
        .for_kind("apps", "v1", "DeleteOptions")
        .is_some());
}

#[test]
fn prune_keeps_a_realistic_deployment_untouched() {
    let mut d = deployment();
    let before = d.clone();
    let unknown = kind("apps", "v1", "Deployment").prune(&mut d);
    assert!(unknown.is_empty(), "{unknown:?}");
    assert_eq!(d, before);
    assert!(kind("apps", "v1", "Deployment").check_types(&d).is_empty());
}

#[test]
fn prune_reports_and_removes_unknown_fields_of_a_pod() {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "bogusMeta": 1, "labels": {"x": "y"}},
        "spec": {
            "foo": "bar",
            "containers": [
                {"name": "a", "image": "i"},
                {"name": "b", "image": "i", "bogus": true,
                 "ports": [{"containerPort": 80, "extra": {"deep": 1}}]}
            ]
        },
        "status": {"phase": "Running", "whatever": []}
    });
    let unknown = kind("", "v1", "Pod").prune(&mut pod);
    assert_eq!(
        unknown,
        vec![
            "metadata.bogusMeta",
            "spec.containers[1].bogus",
            "spec.containers[1].ports[0].extra",
            "spec.foo",
            "status.whatever",
        ]
    );
    assert_eq!(
        pod,
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "labels": {"x": "y"}},
            "spec": {"containers": [
                {"name": "a", "image": "i"},
                {"name": "b", "image": "i", "ports": [{"containerPort": 80}]}
            ]},
            "status": {"phase": "Running"}
        })
    );
}

#[test]
fn spec_foo_and_container_bogus_as_kubernetes_words_them() {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"foo": 1, "containers": [{"name": "c", "image": "i", "bogus": 1}]}});
    let unknown = kind("", "v1", "Pod").prune(&mut pod);
    assert_eq!(unknown, vec!["spec.containers[0].bogus", "spec.foo"]);
}

#[test]
fn map_keys_are_never_unknown_fields() {
    let mut cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "data": {"anything": "goes", "game.properties": "a=b"},
        "binaryData": {"blob": "aGVsbG8="}
    });
    let before = cm.clone();
    let s = kind("", "v1", "ConfigMap");
    assert!(s.prune(&mut cm).is_empty());
    assert_eq!(cm, before);
    assert!(s.check_types(&cm).is_empty());
}

#[test]
fn unknown_fields_inside_map_values_name_the_key() {
    let mut quota = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "data": {"k": "aGk="}, "stringData": {"x": "y"}, "nope": {"a": 1}});
    assert_eq!(kind("", "v1", "Secret").prune(&mut quota), vec!["nope"]);
}

#[test]
fn opaque_payloads_keep_everything() {
    // ControllerRevision.data is a RawExtension; managedFields[].fieldsV1 is FieldsV1.
    let mut rev = json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": "r"}, "revision": 2,
        "data": {"spec": {"template": {"anything": [1, 2, {"x": null}]}}}});
    let before = rev.clone();
    let s = kind("apps", "v1", "ControllerRevision");
    assert!(s.prune(&mut rev).is_empty());
    assert_eq!(rev, before);
    assert!(s.check_types(&rev).is_empty());
}

#[test]
fn type_errors_read_like_kubernetes_decoding_errors() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i",
            "ports": [{"containerPort": "80"}]}]}});
    let errs = kind("", "v1", "Pod").check_types(&pod);
    assert_eq!(
        errs,
        vec![TypeError {
            path: "spec.containers[0].ports[0].containerPort".into(),
            message: "json: cannot unmarshal string into Go struct field \
                      ContainerPort.spec.containers.ports.containerPort of type int32"
                .into(),
        }]
    );
}

#[test]
fn type_errors_cover_structs_lists_maps_and_numbers() {
    let s = kind("", "v1", "Pod");
    let msgs = |v: Value| -> Vec<String> {
        s.check_types(&v)
            .into_iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    };
    assert_eq!(
        msgs(json!({"spec": "x"})),
        ["spec: json: cannot unmarshal string into Go struct field Pod.spec of type v1.PodSpec"]
    );
    assert_eq!(
        msgs(json!({"spec": {"containers": {"name": "c"}}})),
        [
            "spec.containers: json: cannot unmarshal object into Go struct field \
          PodSpec.spec.containers of type []v1.Container"
        ]
    );
    assert_eq!(
        msgs(json!({"metadata": {"labels": {"a": 1}}})),
        [
            "metadata.labels.a: json: cannot unmarshal number into Go struct field \
          ObjectMeta.metadata.labels of type string"
        ]
    );
    assert_eq!(
        msgs(json!({"metadata": {"labels": []}})),
        [
            "metadata.labels: json: cannot unmarshal array into Go struct field \
          ObjectMeta.metadata.labels of type map[string]string"
        ]
    );
    assert_eq!(
        msgs(json!({"spec": {"terminationGracePeriodSeconds": 1.5}})),
        [
            "spec.terminationGracePeriodSeconds: json: cannot unmarshal number 1.5 into Go struct \
          field PodSpec.spec.terminationGracePeriodSeconds of type int64"
        ]
    );
    assert_eq!(
        msgs(json!({"spec": {"containers": [{"ports": [{"containerPort": 4294967296u64}]}]}})),
        [
            "spec.containers[0].ports[0].containerPort: json: cannot unmarshal number 4294967296 \
          into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32"
        ]
    );
    assert_eq!(
        msgs(json!({"spec": {"hostNetwork": "true"}})),
        [
            "spec.hostNetwork: json: cannot unmarshal string into Go struct field \
          PodSpec.spec.hostNetwork of type bool"
        ]
    );
    assert_eq!(
        msgs(json!([1])),
        [": json: cannot unmarshal array into Go value of type v1.Pod"]
    );
    // int-or-string takes both, and rejects the rest as int32 does.
    assert!(msgs(
        json!({"spec": {"containers": [{"livenessProbe": {"httpGet": {"port": "http"}}}]}})
    )
    .is_empty());
    assert!(
        msgs(json!({"spec": {"containers": [{"livenessProbe": {"httpGet": {"port": 80}}}]}}))
            .is_empty()
    );
    assert_eq!(
        msgs(json!({"spec": {"containers": [{"livenessProbe": {"httpGet": {"port": true}}}]}})),
        [
            "spec.containers[0].livenessProbe.httpGet.port: json: cannot unmarshal bool into Go \
          struct field HTTPGetAction.spec.containers.livenessProbe.httpGet.port of type int32"
        ]
    );
    // Quantities.
    assert_eq!(
        msgs(json!({"spec": {"containers": [{"resources": {"limits": {"cpu": "lots"}}}]}})),
        ["spec.containers[0].resources.limits.cpu: quantities must match the regular expression \
          '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"]
    );
    // null is unset, anywhere.
    assert!(
        msgs(json!({"metadata": null, "spec": {"containers": null, "hostNetwork": null}}))
            .is_empty()
    );
}

#[test]
fn secret_data_must_be_base64() {
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "data": {"ok": "aGVsbG8=", "bad": "not base64!"}});
    let errs = kind("", "v1", "Secret").check_types(&secret);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].path, "data.bad");
    assert_eq!(errs[0].message, "illegal base64 data at input byte 3");
}

#[test]
fn crd_structural_schema_honours_preserve_unknown_fields_and_embedded_resources() {
    let schemas = Schemas::from_json_schema(&json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "replicas": {"type": "integer", "minimum": 0},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "mixed": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"inner": {"type": "object", "properties": {"a": {"type": "string"}}}}
                    },
                    "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                    "template": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": true,
                        "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}
                    },
                    "items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string"}}}}
                }
            }
        }
    }))
    .unwrap();
    let root = schemas.root().unwrap();
    assert_eq!(
        root.property("spec")
            .unwrap()
            .property("replicas")
            .unwrap()
            .schema()
            .validation
            .as_ref()
            .unwrap()
            .minimum,
        Some(0.0)
    );
    let mut obj = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "labels": {"a": "b"}, "nonsense": true},
        "spec": {
            "replicas": 2,
            "free": {"anything": {"at": ["all"]}},
            "mixed": {"kept": 1, "inner": {"a": "x", "dropped": 2}},
            "tags": {"k": "v"},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "junk": 1},
                         "spec": {"x": "y", "z": 1}},
            "items": [{"n": "1", "m": 2}],
            "unknown": 1
        },
        "status": {"anything": 1}
    });
    let unknown = root.prune(&mut obj);
    assert_eq!(
        unknown,
        vec![
            "metadata.nonsense",
            "spec.items[0].m",
            "spec.mixed.inner.dropped",
            "spec.template.metadata.junk",
            "spec.template.spec.z",
            "spec.unknown",
            "status",
        ]
    );
    assert_eq!(obj["spec"]["free"], json!({"anything": {"at": ["all"]}}));
    assert_eq!(obj["spec"]["mixed"]["kept"], json!(1));
    assert_eq!(obj["spec"]["template"]["kind"], json!("Pod"));

    let preserve_all = Schemas::from_json_schema(&json!({
        "type": "object", "x-kubernetes-preserve-unknown-fields": true
    }))
    .unwrap();
    let mut anything = json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n"},
        "spec": {"whatever": [1, 2]}, "extra": true});
    let before = anything.clone();
    assert!(preserve_all.root().unwrap().prune(&mut anything).is_empty());
    assert_eq!(anything, before);
}

#[test]
fn recursive_types_are_cycles_not_copies() {
    let props = Schemas::builtin()
        .definition("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps")
        .unwrap();
    let nested = props
        .property("properties")
        .unwrap()
        .additional_properties()
        .unwrap();
    assert_eq!(nested.id(), props.id());
    // A CRD with a deep schema prunes and type-checks fine.
    let mut crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"list": {"type": "array", "items": {"type": "string"}}}}}}}}]}
    });
    let before = crd.clone();
    let s = kind("apiextensions.k8s.io", "v1", "CustomResourceDefinition");
    assert!(s.prune(&mut crd).is_empty());
    assert_eq!(crd, before);
    assert!(s.check_types(&crd).is_empty());
}

#[test]
fn lookup_walks_fields_arrays_and_maps() {
    let d = kind("apps", "v1", "Deployment");
    let c = d.lookup("spec.template.spec.containers").unwrap();
    assert_eq!(c.schema().ty, Some(Type::Array));
    let port = d
        .lookup("spec.template.spec.containers.ports.containerPort")
        .unwrap();
    assert_eq!(port.schema().format.as_deref(), Some("int32"));
    assert!(d.lookup("spec.nope").is_none());
}

#[test]
fn builtin_schemas_build_once_and_walk_fast() {
    let t = std::time::Instant::now();
    let schemas = Schemas::builtin();
    let built = t.elapsed();
    let s = schemas.for_kind("apps", "v1", "Deployment").unwrap();
    let d = deployment();
    let n = 2000;
    let t = std::time::Instant::now();
    for _ in 0..n {
        let mut v = d.clone();
        assert!(s.prune(&mut v).is_empty());
        assert!(s.check_types(&v).is_empty());
    }
    let per = t.elapsed() / n;
    // Generous bounds: this is an unoptimised test build on a shared machine.
    eprintln!(
        "built in {built:?} ({} nodes); clone+prune+check of a Deployment: {per:?}",
        schemas.len()
    );
    assert!(per < std::time::Duration::from_millis(5), "{per:?}");
}
