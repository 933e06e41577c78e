//! The resource metrics API (metrics.k8s.io, as metrics-server serves it) on a real node,
//! driven with the real kubectl: `kubectl top pod` / `kubectl top node` show the usage the
//! kubelet measures; and the streaming paths `kubectl cp` (exec + tar, both ways) and
//! `kubectl exec -it` (a TTY on a pseudo-terminal).

mod support;

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use support::{wait_until, Server};

const WAIT: Duration = Duration::from_secs(120);

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn pod_yaml(name: &str, image: &str, script: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels:
    app: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {image}
    command: ["sh", "-c", {script:?}]
"#
    )
}

fn wait_running(server: &Server, pod: &str) {
    wait_until(&format!("pod {pod} Running"), WAIT, || {
        stdout(&server.kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.phase}"])) == "Running"
    });
}

/// A CPU quantity as kubectl top prints it ("998m", "1", "0") in millicores.
fn millicores(s: &str) -> Option<u64> {
    match s.strip_suffix('m') {
        Some(m) => m.parse().ok(),
        None => s.parse::<u64>().ok().map(|c| c * 1000),
    }
}

/// The row of `name` in kubectl's table output, split into columns.
fn row(out: &str, name: &str) -> Option<Vec<String>> {
    out.lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|cols| cols.iter().any(|c| c == name))
}

#[test]
fn top_cp_and_exec_tty() {
    let cidr = support::unique_cluster_cidr();
    let server = Server::start_cluster(&["--cluster-cidr", &cidr]);
    let kubelet = server.kubelet("node-a");
    let busybox = kubelet.image("busybox");

    // Discovery: the group and its two kinds, as kubectl api-resources shows them.
    let resources = server.ok(&["api-resources", "--api-group=metrics.k8s.io"]);
    let nodes = row(&resources, "NodeMetrics").unwrap_or_default();
    assert_eq!(
        nodes,
        ["nodes", "metrics.k8s.io/v1beta1", "false", "NodeMetrics"],
        "{resources}"
    );
    let pods = row(&resources, "PodMetrics").unwrap_or_default();
    assert_eq!(
        pods,
        ["pods", "metrics.k8s.io/v1beta1", "true", "PodMetrics"],
        "{resources}"
    );

    server.ok_stdin(
        &["apply", "-f", "-"],
        &pod_yaml("burn", &busybox, "while :; do :; done"),
    );
    server.ok_stdin(
        &["apply", "-f", "-"],
        &pod_yaml("shell", &busybox, "sleep 3600"),
    );
    wait_running(&server, "burn");
    wait_running(&server, "shell");

    // kubectl top pod: the busy loop uses (most of) a core.
    let mut last = String::new();
    wait_until(
        "kubectl top pod burn over 100m",
        Duration::from_secs(90),
        || {
            let out = server.kubectl(&["top", "pod", "burn"]);
            last = format!("{}{}", stdout(&out), stderr(&out));
            row(&last, "burn")
                .and_then(|cols| millicores(cols.get(1)?))
                .is_some_and(|m| m > 100)
        },
    );
    let out = server.ok(&["top", "pod"]);
    assert!(out.starts_with("NAME"), "{out}");
    assert!(
        out.contains("CPU(cores)") && out.contains("MEMORY(bytes)"),
        "{out}"
    );
    let burn = row(&out, "burn").expect("burn in kubectl top pod");
    assert!(millicores(&burn[1]).is_some_and(|m| m > 100), "{out}");
    assert!(burn[2].ends_with("Mi"), "{out}");
    // All namespaces, per container.
    let out = server.ok(&["top", "pod", "-A", "--containers"]);
    let burn = row(&out, "burn").expect("burn in kubectl top pod -A --containers");
    assert_eq!(&burn[..3], ["default", "burn", "main"], "{out}");
    // A label selector narrows the list.
    let out = server.ok(&["top", "pod", "-l", "app=shell"]);
    assert!(
        row(&out, "shell").is_some() && row(&out, "burn").is_none(),
        "{out}"
    );

    // kubectl top node: CPU and memory with their share of the node's allocatable.
    let out = server.ok(&["top", "node"]);
    let node = row(&out, "node-a").expect("node-a in kubectl top node");
    assert_eq!(node.len(), 5, "{out}");
    assert!(millicores(&node[1]).is_some_and(|m| m > 100), "{out}");
    assert!(node[2].ends_with('%') && node[4].ends_with('%'), "{out}");
    assert!(node[3].ends_with("Mi"), "{out}");

    // The objects, as metrics-server writes them.
    let raw = server.ok(&["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes/node-a"]);
    let v: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(v["kind"], "NodeMetrics", "{raw}");
    assert_eq!(v["metadata"]["name"], "node-a", "{raw}");
    assert_eq!(
        v["metadata"]["labels"]["kubernetes.io/hostname"], "node-a",
        "{raw}"
    );
    assert!(
        v["window"].as_str().is_some_and(|w| w.ends_with('s')),
        "{raw}"
    );
    assert!(
        v["usage"]["memory"]
            .as_str()
            .is_some_and(|m| m.ends_with("Ki")),
        "{raw}"
    );
    let raw = server.ok(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/burn",
    ]);
    let v: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(v["kind"], "PodMetrics", "{raw}");
    assert_eq!(v["metadata"]["namespace"], "default", "{raw}");
    assert_eq!(v["containers"][0]["name"], "main", "{raw}");
    let raw = server.ok(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/nodes?labelSelector=kubernetes.io%2Fhostname%3Dother",
    ]);
    let v: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(v["kind"], "NodeMetricsList", "{raw}");
    assert_eq!(v["items"], serde_json::json!([]), "{raw}");
    let err = server.fails(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/nodes?watch=true",
    ]);
    assert!(
        err.contains(r#"watch is not supported on resources of kind \"nodes.metrics.k8s.io\""#)
            || err
                .contains(r#"watch is not supported on resources of kind "nodes.metrics.k8s.io""#),
        "{err}"
    );
    // Missing objects: the lister's NotFound; unknown to RBAC: Forbidden.
    let err = server.fails(&["top", "pod", "nope"]);
    assert!(err.contains(r#"pod "nope" not found"#), "{err}");
    let err = server.fails(&["top", "node", "nope"]);
    assert!(err.contains(r#"node "nope" not found"#), "{err}");
    let err = server.fails(&["top", "pod", "--as=alice"]);
    assert!(
        err.contains(r#"User "alice" cannot list resource "pods" in API group "metrics.k8s.io""#),
        "{err}"
    );
    // kubectl get prints metrics-server's table.
    let out = server.ok(&["get", "podmetrics", "burn"]);
    assert!(out.starts_with("NAME") && out.contains("WINDOW"), "{out}");
    assert!(row(&out, "burn").is_some(), "{out}");

    // kubectl cp: a file into the pod and back (exec with tar on both ends).
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("in.txt");
    let content = "line one\nline two with spaces\n".repeat(500);
    std::fs::write(&local, &content).unwrap();
    let out = server.kubectl(&["cp", local.to_str().unwrap(), "shell:/tmp/copied.txt"]);
    assert!(out.status.success(), "kubectl cp in: {}", stderr(&out));
    let out = server.ok(&["exec", "shell", "--", "wc", "-c", "/tmp/copied.txt"]);
    assert!(out.starts_with(&content.len().to_string()), "{out}");
    let back = dir.path().join("back.txt");
    let out = server.kubectl(&["cp", "shell:/tmp/copied.txt", back.to_str().unwrap()]);
    assert!(out.status.success(), "kubectl cp out: {}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&back).unwrap(), content);

    // kubectl exec -it on a pseudo-terminal: the shell echoes, runs and exits with 7.
    let (code, output) = exec_tty(&server, "shell", "echo hi; exit 7\n");
    assert_eq!(code, 7, "{output}");
    assert!(output.contains("hi\r\n"), "{output:?}");
    assert!(output.contains("echo hi; exit 7"), "{output:?}");
    assert!(
        output.contains("command terminated with exit code 7"),
        "{output:?}"
    );
}

/// Run `kubectl exec -it POD -- sh` on a pseudo-terminal, type `input` once the shell is
/// there, and return kubectl's exit code and everything it wrote to the terminal.
fn exec_tty(server: &Server, pod: &str, input: &str) -> (i32, String) {
    let kubeconfig = server.kubeconfig();
    let script = r##"
import os, pty, select, sys, time
argv = sys.argv[2:]
text = sys.argv[1].encode()
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)
out = b""
sent = False
start = time.time()
while time.time() - start < 60:
    if not sent and (b"# " in out or time.time() - start > 10):
        os.write(fd, text)
        sent = True
    r, _, _ = select.select([fd], [], [], 0.2)
    if r:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode("utf-8", "replace"))
sys.exit(os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8)
"##;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(input)
        .arg("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["exec", "-it", pod, "--", "sh"])
        .env("HOME", kubeconfig.parent().unwrap())
        .env("TERM", "dumb")
        .output()
        .expect("python3 runs");
    (
        out.status.code().unwrap_or(-1),
        format!("{}{}", stdout(&out), stderr(&out)),
    )
}
