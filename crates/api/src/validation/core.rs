//! The other core/v1 kinds: ConfigMap, Secret, Namespace, Node, ServiceAccount, Endpoints,
//! Event, LimitRange, ResourceQuota, PersistentVolume(Claim), Binding.

use std::collections::BTreeSet;

use serde_json::Value;

use super::resources::quantity_value;
use super::{
    arr, child, dns_label, get, gofmt, idx, int, jstr, key, meta, names, obj, qualified, s, Errs,
};
use crate::field::FieldError;
use crate::meta::At as _;

/// Kubernetes' limit on Secret and ConfigMap payloads.
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;

pub fn validate(errs: &mut Errs, kind: &str, o: &Value) {
    match kind {
        "ConfigMap" => config_map(errs, o),
        "Secret" => secret(errs, o),
        "Namespace" => {
            for f in arr(o.get("spec").unwrap_or(&Value::Null), "finalizers") {
                let f = f.as_str().unwrap_or("");
                qualified(errs, f, "spec.finalizers");
                meta::kube_finalizer_name(errs, f, "spec.finalizers");
            }
        }
        "Node" => node(errs, o),
        "Endpoints" => endpoints(errs, o),
        "Event" => event(errs, o, false),
        "LimitRange" => super::claims::limit_range(errs, o),
        "ResourceQuota" => super::claims::resource_quota(errs, o),
        "PersistentVolumeClaim" => {
            super::claims::pvc_spec(errs, o.get("spec").unwrap_or(&Value::Null), "spec")
        }
        "PersistentVolume" => super::claims::pv(errs, o),
        _ => {}
    }
}

/// Pods' `binding` subresource body.
pub fn binding(errs: &mut Errs, o: &Value) {
    let t = o.get("target").unwrap_or(&Value::Null);
    let k = s(t, "kind");
    if !k.is_empty() && k != "Node" {
        errs.push(FieldError::not_supported(
            "target.kind",
            &jstr(k),
            &["Node", "<empty>"],
        ));
    }
    if s(t, "name").is_empty() {
        errs.push(FieldError::required("target.name", ""));
    }
}

fn base64_len(s: &str) -> usize {
    let trimmed = s.trim_end_matches('=');
    trimmed.len() * 3 / 4
}

fn config_map(errs: &mut Errs, o: &Value) {
    let mut total = 0;
    let binary = obj(o, "binaryData");
    for (k, v) in super::str_map(o, "data") {
        for m in names::config_map_key(k) {
            errs.push(FieldError::invalid(key("data", k), &jstr(k), &m));
        }
        if binary.is_some_and(|b| b.contains_key(k)) {
            errs.push(FieldError::invalid(
                key("data", k),
                &jstr(k),
                "duplicate of key present in binaryData",
            ));
        }
        total += v.len();
    }
    for (k, v) in super::str_map(o, "binaryData") {
        for m in names::config_map_key(k) {
            errs.push(FieldError::invalid(key("binaryData", k), &jstr(k), &m));
        }
        total += base64_len(v);
    }
    if total > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long("", MAX_SECRET_SIZE));
    }
}

fn secret(errs: &mut Errs, o: &Value) {
    let data = super::str_map(o, "data");
    let mut total = 0;
    for (k, v) in &data {
        for m in names::config_map_key(k) {
            errs.push(FieldError::invalid(key("data", k), &jstr(k), &m));
        }
        total += base64_len(v);
    }
    if total > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long("data", MAX_SECRET_SIZE));
    }
    let has = |k: &str| data.iter().any(|(dk, _)| *dk == k);
    let required = |errs: &mut Errs, k: &str| errs.push(FieldError::required(key("data", k), ""));
    match s(o, "type") {
        "kubernetes.io/service-account-token" => {
            let sa = o
                .at("/metadata/annotations/kubernetes.io~1service-account.name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if sa.is_empty() {
                errs.push(FieldError::required(
                    key("metadata.annotations", "kubernetes.io/service-account.name"),
                    "",
                ));
            }
        }
        "kubernetes.io/dockercfg" => {
            if !has(".dockercfg") {
                required(errs, ".dockercfg");
            }
        }
        "kubernetes.io/dockerconfigjson" => {
            if !has(".dockerconfigjson") {
                required(errs, ".dockerconfigjson");
            }
        }
        "kubernetes.io/basic-auth" => {
            if !has("username") && !has("password") {
                required(errs, "username");
                required(errs, "password");
            }
        }
        "kubernetes.io/ssh-auth" => {
            if data
                .iter()
                .all(|(k, v)| *k != "ssh-privatekey" || v.is_empty())
            {
                required(errs, "ssh-privatekey");
            }
        }
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    required(errs, k);
                }
            }
        }
        _ => {}
    }
}

fn node(errs: &mut Errs, o: &Value) {
    let spec = o.get("spec").unwrap_or(&Value::Null);
    node_taints(errs, arr(spec, "taints"), "metadata.taints");
    node_resources(errs, o);
    let cidrs = arr(spec, "podCIDRs");
    for (i, c) in cidrs.iter().enumerate() {
        let c = c.as_str().unwrap_or("");
        if !names::is_cidr(c) {
            errs.push(FieldError::invalid(
                idx("spec.podCIDRs", i),
                &jstr(c),
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ));
        }
    }
    if cidrs.len() > 1 {
        let mut seen = BTreeSet::new();
        for (i, c) in cidrs.iter().enumerate() {
            if !seen.insert(c.as_str().unwrap_or("")) {
                errs.push(FieldError::duplicate(idx("spec.podCIDRs", i), c));
            }
        }
        let v4 = cidrs
            .iter()
            .filter(|c| !c.as_str().unwrap_or("").contains(':'))
            .count();
        if cidrs.len() > 2 || v4 != 1 {
            errs.push(FieldError::invalid_shown(
                "spec.podCIDRs",
                &gofmt::string_slice(spec.get("podCIDRs")),
                "may specify no more than one CIDR for each IP family",
            ));
        }
    }
}

fn node_resources(errs: &mut Errs, o: &Value) {
    let status = o.get("status").unwrap_or(&Value::Null);
    for f in ["capacity", "allocatable"] {
        if let Some(m) = obj(status, f) {
            for (k, v) in m {
                quantity_value(errs, k, v, &format!("status.{f}.{k}"));
            }
        }
    }
}

/// `validateNodeTaints`.
pub fn node_taints(errs: &mut Errs, taints: &[Value], path: &str) {
    let mut seen = BTreeSet::new();
    for (i, t) in taints.iter().enumerate() {
        let p = idx(path, i);
        meta::label_name(errs, s(t, "key"), &child(&p, "key"));
        let v = s(t, "value");
        let msgs = names::label_value(v);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                child(&p, "value"),
                &jstr(v),
                &msgs.join(";"),
            ));
        }
        super::required_enum(
            errs,
            s(t, "effect"),
            &child(&p, "effect"),
            &["NoSchedule", "PreferNoSchedule", "NoExecute"],
        );
        if !seen.insert((s(t, "effect"), s(t, "key"))) {
            let mut e = FieldError::duplicate_shown(
                &p,
                &format!(
                    "core.Taint{{Key:{}, Value:{}, Effect:{}, TimeAdded:<nil>}}",
                    crate::field::go_quote(s(t, "key")),
                    crate::field::go_quote(v),
                    crate::field::go_quote(s(t, "effect"))
                ),
            );
            e.message
                .push_str(": taints must be unique by key and effect pair");
            errs.push(e);
        }
    }
}

fn endpoints(errs: &mut Errs, o: &Value) {
    for (i, ss) in arr(o, "subsets").iter().enumerate() {
        let p = idx("subsets", i);
        if arr(ss, "addresses").is_empty() && arr(ss, "notReadyAddresses").is_empty() {
            errs.push(FieldError::required(
                &p,
                "must specify `addresses` or `notReadyAddresses`",
            ));
        }
        for list in ["addresses", "notReadyAddresses"] {
            for (j, a) in arr(ss, list).iter().enumerate() {
                let ap = idx(&child(&p, list), j);
                let ip = s(a, "ip");
                if !names::is_ip(ip) {
                    errs.push(FieldError::invalid(
                        child(&ap, "ip"),
                        &jstr(ip),
                        "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    ));
                }
                let h = s(a, "hostname");
                if !h.is_empty() {
                    dns_label(errs, h, &child(&ap, "hostname"));
                }
                if let Some(n) = a.get("nodeName").and_then(Value::as_str) {
                    super::name_ref(
                        errs,
                        names::name_is_dns_subdomain,
                        n,
                        &child(&ap, "nodeName"),
                    );
                }
                super::service::non_special_ip(errs, ip, &child(&ap, "ip"));
            }
        }
        let ports = arr(ss, "ports");
        for (j, port) in ports.iter().enumerate() {
            let pp = idx(&child(&p, "ports"), j);
            let name = s(port, "name");
            if ports.len() > 1 && name.is_empty() {
                errs.push(FieldError::required(child(&pp, "name"), ""));
            } else if !name.is_empty() {
                dns_label(errs, name, &child(&pp, "name"));
            }
            let n = int(port, "port").unwrap_or(0);
            for m in names::port_num(n) {
                errs.push(FieldError::invalid(child(&pp, "port"), &Value::from(n), &m));
            }
            super::required_enum(
                errs,
                s(port, "protocol"),
                &child(&pp, "protocol"),
                &["SCTP", "TCP", "UDP"],
            );
            if let Some(ap) = port.get("appProtocol").and_then(Value::as_str) {
                qualified(errs, ap, &child(&pp, "appProtocol"));
            }
        }
    }
}

/// Core events; `strict` applies the events.k8s.io/v1 creation rules. Fields are named as
/// Kubernetes' internal Event names them (`involvedObject`, `message` ...).
pub fn event(errs: &mut Errs, o: &Value, strict: bool) {
    let (involved, message, source, first, last, count, controller_field) = if strict {
        (
            "regarding",
            "note",
            "deprecatedSource",
            "deprecatedFirstTimestamp",
            "deprecatedLastTimestamp",
            "deprecatedCount",
            "reportingController",
        )
    } else {
        (
            "involvedObject",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "reportingComponent",
        )
    };
    let ns = o
        .at("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let inv_ns = o.get(involved).map(|i| s(i, "namespace")).unwrap_or("");
    let has_event_time = get(o, "eventTime").is_some();
    let not_match = |errs: &mut Errs| {
        errs.push(FieldError::invalid(
            "involvedObject.namespace",
            &jstr(inv_ns),
            "does not match event.namespace",
        ))
    };
    if !has_event_time {
        if inv_ns.is_empty() {
            if !ns.is_empty() && ns != "default" {
                not_match(errs);
            }
        } else if ns != inv_ns {
            not_match(errs);
        }
    } else {
        if inv_ns.is_empty() && ns != "default" && ns != "kube-system" {
            not_match(errs);
        }
        let rc = s(o, controller_field);
        if rc.is_empty() {
            errs.push(FieldError::required(controller_field, ""));
        }
        qualified(errs, rc, controller_field);
        let limit = |errs: &mut Errs, f: &str, shown: &str, max: usize, required: bool| {
            let v = s(o, f);
            if required && v.is_empty() {
                errs.push(FieldError::required(shown, ""));
            }
            if v.len() > max {
                errs.push(FieldError::invalid(
                    shown,
                    &jstr(""),
                    &format!("can have at most {max} characters"),
                ));
            }
        };
        limit(errs, "reportingInstance", "reportingInstance", 128, true);
        limit(errs, "action", "action", 128, true);
        limit(errs, "reason", "reason", 128, true);
        limit(errs, message, "message", 1024, false);
    }
    for m in names::dns1123_subdomain(ns) {
        errs.push(FieldError::invalid("namespace", &jstr(ns), &m));
    }
    if strict {
        if !has_event_time {
            errs.push(FieldError::required("eventTime", ""));
        }
        let t = s(o, "type");
        if t != "Normal" && t != "Warning" {
            errs.push(FieldError::invalid(
                "type",
                &jstr(""),
                &format!("has invalid value: {t}"),
            ));
        }
        for (f, shown) in [(first, "firstTimestamp"), (last, "lastTimestamp")] {
            if get(o, f).is_some() {
                errs.push(FieldError::invalid(shown, &jstr(""), "needs to be unset"));
            }
        }
        if int(o, count).unwrap_or(0) != 0 {
            errs.push(FieldError::invalid("count", &jstr(""), "needs to be unset"));
        }
        if let Some(src) = get(o, source) {
            if !s(src, "component").is_empty() || !s(src, "host").is_empty() {
                errs.push(FieldError::invalid(
                    "source",
                    &jstr(""),
                    "needs to be unset",
                ));
            }
        }
        if let Some(series) = get(o, "series") {
            if int(series, "count").unwrap_or(0) < 2 {
                errs.push(FieldError::invalid(
                    "series.count",
                    &jstr(""),
                    "should be at least 2",
                ));
            }
            if get(series, "lastObservedTime").is_none() {
                errs.push(FieldError::required("series.lastObservedTime", ""));
            }
        }
    }
}

/// An update through events.k8s.io/v1 (Kubernetes' `ValidateEventUpdate`), `new` and `old` in
/// that form: the legacy rules every event passes (with `reportingController` named as this
/// version names it), the series when it changed, and the fields an event keeps for life. The
/// strict rules of creation are not applied again: an event first written through core/v1 may
/// keep its `source`, timestamps and count.
pub fn event_update_v1(errs: &mut Errs, new: &Value, old: &Value) {
    let legacy = crate::convert::events::events_to_core(new.clone());
    let mut found = Vec::new();
    event(&mut found, &legacy, false);
    for mut e in found {
        if e.field == "reportingComponent" {
            e.field = "reportingController".into();
            e.message = e
                .message
                .replacen("reportingComponent", "reportingController", 1);
        }
        errs.push(e);
    }
    if !super::same(new.get("series"), old.get("series")) {
        if let Some(series) = get(new, "series") {
            if int(series, "count").unwrap_or(0) < 2 {
                errs.push(FieldError::invalid(
                    "series.count",
                    &jstr(""),
                    "should be at least 2",
                ));
            }
            if get(series, "lastObservedTime").is_none() {
                errs.push(FieldError::required("series.lastObservedTime", ""));
            }
        }
    }
    for (field, shown) in [
        ("regarding", "involvedObject"),
        ("reason", "reason"),
        ("type", "type"),
        ("eventTime", "eventTime"),
        ("action", "action"),
        ("related", "related"),
        ("reportingController", "reportingController"),
        ("reportingInstance", "reportingInstance"),
    ] {
        let value = |o: &Value| get(o, field).filter(|v| v.as_str() != Some("")).cloned();
        if value(new) != value(old) {
            errs.push(FieldError::invalid(
                shown,
                &value(new).unwrap_or(Value::Null),
                "field is immutable",
            ));
        }
    }
}

/// Update rules of the core kinds other than Pods and Services.
pub fn validate_update(errs: &mut Errs, kind: &str, new: &Value, old: &Value) {
    match kind {
        "ConfigMap" | "Secret" => {
            if kind == "Secret" && s(new, "type") != s(old, "type") {
                errs.push(FieldError::immutable_shown(
                    "type",
                    &crate::field::go_quote(s(new, "type")),
                ));
            }
            if super::flag(old, "immutable") {
                if !super::flag(new, "immutable") {
                    errs.push(FieldError::forbidden(
                        "immutable",
                        "field is immutable when `immutable` is set",
                    ));
                }
                let fields: &[&str] = if kind == "Secret" {
                    &["data"]
                } else {
                    &["data", "binaryData"]
                };
                for f in fields {
                    fn nonempty(v: Option<&Value>) -> Option<&Value> {
                        v.filter(|x| x.as_object().is_some_and(|m| !m.is_empty()))
                    }
                    if nonempty(new.get(*f)) != nonempty(old.get(*f)) {
                        errs.push(FieldError::forbidden(
                            *f,
                            "field is immutable when `immutable` is set",
                        ));
                    }
                }
            }
        }
        "Node" => {
            let (ns, os) = (
                new.get("spec").unwrap_or(&Value::Null),
                old.get("spec").unwrap_or(&Value::Null),
            );
            let (nc, oc) = (arr(ns, "podCIDRs"), arr(os, "podCIDRs"));
            if !oc.is_empty() && nc != oc {
                errs.push(FieldError::forbidden(
                    "spec.podCIDRs",
                    "node updates may not change podCIDR except from \"\" to valid",
                ));
            }
            let op = s(os, "providerID");
            if !op.is_empty() && op != s(ns, "providerID") {
                errs.push(FieldError::forbidden(
                    "spec.providerID",
                    "node updates may not change providerID except from \"\" to valid",
                ));
            }
            if s(ns, "externalID") != s(os, "externalID") {
                errs.push(FieldError::forbidden(
                    "spec.externalID",
                    "may not be updated",
                ));
            }
        }
        "PersistentVolumeClaim" => super::claims::pvc_update(errs, new, old),
        "PersistentVolume" => {
            let strip = |v: &Value| {
                let mut spec = v.get("spec").cloned().unwrap_or(Value::Null);
                if let Some(m) = spec.as_object_mut() {
                    for f in [
                        "accessModes",
                        "capacity",
                        "claimRef",
                        "persistentVolumeReclaimPolicy",
                        "storageClassName",
                        "mountOptions",
                        "volumeMode",
                        "nodeAffinity",
                        "volumeAttributesClassName",
                    ] {
                        m.remove(f);
                    }
                }
                spec
            };
            if strip(new) != strip(old) {
                errs.push(FieldError::forbidden(
                    "spec.persistentvolumesource",
                    "spec.persistentvolumesource is immutable after creation\n",
                ));
            }
            let (nv, ov) = (new.at("/spec/volumeMode"), old.at("/spec/volumeMode"));
            if nv != ov {
                errs.push(FieldError::immutable_shown(
                    "volumeMode",
                    &nv.and_then(Value::as_str)
                        .map_or("\"null\"".into(), crate::field::go_quote),
                ));
            }
            let (na, oa) = (new.at("/spec/nodeAffinity"), old.at("/spec/nodeAffinity"));
            if oa.is_some_and(|v| !v.is_null()) && na != oa {
                errs.push(FieldError::invalid_shown(
                    "nodeAffinity",
                    "&core.VolumeNodeAffinity{...}",
                    "field is immutable",
                ));
            }
        }
        "ResourceQuota" => {
            let set = |v: &Value| -> BTreeSet<String> {
                v.at("/spec/scopes")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            if set(new) != set(old) {
                errs.push(FieldError::immutable_shown(
                    "spec.scopes",
                    &gofmt::typed_string_slice("core.ResourceQuotaScope", new.at("/spec/scopes")),
                ));
            }
        }
        _ => {}
    }
}
