//! SchedulingGates: a pod with `spec.schedulingGates` stays out of the active queue until all
//! its gates are removed. Mirrors `pkg/scheduler/framework/plugins/schedulinggates` of
//! Kubernetes v1.32.

use std::sync::Arc;

use serde_json::Value;

use crate::framework::{ClusterEvent, Plugin, PreEnqueuePlugin, Status};
use crate::types::PodInfo;

pub const NAME: &str = "SchedulingGates";

pub struct SchedulingGates;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(SchedulingGates))
}

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::PodUpdateGates]
    }
    /// Only the gated pod's own update (its gates removed) can let it in.
    fn hint(&self, pod: &PodInfo, event: ClusterEvent, changed: Option<&PodInfo>) -> bool {
        match (event, changed) {
            (ClusterEvent::PodUpdateGates, Some(updated)) => updated.uid() == pod.uid(),
            _ => true,
        }
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
}

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let gates = pod
            .pod()
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_deref())
            .unwrap_or(&[]);
        if gates.is_empty() {
            return Status::success();
        }
        let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
        Status::unresolvable(format!(
            "waiting for scheduling gates: [{}]",
            names.join(" ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::snapshot::testing::pod;
    use k8s_openapi::api::core::v1::PodSchedulingGate;

    fn gated(name: &str, gates: Option<&[&str]>) -> PodInfo {
        let mut p = pod(name, &[]);
        p.spec.get_or_insert_with(Default::default).scheduling_gates = gates.map(|g| {
            g.iter()
                .map(|n| PodSchedulingGate {
                    name: n.to_string(),
                })
                .collect()
        });
        PodInfo::new(p)
    }

    #[test]
    fn gated_pods_wait_with_their_gate_names() {
        type Case = (
            &'static str,
            Option<&'static [&'static str]>,
            Option<&'static str>,
        );
        let cases: [Case; 4] = [
            ("pod without gates", None, None),
            ("empty gate list", Some(&[]), None),
            (
                "one gate",
                Some(&["foo"]),
                Some("waiting for scheduling gates: [foo]"),
            ),
            (
                "two gates",
                Some(&["foo", "bar"]),
                Some("waiting for scheduling gates: [foo bar]"),
            ),
        ];
        for (name, gates, want) in cases {
            let got = SchedulingGates.pre_enqueue(&gated("p", gates));
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
    fn gate_removal_hint_queues_only_the_updated_pod() {
        let target = gated("p", Some(&["foo"]));
        let same = gated("p", None);
        let other = gated("q", None);
        let ev = ClusterEvent::PodUpdateGates;
        assert!(SchedulingGates.hint(&target, ev, Some(&same)));
        assert!(!SchedulingGates.hint(&target, ev, Some(&other)));
        assert_eq!(SchedulingGates.events(), vec![ev]);
    }
}
