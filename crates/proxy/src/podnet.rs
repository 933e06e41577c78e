//! The pod network between nodes, as flannel does it: every node's pod CIDR is routed through
//! that node. With `host-gw` (flannel's backend of that name) the route goes through the node's
//! address, which works when the nodes share one L2 segment (their InternalIPs are on a
//! directly connected network); other nodes are logged and skipped. With `vxlan` (flannel's
//! VXLAN backend with `DirectRouting`), nodes on a connected network get the same direct routes
//! and the others are reached through a VXLAN overlay:
//!
//! - one device, `capstan.1` (VNI 1, UDP port 8472 as flannel, no learning), created when the
//!   first such node appears and deleted when the last goes; its address is the network address
//!   of this node's pod CIDR (`10.244.1.0/32`) and its MAC is derived from the node's address
//!   (`0a:58:` and the four bytes), so no node needs to publish anything;
//! - per remote node: the route `<podCIDR> via <its VTEP address> dev capstan.1 onlink`, a
//!   permanent neighbour entry (VTEP address → MAC) and a forwarding entry (MAC → node address).
//!
//! VXLAN adds 50 bytes: the device's MTU is its underlay's less 50, and larger packets from pods
//! are refused with ICMP "fragmentation needed" (path MTU discovery).
//!
//! Routes are installed with `ip route replace ... proto 77` so capstan can tell its own routes
//! from others': on start the ones no longer wanted are removed, on a clean stop all of them (and
//! the VXLAN device). With `--cluster-cidr`, traffic between pods also leaves without source NAT:
//! one rule at the top of nat POSTROUTING returns before the CNI bridge plugin's masquerade
//! (which would otherwise rewrite pod-to-pod traffic to other nodes), except for packets the
//! service proxy marked for masquerading.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use capstan_runtime::Informers;
use k8s_openapi::api::core::v1::Node;

use crate::cidr::Cidr;

/// The `proto` number of capstan's routes.
pub const ROUTE_PROTO: &str = "77";
const NO_NAT_COMMENT: &str = "capstan: pod to pod without NAT";
/// The VXLAN device (flannel's is `flannel.1`).
pub const VXLAN_DEVICE: &str = "capstan.1";
const VXLAN_VNI: &str = "1";
/// flannel's port (Linux's own default, 8472, rather than IANA's 4789).
const VXLAN_PORT: &str = "8472";
/// The prefix of capstan's VTEP MACs (locally administered, unicast).
const VTEP_MAC_PREFIX: &str = "0a:58:";

/// How other nodes' pods are reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Routes through the nodes' addresses; nodes not on a connected network are skipped.
    HostGw,
    /// Routes through the nodes' addresses where they are on a connected network, a VXLAN
    /// overlay to the others.
    #[default]
    Vxlan,
}

/// A node's end of the overlay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vtep {
    /// The node's address, where the encapsulated packets go.
    pub node_ip: Ipv4Addr,
    /// The network address of its pod CIDR: the VXLAN device's address.
    pub addr: Ipv4Addr,
    pub mac: String,
}

impl Vtep {
    /// The VTEP of a node with this address and (IPv4) pod CIDR.
    pub fn of(node_ip: Ipv4Addr, pod_cidr: &str) -> Option<Vtep> {
        let cidr = Cidr::parse(pod_cidr)?;
        let [a, b, c, d] = node_ip.octets();
        Some(Vtep {
            node_ip,
            addr: cidr.addr,
            mac: format!("{VTEP_MAC_PREFIX}{a:02x}:{b:02x}:{c:02x}:{d:02x}"),
        })
    }
}

/// Options of the pod network.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// This node (its own pod CIDR is local, on the CNI bridge).
    pub node_name: String,
    /// The cluster's pod CIDR: pod-to-pod traffic within it is not masqueraded.
    pub cluster_cidr: Option<String>,
    /// Run `ip`/`iptables` inside this network namespace (tests).
    pub netns: Option<String>,
    pub mode: Mode,
}

/// Routes wanted: pod CIDR → the node address it is reached through.
pub fn desired_routes(nodes: &[Arc<Node>], me: &str) -> BTreeMap<String, IpAddr> {
    let mut routes = BTreeMap::new();
    for node in nodes {
        if node.metadata.name.as_deref() == Some(me) {
            continue;
        }
        let Some(spec) = &node.spec else { continue };
        let Some(ip) = internal_ip(node) else {
            continue;
        };
        let mut cidrs: Vec<&String> = spec.pod_cidrs.iter().flatten().collect();
        if cidrs.is_empty() {
            cidrs.extend(spec.pod_cidr.iter());
        }
        for cidr in cidrs {
            // Only the family of the node's address can be routed through it.
            if cidr.contains(':') == ip.is_ipv6() {
                routes.insert(cidr.clone(), ip);
            }
        }
    }
    routes
}

/// This node's VTEP: its InternalIP (IPv4) and IPv4 pod CIDR, once it has both.
pub fn local_vtep(nodes: &[Arc<Node>], me: &str) -> Option<Vtep> {
    let node = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(me))?;
    let IpAddr::V4(ip) = internal_ip(node)? else {
        return None;
    };
    let spec = node.spec.as_ref()?;
    let cidr = spec
        .pod_cidrs
        .iter()
        .flatten()
        .chain(spec.pod_cidr.iter())
        .find(|c| !c.contains(':'))?;
    Vtep::of(ip, cidr)
}

fn internal_ip(node: &Node) -> Option<IpAddr> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .and_then(|a| a.address.parse().ok())
}

/// Keeps the routes to other nodes' pod CIDRs, until `shutdown`; then removes them.
pub async fn run(
    client: kube::Client,
    opts: Options,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let informers = Informers::new(client);
    let nodes = informers.get::<Node>();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    nodes.on_change(move |_| {
        let _ = tx.try_send(());
    });
    informers.start();
    nodes.wait_synced().await;
    let host = Host {
        netns: opts.netns.clone(),
    };
    if let Some(cidr) = &opts.cluster_cidr {
        host.ensure_no_nat(cidr)
            .context("installing the pod-to-pod no-NAT rule")?;
    }
    let mut applied = None;
    let mut first = true;
    tokio::pin!(shutdown);
    loop {
        let all = nodes.list();
        let wanted = (
            desired_routes(&all, &opts.node_name),
            local_vtep(&all, &opts.node_name),
        );
        if first || applied.as_ref() != Some(&wanted) {
            match host.sync(&wanted.0, wanted.1.as_ref(), opts.mode) {
                Ok(()) => {
                    applied = Some(wanted);
                    first = false;
                }
                Err(e) => tracing::warn!("pod network routes: {e:#}"),
            }
        }
        tokio::select! {
            _ = &mut shutdown => break,
            _ = rx.recv() => {}
            // Retry failures and repair routes someone removed.
            _ = tokio::time::sleep(Duration::from_secs(30)) => { first = true; }
        }
    }
    host.cleanup(opts.cluster_cidr.as_deref());
    Ok(())
}

struct Host {
    netns: Option<String>,
}

impl Host {
    fn command(&self, program: &str) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            None => Command::new(program),
        }
    }

    fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .command(program)
            .args(args)
            .output()
            .with_context(|| format!("running {program}"))?;
        if !out.status.success() {
            anyhow::bail!(
                "{program} {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether `ip` is on a network this host is directly connected to (its route has no
    /// gateway).
    fn connected(&self, ip: IpAddr) -> anyhow::Result<bool> {
        let family = if ip.is_ipv6() { "-6" } else { "-4" };
        let route = self.run("ip", &[family, "route", "get", &ip.to_string()])?;
        Ok(!route.split_whitespace().any(|w| w == "via"))
    }

    /// Make capstan's routes exactly `wanted` (other nodes' pod CIDRs → their addresses),
    /// through the overlay for the nodes that aren't on a connected network when `mode` is
    /// VXLAN; remove any other route of capstan's (also stale ones a previous run left), and
    /// the VXLAN device when no node needs it.
    fn sync(
        &self,
        wanted: &BTreeMap<String, IpAddr>,
        local: Option<&Vtep>,
        mode: Mode,
    ) -> anyhow::Result<()> {
        let mut errors = Vec::new();
        let mut overlay: BTreeMap<&str, Vtep> = BTreeMap::new();
        for (cidr, via) in wanted {
            let family = if via.is_ipv6() { "-6" } else { "-4" };
            if let (Mode::Vxlan, IpAddr::V4(node_ip)) = (mode, via) {
                match self.connected(*via) {
                    Ok(true) => {}
                    Ok(false) => {
                        match Vtep::of(*node_ip, cidr) {
                            Some(peer) => {
                                overlay.insert(cidr, peer);
                            }
                            None => errors.push(format!("{cidr} is not an IPv4 CIDR")),
                        }
                        continue;
                    }
                    Err(e) => {
                        errors.push(format!("{e:#}"));
                        continue;
                    }
                }
            }
            let via = via.to_string();
            if let Err(e) = self.run(
                "ip",
                &[
                    family,
                    "route",
                    "replace",
                    cidr,
                    "via",
                    &via,
                    "proto",
                    ROUTE_PROTO,
                ],
            ) {
                // host-gw: a node that isn't on a connected network needs an overlay.
                errors.push(format!("{e:#}"));
            }
        }
        if !overlay.is_empty() {
            match local {
                Some(local) => {
                    if let Err(e) = self.overlay(local, &overlay) {
                        errors.push(format!("the VXLAN overlay: {e:#}"));
                    }
                }
                None => errors.push(
                    "the VXLAN overlay waits for this node's InternalIP and IPv4 pod CIDR".into(),
                ),
            }
        }
        for family in ["-4", "-6"] {
            let listed = self.run("ip", &[family, "route", "show", "proto", ROUTE_PROTO])?;
            for line in listed.lines() {
                let Some(dst) = line.split_whitespace().next() else {
                    continue;
                };
                if !wanted.contains_key(dst) {
                    let _ = self.run("ip", &[family, "route", "del", dst, "proto", ROUTE_PROTO]);
                }
            }
        }
        if overlay.is_empty() && self.has_vxlan_device() {
            let _ = self.run("ip", &["link", "del", VXLAN_DEVICE]);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            anyhow::bail!("{}", errors.join("; "))
        }
    }

    fn has_vxlan_device(&self) -> bool {
        self.run("ip", &["link", "show", VXLAN_DEVICE]).is_ok()
    }

    /// The VXLAN device for `local`, and the route, neighbour and forwarding entry of each
    /// remote node in `peers` (pod CIDR → its VTEP); entries of nodes gone are removed.
    fn overlay(&self, local: &Vtep, peers: &BTreeMap<&str, Vtep>) -> anyhow::Result<()> {
        let local_ip = local.node_ip.to_string();
        // A device made for another address or MAC (the node's address changed) is remade.
        let usable = match self.run("ip", &["-d", "link", "show", VXLAN_DEVICE]) {
            Err(_) => false,
            Ok(shown) => {
                let words: Vec<&str> = shown.split_whitespace().collect();
                let same = words.windows(2).any(|w| w == ["local", local_ip.as_str()])
                    && words
                        .windows(2)
                        .any(|w| w == ["link/ether", local.mac.as_str()]);
                if !same {
                    self.run("ip", &["link", "del", VXLAN_DEVICE])?;
                }
                same
            }
        };
        if !usable {
            let mut add = vec![
                "link",
                "add",
                VXLAN_DEVICE,
                "address",
                &local.mac,
                "type",
                "vxlan",
                "id",
                VXLAN_VNI,
                "local",
                &local_ip,
                "dstport",
                VXLAN_PORT,
                "nolearning",
            ];
            // On the interface that has the node's address: the MTU follows it, less 50.
            let shown = self.run("ip", &["-o", "-4", "addr", "show", "to", &local_ip])?;
            let underlay = shown.split_whitespace().nth(1).map(str::to_string);
            if let Some(dev) = &underlay {
                add.extend(["dev", dev]);
            }
            self.run("ip", &add)?;
        }
        let addr = format!("{}/32", local.addr);
        self.run("ip", &["addr", "replace", &addr, "dev", VXLAN_DEVICE])?;
        self.run("ip", &["link", "set", VXLAN_DEVICE, "up"])?;
        for (cidr, peer) in peers {
            let (vtep, node_ip) = (peer.addr.to_string(), peer.node_ip.to_string());
            self.run(
                "ip",
                &[
                    "neigh",
                    "replace",
                    &vtep,
                    "lladdr",
                    &peer.mac,
                    "dev",
                    VXLAN_DEVICE,
                    "nud",
                    "permanent",
                ],
            )?;
            self.run(
                "bridge",
                &[
                    "fdb",
                    "replace",
                    &peer.mac,
                    "dev",
                    VXLAN_DEVICE,
                    "dst",
                    &node_ip,
                    "self",
                    "permanent",
                ],
            )?;
            self.run(
                "ip",
                &[
                    "-4",
                    "route",
                    "replace",
                    cidr,
                    "via",
                    &vtep,
                    "dev",
                    VXLAN_DEVICE,
                    "onlink",
                    "proto",
                    ROUTE_PROTO,
                ],
            )?;
        }
        // Nodes gone: their neighbour and forwarding entries.
        let neighbours = self.run("ip", &["-4", "neigh", "show", "dev", VXLAN_DEVICE])?;
        for line in neighbours.lines() {
            let Some(ip) = line.split_whitespace().next() else {
                continue;
            };
            if !peers.values().any(|p| p.addr.to_string() == ip) {
                let _ = self.run("ip", &["neigh", "del", ip, "dev", VXLAN_DEVICE]);
            }
        }
        let fdb = self.run("bridge", &["fdb", "show", "dev", VXLAN_DEVICE])?;
        for line in fdb.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(mac) = words.first() else { continue };
            if mac.starts_with(VTEP_MAC_PREFIX) && !peers.values().any(|p| p.mac == *mac) {
                let mut del = vec!["fdb", "del", mac, "dev", VXLAN_DEVICE];
                if let Some(i) = words.iter().position(|w| *w == "dst") {
                    if let Some(dst) = words.get(i + 1) {
                        del.extend(["dst", dst]);
                    }
                }
                let _ = self.run("bridge", &del);
            }
        }
        Ok(())
    }

    fn no_nat_rule(cidr: &str) -> Vec<&str> {
        vec![
            "POSTROUTING",
            "-s",
            cidr,
            "-d",
            cidr,
            "-m",
            "mark",
            "!",
            "--mark",
            "0x4000/0x4000",
            "-m",
            "comment",
            "--comment",
            NO_NAT_COMMENT,
            "-j",
            "RETURN",
        ]
    }

    fn ensure_no_nat(&self, cidr: &str) -> anyhow::Result<()> {
        let rule = Self::no_nat_rule(cidr);
        let mut check = vec!["-w", "-t", "nat", "-C"];
        check.extend(&rule);
        if self.run("iptables", &check).is_ok() {
            return Ok(());
        }
        let mut insert = vec!["-w", "-t", "nat", "-I"];
        insert.push(rule[0]);
        insert.push("1");
        insert.extend(&rule[1..]);
        self.run("iptables", &insert).map(|_| ())
    }

    fn cleanup(&self, cluster_cidr: Option<&str>) {
        if let Err(e) = self.sync(&BTreeMap::new(), None, Mode::HostGw) {
            tracing::warn!("removing the pod network routes: {e:#}");
        }
        if let Some(cidr) = cluster_cidr {
            let mut delete = vec!["-w", "-t", "nat", "-D"];
            delete.extend(Self::no_nat_rule(cidr));
            let _ = self.run("iptables", &delete);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cidr: Option<&str>, ip: Option<&str>) -> Arc<Node> {
        let mut v = serde_json::json!({"metadata": {"name": name}, "spec": {}, "status": {}});
        if let Some(c) = cidr {
            v["spec"]["podCIDR"] = c.into();
            v["spec"]["podCIDRs"] = serde_json::json!([c]);
        }
        if let Some(ip) = ip {
            v["status"]["addresses"] = serde_json::json!([
                {"type": "Hostname", "address": name},
                {"type": "InternalIP", "address": ip},
            ]);
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn routes_go_to_every_other_node_with_a_cidr_and_an_address() {
        let nodes = vec![
            node("a", Some("10.244.0.0/24"), Some("10.0.0.1")),
            node("b", Some("10.244.1.0/24"), Some("10.0.0.2")),
            node("c", None, Some("10.0.0.3")),
            node("d", Some("10.244.3.0/24"), None),
            node("e", Some("fd00::/64"), Some("10.0.0.5")),
        ];
        let routes = desired_routes(&nodes, "a");
        assert_eq!(
            routes.into_iter().collect::<Vec<_>>(),
            vec![("10.244.1.0/24".to_string(), "10.0.0.2".parse().unwrap())]
        );
    }

    #[test]
    fn a_vtep_is_the_pod_cidrs_network_address_and_a_mac_from_the_node_address() {
        let v = Vtep::of("192.168.10.7".parse().unwrap(), "10.244.5.0/24").unwrap();
        assert_eq!(v.addr, "10.244.5.0".parse::<Ipv4Addr>().unwrap());
        assert_eq!(v.mac, "0a:58:c0:a8:0a:07");
        // A CIDR written with host bits still gives its network address.
        let v = Vtep::of("10.0.0.1".parse().unwrap(), "10.244.5.9/23").unwrap();
        assert_eq!(v.addr, "10.244.4.0".parse::<Ipv4Addr>().unwrap());
        assert!(Vtep::of("10.0.0.1".parse().unwrap(), "fd00::/64").is_none());
        assert!(Vtep::of("10.0.0.1".parse().unwrap(), "10.244.0.0/33").is_none());

        let nodes = vec![
            node("a", Some("10.244.0.0/24"), Some("10.0.0.1")),
            node("b", Some("10.244.1.0/24"), None),
        ];
        assert_eq!(
            local_vtep(&nodes, "a"),
            Vtep::of("10.0.0.1".parse().unwrap(), "10.244.0.0/24")
        );
        assert_eq!(local_vtep(&nodes, "b"), None);
        assert_eq!(local_vtep(&nodes, "z"), None);
    }
}

/// On the kernel, in network namespaces: nodes on two segments joined by a router.
#[cfg(test)]
mod kernel_tests {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::time::Instant;

    use super::*;
    use crate::netns::NetNs;

    fn host(ns: &NetNs) -> Host {
        Host {
            netns: Some(ns.name().to_string()),
        }
    }

    fn get(ns: &NetNs, addr: &str) -> std::io::Result<String> {
        let addr: SocketAddr = addr.parse().expect("address");
        ns.run(move || {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        })
        .expect("entering the namespace")
    }

    #[test]
    fn kernel_vxlan_reaches_a_node_behind_a_router_and_routes_a_neighbour_directly() {
        // a (172.31.1.2) — router — b (172.31.2.2); each node's "pod" address on lo.
        let a = NetNs::new("cpvx-a").expect("namespace");
        let router = NetNs::new("cpvx-r").expect("namespace");
        let b = NetNs::new("cpvx-b").expect("namespace");
        a.pair_with(&router, "172.31.1.2/24", "172.31.1.1/24")
            .expect("veth");
        b.pair_with(&router, "172.31.2.2/24", "172.31.2.1/24")
            .expect("veth");
        router.sysctl("net.ipv4.ip_forward", "1").expect("sysctl");
        a.exec(&["ip", "route", "add", "default", "via", "172.31.1.1"])
            .expect("route");
        b.exec(&["ip", "route", "add", "default", "via", "172.31.2.1"])
            .expect("route");
        a.add_addresses(&["10.250.1.1/32"]).expect("address");
        b.add_addresses(&["10.250.2.1/32"]).expect("address");
        let docroot = tempfile::tempdir().expect("docroot");
        std::fs::write(docroot.path().join("index.html"), "pod on b\n").expect("index");
        let _server = b
            .spawn(&[
                "/bin/busybox",
                "httpd",
                "-f",
                "-p",
                "10.250.2.1:8080",
                "-h",
                &docroot.path().to_string_lossy(),
            ])
            .expect("httpd");

        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let vtep_a = Vtep::of("172.31.1.2".parse().unwrap(), "10.250.1.0/24").unwrap();
        let vtep_b = Vtep::of("172.31.2.2".parse().unwrap(), "10.250.2.0/24").unwrap();
        // a also knows a node on its own segment (the router's address stands in for it).
        let for_a = BTreeMap::from([
            ("10.250.2.0/24".to_string(), ip("172.31.2.2")),
            ("10.250.3.0/24".to_string(), ip("172.31.1.1")),
        ]);
        let for_b = BTreeMap::from([("10.250.1.0/24".to_string(), ip("172.31.1.2"))]);

        // host-gw can't route to a node behind a router.
        assert!(host(&a).sync(&for_a, Some(&vtep_a), Mode::HostGw).is_err());

        host(&a)
            .sync(&for_a, Some(&vtep_a), Mode::Vxlan)
            .expect("a synced");
        host(&b)
            .sync(&for_b, Some(&vtep_b), Mode::Vxlan)
            .expect("b synced");
        let routes = a
            .exec(&["ip", "-4", "route", "show", "proto", "77"])
            .unwrap();
        assert!(
            routes.contains("10.250.2.0/24 via 10.250.2.0 dev capstan.1 onlink"),
            "{routes}"
        );
        assert!(
            routes.contains("10.250.3.0/24 via 172.31.1.1 dev veth"),
            "{routes}"
        );
        let link = a.exec(&["ip", "-d", "link", "show", VXLAN_DEVICE]).unwrap();
        assert!(link.contains("vxlan id 1 local 172.31.1.2"), "{link}");
        assert!(link.contains("link/ether 0a:58:ac:1f:01:02"), "{link}");
        assert!(link.contains("mtu 1450"), "{link}");

        // a's host reaches the pod address on b through the overlay (and the answer comes
        // back through it: b has no other route to a's pod CIDR).
        let deadline = Instant::now() + Duration::from_secs(10);
        let body = loop {
            match get(&a, "10.250.2.1:8080") {
                Ok(body) => break body,
                Err(e) if Instant::now() > deadline => panic!("through the overlay: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        assert!(body.contains("pod on b"), "{body}");

        // Syncing again changes nothing and still works; b leaving removes its entries and,
        // the last overlay peer gone, the device.
        host(&a)
            .sync(&for_a, Some(&vtep_a), Mode::Vxlan)
            .expect("a synced again");
        let neigh = a
            .exec(&["ip", "neigh", "show", "dev", VXLAN_DEVICE])
            .unwrap();
        assert!(
            neigh.contains("10.250.2.0 lladdr 0a:58:ac:1f:02:02 PERMANENT"),
            "{neigh}"
        );
        let fdb = a
            .exec(&["bridge", "fdb", "show", "dev", VXLAN_DEVICE])
            .unwrap();
        assert!(fdb.contains("0a:58:ac:1f:02:02 dst 172.31.2.2"), "{fdb}");
        let only_c = BTreeMap::from([("10.250.3.0/24".to_string(), ip("172.31.1.1"))]);
        host(&a)
            .sync(&only_c, Some(&vtep_a), Mode::Vxlan)
            .expect("a synced without b");
        assert!(a.exec(&["ip", "link", "show", VXLAN_DEVICE]).is_err());
        let routes = a
            .exec(&["ip", "-4", "route", "show", "proto", "77"])
            .unwrap();
        assert!(!routes.contains("10.250.2.0"), "{routes}");

        // A clean stop removes everything.
        host(&b).cleanup(None);
        assert!(b.exec(&["ip", "link", "show", VXLAN_DEVICE]).is_err());
        let routes = b
            .exec(&["ip", "-4", "route", "show", "proto", "77"])
            .unwrap();
        assert!(routes.trim().is_empty(), "{routes}");
    }
}
