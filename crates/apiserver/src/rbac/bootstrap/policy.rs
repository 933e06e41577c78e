//! The cluster-wide default roles and bindings (Kubernetes' `bootstrappolicy/policy.go`).

use serde_json::Value;

use super::{
    aggregated_cluster_role, cluster_role, cluster_role_binding, events_rule,
    labelled_cluster_role, rule, Rule, Subject, APPS, AUTHENTICATION, AUTHORIZATION, AUTOSCALING,
    BATCH, CERTIFICATES, COORDINATION, DISCOVERY, EXTENSIONS, LEGACY, NETWORKING, POLICY, READ,
    READ_UPDATE, READ_WRITE, STORAGE, WRITE,
};
use crate::rbac::GROUP as RBAC;

const TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
const TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
const TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

pub(super) fn cluster_roles() -> Vec<Value> {
    let mut roles = vec![
        // Anything at all.
        cluster_role(
            "cluster-admin",
            vec![
                rule(&["*"]).groups(&["*"]).resources(&["*"]),
                rule(&["*"]).urls(&["*"]),
            ],
        ),
        // Enough to see whether the server is up and which APIs it serves.
        cluster_role(
            "system:discovery",
            vec![rule(&["get"]).urls(&[
                "/livez",
                "/readyz",
                "/healthz",
                "/version",
                "/version/",
                "/openapi",
                "/openapi/*",
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
            ])],
        ),
        cluster_role(
            "system:monitoring",
            vec![rule(&["get"]).urls(&[
                "/metrics",
                "/metrics/slis",
                "/livez",
                "/readyz",
                "/healthz",
                "/livez/*",
                "/readyz/*",
                "/healthz/*",
            ])],
        ),
        // What a user may learn about themselves.
        cluster_role(
            "system:basic-user",
            vec![
                rule(&["create"])
                    .groups(&[AUTHORIZATION])
                    .resources(&["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
                rule(&["create"])
                    .groups(&[AUTHENTICATION])
                    .resources(&["selfsubjectreviews"]),
            ],
        ),
        cluster_role(
            "system:public-info-viewer",
            vec![rule(&["get"]).urls(&["/livez", "/readyz", "/healthz", "/version", "/version/"])],
        ),
        // The user-facing roles; their rules come from the system:aggregate-to-* roles and
        // anything else labelled to join them.
        aggregated_cluster_role("admin", &[], TO_ADMIN),
        aggregated_cluster_role("edit", &[TO_ADMIN], TO_EDIT),
        aggregated_cluster_role("view", &[TO_EDIT], TO_VIEW),
        labelled_cluster_role(
            "system:aggregate-to-admin",
            &[TO_ADMIN],
            vec![
                rule(&["create"])
                    .groups(&[AUTHORIZATION])
                    .resources(&["localsubjectaccessreviews"]),
                rule(READ_WRITE)
                    .groups(&[RBAC])
                    .resources(&["roles", "rolebindings"]),
            ],
        ),
        labelled_cluster_role("system:aggregate-to-edit", &[TO_EDIT], aggregate_to_edit()),
        labelled_cluster_role("system:aggregate-to-view", &[TO_VIEW], aggregate_to_view()),
        // Not a Kubernetes bootstrap role: metrics-server installs it with the metrics.k8s.io
        // API (k3s ships it); capstan serves that API itself, so it brings the role too.
        labelled_cluster_role(
            "system:aggregated-metrics-reader",
            &[TO_VIEW, TO_EDIT, TO_ADMIN],
            vec![rule(READ)
                .groups(&["metrics.k8s.io"])
                .resources(&["pods", "nodes"])],
        ),
        cluster_role(
            "system:heapster",
            vec![
                rule(READ)
                    .groups(&[LEGACY])
                    .resources(&["events", "pods", "nodes", "namespaces"]),
                rule(READ).groups(&[EXTENSIONS]).resources(&["deployments"]),
            ],
        ),
        cluster_role("system:node", node_rules()),
        cluster_role(
            "system:node-problem-detector",
            vec![
                rule(&["get"]).groups(&[LEGACY]).resources(&["nodes"]),
                rule(&["patch"])
                    .groups(&[LEGACY])
                    .resources(&["nodes/status"]),
                events_rule(),
            ],
        ),
        cluster_role(
            "system:kubelet-api-admin",
            vec![
                rule(READ).groups(&[LEGACY]).resources(&["nodes"]),
                rule(&["proxy"]).groups(&[LEGACY]).resources(&["nodes"]),
                rule(&["*"]).groups(&[LEGACY]).resources(&[
                    "nodes/proxy",
                    "nodes/metrics",
                    "nodes/stats",
                    "nodes/log",
                ]),
            ],
        ),
        cluster_role(
            "system:node-bootstrapper",
            vec![rule(&["create", "get", "list", "watch"])
                .groups(&[CERTIFICATES])
                .resources(&["certificatesigningrequests"])],
        ),
        cluster_role(
            "system:auth-delegator",
            vec![
                rule(&["create"])
                    .groups(&[AUTHENTICATION])
                    .resources(&["tokenreviews"]),
                rule(&["create"])
                    .groups(&[AUTHORIZATION])
                    .resources(&["subjectaccessreviews"]),
            ],
        ),
        cluster_role(
            "system:kube-aggregator",
            vec![rule(READ)
                .groups(&[LEGACY])
                .resources(&["services", "endpoints"])],
        ),
        cluster_role(
            "system:persistent-volume-provisioner",
            vec![
                rule(&["get", "list", "watch", "create", "delete"])
                    .groups(&[LEGACY])
                    .resources(&["persistentvolumes"]),
                rule(&["get", "list", "watch", "update"])
                    .groups(&[LEGACY])
                    .resources(&["persistentvolumeclaims"]),
                rule(READ).groups(&[STORAGE]).resources(&["storageclasses"]),
                rule(&["watch"]).groups(&[LEGACY]).resources(&["events"]),
                events_rule(),
            ],
        ),
        cluster_role(
            "system:kube-dns",
            vec![rule(&["list", "watch"])
                .groups(&[LEGACY])
                .resources(&["endpoints", "services"])],
        ),
        cluster_role("system:kube-controller-manager", kube_controller_manager()),
        cluster_role("system:kube-scheduler", kube_scheduler()),
        cluster_role(
            "system:volume-scheduler",
            vec![
                rule(READ_UPDATE)
                    .groups(&[LEGACY])
                    .resources(&["persistentvolumes"]),
                rule(READ).groups(&[STORAGE]).resources(&["storageclasses"]),
                rule(READ_UPDATE)
                    .groups(&[LEGACY])
                    .resources(&["persistentvolumeclaims"]),
            ],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            vec![rule(&["create"])
                .groups(&[CERTIFICATES])
                .resources(&["certificatesigningrequests/nodeclient"])],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            vec![rule(&["create"])
                .groups(&[CERTIFICATES])
                .resources(&["certificatesigningrequests/selfnodeclient"])],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            vec![rule(&["get"]).urls(&[
                "/.well-known/openid-configuration",
                "/.well-known/openid-configuration/",
                "/openid/v1/jwks",
                "/openid/v1/jwks/",
            ])],
        ),
        cluster_role(
            "system:node-proxier",
            vec![
                rule(&["list", "watch"])
                    .groups(&[LEGACY])
                    .resources(&["services", "endpoints"]),
                rule(READ).groups(&[LEGACY]).resources(&["nodes"]),
                events_rule(),
                rule(&["list", "watch"])
                    .groups(&[DISCOVERY])
                    .resources(&["endpointslices"]),
            ],
        ),
    ];
    // May approve CSRs of one signer each.
    for (name, signer) in [
        ("legacy-unknown-approver", "kubernetes.io/legacy-unknown"),
        ("kubelet-serving-approver", "kubernetes.io/kubelet-serving"),
        (
            "kube-apiserver-client-approver",
            "kubernetes.io/kube-apiserver-client",
        ),
        (
            "kube-apiserver-client-kubelet-approver",
            "kubernetes.io/kube-apiserver-client-kubelet",
        ),
    ] {
        roles.push(cluster_role(
            &format!("system:certificates.k8s.io:{name}"),
            vec![rule(&["approve"])
                .groups(&[CERTIFICATES])
                .resources(&["signers"])
                .names(&[signer])],
        ));
    }
    roles
}

/// Writing in a namespace: workloads, their configuration and secrets, but no RBAC, quota or
/// status.
fn aggregate_to_edit() -> Vec<Rule> {
    vec![
        // Reading what can escalate.
        rule(READ).groups(&[LEGACY]).resources(&[
            "pods/attach",
            "pods/proxy",
            "pods/exec",
            "pods/portforward",
            "secrets",
            "services/proxy",
        ]),
        rule(&["impersonate"])
            .groups(&[LEGACY])
            .resources(&["serviceaccounts"]),
        rule(WRITE).groups(&[LEGACY]).resources(&[
            "pods",
            "pods/attach",
            "pods/proxy",
            "pods/exec",
            "pods/portforward",
        ]),
        rule(&["create"])
            .groups(&[LEGACY])
            .resources(&["pods/eviction"]),
        rule(WRITE).groups(&[LEGACY]).resources(&[
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "serviceaccounts",
            "services",
            "services/proxy",
            "persistentvolumeclaims",
            "configmaps",
            "secrets",
            "events",
        ]),
        rule(&["create"])
            .groups(&[LEGACY])
            .resources(&["serviceaccounts/token"]),
        rule(WRITE).groups(&[APPS]).resources(&[
            "statefulsets",
            "statefulsets/scale",
            "daemonsets",
            "deployments",
            "deployments/scale",
            "deployments/rollback",
            "replicasets",
            "replicasets/scale",
        ]),
        rule(WRITE)
            .groups(&[AUTOSCALING])
            .resources(&["horizontalpodautoscalers"]),
        rule(WRITE)
            .groups(&[BATCH])
            .resources(&["jobs", "cronjobs"]),
        rule(WRITE).groups(&[EXTENSIONS]).resources(&[
            "daemonsets",
            "deployments",
            "deployments/scale",
            "deployments/rollback",
            "ingresses",
            "replicasets",
            "replicasets/scale",
            "replicationcontrollers/scale",
            "networkpolicies",
        ]),
        rule(WRITE)
            .groups(&[POLICY])
            .resources(&["poddisruptionbudgets"]),
        rule(WRITE)
            .groups(&[NETWORKING])
            .resources(&["networkpolicies", "ingresses"]),
        rule(READ_WRITE)
            .groups(&[COORDINATION])
            .resources(&["leases"]),
    ]
}

/// Reading a namespace's non-escalating resources (no secrets).
fn aggregate_to_view() -> Vec<Rule> {
    vec![
        rule(READ).groups(&[LEGACY]).resources(&[
            "pods",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "serviceaccounts",
            "services",
            "services/status",
            "endpoints",
            "persistentvolumeclaims",
            "persistentvolumeclaims/status",
            "configmaps",
        ]),
        rule(READ).groups(&[LEGACY]).resources(&[
            "limitranges",
            "resourcequotas",
            "bindings",
            "events",
            "pods/status",
            "resourcequotas/status",
            "namespaces/status",
            "replicationcontrollers/status",
            "pods/log",
        ]),
        // Reading namespaces at namespace scope means reading that namespace.
        rule(READ).groups(&[LEGACY]).resources(&["namespaces"]),
        rule(READ)
            .groups(&[DISCOVERY])
            .resources(&["endpointslices"]),
        rule(READ).groups(&[APPS]).resources(&[
            "controllerrevisions",
            "statefulsets",
            "statefulsets/status",
            "statefulsets/scale",
            "daemonsets",
            "daemonsets/status",
            "deployments",
            "deployments/status",
            "deployments/scale",
            "replicasets",
            "replicasets/status",
            "replicasets/scale",
        ]),
        rule(READ).groups(&[AUTOSCALING]).resources(&[
            "horizontalpodautoscalers",
            "horizontalpodautoscalers/status",
        ]),
        rule(READ).groups(&[BATCH]).resources(&[
            "jobs",
            "jobs/status",
            "cronjobs",
            "cronjobs/status",
        ]),
        rule(READ).groups(&[EXTENSIONS]).resources(&[
            "daemonsets",
            "daemonsets/status",
            "deployments",
            "deployments/scale",
            "deployments/status",
            "ingresses",
            "ingresses/status",
            "replicasets",
            "replicasets/scale",
            "replicasets/status",
            "replicationcontrollers/scale",
            "networkpolicies",
        ]),
        rule(READ)
            .groups(&[POLICY])
            .resources(&["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        rule(READ).groups(&[NETWORKING]).resources(&[
            "ingresses",
            "ingresses/status",
            "networkpolicies",
        ]),
    ]
}

/// What a kubelet needs (the Node authorizer and NodeRestriction narrow it to its own node).
fn node_rules() -> Vec<Rule> {
    vec![
        rule(&["create"])
            .groups(&[AUTHENTICATION])
            .resources(&["tokenreviews"]),
        rule(&["create"])
            .groups(&[AUTHORIZATION])
            .resources(&["subjectaccessreviews", "localsubjectaccessreviews"]),
        rule(READ).groups(&[LEGACY]).resources(&["services"]),
        rule(&["create", "get", "list", "watch"])
            .groups(&[LEGACY])
            .resources(&["nodes"]),
        rule(&["update", "patch"])
            .groups(&[LEGACY])
            .resources(&["nodes/status"]),
        rule(&["update", "patch"])
            .groups(&[LEGACY])
            .resources(&["nodes"]),
        rule(&["create", "update", "patch"])
            .groups(&[LEGACY])
            .resources(&["events"]),
        rule(READ).groups(&[LEGACY]).resources(&["pods"]),
        rule(&["create", "delete"])
            .groups(&[LEGACY])
            .resources(&["pods"]),
        rule(&["update", "patch"])
            .groups(&[LEGACY])
            .resources(&["pods/status"]),
        rule(&["create"])
            .groups(&[LEGACY])
            .resources(&["pods/eviction"]),
        rule(READ)
            .groups(&[LEGACY])
            .resources(&["secrets", "configmaps"]),
        rule(&["get"])
            .groups(&[LEGACY])
            .resources(&["persistentvolumeclaims", "persistentvolumes"]),
        rule(&["get"]).groups(&[LEGACY]).resources(&["endpoints"]),
        rule(&["create", "get", "list", "watch"])
            .groups(&[CERTIFICATES])
            .resources(&["certificatesigningrequests"]),
        rule(&["get", "create", "update", "patch", "delete"])
            .groups(&[COORDINATION])
            .resources(&["leases"]),
        rule(&["get"])
            .groups(&[STORAGE])
            .resources(&["volumeattachments"]),
        rule(&["create"])
            .groups(&[LEGACY])
            .resources(&["serviceaccounts/token"]),
        rule(&["get", "update", "patch"])
            .groups(&[LEGACY])
            .resources(&["persistentvolumeclaims/status"]),
        rule(READ).groups(&[STORAGE]).resources(&["csidrivers"]),
        rule(&["get", "create", "update", "patch", "delete"])
            .groups(&[STORAGE])
            .resources(&["csinodes"]),
        rule(READ)
            .groups(&["node.k8s.io"])
            .resources(&["runtimeclasses"]),
    ]
}

fn kube_controller_manager() -> Vec<Rule> {
    vec![
        events_rule(),
        // Leader election.
        rule(&["create"])
            .groups(&[COORDINATION])
            .resources(&["leases"]),
        rule(&["get", "update"])
            .groups(&[COORDINATION])
            .resources(&["leases"])
            .names(&["kube-controller-manager"]),
        // Service account tokens and the credentials of each controller.
        rule(&["create"])
            .groups(&[LEGACY])
            .resources(&["secrets", "serviceaccounts"]),
        rule(&["delete"]).groups(&[LEGACY]).resources(&["secrets"]),
        rule(&["get"]).groups(&[LEGACY]).resources(&[
            "namespaces",
            "secrets",
            "serviceaccounts",
            "configmaps",
        ]),
        rule(&["update"])
            .groups(&[LEGACY])
            .resources(&["secrets", "serviceaccounts"]),
        // Delegated authentication and authorization of its own endpoints.
        rule(&["create"])
            .groups(&[AUTHENTICATION])
            .resources(&["tokenreviews"]),
        rule(&["create"])
            .groups(&[AUTHORIZATION])
            .resources(&["subjectaccessreviews"]),
        // Shared informers.
        rule(&["list", "watch"]).groups(&["*"]).resources(&["*"]),
        rule(&["create"])
            .groups(&[LEGACY])
            .resources(&["serviceaccounts/token"]),
    ]
}

fn kube_scheduler() -> Vec<Rule> {
    vec![
        events_rule(),
        // Leader election.
        rule(&["create"])
            .groups(&[COORDINATION])
            .resources(&["leases"]),
        rule(&["get", "list", "update", "watch"])
            .groups(&[COORDINATION])
            .resources(&["leases"])
            .names(&["kube-scheduler"]),
        rule(READ_WRITE)
            .groups(&[COORDINATION])
            .resources(&["leasecandidates"]),
        // Scheduling itself.
        rule(READ).groups(&[LEGACY]).resources(&["nodes"]),
        rule(&["get", "list", "watch", "delete"])
            .groups(&[LEGACY])
            .resources(&["pods"]),
        rule(&["create"])
            .groups(&[LEGACY])
            .resources(&["pods/binding", "bindings"]),
        rule(&["patch", "update"])
            .groups(&[LEGACY])
            .resources(&["pods/status"]),
        // Spreading and affinity.
        rule(READ)
            .groups(&[LEGACY])
            .resources(&["replicationcontrollers", "services"]),
        rule(READ)
            .groups(&[APPS, EXTENSIONS])
            .resources(&["replicasets"]),
        rule(READ).groups(&[APPS]).resources(&["statefulsets"]),
        rule(READ)
            .groups(&[POLICY])
            .resources(&["poddisruptionbudgets"]),
        rule(READ)
            .groups(&[LEGACY])
            .resources(&["persistentvolumeclaims", "persistentvolumes"]),
        rule(&["create"])
            .groups(&[AUTHENTICATION])
            .resources(&["tokenreviews"]),
        rule(&["create"])
            .groups(&[AUTHORIZATION])
            .resources(&["subjectaccessreviews"]),
        rule(READ).groups(&[STORAGE]).resources(&["csinodes"]),
        rule(READ).groups(&[LEGACY]).resources(&["namespaces"]),
        rule(READ).groups(&[STORAGE]).resources(&["csidrivers"]),
        rule(READ)
            .groups(&[STORAGE])
            .resources(&["csistoragecapacities"]),
    ]
}

pub(super) fn cluster_role_bindings() -> Vec<Value> {
    use Subject::{Group, ServiceAccount, User};
    vec![
        cluster_role_binding("cluster-admin", &[Group("system:masters")]),
        cluster_role_binding("system:monitoring", &[Group("system:monitoring")]),
        cluster_role_binding("system:discovery", &[Group("system:authenticated")]),
        cluster_role_binding("system:basic-user", &[Group("system:authenticated")]),
        cluster_role_binding(
            "system:public-info-viewer",
            &[
                Group("system:authenticated"),
                Group("system:unauthenticated"),
            ],
        ),
        cluster_role_binding("system:node-proxier", &[User("system:kube-proxy")]),
        cluster_role_binding(
            "system:kube-controller-manager",
            &[User("system:kube-controller-manager")],
        ),
        cluster_role_binding(
            "system:kube-dns",
            &[ServiceAccount("kube-system", "kube-dns")],
        ),
        cluster_role_binding("system:kube-scheduler", &[User("system:kube-scheduler")]),
        cluster_role_binding("system:volume-scheduler", &[User("system:kube-scheduler")]),
        // Nodes are authorized by the Node authorizer; the binding exists without subjects.
        cluster_role_binding("system:node", &[]),
        cluster_role_binding(
            "system:service-account-issuer-discovery",
            &[Group("system:serviceaccounts")],
        ),
    ]
}
