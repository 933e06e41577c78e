//! The built-in resources the API server serves, as Kubernetes v1.32 publishes them in
//! discovery: group, version, kind, plural, scope, verbs, short names, categories, subresources.

/// The verbs Kubernetes lists in discovery.
pub mod verbs {
    pub const ALL: &[&str] = &[
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    pub const READ_ONLY: &[&str] = &["get", "list"];
    pub const CREATE_ONLY: &[&str] = &["create"];
}

/// One built-in resource (one group/version/plural).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group; "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub verbs: &'static [&'static str],
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// Subresources served under `<name>/<subresource>`.
    pub subresources: &'static [&'static str],
    /// The store key prefix under `/registry/` (Kubernetes' own layout, e.g. nodes are `minions`).
    pub storage: &'static str,
    /// Served for a CustomResourceDefinition (not in [`RESOURCES`]).
    pub custom: bool,
}

impl ResourceInfo {
    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The list kind, e.g. `PodList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    pub fn has_subresource(&self, sub: &str) -> bool {
        self.subresources.contains(&sub)
    }

    /// `plural.group` (or just `plural` for the core group), as in RBAC and error messages.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

const ALL: &[&str] = verbs::ALL;
const NO_DC: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

macro_rules! r {
    ($group:expr, $version:expr, $kind:expr, $plural:expr, $singular:expr, ns=$ns:expr,
     verbs=$verbs:expr, short=[$($s:expr),*], cat=[$($c:expr),*], sub=[$($sub:expr),*],
     storage=$storage:expr) => {
        ResourceInfo {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $ns,
            verbs: $verbs,
            short_names: &[$($s),*],
            categories: &[$($c),*],
            subresources: &[$($sub),*],
            storage: $storage,
            custom: false,
        }
    };
}

/// Every built-in resource, in the order discovery lists groups (core first).
pub static RESOURCES: &[ResourceInfo] = &[
    // core/v1
    r!(
        "",
        "v1",
        "Binding",
        "bindings",
        "binding",
        ns = true,
        verbs = verbs::CREATE_ONLY,
        short = [],
        cat = [],
        sub = [],
        storage = "bindings"
    ),
    r!(
        "",
        "v1",
        "ComponentStatus",
        "componentstatuses",
        "componentstatus",
        ns = false,
        verbs = verbs::READ_ONLY,
        short = ["cs"],
        cat = [],
        sub = [],
        storage = "componentstatuses"
    ),
    r!(
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        "configmap",
        ns = true,
        verbs = ALL,
        short = ["cm"],
        cat = [],
        sub = [],
        storage = "configmaps"
    ),
    r!(
        "",
        "v1",
        "Endpoints",
        "endpoints",
        "endpoints",
        ns = true,
        verbs = ALL,
        short = ["ep"],
        cat = [],
        sub = [],
        storage = "services/endpoints"
    ),
    r!(
        "",
        "v1",
        "Event",
        "events",
        "event",
        ns = true,
        verbs = ALL,
        short = ["ev"],
        cat = [],
        sub = [],
        storage = "events"
    ),
    r!(
        "",
        "v1",
        "LimitRange",
        "limitranges",
        "limitrange",
        ns = true,
        verbs = ALL,
        short = ["limits"],
        cat = [],
        sub = [],
        storage = "limitranges"
    ),
    r!(
        "",
        "v1",
        "Namespace",
        "namespaces",
        "namespace",
        ns = false,
        verbs = NO_DC,
        short = ["ns"],
        cat = [],
        sub = ["finalize", "status"],
        storage = "namespaces"
    ),
    r!(
        "",
        "v1",
        "Node",
        "nodes",
        "node",
        ns = false,
        verbs = ALL,
        short = ["no"],
        cat = [],
        sub = ["proxy", "status"],
        storage = "minions"
    ),
    r!(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        ns = true,
        verbs = ALL,
        short = ["pvc"],
        cat = [],
        sub = ["status"],
        storage = "persistentvolumeclaims"
    ),
    r!(
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        "persistentvolume",
        ns = false,
        verbs = ALL,
        short = ["pv"],
        cat = [],
        sub = ["status"],
        storage = "persistentvolumes"
    ),
    r!(
        "",
        "v1",
        "Pod",
        "pods",
        "pod",
        ns = true,
        verbs = ALL,
        short = ["po"],
        cat = ["all"],
        sub = [
            "attach",
            "binding",
            "ephemeralcontainers",
            "eviction",
            "exec",
            "log",
            "portforward",
            "proxy",
            "resize",
            "status"
        ],
        storage = "pods"
    ),
    r!(
        "",
        "v1",
        "PodTemplate",
        "podtemplates",
        "podtemplate",
        ns = true,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "podtemplates"
    ),
    r!(
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        "replicationcontroller",
        ns = true,
        verbs = ALL,
        short = ["rc"],
        cat = ["all"],
        sub = ["scale", "status"],
        storage = "controllers"
    ),
    r!(
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        "resourcequota",
        ns = true,
        verbs = ALL,
        short = ["quota"],
        cat = [],
        sub = ["status"],
        storage = "resourcequotas"
    ),
    r!(
        "",
        "v1",
        "Secret",
        "secrets",
        "secret",
        ns = true,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "secrets"
    ),
    r!(
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        "serviceaccount",
        ns = true,
        verbs = ALL,
        short = ["sa"],
        cat = [],
        sub = ["token"],
        storage = "serviceaccounts"
    ),
    r!(
        "",
        "v1",
        "Service",
        "services",
        "service",
        ns = true,
        verbs = NO_DC_SVC,
        short = ["svc"],
        cat = ["all"],
        sub = ["proxy", "status"],
        storage = "services/specs"
    ),
    // apps/v1
    r!(
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        "controllerrevision",
        ns = true,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "controllerrevisions"
    ),
    r!(
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        "daemonset",
        ns = true,
        verbs = ALL,
        short = ["ds"],
        cat = ["all"],
        sub = ["status"],
        storage = "daemonsets"
    ),
    r!(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        "deployment",
        ns = true,
        verbs = ALL,
        short = ["deploy"],
        cat = ["all"],
        sub = ["scale", "status"],
        storage = "deployments"
    ),
    r!(
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        "replicaset",
        ns = true,
        verbs = ALL,
        short = ["rs"],
        cat = ["all"],
        sub = ["scale", "status"],
        storage = "replicasets"
    ),
    r!(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        "statefulset",
        ns = true,
        verbs = ALL,
        short = ["sts"],
        cat = ["all"],
        sub = ["scale", "status"],
        storage = "statefulsets"
    ),
    // autoscaling
    r!(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        ns = true,
        verbs = ALL,
        short = ["hpa"],
        cat = ["all"],
        sub = ["status"],
        storage = "horizontalpodautoscalers"
    ),
    r!(
        "autoscaling",
        "v1",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        ns = true,
        verbs = ALL,
        short = ["hpa"],
        cat = ["all"],
        sub = ["status"],
        storage = "horizontalpodautoscalers"
    ),
    // batch/v1
    r!(
        "batch",
        "v1",
        "CronJob",
        "cronjobs",
        "cronjob",
        ns = true,
        verbs = ALL,
        short = ["cj"],
        cat = ["all"],
        sub = ["status"],
        storage = "cronjobs"
    ),
    r!(
        "batch",
        "v1",
        "Job",
        "jobs",
        "job",
        ns = true,
        verbs = ALL,
        short = [],
        cat = ["all"],
        sub = ["status"],
        storage = "jobs"
    ),
    // certificates.k8s.io/v1
    r!(
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        "certificatesigningrequest",
        ns = false,
        verbs = ALL,
        short = ["csr"],
        cat = [],
        sub = ["approval", "status"],
        storage = "certificatesigningrequests"
    ),
    // coordination.k8s.io/v1
    r!(
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        "lease",
        ns = true,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "leases"
    ),
    // discovery.k8s.io/v1
    r!(
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        "endpointslice",
        ns = true,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "endpointslices"
    ),
    // events.k8s.io/v1 (the same objects as core/v1 events)
    r!(
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        "event",
        ns = true,
        verbs = ALL,
        short = ["ev"],
        cat = [],
        sub = [],
        storage = "events"
    ),
    // networking.k8s.io/v1
    r!(
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        "ingressclass",
        ns = false,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "ingressclasses"
    ),
    r!(
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        "ingress",
        ns = true,
        verbs = ALL,
        short = ["ing"],
        cat = [],
        sub = ["status"],
        storage = "ingress"
    ),
    r!(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        "networkpolicy",
        ns = true,
        verbs = ALL,
        short = ["netpol"],
        cat = [],
        sub = [],
        storage = "networkpolicies"
    ),
    // admissionregistration.k8s.io/v1
    r!(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        "mutatingwebhookconfiguration",
        ns = false,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "mutatingwebhookconfigurations"
    ),
    r!(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        "validatingadmissionpolicy",
        ns = false,
        verbs = ALL,
        short = [],
        cat = [],
        sub = ["status"],
        storage = "validatingadmissionpolicies"
    ),
    r!(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        "validatingadmissionpolicybinding",
        ns = false,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "validatingadmissionpolicybindings"
    ),
    r!(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        "validatingwebhookconfiguration",
        ns = false,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "validatingwebhookconfigurations"
    ),
    // apiextensions.k8s.io/v1
    r!(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        "customresourcedefinition",
        ns = false,
        verbs = ALL,
        short = ["crd", "crds"],
        cat = ["api-extensions"],
        sub = ["status"],
        storage = "apiextensions.k8s.io/customresourcedefinitions"
    ),
    // authentication.k8s.io/v1
    r!(
        "authentication.k8s.io",
        "v1",
        "SelfSubjectReview",
        "selfsubjectreviews",
        "selfsubjectreview",
        ns = false,
        verbs = verbs::CREATE_ONLY,
        short = [],
        cat = [],
        sub = [],
        storage = "selfsubjectreviews"
    ),
    r!(
        "authentication.k8s.io",
        "v1",
        "TokenReview",
        "tokenreviews",
        "tokenreview",
        ns = false,
        verbs = verbs::CREATE_ONLY,
        short = [],
        cat = [],
        sub = [],
        storage = "tokenreviews"
    ),
    // authorization.k8s.io/v1
    r!(
        "authorization.k8s.io",
        "v1",
        "LocalSubjectAccessReview",
        "localsubjectaccessreviews",
        "localsubjectaccessreview",
        ns = true,
        verbs = verbs::CREATE_ONLY,
        short = [],
        cat = [],
        sub = [],
        storage = "localsubjectaccessreviews"
    ),
    r!(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        ns = false,
        verbs = verbs::CREATE_ONLY,
        short = [],
        cat = [],
        sub = [],
        storage = "selfsubjectaccessreviews"
    ),
    r!(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
        ns = false,
        verbs = verbs::CREATE_ONLY,
        short = [],
        cat = [],
        sub = [],
        storage = "selfsubjectrulesreviews"
    ),
    r!(
        "authorization.k8s.io",
        "v1",
        "SubjectAccessReview",
        "subjectaccessreviews",
        "subjectaccessreview",
        ns = false,
        verbs = verbs::CREATE_ONLY,
        short = [],
        cat = [],
        sub = [],
        storage = "subjectaccessreviews"
    ),
    // policy/v1
    r!(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        ns = true,
        verbs = ALL,
        short = ["pdb"],
        cat = [],
        sub = ["status"],
        storage = "poddisruptionbudgets"
    ),
    // rbac.authorization.k8s.io/v1
    r!(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        "clusterrolebinding",
        ns = false,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "clusterrolebindings"
    ),
    r!(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        "clusterrole",
        ns = false,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "clusterroles"
    ),
    r!(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        "rolebinding",
        ns = true,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "rolebindings"
    ),
    r!(
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        "role",
        ns = true,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "roles"
    ),
    // scheduling.k8s.io/v1
    r!(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        "priorityclass",
        ns = false,
        verbs = ALL,
        short = ["pc"],
        cat = [],
        sub = [],
        storage = "priorityclasses"
    ),
    // storage.k8s.io/v1
    r!(
        "storage.k8s.io",
        "v1",
        "CSIDriver",
        "csidrivers",
        "csidriver",
        ns = false,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "csidrivers"
    ),
    r!(
        "storage.k8s.io",
        "v1",
        "CSINode",
        "csinodes",
        "csinode",
        ns = false,
        verbs = ALL,
        short = [],
        cat = [],
        sub = [],
        storage = "csinodes"
    ),
    r!(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        "storageclass",
        ns = false,
        verbs = ALL,
        short = ["sc"],
        cat = [],
        sub = [],
        storage = "storageclasses"
    ),
    r!(
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "volumeattachments",
        "volumeattachment",
        ns = false,
        verbs = ALL,
        short = [],
        cat = [],
        sub = ["status"],
        storage = "volumeattachments"
    ),
];

/// Services have no deletecollection in Kubernetes.
const NO_DC_SVC: &[&str] = NO_DC;

/// The groups in discovery order, each with its versions, preferred version first.
pub fn groups() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) => {
                if !versions.contains(&r.version) {
                    versions.push(r.version);
                }
            }
            None => out.push((r.group, vec![r.version])),
        }
    }
    out
}

/// The resources of one group/version.
pub fn resources_of(group: &str, version: &str) -> impl Iterator<Item = &'static ResourceInfo> {
    let (group, version) = (group.to_string(), version.to_string());
    RESOURCES
        .iter()
        .filter(move |r| r.group == group && r.version == version)
}

/// Look a resource up by group, version and plural.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Look a resource up by apiVersion and kind.
pub fn find_kind(api_version: &str, kind: &str) -> Option<&'static ResourceInfo> {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_resource_is_unique_by_group_version_plural() {
        let mut seen = std::collections::HashSet::new();
        for r in RESOURCES {
            assert!(seen.insert((r.group, r.version, r.plural)), "{r:?}");
        }
    }

    #[test]
    fn lookups_find_core_and_grouped_kinds() {
        assert_eq!(find("", "v1", "pods").unwrap().kind, "Pod");
        assert_eq!(
            find_kind("apps/v1", "Deployment").unwrap().plural,
            "deployments"
        );
        assert_eq!(find("", "v1", "nodes").unwrap().storage, "minions");
        assert_eq!(find("", "v1", "pods").unwrap().api_version(), "v1");
        let g = groups();
        assert_eq!(g[0].0, "apps");
        let autoscaling = g.iter().find(|(n, _)| *n == "autoscaling").unwrap();
        assert_eq!(autoscaling.1, vec!["v2", "v1"]);
    }
}
