//! The DaemonSet controller (Kubernetes' pkg/controller/daemon): one pod on every node the
//! template may run on (its nodeSelector and required node affinity match the node, and it
//! tolerates the node's NoSchedule and NoExecute taints, counting the tolerations every daemon
//! pod gets: not-ready and unreachable NoExecute, disk/memory/pid-pressure and unschedulable
//! NoSchedule, network-unavailable for hostNetwork pods). Pods are created with a required node
//! affinity `metadata.name In [node]` for the scheduler to bind, excess and misplaced pods are
//! deleted, failed pods are replaced with a back-off. Templates are recorded as
//! ControllerRevisions (`<ds>-<hash>`) whose hash labels the pods (`controller-revision-hash`);
//! a RollingUpdate replaces old pods within maxUnavailable, or surges new pods beside them
//! within maxSurge.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use capstan_api::selector::LabelSelector as Matcher;
use capstan_runtime::{Change, Informer, Queue, Recorder};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetSpec, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodSpec, PodTemplateSpec, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use parking_lot::Mutex;
use serde_json::json;

use crate::expectations::Expectations;
use crate::statefulset::{
    aggregate, claim, err_msg, fnv32a, go_json, go_template, recheck_owner, revision_name,
    safe_encode, same_data, template_patch, REVISION_LABEL,
};
use crate::util::{
    controller_ref, is_conflict, is_not_found, is_pod_available, is_pod_ready, matcher, matches,
    owner_ref, pod_from_template, pod_name_prefix, selects_everything,
};
use crate::Ctx;

const KIND: &str = "DaemonSet";
/// The template generation the API server keeps for apps/v1 DaemonSets.
const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";
const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";
/// At most this many creations or deletions per sync.
const BURST_REPLICAS: usize = 250;
const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(15 * 60);

fn name_of(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

fn ns_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or_default()
}

fn uid_of(meta: &ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Placement: which nodes a daemon pod should run on.
// ---------------------------------------------------------------------------------------------

fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or_default()
}

/// Kubernetes' ToleratesTaint.
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if !s(&t.effect).is_empty() && s(&t.effect) != taint.effect {
        return false;
    }
    if !s(&t.key).is_empty() && s(&t.key) != taint.key {
        return false;
    }
    match s(&t.operator) {
        "" | "Equal" => s(&t.value) == s(&taint.value),
        "Exists" => true,
        _ => false,
    }
}

/// The first taint passing `filter` that no toleration tolerates.
fn untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    filter: impl Fn(&Taint) -> bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| filter(t))
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

fn same_toleration(a: &Toleration, b: &Toleration) -> bool {
    s(&a.key) == s(&b.key)
        && s(&a.effect) == s(&b.effect)
        && s(&a.operator) == s(&b.operator)
        && s(&a.value) == s(&b.value)
}

/// Kubernetes' AddOrUpdateTolerationInPodSpec.
fn add_or_update_toleration(spec: &mut PodSpec, t: Toleration) {
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    if tolerations
        .iter()
        .any(|x| same_toleration(x, &t) && x.toleration_seconds == t.toleration_seconds)
    {
        return;
    }
    let mut updated = false;
    for x in tolerations.iter_mut() {
        if same_toleration(x, &t) {
            *x = t.clone();
            updated = true;
        }
    }
    if !updated {
        tolerations.push(t);
    }
}

/// The tolerations every daemon pod gets, so node problems do not evict or block it.
fn add_daemon_tolerations(spec: &mut PodSpec) {
    let host_network = spec.host_network == Some(true);
    let mut add = |key: &str, effect: &str| {
        add_or_update_toleration(
            spec,
            Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some(effect.into()),
                ..Default::default()
            },
        )
    };
    add("node.kubernetes.io/not-ready", "NoExecute");
    add("node.kubernetes.io/unreachable", "NoExecute");
    add("node.kubernetes.io/disk-pressure", "NoSchedule");
    add("node.kubernetes.io/memory-pressure", "NoSchedule");
    add("node.kubernetes.io/pid-pressure", "NoSchedule");
    add("node.kubernetes.io/unschedulable", "NoSchedule");
    if host_network {
        add("node.kubernetes.io/network-unavailable", "NoSchedule");
    }
}

/// A node-selector requirement on labels; `None` when the requirement is invalid.
fn label_requirement(
    req: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let values = req.values.as_deref().unwrap_or_default();
    let have = labels.get(&req.key);
    match req.operator.as_str() {
        "In" if !values.is_empty() => Some(have.is_some_and(|v| values.contains(v))),
        "NotIn" if !values.is_empty() => Some(have.is_none_or(|v| !values.contains(v))),
        "Exists" if values.is_empty() => Some(have.is_some()),
        "DoesNotExist" if values.is_empty() => Some(have.is_none()),
        "Gt" | "Lt" if values.len() == 1 => {
            let want: i64 = values[0].parse().ok()?;
            Some(have.and_then(|v| v.parse::<i64>().ok()).is_some_and(|h| {
                if req.operator == "Gt" {
                    h > want
                } else {
                    h < want
                }
            }))
        }
        _ => None,
    }
}

/// A node-selector requirement on fields (only `metadata.name`); `None` when invalid.
fn field_requirement(req: &NodeSelectorRequirement, node_name: &str) -> Option<bool> {
    let values = req.values.as_deref().unwrap_or_default();
    if req.key != "metadata.name" || values.len() != 1 {
        return None;
    }
    match req.operator.as_str() {
        "In" => Some(node_name == values[0]),
        "NotIn" => Some(node_name != values[0]),
        _ => None,
    }
}

/// A term matches when all its requirements do; an empty or invalid term matches nothing.
fn term_matches(
    term: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
    node_name: &str,
) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|e| label_requirement(e, labels) == Some(true))
        && fields
            .iter()
            .all(|f| field_requirement(f, node_name) == Some(true))
}

/// What decides where a DaemonSet's pods go, computed once per DaemonSet.
struct Placement {
    node_name: String,
    node_selector: BTreeMap<String, String>,
    required: Option<Vec<NodeSelectorTerm>>,
    tolerations: Vec<Toleration>,
}

impl Placement {
    fn of(spec: &DaemonSetSpec) -> Placement {
        let mut pspec = spec.template.spec.clone().unwrap_or_default();
        add_daemon_tolerations(&mut pspec);
        Placement {
            node_name: pspec.node_name.clone().unwrap_or_default(),
            node_selector: pspec.node_selector.clone().unwrap_or_default(),
            required: pspec
                .affinity
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|n| {
                    n.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .map(|r| r.node_selector_terms.clone()),
            tolerations: pspec.tolerations.unwrap_or_default(),
        }
    }

    /// Kubernetes' NodeShouldRunDaemonPod: (should a pod be started here, may a running pod
    /// stay here).
    fn check(&self, node: &Node) -> (bool, bool) {
        let node_name = name_of(&node.metadata);
        if !self.node_name.is_empty() && self.node_name != node_name {
            return (false, false);
        }
        let empty = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        let fits_selector = self
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v));
        let fits_affinity = self
            .required
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|t| term_matches(t, labels, node_name)));
        if !fits_selector || !fits_affinity {
            return (false, false);
        }
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default();
        let blocking = untolerated(taints, &self.tolerations, |t| {
            t.effect == "NoExecute" || t.effect == "NoSchedule"
        });
        if blocking.is_some() {
            let evicting = untolerated(taints, &self.tolerations, |t| t.effect == "NoExecute");
            return (false, evicting.is_none());
        }
        (true, true)
    }
}

/// The node a daemon pod is for: its nodeName, or the `metadata.name In [node]` term of its
/// required node affinity.
fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(n.clone());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    for term in terms {
        for f in term.match_fields.iter().flatten() {
            if f.key == "metadata.name" && f.operator == "In" {
                let values = f.values.as_deref().unwrap_or_default();
                return (values.len() == 1).then(|| values[0].clone());
            }
        }
    }
    None
}

/// The pod's affinity with its required node terms replaced by `metadata.name In [node]`.
fn node_name_affinity(affinity: Option<Affinity>, node: &str) -> Affinity {
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![node.into()]),
        }]),
        match_expressions: None,
    };
    let mut affinity = affinity.unwrap_or_default();
    let na = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    match na
        .required_during_scheduling_ignored_during_execution
        .as_mut()
    {
        Some(r) => r.node_selector_terms = vec![term],
        None => {
            na.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
                node_selector_terms: vec![term],
            })
        }
    }
    affinity
}

// ---------------------------------------------------------------------------------------------
// Revisions, templates and updates.
// ---------------------------------------------------------------------------------------------

/// The DaemonSet's template generation (the API server's annotation), if it parses.
fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.metadata
        .annotations
        .as_ref()?
        .get(TEMPLATE_GENERATION_ANNOTATION)?
        .parse()
        .ok()
}

/// The template pods are created from: daemon tolerations, the generation and hash labels.
fn pod_template(
    template: &PodTemplateSpec,
    generation: Option<i64>,
    hash: &str,
) -> PodTemplateSpec {
    let mut t = template.clone();
    add_daemon_tolerations(t.spec.get_or_insert_with(Default::default));
    let labels = t
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(BTreeMap::new);
    if let Some(g) = generation {
        labels.insert(TEMPLATE_GENERATION_LABEL.into(), g.to_string());
    }
    if !hash.is_empty() {
        labels.insert(REVISION_LABEL.into(), hash.into());
    }
    t
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// Whether the pod runs the current template (by hash, or by the old template generation).
fn is_pod_updated(pod: &Pod, hash: &str, generation: Option<i64>) -> bool {
    let gen_matches = generation.is_some_and(|g| {
        label(&pod.metadata, TEMPLATE_GENERATION_LABEL) == Some(g.to_string().as_str())
    });
    let hash_matches = !hash.is_empty() && label(&pod.metadata, REVISION_LABEL) == Some(hash);
    hash_matches || gen_matches
}

/// Kubernetes' ComputeHash of the template and collision count (FNV-1a over the template as Go
/// encodes it), safe-encoded.
fn template_hash(template: &PodTemplateSpec, collision: Option<i32>) -> String {
    let raw = go_json(&go_template(template));
    let extra = collision.map(|c| (c as u32).to_le_bytes());
    let mut parts: Vec<&[u8]> = vec![raw.as_bytes()];
    if let Some(e) = extra.as_ref() {
        parts.push(e);
    }
    safe_encode(fnv32a(&parts))
}

fn is_rolling_update(spec: &DaemonSetSpec) -> bool {
    spec.update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        == Some("RollingUpdate")
}

/// An int-or-percent of `total` (Kubernetes' GetScaledValueFromIntOrPercent).
fn scaled(v: &IntOrString, total: i64, round_up: bool) -> anyhow::Result<i64> {
    match v {
        IntOrString::Int(i) => Ok(i64::from(*i)),
        IntOrString::String(s) => {
            let Some(n) = s.strip_suffix('%') else {
                anyhow::bail!("invalid type: string is not a percentage");
            };
            let n: i64 = n
                .parse()
                .map_err(|_| anyhow!("invalid value for IntOrString: invalid value {s:?}"))?;
            let x = n as f64 * total as f64 / 100.0;
            Ok(if round_up { x.ceil() } else { x.floor() } as i64)
        }
    }
}

fn surge_count(spec: &DaemonSetSpec, desired: i64) -> anyhow::Result<i64> {
    if !is_rolling_update(spec) {
        return Ok(0);
    }
    let Some(r) = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
    else {
        return Ok(0);
    };
    scaled(
        r.max_surge.as_ref().unwrap_or(&IntOrString::Int(0)),
        desired,
        true,
    )
}

fn unavailable_count(spec: &DaemonSetSpec, desired: i64) -> anyhow::Result<i64> {
    if !is_rolling_update(spec) {
        return Ok(0);
    }
    let Some(r) = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
    else {
        return Ok(0);
    };
    scaled(
        r.max_unavailable.as_ref().unwrap_or(&IntOrString::Int(1)),
        desired,
        true,
    )
}

fn allows_surge(spec: &DaemonSetSpec) -> bool {
    surge_count(spec, 1).is_ok_and(|n| n != 0)
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn scheduled(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// Scheduled pods first, then the oldest, then by name.
fn sort_pods(pods: &mut [Arc<Pod>]) {
    pods.sort_by(|a, b| {
        scheduled(b)
            .cmp(&scheduled(a))
            .then_with(|| {
                let t = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
                t(a).cmp(&t(b))
            })
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
}

type NodePods = BTreeMap<String, Vec<Arc<Pod>>>;

/// What one node needs (Kubernetes' podsShouldBeOnNode).
#[derive(Debug, Default, PartialEq)]
struct NodePlan {
    create: bool,
    delete: Vec<String>,
    /// Failed pods being deleted (each reported with a FailedDaemonPod event).
    failed: Vec<String>,
    /// Succeeded pods being deleted (SucceededDaemonPod events).
    succeeded: Vec<String>,
}

/// Plan one node. `may_delete_failed` says whether a failed pod may be deleted now (the
/// failed-pod back-off); when it says no, the pod is left for a later sync.
fn plan_node(
    placement: &Placement,
    spec: &DaemonSetSpec,
    node: &Node,
    pods: Option<&Vec<Arc<Pod>>>,
    hash: &str,
    now: Timestamp,
    mut may_delete_failed: impl FnMut() -> bool,
) -> NodePlan {
    let (should_run, should_continue) = placement.check(node);
    let mut plan = NodePlan::default();
    match pods {
        None if should_run => plan.create = true,
        _ if should_continue => {
            let mut running: Vec<Arc<Pod>> = Vec::new();
            for pod in pods.into_iter().flatten() {
                if pod.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                match phase(pod) {
                    "Failed" => {
                        if may_delete_failed() {
                            plan.failed.push(name_of(&pod.metadata).into());
                            plan.delete.push(name_of(&pod.metadata).into());
                        }
                    }
                    "Succeeded" => {
                        plan.succeeded.push(name_of(&pod.metadata).into());
                        plan.delete.push(name_of(&pod.metadata).into());
                    }
                    _ => running.push(pod.clone()),
                }
            }
            if !allows_surge(spec) {
                if running.len() > 1 {
                    sort_pods(&mut running);
                    plan.delete.extend(
                        running[1..]
                            .iter()
                            .map(|p| name_of(&p.metadata).to_string()),
                    );
                }
                return plan;
            }
            if running.len() <= 1 {
                if running.is_empty() && should_run {
                    plan.create = true;
                }
                return plan;
            }
            // Surging: keep the oldest new pod and, while it is not yet available, the oldest
            // old pod that is still ready; delete the rest.
            sort_pods(&mut running);
            let (mut oldest_new, mut oldest_old): (Option<&Arc<Pod>>, Option<&Arc<Pod>>) =
                (None, None);
            for pod in &running {
                let slot = if label(&pod.metadata, REVISION_LABEL) == Some(hash) {
                    &mut oldest_new
                } else {
                    &mut oldest_old
                };
                if slot.is_none() {
                    *slot = Some(pod);
                } else {
                    plan.delete.push(name_of(&pod.metadata).into());
                }
            }
            if let (Some(new), Some(old)) = (oldest_new, oldest_old) {
                let min_ready = spec.min_ready_seconds.unwrap_or(0);
                if !is_pod_ready(old) || is_pod_available(new, min_ready, now) {
                    plan.delete.push(name_of(&old.metadata).into());
                }
            }
        }
        Some(pods) => {
            // Not wanted here any more.
            plan.delete.extend(
                pods.iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .map(|p| name_of(&p.metadata).to_string()),
            );
        }
        None => {}
    }
    plan
}

/// Pods not yet scheduled whose target node does not exist (they never will be scheduled).
fn unscheduled_without_node(nodes: &[Arc<Node>], node_pods: &NodePods) -> Vec<String> {
    node_pods
        .iter()
        .filter(|(n, _)| {
            !nodes
                .iter()
                .any(|node| name_of(&node.metadata) == n.as_str())
        })
        .flat_map(|(_, pods)| pods.iter().filter(|p| !scheduled(p)))
        .map(|p| name_of(&p.metadata).to_string())
        .collect()
}

/// A node's (new, old) pods.
type NewAndOld<'a> = (Option<&'a Arc<Pod>>, Option<&'a Arc<Pod>>);

/// The new and old (non-deleted) pod on a node; `None` when there are several of either.
fn updated_pods_on_node<'a>(
    pods: &'a [Arc<Pod>],
    hash: &str,
    generation: Option<i64>,
) -> Option<NewAndOld<'a>> {
    let (mut new, mut old) = (None, None);
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let slot = if is_pod_updated(pod, hash, generation) {
            &mut new
        } else {
            &mut old
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(pod);
    }
    Some((new, old))
}

/// Kubernetes' rollingUpdate decision: the pods to delete and the nodes to create pods on.
fn plan_rolling_update(
    ds: &DaemonSet,
    spec: &DaemonSetSpec,
    placement: &Placement,
    nodes: &[Arc<Node>],
    mut node_pods: NodePods,
    hash: &str,
    now: Timestamp,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let generation = template_generation(ds);
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let mut desired = 0i64;
    for node in nodes {
        if placement.check(node).0 {
            desired += 1;
            node_pods
                .entry(name_of(&node.metadata).to_string())
                .or_default();
        }
    }
    let mut max_unavailable = unavailable_count(spec, desired)
        .map_err(|e| anyhow!("invalid value for MaxUnavailable: {e}"))?;
    let max_surge =
        surge_count(spec, desired).map_err(|e| anyhow!("invalid value for MaxSurge: {e}"))?;
    if desired > 0 && max_unavailable == 0 && max_surge == 0 {
        max_unavailable = 1;
    }
    let available = |p: &Pod| is_pod_available(p, min_ready, now);
    let node_by_name = |n: &str| nodes.iter().find(|node| name_of(&node.metadata) == n);

    if max_surge == 0 {
        let mut unavailable = 0i64;
        let mut replacements: Vec<String> = Vec::new();
        let mut candidates: Vec<String> = Vec::new();
        for pods in node_pods.values() {
            let Some((new, old)) = updated_pods_on_node(pods, hash, generation) else {
                unavailable += 1;
                continue;
            };
            match (new, old) {
                (None, None) | (Some(_), Some(_)) => unavailable += 1,
                (Some(new), None) => {
                    if !available(new) {
                        unavailable += 1;
                    }
                }
                (None, Some(old)) => {
                    if !available(old) {
                        replacements.push(name_of(&old.metadata).into());
                    } else if unavailable < max_unavailable {
                        candidates.push(name_of(&old.metadata).into());
                    }
                }
            }
        }
        let room = (max_unavailable - unavailable).clamp(0, candidates.len() as i64) as usize;
        replacements.extend(candidates.into_iter().take(room));
        return Ok((replacements, Vec::new()));
    }

    let mut delete: Vec<String> = Vec::new();
    let mut should_not_run: Vec<String> = Vec::new();
    let mut candidates: Vec<String> = Vec::new();
    let mut allowed: Vec<String> = Vec::new();
    let (mut surge, mut num_available) = (0i64, 0i64);
    for (node_name, pods) in &node_pods {
        let Some((new, old)) = updated_pods_on_node(pods, hash, generation) else {
            surge += 1;
            continue;
        };
        if let Some(p) = old.or(new) {
            if available(p) {
                num_available += 1;
            }
        }
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) => {
                let node = node_by_name(node_name)
                    .ok_or_else(|| anyhow!("couldn't get node for nodeName {node_name:?}"))?;
                let should_run = placement.check(node).0;
                if !available(old) {
                    if !should_run {
                        delete.push(name_of(&old.metadata).into());
                        continue;
                    }
                    allowed.push(node_name.clone());
                } else {
                    if !should_run {
                        should_not_run.push(name_of(&old.metadata).into());
                        continue;
                    }
                    if surge >= max_surge {
                        continue;
                    }
                    candidates.push(node_name.clone());
                }
            }
            (Some(new), Some(old)) => {
                if !available(new) {
                    surge += 1;
                    continue;
                }
                delete.push(name_of(&old.metadata).into());
            }
        }
    }
    // Pods on nodes no longer wanted go only once enough pods elsewhere are available.
    let deletable = (num_available - desired).clamp(0, should_not_run.len() as i64) as usize;
    delete.extend(should_not_run.into_iter().take(deletable));
    let room = (max_surge - surge).clamp(0, candidates.len() as i64) as usize;
    allowed.extend(candidates.into_iter().take(room));
    Ok((delete, allowed))
}

/// The status counts (Kubernetes' updateDaemonSetStatus).
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
struct Counts {
    desired: i32,
    current: i32,
    misscheduled: i32,
    ready: i32,
    updated: i32,
    available: i32,
    unavailable: i32,
}

fn count_status(
    ds: &DaemonSet,
    spec: &DaemonSetSpec,
    placement: &Placement,
    nodes: &[Arc<Node>],
    node_pods: &NodePods,
    hash: &str,
    now: Timestamp,
) -> Counts {
    let generation = template_generation(ds);
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let mut c = Counts::default();
    for node in nodes {
        let should_run = placement.check(node).0;
        let pods = node_pods
            .get(name_of(&node.metadata))
            .filter(|p| !p.is_empty());
        if !should_run {
            if pods.is_some() {
                c.misscheduled += 1;
            }
            continue;
        }
        c.desired += 1;
        let Some(pods) = pods else {
            continue;
        };
        c.current += 1;
        let mut pods = pods.clone();
        sort_pods(&mut pods);
        let pod = &pods[0];
        if is_pod_ready(pod) {
            c.ready += 1;
            if is_pod_available(pod, min_ready, now) {
                c.available += 1;
            }
        }
        if is_pod_updated(pod, hash, generation) {
            c.updated += 1;
        }
    }
    c.unavailable = c.desired - c.available;
    c
}

// ---------------------------------------------------------------------------------------------
// Failed-pod back-off (client-go's flowcontrol.Backoff, 1 s doubling to 15 min).
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct Backoff {
    entries: Mutex<HashMap<String, (Duration, Instant)>>,
}

impl Backoff {
    /// The current delay when `key` is still backing off.
    fn delay(&self, key: &str, now: Instant) -> Option<Duration> {
        let entries = self.entries.lock();
        let (delay, at) = entries.get(key)?;
        let since = now.saturating_duration_since(*at);
        (since <= BACKOFF_MAX * 2 && since < *delay).then_some(*delay)
    }

    fn next(&self, key: &str, now: Instant) {
        let mut entries = self.entries.lock();
        entries.retain(|_, (_, at)| now.saturating_duration_since(*at) <= BACKOFF_MAX * 2);
        let delay = match entries.get(key) {
            Some((d, _)) => (*d * 2).min(BACKOFF_MAX),
            None => BACKOFF_INITIAL,
        };
        entries.insert(key.to_string(), (delay, now));
    }
}

// ---------------------------------------------------------------------------------------------
// The controller.
// ---------------------------------------------------------------------------------------------

struct Controller {
    client: Client,
    dss: Arc<Informer<DaemonSet>>,
    pods: Arc<Informer<Pod>>,
    nodes: Arc<Informer<Node>>,
    revisions: Arc<Informer<ControllerRevision>>,
    recorder: Recorder,
    queue: Arc<Queue>,
    expectations: Expectations,
    backoff: Backoff,
}

fn ds_key(ds: &DaemonSet) -> String {
    capstan_runtime::key(ds.metadata.namespace.as_deref(), name_of(&ds.metadata))
}

pub fn start(ctx: &Ctx) {
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        dss: ctx.informers.get::<DaemonSet>(),
        pods: ctx.informers.get::<Pod>(),
        nodes: ctx.informers.get::<Node>(),
        revisions: ctx.informers.get::<ControllerRevision>(),
        recorder: ctx.recorder("daemonset-controller"),
        queue: Queue::new("daemonset"),
        expectations: Expectations::new(),
        backoff: Backoff::default(),
    });
    let weak = Arc::downgrade(&c);
    c.dss.on_change(move |ch| {
        if let Some(c) = weak.upgrade() {
            c.on_daemon_set(ch);
        }
    });
    let weak = Arc::downgrade(&c);
    c.pods.on_change(move |ch| {
        if let Some(c) = weak.upgrade() {
            c.on_pod(ch);
        }
    });
    let weak = Arc::downgrade(&c);
    c.nodes.on_change(move |ch| {
        if let Some(c) = weak.upgrade() {
            c.on_node(ch);
        }
    });
    let weak = Arc::downgrade(&c);
    c.revisions.on_change(move |ch| {
        if let Some(c) = weak.upgrade() {
            c.on_revision(ch);
        }
    });
    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        c.pods.wait_synced().await;
        c.nodes.wait_synced().await;
        c.revisions.wait_synced().await;
        c.dss.wait_synced().await;
        let queue = c.queue.clone();
        queue.run_workers(workers, move |key| {
            let c = c.clone();
            async move { c.sync(&key).await }
        });
    });
}

impl Controller {
    fn resolve(&self, namespace: &str, r: &OwnerReference) -> Option<Arc<DaemonSet>> {
        if r.kind != KIND {
            return None;
        }
        let ds = self.dss.get(namespace, &r.name)?;
        (uid_of(&ds.metadata) == r.uid).then_some(ds)
    }

    /// The DaemonSets in the object's namespace whose selector selects its labels.
    fn selecting(&self, meta: &ObjectMeta) -> Vec<Arc<DaemonSet>> {
        let mut out = Vec::new();
        self.dss.for_each_in(ns_of(meta), |ds| {
            let Some(spec) = ds.spec.as_ref() else {
                return;
            };
            if let Some(m) = matcher(&spec.selector) {
                if !m.is_empty() && matches(&m, meta.labels.as_ref()) {
                    out.push(ds.clone());
                }
            }
        });
        out
    }

    fn on_daemon_set(&self, ch: &Change<'_, DaemonSet>) {
        match ch {
            Change::Add(ds) => self.queue.add(ds_key(ds)),
            Change::Update { old, new } => {
                if uid_of(&old.metadata) != uid_of(&new.metadata) {
                    self.expectations.delete(&ds_key(old));
                }
                self.queue.add(ds_key(new));
            }
            Change::Delete(ds) => {
                let key = ds_key(ds);
                self.expectations.delete(&key);
                self.queue.add(key);
            }
        }
    }

    fn on_pod(&self, ch: &Change<'_, Pod>) {
        match ch {
            Change::Add(pod) => {
                if pod.metadata.deletion_timestamp.is_some() {
                    self.pod_gone(pod);
                    return;
                }
                if let Some(r) = controller_ref(&pod.metadata) {
                    if let Some(ds) = self.resolve(ns_of(&pod.metadata), r) {
                        let key = ds_key(&ds);
                        self.expectations.creation_observed(&key);
                        self.queue.add(key);
                    }
                    return;
                }
                for ds in self.selecting(&pod.metadata) {
                    self.queue.add(ds_key(&ds));
                }
            }
            Change::Update { old, new } => {
                if old.metadata.resource_version == new.metadata.resource_version {
                    return;
                }
                if new.metadata.deletion_timestamp.is_some() {
                    // Expect a replacement now rather than when the pod is finally removed.
                    self.pod_gone(new);
                    return;
                }
                let ns = ns_of(&new.metadata);
                let (old_ref, cur_ref) =
                    (controller_ref(&old.metadata), controller_ref(&new.metadata));
                let ref_changed = old_ref != cur_ref;
                if ref_changed {
                    if let Some(ds) = old_ref.and_then(|r| self.resolve(ns, r)) {
                        self.queue.add(ds_key(&ds));
                    }
                }
                if let Some(r) = cur_ref {
                    if let Some(ds) = self.resolve(ns, r) {
                        let key = ds_key(&ds);
                        self.queue.add(key.clone());
                        let min_ready = ds
                            .spec
                            .as_ref()
                            .and_then(|s| s.min_ready_seconds)
                            .unwrap_or(0);
                        if !is_pod_ready(old) && is_pod_ready(new) && min_ready > 0 {
                            self.queue
                                .add_after(key, Duration::from_secs(min_ready as u64 + 1));
                        }
                    }
                    return;
                }
                if old.metadata.labels != new.metadata.labels || ref_changed {
                    for ds in self.selecting(&new.metadata) {
                        self.queue.add(ds_key(&ds));
                    }
                }
            }
            Change::Delete(pod) => self.pod_gone(pod),
        }
    }

    fn pod_gone(&self, pod: &Pod) {
        if let Some(ds) =
            controller_ref(&pod.metadata).and_then(|r| self.resolve(ns_of(&pod.metadata), r))
        {
            let key = ds_key(&ds);
            self.expectations.deletion_observed(&key);
            self.queue.add(key);
        }
    }

    fn on_node(&self, ch: &Change<'_, Node>) {
        match ch {
            Change::Add(node) => {
                for ds in self.dss.list() {
                    if let Some(spec) = ds.spec.as_ref() {
                        if Placement::of(spec).check(node).0 {
                            self.queue.add(ds_key(&ds));
                        }
                    }
                }
            }
            Change::Update { old, new } => {
                let taints = |n: &Node| n.spec.as_ref().and_then(|s| s.taints.clone());
                if old.metadata.labels == new.metadata.labels && taints(old) == taints(new) {
                    return;
                }
                for ds in self.dss.list() {
                    if let Some(spec) = ds.spec.as_ref() {
                        let p = Placement::of(spec);
                        if p.check(old) != p.check(new) {
                            self.queue.add(ds_key(&ds));
                        }
                    }
                }
            }
            Change::Delete(_) => {}
        }
    }

    fn on_revision(&self, ch: &Change<'_, ControllerRevision>) {
        match ch {
            Change::Add(r) => {
                if r.metadata.deletion_timestamp.is_some() {
                    self.revision_gone(r);
                    return;
                }
                if controller_ref(&r.metadata).is_some() {
                    return;
                }
                for ds in self.selecting(&r.metadata) {
                    self.queue.add(ds_key(&ds));
                }
            }
            Change::Update { old, new } => {
                if old.metadata.resource_version == new.metadata.resource_version {
                    return;
                }
                let ns = ns_of(&new.metadata);
                let (old_ref, cur_ref) =
                    (controller_ref(&old.metadata), controller_ref(&new.metadata));
                let ref_changed = old_ref != cur_ref;
                if ref_changed {
                    if let Some(ds) = old_ref.and_then(|r| self.resolve(ns, r)) {
                        self.queue.add(ds_key(&ds));
                    }
                }
                if let Some(r) = cur_ref {
                    if let Some(ds) = self.resolve(ns, r) {
                        self.queue.add(ds_key(&ds));
                    }
                    return;
                }
                if old.metadata.labels != new.metadata.labels || ref_changed {
                    for ds in self.selecting(&new.metadata) {
                        self.queue.add(ds_key(&ds));
                    }
                }
            }
            Change::Delete(r) => self.revision_gone(r),
        }
    }

    fn revision_gone(&self, r: &ControllerRevision) {
        if let Some(ds) =
            controller_ref(&r.metadata).and_then(|c| self.resolve(ns_of(&r.metadata), c))
        {
            self.queue.add(ds_key(&ds));
        }
    }

    fn ds_api(&self, ns: &str) -> Api<DaemonSet> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn pod_api(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn revision_api(&self, ns: &str) -> Api<ControllerRevision> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn sync(&self, key: &str) -> anyhow::Result<()> {
        let Some(ds) = self.dss.get_key(key) else {
            self.expectations.delete(key);
            return Ok(());
        };
        let Some(spec) = ds.spec.as_ref() else {
            return Ok(());
        };
        let nodes = self.nodes.list();
        if selects_everything(&spec.selector) {
            self.recorder.warning(
                &*ds,
                "SelectingAll",
                "This daemon set is selecting all pods. A non-empty selector is required.",
            );
            return Ok(());
        }
        if ds.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let Some(selector) = matcher(&spec.selector) else {
            anyhow::bail!("invalid label selector for daemon set {key}");
        };
        let (current, old) = self
            .construct_history(&ds, spec, &selector)
            .await
            .map_err(|e| anyhow!("failed to construct revisions of DaemonSet: {e:#}"))?;
        let hash = label(&current.metadata, REVISION_LABEL)
            .unwrap_or_default()
            .to_string();
        let placement = Placement::of(spec);
        if !self.expectations.satisfied(key) {
            return self
                .update_status(&ds, spec, &placement, &selector, &nodes, &hash, false)
                .await;
        }
        let result = self
            .update_daemon_set(&ds, spec, &placement, &selector, &nodes, &hash, key, &old)
            .await;
        let status = self
            .update_status(&ds, spec, &placement, &selector, &nodes, &hash, true)
            .await;
        match (result, status) {
            (Err(e), Err(se)) => {
                tracing::warn!(daemonset = key, error = %format!("{se:#}"), "failed to update status");
                Err(e)
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// The pods the DaemonSet owns (adopting selected orphans, releasing unselected pods).
    async fn daemon_pods(
        &self,
        ds: &DaemonSet,
        selector: &Matcher,
    ) -> anyhow::Result<Vec<Arc<Pod>>> {
        let ns = ns_of(&ds.metadata);
        let ds_api = self.ds_api(ns);
        claim(
            &self.pod_api(ns),
            &ds.metadata,
            &owner_ref(ds),
            self.pods.list_namespace(ns),
            |p: &Pod| matches(selector, p.metadata.labels.as_ref()),
            || recheck_owner(&ds_api, &ds.metadata),
        )
        .await
    }

    /// The DaemonSet's pods by the node each is for; terminal pods being deleted are left out
    /// unless `include_deleted_terminal`.
    async fn node_pods(
        &self,
        ds: &DaemonSet,
        selector: &Matcher,
        include_deleted_terminal: bool,
    ) -> anyhow::Result<NodePods> {
        let mut out = NodePods::new();
        for pod in self.daemon_pods(ds, selector).await? {
            let terminal = matches!(phase(&pod), "Succeeded" | "Failed");
            if !include_deleted_terminal && terminal && pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Some(node) = target_node(&pod) {
                out.entry(node).or_default().push(pod);
            }
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    async fn update_daemon_set(
        &self,
        ds: &DaemonSet,
        spec: &DaemonSetSpec,
        placement: &Placement,
        selector: &Matcher,
        nodes: &[Arc<Node>],
        hash: &str,
        key: &str,
        old: &[Arc<ControllerRevision>],
    ) -> anyhow::Result<()> {
        self.manage(ds, spec, placement, selector, nodes, hash, key)
            .await?;
        if self.expectations.satisfied(key) && is_rolling_update(spec) {
            let node_pods = self.node_pods(ds, selector, false).await?;
            let (delete, create) = plan_rolling_update(
                ds,
                spec,
                placement,
                nodes,
                node_pods,
                hash,
                Timestamp::now(),
            )?;
            self.sync_nodes(ds, spec, key, delete, create, hash).await?;
        }
        self.cleanup_history(ds, spec, selector, old)
            .await
            .map_err(|e| anyhow!("failed to clean up revisions of DaemonSet: {e:#}"))
    }

    /// Create pods where they are missing, delete them where they should not be.
    #[allow(clippy::too_many_arguments)]
    async fn manage(
        &self,
        ds: &DaemonSet,
        spec: &DaemonSetSpec,
        placement: &Placement,
        selector: &Matcher,
        nodes: &[Arc<Node>],
        hash: &str,
        key: &str,
    ) -> anyhow::Result<()> {
        let node_pods = self.node_pods(ds, selector, false).await.map_err(|e| {
            anyhow!(
                "couldn't get node to daemon pod mapping for daemon set {:?}: {e:#}",
                name_of(&ds.metadata)
            )
        })?;
        let now = Timestamp::now();
        let observed = ds
            .status
            .as_ref()
            .and_then(|s| s.observed_generation)
            .unwrap_or(0);
        let mut create = Vec::new();
        let mut delete = Vec::new();
        for node in nodes {
            let node_name = name_of(&node.metadata);
            let backoff_key = format!("{}/{observed}/{node_name}", uid_of(&ds.metadata));
            let plan = plan_node(
                placement,
                spec,
                node,
                node_pods.get(node_name),
                hash,
                now,
                || {
                    let t = Instant::now();
                    if let Some(delay) = self.backoff.delay(&backoff_key, t) {
                        self.queue.add_after(key, delay);
                        return false;
                    }
                    self.backoff.next(&backoff_key, t);
                    true
                },
            );
            let ns = ns_of(&ds.metadata);
            for p in &plan.failed {
                self.recorder.warning(
                    ds,
                    "FailedDaemonPod",
                    format!(
                        "Found failed daemon pod {ns}/{p} on node {node_name}, will try to kill it"
                    ),
                );
            }
            for p in &plan.succeeded {
                self.recorder.normal(
                    ds,
                    "SucceededDaemonPod",
                    format!("Found succeeded daemon pod {ns}/{p} on node {node_name}, will try to delete it"),
                );
            }
            if plan.create {
                create.push(node_name.to_string());
            }
            delete.extend(plan.delete);
        }
        delete.extend(unscheduled_without_node(nodes, &node_pods));
        self.sync_nodes(ds, spec, key, delete, create, hash).await
    }

    /// Delete `delete` and create pods on `create` (slow-start batches), with expectations.
    async fn sync_nodes(
        &self,
        ds: &DaemonSet,
        spec: &DaemonSetSpec,
        key: &str,
        delete: Vec<String>,
        create: Vec<String>,
        hash: &str,
    ) -> anyhow::Result<()> {
        let creates = create.len().min(BURST_REPLICAS);
        let deletes = delete.len().min(BURST_REPLICAS);
        self.expectations
            .expect(key, creates as i64, deletes as i64);
        let template = pod_template(&spec.template, template_generation(ds), hash);
        let mut errs: Vec<String> = Vec::new();
        let (mut pos, mut batch) = (0usize, creates.min(1));
        while pos < creates {
            let before = errs.len();
            let results = futures::future::join_all(
                create[pos..pos + batch]
                    .iter()
                    .map(|node| self.create_pod(ds, &template, node)),
            )
            .await;
            for r in results {
                match r {
                    Ok(()) => {}
                    Err(CreateError::NamespaceTerminating) => {}
                    Err(CreateError::Other(e)) => {
                        self.expectations.creation_observed(key);
                        errs.push(e);
                    }
                }
            }
            let skipped = creates - (pos + batch);
            if errs.len() > before && skipped > 0 {
                for _ in 0..skipped {
                    self.expectations.creation_observed(key);
                }
                break;
            }
            pos += batch;
            batch = (2 * batch).min(creates - pos);
        }
        let results = futures::future::join_all(
            delete[..deletes]
                .iter()
                .map(|name| self.delete_pod(ds, name)),
        )
        .await;
        for r in results {
            if let Err((e, not_found)) = r {
                self.expectations.deletion_observed(key);
                if !not_found {
                    errs.push(e);
                }
            }
        }
        match aggregate(errs) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn create_pod(
        &self,
        ds: &DaemonSet,
        template: &PodTemplateSpec,
        node: &str,
    ) -> Result<(), CreateError> {
        let mut t = template.clone();
        let pspec = t.spec.get_or_insert_with(Default::default);
        pspec.affinity = Some(node_name_affinity(pspec.affinity.take(), node));
        let ns = ns_of(&ds.metadata);
        let pod = pod_from_template(
            &t,
            ns,
            &pod_name_prefix(name_of(&ds.metadata)),
            owner_ref(ds),
        );
        if pod.metadata.labels.as_ref().is_none_or(BTreeMap::is_empty) {
            return Err(CreateError::Other(
                "unable to create pods, no labels".into(),
            ));
        }
        match self.pod_api(ns).create(&PostParams::default(), &pod).await {
            Ok(created) => {
                self.recorder.normal(
                    ds,
                    "SuccessfulCreate",
                    format!("Created pod: {}", name_of(&created.metadata)),
                );
                Ok(())
            }
            Err(e) => {
                let terminating = matches!(&e, kube::Error::Api(s) if s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")));
                if terminating {
                    return Err(CreateError::NamespaceTerminating);
                }
                self.recorder.warning(
                    ds,
                    "FailedCreate",
                    format!("Error creating: {}", err_msg(&e)),
                );
                Err(CreateError::Other(err_msg(&e)))
            }
        }
    }

    /// Delete a pod; the error says whether it was already gone.
    async fn delete_pod(&self, ds: &DaemonSet, name: &str) -> Result<(), (String, bool)> {
        match self
            .pod_api(ns_of(&ds.metadata))
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => {
                self.recorder
                    .normal(ds, "SuccessfulDelete", format!("Deleted pod: {name}"));
                Ok(())
            }
            Err(e) if is_not_found(&e) => Err((err_msg(&e), true)),
            Err(e) => {
                self.recorder.warning(
                    ds,
                    "FailedDelete",
                    format!("Error deleting: {}", err_msg(&e)),
                );
                Err((format!("unable to delete pods: {}", err_msg(&e)), false))
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn update_status(
        &self,
        ds: &DaemonSet,
        spec: &DaemonSetSpec,
        placement: &Placement,
        selector: &Matcher,
        nodes: &[Arc<Node>],
        hash: &str,
        update_observed_generation: bool,
    ) -> anyhow::Result<()> {
        let node_pods = self.node_pods(ds, selector, false).await.map_err(|e| {
            anyhow!(
                "couldn't get node to daemon pod mapping for daemon set {:?}: {e:#}",
                name_of(&ds.metadata)
            )
        })?;
        let c = count_status(
            ds,
            spec,
            placement,
            nodes,
            &node_pods,
            hash,
            Timestamp::now(),
        );
        self.store_status(ds, c, update_observed_generation)
            .await
            .map_err(|e| anyhow!("error storing status for daemon set {}: {e:#}", ds_key(ds)))?;
        let min_ready = spec.min_ready_seconds.unwrap_or(0);
        if min_ready > 0 && c.ready != c.available {
            self.queue
                .add_after(ds_key(ds), Duration::from_secs(min_ready as u64));
        }
        Ok(())
    }

    async fn store_status(
        &self,
        ds: &DaemonSet,
        c: Counts,
        update_observed_generation: bool,
    ) -> anyhow::Result<()> {
        let st = ds.status.clone().unwrap_or_default();
        let generation = ds.metadata.generation.unwrap_or(0);
        if st.desired_number_scheduled == c.desired
            && st.current_number_scheduled == c.current
            && st.number_misscheduled == c.misscheduled
            && st.number_ready == c.ready
            && st.updated_number_scheduled.unwrap_or(0) == c.updated
            && st.number_available.unwrap_or(0) == c.available
            && st.number_unavailable.unwrap_or(0) == c.unavailable
            && st.observed_generation.unwrap_or(0) >= generation
        {
            return Ok(());
        }
        let api = self.ds_api(ns_of(&ds.metadata));
        let name = name_of(&ds.metadata);
        let mut obj = ds.clone();
        for attempt in 0..2 {
            let mut status = obj.status.clone().unwrap_or_default();
            apply_counts(&mut status, c);
            if update_observed_generation {
                status.observed_generation = Some(generation).filter(|g| *g != 0);
            }
            obj.status = Some(status);
            match api.replace_status(name, &PostParams::default(), &obj).await {
                Ok(_) => return Ok(()),
                Err(e) if attempt == 1 => return Err(anyhow!(err_msg(&e))),
                Err(_) => obj = api.get(name).await.map_err(|e| anyhow!(err_msg(&e)))?,
            }
        }
        Ok(())
    }

    /// The DaemonSet's revisions (adopting selected orphans, releasing unselected ones).
    async fn controlled_histories(
        &self,
        ds: &DaemonSet,
        selector: &Matcher,
    ) -> anyhow::Result<Vec<Arc<ControllerRevision>>> {
        let ns = ns_of(&ds.metadata);
        let ds_api = self.ds_api(ns);
        claim(
            &self.revision_api(ns),
            &ds.metadata,
            &owner_ref(ds),
            self.revisions.list_namespace(ns),
            |r: &ControllerRevision| matches(selector, r.metadata.labels.as_ref()),
            || recheck_owner(&ds_api, &ds.metadata),
        )
        .await
    }

    /// The current revision (created if no revision holds the template) and the old ones.
    async fn construct_history(
        &self,
        ds: &DaemonSet,
        spec: &DaemonSetSpec,
        selector: &Matcher,
    ) -> anyhow::Result<(Arc<ControllerRevision>, Vec<Arc<ControllerRevision>>)> {
        let api = self.revision_api(ns_of(&ds.metadata));
        let patch = RawExtension(template_patch(&spec.template));
        let mut current = Vec::new();
        let mut old = Vec::new();
        for mut h in self.controlled_histories(ds, selector).await? {
            if label(&h.metadata, REVISION_LABEL).is_none() {
                let mut update = (*h).clone();
                let name = name_of(&update.metadata).to_string();
                update
                    .metadata
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(REVISION_LABEL.into(), name.clone());
                h = Arc::new(
                    api.replace(&name, &PostParams::default(), &update)
                        .await
                        .map_err(|e| anyhow!(err_msg(&e)))?,
                );
            }
            if same_data(h.data.as_ref(), Some(&patch)) {
                current.push(h);
            } else {
                old.push(h);
            }
        }
        let next = old.iter().map(|r| r.revision).max().unwrap_or(0) + 1;
        let cur = if current.is_empty() {
            Arc::new(self.snapshot(ds, spec, next, patch).await?)
        } else {
            let cur = self.dedup_current(ds, selector, current).await?;
            if cur.revision < next {
                let mut update = (*cur).clone();
                update.revision = next;
                api.replace(name_of(&cur.metadata), &PostParams::default(), &update)
                    .await
                    .map_err(|e| anyhow!(err_msg(&e)))?;
            }
            cur
        };
        Ok((cur, old))
    }

    /// Record the template as a new revision; on a name collision with a different template,
    /// bump status.collisionCount (the next sync tries the new name).
    async fn snapshot(
        &self,
        ds: &DaemonSet,
        spec: &DaemonSetSpec,
        number: i64,
        patch: RawExtension,
    ) -> anyhow::Result<ControllerRevision> {
        let collision = ds.status.as_ref().and_then(|s| s.collision_count);
        let hash = template_hash(&spec.template, collision);
        let name = revision_name(name_of(&ds.metadata), &hash);
        let mut labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        labels.insert(REVISION_LABEL.into(), hash);
        let revision = ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: ds.metadata.namespace.clone(),
                labels: Some(labels),
                annotations: ds.metadata.annotations.clone().filter(|a| !a.is_empty()),
                owner_references: Some(vec![owner_ref(ds)]),
                ..Default::default()
            },
            data: Some(patch),
            revision: number,
        };
        let ns = ns_of(&ds.metadata);
        let api = self.revision_api(ns);
        match api.create(&PostParams::default(), &revision).await {
            Ok(r) => Ok(r),
            Err(e) if is_conflict(&e) => {
                let existing = api.get(&name).await.map_err(|e| anyhow!(err_msg(&e)))?;
                if same_data(existing.data.as_ref(), revision.data.as_ref()) {
                    return Ok(existing);
                }
                let ds_api = self.ds_api(ns);
                let mut fresh = ds_api
                    .get(name_of(&ds.metadata))
                    .await
                    .map_err(|e| anyhow!(err_msg(&e)))?;
                let fresh_collision = fresh.status.as_ref().and_then(|s| s.collision_count);
                if fresh_collision != collision {
                    anyhow::bail!(
                        "found a stale collision count ({}, expected {}) of DaemonSet {:?} while processing; will retry until it is updated",
                        collision.unwrap_or(0),
                        fresh_collision.unwrap_or(0),
                        name_of(&ds.metadata)
                    );
                }
                let status = fresh.status.get_or_insert_with(Default::default);
                status.collision_count = Some(collision.unwrap_or(0).saturating_add(1));
                ds_api
                    .replace_status(name_of(&ds.metadata), &PostParams::default(), &fresh)
                    .await
                    .map_err(|e| anyhow!(err_msg(&e)))?;
                tracing::info!(daemonset = %ds_key(ds), "hash collision; bumped collisionCount");
                Err(anyhow!(err_msg(&e)))
            }
            Err(e) => Err(anyhow!(err_msg(&e))),
        }
    }

    /// Keep the highest-numbered of several revisions holding the current template,
    /// relabelling pods to its hash before deleting the others.
    async fn dedup_current(
        &self,
        ds: &DaemonSet,
        selector: &Matcher,
        current: Vec<Arc<ControllerRevision>>,
    ) -> anyhow::Result<Arc<ControllerRevision>> {
        let mut keep = current[0].clone();
        for r in &current {
            if r.revision >= keep.revision {
                keep = r.clone();
            }
        }
        let keep_hash = label(&keep.metadata, REVISION_LABEL)
            .unwrap_or_default()
            .to_string();
        let ns = ns_of(&ds.metadata);
        for r in &current {
            if name_of(&r.metadata) == name_of(&keep.metadata) {
                continue;
            }
            for pod in self.daemon_pods(ds, selector).await? {
                if label(&pod.metadata, REVISION_LABEL) != Some(keep_hash.as_str()) {
                    let patch = json!({"metadata": {"labels": {REVISION_LABEL: keep_hash}}});
                    self.pod_api(ns)
                        .patch(
                            name_of(&pod.metadata),
                            &PatchParams::default(),
                            &Patch::Strategic(&patch),
                        )
                        .await
                        .map_err(|e| anyhow!(err_msg(&e)))?;
                }
            }
            match self
                .revision_api(ns)
                .delete(name_of(&r.metadata), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(anyhow!(err_msg(&e))),
            }
        }
        Ok(keep)
    }

    /// Delete the oldest old revisions no pod uses, beyond revisionHistoryLimit.
    async fn cleanup_history(
        &self,
        ds: &DaemonSet,
        spec: &DaemonSetSpec,
        selector: &Matcher,
        old: &[Arc<ControllerRevision>],
    ) -> anyhow::Result<()> {
        let keep = spec.revision_history_limit.unwrap_or(10).max(0) as usize;
        if old.len() <= keep {
            return Ok(());
        }
        let mut to_kill = old.len() - keep;
        let node_pods = self.node_pods(ds, selector, true).await?;
        let live: Vec<&str> = node_pods
            .values()
            .flatten()
            .filter_map(|p| label(&p.metadata, REVISION_LABEL))
            .filter(|h| !h.is_empty())
            .collect();
        let mut old = old.to_vec();
        crate::statefulset::sort_revisions(&mut old);
        let api = self.revision_api(ns_of(&ds.metadata));
        for r in old {
            if to_kill == 0 {
                break;
            }
            if label(&r.metadata, REVISION_LABEL).is_some_and(|h| live.contains(&h)) {
                continue;
            }
            match api
                .delete(name_of(&r.metadata), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(anyhow!(err_msg(&e))),
            }
            to_kill -= 1;
        }
        Ok(())
    }
}

enum CreateError {
    /// The namespace is being deleted: every later creation fails too, quietly.
    NamespaceTerminating,
    Other(String),
}

/// Write the counts into a status (omitempty fields left out when zero, as Go writes them).
fn apply_counts(status: &mut DaemonSetStatus, c: Counts) {
    let nz = |v: i32| Some(v).filter(|v| *v != 0);
    status.desired_number_scheduled = c.desired;
    status.current_number_scheduled = c.current;
    status.number_misscheduled = c.misscheduled;
    status.number_ready = c.ready;
    status.updated_number_scheduled = nz(c.updated);
    status.number_available = nz(c.available);
    status.number_unavailable = nz(c.unavailable);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DaemonSetUpdateStrategy, RollingUpdateDaemonSet};
    use k8s_openapi::api::core::v1::{Container, NodeSpec, PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

    fn node(name: &str, labels: &[(&str, &str)], taints: &[(&str, &str)]) -> Arc<Node> {
        Arc::new(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|(k, e)| Taint {
                            key: k.to_string(),
                            effect: e.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: None,
        })
    }

    fn ds(max_surge: i32, max_unavailable: i32) -> DaemonSet {
        DaemonSet {
            metadata: ObjectMeta {
                name: Some("agent".into()),
                namespace: Some("default".into()),
                uid: Some("ds-uid".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(DaemonSetSpec {
                selector: LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".into(), "agent".into())])),
                    ..Default::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(BTreeMap::from([("app".into(), "agent".into())])),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            image: Some("agent:1".into()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                },
                update_strategy: Some(DaemonSetUpdateStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDaemonSet {
                        max_surge: Some(IntOrString::Int(max_surge)),
                        max_unavailable: Some(IntOrString::Int(max_unavailable)),
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn pod(name: &str, node: &str, hash: &str, ready: bool, age_secs: i64) -> Arc<Pod> {
        let created = Timestamp::now() - Duration::from_secs(age_secs as u64);
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                labels: Some(BTreeMap::from([(REVISION_LABEL.into(), hash.into())])),
                creation_timestamp: Some(Time(created)),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    last_transition_time: Some(Time(created)),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    #[test]
    fn daemon_pods_tolerate_node_problems_but_not_other_taints() {
        let d = ds(0, 1);
        let p = Placement::of(d.spec.as_ref().unwrap());
        assert_eq!(p.check(&node("a", &[], &[])), (true, true));
        // Node problems are tolerated.
        for (k, e) in [
            ("node.kubernetes.io/not-ready", "NoExecute"),
            ("node.kubernetes.io/unreachable", "NoExecute"),
            ("node.kubernetes.io/disk-pressure", "NoSchedule"),
            ("node.kubernetes.io/unschedulable", "NoSchedule"),
        ] {
            assert_eq!(p.check(&node("a", &[], &[(k, e)])), (true, true), "{k}");
        }
        // Not-ready NoSchedule is not (only its NoExecute form is), network-unavailable only
        // for host-network pods; a NoSchedule taint lets running pods stay, NoExecute not.
        assert_eq!(
            p.check(&node(
                "a",
                &[],
                &[("node.kubernetes.io/not-ready", "NoSchedule")]
            )),
            (false, true)
        );
        assert_eq!(
            p.check(&node(
                "a",
                &[],
                &[("node.kubernetes.io/network-unavailable", "NoSchedule")]
            )),
            (false, true)
        );
        assert_eq!(
            p.check(&node("a", &[], &[("dedicated", "NoExecute")])),
            (false, false)
        );
        let mut hn = ds(0, 1);
        hn.spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .host_network = Some(true);
        let p = Placement::of(hn.spec.as_ref().unwrap());
        assert_eq!(
            p.check(&node(
                "a",
                &[],
                &[("node.kubernetes.io/network-unavailable", "NoSchedule")]
            )),
            (true, true)
        );
        // The tolerations are added once, and the pod template gets them.
        let t = pod_template(&hn.spec.as_ref().unwrap().template, Some(3), "h");
        let again = pod_template(&t, Some(3), "h");
        assert_eq!(
            t.spec.as_ref().unwrap().tolerations.as_ref().unwrap().len(),
            7
        );
        assert_eq!(again.spec.unwrap().tolerations.unwrap().len(), 7);
        let labels = t.metadata.unwrap().labels.unwrap();
        assert_eq!(labels[TEMPLATE_GENERATION_LABEL], "3");
        assert_eq!(labels[REVISION_LABEL], "h");
    }

    #[test]
    fn node_selector_and_required_affinity_choose_nodes() {
        let mut d = ds(0, 1);
        let ps = d.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
        ps.node_selector = Some(BTreeMap::from([("disk".into(), "ssd".into())]));
        ps.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![
                        NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "cpus".into(),
                                operator: "Gt".into(),
                                values: Some(vec!["4".into()]),
                            }]),
                            match_fields: None,
                        },
                        NodeSelectorTerm {
                            match_expressions: None,
                            match_fields: Some(vec![NodeSelectorRequirement {
                                key: "metadata.name".into(),
                                operator: "In".into(),
                                values: Some(vec!["special".into()]),
                            }]),
                        },
                    ],
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let p = Placement::of(d.spec.as_ref().unwrap());
        assert!(
            p.check(&node("a", &[("disk", "ssd"), ("cpus", "8")], &[]))
                .0
        );
        assert!(
            !p.check(&node("a", &[("disk", "ssd"), ("cpus", "2")], &[]))
                .0
        );
        assert!(
            !p.check(&node("a", &[("disk", "hdd"), ("cpus", "8")], &[]))
                .0
        );
        assert!(p.check(&node("special", &[("disk", "ssd")], &[])).0);
        assert_eq!(
            p.check(&node("a", &[("cpus", "8")], &[])),
            (false, false),
            "a selector mismatch evicts"
        );
    }

    #[test]
    fn pods_target_their_affinity_node() {
        let aff = node_name_affinity(None, "n1");
        let mut p = Pod {
            spec: Some(PodSpec {
                affinity: Some(aff.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(target_node(&p).as_deref(), Some("n1"));
        // Replacing keeps other affinity but swaps the required terms.
        let aff2 = node_name_affinity(Some(aff), "n2");
        let terms = &aff2
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms;
        assert_eq!(terms.len(), 1);
        assert_eq!(
            terms[0].match_fields.as_ref().unwrap()[0]
                .values
                .as_ref()
                .unwrap()[0],
            "n2"
        );
        p.spec.as_mut().unwrap().node_name = Some("bound".into());
        assert_eq!(target_node(&p).as_deref(), Some("bound"));
    }

    #[test]
    fn node_plans_create_delete_and_prune() {
        let d = ds(0, 1);
        let spec = d.spec.as_ref().unwrap();
        let p = Placement::of(spec);
        let now = Timestamp::now();
        let n = node("n1", &[], &[]);
        let plan = plan_node(&p, spec, &n, None, "h", now, || true);
        assert!(plan.create && plan.delete.is_empty());
        // Two running pods: keep the oldest.
        let pods = vec![
            pod("young", "n1", "h", true, 1),
            pod("old", "n1", "h", true, 100),
        ];
        let plan = plan_node(&p, spec, &n, Some(&pods), "h", now, || true);
        assert_eq!(plan.delete, ["young"]);
        assert!(!plan.create);
        // A failed pod is deleted unless backing off.
        let mut failed = (*pod("f", "n1", "h", false, 5)).clone();
        failed.status.as_mut().unwrap().phase = Some("Failed".into());
        let pods = vec![Arc::new(failed)];
        let plan = plan_node(&p, spec, &n, Some(&pods), "h", now, || true);
        assert_eq!(
            (plan.delete.clone(), plan.failed.clone()),
            (vec!["f".to_string()], vec!["f".to_string()])
        );
        let plan = plan_node(&p, spec, &n, Some(&pods), "h", now, || false);
        assert!(plan.delete.is_empty());
        // A node the pod must leave.
        let tainted = node("n1", &[], &[("x", "NoExecute")]);
        let pods = vec![pod("a", "n1", "h", true, 5)];
        let plan = plan_node(&p, spec, &tainted, Some(&pods), "h", now, || true);
        assert_eq!(plan.delete, ["a"]);
    }

    #[test]
    fn rolling_update_respects_max_unavailable() {
        let d = ds(0, 1);
        let spec = d.spec.as_ref().unwrap();
        let p = Placement::of(spec);
        let nodes = vec![
            node("n1", &[], &[]),
            node("n2", &[], &[]),
            node("n3", &[], &[]),
        ];
        let now = Timestamp::now();
        let all_old: NodePods = ["n1", "n2", "n3"]
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    vec![pod(&format!("old-{n}"), n, "old", true, 50)],
                )
            })
            .collect();
        let (del, create) =
            plan_rolling_update(&d, spec, &p, &nodes, all_old.clone(), "new", now).unwrap();
        assert_eq!(del.len(), 1, "one old pod at a time");
        assert!(create.is_empty());
        // One new pod not yet ready: no further deletions.
        let mut some = all_old.clone();
        some.insert("n1".into(), vec![pod("new-n1", "n1", "new", false, 1)]);
        let (del, _) = plan_rolling_update(&d, spec, &p, &nodes, some.clone(), "new", now).unwrap();
        assert!(del.is_empty());
        // Once it is available the next old pod goes.
        some.insert("n1".into(), vec![pod("new-n1", "n1", "new", true, 1)]);
        let (del, _) = plan_rolling_update(&d, spec, &p, &nodes, some, "new", now).unwrap();
        assert_eq!(del.len(), 1);
        assert_ne!(del[0], "new-n1");
        // An unavailable old pod is replaced regardless of the budget.
        let mut broken = all_old;
        broken.insert("n2".into(), vec![pod("old-n2", "n2", "old", false, 50)]);
        let (del, _) = plan_rolling_update(&d, spec, &p, &nodes, broken, "new", now).unwrap();
        assert!(del.contains(&"old-n2".to_string()));
    }

    #[test]
    fn rolling_update_surges_new_pods_beside_old_ones() {
        let d = ds(1, 0);
        let spec = d.spec.as_ref().unwrap();
        let p = Placement::of(spec);
        let nodes = vec![node("n1", &[], &[]), node("n2", &[], &[])];
        let now = Timestamp::now();
        let all_old: NodePods = ["n1", "n2"]
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    vec![pod(&format!("old-{n}"), n, "old", true, 50)],
                )
            })
            .collect();
        let (del, create) =
            plan_rolling_update(&d, spec, &p, &nodes, all_old.clone(), "new", now).unwrap();
        assert!(del.is_empty());
        assert_eq!(create, ["n1"]);
        // With a surged pod available beside the old one, the old one goes.
        let mut surged = all_old;
        surged
            .get_mut("n1")
            .unwrap()
            .push(pod("new-n1", "n1", "new", true, 1));
        let (del, create) = plan_rolling_update(&d, spec, &p, &nodes, surged, "new", now).unwrap();
        assert_eq!(del, ["old-n1"]);
        assert_eq!(create, ["n2"]);
    }

    #[test]
    fn status_counts_follow_kubernetes() {
        let mut d = ds(0, 1);
        d.spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .node_selector = Some(BTreeMap::from([("role".into(), "x".into())]));
        let spec = d.spec.as_ref().unwrap();
        let p = Placement::of(spec);
        let nodes = vec![
            node("n1", &[("role", "x")], &[]),
            node("n2", &[("role", "x")], &[]),
            node("n3", &[], &[]),
        ];
        let np: NodePods = [
            ("n1".to_string(), vec![pod("a", "n1", "h", true, 10)]),
            ("n3".to_string(), vec![pod("c", "n3", "old", false, 10)]),
        ]
        .into_iter()
        .collect();
        let c = count_status(&d, spec, &p, &nodes, &np, "h", Timestamp::now());
        assert_eq!(
            c,
            Counts {
                desired: 2,
                current: 1,
                misscheduled: 1,
                ready: 1,
                updated: 1,
                available: 1,
                unavailable: 1
            }
        );
        let mut st = DaemonSetStatus::default();
        apply_counts(&mut st, Counts::default());
        assert_eq!(st.number_available, None);
        assert_eq!(st.desired_number_scheduled, 0);
    }

    #[test]
    fn max_values_scale_with_the_node_count() {
        assert_eq!(
            scaled(&IntOrString::String("25%".into()), 10, true).unwrap(),
            3
        );
        assert_eq!(
            scaled(&IntOrString::String("25%".into()), 10, false).unwrap(),
            2
        );
        assert_eq!(scaled(&IntOrString::Int(2), 10, true).unwrap(), 2);
        assert!(scaled(&IntOrString::String("x".into()), 10, true).is_err());
        assert!(allows_surge(ds(1, 0).spec.as_ref().unwrap()));
        assert!(!allows_surge(ds(0, 1).spec.as_ref().unwrap()));
    }

    #[test]
    fn failed_pod_backoff_doubles() {
        let b = Backoff::default();
        let t = Instant::now();
        assert_eq!(b.delay("k", t), None);
        b.next("k", t);
        assert_eq!(b.delay("k", t), Some(Duration::from_secs(1)));
        assert_eq!(b.delay("k", t + Duration::from_secs(2)), None);
        b.next("k", t + Duration::from_secs(2));
        assert_eq!(
            b.delay("k", t + Duration::from_secs(3)),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn template_hashes_depend_on_template_and_collisions() {
        let d = ds(0, 1);
        let t = &d.spec.as_ref().unwrap().template;
        let h = template_hash(t, None);
        assert_eq!(h, template_hash(t, None));
        assert_ne!(h, template_hash(t, Some(1)));
        let mut t2 = t.clone();
        t2.spec.as_mut().unwrap().containers[0].image = Some("agent:2".into());
        assert_ne!(h, template_hash(&t2, None));
        let mut p = (*pod("a", "n1", &h, true, 1)).clone();
        assert!(is_pod_updated(&p, &h, None));
        p.metadata.labels = Some(BTreeMap::from([(
            TEMPLATE_GENERATION_LABEL.into(),
            "2".into(),
        )]));
        assert!(is_pod_updated(&p, &h, Some(2)));
        assert!(!is_pod_updated(&p, &h, Some(3)));
    }
}
