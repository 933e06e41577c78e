//! The iptables proxier for real, inside private network namespaces: a "node" namespace the
//! rules go into, linked by a veth pair to a "pods" namespace whose addresses serve as
//! endpoints. Needs root.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::rules;
use super::IptablesProxier;
use crate::netns::NetNs;
use crate::{Endpoint, NodeInfo, Protocol, Proxier, ServicePort, ServicePortName, Snapshot};

/// TCP servers on `ip:port` in a namespace, each answering every connection with its IP.
struct Backends {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Backends {
    fn start(ns: &NetNs, ips: &[&str], port: u16) -> Backends {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for ip in ips {
            let addr: SocketAddr = format!("{ip}:{port}").parse().unwrap();
            let listener = ns.run(move || TcpListener::bind(addr)).unwrap().unwrap();
            listener.set_nonblocking(true).unwrap();
            let stop = stop.clone();
            let reply = ip.to_string();
            threads.push(std::thread::spawn(move || loop {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        let _ = conn.set_nonblocking(false);
                        let _ = conn.write_all(reply.as_bytes());
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => return,
                }
            }));
        }
        Backends { stop, threads }
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Connect from inside `ns` and read what the server says.
fn fetch(ns: &NetNs, addr: &str) -> io::Result<String> {
    let addr: SocketAddr = addr.parse().unwrap();
    ns.run(move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    })
    .unwrap()
}

fn service(name: &str, ip: &str) -> ServicePort {
    ServicePort {
        name: ServicePortName {
            namespace: "default".into(),
            name: name.into(),
            port: "http".into(),
            protocol: Protocol::Tcp,
        },
        cluster_ips: vec![ip.parse().unwrap()],
        port: 80,
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

fn endpoints(ips: &[&str]) -> Vec<Endpoint> {
    ips.iter()
        .map(|ip| Endpoint {
            ip: ip.parse().unwrap(),
            port: 8080,
            ready: true,
            serving: true,
            terminating: false,
            node_name: Some("node-b".into()),
        })
        .collect()
}

fn snapshot(services: &[(&ServicePort, &[Endpoint])]) -> Snapshot {
    let mut s = Snapshot::default();
    for (svc, eps) in services {
        s.services
            .insert(svc.name.clone(), Arc::new((*svc).clone()));
        if !eps.is_empty() {
            s.endpoints.insert(svc.name.clone(), Arc::new(eps.to_vec()));
        }
    }
    s
}

fn save(ns: &NetNs) -> String {
    ns.exec(&["iptables-save"]).unwrap()
}

#[test]
fn services_reach_their_endpoints_in_a_network_namespace() {
    let node = NetNs::new("capstan-ipt-node").unwrap();
    let pods = NetNs::new("capstan-ipt-pods").unwrap();
    node.pair_with(&pods, "10.200.0.1/24", "10.200.0.2/24")
        .unwrap();
    pods.add_addresses(&["10.244.1.2/32", "10.244.1.3/32", "10.244.1.4/32"])
        .unwrap();
    node.exec(&["ip", "route", "add", "default", "via", "10.200.0.2"])
        .unwrap();
    pods.exec(&["ip", "route", "add", "default", "via", "10.200.0.1"])
        .unwrap();
    node.sysctl("net.ipv4.ip_forward", "1").unwrap();
    let backend_ips = ["10.244.1.2", "10.244.1.3", "10.244.1.4"];
    let _backends = Backends::start(&pods, &backend_ips, 8080);

    // What a crashed run might have left, and a chain that is not ours.
    node.exec(&["iptables", "-t", "nat", "-N", "KUBE-SVC-LEFTOVER0000000"])
        .unwrap();
    node.exec(&["iptables", "-t", "nat", "-N", "SOMEONE-ELSES"])
        .unwrap();

    let node_info = NodeInfo {
        name: "node-a".into(),
        ips: vec!["10.200.0.1".parse().unwrap()],
        cluster_cidr: Some("10.244.0.0/16".into()),
    };
    let mut proxier = IptablesProxier::new(node_info.clone())
        .unwrap()
        .in_netns(node.name());

    let mut web = service("web", "10.96.0.10");
    web.node_port = Some(30080);
    let mut sticky = service("sticky", "10.96.0.11");
    sticky.session_affinity_seconds = Some(10800);
    let empty = service("empty", "10.96.0.12");
    let all = endpoints(&backend_ips);
    proxier
        .sync(&snapshot(&[(&web, &all), (&sticky, &all), (&empty, &[])]))
        .unwrap();
    assert!(proxier.last_sync().full);

    let rules_now = save(&node);
    let web_chain = format!("KUBE-SVC-{}", rules::port_proto_hash(&web.name));
    assert!(
        rules_now.contains(&format!(":{web_chain} - [0:0]")),
        "{rules_now}"
    );
    assert!(
        rules_now.contains("--probability 0.33333333349"),
        "{rules_now}"
    );
    assert!(
        rules_now.contains("--probability 0.50000000000"),
        "{rules_now}"
    );
    assert!(!rules_now.contains("LEFTOVER"), "leftover chain kept");
    assert!(rules_now.contains(":SOMEONE-ELSES"));
    assert_eq!(
        rules_now
            .matches(
                "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
            )
            .count(),
        1
    );

    // The cluster IP balances over all three endpoints.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let got = fetch(&node, "10.96.0.10:80").unwrap();
        assert!(backend_ips.contains(&got.as_str()), "{got:?}");
        seen.insert(got);
    }
    assert!(seen.len() >= 2, "30 connections all went to {seen:?}");

    // Client IP affinity: always the same endpoint.
    let first = fetch(&node, "10.96.0.11:80").unwrap();
    for _ in 0..10 {
        assert_eq!(fetch(&node, "10.96.0.11:80").unwrap(), first);
    }

    // No endpoints: refused at once, not a timeout.
    let start = Instant::now();
    let err = fetch(&node, "10.96.0.12:80").unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
    assert!(start.elapsed() < Duration::from_secs(1));

    // The NodePort, from another host (the pods namespace) and from the node itself.
    let got = fetch(&pods, "10.200.0.1:30080").unwrap();
    assert!(backend_ips.contains(&got.as_str()), "{got:?}");
    let got = fetch(&node, "10.200.0.1:30080").unwrap();
    assert!(backend_ips.contains(&got.as_str()), "{got:?}");
    let got = fetch(&node, "127.0.0.1:30080").unwrap();
    assert!(backend_ips.contains(&got.as_str()), "{got:?}");

    // An incremental sync: web down to one endpoint; only its chains change.
    let one = endpoints(&["10.244.1.4"]);
    proxier
        .sync(&snapshot(&[(&web, &one), (&sticky, &all), (&empty, &[])]))
        .unwrap();
    let stats = proxier.last_sync().clone();
    assert!(!stats.full);
    assert_eq!(stats.restores, 1);
    assert_eq!(stats.chains_written, 1, "{stats:?}");
    assert_eq!(stats.chains_deleted, 2, "{stats:?}");
    for _ in 0..10 {
        assert_eq!(fetch(&node, "10.96.0.10:80").unwrap(), "10.244.1.4");
    }

    // Someone flushes everything (a firewall reload): the next sync notices the canary is
    // gone and writes it all again.
    for table in ["nat", "filter", "mangle"] {
        node.exec(&["iptables", "-t", table, "-F"]).unwrap();
        node.exec(&["iptables", "-t", table, "-X"]).unwrap();
    }
    assert!(!save(&node).contains("KUBE-"));
    node.exec(&["iptables", "-t", "nat", "-N", "SOMEONE-ELSES"])
        .unwrap();
    proxier.canary_period = Duration::ZERO;
    proxier
        .sync(&snapshot(&[(&web, &one), (&sticky, &all), (&empty, &[])]))
        .unwrap();
    assert!(proxier.last_sync().full);
    assert_eq!(fetch(&node, "10.96.0.10:80").unwrap(), "10.244.1.4");
    assert_eq!(
        fetch(&node, "10.96.0.12:80").unwrap_err().kind(),
        io::ErrorKind::ConnectionRefused
    );

    // A restarted proxier reconciles without duplicating its jump rules.
    let mut restarted = IptablesProxier::new(node_info)
        .unwrap()
        .in_netns(node.name());
    restarted
        .sync(&snapshot(&[(&web, &one), (&empty, &[])]))
        .unwrap();
    let rules_now = save(&node);
    assert_eq!(
        rules_now
            .matches(
                "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
            )
            .count(),
        1
    );
    let sticky_chain = format!("KUBE-SVC-{}", rules::port_proto_hash(&sticky.name));
    assert!(
        !rules_now.contains(&sticky_chain),
        "removed service's chain kept"
    );
    assert_eq!(fetch(&node, "10.96.0.10:80").unwrap(), "10.244.1.4");

    // Cleanup leaves nothing of ours, and what is not ours.
    restarted.cleanup().unwrap();
    let rules_now = save(&node);
    assert!(!rules_now.contains("KUBE-"), "{rules_now}");
    assert!(rules_now.contains(":SOMEONE-ELSES"));
}
