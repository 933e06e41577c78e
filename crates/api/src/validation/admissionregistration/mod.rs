//! admissionregistration.k8s.io/v1: webhook configurations ([`webhook`]) and validating
//! admission policies with their bindings ([`policy`]), as Kubernetes'
//! `pkg/apis/admissionregistration/validation` checks them.
//!
//! CEL expressions (match conditions, validations, variables, audit annotations) are checked
//! structurally only: present, named, within limits. capstan does not compile CEL, so an
//! expression Kubernetes would reject as not compiling is accepted here.

mod policy;
pub(crate) mod webhook;

use std::collections::BTreeSet;

use serde_json::Value;

use super::{arr, child, get, gofmt, idx, jstr, s, Errs};
use crate::field::FieldError;

const FAILURE_POLICIES: &[&str] = &["Fail", "Ignore"];
const MATCH_POLICIES: &[&str] = &["Equivalent", "Exact"];
const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
const SCOPES: &[&str] = &["*", "Cluster", "Namespaced"];
const MAX_MATCH_CONDITIONS: usize = 64;

/// Validate an object of `kind` (ObjectMeta is checked by the caller). `old` is the stored
/// object on update.
pub fn validate(errs: &mut Errs, kind: &str, o: &Value, old: Option<&Value>) {
    match kind {
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
            webhook::configuration(errs, o, kind == "MutatingWebhookConfiguration", old);
        }
        "ValidatingAdmissionPolicy" => policy::policy(errs, o),
        "ValidatingAdmissionPolicyBinding" => policy::binding(errs, o),
        _ => {}
    }
}

/// An enum field that may be left out.
pub(super) fn optional_enum(errs: &mut Errs, o: &Value, k: &str, p: &str, supported: &[&str]) {
    if let Some(v) = get(o, k).and_then(Value::as_str) {
        if !supported.contains(&v) {
            errs.push(FieldError::not_supported(child(p, k), &jstr(v), supported));
        }
    }
}

pub(super) fn rule_with_operations(errs: &mut Errs, rule: &Value, p: &str) {
    let ops = arr(rule, "operations");
    let op_path = child(p, "operations");
    if ops.is_empty() {
        errs.push(FieldError::required(&op_path, ""));
    }
    if ops.len() > 1 && ops.iter().any(|o| o == "*") {
        errs.push(FieldError::invalid_shown(
            &op_path,
            &gofmt::typed_string_slice(
                "admissionregistration.OperationType",
                get(rule, "operations"),
            ),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        let op = op.as_str().unwrap_or("");
        if !OPERATIONS.contains(&op) {
            errs.push(FieldError::not_supported(
                idx(&op_path, i),
                &jstr(op),
                OPERATIONS,
            ));
        }
    }
    rule_fields(errs, rule, p);
}

/// `validateRule` with subresources allowed (the only form webhooks and policies use).
fn rule_fields(errs: &mut Errs, rule: &Value, p: &str) {
    for (k, what) in [("apiGroups", "API groups"), ("apiVersions", "API versions")] {
        let list = arr(rule, k);
        let kp = child(p, k);
        if list.is_empty() {
            errs.push(FieldError::required(&kp, ""));
        }
        if list.len() > 1 && list.iter().any(|v| v == "*") {
            errs.push(FieldError::invalid_shown(
                &kp,
                &gofmt::string_slice(get(rule, k)),
                &format!("if '*' is present, must not specify other {what}"),
            ));
        }
        if k == "apiVersions" {
            for (i, v) in list.iter().enumerate() {
                if v.as_str().unwrap_or("").is_empty() {
                    errs.push(FieldError::required(idx(&kp, i), ""));
                }
            }
        }
    }
    resources(errs, get(rule, "resources"), &child(p, "resources"));
    if let Some(scope) = get(rule, "scope").and_then(Value::as_str) {
        if !SCOPES.contains(&scope) {
            errs.push(FieldError::not_supported(
                child(p, "scope"),
                &jstr(scope),
                SCOPES,
            ));
        }
    }
}

/// `validateResources`: `resource`, `resource/subresource`, and the wildcard forms `*`,
/// `*/*`, `resource/*`, `*/subresource`, without overlaps.
fn resources(errs: &mut Errs, list: Option<&Value>, p: &str) {
    let items: Vec<&str> = list
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().unwrap_or("")).collect())
        .unwrap_or_default();
    if items.is_empty() {
        errs.push(FieldError::required(p, ""));
    }
    let mut wildcard_sub_of = BTreeSet::new();
    let mut wildcard_res_for = BTreeSet::new();
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, item) in items.iter().enumerate() {
        if item.is_empty() {
            errs.push(FieldError::required(idx(p, i), ""));
            continue;
        }
        double |= *item == "*/*";
        single |= *item == "*";
        let Some((res, sub)) = item.split_once('/') else {
            plain = *item != "*";
            continue;
        };
        if wildcard_sub_of.contains(res) {
            errs.push(FieldError::invalid(
                idx(p, i),
                &jstr(item),
                &format!("if '{res}/*' is present, must not specify {item}"),
            ));
        }
        if wildcard_res_for.contains(sub) {
            errs.push(FieldError::invalid(
                idx(p, i),
                &jstr(item),
                &format!("if '*/{sub}' is present, must not specify {item}"),
            ));
        }
        if sub == "*" {
            wildcard_sub_of.insert(res);
        }
        if res == "*" {
            wildcard_res_for.insert(sub);
        }
    }
    if items.len() > 1 && double {
        errs.push(FieldError::invalid_shown(
            p,
            &gofmt::string_slice(list),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single && plain {
        errs.push(FieldError::invalid_shown(
            p,
            &gofmt::string_slice(list),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
}

/// Match conditions: named, unique, with an expression (not compiled: capstan has no CEL).
pub(super) fn match_conditions(errs: &mut Errs, conds: &[Value], p: &str) {
    if conds.len() > MAX_MATCH_CONDITIONS {
        errs.push(FieldError::too_many(p, conds.len(), MAX_MATCH_CONDITIONS));
    }
    let mut seen = BTreeSet::new();
    for (i, c) in conds.iter().enumerate() {
        let cp = idx(p, i);
        if s(c, "expression").trim().is_empty() {
            errs.push(FieldError::required(child(&cp, "expression"), ""));
        }
        let name = s(c, "name");
        if name.is_empty() {
            errs.push(FieldError::required(child(&cp, "name"), ""));
        } else {
            super::qualified(errs, name, &child(&cp, "name"));
            if !seen.insert(name) {
                errs.push(FieldError::duplicate(child(&cp, "name"), &jstr(name)));
            }
        }
    }
}
