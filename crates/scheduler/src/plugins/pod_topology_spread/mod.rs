//! PodTopologySpread: `topologySpreadConstraints` with `whenUnsatisfiable: DoNotSchedule` are
//! enforced (PreFilter, Filter, with AddPod and RemovePod for preemption); `ScheduleAnyway`
//! ones are preferences (PreScore, Score, NormalizeScore). Pods without constraints of their own
//! get the cluster default constraints, with a selector derived from the Services,
//! ReplicationControllers, ReplicaSets and StatefulSets selecting them. Mirrors
//! `pkg/scheduler/framework/plugins/podtopologyspread` of Kubernetes v1.32 (`common.go`,
//! `filtering.go`, `scoring.go`, `plugin.go`).
//!
//! Matching pods are counted per group of pods with equal namespace, labels and termination
//! (`Snapshot::pod_groups`: a selector is evaluated once per group), and kept per value id of
//! the topology label (`snapshot::ValueCounts`), so Filter and Score look nodes up without
//! string keys. The results are those of evaluating every pod on every node.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use capstan_api::field::FieldError;
use capstan_api::selector::validation::{aggregate, qualified_name_errors};
use capstan_api::selector::{LabelSelector, Operator, Requirement};
use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use serde::Deserialize;
use serde_json::Value;

use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeScore, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status, MAX_NODE_SCORE,
};
use crate::snapshot::{NodeSlots, Snapshot, ValueCounts};
use crate::types::{label_selector, NodeInfo, PodInfo};

use super::parse_args;

mod node_inclusion;
#[cfg(test)]
mod tests;

use node_inclusion::NodeInclusion;

pub const NAME: &str = "PodTopologySpread";

const PRE_FILTER_KEY: &str = "PreFilterPodTopologySpread";
const PRE_SCORE_KEY: &str = "PreScorePodTopologySpread";

pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";

const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";
const HONOR: &str = "Honor";
const SYSTEM_DEFAULTING: &str = "System";
const LIST_DEFAULTING: &str = "List";

/// Critical-path sentinel (Go's `math.MaxInt32`).
const NO_MATCH_NUM: i64 = i32::MAX as i64;
/// Score marking a node NormalizeScore must ignore.
const INVALID_SCORE: i64 = -1;

// ---------------------------------------------------------------------------------------------
// Args.

/// One entry of `defaultConstraints`, as written (fields optional so validation can report them).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawConstraint {
    #[serde(default)]
    max_skew: i32,
    #[serde(default)]
    topology_key: String,
    #[serde(default)]
    when_unsatisfiable: String,
    label_selector: Option<Value>,
    min_domains: Option<i32>,
    node_affinity_policy: Option<String>,
    node_taints_policy: Option<String>,
    match_label_keys: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawArgs {
    default_constraints: Option<Vec<RawConstraint>>,
    defaulting_type: Option<String>,
}

/// Validated `PodTopologySpreadArgs`.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    /// The constraints applied to pods without their own (`List` defaulting), or the system
    /// defaults (`System` defaulting).
    pub default_constraints: Vec<TopologySpreadConstraint>,
    /// `defaultingType` was `System`.
    pub system_defaulted: bool,
}

/// Kubernetes' system default constraints: hostname (maxSkew 3) and zone (maxSkew 5), both
/// `ScheduleAnyway`.
pub fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    vec![
        TopologySpreadConstraint {
            topology_key: LABEL_HOSTNAME.into(),
            when_unsatisfiable: SCHEDULE_ANYWAY.into(),
            max_skew: 3,
            ..Default::default()
        },
        TopologySpreadConstraint {
            topology_key: LABEL_TOPOLOGY_ZONE.into(),
            when_unsatisfiable: SCHEDULE_ANYWAY.into(),
            max_skew: 5,
            ..Default::default()
        },
    ]
}

impl Default for Args {
    fn default() -> Args {
        Args {
            default_constraints: system_default_constraints(),
            system_defaulted: true,
        }
    }
}

impl Args {
    /// Parse, default (`defaultingType: System`) and validate (`ValidatePodTopologySpreadArgs`).
    pub fn parse(args: &Value) -> Result<Args, String> {
        let raw: RawArgs = parse_args(args)?;
        let defaulting = raw
            .defaulting_type
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| SYSTEM_DEFAULTING.to_string());
        let constraints = raw.default_constraints.unwrap_or_default();
        let mut errs: Vec<String> = Vec::new();
        let quoted = |s: &str| capstan_api::field::go_quote(s);
        if defaulting != SYSTEM_DEFAULTING && defaulting != LIST_DEFAULTING {
            errs.push(
                FieldError::not_supported_shown(
                    "defaultingType",
                    &quoted(&defaulting),
                    &[SYSTEM_DEFAULTING, LIST_DEFAULTING],
                )
                .message,
            );
        } else if defaulting == SYSTEM_DEFAULTING && !constraints.is_empty() {
            errs.push(
                FieldError::invalid_shown(
                    "defaultingType",
                    &quoted(&defaulting),
                    "when .defaultConstraints are not empty",
                )
                .message,
            );
        }
        for (i, c) in constraints.iter().enumerate() {
            let p = format!("defaultConstraints[{i}]");
            if c.max_skew <= 0 {
                errs.push(
                    FieldError::invalid(
                        format!("{p}.maxSkew"),
                        &Value::from(c.max_skew),
                        "not in valid range (0, inf)",
                    )
                    .message,
                );
            }
            if c.topology_key.is_empty() {
                errs.push(
                    FieldError::required(format!("{p}.topologyKey"), "can not be empty").message,
                );
            } else {
                for msg in qualified_name_errors(&c.topology_key) {
                    errs.push(
                        FieldError::invalid_shown(
                            format!("{p}.topologyKey"),
                            &quoted(&c.topology_key),
                            &msg,
                        )
                        .message,
                    );
                }
            }
            if c.when_unsatisfiable.is_empty() {
                errs.push(
                    FieldError::required(format!("{p}.whenUnsatisfiable"), "can not be empty")
                        .message,
                );
            } else if c.when_unsatisfiable != DO_NOT_SCHEDULE
                && c.when_unsatisfiable != SCHEDULE_ANYWAY
            {
                errs.push(
                    FieldError::not_supported_shown(
                        format!("{p}.whenUnsatisfiable"),
                        &quoted(&c.when_unsatisfiable),
                        &[DO_NOT_SCHEDULE, SCHEDULE_ANYWAY],
                    )
                    .message,
                );
            }
            if c.label_selector.is_some() {
                errs.push(
                    FieldError::forbidden(
                        format!("{p}.labelSelector"),
                        "constraint must not define a selector, as they deduced for each pod",
                    )
                    .message,
                );
            }
            if constraints[..i].iter().any(|o| {
                o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
            }) {
                errs.push(
                    FieldError::duplicate_shown(
                        p.clone(),
                        &quoted(&format!("{{{}, {}}}", c.topology_key, c.when_unsatisfiable)),
                    )
                    .message,
                );
            }
        }
        if !errs.is_empty() {
            return Err(aggregate(&errs));
        }
        if defaulting == SYSTEM_DEFAULTING {
            return Ok(Args::default());
        }
        Ok(Args {
            default_constraints: constraints
                .into_iter()
                .map(|c| TopologySpreadConstraint {
                    max_skew: c.max_skew,
                    topology_key: c.topology_key,
                    when_unsatisfiable: c.when_unsatisfiable,
                    label_selector: None,
                    min_domains: c.min_domains,
                    node_affinity_policy: c.node_affinity_policy,
                    node_taints_policy: c.node_taints_policy,
                    match_label_keys: c.match_label_keys,
                })
                .collect(),
            system_defaulted: false,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Owner selectors (the objects default constraints derive a pod's selector from).

/// The selector of an object that can select a pod, as `helper.DefaultSelector` reads it.
#[derive(Debug, Clone)]
pub enum OwnerSelector {
    /// A Service with a non-nil `spec.selector` (Services without one must be left out).
    Service {
        namespace: String,
        selector: BTreeMap<String, String>,
    },
    /// A ReplicationController (`spec.selector`).
    ReplicationController {
        namespace: String,
        name: String,
        selector: BTreeMap<String, String>,
    },
    /// A ReplicaSet (`spec.selector`, parsed; `LabelSelector::nothing()` when absent).
    ReplicaSet {
        namespace: String,
        name: String,
        selector: LabelSelector,
    },
    /// A StatefulSet (`spec.selector`, parsed; `LabelSelector::nothing()` when absent).
    StatefulSet {
        namespace: String,
        name: String,
        selector: LabelSelector,
    },
}

impl OwnerSelector {
    fn namespace(&self) -> &str {
        match self {
            OwnerSelector::Service { namespace, .. }
            | OwnerSelector::ReplicationController { namespace, .. }
            | OwnerSelector::ReplicaSet { namespace, .. }
            | OwnerSelector::StatefulSet { namespace, .. } => namespace,
        }
    }
}

/// The known owner selectors, by namespace. Empty until the scheduler feeds it (see
/// [`OwnerSelectors::replace`]); shareable between profiles.
#[derive(Debug, Default)]
pub struct OwnerSelectors {
    by_namespace: RwLock<HashMap<String, Vec<OwnerSelector>>>,
}

fn equals(k: &str, v: &str) -> Option<Requirement> {
    Requirement::new(k.to_string(), Operator::Equals, vec![v.to_string()]).ok()
}

impl OwnerSelectors {
    pub fn new() -> OwnerSelectors {
        OwnerSelectors::default()
    }

    /// Replace every known selector.
    pub fn replace(&self, all: Vec<OwnerSelector>) {
        let mut map: HashMap<String, Vec<OwnerSelector>> = HashMap::new();
        for o in all {
            map.entry(o.namespace().to_string()).or_default().push(o);
        }
        *self
            .by_namespace
            .write()
            .unwrap_or_else(PoisonError::into_inner) = map;
    }

    /// `helper.DefaultSelector`: the merged selectors of the pod's Services, plus its
    /// controlling ReplicationController's, ReplicaSet's or StatefulSet's selector.
    fn default_selector(&self, pod: &PodInfo) -> LabelSelector {
        let map = self
            .by_namespace
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let owners = map.get(pod.namespace()).map(Vec::as_slice).unwrap_or(&[]);
        let labels = pod.labels();
        let mut set: BTreeMap<String, String> = BTreeMap::new();
        for o in owners {
            if let OwnerSelector::Service { selector, .. } = o {
                if selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                    set.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
        }
        let controller = pod
            .metadata()
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true));
        let mut extra: Vec<Requirement> = Vec::new();
        if let Some(owner) = controller {
            for o in owners {
                match (o, owner.api_version.as_str(), owner.kind.as_str()) {
                    (
                        OwnerSelector::ReplicationController { name, selector, .. },
                        "v1",
                        "ReplicationController",
                    ) if *name == owner.name => {
                        set.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
                    }
                    (OwnerSelector::ReplicaSet { name, selector, .. }, "apps/v1", "ReplicaSet")
                    | (
                        OwnerSelector::StatefulSet { name, selector, .. },
                        "apps/v1",
                        "StatefulSet",
                    ) if *name == owner.name && !selector.is_nothing() => {
                        extra.extend(selector.requirements().iter().cloned());
                    }
                    _ => {}
                }
            }
        }
        let mut reqs: Vec<Requirement> = set.iter().filter_map(|(k, v)| equals(k, v)).collect();
        reqs.extend(extra);
        LabelSelector::from_requirements(reqs)
    }
}

// ---------------------------------------------------------------------------------------------
// Constraints.

/// A spreading constraint with its selector parsed (`topologySpreadConstraint`).
#[derive(Debug, Clone)]
struct Constraint {
    max_skew: i32,
    topology_key: String,
    selector: LabelSelector,
    min_domains: i32,
    /// `nodeAffinityPolicy: Honor` (the default).
    honor_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (default Ignore).
    honor_taints: bool,
}

impl Constraint {
    fn matches(&self, pod: &PodInfo) -> bool {
        let labels = pod.labels();
        self.selector
            .matches_fn(|k| labels.get(k).map(String::as_str))
    }
}

/// The constraints of `list` with `whenUnsatisfiable == action` (`filterTopologySpreadConstraints`),
/// with `matchLabelKeys` ANDed into the selectors.
fn filter_constraints(
    list: &[TopologySpreadConstraint],
    pod_labels: &BTreeMap<String, String>,
    action: &str,
) -> Result<Vec<Constraint>, String> {
    let mut out = Vec::new();
    for c in list.iter().filter(|c| c.when_unsatisfiable == action) {
        let mut selector = match &c.label_selector {
            Some(s) => label_selector(s)?,
            None => LabelSelector::nothing(),
        };
        let keys = c.match_label_keys.as_deref().unwrap_or(&[]);
        if !keys.is_empty() {
            let pinned: BTreeMap<&str, &str> = keys
                .iter()
                .filter_map(|k| pod_labels.get(k).map(|v| (k.as_str(), v.as_str())))
                .collect();
            if !pinned.is_empty() && !selector.is_nothing() {
                let mut reqs: Vec<Requirement> =
                    pinned.iter().filter_map(|(k, v)| equals(k, v)).collect();
                reqs.extend(selector.requirements().iter().cloned());
                selector = LabelSelector::from_requirements(reqs);
            }
        }
        out.push(Constraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            selector,
            min_domains: c.min_domains.unwrap_or(1),
            honor_affinity: c.node_affinity_policy.as_deref().is_none_or(|p| p == HONOR),
            honor_taints: c.node_taints_policy.as_deref() == Some(HONOR),
        });
    }
    Ok(out)
}

fn node_has_keys(node: &NodeInfo, constraints: &[Constraint]) -> bool {
    let labels = node.labels();
    constraints
        .iter()
        .all(|c| labels.contains_key(&c.topology_key))
}

/// Whether an existing pod can count for an incoming pod of `namespace`: same namespace, not
/// terminating.
fn counts_for(pod: &PodInfo, namespace: &str) -> bool {
    !pod.terminating() && pod.namespace() == namespace
}

/// Whether `selector` counts `pod` (an empty selector counts none, as Kubernetes v1.32 does).
fn selects(selector: &LabelSelector, pod: &PodInfo) -> bool {
    !selector.is_empty() && selector.matches_fn(|k| pod.labels().get(k).map(String::as_str))
}

/// Pods on the node in `namespace`, not terminating, matching `selector` (none for an empty
/// selector, as Kubernetes v1.32 counts).
fn count_matching(pods: &[Arc<PodInfo>], selector: &LabelSelector, namespace: &str) -> i64 {
    if selector.is_empty() {
        return 0;
    }
    pods.iter()
        .filter(|p| counts_for(p, namespace) && selects(selector, p))
        .count() as i64
}

/// Lazily evaluated node inclusion for one node (`matchNodeInclusionPolicies`).
struct Inclusion<'a> {
    rules: &'a NodeInclusion,
    node: &'a NodeInfo,
    affinity: Option<bool>,
    taints: Option<bool>,
}

impl<'a> Inclusion<'a> {
    fn new(rules: &'a NodeInclusion, node: &'a NodeInfo) -> Self {
        Inclusion {
            rules,
            node,
            affinity: None,
            taints: None,
        }
    }

    fn includes(&mut self, c: &Constraint) -> bool {
        if c.honor_affinity && !self.rules.matches_every_node() {
            let (rules, node) = (self.rules, self.node);
            if !*self
                .affinity
                .get_or_insert_with(|| rules.matches_affinity(node))
            {
                return false;
            }
        }
        if c.honor_taints && self.node.has_no_schedule_taints {
            let (rules, node) = (self.rules, self.node);
            if !*self
                .taints
                .get_or_insert_with(|| rules.tolerates_taints(node))
            {
                return false;
            }
        }
        true
    }
}

// ---------------------------------------------------------------------------------------------
// The plugin.

pub struct PodTopologySpread {
    default_constraints: Vec<TopologySpreadConstraint>,
    system_defaulted: bool,
    owners: Arc<OwnerSelectors>,
}

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(PodTopologySpread::with_args(
        Args::parse(args)?,
        Arc::new(OwnerSelectors::new()),
    )))
}

/// Like [`new`], reading default-constraint owner selectors from `owners` (which the scheduler
/// keeps current and may share between profiles).
pub fn new_with_owners(
    args: &Value,
    owners: Arc<OwnerSelectors>,
) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(PodTopologySpread::with_args(
        Args::parse(args)?,
        owners,
    )))
}

impl PodTopologySpread {
    /// A plugin reading owner selectors from `owners` (which the scheduler keeps current).
    pub fn with_args(args: Args, owners: Arc<OwnerSelectors>) -> PodTopologySpread {
        PodTopologySpread {
            default_constraints: args.default_constraints,
            system_defaulted: args.system_defaulted,
            owners,
        }
    }

    /// The owner selectors default constraints read.
    pub fn owners(&self) -> &Arc<OwnerSelectors> {
        &self.owners
    }

    /// The pod's constraints for `action`, or the default ones when it has none
    /// (`getConstraints` / `buildDefaultConstraints`).
    fn constraints(&self, pod: &PodInfo, action: &str) -> Result<Vec<Constraint>, String> {
        let kind = if action == DO_NOT_SCHEDULE {
            "hard"
        } else {
            "soft"
        };
        let own = pod
            .pod()
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_deref())
            .unwrap_or(&[]);
        if !own.is_empty() {
            return filter_constraints(own, pod.labels(), action)
                .map_err(|e| format!("obtaining pod's {kind} topology spread constraints: {e}"));
        }
        // Checked before building the constraints: most pods have no defaults to apply.
        if !self
            .default_constraints
            .iter()
            .any(|c| c.when_unsatisfiable == action)
        {
            return Ok(Vec::new());
        }
        let selector = self.owners.default_selector(pod);
        if selector.is_empty() {
            return Ok(Vec::new());
        }
        let mut constraints =
            filter_constraints(&self.default_constraints, pod.labels(), action)
                .map_err(|e| format!("setting default {kind} topology spread constraints: {e}"))?;
        for c in &mut constraints {
            c.selector = selector.clone();
        }
        Ok(constraints)
    }
}

// ---------------------------------------------------------------------------------------------
// PreFilter / Filter.

/// No value id (the initial critical paths).
const NO_ID: u32 = u32::MAX;

/// The two domains with the fewest matching pods (`criticalPaths`), by value id: `[0]` always
/// holds the minimum; `[1]` is at least `[0]`. The initial entries stand for the empty value,
/// as Kubernetes' do.
#[derive(Debug, Clone, PartialEq)]
struct CriticalPaths([(u32, i64); 2]);

impl CriticalPaths {
    fn new() -> Self {
        CriticalPaths([(NO_ID, NO_MATCH_NUM), (NO_ID, NO_MATCH_NUM)])
    }

    /// Domain `id` (named `name`) now has `num` matching pods.
    fn update(&mut self, id: u32, name: &str, num: i64) {
        let p = &mut self.0;
        let same = |entry: u32| entry == id || (entry == NO_ID && name.is_empty());
        let existing = if same(p[0].0) {
            Some(0)
        } else if same(p[1].0) {
            Some(1)
        } else {
            None
        };
        match existing {
            Some(i) => {
                p[i] = (id, num);
                if p[0].1 > p[1].1 {
                    p.swap(0, 1);
                }
            }
            None => {
                if num < p[0].1 {
                    p[1] = std::mem::replace(&mut p[0], (id, num));
                } else if num < p[1].1 {
                    p[1] = (id, num);
                }
            }
        }
    }
}

/// What PreFilter derives from the pod; shared by clones of the state.
#[derive(Debug)]
struct HardConstraints {
    constraints: Vec<Constraint>,
    /// The incoming pod matches each constraint's selector.
    self_match: Vec<bool>,
    inclusion: NodeInclusion,
}

#[derive(Debug, Clone)]
struct PreFilterState {
    shared: Arc<HardConstraints>,
    /// Per constraint: matching pods per topology value of the eligible domains.
    counts: Vec<ValueCounts>,
    paths: Vec<CriticalPaths>,
}

impl PreFilterState {
    /// `updateWithPod`: account for `other` added (1) or removed (-1) on `node`.
    fn update_with_pod(&mut self, other: &PodInfo, pod: &PodInfo, node: &NodeInfo, delta: i64) {
        if other.namespace() != pod.namespace() {
            return;
        }
        let shared = self.shared.clone();
        if !node_has_keys(node, &shared.constraints) {
            return;
        }
        let mut inclusion = Inclusion::new(&shared.inclusion, node);
        for (i, c) in shared.constraints.iter().enumerate() {
            if !c.matches(other) || !inclusion.includes(c) {
                continue;
            }
            let counts = &mut self.counts[i];
            let Some(id) = counts.of_or_insert(node) else {
                continue;
            };
            let now = counts.add(id, delta);
            self.paths[i].update(id, counts.name(id), now);
        }
    }
}

fn missing_state(key: &str) -> Status {
    Status::error(format!("reading {key:?} from cycleState: not found"))
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let constraints = match self.constraints(pod, DO_NOT_SCHEDULE) {
            Ok(c) => c,
            Err(e) => {
                return (
                    PreFilterResult::default(),
                    Status::error(format!("get constraints from pod: {e}")),
                )
            }
        };
        if constraints.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        let inclusion = NodeInclusion::new(pod);
        let namespace = pod.namespace();
        let mut counts: Vec<ValueCounts> = constraints
            .iter()
            .map(|c| ValueCounts::new(snapshot.node_values(&c.topology_key)))
            .collect();
        // Every eligible domain is counted, with 0 when no pod matches there. Without node
        // inclusion policies to apply, a node is eligible when it has every key: with a single
        // constraint, the domains are then simply the values some node has.
        let nodes = snapshot.nodes();
        let k = constraints.len();
        let include_all =
            inclusion.matches_every_node() && constraints.iter().all(|c| !c.honor_taints);
        let mut eligible: Vec<bool> = Vec::new();
        if include_all && k == 1 {
            let c = &mut counts[0];
            let ids: Vec<u32> = c.values().ids().collect();
            for id in ids {
                c.add(id, 0);
            }
        } else {
            eligible = vec![false; nodes.len() * k];
            for (n, node) in nodes.iter().enumerate() {
                if !counts.iter().all(|c| c.at(n).is_some()) {
                    continue;
                }
                let mut included = Inclusion::new(&inclusion, node);
                for (i, c) in constraints.iter().enumerate() {
                    if !include_all && !included.includes(c) {
                        continue;
                    }
                    if let Some(id) = counts[i].at(n) {
                        counts[i].add(id, 0);
                        eligible[n * k + i] = true;
                    }
                }
            }
        }
        let is_eligible = |counts: &[ValueCounts], n: usize, i: usize| {
            if eligible.is_empty() {
                counts[i].at(n).is_some()
            } else {
                eligible.get(n * k + i).copied().unwrap_or(false)
            }
        };
        // Matching pods, per group of pods with equal namespace, labels and termination.
        let mut matching: Vec<bool> = Vec::with_capacity(k);
        for g in snapshot.pod_groups() {
            if !counts_for(&g.pod, namespace) {
                continue;
            }
            matching.clear();
            matching.extend(constraints.iter().map(|c| selects(&c.selector, &g.pod)));
            if !matching.contains(&true) {
                continue;
            }
            for (&n, &count) in &g.nodes {
                let n = n as usize;
                for i in 0..k {
                    if !matching[i] || !is_eligible(&counts, n, i) {
                        continue;
                    }
                    if let Some(id) = counts[i].at(n) {
                        counts[i].add(id, i64::from(count));
                    }
                }
            }
        }
        let paths = counts
            .iter()
            .map(|c| {
                let mut p = CriticalPaths::new();
                for (id, n) in c.iter() {
                    p.update(id, c.name(id), n);
                }
                p
            })
            .collect();
        let self_match = constraints.iter().map(|c| c.matches(pod)).collect();
        state.write(
            PRE_FILTER_KEY,
            PreFilterState {
                shared: Arc::new(HardConstraints {
                    constraints,
                    self_match,
                    inclusion,
                }),
                counts,
                paths,
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
        s.update_with_pod(added, pod, node, 1);
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
        s.update_with_pod(removed, pod, node, -1);
        Status::success()
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return missing_state(PRE_FILTER_KEY);
        };
        for (i, c) in s.shared.constraints.iter().enumerate() {
            let counts = &s.counts[i];
            let Some(id) = counts.of(node) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            // Fewer eligible domains than minDomains: the global minimum counts as 0.
            let min_match = if (counts.len() as i64) < i64::from(c.min_domains) {
                0
            } else {
                s.paths[i].0[0].1
            };
            let self_match = i64::from(s.shared.self_match[i]);
            let match_num = id.map_or(0, |id| counts.count(id));
            if match_num + self_match - min_match > i64::from(c.max_skew) {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}

// ---------------------------------------------------------------------------------------------
// PreScore / Score / NormalizeScore.

#[derive(Debug)]
struct SoftConstraints {
    constraints: Vec<Constraint>,
    /// Nodes must have every topology key (false for system defaults).
    require_all_topologies: bool,
    /// Snapshot indexes of candidate nodes missing a topology key.
    ignored: HashSet<usize>,
    /// Per constraint: matching pods per topology value of the candidates (none for hostname;
    /// nodes without the label count as the empty value).
    counts: Vec<ValueCounts>,
    /// Per hostname constraint: matching pods per node position.
    host_counts: Vec<Option<Vec<i64>>>,
    slots: NodeSlots,
    /// Per constraint: `ln(domains + 2)`.
    weights: Vec<f64>,
    namespace: String,
}

#[derive(Debug, Clone)]
struct PreScoreState(Arc<SoftConstraints>);

fn score_for_count(count: i64, max_skew: i32, weight: f64) -> f64 {
    count as f64 * weight + f64::from(max_skew - 1)
}

/// The id of the node's value (the empty value when it lacks the label), given one if needed.
fn id_or_empty(counts: &mut ValueCounts, node: &NodeInfo) -> u32 {
    match counts.of_or_insert(node) {
        Some(id) => id,
        None => counts.id_or_insert(""),
    }
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        if snapshot.num_nodes() == 0 {
            return Status::skip();
        }
        let has_own = pod
            .pod()
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|c| !c.is_empty());
        let require_all = has_own || !self.system_defaulted;
        let constraints = match self.constraints(pod, SCHEDULE_ANYWAY) {
            Ok(c) => c,
            Err(e) => return Status::error(format!("calculating preScoreState: {e}")),
        };
        if constraints.is_empty() {
            return Status::skip();
        }
        let mut counts: Vec<ValueCounts> = constraints
            .iter()
            .map(|c| ValueCounts::new(snapshot.node_values(&c.topology_key)))
            .collect();
        let has_keys =
            |counts: &[ValueCounts], node: &NodeInfo| counts.iter().all(|c| c.of(node).is_some());
        let mut ignored = HashSet::new();
        let mut ignored_count = 0usize;
        for node in nodes {
            if require_all && !has_keys(&counts, node) {
                ignored_count += 1;
                if let Some(i) = snapshot.index_of(node.name()) {
                    ignored.insert(i);
                }
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if c.topology_key != LABEL_HOSTNAME {
                    let id = id_or_empty(&mut counts[i], node);
                    counts[i].add(id, 0);
                }
            }
        }
        let weights = constraints
            .iter()
            .zip(&counts)
            .map(|(c, m)| {
                let size = if c.topology_key == LABEL_HOSTNAME {
                    nodes.len().saturating_sub(ignored_count)
                } else {
                    m.len()
                };
                (size as f64 + 2.0).ln()
            })
            .collect();
        let inclusion = NodeInclusion::new(pod);
        let namespace = pod.namespace();
        let all_nodes = snapshot.nodes();
        // Hostname constraints count the matching pods of the scored node itself.
        let mut host_counts: Vec<Option<Vec<i64>>> = constraints
            .iter()
            .map(|c| (c.topology_key == LABEL_HOSTNAME).then(|| vec![0; all_nodes.len()]))
            .collect();
        // Matching pods of every node, per group of pods with equal namespace, labels and
        // termination; each node's eligibility is evaluated once, when first needed.
        let k = constraints.len();
        // Per node and constraint: 0 not yet known, 1 counted, 2 not counted.
        let mut eligible = vec![0u8; all_nodes.len() * k];
        let mut matching: Vec<bool> = Vec::with_capacity(k);
        for g in snapshot.pod_groups() {
            if !counts_for(&g.pod, namespace) {
                continue;
            }
            matching.clear();
            matching.extend(constraints.iter().map(|c| selects(&c.selector, &g.pod)));
            if !matching.contains(&true) {
                continue;
            }
            for (&n, &count) in &g.nodes {
                let n = n as usize;
                let Some(node) = all_nodes.get(n) else {
                    continue;
                };
                let count = i64::from(count);
                if eligible[n * k] == 0 {
                    let keys = !require_all || counts.iter().all(|c| c.at(n).is_some());
                    let mut included = Inclusion::new(&inclusion, node);
                    for (i, c) in constraints.iter().enumerate() {
                        eligible[n * k + i] = if keys && included.includes(c) { 1 } else { 2 };
                    }
                }
                for i in 0..k {
                    if !matching[i] {
                        continue;
                    }
                    if let Some(per_node) = &mut host_counts[i] {
                        per_node[n] += count;
                        continue;
                    }
                    if eligible[n * k + i] != 1 {
                        continue;
                    }
                    let c = &mut counts[i];
                    let id = match c.at(n) {
                        Some(id) => Some(id),
                        None => c.id(""),
                    };
                    if let Some(id) = id.filter(|&id| c.get(id).is_some()) {
                        c.add(id, count);
                    }
                }
            }
        }
        state.write(
            PRE_SCORE_KEY,
            PreScoreState(Arc::new(SoftConstraints {
                constraints,
                require_all_topologies: require_all,
                ignored,
                counts,
                host_counts,
                slots: snapshot.node_slots(),
                weights,
                namespace: namespace.to_string(),
            })),
        );
        Status::success()
    }
}

impl ScorePlugin for PodTopologySpread {
    /// The weighted number of matching pods in the node's domains; normalized later.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(PreScoreState(s)) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Err(missing_state(PRE_SCORE_KEY));
        };
        if s.require_all_topologies && !s.counts.iter().all(|c| c.of(node).is_some()) {
            return Ok(0);
        }
        let mut score = 0.0;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(id) = s.counts[i].of(node) else {
                continue;
            };
            let count = match &s.host_counts[i] {
                Some(per_node) => match s.slots.index_of(node) {
                    Some(n) => per_node.get(n).copied().unwrap_or(0),
                    None => count_matching(&node.pods, &c.selector, &s.namespace),
                },
                None => id.map_or(0, |id| s.counts[i].count(id)),
            };
            score += score_for_count(count, c.max_skew, s.weights[i]);
        }
        Ok(score.round() as i64)
    }

    fn has_normalize(&self) -> bool {
        true
    }

    /// Fewer matching pods score higher: `100 * (max + min - score) / max`; nodes missing a
    /// topology key get 0.
    fn normalize(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore]) -> Status {
        let Some(PreScoreState(s)) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return missing_state(PRE_SCORE_KEY);
        };
        let mut min = i64::MAX;
        let mut max = 0i64;
        for ns in scores.iter_mut() {
            if s.ignored.contains(&ns.node) {
                ns.score = INVALID_SCORE;
                continue;
            }
            min = min.min(ns.score);
            max = max.max(ns.score);
        }
        for ns in scores.iter_mut() {
            if ns.score == INVALID_SCORE {
                ns.score = 0;
            } else if max == 0 {
                ns.score = MAX_NODE_SCORE;
            } else {
                ns.score = MAX_NODE_SCORE * (max + min - ns.score) / max;
            }
        }
        Status::success()
    }
}

// ---------------------------------------------------------------------------------------------
// Plugin, events and queueing hints.

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::PodAdd,
            ClusterEvent::PodUpdateLabel,
            ClusterEvent::PodDelete,
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeDelete,
            ClusterEvent::NodeUpdateLabel,
            ClusterEvent::NodeUpdateTaint,
        ]
    }

    /// `isSchedulableAfterPodChange`: only scheduled pods of the same namespace (or the pod
    /// itself) matter; an added or deleted pod must match a hard constraint's selector. For a
    /// label update the old labels are not known here, so any update retries when the pod has
    /// hard constraints. Node events cannot be inspected (no node is passed) and always retry.
    fn hint(&self, pod: &PodInfo, event: ClusterEvent, changed: Option<&PodInfo>) -> bool {
        let Some(changed) = changed else {
            return true;
        };
        match event {
            ClusterEvent::PodAdd | ClusterEvent::PodUpdateLabel | ClusterEvent::PodDelete => {}
            _ => return true,
        }
        let involved = (!pod.uid().is_empty() && changed.uid() == pod.uid())
            || (!changed.node_name().is_empty() && changed.namespace() == pod.namespace());
        if !involved {
            return false;
        }
        let Ok(constraints) = self.constraints(pod, DO_NOT_SCHEDULE) else {
            return true;
        };
        match event {
            ClusterEvent::PodUpdateLabel => !constraints.is_empty(),
            _ => constraints.iter().any(|c| c.matches(changed)),
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
