//! `capstan up`: a whole single-node cluster in one process, with a managed containerd.
//!
//! One test (it needs root, containerd, runc and the CNI plugins): the node becomes Ready, a pod
//! runs and logs, a Service reaches it through the proxy and the cluster DNS names it, a second
//! `capstan up` on the same port fails with one line and writes nothing, SIGINT stops
//! everything (exit 0, no containerd, shim, container or proxy rule left), and a restart on the
//! same data directory runs the pod again.
//!
//! The cluster runs in a network namespace of its own (a test-bed node, as a machine of its
//! own would be), so that its proxy rules and pod network stay out of the host's.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capstan_testkit::netbed::{Bed, NodeNs};
use support::{node, wait_until};

/// kubectl inside the cluster's namespace (its API server listens on the namespace's loopback).
fn kubectl(
    ns: &NodeNs,
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> std::process::Output {
    use std::io::Write;
    let mut child = ns
        .command("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

/// A `capstan up` process; dropping it kills it and removes whatever it left.
struct Up {
    ns: NodeNs,
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
        let child = self
            .ns
            .command(env!("CARGO_BIN_EXE_capstan"))
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
        let out = kubectl(&self.ns, &self.kubeconfig(), args, None);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn get(&self, args: &[&str]) -> String {
        let out = kubectl(&self.ns, &self.kubeconfig(), args, None);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Wait until the `n`th start-up has finished (its "try: kubectl" line) (the process must keep running).
    fn wait_ready(&mut self, n: usize) -> Duration {
        let start = Instant::now();
        loop {
            // The last line of start-up: everything (DNS, dashboard) is up.
            if self.log().matches("try: kubectl").count() >= n {
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
    let mut bed = Bed::new();
    let ns = bed.node();
    let host = bed.host_ip().to_string();
    let registry = node::Registry::start_on(std::net::Ipv4Addr::UNSPECIFIED);
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
        "--insecure-registry".into(),
        format!("{host}:{}", registry.port()),
    ];
    let mut up = Up {
        ns: ns.clone(),
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
        "ingress serving",
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
        registry.image_at(&host, "busybox")
    );
    let out = kubectl(&ns, &up.kubeconfig(), &["apply", "-f", "-"], Some(&pod));
    assert!(out.status.success(), "{out:?}");
    let phase = "jsonpath={.status.phase}";
    wait_until("the pod Running", Duration::from_secs(90), || {
        up.get(&["get", "pod", "hello", "-o", phase]) == "Running"
    });
    wait_until("the pod's log", Duration::from_secs(30), || {
        up.get(&["logs", "hello"]).contains("hello from up")
    });
    // A Service reaches a pod through the proxy, and the cluster DNS names it.
    let web = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: web, labels: {{app: web}}}}
spec:
  containers:
  - name: web
    image: {}
    command: ["sh", "-c", "mkdir -p /www && echo hello from web > /www/index.html && exec httpd -f -p 8080 -h /www"]
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080}}]
"#,
        registry.image_at(&host, "busybox")
    );
    let out = kubectl(&ns, &up.kubeconfig(), &["apply", "-f", "-"], Some(&web));
    assert!(out.status.success(), "{out:?}");
    wait_until("the web pod Running", Duration::from_secs(90), || {
        up.get(&["get", "pod", "web", "-o", phase]) == "Running"
    });
    let cluster_ip = up.ok(&["get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    wait_until("the Service answers", Duration::from_secs(60), || {
        // (busybox's wget -T crashes on Debian 12: `timeout` bounds it instead.)
        ns.exec(&[
            "timeout",
            "5",
            "busybox",
            "wget",
            "-q",
            "-O",
            "-",
            &format!("http://{cluster_ip}/"),
        ])
        .is_ok_and(|body| body.contains("hello from web"))
    });
    let mut answer = String::new();
    wait_until(
        "the cluster DNS names the Service",
        Duration::from_secs(60),
        || {
            answer = up.get(&[
                "exec",
                "hello",
                "--",
                "nslookup",
                "web.default.svc.cluster.local",
            ]);
            answer.contains(&cluster_ip)
        },
    );
    assert!(
        up.ok(&["exec", "hello", "--", "cat", "/etc/resolv.conf"])
            .contains("10.43.0.10"),
        "pods resolve through the kube-dns Service"
    );

    // The ingress controller serves an Ingress of the default class (none named) on the
    // node's port 80, as its own ServiceAccount, and publishes the node's address.
    let ingress = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  rules:
  - host: web.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"#;
    let out = kubectl(&ns, &up.kubeconfig(), &["apply", "-f", "-"], Some(ingress));
    assert!(out.status.success(), "{out:?}");
    wait_until(
        "the Ingress routes by host",
        Duration::from_secs(60),
        || {
            ns.exec(&[
                "curl",
                "-s",
                "-m",
                "5",
                "-H",
                "Host: web.example",
                "http://127.0.0.1/",
            ])
            .is_ok_and(|body| body.contains("hello from web"))
        },
    );
    let unrouted = ns
        .exec(&[
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-m",
            "5",
            "-H",
            "Host: other.example",
            "http://127.0.0.1/",
        ])
        .unwrap_or_default();
    assert_eq!(unrouted, "404", "a host no rule names");
    wait_until("the Ingress status", Duration::from_secs(30), || {
        up.get(&[
            "get",
            "ingress",
            "web",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[0].ip}",
        ]) == ns.ip.to_string()
    });
    assert_eq!(
        up.ok(&[
            "auth",
            "can-i",
            "list",
            "secrets",
            "--as",
            "system:serviceaccount:kube-system:capstan-ingress",
        ])
        .trim(),
        "yes"
    );

    // The add-ons' manifests for running them as pods pass the API server's validation.
    for manifest in [
        "../ingress/deploy/ingress.yaml",
        "../dashboard/deploy/dashboard.yaml",
    ] {
        let path = format!("{}/{manifest}", env!("CARGO_MANIFEST_DIR"));
        let out = up.ok(&["apply", "--dry-run=server", "-f", &path]);
        assert!(out.contains("(server dry run)"), "{manifest}: {out}");
    }

    // The dashboard serves its UI, and its sign-in account gives tokens.
    let page = ns
        .exec(&["curl", "-sk", "https://127.0.0.1:8443/"])
        .unwrap_or_default();
    assert!(
        page.to_lowercase().contains("<html"),
        "dashboard page: {page}"
    );
    let token = up.ok(&["-n", "kube-system", "create", "token", "capstan-dashboard"]);
    assert!(token.trim().len() > 100, "{token}");

    let container_id = "jsonpath={.status.containerStatuses[0].containerID}";
    let first_id = up.ok(&["get", "pod", "hello", "-o", container_id]);
    assert!(first_id.starts_with("containerd://"), "{first_id}");
    assert!(!up.leftovers().is_empty(), "containerd and its shims run");

    // A second cluster on the same port: one clear line, and its data directory untouched.
    let other = tempfile::tempdir().unwrap();
    let other_data = other.path().join("data");
    let out = ns
        .command(env!("CARGO_BIN_EXE_capstan"))
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
    let nat = ns.exec(&["iptables-save", "-t", "nat"]).unwrap();
    assert!(!nat.contains("KUBE-SERVICES"), "proxy rules left:\n{nat}");
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
    // The pod's tmpfs volumes (its service account token) are unmounted too.
    let pods_dir = std::fs::canonicalize(&up.dir).unwrap().join("kubelet/pods");
    let mounted = node::mounts_under(&pods_dir.to_string_lossy());
    assert!(mounted.is_empty(), "volumes left mounted: {mounted:#?}");

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
