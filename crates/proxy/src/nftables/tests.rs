//! Unit tests of the generated transactions (no root, no nft).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use super::rules::{endpoint_chain_base, hash_and_truncate, service_chain_base};
use super::*;
use crate::Protocol;

fn port_name(ns: &str, name: &str, port: &str) -> ServicePortName {
    ServicePortName {
        namespace: ns.into(),
        name: name.into(),
        port: port.into(),
        protocol: Protocol::Tcp,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test IP")
}

fn service(name: &ServicePortName, cluster_ip: &str, port: u16) -> ServicePort {
    ServicePort {
        name: name.clone(),
        cluster_ips: vec![ip(cluster_ip)],
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

fn endpoint(addr: &str, port: u16, node: &str) -> Endpoint {
    Endpoint {
        ip: ip(addr),
        port,
        ready: true,
        serving: true,
        terminating: false,
        node_name: Some(node.into()),
    }
}

fn snapshot(entries: Vec<(ServicePort, Vec<Endpoint>)>) -> Snapshot {
    let mut snap = Snapshot::default();
    for (svc, eps) in entries {
        if !eps.is_empty() {
            snap.endpoints.insert(svc.name.clone(), Arc::new(eps));
        }
        snap.services.insert(svc.name.clone(), Arc::new(svc));
    }
    snap
}

fn node(cluster_cidr: Option<&str>, ips: &[&str]) -> NodeInfo {
    NodeInfo {
        name: "n1".into(),
        ips: ips.iter().map(|s| ip(s)).collect(),
        cluster_cidr: cluster_cidr.map(String::from),
    }
}

fn proxier(node: NodeInfo) -> NftablesProxier {
    NftablesProxier::with_node(node).expect("valid node")
}

/// The transaction a sync would send, with the proxier then believing it was applied.
fn plan(p: &mut NftablesProxier, snap: &Snapshot) -> String {
    let text = p.plan(snap, Instant::now()).render();
    p.needs_full_sync = false;
    text
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

fn has(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

#[track_caller]
fn assert_has(text: &str, line: &str) {
    assert!(has(text, line), "missing line\n  {line}\nin\n{text}");
}

#[track_caller]
fn assert_not_mentioned(text: &str, what: &str) {
    assert!(
        !text.contains(what),
        "{what:?} should not appear in\n{text}"
    );
}

/// The rules of `chain` added by the transaction, in order.
fn chain_rules<'a>(text: &'a str, chain: &str) -> Vec<&'a str> {
    let prefix = format!("add rule ip kube-proxy {chain} ");
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .collect()
}

fn svc_chain(name: &ServicePortName) -> String {
    format!("service-{}", service_chain_base(name))
}

fn ep_chain(name: &ServicePortName, addr: &str, port: u16) -> String {
    let IpAddr::V4(v4) = ip(addr) else {
        panic!("IPv4 test endpoint")
    };
    format!("endpoint-{}", endpoint_chain_base(name, v4, port))
}

fn affinity_set(name: &ServicePortName, addr: &str, port: u16) -> String {
    let IpAddr::V4(v4) = ip(addr) else {
        panic!("IPv4 test endpoint")
    };
    format!("affinity-{}", endpoint_chain_base(name, v4, port))
}

#[test]
fn chain_names_match_kube_proxy() {
    // Names from kube-proxy's own tests.
    assert_eq!(
        hash_and_truncate("ns1/svc1/tcp/p80"),
        "ULMVA6XW-ns1/svc1/tcp/p80"
    );
    assert_eq!(
        hash_and_truncate("ns1/svc1/tcp/p80__10.180.0.1/80"),
        "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"
    );
    let name = port_name("ns1", "svc1", "p80");
    assert_eq!(svc_chain(&name), "service-ULMVA6XW-ns1/svc1/tcp/p80");
    assert_eq!(
        ep_chain(&name, "10.180.0.1", 80),
        "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"
    );

    // Too long: cut, still unique by the hash.
    let long = "a".repeat(300);
    let a = hash_and_truncate(&format!("{long}x"));
    let b = hash_and_truncate(&format!("{long}y"));
    assert_eq!(a.len(), 240);
    assert!(a.ends_with("..."));
    assert_ne!(a, b);

    // Characters nft can't take in a name never reach it.
    let odd = hash_and_truncate("ns/we\"ird name;{}/tcp/é");
    assert!(
        odd.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/-_.".contains(c)),
        "{odd}"
    );
}

#[test]
fn cluster_ip_with_three_endpoints() {
    let name = port_name("default", "web", "http");
    let svc = service(&name, "10.96.0.10", 80);
    let eps = vec![
        endpoint("10.244.1.2", 8080, "n1"),
        endpoint("10.244.2.2", 8080, "n2"),
        endpoint("10.244.3.2", 8080, "n3"),
    ];
    let mut p = proxier(node(Some("10.244.0.0/16"), &["192.168.0.10"]));
    let tx = plan(&mut p, &snapshot(vec![(svc, eps)]));
    let all = lines(&tx);

    // The first sync replaces whatever table a previous run left.
    assert_eq!(
        &all[..3],
        &[
            "add table ip kube-proxy",
            "delete table ip kube-proxy",
            "add table ip kube-proxy { comment \"rules for kube-proxy\" ; }"
        ]
    );
    assert_has(
        &tx,
        "add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }",
    );
    assert_has(
        &tx,
        "add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips",
    );
    assert_has(
        &tx,
        "add rule ip kube-proxy masquerading masquerade fully-random",
    );

    let chain = svc_chain(&name);
    assert_has(
        &tx,
        &format!(
            "add element ip kube-proxy service-ips {{ 10.96.0.10 . tcp . 80 : goto {chain} }}"
        ),
    );
    assert_has(&tx, "add element ip kube-proxy cluster-ips { 10.96.0.10 }");
    let e1 = ep_chain(&name, "10.244.1.2", 8080);
    let e2 = ep_chain(&name, "10.244.2.2", 8080);
    let e3 = ep_chain(&name, "10.244.3.2", 8080);
    assert_eq!(
        chain_rules(&tx, &chain),
        vec![
            format!("numgen random mod 3 == 0 goto {e1}"),
            format!("numgen random mod 2 == 0 goto {e2}"),
            format!("goto {e3}"),
        ]
    );
    assert_eq!(
        chain_rules(&tx, &e2),
        vec![
            "ip saddr 10.244.2.2 jump mark-for-masquerade",
            "meta l4proto tcp dnat to 10.244.2.2:8080"
        ]
    );
    // Chains are created before rules and elements refer to them.
    let add_chain = all
        .iter()
        .position(|l| *l == format!("add chain ip kube-proxy {e3}"))
        .expect("endpoint chain added");
    let first_rule = all
        .iter()
        .position(|l| l.starts_with(&format!("add rule ip kube-proxy {chain} ")))
        .expect("service rule");
    let element = all
        .iter()
        .position(|l| l.starts_with("add element ip kube-proxy service-ips"))
        .expect("element");
    assert!(add_chain < first_rule && first_rule < element);
    // Nothing external, no affinity.
    assert_not_mentioned(&tx, "external-");
    assert_not_mentioned(&tx, "affinity-");
    assert_not_mentioned(&tx, "add element ip kube-proxy service-nodeports");
}

#[test]
fn masquerades_all_cluster_ip_traffic_without_a_cluster_cidr() {
    let name = port_name("default", "web", "");
    let svc = service(&name, "10.96.0.10", 80);
    let mut p = proxier(node(None, &[]));
    let tx = plan(
        &mut p,
        &snapshot(vec![(svc, vec![endpoint("10.244.1.2", 80, "n1")])]),
    );
    // Every connection to a ClusterIP is marked, by one rule for all of them.
    assert_eq!(
        chain_rules(&tx, "services")[0],
        "ip daddr @cluster-ips jump mark-for-masquerade"
    );
    assert_eq!(
        chain_rules(&tx, &svc_chain(&name)),
        vec![format!("goto {}", ep_chain(&name, "10.244.1.2", 80))]
    );
    // An unnamed port still makes a valid chain name.
    assert!(svc_chain(&name).ends_with("-default/web/tcp/"));
}

#[test]
fn session_affinity_uses_per_endpoint_sets() {
    let name = port_name("default", "sticky", "http");
    let mut svc = service(&name, "10.96.0.20", 80);
    svc.session_affinity_seconds = Some(10800);
    let eps = vec![
        endpoint("10.244.1.2", 8080, "n1"),
        endpoint("10.244.2.2", 8080, "n2"),
    ];
    let mut p = proxier(node(Some("10.244.0.0/16"), &[]));
    let tx = plan(&mut p, &snapshot(vec![(svc, eps)]));

    let (s1, s2) = (
        affinity_set(&name, "10.244.1.2", 8080),
        affinity_set(&name, "10.244.2.2", 8080),
    );
    let (e1, e2) = (
        ep_chain(&name, "10.244.1.2", 8080),
        ep_chain(&name, "10.244.2.2", 8080),
    );
    for set in [&s1, &s2] {
        assert_has(
            &tx,
            &format!("add set ip kube-proxy {set} {{ type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }}"),
        );
    }
    // Known clients go back to their endpoint before the random pick.
    assert_eq!(
        chain_rules(&tx, &svc_chain(&name))[..],
        [
            format!("ip saddr @{s1} goto {e1}"),
            format!("ip saddr @{s2} goto {e2}"),
            format!("numgen random mod 2 == 0 goto {e1}"),
            format!("goto {e2}"),
        ]
    );
    assert_eq!(
        chain_rules(&tx, &e1),
        vec![
            "ip saddr 10.244.1.2 jump mark-for-masquerade".to_string(),
            format!("update @{s1} {{ ip saddr }}"),
            "meta l4proto tcp dnat to 10.244.1.2:8080".to_string(),
        ]
    );
}

#[test]
fn services_without_endpoints_are_rejected() {
    let name = port_name("default", "empty", "http");
    let mut svc = service(&name, "10.96.0.30", 80);
    svc.node_port = Some(30030);
    svc.external_ips = vec![ip("192.0.2.7")];
    // Endpoints that aren't usable count as none.
    let mut not_ready = endpoint("10.244.1.2", 8080, "n1");
    not_ready.ready = false;
    not_ready.serving = false;
    let mut p = proxier(node(Some("10.244.0.0/16"), &["192.168.0.10"]));
    let tx = plan(&mut p, &snapshot(vec![(svc, vec![not_ready])]));

    assert_has(
        &tx,
        "add element ip kube-proxy no-endpoint-services { 10.96.0.30 . tcp . 80 comment \"default/empty:http\" : goto reject-chain, 192.0.2.7 . tcp . 80 comment \"default/empty:http\" : goto reject-chain }",
    );
    assert_has(
        &tx,
        "add element ip kube-proxy no-endpoint-nodeports { tcp . 30030 comment \"default/empty:http\" : goto reject-chain }",
    );
    assert_has(&tx, "add element ip kube-proxy cluster-ips { 10.96.0.30 }");
    assert_has(&tx, "add rule ip kube-proxy reject-chain reject");
    assert_has(
        &tx,
        "add rule ip kube-proxy service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services",
    );
    // No chains, no dispatch.
    assert_not_mentioned(&tx, "add element ip kube-proxy service-ips");
    assert_not_mentioned(&tx, "add element ip kube-proxy service-nodeports");
    assert_not_mentioned(&tx, &service_chain_base(&name));
}

#[test]
fn terminating_endpoints_serve_when_none_is_ready() {
    let name = port_name("default", "draining", "");
    let svc = service(&name, "10.96.0.31", 80);
    let mut draining = endpoint("10.244.1.2", 80, "n1");
    draining.ready = false;
    draining.terminating = true;
    let mut gone = endpoint("10.244.1.3", 80, "n1");
    gone.ready = false;
    gone.serving = false;
    gone.terminating = true;
    let mut p = proxier(node(None, &[]));
    let tx = plan(&mut p, &snapshot(vec![(svc, vec![draining, gone])]));
    let e = ep_chain(&name, "10.244.1.2", 80);
    assert_eq!(
        chain_rules(&tx, &svc_chain(&name))[..],
        [format!("goto {e}")]
    );
    assert_not_mentioned(&tx, "10.244.1.3");
}

#[test]
fn node_port_on_node_ips() {
    let name = port_name("default", "np", "http");
    let mut svc = service(&name, "10.96.0.40", 80);
    svc.node_port = Some(30080);
    let eps = vec![endpoint("10.244.1.2", 8080, "n1")];
    let mut p = proxier(node(Some("10.244.0.0/16"), &["192.168.0.10", "fd00::1"]));
    let tx = plan(&mut p, &snapshot(vec![(svc, eps)]));

    let base = service_chain_base(&name);
    assert_has(
        &tx,
        "add element ip kube-proxy nodeport-ips { 192.168.0.10 }",
    );
    assert_has(
        &tx,
        "add rule ip kube-proxy services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
    );
    assert_has(
        &tx,
        "add rule ip kube-proxy nodeport-endpoints-check ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports",
    );
    assert_has(
        &tx,
        &format!(
            "add element ip kube-proxy service-nodeports {{ tcp . 30080 : goto external-{base} }}"
        ),
    );
    // Cluster policy: masquerade (the endpoint may be on another node), then balance.
    assert_eq!(
        chain_rules(&tx, &format!("external-{base}")),
        vec![
            "jump mark-for-masquerade".to_string(),
            format!("goto service-{base}")
        ]
    );
}

#[test]
fn node_port_on_every_local_address_when_node_ips_are_unknown() {
    let name = port_name("default", "np", "http");
    let mut svc = service(&name, "10.96.0.40", 80);
    svc.node_port = Some(30080);
    let mut p = proxier(node(None, &[]));
    let tx = plan(
        &mut p,
        &snapshot(vec![(svc, vec![endpoint("10.244.1.2", 8080, "n1")])]),
    );
    assert_has(
        &tx,
        "add rule ip kube-proxy services fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports",
    );
    assert_not_mentioned(&tx, "nodeport-ips");
}

#[test]
fn external_traffic_policy_local() {
    let name = port_name("default", "local", "http");
    let mut svc = service(&name, "10.96.0.50", 80);
    svc.node_port = Some(30050);
    svc.load_balancer_ips = vec![ip("203.0.113.5")];
    svc.external_policy_local = true;
    let eps = vec![
        endpoint("10.244.1.2", 8080, "n1"),
        endpoint("10.244.2.2", 8080, "n2"),
        endpoint("10.244.3.2", 8080, "n3"),
    ];
    let mut p = proxier(node(Some("10.244.0.0/16"), &["192.168.0.10"]));
    let tx = plan(&mut p, &snapshot(vec![(svc.clone(), eps)]));

    let base = service_chain_base(&name);
    let local = ep_chain(&name, "10.244.1.2", 8080);
    assert_eq!(
        chain_rules(&tx, &format!("external-{base}")),
        vec![
            format!(
                "ip saddr 10.244.0.0/16 goto service-{base} comment \"short-circuit pod traffic\""
            ),
            "fib saddr type local jump mark-for-masquerade comment \"masquerade local traffic\""
                .to_string(),
            format!(
                "fib saddr type local goto service-{base} comment \"short-circuit local traffic\""
            ),
            format!("goto local-{base}"),
        ]
    );
    // Only this node's endpoint for external traffic, all three for the ClusterIP.
    assert_eq!(
        chain_rules(&tx, &format!("local-{base}")),
        vec![format!("goto {local}")]
    );
    assert!(
        chain_rules(&tx, &format!("service-{base}"))[0].starts_with("numgen random mod 3 == 0 ")
    );
    assert_eq!(chain_rules(&tx, &format!("service-{base}")).len(), 3);
    assert_has(
        &tx,
        &format!("add element ip kube-proxy service-ips {{ 10.96.0.50 . tcp . 80 : goto service-{base}, 203.0.113.5 . tcp . 80 : goto external-{base} }}"),
    );

    // No endpoint on this node: external traffic that isn't short-circuited is dropped,
    // not rejected (other nodes may have endpoints).
    let eps = vec![endpoint("10.244.2.2", 8080, "n2")];
    let mut p = proxier(node(Some("10.244.0.0/16"), &["192.168.0.10"]));
    let tx = plan(&mut p, &snapshot(vec![(svc, eps)]));
    assert_eq!(chain_rules(&tx, &format!("external-{base}")).len(), 3);
    assert_not_mentioned(&tx, &format!("local-{base}"));
    assert_has(
        &tx,
        &format!(
            "add element ip kube-proxy service-nodeports {{ tcp . 30050 : goto external-{base} }}"
        ),
    );
    assert_has(
        &tx,
        "add element ip kube-proxy no-endpoint-nodeports { tcp . 30050 comment \"default/local:http\" : drop }",
    );
    assert_has(
        &tx,
        "add element ip kube-proxy no-endpoint-services { 203.0.113.5 . tcp . 80 comment \"default/local:http\" : drop }",
    );
}

#[test]
fn internal_traffic_policy_local() {
    let name = port_name("default", "itp", "");
    let mut svc = service(&name, "10.96.0.60", 80);
    svc.internal_policy_local = true;
    let base = service_chain_base(&name);

    // A local endpoint: the ClusterIP goes to the local chain only.
    let eps = vec![
        endpoint("10.244.1.2", 8080, "n1"),
        endpoint("10.244.2.2", 8080, "n2"),
    ];
    let mut p = proxier(node(Some("10.244.0.0/16"), &[]));
    let tx = plan(&mut p, &snapshot(vec![(svc.clone(), eps)]));
    assert_has(
        &tx,
        &format!(
            "add element ip kube-proxy service-ips {{ 10.96.0.60 . tcp . 80 : goto local-{base} }}"
        ),
    );
    assert_not_mentioned(&tx, &format!("service-{base}"));
    assert_not_mentioned(&tx, "10.244.2.2");

    // Endpoints elsewhere only: dropped here.
    let mut p = proxier(node(Some("10.244.0.0/16"), &[]));
    let tx = plan(
        &mut p,
        &snapshot(vec![(svc, vec![endpoint("10.244.2.2", 8080, "n2")])]),
    );
    assert_has(
        &tx,
        "add element ip kube-proxy no-endpoint-services { 10.96.0.60 . tcp . 80 comment \"default/itp\" : drop }",
    );
    assert_not_mentioned(&tx, &base);
}

#[test]
fn load_balancer_source_ranges() {
    let name = port_name("default", "lb", "https");
    let mut svc = service(&name, "10.96.0.70", 443);
    svc.load_balancer_ips = vec![ip("203.0.113.9"), ip("2001:db8::9")];
    svc.load_balancer_source_ranges = vec![
        " 198.51.100.0/24".into(),
        "192.168.0.0/16".into(),
        "2001:db8::/32".into(),
        "garbage".into(),
    ];
    let mut p = proxier(node(None, &["192.168.0.10"]));
    let tx = plan(
        &mut p,
        &snapshot(vec![(svc, vec![endpoint("10.244.1.2", 8443, "n1")])]),
    );
    let base = service_chain_base(&name);
    assert_has(
        &tx,
        &format!("add element ip kube-proxy firewall-ips {{ 203.0.113.9 . tcp . 443 : goto firewall-{base} }}"),
    );
    // The node is in an allowed range, so its own requests (sourced from the VIP) pass.
    assert_eq!(
        chain_rules(&tx, &format!("firewall-{base}")),
        vec!["ip saddr != { 198.51.100.0/24, 192.168.0.0/16, 203.0.113.9 } drop"]
    );
    assert_not_mentioned(&tx, "2001:db8");
}

#[test]
fn ipv6_services_and_endpoints_are_ignored() {
    let v6 = port_name("default", "v6", "");
    let mut svc6 = service(&v6, "fd00::10", 80);
    svc6.node_port = Some(30600);
    let mixed = port_name("default", "mixed", "");
    let mut svc = service(&mixed, "10.96.0.80", 80);
    svc.cluster_ips.push(ip("fd00::11"));
    let mut headless = service(&port_name("default", "headless", ""), "10.96.0.1", 80);
    headless.cluster_ips.clear();
    let mut p = proxier(node(None, &[]));
    let tx = plan(
        &mut p,
        &snapshot(vec![
            (svc6, vec![endpoint("fd00:1::2", 80, "n1")]),
            (
                svc,
                vec![
                    endpoint("fd00:1::3", 80, "n1"),
                    endpoint("10.244.1.3", 80, "n1"),
                ],
            ),
            (headless, vec![endpoint("10.244.1.4", 80, "n1")]),
        ]),
    );
    assert_not_mentioned(&tx, "fd00");
    assert_not_mentioned(&tx, "30600");
    assert_not_mentioned(&tx, "10.244.1.4");
    assert_eq!(chain_rules(&tx, &svc_chain(&mixed)).len(), 1);
    assert!(chain_rules(&tx, &svc_chain(&mixed))[0].starts_with("goto endpoint-"));
}

#[test]
fn incremental_sync_sends_only_deltas() {
    let a = port_name("default", "a", "http");
    let b = port_name("default", "b", "http");
    let eps_a = vec![
        endpoint("10.244.1.2", 8080, "n1"),
        endpoint("10.244.2.2", 8080, "n2"),
        endpoint("10.244.3.2", 8080, "n3"),
    ];
    let eps_b = vec![
        endpoint("10.244.1.5", 9090, "n1"),
        endpoint("10.244.2.5", 9090, "n2"),
    ];
    let svc_a = service(&a, "10.96.0.10", 80);
    let svc_b = service(&b, "10.96.0.11", 80);
    let mut p = proxier(node(Some("10.244.0.0/16"), &[]));
    let first = snapshot(vec![
        (svc_a.clone(), eps_a.clone()),
        (svc_b.clone(), eps_b.clone()),
    ]);
    plan(&mut p, &first);

    // Nothing changed (even as new Arcs): nothing to send.
    let same = snapshot(vec![
        (svc_a.clone(), eps_a.clone()),
        (svc_b.clone(), eps_b.clone()),
    ]);
    assert!(p.plan(&same, Instant::now()).is_empty());
    assert_eq!(p.last_sync().changed_services, 0);

    // One endpoint of a goes away.
    let second = snapshot(vec![
        (svc_a.clone(), eps_a[..2].to_vec()),
        (svc_b.clone(), eps_b.clone()),
    ]);
    let tx = plan(&mut p, &second);
    let gone = ep_chain(&a, "10.244.3.2", 8080);
    let (e1, e2) = (
        ep_chain(&a, "10.244.1.2", 8080),
        ep_chain(&a, "10.244.2.2", 8080),
    );
    let chain = svc_chain(&a);
    assert_eq!(
        lines(&tx),
        vec![
            format!("flush chain ip kube-proxy {gone}"),
            format!("flush chain ip kube-proxy {chain}"),
            format!("add rule ip kube-proxy {chain} numgen random mod 2 == 0 goto {e1}"),
            format!("add rule ip kube-proxy {chain} goto {e2}"),
            format!("delete chain ip kube-proxy {gone}"),
        ]
    );
    assert_eq!(
        p.last_sync(),
        SyncStats {
            full: false,
            commands: 0,
            changed_services: 1
        }
    );

    // A new service: its chains and elements only.
    let c = port_name("default", "c", "");
    let svc_c = service(&c, "10.96.0.12", 53);
    let third = snapshot(vec![
        (svc_a.clone(), eps_a[..2].to_vec()),
        (svc_b.clone(), eps_b.clone()),
        (svc_c, vec![endpoint("10.244.1.9", 53, "n1")]),
    ]);
    let tx = plan(&mut p, &third);
    assert!(
        tx.lines()
            .all(|l| l.contains("/c/tcp/") || l.contains("10.96.0.12")),
        "{tx}"
    );
    assert_has(&tx, "add element ip kube-proxy cluster-ips { 10.96.0.12 }");

    // b goes: its chains are flushed and deleted, its elements deleted.
    let fourth = snapshot(vec![(svc_a, eps_a[..2].to_vec())]);
    let tx = plan(&mut p, &fourth);
    assert_has(
        &tx,
        &format!("delete chain ip kube-proxy {}", svc_chain(&b)),
    );
    assert_has(
        &tx,
        "delete element ip kube-proxy service-ips { 10.96.0.11 . tcp . 80, 10.96.0.12 . tcp . 53 }",
    );
    assert_has(
        &tx,
        "delete element ip kube-proxy cluster-ips { 10.96.0.11, 10.96.0.12 }",
    );
    assert_not_mentioned(&tx, "add ");
    assert_not_mentioned(&tx, &service_chain_base(&a));
}

#[test]
fn endpoints_going_to_zero_and_back() {
    let name = port_name("default", "flappy", "");
    let svc = service(&name, "10.96.0.15", 80);
    let eps = vec![endpoint("10.244.1.2", 80, "n1")];
    let mut p = proxier(node(None, &[]));
    plan(&mut p, &snapshot(vec![(svc.clone(), eps.clone())]));

    let tx = plan(&mut p, &snapshot(vec![(svc.clone(), vec![])]));
    let chain = svc_chain(&name);
    assert_has(
        &tx,
        "delete element ip kube-proxy service-ips { 10.96.0.15 . tcp . 80 }",
    );
    assert_has(
        &tx,
        "add element ip kube-proxy no-endpoint-services { 10.96.0.15 . tcp . 80 comment \"default/flappy\" : goto reject-chain }",
    );
    assert_has(&tx, &format!("delete chain ip kube-proxy {chain}"));
    // The ClusterIP stays active.
    assert_not_mentioned(&tx, "cluster-ips");

    let tx = plan(&mut p, &snapshot(vec![(svc, eps)]));
    assert_has(
        &tx,
        "delete element ip kube-proxy no-endpoint-services { 10.96.0.15 . tcp . 80 }",
    );
    assert_has(
        &tx,
        &format!(
            "add element ip kube-proxy service-ips {{ 10.96.0.15 . tcp . 80 : goto {chain} }}"
        ),
    );
    assert_has(&tx, &format!("add chain ip kube-proxy {chain}"));
}

#[test]
fn ports_of_one_service_share_its_cluster_ip() {
    let http = port_name("default", "multi", "http");
    let https = port_name("default", "multi", "https");
    let svc_http = service(&http, "10.96.0.16", 80);
    let svc_https = service(&https, "10.96.0.16", 443);
    let eps = vec![endpoint("10.244.1.2", 80, "n1")];
    let mut p = proxier(node(None, &[]));
    let tx = plan(
        &mut p,
        &snapshot(vec![
            (svc_http.clone(), eps.clone()),
            (svc_https, eps.clone()),
        ]),
    );
    assert_has(&tx, "add element ip kube-proxy cluster-ips { 10.96.0.16 }");

    let tx = plan(&mut p, &snapshot(vec![(svc_http, eps)]));
    assert_not_mentioned(&tx, "cluster-ips");
    assert_has(
        &tx,
        "delete element ip kube-proxy service-ips { 10.96.0.16 . tcp . 443 }",
    );

    let tx = plan(&mut p, &Snapshot::default());
    assert_has(
        &tx,
        "delete element ip kube-proxy cluster-ips { 10.96.0.16 }",
    );
}

#[test]
fn a_shared_external_ip_moves_to_the_remaining_owner() {
    let a = port_name("default", "a", "");
    let b = port_name("default", "b", "");
    let mut svc_a = service(&a, "10.96.0.21", 80);
    svc_a.external_ips = vec![ip("192.0.2.1")];
    let mut svc_b = service(&b, "10.96.0.22", 80);
    svc_b.external_ips = vec![ip("192.0.2.1")];
    let mut p = proxier(node(None, &[]));
    let tx = plan(
        &mut p,
        &snapshot(vec![
            (svc_a.clone(), vec![endpoint("10.244.1.2", 80, "n1")]),
            (svc_b.clone(), vec![endpoint("10.244.1.3", 80, "n1")]),
        ]),
    );
    let ext_a = format!("external-{}", service_chain_base(&a));
    let ext_b = format!("external-{}", service_chain_base(&b));
    assert!(tx.contains(&format!("192.0.2.1 . tcp . 80 : goto {ext_a}")));
    assert!(!tx.contains(&format!("192.0.2.1 . tcp . 80 : goto {ext_b}")));

    let tx = plan(
        &mut p,
        &snapshot(vec![(svc_b, vec![endpoint("10.244.1.3", 80, "n1")])]),
    );
    assert!(tx.contains("delete element ip kube-proxy service-ips { 10.96.0.21 . tcp . 80, 192.0.2.1 . tcp . 80 }"), "{tx}");
    assert_has(
        &tx,
        &format!("add element ip kube-proxy service-ips {{ 192.0.2.1 . tcp . 80 : goto {ext_b} }}"),
    );
}

#[test]
fn affinity_changes() {
    let name = port_name("default", "sticky", "");
    let mut svc = service(&name, "10.96.0.25", 80);
    let eps = vec![endpoint("10.244.1.2", 80, "n1")];
    let mut p = proxier(node(None, &[]));
    plan(&mut p, &snapshot(vec![(svc.clone(), eps.clone())]));

    // Turning affinity on adds the sets and rewrites the chains that use them.
    svc.session_affinity_seconds = Some(60);
    let tx = plan(&mut p, &snapshot(vec![(svc.clone(), eps.clone())]));
    let set = affinity_set(&name, "10.244.1.2", 80);
    assert_has(
        &tx,
        &format!("add set ip kube-proxy {set} {{ type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }}"),
    );
    assert_has(
        &tx,
        &format!("flush chain ip kube-proxy {}", svc_chain(&name)),
    );

    // A new timeout: the set is recreated after every rule using it is flushed.
    svc.session_affinity_seconds = Some(120);
    let tx = plan(&mut p, &snapshot(vec![(svc.clone(), eps.clone())]));
    let all = lines(&tx);
    let flush = all
        .iter()
        .position(|l| {
            *l == format!(
                "flush chain ip kube-proxy {}",
                ep_chain(&name, "10.244.1.2", 80)
            )
        })
        .expect("endpoint chain flushed");
    let delete = all
        .iter()
        .position(|l| *l == format!("delete set ip kube-proxy {set}"))
        .expect("set deleted");
    let add = all
        .iter()
        .position(|l| l.starts_with(&format!("add set ip kube-proxy {set} ")))
        .expect("set added");
    let rule = all
        .iter()
        .position(|l| l.contains(&format!("update @{set}")))
        .expect("rule re-added");
    assert!(flush < delete && delete < add && add < rule, "{tx}");
    assert!(tx.contains("timeout 120s"));

    // Off again: sets deleted.
    svc.session_affinity_seconds = None;
    let tx = plan(&mut p, &snapshot(vec![(svc, eps)]));
    assert_has(&tx, &format!("delete set ip kube-proxy {set}"));
    assert_not_mentioned(&tx, "add set");
}

#[test]
fn old_kernels_delete_unused_chains_a_sync_later() {
    let name = port_name("default", "web", "");
    let svc = service(&name, "10.96.0.10", 80);
    let eps = vec![
        endpoint("10.244.1.2", 80, "n1"),
        endpoint("10.244.1.3", 80, "n1"),
    ];
    let mut p = proxier(node(None, &[]));
    p.delete_chains_at_once = false;
    plan(&mut p, &snapshot(vec![(svc.clone(), eps.clone())]));

    let gone = ep_chain(&name, "10.244.1.3", 80);
    let start = Instant::now();
    let tx = p
        .plan(&snapshot(vec![(svc.clone(), eps[..1].to_vec())]), start)
        .render();
    assert_has(&tx, &format!("flush chain ip kube-proxy {gone}"));
    assert_not_mentioned(&tx, "delete chain");
    assert_eq!(
        p.stale_chains.keys().collect::<Vec<_>>(),
        vec![&gone],
        "waiting for deletion"
    );
    assert_eq!(p.stale_chains.get(&gone), Some(&start));

    // It comes back before being deleted: created again (a no-op) and filled.
    let tx = plan(&mut p, &snapshot(vec![(svc, eps)]));
    assert_has(&tx, &format!("add chain ip kube-proxy {gone}"));
    assert!(p.stale_chains.is_empty());
}

#[test]
fn a_failed_sync_rebuilds_the_table_next_time() {
    let name = port_name("default", "web", "");
    let svc = service(&name, "10.96.0.10", 80);
    let mut p = proxier(node(None, &[]));
    plan(&mut p, &snapshot(vec![(svc.clone(), vec![])]));
    // What Proxier::sync does when nft fails.
    p.needs_full_sync = true;
    let tx = plan(&mut p, &snapshot(vec![(svc, vec![])]));
    assert!(tx.starts_with("add table ip kube-proxy\ndelete table ip kube-proxy\n"));
    assert_has(
        &tx,
        "add element ip kube-proxy no-endpoint-services { 10.96.0.10 . tcp . 80 comment \"default/web\" : goto reject-chain }",
    );
    assert!(p.last_sync().full);
}

#[test]
fn many_elements_are_split_into_several_commands() {
    let mut entries = Vec::new();
    for i in 0..2500u32 {
        let name = port_name("ns", &format!("s{i}"), "");
        let addr = format!("10.96.{}.{}", i / 250, i % 250 + 1);
        entries.push((service(&name, &addr, 80), vec![]));
    }
    let mut p = proxier(node(None, &[]));
    let tx = plan(&mut p, &snapshot(entries));
    let commands = tx
        .lines()
        .filter(|l| l.starts_with("add element ip kube-proxy cluster-ips "))
        .count();
    assert_eq!(commands, 3);
}

#[test]
fn node_configuration() {
    assert!(NftablesProxier::with_node(node(Some("10.244.0.0/33"), &[])).is_err());
    assert!(NftablesProxier::with_node(node(Some("banana"), &[])).is_err());
    let p = proxier(node(
        Some("fd00:10::/56, 10.244.1.7/16"),
        &["10.0.0.1", "fd00::1"],
    ));
    assert_eq!(
        p.cfg.cluster_cidr.map(|c| c.to_string()).as_deref(),
        Some("10.244.0.0/16")
    );
    assert_eq!(
        p.cfg.node_ips,
        vec!["10.0.0.1".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    // IPv6 only: nothing to tell pods apart by, so masquerade all.
    let p = proxier(node(Some("fd00:10::/56"), &[]));
    assert_eq!(p.cfg.cluster_cidr, None);
}

#[test]
fn version_parsing() {
    assert_eq!(
        parse_nft_version("nftables v1.0.6 (Lester Gooch #5)\n"),
        Some((1, 0, 6))
    );
    assert_eq!(
        parse_nft_version("nftables v0.9.8 (E.D.S.)"),
        Some((0, 9, 8))
    );
    assert_eq!(parse_nft_version("nonsense"), None);
    assert_eq!(parse_kernel_release("6.18.44-fc-v769\n"), Some((6, 18)));
    assert_eq!(parse_kernel_release("5.15.0-91-generic"), Some((5, 15)));
    assert_eq!(parse_kernel_release(""), None);
}

#[test]
fn unchanged_inputs_are_recognized_without_regenerating() {
    let name = port_name("default", "web", "");
    let svc = Arc::new(service(&name, "10.96.0.10", 80));
    let eps = Arc::new(vec![endpoint("10.244.1.2", 80, "n1")]);
    let mut snap = Snapshot {
        services: BTreeMap::from([(name.clone(), svc.clone())]),
        endpoints: BTreeMap::from([(name.clone(), eps)]),
    };
    let mut p = proxier(node(None, &[]));
    plan(&mut p, &snap);
    // An empty endpoint list and no entry are the same thing.
    snap.endpoints.clear();
    plan(&mut p, &snap);
    snap.endpoints.insert(name.clone(), Arc::new(vec![]));
    assert!(p.plan(&snap, Instant::now()).is_empty());
}

#[test]
fn many_endpoints_are_picked_with_a_verdict_map() {
    let name = port_name("default", "big", "");
    let svc = service(&name, "10.96.0.70", 80);
    let n = rules::CASCADE_MAX_ENDPOINTS + 1;
    let eps: Vec<Endpoint> = (0..n)
        .map(|i| endpoint(&format!("10.244.9.{}", i + 1), 8080, "n2"))
        .collect();
    let mut p = proxier(node(Some("10.244.0.0/16"), &[]));
    let tx = plan(&mut p, &snapshot(vec![(svc.clone(), eps.clone())]));
    let rules = chain_rules(&tx, &svc_chain(&name));
    assert_eq!(rules.len(), 1, "{rules:?}");
    let first = ep_chain(&name, "10.244.9.1", 8080);
    let last = ep_chain(&name, &format!("10.244.9.{n}"), 8080);
    assert!(
        rules[0].starts_with(&format!("numgen random mod {n} vmap {{ 0 : goto {first}, "))
            && rules[0].ends_with(&format!("{} : goto {last} }}", n - 1)),
        "{}",
        rules[0]
    );

    // At the limit, a cascade: one rule per endpoint, each less likely to be skipped.
    let name = port_name("default", "cascade", "");
    let svc = service(&name, "10.96.0.71", 80);
    let eps: Vec<Endpoint> = (0..rules::CASCADE_MAX_ENDPOINTS)
        .map(|i| endpoint(&format!("10.244.8.{}", i + 1), 8080, "n2"))
        .collect();
    let tx = plan(&mut p, &snapshot(vec![(svc, eps)]));
    let rules = chain_rules(&tx, &svc_chain(&name));
    assert_eq!(rules.len(), rules::CASCADE_MAX_ENDPOINTS);
    for (i, rule) in rules[..rules.len() - 1].iter().enumerate() {
        let want = format!(
            "numgen random mod {} == 0 goto {}",
            rules::CASCADE_MAX_ENDPOINTS - i,
            ep_chain(&name, &format!("10.244.8.{}", i + 1), 8080)
        );
        assert_eq!(*rule, want);
    }
    assert!(!tx.contains(" vmap { 0 :"), "{tx}");
}

#[test]
fn internal_local_external_cluster_sends_external_traffic_to_every_endpoint() {
    let name = port_name("default", "itp-np", "");
    let mut svc = service(&name, "10.96.0.61", 80);
    svc.internal_policy_local = true;
    svc.node_port = Some(30061);
    let base = service_chain_base(&name);
    let eps = vec![
        endpoint("10.244.1.2", 8080, "n1"),
        endpoint("10.244.2.2", 8080, "n2"),
    ];
    let mut p = proxier(node(Some("10.244.0.0/16"), &["192.168.0.1"]));
    let tx = plan(&mut p, &snapshot(vec![(svc, eps)]));
    // ClusterIP: this node's endpoint only.
    assert_has(
        &tx,
        &format!(
            "add element ip kube-proxy service-ips {{ 10.96.0.61 . tcp . 80 : goto local-{base} }}"
        ),
    );
    assert_eq!(
        chain_rules(&tx, &format!("local-{base}"))[..],
        [format!("goto {}", ep_chain(&name, "10.244.1.2", 8080))]
    );
    // NodePort: masquerade, then every endpoint in the cluster.
    assert_eq!(
        chain_rules(&tx, &format!("external-{base}")),
        vec![
            "jump mark-for-masquerade".to_string(),
            format!("goto service-{base}")
        ]
    );
    assert_eq!(
        chain_rules(&tx, &format!("service-{base}")),
        vec![
            format!(
                "numgen random mod 2 == 0 goto {}",
                ep_chain(&name, "10.244.1.2", 8080)
            ),
            format!("goto {}", ep_chain(&name, "10.244.2.2", 8080)),
        ]
    );
}
