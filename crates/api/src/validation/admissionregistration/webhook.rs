//! Mutating and validating webhook configurations.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    match_conditions, optional_enum, rule_with_operations, FAILURE_POLICIES, MATCH_POLICIES,
};
use crate::field::FieldError;
use crate::validation::{arr, child, get, gofmt, idx, int, jstr, meta, names, s, Errs};

const ACCEPTED_REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];
const ALL_SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun", "Some", "Unknown"];
const NO_SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun"];
const REINVOCATION_POLICIES: &[&str] = &["IfNeeded", "Never"];

/// What a webhook configuration must satisfy. New objects get the strict rules; an update
/// keeps to the rules the stored object already met, so objects written by older servers stay
/// writable (Kubernetes' `validationOptions`).
#[derive(Debug, Clone, Copy)]
struct Opts {
    require_no_side_effects: bool,
    require_recognized_review_version: bool,
    require_unique_names: bool,
    allow_invalid_label_value_in_selector: bool,
}

impl Opts {
    const STRICT: Opts = Opts {
        require_no_side_effects: true,
        require_recognized_review_version: true,
        require_unique_names: true,
        allow_invalid_label_value_in_selector: false,
    };

    /// The rules an update of a configuration whose stored form is `old` must meet.
    fn for_update(old: &Value) -> Opts {
        let hooks = arr(old, "webhooks");
        let mut seen = BTreeSet::new();
        Opts {
            require_no_side_effects: hooks
                .iter()
                .all(|h| NO_SIDE_EFFECTS.contains(&s(h, "sideEffects"))),
            require_recognized_review_version: hooks.iter().all(|h| {
                let versions = arr(h, "admissionReviewVersions");
                versions.is_empty()
                    || versions
                        .iter()
                        .any(|v| ACCEPTED_REVIEW_VERSIONS.contains(&v.as_str().unwrap_or("")))
            }),
            require_unique_names: hooks.iter().all(|h| seen.insert(s(h, "name"))),
            allow_invalid_label_value_in_selector: hooks.iter().any(|h| {
                ["namespaceSelector", "objectSelector"].iter().any(|k| {
                    let mut errs = Vec::new();
                    meta::label_selector(&mut errs, get(h, k), "");
                    !errs.is_empty()
                })
            }),
        }
    }
}

/// A webhook configuration; `old` is the stored one on update.
pub(super) fn configuration(errs: &mut Errs, o: &Value, mutating: bool, old: Option<&Value>) {
    let opts = old.map_or(Opts::STRICT, Opts::for_update);
    let mut seen = BTreeSet::new();
    for (i, hook) in arr(o, "webhooks").iter().enumerate() {
        let p = idx("webhooks", i);
        webhook(errs, hook, mutating, opts, &p);
        review_versions(
            errs,
            get(hook, "admissionReviewVersions"),
            opts.require_recognized_review_version,
            &child(&p, "admissionReviewVersions"),
        );
        let name = s(hook, "name");
        if opts.require_unique_names && !name.is_empty() && !seen.insert(name) {
            errs.push(FieldError::duplicate(child(&p, "name"), &jstr(name)));
        }
    }
}

fn webhook(errs: &mut Errs, h: &Value, mutating: bool, opts: Opts, p: &str) {
    fully_qualified_name(errs, s(h, "name"), &child(p, "name"));
    for (i, rule) in arr(h, "rules").iter().enumerate() {
        rule_with_operations(errs, rule, &idx(&child(p, "rules"), i));
    }
    optional_enum(errs, h, "failurePolicy", p, FAILURE_POLICIES);
    optional_enum(errs, h, "matchPolicy", p, MATCH_POLICIES);
    let allowed = if opts.require_no_side_effects {
        NO_SIDE_EFFECTS
    } else {
        ALL_SIDE_EFFECTS
    };
    match get(h, "sideEffects").and_then(Value::as_str) {
        None => errs.push(FieldError::required(
            child(p, "sideEffects"),
            &format!("must specify one of {}", allowed.join(", ")),
        )),
        Some(v) if !allowed.contains(&v) => errs.push(FieldError::not_supported(
            child(p, "sideEffects"),
            &jstr(v),
            allowed,
        )),
        Some(_) => {}
    }
    if let Some(t) = int(h, "timeoutSeconds").filter(|t| !(1..=30).contains(t)) {
        errs.push(FieldError::invalid(
            child(p, "timeoutSeconds"),
            &Value::from(t),
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    for k in ["namespaceSelector", "objectSelector"] {
        selector(errs, get(h, k), &child(p, k), opts);
    }
    if mutating {
        optional_enum(errs, h, "reinvocationPolicy", p, REINVOCATION_POLICIES);
    }
    client_config(errs, h.get("clientConfig").unwrap_or(&Value::Null), p);
    match_conditions(
        errs,
        arr(h, "matchConditions"),
        &child(p, "matchConditions"),
    );
}

/// `metav1validation.ValidateLabelSelector`, optionally tolerating label values the stored
/// object already had wrong.
fn selector(errs: &mut Errs, sel: Option<&Value>, p: &str, opts: Opts) {
    let mut found = Vec::new();
    meta::label_selector(&mut found, sel, p);
    if opts.allow_invalid_label_value_in_selector {
        found.retain(|e| !(e.field.contains(".values[") && e.reason == "FieldValueInvalid"));
    }
    errs.extend(found);
}

/// `IsFullyQualifiedName`: a DNS subdomain of at least three segments.
fn fully_qualified_name(errs: &mut Errs, name: &str, p: &str) {
    if name.is_empty() {
        errs.push(FieldError::required(p, ""));
        return;
    }
    let problems = names::dns1123_subdomain(name);
    if !problems.is_empty() {
        errs.push(FieldError::invalid(p, &jstr(name), &problems.join(",")));
    } else if name.split('.').count() < 3 {
        errs.push(FieldError::invalid(
            p,
            &jstr(name),
            "should be a domain with at least three segments separated by dots",
        ));
    }
}

fn review_versions(errs: &mut Errs, versions: Option<&Value>, require_known: bool, p: &str) {
    let list: Vec<&str> = versions
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().unwrap_or("")).collect())
        .unwrap_or_default();
    if list.is_empty() {
        errs.push(FieldError::required(
            p,
            &format!(
                "must specify one of {}",
                ACCEPTED_REVIEW_VERSIONS.join(", ")
            ),
        ));
        return;
    }
    let mut seen = BTreeSet::new();
    let mut known = false;
    for (i, v) in list.iter().enumerate() {
        if !seen.insert(*v) {
            errs.push(FieldError::invalid(
                idx(p, i),
                &jstr(v),
                "duplicate version",
            ));
            continue;
        }
        for msg in names::dns1035_label(v) {
            errs.push(FieldError::invalid(idx(p, i), &jstr(v), &msg));
        }
        known |= ACCEPTED_REVIEW_VERSIONS.contains(v);
    }
    if require_known && !known {
        errs.push(FieldError::invalid_shown(
            p,
            &gofmt::string_slice(versions),
            &format!(
                "must include at least one of {}",
                ACCEPTED_REVIEW_VERSIONS.join(", ")
            ),
        ));
    }
}

fn client_config(errs: &mut Errs, cc: &Value, p: &str) {
    let cp = child(p, "clientConfig");
    match (get(cc, "url"), get(cc, "service")) {
        (Some(_), Some(_)) | (None, None) => errs.push(FieldError::required(
            &cp,
            "exactly one of url or service is required",
        )),
        (Some(url), None) => webhook_url(errs, url.as_str().unwrap_or(""), &child(&cp, "url")),
        (None, Some(svc)) => webhook_service(errs, svc, &child(&cp, "service")),
    }
}

/// The parts of a URL the checks look at, as Go's `url.Parse` splits it.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct UrlParts<'a> {
    pub scheme: &'a str,
    pub user: Option<&'a str>,
    pub host: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub fragment: &'a str,
}

/// Split `url` as `net/url.Parse` does (`url.ParseRequestURI` when `request`: no fragment,
/// and a relative reference must be an absolute path), or say why Go would not parse it.
pub(crate) fn parse_url(url: &str, request: bool) -> Result<UrlParts<'_>, String> {
    if url.chars().any(|c| (c as u32) < 0x20 || c as u32 == 0x7f) {
        return Err(format!(
            "parse {}: net/url: invalid control character in URL",
            crate::field::go_quote(url)
        ));
    }
    if request && url.is_empty() {
        return Err(format!("parse {}: empty url", crate::field::go_quote(url)));
    }
    let (rest, fragment) = if request {
        (url, "")
    } else {
        url.split_once('#').unwrap_or((url, ""))
    };
    let mut parts = UrlParts {
        fragment,
        ..Default::default()
    };
    let rest = match rest.find(':') {
        Some(0) => {
            return Err(format!(
                "parse {}: missing protocol scheme",
                crate::field::go_quote(url)
            ))
        }
        Some(i)
            if rest.as_bytes()[0].is_ascii_alphabetic()
                && rest[..i]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')) =>
        {
            parts.scheme = &rest[..i];
            &rest[i + 1..]
        }
        _ => rest,
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    parts.query = query;
    if request && parts.scheme.is_empty() && !rest.starts_with('/') {
        return Err(format!(
            "parse {}: invalid URI for request",
            crate::field::go_quote(url)
        ));
    }
    if let Some(after) = rest.strip_prefix("//") {
        let (authority, path) = match after.find('/') {
            Some(i) => (&after[..i], &after[i..]),
            None => (after, ""),
        };
        parts.path = path;
        match authority.rsplit_once('@') {
            Some((user, host)) => {
                parts.user = Some(user);
                parts.host = host;
            }
            None => parts.host = authority,
        }
    } else {
        parts.path = rest;
    }
    Ok(parts)
}

/// `webhook.ValidateWebhookURL` with https forced.
pub(crate) fn webhook_url(errs: &mut Errs, url: &str, p: &str) {
    const FORM: &str = "; desired format: https://host[/path]";
    let u = match parse_url(url, false) {
        Ok(u) => u,
        Err(e) => {
            errs.push(FieldError::required(
                p,
                &format!("url must be a valid URL: {e}{FORM}"),
            ));
            return;
        }
    };
    if u.scheme != "https" {
        errs.push(FieldError::invalid(
            p,
            &jstr(u.scheme),
            &format!("'https' is the only allowed URL scheme{FORM}"),
        ));
    }
    if u.host.is_empty() {
        errs.push(FieldError::invalid(
            p,
            &jstr(u.host),
            &format!("host must be specified{FORM}"),
        ));
    }
    if let Some(user) = u.user {
        errs.push(FieldError::invalid(
            p,
            &jstr(user),
            "user information is not permitted in the URL",
        ));
    }
    if !u.fragment.is_empty() {
        errs.push(FieldError::invalid(
            p,
            &jstr(u.fragment),
            "fragments are not permitted in the URL",
        ));
    }
    if !u.query.is_empty() {
        errs.push(FieldError::invalid(
            p,
            &jstr(u.query),
            "query parameters are not permitted in the URL",
        ));
    }
}

/// `webhook.ValidateWebhookService`. Kubernetes passes the service's name where the check
/// expects its namespace and the other way round, so a missing name is reported on
/// `namespace` and a missing namespace on `name`; capstan reports them the same way.
pub(crate) fn webhook_service(errs: &mut Errs, svc: &Value, p: &str) {
    if s(svc, "namespace").is_empty() {
        errs.push(FieldError::required(
            child(p, "name"),
            "service name is required",
        ));
    }
    if s(svc, "name").is_empty() {
        errs.push(FieldError::required(
            child(p, "namespace"),
            "service namespace is required",
        ));
    }
    // Defaulted to 443.
    let port = int(svc, "port").unwrap_or(443);
    let problems = names::port_num(port);
    if !problems.is_empty() {
        errs.push(FieldError::invalid(
            child(p, "port"),
            &Value::from(port),
            &format!("port is not valid: {}", problems.join(", ")),
        ));
    }
    let Some(path) = get(svc, "path").and_then(Value::as_str) else {
        return;
    };
    if path.is_empty() || path == "/" {
        return;
    }
    let pp = child(p, "path");
    if path == "//" {
        errs.push(FieldError::invalid(
            &pp,
            &jstr(path),
            "segment[0] may not be empty",
        ));
        return;
    }
    if !path.starts_with('/') {
        errs.push(FieldError::invalid(
            &pp,
            &jstr(path),
            "must start with a '/'",
        ));
    }
    let inner = path.get(1..).unwrap_or("");
    let inner = inner.strip_suffix('/').unwrap_or(inner);
    for (i, step) in inner.split('/').enumerate() {
        if step.is_empty() {
            errs.push(FieldError::invalid(
                &pp,
                &jstr(path),
                &format!("segment[{i}] may not be empty"),
            ));
            continue;
        }
        for msg in names::dns1123_subdomain(step) {
            errs.push(FieldError::invalid(
                &pp,
                &jstr(path),
                &format!("segment[{i}]: {msg}"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_as_go_does() {
        let u = parse_url("https://user:pw@hook.example.com:8443/v?x=1#f", false).unwrap();
        assert_eq!(
            u,
            UrlParts {
                scheme: "https",
                user: Some("user:pw"),
                host: "hook.example.com:8443",
                path: "/v",
                query: "x=1",
                fragment: "f",
            }
        );
        let u = parse_url("hook.example.com/x", false).unwrap();
        assert_eq!((u.scheme, u.host, u.path), ("", "", "hook.example.com/x"));
        assert!(parse_url("://x", false)
            .unwrap_err()
            .ends_with("missing protocol scheme"));
    }
}
