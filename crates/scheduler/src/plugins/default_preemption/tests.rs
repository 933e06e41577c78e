//! Kubernetes' `default_preemption_test.go` cases, with small test-only filter plugins standing
//! in for NodeResourcesFit and InterPodAffinity.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{
    Affinity, Node, Pod, PodAffinityTerm, PodAntiAffinity, PodCondition, PodStatus,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector as MetaSelector, LabelSelectorRequirement, ObjectMeta, Time,
};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::framework::{Enabled, FilterPlugin, PreFilterPlugin, PreFilterResult};
use crate::snapshot::testing;

const NEG: i32 = -100;
const LOW: i32 = 0;
const MID: i32 = 100;
const HIGH: i32 = 1000;
const VERY_HIGH: i32 = 10000;

type Res = &'static [(&'static str, &'static str)];
const NONE: Res = &[];
const SMALL: Res = &[("cpu", "100m"), ("memory", "100")];
const MEDIUM: Res = &[("cpu", "200m"), ("memory", "200")];
const LARGE: Res = &[("cpu", "300m"), ("memory", "300")];
const VERY_LARGE: Res = &[("cpu", "500m"), ("memory", "500")];
const ONE_POD: Res = &[("pods", "1")];
const NODE_RES: Res = &[("cpu", "200m"), ("memory", "400")];

// ---- test-only plugins ------------------------------------------------------------------

/// Counts CPU, memory and pod slots against allocatable, as NodeResourcesFit does.
struct Fit;

impl Plugin for Fit {
    fn name(&self) -> &'static str {
        "TestFit"
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for Fit {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let mut reasons: Vec<Cow<'static, str>> = Vec::new();
        if node.pods.len() as i64 + 1 > node.allocatable.allowed_pod_number {
            reasons.push("Too many pods".into());
        }
        let (req, used, alloc) = (&pod.requests, &node.requested, &node.allocatable);
        if req.milli_cpu > 0 && req.milli_cpu > alloc.milli_cpu - used.milli_cpu {
            reasons.push("Insufficient cpu".into());
        }
        if req.memory > 0 && req.memory > alloc.memory - used.memory {
            reasons.push("Insufficient memory".into());
        }
        if reasons.is_empty() {
            Status::success()
        } else {
            Status::with_reasons(Code::Unschedulable, reasons)
        }
    }
}

/// Kubernetes' FakeFilterPlugin: counts calls and answers with a fixed code.
struct Counting {
    code: Code,
    calls: AtomicUsize,
}

impl Plugin for Counting {
    fn name(&self) -> &'static str {
        "FakeFilter"
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for Counting {
    fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
        self.calls.fetch_add(1, AtomicOrdering::SeqCst);
        match self.code {
            Code::Success => Status::success(),
            code => Status::with_reasons(code, Vec::new()),
        }
    }
}

/// Kubernetes' FalseFilter (always Unschedulable) and MatchFilter (pod name = node name).
enum Fixed {
    False,
    Match,
}

impl Plugin for Fixed {
    fn name(&self) -> &'static str {
        match self {
            Fixed::False => "FalseFilter",
            Fixed::Match => "MatchFilter",
        }
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for Fixed {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match self {
            Fixed::Match if pod.name() == node.name() => Status::success(),
            _ => Status::unschedulable("injecting failure for pod"),
        }
    }
}

/// Kubernetes' "test-plugin": its PreFilter extensions fail on nodes labelled `error=true`.
struct FailingExtensions;

impl Plugin for FailingExtensions {
    fn name(&self) -> &'static str {
        "test-plugin"
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for FailingExtensions {
    fn pre_filter(
        &self,
        _: &mut CycleState,
        _: &PodInfo,
        _: &Snapshot,
    ) -> (PreFilterResult, Status) {
        (PreFilterResult::default(), Status::success())
    }
    fn has_extensions(&self) -> bool {
        true
    }
    fn add_pod(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &PodInfo,
        node: &NodeInfo,
        _: &Snapshot,
    ) -> Status {
        if node.labels().get("error").map(String::as_str) == Some("true") {
            return Status::error(format!("failed to add pod: {}", pod.name()));
        }
        Status::success()
    }
    fn remove_pod(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &PodInfo,
        node: &NodeInfo,
        _: &Snapshot,
    ) -> Status {
        if node.labels().get("error").map(String::as_str) == Some("true") {
            return Status::error(format!("failed to remove pod: {}", pod.name()));
        }
        Status::success()
    }
}

/// Existing pods' required anti-affinity, per node, kept in PreFilter state that the
/// AddPod/RemovePod extensions update (a stand-in for InterPodAffinity).
struct AntiAffinity;

#[derive(Clone)]
struct AntiState(HashMap<String, usize>);

const ANTI: &str = "TestAntiAffinity";

fn repels(existing: &PodInfo, incoming: &PodInfo) -> bool {
    existing
        .required_anti_affinity
        .iter()
        .any(|t| t.matches(incoming, None))
}

impl Plugin for AntiAffinity {
    fn name(&self) -> &'static str {
        ANTI
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for AntiAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let mut counts = HashMap::new();
        for n in snapshot.nodes() {
            let c = n.pods.iter().filter(|p| repels(p, pod)).count();
            counts.insert(n.name().to_string(), c);
        }
        state.write(ANTI, AntiState(counts));
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
        _: &Snapshot,
    ) -> Status {
        if let Some(s) = state.read_mut::<AntiState>(ANTI) {
            if repels(added, pod) {
                *s.0.entry(node.name().to_string()).or_default() += 1;
            }
        }
        Status::success()
    }
    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
        _: &Snapshot,
    ) -> Status {
        if let Some(s) = state.read_mut::<AntiState>(ANTI) {
            if repels(removed, pod) {
                let c = s.0.entry(node.name().to_string()).or_default();
                *c = c.saturating_sub(1);
            }
        }
        Status::success()
    }
}

impl FilterPlugin for AntiAffinity {
    fn filter(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        let n = state
            .read::<AntiState>(ANTI)
            .and_then(|s| s.0.get(node.name()).copied())
            .unwrap_or(0);
        if n > 0 {
            Status::unschedulable("node(s) didn't satisfy existing pods anti-affinity rules")
        } else {
            Status::success()
        }
    }
}

// ---- builders ---------------------------------------------------------------------------

fn framework(pre_filter: Vec<Arc<dyn Plugin>>, filter: Vec<Arc<dyn Plugin>>) -> Framework {
    let enable = |v: Vec<Arc<dyn Plugin>>| {
        v.into_iter()
            .map(|plugin| Enabled { plugin, weight: 0 })
            .collect::<Vec<_>>()
    };
    Framework {
        pre_filter: enable(pre_filter),
        filter: enable(filter),
        ..Framework::default()
    }
}

/// A node named by the first part of `spec` ("name/zone"), labelled hostname (and zone), with
/// these resources and 32 pod slots unless `res` names "pods" (Kubernetes' `Capacity`).
fn node(spec: &str, res: Res) -> Node {
    let parts: Vec<&str> = spec.split('/').collect();
    let mut alloc: Vec<(&str, &str)> = res.to_vec();
    if !res.iter().any(|(k, _)| *k == "pods") {
        alloc.push(("pods", "32"));
    }
    let mut labels = vec![("hostname", parts[0])];
    if let Some(z) = parts.get(1) {
        labels.push(("zone", z));
    }
    testing::node(parts[0], &alloc, &labels)
}

fn node_label(mut n: Node, k: &str, v: &str) -> Node {
    n.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(k.into(), v.into());
    n
}

/// A pod with one container requesting `res` (none when empty) and this priority.
fn pod(name: &str, priority: i32, res: Res) -> Pod {
    let mut p = if res.is_empty() {
        testing::pod(name, &[])
    } else {
        testing::pod(name, &[res])
    };
    if let Some(s) = p.spec.as_mut() {
        s.priority = Some(priority);
    }
    p
}

fn label(mut p: Pod, k: &str, v: &str) -> Pod {
    p.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(k.into(), v.into());
    p
}

fn status(p: &mut Pod) -> &mut PodStatus {
    p.status.get_or_insert_with(Default::default)
}

/// Started `nanos` nanoseconds after the epoch.
fn started(mut p: Pod, nanos: i128) -> Pod {
    status(&mut p).start_time = Timestamp::from_nanosecond(nanos).ok().map(Time);
    p
}

fn nominated(mut p: Pod, node: &str) -> Pod {
    status(&mut p).nominated_node_name = Some(node.into());
    p
}

fn preemption_policy(mut p: Pod, policy: &str) -> Pod {
    if let Some(s) = p.spec.as_mut() {
        s.preemption_policy = Some(policy.into());
    }
    p
}

fn terminating(mut p: Pod) -> Pod {
    p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    p
}

fn disruption_target(mut p: Pod) -> Pod {
    status(&mut p)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("PreemptionByScheduler".into()),
            ..Default::default()
        });
    p
}

/// Required anti-affinity to pods having label `key`, per hostname.
fn anti_affinity_exists(mut p: Pod, key: &str) -> Pod {
    if let Some(s) = p.spec.as_mut() {
        s.affinity = Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                    label_selector: Some(MetaSelector {
                        match_expressions: Some(vec![LabelSelectorRequirement {
                            key: key.into(),
                            operator: "Exists".into(),
                            values: None,
                        }]),
                        match_labels: None,
                    }),
                    topology_key: "hostname".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    p
}

fn pdb(
    namespace: &str,
    match_labels: &[(&str, &str)],
    allowed: i32,
    disrupted: &[&str],
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(MetaSelector {
                match_labels: Some(
                    match_labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                match_expressions: None,
            }),
            ..Default::default()
        }),
        status: Some(PodDisruptionBudgetStatus {
            disruptions_allowed: allowed,
            disrupted_pods: Some(
                disrupted
                    .iter()
                    .map(|n| (n.to_string(), Time(Timestamp::UNIX_EPOCH)))
                    .collect(),
            ),
            ..Default::default()
        }),
    }
}

/// Nodes with the pods bound to them (`(node, pods)` in node-name order).
fn cluster(nodes: Vec<(Node, Vec<Pod>)>) -> Snapshot {
    testing::snapshot(nodes)
}

fn plugin(args: DefaultPreemptionArgs, pdbs: Vec<PodDisruptionBudget>) -> DefaultPreemption {
    DefaultPreemption::with_store(args, Arc::new(RwLock::new(pdbs)))
}

/// Kubernetes' tests seed `rand.Int31n` with 4: for 5 nodes it yields 4, 1, 3, ...
fn offsets(seq: &'static [usize]) -> impl Fn(usize) -> usize + Send + Sync + 'static {
    let next = Mutex::new(0usize);
    move |n| {
        let mut i = next.lock().unwrap_or_else(|e| e.into_inner());
        let v = seq.get(*i).copied().unwrap_or(0) % n.max(1);
        *i += 1;
        v
    }
}

fn names(victims: &[Arc<PodInfo>]) -> Vec<String> {
    victims.iter().map(|p| p.name().to_string()).collect()
}

// ---- arguments --------------------------------------------------------------------------

#[test]
fn args_default_and_validate_as_kubernetes() {
    assert_eq!(
        DefaultPreemptionArgs::parse(&Value::Null),
        Ok(DefaultPreemptionArgs::default())
    );
    assert_eq!(
        DefaultPreemptionArgs::parse(&json!({"minCandidateNodesPercentage": 50})),
        Ok(DefaultPreemptionArgs {
            min_candidate_nodes_percentage: 50,
            min_candidate_nodes_absolute: 100
        })
    );
    assert_eq!(
        DefaultPreemptionArgs::parse(&json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "DefaultPreemptionArgs",
            "minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 1
        })),
        Ok(DefaultPreemptionArgs {
            min_candidate_nodes_percentage: 0,
            min_candidate_nodes_absolute: 1
        })
    );
    let cases: &[(Value, &str)] = &[
        (
            json!({"minCandidateNodesPercentage": -1}),
            "minCandidateNodesPercentage: Invalid value: -1: not in valid range [0, 100]",
        ),
        (
            json!({"minCandidateNodesPercentage": 101}),
            "minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]",
        ),
        (
            json!({"minCandidateNodesAbsolute": -1}),
            "minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)",
        ),
        (
            json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}),
            "[minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute, minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time as minCandidateNodesPercentage]",
        ),
        (
            json!({"minCandidateNodesPercentage": -1, "minCandidateNodesAbsolute": -1}),
            "[minCandidateNodesPercentage: Invalid value: -1: not in valid range [0, 100], minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)]",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(
            DefaultPreemptionArgs::parse(args),
            Err(want.to_string()),
            "{args}"
        );
    }
    assert!(DefaultPreemptionArgs::parse(&json!({"minCandidateNodes": 1})).is_err());
    assert!(new(&json!({"minCandidateNodesAbsolute": -5})).is_err());
    assert!(new(&Value::Null).is_ok_and(|p| p.as_post_filter().is_some() && p.name() == NAME));
}

#[test]
fn number_of_candidates_is_percentage_bounded_by_absolute_and_node_count() {
    let cases = [
        // (nodes, percentage, absolute, want)
        (10, 10, 100, 10),
        (1000, 10, 100, 100),
        (5000, 10, 100, 500),
        (5, 40, 1, 2),
        (5, 40, 2, 2),
        (5, 0, 3, 3),
        (5, 10, 0, 0),
        (0, 10, 100, 0),
    ];
    for (n, pct, abs, want) in cases {
        let pl = plugin(
            DefaultPreemptionArgs {
                min_candidate_nodes_percentage: pct,
                min_candidate_nodes_absolute: abs,
            },
            vec![],
        );
        assert_eq!(
            pl.calculate_num_candidates(n),
            want,
            "{n} nodes, {pct}%, {abs}"
        );
    }
    let pl = plugin(DefaultPreemptionArgs::default(), vec![]).with_offset(|_| 7);
    assert_eq!(pl.offset_and_num_candidates(5), (2, 5));
    let random = plugin(DefaultPreemptionArgs::default(), vec![]);
    for _ in 0..20 {
        assert!(random.offset_and_num_candidates(3).0 < 3);
    }
}

// ---- PostFilter -------------------------------------------------------------------------

struct PostFilterCase {
    name: &'static str,
    pod: Pod,
    nodes: Vec<(Node, Vec<Pod>)>,
    pdbs: Vec<PodDisruptionBudget>,
    /// Filter codes by node name; the others are absent (UnschedulableAndUnresolvable).
    statuses: Vec<(&'static str, Code)>,
    want_node: Option<&'static str>,
    want_victims: Vec<&'static str>,
    want_code: Code,
    want_message: &'static str,
}

fn run_post_filter(c: &PostFilterCase) -> (Option<PostFilterResult>, Status) {
    let snapshot = cluster(c.nodes.clone());
    let fw = framework(vec![Arc::new(FailingExtensions)], vec![Arc::new(Fit)]);
    let pod = PodInfo::new(c.pod.clone());
    let mut state = CycleState::new();
    let (_, s) = fw.run_pre_filter(&mut state, &pod, &snapshot);
    assert!(s.is_success(), "{}: PreFilter {s:?}", c.name);
    let statuses = NodeStatuses {
        by_node: c
            .statuses
            .iter()
            .filter_map(|(n, code)| {
                Some((
                    snapshot.index_of(n)?,
                    Status::with_reasons(*code, Vec::new()),
                ))
            })
            .collect(),
        absent: Some(Status::with_reasons(
            Code::UnschedulableAndUnresolvable,
            Vec::new(),
        )),
    };
    let pl = plugin(DefaultPreemptionArgs::default(), c.pdbs.clone()).with_offset(|_| 0);
    pl.post_filter(&state, &pod, &fw, &snapshot, &statuses)
}

#[test]
fn post_filter_nominates_a_node_or_explains_why_not() {
    let victim = |name: &str, prio: i32, res: Res| pod(name, prio, res);
    let cases = vec![
        PostFilterCase {
            name: "pod with higher priority can be made schedulable",
            pod: pod("p", HIGH, NONE),
            nodes: vec![(node("node1", ONE_POD), vec![victim("p1", LOW, NONE)])],
            pdbs: vec![],
            statuses: vec![("node1", Code::Unschedulable)],
            want_node: Some("node1"),
            want_victims: vec!["p1"],
            want_code: Code::Success,
            want_message: "",
        },
        PostFilterCase {
            name: "pod with tied priority is still unschedulable",
            pod: pod("p", LOW, NONE),
            nodes: vec![(node("node1", ONE_POD), vec![victim("p1", LOW, NONE)])],
            pdbs: vec![],
            statuses: vec![("node1", Code::Unschedulable)],
            want_node: Some(""),
            want_victims: vec![],
            want_code: Code::Unschedulable,
            want_message: "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
        },
        PostFilterCase {
            name: "preemption should respect filteredNodesStatuses",
            pod: pod("p", HIGH, NONE),
            nodes: vec![(node("node1", ONE_POD), vec![victim("p1", LOW, NONE)])],
            pdbs: vec![],
            statuses: vec![("node1", Code::UnschedulableAndUnresolvable)],
            want_node: Some(""),
            want_victims: vec![],
            want_code: Code::Unschedulable,
            want_message: "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        },
        PostFilterCase {
            name: "an absent status means UnschedulableAndUnresolvable",
            pod: pod("p", HIGH, NONE),
            nodes: vec![(node("node1", ONE_POD), vec![victim("p1", LOW, NONE)])],
            pdbs: vec![],
            statuses: vec![],
            want_node: Some(""),
            want_victims: vec![],
            want_code: Code::Unschedulable,
            want_message: "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        },
        PostFilterCase {
            name: "pod can be made schedulable on one node",
            pod: pod("p", MID, NONE),
            nodes: vec![
                (node("node1", ONE_POD), vec![victim("p1", HIGH, NONE)]),
                (node("node2", ONE_POD), vec![victim("p2", LOW, NONE)]),
            ],
            pdbs: vec![],
            statuses: vec![("node1", Code::Unschedulable), ("node2", Code::Unschedulable)],
            want_node: Some("node2"),
            want_victims: vec!["p2"],
            want_code: Code::Success,
            want_message: "",
        },
        PostFilterCase {
            name: "pod can be made schedulable on minHighestPriority node",
            pod: pod("p", VERY_HIGH, NONE),
            nodes: vec![
                (
                    node("node1", ONE_POD),
                    vec![
                        label(victim("p1", HIGH, NONE), "pdb", "non-violating"),
                        label(victim("p2", LOW, NONE), "pdb", "violating"),
                    ],
                ),
                (
                    node("node2", ONE_POD),
                    vec![label(victim("p3", MID, NONE), "pdb", "violating")],
                ),
            ],
            pdbs: vec![
                pdb("default", &[("pdb", "violating")], 0, &[]),
                pdb("default", &[("pdb", "non-violating")], i32::MAX, &[]),
            ],
            statuses: vec![("node1", Code::Unschedulable), ("node2", Code::Unschedulable)],
            want_node: Some("node2"),
            want_victims: vec!["p3"],
            want_code: Code::Success,
            want_message: "",
        },
        PostFilterCase {
            name: "no candidate nodes found, no enough resource after removing low priority pods",
            pod: pod("p", HIGH, LARGE),
            nodes: vec![
                (node("node1", NODE_RES), vec![victim("p1", LOW, NONE)]),
                (node("node2", NODE_RES), vec![victim("p2", LOW, NONE)]),
            ],
            pdbs: vec![],
            statuses: vec![("node1", Code::Unschedulable), ("node2", Code::Unschedulable)],
            want_node: Some(""),
            want_victims: vec![],
            want_code: Code::Unschedulable,
            want_message: "preemption: 0/2 nodes are available: 2 Insufficient cpu.",
        },
        PostFilterCase {
            name: "no candidate nodes found with mixed reasons, no lower priority pod and no enough CPU resource",
            pod: pod("p", HIGH, LARGE),
            nodes: vec![
                (node("node1", ONE_POD), vec![victim("p1", HIGH, NONE)]),
                (node("node2", NODE_RES), vec![victim("p2", LOW, NONE)]),
                (node("node3", ONE_POD), vec![victim("p3", HIGH, NONE)]),
            ],
            pdbs: vec![],
            statuses: vec![
                ("node1", Code::Unschedulable),
                ("node2", Code::Unschedulable),
                ("node3", Code::Unschedulable),
            ],
            want_node: Some(""),
            want_victims: vec![],
            want_code: Code::Unschedulable,
            want_message: "preemption: 0/3 nodes are available: 1 Insufficient cpu, 2 No preemption victims found for incoming pod.",
        },
        PostFilterCase {
            name: "no candidate nodes found with mixed reason, 2 UnschedulableAndUnresolvable nodes and 2 nodes don't have enough CPU resource",
            pod: pod("p", HIGH, LARGE),
            nodes: vec![
                (node("node1", NODE_RES), vec![victim("p1", LOW, NONE)]),
                (node("node2", NODE_RES), vec![victim("p2", LOW, NONE)]),
                (node("node3", NODE_RES), vec![]),
                (node("node4", NODE_RES), vec![]),
            ],
            pdbs: vec![],
            statuses: vec![
                ("node1", Code::Unschedulable),
                ("node2", Code::Unschedulable),
                ("node4", Code::UnschedulableAndUnresolvable),
            ],
            want_node: Some(""),
            want_victims: vec![],
            want_code: Code::Unschedulable,
            want_message: "preemption: 0/4 nodes are available: 2 Insufficient cpu, 2 Preemption is not helpful for scheduling.",
        },
        PostFilterCase {
            name: "only one node but failed with TestPlugin",
            pod: pod("p", HIGH, LARGE),
            nodes: vec![(
                node_label(node("node1", LARGE), "error", "true"),
                vec![victim("p1", LOW, NONE)],
            )],
            pdbs: vec![],
            statuses: vec![("node1", Code::Unschedulable)],
            want_node: None,
            want_victims: vec![],
            want_code: Code::Error,
            want_message: "preemption: running RemovePod on PreFilter plugin \"test-plugin\": failed to remove pod: p",
        },
        PostFilterCase {
            name: "one failed with TestPlugin and the other pass",
            pod: pod("p", HIGH, LARGE),
            nodes: vec![
                (
                    node_label(node("node1", LARGE), "error", "true"),
                    vec![victim("p1", LOW, NONE)],
                ),
                (node("node2", LARGE), vec![victim("p2", LOW, MEDIUM)]),
            ],
            pdbs: vec![],
            statuses: vec![("node1", Code::Unschedulable), ("node2", Code::Unschedulable)],
            want_node: Some("node2"),
            want_victims: vec!["p2"],
            want_code: Code::Success,
            want_message: "",
        },
        PostFilterCase {
            name: "a pod with preemptionPolicy Never preempts nothing",
            pod: preemption_policy(pod("p", HIGH, NONE), "Never"),
            nodes: vec![(node("node1", ONE_POD), vec![victim("p1", LOW, NONE)])],
            pdbs: vec![],
            statuses: vec![("node1", Code::Unschedulable)],
            want_node: None,
            want_victims: vec![],
            want_code: Code::Unschedulable,
            want_message: "preemption: not eligible due to preemptionPolicy=Never.",
        },
        PostFilterCase {
            name: "preemptionPolicy PreemptLowerPriority preempts",
            pod: preemption_policy(pod("p", HIGH, NONE), "PreemptLowerPriority"),
            nodes: vec![(node("node1", ONE_POD), vec![victim("p1", LOW, NONE)])],
            pdbs: vec![],
            statuses: vec![("node1", Code::Unschedulable)],
            want_node: Some("node1"),
            want_victims: vec!["p1"],
            want_code: Code::Success,
            want_message: "",
        },
        PostFilterCase {
            name: "no preemption again while a victim on the nominated node terminates",
            pod: nominated(pod("p", HIGH, NONE), "node1"),
            nodes: vec![(
                node("node1", ONE_POD),
                vec![disruption_target(terminating(victim("p1", LOW, NONE)))],
            )],
            pdbs: vec![],
            statuses: vec![("node1", Code::Unschedulable)],
            want_node: None,
            want_victims: vec![],
            want_code: Code::Unschedulable,
            want_message: "preemption: not eligible due to a terminating pod on the nominated node.",
        },
    ];
    for c in &cases {
        let (result, status) = run_post_filter(c);
        assert_eq!(status.code, c.want_code, "{}: {status:?}", c.name);
        assert_eq!(status.message(), c.want_message, "{}", c.name);
        match c.want_node {
            None => assert!(result.is_none(), "{}: {result:?}", c.name),
            Some(want) => {
                let r = result.unwrap_or_else(|| panic!("{}: no result", c.name));
                assert_eq!(r.nominated_node.as_deref(), Some(want), "{}", c.name);
                assert_eq!(names(&r.victims), c.want_victims, "{}", c.name);
            }
        }
    }
}

#[test]
fn victims_of_the_chosen_node_are_reported_most_important_first() {
    // Kubernetes' TestPreempt "basic preemption logic": node1's two low-priority pods beat
    // node3's single medium-priority one; node2's pod is as important as the preemptor.
    let c = PostFilterCase {
        name: "basic preemption logic",
        pod: pod("p", HIGH, VERY_LARGE),
        nodes: vec![
            (
                node("node1", VERY_LARGE),
                vec![
                    started(pod("p1.1", LOW, SMALL), 2),
                    started(pod("p1.2", LOW, SMALL), 1),
                ],
            ),
            (node("node2", VERY_LARGE), vec![pod("p2.1", HIGH, LARGE)]),
            (node("node3", VERY_LARGE), vec![pod("p3.1", MID, MEDIUM)]),
        ],
        pdbs: vec![],
        statuses: vec![
            ("node1", Code::Unschedulable),
            ("node2", Code::Unschedulable),
            ("node3", Code::Unschedulable),
        ],
        want_node: Some("node1"),
        want_victims: vec!["p1.2", "p1.1"],
        want_code: Code::Success,
        want_message: "",
    };
    let (result, status) = run_post_filter(&c);
    assert!(status.is_success(), "{status:?}");
    let r = result.expect("a result");
    assert_eq!(r.nominated_node.as_deref(), Some("node1"));
    // Same priority: the longer-running pod (p1.2) is the more important.
    assert_eq!(names(&r.victims), c.want_victims);
}

// ---- eligibility ------------------------------------------------------------------------

#[test]
fn pod_eligible_to_preempt_others_as_kubernetes() {
    let cases: Vec<(&str, Pod, Vec<Pod>, Code, bool)> = vec![
        (
            "pod with nominated node whose status is UnschedulableAndUnresolvable",
            nominated(pod("p", HIGH, NONE), "node1"),
            vec![terminating(pod("p1", LOW, NONE))],
            Code::UnschedulableAndUnresolvable,
            true,
        ),
        (
            "pod without nominated node",
            pod("p", HIGH, NONE),
            vec![],
            Code::Success,
            true,
        ),
        (
            "pod with 'PreemptNever' preemption policy",
            preemption_policy(pod("p", HIGH, NONE), "Never"),
            vec![],
            Code::Success,
            false,
        ),
        (
            "preemption victim pod terminating, as indicated by the dedicated DisruptionTarget condition",
            nominated(pod("p", HIGH, NONE), "node1"),
            vec![disruption_target(terminating(pod("p1", LOW, NONE)))],
            Code::Success,
            false,
        ),
        (
            "non-victim pods terminating",
            nominated(pod("p", HIGH, NONE), "node1"),
            vec![terminating(pod("p1", LOW, NONE))],
            Code::Success,
            true,
        ),
        (
            "a terminating victim of higher priority does not block",
            nominated(pod("p", MID, NONE), "node1"),
            vec![disruption_target(terminating(pod("p1", HIGH, NONE)))],
            Code::Unschedulable,
            true,
        ),
        (
            "a DisruptionTarget condition without deletion does not block",
            nominated(pod("p", HIGH, NONE), "node1"),
            vec![disruption_target(pod("p1", LOW, NONE))],
            Code::Unschedulable,
            true,
        ),
    ];
    for (name, p, pods, code, want) in cases {
        let snapshot = cluster(vec![(node("node1", NONE), pods)]);
        let got = pod_eligible_to_preempt_others(&PodInfo::new(p), &snapshot, code);
        assert_eq!(got.is_ok(), want, "{name}: {got:?}");
    }
}

#[test]
fn nomination_recorded_in_the_snapshot_counts_like_the_pod_status() {
    let mut snapshot = cluster(vec![(
        node("node1", ONE_POD),
        vec![disruption_target(terminating(pod("p1", LOW, NONE)))],
    )]);
    let p = Arc::new(PodInfo::new(pod("p", HIGH, NONE)));
    assert!(pod_eligible_to_preempt_others(&p, &snapshot, Code::Unschedulable).is_ok());
    snapshot.nominate(p.clone(), "node1");
    assert_eq!(
        pod_eligible_to_preempt_others(&p, &snapshot, Code::Unschedulable),
        Err(MSG_TERMINATING)
    );
}

// ---- dry run (selectVictimsOnNode over the candidate nodes) -------------------------------

struct DryRunCase {
    name: &'static str,
    args: Option<DefaultPreemptionArgs>,
    /// Node specs "name[/zone]", each with veryLargeRes and 32 pod slots.
    nodes: Vec<&'static str>,
    /// One scheduling cycle per pod.
    pods: Vec<Pod>,
    /// `(node name, pod)`.
    init: Vec<(&'static str, Pod)>,
    filters: Vec<Arc<dyn Plugin>>,
    pdbs: Vec<PodDisruptionBudget>,
    fake_code: Code,
    offsets: &'static [usize],
    /// Per cycle: (node, victims sorted by name, PDB violations), sorted by node.
    want: Vec<Vec<(&'static str, Vec<&'static str>, usize)>>,
    want_filter_calls: Vec<usize>,
}

fn fit() -> Vec<Arc<dyn Plugin>> {
    vec![Arc::new(Fit)]
}

#[allow(clippy::type_complexity)]
fn run_dry_run(c: &DryRunCase) -> Vec<(Vec<(String, Vec<String>, usize)>, usize)> {
    let nodes = c
        .nodes
        .iter()
        .map(|spec| {
            let name = spec.split('/').next().unwrap_or_default();
            let pods = c
                .init
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, p)| p.clone())
                .collect();
            (node(spec, VERY_LARGE), pods)
        })
        .collect();
    let snapshot = cluster(nodes);
    let counting = Arc::new(Counting {
        code: c.fake_code,
        calls: AtomicUsize::new(0),
    });
    let mut filters: Vec<Arc<dyn Plugin>> = vec![counting.clone()];
    filters.extend(c.filters.iter().cloned());
    let pre_filters: Vec<Arc<dyn Plugin>> = c
        .filters
        .iter()
        .filter(|p| p.as_pre_filter().is_some())
        .cloned()
        .collect();
    let fw = framework(pre_filters, filters);
    let pl = plugin(c.args.unwrap_or_default(), c.pdbs.clone()).with_offset(offsets(c.offsets));
    let budgets = pl.budgets(&Snapshot::default());
    let all: Vec<usize> = (0..snapshot.num_nodes()).collect();
    let mut out = Vec::new();
    for p in &c.pods {
        let before = counting.calls.load(AtomicOrdering::SeqCst);
        let p = PodInfo::new(p.clone());
        let mut state = CycleState::new();
        let (_, s) = fw.run_pre_filter(&mut state, &p, &snapshot);
        assert!(s.is_success(), "{}: PreFilter {s:?}", c.name);
        let (offset, num) = pl.offset_and_num_candidates(all.len());
        let dry = pl.dry_run(
            &state,
            &p,
            &fw,
            &snapshot,
            &all,
            &budgets,
            offset,
            num,
            now_nanos(),
        );
        let mut got: Vec<(String, Vec<String>, usize)> = dry
            .candidates
            .iter()
            .map(|c| {
                let mut v = names(&c.victims);
                v.sort();
                (c.name.clone(), v, c.num_pdb_violations)
            })
            .collect();
        got.sort();
        out.push((got, counting.calls.load(AtomicOrdering::SeqCst) - before));
    }
    out
}

#[test]
fn dry_run_finds_candidates_as_kubernetes() {
    let app_foo = |p: Pod| label(p, "app", "foo");
    let five = vec!["node1", "node2", "node3", "node4", "node5"];
    let limit2 = Some(DefaultPreemptionArgs {
        min_candidate_nodes_percentage: 40,
        min_candidate_nodes_absolute: 1,
    });
    let cases = vec![
        DryRunCase {
            name: "a pod that does not fit on any node",
            args: None,
            nodes: vec!["node1", "node2"],
            pods: vec![pod("p", HIGH, NONE)],
            init: vec![("node1", pod("p1", MID, NONE)), ("node2", pod("p2", MID, NONE))],
            filters: vec![Arc::new(Fixed::False)],
            pdbs: vec![],
            fake_code: Code::Success,
            offsets: &[0],
            want: vec![vec![]],
            want_filter_calls: vec![2],
        },
        DryRunCase {
            name: "a pod that fits with no preemption",
            args: None,
            nodes: vec!["node1", "node2"],
            pods: vec![pod("p", HIGH, NONE)],
            init: vec![("node1", pod("p1", MID, NONE)), ("node2", pod("p2", MID, NONE))],
            filters: vec![],
            pdbs: vec![],
            fake_code: Code::Unschedulable,
            offsets: &[0],
            want: vec![vec![]],
            want_filter_calls: vec![2],
        },
        DryRunCase {
            name: "a pod that fits on one node with no preemption",
            args: None,
            nodes: vec!["node1", "node2"],
            pods: vec![pod("node1", HIGH, NONE)],
            init: vec![("node1", pod("p1", MID, NONE)), ("node2", pod("p2", MID, NONE))],
            filters: vec![Arc::new(Fixed::Match)],
            pdbs: vec![],
            fake_code: Code::Unschedulable,
            offsets: &[0],
            want: vec![vec![]],
            want_filter_calls: vec![2],
        },
        DryRunCase {
            name: "a pod that fits on both nodes when lower priority pods are preempted",
            args: None,
            nodes: vec!["node1", "node2"],
            pods: vec![pod("p", HIGH, LARGE)],
            init: vec![("node1", pod("p1", MID, LARGE)), ("node2", pod("p2", MID, LARGE))],
            filters: fit(),
            pdbs: vec![],
            fake_code: Code::Success,
            offsets: &[0],
            want: vec![vec![("node1", vec!["p1"], 0), ("node2", vec!["p2"], 0)]],
            want_filter_calls: vec![4],
        },
        DryRunCase {
            name: "a pod that would fit on the nodes, but other pods running are higher priority, no preemption would happen",
            args: None,
            nodes: vec!["node1", "node2"],
            pods: vec![pod("p", LOW, LARGE)],
            init: vec![("node1", pod("p1", MID, LARGE)), ("node2", pod("p2", MID, LARGE))],
            filters: fit(),
            pdbs: vec![],
            fake_code: Code::Success,
            offsets: &[0],
            want: vec![vec![]],
            want_filter_calls: vec![0],
        },
        DryRunCase {
            name: "medium priority pod is preempted, but lower priority one stays as it is small",
            args: None,
            nodes: vec!["node1", "node2"],
            pods: vec![pod("p", HIGH, LARGE)],
            init: vec![
                ("node1", pod("p1.1", LOW, SMALL)),
                ("node1", pod("p1.2", MID, LARGE)),
                ("node2", pod("p2", MID, LARGE)),
            ],
            filters: fit(),
            pdbs: vec![],
            fake_code: Code::Success,
            offsets: &[0],
            want: vec![vec![("node1", vec!["p1.2"], 0), ("node2", vec!["p2"], 0)]],
            want_filter_calls: vec![5],
        },
        DryRunCase {
            name: "mixed priority pods are preempted",
            args: None,
            nodes: vec!["node1", "node2"],
            pods: vec![pod("p", HIGH, LARGE)],
            init: vec![
                ("node1", pod("p1.1", MID, SMALL)),
                ("node1", pod("p1.2", LOW, SMALL)),
                ("node1", pod("p1.3", MID, MEDIUM)),
                ("node1", pod("p1.4", HIGH, SMALL)),
                ("node2", pod("p2", HIGH, LARGE)),
            ],
            filters: fit(),
            pdbs: vec![],
            fake_code: Code::Success,
            offsets: &[0],
            want: vec![vec![("node1", vec!["p1.2", "p1.3"], 0)]],
            want_filter_calls: vec![4],
        },
        DryRunCase {
            name: "mixed priority pods are preempted, pick later StartTime one when priorities are equal",
            args: None,
            nodes: vec!["node1", "node2"],
            pods: vec![pod("p", HIGH, LARGE)],
            init: vec![
                ("node1", started(pod("p1.1", LOW, SMALL), 5)),
                ("node1", started(pod("p1.2", LOW, SMALL), 4)),
                ("node1", started(pod("p1.3", MID, MEDIUM), 3)),
                ("node1", started(pod("p1.4", HIGH, SMALL), 2)),
                ("node2", started(pod("p2", HIGH, LARGE), 1)),
            ],
            filters: fit(),
            pdbs: vec![],
            fake_code: Code::Success,
            offsets: &[0],
            want: vec![vec![("node1", vec!["p1.1", "p1.3"], 0)]],
            want_filter_calls: vec![4],
        },
        DryRunCase {
            name: "pod with anti-affinity is preempted",
            args: None,
            nodes: vec!["node1", "node2"],
            pods: vec![label(pod("p", HIGH, SMALL), "foo", "")],
            init: vec![
                (
                    "node1",
                    anti_affinity_exists(label(pod("p1.1", LOW, SMALL), "foo", ""), "foo"),
                ),
                ("node1", pod("p1.2", MID, SMALL)),
                ("node1", pod("p1.3", HIGH, SMALL)),
                ("node2", pod("p2", HIGH, SMALL)),
            ],
            filters: vec![Arc::new(Fit), Arc::new(AntiAffinity)],
            pdbs: vec![],
            fake_code: Code::Success,
            offsets: &[0],
            want: vec![vec![("node1", vec!["p1.1"], 0)]],
            want_filter_calls: vec![3],
        },
        DryRunCase {
            name: "get Unschedulable in the preemption phase when the filter plugins filtering the nodes",
            args: None,
            nodes: vec!["node1", "node2"],
            pods: vec![pod("p", HIGH, LARGE)],
            init: vec![("node1", pod("p1", MID, LARGE)), ("node2", pod("p2", MID, LARGE))],
            filters: fit(),
            pdbs: vec![],
            fake_code: Code::Unschedulable,
            offsets: &[0],
            want: vec![vec![]],
            want_filter_calls: vec![2],
        },
        DryRunCase {
            name: "preemption with violation of same pdb",
            args: None,
            nodes: vec!["node1"],
            pods: vec![pod("p", HIGH, VERY_LARGE)],
            init: vec![
                ("node1", app_foo(pod("p1.1", MID, MEDIUM))),
                ("node1", app_foo(pod("p1.2", MID, MEDIUM))),
            ],
            filters: fit(),
            pdbs: vec![pdb("default", &[("app", "foo")], 1, &[])],
            fake_code: Code::Success,
            offsets: &[0],
            want: vec![vec![("node1", vec!["p1.1", "p1.2"], 1)]],
            want_filter_calls: vec![3],
        },
        DryRunCase {
            name: "preemption with violation of the pdb with pod whose eviction was processed, the victim doesn't belong to DisruptedPods",
            args: None,
            nodes: vec!["node1"],
            pods: vec![pod("p", HIGH, VERY_LARGE)],
            init: vec![
                ("node1", app_foo(pod("p1.1", MID, MEDIUM))),
                ("node1", app_foo(pod("p1.2", MID, MEDIUM))),
            ],
            filters: fit(),
            pdbs: vec![pdb("default", &[("app", "foo")], 1, &["p2"])],
            fake_code: Code::Success,
            offsets: &[0],
            want: vec![vec![("node1", vec!["p1.1", "p1.2"], 1)]],
            want_filter_calls: vec![3],
        },
        DryRunCase {
            name: "preemption with violation of the pdb with pod whose eviction was processed, the victim belongs to DisruptedPods",
            args: None,
            nodes: vec!["node1"],
            pods: vec![pod("p", HIGH, VERY_LARGE)],
            init: vec![
                ("node1", app_foo(pod("p1.1", MID, MEDIUM))),
                ("node1", app_foo(pod("p1.2", MID, MEDIUM))),
            ],
            filters: fit(),
            pdbs: vec![pdb("default", &[("app", "foo")], 1, &["p1.2"])],
            fake_code: Code::Success,
            offsets: &[0],
            want: vec![vec![("node1", vec!["p1.1", "p1.2"], 0)]],
            want_filter_calls: vec![3],
        },
        DryRunCase {
            name: "preemption with violation of the pdb with pod whose eviction was processed, the victim which belongs to DisruptedPods is treated as 'nonViolating'",
            args: None,
            nodes: vec!["node1"],
            pods: vec![pod("p", HIGH, VERY_LARGE)],
            init: vec![
                ("node1", app_foo(pod("p1.1", MID, MEDIUM))),
                ("node1", app_foo(pod("p1.2", MID, MEDIUM))),
                ("node1", app_foo(pod("p1.3", MID, MEDIUM))),
            ],
            filters: fit(),
            pdbs: vec![pdb("default", &[("app", "foo")], 1, &["p1.3"])],
            fake_code: Code::Success,
            offsets: &[0],
            want: vec![vec![("node1", vec!["p1.1", "p1.2", "p1.3"], 1)]],
            want_filter_calls: vec![4],
        },
        DryRunCase {
            name: "a PDB of another namespace does not protect the pods",
            args: None,
            nodes: vec!["node1"],
            pods: vec![pod("p", HIGH, VERY_LARGE)],
            init: vec![
                ("node1", app_foo(pod("p1.1", MID, MEDIUM))),
                ("node1", app_foo(pod("p1.2", MID, MEDIUM))),
            ],
            filters: fit(),
            pdbs: vec![pdb("other", &[("app", "foo")], 0, &[])],
            fake_code: Code::Success,
            offsets: &[0],
            want: vec![vec![("node1", vec!["p1.1", "p1.2"], 0)]],
            want_filter_calls: vec![3],
        },
        DryRunCase {
            name: "all nodes are possible candidates, but DefaultPreemptionArgs limits to 2",
            args: limit2,
            nodes: five.clone(),
            pods: vec![pod("p", HIGH, LARGE)],
            init: (1..=5)
                .map(|i| (five[i - 1], pod(["p1", "p2", "p3", "p4", "p5"][i - 1], MID, LARGE)))
                .collect(),
            filters: fit(),
            pdbs: vec![],
            fake_code: Code::Success,
            // cycle 0: offset 4 => node5 (yes), node1 (yes)
            offsets: &[4],
            want: vec![vec![("node1", vec!["p1"], 0), ("node5", vec!["p5"], 0)]],
            want_filter_calls: vec![4],
        },
        DryRunCase {
            name: "some nodes are not possible candidates, DefaultPreemptionArgs limits to 2",
            args: limit2,
            nodes: five.clone(),
            pods: vec![pod("p", HIGH, LARGE)],
            init: vec![
                ("node1", pod("p1", MID, LARGE)),
                ("node2", pod("p2", VERY_HIGH, LARGE)),
                ("node3", pod("p3", MID, LARGE)),
                ("node4", pod("p4", MID, LARGE)),
                ("node5", pod("p5", VERY_HIGH, LARGE)),
            ],
            filters: fit(),
            pdbs: vec![],
            fake_code: Code::Success,
            // offset 4 => node5 (no), node1 (yes), node2 (no), node3 (yes)
            offsets: &[4],
            want: vec![vec![("node1", vec!["p1"], 0), ("node3", vec!["p3"], 0)]],
            want_filter_calls: vec![4],
        },
        DryRunCase {
            name: "preemption offset across multiple scheduling cycles and wrap around",
            args: limit2,
            nodes: five.clone(),
            pods: vec![pod("tp1", HIGH, LARGE), pod("tp2", HIGH, LARGE), pod("tp3", HIGH, LARGE)],
            init: (1..=5)
                .map(|i| (five[i - 1], pod(["p1", "p2", "p3", "p4", "p5"][i - 1], MID, LARGE)))
                .collect(),
            filters: fit(),
            pdbs: vec![],
            fake_code: Code::Success,
            offsets: &[4, 1, 3],
            want: vec![
                vec![("node1", vec!["p1"], 0), ("node5", vec!["p5"], 0)],
                vec![("node2", vec!["p2"], 0), ("node3", vec!["p3"], 0)],
                vec![("node4", vec!["p4"], 0), ("node5", vec!["p5"], 0)],
            ],
            want_filter_calls: vec![4, 4, 4],
        },
        DryRunCase {
            name: "preemption looks past numCandidates until a non-PDB violating node is found",
            args: Some(DefaultPreemptionArgs {
                min_candidate_nodes_percentage: 40,
                min_candidate_nodes_absolute: 2,
            }),
            nodes: five.clone(),
            pods: vec![pod("p", HIGH, LARGE)],
            init: vec![
                ("node1", app_foo(pod("p1", MID, LARGE))),
                ("node2", app_foo(pod("p2", MID, LARGE))),
                ("node3", pod("p3", MID, LARGE)),
                ("node4", pod("p4", MID, LARGE)),
                ("node5", app_foo(pod("p5", MID, LARGE))),
            ],
            filters: fit(),
            pdbs: vec![pdb("default", &[("app", "foo")], 0, &[])],
            fake_code: Code::Success,
            // offset 4 => node5 (yes, pdb), node1 (yes, pdb), node2 (no room left), node3 (yes)
            offsets: &[4],
            want: vec![vec![
                ("node1", vec!["p1"], 1),
                ("node3", vec!["p3"], 0),
                ("node5", vec!["p5"], 1),
            ]],
            want_filter_calls: vec![8],
        },
    ];
    for c in &cases {
        let got = run_dry_run(c);
        for (cycle, (got, calls)) in got.into_iter().enumerate() {
            let want: Vec<(String, Vec<String>, usize)> = c.want[cycle]
                .iter()
                .map(|(n, v, k)| (n.to_string(), v.iter().map(|s| s.to_string()).collect(), *k))
                .collect();
            assert_eq!(got, want, "{} (cycle {cycle})", c.name);
            assert_eq!(
                calls, c.want_filter_calls[cycle],
                "{} (cycle {cycle}): filter calls",
                c.name
            );
        }
    }
}

#[test]
fn dry_run_lists_candidates_without_pdb_violations_first() {
    let c = DryRunCase {
        name: "order",
        args: None,
        nodes: vec!["node1", "node2", "node3"],
        pods: vec![pod("p", HIGH, LARGE)],
        init: vec![
            ("node1", label(pod("p1", MID, LARGE), "app", "foo")),
            ("node2", pod("p2", MID, LARGE)),
            ("node3", label(pod("p3", MID, LARGE), "app", "foo")),
        ],
        filters: fit(),
        pdbs: vec![pdb("default", &[("app", "foo")], 0, &[])],
        fake_code: Code::Success,
        offsets: &[0],
        want: vec![],
        want_filter_calls: vec![],
    };
    let snapshot = cluster(
        c.nodes
            .iter()
            .map(|n| {
                let pods = c
                    .init
                    .iter()
                    .filter(|(m, _)| m == n)
                    .map(|(_, p)| p.clone())
                    .collect();
                (node(n, VERY_LARGE), pods)
            })
            .collect(),
    );
    let fw = framework(vec![], fit());
    let pl = plugin(DefaultPreemptionArgs::default(), c.pdbs.clone());
    let p = PodInfo::new(c.pods[0].clone());
    let dry = pl.dry_run(
        &CycleState::new(),
        &p,
        &fw,
        &snapshot,
        &[0, 1, 2],
        &pl.budgets(&Snapshot::default()),
        0,
        3,
        0,
    );
    let order: Vec<&str> = dry.candidates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(order, ["node2", "node1", "node3"]);
}

// ---- choosing among candidates -------------------------------------------------------------

#[test]
fn best_candidate_is_picked_as_kubernetes() {
    let t = |p: Pod| started(p, 0);
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Vec<&str>, Pod, Vec<(&str, Pod)>, Vec<&str>)> = vec![
        (
            "a pod that fits on both nodes when lower priority pods are preempted",
            vec!["node1", "node2"],
            pod("p", HIGH, LARGE),
            vec![
                ("node1", t(pod("p1", MID, LARGE))),
                ("node2", t(pod("p2", MID, LARGE))),
            ],
            vec!["node1", "node2"],
        ),
        (
            "node with min highest priority pod is picked",
            vec!["node1", "node2", "node3"],
            pod("p", HIGH, VERY_LARGE),
            vec![
                ("node1", t(pod("p1.1", MID, MEDIUM))),
                ("node1", t(pod("p1.2", MID, LARGE))),
                ("node2", t(pod("p2.1", MID, MEDIUM))),
                ("node2", t(pod("p2.2", LOW, MEDIUM))),
                ("node3", t(pod("p3.1", LOW, MEDIUM))),
                ("node3", t(pod("p3.2", LOW, MEDIUM))),
            ],
            vec!["node3"],
        ),
        (
            "when highest priorities are the same, minimum sum of priorities is picked",
            vec!["node1", "node2", "node3"],
            pod("p", HIGH, VERY_LARGE),
            vec![
                ("node1", t(pod("p1.1", MID, MEDIUM))),
                ("node1", t(pod("p1.2", MID, LARGE))),
                ("node2", t(pod("p2.1", MID, LARGE))),
                ("node2", t(pod("p2.2", LOW, MEDIUM))),
                ("node3", t(pod("p3.1", MID, MEDIUM))),
                ("node3", t(pod("p3.2", MID, MEDIUM))),
            ],
            vec!["node2"],
        ),
        (
            "when highest priority and sum are the same, minimum number of pods is picked",
            vec!["node1", "node2", "node3"],
            pod("p", HIGH, VERY_LARGE),
            vec![
                ("node1", t(pod("p1.1", MID, SMALL))),
                ("node1", t(pod("p1.2", NEG, SMALL))),
                ("node1", t(pod("p1.3", MID, SMALL))),
                ("node1", t(pod("p1.4", NEG, SMALL))),
                ("node2", t(pod("p2.1", MID, LARGE))),
                ("node2", t(pod("p2.2", NEG, MEDIUM))),
                ("node3", t(pod("p3.1", MID, MEDIUM))),
                ("node3", t(pod("p3.2", NEG, SMALL))),
                ("node3", t(pod("p3.3", LOW, SMALL))),
            ],
            vec!["node2"],
        ),
        (
            "sum of adjusted priorities is considered",
            vec!["node1", "node2", "node3"],
            pod("p", HIGH, VERY_LARGE),
            vec![
                ("node1", t(pod("p1.1", MID, SMALL))),
                ("node1", t(pod("p1.2", NEG, SMALL))),
                ("node1", t(pod("p1.3", NEG, SMALL))),
                ("node2", t(pod("p2.1", MID, LARGE))),
                ("node2", t(pod("p2.2", NEG, MEDIUM))),
                ("node3", t(pod("p3.1", MID, MEDIUM))),
                ("node3", t(pod("p3.2", NEG, SMALL))),
                ("node3", t(pod("p3.3", LOW, SMALL))),
            ],
            vec!["node2"],
        ),
        (
            "non-overlapping lowest high priority, sum priorities, and number of pods",
            vec!["node1", "node2", "node3", "node4"],
            pod("p", VERY_HIGH, VERY_LARGE),
            vec![
                ("node1", t(pod("p1.1", MID, SMALL))),
                ("node1", t(pod("p1.2", LOW, SMALL))),
                ("node1", t(pod("p1.3", LOW, SMALL))),
                ("node2", t(pod("p2.1", HIGH, LARGE))),
                ("node3", t(pod("p3.1", MID, MEDIUM))),
                ("node3", t(pod("p3.2", LOW, SMALL))),
                ("node3", t(pod("p3.3", LOW, SMALL))),
                ("node3", t(pod("p3.4", LOW, MEDIUM))),
                ("node4", t(pod("p4.1", MID, MEDIUM))),
                ("node4", t(pod("p4.2", MID, SMALL))),
                ("node4", t(pod("p4.3", MID, SMALL))),
                ("node4", t(pod("p4.4", NEG, SMALL))),
            ],
            vec!["node1"],
        ),
        (
            "same priority, same number of victims, different start time for each node's pod",
            vec!["node1", "node2", "node3"],
            pod("p", HIGH, VERY_LARGE),
            vec![
                ("node1", started(pod("p1.1", MID, MEDIUM), 2)),
                ("node1", started(pod("p1.2", MID, MEDIUM), 2)),
                ("node2", started(pod("p2.1", MID, MEDIUM), 3)),
                ("node2", started(pod("p2.2", MID, MEDIUM), 3)),
                ("node3", started(pod("p3.1", MID, MEDIUM), 1)),
                ("node3", started(pod("p3.2", MID, MEDIUM), 1)),
            ],
            vec!["node2"],
        ),
        (
            "same priority, same number of victims, different start time for all pods",
            vec!["node1", "node2", "node3"],
            pod("p", HIGH, VERY_LARGE),
            vec![
                ("node1", started(pod("p1.1", MID, MEDIUM), 4)),
                ("node1", started(pod("p1.2", MID, MEDIUM), 2)),
                ("node2", started(pod("p2.1", MID, MEDIUM), 5)),
                ("node2", started(pod("p2.2", MID, MEDIUM), 1)),
                ("node3", started(pod("p3.1", MID, MEDIUM), 3)),
                ("node3", started(pod("p3.2", MID, MEDIUM), 6)),
            ],
            vec!["node3"],
        ),
        (
            "different priority, same number of victims, different start time for all pods",
            vec!["node1", "node2", "node3"],
            pod("p", HIGH, VERY_LARGE),
            vec![
                ("node1", started(pod("p1.1", LOW, MEDIUM), 4)),
                ("node1", started(pod("p1.2", MID, MEDIUM), 2)),
                ("node2", started(pod("p2.1", MID, MEDIUM), 6)),
                ("node2", started(pod("p2.2", LOW, MEDIUM), 1)),
                ("node3", started(pod("p3.1", LOW, MEDIUM), 3)),
                ("node3", started(pod("p3.2", MID, MEDIUM), 5)),
            ],
            vec!["node2"],
        ),
    ];
    for (name, nodes, p, init, want) in cases {
        let snapshot = cluster(
            nodes
                .iter()
                .map(|n| {
                    let pods = init
                        .iter()
                        .filter(|(m, _)| m == n)
                        .map(|(_, p)| p.clone())
                        .collect();
                    (node(n, VERY_LARGE), pods)
                })
                .collect(),
        );
        let fw = framework(vec![], fit());
        let pl = plugin(DefaultPreemptionArgs::default(), vec![]).with_offset(offsets(&[4]));
        let p = PodInfo::new(p);
        let all: Vec<usize> = (0..snapshot.num_nodes()).collect();
        let (offset, num) = pl.offset_and_num_candidates(all.len());
        let now = now_nanos();
        let dry = pl.dry_run(
            &CycleState::new(),
            &p,
            &fw,
            &snapshot,
            &all,
            &[],
            offset,
            num,
            now,
        );
        assert!(!dry.candidates.is_empty(), "{name}: no candidates");
        let best = select_candidate(dry.candidates, now);
        assert!(
            want.contains(&best.name.as_str()),
            "{name}: got {}, want one of {want:?}",
            best.name
        );
    }
}

#[test]
fn pick_one_node_applies_the_criteria_in_order() {
    let victim = |name: &str, prio: i32, start: i128| {
        Arc::new(PodInfo::new(started(pod(name, prio, NONE), start)))
    };
    let cand = |name: &str, violations: usize, victims: Vec<Arc<PodInfo>>| Candidate {
        node: 0,
        name: name.into(),
        victims,
        num_pdb_violations: violations,
    };
    let pick = |cs: &[Candidate]| cs[pick_one_node_for_preemption(cs, 100)].name.clone();
    // Fewer PDB violations beats lower priorities.
    assert_eq!(
        pick(&[
            cand("a", 1, vec![victim("x", LOW, 1)]),
            cand("b", 0, vec![victim("y", HIGH, 1)])
        ]),
        "b"
    );
    // Then the lowest highest-priority victim.
    assert_eq!(
        pick(&[
            cand("a", 0, vec![victim("x", MID, 1)]),
            cand("b", 0, vec![victim("y", LOW, 1), victim("z", LOW, 1)]),
        ]),
        "b"
    );
    // Then the smallest sum, counting negative priorities as positive (shifted by 2^31).
    assert_eq!(
        pick(&[
            cand(
                "a",
                0,
                vec![
                    victim("x", MID, 1),
                    victim("w", NEG, 1),
                    victim("v", NEG, 1)
                ]
            ),
            cand("b", 0, vec![victim("y", MID, 1), victim("z", NEG, 1)]),
        ]),
        "b"
    );
    // Then the latest start of the highest-priority victims; unstarted counts as now.
    assert_eq!(
        pick(&[
            cand("a", 0, vec![victim("x", MID, 50), victim("w", LOW, 1)]),
            cand("b", 0, vec![victim("y", MID, 40), victim("z", LOW, 99)]),
        ]),
        "a"
    );
    let unstarted = Arc::new(PodInfo::new(pod("u", MID, NONE)));
    assert_eq!(
        pick(&[
            cand("a", 0, vec![victim("x", MID, 99)]),
            cand("b", 0, vec![unstarted])
        ]),
        "b"
    );
    // Complete ties: the first.
    assert_eq!(
        pick(&[
            cand("a", 0, vec![victim("x", MID, 5)]),
            cand("b", 0, vec![victim("y", MID, 5)])
        ]),
        "a"
    );
}

// ---- PDB grouping and messages ---------------------------------------------------------------

#[test]
fn pdb_violation_split_keeps_order_and_counts_budgets() {
    let pods: Vec<Arc<PodInfo>> = vec![
        Arc::new(PodInfo::new(label(pod("a", MID, NONE), "app", "foo"))),
        Arc::new(PodInfo::new(pod("nolabels", MID, NONE))),
        Arc::new(PodInfo::new(label(pod("b", MID, NONE), "app", "foo"))),
        Arc::new(PodInfo::new(label(pod("c", MID, NONE), "app", "foo"))),
    ];
    let mut empty_selector = pdb("default", &[], 0, &[]);
    if let Some(s) = empty_selector.spec.as_mut() {
        s.selector = Some(MetaSelector::default());
    }
    let mut no_selector = pdb("default", &[], 0, &[]);
    if let Some(s) = no_selector.spec.as_mut() {
        s.selector = None;
    }
    let pl = plugin(
        DefaultPreemptionArgs::default(),
        vec![
            pdb("default", &[("app", "foo")], 1, &["c"]),
            empty_selector,
            no_selector,
        ],
    );
    let budgets = pl.budgets(&Snapshot::default());
    assert_eq!(budgets.len(), 2, "a PDB without selector is dropped");
    let (violating, ok) = split_by_pdb_violation(&pods, &budgets);
    assert_eq!(names(&violating), ["b"]);
    assert_eq!(names(&ok), ["a", "nolabels", "c"]);
}

#[test]
fn fit_error_message_counts_reasons_and_absent_nodes() {
    let failed = vec![
        (
            0,
            Status::with_reasons(
                Code::Unschedulable,
                vec!["Insufficient cpu".into(), "Insufficient memory".into()],
            ),
        ),
        (1, Status::unschedulable("Insufficient cpu")),
        (2, Status::unresolvable(REASON_NO_VICTIMS)),
    ];
    assert_eq!(
        fit_error_message(12, &failed),
        "0/12 nodes are available: 1 Insufficient memory, 1 No preemption victims found for incoming pod, 2 Insufficient cpu, 9 Preemption is not helpful for scheduling."
    );
    assert_eq!(
        fit_error_message(1, &[(0, Status::with_reasons(Code::Unschedulable, vec![]))]),
        "0/1 nodes are available:"
    );
    assert_eq!(aggregate(&["x".into(), "x".into()]).as_deref(), Some("x"));
    assert_eq!(
        aggregate(&["x".into(), "y".into()]).as_deref(),
        Some("[x, y]")
    );
}

#[test]
fn no_nodes_is_an_error_and_errors_without_candidates_are_reported() {
    let pl = plugin(DefaultPreemptionArgs::default(), vec![]);
    let fw = framework(vec![], fit());
    let (r, s) = pl.post_filter(
        &CycleState::new(),
        &PodInfo::new(pod("p", HIGH, NONE)),
        &fw,
        &Snapshot::new(),
        &NodeStatuses::default(),
    );
    assert!(r.is_none());
    assert_eq!(
        (s.code, s.message().as_str()),
        (Code::Error, "preemption: no nodes available")
    );

    // Two nodes both failing the extension: one aggregated error.
    let snapshot = cluster(vec![
        (
            node_label(node("node1", LARGE), "error", "true"),
            vec![pod("p1", LOW, NONE)],
        ),
        (
            node_label(node("node2", LARGE), "error", "true"),
            vec![pod("p2", LOW, NONE)],
        ),
    ]);
    let fw = framework(vec![Arc::new(FailingExtensions)], fit());
    let statuses = NodeStatuses {
        by_node: vec![],
        absent: Some(Status::with_reasons(Code::Unschedulable, vec![])),
    };
    let (r, s) = pl.post_filter(
        &CycleState::new(),
        &PodInfo::new(pod("p", HIGH, LARGE)),
        &fw,
        &snapshot,
        &statuses,
    );
    assert!(r.is_none());
    assert_eq!(s.code, Code::Error);
    assert_eq!(
        s.message(),
        "preemption: running RemovePod on PreFilter plugin \"test-plugin\": failed to remove pod: p"
    );
}

#[test]
fn nominated_pods_of_equal_or_higher_priority_keep_their_room() {
    // Evicting p1 frees node1's only pod slot, but a pod of higher priority than the
    // preemptor is nominated there: node1 only helps without that nomination.
    let mut snapshot = cluster(vec![
        (node("node1", &[("pods", "1")]), vec![pod("p1", LOW, NONE)]),
        (
            node("node2", &[("pods", "2")]),
            vec![pod("p2", LOW, NONE), pod("p3", LOW, NONE)],
        ),
    ]);
    let fw = framework(vec![], fit());
    let statuses = NodeStatuses {
        by_node: vec![],
        absent: Some(Status::with_reasons(Code::Unschedulable, vec![])),
    };
    let pl = plugin(DefaultPreemptionArgs::default(), vec![]).with_offset(|_| 0);
    let p = PodInfo::new(pod("p", HIGH, NONE));
    let (r, _) = pl.post_filter(&CycleState::new(), &p, &fw, &snapshot, &statuses);
    assert_eq!(r.and_then(|r| r.nominated_node).as_deref(), Some("node1"));

    let waiting = Arc::new(PodInfo::new(pod("w", VERY_HIGH, NONE)));
    snapshot.nominate(waiting, "node1");
    let (r, s) = pl.post_filter(&CycleState::new(), &p, &fw, &snapshot, &statuses);
    assert!(s.is_success(), "{s:?}");
    let r = r.expect("result");
    assert_eq!(r.nominated_node.as_deref(), Some("node2"));
    assert_eq!(names(&r.victims).len(), 1);

    let lower = Arc::new(PodInfo::new(pod("l", LOW, NONE)));
    snapshot.nominate(lower, "node2");
    assert_eq!(
        names(&lower_priority_nominated_pods(&snapshot, &p, "node2")),
        ["l"]
    );
    assert!(lower_priority_nominated_pods(&snapshot, &p, "node1").is_empty());
}

#[test]
fn pdb_store_follows_informer_events() {
    let store = PdbStore::default();
    let pl = DefaultPreemption::with_store(DefaultPreemptionArgs::default(), store.clone());
    let named = |name: &str, allowed: i32| {
        let mut p = pdb("default", &[("app", "foo")], allowed, &[]);
        p.metadata.name = Some(name.into());
        p
    };
    upsert_pdb(&pl.pdb_store(), named("a", 0));
    upsert_pdb(&store, named("b", 0));
    upsert_pdb(&store, named("a", 5));
    assert_eq!(
        pl.budgets(&Snapshot::default())
            .iter()
            .map(|b| b.disruptions_allowed)
            .collect::<Vec<_>>(),
        [5, 0]
    );
    delete_pdb(&store, "default", "a");
    delete_pdb(&store, "other", "b");
    assert_eq!(pl.budgets(&Snapshot::default()).len(), 1);
    assert!(Arc::ptr_eq(&shared_pdb_store(), &shared_pdb_store()));
}
