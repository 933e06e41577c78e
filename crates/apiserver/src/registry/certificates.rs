//! What Kubernetes' CertificateSigningRequest strategies do to writes of the `status` and
//! `approval` subresources (`csrStatusStrategy`, `csrApprovalStrategy`): approval changes only
//! the conditions, status keeps the Approved/Denied conditions as they are stored (so
//! approving and issuing stay separate concerns), and both stamp the conditions' times.

use capstan_api::meta;
use capstan_api::meta::At as _;
use serde_json::{Map, Value};

/// Whether `(group, kind)` is CertificateSigningRequest.
pub fn is_csr(group: &str, kind: &str) -> bool {
    group == "certificates.k8s.io" && kind == "CertificateSigningRequest"
}

/// The status a write to `approval` stores: the stored status with the written conditions.
pub fn approval_status(written: Option<&Value>, old: &Value) -> Value {
    let mut status = old
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    match written
        .and_then(|s| s.get("conditions"))
        .filter(|c| !c.is_null())
    {
        Some(c) => status.insert("conditions".into(), c.clone()),
        None => status.remove("conditions"),
    };
    Value::Object(status)
}

/// After the write's status has replaced the stored one (`new` is otherwise the stored
/// object): for `status`, put back the stored Approved and Denied conditions (when the write
/// kept as many of each; adding or removing them is left to validation to refuse); for both,
/// stamp the conditions' times.
pub fn prepare(subresource: &str, new: &mut Value, old: &Value) {
    let now = meta::format_time(std::time::SystemTime::now());
    prepare_at(subresource, new, old, &now);
}

fn prepare_at(subresource: &str, new: &mut Value, old: &Value, now: &str) {
    if subresource == "status" {
        for t in ["Approved", "Denied"] {
            preserve_conditions(new, old, t);
        }
    }
    populate_condition_times(new, old, now);
}

fn conditions(v: &Value) -> &[Value] {
    v.at("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn conditions_mut(v: &mut Value) -> Option<&mut Vec<Value>> {
    v.pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
}

fn type_of(c: &Value) -> &str {
    c.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Kubernetes' `preserveConditionInstances`: the stored conditions of type `t` replace the
/// written ones, in place, when there are as many.
fn preserve_conditions(new: &mut Value, old: &Value, t: &str) {
    let was: Vec<Value> = conditions(old)
        .iter()
        .filter(|c| type_of(c) == t)
        .cloned()
        .collect();
    let Some(now) = conditions_mut(new) else {
        return;
    };
    let at: Vec<usize> = (0..now.len()).filter(|&i| type_of(&now[i]) == t).collect();
    if at.len() != was.len() {
        return;
    }
    for (i, c) in at.into_iter().zip(was) {
        now[i] = c;
    }
}

fn is_zero_time(c: &Map<String, Value>, field: &str) -> bool {
    c.get(field)
        .is_none_or(|v| v.is_null() || v.as_str() == Some(""))
}

/// Kubernetes' `populateConditionTimestamps`: a condition without `lastUpdateTime` gets now;
/// one without `lastTransitionTime` gets the stored one of a condition of the same type and
/// status, else now.
fn populate_condition_times(new: &mut Value, old: &Value, now: &str) {
    let stored: Vec<(String, String, Value)> = conditions(old)
        .iter()
        .filter_map(|c| {
            let m = c.as_object()?;
            if is_zero_time(m, "lastTransitionTime") {
                return None;
            }
            Some((
                type_of(c).to_string(),
                c.get("status").and_then(Value::as_str)?.to_string(),
                m.get("lastTransitionTime")?.clone(),
            ))
        })
        .collect();
    let Some(list) = conditions_mut(new) else {
        return;
    };
    for c in list.iter_mut() {
        let Some(m) = c.as_object_mut() else {
            continue;
        };
        if is_zero_time(m, "lastUpdateTime") {
            m.insert("lastUpdateTime".into(), Value::from(now));
        }
        if is_zero_time(m, "lastTransitionTime") {
            let t = m.get("type").and_then(Value::as_str).unwrap_or("");
            let s = m.get("status").and_then(Value::as_str).unwrap_or("");
            let when = stored
                .iter()
                .find(|(st, ss, _)| st == t && ss == s)
                .map(|(_, _, when)| when.clone())
                .unwrap_or_else(|| Value::from(now));
            m.insert("lastTransitionTime".into(), when);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2030-01-01T00:00:00Z";

    #[test]
    fn approval_changes_only_the_conditions() {
        let old = json!({"spec": {"signerName": "a/b"}, "status": {"certificate": "Y2VydA==",
            "conditions": [{"type": "Failed", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
        let written = json!({"certificate": "b3RoZXI=", "conditions": [
            {"type": "Failed", "status": "True"},
            {"type": "Approved", "status": "True", "lastUpdateTime": "2024-02-02T00:00:00Z"}]});
        let mut new = old.clone();
        new["status"] = approval_status(Some(&written), &old);
        prepare_at("approval", &mut new, &old, NOW);
        assert_eq!(new["status"]["certificate"], "Y2VydA==");
        let c = &new["status"]["conditions"];
        assert_eq!(c[0]["lastTransitionTime"], "2024-01-01T00:00:00Z");
        assert_eq!(c[0]["lastUpdateTime"], "2030-01-01T00:00:00Z");
        assert_eq!(c[1]["lastUpdateTime"], "2024-02-02T00:00:00Z");
        assert_eq!(c[1]["lastTransitionTime"], "2030-01-01T00:00:00Z");
    }

    #[test]
    fn status_keeps_the_stored_approval() {
        let approved = json!({"type": "Approved", "status": "True", "reason": "KubectlApprove"});
        let old = json!({"status": {"conditions": [approved.clone()]}});
        let mut new = json!({"status": {"conditions": [
            {"type": "Approved", "status": "True", "reason": "Forged"},
            {"type": "Failed", "status": "True"}]}});
        prepare_at("status", &mut new, &old, NOW);
        assert_eq!(new["status"]["conditions"][0]["reason"], "KubectlApprove");
        assert_eq!(new["status"]["conditions"][1]["type"], "Failed");
    }
}
