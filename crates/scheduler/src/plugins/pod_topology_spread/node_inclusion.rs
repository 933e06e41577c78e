//! Which nodes count as domains for a spreading constraint (`nodeAffinityPolicy` and
//! `nodeTaintsPolicy`): the pod's required node affinity with its `nodeSelector`
//! (`nodeaffinity.GetRequiredNodeAffinity`) and its tolerations of `NoSchedule`/`NoExecute`
//! taints. A private copy, parsed once per pod.

use capstan_api::selector::{Operator, Requirement};
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Toleration};

use crate::types::{NodeInfo, PodInfo};

/// A node selector term; `None` when it could not be parsed (it then matches no node).
#[derive(Debug, Clone)]
struct Term {
    labels: Vec<Requirement>,
    /// `metadata.name` In (true) / NotIn (false) a value.
    names: Vec<(bool, String)>,
}

/// The pod's required node affinity and tolerations.
#[derive(Debug, Clone, Default)]
pub(super) struct NodeInclusion {
    /// `spec.nodeSelector` as key/value pairs.
    node_selector: Vec<(String, String)>,
    /// Required node affinity terms (ORed), when the pod has a required node selector.
    terms: Option<Vec<Option<Term>>>,
    tolerations: Vec<Toleration>,
}

fn parse_expression(r: &NodeSelectorRequirement) -> Option<Requirement> {
    let op = match r.operator.as_str() {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::GreaterThan,
        "Lt" => Operator::LessThan,
        _ => return None,
    };
    Requirement::new(r.key.clone(), op, r.values.clone().unwrap_or_default()).ok()
}

fn parse_field(r: &NodeSelectorRequirement) -> Option<(bool, String)> {
    if r.key != "metadata.name" {
        return None;
    }
    let [value] = r.values.as_deref().unwrap_or(&[]) else {
        return None;
    };
    match r.operator.as_str() {
        "In" => Some((true, value.clone())),
        "NotIn" => Some((false, value.clone())),
        _ => None,
    }
}

fn parse_term(t: &NodeSelectorTerm) -> Option<Term> {
    let labels = t
        .match_expressions
        .iter()
        .flatten()
        .map(parse_expression)
        .collect::<Option<Vec<_>>>()?;
    let names = t
        .match_fields
        .iter()
        .flatten()
        .map(parse_field)
        .collect::<Option<Vec<_>>>()?;
    Some(Term { labels, names })
}

impl NodeInclusion {
    pub(super) fn new(pod: &PodInfo) -> NodeInclusion {
        let spec = pod.pod.spec.as_ref();
        let node_selector = spec
            .and_then(|s| s.node_selector.as_ref())
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let terms = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|sel| sel.node_selector_terms.iter().map(parse_term).collect());
        let tolerations = spec.and_then(|s| s.tolerations.clone()).unwrap_or_default();
        NodeInclusion {
            node_selector,
            terms,
            tolerations,
        }
    }

    /// The pod has neither a `nodeSelector` nor required node affinity: every node matches.
    pub(super) fn matches_every_node(&self) -> bool {
        self.node_selector.is_empty() && self.terms.is_none()
    }

    /// The node satisfies the pod's `nodeSelector` and required node affinity.
    pub(super) fn matches_affinity(&self, node: &NodeInfo) -> bool {
        let labels = node.labels();
        if !self
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
        {
            return false;
        }
        let Some(terms) = &self.terms else {
            return true;
        };
        terms.iter().flatten().any(|t| {
            (!t.labels.is_empty() || !t.names.is_empty())
                && t.labels
                    .iter()
                    .all(|r| r.matches_fn(|k| labels.get(k).map(String::as_str)))
                && t.names
                    .iter()
                    .all(|(is_in, v)| (node.name() == v) == *is_in)
        })
    }

    /// The pod tolerates every `NoSchedule` and `NoExecute` taint of the node.
    pub(super) fn tolerates_taints(&self, node: &NodeInfo) -> bool {
        node.taints()
            .iter()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .all(|taint| {
                self.tolerations.iter().any(|tol| {
                    let effect = tol.effect.as_deref().unwrap_or("");
                    let key = tol.key.as_deref().unwrap_or("");
                    (effect.is_empty() || effect == taint.effect)
                        && (key.is_empty() || key == taint.key)
                        && match tol.operator.as_deref().unwrap_or("") {
                            "" | "Equal" => {
                                tol.value.as_deref().unwrap_or("")
                                    == taint.value.as_deref().unwrap_or("")
                            }
                            "Exists" => true,
                            _ => false,
                        }
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::testing::{node, pod};
    use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelector, PodSpec, Taint};

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
