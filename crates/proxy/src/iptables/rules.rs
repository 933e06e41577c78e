//! What the iptables proxier writes: chain names, the fixed top-level rules, and the rules of
//! one service port. Pure functions of their input, so that they can be tested without
//! running iptables.
//!
//! Rule text is in `iptables-restore` syntax, in the argument order Kubernetes' iptables
//! proxier writes, one `-A ...` line per rule.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};

use crate::{usable_endpoints, Endpoint, ServicePort, ServicePortName};

pub(crate) const KUBE_SERVICES: &str = "KUBE-SERVICES";
pub(crate) const KUBE_EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
pub(crate) const KUBE_NODEPORTS: &str = "KUBE-NODEPORTS";
pub(crate) const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
pub(crate) const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
pub(crate) const KUBE_FORWARD: &str = "KUBE-FORWARD";
pub(crate) const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
/// An empty chain in mangle whose disappearance tells that the tables were flushed.
pub(crate) const KUBE_PROXY_CANARY: &str = "KUBE-PROXY-CANARY";
/// The anti-martian chain kubelet also keeps; written only with localhost NodePorts.
pub(crate) const KUBE_FIREWALL: &str = "KUBE-FIREWALL";

/// The bit that marks packets to masquerade (`--masquerade-bit` 14).
pub(crate) const MASQ_MARK: &str = "0x4000";

/// The per-service chain prefixes; any chain so named is this proxier's.
pub(crate) const SERVICE_CHAIN_PREFIXES: [&str; 5] = [
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-EXT-",
    "KUBE-FW-",
    "KUBE-SEP-",
];

/// The fixed chains of the nat table, declared (so flushed and rewritten) on every sync.
pub(crate) const NAT_TOP_CHAINS: [&str; 4] = [
    KUBE_SERVICES,
    KUBE_NODEPORTS,
    KUBE_POSTROUTING,
    KUBE_MARK_MASQ,
];

/// The fixed chains of the filter table (KUBE-FIREWALL comes on top with localhost NodePorts).
pub(crate) const FILTER_TOP_CHAINS: [&str; 5] = [
    KUBE_SERVICES,
    KUBE_EXTERNAL_SERVICES,
    KUBE_FORWARD,
    KUBE_NODEPORTS,
    KUBE_PROXY_FIREWALL,
];

/// Above this many endpoints in all, per-endpoint rules go without comments, as Kubernetes'
/// "large cluster mode" does, to keep the ruleset small.
pub(crate) const LARGE_CLUSTER_ENDPOINTS: usize = 1000;

/// Whether a chain in `table` is one this proxier creates (and so may flush or delete).
pub(crate) fn is_owned_chain(table: &str, chain: &str) -> bool {
    match table {
        "nat" => {
            NAT_TOP_CHAINS.contains(&chain)
                || SERVICE_CHAIN_PREFIXES.iter().any(|p| chain.starts_with(p))
        }
        "filter" => FILTER_TOP_CHAINS.contains(&chain) || chain == KUBE_FIREWALL,
        "mangle" => chain == KUBE_PROXY_CANARY,
        _ => false,
    }
}

/// A rule that sends a built-in chain's packets to one of ours; installed with `-C`/`-I`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Jump {
    pub table: &'static str,
    /// The built-in chain the rule is inserted into.
    pub from: &'static str,
    /// Our chain it jumps to.
    pub to: &'static str,
    /// The rule's arguments after `-I <from>` (ending in `-j <to>`).
    pub args: Vec<String>,
}

/// The jump rules from the built-in chains, in the order Kubernetes ensures them (each is
/// prepended, so the last ensured ends up first).
pub(crate) fn jumps(localhost_nodeports: bool) -> Vec<Jump> {
    const NEW: &[&str] = &["-m", "conntrack", "--ctstate", "NEW"];
    let list: [(&str, &str, &str, &str, &[&str]); 12] = [
        (
            "filter",
            "INPUT",
            KUBE_EXTERNAL_SERVICES,
            "kubernetes externally-visible service portals",
            NEW,
        ),
        (
            "filter",
            "FORWARD",
            KUBE_EXTERNAL_SERVICES,
            "kubernetes externally-visible service portals",
            NEW,
        ),
        (
            "filter",
            "INPUT",
            KUBE_NODEPORTS,
            "kubernetes health check service ports",
            &[],
        ),
        (
            "filter",
            "FORWARD",
            KUBE_SERVICES,
            "kubernetes service portals",
            NEW,
        ),
        (
            "filter",
            "OUTPUT",
            KUBE_SERVICES,
            "kubernetes service portals",
            NEW,
        ),
        (
            "filter",
            "FORWARD",
            KUBE_FORWARD,
            "kubernetes forwarding rules",
            &[],
        ),
        (
            "filter",
            "INPUT",
            KUBE_PROXY_FIREWALL,
            "kubernetes load balancer firewall",
            NEW,
        ),
        (
            "filter",
            "OUTPUT",
            KUBE_PROXY_FIREWALL,
            "kubernetes load balancer firewall",
            NEW,
        ),
        (
            "filter",
            "FORWARD",
            KUBE_PROXY_FIREWALL,
            "kubernetes load balancer firewall",
            NEW,
        ),
        (
            "nat",
            "OUTPUT",
            KUBE_SERVICES,
            "kubernetes service portals",
            &[],
        ),
        (
            "nat",
            "PREROUTING",
            KUBE_SERVICES,
            "kubernetes service portals",
            &[],
        ),
        (
            "nat",
            "POSTROUTING",
            KUBE_POSTROUTING,
            "kubernetes postrouting rules",
            &[],
        ),
    ];
    let mut out: Vec<Jump> = list
        .iter()
        .map(|&(table, from, to, comment, extra)| {
            let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            args.extend(["-m", "comment", "--comment", comment].map(String::from));
            args.extend(["-j", to].map(String::from));
            Jump {
                table,
                from,
                to,
                args,
            }
        })
        .collect();
    if localhost_nodeports {
        for from in ["INPUT", "OUTPUT"] {
            out.push(Jump {
                table: "filter",
                from,
                to: KUBE_FIREWALL,
                args: vec!["-j".into(), KUBE_FIREWALL.into()],
            });
        }
    }
    out
}

pub(crate) use crate::cidr::Cidr;

/// What rendering depends on besides the service and its endpoints.
#[derive(Clone, Debug)]
pub(crate) struct Ctx {
    pub node_name: String,
    /// This node's IPv4 addresses (a load balancer source range containing one lets the node
    /// reach the load balancer IP).
    pub node_ips: Vec<Ipv4Addr>,
    /// The IPv4 pod CIDR: traffic to a cluster IP from outside it is masqueraded; pod traffic
    /// to external destinations of Local services short-circuits to the cluster chain.
    pub cluster_cidr: Option<Cidr>,
    /// Masquerade all traffic to cluster IPs (also the case without a cluster CIDR).
    pub masquerade_all: bool,
    /// Large cluster mode: no comments on per-endpoint rules.
    pub large: bool,
}

/// The first 16 characters of the base32 (RFC 4648) SHA-256 of `input`, as Kubernetes names
/// its per-service and per-endpoint chains.
pub(crate) fn hash16(input: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = ring::digest::digest(&ring::digest::SHA256, input.as_bytes());
    // 16 base32 characters are exactly the first 80 bits (10 bytes).
    let bytes = &digest.as_ref()[..10];
    let mut bits: u128 = 0;
    for b in bytes {
        bits = (bits << 8) | u128::from(*b);
    }
    (0..16)
        .map(|i| ALPHABET[((bits >> (75 - 5 * i)) & 31) as usize] as char)
        .collect()
}

/// The hash naming a service port's chains: of `namespace/name:port` and the protocol.
pub(crate) fn port_proto_hash(name: &ServicePortName) -> String {
    hash16(&format!("{name}{}", name.protocol.as_str()))
}

/// `KUBE-SEP-...` for an endpoint (`ip:port`) of a service port.
pub(crate) fn endpoint_chain(name: &ServicePortName, endpoint: &str) -> String {
    format!(
        "KUBE-SEP-{}",
        hash16(&format!("{name}{}{endpoint}", name.protocol.as_str()))
    )
}

/// The `--probability` of the rule picking one of `n` remaining endpoints, 1/n, spelled as
/// iptables-save prints it back. Kubernetes writes 1/n with ten decimals; the kernel keeps it
/// as a fraction of 2^31, which iptables prints with eleven (`0.33333333349` for 1/3).
/// Writing that form means what we write and what iptables shows are the same text.
pub(crate) fn probability(n: usize) -> String {
    let as_kubernetes_writes = format!("{:.10}", 1.0 / n.max(1) as f64);
    let p: f64 = as_kubernetes_writes.parse().unwrap_or(0.0);
    let fixed = (p * 2_147_483_648.0).round();
    format!("{:.11}", fixed / 2_147_483_648.0)
}

/// A comment argument, quoted for iptables-restore: anything that could break the quoting
/// or the line is replaced, and the text is cut to the 255 bytes xt_comment allows.
pub(crate) fn comment(text: &str) -> String {
    let mut clean = String::with_capacity(text.len() + 2);
    clean.push('"');
    for c in text.chars() {
        let c = if c == '"' || c == '\\' || c.is_control() {
            '_'
        } else {
            c
        };
        // One byte for the opening quote.
        if clean.len() - 1 + c.len_utf8() > 255 {
            break;
        }
        clean.push(c);
    }
    clean.push('"');
    clean
}

/// One chain owned by a service port, with its rules (`-A` lines, each ending in `\n`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChainRules {
    pub name: String,
    pub rules: String,
}

/// Everything one service port contributes to the ruleset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rendered {
    /// The port's hash; orders services in the dispatch chains.
    pub hash: String,
    /// Rules for the shared top-level chains (rewritten whenever any of them changes).
    pub nat_services: String,
    pub nat_nodeports: String,
    pub filter_services: String,
    pub filter_external: String,
    pub filter_nodeports: String,
    pub filter_firewall: String,
    /// The nat chains only this port uses (SVC, SVL, EXT, FW, SEP).
    pub chains: Vec<ChainRules>,
}

/// Render one service port; None when it has no IPv4 cluster IP (headless, IPv6-only), which
/// this proxier leaves alone.
pub(crate) fn render_service(
    svc: &ServicePort,
    endpoints: &[Endpoint],
    ctx: &Ctx,
) -> Option<Rendered> {
    let cluster_ip = svc.cluster_ips.iter().find_map(v4)?;
    let name = &svc.name;
    let spn = name.to_string();
    let p = name.protocol.as_str();
    let port = svc.port;
    let hash = port_proto_hash(name);
    let svc_chain = format!("KUBE-SVC-{hash}");
    let svl_chain = format!("KUBE-SVL-{hash}");
    let ext_chain = format!("KUBE-EXT-{hash}");
    let fw_chain = format!("KUBE-FW-{hash}");

    let external_ips: Vec<Ipv4Addr> = dedup(svc.external_ips.iter().filter_map(v4));
    let lb_ips: Vec<Ipv4Addr> = dedup(svc.load_balancer_ips.iter().filter_map(v4));
    let source_ranges: Vec<Cidr> = svc
        .load_balancer_source_ranges
        .iter()
        .filter_map(|s| Cidr::parse(s))
        .collect();
    let node_port = svc.node_port.filter(|&np| np != 0);
    let externally_accessible =
        node_port.is_some() || !external_ips.is_empty() || !lb_ips.is_empty();
    let internal_local = svc.internal_policy_local;
    let external_local = svc.external_policy_local && externally_accessible;
    // Which endpoint sets the port needs: Cluster ones for Cluster internal policy, and for
    // any external traffic (with Local, pods and the node itself still reach all of them).
    let uses_cluster_endpoints = !internal_local || externally_accessible;
    let uses_local_endpoints = internal_local || external_local;

    // IPv4 endpoints with a port, one per ip:port.
    let mut seen = HashSet::new();
    let eps: Vec<&Endpoint> = endpoints
        .iter()
        .filter(|e| e.ip.is_ipv4() && e.port != 0)
        .filter(|e| seen.insert((e.ip, e.port)))
        .collect();
    let usable_anywhere = usable_endpoints(eps.iter().copied());
    let has_endpoints = !usable_anywhere.is_empty();
    let cluster: Vec<&Endpoint> = if uses_cluster_endpoints {
        usable_anywhere
    } else {
        Vec::new()
    };
    let local: Vec<&Endpoint> = if uses_local_endpoints {
        usable_endpoints(
            eps.iter()
                .copied()
                .filter(|e| e.node_name.as_deref() == Some(ctx.node_name.as_str())),
        )
    } else {
        Vec::new()
    };

    let internal_chain = if internal_local {
        &svl_chain
    } else {
        &svc_chain
    };
    let has_internal = if internal_local {
        !local.is_empty()
    } else {
        has_endpoints
    };
    let external_policy_chain = if external_local {
        &svl_chain
    } else {
        &svc_chain
    };
    let has_external = if external_local {
        !local.is_empty()
    } else {
        has_endpoints
    };
    // The EXT chain exists whenever there are endpoints anywhere, even if none serve external
    // traffic here: it still short-circuits traffic from pods and from the node itself.
    let uses_ext_chain = has_endpoints && externally_accessible;
    let uses_fw_chain = has_endpoints && !lb_ips.is_empty() && !source_ranges.is_empty();
    let lb_chain = if uses_fw_chain { &fw_chain } else { &ext_chain };

    let (internal_filter, external_filter) = if !has_endpoints {
        let c = comment(&format!("{spn} has no endpoints"));
        (Some(("REJECT", c.clone())), Some(("REJECT", c)))
    } else {
        let c = comment(&format!("{spn} has no local endpoints"));
        (
            (!has_internal).then(|| ("DROP", c.clone())),
            (!has_external).then_some(("DROP", c)),
        )
    };

    let mut r = Rendered {
        hash,
        ..Rendered::default()
    };
    let w = |out: &mut String, args: std::fmt::Arguments<'_>| {
        let _ = out.write_fmt(args);
        out.push('\n');
    };

    // The cluster IP.
    if has_internal {
        w(
            &mut r.nat_services,
            format_args!(
                "-A {KUBE_SERVICES} -m comment --comment {} -m {p} -p {p} -d {cluster_ip} --dport {port} -j {internal_chain}",
                comment(&format!("{spn} cluster IP"))
            ),
        );
    } else if let Some((target, c)) = &internal_filter {
        w(
            &mut r.filter_services,
            format_args!(
                "-A {KUBE_SERVICES} -m comment --comment {c} -m {p} -p {p} -d {cluster_ip} --dport {port} -j {target}"
            ),
        );
    }

    // External IPs.
    for ip in &external_ips {
        if has_endpoints {
            w(
                &mut r.nat_services,
                format_args!(
                    "-A {KUBE_SERVICES} -m comment --comment {} -m {p} -p {p} -d {ip} --dport {port} -j {ext_chain}",
                    comment(&format!("{spn} external IP"))
                ),
            );
        }
        if let Some((target, c)) = &external_filter {
            w(
                &mut r.filter_external,
                format_args!(
                    "-A {KUBE_EXTERNAL_SERVICES} -m comment --comment {c} -m {p} -p {p} -d {ip} --dport {port} -j {target}"
                ),
            );
        }
    }

    // Load balancer IPs.
    for ip in &lb_ips {
        if has_endpoints {
            w(
                &mut r.nat_services,
                format_args!(
                    "-A {KUBE_SERVICES} -m comment --comment {} -m {p} -p {p} -d {ip} --dport {port} -j {lb_chain}",
                    comment(&format!("{spn} loadbalancer IP"))
                ),
            );
        }
        if uses_fw_chain {
            w(
                &mut r.filter_firewall,
                format_args!(
                    "-A {KUBE_PROXY_FIREWALL} -m comment --comment {} -m {p} -p {p} -d {ip} --dport {port} -j DROP",
                    comment(&format!("{spn} traffic not accepted by {fw_chain}"))
                ),
            );
        }
    }
    if let Some((target, c)) = &external_filter {
        for ip in &lb_ips {
            w(
                &mut r.filter_external,
                format_args!(
                    "-A {KUBE_EXTERNAL_SERVICES} -m comment --comment {c} -m {p} -p {p} -d {ip} --dport {port} -j {target}"
                ),
            );
        }
    }

    // The NodePort.
    if let Some(np) = node_port {
        if has_endpoints {
            w(
                &mut r.nat_nodeports,
                format_args!(
                    "-A {KUBE_NODEPORTS} -m comment --comment {} -m {p} -p {p} --dport {np} -j {ext_chain}",
                    comment(&spn)
                ),
            );
        }
        if let Some((target, c)) = &external_filter {
            w(
                &mut r.filter_external,
                format_args!(
                    "-A {KUBE_EXTERNAL_SERVICES} -m comment --comment {c} -m addrtype --dst-type LOCAL -m {p} -p {p} --dport {np} -j {target}"
                ),
            );
        }
    }

    // The health check NodePort is open whether or not there are local endpoints.
    if let Some(hc) = svc.health_check_node_port.filter(|&hc| hc != 0) {
        w(
            &mut r.filter_nodeports,
            format_args!(
                "-A {KUBE_NODEPORTS} -m comment --comment {} -m tcp -p tcp --dport {hc} -j ACCEPT",
                comment(&format!("{spn} health check node port"))
            ),
        );
    }

    // The service's own chains.
    let mut svc_rules = String::new();
    let mut svl_rules = String::new();
    if has_internal {
        let out = if internal_local {
            &mut svl_rules
        } else {
            &mut svc_rules
        };
        let source = match (ctx.masquerade_all, ctx.cluster_cidr) {
            (false, Some(cidr)) => format!(" ! -s {cidr}"),
            _ => String::new(),
        };
        w(
            out,
            format_args!(
                "-A {internal_chain} -m comment --comment {} -m {p} -p {p} -d {cluster_ip} --dport {port}{source} -j {KUBE_MARK_MASQ}",
                comment(&format!("{spn} cluster IP"))
            ),
        );
    }

    if uses_ext_chain {
        let mut ext = String::new();
        if !external_local {
            // Endpoints may be on other nodes: masquerade so replies come back through here.
            w(
                &mut ext,
                format_args!(
                    "-A {ext_chain} -m comment --comment {} -j {KUBE_MARK_MASQ}",
                    comment(&format!(
                        "masquerade traffic for {spn} external destinations"
                    ))
                ),
            );
        } else {
            if let Some(cidr) = ctx.cluster_cidr {
                // Pods reaching an external address of the service behave as if they went
                // out to a load balancer and came back: traffic policy does not apply.
                w(
                    &mut ext,
                    format_args!(
                        "-A {ext_chain} -m comment --comment {} -s {cidr} -j {svc_chain}",
                        comment(&format!("pod traffic for {spn} external destinations"))
                    ),
                );
            }
            // The node itself: its source address is local, so masquerade, and use all
            // endpoints.
            w(
                &mut ext,
                format_args!(
                    "-A {ext_chain} -m comment --comment {} -m addrtype --src-type LOCAL -j {KUBE_MARK_MASQ}",
                    comment(&format!("masquerade LOCAL traffic for {spn} external destinations"))
                ),
            );
            w(
                &mut ext,
                format_args!(
                    "-A {ext_chain} -m comment --comment {} -m addrtype --src-type LOCAL -j {svc_chain}",
                    comment(&format!("route LOCAL traffic for {spn} external destinations"))
                ),
            );
        }
        if has_external {
            w(
                &mut ext,
                format_args!("-A {ext_chain} -j {external_policy_chain}"),
            );
        }
        r.chains.push(ChainRules {
            name: ext_chain.clone(),
            rules: ext,
        });
    }

    if uses_fw_chain {
        let mut fw = String::new();
        let c = comment(&format!("{spn} loadbalancer IP"));
        for cidr in &source_ranges {
            w(
                &mut fw,
                format_args!("-A {fw_chain} -m comment --comment {c} -s {cidr} -j {ext_chain}"),
            );
        }
        // A node reaching a load balancer IP it holds itself comes from that IP.
        if source_ranges
            .iter()
            .any(|cidr| ctx.node_ips.iter().any(|ip| cidr.contains(*ip)))
        {
            for ip in &lb_ips {
                w(
                    &mut fw,
                    format_args!("-A {fw_chain} -m comment --comment {c} -s {ip} -j {ext_chain}"),
                );
            }
        }
        // Whatever falls off the end is not DNATed and is dropped by KUBE-PROXY-FIREWALL.
        w(
            &mut fw,
            format_args!(
                "-A {fw_chain} -m comment --comment {}",
                comment(&format!(
                    "other traffic to {spn} will be dropped by KUBE-PROXY-FIREWALL"
                ))
            ),
        );
        r.chains.push(ChainRules {
            name: fw_chain.clone(),
            rules: fw,
        });
    }

    if !cluster.is_empty() {
        endpoint_rules(&mut svc_rules, &spn, svc, &svc_chain, &cluster, ctx);
        r.chains.push(ChainRules {
            name: svc_chain.clone(),
            rules: svc_rules,
        });
    }
    if !local.is_empty() {
        endpoint_rules(&mut svl_rules, &spn, svc, &svl_chain, &local, ctx);
        r.chains.push(ChainRules {
            name: svl_chain.clone(),
            rules: svl_rules,
        });
    }

    // One chain per endpoint either set can reach.
    let mut reachable: Vec<&Endpoint> = cluster.clone();
    for e in &local {
        if !reachable.iter().any(|c| c.ip == e.ip && c.port == e.port) {
            reachable.push(e);
        }
    }
    for e in reachable {
        let ep = ip_port(e);
        let chain = endpoint_chain(name, &ep);
        let c = if ctx.large {
            String::new()
        } else {
            format!(" -m comment --comment {}", comment(&spn))
        };
        let mut rules = String::new();
        // An endpoint reaching itself through the service (hairpin) must be masqueraded,
        // or it would answer itself directly.
        w(
            &mut rules,
            format_args!("-A {chain}{c} -s {} -j {KUBE_MARK_MASQ}", e.ip),
        );
        let affinity = if svc.session_affinity_seconds.is_some() {
            format!(" -m recent --name {chain} --set")
        } else {
            String::new()
        };
        w(
            &mut rules,
            format_args!("-A {chain}{c}{affinity} -m {p} -p {p} -j DNAT --to-destination {ep}"),
        );
        r.chains.push(ChainRules { name: chain, rules });
    }
    Some(r)
}

/// The rules of a SVC or SVL chain: affinity first (a client seen within the timeout goes
/// back to its endpoint), then a random pick with probabilities 1/n, 1/(n-1), ..., the last
/// one unconditional, so that each endpoint gets 1/n of new connections.
fn endpoint_rules(
    out: &mut String,
    spn: &str,
    svc: &ServicePort,
    chain: &str,
    endpoints: &[&Endpoint],
    ctx: &Ctx,
) {
    let with_comment = |ep: &str| {
        if ctx.large {
            String::new()
        } else {
            format!(
                " -m comment --comment {}",
                comment(&format!("{spn} -> {ep}"))
            )
        }
    };
    if let Some(seconds) = svc.session_affinity_seconds {
        for e in endpoints {
            let ep = ip_port(e);
            let sep = endpoint_chain(&svc.name, &ep);
            let _ = writeln!(
                out,
                "-A {chain}{} -m recent --name {sep} --rcheck --seconds {seconds} --reap -j {sep}",
                with_comment(&ep)
            );
        }
    }
    let n = endpoints.len();
    for (i, e) in endpoints.iter().enumerate() {
        let ep = ip_port(e);
        let sep = endpoint_chain(&svc.name, &ep);
        let pick = if i + 1 < n {
            format!(
                " -m statistic --mode random --probability {}",
                probability(n - i)
            )
        } else {
            String::new()
        };
        let _ = writeln!(out, "-A {chain}{}{pick} -j {sep}", with_comment(&ep));
    }
}

/// KUBE-POSTROUTING: masquerade what KUBE-MARK-MASQ marked.
pub(crate) fn nat_postrouting_rules(out: &mut String) {
    let _ = writeln!(
        out,
        "-A {KUBE_POSTROUTING} -m mark ! --mark {MASQ_MARK}/{MASQ_MARK} -j RETURN"
    );
    // Clear the mark, so that a packet going through the stack again is not masqueraded twice.
    let _ = writeln!(out, "-A {KUBE_POSTROUTING} -j MARK --xor-mark {MASQ_MARK}");
    let _ = writeln!(
        out,
        "-A {KUBE_POSTROUTING} -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully"
    );
}

/// KUBE-MARK-MASQ: mark for masquerade.
pub(crate) fn nat_mark_masq_rules(out: &mut String) {
    let _ = writeln!(out, "-A {KUBE_MARK_MASQ} -j MARK --or-mark {MASQ_MARK}");
}

/// The last rule of nat KUBE-SERVICES: what is left and addressed to this node goes to the
/// NodePorts (on every local address, or only on `addresses` when they are given).
pub(crate) fn nat_nodeports_jump(
    out: &mut String,
    addresses: Option<&[Ipv4Addr]>,
    localhost_nodeports: bool,
) {
    let c = "\"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";
    match addresses {
        None => {
            let not_localhost = if localhost_nodeports {
                ""
            } else {
                " ! -d 127.0.0.0/8"
            };
            let _ = writeln!(
                out,
                "-A {KUBE_SERVICES} -m comment --comment {c} -m addrtype --dst-type LOCAL{not_localhost} -j {KUBE_NODEPORTS}"
            );
        }
        Some(ips) => {
            for ip in ips {
                if ip.is_loopback() && !localhost_nodeports {
                    continue;
                }
                let _ = writeln!(
                    out,
                    "-A {KUBE_SERVICES} -m comment --comment {c} -d {ip} -j {KUBE_NODEPORTS}"
                );
            }
        }
    }
}

/// The filter table's fixed rules that go before the services' (KUBE-FIREWALL).
pub(crate) fn filter_firewall_rules(out: &mut String) {
    // Loopback NodePorts need route_localnet, which would also let other hosts reach
    // 127.0.0.0/8 on this node; this drops such packets unless they were DNATed.
    let _ = writeln!(
        out,
        "-A {KUBE_FIREWALL} -m comment --comment \"block incoming localnet connections\" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP"
    );
}

/// KUBE-FORWARD: accept what we marked for masquerade, and the rest of those connections,
/// even if the FORWARD policy drops.
pub(crate) fn filter_forward_rules(out: &mut String, drop_invalid: bool) {
    if drop_invalid {
        let _ = writeln!(
            out,
            "-A {KUBE_FORWARD} -m conntrack --ctstate INVALID -j DROP"
        );
    }
    let _ = writeln!(
        out,
        "-A {KUBE_FORWARD} -m comment --comment \"kubernetes forwarding rules\" -m mark --mark {MASQ_MARK}/{MASQ_MARK} -j ACCEPT"
    );
    let _ = writeln!(
        out,
        "-A {KUBE_FORWARD} -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
    );
}

fn v4(ip: &IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(v4) => Some(*v4),
        IpAddr::V6(_) => None,
    }
}

fn dedup(ips: impl Iterator<Item = Ipv4Addr>) -> Vec<Ipv4Addr> {
    let mut out: Vec<Ipv4Addr> = Vec::new();
    for ip in ips {
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}

fn ip_port(e: &Endpoint) -> String {
    format!("{}:{}", e.ip, e.port)
}
