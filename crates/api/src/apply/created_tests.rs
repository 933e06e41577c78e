//! The one-walk managedFields of a create against the general path, byte for byte: over
//! hand-written objects (the field manager tests' objects, a Deployment, a Pod with
//! containers, ports, env and volumes, a Service, custom resources, schema-less objects) and
//! over objects generated from the schema of every built-in kind, including duplicate list
//! keys, nulls, empty values, zero values and values of the wrong kind.

use serde_json::{json, Map, Value};

use super::super::{update, update_tracked, zero, FieldSet, PathElement, Request};
use super::*;
use crate::schema::{AdditionalProperties, SchemaRef, Schemas, Type};

const T0: &str = "2024-01-01T00:00:00.5+01:00";

fn req<'a>(api_version: &'a str, kind: &'a str, manager: &'a str, now: &'a str) -> Request<'a> {
    Request {
        manager,
        api_version,
        kind,
        subresource: "",
        now,
        force: false,
    }
}

fn ignored(paths: &[&[&str]]) -> FieldSet {
    let p: Vec<Vec<PathElement>> = paths
        .iter()
        .map(|p| p.iter().map(|f| PathElement::field(*f)).collect())
        .collect();
    FieldSet::from_paths(p.iter().map(Vec::as_slice))
}

/// Both paths over `obj`; panics with both outputs when they differ. Returns whether the
/// one walk answered (rather than giving up).
fn same(schema: Option<SchemaRef<'_>>, obj: &Value, r: &Request<'_>, ign: &FieldSet) -> bool {
    let mut general = obj.clone();
    update_tracked(schema, None, &mut general, r, ign).expect("general path");
    let mut fast = obj.clone();
    update(schema, None, &mut fast, r, ign).expect("one walk");
    let (g, f) = (
        serde_json::to_string(&general).unwrap(),
        serde_json::to_string(&fast).unwrap(),
    );
    assert_eq!(f, g, "the one walk differs for {obj}");
    let mut walked = obj.clone();
    if let Some(m) = walked.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    fields_v1(
        super::super::root_ty(schema),
        &super::super::empty_object(r),
        &walked,
        ign,
    )
    .is_ok()
}

fn builtin(api_version: &str, kind: &str) -> Option<SchemaRef<'static>> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Schemas::builtin().for_kind(group, version, kind)
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "generateName": "web-",
            "uid": "u", "creationTimestamp": "2024-01-01T00:00:00Z", "generation": 1,
            "labels": {"app": "web", "tier": "front"}, "annotations": {"a": "<b>"},
            "finalizers": ["x/y", "x/y", "z"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                "uid": "o", "controller": true}]},
        "spec": {
            "containers": [
                {"name": "web", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent",
                 "args": ["--port", "80"],
                 "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"},
                           {"containerPort": 80, "protocol": "UDP"},
                           {"containerPort": 9, "protocol": "TCP"},
                           {"containerPort": 10, "protocol": "TCP"}],
                 "env": [{"name": "A", "value": "1"},
                         {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                         {"name": "A", "value": "2"}],
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                               "limits": {"memory": "128Mi"}},
                 "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                  {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": true}],
                 "terminationMessagePath": "/dev/termination-log",
                 "terminationMessagePolicy": "File",
                 "securityContext": {}},
                {"name": "side", "image": "busybox", "command": ["sleep", "1d"], "env": []}],
            "initContainers": [],
            "volumes": [{"name": "data", "emptyDir": {}},
                        {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 420,
                            "items": [{"key": "k", "path": "p"}]}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst", "securityContext": {}, "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}],
            "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
            "nodeSelector": {}, "hostNetwork": false
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"}
    })
}

fn service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "type": "ClusterIP",
            "ports": [{"port": 80, "targetPort": "http", "protocol": "TCP", "name": "http"},
                      {"port": 443, "targetPort": 8443}],
            "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None",
            "internalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {}}
    })
}

/// `kubectl create deployment`'s Deployment, with a container port (a keyed list).
fn deployment() -> Value {
    let mut d = crate::apply::tests::created_deployment();
    d["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
    d
}

fn widgets() -> Schemas {
    Schemas::from_json_schema(&json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "items": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["id"],
                          "items": {"type": "object", "properties": {
                              "id": {"type": "integer"}, "size": {"type": "integer"}}}},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["port", "protocol"],
                          "items": {"type": "object", "properties": {
                              "port": {"type": "integer"},
                              "protocol": {"type": "string", "default": "TCP"}}}},
                "tags": {"type": "array", "items": {"type": "string"}},
                "set": {"type": "array", "x-kubernetes-list-type": "set",
                        "items": {"type": "number"}},
                "atomic": {"type": "object", "x-kubernetes-map-type": "atomic",
                           "properties": {"a": {"type": "string"}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "open": {"x-kubernetes-int-or-string": true},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
        }
    }))
    .unwrap()
}

#[test]
fn hand_written_objects_give_identical_managed_fields() {
    let status = ignored(&[&["status"]]);
    let none = FieldSet::new();
    let cases: Vec<(&str, &str, Value)> = vec![
        ("v1", "Pod", pod()),
        ("v1", "Service", service()),
        ("apps/v1", "Deployment", deployment()),
        (
            "v1",
            "ConfigMap",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "default"}, "data": {"a": "1", "b": ""}}),
        ),
        (
            "v1",
            "ConfigMap",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bare"}}),
        ),
        (
            "v1",
            "Namespace",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
        ),
        (
            "scheduling.k8s.io/v1",
            "PriorityClass",
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": "p"}, "value": 0}),
        ),
        (
            "apps/v1",
            "ControllerRevision",
            json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": "r"}, "revision": 2, "data": {"x": [1]}}),
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "b"},
                "roleRef": {"apiGroup": "", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "User", "name": "u"}]}),
        ),
    ];
    for (api_version, kind, obj) in &cases {
        let schema = builtin(api_version, kind);
        assert!(schema.is_some(), "{kind} has a schema");
        for ign in [&none, &status] {
            for manager in ["kubectl-create", "", "a<b>\"c\""] {
                let r = req(api_version, kind, manager, T0);
                // A RawExtension (atomic, null in the empty object) filled in is read as two
                // kinds: left to the general path.
                let walked = same(schema, obj, &r, ign);
                assert_eq!(
                    walked,
                    *kind != "ControllerRevision",
                    "{kind}: who answered"
                );
            }
        }
        // A request that resets its managedFields, or sends a null.
        for sent in [json!([]), json!([{}]), Value::Null] {
            let mut o = obj.clone();
            o["metadata"]["managedFields"] = sent;
            same(schema, &o, &req(api_version, kind, "m", T0), &status);
        }
        // An unreadable time is written as given, an empty one not at all.
        same(
            schema,
            obj,
            &req(api_version, kind, "m", "yesterday"),
            &none,
        );
        same(schema, obj, &req(api_version, kind, "m", ""), &none);
    }
    // The Pod's fields as Kubernetes records them for `kubectl create`.
    let mut p = pod();
    update(
        builtin("v1", "Pod"),
        None,
        &mut p,
        &req("v1", "Pod", "k", T0),
        &status,
    )
    .unwrap();
    let entry = &p["metadata"]["managedFields"][0];
    assert_eq!(entry["time"], "2023-12-31T23:00:00Z");
    let f = &entry["fieldsV1"];
    assert_eq!(
        f["f:metadata"]["f:labels"],
        json!({".": {}, "f:app": {}, "f:tier": {}})
    );
    assert_eq!(
        f["f:metadata"]["f:finalizers"],
        json!({".": {}, "v:\"x/y\"": {}, "v:\"z\"": {}})
    );
    assert!(f["f:metadata"].get("f:uid").is_none() && f.get("f:status").is_none());
    let web = &f["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"];
    assert_eq!(
        web["f:env"],
        json!({".": {}, "k:{\"name\":\"A\"}": {}, "k:{\"name\":\"B\"}": {
        ".": {}, "f:name": {}, "f:valueFrom": {".": {}, "f:fieldRef": {}}}})
    );
    assert!(web["f:ports"]
        .get("k:{\"containerPort\":80,\"protocol\":\"UDP\"}")
        .is_some());

    // Custom resources and schema-less objects.
    let schemas = widgets();
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "finalizers": ["a"], "labels": {}},
        "spec": {"items": [{"id": 1, "size": 1}, {"id": 2}, {"id": 1}, {"size": 3}],
                 "ports": [{"port": 80}, {"port": 80, "protocol": "UDP"}, {"port": 80, "protocol": "TCP"}],
                 "tags": ["x", "x"], "set": [1, 2.5, 2.5, 1e21], "atomic": {"a": "b"},
                 "labels": {"k": "v"}, "open": 3, "extra": {"anything": {"goes": [1]}, "n": null}},
        "status": {"ready": true}});
    for ign in [&none, &status] {
        same(
            schemas.root(),
            &widget,
            &req("example.com/v1", "Widget", "m", T0),
            ign,
        );
        same(None, &widget, &req("example.com/v1", "Thing", "m", T0), ign);
    }
    // Values of the wrong kind and a set whose values share a text: the general path runs.
    let odd = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"items": "none", "set": [1, 1.0], "atomic": [], "labels": {"k": {}}}});
    same(
        schemas.root(),
        &odd,
        &req("example.com/v1", "Widget", "m", T0),
        &none,
    );
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}

fn deref(s: SchemaRef<'_>) -> SchemaRef<'_> {
    let n = s.schema();
    if n.ty.is_none() && n.properties.is_empty() && n.items.is_none() && n.all_of.len() == 1 {
        return deref(s.schemas().get(n.all_of[0]));
    }
    s
}

/// A value for `s`: mostly well-formed, sometimes null, empty, a zero value or of the wrong
/// kind; lists of map type get repeated and partial keys now and then.
fn sample(s: SchemaRef<'_>, depth: u32, rng: &mut Rng) -> Value {
    let s = deref(s);
    let n = s.schema();
    if rng.one_in(40) {
        return Value::Null;
    }
    if rng.one_in(60) {
        return json!("wrong");
    }
    let scalar = |rng: &mut Rng| match rng.next() % 4 {
        0 => json!(""),
        1 => json!(0),
        2 => json!(format!("s{}", rng.next() % 3)),
        _ => json!(rng.next() % 3),
    };
    if n.int_or_string {
        return scalar(rng);
    }
    match n.ty {
        Some(Type::String) => json!(["", "a", "b", "<c>"][(rng.next() % 4) as usize]),
        Some(Type::Integer) | Some(Type::Number) => json!(rng.next() % 3),
        Some(Type::Boolean) => json!(rng.one_in(2)),
        Some(Type::Array) => {
            let Some(items) = s.items() else {
                return json!([]);
            };
            let len = if depth == 0 { 0 } else { rng.next() % 4 };
            let mut out: Vec<Value> = (0..len).map(|_| sample(items, depth - 1, rng)).collect();
            if len > 0 && rng.one_in(4) {
                // A repeated item (duplicate keys or set values).
                out.push(out[0].clone());
            }
            Value::Array(out)
        }
        Some(Type::Object) | None => {
            let mut m = Map::new();
            if depth == 0 || rng.one_in(15) {
                return Value::Object(m);
            }
            let props: Vec<(&str, _)> = n.properties.iter().collect();
            for (name, id) in props {
                if rng.one_in(3) {
                    m.insert(name.into(), sample(s.schemas().get(id), depth - 1, rng));
                }
            }
            match n.additional_properties {
                AdditionalProperties::Schema(id) => {
                    for k in ["k1", "k2"] {
                        if rng.one_in(2) {
                            m.insert(k.into(), sample(s.schemas().get(id), depth - 1, rng));
                        }
                    }
                }
                AdditionalProperties::Any | AdditionalProperties::Unspecified
                    if n.properties.is_empty() && rng.one_in(2) =>
                {
                    m.insert("any".into(), scalar(rng));
                }
                _ => {}
            }
            if n.ty.is_none() && m.is_empty() && rng.one_in(2) {
                return scalar(rng);
            }
            Value::Object(m)
        }
    }
}

#[test]
fn generated_objects_of_every_builtin_kind_give_identical_managed_fields() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let sets = [
        FieldSet::new(),
        ignored(&[&["status"]]),
        ignored(&[&["spec"], &["status", "conditions"]]),
    ];
    let (mut walked, mut total) = (0, 0);
    for (api_version, kind, _) in zero::ZERO_OBJECTS {
        let Some(schema) = builtin(api_version, kind) else {
            continue;
        };
        for round in 0..40 {
            let mut obj = sample(schema, 7, &mut rng);
            let Some(m) = obj.as_object_mut() else {
                continue;
            };
            m.insert("apiVersion".into(), json!(api_version));
            m.insert("kind".into(), json!(kind));
            if round % 5 == 0 {
                m.insert("apiVersion".into(), json!("other/v1"));
            }
            let ign = &sets[round % sets.len()];
            total += 1;
            if same(Some(schema), &obj, &req(api_version, kind, "m", T0), ign) {
                walked += 1;
            }
        }
    }
    // Most objects take the one walk (the rest are the cases it leaves to the general path).
    assert!(
        total > 1000 && walked * 10 > total * 9,
        "{walked} of {total}"
    );
}
