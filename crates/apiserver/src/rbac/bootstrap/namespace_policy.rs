//! The default Roles and RoleBindings of `kube-system` and `kube-public` (Kubernetes'
//! `bootstrappolicy/namespace_policy.go`).

use serde_json::Value;

use super::controller_policy::PREFIX;
use super::{events_rule, role, role_binding, rule, Subject, COORDINATION, LEGACY, READ};

const KUBE_SYSTEM: &str = "kube-system";
const KUBE_PUBLIC: &str = "kube-public";

pub(super) fn roles() -> Vec<Value> {
    let leader_locking = || {
        vec![
            rule(&["watch", "get", "list", "create", "update"])
                .groups(&[COORDINATION])
                .resources(&["leases"]),
            rule(&["watch", "get", "list", "create", "update"])
                .groups(&[COORDINATION])
                .resources(&["leasecandidates"]),
        ]
    };
    vec![
        // Extension API servers read the front proxy's client CA from here.
        role(
            KUBE_SYSTEM,
            "extension-apiserver-authentication-reader",
            vec![rule(READ)
                .groups(&[LEGACY])
                .resources(&["configmaps"])
                .names(&["extension-apiserver-authentication"])],
        ),
        role(
            KUBE_SYSTEM,
            "system::leader-locking-kube-controller-manager",
            leader_locking(),
        ),
        role(
            KUBE_SYSTEM,
            "system::leader-locking-kube-scheduler",
            leader_locking(),
        ),
        role(
            KUBE_SYSTEM,
            &format!("{PREFIX}bootstrap-signer"),
            vec![rule(READ).groups(&[LEGACY]).resources(&["secrets"])],
        ),
        role(
            KUBE_SYSTEM,
            &format!("{PREFIX}cloud-provider"),
            vec![rule(&["create", "get", "list", "watch"])
                .groups(&[LEGACY])
                .resources(&["configmaps"])],
        ),
        role(
            KUBE_SYSTEM,
            &format!("{PREFIX}token-cleaner"),
            vec![
                rule(&["delete", "get", "list", "watch"])
                    .groups(&[LEGACY])
                    .resources(&["secrets"]),
                events_rule(),
            ],
        ),
        // Signs the cluster-info ConfigMap with bootstrap tokens.
        role(
            KUBE_PUBLIC,
            &format!("{PREFIX}bootstrap-signer"),
            vec![
                rule(READ).groups(&[LEGACY]).resources(&["configmaps"]),
                rule(&["update"])
                    .groups(&[LEGACY])
                    .resources(&["configmaps"])
                    .names(&["cluster-info"]),
                events_rule(),
            ],
        ),
    ]
}

pub(super) fn role_bindings() -> Vec<Value> {
    use Subject::{ServiceAccount, User};
    let controller = |ns: &str, name: &str| {
        let full = format!("{PREFIX}{name}");
        role_binding(ns, &full, &full, &[ServiceAccount(KUBE_SYSTEM, name)])
    };
    vec![
        role_binding(
            KUBE_SYSTEM,
            "system::extension-apiserver-authentication-reader",
            "extension-apiserver-authentication-reader",
            &[
                User("system:kube-controller-manager"),
                User("system:kube-scheduler"),
            ],
        ),
        role_binding(
            KUBE_SYSTEM,
            "system::leader-locking-kube-controller-manager",
            "system::leader-locking-kube-controller-manager",
            &[
                User("system:kube-controller-manager"),
                ServiceAccount(KUBE_SYSTEM, "kube-controller-manager"),
                ServiceAccount(KUBE_SYSTEM, "leader-election-controller"),
            ],
        ),
        role_binding(
            KUBE_SYSTEM,
            "system::leader-locking-kube-scheduler",
            "system::leader-locking-kube-scheduler",
            &[
                User("system:kube-scheduler"),
                ServiceAccount(KUBE_SYSTEM, "kube-scheduler"),
            ],
        ),
        controller(KUBE_SYSTEM, "bootstrap-signer"),
        controller(KUBE_SYSTEM, "cloud-provider"),
        controller(KUBE_SYSTEM, "token-cleaner"),
        controller(KUBE_PUBLIC, "bootstrap-signer"),
    ]
}
