//! Pod admission (the kubelet's general predicates): a pod bound to the node is rejected —
//! phase Failed, with the predicate's reason — when the node has no room for it (pods, CPU,
//! memory), when it does not match the node's labels (nodeSelector, required node
//! affinity), or when it does not tolerate a NoExecute taint of the node.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, Pod, Toleration};

use super::actions::{containers, init_containers, is_restartable_init};
use super::resources::amounts;

/// Why a pod was rejected: the status reason and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// The CPU (millicores) and memory (bytes) a pod asks for: the larger of what its
/// containers and sidecars need together and what its biggest init container needs.
pub fn pod_requests(pod: &Pod) -> (i64, i64) {
    let mut cpu = 0;
    let mut mem = 0;
    for c in containers(pod).iter().chain(
        init_containers(pod)
            .iter()
            .filter(|c| is_restartable_init(c)),
    ) {
        let a = amounts(c);
        cpu += a.cpu_request.unwrap_or(0);
        mem += a.memory_request.unwrap_or(0);
    }
    for c in init_containers(pod)
        .iter()
        .filter(|c| !is_restartable_init(c))
    {
        let a = amounts(c);
        cpu = cpu.max(a.cpu_request.unwrap_or(0));
        mem = mem.max(a.memory_request.unwrap_or(0));
    }
    if let Some(o) = pod.spec.as_ref().and_then(|s| s.overhead.as_ref()) {
        cpu += o
            .get("cpu")
            .and_then(super::resources::milli_value)
            .unwrap_or(0);
        mem += o
            .get("memory")
            .and_then(super::resources::value)
            .unwrap_or(0);
    }
    (cpu, mem)
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or(&[]);
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => !value.is_some_and(|v| values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(limit)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|x| x.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                v > limit
            } else {
                v < limit
            }
        }
        _ => false,
    }
}

/// Whether the pod's nodeSelector and required node affinity accept the node.
pub fn node_matches(pod: &Pod, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let spec = pod.spec.as_ref();
    if let Some(sel) = spec.and_then(|s| s.node_selector.as_ref()) {
        if sel.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return false;
        }
    }
    let Some(required) = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    let name = node.metadata.name.as_deref();
    required.node_selector_terms.iter().any(|t| {
        let exprs = t.match_expressions.as_deref().unwrap_or(&[]);
        let fields = t.match_fields.as_deref().unwrap_or(&[]);
        if exprs.is_empty() && fields.is_empty() {
            return false;
        }
        exprs
            .iter()
            .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
            && fields
                .iter()
                .all(|r| r.key == "metadata.name" && requirement_matches(r, name))
    })
}

fn tolerates(t: &Toleration, key: &str, value: &str, effect: &str) -> bool {
    if let Some(e) = t.effect.as_deref().filter(|e| !e.is_empty()) {
        if e != effect {
            return false;
        }
    }
    let tkey = t.key.as_deref().unwrap_or_default();
    if !tkey.is_empty() && tkey != key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        _ => t.value.as_deref().unwrap_or_default() == value,
    }
}

/// The sysctls a pod may set without the node allowing more (Kubernetes' safe set).
const SAFE_SYSCTLS: [&str; 12] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// The first sysctl of the pod outside the safe set.
fn forbidden_sysctl(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| s.name.replace('/', "."))
        .find(|name| !SAFE_SYSCTLS.contains(&name.as_str()))
}

/// Admit `pod` next to the pods the node already runs (`admitted`, not terminal).
pub fn admit(
    pod: &Pod,
    admitted: &[Arc<Pod>],
    node: Option<&Node>,
    max_pods: u32,
) -> Result<(), Rejection> {
    if let Some(name) = forbidden_sysctl(pod) {
        return Err(Rejection {
            reason: "SysctlForbidden".into(),
            message: format!("forbidden sysctl: {name:?} not allowlisted"),
        });
    }
    let insufficient = |resource: &str, requested: i64, used: i64, capacity: i64| {
        Rejection {
        reason: format!("OutOf{resource}"),
        message: format!(
            "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
        ),
    }
    };
    let alloc = node
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.allocatable.as_ref());
    let pods_capacity = alloc
        .and_then(|a| a.get("pods"))
        .and_then(super::resources::value)
        .unwrap_or(max_pods as i64);
    let used = admitted.len() as i64;
    if used + 1 > pods_capacity {
        return Err(insufficient("pods", 1, used, pods_capacity));
    }
    let (cpu, mem) = pod_requests(pod);
    if let Some(alloc) = alloc {
        let (used_cpu, used_mem) = admitted
            .iter()
            .map(|p| pod_requests(p))
            .fold((0, 0), |(c, m), (pc, pm)| (c + pc, m + pm));
        if cpu > 0 {
            if let Some(cap) = alloc.get("cpu").and_then(super::resources::milli_value) {
                if used_cpu + cpu > cap {
                    return Err(insufficient("cpu", cpu, used_cpu, cap));
                }
            }
        }
        if mem > 0 {
            if let Some(cap) = alloc.get("memory").and_then(super::resources::value) {
                if used_mem + mem > cap {
                    return Err(insufficient("memory", mem, used_mem, cap));
                }
            }
        }
    }
    if let Some(node) = node {
        if !node_matches(pod, node) {
            return Err(Rejection {
                reason: "NodeAffinity".into(),
                message: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector".into(),
            });
        }
        let tolerations = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or(&[]);
        let untolerated = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter(|t| t.effect == "NoExecute")
            .any(|t| {
                !tolerations.iter().any(|tol| {
                    tolerates(
                        tol,
                        &t.key,
                        t.value.as_deref().unwrap_or_default(),
                        &t.effect,
                    )
                })
            });
        if untolerated {
            return Err(Rejection {
                reason: "TaintToleration".into(),
                message: "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate".into(),
            });
        }
    }
    Ok(())
}
