//! networking.k8s.io/v1: Ingress, IngressClass, NetworkPolicy.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{arr, child, get, gofmt, idx, int, jstr, meta, names, s, Errs};
use crate::field::FieldError;
use crate::meta::At as _;

pub fn validate(errs: &mut Errs, kind: &str, o: &Value) {
    let spec = o.get("spec").unwrap_or(&Value::Null);
    match kind {
        "Ingress" => ingress(errs, o, spec),
        "IngressClass" => {
            let c = s(spec, "controller");
            if c.len() > 250 {
                errs.push(FieldError::too_long("spec.controller", 250));
            }
            domain_prefixed_path(errs, c, "spec.controller");
            if let Some(p) = get(spec, "parameters") {
                let pp = "spec.parameters";
                if s(p, "kind").is_empty() {
                    errs.push(FieldError::required(format!("{pp}.kind"), ""));
                }
                if s(p, "name").is_empty() {
                    errs.push(FieldError::required(format!("{pp}.name"), ""));
                }
                match p.get("scope").and_then(Value::as_str) {
                    Some("Namespace") => {
                        if p.get("namespace")
                            .and_then(Value::as_str)
                            .is_none_or(str::is_empty)
                        {
                            errs.push(FieldError::required(
                                format!("{pp}.namespace"),
                                "`parameters.scope` is set to 'Namespace'",
                            ));
                        }
                    }
                    Some("Cluster") | None => {
                        if get(p, "namespace").is_some() {
                            errs.push(FieldError::forbidden(
                                format!("{pp}.namespace"),
                                "`parameters.scope` is set to 'Cluster'",
                            ));
                        }
                    }
                    Some(other) => errs.push(FieldError::not_supported(
                        format!("{pp}.scope"),
                        &jstr(other),
                        &["Cluster", "Namespace"],
                    )),
                }
            }
        }
        "NetworkPolicy" => network_policy(errs, spec),
        _ => {}
    }
}

/// `IsDomainPrefixedPath`.
fn domain_prefixed_path(errs: &mut Errs, v: &str, path: &str) {
    if v.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    let Some((host, rest)) = v
        .split_once('/')
        .filter(|(h, r)| !h.is_empty() && !r.is_empty())
    else {
        errs.push(FieldError::invalid(
            path,
            &jstr(v),
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        ));
        return;
    };
    for m in names::dns1123_subdomain(host) {
        errs.push(FieldError::invalid(path, &jstr(host), &m));
    }
    let ok = rest
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"/-._~%!$&'()*+,;=:".contains(&c));
    if !ok {
        errs.push(FieldError::invalid(
            path,
            &jstr(rest),
            "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')",
        ));
    }
}

fn host(errs: &mut Errs, h: &str, path: &str, allow_ip_error: bool) {
    if allow_ip_error && names::is_ip(h) {
        errs.push(FieldError::invalid(
            path,
            &jstr(h),
            "must be a DNS name, not an IP address",
        ));
    }
    let msgs = if h.starts_with("*.") {
        names::wildcard_dns1123_subdomain(h)
    } else {
        names::dns1123_subdomain(h)
    };
    for m in msgs {
        errs.push(FieldError::invalid(path, &jstr(h), &m));
    }
}

fn backend(errs: &mut Errs, b: &Value, path: &str) {
    match (get(b, "resource"), get(b, "service")) {
        (Some(_), Some(_)) => errs.push(FieldError::invalid(
            path,
            &jstr(""),
            "cannot set both resource and service backends",
        )),
        (Some(r), None) => {
            let rp = child(path, "resource");
            if s(r, "kind").is_empty() {
                errs.push(FieldError::required(child(&rp, "kind"), ""));
            }
            if s(r, "name").is_empty() {
                errs.push(FieldError::required(child(&rp, "name"), ""));
            }
            if r.get("apiGroup")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                errs.push(FieldError::required(child(&rp, "apiGroup"), ""));
            }
        }
        (None, Some(svc)) => {
            let sp = child(path, "service");
            let name = s(svc, "name");
            if name.is_empty() {
                errs.push(FieldError::required(child(&sp, "name"), ""));
            } else {
                super::name_ref(
                    errs,
                    names::name_is_dns1035_label,
                    name,
                    &child(&sp, "name"),
                );
            }
            let port = svc.get("port").unwrap_or(&Value::Null);
            let (pname, pnum) = (s(port, "name"), int(port, "number").unwrap_or(0));
            match (!pname.is_empty(), pnum != 0) {
                (true, true) => errs.push(FieldError::invalid(
                    path,
                    &jstr(""),
                    "cannot set both port name & port number",
                )),
                (true, false) => {
                    for m in names::port_name(pname) {
                        errs.push(FieldError::invalid(
                            format!("{sp}.port.name"),
                            &jstr(pname),
                            &m,
                        ));
                    }
                }
                (false, true) => {
                    for m in names::port_num(pnum) {
                        errs.push(FieldError::invalid(
                            format!("{sp}.port.number"),
                            &Value::from(pnum),
                            &m,
                        ));
                    }
                }
                (false, false) => errs.push(FieldError::required(
                    path,
                    "port name or number is required",
                )),
            }
        }
        (None, None) => errs.push(FieldError::invalid(
            path,
            &jstr(""),
            "resource or service backend is required",
        )),
    }
}

fn ingress(errs: &mut Errs, o: &Value, spec: &Value) {
    let rules = arr(spec, "rules");
    if rules.is_empty() && get(spec, "defaultBackend").is_none() {
        errs.push(FieldError::invalid_shown(
            "spec",
            "[]networking.IngressRule(nil)",
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(b) = get(spec, "defaultBackend") {
        backend(errs, b, "spec.defaultBackend");
    }
    for (i, r) in rules.iter().enumerate() {
        let rp = idx("spec.rules", i);
        let h = s(r, "host");
        if !h.is_empty() {
            host(errs, h, &child(&rp, "host"), true);
        }
        if let Some(http) = get(r, "http") {
            let hp = child(&rp, "http");
            let paths = arr(http, "paths");
            if paths.is_empty() {
                errs.push(FieldError::required(child(&hp, "paths"), ""));
            }
            for (j, p) in paths.iter().enumerate() {
                http_path(errs, p, &idx(&child(&hp, "paths"), j));
            }
        }
    }
    for (i, t) in arr(spec, "tls").iter().enumerate() {
        let tp = idx("spec.tls", i);
        for (j, h) in arr(t, "hosts").iter().enumerate() {
            host(
                errs,
                h.as_str().unwrap_or(""),
                &idx(&child(&tp, "hosts"), j),
                false,
            );
        }
        let secret = s(t, "secretName");
        if !secret.is_empty() {
            super::name_ref(
                errs,
                names::name_is_dns_subdomain,
                secret,
                &child(&tp, "secretName"),
            );
        }
    }
    if let Some(c) = spec.get("ingressClassName").and_then(Value::as_str) {
        super::name_ref(
            errs,
            names::name_is_dns_subdomain,
            c,
            "spec.ingressClassName",
        );
        if let Some(a) = o
            .at("/metadata/annotations/kubernetes.io~1ingress.class")
            .and_then(Value::as_str)
        {
            errs.push(FieldError::invalid(
                "annotations.kubernetes.io/ingress.class",
                &jstr(a),
                "can not be set when the class field is also set",
            ));
        }
    }
}

fn http_path(errs: &mut Errs, p: &Value, path: &str) {
    let pt = s(p, "pathType");
    let v = s(p, "path");
    match pt {
        "" => errs.push(FieldError::required(
            child(path, "pathType"),
            "pathType must be specified",
        )),
        "Exact" | "Prefix" => {
            if !v.starts_with('/') {
                errs.push(FieldError::invalid(
                    child(path, "path"),
                    &jstr(v),
                    "must be an absolute path",
                ));
            }
            if !v.is_empty() {
                for bad in ["//", "/./", "/../", "%2f", "%2F"] {
                    if v.contains(bad) {
                        errs.push(FieldError::invalid(
                            child(path, "path"),
                            &jstr(v),
                            &format!("must not contain '{bad}'"),
                        ));
                    }
                }
                for bad in ["/..", "/."] {
                    if v.ends_with(bad) {
                        errs.push(FieldError::invalid(
                            child(path, "path"),
                            &jstr(v),
                            &format!("cannot end with '{bad}'"),
                        ));
                    }
                }
            }
        }
        "ImplementationSpecific" => {
            if !v.is_empty() && !v.starts_with('/') {
                errs.push(FieldError::invalid(
                    child(path, "path"),
                    &jstr(v),
                    "must be an absolute path",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            child(path, "pathType"),
            &jstr(other),
            &["Exact", "ImplementationSpecific", "Prefix"],
        )),
    }
    backend(
        errs,
        p.get("backend").unwrap_or(&Value::Null),
        &child(path, "backend"),
    );
}

fn np_ports(errs: &mut Errs, ports: &[Value], path: &str) {
    for (i, p) in ports.iter().enumerate() {
        let pp = idx(path, i);
        if let Some(proto) = p.get("protocol").and_then(Value::as_str) {
            if !["SCTP", "TCP", "UDP"].contains(&proto) {
                errs.push(FieldError::not_supported(
                    child(&pp, "protocol"),
                    &jstr(proto),
                    &["SCTP", "TCP", "UDP"],
                ));
            }
        }
        match p.get("port") {
            Some(Value::String(n)) => {
                for m in names::port_name(n) {
                    errs.push(FieldError::invalid(child(&pp, "port"), &jstr(n), &m));
                }
                if get(p, "endPort").is_some() {
                    errs.push(FieldError::forbidden(
                        child(&pp, "endPort"),
                        "may not be specified when `port` is non-numeric",
                    ));
                }
            }
            Some(v) if v.is_number() => {
                let n = v.as_i64().unwrap_or(0);
                for m in names::port_num(n) {
                    errs.push(FieldError::invalid(child(&pp, "port"), &Value::from(n), &m));
                }
                if let Some(e) = int(p, "endPort") {
                    if e < n {
                        errs.push(FieldError::invalid(
                            child(&pp, "endPort"),
                            &Value::from(e),
                            "must be greater than or equal to `port`",
                        ));
                    }
                    for m in names::port_num(e) {
                        errs.push(FieldError::invalid(
                            child(&pp, "endPort"),
                            &Value::from(e),
                            &m,
                        ));
                    }
                }
            }
            _ => {
                if get(p, "endPort").is_some() {
                    errs.push(FieldError::required(
                        child(&pp, "port"),
                        "must be specified when endPort is specified",
                    ));
                }
            }
        }
    }
}

fn np_peers(errs: &mut Errs, peers: &[Value], path: &str) {
    for (i, peer) in peers.iter().enumerate() {
        let pp = idx(path, i);
        let mut n = 0;
        if let Some(sel) = get(peer, "podSelector") {
            n += 1;
            meta::label_selector(errs, Some(sel), &child(&pp, "podSelector"));
        }
        if let Some(sel) = get(peer, "namespaceSelector") {
            n += 1;
            meta::label_selector(errs, Some(sel), &child(&pp, "namespaceSelector"));
        }
        if let Some(ib) = get(peer, "ipBlock") {
            n += 1;
            let ip = child(&pp, "ipBlock");
            let cidr = s(ib, "cidr");
            if cidr.is_empty() {
                errs.push(FieldError::required(child(&ip, "cidr"), ""));
            } else if !names::is_cidr(cidr) {
                errs.push(FieldError::invalid(
                    child(&ip, "cidr"),
                    &jstr(cidr),
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                ));
            }
            for (j, e) in arr(ib, "except").iter().enumerate() {
                let e = e.as_str().unwrap_or("");
                if !names::is_cidr(e) {
                    errs.push(FieldError::invalid(
                        idx(&child(&ip, "except"), j),
                        &jstr(e),
                        "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                    ));
                }
            }
            if n > 1 {
                errs.push(FieldError::forbidden(
                    &pp,
                    "may not specify both ipBlock and another peer",
                ));
            }
        }
        if n == 0 {
            errs.push(FieldError::required(&pp, "must specify a peer"));
        }
    }
}

fn network_policy(errs: &mut Errs, spec: &Value) {
    meta::label_selector(errs, get(spec, "podSelector"), "spec.podSelector");
    for (i, r) in arr(spec, "ingress").iter().enumerate() {
        let rp = idx("spec.ingress", i);
        np_ports(errs, arr(r, "ports"), &child(&rp, "ports"));
        np_peers(errs, arr(r, "from"), &child(&rp, "from"));
    }
    for (i, r) in arr(spec, "egress").iter().enumerate() {
        let rp = idx("spec.egress", i);
        np_ports(errs, arr(r, "ports"), &child(&rp, "ports"));
        np_peers(errs, arr(r, "to"), &child(&rp, "to"));
    }
    let types = arr(spec, "policyTypes");
    let mut seen = BTreeSet::new();
    for (i, t) in types.iter().enumerate() {
        let t = t.as_str().unwrap_or("");
        if t != "Ingress" && t != "Egress" {
            errs.push(FieldError::not_supported(
                idx("spec.policyTypes", i),
                &jstr(t),
                &["Egress", "Ingress"],
            ));
        }
        seen.insert(t);
    }
    if types.len() > 2 {
        errs.push(FieldError::invalid_shown(
            "spec.policyTypes",
            &gofmt::typed_string_slice("networking.PolicyType", spec.get("policyTypes")),
            "may not specify more than two policyTypes",
        ));
    }
}

pub fn validate_update(errs: &mut Errs, kind: &str, new: &Value, old: &Value) {
    if kind == "IngressClass" {
        let (n, o) = (new.at("/spec/controller"), old.at("/spec/controller"));
        if n != o {
            errs.push(FieldError::immutable_shown(
                "spec.controller",
                &crate::field::show(n.unwrap_or(&jstr(""))),
            ));
        }
    }
}
