//! The resource quota controller (Kubernetes' `pkg/controller/resourcequota` with the core quota
//! evaluators of `pkg/quota/v1/evaluator/core`): keeps every ResourceQuota's `status.hard`
//! equal to `spec.hard` and recomputes `status.used` from the objects of its namespace.
//!
//! The API server's quota admission charges usage as objects are created; this controller
//! gives it back when they go away (or stop counting: a pod that finished no longer uses
//! compute resources) and corrects any drift. Quotas are recalculated when created or when
//! their hard limits change, a short while after a change that releases usage in their
//! namespace (several changes in a row make one recalculation), and all of them every five
//! minutes. Usage is measured exactly as the admission plugin measures it
//! (`crates/apiserver/src/admission/resourcequota.rs`), so the two agree to the milli-unit.
//!
//! Objects are counted from shared informers, started for a kind when the first quota that
//! tracks it is synced; object counts of kinds without a typed informer (custom resources) are
//! listed from the API at each recalculation.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use capstan_api::validation::quantity::{self, Format, Quantity};
use capstan_runtime::{Change, Informer, Informers, Queue};
use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, Pod, ResourceQuota, ResourceQuotaStatus, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::{Api, Client, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;

use crate::util::is_not_found;
use crate::Ctx;

/// Every quota is recalculated this often (`--resource-quota-sync-period`).
const RESYNC: Duration = Duration::from_secs(5 * 60);
/// Changes to a namespace's objects are gathered this long before its quotas are recalculated.
const DEBOUNCE: Duration = Duration::from_millis(500);

/// Suffix of per-storage-class claim resources (`<class>.storageclass.storage.k8s.io/...`).
const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// Core resources whose bare plural is also an object-count quota resource.
const LEGACY_COUNTS: &[&str] = &[
    "configmaps",
    "resourcequotas",
    "replicationcontrollers",
    "secrets",
];

/// Resources that are never quota'd.
const IGNORED: &[(&str, &str)] = &[
    ("", "bindings"),
    ("", "componentstatuses"),
    ("", "events"),
    ("events.k8s.io", "events"),
    ("authentication.k8s.io", "tokenreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
];

const POD_RESOURCES: &[&str] = &[
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];

const SERVICE_RESOURCES: &[&str] = &[
    "count/services",
    "services",
    "services.nodeports",
    "services.loadbalancers",
];

type ResourceList = BTreeMap<String, Quantity>;

pub fn start(ctx: &Ctx) {
    let quotas = ctx.informers.get::<ResourceQuota>();
    let queue = Queue::new("resourcequota_primary");
    let scheduled = Arc::new(Mutex::new(HashSet::new()));
    let rq = Arc::new(QuotaController {
        client: ctx.client.clone(),
        informers: ctx.informers.clone(),
        quotas: quotas.clone(),
        queue: queue.clone(),
        scheduled: scheduled.clone(),
        replenish: Arc::new(Replenish {
            quotas: quotas.clone(),
            queue: queue.clone(),
            scheduled,
        }),
        sources: Mutex::new(HashMap::new()),
        dynamic: Mutex::new(HashMap::new()),
    });
    {
        let queue = queue.clone();
        quotas.on_change(move |c| match c {
            Change::Add(q) => queue.add(quota_key(q)),
            Change::Update { old, new } => {
                let spec_changed = !same_list(&spec_hard(old), &spec_hard(new));
                let status_stale = !same_list(&spec_hard(new), &status_hard(new));
                if spec_changed || status_stale {
                    queue.add(quota_key(new));
                }
            }
            Change::Delete(_) => {}
        });
    }
    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        rq.quotas.wait_synced().await;
        let r = rq.clone();
        rq.queue.run_workers(workers, move |key| {
            let r = r.clone();
            async move { r.sync(&key).await }
        });
        let mut tick = tokio::time::interval(RESYNC);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            for q in rq.quotas.list() {
                rq.queue.add(quota_key(&q));
            }
        }
    });
}

fn quota_key(q: &ResourceQuota) -> String {
    capstan_runtime::key(
        q.metadata.namespace.as_deref(),
        q.metadata.name.as_deref().unwrap_or_default(),
    )
}

// ---------------------------------------------------------------------------------------------
// Quantities.

fn zero() -> Quantity {
    Quantity {
        nanos: 0,
        format: Format::DecimalSI,
    }
}

fn count(n: usize) -> Quantity {
    Quantity {
        nanos: n as i128 * 1_000_000_000,
        format: Format::DecimalSI,
    }
}

/// `Quantity.Add`: the sum keeps the left operand's format unless it is zero.
fn qadd(a: Quantity, b: Quantity) -> Quantity {
    Quantity {
        nanos: a.nanos.saturating_add(b.nanos),
        format: if a.nanos == 0 { b.format } else { a.format },
    }
}

fn add_into(list: &mut ResourceList, new: &ResourceList) {
    for (k, q) in new {
        let sum = match list.get(k) {
            Some(v) => qadd(*v, *q),
            None => *q,
        };
        list.insert(k.clone(), sum);
    }
}

fn max_into(list: &mut ResourceList, new: &ResourceList) {
    for (k, q) in new {
        if list.get(k).is_none_or(|v| q.nanos > v.nanos) {
            list.insert(k.clone(), *q);
        }
    }
}

/// Parse a typed resource list; values that are not quantities are skipped.
fn parse_list(list: Option<&BTreeMap<String, ApiQuantity>>) -> ResourceList {
    list.into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), quantity::parse(&v.0)?)))
        .collect()
}

fn to_api(list: &ResourceList) -> BTreeMap<String, ApiQuantity> {
    list.iter()
        .map(|(k, q)| (k.clone(), ApiQuantity(q.canonical())))
        .collect()
}

/// Equal keys and values (Kubernetes' `quota.Equals`, by value).
fn same_list(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, q)| b.get(k).is_some_and(|o| o.nanos == q.nanos))
}

fn spec_hard(q: &ResourceQuota) -> ResourceList {
    parse_list(q.spec.as_ref().and_then(|s| s.hard.as_ref()))
}

fn status_hard(q: &ResourceQuota) -> ResourceList {
    parse_list(q.status.as_ref().and_then(|s| s.hard.as_ref()))
}

// ---------------------------------------------------------------------------------------------
// Evaluators: which quota resources each kind of object accounts for, and how much.

/// The object-count quota resource of a group/resource (`count/deployments.apps`).
fn object_count_name(group: &str, plural: &str) -> String {
    if group.is_empty() {
        format!("count/{plural}")
    } else {
        format!("count/{plural}.{group}")
    }
}

/// `requests.<name>` for an extended (non-`kubernetes.io`, domain-qualified) resource.
fn is_extended_quota_name(r: &str) -> bool {
    r.strip_prefix("requests.")
        .is_some_and(|n| n.contains('/') && !n.contains("kubernetes.io/"))
}

fn is_extended_resource(r: &str) -> bool {
    r.contains('/') && !r.contains("kubernetes.io/") && !r.starts_with("requests.")
}

fn is_pod_resource(r: &str) -> bool {
    POD_RESOURCES.contains(&r)
        || r.starts_with("hugepages-")
        || r.starts_with("requests.hugepages-")
        || is_extended_quota_name(r)
}

fn is_service_resource(r: &str) -> bool {
    SERVICE_RESOURCES.contains(&r)
}

fn is_claim_resource(r: &str) -> bool {
    let base = ["persistentvolumeclaims", "requests.storage"];
    r == "count/persistentvolumeclaims"
        || base.contains(&r)
        || base
            .iter()
            .any(|b| r.ends_with(&format!("{STORAGE_CLASS_SUFFIX}{b}")))
}

/// The (group, plural) a pure object-count resource counts, if it is one.
fn counted_resource(r: &str) -> Option<(String, String)> {
    if is_pod_resource(r) || is_service_resource(r) || is_claim_resource(r) {
        return None;
    }
    let (plural, group) = match r.strip_prefix("count/") {
        Some(rest) => rest.split_once('.').unwrap_or((rest, "")),
        None if LEGACY_COUNTS.contains(&r) => (r, ""),
        None => return None,
    };
    if plural.is_empty() || IGNORED.contains(&(group, plural)) {
        return None;
    }
    Some((group.to_string(), plural.to_string()))
}

/// One scope requirement of a quota: scope name, operator, values.
#[derive(Debug, Clone)]
struct Scope {
    name: String,
    op: String,
    values: Vec<String>,
}

/// `spec.scopes` (each an Exists requirement) and `spec.scopeSelector.matchExpressions`.
fn scopes_of(quota: &ResourceQuota) -> Vec<Scope> {
    let Some(spec) = quota.spec.as_ref() else {
        return Vec::new();
    };
    let mut out: Vec<Scope> = spec
        .scopes
        .iter()
        .flatten()
        .map(|s| Scope {
            name: s.clone(),
            op: "Exists".into(),
            values: Vec::new(),
        })
        .collect();
    for e in spec
        .scope_selector
        .as_ref()
        .and_then(|s| s.match_expressions.as_ref())
        .into_iter()
        .flatten()
    {
        out.push(Scope {
            name: e.scope_name.clone(),
            op: e.operator.clone(),
            values: e.values.clone().unwrap_or_default(),
        });
    }
    out
}

fn is_terminating(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.active_deadline_seconds)
        .is_some_and(|s| s >= 0)
}

fn containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.as_ref().into_iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    })
}

fn container_list(c: &Container, limits: bool) -> ResourceList {
    let r = c.resources.as_ref();
    parse_list(r.and_then(|r| {
        if limits {
            r.limits.as_ref()
        } else {
            r.requests.as_ref()
        }
    }))
}

/// QoS BestEffort: no container states a cpu or memory request or limit.
fn is_best_effort(pod: &Pod) -> bool {
    if let Some(q) = pod
        .status
        .as_ref()
        .and_then(|s| s.qos_class.as_deref())
        .filter(|q| !q.is_empty())
    {
        return q == "BestEffort";
    }
    !containers(pod).any(|c| {
        [false, true].iter().any(|limits| {
            let l = container_list(c, *limits);
            ["cpu", "memory"]
                .iter()
                .any(|r| l.get(*r).is_some_and(|q| q.nanos != 0))
        })
    })
}

fn uses_cross_namespace_affinity(pod: &Pod) -> bool {
    let Some(aff) = pod.spec.as_ref().and_then(|s| s.affinity.as_ref()) else {
        return false;
    };
    let cross = |t: &k8s_openapi::api::core::v1::PodAffinityTerm| {
        t.namespaces.as_ref().is_some_and(|n| !n.is_empty()) || t.namespace_selector.is_some()
    };
    let affinity = aff.pod_affinity.as_ref().map(|a| {
        (
            a.required_during_scheduling_ignored_during_execution
                .as_ref(),
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
        )
    });
    let anti = aff.pod_anti_affinity.as_ref().map(|a| {
        (
            a.required_during_scheduling_ignored_during_execution
                .as_ref(),
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
        )
    });
    [affinity, anti].into_iter().flatten().any(|(req, pref)| {
        req.into_iter().flatten().any(cross)
            || pref
                .into_iter()
                .flatten()
                .any(|w| cross(&w.pod_affinity_term))
    })
}

fn pod_matches_scope(s: &Scope, pod: &Pod) -> bool {
    match s.name.as_str() {
        "Terminating" => is_terminating(pod),
        "NotTerminating" => !is_terminating(pod),
        "BestEffort" => is_best_effort(pod),
        "NotBestEffort" => !is_best_effort(pod),
        "CrossNamespacePodAffinity" => uses_cross_namespace_affinity(pod),
        "PriorityClass" => {
            let class = pod
                .spec
                .as_ref()
                .and_then(|s| s.priority_class_name.as_deref())
                .unwrap_or("");
            let has = |v: &str| s.values.iter().any(|x| x == v);
            match s.op.as_str() {
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                "In" => !class.is_empty() && has(class),
                "NotIn" => class.is_empty() || !has(class),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Kubernetes' `QuotaV1Pod`: terminal pods, and pods whose deletion grace period has passed,
/// no longer use compute resources.
fn pod_is_charged(pod: &Pod, now: SystemTime) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Failed") | Some("Succeeded")) {
        return false;
    }
    if let (Some(at), Some(grace)) = (
        pod.metadata.deletion_timestamp.as_ref(),
        pod.metadata.deletion_grace_period_seconds,
    ) {
        let now_s = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let at_s = at.0.as_millisecond() as f64 / 1000.0;
        if now_s > at_s + grace as f64 {
            return false;
        }
    }
    true
}

/// The effective requests (or limits) of a pod's containers (Kubernetes'
/// `AggregateContainerRequests`/`Limits`): containers and sidecars add up; each plain init
/// container runs alongside the sidecars started before it; the pod needs the larger.
fn aggregate_containers(pod: &Pod, limits: bool) -> ResourceList {
    let mut total = ResourceList::new();
    let Some(spec) = pod.spec.as_ref() else {
        return total;
    };
    for c in &spec.containers {
        add_into(&mut total, &container_list(c, limits));
    }
    let mut sidecars = ResourceList::new();
    let mut init_max = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let own = container_list(c, limits);
        if c.restart_policy.as_deref() == Some("Always") {
            add_into(&mut total, &own);
            add_into(&mut sidecars, &own);
            max_into(&mut init_max, &sidecars);
        } else {
            let mut running = own;
            add_into(&mut running, &sidecars);
            max_into(&mut init_max, &running);
        }
    }
    max_into(&mut total, &init_max);
    total
}

fn pod_overhead(pod: &Pod) -> ResourceList {
    parse_list(pod.spec.as_ref().and_then(|s| s.overhead.as_ref()))
}

/// A pod's requests with its overhead (`PodRequests`).
fn pod_requests(pod: &Pod) -> ResourceList {
    let mut reqs = aggregate_containers(pod, false);
    add_into(&mut reqs, &pod_overhead(pod));
    reqs
}

/// A pod's limits (`PodLimits`); overhead is added only to resources that have a limit.
fn pod_limits(pod: &Pod) -> ResourceList {
    let mut limits = aggregate_containers(pod, true);
    for (k, q) in pod_overhead(pod) {
        if let Some(v) = limits.get_mut(&k) {
            *v = qadd(*v, q);
        }
    }
    limits
}

/// Kubernetes' `podComputeUsageHelper`.
fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let one = count(1);
    let mut out = ResourceList::new();
    out.insert("pods".into(), one);
    for r in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(r) {
            out.insert(r.into(), *q);
            out.insert(format!("requests.{r}"), *q);
        }
        if let Some(q) = limits.get(r) {
            out.insert(format!("limits.{r}"), *q);
        }
    }
    for (r, q) in requests {
        if r.starts_with("hugepages-") {
            out.insert(r.clone(), *q);
            out.insert(format!("requests.{r}"), *q);
        }
        if is_extended_resource(r) {
            out.insert(format!("requests.{r}"), *q);
        }
    }
    out
}

fn pod_usage(pod: &Pod, now: SystemTime) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("count/pods".into(), count(1));
    if !pod_is_charged(pod, now) {
        return out;
    }
    add_into(
        &mut out,
        &compute_usage(&pod_requests(pod), &pod_limits(pod)),
    );
    out
}

/// The service type quota cares about: NodePort, LoadBalancer, or neither.
fn quota_service_type(svc: &Service) -> &str {
    svc.spec
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .filter(|t| matches!(*t, "NodePort" | "LoadBalancer"))
        .unwrap_or("")
}

fn service_usage(svc: &Service) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("count/services".into(), count(1));
    out.insert("services".into(), count(1));
    let spec = svc.spec.as_ref();
    let ports = spec.and_then(|s| s.ports.as_ref()).map_or(&[][..], |p| p);
    let (mut node_ports, mut lbs) = (zero(), zero());
    match quota_service_type(svc) {
        "NodePort" => node_ports = count(ports.len()),
        "LoadBalancer" => {
            let allocate = spec.and_then(|s| s.allocate_load_balancer_node_ports);
            node_ports = if allocate == Some(false) {
                count(
                    ports
                        .iter()
                        .filter(|p| p.node_port.unwrap_or(0) > 0)
                        .count(),
                )
            } else {
                count(ports.len())
            };
            lbs = count(1);
        }
        _ => {}
    }
    out.insert("services.nodeports".into(), node_ports);
    out.insert("services.loadbalancers".into(), lbs);
    out
}

fn claim_storage(pvc: &PersistentVolumeClaim) -> Option<Quantity> {
    let requested = parse_list(
        pvc.spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref()),
    )
    .get("storage")
    .copied();
    let allocated = parse_list(
        pvc.status
            .as_ref()
            .and_then(|s| s.allocated_resources.as_ref()),
    )
    .get("storage")
    .copied();
    match (requested, allocated) {
        (Some(r), Some(a)) if a.nanos > r.nanos => Some(a),
        (Some(r), _) => Some(r),
        (None, a) => a,
    }
}

fn claim_usage(pvc: &PersistentVolumeClaim) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("persistentvolumeclaims".into(), count(1));
    out.insert("count/persistentvolumeclaims".into(), count(1));
    let class = pvc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
        .cloned()
        .or_else(|| pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone()))
        .unwrap_or_default();
    if !class.is_empty() {
        out.insert(
            format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
            count(1),
        );
    }
    if let Some(q) = claim_storage(pvc) {
        out.insert("requests.storage".into(), q);
        if !class.is_empty() {
            out.insert(format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"), q);
        }
    }
    out
}

/// The usage of `objects` for `resources`, counting only objects in every scope: each
/// resource gets a value, zero when nothing uses it.
fn sum_usage<'a, T: 'a>(
    objects: impl IntoIterator<Item = &'a T>,
    resources: &[String],
    in_scope: impl Fn(&T) -> bool,
    usage: impl Fn(&T) -> ResourceList,
) -> ResourceList {
    let mut total = ResourceList::new();
    for o in objects {
        if in_scope(o) {
            add_into(&mut total, &usage(o));
        }
    }
    resources
        .iter()
        .map(|r| (r.clone(), total.get(r).copied().unwrap_or_else(zero)))
        .collect()
}

/// The quota's new `status.used`: the old values of resources nothing measures, the measured
/// usage of the others, restricted to the hard limits (Kubernetes' syncResourceQuota).
fn next_used(
    hard: &ResourceList,
    old_used: &ResourceList,
    measured: &ResourceList,
) -> ResourceList {
    let mut used = old_used.clone();
    for (k, v) in measured {
        used.insert(k.clone(), *v);
    }
    used.retain(|k, _| hard.contains_key(k));
    used
}

// ---------------------------------------------------------------------------------------------
// Sources: the informers quota counts come from.

/// Object counts of one kind, per namespace.
trait Counter: Send + Sync {
    fn count_in(&self, namespace: &str) -> usize;
    fn synced(&self) -> bool;
}

impl<K: Resource + Send + Sync + 'static> Counter for Informer<K> {
    fn count_in(&self, namespace: &str) -> usize {
        self.len_in(namespace)
    }

    fn synced(&self) -> bool {
        self.has_synced()
    }
}

enum Source {
    Typed(Arc<dyn Counter>),
    /// Listed from the API at each recalculation (custom resources), deletions watched.
    Dynamic,
}

/// Debounced recalculation of a namespace's quotas when released usage is observed.
struct Replenish {
    quotas: Arc<Informer<ResourceQuota>>,
    queue: Arc<Queue>,
    scheduled: Arc<Mutex<HashSet<String>>>,
}

impl Replenish {
    /// Recalculate (soon) every quota of `namespace` tracking a resource `affects` accepts.
    fn namespace(&self, namespace: &str, affects: impl Fn(&str) -> bool) {
        for q in self.quotas.list_namespace(namespace) {
            let tracks = q
                .spec
                .as_ref()
                .and_then(|s| s.hard.as_ref())
                .is_some_and(|h| h.keys().any(|k| affects(k)));
            if tracks {
                let key = quota_key(&q);
                if self.scheduled.lock().insert(key.clone()) {
                    self.queue.add_after(key, DEBOUNCE);
                }
            }
        }
    }
}

fn ns_of<K: Resource>(o: &K) -> String {
    o.meta().namespace.clone().unwrap_or_default()
}

struct QuotaController {
    client: Client,
    informers: Arc<Informers>,
    quotas: Arc<Informer<ResourceQuota>>,
    queue: Arc<Queue>,
    /// Quotas waiting for a debounced recalculation.
    scheduled: Arc<Mutex<HashSet<String>>>,
    replenish: Arc<Replenish>,
    /// (group, plural) → where its objects are counted from.
    sources: Mutex<HashMap<(String, String), Arc<Source>>>,
    /// (group, plural) → the resource, for those counted by listing.
    dynamic: Mutex<HashMap<(String, String), ApiResource>>,
}

/// A typed informer for a count resource, with a handler recalculating on deletions.
fn count_informer<K>(
    informers: &Informers,
    replenish: Arc<Replenish>,
    name: String,
) -> Arc<dyn Counter>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let inf = informers.get::<K>();
    let legacy = name
        .strip_prefix("count/")
        .filter(|p| LEGACY_COUNTS.contains(p))
        .map(str::to_string);
    inf.on_change(move |c| {
        if let Change::Delete(o) = c {
            replenish.namespace(&ns_of(o.as_ref()), |r| {
                r == name || legacy.as_deref() == Some(r)
            });
        }
    });
    inf
}

impl QuotaController {
    /// Where objects of (group, plural) are counted from, starting its informer on first use.
    fn source(self: &Arc<Self>, group: &str, plural: &str) -> Arc<Source> {
        let key = (group.to_string(), plural.to_string());
        if let Some(s) = self.sources.lock().get(&key) {
            return s.clone();
        }
        let replenish = self.replenish.clone();
        let name = object_count_name(group, plural);
        let inf = &*self.informers;
        use k8s_openapi::api as a;
        let typed: Option<Arc<dyn Counter>> = match (group, plural) {
            ("", "pods") => Some(self.pod_informer()),
            ("", "services") => Some(self.service_informer()),
            ("", "persistentvolumeclaims") => Some(self.claim_informer()),
            ("", "configmaps") => Some(count_informer::<a::core::v1::ConfigMap>(
                inf, replenish, name,
            )),
            ("", "secrets") => Some(count_informer::<a::core::v1::Secret>(inf, replenish, name)),
            ("", "resourcequotas") => Some(self.quotas.clone()),
            ("", "replicationcontrollers") => Some(count_informer::<
                a::core::v1::ReplicationController,
            >(inf, replenish, name)),
            ("", "serviceaccounts") => Some(count_informer::<a::core::v1::ServiceAccount>(
                inf, replenish, name,
            )),
            ("", "endpoints") => Some(count_informer::<a::core::v1::Endpoints>(
                inf, replenish, name,
            )),
            ("", "limitranges") => Some(count_informer::<a::core::v1::LimitRange>(
                inf, replenish, name,
            )),
            ("", "podtemplates") => Some(count_informer::<a::core::v1::PodTemplate>(
                inf, replenish, name,
            )),
            ("apps", "deployments") => Some(count_informer::<a::apps::v1::Deployment>(
                inf, replenish, name,
            )),
            ("apps", "replicasets") => Some(count_informer::<a::apps::v1::ReplicaSet>(
                inf, replenish, name,
            )),
            ("apps", "statefulsets") => Some(count_informer::<a::apps::v1::StatefulSet>(
                inf, replenish, name,
            )),
            ("apps", "daemonsets") => Some(count_informer::<a::apps::v1::DaemonSet>(
                inf, replenish, name,
            )),
            ("apps", "controllerrevisions") => Some(count_informer::<
                a::apps::v1::ControllerRevision,
            >(inf, replenish, name)),
            ("batch", "jobs") => Some(count_informer::<a::batch::v1::Job>(inf, replenish, name)),
            ("batch", "cronjobs") => Some(count_informer::<a::batch::v1::CronJob>(
                inf, replenish, name,
            )),
            ("autoscaling", "horizontalpodautoscalers") => Some(count_informer::<
                a::autoscaling::v2::HorizontalPodAutoscaler,
            >(inf, replenish, name)),
            ("networking.k8s.io", "ingresses") => Some(
                count_informer::<a::networking::v1::Ingress>(inf, replenish, name),
            ),
            ("networking.k8s.io", "networkpolicies") => Some(count_informer::<
                a::networking::v1::NetworkPolicy,
            >(inf, replenish, name)),
            ("policy", "poddisruptionbudgets") => Some(count_informer::<
                a::policy::v1::PodDisruptionBudget,
            >(inf, replenish, name)),
            ("rbac.authorization.k8s.io", "roles") => {
                Some(count_informer::<a::rbac::v1::Role>(inf, replenish, name))
            }
            ("rbac.authorization.k8s.io", "rolebindings") => {
                Some(count_informer::<a::rbac::v1::RoleBinding>(
                    inf, replenish, name,
                ))
            }
            ("coordination.k8s.io", "leases") => Some(
                count_informer::<a::coordination::v1::Lease>(inf, replenish, name),
            ),
            ("discovery.k8s.io", "endpointslices") => Some(count_informer::<
                a::discovery::v1::EndpointSlice,
            >(inf, replenish, name)),
            _ => None,
        };
        let source = Arc::new(match typed {
            Some(c) => Source::Typed(c),
            None => Source::Dynamic,
        });
        self.sources
            .lock()
            .entry(key)
            .or_insert_with(|| source.clone())
            .clone()
    }

    fn pod_informer(self: &Arc<Self>) -> Arc<dyn Counter> {
        let inf = self.informers.get::<Pod>();
        let r = self.replenish.clone();
        inf.on_change(move |c| {
            let (ns, release) = match c {
                Change::Delete(p) => (ns_of(p.as_ref()), true),
                Change::Update { old, new } => {
                    let now = SystemTime::now();
                    (
                        ns_of(new.as_ref()),
                        pod_is_charged(old, now) && !pod_is_charged(new, now),
                    )
                }
                Change::Add(_) => return,
            };
            if release {
                r.namespace(&ns, is_pod_resource);
            }
        });
        inf
    }

    fn service_informer(self: &Arc<Self>) -> Arc<dyn Counter> {
        let inf = self.informers.get::<Service>();
        let r = self.replenish.clone();
        inf.on_change(move |c| {
            let release = match c {
                Change::Delete(_) => true,
                Change::Update { old, new } => quota_service_type(old) != quota_service_type(new),
                Change::Add(_) => false,
            };
            if release {
                r.namespace(&ns_of(c.object().as_ref()), is_service_resource);
            }
        });
        inf
    }

    fn claim_informer(self: &Arc<Self>) -> Arc<dyn Counter> {
        let inf = self.informers.get::<PersistentVolumeClaim>();
        let r = self.replenish.clone();
        inf.on_change(move |c| {
            let release = match c {
                Change::Delete(_) => true,
                Change::Update { old, new } => {
                    let alloc = |p: &PersistentVolumeClaim| {
                        parse_list(
                            p.status
                                .as_ref()
                                .and_then(|s| s.allocated_resources.as_ref()),
                        )
                        .get("storage")
                        .map(|q| q.nanos)
                    };
                    alloc(old) != alloc(new)
                }
                Change::Add(_) => false,
            };
            if release {
                r.namespace(&ns_of(c.object().as_ref()), is_claim_resource);
            }
        });
        inf
    }

    /// Wait (bounded) until a typed source has its first list.
    async fn wait_synced(counter: &Arc<dyn Counter>) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !counter.synced() {
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!("informer not synced yet");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    async fn sync(self: &Arc<Self>, key: &str) -> anyhow::Result<()> {
        self.scheduled.lock().remove(key);
        let Some(quota) = self.quotas.get_key(key) else {
            return Ok(());
        };
        let ns = ns_of(quota.as_ref());
        let hard = spec_hard(&quota);
        let status = quota.status.as_ref();
        let old_used = parse_list(status.and_then(|s| s.used.as_ref()));
        let mut dirty = !same_list(&hard, &status_hard(&quota))
            || status.and_then(|s| s.hard.as_ref()).is_none()
            || status.and_then(|s| s.used.as_ref()).is_none();
        let measured = self.measure(&ns, &quota, &hard).await?;
        let used = next_used(&hard, &old_used, &measured);
        dirty |= !same_list(&used, &old_used);
        if !dirty {
            return Ok(());
        }
        let mut next = (*quota).clone();
        next.status = Some(ResourceQuotaStatus {
            hard: Some(to_api(&hard)),
            used: Some(to_api(&used)),
        });
        let api: Api<ResourceQuota> = Api::namespaced(self.client.clone(), &ns);
        match api
            .replace_status(
                quota.metadata.name.as_deref().unwrap_or_default(),
                &PostParams::default(),
                &next,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("updating status of quota {key}")),
        }
    }

    /// The current usage of every resource of `hard` some evaluator measures.
    async fn measure(
        self: &Arc<Self>,
        ns: &str,
        quota: &ResourceQuota,
        hard: &ResourceList,
    ) -> anyhow::Result<ResourceList> {
        let scopes = scopes_of(quota);
        let keys: Vec<String> = hard.keys().cloned().collect();
        let mut out = ResourceList::new();

        let pod_keys: Vec<String> = keys
            .iter()
            .filter(|k| is_pod_resource(k))
            .cloned()
            .collect();
        if !pod_keys.is_empty() {
            self.source("", "pods");
            let inf = self.informers.get::<Pod>();
            Self::wait_synced(&(inf.clone() as Arc<dyn Counter>)).await?;
            let pods = inf.list_namespace(ns);
            let now = SystemTime::now();
            out.extend(sum_usage(
                pods.iter().map(|p| p.as_ref()),
                &pod_keys,
                |p| scopes.iter().all(|s| pod_matches_scope(s, p)),
                |p| pod_usage(p, now),
            ));
        }

        let svc_keys: Vec<String> = keys
            .iter()
            .filter(|k| is_service_resource(k))
            .cloned()
            .collect();
        if !svc_keys.is_empty() {
            self.source("", "services");
            let inf = self.informers.get::<Service>();
            Self::wait_synced(&(inf.clone() as Arc<dyn Counter>)).await?;
            let svcs = inf.list_namespace(ns);
            out.extend(sum_usage(
                svcs.iter().map(|s| s.as_ref()),
                &svc_keys,
                |_| scopes.is_empty(),
                service_usage,
            ));
        }

        let claim_keys: Vec<String> = keys
            .iter()
            .filter(|k| is_claim_resource(k))
            .cloned()
            .collect();
        if !claim_keys.is_empty() {
            self.source("", "persistentvolumeclaims");
            let inf = self.informers.get::<PersistentVolumeClaim>();
            Self::wait_synced(&(inf.clone() as Arc<dyn Counter>)).await?;
            let claims = inf.list_namespace(ns);
            out.extend(sum_usage(
                claims.iter().map(|c| c.as_ref()),
                &claim_keys,
                |_| scopes.is_empty(),
                claim_usage,
            ));
        }

        for k in &keys {
            let Some((group, plural)) = counted_resource(k) else {
                continue;
            };
            let n = match &*self.source(&group, &plural) {
                Source::Typed(c) => {
                    Self::wait_synced(c).await?;
                    c.count_in(ns)
                }
                Source::Dynamic => match self.dynamic_resource(&group, &plural).await? {
                    Some(ar) => self.count_dynamic(ns, &ar).await?,
                    // Not a resource the server serves: nothing measures it.
                    None => continue,
                },
            };
            out.insert(k.clone(), if scopes.is_empty() { count(n) } else { zero() });
        }
        Ok(out)
    }

    /// The served, namespaced, listable resource (group, plural), found by discovery; the
    /// first time, a watch starts that recalculates quotas when such objects are deleted.
    async fn dynamic_resource(
        self: &Arc<Self>,
        group: &str,
        plural: &str,
    ) -> anyhow::Result<Option<ApiResource>> {
        let key = (group.to_string(), plural.to_string());
        if let Some(ar) = self.dynamic.lock().get(&key) {
            return Ok(Some(ar.clone()));
        }
        let g = match kube::discovery::group(&self.client, group).await {
            Ok(g) => g,
            Err(kube::Error::Discovery(_)) => return Ok(None),
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e).context(format!("discovering API group {group:?}")),
        };
        let found = g.recommended_resources().into_iter().find(|(ar, caps)| {
            ar.plural == plural
                && caps.scope == kube::discovery::Scope::Namespaced
                && caps.supports_operation(kube::discovery::verbs::LIST)
        });
        let Some((ar, caps)) = found else {
            return Ok(None);
        };
        if self.dynamic.lock().insert(key, ar.clone()).is_none()
            && caps.supports_operation(kube::discovery::verbs::WATCH)
        {
            tokio::spawn(watch_deletions(
                self.client.clone(),
                ar.clone(),
                self.replenish.clone(),
                object_count_name(group, plural),
            ));
        }
        Ok(Some(ar))
    }

    /// Count the objects of a resource without a typed informer by listing them.
    async fn count_dynamic(&self, ns: &str, ar: &ApiResource) -> anyhow::Result<usize> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, ar);
        let mut n = 0;
        let mut lp = ListParams::default().limit(500);
        loop {
            let list = api
                .list(&lp)
                .await
                .with_context(|| format!("listing {} in {ns}", ar.plural))?;
            n += list.items.len();
            match list.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => lp = lp.continue_token(&c),
                None => break,
            }
        }
        Ok(n)
    }
}

/// Watch a resource counted without an informer and recalculate the quotas counting it when
/// one of its objects is deleted.
async fn watch_deletions(client: Client, ar: ApiResource, replenish: Arc<Replenish>, name: String) {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    use kube::runtime::WatchStreamExt;
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let stream = watcher::watcher(api, watcher::Config::default().any_semantic()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Delete(o)) => {
                let ns = o.metadata.namespace.clone().unwrap_or_default();
                replenish.namespace(&ns, |r| r == name);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(resource = %ar.plural, error = %e, "quota watch failed; retrying")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn q(s: &str) -> Quantity {
        quantity::parse(s).unwrap()
    }

    fn shown(l: &ResourceList) -> BTreeMap<String, String> {
        l.iter().map(|(k, v)| (k.clone(), v.canonical())).collect()
    }

    #[test]
    fn pod_usage_adds_sidecars_takes_init_max_and_overhead() {
        let p = pod(json!({"spec": {
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}},
            ],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}, "limits": {"cpu": "1"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m"}}},
            ],
            "overhead": {"cpu": "10m"},
        }}));
        let u = shown(&pod_usage(&p, SystemTime::now()));
        assert_eq!(u["pods"], "1");
        assert_eq!(u["count/pods"], "1");
        assert_eq!(u["requests.cpu"], "2110m");
        assert_eq!(u["cpu"], "2110m");
        assert_eq!(u["requests.memory"], "1Gi");
        assert_eq!(u["limits.cpu"], "1010m");
        assert_eq!(u["limits.memory"], "1Gi");
        assert!(!u.contains_key("limits.ephemeral-storage"));
    }

    #[test]
    fn finished_and_long_deleted_pods_only_count_as_objects() {
        let done = pod(json!({
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Succeeded"},
        }));
        let u = shown(&pod_usage(&done, SystemTime::now()));
        assert_eq!(u.len(), 1);
        assert_eq!(u["count/pods"], "1");
        let deleted = pod(json!({
            "metadata": {"deletionTimestamp": "2020-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30},
            "spec": {"containers": [{"name": "a"}]},
        }));
        assert!(!pod_is_charged(&deleted, SystemTime::now()));
        let fresh = pod(json!({
            "metadata": {"deletionTimestamp": "2999-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30},
            "spec": {"containers": [{"name": "a"}]},
        }));
        assert!(pod_is_charged(&fresh, SystemTime::now()));
    }

    #[test]
    fn scopes_select_pods() {
        let be = pod(json!({"spec": {"containers": [{"name": "a"}]}}));
        let burst = pod(json!({"spec": {
            "containers": [{"name": "a", "resources": {"requests": {"memory": "1Mi"}}}],
            "activeDeadlineSeconds": 10,
            "priorityClassName": "high",
        }}));
        let s = |name: &str, op: &str, values: &[&str]| Scope {
            name: name.into(),
            op: op.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        assert!(pod_matches_scope(&s("BestEffort", "Exists", &[]), &be));
        assert!(!pod_matches_scope(&s("BestEffort", "Exists", &[]), &burst));
        assert!(pod_matches_scope(
            &s("NotBestEffort", "Exists", &[]),
            &burst
        ));
        assert!(pod_matches_scope(&s("Terminating", "Exists", &[]), &burst));
        assert!(pod_matches_scope(&s("NotTerminating", "Exists", &[]), &be));
        assert!(pod_matches_scope(
            &s("PriorityClass", "In", &["high"]),
            &burst
        ));
        assert!(!pod_matches_scope(
            &s("PriorityClass", "In", &["high"]),
            &be
        ));
        assert!(pod_matches_scope(
            &s("PriorityClass", "NotIn", &["high"]),
            &be
        ));
        assert!(pod_matches_scope(
            &s("PriorityClass", "DoesNotExist", &[]),
            &be
        ));
        let quota: ResourceQuota = serde_json::from_value(json!({
            "spec": {"scopes": ["BestEffort"], "scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["low"]}
            ]}}
        }))
        .unwrap();
        let scopes = scopes_of(&quota);
        assert_eq!(scopes.len(), 2);
        assert_eq!(scopes[1].values, vec!["low".to_string()]);
    }

    #[test]
    fn services_and_claims() {
        let svc: Service = serde_json::from_value(json!({"spec": {
            "type": "LoadBalancer",
            "allocateLoadBalancerNodePorts": false,
            "ports": [{"port": 80, "nodePort": 30080}, {"port": 81}],
        }}))
        .unwrap();
        let u = shown(&service_usage(&svc));
        assert_eq!(u["services.loadbalancers"], "1");
        assert_eq!(u["services.nodeports"], "1");
        assert_eq!(u["services"], "1");
        let np: Service = serde_json::from_value(json!({"spec": {
            "type": "NodePort", "ports": [{"port": 80}, {"port": 81}],
        }}))
        .unwrap();
        assert_eq!(shown(&service_usage(&np))["services.nodeports"], "2");
        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({"spec": {
            "storageClassName": "fast",
            "resources": {"requests": {"storage": "1Gi"}},
        }, "status": {"allocatedResources": {"storage": "2Gi"}}}))
        .unwrap();
        let u = shown(&claim_usage(&pvc));
        assert_eq!(u["requests.storage"], "2Gi");
        assert_eq!(
            u["fast.storageclass.storage.k8s.io/requests.storage"],
            "2Gi"
        );
        assert_eq!(
            u["fast.storageclass.storage.k8s.io/persistentvolumeclaims"],
            "1"
        );
    }

    #[test]
    fn quota_resources_map_to_evaluators() {
        assert_eq!(
            counted_resource("configmaps"),
            Some(("".into(), "configmaps".into()))
        );
        assert_eq!(
            counted_resource("count/deployments.apps"),
            Some(("apps".into(), "deployments".into()))
        );
        assert_eq!(
            counted_resource("count/widgets.example.com"),
            Some(("example.com".into(), "widgets".into()))
        );
        assert_eq!(counted_resource("count/pods"), None);
        assert_eq!(counted_resource("pods"), None);
        assert_eq!(counted_resource("requests.storage"), None);
        assert_eq!(counted_resource("count/events"), None);
        assert_eq!(counted_resource("deployments"), None);
        assert!(is_pod_resource("requests.example.com/gpu"));
        assert!(!is_pod_resource("requests.kubernetes.io/foo"));
        assert!(is_claim_resource(
            "gold.storageclass.storage.k8s.io/requests.storage"
        ));
    }

    #[test]
    fn used_keeps_unmeasured_values_and_follows_the_hard_limits() {
        let hard: ResourceList = [("pods", "10"), ("configmaps", "5"), ("foo", "1")]
            .iter()
            .map(|(k, v)| (k.to_string(), q(v)))
            .collect();
        let old: ResourceList = [("pods", "3"), ("foo", "1"), ("secrets", "2")]
            .iter()
            .map(|(k, v)| (k.to_string(), q(v)))
            .collect();
        let measured: ResourceList = [("pods", "2"), ("configmaps", "0")]
            .iter()
            .map(|(k, v)| (k.to_string(), q(v)))
            .collect();
        let used = shown(&next_used(&hard, &old, &measured));
        assert_eq!(
            used,
            BTreeMap::from([
                ("configmaps".to_string(), "0".to_string()),
                ("foo".to_string(), "1".to_string()),
                ("pods".to_string(), "2".to_string()),
            ])
        );
        assert!(same_list(
            &[("cpu".to_string(), q("1"))].into(),
            &[("cpu".to_string(), q("1000m"))].into()
        ));
        assert!(!same_list(&hard, &old));
    }

    #[test]
    fn sums_give_zero_to_unused_resources() {
        let pods = [
            pod(
                json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}]}}),
            ),
            pod(
                json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "200m"}}}]}}),
            ),
        ];
        let keys = vec![
            "pods".to_string(),
            "requests.cpu".to_string(),
            "requests.memory".to_string(),
        ];
        let u = shown(&sum_usage(
            pods.iter(),
            &keys,
            |_| true,
            |p| pod_usage(p, SystemTime::now()),
        ));
        assert_eq!(u["pods"], "2");
        assert_eq!(u["requests.cpu"], "300m");
        assert_eq!(u["requests.memory"], "0");
    }
}
