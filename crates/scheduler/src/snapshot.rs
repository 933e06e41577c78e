//! The cluster as the scheduler sees it for one cycle: nodes with their (bound and assumed)
//! pods, namespace labels, image spread and nominated pods. The scheduling loop owns it and
//! applies informer events between cycles, so a cycle reads it without locks or copies.
//! Mirrors `pkg/scheduler/backend/cache` + `framework.Snapshot`.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::types::{AffinityTerm, NodeInfo, PodInfo};

/// Hashes node indexes (small integers) by one multiplication.
#[derive(Default, Clone, Copy)]
pub struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = (self.0 ^ u64::from(i)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_usize(&mut self, i: usize) {
        self.0 = (self.0 ^ i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Number of pods per node index (`Snapshot::nodes()`).
pub type NodeCounts = HashMap<u32, u32, BuildHasherDefault<IndexHasher>>;

fn count_node(nodes: &mut NodeCounts, node: usize, delta: i32) {
    let key = node as u32;
    let c = nodes.entry(key).or_insert(0);
    *c = c.saturating_add_signed(delta);
    if *c == 0 {
        nodes.remove(&key);
    }
}

/// Source of the tags of `NodeSlots` (0 is never a tag).
static NEXT_SLOT: AtomicU64 = AtomicU64::new(1);

/// Which node (with which labels) sits at each position of `Snapshot::nodes()`: a tag per
/// position, renewed whenever another node moves there or the labels of the node there change.
/// A `NodeInfo` (and any clone of it) carries its position and tag, so data computed per
/// position in a cycle can be used for it safely; other `NodeInfo`s are not found.
#[derive(Debug, Clone, Default)]
pub struct NodeSlots(Arc<Vec<u64>>);

impl NodeSlots {
    /// The node's position in the snapshot, when it is (a clone of) the node there.
    #[inline]
    pub fn index_of(&self, node: &NodeInfo) -> Option<usize> {
        (self.0.get(node.index) == Some(&node.slot)).then_some(node.index)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

const NO_VALUE: u32 = u32::MAX;

/// The values one node label takes on the snapshot's nodes, each with a small id.
#[derive(Debug, Clone, Default)]
pub struct LabelValues {
    key: String,
    /// Value id by node position; `NO_VALUE` when the node lacks the label.
    node_value: Vec<u32>,
    /// Value by id (empty for unused ids).
    values: Vec<String>,
    ids: HashMap<String, u32>,
    /// Number of nodes with each value id.
    nodes: Vec<u32>,
    /// Unused ids.
    free: Vec<u32>,
}

impl LabelValues {
    fn new(key: &str) -> LabelValues {
        LabelValues {
            key: key.to_string(),
            ..Default::default()
        }
    }

    /// Set (or clear) the value of the node at position `node`.
    fn set(&mut self, node: usize, value: Option<&str>) {
        if let Some(slot) = self.node_value.get_mut(node) {
            let old = std::mem::replace(slot, NO_VALUE);
            if old != NO_VALUE {
                let o = old as usize;
                self.nodes[o] -= 1;
                if self.nodes[o] == 0 {
                    let name = std::mem::take(&mut self.values[o]);
                    self.ids.remove(&name);
                    self.free.push(old);
                }
            }
        }
        let Some(v) = value else {
            return;
        };
        let id = match self.ids.get(v) {
            Some(&id) => id,
            None => {
                let id = match self.free.pop() {
                    Some(id) => {
                        self.values[id as usize] = v.to_string();
                        id
                    }
                    None => {
                        self.values.push(v.to_string());
                        self.nodes.push(0);
                        (self.values.len() - 1) as u32
                    }
                };
                self.ids.insert(v.to_string(), id);
                id
            }
        };
        self.nodes[id as usize] += 1;
        if self.node_value.len() <= node {
            self.node_value.resize(node + 1, NO_VALUE);
        }
        self.node_value[node] = id;
    }
}

/// The values of one node label key, resolving nodes to value ids (for one cycle).
#[derive(Debug, Clone)]
pub struct NodeValues {
    values: Arc<LabelValues>,
    slots: NodeSlots,
}

impl NodeValues {
    /// Values of `key` with no snapshot behind: every value is looked up by name.
    pub fn detached(key: &str) -> NodeValues {
        NodeValues {
            values: Arc::new(LabelValues::new(key)),
            slots: NodeSlots::default(),
        }
    }

    pub fn key(&self) -> &str {
        &self.values.key
    }

    /// Ids are below this.
    pub fn num_ids(&self) -> usize {
        self.values.values.len()
    }

    /// The value with this id.
    pub fn name(&self, id: u32) -> &str {
        self.values
            .values
            .get(id as usize)
            .map_or("", String::as_str)
    }

    /// The id of a value some node has.
    pub fn id(&self, value: &str) -> Option<u32> {
        self.values.ids.get(value).copied()
    }

    /// The id of every value some node has.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.values
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(id, _)| id as u32)
    }

    /// The value id of the snapshot's node at position `n`; None when it lacks the label.
    #[inline]
    pub fn at(&self, n: usize) -> Option<u32> {
        self.values
            .node_value
            .get(n)
            .copied()
            .filter(|&v| v != NO_VALUE)
    }

    /// The node's value: None when the node lacks the label, `Some(None)` when no node of the
    /// snapshot has that value (the node is not one of the snapshot's).
    #[inline]
    pub fn of(&self, node: &NodeInfo) -> Option<Option<u32>> {
        if let Some(n) = self.slots.index_of(node) {
            return self.at(n).map(Some);
        }
        let v = node.labels().get(&self.values.key)?;
        Some(self.id(v))
    }
}

/// Counts per value of one node label (topology domain), indexed by value id, for one
/// cycle. A value is present once counted (even when its count is 0) until removed. Values no
/// snapshot node has get ids past the snapshot's.
#[derive(Debug, Clone)]
pub struct ValueCounts {
    values: NodeValues,
    counts: Vec<i64>,
    present: Vec<bool>,
    len: usize,
    /// Values the snapshot's nodes do not have; their ids follow the snapshot's.
    extra: Vec<String>,
}

impl ValueCounts {
    pub fn new(values: NodeValues) -> ValueCounts {
        ValueCounts {
            values,
            counts: Vec::new(),
            present: Vec::new(),
            len: 0,
            extra: Vec::new(),
        }
    }

    pub fn key(&self) -> &str {
        self.values.key()
    }

    pub fn values(&self) -> &NodeValues {
        &self.values
    }

    /// The name of the value with this id.
    pub fn name(&self, id: u32) -> &str {
        let base = self.values.num_ids();
        match (id as usize).checked_sub(base) {
            Some(i) => self.extra.get(i).map_or("", String::as_str),
            None => self.values.name(id),
        }
    }

    /// The id of a value, if it has one.
    pub fn id(&self, value: &str) -> Option<u32> {
        self.values.id(value).or_else(|| {
            self.extra
                .iter()
                .position(|e| e == value)
                .map(|i| (self.values.num_ids() + i) as u32)
        })
    }

    /// The id of a value, giving it one if needed.
    pub fn id_or_insert(&mut self, value: &str) -> u32 {
        if let Some(id) = self.id(value) {
            return id;
        }
        self.extra.push(value.to_string());
        (self.values.num_ids() + self.extra.len() - 1) as u32
    }

    /// The id of the node's value: None when the node lacks the label, `Some(None)` when the
    /// value has no id.
    #[inline]
    pub fn of(&self, node: &NodeInfo) -> Option<Option<u32>> {
        match self.values.of(node)? {
            Some(id) => Some(Some(id)),
            None if self.extra.is_empty() => Some(None),
            None => Some(node.labels().get(self.key()).and_then(|v| self.id(v))),
        }
    }

    /// The id of the node's value, giving it one if needed; None when the node lacks the label.
    pub fn of_or_insert(&mut self, node: &NodeInfo) -> Option<u32> {
        match self.of(node)? {
            Some(id) => Some(id),
            None => {
                let v = node.labels().get(self.key())?.clone();
                Some(self.id_or_insert(&v))
            }
        }
    }

    /// The value id of the snapshot's node at position `n`; None when it lacks the label.
    #[inline]
    pub fn at(&self, n: usize) -> Option<u32> {
        self.values.at(n)
    }

    /// Add `delta` to the count of value `id` (making it present); returns the new count.
    #[inline]
    pub fn add(&mut self, id: u32, delta: i64) -> i64 {
        let i = id as usize;
        if i >= self.counts.len() {
            let n = (i + 1).max(self.values.num_ids());
            self.counts.resize(n, 0);
            self.present.resize(n, false);
        }
        if !self.present[i] {
            self.present[i] = true;
            self.len += 1;
        }
        self.counts[i] += delta;
        self.counts[i]
    }

    /// Make value `id` absent (count 0).
    pub fn remove(&mut self, id: u32) {
        let i = id as usize;
        if self.present.get(i) == Some(&true) {
            self.present[i] = false;
            self.counts[i] = 0;
            self.len -= 1;
        }
    }

    /// The count of value `id` if present.
    #[inline]
    pub fn get(&self, id: u32) -> Option<i64> {
        let i = id as usize;
        (self.present.get(i) == Some(&true)).then(|| self.counts[i])
    }

    /// The count of value `id` (0 when absent).
    #[inline]
    pub fn count(&self, id: u32) -> i64 {
        self.counts.get(id as usize).copied().unwrap_or(0)
    }

    /// Number of present values.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The present values with their counts.
    pub fn iter(&self) -> impl Iterator<Item = (u32, i64)> + '_ {
        self.present
            .iter()
            .enumerate()
            .filter(|(_, p)| **p)
            .map(|(i, _)| (i as u32, self.counts[i]))
    }
}

/// The pods on the snapshot's nodes that share namespace, labels and terminating state, so a
/// label selector is evaluated once for all of them.
#[derive(Debug, Clone)]
pub struct PodGroup {
    /// One pod of the group (all have its namespace, labels and terminating state).
    pub pod: Arc<PodInfo>,
    /// How many pods of the group each node has.
    pub nodes: NodeCounts,
}

/// Which affinity terms of the pods a [`TermGroup`] collects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermKind {
    RequiredAffinity,
    RequiredAntiAffinity,
    PreferredAffinity,
    PreferredAntiAffinity,
}

impl TermKind {
    pub const ALL: [TermKind; 4] = [
        TermKind::RequiredAffinity,
        TermKind::RequiredAntiAffinity,
        TermKind::PreferredAffinity,
        TermKind::PreferredAntiAffinity,
    ];

    fn slot(self) -> usize {
        self as usize
    }
}

/// Equal affinity terms (of one kind and weight) of the pods on the snapshot's nodes; a pod
/// with the term twice counts twice.
#[derive(Debug, Clone)]
pub struct TermGroup {
    pub term: AffinityTerm,
    /// The weight of preferred terms; 0 for required ones.
    pub weight: i32,
    /// How many such terms the pods of each node have.
    pub nodes: NodeCounts,
}

/// The pods and affinity terms of the pods placed on known nodes, grouped by content
/// (Kubernetes' snapshot lists the nodes having pods with affinity and with required
/// anti-affinity; these groups serve the same purpose and also spare selector evaluations).
#[derive(Debug, Clone, Default)]
struct Groups {
    /// By `PodInfo::label_hash`; a list for hash collisions.
    pods: HashMap<u64, Vec<PodGroup>>,
    /// Per `TermKind`: by `AffinityTerm::content_hash` and weight.
    terms: [HashMap<(u64, i32), Vec<TermGroup>>; 4],
}

fn same_pod_group(a: &PodInfo, b: &PodInfo) -> bool {
    a.terminating() == b.terminating() && a.namespace() == b.namespace() && a.labels() == b.labels()
}

impl Groups {
    /// Account for `pod` placed on (`delta` 1) or removed from (-1) the node at `node`.
    fn update(&mut self, node: usize, pod: &Arc<PodInfo>, delta: i32) {
        let list = self.pods.entry(pod.label_hash).or_default();
        let i = match list.iter().position(|g| same_pod_group(&g.pod, pod)) {
            Some(i) => i,
            None if delta > 0 => {
                list.push(PodGroup {
                    pod: pod.clone(),
                    nodes: NodeCounts::default(),
                });
                list.len() - 1
            }
            None => return,
        };
        count_node(&mut list[i].nodes, node, delta);
        if list[i].nodes.is_empty() {
            list.swap_remove(i);
            if list.is_empty() {
                self.pods.remove(&pod.label_hash);
            }
        }
        for t in &pod.required_affinity {
            self.update_term(TermKind::RequiredAffinity, t, 0, node, delta);
        }
        for t in &pod.required_anti_affinity {
            self.update_term(TermKind::RequiredAntiAffinity, t, 0, node, delta);
        }
        for w in &pod.preferred_affinity {
            self.update_term(TermKind::PreferredAffinity, &w.term, w.weight, node, delta);
        }
        for w in &pod.preferred_anti_affinity {
            self.update_term(
                TermKind::PreferredAntiAffinity,
                &w.term,
                w.weight,
                node,
                delta,
            );
        }
    }

    fn update_term(
        &mut self,
        kind: TermKind,
        term: &AffinityTerm,
        weight: i32,
        node: usize,
        delta: i32,
    ) {
        let map = &mut self.terms[kind.slot()];
        let key = (term.content_hash(), weight);
        let list = map.entry(key).or_default();
        let i = match list.iter().position(|g| g.term == *term) {
            Some(i) => i,
            None if delta > 0 => {
                list.push(TermGroup {
                    term: term.clone(),
                    weight,
                    nodes: NodeCounts::default(),
                });
                list.len() - 1
            }
            None => return,
        };
        count_node(&mut list[i].nodes, node, delta);
        if list[i].nodes.is_empty() {
            list.swap_remove(i);
            if list.is_empty() {
                map.remove(&key);
            }
        }
    }
}

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
    /// The pods of `nodes` and their affinity terms, grouped by content.
    groups: Groups,
    /// The tag of each position of `nodes`.
    slots: NodeSlots,
    /// Every node label key, with the values the nodes have.
    labels: HashMap<String, Arc<LabelValues>>,
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

    /// The pods on the nodes, grouped by namespace, labels and terminating state.
    pub fn pod_groups(&self) -> impl Iterator<Item = &PodGroup> {
        self.groups.pods.values().flatten()
    }

    /// The affinity terms of one kind of the pods on the nodes, grouped by content and weight.
    pub fn term_groups(&self, kind: TermKind) -> impl Iterator<Item = &TermGroup> {
        self.groups.terms[kind.slot()].values().flatten()
    }

    /// Whether some pod on a node has an affinity term of this kind.
    pub fn has_terms(&self, kind: TermKind) -> bool {
        !self.groups.terms[kind.slot()].is_empty()
    }

    /// Some pod on a node has a required anti-affinity term
    /// (`HavePodsWithRequiredAntiAffinityList` is not empty).
    pub fn have_pods_with_required_anti_affinity(&self) -> bool {
        self.has_terms(TermKind::RequiredAntiAffinity)
    }

    /// The tags of the node positions (see `NodeSlots`).
    pub fn node_slots(&self) -> NodeSlots {
        self.slots.clone()
    }

    /// The values of the node label `key`, with the nodes having each.
    pub fn node_values(&self, key: &str) -> NodeValues {
        NodeValues {
            values: match self.labels.get(key) {
                Some(v) => v.clone(),
                None => Arc::new(LabelValues::new(key)),
            },
            slots: self.slots.clone(),
        }
    }

    /// Give position `i` a new tag (another node, or new labels, are there).
    fn tag(&mut self, i: usize) {
        let tag = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
        let slots = Arc::make_mut(&mut self.slots.0);
        if slots.len() <= i {
            slots.resize(i + 1, 0);
        }
        slots[i] = tag;
        self.nodes[i].index = i;
        self.nodes[i].slot = tag;
    }

    /// Index (or unindex) the labels of the node at position `i`.
    fn index_labels(&mut self, i: usize, add: bool) {
        let node = self.nodes[i].node.clone();
        let Some(labels) = node.metadata.labels.as_ref() else {
            return;
        };
        for (k, v) in labels {
            if !self.labels.contains_key(k) {
                if !add {
                    continue;
                }
                self.labels.insert(k.clone(), Arc::new(LabelValues::new(k)));
            }
            let Some(entry) = self.labels.get_mut(k) else {
                continue;
            };
            let values = Arc::make_mut(entry);
            values.set(i, add.then_some(v.as_str()));
            if values.ids.is_empty() {
                self.labels.remove(k);
            }
        }
    }

    fn index_node_pods(&mut self, i: usize, delta: i32) {
        for p in &self.nodes[i].pods {
            self.groups.update(i, p, delta);
        }
    }

    /// Add or replace a node.
    pub fn upsert_node(&mut self, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let node = Arc::new(node);
        match self.by_name.get(&name) {
            Some(&i) => {
                self.count_images(i, -1);
                let relabeled = self.nodes[i].node.metadata.labels != node.metadata.labels;
                if relabeled {
                    self.index_labels(i, false);
                }
                self.nodes[i].set_node(node);
                if relabeled {
                    self.index_labels(i, true);
                    self.tag(i);
                }
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
                self.tag(i);
                self.index_labels(i, true);
                self.index_node_pods(i, 1);
            }
        }
    }

    /// Remove a node; its pods stay known (as Kubernetes' cache keeps them) until deleted.
    pub fn remove_node(&mut self, name: &str) {
        let Some(i) = self.by_name.remove(name) else {
            return;
        };
        self.count_images(i, -1);
        self.index_node_pods(i, -1);
        self.index_labels(i, false);
        let last = self.nodes.len() - 1;
        if i < last {
            // The last node takes position i: re-index it there.
            self.index_node_pods(last, -1);
            self.index_labels(last, false);
        }
        let mut info = self.nodes.swap_remove(i);
        info.index = usize::MAX;
        info.slot = 0;
        Arc::make_mut(&mut self.slots.0).truncate(self.nodes.len());
        if i < self.nodes.len() {
            let moved = self.nodes[i].name().to_string();
            self.by_name.insert(moved, i);
            self.tag(i);
            self.index_labels(i, true);
            self.index_node_pods(i, 1);
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
            Some(&i) => {
                self.groups.update(i, &pod, 1);
                self.nodes[i].add_pod(pod);
            }
            None => self.orphans.entry(node.to_string()).or_default().push(pod),
        }
    }

    /// Remove a placed pod; returns it and its node name.
    pub fn remove_pod(&mut self, key: &str) -> Option<(String, Arc<PodInfo>)> {
        let node = self.pod_node.remove(key)?;
        let pod = match self.by_name.get(&node) {
            Some(&i) => {
                let pod = self.nodes[i].remove_pod(key);
                if let Some(p) = &pod {
                    self.groups.update(i, p, -1);
                }
                pod
            }
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
        self.nominated_node
            .insert(pod.key.clone(), node.to_string());
        self.nominated
            .entry(node.to_string())
            .or_default()
            .push(pod);
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

    /// Mutable access to one node. Its pods must not be changed through it (use `add_pod` and
    /// `remove_pod`, which keep the pod groups right).
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
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
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

#[cfg(test)]
mod tests {
    use super::testing::{node, pod};
    use super::*;
    use k8s_openapi::api::core::v1::{
        Affinity, Pod, PodAffinity, PodAffinityTerm, PodAntiAffinity, WeightedPodAffinityTerm,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as MetaSelector, Time};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;

    fn term(app: &str, topology: &str) -> PodAffinityTerm {
        PodAffinityTerm {
            label_selector: Some(MetaSelector {
                match_labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            }),
            topology_key: topology.into(),
            ..Default::default()
        }
    }

    /// A pod of `app` in `ns`, optionally terminating, with some affinity terms.
    fn app_pod(name: &str, ns: &str, app: &str, terminating: bool, terms: u8) -> Pod {
        let mut p = pod(name, &[]);
        p.metadata.namespace = Some(ns.into());
        p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        if terminating {
            p.metadata.deletion_timestamp = Some(Time(Default::default()));
        }
        let spec = p.spec.get_or_insert_with(Default::default);
        let mut affinity = Affinity::default();
        if terms & 1 != 0 {
            affinity.pod_anti_affinity = Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![term(
                    app,
                    "kubernetes.io/hostname",
                )]),
                preferred_during_scheduling_ignored_during_execution: (terms & 4 != 0).then(|| {
                    vec![WeightedPodAffinityTerm {
                        weight: 5,
                        pod_affinity_term: term(app, "zone"),
                    }]
                }),
            });
        }
        if terms & 2 != 0 {
            affinity.pod_affinity = Some(PodAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![term("db", "zone")]),
                ..Default::default()
            });
        }
        spec.affinity = Some(affinity);
        p
    }

    type PodKey = (String, BTreeMap<String, String>, bool);
    type TermKey = (String, String, BTreeSet<String>, i32);

    /// The pod groups as recomputed from every node's pods.
    fn expected_pod_groups(s: &Snapshot) -> BTreeMap<PodKey, BTreeMap<u32, u32>> {
        let mut out: BTreeMap<PodKey, BTreeMap<u32, u32>> = BTreeMap::new();
        for (i, n) in s.nodes().iter().enumerate() {
            for p in &n.pods {
                let key = (
                    p.namespace().to_string(),
                    p.labels().clone(),
                    p.terminating(),
                );
                *out.entry(key).or_default().entry(i as u32).or_insert(0) += 1;
            }
        }
        out
    }

    fn actual_pod_groups(s: &Snapshot) -> BTreeMap<PodKey, BTreeMap<u32, u32>> {
        let mut out = BTreeMap::new();
        for g in s.pod_groups() {
            let key = (
                g.pod.namespace().to_string(),
                g.pod.labels().clone(),
                g.pod.terminating(),
            );
            let nodes: BTreeMap<u32, u32> = g.nodes.iter().map(|(k, v)| (*k, *v)).collect();
            assert!(out.insert(key, nodes).is_none(), "one group per content");
        }
        out
    }

    fn term_key(t: &AffinityTerm, weight: i32) -> TermKey {
        (
            t.selector.to_string(),
            t.topology_key.clone(),
            t.namespaces.clone(),
            weight,
        )
    }

    fn expected_terms(s: &Snapshot, kind: TermKind) -> BTreeMap<TermKey, BTreeMap<u32, u32>> {
        let mut out: BTreeMap<TermKey, BTreeMap<u32, u32>> = BTreeMap::new();
        for (i, n) in s.nodes().iter().enumerate() {
            for p in &n.pods {
                let terms: Vec<(&AffinityTerm, i32)> = match kind {
                    TermKind::RequiredAffinity => {
                        p.required_affinity.iter().map(|t| (t, 0)).collect()
                    }
                    TermKind::RequiredAntiAffinity => {
                        p.required_anti_affinity.iter().map(|t| (t, 0)).collect()
                    }
                    TermKind::PreferredAffinity => p
                        .preferred_affinity
                        .iter()
                        .map(|w| (&w.term, w.weight))
                        .collect(),
                    TermKind::PreferredAntiAffinity => p
                        .preferred_anti_affinity
                        .iter()
                        .map(|w| (&w.term, w.weight))
                        .collect(),
                };
                for (t, w) in terms {
                    *out.entry(term_key(t, w))
                        .or_default()
                        .entry(i as u32)
                        .or_insert(0) += 1;
                }
            }
        }
        out
    }

    fn actual_terms(s: &Snapshot, kind: TermKind) -> BTreeMap<TermKey, BTreeMap<u32, u32>> {
        let mut out = BTreeMap::new();
        for g in s.term_groups(kind) {
            let nodes: BTreeMap<u32, u32> = g.nodes.iter().map(|(k, v)| (*k, *v)).collect();
            assert!(out.insert(term_key(&g.term, g.weight), nodes).is_none());
        }
        out
    }

    /// Every index of the snapshot agrees with its nodes and their pods.
    fn check(s: &Snapshot) {
        assert_eq!(actual_pod_groups(s), expected_pod_groups(s), "pod groups");
        for kind in TermKind::ALL {
            assert_eq!(
                actual_terms(s, kind),
                expected_terms(s, kind),
                "{kind:?} terms"
            );
            assert_eq!(s.has_terms(kind), !expected_terms(s, kind).is_empty());
        }
        let slots = s.node_slots();
        assert_eq!(slots.len(), s.num_nodes());
        let mut keys: BTreeSet<&str> = BTreeSet::new();
        for (i, n) in s.nodes().iter().enumerate() {
            assert_eq!(n.index, i);
            assert_eq!(slots.index_of(n), Some(i));
            assert_eq!(
                slots.index_of(&n.clone()),
                Some(i),
                "a clone is the same node"
            );
            keys.extend(n.labels().keys().map(String::as_str));
        }
        assert_eq!(
            s.labels.keys().map(String::as_str).collect::<BTreeSet<_>>(),
            keys,
            "indexed label keys"
        );
        for key in keys {
            let values = s.node_values(key);
            let mut distinct = BTreeSet::new();
            for (i, n) in s.nodes().iter().enumerate() {
                let want = n.labels().get(key);
                assert_eq!(
                    values.at(i).map(|id| values.name(id)),
                    want.map(String::as_str)
                );
                assert_eq!(values.of(n), want.map(|v| values.id(v)));
                distinct.extend(want);
            }
            assert_eq!(
                values.values.ids.len(),
                distinct.len(),
                "no stale values of {key}"
            );
        }
    }

    #[test]
    fn indexes_follow_random_pod_and_node_changes() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut s = Snapshot::new();
        let apps = ["web", "db", "cache"];
        let namespaces = ["default", "other"];
        let mut placed: Vec<String> = Vec::new();
        for step in 0..1500 {
            match rng.random_range(0..10) {
                0 | 1 => {
                    let i = rng.random_range(0..12);
                    let zone = format!("z{}", rng.random_range(0..3));
                    let mut labels = vec![("zone", zone.as_str())];
                    let host = format!("n{i}");
                    if rng.random_range(0..4) != 0 {
                        labels.push(("kubernetes.io/hostname", host.as_str()));
                    }
                    s.upsert_node(node(&host, &[("pods", "110")], &labels));
                }
                2 => {
                    let i = rng.random_range(0..12);
                    s.remove_node(&format!("n{i}"));
                }
                3..=6 => {
                    let name = format!("p{}", rng.random_range(0..60));
                    let app = apps[rng.random_range(0..apps.len())];
                    let ns = namespaces[rng.random_range(0..2)];
                    let p = app_pod(
                        &name,
                        ns,
                        app,
                        rng.random_range(0..8) == 0,
                        rng.random_range(0..8),
                    );
                    let node = format!("n{}", rng.random_range(0..14));
                    s.add_pod(&node, Arc::new(PodInfo::new(p)));
                    placed.push(format!("{ns}/{name}"));
                }
                _ => {
                    if !placed.is_empty() {
                        let key = placed.swap_remove(rng.random_range(0..placed.len()));
                        s.remove_pod(&key);
                    }
                }
            }
            if step % 10 == 0 {
                check(&s);
            }
        }
        check(&s);
        assert!(s.pod_groups().count() > 1);
    }

    #[test]
    fn groups_count_pods_of_equal_content_together() {
        let mut s = Snapshot::new();
        s.upsert_node(node("a", &[], &[("zone", "z1")]));
        s.upsert_node(node("b", &[], &[("zone", "z1")]));
        let add = |s: &mut Snapshot, name: &str, node: &str, terms: u8| {
            s.add_pod(
                node,
                Arc::new(PodInfo::new(app_pod(name, "default", "web", false, terms))),
            );
        };
        add(&mut s, "p1", "a", 1);
        add(&mut s, "p2", "a", 1);
        add(&mut s, "p3", "b", 1);
        add(&mut s, "p4", "b", 0);
        let groups: Vec<&PodGroup> = s.pod_groups().collect();
        assert_eq!(groups.len(), 1, "same namespace and labels");
        let a = s.index_of("a").expect("a") as u32;
        let b = s.index_of("b").expect("b") as u32;
        assert_eq!(groups[0].nodes.get(&a), Some(&2));
        assert_eq!(groups[0].nodes.get(&b), Some(&2));
        let anti: Vec<&TermGroup> = s.term_groups(TermKind::RequiredAntiAffinity).collect();
        assert_eq!(anti.len(), 1, "equal terms of different pods");
        assert_eq!(anti[0].nodes.get(&a), Some(&2));
        assert_eq!(anti[0].nodes.get(&b), Some(&1));
        assert!(s.have_pods_with_required_anti_affinity());
        assert!(!s.has_terms(TermKind::RequiredAffinity));

        // Removing node a keeps its pods aside (out of the groups); they return with it.
        s.remove_node("a");
        check(&s);
        let anti: Vec<&TermGroup> = s.term_groups(TermKind::RequiredAntiAffinity).collect();
        assert_eq!(anti[0].nodes.values().sum::<u32>(), 1);
        s.upsert_node(node("a", &[], &[("zone", "z2")]));
        check(&s);
        assert_eq!(
            s.pod_groups()
                .map(|g| g.nodes.values().sum::<u32>())
                .sum::<u32>(),
            4
        );

        for key in ["default/p1", "default/p2", "default/p3"] {
            s.remove_pod(key);
        }
        check(&s);
        assert!(!s.have_pods_with_required_anti_affinity());
        s.remove_pod("default/p4");
        assert_eq!(s.pod_groups().count(), 0);
    }

    #[test]
    fn node_positions_and_label_values_follow_node_changes() {
        let mut s = Snapshot::new();
        s.upsert_node(node("a", &[], &[("zone", "z1")]));
        s.upsert_node(node("b", &[], &[("zone", "z2")]));
        s.upsert_node(node("c", &[], &[("zone", "z1"), ("rack", "r1")]));
        check(&s);
        let zones = s.node_values("zone");
        let z1 = zones.id("z1").expect("z1");
        assert_eq!(zones.at(0), Some(z1));
        assert_eq!(zones.at(2), Some(z1));
        assert_eq!(s.node_values("rack").at(0), None);
        assert_eq!(s.node_values("missing").num_ids(), 0);

        // A node outside the snapshot is looked up by its labels.
        let outside = NodeInfo::new(node("x", &[], &[("zone", "z2"), ("rack", "r9")]));
        assert_eq!(s.node_slots().index_of(&outside), None);
        assert_eq!(zones.of(&outside), Some(zones.id("z2")));
        assert_eq!(s.node_values("rack").of(&outside), Some(None));
        assert_eq!(s.node_values("other").of(&outside), None);

        // Relabeling gives the position a new tag: older copies of the node are not found.
        let old_c = s.get("c").expect("c").clone();
        s.upsert_node(node("c", &[], &[("zone", "z3")]));
        check(&s);
        assert_eq!(s.node_slots().index_of(&old_c), None);
        assert_eq!(
            s.node_values("zone").of(&old_c),
            Some(s.node_values("zone").id("z1"))
        );
        assert!(
            s.node_values("rack").id("r1").is_none(),
            "no node has rack=r1 now"
        );
        // An update without label changes keeps the tag.
        let c = s.get("c").expect("c").clone();
        s.upsert_node(node("c", &[("cpu", "4")], &[("zone", "z3")]));
        assert_eq!(s.node_slots().index_of(&c), Some(2));

        // Removing a node moves the last one into its position.
        let old_a = s.get("a").expect("a").clone();
        s.remove_node("a");
        check(&s);
        assert_eq!(s.index_of("c"), Some(0));
        assert_eq!(s.node_slots().index_of(&old_a), None);
        assert_eq!(s.node_slots().index_of(&c), None, "c moved");
        assert_eq!(s.node_values("zone").at(0), s.node_values("zone").id("z3"));
        assert_eq!(s.node_values("zone").at(2), None);
    }

    #[test]
    fn value_counts_track_presence_and_unknown_values() {
        let s = testing::snapshot(vec![
            (node("a", &[], &[("zone", "z1")]), vec![]),
            (node("b", &[], &[("zone", "z2")]), vec![]),
        ]);
        let mut c = ValueCounts::new(s.node_values("zone"));
        assert!(c.is_empty());
        let z1 = c.at(0).expect("z1");
        assert_eq!(c.get(z1), None);
        assert_eq!(c.add(z1, 0), 0);
        assert_eq!(c.get(z1), Some(0));
        assert_eq!(c.len(), 1);
        assert_eq!(c.add(z1, 3), 3);
        // A value no node of the snapshot has gets an id of its own.
        let outside = NodeInfo::new(node("x", &[], &[("zone", "z9")]));
        assert_eq!(c.of(&outside), Some(None));
        let z9 = c.of_or_insert(&outside).expect("has the label");
        assert_eq!(c.name(z9), "z9");
        assert_eq!(c.of(&outside), Some(Some(z9)));
        assert_eq!(c.add(z9, 2), 2);
        assert_eq!(c.len(), 2);
        let mut all: Vec<(&str, i64)> = c.iter().map(|(id, n)| (c.name(id), n)).collect();
        all.sort();
        assert_eq!(all, [("z1", 3), ("z9", 2)]);
        c.remove(z1);
        assert_eq!(c.get(z1), None);
        assert_eq!(c.count(z1), 0);
        assert_eq!(c.len(), 1);
        let unlabeled = NodeInfo::new(node("y", &[], &[]));
        assert_eq!(c.of(&unlabeled), None);
        assert_eq!(c.of_or_insert(&unlabeled), None);
    }

    #[test]
    fn content_hashes_are_equal_for_equal_content() {
        let a = PodInfo::new(app_pod("a", "default", "web", false, 3));
        let b = PodInfo::new(app_pod("b", "default", "web", false, 3));
        let c = PodInfo::new(app_pod("c", "other", "web", false, 3));
        assert_eq!(a.label_hash, b.label_hash);
        assert_ne!(a.label_hash, c.label_hash);
        assert_eq!(a.required_anti_affinity, b.required_anti_affinity);
        assert_eq!(
            a.required_anti_affinity[0].content_hash(),
            b.required_anti_affinity[0].content_hash()
        );
        assert_ne!(
            a.required_anti_affinity, c.required_anti_affinity,
            "other namespace"
        );
    }
}
