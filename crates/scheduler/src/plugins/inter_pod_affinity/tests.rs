//! Kubernetes' `interpodaffinity` unit tests (filtering_test.go, scoring_test.go,
//! plugin_test.go), translated.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Node, Pod, PodAffinity, PodAffinityTerm, PodAntiAffinity, PodSpec,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector as MetaSelector, LabelSelectorRequirement, ObjectMeta,
};
use serde_json::json;

use super::*;
use crate::framework::Code;
use crate::snapshot::testing::node as make_node;

// ----- builders ------------------------------------------------------------------------------

fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

fn sel(reqs: Vec<LabelSelectorRequirement>) -> MetaSelector {
    MetaSelector {
        match_expressions: Some(reqs),
        match_labels: None,
    }
}

fn term(reqs: Vec<LabelSelectorRequirement>, topology: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(sel(reqs)),
        topology_key: topology.into(),
        ..Default::default()
    }
}

fn t_in(key: &str, values: &[&str], topology: &str) -> PodAffinityTerm {
    term(vec![req(key, "In", values)], topology)
}

fn t_not_in(key: &str, values: &[&str], topology: &str) -> PodAffinityTerm {
    term(vec![req(key, "NotIn", values)], topology)
}

fn t_exists(key: &str, topology: &str) -> PodAffinityTerm {
    term(vec![req(key, "Exists", &[])], topology)
}

fn with_ns_selector(mut t: PodAffinityTerm, s: MetaSelector) -> PodAffinityTerm {
    t.namespace_selector = Some(s);
    t
}

fn with_namespaces(mut t: PodAffinityTerm, ns: &[&str]) -> PodAffinityTerm {
    t.namespaces = Some(ns.iter().map(|s| s.to_string()).collect());
    t
}

fn team1() -> MetaSelector {
    sel(vec![req("team", "In", &["team1"])])
}

#[derive(Clone, Default)]
struct PodB {
    name: String,
    ns: String,
    node: String,
    labels: Vec<(String, String)>,
    req_aff: Vec<PodAffinityTerm>,
    req_anti: Vec<PodAffinityTerm>,
    pref_aff: Vec<WeightedPodAffinityTerm>,
    pref_anti: Vec<WeightedPodAffinityTerm>,
}

fn pod() -> PodB {
    PodB::default()
}

impl PodB {
    fn name(mut self, n: &str) -> Self {
        self.name = n.into();
        self
    }
    fn ns(mut self, n: &str) -> Self {
        self.ns = n.into();
        self
    }
    fn node(mut self, n: &str) -> Self {
        self.node = n.into();
        self
    }
    fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.push((k.into(), v.into()));
        self
    }
    fn aff(mut self, t: PodAffinityTerm) -> Self {
        self.req_aff.push(t);
        self
    }
    fn anti(mut self, t: PodAffinityTerm) -> Self {
        self.req_anti.push(t);
        self
    }
    fn pref_aff(mut self, weight: i32, t: PodAffinityTerm) -> Self {
        self.pref_aff.push(WeightedPodAffinityTerm {
            weight,
            pod_affinity_term: t,
        });
        self
    }
    fn pref_anti(mut self, weight: i32, t: PodAffinityTerm) -> Self {
        self.pref_anti.push(WeightedPodAffinityTerm {
            weight,
            pod_affinity_term: t,
        });
        self
    }
    fn obj(self) -> Pod {
        let some = |v: Vec<PodAffinityTerm>| (!v.is_empty()).then_some(v);
        let somew = |v: Vec<WeightedPodAffinityTerm>| (!v.is_empty()).then_some(v);
        let has_aff = !self.req_aff.is_empty() || !self.pref_aff.is_empty();
        let has_anti = !self.req_anti.is_empty() || !self.pref_anti.is_empty();
        Pod {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.ns.clone()),
                uid: Some(format!("uid-{}", self.name)),
                labels: Some(self.labels.iter().cloned().collect()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: (!self.node.is_empty()).then(|| self.node.clone()),
                affinity: (has_aff || has_anti).then(|| Affinity {
                    pod_affinity: has_aff.then(|| PodAffinity {
                        required_during_scheduling_ignored_during_execution: some(self.req_aff),
                        preferred_during_scheduling_ignored_during_execution: somew(self.pref_aff),
                    }),
                    pod_anti_affinity: has_anti.then(|| PodAntiAffinity {
                        required_during_scheduling_ignored_during_execution: some(self.req_anti),
                        preferred_during_scheduling_ignored_during_execution: somew(self.pref_anti),
                    }),
                    node_affinity: None,
                }),
                ..Default::default()
            }),
            status: None,
        }
    }
    fn info(self) -> PodInfo {
        PodInfo::new(self.obj())
    }
}

fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    make_node(name, &[], labels)
}

/// Kubernetes' test namespaces: two per team label.
fn namespaces() -> HashMap<String, BTreeMap<String, String>> {
    let team = |t: &str| BTreeMap::from([("team".to_string(), t.to_string())]);
    HashMap::from([
        ("subteam1.team1".to_string(), team("team1")),
        ("subteam2.team1".to_string(), team("team1")),
        ("subteam1.team2".to_string(), team("team2")),
        ("subteam2.team2".to_string(), team("team2")),
    ])
}

/// A snapshot of the nodes with each pod placed on its `node` (unknown nodes keep the pod aside).
fn snap(nodes: Vec<Node>, pods: Vec<PodB>) -> Snapshot {
    let mut s = Snapshot::new();
    for n in nodes {
        s.upsert_node(n);
    }
    for (i, mut p) in pods.into_iter().enumerate() {
        if p.name.is_empty() {
            p.name = format!("existing-{i}");
        }
        let node = p.node.clone();
        s.add_pod(&node, Arc::new(p.info()));
    }
    s.namespaces = namespaces();
    s
}

fn plugin() -> InterPodAffinity {
    InterPodAffinity::with_args(Args::default())
}

fn ok() -> Status {
    Status::success()
}
fn affinity_fail() -> Status {
    Status::unresolvable(ERR_REASON_AFFINITY)
}
fn anti_fail() -> Status {
    Status::unschedulable(ERR_REASON_ANTI_AFFINITY)
}
fn existing_fail() -> Status {
    Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY)
}

/// PreFilter, then Filter on every node in order; the filter statuses are empty on Skip.
fn run_filter(incoming: PodB, pods: Vec<PodB>, nodes: Vec<Node>) -> (Status, Vec<Status>) {
    let names: Vec<String> = nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap_or_default())
        .collect();
    let s = snap(nodes, pods);
    let p = plugin();
    let pod = incoming.name("incoming").info();
    let mut state = CycleState::new();
    let (_, pre) = p.pre_filter(&mut state, &pod, &s);
    if !pre.is_success() {
        return (pre, Vec::new());
    }
    let statuses: Vec<Status> = names
        .iter()
        .map(|n| p.filter(&state, &pod, s.get(n).expect("node in snapshot")))
        .collect();
    // A node outside the snapshot (looked up by its labels) gets the same verdict.
    for (n, want) in names.iter().zip(&statuses) {
        let outside = detached(s.get(n).expect("node in snapshot"));
        assert_eq!(
            &p.filter(&state, &pod, &outside),
            want,
            "{n} outside the snapshot"
        );
    }
    (pre, statuses)
}

/// A copy of the node that is not (a clone of) the snapshot's.
fn detached(n: &NodeInfo) -> NodeInfo {
    let mut d = NodeInfo::new((*n.node).clone());
    for p in &n.pods {
        d.add_pod(p.clone());
    }
    d
}

// ----- Filter: one node ----------------------------------------------------------------------

fn security_scan() -> PodB {
    pod().label("service", "securityscan").node("node1")
}

#[test]
fn required_affinity_single_node() {
    let node1 = || node("node1", &[("region", "r1"), ("zone", "z11")]);
    let cases: Vec<(&str, PodB, Vec<PodB>, Status, Status)> = vec![
        (
            "a pod without required terms skips the plugin",
            pod(),
            vec![],
            Status::skip(),
            ok(),
        ),
        (
            "affinity In matching the existing pod",
            pod().label("security", "S1").aff(t_in(
                "service",
                &["securityscan", "value2"],
                "region",
            )),
            vec![security_scan()],
            ok(),
            ok(),
        ),
        (
            "affinity NotIn matching the existing pod",
            pod().label("security", "S1").aff(t_not_in(
                "service",
                &["securityscan3", "value3"],
                "region",
            )),
            vec![security_scan()],
            ok(),
            ok(),
        ),
        (
            "affinity does not match a pod in another namespace",
            pod().label("security", "S1").aff(with_namespaces(
                t_in("service", &["securityscan", "value2"], ""),
                &["DiffNameSpace"],
            )),
            vec![pod()
                .ns("ns")
                .label("service", "securityscan")
                .node("node1")],
            ok(),
            affinity_fail(),
        ),
        (
            "affinity selector not matching the existing pod",
            pod().label("service", "securityscan").aff(t_in(
                "service",
                &["antivirusscan", "value2"],
                "",
            )),
            vec![security_scan()],
            ok(),
            affinity_fail(),
        ),
        (
            "several terms with different operators all match",
            pod()
                .label("security", "S1")
                .aff(term(
                    vec![
                        req("service", "Exists", &[]),
                        req("wrongkey", "DoesNotExist", &[]),
                    ],
                    "region",
                ))
                .aff(term(
                    vec![
                        req("service", "In", &["securityscan"]),
                        req("service", "NotIn", &["WrongValue"]),
                    ],
                    "region",
                )),
            vec![security_scan()],
            ok(),
            ok(),
        ),
        (
            "requirements are ANDed: one failing expression fails the term",
            pod()
                .label("security", "S1")
                .aff(term(
                    vec![
                        req("service", "Exists", &[]),
                        req("wrongkey", "DoesNotExist", &[]),
                    ],
                    "region",
                ))
                .aff(term(
                    vec![
                        req("service", "In", &["securityscan2"]),
                        req("service", "NotIn", &["WrongValue"]),
                    ],
                    "region",
                )),
            vec![security_scan()],
            ok(),
            affinity_fail(),
        ),
        (
            "affinity and anti-affinity both satisfied",
            pod()
                .label("security", "S1")
                .aff(t_in("service", &["securityscan", "value2"], "region"))
                .anti(t_in("service", &["antivirusscan", "value2"], "node")),
            vec![security_scan()],
            ok(),
            ok(),
        ),
        (
            "affinity, anti-affinity and the existing pod's anti-affinity satisfied",
            pod()
                .label("security", "S1")
                .aff(t_in("service", &["securityscan", "value2"], "region"))
                .anti(t_in("service", &["antivirusscan", "value2"], "node")),
            vec![security_scan().anti(t_in("service", &["antivirusscan", "value2"], "node"))],
            ok(),
            ok(),
        ),
        (
            "affinity satisfied but anti-affinity not",
            pod()
                .label("security", "S1")
                .aff(t_in("service", &["securityscan", "value2"], "region"))
                .anti(t_in("service", &["securityscan", "value2"], "zone")),
            vec![security_scan()],
            ok(),
            anti_fail(),
        ),
        (
            "the existing pod's anti-affinity rejects the pod",
            pod()
                .label("service", "securityscan")
                .aff(t_in("service", &["securityscan", "value2"], "region"))
                .anti(t_in("service", &["antivirusscan", "value2"], "node")),
            vec![security_scan().anti(t_in("service", &["securityscan", "value2"], "zone"))],
            ok(),
            existing_fail(),
        ),
        (
            "a pod not matching its own affinity term cannot be the first of its set",
            pod().label("service", "securityscan").aff(t_not_in(
                "service",
                &["securityscan", "value2"],
                "region",
            )),
            vec![pod().label("service", "securityscan").node("node2")],
            ok(),
            affinity_fail(),
        ),
        (
            "existing anti-affinity applies to a pod without terms",
            pod().label("service", "securityscan"),
            vec![security_scan().anti(t_in("service", &["securityscan", "value2"], "zone"))],
            ok(),
            existing_fail(),
        ),
        (
            "existing anti-affinity not matching the pod skips the plugin",
            pod().label("service", "securityscan"),
            vec![security_scan().anti(t_not_in("service", &["securityscan", "value2"], "zone"))],
            Status::skip(),
            ok(),
        ),
        (
            "the pod's anti-affinity matches the existing pod though the existing pod's does not",
            pod()
                .label("service", "securityscan")
                .anti(t_exists("service", "region"))
                .anti(t_exists("security", "region")),
            vec![pod()
                .label("security", "S1")
                .node("node1")
                .anti(t_exists("security", "zone"))],
            ok(),
            anti_fail(),
        ),
        (
            "symmetry a1: the incoming pod's anti-affinity is checked first",
            pod()
                .label("service", "securityscan")
                .anti(t_exists("service", "zone"))
                .anti(t_exists("security", "zone")),
            vec![pod()
                .label("security", "S1")
                .node("node1")
                .anti(t_exists("security", "zone"))],
            ok(),
            anti_fail(),
        ),
        (
            "symmetry a2: only the existing pod's anti-affinity matches",
            pod()
                .label("security", "S1")
                .anti(t_exists("security", "zone")),
            vec![pod()
                .label("service", "securityscan")
                .node("node1")
                .anti(t_exists("service", "zone"))
                .anti(t_exists("security", "zone"))],
            ok(),
            existing_fail(),
        ),
        (
            "symmetry b1",
            pod()
                .label("abc", "")
                .label("xyz", "")
                .anti(t_exists("abc", "zone"))
                .anti(t_exists("def", "zone")),
            vec![pod()
                .label("def", "")
                .label("xyz", "")
                .node("node1")
                .anti(t_exists("abc", "zone"))
                .anti(t_exists("def", "zone"))],
            ok(),
            anti_fail(),
        ),
        (
            "symmetry b2",
            pod()
                .label("def", "")
                .label("xyz", "")
                .anti(t_exists("abc", "zone"))
                .anti(t_exists("def", "zone")),
            vec![pod()
                .label("abc", "")
                .label("xyz", "")
                .node("node1")
                .anti(t_exists("abc", "zone"))
                .anti(t_exists("def", "zone"))],
            ok(),
            anti_fail(),
        ),
        (
            "affinity with a matching namespace selector",
            pod().label("security", "S1").aff(with_ns_selector(
                t_in("service", &["securityscan", "value2"], "region"),
                team1(),
            )),
            vec![security_scan().ns("subteam1.team1")],
            ok(),
            ok(),
        ),
        (
            "affinity with a non-matching namespace selector",
            pod().label("security", "S1").aff(with_ns_selector(
                t_in("service", &["securityscan", "value2"], "region"),
                team1(),
            )),
            vec![security_scan().ns("subteam1.team2")],
            ok(),
            affinity_fail(),
        ),
        (
            "anti-affinity with a matching namespace selector",
            pod()
                .ns("subteam1.team1")
                .label("security", "S1")
                .anti(with_ns_selector(
                    t_in("service", &["securityscan", "value2"], "zone"),
                    team1(),
                )),
            vec![security_scan().ns("subteam2.team1")],
            ok(),
            anti_fail(),
        ),
        (
            "anti-affinity with an empty namespace selector matches all namespaces",
            pod()
                .ns("subteam1.team1")
                .label("security", "S1")
                .anti(with_ns_selector(
                    t_in("service", &["securityscan", "value2"], "zone"),
                    MetaSelector::default(),
                )),
            vec![security_scan().ns("subteam2.team1")],
            ok(),
            anti_fail(),
        ),
        (
            "anti-affinity with a non-matching namespace selector",
            pod()
                .ns("subteam1.team1")
                .label("security", "S1")
                .anti(with_ns_selector(
                    t_in("service", &["securityscan", "value2"], "zone"),
                    team1(),
                )),
            vec![security_scan().ns("subteam1.team2")],
            ok(),
            ok(),
        ),
    ];
    for (name, incoming, pods, want_pre, want) in cases {
        let (pre, got) = run_filter(incoming, pods, vec![node1()]);
        assert_eq!(pre, want_pre, "{name}: PreFilter");
        if pre.is_success() {
            assert_eq!(got, vec![want], "{name}: Filter");
        }
    }
}

#[test]
fn invalid_affinity_term_fails_pre_filter() {
    let (pre, _) = run_filter(
        pod()
            .label("service", "securityscan")
            .aff(t_in("service", &["{{.bad-value.}}"], "region"))
            .aff(t_in("service", &["antivirusscan", "value2"], "node")),
        vec![],
        vec![node("node1", &[("region", "r1")])],
    );
    assert_eq!(pre.code, Code::UnschedulableAndUnresolvable);
    assert!(
        pre.message().starts_with("parsing pod: "),
        "{}",
        pre.message()
    );
}

#[test]
fn filter_without_pre_filter_state_is_an_error() {
    let s = snap(vec![node("n", &[])], vec![]);
    let st = plugin().filter(&CycleState::new(), &pod().info(), s.get("n").expect("node"));
    assert_eq!(st.code, Code::Error);
    assert_eq!(
        st.message(),
        "error reading \"PreFilterInterPodAffinity\" from cycleState: not found"
    );
}

// ----- Filter: several nodes -----------------------------------------------------------------

#[test]
fn required_affinity_multiple_nodes() {
    let china = [("region", "China")];
    let china_az1 = [("region", "China"), ("az", "az1")];
    let india = [("region", "India")];
    let rzh = |n: &str, z: &str| node(n, &[("region", "r1"), ("zone", z), ("hostname", n)]);
    type Case = (
        &'static str,
        PodB,
        Vec<PodB>,
        Vec<Node>,
        Status,
        Vec<Status>,
    );
    let cases: Vec<Case> = vec![
        (
            "all nodes sharing the topology value of a matching pod fit",
            pod().aff(t_in("foo", &["bar"], "region")),
            vec![pod().name("p1").node("node1").label("foo", "bar")],
            vec![
                node("node1", &china),
                node("node2", &china_az1),
                node("node3", &india),
            ],
            ok(),
            vec![ok(), ok(), affinity_fail()],
        ),
        (
            "the first pod of a collection matching its own terms may go anywhere",
            pod()
                .label("foo", "bar")
                .label("service", "securityscan")
                .aff(t_in("foo", &["bar"], "zone"))
                .aff(t_in("service", &["securityscan"], "zone")),
            vec![pod().name("p1").node("nodeA").label("foo", "bar")],
            vec![
                node("nodeA", &[("zone", "az1"), ("hostname", "h1")]),
                node("nodeB", &[("zone", "az2"), ("hostname", "h2")]),
            ],
            ok(),
            vec![ok(), ok()],
        ),
        (
            "the first pod of a collection still needs the topology keys",
            pod()
                .label("foo", "bar")
                .label("service", "securityscan")
                .aff(t_in("foo", &["bar"], "zone"))
                .aff(t_in("service", &["securityscan"], "zone")),
            vec![pod().name("p1").node("nodeA").label("foo", "bar")],
            vec![
                node("nodeA", &[("zoneLabel", "az1"), ("hostname", "h1")]),
                node("nodeB", &[("zoneLabel", "az2"), ("hostname", "h2")]),
            ],
            ok(),
            vec![affinity_fail(), affinity_fail()],
        ),
        (
            "anti-affinity rejects every node in the matching pod's region",
            pod().anti(t_in("foo", &["abc"], "region")),
            vec![pod().node("nodeA").label("foo", "abc")],
            vec![
                node("nodeA", &[("region", "r1"), ("hostname", "nodeA")]),
                node("nodeB", &[("region", "r1"), ("hostname", "nodeB")]),
            ],
            ok(),
            vec![anti_fail(), anti_fail()],
        ),
        (
            "any matching anti-affinity term rejects",
            pod().anti(t_in("foo", &["abc"], "region")).anti(t_in(
                "service",
                &["securityscan"],
                "zone",
            )),
            vec![pod()
                .node("nodeA")
                .label("foo", "abc")
                .label("service", "securityscan")],
            vec![
                node(
                    "nodeA",
                    &[("region", "r1"), ("zone", "z1"), ("hostname", "nodeA")],
                ),
                node(
                    "nodeB",
                    &[("region", "r1"), ("zone", "z2"), ("hostname", "nodeB")],
                ),
            ],
            ok(),
            vec![anti_fail(), anti_fail()],
        ),
        (
            "anti-affinity leaves other regions",
            pod().anti(t_in("foo", &["abc"], "region")),
            vec![pod().node("nodeA").label("foo", "abc")],
            vec![
                node("nodeA", &china),
                node("nodeB", &china_az1),
                node("nodeC", &india),
            ],
            ok(),
            vec![anti_fail(), anti_fail(), ok()],
        ),
        (
            "an existing pod's anti-affinity in another namespace does not apply",
            pod()
                .ns("NS1")
                .label("foo", "123")
                .anti(t_in("foo", &["bar"], "region")),
            vec![
                pod().node("nodeA").ns("NS1").label("foo", "bar"),
                pod()
                    .node("nodeC")
                    .ns("NS2")
                    .anti(t_in("foo", &["123"], "region")),
            ],
            vec![
                node("nodeA", &china),
                node("nodeB", &china_az1),
                node("nodeC", &india),
            ],
            ok(),
            vec![anti_fail(), anti_fail(), ok()],
        ),
        (
            "an existing pod's term with a topology key no node has matches nothing",
            pod().label("foo", ""),
            vec![pod()
                .node("nodeA")
                .anti(t_exists("foo", "invalid-node-label"))],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z1")],
            Status::skip(),
            vec![],
        ),
        (
            "the incoming pod's term needs its topology key too",
            pod()
                .node("nodeA")
                .anti(t_exists("foo", "invalid-node-label")),
            vec![pod().node("nodeA").label("foo", "")],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z1")],
            ok(),
            vec![ok(), ok()],
        ),
        (
            "existing pods' anti-affinity rejects on all nodes",
            pod().label("foo", "").label("bar", ""),
            vec![
                pod().node("nodeA").anti(t_exists("foo", "zone")),
                pod().node("nodeA").anti(t_exists("bar", "region")),
            ],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(),
            vec![existing_fail(), existing_fail()],
        ),
        (
            "the incoming pod's anti-affinity rejects when any term matches somewhere",
            pod()
                .anti(t_exists("foo", "zone"))
                .anti(t_exists("bar", "region")),
            vec![
                pod().node("nodeA").label("foo", ""),
                pod().node("nodeB").label("bar", ""),
            ],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(),
            vec![anti_fail(), anti_fail()],
        ),
        (
            "existing term with an unknown topology key: only the other term counts",
            pod().label("foo", "").label("bar", ""),
            vec![pod()
                .node("nodeA")
                .anti(t_exists("foo", "invalid-node-label"))
                .anti(t_exists("bar", "zone"))],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(),
            vec![existing_fail(), ok()],
        ),
        (
            "incoming term with an unknown topology key: only the other term counts",
            pod()
                .anti(t_exists("foo", "invalid-node-label"))
                .anti(t_exists("bar", "zone")),
            vec![pod()
                .name("podA")
                .node("nodeA")
                .label("foo", "")
                .label("bar", "")],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(),
            vec![anti_fail(), ok()],
        ),
        (
            "existing terms with valid keys reject both nodes",
            pod().label("foo", "").label("bar", ""),
            vec![pod()
                .node("nodeA")
                .anti(t_exists("foo", "region"))
                .anti(t_exists("bar", "zone"))],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(),
            vec![existing_fail(), existing_fail()],
        ),
        (
            "incoming terms with valid keys reject both nodes",
            pod()
                .anti(t_exists("foo", "region"))
                .anti(t_exists("bar", "zone")),
            vec![pod().node("nodeA").label("foo", "").label("bar", "")],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(),
            vec![anti_fail(), anti_fail()],
        ),
        (
            "existing pods on two nodes leave only the third",
            pod().label("foo", "").label("bar", ""),
            vec![
                pod()
                    .node("nodeA")
                    .anti(t_exists("foo", "zone"))
                    .anti(t_exists("labelA", "zone")),
                pod()
                    .node("nodeB")
                    .anti(t_exists("bar", "zone"))
                    .anti(t_exists("labelB", "zone")),
            ],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2"), rzh("nodeC", "z3")],
            ok(),
            vec![existing_fail(), existing_fail(), ok()],
        ),
        (
            "affinity terms all matched by one pod",
            pod()
                .aff(t_exists("foo", "region"))
                .aff(t_exists("bar", "zone")),
            vec![pod()
                .name("pod1")
                .node("nodeA")
                .label("foo", "")
                .label("bar", "")],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z1")],
            ok(),
            vec![ok(), ok()],
        ),
        (
            "affinity terms must be matched by the same pod",
            pod()
                .aff(t_exists("foo", "region"))
                .aff(t_exists("bar", "zone")),
            vec![
                pod().name("pod1").node("nodeA").label("foo", ""),
                pod().name("pod2").node("nodeB").label("bar", ""),
            ],
            vec![rzh("nodeA", "z1"), rzh("nodeB", "z2")],
            ok(),
            vec![affinity_fail(), affinity_fail()],
        ),
    ];
    for (name, incoming, pods, nodes, want_pre, want) in cases {
        let (pre, got) = run_filter(incoming, pods, nodes);
        assert_eq!(pre, want_pre, "{name}: PreFilter");
        if pre.is_success() {
            assert_eq!(got, want, "{name}: Filter");
        }
    }
}

// ----- PreFilter counts, AddPod and RemovePod ------------------------------------------------

fn counts(pairs: &[(&str, &str, i64)]) -> TopologyCounts {
    let mut c = TopologyCounts::default();
    for (k, v, n) in pairs {
        c.add(k, v, *n);
    }
    c
}

fn pre_filter_state(incoming: &PodInfo, s: &Snapshot) -> CycleState {
    let mut state = CycleState::new();
    let (_, st) = plugin().pre_filter(&mut state, incoming, s);
    assert!(st.is_success(), "{st:?}");
    state
}

fn read(state: &CycleState) -> &PreFilterState {
    state
        .read::<PreFilterState>(PRE_FILTER_KEY)
        .expect("pre-filter state")
}

#[test]
fn incoming_affinity_and_anti_affinity_counts() {
    let node_a = || node("nodeA", &[("hostname", "nodeA")]);
    let normal = |labels: &[&str]| {
        labels
            .iter()
            .fold(pod().name("normal").node("nodeA"), |p, l| p.label(l, ""))
    };
    let cases: Vec<(&str, Vec<PodB>, PodB, TopologyCounts, TopologyCounts)> = vec![
        (
            "no pod violates the incoming pod's terms",
            vec![normal(&["bbb"])],
            pod()
                .aff(t_exists("aaa", "hostname"))
                .anti(t_exists("aaa", "hostname")),
            counts(&[]),
            counts(&[]),
        ),
        (
            "the existing pod matches both single terms",
            vec![normal(&["aaa"])],
            pod()
                .aff(t_exists("aaa", "hostname"))
                .anti(t_exists("aaa", "hostname")),
            counts(&[("hostname", "nodeA", 1)]),
            counts(&[("hostname", "nodeA", 1)]),
        ),
        (
            "affinity is counted once per term",
            vec![normal(&["aaa", "bbb"])],
            pod()
                .aff(t_exists("aaa", "hostname"))
                .aff(t_exists("bbb", "hostname"))
                .anti(t_exists("aaa", "hostname")),
            counts(&[("hostname", "nodeA", 2)]),
            counts(&[("hostname", "nodeA", 1)]),
        ),
        (
            "affinity needs all terms, anti-affinity any",
            vec![normal(&["aaa"])],
            pod()
                .aff(t_exists("aaa", "hostname"))
                .aff(t_exists("bbb", "hostname"))
                .anti(t_exists("aaa", "hostname"))
                .anti(t_exists("bbb", "hostname")),
            counts(&[]),
            counts(&[("hostname", "nodeA", 1)]),
        ),
        (
            "partial match of anti-affinity terms",
            vec![normal(&["aaa", "bbb"])],
            pod()
                .aff(t_exists("aaa", "hostname"))
                .aff(t_exists("ccc", "hostname"))
                .anti(t_exists("aaa", "hostname"))
                .anti(t_exists("ccc", "hostname")),
            counts(&[]),
            counts(&[("hostname", "nodeA", 1)]),
        ),
    ];
    for (name, pods, incoming, want_aff, want_anti) in cases {
        let s = snap(vec![node_a()], pods);
        let state = pre_filter_state(&incoming.name("in").info(), &s);
        assert_eq!(read(&state).affinity, want_aff, "{name}: affinity");
        assert_eq!(
            read(&state).anti_affinity,
            want_anti,
            "{name}: anti-affinity"
        );
    }
}

#[test]
fn add_and_remove_pod_update_the_state() {
    let label1 = [("region", "r1"), ("zone", "z11")];
    let label2 = [("region", "r1"), ("zone", "z12")];
    let label3 = [("region", "r2"), ("zone", "z21")];
    let nodes = || {
        vec![
            node("nodeA", &label1),
            node("nodeB", &label2),
            node("nodeC", &label3),
        ]
    };
    let anti_foo_bar = || t_in("foo", &["bar"], "region");
    let complex = || {
        vec![
            t_in("foo", &["bar", "buzz"], "region"),
            t_not_in("service", &["bar", "security", "test"], "zone"),
        ]
    };
    let with_anti =
        |p: PodB, terms: Vec<PodAffinityTerm>| terms.into_iter().fold(p, |p, t| p.anti(t));
    let with_aff =
        |p: PodB, terms: Vec<PodAffinityTerm>| terms.into_iter().fold(p, |p, t| p.aff(t));
    type Case = (
        &'static str,
        PodB,
        Vec<PodB>,
        PodB,
        TopologyCounts,
        TopologyCounts,
    );
    let cases: Vec<Case> = vec![
        (
            "anti-affinity counts follow an added pod",
            pod()
                .name("pending")
                .label("foo", "bar")
                .anti(anti_foo_bar()),
            vec![
                pod().name("p1").label("foo", "bar").node("nodeA"),
                pod().name("p2").node("nodeC").anti(anti_foo_bar()),
            ],
            pod()
                .name("addedPod")
                .label("foo", "bar")
                .node("nodeB")
                .anti(anti_foo_bar()),
            counts(&[("region", "r1", 2)]),
            counts(&[]),
        ),
        (
            "complex anti-affinity counts follow an added pod",
            with_anti(pod().name("pending").label("foo", "bar"), complex()),
            vec![
                pod().name("p1").label("foo", "bar").node("nodeA"),
                pod().name("p2").node("nodeC").anti(anti_foo_bar()),
            ],
            with_anti(
                pod().name("addedPod").label("foo", "bar").node("nodeA"),
                complex(),
            ),
            counts(&[("region", "r1", 2), ("zone", "z11", 2), ("zone", "z21", 1)]),
            counts(&[]),
        ),
        (
            "affinity counts follow an added pod",
            with_aff(pod().name("pending").label("foo", "bar"), complex()),
            vec![
                pod().name("p1").label("foo", "bar").node("nodeA"),
                with_aff(
                    pod().name("p2").node("nodeC").anti(anti_foo_bar()),
                    complex(),
                ),
            ],
            with_anti(
                pod().name("addedPod").label("foo", "bar").node("nodeA"),
                complex(),
            ),
            counts(&[]),
            counts(&[("region", "r1", 2), ("zone", "z11", 2)]),
        ),
    ];
    for (name, pending, existing, added, want_anti, want_aff) in cases {
        let pending = pending.info();
        let mut all = existing.clone();
        all.push(added.clone());
        let all_state = pre_filter_state(&pending, &snap(nodes(), all));

        let s = snap(nodes(), existing);
        let mut state = pre_filter_state(&pending, &s);
        let original = read(&state).clone();
        let node_name = added.node.clone();
        let added = added.info();
        let node_info = s.get(&node_name).expect("node");
        let p = plugin();
        assert!(p
            .add_pod(&mut state, &pending, &added, node_info, &s)
            .is_success());
        let got = read(&state).clone();
        assert_eq!(got.anti_affinity, want_anti, "{name}: anti-affinity");
        assert_eq!(got.affinity, want_aff, "{name}: affinity");
        let want = read(&all_state);
        assert_eq!(
            got.anti_affinity, want.anti_affinity,
            "{name}: as if present"
        );
        assert_eq!(got.affinity, want.affinity, "{name}: as if present");
        assert_eq!(
            got.existing_anti_affinity, want.existing_anti_affinity,
            "{name}: as if present"
        );

        assert!(p
            .remove_pod(&mut state, &pending, &added, node_info, &s)
            .is_success());
        let back = read(&state);
        assert_eq!(
            back.anti_affinity, original.anti_affinity,
            "{name}: removed"
        );
        assert_eq!(back.affinity, original.affinity, "{name}: removed");
        assert_eq!(
            back.existing_anti_affinity, original.existing_anti_affinity,
            "{name}: removed"
        );
    }
}

#[test]
fn preemption_removing_the_blocking_pod_makes_the_node_fit() {
    let s = snap(
        vec![node("n1", &[("zone", "a")]), node("n2", &[("zone", "a")])],
        vec![pod().name("victim").node("n1").label("app", "db")],
    );
    let incoming = pod().name("in").anti(t_in("app", &["db"], "zone")).info();
    let p = plugin();
    let mut state = pre_filter_state(&incoming, &s);
    let n1 = s.get("n1").expect("n1");
    assert_eq!(p.filter(&state, &incoming, n1), anti_fail());
    let victim = s.get("n1").expect("n1").pods[0].clone();
    assert!(p
        .remove_pod(&mut state, &incoming, &victim, n1, &s)
        .is_success());
    assert_eq!(p.filter(&state, &incoming, n1), ok());
    assert_eq!(p.filter(&state, &incoming, s.get("n2").expect("n2")), ok());
}

// ----- Score ---------------------------------------------------------------------------------

/// PreScore on all nodes, Score each in order, NormalizeScore.
fn run_score(
    args: Args,
    incoming: PodB,
    pods: Vec<PodB>,
    nodes: Vec<Node>,
) -> Result<Vec<i64>, Status> {
    let names: Vec<String> = nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap_or_default())
        .collect();
    let s = snap(nodes, pods);
    let p = InterPodAffinity::with_args(args);
    let pod = incoming.name("incoming").info();
    let infos: Vec<&NodeInfo> = names.iter().filter_map(|n| s.get(n)).collect();
    let mut state = CycleState::new();
    let st = p.pre_score(&mut state, &pod, &infos, &s);
    if !st.is_success() {
        return Err(st);
    }
    let mut scores = Vec::new();
    for n in &names {
        let idx = s.index_of(n).expect("index");
        let score = p.score(&state, &pod, &s.nodes()[idx])?;
        let outside = p.score(&state, &pod, &detached(&s.nodes()[idx]))?;
        assert_eq!(outside, score, "{n} outside the snapshot");
        scores.push(NodeScore { node: idx, score });
    }
    let st = p.normalize(&state, &pod, &mut scores);
    assert!(st.is_success(), "{st:?}");
    Ok(scores.into_iter().map(|s| s.score).collect())
}

fn s1() -> PodB {
    pod().label("security", "S1")
}
fn s2() -> PodB {
    pod().label("security", "S2")
}
fn stay_with_s1_in_region(p: PodB) -> PodB {
    p.pref_aff(5, t_in("security", &["S1"], "region"))
}
fn stay_with_s2_in_region(p: PodB) -> PodB {
    p.pref_aff(6, t_in("security", &["S2"], "region"))
}
fn affinity3(p: PodB) -> PodB {
    p.pref_aff(
        8,
        term(
            vec![
                req("security", "NotIn", &["S1"]),
                req("security", "In", &["S2"]),
            ],
            "region",
        ),
    )
    .pref_aff(
        2,
        term(
            vec![
                req("security", "Exists", &[]),
                req("wrongkey", "DoesNotExist", &[]),
            ],
            "region",
        ),
    )
}
fn hard_affinity(p: PodB) -> PodB {
    p.aff(t_in("security", &["S1", "value2"], "region"))
        .aff(term(
            vec![
                req("security", "Exists", &[]),
                req("wrongkey", "DoesNotExist", &[]),
            ],
            "region",
        ))
}
fn away_from_s1_in_az(p: PodB) -> PodB {
    p.pref_anti(5, t_in("security", &["S1"], "az"))
}
fn away_from_s2_in_az(p: PodB) -> PodB {
    p.pref_anti(5, t_in("security", &["S2"], "az"))
}
fn stay_s1_region_away_s2_az(p: PodB) -> PodB {
    p.pref_aff(8, t_in("security", &["S1"], "region"))
        .pref_anti(5, t_in("security", &["S2"], "az"))
}
fn ns_selector_term() -> PodAffinityTerm {
    with_ns_selector(
        with_namespaces(t_in("security", &["S1"], "region"), &["subteam2.team2"]),
        team1(),
    )
}

#[test]
fn preferred_affinity_scores() {
    let china = [("region", "China")];
    let india = [("region", "India")];
    let az1 = [("az", "az1")];
    let az2 = [("az", "az2")];
    let china_az1 = [("region", "China"), ("az", "az1")];
    let n = |name: &str, l: &[(&str, &str)]| node(name, l);
    let three = || vec![n("node1", &china), n("node2", &india), n("node3", &az1)];
    type Case = (
        &'static str,
        PodB,
        Vec<PodB>,
        Vec<Node>,
        Result<Vec<i64>, Code>,
    );
    let cases: Vec<Case> = vec![
        (
            "no affinity anywhere skips",
            s1(),
            vec![],
            three(),
            Err(Code::Skip),
        ),
        (
            "affinity: matching pod in the topology scores highest",
            stay_with_s1_in_region(s1()),
            vec![s1().node("node1"), s2().node("node2"), s1().node("node3")],
            three(),
            Ok(vec![100, 0, 0]),
        ),
        (
            "affinity: nodes sharing the topology value score the same",
            stay_with_s1_in_region(pod()),
            vec![s1().node("node1")],
            vec![
                n("node1", &china),
                n("node2", &china_az1),
                n("node3", &india),
            ],
            Ok(vec![100, 100, 0]),
        ),
        (
            "affinity: the region with more matches wins",
            stay_with_s2_in_region(s1()),
            vec![
                s2().node("node1"),
                s2().node("node1"),
                s2().node("node2"),
                s2().node("node3"),
                s2().node("node4"),
                s2().node("node5"),
            ],
            vec![
                n("node1", &china),
                n("node2", &india),
                n("node3", &china),
                n("node4", &china),
                n("node5", &india),
            ],
            Ok(vec![100, 0, 100, 100, 0]),
        ),
        (
            "affinity: different operators, some failing",
            affinity3(s1()),
            vec![s1().node("node1"), s2().node("node2"), s1().node("node3")],
            three(),
            Ok(vec![20, 100, 0]),
        ),
        (
            "affinity symmetry: existing pods' preferred terms",
            s2(),
            vec![
                stay_with_s1_in_region(s1().node("node1")),
                stay_with_s2_in_region(s2().node("node2")),
            ],
            three(),
            Ok(vec![0, 100, 0]),
        ),
        (
            "affinity symmetry with a namespace selector",
            s1().ns("subteam1.team1"),
            vec![
                s1().node("node1").pref_aff(5, ns_selector_term()),
                stay_with_s2_in_region(s2().node("node2")),
            ],
            three(),
            Ok(vec![100, 0, 0]),
        ),
        (
            "anti-affinity symmetry with a namespace selector",
            s1().ns("subteam1.team1"),
            vec![
                s1().node("node1").pref_anti(5, ns_selector_term()),
                stay_with_s2_in_region(s2().node("node2")),
            ],
            three(),
            Ok(vec![0, 100, 100]),
        ),
        (
            "affinity symmetry: existing pods' required terms with the hard weight",
            s1(),
            vec![
                hard_affinity(s1().node("node1")),
                hard_affinity(s2().node("node2")),
            ],
            three(),
            Ok(vec![100, 100, 0]),
        ),
        (
            "anti-affinity: node with a matching pod scores low",
            away_from_s1_in_az(s1()),
            vec![s1().node("node1"), s2().node("node2")],
            vec![n("node1", &az1), n("node2", &china)],
            Ok(vec![0, 100]),
        ),
        (
            "anti-affinity: node without the topology key scores high",
            away_from_s1_in_az(s1()),
            vec![s1().node("node1"), s1().node("node2")],
            vec![n("node1", &az1), n("node2", &china)],
            Ok(vec![0, 100]),
        ),
        (
            "anti-affinity: more matching pods score lower",
            away_from_s1_in_az(s1()),
            vec![s1().node("node1"), s1().node("node1"), s2().node("node2")],
            vec![n("node1", &az1), n("node2", &india)],
            Ok(vec![0, 100]),
        ),
        (
            "anti-affinity symmetry",
            s2(),
            vec![
                away_from_s2_in_az(s1().node("node1")),
                away_from_s1_in_az(s2().node("node2")),
            ],
            vec![n("node1", &az1), n("node2", &az2)],
            Ok(vec![0, 100]),
        ),
        (
            "affinity and anti-affinity",
            stay_s1_region_away_s2_az(s1()),
            vec![s1().node("node1"), s1().node("node2")],
            vec![n("node1", &china), n("node2", &az1)],
            Ok(vec![100, 0]),
        ),
        (
            "affinity and anti-affinity with pods of the same labels",
            stay_s1_region_away_s2_az(s1()),
            vec![
                s1().node("node1"),
                s1().node("node1"),
                s1().node("node2"),
                s1().node("node3"),
                s1().node("node3"),
                s1().node("node4"),
                s1().node("node5"),
            ],
            vec![
                n("node1", &china_az1),
                n("node2", &india),
                n("node3", &china),
                n("node4", &china),
                n("node5", &india),
            ],
            Ok(vec![100, 0, 100, 100, 0]),
        ),
        (
            "affinity, anti-affinity and symmetry together",
            stay_s1_region_away_s2_az(s1()),
            vec![
                s1().node("node1"),
                s2().node("node2"),
                stay_s1_region_away_s2_az(pod().node("node3")),
                away_from_s1_in_az(pod().node("node4")),
            ],
            vec![
                n("node1", &china),
                n("node2", &az1),
                n("node3", &india),
                n("node4", &az2),
            ],
            Ok(vec![100, 0, 100, 0]),
        ),
        (
            "only some nodes of a topology have pods with affinity",
            s1(),
            vec![
                s1().node("node1"),
                stay_s1_region_away_s2_az(pod().node("node2")),
            ],
            vec![n("node1", &china), n("node2", &china)],
            Ok(vec![0, 0]),
        ),
        (
            "affinity with pods matching the namespace selector",
            s1().ns("subteam1.team1").pref_aff(5, ns_selector_term()),
            vec![
                s1().node("node1").ns("subteam1.team1"),
                s1().node("node1").ns("subteam1.team1"),
                s1().node("node1").ns("subteam1.team2"),
                s1().node("node2").ns("subteam2.team1"),
            ],
            vec![n("node1", &china), n("node2", &india)],
            Ok(vec![100, 0]),
        ),
        (
            "affinity with pods matching the namespace selector and the namespaces",
            s1().ns("subteam1.team1").pref_aff(5, ns_selector_term()),
            vec![
                s1().node("node1").ns("subteam1.team1"),
                s1().node("node1").ns("subteam1.team1"),
                s1().node("node1").ns("subteam2.team2"),
                s1().node("node2").ns("subteam2.team1"),
            ],
            vec![n("node1", &china), n("node2", &india)],
            Ok(vec![100, 0]),
        ),
        (
            "anti-affinity with pods matching the namespace selector",
            s1().ns("subteam1.team1").pref_anti(5, ns_selector_term()),
            vec![
                s1().node("node1").ns("subteam1.team1"),
                s1().node("node1").ns("subteam1.team1"),
                s1().node("node1").ns("subteam1.team2"),
                s1().node("node2").ns("subteam2.team1"),
            ],
            vec![n("node1", &china), n("node2", &india)],
            Ok(vec![0, 100]),
        ),
        (
            "preferred terms of existing pods are used by default",
            s2(),
            vec![
                stay_s1_region_away_s2_az(s1().node("node1")),
                stay_with_s2_in_region(s2().node("node2")),
            ],
            vec![n("node1", &china), n("node2", &india)],
            Ok(vec![0, 100]),
        ),
        (
            "no nodes to score skips",
            s2(),
            vec![],
            vec![],
            Err(Code::Skip),
        ),
    ];
    for (name, incoming, pods, nodes, want) in cases {
        let got = run_score(Args::default(), incoming, pods, nodes).map_err(|s| s.code);
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn ignoring_preferred_terms_of_existing_pods_skips_pods_without_terms() {
    let args = Args {
        hard_pod_affinity_weight: 1,
        ignore_preferred_terms_of_existing_pods: true,
    };
    let got = run_score(
        args,
        s2(),
        vec![
            stay_s1_region_away_s2_az(s1().node("node1")),
            stay_with_s2_in_region(s2().node("node2")),
        ],
        vec![
            node("node1", &[("region", "China")]),
            node("node2", &[("region", "India")]),
        ],
    );
    assert_eq!(got.map_err(|s| s.code), Err(Code::Skip));
}

#[test]
fn invalid_preferred_terms_fail_pre_score() {
    for incoming in [
        pod().pref_aff(8, t_in("security", &["{{.bad-value.}}"], "region")),
        pod().pref_anti(5, t_in("security", &["{{.bad-value.}}"], "az")),
    ] {
        let got = run_score(
            Args::default(),
            incoming,
            vec![],
            vec![
                node("node1", &[("region", "China")]),
                node("node2", &[("region", "China")]),
            ],
        );
        assert_eq!(got.map_err(|s| s.code), Err(Code::Error));
    }
}

#[test]
fn hard_pod_affinity_weight_scores_existing_required_terms() {
    let hard = |p: PodB| {
        p.aff(with_ns_selector(
            with_namespaces(t_in("service", &["S1"], "region"), &["", "subteam2.team2"]),
            team1(),
        ))
    };
    let nodes = || {
        vec![
            node("node1", &[("region", "China")]),
            node("node2", &[("region", "India")]),
            node("node3", &[("az", "az1")]),
        ]
    };
    let existing = || vec![hard(pod().node("node1")), hard(pod().node("node2"))];
    type Case = (&'static str, &'static str, i32, Result<Vec<i64>, Code>);
    let cases: Vec<Case> = vec![
        ("default weight", "", 1, Ok(vec![100, 100, 0])),
        ("zero weight", "", 0, Err(Code::Skip)),
        (
            "no matching namespace",
            "subteam1.team2",
            1,
            Err(Code::Skip),
        ),
        (
            "matching namespace selector",
            "subteam1.team1",
            1,
            Ok(vec![100, 100, 0]),
        ),
        (
            "matching namespaces",
            "subteam2.team2",
            1,
            Ok(vec![100, 100, 0]),
        ),
    ];
    for (name, ns, weight, want) in cases {
        let args = Args {
            hard_pod_affinity_weight: weight,
            ignore_preferred_terms_of_existing_pods: false,
        };
        let got = run_score(
            args,
            pod().ns(ns).label("service", "S1"),
            existing(),
            nodes(),
        );
        assert_eq!(got.map_err(|s| s.code), want, "{name}");
    }
}

// ----- args, events, hints -------------------------------------------------------------------

#[test]
fn args_defaults_and_validation() {
    assert_eq!(Args::parse(&Value::Null), Ok(Args::default()));
    assert_eq!(
        Args::parse(
            &json!({"hardPodAffinityWeight": 0, "ignorePreferredTermsOfExistingPods": true})
        ),
        Ok(Args {
            hard_pod_affinity_weight: 0,
            ignore_preferred_terms_of_existing_pods: true
        })
    );
    assert_eq!(
        Args::parse(&json!({"hardPodAffinityWeight": 110})),
        Err("hardPodAffinityWeight: Invalid value: 110: not in valid range [0, 100]".to_string())
    );
    assert_eq!(
        Args::parse(&json!({"hardPodAffinityWeight": -1})),
        Err("hardPodAffinityWeight: Invalid value: -1: not in valid range [0, 100]".to_string())
    );
    assert!(
        Args::parse(&json!({"kind": "InterPodAffinityArgs", "hardPodAffinityWeight": 100})).is_ok()
    );
    assert!(Args::parse(&json!({"unknown": 1})).is_err());
    assert!(new(&json!({"hardPodAffinityWeight": 101})).is_err());
}

#[test]
fn hints_follow_the_changed_pod() {
    let p = plugin();
    let incoming = pod()
        .aff(t_in("app", &["web"], "zone"))
        .anti(t_in("app", &["db"], "zone"))
        .info();
    let web = pod().name("w").node("n1").label("app", "web").info();
    let db = pod().name("d").node("n1").label("app", "db").info();
    let unscheduled_web = pod().name("u").label("app", "web").info();
    assert!(p.hint(&incoming, ClusterEvent::PodAdd, Some(&web)));
    assert!(!p.hint(&incoming, ClusterEvent::PodAdd, Some(&db)));
    assert!(!p.hint(&incoming, ClusterEvent::PodAdd, Some(&unscheduled_web)));
    assert!(p.hint(&incoming, ClusterEvent::PodDelete, Some(&db)));
    assert!(!p.hint(&incoming, ClusterEvent::PodDelete, Some(&web)));
    assert!(p.hint(&incoming, ClusterEvent::NodeAdd, None));
    let plain = pod().info();
    assert!(!p.hint(&plain, ClusterEvent::PodAdd, Some(&web)));
    assert!(p.events().contains(&ClusterEvent::PodDelete));
}

// ----- Against a direct computation ----------------------------------------------------------

type Pairs = BTreeMap<(String, String), i64>;

/// PreFilter's counts computed pod by pod over every node, as Kubernetes does.
fn direct_counts(incoming: &PodInfo, s: &Snapshot) -> (Pairs, Pairs, Pairs) {
    let ns_labels = s.namespace_labels(incoming.namespace());
    let affinity: Vec<AffinityTerm> = incoming
        .required_affinity
        .iter()
        .map(|t| merge_namespaces(t, s))
        .collect();
    let anti: Vec<AffinityTerm> = incoming
        .required_anti_affinity
        .iter()
        .map(|t| merge_namespaces(t, s))
        .collect();
    let (mut existing, mut aff, mut anti_counts) = (Pairs::new(), Pairs::new(), Pairs::new());
    for node in s.nodes() {
        let labels = node.labels();
        let bump = |m: &mut Pairs, key: &str| {
            if let Some(v) = labels.get(key) {
                *m.entry((key.to_string(), v.clone())).or_insert(0) += 1;
            }
        };
        for p in &node.pods {
            for t in &p.required_anti_affinity {
                if term_matches(t, incoming, ns_labels) {
                    bump(&mut existing, &t.topology_key);
                }
            }
            if matches_all(&affinity, p) {
                for t in &affinity {
                    bump(&mut aff, &t.topology_key);
                }
            }
            for t in &anti {
                if term_matches(t, p, None) {
                    bump(&mut anti_counts, &t.topology_key);
                }
            }
        }
    }
    (existing, aff, anti_counts)
}

/// Summed preferred-term weights per topology pair, pod by pod over every node.
fn direct_scores(incoming: &PodInfo, s: &Snapshot, hard_weight: i64) -> Option<Pairs> {
    let ns_labels = s.namespace_labels(incoming.namespace());
    let merge = |terms: &[WeightedAffinityTerm]| -> Vec<(AffinityTerm, i64)> {
        terms
            .iter()
            .map(|w| (merge_namespaces(&w.term, s), i64::from(w.weight)))
            .collect()
    };
    let (pref, pref_anti) = (
        merge(&incoming.preferred_affinity),
        merge(&incoming.preferred_anti_affinity),
    );
    let mut scores = Pairs::new();
    let mut touched = false;
    for node in s.nodes() {
        let labels = node.labels();
        let mut add = |key: &str, w: i64| {
            if let Some(v) = labels.get(key) {
                touched = true;
                *scores.entry((key.to_string(), v.clone())).or_insert(0) += w;
            }
        };
        for p in &node.pods {
            for (t, w) in &pref {
                if term_matches(t, p, None) {
                    add(&t.topology_key, *w);
                }
            }
            for (t, w) in &pref_anti {
                if term_matches(t, p, None) {
                    add(&t.topology_key, -*w);
                }
            }
            if hard_weight > 0 {
                for t in &p.required_affinity {
                    if term_matches(t, incoming, ns_labels) {
                        add(&t.topology_key, hard_weight);
                    }
                }
            }
            for w in &p.preferred_affinity {
                if term_matches(&w.term, incoming, ns_labels) {
                    add(&w.term.topology_key, i64::from(w.weight));
                }
            }
            for w in &p.preferred_anti_affinity {
                if term_matches(&w.term, incoming, ns_labels) {
                    add(&w.term.topology_key, -i64::from(w.weight));
                }
            }
        }
    }
    touched.then_some(scores)
}

/// A random pod of a small vocabulary of labels, namespaces and terms.
fn random_pod(rng: &mut rand::rngs::SmallRng, name: &str, node: &str) -> PodB {
    use rand::Rng;
    let namespaces = ["subteam1.team1", "subteam2.team1", "subteam1.team2"];
    let keys = ["zone", "region", "hostname", "missing"];
    let mut p = pod()
        .name(name)
        .ns(namespaces[rng.random_range(0..namespaces.len())])
        .node(node);
    for k in ["app", "tier"] {
        if rng.random_range(0..3) != 0 {
            p = p.label(k, &format!("v{}", rng.random_range(0..3)));
        }
    }
    let random_term = |rng: &mut rand::rngs::SmallRng| {
        let key = keys[rng.random_range(0..keys.len())];
        let t = match rng.random_range(0..4) {
            0 => t_exists("app", key),
            1 => t_not_in("tier", &["v0"], key),
            _ => t_in("app", &[&format!("v{}", rng.random_range(0..3))], key),
        };
        match rng.random_range(0..5) {
            0 => with_ns_selector(t, team1()),
            1 => with_namespaces(t, &["subteam1.team1", "subteam1.team2"]),
            _ => t,
        }
    };
    for _ in 0..rng.random_range(0..2) {
        p = p.aff(random_term(rng));
    }
    for _ in 0..rng.random_range(0..3) {
        p = p.anti(random_term(rng));
    }
    for _ in 0..rng.random_range(0..2) {
        let w = rng.random_range(1..100);
        p = p.pref_aff(w, random_term(rng));
    }
    for _ in 0..rng.random_range(0..2) {
        let w = rng.random_range(1..100);
        p = p.pref_anti(w, random_term(rng));
    }
    p
}

#[test]
fn counts_and_scores_equal_a_pod_by_pod_computation() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(42);
    // How many compared counts and scores were not empty: the cases must exercise them.
    let (mut counted, mut scored) = (0, 0);
    for round in 0..40 {
        let mut nodes = Vec::new();
        for i in 0..rng.random_range(1..8) {
            let name = format!("n{i}");
            let zone = format!("z{}", rng.random_range(0..3));
            let mut labels = vec![("zone", zone.as_str()), ("hostname", name.as_str())];
            if rng.random_range(0..3) != 0 {
                labels.push(("region", "r1"));
            }
            nodes.push(node(&name, &labels));
        }
        let n = nodes.len();
        let pods: Vec<PodB> = (0..rng.random_range(0..25))
            .map(|i| {
                let on = format!("n{}", rng.random_range(0..n + 1));
                random_pod(&mut rng, &format!("p{i}"), &on)
            })
            .collect();
        let s = snap(nodes, pods);
        for k in 0..5 {
            let incoming = random_pod(&mut rng, &format!("in{k}"), "").info();
            let case = format!("round {round} incoming {k}");

            let (want_existing, want_aff, want_anti) = direct_counts(&incoming, &s);
            let mut state = CycleState::new();
            let (_, st) = plugin().pre_filter(&mut state, &incoming, &s);
            if st.code == Code::Skip {
                assert!(want_existing.is_empty(), "{case}: skipped with counts");
                assert!(incoming.required_affinity.is_empty());
                assert!(incoming.required_anti_affinity.is_empty());
            } else {
                assert!(st.is_success(), "{case}: {st:?}");
                let got = read(&state);
                counted += usize::from(!want_existing.is_empty())
                    + usize::from(!want_aff.is_empty())
                    + usize::from(!want_anti.is_empty());
                assert_eq!(got.existing_anti_affinity.pairs(), want_existing, "{case}");
                assert_eq!(got.affinity.pairs(), want_aff, "{case}");
                assert_eq!(got.anti_affinity.pairs(), want_anti, "{case}");
            }

            for hard_weight in [0, 1, 7] {
                let args = Args {
                    hard_pod_affinity_weight: hard_weight,
                    ignore_preferred_terms_of_existing_pods: false,
                };
                let p = InterPodAffinity::with_args(args);
                let infos: Vec<&NodeInfo> = s.nodes().iter().collect();
                let mut state = CycleState::new();
                let st = p.pre_score(&mut state, &incoming, &infos, &s);
                let want = direct_scores(&incoming, &s, i64::from(hard_weight));
                match want {
                    None => assert_eq!(st.code, Code::Skip, "{case}: {st:?}"),
                    Some(want) => {
                        assert!(st.is_success(), "{case}: {st:?}");
                        let got = state
                            .read::<PreScoreState>(PRE_SCORE_KEY)
                            .expect("pre-score state");
                        scored += usize::from(!want.is_empty());
                        assert_eq!(got.scores.pairs(), want, "{case} weight {hard_weight}");
                    }
                }
            }
        }
    }
    assert!(
        counted > 100 && scored > 100,
        "{counted} counts, {scored} scores"
    );
}
