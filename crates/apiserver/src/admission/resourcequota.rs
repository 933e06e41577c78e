//! ResourceQuota, as Kubernetes' `apiserver/pkg/admission/plugin/resourcequota` with the core
//! quota evaluators of `pkg/quota/v1/evaluator/core`: a write that adds usage of a resource
//! some quota of its namespace tracks is rejected when it would push usage past the quota's
//! hard limit; otherwise the usage is charged to the quota's `status.used` at once, by a
//! compare-and-swap of the quota's status (so concurrent writes cannot both use the last
//! unit). Releasing usage on delete, and recalculating it, is the quota controller's job; it
//! computes usage with [`usage_of`].
//!
//! Two deliberate differences from Kubernetes, both for quotas the controller has not synced
//! yet: the hard limits are `spec.hard` while `status.hard` is unset (Kubernetes ignores such a
//! quota), and a resource missing from `status.used` is counted from the cache (Kubernetes
//! rejects with "status unknown for quota").

use std::time::SystemTime;

use async_trait::async_trait;
use capstan_api::validation::quantity::Quantity;
use serde_json::{Map, Value};

use super::builtin::{
    add_into, forbidden, forbidden_named, items, pod_limits, pod_requests, qadd, qsub,
    resource_list, resource_list_json, str_at, target_name, zero, ResourceList,
};
use super::{Attributes, Operation, Plugin};
use crate::error::{ApiError, ApiResult};
use crate::objects::Objects;
use capstan_api::meta::At as _;

/// Suffix of per-storage-class claim resources (`<class>.storageclass.storage.k8s.io/requests.storage`).
const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// Resources that are never quota'd (virtual resources, and events).
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

/// Core resources whose bare plural is also an object-count quota resource.
const LEGACY_COUNTS: &[&str] = &[
    "configmaps",
    "resourcequotas",
    "replicationcontrollers",
    "secrets",
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

/// Quota resources that oblige every container to state its request or limit.
const POD_VALIDATION_SET: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

const SERVICE_RESOURCES: &[&str] = &[
    "count/services",
    "services",
    "services.nodeports",
    "services.loadbalancers",
];

/// The object-count quota resource of a group/resource (`count/deployments.apps`).
pub fn object_count_name(group: &str, plural: &str) -> String {
    if group.is_empty() {
        format!("count/{plural}")
    } else {
        format!("count/{plural}.{group}")
    }
}

/// How usage of one kind of object is measured (Kubernetes' quota evaluators).
#[derive(Debug, Clone, PartialEq)]
enum Evaluator {
    Pods,
    Services,
    Claims,
    /// Object count: the resource names one object counts 1 toward.
    Count(Vec<String>),
}

impl Evaluator {
    fn for_resource(group: &str, plural: &str) -> Evaluator {
        match (group, plural) {
            ("", "pods") => Evaluator::Pods,
            ("", "services") => Evaluator::Services,
            ("", "persistentvolumeclaims") => Evaluator::Claims,
            _ => {
                let mut names = vec![object_count_name(group, plural)];
                if group.is_empty() && LEGACY_COUNTS.contains(&plural) {
                    names.push(plural.to_string());
                }
                Evaluator::Count(names)
            }
        }
    }

    /// Whether the operation can change usage.
    fn handles(&self, op: Operation, obj: &Value, old: Option<&Value>) -> bool {
        match self {
            Evaluator::Pods => {
                op == Operation::Create
                    || (op == Operation::Update
                        && old.is_some_and(|o| is_terminating(o) != is_terminating(obj)))
            }
            Evaluator::Services | Evaluator::Claims => {
                matches!(op, Operation::Create | Operation::Update)
            }
            Evaluator::Count(_) => op == Operation::Create,
        }
    }

    /// The quota resources (of `hard`) this evaluator measures.
    fn matching_resources(&self, hard: &[String]) -> Vec<String> {
        hard.iter()
            .filter(|r| match self {
                Evaluator::Pods => {
                    POD_RESOURCES.contains(&r.as_str())
                        || r.starts_with("hugepages-")
                        || r.starts_with("requests.hugepages-")
                        || is_extended_quota_name(r)
                }
                Evaluator::Services => SERVICE_RESOURCES.contains(&r.as_str()),
                Evaluator::Claims => {
                    let base = ["persistentvolumeclaims", "requests.storage"];
                    r.as_str() == "count/persistentvolumeclaims"
                        || base.contains(&r.as_str())
                        || base
                            .iter()
                            .any(|b| r.ends_with(&format!("{STORAGE_CLASS_SUFFIX}{b}")))
                }
                Evaluator::Count(names) => names.contains(r),
            })
            .cloned()
            .collect()
    }

    /// Whether `obj` falls in every scope of the quota. Only pods have scopes; a scoped quota
    /// never matches other objects.
    fn matches_scopes(&self, quota: &Value, obj: &Value) -> bool {
        let scopes = scope_selectors(quota);
        match self {
            Evaluator::Pods => scopes.iter().all(|s| pod_matches_scope(s, obj)),
            _ => scopes.is_empty(),
        }
    }

    /// Pods must state a request or limit for every cpu/memory resource a quota tracks.
    fn constraints(&self, required: &[String], obj: &Value) -> Result<(), String> {
        if *self != Evaluator::Pods {
            return Ok(());
        }
        let required: Vec<&str> = required
            .iter()
            .map(String::as_str)
            .filter(|r| POD_VALIDATION_SET.contains(r))
            .collect();
        let mut missing: std::collections::BTreeMap<&str, std::collections::BTreeSet<String>> =
            Default::default();
        for key in ["/spec/containers", "/spec/initContainers"] {
            for c in items(obj, key) {
                let usage = compute_usage(
                    &resource_list(c.at("/resources/requests")),
                    &resource_list(c.at("/resources/limits")),
                );
                for r in &required {
                    if !usage.contains_key(*r) {
                        missing
                            .entry(r)
                            .or_default()
                            .insert(str_at(c, "/name").to_string());
                    }
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let parts: Vec<String> = missing
            .iter()
            .map(|(r, names)| {
                format!(
                    "{r} for: {}",
                    names.iter().cloned().collect::<Vec<_>>().join(",")
                )
            })
            .collect();
        Err(format!("must specify {}", parts.join("; ")))
    }

    /// The usage one object accounts for.
    fn usage(&self, obj: &Value) -> ResourceList {
        match self {
            Evaluator::Pods => pod_usage(obj),
            Evaluator::Services => service_usage(obj),
            Evaluator::Claims => claim_usage(obj),
            Evaluator::Count(names) => names.iter().map(|n| (n.clone(), one())).collect(),
        }
    }
}

fn one() -> Quantity {
    Quantity {
        nanos: 1_000_000_000,
        ..zero()
    }
}

fn count(n: usize) -> Quantity {
    Quantity {
        nanos: n as i128 * 1_000_000_000,
        ..zero()
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

/// One scope requirement of a quota: scope name, operator, values.
#[derive(Debug, Clone)]
struct Scope {
    name: String,
    op: String,
    values: Vec<String>,
}

/// `spec.scopes` (each an Exists requirement) and `spec.scopeSelector.matchExpressions`.
fn scope_selectors(quota: &Value) -> Vec<Scope> {
    let mut out: Vec<Scope> = items(quota, "/spec/scopes")
        .iter()
        .filter_map(Value::as_str)
        .map(|s| Scope {
            name: s.to_string(),
            op: "Exists".into(),
            values: Vec::new(),
        })
        .collect();
    for e in items(quota, "/spec/scopeSelector/matchExpressions") {
        out.push(Scope {
            name: str_at(e, "/scopeName").to_string(),
            op: str_at(e, "/operator").to_string(),
            values: items(e, "/values")
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        });
    }
    out
}

fn is_terminating(pod: &Value) -> bool {
    pod.at("/spec/activeDeadlineSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|s| s >= 0)
}

/// QoS BestEffort: no container states a cpu or memory request or limit.
fn is_best_effort(pod: &Value) -> bool {
    if let Some(q) = pod.at("/status/qosClass").and_then(Value::as_str) {
        if !q.is_empty() {
            return q == "BestEffort";
        }
    }
    !["/spec/containers", "/spec/initContainers"]
        .iter()
        .flat_map(|k| items(pod, k))
        .any(|c| {
            ["requests", "limits"].iter().any(|f| {
                let l = resource_list(c.at(&format!("/resources/{f}")));
                ["cpu", "memory"]
                    .iter()
                    .any(|r| l.get(*r).is_some_and(|q| q.nanos != 0))
            })
        })
}

fn uses_cross_namespace_affinity(pod: &Value) -> bool {
    let cross = |t: &Value| {
        !items(t, "/namespaces").is_empty()
            || t.get("namespaceSelector").is_some_and(|s| !s.is_null())
    };
    ["podAffinity", "podAntiAffinity"].iter().any(|k| {
        let base = format!("/spec/affinity/{k}");
        items(
            pod,
            &format!("{base}/requiredDuringSchedulingIgnoredDuringExecution"),
        )
        .iter()
        .any(cross)
            || items(
                pod,
                &format!("{base}/preferredDuringSchedulingIgnoredDuringExecution"),
            )
            .iter()
            .any(|w| w.get("podAffinityTerm").is_some_and(cross))
    })
}

fn pod_matches_scope(s: &Scope, pod: &Value) -> bool {
    match s.name.as_str() {
        "Terminating" => is_terminating(pod),
        "NotTerminating" => !is_terminating(pod),
        "BestEffort" => is_best_effort(pod),
        "NotBestEffort" => !is_best_effort(pod),
        "CrossNamespacePodAffinity" => uses_cross_namespace_affinity(pod),
        "PriorityClass" => {
            let class = str_at(pod, "/spec/priorityClassName");
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

/// Kubernetes' `QuotaV1Pod`: terminal pods, and pods whose deletion grace period has
/// passed, no longer use compute resources.
fn pod_is_charged(pod: &Value, now: SystemTime) -> bool {
    if matches!(str_at(pod, "/status/phase"), "Failed" | "Succeeded") {
        return false;
    }
    let deletion = capstan_api::meta::deletion_timestamp(pod)
        .and_then(capstan_api::table::duration::parse_rfc3339);
    let grace = pod
        .at("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64);
    if let (Some(at), Some(grace)) = (deletion, grace) {
        let now = capstan_api::table::duration::system_nanos(now);
        if now > at + grace as i128 * 1_000_000_000 {
            return false;
        }
    }
    true
}

/// Kubernetes' `podComputeUsageHelper`.
fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("pods".into(), one());
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

fn pod_usage(pod: &Value) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("count/pods".into(), one());
    if !pod_is_charged(pod, SystemTime::now()) {
        return out;
    }
    let usage = compute_usage(&pod_requests(pod, true), &pod_limits(pod, true));
    add_into(&mut out, &usage);
    out
}

fn service_usage(svc: &Value) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("count/services".into(), one());
    out.insert("services".into(), one());
    let ports = items(svc, "/spec/ports");
    let (mut node_ports, mut lbs) = (zero(), zero());
    match str_at(svc, "/spec/type") {
        "NodePort" => node_ports = count(ports.len()),
        "LoadBalancer" => {
            let allocate = svc
                .at("/spec/allocateLoadBalancerNodePorts")
                .and_then(Value::as_bool);
            node_ports = if allocate == Some(false) {
                count(
                    ports
                        .iter()
                        .filter(|p| p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) > 0)
                        .count(),
                )
            } else {
                count(ports.len())
            };
            lbs = one();
        }
        _ => {}
    }
    out.insert("services.nodeports".into(), node_ports);
    out.insert("services.loadbalancers".into(), lbs);
    out
}

fn claim_usage(pvc: &Value) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("persistentvolumeclaims".into(), one());
    out.insert("count/persistentvolumeclaims".into(), one());
    let class = super::builtin::annotation(pvc, "volume.beta.kubernetes.io/storage-class")
        .unwrap_or_else(|| str_at(pvc, "/spec/storageClassName"))
        .to_string();
    if !class.is_empty() {
        out.insert(
            format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
            one(),
        );
    }
    let requested = resource_list(pvc.at("/spec/resources/requests"))
        .get("storage")
        .copied();
    let allocated = resource_list(pvc.at("/status/allocatedResources"))
        .get("storage")
        .copied();
    let storage = match (requested, allocated) {
        (Some(r), Some(a)) if a.nanos > r.nanos => Some(a),
        (Some(r), _) => Some(r),
        (None, a) => a,
    };
    if let Some(q) = storage {
        out.insert("requests.storage".into(), q);
        if !class.is_empty() {
            out.insert(format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"), q);
        }
    }
    out
}

/// The quota's hard limits: `status.hard` once the controller has set it, else `spec.hard`.
fn effective_hard(quota: &Value) -> ResourceList {
    let status = quota
        .at("/status/hard")
        .filter(|h| h.as_object().is_some_and(|m| !m.is_empty()));
    resource_list(status.or_else(|| quota.at("/spec/hard")))
}

fn mask(list: &ResourceList, keys: &[&String]) -> ResourceList {
    list.iter()
        .filter(|(k, _)| keys.contains(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// `resource=quantity` pairs, sorted, comma-joined (Kubernetes' `prettyPrint`).
fn pretty(list: &ResourceList) -> String {
    list.iter()
        .map(|(k, q)| format!("{k}={}", q.canonical()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The full current usage of `quota`, from the cache: every resource of its hard limits
/// (`status.hard` when set, else `spec.hard`: a controller syncing a changed `spec.hard` should
/// copy it to `status.hard` first), counting the objects of its namespace that fall in its
/// scopes. For the resource quota controller's recalculation of `status.used`.
pub fn usage_of(objects: &dyn Objects, quota: &Value) -> Map<String, Value> {
    let ns = capstan_api::meta::namespace(quota);
    let hard: Vec<String> = effective_hard(quota).into_keys().collect();
    let mut used: ResourceList = hard.iter().map(|k| (k.clone(), zero())).collect();
    let mut done: Vec<String> = Vec::new();
    for (ev, plural) in [
        (Evaluator::Pods, "pods"),
        (Evaluator::Services, "services"),
        (Evaluator::Claims, "persistentvolumeclaims"),
    ] {
        let keys = ev.matching_resources(&hard);
        if keys.is_empty() {
            continue;
        }
        let mut total = ResourceList::new();
        for obj in objects.list("", plural, ns) {
            if ev.matches_scopes(quota, &obj) {
                add_into(&mut total, &ev.usage(&obj));
            }
        }
        for k in keys {
            used.insert(k.clone(), total.get(&k).copied().unwrap_or_else(zero));
            done.push(k);
        }
    }
    let scoped = !scope_selectors(quota).is_empty();
    for k in hard.iter().filter(|k| !done.contains(k)) {
        let target = match k.strip_prefix("count/") {
            Some(rest) => Some(rest.split_once('.').unwrap_or((rest, ""))),
            None if LEGACY_COUNTS.contains(&k.as_str()) => Some((k.as_str(), "")),
            None => None,
        };
        if let (Some((plural, group)), false) = (target, scoped) {
            used.insert(k.clone(), count(objects.list(group, plural, ns).len()));
        }
    }
    resource_list_json(&used)
}

/// The ResourceQuota admission plugin.
pub struct ResourceQuota;

#[async_trait]
impl Plugin for ResourceQuota {
    fn name(&self) -> &'static str {
        "ResourceQuota"
    }

    async fn validate(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let Some(obj) = obj else { return Ok(()) };
        if !a.subresource.is_empty()
            || a.namespace.is_empty()
            || IGNORED.contains(&(a.info.group, a.info.plural))
        {
            return Ok(());
        }
        let ev = Evaluator::for_resource(a.info.group, a.info.plural);
        if !ev.handles(a.operation, obj, old) {
            return Ok(());
        }
        let quotas = a.objects.list("", "resourcequotas", a.namespace);
        let mut interesting = Vec::new();
        for q in &quotas {
            let hard: Vec<String> = effective_hard(q).into_keys().collect();
            let restricted = ev.matching_resources(&hard);
            if restricted.is_empty() || !ev.matches_scopes(q, obj) {
                continue;
            }
            if let Err(e) = ev.constraints(&restricted, obj) {
                let name = capstan_api::meta::name(q);
                return Err(forbidden(
                    a,
                    Some(obj),
                    format!("failed quota: {name}: {e}"),
                ));
            }
            interesting.push(q);
        }
        if interesting.is_empty() {
            return Ok(());
        }
        let delta = usage_delta(a, &ev, obj, old)?;
        if delta.is_empty() {
            return Ok(());
        }
        let culprit = Culprit::of(a, obj);
        let plans: Vec<Plan> = interesting
            .iter()
            .map(|q| Plan::new(a.objects, q, &delta))
            .collect();
        // Check every quota against the cache first, so a rejection charges nothing.
        for (q, plan) in interesting.iter().zip(&plans) {
            plan.charge(q).map_err(|m| culprit.error(m))?;
        }
        if a.dry_run {
            return Ok(());
        }
        // Charges in one namespace are written one at a time (Kubernetes' quota admission
        // batches them per namespace too): concurrent creates would otherwise race for the
        // same quota's resourceVersion and could exhaust their retries with a Conflict.
        let lock = namespace_lock(a.namespace);
        let _serial = lock.lock().await;
        for (i, plan) in plans.iter().enumerate() {
            if let Err(e) = plan.write(a.objects, a.namespace, &culprit).await {
                for done in &plans[..i] {
                    done.release(a.objects, a.namespace).await;
                }
                return Err(e);
            }
        }
        Ok(())
    }
}

/// The lock that serializes quota charges in `namespace`.
fn namespace_lock(namespace: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
    use std::collections::HashMap;
    use std::sync::{Arc, OnceLock};
    static LOCKS: OnceLock<parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
        OnceLock::new();
    let mut locks = LOCKS.get_or_init(Default::default).lock();
    if locks.len() > 4096 {
        // Forget locks nobody holds (namespaces come and go).
        locks.retain(|_, l| Arc::strong_count(l) > 1);
    }
    locks.entry(namespace.to_string()).or_default().clone()
}

/// The usage a write adds: the new object's, less the old one's on update, zeros dropped.
fn usage_delta(
    a: &Attributes<'_>,
    ev: &Evaluator,
    obj: &Value,
    old: Option<&Value>,
) -> ApiResult<ResourceList> {
    let mut delta = ev.usage(obj);
    let negative: Vec<&String> = delta
        .iter()
        .filter(|(_, q)| q.nanos < 0)
        .map(|(k, _)| k)
        .collect();
    if !negative.is_empty() {
        let names: Vec<&str> = negative.iter().map(|s| s.as_str()).collect();
        return Err(forbidden(
            a,
            Some(obj),
            format!(
                "quota usage is negative for resource(s): {}",
                names.join(",")
            ),
        ));
    }
    if a.operation == Operation::Update {
        if let Some(old) = old.filter(|o| !capstan_api::meta::resource_version(o).is_empty()) {
            let prev = ev.usage(old);
            delta = delta
                .into_iter()
                .map(|(k, q)| {
                    let d = prev.get(&k).map(|p| qsub(q, *p)).unwrap_or(q);
                    (k, if d.nanos > 0 { d } else { zero() })
                })
                .collect();
        }
    }
    delta.retain(|_, q| q.nanos != 0);
    Ok(delta)
}

/// Who the rejection names (the object being written).
struct Culprit {
    group: String,
    plural: String,
    name: String,
}

impl Culprit {
    fn of(a: &Attributes<'_>, obj: &Value) -> Culprit {
        Culprit {
            group: a.info.group.to_string(),
            plural: a.info.plural.to_string(),
            name: target_name(a, Some(obj)),
        }
    }

    fn error(&self, reason: String) -> ApiError {
        forbidden_named(&self.group, &self.plural, &self.name, reason)
    }
}

/// What one quota is charged.
struct Plan {
    name: String,
    /// The delta masked to the quota's resources.
    requested: ResourceList,
    /// Current usage from the cache, for resources `status.used` lacks.
    counted: Option<ResourceList>,
}

impl Plan {
    fn new(objects: &dyn Objects, quota: &Value, delta: &ResourceList) -> Plan {
        let hard = effective_hard(quota);
        let keys: Vec<&String> = hard.keys().collect();
        let requested = mask(delta, &keys);
        let used = resource_list(quota.at("/status/used"));
        let counted = requested
            .keys()
            .any(|k| !used.contains_key(k))
            .then(|| resource_list(Some(&Value::Object(usage_of(objects, quota)))));
        Plan {
            name: capstan_api::meta::name(quota).to_string(),
            requested,
            counted,
        }
    }

    /// The quota's new `status.used` with this charge, or the rejection message.
    fn charge(&self, quota: &Value) -> Result<ResourceList, String> {
        let hard = effective_hard(quota);
        let mut used = resource_list(quota.at("/status/used"));
        for k in self.requested.keys() {
            if !used.contains_key(k) {
                let counted = self.counted.as_ref().and_then(|c| c.get(k)).copied();
                used.insert(k.clone(), counted.unwrap_or_else(zero));
            }
        }
        let mut next = used.clone();
        let mut exceeded = Vec::new();
        for (k, q) in &self.requested {
            let total = qadd(used[k], *q);
            if hard.get(k).is_some_and(|h| total.nanos > h.nanos) {
                exceeded.push(k);
            }
            next.insert(k.clone(), total);
        }
        if !exceeded.is_empty() {
            return Err(format!(
                "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                self.name,
                pretty(&mask(&self.requested, &exceeded)),
                pretty(&mask(&used, &exceeded)),
                pretty(&mask(&hard, &exceeded)),
            ));
        }
        Ok(next)
    }

    /// Charge the quota by compare-and-swap of its status; a quota deleted meanwhile is skipped.
    async fn write(&self, objects: &dyn Objects, ns: &str, culprit: &Culprit) -> ApiResult<()> {
        let change = |cur: &Value| -> ApiResult<Option<Value>> {
            let used = self.charge(cur).map_err(|m| culprit.error(m))?;
            Ok(Some(with_used(cur, &used)))
        };
        match objects
            .update("", "resourcequotas", ns, &self.name, "status", &change)
            .await
        {
            Err(e) if e.code == 404 => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// Undo a charge (best effort) when a later quota rejects the write.
    async fn release(&self, objects: &dyn Objects, ns: &str) {
        let change = |cur: &Value| -> ApiResult<Option<Value>> {
            let mut used = resource_list(cur.at("/status/used"));
            for (k, q) in &self.requested {
                if let Some(u) = used.get_mut(k) {
                    let left = qsub(*u, *q);
                    *u = if left.nanos > 0 { left } else { zero() };
                }
            }
            Ok(Some(with_used(cur, &used)))
        };
        if let Err(e) = objects
            .update("", "resourcequotas", ns, &self.name, "status", &change)
            .await
        {
            tracing::warn!(quota = %self.name, error = %e.message, "cannot release quota charge");
        }
    }
}

/// `quota` with `status.used` replaced (and `status.hard` filled from the spec if unset).
fn with_used(quota: &Value, used: &ResourceList) -> Value {
    let mut next = quota.clone();
    let hard = resource_list_json(&effective_hard(quota));
    let Some(root) = next.as_object_mut() else {
        return next;
    };
    let status = root
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    let status = status.as_object_mut().expect("object");
    if status
        .get("hard")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty)
    {
        status.insert("hard".into(), Value::Object(hard));
    }
    status.insert("used".into(), Value::Object(resource_list_json(used)));
    next
}
