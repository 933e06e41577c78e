//! The garbage collector and the namespace controller, end to end with kubectl: owner/dependent
//! pairs are ConfigMaps, Secrets and custom objects whose ownerReferences the test sets itself.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{wait_until, Server};

const WAIT: Duration = Duration::from_secs(60);

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

fn json(s: &Server, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&s.ok(&a)).unwrap()
}

fn exists(s: &Server, args: &[&str]) -> bool {
    let out = s.kubectl(args);
    if out.status.success() {
        return true;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NotFound"),
        "unexpected kubectl failure: {err}"
    );
    false
}

fn uid(s: &Server, args: &[&str]) -> String {
    json(s, args)["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// An owner reference.
fn owner(api_version: &str, kind: &str, name: &str, uid: &str, block: bool) -> Value {
    serde_json::json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
        "blockOwnerDeletion": block})
}

/// A ConfigMap owner reference.
fn cm(name: &str, uid: &str, block: bool) -> Value {
    owner("v1", "ConfigMap", name, uid, block)
}

/// A ConfigMap or Secret with these owner references and finalizers.
fn dependent(kind: &str, ns: &str, name: &str, owners: &[Value], finalizers: &[&str]) -> String {
    let mut m = serde_json::json!({
        "apiVersion": "v1", "kind": kind,
        "metadata": {"name": name, "namespace": ns, "ownerReferences": owners},
    });
    if !finalizers.is_empty() {
        m["metadata"]["finalizers"] = serde_json::json!(finalizers);
    }
    m.to_string()
}

fn create(s: &Server, manifest: &str) {
    s.ok_stdin(&["create", "-f", "-"], manifest);
}

fn wait_gone(s: &Server, what: &str, args: &[&str]) {
    wait_until(what, WAIT, || !exists(s, args));
}

#[test]
fn garbage_collector_background_foreground_orphan_and_custom_owners() {
    let s = Server::start_cluster(&[]);
    s.ok(&["create", "namespace", "other"]);
    for n in ["bg-owner", "keeper", "fg-owner", "or-owner"] {
        s.ok(&["create", "configmap", n]);
    }
    s.ok(&["create", "configmap", "far-owner", "-n", "other"]);
    let bg = uid(&s, &["get", "cm", "bg-owner"]);
    let keeper = uid(&s, &["get", "cm", "keeper"]);
    let fg = uid(&s, &["get", "cm", "fg-owner"]);
    let or = uid(&s, &["get", "cm", "or-owner"]);
    let far = uid(&s, &["get", "cm", "far-owner", "-n", "other"]);
    let mk = |kind: &str, name: &str, owners: &[Value], fin: &[&str]| {
        create(&s, &dependent(kind, "default", name, owners, fin));
    };
    // Background: two dependents of bg-owner, one also owned by keeper; one naming keeper
    // with a uid that is not keeper's (another object: absent).
    mk("ConfigMap", "bg-child", &[cm("bg-owner", &bg, false)], &[]);
    mk("Secret", "bg-secret", &[cm("bg-owner", &bg, false)], &[]);
    mk(
        "ConfigMap",
        "two-owners",
        &[cm("bg-owner", &bg, false), cm("keeper", &keeper, false)],
        &[],
    );
    mk(
        "ConfigMap",
        "stale-uid",
        &[cm("keeper", "00000000-0000-0000-0000-000000000bad", false)],
        &[],
    );
    // Foreground: a blocking dependent held by a finalizer.
    mk(
        "ConfigMap",
        "fg-child",
        &[cm("fg-owner", &fg, true)],
        &["example.com/hold"],
    );
    // Orphan.
    mk("ConfigMap", "or-child", &[cm("or-owner", &or, true)], &[]);
    // An owner reference to an object of another namespace.
    mk(
        "ConfigMap",
        "far-child",
        &[cm("far-owner", &far, false)],
        &[],
    );

    wait_gone(
        &s,
        "a dependent naming an owner by a stale uid collected",
        &["get", "cm", "stale-uid"],
    );
    // The collector has looked at the new objects: those with live owners stay.
    for n in ["bg-child", "two-owners", "fg-child", "or-child"] {
        assert!(exists(&s, &["get", "cm", n]), "{n} collected too early");
    }
    assert!(exists(&s, &["get", "secret", "bg-secret"]));

    s.ok(&["delete", "cm", "bg-owner"]);
    wait_gone(
        &s,
        "bg-owner's dependents collected",
        &["get", "cm", "bg-child"],
    );
    wait_gone(
        &s,
        "bg-owner's secret collected",
        &["get", "secret", "bg-secret"],
    );
    wait_until(
        "the dangling reference removed from two-owners",
        WAIT,
        || {
            let refs =
                json(&s, &["get", "cm", "two-owners"])["metadata"]["ownerReferences"].clone();
            refs.as_array()
                .is_some_and(|r| r.len() == 1 && r[0]["uid"] == keeper.as_str())
        },
    );
    assert!(exists(&s, &["get", "cm", "keeper"]));

    // The owner in another namespace is not this dependent's owner: warned about, collected.
    wait_gone(&s, "far-child collected", &["get", "cm", "far-child"]);
    let far_msg = format!(
        "ownerRef [v1/ConfigMap, namespace: default, name: far-owner, uid: {far}] does not exist in namespace \"default\""
    );
    wait_until("an OwnerRefInvalidNamespace event", WAIT, || {
        let evs = json(
            &s,
            &[
                "get",
                "events",
                "--field-selector",
                "reason=OwnerRefInvalidNamespace",
            ],
        );
        evs["items"].as_array().unwrap().iter().any(|e| {
            e["message"] == far_msg.as_str()
                && e["type"] == "Warning"
                && e["involvedObject"]["name"] == "far-child"
                && e["source"]["component"] == "garbage-collector-controller"
        })
    });
    assert!(exists(&s, &["get", "cm", "far-owner", "-n", "other"]));

    // Foreground: the owner waits, with its finalizer, until the blocking dependent is gone.
    s.ok(&[
        "delete",
        "cm",
        "fg-owner",
        "--cascade=foreground",
        "--wait=false",
    ]);
    wait_until("fg-child being deleted", WAIT, || {
        json(&s, &["get", "cm", "fg-child"])["metadata"]["deletionTimestamp"].is_string()
    });
    std::thread::sleep(Duration::from_secs(2));
    let fg_obj = json(&s, &["get", "cm", "fg-owner"]);
    assert!(
        fg_obj["metadata"]["deletionTimestamp"].is_string(),
        "{fg_obj}"
    );
    assert_eq!(
        fg_obj["metadata"]["finalizers"],
        serde_json::json!(["foregroundDeletion"])
    );
    s.ok(&[
        "patch",
        "cm",
        "fg-child",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    wait_gone(&s, "fg-child gone", &["get", "cm", "fg-child"]);
    wait_gone(
        &s,
        "fg-owner gone after its dependents",
        &["get", "cm", "fg-owner"],
    );

    // Orphan: the owner goes, the dependent stays without the reference.
    s.ok(&["delete", "cm", "or-owner", "--cascade=orphan"]);
    wait_gone(&s, "or-owner gone", &["get", "cm", "or-owner"]);
    let child = json(&s, &["get", "cm", "or-child"]);
    let refs = &child["metadata"]["ownerReferences"];
    assert!(
        refs.is_null() || refs.as_array().is_some_and(Vec::is_empty),
        "{child}"
    );
    assert!(child["metadata"]["deletionTimestamp"].is_null(), "{child}");

    // A custom object as the owner (found through discovery).
    create(&s, WIDGET_CRD);
    wait_until("widgets served", WAIT, || {
        s.kubectl(&["get", "widgets"]).status.success()
    });
    create(
        &s,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 1}\n",
    );
    let w = uid(&s, &["get", "widget", "w1"]);
    let widget = owner("example.com/v1", "Widget", "w1", &w, true);
    mk("ConfigMap", "w-child", std::slice::from_ref(&widget), &[]);
    mk(
        "ConfigMap",
        "w-keeper",
        &[widget, cm("keeper", &keeper, false)],
        &[],
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        exists(&s, &["get", "cm", "w-child"]),
        "an owned object with its owner stays"
    );
    s.ok(&["delete", "widget", "w1"]);
    wait_gone(
        &s,
        "the custom owner's dependent collected",
        &["get", "cm", "w-child"],
    );
    wait_until("the widget reference removed from w-keeper", WAIT, || {
        json(&s, &["get", "cm", "w-keeper"])["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|r| r.len() == 1 && r[0]["name"] == "keeper")
    });
}

#[test]
fn namespace_deletion_empties_the_namespace_then_releases_it() {
    let s = Server::start_cluster(&[]);
    create(&s, WIDGET_CRD);
    wait_until("widgets served", WAIT, || {
        s.kubectl(&["get", "widgets"]).status.success()
    });

    // A namespace with plain content goes at once: `kubectl delete ns` returns.
    s.ok(&["create", "namespace", "quick"]);
    s.ok(&["create", "configmap", "c1", "-n", "quick"]);
    s.ok(&["delete", "namespace", "quick", "--timeout=60s"]);
    assert!(!exists(&s, &["get", "namespace", "quick"]));

    s.ok(&["create", "namespace", "doomed"]);
    for n in ["a", "b"] {
        s.ok(&["create", "configmap", n, "-n", "doomed"]);
    }
    s.ok(&["create", "secret", "generic", "s", "-n", "doomed"]);
    create(
        &s,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: doomed}\n",
    );
    create(
        &s,
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: held
  namespace: doomed
  finalizers: [example.com/hold]
spec:
  containers: [{name: c, image: busybox}]
"#,
    );
    s.ok(&["delete", "namespace", "doomed", "--wait=false"]);
    let ns = json(&s, &["get", "namespace", "doomed"]);
    assert_eq!(ns["status"]["phase"], "Terminating");

    let condition = |ns: &Value, t: &str| -> Option<Value> {
        ns["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == t)
            .cloned()
    };
    wait_until("NamespaceContentRemaining for the held pod", WAIT, || {
        let ns = json(&s, &["get", "namespace", "doomed"]);
        condition(&ns, "NamespaceContentRemaining").is_some_and(|c| {
            c["status"] == "True"
                && c["reason"] == "SomeResourcesRemain"
                && c["message"] == "Some resources are remaining: pods. has 1 resource instances"
        })
    });
    let ns = json(&s, &["get", "namespace", "doomed"]);
    let f = condition(&ns, "NamespaceFinalizersRemaining").unwrap();
    assert_eq!(f["status"], "True", "{ns}");
    assert_eq!(f["reason"], "SomeFinalizersRemain");
    assert_eq!(
        f["message"],
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    );
    for (t, reason) in [
        ("NamespaceDeletionDiscoveryFailure", "ResourcesDiscovered"),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            "ParsedGroupVersions",
        ),
        ("NamespaceDeletionContentFailure", "ContentDeleted"),
    ] {
        let c = condition(&ns, t).unwrap_or_else(|| panic!("{t} missing: {ns}"));
        assert_eq!(c["status"], "False", "{t}: {ns}");
        assert_eq!(c["reason"], reason, "{t}");
    }
    assert_eq!(ns["spec"]["finalizers"], serde_json::json!(["kubernetes"]));
    // Everything but the held pod is gone, custom objects included.
    for kind in ["configmaps", "secrets", "widgets"] {
        let l = json(&s, &["get", kind, "-n", "doomed"]);
        assert_eq!(l["items"].as_array().unwrap().len(), 0, "{kind}: {l}");
    }
    let pod = json(&s, &["get", "pod", "held", "-n", "doomed"]);
    assert!(pod["metadata"]["deletionTimestamp"].is_string());

    s.ok(&[
        "patch",
        "pod",
        "held",
        "-n",
        "doomed",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    wait_gone(
        &s,
        "namespace doomed released and deleted",
        &["get", "namespace", "doomed"],
    );
}
