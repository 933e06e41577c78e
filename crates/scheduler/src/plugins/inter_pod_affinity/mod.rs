//! InterPodAffinity: required pod affinity / anti-affinity (PreFilter, Filter, with AddPod and
//! RemovePod for preemption) and preferred terms of the pod and of existing pods (PreScore,
//! Score, NormalizeScore). Mirrors `pkg/scheduler/framework/plugins/interpodaffinity` of
//! Kubernetes v1.32 (`filtering.go`, `scoring.go`, `plugin.go`).
//!
//! PreFilter counts, per topology pair (node label key and value), the existing pods that match
//! the incoming pod's required terms and the existing pods whose required anti-affinity matches
//! the incoming pod; Filter then only looks the node's topology values up in those counts.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeScore, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status, MAX_NODE_SCORE,
};
use crate::snapshot::Snapshot;
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

/// Number of matching pods per topology pair: label key → label value → count. Entries that drop
/// to zero are removed, so `is_empty` means no pair has a count.
#[derive(Debug, Clone, Default, PartialEq)]
struct TopologyCounts(HashMap<String, HashMap<String, i64>>);

impl TopologyCounts {
    fn add(&mut self, key: &str, value: &str, delta: i64) {
        if !self.0.contains_key(key) {
            self.0.insert(key.to_string(), HashMap::new());
        }
        let Some(values) = self.0.get_mut(key) else {
            return;
        };
        let now = match values.get_mut(value) {
            Some(c) => {
                *c += delta;
                *c
            }
            None => {
                values.insert(value.to_string(), delta);
                delta
            }
        };
        if now == 0 {
            values.remove(value);
            if values.is_empty() {
                self.0.remove(key);
            }
        }
    }

    /// Add `delta` to the pair the node has for `key`, if it has that label.
    fn add_for_node(&mut self, labels: &BTreeMap<String, String>, key: &str, delta: i64) {
        if let Some(v) = labels.get(key) {
            self.add(key, v, delta);
        }
    }

    fn get(&self, key: &str, value: &str) -> i64 {
        self.0
            .get(key)
            .and_then(|m| m.get(value))
            .copied()
            .unwrap_or(0)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Count `existing` (on a node with `labels`) for each of the incoming pod's affinity terms,
    /// when it matches all of them.
    fn update_affinity(
        &mut self,
        terms: &[AffinityTerm],
        existing: &PodInfo,
        labels: &BTreeMap<String, String>,
        delta: i64,
    ) {
        if matches_all(terms, existing) {
            for t in terms {
                self.add_for_node(labels, &t.topology_key, delta);
            }
        }
    }

    /// Count `target` (on a node with `labels`) for each anti-affinity term it matches.
    fn update_anti_affinity(
        &mut self,
        terms: &[AffinityTerm],
        target: &PodInfo,
        ns_labels: Option<&BTreeMap<String, String>>,
        labels: &BTreeMap<String, String>,
        delta: i64,
    ) {
        for t in terms {
            if labels.contains_key(&t.topology_key) && term_matches(t, target, ns_labels) {
                self.add_for_node(labels, &t.topology_key, delta);
            }
        }
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
    /// Account for `other` added (`delta` 1) or removed (-1) on the node with `labels`.
    fn update_with_pod(
        &mut self,
        incoming: &PodInfo,
        other: &PodInfo,
        labels: &BTreeMap<String, String>,
        delta: i64,
    ) {
        let pod = self.pod.clone();
        self.existing_anti_affinity.update_anti_affinity(
            &other.required_anti_affinity,
            incoming,
            pod.ns_labels.as_ref(),
            labels,
            delta,
        );
        self.affinity
            .update_affinity(&pod.affinity, other, labels, delta);
        self.anti_affinity
            .update_anti_affinity(&pod.anti_affinity, other, None, labels, delta);
    }

    /// `satisfyPodAffinity`: every affinity term's topology key is on the node and some pod in
    /// that topology matches, or no pod matches anywhere and the pod matches its own terms.
    fn satisfies_affinity(&self, labels: &BTreeMap<String, String>) -> bool {
        let mut pods_exist = true;
        for t in &self.pod.affinity {
            match labels.get(&t.topology_key) {
                Some(v) => {
                    if self.affinity.get(&t.topology_key, v) <= 0 {
                        pods_exist = false;
                    }
                }
                None => return false,
            }
        }
        pods_exist || (self.affinity.is_empty() && self.pod.matches_own_affinity)
    }

    /// `satisfyPodAntiAffinity`: no pod matching an anti-affinity term in the node's topology.
    fn satisfies_anti_affinity(&self, labels: &BTreeMap<String, String>) -> bool {
        if self.anti_affinity.is_empty() {
            return true;
        }
        !self.pod.anti_affinity.iter().any(|t| {
            labels
                .get(&t.topology_key)
                .is_some_and(|v| self.anti_affinity.get(&t.topology_key, v) > 0)
        })
    }

    /// `satisfyExistingPodsAntiAffinity`: no existing pod in any of the node's topologies has a
    /// required anti-affinity term matching the incoming pod.
    fn satisfies_existing_anti_affinity(&self, labels: &BTreeMap<String, String>) -> bool {
        self.existing_anti_affinity.0.iter().all(|(key, values)| {
            labels
                .get(key)
                .and_then(|v| values.get(v))
                .is_none_or(|c| *c <= 0)
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

        let mut existing_anti_affinity = TopologyCounts::default();
        let mut affinity_counts = TopologyCounts::default();
        let mut anti_affinity_counts = TopologyCounts::default();
        let incoming_terms = !affinity.is_empty() || !anti_affinity.is_empty();
        let mut anti_on_node: Vec<bool> = Vec::with_capacity(anti_affinity.len());
        let mut anti_matches: Vec<i64> = Vec::with_capacity(anti_affinity.len());
        for node in snapshot.nodes() {
            let labels = node.labels();
            if labels.is_empty() {
                continue;
            }
            for existing in &node.pods_with_required_anti_affinity {
                existing_anti_affinity.update_anti_affinity(
                    &existing.required_anti_affinity,
                    pod,
                    ns_labels.as_ref(),
                    labels,
                    1,
                );
            }
            if !incoming_terms {
                continue;
            }
            // Matches are counted per node first, then added to the topology pairs once.
            let affinity_keys = affinity
                .iter()
                .any(|t| labels.contains_key(&t.topology_key));
            anti_on_node.clear();
            anti_on_node.extend(
                anti_affinity
                    .iter()
                    .map(|t| labels.contains_key(&t.topology_key)),
            );
            if !affinity_keys && !anti_on_node.contains(&true) {
                continue;
            }
            let mut affinity_matches = 0i64;
            anti_matches.clear();
            anti_matches.resize(anti_affinity.len(), 0);
            for existing in &node.pods {
                if affinity_keys && matches_all(&affinity, existing) {
                    affinity_matches += 1;
                }
                for (i, t) in anti_affinity.iter().enumerate() {
                    if anti_on_node[i] && term_matches(t, existing, None) {
                        anti_matches[i] += 1;
                    }
                }
            }
            if affinity_matches > 0 {
                for t in &affinity {
                    affinity_counts.add_for_node(labels, &t.topology_key, affinity_matches);
                }
            }
            for (t, n) in anti_affinity.iter().zip(&anti_matches) {
                if *n > 0 {
                    anti_affinity_counts.add_for_node(labels, &t.topology_key, *n);
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
        _snapshot: &Snapshot,
    ) -> Status {
        let Some(s) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) else {
            return missing_state(PRE_FILTER_KEY);
        };
        s.update_with_pod(pod, added, node.labels(), 1);
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
        _snapshot: &Snapshot,
    ) -> Status {
        let Some(s) = state.read_mut::<PreFilterState>(PRE_FILTER_KEY) else {
            return missing_state(PRE_FILTER_KEY);
        };
        s.update_with_pod(pod, removed, node.labels(), -1);
        Status::success()
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return missing_state(PRE_FILTER_KEY);
        };
        let labels = node.labels();
        if !s.satisfies_affinity(labels) {
            return Status::unresolvable(ERR_REASON_AFFINITY);
        }
        if !s.satisfies_anti_affinity(labels) {
            return Status::unschedulable(ERR_REASON_ANTI_AFFINITY);
        }
        if !s.satisfies_existing_anti_affinity(labels) {
            return Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY);
        }
        Status::success()
    }
}

// ---------------------------------------------------------------------------------------------
// PreScore / Score / NormalizeScore.

/// Score per topology pair: label key → label value → summed weights.
type TopologyScores = HashMap<String, HashMap<String, i64>>;

#[derive(Debug, Clone)]
struct PreScoreState {
    scores: Arc<TopologyScores>,
}

/// Adds `weight` to the pair of the node (with `labels`) for `term`, if `pod` matches it.
/// Returns whether an entry was touched.
fn process_term(
    scores: &mut TopologyScores,
    term: &AffinityTerm,
    weight: i64,
    pod: &PodInfo,
    ns_labels: Option<&BTreeMap<String, String>>,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(v) = labels.get(&term.topology_key) else {
        return false;
    };
    if !term_matches(term, pod, ns_labels) {
        return false;
    }
    if !scores.contains_key(&term.topology_key) {
        scores.insert(term.topology_key.clone(), HashMap::new());
    }
    if let Some(values) = scores.get_mut(&term.topology_key) {
        match values.get_mut(v) {
            Some(s) => *s += weight,
            None => {
                values.insert(v.clone(), weight);
            }
        }
    }
    true
}

fn process_terms(
    scores: &mut TopologyScores,
    terms: &[WeightedAffinityTerm],
    sign: i64,
    pod: &PodInfo,
    ns_labels: Option<&BTreeMap<String, String>>,
    labels: &BTreeMap<String, String>,
) -> bool {
    let mut touched = false;
    for t in terms {
        touched |= process_term(
            scores,
            &t.term,
            i64::from(t.weight) * sign,
            pod,
            ns_labels,
            labels,
        );
    }
    touched
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
        let preferred_affinity = merge(&pod.preferred_affinity);
        let preferred_anti_affinity = merge(&pod.preferred_anti_affinity);
        let ns_labels = snapshot.namespace_labels(pod.namespace());
        let hard_weight = i64::from(self.args.hard_pod_affinity_weight);

        let mut scores = TopologyScores::new();
        let mut touched = false;
        for node in snapshot.nodes() {
            let labels = node.labels();
            if labels.is_empty() {
                continue;
            }
            let existing_pods = if has_constraints {
                &node.pods
            } else {
                &node.pods_with_affinity
            };
            for existing in existing_pods {
                // The incoming pod's preferred terms against the existing pod.
                touched |=
                    process_terms(&mut scores, &preferred_affinity, 1, existing, None, labels);
                touched |= process_terms(
                    &mut scores,
                    &preferred_anti_affinity,
                    -1,
                    existing,
                    None,
                    labels,
                );
                // The existing pod's terms against the incoming pod.
                if hard_weight > 0 {
                    for t in &existing.required_affinity {
                        touched |=
                            process_term(&mut scores, t, hard_weight, pod, ns_labels, labels);
                    }
                }
                touched |= process_terms(
                    &mut scores,
                    &existing.preferred_affinity,
                    1,
                    pod,
                    ns_labels,
                    labels,
                );
                touched |= process_terms(
                    &mut scores,
                    &existing.preferred_anti_affinity,
                    -1,
                    pod,
                    ns_labels,
                    labels,
                );
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
        let labels = node.labels();
        let mut score = 0i64;
        for (key, values) in s.scores.iter() {
            if let Some(v) = labels.get(key) {
                score += values.get(v).copied().unwrap_or(0);
            }
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
