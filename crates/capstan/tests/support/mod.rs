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

fn free_port() -> u16 {
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
            .args([
                "--secure-port",
                &port.to_string(),
                "--bind-address",
                "127.0.0.1",
            ])
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
            self.log_tail()
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

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
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
