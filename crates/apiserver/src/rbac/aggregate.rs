//! ClusterRole aggregation, as Kubernetes' `clusterroleaggregation` controller computes it: a
//! ClusterRole with an `aggregationRule` gets the rules of every other ClusterRole whose labels
//! match one of its selectors (selectors in order, roles by name, duplicates dropped).

use std::collections::HashMap;

use capstan_api::selector::LabelSelector;
use serde_json::Value;

use super::index::parse_rules;
use super::rules::PolicyRule;
use capstan_api::meta::At as _;

/// The aggregated ClusterRoles among `cluster_roles` whose rules must change, each returned
/// whole with its new `rules`; the caller writes them back. Aggregated roles that feed other
/// aggregated roles (`view` into `edit` into `admin`) are settled together, as the controller
/// would after a few rounds.
pub fn aggregate(cluster_roles: &[Value]) -> Vec<Value> {
    let mut roles: Vec<Role> = cluster_roles.iter().filter_map(Role::read).collect();
    roles.sort_by(|a, b| a.name.cmp(&b.name));
    let original: HashMap<String, Vec<PolicyRule>> = roles
        .iter()
        .map(|r| (r.name.clone(), r.rules.clone()))
        .collect();
    // Each round recomputes every aggregated role from the others' current rules; a chain of
    // n aggregated roles settles within n rounds.
    let rounds = roles.iter().filter(|r| r.selectors.is_some()).count() + 1;
    for _ in 0..rounds {
        let mut changed = false;
        for i in 0..roles.len() {
            let Some(selectors) = &roles[i].selectors else {
                continue;
            };
            let rules = gather(&roles, &roles[i].name, selectors);
            if rules != roles[i].rules {
                roles[i].rules = rules;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    roles
        .iter()
        .filter(|r| r.selectors.is_some() && original.get(&r.name) != Some(&r.rules))
        .map(|r| {
            let mut obj = r.obj.clone();
            obj["rules"] = Value::Array(r.rules.iter().map(PolicyRule::to_json).collect());
            obj
        })
        .collect()
}

struct Role<'a> {
    name: String,
    labels: serde_json::Map<String, Value>,
    rules: Vec<PolicyRule>,
    /// The aggregation rule's selectors; None for an ordinary role.
    selectors: Option<Vec<LabelSelector>>,
    obj: &'a Value,
}

impl<'a> Role<'a> {
    fn read(obj: &'a Value) -> Option<Role<'a>> {
        let name = obj.at("/metadata/name")?.as_str()?.to_string();
        let labels = obj
            .at("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let selectors = match obj.get("aggregationRule") {
            None | Some(Value::Null) => None,
            Some(rule) => {
                let list = rule
                    .get("clusterRoleSelectors")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                // A selector that does not parse stops the controller for this role: its
                // rules stay as they are (and still feed other aggregated roles).
                let parsed: Result<Vec<_>, _> = list.iter().map(LabelSelector::from_json).collect();
                parsed.ok()
            }
        };
        Some(Role {
            name,
            labels,
            rules: parse_rules(obj),
            selectors,
            obj,
        })
    }
}

/// The rules of every role but `me` matching one of `selectors`, in selector order and role
/// name order, each rule once.
fn gather(roles: &[Role], me: &str, selectors: &[LabelSelector]) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    for selector in selectors {
        for role in roles {
            if role.name == me || !selector.matches(&role.labels) {
                continue;
            }
            for rule in &role.rules {
                if !out.contains(rule) {
                    out.push(rule.clone());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cr(name: &str, labels: Value, rules: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels}, "rules": rules})
    }

    fn aggregated(name: &str, labels: Value, selector: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "aggregationRule": {"clusterRoleSelectors": [selector]}})
    }

    #[test]
    fn aggregated_role_picks_up_labelled_roles() {
        let pods = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]});
        let crds =
            json!({"verbs": ["list"], "apiGroups": ["example.com"], "resources": ["widgets"]});
        let roles = vec![
            aggregated(
                "view",
                json!({}),
                json!({"matchLabels": {"agg-view": "true"}}),
            ),
            cr("b-extra", json!({"agg-view": "true"}), json!([crds, pods])),
            cr("a-base", json!({"agg-view": "true"}), json!([pods])),
            cr(
                "unrelated",
                json!({"agg-view": "false"}),
                json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]),
            ),
        ];
        let out = aggregate(&roles);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["metadata"]["name"], "view");
        assert_eq!(out[0]["rules"], json!([pods, crds]));
        assert_eq!(out[0]["aggregationRule"], roles[0]["aggregationRule"]);
        // Once written back nothing changes.
        let mut again = roles.clone();
        again[0] = out[0].clone();
        assert!(aggregate(&again).is_empty());
    }

    #[test]
    fn bad_selector_leaves_the_role_alone() {
        let rule = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]});
        let mut broken = aggregated(
            "broken",
            json!({"feed": "true"}),
            json!({"matchExpressions": [{"key": "k", "operator": "Bogus"}]}),
        );
        broken["rules"] = json!([rule]);
        let roles = vec![
            broken,
            aggregated("agg", json!({}), json!({"matchLabels": {"feed": "true"}})),
        ];
        let out = aggregate(&roles);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["metadata"]["name"], "agg");
        assert_eq!(out[0]["rules"], json!([rule]));
    }

    #[test]
    fn match_expressions_select_too() {
        let rule = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]});
        let roles = vec![
            aggregated(
                "agg",
                json!({}),
                json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}),
            ),
            cr("x", json!({"tier": "b"}), json!([rule])),
            cr(
                "y",
                json!({"tier": "c"}),
                json!([{"verbs": ["delete"], "apiGroups": [""], "resources": ["pods"]}]),
            ),
        ];
        let out = aggregate(&roles);
        assert_eq!(out[0]["rules"], json!([rule]));
    }

    #[test]
    fn chains_settle_like_view_edit_admin() {
        let read = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]});
        let write = json!({"verbs": ["create"], "apiGroups": [""], "resources": ["pods"]});
        let grant = json!({"verbs": ["create"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"]});
        let roles = vec![
            aggregated(
                "admin",
                json!({}),
                json!({"matchLabels": {"to-admin": "true"}}),
            ),
            aggregated(
                "edit",
                json!({"to-admin": "true"}),
                json!({"matchLabels": {"to-edit": "true"}}),
            ),
            aggregated(
                "view",
                json!({"to-edit": "true"}),
                json!({"matchLabels": {"to-view": "true"}}),
            ),
            cr("r-view", json!({"to-view": "true"}), json!([read])),
            cr("r-edit", json!({"to-edit": "true"}), json!([write])),
            cr("r-admin", json!({"to-admin": "true"}), json!([grant])),
        ];
        let out = aggregate(&roles);
        let by_name =
            |n: &str| out.iter().find(|o| o["metadata"]["name"] == n).unwrap()["rules"].clone();
        assert_eq!(by_name("view"), json!([read]));
        assert_eq!(by_name("edit"), json!([write, read]));
        assert_eq!(by_name("admin"), json!([write, read, grant]));
    }
}
