//! The Node authorizer, as Kubernetes' `plugin/pkg/auth/authorizer/node`: a kubelet
//! (`system:node:<name>` in group `system:nodes`) may read the secrets, config maps, claims,
//! volumes, resource claims and volume attachments that pods bound to its node need, create
//! tokens for their service accounts, and manage its own Lease and CSINode; everything else a
//! kubelet needs is granted by the fixed rules of Kubernetes' `system:node` role, which this
//! authorizer applies itself (as Kubernetes does: that role is not bound to anyone).
//!
//! Instead of Kubernetes' graph, kept up to date by informers, each decision walks the pods
//! bound to the node in the cache (`Objects::pods_on_node`, an index) and the objects they
//! name: the same relationships, as fresh as the cache.
//!
//! As with Kubernetes v1.32's `AuthorizeNodeWithSelectors` (beta, on by default), a node
//! reads only its own Node and the pods bound to it: a get names them, a list or watch must
//! select them with a field selector (`metadata.name=<node>`, `spec.nodeName=<node>`).
//! Kubernetes returns its reasons with "no opinion"; [`Decision::NoOpinion`] has no room for
//! them, so they are dropped. The authorizer never denies.

use std::sync::Arc;

use serde_json::Value;

use crate::admission::builtin::{
    is_mirror_pod, items, pod_configmap_names, pod_secret_names, str_at,
};
use crate::admission::noderestriction::node_identity;
use crate::auth::{Authorizer, Decision, User};
use crate::objects::Objects;
use crate::request::RequestInfo;
use capstan_api::meta::At as _;

const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The Node authorizer.
pub struct NodeAuthorizer {
    objects: Arc<dyn Objects>,
}

impl NodeAuthorizer {
    pub fn new(objects: Arc<dyn Objects>) -> NodeAuthorizer {
        NodeAuthorizer { objects }
    }
}

/// The kinds of objects a node reaches through its pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Secret,
    ConfigMap,
    Claim,
    Volume,
    ServiceAccount,
    ResourceClaim,
    Attachment,
    Slice,
}

impl Authorizer for NodeAuthorizer {
    fn authorize(&self, user: &User, req: &RequestInfo) -> Decision {
        let Some(node) = node_identity(user) else {
            return Decision::NoOpinion;
        };
        if node.is_empty() {
            return Decision::NoOpinion;
        }
        if req.is_resource {
            let subdivided = match (req.group.as_str(), req.resource.as_str()) {
                ("", "secrets") => Some(self.read_namespaced(node, Kind::Secret, req)),
                ("", "configmaps") => Some(self.read_namespaced(node, Kind::ConfigMap, req)),
                ("", "persistentvolumeclaims") if req.subresource == "status" => {
                    Some(self.status_update(node, Kind::Claim, req))
                }
                ("", "persistentvolumeclaims") => Some(self.get(node, Kind::Claim, req)),
                ("", "persistentvolumes") => Some(self.get(node, Kind::Volume, req)),
                ("resource.k8s.io", "resourceclaims") => {
                    Some(self.get(node, Kind::ResourceClaim, req))
                }
                ("storage.k8s.io", "volumeattachments") => {
                    Some(self.get(node, Kind::Attachment, req))
                }
                ("", "serviceaccounts") => Some(self.create_token(node, req)),
                ("", "pods") if is_read(req) => Some(self.read_pods(node, req)),
                ("", "nodes") if is_read(req) => Some(read_nodes(node, req)),
                ("coordination.k8s.io", "leases") => Some(lease(node, req)),
                ("storage.k8s.io", "csinodes") => Some(csi_node(node, req)),
                ("resource.k8s.io", "resourceslices") => Some(self.resource_slice(node, req)),
                _ => None,
            };
            if let Some(d) = subdivided {
                return d;
            }
        }
        if node_rules_allow(req) {
            Decision::Allow
        } else {
            Decision::NoOpinion
        }
    }
}

fn is_read(req: &RequestInfo) -> bool {
    req.subresource.is_empty() && matches!(req.verb.as_str(), "get" | "list" | "watch")
}

/// Whether a field selector requires `field` to equal `value`.
fn selects(field_selector: &str, field: &str, value: &str) -> bool {
    field_selector.split(',').any(|term| {
        let term = term.trim();
        let Some(rest) = term.strip_prefix(field) else {
            return false;
        };
        let rest = rest.trim_start();
        let v = rest
            .strip_prefix("==")
            .or_else(|| rest.strip_prefix('='))
            .map(str::trim);
        v == Some(value)
    })
}

/// A node's own Node: by name, or a list/watch selecting it by name.
fn read_nodes(node: &str, req: &RequestInfo) -> Decision {
    allow_if(match req.verb.as_str() {
        "get" => req.name == node,
        _ => {
            (req.name.is_empty() || req.name == node)
                && selects(&req.field_selector, "metadata.name", node)
        }
    })
}

fn allow_if(ok: bool) -> Decision {
    if ok {
        Decision::Allow
    } else {
        Decision::NoOpinion
    }
}

impl NodeAuthorizer {
    /// Secrets and config maps: get/list/watch of a named object a pod of the node uses.
    fn read_namespaced(&self, node: &str, kind: Kind, req: &RequestInfo) -> Decision {
        if !matches!(req.verb.as_str(), "get" | "list" | "watch")
            || !req.subresource.is_empty()
            || req.namespace.is_empty()
        {
            return Decision::NoOpinion;
        }
        self.authorize_path(node, kind, req)
    }

    fn get(&self, node: &str, kind: Kind, req: &RequestInfo) -> Decision {
        if req.verb != "get" || !req.subresource.is_empty() {
            return Decision::NoOpinion;
        }
        self.authorize_path(node, kind, req)
    }

    fn status_update(&self, node: &str, kind: Kind, req: &RequestInfo) -> Decision {
        if !matches!(req.verb.as_str(), "get" | "update" | "patch") {
            return Decision::NoOpinion;
        }
        self.authorize_path(node, kind, req)
    }

    fn create_token(&self, node: &str, req: &RequestInfo) -> Decision {
        if req.verb != "create" || req.name.is_empty() || req.subresource != "token" {
            return Decision::NoOpinion;
        }
        self.authorize_path(node, Kind::ServiceAccount, req)
    }

    fn resource_slice(&self, node: &str, req: &RequestInfo) -> Decision {
        if !req.subresource.is_empty() {
            return Decision::NoOpinion;
        }
        match req.verb.as_str() {
            // NodeRestriction checks the slice's node on create.
            "create" | "watch" | "list" | "deletecollection" => Decision::Allow,
            "get" | "update" | "patch" | "delete" => self.authorize_path(node, Kind::Slice, req),
            _ => Decision::NoOpinion,
        }
    }

    fn authorize_path(&self, node: &str, kind: Kind, req: &RequestInfo) -> Decision {
        if req.name.is_empty() {
            return Decision::NoOpinion;
        }
        allow_if(self.has_path(node, kind, &req.namespace, &req.name))
    }

    /// Whether the object is reachable from the node, as Kubernetes' graph would have it.
    fn has_path(&self, node: &str, kind: Kind, ns: &str, name: &str) -> bool {
        let o = &*self.objects;
        match kind {
            Kind::Attachment => o
                .get("storage.k8s.io", "volumeattachments", "", name)
                .is_some_and(|va| str_at(&va, "/spec/nodeName") == node),
            Kind::Slice => o
                .get("resource.k8s.io", "resourceslices", "", name)
                .is_some_and(|s| str_at(&s, "/spec/nodeName") == node),
            Kind::Volume => o.get("", "persistentvolumes", "", name).is_some_and(|pv| {
                let (cns, cname) = claim_ref(&pv);
                self.pods(node)
                    .any(|p| pod_ns(&p) == cns && claim_names(&p).iter().any(|c| c == cname))
            }),
            _ => {
                let direct = self.pods(node).filter(|p| pod_ns(p) == ns).any(|p| {
                    let names = match kind {
                        Kind::Secret => pod_secret_names(&p),
                        Kind::ConfigMap => pod_configmap_names(&p),
                        Kind::Claim => claim_names(&p),
                        Kind::ServiceAccount => {
                            vec![str_at(&p, "/spec/serviceAccountName").to_string()]
                        }
                        Kind::ResourceClaim => resource_claim_names(&p),
                        _ => Vec::new(),
                    };
                    names.iter().any(|n| !n.is_empty() && n == name)
                });
                direct || (kind == Kind::Secret && self.volume_secret(node, ns, name))
            }
        }
    }

    /// Pods bound to the node: one by name, or a list/watch selecting them by node.
    fn read_pods(&self, node: &str, req: &RequestInfo) -> Decision {
        allow_if(match req.verb.as_str() {
            "get" => self
                .objects
                .get("", "pods", &req.namespace, &req.name)
                .is_some_and(|p| str_at(&p, "/spec/nodeName") == node),
            _ => selects(&req.field_selector, "spec.nodeName", node),
        })
    }

    /// Pods bound to the node that grant access (mirror pods grant nothing).
    fn pods(&self, node: &str) -> impl Iterator<Item = Value> {
        self.objects
            .pods_on_node(node)
            .into_iter()
            .filter(|p| !is_mirror_pod(p))
    }

    /// A secret a persistent volume of the node's pods names for the kubelet.
    fn volume_secret(&self, node: &str, ns: &str, name: &str) -> bool {
        let o = &*self.objects;
        self.pods(node).any(|p| {
            let pns = pod_ns(&p).to_string();
            claim_names(&p).iter().any(|claim| {
                let Some(pvc) = o.get("", "persistentvolumeclaims", &pns, claim) else {
                    return false;
                };
                let volume = str_at(&pvc, "/spec/volumeName");
                let Some(pv) = o
                    .get("", "persistentvolumes", "", volume)
                    .filter(|_| !volume.is_empty())
                else {
                    return false;
                };
                claim_ref(&pv) == (pns.as_str(), claim.as_str())
                    && volume_secrets(&pv)
                        .iter()
                        .any(|(s, n)| s == ns && n == name)
            })
        })
    }
}

fn pod_ns(pod: &Value) -> &str {
    capstan_api::meta::namespace(pod)
}

fn claim_ref(pv: &Value) -> (&str, &str) {
    (
        str_at(pv, "/spec/claimRef/namespace"),
        str_at(pv, "/spec/claimRef/name"),
    )
}

/// The claims a pod's volumes use (an ephemeral volume's claim is `<pod>-<volume>`).
fn claim_names(pod: &Value) -> Vec<String> {
    items(pod, "/spec/volumes")
        .iter()
        .filter_map(|v| {
            if let Some(c) = v
                .at("/persistentVolumeClaim/claimName")
                .and_then(Value::as_str)
            {
                Some(c.to_string())
            } else if v.get("ephemeral").is_some_and(|e| !e.is_null()) {
                Some(format!(
                    "{}-{}",
                    capstan_api::meta::name(pod),
                    str_at(v, "/name")
                ))
            } else {
                None
            }
        })
        .collect()
}

/// The ResourceClaims a pod uses: named ones, and those generated from templates as
/// recorded in its status.
fn resource_claim_names(pod: &Value) -> Vec<String> {
    items(pod, "/spec/resourceClaims")
        .iter()
        .filter_map(|rc| {
            let direct = str_at(rc, "/resourceClaimName");
            if !direct.is_empty() {
                return Some(direct.to_string());
            }
            let entry = str_at(rc, "/name");
            items(pod, "/status/resourceClaimStatuses")
                .iter()
                .find(|s| str_at(s, "/name") == entry)
                .map(|s| str_at(s, "/resourceClaimName").to_string())
                .filter(|n| !n.is_empty())
        })
        .collect()
}

/// The (namespace, name) of secrets a persistent volume gives the kubelet (Kubernetes'
/// `VisitPVSecretNames`, kubelet-visible references only).
fn volume_secrets(pv: &Value) -> Vec<(String, String)> {
    let claim_ns = str_at(pv, "/spec/claimRef/namespace");
    let mut out = Vec::new();
    let mut push = |ns: &str, name: &str| {
        if !name.is_empty() {
            out.push((ns.to_string(), name.to_string()));
        }
    };
    if let Some(af) = pv.at("/spec/azureFile") {
        let ns = str_at(af, "/secretNamespace");
        push(
            if ns.is_empty() { claim_ns } else { ns },
            str_at(af, "/secretName"),
        );
    }
    for src in ["cephfs", "flexVolume", "rbd", "scaleIO", "iscsi"] {
        if let Some(r) = pv.at(&format!("/spec/{src}/secretRef")) {
            let ns = str_at(r, "/namespace");
            push(
                if ns.is_empty() { claim_ns } else { ns },
                str_at(r, "/name"),
            );
        }
    }
    for src in ["cinder", "storageos"] {
        if let Some(r) = pv.at(&format!("/spec/{src}/secretRef")) {
            push(str_at(r, "/namespace"), str_at(r, "/name"));
        }
    }
    for field in [
        "nodePublishSecretRef",
        "nodeStageSecretRef",
        "nodeExpandSecretRef",
    ] {
        if let Some(r) = pv.at(&format!("/spec/csi/{field}")) {
            push(str_at(r, "/namespace"), str_at(r, "/name"));
        }
    }
    out
}

/// Its own Lease in `kube-node-lease` (the name is checked by NodeRestriction on create).
fn lease(node: &str, req: &RequestInfo) -> Decision {
    let verb = req.verb.as_str();
    allow_if(
        matches!(verb, "get" | "create" | "update" | "patch" | "delete")
            && req.namespace == NODE_LEASE_NAMESPACE
            && (verb == "create" || req.name == node),
    )
}

/// Its own CSINode (the name is checked by NodeRestriction on create).
fn csi_node(node: &str, req: &RequestInfo) -> Decision {
    let verb = req.verb.as_str();
    allow_if(
        matches!(verb, "get" | "create" | "update" | "patch" | "delete")
            && req.subresource.is_empty()
            && (verb == "create" || req.name == node),
    )
}

/// One rule of Kubernetes' `system:node` role: verbs on `resource[/subresource]` in groups.
struct Rule {
    verbs: &'static [&'static str],
    groups: &'static [&'static str],
    resources: &'static [&'static str],
}

const fn rule(
    verbs: &'static [&'static str],
    groups: &'static [&'static str],
    resources: &'static [&'static str],
) -> Rule {
    Rule {
        verbs,
        groups,
        resources,
    }
}

/// Kubernetes' `NodeRules()` (v1.32, default feature gates).
#[rustfmt::skip]
const NODE_RULES: &[Rule] = &[
    rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
    rule(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews", "localsubjectaccessreviews"]),
    rule(&["get", "list", "watch"], &[""], &["services"]),
    rule(&["create", "get", "list", "watch"], &[""], &["nodes"]),
    rule(&["update", "patch"], &[""], &["nodes/status"]),
    rule(&["update", "patch"], &[""], &["nodes"]),
    rule(&["create", "update", "patch"], &["", "events.k8s.io"], &["events"]),
    rule(&["get", "list", "watch"], &[""], &["pods"]),
    rule(&["create", "delete"], &[""], &["pods"]),
    rule(&["update", "patch"], &[""], &["pods/status"]),
    rule(&["create"], &[""], &["pods/eviction"]),
    rule(&["get", "list", "watch"], &[""], &["secrets", "configmaps"]),
    rule(&["get"], &[""], &["persistentvolumeclaims", "persistentvolumes"]),
    rule(&["get"], &[""], &["endpoints"]),
    rule(&["create", "get", "list", "watch"], &["certificates.k8s.io"], &["certificatesigningrequests"]),
    rule(&["get", "create", "update", "patch", "delete"], &["coordination.k8s.io"], &["leases"]),
    rule(&["get"], &["storage.k8s.io"], &["volumeattachments"]),
    rule(&["create"], &[""], &["serviceaccounts/token"]),
    rule(&["get", "update", "patch"], &[""], &["persistentvolumeclaims/status"]),
    rule(&["get", "watch", "list"], &["storage.k8s.io"], &["csidrivers"]),
    rule(&["get", "create", "update", "patch", "delete"], &["storage.k8s.io"], &["csinodes"]),
    rule(&["get", "list", "watch"], &["node.k8s.io"], &["runtimeclasses"]),
];

fn node_rules_allow(req: &RequestInfo) -> bool {
    if !req.is_resource {
        return false;
    }
    let resource = if req.subresource.is_empty() {
        req.resource.clone()
    } else {
        format!("{}/{}", req.resource, req.subresource)
    };
    NODE_RULES.iter().any(|r| {
        r.verbs.contains(&req.verb.as_str())
            && r.groups.contains(&req.group.as_str())
            && r.resources.contains(&resource.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::MemoryObjects;
    use serde_json::json;

    fn node_user(n: &str) -> User {
        User {
            name: format!("system:node:{n}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            ..Default::default()
        }
    }

    fn req(
        verb: &str,
        group: &str,
        resource: &str,
        ns: &str,
        name: &str,
        sub: &str,
    ) -> RequestInfo {
        RequestInfo {
            is_resource: true,
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            namespace: ns.into(),
            name: name.into(),
            subresource: sub.into(),
            ..Default::default()
        }
    }

    fn setup() -> NodeAuthorizer {
        let objects = MemoryObjects::default();
        objects.insert(
            "",
            "pods",
            json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {
                "nodeName": "n1",
                "serviceAccountName": "app",
                "containers": [{"name": "c", "image": "nginx",
                    "env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}}]}],
                "volumes": [
                    {"name": "creds", "secret": {"secretName": "mounted"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                ],
            }}),
        );
        objects.insert(
            "",
            "pods",
            json!({"metadata": {"name": "mirror", "namespace": "default",
                "annotations": {"kubernetes.io/config.mirror": "x"}},
                "spec": {"nodeName": "n1", "volumes": [{"name": "s", "secret": {"secretName": "via-mirror"}}]}}),
        );
        objects.insert(
            "",
            "persistentvolumeclaims",
            json!({"metadata": {"name": "data", "namespace": "default"}, "spec": {"volumeName": "pv1"}}),
        );
        objects.insert(
            "",
            "persistentvolumes",
            json!({"metadata": {"name": "pv1"}, "spec": {
                "claimRef": {"namespace": "default", "name": "data"},
                "csi": {"driver": "d", "volumeHandle": "h", "nodePublishSecretRef": {"namespace": "default", "name": "csi-secret"}},
            }}),
        );
        NodeAuthorizer::new(Arc::new(objects))
    }

    #[test]
    fn node_reads_only_its_own_node_and_pods() {
        let a = setup();
        let u = node_user("n1");
        let with_fields = |verb: &str, resource: &str, ns: &str, fs: &str| RequestInfo {
            field_selector: fs.into(),
            ..req(verb, "", resource, ns, "", "")
        };
        assert_eq!(
            a.authorize(&u, &req("get", "", "pods", "default", "web", "")),
            Decision::Allow
        );
        assert_eq!(
            a.authorize(&u, &with_fields("watch", "pods", "", "spec.nodeName=n1")),
            Decision::Allow
        );
        assert_eq!(
            a.authorize(
                &u,
                &with_fields("list", "pods", "", "status.phase!=Failed,spec.nodeName==n1")
            ),
            Decision::Allow
        );
        // Another node's pods, or every pod.
        let other = node_user("n2");
        assert_eq!(
            a.authorize(&other, &req("get", "", "pods", "default", "web", "")),
            Decision::NoOpinion
        );
        assert_eq!(
            a.authorize(&u, &with_fields("list", "pods", "", "")),
            Decision::NoOpinion
        );
        assert_eq!(
            a.authorize(&u, &with_fields("watch", "pods", "", "spec.nodeName=n2")),
            Decision::NoOpinion
        );
        // Its own Node only.
        assert_eq!(
            a.authorize(&u, &req("get", "", "nodes", "", "n1", "")),
            Decision::Allow
        );
        assert_eq!(
            a.authorize(&u, &req("get", "", "nodes", "", "n2", "")),
            Decision::NoOpinion
        );
        assert_eq!(
            a.authorize(&u, &with_fields("watch", "nodes", "", "metadata.name=n1")),
            Decision::Allow
        );
        assert_eq!(
            a.authorize(&u, &with_fields("list", "nodes", "", "")),
            Decision::NoOpinion
        );
    }

    #[test]
    fn node_reads_only_secrets_its_pods_use() {
        let a = setup();
        let u = node_user("n1");
        let get = |name: &str| a.authorize(&u, &req("get", "", "secrets", "default", name, ""));
        assert_eq!(get("mounted"), Decision::Allow);
        assert_eq!(get("csi-secret"), Decision::Allow);
        assert_eq!(get("unrelated"), Decision::NoOpinion);
        assert_eq!(get("via-mirror"), Decision::NoOpinion);
        let other = node_user("n2");
        assert_eq!(
            a.authorize(&other, &req("get", "", "secrets", "default", "mounted", "")),
            Decision::NoOpinion
        );
        assert_eq!(
            a.authorize(&u, &req("list", "", "secrets", "default", "", "")),
            Decision::NoOpinion
        );
        assert_eq!(
            a.authorize(&u, &req("update", "", "secrets", "default", "mounted", "")),
            Decision::NoOpinion
        );
    }

    #[test]
    fn node_reaches_config_maps_claims_volumes_and_tokens_through_pods() {
        let a = setup();
        let u = node_user("n1");
        let cases = [
            (
                req("get", "", "configmaps", "default", "settings", ""),
                Decision::Allow,
            ),
            (
                req("get", "", "configmaps", "default", "other", ""),
                Decision::NoOpinion,
            ),
            (
                req("get", "", "persistentvolumeclaims", "default", "data", ""),
                Decision::Allow,
            ),
            (
                req("get", "", "persistentvolumes", "", "pv1", ""),
                Decision::Allow,
            ),
            (
                req("get", "", "persistentvolumes", "", "pv2", ""),
                Decision::NoOpinion,
            ),
            (
                req("create", "", "serviceaccounts", "default", "app", "token"),
                Decision::Allow,
            ),
            (
                req("create", "", "serviceaccounts", "default", "other", "token"),
                Decision::NoOpinion,
            ),
            (
                req("get", "", "serviceaccounts", "default", "app", ""),
                Decision::NoOpinion,
            ),
        ];
        for (r, want) in cases {
            assert_eq!(a.authorize(&u, &r), want, "{r:?}");
        }
    }

    #[test]
    fn node_manages_its_own_lease_and_falls_back_to_the_node_role() {
        let a = setup();
        let u = node_user("n1");
        let cases = [
            (
                req(
                    "update",
                    "coordination.k8s.io",
                    "leases",
                    "kube-node-lease",
                    "n1",
                    "",
                ),
                Decision::Allow,
            ),
            (
                req(
                    "create",
                    "coordination.k8s.io",
                    "leases",
                    "kube-node-lease",
                    "",
                    "",
                ),
                Decision::Allow,
            ),
            (
                req(
                    "update",
                    "coordination.k8s.io",
                    "leases",
                    "kube-node-lease",
                    "n2",
                    "",
                ),
                Decision::NoOpinion,
            ),
            (
                req("get", "coordination.k8s.io", "leases", "default", "n1", ""),
                Decision::NoOpinion,
            ),
            (
                RequestInfo {
                    field_selector: "spec.nodeName=n1".into(),
                    ..req("list", "", "pods", "", "", "")
                },
                Decision::Allow,
            ),
            (
                req("patch", "", "pods", "default", "web", "status"),
                Decision::Allow,
            ),
            (
                req("update", "", "nodes", "", "n1", "status"),
                Decision::Allow,
            ),
            (
                req("delete", "", "nodes", "", "n1", ""),
                Decision::NoOpinion,
            ),
            (
                req("create", "apps", "deployments", "default", "", ""),
                Decision::NoOpinion,
            ),
        ];
        for (r, want) in cases {
            assert_eq!(a.authorize(&u, &r), want, "{r:?}");
        }
        let stranger = User {
            name: "alice".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        };
        assert_eq!(
            a.authorize(&stranger, &req("list", "", "pods", "", "", "")),
            Decision::NoOpinion
        );
    }
}
