//! Static pods: a kubelet with --pod-manifest-path runs the pods of its manifest directory and
//! publishes each as a mirror pod `<name>-<node>` (annotations, Node owner, status); a deleted
//! mirror pod comes back while the container keeps running; an edited manifest replaces the
//! pod; a removed manifest stops it and deletes the mirror pod.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

const WAIT: Duration = Duration::from_secs(120);
const NODE: &str = "node-static";
const POD: &str = "web-node-static";

fn pod_json(server: &Server, name: &str) -> Value {
    let out = server.kubectl(&["get", "pod", name, "-o", "json"]);
    if !out.status.success() {
        return Value::Null;
    }
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// Wait until `f` holds for the pod (Null when it does not exist); fail with the pod and
/// the kubelet's log.
fn wait_pod(server: &Server, kubelet: &Kubelet, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let p = pod_json(server, POD);
        if f(&p) {
            return p;
        }
        if Instant::now() > deadline {
            panic!(
                "pod {POD}: {what} did not happen:\n{}\nkubelet log:\n{}",
                serde_json::to_string_pretty(&p).unwrap_or_default(),
                kubelet.log_tail(80)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn running(p: &Value) -> bool {
    s(p, "/status/phase") == "Running"
        && !s(p, "/status/podIP").is_empty()
        && p.pointer("/status/containerStatuses/0/state/running")
            .is_some()
}

/// The containerd ID of the pod's container.
fn container_id(p: &Value) -> String {
    s(p, "/status/containerStatuses/0/containerID")
        .trim_start_matches("containerd://")
        .to_string()
}

/// Whether containerd runs a task for the container.
fn task_running(kubelet: &Kubelet, id: &str) -> bool {
    let out = Command::new("ctr")
        .arg("--address")
        .arg(kubelet.containerd().socket())
        .args(["-n", "k8s.io", "tasks", "ls"])
        .output()
        .expect("ctr");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with(id) && l.contains("RUNNING"))
}

fn manifest(image: &str, version: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {{app: web}}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: {image}
    command: ["sh", "-c", "echo {version}; trap 'exit 0' TERM; sleep 3600 & wait"]
"#
    )
}

#[test]
fn static_pods_run_and_are_mirrored() {
    let server = Server::start_cluster(&["--cluster-cidr", &unique_cluster_cidr()]);
    let dir = tempfile::tempdir().unwrap();
    // A broken manifest and a hidden file are skipped without harm.
    std::fs::write(
        dir.path().join("broken.yaml"),
        "apiVersion: v1\nkind: Pod\nspec: [",
    )
    .unwrap();
    std::fs::write(dir.path().join(".hidden"), "garbage").unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let mut kubelet = server.kubelet_with(NODE, &["--pod-manifest-path", &path]);
    let image = kubelet.image("busybox");
    let file = dir.path().join("web.yaml");
    std::fs::write(&file, manifest(&image, "v1")).unwrap();

    // The mirror pod appears, Running with an IP, with the static pod's identity.
    let p = wait_pod(&server, &kubelet, "Running mirror pod", running);
    let hash = s(&p, "/metadata/annotations/kubernetes.io~1config.hash").to_string();
    assert_eq!(hash.len(), 32, "{p}");
    assert_eq!(
        s(&p, "/metadata/annotations/kubernetes.io~1config.mirror"),
        hash
    );
    assert_eq!(
        s(&p, "/metadata/annotations/kubernetes.io~1config.source"),
        "file"
    );
    assert!(!s(&p, "/metadata/annotations/kubernetes.io~1config.seen").is_empty());
    assert_eq!(s(&p, "/metadata/namespace"), "default");
    assert_eq!(s(&p, "/metadata/labels/app"), "web");
    assert_eq!(s(&p, "/spec/nodeName"), NODE);
    let mirror_uid = s(&p, "/metadata/uid").to_string();
    assert_ne!(mirror_uid, hash, "the mirror pod has its own UID");
    let owner = &p["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            s(owner, "/kind"),
            s(owner, "/name"),
            owner["controller"].as_bool()
        ),
        ("Node", NODE, Some(true))
    );
    let node_uid = server.ok(&["get", "node", NODE, "-o", "jsonpath={.metadata.uid}"]);
    assert_eq!(s(owner, "/uid"), node_uid);
    let tolerations = p["spec"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        tolerations.iter().any(|t| t["operator"] == "Exists"
            && t["effect"] == "NoExecute"
            && t.get("key").is_none()),
        "{tolerations:?}"
    );
    let conditions = p["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True"),
        "{conditions:?}"
    );
    let first = container_id(&p);
    assert!(task_running(&kubelet, &first));
    let logs = server.ok(&["logs", POD]);
    assert_eq!(logs.trim(), "v1");
    let wide = server.ok(&["get", "pods", "-o", "wide"]);
    assert!(wide.contains(POD) && wide.contains(NODE), "{wide}");

    // A restarted kubelet adopts its static pod: same container, same mirror pod.
    kubelet.restart();
    wait_until("the kubelet restarted", WAIT, || {
        kubelet.log().matches("adding static pod path").count() == 2
    });
    std::thread::sleep(Duration::from_secs(5));
    let p = wait_pod(&server, &kubelet, "Running after the restart", running);
    assert_eq!(s(&p, "/metadata/uid"), mirror_uid);
    assert_eq!(container_id(&p), first);
    assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);
    assert!(task_running(&kubelet, &first));

    // Deleting the mirror pod: the kubelet force-deletes it and creates it anew (new UID),
    // the container keeps running. kubectl's own wait is not used: kubectl 1.32 hangs when the
    // object is re-created between the GET and the LIST of its wait (kubernetes/kubectl#1803),
    // which a kubelet that replaces the mirror pod within milliseconds often does. What it
    // waits for, the old UID gone, is checked here instead, within kubectl's 60 s.
    let deleting = Instant::now();
    let out = server.ok(&["delete", "pod", POD, "--wait=false"]);
    assert_eq!(out.trim(), format!("pod \"{POD}\" deleted"));
    wait_pod(&server, &kubelet, "old mirror pod gone", |p| {
        s(p, "/metadata/uid") != mirror_uid
    });
    assert!(
        deleting.elapsed() < Duration::from_secs(60),
        "the mirror pod took {:?} to go",
        deleting.elapsed()
    );
    let p = wait_pod(&server, &kubelet, "mirror pod recreated", |p| {
        !p.is_null() && s(p, "/metadata/uid") != mirror_uid && running(p)
    });
    assert_eq!(
        s(&p, "/metadata/annotations/kubernetes.io~1config.mirror"),
        hash
    );
    assert_eq!(container_id(&p), first, "the static pod kept running");
    assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);
    assert!(task_running(&kubelet, &first));

    // Editing the manifest replaces the pod: a new hash, a new container, the old one stopped.
    std::fs::write(&file, manifest(&image, "v2")).unwrap();
    let p = wait_pod(&server, &kubelet, "pod replaced", |p| {
        let h = s(p, "/metadata/annotations/kubernetes.io~1config.mirror");
        !h.is_empty() && h != hash && running(p)
    });
    let second = container_id(&p);
    assert_ne!(second, first);
    assert_eq!(
        s(&p, "/metadata/annotations/kubernetes.io~1config.hash"),
        s(&p, "/metadata/annotations/kubernetes.io~1config.mirror")
    );
    wait_until("the old container stopped", WAIT, || {
        !task_running(&kubelet, &first)
    });
    assert_eq!(server.ok(&["logs", POD]).trim(), "v2");

    // Removing the manifest stops the pod and deletes the mirror pod.
    std::fs::remove_file(&file).unwrap();
    wait_pod(&server, &kubelet, "mirror pod deleted", Value::is_null);
    wait_until("the container stopped", WAIT, || {
        !task_running(&kubelet, &second)
    });
    let out = server.kubectl(&["get", "pod", POD]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("NotFound"));
    let log = kubelet.log();
    assert!(!log.contains("panicked"), "{log}");
    assert!(
        log.contains("broken.yaml"),
        "the broken manifest is reported"
    );
}
