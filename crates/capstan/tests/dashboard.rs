//! `capstan dashboard` end to end: a cluster with a hollow node, the dashboard in front of it,
//! and a real browser (Debian's chromium driven by playwright-core, crates/dashboard/e2e)
//! signing in with service-account tokens. Screenshots of the main views are left in
//! target/dashboard-screenshots/.
//!
//! Needs `apt-get install chromium` and `npm ci` in crates/dashboard/e2e: without them the
//! test fails (it does not skip).

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{wait_until, Server};

const CHROMIUM: &str = "/usr/bin/chromium";

/// The screenshots the main scenario leaves.
const SHOTS: [&str; 5] = [
    "overview.png",
    "deployment-detail.png",
    "pod-logs.png",
    "yaml-edit.png",
    "forbidden.png",
];

fn e2e_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboard/e2e")
}

fn screenshots_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/dashboard-screenshots")
}

/// Fail (not skip) when the browser or the node modules are missing, saying how to install
/// them.
fn require_browser_tools() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: apt-get install -y chromium"
    );
    assert!(
        e2e_dir().join("node_modules/playwright-core").exists(),
        "playwright-core is missing: (cd crates/dashboard/e2e && npm ci)"
    );
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.is_ok_and(|o| o.status.success()),
        "node is missing: apt-get install -y nodejs"
    );
}

/// The browser tests, one at a time: Chromium drops the connections it has open whenever the
/// machine's network interfaces change (ERR_NETWORK_CHANGED), and the kubelet of the logs test
/// creates bridges and veths for its pod.
fn browser_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `capstan dashboard`, killed on drop.
struct Dashboard {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Dashboard {
    fn start(server: &Server, extra: &[&str]) -> Dashboard {
        let port = free_port();
        let log = server.dir.path().join(format!("dashboard-{port}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .arg("dashboard")
            .arg("--kubeconfig")
            .arg(server.kubeconfig())
            .args(["--port", &port.to_string(), "--bind-address", "127.0.0.1"])
            .args(extra)
            .env("CAPSTAN_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("capstan dashboard starts");
        let mut d = Dashboard { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!("capstan dashboard exited ({status}):\n{}", d.log());
            }
            assert!(
                Instant::now() < deadline,
                "the dashboard did not listen:\n{}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        d
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A service account's token; `cluster_admin` binds it to cluster-admin first.
fn token(server: &Server, name: &str, cluster_admin: bool) -> String {
    server.ok(&["create", "serviceaccount", name, "-n", "default"]);
    if cluster_admin {
        server.ok(&[
            "create",
            "clusterrolebinding",
            name,
            "--clusterrole=cluster-admin",
            &format!("--serviceaccount=default:{name}"),
        ]);
    }
    server
        .ok(&["create", "token", name, "-n", "default", "--duration=1h"])
        .trim()
        .to_string()
}

#[test]
fn dashboard_in_a_browser() {
    require_browser_tools();
    let _browser = browser_lock();
    let server = Server::start_cluster(&[]);
    let _nodes = server.hollow_nodes(&["n1"]);
    let admin = token(&server, "dash-admin", true);
    let nobody = token(&server, "nobody", false);
    server.ok(&[
        "create",
        "deployment",
        "web",
        "--image=busybox",
        "--replicas=1",
        "-n",
        "default",
        "--",
        "sleep",
        "3600",
    ]);
    wait_until("deployment web ready", Duration::from_secs(60), || {
        server
            .kubectl(&[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.status.readyReplicas}",
            ])
            .stdout
            == b"1"
    });

    let dashboard = Dashboard::start(&server, &[]);
    let shots = screenshots_dir();
    for shot in SHOTS {
        let _ = std::fs::remove_file(shots.join(shot));
    }
    let out = Command::new("node")
        .arg("test.mjs")
        .current_dir(e2e_dir())
        .env(
            "DASHBOARD_URL",
            format!("https://127.0.0.1:{}/", dashboard.port),
        )
        .env("ADMIN_TOKEN", &admin)
        .env("NOBODY_TOKEN", &nobody)
        .env("NAMESPACE", "default")
        .env("SCREENSHOT_DIR", &shots)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the browser test failed:\n{stdout}\n{stderr}\n--- dashboard log ---\n{}",
        dashboard.log()
    );
    for shot in SHOTS {
        let len = std::fs::metadata(shots.join(shot))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(len > 10_000, "{shot}: {len} bytes");
    }
    // The dashboard never used the kubeconfig's credentials: the API server saw only the two
    // service accounts' tokens for what the browser did (the scale went through as dash-admin).
    let rs = server.ok(&[
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.spec.replicas} {.metadata.labels.edited-by}",
    ]);
    assert_eq!(rs, "3 dashboard");
}

/// Pod logs followed in the browser, from a real kubelet: lines arrive on the open stream, and
/// the container picker switches between the pod's containers.
#[test]
fn pod_logs_follow_in_a_browser() {
    require_browser_tools();
    let _browser = browser_lock();
    let cidr = support::unique_cluster_cidr();
    let server = Server::start_cluster(&["--cluster-cidr", &cidr]);
    let kubelet = server.kubelet("node-a");
    let busybox = kubelet.image("busybox");
    let admin = token(&server, "logs-admin", true);
    let script =
        |word: &str| format!("i=0; while true; do echo {word} $i; i=$((i+1)); sleep 0.5; done");
    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: ticker
  namespace: default
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: ticker
    image: {busybox}
    command: ["sh", "-c", {ticker:?}]
  - name: other
    image: {busybox}
    command: ["sh", "-c", {other:?}]
"#,
            ticker = script("tick"),
            other = script("other"),
        ),
    );
    wait_until("pod ticker running", Duration::from_secs(120), || {
        server
            .kubectl(&["get", "pod", "ticker", "-o", "jsonpath={.status.phase}"])
            .stdout
            == b"Running"
    });
    // The pod's interfaces get their IPv6 link-local addresses a second or two after they come
    // up (duplicate address detection), and Chromium drops requests in flight when the host's
    // addresses change: the scenario makes that change itself, at a known step.
    wait_until(
        "the host's addresses settled",
        Duration::from_secs(30),
        || {
            Command::new("ip")
                .args(["-6", "addr", "show", "tentative"])
                .output()
                .is_ok_and(|o| o.status.success() && o.stdout.is_empty())
        },
    );
    let dashboard = Dashboard::start(&server, &[]);
    let out = Command::new("node")
        .arg("test.mjs")
        .current_dir(e2e_dir())
        .env("SCENARIO", "logs")
        .env(
            "DASHBOARD_URL",
            format!("https://127.0.0.1:{}/", dashboard.port),
        )
        .env("ADMIN_TOKEN", &admin)
        .env("NAMESPACE", "default")
        .env("SCREENSHOT_DIR", screenshots_dir())
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the browser test failed:\n{stdout}\n{}\n--- dashboard log ---\n{}\n--- kubelet log ---\n{}\n--- server log ---\n{}",
        String::from_utf8_lossy(&out.stderr),
        dashboard.log(),
        kubelet.log_tail(40),
        server.log_tail(40)
    );
}

/// The UI's pure modules (YAML output, durations, selectors, health), under node's test runner.
#[test]
fn ui_unit_tests() {
    assert!(
        e2e_dir().join("node_modules/js-yaml").exists(),
        "js-yaml is missing: (cd crates/dashboard/e2e && npm ci)"
    );
    let out = Command::new("node")
        .args(["--test", "unit.test.mjs"])
        .current_dir(e2e_dir())
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Plain HTTP only on loopback; there the UI and the API are served.
#[test]
fn insecure_http() {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args([
            "dashboard",
            "--insecure-http",
            "--bind-address",
            "0.0.0.0",
            "--kubeconfig",
            "/nonexistent",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("only with a loopback --bind-address"), "{err}");

    let server = Server::start();
    let dashboard = Dashboard::start(&server, &["--insecure-http"]);
    let get = |path: &str, token: Option<&str>| -> String {
        let mut s = TcpStream::connect(("127.0.0.1", dashboard.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        resp
    };
    let index = get("/", None);
    assert!(index.starts_with("HTTP/1.1 200"), "{index}");
    assert!(index.contains("/js/boot.js"));
    // No token: the API server sees an anonymous request, not the kubeconfig's admin.
    let anon = get("/api/v1/namespaces", None);
    assert!(
        anon.starts_with("HTTP/1.1 401") || anon.starts_with("HTTP/1.1 403"),
        "{anon}"
    );
    let admin = token(&server, "http-admin", true);
    let listed = get("/api/v1/namespaces", Some(&admin));
    assert!(listed.starts_with("HTTP/1.1 200"), "{listed}");
    assert!(listed.contains("kube-system"), "{listed}");
}
