//! The webhooks of the stored configurations, read into typed form (Kubernetes'
//! `admission/plugin/webhook` accessors and `configuration` sources).
//!
//! Configurations are called in the order of their names, and a configuration's webhooks in
//! the order it lists them, as Kubernetes sorts its sources.

use std::time::Duration;

use capstan_api::selector::LabelSelector;
use serde_json::{json, Value};

/// Which configurations, and so which phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Mutating,
    Validating,
}

impl Phase {
    /// The plural resource of the configurations of this phase.
    pub fn resource(self) -> &'static str {
        match self {
            Phase::Mutating => "mutatingwebhookconfigurations",
            Phase::Validating => "validatingwebhookconfigurations",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    Fail,
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchPolicy {
    Exact,
    Equivalent,
}

/// What a webhook says about calling it on dry-run requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideEffects {
    None,
    NoneOnDryRun,
    Some,
    Unknown,
    /// Left out (only v1beta1-era objects; v1 requires it).
    Missing,
}

impl SideEffects {
    /// Whether the webhook may be called on a dry-run request.
    pub fn dry_run_safe(self) -> bool {
        matches!(self, SideEffects::None | SideEffects::NoneOnDryRun)
    }
}

/// Where a webhook is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Url(String),
    Service {
        namespace: String,
        name: String,
        path: String,
        port: u16,
    },
}

/// One rule of a webhook.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    pub operations: Vec<String>,
    pub api_groups: Vec<String>,
    pub api_versions: Vec<String>,
    pub resources: Vec<String>,
    /// `*`, `Cluster` or `Namespaced`.
    pub scope: String,
}

/// One webhook of a configuration, with the defaults Kubernetes would have filled in.
#[derive(Debug, Clone)]
pub struct Hook {
    pub name: String,
    /// The configuration it belongs to.
    pub configuration: String,
    pub endpoint: Endpoint,
    /// PEM certificates from `clientConfig.caBundle` (empty: the system's roots).
    pub ca_bundle: Vec<u8>,
    pub rules: Vec<Rule>,
    pub failure_policy: FailurePolicy,
    pub match_policy: MatchPolicy,
    pub namespace_selector: Result<LabelSelector, String>,
    pub object_selector: Result<LabelSelector, String>,
    pub side_effects: SideEffects,
    pub timeout: Duration,
    pub review_versions: Vec<String>,
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks only).
    pub reinvoke_if_needed: bool,
    /// Names of the `matchConditions` (CEL; capstan cannot evaluate them).
    pub match_conditions: Vec<String>,
}

/// Every webhook of `configurations` (as listed from the cache: sorted by name).
pub fn from_configurations(configurations: &[Value]) -> Vec<Hook> {
    let mut hooks = Vec::new();
    for c in configurations {
        let configuration = capstan_api::meta::name(c).to_string();
        for h in c
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(hook) = from_json(&configuration, h) {
                hooks.push(hook);
            }
        }
    }
    hooks
}

fn text(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

fn strings(v: &Value, k: &str) -> Vec<String> {
    v.get(k)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn selector(h: &Value, k: &str) -> Result<LabelSelector, String> {
    let empty = json!({});
    LabelSelector::from_json(h.get(k).filter(|v| !v.is_null()).unwrap_or(&empty))
        .map_err(|e| e.message().to_string())
}

/// A webhook from its JSON form; `None` when it has no usable client configuration (storage
/// validation makes that impossible for objects written through the API).
fn from_json(configuration: &str, h: &Value) -> Option<Hook> {
    use base64::Engine as _;
    let cc = h.get("clientConfig")?;
    let endpoint = match (cc.get("url").and_then(Value::as_str), cc.get("service")) {
        (Some(url), _) => Endpoint::Url(url.to_string()),
        (None, Some(svc)) if svc.is_object() => Endpoint::Service {
            namespace: text(svc, "namespace"),
            name: text(svc, "name"),
            path: text(svc, "path"),
            port: svc
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(443),
        },
        _ => return None,
    };
    let ca_bundle = cc
        .get("caBundle")
        .and_then(Value::as_str)
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .unwrap_or_default();
    let rules = h
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| Rule {
            operations: strings(r, "operations"),
            api_groups: strings(r, "apiGroups"),
            api_versions: strings(r, "apiVersions"),
            resources: strings(r, "resources"),
            scope: r
                .get("scope")
                .and_then(Value::as_str)
                .unwrap_or("*")
                .to_string(),
        })
        .collect();
    let side_effects = match h.get("sideEffects").and_then(Value::as_str) {
        Some("None") => SideEffects::None,
        Some("NoneOnDryRun") => SideEffects::NoneOnDryRun,
        Some("Some") => SideEffects::Some,
        Some(_) => SideEffects::Unknown,
        None => SideEffects::Missing,
    };
    Some(Hook {
        name: text(h, "name"),
        configuration: configuration.to_string(),
        endpoint,
        ca_bundle,
        rules,
        failure_policy: match h.get("failurePolicy").and_then(Value::as_str) {
            Some("Ignore") => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        },
        match_policy: match h.get("matchPolicy").and_then(Value::as_str) {
            Some("Exact") => MatchPolicy::Exact,
            _ => MatchPolicy::Equivalent,
        },
        namespace_selector: selector(h, "namespaceSelector"),
        object_selector: selector(h, "objectSelector"),
        side_effects,
        timeout: Duration::from_secs(
            h.get("timeoutSeconds")
                .and_then(Value::as_u64)
                .unwrap_or(10)
                .clamp(1, 30),
        ),
        review_versions: strings(h, "admissionReviewVersions"),
        reinvoke_if_needed: h.get("reinvocationPolicy").and_then(Value::as_str) == Some("IfNeeded"),
        match_conditions: h
            .get("matchConditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| text(c, "name"))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_read_with_kubernetes_defaults() {
        let cfg = json!({"metadata": {"name": "cfg"}, "webhooks": [
            {"name": "a.example.com", "clientConfig": {"service": {"namespace": "ns", "name": "svc"}, "caBundle": "Y2E="},
             "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
             "sideEffects": "None", "admissionReviewVersions": ["v1"], "reinvocationPolicy": "IfNeeded"},
            {"name": "broken.example.com", "clientConfig": {}},
        ]});
        let hooks = from_configurations(&[cfg]);
        assert_eq!(hooks.len(), 1);
        let h = &hooks[0];
        assert_eq!(h.configuration, "cfg");
        assert_eq!(
            h.endpoint,
            Endpoint::Service {
                namespace: "ns".into(),
                name: "svc".into(),
                path: String::new(),
                port: 443
            }
        );
        assert_eq!(h.ca_bundle, b"ca");
        assert_eq!(h.rules[0].scope, "*");
        assert_eq!(h.failure_policy, FailurePolicy::Fail);
        assert_eq!(h.match_policy, MatchPolicy::Equivalent);
        assert_eq!(h.timeout, Duration::from_secs(10));
        assert!(h.reinvoke_if_needed);
        assert!(h.namespace_selector.as_ref().unwrap().is_empty());
    }
}
