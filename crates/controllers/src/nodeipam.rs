//! Node IPAM with the range allocator (Kubernetes' `pkg/controller/nodeipam`): each node without
//! pod addresses gets the next free `--node-cidr-mask-size` slice of every `--cluster-cidr`
//! (comma-separated for dual stack) in `spec.podCIDR`/`spec.podCIDRs`. Slices already on nodes
//! are learned from the informer's first list before anything is handed out, and are given
//! back when their node is deleted. When a range is exhausted the node gets a
//! `CIDRNotAvailable` event and is retried with back-off.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use capstan_runtime::{Change, Informer, Queue, Recorder};
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use parking_lot::Mutex;
use serde_json::json;

use crate::util::is_not_found;
use crate::Ctx;

/// The prefix length of IPv6 node slices (Kubernetes' `--node-cidr-mask-size-ipv6` default).
const IPV6_NODE_MASK_SIZE: u8 = 64;
/// IPv6 node slices may be at most this many bits longer than the cluster range.
const MAX_IPV6_SUBNET_DIFF: u8 = 16;
/// Attempts at writing a node's podCIDRs.
const UPDATE_RETRIES: usize = 3;

pub const NO_CIDRS_LEFT: &str =
    "CIDR allocation failed; there are no remaining CIDRs left to allocate in the accepted range";

pub fn start(ctx: &Ctx) {
    let Some(cluster) = ctx.opts.cluster_cidr.clone() else {
        tracing::info!("nodeipam: no --cluster-cidr; not allocating node CIDRs");
        return;
    };
    let mut sets = Vec::new();
    for cidr in cluster.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let mask = if cidr.contains(':') {
            IPV6_NODE_MASK_SIZE
        } else {
            ctx.opts.node_cidr_mask_size
        };
        match CidrSet::new(cidr, mask) {
            Ok(s) => sets.push(s),
            Err(e) => {
                tracing::error!(cidr, error = %e, "nodeipam: invalid --cluster-cidr; not allocating node CIDRs");
                return;
            }
        }
    }
    if sets.is_empty() {
        return;
    }
    let nodes = ctx.informers.get::<Node>();
    let alloc = Arc::new(Allocator {
        client: ctx.client.clone(),
        recorder: ctx.recorder("cidrAllocator"),
        nodes: nodes.clone(),
        sets: Mutex::new(sets),
        assigned: Mutex::new(HashMap::new()),
        queue: Queue::new("nodeipam"),
    });
    {
        let alloc = alloc.clone();
        nodes.on_change(move |c| match c {
            Change::Add(n) | Change::Update { new: n, .. } => {
                let cidrs = pod_cidrs(n);
                if cidrs.is_empty() {
                    alloc.queue.add(n.metadata.name.clone().unwrap_or_default());
                } else if !matches!(c, Change::Update { old, .. } if pod_cidrs(old) == cidrs) {
                    alloc.occupy(n);
                }
            }
            Change::Delete(n) => alloc.release(n),
        });
    }
    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        alloc.nodes.wait_synced().await;
        let a = alloc.clone();
        alloc.queue.run_workers(workers, move |name| {
            let a = a.clone();
            async move { a.sync(&name).await }
        });
    });
}

fn pod_cidrs(node: &Node) -> Vec<String> {
    let spec = node.spec.as_ref();
    let list: Vec<String> = spec
        .and_then(|s| s.pod_cidrs.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| !c.is_empty())
        .collect();
    if !list.is_empty() {
        return list;
    }
    spec.and_then(|s| s.pod_cidr.clone())
        .filter(|c| !c.is_empty())
        .into_iter()
        .collect()
}

struct Allocator {
    client: Client,
    recorder: Recorder,
    nodes: Arc<Informer<Node>>,
    /// One set per cluster CIDR, in `--cluster-cidr` order.
    sets: Mutex<Vec<CidrSet>>,
    /// Node uid → the slices written to it that the cache does not show yet (so a stale
    /// cached node is not given a second set).
    assigned: Mutex<HashMap<String, Vec<String>>>,
    queue: Arc<Queue>,
}

impl Allocator {
    /// Mark a node's slices as used (learned from the cluster).
    fn occupy(&self, node: &Node) {
        if let Some(uid) = node.metadata.uid.as_deref() {
            self.assigned.lock().remove(uid);
        }
        let mut sets = self.sets.lock();
        for (i, cidr) in pod_cidrs(node).iter().enumerate() {
            let r = match sets.get_mut(i) {
                Some(s) => s.occupy(cidr),
                None => Err(format!(
                    "node {} has an allocated cidr {cidr} at index {i} that does not exist in cluster cidrs configuration",
                    node.metadata.name.as_deref().unwrap_or_default()
                )),
            };
            if let Err(e) = r {
                tracing::warn!(node = ?node.metadata.name, error = %e, "nodeipam: cannot occupy node CIDR");
            }
        }
    }

    /// Give a deleted node's slices back (also those written but not yet seen on it).
    fn release(&self, node: &Node) {
        let pending = node
            .metadata
            .uid
            .as_deref()
            .and_then(|uid| self.assigned.lock().remove(uid));
        let mut cidrs = pod_cidrs(node);
        if cidrs.is_empty() {
            cidrs = pending.unwrap_or_default();
        }
        let mut sets = self.sets.lock();
        for (i, cidr) in cidrs.iter().enumerate() {
            if let Some(s) = sets.get_mut(i) {
                if let Err(e) = s.release(cidr) {
                    tracing::warn!(node = ?node.metadata.name, error = %e, "nodeipam: cannot release node CIDR");
                }
            }
        }
    }

    fn release_all(&self, cidrs: &[String]) {
        let mut sets = self.sets.lock();
        for (s, c) in sets.iter_mut().zip(cidrs) {
            let _ = s.release(c);
        }
    }

    async fn sync(&self, name: &str) -> anyhow::Result<()> {
        let Some(node) = self.nodes.get("", name) else {
            return Ok(());
        };
        if !pod_cidrs(&node).is_empty() {
            self.occupy(&node);
            return Ok(());
        }
        let uid = node.metadata.uid.clone().unwrap_or_default();
        if self.assigned.lock().contains_key(&uid) {
            // Written already; the cache has not caught up.
            return Ok(());
        }
        let allocated: Result<Vec<String>, String> = {
            let mut sets = self.sets.lock();
            let mut out = Vec::new();
            let mut err = None;
            for s in sets.iter_mut() {
                match s.allocate_next() {
                    Ok(c) => out.push(c),
                    Err(e) => {
                        err = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = err {
                for (s, c) in sets.iter_mut().zip(&out) {
                    let _ = s.release(c);
                }
                Err(e)
            } else {
                Ok(out)
            }
        };
        let cidrs = match allocated {
            Ok(c) => c,
            Err(e) => {
                self.recorder.record(
                    node_ref(&node),
                    capstan_runtime::events::NORMAL,
                    "CIDRNotAvailable",
                    format!("Node {name} status is now: CIDRNotAvailable"),
                );
                anyhow::bail!("node {name}: {e}");
            }
        };
        // The node may have been given addresses meanwhile.
        if let Some(now) = self.nodes.get("", name) {
            let have = pod_cidrs(&now);
            if !have.is_empty() {
                if have != cidrs {
                    self.release_all(&cidrs);
                }
                return Ok(());
            }
        }
        let patch = json!({"spec": {"podCIDR": cidrs[0], "podCIDRs": cidrs}});
        let api: Api<Node> = Api::all(self.client.clone());
        let mut last = None;
        for _ in 0..UPDATE_RETRIES {
            match api
                .patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
            {
                Ok(n) => {
                    tracing::info!(node = name, cidrs = ?cidrs, "set node PodCIDR");
                    if n.metadata.uid.as_deref() == Some(uid.as_str())
                        && self
                            .nodes
                            .get("", name)
                            .is_some_and(|c| pod_cidrs(&c).is_empty())
                    {
                        self.assigned.lock().insert(uid, cidrs);
                    }
                    return Ok(());
                }
                Err(e) if is_not_found(&e) => {
                    self.release_all(&cidrs);
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
        }
        self.recorder.record(
            node_ref(&node),
            capstan_runtime::events::NORMAL,
            "CIDRAssignmentFailed",
            format!("Node {name} status is now: CIDRAssignmentFailed"),
        );
        self.release_all(&cidrs);
        match last {
            Some(e) => {
                Err(anyhow::Error::from(e).context(format!("setting podCIDRs of node {name}")))
            }
            None => Ok(()),
        }
    }
}

fn node_ref(node: &Node) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: node.metadata.name.clone(),
        uid: node.metadata.uid.clone(),
        namespace: Some(String::new()),
        ..Default::default()
    }
}

/// A parsed CIDR: the masked network address as an integer, and its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Net {
    addr: u128,
    prefix: u8,
    v4: bool,
}

impl Net {
    fn bits(&self) -> u8 {
        if self.v4 {
            32
        } else {
            128
        }
    }

    fn mask(bits: u8, prefix: u8) -> u128 {
        let host = u32::from(bits - prefix.min(bits));
        let all: u128 = if bits == 128 {
            u128::MAX
        } else {
            (1u128 << bits) - 1
        };
        if host >= 128 {
            0
        } else {
            all & !((1u128 << host) - 1) & all
        }
    }

    fn parse(s: &str) -> Result<Net, String> {
        let bad = || format!("invalid CIDR address: {s}");
        let (ip, prefix) = s.split_once('/').ok_or_else(bad)?;
        let ip: IpAddr = ip.parse().map_err(|_| bad())?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) || prefix.len() > 3 {
            return Err(bad());
        }
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        let (addr, v4) = match ip {
            IpAddr::V4(a) => (u128::from(u32::from(a)), true),
            IpAddr::V6(a) => (u128::from(a), false),
        };
        let bits = if v4 { 32 } else { 128 };
        if prefix > bits {
            return Err(bad());
        }
        Ok(Net {
            addr: addr & Net::mask(bits, prefix),
            prefix,
            v4,
        })
    }

    fn contains(&self, addr: u128) -> bool {
        addr & Net::mask(self.bits(), self.prefix) == self.addr
    }

    /// The last address of the range.
    fn last(&self) -> u128 {
        self.addr | (!Net::mask(self.bits(), self.prefix) & Net::mask(self.bits(), self.bits()))
    }

    fn format(addr: u128, prefix: u8, v4: bool) -> String {
        if v4 {
            format!("{}/{prefix}", Ipv4Addr::from(addr as u32))
        } else {
            format!("{}/{prefix}", Ipv6Addr::from(addr))
        }
    }
}

/// The node slices of one cluster CIDR, and which are used (Kubernetes' `cidrset.CidrSet`):
/// allocation goes round-robin from after the last slice handed out.
#[derive(Debug)]
pub struct CidrSet {
    cluster: Net,
    node_prefix: u8,
    max: u64,
    used: BTreeSet<u64>,
    next: u64,
}

impl CidrSet {
    pub fn new(cidr: &str, node_prefix: u8) -> Result<CidrSet, String> {
        let cluster = Net::parse(cidr)?;
        if node_prefix < cluster.prefix || node_prefix > cluster.bits() {
            return Err(format!(
                "node CIDR mask size {node_prefix} does not fit cluster CIDR {cidr}"
            ));
        }
        let diff = node_prefix - cluster.prefix;
        if !cluster.v4 && diff > MAX_IPV6_SUBNET_DIFF {
            return Err("New CIDR set failed; the node CIDR size is too big".into());
        }
        if diff > 32 {
            return Err("New CIDR set failed; the node CIDR size is too big".into());
        }
        Ok(CidrSet {
            cluster,
            node_prefix,
            max: 1u64 << diff,
            used: BTreeSet::new(),
            next: 0,
        })
    }

    fn host_bits(&self) -> u32 {
        u32::from(self.cluster.bits() - self.node_prefix)
    }

    fn cidr_of(&self, index: u64) -> String {
        let addr = self.cluster.addr | (u128::from(index) << self.host_bits());
        Net::format(addr, self.node_prefix, self.cluster.v4)
    }

    fn index_of(&self, addr: u128) -> Result<u64, String> {
        let i = (addr ^ self.cluster.addr) >> self.host_bits();
        if i >= u128::from(self.max) {
            return Err(format!(
                "CIDR: {} is out of the range of CIDR allocator",
                Net::format(addr, self.node_prefix, self.cluster.v4)
            ));
        }
        Ok(i as u64)
    }

    /// The slice indexes a CIDR covers.
    fn range_of(&self, cidr: &str) -> Result<(u64, u64), String> {
        let net = Net::parse(cidr)?;
        let out_of_range = || {
            format!(
                "cidr {cidr} is out the range of cluster cidr {}",
                Net::format(self.cluster.addr, self.cluster.prefix, self.cluster.v4)
            )
        };
        if net.v4 != self.cluster.v4 {
            return Err(out_of_range());
        }
        if !self.cluster.contains(net.addr) && !net.contains(self.cluster.addr) {
            return Err(out_of_range());
        }
        if net.prefix <= self.cluster.prefix {
            return Ok((0, self.max - 1));
        }
        let node_mask = Net::mask(self.cluster.bits(), self.node_prefix);
        let begin = self.index_of(net.addr & node_mask)?;
        let end = self.index_of(net.last() & node_mask)?;
        Ok((begin, end))
    }

    /// The next free slice.
    pub fn allocate_next(&mut self) -> Result<String, String> {
        if self.used.len() as u64 >= self.max {
            return Err(NO_CIDRS_LEFT.into());
        }
        let mut candidate = self.next;
        for _ in 0..self.max {
            if !self.used.contains(&candidate) {
                break;
            }
            candidate = (candidate + 1) % self.max;
        }
        self.next = (candidate + 1) % self.max;
        self.used.insert(candidate);
        Ok(self.cidr_of(candidate))
    }

    /// Mark the slices `cidr` covers as used (fine if they already are).
    pub fn occupy(&mut self, cidr: &str) -> Result<(), String> {
        let (b, e) = self.range_of(cidr)?;
        for i in b..=e {
            self.used.insert(i);
        }
        Ok(())
    }

    /// Mark the slices `cidr` covers as free.
    pub fn release(&mut self, cidr: &str) -> Result<(), String> {
        let (b, e) = self.range_of(cidr)?;
        for i in b..=e {
            self.used.remove(&i);
        }
        Ok(())
    }

    /// How many slices are in use.
    pub fn used(&self) -> usize {
        self.used.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_round_robin_and_runs_out() {
        let mut s = CidrSet::new("10.42.0.0/22", 24).unwrap();
        assert_eq!(s.allocate_next().unwrap(), "10.42.0.0/24");
        assert_eq!(s.allocate_next().unwrap(), "10.42.1.0/24");
        s.release("10.42.0.0/24").unwrap();
        // Round robin: the released slice is not handed out again at once.
        assert_eq!(s.allocate_next().unwrap(), "10.42.2.0/24");
        assert_eq!(s.allocate_next().unwrap(), "10.42.3.0/24");
        assert_eq!(s.allocate_next().unwrap(), "10.42.0.0/24");
        assert_eq!(s.allocate_next().unwrap_err(), NO_CIDRS_LEFT);
        assert_eq!(s.used(), 4);
    }

    #[test]
    fn occupied_slices_are_skipped_and_out_of_range_ones_refused() {
        let mut s = CidrSet::new("10.42.0.0/16", 24).unwrap();
        s.occupy("10.42.0.0/24").unwrap();
        s.occupy("10.42.1.0/24").unwrap();
        s.occupy("10.42.1.0/24").unwrap();
        assert_eq!(s.used(), 2);
        assert_eq!(s.allocate_next().unwrap(), "10.42.2.0/24");
        assert!(s.occupy("10.43.0.0/24").is_err());
        assert!(s.occupy("nonsense").is_err());
        // A larger block covers several slices.
        s.occupy("10.42.4.0/23").unwrap();
        assert_eq!(s.used(), 5);
        assert_eq!(s.allocate_next().unwrap(), "10.42.3.0/24");
        assert_eq!(s.allocate_next().unwrap(), "10.42.6.0/24");
    }

    #[test]
    fn ipv6_slices() {
        let mut s = CidrSet::new("fd00:10::/56", 64).unwrap();
        assert_eq!(s.allocate_next().unwrap(), "fd00:10::/64");
        assert_eq!(s.allocate_next().unwrap(), "fd00:10:0:1::/64");
        assert!(CidrSet::new("fd00::/32", 64).is_err());
        assert!(CidrSet::new("10.0.0.0/24", 16).is_err());
        assert!(CidrSet::new("10.0.0.0/33", 34).is_err());
    }

    #[test]
    fn unmasked_cluster_addresses_are_masked() {
        let mut s = CidrSet::new("10.42.7.9/16", 24).unwrap();
        assert_eq!(s.allocate_next().unwrap(), "10.42.0.0/24");
    }
}
