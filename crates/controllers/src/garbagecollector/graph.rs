//! The dependency graph: every object the monitors see, keyed by uid, with its owner references
//! and the objects that name it as an owner. Owners referenced but not (yet) seen are
//! "virtual" nodes that the collector verifies against the API server.
//!
//! [`Graph::process`] applies one change (an informer event, or a "virtual" delete the
//! collector makes up after finding an owner absent) and reports what must be looked at next
//! (Kubernetes' GraphBuilder.processGraphChanges). It does no I/O, so it is tested directly.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, LazyLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::intern::Interner;

pub const FOREGROUND: &str = "foregroundDeletion";
pub const ORPHAN: &str = "orphan";

/// An object's coordinates. The field order is Kubernetes' ordering of references (kind,
/// apiVersion, namespace, name, uid), which the derived `Ord` follows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjRef {
    pub kind: String,
    pub api_version: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl fmt::Display for ObjRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}/{}, namespace: {}, name: {}, uid: {}]",
            self.api_version, self.kind, self.namespace, self.name, self.uid
        )
    }
}

impl ObjRef {
    /// The owner a reference names, as seen from an object in `namespace`.
    pub fn of_owner(r: &OwnerReference, namespace: &str) -> ObjRef {
        ObjRef {
            kind: r.kind.clone(),
            api_version: r.api_version.clone(),
            namespace: namespace.to_string(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        }
    }
}

/// Whether a reference names exactly this owner (uid, name, kind and apiVersion).
pub fn matches_coordinates(r: &OwnerReference, id: &ObjRef) -> bool {
    r.uid == id.uid && r.name == id.name && r.kind == id.kind && r.api_version == id.api_version
}

/// Go's round trip of an apiVersion through `schema.ParseGroupVersion`: invalid ones are empty.
pub fn normalize_api_version(api_version: &str) -> String {
    match super::discovery::parse_api_version(api_version) {
        Some(("", v)) => v.to_string(),
        Some((g, v)) => format!("{g}/{v}"),
        None => String::new(),
    }
}

/// Owner references, one copy shared by every object with the same ones (the pods of a
/// ReplicaSet), since the graph and the monitors hold them for every object.
pub type Owners = Arc<Vec<OwnerReference>>;

static OWNERS: LazyLock<Interner<Vec<OwnerReference>>> = LazyLock::new(Interner::new);

/// The shared copy of `refs`.
pub fn owners(refs: Vec<OwnerReference>) -> Owners {
    OWNERS.intern(refs)
}

/// The metadata the collector keeps of an object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meta {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub owners: Owners,
    pub finalizers: Vec<String>,
    /// `deletionTimestamp` is set.
    pub deleting: bool,
    pub resource_version: String,
}

impl Meta {
    pub fn from_object_meta(m: &ObjectMeta) -> Meta {
        Meta {
            uid: m.uid.clone().unwrap_or_default(),
            name: m.name.clone().unwrap_or_default(),
            namespace: m.namespace.clone().unwrap_or_default(),
            owners: owners(m.owner_references.clone().unwrap_or_default()),
            finalizers: m.finalizers.clone().unwrap_or_default(),
            deleting: m.deletion_timestamp.is_some(),
            resource_version: m.resource_version.clone().unwrap_or_default(),
        }
    }

    pub fn has_finalizer(&self, f: &str) -> bool {
        self.finalizers.iter().any(|x| x == f)
    }

    /// Equal but for the resource version (a change the graph does not care about).
    pub fn same_graph_state(&self, other: &Meta) -> bool {
        self.uid == other.uid
            && self.name == other.name
            && self.namespace == other.namespace
            && self.owners == other.owners
            && self.finalizers == other.finalizers
            && self.deleting == other.deleting
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Add,
    Update,
    Delete,
}

/// One change to the graph.
#[derive(Debug, Clone)]
pub struct Event {
    /// Made up by the collector (the object was found absent), not seen by a monitor.
    pub virtual_: bool,
    pub kind: EventType,
    pub api_version: String,
    pub obj_kind: String,
    pub obj: Meta,
    pub old: Option<Meta>,
}

impl Event {
    fn identity(&self) -> ObjRef {
        ObjRef {
            kind: self.obj_kind.clone(),
            api_version: normalize_api_version(&self.api_version),
            namespace: self.obj.namespace.clone(),
            name: self.obj.name.clone(),
            uid: self.obj.uid.clone(),
        }
    }

    /// The virtual delete event of an object found absent.
    pub fn virtual_delete(id: &ObjRef) -> Event {
        Event {
            virtual_: true,
            kind: EventType::Delete,
            api_version: id.api_version.clone(),
            obj_kind: id.kind.clone(),
            obj: Meta {
                uid: id.uid.clone(),
                name: id.name.clone(),
                namespace: id.namespace.clone(),
                ..Default::default()
            },
            old: None,
        }
    }
}

/// One object (or a referenced owner not seen yet) in the graph.
#[derive(Debug, Clone, Default)]
pub struct Node {
    pub identity: ObjRef,
    /// The uids of the objects that name this one as an owner.
    pub dependents: HashSet<String>,
    pub owners: Owners,
    /// Being deleted (a one-way trip).
    pub being_deleted: bool,
    /// Being deleted with the `foregroundDeletion` finalizer: waiting for its dependents.
    pub deleting_dependents: bool,
    /// Not seen by a monitor yet: only known from its dependents' references.
    pub virtual_: bool,
}

/// What processing a change asks for.
#[derive(Debug, Default, PartialEq)]
pub struct Effects {
    /// uids for the attempt-to-delete queue.
    pub attempt_to_delete: Vec<String>,
    /// uids for the attempt-to-delete queue, after their back-off.
    pub attempt_to_delete_later: Vec<String>,
    /// uids for the attempt-to-orphan queue.
    pub attempt_to_orphan: Vec<String>,
    /// Owners now known to be absent.
    pub absent: Vec<ObjRef>,
    /// `OwnerRefInvalidNamespace` warnings: the dependent and the message.
    pub invalid_namespace: Vec<(ObjRef, String)>,
}

/// The dependency graph.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: HashMap<String, Node>,
}

/// The owner references whose uid is new, gone, or changed in another field.
fn references_diffs(
    old: &[OwnerReference],
    new: &[OwnerReference],
) -> (
    Vec<OwnerReference>,
    Vec<OwnerReference>,
    Vec<(OwnerReference, OwnerReference)>,
) {
    let mut old_by_uid: HashMap<&str, &OwnerReference> =
        old.iter().map(|r| (r.uid.as_str(), r)).collect();
    let (mut added, mut changed) = (Vec::new(), Vec::new());
    for r in new {
        match old_by_uid.remove(r.uid.as_str()) {
            Some(o) => {
                if o != r {
                    changed.push((o.clone(), r.clone()));
                }
            }
            None => added.push(r.clone()),
        }
    }
    let mut removed: Vec<OwnerReference> = old_by_uid.into_values().cloned().collect();
    removed.sort_by(|a, b| a.uid.cmp(&b.uid));
    (added, removed, changed)
}

fn deletion_starts_with_finalizer(old: Option<&Meta>, new: &Meta, finalizer: &str) -> bool {
    if !new.deleting || !new.has_finalizer(finalizer) {
        return false;
    }
    match old {
        None => true,
        Some(o) => !o.deleting || !o.has_finalizer(finalizer),
    }
}

fn blocks(r: &OwnerReference) -> bool {
    r.block_owner_deletion == Some(true)
}

impl Graph {
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The dependents of `uid` (sorted by uid for a stable order).
    pub fn dependents(&self, uid: &str) -> Vec<&Node> {
        let Some(n) = self.nodes.get(uid) else {
            return Vec::new();
        };
        let mut uids: Vec<&String> = n.dependents.iter().collect();
        uids.sort();
        uids.into_iter()
            .filter_map(|d| self.nodes.get(d.as_str()))
            .collect()
    }

    /// The dependents whose reference to `uid` has `blockOwnerDeletion: true`.
    pub fn blocking_dependents(&self, uid: &str) -> Vec<&Node> {
        self.dependents(uid)
            .into_iter()
            .filter(|d| d.owners.iter().any(|r| r.uid == uid && blocks(r)))
            .collect()
    }

    /// Apply one change.
    pub fn process(&mut self, ev: &Event, out: &mut Effects) {
        let uid = ev.obj.uid.clone();
        let found = self.nodes.contains_key(&uid);
        if found && !ev.virtual_ && self.nodes[&uid].virtual_ {
            // First sight of an owner known so far only from references.
            let observed = ev.identity();
            if observed != self.nodes[&uid].identity {
                let deps: Vec<String> = self.nodes[&uid].dependents.iter().cloned().collect();
                let (_, nonmatching) = self.partition_dependents(&deps, &observed);
                for dep in nonmatching {
                    let dep_ns = self.nodes.get(&dep).map(|d| d.identity.namespace.clone());
                    if !observed.namespace.is_empty()
                        && dep_ns.as_deref() != Some(observed.namespace.as_str())
                    {
                        self.report_invalid_namespace(&dep, &observed.uid, out);
                    }
                    out.attempt_to_delete.push(dep);
                }
                if let Some(n) = self.nodes.get_mut(&uid) {
                    n.identity = observed;
                }
            }
            if let Some(n) = self.nodes.get_mut(&uid) {
                n.virtual_ = false;
            }
        }
        match ev.kind {
            EventType::Add | EventType::Update if !found => {
                let node = Node {
                    identity: ev.identity(),
                    dependents: HashSet::new(),
                    owners: ev.obj.owners.clone(),
                    being_deleted: ev.obj.deleting,
                    deleting_dependents: ev.obj.deleting && ev.obj.has_finalizer(FOREGROUND),
                    virtual_: false,
                };
                let owners = node.owners.clone();
                self.nodes.insert(uid.clone(), node);
                self.add_dependent_to_owners(&uid, &owners, out);
                self.process_transitions(ev.old.as_ref(), &ev.obj, &uid, out);
            }
            EventType::Add | EventType::Update => {
                let api_version = normalize_api_version(&ev.api_version);
                let old_owners = match self.nodes.get_mut(&uid) {
                    Some(n) => {
                        if !ev.virtual_
                            && (n.identity.api_version != api_version
                                || n.identity.kind != ev.obj_kind)
                        {
                            n.identity.api_version = api_version;
                            n.identity.kind = ev.obj_kind.clone();
                        }
                        n.owners.clone()
                    }
                    None => return,
                };
                let (added, removed, changed) = references_diffs(&old_owners, &ev.obj.owners);
                if !added.is_empty() || !removed.is_empty() || !changed.is_empty() {
                    self.add_unblocked_owners_to_delete_queue(&removed, &changed, out);
                    if let Some(n) = self.nodes.get_mut(&uid) {
                        n.owners = ev.obj.owners.clone();
                    }
                    self.add_dependent_to_owners(&uid, &added, out);
                    self.remove_dependent_from_owners(&uid, &removed);
                }
                if ev.obj.deleting {
                    if let Some(n) = self.nodes.get_mut(&uid) {
                        n.being_deleted = true;
                    }
                }
                self.process_transitions(ev.old.as_ref(), &ev.obj, &uid, out);
            }
            EventType::Delete => {
                if !found {
                    return;
                }
                let mut remove_existing = true;
                if ev.virtual_ {
                    let deleted = ev.identity();
                    let (existing_virtual, existing_identity, deps) = {
                        let n = &self.nodes[&uid];
                        let deps: Vec<String> = n.dependents.iter().cloned().collect();
                        (n.virtual_, n.identity.clone(), deps)
                    };
                    if existing_virtual {
                        // Dependents may disagree on this owner's coordinates: only those that
                        // named the verified-absent identity are collected.
                        let (matching, nonmatching) = self.partition_dependents(&deps, &deleted);
                        if !nonmatching.is_empty() {
                            remove_existing = false;
                            if !matching.is_empty() {
                                out.absent.push(deleted.clone());
                                out.attempt_to_delete.extend(matching);
                            }
                            if existing_identity == deleted {
                                if let Some(replacement) =
                                    self.alternate_owner_identity(&nonmatching, &deleted)
                                {
                                    if let Some(n) = self.nodes.get_mut(&uid) {
                                        n.identity = replacement;
                                    }
                                    out.attempt_to_delete_later.push(uid.clone());
                                }
                            }
                        }
                    } else if existing_identity != deleted {
                        // The object seen by a monitor is not the one found absent.
                        remove_existing = false;
                        let (matching, _) = self.partition_dependents(&deps, &deleted);
                        if !matching.is_empty() {
                            out.absent.push(deleted.clone());
                            out.attempt_to_delete.extend(matching);
                        }
                    }
                }
                if remove_existing {
                    if let Some(node) = self.remove_node(&uid) {
                        if !node.dependents.is_empty() {
                            out.absent.push(ev.identity());
                        }
                        let mut deps: Vec<String> = node.dependents.into_iter().collect();
                        deps.sort();
                        out.attempt_to_delete.extend(deps);
                        for owner in node.owners.iter() {
                            if self
                                .nodes
                                .get(&owner.uid)
                                .is_some_and(|o| o.deleting_dependents)
                            {
                                out.attempt_to_delete.push(owner.uid.clone());
                            }
                        }
                    }
                }
            }
        }
    }

    fn report_invalid_namespace(&self, dep_uid: &str, owner_uid: &str, out: &mut Effects) {
        let Some(dep) = self.nodes.get(dep_uid) else {
            return;
        };
        let Some(r) = dep.owners.iter().find(|r| r.uid == owner_uid) else {
            return;
        };
        let invalid = ObjRef::of_owner(r, &dep.identity.namespace);
        out.invalid_namespace.push((
            dep.identity.clone(),
            format!(
                "ownerRef {invalid} does not exist in namespace {:?}",
                dep.identity.namespace
            ),
        ));
    }

    /// Add `uid` to its owners' dependents, creating virtual nodes for owners not seen yet
    /// (to be verified), and queue `uid` itself if a reference looks wrong.
    fn add_dependent_to_owners(&mut self, uid: &str, owners: &[OwnerReference], out: &mut Effects) {
        let Some(n) = self.nodes.get(uid) else {
            return;
        };
        let n_namespace = n.identity.namespace.clone();
        let mut potentially_invalid = false;
        for owner in owners {
            let existed = self.nodes.contains_key(&owner.uid);
            if !existed {
                self.nodes.insert(
                    owner.uid.clone(),
                    Node {
                        identity: ObjRef::of_owner(owner, &n_namespace),
                        virtual_: true,
                        ..Default::default()
                    },
                );
            }
            let Some(owner_node) = self.nodes.get_mut(&owner.uid) else {
                continue;
            };
            owner_node.dependents.insert(uid.to_string());
            if !existed {
                out.attempt_to_delete.push(owner.uid.clone());
                continue;
            }
            if potentially_invalid {
                continue;
            }
            let owner_id = owner_node.identity.clone();
            let observed = !owner_node.virtual_;
            let owner_namespaced = !owner_id.namespace.is_empty();
            if owner_namespaced && owner_id.namespace != n_namespace {
                if observed {
                    self.report_invalid_namespace(uid, &owner.uid, out);
                }
                potentially_invalid = true;
            } else if !matches_coordinates(owner, &owner_id)
                || (!owner_namespaced && owner_id.namespace != n_namespace && !observed)
            {
                potentially_invalid = true;
            }
        }
        if potentially_invalid {
            out.attempt_to_delete.push(uid.to_string());
        }
    }

    fn remove_dependent_from_owners(&mut self, uid: &str, owners: &[OwnerReference]) {
        for owner in owners {
            if let Some(o) = self.nodes.get_mut(&owner.uid) {
                o.dependents.remove(uid);
            }
        }
    }

    fn remove_node(&mut self, uid: &str) -> Option<Node> {
        let node = self.nodes.remove(uid)?;
        self.remove_dependent_from_owners(uid, &node.owners);
        Some(node)
    }

    /// Owners a removed or no-longer-blocking reference was holding up are looked at again.
    fn add_unblocked_owners_to_delete_queue(
        &self,
        removed: &[OwnerReference],
        changed: &[(OwnerReference, OwnerReference)],
        out: &mut Effects,
    ) {
        for r in removed {
            if blocks(r) && self.nodes.contains_key(&r.uid) {
                out.attempt_to_delete.push(r.uid.clone());
            }
        }
        for (old, new) in changed {
            if blocks(old) && !blocks(new) && self.nodes.contains_key(&new.uid) {
                out.attempt_to_delete.push(new.uid.clone());
            }
        }
    }

    fn process_transitions(
        &mut self,
        old: Option<&Meta>,
        new: &Meta,
        uid: &str,
        out: &mut Effects,
    ) {
        if deletion_starts_with_finalizer(old, new, ORPHAN) {
            out.attempt_to_orphan.push(uid.to_string());
            return;
        }
        if deletion_starts_with_finalizer(old, new, FOREGROUND) {
            if let Some(n) = self.nodes.get_mut(uid) {
                n.deleting_dependents = true;
                let mut deps: Vec<String> = n.dependents.iter().cloned().collect();
                deps.sort();
                out.attempt_to_delete.extend(deps);
            }
            out.attempt_to_delete.push(uid.to_string());
        }
    }

    /// Split dependents into those whose reference matches `owner` exactly and those that name
    /// its uid with other coordinates (or live in another namespace than a namespaced owner).
    fn partition_dependents(&self, deps: &[String], owner: &ObjRef) -> (Vec<String>, Vec<String>) {
        let owner_namespaced = !owner.namespace.is_empty();
        let (mut matching, mut nonmatching) = (Vec::new(), Vec::new());
        let mut deps: Vec<&String> = deps.iter().collect();
        deps.sort();
        for dep_uid in deps {
            let Some(dep) = self.nodes.get(dep_uid.as_str()) else {
                continue;
            };
            let (mut found_match, mut found_mismatch) = (false, false);
            if owner_namespaced && owner.namespace != dep.identity.namespace {
                found_mismatch = true;
            } else {
                for r in dep.owners.iter().filter(|r| r.uid == owner.uid) {
                    if matches_coordinates(r, owner) {
                        found_match = true;
                    } else {
                        found_mismatch = true;
                    }
                }
            }
            if found_match {
                matching.push(dep_uid.clone());
            }
            if found_mismatch {
                nonmatching.push(dep_uid.clone());
            }
        }
        (matching, nonmatching)
    }

    /// Another identity the dependents give this uid: the first after `absent` in reference
    /// order, else the first overall.
    fn alternate_owner_identity(&self, deps: &[String], absent: &ObjRef) -> Option<ObjRef> {
        let absent_cluster_scoped = absent.namespace.is_empty();
        let mut seen: HashSet<ObjRef> = HashSet::from([absent.clone()]);
        let mut first: Option<ObjRef> = None;
        let mut first_following: Option<ObjRef> = None;
        for dep_uid in deps {
            let Some(dep) = self.nodes.get(dep_uid.as_str()) else {
                continue;
            };
            for r in dep.owners.iter().filter(|r| r.uid == absent.uid) {
                if matches_coordinates(r, absent)
                    && (absent_cluster_scoped || absent.namespace == dep.identity.namespace)
                {
                    continue;
                }
                let mut candidate = ObjRef::of_owner(r, &dep.identity.namespace);
                if absent_cluster_scoped
                    && candidate.api_version == absent.api_version
                    && candidate.kind == absent.kind
                {
                    candidate.namespace.clear();
                }
                if !seen.insert(candidate.clone()) {
                    continue;
                }
                if first.as_ref().is_none_or(|f| candidate < *f) {
                    first = Some(candidate.clone());
                }
                if *absent < candidate && first_following.as_ref().is_none_or(|f| candidate < *f) {
                    first_following = Some(candidate);
                }
            }
        }
        first_following.or(first)
    }
}

/// Owners verified absent (Kubernetes' absentOwnerCache): a bounded LRU set.
#[derive(Debug)]
pub struct AbsentCache {
    capacity: usize,
    order: VecDeque<ObjRef>,
    set: HashSet<ObjRef>,
}

impl AbsentCache {
    pub fn new(capacity: usize) -> AbsentCache {
        AbsentCache {
            capacity,
            order: VecDeque::new(),
            set: HashSet::new(),
        }
    }

    pub fn add(&mut self, r: ObjRef) {
        if self.set.contains(&r) {
            self.touch(&r);
            return;
        }
        self.set.insert(r.clone());
        self.order.push_back(r);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    pub fn has(&mut self, r: &ObjRef) -> bool {
        if self.set.contains(r) {
            self.touch(r);
            true
        } else {
            false
        }
    }

    fn touch(&mut self, r: &ObjRef) {
        if let Some(i) = self.order.iter().position(|x| x == r) {
            if let Some(x) = self.order.remove(i) {
                self.order.push_back(x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oref(kind: &str, name: &str, uid: &str, block: bool) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: None,
            block_owner_deletion: block.then_some(true),
        }
    }

    fn meta(ns: &str, name: &str, uid: &str, owners: Vec<OwnerReference>) -> Meta {
        Meta {
            uid: uid.into(),
            name: name.into(),
            namespace: ns.into(),
            owners: owners.into(),
            ..Default::default()
        }
    }

    fn ev(kind: EventType, obj: Meta, old: Option<Meta>) -> Event {
        Event {
            virtual_: false,
            kind,
            api_version: "v1".into(),
            obj_kind: "ConfigMap".into(),
            obj,
            old,
        }
    }

    fn add(g: &mut Graph, m: Meta) -> Effects {
        let mut out = Effects::default();
        g.process(&ev(EventType::Add, m, None), &mut out);
        out
    }

    #[test]
    fn an_unseen_owner_becomes_a_virtual_node_to_verify() {
        let mut g = Graph::default();
        let out = add(
            &mut g,
            meta(
                "ns",
                "child",
                "c",
                vec![oref("ConfigMap", "owner", "o", false)],
            ),
        );
        assert_eq!(out.attempt_to_delete, ["o"]);
        let owner = g.get("o").unwrap();
        assert!(owner.virtual_);
        assert_eq!(owner.identity.namespace, "ns");
        assert!(owner.dependents.contains("c"));
        // The owner is then seen: no longer virtual, nothing to do.
        let out = add(&mut g, meta("ns", "owner", "o", vec![]));
        assert_eq!(out, Effects::default());
        assert!(!g.get("o").unwrap().virtual_);
    }

    #[test]
    fn deleting_an_owner_queues_its_dependents_and_marks_it_absent() {
        let mut g = Graph::default();
        add(&mut g, meta("ns", "owner", "o", vec![]));
        add(
            &mut g,
            meta("ns", "a", "a", vec![oref("ConfigMap", "owner", "o", false)]),
        );
        add(
            &mut g,
            meta("ns", "b", "b", vec![oref("ConfigMap", "owner", "o", false)]),
        );
        let mut out = Effects::default();
        g.process(
            &ev(EventType::Delete, meta("ns", "owner", "o", vec![]), None),
            &mut out,
        );
        assert_eq!(out.attempt_to_delete, ["a", "b"]);
        assert_eq!(out.absent.len(), 1);
        assert_eq!(out.absent[0].name, "owner");
        assert!(g.get("o").is_none());
    }

    #[test]
    fn foreground_and_orphan_deletions_start_once() {
        let mut g = Graph::default();
        add(&mut g, meta("ns", "owner", "o", vec![]));
        add(
            &mut g,
            meta("ns", "a", "a", vec![oref("ConfigMap", "owner", "o", true)]),
        );
        let mut deleting = meta("ns", "owner", "o", vec![]);
        deleting.deleting = true;
        deleting.finalizers = vec![FOREGROUND.into()];
        let mut out = Effects::default();
        g.process(
            &ev(
                EventType::Update,
                deleting.clone(),
                Some(meta("ns", "owner", "o", vec![])),
            ),
            &mut out,
        );
        assert_eq!(out.attempt_to_delete, ["a", "o"]);
        assert!(g.get("o").unwrap().deleting_dependents);
        assert_eq!(g.blocking_dependents("o").len(), 1);
        // A later update of the same state starts nothing.
        let mut out = Effects::default();
        g.process(
            &ev(EventType::Update, deleting.clone(), Some(deleting)),
            &mut out,
        );
        assert_eq!(out, Effects::default());

        let mut orphaning = meta("ns", "x", "x", vec![]);
        orphaning.deleting = true;
        orphaning.finalizers = vec![ORPHAN.into()];
        let out = add(&mut g, orphaning);
        assert_eq!(out.attempt_to_orphan, ["x"]);
    }

    #[test]
    fn a_dropped_blocking_reference_requeues_the_owner() {
        let mut g = Graph::default();
        add(&mut g, meta("ns", "owner", "o", vec![]));
        let with = meta("ns", "a", "a", vec![oref("ConfigMap", "owner", "o", true)]);
        add(&mut g, with.clone());
        let mut out = Effects::default();
        g.process(
            &ev(EventType::Update, meta("ns", "a", "a", vec![]), Some(with)),
            &mut out,
        );
        assert_eq!(out.attempt_to_delete, ["o"]);
        assert!(g.get("o").unwrap().dependents.is_empty());
    }

    #[test]
    fn a_reference_to_an_owner_in_another_namespace_is_reported() {
        let mut g = Graph::default();
        add(&mut g, meta("other", "owner", "o", vec![]));
        let out = add(
            &mut g,
            meta(
                "ns",
                "child",
                "c",
                vec![oref("ConfigMap", "owner", "o", false)],
            ),
        );
        assert_eq!(out.attempt_to_delete, ["c"]);
        assert_eq!(out.invalid_namespace.len(), 1);
        assert_eq!(
            out.invalid_namespace[0].1,
            "ownerRef [v1/ConfigMap, namespace: ns, name: owner, uid: o] does not exist in namespace \"ns\""
        );
    }

    #[test]
    fn a_virtual_delete_spares_dependents_that_name_the_owner_differently() {
        let mut g = Graph::default();
        // Two dependents name uid "o" with different kinds.
        add(
            &mut g,
            meta("ns", "a", "a", vec![oref("ConfigMap", "owner", "o", false)]),
        );
        add(
            &mut g,
            meta("ns", "b", "b", vec![oref("Secret", "owner", "o", false)]),
        );
        let virtual_id = g.get("o").unwrap().identity.clone();
        assert_eq!(virtual_id.kind, "ConfigMap");
        let mut out = Effects::default();
        g.process(&Event::virtual_delete(&virtual_id), &mut out);
        // "a" named the absent identity: collected; the node stays as the Secret identity.
        assert_eq!(out.attempt_to_delete, ["a"]);
        assert_eq!(out.absent, [virtual_id]);
        assert_eq!(out.attempt_to_delete_later, ["o"]);
        assert_eq!(g.get("o").unwrap().identity.kind, "Secret");
        // The Secret identity verified absent too: "b" collected.
        let id = g.get("o").unwrap().identity.clone();
        let mut out = Effects::default();
        g.process(&Event::virtual_delete(&id), &mut out);
        assert_eq!(out.attempt_to_delete, ["b"]);
        // Once both dependents are gone, the virtual owner leaves the graph.
        for (n, kind) in [("a", "ConfigMap"), ("b", "Secret")] {
            let mut out = Effects::default();
            g.process(
                &ev(
                    EventType::Delete,
                    meta("ns", n, n, vec![oref(kind, "owner", "o", false)]),
                    None,
                ),
                &mut out,
            );
        }
        assert!(g.get("o").unwrap().dependents.is_empty());
        let id = g.get("o").unwrap().identity.clone();
        let mut out = Effects::default();
        g.process(&Event::virtual_delete(&id), &mut out);
        assert!(g.get("o").is_none());
    }

    #[test]
    fn absent_cache_evicts_least_recently_used() {
        let r = |n: &str| ObjRef {
            name: n.into(),
            ..Default::default()
        };
        let mut c = AbsentCache::new(2);
        c.add(r("a"));
        c.add(r("b"));
        assert!(c.has(&r("a")));
        c.add(r("c"));
        assert!(!c.has(&r("b")));
        assert!(c.has(&r("a")));
        assert!(c.has(&r("c")));
    }

    #[test]
    fn normalized_api_versions() {
        assert_eq!(normalize_api_version("apps/v1"), "apps/v1");
        assert_eq!(normalize_api_version("v1"), "v1");
        assert_eq!(normalize_api_version("a/b/c"), "");
    }
}
