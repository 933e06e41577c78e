//! NodePorts: a pod's host ports must be free on the node. A port bound on `0.0.0.0`
//! conflicts with the same protocol and port on any IP, and the other way round.
//! Mirrors `pkg/scheduler/framework/plugins/nodeports` of Kubernetes v1.32.

use std::sync::Arc;

use serde_json::Value;

use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, Status,
};
use crate::snapshot::Snapshot;
use crate::types::{HostPort, NodeInfo, PodInfo};

pub const NAME: &str = "NodePorts";

pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

const BIND_ALL: &str = "0.0.0.0";

pub struct NodePorts;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodePorts))
}

/// Whether `want` clashes with a port already in use (`HostPortInfo.CheckConflict`).
fn conflicts(want: &HostPort, used: &HostPort) -> bool {
    want.port > 0
        && want.port == used.port
        && want.protocol == used.protocol
        && (want.ip == BIND_ALL || used.ip == BIND_ALL || want.ip == used.ip)
}

/// Whether none of `wanted` clashes with any of `used`.
pub fn fits_ports(wanted: &[HostPort], used: &[HostPort]) -> bool {
    !wanted.iter().any(|w| used.iter().any(|u| conflicts(w, u)))
}

/// Whether the pod's host ports are free on the node.
pub fn fits(pod: &PodInfo, node: &NodeInfo) -> bool {
    fits_ports(&pod.host_ports, &node.used_ports)
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::PodDelete, ClusterEvent::NodeAdd]
    }
    /// A deleted pod helps only if it was placed (bound or nominated) and held one of the
    /// ports this pod wants.
    fn hint(&self, pod: &PodInfo, event: ClusterEvent, changed: Option<&PodInfo>) -> bool {
        let (ClusterEvent::PodDelete, Some(deleted)) = (event, changed) else {
            return true;
        };
        let nominated = deleted.nominated_node_name();
        if deleted.node_name().is_empty() && nominated.is_empty() {
            return false;
        }
        !deleted.host_ports.is_empty() && !fits_ports(&pod.host_ports, &deleted.host_ports)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodePorts {
    /// Nothing to precompute: `PodInfo` already holds the pod's host ports. Pods without host
    /// ports skip the Filter.
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        if pod.host_ports.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        (PreFilterResult::default(), Status::success())
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if fits(pod, node) {
            Status::success()
        } else {
            Status::unschedulable(ERR_REASON)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::snapshot::testing::{node, pod};
    use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodStatus};

    /// A pod whose container asks for host ports given as "PROTO/IP/PORT".
    fn port_pod(name: &str, ports: &[&str]) -> Pod {
        let mut p = pod(name, &[&[]]);
        let spec = p.spec.get_or_insert_with(Default::default);
        spec.containers[0].ports = Some(
            ports
                .iter()
                .map(|s| {
                    let parts: Vec<&str> = s.split('/').collect();
                    ContainerPort {
                        protocol: Some(parts[0].to_string()),
                        host_ip: Some(parts[1].to_string()),
                        host_port: parts[2].parse().ok(),
                        container_port: 80,
                        ..Default::default()
                    }
                })
                .collect(),
        );
        p
    }

    fn node_with(ports: &[&str]) -> NodeInfo {
        let mut n = NodeInfo::new(node("m1", &[], &[]));
        let mut existing = port_pod("existing", ports);
        existing.spec.get_or_insert_with(Default::default).node_name = Some("m1".into());
        n.add_pod(Arc::new(PodInfo::new(existing)));
        n
    }

    #[test]
    fn host_port_conflicts_follow_kubernetes() {
        let cases: &[(&str, &[&str], &[&str], bool)] = &[
            (
                "other port",
                &["UDP/127.0.0.1/8080"],
                &["UDP/127.0.0.1/9090"],
                true,
            ),
            (
                "same udp port",
                &["UDP/127.0.0.1/8080"],
                &["UDP/127.0.0.1/8080"],
                false,
            ),
            (
                "same tcp port",
                &["TCP/127.0.0.1/8080"],
                &["TCP/127.0.0.1/8080"],
                false,
            ),
            (
                "different host ip",
                &["TCP/127.0.0.1/8080"],
                &["TCP/127.0.0.2/8080"],
                true,
            ),
            (
                "different protocol",
                &["UDP/127.0.0.1/8080"],
                &["TCP/127.0.0.1/8080"],
                true,
            ),
            (
                "second udp port conflict",
                &["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"],
                &["UDP/127.0.0.1/8080"],
                false,
            ),
            (
                "first tcp port conflict",
                &["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
                &["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"],
                false,
            ),
            (
                "first tcp port conflict due to 0.0.0.0 hostIP",
                &["TCP/0.0.0.0/8001"],
                &["TCP/127.0.0.1/8001"],
                false,
            ),
            (
                "TCP hostPort conflict due to 0.0.0.0 hostIP",
                &["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"],
                &["TCP/127.0.0.1/8001"],
                false,
            ),
            (
                "second tcp port conflict to 0.0.0.0 hostIP",
                &["TCP/127.0.0.1/8001"],
                &["TCP/0.0.0.0/8001"],
                false,
            ),
            (
                "second different protocol",
                &["UDP/127.0.0.1/8001"],
                &["TCP/0.0.0.0/8001"],
                true,
            ),
            (
                "UDP hostPort conflict due to 0.0.0.0 hostIP",
                &["UDP/127.0.0.1/8001"],
                &["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"],
                false,
            ),
            (
                "empty host IP means 0.0.0.0 and empty protocol TCP",
                &["//8001"],
                &["TCP/127.0.0.1/8001"],
                false,
            ),
        ];
        for (name, want, existing, ok) in cases {
            let p = PodInfo::new(port_pod("p", want));
            let n = node_with(existing);
            let mut state = CycleState::new();
            let (_, pre) = NodePorts.pre_filter(&mut state, &p, &Snapshot::new());
            assert!(pre.is_success(), "{name}: {pre:?}");
            let got = NodePorts.filter(&state, &p, &n);
            if *ok {
                assert!(got.is_success(), "{name}: {got:?}");
            } else {
                assert_eq!(got.code, Code::Unschedulable, "{name}");
                assert_eq!(got.message(), ERR_REASON, "{name}");
            }
        }
    }

    #[test]
    fn pods_without_host_ports_skip_the_filter() {
        let mut state = CycleState::new();
        let (_, s) =
            NodePorts.pre_filter(&mut state, &PodInfo::new(pod("p", &[])), &Snapshot::new());
        assert_eq!(s.code, Code::Skip);
        // Host ports of non-sidecar init containers are not considered.
        let mut p = pod("p", &[]);
        p.spec.get_or_insert_with(Default::default).init_containers = Some(vec![Container {
            name: "init".into(),
            ports: Some(vec![ContainerPort {
                container_port: 8001,
                host_port: Some(8001),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }]);
        let (_, s) = NodePorts.pre_filter(&mut state, &PodInfo::new(p), &Snapshot::new());
        assert_eq!(s.code, Code::Skip);
    }

    #[test]
    fn fits_checks_every_wanted_port() {
        let cases: &[(&str, &[&str], &[&str], bool)] = &[
            (
                "non-conflicting ports",
                &["TCP/127.0.0.1/80"],
                &["TCP/127.0.0.1/9090"],
                true,
            ),
            (
                "multiple non-conflicting ports",
                &[
                    "TCP/127.0.0.1/80",
                    "TCP/127.0.1.1/80",
                    "TCP/127.0.1.1/90",
                    "TCP/127.0.1.1/100",
                ],
                &[
                    "TCP/127.0.0.1/9090",
                    "TCP/127.0.0.1/9191",
                    "TCP/127.0.1.1/8080",
                ],
                true,
            ),
            (
                "same ports on different protocols",
                &["TCP/127.0.0.1/80"],
                &["UDP/127.0.0.1/80"],
                true,
            ),
            (
                "conflicting ports",
                &["TCP/127.0.0.1/80"],
                &["TCP/127.0.0.1/80"],
                false,
            ),
            (
                "multiple ports, some conflicting",
                &[
                    "TCP/127.0.0.1/80",
                    "TCP/127.0.1.1/80",
                    "TCP/127.0.1.1/90",
                    "TCP/127.0.1.1/100",
                ],
                &[
                    "TCP/127.0.0.1/9090",
                    "TCP/127.0.1.1/90",
                    "TCP/127.0.1.1/8080",
                ],
                false,
            ),
        ];
        for (name, want, existing, ok) in cases {
            let p = PodInfo::new(port_pod("p", want));
            assert_eq!(fits(&p, &node_with(existing)), *ok, "{name}");
        }
    }

    #[test]
    fn delete_hint_queues_only_for_released_ports() {
        let target = PodInfo::new(port_pod("p", &["TCP//8080"]));
        let ev = ClusterEvent::PodDelete;
        let placed = |ports: &[&str]| {
            let mut p = port_pod("d", ports);
            p.spec.get_or_insert_with(Default::default).node_name = Some("fake-node".into());
            PodInfo::new(p)
        };
        // Unscheduled pod: skip.
        let unscheduled = PodInfo::new(port_pod("d", &["TCP//8080"]));
        assert!(!NodePorts.hint(&target, ev, Some(&unscheduled)));
        // Nominated (not bound) pod holding the port: queue.
        let mut nominated = port_pod("d", &["TCP//8080"]);
        nominated.status = Some(PodStatus {
            nominated_node_name: Some("fake-node".into()),
            ..Default::default()
        });
        assert!(NodePorts.hint(&target, ev, Some(&PodInfo::new(nominated))));
        // Scheduled pod without host ports: skip.
        assert!(!NodePorts.hint(&target, ev, Some(&placed(&[]))));
        // Scheduled pod with an unrelated port: skip.
        assert!(!NodePorts.hint(&target, ev, Some(&placed(&["TCP//8081"]))));
        // Scheduled pod releasing the wanted port: queue.
        assert!(NodePorts.hint(&target, ev, Some(&placed(&["TCP//8080"]))));
    }
}
