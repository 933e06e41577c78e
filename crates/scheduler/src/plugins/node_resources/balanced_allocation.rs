//! NodeResourcesBalancedAllocation: favours nodes whose requested fractions of the configured
//! resources (CPU and memory by default) would be close to each other with the pod placed:
//! score = (1 − standard deviation of the fractions) · 100. Mirrors
//! `noderesources/balanced_allocation.go` of Kubernetes v1.32 (best-effort pods are still
//! scored; the PreScore skip for them came in v1.33).

use std::collections::HashSet;
use std::sync::Arc;

use capstan_api::field::FieldError;
use serde::Deserialize;
use serde_json::Value;

use super::{aggregate, default_resource_list, AllocationScorer, ResourceSpec, Strategy};
use crate::framework::{CycleState, NodeScore, Plugin, PreScorePlugin, ScorePlugin, Status};
use crate::plugins::parse_args;
use crate::snapshot::Snapshot;
use crate::types::{NodeInfo, PodInfo};

pub const NAME: &str = "NodeResourcesBalancedAllocation";

/// `NodeResourcesBalancedAllocationArgs` (kubescheduler.config.k8s.io/v1).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeResourcesBalancedAllocationArgs {
    /// Resources to balance; every weight must be 1. Default: cpu and memory.
    #[serde(default)]
    pub resources: Option<Vec<ResourceSpec>>,
}

pub struct NodeResourcesBalancedAllocation {
    scorer: AllocationScorer,
}

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    let args: NodeResourcesBalancedAllocationArgs = parse_args(args)?;
    Ok(Arc::new(NodeResourcesBalancedAllocation::from_args(args)?))
}

impl NodeResourcesBalancedAllocation {
    /// Default, validate and build from args.
    pub fn from_args(
        args: NodeResourcesBalancedAllocationArgs,
    ) -> Result<NodeResourcesBalancedAllocation, String> {
        let resources = default_resource_list(args.resources);
        let mut errs = Vec::new();
        let mut seen = HashSet::new();
        for (i, r) in resources.iter().enumerate() {
            if !seen.insert(r.name.as_str()) {
                errs.push(FieldError::duplicate(
                    format!("resources[{i}].name"),
                    &Value::from(r.name.as_str()),
                ));
            }
            let w = r.weight.unwrap_or(1);
            if w != 1 {
                errs.push(FieldError::invalid(
                    format!("resources[{i}].weight"),
                    &Value::from(w),
                    "must be 1",
                ));
            }
        }
        aggregate(errs)?;
        Ok(NodeResourcesBalancedAllocation {
            // Balance is judged on what pods really request, without the non-zero defaults.
            scorer: AllocationScorer::new(&resources, Strategy::Balanced, true),
        })
    }
}

impl Plugin for NodeResourcesBalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for NodeResourcesBalancedAllocation {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[&NodeInfo],
        _snapshot: &Snapshot,
    ) -> Status {
        self.scorer.pre_score(state, NAME, pod);
        Status::success()
    }
}

impl ScorePlugin for NodeResourcesBalancedAllocation {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        self.scorer.score_from_state(state, NAME, pod, node)
    }
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        scores: &mut [NodeScore],
    ) -> Result<(), Status> {
        self.scorer
            .score_nodes_from_state(state, NAME, pod, nodes, scores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::node_resources::test_util::{pod, s};
    use crate::snapshot::testing;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    /// `makeNode`: allocatable CPU (millicores), memory and extended resources.
    fn make_node(name: &str, milli_cpu: i64, memory: i64, scalar: &[(&str, i64)]) -> Node {
        let mut list = vec![("cpu", format!("{milli_cpu}m")), ("memory", s(memory))];
        list.extend(scalar.iter().map(|(n, v)| (*n, s(v))));
        crate::plugins::node_resources::test_util::node(name, &list)
    }

    fn cpu_only() -> Pod {
        pod(
            "cpu-only",
            &[
                &[("cpu", s("1000m")), ("memory", s("0"))],
                &[("cpu", s("2000m")), ("memory", s("0"))],
            ],
        )
    }

    fn cpu_and_memory() -> Pod {
        pod(
            "cpu-and-memory",
            &[
                &[("cpu", s("1000m")), ("memory", s("2000"))],
                &[("cpu", s("2000m")), ("memory", s("3000"))],
            ],
        )
    }

    fn cpu_and_memory_and_gpu() -> Pod {
        pod(
            "cpu-and-memory-and-gpu",
            &[
                &[("cpu", s("1000m")), ("memory", s("2000"))],
                &[
                    ("cpu", s("2000m")),
                    ("memory", s("3000")),
                    ("nvidia.com/gpu", s("3")),
                ],
            ],
        )
    }

    fn named(mut p: Pod, name: &str) -> Pod {
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

    #[test]
    fn scores_follow_the_spread_of_requested_fractions() {
        let default =
            json!({"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]});
        let with_gpu = json!({"resources": [
            {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": "nvidia.com/gpu", "weight": 1}
        ]});
        let gpu = [("nvidia.com/gpu", 8)];
        let empty = || testing::pod("empty", &[]);
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&str, Value, Pod, Vec<(Node, Vec<Pod>)>, bool, Vec<i64>)> = vec![
            (
                "nothing scheduled, nothing requested",
                default.clone(),
                empty(),
                vec![
                    (make_node("node1", 4000, 10000, &[]), vec![]),
                    (make_node("node2", 4000, 10000, &[]), vec![]),
                ],
                true,
                vec![100, 100],
            ),
            (
                // node1: cpu 3000/4000, memory 5000/10000: std 0.125.
                "nothing scheduled, resources requested, differently sized nodes",
                default.clone(),
                cpu_and_memory(),
                vec![
                    (make_node("node1", 4000, 10000, &[]), vec![]),
                    (make_node("node2", 6000, 10000, &[]), vec![]),
                ],
                true,
                vec![87, 100],
            ),
            (
                "no resources requested, pods without container scheduled",
                default.clone(),
                empty(),
                vec![
                    (
                        make_node("node1", 4000, 10000, &[]),
                        vec![testing::pod("a", &[]), testing::pod("b", &[])],
                    ),
                    (
                        make_node("node2", 4000, 10000, &[]),
                        vec![testing::pod("c", &[]), testing::pod("d", &[])],
                    ),
                ],
                true,
                vec![100, 100],
            ),
            (
                "no resources requested, pods with container scheduled",
                default.clone(),
                empty(),
                vec![
                    (
                        make_node("node1", 250, 1000 * 1024 * 1024, &[]),
                        vec![testing::pod("a", &[]), testing::pod("b", &[])],
                    ),
                    (make_node("node2", 250, 1000 * 1024 * 1024, &[]), vec![]),
                ],
                true,
                vec![100, 100],
            ),
            (
                // node1: cpu 6000/10000, memory 0: std 0.3; node2: cpu 0.6, memory 0.25.
                "no resources requested, pods scheduled with resources",
                default.clone(),
                empty(),
                vec![
                    (
                        make_node("node1", 10000, 20000, &[]),
                        vec![named(cpu_only(), "a"), named(cpu_only(), "b")],
                    ),
                    (
                        make_node("node2", 10000, 20000, &[]),
                        vec![named(cpu_only(), "c"), cpu_and_memory()],
                    ),
                ],
                true,
                vec![70, 82],
            ),
            (
                "resources requested, pods scheduled with resources",
                default.clone(),
                cpu_and_memory(),
                vec![
                    (make_node("node1", 10000, 20000, &[]), vec![cpu_only()]),
                    (
                        make_node("node2", 10000, 20000, &[]),
                        vec![cpu_and_memory()],
                    ),
                ],
                true,
                vec![82, 95],
            ),
            (
                "resources requested, pods scheduled with resources, differently sized nodes",
                default.clone(),
                cpu_and_memory(),
                vec![
                    (make_node("node1", 10000, 20000, &[]), vec![cpu_only()]),
                    (
                        make_node("node2", 10000, 50000, &[]),
                        vec![cpu_and_memory()],
                    ),
                ],
                true,
                vec![82, 80],
            ),
            (
                "requested resources at node capacity",
                default.clone(),
                cpu_only(),
                vec![
                    (make_node("node1", 6000, 10000, &[]), vec![cpu_only()]),
                    (make_node("node2", 6000, 10000, &[]), vec![cpu_and_memory()]),
                ],
                true,
                vec![50, 75],
            ),
            (
                "zero node resources, pods scheduled with resources",
                default.clone(),
                empty(),
                vec![
                    (make_node("node1", 0, 0, &[]), vec![cpu_only()]),
                    (make_node("node2", 0, 0, &[]), vec![cpu_and_memory()]),
                ],
                true,
                vec![100, 100],
            ),
            (
                // node1: cpu 3000/3500, memory 5000/40000, gpu 4/8: std 0.3002.
                "include scalar resource on a node for balanced resource allocation",
                with_gpu.clone(),
                pod("p", &[&[("memory", s("0")), ("nvidia.com/gpu", s("1"))]]),
                vec![
                    (
                        make_node("node1", 3500, 40000, &gpu),
                        vec![cpu_and_memory_and_gpu()],
                    ),
                    (
                        make_node("node2", 3500, 40000, &gpu),
                        vec![cpu_and_memory()],
                    ),
                ],
                true,
                vec![70, 65],
            ),
            (
                // The pod does not request the GPU: only the cpu fraction counts, std 0.
                "node without the scalar resource results to a higher score",
                json!({"resources": [{"name": "cpu", "weight": 1}, {"name": "nvidia.com/gpu", "weight": 1}]}),
                empty(),
                vec![
                    (make_node("node1", 3500, 40000, &gpu), vec![cpu_only()]),
                    (make_node("node2", 3500, 40000, &[]), vec![cpu_only()]),
                ],
                true,
                vec![100, 100],
            ),
            (
                "resources requested, pods scheduled with resources if PreScore not called",
                default.clone(),
                cpu_and_memory(),
                vec![
                    (make_node("node1", 10000, 20000, &[]), vec![cpu_only()]),
                    (
                        make_node("node2", 10000, 20000, &[]),
                        vec![cpu_and_memory()],
                    ),
                ],
                false,
                vec![82, 95],
            ),
        ];
        for (name, args, p, nodes, pre_score, want) in cases {
            assert_eq!(scores(args, p, nodes, pre_score), want, "{name}");
        }
    }

    #[test]
    fn args_default_to_cpu_and_memory_and_require_weight_one() {
        let ok = |v: Value| NodeResourcesBalancedAllocation::from_args(parse_args(&v).unwrap());
        let b = ok(Value::Null).unwrap();
        let names: Vec<&str> = b.scorer.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["cpu", "memory"]);
        // A zero or missing weight defaults to 1.
        assert!(
            ok(json!({"resources": [{"name": "cpu"}, {"name": "memory", "weight": 0}]})).is_ok()
        );
        assert_eq!(
            ok(json!({"resources": [{"name": "cpu", "weight": 2}]}))
                .err()
                .unwrap(),
            "resources[0].weight: Invalid value: 2: must be 1"
        );
        assert_eq!(
            ok(json!({"resources": [{"name": "cpu", "weight": 1}, {"name": "cpu", "weight": 3}]}))
                .err()
                .unwrap(),
            "[resources[1].name: Duplicate value: \"cpu\", resources[1].weight: Invalid value: 3: must be 1]"
        );
        assert!(
            new(&json!({"resource": []})).is_err(),
            "unknown fields are rejected"
        );
    }

    #[test]
    fn is_a_score_plugin_without_events() {
        let p = new(&Value::Null).unwrap();
        assert_eq!(p.name(), NAME);
        assert!(p.as_filter().is_none() && p.as_score().is_some());
        assert!(p.events().is_empty());
    }
}
