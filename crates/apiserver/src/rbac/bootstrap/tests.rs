//! The default policy: well-formed objects, and the access it gives the components and users
//! Kubernetes gives it to.

use std::collections::HashSet;

use serde_json::Value;

use super::*;
use crate::auth::{Authorizer, Decision, User};
use crate::rbac::Rbac;
use crate::request::RequestInfo;

fn all_objects() -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    out.extend(cluster_roles().into_iter().map(|o| ("clusterroles", o)));
    out.extend(
        cluster_role_bindings()
            .into_iter()
            .map(|o| ("clusterrolebindings", o)),
    );
    out.extend(roles().into_iter().map(|o| ("roles", o)));
    out.extend(role_bindings().into_iter().map(|o| ("rolebindings", o)));
    out
}

fn loaded() -> Rbac {
    let rbac = Rbac::new();
    for (resource, obj) in all_objects() {
        rbac.upsert(resource, &obj);
    }
    rbac
}

fn user(name: &str, groups: &[&str]) -> User {
    User {
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..Default::default()
    }
}

fn res(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> RequestInfo {
    RequestInfo {
        is_resource: true,
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        subresource: sub.into(),
        namespace: ns.into(),
        name: name.into(),
        ..Default::default()
    }
}

fn url(path: &str) -> RequestInfo {
    RequestInfo {
        verb: "get".into(),
        path: path.into(),
        ..Default::default()
    }
}

fn may(rbac: &Rbac, u: &User, req: RequestInfo) -> bool {
    rbac.authorize(u, &req) == Decision::Allow
}

#[test]
fn objects_are_valid_labelled_and_unique() {
    let mut seen = HashSet::new();
    for (resource, obj) in all_objects() {
        let md = &obj["metadata"];
        let key = (resource, md["namespace"].clone(), md["name"].clone());
        assert!(seen.insert(key.clone()), "duplicate {key:?}");
        assert_eq!(
            md["labels"]["kubernetes.io/bootstrapping"], "rbac-defaults",
            "{key:?}"
        );
        assert_eq!(md["annotations"][AUTOUPDATE_ANNOTATION], "true", "{key:?}");
        assert_eq!(obj["apiVersion"], "rbac.authorization.k8s.io/v1");
        let kind = obj["kind"].as_str().unwrap();
        let errs = capstan_api::validation::validate(GROUP, kind, &obj);
        assert!(errs.is_empty(), "{key:?}: {errs:?}");
    }
}

#[test]
fn rule_lists_are_sorted_as_kubernetes_prints_them() {
    let roles = cluster_roles();
    let view = roles
        .iter()
        .find(|r| r["metadata"]["name"] == "system:aggregate-to-admin")
        .unwrap();
    assert_eq!(
        view["rules"][1],
        serde_json::json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"],
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]})
    );
}

#[test]
fn every_controller_has_a_role_and_a_binding_to_its_service_account() {
    let roles = cluster_roles();
    let bindings = cluster_role_bindings();
    for c in CONTROLLERS {
        let name = format!("system:controller:{c}");
        let role = roles
            .iter()
            .find(|r| r["metadata"]["name"] == name.as_str())
            .unwrap();
        assert!(!role["rules"].as_array().unwrap().is_empty(), "{name}");
        let b = bindings
            .iter()
            .find(|b| b["metadata"]["name"] == name.as_str())
            .unwrap();
        assert_eq!(b["roleRef"]["name"], name.as_str());
        assert_eq!(
            b["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": c, "namespace": "kube-system"}])
        );
    }
}

#[test]
fn user_facing_roles_come_aggregated() {
    let roles = cluster_roles();
    let rules_of = |n: &str| {
        let r = roles.iter().find(|r| r["metadata"]["name"] == n).unwrap();
        assert!(r.get("aggregationRule").is_some(), "{n}");
        crate::rbac::index::parse_rules(r)
    };
    let (view, edit, admin) = (rules_of("view"), rules_of("edit"), rules_of("admin"));
    assert!(!view.is_empty());
    assert!(view.iter().all(|r| edit.contains(r)), "edit includes view");
    assert!(
        edit.iter().all(|r| admin.contains(r)),
        "admin includes edit"
    );
    assert!(admin.len() > edit.len() && edit.len() > view.len());
    // Nothing to do for the aggregation controller afterwards.
    assert!(crate::rbac::aggregate(&roles).is_empty());
}

#[test]
fn masters_and_authenticated_users_get_what_kubernetes_gives() {
    let rbac = loaded();
    let admin = user("admin", &["system:masters", "system:authenticated"]);
    assert!(may(
        &rbac,
        &admin,
        res("delete", "apps", "deployments", "", "x", "d")
    ));
    assert!(may(&rbac, &admin, url("/metrics")));
    let someone = user("someone", &["system:authenticated"]);
    assert!(may(&rbac, &someone, url("/version")));
    assert!(may(&rbac, &someone, url("/apis/apps/v1")));
    assert!(may(
        &rbac,
        &someone,
        res(
            "create",
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "",
            "",
            ""
        )
    ));
    assert!(may(
        &rbac,
        &someone,
        res(
            "create",
            "authentication.k8s.io",
            "selfsubjectreviews",
            "",
            "",
            ""
        )
    ));
    assert!(!may(
        &rbac,
        &someone,
        res("list", "", "pods", "", "default", "")
    ));
    assert!(!may(&rbac, &someone, url("/metrics")));
    let anonymous = User::anonymous();
    assert!(may(&rbac, &anonymous, url("/healthz")));
    assert!(may(&rbac, &anonymous, url("/version")));
    assert!(!may(&rbac, &anonymous, url("/api")));
    let sa = user(
        "system:serviceaccount:default:app",
        &["system:serviceaccounts", "system:authenticated"],
    );
    assert!(may(&rbac, &sa, url("/openid/v1/jwks")));
    assert!(!may(
        &rbac,
        &sa,
        res("get", "", "secrets", "", "default", "s")
    ));
}

#[test]
fn components_get_their_permissions() {
    let rbac = loaded();
    let scheduler = user("system:kube-scheduler", &["system:authenticated"]);
    assert!(may(
        &rbac,
        &scheduler,
        res("create", "", "pods", "binding", "a", "p")
    ));
    assert!(may(
        &rbac,
        &scheduler,
        res("update", "", "persistentvolumes", "", "", "pv")
    ));
    let lease = |ns: &str, name: &str| res("update", "coordination.k8s.io", "leases", "", ns, name);
    assert!(may(
        &rbac,
        &scheduler,
        lease("kube-system", "kube-scheduler")
    ));
    // Its own lease anywhere; any lease in kube-system through the leader-locking Role.
    assert!(may(&rbac, &scheduler, lease("default", "kube-scheduler")));
    assert!(may(&rbac, &scheduler, lease("kube-system", "other")));
    assert!(!may(&rbac, &scheduler, lease("default", "other")));
    assert!(!may(
        &rbac,
        &scheduler,
        res("delete", "", "nodes", "", "", "n")
    ));
    let kcm = user("system:kube-controller-manager", &["system:authenticated"]);
    assert!(may(
        &rbac,
        &kcm,
        res("watch", "apps", "deployments", "", "", "")
    ));
    assert!(may(
        &rbac,
        &kcm,
        res(
            "get",
            "",
            "configmaps",
            "",
            "kube-system",
            "extension-apiserver-authentication"
        )
    ));
    assert!(!may(
        &rbac,
        &kcm,
        res("update", "apps", "deployments", "", "a", "d")
    ));
    let proxy = user("system:kube-proxy", &["system:authenticated"]);
    assert!(may(
        &rbac,
        &proxy,
        res("watch", "discovery.k8s.io", "endpointslices", "", "", "")
    ));
    let deployments = user(
        "system:serviceaccount:kube-system:deployment-controller",
        &["system:serviceaccounts"],
    );
    assert!(may(
        &rbac,
        &deployments,
        res("create", "apps", "replicasets", "", "a", "")
    ));
    assert!(may(
        &rbac,
        &deployments,
        res("update", "apps", "deployments", "status", "a", "d")
    ));
    assert!(!may(
        &rbac,
        &deployments,
        res("create", "", "pods", "", "a", "")
    ));
    let gc = user(
        "system:serviceaccount:kube-system:generic-garbage-collector",
        &[],
    );
    assert!(may(
        &rbac,
        &gc,
        res("delete", "example.com", "widgets", "", "a", "w")
    ));
    let signer = user("system:serviceaccount:kube-system:bootstrap-signer", &[]);
    assert!(may(
        &rbac,
        &signer,
        res(
            "update",
            "",
            "configmaps",
            "",
            "kube-public",
            "cluster-info"
        )
    ));
    assert!(!may(
        &rbac,
        &signer,
        res("update", "", "configmaps", "", "kube-public", "other")
    ));
}
