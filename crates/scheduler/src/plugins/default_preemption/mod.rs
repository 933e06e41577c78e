//! DefaultPreemption: when no node fits a pod, look for the node where evicting lower-priority
//! pods makes room, preferring nodes whose evictions break no PodDisruptionBudget and hurt the
//! least important pods. Mirrors `pkg/scheduler/framework/plugins/defaultpreemption` and
//! `pkg/scheduler/framework/preemption` of Kubernetes v1.32 (synchronous preemption).
//!
//! The plugin only decides: it returns the nominated node and the victims in its
//! `PostFilterResult`; the scheduler deletes the victims and records the nomination.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock, RwLock};

use capstan_api::selector::label::LabelSelector;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Deserialize;
use serde_json::Value;

use crate::framework::{
    ClusterEvent, Code, CycleState, Framework, NodeStatuses, Plugin, PostFilterPlugin,
    PostFilterResult, Status,
};
use crate::snapshot::Snapshot;
use crate::types::{label_selector, NodeInfo, PodInfo};

use super::parse_args;

#[cfg(test)]
mod tests;

pub const NAME: &str = "DefaultPreemption";

/// Counted for every node the dry run did not report on (Kubernetes' absent-node status).
pub const REASON_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// A node without any pod of lower priority than the preemptor.
pub const REASON_NO_VICTIMS: &str = "No preemption victims found for incoming pod";
const MSG_POLICY_NEVER: &str = "not eligible due to preemptionPolicy=Never.";
const MSG_TERMINATING: &str = "not eligible due to a terminating pod on the nominated node.";

/// `DefaultPreemptionArgs` after defaulting (v1 defaults: 10 % and 100 nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultPreemptionArgs {
    pub min_candidate_nodes_percentage: i32,
    pub min_candidate_nodes_absolute: i32,
}

impl Default for DefaultPreemptionArgs {
    fn default() -> Self {
        DefaultPreemptionArgs {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

/// The args as written: an absent field takes its default, an explicit 0 stays 0.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawArgs {
    min_candidate_nodes_percentage: Option<i32>,
    min_candidate_nodes_absolute: Option<i32>,
}

impl DefaultPreemptionArgs {
    /// Decode, default and validate `pluginConfig` args.
    pub fn parse(args: &Value) -> Result<Self, String> {
        let raw: RawArgs = parse_args(args)?;
        let defaults = DefaultPreemptionArgs::default();
        let args = DefaultPreemptionArgs {
            min_candidate_nodes_percentage: raw
                .min_candidate_nodes_percentage
                .unwrap_or(defaults.min_candidate_nodes_percentage),
            min_candidate_nodes_absolute: raw
                .min_candidate_nodes_absolute
                .unwrap_or(defaults.min_candidate_nodes_absolute),
        };
        args.validate()?;
        Ok(args)
    }

    /// `ValidateDefaultPreemptionArgs`.
    pub fn validate(&self) -> Result<(), String> {
        const PCT: &str = "minCandidateNodesPercentage";
        const ABS: &str = "minCandidateNodesAbsolute";
        let (pct, abs) = (
            self.min_candidate_nodes_percentage,
            self.min_candidate_nodes_absolute,
        );
        let mut errs = Vec::new();
        if !(0..=100).contains(&pct) {
            errs.push(format!(
                "{PCT}: Invalid value: {pct}: not in valid range [0, 100]"
            ));
        }
        if abs < 0 {
            errs.push(format!(
                "{ABS}: Invalid value: {abs}: not in valid range [0, inf)"
            ));
        }
        if pct == 0 && abs == 0 {
            errs.push(format!(
                "{PCT}: Invalid value: 0: cannot be zero at the same time as {ABS}"
            ));
            errs.push(format!(
                "{ABS}: Invalid value: 0: cannot be zero at the same time as {PCT}"
            ));
        }
        match aggregate(&errs) {
            None => Ok(()),
            Some(msg) => Err(msg),
        }
    }
}

/// The PodDisruptionBudgets (policy/v1) preemption respects, kept current by the scheduler.
pub type PdbStore = Arc<RwLock<Vec<PodDisruptionBudget>>>;

/// The process-wide PDB store every `DefaultPreemption` built by [`new`] reads. The scheduler
/// replaces its contents from a PodDisruptionBudget informer (add/update/delete).
pub fn shared_pdb_store() -> PdbStore {
    static STORE: OnceLock<PdbStore> = OnceLock::new();
    STORE.get_or_init(PdbStore::default).clone()
}

/// Add or replace (by namespace and name) a PDB in `store`: the informer's add/update handler.
pub fn upsert_pdb(store: &PdbStore, pdb: PodDisruptionBudget) {
    let mut list = store.write().unwrap_or_else(|e| e.into_inner());
    let key = |p: &PodDisruptionBudget| (p.metadata.namespace.clone(), p.metadata.name.clone());
    let k = key(&pdb);
    match list.iter_mut().find(|p| key(p) == k) {
        Some(slot) => *slot = pdb,
        None => list.push(pdb),
    }
}

/// Remove a PDB from `store`: the informer's delete handler.
pub fn delete_pdb(store: &PdbStore, namespace: &str, name: &str) {
    let mut list = store.write().unwrap_or_else(|e| e.into_inner());
    list.retain(|p| {
        p.metadata.namespace.as_deref().unwrap_or("") != namespace
            || p.metadata.name.as_deref().unwrap_or("") != name
    });
}

/// Picks where the dry run starts among `n` candidate nodes (`0..n`).
type OffsetFn = Box<dyn Fn(usize) -> usize + Send + Sync>;

pub struct DefaultPreemption {
    args: DefaultPreemptionArgs,
    pdbs: PdbStore,
    offset: OffsetFn,
}

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    let args = DefaultPreemptionArgs::parse(args)?;
    Ok(Arc::new(DefaultPreemption::with_store(
        args,
        PdbStore::default(),
    )))
}

fn random_offset(n: usize) -> usize {
    use rand::Rng;
    if n == 0 {
        0
    } else {
        rand::rng().random_range(0..n)
    }
}

/// A node where preemption would make the pod fit, with the pods to evict there.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Index into `Snapshot::nodes()`.
    pub node: usize,
    pub name: String,
    /// Most important first.
    pub victims: Vec<Arc<PodInfo>>,
    pub num_pdb_violations: usize,
}

/// What the dry run found.
#[derive(Debug, Default)]
struct DryRun {
    /// Candidates breaking no PDB first, then the others, each in the order visited.
    candidates: Vec<Candidate>,
    /// Nodes where preemption does not help, with the reason.
    failed: Vec<(usize, Status)>,
    /// Messages of internal errors met on some nodes.
    errors: Vec<String>,
}

/// A PodDisruptionBudget reduced to what victim selection needs.
struct Budget {
    namespace: String,
    selector: LabelSelector,
    disruptions_allowed: i32,
    disrupted_pods: BTreeSet<String>,
}

impl DefaultPreemption {
    /// A plugin reading PDBs from `pdbs`, starting each dry run at a random node.
    pub fn with_store(args: DefaultPreemptionArgs, pdbs: PdbStore) -> Self {
        DefaultPreemption {
            args,
            pdbs,
            offset: Box::new(random_offset),
        }
    }

    /// Replace the random start of the dry run (deterministic tests).
    pub fn with_offset(mut self, f: impl Fn(usize) -> usize + Send + Sync + 'static) -> Self {
        self.offset = Box::new(f);
        self
    }

    /// The PDB list this plugin reads; the scheduler keeps it current from an informer.
    pub fn pdb_store(&self) -> PdbStore {
        self.pdbs.clone()
    }

    pub fn args(&self) -> DefaultPreemptionArgs {
        self.args
    }

    /// How many candidates the dry run should find among `num_nodes` (`calculateNumCandidates`):
    /// the percentage of the nodes, at least the absolute minimum, at most every node.
    pub fn calculate_num_candidates(&self, num_nodes: usize) -> usize {
        let n = num_nodes as i64;
        let by_pct = n * i64::from(self.args.min_candidate_nodes_percentage) / 100;
        by_pct
            .max(i64::from(self.args.min_candidate_nodes_absolute))
            .min(n)
            .max(0) as usize
    }

    /// `GetOffsetAndNumCandidates`: where the dry run starts and how many candidates it wants.
    pub fn offset_and_num_candidates(&self, num_nodes: usize) -> (usize, usize) {
        let offset = if num_nodes == 0 {
            0
        } else {
            (self.offset)(num_nodes) % num_nodes
        };
        (offset, self.calculate_num_candidates(num_nodes))
    }

    /// The budgets of the snapshot (fed by the scheduler's informer) and of the plugin's store.
    fn budgets(&self, snapshot: &Snapshot) -> Vec<Budget> {
        let pdbs = self.pdbs.read().unwrap_or_else(|e| e.into_inner());
        pdbs.iter()
            .chain(snapshot.pdbs.iter())
            .filter_map(|pdb| {
                let spec = pdb.spec.as_ref()?;
                // A missing or invalid selector matches no pod.
                let selector = label_selector(spec.selector.as_ref()?).ok()?;
                let status = pdb.status.as_ref();
                Some(Budget {
                    namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
                    selector,
                    disruptions_allowed: status.map_or(0, |s| s.disruptions_allowed),
                    disrupted_pods: status
                        .and_then(|s| s.disrupted_pods.as_ref())
                        .map(|m| m.keys().cloned().collect())
                        .unwrap_or_default(),
                })
            })
            .collect()
    }

    /// `Evaluator.Preempt` without the API calls.
    fn preempt(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        fw: &Framework,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
    ) -> (Option<PostFilterResult>, Status) {
        let num_all = snapshot.num_nodes();
        // The filter status of each node, by index.
        let mut per_node: Vec<Option<&Status>> = vec![None; num_all];
        for (i, s) in &statuses.by_node {
            if let Some(slot) = per_node.get_mut(*i) {
                slot.get_or_insert(s);
            }
        }
        let code_of = |slot: Option<&Status>| {
            slot.or(statuses.absent.as_ref())
                .map_or(Code::UnschedulableAndUnresolvable, |s| s.code)
        };

        // 1) Is the pod allowed to preempt (again)?
        let nominated = nominated_node_name(pod, snapshot);
        let nominated_code = code_of(
            snapshot
                .index_of(nominated)
                .and_then(|i| per_node.get(i).copied().flatten()),
        );
        if let Err(msg) = pod_eligible_to_preempt_others(pod, snapshot, nominated_code) {
            return (None, Status::unschedulable(msg));
        }

        // 2) Dry-run preemption on the nodes where it might help.
        if num_all == 0 {
            return (None, Status::error("no nodes available"));
        }
        let potential: Vec<usize> = (0..num_all)
            .filter(|&i| code_of(per_node[i]) == Code::Unschedulable)
            .collect();
        let now = now_nanos();
        let dry = if potential.is_empty() {
            DryRun::default()
        } else {
            let budgets = self.budgets(snapshot);
            let (offset, num) = self.offset_and_num_candidates(potential.len());
            self.dry_run(
                state, pod, fw, snapshot, &potential, &budgets, offset, num, now,
            )
        };
        if dry.candidates.is_empty() {
            if let Some(msg) = aggregate(&dry.errors) {
                return (None, Status::error(msg));
            }
            // Nothing helps: clear any earlier nomination of the pod.
            let clear = PostFilterResult {
                nominated_node: Some(String::new()),
                victims: Vec::new(),
            };
            return (
                Some(clear),
                Status::unschedulable(fit_error_message(num_all, &dry.failed)),
            );
        }

        // 3) The best candidate.
        let best = select_candidate(dry.candidates, now);
        (
            Some(PostFilterResult {
                nominated_node: Some(best.name),
                victims: best.victims,
            }),
            Status::success(),
        )
    }

    /// `DryRunPreemption`, sequentially: visit the potential nodes from `offset` (wrapping)
    /// until `num` candidates are found, at least one of them breaking no PDB. Each candidate
    /// list keeps at most `num` entries.
    #[allow(clippy::too_many_arguments)]
    fn dry_run(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        fw: &Framework,
        snapshot: &Snapshot,
        potential: &[usize],
        budgets: &[Budget],
        offset: usize,
        num: usize,
        now: i128,
    ) -> DryRun {
        let mut out = DryRun::default();
        let mut non_violating: Vec<Candidate> = Vec::new();
        let mut violating: Vec<Candidate> = Vec::new();
        let len = potential.len();
        for i in 0..len {
            let idx = potential[(offset + i) % len];
            let Some(original) = snapshot.nodes().get(idx) else {
                continue;
            };
            let mut node = original.clone();
            let mut st = state.clone();
            match select_victims_on_node(&mut st, pod, &mut node, budgets, fw, snapshot, now) {
                Ok((victims, violations)) if !victims.is_empty() => {
                    let c = Candidate {
                        node: idx,
                        name: original.name().to_string(),
                        victims,
                        num_pdb_violations: violations,
                    };
                    let list = if violations == 0 {
                        &mut non_violating
                    } else {
                        &mut violating
                    };
                    if list.len() < num {
                        list.push(c);
                    }
                    if !non_violating.is_empty() && non_violating.len() + violating.len() >= num {
                        break;
                    }
                }
                Ok(_) => {
                    let s = Status::error(format!(
                        "expected at least one victim pod on node {:?}",
                        original.name()
                    ));
                    out.errors.push(s.message());
                    out.failed.push((idx, s));
                }
                Err(s) => {
                    if s.code == Code::Error {
                        out.errors.push(s.message());
                    }
                    out.failed.push((idx, s));
                }
            }
        }
        non_violating.extend(violating);
        out.candidates = non_violating;
        out
    }
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
    /// Synchronous preemption rejects no pod by itself (no PreEnqueue), so nothing to watch.
    fn events(&self) -> Vec<ClusterEvent> {
        Vec::new()
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        framework: &Framework,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
    ) -> (Option<PostFilterResult>, Status) {
        let (result, status) = self.preempt(state, pod, framework, snapshot, statuses);
        let msg = status.message();
        if msg.is_empty() {
            return (result, status);
        }
        (
            result,
            Status::new(status.code, format!("preemption: {msg}")),
        )
    }
}

/// The node the pod was nominated to by an earlier preemption: its status, or what the
/// scheduler recorded in the snapshot.
fn nominated_node_name<'a>(pod: &'a PodInfo, snapshot: &'a Snapshot) -> &'a str {
    Some(pod.nominated_node_name())
        .filter(|s| !s.is_empty())
        .or_else(|| snapshot.nominated_node(&pod.key))
        .unwrap_or("")
}

/// `PodEligibleToPreemptOthers`: not with `preemptionPolicy: Never`, and not again while a
/// lower-priority pod preempted for it is still terminating on its nominated node (unless
/// that node no longer passes the filters at all).
fn pod_eligible_to_preempt_others(
    pod: &PodInfo,
    snapshot: &Snapshot,
    nominated_status: Code,
) -> Result<(), &'static str> {
    let policy = pod
        .pod()
        .spec
        .as_ref()
        .and_then(|s| s.preemption_policy.as_deref());
    if policy == Some("Never") {
        return Err(MSG_POLICY_NEVER);
    }
    let nominated = nominated_node_name(pod, snapshot);
    if nominated.is_empty() || nominated_status == Code::UnschedulableAndUnresolvable {
        return Ok(());
    }
    if let Some(node) = snapshot.get(nominated) {
        if node
            .pods
            .iter()
            .any(|p| p.priority < pod.priority && terminating_by_preemption(p))
        {
            return Err(MSG_TERMINATING);
        }
    }
    Ok(())
}

/// Being deleted, with the `DisruptionTarget` condition the scheduler sets on its victims.
fn terminating_by_preemption(p: &PodInfo) -> bool {
    if !p.terminating() {
        return false;
    }
    p.disruption_target()
        .is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler"))
}

fn extension_error(op: &str, s: &Status) -> Status {
    Status::error(format!(
        "running {op} on PreFilter plugin {:?}: {}",
        s.plugin,
        s.message()
    ))
}

/// `SelectVictimsOnNode` on a copy of the node and of the cycle state: remove every
/// lower-priority pod; if the pod then fits, put pods back one at a time (PDB-protected ones
/// first, most important first) as long as it still fits. Returns the victims (most important
/// first) and how many of them break a PDB.
fn select_victims_on_node(
    state: &mut CycleState,
    pod: &PodInfo,
    node: &mut NodeInfo,
    budgets: &[Budget],
    fw: &Framework,
    snapshot: &Snapshot,
    now: i128,
) -> Result<(Vec<Arc<PodInfo>>, usize), Status> {
    let mut potential: Vec<Arc<PodInfo>> = node
        .pods
        .iter()
        .filter(|p| p.priority < pod.priority)
        .cloned()
        .collect();
    for p in &potential {
        remove_pod(state, pod, p, node, fw, snapshot)?;
    }
    if potential.is_empty() {
        return Err(Status::unresolvable(REASON_NO_VICTIMS));
    }
    // Even without every lower-priority pod it does not fit: preemption cannot help here.
    let s = fw.run_filter_with_nominated(state, pod, node, snapshot);
    if !s.is_success() {
        return Err(s);
    }
    potential.sort_by(|a, b| more_important(a, b, now));
    let (violating, non_violating) = split_by_pdb_violation(&potential, budgets);
    let mut victims = Vec::new();
    let mut num_violating = 0;
    for (group, counts) in [(&violating, true), (&non_violating, false)] {
        for p in group {
            node.add_pod(p.clone());
            let s = fw.run_pre_filter_add_pod(state, pod, p, node, snapshot);
            if !s.is_success() {
                return Err(extension_error("AddPod", &s));
            }
            if !fw
                .run_filter_with_nominated(state, pod, node, snapshot)
                .is_success()
            {
                remove_pod(state, pod, p, node, fw, snapshot)?;
                victims.push(p.clone());
                if counts {
                    num_violating += 1;
                }
            }
        }
    }
    if !violating.is_empty() && !non_violating.is_empty() {
        victims.sort_by(|a, b| more_important(a, b, now));
    }
    Ok((victims, num_violating))
}

fn remove_pod(
    state: &mut CycleState,
    pod: &PodInfo,
    victim: &PodInfo,
    node: &mut NodeInfo,
    fw: &Framework,
    snapshot: &Snapshot,
) -> Result<(), Status> {
    node.remove_pod(&victim.key);
    let s = fw.run_pre_filter_remove_pod(state, pod, victim, node, snapshot);
    if s.is_success() {
        Ok(())
    } else {
        Err(extension_error("RemovePod", &s))
    }
}

/// `util.MoreImportantPod` as an ordering: higher priority first, then the pod that started
/// earlier (a pod not started yet counts as starting now).
fn more_important(a: &PodInfo, b: &PodInfo, now: i128) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| start_time(a, now).cmp(&start_time(b, now)))
}

fn start_time(p: &PodInfo, now: i128) -> i128 {
    p.start_time().map_or(now, |t| t.0.as_nanosecond())
}

fn now_nanos() -> i128 {
    k8s_openapi::jiff::Timestamp::now().as_nanosecond()
}

/// `filterPodsWithPDBViolation`: which pods (in order) would exhaust a matching budget. Each
/// matching budget not already counting the pod as disrupted loses one allowed disruption.
fn split_by_pdb_violation(
    pods: &[Arc<PodInfo>],
    budgets: &[Budget],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = budgets.iter().map(|b| b.disruptions_allowed).collect();
    let (mut violating, mut non_violating) = (Vec::new(), Vec::new());
    for p in pods {
        let mut violated = false;
        let labels = p.labels();
        if !labels.is_empty() {
            for (b, left) in budgets.iter().zip(allowed.iter_mut()) {
                if b.namespace != p.namespace()
                    || b.selector.is_empty()
                    || !b.selector.matches_fn(|k| labels.get(k).map(String::as_str))
                    || b.disrupted_pods.contains(p.name())
                {
                    continue;
                }
                *left = left.saturating_sub(1);
                if *left < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(p.clone());
        } else {
            non_violating.push(p.clone());
        }
    }
    (violating, non_violating)
}

/// `SelectCandidate`: the only candidate, or the best by [`pick_one_node_for_preemption`].
fn select_candidate(mut candidates: Vec<Candidate>, now: i128) -> Candidate {
    let i = if candidates.len() == 1 {
        0
    } else {
        pick_one_node_for_preemption(&candidates, now)
    };
    candidates.swap_remove(i)
}

/// `pickOneNodeForPreemption`: the candidate (index) with the fewest PDB violations, then the
/// lowest highest-priority victim, the smallest sum of victim priorities, the fewest victims,
/// the latest start among its highest-priority victims, then the first one.
fn pick_one_node_for_preemption(candidates: &[Candidate], now: i128) -> usize {
    if candidates.is_empty() {
        return 0;
    }
    let fewest_violations = |c: &Candidate| -(c.num_pdb_violations as i128);
    let lowest_highest_priority =
        |c: &Candidate| -(c.victims.first().map_or(0, |p| i128::from(p.priority)));
    let smallest_priority_sum = |c: &Candidate| {
        // Shift every priority to be positive so more negative-priority victims never win.
        -c.victims
            .iter()
            .map(|p| i128::from(p.priority) + (1i128 << 31))
            .sum::<i128>()
    };
    let fewest_victims = |c: &Candidate| -(c.victims.len() as i128);
    let latest_start =
        |c: &Candidate| earliest_start_of_highest(&c.victims, now).unwrap_or(i128::MIN);
    let scores: [&dyn Fn(&Candidate) -> i128; 5] = [
        &fewest_violations,
        &lowest_highest_priority,
        &smallest_priority_sum,
        &fewest_victims,
        &latest_start,
    ];
    let mut remaining: Vec<usize> = (0..candidates.len()).collect();
    let mut selected = Vec::with_capacity(candidates.len());
    for score in scores {
        selected.clear();
        let mut best = i128::MIN;
        for &i in &remaining {
            let s = score(&candidates[i]);
            if s > best {
                best = s;
                selected.clear();
            }
            if s == best {
                selected.push(i);
            }
        }
        if selected.len() == 1 {
            return selected[0];
        }
        std::mem::swap(&mut remaining, &mut selected);
    }
    remaining.first().copied().unwrap_or(0)
}

/// `GetEarliestPodStartTime`: the earliest start among the victims of the highest priority.
fn earliest_start_of_highest(victims: &[Arc<PodInfo>], now: i128) -> Option<i128> {
    let first = victims.first()?;
    let (mut max_priority, mut earliest) = (first.priority, start_time(first, now));
    for p in victims {
        let t = start_time(p, now);
        if p.priority == max_priority {
            earliest = earliest.min(t);
        } else if p.priority > max_priority {
            max_priority = p.priority;
            earliest = t;
        }
    }
    Some(earliest)
}

/// `FitError.Error()` over the dry run's statuses: "0/N nodes are available: " and a sorted
/// "count reason" histogram, every node without a status counting as not helped.
fn fit_error_message(num_all: usize, failed: &[(usize, Status)]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, s) in failed {
        for r in &s.reasons {
            *counts.entry(r.as_ref()).or_default() += 1;
        }
    }
    if failed.len() < num_all {
        *counts.entry(REASON_NOT_HELPFUL).or_default() += num_all - failed.len();
    }
    let mut items: Vec<String> = counts.iter().map(|(r, c)| format!("{c} {r}")).collect();
    items.sort();
    let mut msg = format!("0/{num_all} nodes are available:");
    if !items.is_empty() {
        msg.push(' ');
        msg.push_str(&items.join(", "));
        msg.push('.');
    }
    msg
}

/// Kubernetes' error aggregate: one message alone, several (deduplicated) in brackets.
fn aggregate(errs: &[String]) -> Option<String> {
    match errs {
        [] => None,
        [one] => Some(one.clone()),
        _ => {
            let mut seen: Vec<&str> = Vec::new();
            for e in errs {
                if !seen.contains(&e.as_str()) {
                    seen.push(e);
                }
            }
            Some(if seen.len() == 1 {
                seen[0].to_string()
            } else {
                format!("[{}]", seen.join(", "))
            })
        }
    }
}

/// Pods of lower priority than `pod` nominated to `node`: after preempting there, the
/// scheduler clears their nomination so they look for another node (`prepareCandidate`).
pub fn lower_priority_nominated_pods(
    snapshot: &Snapshot,
    pod: &PodInfo,
    node: &str,
) -> Vec<Arc<PodInfo>> {
    snapshot
        .nominated_pods(node)
        .iter()
        .filter(|p| p.priority < pod.priority)
        .cloned()
        .collect()
}
