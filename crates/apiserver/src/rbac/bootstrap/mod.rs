//! Kubernetes v1.32's default RBAC policy (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`),
//! with its default feature gates: the cluster roles of the control plane and of users
//! (`cluster-admin`, `admin`, `edit`, `view` ...), the `system:controller:*` roles of the
//! controllers, the roles in `kube-system` and `kube-public`, and their bindings.
//!
//! Every object carries the label `kubernetes.io/bootstrapping: rbac-defaults` and the
//! annotation `rbac.authorization.kubernetes.io/autoupdate: "true"`. The aggregated roles
//! (`admin`, `edit`, `view`) come with their rules already aggregated.

mod controller_policy;
mod namespace_policy;
mod policy;

use serde_json::{json, Map, Value};

use super::rules::PolicyRule;
use super::GROUP;

pub use controller_policy::CONTROLLERS;

/// Label on every bootstrap object.
pub const BOOTSTRAP_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");
/// Annotation asking the API server to keep the object up to date at start.
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// The default ClusterRoles, the controllers' among them.
pub fn cluster_roles() -> Vec<Value> {
    let mut roles = policy::cluster_roles();
    roles.extend(controller_policy::controller_roles());
    for update in super::aggregate(&roles) {
        let name = update["metadata"]["name"].clone();
        if let Some(r) = roles.iter_mut().find(|r| r["metadata"]["name"] == name) {
            *r = update;
        }
    }
    roles
}

/// The default ClusterRoleBindings, the controllers' among them.
pub fn cluster_role_bindings() -> Vec<Value> {
    let mut bindings = policy::cluster_role_bindings();
    bindings.extend(controller_policy::controller_role_bindings());
    bindings
}

/// The default Roles (in `kube-system` and `kube-public`).
pub fn roles() -> Vec<Value> {
    namespace_policy::roles()
}

/// The default RoleBindings (in `kube-system` and `kube-public`).
pub fn role_bindings() -> Vec<Value> {
    namespace_policy::role_bindings()
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];
const READ_WRITE: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];
const READ_UPDATE: &[&str] = &["get", "list", "watch", "update", "patch"];

const LEGACY: &str = "";
const APPS: &str = "apps";
const AUTHENTICATION: &str = "authentication.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";
const AUTOSCALING: &str = "autoscaling";
const BATCH: &str = "batch";
const CERTIFICATES: &str = "certificates.k8s.io";
const COORDINATION: &str = "coordination.k8s.io";
const DISCOVERY: &str = "discovery.k8s.io";
const EVENTS: &str = "events.k8s.io";
const EXTENSIONS: &str = "extensions";
const NETWORKING: &str = "networking.k8s.io";
const POLICY: &str = "policy";
const STORAGE: &str = "storage.k8s.io";

/// Builds one rule; lists come out sorted, as Kubernetes' rule builder leaves them.
struct Rule(PolicyRule);

fn rule(verbs: &[&str]) -> Rule {
    Rule(PolicyRule {
        verbs: owned(verbs),
        ..Default::default()
    })
}

impl Rule {
    fn groups(mut self, groups: &[&str]) -> Rule {
        self.0.api_groups = owned(groups);
        self
    }

    fn resources(mut self, resources: &[&str]) -> Rule {
        self.0.resources = owned(resources);
        self
    }

    fn names(mut self, names: &[&str]) -> Rule {
        self.0.resource_names = owned(names);
        self
    }

    fn urls(mut self, urls: &[&str]) -> Rule {
        self.0.non_resource_urls = owned(urls);
        self
    }

    fn build(self) -> PolicyRule {
        let mut r = self.0;
        for list in [
            &mut r.verbs,
            &mut r.api_groups,
            &mut r.resources,
            &mut r.resource_names,
            &mut r.non_resource_urls,
        ] {
            list.sort();
        }
        r
    }
}

fn owned(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Creating and updating events in both event groups.
fn events_rule() -> Rule {
    rule(&["create", "update", "patch"])
        .groups(&[LEGACY, EVENTS])
        .resources(&["events"])
}

/// The bootstrap metadata: name, namespace if any, the default label (plus `labels`) and the
/// autoupdate annotation.
fn metadata(name: &str, namespace: &str, labels: &[&str]) -> Value {
    let mut l = Map::new();
    l.insert(BOOTSTRAP_LABEL.0.into(), BOOTSTRAP_LABEL.1.into());
    for key in labels {
        l.insert(key.to_string(), "true".into());
    }
    let mut md = json!({"name": name, "labels": l, "annotations": {AUTOUPDATE_ANNOTATION: "true"}});
    if !namespace.is_empty() {
        md["namespace"] = namespace.into();
    }
    md
}

fn rules_json(rules: Vec<Rule>) -> Value {
    Value::Array(rules.into_iter().map(|r| r.build().to_json()).collect())
}

fn cluster_role(name: &str, rules: Vec<Rule>) -> Value {
    labelled_cluster_role(name, &[], rules)
}

fn labelled_cluster_role(name: &str, labels: &[&str], rules: Vec<Rule>) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRole",
        "metadata": metadata(name, "", labels), "rules": rules_json(rules)})
}

/// A ClusterRole aggregating the roles labelled `<selector_label>: "true"`.
fn aggregated_cluster_role(name: &str, labels: &[&str], selector_label: &str) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRole",
        "metadata": metadata(name, "", labels),
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {selector_label: "true"}}]},
        "rules": []})
}

fn role(namespace: &str, name: &str, rules: Vec<Rule>) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Role",
        "metadata": metadata(name, namespace, &[]), "rules": rules_json(rules)})
}

/// A binding subject.
enum Subject<'a> {
    User(&'a str),
    Group(&'a str),
    ServiceAccount(&'a str, &'a str),
}

impl Subject<'_> {
    fn to_json(&self) -> Value {
        match self {
            Subject::User(n) => json!({"kind": "User", "apiGroup": GROUP, "name": n}),
            Subject::Group(n) => json!({"kind": "Group", "apiGroup": GROUP, "name": n}),
            Subject::ServiceAccount(ns, n) => {
                json!({"kind": "ServiceAccount", "name": n, "namespace": ns})
            }
        }
    }
}

fn binding(
    kind: &str,
    namespace: &str,
    name: &str,
    role_kind: &str,
    role: &str,
    subjects: &[Subject],
) -> Value {
    let mut b = json!({"apiVersion": format!("{GROUP}/v1"), "kind": kind,
        "metadata": metadata(name, namespace, &[]),
        "roleRef": {"apiGroup": GROUP, "kind": role_kind, "name": role}});
    if !subjects.is_empty() {
        b["subjects"] = Value::Array(subjects.iter().map(Subject::to_json).collect());
    }
    b
}

/// A ClusterRoleBinding of the ClusterRole of the same name.
fn cluster_role_binding(name: &str, subjects: &[Subject]) -> Value {
    binding(
        "ClusterRoleBinding",
        "",
        name,
        "ClusterRole",
        name,
        subjects,
    )
}

/// A RoleBinding named `name` of the Role `role` in `namespace`.
fn role_binding(namespace: &str, name: &str, role: &str, subjects: &[Subject]) -> Value {
    binding("RoleBinding", namespace, name, "Role", role, subjects)
}

#[cfg(test)]
mod tests;
