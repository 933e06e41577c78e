//! TaintToleration: a node's `NoSchedule`/`NoExecute` taints must all be tolerated by the pod
//! (Filter), and nodes with fewer untolerated `PreferNoSchedule` taints score higher (Score).
//! Mirrors `pkg/scheduler/framework/plugins/tainttoleration` of Kubernetes v1.32.
//!
//! The toleration matching helpers here (`tolerates`, `tolerates_parts`) are Kubernetes'
//! `Toleration.ToleratesTaint`/`TolerationsTolerateTaint`, shared with other plugins.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint, Toleration};
use serde_json::Value;

use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeScore, Plugin, ScorePlugin, Status, MAX_NODE_SCORE,
};
use crate::types::{NodeInfo, PodInfo};

pub const NAME: &str = "TaintToleration";

pub const EFFECT_NO_SCHEDULE: &str = "NoSchedule";
pub const EFFECT_PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
pub const EFFECT_NO_EXECUTE: &str = "NoExecute";

pub struct TaintToleration;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(TaintToleration))
}

/// Whether one toleration tolerates a taint given by its parts (`Toleration.ToleratesTaint`):
/// an empty effect matches every effect, an empty key matches every key, operator `Exists`
/// matches any value, `Equal` (or empty) needs the same value; other operators match nothing.
pub fn toleration_tolerates(t: &Toleration, key: &str, value: &str, effect: &str) -> bool {
    let t_effect = t.effect.as_deref().unwrap_or("");
    if !t_effect.is_empty() && t_effect != effect {
        return false;
    }
    let t_key = t.key.as_deref().unwrap_or("");
    if !t_key.is_empty() && t_key != key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == value,
        "Exists" => true,
        _ => false,
    }
}

/// Whether any of the tolerations tolerates the taint with these parts.
pub fn tolerates_parts(tolerations: &[Toleration], key: &str, value: &str, effect: &str) -> bool {
    tolerations
        .iter()
        .any(|t| toleration_tolerates(t, key, value, effect))
}

/// Whether any of the tolerations tolerates the taint (`TolerationsTolerateTaint`).
pub fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerates_parts(
        tolerations,
        &taint.key,
        taint.value.as_deref().unwrap_or(""),
        &taint.effect,
    )
}

/// The pod's tolerations (empty when it has none).
pub fn pod_tolerations(pod: &PodInfo) -> &[Toleration] {
    pod.pod()
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[])
}

fn node_taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
}

fn is_do_not_schedule(taint: &Taint) -> bool {
    taint.effect == EFFECT_NO_SCHEDULE || taint.effect == EFFECT_NO_EXECUTE
}

/// The first `NoSchedule`/`NoExecute` taint the tolerations do not tolerate
/// (`FindMatchingUntoleratedTaint` with `DoNotScheduleTaintsFilterFunc`).
pub fn first_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|t| is_do_not_schedule(t) && !tolerates(tolerations, t))
}

/// Kubernetes' `DefaultNormalizeScore`: scale scores to `[0, max]` by the highest score,
/// optionally reversed (`max - score`). When every score is 0 they stay 0, or become `max`
/// when reversed.
pub fn default_normalize_score(max: i64, reverse: bool, scores: &mut [NodeScore]) {
    let highest = scores.iter().map(|s| s.score).max().unwrap_or(0).max(0);
    if highest == 0 {
        if reverse {
            for s in scores.iter_mut() {
                s.score = max;
            }
        }
        return;
    }
    for s in scores.iter_mut() {
        let v = max.saturating_mul(s.score) / highest;
        s.score = if reverse { max - v } else { v };
    }
}

impl TaintToleration {
    /// QueueingHint for a node added (`old` None) or updated: retry only when the node went
    /// from having an untolerated `NoSchedule`/`NoExecute` taint to having none.
    pub fn node_change_hint(pod: &PodInfo, old: Option<&Node>, new: &Node) -> bool {
        let tolerations = pod_tolerations(pod);
        let was_untolerated =
            old.is_none_or(|o| first_untolerated_taint(node_taints(o), tolerations).is_some());
        let is_untolerated = first_untolerated_taint(node_taints(new), tolerations).is_some();
        was_untolerated && !is_untolerated
    }
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> Vec<ClusterEvent> {
        // Kubernetes also registers Pod/UpdatePodToleration (for the pod itself), which has no
        // ClusterEvent here.
        vec![ClusterEvent::NodeAdd, ClusterEvent::NodeUpdateTaint]
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.has_no_schedule_taints {
            return Status::success();
        }
        match first_untolerated_taint(node.taints(), pod_tolerations(pod)) {
            None => Status::success(),
            Some(t) => Status::unresolvable(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                t.key,
                t.value.as_deref().unwrap_or("")
            )),
        }
    }
}

impl ScorePlugin for TaintToleration {
    /// The number of `PreferNoSchedule` taints the pod does not tolerate. Only tolerations with
    /// an empty or `PreferNoSchedule` effect can tolerate those, so no per-pod filtering of the
    /// tolerations (Kubernetes' PreScore) is needed.
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        if !node.has_prefer_no_schedule_taints {
            return Ok(0);
        }
        let tolerations = pod_tolerations(pod);
        let n = node
            .taints()
            .iter()
            .filter(|t| t.effect == EFFECT_PREFER_NO_SCHEDULE && !tolerates(tolerations, t))
            .count();
        Ok(n as i64)
    }
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        scores: &mut [NodeScore],
    ) -> Result<(), Status> {
        // Most nodes have no PreferNoSchedule taint: no call per node for them.
        for (s, n) in scores.iter_mut().zip(nodes) {
            s.score = if n.has_prefer_no_schedule_taints {
                self.score(state, pod, n)?
            } else {
                0
            };
        }
        Ok(())
    }
    fn has_normalize(&self) -> bool {
        true
    }
    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::snapshot::testing::{node, pod};

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Toleration {
            key: opt(key),
            operator: opt(op),
            value: opt(value),
            effect: opt(effect),
            toleration_seconds: None,
        }
    }

    fn tainted_node(name: &str, taints: Vec<Taint>) -> Node {
        let mut n = node(name, &[], &[]);
        n.spec.get_or_insert_with(Default::default).taints = Some(taints);
        n
    }

    fn tolerating_pod(tolerations: Vec<Toleration>) -> PodInfo {
        let mut p = pod("pod1", &[]);
        p.spec.get_or_insert_with(Default::default).tolerations = Some(tolerations);
        PodInfo::new(p)
    }

    fn scores(pod: &PodInfo, nodes: Vec<Node>) -> Vec<i64> {
        let state = CycleState::new();
        let mut list: Vec<NodeScore> = nodes
            .into_iter()
            .enumerate()
            .map(|(i, n)| NodeScore {
                node: i,
                score: TaintToleration
                    .score(&state, pod, &NodeInfo::new(n))
                    .expect("score"),
            })
            .collect();
        assert!(TaintToleration
            .normalize(&state, pod, &mut list)
            .is_success());
        list.iter().map(|s| s.score).collect()
    }

    #[test]
    fn nodes_with_fewer_untolerated_prefer_no_schedule_taints_score_higher() {
        let pns = EFFECT_PREFER_NO_SCHEDULE;
        type Case = (&'static str, Vec<Toleration>, Vec<Vec<Taint>>, Vec<i64>);
        let cases: Vec<Case> = vec![
            (
                "tolerated taint beats intolerable taint",
                vec![tol("foo", "Equal", "bar", pns)],
                vec![
                    vec![taint("foo", "bar", pns)],
                    vec![taint("foo", "blah", pns)],
                ],
                vec![100, 0],
            ),
            (
                "the number of tolerated taints does not matter",
                vec![
                    tol("cpu-type", "Equal", "arm64", pns),
                    tol("disk-type", "Equal", "ssd", pns),
                ],
                vec![
                    vec![],
                    vec![taint("cpu-type", "arm64", pns)],
                    vec![
                        taint("cpu-type", "arm64", pns),
                        taint("disk-type", "ssd", pns),
                    ],
                ],
                vec![100, 100, 100],
            ),
            (
                "the more intolerable taints, the lower the score",
                vec![tol("foo", "Equal", "bar", pns)],
                vec![
                    vec![],
                    vec![taint("cpu-type", "arm64", pns)],
                    vec![
                        taint("cpu-type", "arm64", pns),
                        taint("disk-type", "ssd", pns),
                    ],
                ],
                vec![100, 50, 0],
            ),
            (
                "only PreferNoSchedule taints and tolerations count",
                vec![
                    tol("cpu-type", "Equal", "arm64", EFFECT_NO_SCHEDULE),
                    tol("disk-type", "Equal", "ssd", EFFECT_NO_SCHEDULE),
                ],
                vec![
                    vec![],
                    vec![taint("cpu-type", "arm64", EFFECT_NO_SCHEDULE)],
                    vec![
                        taint("cpu-type", "arm64", pns),
                        taint("disk-type", "ssd", pns),
                    ],
                ],
                vec![100, 100, 0],
            ),
            (
                "no tolerations prefers the untainted node",
                vec![],
                vec![vec![], vec![taint("cpu-type", "arm64", pns)]],
                vec![100, 0],
            ),
        ];
        for (name, tolerations, taints, want) in cases {
            let p = tolerating_pod(tolerations);
            let nodes = taints
                .into_iter()
                .enumerate()
                .map(|(i, t)| tainted_node(&format!("node{i}"), t))
                .collect();
            assert_eq!(scores(&p, nodes), want, "{name}");
        }
    }

    #[test]
    fn filter_rejects_untolerated_no_schedule_taints_naming_the_taint() {
        let ns = EFFECT_NO_SCHEDULE;
        let rejected = "node(s) had untolerated taint {dedicated: user1}";
        type Case = (
            &'static str,
            Vec<Toleration>,
            Vec<Taint>,
            Option<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "no tolerations on a tainted node",
                vec![],
                vec![taint("dedicated", "user1", ns)],
                Some(rejected),
            ),
            (
                "matching toleration with empty operator",
                vec![tol("dedicated", "", "user1", ns)],
                vec![taint("dedicated", "user1", ns)],
                None,
            ),
            (
                "toleration for another value",
                vec![tol("dedicated", "Equal", "user2", ns)],
                vec![taint("dedicated", "user1", ns)],
                Some(rejected),
            ),
            (
                "Exists operator tolerates any value",
                vec![tol("foo", "Exists", "", ns)],
                vec![taint("foo", "bar", ns)],
                None,
            ),
            (
                "all taints tolerated by several tolerations",
                vec![
                    tol("dedicated", "Equal", "user2", ns),
                    tol("foo", "Exists", "", ns),
                ],
                vec![taint("dedicated", "user2", ns), taint("foo", "bar", ns)],
                None,
            ),
            (
                "key and value match but the (non-empty) effect differs",
                vec![tol("foo", "Equal", "bar", EFFECT_PREFER_NO_SCHEDULE)],
                vec![taint("foo", "bar", ns)],
                Some("node(s) had untolerated taint {foo: bar}"),
            ),
            (
                "empty toleration effect matches NoSchedule",
                vec![tol("foo", "Equal", "bar", "")],
                vec![taint("foo", "bar", ns)],
                None,
            ),
            (
                "PreferNoSchedule taints never reject",
                vec![tol("dedicated", "Equal", "user2", ns)],
                vec![taint("dedicated", "user1", EFFECT_PREFER_NO_SCHEDULE)],
                None,
            ),
            (
                "no tolerations and a PreferNoSchedule taint",
                vec![],
                vec![taint("dedicated", "user1", EFFECT_PREFER_NO_SCHEDULE)],
                None,
            ),
            (
                "NoExecute taints reject too",
                vec![],
                vec![taint("evict", "", EFFECT_NO_EXECUTE)],
                Some("node(s) had untolerated taint {evict: }"),
            ),
        ];
        for (name, tolerations, taints, want) in cases {
            let p = tolerating_pod(tolerations);
            let n = NodeInfo::new(tainted_node("nodeA", taints));
            let got = TaintToleration.filter(&CycleState::new(), &p, &n);
            match want {
                None => assert!(got.is_success(), "{name}: {got:?}"),
                Some(msg) => {
                    assert_eq!(got.code, Code::UnschedulableAndUnresolvable, "{name}");
                    assert_eq!(got.message(), msg, "{name}");
                }
            }
        }
    }

    #[test]
    fn toleration_matching_follows_kubernetes_semantics() {
        let t = taint("k", "v", EFFECT_NO_SCHEDULE);
        // Empty key with Exists tolerates everything.
        assert!(tolerates(&[tol("", "Exists", "", "")], &t));
        // Empty key with Equal compares only the value.
        assert!(tolerates(&[tol("", "Equal", "v", "")], &t));
        assert!(!tolerates(&[tol("", "Equal", "x", "")], &t));
        // An unknown operator tolerates nothing.
        assert!(!tolerates(&[tol("k", "Gt", "v", "")], &t));
        // The effect must match when set.
        assert!(!tolerates(&[tol("k", "Exists", "", EFFECT_NO_EXECUTE)], &t));
        assert!(tolerates(&[tol("k", "Exists", "", EFFECT_NO_SCHEDULE)], &t));
        // A taint without value is matched by an Equal toleration without value.
        let bare = Taint {
            key: "k".into(),
            value: None,
            effect: EFFECT_NO_SCHEDULE.into(),
            time_added: None,
        };
        assert!(tolerates(&[tol("k", "Equal", "", "")], &bare));
        assert!(!tolerates(&[], &bare));
    }

    #[test]
    fn node_change_hint_queues_only_when_the_node_becomes_tolerated() {
        let p = tolerating_pod(vec![tol("dedicated", "Equal", "user2", EFFECT_NO_SCHEDULE)]);
        let user = |v: &str| taint("dedicated", v, EFFECT_NO_SCHEDULE);
        // Added node with an untolerated taint: skip.
        let n1 = tainted_node("nodeA", vec![user("user1")]);
        assert!(!TaintToleration::node_change_hint(&p, None, &n1));
        // Added node whose taint is tolerated: queue.
        let n2 = tainted_node("nodeA", vec![user("user2")]);
        assert!(TaintToleration::node_change_hint(&p, None, &n2));
        // Still untolerated after adding another taint: skip.
        let n3 = tainted_node("nodeA", vec![user("user1"), user("user3")]);
        assert!(!TaintToleration::node_change_hint(&p, Some(&n1), &n3));
        // Taint changed to a tolerated one: queue.
        assert!(TaintToleration::node_change_hint(&p, Some(&n1), &n2));
    }

    #[test]
    fn default_normalize_scales_and_reverses() {
        let mut s = vec![
            NodeScore { node: 0, score: 2 },
            NodeScore { node: 1, score: 11 },
            NodeScore { node: 2, score: 4 },
        ];
        default_normalize_score(100, false, &mut s);
        assert_eq!(
            s.iter().map(|s| s.score).collect::<Vec<_>>(),
            vec![18, 100, 36]
        );
        let mut z = vec![NodeScore { node: 0, score: 0 }];
        default_normalize_score(100, false, &mut z);
        assert_eq!(z[0].score, 0);
        default_normalize_score(100, true, &mut z);
        assert_eq!(z[0].score, 100);
    }
}
