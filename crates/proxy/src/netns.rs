//! Private network namespaces for tests and benchmarks of the proxy backends.
//!
//! A [`NetNs`] is a named namespace (`ip netns add`) with a name unique to this process
//! (`<prefix>-<pid>-<counter>`), its loopback up, deleted again when dropped. Rules a test
//! writes inside one (iptables, nft) never touch the host's, and tests running in parallel
//! never see each other's addresses or rules, so they may all use the same IPs.
//!
//! Ways to do things inside a namespace:
//! - [`NetNs::exec`] runs a command (`ip netns exec <name> ...`) and returns its stdout;
//! - [`NetNs::spawn`] starts a long-running command (a server), killed when its handle drops;
//! - [`NetNs::run`] / [`NetNs::thread`] run Rust code on a thread that has entered the
//!   namespace (`setns`), so sockets it opens live there: a TCP listener bound in a
//!   backend namespace, a client connecting from the node's.
//!
//! Wiring: [`NetNs::pair_with`] links two namespaces with a veth pair and addresses each end;
//! [`NetNs::add_addresses`] adds local addresses (pod IPs, say).
//!
//! Everything needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
//!
//! ```no_run
//! use capstan_proxy::netns::NetNs;
//! # fn main() -> anyhow::Result<()> {
//! let node = NetNs::new("node")?;
//! let pods = NetNs::new("pods")?;
//! node.pair_with(&pods, "10.200.0.1/24", "10.200.0.2/24")?;
//! pods.add_addresses(&["10.244.1.2/32"])?;
//! node.exec(&["ip", "route", "add", "10.244.0.0/16", "via", "10.200.0.2"])?;
//! let listener = pods.run(|| std::net::TcpListener::bind("10.244.1.2:8080"))??;
//! let reply = node.run(|| std::net::TcpStream::connect("10.244.1.2:8080").is_ok())?;
//! # let _ = (listener, reply);
//! # Ok(())
//! # }
//! ```

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;

use anyhow::{bail, Context, Result};

/// Makes names (namespaces, interfaces) unique within this process.
static COUNTER: AtomicU32 = AtomicU32::new(0);

fn next_id() -> u32 {
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// A network namespace this process created; deleted (with whatever still runs in it) on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Create a namespace named `<prefix>-<pid>-<counter>` and bring its loopback up. (A
    /// name left behind by a crashed process that had the same pid is skipped, not reused.)
    pub fn new(prefix: &str) -> Result<NetNs> {
        let mut attempt = 0;
        let name = loop {
            let name = format!("{prefix}-{}-{}", std::process::id(), next_id());
            match run(Command::new("ip").args(["netns", "add", &name])) {
                Ok(_) => break name,
                Err(e) if attempt < 100 && format!("{e:#}").contains("File exists") => {
                    attempt += 1;
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("creating network namespace {name} (needs root)"))
                }
            }
        };
        let ns = NetNs { name };
        ns.exec(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A command that runs `program` inside the namespace (`ip netns exec <name> program`);
    /// add arguments, stdin etc. before running it.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }

    /// Run `args` (program first) inside the namespace; its stdout, or an error with its
    /// stderr when it fails.
    pub fn exec(&self, args: &[&str]) -> Result<String> {
        let Some((program, rest)) = args.split_first() else {
            bail!("NetNs::exec: no command given");
        };
        let out = run(self.command(program).args(rest))
            .with_context(|| format!("in network namespace {}", self.name))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Start `args` (program first) inside the namespace, its output discarded; it is killed
    /// when the returned handle drops.
    pub fn spawn(&self, args: &[&str]) -> Result<NsProcess> {
        let Some((program, rest)) = args.split_first() else {
            bail!("NetNs::spawn: no command given");
        };
        let child = self
            .command(program)
            .args(rest)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {program} in network namespace {}", self.name))?;
        Ok(NsProcess { child })
    }

    /// Run `f` on a new thread that has entered the namespace, and wait for its result.
    /// Sockets `f` creates belong to the namespace for their whole life, wherever they are
    /// used afterwards.
    pub fn run<R: Send, F: FnOnce() -> R + Send>(&self, f: F) -> Result<R> {
        let name = self.name.as_str();
        std::thread::scope(|s| {
            s.spawn(move || -> Result<R> {
                enter(name)?;
                Ok(f())
            })
            .join()
            .map_err(|_| anyhow::anyhow!("thread in network namespace {name} panicked"))?
        })
    }

    /// Start a thread that has entered the namespace and runs `f` (a server loop, say);
    /// the thread returns an error instead if entering failed.
    pub fn thread<R: Send + 'static, F: FnOnce() -> R + Send + 'static>(
        &self,
        f: F,
    ) -> JoinHandle<Result<R>> {
        let name = self.name.clone();
        std::thread::spawn(move || {
            enter(&name)?;
            Ok(f())
        })
    }

    /// Link this namespace to `other` with a veth pair, give the ends the addresses
    /// `addr_here` and `addr_there` (CIDR notation, e.g. `10.200.0.1/24`) and bring them up.
    /// Returns the interface names (here, there).
    pub fn pair_with(
        &self,
        other: &NetNs,
        addr_here: &str,
        addr_there: &str,
    ) -> Result<(String, String)> {
        let id = next_id();
        let here = format!("veth{id}a");
        let there = format!("veth{id}b");
        run(Command::new("ip").args([
            "link",
            "add",
            "name",
            &here,
            "netns",
            &self.name,
            "type",
            "veth",
            "peer",
            "name",
            &there,
            "netns",
            &other.name,
        ]))
        .with_context(|| format!("linking {} and {} with a veth pair", self.name, other.name))?;
        self.exec(&["ip", "addr", "add", addr_here, "dev", &here])?;
        self.exec(&["ip", "link", "set", &here, "up"])?;
        other.exec(&["ip", "addr", "add", addr_there, "dev", &there])?;
        other.exec(&["ip", "link", "set", &there, "up"])?;
        Ok((here, there))
    }

    /// Give the namespace extra local addresses (`cidrs`, e.g. `10.244.1.2/32`), on its
    /// loopback interface (this kernel may lack the dummy interface type).
    pub fn add_addresses(&self, cidrs: &[&str]) -> Result<()> {
        for cidr in cidrs {
            self.exec(&["ip", "addr", "add", cidr, "dev", "lo"])?;
        }
        Ok(())
    }

    /// Set a sysctl of the namespace (`net.ipv4.ip_forward`, say); network sysctls are per
    /// namespace.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        self.exec(&["sysctl", "-q", "-w", &format!("{key}={value}")])?;
        Ok(())
    }

    /// The pids of the processes in the namespace (other than this one).
    fn pids(&self) -> Vec<i32> {
        let me = std::process::id() as i32;
        Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                    .filter(|&p| p != me && p > 1)
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Whatever still runs inside was started through this namespace by us.
        for pid in self.pids() {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A process started with [`NetNs::spawn`]; killed and reaped on drop.
#[derive(Debug)]
pub struct NsProcess {
    child: Child,
}

impl NsProcess {
    /// Its pid (that of `ip netns exec`, which execs the program itself).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has exited, and how.
    pub fn try_wait(&mut self) -> io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Move the calling thread into the named namespace.
fn enter(name: &str) -> Result<()> {
    let path = format!("/run/netns/{name}");
    let file = File::open(&path).with_context(|| format!("opening {path}"))?;
    // SAFETY: setns(2) on a valid open descriptor; only this thread changes namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("entering network namespace {name}"));
    }
    Ok(())
}

/// Run a command to completion; an error with its stderr when it fails.
fn run(cmd: &mut Command) -> Result<Output> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    if !out.status.success() {
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        bail!(
            "{} {} failed ({}): {}",
            cmd.get_program().to_string_lossy(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn namespaces_are_private_linked_and_removed() {
        let a = NetNs::new("capstan-nstest").unwrap();
        let b = NetNs::new("capstan-nstest").unwrap();
        assert_ne!(a.name(), b.name());
        a.pair_with(&b, "10.201.0.1/24", "10.201.0.2/24").unwrap();
        b.add_addresses(&["10.245.0.7/32"]).unwrap();
        a.exec(&["ip", "route", "add", "10.245.0.0/16", "via", "10.201.0.2"])
            .unwrap();

        let listener = b
            .run(|| TcpListener::bind("10.245.0.7:9000"))
            .unwrap()
            .unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.write_all(b"hello").unwrap();
        });
        let got = a
            .run(|| {
                let mut s = TcpStream::connect("10.245.0.7:9000")?;
                let mut buf = String::new();
                s.read_to_string(&mut buf)?;
                io::Result::Ok(buf)
            })
            .unwrap()
            .unwrap();
        server.join().unwrap();
        assert_eq!(got, "hello");

        // The host does not see the address; the namespace does.
        assert!(a
            .exec(&["ip", "-br", "addr"])
            .unwrap()
            .contains("10.201.0.1"));
        let host = Command::new("ip").args(["-br", "addr"]).output().unwrap();
        assert!(!String::from_utf8_lossy(&host.stdout).contains("10.201.0.1"));

        let mut sleeper = a.spawn(&["sleep", "600"]).unwrap();
        assert!(sleeper.try_wait().unwrap().is_none());
        assert!(a.exec(&["false"]).is_err());

        let name = a.name().to_string();
        drop(sleeper);
        drop(a);
        let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
        assert!(!String::from_utf8_lossy(&list.stdout)
            .lines()
            .any(|l| l.split_whitespace().next() == Some(name.as_str())));
    }
}
