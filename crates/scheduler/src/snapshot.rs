//! The cluster as the scheduler sees it for one cycle: nodes with their (bound and assumed)
//! pods, namespace labels, image spread and nominated pods. The scheduling loop owns it and
//! applies informer events between cycles, so a cycle reads it without locks or copies.
//! Mirrors `pkg/scheduler/backend/cache` + `framework.Snapshot`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::types::{NodeInfo, PodInfo};

#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    nodes: Vec<NodeInfo>,
    by_name: HashMap<String, usize>,
    /// Pods bound (or assumed) to nodes the scheduler has not seen, by node name.
    orphans: HashMap<String, Vec<Arc<PodInfo>>>,
    /// Node name of each placed pod, by pod key.
    pod_node: HashMap<String, String>,
    /// PodDisruptionBudgets (policy/v1), for preemption.
    pub pdbs: Vec<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    /// Namespace name → labels (for namespace selectors of affinity terms).
    pub namespaces: HashMap<String, BTreeMap<String, String>>,
    /// Image name → number of nodes that have it (ImageLocality's spread).
    image_nodes: HashMap<String, usize>,
    /// Pods nominated to a node by preemption but not yet bound, by node name.
    nominated: HashMap<String, Vec<Arc<PodInfo>>>,
    /// Node name of each nominated pod, by pod key.
    nominated_node: HashMap<String, String>,
}

impl Snapshot {
    pub fn new() -> Snapshot {
        Snapshot::default()
    }

    /// Every node, in the order filters visit them.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    pub fn get(&self, name: &str) -> Option<&NodeInfo> {
        self.by_name.get(name).map(|&i| &self.nodes[i])
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// How many nodes have this image.
    pub fn image_num_nodes(&self, image: &str) -> usize {
        self.image_nodes.get(image).copied().unwrap_or(0)
    }

    pub fn namespace_labels(&self, ns: &str) -> Option<&BTreeMap<String, String>> {
        self.namespaces.get(ns)
    }

    /// Add or replace a node.
    pub fn upsert_node(&mut self, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let node = Arc::new(node);
        match self.by_name.get(&name) {
            Some(&i) => {
                self.count_images(i, -1);
                self.nodes[i].set_node(node);
                self.count_images(i, 1);
            }
            None => {
                let mut info = NodeInfo::new(Node::default());
                info.set_node(node);
                for p in self.orphans.remove(&name).unwrap_or_default() {
                    info.add_pod(p);
                }
                self.nodes.push(info);
                let i = self.nodes.len() - 1;
                self.by_name.insert(name, i);
                self.count_images(i, 1);
            }
        }
    }

    /// Remove a node; its pods stay known (as Kubernetes' cache keeps them) until deleted.
    pub fn remove_node(&mut self, name: &str) {
        let Some(i) = self.by_name.remove(name) else {
            return;
        };
        self.count_images(i, -1);
        let info = self.nodes.swap_remove(i);
        if i < self.nodes.len() {
            let moved = self.nodes[i].name().to_string();
            self.by_name.insert(moved, i);
        }
        if !info.pods.is_empty() {
            self.orphans.insert(name.to_string(), info.pods);
        }
    }

    fn count_images(&mut self, i: usize, delta: isize) {
        for name in self.nodes[i].image_sizes.keys() {
            let c = self.image_nodes.entry(name.clone()).or_insert(0);
            *c = c.saturating_add_signed(delta);
            if *c == 0 {
                self.image_nodes.remove(name);
            }
        }
    }

    /// Place a pod on `node` (bound, or assumed by the scheduler). Replaces an earlier placement.
    pub fn add_pod(&mut self, node: &str, pod: Arc<PodInfo>) {
        self.remove_pod(&pod.key);
        self.pod_node.insert(pod.key.clone(), node.to_string());
        match self.by_name.get(node) {
            Some(&i) => self.nodes[i].add_pod(pod),
            None => self.orphans.entry(node.to_string()).or_default().push(pod),
        }
    }

    /// Remove a placed pod; returns it and its node name.
    pub fn remove_pod(&mut self, key: &str) -> Option<(String, Arc<PodInfo>)> {
        let node = self.pod_node.remove(key)?;
        let pod = match self.by_name.get(&node) {
            Some(&i) => self.nodes[i].remove_pod(key),
            None => {
                let list = self.orphans.get_mut(&node)?;
                let j = list.iter().position(|p| p.key == key)?;
                let p = list.swap_remove(j);
                if list.is_empty() {
                    self.orphans.remove(&node);
                }
                Some(p)
            }
        }?;
        Some((node, pod))
    }

    /// The node a pod is placed on.
    pub fn pod_node(&self, key: &str) -> Option<&str> {
        self.pod_node.get(key).map(String::as_str)
    }

    pub fn num_pods(&self) -> usize {
        self.pod_node.len()
    }

    /// Record that preemption nominated `pod` to `node` (an empty node clears it).
    pub fn nominate(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.clear_nomination(&pod.key);
        if node.is_empty() {
            return;
        }
        self.nominated_node.insert(pod.key.clone(), node.to_string());
        self.nominated.entry(node.to_string()).or_default().push(pod);
    }

    pub fn clear_nomination(&mut self, key: &str) {
        if let Some(node) = self.nominated_node.remove(key) {
            if let Some(list) = self.nominated.get_mut(&node) {
                list.retain(|p| p.key != key);
                if list.is_empty() {
                    self.nominated.remove(&node);
                }
            }
        }
    }

    /// Whether any pod is nominated anywhere (lets filters skip the per-node lookup).
    pub fn has_nominations(&self) -> bool {
        !self.nominated.is_empty()
    }

    /// Pods nominated to run on `node`.
    pub fn nominated_pods(&self, node: &str) -> &[Arc<PodInfo>] {
        self.nominated.get(node).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn nominated_node(&self, key: &str) -> Option<&str> {
        self.nominated_node.get(key).map(String::as_str)
    }

    /// Mutable access to one node (preemption simulates removing victims on a copy).
    pub fn node_mut(&mut self, name: &str) -> Option<&mut NodeInfo> {
        self.by_name.get(name).map(|&i| &mut self.nodes[i])
    }
}

#[cfg(test)]
pub mod testing {
    //! Builders for plugin tests: nodes and pods from short descriptions.
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, NodeSpec, NodeStatus, Pod, PodSpec, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    pub fn quantities(list: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        list.iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect()
    }

    /// A node with allocatable resources and labels.
    pub fn node(name: &str, allocatable: &[(&str, &str)], labels: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                allocatable: Some(quantities(allocatable)),
                capacity: Some(quantities(allocatable)),
                ..Default::default()
            }),
        }
    }

    /// A pod in namespace "default" with one container per request list.
    pub fn pod(name: &str, containers: &[&[(&str, &str)]]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: containers
                    .iter()
                    .enumerate()
                    .map(|(i, r)| Container {
                        name: format!("c{i}"),
                        resources: Some(ResourceRequirements {
                            requests: (!r.is_empty()).then(|| quantities(r)),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            status: None,
        }
    }

    /// A snapshot of these nodes, each with its pods placed.
    pub fn snapshot(nodes: Vec<(Node, Vec<Pod>)>) -> Snapshot {
        let mut s = Snapshot::new();
        for (n, pods) in nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            s.upsert_node(n);
            for mut p in pods {
                p.spec.get_or_insert_with(Default::default).node_name = Some(name.clone());
                s.add_pod(&name, Arc::new(PodInfo::new(p)));
            }
        }
        s
    }
}
