//! `capstan up`: a whole single-node cluster in one process, with a managed containerd.
//!
//! One test (it needs root, containerd, runc and the CNI plugins; it is skipped otherwise):
//! the node becomes Ready, a pod runs and logs, a second `capstan up` on the same port fails
//! with one line and writes nothing, SIGINT stops everything (exit 0, no containerd, shim or
//! container left), and a restart on the same data directory runs the pod again.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{kubectl, node, wait_until};

/// A `capstan up` process; dropping it kills it and removes whatever it left.
struct Up {
    dir: PathBuf,
    state: PathBuf,
    bridge: String,
    args: Vec<String>,
    child: Option<Child>,
}

impl Up {
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("up.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .arg("up")
            .args(&self.args)
            // Never ~/.kube/config: the data directory is not the default, and HOME is ours.
            .env("HOME", self.dir.join("home"))
            .env("CAPSTAN_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("capstan up starts");
        self.child = Some(child);
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("up.log")).unwrap_or_default()
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = kubectl(&self.kubeconfig(), args, None);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn get(&self, args: &[&str]) -> String {
        let out = kubectl(&self.kubeconfig(), args, None);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Wait until the `n`th "node Ready" progress line (the process must keep running).
    fn wait_ready(&mut self, n: usize) -> Duration {
        let start = Instant::now();
        loop {
            if self.log().matches("  node Ready").count() >= n {
                return start.elapsed();
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("capstan up exited ({status}):\n{}", tail(&self.log(), 40));
            }
            if start.elapsed() > Duration::from_secs(120) {
                panic!(
                    "the node is not Ready after 120s:\n{}",
                    tail(&self.log(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGINT, then wait (up to `timeout`) for the exit status.
    fn interrupt(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("a running capstan up");
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "capstan up did not exit within {timeout:?} of SIGINT:\n{}",
                    tail(&self.log(), 30)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Processes whose command line mentions this cluster's containerd state directory
    /// (containerd, its shims) or whose parent is one of them (containers).
    fn leftovers(&self) -> Vec<String> {
        let state = self.state.to_string_lossy().into_owned();
        let procs = processes();
        let ours: Vec<u32> = procs
            .iter()
            .filter(|(_, _, cmd)| cmd.contains(&state))
            .map(|(pid, _, _)| *pid)
            .collect();
        procs
            .iter()
            .filter(|(pid, ppid, _)| ours.contains(pid) || ours.contains(ppid))
            .map(|(pid, _, cmd)| format!("{pid} {cmd}"))
            .collect()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Containers, shims and containerd a failed run may have left.
        for line in self.leftovers() {
            if let Some(pid) = line.split(' ').next() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
        }
        let _ = Command::new("runc")
            .arg("--root")
            .arg(self.state.join("runc"))
            .args(["list", "-q"])
            .output()
            .map(|out| {
                for id in String::from_utf8_lossy(&out.stdout).lines() {
                    let _ = Command::new("runc")
                        .arg("--root")
                        .arg(self.state.join("runc"))
                        .args(["delete", "--force", id.trim()])
                        .status();
                }
            });
        node::unmount_under(&self.dir);
        node::unmount_under(&self.state);
        let _ = std::fs::remove_dir_all(&self.state);
        node::Containerd::remove_link(&self.bridge);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every process: pid, parent pid, command line.
fn processes() -> Vec<(u32, u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(entry.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        let ppid = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.split(' ').nth(1)?.parse().ok())
            })
            .unwrap_or(0);
        out.push((pid, ppid, cmd));
    }
    out
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

#[test]
fn up_runs_a_node_stops_cleanly_and_restarts_with_its_pods() {
    assert!(
        can_run(),
        "needs root, containerd and runc (.ci/run installs them)"
    );
    let registry = node::Registry::start();
    let dir = tempfile::Builder::new()
        .prefix("capstan-up-")
        .tempdir()
        .unwrap()
        .keep();
    let port = free_port();
    let bridge = format!("cbr{:08x}", rand::random::<u32>());
    let default = PathBuf::from("/var/lib/capstan");
    let state = capstan_kubelet::containerd::state_dir(&dir, &default);
    let args: Vec<String> = vec![
        "--data-dir".into(),
        dir.display().to_string(),
        "--secure-port".into(),
        port.to_string(),
        "--bind-address".into(),
        "127.0.0.1".into(),
        "--kubelet-port".into(),
        free_port().to_string(),
        // As kind does: the test machine's disk may be fuller than Kubernetes' 10% default.
        "--eviction-hard=nodefs.available<1%,nodefs.inodesFree<1%".into(),
        "--cni-bridge-name".into(),
        bridge.clone(),
        "--cluster-cidr".into(),
        support::unique_cluster_cidr(),
        "--node-name".into(),
        "up-node".into(),
    ];
    let mut up = Up {
        dir,
        state,
        bridge,
        args,
        child: None,
    };
    up.spawn();
    let ready = up.wait_ready(1);
    eprintln!("capstan up: node Ready after {ready:?}");
    let log = up.log();
    for step in [
        "store open",
        "API server ready",
        "containerd ready",
        "kubelet registered",
    ] {
        assert!(log.contains(step), "no {step:?} progress line:\n{log}");
    }
    assert!(log.contains(&format!(
        "try: kubectl --kubeconfig {} get nodes",
        up.kubeconfig().display()
    )));
    assert!(
        !up.dir.join("home/.kube/config").exists(),
        "a non-default data directory must not touch ~/.kube/config"
    );
    let jsonpath = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
    assert_eq!(up.ok(&["get", "node", "up-node", "-o", jsonpath]), "True");

    // A bare pod from the test registry (plain HTTP on localhost) runs and logs.
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hello\nspec:\n  containers:\n  - name: c\n    \
         image: {}\n    command: [\"sh\", \"-c\", \"echo hello from up; sleep 3600\"]\n",
        registry.image("busybox")
    );
    let out = kubectl(&up.kubeconfig(), &["apply", "-f", "-"], Some(&pod));
    assert!(out.status.success(), "{out:?}");
    let phase = "jsonpath={.status.phase}";
    wait_until("the pod Running", Duration::from_secs(90), || {
        up.get(&["get", "pod", "hello", "-o", phase]) == "Running"
    });
    wait_until("the pod's log", Duration::from_secs(30), || {
        up.get(&["logs", "hello"]).contains("hello from up")
    });
    let container_id = "jsonpath={.status.containerStatuses[0].containerID}";
    let first_id = up.ok(&["get", "pod", "hello", "-o", container_id]);
    assert!(first_id.starts_with("containerd://"), "{first_id}");
    assert!(!up.leftovers().is_empty(), "containerd and its shims run");

    // A second cluster on the same port: one clear line, and its data directory untouched.
    let other = tempfile::tempdir().unwrap();
    let other_data = other.path().join("data");
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["up", "--data-dir"])
        .arg(&other_data)
        .args([
            "--secure-port",
            &port.to_string(),
            "--bind-address",
            "127.0.0.1",
        ])
        .env("HOME", other.path())
        .env("CAPSTAN_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a second capstan up on port {port} started"
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains(&format!("port {port} is not available"))
            && lines[0].contains("--secure-port"),
        "{stderr}"
    );
    assert!(!other_data.exists(), "the data directory was written");

    // SIGINT: exit 0 quickly, and nothing of the cluster keeps running.
    let start = Instant::now();
    let status = up.interrupt(Duration::from_secs(20));
    assert!(
        status.success(),
        "capstan up exited with {status}:\n{}",
        tail(&up.log(), 20)
    );
    eprintln!("capstan up: stopped {:?} after SIGINT", start.elapsed());
    assert!(up.log().contains("capstan up: stopped"));
    let left = up.leftovers();
    assert!(left.is_empty(), "left running: {left:#?}");
    let runc = Command::new("runc")
        .arg("--root")
        .arg(up.state.join("runc"))
        .args(["list", "-q"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&runc.stdout).trim().is_empty(),
        "containers left: {}",
        String::from_utf8_lossy(&runc.stdout)
    );

    // Again on the same data: the pod (still in the store) runs again, in a new container.
    up.spawn();
    up.wait_ready(2);
    wait_until(
        "the pod running in a new container",
        Duration::from_secs(90),
        || {
            let id = up.get(&["get", "pod", "hello", "-o", container_id]);
            up.get(&["get", "pod", "hello", "-o", phase]) == "Running"
                && id.starts_with("containerd://")
                && id != first_id
        },
    );
    wait_until("the new container's log", Duration::from_secs(30), || {
        up.get(&["logs", "hello"]).contains("hello from up")
    });
    let status = up.interrupt(Duration::from_secs(20));
    assert!(status.success(), "{status}");
    assert!(up.leftovers().is_empty());
    // Read the log the way a user sees it: progress lines are not buried.
    let reader = BufReader::new(std::fs::File::open(up.dir.join("up.log")).unwrap());
    assert!(reader
        .lines()
        .map_while(Result::ok)
        .any(|l| l.starts_with("  node Ready")));
}
