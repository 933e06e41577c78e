//! Policy rules: matching a request (Kubernetes' `RuleAllows` and the `rbac/v1` evaluation
//! helpers) and comparing rule sets for escalation checks (`Covers`, `BreakdownRule`,
//! `CompactRules`, `CompactString`).

use capstan_api::field::go_quote;
use serde_json::{Map, Value};

use crate::request::RequestInfo;

/// The wildcard of verbs, API groups, resources and non-resource URLs.
const ALL: &str = "*";

/// One `rbac.authorization.k8s.io/v1` PolicyRule. Empty lists mean "none" except for
/// `resource_names`, where empty means "any name".
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PolicyRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

impl PolicyRule {
    /// Read a rule from its JSON form. Absent or null lists are empty; anything else that is
    /// not a list of strings is an error (such a rule grants nothing rather than guessing).
    pub fn from_json(value: &Value) -> Result<PolicyRule, String> {
        let obj = value
            .as_object()
            .ok_or_else(|| format!("a policy rule must be an object, not {value}"))?;
        Ok(PolicyRule {
            verbs: string_list(obj, "verbs")?,
            api_groups: string_list(obj, "apiGroups")?,
            resources: string_list(obj, "resources")?,
            resource_names: string_list(obj, "resourceNames")?,
            non_resource_urls: string_list(obj, "nonResourceURLs")?,
        })
    }

    /// The JSON form: `verbs` always, the other lists only when non-empty (as Kubernetes'
    /// `omitempty` tags).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("verbs".into(), strings_value(&self.verbs));
        for (key, list) in [
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !list.is_empty() {
                m.insert(key.into(), strings_value(list));
            }
        }
        Value::Object(m)
    }

    /// Kubernetes' `CompactString`, used in escalation messages:
    /// `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get" "list"]}`.
    pub fn compact_string(&self) -> String {
        let mut parts = Vec::new();
        for (label, list) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ] {
            if !list.is_empty() {
                parts.push(format!("{label}:{}", go_quote_list(list)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }
}

fn string_list(obj: &Map<String, Value>, key: &str) -> Result<Vec<String>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{key} must hold strings, not {v}"))
            })
            .collect(),
        Some(other) => Err(format!("{key} must be a list of strings, not {other}")),
    }
}

fn strings_value(list: &[String]) -> Value {
    Value::Array(list.iter().map(|s| Value::String(s.clone())).collect())
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
pub(crate) fn go_quote_list(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

/// Whether `rule` allows `req`, exactly as Kubernetes' RBAC authorizer decides: resource
/// requests match verb, API group, resource (with `*`, `resource/subresource` and
/// `*/subresource` forms) and resource name; other requests match verb and non-resource URL
/// (`*` or a trailing-`*` prefix).
///
/// Like Kubernetes, a rule restricted by `resourceNames` never matches a request without a
/// name (create, list, watch, deletecollection), and `resource/*` is not a wildcard: it only
/// matches a request whose subresource is literally `*`.
pub fn rule_allows(rule: &PolicyRule, req: &RequestInfo) -> bool {
    if req.is_resource {
        verb_matches(rule, &req.verb)
            && group_matches(rule, &req.group)
            && resource_matches(rule, &req.resource, &req.subresource)
            && name_matches(rule, &req.name)
    } else {
        verb_matches(rule, &req.verb) && url_matches(rule, &req.path)
    }
}

/// Whether any of `rules` allows `req`.
pub fn rules_allow(rules: &[PolicyRule], req: &RequestInfo) -> bool {
    rules.iter().any(|r| rule_allows(r, req))
}

fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == ALL || v == verb)
}

fn group_matches(rule: &PolicyRule, group: &str) -> bool {
    rule.api_groups.iter().any(|g| g == ALL || g == group)
}

fn resource_matches(rule: &PolicyRule, resource: &str, subresource: &str) -> bool {
    rule.resources.iter().any(|r| {
        if r == ALL || is_combined(r, resource, subresource) {
            return true;
        }
        // `*/subresource` matches that subresource of every resource.
        !subresource.is_empty()
            && r.len() == subresource.len() + 2
            && r.starts_with("*/")
            && r.ends_with(subresource)
    })
}

/// `rule_resource == resource` or `== resource/subresource`, without building the string.
fn is_combined(rule_resource: &str, resource: &str, subresource: &str) -> bool {
    if subresource.is_empty() {
        return rule_resource == resource;
    }
    rule_resource.len() == resource.len() + 1 + subresource.len()
        && rule_resource.starts_with(resource)
        && rule_resource.as_bytes()[resource.len()] == b'/'
        && rule_resource.ends_with(subresource)
}

fn name_matches(rule: &PolicyRule, name: &str) -> bool {
    rule.resource_names.is_empty() || rule.resource_names.iter().any(|n| n == name)
}

fn url_matches(rule: &PolicyRule, path: &str) -> bool {
    rule.non_resource_urls
        .iter()
        .any(|u| u == ALL || url_covers(u, path))
}

/// A rule URL covers a path when equal, or when it ends in `*` and the path starts with the
/// part before the stars.
fn url_covers(rule_url: &str, path: &str) -> bool {
    rule_url == path
        || (rule_url.ends_with('*') && path.starts_with(rule_url.trim_end_matches('*')))
}

/// The parts of `requested` that `owner` does not cover, broken down to one verb, group,
/// resource and name (or one verb and URL) each, as Kubernetes' escalation check reports
/// them. Empty when `owner` covers everything.
pub fn covers(owner: &[PolicyRule], requested: &[PolicyRule]) -> Vec<PolicyRule> {
    requested
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner.iter().any(|o| rule_covers(o, sub)))
        .collect()
}

/// Kubernetes' `BreakdownRule`: an equivalent list of rules with at most one verb, group,
/// resource and resource name (or one verb and one non-resource URL) each.
pub fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |s: &String| vec![s.clone()];
    let mut out = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    verbs: one(verb),
                    api_groups: one(group),
                    resources: one(resource),
                    ..Default::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(base);
                } else {
                    for name in &rule.resource_names {
                        out.push(PolicyRule {
                            resource_names: one(name),
                            ..base.clone()
                        });
                    }
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(PolicyRule {
                verbs: one(verb),
                non_resource_urls: one(url),
                ..Default::default()
            });
        }
    }
    out
}

fn has(set: &[String], s: &str) -> bool {
    set.iter().any(|x| x == s)
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(set, w))
}

/// Whether `owner` covers `sub` (a broken-down rule), as Kubernetes' `ruleCovers`.
fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, ALL) || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, ALL) || has_all(&owner.api_groups, &sub.api_groups);
    let resources = resources_cover(&owner.resources, &sub.resources);
    let urls = sub
        .non_resource_urls
        .iter()
        .all(|path| owner.non_resource_urls.iter().any(|o| url_covers(o, path)));
    let names = if sub.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &sub.resource_names)
    };
    verbs && groups && resources && urls && names
}

fn resources_cover(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, ALL) {
        return true;
    }
    wanted.iter().all(|path| {
        if has(owner, path) {
            return true;
        }
        match path.split_once('/') {
            Some((_, sub)) => owner.iter().any(|o| o.strip_prefix("*/") == Some(sub)),
            None => false,
        }
    })
}

/// Kubernetes' `CompactRules`: rules with exactly one group and resource and nothing but
/// verbs besides are merged per group/resource, their verbs appended in order. Other rules are
/// kept as they are, first.
pub fn compact(rules: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    let mut simple: Vec<PolicyRule> = Vec::new();
    for rule in rules {
        let is_simple = rule.resource_names.is_empty()
            && rule.non_resource_urls.is_empty()
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1;
        if !is_simple {
            out.push(rule.clone());
            continue;
        }
        match simple
            .iter_mut()
            .find(|s| s.api_groups == rule.api_groups && s.resources == rule.resources)
        {
            Some(s) => s.verbs.extend(rule.verbs.iter().cloned()),
            None => simple.push(rule.clone()),
        }
    }
    out.extend(simple);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> PolicyRule {
        PolicyRule::from_json(&v).unwrap()
    }

    fn res(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> RequestInfo {
        RequestInfo {
            is_resource: true,
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            namespace: "ns".into(),
            ..Default::default()
        }
    }

    fn url(verb: &str, path: &str) -> RequestInfo {
        RequestInfo {
            verb: verb.into(),
            path: path.into(),
            ..Default::default()
        }
    }

    #[test]
    fn json_round_trips_and_omits_empty_lists() {
        let v = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]});
        let r = rule(v.clone());
        assert_eq!(r.to_json(), v);
        assert_eq!(
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/x"], "resourceNames": null}))
                .to_json(),
            json!({"verbs": ["get"], "nonResourceURLs": ["/x"]})
        );
        assert!(PolicyRule::from_json(&json!({"verbs": "get"})).is_err());
        assert!(PolicyRule::from_json(&json!({"verbs": [1]})).is_err());
        assert!(PolicyRule::from_json(&json!([])).is_err());
    }

    #[test]
    fn resource_rules_match_like_kubernetes() {
        let pods =
            rule(json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}));
        let cases = [
            (&pods, res("get", "", "pods", "", "p"), true),
            (&pods, res("list", "", "pods", "", ""), true),
            (&pods, res("delete", "", "pods", "", "p"), false),
            (&pods, res("get", "apps", "pods", "", "p"), false),
            (&pods, res("get", "", "secrets", "", "s"), false),
            // A subresource is not its resource.
            (&pods, res("get", "", "pods", "log", "p"), false),
        ];
        for (r, req, want) in cases {
            assert_eq!(rule_allows(r, &req), want, "{req:?}");
        }
    }

    #[test]
    fn wildcards_and_subresource_forms() {
        let all = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
        assert!(rule_allows(
            &all,
            &res("escalate", "x.io", "things", "status", "n")
        ));
        let log = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}));
        assert!(rule_allows(&log, &res("get", "", "pods", "log", "p")));
        assert!(!rule_allows(&log, &res("get", "", "pods", "", "p")));
        assert!(!rule_allows(&log, &res("get", "", "pods", "exec", "p")));
        let any_status =
            rule(json!({"verbs": ["update"], "apiGroups": ["*"], "resources": ["*/status"]}));
        assert!(rule_allows(
            &any_status,
            &res("update", "apps", "deployments", "status", "d")
        ));
        assert!(!rule_allows(
            &any_status,
            &res("update", "apps", "deployments", "", "d")
        ));
        assert!(!rule_allows(
            &any_status,
            &res("update", "apps", "deployments", "scale", "d")
        ));
        // `resource/*` is no wildcard in Kubernetes.
        let pods_star = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/*"]}));
        assert!(!rule_allows(
            &pods_star,
            &res("get", "", "pods", "log", "p")
        ));
        assert!(rule_allows(&pods_star, &res("get", "", "pods", "*", "p")));
    }

    #[test]
    fn resource_names_need_a_name() {
        let named = rule(
            json!({"verbs": ["get", "list", "create", "watch", "deletecollection", "update"],
            "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"]}),
        );
        assert!(rule_allows(&named, &res("get", "", "configmaps", "", "a")));
        assert!(rule_allows(
            &named,
            &res("update", "", "configmaps", "", "a")
        ));
        assert!(!rule_allows(&named, &res("get", "", "configmaps", "", "b")));
        for verb in ["create", "list", "watch", "deletecollection"] {
            assert!(
                !rule_allows(&named, &res(verb, "", "configmaps", "", "")),
                "{verb}"
            );
        }
    }

    #[test]
    fn non_resource_urls_apply_to_non_resource_requests_only() {
        let r = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/apis/*"]}));
        assert!(rule_allows(&r, &url("get", "/healthz")));
        assert!(!rule_allows(&r, &url("get", "/healthz/etcd")));
        assert!(rule_allows(&r, &url("get", "/apis/apps/v1")));
        assert!(rule_allows(&r, &url("get", "/apis/")));
        assert!(!rule_allows(&r, &url("get", "/apis")));
        assert!(!rule_allows(&r, &url("post", "/healthz")));
        let star = rule(json!({"verbs": ["*"], "nonResourceURLs": ["*"]}));
        assert!(rule_allows(&star, &url("put", "/anything")));
        // URL rules say nothing about resources, and resource rules nothing about URLs.
        assert!(!rule_allows(&star, &res("get", "", "pods", "", "p")));
        let all = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
        assert!(!rule_allows(&all, &url("get", "/healthz")));
    }

    #[test]
    fn covers_reports_missing_pieces() {
        let owner = vec![
            rule(
                json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "*/status"]}),
            ),
            rule(
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a", "b"]}),
            ),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/api/*"]})),
        ];
        let requested = vec![
            rule(
                json!({"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["pods", "pods/status"]}),
            ),
            rule(
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"]}),
            ),
            rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]})),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/api/v1", "/version"]})),
        ];
        let missing = covers(&owner, &requested);
        let shown: Vec<String> = missing.iter().map(PolicyRule::compact_string).collect();
        assert_eq!(
            shown,
            vec![
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}"#,
                r#"{APIGroups:[""], Resources:["pods/status"], Verbs:["delete"]}"#,
                r#"{APIGroups:[""], Resources:["configmaps"], Verbs:["get"]}"#,
                r#"{NonResourceURLs:["/version"], Verbs:["get"]}"#,
            ]
        );
        assert!(covers(&owner, &owner).is_empty());
        let admin = vec![rule(
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
        )];
        assert!(covers(&admin, &requested[..3]).is_empty());
        assert_eq!(covers(&admin, &requested[3..]).len(), 2);
    }

    #[test]
    fn compact_merges_verbs_of_simple_rules() {
        let missing = vec![
            rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]})),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/x"]})),
            rule(json!({"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]})),
        ];
        let shown: Vec<String> = compact(&missing)
            .iter()
            .map(PolicyRule::compact_string)
            .collect();
        assert_eq!(
            shown,
            vec![
                r#"{NonResourceURLs:["/x"], Verbs:["get"]}"#,
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}"#,
            ]
        );
    }
}
