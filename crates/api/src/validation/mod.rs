//! Kubernetes v1.32 validation of built-in objects in their v1 JSON form, with Kubernetes'
//! field paths and messages. [`validate`] checks a new object (after defaulting),
//! [`validate_update`] an update against the stored object (immutable fields, then the new
//! object as a whole, as the API server's update strategies do).
//!
//! Kinds without specific rules get the ObjectMeta checks only.

// Kubernetes' validators read as one `if` per rule inside a switch; keep that shape.
#![allow(clippy::collapsible_match)]

pub(crate) mod admissionregistration;
mod apps;
mod batch;
mod certificates;
mod claims;
mod container;
mod core;
pub mod cron;
pub(crate) mod gofmt;
pub mod meta;
pub mod names;
mod networking;
mod other;
mod pod;
mod pod_update;
pub mod quantity;
mod rbac;
mod resources;
mod service;
mod storage;
mod volume;

use serde_json::{Map, Value};

use crate::catalogue;
use crate::field::FieldError;

pub(crate) type Errs = Vec<FieldError>;

/// Every volume source field of a pod volume.
pub const VOLUME_SOURCES: &[&str] = volume::SOURCES;

/// A name rule: `(name, is_generate_name_prefix) -> problems`.
pub type NameFn = fn(&str, bool) -> Vec<String>;

/// Validate a new object of `group`/`kind` (after defaulting). Empty means valid.
pub fn validate(group: &str, kind: &str, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let namespaced = is_namespaced(group, kind);
    let name_fn = name_rule(group, kind);
    let md = obj.get("metadata");
    match (group, kind) {
        ("", "Pod") => pod::validate_pod(&mut errs, obj),
        ("", "PodTemplate") => {
            meta::object_meta(&mut errs, md, true, name_fn, "metadata");
            pod::template_spec(&mut errs, obj.get("template"), "template");
        }
        ("", "ReplicationController") => {
            meta::object_meta(&mut errs, md, true, name_fn, "metadata");
            apps::rc_spec(&mut errs, obj);
        }
        ("", "Service") => service::validate(&mut errs, obj),
        ("", "Binding") => core::binding(&mut errs, obj),
        ("", "ComponentStatus") => {}
        ("", "Event") => core::event(&mut errs, obj, false),
        ("", _) => {
            meta::object_meta(&mut errs, md, namespaced, name_fn, "metadata");
            core::validate(&mut errs, kind, obj);
        }
        ("apps", _) => {
            meta::object_meta(&mut errs, md, namespaced, name_fn, "metadata");
            apps::validate(&mut errs, kind, obj);
        }
        ("batch", _) => {
            meta::object_meta(&mut errs, md, namespaced, name_fn, "metadata");
            batch::validate(&mut errs, kind, obj);
        }
        ("networking.k8s.io", _) => {
            meta::object_meta(&mut errs, md, namespaced, name_fn, "metadata");
            networking::validate(&mut errs, kind, obj);
        }
        ("rbac.authorization.k8s.io", _) => {
            meta::object_meta(&mut errs, md, namespaced, name_fn, "metadata");
            rbac::validate(&mut errs, kind, obj);
        }
        ("storage.k8s.io", _) => {
            meta::object_meta(&mut errs, md, namespaced, name_fn, "metadata");
            storage::validate(&mut errs, kind, obj);
        }
        ("admissionregistration.k8s.io", _) => {
            meta::object_meta(&mut errs, md, namespaced, name_fn, "metadata");
            admissionregistration::validate(&mut errs, kind, obj, None);
        }
        _ => {
            meta::object_meta(&mut errs, md, namespaced, name_fn, "metadata");
            other::validate(&mut errs, group, kind, obj);
        }
    }
    errs
}

/// Validate an update of `old` to `new` (both after defaulting): ObjectMeta rules, the kind's
/// immutable fields, then the new object itself.
pub fn validate_update(group: &str, kind: &str, new: &Value, old: &Value) -> Vec<FieldError> {
    validate_subresource_update(group, kind, "", new, old)
}

/// [`validate_update`] of a write to `subresource` (`""` for the main resource): a
/// CertificateSigningRequest's `approval` may add Approved/Denied conditions and its `status`
/// may set the certificate, which no other write may; other kinds validate every write alike.
pub fn validate_subresource_update(
    group: &str,
    kind: &str,
    subresource: &str,
    new: &Value,
    old: &Value,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if (group, kind) == ("certificates.k8s.io", "CertificateSigningRequest") {
        certificates::validate_update(&mut errs, new, old, subresource);
        return errs;
    }
    meta::object_meta_update(
        &mut errs,
        new.get("metadata"),
        old.get("metadata"),
        "metadata",
    );
    if (group, kind) == ("events.k8s.io", "Event") {
        // Kubernetes' ValidateEventUpdate: not the creation rules again.
        core::event_update_v1(&mut errs, new, old);
        return errs;
    }
    if group == "admissionregistration.k8s.io" {
        // Updates keep to the rules the stored object already met (webhook configurations
        // written under older, laxer rules stay writable), not the creation rules.
        let mut new_errs = Vec::new();
        let md = new.get("metadata");
        meta::object_meta(&mut new_errs, md, false, name_rule(group, kind), "metadata");
        new_errs.retain(|e| e.field != "metadata.name" && e.field != "metadata.generateName");
        admissionregistration::validate(&mut new_errs, kind, new, Some(old));
        add_unique(&mut errs, new_errs);
        return errs;
    }
    if (group, kind, subresource) == ("", "Pod", "status") {
        // Kubernetes' pod status strategy: the metadata and what a status write may change,
        // not the spec it cannot.
        let mut meta_errs = Vec::new();
        let md = new.get("metadata");
        meta::object_meta(&mut meta_errs, md, true, name_rule(group, kind), "metadata");
        meta_errs.retain(|e| e.field != "metadata.name" && e.field != "metadata.generateName");
        add_unique(&mut errs, meta_errs);
        pod_update::pod_status_update(&mut errs, new, old);
        return errs;
    }
    match group {
        "" => match kind {
            "Pod" => pod_update::pod_update(&mut errs, new, old),
            "Service" => service::validate_update(&mut errs, new, old),
            _ => core::validate_update(&mut errs, kind, new, old),
        },
        "apps" => apps::validate_update(&mut errs, kind, new, old),
        "batch" => batch::validate_update(&mut errs, kind, new, old),
        "storage.k8s.io" => storage::validate_update(&mut errs, kind, new, old),
        "rbac.authorization.k8s.io" => rbac::validate_update(&mut errs, kind, new, old),
        "networking.k8s.io" => networking::validate_update(&mut errs, kind, new, old),
        _ => other::validate_update(&mut errs, group, kind, new, old),
    }
    let mut new_errs = validate(group, kind, new);
    // Updates never re-report the name rules the object was created with, only the rest.
    new_errs.retain(|e| e.field != "metadata.name" && e.field != "metadata.generateName");
    if group == "batch" && kind == "CronJob" {
        cron::relax_tz_on_update(&mut new_errs, new, old);
    }
    add_unique(&mut errs, new_errs);
    errs
}

/// Append the errors `errs` does not already report (an update's checks of the new object
/// repeat some of the update rules' findings).
fn add_unique(errs: &mut Errs, more: Vec<FieldError>) {
    for e in more {
        if !errs.contains(&e) {
            errs.push(e);
        }
    }
}

/// The rule names of `group`/`kind` follow, as Kubernetes' `ValidateObjectMeta` applies it.
pub fn name_rule(group: &str, kind: &str) -> NameFn {
    match (group, kind) {
        ("", "Namespace") => names::name_is_dns_label,
        ("", "Service") => names::name_is_dns1035_label,
        ("rbac.authorization.k8s.io", _) => names::name_is_path_segment,
        ("certificates.k8s.io", _) => names::name_is_anything,
        _ => names::name_is_dns_subdomain,
    }
}

/// The problems with `name` for `group`/`kind` (what the registry checks before storing).
pub fn validate_name(group: &str, kind: &str, name: &str) -> Vec<String> {
    name_rule(group, kind)(name, false)
}

fn is_namespaced(group: &str, kind: &str) -> bool {
    catalogue::RESOURCES
        .iter()
        .find(|r| r.group == group && r.kind == kind)
        .is_none_or(|r| r.namespaced)
}

// ---- small helpers shared by the validators ----

/// `parent.child` (just `child` at the root).
pub(crate) fn child(p: &str, c: &str) -> String {
    if p.is_empty() {
        c.to_string()
    } else {
        joined(&[p, ".", c])
    }
}

/// `parent[i]`.
pub(crate) fn idx(p: &str, i: usize) -> String {
    // Every field of every pod passes through these paths, errors or not: built by hand,
    // not through `format!`'s machinery.
    let mut buf = [0u8; 20];
    joined(&[p, "[", crate::meta::decimal(i as u64, &mut buf), "]"])
}

/// `parent[key]`.
pub(crate) fn key(p: &str, k: &str) -> String {
    joined(&[p, "[", k, "]"])
}

fn joined(parts: &[&str]) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        s.push_str(p);
    }
    s
}

/// A field that is present and not null.
pub(crate) fn get<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    v.get(k).filter(|x| !x.is_null())
}

/// A string field ("" when missing or not a string).
pub(crate) fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// An array field (empty when missing).
pub(crate) fn arr<'a>(v: &'a Value, k: &str) -> &'a [Value] {
    v.get(k)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// An object field.
pub(crate) fn obj<'a>(v: &'a Value, k: &str) -> Option<&'a Map<String, Value>> {
    v.get(k).and_then(Value::as_object)
}

/// An integer field.
pub(crate) fn int(v: &Value, k: &str) -> Option<i64> {
    v.get(k).and_then(Value::as_i64)
}

/// A boolean field that is `true`.
pub(crate) fn flag(v: &Value, k: &str) -> bool {
    v.get(k).and_then(Value::as_bool) == Some(true)
}

/// `ValidateNonnegativeField` on an optional integer.
pub(crate) fn nonneg(errs: &mut Errs, value: Option<i64>, path: &str) {
    if let Some(n) = value {
        if n < 0 {
            errs.push(FieldError::invalid(
                path,
                &Value::from(n),
                "must be greater than or equal to 0",
            ));
        }
    }
}

/// Values of a string-to-string map field.
pub(crate) fn str_map<'a>(v: &'a Value, k: &str) -> Vec<(&'a str, &'a str)> {
    obj(v, k)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default()
}

/// A JSON string value.
pub(crate) fn jstr(s: &str) -> Value {
    Value::String(s.to_string())
}

/// `ValidateDNS1123Label` as field errors.
pub(crate) fn dns_label(errs: &mut Errs, value: &str, path: &str) {
    for msg in names::dns1123_label(value) {
        errs.push(FieldError::invalid(path, &jstr(value), &msg));
    }
}

/// `ValidateDNS1123Subdomain` as field errors.
pub(crate) fn dns_subdomain(errs: &mut Errs, value: &str, path: &str) {
    for msg in names::dns1123_subdomain(value) {
        errs.push(FieldError::invalid(path, &jstr(value), &msg));
    }
}

/// `ValidateQualifiedName` as field errors.
pub(crate) fn qualified(errs: &mut Errs, value: &str, path: &str) {
    for msg in names::qualified_name(value) {
        errs.push(FieldError::invalid(path, &jstr(value), &msg));
    }
}

/// Apply a name rule to a referenced name, as field errors.
pub(crate) fn name_ref(errs: &mut Errs, rule: NameFn, value: &str, path: &str) {
    for msg in rule(value, false) {
        errs.push(FieldError::invalid(path, &jstr(value), &msg));
    }
}

/// An `Unsupported value` check of an enum string field that is required.
pub(crate) fn required_enum(errs: &mut Errs, value: &str, path: &str, supported: &[&str]) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
    } else if !supported.contains(&value) {
        errs.push(FieldError::not_supported(path, &jstr(value), supported));
    }
}

/// Whether two optional JSON values are equal, treating null as missing.
pub(crate) fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    a.filter(|v| !v.is_null()) == b.filter(|v| !v.is_null())
}

#[cfg(test)]
mod tests;
