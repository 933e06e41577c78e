//! What the nftables proxier wants in its table: the fixed skeleton (base chains, dispatch
//! maps, masquerading), and for every service port its own chains, affinity sets and map
//! elements. Everything here is a pure function of the node's configuration and one service
//! port with its endpoints; diffing against what is installed and running `nft` is in
//! `mod.rs`.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr};

use crate::{categorize, Endpoint, ServicePort, ServicePortName};

/// Our table (family `ip`). Everything we install lives in it, so names need no prefix.
pub const TABLE: &str = "kube-proxy";
/// `<family> <table>`, as every command names it.
pub(super) const TABLE_REF: &str = "ip kube-proxy";

// Regular chains reached from the base chains.
pub(super) const SERVICES_CHAIN: &str = "services";
pub(super) const SERVICE_ENDPOINTS_CHECK_CHAIN: &str = "service-endpoints-check";
pub(super) const NODEPORT_ENDPOINTS_CHECK_CHAIN: &str = "nodeport-endpoints-check";
pub(super) const FIREWALL_CHECK_CHAIN: &str = "firewall-check";
pub(super) const CLUSTER_IPS_CHECK_CHAIN: &str = "cluster-ips-check";
pub(super) const MASQUERADING_CHAIN: &str = "masquerading";
pub(super) const MARK_MASQ_CHAIN: &str = "mark-for-masquerade";
pub(super) const REJECT_CHAIN: &str = "reject-chain";

/// The set of IPs NodePorts answer on (only when the node's addresses are known).
pub(super) const NODEPORT_IPS_SET: &str = "nodeport-ips";

/// The packet mark that asks `masquerading` to SNAT a connection (kube-proxy's default
/// masquerade bit 14, the same mark as the iptables mode).
pub(super) const MASQ_MARK: &str = "0x4000";

/// Chain name prefixes are at most this long (kube-proxy's bound), so a name base may use
/// the rest of nftables' 256-byte names.
const CHAIN_NAME_BASE_MAX: usize = 256 - 16;
/// nftables keeps at most 128 bytes of a comment.
const COMMENT_MAX: usize = 127;

/// The sets and maps whose elements are shared by all services.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Container {
    /// Set of every active ClusterIP (traffic to one on an unknown port is rejected).
    ClusterIps,
    /// `ip . proto . port : verdict` for ClusterIPs, external IPs and load balancer IPs.
    ServiceIps,
    /// `proto . port : verdict` for NodePorts.
    ServiceNodePorts,
    /// `ip . proto . port : verdict` (reject or drop) for services without endpoints.
    NoEndpointServices,
    /// `proto . port : verdict` for NodePorts of services without endpoints.
    NoEndpointNodePorts,
    /// `ip . proto . port : goto firewall-…` for load balancer IPs with source ranges.
    FirewallIps,
}

impl Container {
    pub(super) fn name(self) -> &'static str {
        match self {
            Container::ClusterIps => "cluster-ips",
            Container::ServiceIps => "service-ips",
            Container::ServiceNodePorts => "service-nodeports",
            Container::NoEndpointServices => "no-endpoint-services",
            Container::NoEndpointNodePorts => "no-endpoint-nodeports",
            Container::FirewallIps => "firewall-ips",
        }
    }
}

/// An IPv4 CIDR, normalized to its network address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ipv4Cidr {
    addr: Ipv4Addr,
    prefix: u8,
}

impl Ipv4Cidr {
    /// Parses `a.b.c.d/n` (Ok(Some)), accepts an IPv6 CIDR as "not ours" (Ok(None)), and
    /// rejects anything else.
    pub(super) fn parse(s: &str) -> Result<Option<Ipv4Cidr>, String> {
        let s = s.trim();
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a CIDR (no /prefix)"))?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not a CIDR (bad address)"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("{s:?} is not a CIDR (bad prefix length)"))?;
        match addr {
            IpAddr::V6(_) if prefix <= 128 => Ok(None),
            IpAddr::V4(v4) if prefix <= 32 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                Ok(Some(Ipv4Cidr {
                    addr: Ipv4Addr::from(u32::from(v4) & mask),
                    prefix,
                }))
            }
            _ => Err(format!("{s:?} is not a CIDR (prefix length too long)")),
        }
    }

    pub(super) fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = u32::MAX
            .checked_shl(32 - u32::from(self.prefix))
            .unwrap_or(0);
        u32::from(ip) & mask == u32::from(self.addr)
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// What the rules depend on besides the services: fixed for a proxier's lifetime.
#[derive(Clone, Debug)]
pub(super) struct Config {
    /// This node's name (endpoints on it are "local").
    pub node_name: String,
    /// The pod CIDR: traffic to a ClusterIP from outside it is masqueraded, and pod traffic
    /// to a Local-policy external address is short-circuited. None: masquerade all.
    pub cluster_cidr: Option<Ipv4Cidr>,
    /// The node's IPv4 addresses: NodePorts answer on these only (kube-proxy's nftables
    /// default, `--nodeport-addresses=primary`). Empty: on every local address except
    /// 127.0.0.0/8.
    pub node_ips: Vec<Ipv4Addr>,
}

/// One element of a shared set or map: `key` and what follows it (`""` for a set,
/// ` : <verdict>`, optionally preceded by a comment, for a map).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Element {
    pub container: Container,
    pub key: String,
    pub value: String,
}

/// Everything one service port puts in the table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ServiceRules {
    /// Chain name → its rules, in order.
    pub chains: BTreeMap<String, Vec<String>>,
    /// Affinity set name → timeout in seconds.
    pub affinity_sets: BTreeMap<String, u32>,
    pub elements: Vec<Element>,
}

/// kube-proxy's `hashAndTruncate`: the first 8 base32 characters of the SHA-256 of `name`,
/// a dash, and `name` itself (cut with `...` if too long). The hash keeps names unique
/// even when truncated, and tells apart names that differ in one digit. Characters a
/// chain name can't hold (never in valid API names) become `_`; the hash is of the
/// original.
pub(super) fn hash_and_truncate(name: &str) -> String {
    const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    let bytes = digest.as_ref();
    // 8 base32 characters are exactly the first 40 bits.
    let mut bits: u64 = 0;
    for b in bytes.iter().take(5) {
        bits = (bits << 8) | u64::from(*b);
    }
    let mut out = String::with_capacity(9 + name.len());
    for i in (0..8).rev() {
        out.push(char::from(BASE32[((bits >> (i * 5)) & 31) as usize]));
    }
    out.push('-');
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.') {
            c
        } else {
            '_'
        }
    }));
    if out.len() > CHAIN_NAME_BASE_MAX {
        // ASCII only by now, so any byte index is a char boundary.
        out.truncate(CHAIN_NAME_BASE_MAX - 3);
        out.push_str("...");
    }
    out
}

/// `HASH-namespace/name/protocol/port`, the base of a service port's chain names.
pub(super) fn service_chain_base(name: &ServicePortName) -> String {
    hash_and_truncate(&format!(
        "{}/{}/{}/{}",
        name.namespace,
        name.name,
        name.protocol.as_str(),
        name.port
    ))
}

/// `HASH-namespace/name/protocol/port__ip/port`, the base of an endpoint's chain and
/// affinity set names.
pub(super) fn endpoint_chain_base(name: &ServicePortName, ip: Ipv4Addr, port: u16) -> String {
    hash_and_truncate(&format!(
        "{}/{}/{}/{}__{}/{}",
        name.namespace,
        name.name,
        name.protocol.as_str(),
        name.port,
        ip,
        port
    ))
}

/// A quoted nft comment naming a service port, with nothing that could end the string.
fn comment(text: &str) -> String {
    let mut clean: String = text
        .chars()
        .filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\')
        .collect();
    clean.truncate(COMMENT_MAX);
    format!("comment \"{clean}\"")
}

fn ipv4s(ips: &[IpAddr]) -> Vec<Ipv4Addr> {
    let mut out: Vec<Ipv4Addr> = Vec::new();
    for ip in ips {
        if let IpAddr::V4(v4) = ip {
            if !out.contains(v4) {
                out.push(*v4);
            }
        }
    }
    out
}

/// An endpoint as the rules use it: IPv4 address and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Target {
    ip: Ipv4Addr,
    port: u16,
}

/// Up to this many endpoints, a service chain picks one with a cascade of `numgen` rules
/// (rule i matches with probability 1/(N-i), as kube-proxy's iptables mode does);
/// beyond, with an anonymous verdict map. The kernel names every anonymous map by
/// scanning all sets of the table, so thousands of them make a transaction quadratic
/// (48 s for 10,000 services); a shared named map instead costs a walk over all its
/// elements for every rule bound to it, quadratic as well. Plain rules cost neither.
pub(super) const CASCADE_MAX_ENDPOINTS: usize = 32;

/// `endpoints` (already usable) as IPv4 targets, without duplicates.
fn targets(endpoints: &[&Endpoint]) -> Vec<Target> {
    let mut out: Vec<Target> = Vec::new();
    for ep in endpoints {
        if let IpAddr::V4(ip) = ep.ip {
            let t = Target { ip, port: ep.port };
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

/// The chains, affinity sets and map elements for one service port (what kube-proxy's
/// nftables `syncProxyRules` writes for it). Nothing for a port without an IPv4 ClusterIP
/// (headless or IPv6-only services).
pub(super) fn service_rules(
    cfg: &Config,
    name: &ServicePortName,
    svc: &ServicePort,
    endpoints: &[Endpoint],
) -> ServiceRules {
    let mut out = ServiceRules::default();
    let Some(cluster_ip) = ipv4s(&svc.cluster_ips).first().copied() else {
        return out;
    };
    let proto = name.protocol.as_str();
    let port = svc.port;
    let external_ips = ipv4s(&svc.external_ips);
    let lb_ips = ipv4s(&svc.load_balancer_ips);
    // Only this family's ranges count; the API allows whitespace around them.
    let source_ranges: Vec<Ipv4Cidr> = svc
        .load_balancer_source_ranges
        .iter()
        .filter_map(|r| Ipv4Cidr::parse(r).ok().flatten())
        .collect();
    let node_port = svc.node_port.filter(|p| *p != 0);
    let affinity = svc.session_affinity_seconds.map(|s| s.max(1));

    let externally_accessible =
        node_port.is_some() || !external_ips.is_empty() || !lb_ips.is_empty();
    // Cluster endpoints are needed for Cluster internal policy, and for any external
    // traffic (even with Local external policy: for the short-circuit rules).
    let uses_cluster = !svc.internal_policy_local || externally_accessible;
    let uses_local =
        svc.internal_policy_local || (svc.external_policy_local && externally_accessible);

    // Endpoints without a port can't be a destination.
    let valid: Vec<Endpoint> = endpoints.iter().filter(|e| e.port != 0).cloned().collect();
    let categorized = categorize(svc, &valid, &cfg.node_name);
    // The "cluster" chain always balances over every usable endpoint: it serves ClusterIP
    // traffic under internalTrafficPolicy Cluster, and external traffic under
    // externalTrafficPolicy Cluster (or short-circuited) whatever the internal policy.
    let cluster_wide = targets(&categorized.all);
    let local_here = targets(&categorized.local);
    // Whether the service has usable endpoints anywhere in the cluster.
    let has_endpoints = !cluster_wide.is_empty();
    let cluster_eps = if uses_cluster {
        cluster_wide
    } else {
        Vec::new()
    };
    let local_eps = if uses_local { local_here } else { Vec::new() };
    let mut reachable = cluster_eps.clone();
    for t in &local_eps {
        if !reachable.contains(t) {
            reachable.push(*t);
        }
    }

    let base = service_chain_base(name);
    let cluster_chain = format!("service-{base}");
    let local_chain = format!("local-{base}");
    let external_chain = format!("external-{base}");
    let firewall_chain = format!("firewall-{base}");

    let (internal_chain, has_internal) = if svc.internal_policy_local {
        (&local_chain, has_endpoints && !local_eps.is_empty())
    } else {
        (&cluster_chain, has_endpoints)
    };
    let (external_policy_chain, has_external) = if svc.external_policy_local {
        (&local_chain, has_endpoints && !local_eps.is_empty())
    } else {
        (&cluster_chain, has_endpoints)
    };
    let uses_external_chain = has_endpoints && externally_accessible;
    let uses_firewall = !lb_ips.is_empty() && !source_ranges.is_empty();
    // No endpoints at all: refuse at once. Endpoints, but none for this policy on this
    // node: drop.
    let reject = format!("goto {REJECT_CHAIN}");
    let (internal_verdict, external_verdict) = if has_endpoints {
        ("drop", "drop")
    } else {
        (reject.as_str(), reject.as_str())
    };
    let svc_comment = comment(&name.to_string());

    // Map and set elements.
    let mut element = |container: Container, key: String, value: String| {
        out.elements.push(Element {
            container,
            key,
            value,
        })
    };
    let ip_key = |ip: Ipv4Addr| format!("{ip} . {proto} . {port}");
    let goto = |chain: &str| format!(" : goto {chain}");
    let refuse = |verdict: &str| format!(" {svc_comment} : {verdict}");

    element(Container::ClusterIps, cluster_ip.to_string(), String::new());
    if has_internal {
        element(
            Container::ServiceIps,
            ip_key(cluster_ip),
            goto(internal_chain),
        );
    } else {
        element(
            Container::NoEndpointServices,
            ip_key(cluster_ip),
            refuse(internal_verdict),
        );
    }
    for ip in &external_ips {
        if has_endpoints {
            element(Container::ServiceIps, ip_key(*ip), goto(&external_chain));
        }
        if !has_external {
            element(
                Container::NoEndpointServices,
                ip_key(*ip),
                refuse(external_verdict),
            );
        }
    }
    for ip in &lb_ips {
        if has_endpoints {
            element(Container::ServiceIps, ip_key(*ip), goto(&external_chain));
        }
        if uses_firewall {
            element(Container::FirewallIps, ip_key(*ip), goto(&firewall_chain));
        }
        if !has_external {
            element(
                Container::NoEndpointServices,
                ip_key(*ip),
                refuse(external_verdict),
            );
        }
    }
    if let Some(np) = node_port {
        let key = format!("{proto} . {np}");
        if has_endpoints {
            element(
                Container::ServiceNodePorts,
                key.clone(),
                goto(&external_chain),
            );
        }
        if !has_external {
            element(
                Container::NoEndpointNodePorts,
                key,
                refuse(external_verdict),
            );
        }
    }

    // Chains.
    let mut chains: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if !cluster_eps.is_empty() {
        chains.insert(cluster_chain.clone(), Vec::new());
    }
    if !local_eps.is_empty() {
        chains.insert(local_chain.clone(), Vec::new());
    }

    // Traffic to the ClusterIP is marked for masquerading by one rule for every ClusterIP
    // (`services`, before the dispatch; see `skeleton`), not a rule per service.

    // Traffic to NodePorts, external IPs and load balancer IPs.
    if uses_external_chain {
        let mut rules = Vec::new();
        if !svc.external_policy_local {
            // Endpoints may be on other nodes: masquerade so replies come back here.
            rules.push(format!("jump {MARK_MASQ_CHAIN}"));
        } else {
            // Only this node's endpoints, keeping the client's source address. Pods and
            // the node itself aren't subject to the policy (as if they went out to the
            // load balancer and back): they use all endpoints.
            if let Some(cidr) = cfg.cluster_cidr {
                rules.push(format!(
                    "ip saddr {cidr} goto {cluster_chain} comment \"short-circuit pod traffic\""
                ));
            }
            rules.push(format!(
                "fib saddr type local jump {MARK_MASQ_CHAIN} comment \"masquerade local traffic\""
            ));
            rules.push(format!(
                "fib saddr type local goto {cluster_chain} comment \"short-circuit local traffic\""
            ));
        }
        if has_external {
            rules.push(format!("goto {external_policy_chain}"));
        }
        chains.insert(external_chain.clone(), rules);
    }

    // loadBalancerSourceRanges: drop new connections to an LB IP from anywhere else.
    if uses_firewall {
        let mut sources: Vec<String> = source_ranges.iter().map(|r| r.to_string()).collect();
        // A request from this node to a VIP bound locally comes back with the VIP as its
        // source: allow it if the node itself is allowed.
        let node_allowed = source_ranges
            .iter()
            .any(|r| cfg.node_ips.iter().any(|ip| r.contains(*ip)));
        if node_allowed {
            sources.extend(lb_ips.iter().map(|ip| ip.to_string()));
        }
        chains.insert(
            firewall_chain.clone(),
            vec![format!("ip saddr != {{ {} }} drop", sources.join(", "))],
        );
    }

    // Load balancing: affinity lookups first, then a random pick.
    let endpoint_names = |t: &Target| {
        let base = endpoint_chain_base(name, t.ip, t.port);
        (format!("endpoint-{base}"), format!("affinity-{base}"))
    };
    for (chain, eps) in [(&cluster_chain, &cluster_eps), (&local_chain, &local_eps)] {
        if eps.is_empty() {
            continue;
        }
        let mut rules = Vec::with_capacity(eps.len() + 1);
        if affinity.is_some() {
            for t in eps {
                let (ep_chain, set) = endpoint_names(t);
                rules.push(format!("ip saddr @{set} goto {ep_chain}"));
            }
        }
        let n = eps.len();
        if n <= CASCADE_MAX_ENDPOINTS {
            for (i, t) in eps.iter().enumerate() {
                let ep_chain = endpoint_names(t).0;
                if i + 1 < n {
                    rules.push(format!("numgen random mod {} == 0 goto {ep_chain}", n - i));
                } else {
                    rules.push(format!("goto {ep_chain}"));
                }
            }
        } else {
            let mut vmap = String::new();
            for (i, t) in eps.iter().enumerate() {
                if i > 0 {
                    vmap.push_str(", ");
                }
                let _ = write!(vmap, "{i} : goto {}", endpoint_names(t).0);
            }
            rules.push(format!("numgen random mod {n} vmap {{ {vmap} }}"));
        }
        chains.entry(chain.clone()).or_default().extend(rules);
    }

    // One chain per endpoint: mark hairpin traffic for masquerading, remember the client
    // for affinity, DNAT.
    for t in &reachable {
        let (ep_chain, set) = endpoint_names(t);
        let mut rules = vec![format!("ip saddr {} jump {MARK_MASQ_CHAIN}", t.ip)];
        if let Some(timeout) = affinity {
            rules.push(format!("update @{set} {{ ip saddr }}"));
            out.affinity_sets.insert(set, timeout);
        }
        rules.push(format!("meta l4proto {proto} dnat to {}:{}", t.ip, t.port));
        chains.insert(ep_chain, rules);
    }

    out.chains = chains;
    out
}

/// The table as a fresh start: the previous table (from an earlier run, or a state we
/// lost track of) is deleted and everything that doesn't depend on services is created,
/// with empty dispatch maps.
pub(super) fn skeleton(cfg: &Config, out: &mut String) {
    let t = TABLE_REF;
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    // "add" first so that "delete" succeeds when there is no table yet.
    line(format!("add table {t}"));
    line(format!("delete table {t}"));
    line(format!(
        "add table {t} {{ comment \"rules for kube-proxy\" ; }}"
    ));

    // Base chains. Filtering sees pre-DNAT destinations (it runs before dstnat, -100);
    // cluster-ips-check sees post-DNAT ones. Priorities are numeric because nft 1.0.x
    // only accepts the name "dstnat" in prerouting.
    for (chain, kind, hook, priority) in [
        ("filter-prerouting", "filter", "prerouting", -110),
        ("filter-input", "filter", "input", -110),
        ("filter-forward", "filter", "forward", -110),
        ("filter-output", "filter", "output", -110),
        ("filter-output-post-dnat", "filter", "output", -90),
        ("nat-prerouting", "nat", "prerouting", -100),
        ("nat-output", "nat", "output", -100),
        ("nat-postrouting", "nat", "postrouting", 100),
    ] {
        line(format!(
            "add chain {t} {chain} {{ type {kind} hook {hook} priority {priority} ; }}"
        ));
    }
    for chain in [
        NODEPORT_ENDPOINTS_CHECK_CHAIN,
        SERVICE_ENDPOINTS_CHECK_CHAIN,
        FIREWALL_CHECK_CHAIN,
        SERVICES_CHAIN,
        MASQUERADING_CHAIN,
        CLUSTER_IPS_CHECK_CHAIN,
        MARK_MASQ_CHAIN,
    ] {
        line(format!("add chain {t} {chain}"));
    }
    line(format!(
        "add chain {t} {REJECT_CHAIN} {{ comment \"helper for @no-endpoint-services / @no-endpoint-nodeports\" ; }}"
    ));

    // Jumps from the base chains. Rejecting is done from input/forward/output (reject in
    // prerouting needs kernel 5.9).
    for (from, prefix, to) in [
        (
            "filter-input",
            "ct state new ",
            NODEPORT_ENDPOINTS_CHECK_CHAIN,
        ),
        (
            "filter-input",
            "ct state new ",
            SERVICE_ENDPOINTS_CHECK_CHAIN,
        ),
        (
            "filter-forward",
            "ct state new ",
            SERVICE_ENDPOINTS_CHECK_CHAIN,
        ),
        (
            "filter-output",
            "ct state new ",
            SERVICE_ENDPOINTS_CHECK_CHAIN,
        ),
        ("filter-prerouting", "ct state new ", FIREWALL_CHECK_CHAIN),
        ("filter-output", "ct state new ", FIREWALL_CHECK_CHAIN),
        ("nat-output", "", SERVICES_CHAIN),
        ("nat-prerouting", "", SERVICES_CHAIN),
        ("nat-postrouting", "", MASQUERADING_CHAIN),
        ("filter-forward", "ct state new ", CLUSTER_IPS_CHECK_CHAIN),
        (
            "filter-output-post-dnat",
            "ct state new ",
            CLUSTER_IPS_CHECK_CHAIN,
        ),
    ] {
        line(format!("add rule {t} {from} {prefix}jump {to}"));
    }

    // Masquerading: services mark connections, postrouting SNATs the marked ones (and
    // clears the mark so that it doesn't leak into tunnels or other tables).
    line(format!(
        "add rule {t} {MARK_MASQ_CHAIN} mark set mark or {MASQ_MARK}"
    ));
    line(format!(
        "add rule {t} {MASQUERADING_CHAIN} mark and {MASQ_MARK} == 0 return"
    ));
    line(format!(
        "add rule {t} {MASQUERADING_CHAIN} mark set mark xor {MASQ_MARK}"
    ));
    line(format!(
        "add rule {t} {MASQUERADING_CHAIN} masquerade fully-random"
    ));

    // Connections to a ClusterIP on a port no service uses are refused.
    line(format!(
        "add set {t} {} {{ type ipv4_addr ; comment \"Active ClusterIPs\" ; }}",
        Container::ClusterIps.name()
    ));
    line(format!(
        "add rule {t} {CLUSTER_IPS_CHECK_CHAIN} ip daddr @{} reject comment \"Reject traffic to invalid ports of ClusterIPs\"",
        Container::ClusterIps.name()
    ));

    // Where NodePorts answer.
    let node_ips: Vec<String> = cfg
        .node_ips
        .iter()
        .filter(|ip| !ip.is_loopback())
        .map(|ip| ip.to_string())
        .collect();
    let nodeport_match = if node_ips.is_empty() {
        "ip daddr != 127.0.0.0/8".to_string()
    } else {
        line(format!(
            "add set {t} {NODEPORT_IPS_SET} {{ type ipv4_addr ; comment \"IPs that accept NodePort traffic\" ; }}"
        ));
        line(format!(
            "add element {t} {NODEPORT_IPS_SET} {{ {} }}",
            node_ips.join(", ")
        ));
        format!("ip daddr @{NODEPORT_IPS_SET}")
    };

    // Services without endpoints.
    line(format!(
        "add map {t} {} {{ type ipv4_addr . inet_proto . inet_service : verdict ; comment \"vmap to drop or reject packets to services with no endpoints\" ; }}",
        Container::NoEndpointServices.name()
    ));
    line(format!(
        "add map {t} {} {{ type inet_proto . inet_service : verdict ; comment \"vmap to drop or reject packets to service nodeports with no endpoints\" ; }}",
        Container::NoEndpointNodePorts.name()
    ));
    line(format!("add rule {t} {REJECT_CHAIN} reject"));
    line(format!(
        "add rule {t} {SERVICE_ENDPOINTS_CHECK_CHAIN} ip daddr . meta l4proto . th dport vmap @{}",
        Container::NoEndpointServices.name()
    ));
    line(format!(
        "add rule {t} {NODEPORT_ENDPOINTS_CHECK_CHAIN} {nodeport_match} meta l4proto . th dport vmap @{}",
        Container::NoEndpointNodePorts.name()
    ));

    // loadBalancerSourceRanges.
    line(format!(
        "add map {t} {} {{ type ipv4_addr . inet_proto . inet_service : verdict ; comment \"destinations that are subject to LoadBalancerSourceRanges\" ; }}",
        Container::FirewallIps.name()
    ));
    line(format!(
        "add rule {t} {FIREWALL_CHECK_CHAIN} ip daddr . meta l4proto . th dport vmap @{}",
        Container::FirewallIps.name()
    ));

    // Service dispatch.
    line(format!(
        "add map {t} {} {{ type ipv4_addr . inet_proto . inet_service : verdict ; comment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\" ; }}",
        Container::ServiceIps.name()
    ));
    line(format!(
        "add map {t} {} {{ type inet_proto . inet_service : verdict ; comment \"NodePort traffic\" ; }}",
        Container::ServiceNodePorts.name()
    ));
    // Traffic to a ClusterIP: masquerade what doesn't come from a pod (it may have been
    // routed here from off the cluster, and may leave for another node). kube-proxy has this
    // rule in each service's chain, matching its ClusterIP and port; one rule over the
    // `cluster-ips` set marks the same connections (those to other ports are refused) and
    // spares nft a rule per service — a sixth of a full sync's time.
    let from_outside = match cfg.cluster_cidr {
        None => String::new(),
        Some(cidr) => format!("ip saddr != {cidr} "),
    };
    line(format!(
        "add rule {t} {SERVICES_CHAIN} ip daddr @{} {from_outside}jump {MARK_MASQ_CHAIN}",
        Container::ClusterIps.name()
    ));
    line(format!(
        "add rule {t} {SERVICES_CHAIN} ip daddr . meta l4proto . th dport vmap @{}",
        Container::ServiceIps.name()
    ));
    let nodeport_dispatch = if node_ips.is_empty() {
        format!("fib daddr type local {nodeport_match}")
    } else {
        nodeport_match
    };
    line(format!(
        "add rule {t} {SERVICES_CHAIN} {nodeport_dispatch} meta l4proto . th dport vmap @{}",
        Container::ServiceNodePorts.name()
    ));
}
