//! The nftables proxy mode, after kube-proxy's (`--proxy-mode=nftables`, Kubernetes v1.32).
//!
//! Everything lives in one table, `ip kube-proxy` (IPv4 only: IPv6 services, ClusterIPs and
//! endpoints are ignored; an `ip6 kube-proxy` table is not built yet):
//!
//! - base chains `filter-{prerouting,input,forward,output}` (priority dstnat-10, so they see
//!   pre-DNAT destinations), `filter-output-post-dnat` (dstnat+10), `nat-{prerouting,output}`
//!   (dstnat) and `nat-postrouting` (srcnat);
//! - `services`: `ip daddr . meta l4proto . th dport vmap @service-ips` dispatches ClusterIPs,
//!   external IPs and load balancer IPs, `meta l4proto . th dport vmap @service-nodeports`
//!   NodePorts (on the node's own IPs, the `nodeport-ips` set, as kube-proxy's nftables mode
//!   does by default; on every local address but 127.0.0.0/8 when the node's IPs are
//!   unknown);
//! - per service port: `service-HASH-ns/name/proto/port` picks an endpoint (after
//!   ClientIP-affinity lookups in `affinity-…` sets with a timeout) with a cascade of
//!   plain rules, `numgen random mod N-i == 0 goto endpoint-…` for endpoint i and a final
//!   `goto`, as kube-proxy's iptables mode does with probabilities. kube-proxy's nftables
//!   mode uses an anonymous `numgen random mod N vmap { … }` instead, but the kernel names
//!   each anonymous set by scanning every set of the table, which made the first sync of
//!   10,000 services take ~50 s; a shared named map is no better (every element is
//!   checked against every rule bound to the map). The vmap is kept for more than
//!   `CASCADE_MAX_ENDPOINTS` (32) endpoints, where a cascade would cost per packet.
//!   `local-…` is the same over this node's endpoints
//!   (traffic policy Local), `external-…` handles NodePort/external/LB traffic
//!   (masquerade, or short-circuit pod and node traffic for policy Local), `firewall-…`
//!   enforces loadBalancerSourceRanges; `endpoint-…` chains mark hairpin traffic for
//!   masquerading, record affinity and DNAT;
//! - services without endpoints are refused at once (`no-endpoint-services` /
//!   `no-endpoint-nodeports` → `reject-chain`), or dropped when only a Local policy leaves
//!   them without endpoints; connections to an active ClusterIP on an unknown port are
//!   rejected (`cluster-ips` set);
//! - masquerading: services mark packets (`mark-for-masquerade`), `masquerading` SNATs the
//!   marked ones in postrouting. ClusterIP traffic is marked when it comes from outside the
//!   cluster CIDR, or always when no cluster CIDR is known — by one rule in `services` over
//!   the `cluster-ips` set, where kube-proxy has one per service chain.
//!
//! Syncs are incremental: the proxier remembers what each service port put in the table and
//! sends one `nft -f -` transaction that adds, flushes and deletes only the chains, affinity
//! sets and map/set elements that changed. The first sync (and the one after a failed sync)
//! deletes whatever table a previous run left and recreates it; ClientIP affinity memory
//! starts afresh then. Not done here: clearing stale UDP conntrack entries, the
//! healthCheckNodePort server.

mod rules;

#[cfg(test)]
mod kernel_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{Endpoint, NodeInfo, Proxier, ServicePort, ServicePortName, Snapshot};
use rules::{Config, Container, Ipv4Cidr, ServiceRules, TABLE_REF};

pub use rules::TABLE;

/// At most this many elements per `add element` / `delete element` command.
const ELEMENTS_PER_COMMAND: usize = 1000;
/// Chains that stopped being used are deleted this long after (only on kernels before
/// 6.2, which notice late that a verdict-map element no longer references a chain).
const STALE_CHAIN_DELAY: Duration = Duration::from_secs(1);

/// What one sync did (for logs and benchmarks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// The table was recreated from scratch.
    pub full: bool,
    /// Commands in the transaction (0: nothing changed, nft wasn't run).
    pub commands: usize,
    /// Service ports whose rules were regenerated.
    pub changed_services: usize,
}

/// The nftables backend. See the module documentation.
pub struct NftablesProxier {
    cfg: Config,
    /// Run every `nft` inside this network namespace (`ip netns exec`).
    netns: Option<String>,
    /// What each service port has in the table, and the inputs it was computed from.
    services: HashMap<ServicePortName, Installed>,
    elements: ElementStore,
    /// Flushed chains waiting to be deleted, with when they became unused.
    stale_chains: BTreeMap<String, Instant>,
    /// The table must be recreated (first sync, or the last transaction failed so what's
    /// installed is unknown).
    needs_full_sync: bool,
    /// The kernel lets a transaction delete a chain that a map element it also deletes
    /// referenced (6.2 and later); otherwise deletion waits a sync.
    delete_chains_at_once: bool,
    last: SyncStats,
}

/// One service port as installed.
struct Installed {
    service: Arc<ServicePort>,
    endpoints: Option<Arc<Vec<Endpoint>>>,
    rules: ServiceRules,
}

impl NftablesProxier {
    /// A proxier for `node`. Checks that `nft` (nftables 1.0.1 or later) can be run; changes
    /// nothing until the first `sync`.
    pub fn new(node: NodeInfo) -> Result<Self> {
        check_nft()?;
        let mut proxier = Self::with_node(node)?;
        proxier.delete_chains_at_once = kernel_at_least(6, 2);
        Ok(proxier)
    }

    /// Run every `nft` command as `ip netns exec <name> nft …`.
    pub fn in_netns(mut self, name: &str) -> Self {
        self.netns = Some(name.to_string());
        self
    }

    /// What the last `sync` did.
    pub fn last_sync(&self) -> SyncStats {
        self.last
    }

    /// The proxier without touching the system (no `nft` check).
    fn with_node(node: NodeInfo) -> Result<Self> {
        let mut cluster_cidr = None;
        if let Some(cidrs) = node.cluster_cidr.as_deref() {
            for cidr in cidrs.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                let parsed = Ipv4Cidr::parse(cidr)
                    .map_err(|e| anyhow::anyhow!("invalid cluster CIDR: {e}"))?;
                if cluster_cidr.is_none() {
                    cluster_cidr = parsed;
                }
            }
        }
        let mut node_ips = Vec::new();
        for ip in &node.ips {
            if let IpAddr::V4(v4) = ip {
                if !node_ips.contains(v4) {
                    node_ips.push(*v4);
                }
            }
        }
        Ok(NftablesProxier {
            cfg: Config {
                node_name: node.name,
                cluster_cidr,
                node_ips,
            },
            netns: None,
            services: HashMap::new(),
            elements: ElementStore::default(),
            stale_chains: BTreeMap::new(),
            needs_full_sync: true,
            delete_chains_at_once: true,
            last: SyncStats::default(),
        })
    }

    /// Works out the transaction that takes the table from what's installed to `snapshot`,
    /// and records the result as installed (a failed transaction makes the next sync a
    /// full one, so the record never outlives a failure).
    fn plan(&mut self, snapshot: &Snapshot, now: Instant) -> Transaction {
        let mut tx = Transaction::default();
        let full = self.needs_full_sync;
        if full {
            self.services.clear();
            self.elements = ElementStore::default();
            self.stale_chains.clear();
            rules::skeleton(&self.cfg, &mut tx.setup);
        }
        let mut changed = 0;
        let gone: Vec<ServicePortName> = self
            .services
            .keys()
            .filter(|name| !snapshot.services.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            if let Some(old) = self.services.remove(&name) {
                changed += 1;
                self.diff(&mut tx, &name, &old.rules, &ServiceRules::default(), now);
            }
        }
        for (name, service) in &snapshot.services {
            let endpoints = snapshot.endpoints.get(name);
            if let Some(old) = self.services.get(name) {
                if old.same_inputs(service, endpoints) {
                    continue;
                }
            }
            changed += 1;
            let eps: &[Endpoint] = endpoints.map(|e| e.as_slice()).unwrap_or(&[]);
            let new_rules = rules::service_rules(&self.cfg, name, service, eps);
            let old_rules = self
                .services
                .remove(name)
                .map(|old| old.rules)
                .unwrap_or_default();
            self.diff(&mut tx, name, &old_rules, &new_rules, now);
            self.services.insert(
                name.clone(),
                Installed {
                    service: service.clone(),
                    endpoints: endpoints.cloned(),
                    rules: new_rules,
                },
            );
        }
        self.elements.flush_into(&mut tx);
        self.last = SyncStats {
            full,
            commands: 0,
            changed_services: changed,
        };
        tx
    }

    /// Adds to `tx` what turns `old` (installed by `owner`) into `new`.
    fn diff(
        &mut self,
        tx: &mut Transaction,
        owner: &ServicePortName,
        old: &ServiceRules,
        new: &ServiceRules,
        now: Instant,
    ) {
        // A set's timeout can't be changed in place: delete and recreate it, which needs
        // every rule using it flushed first, so the service's chains are all rewritten.
        let mut rewrite_all = false;
        for (set, timeout) in &old.affinity_sets {
            match new.affinity_sets.get(set) {
                None => tx.delete_set(set),
                Some(t) if t != timeout => {
                    tx.delete_set(set);
                    tx.add_set(set, *t);
                    rewrite_all = true;
                }
                Some(_) => {}
            }
        }
        for (set, timeout) in &new.affinity_sets {
            if !old.affinity_sets.contains_key(set) {
                tx.add_set(set, *timeout);
            }
        }
        for chain in old.chains.keys() {
            if !new.chains.contains_key(chain) {
                tx.flush_chain(chain);
                if self.delete_chains_at_once {
                    tx.delete_chain(chain);
                } else {
                    self.stale_chains.insert(chain.clone(), now);
                }
            }
        }
        for (chain, rules) in &new.chains {
            match old.chains.get(chain) {
                Some(old_rules) if old_rules == rules && !rewrite_all => {}
                Some(_) => {
                    tx.flush_chain(chain);
                    tx.add_rules(chain, rules);
                }
                None => {
                    // A stale chain coming back exists (empty): "add" is a no-op then.
                    self.stale_chains.remove(chain);
                    tx.add_chain(chain);
                    tx.add_rules(chain, rules);
                }
            }
        }
        for e in &old.elements {
            self.elements.remove(e.container, &e.key, owner);
        }
        for e in &new.elements {
            self.elements.insert(e.container, &e.key, owner, &e.value);
        }
    }

    /// Deletes chains that have been unused for long enough (old kernels only). A chain
    /// that can't be deleted stays behind empty, which is harmless, until the next full
    /// sync.
    fn delete_stale_chains(&mut self, now: Instant) {
        let due: Vec<String> = self
            .stale_chains
            .iter()
            .filter(|(_, since)| now.saturating_duration_since(**since) >= STALE_CHAIN_DELAY)
            .map(|(chain, _)| chain.clone())
            .collect();
        if due.is_empty() {
            return;
        }
        let mut text = String::new();
        for chain in &due {
            text.push_str(&format!("delete chain {TABLE_REF} {chain}\n"));
        }
        if let Err(err) = self.run_nft(&text) {
            tracing::warn!(
                chains = due.len(),
                "deleting stale nftables chains: {err:#}"
            );
        }
        for chain in due {
            self.stale_chains.remove(&chain);
        }
    }

    /// Runs `nft -f -` with `input` as one transaction.
    fn run_nft(&self, input: &str) -> Result<()> {
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns, "nft", "-f", "-"]);
                cmd
            }
            None => {
                let mut cmd = Command::new("nft");
                cmd.args(["-f", "-"]);
                cmd
            }
        };
        let what = match &self.netns {
            Some(ns) => format!("nft -f - in network namespace {ns}"),
            None => "nft -f -".to_string(),
        };
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().with_context(|| format!("running {what}"))?;
        let mut stdin = child
            .stdin
            .take()
            .with_context(|| format!("{what}: no stdin"))?;
        // Write from another thread so that nft can't block on a full stderr pipe while
        // we block on its stdin.
        let output = std::thread::scope(|s| {
            let writer = s.spawn(move || stdin.write_all(input.as_bytes()));
            let output = child.wait_with_output();
            // A failed write (nft quit early) shows in nft's status and stderr.
            let _ = writer.join();
            output
        })
        .with_context(|| format!("waiting for {what}"))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let mut msg: String = stderr.trim().chars().take(4000).collect();
            if msg.is_empty() {
                msg = "no error output".to_string();
            }
            bail!("{what} failed ({}): {msg}", output.status);
        }
        Ok(())
    }
}

impl Installed {
    fn same_inputs(
        &self,
        service: &Arc<ServicePort>,
        endpoints: Option<&Arc<Vec<Endpoint>>>,
    ) -> bool {
        let same_service = Arc::ptr_eq(&self.service, service) || *self.service == **service;
        let same_endpoints = match (&self.endpoints, endpoints) {
            (Some(a), Some(b)) if Arc::ptr_eq(a, b) => true,
            (a, b) => {
                let a: &[Endpoint] = a.as_deref().map(|v| v.as_slice()).unwrap_or(&[]);
                let b: &[Endpoint] = b.map(|v| v.as_slice()).unwrap_or(&[]);
                a == b
            }
        };
        same_service && same_endpoints
    }
}

impl Proxier for NftablesProxier {
    fn sync(&mut self, snapshot: &Snapshot) -> Result<()> {
        let start = Instant::now();
        if !self.delete_chains_at_once && !self.needs_full_sync {
            self.delete_stale_chains(start);
        }
        let tx = self.plan(snapshot, start);
        if tx.is_empty() {
            return Ok(());
        }
        let text = tx.render();
        self.last.commands = text.lines().count();
        match self.run_nft(&text) {
            Ok(()) => {
                self.needs_full_sync = false;
                tracing::debug!(
                    full = self.last.full,
                    commands = self.last.commands,
                    changed_services = self.last.changed_services,
                    services = snapshot.services.len(),
                    elapsed = ?start.elapsed(),
                    "synced nftables rules"
                );
                Ok(())
            }
            Err(err) => {
                // What's installed is unknown now: rebuild the table next time.
                self.needs_full_sync = true;
                Err(err.context(format!(
                    "applying the {} transaction ({} commands)",
                    if self.last.full {
                        "full"
                    } else {
                        "incremental"
                    },
                    self.last.commands
                )))
            }
        }
    }

    fn cleanup(&mut self) -> Result<()> {
        self.needs_full_sync = true;
        self.services.clear();
        self.elements = ElementStore::default();
        self.stale_chains.clear();
        // "add" first so that deleting succeeds when there is no table.
        self.run_nft(&format!(
            "add table {TABLE_REF}\ndelete table {TABLE_REF}\n"
        ))
        .context("deleting the kube-proxy nftables table")
    }
}

/// The elements of the shared sets and maps. Several service ports can want the same key
/// (every port of a service shares its ClusterIP; two services may share an external IP):
/// each key remembers every owner's value and the first owner's is installed.
#[derive(Default)]
struct ElementStore {
    entries: HashMap<(Container, String), BTreeMap<ServicePortName, String>>,
    /// Keys changed during this plan, with the value installed before.
    touched: BTreeMap<(Container, String), Option<String>>,
}

impl ElementStore {
    fn installed(&self, key: &(Container, String)) -> Option<&String> {
        self.entries
            .get(key)
            .and_then(|owners| owners.values().next())
    }

    fn touch(&mut self, key: &(Container, String)) {
        if !self.touched.contains_key(key) {
            let before = self.installed(key).cloned();
            self.touched.insert(key.clone(), before);
        }
    }

    fn remove(&mut self, container: Container, key: &str, owner: &ServicePortName) {
        let key = (container, key.to_string());
        self.touch(&key);
        if let Some(owners) = self.entries.get_mut(&key) {
            owners.remove(owner);
            if owners.is_empty() {
                self.entries.remove(&key);
            }
        }
    }

    fn insert(&mut self, container: Container, key: &str, owner: &ServicePortName, value: &str) {
        let key = (container, key.to_string());
        self.touch(&key);
        self.entries
            .entry(key)
            .or_default()
            .insert(owner.clone(), value.to_string());
    }

    /// Adds the element changes since the last flush to `tx`.
    fn flush_into(&mut self, tx: &mut Transaction) {
        for (key, before) in std::mem::take(&mut self.touched) {
            let after = self.installed(&key);
            if before.as_ref() == after {
                continue;
            }
            if before.is_some() {
                tx.delete_elements
                    .entry(key.0)
                    .or_default()
                    .push(key.1.clone());
            }
            if let Some(value) = after {
                let element = format!("{}{value}", key.1);
                tx.add_elements.entry(key.0).or_default().push(element);
            }
        }
    }
}

/// One `nft -f -` transaction, in phases that keep every reference valid: chains are
/// flushed before the sets their rules use are deleted, chains exist before rules and map
/// elements jump to them, and chains are deleted last.
#[derive(Default)]
struct Transaction {
    setup: String,
    flush_chains: String,
    delete_sets: String,
    delete_elements: BTreeMap<Container, Vec<String>>,
    add_objects: String,
    add_rules: String,
    add_elements: BTreeMap<Container, Vec<String>>,
    delete_chains: String,
}

impl Transaction {
    fn flush_chain(&mut self, chain: &str) {
        self.flush_chains
            .push_str(&format!("flush chain {TABLE_REF} {chain}\n"));
    }

    fn delete_chain(&mut self, chain: &str) {
        self.delete_chains
            .push_str(&format!("delete chain {TABLE_REF} {chain}\n"));
    }

    fn add_chain(&mut self, chain: &str) {
        self.add_objects
            .push_str(&format!("add chain {TABLE_REF} {chain}\n"));
    }

    fn add_rules(&mut self, chain: &str, rules: &[String]) {
        for rule in rules {
            self.add_rules
                .push_str(&format!("add rule {TABLE_REF} {chain} {rule}\n"));
        }
    }

    fn add_set(&mut self, set: &str, timeout_seconds: u32) {
        // "dynamic" because the data path adds to it (some kernels add the flag by
        // themselves, and a later "add" without it would then fail).
        self.add_objects.push_str(&format!(
            "add set {TABLE_REF} {set} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {timeout_seconds}s ; }}\n"
        ));
    }

    fn delete_set(&mut self, set: &str) {
        self.delete_sets
            .push_str(&format!("delete set {TABLE_REF} {set}\n"));
    }

    fn is_empty(&self) -> bool {
        self.setup.is_empty()
            && self.flush_chains.is_empty()
            && self.delete_sets.is_empty()
            && self.delete_elements.is_empty()
            && self.add_objects.is_empty()
            && self.add_rules.is_empty()
            && self.add_elements.is_empty()
            && self.delete_chains.is_empty()
    }

    fn render(&self) -> String {
        fn elements(out: &mut String, verb: &str, all: &BTreeMap<Container, Vec<String>>) {
            for (container, items) in all {
                for chunk in items.chunks(ELEMENTS_PER_COMMAND) {
                    out.push_str(&format!(
                        "{verb} element {TABLE_REF} {} {{ {} }}\n",
                        container.name(),
                        chunk.join(", ")
                    ));
                }
            }
        }
        let mut out = String::with_capacity(
            self.setup.len()
                + self.flush_chains.len()
                + self.add_objects.len()
                + self.add_rules.len()
                + 64 * self.add_elements.values().map(Vec::len).sum::<usize>(),
        );
        out.push_str(&self.setup);
        out.push_str(&self.flush_chains);
        out.push_str(&self.delete_sets);
        elements(&mut out, "delete", &self.delete_elements);
        out.push_str(&self.add_objects);
        out.push_str(&self.add_rules);
        elements(&mut out, "add", &self.add_elements);
        out.push_str(&self.delete_chains);
        out
    }
}

/// Fails unless `nft` runs and is 1.0.1 or later (older versions parse the whole ruleset,
/// other tables included, and have crashed on rules newer tools wrote).
fn check_nft() -> Result<()> {
    let output = Command::new("nft")
        .arg("--version")
        .output()
        .context("running nft --version (the nftables proxy mode needs nft 1.0.1 or later)")?;
    if !output.status.success() {
        bail!(
            "nft --version failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    match parse_nft_version(&text) {
        Some(v) if v >= (1, 0, 1) => Ok(()),
        Some((a, b, c)) => {
            bail!("nft {a}.{b}.{c} is too old: the nftables proxy mode needs nft 1.0.1 or later")
        }
        None => bail!("can't tell the nft version from {:?}", text.trim()),
    }
}

/// `nftables v1.0.6 (Lester Gooch #5)` → (1, 0, 6).
fn parse_nft_version(text: &str) -> Option<(u32, u32, u32)> {
    let word = text.split_whitespace().find(|w| w.starts_with('v'))?;
    let mut parts = word[1..].split('.').map(|p| {
        let digits: String = p.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse::<u32>().ok()
    });
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// Whether the running kernel is `major.minor` or later (false when unknown).
fn kernel_at_least(major: u32, minor: u32) -> bool {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .and_then(|release| parse_kernel_release(&release))
        .is_some_and(|v| v >= (major, minor))
}

/// `6.18.44-fc-v769` → (6, 18).
fn parse_kernel_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}
