//! NodeUnschedulable: rejects nodes with `spec.unschedulable` (cordoned) unless the pod
//! tolerates the `node.kubernetes.io/unschedulable:NoSchedule` taint.
//! Mirrors `pkg/scheduler/framework/plugins/nodeunschedulable` of Kubernetes v1.32.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use serde_json::Value;

use crate::framework::{ClusterEvent, CycleState, FilterPlugin, Plugin, Status};
use crate::plugins::taint_toleration::{pod_tolerations, tolerates_parts, EFFECT_NO_SCHEDULE};
use crate::types::{NodeInfo, PodInfo};

pub const NAME: &str = "NodeUnschedulable";

/// The taint a pod must tolerate to land on an unschedulable node.
pub const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";

pub struct NodeUnschedulable;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodeUnschedulable))
}

fn unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

fn tolerates_unschedulable(pod: &PodInfo) -> bool {
    tolerates_parts(
        pod_tolerations(pod),
        TAINT_NODE_UNSCHEDULABLE,
        "",
        EFFECT_NO_SCHEDULE,
    )
}

impl NodeUnschedulable {
    /// QueueingHint for a node added (`old` None) or updated: retry when a schedulable node
    /// was added or a node went from unschedulable to schedulable.
    pub fn node_change_hint(_pod: &PodInfo, old: Option<&Node>, new: &Node) -> bool {
        match old {
            None => !unschedulable(new),
            Some(o) => unschedulable(o) && !unschedulable(new),
        }
    }

    /// QueueingHint for a pod's tolerations update: retry the pod itself once it tolerates
    /// the unschedulable taint.
    pub fn pod_toleration_change_hint(pod: &PodInfo, updated: &PodInfo) -> bool {
        pod.uid() == updated.uid() && tolerates_unschedulable(updated)
    }
}

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> Vec<ClusterEvent> {
        // `spec.unschedulable` changes are reported as taint updates. Kubernetes also
        // registers Pod/UpdatePodToleration, which has no ClusterEvent here.
        vec![ClusterEvent::NodeAdd, ClusterEvent::NodeUpdateTaint]
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable || tolerates_unschedulable(pod) {
            return Status::success();
        }
        Status::unresolvable(ERR_REASON_UNSCHEDULABLE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::snapshot::testing::{node, pod};
    use k8s_openapi::api::core::v1::Toleration;

    fn node_with(unschedulable: Option<bool>) -> Node {
        let mut n = node("n", &[], &[]);
        n.spec.get_or_insert_with(Default::default).unschedulable = unschedulable;
        n
    }

    fn pod_with(tolerations: Option<Vec<Toleration>>) -> PodInfo {
        let mut p = pod("p", &[]);
        p.spec.get_or_insert_with(Default::default).tolerations = tolerations;
        PodInfo::new(p)
    }

    fn unschedulable_toleration() -> Toleration {
        Toleration {
            key: Some(TAINT_NODE_UNSCHEDULABLE.into()),
            effect: Some(EFFECT_NO_SCHEDULE.into()),
            ..Default::default()
        }
    }

    #[test]
    fn unschedulable_nodes_are_rejected_unless_tolerated() {
        let cases = [
            ("unschedulable node", pod_with(None), Some(true), false),
            ("normal node", pod_with(None), Some(false), true),
            ("unset unschedulable", pod_with(None), None, true),
            (
                "pod tolerating the unschedulable taint",
                pod_with(Some(vec![unschedulable_toleration()])),
                Some(true),
                true,
            ),
            (
                "pod tolerating everything",
                pod_with(Some(vec![Toleration {
                    operator: Some("Exists".into()),
                    ..Default::default()
                }])),
                Some(true),
                true,
            ),
            (
                "toleration for NoExecute only",
                pod_with(Some(vec![Toleration {
                    key: Some(TAINT_NODE_UNSCHEDULABLE.into()),
                    operator: Some("Exists".into()),
                    effect: Some("NoExecute".into()),
                    ..Default::default()
                }])),
                Some(true),
                false,
            ),
        ];
        for (name, p, u, fits) in cases {
            let got =
                NodeUnschedulable.filter(&CycleState::new(), &p, &NodeInfo::new(node_with(u)));
            if fits {
                assert!(got.is_success(), "{name}: {got:?}");
            } else {
                assert_eq!(got.code, Code::UnschedulableAndUnresolvable, "{name}");
                assert_eq!(got.message(), ERR_REASON_UNSCHEDULABLE, "{name}");
            }
        }
    }

    #[test]
    fn node_change_hint_queues_for_schedulable_nodes() {
        let p = pod_with(None);
        let (on, off) = (node_with(Some(true)), node_with(Some(false)));
        assert!(NodeUnschedulable::node_change_hint(&p, None, &off));
        assert!(!NodeUnschedulable::node_change_hint(&p, None, &on));
        assert!(NodeUnschedulable::node_change_hint(&p, Some(&on), &off));
        assert!(!NodeUnschedulable::node_change_hint(&p, Some(&off), &off));
        assert!(!NodeUnschedulable::node_change_hint(&p, Some(&off), &on));
        assert!(!NodeUnschedulable::node_change_hint(&p, Some(&on), &on));
    }

    #[test]
    fn toleration_update_hint_queues_only_the_pod_now_tolerating() {
        let p = pod_with(None);
        let updated = pod_with(Some(vec![unschedulable_toleration()]));
        assert!(NodeUnschedulable::pod_toleration_change_hint(&p, &updated));
        let unrelated = pod_with(Some(vec![Toleration {
            key: Some("foo".into()),
            effect: Some(EFFECT_NO_SCHEDULE.into()),
            ..Default::default()
        }]));
        assert!(!NodeUnschedulable::pod_toleration_change_hint(
            &p, &unrelated
        ));
        let mut other = pod("other", &[]);
        other.spec.get_or_insert_with(Default::default).tolerations =
            Some(vec![unschedulable_toleration()]);
        assert!(!NodeUnschedulable::pod_toleration_change_hint(
            &p,
            &PodInfo::new(other)
        ));
    }
}
