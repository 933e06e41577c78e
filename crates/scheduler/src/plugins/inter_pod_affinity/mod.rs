//! InterPodAffinity: required pod affinity / anti-affinity (PreFilter, Filter, with AddPod and
//! RemovePod for preemption) and preferred terms of the pod and of existing pods (PreScore,
//! Score, NormalizeScore). Mirrors `pkg/scheduler/framework/plugins/interpodaffinity` of
//! Kubernetes v1.32 (`filtering.go`, `scoring.go`, `plugin.go`).
//!
//! PreFilter counts, per topology pair (node label key and value), the existing pods that match
//! the incoming pod's required terms and the existing pods whose required anti-affinity matches
//! the incoming pod; Filter then only looks the node's topology values up in those counts.
//!
//! The snapshot groups the pods of its nodes by namespace and labels, and their affinity terms
//! by content (`Snapshot::pod_groups`, `Snapshot::term_groups`), so a selector is evaluated once
//! per group rather than once per pod, and the counts are kept per value id of the topology
//! labels (`snapshot::ValueCounts`), so Filter and Score look a node up without string keys.
//! The results are those of evaluating every pod on every node, as Kubernetes does.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeScore, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status, MAX_NODE_SCORE,
};
use crate::snapshot::{NodeCounts, NodeValues, Snapshot, TermKind, ValueCounts};
use crate::types::{AffinityTerm, NodeInfo, PodInfo, WeightedAffinityTerm};

use super::parse_args;

#[cfg(test)]
mod tests;

pub const NAME: &str = "InterPodAffinity";

/// CycleState key of the PreFilter state.
const PRE_FILTER_KEY: &str = "PreFilterInterPodAffinity";
/// CycleState key of the PreScore state.
const PRE_SCORE_KEY: &str = "PreScoreInterPodAffinity";

pub const ERR_REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
pub const ERR_REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub const ERR_REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";

/// Default `hardPodAffinityWeight`.
pub const DEFAULT_HARD_POD_AFFINITY_WEIGHT: i32 = 1;

/// `InterPodAffinityArgs` as written in the scheduler configuration.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawArgs {
    hard_pod_affinity_weight: Option<i32>,
    ignore_preferred_terms_of_existing_pods: Option<bool>,
}

/// Validated `InterPodAffinityArgs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Args {
    /// Weight given to an existing pod's required affinity term that the incoming pod matches.
    pub hard_pod_affinity_weight: i32,
    /// Skip scoring when the incoming pod has no preferred terms of its own.
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            hard_pod_affinity_weight: DEFAULT_HARD_POD_AFFINITY_WEIGHT,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

impl Args {
    /// Parse and validate (`ValidateInterPodAffinityArgs`).
    pub fn parse(args: &Value) -> Result<Args, String> {
        let raw: RawArgs = parse_args(args)?;
        let a = Args {
            hard_pod_affinity_weight: raw
                .hard_pod_affinity_weight
                .unwrap_or(DEFAULT_HARD_POD_AFFINITY_WEIGHT),
            ignore_preferred_terms_of_existing_pods: raw
                .ignore_preferred_terms_of_existing_pods
                .unwrap_or(false),
        };
        if !(0..=100).contains(&a.hard_pod_affinity_weight) {
            return Err(capstan_api::field::FieldError::invalid(
                "hardPodAffinityWeight",
                &Value::from(a.hard_pod_affinity_weight),
                "not in valid range [0, 100]",
            )
            .message);
        }
        Ok(a)
    }
}

pub struct InterPodAffinity {
    args: Args,
}

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(InterPodAffinity::with_args(Args::parse(args)?)))
}

impl InterPodAffinity {
    pub fn with_args(args: Args) -> InterPodAffinity {
        InterPodAffinity { args }
    }
}

// ---------------------------------------------------------------------------------------------
// Term matching.

/// Whether `term` selects `pod` (Kubernetes' `AffinityTerm.Matches`): the pod's namespace is
/// listed or its labels (`ns_labels`, empty when unknown) match the namespace selector, and the
/// pod's labels match the label selector.
fn term_matches(
    term: &AffinityTerm,
    pod: &PodInfo,
    ns_labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let ns_ok = term.namespaces.contains(pod.namespace())
        || term
            .namespace_selector
            .matches_fn(|k| ns_labels.and_then(|l| l.get(k)).map(String::as_str));
    ns_ok
        && term
            .selector
            .matches_fn(|k| pod.labels().get(k).map(String::as_str))
}

/// Whether `pod` matches every term (false for no terms). The terms are the incoming pod's, whose
/// namespace selectors were merged into their namespaces, so no namespace labels are needed.
fn matches_all(terms: &[AffinityTerm], pod: &PodInfo) -> bool {
    !terms.is_empty() && terms.iter().all(|t| term_matches(t, pod, None))
}

/// The incoming pod's term with its namespace selector resolved against the known namespaces
/// (`mergeAffinityTermNamespacesIfNotEmpty`): an empty selector (all namespaces) is kept.
fn merge_namespaces(term: &AffinityTerm, snapshot: &Snapshot) -> AffinityTerm {
    let mut t = term.clone();
    if t.namespace_selector.is_empty() {
        return t;
    }
    for (name, labels) in &snapshot.namespaces {
        if term
            .namespace_selector
            .matches_fn(|k| labels.get(k).map(String::as_str))
        {
            t.namespaces.insert(name.clone());
        }
    }
    t.namespace_selector = capstan_api::selector::LabelSelector::nothing();
    t
}

// ---------------------------------------------------------------------------------------------
// Topology counts.

/// Number of matching pods (or summed weights) per topology pair: per label key, per value id.
/// Each key has a fixed slot once added, so terms can refer to their key's slot.
#[derive(Debug, Clone, Default)]
struct TopologyCounts(Vec<ValueCounts>);

impl TopologyCounts {
    /// The slot of `key`, added (with the snapshot's values of that label) when missing.
    fn slot(&mut self, key: &str, snapshot: Option<&Snapshot>) -> usize {
        match self.0.iter().position(|c| c.key() == key) {
            Some(i) => i,
            None => {
                let values = match snapshot {
                    Some(s) => s.node_values(key),
                    None => NodeValues::detached(key),
                };
                self.0.push(ValueCounts::new(values));
                self.0.len() - 1
            }
        }
    }

    /// Add `delta` to value `id` of `slot`; a pair whose count drops to zero is removed, so
    /// `is_empty` means no pair has a count.
    fn add_id(&mut self, slot: usize, id: u32, delta: i64) {
        let c = &mut self.0[slot];
        if c.add(id, delta) == 0 {
            c.remove(id);
        }
    }

    /// Add `delta` to the pair `key`=`value`.
    #[cfg(test)]
    fn add(&mut self, key: &str, value: &str, delta: i64) {
        let s = self.slot(key, None);
        let id = self.0[s].id_or_insert(value);
        self.add_id(s, id, delta);
    }

    /// Add `delta` to the pair the node has for the key of `slot`, if it has that label.
    fn add_for_node(&mut self, slot: usize, node: &NodeInfo, delta: i64) {
        if let Some(id) = self.0[slot].of_or_insert(node) {
            self.add_id(slot, id, delta);
        }
    }

    /// Add `delta` for each of the snapshot's nodes in `nodes` (times its count) to the pair
    /// it has for the key of `slot`.
    fn add_for_nodes(&mut self, slot: usize, nodes: &NodeCounts, delta: i64) {
        for (&n, &count) in nodes {
            if let Some(id) = self.0[slot].at(n as usize) {
                self.add_id(slot, id, delta * i64::from(count));
            }
        }
    }

    /// The count of the pair the node has for the key of `slot`: None when the node lacks the
    /// label.
    fn get_for_node(&self, slot: usize, node: &NodeInfo) -> Option<i64> {
        let c = &self.0[slot];
        c.of(node).map(|id| id.map_or(0, |id| c.count(id)))
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(ValueCounts::is_empty)
    }

    /// Every pair with its count.
    fn pairs(&self) -> BTreeMap<(String, String), i64> {
        let mut out = BTreeMap::new();
        for c in &self.0 {
            for (id, n) in c.iter() {
                out.insert((c.key().to_string(), c.name(id).to_string()), n);
            }
        }
        out
    }
}

impl PartialEq for TopologyCounts {
    fn eq(&self, other: &Self) -> bool {
        self.pairs() == other.pairs()
    }
}

// ---------------------------------------------------------------------------------------------
// PreFilter / Filter.

/// What PreFilter derives from the incoming pod; shared by clones of the state.
#[derive(Debug)]
struct IncomingPod {
    /// Required affinity terms, namespace selectors merged.
    affinity: Vec<AffinityTerm>,
    /// Required anti-affinity terms, namespace selectors merged.
    anti_affinity: Vec<AffinityTerm>,
    /// The slot of each affinity term's key in `PreFilterState::affinity`.
    affinity_slots: Vec<usize>,
    /// The slot of each anti-affinity term's key in `PreFilterState::anti_affinity`.
    anti_affinity_slots: Vec<usize>,
    /// The pod matches all of its own affinity terms.
    matches_own_affinity: bool,
    /// Labels of the pod's namespace (for existing pods' namespace selectors).
    ns_labels: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone)]
struct PreFilterState {
    pod: Arc<IncomingPod>,
    /// Existing pods whose required anti-affinity terms match the incoming pod.
    existing_anti_affinity: TopologyCounts,
    /// Existing pods matching all the incoming pod's affinity terms (counted once per term).
    affinity: TopologyCounts,
    /// Existing pods matching the incoming pod's anti-affinity terms (once per matching term).
    anti_affinity: TopologyCounts,
}

impl PreFilterState {
    /// Account for `other` added (`delta` 1) or removed (-1) on `node`.
    fn update_with_pod(
        &mut self,
        incoming: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        snapshot: &Snapshot,
        delta: i64,
    ) {
        let pod = self.pod.clone();
        for t in &other.required_anti_affinity {
            if node.labels().contains_key(&t.topology_key)
                && term_matches(t, incoming, pod.ns_labels.as_ref())
            {
                let s = self
                    .existing_anti_affinity
                    .slot(&t.topology_key, Some(snapshot));
                self.existing_anti_affinity.add_for_node(s, node, delta);
            }
        }
        if matches_all(&pod.affinity, other) {
            for &s in &pod.affinity_slots {
                self.affinity.add_for_node(s, node, delta);
            }
        }
        for (t, &s) in pod.anti_affinity.iter().zip(&pod.anti_affinity_slots) {
            if term_matches(t, other, None) {
                self.anti_affinity.add_for_node(s, node, delta);
            }
        }
    }

    /// `satisfyPodAffinity`: every affinity term's topology key is on the node and some pod in
    /// that topology matches, or no pod matches anywhere and the pod matches its own terms.
    fn satisfies_affinity(&self, node: &NodeInfo) -> bool {
        let mut pods_exist = true;
        for &s in &self.pod.affinity_slots {
            match self.affinity.get_for_node(s, node) {
                Some(n) => {
                    if n <= 0 {
                        pods_exist = false;
                    }
                }
                None => return false,
            }
        }
        pods_exist || (self.affinity.is_empty() && self.pod.matches_own_affinity)
    }

    /// `satisfyPodAntiAffinity`: no pod matching an anti-affinity term in the node's topology.
    fn satisfies_anti_affinity(&self, node: &NodeInfo) -> bool {
        if self.anti_affinity.is_empty() {
            return true;
        }
        !self.pod.anti_affinity_slots.iter().any(|&s| {
            self.anti_affinity
                .get_for_node(s, node)
                .is_some_and(|n| n > 0)
        })
    }

    /// `satisfyExistingPodsAntiAffinity`: no existing pod in any of the node's topologies has a
    /// required anti-affinity term matching the incoming pod.
    fn satisfies_existing_anti_affinity(&self, node: &NodeInfo) -> bool {
        (0..self.existing_anti_affinity.0.len()).all(|s| {
            self.existing_anti_affinity.0[s].is_empty()
                || self
                    .existing_anti_affinity
                    .get_for_node(s, node)
                    .is_none_or(|n| n <= 0)
        })
    }
}

fn missing_state(key: &str) -> Status {
    Status::error(format!("error reading {key:?} from cycleState: not found"))
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        if let Some(e) = &pod.parse_error {
            return (
                PreFilterResult::default(),
                Status::unresolvable(format!("parsing pod: {e}")),
            );
        }
        let incoming_terms =
            !pod.required_affinity.is_empty() || !pod.required_anti_affinity.is_empty();
        if !incoming_terms && !snapshot.have_pods_with_required_anti_affinity() {
            return (PreFilterResult::default(), Status::skip());
        }
        let ns_labels = snapshot.namespace_labels(pod.namespace()).cloned();
        let affinity: Vec<AffinityTerm> = pod
            .required_affinity
            .iter()
            .map(|t| merge_namespaces(t, snapshot))
            .collect();
        let anti_affinity: Vec<AffinityTerm> = pod
            .required_anti_affinity
            .iter()
            .map(|t| merge_namespaces(t, snapshot))
            .collect();
        // Existing pods' required anti-affinity terms, each distinct term evaluated once.
        let mut existing_anti_affinity = TopologyCounts::default();
        for g in snapshot.term_groups(TermKind::RequiredAntiAffinity) {
            if term_matches(&g.term, pod, ns_labels.as_ref()) {
                let s = existing_anti_affinity.slot(&g.term.topology_key, Some(snapshot));
                existing_anti_affinity.add_for_nodes(s, &g.nodes, 1);
            }
        }

        // The incoming pod's terms against the existing pods, each group of pods with equal
        // namespace and labels evaluated once.
        let mut affinity_counts = TopologyCounts::default();
        let mut anti_affinity_counts = TopologyCounts::default();
        let affinity_slots: Vec<usize> = affinity
            .iter()
            .map(|t| affinity_counts.slot(&t.topology_key, Some(snapshot)))
            .collect();
        let anti_affinity_slots: Vec<usize> = anti_affinity
            .iter()
            .map(|t| anti_affinity_counts.slot(&t.topology_key, Some(snapshot)))
            .collect();
        if incoming_terms {
            for g in snapshot.pod_groups() {
                if matches_all(&affinity, &g.pod) {
                    for &s in &affinity_slots {
                        affinity_counts.add_for_nodes(s, &g.nodes, 1);
                    }
                }
                for (t, &s) in anti_affinity.iter().zip(&anti_affinity_slots) {
                    if term_matches(t, &g.pod, None) {
                        anti_affinity_counts.add_for_nodes(s, &g.nodes, 1);
                    }
                }
            }
        }

        if existing_anti_affinity.is_empty() && !incoming_terms {
            return (PreFilterResult::default(), Status::skip());
        }
        let matches_own_affinity = matches_all(&affinity, pod);
        state.write(
            PRE_FILTER_KEY,
            PreFilterState {
                pod: Arc::new(IncomingPod {
                    affinity,
                    anti_affinity,
                    affinity_slots,
                    anti_affinity_slots,
                    matches_own_affinity,
                    ns_labels,
                }),
                existing_anti_affinity,
                affinity: affinity_counts,
                anti_affinity: anti_affinity_counts,
            },
        );
        (PreFilterResult::default(), Status::success())
    }

    fn has_extensions(&self) -> bool {
        true
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        added: &PodInfo,
        node: &NodeInfo,
        snapshot: &Snapshot,
    ) -> Status {
        let Some(s) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) else {
            return missing_state(PRE_FILTER_KEY);
        };
        s.update_with_pod(pod, added, node, snapshot, 1);
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
        snapshot: &Snapshot,
    ) -> Status {
        let Some(s) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) else {
            return missing_state(PRE_FILTER_KEY);
        };
        s.update_with_pod(pod, removed, node, snapshot, -1);
        Status::success()
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return missing_state(PRE_FILTER_KEY);
        };
        if !s.satisfies_affinity(node) {
            return Status::unresolvable(ERR_REASON_AFFINITY);
        }
        if !s.satisfies_anti_affinity(node) {
            return Status::unschedulable(ERR_REASON_ANTI_AFFINITY);
        }
        if !s.satisfies_existing_anti_affinity(node) {
            return Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY);
        }
        Status::success()
    }
}

// ---------------------------------------------------------------------------------------------
// PreScore / Score / NormalizeScore.

#[derive(Debug, Clone)]
struct PreScoreState {
    /// Summed weights per topology pair (a pair stays once touched, even at 0).
    scores: Arc<TopologyCounts>,
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        if nodes.is_empty() {
            return Status::skip();
        }
        let has_constraints =
            !pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty();
        if self.args.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::skip();
        }
        if let Some(e) = &pod.parse_error {
            return Status::error(format!("failed to parse pod: {e}"));
        }
        let merge = |terms: &[WeightedAffinityTerm]| -> Vec<WeightedAffinityTerm> {
            terms
                .iter()
                .map(|w| WeightedAffinityTerm {
                    term: merge_namespaces(&w.term, snapshot),
                    weight: w.weight,
                })
                .collect()
        };
        let hard_weight = i64::from(self.args.hard_pod_affinity_weight);
        let existing_terms = (hard_weight > 0 && snapshot.has_terms(TermKind::RequiredAffinity))
            || snapshot.has_terms(TermKind::PreferredAffinity)
            || snapshot.has_terms(TermKind::PreferredAntiAffinity);
        if !has_constraints && !existing_terms {
            return Status::skip();
        }
        let preferred_affinity = merge(&pod.preferred_affinity);
        let preferred_anti_affinity = merge(&pod.preferred_anti_affinity);
        let ns_labels = snapshot.namespace_labels(pod.namespace());
        let mut scores = TopologyCounts::default();
        let mut touched = false;
        // Adds `weight` per counted pod (or term) of each node to its pair for `key`.
        let mut add = |key: &str, weight: i64, nodes: &NodeCounts| {
            let slot = scores.slot(key, Some(snapshot));
            let c = &mut scores.0[slot];
            for (&n, &count) in nodes {
                if let Some(id) = c.at(n as usize) {
                    touched = true;
                    c.add(id, weight * i64::from(count));
                }
            }
        };
        // The incoming pod's preferred terms against the existing pods, per group of pods
        // with equal namespace and labels.
        if has_constraints {
            for g in snapshot.pod_groups() {
                for (terms, sign) in [(&preferred_affinity, 1), (&preferred_anti_affinity, -1)] {
                    for t in terms {
                        if term_matches(&t.term, &g.pod, None) {
                            add(&t.term.topology_key, i64::from(t.weight) * sign, &g.nodes);
                        }
                    }
                }
            }
        }
        // The existing pods' terms against the incoming pod, per group of equal terms.
        let kinds = [
            (TermKind::RequiredAffinity, 1),
            (TermKind::PreferredAffinity, 1),
            (TermKind::PreferredAntiAffinity, -1),
        ];
        for (kind, sign) in kinds {
            if kind == TermKind::RequiredAffinity && hard_weight <= 0 {
                continue;
            }
            for g in snapshot.term_groups(kind) {
                if term_matches(&g.term, pod, ns_labels) {
                    let weight = if kind == TermKind::RequiredAffinity {
                        hard_weight
                    } else {
                        i64::from(g.weight) * sign
                    };
                    add(&g.term.topology_key, weight, &g.nodes);
                }
            }
        }
        if !touched {
            return Status::skip();
        }
        state.write(
            PRE_SCORE_KEY,
            PreScoreState {
                scores: Arc::new(scores),
            },
        );
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Err(missing_state(PRE_SCORE_KEY));
        };
        let mut score = 0i64;
        for slot in 0..s.scores.0.len() {
            score += s.scores.get_for_node(slot, node).unwrap_or(0);
        }
        Ok(score)
    }

    fn has_normalize(&self) -> bool {
        true
    }

    /// Min-max scaling to [0, 100]; all equal scores become 0.
    fn normalize(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore]) -> Status {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return missing_state(PRE_SCORE_KEY);
        };
        if s.scores.is_empty() {
            return Status::success();
        }
        let min = scores.iter().map(|s| s.score).min().unwrap_or(0);
        let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
        let diff = max.saturating_sub(min);
        for s in scores.iter_mut() {
            s.score = if diff > 0 {
                (MAX_NODE_SCORE as f64 * ((s.score - min) as f64 / diff as f64)) as i64
            } else {
                0
            };
        }
        Status::success()
    }
}

// ---------------------------------------------------------------------------------------------
// Plugin, events and queueing hints.

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::PodAdd,
            ClusterEvent::PodUpdateLabel,
            ClusterEvent::PodDelete,
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdateLabel,
            ClusterEvent::NodeUpdateTaint,
        ]
    }

    /// `isSchedulableAfterPodChange`: only changes of scheduled pods matter. An added pod helps
    /// when it matches all the pod's affinity terms, a deleted one when it matched all the
    /// anti-affinity terms. For a label update only the new labels are known here, so the pod is
    /// retried when the updated pod now matches the affinity terms or no longer matches the
    /// anti-affinity terms. Node events cannot be inspected (no node is passed) and always retry.
    fn hint(&self, pod: &PodInfo, event: ClusterEvent, changed: Option<&PodInfo>) -> bool {
        let Some(changed) = changed else {
            return true;
        };
        match event {
            ClusterEvent::PodAdd | ClusterEvent::PodUpdateLabel | ClusterEvent::PodDelete => {}
            _ => return true,
        }
        if changed.node_name().is_empty() {
            return false;
        }
        let all = |terms: &[AffinityTerm]| {
            !terms.is_empty() && terms.iter().all(|t| term_matches(t, changed, None))
        };
        match event {
            ClusterEvent::PodAdd => all(&pod.required_affinity),
            ClusterEvent::PodDelete => all(&pod.required_anti_affinity),
            _ => {
                all(&pod.required_affinity)
                    || (!pod.required_anti_affinity.is_empty() && !all(&pod.required_anti_affinity))
            }
        }
    }

    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }

    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }

    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}
