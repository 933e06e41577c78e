//! Per-kind policy for the generic registry (Kubernetes' `RESTCreateStrategy`,
//! `RESTUpdateStrategy` ...): small and stateless, with defaults that suit most kinds.

use capstan_api::catalogue::ResourceInfo;
use serde_json::{json, Value};

use crate::error::{ApiResult, FieldError};

/// What is special about one kind. Every method has a default that fits most kinds.
pub trait Strategy: Send + Sync {
    fn info(&self) -> &'static ResourceInfo;

    /// Spec changes bump `metadata.generation` (workload kinds do; ConfigMaps do not).
    fn tracks_generation(&self) -> bool {
        matches!(
            self.info().kind,
            "Deployment"
                | "ReplicaSet"
                | "StatefulSet"
                | "DaemonSet"
                | "Job"
                | "CronJob"
                | "ReplicationController"
                | "HorizontalPodAutoscaler"
                | "PodDisruptionBudget"
                | "Ingress"
                | "NetworkPolicy"
                | "PriorityClass"
                | "StorageClass"
        )
    }

    /// The kind has a status subresource: writes to the main resource keep the stored
    /// status, and writes to `status` change nothing else.
    fn has_status(&self) -> bool {
        self.info().has_subresource("status")
    }

    /// Clear or default fields before a create (e.g. reset status).
    fn prepare_for_create(&self, obj: &mut Value) {
        if self.has_status() && !matches!(self.info().kind, "Node" | "Namespace") {
            if let Some(map) = obj.as_object_mut() {
                map.remove("status");
            }
        }
        initial_status(self.info().kind, obj);
    }

    /// Adjust an update of the main resource given the stored object.
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        if self.has_status() {
            copy_field(new, old, "status");
        }
    }

    /// Check a new object. Names are checked by the registry.
    fn validate(&self, _obj: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    /// Check an update (immutable fields etc.).
    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<FieldError> {
        self.validate(new)
    }

    /// How names of this kind are checked.
    fn validate_name(&self, name: &str) -> Vec<String> {
        match self.info().kind {
            "Namespace" | "Service" => dns1123_label(name),
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding" => path_segment(name),
            _ => dns1123_subdomain(name),
        }
    }

    /// Take what the object needs from shared pools (cluster IPs, node ports); `old` on update.
    fn allocate(&self, _obj: &mut Value, _old: Option<&Value>) -> ApiResult<()> {
        Ok(())
    }

    /// Give back what `obj` held (after a delete, a failed create or a dry run).
    fn release(&self, _obj: &Value) {}

    /// A PUT of a missing object creates it.
    fn allow_create_on_update(&self) -> bool {
        matches!(self.info().kind, "Lease" | "Endpoints" | "Event")
    }
}

/// Statuses Kubernetes fills in on create.
fn initial_status(kind: &str, obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    match kind {
        "Pod" => {
            map.insert("status".into(), json!({"phase": "Pending"}));
        }
        "Namespace" => {
            map.insert("status".into(), json!({"phase": "Active"}));
        }
        "PersistentVolume" | "PersistentVolumeClaim" => {
            map.insert("status".into(), json!({"phase": "Pending"}));
        }
        _ => {}
    }
}

/// Set `new.field` to `old.field` (removing it when old has none).
pub fn copy_field(new: &mut Value, old: &Value, field: &str) {
    let Some(map) = new.as_object_mut() else {
        return;
    };
    match old.get(field) {
        Some(v) => {
            map.insert(field.to_string(), v.clone());
        }
        None => {
            map.remove(field);
        }
    }
}

/// The strategy every built-in kind uses until it has its own.
pub struct DefaultStrategy(pub &'static ResourceInfo);

impl Strategy for DefaultStrategy {
    fn info(&self) -> &'static ResourceInfo {
        self.0
    }
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Kubernetes' IsDNS1123Label messages.
pub fn dns1123_label(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_label(name) {
        errs.push(format!("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '{DNS1123_LABEL_FMT}')"));
    }
    errs
}

/// Kubernetes' IsDNS1123Subdomain messages.
pub fn dns1123_subdomain(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if !name.split('.').all(is_label) {
        errs.push(format!("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '{DNS1123_SUBDOMAIN_FMT}')"));
    }
    errs
}

/// Kubernetes' path segment name rules (RBAC objects may contain ':').
pub fn path_segment(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            return vec![format!("may not contain '{bad}'")];
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_rfc1123() {
        assert!(dns1123_subdomain("my-app.example").is_empty());
        assert!(!dns1123_subdomain("My_App").is_empty());
        assert!(!dns1123_subdomain("-a").is_empty());
        assert!(!dns1123_subdomain("a..b").is_empty());
        assert!(dns1123_label("web-1").is_empty());
        assert!(!dns1123_label("a.b").is_empty());
        assert_eq!(dns1123_label(&"a".repeat(64)).len(), 1);
        assert!(path_segment("system:controller").is_empty());
        assert!(!path_segment("a/b").is_empty());
    }
}
