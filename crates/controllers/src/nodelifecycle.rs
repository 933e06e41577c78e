//! The node lifecycle controller (Kubernetes' `pkg/controller/nodelifecycle`) and, inside it,
//! the taint eviction controller (`pkg/controller/tainteviction`).
//!
//! Node health: every `--node-monitor-period` each node's last sign of life is looked at: the
//! renewal of its Lease in `kube-node-lease` or a new `lastHeartbeatTime` of its Ready
//! condition, timed by when *this controller observed* the change (never by the kubelet's
//! clock). A node silent for `--node-monitor-grace-period` gets its Ready, MemoryPressure,
//! DiskPressure and PIDPressure conditions set to Unknown (`NodeStatusUnknown`), its pods
//! marked not ready, and (through a per-zone rate-limited queue) the NoExecute taint
//! `node.kubernetes.io/unreachable` (`not-ready` when the kubelet reports Ready=False).
//! Conditions are also mirrored as NoSchedule taints (TaintNodesByCondition). When every node
//! of every zone is down the controller assumes its own connectivity is at fault and stops
//! tainting (and removes the NoExecute taints), as Kubernetes does.
//!
//! Taint eviction: a pod on a node with NoExecute taints it does not tolerate is deleted at
//! once; one tolerating them for `tolerationSeconds` is deleted when the shortest of those
//! runs out, unless the taints go away first.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use capstan_runtime::events::{NORMAL, WARNING};
use capstan_runtime::{Change, Informer, Queue, Recorder};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, ObjectReference, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use parking_lot::Mutex;
use serde_json::json;

use crate::util::{is_conflict, is_not_found};
use crate::Ctx;

pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const TAINT_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
pub const TAINT_DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
pub const TAINT_PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
pub const TAINT_NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";

const NO_EXECUTE: &str = "NoExecute";
const NO_SCHEDULE: &str = "NoSchedule";
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
const EXCLUDE_DISRUPTION_LABEL: &str = "node.kubernetes.io/exclude-disruption";

/// `--node-startup-grace-period`: how long a node that never posted a Ready condition may stay
/// silent.
const NODE_STARTUP_GRACE_PERIOD: Duration = Duration::from_secs(60);
/// `--node-eviction-rate`: nodes tainted NoExecute per second in a healthy zone.
const EVICTION_QPS: f64 = 0.1;
/// `--secondary-node-eviction-rate`: the rate in a partially disrupted large zone.
const SECONDARY_EVICTION_QPS: f64 = 0.01;
/// `--large-cluster-size-threshold`.
const LARGE_CLUSTER_THRESHOLD: usize = 50;
/// `--unhealthy-zone-threshold`.
const UNHEALTHY_ZONE_THRESHOLD: f64 = 0.55;
/// How often the NoExecute tainting queues are worked (Kubernetes' NodeEvictionPeriod).
const TAINTING_PERIOD: Duration = Duration::from_millis(100);
/// Attempts at writing a node's health, re-reading it after a conflict.
const HEALTH_UPDATE_RETRIES: usize = 5;
/// Nodes whose health is written concurrently in one pass.
const HEALTH_WORKERS: usize = 8;
/// Workers of the NoSchedule tainting queue (Kubernetes' nodeUpdateWorkerSize).
const NODE_UPDATE_WORKERS: usize = 8;
/// Workers of the pod queue (pods newly bound to not-ready nodes).
const POD_UPDATE_WORKERS: usize = 4;
/// Workers of the taint eviction controller.
const TAINT_EVICTION_WORKERS: usize = 8;
/// Attempts at deleting an evicted pod.
const EVICTION_RETRIES: usize = 5;

pub fn start(ctx: &Ctx) {
    let nodes = ctx.informers.get::<Node>();
    let leases = ctx.informers.get::<Lease>();
    let pods = ctx.informers.get::<Pod>();
    let by_node = Arc::new(PodsByNode::default());

    let lc = Arc::new(Lifecycle {
        client: ctx.client.clone(),
        recorder: ctx.recorder("node-controller"),
        nodes: nodes.clone(),
        leases: leases.clone(),
        pods: pods.clone(),
        by_node: by_node.clone(),
        grace: ctx.opts.node_monitor_grace_period,
        startup_grace: NODE_STARTUP_GRACE_PERIOD,
        health: Mutex::new(HashMap::new()),
        known: Mutex::new(HashMap::new()),
        zones: Mutex::new(Zones::default()),
        retry: Mutex::new(HashSet::new()),
        node_queue: Queue::new("node_lifecycle_controller"),
        pod_queue: Queue::new("node_lifecycle_controller_pods"),
    });
    let te = Arc::new(TaintEviction {
        client: ctx.client.clone(),
        recorder: ctx.recorder("taint-eviction-controller"),
        nodes: nodes.clone(),
        pods: pods.clone(),
        by_node: by_node.clone(),
        tainted: Mutex::new(HashMap::new()),
        work: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(0),
        queue: Queue::new("taint_eviction_controller"),
    });

    {
        let by_node = by_node.clone();
        let pod_queue = lc.pod_queue.clone();
        let te_queue = te.queue.clone();
        pods.on_change(move |c| {
            by_node.observe(c);
            if let Some(key) = lifecycle_pod_key(c) {
                pod_queue.add(key);
            }
            if let Some(key) = eviction_pod_key(c) {
                te_queue.add(key);
            }
        });
    }
    {
        let node_queue = lc.node_queue.clone();
        let te_queue = te.queue.clone();
        nodes.on_change(move |c| {
            match c {
                Change::Add(n) | Change::Update { new: n, .. } => {
                    node_queue.add(name_of(n.as_ref()));
                }
                Change::Delete(_) => {}
            }
            if let Some(key) = eviction_node_key(c) {
                te_queue.add(key);
            }
        });
    }

    let workers = ctx.opts.workers;
    let period = ctx.opts.node_monitor_period.max(Duration::from_millis(100));
    tokio::spawn(async move {
        lc.nodes.wait_synced().await;
        lc.leases.wait_synced().await;
        lc.pods.wait_synced().await;

        let t = te.clone();
        te.queue
            .run_workers(TAINT_EVICTION_WORKERS.max(workers), move |key| {
                let t = t.clone();
                async move {
                    t.sync(&key);
                    Ok(())
                }
            });

        let l = lc.clone();
        lc.node_queue
            .run_workers(NODE_UPDATE_WORKERS.max(workers), move |name| {
                let l = l.clone();
                async move { l.sync_node(&name).await }
            });
        let l = lc.clone();
        lc.pod_queue.run_workers(POD_UPDATE_WORKERS, move |key| {
            let l = l.clone();
            async move { l.sync_pod(&key).await }
        });

        let l = lc.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TAINTING_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                l.no_execute_tainting_pass().await;
            }
        });

        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            lc.monitor_node_health().await;
        }
    });
}

fn name_of<K: kube::Resource>(o: &K) -> String {
    o.meta().name.clone().unwrap_or_default()
}

fn pod_key(p: &Pod) -> String {
    capstan_runtime::key(p.metadata.namespace.as_deref(), &name_of(p))
}

fn node_name_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

fn tolerations_of(p: &Pod) -> &[Toleration] {
    p.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[])
}

/// The lifecycle controller looks at a pod when it is bound to a node (or moves).
fn lifecycle_pod_key(c: &Change<'_, Pod>) -> Option<String> {
    let (old, new) = match c {
        Change::Add(n) => (None, n),
        Change::Update { old, new } => (Some(old), new),
        Change::Delete(_) => return None,
    };
    let node = node_name_of(new);
    (!node.is_empty() && old.is_none_or(|o| node_name_of(o) != node)).then(|| pod_key(new))
}

/// The taint eviction controller looks at a pod when it appears, goes, moves or its
/// tolerations change.
fn eviction_pod_key(c: &Change<'_, Pod>) -> Option<String> {
    if let Change::Update { old, new } = c {
        if tolerations_of(old) == tolerations_of(new) && node_name_of(old) == node_name_of(new) {
            return None;
        }
    }
    Some(format!("pod:{}", pod_key(c.object())))
}

/// The taint eviction controller looks at a node when its NoExecute taints change.
fn eviction_node_key(c: &Change<'_, Node>) -> Option<String> {
    if let Change::Update { old, new } = c {
        if no_execute_taints(old) == no_execute_taints(new) {
            return None;
        }
    }
    Some(format!("node:{}", name_of(c.object().as_ref())))
}

/// Pods by the node they are bound to (client-go's `spec.nodeName` index).
#[derive(Default)]
struct PodsByNode {
    /// node → `namespace/name` of its pods.
    by_node: Mutex<HashMap<String, HashSet<String>>>,
}

impl PodsByNode {
    /// Move the pod between nodes' sets. The change carries the node the pod was under (the
    /// informer's old copy), so no pod → node map is kept besides.
    fn observe(&self, c: &Change<'_, Pod>) {
        let (old, new) = match c {
            Change::Add(p) => ("", node_name_of(p)),
            Change::Update { old, new } => (node_name_of(old), node_name_of(new)),
            Change::Delete(p) => (node_name_of(p), ""),
        };
        if old == new {
            return;
        }
        let key = pod_key(c.object());
        let mut m = self.by_node.lock();
        if let Some(set) = m.get_mut(old) {
            set.remove(&key);
            if set.is_empty() {
                m.remove(old);
            }
        }
        if !new.is_empty() {
            m.entry(new.to_string()).or_default().insert(key);
        }
    }

    fn keys(&self, node: &str) -> Vec<String> {
        self.by_node
            .lock()
            .get(node)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn pods(&self, node: &str, cache: &Informer<Pod>) -> Vec<Arc<Pod>> {
        self.keys(node)
            .iter()
            .filter_map(|k| cache.get_key(k))
            .filter(|p| node_name_of(p) == node)
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Taints and tolerations.

fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.to_string(),
        effect: effect.to_string(),
        ..Default::default()
    }
}

/// Same key and effect (Kubernetes' `MatchTaint`).
fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

fn has_taint(node: &Node, t: &Taint) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|x| same_taint(x, t)))
}

fn no_execute_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .filter(|t| t.effect == NO_EXECUTE)
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a toleration tolerates a taint (Kubernetes' `Toleration.ToleratesTaint`).
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = t.effect.as_deref().filter(|e| !e.is_empty()) {
        if e != taint.effect {
            return false;
        }
    }
    if let Some(k) = t.key.as_deref().filter(|k| !k.is_empty()) {
        if k != taint.key {
            return false;
        }
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

/// Whether every taint is tolerated, and the toleration used for each (Kubernetes'
/// `GetMatchingTolerations`).
fn matching_tolerations<'a>(
    taints: &[Taint],
    tolerations: &'a [Toleration],
) -> (bool, Vec<&'a Toleration>) {
    let mut used = Vec::new();
    for t in taints {
        match tolerations.iter().find(|tol| tolerates(tol, t)) {
            Some(tol) => used.push(tol),
            None => return (false, Vec::new()),
        }
    }
    (true, used)
}

/// How long the pod may stay: the shortest `tolerationSeconds` of the tolerations used
/// (zero when none are used or one is not positive); `None` means forever.
fn min_toleration_time(used: &[&Toleration]) -> Option<Duration> {
    if used.is_empty() {
        return Some(Duration::ZERO);
    }
    let mut min: Option<i64> = None;
    for t in used {
        if let Some(s) = t.toleration_seconds {
            if s <= 0 {
                return Some(Duration::ZERO);
            }
            min = Some(min.map_or(s, |m| m.min(s)));
        }
    }
    min.map(|s| Duration::from_secs(s as u64))
}

/// The NoSchedule taint a node condition status calls for (TaintNodesByCondition).
fn condition_taint_key(type_: &str, status: &str) -> Option<&'static str> {
    match (type_, status) {
        ("Ready", "False") => Some(TAINT_NOT_READY),
        ("Ready", "Unknown") => Some(TAINT_UNREACHABLE),
        ("MemoryPressure", "True") => Some(TAINT_MEMORY_PRESSURE),
        ("DiskPressure", "True") => Some(TAINT_DISK_PRESSURE),
        ("NetworkUnavailable", "True") => Some(TAINT_NETWORK_UNAVAILABLE),
        ("PIDPressure", "True") => Some(TAINT_PID_PRESSURE),
        _ => None,
    }
}

/// Whether a taint key is one the controller derives from a node condition.
fn is_condition_taint(key: &str) -> bool {
    matches!(
        key,
        TAINT_NOT_READY
            | TAINT_UNREACHABLE
            | TAINT_NETWORK_UNAVAILABLE
            | TAINT_MEMORY_PRESSURE
            | TAINT_DISK_PRESSURE
            | TAINT_PID_PRESSURE
    )
}

/// The NoSchedule taints to add and remove so they follow the node's conditions and
/// `spec.unschedulable`.
fn no_schedule_diff(node: &Node) -> (Vec<Taint>, Vec<Taint>) {
    let mut want: Vec<Taint> = Vec::new();
    for c in node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        if let Some(key) = condition_taint_key(&c.type_, &c.status) {
            want.push(taint(key, NO_SCHEDULE));
        }
    }
    if node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
    {
        want.push(taint(TAINT_UNSCHEDULABLE, NO_SCHEDULE));
    }
    let have: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| {
            t.effect == NO_SCHEDULE && (t.key == TAINT_UNSCHEDULABLE || is_condition_taint(&t.key))
        })
        .cloned()
        .collect();
    let add = want
        .iter()
        .filter(|w| !have.iter().any(|h| same_taint(h, w)))
        .cloned()
        .collect();
    let del = have
        .iter()
        .filter(|h| !want.iter().any(|w| same_taint(h, w)))
        .cloned()
        .collect();
    (add, del)
}

/// The node's taints after adding `add` (kept as they are when already present) and removing
/// `remove`; `None` when nothing changes.
fn swapped_taints(current: &[Taint], add: &[Taint], remove: &[Taint]) -> Option<Vec<Taint>> {
    let mut next: Vec<Taint> = current
        .iter()
        .filter(|t| !remove.iter().any(|r| same_taint(r, t)))
        .cloned()
        .collect();
    for a in add {
        match next.iter_mut().find(|t| same_taint(t, a)) {
            Some(t) if t.value == a.value => {}
            Some(t) => *t = a.clone(),
            None => next.push(a.clone()),
        }
    }
    (next != current).then_some(next)
}

/// The zone a node counts in for disruption (Kubernetes' `GetZoneKey`).
fn zone_key(node: &Node) -> String {
    let labels = node.metadata.labels.as_ref();
    let get = |stable: &str, beta: &str| {
        labels
            .and_then(|l| l.get(stable).or_else(|| l.get(beta)))
            .cloned()
            .unwrap_or_default()
    };
    let zone = get(
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
    );
    let region = get(
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/region",
    );
    if zone.is_empty() && region.is_empty() {
        return String::new();
    }
    format!("{region}:\x00:{zone}")
}

fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
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

fn pod_ref(namespace: &str, name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        uid,
        ..Default::default()
    }
}

/// Seconds from `since` to `now` (negative if `since` is later).
fn secs_between(since: Timestamp, now: Timestamp) -> f64 {
    now.duration_since(since).as_secs_f64()
}

fn creation_of(node: &Node) -> Timestamp {
    node.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

// ---------------------------------------------------------------------------------------------
// Zones: disruption states and rate-limited NoExecute tainting.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ZoneState {
    Initial,
    Normal,
    FullDisruption,
    PartialDisruption,
}

/// Count the not-ready nodes of a zone and classify it (Kubernetes' `ComputeZoneState`).
fn compute_zone_state(ready: &[bool]) -> (usize, ZoneState) {
    let ready_nodes = ready.iter().filter(|r| **r).count();
    let not_ready = ready.len() - ready_nodes;
    let state = if ready_nodes == 0 && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f64 / ready.len() as f64 >= UNHEALTHY_ZONE_THRESHOLD {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    };
    (not_ready, state)
}

/// A token bucket (burst 1), or one that never accepts.
#[derive(Debug)]
struct Limiter {
    qps: f64,
    tokens: f64,
    last: Instant,
}

impl Limiter {
    const BURST: f64 = 1.0;

    fn new(qps: f64) -> Limiter {
        Limiter {
            qps: qps.max(0.0),
            tokens: if qps > 0.0 { Self::BURST } else { 0.0 },
            last: Instant::now(),
        }
    }

    fn try_accept_at(&mut self, now: Instant) -> bool {
        if self.qps <= 0.0 {
            return false;
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(Self::BURST);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Nodes waiting to be tainted NoExecute in one zone (Kubernetes' RateLimitedTimedQueue): a
/// node stays in `set` after it is tainted so it is not queued again until it is removed.
#[derive(Debug)]
struct TaintQueue {
    limiter: Limiter,
    queue: VecDeque<(String, Instant)>,
    set: HashSet<String>,
}

impl TaintQueue {
    fn new(qps: f64) -> TaintQueue {
        TaintQueue {
            limiter: Limiter::new(qps),
            queue: VecDeque::new(),
            set: HashSet::new(),
        }
    }

    /// Queue `node` unless it is already known; whether it was added.
    fn add(&mut self, node: &str) -> bool {
        if !self.set.insert(node.to_string()) {
            return false;
        }
        self.queue.push_back((node.to_string(), Instant::now()));
        true
    }

    /// Forget `node` entirely; whether it was known.
    fn remove(&mut self, node: &str) -> bool {
        self.queue.retain(|(n, _)| n != node);
        self.set.remove(node)
    }

    /// The next node due, if the rate limit allows one now.
    fn next_due(&mut self, now: Instant) -> Option<String> {
        let (i, _) = self
            .queue
            .iter()
            .enumerate()
            .min_by_key(|(_, (_, at))| *at)?;
        if self.queue[i].1 > now || !self.limiter.try_accept_at(now) {
            return None;
        }
        Some(self.queue[i].0.clone())
    }

    /// `node` was tainted: it leaves the queue but stays known.
    fn done(&mut self, node: &str) {
        self.queue.retain(|(n, _)| n != node);
    }

    /// `node` could not be tainted: try again after `wait`.
    fn retry(&mut self, node: &str, wait: Duration) {
        if let Some(e) = self.queue.iter_mut().find(|(n, _)| n == node) {
            e.1 = Instant::now() + wait + Duration::from_nanos(1);
        }
    }

    fn swap_limiter(&mut self, qps: f64) {
        if (self.limiter.qps - qps.max(0.0)).abs() > f64::EPSILON {
            self.limiter = Limiter::new(qps);
        }
    }
}

#[derive(Default)]
struct Zones {
    states: HashMap<String, ZoneState>,
    tainters: HashMap<String, TaintQueue>,
}

impl Zones {
    fn ensure(&mut self, zone: &str) {
        if !self.states.contains_key(zone) {
            self.states.insert(zone.to_string(), ZoneState::Initial);
            self.tainters
                .insert(zone.to_string(), TaintQueue::new(EVICTION_QPS));
        }
    }

    fn tainter(&mut self, zone: &str) -> &mut TaintQueue {
        self.tainters
            .entry(zone.to_string())
            .or_insert_with(|| TaintQueue::new(EVICTION_QPS))
    }
}

/// The tainting rate for a zone in `state` with `size` nodes.
fn zone_qps(state: ZoneState, size: usize) -> f64 {
    match state {
        ZoneState::Normal | ZoneState::Initial => EVICTION_QPS,
        ZoneState::PartialDisruption => {
            if size > LARGE_CLUSTER_THRESHOLD {
                SECONDARY_EVICTION_QPS
            } else {
                0.0
            }
        }
        ZoneState::FullDisruption => EVICTION_QPS,
    }
}

// ---------------------------------------------------------------------------------------------
// The node lifecycle controller.

/// What the controller last observed of a node's health, timed by its own clock.
#[derive(Debug, Clone)]
struct Health {
    probe: Timestamp,
    ready_transition: Timestamp,
    /// The Ready condition of the status last observed.
    ready: Option<NodeCondition>,
    /// The renewTime of the Lease last observed (outer `None`: no Lease observed).
    lease: Option<Option<Timestamp>>,
}

struct Lifecycle {
    client: Client,
    recorder: Recorder,
    nodes: Arc<Informer<Node>>,
    leases: Arc<Informer<Lease>>,
    pods: Arc<Informer<Pod>>,
    by_node: Arc<PodsByNode>,
    grace: Duration,
    startup_grace: Duration,
    health: Mutex<HashMap<String, Health>>,
    known: Mutex<HashMap<String, Arc<Node>>>,
    zones: Mutex<Zones>,
    retry: Mutex<HashSet<String>>,
    node_queue: Arc<Queue>,
    pod_queue: Arc<Queue>,
}

impl Lifecycle {
    fn node_api(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Mirror the node's conditions as NoSchedule taints and reconcile its beta OS/arch labels.
    async fn sync_node(&self, name: &str) -> anyhow::Result<()> {
        let Some(node) = self.nodes.get("", name) else {
            return Ok(());
        };
        let (add, del) = no_schedule_diff(&node);
        if !add.is_empty() || !del.is_empty() {
            self.swap_taints(&node, &add, &del)
                .await
                .with_context(|| format!("tainting node {name} NoSchedule"))?;
        }
        self.reconcile_labels(&node).await
    }

    async fn reconcile_labels(&self, node: &Node) -> anyhow::Result<()> {
        let Some(labels) = node.metadata.labels.as_ref() else {
            return Ok(());
        };
        let mut update = BTreeMap::new();
        for (primary, secondary) in [
            ("kubernetes.io/os", "beta.kubernetes.io/os"),
            ("kubernetes.io/arch", "beta.kubernetes.io/arch"),
        ] {
            if let Some(v) = labels.get(primary) {
                if labels.get(secondary) != Some(v) {
                    update.insert(secondary, v.clone());
                }
            }
        }
        if update.is_empty() {
            return Ok(());
        }
        let patch = json!({"metadata": {"labels": update}});
        match self
            .node_api()
            .patch(
                &name_of(node),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Err(e) if !is_not_found(&e) => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Mark a pod newly bound to a node that is not ready as not ready itself.
    async fn sync_pod(&self, key: &str) -> anyhow::Result<()> {
        let Some(pod) = self.pods.get_key(key) else {
            return Ok(());
        };
        let node = node_name_of(&pod).to_string();
        let ready = match self.health.lock().get(&node) {
            Some(h) => h.ready.clone(),
            None => return Ok(()),
        };
        if self.nodes.get("", &node).is_none() {
            anyhow::bail!("node {node} of pod {key} is not in the cache");
        }
        match ready {
            Some(c) if c.status != "True" => self.mark_pod_not_ready(&pod, &node).await,
            _ => Ok(()),
        }
    }

    /// Set the pod's Ready condition to False (Kubernetes' MarkPodsNotReady, for one pod).
    async fn mark_pod_not_ready(&self, pod: &Pod, node: &str) -> anyhow::Result<()> {
        if node_name_of(pod) != node {
            return Ok(());
        }
        let Some(ready) = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        else {
            return Ok(());
        };
        if ready.status == "False" {
            return Ok(());
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = name_of(pod);
        let patch = json!({
            "metadata": {"uid": pod.metadata.uid},
            "status": {"conditions": [{
                "type": "Ready",
                "status": "False",
                "lastTransitionTime": Time(Timestamp::now()),
            }]},
        });
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            Ok(_) => {
                self.recorder.record(
                    pod_ref(&ns, &name, pod.metadata.uid.clone()),
                    WARNING,
                    "NodeNotReady",
                    "Node is not ready",
                );
                Ok(())
            }
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("marking pod {ns}/{name} not ready")),
        }
    }

    async fn mark_pods_not_ready(&self, node: &str) -> anyhow::Result<()> {
        let mut first_err = None;
        for pod in self.by_node.pods(node, &self.pods) {
            if let Err(e) = self.mark_pod_not_ready(&pod, node).await {
                tracing::info!(node, error = %format!("{e:#}"), "cannot mark pod not ready");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Add and remove taints on a node, with the cached node first and fresh reads after a
    /// conflict (Kubernetes' SwapNodeControllerTaint). Added taints carry `timeAdded`.
    async fn swap_taints(
        &self,
        node: &Node,
        add: &[Taint],
        remove: &[Taint],
    ) -> anyhow::Result<()> {
        if add.is_empty() && !remove.iter().any(|t| has_taint(node, t)) {
            return Ok(());
        }
        let now = Time(Timestamp::now());
        let add: Vec<Taint> = add
            .iter()
            .map(|t| Taint {
                time_added: Some(now.clone()),
                ..t.clone()
            })
            .collect();
        let name = name_of(node);
        let api = self.node_api();
        let mut current = node.clone();
        for attempt in 0..HEALTH_UPDATE_RETRIES {
            if attempt > 0 {
                current = match api.get(&name).await {
                    Ok(n) => n,
                    Err(e) if is_not_found(&e) => return Ok(()),
                    Err(e) => return Err(e.into()),
                };
            }
            let taints = current
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            let Some(next) = swapped_taints(&taints, &add, remove) else {
                return Ok(());
            };
            let patch = json!({
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "spec": {"taints": if next.is_empty() { serde_json::Value::Null } else { json!(next) }},
            });
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        anyhow::bail!(
            "node {name}: taints still conflicting after {HEALTH_UPDATE_RETRIES} attempts"
        )
    }

    /// Remove the NoExecute taints of a lost node and forget it in its zone's tainting queue;
    /// whether it was queued.
    async fn mark_node_reachable(&self, node: &Node) -> anyhow::Result<bool> {
        self.swap_taints(
            node,
            &[],
            &[
                taint(TAINT_UNREACHABLE, NO_EXECUTE),
                taint(TAINT_NOT_READY, NO_EXECUTE),
            ],
        )
        .await?;
        Ok(self
            .zones
            .lock()
            .tainter(&zone_key(node))
            .remove(&name_of(node)))
    }

    /// Queue the node for its NoExecute taint (re-queued if it lost the taint meanwhile).
    fn mark_node_for_tainting(&self, node: &Node, status: &str) -> bool {
        let name = name_of(node);
        let mut zones = self.zones.lock();
        let q = zones.tainter(&zone_key(node));
        let key = if status == "False" {
            TAINT_NOT_READY
        } else {
            TAINT_UNREACHABLE
        };
        if !has_taint(node, &taint(key, NO_EXECUTE)) {
            q.remove(&name);
        }
        q.add(&name)
    }

    /// Taint the nodes the zones' rate limits let through.
    async fn no_execute_tainting_pass(&self) {
        let zones: Vec<String> = self.zones.lock().tainters.keys().cloned().collect();
        for zone in zones {
            loop {
                let next = self
                    .zones
                    .lock()
                    .tainters
                    .get_mut(&zone)
                    .and_then(|q| q.next_due(Instant::now()));
                let Some(name) = next else { break };
                let outcome = self.taint_no_execute(&name).await;
                let mut zones = self.zones.lock();
                let q = zones.tainter(&zone);
                match outcome {
                    Ok(()) => q.done(&name),
                    Err(wait) => q.retry(&name, wait),
                }
            }
        }
    }

    /// Taint one queued node: unreachable for Ready=Unknown, not-ready for Ready=False (the
    /// two exclusive); `Err(wait)` to try again later.
    async fn taint_no_execute(&self, name: &str) -> Result<(), Duration> {
        let Some(node) = self.nodes.get("", name) else {
            return Ok(());
        };
        let Some(ready) = ready_condition(&node) else {
            return Err(Duration::from_millis(50));
        };
        let (add, opposite) = match ready.status.as_str() {
            "False" => (TAINT_NOT_READY, TAINT_UNREACHABLE),
            "Unknown" => (TAINT_UNREACHABLE, TAINT_NOT_READY),
            _ => return Ok(()),
        };
        match self
            .swap_taints(
                &node,
                &[taint(add, NO_EXECUTE)],
                &[taint(opposite, NO_EXECUTE)],
            )
            .await
        {
            Ok(()) => Ok(()),
            Err(e) => {
                tracing::info!(node = name, error = %format!("{e:#}"), "cannot taint unresponsive node");
                Err(Duration::ZERO)
            }
        }
    }

    /// One pass over every node: register new ones, age silent ones into Unknown, taint and
    /// mark pods accordingly, then adjust each zone's tainting rate to its disruption.
    async fn monitor_node_health(&self) {
        let nodes = self.nodes.list();
        let (added, deleted, new_zone_nodes) = {
            let known = self.known.lock();
            classify_nodes(&known, &nodes, &self.zones.lock().states)
        };
        for n in &new_zone_nodes {
            self.zones.lock().ensure(&zone_key(n));
        }
        for n in &added {
            let name = name_of(n.as_ref());
            self.recorder.record(
                node_ref(n),
                NORMAL,
                "RegisteredNode",
                format!("Node {name} event: Registered Node {name} in Controller"),
            );
            self.known.lock().insert(name.clone(), n.clone());
            self.zones.lock().ensure(&zone_key(n));
            if let Err(e) = self.mark_node_reachable(n).await {
                tracing::info!(node = %name, error = %format!("{e:#}"), "cannot remove NoExecute taints");
            }
        }
        for n in &deleted {
            let name = name_of(n.as_ref());
            self.recorder.record(
                node_ref(n),
                NORMAL,
                "RemovingNode",
                format!("Node {name} event: Removing Node {name} from Controller"),
            );
            self.known.lock().remove(&name);
            self.health.lock().remove(&name);
            self.retry.lock().remove(&name);
        }

        let results: Vec<Option<(String, bool)>> = futures::stream::iter(nodes.iter().cloned())
            .map(|n| async move { self.update_one(n).await })
            .buffer_unordered(HEALTH_WORKERS)
            .collect()
            .await;
        let mut zone_ready: HashMap<String, Vec<bool>> = HashMap::new();
        for (zone, ready) in results.into_iter().flatten() {
            zone_ready.entry(zone).or_default().push(ready);
        }
        self.handle_disruption(&zone_ready, &nodes).await;
    }

    /// Update one node's health; its zone and readiness for the disruption count, unless it is
    /// excluded or could not be updated.
    async fn update_one(&self, node: Arc<Node>) -> Option<(String, bool)> {
        let name = name_of(node.as_ref());
        let mut node = (*node).clone();
        let mut outcome = None;
        for attempt in 0..HEALTH_UPDATE_RETRIES {
            match self.try_update_node_health(&mut node).await {
                Ok(r) => {
                    outcome = Some(r);
                    break;
                }
                Err(e) => {
                    tracing::debug!(node = %name, attempt, error = %format!("{e:#}"), "updating node health failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    match self.node_api().get(&name).await {
                        Ok(n) => node = n,
                        Err(e) => {
                            tracing::info!(node = %name, error = %e, "cannot re-read node to update its health");
                            return None;
                        }
                    }
                }
            }
        }
        let Some((observed, current)) = outcome else {
            tracing::info!(node = %name, "cannot update node health; skipping it (no pods will be evicted)");
            return None;
        };
        let excluded = node
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(EXCLUDE_DISRUPTION_LABEL));
        let zone_entry = (!excluded).then(|| {
            (
                zone_key(&node),
                current.as_ref().is_some_and(|c| c.status == "True"),
            )
        });
        if let Some(current) = current {
            self.process_taint_based_eviction(&node, &observed).await;
            let needs_retry = self.retry.lock().contains(&name);
            let became_not_ready = current.status != "True" && observed.status == "True";
            if became_not_ready {
                self.recorder.record(
                    node_ref(&node),
                    NORMAL,
                    "NodeNotReady",
                    format!("Node {name} status is now: NodeNotReady"),
                );
            }
            if became_not_ready || (needs_retry && observed.status != "True") {
                if let Err(e) = self.mark_pods_not_ready(&name).await {
                    tracing::info!(node = %name, error = %format!("{e:#}"), "cannot mark all pods not ready; will retry");
                    self.retry.lock().insert(name);
                    return zone_entry;
                }
            }
        }
        self.retry.lock().remove(&name);
        zone_entry
    }

    async fn process_taint_based_eviction(&self, node: &Node, observed: &NodeCondition) {
        let name = name_of(node);
        match observed.status.as_str() {
            "False" => {
                if has_taint(node, &taint(TAINT_UNREACHABLE, NO_EXECUTE)) {
                    if let Err(e) = self
                        .swap_taints(
                            node,
                            &[taint(TAINT_NOT_READY, NO_EXECUTE)],
                            &[taint(TAINT_UNREACHABLE, NO_EXECUTE)],
                        )
                        .await
                    {
                        tracing::info!(node = %name, error = %format!("{e:#}"), "cannot swap unreachable taint for not-ready");
                    }
                } else if self.mark_node_for_tainting(node, "False") {
                    tracing::debug!(node = %name, "node is not ready; queued for tainting");
                }
            }
            "Unknown" => {
                if has_taint(node, &taint(TAINT_NOT_READY, NO_EXECUTE)) {
                    if let Err(e) = self
                        .swap_taints(
                            node,
                            &[taint(TAINT_UNREACHABLE, NO_EXECUTE)],
                            &[taint(TAINT_NOT_READY, NO_EXECUTE)],
                        )
                        .await
                    {
                        tracing::info!(node = %name, error = %format!("{e:#}"), "cannot swap not-ready taint for unreachable");
                    }
                } else if self.mark_node_for_tainting(node, "Unknown") {
                    tracing::debug!(node = %name, "node is unreachable; queued for tainting");
                }
            }
            "True" => {
                if let Err(e) = self.mark_node_reachable(node).await {
                    tracing::info!(node = %name, error = %format!("{e:#}"), "cannot remove NoExecute taints");
                }
            }
            _ => {}
        }
    }

    /// Look at one node's health signals; past the grace period, set its conditions to
    /// Unknown. Returns the Ready condition as observed and as it is now.
    async fn try_update_node_health(
        &self,
        node: &mut Node,
    ) -> anyhow::Result<(NodeCondition, Option<NodeCondition>)> {
        let name = name_of(node);
        let saved = self.health.lock().get(&name).cloned();
        let lease = self.leases.get(NODE_LEASE_NAMESPACE, &name).map(|l| {
            l.spec
                .as_ref()
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0)
        });
        let current = ready_condition(node).cloned();
        let step = health_step(
            saved,
            &*node,
            current.as_ref(),
            lease,
            Timestamp::now(),
            self.grace,
            self.startup_grace,
        );
        let mut health = step.health;
        let observed = step.observed;
        let mut result = Ok((observed.clone(), current.clone()));
        if step.expired {
            let now = Time(Timestamp::now());
            let creation = node.metadata.creation_timestamp.clone();
            let status = node.status.get_or_insert_with(Default::default);
            let conditions = status.conditions.get_or_insert_with(Vec::new);
            for type_ in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
                match conditions.iter_mut().find(|c| c.type_ == type_) {
                    None => conditions.push(NodeCondition {
                        type_: type_.to_string(),
                        status: "Unknown".into(),
                        reason: Some("NodeStatusNeverUpdated".into()),
                        message: Some("Kubelet never posted node status.".into()),
                        last_heartbeat_time: creation.clone(),
                        last_transition_time: Some(now.clone()),
                    }),
                    Some(c) if c.status != "Unknown" => {
                        c.status = "Unknown".into();
                        c.reason = Some("NodeStatusUnknown".into());
                        c.message = Some("Kubelet stopped posting node status.".into());
                        c.last_transition_time = Some(now.clone());
                    }
                    Some(_) => {}
                }
            }
            let updated = ready_condition(node).cloned();
            if updated.as_ref() != Some(&observed) {
                match self
                    .node_api()
                    .replace_status(&name, &PostParams::default(), node)
                    .await
                {
                    Ok(_) => {
                        health = Health {
                            probe: health.probe,
                            ready_transition: Timestamp::now(),
                            ready: updated.clone(),
                            lease: step.observed_lease,
                        };
                        result = Ok((observed, updated));
                    }
                    Err(e) => {
                        result =
                            Err(anyhow::Error::from(e)
                                .context(format!("updating node {name} status")))
                    }
                }
            }
        }
        self.health.lock().insert(name, health);
        result
    }

    /// Adjust each zone's tainting rate to its state; with every zone fully disrupted, stop
    /// tainting and lift the NoExecute taints.
    async fn handle_disruption(
        &self,
        zone_ready: &HashMap<String, Vec<bool>>,
        nodes: &[Arc<Node>],
    ) {
        let mut new_states: HashMap<String, ZoneState> = HashMap::new();
        let mut all_are_fully_disrupted = true;
        for (zone, ready) in zone_ready {
            let (_, state) = compute_zone_state(ready);
            if state != ZoneState::FullDisruption {
                all_are_fully_disrupted = false;
            }
            new_states.insert(zone.clone(), state);
        }
        let all_were_fully_disrupted = {
            let mut zones = self.zones.lock();
            for zone in zone_ready.keys() {
                zones.ensure(zone);
            }
            zones.states.retain(|z, _| zone_ready.contains_key(z));
            zones
                .states
                .values()
                .all(|s| *s == ZoneState::FullDisruption)
        };
        if all_are_fully_disrupted && all_were_fully_disrupted {
            return;
        }
        if all_are_fully_disrupted {
            tracing::info!("every node is not ready: entering master disruption mode");
            for n in nodes {
                if let Err(e) = self.mark_node_reachable(n).await {
                    tracing::info!(node = %name_of(n.as_ref()), error = %format!("{e:#}"), "cannot remove NoExecute taints");
                }
            }
            let mut zones = self.zones.lock();
            let names: Vec<String> = zones.states.keys().cloned().collect();
            for z in names {
                zones.tainter(&z).swap_limiter(0.0);
                zones.states.insert(z, ZoneState::FullDisruption);
            }
            return;
        }
        if all_were_fully_disrupted {
            tracing::info!("some nodes are ready again: leaving master disruption mode");
            let now = Timestamp::now();
            {
                let mut health = self.health.lock();
                for n in nodes {
                    if let Some(h) = health.get_mut(&name_of(n.as_ref())) {
                        h.probe = now;
                        h.ready_transition = now;
                    }
                }
            }
            let mut zones = self.zones.lock();
            let names: Vec<String> = zones.states.keys().cloned().collect();
            for z in names {
                let state = new_states.get(&z).copied().unwrap_or(ZoneState::Normal);
                let size = zone_ready.get(&z).map_or(0, Vec::len);
                zones.tainter(&z).swap_limiter(zone_qps(state, size));
                zones.states.insert(z, state);
            }
            return;
        }
        let mut zones = self.zones.lock();
        let names: Vec<String> = zones.states.keys().cloned().collect();
        for z in names {
            let Some(state) = new_states.get(&z).copied() else {
                continue;
            };
            if zones.states.get(&z) == Some(&state) {
                continue;
            }
            tracing::info!(zone = %z, ?state, "zone changed state");
            let size = zone_ready.get(&z).map_or(0, Vec::len);
            zones.tainter(&z).swap_limiter(zone_qps(state, size));
            zones.states.insert(z, state);
        }
    }
}

type NodeList = Vec<Arc<Node>>;

/// Nodes new to the controller, nodes gone, and known nodes in a zone it has not seen.
fn classify_nodes(
    known: &HashMap<String, Arc<Node>>,
    nodes: &[Arc<Node>],
    zone_states: &HashMap<String, ZoneState>,
) -> (NodeList, NodeList, NodeList) {
    let mut added = Vec::new();
    let mut new_zone = Vec::new();
    let mut present = HashSet::new();
    for n in nodes {
        let name = name_of(n.as_ref());
        if known.contains_key(&name) {
            if !zone_states.contains_key(&zone_key(n)) {
                new_zone.push(n.clone());
            }
        } else {
            added.push(n.clone());
        }
        present.insert(name);
    }
    let deleted = known
        .iter()
        .filter(|(name, _)| !present.contains(*name))
        .map(|(_, n)| n.clone())
        .collect();
    (added, deleted, new_zone)
}

/// The outcome of looking at one node's health signals.
struct HealthStep {
    health: Health,
    observed: NodeCondition,
    /// The lease observed now (for the record after a status write).
    observed_lease: Option<Option<Timestamp>>,
    /// Silent for longer than its grace period.
    expired: bool,
}

/// Kubernetes' tryUpdateNodeHealth bookkeeping, without the write: refresh the probe time when
/// the Ready condition's heartbeat or the Lease's renewal moved since last observed.
fn health_step(
    saved: Option<Health>,
    node: &Node,
    current: Option<&NodeCondition>,
    lease: Option<Option<Timestamp>>,
    now: Timestamp,
    grace: Duration,
    startup_grace: Duration,
) -> HealthStep {
    let creation = creation_of(node);
    let mut health = saved;
    let (observed, grace) = match current {
        None => {
            let fake = NodeCondition {
                type_: "Ready".into(),
                status: "Unknown".into(),
                last_heartbeat_time: Some(Time(creation)),
                last_transition_time: Some(Time(creation)),
                ..Default::default()
            };
            match health.as_mut() {
                Some(h) => h.ready = None,
                None => {
                    health = Some(Health {
                        probe: creation,
                        ready_transition: creation,
                        ready: None,
                        lease: None,
                    })
                }
            }
            (fake, startup_grace)
        }
        Some(c) => (c.clone(), grace),
    };
    let saved_ready = health.as_ref().and_then(|h| h.ready.clone());
    let saved_lease = health.as_ref().and_then(|h| h.lease);
    let fresh = |transition: Timestamp| Health {
        probe: now,
        ready_transition: transition,
        ready: current.cloned(),
        lease: None,
    };
    let mut health = match (health, saved_ready.as_ref(), current) {
        (None, _, _) => fresh(now),
        (Some(_), None, Some(_)) => fresh(now),
        (Some(_), Some(_), None) => fresh(now),
        (Some(h), Some(s), Some(c)) if s.last_heartbeat_time != c.last_heartbeat_time => {
            let transition = if s.last_transition_time != c.last_transition_time {
                now
            } else {
                h.ready_transition
            };
            fresh(transition)
        }
        (Some(h), _, _) => h,
    };
    if let Some(observed_renew) = lease {
        let renewed = match saved_lease {
            None => true,
            Some(saved_renew) => {
                matches!((saved_renew, observed_renew), (Some(a), Some(b)) if a < b)
            }
        };
        if renewed {
            health.lease = Some(observed_renew);
            health.probe = now;
        }
    }
    let expired = secs_between(health.probe, now) > grace.as_secs_f64();
    HealthStep {
        health,
        observed,
        observed_lease: lease,
        expired,
    }
}

// ---------------------------------------------------------------------------------------------
// The taint eviction controller.

#[derive(Debug)]
enum Work {
    /// An eviction timer.
    Pending {
        id: u64,
        created: Instant,
        fire: Instant,
        abort: tokio::task::AbortHandle,
    },
    /// The eviction ran (kept so the pod is not scheduled again).
    Done,
}

struct TaintEviction {
    client: Client,
    recorder: Recorder,
    nodes: Arc<Informer<Node>>,
    pods: Arc<Informer<Pod>>,
    by_node: Arc<PodsByNode>,
    /// Node name → its NoExecute taints (nodes without any are absent).
    tainted: Mutex<HashMap<String, Vec<Taint>>>,
    /// Pod key → its scheduled (or executed) eviction.
    work: Mutex<HashMap<String, Work>>,
    next_id: AtomicU64,
    queue: Arc<Queue>,
}

impl TaintEviction {
    fn sync(self: &Arc<Self>, key: &str) {
        if let Some(node) = key.strip_prefix("node:") {
            self.handle_node(node);
        } else if let Some(pod) = key.strip_prefix("pod:") {
            self.handle_pod(pod);
        }
    }

    fn handle_node(self: &Arc<Self>, name: &str) {
        let Some(node) = self.nodes.get("", name) else {
            self.tainted.lock().remove(name);
            return;
        };
        let taints = no_execute_taints(&node);
        {
            let mut tainted = self.tainted.lock();
            if taints.is_empty() {
                tainted.remove(name);
            } else {
                tainted.insert(name.to_string(), taints.clone());
            }
        }
        let pods = self.by_node.pods(name, &self.pods);
        if taints.is_empty() {
            for p in &pods {
                self.cancel_with_event(&pod_key(p));
            }
            return;
        }
        let now = Instant::now();
        for p in &pods {
            self.process_pod(p, &taints, now);
        }
    }

    fn handle_pod(self: &Arc<Self>, key: &str) {
        let Some(pod) = self.pods.get_key(key) else {
            self.cancel_with_event(key);
            return;
        };
        let node = node_name_of(&pod);
        if node.is_empty() {
            return;
        }
        let Some(taints) = self.tainted.lock().get(node).cloned() else {
            return;
        };
        self.process_pod(&pod, &taints, Instant::now());
    }

    fn process_pod(self: &Arc<Self>, pod: &Pod, taints: &[Taint], now: Instant) {
        let key = pod_key(pod);
        if taints.is_empty() {
            self.cancel_with_event(&key);
            return;
        }
        let (all, used) = matching_tolerations(taints, tolerations_of(pod));
        if !all {
            self.cancel_with_event(&key);
            self.add_work(&key, now, now);
            return;
        }
        let Some(min) = min_toleration_time(&used) else {
            self.cancel_with_event(&key);
            return;
        };
        let mut start = now;
        let trigger = now + min;
        let existing = match self.work.lock().get(&key) {
            Some(Work::Pending { created, .. }) => Some(*created),
            _ => None,
        };
        if let Some(created) = existing {
            start = created;
            if start + min < trigger {
                return;
            }
            self.cancel_with_event(&key);
        }
        self.add_work(&key, start, start + min);
    }

    /// Schedule the eviction of `key` at `fire` unless something is already scheduled or done.
    fn add_work(self: &Arc<Self>, key: &str, created: Instant, fire: Instant) {
        let mut work = self.work.lock();
        if work.contains_key(key) {
            return;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let this = self.clone();
        let k = key.to_string();
        let task = tokio::spawn(async move {
            tokio::time::sleep_until(fire.into()).await;
            {
                let mut work = this.work.lock();
                match work.get(&k) {
                    Some(Work::Pending { id: i, .. }) if *i == id => {
                        work.insert(k.clone(), Work::Done);
                    }
                    _ => return,
                }
            }
            let ok = this.evict(&k).await;
            if !ok {
                this.work.lock().remove(&k);
            }
        });
        work.insert(
            key.to_string(),
            Work::Pending {
                id,
                created,
                fire,
                abort: task.abort_handle(),
            },
        );
    }

    /// Forget `key`'s eviction; an event if a pending one was cancelled.
    fn cancel_with_event(&self, key: &str) {
        let cancelled = match self.work.lock().remove(key) {
            Some(Work::Pending { abort, fire, .. }) => {
                abort.abort();
                tracing::debug!(
                    pod = key,
                    in_secs = fire.saturating_duration_since(Instant::now()).as_secs(),
                    "eviction cancelled"
                );
                true
            }
            _ => false,
        };
        if cancelled {
            let (ns, name) = capstan_runtime::split_key(key);
            let uid = self.pods.get(ns, name).and_then(|p| p.metadata.uid.clone());
            self.recorder.record(
                pod_ref(ns, name, uid),
                NORMAL,
                "TaintManagerEviction",
                format!("Cancelling deletion of Pod {key}"),
            );
        }
    }

    /// Mark the pod as a disruption target and delete it; whether that worked.
    async fn evict(&self, key: &str) -> bool {
        let (ns, name) = capstan_runtime::split_key(key);
        let uid = self.pods.get(ns, name).and_then(|p| p.metadata.uid.clone());
        self.recorder.record(
            pod_ref(ns, name, uid),
            NORMAL,
            "TaintManagerEviction",
            format!("Marking for deletion Pod {key}"),
        );
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let mut last = None;
        for _ in 0..EVICTION_RETRIES {
            match add_condition_and_delete(&api, name).await {
                Ok(()) => return true,
                Err(e) => {
                    if e.downcast_ref::<kube::Error>().is_some_and(is_not_found) {
                        return true;
                    }
                    last = Some(e);
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if let Some(e) = last {
            tracing::info!(pod = key, error = %format!("{e:#}"), "taint eviction failed");
        }
        false
    }
}

async fn add_condition_and_delete(api: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    let pod = api.get(name).await?;
    let has = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
        .is_some_and(|c| {
            c.status == "True"
                && c.reason.as_deref() == Some("DeletionByTaintManager")
                && c.message.as_deref() == Some("Taint manager: deleting due to NoExecute taint")
        });
    if !has {
        let patch = json!({
            "metadata": {"uid": pod.metadata.uid},
            "status": {"conditions": [{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByTaintManager",
                "message": "Taint manager: deleting due to NoExecute taint",
                "lastTransitionTime": Time(Timestamp::now()),
            }]},
        });
        api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await?;
    }
    api.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn tol(key: &str, op: &str, effect: &str, secs: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()).filter(|k: &String| !k.is_empty()),
            operator: Some(op.into()),
            effect: Some(effect.into()).filter(|e: &String| !e.is_empty()),
            toleration_seconds: secs,
            value: None,
        }
    }

    fn cond(type_: &str, status: &str, heartbeat: i64) -> NodeCondition {
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            last_heartbeat_time: Some(Time(Timestamp::from_second(heartbeat).unwrap())),
            last_transition_time: Some(Time(Timestamp::from_second(0).unwrap())),
            ..Default::default()
        }
    }

    fn node(name: &str, conds: Vec<NodeCondition>, taints: Vec<Taint>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::from_second(0).unwrap())),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(conds),
                ..Default::default()
            }),
        }
    }

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn tolerations_follow_kubernetes_matching() {
        let unreachable = taint(TAINT_UNREACHABLE, NO_EXECUTE);
        assert!(tolerates(
            &tol(TAINT_UNREACHABLE, "Exists", NO_EXECUTE, None),
            &unreachable
        ));
        assert!(tolerates(&tol("", "Exists", "", None), &unreachable));
        assert!(!tolerates(
            &tol(TAINT_UNREACHABLE, "Exists", NO_SCHEDULE, None),
            &unreachable
        ));
        assert!(!tolerates(
            &tol(TAINT_NOT_READY, "Exists", NO_EXECUTE, None),
            &unreachable
        ));
        // Equal with an empty value matches a taint without value.
        assert!(tolerates(
            &tol(TAINT_UNREACHABLE, "Equal", NO_EXECUTE, None),
            &unreachable
        ));
        let mut valued = unreachable.clone();
        valued.value = Some("x".into());
        assert!(!tolerates(
            &tol(TAINT_UNREACHABLE, "Equal", NO_EXECUTE, None),
            &valued
        ));
    }

    #[test]
    fn eviction_waits_for_the_shortest_toleration() {
        let taints = vec![
            taint(TAINT_UNREACHABLE, NO_EXECUTE),
            taint(TAINT_NOT_READY, NO_EXECUTE),
        ];
        let tols = vec![
            tol(TAINT_UNREACHABLE, "Exists", NO_EXECUTE, Some(30)),
            tol(TAINT_NOT_READY, "Exists", NO_EXECUTE, Some(5)),
        ];
        let (all, used) = matching_tolerations(&taints, &tols);
        assert!(all);
        assert_eq!(min_toleration_time(&used), Some(Duration::from_secs(5)));
        // One taint not tolerated: evict at once.
        let (all, _) = matching_tolerations(&taints, &tols[..1]);
        assert!(!all);
        // Tolerated forever.
        let forever = vec![tol("", "Exists", "", None)];
        let (all, used) = matching_tolerations(&taints, &forever);
        assert!(all);
        assert_eq!(min_toleration_time(&used), None);
        // Non-positive seconds mean now.
        let zero = vec![tol("", "Exists", "", Some(0))];
        let (_, used) = matching_tolerations(&taints, &zero);
        assert_eq!(min_toleration_time(&used), Some(Duration::ZERO));
    }

    #[test]
    fn no_schedule_taints_follow_conditions() {
        let mut n = node(
            "n",
            vec![
                cond("Ready", "Unknown", 0),
                cond("MemoryPressure", "True", 0),
                cond("DiskPressure", "False", 0),
            ],
            vec![
                taint(TAINT_DISK_PRESSURE, NO_SCHEDULE),
                taint("custom", NO_SCHEDULE),
                taint(TAINT_UNREACHABLE, NO_EXECUTE),
            ],
        );
        n.spec.as_mut().unwrap().unschedulable = Some(true);
        let (add, del) = no_schedule_diff(&n);
        let keys = |v: &[Taint]| v.iter().map(|t| t.key.clone()).collect::<Vec<_>>();
        assert_eq!(
            keys(&add),
            vec![
                TAINT_UNREACHABLE,
                TAINT_MEMORY_PRESSURE,
                TAINT_UNSCHEDULABLE
            ]
        );
        assert!(add.iter().all(|t| t.effect == NO_SCHEDULE));
        assert_eq!(keys(&del), vec![TAINT_DISK_PRESSURE]);
    }

    #[test]
    fn swapping_taints_keeps_others_and_reports_no_change() {
        let current = vec![
            taint("custom", NO_SCHEDULE),
            taint(TAINT_NOT_READY, NO_EXECUTE),
        ];
        let next = swapped_taints(
            &current,
            &[taint(TAINT_UNREACHABLE, NO_EXECUTE)],
            &[taint(TAINT_NOT_READY, NO_EXECUTE)],
        )
        .unwrap();
        assert_eq!(
            next,
            vec![
                taint("custom", NO_SCHEDULE),
                taint(TAINT_UNREACHABLE, NO_EXECUTE)
            ]
        );
        assert_eq!(
            swapped_taints(&next, &[taint(TAINT_UNREACHABLE, NO_EXECUTE)], &[]),
            None
        );
        assert_eq!(
            swapped_taints(&next, &[], &[taint(TAINT_NOT_READY, NO_EXECUTE)]),
            None
        );
    }

    #[test]
    fn zones_are_classified_by_their_not_ready_share() {
        assert_eq!(compute_zone_state(&[true, false]), (1, ZoneState::Normal));
        assert_eq!(
            compute_zone_state(&[false, false]),
            (2, ZoneState::FullDisruption)
        );
        assert_eq!(
            compute_zone_state(&[true, false, false, false]),
            (3, ZoneState::PartialDisruption)
        );
        // Two down of three is not partial disruption (more than two are needed).
        assert_eq!(
            compute_zone_state(&[true, false, false]),
            (2, ZoneState::Normal)
        );
        assert_eq!(zone_qps(ZoneState::PartialDisruption, 10), 0.0);
        assert_eq!(
            zone_qps(ZoneState::PartialDisruption, 100),
            SECONDARY_EVICTION_QPS
        );
        assert_eq!(zone_qps(ZoneState::Normal, 10), EVICTION_QPS);
    }

    #[test]
    fn zone_keys_combine_region_and_zone() {
        let mut n = node("n", vec![], vec![]);
        assert_eq!(zone_key(&n), "");
        n.metadata.labels = Some(BTreeMap::from([
            ("topology.kubernetes.io/zone".into(), "a".into()),
            (
                "failure-domain.beta.kubernetes.io/region".into(),
                "r".into(),
            ),
        ]));
        assert_eq!(zone_key(&n), "r:\x00:a");
    }

    #[test]
    fn tainting_is_rate_limited_and_nodes_are_queued_once() {
        let mut q = TaintQueue::new(0.1);
        assert!(q.add("a"));
        assert!(!q.add("a"));
        assert!(q.add("b"));
        let now = Instant::now();
        assert_eq!(q.next_due(now).as_deref(), Some("a"));
        q.done("a");
        assert!(!q.add("a"), "a tainted node stays known");
        // The burst of one is spent: b waits ten seconds.
        assert_eq!(q.next_due(now), None);
        assert_eq!(
            q.next_due(now + Duration::from_secs(11)).as_deref(),
            Some("b")
        );
        assert!(q.remove("a"));
        assert!(q.add("a"));
        q.swap_limiter(0.0);
        assert_eq!(q.next_due(now + Duration::from_secs(100)), None);
    }

    #[test]
    fn silent_nodes_expire_after_the_grace_period_from_our_own_observation() {
        let grace = Duration::from_secs(40);
        let startup = Duration::from_secs(60);
        let ready = cond("Ready", "True", 100);
        let n = node("n", vec![ready.clone()], vec![]);
        // First sight: the probe is now, whatever the heartbeat says.
        let s = health_step(None, &n, Some(&ready), None, ts(1000), grace, startup);
        assert!(!s.expired);
        assert_eq!(s.health.probe, ts(1000));
        // Nothing new 41 s later: expired.
        let s2 = health_step(
            Some(s.health.clone()),
            &n,
            Some(&ready),
            None,
            ts(1041),
            grace,
            startup,
        );
        assert!(s2.expired);
        // A lease renewal observed at 1030 keeps it alive at 1041.
        let s3 = health_step(
            Some(s.health.clone()),
            &n,
            Some(&ready),
            Some(Some(ts(5))),
            ts(1030),
            grace,
            startup,
        );
        assert_eq!(s3.health.probe, ts(1030));
        let s4 = health_step(
            Some(s3.health.clone()),
            &n,
            Some(&ready),
            Some(Some(ts(5))),
            ts(1041),
            grace,
            startup,
        );
        assert!(!s4.expired);
        let s5 = health_step(
            Some(s4.health.clone()),
            &n,
            Some(&ready),
            Some(Some(ts(5))),
            ts(1071),
            grace,
            startup,
        );
        assert!(s5.expired, "an unrenewed lease does not count");
        // A new heartbeat in the Ready condition counts too.
        let beat = cond("Ready", "True", 200);
        let s6 = health_step(
            Some(s5.health),
            &n,
            Some(&beat),
            Some(Some(ts(5))),
            ts(1072),
            grace,
            startup,
        );
        assert!(!s6.expired);
        assert_eq!(s6.health.probe, ts(1072));
    }

    #[test]
    fn nodes_that_never_posted_status_get_the_startup_grace_from_creation() {
        let n = node("n", vec![], vec![]);
        let s = health_step(
            None,
            &n,
            None,
            None,
            ts(59),
            Duration::from_secs(40),
            Duration::from_secs(60),
        );
        assert!(!s.expired);
        assert_eq!(s.observed.status, "Unknown");
        let s = health_step(
            Some(s.health),
            &n,
            None,
            None,
            ts(61),
            Duration::from_secs(40),
            Duration::from_secs(60),
        );
        assert!(s.expired);
    }

    #[test]
    fn pods_are_indexed_by_node() {
        let idx = PodsByNode::default();
        let mk = |node: &str| {
            Arc::new(Pod {
                metadata: ObjectMeta {
                    name: Some("p".into()),
                    namespace: Some("ns".into()),
                    ..Default::default()
                },
                spec: Some(k8s_openapi::api::core::v1::PodSpec {
                    node_name: Some(node.into()).filter(|n: &String| !n.is_empty()),
                    ..Default::default()
                }),
                status: None,
            })
        };
        let unbound = mk("");
        idx.observe(&Change::Add(&unbound));
        assert!(idx.keys("n1").is_empty());
        let bound = mk("n1");
        idx.observe(&Change::Update {
            old: &unbound,
            new: &bound,
        });
        assert_eq!(idx.keys("n1"), vec!["ns/p".to_string()]);
        idx.observe(&Change::Delete(&bound));
        assert!(idx.keys("n1").is_empty());
    }
}
