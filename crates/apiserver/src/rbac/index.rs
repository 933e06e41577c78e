//! The cluster's RBAC objects, indexed by subject, as Kubernetes' `DefaultRuleResolver` sees
//! them (`VisitRulesFor`): cluster role bindings apply everywhere, role bindings in their own
//! namespace, and a binding applies when one of its subjects is the user, one of the user's
//! groups, or the user's service account.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use super::rules::{rules_allow, PolicyRule};
use crate::auth::User;
use crate::request::RequestInfo;

/// What a binding's `roleRef` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RoleRef {
    Role(String),
    ClusterRole(String),
    /// A kind Kubernetes cannot resolve: the binding grants nothing.
    Unresolvable,
}

/// The user names and group names one binding applies to.
#[derive(Debug, Clone, Default)]
struct Subjects {
    users: Vec<String>,
    groups: Vec<String>,
}

#[derive(Debug, Clone)]
struct Binding {
    role: RoleRef,
    subjects: Subjects,
}

/// Binding names per user name and per group name, within one scope (the cluster or one
/// namespace). Sets are ordered so that rule listings are deterministic.
#[derive(Debug, Default)]
struct SubjectIndex {
    by_user: HashMap<String, BTreeSet<String>>,
    by_group: HashMap<String, BTreeSet<String>>,
}

impl SubjectIndex {
    fn add(&mut self, binding: &str, subjects: &Subjects) {
        for u in &subjects.users {
            self.by_user
                .entry(u.clone())
                .or_default()
                .insert(binding.to_string());
        }
        for g in &subjects.groups {
            self.by_group
                .entry(g.clone())
                .or_default()
                .insert(binding.to_string());
        }
    }

    fn remove(&mut self, binding: &str, subjects: &Subjects) {
        for (map, keys) in [
            (&mut self.by_user, &subjects.users),
            (&mut self.by_group, &subjects.groups),
        ] {
            for k in keys {
                if let Some(set) = map.get_mut(k) {
                    set.remove(binding);
                    if set.is_empty() {
                        map.remove(k);
                    }
                }
            }
        }
    }

    /// Names of the bindings that apply to `user`; a binding may appear more than once.
    fn matching<'a>(&'a self, user: &'a User) -> impl Iterator<Item = &'a String> + 'a {
        let by_name = self.by_user.get(&user.name).into_iter().flatten();
        let by_groups = user
            .groups
            .iter()
            .filter_map(|g| self.by_group.get(g))
            .flatten();
        by_name.chain(by_groups)
    }

    fn matching_sorted(&self, user: &User) -> BTreeSet<String> {
        self.matching(user).cloned().collect()
    }
}

/// Bindings of one scope with their subject index.
#[derive(Debug, Default)]
struct Scope {
    bindings: HashMap<String, Binding>,
    index: SubjectIndex,
}

impl Scope {
    fn put(&mut self, name: &str, binding: Binding) {
        self.delete(name);
        self.index.add(name, &binding.subjects);
        self.bindings.insert(name.to_string(), binding);
    }

    fn delete(&mut self, name: &str) {
        if let Some(old) = self.bindings.remove(name) {
            self.index.remove(name, &old.subjects);
        }
    }

    fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }
}

/// Roles, cluster roles and the two kinds of bindings.
#[derive(Debug, Default)]
pub(crate) struct Policy {
    cluster_roles: HashMap<String, Vec<PolicyRule>>,
    /// Roles per namespace, then per name.
    roles: HashMap<String, HashMap<String, Vec<PolicyRule>>>,
    cluster_bindings: Scope,
    /// Role bindings per namespace.
    role_bindings: HashMap<String, Scope>,
}

impl Policy {
    pub(crate) fn upsert(&mut self, resource: &str, obj: &Value) {
        let Some(name) = meta_str(obj, "name").filter(|n| !n.is_empty()) else {
            return;
        };
        let namespace = meta_str(obj, "namespace").unwrap_or("");
        match resource {
            "clusterroles" => {
                self.cluster_roles
                    .insert(name.to_string(), parse_rules(obj));
            }
            "roles" if !namespace.is_empty() => {
                self.roles
                    .entry(namespace.to_string())
                    .or_default()
                    .insert(name.to_string(), parse_rules(obj));
            }
            "clusterrolebindings" => {
                let binding = parse_binding(obj, "");
                self.cluster_bindings.put(name, binding);
            }
            "rolebindings" if !namespace.is_empty() => {
                let binding = parse_binding(obj, namespace);
                self.role_bindings
                    .entry(namespace.to_string())
                    .or_default()
                    .put(name, binding);
            }
            _ => {}
        }
    }

    pub(crate) fn remove(&mut self, resource: &str, namespace: &str, name: &str) {
        match resource {
            "clusterroles" => {
                self.cluster_roles.remove(name);
            }
            "roles" => {
                if let Some(ns) = self.roles.get_mut(namespace) {
                    ns.remove(name);
                    if ns.is_empty() {
                        self.roles.remove(namespace);
                    }
                }
            }
            "clusterrolebindings" => self.cluster_bindings.delete(name),
            "rolebindings" => {
                if let Some(scope) = self.role_bindings.get_mut(namespace) {
                    scope.delete(name);
                    if scope.is_empty() {
                        self.role_bindings.remove(namespace);
                    }
                }
            }
            _ => {}
        }
    }

    /// The rules a role reference resolves to from a binding in `namespace` ("" for a
    /// cluster role binding, which cannot reference a Role).
    pub(crate) fn role_rules(&self, role: &RoleRef, namespace: &str) -> Option<&[PolicyRule]> {
        match role {
            RoleRef::ClusterRole(name) => self.cluster_roles.get(name).map(Vec::as_slice),
            RoleRef::Role(name) if !namespace.is_empty() => self
                .roles
                .get(namespace)
                .and_then(|ns| ns.get(name))
                .map(Vec::as_slice),
            _ => None,
        }
    }

    /// Whether some binding that applies to `user` grants a rule allowing `req`.
    pub(crate) fn allows(&self, user: &User, req: &RequestInfo) -> bool {
        let scope_allows = |scope: &Scope, namespace: &str| {
            scope.index.matching(user).any(|name| {
                scope
                    .bindings
                    .get(name)
                    .and_then(|b| self.role_rules(&b.role, namespace))
                    .is_some_and(|rules| rules_allow(rules, req))
            })
        };
        if scope_allows(&self.cluster_bindings, "") {
            return true;
        }
        if req.namespace.is_empty() {
            return false;
        }
        self.role_bindings
            .get(&req.namespace)
            .is_some_and(|scope| scope_allows(scope, &req.namespace))
    }

    /// Every rule that applies to `user` in `namespace`: cluster-wide ones first, then the
    /// namespace's, each binding once, bindings in name order.
    pub(crate) fn rules_for(&self, user: &User, namespace: &str) -> Vec<PolicyRule> {
        let mut out = Vec::new();
        let mut collect = |scope: &Scope, ns: &str| {
            for name in scope.index.matching_sorted(user) {
                if let Some(rules) = scope
                    .bindings
                    .get(&name)
                    .and_then(|b| self.role_rules(&b.role, ns))
                {
                    out.extend(rules.iter().cloned());
                }
            }
        };
        collect(&self.cluster_bindings, "");
        if !namespace.is_empty() {
            if let Some(scope) = self.role_bindings.get(namespace) {
                collect(scope, namespace);
            }
        }
        out
    }

    pub(crate) fn binding_count(&self) -> usize {
        self.cluster_bindings.bindings.len()
            + self
                .role_bindings
                .values()
                .map(|s| s.bindings.len())
                .sum::<usize>()
    }
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// A role's rules; a malformed rule is skipped (it grants nothing).
pub(crate) fn parse_rules(obj: &Value) -> Vec<PolicyRule> {
    obj.get("rules")
        .and_then(Value::as_array)
        .map(|rules| {
            rules
                .iter()
                .filter_map(|r| PolicyRule::from_json(r).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A binding's `roleRef` as the rule resolver reads it (the kind alone decides).
pub(crate) fn parse_role_ref(obj: &Value) -> RoleRef {
    let role_ref = obj.get("roleRef");
    let field = |k: &str| {
        role_ref
            .and_then(|r| r.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let name = field("name").to_string();
    match field("kind") {
        "Role" => RoleRef::Role(name),
        "ClusterRole" => RoleRef::ClusterRole(name),
        _ => RoleRef::Unresolvable,
    }
}

/// A binding's role and the user and group names its subjects stand for. A ServiceAccount
/// subject is the user `system:serviceaccount:<ns>:<name>`, its namespace defaulting to the
/// binding's; without one (in a cluster role binding) it matches nobody.
fn parse_binding(obj: &Value, binding_namespace: &str) -> Binding {
    let mut subjects = Subjects::default();
    let list = obj.get("subjects").and_then(Value::as_array);
    for s in list.into_iter().flatten() {
        let field = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("");
        let name = field("name");
        match field("kind") {
            "User" => subjects.users.push(name.to_string()),
            "Group" => subjects.groups.push(name.to_string()),
            "ServiceAccount" => {
                let ns = match field("namespace") {
                    "" => binding_namespace,
                    ns => ns,
                };
                if !ns.is_empty() {
                    subjects
                        .users
                        .push(format!("system:serviceaccount:{ns}:{name}"));
                }
            }
            _ => {}
        }
    }
    subjects.users.sort();
    subjects.users.dedup();
    subjects.groups.sort();
    subjects.groups.dedup();
    Binding {
        role: parse_role_ref(obj),
        subjects,
    }
}
