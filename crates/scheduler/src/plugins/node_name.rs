//! NodeName: a pod naming a node in `spec.nodeName` fits only that node.
//! Mirrors `pkg/scheduler/framework/plugins/nodename` of Kubernetes v1.32, which has only a
//! Filter (no PreFilter narrowing the nodes).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::{ClusterEvent, CycleState, FilterPlugin, Plugin, Status};
use crate::types::{NodeInfo, PodInfo};

pub const NAME: &str = "NodeName";

pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

pub struct NodeName;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodeName))
}

/// Whether the pod may run on the node as far as `spec.nodeName` is concerned.
pub fn fits(pod: &PodInfo, node: &NodeInfo) -> bool {
    let want = pod.node_name();
    want.is_empty() || want == node.name()
}

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::NodeAdd]
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if fits(pod, node) {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::snapshot::testing::{node, pod};

    #[test]
    fn only_the_named_node_fits() {
        let cases = [
            ("no host name given", None, "foo", true),
            ("host name matches", Some("foo"), "foo", true),
            ("host name differs", Some("bar"), "foo", false),
            ("empty host name", Some(""), "foo", true),
        ];
        for (name, want_node, node_name, fits) in cases {
            let mut p = pod("p", &[]);
            p.spec.get_or_insert_with(Default::default).node_name = want_node.map(String::from);
            let n = NodeInfo::new(node(node_name, &[], &[]));
            let got = NodeName.filter(&CycleState::new(), &PodInfo::new(p), &n);
            if fits {
                assert!(got.is_success(), "{name}: {got:?}");
            } else {
                assert_eq!(got.code, Code::UnschedulableAndUnresolvable, "{name}");
                assert_eq!(got.message(), ERR_REASON, "{name}");
            }
        }
    }

    #[test]
    fn has_no_prefilter_and_retries_on_node_add() {
        assert!(NodeName.as_pre_filter().is_none());
        assert_eq!(NodeName.events(), vec![ClusterEvent::NodeAdd]);
    }
}
