//! The field manager end to end: applies and updates on built-in kinds, custom resources and
//! schema-less objects, checked against the managedFields and errors Kubernetes v1.32
//! produces (cases from Kubernetes' fieldmanager and lastappliedmanager tests, and
//! managedFields as `kubectl create` and the server-side apply documentation show them).

use serde_json::{json, Value};

use super::*;
use crate::schema::Schemas;

const T0: &str = "2024-01-01T00:00:00Z";
const T1: &str = "2024-01-01T00:00:01Z";
const T2: &str = "2024-01-01T00:00:02Z";

/// An object's life in a store: writes through [`update`] and [`apply`], the server filling
/// the uid on creation as it does.
struct Store {
    api_version: &'static str,
    kind: &'static str,
    schema: Option<SchemaRef<'static>>,
    live: Option<Value>,
    ignored: FieldSet,
}

impl Store {
    fn new(
        group: &str,
        version: &'static str,
        api_version: &'static str,
        kind: &'static str,
    ) -> Store {
        Store {
            api_version,
            kind,
            schema: Schemas::builtin().for_kind(group, version, kind),
            live: None,
            ignored: FieldSet::new(),
        }
    }

    fn deployments() -> Store {
        Store::new("apps", "v1", "apps/v1", "Deployment")
    }

    fn req<'a>(&self, manager: &'a str, now: &'a str, force: bool) -> Request<'a> {
        Request {
            manager,
            api_version: self.api_version,
            kind: self.kind,
            subresource: "",
            now,
            force,
        }
    }

    fn stored(&mut self, mut obj: Value) {
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!("uid-1");
        }
        self.live = Some(obj);
    }

    fn update(&mut self, manager: &str, mut obj: Value, now: &str) {
        let req = self.req(manager, now, false);
        update(
            self.schema,
            self.live.as_ref(),
            &mut obj,
            &req,
            &self.ignored,
        )
        .expect("update");
        self.stored(obj);
    }

    fn apply(
        &mut self,
        manager: &str,
        config: Value,
        now: &str,
        force: bool,
    ) -> Result<(), ApplyError> {
        let req = self.req(manager, now, force);
        let out = apply(
            self.schema,
            self.live.as_ref(),
            &config,
            &req,
            &self.ignored,
        )?;
        self.stored(out);
        Ok(())
    }

    fn live(&self) -> &Value {
        self.live.as_ref().expect("an object")
    }

    fn managed(&self) -> &Value {
        &self.live()["metadata"]["managedFields"]
    }

    /// (manager, operation) of each entry, in order.
    fn managers(&self) -> Vec<(String, String)> {
        self.managed()
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        (
                            e["manager"].as_str().unwrap_or("").to_string(),
                            e["operation"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn fields_of(&self, manager: &str) -> Value {
        self.managed()
            .as_array()
            .and_then(|a| a.iter().find(|e| e["manager"] == manager))
            .map(|e| e["fieldsV1"].clone())
            .unwrap_or(Value::Null)
    }
}

/// A Deployment as `kubectl create deployment nginx --image=nginx` sends it once defaulted.
pub(super) fn created_deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"},
                     "creationTimestamp": null},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"creationTimestamp": null, "labels": {"app": "nginx"}},
                "spec": {
                    "containers": [{"name": "nginx", "image": "nginx", "resources": {},
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File", "imagePullPolicy": "Always"}],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst", "securityContext": {},
                    "schedulerName": "default-scheduler"
                }
            },
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600
        },
        "status": {}
    })
}

#[test]
fn kubectl_create_records_what_kubernetes_records() {
    let mut s = Store::deployments();
    s.update("kubectl-create", created_deployment(), T0);
    assert_eq!(
        s.managed(),
        &json!([{
            "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "manager": "kubectl-create",
            "operation": "Update", "time": T0,
            "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {
                    "f:progressDeadlineSeconds": {}, "f:replicas": {}, "f:revisionHistoryLimit": {},
                    "f:selector": {},
                    "f:strategy": {"f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}},
                                   "f:type": {}},
                    "f:template": {
                        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                        "f:spec": {
                            "f:containers": {"k:{\"name\":\"nginx\"}": {
                                ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                                "f:resources": {}, "f:terminationMessagePath": {},
                                "f:terminationMessagePolicy": {}}},
                            "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {},
                            "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}
                        }
                    }
                }
            }
        }])
    );
}

#[test]
fn apply_creates_a_configmap_as_the_documentation_shows() {
    let mut s = Store::new("", "v1", "v1", "ConfigMap");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "test-cm", "namespace": "default", "labels": {"test-label": "test"}},
        "data": {"key": "some value"}});
    s.apply("kubectl", cm, T0, false).unwrap();
    assert_eq!(s.live()["data"], json!({"key": "some value"}));
    assert_eq!(
        s.live()["metadata"]["labels"],
        json!({"test-label": "test"})
    );
    assert_eq!(
        s.managed(),
        &json!([{"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubectl",
                 "operation": "Apply", "time": T0,
                 "fieldsV1": {"f:data": {"f:key": {}}, "f:metadata": {"f:labels": {"f:test-label": {}}}}}])
    );
}

fn replicas_config(n: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx"},
           "spec": {"replicas": n}})
}

#[test]
fn apply_conflicts_with_an_updater_and_reports_like_kubernetes() {
    let mut s = Store::deployments();
    s.update("kubectl-client-side-apply", created_deployment(), T0);
    let err = s
        .apply("kubectl", replicas_config(3), T1, false)
        .unwrap_err();
    assert_eq!(err.code(), 409);
    assert_eq!(
        err.message(),
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using apps/v1: .spec.replicas"
    );
    let ApplyError::Conflicts(c) = &err else {
        panic!("conflicts expected")
    };
    assert_eq!(c[0].field, ".spec.replicas");
    assert_eq!(
        c[0].message,
        "conflict with \"kubectl-client-side-apply\" using apps/v1"
    );
    assert_eq!(Conflict::CAUSE_TYPE, "FieldManagerConflict");
    // Applying the value the object already has is no conflict: ownership is shared.
    s.apply("kubectl", replicas_config(1), T1, false).unwrap();
    assert_eq!(
        s.managers(),
        [
            ("kubectl".to_string(), "Apply".to_string()),
            ("kubectl-client-side-apply".into(), "Update".into())
        ]
    );
}

#[test]
fn several_conflicts_are_grouped_by_manager() {
    let mut s = Store::deployments();
    s.update("kubectl-client-side-apply", created_deployment(), T0);
    s.apply(
        "other-applier",
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "labels": {"team": "a"}}}),
        T1,
        false,
    )
    .unwrap();
    let err = s
        .apply(
            "kubectl",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "nginx", "labels": {"team": "b", "app": "web"}},
                   "spec": {"replicas": 5}}),
            T2,
            false,
        )
        .unwrap_err();
    assert_eq!(
        err.message(),
        "Apply failed with 3 conflicts: conflicts with \"kubectl-client-side-apply\" using apps/v1:\n\
         - .metadata.labels.app\n\
         - .spec.replicas\n\
         conflicts with \"other-applier\":\n\
         - .metadata.labels.team"
    );
}

#[test]
fn force_moves_ownership_and_later_applies_remove_what_was_dropped() {
    let mut s = Store::deployments();
    s.update("kubectl-client-side-apply", created_deployment(), T0);
    s.apply("kubectl", replicas_config(3), T1, true).unwrap();
    assert_eq!(s.live()["spec"]["replicas"], json!(3));
    assert_eq!(
        s.fields_of("kubectl"),
        json!({"f:spec": {"f:replicas": {}}})
    );
    assert!(s.fields_of("kubectl-client-side-apply")["f:spec"]
        .get("f:replicas")
        .is_none());
    // The applier stops applying replicas: nobody else owns it, so it goes.
    s.apply(
        "kubectl",
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "annotations": {"a": "b"}}}),
        T2,
        false,
    )
    .unwrap();
    assert!(s.live()["spec"].get("replicas").is_none());
    assert_eq!(
        s.fields_of("kubectl"),
        json!({"f:metadata": {"f:annotations": {"f:a": {}}}})
    );
}

#[test]
fn fields_another_manager_owns_survive_removal() {
    let mut s = Store::new("", "v1", "v1", "ConfigMap");
    let cm = |labels: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": labels}})
    };
    s.apply("a", cm(json!({"x": "1", "y": "2"})), T0, false)
        .unwrap();
    s.apply("b", cm(json!({"y": "2"})), T1, false).unwrap();
    s.apply("a", cm(json!({"x": "1"})), T2, false).unwrap();
    assert_eq!(s.live()["metadata"]["labels"], json!({"x": "1", "y": "2"}));
    s.apply("b", cm(json!({})), T2, false).unwrap();
    assert_eq!(s.live()["metadata"]["labels"], json!({"x": "1"}));
}

#[test]
fn apply_then_update_takes_ownership_without_conflict() {
    let mut s = Store::deployments();
    let cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "x"}},
                 "template": {"metadata": {"labels": {"app": "x"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    s.apply("kubectl", cfg.clone(), T0, false).unwrap();
    // An autoscaler updates replicas through a plain update.
    let mut scaled = s.live().clone();
    scaled["spec"]["replicas"] = json!(7);
    s.update("hpa", scaled, T1);
    assert_eq!(s.fields_of("hpa"), json!({"f:spec": {"f:replicas": {}}}));
    // The applier now conflicts on replicas; once it drops the field, no conflict, value kept.
    assert!(s.apply("kubectl", cfg.clone(), T2, false).is_err());
    let mut without = cfg;
    without["spec"].as_object_mut().unwrap().remove("replicas");
    s.apply("kubectl", without, T2, false).unwrap();
    assert_eq!(s.live()["spec"]["replicas"], json!(7));
}

#[test]
fn apply_to_an_untracked_object_records_before_first_apply() {
    let mut s = Store::new("", "v1", "v1", "ConfigMap");
    // Created by a client whose writes were never tracked.
    s.stored(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "uid": "u", "labels": {"a": "1"}}, "data": {"k": "v"}}));
    s.apply(
        "kubectl",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
        "data": {"k2": "v2"}}),
        T1,
        false,
    )
    .unwrap();
    assert_eq!(
        s.managers(),
        [
            ("kubectl".to_string(), "Apply".to_string()),
            ("before-first-apply".into(), "Update".into())
        ]
    );
    assert_eq!(
        s.fields_of("before-first-apply"),
        json!({"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
    );
    assert_eq!(s.live()["data"], json!({"k": "v", "k2": "v2"}));
}

#[test]
fn updates_keep_reset_or_replace_managed_fields() {
    let mut s = Store::new("", "v1", "v1", "Pod");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    s.apply("fieldmanager_test_apply", pod.clone(), T0, false)
        .unwrap();
    // No managedFields in the request: the live ones are kept and the writer is added.
    let mut next = s.live().clone();
    next["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    next["metadata"]["labels"]["c"] = json!("d");
    s.update("update_manager", next, T1);
    assert_eq!(s.managers().len(), 2);
    // Unreadable managedFields in the request: the live ones are kept.
    let mut bad = s.live().clone();
    bad["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Bogus"}]);
    s.update("update_manager", bad, T1);
    assert_eq!(s.managers().len(), 2);
    // An empty list resets them; the existing object is then no longer tracked.
    let mut reset = s.live().clone();
    reset["metadata"]["managedFields"] = json!([]);
    s.update("update_manager", reset, T2);
    assert!(s.live()["metadata"].get("managedFields").is_none());
    let mut reset_item = pod;
    reset_item["metadata"]["managedFields"] = json!([{}]);
    let mut s2 = Store::new("", "v1", "v1", "Pod");
    s2.apply(
        "a",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"x": "y"}}}),
        T0,
        false,
    )
    .unwrap();
    s2.update("update_manager", reset_item, T1);
    assert!(s2.live()["metadata"].get("managedFields").is_none());
}

#[test]
fn never_tracked_fields_are_stripped() {
    let mut s = Store::deployments();
    s.update(
        "fieldmanager_test",
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "b", "namespace": "b", "uid": "b", "generation": 0,
                            "resourceVersion": "b", "creationTimestamp": "2024-01-01T00:00:00Z",
                            "managedFields": [{"manager": "update", "operation": "Apply",
                                               "apiVersion": "apps/v1"}]}}),
        T0,
    );
    assert!(s.live()["metadata"].get("managedFields").is_none());
}

#[test]
fn apply_checks_the_configuration() {
    let mut s = Store::deployments();
    let err = s
        .apply(
            "m",
            json!({"apiVersion": "apps/v1beta1", "kind": "Deployment"}),
            T0,
            false,
        )
        .unwrap_err();
    assert_eq!(
        err,
        ApplyError::BadRequest("invalid object type: apps/v1beta1, Kind=Deployment".into())
    );
    let err = s.apply("m", json!({}), T0, false).unwrap_err();
    assert_eq!(
        err,
        ApplyError::BadRequest("invalid object type: /, Kind=".into())
    );
    let err = s
        .apply(
            "m",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"managedFields": [{"manager": "test"}]}}),
            T0,
            false,
        )
        .unwrap_err();
    assert_eq!(
        err,
        ApplyError::BadRequest("metadata.managedFields must be nil".into())
    );
    let err = s
        .apply(
            "m",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "default"}, "spec": {"foo": 1}}),
            T0,
            false,
        )
        .unwrap_err();
    assert_eq!(err.code(), 500);
    assert_eq!(
        err.message(),
        "failed to create typed patch object (default/d; apps/v1, Kind=Deployment): .spec.foo: field not declared in schema"
    );
    let mut svc = Store::new("", "v1", "v1", "Service");
    let err = svc
        .apply(
            "m",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 80}, {"port": 80, "protocol": "TCP"}]}}),
            T0,
            false,
        )
        .unwrap_err();
    assert_eq!(
        err.message(),
        "failed to create typed patch object (/s; /v1, Kind=Service): .spec.ports: duplicate entries for key [port=80,protocol=\"TCP\"]"
    );
    // A broken live managedFields is a server error.
    let mut broken = Store::deployments();
    broken.stored(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d",
        "managedFields": [{"manager": "x", "operation": "Apply", "apiVersion": "apps/v1"}]}}),
    );
    let err = broken
        .apply("m", replicas_config(1), T0, false)
        .unwrap_err();
    assert_eq!(
        err,
        ApplyError::Internal(
            "failed to decode managed fields: missing fieldsType in managed fields entry 0".into()
        )
    );
}

#[test]
fn a_noop_apply_keeps_the_object_and_the_entry_time() {
    let mut s = Store::new("", "v1", "v1", "Pod");
    let pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}});
    s.apply("fieldmanager_test_apply", pod.clone(), T0, false)
        .unwrap();
    let before = s.live().clone();
    s.apply("fieldmanager_test_apply", pod.clone(), T1, false)
        .unwrap();
    assert_eq!(s.live(), &before);
    // A new applier of the same values changes only the managedFields, without a time.
    s.apply("other", pod.clone(), T2, false).unwrap();
    let other = s
        .managed()
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "other")
        .cloned()
        .unwrap();
    assert!(other.get("time").is_none());
    // A no-op update changes nothing at all.
    let before = s.live().clone();
    s.update("fieldmanager_test_update", before.clone(), T2);
    assert_eq!(s.live(), &before);
}

#[test]
fn reset_fields_are_not_owned() {
    let mut s = Store::deployments();
    s.ignored = FieldSet::from_paths([&[PathElement::field("status")][..]]);
    let mut d = created_deployment();
    d["status"] = json!({"replicas": 1});
    s.update("kubectl-create", d, T0);
    assert!(s.fields_of("kubectl-create").get("f:status").is_none());
}

#[test]
fn subresource_managers_are_told_apart() {
    let mut s = Store::deployments();
    s.update("kubectl-create", created_deployment(), T0);
    let mut status = s.live().clone();
    status["status"] = json!({"replicas": 1});
    let req = Request {
        manager: "kube-controller-manager",
        api_version: "apps/v1",
        kind: "Deployment",
        subresource: "status",
        now: T1,
        force: false,
    };
    // A status write ignores managedFields in the request and keeps the live ones.
    status["metadata"]["managedFields"] = json!([]);
    update(
        s.schema,
        s.live.as_ref(),
        &mut status,
        &req,
        &FieldSet::new(),
    )
    .unwrap();
    s.stored(status);
    let entry = s
        .managed()
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "kube-controller-manager")
        .cloned()
        .unwrap();
    assert_eq!(entry["subresource"], json!("status"));
    assert_eq!(entry["fieldsV1"], json!({"f:status": {"f:replicas": {}}}));
    let err = s
        .apply(
            "kubectl",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "nginx"}, "status": {"replicas": 3}}),
            T2,
            false,
        )
        .unwrap_err();
    assert_eq!(
        err.message(),
        "Apply failed with 1 conflict: conflict with \"kube-controller-manager\" with subresource \"status\" using apps/v1: .status.replicas"
    );
}

#[test]
fn update_entries_are_capped_into_ancient_changes() {
    let mut s = Store::new("", "v1", "v1", "ConfigMap");
    s.apply(
        "applier",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
        "data": {"applied": "x"}}),
        T0,
        false,
    )
    .unwrap();
    for i in 0..12 {
        let mut next = s.live().clone();
        next["data"][format!("k{i}")] = json!("v");
        let now = format!("2024-01-01T00:01:{i:02}Z");
        s.update(&format!("updater-{i:02}"), next, &now);
    }
    let managers = s.managers();
    assert_eq!(managers.len(), 11, "{managers:?}");
    assert_eq!(managers[0], ("applier".to_string(), "Apply".to_string()));
    assert_eq!(
        managers[1],
        ("ancient-changes".to_string(), "Update".to_string())
    );
    assert_eq!(
        s.fields_of("ancient-changes"),
        json!({"f:data": {"f:k0": {}, "f:k1": {}, "f:k2": {}}})
    );
    assert_eq!(managers[2].0, "updater-03");
}

fn last_applied_case(
    manager: &str,
    last_applied: Option<Value>,
    original: Value,
    applied: Value,
    expect_conflicts: &[&str],
) {
    let mut s = Store::deployments();
    let mut orig = original.clone();
    let annotation = match last_applied {
        Some(Value::String(raw)) => raw,
        Some(v) => crate::apply::value::go_json(&v),
        None => crate::apply::value::go_json(&original),
    };
    orig["metadata"]["annotations"] = json!({(lastapplied::ANNOTATION): annotation});
    s.update("test_client_side_apply", orig, T0);
    match s.apply(manager, applied.clone(), T1, false) {
        Ok(()) => assert!(
            expect_conflicts.is_empty(),
            "expected conflicts {expect_conflicts:?}"
        ),
        Err(ApplyError::Conflicts(c)) => {
            let mut got: Vec<&str> = c.iter().map(|c| c.field.as_str()).collect();
            got.sort_unstable();
            let mut want = expect_conflicts.to_vec();
            want.sort_unstable();
            assert_eq!(got, want);
            assert!(c
                .iter()
                .all(|c| c.manager == "\"test_client_side_apply\" using apps/v1"));
            s.apply(manager, applied.clone(), T1, true)
                .expect("force resolves conflicts");
        }
        Err(e) => panic!("unexpected {e}"),
    }
    assert_eq!(s.live()["spec"]["replicas"], applied["spec"]["replicas"]);
}

fn dep(
    labels: Option<&str>,
    replicas: i64,
    selector: &str,
    tmpl: &str,
    images: &[(&str, &str)],
) -> Value {
    let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "my-deployment"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": selector}},
                 "template": {"metadata": {"labels": {"app": tmpl}},
                              "spec": {"containers": images.iter()
                                  .map(|(n, i)| json!({"name": n, "image": i})).collect::<Vec<_>>()}}}});
    if let Some(l) = labels {
        d["metadata"]["labels"] = json!({"app": l});
    }
    d
}

#[test]
fn kubectl_takes_over_client_side_applied_fields() {
    // Fields whose live values still match the annotation are kubectl's to take.
    last_applied_case(
        "kubectl",
        Some(dep(
            None,
            3,
            "my-app",
            "my-app",
            &[("my-c", "my-image-v1"), ("my-c2", "my-image2")],
        )),
        dep(
            Some("my-app"),
            100,
            "my-app",
            "my-app",
            &[("my-c", "my-image-v2")],
        ),
        dep(
            Some("my-new-label"),
            333,
            "my-new-label",
            "my-new-label",
            &[("my-c", "my-image-new")],
        ),
        &[
            ".metadata.labels.app",
            ".spec.replicas",
            ".spec.template.spec.containers[name=\"my-c\"].image",
        ],
    );
    // The annotation is the original: everything may be taken over.
    last_applied_case(
        "kubectl",
        None,
        dep(
            Some("my-app"),
            3,
            "my-app",
            "my-app",
            &[("my-c", "my-image")],
        ),
        dep(
            Some("my-new-label"),
            333,
            "my-new-label",
            "my-new-label",
            &[("my-c", "my-image")],
        ),
        &[],
    );
    // Only kubectl gets this.
    last_applied_case(
        "not_kubectl",
        None,
        dep(
            Some("my-app"),
            100,
            "my-app",
            "my-app",
            &[("my-c", "my-image")],
        ),
        dep(
            Some("my-new-label"),
            3,
            "my-app",
            "my-app",
            &[("my-c", "my-new-image")],
        ),
        &[
            ".metadata.labels.app",
            ".spec.replicas",
            ".spec.template.spec.containers[name=\"my-c\"].image",
        ],
    );
    // An annotation of another version, or not an object of a kind, allows nothing.
    let small = |n: i64| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "my-deployment"}, "spec": {"replicas": n}})
    };
    let mut other_version = small(3);
    other_version["apiVersion"] = json!("extensions/v1beta1");
    last_applied_case(
        "kubectl",
        Some(other_version),
        small(3),
        small(100),
        &[".spec.replicas"],
    );
    last_applied_case(
        "kubectl",
        Some(
            json!({"apiVersion": "foo", "kind": "bar", "spec": "expect conflict due to invalid object"}),
        ),
        small(3),
        small(100),
        &[".spec.replicas"],
    );
    last_applied_case(
        "kubectl",
        Some(json!("")),
        small(3),
        small(100),
        &[".spec.replicas"],
    );
    last_applied_case("kubectl", None, small(3), small(100), &[]);
}

#[test]
fn kubectl_apply_rewrites_an_existing_last_applied_annotation() {
    let mut s = Store::deployments();
    let mut orig = replicas_config(1);
    orig["metadata"]["annotations"] = json!({(lastapplied::ANNOTATION): "{}", "keep": "me"});
    s.update("kubectl-client-side-apply", orig, T0);
    let cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "annotations": {"note": "<&>"}}, "spec": {"replicas": 1}});
    s.apply("kubectl", cfg.clone(), T1, false).unwrap();
    assert_eq!(
        s.live()["metadata"]["annotations"][lastapplied::ANNOTATION],
        json!("{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"annotations\":{\"note\":\"\\u003c\\u0026\\u003e\"},\"name\":\"nginx\"},\"spec\":{\"replicas\":1}}\n")
    );
    assert_eq!(s.live()["metadata"]["annotations"]["keep"], json!("me"));
    // Another manager's apply leaves the annotation alone.
    let before = s.live()["metadata"]["annotations"][lastapplied::ANNOTATION].clone();
    s.apply(
        "not-kubectl",
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "labels": {"x": "y"}}}),
        T2,
        false,
    )
    .unwrap();
    assert_eq!(
        s.live()["metadata"]["annotations"][lastapplied::ANNOTATION],
        before
    );
    // Without the annotation kubectl does not add one.
    let mut fresh = Store::deployments();
    fresh.apply("kubectl", cfg, T0, false).unwrap();
    assert!(fresh.live()["metadata"]["annotations"]
        .get(lastapplied::ANNOTATION)
        .is_none());
}

fn widgets_schema() -> Schemas {
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
                "tags": {"type": "array", "items": {"type": "string"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }}
        }
    }))
    .unwrap()
}

#[test]
fn custom_resources_merge_by_their_schema() {
    let schemas = widgets_schema();
    let schema = schemas.root();
    let req = |m: &'static str| Request {
        manager: m,
        api_version: "example.com/v1",
        kind: "Widget",
        subresource: "",
        now: T0,
        force: false,
    };
    let w = |spec: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "finalizers": ["a"]}, "spec": spec})
    };
    let live = apply(
        schema,
        None,
        &w(json!({"items": [{"id": 1, "size": 1}], "tags": ["x"],
        "extra": {"anything": {"goes": [1]}}})),
        &req("one"),
        &FieldSet::new(),
    )
    .unwrap();
    assert_eq!(
        live,
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "finalizers": ["a"], "managedFields": live["metadata"]["managedFields"]},
        "spec": {"items": [{"id": 1, "size": 1}], "tags": ["x"], "extra": {"anything": {"goes": [1]}}}})
    );
    let mut cfg = w(json!({"items": [{"id": 2, "size": 2}], "tags": ["y"]}));
    cfg["metadata"]["finalizers"] = json!(["b"]);
    let err = apply(schema, Some(&live), &cfg, &req("two"), &FieldSet::new()).unwrap_err();
    assert_eq!(
        err.message(),
        "Apply failed with 1 conflict: conflict with \"one\": .spec.tags"
    );
    cfg["spec"].as_object_mut().unwrap().remove("tags");
    let out = apply(schema, Some(&live), &cfg, &req("two"), &FieldSet::new()).unwrap();
    // Items merge by key and finalizers as a set; the atomic tags list stays whole.
    assert_eq!(
        out["spec"]["items"],
        json!([{"id": 1, "size": 1}, {"id": 2, "size": 2}])
    );
    assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
    assert_eq!(out["spec"]["tags"], json!(["x"]));
    assert_eq!(
        out["metadata"]["managedFields"][1]["fieldsV1"],
        json!({"f:metadata": {"f:finalizers": {"v:\"b\"": {}}},
               "f:spec": {"f:items": {"k:{\"id\":2}": {".": {}, "f:id": {}, "f:size": {}}}}})
    );
}

#[test]
fn schemaless_objects_use_the_deduced_type() {
    let req = Request {
        manager: "m",
        api_version: "example.com/v1",
        kind: "Thing",
        subresource: "",
        now: T0,
        force: false,
    };
    let live = apply(
        None,
        None,
        &json!({"apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "t"}, "spec": {"list": [1, 2], "map": {"a": 1}}}),
        &req,
        &FieldSet::new(),
    )
    .unwrap();
    assert_eq!(
        live["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:spec": {".": {}, "f:list": {}, "f:map": {".": {}, "f:a": {}}}})
    );
    let out = apply(
        None,
        Some(&live),
        &json!({"apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "t"}, "spec": {"list": [3], "map": {"b": 2}}}),
        &req,
        &FieldSet::new(),
    )
    .unwrap();
    assert_eq!(out["spec"], json!({"list": [3], "map": {"b": 2}}));
}

#[test]
fn typed_helpers_expose_the_engine() {
    let pod = Schemas::builtin().for_kind("", "v1", "Pod");
    let obj = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let fields = fields_of(pod, &obj);
    assert_eq!(
        encode_fields(&fields),
        json!({"f:metadata": {"f:labels": {"f:a": {}}},
               "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
    );
    assert_eq!(decode_fields(&encode_fields(&fields)).unwrap(), fields);
    let mut changed = obj.clone();
    changed["spec"]["containers"][0]["image"] = json!("j");
    changed["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("a");
    let (modified, removed) = compare(pod, &obj, &changed);
    assert_eq!(
        modified
            .paths()
            .iter()
            .map(|p| path_string(p))
            .collect::<Vec<_>>(),
        [".spec.containers[name=\"c\"].image"]
    );
    assert_eq!(
        removed
            .paths()
            .iter()
            .map(|p| path_string(p))
            .collect::<Vec<_>>(),
        [".metadata.labels.a"]
    );
    let merged = merge(
        pod,
        &obj,
        &json!({"spec": {"containers": [{"name": "d", "image": "x"}]}}),
    )
    .unwrap();
    assert_eq!(
        merged["spec"]["containers"].as_array().map(Vec::len),
        Some(2)
    );
    let without = remove(
        pod,
        &merged,
        &FieldSet::from_paths([&[PathElement::field("spec")][..]]),
    );
    assert_eq!(without, json!({"metadata": {"labels": {"a": "b"}}}));
    let only = extract(
        pod,
        &merged,
        &FieldSet::from_paths([&[PathElement::field("metadata")][..]]),
    );
    assert_eq!(only, json!({"metadata": {"labels": {"a": "b"}}}));
}

#[test]
fn zero_objects_are_sorted_and_valid() {
    for w in zero::ZERO_OBJECTS.windows(2) {
        assert!(
            (w[0].0, w[0].1) < (w[1].0, w[1].1),
            "{:?} before {:?}",
            w[0].1,
            w[1].1
        );
    }
    for (v, k, z) in zero::ZERO_OBJECTS {
        assert!(
            serde_json::from_str::<Value>(z).is_ok_and(|z| z.is_object()),
            "{v} {k}"
        );
    }
    let req = Request {
        manager: "",
        api_version: "v1",
        kind: "Pod",
        subresource: "",
        now: T0,
        force: false,
    };
    assert_eq!(
        empty_object(&req),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"creationTimestamp": null},
               "spec": {"containers": null}, "status": {}})
    );
}

/// A ~2 KB pod and its applies: each should be cheap (measured in the debug build here).
#[test]
fn applying_a_pod_is_fast() {
    let mut containers = Vec::new();
    for i in 0..4 {
        containers.push(json!({"name": format!("c{i}"), "image": "registry.example.com/app:1.2.3",
            "args": ["--port=8080", "--verbose"],
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}],
            "ports": [{"containerPort": 8080 + i, "name": format!("http{i}")}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            "volumeMounts": [{"name": "data", "mountPath": format!("/data{i}")}]}));
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web", "tier": "front"},
                     "annotations": {"note": "x"}},
        "spec": {"containers": containers, "volumes": [{"name": "data", "emptyDir": {}}],
                 "tolerations": [{"key": "k", "operator": "Exists"}], "nodeSelector": {"disk": "ssd"}}});
    assert!(pod.to_string().len() > 1500);
    let mut s = Store::new("", "v1", "v1", "Pod");
    s.apply("kubectl", pod.clone(), T0, false).unwrap();
    let mut next = pod;
    next["metadata"]["labels"]["tier"] = json!("back");
    let start = std::time::Instant::now();
    let runs = 20;
    for _ in 0..runs {
        let req = s.req("kubectl", T1, false);
        apply(s.schema, s.live.as_ref(), &next, &req, &FieldSet::new()).unwrap();
    }
    let per = start.elapsed() / runs;
    eprintln!("apply of a {} byte pod: {per:?}", next.to_string().len());
    assert!(
        per < std::time::Duration::from_millis(50),
        "{per:?} per apply"
    );
}
