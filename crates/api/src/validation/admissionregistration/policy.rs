//! Validating admission policies and their bindings.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    match_conditions, optional_enum, rule_with_operations, FAILURE_POLICIES, MATCH_POLICIES,
};
use crate::field::FieldError;
use crate::meta::At as _;
use crate::validation::{arr, child, get, gofmt, idx, jstr, meta, names, s, Errs};

const VALIDATION_ACTIONS: &[&str] = &["Audit", "Deny", "Warn"];
const VALIDATION_REASONS: &[&str] = &["Forbidden", "Invalid", "RequestEntityTooLarge"];
const MAX_AUDIT_ANNOTATIONS: usize = 20;
const MAX_AUDIT_VALUE_EXPRESSION: usize = 5 * 1024;

/// A ValidatingAdmissionPolicy.
pub(super) fn policy(errs: &mut Errs, o: &Value) {
    policy_spec(errs, o, get(o, "spec").unwrap_or(&Value::Null), "spec");
}

/// A ValidatingAdmissionPolicyBinding.
pub(super) fn binding(errs: &mut Errs, o: &Value) {
    binding_spec(errs, get(o, "spec").unwrap_or(&Value::Null), "spec");
}

fn policy_spec(errs: &mut Errs, o: &Value, spec: &Value, p: &str) {
    match get(spec, "failurePolicy").and_then(Value::as_str) {
        None => errs.push(FieldError::required(child(p, "failurePolicy"), "")),
        Some(v) if !FAILURE_POLICIES.contains(&v) => errs.push(FieldError::not_supported(
            child(p, "failurePolicy"),
            &jstr(v),
            FAILURE_POLICIES,
        )),
        Some(_) => {}
    }
    if let Some(pk) = get(spec, "paramKind") {
        param_kind(errs, pk, &child(p, "paramKind"));
    }
    match get(spec, "matchConstraints") {
        None => errs.push(FieldError::required(child(p, "matchConstraints"), "")),
        Some(mc) => {
            let mp = child(p, "matchConstraints");
            match_resources(errs, mc, &mp);
            if arr(mc, "resourceRules").is_empty() {
                errs.push(FieldError::required(child(&mp, "resourceRules"), ""));
            }
        }
    }
    match_conditions(
        errs,
        arr(spec, "matchConditions"),
        &child(p, "matchConditions"),
    );
    for (i, v) in arr(spec, "variables").iter().enumerate() {
        variable(errs, v, &idx(&child(p, "variables"), i));
    }
    let validations = arr(spec, "validations");
    let audits = arr(spec, "auditAnnotations");
    if validations.is_empty() && audits.is_empty() {
        for k in ["validations", "auditAnnotations"] {
            errs.push(FieldError::required(
                child(p, k),
                "validations or auditAnnotations must contain at least one item",
            ));
        }
        return;
    }
    for (i, v) in validations.iter().enumerate() {
        validation(errs, v, &idx(&child(p, "validations"), i));
    }
    let ap = child(p, "auditAnnotations");
    if audits.len() > MAX_AUDIT_ANNOTATIONS {
        errs.push(FieldError::invalid_shown(
            &ap,
            "[]admissionregistration.AuditAnnotation{...}",
            &format!("must not have more than {MAX_AUDIT_ANNOTATIONS} auditAnnotations"),
        ));
    }
    let policy_name = o.at("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let mut keys = BTreeSet::new();
    for (i, a) in audits.iter().enumerate() {
        let p = idx(&ap, i);
        audit_annotation(errs, policy_name, a, &p);
        let key = s(a, "key");
        if !keys.insert(key) {
            errs.push(FieldError::duplicate(child(&p, "key"), &jstr(key)));
        }
    }
}

fn param_kind(errs: &mut Errs, pk: &Value, p: &str) {
    let api_version = s(pk, "apiVersion");
    let vp = child(p, "apiVersion");
    if api_version.is_empty() {
        errs.push(FieldError::required(&vp, ""));
    } else if api_version.matches('/').count() > 1 {
        errs.push(FieldError::invalid(
            &vp,
            &jstr(api_version),
            &format!("unexpected GroupVersion string: {api_version}"),
        ));
    } else {
        let (group, version) = match api_version {
            "/" => ("", ""),
            gv => gv.split_once('/').unwrap_or(("", gv)),
        };
        if !group.is_empty() {
            let problems = names::dns1123_subdomain(group);
            if !problems.is_empty() {
                errs.push(FieldError::invalid(&vp, &jstr(group), &problems.join(",")));
            }
        }
        if version.is_empty() {
            errs.push(FieldError::invalid(
                &vp,
                &jstr(api_version),
                "version must be specified",
            ));
        } else {
            let problems = names::dns1035_label(version);
            if !problems.is_empty() {
                errs.push(FieldError::invalid(
                    &vp,
                    &jstr(version),
                    &problems.join(","),
                ));
            }
        }
    }
    let kind = s(pk, "kind");
    if kind.is_empty() {
        errs.push(FieldError::required(child(p, "kind"), ""));
    } else {
        let problems = names::dns1035_label(&kind.to_lowercase());
        if !problems.is_empty() {
            errs.push(FieldError::invalid(
                child(p, "kind"),
                &jstr(kind),
                &format!(
                    "may have mixed case, but should otherwise match: {}",
                    problems.join(",")
                ),
            ));
        }
    }
}

/// `validateMatchResources`: selectors and match policy (defaulted, so present unless a
/// client cleared them), and each rule.
fn match_resources(errs: &mut Errs, mc: &Value, p: &str) {
    match get(mc, "matchPolicy").and_then(Value::as_str) {
        None => errs.push(FieldError::required(child(p, "matchPolicy"), "")),
        Some(v) if !MATCH_POLICIES.contains(&v) => errs.push(FieldError::not_supported(
            child(p, "matchPolicy"),
            &jstr(v),
            MATCH_POLICIES,
        )),
        Some(_) => {}
    }
    for k in ["namespaceSelector", "objectSelector"] {
        match get(mc, k) {
            None => errs.push(FieldError::required(child(p, k), "")),
            Some(sel) => meta::label_selector(errs, Some(sel), &child(p, k)),
        }
    }
    for k in ["resourceRules", "excludeResourceRules"] {
        for (i, r) in arr(mc, k).iter().enumerate() {
            named_rule(errs, r, &idx(&child(p, k), i));
        }
    }
}

fn named_rule(errs: &mut Errs, r: &Value, p: &str) {
    let np = child(p, "resourceNames");
    let mut seen = BTreeSet::new();
    for (i, n) in arr(r, "resourceNames").iter().enumerate() {
        let n = n.as_str().unwrap_or("");
        for msg in names::path_segment_name(n) {
            errs.push(FieldError::invalid(idx(&np, i), &jstr(n), &msg));
        }
        if !seen.insert(n) {
            errs.push(FieldError::duplicate(idx(&np, i), &jstr(n)));
        }
    }
    rule_with_operations(errs, r, p);
}

fn variable(errs: &mut Errs, v: &Value, p: &str) {
    let name = s(v, "name");
    if name.trim().is_empty() {
        errs.push(FieldError::required(
            child(p, "name"),
            "name is not specified",
        ));
    } else if !is_cel_identifier(name) {
        errs.push(FieldError::invalid(
            child(p, "name"),
            &jstr(name),
            "name is not a valid CEL identifier",
        ));
    }
    if s(v, "expression").trim().is_empty() {
        errs.push(FieldError::required(
            child(p, "expression"),
            "expression is not specified",
        ));
    }
}

const CEL_RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

fn is_cel_identifier(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
        && !CEL_RESERVED.contains(&name)
}

fn validation(errs: &mut Errs, v: &Value, p: &str) {
    if s(v, "expression").trim().is_empty() {
        errs.push(FieldError::required(
            child(p, "expression"),
            "expression is not specified",
        ));
    }
    let message_expression = s(v, "messageExpression");
    if !message_expression.is_empty() && message_expression.trim().is_empty() {
        errs.push(FieldError::invalid(
            child(p, "messageExpression"),
            &jstr(message_expression),
            "must be non-empty if specified",
        ));
    }
    let message = s(v, "message");
    if !message.is_empty() && message.trim().is_empty() {
        errs.push(FieldError::invalid(
            child(p, "message"),
            &jstr(message),
            "message must be non-empty if specified",
        ));
    } else if message.trim().contains(['\n', '\r']) {
        errs.push(FieldError::invalid(
            child(p, "message"),
            &jstr(message),
            "message must not contain line breaks",
        ));
    }
    optional_enum(errs, v, "reason", p, VALIDATION_REASONS);
}

fn audit_annotation(errs: &mut Errs, policy_name: &str, a: &Value, p: &str) {
    let key = s(a, "key");
    if policy_name.is_empty() {
        errs.push(FieldError::invalid(
            child(p, "key"),
            &jstr(key),
            "requires metadata.name be non-empty",
        ));
    } else {
        crate::validation::qualified(errs, &format!("{policy_name}/{key}"), &child(p, "key"));
    }
    let value = s(a, "valueExpression").trim();
    if value.is_empty() {
        errs.push(FieldError::required(
            child(p, "valueExpression"),
            "valueExpression is not specified",
        ));
    } else if value.len() > MAX_AUDIT_VALUE_EXPRESSION {
        errs.push(FieldError::required(
            child(p, "valueExpression"),
            &format!("must not exceed {MAX_AUDIT_VALUE_EXPRESSION} bytes in length"),
        ));
    }
}

fn binding_spec(errs: &mut Errs, spec: &Value, p: &str) {
    let policy = s(spec, "policyName");
    if policy.is_empty() {
        errs.push(FieldError::required(child(p, "policyName"), ""));
    } else {
        crate::validation::dns_subdomain(errs, policy, &child(p, "policyName"));
    }
    if let Some(pr) = get(spec, "paramRef") {
        param_ref(errs, pr, &child(p, "paramRef"));
    }
    if let Some(mr) = get(spec, "matchResources") {
        // Kubernetes reports these under this (misspelt) path.
        match_resources(errs, mr, &child(p, "matchResouces"));
    }
    validation_actions(
        errs,
        get(spec, "validationActions"),
        &child(p, "validationActions"),
    );
}

fn param_ref(errs: &mut Errs, pr: &Value, p: &str) {
    let name = s(pr, "name");
    let sel = get(pr, "selector");
    if !name.is_empty() {
        for msg in names::path_segment_name(name) {
            errs.push(FieldError::invalid(child(p, "name"), &jstr(name), &msg));
        }
        if sel.is_some() {
            errs.push(FieldError::forbidden(
                child(p, "name"),
                "name and selector are mutually exclusive",
            ));
        }
    }
    if let Some(sel) = sel {
        meta::label_selector(errs, Some(sel), &child(p, "selector"));
        if !name.is_empty() {
            errs.push(FieldError::forbidden(
                child(p, "selector"),
                "name and selector are mutually exclusive",
            ));
        }
    }
    if name.is_empty() && sel.is_none() {
        errs.push(FieldError::required(
            p,
            "one of name or selector must be specified",
        ));
    }
    match s(pr, "parameterNotFoundAction") {
        "" => errs.push(FieldError::required(
            child(p, "parameterNotFoundAction"),
            "",
        )),
        "Allow" | "Deny" => {}
        other => errs.push(FieldError::not_supported(
            child(p, "parameterNotFoundAction"),
            &jstr(other),
            &["Deny", "Allow"],
        )),
    }
}

fn validation_actions(errs: &mut Errs, list: Option<&Value>, p: &str) {
    let mut seen = BTreeSet::new();
    for (i, a) in list
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .enumerate()
    {
        let a = a.as_str().unwrap_or("");
        if !VALIDATION_ACTIONS.contains(&a) {
            errs.push(FieldError::not_supported(
                idx(p, i),
                &jstr(a),
                VALIDATION_ACTIONS,
            ));
        }
        if !seen.insert(a) {
            errs.push(FieldError::duplicate(idx(p, i), &jstr(a)));
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        errs.push(FieldError::invalid_shown(
            p,
            &gofmt::typed_string_slice("admissionregistration.ValidationAction", list),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if seen.is_empty() {
        errs.push(FieldError::required(
            p,
            "at least one validation action is required",
        ));
    }
}
