//! The smaller groups: policy (PodDisruptionBudget), scheduling (PriorityClass), coordination
//! (Lease), discovery (EndpointSlice), events.k8s.io (Event) and autoscaling
//! (HorizontalPodAutoscaler v1 and v2); certificates (CSR) are in `certificates.rs`.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{arr, child, dns_label, get, gofmt, idx, int, jstr, meta, names, qualified, s, Errs};
use crate::field::FieldError;
use crate::meta::At as _;

pub fn validate(errs: &mut Errs, group: &str, kind: &str, o: &Value) {
    let spec = o.get("spec").unwrap_or(&Value::Null);
    match (group, kind) {
        ("policy", "PodDisruptionBudget") => pdb(errs, spec),
        ("scheduling.k8s.io", "PriorityClass") => priority_class(errs, o),
        ("coordination.k8s.io", "Lease") => {
            if let Some(d) = int(spec, "leaseDurationSeconds").filter(|d| *d <= 0) {
                errs.push(FieldError::invalid(
                    "spec.leaseDurationSeconds",
                    &Value::from(d),
                    "must be greater than 0",
                ));
            }
            if let Some(t) = int(spec, "leaseTransitions").filter(|t| *t < 0) {
                errs.push(FieldError::invalid(
                    "spec.leaseTransitions",
                    &Value::from(t),
                    "must be greater than or equal to 0",
                ));
            }
        }
        ("discovery.k8s.io", "EndpointSlice") => endpoint_slice(errs, o),
        ("events.k8s.io", "Event") => super::core::event(errs, o, true),
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            super::certificates::validate_new(errs, o)
        }
        ("autoscaling", "HorizontalPodAutoscaler") => hpa(errs, spec),
        _ => {}
    }
}

fn int_or_percent(errs: &mut Errs, v: &Value, path: &str) {
    match v {
        Value::String(s) => {
            for m in names::percent(s) {
                errs.push(FieldError::invalid_shown(
                    path,
                    &gofmt::int_or_string(v),
                    &m,
                ));
            }
            if s.trim_end_matches('%')
                .parse::<i64>()
                .is_ok_and(|p| p > 100)
            {
                errs.push(FieldError::invalid_shown(
                    path,
                    &gofmt::int_or_string(v),
                    "must not be greater than 100%",
                ));
            }
        }
        v => super::nonneg(errs, v.as_i64(), path),
    }
}

fn pdb(errs: &mut Errs, spec: &Value) {
    let (min, max) = (get(spec, "minAvailable"), get(spec, "maxUnavailable"));
    if min.is_some() && max.is_some() {
        errs.push(FieldError::invalid_shown(
            "spec",
            "policy.PodDisruptionBudgetSpec{...}",
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    if let Some(v) = min {
        int_or_percent(errs, v, "spec.minAvailable");
    }
    if let Some(v) = max {
        int_or_percent(errs, v, "spec.maxUnavailable");
    }
    meta::label_selector(errs, get(spec, "selector"), "spec.selector");
    if let Some(p) = spec
        .get("unhealthyPodEvictionPolicy")
        .and_then(Value::as_str)
    {
        if p != "AlwaysAllow" && p != "IfHealthyBudget" {
            errs.push(FieldError::not_supported(
                "spec.unhealthyPodEvictionPolicy",
                &jstr(p),
                &["AlwaysAllow", "IfHealthyBudget"],
            ));
        }
    }
}

const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;

fn priority_class(errs: &mut Errs, o: &Value) {
    let name = o.at("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let value = int(o, "value").unwrap_or(0);
    if name.starts_with("system-") {
        let known = match name {
            "system-node-critical" => Some(2_000_001_000),
            "system-cluster-critical" => Some(2_000_000_000),
            _ => None,
        };
        let err = match known {
            None => Some(format!("{name} is not a known system priority class")),
            Some(v) if v != value => Some(format!("value of {name} PriorityClass must be {v}")),
            Some(_) if super::flag(o, "globalDefault") => Some(format!(
                "globalDefault of {name} PriorityClass must be false"
            )),
            Some(_) => None,
        };
        if let Some(e) = err {
            errs.push(FieldError::forbidden("metadata.name", &format!("priority class names with 'system-' prefix are reserved for system use only. error: {e}")));
        }
    } else if value > HIGHEST_USER_PRIORITY {
        errs.push(FieldError::forbidden(
            "value",
            &format!("maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"),
        ));
    }
    if let Some(p) = o.get("preemptionPolicy").and_then(Value::as_str) {
        super::required_enum(
            errs,
            p,
            "preemptionPolicy",
            &["PreemptLowerPriority", "Never"],
        );
    }
}

fn endpoint_slice(errs: &mut Errs, o: &Value) {
    let at = s(o, "addressType");
    super::required_enum(errs, at, "addressType", &["FQDN", "IPv4", "IPv6"]);
    let eps = arr(o, "endpoints");
    if eps.len() > 1000 {
        errs.push(FieldError::too_many("endpoints", eps.len(), 1000));
    }
    for (i, ep) in eps.iter().enumerate() {
        let p = idx("endpoints", i);
        let ap = child(&p, "addresses");
        let addrs = arr(ep, "addresses");
        if addrs.is_empty() {
            errs.push(FieldError::required(&ap, "must contain at least 1 address"));
        } else if addrs.len() > 100 {
            errs.push(FieldError::too_many(&ap, addrs.len(), 100));
        }
        for (j, a) in addrs.iter().enumerate() {
            let a = a.as_str().unwrap_or("");
            let aip = idx(&ap, j);
            match at {
                "IPv4" | "IPv6" => {
                    let ok = names::parse_ip(a).is_some_and(|ip| ip.is_ipv4() == (at == "IPv4"));
                    if !ok {
                        errs.push(FieldError::invalid(
                            &aip,
                            &jstr(a),
                            &format!("must be a valid {at} address"),
                        ));
                    } else {
                        super::service::non_special_ip(errs, a, &aip);
                    }
                }
                "FQDN" => {
                    let name = a.strip_suffix('.').unwrap_or(a);
                    let msgs = names::dns1123_subdomain(name);
                    if name.is_empty() {
                        errs.push(FieldError::required(&aip, ""));
                    } else if !msgs.is_empty() {
                        errs.push(FieldError::invalid(&aip, &jstr(name), &msgs.join(",")));
                    } else if name.split('.').count() < 2 {
                        errs.push(FieldError::invalid(
                            &aip,
                            &jstr(name),
                            "should be a domain with at least two segments separated by dots",
                        ));
                    }
                }
                _ => {}
            }
        }
        if let Some(n) = ep.get("nodeName").and_then(Value::as_str) {
            super::name_ref(
                errs,
                names::name_is_dns_subdomain,
                n,
                &child(&p, "nodeName"),
            );
        }
        if let Some(h) = ep.get("hostname").and_then(Value::as_str) {
            dns_label(errs, h, &child(&p, "hostname"));
        }
    }
    let ports = arr(o, "ports");
    if ports.len() > 20000 {
        errs.push(FieldError::too_many("ports", ports.len(), 20000));
    }
    let mut seen = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = idx("ports", i);
        let name = s(port, "name");
        if !name.is_empty() {
            dns_label(errs, name, &child(&p, "name"));
        }
        if !seen.insert(name) {
            errs.push(FieldError::duplicate(child(&p, "name"), &jstr(name)));
        }
        if let Some(proto) = port.get("protocol").and_then(Value::as_str) {
            if !["SCTP", "TCP", "UDP"].contains(&proto) {
                errs.push(FieldError::not_supported(
                    child(&p, "protocol"),
                    &jstr(proto),
                    &["SCTP", "TCP", "UDP"],
                ));
            }
        } else {
            errs.push(FieldError::required(child(&p, "protocol"), ""));
        }
        if let Some(ap) = port.get("appProtocol").and_then(Value::as_str) {
            qualified(errs, ap, &child(&p, "appProtocol"));
        }
    }
}

fn hpa(errs: &mut Errs, spec: &Value) {
    let min = int(spec, "minReplicas");
    if let Some(m) = min.filter(|m| *m < 1) {
        errs.push(FieldError::invalid(
            "spec.minReplicas",
            &Value::from(m),
            "must be greater than or equal to 1",
        ));
    }
    let max = int(spec, "maxReplicas").unwrap_or(0);
    if max < 1 {
        errs.push(FieldError::invalid(
            "spec.maxReplicas",
            &Value::from(max),
            "must be greater than 0",
        ));
    }
    if min.is_some_and(|m| max < m) {
        errs.push(FieldError::invalid(
            "spec.maxReplicas",
            &Value::from(max),
            "must be greater than or equal to `minReplicas`",
        ));
    }
    let r = spec.get("scaleTargetRef").unwrap_or(&Value::Null);
    for f in ["kind", "name"] {
        let v = s(r, f);
        let p = format!("spec.scaleTargetRef.{f}");
        if v.is_empty() {
            errs.push(FieldError::required(p, ""));
        } else {
            super::name_ref(errs, names::name_is_path_segment, v, &p);
        }
    }
    if let Some(t) = int(spec, "targetCPUUtilizationPercentage").filter(|t| *t < 1) {
        errs.push(FieldError::invalid(
            "spec.targetCPUUtilizationPercentage",
            &Value::from(t),
            "must be greater than 0",
        ));
    }
    let types = [
        "ContainerResource",
        "External",
        "Object",
        "Pods",
        "Resource",
    ];
    for (i, m) in arr(spec, "metrics").iter().enumerate() {
        let p = idx("spec.metrics", i);
        let t = s(m, "type");
        if t.is_empty() {
            errs.push(FieldError::required(
                child(&p, "type"),
                "must specify a metric source type",
            ));
        } else if !types.contains(&t) {
            errs.push(FieldError::not_supported(
                child(&p, "type"),
                &jstr(t),
                &types,
            ));
        }
        // validateMetricTarget's utilization rule (autoscaling/v1's CPU target lands here).
        for src in ["resource", "containerResource"] {
            let u = get(m, src)
                .and_then(|r| get(r, "target"))
                .and_then(|t| int(t, "averageUtilization"));
            if let Some(u) = u.filter(|u| *u < 1) {
                errs.push(FieldError::invalid(
                    format!("{p}.{src}.target.averageUtilization"),
                    &Value::from(u),
                    "must be greater than 0",
                ));
            }
        }
    }
    if let Some(b) = get(spec, "behavior") {
        for dir in ["scaleUp", "scaleDown"] {
            let Some(rules) = get(b, dir) else {
                continue;
            };
            let p = format!("spec.behavior.{dir}");
            if let Some(w) = int(rules, "stabilizationWindowSeconds") {
                if !(0..=3600).contains(&w) {
                    errs.push(FieldError::invalid(
                        child(&p, "stabilizationWindowSeconds"),
                        &Value::from(w),
                        "must be less than or equal to 3600",
                    ));
                }
            }
            if let Some(sp) = rules.get("selectPolicy").and_then(Value::as_str) {
                let ok = ["Disabled", "Max", "Min"];
                if !ok.contains(&sp) {
                    errs.push(FieldError::not_supported(
                        child(&p, "selectPolicy"),
                        &jstr(sp),
                        &ok,
                    ));
                }
            }
        }
    }
}

pub fn validate_update(errs: &mut Errs, group: &str, kind: &str, new: &Value, old: &Value) {
    match (group, kind) {
        ("scheduling.k8s.io", "PriorityClass") => {
            if new.get("value") != old.get("value") {
                errs.push(FieldError::forbidden(
                    "value",
                    "may not be changed in an update.",
                ));
            }
            if !super::same(new.get("preemptionPolicy"), old.get("preemptionPolicy")) {
                let shown = new
                    .get("preemptionPolicy")
                    .map_or("\"null\"".to_string(), crate::field::show);
                errs.push(FieldError::immutable_shown("preemptionPolicy", &shown));
            }
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            if s(new, "addressType") != s(old, "addressType") {
                errs.push(FieldError::immutable_shown(
                    "addressType",
                    &crate::field::go_quote(s(new, "addressType")),
                ));
            }
        }
        _ => {}
    }
}
