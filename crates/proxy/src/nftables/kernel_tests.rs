//! The nftables proxier against the kernel, in fresh network namespaces (needs root): a
//! "node" namespace where the rules go and clients run, and a "backends" namespace behind a
//! veth pair where `busybox httpd` serves on three addresses. Everything is named after the
//! process and a counter and removed on drop, even when a test fails.

use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::netns::{NetNs, NsProcess};
use crate::Protocol;

#[track_caller]
fn must<T>(what: &str, r: anyhow::Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e:#}"))
}

fn list_table(ns: &NetNs) -> anyhow::Result<String> {
    ns.exec(&["nft", "list", "table", "ip", TABLE])
}

/// The node, and three HTTP backends at 172.30.0.{2,3,4}:8080 answering `b2`, `b3`, `b4`.
/// The node is 172.30.0.1 and routes everything else (ClusterIPs) towards the backends'
/// namespace.
struct TestNet {
    // Fields drop in order: servers are killed before their namespace goes.
    servers: Vec<NsProcess>,
    _docroots: Vec<tempfile::TempDir>,
    node: NetNs,
    backends: NetNs,
}

const NODE_IP: &str = "172.30.0.1";
const BACKENDS: [&str; 3] = ["172.30.0.2", "172.30.0.3", "172.30.0.4"];

impl TestNet {
    fn new() -> TestNet {
        let node = must("node namespace", NetNs::new("cpn4-node"));
        let backends = must("backends namespace", NetNs::new("cpn4-be"));
        let (_, there) = must(
            "veth pair",
            node.pair_with(&backends, "172.30.0.1/24", "172.30.0.2/24"),
        );
        for ip in &BACKENDS[1..] {
            must(
                "backend address",
                backends.exec(&["ip", "addr", "add", &format!("{ip}/24"), "dev", &there]),
            );
        }
        must(
            "node route",
            node.exec(&["ip", "route", "add", "default", "via", "172.30.0.2"]),
        );
        must(
            "backends route",
            backends.exec(&["ip", "route", "add", "default", "via", NODE_IP]),
        );
        // The node forwards NodePort traffic back out of the interface it came in on.
        must("ip_forward", node.sysctl("net.ipv4.ip_forward", "1"));
        must(
            "send_redirects",
            node.sysctl("net.ipv4.conf.all.send_redirects", "0"),
        );

        let mut net = TestNet {
            servers: Vec::new(),
            _docroots: Vec::new(),
            node,
            backends,
        };
        for ip in BACKENDS {
            let dir = tempfile::tempdir().expect("docroot");
            let name = format!("b{}", ip.rsplit('.').next().unwrap_or("?"));
            std::fs::write(dir.path().join("index.html"), format!("{name}\n")).expect("index");
            let docroot = dir.path().to_string_lossy().into_owned();
            let listen = format!("{ip}:8080");
            let server = must(
                "busybox httpd",
                net.backends
                    .spawn(&["/bin/busybox", "httpd", "-f", "-p", &listen, "-h", &docroot]),
            );
            net.servers.push(server);
            net._docroots.push(dir);
        }
        // Up when each answers directly.
        for ip in BACKENDS {
            let addr: SocketAddr = format!("{ip}:8080").parse().expect("addr");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match must("entering the node", net.node.run(|| http_get(addr))) {
                    Ok(_) => break,
                    Err(e) if Instant::now() > deadline => panic!("backend {addr}: {e}"),
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        net
    }

    fn node_info(&self) -> NodeInfo {
        NodeInfo {
            name: "n1".into(),
            ips: vec![NODE_IP.parse().expect("ip")],
            cluster_cidr: None,
        }
    }

    /// GET / through `addr` from the node's namespace.
    fn get(&self, addr: &str) -> io::Result<String> {
        let addr: SocketAddr = addr.parse().expect("test address");
        must("entering the node", self.node.run(|| http_get(addr)))
    }

    /// GET / through `addr` from the backends' namespace (outside the node).
    fn get_from_outside(&self, addr: &str) -> io::Result<String> {
        let addr: SocketAddr = addr.parse().expect("test address");
        must(
            "entering the backends",
            self.backends.run(|| http_get(addr)),
        )
    }
}

/// An HTTP/1.0 GET of `/`; the body, trimmed.
fn http_get(addr: SocketAddr) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    stream.set_read_timeout(Some(Duration::from_secs(3)))?;
    stream.write_all(b"GET / HTTP/1.0\r\nHost: test\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    match response.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => {
            Ok(body.trim().to_string())
        }
        _ => Err(io::Error::other(format!(
            "unexpected response {response:?}"
        ))),
    }
}

fn port_name(name: &str) -> ServicePortName {
    ServicePortName {
        namespace: "default".into(),
        name: name.into(),
        port: "http".into(),
        protocol: Protocol::Tcp,
    }
}

fn service(name: &str, cluster_ip: &str, port: u16) -> ServicePort {
    ServicePort {
        name: port_name(name),
        cluster_ips: vec![cluster_ip.parse().expect("ip")],
        port,
        node_port: None,
        external_ips: vec![],
        load_balancer_ips: vec![],
        load_balancer_source_ranges: vec![],
        session_affinity_seconds: None,
        external_policy_local: false,
        internal_policy_local: false,
        health_check_node_port: None,
    }
}

fn backends(ips: &[&str], node: &str) -> Vec<Endpoint> {
    ips.iter()
        .map(|ip| Endpoint {
            ip: ip.parse().expect("ip"),
            port: 8080,
            ready: true,
            serving: true,
            terminating: false,
            node_name: Some(node.into()),
        })
        .collect()
}

fn snapshot(entries: Vec<(ServicePort, Vec<Endpoint>)>) -> Snapshot {
    let mut snap = Snapshot::default();
    for (svc, eps) in entries {
        snap.endpoints.insert(svc.name.clone(), Arc::new(eps));
        snap.services.insert(svc.name.clone(), Arc::new(svc));
    }
    snap
}

/// GETs `addr` until every one of `want` answered (at most `tries` times); what answered.
fn reach_all(net: &TestNet, addr: &str, want: &[&str], tries: usize) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for _ in 0..tries {
        let body = net.get(addr).unwrap_or_else(|e| panic!("GET {addr}: {e}"));
        seen.insert(body);
        if want.iter().all(|w| seen.contains(*w)) {
            break;
        }
    }
    seen
}

#[test]
fn kernel_cluster_ip_node_port_no_endpoints_and_endpoint_removal() {
    let net = TestNet::new();
    let mut web = service("web", "10.96.0.10", 80);
    web.node_port = Some(30080);
    let empty = service("empty", "10.96.0.11", 80);
    let mut proxier = NftablesProxier::new(net.node_info())
        .expect("nft available")
        .in_netns(net.node.name());
    proxier
        .sync(&snapshot(vec![
            (web.clone(), backends(&BACKENDS, "n2")),
            (empty.clone(), vec![]),
        ]))
        .expect("first sync");
    assert!(proxier.last_sync().full);

    let table = list_table(&net.node).expect("table listed");
    let web_chain = format!("service-{}", rules::service_chain_base(&port_name("web")));
    assert!(table.contains("map service-ips"), "{table}");
    assert!(table.contains(&format!("chain {web_chain}")), "{table}");

    // The ClusterIP reaches every backend.
    let seen = reach_all(&net, "10.96.0.10:80", &["b2", "b3", "b4"], 60);
    assert_eq!(
        seen,
        BTreeSet::from(["b2".into(), "b3".into(), "b4".into()]),
        "backends reached in 60 connections"
    );

    // No endpoints, or a port the ClusterIP doesn't serve: refused at once.
    for addr in ["10.96.0.11:80", "10.96.0.10:81"] {
        let start = Instant::now();
        let err = net.get(addr).expect_err("refused");
        assert_eq!(
            err.kind(),
            io::ErrorKind::ConnectionRefused,
            "{addr}: {err}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{addr} refused after {:?}",
            start.elapsed()
        );
    }

    // The NodePort, from outside the node: DNAT in prerouting, forwarded, masqueraded
    // (without masquerading the backend would answer the client directly and the
    // connection would never complete).
    for _ in 0..6 {
        let body = net
            .get_from_outside(&format!("{NODE_IP}:30080"))
            .unwrap_or_else(|e| panic!("NodePort from outside: {e}"));
        assert!(["b2", "b3", "b4"].contains(&body.as_str()), "{body}");
    }

    // The ClusterIP from outside the node (routed through it): masqueraded too, by the one
    // rule over the cluster-ips set (else the backend would answer the client directly).
    for _ in 0..6 {
        let body = net
            .get_from_outside("10.96.0.10:80")
            .unwrap_or_else(|e| panic!("ClusterIP from outside: {e}"));
        assert!(["b2", "b3", "b4"].contains(&body.as_str()), "{body}");
    }

    // Removing an endpoint: no new connection reaches it.
    proxier
        .sync(&snapshot(vec![
            (web.clone(), backends(&BACKENDS[..2], "n2")),
            (empty, vec![]),
        ]))
        .expect("incremental sync");
    let stats = proxier.last_sync();
    assert!(!stats.full && stats.changed_services == 1, "{stats:?}");
    for _ in 0..30 {
        let body = net.get("10.96.0.10:80").expect("GET after removal");
        assert_ne!(body, "b4", "a removed endpoint got a new connection");
    }
    let table = list_table(&net.node).expect("table listed");
    assert!(!table.contains("172.30.0.4"), "{table}");
    let seen = reach_all(&net, "10.96.0.10:80", &["b2", "b3"], 40);
    assert_eq!(seen.len(), 2, "{seen:?}");

    // Cleanup removes the table.
    proxier.cleanup().expect("cleanup");
    assert!(list_table(&net.node).is_err(), "table still there");
    let tables = must("nft list tables", net.node.exec(&["nft", "list", "tables"]));
    assert!(!tables.contains(TABLE), "{tables}");
    // And again with nothing to delete.
    proxier.cleanup().expect("second cleanup");
}

#[test]
fn kernel_session_affinity_sticks_to_one_backend() {
    let net = TestNet::new();
    let mut sticky = service("sticky", "10.96.0.20", 80);
    sticky.session_affinity_seconds = Some(600);
    let mut proxier = NftablesProxier::new(net.node_info())
        .expect("nft available")
        .in_netns(net.node.name());
    proxier
        .sync(&snapshot(vec![(sticky, backends(&BACKENDS, "n2"))]))
        .expect("sync");
    let first = net.get("10.96.0.20:80").expect("first GET");
    for _ in 0..20 {
        assert_eq!(net.get("10.96.0.20:80").expect("GET"), first);
    }
    let table = list_table(&net.node).expect("table");
    assert!(table.contains("set affinity-"), "{table}");
    assert!(table.contains("timeout 10m"), "{table}");
}

/// The table as a comparable value: JSON objects without handles, set elements sorted,
/// rules numbered within their chain.
fn canonical_table(ns: &NetNs, skip_empty_service_chains: bool) -> Vec<String> {
    let text = must(
        "nft -j list table",
        ns.exec(&["nft", "-j", "list", "table", "ip", TABLE]),
    );
    let json: serde_json::Value = serde_json::from_str(&text).expect("nft JSON");
    let items = json["nftables"].as_array().expect("nftables array").clone();
    let mut rules_per_chain: std::collections::HashMap<String, usize> = Default::default();
    let mut out = Vec::new();
    for mut item in items {
        let Some(obj) = item.as_object_mut() else {
            continue;
        };
        if obj.contains_key("metainfo") {
            continue;
        }
        for (kind, body) in obj.iter_mut() {
            if let Some(body) = body.as_object_mut() {
                body.remove("handle");
                if let Some(elems) = body.get_mut("elem").and_then(|e| e.as_array_mut()) {
                    elems.sort_by_key(|e| e.to_string());
                }
                let mut key = kind.clone();
                if kind == "rule" {
                    let chain = body["chain"].as_str().unwrap_or_default().to_string();
                    let n = rules_per_chain.entry(chain.clone()).or_default();
                    key = format!("rule {chain} #{n}");
                    *n += 1;
                }
                out.push(format!("{key} {}", serde_json::Value::Object(body.clone())));
            }
        }
    }
    if skip_empty_service_chains {
        // Flushed chains waiting for deletion (kernels before 6.2).
        let used: BTreeSet<String> = rules_per_chain.keys().cloned().collect();
        out.retain(|line| {
            !(line.starts_with("chain ")
                && line.contains('/')
                && !used
                    .iter()
                    .any(|c| line.contains(&format!("\"name\":\"{c}\""))))
        });
    }
    out.sort();
    out
}

#[test]
fn kernel_incremental_syncs_end_where_a_full_sync_does() {
    let node = NodeInfo {
        name: "n1".into(),
        ips: vec!["192.168.7.1".parse::<IpAddr>().expect("ip")],
        cluster_cidr: Some("10.244.0.0/16".into()),
    };
    let mut a = service("a", "10.96.1.1", 80);
    a.node_port = Some(30001);
    let mut b = service("b", "10.96.1.2", 80);
    b.external_ips = vec!["192.0.2.2".parse().expect("ip")];
    b.external_policy_local = true;
    let c = service("c", "10.96.1.3", 80);
    let mut d = service("d", "10.96.1.4", 443);
    d.load_balancer_ips = vec!["203.0.113.4".parse().expect("ip")];
    d.load_balancer_source_ranges = vec!["198.51.100.0/24".into()];
    let eps3 = backends(&["10.244.1.2", "10.244.2.2", "10.244.3.2"], "n1");
    let remote = backends(&["10.244.2.7"], "n2");

    let states = {
        let mut sticky_a = a.clone();
        sticky_a.session_affinity_seconds = Some(300);
        let mut sticky_a2 = sticky_a.clone();
        sticky_a2.session_affinity_seconds = Some(900);
        vec![
            snapshot(vec![
                (a.clone(), eps3.clone()),
                (b.clone(), eps3[..1].to_vec()),
                (c.clone(), vec![]),
            ]),
            // a sticky and one endpoint fewer, b's local endpoint gone (drop verdicts),
            // c gets endpoints, d appears.
            snapshot(vec![
                (sticky_a.clone(), eps3[..2].to_vec()),
                (b.clone(), remote.clone()),
                (c.clone(), eps3.clone()),
                (d.clone(), remote.clone()),
            ]),
            // a's timeout changes, c goes, b empty (reject), d unchanged.
            snapshot(vec![
                (sticky_a2, eps3[1..].to_vec()),
                (b.clone(), vec![]),
                (d.clone(), remote.clone()),
            ]),
        ]
    };

    let incremental = must("namespace", NetNs::new("cpn4-inc"));
    let mut p = NftablesProxier::new(node.clone())
        .expect("nft")
        .in_netns(incremental.name());
    for (i, snap) in states.iter().enumerate() {
        p.sync(snap).unwrap_or_else(|e| panic!("sync {i}: {e:#}"));
        assert_eq!(p.last_sync().full, i == 0);
    }

    // A fresh proxier over a table an earlier run left (with other services in it).
    let fresh = must("namespace", NetNs::new("cpn4-full"));
    let mut previous = NftablesProxier::new(node.clone())
        .expect("nft")
        .in_netns(fresh.name());
    previous.sync(&states[1]).expect("previous run");
    let skip = !p.delete_chains_at_once;
    let left_behind = canonical_table(&fresh, skip);
    let mut q = NftablesProxier::new(node)
        .expect("nft")
        .in_netns(fresh.name());
    q.sync(&states[2]).expect("full sync");

    let got = canonical_table(&incremental, skip);
    let want = canonical_table(&fresh, skip);
    // The comparison means something: tables this size, and the previous run's differs.
    assert!(want.len() > 50, "{want:#?}");
    assert_ne!(left_behind, want);
    let only_got: Vec<&String> = got.iter().filter(|l| !want.contains(l)).collect();
    let only_want: Vec<&String> = want.iter().filter(|l| !got.contains(l)).collect();
    assert!(
        only_got.is_empty() && only_want.is_empty(),
        "incremental result differs from a full sync\nonly after incremental syncs:\n{}\nonly after the full sync:\n{}",
        only_got.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n"),
        only_want.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n"),
    );
    // And the result is what state 2 asks for.
    let table = list_table(&incremental).expect("table");
    assert!(table.contains("timeout 15m"), "{table}");
    assert!(!table.contains("10.96.1.3"), "{table}");
}

#[test]
fn kernel_large_services_switch_between_cascade_and_verdict_map() {
    let node = NodeInfo {
        name: "n1".into(),
        ips: vec!["192.168.8.1".parse::<IpAddr>().expect("ip")],
        cluster_cidr: Some("10.244.0.0/16".into()),
    };
    let big = rules::CASCADE_MAX_ENDPOINTS + 8;
    let ips: Vec<String> = (0..big).map(|i| format!("10.244.5.{}", i + 1)).collect();
    let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
    let svc = service("big", "10.96.2.1", 80);
    let ns = must("namespace", NetNs::new("cpn4-big"));
    let mut p = NftablesProxier::new(node).expect("nft").in_netns(ns.name());
    let chain = format!("service-{}", rules::service_chain_base(&port_name("big")));
    for (step, n) in [3, big, 2, big].into_iter().enumerate() {
        p.sync(&snapshot(vec![(svc.clone(), backends(&refs[..n], "n2"))]))
            .unwrap_or_else(|e| panic!("sync {step} ({n} endpoints): {e:#}"));
        let listed = must(
            "service chain",
            ns.exec(&["nft", "list", "chain", "ip", TABLE, &chain]),
        );
        let vmap = listed.contains(&format!("numgen random mod {n} vmap"));
        assert_eq!(vmap, n > rules::CASCADE_MAX_ENDPOINTS, "{listed}");
        // Every endpoint is reachable from the chain, once.
        let endpoint_refs = listed.matches("goto endpoint-").count();
        assert_eq!(endpoint_refs, n, "{listed}");
    }
}
