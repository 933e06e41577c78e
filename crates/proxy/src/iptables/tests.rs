//! The generated rules for representative snapshots, and what each sync feeds iptables
//! (recorded by a fake instead of run).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::exec::Iptables;
use super::rules::{self, Ctx};
use super::*;
use crate::{Endpoint, NodeInfo, Protocol, ServicePort, ServicePortName, Snapshot};

fn spn(ns: &str, name: &str, port: &str) -> ServicePortName {
    ServicePortName {
        namespace: ns.into(),
        name: name.into(),
        port: port.into(),
        protocol: Protocol::Tcp,
    }
}

fn service(name: ServicePortName, ip: &str, port: u16) -> ServicePort {
    ServicePort {
        name,
        cluster_ips: vec![ip.parse().unwrap()],
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

fn ep(ip: &str, port: u16, node: &str) -> Endpoint {
    Endpoint {
        ip: ip.parse().unwrap(),
        port,
        ready: true,
        serving: true,
        terminating: false,
        node_name: Some(node.into()),
    }
}

fn ctx() -> Ctx {
    Ctx {
        node_name: "node-a".into(),
        node_ips: vec!["192.168.1.10".parse().unwrap()],
        cluster_cidr: rules::Cidr::parse("10.244.0.0/16"),
        masquerade_all: false,
        large: false,
    }
}

fn chain<'a>(r: &'a rules::Rendered, name: &str) -> &'a str {
    r.chains
        .iter()
        .find(|c| c.name == name)
        .map(|c| c.rules.as_str())
        .unwrap_or_else(|| panic!("no chain {name} in {:?}", r.chains))
}

fn has_chain(r: &rules::Rendered, prefix: &str) -> bool {
    r.chains.iter().any(|c| c.name.starts_with(prefix))
}

#[test]
fn chain_names_are_kubernetes_hashes() {
    // The names Kubernetes' own tests expect for ns1/svc1:p80 and its endpoint 10.180.0.1:80.
    let name = spn("ns1", "svc1", "p80");
    assert_eq!(rules::port_proto_hash(&name), "XPGD46QRK7WJZT7O");
    assert_eq!(
        rules::endpoint_chain(&name, "10.180.0.1:80"),
        "KUBE-SEP-SXIVWICOYRO3J4NJ"
    );
    // The protocol is part of the hash.
    let udp = ServicePortName {
        protocol: Protocol::Udp,
        ..name.clone()
    };
    assert_ne!(rules::port_proto_hash(&udp), rules::port_proto_hash(&name));
}

#[test]
fn probabilities_as_iptables_prints_them() {
    assert_eq!(rules::probability(3), "0.33333333349");
    assert_eq!(rules::probability(2), "0.50000000000");
    assert_eq!(rules::probability(4), "0.25000000000");
    assert_eq!(rules::probability(5), "0.20000000019");
    assert_eq!(rules::probability(10), "0.10000000009");
}

#[test]
fn cluster_ip_with_three_endpoints() {
    let name = spn("ns1", "svc1", "p80");
    let svc = service(name.clone(), "172.30.0.41", 80);
    let eps = [
        ep("10.180.0.1", 80, "node-a"),
        ep("10.180.0.2", 80, "node-b"),
        ep("10.180.0.3", 80, "node-b"),
    ];
    let r = rules::render_service(&svc, &eps, &ctx()).unwrap();
    assert_eq!(
        r.nat_services,
        "-A KUBE-SERVICES -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O\n"
    );
    assert!(r.filter_services.is_empty());
    let sep = |ip: &str| rules::endpoint_chain(&name, &format!("{ip}:80"));
    let expected = format!(
        "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ\n\
         -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.1:80\" -m statistic --mode random --probability 0.33333333349 -j {}\n\
         -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.2:80\" -m statistic --mode random --probability 0.50000000000 -j {}\n\
         -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.3:80\" -j {}\n",
        sep("10.180.0.1"),
        sep("10.180.0.2"),
        sep("10.180.0.3")
    );
    assert_eq!(chain(&r, "KUBE-SVC-XPGD46QRK7WJZT7O"), expected);
    assert_eq!(
        chain(&r, "KUBE-SEP-SXIVWICOYRO3J4NJ"),
        "-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment \"ns1/svc1:p80\" -s 10.180.0.1 -j KUBE-MARK-MASQ\n\
         -A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment \"ns1/svc1:p80\" -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80\n"
    );
    // SVC + 3 SEP, nothing external.
    assert_eq!(r.chains.len(), 4);
    assert!(!has_chain(&r, "KUBE-EXT-"));

    // Large cluster mode drops the per-endpoint comments only.
    let big = rules::render_service(
        &svc,
        &eps,
        &Ctx {
            large: true,
            ..ctx()
        },
    )
    .unwrap();
    assert!(chain(&big, "KUBE-SVC-XPGD46QRK7WJZT7O").contains(
        "-A KUBE-SVC-XPGD46QRK7WJZT7O -m statistic --mode random --probability 0.33333333349 -j"
    ));
    assert!(!chain(&big, "KUBE-SEP-SXIVWICOYRO3J4NJ").contains("comment"));
    assert_eq!(big.nat_services, r.nat_services);
}

#[test]
fn masquerade_without_cluster_cidr_is_unconditional() {
    let svc = service(spn("ns", "s", ""), "10.96.0.10", 53);
    let eps = [ep("10.244.1.5", 53, "node-a")];
    let none = Ctx {
        cluster_cidr: None,
        masquerade_all: true,
        ..ctx()
    };
    let r = rules::render_service(&svc, &eps, &none).unwrap();
    let svc_chain = format!("KUBE-SVC-{}", r.hash);
    let rules_text = chain(&r, &svc_chain);
    assert!(rules_text.starts_with(&format!(
        "-A {svc_chain} -m comment --comment \"ns/s cluster IP\" -m tcp -p tcp -d 10.96.0.10 --dport 53 -j KUBE-MARK-MASQ\n"
    )));
    // A single endpoint: one unconditional jump.
    assert!(!rules_text.contains("statistic"));
}

#[test]
fn session_affinity_uses_recent() {
    let name = spn("ns1", "svc1", "p80");
    let mut svc = service(name.clone(), "172.30.0.41", 80);
    svc.session_affinity_seconds = Some(10800);
    let eps = [
        ep("10.180.0.1", 80, "node-a"),
        ep("10.180.0.2", 80, "node-b"),
    ];
    let r = rules::render_service(&svc, &eps, &ctx()).unwrap();
    let sep1 = rules::endpoint_chain(&name, "10.180.0.1:80");
    let sep2 = rules::endpoint_chain(&name, "10.180.0.2:80");
    let svc_rules: Vec<&str> = chain(&r, "KUBE-SVC-XPGD46QRK7WJZT7O").lines().collect();
    assert_eq!(svc_rules.len(), 5, "{svc_rules:?}");
    assert_eq!(
        svc_rules[1],
        format!("-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.1:80\" -m recent --name {sep1} --rcheck --seconds 10800 --reap -j {sep1}")
    );
    assert!(svc_rules[2].contains(&format!(
        "-m recent --name {sep2} --rcheck --seconds 10800 --reap -j {sep2}"
    )));
    assert!(svc_rules[3].contains("--probability 0.50000000000"));
    assert!(svc_rules[4].ends_with(&format!("-j {sep2}")));
    assert!(chain(&r, &sep1).contains(&format!(
        "-m recent --name {sep1} --set -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80"
    )));
}

#[test]
fn no_endpoints_rejects_in_filter_and_writes_no_nat_chains() {
    let mut svc = service(spn("ns", "empty", "http"), "10.96.0.20", 80);
    svc.node_port = Some(30080);
    svc.external_ips = vec!["192.0.2.1".parse().unwrap()];
    // Endpoints that are neither ready nor serving-terminating count as none.
    let mut not_ready = ep("10.244.1.9", 8080, "node-a");
    not_ready.ready = false;
    not_ready.serving = false;
    let r = rules::render_service(&svc, &[not_ready], &ctx()).unwrap();
    assert!(r.chains.is_empty());
    assert!(r.nat_services.is_empty());
    assert!(r.nat_nodeports.is_empty());
    assert_eq!(
        r.filter_services,
        "-A KUBE-SERVICES -m comment --comment \"ns/empty:http has no endpoints\" -m tcp -p tcp -d 10.96.0.20 --dport 80 -j REJECT\n"
    );
    assert_eq!(
        r.filter_external,
        "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/empty:http has no endpoints\" -m tcp -p tcp -d 192.0.2.1 --dport 80 -j REJECT\n\
         -A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/empty:http has no endpoints\" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30080 -j REJECT\n"
    );
}

#[test]
fn terminating_endpoints_serve_when_none_is_ready() {
    let svc = service(spn("ns", "s", ""), "10.96.0.21", 80);
    let mut draining = ep("10.244.1.3", 80, "node-b");
    draining.ready = false;
    draining.terminating = true;
    let mut gone = ep("10.244.1.4", 80, "node-b");
    gone.ready = false;
    gone.serving = false;
    gone.terminating = true;
    let r = rules::render_service(&svc, &[draining, gone], &ctx()).unwrap();
    let svc_rules = chain(&r, &format!("KUBE-SVC-{}", r.hash));
    assert!(svc_rules.contains("10.244.1.3:80"));
    assert!(!svc_rules.contains("10.244.1.4"));
}

#[test]
fn nodeport_goes_through_the_external_chain() {
    let mut svc = service(spn("ns", "web", "http"), "10.96.0.30", 80);
    svc.node_port = Some(30080);
    let eps = [ep("10.244.2.2", 8080, "node-b")];
    let r = rules::render_service(&svc, &eps, &ctx()).unwrap();
    let h = &r.hash;
    assert_eq!(
        r.nat_nodeports,
        format!("-A KUBE-NODEPORTS -m comment --comment \"ns/web:http\" -m tcp -p tcp --dport 30080 -j KUBE-EXT-{h}\n")
    );
    assert_eq!(
        chain(&r, &format!("KUBE-EXT-{h}")),
        format!(
            "-A KUBE-EXT-{h} -m comment --comment \"masquerade traffic for ns/web:http external destinations\" -j KUBE-MARK-MASQ\n\
             -A KUBE-EXT-{h} -j KUBE-SVC-{h}\n"
        )
    );
    assert!(r.filter_external.is_empty());

    // The dispatch chain ends by handing local destinations to KUBE-NODEPORTS.
    let mut out = String::new();
    rules::nat_nodeports_jump(&mut out, None, true);
    assert_eq!(out, "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n");
    let mut out = String::new();
    rules::nat_nodeports_jump(&mut out, None, false);
    assert!(out.contains("-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KUBE-NODEPORTS"));
    let mut out = String::new();
    let ips = [
        "192.168.1.10".parse().unwrap(),
        "127.0.0.1".parse().unwrap(),
    ];
    rules::nat_nodeports_jump(&mut out, Some(&ips), false);
    assert_eq!(out.lines().count(), 1);
    assert!(out.contains("-d 192.168.1.10 -j KUBE-NODEPORTS"));
}

#[test]
fn external_traffic_policy_local() {
    let mut svc = service(spn("ns", "lb", "http"), "10.96.0.40", 80);
    svc.node_port = Some(30040);
    svc.load_balancer_ips = vec!["203.0.113.5".parse().unwrap()];
    svc.external_policy_local = true;
    svc.health_check_node_port = Some(32000);
    let eps = [
        ep("10.244.1.2", 80, "node-a"),
        ep("10.244.2.2", 80, "node-b"),
    ];
    let r = rules::render_service(&svc, &eps, &ctx()).unwrap();
    let h = r.hash.clone();
    // Cluster IP traffic uses every endpoint; external traffic only the local one.
    assert!(chain(&r, &format!("KUBE-SVC-{h}")).contains("10.244.2.2:80"));
    let svl = chain(&r, &format!("KUBE-SVL-{h}"));
    assert!(svl.contains("10.244.1.2:80") && !svl.contains("10.244.2.2"));
    assert!(!svl.contains("KUBE-MARK-MASQ"), "{svl}");
    assert_eq!(
        chain(&r, &format!("KUBE-EXT-{h}")),
        format!(
            "-A KUBE-EXT-{h} -m comment --comment \"pod traffic for ns/lb:http external destinations\" -s 10.244.0.0/16 -j KUBE-SVC-{h}\n\
             -A KUBE-EXT-{h} -m comment --comment \"masquerade LOCAL traffic for ns/lb:http external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ\n\
             -A KUBE-EXT-{h} -m comment --comment \"route LOCAL traffic for ns/lb:http external destinations\" -m addrtype --src-type LOCAL -j KUBE-SVC-{h}\n\
             -A KUBE-EXT-{h} -j KUBE-SVL-{h}\n"
        )
    );
    assert!(r
        .nat_services
        .contains(&format!("-d 203.0.113.5 --dport 80 -j KUBE-EXT-{h}")));
    assert_eq!(
        r.filter_nodeports,
        "-A KUBE-NODEPORTS -m comment --comment \"ns/lb:http health check node port\" -m tcp -p tcp --dport 32000 -j ACCEPT\n"
    );
    // Both endpoints have a SEP chain (each is reachable one way or the other).
    assert_eq!(
        r.chains
            .iter()
            .filter(|c| c.name.starts_with("KUBE-SEP-"))
            .count(),
        2
    );

    // No local endpoint: external traffic from outside is dropped; pods and the node still
    // get through the EXT chain to the cluster chain.
    let remote_only = [ep("10.244.2.2", 80, "node-b")];
    let r = rules::render_service(&svc, &remote_only, &ctx()).unwrap();
    assert!(!has_chain(&r, "KUBE-SVL-"));
    let ext = chain(&r, &format!("KUBE-EXT-{h}"));
    assert!(!ext.contains(&format!("-j KUBE-SVL-{h}")));
    assert!(ext.contains(&format!("-s 10.244.0.0/16 -j KUBE-SVC-{h}")));
    assert_eq!(
        r.filter_external,
        "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/lb:http has no local endpoints\" -m tcp -p tcp -d 203.0.113.5 --dport 80 -j DROP\n\
         -A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/lb:http has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30040 -j DROP\n"
    );
    // The cluster IP is unaffected.
    assert!(r.nat_services.contains(&format!("-j KUBE-SVC-{h}")));
    assert!(r.filter_services.is_empty());
}

#[test]
fn internal_traffic_policy_local() {
    let mut svc = service(spn("ns", "node-local", ""), "10.96.0.50", 80);
    svc.internal_policy_local = true;
    let eps = [
        ep("10.244.1.2", 80, "node-a"),
        ep("10.244.2.2", 80, "node-b"),
    ];
    let r = rules::render_service(&svc, &eps, &ctx()).unwrap();
    let h = r.hash.clone();
    assert!(!has_chain(&r, "KUBE-SVC-"));
    assert!(r
        .nat_services
        .contains(&format!("-d 10.96.0.50 --dport 80 -j KUBE-SVL-{h}")));
    let svl = chain(&r, &format!("KUBE-SVL-{h}"));
    assert!(svl.starts_with(&format!(
        "-A KUBE-SVL-{h} -m comment --comment \"ns/node-local cluster IP\""
    )));
    assert!(svl.contains("10.244.1.2:80") && !svl.contains("10.244.2.2"));
    // Only the local endpoint gets a chain.
    assert_eq!(r.chains.len(), 2);

    // No local endpoints but some elsewhere: DROP (not REJECT).
    let r = rules::render_service(&svc, &eps[1..], &ctx()).unwrap();
    assert!(r.chains.is_empty());
    assert_eq!(
        r.filter_services,
        "-A KUBE-SERVICES -m comment --comment \"ns/node-local has no local endpoints\" -m tcp -p tcp -d 10.96.0.50 --dport 80 -j DROP\n"
    );
}

#[test]
fn load_balancer_source_ranges() {
    let mut svc = service(spn("ns", "fw", "https"), "10.96.0.60", 443);
    svc.load_balancer_ips = vec!["203.0.113.9".parse().unwrap()];
    svc.load_balancer_source_ranges = vec![
        "192.168.0.0/16".into(),
        " 198.51.100.7/24 ".into(),
        "2001:db8::/32".into(),
        "garbage".into(),
    ];
    let eps = [ep("10.244.3.3", 8443, "node-b")];
    let r = rules::render_service(&svc, &eps, &ctx()).unwrap();
    let h = r.hash.clone();
    assert!(r.nat_services.contains(&format!(
        "\"ns/fw:https loadbalancer IP\" -m tcp -p tcp -d 203.0.113.9 --dport 443 -j KUBE-FW-{h}"
    )));
    assert_eq!(
        chain(&r, &format!("KUBE-FW-{h}")),
        format!(
            "-A KUBE-FW-{h} -m comment --comment \"ns/fw:https loadbalancer IP\" -s 192.168.0.0/16 -j KUBE-EXT-{h}\n\
             -A KUBE-FW-{h} -m comment --comment \"ns/fw:https loadbalancer IP\" -s 198.51.100.0/24 -j KUBE-EXT-{h}\n\
             -A KUBE-FW-{h} -m comment --comment \"ns/fw:https loadbalancer IP\" -s 203.0.113.9 -j KUBE-EXT-{h}\n\
             -A KUBE-FW-{h} -m comment --comment \"other traffic to ns/fw:https will be dropped by KUBE-PROXY-FIREWALL\"\n"
        )
    );
    assert_eq!(
        r.filter_firewall,
        format!("-A KUBE-PROXY-FIREWALL -m comment --comment \"ns/fw:https traffic not accepted by KUBE-FW-{h}\" -m tcp -p tcp -d 203.0.113.9 --dport 443 -j DROP\n")
    );
}

#[test]
fn headless_ipv6_and_odd_input_are_ignored_without_panicking() {
    let mut svc = service(spn("ns", "v6", ""), "fd00::10", 80);
    assert!(rules::render_service(&svc, &[], &ctx()).is_none());
    svc.cluster_ips.clear();
    assert!(rules::render_service(&svc, &[], &ctx()).is_none());

    // Dual stack: the IPv4 cluster IP; IPv6 and port-0 endpoints skipped; duplicates once.
    let mut svc = service(spn("ns", "dual", ""), "fd00::11", 80);
    svc.cluster_ips.push("10.96.0.70".parse().unwrap());
    let eps = [
        ep("fd00:1::5", 80, "node-a"),
        ep("10.244.1.1", 0, "node-a"),
        ep("10.244.1.2", 80, "node-a"),
        ep("10.244.1.2", 80, "node-b"),
    ];
    let r = rules::render_service(&svc, &eps, &ctx()).unwrap();
    assert!(r.nat_services.contains("-d 10.96.0.70 "));
    assert_eq!(r.chains.len(), 2, "{:?}", r.chains);

    // Comments cannot break out of their quotes.
    assert_eq!(rules::comment("a\"b\nc"), "\"a_b_c\"");
    assert_eq!(rules::comment(&"x".repeat(1000)).len(), 257);
    assert!(rules::comment(&"é".repeat(1000)).len() <= 257);
}

#[test]
fn cluster_cidr_parsing() {
    let node = |cidr: &str| NodeInfo {
        name: "n".into(),
        ips: vec![],
        cluster_cidr: Some(cidr.into()),
    };
    let fake = || -> Box<dyn Iptables> { Box::new(Fake::default()) };
    let p = IptablesProxier::with_runner(node("10.244.0.0/16,fd00::/48"), fake()).unwrap();
    assert_eq!(p.ctx.cluster_cidr, rules::Cidr::parse("10.244.0.0/16"));
    assert!(!p.ctx.masquerade_all);
    let p = IptablesProxier::with_runner(node("fd00::/48"), fake()).unwrap();
    assert!(p.ctx.cluster_cidr.is_none() && p.ctx.masquerade_all);
    let err = IptablesProxier::with_runner(node("10.244.0.0/99"), fake())
        .err()
        .unwrap();
    assert!(err.to_string().contains("invalid cluster CIDR"), "{err}");
}

/// Records what the proxier asks of iptables; `save` answers from `tables`.
#[derive(Clone, Default)]
struct Fake(Arc<Mutex<FakeState>>);

#[derive(Default)]
struct FakeState {
    restores: Vec<String>,
    saves: usize,
    tables: BTreeMap<String, String>,
    rules: Vec<(String, String, Vec<String>)>,
    inserts: usize,
    sysctls: Vec<(String, String)>,
    fail_next_restore: bool,
    canary_gone: bool,
    canary_checks: usize,
}

impl Iptables for Fake {
    fn restore(&mut self, input: &str) -> anyhow::Result<()> {
        let mut s = self.0.lock();
        if s.fail_next_restore {
            s.fail_next_restore = false;
            anyhow::bail!("iptables-restore failed: injected");
        }
        s.restores.push(input.to_string());
        Ok(())
    }
    fn save(&mut self, table: &str) -> anyhow::Result<String> {
        let mut s = self.0.lock();
        s.saves += 1;
        Ok(s.tables.get(table).cloned().unwrap_or_default())
    }
    fn check(&mut self, table: &str, chain: &str, args: &[String]) -> anyhow::Result<bool> {
        let s = self.0.lock();
        Ok(s.rules
            .contains(&(table.into(), chain.into(), args.to_vec())))
    }
    fn chain_exists(&mut self, table: &str, chain: &str) -> anyhow::Result<bool> {
        assert_eq!((table, chain), ("mangle", "KUBE-PROXY-CANARY"));
        let mut s = self.0.lock();
        s.canary_checks += 1;
        Ok(!s.canary_gone)
    }
    fn insert(&mut self, table: &str, chain: &str, args: &[String]) -> anyhow::Result<()> {
        let mut s = self.0.lock();
        s.inserts += 1;
        s.rules.push((table.into(), chain.into(), args.to_vec()));
        Ok(())
    }
    fn sysctl_get(&mut self, _key: &str) -> Option<String> {
        None
    }
    fn sysctl_set(&mut self, key: &str, value: &str) -> anyhow::Result<()> {
        self.0.lock().sysctls.push((key.into(), value.into()));
        Ok(())
    }
}

fn proxier(fake: &Fake) -> IptablesProxier {
    IptablesProxier::with_runner(
        NodeInfo {
            name: "node-a".into(),
            ips: vec!["192.168.1.10".parse().unwrap()],
            cluster_cidr: Some("10.244.0.0/16".into()),
        },
        Box::new(fake.clone()),
    )
    .unwrap()
}

fn snapshot(services: &[(ServicePort, Vec<Endpoint>)]) -> Snapshot {
    let mut s = Snapshot::default();
    for (svc, eps) in services {
        s.services.insert(svc.name.clone(), Arc::new(svc.clone()));
        if !eps.is_empty() {
            s.endpoints.insert(svc.name.clone(), Arc::new(eps.clone()));
        }
    }
    s
}

fn three_services() -> Vec<(ServicePort, Vec<Endpoint>)> {
    vec![
        (
            service(spn("ns", "a", ""), "10.96.0.1", 80),
            vec![
                ep("10.244.1.1", 80, "node-a"),
                ep("10.244.1.2", 80, "node-b"),
            ],
        ),
        (
            service(spn("ns", "b", ""), "10.96.0.2", 80),
            vec![ep("10.244.2.1", 80, "node-a")],
        ),
        (service(spn("ns", "c", ""), "10.96.0.3", 80), vec![]),
    ]
}

/// The chains a restore input declares, per table section.
fn declared(input: &str) -> HashSet<String> {
    input
        .lines()
        .filter_map(|l| l.strip_prefix(':'))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

fn deleted(input: &str) -> HashSet<String> {
    input
        .lines()
        .filter_map(|l| l.strip_prefix("-X "))
        .map(String::from)
        .collect()
}

fn svc_chain(name: &ServicePortName) -> String {
    format!("KUBE-SVC-{}", rules::port_proto_hash(name))
}

#[test]
fn first_sync_links_chains_and_writes_everything() {
    let fake = Fake::default();
    let mut p = proxier(&fake);
    let services = three_services();
    p.sync(&snapshot(&services)).unwrap();
    let stats = p.last_sync().clone();
    assert!(stats.full);
    assert_eq!(stats.services, 3);

    let s = fake.0.lock();
    // 12 jump rules plus KUBE-FIREWALL from INPUT and OUTPUT (localhost NodePorts).
    assert_eq!(s.inserts, 14);
    assert!(s.rules.contains(&(
        "nat".into(),
        "PREROUTING".into(),
        [
            "-m",
            "comment",
            "--comment",
            "kubernetes service portals",
            "-j",
            "KUBE-SERVICES"
        ]
        .map(String::from)
        .to_vec()
    )));
    assert!(s.rules.contains(&(
        "filter".into(),
        "OUTPUT".into(),
        [
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "comment",
            "--comment",
            "kubernetes service portals",
            "-j",
            "KUBE-SERVICES"
        ]
        .map(String::from)
        .to_vec()
    )));
    assert_eq!(
        s.sysctls,
        vec![(
            "net.ipv4.conf.all.route_localnet".to_string(),
            "1".to_string()
        )]
    );
    // Top-level chains created first, then one transaction with everything.
    assert_eq!(s.restores.len(), 2, "{:?}", s.restores);
    let last = &s.restores[1];
    let chains = declared(last);
    assert!(chains.contains(&svc_chain(&services[0].0.name)));
    assert!(chains.contains(&svc_chain(&services[1].0.name)));
    // The service without endpoints has no nat chain, a REJECT instead.
    assert!(!chains.contains(&svc_chain(&services[2].0.name)));
    assert!(
        last.contains("\"ns/c has no endpoints\" -m tcp -p tcp -d 10.96.0.3 --dport 80 -j REJECT")
    );
    assert!(last.contains("-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000"));
    assert!(last.contains("-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully"));
    assert!(last.contains("-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT"));
    // Filter table first, nat second, each committed.
    assert!(last.starts_with("*filter\n"));
    assert_eq!(last.matches("COMMIT\n").count(), 2);
    // The nodeports jump is the last rule of nat KUBE-SERVICES.
    let last_services_rule = last
        .lines()
        .rfind(|l| l.starts_with("-A KUBE-SERVICES"))
        .unwrap();
    assert!(last_services_rule.ends_with("-j KUBE-NODEPORTS"));
    drop(s);

    // A second proxier (a restart) does not duplicate the jump rules.
    let mut again = proxier(&fake);
    again.sync(&snapshot(&services)).unwrap();
    assert_eq!(fake.0.lock().inserts, 14);
}

#[test]
fn incremental_sync_writes_only_what_changed() {
    let fake = Fake::default();
    let mut p = proxier(&fake);
    let mut services = three_services();
    p.sync(&snapshot(&services)).unwrap();
    let saves = fake.0.lock().saves;
    let first = fake.0.lock().restores.len();

    // Nothing changed: nothing to write, not even the top-level chains.
    p.sync(&snapshot(&services)).unwrap();
    {
        let s = fake.0.lock();
        assert_eq!(s.saves, saves, "an incremental sync reads nothing back");
        assert_eq!(s.restores.len(), first);
    }
    assert_eq!(p.last_sync().chains_written, 0);
    assert_eq!(p.last_sync().top_chains_written, 0);
    assert_eq!(p.last_sync().restores, 0);

    // Service a: one endpoint replaced.
    services[0].1 = vec![
        ep("10.244.1.1", 80, "node-a"),
        ep("10.244.1.3", 80, "node-b"),
    ];
    p.sync(&snapshot(&services)).unwrap();
    {
        let s = fake.0.lock();
        let input = s.restores.last().unwrap();
        let name = &services[0].0.name;
        let chains = declared(input);
        let kept = rules::endpoint_chain(name, "10.244.1.1:80");
        let added = rules::endpoint_chain(name, "10.244.1.3:80");
        let removed = rules::endpoint_chain(name, "10.244.1.2:80");
        assert!(chains.contains(&svc_chain(name)));
        assert!(chains.contains(&added));
        assert!(
            !chains.contains(&kept),
            "unchanged endpoint chain rewritten"
        );
        assert!(!chains.contains(&svc_chain(&services[1].0.name)));
        // The dispatch rules did not change, so the top-level chains are left alone.
        assert!(!input.contains("*filter"));
        assert!(!chains.contains("KUBE-SERVICES"), "{input}");
        assert_eq!(deleted(input), HashSet::from([removed.clone()]));
        // Declared (flushed) before it is deleted.
        assert!(chains.contains(&removed));
    }
    assert_eq!(p.last_sync().chains_written, 2);
    assert_eq!(p.last_sync().chains_deleted, 1);

    // Service b removed, c gains an endpoint.
    let b = services.remove(1);
    services[1].1 = vec![ep("10.244.3.1", 80, "node-b")];
    p.sync(&snapshot(&services)).unwrap();
    {
        let s = fake.0.lock();
        let input = s.restores.last().unwrap();
        assert_eq!(
            deleted(input),
            HashSet::from([
                svc_chain(&b.0.name),
                rules::endpoint_chain(&b.0.name, "10.244.2.1:80")
            ])
        );
        assert!(declared(input).contains(&svc_chain(&services[1].0.name)));
        assert!(!input.contains("has no endpoints"));
        assert!(!input.contains("10.96.0.2"));
        // Both tables' KUBE-SERVICES rewritten: c moved from filter (REJECT) to nat.
        let (filter, nat) = input.split_once("*nat\n").unwrap();
        assert!(declared(filter).contains("KUBE-SERVICES"));
        assert!(declared(nat).contains("KUBE-SERVICES"));
        assert!(!declared(nat).contains("KUBE-POSTROUTING"));
        assert!(nat.contains("-d 10.96.0.3 --dport 80 -j KUBE-SVC-"));
    }
}

#[test]
fn first_sync_removes_leftover_chains_only_of_ours() {
    let fake = Fake::default();
    fake.0.lock().tables.insert(
        "nat".into(),
        "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-LEFTOVER0000000 - [0:0]\n:KUBE-SEP-LEFTOVER0000000 - [0:0]\n:DOCKER - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n".into(),
    );
    fake.0.lock().tables.insert(
        "filter".into(),
        "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n:KUBE-FORWARD - [0:0]\nCOMMIT\n"
            .into(),
    );
    let mut p = proxier(&fake).localhost_nodeports(false);
    let services = three_services();
    p.sync(&snapshot(&services)).unwrap();
    let s = fake.0.lock();
    // create, final, then flush and delete.
    assert_eq!(s.restores.len(), 4, "{:#?}", s.restores);
    let input = &s.restores[1];
    assert!(
        deleted(input).is_empty(),
        "deletions wait until the rules are right"
    );
    let all_deleted: HashSet<String> = s.restores[2..].iter().flat_map(|i| deleted(i)).collect();
    assert_eq!(
        all_deleted,
        HashSet::from([
            "KUBE-SVC-LEFTOVER0000000".to_string(),
            "KUBE-SEP-LEFTOVER0000000".to_string(),
        ])
    );
    assert!(
        s.restores[2].starts_with("*nat\n")
            && declared(&s.restores[2]).contains("KUBE-SVC-LEFTOVER0000000")
    );
    // Existing top-level chains are not re-created (which would flush them early).
    let create = &s.restores[0];
    let (filter, nat) = create.split_once("*nat\n").unwrap();
    assert!(!declared(nat).contains("KUBE-SERVICES"));
    assert!(declared(nat).contains("KUBE-MARK-MASQ"));
    assert!(!declared(filter).contains("KUBE-FORWARD"));
    assert!(declared(filter).contains("KUBE-SERVICES"));
    assert!(s.sysctls.is_empty());
    assert!(input.contains("-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KUBE-NODEPORTS"));
}

#[test]
fn many_changes_are_written_in_chunks_before_the_final_transaction() {
    let fake = Fake::default();
    let mut p = proxier(&fake);
    p.chunk_lines = 20;
    let services: Vec<(ServicePort, Vec<Endpoint>)> = (0..30u8)
        .map(|i| {
            (
                service(spn("ns", &format!("s{i}"), ""), &format!("10.96.1.{i}"), 80),
                vec![
                    ep(&format!("10.244.4.{i}"), 80, "node-a"),
                    ep(&format!("10.244.5.{i}"), 80, "node-b"),
                ],
            )
        })
        .collect();
    p.sync(&snapshot(&services)).unwrap();
    let s = fake.0.lock();
    let chunks = &s.restores[1..s.restores.len() - 1];
    assert!(chunks.len() >= 5, "{} chunks", chunks.len());
    let mut written = HashSet::new();
    for chunk in chunks {
        assert!(chunk.starts_with("*nat\n") && chunk.ends_with("COMMIT\n"));
        assert!(
            !chunk.contains("KUBE-SERVICES"),
            "chunks leave dispatch alone"
        );
        let names = declared(chunk);
        // A service's chains travel together: every jump target is in the same chunk.
        for l in chunk.lines().filter(|l| l.starts_with("-A ")) {
            if let Some((_, target)) = l.rsplit_once(" -j ") {
                if target.starts_with("KUBE-SEP-") {
                    assert!(names.contains(target), "{target} not in its chunk");
                }
            }
        }
        // Descending name order.
        let order: Vec<&str> = chunk
            .lines()
            .filter_map(|l| l.strip_prefix(':'))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let mut sorted = order.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(order, sorted);
        written.extend(names);
    }
    assert_eq!(written.len(), 90);
    let last = s.restores.last().unwrap();
    assert!(declared(last).iter().all(|c| !c.starts_with("KUBE-SEP-")));
    assert_eq!(last.matches("-A KUBE-SERVICES").count(), 31);
}

#[test]
fn a_failed_sync_makes_the_next_one_full() {
    let fake = Fake::default();
    let mut p = proxier(&fake);
    let mut services = three_services();
    p.sync(&snapshot(&services)).unwrap();
    let saves = fake.0.lock().saves;
    fake.0.lock().fail_next_restore = true;
    services[1].1.push(ep("10.244.2.9", 80, "node-b"));
    let err = p.sync(&snapshot(&services)).unwrap_err();
    assert!(format!("{err:#}").contains("injected"), "{err:#}");
    p.sync(&snapshot(&services)).unwrap();
    assert!(p.last_sync().full);
    assert_eq!(fake.0.lock().saves, saves + 2);
    // Everything written again.
    let s = fake.0.lock();
    assert!(declared(s.restores.last().unwrap()).contains(&svc_chain(&services[0].0.name)));
}

#[test]
fn a_lost_canary_or_an_hour_makes_a_full_sync() {
    let fake = Fake::default();
    let mut p = proxier(&fake);
    let services = three_services();
    p.sync(&snapshot(&services)).unwrap();
    assert!(fake.0.lock().restores[0].starts_with("*mangle\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n"));
    // Within the check period the canary is not looked at.
    p.sync(&snapshot(&services)).unwrap();
    assert_eq!(fake.0.lock().canary_checks, 0);
    assert!(!p.last_sync().full);

    p.canary_period = Duration::ZERO;
    p.sync(&snapshot(&services)).unwrap();
    assert_eq!(fake.0.lock().canary_checks, 1);
    assert!(!p.last_sync().full);

    // Flushed by someone: everything is written again.
    fake.0.lock().canary_gone = true;
    p.sync(&snapshot(&services)).unwrap();
    assert!(p.last_sync().full);
    assert!(p.last_sync().chains_written >= 3);
    fake.0.lock().canary_gone = false;

    // An hour after the last full sync.
    p.canary_period = Duration::from_secs(3600);
    p.last_full = Instant::now().checked_sub(Duration::from_secs(3601));
    p.sync(&snapshot(&services)).unwrap();
    assert!(p.last_sync().full);
    p.sync(&snapshot(&services)).unwrap();
    assert!(!p.last_sync().full);
}

#[test]
fn cleanup_unlinks_and_removes_our_chains() {
    let fake = Fake::default();
    let mut p = proxier(&fake);
    p.sync(&snapshot(&three_services())).unwrap();
    fake.0.lock().tables.insert(
        "nat".into(),
        "*nat\n:OUTPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]\n:CNI-HOSTPORT - [0:0]\n\
         -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
         -A OUTPUT -j CNI-HOSTPORT\n\
         -A KUBE-SERVICES -j KUBE-SVC-AAAAAAAAAAAAAAAA\nCOMMIT\n"
            .into(),
    );
    fake.0.lock().tables.insert(
        "filter".into(),
        "*filter\n:KUBE-FORWARD - [0:0]\n:KUBE-FIREWALL - [0:0]\n:OTHER - [0:0]\n\
         -A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD\n\
         -A INPUT -j KUBE-FIREWALL\n-A INPUT -j OTHER\nCOMMIT\n"
            .into(),
    );
    let before = fake.0.lock().restores.len();
    p.cleanup().unwrap();
    let s = fake.0.lock();
    let inputs = &s.restores[before..];
    let unlinked: Vec<&str> = inputs
        .iter()
        .flat_map(|i| i.lines())
        .filter(|l| l.starts_with("-D "))
        .collect();
    assert_eq!(
        unlinked,
        vec![
            "-D FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD",
            "-D INPUT -j KUBE-FIREWALL",
            "-D OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
            "-D OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
        ]
    );
    let all_deleted: HashSet<String> = inputs.iter().flat_map(|i| deleted(i)).collect();
    assert_eq!(
        all_deleted,
        HashSet::from(
            [
                "KUBE-SERVICES",
                "KUBE-MARK-MASQ",
                "KUBE-SVC-AAAAAAAAAAAAAAAA",
                "KUBE-FORWARD",
                "KUBE-FIREWALL"
            ]
            .map(String::from)
        )
    );
    // Each unlinked, then flushed, in an earlier transaction than the one deleting it.
    let mut flushed = HashSet::new();
    for input in inputs {
        for c in deleted(input) {
            assert!(flushed.contains(&c), "{c} deleted before it was flushed");
        }
        assert!(!(input.contains("-D ") && input.contains("\n:")));
        flushed.extend(declared(input));
    }
    drop(s);
    // Afterwards, a sync starts over.
    p.sync(&snapshot(&three_services())).unwrap();
    assert!(p.last_sync().full);
}
