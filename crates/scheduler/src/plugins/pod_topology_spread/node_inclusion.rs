//! Which nodes count as domains for a spreading constraint (`nodeAffinityPolicy` and
//! `nodeTaintsPolicy`): the pod's required node affinity with its `nodeSelector` (NodeAffinity's
//! matcher) and its tolerations of `NoSchedule`/`NoExecute` taints (TaintToleration's), parsed
//! once per pod.

use k8s_openapi::api::core::v1::Toleration;

use crate::plugins::node_affinity::RequiredNodeAffinity;
use crate::plugins::taint_toleration::tolerates;
use crate::types::{NodeInfo, PodInfo};

/// The pod's required node affinity and tolerations.
#[derive(Debug, Clone, Default)]
pub(super) struct NodeInclusion {
    affinity: RequiredNodeAffinity,
    tolerations: Vec<Toleration>,
}

impl NodeInclusion {
    pub(super) fn new(pod: &PodInfo) -> NodeInclusion {
        NodeInclusion {
            affinity: RequiredNodeAffinity::from_pod(pod),
            tolerations: pod
                .pod()
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.clone())
                .unwrap_or_default(),
        }
    }

    /// The pod has neither a `nodeSelector` nor required node affinity: every node matches.
    pub(super) fn matches_every_node(&self) -> bool {
        self.affinity.is_empty()
    }

    /// The node satisfies the pod's `nodeSelector` and required node affinity.
    pub(super) fn matches_affinity(&self, node: &NodeInfo) -> bool {
        self.affinity.matches(node)
    }

    /// The pod tolerates every `NoSchedule` and `NoExecute` taint of the node.
    pub(super) fn tolerates_taints(&self, node: &NodeInfo) -> bool {
        node.taints()
            .iter()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .all(|taint| tolerates(&self.tolerations, taint))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::testing::{node, pod};
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
        Taint,
    };

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| s.to_string()).collect()),
        }
    }

    fn with_terms(terms: Vec<NodeSelectorTerm>) -> PodInfo {
        let mut p = pod("p", &[]);
        p.spec.get_or_insert_with(PodSpec::default).affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: terms,
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        PodInfo::new(p)
    }

    #[test]
    fn required_node_affinity_terms_are_ored_and_expressions_anded() {
        let n = NodeInfo::new(node("n1", &[], &[("zone", "a"), ("gen", "5")]));
        let term = |exprs: Vec<NodeSelectorRequirement>| NodeSelectorTerm {
            match_expressions: Some(exprs),
            match_fields: None,
        };
        let cases = vec![
            (vec![term(vec![req("zone", "In", &["a", "b"])])], true),
            (vec![term(vec![req("zone", "NotIn", &["a"])])], false),
            (
                vec![term(vec![
                    req("zone", "In", &["a"]),
                    req("gen", "Gt", &["6"]),
                ])],
                false,
            ),
            (
                vec![
                    term(vec![req("zone", "In", &["b"])]),
                    term(vec![req("gen", "Lt", &["6"])]),
                ],
                true,
            ),
            (vec![term(vec![req("zone", "Bogus", &["a"])])], false),
            (vec![NodeSelectorTerm::default()], false),
            (vec![], false),
            (
                vec![NodeSelectorTerm {
                    match_expressions: None,
                    match_fields: Some(vec![req("metadata.name", "In", &["n1"])]),
                }],
                true,
            ),
            (
                vec![NodeSelectorTerm {
                    match_expressions: None,
                    match_fields: Some(vec![req("metadata.name", "NotIn", &["n1"])]),
                }],
                false,
            ),
        ];
        for (i, (terms, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                NodeInclusion::new(&with_terms(terms)).matches_affinity(&n),
                want,
                "case {i}"
            );
        }
    }

    #[test]
    fn node_selector_and_taints() {
        let mut p = pod("p", &[]);
        let spec = p.spec.get_or_insert_with(PodSpec::default);
        spec.node_selector = Some([("zone".to_string(), "a".to_string())].into());
        spec.tolerations = Some(vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        }]);
        let inc = NodeInclusion::new(&PodInfo::new(p));
        let mut tainted = node("n", &[], &[("zone", "a")]);
        tainted.spec.get_or_insert_with(Default::default).taints = Some(vec![
            Taint {
                key: "dedicated".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            },
            Taint {
                key: "soft".into(),
                effect: "PreferNoSchedule".into(),
                ..Default::default()
            },
        ]);
        let tainted = NodeInfo::new(tainted);
        assert!(inc.matches_affinity(&tainted));
        assert!(inc.tolerates_taints(&tainted));
        let other = NodeInfo::new(node("o", &[], &[("zone", "b")]));
        assert!(!inc.matches_affinity(&other));
        let mut untolerated = node("u", &[], &[]);
        untolerated.spec.get_or_insert_with(Default::default).taints = Some(vec![Taint {
            key: "x".into(),
            effect: "NoExecute".into(),
            ..Default::default()
        }]);
        assert!(!inc.tolerates_taints(&NodeInfo::new(untolerated)));
    }
}
