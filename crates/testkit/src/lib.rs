//! Test helpers for capstan.
//!
//! [`EtcdCluster`] runs real etcd members (the `etcd` binary, `/usr/bin/etcd` unless
//! `CAPSTAN_ETCD_BIN` says otherwise) on loopback, so that the etcd backend is tested against
//! the real thing, including members dying mid-test.

pub mod netbed;
pub mod node;

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use tempfile::TempDir;

/// How long a cluster may take to elect a leader and report healthy.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How often to poll `/health` while starting.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Starting may fail when another test grabs one of our ports between choosing it and etcd
/// binding it; then we start again on fresh ports.
const START_ATTEMPTS: usize = 3;

/// etcd's `--max-request-bytes`. Larger than capstan's own limit (1.5 MiB of key and value,
/// etcd's default for the whole request) so that a write just under capstan's limit, plus the
/// transaction wrapped around it, still fits, and capstan's size check is the one that applies.
const MAX_REQUEST_BYTES: usize = 2 * 1024 * 1024;

/// A running etcd cluster on loopback. Dropping it kills every member and removes their data.
pub struct EtcdCluster {
    members: Vec<Member>,
    /// Holds every member's data directory and log; removed on drop (after the members die).
    dir: TempDir,
}

/// One etcd process and where it listens.
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    process: Mutex<Option<Child>>,
}

impl EtcdCluster {
    /// Launch `members` etcd members forming one new cluster, and wait (up to 20 s) until every
    /// member reports healthy, i.e. the cluster has a leader and serves requests.
    pub fn start(members: usize) -> anyhow::Result<EtcdCluster> {
        if members == 0 {
            bail!("an etcd cluster needs at least one member");
        }
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(members) {
                Ok(cluster) => return Ok(cluster),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.expect("at least one attempt"))
    }

    /// The members' client URLs, in member order ("http://127.0.0.1:PORT").
    pub fn client_endpoints(&self) -> Vec<String> {
        (0..self.members.len())
            .map(|i| self.client_endpoint(i))
            .collect()
    }

    /// Member `i`'s client URL.
    pub fn client_endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    /// How many members the cluster was started with (dead or alive).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a cluster has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// SIGKILL member `i` (no graceful shutdown, like a crashed machine) and reap it.
    /// Killing a dead member does nothing.
    pub fn kill(&self, i: usize) {
        let mut process = self.members[i]
            .process
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(mut child) = process.take() {
            // `Child::kill` sends SIGKILL on Unix.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Is member `i` still running?
    pub fn is_running(&self, i: usize) -> bool {
        let mut process = self.members[i]
            .process
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        matches!(process.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The member that is the raft leader now, as the running members report it (None while
    /// there is none, e.g. during an election).
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len()).find(|&i| {
            self.is_running(i)
                && status(self.members[i].client_port)
                    .is_some_and(|(me, leader)| leader != 0 && me == leader)
        })
    }

    /// Wait (up to 20 s) until some member is the leader, and say which.
    pub fn wait_for_leader(&self) -> anyhow::Result<usize> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(leader) = self.leader() {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                bail!("no etcd leader after {START_TIMEOUT:?}");
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The last lines member `i` logged, to explain a failure.
    pub fn log_tail(&self, i: usize) -> String {
        tail(&log_path(self.dir.path(), &self.members[i].name))
    }

    fn try_start(count: usize) -> anyhow::Result<EtcdCluster> {
        let dir = tempfile::Builder::new()
            .prefix("capstan-etcd-")
            .tempdir()
            .context("creating a temporary directory for etcd")?;
        let ports = free_ports(2 * count)?;
        let members: Vec<Member> = (0..count)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                process: Mutex::new(None),
            })
            .collect();
        let cluster = EtcdCluster { members, dir };
        cluster.spawn_all()?;
        cluster.wait_healthy()?;
        Ok(cluster)
    }

    fn spawn_all(&self) -> anyhow::Result<()> {
        let initial_cluster = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        // A token unique to this cluster, so that members of clusters started by concurrent
        // tests can never mistake each other for peers.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let token = format!("capstan-test-{}-{nanos}", std::process::id());
        for member in &self.members {
            let child = self.spawn(member, &initial_cluster, &token)?;
            *member.process.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
        }
        Ok(())
    }

    fn spawn(&self, m: &Member, initial_cluster: &str, token: &str) -> anyhow::Result<Child> {
        let client_url = format!("http://127.0.0.1:{}", m.client_port);
        let peer_url = format!("http://127.0.0.1:{}", m.peer_port);
        let data_dir = self.dir.path().join(&m.name);
        let log = File::create(log_path(self.dir.path(), &m.name))?;
        let binary = std::env::var("CAPSTAN_ETCD_BIN").unwrap_or_else(|_| "/usr/bin/etcd".into());
        Command::new(&binary)
            .arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", token])
            .args(["--max-request-bytes", &MAX_REQUEST_BYTES.to_string()])
            // Quiet: structured logs, errors only, to a file kept for diagnosis.
            .args([
                "--logger",
                "zap",
                "--log-outputs",
                "stderr",
                "--log-level",
                "error",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {binary}"))
    }

    /// Poll every member's `/health` until all say healthy, failing early if one exits.
    fn wait_healthy(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        for (i, member) in self.members.iter().enumerate() {
            loop {
                if !self.is_running(i) {
                    bail!("etcd member {} exited:\n{}", member.name, self.log_tail(i));
                }
                if healthy(member.client_port) {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "etcd member {} not healthy after {START_TIMEOUT:?}:\n{}",
                        member.name,
                        self.log_tail(i)
                    );
                }
                std::thread::sleep(POLL_INTERVAL);
            }
        }
        Ok(())
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        // Kill before the TempDir field drops, so etcd is not writing while it is removed.
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

fn log_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.log"))
}

/// `count` distinct free loopback ports. All listeners stay open until every port is chosen,
/// so the kernel cannot hand out the same port twice.
fn free_ports(count: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<std::io::Result<Vec<_>>>()
        .context("finding free ports")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// Does the member on `port` answer `GET /health` with `"health":"true"`?
fn healthy(port: u16) -> bool {
    let request = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    http(port, request).is_ok_and(|r| r.contains("\"health\":\"true\""))
}

/// The member's own id and its leader's id, from etcd's JSON gateway
/// (`POST /v3/maintenance/status`; ids are uint64s rendered as strings).
fn status(port: u16) -> Option<(u64, u64)> {
    let request =
        "POST /v3/maintenance/status HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}";
    let response = http(port, request).ok()?;
    Some((
        json_number(&response, "member_id")?,
        json_number(&response, "leader")?,
    ))
}

/// The value of `"field":"123"` in a JSON text, without a JSON parser.
fn json_number(json: &str, field: &str) -> Option<u64> {
    let start = json.find(&format!("\"{field}\":\""))? + field.len() + 4;
    let len = json[start..].find('"')?;
    json[start..start + len].parse().ok()
}

/// Send one plain HTTP/1.0 request to the member's client port and read the whole answer.
fn http(port: u16, request: &str) -> std::io::Result<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

/// The last 40 lines of a log file.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_numbers_are_found() {
        let json = r#"{"header":{"member_id":"42","revision":"1"},"leader":"42"}"#;
        assert_eq!(json_number(json, "member_id"), Some(42));
        assert_eq!(json_number(json, "leader"), Some(42));
        assert_eq!(json_number(json, "raft_term"), None);
    }

    #[test]
    fn single_member_starts_and_stops() {
        let cluster = EtcdCluster::start(1).unwrap();
        assert_eq!(cluster.client_endpoints().len(), 1);
        assert!(cluster.is_running(0));
        cluster.kill(0);
        assert!(!cluster.is_running(0));
    }

    #[test]
    fn three_members_form_one_cluster() {
        let cluster = EtcdCluster::start(3).unwrap();
        assert_eq!(cluster.len(), 3);
        for i in 0..3 {
            assert!(cluster.is_running(i), "{}", cluster.log_tail(i));
        }
        let leader = cluster.wait_for_leader().unwrap();
        cluster.kill(leader);
        let next = cluster.wait_for_leader().unwrap();
        assert_ne!(next, leader);
    }
}
