//! End-to-end: the ReplicaSet and ReplicationController controllers inside `capstan server`,
//! with hollow nodes running the pods, driven with the real kubectl.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{wait_until, Server};

const WAIT: Duration = Duration::from_secs(60);

fn json(s: &Server, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&s.ok(&a)).expect("kubectl prints json")
}

fn rs_yaml(
    kind: &str,
    name: &str,
    replicas: u32,
    extra_spec: &str,
    pod_annotations: &str,
) -> String {
    let (api, selector) = if kind == "ReplicaSet" {
        (
            "apps/v1",
            format!("  selector:\n    matchLabels: {{app: {name}}}\n"),
        )
    } else {
        ("v1", format!("  selector: {{app: {name}}}\n"))
    };
    format!(
        "apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n{extra_spec}{selector}  template:\n    metadata:\n      labels: {{app: {name}, tier: web}}\n      annotations: {{{pod_annotations}}}\n    spec:\n      terminationGracePeriodSeconds: 0\n      containers:\n      - name: c\n        image: nginx\n"
    )
}

/// Active pods (not being deleted) whose controller is the object with `uid`.
fn owned_pods(s: &Server, ns: &str, uid: &str) -> Vec<Value> {
    let pods = json(s, &["get", "pods", "-n", ns]);
    pods["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| {
            p["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["uid"] == uid && r["controller"] == true)
        })
        .collect()
}

fn names(pods: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = pods
        .iter()
        .map(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    v.sort();
    v
}

fn status_of(s: &Server, resource: &str, ns: &str) -> Value {
    json(s, &["get", resource, "-n", ns])
}

/// Wait until the status reports `replicas` pods, all ready and available, for the current
/// generation, and exactly that many active pods are owned.
fn wait_settled(s: &Server, resource: &str, ns: &str, replicas: i64) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let o = status_of(s, resource, ns);
        let st = &o["status"];
        let count = |f: &str| st[f].as_i64().unwrap_or(0);
        if count("replicas") == replicas
            && count("readyReplicas") == replicas
            && count("availableReplicas") == replicas
            && count("fullyLabeledReplicas") == replicas
            && st["observedGeneration"] == o["metadata"]["generation"]
            && owned_pods(s, ns, o["metadata"]["uid"].as_str().unwrap_or_default()).len()
                == replicas as usize
        {
            return o;
        }
        if Instant::now() > deadline {
            let log = s.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "{resource} did not settle at {replicas} ready replicas: {}\n{}\nserver log tail:\n{}",
                serde_json::to_string_pretty(&o).unwrap_or_default(),
                s.ok(&["get", "pods", "-n", ns, "-o", "wide"]),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn replicaset_scales_replaces_adopts_and_releases() {
    let s = Server::start_cluster(&[]);
    let _nodes = s.hollow_nodes(&["rs-n1", "rs-n2"]);

    // Created: 3 pods named web-*, owned by the ReplicaSet, running on the nodes.
    s.ok_stdin(
        &["apply", "-f", "-"],
        &rs_yaml("ReplicaSet", "web", 3, "", ""),
    );
    let rs = wait_settled(&s, "rs/web", "default", 3);
    let uid = rs["metadata"]["uid"].as_str().unwrap().to_string();
    let pods = owned_pods(&s, "default", &uid);
    for p in &pods {
        let m = &p["metadata"];
        assert_eq!(m["generateName"], "web-");
        assert!(m["name"].as_str().unwrap().starts_with("web-"));
        assert_eq!(m["labels"]["tier"], "web");
        let r = &m["ownerReferences"][0];
        assert_eq!(
            (
                &r["apiVersion"],
                &r["kind"],
                &r["name"],
                &r["blockOwnerDeletion"]
            ),
            (
                &Value::from("apps/v1"),
                &Value::from("ReplicaSet"),
                &Value::from("web"),
                &Value::from(true)
            )
        );
        assert!(p["spec"]["nodeName"].as_str().unwrap().starts_with("rs-n"));
    }

    // kubectl scale up and down.
    s.ok(&["scale", "rs", "web", "--replicas=5"]);
    wait_settled(&s, "rs/web", "default", 5);
    s.ok(&["scale", "rs", "web", "--replicas=2"]);
    wait_settled(&s, "rs/web", "default", 2);

    // A deleted pod is replaced.
    let before = names(&owned_pods(&s, "default", &uid));
    s.ok(&["delete", "pod", &before[0], "--wait=false"]);
    wait_until("deleted pod replaced", WAIT, || {
        let now = names(&owned_pods(&s, "default", &uid));
        now.len() == 2 && !now.contains(&before[0]) && now.contains(&before[1])
    });
    wait_settled(&s, "rs/web", "default", 2);

    // A relabelled pod is released (its owner reference removed) and replaced.
    let victim = names(&owned_pods(&s, "default", &uid))[0].clone();
    s.ok(&["label", "pod", &victim, "app=stray", "--overwrite"]);
    wait_until("relabelled pod released", WAIT, || {
        let p = json(&s, &["get", "pod", &victim]);
        p["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(|refs| refs.iter().all(|r| r["uid"] != uid.as_str()))
    });
    wait_settled(&s, "rs/web", "default", 2);
    assert!(!names(&owned_pods(&s, "default", &uid)).contains(&victim));

    // An orphan with matching labels is adopted by a new ReplicaSet (which then creates only
    // the pods still missing).
    s.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: lonely\n  labels: {app: adopt, tier: web}\nspec:\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: nginx\n",
    );
    wait_until("orphan pod running", WAIT, || {
        s.ok(&["get", "pod", "lonely", "-o", "jsonpath={.status.phase}"]) == "Running"
    });
    s.ok_stdin(
        &["apply", "-f", "-"],
        &rs_yaml("ReplicaSet", "adopt", 2, "", ""),
    );
    let adopter = wait_settled(&s, "rs/adopt", "default", 2);
    let adopter_uid = adopter["metadata"]["uid"].as_str().unwrap().to_string();
    let adopted = names(&owned_pods(&s, "default", &adopter_uid));
    assert!(adopted.contains(&"lonely".to_string()), "{adopted:?}");
    let lonely = json(&s, &["get", "pod", "lonely"]);
    assert_eq!(
        lonely["metadata"]["ownerReferences"][0]["kind"],
        "ReplicaSet"
    );
    assert_eq!(lonely["metadata"]["ownerReferences"][0]["controller"], true);

    // minReadySeconds: ready at once, available only after it passed.
    s.ok_stdin(
        &["apply", "-f", "-"],
        &rs_yaml("ReplicaSet", "slow", 2, "  minReadySeconds: 5\n", ""),
    );
    let mut first_ready = Value::Null;
    wait_until("slow pods ready", WAIT, || {
        first_ready = status_of(&s, "rs/slow", "default");
        first_ready["status"]["readyReplicas"] == 2
    });
    assert!(
        first_ready["status"]["availableReplicas"]
            .as_i64()
            .unwrap_or(0)
            < 2,
        "available before minReadySeconds: {first_ready}"
    );
    wait_settled(&s, "rs/slow", "default", 2);

    // Pods that never become ready count as replicas but not as ready.
    s.ok_stdin(
        &["apply", "-f", "-"],
        &rs_yaml(
            "ReplicaSet",
            "unready",
            2,
            "",
            "hollow.capstan.dev/ready: \"false\"",
        ),
    );
    wait_until("unready pods running", WAIT, || {
        let o = status_of(&s, "rs/unready", "default");
        let uid = o["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        o["status"]["replicas"] == 2
            && owned_pods(&s, "default", &uid)
                .iter()
                .all(|p| p["status"]["phase"] == "Running")
    });
    std::thread::sleep(Duration::from_secs(1));
    let st = status_of(&s, "rs/unready", "default")["status"].clone();
    assert!(st["readyReplicas"].is_null(), "{st}");
    assert!(st["availableReplicas"].is_null(), "{st}");

    // The events kubectl describe shows.
    wait_until("describe shows the controller's events", WAIT, || {
        let d = s.ok(&["describe", "rs", "web"]);
        d.contains("SuccessfulCreate")
            && d.contains("Created pod: web-")
            && d.contains("SuccessfulDelete")
            && d.contains("Deleted pod: web-")
            && d.contains("replicaset-controller")
    });
    let d = s.ok(&["describe", "rs", "web"]);
    assert!(d.contains("2 current / 2 desired"), "{d}");
    assert!(d.contains("2 Running"), "{d}");

    // A ReplicaSet being deleted (held by a finalizer) neither replaces pods nor adopts.
    s.ok_stdin(
        &["apply", "-f", "-"],
        &rs_yaml("ReplicaSet", "held", 2, "", "").replace(
            "  name: held\n",
            "  name: held\n  finalizers: [example.com/hold]\n",
        ),
    );
    let held = wait_settled(&s, "rs/held", "default", 2);
    let held_uid = held["metadata"]["uid"].as_str().unwrap().to_string();
    s.ok(&["delete", "rs", "held", "--wait=false"]);
    wait_until("held has a deletionTimestamp", WAIT, || {
        !status_of(&s, "rs/held", "default")["metadata"]["deletionTimestamp"].is_null()
    });
    let held_pods = names(&owned_pods(&s, "default", &held_uid));
    if let Some(p) = held_pods.first() {
        s.ok(&["delete", "pod", p, "--wait=false"]);
        std::thread::sleep(Duration::from_secs(3));
        assert!(
            owned_pods(&s, "default", &held_uid).len() < held_pods.len(),
            "a pod was replaced for a ReplicaSet being deleted"
        );
    }
    s.ok(&[
        "patch",
        "rs",
        "held",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
}

#[test]
fn replication_controllers_and_failed_creations() {
    let s = Server::start_cluster(&[]);
    let _nodes = s.hollow_nodes(&["rc-n1", "rc-n2"]);

    // A ReplicationController behaves as a ReplicaSet with a map selector.
    s.ok_stdin(
        &["apply", "-f", "-"],
        &rs_yaml("ReplicationController", "legacy", 3, "", ""),
    );
    let rc = wait_settled(&s, "rc/legacy", "default", 3);
    let uid = rc["metadata"]["uid"].as_str().unwrap().to_string();
    let pods = owned_pods(&s, "default", &uid);
    assert_eq!(
        pods[0]["metadata"]["ownerReferences"][0]["kind"],
        "ReplicationController"
    );
    assert_eq!(
        pods[0]["metadata"]["ownerReferences"][0]["apiVersion"],
        "v1"
    );
    assert_eq!(pods[0]["metadata"]["generateName"], "legacy-");
    s.ok(&["scale", "rc", "legacy", "--replicas=1"]);
    wait_settled(&s, "rc/legacy", "default", 1);
    let left = names(&owned_pods(&s, "default", &uid));
    s.ok(&["delete", "pod", &left[0], "--wait=false"]);
    wait_until("rc pod replaced", WAIT, || {
        let now = names(&owned_pods(&s, "default", &uid));
        now.len() == 1 && now[0] != left[0]
    });
    wait_until("rc events", WAIT, || {
        let d = s.ok(&["describe", "rc", "legacy"]);
        d.contains("replication-controller") && d.contains("Created pod: legacy-")
    });

    // A quota that allows 2 pods: the third creation fails with a FailedCreate event and a
    // ReplicaFailure condition, which goes away once the ReplicaSet fits again.
    s.ok(&["create", "namespace", "tight"]);
    s.ok(&["create", "quota", "pods", "-n", "tight", "--hard=pods=2"]);
    s.ok_stdin(
        &["apply", "-n", "tight", "-f", "-"],
        &rs_yaml("ReplicaSet", "big", 3, "", ""),
    );
    wait_until("ReplicaFailure condition", WAIT, || {
        let st = status_of(&s, "rs/big", "tight")["status"].clone();
        st["replicas"] == 2
            && st["conditions"].as_array().is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == "ReplicaFailure"
                        && c["status"] == "True"
                        && c["reason"] == "FailedCreate"
                        && !c["message"].as_str().unwrap_or_default().is_empty()
                })
            })
    });
    wait_until("FailedCreate event", WAIT, || {
        let d = s.ok(&["describe", "rs", "big", "-n", "tight"]);
        d.contains("FailedCreate") && d.contains("Error creating: ") && d.contains("exceeded quota")
    });
    s.ok(&["scale", "rs", "big", "-n", "tight", "--replicas=2"]);
    wait_until("ReplicaFailure cleared", WAIT, || {
        let st = status_of(&s, "rs/big", "tight")["status"].clone();
        st["conditions"].is_null() && st["readyReplicas"] == 2
    });
}
