//! Services (`ValidateService`, `ValidateServiceUpdate`).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    arr, child, dns_label, dns_subdomain, get, gofmt, idx, int, jstr, meta, names, qualified, s,
    Errs,
};
use crate::field::{go_quote, FieldError};
use crate::meta::At as _;

const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
/// The API server's default `--service-node-port-range`.
pub const NODE_PORT_RANGE: (i64, i64) = (30000, 32767);

/// `spec.clusterIPs` as the registry normalizes it: `[clusterIP]` when only clusterIP is set.
fn cluster_ips(spec: &Value) -> Vec<String> {
    let ips: Vec<String> = arr(spec, "clusterIPs")
        .iter()
        .map(|v| v.as_str().unwrap_or("").to_string())
        .collect();
    if ips.is_empty() && !s(spec, "clusterIP").is_empty() {
        return vec![s(spec, "clusterIP").to_string()];
    }
    ips
}

fn is_headless(spec: &Value) -> bool {
    s(spec, "clusterIP") == "None" || cluster_ips(spec).first().is_some_and(|ip| ip == "None")
}

fn externally_accessible(spec: &Value) -> bool {
    let t = s(spec, "type");
    t == "LoadBalancer"
        || t == "NodePort"
        || (t == "ClusterIP" && !arr(spec, "externalIPs").is_empty())
}

fn shown_ips(ips: &[String]) -> String {
    if ips.is_empty() {
        return "[]string(nil)".to_string();
    }
    format!(
        "[]string{{{}}}",
        ips.iter()
            .map(|s| go_quote(s))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// `core.ServicePort{...}` as Go prints the key of a duplicate port.
fn port_key(protocol: &str, port: i64) -> String {
    format!(
        "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), Port:{port}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}",
        go_quote(protocol)
    )
}

/// `ValidateService`.
pub fn validate(errs: &mut Errs, svc: &Value) {
    meta::object_meta(
        errs,
        svc.get("metadata"),
        true,
        names::name_is_dns1035_label,
        "metadata",
    );
    let spec = svc.get("spec").unwrap_or(&Value::Null);
    let t = s(spec, "type");
    let headless = is_headless(spec);
    let ports = arr(spec, "ports");
    if ports.is_empty() && !headless && t != "ExternalName" {
        errs.push(FieldError::required("spec.ports", ""));
    }
    let ips = cluster_ips(spec);
    match t {
        "LoadBalancer" | "NodePort" if headless => {
            errs.push(FieldError::invalid(
                "spec.clusterIPs[0]",
                &jstr("None"),
                &format!("may not be set to 'None' for {t} services"),
            ));
        }
        "ExternalName" => {
            if !ips.is_empty() {
                errs.push(FieldError::forbidden(
                    "spec.clusterIPs",
                    "may not be set for ExternalName services",
                ));
            }
            if !arr(spec, "ipFamilies").is_empty() {
                errs.push(FieldError::forbidden(
                    "spec.ipFamilies",
                    "may not be set for ExternalName services",
                ));
            }
            if get(spec, "ipFamilyPolicy").is_some() {
                errs.push(FieldError::forbidden(
                    "spec.ipFamilyPolicy",
                    "may not be set for ExternalName services",
                ));
            }
            let cname = s(spec, "externalName");
            let cname = cname.strip_suffix('.').unwrap_or(cname);
            if cname.is_empty() {
                errs.push(FieldError::required("spec.externalName", ""));
            } else {
                dns_subdomain(errs, cname, "spec.externalName");
            }
        }
        _ => {}
    }
    let mut port_names = BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        service_port(
            errs,
            p,
            ports.len() > 1,
            &mut port_names,
            &idx("spec.ports", i),
        );
    }
    meta::labels(errs, get(spec, "selector"), "spec.selector");
    let affinity = s(spec, "sessionAffinity");
    super::required_enum(
        errs,
        affinity,
        "spec.sessionAffinity",
        &["ClientIP", "None"],
    );
    if affinity == "ClientIP" {
        match spec.at("/sessionAffinityConfig/clientIP/timeoutSeconds") {
            None | Some(Value::Null) => errs.push(FieldError::required(
                "spec.sessionAffinityConfig",
                "when session affinity type is ClientIP",
            )),
            Some(v) => {
                let n = v.as_i64().unwrap_or(0);
                if n <= 0 || n > 86400 {
                    errs.push(FieldError::invalid(
                        "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                        &Value::from(n),
                        "must be greater than 0 and less than 86400",
                    ));
                }
            }
        }
    } else if affinity == "None" && get(spec, "sessionAffinityConfig").is_some() {
        errs.push(FieldError::forbidden(
            "spec.sessionAffinityConfig",
            "must not be set when session affinity is None",
        ));
    }
    cluster_ip_fields(errs, spec, &ips);
    for (i, ip) in arr(spec, "externalIPs").iter().enumerate() {
        let ip = ip.as_str().unwrap_or("");
        let p = idx("spec.externalIPs", i);
        if !names::is_ip(ip) {
            errs.push(FieldError::invalid(
                p,
                &jstr(ip),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        } else {
            non_special_ip(errs, ip, &p);
        }
    }
    super::required_enum(
        errs,
        t,
        "spec.type",
        &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
    );
    let mut node_ports = BTreeSet::new();
    let mut keys = BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        let pp = idx("spec.ports", i);
        let np = int(p, "nodePort").unwrap_or(0);
        if t == "ClusterIP" && np != 0 {
            errs.push(FieldError::forbidden(
                child(&pp, "nodePort"),
                "may not be used when `type` is 'ClusterIP'",
            ));
        }
        if np != 0 {
            if !node_ports.insert((s(p, "protocol"), np)) {
                errs.push(FieldError::duplicate(
                    child(&pp, "nodePort"),
                    &Value::from(np),
                ));
            }
            if t != "ClusterIP" && !(NODE_PORT_RANGE.0..=NODE_PORT_RANGE.1).contains(&np) {
                errs.push(FieldError::invalid(
                    child(&pp, "nodePort"),
                    &Value::from(np),
                    &format!("provided port is not in the valid range. The range of valid ports is {}-{}", NODE_PORT_RANGE.0, NODE_PORT_RANGE.1),
                ));
            }
        }
        let port = int(p, "port").unwrap_or(0);
        if !keys.insert((s(p, "protocol"), port)) {
            errs.push(FieldError::duplicate_shown(
                &pp,
                &port_key(s(p, "protocol"), port),
            ));
        }
    }
    let ranges = arr(spec, "loadBalancerSourceRanges");
    if !ranges.is_empty() {
        if t != "LoadBalancer" {
            errs.push(FieldError::forbidden(
                "spec.LoadBalancerSourceRanges",
                "may only be used when `type` is 'LoadBalancer'",
            ));
        }
        for (i, r) in ranges.iter().enumerate() {
            let r = r.as_str().unwrap_or("").trim();
            if !names::is_cidr(r) {
                errs.push(FieldError::invalid(
                    idx("spec.LoadBalancerSourceRanges", i),
                    &jstr(r),
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                ));
            }
        }
    }
    if get(spec, "allocateLoadBalancerNodePorts").is_some() && t != "LoadBalancer" {
        errs.push(FieldError::forbidden(
            "spec.allocateLoadBalancerNodePorts",
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    if t == "LoadBalancer" && get(spec, "allocateLoadBalancerNodePorts").is_none() {
        errs.push(FieldError::required("allocateLoadBalancerNodePorts", ""));
    }
    if let Some(c) = spec.get("loadBalancerClass").and_then(Value::as_str) {
        if t != "LoadBalancer" {
            errs.push(FieldError::forbidden(
                "spec.loadBalancerClass",
                "may only be used when `type` is 'LoadBalancer'",
            ));
        } else {
            qualified(errs, c, "spec.loadBalancerClass");
        }
    }
    let etp = s(spec, "externalTrafficPolicy");
    if !externally_accessible(spec) {
        if !etp.is_empty() {
            errs.push(FieldError::invalid(
                "spec.externalTrafficPolicy",
                &jstr(etp),
                "may only be set for externally-accessible services",
            ));
        }
    } else {
        super::required_enum(
            errs,
            etp,
            "spec.externalTrafficPolicy",
            &["Cluster", "Local"],
        );
    }
    let hc = int(spec, "healthCheckNodePort").unwrap_or(0);
    if !(t == "LoadBalancer" && etp == "Local") {
        if hc != 0 {
            errs.push(FieldError::invalid("spec.healthCheckNodePort", &Value::from(hc), "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"));
        }
    } else if hc != 0 {
        for m in names::port_num(hc) {
            errs.push(FieldError::invalid(
                "spec.healthCheckNodePort",
                &Value::from(hc),
                &m,
            ));
        }
    }
    match spec.get("internalTrafficPolicy").and_then(Value::as_str) {
        None => {
            if ["NodePort", "LoadBalancer", "ClusterIP"].contains(&t) {
                errs.push(FieldError::required("spec.internalTrafficPolicy", ""));
            }
        }
        Some(p) if p != "Cluster" && p != "Local" => {
            errs.push(FieldError::not_supported(
                "spec.internalTrafficPolicy",
                &jstr(p),
                &["Cluster", "Local"],
            ));
        }
        Some(_) => {}
    }
    if let Some(td) = spec.get("trafficDistribution").and_then(Value::as_str) {
        if td != "PreferClose" {
            errs.push(FieldError::not_supported(
                "spec.trafficDistribution",
                &jstr(td),
                &["PreferClose"],
            ));
        }
    }
}

fn service_port(
    errs: &mut Errs,
    p: &Value,
    require_name: bool,
    seen: &mut BTreeSet<String>,
    path: &str,
) {
    let name = s(p, "name");
    if require_name && name.is_empty() {
        errs.push(FieldError::required(child(path, "name"), ""));
    } else if !name.is_empty() {
        dns_label(errs, name, &child(path, "name"));
        if !seen.insert(name.to_string()) {
            errs.push(FieldError::duplicate(child(path, "name"), &jstr(name)));
        }
    }
    let port = int(p, "port").unwrap_or(0);
    for m in names::port_num(port) {
        errs.push(FieldError::invalid(
            child(path, "port"),
            &Value::from(port),
            &m,
        ));
    }
    super::required_enum(errs, s(p, "protocol"), &child(path, "protocol"), PROTOCOLS);
    let tp = child(path, "targetPort");
    match p.get("targetPort") {
        Some(Value::String(n)) => {
            for m in names::port_name(n) {
                errs.push(FieldError::invalid(&tp, &jstr(n), &m));
            }
        }
        other => {
            let n = other.and_then(Value::as_i64).unwrap_or(0);
            for m in names::port_num(n) {
                errs.push(FieldError::invalid(&tp, &Value::from(n), &m));
            }
        }
    }
    if let Some(ap) = p.get("appProtocol").and_then(Value::as_str) {
        qualified(errs, ap, &child(path, "appProtocol"));
    }
}

/// `ValidateNonSpecialIP`.
pub fn non_special_ip(errs: &mut Errs, ip: &str, path: &str) {
    let Some(addr) = names::parse_ip(ip) else {
        errs.push(FieldError::invalid(
            path,
            &jstr(ip),
            "must be a valid IP address",
        ));
        return;
    };
    if addr.is_unspecified() {
        errs.push(FieldError::invalid(
            path,
            &jstr(ip),
            &format!("may not be unspecified ({ip})"),
        ));
    }
    if addr.is_loopback() {
        errs.push(FieldError::invalid(
            path,
            &jstr(ip),
            "may not be in the loopback range (127.0.0.0/8, ::1/128)",
        ));
    }
    let link_local = match addr {
        std::net::IpAddr::V4(a) => a.is_link_local(),
        std::net::IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
    };
    if link_local {
        errs.push(FieldError::invalid(
            path,
            &jstr(ip),
            "may not be in the link-local range (169.254.0.0/16, fe80::/10)",
        ));
    }
    let ll_multicast = match addr {
        std::net::IpAddr::V4(a) => a.octets()[0] == 224 && a.octets()[1] == 0 && a.octets()[2] == 0,
        std::net::IpAddr::V6(a) => (a.segments()[0] & 0xff0f) == 0xff02,
    };
    if ll_multicast {
        errs.push(FieldError::invalid(
            path,
            &jstr(ip),
            "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
        ));
    }
}

fn cluster_ip_fields(errs: &mut Errs, spec: &Value, ips: &[String]) {
    let t = s(spec, "type");
    if let Some(p) = spec.get("ipFamilyPolicy").and_then(Value::as_str) {
        if !["PreferDualStack", "RequireDualStack", "SingleStack"].contains(&p) {
            errs.push(FieldError::not_supported(
                "spec.ipFamilyPolicy",
                &jstr(p),
                &["PreferDualStack", "RequireDualStack", "SingleStack"],
            ));
        }
    }
    let cip = s(spec, "clusterIP");
    if !arr(spec, "clusterIPs").is_empty() && cip != ips[0] {
        errs.push(FieldError::invalid_shown(
            "spec.clusterIPs",
            &shown_ips(ips),
            "first value must match `clusterIP`",
        ));
    }
    if t == "ExternalName" {
        return;
    }
    if ips.len() > 2 {
        errs.push(FieldError::invalid_shown(
            "spec.clusterIPs",
            &shown_ips(ips),
            "may only hold up to 2 values",
        ));
    }
    for (i, ip) in ips.iter().enumerate() {
        let p = idx("spec.clusterIPs", i);
        if i == 0 && ip == "None" {
            continue;
        }
        if ip == "None" || (i > 0 && ips[0] == "None") {
            errs.push(FieldError::invalid(
                &p,
                &jstr(ip),
                "must be empty when the first value is 'None'",
            ));
            continue;
        }
        if !names::is_ip(ip) {
            errs.push(FieldError::invalid(
                &p,
                &jstr(ip),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
    }
    let families = arr(spec, "ipFamilies");
    let mut seen = BTreeSet::new();
    for (i, f) in families.iter().enumerate() {
        let f = f.as_str().unwrap_or("");
        let p = idx("spec.ipFamilies", i);
        if f != "IPv4" && f != "IPv6" {
            errs.push(FieldError::not_supported(&p, &jstr(f), &["IPv4", "IPv6"]));
        } else if !seen.insert(f) {
            errs.push(FieldError::duplicate(&p, &jstr(f)));
        }
    }
    if families.len() > 2 {
        errs.push(FieldError::invalid_shown(
            "spec.ipFamilies",
            &gofmt::typed_string_slice("core.IPFamily", spec.get("ipFamilies")),
            "may only hold up to 2 values",
        ));
    }
    if spec.get("ipFamilyPolicy").and_then(Value::as_str) == Some("SingleStack") {
        if ips.len() > 1 {
            errs.push(FieldError::invalid_shown("spec.clusterIPs", &shown_ips(ips), "must be 'PreferDualStack' or 'RequireDualStack' when multiple IP addresses are specified"));
        }
        if families.len() > 1 {
            errs.push(FieldError::invalid_shown("spec.ipFamilies", &gofmt::typed_string_slice("core.IPFamily", spec.get("ipFamilies")), "must be 'PreferDualStack' or 'RequireDualStack' when multiple IP families are specified"));
        }
    }
}

/// `ValidateServiceUpdate` (the new object is validated by the caller).
pub fn validate_update(errs: &mut Errs, new: &Value, old: &Value) {
    let ns = new.get("spec").unwrap_or(&Value::Null);
    let os = old.get("spec").unwrap_or(&Value::Null);
    let (nt, ot) = (s(ns, "type"), s(os, "type"));
    if nt != "ExternalName" && ot != "ExternalName" && !(is_headless(ns) && is_headless(os)) {
        let (n, o) = (cluster_ips(ns), cluster_ips(os));
        let changed = if n.len() == o.len() {
            n != o
        } else if o.len() > n.len() {
            if n.is_empty() {
                errs.push(FieldError::invalid_shown(
                    "spec.clusterIPs[0]",
                    &shown_ips(&n),
                    "primary clusterIP can not be unset",
                ));
            }
            !n.is_empty() && n[0] != o[0]
        } else {
            !o.is_empty() && n[0] != o[0]
        };
        if changed {
            errs.push(FieldError::invalid_shown(
                "spec.clusterIPs[0]",
                &shown_ips(&n),
                "may not change once set",
            ));
        }
        let (nf, of) = (arr(ns, "ipFamilies"), arr(os, "ipFamilies"));
        if !nf.is_empty() && !of.is_empty() && nf[0] != of[0] {
            errs.push(FieldError::invalid_shown(
                "spec.ipFamilies[0]",
                &gofmt::typed_string_slice("core.IPFamily", ns.get("ipFamilies")),
                "may not change once set",
            ));
        }
    }
    let needs_hc =
        |t: &str, spec: &Value| t == "LoadBalancer" && s(spec, "externalTrafficPolicy") == "Local";
    if needs_hc(nt, ns)
        && needs_hc(ot, os)
        && int(ns, "healthCheckNodePort") != int(os, "healthCheckNodePort")
    {
        errs.push(FieldError::forbidden(
            "spec.healthCheckNodePort",
            "field is immutable",
        ));
    }
    if ot == "LoadBalancer" && nt == "LoadBalancer" {
        let (nc, oc) = (ns.get("loadBalancerClass"), os.get("loadBalancerClass"));
        if !super::same(nc, oc) {
            let shown = nc
                .and_then(Value::as_str)
                .map_or("\"null\"".to_string(), go_quote);
            errs.push(FieldError::invalid_shown(
                "spec.loadBalancerClass",
                &shown,
                "may not change once set",
            ));
        }
    }
}
