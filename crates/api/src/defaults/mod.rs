//! Kubernetes v1.32 defaulting of built-in objects in their v1 JSON form: what the API server
//! fills in on every decode (`SetDefaults_*` and the generated defaulters), so that stored
//! objects read back as `kubectl get -o yaml` shows them on a real cluster.
//!
//! [`apply`] runs on every write body (create, update, patch results). [`prepare_for_create`]
//! and [`prepare_for_update`] are the spec-level parts of Kubernetes' registry strategies that
//! are not defaulting proper (a Namespace's `kubernetes` finalizer, a Job's generated selector,
//! a Service keeping its allocated clusterIP).

mod admissionregistration;
mod core;
mod other;
mod pod;
mod workloads;

use serde_json::{json, Map, Value};

pub use pod::image_tag;
pub use workloads::TEMPLATE_GENERATION;

/// Apply Kubernetes' defaults to `obj` of `group`/`kind` in place.
pub fn apply(group: &str, kind: &str, obj: &mut Value) {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    match group {
        "" => core::apply(kind, m),
        "apps" | "batch" => workloads::apply(kind, m),
        "admissionregistration.k8s.io" => admissionregistration::apply(kind, m),
        _ => other::apply(group, kind, &api_version, m),
    }
    let micro_times: &[&str] = match (group, kind) {
        ("coordination.k8s.io", "Lease") => &["/spec/acquireTime", "/spec/renewTime"],
        ("" | "events.k8s.io", "Event") => &["/eventTime", "/series/lastObservedTime"],
        _ => &[],
    };
    for p in micro_times {
        if let Some(v) = obj.pointer_mut(p) {
            normalize_micro_time(v);
        }
    }
}

/// A metav1.MicroTime as Kubernetes stores it: UTC, exactly six fractional digits (clients may
/// send nanoseconds or another offset; Kubernetes decodes and re-encodes the time).
fn normalize_micro_time(v: &mut Value) {
    let Some(nanos) = v.as_str().and_then(crate::table::duration::parse_rfc3339) else {
        return;
    };
    let secs = nanos.div_euclid(1_000_000_000);
    let micros = nanos.rem_euclid(1_000_000_000) / 1000;
    let Ok(secs) = u64::try_from(secs) else {
        return;
    };
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    let base = crate::meta::format_time(t);
    *v = Value::String(format!("{}.{micros:06}Z", &base[..base.len() - 1]));
}

/// Registry-strategy changes on create that Kubernetes makes to the spec (not defaults: they
/// must not be re-applied on update). `obj` must already carry its `metadata.uid` and name.
///
/// - Namespace: `spec.finalizers` gains `kubernetes`.
/// - Job: unless `spec.manualSelector`, the selector and template labels are generated from
///   the uid and name (`batch.kubernetes.io/controller-uid` ...); the Job's own labels default
///   to the template's.
/// - DaemonSet: the template generation annotation
///   (`deprecated.daemonset.template.generation`) starts at "1".
pub fn prepare_for_create(group: &str, kind: &str, obj: &mut Value) {
    match (group, kind) {
        ("", "Namespace") => {
            let Some(m) = obj.as_object_mut() else {
                return;
            };
            let spec = ensure_obj(m, "spec");
            let fins = spec.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(list) = fins.as_array_mut() {
                if !list.iter().any(|f| f == "kubernetes") {
                    list.push(json!("kubernetes"));
                }
            } else {
                *fins = json!(["kubernetes"]);
            }
        }
        ("batch", "Job") => workloads::generate_job_selector(obj),
        ("apps", "DaemonSet") => workloads::daemon_set_generation_on_create(obj),
        _ => {}
    }
}

/// Registry-strategy changes on update: values the server allocated or owns that a client
/// replacing the object may leave out are carried over from `old`.
///
/// - Service: `clusterIP`/`clusterIPs`, `ipFamilies`, `ipFamilyPolicy`, node ports and
///   `healthCheckNodePort` when the new object leaves them empty.
/// - Namespace: `spec.finalizers` (changed only through `finalize`).
/// - CertificateSigningRequest: `spec` (immutable, reset rather than rejected).
/// - Job: the generated selector and template labels when left out.
/// - DaemonSet: the template generation annotation is the stored one, incremented when
///   `spec.template` changes (compared after defaulting).
pub fn prepare_for_update(group: &str, kind: &str, new: &mut Value, old: &Value) {
    match (group, kind) {
        ("", "Service") => core::service_carry_over(new, old),
        ("", "Namespace") => copy_path(new, old, "spec", "finalizers"),
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            if let (Some(m), Some(spec)) = (new.as_object_mut(), old.get("spec")) {
                m.insert("spec".into(), spec.clone());
            }
        }
        ("batch", "Job") => workloads::carry_job_selector(new, old),
        ("apps", "DaemonSet") => workloads::daemon_set_generation_on_update(new, old),
        _ => {}
    }
}

/// Registry-strategy changes on a write to the status subresource (`new` already carries the
/// stored spec): what the main resource's strategy derives from the spec stays as stored.
///
/// - DaemonSet: the template generation annotation.
pub fn prepare_for_status_update(group: &str, kind: &str, new: &mut Value, old: &Value) {
    if (group, kind) == ("apps", "DaemonSet") {
        workloads::daemon_set_keep_generation(new, old);
    }
}

fn copy_path(new: &mut Value, old: &Value, parent: &str, field: &str) {
    let Some(m) = new.as_object_mut() else {
        return;
    };
    let p = ensure_obj(m, parent);
    match old.get(parent).and_then(|o| o.get(field)) {
        Some(v) => {
            p.insert(field.into(), v.clone());
        }
        None => {
            p.remove(field);
        }
    }
}

// ---- helpers ----

/// Insert `value` at `key` when it is missing or null.
pub(crate) fn set_default(m: &mut Map<String, Value>, key: &str, value: Value) {
    match m.get(key) {
        Some(v) if !v.is_null() => {}
        _ => {
            m.insert(key.to_string(), value);
        }
    }
}

/// The object at `key`, created (or replacing a non-object) when needed.
pub(crate) fn ensure_obj<'a>(
    m: &'a mut Map<String, Value>,
    key: &str,
) -> &'a mut Map<String, Value> {
    let v = m.entry(key.to_string()).or_insert_with(|| json!({}));
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("just made an object")
}

/// `SetDefaults_ResourceList`: quantities rounded up to milli-units, in canonical spelling.
pub(crate) fn normalize_resource_list(m: &mut Map<String, Value>) {
    for v in m.values_mut() {
        if let Some(n) = crate::validation::quantity::normalize_resource(v) {
            *v = n;
        }
    }
}

/// A missing `status` as Go serializes the zero status (fields without `omitempty`).
pub(crate) fn zero_status(m: &mut Map<String, Value>, status: Value) {
    set_default(m, "status", status);
}

#[cfg(test)]
mod tests;
