//! Container resources and security contexts (`ValidateContainerResourceRequirements`,
//! resource names and quantities, `ValidateSecurityContext`, `validatePodSpecSecurityContext`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::quantity;
use super::{arr, child, get, idx, int, jstr, key, names, obj, qualified, s, Errs};
use crate::field::FieldError;
use crate::meta::At as _;

const STANDARD_CONTAINER_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage"];
const STANDARD_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "storage",
    "requests.storage",
    "services.nodeports",
    "services.loadbalancers",
];
const INTEGER_RESOURCES: &[&str] = &[
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];

fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// Native resources have no domain or a kubernetes.io domain.
pub fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Extended resources: domain-prefixed, not kubernetes.io, not `requests.`-prefixed.
pub fn is_extended_resource(name: &str) -> bool {
    if is_native_resource(name) || name.starts_with("requests.") {
        return false;
    }
    names::qualified_name(&format!("requests.{name}")).is_empty()
}

fn is_overcommit_allowed(name: &str) -> bool {
    is_native_resource(name) && !is_hugepages(name)
}

/// `validateResourceName`: qualified; bare names must be standard.
pub fn resource_name(errs: &mut Errs, name: &str, path: &str) -> bool {
    let before = errs.len();
    qualified(errs, name, path);
    if errs.len() != before {
        return false;
    }
    if !name.contains('/')
        && !STANDARD_RESOURCES.contains(&name)
        && !is_hugepages(name)
        && !name.starts_with("requests.hugepages-")
    {
        errs.push(FieldError::invalid(
            path,
            &jstr(name),
            "must be a standard resource type or fully qualified",
        ));
        return false;
    }
    true
}

/// `validateContainerResourceName`.
pub fn container_resource_name(errs: &mut Errs, name: &str, path: &str) {
    resource_name(errs, name, path);
    if !name.contains('/') {
        if !STANDARD_CONTAINER_RESOURCES.contains(&name) && !is_hugepages(name) {
            errs.push(FieldError::invalid(
                path,
                &jstr(name),
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native_resource(name) && !is_extended_resource(name) {
        errs.push(FieldError::invalid(
            path,
            &jstr(name),
            "doesn't follow extended resource name standard",
        ));
    }
}

/// `ValidateResourceQuantityValue`: parses, not negative, whole for integer resources.
pub fn quantity_value(
    errs: &mut Errs,
    name: &str,
    v: &Value,
    path: &str,
) -> Option<quantity::Quantity> {
    let Some(q) = quantity::parse_value(v) else {
        errs.push(FieldError::invalid(
            path,
            v,
            quantity::QUANTITY_FORMAT_ERROR,
        ));
        return None;
    };
    if q.nanos < 0 {
        errs.push(FieldError::invalid(
            path,
            &jstr(&q.canonical()),
            "must be greater than or equal to 0",
        ));
    }
    let integer = INTEGER_RESOURCES.contains(&name)
        || name.starts_with("count/")
        || is_extended_resource(name);
    if integer && q.milli() % 1000 != 0 {
        errs.push(FieldError::invalid(
            path,
            &jstr(&q.canonical()),
            "must be an integer",
        ));
    }
    Some(q)
}

/// `ValidateContainerResourceRequirements`.
pub fn resources(errs: &mut Errs, r: Option<&Value>, claim_names: &BTreeSet<String>, path: &str) {
    let Some(r) = r else {
        return;
    };
    let (lim_path, req_path) = (child(path, "limits"), child(path, "requests"));
    let mut limits = BTreeMap::new();
    let (mut lim_cpu_mem, mut req_cpu_mem, mut huge) = (false, false, false);
    if let Some(m) = obj(r, "limits") {
        for (name, v) in m {
            let p = key(&lim_path, name);
            container_resource_name(errs, name, &p);
            if let Some(q) = quantity_value(errs, name, v, &p) {
                limits.insert(name.as_str(), q);
            }
            huge |= is_hugepages(name);
            lim_cpu_mem |= name == "cpu" || name == "memory";
        }
    }
    if let Some(m) = obj(r, "requests") {
        for (name, v) in m {
            let p = key(&req_path, name);
            container_resource_name(errs, name, &p);
            let q = quantity_value(errs, name, v, &p);
            match (q, limits.get(name.as_str())) {
                (Some(q), Some(l)) => {
                    if q.nanos != l.nanos && !is_overcommit_allowed(name) {
                        errs.push(FieldError::invalid(
                            &req_path,
                            &jstr(&q.canonical()),
                            &format!("must be equal to {name} limit of {}", l.canonical()),
                        ));
                    } else if q.nanos > l.nanos {
                        errs.push(FieldError::invalid(
                            &req_path,
                            &jstr(&q.canonical()),
                            &format!(
                                "must be less than or equal to {name} limit of {}",
                                l.canonical()
                            ),
                        ));
                    }
                }
                (_, None) if !is_overcommit_allowed(name) => {
                    errs.push(FieldError::required(
                        &lim_path,
                        "Limit must be set for non overcommitable resources",
                    ));
                }
                _ => {}
            }
            huge |= is_hugepages(name);
            req_cpu_mem |= name == "cpu" || name == "memory";
        }
    }
    if huge && !lim_cpu_mem && !req_cpu_mem {
        errs.push(FieldError::forbidden(
            path,
            "HugePages require cpu or memory",
        ));
    }
    let cp = child(path, "claims");
    let mut seen = BTreeSet::new();
    for (i, c) in arr(r, "claims").iter().enumerate() {
        let name = s(c, "name");
        if name.is_empty() {
            errs.push(FieldError::required(idx(&cp, i), ""));
            continue;
        }
        if !seen.insert(name) {
            errs.push(FieldError::duplicate(idx(&cp, i), &jstr(name)));
        }
        if !claim_names.contains(name) {
            let mut e = FieldError::not_found(idx(&cp, i), &jstr(name));
            let detail = if claim_names.is_empty() {
                " which is empty".to_string()
            } else {
                format!(
                    ": {}",
                    claim_names.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            };
            e.message.push_str(&format!(
                ": must be one of the names in pod.spec.resourceClaims{detail}"
            ));
            errs.push(e);
        }
    }
}

// ---- security contexts ----

fn id_range(errs: &mut Errs, v: Option<i64>, path: &str) {
    if let Some(n) = v {
        if !(0..=i32::MAX as i64).contains(&n) {
            errs.push(FieldError::invalid(
                path,
                &Value::from(n),
                &names::inclusive_range_error(0, i32::MAX as i64),
            ));
        }
    }
}

/// `validateSeccompProfileField`.
pub fn seccomp_profile(errs: &mut Errs, sp: Option<&Value>, path: &str) {
    let Some(sp) = sp else {
        return;
    };
    let t = s(sp, "type");
    match t {
        "Localhost" | "RuntimeDefault" | "Unconfined" => {}
        "" => errs.push(FieldError::required(
            child(path, "type"),
            "type is required when seccompProfile is set",
        )),
        o => errs.push(FieldError::not_supported(
            child(path, "type"),
            &jstr(o),
            &["Localhost", "RuntimeDefault", "Unconfined"],
        )),
    }
    if t == "Localhost" {
        match sp.get("localhostProfile").and_then(Value::as_str) {
            None => errs.push(FieldError::required(
                child(path, "localhostProfile"),
                "must be set when seccomp type is Localhost",
            )),
            Some(p) => {
                super::volume::local_descending_path(errs, p, &child(path, "localhostProfile"))
            }
        }
    } else if get(sp, "localhostProfile").is_some() {
        errs.push(FieldError::invalid_shown(
            child(path, "localhostProfile"),
            "core.SeccompProfile{...}",
            "can only be set when seccomp type is Localhost",
        ));
    }
}

/// `ValidateAppArmorProfileField`.
pub fn apparmor_profile(errs: &mut Errs, ap: Option<&Value>, path: &str) {
    let Some(ap) = ap else {
        return;
    };
    match s(ap, "type") {
        "Localhost" => match ap.get("localhostProfile").and_then(Value::as_str) {
            None | Some("") => errs.push(FieldError::required(
                child(path, "localhostProfile"),
                "must be set when AppArmor type is Localhost",
            )),
            Some(p) if p.trim() != p => errs.push(FieldError::invalid(
                child(path, "localhostProfile"),
                &jstr(p),
                "must not be padded with whitespace",
            )),
            Some(_) => {}
        },
        "RuntimeDefault" | "Unconfined" => {
            if let Some(p) = ap.get("localhostProfile").and_then(Value::as_str) {
                errs.push(FieldError::invalid(
                    child(path, "localhostProfile"),
                    &jstr(p),
                    "can only be set when AppArmor type is Localhost",
                ));
            }
        }
        "" => errs.push(FieldError::required(
            child(path, "type"),
            "type is required when appArmorProfile is set",
        )),
        o => errs.push(FieldError::not_supported(
            child(path, "type"),
            &jstr(o),
            &["Localhost", "RuntimeDefault", "Unconfined"],
        )),
    }
}

/// `ValidateSecurityContext` (container level).
pub fn security_context(errs: &mut Errs, sc: Option<&Value>, host_users: bool, path: &str) {
    let Some(sc) = sc else {
        return;
    };
    id_range(errs, int(sc, "runAsUser"), &child(path, "runAsUser"));
    id_range(errs, int(sc, "runAsGroup"), &child(path, "runAsGroup"));
    if let Some(pm) = sc.get("procMount").and_then(Value::as_str) {
        if pm != "Default" && pm != "Unmasked" {
            errs.push(FieldError::not_supported(
                child(path, "procMount"),
                &jstr(pm),
                &["Default", "Unmasked"],
            ));
        }
        if host_users && pm == "Unmasked" {
            errs.push(FieldError::invalid(
                child(path, "procMount"),
                &jstr(pm),
                "`hostUsers` must be false to use `Unmasked`",
            ));
        }
    }
    seccomp_profile(
        errs,
        get(sc, "seccompProfile"),
        &child(path, "seccompProfile"),
    );
    if sc.get("allowPrivilegeEscalation").and_then(Value::as_bool) == Some(false) {
        if super::flag(sc, "privileged") {
            errs.push(FieldError::invalid_shown(
                path,
                "&core.SecurityContext{...}",
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            ));
        }
        if sc
            .at("/capabilities/add")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|c| c == "CAP_SYS_ADMIN"))
        {
            errs.push(FieldError::invalid_shown(path, "&core.SecurityContext{...}", "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"));
        }
    }
    apparmor_profile(
        errs,
        get(sc, "appArmorProfile"),
        &child(path, "appArmorProfile"),
    );
}

/// `validatePodSpecSecurityContext`.
pub fn pod_security_context(errs: &mut Errs, spec: &Value, path: &str) {
    let Some(sc) = get(spec, "securityContext") else {
        return;
    };
    id_range(errs, int(sc, "fsGroup"), &child(path, "fsGroup"));
    id_range(errs, int(sc, "runAsUser"), &child(path, "runAsUser"));
    id_range(errs, int(sc, "runAsGroup"), &child(path, "runAsGroup"));
    for (i, g) in arr(sc, "supplementalGroups").iter().enumerate() {
        id_range(
            errs,
            g.as_i64(),
            &idx(&child(path, "supplementalGroups"), i),
        );
    }
    if super::flag(spec, "shareProcessNamespace") && super::flag(spec, "hostPID") {
        errs.push(FieldError::invalid(
            child(path, "shareProcessNamespace"),
            &Value::Bool(true),
            "ShareProcessNamespace and HostPID cannot both be enabled",
        ));
    }
    let sp = child(path, "sysctls");
    let mut seen = BTreeSet::new();
    for (i, sy) in arr(sc, "sysctls").iter().enumerate() {
        let name = s(sy, "name");
        let np = child(&idx(&sp, i), "name");
        if name.is_empty() {
            errs.push(FieldError::required(&np, ""));
        } else if !is_sysctl_name(name) {
            errs.push(FieldError::invalid(&np, &jstr(name), "must have at most 253 characters and match regex ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"));
        } else if !seen.insert(name) {
            errs.push(FieldError::duplicate(&np, &jstr(name)));
        }
        if super::flag(spec, "hostNetwork") && name.starts_with("net.") {
            errs.push(FieldError::invalid(
                &np,
                &jstr(name),
                "may not be specified when 'hostNetwork' is true",
            ));
        }
        if super::flag(spec, "hostIPC")
            && (name.starts_with("kernel.shm")
                || name.starts_with("kernel.msg")
                || name.starts_with("kernel.sem")
                || name.starts_with("fs.mqueue."))
        {
            errs.push(FieldError::invalid(
                &np,
                &jstr(name),
                "may not be specified when 'hostIPC' is true",
            ));
        }
    }
    if let Some(p) = sc.get("fsGroupChangePolicy").and_then(Value::as_str) {
        if p != "OnRootMismatch" && p != "Always" {
            errs.push(FieldError::not_supported(
                child(path, "fsGroupChangePolicy"),
                &jstr(p),
                &["Always", "OnRootMismatch"],
            ));
        }
    }
    seccomp_profile(
        errs,
        get(sc, "seccompProfile"),
        &child(path, "seccompProfile"),
    );
    apparmor_profile(
        errs,
        get(sc, "appArmorProfile"),
        &child(path, "appArmorProfile"),
    );
    if let Some(p) = sc.get("supplementalGroupsPolicy").and_then(Value::as_str) {
        if p != "Merge" && p != "Strict" {
            errs.push(FieldError::not_supported(
                child(path, "supplementalGroupsPolicy"),
                &jstr(p),
                &["Merge", "Strict"],
            ));
        }
    }
}

fn is_sysctl_name(name: &str) -> bool {
    if name.len() > 253 {
        return false;
    }
    let seg_ok = |seg: &str| {
        let b = seg.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'_')
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
    };
    name.split(['.', '/']).all(seg_ok)
}
