//! A multi-node test bed on one machine: a Linux bridge in the host's network namespace and,
//! per node, a network namespace linked to it by a veth pair, on one private /24 — the shape of
//! a rack of machines on one L2 segment. The host side of the bridge has `.1`, nodes `.10` on.
//! A node can also sit on a subnet of its own behind the host as a router
//! ([`Bed::routed_node`]), as a machine elsewhere in a data centre would.
//!
//! Everything is named after the process and a counter, so that tests running in parallel don't
//! collide, and everything is removed on drop (namespaces, veths, the bridge). The bridge does
//! not pass bridged frames through the host's iptables (`nf_call_iptables 0`), so the host's
//! own firewall rules don't decide what nodes may send each other.

use std::net::Ipv4Addr;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

fn run(args: &[&str]) -> Result<Output, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("running {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out)
}

fn must(args: &[&str]) {
    if let Err(e) = run(args) {
        panic!("test bed: {e}");
    }
}

/// The bridge and its subnet; nodes are added with [`Bed::node`].
pub struct Bed {
    tag: String,
    bridge: String,
    /// The first three octets of the subnet.
    net: [u8; 3],
    nodes: Vec<String>,
}

impl Bed {
    /// Create the bridge with the host's address `.1/24` on a subnet of 10.200.0.0/13 chosen
    /// from the process id and a counter.
    pub fn new() -> Bed {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("{:x}{n}", pid % 0xfffff);
        let slot = (pid.wrapping_mul(31).wrapping_add(n)) % 2048;
        let net = [10, 200 + (slot / 256) as u8, (slot % 256) as u8];
        let bridge = format!("cb{tag}");
        let bed = Bed {
            tag,
            bridge,
            net,
            nodes: Vec::new(),
        };
        must(&[
            "ip",
            "link",
            "add",
            &bed.bridge,
            "type",
            "bridge",
            "nf_call_iptables",
            "0",
        ]);
        must(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", bed.host_ip()),
            "dev",
            &bed.bridge,
        ]);
        must(&["ip", "link", "set", &bed.bridge, "up"]);
        bed
    }

    /// The host's address on the bridge (where a control plane listening on 0.0.0.0 is
    /// reached from the nodes).
    pub fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.net[0], self.net[1], self.net[2], 1)
    }

    /// The subnet, `A.B.C.0/24`.
    pub fn subnet(&self) -> String {
        format!("{}.{}.{}.0/24", self.net[0], self.net[1], self.net[2])
    }

    /// Add a node: a network namespace with `eth0` on the bridge (address `.10 + index`),
    /// loopback up, a default route through the host, and IP forwarding on.
    pub fn node(&mut self) -> NodeNs {
        let ip = Ipv4Addr::new(
            self.net[0],
            self.net[1],
            self.net[2],
            10 + self.nodes.len() as u8,
        );
        let (ns, host_end) = self.new_namespace("cv");
        must(&["ip", "link", "set", &host_end, "master", &self.bridge, "up"]);
        configure(&ns, ip, self.host_ip());
        NodeNs { name: ns, ip }
    }

    /// A new namespace for the next node, with a veth pair whose `eth0` end is inside; returns
    /// the namespace and the host end's name (`<prefix><tag>-<index>`).
    fn new_namespace(&mut self, host_prefix: &str) -> (String, String) {
        let index = self.nodes.len();
        let ns = format!("cn{}-{index}", self.tag);
        let host_end = format!("{host_prefix}{}-{index}", self.tag);
        must(&["ip", "netns", "add", &ns]);
        self.nodes.push(ns.clone());
        must(&[
            "ip", "link", "add", &host_end, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ]);
        (ns, host_end)
    }

    /// Add a node on a network of its own, behind the host as its router — a machine in
    /// another subnet, which the other nodes reach through routes, not on their segment: a
    /// network namespace with `eth0` (`.10/24` of a /24 next to the bridge's, in 10.208.0.0/13)
    /// linked to the host by a veth pair whose host end has `.1`; a default route through the
    /// host, and IP forwarding on in both.
    pub fn routed_node(&mut self) -> NodeNs {
        let (ns, host_end) = self.new_namespace("cr");
        let net = [self.net[0], self.net[1] + 8, self.net[2]];
        let gateway = Ipv4Addr::new(net[0], net[1], net[2], 1);
        let ip = Ipv4Addr::new(net[0], net[1], net[2], 10);
        must(&[
            "ip",
            "addr",
            "add",
            &format!("{gateway}/24"),
            "dev",
            &host_end,
        ]);
        must(&["ip", "link", "set", &host_end, "up"]);
        must(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        configure(&ns, ip, gateway);
        NodeNs { name: ns, ip }
    }
}

/// Inside node namespace `ns`: loopback up, `eth0` with `ip/24` and up, a default route
/// through `gateway`, IP forwarding on.
fn configure(ns: &str, ip: Ipv4Addr, gateway: Ipv4Addr) {
    let inside = |args: &[&str]| {
        let mut full = vec!["ip", "netns", "exec", ns];
        full.extend(args);
        must(&full);
    };
    inside(&["ip", "link", "set", "lo", "up"]);
    inside(&["ip", "addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
    inside(&["ip", "link", "set", "eth0", "up"]);
    inside(&["ip", "route", "add", "default", "via", &gateway.to_string()]);
    inside(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
}

impl Default for Bed {
    fn default() -> Self {
        Bed::new()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for ns in &self.nodes {
            // Whatever still runs in the namespace keeps it alive: kill it first.
            if let Ok(out) = run(&["ip", "netns", "pids", ns]) {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = run(&["kill", "-9", pid]);
                }
            }
            let _ = run(&["ip", "netns", "del", ns]);
        }
        let _ = run(&["ip", "link", "del", &self.bridge]);
    }
}

/// One node's network namespace.
#[derive(Clone, Debug)]
pub struct NodeNs {
    pub name: String,
    pub ip: Ipv4Addr,
}

impl NodeNs {
    /// A command run inside the namespace. It enters only the network namespace
    /// (`nsenter --net`): `ip netns exec` would also give it a mount namespace with a fresh
    /// /sys, hiding the cgroup mounts that runc needs.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.name))
            .arg("--")
            .arg(program);
        c
    }

    /// Run a command inside the namespace; its stdout, or stderr as the error.
    pub fn exec(&self, args: &[&str]) -> Result<String, String> {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend(args);
        run(&full).map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    }
}
