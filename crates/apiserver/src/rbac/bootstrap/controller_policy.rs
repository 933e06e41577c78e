//! The controllers' roles (Kubernetes' `bootstrappolicy/controller_policy.go`): one ClusterRole
//! `system:controller:<name>` per controller, bound to the service account `kube-system/<name>`
//! the controller manager runs that controller as.

use serde_json::Value;

use super::{
    cluster_role, cluster_role_binding, events_rule, rule, Rule, Subject, APPS, AUTHORIZATION,
    AUTOSCALING, BATCH, CERTIFICATES, COORDINATION, DISCOVERY, EXTENSIONS, LEGACY, POLICY, READ,
    STORAGE,
};
use crate::rbac::GROUP as RBAC;

/// The prefix of controller role and binding names.
pub const PREFIX: &str = "system:controller:";

/// The controllers that have roles, by service account name.
pub const CONTROLLERS: &[&str] = &[
    "attachdetach-controller",
    "certificate-controller",
    "clusterrole-aggregation-controller",
    "cronjob-controller",
    "daemon-set-controller",
    "deployment-controller",
    "disruption-controller",
    "endpoint-controller",
    "endpointslice-controller",
    "endpointslicemirroring-controller",
    "ephemeral-volume-controller",
    "expand-controller",
    "generic-garbage-collector",
    "horizontal-pod-autoscaler",
    "job-controller",
    "legacy-service-account-token-cleaner",
    "namespace-controller",
    "node-controller",
    "persistent-volume-binder",
    "pod-garbage-collector",
    "pv-protection-controller",
    "pvc-protection-controller",
    "replicaset-controller",
    "replication-controller",
    "resourcequota-controller",
    "root-ca-cert-publisher",
    "route-controller",
    "service-account-controller",
    "service-controller",
    "statefulset-controller",
    "ttl-after-finished-controller",
    "ttl-controller",
    "validatingadmissionpolicy-status-controller",
];

pub(super) fn controller_roles() -> Vec<Value> {
    CONTROLLERS
        .iter()
        .map(|name| cluster_role(&format!("{PREFIX}{name}"), rules_of(name)))
        .collect()
}

pub(super) fn controller_role_bindings() -> Vec<Value> {
    CONTROLLERS
        .iter()
        .map(|name| {
            cluster_role_binding(
                &format!("{PREFIX}{name}"),
                &[Subject::ServiceAccount("kube-system", name)],
            )
        })
        .collect()
}

/// Reading, writing and the status and finalizers subresources of a workload `resource` in
/// `groups`, as the workload controllers need them.
fn owner(groups: &[&str], resource: &str, verbs: &[&str]) -> Vec<Rule> {
    vec![
        rule(verbs).groups(groups).resources(&[resource]),
        rule(&["update"])
            .groups(groups)
            .resources(&[&format!("{resource}/status")]),
        rule(&["update"])
            .groups(groups)
            .resources(&[&format!("{resource}/finalizers")]),
    ]
}

fn rules_of(controller: &str) -> Vec<Rule> {
    match controller {
        "attachdetach-controller" => vec![
            rule(&["list", "watch"])
                .groups(&[LEGACY])
                .resources(&["persistentvolumes", "persistentvolumeclaims"]),
            rule(READ).groups(&[LEGACY]).resources(&["nodes"]),
            rule(&["patch", "update"])
                .groups(&[LEGACY])
                .resources(&["nodes/status"]),
            rule(&["list", "watch"])
                .groups(&[LEGACY])
                .resources(&["pods"]),
            events_rule(),
            rule(&["get", "create", "delete", "list", "watch"])
                .groups(&[STORAGE])
                .resources(&["volumeattachments"]),
            rule(READ).groups(&[STORAGE]).resources(&["csidrivers"]),
            rule(READ).groups(&[STORAGE]).resources(&["csinodes"]),
        ],
        "certificate-controller" => vec![
            rule(&["get", "list", "watch", "delete"])
                .groups(&[CERTIFICATES])
                .resources(&["certificatesigningrequests"]),
            rule(&["update"]).groups(&[CERTIFICATES]).resources(&[
                "certificatesigningrequests/status",
                "certificatesigningrequests/approval",
            ]),
            rule(&["approve"])
                .groups(&[CERTIFICATES])
                .resources(&["signers"])
                .names(&["kubernetes.io/kube-apiserver-client-kubelet"]),
            rule(&["sign"])
                .groups(&[CERTIFICATES])
                .resources(&["signers"])
                .names(&[
                    "kubernetes.io/legacy-unknown",
                    "kubernetes.io/kube-apiserver-client",
                    "kubernetes.io/kube-apiserver-client-kubelet",
                    "kubernetes.io/kubelet-serving",
                ]),
            rule(&["create"])
                .groups(&[AUTHORIZATION])
                .resources(&["subjectaccessreviews"]),
            events_rule(),
        ],
        "clusterrole-aggregation-controller" => vec![rule(&[
            "escalate", "get", "list", "watch", "update", "patch",
        ])
        .groups(&[RBAC])
        .resources(&["clusterroles"])],
        "cronjob-controller" => {
            let mut r = vec![
                rule(&["get", "list", "watch", "update"])
                    .groups(&[BATCH])
                    .resources(&["cronjobs"]),
                rule(&[
                    "get", "list", "watch", "create", "update", "delete", "patch",
                ])
                .groups(&[BATCH])
                .resources(&["jobs"]),
            ];
            r.extend([
                rule(&["update"])
                    .groups(&[BATCH])
                    .resources(&["cronjobs/status"]),
                rule(&["update"])
                    .groups(&[BATCH])
                    .resources(&["cronjobs/finalizers"]),
            ]);
            r.push(
                rule(&["list", "watch", "delete"])
                    .groups(&[LEGACY])
                    .resources(&["pods"]),
            );
            r.push(events_rule());
            r
        }
        "daemon-set-controller" => {
            let mut r = owner(&[APPS, EXTENSIONS], "daemonsets", READ);
            r.extend([
                rule(&["list", "watch"])
                    .groups(&[LEGACY])
                    .resources(&["nodes"]),
                rule(&["list", "watch", "create", "delete", "patch"])
                    .groups(&[LEGACY])
                    .resources(&["pods"]),
                rule(&["create"])
                    .groups(&[LEGACY])
                    .resources(&["pods/binding"]),
                rule(&[
                    "get", "list", "watch", "create", "delete", "update", "patch",
                ])
                .groups(&[APPS])
                .resources(&["controllerrevisions"]),
                events_rule(),
            ]);
            r
        }
        "deployment-controller" => {
            let mut r = owner(
                &[APPS, EXTENSIONS],
                "deployments",
                &["get", "list", "watch", "update"],
            );
            r.extend([
                rule(&[
                    "get", "list", "watch", "create", "update", "patch", "delete",
                ])
                .groups(&[APPS, EXTENSIONS])
                .resources(&["replicasets"]),
                // Pods are listed and updated to hand them over between replica sets.
                rule(&["get", "list", "watch", "update"])
                    .groups(&[LEGACY])
                    .resources(&["pods"]),
                events_rule(),
            ]);
            r
        }
        "disruption-controller" => vec![
            rule(READ)
                .groups(&[APPS, EXTENSIONS])
                .resources(&["deployments"]),
            rule(READ)
                .groups(&[APPS, EXTENSIONS])
                .resources(&["replicasets"]),
            rule(READ)
                .groups(&[LEGACY])
                .resources(&["replicationcontrollers"]),
            rule(READ)
                .groups(&[POLICY])
                .resources(&["poddisruptionbudgets"]),
            rule(READ).groups(&[APPS]).resources(&["statefulsets"]),
            rule(&["update"])
                .groups(&[POLICY])
                .resources(&["poddisruptionbudgets/status"]),
            rule(&["patch", "update"])
                .groups(&[LEGACY])
                .resources(&["pods/status"]),
            rule(&["get"]).groups(&["*"]).resources(&["*/scale"]),
            events_rule(),
        ],
        "endpoint-controller" => vec![
            rule(READ)
                .groups(&[LEGACY])
                .resources(&["services", "pods"]),
            rule(&["get", "list", "watch", "create", "update", "delete"])
                .groups(&[LEGACY])
                .resources(&["endpoints"]),
            rule(&["create"])
                .groups(&[LEGACY])
                .resources(&["endpoints/restricted"]),
            events_rule(),
        ],
        "endpointslice-controller" => vec![
            rule(READ)
                .groups(&[LEGACY])
                .resources(&["services", "pods", "nodes"]),
            rule(&["update"])
                .groups(&[LEGACY])
                .resources(&["services/finalizers"]),
            rule(&["get", "list", "watch", "create", "update", "delete"])
                .groups(&[DISCOVERY])
                .resources(&["endpointslices"]),
            rule(&["create"])
                .groups(&[DISCOVERY])
                .resources(&["endpointslices/restricted"]),
            events_rule(),
        ],
        "endpointslicemirroring-controller" => vec![
            rule(READ)
                .groups(&[LEGACY])
                .resources(&["services", "endpoints"]),
            rule(&["update"])
                .groups(&[LEGACY])
                .resources(&["services/finalizers"]),
            rule(&["update"])
                .groups(&[LEGACY])
                .resources(&["endpoints/finalizers"]),
            rule(&["get", "list", "watch", "create", "update", "delete"])
                .groups(&[DISCOVERY])
                .resources(&["endpointslices"]),
            rule(&["create"])
                .groups(&[DISCOVERY])
                .resources(&["endpointslices/restricted"]),
            events_rule(),
        ],
        "ephemeral-volume-controller" => vec![
            rule(READ).groups(&[LEGACY]).resources(&["pods"]),
            rule(&["update"])
                .groups(&[LEGACY])
                .resources(&["pods/finalizers"]),
            rule(&["get", "list", "watch", "create"])
                .groups(&[LEGACY])
                .resources(&["persistentvolumeclaims"]),
            events_rule(),
        ],
        "expand-controller" => vec![
            rule(&["get", "list", "watch", "update", "patch"])
                .groups(&[LEGACY])
                .resources(&["persistentvolumes"]),
            rule(&["update", "patch"])
                .groups(&[LEGACY])
                .resources(&["persistentvolumeclaims/status"]),
            rule(READ)
                .groups(&[LEGACY])
                .resources(&["persistentvolumeclaims"]),
            events_rule(),
        ],
        "generic-garbage-collector" => vec![
            rule(&["get", "list", "watch", "patch", "update", "delete"])
                .groups(&["*"])
                .resources(&["*"]),
            events_rule(),
        ],
        "horizontal-pod-autoscaler" => vec![
            rule(READ)
                .groups(&[AUTOSCALING])
                .resources(&["horizontalpodautoscalers"]),
            rule(&["update"])
                .groups(&[AUTOSCALING])
                .resources(&["horizontalpodautoscalers/status"]),
            rule(&["get", "update"])
                .groups(&["*"])
                .resources(&["*/scale"]),
            rule(&["list", "watch"])
                .groups(&[LEGACY])
                .resources(&["pods"]),
            rule(&["list", "watch"])
                .groups(&["metrics.k8s.io"])
                .resources(&["pods"]),
            rule(READ)
                .groups(&["custom.metrics.k8s.io"])
                .resources(&["*"]),
            rule(READ)
                .groups(&["external.metrics.k8s.io"])
                .resources(&["*"]),
            events_rule(),
        ],
        "job-controller" => {
            let mut r = owner(
                &[BATCH],
                "jobs",
                &["get", "list", "watch", "update", "patch"],
            );
            r.extend([
                rule(&["list", "watch", "create", "delete", "patch"])
                    .groups(&[LEGACY])
                    .resources(&["pods"]),
                events_rule(),
            ]);
            r
        }
        "legacy-service-account-token-cleaner" => vec![
            rule(&["get"])
                .groups(&[LEGACY])
                .resources(&["configmaps"])
                .names(&["kube-apiserver-legacy-service-account-token-tracking"]),
            rule(&["patch", "delete"])
                .groups(&[LEGACY])
                .resources(&["secrets"]),
        ],
        "namespace-controller" => vec![
            rule(&["get", "list", "watch", "delete"])
                .groups(&[LEGACY])
                .resources(&["namespaces"]),
            rule(&["update"])
                .groups(&[LEGACY])
                .resources(&["namespaces/finalize", "namespaces/status"]),
            rule(&["get", "list", "watch", "delete", "deletecollection"])
                .groups(&["*"])
                .resources(&["*"]),
        ],
        "node-controller" => vec![
            rule(&["get", "list", "watch", "update", "patch", "delete"])
                .groups(&[LEGACY])
                .resources(&["nodes"]),
            rule(&["patch", "update"])
                .groups(&[LEGACY])
                .resources(&["nodes/status"]),
            // Marking pods not ready and evicting them from lost nodes.
            rule(&["patch", "update"])
                .groups(&[LEGACY])
                .resources(&["pods/status"]),
            rule(&["get", "list", "watch", "delete"])
                .groups(&[LEGACY])
                .resources(&["pods"]),
            rule(READ).groups(&[COORDINATION]).resources(&["leases"]),
            events_rule(),
        ],
        "persistent-volume-binder" => vec![
            rule(&["get", "list", "watch", "update", "create", "delete"])
                .groups(&[LEGACY])
                .resources(&["persistentvolumes"]),
            rule(&["update"])
                .groups(&[LEGACY])
                .resources(&["persistentvolumes/status"]),
            rule(&["get", "list", "watch", "update"])
                .groups(&[LEGACY])
                .resources(&["persistentvolumeclaims"]),
            rule(&["update"])
                .groups(&[LEGACY])
                .resources(&["persistentvolumeclaims/status"]),
            // Recycler pods.
            rule(&["get", "list", "watch", "create", "delete"])
                .groups(&[LEGACY])
                .resources(&["pods"]),
            rule(READ).groups(&[STORAGE]).resources(&["storageclasses"]),
            rule(&["list", "watch"])
                .groups(&[LEGACY])
                .resources(&["nodes"]),
            events_rule(),
            rule(&["watch"]).groups(&[LEGACY]).resources(&["events"]),
        ],
        "pod-garbage-collector" => vec![
            rule(&["list", "watch", "delete"])
                .groups(&[LEGACY])
                .resources(&["pods"]),
            rule(READ).groups(&[LEGACY]).resources(&["nodes"]),
            rule(&["patch"])
                .groups(&[LEGACY])
                .resources(&["pods/status"]),
        ],
        "pv-protection-controller" => vec![
            rule(&["get", "list", "watch", "update"])
                .groups(&[LEGACY])
                .resources(&["persistentvolumes"]),
            events_rule(),
        ],
        "pvc-protection-controller" => vec![
            rule(&["get", "list", "watch", "update"])
                .groups(&[LEGACY])
                .resources(&["persistentvolumeclaims"]),
            rule(&["update"])
                .groups(&[LEGACY])
                .resources(&["persistentvolumeclaims/status"]),
            rule(READ).groups(&[LEGACY]).resources(&["pods"]),
            events_rule(),
        ],
        "replicaset-controller" => {
            let mut r = owner(
                &[APPS, EXTENSIONS],
                "replicasets",
                &["get", "list", "watch", "update"],
            );
            r.extend([
                rule(&["list", "watch", "patch", "create", "delete"])
                    .groups(&[LEGACY])
                    .resources(&["pods"]),
                events_rule(),
            ]);
            r
        }
        "replication-controller" => {
            let mut r = owner(
                &[LEGACY],
                "replicationcontrollers",
                &["get", "list", "watch", "update"],
            );
            r.extend([
                rule(&["list", "watch", "patch", "create", "delete"])
                    .groups(&[LEGACY])
                    .resources(&["pods"]),
                events_rule(),
            ]);
            r
        }
        "resourcequota-controller" => vec![
            // Quota can count every resource.
            rule(&["list", "watch"]).groups(&["*"]).resources(&["*"]),
            rule(&["update"])
                .groups(&[LEGACY])
                .resources(&["resourcequotas/status"]),
            events_rule(),
        ],
        "root-ca-cert-publisher" => vec![
            rule(&["create", "update"])
                .groups(&[LEGACY])
                .resources(&["configmaps"]),
            events_rule(),
        ],
        "route-controller" => vec![
            rule(&["list", "watch"])
                .groups(&[LEGACY])
                .resources(&["nodes"]),
            rule(&["patch"])
                .groups(&[LEGACY])
                .resources(&["nodes/status"]),
            events_rule(),
        ],
        "service-account-controller" => vec![
            rule(&["create"])
                .groups(&[LEGACY])
                .resources(&["serviceaccounts"]),
            events_rule(),
        ],
        "service-controller" => vec![
            rule(READ).groups(&[LEGACY]).resources(&["services"]),
            rule(&["patch", "update"])
                .groups(&[LEGACY])
                .resources(&["services/status"]),
            rule(&["list", "watch"])
                .groups(&[LEGACY])
                .resources(&["nodes"]),
            events_rule(),
        ],
        "statefulset-controller" => {
            let mut r = vec![rule(&["list", "watch"])
                .groups(&[LEGACY])
                .resources(&["pods"])];
            r.extend(owner(&[APPS], "statefulsets", READ));
            r.extend([
                rule(&["get", "create", "delete", "update", "patch"])
                    .groups(&[LEGACY])
                    .resources(&["pods"]),
                rule(&[
                    "get", "list", "watch", "create", "delete", "update", "patch",
                ])
                .groups(&[APPS])
                .resources(&["controllerrevisions"]),
                rule(&["get", "list", "watch", "create"])
                    .groups(&[LEGACY])
                    .resources(&["persistentvolumeclaims"]),
                rule(&["update", "delete"])
                    .groups(&[LEGACY])
                    .resources(&["persistentvolumeclaims"]),
                rule(&["update"])
                    .groups(&[LEGACY])
                    .resources(&["pods/finalizers"]),
                events_rule(),
            ]);
            r
        }
        "ttl-after-finished-controller" => vec![
            rule(&["get", "list", "watch", "delete"])
                .groups(&[BATCH])
                .resources(&["jobs"]),
            events_rule(),
        ],
        "ttl-controller" => vec![
            rule(&["update", "patch", "list", "watch"])
                .groups(&[LEGACY])
                .resources(&["nodes"]),
            events_rule(),
        ],
        "validatingadmissionpolicy-status-controller" => vec![
            rule(READ)
                .groups(&["admissionregistration.k8s.io"])
                .resources(&["validatingadmissionpolicies"]),
            rule(&["get", "patch", "update"])
                .groups(&["admissionregistration.k8s.io"])
                .resources(&["validatingadmissionpolicies/status"]),
            events_rule(),
        ],
        // Every name in CONTROLLERS has rules (the tests check).
        _ => Vec::new(),
    }
}
