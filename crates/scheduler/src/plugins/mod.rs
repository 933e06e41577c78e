//! The in-tree plugins and the name → constructor registry (`pkg/scheduler/framework/plugins`).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub mod default_binder;
pub mod default_preemption;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources;
pub mod node_unschedulable;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod scheduling_gates;
pub mod taint_toleration;
pub mod volume_restrictions;

/// Builds a plugin from its `pluginConfig` args (`Value::Null` when none are given). An error
/// names the offending field relative to the args, e.g. `scoringStrategy.type: Unsupported value`.
pub type Constructor = fn(&Value) -> Result<Arc<dyn Plugin>, String>;

/// Every in-tree plugin by name.
pub fn registry() -> Vec<(&'static str, Constructor)> {
    vec![
        (scheduling_gates::NAME, scheduling_gates::new),
        (priority_sort::NAME, priority_sort::new),
        (node_unschedulable::NAME, node_unschedulable::new),
        (node_name::NAME, node_name::new),
        (taint_toleration::NAME, taint_toleration::new),
        (node_affinity::NAME, node_affinity::new),
        (node_ports::NAME, node_ports::new),
        (node_resources::fit::NAME, node_resources::fit::new),
        (
            node_resources::balanced_allocation::NAME,
            node_resources::balanced_allocation::new,
        ),
        (volume_restrictions::NAME, volume_restrictions::new),
        (pod_topology_spread::NAME, pod_topology_spread::new),
        (inter_pod_affinity::NAME, inter_pod_affinity::new),
        (default_preemption::NAME, default_preemption::new),
        (image_locality::NAME, image_locality::new),
        (default_binder::NAME, default_binder::new),
    ]
}

/// Kubernetes v1.32's default `multiPoint` plugins with their score weights, in order.
pub const DEFAULT_PLUGINS: &[(&str, i64)] = &[
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
];

/// Parse plugin args into a typed struct, with unknown fields rejected (`Null` → default).
pub fn parse_args<T: serde::de::DeserializeOwned + Default>(args: &Value) -> Result<T, String> {
    if args.is_null() {
        return Ok(T::default());
    }
    let mut args = args.clone();
    if let Value::Object(m) = &mut args {
        m.remove("kind");
        m.remove("apiVersion");
    }
    serde_json::from_value(args).map_err(|e| e.to_string())
}
