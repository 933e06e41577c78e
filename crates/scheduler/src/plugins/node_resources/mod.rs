//! NodeResourcesFit and NodeResourcesBalancedAllocation, and what they share: the weighted
//! resource list of their args and the per-node allocation scorer (`resource_allocation.go`,
//! `least_allocated.go`, `most_allocated.go`, `requested_to_capacity_ratio.go`).
pub mod balanced_allocation;
pub mod fit;

use crate::framework::{CycleState, NodeScore, Status, MAX_NODE_SCORE};
use crate::types::{is_scalar_resource, NodeInfo, PodInfo};
use capstan_api::field::FieldError;
use serde::Deserialize;

/// The highest score a `requestedToCapacityRatio` shape point may give; shapes are scaled from
/// `[0, MAX_CUSTOM_PRIORITY_SCORE]` to `[0, MAX_NODE_SCORE]`.
pub const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;
/// Utilization is measured in percent.
const MAX_UTILIZATION: i64 = 100;

/// One resource of a scoring strategy and its weight (`config.ResourceSpec`), as written in the
/// args. A missing or zero weight defaults to 1.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSpec {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub weight: Option<i64>,
}

impl ResourceSpec {
    pub fn new(name: &str, weight: i64) -> ResourceSpec {
        ResourceSpec {
            name: name.to_string(),
            weight: Some(weight),
        }
    }
}

/// `cpu: 1, memory: 1`, the default resources of both plugins.
pub fn default_resources() -> Vec<ResourceSpec> {
    vec![ResourceSpec::new("cpu", 1), ResourceSpec::new("memory", 1)]
}

/// v1 defaulting of a resource list: empty means the defaults, a zero weight means 1.
fn default_resource_list(list: Option<Vec<ResourceSpec>>) -> Vec<ResourceSpec> {
    let mut list = list.unwrap_or_default();
    if list.is_empty() {
        return default_resources();
    }
    for r in &mut list {
        if r.weight.unwrap_or(0) == 0 {
            r.weight = Some(1);
        }
    }
    list
}

/// Join validation errors the way `utilerrors.NewAggregate(...).Error()` prints them.
fn aggregate(errs: Vec<FieldError>) -> Result<(), String> {
    let mut msgs: Vec<String> = Vec::with_capacity(errs.len());
    for e in errs {
        if !msgs.contains(&e.message) {
            msgs.push(e.message);
        }
    }
    match msgs.len() {
        0 => Ok(()),
        1 => Err(msgs.remove(0)),
        _ => Err(format!("[{}]", msgs.join(", "))),
    }
}

/// Which field of `NodeInfo`/`PodInfo` a resource name reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Cpu,
    Memory,
    EphemeralStorage,
    /// Extended resources, hugepages, attachable volumes.
    Scalar,
    /// Anything the scheduler does not account per node (`pods`, unknown names): never scored.
    Other,
}

#[derive(Debug, Clone)]
struct ScoredResource {
    name: String,
    kind: Kind,
    weight: i64,
}

impl ScoredResource {
    fn new(spec: &ResourceSpec) -> ScoredResource {
        let kind = match spec.name.as_str() {
            "cpu" => Kind::Cpu,
            "memory" => Kind::Memory,
            "ephemeral-storage" => Kind::EphemeralStorage,
            n if is_scalar_resource(n) => Kind::Scalar,
            _ => Kind::Other,
        };
        ScoredResource {
            name: spec.name.clone(),
            kind,
            weight: spec.weight.unwrap_or(1),
        }
    }

    /// The pod's request; CPU and memory with the non-zero defaults unless `use_requested`.
    fn pod_request(&self, pod: &PodInfo, use_requested: bool) -> i64 {
        match self.kind {
            Kind::Cpu if use_requested => pod.requests.milli_cpu,
            Kind::Cpu => pod.non_zero_cpu,
            Kind::Memory if use_requested => pod.requests.memory,
            Kind::Memory => pod.non_zero_memory,
            Kind::EphemeralStorage => pod.requests.ephemeral_storage,
            Kind::Scalar => pod.requests.get(&self.name),
            Kind::Other => 0,
        }
    }

    /// The node's allocatable amount and what it would have requested with the pod;
    /// `(0, 0)` for a resource that is not scored on this node.
    #[inline(always)]
    fn allocatable_requested(
        &self,
        node: &NodeInfo,
        pod_request: i64,
        use_requested: bool,
    ) -> (i64, i64) {
        match self.kind {
            Kind::Cpu => {
                let used = if use_requested {
                    node.requested.milli_cpu
                } else {
                    node.non_zero_cpu
                };
                (node.allocatable.milli_cpu, used.saturating_add(pod_request))
            }
            Kind::Memory => {
                let used = if use_requested {
                    node.requested.memory
                } else {
                    node.non_zero_memory
                };
                (node.allocatable.memory, used.saturating_add(pod_request))
            }
            Kind::EphemeralStorage => (
                node.allocatable.ephemeral_storage,
                node.requested.ephemeral_storage.saturating_add(pod_request),
            ),
            // An extended resource the pod does not request is left out of the score.
            Kind::Scalar if pod_request == 0 => (0, 0),
            Kind::Scalar => self.scalar_allocatable_requested(node, pod_request),
            Kind::Other => (0, 0),
        }
    }

    /// `allocatable_requested` of an extended resource (rare: kept out of the common path).
    #[cold]
    #[inline(never)]
    fn scalar_allocatable_requested(&self, node: &NodeInfo, pod_request: i64) -> (i64, i64) {
        match node
            .allocatable
            .scalar
            .iter()
            .find(|(n, _)| *n == self.name)
        {
            Some((_, alloc)) => (
                *alloc,
                node.requested.get(&self.name).saturating_add(pod_request),
            ),
            None => (0, 0),
        }
    }
}

/// How requested/allocatable pairs become a node score.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Strategy {
    LeastAllocated,
    MostAllocated,
    /// Shape points `(utilization, score)` with scores already scaled to `MAX_NODE_SCORE`.
    RequestedToCapacityRatio(Vec<(i64, i64)>),
    Balanced,
}

/// `resourceAllocationScorer`: scores a node from the requested and allocatable amounts of
/// the configured resources.
#[derive(Debug, Clone)]
struct AllocationScorer {
    resources: Vec<ScoredResource>,
    strategy: Strategy,
    /// Use plain requests for CPU and memory instead of the non-zero ones.
    use_requested: bool,
}

/// The pod's request of each scored resource, computed in PreScore (each plugin under its
/// own key).
#[derive(Debug, Clone)]
struct PodRequests(Vec<i64>);

impl AllocationScorer {
    fn new(specs: &[ResourceSpec], strategy: Strategy, use_requested: bool) -> AllocationScorer {
        AllocationScorer {
            resources: specs.iter().map(ScoredResource::new).collect(),
            strategy,
            use_requested,
        }
    }

    /// The pod's request of each resource, in the order of `resources`.
    fn pod_requests(&self, pod: &PodInfo) -> Vec<i64> {
        self.resources
            .iter()
            .map(|r| r.pod_request(pod, self.use_requested))
            .collect()
    }

    /// PreScore: the pod's requests, kept in `state` under `key` for Score.
    fn pre_score(&self, state: &mut CycleState, key: &'static str, pod: &PodInfo) {
        state.write(key, PodRequests(self.pod_requests(pod)));
    }

    /// Score `node` with the requests PreScore kept under `key` (computed anew without them).
    fn score_from_state(
        &self,
        state: &CycleState,
        key: &'static str,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Result<i64, Status> {
        match state.read::<PodRequests>(key) {
            Some(s) => self.score(node, &s.0),
            None => self.score(node, &self.pod_requests(pod)),
        }
    }

    /// [`AllocationScorer::score_from_state`] for many nodes at once.
    fn score_nodes_from_state(
        &self,
        state: &CycleState,
        key: &'static str,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        scores: &mut [NodeScore],
    ) -> Result<(), Status> {
        match state.read::<PodRequests>(key) {
            Some(s) => self.score_nodes(nodes, &s.0, scores),
            None => self.score_nodes(nodes, &self.pod_requests(pod), scores),
        }
    }

    /// `(allocatable, requested, weight)` of each resource on `node`, in order.
    #[inline(always)]
    fn triples<'a>(
        &'a self,
        node: &'a NodeInfo,
        pod_requests: &'a [i64],
    ) -> impl Iterator<Item = (i64, i64, i64)> + Clone + 'a {
        self.resources.iter().enumerate().map(move |(i, r)| {
            let req = pod_requests.get(i).copied().unwrap_or(0);
            let (alloc, requested) = r.allocatable_requested(node, req, self.use_requested);
            (alloc, requested, r.weight)
        })
    }

    fn score(&self, node: &NodeInfo, pod_requests: &[i64]) -> Result<i64, Status> {
        let mut score = [NodeScore { node: 0, score: 0 }];
        self.score_nodes(&[node], pod_requests, &mut score)?;
        Ok(score[0].score)
    }

    /// `score` of each of `nodes` into `scores` (same order). The strategy is chosen once, and
    /// the default resources (CPU, then memory) are read without going through the list.
    fn score_nodes(
        &self,
        nodes: &[&NodeInfo],
        pod_requests: &[i64],
        scores: &mut [NodeScore],
    ) -> Result<(), Status> {
        if self.resources.is_empty() {
            return Err(Status::error("resources not found"));
        }
        match self.resources.as_slice() {
            [ScoredResource {
                kind: Kind::Cpu,
                weight: cpu_weight,
                ..
            }, ScoredResource {
                kind: Kind::Memory,
                weight: memory_weight,
                ..
            }] => {
                let cpu = pod_requests.first().copied().unwrap_or(0);
                let memory = pod_requests.get(1).copied().unwrap_or(0);
                let use_requested = self.use_requested;
                self.score_with(nodes, scores, |n| {
                    let (cpu_used, memory_used) = if use_requested {
                        (n.requested.milli_cpu, n.requested.memory)
                    } else {
                        (n.non_zero_cpu, n.non_zero_memory)
                    };
                    [
                        (
                            n.allocatable.milli_cpu,
                            cpu_used.saturating_add(cpu),
                            *cpu_weight,
                        ),
                        (
                            n.allocatable.memory,
                            memory_used.saturating_add(memory),
                            *memory_weight,
                        ),
                    ]
                    .into_iter()
                })
            }
            _ => self.score_with(nodes, scores, |n| self.triples(n, pod_requests)),
        }
        Ok(())
    }

    /// Score each node by the strategy from its `(allocatable, requested, weight)` triples.
    #[inline(always)]
    fn score_with<'n, I>(
        &self,
        nodes: &[&'n NodeInfo],
        scores: &mut [NodeScore],
        triples: impl Fn(&'n NodeInfo) -> I,
    ) where
        I: Iterator<Item = (i64, i64, i64)> + Clone,
    {
        fn each<'n>(
            nodes: &[&'n NodeInfo],
            scores: &mut [NodeScore],
            f: impl Fn(&'n NodeInfo) -> i64,
        ) {
            for (s, n) in scores.iter_mut().zip(nodes) {
                s.score = f(n);
            }
        }
        match &self.strategy {
            Strategy::LeastAllocated => each(nodes, scores, |n| {
                weighted_average(triples(n), least_requested)
            }),
            Strategy::MostAllocated => each(nodes, scores, |n| {
                weighted_average(triples(n), most_requested)
            }),
            Strategy::RequestedToCapacityRatio(shape) => each(nodes, scores, |n| {
                requested_to_capacity_ratio(triples(n), shape)
            }),
            Strategy::Balanced => each(nodes, scores, |n| balanced(triples(n))),
        }
    }
}

/// Σ(score·weight)/Σweight over the resources the node has, rounded down.
#[inline(always)]
fn weighted_average(
    triples: impl Iterator<Item = (i64, i64, i64)>,
    f: impl Fn(i64, i64) -> i64,
) -> i64 {
    let (mut total, mut weights) = (0i64, 0i64);
    for (alloc, req, weight) in triples {
        if alloc == 0 {
            continue;
        }
        total = total.saturating_add(f(req, alloc).saturating_mul(weight));
        weights = weights.saturating_add(weight);
    }
    // Division by a constant is much cheaper; the default weights sum to 2.
    match weights {
        0 => 0,
        1 => total,
        2 => total / 2,
        w => total / w,
    }
}

fn requested_to_capacity_ratio(
    triples: impl Iterator<Item = (i64, i64, i64)>,
    shape: &[(i64, i64)],
) -> i64 {
    let (mut total, mut weights) = (0i64, 0i64);
    for (alloc, req, weight) in triples {
        if alloc == 0 {
            continue;
        }
        let utilization = if req > alloc {
            MAX_UTILIZATION
        } else {
            scale(req, MAX_UTILIZATION, alloc)
        };
        let s = broken_linear(shape, utilization);
        if s > 0 {
            total = total.saturating_add(s.saturating_mul(weight));
            weights = weights.saturating_add(weight);
        }
    }
    if weights == 0 {
        0
    } else {
        (total as f64 / weights as f64).round() as i64
    }
}

/// (1 − standard deviation of the requested fractions) · MAX_NODE_SCORE.
#[inline(always)]
fn balanced(triples: impl Iterator<Item = (i64, i64, i64)> + Clone) -> i64 {
    let fractions = triples
        .filter(|&(alloc, _, _)| alloc != 0)
        .map(|(alloc, req, _)| (req as f64 / alloc as f64).min(1.0));
    let (mut n, mut total) = (0usize, 0f64);
    let (mut first, mut second) = (0f64, 0f64);
    for f in fractions.clone() {
        match n {
            0 => first = f,
            1 => second = f,
            _ => {}
        }
        n += 1;
        total += f;
    }
    let std = match n {
        2 => ((first - second) / 2.0).abs(),
        n if n > 2 => {
            let mean = total / n as f64;
            let sum = fractions.fold(0f64, |sum, f| sum + (f - mean) * (f - mean));
            (sum / n as f64).sqrt()
        }
        _ => 0.0,
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// The share of the resource left free, 0..=MAX_NODE_SCORE.
#[inline(always)]
fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    scale(capacity - requested, MAX_NODE_SCORE, capacity)
}

/// `value * factor / divisor` without overflow: in i64 when the product fits (the common
/// case, much cheaper than 128-bit division), else in i128.
fn scale(value: i64, factor: i64, divisor: i64) -> i64 {
    match value
        .checked_mul(factor)
        .and_then(|p| p.checked_div(divisor))
    {
        Some(v) => v,
        None => (i128::from(value) * i128::from(factor) / i128::from(divisor)) as i64,
    }
}

/// The share of the resource in use, 0..=MAX_NODE_SCORE (over-commitment counts as full).
fn most_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    let requested = requested.min(capacity);
    scale(requested, MAX_NODE_SCORE, capacity)
}

/// The piecewise linear function through the shape points (`helper.BuildBrokenLinearFunction`):
/// the first score left of the first point, the last score right of the last one.
fn broken_linear(shape: &[(i64, i64)], p: i64) -> i64 {
    for (i, &(u, s)) in shape.iter().enumerate() {
        if p <= u {
            if i == 0 {
                return s;
            }
            let (pu, ps) = shape[i - 1];
            let num = i128::from(s - ps) * i128::from(p - pu);
            return match num.checked_div(i128::from(u - pu)) {
                Some(d) => ps + d as i64,
                None => s,
            };
        }
    }
    shape.last().map_or(0, |&(_, s)| s)
}

/// Whether a resource name is an extended resource (`v1helper.IsExtendedResourceName`): not a
/// native resource (no `/`, or in the `kubernetes.io/` namespace) and not a quota `requests.`.
fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

#[cfg(test)]
pub(crate) mod test_util {
    //! Builders shared by the resource plugins' tests.
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{Container, Node, Pod, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use crate::snapshot::testing;
    use crate::types::{NodeInfo, PodInfo};

    pub fn list(items: &[(&str, String)]) -> BTreeMap<String, Quantity> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.clone())))
            .collect()
    }

    pub fn container(name: &str, requests: &[(&str, String)]) -> Container {
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: (!requests.is_empty()).then(|| list(requests)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A pod with one container per request list (`st.MakePod().Req(...)`).
    pub fn pod(name: &str, containers: &[&[(&str, String)]]) -> Pod {
        let mut p = testing::pod(name, &[]);
        if let Some(spec) = p.spec.as_mut() {
            spec.containers = containers
                .iter()
                .enumerate()
                .map(|(i, r)| container(&format!("c{i}"), r))
                .collect();
        }
        p
    }

    /// Add init containers (`restart_policy_always` makes them sidecars).
    pub fn with_init(mut p: Pod, init: &[&[(&str, String)]], restart_policy_always: bool) -> Pod {
        if let Some(spec) = p.spec.as_mut() {
            spec.init_containers = Some(
                init.iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let mut c = container(&format!("i{i}"), r);
                        if restart_policy_always {
                            c.restart_policy = Some("Always".into());
                        }
                        c
                    })
                    .collect(),
            );
        }
        p
    }

    pub fn s(v: impl ToString) -> String {
        v.to_string()
    }

    /// A node whose allocatable (and capacity) is `list`.
    pub fn node(name: &str, allocatable: &[(&str, String)]) -> Node {
        let mut n = testing::node(name, &[], &[]);
        if let Some(st) = n.status.as_mut() {
            st.allocatable = Some(list(allocatable));
            st.capacity = Some(list(allocatable));
        }
        n
    }

    /// A NodeInfo for `node` with `pods` placed on it.
    pub fn node_info(node: Node, pods: Vec<Pod>) -> NodeInfo {
        let mut info = NodeInfo::new(node);
        for p in pods {
            info.add_pod(Arc::new(PodInfo::new(p)));
        }
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shape points and `(utilization, expected score)` pairs.
    type ShapeCase<'a> = (&'a [(i64, i64)], &'a [(i64, i64)]);

    #[test]
    fn broken_linear_function_interpolates_between_points() {
        let cases: &[ShapeCase] = &[
            (
                &[(10, 1), (90, 9)],
                &[
                    (-10, 1),
                    (0, 1),
                    (9, 1),
                    (10, 1),
                    (15, 1),
                    (19, 1),
                    (20, 2),
                    (89, 8),
                    (90, 9),
                    (99, 9),
                    (100, 9),
                    (110, 9),
                ],
            ),
            (
                &[(0, 2), (40, 10), (100, 0)],
                &[
                    (-10, 2),
                    (0, 2),
                    (20, 6),
                    (30, 8),
                    (40, 10),
                    (70, 5),
                    (100, 0),
                    (110, 0),
                ],
            ),
            (
                &[(0, 2), (40, 2), (100, 2)],
                &[
                    (-10, 2),
                    (0, 2),
                    (20, 2),
                    (30, 2),
                    (40, 2),
                    (70, 2),
                    (100, 2),
                    (110, 2),
                ],
            ),
        ];
        for (shape, points) in cases {
            for &(p, want) in *points {
                assert_eq!(broken_linear(shape, p), want, "shape {shape:?} at {p}");
            }
        }
        assert_eq!(broken_linear(&[], 50), 0);
    }

    #[test]
    fn requested_scores_stay_in_range_and_never_overflow() {
        assert_eq!(least_requested(0, 4000), 100);
        assert_eq!(least_requested(3000, 4000), 25);
        assert_eq!(least_requested(5000, 4000), 0);
        assert_eq!(least_requested(1, 0), 0);
        assert_eq!(least_requested(0, i64::MAX), 100);
        assert_eq!(most_requested(3000, 4000), 75);
        assert_eq!(most_requested(5000, 4000), 100);
        assert_eq!(most_requested(i64::MAX, i64::MAX), 100);
        assert_eq!(most_requested(1, 0), 0);
    }

    #[test]
    fn extended_resources_exclude_native_and_quota_names() {
        assert!(is_extended_resource("example.com/aaa"));
        assert!(!is_extended_resource("kubernetes.io/something"));
        assert!(!is_extended_resource("subdomain.kubernetes.io/something"));
        assert!(!is_extended_resource("requests.example.com/x"));
        assert!(!is_extended_resource("cpu"));
        assert!(!is_extended_resource("hugepages-2Mi"));
    }

    #[test]
    fn resource_lists_default_to_cpu_and_memory_and_weight_one() {
        assert_eq!(default_resource_list(None), default_resources());
        assert_eq!(default_resource_list(Some(vec![])), default_resources());
        let got = default_resource_list(Some(vec![
            ResourceSpec {
                name: "cpu".into(),
                weight: None,
            },
            ResourceSpec::new("memory", 0),
            ResourceSpec::new("example.com/gpu", 7),
        ]));
        assert_eq!(
            got,
            vec![
                ResourceSpec::new("cpu", 1),
                ResourceSpec::new("memory", 1),
                ResourceSpec::new("example.com/gpu", 7)
            ]
        );
    }

    #[test]
    fn aggregated_errors_print_like_kubernetes() {
        assert_eq!(aggregate(vec![]), Ok(()));
        let e = |m: &str| FieldError::required(m, "");
        assert_eq!(aggregate(vec![e("a")]), Err("a: Required value".into()));
        assert_eq!(
            aggregate(vec![e("a"), e("b"), e("a")]),
            Err("[a: Required value, b: Required value]".into())
        );
    }

    #[test]
    fn scorer_without_resources_is_an_error() {
        let s = AllocationScorer::new(&[], Strategy::LeastAllocated, false);
        let node = test_util::node_info(test_util::node("n", &[]), vec![]);
        let err = s.score(&node, &[]).unwrap_err();
        assert_eq!(err.code, crate::framework::Code::Error);
    }
}
