//! Whether a webhook applies to a request (Kubernetes' `webhook/predicates` and
//! `generic.Webhook.ShouldCallHook`): namespaceSelector, objectSelector, then the rules,
//! with equivalent resources under `matchPolicy: Equivalent`. Pure: namespaces are looked up
//! through the caller.

use capstan_api::catalogue::{self, ResourceInfo};
use capstan_api::field::go_quote;
use capstan_api::selector::LabelSelector;
use serde_json::{json, Value};

use super::errors::{forbidden, internal_error};
use super::hooks::{FailurePolicy, Hook, MatchPolicy, Rule};
use crate::admission::Operation;
use crate::error::ApiError;
use capstan_api::meta::At as _;

/// The request as matching sees it.
pub struct Request<'a> {
    pub operation: Operation,
    /// The resource in its storage version.
    pub info: &'static ResourceInfo,
    pub subresource: &'a str,
    /// As admission names it: for a Namespace object, the namespace's own name.
    pub namespace: &'a str,
    pub name: &'a str,
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
}

impl Request<'_> {
    /// Whether the request is about a Namespace object itself.
    pub fn is_namespace(&self) -> bool {
        self.info.group.is_empty() && self.info.plural == "namespaces"
    }
}

/// What to do with one webhook for one request.
#[derive(Debug)]
pub enum Decision {
    /// The webhook does not apply.
    Skip,
    /// Call it, sending the object in the version of `resource`.
    Call { resource: &'static ResourceInfo },
    /// The request fails without calling anything.
    Reject(ApiError),
}

/// The kinds whose writes never go through webhooks, so that a broken webhook can always be
/// removed (Kubernetes' `IsExemptAdmissionConfigurationResource`).
pub fn is_exempt(info: &ResourceInfo) -> bool {
    info.group == "admissionregistration.k8s.io"
        && matches!(
            info.kind,
            "ValidatingWebhookConfiguration"
                | "MutatingWebhookConfiguration"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
                | "MutatingAdmissionPolicy"
                | "MutatingAdmissionPolicyBinding"
        )
}

/// Decide for `hook`. `namespace_labels` looks a namespace up by name (`None`: not found).
///
/// A webhook with `matchConditions` is treated as Kubernetes treats one whose conditions fail
/// to evaluate, since capstan has no CEL: skipped under `failurePolicy: Ignore`, the request
/// rejected (403) under `Fail`.
pub fn decide(
    hook: &Hook,
    req: &Request<'_>,
    namespace_labels: &dyn Fn(&str) -> Option<Value>,
) -> Decision {
    let ns = match_namespace(hook, req, namespace_labels);
    if matches!(ns, Ok(false)) {
        return Decision::Skip;
    }
    let obj = match_object(hook, req);
    if matches!(obj, Ok(false)) {
        return Decision::Skip;
    }
    let Some(resource) = matching_resource(hook, req) else {
        return Decision::Skip;
    };
    if let Err(e) = ns.and(obj) {
        return Decision::Reject(e);
    }
    if let Some(condition) = hook.match_conditions.first() {
        return match hook.failure_policy {
            FailurePolicy::Ignore => Decision::Skip,
            FailurePolicy::Fail => Decision::Reject(forbidden(
                req.info.group,
                req.info.plural,
                req.name,
                &format!(
                    "failed to evaluate match condition {} of webhook {}: CEL expressions are not supported",
                    go_quote(condition),
                    go_quote(&hook.name)
                ),
            )),
        };
    }
    Decision::Call { resource }
}

fn parsed(sel: &Result<LabelSelector, String>) -> Result<&LabelSelector, ApiError> {
    sel.as_ref().map_err(|e| internal_error(e))
}

/// `namespace.Matcher.MatchNamespaceSelector`.
fn match_namespace(
    hook: &Hook,
    req: &Request<'_>,
    namespace_labels: &dyn Fn(&str) -> Option<Value>,
) -> Result<bool, ApiError> {
    if req.namespace.is_empty() && !req.is_namespace() {
        // Cluster-scoped objects other than namespaces are never exempted.
        return Ok(true);
    }
    let selector = parsed(&hook.namespace_selector)?;
    if selector.is_empty() {
        return Ok(true);
    }
    let own = req.is_namespace()
        && req.subresource.is_empty()
        && matches!(req.operation, Operation::Create | Operation::Update);
    let labels = if own {
        // The namespace being written: its new labels, which no cache has yet.
        req.object.and_then(|o| o.at("/metadata/labels")).cloned()
    } else {
        let Some(ns) = namespace_labels(req.namespace) else {
            let mut e = ApiError::new(
                404,
                "NotFound",
                format!("namespaces {} not found", go_quote(req.namespace)),
            );
            e.details = Some(json!({"name": req.namespace, "kind": "namespaces"}));
            return Err(e);
        };
        ns.at("/metadata/labels").cloned()
    };
    Ok(selector.matches_object(&json!({"metadata": {"labels": labels}})))
}

/// `object.Matcher.MatchObjectSelector`: the new or the old object matches.
fn match_object(hook: &Hook, req: &Request<'_>) -> Result<bool, ApiError> {
    let selector = parsed(&hook.object_selector)?;
    if selector.is_empty() {
        return Ok(true);
    }
    Ok([req.object, req.old]
        .into_iter()
        .flatten()
        .any(|o| selector.matches_object(o)))
}

/// The resource version a rule of the webhook matches: the request's own, else (under
/// `Equivalent`) the first equivalent one an earlier rule matches.
fn matching_resource(hook: &Hook, req: &Request<'_>) -> Option<&'static ResourceInfo> {
    if hook.rules.iter().any(|r| rule_matches(r, req, req.info)) {
        return Some(req.info);
    }
    if hook.match_policy != MatchPolicy::Equivalent {
        return None;
    }
    let equivalents: Vec<&'static ResourceInfo> = equivalents(req.info).collect();
    hook.rules.iter().find_map(|r| {
        equivalents
            .iter()
            .copied()
            .find(|info| rule_matches(r, req, info))
    })
}

/// The other group/versions serving the same objects (sharing storage), in catalogue order.
fn equivalents(info: &'static ResourceInfo) -> impl Iterator<Item = &'static ResourceInfo> {
    catalogue::RESOURCES.iter().filter(move |r| {
        r.storage == info.storage
            && r.kind == info.kind
            && !(r.group == info.group && r.version == info.version)
    })
}

/// `rules.Matcher.Matches` against `info` (the request's resource or an equivalent one).
fn rule_matches(rule: &Rule, req: &Request<'_>, info: &ResourceInfo) -> bool {
    let any = |items: &[String], v: &str| items.iter().any(|i| i == "*" || i == v);
    let scope = match rule.scope.as_str() {
        "Namespaced" => !req.is_namespace() && !req.namespace.is_empty(),
        "Cluster" => req.is_namespace() || req.namespace.is_empty(),
        "*" | "" => true,
        _ => false,
    };
    scope
        && any(&rule.operations, req.operation.as_str())
        && any(&rule.api_groups, info.group)
        && any(&rule.api_versions, info.version)
        && rule.resources.iter().any(|rs| {
            let (res, sub) = rs.split_once('/').unwrap_or((rs, ""));
            (res == "*" || res == info.plural) && (sub == "*" || sub == req.subresource)
        })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::hooks::{Endpoint, SideEffects};
    use super::*;

    fn info(group: &str, version: &str, plural: &str) -> &'static ResourceInfo {
        catalogue::RESOURCES
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .expect("in the catalogue")
    }

    fn hook(rules: Vec<Rule>) -> Hook {
        Hook {
            name: "h.example.com".into(),
            configuration: "cfg".into(),
            endpoint: Endpoint::Url("https://h.example.com".into()),
            ca_bundle: Vec::new(),
            rules,
            failure_policy: FailurePolicy::Fail,
            match_policy: MatchPolicy::Equivalent,
            namespace_selector: Ok(LabelSelector::everything()),
            object_selector: Ok(LabelSelector::everything()),
            side_effects: SideEffects::None,
            timeout: Duration::from_secs(10),
            review_versions: vec!["v1".into()],
            reinvoke_if_needed: false,
            match_conditions: Vec::new(),
        }
    }

    fn rule(
        ops: &[&str],
        groups: &[&str],
        versions: &[&str],
        resources: &[&str],
        scope: &str,
    ) -> Rule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule {
            operations: v(ops),
            api_groups: v(groups),
            api_versions: v(versions),
            resources: v(resources),
            scope: scope.into(),
        }
    }

    fn req<'a>(
        info: &'static ResourceInfo,
        op: Operation,
        ns: &'a str,
        sub: &'a str,
        obj: Option<&'a Value>,
    ) -> Request<'a> {
        Request {
            operation: op,
            info,
            subresource: sub,
            namespace: ns,
            name: "x",
            object: obj,
            old: None,
        }
    }

    fn no_namespaces(_: &str) -> Option<Value> {
        None
    }

    fn calls(d: Decision) -> Option<&'static str> {
        match d {
            Decision::Call { resource } => Some(resource.version),
            _ => None,
        }
    }

    /// (rule, operation, namespace, subresource, called)
    #[test]
    fn rules_match_operations_resources_subresources_and_scope() {
        let pods = info("", "v1", "pods");
        let cases = [
            (
                rule(&["CREATE"], &[""], &["v1"], &["pods"], "*"),
                Operation::Create,
                "ns",
                "",
                true,
            ),
            (
                rule(&["UPDATE"], &[""], &["v1"], &["pods"], "*"),
                Operation::Create,
                "ns",
                "",
                false,
            ),
            (
                rule(&["*"], &["*"], &["*"], &["*"], "*"),
                Operation::Delete,
                "ns",
                "",
                true,
            ),
            (
                rule(&["*"], &["*"], &["*"], &["*"], "*"),
                Operation::Update,
                "ns",
                "status",
                false,
            ),
            (
                rule(&["*"], &[""], &["v1"], &["pods/status"], "*"),
                Operation::Update,
                "ns",
                "status",
                true,
            ),
            (
                rule(&["*"], &[""], &["v1"], &["pods/*"], "*"),
                Operation::Update,
                "ns",
                "status",
                true,
            ),
            (
                rule(&["*"], &[""], &["v1"], &["*/status"], "*"),
                Operation::Update,
                "ns",
                "status",
                true,
            ),
            (
                rule(&["*"], &[""], &["v1"], &["*/*"], "*"),
                Operation::Update,
                "ns",
                "",
                true,
            ),
            (
                rule(&["*"], &["apps"], &["v1"], &["*"], "*"),
                Operation::Create,
                "ns",
                "",
                false,
            ),
            (
                rule(&["*"], &[""], &["v1"], &["pods"], "Cluster"),
                Operation::Create,
                "ns",
                "",
                false,
            ),
            (
                rule(&["*"], &[""], &["v1"], &["pods"], "Namespaced"),
                Operation::Create,
                "ns",
                "",
                true,
            ),
        ];
        for (r, op, ns, sub, want) in cases {
            let h = hook(vec![r.clone()]);
            let got = calls(decide(&h, &req(pods, op, ns, sub, None), &no_namespaces)).is_some();
            assert_eq!(got, want, "{r:?} {op:?} {sub}");
        }
        let namespaces = info("", "v1", "namespaces");
        let h = hook(vec![rule(
            &["*"],
            &[""],
            &["v1"],
            &["namespaces"],
            "Cluster",
        )]);
        assert!(calls(decide(
            &h,
            &req(namespaces, Operation::Create, "team", "", None),
            &no_namespaces
        ))
        .is_some());
        let h = hook(vec![rule(
            &["*"],
            &[""],
            &["v1"],
            &["namespaces"],
            "Namespaced",
        )]);
        assert!(calls(decide(
            &h,
            &req(namespaces, Operation::Create, "team", "", None),
            &no_namespaces
        ))
        .is_none());
    }

    #[test]
    fn equivalent_versions_match_unless_the_policy_is_exact() {
        let hpa = info("autoscaling", "v2", "horizontalpodautoscalers");
        let mut h = hook(vec![rule(
            &["CREATE"],
            &["autoscaling"],
            &["v1"],
            &["horizontalpodautoscalers"],
            "*",
        )]);
        let r = req(hpa, Operation::Create, "ns", "", None);
        assert_eq!(calls(decide(&h, &r, &no_namespaces)), Some("v1"));
        h.match_policy = MatchPolicy::Exact;
        assert_eq!(calls(decide(&h, &r, &no_namespaces)), None);
    }

    #[test]
    fn namespace_selectors_read_the_namespace_or_the_namespace_being_written() {
        let cms = info("", "v1", "configmaps");
        let mut h = hook(vec![rule(&["*"], &["*"], &["*"], &["*"], "*")]);
        h.namespace_selector =
            LabelSelector::parse("env=prod").map_err(|e| e.message().to_string());
        let lookup = |ns: &str| {
            (ns == "prod").then(|| json!({"metadata": {"name": "prod", "labels": {"env": "prod"}}}))
        };
        assert!(calls(decide(
            &h,
            &req(cms, Operation::Create, "prod", "", None),
            &lookup
        ))
        .is_some());
        assert!(calls(decide(
            &h,
            &req(cms, Operation::Create, "dev", "", None),
            &|_| Some(json!({}))
        ))
        .is_none());
        match decide(&h, &req(cms, Operation::Create, "gone", "", None), &lookup) {
            Decision::Reject(e) => assert_eq!(
                (e.code, e.message.as_str()),
                (404, "namespaces \"gone\" not found")
            ),
            other => panic!("{other:?}"),
        }
        // Cluster-scoped objects are never exempted by a namespace selector.
        let nodes = info("", "v1", "nodes");
        assert!(calls(decide(
            &h,
            &req(nodes, Operation::Create, "", "", None),
            &lookup
        ))
        .is_some());
        let namespaces = info("", "v1", "namespaces");
        let labelled = json!({"metadata": {"name": "new", "labels": {"env": "prod"}}});
        assert!(calls(decide(
            &h,
            &req(namespaces, Operation::Create, "new", "", Some(&labelled)),
            &no_namespaces
        ))
        .is_some());
    }

    #[test]
    fn object_selectors_match_the_new_or_the_old_object() {
        let cms = info("", "v1", "configmaps");
        let mut h = hook(vec![rule(&["*"], &["*"], &["*"], &["*"], "*")]);
        h.object_selector = LabelSelector::parse("team=a").map_err(|e| e.message().to_string());
        let a = json!({"metadata": {"labels": {"team": "a"}}});
        let b = json!({"metadata": {"labels": {"team": "b"}}});
        assert!(calls(decide(
            &h,
            &req(cms, Operation::Create, "ns", "", Some(&b)),
            &no_namespaces
        ))
        .is_none());
        let mut r = req(cms, Operation::Update, "ns", "", Some(&b));
        r.old = Some(&a);
        assert!(calls(decide(&h, &r, &no_namespaces)).is_some());
    }

    #[test]
    fn match_conditions_follow_the_failure_policy() {
        let cms = info("", "v1", "configmaps");
        let mut h = hook(vec![rule(&["*"], &["*"], &["*"], &["*"], "*")]);
        h.match_conditions = vec!["not-system".into()];
        match decide(
            &h,
            &req(cms, Operation::Create, "ns", "", None),
            &no_namespaces,
        ) {
            Decision::Reject(e) => assert_eq!(e.code, 403),
            other => panic!("{other:?}"),
        }
        h.failure_policy = FailurePolicy::Ignore;
        assert!(matches!(
            decide(
                &h,
                &req(cms, Operation::Create, "ns", "", None),
                &no_namespaces
            ),
            Decision::Skip
        ));
    }

    #[test]
    fn admission_configuration_is_exempt() {
        assert!(is_exempt(info(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations"
        )));
        assert!(!is_exempt(info("", "v1", "pods")));
    }
}
