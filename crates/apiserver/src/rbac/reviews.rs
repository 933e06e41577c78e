//! Access reviews (`authorization.k8s.io/v1`: SubjectAccessReview, LocalSubjectAccessReview,
//! SelfSubjectAccessReview, SelfSubjectRulesReview) and `authentication.k8s.io/v1`
//! SelfSubjectReview, as pure functions from the posted object to the answered one (Kubernetes'
//! `pkg/registry/authorization` and `pkg/registry/authentication/selfsubjectreview`). The
//! caller routes the create request here and answers 201 with the result.

use std::collections::BTreeMap;

use capstan_api::catalogue;
use capstan_api::field::go_quote;
use serde_json::{json, Map, Value};

use super::escalation::invalid;
use super::rules::PolicyRule;
use super::Rbac;
use crate::auth::User;
use crate::error::{ApiError, FieldError};
use crate::request::RequestInfo;
use capstan_api::meta::At as _;

/// Decides a reviewed request: (allowed, reason).
pub type Authorize<'a> = &'a dyn Fn(&User, &RequestInfo) -> (bool, String);

const AUTHZ_API_VERSION: &str = "authorization.k8s.io/v1";

/// The request a review's `resourceAttributes` (namespace, verb, group, version, resource,
/// subresource, name) or `nonResourceAttributes` (path, verb) describe. Exactly one of the two
/// must be given.
pub fn request_from_attributes(spec: &Value) -> Result<RequestInfo, String> {
    match (
        attrs(spec, "resourceAttributes"),
        attrs(spec, "nonResourceAttributes"),
    ) {
        (Some(_), Some(_)) => Err(
            "nonResourceAttributes cannot be specified in combination with resourceAttributes"
                .into(),
        ),
        (None, None) => Err(
            "exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
        ),
        (Some(ra), None) => {
            let f = |k: &str| text(ra, k).to_string();
            let (group, version) = (f("group"), f("version"));
            let (namespace, resource, name) = (f("namespace"), f("resource"), f("name"));
            let subresource = f("subresource");
            let mut path = if group.is_empty() {
                format!("/api/{version}")
            } else {
                format!("/apis/{group}/{version}")
            };
            for (segment, present) in [
                (format!("namespaces/{namespace}"), !namespace.is_empty()),
                (resource.clone(), true),
                (name.clone(), !name.is_empty()),
                (
                    subresource.clone(),
                    !name.is_empty() && !subresource.is_empty(),
                ),
            ] {
                if present {
                    path.push('/');
                    path.push_str(&segment);
                }
            }
            Ok(RequestInfo {
                is_resource: true,
                path,
                verb: f("verb"),
                api_prefix: if group.is_empty() { "api" } else { "apis" }.into(),
                group,
                version,
                namespace,
                resource,
                subresource,
                name,
                rest: Vec::new(),
                field_selector: ra
                    .at("/fieldSelector/rawSelector")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                label_selector: ra
                    .at("/labelSelector/rawSelector")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            })
        }
        (None, Some(nra)) => Ok(RequestInfo {
            is_resource: false,
            path: text(nra, "path").to_string(),
            verb: text(nra, "verb").to_string(),
            ..Default::default()
        }),
    }
}

/// Answer a SubjectAccessReview (or a LocalSubjectAccessReview whose namespace the caller has
/// settled, see [`local_subject_access_review`]) about the user, groups, uid and extra of its
/// spec. 422 when it names neither or both kinds of attributes, or no user and no group.
pub fn subject_access_review(body: &Value, authorize: Authorize) -> Result<Value, ApiError> {
    let local = body.get("kind").and_then(Value::as_str) == Some("LocalSubjectAccessReview");
    let spec = body.get("spec").unwrap_or(&Value::Null);
    let mut errs = attribute_errors(spec);
    let user_name = text(spec, "user");
    let groups = strings(spec.get("groups"));
    if user_name.is_empty() && groups.is_empty() {
        errs.push(FieldError::invalid(
            "spec.user",
            &json!(user_name),
            "at least one of user or group must be specified",
        ));
    }
    let (kind, plural) = if local {
        errs.extend(local_errors(body, spec));
        ("LocalSubjectAccessReview", "localsubjectaccessreviews")
    } else {
        ("SubjectAccessReview", "subjectaccessreviews")
    };
    check(plural, errs)?;
    let user = User {
        name: user_name.to_string(),
        uid: text(spec, "uid").to_string(),
        groups,
        extra: extra(spec.get("extra")),
    };
    answer(body, kind, &user, authorize)
}

/// Answer a LocalSubjectAccessReview posted to `namespace`: the object's namespace is filled
/// from the URL, or must equal it (400), and the resource attributes must name it (422).
pub fn local_subject_access_review(
    body: &Value,
    namespace: &str,
    authorize: Authorize,
) -> Result<Value, ApiError> {
    let mut body = body.clone();
    match body.at("/metadata/namespace").and_then(Value::as_str) {
        None | Some("") => {
            if !body.get("metadata").is_some_and(Value::is_object) {
                body["metadata"] = json!({});
            }
            body["metadata"]["namespace"] = namespace.into();
        }
        Some(ns) if ns != namespace => return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        Some(_) => {}
    }
    body["kind"] = "LocalSubjectAccessReview".into();
    subject_access_review(&body, authorize)
}

/// Answer a SelfSubjectAccessReview for the requesting `user`.
pub fn self_subject_access_review(
    body: &Value,
    user: &User,
    authorize: Authorize,
) -> Result<Value, ApiError> {
    let spec = body.get("spec").unwrap_or(&Value::Null);
    check("selfsubjectaccessreviews", attribute_errors(spec))?;
    answer(body, "SelfSubjectAccessReview", user, authorize)
}

/// Answer a SelfSubjectRulesReview: every rule RBAC grants `user` in `spec.namespace`, plus
/// `extra_rules` (from other authorizers), split into resource and non-resource rules in the
/// form `kubectl auth can-i --list` reads. 400 without a namespace, as Kubernetes.
pub fn self_subject_rules_review(
    body: &Value,
    user: &User,
    rbac: &Rbac,
    extra_rules: Vec<PolicyRule>,
) -> Result<Value, ApiError> {
    let namespace = body
        .at("/spec/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    if namespace.is_empty() {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    let mut rules = rbac.rules_for(user, namespace);
    rules.extend(extra_rules);
    let list = |v: &[String]| Value::from(v.to_vec());
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in &rules {
        if !r.resources.is_empty() {
            let mut m = Map::new();
            m.insert("verbs".into(), list(&r.verbs));
            if !r.api_groups.is_empty() {
                m.insert("apiGroups".into(), list(&r.api_groups));
            }
            m.insert("resources".into(), list(&r.resources));
            if !r.resource_names.is_empty() {
                m.insert("resourceNames".into(), list(&r.resource_names));
            }
            resource_rules.push(Value::Object(m));
        }
        if !r.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}));
        }
    }
    Ok(json!({
        "kind": "SelfSubjectRulesReview",
        "apiVersion": AUTHZ_API_VERSION,
        "metadata": {"creationTimestamp": null},
        "spec": {},
        "status": {
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": false,
        },
    }))
}

/// The SelfSubjectReview answer (`kubectl auth whoami`): who the server thinks `user` is.
pub fn self_subject_review(user: &User) -> Value {
    let mut info = Map::new();
    if !user.name.is_empty() {
        info.insert("username".into(), user.name.clone().into());
    }
    if !user.uid.is_empty() {
        info.insert("uid".into(), user.uid.clone().into());
    }
    if !user.groups.is_empty() {
        info.insert("groups".into(), user.groups.clone().into());
    }
    if !user.extra.is_empty() {
        info.insert("extra".into(), json!(user.extra));
    }
    json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": capstan_api::meta::format_time(std::time::SystemTime::now())},
        "status": {"userInfo": info},
    })
}

/// The posted review with its status: allowed and, when given, the reason.
fn answer(body: &Value, kind: &str, user: &User, authorize: Authorize) -> Result<Value, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let req = request_from_attributes(&spec).map_err(ApiError::bad_request)?;
    let (allowed, reason) = authorize(user, &req);
    let mut status = json!({"allowed": allowed});
    if !reason.is_empty() {
        status["reason"] = reason.into();
    }
    let mut metadata = json!({"creationTimestamp": null});
    if let Some(ns) = body
        .at("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
    {
        metadata["namespace"] = ns.into();
    }
    Ok(json!({
        "kind": kind,
        "apiVersion": AUTHZ_API_VERSION,
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }))
}

/// The attribute object under `key`, unless absent or null.
fn attrs<'a>(spec: &'a Value, key: &str) -> Option<&'a Value> {
    spec.get(key).filter(|v| !v.is_null())
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn extra(v: Option<&Value>) -> BTreeMap<String, Vec<String>> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, vals)| (k.clone(), strings(Some(vals))))
                .collect()
        })
        .unwrap_or_default()
}

/// Go's `%#v` of the internal NonResourceAttributes, as field errors print it.
fn show_non_resource(nra: &Value) -> String {
    format!(
        "authorization.NonResourceAttributes{{Path:{}, Verb:{}}}",
        go_quote(text(nra, "path")),
        go_quote(text(nra, "verb"))
    )
}

/// Exactly one of resourceAttributes and nonResourceAttributes.
fn attribute_errors(spec: &Value) -> Vec<FieldError> {
    match (
        attrs(spec, "resourceAttributes"),
        attrs(spec, "nonResourceAttributes"),
    ) {
        (Some(_), Some(nra)) => vec![FieldError::invalid_shown(
            "spec.nonResourceAttributes",
            &show_non_resource(nra),
            "cannot be specified in combination with resourceAttributes",
        )],
        (None, None) => vec![FieldError::invalid_shown(
            "spec.resourceAttributes",
            "\"null\"",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )],
        _ => Vec::new(),
    }
}

/// A LocalSubjectAccessReview asks about its own namespace's resources only.
fn local_errors(body: &Value, spec: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let namespace = body
        .at("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    if let Some(ra) = attrs(spec, "resourceAttributes") {
        let ns = text(ra, "namespace");
        if ns != namespace {
            errs.push(FieldError::invalid(
                "spec.resourceAttributes.namespace",
                &json!(ns),
                "must match metadata.namespace",
            ));
        }
    }
    if let Some(nra) = attrs(spec, "nonResourceAttributes") {
        errs.push(FieldError::invalid_shown(
            "spec.nonResourceAttributes",
            &show_non_resource(nra),
            "disallowed on this kind of request",
        ));
    }
    errs
}

fn check(plural: &str, errs: Vec<FieldError>) -> Result<(), ApiError> {
    if errs.is_empty() {
        return Ok(());
    }
    Err(
        match catalogue::find("authorization.k8s.io", "v1", plural) {
            Some(info) => invalid(info, "", errs),
            None => ApiError::new(422, "Invalid", errs[0].message.clone()),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Authorizer, Decision};

    fn rbac() -> Rbac {
        let rbac = Rbac::new();
        rbac.upsert(
            "clusterroles",
            &json!({"metadata": {"name": "pod-reader"}, "rules": [
                {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]},
                {"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cfg"]},
                {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}),
        );
        rbac.upsert(
            "rolebindings",
            &json!({"metadata": {"name": "b", "namespace": "team"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pod-reader"},
                "subjects": [{"kind": "Group", "name": "devs"}]}),
        );
        rbac
    }

    fn with_rbac(rbac: &Rbac) -> impl Fn(&User, &RequestInfo) -> (bool, String) + '_ {
        move |u, r| (rbac.authorize(u, r) == Decision::Allow, String::new())
    }

    #[test]
    fn attributes_become_requests() {
        let r = request_from_attributes(&json!({"resourceAttributes": {
            "namespace": "ns", "verb": "get", "group": "apps", "version": "v1",
            "resource": "deployments", "subresource": "scale", "name": "d"}}))
        .unwrap();
        assert!(r.is_resource);
        assert_eq!(
            (
                r.verb.as_str(),
                r.group.as_str(),
                r.resource.as_str(),
                r.subresource.as_str(),
                r.name.as_str(),
                r.namespace.as_str()
            ),
            ("get", "apps", "deployments", "scale", "d", "ns")
        );
        assert_eq!(r.path, "/apis/apps/v1/namespaces/ns/deployments/d/scale");
        let n = request_from_attributes(
            &json!({"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}),
        )
        .unwrap();
        assert!(!n.is_resource);
        assert_eq!((n.path.as_str(), n.verb.as_str()), ("/healthz", "get"));
        assert!(request_from_attributes(&json!({})).is_err());
        assert!(request_from_attributes(
            &json!({"resourceAttributes": {}, "nonResourceAttributes": {}})
        )
        .is_err());
    }

    #[test]
    fn subject_access_review_answers_for_the_spec_user() {
        let rbac = rbac();
        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "jane", "groups": ["devs"],
                "resourceAttributes": {"namespace": "team", "verb": "list", "resource": "pods"}}});
        let out = subject_access_review(&body, &with_rbac(&rbac)).unwrap();
        assert_eq!(out["status"], json!({"allowed": true}));
        assert_eq!(out["kind"], "SubjectAccessReview");
        assert_eq!(out["spec"]["user"], "jane");
        let mut other = body.clone();
        other["spec"]["resourceAttributes"]["namespace"] = json!("elsewhere");
        let out = subject_access_review(&other, &with_rbac(&rbac)).unwrap();
        assert_eq!(out["status"]["allowed"], false);
        let reason = |_: &User, _: &RequestInfo| (false, "no rule".to_string());
        let out = subject_access_review(&body, &reason).unwrap();
        assert_eq!(
            out["status"],
            json!({"allowed": false, "reason": "no rule"})
        );
    }

    #[test]
    fn subject_access_review_validation_matches_kubernetes() {
        let rbac = rbac();
        let err = subject_access_review(&json!({"spec": {}}), &with_rbac(&rbac)).unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(
            err.message,
            "SubjectAccessReview.authorization.k8s.io \"\" is invalid: [spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified, spec.user: Invalid value: \"\": at least one of user or group must be specified]"
        );
        let both = json!({"spec": {"user": "u", "resourceAttributes": {"verb": "get"},
            "nonResourceAttributes": {"path": "/x", "verb": "get"}}});
        let err = subject_access_review(&both, &with_rbac(&rbac)).unwrap_err();
        assert_eq!(
            err.message,
            "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.nonResourceAttributes: Invalid value: authorization.NonResourceAttributes{Path:\"/x\", Verb:\"get\"}: cannot be specified in combination with resourceAttributes"
        );
        // Groups alone are enough.
        let groups_only = json!({"spec": {"groups": ["devs"], "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}});
        let out = subject_access_review(&groups_only, &with_rbac(&rbac)).unwrap();
        assert_eq!(out["status"]["allowed"], false);
    }

    #[test]
    fn local_review_is_confined_to_its_namespace() {
        let rbac = rbac();
        let body = json!({"kind": "LocalSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
            "spec": {"user": "jane", "groups": ["devs"],
                "resourceAttributes": {"namespace": "team", "verb": "get", "resource": "pods", "name": "p"}}});
        let out = local_subject_access_review(&body, "team", &with_rbac(&rbac)).unwrap();
        assert_eq!(out["status"]["allowed"], true);
        assert_eq!(out["metadata"]["namespace"], "team");
        let err = local_subject_access_review(&body, "other", &with_rbac(&rbac)).unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(
            err.message,
            "LocalSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes.namespace: Invalid value: \"team\": must match metadata.namespace"
        );
        let mut wrong = body.clone();
        wrong["metadata"] = json!({"namespace": "x"});
        assert_eq!(
            local_subject_access_review(&wrong, "team", &with_rbac(&rbac))
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn self_subject_access_review_uses_the_requester() {
        let rbac = rbac();
        let jane = User {
            name: "jane".into(),
            groups: vec!["devs".into()],
            ..Default::default()
        };
        let body = json!({"spec": {"resourceAttributes": {"namespace": "team", "verb": "get", "resource": "configmaps", "name": "cfg"}}});
        let out = self_subject_access_review(&body, &jane, &with_rbac(&rbac)).unwrap();
        assert_eq!(out["status"]["allowed"], true);
        assert_eq!(out["kind"], "SelfSubjectAccessReview");
        let nobody = User::anonymous();
        let out = self_subject_access_review(&body, &nobody, &with_rbac(&rbac)).unwrap();
        assert_eq!(out["status"]["allowed"], false);
        assert_eq!(
            self_subject_access_review(&json!({"spec": {}}), &jane, &with_rbac(&rbac))
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn rules_review_lists_resource_and_url_rules() {
        let rbac = rbac();
        let jane = User {
            name: "jane".into(),
            groups: vec!["devs".into()],
            ..Default::default()
        };
        let extra = vec![PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/version".into()],
            ..Default::default()
        }];
        let out =
            self_subject_rules_review(&json!({"spec": {"namespace": "team"}}), &jane, &rbac, extra)
                .unwrap();
        assert_eq!(
            out["status"],
            json!({
                "resourceRules": [
                    {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]},
                    {"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cfg"]}
                ],
                "nonResourceRules": [
                    {"verbs": ["get"], "nonResourceURLs": ["/healthz"]},
                    {"verbs": ["get"], "nonResourceURLs": ["/version"]}
                ],
                "incomplete": false
            })
        );
        let out =
            self_subject_rules_review(&json!({"spec": {"namespace": "x"}}), &jane, &rbac, vec![])
                .unwrap();
        assert_eq!(out["status"]["resourceRules"], json!([]));
        let err =
            self_subject_rules_review(&json!({"spec": {}}), &jane, &rbac, vec![]).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (400, "no namespace on request")
        );
    }

    #[test]
    fn self_subject_review_reports_user_info() {
        let mut extra = BTreeMap::new();
        extra.insert("scopes".to_string(), vec!["a".to_string()]);
        let u = User {
            name: "jane".into(),
            uid: "42".into(),
            groups: vec!["devs".into(), "system:authenticated".into()],
            extra,
        };
        let out = self_subject_review(&u);
        assert_eq!(out["kind"], "SelfSubjectReview");
        assert_eq!(out["apiVersion"], "authentication.k8s.io/v1");
        assert_eq!(
            out["status"]["userInfo"],
            json!({"username": "jane", "uid": "42", "groups": ["devs", "system:authenticated"], "extra": {"scopes": ["a"]}})
        );
        assert!(out["metadata"]["creationTimestamp"].is_string());
        let anon = self_subject_review(&User::anonymous());
        assert!(anon["status"]["userInfo"].get("uid").is_none());
    }
}
