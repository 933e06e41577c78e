//! Pod updates (`ValidatePodUpdate`): the spec is immutable except container images,
//! activeDeadlineSeconds (only down), tolerations (only additions), scheduling gates (only
//! removals) and a few relaxations.

use serde_json::{Map, Value};

use super::{arr, child, get, idx, int, jstr, s, Errs};
use crate::field::FieldError;
use crate::meta::At as _;

const UPDATABLE: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// `ValidatePodUpdate` (metadata update rules are checked by the caller).
pub fn pod_update(errs: &mut Errs, new: &Value, old: &Value) {
    let ns = new.get("spec").unwrap_or(&Value::Null);
    let os = old.get("spec").unwrap_or(&Value::Null);
    annotation_updates(errs, new, old);
    for list in ["containers", "initContainers"] {
        let (n, o) = (arr(ns, list), arr(os, list));
        let p = format!("spec.{list}");
        if n.len() != o.len() {
            errs.push(FieldError::forbidden(
                p,
                "pod updates may not add or remove containers",
            ));
            return;
        }
        for (i, c) in n.iter().enumerate() {
            let image = s(c, "image");
            if image.is_empty() {
                errs.push(FieldError::required(child(&idx(&p, i), "image"), ""));
            }
            if image.trim() != image {
                errs.push(FieldError::invalid(
                    child(&idx(&p, i), "image"),
                    &jstr(image),
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    match (
        int(ns, "activeDeadlineSeconds"),
        int(os, "activeDeadlineSeconds"),
    ) {
        (Some(n), old_ads) => {
            if !(0..=i32::MAX as i64).contains(&n) {
                errs.push(FieldError::invalid(
                    "spec.activeDeadlineSeconds",
                    &Value::from(n),
                    &super::names::inclusive_range_error(0, i32::MAX as i64),
                ));
                return;
            }
            if old_ads.is_some_and(|o| o < n) {
                errs.push(FieldError::invalid(
                    "spec.activeDeadlineSeconds",
                    &Value::from(n),
                    "must be less than or equal to previous value",
                ));
                return;
            }
        }
        (None, Some(_)) => errs.push(FieldError::invalid_shown(
            "spec.activeDeadlineSeconds",
            "\"null\"",
            "must not update from a positive integer to nil value",
        )),
        (None, None) => {}
    }
    only_added_tolerations(errs, arr(ns, "tolerations"), arr(os, "tolerations"));
    let old_gates: Vec<&str> = arr(os, "schedulingGates")
        .iter()
        .map(|g| s(g, "name"))
        .collect();
    for (i, g) in arr(ns, "schedulingGates").iter().enumerate() {
        if !old_gates.contains(&s(g, "name")) {
            errs.push(FieldError::forbidden(
                format!("spec.schedulingGates[{i}].name"),
                &format!(
                    "only deletion is allowed, but found new scheduling gate '{}'",
                    s(g, "name")
                ),
            ));
        }
    }
    if ns == os {
        return;
    }
    let mut munged = ns.clone();
    if let Some(m) = munged.as_object_mut() {
        for list in ["containers", "initContainers"] {
            if let Some(cs) = m.get_mut(list).and_then(Value::as_array_mut) {
                for (i, c) in cs.iter_mut().enumerate() {
                    if let (Some(c), Some(img)) = (
                        c.as_object_mut(),
                        arr(os, list).get(i).and_then(|o| o.get("image")),
                    ) {
                        c.insert("image".into(), img.clone());
                    }
                }
            }
        }
        for f in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
            copy(m, os, f);
        }
        let old_grace = int(os, "terminationGracePeriodSeconds");
        if old_grace.is_some_and(|g| g < 0) && int(ns, "terminationGracePeriodSeconds") == Some(1) {
            copy(m, os, "terminationGracePeriodSeconds");
        }
        if !arr(os, "schedulingGates").is_empty() {
            gated_node_selector(errs, m, os);
            if get(ns, "affinity").and_then(|a| a.get("nodeAffinity"))
                != get(os, "affinity").and_then(|a| a.get("nodeAffinity"))
            {
                if let Some(a) = m.get_mut("affinity").and_then(Value::as_object_mut) {
                    match get(os, "affinity").and_then(|a| a.get("nodeAffinity")) {
                        Some(na) => {
                            a.insert("nodeAffinity".into(), na.clone());
                        }
                        None => {
                            a.remove("nodeAffinity");
                        }
                    }
                    if a.is_empty() && get(os, "affinity").is_none() {
                        m.remove("affinity");
                    }
                }
            }
        }
    }
    if munged != *os {
        errs.push(FieldError::forbidden(
            "spec",
            &format!("{UPDATABLE}\n{}", diff(os, &munged)),
        ));
    }
}

fn copy(m: &mut Map<String, Value>, from: &Value, f: &str) {
    match get(from, f) {
        Some(v) => {
            m.insert(f.into(), v.clone());
        }
        None => {
            m.remove(f);
        }
    }
}

fn gated_node_selector(errs: &mut Errs, m: &mut Map<String, Value>, os: &Value) {
    let new_sel = m
        .get("nodeSelector")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let old_sel = super::obj(os, "nodeSelector").cloned().unwrap_or_default();
    if new_sel == old_sel {
        return;
    }
    for (k, v) in &old_sel {
        if new_sel.get(k) != Some(v) {
            errs.push(FieldError::invalid_shown(
                "spec.nodeSelector",
                &super::gofmt::string_map(m.get("nodeSelector")),
                "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
            ));
            break;
        }
    }
    copy(m, os, "nodeSelector");
}

fn only_added_tolerations(errs: &mut Errs, new: &[Value], old: &[Value]) {
    let strip = |t: &Value| {
        let mut t = t.clone();
        if let Some(m) = t.as_object_mut() {
            m.remove("tolerationSeconds");
        }
        t
    };
    for o in old {
        let o = strip(o);
        if !new.iter().any(|n| strip(n) == o) {
            errs.push(FieldError::forbidden(
                "spec.tolerations",
                "existing toleration can not be modified except its tolerationSeconds",
            ));
            return;
        }
    }
}

fn annotation_updates(errs: &mut Errs, new: &Value, old: &Value) {
    let empty = Map::new();
    let na = new
        .at("/metadata/annotations")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let oa = old
        .at("/metadata/annotations")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    const MIRROR: &str = "kubernetes.io/config.mirror";
    let path = super::key("metadata.annotations", MIRROR);
    match (na.get(MIRROR), oa.get(MIRROR)) {
        (n, Some(o)) if n != Some(o) => errs.push(FieldError::forbidden(
            path,
            "may not remove or update mirror pod annotation",
        )),
        (Some(_), None) => errs.push(FieldError::forbidden(
            path,
            "may not add mirror pod annotation",
        )),
        _ => {}
    }
}

/// A short description of what changed between two specs (Kubernetes prints a full
/// `cmp.Diff` of the internal PodSpec here).
fn diff(old: &Value, new: &Value) -> String {
    let mut lines = vec!["  core.PodSpec{".to_string()];
    let empty = Map::new();
    let (o, n) = (
        old.as_object().unwrap_or(&empty),
        new.as_object().unwrap_or(&empty),
    );
    let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        if o.get(k) != n.get(k) {
            if let Some(v) = o.get(k) {
                lines.push(format!("- \t{k}: {v},"));
            }
            if let Some(v) = n.get(k) {
                lines.push(format!("+ \t{k}: {v},"));
            }
        }
    }
    lines.push("  }".to_string());
    lines.join("\n") + "\n"
}

/// `ValidatePodStatusUpdate` (metadata update rules are checked by the caller): a status write
/// cannot change the spec (the status strategy keeps the old one), so the spec is not
/// validated again; what is checked is what the write may change.
pub fn pod_status_update(errs: &mut Errs, new: &Value, old: &Value) {
    annotation_updates(errs, new, old);
    let empty = Value::Null;
    let status = new.get("status").unwrap_or(&empty);
    let old_status = old.get("status").unwrap_or(&empty);
    // System conditions aside, a condition's type is a qualified name (reported under
    // `metadata`, as Kubernetes does).
    for (i, c) in arr(status, "conditions").iter().enumerate() {
        let t = s(c, "type");
        if ["PodScheduled", "Ready", "Initialized"].contains(&t) {
            continue;
        }
        for msg in super::names::qualified_name(t) {
            errs.push(FieldError::invalid(
                format!("metadata.conditions[{i}].Type"),
                &jstr(t),
                &msg,
            ));
        }
    }
    if new.at("/spec/nodeName") != old.at("/spec/nodeName") {
        errs.push(FieldError::forbidden(
            "status.nodeName",
            "may not be changed directly",
        ));
    }
    let nominated = s(status, "nominatedNodeName");
    if !nominated.is_empty() && nominated != s(old_status, "nominatedNodeName") {
        for msg in super::names::name_is_dns_subdomain(nominated, false) {
            errs.push(FieldError::invalid(
                "status.nominatedNodeName",
                &jstr(nominated),
                &msg,
            ));
        }
    }
    let old_spec = old.get("spec").unwrap_or(&empty);
    let policy = match s(old_spec, "restartPolicy") {
        "" => "Always",
        p => p,
    };
    let restartable_init = |name: &str| {
        arr(old_spec, "initContainers")
            .iter()
            .find(|c| s(c, "name") == name)
            .is_some_and(|c| s(c, "restartPolicy") == "Always")
    };
    for (list, policy) in [
        ("containerStatuses", policy),
        ("initContainerStatuses", policy),
        ("ephemeralContainerStatuses", "Never"),
    ] {
        if policy == "Always" {
            continue;
        }
        let new_statuses = arr(status, list);
        for (i, o) in arr(old_status, list).iter().enumerate() {
            let Some(term) = o.at("/state/terminated") else {
                continue;
            };
            let code = term.get("exitCode").and_then(Value::as_i64).unwrap_or(0);
            if code != 0 && policy == "OnFailure" {
                continue;
            }
            if list == "initContainerStatuses" && restartable_init(s(o, "name")) {
                continue;
            }
            for n in new_statuses {
                if s(n, "name") == s(o, "name") && n.at("/state/terminated").is_none() {
                    errs.push(FieldError::forbidden(
                        format!("status.{list}[{i}].state"),
                        "may not be transitioned to non-terminated state",
                    ));
                }
            }
        }
    }
    for list in ["podIPs", "hostIPs"] {
        ips(errs, arr(status, list), &format!("status.{list}"));
    }
}

/// A pod's IPs (or its host's): each an IP address; more than one only as one per family,
/// none twice.
fn ips(errs: &mut Errs, list: &[Value], path: &str) {
    let addrs: Vec<&str> = list.iter().map(|ip| s(ip, "ip")).collect();
    for (i, ip) in addrs.iter().enumerate() {
        if !super::names::is_ip(ip) {
            errs.push(FieldError::invalid(
                idx(path, i),
                &jstr(ip),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
    }
    if addrs.len() < 2 {
        return;
    }
    let v6 = addrs.iter().filter(|ip| ip.contains(':')).count();
    if addrs.len() > 2 || v6 != 1 {
        errs.push(FieldError::invalid(
            path,
            &Value::Array(list.to_vec()),
            "may specify no more than one IP for each IP family",
        ));
    }
    for (i, ip) in addrs.iter().enumerate() {
        if addrs[..i].contains(ip) {
            errs.push(FieldError::duplicate(idx(path, i), &list[i]));
        }
    }
}
