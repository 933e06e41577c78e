//! The iptables proxy mode: Services as NAT rules, the way Kubernetes' iptables kube-proxy
//! (`pkg/proxy/iptables`) writes them.
//!
//! Layout (nat table): PREROUTING and OUTPUT jump to `KUBE-SERVICES`, which matches each
//! cluster IP, external IP and load balancer IP and jumps to the service port's chain; what
//! is left and addressed to this node goes on to `KUBE-NODEPORTS`. Per service port:
//! - `KUBE-SVC-<hash>` picks one of the cluster-wide endpoints at random (`-m statistic`,
//!   1/n, 1/(n-1), ..., the last rule unconditional), or the one a client used within the
//!   affinity timeout (`-m recent`), and first marks traffic from outside the cluster CIDR
//!   for masquerade;
//! - `KUBE-SVL-<hash>` the same over this node's endpoints, for a Local traffic policy;
//! - `KUBE-EXT-<hash>` is where NodePort, external and load balancer IP traffic goes: it
//!   masquerades (Cluster policy), or keeps the client address and sends only pods' and the
//!   node's own traffic to all endpoints (Local);
//! - `KUBE-FW-<hash>` admits `loadBalancerSourceRanges` to a load balancer IP;
//! - `KUBE-SEP-<hash>` per endpoint: DNAT to it, masquerading an endpoint that reaches itself.
//!
//! `KUBE-MARK-MASQ` sets mark 0x4000, which `KUBE-POSTROUTING` turns into MASQUERADE. In the
//! filter table, `KUBE-SERVICES` / `KUBE-EXTERNAL-SERVICES` REJECT connections to service
//! ports without endpoints (so clients fail at once rather than time out) and DROP those to
//! Local ports without local endpoints, `KUBE-PROXY-FIREWALL` drops load balancer traffic
//! the source ranges did not admit, and `KUBE-FORWARD` accepts what we marked.
//!
//! Applying: one `iptables-restore --noflush --counters` transaction (both tables) writes
//! the chains whose rules differ from what was last applied (declaring `:CHAIN - [0:0]`
//! flushes a chain before refilling it) and deletes the chains no longer wanted, so that a
//! change is atomic. That holds for the top-level chains too: Kubernetes rewrites
//! KUBE-SERVICES on every sync, which with 10,000 services costs most of a second even when
//! one service's endpoints moved; here it is rewritten when its rules change, and on every
//! full sync.
//!
//! When many chains change (the first sync), they are written first, about 3,000 lines per
//! transaction and never splitting a service, before the final transaction points the
//! dispatch chains at them: iptables-nft's restore slows down with the square of the
//! number of chains one run touches (10,000 services in one run take over a minute instead
//! of seconds). Chains go in descending name order, the cheap order for iptables-nft's
//! sorted list of chain names.
//!
//! The first sync is a full one, and so is the sync after a failure, one an hour after the
//! last full one, one after the canary chain (`KUBE-PROXY-CANARY` in mangle, checked at most
//! every 30 s) disappeared because someone flushed the tables, and one after
//! [`IptablesProxier::request_full_sync`]. A full sync ensures the jump rules from the
//! built-in chains (`iptables -C`, then `-I`), rewrites every chain, and then deletes any
//! chain named like ours that the snapshot does not want — left behind by a previous run
//! that crashed, say.
//!
//! IPv4 only: IPv6 (ip6tables) is not done; IPv6 cluster IPs, endpoints and addresses are
//! ignored.

mod exec;
#[cfg(test)]
mod netns_tests;
mod rules;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::{Endpoint, NodeInfo, Proxier, ServicePort, ServicePortName, Snapshot};
use exec::{chains_in_save, Commands, Iptables};
use rules::{ChainRules, Cidr, Ctx, Rendered};

/// Lines of per-service chains above which they are written in transactions of their own
/// before the final one, and the size of each.
const CHUNK_LINES: usize = 3000;
/// Chains per transaction when flushing or deleting many.
const CHUNK_CHAINS: usize = 1000;
/// A sync this long after the last full one is full again, as kube-proxy does.
const FULL_SYNC_PERIOD: Duration = Duration::from_secs(3600);
/// How often a sync first checks that the canary chain is still there.
const CANARY_CHECK_PERIOD: Duration = Duration::from_secs(30);

/// What the last sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// A full sync (jump rules ensured, every chain rewritten, leftovers removed).
    pub full: bool,
    /// Service ports programmed.
    pub services: usize,
    /// Per-service chains written.
    pub chains_written: usize,
    /// Per-service chains deleted.
    pub chains_deleted: usize,
    /// Top-level chains (KUBE-SERVICES, ...) rewritten: those whose rules changed, or all
    /// on a full sync.
    pub top_chains_written: usize,
    /// iptables-restore runs.
    pub restores: usize,
    /// Bytes fed to iptables-restore.
    pub restore_bytes: usize,
}

/// Content hashes of the top-level chains, by (table, chain).
type TopHashes = HashMap<(&'static str, &'static str), u64>;

/// What was applied for one service port.
struct Applied {
    svc: Arc<ServicePort>,
    endpoints: Option<Arc<Vec<Endpoint>>>,
    large: bool,
    /// Its rules in the shared chains (the `chains` field is left empty).
    dispatch: Rendered,
    /// Its own chains and a hash of their rules.
    chains: Vec<(String, u64)>,
}

impl Applied {
    fn same_input(
        &self,
        svc: &Arc<ServicePort>,
        endpoints: Option<&Arc<Vec<Endpoint>>>,
        large: bool,
    ) -> bool {
        let same_endpoints = match (&self.endpoints, endpoints) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        };
        self.large == large && same_endpoints && (Arc::ptr_eq(&self.svc, svc) || self.svc == *svc)
    }
}

/// The iptables backend of `capstan proxy` (see the module documentation).
pub struct IptablesProxier {
    ctx: Ctx,
    localhost_nodeports: bool,
    nodeport_addresses: Option<Vec<Ipv4Addr>>,
    ipt: Box<dyn Iptables>,
    applied: HashMap<ServicePortName, Applied>,
    /// The content hash of each top-level chain as last applied.
    top_applied: TopHashes,
    full_sync: bool,
    /// Drop INVALID packets in KUBE-FORWARD (unless nf_conntrack_tcp_be_liberal is set).
    drop_invalid: bool,
    chunk_lines: usize,
    stats: SyncStats,
    last_full: Option<Instant>,
    last_canary_check: Option<Instant>,
    canary_period: Duration,
}

impl IptablesProxier {
    /// A proxier for `node`, writing the host's iptables. Fails if `iptables-restore` is not
    /// installed or the cluster CIDR does not parse.
    pub fn new(node: NodeInfo) -> Result<Self> {
        let found = Command::new("iptables-restore")
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(found, Ok(s) if s.success()) {
            bail!("iptables proxy mode needs iptables-restore, which is not installed");
        }
        Self::with_runner(node, Box::new(Commands { netns: None }))
    }

    fn with_runner(node: NodeInfo, ipt: Box<dyn Iptables>) -> Result<Self> {
        let cluster_cidr = match node.cluster_cidr.as_deref() {
            None => None,
            Some(list) => {
                // --cluster-cidr may list one CIDR per family; this proxier wants the IPv4 one.
                let mut v4 = None;
                for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    match Cidr::parse(part) {
                        Some(c) => v4 = v4.or(Some(c)),
                        None if part.contains(':') => {}
                        None => bail!("invalid cluster CIDR {part:?}"),
                    }
                }
                v4
            }
        };
        let node_ips = node
            .ips
            .iter()
            .filter_map(|ip| match ip {
                IpAddr::V4(v4) => Some(*v4),
                IpAddr::V6(_) => None,
            })
            .collect();
        Ok(IptablesProxier {
            ctx: Ctx {
                node_name: node.name,
                node_ips,
                cluster_cidr,
                masquerade_all: cluster_cidr.is_none(),
                large: false,
            },
            localhost_nodeports: true,
            nodeport_addresses: None,
            ipt,
            applied: HashMap::new(),
            top_applied: TopHashes::new(),
            full_sync: true,
            drop_invalid: true,
            chunk_lines: CHUNK_LINES,
            stats: SyncStats::default(),
            last_full: None,
            last_canary_check: None,
            canary_period: CANARY_CHECK_PERIOD,
        })
    }

    /// Run every iptables command in network namespace `name` (`ip netns exec name ...`),
    /// for tests and benchmarks.
    pub fn in_netns(mut self, name: &str) -> Self {
        self.ipt = Box::new(Commands {
            netns: Some(name.to_string()),
        });
        self.full_sync = true;
        self
    }

    /// `--masquerade-all`: masquerade all traffic to cluster IPs, not only that from outside
    /// the cluster CIDR. Always the case when the node has no cluster CIDR.
    pub fn masquerade_all(mut self, on: bool) -> Self {
        self.ctx.masquerade_all = on || self.ctx.cluster_cidr.is_none();
        self
    }

    /// `--iptables-localhost-nodeports` (default true): NodePorts also answer on 127.0.0.1,
    /// which needs `net.ipv4.conf.all.route_localnet=1` (set on the first sync) and the
    /// KUBE-FIREWALL rule that drops other hosts' packets to 127.0.0.0/8.
    pub fn localhost_nodeports(mut self, on: bool) -> Self {
        self.localhost_nodeports = on;
        self.full_sync = true;
        self
    }

    /// `--nodeport-addresses`: NodePorts answer only on these addresses instead of on every
    /// local address (`-m addrtype --dst-type LOCAL`). IPv6 addresses are ignored.
    pub fn nodeport_addresses(mut self, addresses: Vec<IpAddr>) -> Self {
        self.nodeport_addresses = Some(
            addresses
                .into_iter()
                .filter_map(|ip| match ip {
                    IpAddr::V4(v4) => Some(v4),
                    IpAddr::V6(_) => None,
                })
                .collect(),
        );
        self
    }

    /// Make the next sync a full one: jump rules checked, every chain rewritten, leftovers
    /// removed. Syncs also become full by themselves an hour after the last full one, and
    /// when the canary chain (mangle KUBE-PROXY-CANARY, checked at most every 30 s) is gone.
    pub fn request_full_sync(&mut self) {
        self.full_sync = true;
    }

    /// What the last sync did.
    pub fn last_sync(&self) -> &SyncStats {
        &self.stats
    }

    fn restore(&mut self, input: &str) -> Result<()> {
        self.stats.restores += 1;
        self.stats.restore_bytes += input.len();
        let start = Instant::now();
        let r = self.ipt.restore(input);
        tracing::trace!(
            bytes = input.len(),
            elapsed_ms = start.elapsed().as_millis() as u64,
            ok = r.is_ok(),
            "iptables-restore"
        );
        r
    }

    /// Full sync preparations: sysctls, the top-level chains, the jump rules into them.
    fn prepare(&mut self, nat: &BTreeSet<String>, filter: &BTreeSet<String>) -> Result<()> {
        if self.localhost_nodeports {
            self.ipt
                .sysctl_set("net.ipv4.conf.all.route_localnet", "1")
                .context("allowing NodePorts on localhost (route_localnet)")?;
        }
        self.drop_invalid = self
            .ipt
            .sysctl_get("net.netfilter.nf_conntrack_tcp_be_liberal")
            .is_none_or(|v| v == "0");

        // The chains must exist before rules can jump to them; create only missing ones
        // (declaring an existing one would flush it early). Plus the canary: an empty
        // chain whose disappearance means the tables were flushed.
        let mut missing = format!("*mangle\n:{} - [0:0]\nCOMMIT\n", rules::KUBE_PROXY_CANARY);
        let filter_missing: Vec<&str> = self
            .filter_top_chains()
            .into_iter()
            .filter(|c| !filter.contains(*c))
            .collect();
        if !filter_missing.is_empty() {
            missing.push_str("*filter\n");
            for c in filter_missing {
                missing.push_str(&format!(":{c} - [0:0]\n"));
            }
            missing.push_str("COMMIT\n");
        }
        let nat_missing: Vec<&str> = rules::NAT_TOP_CHAINS
            .into_iter()
            .filter(|c| !nat.contains(*c))
            .collect();
        if !nat_missing.is_empty() {
            missing.push_str("*nat\n");
            for c in nat_missing {
                missing.push_str(&format!(":{c} - [0:0]\n"));
            }
            missing.push_str("COMMIT\n");
        }
        self.restore(&missing)
            .context("creating the top-level chains")?;

        for jump in rules::jumps(self.localhost_nodeports) {
            if !self.ipt.check(jump.table, jump.from, &jump.args)? {
                self.ipt
                    .insert(jump.table, jump.from, &jump.args)
                    .with_context(|| {
                        format!("linking {} {} to {}", jump.table, jump.from, jump.to)
                    })?;
            }
        }
        Ok(())
    }

    fn filter_top_chains(&self) -> Vec<&'static str> {
        let mut chains = rules::FILTER_TOP_CHAINS.to_vec();
        if self.localhost_nodeports {
            chains.push(rules::KUBE_FIREWALL);
        }
        chains
    }

    fn sync_inner(&mut self, snapshot: &Snapshot) -> Result<()> {
        if !self.full_sync {
            let now = Instant::now();
            if self
                .last_full
                .is_none_or(|t| now.duration_since(t) >= FULL_SYNC_PERIOD)
            {
                self.full_sync = true;
            } else if self
                .last_canary_check
                .is_none_or(|t| now.duration_since(t) >= self.canary_period)
            {
                // Someone flushing the tables (a firewall reload, say) takes the canary
                // with everything else; then rewrite everything.
                self.last_canary_check = Some(now);
                if !self.ipt.chain_exists("mangle", rules::KUBE_PROXY_CANARY)? {
                    tracing::info!(
                        "{} is gone: the iptables rules were flushed; rewriting all of them",
                        rules::KUBE_PROXY_CANARY
                    );
                    self.full_sync = true;
                }
            }
        }
        let full = self.full_sync;
        self.stats = SyncStats {
            full,
            ..SyncStats::default()
        };
        // The filter table has no per-service chains, so no leftovers to look for there
        // (KUBE-FIREWALL, which kubelet may share, is removed by cleanup only).
        let mut leftovers_nat: Vec<String> = Vec::new();
        if full {
            let nat = chains_in_save(&self.ipt.save("nat")?);
            let filter = chains_in_save(&self.ipt.save("filter")?);
            self.prepare(&nat, &filter)?;
            self.applied.clear();
            leftovers_nat = nat
                .into_iter()
                .filter(|c| rules::is_owned_chain("nat", c))
                .filter(|c| !rules::NAT_TOP_CHAINS.contains(&c.as_str()))
                .collect();
        }

        let total_endpoints: usize = snapshot
            .services
            .keys()
            .map(|k| snapshot.endpoints.get(k).map_or(0, |e| e.len()))
            .sum();
        let large = total_endpoints > rules::LARGE_CLUSTER_ENDPOINTS;
        self.ctx.large = large;

        // Render what changed; keep what did not.
        let mut old = std::mem::take(&mut self.applied);
        let mut applied: HashMap<ServicePortName, Applied> =
            HashMap::with_capacity(snapshot.services.len());
        let mut writes: Vec<Vec<ChainRules>> = Vec::new();
        let mut stale: Vec<String> = Vec::new();
        // Whether any service's rules in the shared chains changed (else they stay as is).
        let mut dispatch_changed = full;
        for (name, svc) in &snapshot.services {
            let endpoints = snapshot.endpoints.get(name);
            match old.remove(name) {
                Some(prev) if prev.same_input(svc, endpoints, large) => {
                    applied.insert(name.clone(), prev);
                }
                prev => {
                    dispatch_changed |= self.render_one(
                        name,
                        svc,
                        endpoints,
                        prev,
                        &mut applied,
                        &mut writes,
                        &mut stale,
                    )
                }
            }
        }
        dispatch_changed |= !old.is_empty();
        for (_, gone) in old {
            stale.extend(gone.chains.into_iter().map(|(c, _)| c));
        }
        if full {
            let wanted: HashSet<&str> = applied
                .values()
                .flat_map(|a| a.chains.iter().map(|(c, _)| c.as_str()))
                .collect();
            let known: HashSet<String> = stale.iter().cloned().collect();
            stale.extend(
                leftovers_nat
                    .into_iter()
                    .filter(|c| !wanted.contains(c.as_str()) && !known.contains(c)),
            );
        }
        stale.sort_unstable_by(|a, b| b.cmp(a));
        stale.dedup();

        // Per-service chains first, in transactions of their own when there are many.
        let lines: usize = writes
            .iter()
            .flatten()
            .map(|c| c.rules.matches('\n').count() + 1)
            .sum();
        let mut inline: Vec<&ChainRules> = Vec::new();
        if lines > self.chunk_lines {
            let mut chunk: Vec<&ChainRules> = Vec::new();
            let mut chunk_lines = 0;
            for group in &writes {
                for c in group {
                    chunk_lines += c.rules.matches('\n').count() + 1;
                    chunk.push(c);
                }
                if chunk_lines >= self.chunk_lines {
                    let input = nat_chains_transaction(&mut chunk);
                    self.restore(&input).context("writing service chains")?;
                    chunk.clear();
                    chunk_lines = 0;
                }
            }
            if !chunk.is_empty() {
                let input = nat_chains_transaction(&mut chunk);
                self.restore(&input).context("writing service chains")?;
            }
        } else {
            inline = writes.iter().flatten().collect();
        }
        self.stats.chains_written = writes.iter().map(Vec::len).sum();
        self.stats.chains_deleted = stale.len();
        self.stats.services = applied.len();

        // The final transaction: dispatch chains, remaining chain writes and, usually, the
        // deletions, so that the whole change is atomic. Many deletions, and those of a
        // full sync (which may find leftovers that something else still refers to), come
        // after it instead, where failing leaves the rules right and only garbage behind.
        let delete_inline = !full && stale.len() <= CHUNK_CHAINS;
        let (input, top_hashes) = self.final_transaction(
            full,
            dispatch_changed,
            &applied,
            &mut inline,
            if delete_inline { &stale } else { &[] },
        );
        if let Some(input) = input {
            self.restore(&input).context("applying the service rules")?;
        }
        self.stats.top_chains_written = top_hashes
            .iter()
            .filter(|(k, h)| full || self.top_applied.get(k) != Some(h))
            .count();
        self.top_applied = top_hashes;
        if !delete_inline && !stale.is_empty() {
            if let Err(e) = self.delete_chains("nat", &stale) {
                // Nothing of ours refers to them any more; the next full sync tries again.
                tracing::warn!(
                    chains = stale.len(),
                    error = format!("{e:#}"),
                    "could not delete unused iptables chains"
                );
            }
        }

        self.applied = applied;
        self.full_sync = false;
        if full {
            let now = Instant::now();
            self.last_full = Some(now);
            self.last_canary_check = Some(now);
        }
        Ok(())
    }

    /// Render one service port whose input changed; returns whether its rules in the shared
    /// chains changed.
    #[allow(clippy::too_many_arguments)]
    fn render_one(
        &self,
        name: &ServicePortName,
        svc: &Arc<ServicePort>,
        endpoints: Option<&Arc<Vec<Endpoint>>>,
        prev: Option<Applied>,
        applied: &mut HashMap<ServicePortName, Applied>,
        writes: &mut Vec<Vec<ChainRules>>,
        stale: &mut Vec<String>,
    ) -> bool {
        let (prev_dispatch, prev_chains): (Option<Rendered>, HashMap<String, u64>) = match prev {
            Some(p) => (Some(p.dispatch), p.chains.into_iter().collect()),
            None => (None, HashMap::new()),
        };
        let eps = endpoints.map(|e| e.as_slice()).unwrap_or(&[]);
        let Some(mut rendered) = rules::render_service(svc, eps, &self.ctx) else {
            stale.extend(prev_chains.into_keys());
            return prev_dispatch.is_some();
        };
        let chains = std::mem::take(&mut rendered.chains);
        let dispatch_changed = prev_dispatch.as_ref() != Some(&rendered);
        let mut hashed = Vec::with_capacity(chains.len());
        let mut changed = Vec::new();
        for c in chains {
            let h = content_hash(&c.rules);
            hashed.push((c.name.clone(), h));
            if prev_chains.get(&c.name) != Some(&h) {
                changed.push(c);
            }
        }
        stale.extend(
            prev_chains
                .into_keys()
                .filter(|c| !hashed.iter().any(|(h, _)| h == c)),
        );
        if !changed.is_empty() {
            writes.push(changed);
        }
        applied.insert(
            name.clone(),
            Applied {
                svc: svc.clone(),
                endpoints: endpoints.cloned(),
                large: self.ctx.large,
                dispatch: rendered,
                chains: hashed,
            },
        );
        dispatch_changed
    }

    /// The final transaction: the top-level chains whose rules changed (all of them on a
    /// full sync), the per-service chains not yet written, and the deletions. None when
    /// there is nothing to do. Also returns the top-level chains' new content hashes.
    fn final_transaction(
        &self,
        full: bool,
        dispatch_changed: bool,
        applied: &HashMap<ServicePortName, Applied>,
        chains: &mut [&ChainRules],
        stale: &[String],
    ) -> (Option<String>, TopHashes) {
        if !dispatch_changed {
            // Nothing in the top-level chains can differ: leave them be.
            let input = Self::transaction(&[], &[], &[], &[], chains, stale);
            return (input, self.top_applied.clone());
        }
        // Services in descending hash order: jumps then name their chains in the order
        // iptables-nft files them cheaply.
        let mut services: Vec<&Applied> = applied.values().collect();
        services.sort_unstable_by(|a, b| b.dispatch.hash.cmp(&a.dispatch.hash));

        let mut filter_top: Vec<(&'static str, String)> = Vec::new();
        if self.localhost_nodeports {
            let mut s = String::new();
            rules::filter_firewall_rules(&mut s);
            filter_top.push((rules::KUBE_FIREWALL, s));
        }
        let (mut nodeports, mut services_f, mut external, mut firewall) =
            (String::new(), String::new(), String::new(), String::new());
        for a in &services {
            nodeports.push_str(&a.dispatch.filter_nodeports);
            services_f.push_str(&a.dispatch.filter_services);
            external.push_str(&a.dispatch.filter_external);
            firewall.push_str(&a.dispatch.filter_firewall);
        }
        let mut forward = String::new();
        rules::filter_forward_rules(&mut forward, self.drop_invalid);
        filter_top.extend([
            (rules::KUBE_NODEPORTS, nodeports),
            (rules::KUBE_SERVICES, services_f),
            (rules::KUBE_EXTERNAL_SERVICES, external),
            (rules::KUBE_PROXY_FIREWALL, firewall),
            (rules::KUBE_FORWARD, forward),
        ]);

        let mut postrouting = String::new();
        rules::nat_postrouting_rules(&mut postrouting);
        let mut mark = String::new();
        rules::nat_mark_masq_rules(&mut mark);
        let size: usize = services
            .iter()
            .map(|a| a.dispatch.nat_services.len())
            .sum::<usize>()
            + 256;
        let mut services_n = String::with_capacity(size);
        let mut nodeports_n = String::new();
        for a in &services {
            services_n.push_str(&a.dispatch.nat_services);
            nodeports_n.push_str(&a.dispatch.nat_nodeports);
        }
        rules::nat_nodeports_jump(
            &mut services_n,
            self.nodeport_addresses.as_deref(),
            self.localhost_nodeports,
        );
        let nat_top: Vec<(&'static str, String)> = vec![
            (rules::KUBE_POSTROUTING, postrouting),
            (rules::KUBE_MARK_MASQ, mark),
            (rules::KUBE_NODEPORTS, nodeports_n),
            (rules::KUBE_SERVICES, services_n),
        ];

        let mut hashes = TopHashes::new();
        let mut changed = |table: &'static str, top: &[(&'static str, String)]| {
            let mut out: Vec<usize> = Vec::new();
            for (i, (chain, rules)) in top.iter().enumerate() {
                let h = content_hash(rules);
                if full || self.top_applied.get(&(table, *chain)) != Some(&h) {
                    out.push(i);
                }
                hashes.insert((table, *chain), h);
            }
            out
        };
        let filter_changed = changed("filter", &filter_top);
        let nat_changed = changed("nat", &nat_top);

        let input = Self::transaction(
            &filter_top,
            &filter_changed,
            &nat_top,
            &nat_changed,
            chains,
            stale,
        );
        (input, hashes)
    }

    /// The restore input writing the given top-level chains (`*_changed` index `*_top`),
    /// service chains and deletions; None if there is nothing to write.
    fn transaction(
        filter_top: &[(&'static str, String)],
        filter_changed: &[usize],
        nat_top: &[(&'static str, String)],
        nat_changed: &[usize],
        chains: &mut [&ChainRules],
        stale: &[String],
    ) -> Option<String> {
        let mut out = String::new();
        if !filter_changed.is_empty() {
            out.push_str("*filter\n");
            for &i in filter_changed {
                out.push_str(&format!(":{} - [0:0]\n", filter_top[i].0));
            }
            for &i in filter_changed {
                out.push_str(&filter_top[i].1);
            }
            out.push_str("COMMIT\n");
        }
        if !nat_changed.is_empty() || !chains.is_empty() || !stale.is_empty() {
            let size: usize = nat_changed
                .iter()
                .map(|&i| nat_top[i].1.len())
                .sum::<usize>()
                + chains.iter().map(|c| c.rules.len() + 40).sum::<usize>()
                + stale.len() * 64
                + 64;
            out.reserve(size);
            out.push_str("*nat\n");
            for &i in nat_changed {
                out.push_str(&format!(":{} - [0:0]\n", nat_top[i].0));
            }
            chains.sort_unstable_by(|a, b| b.name.cmp(&a.name));
            for c in chains.iter() {
                out.push_str(&format!(":{} - [0:0]\n", c.name));
            }
            for c in stale {
                out.push_str(&format!(":{c} - [0:0]\n"));
            }
            for c in chains.iter() {
                out.push_str(&c.rules);
            }
            for &i in nat_changed {
                out.push_str(&nat_top[i].1);
            }
            for c in stale {
                out.push_str(&format!("-X {c}\n"));
            }
            out.push_str("COMMIT\n");
        }
        (!out.is_empty()).then_some(out)
    }

    /// Flush, then delete, `chains` of `table` (none may be referenced from outside the
    /// set), in transactions of a bounded size.
    fn delete_chains(&mut self, table: &str, chains: &[String]) -> Result<()> {
        for part in chains.chunks(CHUNK_CHAINS) {
            let mut input = format!("*{table}\n");
            for c in part {
                input.push_str(&format!(":{c} - [0:0]\n"));
            }
            input.push_str("COMMIT\n");
            self.restore(&input)?;
        }
        for part in chains.chunks(CHUNK_CHAINS) {
            let mut input = format!("*{table}\n");
            for c in part {
                input.push_str(&format!("-X {c}\n"));
            }
            input.push_str("COMMIT\n");
            self.restore(&input)?;
        }
        Ok(())
    }
}

/// A transaction writing `chains` (declared, so flushed, then filled), in descending name
/// order.
fn nat_chains_transaction(chains: &mut [&ChainRules]) -> String {
    chains.sort_unstable_by(|a, b| b.name.cmp(&a.name));
    let size = chains.iter().map(|c| c.rules.len() + 40).sum::<usize>() + 16;
    let mut out = String::with_capacity(size);
    out.push_str("*nat\n");
    for c in chains.iter() {
        out.push_str(&format!(":{} - [0:0]\n", c.name));
    }
    for c in chains.iter() {
        out.push_str(&c.rules);
    }
    out.push_str("COMMIT\n");
    out
}

fn content_hash(rules: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    rules.hash(&mut h);
    h.finish()
}

impl Proxier for IptablesProxier {
    fn sync(&mut self, snapshot: &Snapshot) -> Result<()> {
        let start = Instant::now();
        match self.sync_inner(snapshot) {
            Ok(()) => {
                tracing::debug!(
                    full = self.stats.full,
                    services = self.stats.services,
                    chains_written = self.stats.chains_written,
                    chains_deleted = self.stats.chains_deleted,
                    restores = self.stats.restores,
                    elapsed_ms = start.elapsed().as_millis() as u64,
                    "iptables rules synced"
                );
                Ok(())
            }
            Err(e) => {
                // What is in the kernel is no longer known: start over next time.
                self.applied.clear();
                self.top_applied.clear();
                self.full_sync = true;
                Err(e)
            }
        }
    }

    fn cleanup(&mut self) -> Result<()> {
        self.applied.clear();
        self.top_applied.clear();
        self.full_sync = true;
        let mut errors: Vec<String> = Vec::new();
        for table in ["filter", "nat", "mangle"] {
            let save = match self.ipt.save(table) {
                Ok(s) => s,
                Err(e) => {
                    errors.push(format!("{e:#}"));
                    continue;
                }
            };
            // Unlink first (every jump from a built-in chain, copies a crashed run may have
            // left included), so that nothing refers to our chains; then remove them.
            let unlink = exec::unlink_lines(&save, |c| rules::is_owned_chain(table, c));
            if !unlink.is_empty() {
                let input = format!("*{table}\n{}\nCOMMIT\n", unlink.join("\n"));
                if let Err(e) = self.restore(&input) {
                    errors.push(format!("unlinking {table} chains: {e:#}"));
                    continue;
                }
            }
            let mut owned: Vec<String> = chains_in_save(&save)
                .into_iter()
                .filter(|c| rules::is_owned_chain(table, c))
                .collect();
            owned.sort_unstable_by(|a, b| b.cmp(a));
            if let Err(e) = self.delete_chains(table, &owned) {
                errors.push(format!("removing {table} chains: {e:#}"));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(anyhow!("iptables cleanup: {}", errors.join("; ")))
        }
    }
}
