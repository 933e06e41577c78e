//! The kept entries against the general way: every write here goes both ways and must come
//! out the same, and the writes the shortcut is for must take it.

use serde_json::{json, Value};

use super::super::{update_decoded, PathElement};
use super::*;
use crate::schema::Schemas;

fn pod_schema() -> Option<SchemaRef<'static>> {
    Schemas::builtin().for_kind("", "v1", "Pod")
}

fn req<'a>(manager: &'a str, subresource: &'a str, now: &'a str) -> Request<'a> {
    Request {
        manager,
        api_version: "v1",
        kind: "Pod",
        subresource,
        now,
        force: false,
    }
}

/// What the registry leaves out of tracking: the status on the main resource, the spec on
/// `/status`.
fn ignored(subresource: &str) -> FieldSet {
    let f = if subresource.is_empty() {
        "status"
    } else {
        "spec"
    };
    FieldSet::from_paths([vec![PathElement::field(f)]].iter().map(Vec::as_slice))
}

/// Write `new` over `live` both ways; returns the result and whether the kept entries were
/// used.
fn both(live: &Value, new: &Value, req: &Request<'_>) -> (Value, bool) {
    let ignored = ignored(req.subresource);
    let mut general = new.clone();
    update_decoded(pod_schema(), live, &mut general, req, &ignored).expect("general update");
    let mut kept = new.clone();
    let used = match update(pod_schema(), live, &mut kept, req, &ignored) {
        Some(r) => {
            r.expect("kept update");
            true
        }
        None => false,
    };
    if used {
        assert_eq!(
            kept["metadata"]["managedFields"], general["metadata"]["managedFields"],
            "kept entries differ from the general way's"
        );
        assert_eq!(kept, general);
    }
    (general, used)
}

fn created() -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "default",
            "labels": {"app": "web", "pod-template-hash": "5d8f"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                "uid": "rs-1", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"containers": [{"name": "pause", "image": "pause:3.10",
            "resources": {"requests": {"cpu": "10m"}}}],
            "restartPolicy": "Always"},
        "status": {"phase": "Pending", "qosClass": "Burstable"}
    });
    super::super::update(
        pod_schema(),
        None,
        &mut pod,
        &req("kube-controller-manager", "", "2024-01-01T00:00:00Z"),
        &ignored(""),
    )
    .expect("create");
    pod["metadata"]["uid"] = json!("uid-1");
    // The scheduler's binding: a write of the server's own, not tracked.
    pod["spec"]["nodeName"] = json!("node-1");
    pod
}

fn running(live: &Value, ip: &str, ready: &str) -> Value {
    let mut new = live.clone();
    new["status"] = json!({
        "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "qosClass": "Burstable",
        "conditions": [
            {"type": "Ready", "status": ready, "lastTransitionTime": "2024-01-01T00:00:01Z"},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}
        ],
        "containerStatuses": [{"name": "pause", "ready": ready == "True", "restartCount": 0,
            "image": "pause:3.10", "imageID": "", "state": {"running": {"startedAt": "2024-01-01T00:00:01Z"}}}]
    });
    new
}

#[test]
fn a_kubelets_status_writes_keep_the_other_entries_as_stored() {
    let pod = created();
    let status = req("kubelet", "status", "2024-01-01T00:00:05Z");
    let (pod, used) = both(&pod, &running(&pod, "10.0.0.5", "True"), &status);
    assert!(used, "the first status write takes the shortcut");
    let entries = pod["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1]["manager"], "kubelet");
    assert_eq!(entries[1]["subresource"], "status");
    assert!(entries[1]["fieldsV1"]["f:status"]["f:podIP"].is_object());

    // Its own entry again: a condition changes, the pod IPs go.
    let mut next = running(&pod, "10.0.0.5", "False");
    next["status"].as_object_mut().unwrap().remove("podIPs");
    let later = req("kubelet", "status", "2024-01-01T00:00:09Z");
    let (pod, used) = both(&pod, &next, &later);
    assert!(
        used,
        "a second status write by the same manager takes the shortcut"
    );
    let kubelet = &pod["metadata"]["managedFields"][1];
    assert_eq!(kubelet["time"], "2024-01-01T00:00:09Z");
    assert!(kubelet["fieldsV1"]["f:status"].get("f:podIPs").is_none());

    // A label nobody had, by another manager, on the main resource.
    let mut labelled = pod.clone();
    labelled["metadata"]["labels"]["team"] = json!("a");
    let (_, used) = both(
        &pod,
        &labelled,
        &req("kubectl-label", "", "2024-01-01T00:00:10Z"),
    );
    assert!(used);
}

#[test]
fn writes_into_other_managers_fields_go_the_general_way() {
    let pod = created();
    let status = req("kubelet", "status", "2024-01-01T00:00:05Z");
    let (pod, _) = both(&pod, &running(&pod, "10.0.0.5", "True"), &status);

    // The controller's image, changed by someone else: taken from it.
    let mut edited = pod.clone();
    edited["spec"]["containers"][0]["image"] = json!("pause:3.11");
    let edit = req("kubectl-edit", "", "2024-01-01T00:00:06Z");
    let (after, used) = both(&pod, &edited, &edit);
    assert!(!used);
    let mut through = edited.clone();
    super::super::update(pod_schema(), Some(&pod), &mut through, &edit, &ignored(""))
        .expect("update");
    assert_eq!(through, after);

    // A label the controller set, removed.
    let mut unlabelled = pod.clone();
    unlabelled["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("app");
    let (_, used) = both(&pod, &unlabelled, &edit);
    assert!(!used);

    // The kubelet's status, written by another manager.
    let (_, used) = both(
        &pod,
        &running(&pod, "10.0.0.6", "True"),
        &req("other", "status", "2024-01-01T00:00:07Z"),
    );
    assert!(!used);

    // Entries sent with the write that are not the live ones.
    let mut sent = pod.clone();
    sent["metadata"]["managedFields"][0]["manager"] = json!("someone");
    sent["metadata"]["labels"]["team"] = json!("a");
    let (_, used) = both(&pod, &sent, &edit);
    assert!(!used);

    // Entries not as this server writes them: a time with a fraction.
    let mut odd = pod.clone();
    odd["metadata"]["managedFields"][0]["time"] = json!("2024-01-01T00:00:00.5Z");
    let mut labelled = odd.clone();
    labelled["metadata"]["labels"]["team"] = json!("a");
    let (_, used) = both(&odd, &labelled, &edit);
    assert!(!used);
}

#[test]
fn stored_fields_intersect_as_decoded_ones_do() {
    let stored = json!({
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {"f:containers": {"k:{\"name\":\"pause\"}": {".": {}, "f:image": {}}},
                   "f:odd": {"x:unknown": {}}, "f:nil": null}
    });
    let decoded = fieldsv1::decode(&stored).unwrap();
    let f = PathElement::field;
    let pause = PathElement::key(vec![("name".into(), json!("pause"))]);
    let cases: Vec<Vec<PathElement>> = vec![
        vec![f("metadata")],
        vec![f("metadata"), f("labels")],
        vec![f("metadata"), f("labels"), f("app")],
        vec![f("metadata"), f("labels"), f("team")],
        vec![f("spec"), f("containers")],
        vec![f("spec"), f("containers"), pause.clone()],
        vec![f("spec"), f("containers"), pause.clone(), f("image")],
        vec![f("spec"), f("containers"), pause, f("name")],
        vec![f("spec"), f("odd")],
        vec![f("spec"), f("nil")],
        vec![f("status"), f("phase")],
    ];
    let stored = stored.as_object().unwrap();
    for path in &cases {
        let set = FieldSet::from_paths([path.as_slice()]);
        let expected = !decoded.intersection(&set).is_empty();
        assert_eq!(
            fieldsv1::intersects(stored, &set).unwrap(),
            expected,
            "{path:?}"
        );
    }
    assert!(fieldsv1::intersects(stored, &FieldSet::new()).is_ok_and(|x| !x));
    assert!(fieldsv1::intersects(
        json!({"f:a": 3}).as_object().unwrap(),
        &FieldSet::from_paths([[f("a")].as_slice()])
    )
    .is_err());
}
