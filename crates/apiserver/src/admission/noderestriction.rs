//! NodeRestriction, as Kubernetes' `plugin/pkg/admission/noderestriction`: a kubelet
//! (`system:node:<name>` in `system:nodes`) may only touch what belongs to its node: its Node
//! object (not its taints, and only kubelet-owned `kubernetes.io`/`k8s.io` labels), mirror pods
//! bound to it, the status and evictions of pods bound to it, its Lease and CSINode, tokens
//! bound to its pods, the status of claims, and ResourceSlices of its node. Kubernetes runs it
//! in the mutating phase, so its rejections come before any validation.

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::builtin::{
    forbidden, is_mirror_pod, items, pod_configmap_names, pod_secret_names, str_at,
};
use super::{Attributes, Operation, Plugin};
use crate::auth::User;
use crate::error::{ApiError, ApiResult};
use capstan_api::meta::At as _;

pub const NODES_GROUP: &str = "system:nodes";
pub const NODE_USER_PREFIX: &str = "system:node:";
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Kubernetes' `NodeIdentity`: `Some(name)` for a node user (the name may be empty).
pub fn node_identity(user: &User) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_USER_PREFIX)?;
    user.in_group(NODES_GROUP).then_some(name)
}

/// The NodeRestriction admission plugin.
pub struct NodeRestriction;

#[async_trait]
impl Plugin for NodeRestriction {
    fn name(&self) -> &'static str {
        "NodeRestriction"
    }

    async fn admit(
        &self,
        a: &Attributes<'_>,
        obj: Option<&mut Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let Some(node) = node_identity(a.user) else {
            return Ok(());
        };
        let obj = obj.map(|o| &*o);
        if node.is_empty() {
            return Err(forbidden(
                a,
                obj,
                format!("could not determine node from user \"{}\"", a.user.name),
            ));
        }
        let r = Request { a, node, obj, old };
        match (a.info.group, a.info.plural) {
            ("", "pods") => match a.subresource {
                "" => r.pod().await,
                "status" => r.pod_status(),
                "eviction" => r.pod_eviction(),
                sub => Err(r.deny(format!(
                    "unexpected pod subresource \"{sub}\", only 'status' and 'eviction' are allowed"
                ))),
            },
            ("", "nodes") => r.node(),
            ("", "persistentvolumeclaims") => match a.subresource {
                "status" => r.claim_status(),
                _ => Err(r.deny("may only update PVC status")),
            },
            ("", "serviceaccounts") => r.token_request(),
            ("coordination.k8s.io", "leases") => r.lease(),
            ("storage.k8s.io", "csinodes") => r.named_after_node("CSINode"),
            ("resource.k8s.io", "resourceslices") => r.resource_slice(),
            _ => Ok(()),
        }
    }
}

struct Request<'r, 'a> {
    a: &'r Attributes<'a>,
    node: &'r str,
    obj: Option<&'r Value>,
    old: Option<&'r Value>,
}

impl Request<'_, '_> {
    fn deny(&self, reason: impl std::fmt::Display) -> ApiError {
        forbidden(self.a, self.obj.or(self.old), reason)
    }

    /// The stored pod the request names: the old object, else the cache.
    fn existing_pod(&self, name: &str) -> ApiResult<Value> {
        if let Some(old) = self.old {
            return Ok(old.clone());
        }
        self.a
            .objects
            .get("", "pods", self.a.namespace, name)
            .ok_or_else(|| ApiError::not_found(self.a.info, name))
    }

    async fn pod(&self) -> ApiResult<()> {
        let node = self.node;
        match self.a.operation {
            Operation::Create => self.mirror_pod_create().await,
            Operation::Delete => {
                let pod = self.existing_pod(self.a.name)?;
                if str_at(&pod, "/spec/nodeName") != node {
                    return Err(self.deny(format!(
                        "node \"{node}\" can only delete pods with spec.nodeName set to itself"
                    )));
                }
                Ok(())
            }
            op => Err(self.deny(format!(
                "unexpected operation \"{}\", node \"{node}\" can only create and delete mirror pods",
                op.as_str()
            ))),
        }
    }

    async fn mirror_pod_create(&self) -> ApiResult<()> {
        let node = self.node;
        let Some(pod) = self.obj else { return Ok(()) };
        if !is_mirror_pod(pod) {
            return Err(self.deny(format!(
                "pod does not have \"kubernetes.io/config.mirror\" annotation, node \"{node}\" can only create mirror pods"
            )));
        }
        if str_at(pod, "/spec/nodeName") != node {
            return Err(self.deny(format!(
                "node \"{node}\" can only create pods with spec.nodeName set to itself"
            )));
        }
        let owners = items(pod, "/metadata/ownerReferences");
        match owners {
            [] => {
                return Err(self.deny(format!(
                    "node \"{node}\" can only create pods with an owner reference set to itself"
                )))
            }
            [owner] => self.check_owner(owner).await?,
            _ => {
                return Err(self.deny(format!(
                "node \"{node}\" can only create pods with a single owner reference set to itself"
            )))
            }
        }
        if !str_at(pod, "/spec/serviceAccountName").is_empty() {
            return Err(self.deny(format!(
                "node \"{node}\" can not create pods that reference a service account"
            )));
        }
        if !pod_secret_names(pod).is_empty() {
            return Err(self.deny(format!(
                "node \"{node}\" can not create pods that reference secrets"
            )));
        }
        if !pod_configmap_names(pod).is_empty() {
            return Err(self.deny(format!(
                "node \"{node}\" can not create pods that reference configmaps"
            )));
        }
        if items(pod, "/spec/volumes")
            .iter()
            .any(|v| v.get("persistentVolumeClaim").is_some())
        {
            return Err(self.deny(format!(
                "node \"{node}\" can not create pods that reference persistentvolumeclaims"
            )));
        }
        if !items(pod, "/spec/resourceClaims").is_empty() {
            return Err(self.deny(format!(
                "node \"{node}\" can not create pods that reference resourceclaims"
            )));
        }
        Ok(())
    }

    /// A mirror pod's one owner must be its Node, as controller, without blockOwnerDeletion.
    async fn check_owner(&self, owner: &Value) -> ApiResult<()> {
        let node = self.node;
        if str_at(owner, "/apiVersion") != "v1"
            || str_at(owner, "/kind") != "Node"
            || str_at(owner, "/name") != node
        {
            return Err(self.deny(format!(
                "node \"{node}\" can only create pods with an owner reference set to itself"
            )));
        }
        if owner.get("controller").and_then(Value::as_bool) != Some(true) {
            return Err(self.deny(format!(
                "node \"{node}\" can only create pods with a controller owner reference set to itself"
            )));
        }
        if owner.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true) {
            return Err(self.deny(format!(
                "node \"{node}\" must not set blockOwnerDeletion on an owner reference"
            )));
        }
        // As Kubernetes, a live read: a kubelet creates its mirror pods right after it
        // registered its Node, before the cache may have seen it (or a re-created one).
        let got = str_at(owner, "/uid");
        let cached = self.a.objects.get("", "nodes", "", node);
        let node_obj = match cached {
            Some(n) if capstan_api::meta::uid(&n) == got => Some(n),
            _ => self.a.objects.get_current("", "nodes", "", node).await?,
        };
        let Some(node_obj) = node_obj else {
            return Err(ApiError::new(
                404,
                "NotFound",
                format!("nodes \"{node}\" not found"),
            ));
        };
        let want = capstan_api::meta::uid(&node_obj);
        if want != got {
            return Err(self.deny(format!(
                "node {node} UID mismatch: expected {want} got {got}"
            )));
        }
        Ok(())
    }

    fn pod_status(&self) -> ApiResult<()> {
        let node = self.node;
        if self.a.operation != Operation::Update {
            return Err(self.deny(format!(
                "unexpected operation \"{}\"",
                self.a.operation.as_str()
            )));
        }
        let (Some(old), Some(new)) = (self.old, self.obj) else {
            return Ok(());
        };
        if str_at(old, "/spec/nodeName") != node {
            return Err(self.deny(format!(
                "node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"
            )));
        }
        if labels_of(old) != labels_of(new) {
            return Err(self.deny(format!(
                "node \"{node}\" cannot update labels through pod status"
            )));
        }
        let claims = |p: &Value| {
            p.at("/status/resourceClaimStatuses")
                .cloned()
                .filter(|v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()))
        };
        if claims(old) != claims(new) {
            return Err(self.deny(format!(
                "node \"{node}\" cannot update resource claim statues"
            )));
        }
        Ok(())
    }

    fn pod_eviction(&self) -> ApiResult<()> {
        let node = self.node;
        if self.a.operation != Operation::Create {
            return Err(self.deny(format!(
                "unexpected operation {}",
                self.a.operation.as_str()
            )));
        }
        let mut pod_name = self.a.name.to_string();
        if pod_name.is_empty() {
            pod_name = self
                .obj
                .map(|e| capstan_api::meta::name(e).to_string())
                .unwrap_or_default();
            if pod_name.is_empty() {
                return Err(self.deny("could not determine pod from request data"));
            }
        }
        let Some(pod) = self.a.objects.get("", "pods", self.a.namespace, &pod_name) else {
            return Err(ApiError::not_found(self.a.info, &pod_name));
        };
        if str_at(&pod, "/spec/nodeName") != node {
            return Err(self.deny(format!(
                "node {node} can only evict pods with spec.nodeName set to itself"
            )));
        }
        Ok(())
    }

    fn node(&self) -> ApiResult<()> {
        let node = self.node;
        let requested = match (self.a.name, self.obj) {
            ("", Some(o)) => capstan_api::meta::name(o),
            (n, _) => n,
        };
        if requested != node {
            return Err(self.deny(format!(
                "node \"{node}\" is not allowed to modify node \"{requested}\""
            )));
        }
        match (self.a.operation, self.obj) {
            (Operation::Create, Some(new)) => {
                if new.at("/spec/configSource").is_some_and(|v| !v.is_null()) {
                    return Err(self.deny(format!(
                        "node \"{node}\" is not allowed to create pods with a non-nil configSource"
                    )));
                }
                let bad = forbidden_labels(&modified_labels(labels_of(new), &Map::new()));
                if !bad.is_empty() {
                    return Err(self.deny(format!(
                        "node \"{node}\" is not allowed to set the following labels: {}",
                        bad.join(", ")
                    )));
                }
            }
            (Operation::Update, Some(new)) => {
                let Some(old) = self.old else { return Ok(()) };
                let source = new.at("/spec/configSource").filter(|v| !v.is_null());
                if source.is_some() && source != old.at("/spec/configSource") {
                    return Err(self.deny(format!(
                        "node \"{node}\" is not allowed to update configSource to a new non-nil configSource"
                    )));
                }
                if taints_of(new) != taints_of(old) {
                    return Err(
                        self.deny(format!("node \"{node}\" is not allowed to modify taints"))
                    );
                }
                let bad = forbidden_labels(&modified_labels(labels_of(new), labels_of(old)));
                if !bad.is_empty() {
                    return Err(self.deny(format!(
                        "is not allowed to modify labels: {}",
                        bad.join(", ")
                    )));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Only `status.capacity`, `status.conditions` and the allocated resources may change.
    fn claim_status(&self) -> ApiResult<()> {
        let node = self.node;
        if self.a.operation != Operation::Update {
            return Err(self.deny(format!(
                "unexpected operation \"{}\"",
                self.a.operation.as_str()
            )));
        }
        let (Some(old), Some(new)) = (self.old, self.obj) else {
            return Ok(());
        };
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                md.remove("resourceVersion");
                md.remove("managedFields");
            }
            if let Some(st) = v.get_mut("status").and_then(Value::as_object_mut) {
                for f in [
                    "capacity",
                    "conditions",
                    "allocatedResources",
                    "allocatedResourceStatuses",
                ] {
                    st.remove(f);
                }
            }
            v
        };
        let (old, new) = (strip(old), strip(new));
        if old != new {
            let changed = changed_fields(&old, &new);
            return Err(self.deny(format!(
                "node \"{node}\" is not allowed to update fields other than status.capacity and status.conditions: {}",
                changed.join(", ")
            )));
        }
        Ok(())
    }

    /// TokenRequests from a node must be bound to a pod on that node.
    fn token_request(&self) -> ApiResult<()> {
        if self.a.operation != Operation::Create || self.a.subresource != "token" {
            return Ok(());
        }
        let Some(tr) = self.obj else { return Ok(()) };
        let r = tr.at("/spec/boundObjectRef").filter(|v| v.is_object());
        let Some(r) = r.filter(|r| {
            str_at(r, "/apiVersion") == "v1"
                && str_at(r, "/kind") == "Pod"
                && !str_at(r, "/name").is_empty()
        }) else {
            return Err(self.deny("node requested token not bound to a pod"));
        };
        let uid = str_at(r, "/uid");
        if uid.is_empty() {
            return Err(self.deny("node requested token with a pod binding without a uid"));
        }
        let name = str_at(r, "/name");
        let Some(pod) = self.a.objects.get("", "pods", self.a.namespace, name) else {
            return Err(ApiError::new(
                404,
                "NotFound",
                format!("pods \"{name}\" not found"),
            ));
        };
        if capstan_api::meta::uid(&pod) != uid {
            return Err(self.deny(format!(
                "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
            )));
        }
        if str_at(&pod, "/spec/nodeName") != self.node {
            return Err(
                self.deny("node requested token bound to a pod scheduled on a different node")
            );
        }
        Ok(())
    }

    fn lease(&self) -> ApiResult<()> {
        if self.a.namespace != NODE_LEASE_NAMESPACE {
            return Err(self.deny(format!(
                "can only access leases in the \"{NODE_LEASE_NAMESPACE}\" system namespace"
            )));
        }
        if self.target_name() != self.node {
            return Err(
                self.deny("can only access node lease with the same name as the requesting node")
            );
        }
        Ok(())
    }

    fn named_after_node(&self, kind: &str) -> ApiResult<()> {
        if self.target_name() != self.node {
            return Err(self.deny(format!(
                "can only access {kind} with the same name as the requesting node"
            )));
        }
        Ok(())
    }

    /// The object's name on create (the request has none yet), else the request's.
    fn target_name(&self) -> &str {
        match (self.a.operation, self.obj) {
            (Operation::Create, Some(o)) => capstan_api::meta::name(o),
            _ => self.a.name,
        }
    }

    fn resource_slice(&self) -> ApiResult<()> {
        let slice = match self.a.operation {
            Operation::Create => self.obj,
            Operation::Delete => self.old,
            _ => return Ok(()),
        };
        let Some(slice) = slice else { return Ok(()) };
        if str_at(slice, "/spec/nodeName") != self.node {
            return Err(self.deny(
                "can only create ResourceSlice with the same NodeName as the requesting node",
            ));
        }
        Ok(())
    }
}

fn labels_of(v: &Value) -> &Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    capstan_api::meta::labels(v).unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

fn taints_of(v: &Value) -> &[Value] {
    items(v, "/spec/taints")
}

/// Keys added, removed or changed between two label maps, sorted.
fn modified_labels(a: &Map<String, Value>, b: &Map<String, Value>) -> Vec<String> {
    let mut keys: Vec<String> = a
        .iter()
        .filter(|(k, v)| b.get(*k) != Some(v))
        .map(|(k, _)| k.clone())
        .chain(
            b.iter()
                .filter(|(k, v)| a.get(*k) != Some(v))
                .map(|(k, _)| k.clone()),
        )
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or("")
}

fn in_namespace(ns: &str, domain: &str) -> bool {
    ns == domain || ns.ends_with(&format!(".{domain}"))
}

/// Labels the kubelet sets on its own Node (Kubernetes' `IsKubeletLabel`).
pub fn is_kubelet_label(key: &str) -> bool {
    const LABELS: &[&str] = &[
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    ];
    if LABELS.contains(&key) {
        return true;
    }
    let ns = label_namespace(key);
    in_namespace(ns, "kubelet.kubernetes.io") || in_namespace(ns, "node.kubernetes.io")
}

/// Of the modified labels, those a node may not set: `node-restriction.kubernetes.io/` ones,
/// and `kubernetes.io`/`k8s.io` ones the kubelet does not own (e.g. `node-role.kubernetes.io/`).
fn forbidden_labels(modified: &[String]) -> Vec<String> {
    modified
        .iter()
        .filter(|k| {
            let ns = label_namespace(k);
            let restricted = in_namespace(ns, "node-restriction.kubernetes.io");
            let kube = in_namespace(ns, "kubernetes.io") || in_namespace(ns, "k8s.io");
            restricted || (kube && !is_kubelet_label(k))
        })
        .cloned()
        .collect()
}

/// Top-level paths that differ between two objects (for the claim status message).
fn changed_fields(old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for section in ["metadata", "spec", "status"] {
        let (o, n) = (old.get(section), new.get(section));
        if o == n {
            continue;
        }
        let (om, nm) = (
            o.and_then(Value::as_object).cloned().unwrap_or_default(),
            n.and_then(Value::as_object).cloned().unwrap_or_default(),
        );
        for k in om.keys().chain(nm.keys()) {
            let path = format!("{section}.{k}");
            if om.get(k) != nm.get(k) && !out.contains(&path) {
                out.push(path);
            }
        }
    }
    out
}
