//! Privilege-escalation checks on RBAC writes, as Kubernetes' `pkg/registry/rbac` policy-based
//! storages make them: a role may only grant what its author already holds (unless they may
//! `escalate` it), and a binding may only grant a role whose permissions its author holds
//! (unless they may `bind` it). Members of `system:masters` skip the checks.

use capstan_api::catalogue::{self, ResourceInfo};
use serde_json::{json, Value};

use super::index::{parse_role_ref, parse_rules, RoleRef};
use super::rules::{compact, covers, go_quote_list, PolicyRule};
use super::{Rbac, GROUP};
use crate::auth::User;
use crate::error::{ApiError, FieldError};
use crate::request::RequestInfo;
use capstan_api::meta::At as _;

/// Asks the authorizer chain whether a user may do a request (`escalate` or `bind`).
pub type May<'a> = &'a dyn Fn(&User, &RequestInfo) -> bool;

/// The group whose members skip escalation checks, as Kubernetes' `EscalationAllowed`.
const PRIVILEGED_GROUP: &str = "system:masters";

/// Check the creation of a Role (`resource` "roles", in `namespace`) or ClusterRole
/// ("clusterroles"). Allowed when the user holds every rule of the role where it applies, or
/// may `escalate` roles of that resource (Kubernetes asks without a name on create). A
/// ClusterRole with an `aggregationRule` also needs full cluster authority, since it can
/// gather any permission.
pub fn check_role_write(
    rbac: &Rbac,
    may: May,
    user: &User,
    resource: &str,
    namespace: &str,
    obj: &Value,
) -> Result<(), ApiError> {
    check_role(rbac, may, user, resource, namespace, None, obj)
}

/// Check an update of a Role or ClusterRole from `old` to `obj`: as a create, except that
/// changes to ownerReferences and finalizers alone pass (the garbage collector makes them),
/// `escalate` is asked about the role by name, and removing an aggregationRule also needs
/// full authority.
pub fn check_role_update(
    rbac: &Rbac,
    may: May,
    user: &User,
    resource: &str,
    namespace: &str,
    old: &Value,
    obj: &Value,
) -> Result<(), ApiError> {
    check_role(rbac, may, user, resource, namespace, Some(old), obj)
}

fn check_role(
    rbac: &Rbac,
    may: May,
    user: &User,
    resource: &str,
    namespace: &str,
    old: Option<&Value>,
    obj: &Value,
) -> Result<(), ApiError> {
    let cluster = resource == "clusterroles";
    let namespace = if cluster { "" } else { namespace };
    let name = object_name(obj);
    if is_privileged(user) {
        return Ok(());
    }
    let request_name = if old.is_some() { name } else { "" };
    if may(
        user,
        &rbac_request("escalate", resource, namespace, request_name),
    ) {
        return Ok(());
    }
    if old.is_some_and(|old| only_gc_fields_change(old, obj)) {
        return Ok(());
    }
    let owner = rbac.rules_for(user, namespace);
    if let Err(msg) = confirm_no_escalation(user, &owner, &parse_rules(obj)) {
        return Err(forbidden(resource, name, &msg));
    }
    let aggregated =
        cluster && (has_aggregation_rule(obj) || old.is_some_and(has_aggregation_rule));
    if aggregated && !covers(&owner, &full_authority()).is_empty() {
        return Err(forbidden(
            resource,
            name,
            "must have cluster-admin privileges to use the aggregationRule",
        ));
    }
    Ok(())
}

/// Check the creation of a RoleBinding (`resource` "rolebindings", in `namespace`) or
/// ClusterRoleBinding ("clusterrolebindings"). Its roleRef must be valid (422 otherwise).
/// Allowed when the user may `bind` the referenced role (checked in the binding's namespace,
/// or cluster-wide for a ClusterRoleBinding), or holds every rule of that role there. When
/// the role does not exist only `bind` permission will do; otherwise the answer is the role's
/// 404, as Kubernetes gives.
pub fn check_binding_write(
    rbac: &Rbac,
    may: May,
    user: &User,
    resource: &str,
    namespace: &str,
    obj: &Value,
) -> Result<(), ApiError> {
    check_binding(rbac, may, user, resource, namespace, None, obj)
}

/// Check an update of a binding from `old` to `obj`: as a create, except that changes to
/// ownerReferences and finalizers alone pass.
pub fn check_binding_update(
    rbac: &Rbac,
    may: May,
    user: &User,
    resource: &str,
    namespace: &str,
    old: &Value,
    obj: &Value,
) -> Result<(), ApiError> {
    check_binding(rbac, may, user, resource, namespace, Some(old), obj)
}

fn check_binding(
    rbac: &Rbac,
    may: May,
    user: &User,
    resource: &str,
    namespace: &str,
    old: Option<&Value>,
    obj: &Value,
) -> Result<(), ApiError> {
    let cluster = resource == "clusterrolebindings";
    let namespace = if cluster { "" } else { namespace };
    let name = object_name(obj);
    validate_role_ref(resource, name, obj)?;
    if is_privileged(user) || old.is_some_and(|old| only_gc_fields_change(old, obj)) {
        return Ok(());
    }
    let (kind, roles, role_name) = match parse_role_ref(obj) {
        RoleRef::Role(n) => ("Role", "roles", n),
        RoleRef::ClusterRole(n) => ("ClusterRole", "clusterroles", n),
        RoleRef::Unresolvable => return Err(forbidden(resource, name, "unsupported role kind")),
    };
    let ref_group = obj
        .at("/roleRef/apiGroup")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut bind = rbac_request("bind", roles, namespace, &role_name);
    bind.group = ref_group.to_string();
    bind.version.clear();
    if may(user, &bind) {
        return Ok(());
    }
    let Some(role_rules) = rbac.role_rules(kind, namespace, &role_name) else {
        return Err(role_not_found(roles, &role_name));
    };
    let owner = rbac.rules_for(user, namespace);
    confirm_no_escalation(user, &owner, &role_rules).map_err(|msg| forbidden(resource, name, &msg))
}

/// Kubernetes' `ConfirmNoEscalation`: Err with its message when `owner` does not cover
/// `rules`. The missing rules are compacted, shown in `CompactString` form, sorted and
/// deduplicated, one a line.
pub fn confirm_no_escalation(
    user: &User,
    owner: &[PolicyRule],
    rules: &[PolicyRule],
) -> Result<(), String> {
    let missing = covers(owner, rules);
    if missing.is_empty() {
        return Ok(());
    }
    let mut lines: Vec<String> = compact(&missing)
        .iter()
        .map(PolicyRule::compact_string)
        .collect();
    lines.sort();
    lines.dedup();
    Err(format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        capstan_api::field::go_quote(&user.name),
        go_quote_list(&user.groups),
        lines.join("\n")
    ))
}

fn is_privileged(user: &User) -> bool {
    user.in_group(PRIVILEGED_GROUP)
}

/// `*` on every resource of every group, and on every non-resource URL.
fn full_authority() -> Vec<PolicyRule> {
    let all = || vec!["*".to_string()];
    vec![
        PolicyRule {
            verbs: all(),
            api_groups: all(),
            resources: all(),
            ..Default::default()
        },
        PolicyRule {
            verbs: all(),
            non_resource_urls: all(),
            ..Default::default()
        },
    ]
}

fn has_aggregation_rule(obj: &Value) -> bool {
    obj.at("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty())
}

fn object_name(obj: &Value) -> &str {
    obj.at("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The request an `escalate` or `bind` check asks the authorizer about.
fn rbac_request(verb: &str, resource: &str, namespace: &str, name: &str) -> RequestInfo {
    let mut path = format!("/apis/{GROUP}/v1");
    if !namespace.is_empty() {
        path.push_str(&format!("/namespaces/{namespace}"));
    }
    path.push_str(&format!("/{resource}"));
    if !name.is_empty() {
        path.push_str(&format!("/{name}"));
    }
    RequestInfo {
        is_resource: true,
        path,
        verb: verb.to_string(),
        api_prefix: "apis".into(),
        group: GROUP.into(),
        version: "*".into(),
        namespace: namespace.to_string(),
        resource: resource.to_string(),
        name: name.to_string(),
        ..Default::default()
    }
}

/// Kubernetes' `IsOnlyMutatingGCFields`: the objects differ only in ownerReferences and
/// finalizers (and bookkeeping a client may or may not echo: resourceVersion, managedFields,
/// selfLink).
fn only_gc_fields_change(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in [
                "ownerReferences",
                "finalizers",
                "selfLink",
                "resourceVersion",
                "managedFields",
            ] {
                md.remove(k);
            }
        }
        v
    };
    strip(old) == strip(new)
}

fn rbac_info(plural: &str) -> Option<&'static ResourceInfo> {
    catalogue::find(GROUP, "v1", plural)
}

/// Kubernetes' `NewForbidden` for an RBAC resource.
fn forbidden(resource: &str, name: &str, msg: &str) -> ApiError {
    let head = if name.is_empty() {
        format!("{resource}.{GROUP}")
    } else {
        format!("{resource}.{GROUP} \"{name}\"")
    };
    let mut e = ApiError::new(403, "Forbidden", format!("{head} is forbidden: {msg}"));
    e.details = Some(json!({"name": name, "group": GROUP, "kind": resource}));
    e
}

fn role_not_found(resource: &str, name: &str) -> ApiError {
    match rbac_info(resource) {
        Some(info) => ApiError::not_found(info, name),
        None => ApiError::new(
            404,
            "NotFound",
            format!("{resource}.{GROUP} \"{name}\" not found"),
        ),
    }
}

/// The roleRef rules of Kubernetes' binding validation, answered before any escalation check.
fn validate_role_ref(resource: &str, name: &str, obj: &Value) -> Result<(), ApiError> {
    let field = |k: &str| {
        obj.get("roleRef")
            .and_then(|r| r.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let mut errs = Vec::new();
    if field("apiGroup") != GROUP {
        errs.push(FieldError::not_supported(
            "roleRef.apiGroup",
            &json!(field("apiGroup")),
            &[GROUP],
        ));
    }
    let kinds: &[&str] = if resource == "clusterrolebindings" {
        &["ClusterRole"]
    } else {
        &["Role", "ClusterRole"]
    };
    if !kinds.contains(&field("kind")) {
        errs.push(FieldError::not_supported(
            "roleRef.kind",
            &json!(field("kind")),
            kinds,
        ));
    }
    if field("name").is_empty() {
        errs.push(FieldError::required("roleRef.name", ""));
    }
    if errs.is_empty() {
        return Ok(());
    }
    Err(match rbac_info(resource) {
        Some(info) => invalid(info, name, errs),
        None => ApiError::new(422, "Invalid", errs[0].message.clone()),
    })
}

/// A 422 in Kubernetes' `NewInvalid` form.
pub(crate) fn invalid(info: &ResourceInfo, name: &str, errs: Vec<FieldError>) -> ApiError {
    ApiError::invalid(info, name, errs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::Rbac;

    fn user(name: &str) -> User {
        User {
            name: name.into(),
            groups: vec!["dev".into(), "system:authenticated".into()],
            ..Default::default()
        }
    }

    fn never(_: &User, _: &RequestInfo) -> bool {
        false
    }

    /// alice may read and list pods in `team` and nothing else.
    fn policy() -> Rbac {
        let rbac = Rbac::new();
        rbac.upsert(
            "roles",
            &json!({"metadata": {"name": "reader", "namespace": "team"},
                "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]}),
        );
        rbac.upsert(
            "rolebindings",
            &json!({"metadata": {"name": "alice-reader", "namespace": "team"},
                "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "reader"},
                "subjects": [{"kind": "User", "apiGroup": GROUP, "name": "alice"}]}),
        );
        rbac.upsert(
            "clusterroles",
            &json!({"metadata": {"name": "secret-reader"},
                "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]}),
        );
        rbac
    }

    fn role(rules: Value) -> Value {
        json!({"metadata": {"name": "r", "namespace": "team"}, "rules": rules})
    }

    #[test]
    fn role_within_held_rules_is_allowed() {
        let rbac = policy();
        let obj = role(json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]));
        assert!(check_role_write(&rbac, &never, &user("alice"), "roles", "team", &obj).is_ok());
    }

    #[test]
    fn escalating_role_is_refused_with_kubernetes_message() {
        let rbac = policy();
        let obj = role(json!([
            {"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["pods"]},
            {"verbs": ["list", "watch"], "apiGroups": [""], "resources": ["secrets"]}
        ]));
        let err =
            check_role_write(&rbac, &never, &user("alice"), "roles", "team", &obj).unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(err.reason, "Forbidden");
        assert_eq!(
            err.message,
            "roles.rbac.authorization.k8s.io \"r\" is forbidden: user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) \
             is attempting to grant RBAC permissions not currently held:\n\
             {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}\n\
             {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"list\" \"watch\"]}"
        );
        // The same role elsewhere: alice holds nothing there.
        let err = check_role_write(&rbac, &never, &user("alice"), "roles", "other", &obj);
        assert!(err.is_err());
    }

    #[test]
    fn escalate_permission_or_masters_bypass_the_check() {
        let rbac = policy();
        let obj = role(json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]));
        let asked = std::cell::RefCell::new(Vec::new());
        let may = |_: &User, r: &RequestInfo| {
            asked.borrow_mut().push(r.clone());
            r.verb == "escalate" && r.resource == "roles" && r.namespace == "team"
        };
        assert!(check_role_write(&rbac, &may, &user("alice"), "roles", "team", &obj).is_ok());
        let req = asked.borrow()[0].clone();
        assert_eq!((req.group.as_str(), req.name.as_str()), (GROUP, ""));
        assert!(
            check_role_update(&rbac, &may, &user("alice"), "roles", "team", &obj, &obj).is_ok()
        );
        assert_eq!(asked.borrow()[1].name, "r");
        let mut admin = user("root");
        admin.groups.push("system:masters".into());
        assert!(check_role_write(&rbac, &never, &admin, "roles", "team", &obj).is_ok());
    }

    #[test]
    fn aggregated_cluster_role_needs_full_authority() {
        let rbac = policy();
        let obj = json!({"metadata": {"name": "agg"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}});
        let err =
            check_role_write(&rbac, &never, &user("alice"), "clusterroles", "", &obj).unwrap_err();
        assert_eq!(
            err.message,
            "clusterroles.rbac.authorization.k8s.io \"agg\" is forbidden: must have cluster-admin privileges to use the aggregationRule"
        );
        rbac.upsert(
            "clusterroles",
            &json!({"metadata": {"name": "cluster-admin"}, "rules": [
                {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
                {"verbs": ["*"], "nonResourceURLs": ["*"]}]}),
        );
        rbac.upsert(
            "clusterrolebindings",
            &json!({"metadata": {"name": "alice-admin"},
                "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "User", "name": "alice"}]}),
        );
        assert!(check_role_write(&rbac, &never, &user("alice"), "clusterroles", "", &obj).is_ok());
    }

    #[test]
    fn gc_only_updates_pass() {
        let rbac = policy();
        let old = role(json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]));
        let mut new = old.clone();
        new["metadata"]["finalizers"] = json!(["x"]);
        assert!(
            check_role_update(&rbac, &never, &user("alice"), "roles", "team", &old, &new).is_ok()
        );
        new["metadata"]["labels"] = json!({"a": "b"});
        assert!(
            check_role_update(&rbac, &never, &user("alice"), "roles", "team", &old, &new).is_err()
        );
    }

    fn binding(kind: &str, role: &str) -> Value {
        json!({"metadata": {"name": "b", "namespace": "team"},
            "roleRef": {"apiGroup": GROUP, "kind": kind, "name": role},
            "subjects": [{"kind": "User", "name": "bob"}]})
    }

    #[test]
    fn binding_a_held_role_is_allowed_and_others_refused() {
        let rbac = policy();
        let ok = binding("Role", "reader");
        assert!(
            check_binding_write(&rbac, &never, &user("alice"), "rolebindings", "team", &ok).is_ok()
        );
        let bad = binding("ClusterRole", "secret-reader");
        let err = check_binding_write(&rbac, &never, &user("alice"), "rolebindings", "team", &bad)
            .unwrap_err();
        assert_eq!(err.code, 403);
        assert!(err.message.starts_with(
            "rolebindings.rbac.authorization.k8s.io \"b\" is forbidden: user \"alice\""
        ));
        assert!(err
            .message
            .ends_with("{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"));
    }

    #[test]
    fn bind_permission_allows_binding_and_covers_missing_roles() {
        let rbac = policy();
        let may = |_: &User, r: &RequestInfo| {
            r.verb == "bind"
                && r.resource == "clusterroles"
                && r.name == "secret-reader"
                && r.namespace == "team"
                && r.group == GROUP
        };
        let obj = binding("ClusterRole", "secret-reader");
        assert!(
            check_binding_write(&rbac, &may, &user("alice"), "rolebindings", "team", &obj).is_ok()
        );
        // A missing role: only bind permission helps; otherwise the role's 404.
        let missing = binding("ClusterRole", "nope");
        let err = check_binding_write(
            &rbac,
            &may,
            &user("alice"),
            "rolebindings",
            "team",
            &missing,
        )
        .unwrap_err();
        assert_eq!(err.code, 404);
        assert_eq!(
            err.message,
            "clusterroles.rbac.authorization.k8s.io \"nope\" not found"
        );
        let anything = |_: &User, r: &RequestInfo| r.verb == "bind";
        assert!(check_binding_write(
            &rbac,
            &anything,
            &user("alice"),
            "rolebindings",
            "team",
            &missing
        )
        .is_ok());
    }

    #[test]
    fn invalid_role_refs_are_422() {
        let rbac = policy();
        let mut obj = binding("Role", "reader");
        obj["metadata"] = json!({"name": "b"});
        let err = check_binding_write(
            &rbac,
            &never,
            &user("alice"),
            "clusterrolebindings",
            "",
            &obj,
        )
        .unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(
            err.message,
            "ClusterRoleBinding.rbac.authorization.k8s.io \"b\" is invalid: roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\""
        );
        obj["roleRef"]["apiGroup"] = json!("example.com");
        obj["roleRef"]["kind"] = json!("ClusterRole");
        let err = check_binding_write(
            &rbac,
            &never,
            &user("alice"),
            "clusterrolebindings",
            "",
            &obj,
        )
        .unwrap_err();
        assert_eq!(err.code, 422);
        assert!(err
            .message
            .contains("roleRef.apiGroup: Unsupported value: \"example.com\""));
    }
}
