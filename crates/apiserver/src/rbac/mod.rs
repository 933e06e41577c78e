//! RBAC (`rbac.authorization.k8s.io/v1`) authorization, mirroring Kubernetes'
//! `plugin/pkg/auth/authorizer/rbac` and `pkg/registry/rbac`:
//!
//! - [`Rbac`] holds the cluster's Roles, ClusterRoles and bindings, indexed by subject, and is
//!   an [`Authorizer`]: it allows what some applicable binding's role grants and otherwise has
//!   no opinion (RBAC never denies).
//! - [`rules`]: rule matching and the rule comparisons of the escalation check.
//! - [`escalation`]: the checks Kubernetes' RBAC storage makes before a role or binding write.
//! - [`aggregate()`]: the cluster role aggregation controller's computation.
//! - [`bootstrap`]: Kubernetes v1.32's default roles and bindings.
//! - [`reviews`]: SubjectAccessReview and friends, and SelfSubjectReview.
//!
//! Wiring: feed every Role/ClusterRole/RoleBinding/ClusterRoleBinding add or update to
//! [`Rbac::upsert`] and every delete to [`Rbac::remove`] (from the watch caches), put the
//! `Rbac` in the authorizer chain, call [`escalation`]'s checks before RBAC writes, and run
//! [`aggregate()`] whenever a ClusterRole changes, writing back what it returns.

pub mod aggregate;
pub mod bootstrap;
pub mod escalation;
mod index;
pub mod reviews;
pub mod rules;

use parking_lot::RwLock;
use serde_json::Value;

use crate::auth::{Authorizer, Decision, User};
use crate::request::RequestInfo;

pub use aggregate::aggregate;
pub use escalation::{
    check_binding_update, check_binding_write, check_role_update, check_role_write,
};
pub use reviews::{
    local_subject_access_review, request_from_attributes, self_subject_access_review,
    self_subject_review, self_subject_rules_review, subject_access_review,
};
pub use rules::{covers, rule_allows, PolicyRule};

/// The RBAC API group.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// The cluster's RBAC policy. Reads (authorization) take a shared lock and a few hash lookups
/// per subject of the user, however many bindings there are; writes replace one object.
#[derive(Default)]
pub struct Rbac {
    policy: RwLock<index::Policy>,
}

impl Rbac {
    pub fn new() -> Rbac {
        Rbac::default()
    }

    /// Add or replace an object of `resource` ("roles", "rolebindings", "clusterroles" or
    /// "clusterrolebindings"). Objects without a name (or, when namespaced, a namespace) are
    /// ignored; malformed rules grant nothing.
    pub fn upsert(&self, resource: &str, obj: &Value) {
        self.policy.write().upsert(resource, obj);
    }

    /// Forget an object of `resource`; `namespace` is "" for cluster-scoped ones.
    pub fn remove(&self, resource: &str, namespace: &str, name: &str) {
        self.policy.write().remove(resource, namespace, name);
    }

    /// Every rule that applies to `user` in `namespace` (cluster-wide ones, then the
    /// namespace's): what SelfSubjectRulesReview lists and what escalation checks compare
    /// against. With `namespace` "" only the cluster-wide rules.
    pub fn rules_for(&self, user: &User, namespace: &str) -> Vec<PolicyRule> {
        self.policy.read().rules_for(user, namespace)
    }

    /// The rules of the Role `name` in `namespace`, or of the ClusterRole `name` when
    /// `namespace` is "" — None when there is no such role.
    pub fn role_rules(&self, kind: &str, namespace: &str, name: &str) -> Option<Vec<PolicyRule>> {
        let role = match kind {
            "Role" => index::RoleRef::Role(name.to_string()),
            "ClusterRole" => index::RoleRef::ClusterRole(name.to_string()),
            _ => return None,
        };
        self.policy
            .read()
            .role_rules(&role, namespace)
            .map(<[PolicyRule]>::to_vec)
    }

    /// How many RoleBindings and ClusterRoleBindings are held.
    pub fn binding_count(&self) -> usize {
        self.policy.read().binding_count()
    }
}

impl Authorizer for Rbac {
    fn authorize(&self, user: &User, req: &RequestInfo) -> Decision {
        if self.policy.read().allows(user, req) {
            Decision::Allow
        } else {
            Decision::NoOpinion
        }
    }
}

#[cfg(test)]
mod tests;
