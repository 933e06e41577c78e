//! End-to-end test support: a real `capstan server` on a free port, driven with the real
//! kubectl (/usr/bin/kubectl, which picks kubectl 1.32 from the server's version).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: Child,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    /// Start `capstan server` with a fresh data directory and wait until it serves.
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, extra)
    }

    /// Start with the control plane's scheduler running (other tests leave pods alone).
    pub fn start_scheduling(extra: &[&str]) -> Server {
        Self::start_full(tempfile::tempdir().unwrap(), extra, true, false)
    }

    pub fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Server {
        Self::start_full(dir, extra, false, false)
    }

    /// Start a control plane: the API server with the scheduler and the controller manager
    /// in process (`extra` flags appended, e.g. `--node-monitor-grace-period=8s`).
    pub fn start_cluster(extra: &[&str]) -> Server {
        Self::start_full(tempfile::tempdir().unwrap(), extra, true, true)
    }

    fn start_full(
        dir: tempfile::TempDir,
        extra: &[&str],
        scheduler: bool,
        controllers: bool,
    ) -> Server {
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .arg("server")
            .arg("--data-dir")
            .arg(dir.path())
            .args(["--secure-port", &port.to_string()])
            .args(
                (!extra.contains(&"--bind-address"))
                    .then_some(["--bind-address", "127.0.0.1"])
                    .into_iter()
                    .flatten(),
            )
            .args(extra)
            .args((!scheduler).then_some("--disable-scheduler"))
            .args((!controllers).then_some("--disable-controller-manager"))
            .env("CAPSTAN_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("capstan starts");
        let server = Server { dir, port, child };
        server.wait_ready();
        server
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// The server's process id.
    #[allow(dead_code)]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The API server's port.
    #[allow(dead_code)]
    pub fn port(&self) -> u16 {
        self.port
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.kubeconfig().exists() {
                let out = self.kubectl(&["get", "--raw", "/readyz"]);
                if out.status.success() {
                    return;
                }
            }
            if Instant::now() > deadline {
                panic!("capstan server did not become ready:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Run kubectl against this server.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        kubectl(&self.kubeconfig(), args, None)
    }

    /// Run kubectl with `stdin` as its standard input.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Output {
        kubectl(&self.kubeconfig(), args, Some(stdin))
    }

    /// Run kubectl and return its stdout, failing the test if it fails.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log_tail(20)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn ok_stdin(&self, args: &[&str], stdin: &str) -> String {
        let out = self.kubectl_stdin(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Run kubectl expecting failure; return its stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} unexpectedly succeeded"
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// Start hollow nodes (a `capstan bench nodes` process) with these names: they register,
    /// renew their leases every 2 s and run the pods bound to them (see the bench's docs for
    /// the `hollow.capstan.dev/*` annotations). Dropping the value kills the process.
    pub fn hollow_nodes(&self, names: &[&str]) -> HollowNodes {
        let log = std::fs::File::create(
            self.dir
                .path()
                .join(format!("hollow-{}.log", names.join("-"))),
        )
        .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["bench", "nodes", "--kubeconfig"])
            .arg(self.kubeconfig())
            .arg("--names")
            .arg(names.join(","))
            .args(["--lease-interval", "2s"])
            .env("CAPSTAN_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("capstan bench nodes starts");
        let nodes = HollowNodes { child };
        for n in names {
            wait_until(
                &format!("node {n} registered and Ready"),
                Duration::from_secs(60),
                || {
                    let out = self.kubectl(&[
                        "get",
                        "node",
                        n,
                        "-o",
                        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                    ]);
                    out.status.success() && String::from_utf8_lossy(&out.stdout) == "True"
                },
            );
        }
        nodes
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        last_lines(&self.log(), lines)
    }

    /// Stop the server (SIGTERM-like: kill) and wait.
    pub fn stop(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, dir)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("HOME", kubeconfig.parent().unwrap())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl runs");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

/// Hollow nodes running in a child process; dropping this stops them (heartbeats stop).
pub struct HollowNodes {
    child: Child,
}

impl Drop for HollowNodes {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll `f` every 200 ms until it returns true; panic with `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

// ---------------------------------------------------------------------------------------------
// Nodes: a real `capstan kubelet` with its own containerd, pulling from a local registry.

/// The node fixture ([`node::Registry`], [`node::Containerd`]).
pub use capstan_testkit::node;

/// A `capstan kubelet` process for one node, with its own containerd (and a registry, shared by
/// the kubelets of one [`Server::kubelets`] call). Dropping it kills the kubelet, then removes
/// its containerd (pods, containers, shims, mounts), its mounts, its CNI bridge, and last the
/// registry when no other kubelet uses it.
pub struct Kubelet {
    /// The node's name.
    pub node: String,
    child: Option<Child>,
    args: Vec<std::ffi::OsString>,
    dir: tempfile::TempDir,
    port: u16,
    bridge: String,
    containerd: Option<node::Containerd>,
    registry: Option<std::sync::Arc<node::Registry>>,
}

impl Kubelet {
    /// The full reference of an image in this node's registry: `image("busybox")` is
    /// `localhost:PORT/busybox:1.35`, `image("pause")` `localhost:PORT/pause:3.10`,
    /// `image("nope:1")` a missing image. (`busybox:1.35` and `registry.k8s.io/pause:3.10`
    /// resolve to the same local images too.)
    pub fn image(&self, name: &str) -> String {
        self.registry().image(name)
    }

    /// The kubelet's log (stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kubelet.log")).unwrap_or_default()
    }

    /// The last `lines` lines of the kubelet's log.
    pub fn log_tail(&self, lines: usize) -> String {
        last_lines(&self.log(), lines)
    }

    /// The port of the kubelet's HTTPS server.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The node's containerd.
    pub fn containerd(&self) -> &node::Containerd {
        self.containerd
            .as_ref()
            .expect("the containerd of a live kubelet")
    }

    /// The registry the node pulls from.
    pub fn registry(&self) -> &node::Registry {
        self.registry
            .as_ref()
            .expect("the registry of a live kubelet")
    }

    /// The kubelet's --root-dir.
    pub fn root_dir(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// The kubelet's --pod-logs-dir.
    pub fn pod_logs_dir(&self) -> PathBuf {
        self.dir.path().join("pod-logs")
    }

    /// The node's kubeconfig (user `system:node:<node>`, group `system:nodes`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// The node's CNI bridge (--cni-bridge-name).
    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// Is the kubelet process running?
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Kill the kubelet process (like a crash: no cleanup); containerd and its containers stay.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start the kubelet again with the same flags (after [`Kubelet::stop`], or killing it
    /// first). Its log is appended to.
    pub fn restart(&mut self) {
        self.stop();
        self.child = Some(spawn_kubelet(self.dir.path(), &self.args));
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop();
        drop(self.containerd.take());
        node::unmount_under(self.dir.path());
        node::Containerd::remove_link(&self.bridge);
        drop(self.registry.take());
    }
}

fn spawn_kubelet(dir: &Path, args: &[std::ffi::OsString]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("kubelet.log"))
        .unwrap();
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("kubelet")
        .args(args)
        .env(
            "CAPSTAN_LOG",
            std::env::var("CAPSTAN_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("capstan kubelet starts")
}

/// Run a command that must succeed (test setup).
fn run_ok(cmd: &mut Command) {
    let out = cmd.output().expect("the command runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Server {
    /// Start a `capstan kubelet` for node `node` — with its own local registry and containerd —
    /// and wait (up to 120 s) until the node is registered and Ready.
    ///
    /// The kubelet authenticates as `system:node:<node>` (group `system:nodes`), so the Node
    /// authorizer and NodeRestriction apply to it. Its flags: --hostname-override `node`,
    /// --container-runtime-endpoint and --cni-conf-dir of its containerd, --root-dir and
    /// --pod-logs-dir in a temporary directory, --pod-infra-container-image
    /// `localhost:PORT/pause:3.10`, --port a free port, --cni-bridge-name `cbr` + 8 random hex
    /// digits, --node-status-update-frequency 2s. The node IP is left to the kubelet.
    ///
    /// Tests that run pods must start the cluster with a pod network no parallel test uses:
    /// `Server::start_cluster(&["--cluster-cidr", &support::unique_cluster_cidr()])`.
    pub fn kubelet(&self, node: &str) -> Kubelet {
        self.kubelet_with(node, &[])
    }

    /// [`Server::kubelet`] with extra kubelet flags (e.g. `["--max-pods", "3"]`); a flag given
    /// here is passed after the defaults, so it wins.
    pub fn kubelet_with(&self, node: &str, extra: &[&str]) -> Kubelet {
        let registry = std::sync::Arc::new(node::Registry::start());
        let kubelet = self.spawn_kubelet(node, registry, extra);
        self.wait_node_ready(&kubelet);
        kubelet
    }

    /// Kubelets for several nodes sharing one registry (so one image reference works on all of
    /// them); waits until every node is Ready.
    pub fn kubelets(&self, nodes: &[&str]) -> Vec<Kubelet> {
        let registry = std::sync::Arc::new(node::Registry::start());
        let kubelets: Vec<Kubelet> = nodes
            .iter()
            .map(|n| self.spawn_kubelet(n, registry.clone(), &[]))
            .collect();
        for kubelet in &kubelets {
            self.wait_node_ready(kubelet);
        }
        kubelets
    }

    /// Start a kubelet without waiting for its node (see [`Server::kubelet`]).
    pub fn spawn_kubelet(
        &self,
        node: &str,
        registry: std::sync::Arc<node::Registry>,
        extra: &[&str],
    ) -> Kubelet {
        let containerd = node::Containerd::start(&registry);
        let dir = tempfile::Builder::new()
            .prefix("capstan-kubelet-")
            .tempdir()
            .unwrap();
        let kubeconfig = self.node_kubeconfig(node, dir.path());
        let port = free_port();
        let bridge = format!("cbr{:08x}", rand::random::<u32>());
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        let mut arg = |name: &str, value: &dyn AsRef<std::ffi::OsStr>| {
            args.push(name.into());
            args.push(value.as_ref().to_owned());
        };
        arg("--kubeconfig", &kubeconfig);
        arg("--hostname-override", &node);
        arg("--container-runtime-endpoint", &containerd.endpoint());
        arg("--root-dir", &dir.path().join("root"));
        arg("--pod-logs-dir", &dir.path().join("pod-logs"));
        arg("--pod-infra-container-image", &registry.image("pause"));
        arg("--port", &port.to_string());
        arg("--cni-conf-dir", &containerd.cni_conf_dir());
        arg("--cni-bridge-name", &bridge);
        arg("--node-status-update-frequency", &"2s");
        // As kind does: the test machine's disk may be fuller than Kubernetes' 10% default,
        // and DiskPressure would taint the node.
        arg(
            "--eviction-hard",
            &"nodefs.available<1%,nodefs.inodesFree<1%",
        );
        args.extend(extra.iter().map(std::ffi::OsString::from));
        let child = spawn_kubelet(dir.path(), &args);
        Kubelet {
            node: node.to_string(),
            child: Some(child),
            args,
            dir,
            port,
            bridge,
            containerd: Some(containerd),
            registry: Some(registry),
        }
    }

    /// Wait (up to 120 s) until the kubelet's node is registered and Ready; panics with the
    /// kubelet's log if it is not, or if the kubelet exits.
    pub fn wait_node_ready(&self, kubelet: &Kubelet) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let jsonpath = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
        loop {
            let out = self.kubectl(&["get", "node", &kubelet.node, "-o", jsonpath]);
            if out.status.success() && String::from_utf8_lossy(&out.stdout) == "True" {
                return;
            }
            let exited = kubelet.child.as_ref().map(|c| c.id()).is_none_or(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map(|stat| stat.contains(") Z "))
                    .unwrap_or(true)
            });
            if exited || Instant::now() > deadline {
                panic!(
                    "node {} is not Ready{}:\nkubelet log:\n{}\ncontainerd log:\n{}",
                    kubelet.node,
                    if exited {
                        " (the kubelet exited)"
                    } else {
                        " after 120s"
                    },
                    kubelet.log_tail(60),
                    kubelet.containerd().log_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Write into `dir` a kubeconfig for node `node`: a fresh key and a certificate for
    /// `CN=system:node:<node>, O=system:nodes` signed by the cluster CA (with openssl).
    pub fn node_kubeconfig(&self, node: &str, dir: &Path) -> PathBuf {
        let pki = self.dir.path().join("pki");
        let ca = dir.join("ca.crt");
        std::fs::copy(pki.join("ca.crt"), &ca).expect("the server's CA certificate");
        let key = dir.join("node.key");
        let csr = dir.join("node.csr");
        let crt = dir.join("node.crt");
        let ext = dir.join("node.ext");
        run_ok(
            Command::new("openssl")
                .args(["genpkey", "-algorithm", "EC", "-pkeyopt"])
                .arg("ec_paramgen_curve:P-256")
                .arg("-out")
                .arg(&key),
        );
        run_ok(
            Command::new("openssl")
                .args(["req", "-new", "-key"])
                .arg(&key)
                .arg("-subj")
                .arg(format!("/O=system:nodes/CN=system:node:{node}"))
                .arg("-out")
                .arg(&csr),
        );
        std::fs::write(
            &ext,
            "basicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=clientAuth\n",
        )
        .unwrap();
        run_ok(
            Command::new("openssl")
                .args(["x509", "-req", "-in"])
                .arg(&csr)
                .arg("-CA")
                .arg(pki.join("ca.crt"))
                .arg("-CAkey")
                .arg(pki.join("ca.key"))
                .arg("-set_serial")
                .arg(format!("0x{:016x}", rand::random::<u64>()))
                .args(["-days", "30", "-extfile"])
                .arg(&ext)
                .arg("-out")
                .arg(&crt),
        );
        let user = format!("system:node:{node}");
        let kubeconfig = format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: capstan\n  cluster:\n    server: https://127.0.0.1:{port}\n    \
             certificate-authority: {ca}\n\
             users:\n\
             - name: \"{user}\"\n  user:\n    client-certificate: {crt}\n    client-key: {key}\n\
             contexts:\n\
             - name: default\n  context:\n    cluster: capstan\n    user: \"{user}\"\n\
             current-context: default\n",
            port = self.port,
            ca = ca.display(),
            crt = crt.display(),
            key = key.display(),
        );
        let path = dir.join("kubeconfig");
        std::fs::write(&path, kubeconfig).unwrap();
        path
    }
}

/// A pod network (`10.N.0.0/16`, N in 100..=250) for `--cluster-cidr` that no other test
/// process or call uses: chosen from the pid and a counter, skipping ranges with routes or
/// addresses on this machine (a running kubelet's bridge).
pub fn unique_cluster_cidr() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let taken = |n: u32| {
        let prefix = format!(" 10.{}.", 100 + n);
        ["route", "addr"].iter().any(|what| {
            Command::new("ip")
                .args(["-4", "-o", what])
                .output()
                .map(|o| {
                    let text = String::from_utf8_lossy(&o.stdout).replace('\n', " \n ");
                    format!(" {text}").contains(&prefix)
                })
                .unwrap_or(false)
        })
    };
    let start = std::process::id().wrapping_mul(37);
    let mut n = 0;
    for _ in 0..151 {
        n = (start.wrapping_add(CALLS.fetch_add(1, Ordering::Relaxed))) % 151;
        if !taken(n) {
            break;
        }
    }
    format!("10.{}.0.0/16", 100 + n)
}

/// The last `n` lines of a log.
pub fn last_lines(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
