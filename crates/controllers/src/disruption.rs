//! The disruption controller (Kubernetes' `disruption-controller`): keeps every
//! PodDisruptionBudget's status current, which the eviction API consults. For the pods its
//! selector picks it counts the healthy ones (Ready, not being deleted, not just evicted),
//! works out how many must stay healthy (`minAvailable`, or `maxUnavailable` off the expected
//! count; percentages are of the expected count: the summed scale of the pods' controllers,
//! read from Deployments, ReplicaSets, StatefulSets and ReplicationControllers or, for any
//! other controller, its scale subresource) and so how many disruptions are allowed, with
//! `observedGeneration` and the `DisruptionAllowed` condition (SufficientPods,
//! InsufficientPods, or SyncFailed when the status could not be worked out, which also
//! allows no disruption). Pods the eviction API recorded under `disruptedPods` that were not
//! deleted within two minutes are dropped from it again.
//!
//! It also clears stale `DisruptionTarget` pod conditions: a pod marked for disruption that
//! is still not being deleted two minutes later gets the condition set back to False.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use capstan_api::selector::LabelSelector as Matcher;
use capstan_runtime::{Informer, Queue, Recorder};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodCondition, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, OwnerReference, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, GroupVersionKind, PostParams};

use crate::util;
use crate::Ctx;

/// How long a pod the eviction API disrupted may take to be marked for deletion.
const DELETION_TIMEOUT: Duration = Duration::from_secs(2 * 60);
/// How long a DisruptionTarget condition may stand on a pod that is not being deleted.
const STALE_POD_DISRUPTION_TIMEOUT: Duration = Duration::from_secs(2 * 60);
const CONDITION: &str = "DisruptionAllowed";
const SUFFICIENT_PODS: &str = "SufficientPods";
const INSUFFICIENT_PODS: &str = "InsufficientPods";
const SYNC_FAILED: &str = "SyncFailed";

struct Controller {
    client: kube::Client,
    pdbs: Arc<Informer<PodDisruptionBudget>>,
    pods: Arc<Informer<Pod>>,
    rcs: Arc<Informer<ReplicationController>>,
    replicasets: Arc<Informer<ReplicaSet>>,
    deployments: Arc<Informer<Deployment>>,
    statefulsets: Arc<Informer<StatefulSet>>,
    recorder: Recorder,
    queue: Arc<Queue>,
}

fn pdb_key(p: &PodDisruptionBudget) -> String {
    capstan_runtime::key(
        p.metadata.namespace.as_deref(),
        p.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// A PDB's selector as Kubernetes reads it (`LabelSelectorAsSelector`): none selects nothing,
/// an empty one everything.
fn pdb_matcher(pdb: &PodDisruptionBudget) -> Result<Matcher, String> {
    let sel = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
    let v = serde_json::to_value(sel).map_err(|e| e.to_string())?;
    Matcher::from_json(&v).map_err(|e| e.to_string())
}

/// The PDBs (sorted by name) whose selector picks the pod.
fn pdbs_for_pod(pdbs: &Informer<PodDisruptionBudget>, pod: &Pod) -> Vec<Arc<PodDisruptionBudget>> {
    let mut out = Vec::new();
    pdbs.for_each_in(pod.metadata.namespace.as_deref().unwrap_or_default(), |p| {
        if let Ok(m) = pdb_matcher(p) {
            if util::matches(&m, pod.metadata.labels.as_ref()) {
                out.push(p.clone());
            }
        }
    });
    out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    out
}

/// Whether a pod carries a DisruptionTarget condition that has gone stale, and how long
/// until it counts as stale.
fn stale_disruption_condition(pod: &Pod, now: Timestamp) -> Option<Duration> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let st = pod.status.as_ref()?;
    let c = st
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")?;
    let terminal = matches!(st.phase.as_deref(), Some("Succeeded") | Some("Failed"));
    if c.status != "True" || c.reason.as_deref() == Some("TerminationByKubelet") || terminal {
        return None;
    }
    let since = c
        .last_transition_time
        .as_ref()
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
    let elapsed = Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO);
    Some(STALE_POD_DISRUPTION_TIMEOUT.saturating_sub(elapsed))
}

fn now_seconds() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}

pub fn start(ctx: &Ctx) {
    let queue = Queue::new("disruption");
    let stale_queue = Queue::new("stale_pod_disruption");
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        pdbs: ctx.informers.get::<PodDisruptionBudget>(),
        pods: ctx.informers.get::<Pod>(),
        rcs: ctx.informers.get::<ReplicationController>(),
        replicasets: ctx.informers.get::<ReplicaSet>(),
        deployments: ctx.informers.get::<Deployment>(),
        statefulsets: ctx.informers.get::<StatefulSet>(),
        recorder: ctx.recorder("controllermanager"),
        queue: queue.clone(),
    });

    let q = queue.clone();
    c.pdbs.on_change(move |ch| q.add(pdb_key(ch.object())));

    let (q, sq, pdbs, recorder) = (
        queue.clone(),
        stale_queue.clone(),
        c.pdbs.clone(),
        c.recorder.clone(),
    );
    c.pods.on_change(move |ch| {
        let pod = ch.object();
        let matching = pdbs_for_pod(&pdbs, pod);
        if matching.len() > 1 {
            recorder.warning(
                &**pod,
                "MultiplePodDisruptionBudgets",
                format!(
                    "Pod {:?}/{:?} matches multiple PodDisruptionBudgets.  Chose {:?} arbitrarily.",
                    pod.metadata.namespace.as_deref().unwrap_or_default(),
                    pod.metadata.name.as_deref().unwrap_or_default(),
                    matching[0].metadata.name.as_deref().unwrap_or_default(),
                ),
            );
        }
        for p in &matching {
            q.add(pdb_key(p));
        }
        if matches!(ch, capstan_runtime::Change::Delete(_)) {
            return;
        }
        if let Some(wait) = stale_disruption_condition(pod, Timestamp::now()) {
            sq.add_after(
                capstan_runtime::key(
                    pod.metadata.namespace.as_deref(),
                    pod.metadata.name.as_deref().unwrap_or_default(),
                ),
                wait,
            );
        }
    });

    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        c.pods.wait_synced().await;
        c.pdbs.wait_synced().await;
        c.rcs.wait_synced().await;
        c.replicasets.wait_synced().await;
        c.deployments.wait_synced().await;
        c.statefulsets.wait_synced().await;
        let c2 = c.clone();
        queue.run_workers(workers, move |key| {
            let c = c2.clone();
            async move { c.sync(&key).await }
        });
        let sq = stale_queue.clone();
        stale_queue.run_workers(1, move |key| {
            let (c, sq) = (c.clone(), sq.clone());
            async move { c.sync_stale_pod(&key, &sq).await }
        });
    });
}

/// A parsed `apiVersion` (Kubernetes' ParseGroupVersion): (group, version).
fn parse_group_version(gv: &str) -> anyhow::Result<(String, String)> {
    if gv.is_empty() || gv == "/" {
        return Ok((String::new(), String::new()));
    }
    match gv.split_once('/') {
        None => Ok((String::new(), gv.to_string())),
        Some((g, v)) if !v.contains('/') => Ok((g.to_string(), v.to_string())),
        Some(_) => anyhow::bail!("unexpected GroupVersion string: {gv}"),
    }
}

fn is_kind(r: &OwnerReference, kind: &str, groups: &[&str]) -> anyhow::Result<bool> {
    let (group, _) = parse_group_version(&r.api_version)?;
    Ok(r.kind == kind && groups.contains(&group.as_str()))
}

/// `intstr.GetScaledValueFromIntOrPercent` rounding up.
fn scaled_value(v: &IntOrString, total: i32) -> anyhow::Result<i32> {
    match v {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let Some(num) = s.strip_suffix('%') else {
                anyhow::bail!(
                    "invalid value for IntOrString: invalid type: string is not a percentage"
                );
            };
            let n: i64 = num.parse().map_err(|_| {
                anyhow::anyhow!(
                    "invalid value for IntOrString: invalid value {s:?}: strconv.Atoi: parsing {num:?}: invalid syntax"
                )
            })?;
            Ok(((n as f64) * f64::from(total) / 100.0).ceil() as i32)
        }
    }
}

/// (expected pods, desired healthy) from the spec and the expected scale (which is asked
/// for only when a percentage or maxUnavailable needs it).
fn desired_healthy(
    pdb: &PodDisruptionBudget,
    pod_count: i32,
    expected_scale: Option<i32>,
) -> anyhow::Result<(i32, i32)> {
    let spec = pdb.spec.clone().unwrap_or_default();
    if let Some(max) = spec.max_unavailable.as_ref() {
        let expected = expected_scale.unwrap_or(0);
        let max = scaled_value(max, expected)?;
        return Ok((expected, (expected - max).max(0)));
    }
    match spec.min_available.as_ref() {
        Some(IntOrString::Int(n)) => Ok((pod_count, *n)),
        Some(v) => {
            let expected = expected_scale.unwrap_or(0);
            Ok((expected, scaled_value(v, expected)?))
        }
        None => Ok((0, 0)),
    }
}

/// Whether the expected scale of the pods' controllers is needed.
fn needs_scale(pdb: &PodDisruptionBudget) -> bool {
    let spec = pdb.spec.as_ref();
    spec.and_then(|s| s.max_unavailable.as_ref()).is_some()
        || matches!(
            spec.and_then(|s| s.min_available.as_ref()),
            Some(IntOrString::String(_))
        )
}

/// The pods recorded as disrupted that are still expected to be deleted soon, and when the
/// next of them is due.
fn disrupted_pods(
    pods: &[Arc<Pod>],
    pdb: &PodDisruptionBudget,
    now: Timestamp,
    mut not_deleted: impl FnMut(&Pod),
) -> (BTreeMap<String, Time>, Option<Timestamp>) {
    let mut out = BTreeMap::new();
    let mut recheck: Option<Timestamp> = None;
    let Some(recorded) = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()) else {
        return (out, recheck);
    };
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(at) = recorded.get(&name) else {
            continue;
        };
        let due = at.0 + DELETION_TIMEOUT;
        if due < now {
            not_deleted(pod);
        } else {
            if recheck.is_none_or(|r| due < r) {
                recheck = Some(due);
            }
            out.insert(name, at.clone());
        }
    }
    (out, recheck)
}

/// Ready pods that are neither being deleted nor about to be (recently disrupted).
fn count_healthy(pods: &[Arc<Pod>], disrupted: &BTreeMap<String, Time>, now: Timestamp) -> i32 {
    let mut n = 0;
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        if disrupted
            .get(name)
            .is_some_and(|at| at.0 + DELETION_TIMEOUT > now)
        {
            continue;
        }
        if util::is_pod_ready(pod) {
            n += 1;
        }
    }
    n
}

/// Set a condition as `meta.SetStatusCondition` does: the transition time moves only when
/// the status changes.
fn set_condition(conditions: &mut Vec<Condition>, new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        None => conditions.push(new),
        Some(c) => {
            if c.status != new.status {
                c.status = new.status;
                c.last_transition_time = new.last_transition_time;
            }
            c.reason = new.reason;
            c.message = new.message;
            c.observed_generation = new.observed_generation;
        }
    }
}

fn allowed_condition(allowed: i32, generation: Option<i64>, now: Timestamp) -> Condition {
    let (status, reason) = if allowed > 0 {
        ("True", SUFFICIENT_PODS)
    } else {
        ("False", INSUFFICIENT_PODS)
    };
    Condition {
        type_: CONDITION.into(),
        status: status.into(),
        reason: reason.into(),
        message: String::new(),
        observed_generation: generation,
        last_transition_time: Time(now),
    }
}

/// Whether the DisruptionAllowed condition agrees with the status (Kubernetes'
/// ConditionsAreUpToDate).
fn conditions_up_to_date(pdb: &PodDisruptionBudget) -> bool {
    let Some(st) = pdb.status.as_ref() else {
        return false;
    };
    let Some(c) = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == CONDITION)
    else {
        return false;
    };
    if st.observed_generation != pdb.metadata.generation {
        return false;
    }
    if st.disruptions_allowed > 0 {
        c.status == "True" && c.reason == SUFFICIENT_PODS
    } else {
        c.status == "False" && c.reason == INSUFFICIENT_PODS
    }
}

/// The status a PDB should have, or None when it already has it.
fn new_status(
    pdb: &PodDisruptionBudget,
    current_healthy: i32,
    desired_healthy: i32,
    expected: i32,
    disrupted: BTreeMap<String, Time>,
    now: Timestamp,
) -> Option<PodDisruptionBudgetStatus> {
    let mut allowed = current_healthy - desired_healthy;
    if expected <= 0 || allowed <= 0 {
        allowed = 0;
    }
    let old = pdb.status.clone().unwrap_or_default();
    let disrupted = (!disrupted.is_empty()).then_some(disrupted);
    let same_disrupted = old.disrupted_pods.clone().filter(|d| !d.is_empty()) == disrupted.clone();
    if old.current_healthy == current_healthy
        && old.desired_healthy == desired_healthy
        && old.expected_pods == expected
        && old.disruptions_allowed == allowed
        && same_disrupted
        && old.observed_generation == pdb.metadata.generation
        && conditions_up_to_date(pdb)
    {
        return None;
    }
    let mut conditions = old.conditions.unwrap_or_default();
    set_condition(
        &mut conditions,
        allowed_condition(allowed, pdb.metadata.generation, now),
    );
    Some(PodDisruptionBudgetStatus {
        current_healthy,
        desired_healthy,
        expected_pods: expected,
        disruptions_allowed: allowed,
        disrupted_pods: disrupted,
        observed_generation: pdb.metadata.generation,
        conditions: Some(conditions),
    })
}

/// Go's `%v` of a `*metav1.LabelSelector` (its generated String method).
fn go_selector_string(sel: Option<&LabelSelector>) -> String {
    let Some(sel) = sel else {
        return "nil".into();
    };
    let labels: String = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}: {v},"))
        .collect();
    let exprs: String = sel
        .match_expressions
        .iter()
        .flatten()
        .map(|e| {
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                e.key,
                e.operator,
                e.values.clone().unwrap_or_default().join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"
    )
}

impl Controller {
    async fn sync(&self, key: &str) -> anyhow::Result<()> {
        let Some(pdb) = self.pdbs.get_key(key) else {
            return Ok(());
        };
        match self.try_sync(key, &pdb).await {
            Ok(()) => Ok(()),
            Err(e)
                if e.downcast_ref::<kube::Error>()
                    .is_some_and(util::is_conflict) =>
            {
                Err(e)
            }
            Err(e) => {
                tracing::info!(pdb = key, error = %format!("{e:#}"), "failed to sync PodDisruptionBudget");
                self.fail_safe(&pdb, &format!("{e:#}")).await
            }
        }
    }

    async fn try_sync(&self, key: &str, pdb: &PodDisruptionBudget) -> anyhow::Result<()> {
        let ns = pdb.metadata.namespace.as_deref().unwrap_or_default();
        let matcher = match pdb_matcher(pdb) {
            Ok(m) => m,
            Err(e) => {
                self.recorder
                    .warning(pdb, "NoPods", format!("Failed to get pods: {e}"));
                anyhow::bail!("{e}");
            }
        };
        let mut pods = Vec::new();
        self.pods.for_each_in(ns, |p| {
            if util::matches(&matcher, p.metadata.labels.as_ref()) {
                pods.push(p.clone());
            }
        });
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        if pods.is_empty() {
            self.recorder
                .normal(pdb, "NoPods", "No matching pods found");
        }

        let scale = if needs_scale(pdb) {
            match self.expected_scale(&pods).await {
                Ok((scale, unmanaged)) => {
                    if !unmanaged.is_empty() {
                        self.recorder.warning(
                            pdb,
                            "UnmanagedPods",
                            format!(
                                "Pods selected by this PodDisruptionBudget (selector: {}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.",
                                go_selector_string(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()))
                            ),
                        );
                    }
                    Some(scale)
                }
                Err(e) => {
                    self.recorder.warning(
                        pdb,
                        "CalculateExpectedPodCountFailed",
                        format!("Failed to calculate the number of expected pods: {e:#}"),
                    );
                    return Err(e);
                }
            }
        } else {
            None
        };
        let (expected, desired) = match desired_healthy(pdb, pods.len() as i32, scale) {
            Ok(v) => v,
            Err(e) => {
                self.recorder.warning(
                    pdb,
                    "CalculateExpectedPodCountFailed",
                    format!("Failed to calculate the number of expected pods: {e:#}"),
                );
                return Err(e);
            }
        };

        let now = now_seconds();
        let pdb_ns = ns.to_string();
        let (disrupted, recheck) = disrupted_pods(&pods, pdb, now, |pod| {
            self.recorder.warning(
                pod,
                "NotDeleted",
                // Kubernetes names the PDB by its namespace twice here.
                format!("Pod was expected by PDB {pdb_ns}/{pdb_ns} to be deleted but it wasn't"),
            );
        });
        let healthy = count_healthy(&pods, &disrupted, now);
        if let Some(status) = new_status(pdb, healthy, desired, expected, disrupted, now) {
            self.write_status(pdb, status).await?;
        }
        if let Some(at) = recheck {
            let wait =
                Duration::try_from(at.duration_since(Timestamp::now())).unwrap_or(Duration::ZERO);
            self.queue.add_after(key.to_string(), wait);
        }
        Ok(())
    }

    async fn write_status(
        &self,
        pdb: &PodDisruptionBudget,
        status: PodDisruptionBudgetStatus,
    ) -> anyhow::Result<()> {
        let ns = pdb.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), ns);
        let mut new = pdb.clone();
        new.status = Some(status);
        api.replace_status(
            pdb.metadata.name.as_deref().unwrap_or_default(),
            &PostParams::default(),
            &new,
        )
        .await?;
        Ok(())
    }

    /// Allow no disruption when the status could not be worked out.
    async fn fail_safe(&self, pdb: &PodDisruptionBudget, message: &str) -> anyhow::Result<()> {
        let mut status = pdb.status.clone().unwrap_or_default();
        status.disruptions_allowed = 0;
        let mut conditions = status.conditions.take().unwrap_or_default();
        set_condition(
            &mut conditions,
            Condition {
                type_: CONDITION.into(),
                status: "False".into(),
                reason: SYNC_FAILED.into(),
                message: message.to_string(),
                observed_generation: status.observed_generation,
                last_transition_time: Time(now_seconds()),
            },
        );
        status.conditions = Some(conditions);
        self.write_status(pdb, status).await
    }

    /// The summed scale of the controllers of the pods, and the pods without a controller.
    async fn expected_scale(&self, pods: &[Arc<Pod>]) -> anyhow::Result<(i32, Vec<String>)> {
        let mut scales: BTreeMap<String, i32> = BTreeMap::new();
        let mut unmanaged = Vec::new();
        for pod in pods {
            let Some(r) = util::controller_ref(&pod.metadata) else {
                unmanaged.push(pod.metadata.name.clone().unwrap_or_default());
                continue;
            };
            if scales.contains_key(&r.uid) {
                continue;
            }
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            match self.find_controller(r, ns).await? {
                Some((uid, scale)) => {
                    scales.insert(uid, scale);
                }
                None => anyhow::bail!(
                    "found no controllers for pod {:?}",
                    pod.metadata.name.as_deref().unwrap_or_default()
                ),
            }
        }
        Ok((scales.values().sum(), unmanaged))
    }

    /// A pod's controller and its scale, tried as Kubernetes' finders are: a
    /// ReplicationController, a Deployment (through its ReplicaSet), a ReplicaSet, a
    /// StatefulSet, then any resource with a scale subresource.
    async fn find_controller(
        &self,
        r: &OwnerReference,
        ns: &str,
    ) -> anyhow::Result<Option<(String, i32)>> {
        if is_kind(r, "ReplicationController", &[""])? {
            if let Some(rc) = self.rcs.get(ns, &r.name) {
                if rc.metadata.uid.as_deref() == Some(r.uid.as_str()) {
                    let n = rc.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    return Ok(Some((r.uid.clone(), n)));
                }
            }
        }
        if is_kind(r, "ReplicaSet", &["apps", "extensions"])? {
            if let Some(rs) = self.replicasets.get(ns, &r.name) {
                if rs.metadata.uid.as_deref() == Some(r.uid.as_str()) {
                    // A Deployment's ReplicaSet counts as its Deployment.
                    if let Some(dr) = util::controller_ref(&rs.metadata) {
                        if is_kind(dr, "Deployment", &["apps", "extensions"])? {
                            if let Some(d) = self.deployments.get(ns, &dr.name) {
                                if d.metadata.uid.as_deref() == Some(dr.uid.as_str()) {
                                    let n = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                                    return Ok(Some((dr.uid.clone(), n)));
                                }
                            }
                        }
                    }
                    let owned_by_deployment = util::controller_ref(&rs.metadata)
                        .is_some_and(|dr| dr.kind == "Deployment");
                    if !owned_by_deployment {
                        let n = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                        return Ok(Some((r.uid.clone(), n)));
                    }
                }
            }
        }
        if is_kind(r, "StatefulSet", &["apps"])? {
            if let Some(ss) = self.statefulsets.get(ns, &r.name) {
                if ss.metadata.uid.as_deref() == Some(r.uid.as_str()) {
                    let n = ss.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    return Ok(Some((r.uid.clone(), n)));
                }
            }
        }
        self.scale_controller(r, ns).await
    }

    /// Any controller through its scale subresource.
    async fn scale_controller(
        &self,
        r: &OwnerReference,
        ns: &str,
    ) -> anyhow::Result<Option<(String, i32)>> {
        let (group, version) = parse_group_version(&r.api_version)?;
        let gvk = GroupVersionKind::gvk(&group, &version, &r.kind);
        let no_match = || {
            let gv = if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            };
            anyhow::anyhow!("no matches for kind {:?} in version {gv:?}", r.kind)
        };
        let (ar, caps) = match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok(v) => v,
            Err(kube::Error::Discovery(_)) => return Err(no_match()),
            Err(e) if util::is_not_found(&e) => return Err(no_match()),
            Err(e) => return Err(e.into()),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &ar);
        match api.get_scale(&r.name).await {
            Ok(scale) => {
                if scale.metadata.uid.as_deref() != Some(r.uid.as_str()) {
                    return Ok(None);
                }
                let n = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
                Ok(Some((r.uid.clone(), n)))
            }
            Err(e) if util::is_not_found(&e) => {
                let has_scale = caps.subresources.iter().any(|(sr, _)| sr.plural == "scale");
                if !has_scale {
                    let gr = if ar.group.is_empty() {
                        ar.plural.clone()
                    } else {
                        format!("{}.{}", ar.plural, ar.group)
                    };
                    anyhow::bail!("{gr} does not implement the scale subresource");
                }
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Set a stale DisruptionTarget condition of a pod back to False.
    async fn sync_stale_pod(&self, key: &str, stale_queue: &Arc<Queue>) -> anyhow::Result<()> {
        let Some(pod) = self.pods.get_key(key) else {
            return Ok(());
        };
        let Some(wait) = stale_disruption_condition(&pod, Timestamp::now()) else {
            return Ok(());
        };
        if !wait.is_zero() {
            stale_queue.add_after(key.to_string(), wait);
            return Ok(());
        }
        let mut new = (*pod).clone();
        let Some(conditions) = new.status.as_mut().and_then(|s| s.conditions.as_mut()) else {
            return Ok(());
        };
        for c in conditions
            .iter_mut()
            .filter(|c| c.type_ == "DisruptionTarget")
        {
            *c = PodCondition {
                type_: "DisruptionTarget".into(),
                status: "False".into(),
                last_transition_time: Some(Time(now_seconds())),
                ..Default::default()
            };
        }
        let (ns, name) = capstan_runtime::split_key(key);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        match api.replace_status(name, &PostParams::default(), &new).await {
            Ok(_) => Ok(()),
            Err(e) if util::is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};

    fn pdb(min: Option<IntOrString>, max: Option<IntOrString>) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                generation: Some(3),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                min_available: min,
                max_unavailable: max,
                selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn pod(name: &str, ready: bool) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    #[test]
    fn desired_healthy_follows_min_and_max() {
        let p = pdb(Some(IntOrString::Int(2)), None);
        assert!(!needs_scale(&p));
        assert_eq!(desired_healthy(&p, 3, None).unwrap(), (3, 2));
        let p = pdb(Some(IntOrString::String("50%".into())), None);
        assert!(needs_scale(&p));
        assert_eq!(
            desired_healthy(&p, 2, Some(5)).unwrap(),
            (5, 3),
            "rounded up"
        );
        let p = pdb(None, Some(IntOrString::String("30%".into())));
        assert_eq!(desired_healthy(&p, 10, Some(10)).unwrap(), (10, 7));
        let p = pdb(None, Some(IntOrString::Int(5)));
        assert_eq!(
            desired_healthy(&p, 3, Some(3)).unwrap(),
            (3, 0),
            "never negative"
        );
        let p = pdb(None, Some(IntOrString::String("x".into())));
        assert!(desired_healthy(&p, 3, Some(3)).is_err());
    }

    #[test]
    fn status_counts_ready_pods_and_sets_the_condition() {
        let p = pdb(Some(IntOrString::Int(2)), None);
        let pods = vec![
            pod("a", true),
            pod("b", true),
            pod("c", true),
            pod("d", false),
        ];
        let now = Timestamp::from_second(1000).unwrap();
        let healthy = count_healthy(&pods, &BTreeMap::new(), now);
        assert_eq!(healthy, 3);
        let st = new_status(&p, healthy, 2, 4, BTreeMap::new(), now).unwrap();
        assert_eq!(st.disruptions_allowed, 1);
        assert_eq!(st.observed_generation, Some(3));
        let c = &st.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", SUFFICIENT_PODS)
        );

        // Written: nothing more to write.
        let mut written = p.clone();
        written.status = Some(st);
        assert!(new_status(&written, 3, 2, 4, BTreeMap::new(), now).is_none());

        // Down to two healthy: no disruption allowed, the condition flips (and its time).
        let later = Timestamp::from_second(2000).unwrap();
        let st = new_status(&written, 2, 2, 4, BTreeMap::new(), later).unwrap();
        assert_eq!(st.disruptions_allowed, 0);
        let c = &st.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", INSUFFICIENT_PODS)
        );
        assert_eq!(c.last_transition_time.0, later);

        // No expected pods: nothing allowed however healthy.
        assert_eq!(
            new_status(&p, 3, 0, 0, BTreeMap::new(), now)
                .unwrap()
                .disruptions_allowed,
            0
        );
    }

    #[test]
    fn disrupted_pods_expire_after_the_deletion_timeout() {
        let mut p = pdb(Some(IntOrString::Int(1)), None);
        let now = Timestamp::from_second(10_000).unwrap();
        let recent = Time(Timestamp::from_second(10_000 - 30).unwrap());
        let old = Time(Timestamp::from_second(10_000 - 600).unwrap());
        p.status = Some(PodDisruptionBudgetStatus {
            disrupted_pods: Some(BTreeMap::from([
                ("a".into(), recent.clone()),
                ("b".into(), old),
                ("gone".into(), recent.clone()),
            ])),
            ..Default::default()
        });
        let pods = vec![pod("a", true), pod("b", true)];
        let mut late = Vec::new();
        let (map, recheck) = disrupted_pods(&pods, &p, now, |pod| {
            late.push(pod.metadata.name.clone().unwrap())
        });
        assert_eq!(map.keys().collect::<Vec<_>>(), vec!["a"]);
        assert_eq!(late, vec!["b".to_string()]);
        assert_eq!(recheck, Some(recent.0 + DELETION_TIMEOUT));
        assert_eq!(count_healthy(&pods, &map, now), 1, "a is about to go");
    }

    #[test]
    fn stale_disruption_conditions() {
        let now = Timestamp::from_second(10_000).unwrap();
        let with = |status: &str, reason: &str, at: i64| {
            let mut p = (*pod("a", true)).clone();
            p.status
                .as_mut()
                .unwrap()
                .conditions
                .as_mut()
                .unwrap()
                .push(PodCondition {
                    type_: "DisruptionTarget".into(),
                    status: status.into(),
                    reason: Some(reason.into()),
                    last_transition_time: Some(Time(Timestamp::from_second(at).unwrap())),
                    ..Default::default()
                });
            p
        };
        assert_eq!(
            stale_disruption_condition(&with("True", "EvictionByEvictionAPI", 10_000 - 30), now),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            stale_disruption_condition(&with("True", "EvictionByEvictionAPI", 1), now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            stale_disruption_condition(&with("True", "TerminationByKubelet", 1), now),
            None
        );
        assert_eq!(stale_disruption_condition(&with("False", "", 1), now), None);
    }

    #[test]
    fn group_versions_and_selector_strings_are_gos() {
        assert_eq!(
            parse_group_version("apps/v1").unwrap(),
            ("apps".into(), "v1".into())
        );
        assert_eq!(parse_group_version("v1").unwrap(), ("".into(), "v1".into()));
        assert!(parse_group_version("a/b/c").is_err());
        let sel = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["a".into(), "b".into()]),
            }]),
        };
        assert_eq!(
            go_selector_string(Some(&sel)),
            "&LabelSelector{MatchLabels:map[string]string{app: web,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:tier,Operator:In,Values:[a b],},},}"
        );
    }

    #[test]
    fn selectors_pick_pods_as_kubernetes() {
        let mut p = pdb(Some(IntOrString::Int(1)), None);
        let web = BTreeMap::from([("app".to_string(), "web".to_string())]);
        assert!(util::matches(&pdb_matcher(&p).unwrap(), Some(&web)));
        p.spec.as_mut().unwrap().selector = Some(LabelSelector::default());
        assert!(util::matches(&pdb_matcher(&p).unwrap(), None), "empty: all");
        p.spec.as_mut().unwrap().selector = None;
        assert!(
            !util::matches(&pdb_matcher(&p).unwrap(), Some(&web)),
            "none: nothing"
        );
        p.spec.as_mut().unwrap().selector = Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Bogus".into(),
                values: None,
            }]),
            ..Default::default()
        });
        assert!(pdb_matcher(&p).is_err());
    }
}
