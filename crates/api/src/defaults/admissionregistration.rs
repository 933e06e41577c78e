//! Defaults of admissionregistration.k8s.io/v1 (Kubernetes'
//! `pkg/apis/admissionregistration/v1/defaults.go` and its generated defaulters).
//!
//! v1 webhooks get no `sideEffects` and no `admissionReviewVersions` default: both are
//! required (v1beta1 defaulted them).

use serde_json::{json, Map, Value};

use super::{ensure_obj, set_default};

pub fn apply(kind: &str, m: &mut Map<String, Value>) {
    match kind {
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
            let mutating = kind == "MutatingWebhookConfiguration";
            for hook in objects_mut(m, "webhooks") {
                webhook(hook, mutating);
            }
        }
        "ValidatingAdmissionPolicy" => {
            let spec = ensure_obj(m, "spec");
            set_default(spec, "failurePolicy", json!("Fail"));
            if let Some(mc) = spec
                .get_mut("matchConstraints")
                .and_then(Value::as_object_mut)
            {
                match_resources(mc);
            }
        }
        "ValidatingAdmissionPolicyBinding" => {
            if let Some(mr) = m
                .get_mut("spec")
                .and_then(|s| s.get_mut("matchResources"))
                .and_then(Value::as_object_mut)
            {
                match_resources(mr);
            }
        }
        _ => {}
    }
}

/// `SetDefaults_MutatingWebhook` / `SetDefaults_ValidatingWebhook`, then the rules' scope and
/// the service port.
fn webhook(hook: &mut Map<String, Value>, mutating: bool) {
    set_default(hook, "failurePolicy", json!("Fail"));
    set_default(hook, "matchPolicy", json!("Equivalent"));
    set_default(hook, "namespaceSelector", json!({}));
    set_default(hook, "objectSelector", json!({}));
    set_default(hook, "timeoutSeconds", json!(10));
    if mutating {
        set_default(hook, "reinvocationPolicy", json!("Never"));
    }
    for rule in objects_mut(hook, "rules") {
        set_default(rule, "scope", json!("*"));
    }
    if let Some(svc) = hook
        .get_mut("clientConfig")
        .and_then(|c| c.get_mut("service"))
        .and_then(Value::as_object_mut)
    {
        set_default(svc, "port", json!(443));
    }
}

/// `SetDefaults_MatchResources`, then the scope of every rule.
fn match_resources(mc: &mut Map<String, Value>) {
    set_default(mc, "matchPolicy", json!("Equivalent"));
    set_default(mc, "namespaceSelector", json!({}));
    set_default(mc, "objectSelector", json!({}));
    for key in ["resourceRules", "excludeResourceRules"] {
        for rule in objects_mut(mc, key) {
            set_default(rule, "scope", json!("*"));
        }
    }
}

/// The objects in the array at `key` (none when it is missing or not an array).
fn objects_mut<'a>(
    m: &'a mut Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    m.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}
