//! rbac.authorization.k8s.io/v1: policy rules, role references and subjects.

use serde_json::Value;

use super::{arr, child, get, gofmt, idx, jstr, meta, names, s, Errs};
use crate::field::{go_quote, FieldError};

const GROUP: &str = "rbac.authorization.k8s.io";

pub fn validate(errs: &mut Errs, kind: &str, o: &Value) {
    match kind {
        "Role" | "ClusterRole" => {
            for (i, r) in arr(o, "rules").iter().enumerate() {
                policy_rule(errs, r, kind == "Role", &idx("rules", i));
            }
            if kind == "ClusterRole" {
                if let Some(ag) = get(o, "aggregationRule") {
                    let sels = arr(ag, "clusterRoleSelectors");
                    if sels.is_empty() {
                        errs.push(FieldError::required("aggregationRule.clusterRoleSelectors", "at least one clusterRoleSelector required if aggregationRule is non-nil"));
                    }
                    for (i, sel) in sels.iter().enumerate() {
                        meta::label_selector(
                            errs,
                            Some(sel),
                            &idx("aggregationRule.clusterRoleSelectors", i),
                        );
                    }
                }
            }
        }
        "RoleBinding" | "ClusterRoleBinding" => {
            let rr = o.get("roleRef").unwrap_or(&Value::Null);
            let g = s(rr, "apiGroup");
            if g != GROUP {
                errs.push(FieldError::not_supported(
                    "roleRef.apiGroup",
                    &jstr(g),
                    &[GROUP],
                ));
            }
            let k = s(rr, "kind");
            let kinds: &[&str] = if kind == "RoleBinding" {
                &["Role", "ClusterRole"]
            } else {
                &["ClusterRole"]
            };
            if !kinds.contains(&k) {
                errs.push(FieldError::not_supported("roleRef.kind", &jstr(k), kinds));
            }
            let name = s(rr, "name");
            if name.is_empty() {
                errs.push(FieldError::required("roleRef.name", ""));
            } else {
                super::name_ref(errs, names::name_is_path_segment, name, "roleRef.name");
            }
            for (i, sub) in arr(o, "subjects").iter().enumerate() {
                subject(errs, sub, kind == "RoleBinding", &idx("subjects", i));
            }
        }
        _ => {}
    }
}

fn policy_rule(errs: &mut Errs, r: &Value, namespaced: bool, path: &str) {
    if arr(r, "verbs").is_empty() {
        errs.push(FieldError::required(
            child(path, "verbs"),
            "verbs must contain at least one value",
        ));
    }
    if !arr(r, "nonResourceURLs").is_empty() {
        let shown = gofmt::string_slice(r.get("nonResourceURLs"));
        if namespaced {
            errs.push(FieldError::invalid_shown(
                child(path, "nonResourceURLs"),
                &shown,
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if !arr(r, "apiGroups").is_empty()
            || !arr(r, "resources").is_empty()
            || !arr(r, "resourceNames").is_empty()
        {
            errs.push(FieldError::invalid_shown(
                child(path, "nonResourceURLs"),
                &shown,
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return;
    }
    if arr(r, "apiGroups").is_empty() {
        errs.push(FieldError::required(
            child(path, "apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if arr(r, "resources").is_empty() {
        errs.push(FieldError::required(
            child(path, "resources"),
            "resource rules must supply at least one resource",
        ));
    }
}

fn subject(errs: &mut Errs, sub: &Value, namespaced: bool, path: &str) {
    let name = s(sub, "name");
    if name.is_empty() {
        errs.push(FieldError::required(child(path, "name"), ""));
    }
    let g = s(sub, "apiGroup");
    match s(sub, "kind") {
        "ServiceAccount" => {
            if !name.is_empty() {
                super::name_ref(
                    errs,
                    names::name_is_dns_subdomain,
                    name,
                    &child(path, "name"),
                );
            }
            if !g.is_empty() {
                errs.push(FieldError::not_supported(
                    child(path, "apiGroup"),
                    &jstr(g),
                    &[""],
                ));
            }
            if !namespaced && s(sub, "namespace").is_empty() {
                errs.push(FieldError::required(child(path, "namespace"), ""));
            }
        }
        "User" | "Group" => {
            if g != GROUP {
                errs.push(FieldError::not_supported(
                    child(path, "apiGroup"),
                    &jstr(g),
                    &[GROUP],
                ));
            }
        }
        k => errs.push(FieldError::not_supported(
            child(path, "kind"),
            &jstr(k),
            &["ServiceAccount", "User", "Group"],
        )),
    }
}

/// Bindings may not change their roleRef.
pub fn validate_update(errs: &mut Errs, kind: &str, new: &Value, old: &Value) {
    if kind != "RoleBinding" && kind != "ClusterRoleBinding" {
        return;
    }
    let (n, o) = (new.get("roleRef"), old.get("roleRef"));
    if !super::same(n, o) {
        let n = n.unwrap_or(&Value::Null);
        let shown = format!(
            "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
            go_quote(s(n, "apiGroup")),
            go_quote(s(n, "kind")),
            go_quote(s(n, "name"))
        );
        errs.push(FieldError::invalid_shown(
            "roleRef",
            &shown,
            "cannot change roleRef",
        ));
    }
}
