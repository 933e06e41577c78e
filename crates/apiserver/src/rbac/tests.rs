//! The authorizer: which bindings apply to whom, and where.

use serde_json::{json, Value};

use super::*;

fn user(name: &str, groups: &[&str]) -> User {
    User {
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..Default::default()
    }
}

fn get(resource: &str, namespace: &str, name: &str) -> RequestInfo {
    RequestInfo {
        is_resource: true,
        verb: "get".into(),
        version: "v1".into(),
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
        ..Default::default()
    }
}

fn role_json(kind: &str, namespace: &str, name: &str, rules: Value) -> Value {
    let mut md = json!({"name": name});
    if !namespace.is_empty() {
        md["namespace"] = namespace.into();
    }
    json!({"kind": kind, "metadata": md, "rules": rules})
}

fn binding_json(
    namespace: &str,
    name: &str,
    role_kind: &str,
    role: &str,
    subjects: Value,
) -> Value {
    let mut md = json!({"name": name});
    if !namespace.is_empty() {
        md["namespace"] = namespace.into();
    }
    json!({"metadata": md, "roleRef": {"apiGroup": GROUP, "kind": role_kind, "name": role},
        "subjects": subjects})
}

fn pod_reader() -> Value {
    json!([{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}])
}

fn allowed(rbac: &Rbac, u: &User, req: &RequestInfo) -> bool {
    rbac.authorize(u, req) == Decision::Allow
}

#[test]
fn role_binding_applies_only_in_its_namespace() {
    let rbac = Rbac::new();
    rbac.upsert("roles", &role_json("Role", "a", "reader", pod_reader()));
    rbac.upsert(
        "rolebindings",
        &binding_json(
            "a",
            "b",
            "Role",
            "reader",
            json!([{"kind": "User", "name": "jane"}]),
        ),
    );
    let jane = user("jane", &[]);
    assert!(allowed(&rbac, &jane, &get("pods", "a", "p")));
    assert!(!allowed(&rbac, &jane, &get("pods", "b", "p")));
    assert!(!allowed(&rbac, &jane, &get("pods", "", "")));
    assert!(!allowed(&rbac, &jane, &get("secrets", "a", "s")));
    assert!(!allowed(&rbac, &user("john", &[]), &get("pods", "a", "p")));
}

#[test]
fn role_binding_may_reference_a_cluster_role() {
    let rbac = Rbac::new();
    rbac.upsert(
        "clusterroles",
        &role_json("ClusterRole", "", "reader", pod_reader()),
    );
    rbac.upsert(
        "rolebindings",
        &binding_json(
            "a",
            "b",
            "ClusterRole",
            "reader",
            json!([{"kind": "Group", "name": "devs"}]),
        ),
    );
    let dev = user("x", &["devs"]);
    assert!(allowed(&rbac, &dev, &get("pods", "a", "p")));
    assert!(!allowed(&rbac, &dev, &get("pods", "b", "p")));
    // A Role of the same name in the namespace is not what a ClusterRole ref names.
    rbac.upsert(
        "clusterroles",
        &role_json("ClusterRole", "", "reader", json!([])),
    );
    rbac.upsert("roles", &role_json("Role", "a", "reader", pod_reader()));
    assert!(!allowed(&rbac, &dev, &get("pods", "a", "p")));
}

#[test]
fn cluster_role_binding_applies_everywhere_but_never_to_roles() {
    let rbac = Rbac::new();
    rbac.upsert(
        "clusterroles",
        &role_json("ClusterRole", "", "reader", pod_reader()),
    );
    rbac.upsert(
        "clusterrolebindings",
        &binding_json(
            "",
            "crb",
            "ClusterRole",
            "reader",
            json!([{"kind": "User", "name": "jane"}]),
        ),
    );
    let jane = user("jane", &[]);
    for ns in ["", "a", "kube-system"] {
        assert!(allowed(&rbac, &jane, &get("pods", ns, "p")), "{ns}");
    }
    // A ClusterRoleBinding cannot reach a namespaced Role.
    rbac.upsert(
        "roles",
        &role_json(
            "Role",
            "a",
            "secrets",
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]),
        ),
    );
    rbac.upsert(
        "clusterrolebindings",
        &binding_json(
            "",
            "bad",
            "Role",
            "secrets",
            json!([{"kind": "User", "name": "jane"}]),
        ),
    );
    assert!(!allowed(&rbac, &jane, &get("secrets", "a", "s")));
}

#[test]
fn service_account_subjects_match_their_user_name() {
    let rbac = Rbac::new();
    rbac.upsert(
        "clusterroles",
        &role_json("ClusterRole", "", "reader", pod_reader()),
    );
    rbac.upsert(
        "rolebindings",
        &binding_json(
            "a",
            "implicit-ns",
            "ClusterRole",
            "reader",
            json!([{"kind": "ServiceAccount", "name": "bot"}]),
        ),
    );
    rbac.upsert(
        "clusterrolebindings",
        &binding_json(
            "",
            "explicit",
            "ClusterRole",
            "reader",
            json!([{"kind": "ServiceAccount", "name": "ci", "namespace": "tools"}]),
        ),
    );
    rbac.upsert(
        "clusterrolebindings",
        &binding_json(
            "",
            "no-ns",
            "ClusterRole",
            "reader",
            json!([{"kind": "ServiceAccount", "name": "lost"}]),
        ),
    );
    let bot = user("system:serviceaccount:a:bot", &["system:serviceaccounts"]);
    assert!(allowed(&rbac, &bot, &get("pods", "a", "p")));
    assert!(!allowed(&rbac, &bot, &get("pods", "b", "p")));
    let other_bot = user("system:serviceaccount:b:bot", &[]);
    assert!(!allowed(&rbac, &other_bot, &get("pods", "a", "p")));
    let ci = user("system:serviceaccount:tools:ci", &[]);
    assert!(allowed(&rbac, &ci, &get("pods", "b", "p")));
    // A ServiceAccount subject without a namespace in a ClusterRoleBinding matches nobody.
    assert!(!allowed(&rbac, &user("lost", &[]), &get("pods", "b", "p")));
    assert!(!allowed(
        &rbac,
        &user("system:serviceaccount::lost", &[]),
        &get("pods", "b", "p")
    ));
}

#[test]
fn updates_and_removals_take_effect() {
    let rbac = Rbac::new();
    let jane = user("jane", &[]);
    rbac.upsert(
        "clusterroles",
        &role_json("ClusterRole", "", "reader", pod_reader()),
    );
    let crb = |subject: &str| {
        binding_json(
            "",
            "crb",
            "ClusterRole",
            "reader",
            json!([{"kind": "User", "name": subject}]),
        )
    };
    rbac.upsert("clusterrolebindings", &crb("jane"));
    assert!(allowed(&rbac, &jane, &get("pods", "a", "p")));
    rbac.upsert("clusterrolebindings", &crb("john"));
    assert!(!allowed(&rbac, &jane, &get("pods", "a", "p")));
    assert!(allowed(&rbac, &user("john", &[]), &get("pods", "a", "p")));
    rbac.upsert(
        "clusterroles",
        &role_json("ClusterRole", "", "reader", json!([])),
    );
    assert!(!allowed(&rbac, &user("john", &[]), &get("pods", "a", "p")));
    rbac.upsert(
        "clusterroles",
        &role_json("ClusterRole", "", "reader", pod_reader()),
    );
    rbac.remove("clusterrolebindings", "", "crb");
    assert!(!allowed(&rbac, &user("john", &[]), &get("pods", "a", "p")));
    assert_eq!(rbac.binding_count(), 0);
    // Removing what is not there, and malformed objects, change nothing and do not panic.
    rbac.remove("rolebindings", "nowhere", "nothing");
    rbac.remove("widgets", "", "x");
    for bad in [
        json!(null),
        json!({"metadata": {}}),
        json!({"metadata": {"name": 5}}),
        json!({"metadata": {"name": "r"}, "rules": "all"}),
        json!({"metadata": {"name": "r"}, "rules": [{"verbs": "*"}]}),
        json!({"metadata": {"name": "b"}, "roleRef": 3, "subjects": {"kind": "User"}}),
    ] {
        for resource in [
            "roles",
            "rolebindings",
            "clusterroles",
            "clusterrolebindings",
            "x",
        ] {
            rbac.upsert(resource, &bad);
        }
    }
    assert!(!allowed(&rbac, &user("r", &[]), &get("pods", "a", "p")));
}

#[test]
fn rules_for_lists_cluster_then_namespace_rules_once_each() {
    let rbac = Rbac::new();
    rbac.upsert(
        "clusterroles",
        &role_json("ClusterRole", "", "reader", pod_reader()),
    );
    rbac.upsert(
        "roles",
        &role_json(
            "Role",
            "a",
            "cm",
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}]),
        ),
    );
    // Matching through both the user and a group still lists the binding once.
    rbac.upsert(
        "clusterrolebindings",
        &binding_json(
            "",
            "crb",
            "ClusterRole",
            "reader",
            json!([{"kind": "User", "name": "jane"}, {"kind": "Group", "name": "devs"}]),
        ),
    );
    rbac.upsert(
        "rolebindings",
        &binding_json(
            "a",
            "rb",
            "Role",
            "cm",
            json!([{"kind": "Group", "name": "devs"}]),
        ),
    );
    let jane = user("jane", &["devs"]);
    let in_a = rbac.rules_for(&jane, "a");
    assert_eq!(in_a.len(), 2);
    assert_eq!(in_a[0].resources, vec!["pods"]);
    assert_eq!(in_a[1].resources, vec!["configmaps"]);
    assert_eq!(rbac.rules_for(&jane, "").len(), 1);
    assert_eq!(rbac.rules_for(&jane, "b").len(), 1);
    assert!(rbac.rules_for(&user("x", &[]), "a").is_empty());
}

#[test]
fn non_resource_requests_use_cluster_bindings() {
    let rbac = Rbac::new();
    rbac.upsert(
        "clusterroles",
        &role_json(
            "ClusterRole",
            "",
            "health",
            json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/healthz/*"]}]),
        ),
    );
    rbac.upsert(
        "clusterrolebindings",
        &binding_json(
            "",
            "h",
            "ClusterRole",
            "health",
            json!([{"kind": "Group", "name": "system:authenticated"}]),
        ),
    );
    let req = |path: &str| RequestInfo {
        path: path.into(),
        verb: "get".into(),
        ..Default::default()
    };
    let u = user("u", &["system:authenticated"]);
    assert!(allowed(&rbac, &u, &req("/healthz/etcd")));
    assert!(!allowed(&rbac, &u, &req("/metrics")));
    assert!(!allowed(
        &rbac,
        &user("anon", &["system:unauthenticated"]),
        &req("/healthz")
    ));
}

/// 1,000 bindings across 100 namespaces; the index keeps one decision to a few lookups. The
/// benchmark (`capstan bench`) measures the time; here only the answers are checked.
#[test]
fn thousand_bindings_authorize_correctly() {
    let rbac = Rbac::new();
    rbac.upsert(
        "clusterroles",
        &role_json("ClusterRole", "", "reader", pod_reader()),
    );
    rbac.upsert(
        "clusterroles",
        &role_json(
            "ClusterRole",
            "",
            "editor",
            json!([{"verbs": ["*"], "apiGroups": ["apps"], "resources": ["deployments"]}]),
        ),
    );
    for i in 0..900 {
        let ns = format!("ns-{}", i % 100);
        let mut subjects = vec![json!({"kind": "User", "name": format!("user-{i}")})];
        if i < 100 {
            subjects.push(json!({"kind": "Group", "name": format!("team-{}", i % 7)}));
        }
        rbac.upsert(
            "rolebindings",
            &binding_json(
                &ns,
                &format!("rb-{i}"),
                "ClusterRole",
                "reader",
                json!(subjects),
            ),
        );
    }
    for i in 0..100 {
        rbac.upsert(
            "clusterrolebindings",
            &binding_json(
                "",
                &format!("crb-{i}"),
                "ClusterRole",
                "editor",
                json!([{"kind": "ServiceAccount", "name": format!("sa-{i}"), "namespace": "ops"}]),
            ),
        );
    }
    assert_eq!(rbac.binding_count(), 1000);
    let u = user("user-517", &["system:authenticated"]);
    assert!(allowed(&rbac, &u, &get("pods", "ns-17", "p")));
    assert!(!allowed(&rbac, &u, &get("pods", "ns-18", "p")));
    assert!(!allowed(&rbac, &u, &get("secrets", "ns-17", "s")));
    // Group team-3 is bound in namespaces ns-i for i < 100 with i ≡ 3 (mod 7).
    let member = user("someone", &["team-3"]);
    assert!(allowed(&rbac, &member, &get("pods", "ns-3", "p")));
    assert!(!allowed(&rbac, &member, &get("pods", "ns-4", "p")));
    let sa = user(
        "system:serviceaccount:ops:sa-42",
        &["system:serviceaccounts"],
    );
    let mut deploy = get("deployments", "ns-99", "d");
    deploy.group = "apps".into();
    deploy.verb = "patch".into();
    assert!(allowed(&rbac, &sa, &deploy));
    assert!(!allowed(&rbac, &sa, &get("pods", "ns-99", "p")));
}

#[test]
fn bootstrap_view_lets_a_user_get_pods_but_not_secrets() {
    let rbac = Rbac::new();
    for r in bootstrap::cluster_roles() {
        rbac.upsert("clusterroles", &r);
    }
    rbac.upsert(
        "rolebindings",
        &binding_json(
            "dev",
            "viewers",
            "ClusterRole",
            "view",
            json!([{"kind": "User", "name": "viewer"}]),
        ),
    );
    rbac.upsert(
        "rolebindings",
        &binding_json(
            "dev",
            "editors",
            "ClusterRole",
            "edit",
            json!([{"kind": "User", "name": "editor"}]),
        ),
    );
    let viewer = user("viewer", &["system:authenticated"]);
    assert!(allowed(&rbac, &viewer, &get("pods", "dev", "p")));
    assert!(!allowed(&rbac, &viewer, &get("secrets", "dev", "s")));
    assert!(!allowed(&rbac, &viewer, &get("pods", "prod", "p")));
    let mut log = get("pods", "dev", "p");
    log.subresource = "log".into();
    assert!(allowed(&rbac, &viewer, &log));
    let mut exec = get("pods", "dev", "p");
    exec.subresource = "exec".into();
    exec.verb = "create".into();
    assert!(!allowed(&rbac, &viewer, &exec));
    let editor = user("editor", &[]);
    assert!(allowed(&rbac, &editor, &get("secrets", "dev", "s")));
    assert!(allowed(&rbac, &editor, &exec));
    let mut grant = get("rolebindings", "dev", "");
    grant.group = GROUP.into();
    grant.verb = "create".into();
    assert!(!allowed(&rbac, &editor, &grant));
}
