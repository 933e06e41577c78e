//! NodeResourcesFit: a node must have room for the pod's requests (pods, CPU, memory,
//! ephemeral storage, extended resources) next to what its pods already request; Score ranks
//! nodes by allocation with the configured strategy (LeastAllocated, MostAllocated or
//! RequestedToCapacityRatio). Mirrors `noderesources/fit.go` of Kubernetes v1.32.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use capstan_api::field::FieldError;
use capstan_api::validation::names::qualified_name;
use serde::Deserialize;
use serde_json::Value;

use super::{
    aggregate, default_resource_list, default_resources, is_extended_resource, AllocationScorer,
    ResourceSpec, Strategy, MAX_CUSTOM_PRIORITY_SCORE,
};
use crate::framework::{
    ClusterEvent, Code, CycleState, FilterPlugin, NodeScore, Plugin, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, ScorePlugin, Status, MAX_NODE_SCORE,
};
use crate::plugins::parse_args;
use crate::snapshot::Snapshot;
use crate::types::{NodeInfo, PodInfo};

pub const NAME: &str = "NodeResourcesFit";
/// CycleState key of the PreScore state (the PreFilter state is keyed by `NAME`).
const PRE_SCORE_KEY: &str = "PreScoreNodeResourcesFit";

const LEAST_ALLOCATED: &str = "LeastAllocated";
const MOST_ALLOCATED: &str = "MostAllocated";
const REQUESTED_TO_CAPACITY_RATIO: &str = "RequestedToCapacityRatio";

/// `NodeResourcesFitArgs` (kubescheduler.config.k8s.io/v1).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeResourcesFitArgs {
    /// Extended resources Filter does not check.
    #[serde(default)]
    pub ignored_resources: Option<Vec<String>>,
    /// Groups (the part before `/`) of extended resources Filter does not check.
    #[serde(default)]
    pub ignored_resource_groups: Option<Vec<String>>,
    #[serde(default)]
    pub scoring_strategy: Option<ScoringStrategy>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScoringStrategy {
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    #[serde(default)]
    pub resources: Option<Vec<ResourceSpec>>,
    #[serde(default)]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestedToCapacityRatioParam {
    #[serde(default)]
    pub shape: Option<Vec<UtilizationShapePoint>>,
}

/// A point of the utilization → score function: utilization 0..=100, score 0..=10.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UtilizationShapePoint {
    #[serde(default)]
    pub utilization: i32,
    #[serde(default)]
    pub score: i32,
}

pub struct NodeResourcesFit {
    ignored_resources: HashSet<String>,
    ignored_resource_groups: HashSet<String>,
    scorer: AllocationScorer,
}

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    let args: NodeResourcesFitArgs = parse_args(args)?;
    Ok(Arc::new(NodeResourcesFit::from_args(args)?))
}

impl NodeResourcesFit {
    /// Default, validate and build from args.
    pub fn from_args(args: NodeResourcesFitArgs) -> Result<NodeResourcesFit, String> {
        let ignored_resources = args.ignored_resources.unwrap_or_default();
        let ignored_resource_groups = args.ignored_resource_groups.unwrap_or_default();
        let strategy = args.scoring_strategy.unwrap_or_else(|| ScoringStrategy {
            type_: Some(LEAST_ALLOCATED.into()),
            resources: Some(default_resources()),
            requested_to_capacity_ratio: None,
        });
        let resources = default_resource_list(strategy.resources);
        let type_ = strategy.type_.unwrap_or_default();
        let shape = strategy
            .requested_to_capacity_ratio
            .map(|r| r.shape.unwrap_or_default());

        let mut errs = Vec::new();
        for (i, r) in ignored_resources.iter().enumerate() {
            for msg in qualified_name(r) {
                errs.push(FieldError::invalid(
                    format!("ignoredResources[{i}]"),
                    &Value::from(r.as_str()),
                    &msg,
                ));
            }
        }
        for (i, g) in ignored_resource_groups.iter().enumerate() {
            let path = format!("ignoredResourceGroups[{i}]");
            let v = Value::from(g.as_str());
            if g.contains('/') {
                errs.push(FieldError::invalid(
                    &path,
                    &v,
                    "resource group name can't contain '/'",
                ));
            }
            for msg in qualified_name(g) {
                errs.push(FieldError::invalid(&path, &v, &msg));
            }
        }
        let supported = [LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO];
        if !supported.contains(&type_.as_str()) {
            errs.push(FieldError::not_supported(
                "scoringStrategy.type",
                &Value::from(type_.as_str()),
                &supported,
            ));
        }
        for (i, r) in resources.iter().enumerate() {
            let w = r.weight.unwrap_or(1);
            if w <= 0 || w > MAX_NODE_SCORE {
                errs.push(FieldError::invalid(
                    format!("scoringStrategy.resources[{i}].weight"),
                    &Value::from(w),
                    &format!("resource weight of {} not in valid range (0, 100]", r.name),
                ));
            }
        }
        match &shape {
            Some(shape) => errs.extend(validate_shape(shape)),
            // Kubernetes dereferences the missing shape; report it as the empty shape instead.
            None if type_ == REQUESTED_TO_CAPACITY_RATIO => errs.extend(validate_shape(&[])),
            None => {}
        }
        aggregate(errs)?;

        let strategy = match type_.as_str() {
            MOST_ALLOCATED => Strategy::MostAllocated,
            REQUESTED_TO_CAPACITY_RATIO => Strategy::RequestedToCapacityRatio(
                shape
                    .unwrap_or_default()
                    .iter()
                    .map(|p| {
                        (
                            i64::from(p.utilization),
                            i64::from(p.score) * (MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE),
                        )
                    })
                    .collect(),
            ),
            _ => Strategy::LeastAllocated,
        };
        Ok(NodeResourcesFit {
            ignored_resources: ignored_resources.into_iter().collect(),
            ignored_resource_groups: ignored_resource_groups.into_iter().collect(),
            scorer: AllocationScorer::new(&resources, strategy, false),
        })
    }

    /// Whether Filter skips this extended resource (by name or by group).
    fn ignored(&self, name: &str) -> bool {
        is_extended_resource(name)
            && (self.ignored_resources.contains(name)
                || name
                    .split('/')
                    .next()
                    .is_some_and(|g| self.ignored_resource_groups.contains(g)))
    }
}

/// `validateFunctionShape`: at least one point, utilizations increasing within 0..=100,
/// scores within 0..=10.
fn validate_shape(shape: &[UtilizationShapePoint]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if shape.is_empty() {
        errs.push(FieldError::required(
            "scoringStrategy.shape",
            "at least one point must be specified",
        ));
        return errs;
    }
    for i in 1..shape.len() {
        if shape[i - 1].utilization >= shape[i].utilization {
            errs.push(FieldError::invalid(
                format!("scoringStrategy.shape[{i}].utilization"),
                &Value::from(shape[i].utilization),
                "values must be sorted in increasing order",
            ));
            break;
        }
    }
    for (i, p) in shape.iter().enumerate() {
        if !(0..=100).contains(&p.utilization) {
            errs.push(FieldError::invalid(
                format!("scoringStrategy.shape[{i}].utilization"),
                &Value::from(p.utilization),
                "not in valid range [0, 100]",
            ));
        }
        if !(0..=MAX_CUSTOM_PRIORITY_SCORE as i32).contains(&p.score) {
            errs.push(FieldError::invalid(
                format!("scoringStrategy.shape[{i}].score"),
                &Value::from(p.score),
                &format!("not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"),
            ));
        }
    }
    errs
}

/// What Filter checks for one pod, computed in PreFilter.
#[derive(Debug, Clone)]
struct PreFilterState {
    milli_cpu: i64,
    memory: i64,
    ephemeral_storage: i64,
    /// Non-zero scalar requests (extended resources, hugepages, ...) that are not ignored.
    scalar: Vec<(String, i64)>,
    /// The pod requests nothing at all (only the pod count is checked).
    empty: bool,
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }
    /// A pod rejected for lack of room may fit once a placed pod goes away or a node with
    /// (more) allocatable resources appears.
    fn events(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::PodDelete,
            ClusterEvent::NodeAdd,
            ClusterEvent::NodeUpdateAllocatable,
        ]
    }
    fn hint(&self, _pod: &PodInfo, event: ClusterEvent, changed: Option<&PodInfo>) -> bool {
        match event {
            // Deleting a pod that was never placed frees nothing.
            ClusterEvent::PodDelete => changed.is_none_or(|p| !p.node_name().is_empty()),
            _ => true,
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

impl PreFilterPlugin for NodeResourcesFit {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let r = &pod.requests;
        let scalar: Vec<(String, i64)> = r
            .scalar
            .iter()
            .filter(|(n, q)| *q != 0 && !self.ignored(n))
            .cloned()
            .collect();
        let empty =
            r.milli_cpu == 0 && r.memory == 0 && r.ephemeral_storage == 0 && scalar.is_empty();
        state.write(
            NAME,
            PreFilterState {
                milli_cpu: r.milli_cpu,
                memory: r.memory,
                ephemeral_storage: r.ephemeral_storage,
                scalar,
                empty,
            },
        );
        (PreFilterResult::default(), Status::success())
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(NAME) else {
            return Status::error(
                "error reading \"PreFilterNodeResourcesFit\" from cycleState: not found",
            );
        };
        let short = shortages(s, node);
        // The common case (the pod fits) is decided without building a list of reasons.
        if short == 0 && s.scalar.is_empty() {
            return Status::success();
        }
        insufficient(s, node, short)
    }
}

/// The reasons `shortages` reports, by bit.
const SHORTAGES: [&str; 4] = [
    "Too many pods",
    "Insufficient cpu",
    "Insufficient memory",
    "Insufficient ephemeral-storage",
];

/// Bit i set: the node lacks room for `SHORTAGES[i]` (extended resources are not checked).
#[inline(always)]
fn shortages(s: &PreFilterState, node: &NodeInfo) -> u8 {
    let pods = i64::try_from(node.pods.len()).unwrap_or(i64::MAX);
    let mut short = u8::from(pods.saturating_add(1) > node.allocatable.allowed_pod_number);
    if !s.empty {
        let (a, r) = (&node.allocatable, &node.requested);
        let lacks =
            |want: i64, alloc: i64, used: i64| want > 0 && want > alloc.saturating_sub(used);
        short |= u8::from(lacks(s.milli_cpu, a.milli_cpu, r.milli_cpu)) << 1;
        short |= u8::from(lacks(s.memory, a.memory, r.memory)) << 2;
        short |= u8::from(lacks(
            s.ephemeral_storage,
            a.ephemeral_storage,
            r.ephemeral_storage,
        )) << 3;
    }
    short
}

/// Filter's verdict with every shortage listed: those of `short`, then extended resources.
#[cold]
#[inline(never)]
fn insufficient(s: &PreFilterState, node: &NodeInfo, short: u8) -> Status {
    let mut reasons: Vec<Cow<'static, str>> = SHORTAGES
        .iter()
        .enumerate()
        .filter(|(i, _)| short & (1 << i) != 0)
        .map(|(_, r)| Cow::Borrowed(*r))
        .collect();
    if !s.empty {
        let (a, r) = (&node.allocatable, &node.requested);
        for (name, q) in &s.scalar {
            if *q > a.get(name).saturating_sub(r.get(name)) {
                reasons.push(Cow::Owned(format!("Insufficient {name}")));
            }
        }
    }
    if reasons.is_empty() {
        Status::success()
    } else {
        // Kubernetes v1.32 reports every shortage as Unschedulable: preemption may help.
        Status::with_reasons(Code::Unschedulable, reasons)
    }
}

impl PreScorePlugin for NodeResourcesFit {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[&NodeInfo],
        _snapshot: &Snapshot,
    ) -> Status {
        self.scorer.pre_score(state, PRE_SCORE_KEY, pod);
        Status::success()
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        self.scorer
            .score_from_state(state, PRE_SCORE_KEY, pod, node)
    }
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        scores: &mut [NodeScore],
    ) -> Result<(), Status> {
        self.scorer
            .score_nodes_from_state(state, PRE_SCORE_KEY, pod, nodes, scores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::node_resources::test_util::{node, node_info, pod, s, with_init};
    use crate::snapshot::testing;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    type Req = Vec<(&'static str, String)>;

    /// `newResourcePod` container requests: CPU in millicores, memory, extended resources.
    fn r(cpu: i64, mem: i64) -> Req {
        vec![("cpu", format!("{cpu}m")), ("memory", s(mem))]
    }

    fn rx(cpu: i64, mem: i64, scalar: &[(&'static str, i64)]) -> Req {
        let mut v = r(cpu, mem);
        v.extend(scalar.iter().map(|(n, q)| (*n, s(q))));
        v
    }

    fn pod_of(containers: &[Req]) -> Pod {
        let refs: Vec<&[(&str, String)]> = containers.iter().map(|c| c.as_slice()).collect();
        pod("p", &refs)
    }

    fn init_pod(containers: &[Req], init: &[Req]) -> Pod {
        let refs: Vec<&[(&str, String)]> = init.iter().map(|c| c.as_slice()).collect();
        with_init(pod_of(containers), &refs, false)
    }

    fn overhead_pod(containers: &[Req], overhead: &[(&str, &str)]) -> Pod {
        let mut p = pod_of(containers);
        if let Some(spec) = p.spec.as_mut() {
            spec.overhead = Some(testing::quantities(overhead));
        }
        p
    }

    const EXT_A: &str = "example.com/aaa";
    const EXT_B: &str = "example.com/bbb";
    const KUBERNETES_IO_B: &str = "subdomain.kubernetes.io/something";
    const HUGE_PAGES: &str = "hugepages-2Mi";

    /// `makeAllocatableResources(milliCPU, memory, pods, extendedA, storage, hugePageA)`.
    fn allocatable(cpu: i64, mem: i64, pods: i64, ext_a: i64, storage: i64, huge: i64) -> Node {
        node(
            "node",
            &[
                ("cpu", format!("{cpu}m")),
                ("memory", s(mem)),
                ("pods", s(pods)),
                (EXT_A, s(ext_a)),
                ("ephemeral-storage", s(storage)),
                (HUGE_PAGES, s(huge)),
            ],
        )
    }

    fn run_filter(args: Value, pod: Pod, node: NodeInfo) -> Status {
        let plugin = new(&args).unwrap();
        let pod = PodInfo::new(pod);
        let mut state = CycleState::new();
        let (_, st) =
            plugin
                .as_pre_filter()
                .unwrap()
                .pre_filter(&mut state, &pod, &Snapshot::new());
        assert!(st.is_success(), "{st:?}");
        plugin.as_filter().unwrap().filter(&state, &pod, &node)
    }

    fn unschedulable(reasons: &[&str]) -> Status {
        Status::with_reasons(
            Code::Unschedulable,
            reasons.iter().map(|r| Cow::Owned(r.to_string())).collect(),
        )
    }

    #[test]
    fn filter_reports_every_insufficient_resource() {
        let ext = |q| rx(1, 1, &[(EXT_A, q)]);
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&str, Value, Pod, Req, Option<Vec<String>>)> = vec![
            ("no resources requested always fits", Value::Null, pod_of(&[]), r(10, 20), None),
            (
                "too many resources fails",
                Value::Null,
                pod_of(&[r(1, 1)]),
                r(10, 20),
                Some(vec!["Insufficient cpu".into(), "Insufficient memory".into()]),
            ),
            (
                "too many resources fails due to init container cpu",
                Value::Null,
                init_pod(&[r(1, 1)], &[r(3, 1)]),
                r(8, 19),
                Some(vec!["Insufficient cpu".into()]),
            ),
            (
                "too many resources fails due to highest init container cpu",
                Value::Null,
                init_pod(&[r(1, 1)], &[r(3, 1), r(2, 1)]),
                r(8, 19),
                Some(vec!["Insufficient cpu".into()]),
            ),
            (
                "too many resources fails due to init container memory",
                Value::Null,
                init_pod(&[r(1, 1)], &[r(1, 3)]),
                r(9, 19),
                Some(vec!["Insufficient memory".into()]),
            ),
            (
                "too many resources fails due to highest init container memory",
                Value::Null,
                init_pod(&[r(1, 1)], &[r(1, 3), r(1, 2)]),
                r(9, 19),
                Some(vec!["Insufficient memory".into()]),
            ),
            (
                "init container fits because it's the max, not sum, of containers and init containers",
                Value::Null,
                init_pod(&[r(1, 1)], &[r(1, 1)]),
                r(9, 19),
                None,
            ),
            (
                "multiple init containers fit because it's the max, not sum, of containers and init containers",
                Value::Null,
                init_pod(&[r(1, 1)], &[r(1, 1), r(1, 1)]),
                r(9, 19),
                None,
            ),
            ("both resources fit", Value::Null, pod_of(&[r(1, 1)]), r(5, 5), None),
            (
                "one resource memory fits",
                Value::Null,
                pod_of(&[r(2, 1)]),
                r(9, 5),
                Some(vec!["Insufficient cpu".into()]),
            ),
            (
                "one resource cpu fits",
                Value::Null,
                pod_of(&[r(1, 2)]),
                r(5, 19),
                Some(vec!["Insufficient memory".into()]),
            ),
            ("equal edge case", Value::Null, pod_of(&[r(5, 1)]), r(5, 19), None),
            (
                "equal edge case for init container",
                Value::Null,
                init_pod(&[r(4, 1)], &[r(5, 1)]),
                r(5, 19),
                None,
            ),
            ("extended resource fits", Value::Null, pod_of(&[rx(0, 0, &[(EXT_A, 1)])]), r(0, 0), None),
            (
                "extended resource fits for init container",
                Value::Null,
                init_pod(&[r(0, 0)], &[rx(0, 0, &[(EXT_A, 1)])]),
                r(0, 0),
                None,
            ),
            (
                "extended resource capacity enforced",
                Value::Null,
                pod_of(&[ext(10)]),
                rx(0, 0, &[(EXT_A, 0)]),
                Some(vec![format!("Insufficient {EXT_A}")]),
            ),
            (
                "extended resource capacity enforced for init container",
                Value::Null,
                init_pod(&[r(0, 0)], &[ext(10)]),
                rx(0, 0, &[(EXT_A, 0)]),
                Some(vec![format!("Insufficient {EXT_A}")]),
            ),
            (
                "extended resource allocatable enforced",
                Value::Null,
                pod_of(&[ext(1)]),
                rx(0, 0, &[(EXT_A, 5)]),
                Some(vec![format!("Insufficient {EXT_A}")]),
            ),
            (
                "extended resource allocatable enforced for init container",
                Value::Null,
                init_pod(&[r(0, 0)], &[ext(1)]),
                rx(0, 0, &[(EXT_A, 5)]),
                Some(vec![format!("Insufficient {EXT_A}")]),
            ),
            (
                "extended resource allocatable enforced for multiple containers",
                Value::Null,
                pod_of(&[ext(3), ext(3)]),
                rx(0, 0, &[(EXT_A, 2)]),
                Some(vec![format!("Insufficient {EXT_A}")]),
            ),
            (
                "extended resource allocatable admits multiple init containers",
                Value::Null,
                init_pod(&[r(0, 0)], &[ext(3), ext(3)]),
                rx(0, 0, &[(EXT_A, 2)]),
                None,
            ),
            (
                "extended resource allocatable enforced for multiple init containers",
                Value::Null,
                init_pod(&[r(0, 0)], &[ext(6), ext(3)]),
                rx(0, 0, &[(EXT_A, 2)]),
                Some(vec![format!("Insufficient {EXT_A}")]),
            ),
            (
                "extended resource allocatable enforced for unknown resource",
                Value::Null,
                pod_of(&[rx(1, 1, &[(EXT_B, 1)])]),
                r(0, 0),
                Some(vec![format!("Insufficient {EXT_B}")]),
            ),
            (
                "extended resource allocatable enforced for unknown resource for init container",
                Value::Null,
                init_pod(&[r(0, 0)], &[rx(1, 1, &[(EXT_B, 1)])]),
                r(0, 0),
                Some(vec![format!("Insufficient {EXT_B}")]),
            ),
            (
                "kubernetes.io resource capacity enforced for init container",
                Value::Null,
                init_pod(&[r(0, 0)], &[rx(1, 1, &[(KUBERNETES_IO_B, 10)])]),
                r(0, 0),
                Some(vec![format!("Insufficient {KUBERNETES_IO_B}")]),
            ),
            (
                "hugepages resource capacity enforced",
                Value::Null,
                pod_of(&[rx(1, 1, &[(HUGE_PAGES, 10)])]),
                rx(0, 0, &[(HUGE_PAGES, 0)]),
                Some(vec![format!("Insufficient {HUGE_PAGES}")]),
            ),
            (
                "hugepages resource capacity enforced for init container",
                Value::Null,
                init_pod(&[r(0, 0)], &[rx(1, 1, &[(HUGE_PAGES, 10)])]),
                rx(0, 0, &[(HUGE_PAGES, 0)]),
                Some(vec![format!("Insufficient {HUGE_PAGES}")]),
            ),
            (
                "hugepages resource allocatable enforced for multiple containers",
                Value::Null,
                pod_of(&[rx(1, 1, &[(HUGE_PAGES, 3)]), rx(1, 1, &[(HUGE_PAGES, 3)])]),
                rx(0, 0, &[(HUGE_PAGES, 2)]),
                Some(vec![format!("Insufficient {HUGE_PAGES}")]),
            ),
            (
                "skip checking ignored extended resource",
                json!({"ignoredResources": [EXT_B]}),
                pod_of(&[rx(1, 1, &[(EXT_B, 1)])]),
                r(0, 0),
                None,
            ),
            (
                "resources + pod overhead fits",
                Value::Null,
                overhead_pod(&[r(1, 1)], &[("cpu", "3m"), ("memory", "13")]),
                r(5, 5),
                None,
            ),
            (
                "requests + overhead does not fit for memory",
                Value::Null,
                overhead_pod(&[r(1, 1)], &[("cpu", "1m"), ("memory", "15")]),
                r(5, 5),
                Some(vec!["Insufficient memory".into()]),
            ),
            (
                // Only extended resources are ignored by group; a kubernetes.io resource is not.
                "skip checking ignored extended resource via resource groups",
                json!({"ignoredResourceGroups": ["example.com", "subdomain.kubernetes.io"]}),
                pod_of(&[rx(1, 1, &[(EXT_B, 1), (KUBERNETES_IO_B, 1)])]),
                r(0, 0),
                Some(vec![format!("Insufficient {KUBERNETES_IO_B}")]),
            ),
            (
                "skip checking extended resource request with quantity zero via resource groups",
                Value::Null,
                pod_of(&[rx(1, 1, &[(EXT_A, 0)])]),
                rx(0, 0, &[(EXT_A, 6)]),
                None,
            ),
            (
                "skip checking resource request with quantity zero",
                Value::Null,
                pod_of(&[rx(0, 0, &[(EXT_A, 1)])]),
                rx(20, 30, &[(EXT_A, 1)]),
                None,
            ),
        ];
        for (name, args, p, existing, want) in cases {
            let info = node_info(allocatable(10, 20, 32, 5, 20, 5), vec![pod_of(&[existing])]);
            let got = run_filter(args, p, info);
            let want = match want {
                None => Status::success(),
                Some(reasons) => {
                    unschedulable(&reasons.iter().map(String::as_str).collect::<Vec<_>>())
                }
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn filter_rejects_a_node_without_room_for_another_pod() {
        let cases = [
            (
                "even without specified resources, predicate fails when there's no space for additional pod",
                pod_of(&[]),
                r(10, 20),
            ),
            (
                "even if both resources fit, predicate fails when there's no space for additional pod",
                pod_of(&[r(1, 1)]),
                r(5, 5),
            ),
            (
                "even for equal edge case, predicate fails when there's no space for additional pod",
                pod_of(&[r(5, 1)]),
                r(5, 19),
            ),
            (
                "even for equal edge case, predicate fails when there's no space for additional pod due to init container",
                init_pod(&[r(5, 1)], &[r(5, 1)]),
                r(5, 19),
            ),
        ];
        for (name, p, existing) in cases {
            let info = node_info(allocatable(10, 20, 1, 0, 0, 0), vec![pod_of(&[existing])]);
            assert_eq!(
                run_filter(Value::Null, p, info),
                unschedulable(&["Too many pods"]),
                "{name}"
            );
        }
    }

    #[test]
    fn filter_checks_ephemeral_storage() {
        let eph = |q: i64| vec![("ephemeral-storage", s(q))];
        let cases = [
            (
                "empty storage requested, and pod fits",
                pod_of(&[r(1, 1)]),
                r(2, 10),
                true,
            ),
            (
                "storage ephemeral local storage request exceeds allocatable",
                pod_of(&[eph(25)]),
                r(2, 2),
                false,
            ),
            (
                "ephemeral local storage is sufficient",
                pod_of(&[eph(5)]),
                {
                    let mut e = r(2, 2);
                    e.extend(eph(10));
                    e
                },
                true,
            ),
            ("pod fits", pod_of(&[eph(10)]), r(2, 2), true),
        ];
        for (name, p, existing, fits) in cases {
            let info = node_info(allocatable(10, 20, 32, 5, 20, 5), vec![pod_of(&[existing])]);
            let want = if fits {
                Status::success()
            } else {
                unschedulable(&["Insufficient ephemeral-storage"])
            };
            assert_eq!(run_filter(Value::Null, p, info), want, "{name}");
        }
    }

    #[test]
    fn filter_counts_restartable_init_containers_next_to_regular_ones() {
        let sidecar_pod = |main: Req, sidecar: Req| with_init(pod_of(&[main]), &[&sidecar], true);
        let cpu = |m: i64| vec![("cpu", format!("{m}m"))];
        let cases = [
            ("allow pod without restartable init containers", pod_of(&[vec![]]), true),
            ("allow pod with restartable init containers", sidecar_pod(vec![], vec![]), true),
            (
                "allow pod if the total requested resources do not exceed the node's allocatable resources",
                sidecar_pod(cpu(1), cpu(1)),
                true,
            ),
            (
                "not allow pod if the total requested resources do exceed the node's allocatable resources",
                sidecar_pod(cpu(1), cpu(2)),
                false,
            ),
        ];
        for (name, p, fits) in cases {
            let info = node_info(allocatable(2, 0, 1, 0, 0, 0), vec![]);
            let want = if fits {
                Status::success()
            } else {
                unschedulable(&["Insufficient cpu"])
            };
            assert_eq!(run_filter(Value::Null, p, info), want, "{name}");
        }
    }

    #[test]
    fn filter_without_pre_filter_is_an_error() {
        let plugin = new(&Value::Null).unwrap();
        let info = node_info(node("n", &[]), vec![]);
        let got = plugin.as_filter().unwrap().filter(
            &CycleState::new(),
            &PodInfo::new(pod_of(&[])),
            &info,
        );
        assert_eq!(
            got,
            Status::error("error reading \"PreFilterNodeResourcesFit\" from cycleState: not found")
        );
    }

    fn least(resources: Value) -> Value {
        json!({"scoringStrategy": {"type": "LeastAllocated", "resources": resources}})
    }

    fn most(resources: Value) -> Value {
        json!({"scoringStrategy": {"type": "MostAllocated", "resources": resources}})
    }

    fn ratio(resources: Value, shape: Value) -> Value {
        json!({"scoringStrategy": {
            "type": "RequestedToCapacityRatio",
            "resources": resources,
            "requestedToCapacityRatio": {"shape": shape},
        }})
    }

    fn default_resources() -> Value {
        json!([{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}])
    }

    const EXTENDED: &str = "abc.com/xyz";

    fn extended_resources() -> Value {
        json!([
            {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": EXTENDED, "weight": 1}
        ])
    }

    /// `st.MakeNode().Capacity(...)`.
    fn cap(name: &str, list: &[(&'static str, &str)]) -> Node {
        let owned: Vec<(&str, String)> = list.iter().map(|(k, v)| (*k, s(v))).collect();
        node(name, &owned)
    }

    /// `st.MakePod().Req(...)...`: one container per list.
    fn req_pod(name: &str, containers: &[&[(&'static str, &str)]]) -> Pod {
        let owned: Vec<Req> = containers
            .iter()
            .map(|c| c.iter().map(|(k, v)| (*k, s(v))).collect())
            .collect();
        let mut p = pod_of(&owned);
        p.metadata.name = Some(name.into());
        p
    }

    fn scores(args: Value, pod: Pod, nodes: Vec<(Node, Vec<Pod>)>, pre_score: bool) -> Vec<i64> {
        let plugin = new(&args).unwrap();
        let snapshot = testing::snapshot(nodes);
        let pod = PodInfo::new(pod);
        let mut state = CycleState::new();
        let infos: Vec<&NodeInfo> = snapshot.nodes().iter().collect();
        if pre_score {
            let st = plugin
                .as_pre_score()
                .unwrap()
                .pre_score(&mut state, &pod, &infos, &snapshot);
            assert!(st.is_success(), "{st:?}");
        }
        infos
            .iter()
            .map(|n| plugin.as_score().unwrap().score(&state, &pod, n).unwrap())
            .collect()
    }

    type ScoreCase = (&'static str, Value, Pod, Vec<(Node, Vec<Pod>)>, Vec<i64>);

    fn check(cases: Vec<ScoreCase>) {
        for (name, args, p, nodes, want) in cases {
            assert_eq!(scores(args, p, nodes, true), want, "{name}");
        }
    }

    fn cpu_mem(cpu: &'static str, mem: &'static str) -> [(&'static str, &'static str); 2] {
        [("cpu", cpu), ("memory", mem)]
    }

    #[test]
    fn least_allocated_favours_free_nodes() {
        let two = || req_pod("p", &[&cpu_mem("1000", "2000"), &cpu_mem("2000", "3000")]);
        let empty = |n: &str| testing::pod(n, &[]);
        check(vec![
            (
                "nothing scheduled, nothing requested",
                least(default_resources()),
                empty("p"),
                vec![
                    (cap("node1", &cpu_mem("4000", "10000")), vec![]),
                    (cap("node2", &cpu_mem("4000", "10000")), vec![]),
                ],
                vec![100, 100],
            ),
            (
                // node1: cpu (4000-3000)/4000 = 25, memory 50: 37.
                "nothing scheduled, resources requested, differently sized nodes",
                least(default_resources()),
                two(),
                vec![
                    (cap("node1", &cpu_mem("4000", "10000")), vec![]),
                    (cap("node2", &cpu_mem("6000", "10000")), vec![]),
                ],
                vec![37, 50],
            ),
            (
                "no resources requested, pods scheduled",
                least(default_resources()),
                empty("p"),
                vec![
                    (cap("node1", &cpu_mem("4000", "10000")), vec![empty("a"), empty("b")]),
                    (cap("node2", &cpu_mem("4000", "10000")), vec![empty("c"), empty("d")]),
                ],
                vec![100, 100],
            ),
            (
                "no resources requested, pods scheduled with resources",
                least(default_resources()),
                empty("p"),
                vec![
                    (
                        cap("node1", &cpu_mem("10000", "20000")),
                        vec![req_pod("a", &[&cpu_mem("3000", "0")]), req_pod("b", &[&cpu_mem("3000", "0")])],
                    ),
                    (
                        cap("node2", &cpu_mem("10000", "20000")),
                        vec![req_pod("c", &[&cpu_mem("3000", "0")]), req_pod("d", &[&cpu_mem("3000", "5000")])],
                    ),
                ],
                vec![70, 57],
            ),
            (
                "resources requested, pods scheduled with resources",
                least(default_resources()),
                two(),
                vec![
                    (cap("node1", &cpu_mem("10000", "20000")), vec![req_pod("a", &[&cpu_mem("3000", "0")])]),
                    (cap("node2", &cpu_mem("10000", "20000")), vec![req_pod("b", &[&cpu_mem("3000", "5000")])]),
                ],
                vec![57, 45],
            ),
            (
                "resources requested, pods scheduled with resources, differently sized nodes",
                least(default_resources()),
                two(),
                vec![
                    (cap("node1", &cpu_mem("10000", "20000")), vec![req_pod("a", &[&cpu_mem("3000", "0")])]),
                    (cap("node2", &cpu_mem("10000", "50000")), vec![req_pod("b", &[&cpu_mem("3000", "5000")])]),
                ],
                vec![57, 60],
            ),
            (
                "requested resources exceed node capacity",
                least(default_resources()),
                req_pod("p", &[&cpu_mem("3000", "0")]),
                vec![
                    (cap("node1", &cpu_mem("4000", "10000")), vec![req_pod("a", &[&cpu_mem("3000", "0")])]),
                    (cap("node2", &cpu_mem("4000", "10000")), vec![req_pod("b", &[&cpu_mem("3000", "5000")])]),
                ],
                vec![50, 25],
            ),
            (
                "zero node resources, pods scheduled with resources",
                least(default_resources()),
                empty("p"),
                vec![
                    (cap("node1", &[]), vec![req_pod("a", &[&cpu_mem("3000", "0")])]),
                    (cap("node2", &[]), vec![req_pod("b", &[&cpu_mem("3000", "5000")])]),
                ],
                vec![0, 0],
            ),
            (
                // node1: (25·1 + 50·2)/3 = 41.
                "nothing scheduled, resources requested with different weight on CPU and memory, differently sized nodes",
                least(json!([{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}])),
                two(),
                vec![
                    (cap("node1", &cpu_mem("4000", "10000")), vec![]),
                    (cap("node2", &cpu_mem("6000", "10000")), vec![]),
                ],
                vec![41, 50],
            ),
            (
                "bypass extended resource if the pod does not request",
                least(extended_resources()),
                two(),
                vec![
                    (cap("node1", &cpu_mem("6000", "10000")), vec![]),
                    (cap("node2", &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "4")]), vec![]),
                ],
                vec![50, 50],
            ),
            (
                // Extended resource: node1 (4-2)/4 = 50, node2 (10-2)/10 = 80.
                "honor extended resource if the pod requests",
                least(extended_resources()),
                req_pod("p", &[&[("cpu", "3000"), ("memory", "5000"), (EXTENDED, "2")]]),
                vec![
                    (cap("node1", &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "4")]), vec![]),
                    (cap("node2", &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "10")]), vec![]),
                ],
                vec![50, 60],
            ),
            (
                "if the node doesn't have a resource",
                least(json!([
                    {"name": EXTENDED, "weight": 2}, {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}
                ])),
                req_pod("p", &[&cpu_mem("3000", "4000")]),
                vec![
                    (cap("node1", &cpu_mem("6000", "10000")), vec![]),
                    (cap("node2", &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "4")]), vec![]),
                ],
                vec![55, 55],
            ),
        ]);
    }

    #[test]
    fn most_allocated_favours_busy_nodes() {
        let two = || req_pod("p", &[&cpu_mem("1000", "2000"), &cpu_mem("2000", "3000")]);
        let empty = |n: &str| testing::pod(n, &[]);
        check(vec![
            (
                "nothing scheduled, nothing requested",
                most(default_resources()),
                empty("p"),
                vec![
                    (cap("node1", &cpu_mem("4000", "10000")), vec![]),
                    (cap("node2", &cpu_mem("4000", "10000")), vec![]),
                ],
                vec![0, 0],
            ),
            (
                "nothing scheduled, resources requested, differently sized nodes",
                most(default_resources()),
                two(),
                vec![
                    (cap("node1", &cpu_mem("4000", "10000")), vec![]),
                    (cap("node2", &cpu_mem("6000", "10000")), vec![]),
                ],
                vec![62, 50],
            ),
            (
                "no resources requested, pods scheduled with resources",
                most(default_resources()),
                empty("p"),
                vec![
                    (
                        cap("node1", &cpu_mem("10000", "20000")),
                        vec![
                            req_pod("a", &[&cpu_mem("3000", "0")]),
                            req_pod("b", &[&cpu_mem("3000", "0")]),
                        ],
                    ),
                    (
                        cap("node2", &cpu_mem("10000", "20000")),
                        vec![
                            req_pod("c", &[&cpu_mem("3000", "0")]),
                            req_pod("d", &[&cpu_mem("3000", "5000")]),
                        ],
                    ),
                ],
                vec![30, 42],
            ),
            (
                "resources requested, pods scheduled with resources",
                most(default_resources()),
                two(),
                vec![
                    (
                        cap("node1", &cpu_mem("10000", "20000")),
                        vec![req_pod("a", &[&cpu_mem("3000", "0")])],
                    ),
                    (
                        cap("node2", &cpu_mem("10000", "20000")),
                        vec![req_pod("b", &[&cpu_mem("3000", "5000")])],
                    ),
                ],
                vec![42, 55],
            ),
            (
                "resources requested equal node capacity",
                most(default_resources()),
                req_pod("p", &[&cpu_mem("2000", "4000"), &cpu_mem("3000", "5000")]),
                vec![
                    (cap("node1", &cpu_mem("5000", "10000")), vec![]),
                    (cap("node2", &cpu_mem("10000", "9000")), vec![]),
                ],
                vec![95, 75],
            ),
            (
                // node1: (75·1 + 50·2)/3 = 58.
                "nothing scheduled, resources requested with different weight on CPU and memory",
                most(json!([{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}])),
                two(),
                vec![
                    (cap("node1", &cpu_mem("4000", "10000")), vec![]),
                    (cap("node2", &cpu_mem("6000", "10000")), vec![]),
                ],
                vec![58, 50],
            ),
            (
                // Containers without requests count 100m CPU and 200Mi memory: node1 is full on
                // CPU (300m of 250m) and 60% on memory.
                "no resources requested, pods scheduled, nonzero request for resource",
                most(default_resources()),
                testing::pod("p", &[&[]]),
                vec![
                    (
                        cap("node1", &cpu_mem("250m", "1000Mi")),
                        vec![testing::pod("a", &[&[]]), testing::pod("b", &[&[]])],
                    ),
                    (cap("node2", &cpu_mem("250m", "1000Mi")), vec![]),
                ],
                vec![80, 30],
            ),
            (
                "bypass extended resource if the pod does not request",
                most(extended_resources()),
                two(),
                vec![
                    (cap("node1", &cpu_mem("6000", "10000")), vec![]),
                    (
                        cap(
                            "node2",
                            &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "4")],
                        ),
                        vec![],
                    ),
                ],
                vec![50, 50],
            ),
            (
                "honor extended resource if the pod request",
                most(extended_resources()),
                req_pod(
                    "p",
                    &[&[("cpu", "3000"), ("memory", "5000"), (EXTENDED, "2")]],
                ),
                vec![
                    (
                        cap(
                            "node1",
                            &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "4")],
                        ),
                        vec![],
                    ),
                    (
                        cap(
                            "node2",
                            &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "10")],
                        ),
                        vec![],
                    ),
                ],
                vec![50, 40],
            ),
            (
                "if the node doesn't have a resource",
                most(json!([
                    {"name": EXTENDED, "weight": 2}, {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}
                ])),
                req_pod("p", &[&cpu_mem("3000", "4000")]),
                vec![
                    (cap("node1", &cpu_mem("6000", "10000")), vec![]),
                    (
                        cap(
                            "node2",
                            &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "4")],
                        ),
                        vec![],
                    ),
                ],
                vec![45, 45],
            ),
        ]);
    }

    #[test]
    fn requested_to_capacity_ratio_follows_the_shape() {
        let shape = json!([{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]);
        let empty = |n: &str| testing::pod(n, &[]);
        check(vec![
            (
                "nothing scheduled, nothing requested (default - least requested nodes have priority)",
                ratio(default_resources(), shape.clone()),
                empty("p"),
                vec![
                    (cap("node1", &cpu_mem("4000", "10000")), vec![empty("a"), empty("b")]),
                    (cap("node2", &cpu_mem("4000", "10000")), vec![]),
                ],
                vec![100, 100],
            ),
            (
                "nothing scheduled, resources requested, differently sized nodes (default - least requested nodes have priority)",
                ratio(default_resources(), shape.clone()),
                req_pod("p", &[&cpu_mem("1000", "2000"), &cpu_mem("2000", "3000")]),
                vec![
                    (cap("node1", &cpu_mem("4000", "10000")), vec![empty("a"), empty("b")]),
                    (cap("node2", &cpu_mem("6000", "10000")), vec![]),
                ],
                vec![38, 50],
            ),
            (
                "no resources requested, pods scheduled with resources (default - least requested nodes have priority)",
                ratio(default_resources(), shape.clone()),
                empty("p"),
                vec![
                    (cap("node1", &cpu_mem("4000", "10000")), vec![req_pod("a", &[&cpu_mem("3000", "5000")])]),
                    (cap("node2", &cpu_mem("6000", "10000")), vec![req_pod("b", &[&cpu_mem("3000", "5000")])]),
                ],
                vec![38, 50],
            ),
        ]);
    }

    fn bin_node(name: &str, scalar: &[(&'static str, i64)]) -> Node {
        let mut list = vec![("cpu", s("4000m")), ("memory", s(10000i64 * 1024 * 1024))];
        list.extend(scalar.iter().map(|(n, q)| (*n, s(q))));
        node(name, &list)
    }

    #[test]
    fn requested_to_capacity_ratio_bin_packs_one_extended_resource() {
        let args = ratio(
            json!([{"name": "intel.com/foo", "weight": 1}]),
            json!([{"utilization": 0, "score": 0}, {"utilization": 100, "score": 1}]),
        );
        let foo = |q: &'static str| req_pod("p", &[&[("intel.com/foo", q)]]);
        let empty = |n: &str| testing::pod(n, &[]);
        let nodes = |node2_pods: Vec<Pod>| {
            vec![
                (bin_node("node1", &[("intel.com/foo", 8)]), vec![]),
                (bin_node("node2", &[("intel.com/foo", 4)]), node2_pods),
            ]
        };
        check(vec![
            ("nothing scheduled, nothing requested", args.clone(), empty("p"), nodes(vec![]), vec![0, 0]),
            (
                // node1: 2/8 → 2.5 rounded down by the shape to 2; node2: 2/4 → 5.
                "resources requested, pods scheduled with less resources",
                args.clone(),
                foo("2"),
                nodes(vec![empty("a")]),
                vec![2, 5],
            ),
            (
                "resources requested, pods scheduled with resources, on node with existing pod running",
                args.clone(),
                foo("2"),
                nodes(vec![req_pod("a", &[&[("intel.com/foo", "2")]])]),
                vec![2, 10],
            ),
            (
                "resources requested, pods scheduled with more resources",
                args.clone(),
                foo("4"),
                nodes(vec![empty("a")]),
                vec![5, 10],
            ),
        ]);
    }

    #[test]
    fn requested_to_capacity_ratio_bin_packs_weighted_extended_resources() {
        let args = ratio(
            json!([{"name": "intel.com/foo", "weight": 3}, {"name": "intel.com/bar", "weight": 5}]),
            json!([{"utilization": 0, "score": 0}, {"utilization": 100, "score": 1}]),
        );
        let nodes = |node2_pods: Vec<Pod>| {
            vec![
                (
                    bin_node("node1", &[("intel.com/foo", 8), ("intel.com/bar", 4)]),
                    vec![],
                ),
                (
                    bin_node("node2", &[("intel.com/foo", 4), ("intel.com/bar", 8)]),
                    node2_pods,
                ),
            ]
        };
        let pod1 = || req_pod("p", &[&[("intel.com/foo", "2"), ("intel.com/bar", "2")]]);
        let pod2 = || req_pod("q", &[&[("intel.com/foo", "4"), ("intel.com/bar", "2")]]);
        check(vec![
            ("nothing scheduled, nothing requested", args.clone(), testing::pod("p", &[]), nodes(vec![]), vec![0, 0]),
            (
                // node1: (2·3 + 5·5)/8 = 3.875 → 4; node2: (5·3 + 2·5)/8 = 3.125 → 3.
                "resources requested, pods scheduled with less resources",
                args.clone(),
                pod1(),
                nodes(vec![]),
                vec![4, 3],
            ),
            (
                // node2: foo over capacity → 10, bar 4/8 → 5: (10·3 + 5·5)/8 = 6.875 → 7.
                "resources requested, pods scheduled with resources, on node with existing pod running",
                args.clone(),
                pod1(),
                nodes(vec![pod2()]),
                vec![4, 7],
            ),
            (
                "resources requested, pods scheduled with more resources",
                args.clone(),
                pod2(),
                nodes(vec![]),
                vec![5, 5],
            ),
        ]);
    }

    #[test]
    fn cpu_then_memory_scores_as_the_general_resource_list_does() {
        // `[cpu, memory]` takes the scorer's fast path; `[memory, cpu]` the general one.
        let nodes = || {
            vec![
                (
                    cap("node1", &cpu_mem("4000", "10000")),
                    vec![req_pod("a", &[&cpu_mem("2000", "4000")])],
                ),
                (
                    cap("node2", &cpu_mem("6000", "10000")),
                    vec![req_pod("b", &[&cpu_mem("1000", "7000")])],
                ),
                (cap("node3", &cpu_mem("0", "10000")), vec![]),
                (
                    cap("node4", &cpu_mem("1000", "3000")),
                    vec![req_pod("c", &[&cpu_mem("900", "2500")])],
                ),
            ]
        };
        let pod = || req_pod("p", &[&cpu_mem("500", "1000")]);
        let shape = json!([{"utilization": 0, "score": 2}, {"utilization": 60, "score": 9}]);
        let ordered = json!([{"name": "cpu", "weight": 3}, {"name": "memory", "weight": 2}]);
        let reversed = json!([{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 3}]);
        let cases = [
            (least(ordered.clone()), least(reversed.clone())),
            (most(ordered.clone()), most(reversed.clone())),
            (ratio(ordered, shape.clone()), ratio(reversed, shape)),
        ];
        for (a, b) in cases {
            let want = scores(b, pod(), nodes(), true);
            assert_eq!(scores(a, pod(), nodes(), true), want);
            assert!(want.iter().any(|s| *s != want[0]), "{want:?}");
        }
    }

    #[test]
    fn scores_are_the_same_with_or_without_pre_score() {
        let nodes = || {
            vec![
                (
                    cap("node1", &cpu_mem("4000", "10000")),
                    vec![req_pod("a", &[&cpu_mem("2000", "4000")])],
                ),
                (
                    cap("node2", &cpu_mem("6000", "10000")),
                    vec![req_pod("b", &[&cpu_mem("1000", "2000")])],
                ),
            ]
        };
        let big = || req_pod("p", &[&cpu_mem("3000", "5000")]);
        let small = || req_pod("p", &[&cpu_mem("1000", "2000")]);
        let case1 = ratio(
            default_resources(),
            json!([{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]),
        );
        let case2 = ratio(
            default_resources(),
            json!([{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]),
        );
        for pre_score in [true, false] {
            assert_eq!(scores(case1.clone(), big(), nodes(), pre_score), [10, 32]);
            assert_eq!(scores(case2.clone(), big(), nodes(), pre_score), [95, 68]);
            assert_eq!(
                scores(most(default_resources()), small(), nodes(), pre_score),
                [67, 36]
            );
            assert_eq!(
                scores(least(default_resources()), small(), nodes(), pre_score),
                [32, 63]
            );
        }
    }

    #[test]
    fn scores_count_sidecar_requests_of_placed_pods() {
        let with_sidecar = with_init(
            req_pod("a", &[&cpu_mem("1000", "2000")]),
            &[&[("cpu", s("1000")), ("memory", s("2000"))]],
            true,
        );
        let nodes = || {
            vec![
                (
                    cap("node1", &cpu_mem("4000", "10000")),
                    vec![with_sidecar.clone()],
                ),
                (
                    cap("node2", &cpu_mem("4000", "10000")),
                    vec![req_pod("b", &[&cpu_mem("1000", "2000")])],
                ),
            ]
        };
        let p = || req_pod("p", &[&cpu_mem("1000", "2000")]);
        assert_eq!(
            scores(most(default_resources()), p(), nodes(), true),
            [67, 45]
        );
        assert_eq!(
            scores(least(default_resources()), p(), nodes(), true),
            [32, 55]
        );
    }

    #[test]
    fn default_args_score_least_allocated_on_cpu_and_memory() {
        let nodes = vec![
            (cap("node1", &cpu_mem("4000", "10000")), vec![]),
            (cap("node2", &cpu_mem("6000", "10000")), vec![]),
        ];
        let p = req_pod("p", &[&cpu_mem("1000", "2000"), &cpu_mem("2000", "3000")]);
        assert_eq!(
            scores(Value::Null, p.clone(), nodes.clone(), true),
            [37, 50]
        );
        // A strategy without resources gets the defaults too.
        let args = json!({"scoringStrategy": {"type": "LeastAllocated"}});
        assert_eq!(scores(args, p, nodes, true), [37, 50]);
    }

    fn err(args: Value) -> String {
        match new(&args) {
            Ok(_) => "ok".into(),
            Err(e) => e,
        }
    }

    #[test]
    fn args_are_validated_as_kubernetes_does() {
        let strategy = |extra: Value| {
            let mut v = json!({"scoringStrategy": {"type": "LeastAllocated"}});
            if let (Some(m), Value::Object(e)) = (v["scoringStrategy"].as_object_mut(), extra) {
                m.extend(e);
            }
            v
        };
        let weights = |w: Value| strategy(json!({"resources": w}));
        let shape = |points: Value| {
            json!({"scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {"shape": points},
            }})
        };
        let cases: Vec<(&str, Value, &str)> = vec![
            ("default config", Value::Null, "ok"),
            (
                "IgnoredResources: too long value",
                json!({"ignoredResources": [format!("longvalue{}", "a".repeat(64))]}),
                "name part must be no more than 63 characters",
            ),
            (
                "IgnoredResources: name is empty",
                json!({"ignoredResources": ["example.com/"]}),
                "name part must be non-empty",
            ),
            (
                "IgnoredResources: name has too many slash",
                json!({"ignoredResources": ["example.com/aaa/bbb"]}),
                "a qualified name must consist of alphanumeric characters",
            ),
            ("IgnoredResources: valid args", json!({"ignoredResources": ["example.com"]}), "ok"),
            (
                "IgnoredResourceGroups: valid args",
                json!({"ignoredResourceGroups": ["example.com"]}),
                "ok",
            ),
            (
                "IgnoredResourceGroups: illegal args",
                json!({"ignoredResourceGroups": ["example.com/"]}),
                "name part must be non-empty",
            ),
            (
                "IgnoredResourceGroups: name is too long",
                json!({"ignoredResourceGroups": ["a".repeat(64)]}),
                "name part must be no more than 63 characters",
            ),
            (
                "IgnoredResourceGroups: name cannot be contain slash",
                json!({"ignoredResourceGroups": ["example.com/aa"]}),
                "ignoredResourceGroups[0]: Invalid value: \"example.com/aa\": resource group name can't contain '/'",
            ),
            (
                "ScoringStrategy: type is unsupported",
                json!({"scoringStrategy": {"type": "Invalid"}}),
                "scoringStrategy.type: Unsupported value: \"Invalid\": supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\"",
            ),
            (
                "ScoringStrategy: type is required",
                json!({"scoringStrategy": {}}),
                "scoringStrategy.type: Unsupported value: \"\"",
            ),
            (
                "multi valid resources",
                weights(json!([{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 10}])),
                "ok",
            ),
            (
                "zero weight defaults to 1",
                weights(json!([{"name": "cpu", "weight": 0}])),
                "ok",
            ),
            (
                "resource with negative weight",
                weights(json!([{"name": "memory", "weight": -1}, {"name": "cpu", "weight": 1}])),
                "scoringStrategy.resources[0].weight: Invalid value: -1: resource weight of memory not in valid range (0, 100]",
            ),
            (
                "multi invalid resources",
                weights(json!([{"name": "cpu", "weight": -1}, {"name": "memory", "weight": 101}])),
                "[scoringStrategy.resources[0].weight: Invalid value: -1: resource weight of cpu not in valid range (0, 100], scoringStrategy.resources[1].weight: Invalid value: 101: resource weight of memory not in valid range (0, 100]]",
            ),
            (
                "no shapes",
                shape(json!([])),
                "scoringStrategy.shape: Required value: at least one point must be specified",
            ),
            (
                "missing requestedToCapacityRatio",
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}),
                "scoringStrategy.shape: Required value: at least one point must be specified",
            ),
            ("valid shapes", shape(json!([{"utilization": 30, "score": 3}])), "ok"),
            (
                "utilization less than min",
                shape(json!([{"utilization": -1, "score": 3}])),
                "scoringStrategy.shape[0].utilization: Invalid value: -1: not in valid range [0, 100]",
            ),
            (
                "utilization greater than max",
                shape(json!([{"utilization": 101, "score": 3}])),
                "scoringStrategy.shape[0].utilization: Invalid value: 101: not in valid range [0, 100]",
            ),
            (
                "duplicated utilization values",
                shape(json!([{"utilization": 10, "score": 3}, {"utilization": 10, "score": 3}])),
                "scoringStrategy.shape[1].utilization: Invalid value: 10: values must be sorted in increasing order",
            ),
            (
                "increasing utilization values",
                shape(json!([
                    {"utilization": 10, "score": 3}, {"utilization": 20, "score": 3}, {"utilization": 30, "score": 3}
                ])),
                "ok",
            ),
            (
                "non-increasing utilization values",
                shape(json!([
                    {"utilization": 10, "score": 3}, {"utilization": 20, "score": 3}, {"utilization": 15, "score": 3}
                ])),
                "scoringStrategy.shape[2].utilization: Invalid value: 15: values must be sorted in increasing order",
            ),
            (
                "score less than min",
                shape(json!([{"utilization": 10, "score": -1}])),
                "scoringStrategy.shape[0].score: Invalid value: -1: not in valid range [0, 10]",
            ),
            (
                "score greater than max",
                shape(json!([{"utilization": 10, "score": 11}])),
                "scoringStrategy.shape[0].score: Invalid value: 11: not in valid range [0, 10]",
            ),
            ("unknown field", json!({"ignoredResource": []}), "unknown field"),
        ];
        for (name, args, want) in cases {
            let got = err(args);
            if want == "ok" {
                assert_eq!(got, "ok", "{name}");
            } else {
                assert!(got.contains(want), "{name}: {got}");
            }
        }
    }

    #[test]
    fn events_and_hints_follow_kubernetes() {
        let p = new(&Value::Null).unwrap();
        assert_eq!(
            p.events(),
            [
                ClusterEvent::PodDelete,
                ClusterEvent::NodeAdd,
                ClusterEvent::NodeUpdateAllocatable
            ]
        );
        let target = PodInfo::new(req_pod("pod1", &[&[("cpu", "1")]]));
        let mut placed = req_pod("pod2", &[&[("cpu", "1")]]);
        placed.spec.as_mut().unwrap().node_name = Some("fake".into());
        let placed = PodInfo::new(placed);
        let unscheduled = PodInfo::new(testing::pod("pod3", &[]));
        assert!(
            p.hint(&target, ClusterEvent::PodDelete, Some(&placed)),
            "queue-on-other-pod-deleted"
        );
        assert!(
            !p.hint(&target, ClusterEvent::PodDelete, Some(&unscheduled)),
            "skip-queue-on-unscheduled-pod-deleted"
        );
        assert!(p.hint(&target, ClusterEvent::NodeAdd, None));
    }
}
