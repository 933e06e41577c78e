//! Kubernetes' `podtopologyspread` unit tests (filtering_test.go, scoring_test.go,
//! plugin_test.go), translated.

use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodSpec, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector as MetaSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference, Time,
};
use serde_json::json;

use super::*;
use crate::framework::Code;
use crate::snapshot::testing::node as make_node;

// ----- builders ------------------------------------------------------------------------------

fn exists(key: &str) -> MetaSelector {
    MetaSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: key.into(),
            operator: "Exists".into(),
            values: None,
        }]),
        match_labels: None,
    }
}

fn foo() -> Option<MetaSelector> {
    Some(exists("foo"))
}

fn bar() -> Option<MetaSelector> {
    Some(exists("bar"))
}

fn labels_sel(pairs: &[(&str, &str)]) -> Option<MetaSelector> {
    Some(MetaSelector {
        match_labels: Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        match_expressions: None,
    })
}

/// A constraint: maxSkew, key, action, selector, then minDomains, nodeAffinityPolicy,
/// nodeTaintsPolicy and matchLabelKeys via the `with_*` helpers.
fn spread(
    max_skew: i32,
    key: &str,
    action: &str,
    selector: Option<MetaSelector>,
) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew,
        topology_key: key.into(),
        when_unsatisfiable: action.into(),
        label_selector: selector,
        ..Default::default()
    }
}

fn hard(max_skew: i32, key: &str, selector: Option<MetaSelector>) -> TopologySpreadConstraint {
    spread(max_skew, key, DO_NOT_SCHEDULE, selector)
}

fn soft(max_skew: i32, key: &str, selector: Option<MetaSelector>) -> TopologySpreadConstraint {
    spread(max_skew, key, SCHEDULE_ANYWAY, selector)
}

fn min_domains(mut c: TopologySpreadConstraint, n: i32) -> TopologySpreadConstraint {
    c.min_domains = Some(n);
    c
}

fn affinity_policy(mut c: TopologySpreadConstraint, p: &str) -> TopologySpreadConstraint {
    c.node_affinity_policy = Some(p.into());
    c
}

fn taints_policy(mut c: TopologySpreadConstraint, p: &str) -> TopologySpreadConstraint {
    c.node_taints_policy = Some(p.into());
    c
}

fn label_keys(mut c: TopologySpreadConstraint, keys: &[&str]) -> TopologySpreadConstraint {
    c.match_label_keys = Some(keys.iter().map(|s| s.to_string()).collect());
    c
}

#[derive(Clone, Default)]
struct PodB {
    pod: Pod,
}

fn pod(name: &str) -> PodB {
    PodB {
        pod: Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: None,
        },
    }
}

impl PodB {
    fn spec(&mut self) -> &mut PodSpec {
        self.pod.spec.get_or_insert_with(PodSpec::default)
    }
    fn ns(mut self, ns: &str) -> Self {
        self.pod.metadata.namespace = Some(ns.into());
        self
    }
    fn label(mut self, k: &str, v: &str) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(k.into(), v.into());
        self
    }
    fn node(mut self, n: &str) -> Self {
        self.spec().node_name = Some(n.into());
        self
    }
    fn c(mut self, c: TopologySpreadConstraint) -> Self {
        self.spec()
            .topology_spread_constraints
            .get_or_insert_with(Vec::new)
            .push(c);
        self
    }
    fn node_selector(mut self, k: &str, v: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(Default::default)
            .insert(k.into(), v.into());
        self
    }
    fn node_affinity(mut self, key: &str, op: &str, values: &[&str]) -> Self {
        self.spec().affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: key.into(),
                            operator: op.into(),
                            values: Some(values.iter().map(|s| s.to_string()).collect()),
                        }]),
                        match_fields: None,
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        self
    }
    fn tolerate(mut self, key: &str) -> Self {
        self.spec()
            .tolerations
            .get_or_insert_with(Vec::new)
            .push(Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            });
        self
    }
    fn terminating(mut self) -> Self {
        self.pod.metadata.deletion_timestamp = Some(Time(Default::default()));
        self
    }
    fn owner(mut self, api_version: &str, kind: &str, name: &str) -> Self {
        self.pod
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: name.into(),
                controller: Some(true),
                ..Default::default()
            });
        self
    }
    fn info(self) -> PodInfo {
        PodInfo::new(self.pod)
    }
}

/// A node with labels; `tainted` adds the `node.kubernetes.io/unschedulable:NoSchedule` taint.
fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    make_node(name, &[], labels)
}

fn tainted(mut n: Node) -> Node {
    n.spec.get_or_insert_with(Default::default).taints = Some(vec![Taint {
        key: "node.kubernetes.io/unschedulable".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    }]);
    n
}

fn zn(name: &str, zone: &str) -> Node {
    node(name, &[("zone", zone), ("node", name)])
}

fn four_nodes() -> Vec<Node> {
    vec![
        zn("node-a", "zone1"),
        zn("node-b", "zone1"),
        zn("node-x", "zone2"),
        zn("node-y", "zone2"),
    ]
}

/// `p-<node letter><n>` pods with label foo on the nodes.
fn foo_pods(spec: &[(&str, usize)]) -> Vec<PodB> {
    let mut out = Vec::new();
    for (node, n) in spec {
        let letter = node.trim_start_matches("node-");
        for i in 1..=*n {
            out.push(pod(&format!("p-{letter}{i}")).node(node).label("foo", ""));
        }
    }
    out
}

fn snap(nodes: Vec<Node>, pods: Vec<PodB>) -> Snapshot {
    let mut s = Snapshot::new();
    for n in nodes {
        s.upsert_node(n);
    }
    for p in pods {
        let info = p.info();
        let node = info.node_name().to_string();
        s.add_pod(&node, Arc::new(info));
    }
    s
}

fn list_plugin() -> PodTopologySpread {
    PodTopologySpread::with_args(
        Args {
            default_constraints: Vec::new(),
            system_defaulted: false,
        },
        Arc::new(OwnerSelectors::new()),
    )
}

fn system_plugin() -> PodTopologySpread {
    PodTopologySpread::with_args(Args::default(), Arc::new(OwnerSelectors::new()))
}

fn service(selector: &[(&str, &str)]) -> OwnerSelector {
    OwnerSelector::Service {
        namespace: "default".into(),
        selector: selector
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

// ----- PreFilter state -----------------------------------------------------------------------

/// Counts per constraint, sorted by topology value.
type Counts = Vec<Vec<(&'static str, i64)>>;

fn sorted_counts(s: &PreFilterState) -> Vec<Vec<(String, i64)>> {
    s.counts
        .iter()
        .map(|m| {
            let mut v: Vec<(String, i64)> = m
                .iter()
                .map(|(id, n)| (m.name(id).to_string(), n))
                .collect();
            v.sort();
            v
        })
        .collect()
}

fn owned(c: &Counts) -> Vec<Vec<(String, i64)>> {
    c.iter()
        .map(|v| v.iter().map(|(k, n)| (k.to_string(), *n)).collect())
        .collect()
}

/// The critical paths with values of equal counts in name order (as Kubernetes compares them).
fn normalized_paths(s: &PreFilterState) -> Vec<[(String, i64); 2]> {
    s.paths
        .iter()
        .zip(&s.counts)
        .map(|(p, c)| {
            let name = |id: u32| c.name(id).to_string();
            let mut p = [(name(p.0[0].0), p.0[0].1), (name(p.0[1].0), p.0[1].1)];
            if p[0].1 == p[1].1 && p[0].0 > p[1].0 {
                let first = p[0].0.clone();
                p[0].0 = std::mem::replace(&mut p[1].0, first);
            }
            p
        })
        .collect()
}

fn paths(list: &[[(&str, i64); 2]]) -> Vec<[(String, i64); 2]> {
    list.iter()
        .map(|[a, b]| [(a.0.to_string(), a.1), (b.0.to_string(), b.1)])
        .collect()
}

const NONE: (&str, i64) = ("", NO_MATCH_NUM);

fn pre_filter(p: &PodTopologySpread, incoming: &PodInfo, s: &Snapshot) -> (Status, CycleState) {
    let mut state = CycleState::new();
    let (_, st) = p.pre_filter(&mut state, incoming, s);
    (st, state)
}

fn read(state: &CycleState) -> &PreFilterState {
    state
        .read::<PreFilterState>(PRE_FILTER_KEY)
        .expect("pre-filter state")
}

#[test]
fn pre_filter_state_counts_matching_pods_per_domain() {
    type Case = (
        &'static str,
        PodB,
        Vec<Node>,
        Vec<PodB>,
        Counts,
        Vec<[(&'static str, i64); 2]>,
    );
    let cases: Vec<Case> = vec![
        (
            "clean cluster with one constraint",
            pod("p")
                .label("foo", "")
                .c(hard(5, "zone", labels_sel(&[("foo", "bar")]))),
            four_nodes(),
            vec![],
            vec![vec![("zone1", 0), ("zone2", 0)]],
            vec![[("zone1", 0), ("zone2", 0)]],
        ),
        (
            "one constraint",
            pod("p").label("foo", "").c(hard(1, "zone", foo())),
            four_nodes(),
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-y", 2)]),
            vec![vec![("zone1", 3), ("zone2", 2)]],
            vec![[("zone2", 2), ("zone1", 3)]],
        ),
        (
            "null label selector matches nothing",
            pod("p").label("foo", "").c(hard(1, "zone", None)),
            four_nodes(),
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-y", 2)]),
            vec![vec![("zone1", 0), ("zone2", 0)]],
            vec![[("zone1", 0), ("zone2", 0)]],
        ),
        (
            "one constraint on a 3-zone cluster",
            pod("p").label("foo", "").c(hard(1, "zone", foo())),
            vec![
                zn("node-a", "zone1"),
                zn("node-b", "zone1"),
                zn("node-x", "zone2"),
                zn("node-y", "zone2"),
                zn("node-o", "zone3"),
                zn("node-p", "zone3"),
            ],
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-y", 2)]),
            vec![vec![("zone1", 3), ("zone2", 2), ("zone3", 0)]],
            vec![[("zone3", 0), ("zone2", 2)]],
        ),
        (
            "pods of other namespaces do not count",
            pod("p").label("foo", "").c(hard(1, "zone", foo())),
            four_nodes(),
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-a2").ns("ns1").node("node-a").label("foo", ""),
                pod("p-b1").node("node-b").label("foo", ""),
                pod("p-y1").ns("ns2").node("node-y").label("foo", ""),
                pod("p-y2").node("node-y").label("foo", ""),
            ],
            vec![vec![("zone1", 2), ("zone2", 1)]],
            vec![[("zone2", 1), ("zone1", 2)]],
        ),
        (
            "two constraints",
            pod("p")
                .label("foo", "")
                .c(hard(1, "zone", foo()))
                .c(hard(1, "node", foo())),
            four_nodes(),
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-y", 4)]),
            vec![
                vec![("zone1", 3), ("zone2", 4)],
                vec![("node-a", 2), ("node-b", 1), ("node-x", 0), ("node-y", 4)],
            ],
            vec![[("zone1", 3), ("zone2", 4)], [("node-x", 0), ("node-b", 1)]],
        ),
        (
            "soft constraints are left to scoring",
            pod("p")
                .label("foo", "")
                .c(soft(1, "zone", foo()))
                .c(hard(1, "zone", foo()))
                .c(soft(1, "node", foo()))
                .c(hard(1, "node", foo())),
            vec![
                zn("node-a", "zone1"),
                zn("node-b", "zone1"),
                zn("node-y", "zone2"),
            ],
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-y", 4)]),
            vec![
                vec![("zone1", 3), ("zone2", 4)],
                vec![("node-a", 2), ("node-b", 1), ("node-y", 4)],
            ],
            vec![[("zone1", 3), ("zone2", 4)], [("node-b", 1), ("node-a", 2)]],
        ),
        (
            "different label selectors",
            pod("p")
                .label("foo", "")
                .label("bar", "")
                .c(hard(1, "zone", foo()))
                .c(hard(1, "node", bar())),
            vec![
                zn("node-a", "zone1"),
                zn("node-b", "zone1"),
                zn("node-y", "zone2"),
            ],
            vec![
                pod("p-a").node("node-a").label("foo", ""),
                pod("p-b").node("node-b").label("bar", ""),
            ],
            vec![
                vec![("zone1", 1), ("zone2", 0)],
                vec![("node-a", 0), ("node-b", 1), ("node-y", 0)],
            ],
            vec![[("zone2", 0), ("zone1", 1)], [("node-a", 0), ("node-y", 0)]],
        ),
        (
            "the pod's required node affinity excludes nodes",
            pod("p")
                .label("foo", "")
                .node_affinity("node", "NotIn", &["node-x"])
                .c(hard(1, "zone", foo()))
                .c(hard(1, "node", foo())),
            four_nodes(),
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-y", 4)]),
            vec![
                vec![("zone1", 3), ("zone2", 4)],
                vec![("node-a", 2), ("node-b", 1), ("node-y", 4)],
            ],
            vec![[("zone1", 3), ("zone2", 4)], [("node-b", 1), ("node-a", 2)]],
        ),
        (
            "nodeAffinityPolicy Ignore counts nodes outside the node selector",
            pod("p")
                .label("foo", "")
                .node_selector("foo", "")
                .c(affinity_policy(hard(1, "node", bar()), "Ignore")),
            vec![
                node("node-a", &[("node", "node-a"), ("foo", "")]),
                node("node-b", &[("node", "node-b"), ("foo", "")]),
                node("node-c", &[("node", "node-c"), ("bar", "")]),
            ],
            vec![
                pod("p-a").node("node-a").label("bar", ""),
                pod("p-b").node("node-b").label("bar", ""),
                pod("p-c").node("node-b").label("bar", ""),
                pod("p-d").node("node-c"),
            ],
            vec![vec![("node-a", 1), ("node-b", 2), ("node-c", 0)]],
            vec![[("node-c", 0), ("node-a", 1)]],
        ),
        (
            "nodeAffinityPolicy Honor (default) skips nodes outside the node selector",
            pod("p")
                .label("foo", "")
                .node_selector("foo", "")
                .c(hard(1, "node", bar())),
            vec![
                node("node-a", &[("node", "node-a"), ("foo", "")]),
                node("node-b", &[("node", "node-b"), ("foo", "")]),
                node("node-c", &[("node", "node-c"), ("bar", "")]),
            ],
            vec![
                pod("p-a").node("node-a").label("bar", ""),
                pod("p-b").node("node-b").label("bar", ""),
                pod("p-c").node("node-b").label("bar", ""),
                pod("p-d").node("node-c"),
            ],
            vec![vec![("node-a", 1), ("node-b", 2)]],
            vec![[("node-a", 1), ("node-b", 2)]],
        ),
        (
            "nodeAffinityPolicy Honor with node affinity",
            pod("p")
                .label("foo", "")
                .node_affinity("foo", "In", &[""])
                .c(hard(1, "node", bar())),
            vec![
                node("node-a", &[("node", "node-a"), ("foo", "")]),
                node("node-b", &[("node", "node-b"), ("foo", "")]),
                node("node-c", &[("node", "node-c"), ("bar", "")]),
            ],
            vec![
                pod("p-a").node("node-a").label("bar", ""),
                pod("p-c").node("node-b").label("bar", ""),
                pod("p-d").node("node-b").label("bar", ""),
                pod("p-e").node("node-c"),
            ],
            vec![vec![("node-a", 1), ("node-b", 2)]],
            vec![[("node-a", 1), ("node-b", 2)]],
        ),
        (
            "nodeTaintsPolicy Ignore (default) counts tainted nodes",
            pod("p").label("foo", "").c(hard(1, "node", bar())),
            vec![
                node("node-a", &[("node", "node-a")]),
                node("node-b", &[("node", "node-b")]),
                tainted(node("node-c", &[("node", "node-c"), ("bar", "")])),
            ],
            vec![
                pod("p-a").node("node-a").label("bar", ""),
                pod("p-b").node("node-b").label("bar", ""),
                pod("p-c").node("node-b").label("bar", ""),
                pod("p-d").node("node-c"),
            ],
            vec![vec![("node-a", 1), ("node-b", 2), ("node-c", 0)]],
            vec![[("node-c", 0), ("node-a", 1)]],
        ),
        (
            "nodeTaintsPolicy Honor skips untolerated tainted nodes",
            pod("p")
                .label("foo", "")
                .c(taints_policy(hard(1, "node", bar()), "Honor")),
            vec![
                node("node-a", &[("node", "node-a")]),
                node("node-b", &[("node", "node-b")]),
                tainted(node("node-c", &[("node", "node-c"), ("bar", "")])),
            ],
            vec![
                pod("p-a").node("node-a").label("bar", ""),
                pod("p-b").node("node-b").label("bar", ""),
                pod("p-c").node("node-b").label("bar", ""),
                pod("p-d").node("node-c"),
            ],
            vec![vec![("node-a", 1), ("node-b", 2)]],
            vec![[("node-a", 1), ("node-b", 2)]],
        ),
        (
            "nodeTaintsPolicy Honor counts tolerated tainted nodes",
            pod("p")
                .label("foo", "")
                .tolerate("node.kubernetes.io/unschedulable")
                .c(taints_policy(hard(1, "node", bar()), "Honor")),
            vec![
                node("node-a", &[("node", "node-a")]),
                node("node-b", &[("node", "node-b")]),
                tainted(node("node-c", &[("node", "node-c"), ("bar", "")])),
            ],
            vec![
                pod("p-a").node("node-a").label("bar", ""),
                pod("p-b").node("node-b").label("bar", ""),
                pod("p-c").node("node-b").label("bar", ""),
                pod("p-d").node("node-c"),
            ],
            vec![vec![("node-a", 1), ("node-b", 2), ("node-c", 0)]],
            vec![[("node-c", 0), ("node-a", 1)]],
        ),
        (
            "two constraints with different inclusion policies",
            pod("p")
                .label("foo", "")
                .node_selector("foo", "")
                .c(affinity_policy(hard(1, "zone", foo()), "Ignore"))
                .c(taints_policy(hard(1, "node", foo()), "Honor")),
            vec![
                zn("node-a", "zone1"),
                tainted(node(
                    "node-b",
                    &[("zone", "zone1"), ("node", "node-b"), ("foo", "")],
                )),
                node(
                    "node-x",
                    &[("zone", "zone2"), ("node", "node-x"), ("foo", "")],
                ),
                node(
                    "node-y",
                    &[("zone", "zone2"), ("node", "node-y"), ("foo", "")],
                ),
            ],
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-a2").node("node-a").label("foo", ""),
                pod("p-x1").node("node-x").label("foo", ""),
                pod("p-x2").node("node-x").label("foo", ""),
                pod("p-y1").node("node-y").label("foo", ""),
            ],
            vec![
                vec![("zone1", 2), ("zone2", 3)],
                vec![("node-x", 2), ("node-y", 1)],
            ],
            vec![[("zone1", 2), ("zone2", 3)], [("node-y", 1), ("node-x", 2)]],
        ),
        (
            "matchLabelKeys ANDed with a non-empty selector",
            pod("p")
                .label("foo", "")
                .label("bar", "a")
                .c(label_keys(hard(1, "zone", foo()), &["bar"])),
            four_nodes(),
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-a2")
                    .node("node-a")
                    .label("foo", "")
                    .label("bar", "a"),
                pod("p-b1").node("node-b").label("foo", ""),
                pod("p-y1")
                    .node("node-y")
                    .label("foo", "")
                    .label("bar", "a"),
                pod("p-y2").node("node-y").label("bar", ""),
            ],
            vec![vec![("zone1", 1), ("zone2", 1)]],
            vec![[("zone1", 1), ("zone2", 1)]],
        ),
        (
            "matchLabelKeys ANDed with an empty selector",
            pod("p").label("foo", "a").c(label_keys(
                hard(1, "zone", Some(MetaSelector::default())),
                &["foo"],
            )),
            four_nodes(),
            vec![
                pod("p-a1").node("node-a").label("foo", "a"),
                pod("p-a2").node("node-a").label("foo", "a"),
                pod("p-b1").node("node-b").label("foo", "a"),
                pod("p-y1").node("node-y").label("foo", "a"),
                pod("p-y2").node("node-y").label("foo", "a"),
            ],
            vec![vec![("zone1", 3), ("zone2", 2)]],
            vec![[("zone2", 2), ("zone1", 3)]],
        ),
        (
            "matchLabelKeys ignored with a null selector",
            pod("p")
                .label("foo", "")
                .label("bar", "x")
                .c(label_keys(hard(1, "zone", None), &["bar"])),
            four_nodes(),
            vec![
                pod("p-a1")
                    .node("node-a")
                    .label("foo", "a")
                    .label("bar", "x"),
                pod("p-y1")
                    .node("node-y")
                    .label("foo", "a")
                    .label("bar", "x"),
            ],
            vec![vec![("zone1", 0), ("zone2", 0)]],
            vec![[("zone1", 0), ("zone2", 0)]],
        ),
        (
            "matchLabelKeys missing from the pod's labels are ignored",
            pod("p")
                .label("foo", "")
                .c(label_keys(hard(1, "zone", foo()), &["bar"])),
            four_nodes(),
            vec![
                pod("p-a1").node("node-a").label("foo", "a"),
                pod("p-a2").node("node-a").label("foo", "a"),
                pod("p-b1").node("node-b").label("foo", "a"),
                pod("p-y1").node("node-y").label("foo", "a"),
                pod("p-y2").node("node-y").label("foo", "a"),
            ],
            vec![vec![("zone1", 3), ("zone2", 2)]],
            vec![[("zone2", 2), ("zone1", 3)]],
        ),
        (
            "two constraints on the same key",
            pod("p")
                .label("foo", "")
                .label("bar", "")
                .c(hard(1, "zone", foo()))
                .c(hard(1, "zone", bar())),
            four_nodes(),
            vec![
                pod("p-a1").node("node-a").label("foo", "").label("bar", ""),
                pod("p-b1").node("node-b").label("foo", ""),
                pod("p-x1").node("node-x").label("bar", ""),
                pod("p-y1").node("node-y").label("foo", "").label("bar", ""),
                pod("p-y2").node("node-y").label("bar", ""),
            ],
            vec![
                vec![("zone1", 2), ("zone2", 1)],
                vec![("zone1", 1), ("zone2", 3)],
            ],
            vec![[("zone2", 1), ("zone1", 2)], [("zone1", 1), ("zone2", 3)]],
        ),
    ];
    for (name, incoming, nodes, pods, want_counts, want_paths) in cases {
        let s = snap(nodes, pods);
        let (st, state) = pre_filter(&list_plugin(), &incoming.info(), &s);
        assert!(st.is_success(), "{name}: {st:?}");
        let got = read(&state);
        assert_eq!(sorted_counts(got), owned(&want_counts), "{name}: counts");
        assert_eq!(
            normalized_paths(got),
            paths(&want_paths),
            "{name}: critical paths"
        );
    }
}

#[test]
fn pre_filter_skips_pods_without_hard_constraints() {
    let s = snap(vec![zn("node-a", "zone1")], vec![]);
    let (st, _) = pre_filter(&list_plugin(), &pod("p").label("foo", "").info(), &s);
    assert_eq!(st.code, Code::Skip);
    let (st, _) = pre_filter(
        &list_plugin(),
        &pod("p").c(soft(1, "zone", foo())).info(),
        &s,
    );
    assert_eq!(st.code, Code::Skip);
}

fn list_with_defaults(defaults: Vec<TopologySpreadConstraint>) -> PodTopologySpread {
    PodTopologySpread::with_args(
        Args {
            default_constraints: defaults,
            system_defaulted: false,
        },
        Arc::new(OwnerSelectors::new()),
    )
}

#[test]
fn default_constraints_take_the_selector_of_matching_services() {
    let defaults = vec![
        hard(3, "node", None),
        soft(2, "node", None),
        hard(5, "rack", None),
    ];
    let p = list_with_defaults(defaults.clone());
    p.owners().replace(vec![service(&[("foo", "bar")])]);
    let incoming = pod("p").label("foo", "bar").label("baz", "kar").info();
    let s = snap(vec![], vec![]);
    let (st, state) = pre_filter(&p, &incoming, &s);
    assert!(st.is_success(), "{st:?}");
    let got = read(&state);
    let keys: Vec<&str> = got
        .shared
        .constraints
        .iter()
        .map(|c| c.topology_key.as_str())
        .collect();
    assert_eq!(keys, ["node", "rack"]);
    assert_eq!(got.shared.constraints[0].max_skew, 3);
    assert_eq!(got.shared.constraints[0].selector.to_string(), "foo=bar");
    assert_eq!(got.shared.constraints[1].selector.to_string(), "foo=bar");
    assert_eq!(got.paths, vec![CriticalPaths::new(), CriticalPaths::new()]);

    // A service that does not select the pod gives no selector: nothing to do.
    let p = list_with_defaults(vec![hard(3, "node", None)]);
    p.owners().replace(vec![service(&[("baz", "kep")])]);
    let (st, _) = pre_filter(&p, &pod("p").label("foo", "bar").info(), &s);
    assert_eq!(st.code, Code::Skip);

    // The pod's own constraints win over the defaults.
    let p = list_with_defaults(vec![hard(2, "node", None)]);
    p.owners().replace(vec![service(&[("foo", "bar")])]);
    let incoming = pod("p")
        .label("foo", "bar")
        .label("baz", "tar")
        .c(hard(1, "zone", labels_sel(&[("baz", "tar")])))
        .c(soft(2, "planet", labels_sel(&[("fot", "rok")])))
        .info();
    let (st, state) = pre_filter(&p, &incoming, &s);
    assert!(st.is_success());
    let got = read(&state);
    assert_eq!(got.shared.constraints.len(), 1);
    assert_eq!(got.shared.constraints[0].topology_key, "zone");
    assert_eq!(got.shared.constraints[0].selector.to_string(), "baz=tar");

    // Only soft defaults: nothing for PreFilter.
    let p = list_with_defaults(vec![soft(2, "node", None)]);
    p.owners().replace(vec![service(&[("foo", "bar")])]);
    let (st, _) = pre_filter(&p, &pod("p").label("foo", "bar").info(), &s);
    assert_eq!(st.code, Code::Skip);
}

#[test]
fn default_selector_merges_services_and_the_controller() {
    let owners = OwnerSelectors::new();
    let rs_selector =
        LabelSelector::from_json(&json!({"matchLabels": {"app": "web"}})).expect("selector");
    owners.replace(vec![
        service(&[("tier", "front")]),
        service(&[("other", "x")]),
        OwnerSelector::Service {
            namespace: "elsewhere".into(),
            selector: [("app".to_string(), "web".to_string())].into(),
        },
        OwnerSelector::ReplicaSet {
            namespace: "default".into(),
            name: "rs1".into(),
            selector: rs_selector.clone(),
        },
        OwnerSelector::ReplicaSet {
            namespace: "default".into(),
            name: "rs2".into(),
            selector: LabelSelector::from_json(&json!({"matchLabels": {"nope": "1"}}))
                .expect("selector"),
        },
        OwnerSelector::ReplicationController {
            namespace: "default".into(),
            name: "rc1".into(),
            selector: [("rc".to_string(), "yes".to_string())].into(),
        },
    ]);
    let base = || {
        pod("p")
            .label("app", "web")
            .label("tier", "front")
            .label("rc", "yes")
    };
    let sel = |p: PodB| owners.default_selector(&p.info()).to_string();
    assert_eq!(sel(base()), "tier=front");
    assert_eq!(
        sel(base().owner("apps/v1", "ReplicaSet", "rs1")),
        "app=web,tier=front"
    );
    assert_eq!(
        sel(base().owner("v1", "ReplicationController", "rc1")),
        "rc=yes,tier=front"
    );
    // Wrong group/version or unknown owner: services only.
    assert_eq!(
        sel(base().owner("extensions/v1beta1", "ReplicaSet", "rs1")),
        "tier=front"
    );
    assert_eq!(
        sel(base().owner("apps/v1", "ReplicaSet", "missing")),
        "tier=front"
    );
    assert!(owners
        .default_selector(&pod("q").label("x", "y").info())
        .is_empty());
}

// ----- AddPod / RemovePod --------------------------------------------------------------------

#[test]
fn add_pod_updates_counts_and_critical_paths() {
    let node_c = || hard(1, "node", foo());
    let zone_c = || hard(1, "zone", foo());
    type Case = (
        &'static str,
        PodB,
        PodB,
        Vec<PodB>,
        &'static str,
        Vec<Node>,
        Counts,
        Vec<[(&'static str, i64); 2]>,
    );
    let ab = || vec![zn("node-a", "zone1"), zn("node-b", "zone1")];
    let ax = || vec![zn("node-a", "zone1"), zn("node-x", "zone2")];
    let abx = || {
        vec![
            zn("node-a", "zone1"),
            zn("node-b", "zone1"),
            zn("node-x", "zone2"),
        ]
    };
    let affinity_nodes = || {
        vec![
            node(
                "node-a",
                &[("zone", "zone1"), ("node", "node-a"), ("foo", "bar")],
            ),
            node(
                "node-b",
                &[("zone", "zone2"), ("node", "node-b"), ("foo", "")],
            ),
        ]
    };
    let cases: Vec<Case> = vec![
        (
            "node a and b both impact the current min match",
            pod("p").label("foo", "").c(node_c()),
            pod("p-a1").node("node-a").label("foo", ""),
            vec![],
            "node-a",
            ab(),
            vec![vec![("node-a", 1), ("node-b", 0)]],
            vec![[("node-b", 0), ("node-a", 1)]],
        ),
        (
            "only node a impacts the current min match",
            pod("p").label("foo", "").c(node_c()),
            pod("p-a1").node("node-a").label("foo", ""),
            vec![pod("p-b1").node("node-b").label("foo", "")],
            "node-a",
            ab(),
            vec![vec![("node-a", 1), ("node-b", 1)]],
            vec![[("node-a", 1), ("node-b", 1)]],
        ),
        (
            "a pod in another namespace changes nothing",
            pod("p").label("foo", "").c(node_c()),
            pod("p-a1").ns("ns1").node("node-a").label("foo", ""),
            vec![pod("p-b1").node("node-b").label("foo", "")],
            "node-a",
            ab(),
            vec![vec![("node-a", 0), ("node-b", 1)]],
            vec![[("node-a", 0), ("node-b", 1)]],
        ),
        (
            "a pod on a non-critical node",
            pod("p").label("foo", "").c(node_c()),
            pod("p-b2").node("node-b").label("foo", ""),
            vec![pod("p-b1").node("node-b").label("foo", "")],
            "node-b",
            ab(),
            vec![vec![("node-a", 0), ("node-b", 2)]],
            vec![[("node-a", 0), ("node-b", 2)]],
        ),
        (
            "node a and x both impact zone and node",
            pod("p").label("foo", "").c(zone_c()).c(node_c()),
            pod("p-a1").node("node-a").label("foo", ""),
            vec![],
            "node-a",
            ax(),
            vec![
                vec![("zone1", 1), ("zone2", 0)],
                vec![("node-a", 1), ("node-x", 0)],
            ],
            vec![[("zone2", 0), ("zone1", 1)], [("node-x", 0), ("node-a", 1)]],
        ),
        (
            "only node a impacts zone and node",
            pod("p").label("foo", "").c(zone_c()).c(node_c()),
            pod("p-a1").node("node-a").label("foo", ""),
            vec![pod("p-x1").node("node-x").label("foo", "")],
            "node-a",
            ax(),
            vec![
                vec![("zone1", 1), ("zone2", 1)],
                vec![("node-a", 1), ("node-x", 1)],
            ],
            vec![[("zone1", 1), ("zone2", 1)], [("node-a", 1), ("node-x", 1)]],
        ),
        (
            "node a impacts node, node x impacts zone",
            pod("p").label("foo", "").c(zone_c()).c(node_c()),
            pod("p-a1").node("node-a").label("foo", ""),
            vec![
                pod("p-b1").node("node-b").label("foo", ""),
                pod("p-b2").node("node-b").label("foo", ""),
                pod("p-x1").node("node-x").label("foo", ""),
            ],
            "node-a",
            abx(),
            vec![
                vec![("zone1", 3), ("zone2", 1)],
                vec![("node-a", 1), ("node-b", 2), ("node-x", 1)],
            ],
            vec![[("zone2", 1), ("zone1", 3)], [("node-a", 1), ("node-x", 1)]],
        ),
        (
            "different selectors: the added pod matches only the zone constraint",
            pod("p")
                .label("foo", "")
                .label("bar", "")
                .c(zone_c())
                .c(hard(1, "node", bar())),
            pod("p-a1").node("node-a").label("foo", ""),
            vec![
                pod("p-b1").node("node-b").label("foo", "").label("bar", ""),
                pod("p-x1").node("node-x").label("foo", "").label("bar", ""),
                pod("p-x2").node("node-x").label("bar", ""),
            ],
            "node-a",
            abx(),
            vec![
                vec![("zone1", 2), ("zone2", 1)],
                vec![("node-a", 0), ("node-b", 1), ("node-x", 2)],
            ],
            vec![[("zone2", 1), ("zone1", 2)], [("node-a", 0), ("node-b", 1)]],
        ),
        (
            "different selectors: the added pod matches both",
            pod("p")
                .label("foo", "")
                .label("bar", "")
                .c(zone_c())
                .c(hard(1, "node", bar())),
            pod("p-a1").node("node-a").label("foo", "").label("bar", ""),
            vec![
                pod("p-b1").node("node-b").label("bar", ""),
                pod("p-x1").node("node-x").label("foo", "").label("bar", ""),
                pod("p-x2").node("node-x").label("bar", ""),
            ],
            "node-a",
            abx(),
            vec![
                vec![("zone1", 1), ("zone2", 1)],
                vec![("node-a", 1), ("node-b", 1), ("node-x", 2)],
            ],
            vec![[("zone1", 1), ("zone2", 1)], [("node-a", 1), ("node-b", 1)]],
        ),
        (
            "a pod added on a node outside the pod's node affinity is not counted",
            pod("p")
                .label("foo", "")
                .node_affinity("foo", "NotIn", &["bar"])
                .c(zone_c()),
            pod("p-a1").node("node-a").label("foo", ""),
            vec![
                pod("p-a2").node("node-a").label("foo", ""),
                pod("p-b1").node("node-b").label("foo", ""),
            ],
            "node-a",
            affinity_nodes(),
            vec![vec![("zone2", 1)]],
            vec![[("zone2", 1), NONE]],
        ),
        (
            "a pod added on a node matching the pod's node affinity",
            pod("p").label("foo", "").c(zone_c()),
            pod("p-b1").node("node-b").label("foo", ""),
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-b2").node("node-b").label("foo", ""),
            ],
            "node-b",
            affinity_nodes(),
            vec![vec![("zone1", 1), ("zone2", 2)]],
            vec![[("zone1", 1), ("zone2", 2)]],
        ),
        (
            "a pod not matching the selector is not counted",
            pod("p").label("foo", "").c(zone_c()),
            pod("p-b1").node("node-b"),
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-b2").node("node-b").label("foo", ""),
            ],
            "node-b",
            affinity_nodes(),
            vec![vec![("zone1", 1), ("zone2", 1)]],
            vec![[("zone1", 1), ("zone2", 1)]],
        ),
        (
            "taints are ignored by default",
            pod("p").label("foo", "").c(zone_c()),
            pod("p-b1").node("node-b").label("foo", ""),
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-b2").node("node-b").label("foo", ""),
            ],
            "node-b",
            vec![
                tainted(node("node-a", &[("zone", "zone1"), ("node", "node-a")])),
                node("node-b", &[("zone", "zone2"), ("node", "node-b")]),
            ],
            vec![vec![("zone1", 1), ("zone2", 2)]],
            vec![[("zone1", 1), ("zone2", 2)]],
        ),
    ];
    for (name, preemptor, added, existing, node_name, nodes, want_counts, want_paths) in cases {
        let s = snap(nodes, existing);
        let p = list_plugin();
        let preemptor = preemptor.info();
        let (st, mut state) = pre_filter(&p, &preemptor, &s);
        assert!(st.is_success(), "{name}: {st:?}");
        let node_info = s.get(node_name).expect("node");
        let st = p.add_pod(&mut state, &preemptor, &added.info(), node_info, &s);
        assert!(st.is_success(), "{name}: {st:?}");
        let got = read(&state);
        assert_eq!(sorted_counts(got), owned(&want_counts), "{name}: counts");
        assert_eq!(
            normalized_paths(got),
            paths(&want_paths),
            "{name}: critical paths"
        );
    }
}

#[test]
fn remove_pod_updates_counts_and_critical_paths() {
    let zone_c = || hard(1, "zone", foo());
    type Case = (
        &'static str,
        PodB,
        Vec<Node>,
        Vec<PodB>,
        PodB,
        &'static str,
        Counts,
        Vec<[(&'static str, i64); 2]>,
    );
    let affinity_nodes = || {
        vec![
            node(
                "node-a",
                &[("zone", "zone1"), ("node", "node-a"), ("foo", "bar")],
            ),
            node(
                "node-b",
                &[("zone", "zone2"), ("node", "node-b"), ("foo", "")],
            ),
        ]
    };
    let cases: Vec<Case> = vec![
        (
            "one constraint on zone, min unchanged",
            pod("p").label("foo", "").c(zone_c()),
            vec![
                zn("node-a", "zone1"),
                zn("node-b", "zone1"),
                zn("node-x", "zone2"),
            ],
            foo_pods(&[("node-a", 1), ("node-b", 1), ("node-x", 1)]),
            pod("p-a1").node("node-a").label("foo", ""),
            "node-a",
            vec![vec![("zone1", 1), ("zone2", 1)]],
            vec![[("zone1", 1), ("zone2", 1)]],
        ),
        (
            "one constraint on zone, min changed",
            pod("p").label("foo", "").c(zone_c()),
            four_nodes(),
            foo_pods(&[("node-a", 1), ("node-b", 1), ("node-x", 1), ("node-y", 1)]),
            pod("p-a1").node("node-a").label("foo", ""),
            "node-a",
            vec![vec![("zone1", 1), ("zone2", 2)]],
            vec![[("zone1", 1), ("zone2", 2)]],
        ),
        (
            "removing an irrelevant pod changes nothing",
            pod("p").label("foo", "").c(zone_c()),
            four_nodes(),
            {
                let mut v = vec![pod("p-a0").node("node-a").label("bar", "")];
                v.extend(foo_pods(&[
                    ("node-a", 1),
                    ("node-b", 1),
                    ("node-x", 1),
                    ("node-y", 1),
                ]));
                v
            },
            pod("p-a0").node("node-a").label("bar", ""),
            "node-a",
            vec![vec![("zone1", 2), ("zone2", 2)]],
            vec![[("zone1", 2), ("zone2", 2)]],
        ),
        (
            "two constraints",
            pod("p")
                .label("foo", "")
                .c(zone_c())
                .c(hard(1, "node", foo())),
            vec![
                zn("node-a", "zone1"),
                zn("node-b", "zone1"),
                zn("node-x", "zone2"),
            ],
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-x", 2)]),
            pod("p-x1").node("node-x").label("foo", ""),
            "node-x",
            vec![
                vec![("zone1", 3), ("zone2", 1)],
                vec![("node-a", 2), ("node-b", 1), ("node-x", 1)],
            ],
            vec![[("zone2", 1), ("zone1", 3)], [("node-b", 1), ("node-x", 1)]],
        ),
        (
            "removing from a node outside the pod's node affinity changes nothing",
            pod("p")
                .label("foo", "")
                .node_affinity("foo", "NotIn", &["bar"])
                .c(zone_c()),
            affinity_nodes(),
            vec![
                pod("p-a2").node("node-a").label("foo", ""),
                pod("p-b1").node("node-b").label("foo", ""),
            ],
            pod("p-a1").node("node-a").label("foo", ""),
            "node-a",
            vec![vec![("zone2", 1)]],
            vec![[("zone2", 1), NONE]],
        ),
        (
            "removing from a node matching the pod's node affinity",
            pod("p").label("foo", "").c(zone_c()),
            affinity_nodes(),
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-b2").node("node-b").label("foo", ""),
            ],
            pod("p-b1").node("node-b").label("foo", ""),
            "node-b",
            vec![vec![("zone1", 1), ("zone2", 0)]],
            vec![[("zone2", 0), ("zone1", 1)]],
        ),
    ];
    for (name, preemptor, nodes, existing, removed, node_name, want_counts, want_paths) in cases {
        let s = snap(nodes, existing);
        let p = list_plugin();
        let preemptor = preemptor.info();
        let (st, mut state) = pre_filter(&p, &preemptor, &s);
        assert!(st.is_success(), "{name}: {st:?}");
        let node_info = s.get(node_name).expect("node");
        let st = p.remove_pod(&mut state, &preemptor, &removed.info(), node_info, &s);
        assert!(st.is_success(), "{name}: {st:?}");
        let got = read(&state);
        assert_eq!(sorted_counts(got), owned(&want_counts), "{name}: counts");
        assert_eq!(
            normalized_paths(got),
            paths(&want_paths),
            "{name}: critical paths"
        );
    }
}

// ----- Filter --------------------------------------------------------------------------------

const OK: Code = Code::Success;
const NO: Code = Code::Unschedulable;
const NEVER: Code = Code::UnschedulableAndUnresolvable;

fn filter_codes(incoming: PodB, nodes: Vec<Node>, pods: Vec<PodB>) -> Vec<Code> {
    let names: Vec<String> = nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap_or_default())
        .collect();
    let s = snap(nodes, pods);
    let p = list_plugin();
    let incoming = incoming.info();
    let (st, state) = pre_filter(&p, &incoming, &s);
    assert!(st.is_success(), "{st:?}");
    names
        .iter()
        .map(|n| {
            let node = s.get(n).expect("node");
            let st = p.filter(&state, &incoming, node);
            // A node outside the snapshot (looked up by its labels) gets the same verdict.
            assert_eq!(
                p.filter(&state, &incoming, &detached(node)),
                st,
                "{n} outside"
            );
            st.code
        })
        .collect()
}

/// A copy of the node that is not (a clone of) the snapshot's.
fn detached(n: &NodeInfo) -> NodeInfo {
    let mut d = NodeInfo::new((*n.node).clone());
    for p in &n.pods {
        d.add_pod(p.clone());
    }
    d
}

#[test]
fn single_constraint_filter() {
    let two_one_zero_three = || foo_pods(&[("node-a", 2), ("node-b", 1), ("node-y", 3)]);
    let hosts = |names: &[&str]| {
        names
            .iter()
            .map(|n| node(n, &[("node", n)]))
            .collect::<Vec<_>>()
    };
    let foo_hosts = || {
        vec![
            node("node-a", &[("node", "node-a"), ("foo", "")]),
            node("node-b", &[("node", "node-b"), ("foo", "")]),
            node("node-x", &[("node", "node-x"), ("foo", "")]),
            node("node-y", &[("node", "node-y")]),
        ]
    };
    let one_one_zero_one = || {
        vec![
            pod("p-b1").node("node-a").label("foo", ""),
            pod("p-b2").node("node-b").label("foo", ""),
            pod("p-y1").node("node-y").label("foo", ""),
        ]
    };
    type Case = (&'static str, PodB, Vec<Node>, Vec<PodB>, Vec<Code>);
    let cases: Vec<Case> = vec![
        (
            "no existing pods",
            pod("p").label("foo", "").c(hard(1, "zone", foo())),
            four_nodes(),
            vec![],
            vec![OK, OK, OK, OK],
        ),
        (
            "no existing pods, the pod does not match itself",
            pod("p").label("foo", "").c(hard(1, "zone", bar())),
            four_nodes(),
            vec![],
            vec![OK, OK, OK, OK],
        ),
        (
            "pods of other namespaces do not count",
            pod("p").label("foo", "").c(hard(1, "zone", foo())),
            four_nodes(),
            vec![
                pod("p-a1").ns("ns1").node("node-a").label("foo", ""),
                pod("p-b1").ns("ns2").node("node-a").label("foo", ""),
                pod("p-x1").node("node-x").label("foo", ""),
                pod("p-y1").node("node-y").label("foo", ""),
            ],
            vec![OK, OK, NO, NO],
        ),
        (
            "existing pods do not match a null selector",
            pod("p").label("foo", "").c(hard(1, "zone", None)),
            four_nodes(),
            foo_pods(&[("node-x", 1), ("node-y", 1)]),
            vec![OK, OK, OK, OK],
        ),
        (
            "pods spread 3/3 across zones: all nodes fit",
            pod("p").label("foo", "").c(hard(1, "zone", foo())),
            four_nodes(),
            two_one_zero_three(),
            vec![OK, OK, OK, OK],
        ),
        (
            "a node without the zone label is unresolvable",
            pod("p").label("foo", "").c(hard(1, "zone", foo())),
            vec![
                zn("node-a", "zone1"),
                node("node-b", &[("zon", "zone1"), ("node", "node-b")]),
                zn("node-x", "zone2"),
                zn("node-y", "zone2"),
            ],
            foo_pods(&[("node-a", 1), ("node-b", 1), ("node-x", 1), ("node-y", 1)]),
            vec![OK, NEVER, NO, NO],
        ),
        (
            "no node has the rack label",
            pod("p").label("foo", "").c(hard(1, "rack", foo())),
            vec![zn("node-a", "zone1"), zn("node-x", "zone2")],
            vec![],
            vec![NEVER, NEVER],
        ),
        (
            "pods spread 2/1/0/3 across nodes: only node-x fits",
            pod("p").label("foo", "").c(hard(1, "node", foo())),
            four_nodes(),
            two_one_zero_three(),
            vec![NO, NO, OK, NO],
        ),
        (
            "pods spread 2/1/0/3, maxSkew 2: node-b and node-x fit",
            pod("p").label("foo", "").c(hard(2, "node", foo())),
            four_nodes(),
            two_one_zero_three(),
            vec![NO, OK, OK, NO],
        ),
        (
            "pods spread 2/1/0/3, the pod does not match itself",
            pod("p").label("bar", "").c(hard(1, "node", foo())),
            four_nodes(),
            two_one_zero_three(),
            vec![NO, OK, OK, NO],
        ),
        (
            "node affinity limits the domains to node-a and node-y",
            pod("p")
                .label("foo", "")
                .node_affinity("node", "In", &["node-a", "node-y"])
                .c(hard(1, "node", foo())),
            four_nodes(),
            two_one_zero_three(),
            vec![OK, OK, OK, NO],
        ),
        (
            "terminating pods are not counted",
            pod("p").label("foo", "").c(hard(1, "node", foo())),
            hosts(&["node-a", "node-b"]),
            vec![
                pod("p-a").node("node-a").label("foo", "").terminating(),
                pod("p-b").node("node-b").label("foo", ""),
            ],
            vec![OK, NO],
        ),
        (
            "node affinity excluding node-b: zone spread 0/2",
            pod("p")
                .label("foo", "")
                .node_affinity("node", "NotIn", &["node-b"])
                .c(hard(1, "zone", foo())),
            four_nodes(),
            vec![
                pod("p-b1").node("node-b").label("foo", ""),
                pod("p-b2").node("node-b").label("foo", ""),
                pod("p-y1").node("node-y").label("foo", ""),
            ],
            vec![OK, OK, NO, NO],
        ),
        (
            "fewer domains than minDomains: the global minimum is 0",
            pod("p")
                .label("foo", "")
                .c(min_domains(hard(2, "node", foo()), 4)),
            hosts(&["node-a", "node-b", "node-c"]),
            foo_pods(&[("node-a", 2), ("node-b", 2), ("node-c", 1)]),
            vec![NO, NO, OK],
        ),
        (
            "more domains than minDomains: all nodes fit",
            pod("p")
                .label("foo", "")
                .c(min_domains(hard(2, "node", foo()), 2)),
            hosts(&["node-a", "node-b", "node-c"]),
            foo_pods(&[("node-a", 2), ("node-b", 2), ("node-c", 1)]),
            vec![OK, OK, OK],
        ),
        (
            "zones 2/1 with minDomains 3",
            pod("p")
                .label("foo", "")
                .c(min_domains(hard(2, "zone", foo()), 3)),
            four_nodes(),
            vec![
                pod("p-b1").node("node-a").label("foo", ""),
                pod("p-b2").node("node-b").label("foo", ""),
                pod("p-y1").node("node-y").label("foo", ""),
            ],
            vec![NO, NO, OK, OK],
        ),
        (
            "zones 2/1 with minDomains 1",
            pod("p")
                .label("foo", "")
                .c(min_domains(hard(2, "zone", foo()), 1)),
            four_nodes(),
            vec![
                pod("p-b1").node("node-a").label("foo", ""),
                pod("p-b2").node("node-b").label("foo", ""),
                pod("p-y1").node("node-y").label("foo", ""),
            ],
            vec![OK, OK, OK, OK],
        ),
        (
            "nodeAffinityPolicy Honor with a node selector",
            pod("p")
                .label("foo", "")
                .node_selector("foo", "")
                .c(hard(1, "node", foo())),
            foo_hosts(),
            one_one_zero_one(),
            vec![NO, NO, OK, OK],
        ),
        (
            "nodeAffinityPolicy Ignore with a node selector",
            pod("p")
                .label("foo", "")
                .node_selector("foo", "")
                .c(affinity_policy(hard(1, "node", foo()), "Ignore")),
            foo_hosts(),
            one_one_zero_one(),
            vec![NO, NO, OK, NO],
        ),
        (
            "nodeAffinityPolicy Honor with node affinity",
            pod("p")
                .label("foo", "")
                .node_affinity("foo", "In", &[""])
                .c(hard(1, "node", foo())),
            foo_hosts(),
            one_one_zero_one(),
            vec![NO, NO, OK, OK],
        ),
        (
            "nodeAffinityPolicy Ignore with node affinity",
            pod("p")
                .label("foo", "")
                .node_affinity("foo", "In", &[""])
                .c(affinity_policy(hard(1, "node", foo()), "Ignore")),
            foo_hosts(),
            one_one_zero_one(),
            vec![NO, NO, OK, NO],
        ),
        (
            "nodeTaintsPolicy Honor",
            pod("p")
                .label("foo", "")
                .c(taints_policy(hard(1, "node", foo()), "Honor")),
            vec![
                node("node-a", &[("node", "node-a"), ("foo", "")]),
                node("node-b", &[("node", "node-b"), ("foo", "")]),
                node("node-x", &[("node", "node-x"), ("foo", "")]),
                tainted(node("node-y", &[("node", "node-y")])),
            ],
            one_one_zero_one(),
            vec![NO, NO, OK, OK],
        ),
        (
            "nodeTaintsPolicy Ignore",
            pod("p").label("foo", "").c(hard(1, "node", foo())),
            vec![
                node("node-a", &[("node", "node-a"), ("foo", "")]),
                node("node-b", &[("node", "node-b"), ("foo", "")]),
                node("node-x", &[("node", "node-x"), ("foo", "")]),
                tainted(node("node-y", &[("node", "node-y")])),
            ],
            one_one_zero_one(),
            vec![NO, NO, OK, NO],
        ),
    ];
    for (name, incoming, nodes, pods, want) in cases {
        assert_eq!(filter_codes(incoming, nodes, pods), want, "{name}");
    }
}

#[test]
fn multiple_constraints_filter() {
    type Case = (&'static str, PodB, Vec<PodB>, Vec<Code>);
    let cases: Vec<Case> = vec![
        (
            "zone and node spreads [3/3, 2/1/0/3]: node-x",
            pod("p")
                .label("foo", "")
                .c(hard(1, "zone", foo()))
                .c(hard(1, "node", foo())),
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-y", 3)]),
            vec![NO, NO, OK, NO],
        ),
        (
            "zone and node spreads [3/4, 2/1/0/4]: no node",
            pod("p")
                .label("foo", "")
                .c(hard(1, "zone", foo()))
                .c(hard(1, "node", foo())),
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-y", 4)]),
            vec![NO, NO, NO, NO],
        ),
        (
            "different selectors [1/0, 1/0/0/1]: node-x",
            pod("p")
                .label("foo", "")
                .label("bar", "")
                .c(hard(1, "zone", foo()))
                .c(hard(1, "node", bar())),
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-y1").node("node-y").label("bar", ""),
            ],
            vec![NO, NO, OK, NO],
        ),
        (
            "different selectors [1/0, 0/0/1/1]: no node",
            pod("p")
                .label("foo", "")
                .label("bar", "")
                .c(hard(1, "zone", foo()))
                .c(hard(1, "node", bar())),
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-x1").node("node-x").label("bar", ""),
                pod("p-y1").node("node-y").label("bar", ""),
            ],
            vec![NO, NO, NO, NO],
        ),
    ];
    for (name, incoming, pods, want) in cases {
        assert_eq!(filter_codes(incoming, four_nodes(), pods), want, "{name}");
    }
}

#[test]
fn filter_reasons_and_missing_state() {
    let s = snap(
        vec![node("n1", &[("zone", "a")]), node("n2", &[])],
        foo_pods(&[("n1", 1)]),
    );
    let p = list_plugin();
    let incoming = pod("p").label("foo", "").c(hard(1, "zone", foo())).info();
    let (_, state) = pre_filter(&p, &incoming, &s);
    assert_eq!(
        p.filter(&state, &incoming, s.get("n2").expect("n2")),
        Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)
    );
    let incoming2 = pod("q").label("foo", "").c(hard(1, "node", foo())).info();
    let s2 = snap(
        vec![node("n1", &[("node", "n1")]), node("n2", &[("node", "n2")])],
        foo_pods(&[("n1", 2)]),
    );
    let (_, state2) = pre_filter(&p, &incoming2, &s2);
    assert_eq!(
        p.filter(&state2, &incoming2, s2.get("n1").expect("n1")),
        Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)
    );
    assert_eq!(
        p.filter(&CycleState::new(), &incoming2, s2.get("n1").expect("n1"))
            .code,
        Code::Error
    );
}

#[test]
fn preemption_removing_a_pod_lets_the_node_fit() {
    let s = snap(
        vec![node("n1", &[("node", "n1")]), node("n2", &[("node", "n2")])],
        foo_pods(&[("n1", 1)]),
    );
    let p = list_plugin();
    let incoming = pod("p").label("foo", "").c(hard(1, "node", foo())).info();
    let (_, mut state) = pre_filter(&p, &incoming, &s);
    let n1 = s.get("n1").expect("n1");
    assert_eq!(p.filter(&state, &incoming, n1).code, NO);
    let victim = n1.pods[0].clone();
    let mut simulated = state.clone();
    assert!(p
        .remove_pod(&mut simulated, &incoming, &victim, n1, &s)
        .is_success());
    assert_eq!(p.filter(&simulated, &incoming, n1).code, OK);
    // The original state is untouched by the simulation.
    assert_eq!(p.filter(&state, &incoming, n1).code, NO);
    assert!(p
        .add_pod(&mut state, &incoming, &victim, s.get("n2").expect("n2"), &s)
        .is_success());
    assert_eq!(p.filter(&state, &incoming, n1).code, OK);
}

// ----- Score ---------------------------------------------------------------------------------

/// PreScore over `nodes` (the candidates; `failed` are the other nodes), Score each candidate,
/// NormalizeScore.
fn run_score(
    p: &PodTopologySpread,
    incoming: PodB,
    nodes: Vec<Node>,
    failed: Vec<Node>,
    pods: Vec<PodB>,
) -> Result<Vec<i64>, Status> {
    let names: Vec<String> = nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap_or_default())
        .collect();
    let mut all = nodes;
    all.extend(failed);
    let s = snap(all, pods);
    let incoming = incoming.info();
    let candidates: Vec<&NodeInfo> = names.iter().filter_map(|n| s.get(n)).collect();
    let mut state = CycleState::new();
    let st = p.pre_score(&mut state, &incoming, &candidates, &s);
    if !st.is_success() {
        return Err(st);
    }
    let mut scores = Vec::new();
    for n in &names {
        let idx = s.index_of(n).expect("index");
        let score = p.score(&state, &incoming, &s.nodes()[idx])?;
        let outside = p.score(&state, &incoming, &detached(&s.nodes()[idx]))?;
        assert_eq!(outside, score, "{n} outside the snapshot");
        scores.push(NodeScore { node: idx, score });
    }
    let st = p.normalize(&state, &incoming, &mut scores);
    assert!(st.is_success(), "{st:?}");
    Ok(scores.into_iter().map(|s| s.score).collect())
}

fn host(name: &str) -> Node {
    node(name, &[(LABEL_HOSTNAME, name)])
}

fn zone_host(name: &str, zone: &str) -> Node {
    node(name, &[("zone", zone), (LABEL_HOSTNAME, name)])
}

#[test]
fn pod_topology_spread_scores() {
    let four_three_two_one =
        || foo_pods(&[("node-a", 4), ("node-b", 3), ("node-c", 2), ("node-d", 1)]);
    let hosts = |names: &[&str]| names.iter().map(|n| host(n)).collect::<Vec<_>>();
    let on_hostname = |skew: i32| {
        pod("p")
            .label("foo", "")
            .c(soft(skew, LABEL_HOSTNAME, foo()))
    };
    let label_nodes = || {
        vec![
            node("node-a", &[("node", "node-a"), ("foo", "")]),
            node("node-b", &[("node", "node-b"), ("foo", "")]),
            node("node-c", &[("node", "node-c")]),
        ]
    };
    let two_one_one = || foo_pods(&[("node-a", 2), ("node-b", 1), ("node-c", 1)]);
    let four_zone_hosts = || {
        vec![
            zone_host("node-a", "zone1"),
            zone_host("node-b", "zone1"),
            zone_host("node-c", "zone2"),
            zone_host("node-d", "zone2"),
        ]
    };
    type Case = (
        &'static str,
        PodB,
        Vec<Node>,
        Vec<Node>,
        Vec<PodB>,
        Vec<i64>,
    );
    let cases: Vec<Case> = vec![
        (
            "one constraint on node, no existing pods",
            on_hostname(1),
            hosts(&["node-a", "node-b"]),
            vec![],
            vec![],
            vec![100, 100],
        ),
        (
            "one constraint on node, only one candidate",
            on_hostname(1),
            hosts(&["node-a"]),
            hosts(&["node-b"]),
            foo_pods(&[("node-a", 2), ("node-b", 1)]),
            vec![100],
        ),
        (
            "one constraint on node, same number of matching pods",
            on_hostname(1),
            hosts(&["node-a", "node-b"]),
            vec![],
            foo_pods(&[("node-a", 1), ("node-b", 1)]),
            vec![100, 100],
        ),
        (
            "one constraint on node, pods spread 2/1/0/3",
            on_hostname(1),
            hosts(&["node-a", "node-b", "node-c", "node-d"]),
            vec![],
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]),
            vec![20, 60, 100, 0],
        ),
        (
            "one constraint on node, null selector",
            pod("p").label("foo", "").c(soft(1, LABEL_HOSTNAME, None)),
            hosts(&["node-a", "node-b", "node-c", "node-d"]),
            vec![],
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]),
            vec![100, 100, 100, 100],
        ),
        (
            "one constraint on node, pods spread 2/1/0/3, maxSkew 2",
            on_hostname(2),
            hosts(&["node-a", "node-b", "node-c", "node-d"]),
            vec![],
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]),
            vec![33, 66, 100, 16],
        ),
        (
            "one constraint on node, pods spread 4/3/2/1, maxSkew 3",
            on_hostname(3),
            hosts(&["node-a", "node-b", "node-c", "node-d"]),
            vec![],
            four_three_two_one(),
            vec![44, 66, 77, 100],
        ),
        (
            "one constraint on node, 3 of 4 nodes are candidates",
            on_hostname(1),
            hosts(&["node-a", "node-b", "node-x"]),
            hosts(&["node-y"]),
            foo_pods(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]),
            vec![33, 83, 100],
        ),
        (
            "one constraint on node, a candidate without the topology key",
            on_hostname(1),
            vec![
                host("node-a"),
                node("node-b", &[("n", "node-b")]),
                host("node-x"),
            ],
            hosts(&["node-y"]),
            foo_pods(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]),
            vec![16, 0, 100],
        ),
        (
            "one constraint on zone, 3 of 4 nodes are candidates",
            pod("p").label("foo", "").c(soft(1, "zone", foo())),
            vec![
                zone_host("node-a", "zone1"),
                zone_host("node-b", "zone1"),
                zone_host("node-x", "zone2"),
            ],
            vec![zone_host("node-y", "zone2")],
            foo_pods(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]),
            vec![75, 75, 100],
        ),
        (
            "zone and node constraints, 2 of 4 nodes are candidates",
            pod("p")
                .label("foo", "")
                .c(soft(1, "zone", foo()))
                .c(soft(1, LABEL_HOSTNAME, foo())),
            vec![zone_host("node-a", "zone1"), zone_host("node-x", "zone2")],
            vec![zone_host("node-b", "zone1"), zone_host("node-y", "zone2")],
            foo_pods(&[("node-a", 2), ("node-b", 1), ("node-x", 2), ("node-y", 4)]),
            vec![100, 63],
        ),
        (
            "two constraints on zone, 2 of 4 nodes are candidates",
            pod("p")
                .label("foo", "")
                .label("bar", "")
                .c(soft(1, "zone", foo()))
                .c(soft(1, "zone", bar())),
            vec![
                node("node-a", &[("zone", "zone1")]),
                node("node-x", &[("zone", "zone2")]),
            ],
            vec![
                node("node-b", &[("zone", "zone1")]),
                node("node-y", &[("zone", "zone2")]),
            ],
            vec![
                pod("p-a1").node("node-a").label("foo", "").label("bar", ""),
                pod("p-a2").node("node-a").label("foo", ""),
                pod("p-b1").node("node-b").label("foo", "").label("bar", ""),
                pod("p-y1").node("node-y").label("foo", ""),
                pod("p-y2").node("node-y").label("foo", "").label("bar", ""),
                pod("p-y3").node("node-y").label("foo", ""),
            ],
            vec![85, 100],
        ),
        (
            "zone and node constraints with different selectors",
            pod("p")
                .label("foo", "")
                .label("bar", "")
                .c(soft(1, "zone", foo()))
                .c(soft(1, LABEL_HOSTNAME, bar())),
            vec![
                zone_host("node-a", "zone1"),
                zone_host("node-b", "zone1"),
                zone_host("node-x", "zone2"),
                zone_host("node-y", "zone2"),
            ],
            vec![],
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-b1").node("node-b").label("foo", "").label("bar", ""),
                pod("p-y1").node("node-y").label("foo", ""),
                pod("p-y2").node("node-y").label("bar", ""),
            ],
            vec![60, 20, 100, 60],
        ),
        (
            "zone and node constraints with different selectors, some nodes have 0 pods",
            pod("p")
                .label("foo", "")
                .label("bar", "")
                .c(soft(1, "zone", foo()))
                .c(soft(1, LABEL_HOSTNAME, bar())),
            vec![
                zone_host("node-a", "zone1"),
                zone_host("node-b", "zone1"),
                zone_host("node-x", "zone2"),
                zone_host("node-y", "zone2"),
            ],
            vec![],
            vec![
                pod("p-b1").node("node-b").label("bar", ""),
                pod("p-x1").node("node-x").label("foo", ""),
                pod("p-y1").node("node-y").label("foo", "").label("bar", ""),
            ],
            vec![100, 60, 40, 0],
        ),
        (
            "zone and node constraints with different selectors, 3 of 4 candidates",
            pod("p")
                .label("foo", "")
                .label("bar", "")
                .c(soft(1, "zone", foo()))
                .c(soft(1, LABEL_HOSTNAME, bar())),
            vec![
                zone_host("node-a", "zone1"),
                zone_host("node-b", "zone1"),
                zone_host("node-x", "zone2"),
            ],
            vec![zone_host("node-y", "zone2")],
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-b1").node("node-b").label("foo", "").label("bar", ""),
                pod("p-y1").node("node-y").label("foo", ""),
                pod("p-y2").node("node-y").label("bar", ""),
            ],
            vec![50, 25, 100],
        ),
        (
            "pods of other namespaces do not count",
            on_hostname(1),
            hosts(&["node-a", "node-b"]),
            vec![],
            vec![
                pod("p-a1").ns("ns1").node("node-a").label("foo", ""),
                pod("p-a2").node("node-a").label("foo", ""),
                pod("p-b1").node("node-b").label("foo", ""),
                pod("p-b2").node("node-b").label("foo", ""),
            ],
            vec![100, 33],
        ),
        (
            "terminating pods are not counted",
            on_hostname(1),
            hosts(&["node-a", "node-b"]),
            vec![],
            vec![
                pod("p-a").node("node-a").label("foo", "").terminating(),
                pod("p-b").node("node-b").label("foo", ""),
            ],
            vec![100, 0],
        ),
        (
            "minDomains has no effect on scoring",
            pod("p")
                .label("foo", "")
                .c(min_domains(soft(2, "node", foo()), 10)),
            vec![
                node("node-a", &[("node", "node-a")]),
                node("node-b", &[("node", "node-b")]),
                node("node-c", &[("node", "node-c")]),
            ],
            vec![],
            foo_pods(&[("node-a", 2), ("node-b", 2), ("node-c", 1)]),
            vec![75, 75, 100],
        ),
        (
            "nodeAffinityPolicy Honor with a node selector",
            pod("p")
                .label("foo", "")
                .node_selector("foo", "")
                .c(soft(1, "node", foo())),
            label_nodes(),
            vec![],
            two_one_one(),
            vec![0, 33, 100],
        ),
        (
            "nodeAffinityPolicy Ignore with a node selector",
            pod("p")
                .label("foo", "")
                .node_selector("foo", "")
                .c(affinity_policy(soft(1, "node", foo()), "Ignore")),
            label_nodes(),
            vec![],
            two_one_one(),
            vec![66, 100, 100],
        ),
        (
            "nodeAffinityPolicy Honor with node affinity",
            pod("p")
                .label("foo", "")
                .node_affinity("foo", "In", &[""])
                .c(soft(1, "node", foo())),
            label_nodes(),
            vec![],
            two_one_one(),
            vec![0, 33, 100],
        ),
        (
            "nodeTaintsPolicy Honor",
            pod("p")
                .label("foo", "")
                .c(taints_policy(soft(1, "node", foo()), "Honor")),
            vec![
                node("node-a", &[("node", "node-a")]),
                node("node-b", &[("node", "node-b")]),
                tainted(node("node-c", &[("node", "node-c")])),
            ],
            vec![],
            two_one_one(),
            vec![0, 33, 100],
        ),
        (
            "nodeTaintsPolicy Ignore",
            pod("p").label("foo", "").c(soft(1, "node", foo())),
            vec![
                node("node-a", &[("node", "node-a")]),
                node("node-b", &[("node", "node-b")]),
                tainted(node("node-c", &[("node", "node-c")])),
            ],
            vec![],
            two_one_one(),
            vec![66, 100, 100],
        ),
        (
            "matchLabelKeys ANDed with empty selectors",
            pod("p")
                .label("foo", "")
                .label("bar", "")
                .c(label_keys(
                    soft(1, "zone", Some(MetaSelector::default())),
                    &["foo"],
                ))
                .c(label_keys(
                    soft(1, LABEL_HOSTNAME, Some(MetaSelector::default())),
                    &["bar"],
                )),
            four_zone_hosts(),
            vec![],
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-b1").node("node-b").label("foo", "").label("bar", ""),
                pod("p-y1").node("node-c").label("foo", ""),
                pod("p-y2").node("node-c").label("bar", ""),
            ],
            vec![60, 20, 60, 100],
        ),
        (
            "matchLabelKeys ANDed with a non-empty selector",
            pod("p")
                .label("foo", "")
                .label("bar", "")
                .label("baz", "")
                .c(soft(1, "zone", foo()))
                .c(label_keys(soft(1, LABEL_HOSTNAME, bar()), &["baz"])),
            four_zone_hosts(),
            vec![],
            vec![
                pod("p-a1").node("node-a").label("foo", ""),
                pod("p-b1")
                    .node("node-b")
                    .label("foo", "")
                    .label("bar", "")
                    .label("baz", ""),
                pod("p-c1").node("node-c").label("foo", ""),
                pod("p-c2").node("node-c").label("bar", ""),
                pod("p-d3").node("node-c").label("bar", "").label("baz", ""),
            ],
            vec![60, 20, 60, 100],
        ),
    ];
    for (name, incoming, nodes, failed, pods, want) in cases {
        let got = run_score(&system_plugin(), incoming, nodes, failed, pods);
        assert_eq!(got, Ok(want), "{name}");
    }
}

#[test]
fn system_default_constraints_score_pods_selected_by_a_service() {
    let p = system_plugin();
    p.owners().replace(vec![service(&[("foo", "")])]);
    let got = run_score(
        &p,
        pod("p").label("foo", ""),
        vec![
            host("node-a"),
            host("node-b"),
            host("node-c"),
            host("node-d"),
        ],
        vec![],
        foo_pods(&[("node-a", 4), ("node-b", 3), ("node-c", 2), ("node-d", 1)]),
    );
    assert_eq!(got, Ok(vec![44, 66, 77, 100]));
    // Without a selecting object the defaults do not apply.
    let got = run_score(
        &system_plugin(),
        pod("p").label("foo", ""),
        vec![host("node-a")],
        vec![],
        vec![],
    );
    assert_eq!(got.map_err(|s| s.code), Err(Code::Skip));
}

/// The counts by value name.
fn by_name(c: &ValueCounts) -> HashMap<String, i64> {
    c.iter()
        .map(|(id, n)| (c.name(id).to_string(), n))
        .collect()
}

#[test]
fn pre_score_state_weights_and_ignored_nodes() {
    let p = list_plugin();
    let s = snap(
        vec![
            zone_host("node-a", "zone1"),
            zone_host("node-b", "zone1"),
            node("node-x", &[(LABEL_HOSTNAME, "node-x")]),
        ],
        vec![],
    );
    let incoming = pod("p")
        .label("foo", "")
        .c(soft(1, "zone", foo()))
        .c(soft(1, LABEL_HOSTNAME, bar()))
        .info();
    let candidates: Vec<&NodeInfo> = s.nodes().iter().collect();
    let mut state = CycleState::new();
    assert!(p
        .pre_score(&mut state, &incoming, &candidates, &s)
        .is_success());
    let PreScoreState(got) = state.read::<PreScoreState>(PRE_SCORE_KEY).expect("state");
    assert_eq!(
        got.ignored,
        HashSet::from([s.index_of("node-x").expect("x")])
    );
    assert_eq!(
        by_name(&got.counts[0]),
        HashMap::from([("zone1".to_string(), 0)])
    );
    assert!(got.counts[1].is_empty());
    assert_eq!(got.weights, vec![3f64.ln(), 4f64.ln()]);

    // System defaults keep nodes without a zone, as a zone of their own.
    let p = system_plugin();
    p.owners().replace(vec![service(&[("foo", "tar")])]);
    let s = snap(
        vec![
            node(
                "node-a",
                &[(LABEL_HOSTNAME, "node-a"), (LABEL_TOPOLOGY_ZONE, "mars")],
            ),
            node(
                "node-b",
                &[(LABEL_HOSTNAME, "node-b"), (LABEL_TOPOLOGY_ZONE, "mars")],
            ),
            host("node-c"),
            host("node-d"),
        ],
        vec![],
    );
    let incoming = pod("p").label("foo", "tar").label("baz", "sup").info();
    let candidates: Vec<&NodeInfo> = s.nodes().iter().collect();
    let mut state = CycleState::new();
    assert!(p
        .pre_score(&mut state, &incoming, &candidates, &s)
        .is_success());
    let PreScoreState(got) = state.read::<PreScoreState>(PRE_SCORE_KEY).expect("state");
    assert!(got.ignored.is_empty());
    assert!(got.counts[0].is_empty());
    assert_eq!(
        by_name(&got.counts[1]),
        HashMap::from([("mars".to_string(), 0), (String::new(), 0)])
    );
    assert_eq!(got.weights, vec![6f64.ln(), 4f64.ln()]);
}

#[test]
fn pre_score_skips_without_soft_constraints() {
    let s = snap(vec![host("node-a"), host("node-b")], vec![]);
    let candidates: Vec<&NodeInfo> = s.nodes().iter().collect();
    let mut state = CycleState::new();
    let st = list_plugin().pre_score(&mut state, &pod("p").info(), &candidates, &s);
    assert_eq!(st.code, Code::Skip);

    let p = list_with_defaults(vec![soft(2, "planet", None)]);
    p.owners().replace(vec![OwnerSelector::ReplicaSet {
        namespace: "default".into(),
        name: "rs1".into(),
        selector: LabelSelector::from_json(
            &json!({"matchExpressions": [{"key": "tar", "operator": "Exists"}]}),
        )
        .expect("selector"),
    }]);
    let incoming = pod("p")
        .label("foo", "bar")
        .label("baz", "sup")
        .owner("apps/v1", "ReplicaSet", "rs2")
        .info();
    let st = p.pre_score(&mut CycleState::new(), &incoming, &candidates, &s);
    assert_eq!(st.code, Code::Skip);
}

// ----- args, events, hints -------------------------------------------------------------------

#[test]
fn args_defaults_and_validation() {
    assert_eq!(Args::parse(&Value::Null), Ok(Args::default()));
    assert_eq!(
        Args::parse(&json!({"defaultingType": "System"})),
        Ok(Args::default())
    );
    let list = Args::parse(&json!({
        "defaultingType": "List",
        "defaultConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
            {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
        ]
    }))
    .expect("valid");
    assert!(!list.system_defaulted);
    assert_eq!(list.default_constraints.len(), 2);
    assert_eq!(
        Args::parse(&json!({"defaultingType": "List"})).map(|a| a.default_constraints.len()),
        Ok(0)
    );
    let err = |v: Value| Args::parse(&v).expect_err("invalid");
    assert_eq!(
        err(json!({"defaultingType": "Foo"})),
        "defaultingType: Unsupported value: \"Foo\": supported values: \"System\", \"List\""
    );
    assert_eq!(
        err(
            json!({"defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]})
        ),
        "defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty"
    );
    assert_eq!(
        err(json!({"defaultingType": "List", "defaultConstraints": [
            {"maxSkew": -1, "topologyKey": "", "whenUnsatisfiable": "Bad"}
        ]})),
        "[defaultConstraints[0].maxSkew: Invalid value: -1: not in valid range (0, inf), \
         defaultConstraints[0].topologyKey: Required value: can not be empty, \
         defaultConstraints[0].whenUnsatisfiable: Unsupported value: \"Bad\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\"]"
    );
    assert_eq!(
        err(json!({"defaultingType": "List", "defaultConstraints": [
            {"maxSkew": 1, "topologyKey": "zone"}
        ]})),
        "defaultConstraints[0].whenUnsatisfiable: Required value: can not be empty"
    );
    assert_eq!(
        err(json!({"defaultingType": "List", "defaultConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {}}
        ]})),
        "defaultConstraints[0].labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod"
    );
    assert_eq!(
        err(json!({"defaultingType": "List", "defaultConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
            {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
        ]})),
        "defaultConstraints[1]: Duplicate value: \"{zone, ScheduleAnyway}\""
    );
    assert!(err(json!({"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": "not a key!", "whenUnsatisfiable": "ScheduleAnyway"}
    ]}))
    .starts_with("defaultConstraints[0].topologyKey: Invalid value: \"not a key!\": "));
    assert!(Args::parse(&json!({"unknownField": 1})).is_err());
    assert!(new(&json!({"defaultingType": "Foo"})).is_err());
    assert!(new(&Value::Null).is_ok());
}

#[test]
fn hints_follow_the_changed_pod() {
    let p = list_plugin();
    let incoming = pod("p").label("foo", "").c(hard(1, "zone", foo())).info();
    let matching = pod("m").node("n1").label("foo", "").info();
    let other = pod("o").node("n1").label("bar", "").info();
    let unscheduled = pod("u").label("foo", "").info();
    let other_ns = pod("x").ns("ns1").node("n1").label("foo", "").info();
    assert!(p.hint(&incoming, ClusterEvent::PodAdd, Some(&matching)));
    assert!(!p.hint(&incoming, ClusterEvent::PodAdd, Some(&other)));
    assert!(!p.hint(&incoming, ClusterEvent::PodAdd, Some(&unscheduled)));
    assert!(!p.hint(&incoming, ClusterEvent::PodAdd, Some(&other_ns)));
    assert!(p.hint(&incoming, ClusterEvent::PodDelete, Some(&matching)));
    assert!(!p.hint(&incoming, ClusterEvent::PodDelete, Some(&other)));
    assert!(p.hint(&incoming, ClusterEvent::PodUpdateLabel, Some(&other)));
    assert!(p.hint(&incoming, ClusterEvent::NodeAdd, None));
    let soft_only = pod("s").c(soft(1, "zone", foo())).info();
    assert!(!p.hint(&soft_only, ClusterEvent::PodAdd, Some(&matching)));
    assert!(p.events().contains(&ClusterEvent::NodeDelete));
}

// ----- Against a direct computation ----------------------------------------------------------

/// A random pod over a small vocabulary of labels and namespaces.
fn random_existing(rng: &mut rand::rngs::SmallRng, name: &str, node: &str) -> PodB {
    use rand::Rng;
    let mut p = pod(name).node(node);
    if rng.random_range(0..4) == 0 {
        p = p.ns("other");
    }
    for k in ["foo", "bar"] {
        if rng.random_range(0..2) == 0 {
            p = p.label(k, &format!("v{}", rng.random_range(0..2)));
        }
    }
    if rng.random_range(0..8) == 0 {
        p = p.terminating();
    }
    p
}

/// A random incoming pod with one or two constraints of `action`.
fn random_incoming(rng: &mut rand::rngs::SmallRng, action: &str) -> PodB {
    use rand::Rng;
    let keys = ["zone", "node", LABEL_HOSTNAME, "rack"];
    let mut p = pod("incoming").label("foo", "v0");
    if rng.random_range(0..4) == 0 {
        p = p.node_selector("zone", "zone1");
    }
    if rng.random_range(0..4) == 0 {
        p = p.tolerate("node.kubernetes.io/unschedulable");
    }
    for _ in 0..rng.random_range(1..3) {
        let selector = match rng.random_range(0..4) {
            0 => bar(),
            1 => labels_sel(&[("foo", "v0")]),
            2 => Some(MetaSelector::default()),
            _ => foo(),
        };
        let mut c = spread(
            rng.random_range(1..3),
            keys[rng.random_range(0..keys.len())],
            action,
            selector,
        );
        if rng.random_range(0..3) == 0 {
            c = affinity_policy(c, "Ignore");
        }
        if rng.random_range(0..3) == 0 {
            c = taints_policy(c, "Honor");
        }
        p = p.c(c);
    }
    p
}

fn random_cluster(rng: &mut rand::rngs::SmallRng) -> Snapshot {
    use rand::Rng;
    let mut nodes = Vec::new();
    for i in 0..rng.random_range(1..9) {
        let name = format!("node-{i}");
        let zone = format!("zone{}", rng.random_range(1..4));
        let mut labels = vec![("node", name.as_str()), (LABEL_HOSTNAME, name.as_str())];
        if rng.random_range(0..5) != 0 {
            labels.push(("zone", zone.as_str()));
        }
        if rng.random_range(0..2) == 0 {
            labels.push(("rack", "r1"));
        }
        let n = node(&name, &labels);
        nodes.push(if rng.random_range(0..4) == 0 {
            tainted(n)
        } else {
            n
        });
    }
    let n = nodes.len();
    let pods: Vec<PodB> = (0..rng.random_range(0..30))
        .map(|i| {
            let on = format!("node-{}", rng.random_range(0..n + 1));
            random_existing(rng, &format!("p{i}"), &on)
        })
        .collect();
    snap(nodes, pods)
}

#[test]
fn pre_filter_counts_equal_a_pod_by_pod_computation() {
    use rand::SeedableRng;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let p = list_plugin();
    let mut nonempty = 0;
    for round in 0..300 {
        let s = random_cluster(&mut rng);
        let incoming = random_incoming(&mut rng, DO_NOT_SCHEDULE).info();
        let (st, state) = pre_filter(&p, &incoming, &s);
        assert!(st.is_success(), "{round}: {st:?}");
        let got = read(&state);
        let rules = NodeInclusion::new(&incoming);
        let mut want: Vec<Vec<(String, i64)>> = Vec::new();
        for c in &got.shared.constraints {
            let mut domains: BTreeMap<String, i64> = BTreeMap::new();
            for node in s.nodes() {
                if !node_has_keys(node, &got.shared.constraints)
                    || !Inclusion::new(&rules, node).includes(c)
                {
                    continue;
                }
                let value = node.labels()[&c.topology_key].clone();
                *domains.entry(value).or_insert(0) +=
                    count_matching(&node.pods, &c.selector, incoming.namespace());
            }
            nonempty += usize::from(domains.values().any(|n| *n > 0));
            want.push(domains.into_iter().collect());
        }
        assert_eq!(sorted_counts(got), want, "round {round}");
        for (i, paths) in got.paths.iter().enumerate() {
            let min = want[i]
                .iter()
                .map(|(_, n)| *n)
                .min()
                .unwrap_or(NO_MATCH_NUM);
            assert_eq!(
                paths.0[0].1, min,
                "round {round}: minimum of constraint {i}"
            );
        }
    }
    assert!(nonempty > 100, "{nonempty}");
}

#[test]
fn scores_equal_a_pod_by_pod_computation() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
    let mut nonzero = 0;
    for round in 0..300 {
        let s = random_cluster(&mut rng);
        let (p, incoming) = if rng.random_range(0..3) == 0 {
            // System defaults: the selector comes from a Service; nodes may lack the keys.
            let p = system_plugin();
            p.owners().replace(vec![service(&[("foo", "v0")])]);
            (p, pod("incoming").label("foo", "v0").info())
        } else {
            (
                list_plugin(),
                random_incoming(&mut rng, SCHEDULE_ANYWAY).info(),
            )
        };
        let candidates: Vec<&NodeInfo> = s
            .nodes()
            .iter()
            .filter(|_| rng.random_range(0..4) != 0)
            .collect();
        if candidates.is_empty() {
            continue;
        }
        let mut state = CycleState::new();
        let st = p.pre_score(&mut state, &incoming, &candidates, &s);
        assert!(st.is_success(), "{round}: {st:?}");
        let PreScoreState(got) = state.read::<PreScoreState>(PRE_SCORE_KEY).expect("state");
        let constraints = &got.constraints;
        let require_all = got.require_all_topologies;
        let rules = NodeInclusion::new(&incoming);
        // Domains of the candidates (the empty value for nodes without the key when not all
        // keys are required), then the matching pods of every eligible node.
        let mut want: Vec<HashMap<String, i64>> = vec![HashMap::new(); constraints.len()];
        for node in &candidates {
            if require_all && !node_has_keys(node, constraints) {
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if c.topology_key != LABEL_HOSTNAME {
                    let v = node
                        .labels()
                        .get(&c.topology_key)
                        .cloned()
                        .unwrap_or_default();
                    want[i].insert(v, 0);
                }
            }
        }
        for node in s.nodes() {
            if require_all && !node_has_keys(node, constraints) {
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if !Inclusion::new(&rules, node).includes(c) {
                    continue;
                }
                let v = node
                    .labels()
                    .get(&c.topology_key)
                    .cloned()
                    .unwrap_or_default();
                if let Some(total) = want[i].get_mut(&v) {
                    *total += count_matching(&node.pods, &c.selector, incoming.namespace());
                }
            }
        }
        for (i, w) in want.iter().enumerate() {
            assert_eq!(&by_name(&got.counts[i]), w, "round {round}: constraint {i}");
        }
        for node in &candidates {
            let mut score = 0.0;
            if !require_all || node_has_keys(node, constraints) {
                for (i, c) in constraints.iter().enumerate() {
                    let Some(v) = node.labels().get(&c.topology_key) else {
                        continue;
                    };
                    let count = if c.topology_key == LABEL_HOSTNAME {
                        count_matching(&node.pods, &c.selector, incoming.namespace())
                    } else {
                        want[i].get(v).copied().unwrap_or(0)
                    };
                    score += score_for_count(count, c.max_skew, got.weights[i]);
                }
            }
            let want_score = score.round() as i64;
            nonzero += usize::from(want_score > 0);
            let name = node.name();
            assert_eq!(
                p.score(&state, &incoming, node),
                Ok(want_score),
                "round {round} {name}"
            );
        }
    }
    assert!(nonzero > 100, "{nonzero}");
}
