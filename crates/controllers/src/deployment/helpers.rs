//! The pure part of the Deployment controller (Kubernetes' pkg/controller/deployment/util):
//! the pod-template hash, revision and replica annotations, rolling-update arithmetic
//! (maxSurge/maxUnavailable fenceposts, proportional scaling), orderings of replica sets,
//! conditions and the computed status.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentSpec, DeploymentStatus, ReplicaSet,
    ReplicaSetCondition,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// The revision of a replica set (and of its deployment), counting rollouts.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// The earlier revisions a replica set served (it is reused by a rollback).
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// The deployment's replicas when it last sized this replica set.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// The deployment's replicas plus maxSurge when it last sized this replica set.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// The revision an extensions/v1beta1 `rollbackTo` asked for (round-tripped as an annotation).
pub const ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
/// The label that keeps each template's replica set (and pods) apart.
pub const HASH_LABEL: &str = "pod-template-hash";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The revision-history annotation is kept under this many characters.
pub const MAX_REVISION_HISTORY_CHARS: usize = 2000;

pub const ROLLING_UPDATE: &str = "RollingUpdate";
pub const RECREATE: &str = "Recreate";

pub const PROGRESSING: &str = "Progressing";
pub const AVAILABLE: &str = "Available";
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

// Condition reasons (Progressing, then Available).
pub const REPLICA_SET_UPDATED: &str = "ReplicaSetUpdated";
pub const FAILED_RS_CREATE: &str = "ReplicaSetCreateError";
pub const NEW_REPLICA_SET: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
pub const PAUSED: &str = "DeploymentPaused";
pub const RESUMED: &str = "DeploymentResumed";
pub const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
pub const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

// Rollback event reasons.
pub const ROLLBACK_NOT_FOUND: &str = "DeploymentRollbackRevisionNotFound";
pub const ROLLBACK_UNCHANGED: &str = "DeploymentRollbackTemplateUnchanged";
pub const ROLLBACK_DONE: &str = "DeploymentRollback";

// ---- accessors (defaults as the API server applies them) ----

pub fn spec(d: &Deployment) -> Option<&DeploymentSpec> {
    d.spec.as_ref()
}

/// `spec.replicas` (defaulted to 1).
pub fn replicas(d: &Deployment) -> i32 {
    spec(d).and_then(|s| s.replicas).unwrap_or(1)
}

pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn set_rs_replicas(rs: &mut ReplicaSet, n: i32) {
    rs.spec.get_or_insert_with(Default::default).replicas = Some(n);
}

pub fn rs_status_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map(|s| s.replicas).unwrap_or(0)
}

pub fn rs_ready(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

pub fn rs_available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

pub fn strategy_type(d: &Deployment) -> &str {
    spec(d)
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .filter(|t| !t.is_empty())
        .unwrap_or(ROLLING_UPDATE)
}

pub fn is_rolling(d: &Deployment) -> bool {
    strategy_type(d) == ROLLING_UPDATE
}

pub fn is_paused(d: &Deployment) -> bool {
    spec(d).and_then(|s| s.paused).unwrap_or(false)
}

pub fn min_ready_seconds(d: &Deployment) -> i32 {
    spec(d).and_then(|s| s.min_ready_seconds).unwrap_or(0)
}

/// A progress deadline is set (and is not "never": MaxInt32).
pub fn progress_deadline(d: &Deployment) -> Option<i32> {
    spec(d)
        .and_then(|s| s.progress_deadline_seconds)
        .filter(|s| *s != i32::MAX)
}

/// How many old replica sets to keep (None: all).
pub fn revision_history_limit(d: &Deployment) -> Option<i32> {
    spec(d)
        .and_then(|s| s.revision_history_limit)
        .filter(|l| *l != i32::MAX)
}

pub fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Seconds precision, as the API serializes times (so computed and read-back statuses compare).
pub fn now_seconds() -> Timestamp {
    let now = Timestamp::now();
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

// ---- maxSurge / maxUnavailable ----

/// An int-or-percent scaled against `total`; percentages round up or down.
pub fn scaled_value(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let Some(p) = s.strip_suffix('%') else {
                return Err(format!("invalid type: string is not a percentage: {s:?}"));
            };
            let p: i64 = p
                .parse()
                .map_err(|e| format!("invalid value for IntOrString: invalid value {s:?}: {e}"))?;
            let x = p as f64 * f64::from(total) / 100.0;
            let x = if round_up { x.ceil() } else { x.floor() };
            Ok(x.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32)
        }
    }
}

/// maxSurge and maxUnavailable resolved together: both zero means one may be unavailable.
pub fn resolve_fenceposts(
    surge: Option<&IntOrString>,
    unavailable: Option<&IntOrString>,
    desired: i32,
) -> Result<(i32, i32), String> {
    let zero = IntOrString::Int(0);
    let s = scaled_value(surge.unwrap_or(&zero), desired, true)?;
    let mut u = scaled_value(unavailable.unwrap_or(&zero), desired, false)?;
    if s == 0 && u == 0 {
        u = 1;
    }
    Ok((s, u))
}

fn rolling_params(d: &Deployment) -> (Option<&IntOrString>, Option<&IntOrString>) {
    let ru = spec(d)
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    (
        ru.and_then(|r| r.max_surge.as_ref()),
        ru.and_then(|r| r.max_unavailable.as_ref()),
    )
}

/// How many pods above `replicas` a rolling deployment may run.
pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling(d) {
        return 0;
    }
    let (s, u) = rolling_params(d);
    resolve_fenceposts(s, u, replicas(d))
        .map(|(s, _)| s)
        .unwrap_or(0)
}

/// How many of `replicas` a rolling deployment may have unavailable.
pub fn max_unavailable(d: &Deployment) -> i32 {
    if !is_rolling(d) || replicas(d) == 0 {
        return 0;
    }
    let (s, u) = rolling_params(d);
    let u = resolve_fenceposts(s, u, replicas(d))
        .map(|(_, u)| u)
        .unwrap_or(0);
    u.min(replicas(d))
}

/// The size the new replica set should grow to now.
pub fn new_rs_new_replicas(
    d: &Deployment,
    all: &[&ReplicaSet],
    new_rs: &ReplicaSet,
) -> Result<i32, String> {
    match strategy_type(d) {
        ROLLING_UPDATE => {
            let (s, _) = rolling_params(d);
            let zero = IntOrString::Int(0);
            let surge = scaled_value(s.unwrap_or(&zero), replicas(d), true)?;
            let current: i32 = all.iter().map(|rs| rs_replicas(rs)).sum();
            let max_total = replicas(d) + surge;
            if current >= max_total {
                return Ok(rs_replicas(new_rs));
            }
            let up = (max_total - current).min(replicas(d) - rs_replicas(new_rs));
            Ok(rs_replicas(new_rs) + up)
        }
        RECREATE => Ok(replicas(d)),
        other => Err(format!("deployment type {other} isn't supported")),
    }
}

/// The new replica set owns all of the deployment's replicas, and they are all available.
pub fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let Some(rs) = rs else { return false };
    let Some(desired) = int_annotation(rs, DESIRED_REPLICAS) else {
        return false;
    };
    rs_replicas(rs) == replicas(d) && desired == replicas(d) && rs_available(rs) == replicas(d)
}

pub fn int_annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    annotation(&rs.metadata, key)?.parse().ok()
}

/// The share of `to_add` (negative: to remove) the replica set `rs` gets, given `added` so far.
pub fn proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if rs_replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

/// How much `rs` should change for the deployment's new size, in proportion to the size the
/// deployment had (max-replicas annotation) when `rs` was last sized.
fn fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    if replicas(d) == 0 {
        return -rs_replicas(rs);
    }
    let deployment_replicas = i64::from(replicas(d)) + i64::from(max_surge(d));
    let annotated = int_annotation(rs, MAX_REPLICAS)
        .unwrap_or_else(|| d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0));
    if annotated <= 0 {
        return 0;
    }
    let size = (i64::from(rs_replicas(rs)) * deployment_replicas) as f64 / f64::from(annotated);
    // Go's math.Round: halves away from zero (as f64::round).
    let size = size.round().clamp(0.0, f64::from(i32::MAX)) as i32;
    size - rs_replicas(rs)
}

/// The sizes proportional scaling gives `active` (sorted by the caller: larger first, newer
/// first when scaling up, older first when scaling down) to change their total by `to_add`.
pub fn proportional_sizes(d: &Deployment, active: &[&ReplicaSet], to_add: i32) -> Vec<i32> {
    let mut added = 0;
    let mut sizes: Vec<i32> = active
        .iter()
        .map(|rs| {
            if to_add == 0 {
                return rs_replicas(rs);
            }
            let p = proportion(rs, d, to_add, added);
            added += p;
            rs_replicas(rs) + p
        })
        .collect();
    if to_add != 0 {
        if let Some(first) = sizes.first_mut() {
            *first = (*first + to_add - added).max(0);
        }
    }
    sizes
}

// ---- orderings ----

fn created(rs: &ReplicaSet) -> Option<Timestamp> {
    rs.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// Older first; the name breaks ties.
pub fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    created(a)
        .cmp(&created(b))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Larger first; older first among equals (scaling down).
pub fn by_size_older(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    rs_replicas(b)
        .cmp(&rs_replicas(a))
        .then_with(|| by_creation(a, b))
}

/// Larger first; newer first among equals (scaling up).
pub fn by_size_newer(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    rs_replicas(b)
        .cmp(&rs_replicas(a))
        .then_with(|| by_creation(b, a))
}

/// Lower revision first; unparsable or equal revisions by age.
pub fn by_revision(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    match (revision(a), revision(b)) {
        (Ok(x), Ok(y)) if x != y => x.cmp(&y),
        _ => by_creation(a, b),
    }
}

// ---- revisions and annotations ----

/// The revision annotation (0 when absent; an error when it is not a number).
pub fn revision(rs: &ReplicaSet) -> Result<i64, std::num::ParseIntError> {
    match annotation(&rs.metadata, REVISION) {
        None => Ok(0),
        Some(v) => v.parse(),
    }
}

pub fn max_revision<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    rss.into_iter()
        .filter_map(|rs| revision(rs).ok())
        .max()
        .unwrap_or(0)
        .max(0)
}

/// The second highest revision (the one before the current).
pub fn last_revision<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    let (mut max, mut second) = (0i64, 0i64);
    for v in rss.into_iter().filter_map(|rs| revision(rs).ok()) {
        if v >= max {
            second = max;
            max = v;
        } else if v > second {
            second = v;
        }
    }
    second
}

fn skip_copy(key: &str) -> bool {
    matches!(
        key,
        LAST_APPLIED | REVISION | REVISION_HISTORY | DESIRED_REPLICAS | MAX_REPLICAS | ROLLBACK_TO
    )
}

/// Copy the deployment's annotations (but the controller's own and kubectl's
/// last-applied) to the replica set; true if any changed.
pub fn copy_annotations_to_rs(d: &Deployment, rs: &mut ReplicaSet) -> bool {
    let mut changed = false;
    let target = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if skip_copy(k) || target.get(k) == Some(v) {
            continue;
        }
        target.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// Replace the deployment's annotations by the replica set's (a rollback to it), keeping the
/// ones that are never copied.
pub fn set_annotations_from_rs(d: &mut Deployment, rs: &ReplicaSet) {
    let mut kept: BTreeMap<String, String> = d
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| skip_copy(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in rs.metadata.annotations.iter().flatten() {
        if !skip_copy(k) {
            kept.insert(k.clone(), v.clone());
        }
    }
    d.metadata.annotations = Some(kept);
}

/// Set the desired-replicas and max-replicas annotations; true if either changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let a = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let v = v.to_string();
        if a.get(k) != Some(&v) {
            a.insert(k.to_string(), v);
            changed = true;
        }
    }
    changed
}

pub fn replicas_annotations_need_update(rs: &ReplicaSet, desired: i32, max: i32) -> bool {
    annotation(&rs.metadata, DESIRED_REPLICAS) != Some(desired.to_string().as_str())
        || annotation(&rs.metadata, MAX_REPLICAS) != Some(max.to_string().as_str())
}

/// Bring the new replica set's annotations up to date: the deployment's annotations, the
/// revision `new_revision` (if higher; the revision it had goes to the revision history) and,
/// for a replica set about to be created, the replica annotations. True if anything changed.
pub fn set_new_rs_annotations(
    d: &Deployment,
    rs: &mut ReplicaSet,
    new_revision: i64,
    exists: bool,
) -> bool {
    let mut changed = copy_annotations_to_rs(d, rs);
    let a = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let old = a.get(REVISION).cloned();
    let old_int = match old.as_deref() {
        None | Some("") => 0,
        Some(v) => match v.parse::<i64>() {
            Ok(n) => n,
            Err(_) => return false,
        },
    };
    if old_int < new_revision {
        a.insert(REVISION.into(), new_revision.to_string());
        changed = true;
        if let Some(old) = old {
            let history = a.get(REVISION_HISTORY).cloned().unwrap_or_default();
            if history.is_empty() {
                a.insert(REVISION_HISTORY.into(), old);
            } else {
                let mut parts: Vec<&str> = history.split(',').collect();
                let mut total = history.len() + old.len() + 1;
                let mut start = 0;
                while total > MAX_REVISION_HISTORY_CHARS && start < parts.len() {
                    total -= parts[start].len() + 1;
                    start += 1;
                }
                if total <= MAX_REVISION_HISTORY_CHARS {
                    parts.drain(..start);
                    parts.push(&old);
                    let joined = parts.join(",");
                    a.insert(REVISION_HISTORY.into(), joined);
                }
            }
        }
    }
    if !exists && set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)) {
        changed = true;
    }
    changed
}

/// Set the deployment's revision annotation; true if it changed.
pub fn set_deployment_revision(d: &mut Deployment, revision: &str) -> bool {
    let a = d.metadata.annotations.get_or_insert_with(BTreeMap::new);
    if a.get(REVISION).map(String::as_str) == Some(revision) {
        return false;
    }
    a.insert(REVISION.into(), revision.to_string());
    true
}

// ---- templates ----

/// Drop nulls, empty lists and empty objects, so that templates compare as Kubernetes'
/// semantic equality does (absent and empty are the same).
fn normalize(v: Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Array(a) => {
            let a: Vec<Value> = a
                .into_iter()
                .map(|x| normalize(x).unwrap_or(Value::Null))
                .collect();
            (!a.is_empty()).then_some(Value::Array(a))
        }
        Value::Object(m) => {
            let m: serde_json::Map<String, Value> = m
                .into_iter()
                .filter_map(|(k, v)| normalize(v).map(|v| (k, v)))
                .collect();
            (!m.is_empty()).then_some(Value::Object(m))
        }
        other => Some(other),
    }
}

/// The template as a comparable value, without the pod-template-hash label.
fn template_value(t: &PodTemplateSpec) -> Value {
    let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
    if let Some(labels) = v
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(HASH_LABEL);
    }
    normalize(v).unwrap_or(Value::Null)
}

/// Two templates are the same but for the pod-template-hash label.
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    template_value(a) == template_value(b)
}

/// JSON with object keys in sorted order, whatever map the JSON library uses.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn fnv32a(h: u32, bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(h, |h, b| (h ^ u32::from(*b)).wrapping_mul(16_777_619))
}

/// Kubernetes' rand.SafeEncodeString: each character mapped onto consonants and digits that
/// cannot spell words.
fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// The pod-template-hash of a template (FNV-32a of its canonical form, then of the collision
/// count), rendered as Kubernetes renders it.
pub fn compute_hash(t: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut s = String::new();
    canonical(&template_value(t), &mut s);
    let mut h = fnv32a(2_166_136_261, s.as_bytes());
    if let Some(c) = collision_count {
        h = fnv32a(h, &(c as u32).to_le_bytes());
    }
    safe_encode(&h.to_string())
}

// ---- conditions ----

pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: impl Into<String>,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

pub fn get_condition<'a>(s: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    s.conditions.iter().flatten().find(|c| c.type_ == type_)
}

pub fn cond_reason(c: &DeploymentCondition) -> &str {
    c.reason.as_deref().unwrap_or("")
}

/// Set a condition: nothing changes if one of the type has the same status and reason; the
/// transition time is kept while the status stays. The condition goes last.
pub fn set_condition(s: &mut DeploymentStatus, mut c: DeploymentCondition) {
    if let Some(cur) = get_condition(s, &c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    remove_condition(s, &c.type_);
    s.conditions.get_or_insert_with(Vec::new).push(c);
}

pub fn remove_condition(s: &mut DeploymentStatus, type_: &str) {
    if let Some(cs) = s.conditions.as_mut() {
        cs.retain(|c| c.type_ != type_);
        if cs.is_empty() {
            s.conditions = None;
        }
    }
}

/// A replica set's failure condition as the deployment's.
pub fn rs_condition_to_deployment(c: &ReplicaSetCondition) -> DeploymentCondition {
    DeploymentCondition {
        type_: c.type_.clone(),
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        last_update_time: c.last_transition_time.clone(),
        last_transition_time: c.last_transition_time.clone(),
    }
}

// ---- status ----

fn nonzero<T: Default + PartialEq>(v: T) -> Option<T> {
    (v != T::default()).then_some(v)
}

/// A status as the API serializes it (zero counts omitted), for comparisons.
pub fn normalized(s: &DeploymentStatus) -> DeploymentStatus {
    DeploymentStatus {
        observed_generation: s.observed_generation.and_then(nonzero),
        replicas: s.replicas.and_then(nonzero),
        updated_replicas: s.updated_replicas.and_then(nonzero),
        ready_replicas: s.ready_replicas.and_then(nonzero),
        available_replicas: s.available_replicas.and_then(nonzero),
        unavailable_replicas: s.unavailable_replicas.and_then(nonzero),
        conditions: s.conditions.clone().filter(|c| !c.is_empty()),
        collision_count: s.collision_count,
    }
}

pub fn status_of(d: &Deployment) -> DeploymentStatus {
    normalized(&d.status.clone().unwrap_or_default())
}

fn count(s: Option<i32>) -> i32 {
    s.unwrap_or(0)
}

/// The status the replica sets give the deployment (conditions carried over, Available set).
pub fn calculate_status(
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    d: &Deployment,
    now: Timestamp,
) -> DeploymentStatus {
    let available: i32 = all.iter().map(|rs| rs_available(rs)).sum();
    let total: i32 = all.iter().map(|rs| rs_replicas(rs)).sum();
    let current = status_of(d);
    let mut s = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(all.iter().map(|rs| rs_status_replicas(rs)).sum()),
        updated_replicas: Some(new_rs.map(rs_status_replicas).unwrap_or(0)),
        ready_replicas: Some(all.iter().map(|rs| rs_ready(rs)).sum()),
        available_replicas: Some(available),
        unavailable_replicas: Some((total - available).max(0)),
        conditions: current.conditions.clone(),
        collision_count: current.collision_count,
    };
    if available >= replicas(d) - max_unavailable(d) {
        set_condition(
            &mut s,
            new_condition(
                AVAILABLE,
                "True",
                MIN_AVAILABLE,
                "Deployment has minimum availability.",
                now,
            ),
        );
    } else {
        set_condition(
            &mut s,
            new_condition(
                AVAILABLE,
                "False",
                MIN_UNAVAILABLE,
                "Deployment does not have minimum availability.",
                now,
            ),
        );
    }
    normalized(&s)
}

/// Every desired replica is updated and available, no old ones are left, and the status
/// is of the current generation.
pub fn deployment_complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let r = replicas(d);
    count(s.updated_replicas) == r
        && count(s.replicas) == r
        && count(s.available_replicas) == r
        && s.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// The new status shows progress over the deployment's current one.
pub fn deployment_progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = status_of(d);
    let old_old = count(old.replicas) - count(old.updated_replicas);
    let new_old = count(new.replicas) - count(new.updated_replicas);
    count(new.updated_replicas) > count(old.updated_replicas)
        || new_old < old_old
        || count(new.ready_replicas) > count(old.ready_replicas)
        || count(new.available_replicas) > count(old.available_replicas)
}

/// No progress was reported within the progress deadline.
pub fn deployment_timed_out(d: &Deployment, new: &DeploymentStatus, now: Timestamp) -> bool {
    let Some(deadline) = progress_deadline(d) else {
        return false;
    };
    let Some(c) = get_condition(new, PROGRESSING) else {
        return false;
    };
    match cond_reason(c) {
        NEW_RS_AVAILABLE => false,
        TIMED_OUT => true,
        _ => {
            let Some(from) = c.last_update_time.as_ref() else {
                return false;
            };
            let due = from.0 + std::time::Duration::from_secs(deadline.max(0) as u64);
            due < now
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        DeploymentStrategy, ReplicaSetSpec, ReplicaSetStatus, RollingUpdateDeployment,
    };
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn deploy(replicas: i32, surge: &str, unavailable: &str) -> Deployment {
        let ios = |s: &str| match s.parse::<i32>() {
            Ok(i) => IntOrString::Int(i),
            Err(_) => IntOrString::String(s.into()),
        };
        Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some(ROLLING_UPDATE.into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(ios(surge)),
                        max_unavailable: Some(ios(unavailable)),
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn rs(name: &str, replicas: i32, created: i64, ann: &[(&str, &str)]) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                annotations: Some(
                    ann.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(replicas),
                ..Default::default()
            }),
            status: Some(ReplicaSetStatus {
                replicas,
                available_replicas: Some(replicas),
                ready_replicas: Some(replicas),
                ..Default::default()
            }),
        }
    }

    fn template(image: &str) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }
    }

    #[test]
    fn percentages_round_surge_up_and_unavailable_down() {
        let d = deploy(10, "25%", "25%");
        assert_eq!(max_surge(&d), 3);
        assert_eq!(max_unavailable(&d), 2);
        let d = deploy(3, "25%", "25%");
        assert_eq!((max_surge(&d), max_unavailable(&d)), (1, 0));
        // Both resolving to zero: one may be unavailable.
        let d = deploy(2, "0", "1%");
        assert_eq!((max_surge(&d), max_unavailable(&d)), (0, 1));
        // maxUnavailable never exceeds replicas; none for zero replicas.
        assert_eq!(max_unavailable(&deploy(2, "0", "5")), 2);
        assert_eq!(max_unavailable(&deploy(0, "1", "1")), 0);
        assert!(scaled_value(&IntOrString::String("25".into()), 4, true).is_err());
        assert!(scaled_value(&IntOrString::String("x%".into()), 4, true).is_err());
        let mut r = deploy(3, "1", "1");
        r.spec.as_mut().unwrap().strategy = Some(DeploymentStrategy {
            type_: Some(RECREATE.into()),
            rolling_update: None,
        });
        assert_eq!((max_surge(&r), max_unavailable(&r)), (0, 0));
    }

    #[test]
    fn new_replica_set_grows_within_surge() {
        let d = deploy(10, "3", "2");
        let old = rs("old", 10, 1, &[]);
        let new = rs("new", 0, 2, &[]);
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), Ok(3));
        let old = rs("old", 8, 1, &[]);
        let new = rs("new", 3, 2, &[]);
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), Ok(5));
        // At the surge limit: stays.
        let new = rs("new", 5, 2, &[]);
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), Ok(5));
        // Never beyond replicas.
        let old = rs("old", 0, 1, &[]);
        let new = rs("new", 9, 2, &[]);
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), Ok(10));
    }

    #[test]
    fn proportional_scaling_keeps_ratios() {
        // 10 → 15 replicas mid-rollout (surge 3): old 8 + new 5 were sized for max 13.
        let d = deploy(15, "3", "2");
        let ann = [(MAX_REPLICAS, "13"), (DESIRED_REPLICAS, "10")];
        let old = rs("old", 8, 1, &ann);
        let new = rs("new", 5, 2, &ann);
        let mut active = vec![&old, &new];
        active.sort_by(|a, b| by_size_newer(a, b));
        // allowed 15+3 = 18, have 13: add 5; 8*18/13 = 11.08 → 11 (+3), 5*18/13 = 6.92 → 7 (+2).
        let sizes = proportional_sizes(&d, &active, 18 - 13);
        assert_eq!(sizes, vec![11, 7]);
        // Scaling down to 5 (surge 2): allowed 7, remove 6 with old first among equals.
        let d = deploy(5, "2", "1");
        let a = rs("a", 4, 1, &[(MAX_REPLICAS, "13")]);
        let b = rs("b", 4, 2, &[(MAX_REPLICAS, "13")]);
        let mut active = vec![&b, &a];
        active.sort_by(|x, y| by_size_older(x, y));
        assert_eq!(active[0].metadata.name.as_deref(), Some("a"));
        let sizes = proportional_sizes(&d, &active, 7 - 8);
        assert_eq!(sizes.iter().sum::<i32>(), 7);
        assert!(sizes.iter().all(|s| *s >= 0));
        // Scaling to zero removes everything.
        let d = deploy(0, "1", "1");
        assert_eq!(proportional_sizes(&d, &active, -8), vec![0, 0]);
    }

    #[test]
    fn saturation_needs_annotation_size_and_availability() {
        let d = deploy(3, "1", "1");
        assert!(is_saturated(
            &d,
            Some(&rs("n", 3, 1, &[(DESIRED_REPLICAS, "3")]))
        ));
        assert!(!is_saturated(
            &d,
            Some(&rs("n", 3, 1, &[(DESIRED_REPLICAS, "2")]))
        ));
        assert!(!is_saturated(&d, Some(&rs("n", 3, 1, &[]))));
        let mut r = rs("n", 3, 1, &[(DESIRED_REPLICAS, "3")]);
        r.status.as_mut().unwrap().available_replicas = Some(2);
        assert!(!is_saturated(&d, Some(&r)));
        assert!(!is_saturated(&d, None));
    }

    #[test]
    fn orderings() {
        let a = rs("a", 2, 10, &[(REVISION, "3")]);
        let b = rs("b", 2, 20, &[(REVISION, "1")]);
        let c = rs("c", 5, 30, &[(REVISION, "x")]);
        let mut v = vec![&c, &b, &a];
        v.sort_by(|x, y| by_creation(x, y));
        assert_eq!(names(&v), ["a", "b", "c"]);
        v.sort_by(|x, y| by_size_newer(x, y));
        assert_eq!(names(&v), ["c", "b", "a"]);
        v.sort_by(|x, y| by_size_older(x, y));
        assert_eq!(names(&v), ["c", "a", "b"]);
        let mut v = vec![&a, &b];
        v.sort_by(|x, y| by_revision(x, y));
        assert_eq!(names(&v), ["b", "a"]);
        assert_eq!(max_revision([&a, &b, &c]), 3);
        assert_eq!(last_revision([&a, &b, &c]), 1);
    }

    fn names(v: &[&ReplicaSet]) -> Vec<String> {
        v.iter()
            .map(|r| r.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn hash_is_stable_ignores_hash_label_and_changes_with_collisions() {
        let t = template("nginx:1");
        let h = compute_hash(&t, None);
        assert_eq!(h, compute_hash(&t.clone(), None));
        assert!(h.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
        let mut labelled = t.clone();
        labelled
            .metadata
            .as_mut()
            .unwrap()
            .labels
            .as_mut()
            .unwrap()
            .insert(HASH_LABEL.into(), h.clone());
        assert_eq!(compute_hash(&labelled, None), h);
        assert!(equal_ignore_hash(&t, &labelled));
        assert_ne!(compute_hash(&t, Some(1)), h);
        assert_ne!(compute_hash(&t, Some(1)), compute_hash(&t, Some(2)));
        assert_ne!(compute_hash(&template("nginx:2"), None), h);
        assert!(!equal_ignore_hash(&t, &template("nginx:2")));
        // Absent and empty are the same.
        let mut empty = t.clone();
        empty.spec.as_mut().unwrap().volumes = Some(vec![]);
        empty.metadata.as_mut().unwrap().annotations = Some(BTreeMap::new());
        assert!(equal_ignore_hash(&t, &empty));
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
    }

    #[test]
    fn new_replica_set_annotations_track_revisions() {
        let mut d = deploy(3, "1", "1");
        d.metadata.annotations = Some(BTreeMap::from([
            ("kubernetes.io/change-cause".into(), "v2".into()),
            (LAST_APPLIED.into(), "{}".into()),
            (REVISION.into(), "9".into()),
        ]));
        let mut r = rs("n", 0, 1, &[]);
        assert!(set_new_rs_annotations(&d, &mut r, 1, false));
        let a = r.metadata.annotations.clone().unwrap();
        assert_eq!(a.get(REVISION).map(String::as_str), Some("1"));
        assert_eq!(
            a.get("kubernetes.io/change-cause").map(String::as_str),
            Some("v2")
        );
        assert!(!a.contains_key(LAST_APPLIED));
        assert_eq!(a.get(DESIRED_REPLICAS).map(String::as_str), Some("3"));
        assert_eq!(a.get(MAX_REPLICAS).map(String::as_str), Some("4"));
        assert!(!a.contains_key(REVISION_HISTORY));
        // Nothing new: unchanged.
        assert!(!set_new_rs_annotations(&d, &mut r, 1, true));
        // Reused by a rollback: revision 3, history keeps 1.
        assert!(set_new_rs_annotations(&d, &mut r, 3, true));
        assert!(set_new_rs_annotations(&d, &mut r, 5, true));
        let a = r.metadata.annotations.clone().unwrap();
        assert_eq!(a.get(REVISION).map(String::as_str), Some("5"));
        assert_eq!(a.get(REVISION_HISTORY).map(String::as_str), Some("1,3"));
        // A lower revision never replaces a higher one.
        assert!(!set_new_rs_annotations(&d, &mut r, 2, true));
    }

    #[test]
    fn conditions_keep_transition_time_and_move_last() {
        let t0 = Timestamp::from_second(100).unwrap();
        let t1 = Timestamp::from_second(200).unwrap();
        let mut s = DeploymentStatus::default();
        set_condition(
            &mut s,
            new_condition(PROGRESSING, "True", NEW_REPLICA_SET, "a", t0),
        );
        set_condition(
            &mut s,
            new_condition(AVAILABLE, "False", MIN_UNAVAILABLE, "b", t0),
        );
        // Same status and reason: untouched.
        set_condition(
            &mut s,
            new_condition(AVAILABLE, "False", MIN_UNAVAILABLE, "c", t1),
        );
        assert_eq!(
            get_condition(&s, AVAILABLE).unwrap().message.as_deref(),
            Some("b")
        );
        // Same status, new reason: transition time kept, moved last.
        set_condition(
            &mut s,
            new_condition(PROGRESSING, "True", NEW_RS_AVAILABLE, "d", t1),
        );
        let c = s.conditions.as_ref().unwrap();
        assert_eq!(c[1].type_, PROGRESSING);
        assert_eq!(c[1].last_transition_time, Some(Time(t0)));
        assert_eq!(c[1].last_update_time, Some(Time(t1)));
        set_condition(
            &mut s,
            new_condition(AVAILABLE, "True", MIN_AVAILABLE, "e", t1),
        );
        assert_eq!(
            get_condition(&s, AVAILABLE).unwrap().last_transition_time,
            Some(Time(t1))
        );
        remove_condition(&mut s, AVAILABLE);
        remove_condition(&mut s, PROGRESSING);
        assert!(s.conditions.is_none());
    }

    #[test]
    fn status_progress_and_timeouts() {
        let now = Timestamp::from_second(10_000).unwrap();
        let mut d = deploy(3, "1", "0");
        d.spec.as_mut().unwrap().progress_deadline_seconds = Some(60);
        let new = rs("new", 3, 1, &[]);
        let s = calculate_status(&[&new], Some(&new), &d, now);
        assert_eq!(s.replicas, Some(3));
        assert_eq!(s.updated_replicas, Some(3));
        assert_eq!(s.unavailable_replicas, None);
        assert_eq!(s.observed_generation, Some(1));
        assert_eq!(
            cond_reason(get_condition(&s, AVAILABLE).unwrap()),
            MIN_AVAILABLE
        );
        assert!(deployment_complete(&d, &s));
        assert!(deployment_progressing(&d, &s));
        let mut half = rs("new", 3, 1, &[]);
        half.status.as_mut().unwrap().available_replicas = Some(1);
        let s = calculate_status(&[&half], Some(&half), &d, now);
        assert_eq!(s.unavailable_replicas, Some(2));
        assert_eq!(get_condition(&s, AVAILABLE).unwrap().status, "False");
        assert!(!deployment_complete(&d, &s));

        let mut s = DeploymentStatus::default();
        set_condition(
            &mut s,
            new_condition(
                PROGRESSING,
                "True",
                REPLICA_SET_UPDATED,
                "",
                now - std::time::Duration::from_secs(61),
            ),
        );
        assert!(deployment_timed_out(&d, &s, now));
        let mut s2 = s.clone();
        s2.conditions.as_mut().unwrap()[0].last_update_time = Some(Time(now));
        assert!(!deployment_timed_out(&d, &s2, now));
        s.conditions.as_mut().unwrap()[0].reason = Some(NEW_RS_AVAILABLE.into());
        assert!(!deployment_timed_out(&d, &s, now));
        d.spec.as_mut().unwrap().progress_deadline_seconds = Some(i32::MAX);
        assert!(progress_deadline(&d).is_none());
    }

    #[test]
    fn normalized_status_omits_zero_counts() {
        let s = DeploymentStatus {
            replicas: Some(0),
            observed_generation: Some(2),
            conditions: Some(vec![]),
            collision_count: Some(0),
            ..Default::default()
        };
        let n = normalized(&s);
        assert_eq!(n.replicas, None);
        assert_eq!(n.conditions, None);
        assert_eq!(n.collision_count, Some(0));
        assert_eq!(n.observed_generation, Some(2));
    }
}
