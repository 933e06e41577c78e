//! `capstan up` shows its control plane as kubeadm does: a mirror pod in kube-system for each
//! of kube-apiserver, kube-controller-manager and kube-scheduler, on the up node, Running 1/1,
//! shaped like a kubeadm static pod's mirror (annotations, Node owner, labels, priority, host
//! network, `capstan://` container). A deleted one comes back; a component whose lease is
//! taken by someone else turns NotReady; nothing of them ever reaches containerd.
//!
//! The cluster runs in a test-bed network namespace, as in up.rs; proxy, DNS and the dashboard
//! are disabled to keep it lean (needs root, containerd and runc).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capstan_testkit::netbed::{Bed, NodeNs};
use serde_json::Value;
use support::{node, wait_until};

const NODE: &str = "up-mirror-node";
const COMPONENTS: [&str; 3] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// A `capstan up` process; dropping it kills it and removes whatever it left.
struct Up {
    ns: NodeNs,
    dir: PathBuf,
    state: PathBuf,
    bridge: String,
    child: Option<Child>,
}

impl Up {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("up.log")).unwrap_or_default()
    }

    fn kubectl(&self, args: &[&str]) -> std::process::Output {
        self.ns
            .command("kubectl")
            .arg("--kubeconfig")
            .arg(self.dir.join("admin.kubeconfig"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("kubectl runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pod `kube-system/NAME` as JSON (Null when kubectl fails).
    fn pod(&self, name: &str) -> Value {
        let out = self.kubectl(&["-n", "kube-system", "get", "pod", name, "-o", "json"]);
        if !out.status.success() {
            return Value::Null;
        }
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    }

    fn alive(&mut self) {
        if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
            panic!("capstan up exited ({status}):\n{}", tail(&self.log(), 40));
        }
    }

    fn wait_ready(&mut self) {
        let start = Instant::now();
        while !self.log().contains("  node Ready") {
            self.alive();
            if start.elapsed() > Duration::from_secs(120) {
                panic!(
                    "the node is not Ready after 120s:\n{}",
                    tail(&self.log(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until `f` holds for the pod; fail with the pod and the log's tail.
    fn wait_pod(&mut self, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let p = self.pod(name);
            if f(&p) {
                return p;
            }
            self.alive();
            if Instant::now() > deadline {
                panic!(
                    "{name}: {what} did not happen:\n{}\n{}",
                    serde_json::to_string_pretty(&p).unwrap_or_default(),
                    tail(&self.log(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Containers containerd's runc knows in this cluster's state directory.
    fn runc_containers(&self) -> String {
        let out = Command::new("runc")
            .arg("--root")
            .arg(self.state.join("runc"))
            .args(["list", "-q"])
            .output()
            .expect("runc");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // containerd and its shims, should a failed run have left them.
        let state = self.state.to_string_lossy().into_owned();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let cmd = std::fs::read(entry.path().join("cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            if cmd.contains(&state) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
        node::unmount_under(&self.dir);
        node::unmount_under(&self.state);
        let _ = std::fs::remove_dir_all(&self.state);
        node::Containerd::remove_link(&self.bridge);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn can_run() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    let installed = |p: &str| Path::new(p).exists();
    root && installed("/usr/bin/containerd")
        && (installed("/usr/sbin/runc") || installed("/usr/bin/runc"))
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn condition<'a>(p: &'a Value, type_: &str) -> &'a str {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| s(c, "/type") == type_))
        .map(|c| s(c, "/status"))
        .unwrap_or_default()
}

fn running_ready(p: &Value) -> bool {
    s(p, "/status/phase") == "Running"
        && condition(p, "Ready") == "True"
        && p.pointer("/status/containerStatuses/0/ready") == Some(&Value::Bool(true))
}

#[test]
fn up_shows_its_control_plane_as_mirror_pods() {
    assert!(
        can_run(),
        "needs root, containerd and runc (.ci/run installs them)"
    );
    let mut bed = Bed::new();
    let ns = bed.node();
    let dir = tempfile::Builder::new()
        .prefix("capstan-up-mirror-")
        .tempdir()
        .unwrap()
        .keep();
    let bridge = format!("cbr{:08x}", rand::random::<u32>());
    let state = capstan_kubelet::containerd::state_dir(&dir, &PathBuf::from("/var/lib/capstan"));
    let log = std::fs::File::create(dir.join("up.log")).unwrap();
    let child = ns
        .command(env!("CARGO_BIN_EXE_capstan"))
        .arg("up")
        .arg("--data-dir")
        .arg(&dir)
        .args(["--secure-port", &free_port().to_string()])
        .args(["--bind-address", "127.0.0.1"])
        .args(["--kubelet-port", &free_port().to_string()])
        .arg("--eviction-hard=nodefs.available<1%,nodefs.inodesFree<1%")
        .args(["--cni-bridge-name", &bridge])
        .args(["--cluster-cidr", &support::unique_cluster_cidr()])
        .args(["--node-name", NODE])
        .arg("--disable=proxy,dns,ingress,dashboard")
        .env("HOME", dir.join("home"))
        .env("CAPSTAN_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("capstan up starts");
    let mut up = Up {
        ns,
        dir,
        state,
        bridge,
        child: Some(child),
    };
    up.wait_ready();

    // All three, Running 1/1 on the up node.
    let names: Vec<String> = COMPONENTS.iter().map(|c| format!("{c}-{NODE}")).collect();
    for name in &names {
        up.wait_pod(name, "Running and ready", running_ready);
    }
    let table = up.ok(&["get", "pods", "-n", "kube-system", "-o", "wide"]);
    for name in &names {
        let line = table
            .lines()
            .find(|l| l.starts_with(name.as_str()))
            .unwrap_or_else(|| panic!("{name} not listed:\n{table}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&cols[1..3], ["1/1", "Running"], "{table}");
        assert!(cols.contains(&NODE), "{table}");
    }
    // No etcd pod: the store is part of the API server.
    assert!(!table.contains("etcd-"), "{table}");

    // Shaped like kubeadm's mirror pods.
    let node_uid = up.ok(&["get", "node", NODE, "-o", "jsonpath={.metadata.uid}"]);
    let node_ip = up.ok(&[
        "get",
        "node",
        NODE,
        "-o",
        "jsonpath={.status.addresses[?(@.type==\"InternalIP\")].address}",
    ]);
    for (component, name) in COMPONENTS.iter().zip(&names) {
        let p = up.pod(name);
        let ann = "/metadata/annotations/kubernetes.io~1config.";
        let hash = s(&p, &format!("{ann}hash"));
        assert_eq!(hash.len(), 32, "{p:#}");
        assert_eq!(s(&p, &format!("{ann}mirror")), hash);
        assert_eq!(s(&p, &format!("{ann}source")), "file");
        assert!(!s(&p, &format!("{ann}seen")).is_empty());
        assert_eq!(s(&p, "/metadata/labels/component"), *component);
        assert_eq!(s(&p, "/metadata/labels/tier"), "control-plane");
        assert_eq!(s(&p, "/metadata/ownerReferences/0/kind"), "Node");
        assert_eq!(s(&p, "/metadata/ownerReferences/0/name"), NODE);
        assert_eq!(s(&p, "/metadata/ownerReferences/0/uid"), node_uid);
        assert_eq!(s(&p, "/spec/nodeName"), NODE);
        assert_eq!(s(&p, "/spec/priorityClassName"), "system-node-critical");
        assert_eq!(
            p.pointer("/spec/priority"),
            Some(&Value::from(2_000_001_000))
        );
        assert_eq!(p.pointer("/spec/hostNetwork"), Some(&Value::Bool(true)));
        assert_eq!(s(&p, "/spec/containers/0/name"), *component);
        assert_eq!(s(&p, "/spec/containers/0/image"), "capstan:v1.32.0");
        assert_eq!(s(&p, "/spec/containers/0/command/1"), "up");
        assert_eq!(s(&p, "/status/podIP"), node_ip);
        assert_eq!(s(&p, "/status/hostIP"), node_ip);
        assert_eq!(
            s(&p, "/status/containerStatuses/0/containerID"),
            format!("capstan://{component}")
        );
        assert!(!s(&p, "/status/containerStatuses/0/state/running/startedAt").is_empty());
    }
    let describe = up.ok(&["describe", "pod", "-n", "kube-system", &names[0]]);
    for want in [
        "Priority Class Name:  system-node-critical".to_string(),
        format!("Controlled By:  Node/{NODE}"),
        "Container ID:  capstan://kube-apiserver".to_string(),
        "tier=control-plane".to_string(),
    ] {
        assert!(describe.contains(&want), "no {want:?} in:\n{describe}");
    }

    // Deleted (gracefully, as a user does): it comes back as a new pod.
    let scheduler = &names[2];
    let old_uid = s(&up.pod(scheduler), "/metadata/uid").to_string();
    up.ok(&[
        "-n",
        "kube-system",
        "delete",
        "pod",
        scheduler,
        "--wait=false",
    ]);
    up.wait_pod(scheduler, "recreated, Running and ready", |p| {
        let uid = s(p, "/metadata/uid");
        !uid.is_empty() && uid != old_uid && running_ready(p)
    });

    // Another holder takes the scheduler's lease: the pod turns NotReady (0/1), still Running.
    let now = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ");
    let patch = format!(
        r#"{{"spec":{{"holderIdentity":"elsewhere_1","leaseDurationSeconds":3600,"renewTime":"{now}"}}}}"#
    );
    up.ok(&[
        "-n",
        "kube-system",
        "patch",
        "lease",
        "kube-scheduler",
        "--type=merge",
        "-p",
        &patch,
    ]);
    let p = up.wait_pod(scheduler, "NotReady", |p| condition(p, "Ready") == "False");
    assert_eq!(s(&p, "/status/phase"), "Running");
    assert_eq!(condition(&p, "ContainersReady"), "False");
    assert_eq!(
        p.pointer("/status/containerStatuses/0/ready"),
        Some(&Value::Bool(false))
    );
    let line = up.ok(&[
        "get",
        "pods",
        "-n",
        "kube-system",
        scheduler,
        "--no-headers",
    ]);
    assert!(line.contains(" 0/1 ") && line.contains("Running"), "{line}");
    // The others stay ready.
    assert!(running_ready(&up.pod(&names[0])));

    // Nothing of them went through the runtime: no container exists at all.
    assert_eq!(up.runc_containers(), "", "containers were created");
    assert!(
        !up.log().contains("failed creating a mirror pod"),
        "{}",
        tail(&up.log(), 40)
    );

    // SIGINT: exit 0.
    let mut child = up.child.take().unwrap();
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("capstan up did not stop:\n{}", tail(&up.log(), 30));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}:\n{}", tail(&up.log(), 30));
    wait_until(
        "nothing left in the state directory",
        Duration::from_secs(5),
        || up.runc_containers().is_empty(),
    );
}
