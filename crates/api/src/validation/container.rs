//! Containers of a pod spec: names, images, ports, env, volume mounts, probes, lifecycle
//! hooks, resources and security contexts (`validateContainers`, `validateInitContainers`,
//! `validateContainerCommon` and friends).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::quantity;
use super::{arr, child, dns_label, get, idx, int, jstr, names, qualified, s, Errs};
use crate::field::FieldError;
use crate::meta::At as _;

/// The pod-level facts container validation needs.
pub struct PodCtx<'a> {
    /// Volume name -> volume (only volumes that validated).
    pub volumes: BTreeMap<String, &'a Value>,
    pub grace_period: Option<i64>,
    pub restart_policy: &'a str,
    pub claim_names: BTreeSet<String>,
    pub host_users: bool,
}

const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

/// `validateContainers`: at least one, unique names, common rules, probes and hooks.
pub fn containers(errs: &mut Errs, list: &[Value], ctx: &PodCtx, path: &str) {
    if list.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    let mut seen = BTreeSet::new();
    for (i, c) in list.iter().enumerate() {
        let p = idx(path, i);
        common(errs, c, ctx, &p);
        let name = s(c, "name");
        if !seen.insert(name) {
            errs.push(FieldError::duplicate(child(&p, "name"), &jstr(name)));
        }
        if let Some(l) = get(c, "lifecycle") {
            lifecycle(errs, l, ctx.grace_period, &child(&p, "lifecycle"));
        }
        probes(errs, c, ctx.grace_period, &p);
        if get(c, "restartPolicy").is_some() {
            errs.push(FieldError::forbidden(
                child(&p, "restartPolicy"),
                "may not be set for non-init containers",
            ));
        }
    }
    host_port_conflicts(errs, list, path);
}

/// `validateInitContainers`: names unique across regular and init containers; probes and
/// hooks only for restartable (sidecar) init containers.
pub fn init_containers(
    errs: &mut Errs,
    list: &[Value],
    regular: &[Value],
    ctx: &PodCtx,
    path: &str,
) {
    let mut all: BTreeSet<&str> = regular.iter().map(|c| s(c, "name")).collect();
    for (i, c) in list.iter().enumerate() {
        let p = idx(path, i);
        common(errs, c, ctx, &p);
        let mut restart_always = false;
        if let Some(rp) = get(c, "restartPolicy") {
            let rp = rp.as_str().unwrap_or("");
            if rp != "Always" {
                errs.push(FieldError::not_supported(
                    child(&p, "restartPolicy"),
                    &jstr(rp),
                    &["Always"],
                ));
            }
            restart_always = rp == "Always";
        }
        let name = s(c, "name");
        if all.contains(name) {
            errs.push(FieldError::duplicate(child(&p, "name"), &jstr(name)));
        } else if !name.is_empty() {
            all.insert(name);
        }
        host_port_conflicts(errs, std::slice::from_ref(c), path);
        if restart_always {
            if let Some(l) = get(c, "lifecycle") {
                lifecycle(errs, l, ctx.grace_period, &child(&p, "lifecycle"));
            }
            probes(errs, c, ctx.grace_period, &p);
        } else {
            for f in [
                "lifecycle",
                "livenessProbe",
                "readinessProbe",
                "startupProbe",
            ] {
                if get(c, f).is_some() {
                    errs.push(FieldError::forbidden(
                        child(&p, f),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
        }
        if !arr(c, "resizePolicy").is_empty() {
            errs.push(FieldError::invalid_shown(
                child(&p, "resizePolicy"),
                "[]core.ContainerResizePolicy{...}",
                "must not be set for init containers",
            ));
        }
    }
}

const EPHEMERAL_FORBIDDEN: &[&str] = &[
    "ports",
    "resources",
    "resizePolicy",
    "lifecycle",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "restartPolicy",
];

/// `validateEphemeralContainers`.
pub fn ephemeral_containers(
    errs: &mut Errs,
    list: &[Value],
    regular: &[Value],
    init: &[Value],
    ctx: &PodCtx,
    path: &str,
) {
    let others: BTreeSet<&str> = regular.iter().chain(init).map(|c| s(c, "name")).collect();
    let mut all = others.clone();
    for (i, c) in list.iter().enumerate() {
        let p = idx(path, i);
        common(errs, c, ctx, &p);
        only_for_pod(errs, c, &p);
        let name = s(c, "name");
        if all.contains(name) {
            errs.push(FieldError::duplicate(child(&p, "name"), &jstr(name)));
        } else {
            all.insert(name);
        }
        let target = s(c, "targetContainerName");
        if !target.is_empty() && !others.contains(target) {
            errs.push(FieldError::not_found(
                child(&p, "targetContainerName"),
                &jstr(target),
            ));
        }
        for f in EPHEMERAL_FORBIDDEN {
            let set = match get(c, f) {
                None => false,
                Some(Value::Array(a)) => !a.is_empty(),
                Some(Value::Object(o)) => !o.is_empty(),
                Some(_) => true,
            };
            if set {
                errs.push(FieldError::forbidden(
                    child(&p, f),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
        for (j, m) in arr(c, "volumeMounts").iter().enumerate() {
            for f in ["subPath", "subPathExpr"] {
                if !s(m, f).is_empty() {
                    errs.push(FieldError::forbidden(
                        child(&idx(&child(&p, "volumeMounts"), j), f),
                        "cannot be set for an Ephemeral Container",
                    ));
                }
            }
        }
    }
}

/// Pod-only container rules (not for templates): no whitespace around the image.
pub fn only_for_pod(errs: &mut Errs, c: &Value, p: &str) {
    let image = s(c, "image");
    if image.trim() != image {
        errs.push(FieldError::invalid(
            child(p, "image"),
            &jstr(image),
            "must not have leading or trailing whitespace",
        ));
    }
}

fn common(errs: &mut Errs, c: &Value, ctx: &PodCtx, p: &str) {
    let name = s(c, "name");
    if name.is_empty() {
        errs.push(FieldError::required(child(p, "name"), ""));
    } else {
        dns_label(errs, name, &child(p, "name"));
    }
    if s(c, "image").is_empty() {
        errs.push(FieldError::required(child(p, "image"), ""));
    }
    match s(c, "terminationMessagePolicy") {
        "File" | "FallbackToLogsOnError" => {}
        "" => errs.push(FieldError::required(
            child(p, "terminationMessagePolicy"),
            "",
        )),
        other => errs.push(FieldError::not_supported(
            child(p, "terminationMessagePolicy"),
            &jstr(other),
            &["File", "FallbackToLogsOnError"],
        )),
    }
    ports(errs, arr(c, "ports"), &child(p, "ports"));
    env(errs, arr(c, "env"), &child(p, "env"));
    env_from(errs, arr(c, "envFrom"), &child(p, "envFrom"));
    let devices: Vec<(&str, &str)> = arr(c, "volumeDevices")
        .iter()
        .map(|d| (s(d, "name"), s(d, "devicePath")))
        .collect();
    let mounts: Vec<(&str, &str)> = arr(c, "volumeMounts")
        .iter()
        .map(|m| (s(m, "name"), s(m, "mountPath")))
        .collect();
    volume_mounts(errs, c, &devices, ctx, &child(p, "volumeMounts"));
    volume_devices(errs, c, &mounts, ctx, &child(p, "volumeDevices"));
    match s(c, "imagePullPolicy") {
        "Always" | "IfNotPresent" | "Never" => {}
        "" => errs.push(FieldError::required(child(p, "imagePullPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            child(p, "imagePullPolicy"),
            &jstr(other),
            &["Always", "IfNotPresent", "Never"],
        )),
    }
    super::resources::resources(
        errs,
        get(c, "resources"),
        &ctx.claim_names,
        &child(p, "resources"),
    );
    resize_policy(
        errs,
        arr(c, "resizePolicy"),
        ctx.restart_policy,
        &child(p, "resizePolicy"),
    );
    super::resources::security_context(
        errs,
        get(c, "securityContext"),
        ctx.host_users,
        &child(p, "securityContext"),
    );
}

fn ports(errs: &mut Errs, list: &[Value], path: &str) {
    let mut names_seen = BTreeSet::new();
    for (i, port) in list.iter().enumerate() {
        let p = idx(path, i);
        let name = s(port, "name");
        if !name.is_empty() {
            let msgs = names::port_name(name);
            if !msgs.is_empty() {
                for m in msgs {
                    errs.push(FieldError::invalid(child(&p, "name"), &jstr(name), &m));
                }
            } else if !names_seen.insert(name) {
                errs.push(FieldError::duplicate(child(&p, "name"), &jstr(name)));
            }
        }
        let cp = int(port, "containerPort").unwrap_or(0);
        if cp == 0 {
            errs.push(FieldError::required(child(&p, "containerPort"), ""));
        } else {
            for m in names::port_num(cp) {
                errs.push(FieldError::invalid(
                    child(&p, "containerPort"),
                    &Value::from(cp),
                    &m,
                ));
            }
        }
        let hp = int(port, "hostPort").unwrap_or(0);
        if hp != 0 {
            for m in names::port_num(hp) {
                errs.push(FieldError::invalid(
                    child(&p, "hostPort"),
                    &Value::from(hp),
                    &m,
                ));
            }
        }
        super::required_enum(errs, s(port, "protocol"), &child(&p, "protocol"), PROTOCOLS);
    }
}

/// `AccumulateUniqueHostPorts` across a set of containers.
fn host_port_conflicts(errs: &mut Errs, list: &[Value], path: &str) {
    let mut seen = BTreeSet::new();
    for (ci, c) in list.iter().enumerate() {
        for (pi, port) in arr(c, "ports").iter().enumerate() {
            let hp = int(port, "hostPort").unwrap_or(0);
            if hp == 0 {
                continue;
            }
            let k = format!("{}/{}/{}", s(port, "protocol"), s(port, "hostIP"), hp);
            if !seen.insert(k.clone()) {
                let p = child(&idx(&child(&idx(path, ci), "ports"), pi), "hostPort");
                errs.push(FieldError::duplicate(p, &jstr(&k)));
            }
        }
    }
}

const ENV_FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];
/// Field paths a v1 downward API reference may name at all.
const CONVERTIBLE_FIELD_PATHS: &[&str] = &[
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "spec.schedulerName",
    "status.phase",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];
const RESOURCE_FIELD_PATHS: &[&str] = &[
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

/// `validateObjectFieldSelector` with the allowed expressions.
pub fn object_field_selector(errs: &mut Errs, fs: &Value, allowed: &[&str], path: &str) {
    let api_version = s(fs, "apiVersion");
    if api_version.is_empty() {
        errs.push(FieldError::required(child(path, "apiVersion"), ""));
        return;
    }
    let fp = s(fs, "fieldPath");
    if fp.is_empty() {
        errs.push(FieldError::required(child(path, "fieldPath"), ""));
        return;
    }
    if api_version != "v1" {
        errs.push(FieldError::invalid(
            child(path, "fieldPath"),
            &jstr(fp),
            &format!("error converting fieldPath: unsupported pod version: {api_version}"),
        ));
        return;
    }
    let (base, subscript) = match fp.split_once('[') {
        Some((b, rest)) if rest.ends_with(']') => (b, Some(&rest[..rest.len() - 1])),
        _ => (fp, None),
    };
    if !CONVERTIBLE_FIELD_PATHS.contains(&base) {
        errs.push(FieldError::invalid(
            child(path, "fieldPath"),
            &jstr(fp),
            &format!("error converting fieldPath: field label not supported: {fp}"),
        ));
        return;
    }
    if let Some(sub) = subscript {
        let sub = sub.trim_matches('\'');
        match base {
            "metadata.annotations" => qualified(errs, &sub.to_lowercase(), path),
            "metadata.labels" => qualified(errs, sub, path),
            _ => errs.push(FieldError::invalid(
                path,
                &jstr(base),
                "does not support subscript",
            )),
        }
    } else if !allowed.contains(&base) {
        errs.push(FieldError::not_supported(
            child(path, "fieldPath"),
            &jstr(base),
            allowed,
        ));
    }
}

/// `validateContainerResourceFieldSelector`.
pub fn resource_field_selector(errs: &mut Errs, fs: &Value, volume: bool, path: &str) {
    let res = s(fs, "resource");
    if volume && s(fs, "containerName").is_empty() {
        errs.push(FieldError::required(child(path, "containerName"), ""));
    } else if res.is_empty() {
        errs.push(FieldError::required(child(path, "resource"), ""));
    } else if !RESOURCE_FIELD_PATHS.contains(&res)
        && !res.starts_with("requests.hugepages-")
        && !res.starts_with("limits.hugepages-")
    {
        errs.push(FieldError::not_supported(
            child(path, "resource"),
            &jstr(res),
            RESOURCE_FIELD_PATHS,
        ));
    }
    if let Some(d) = get(fs, "divisor").and_then(quantity::parse_value) {
        if d.nanos != 0 {
            let shown = d.canonical();
            let cpu = ["1m", "1"];
            let mem = [
                "1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei",
            ];
            let (ok, what) = match res {
                "limits.cpu" | "requests.cpu" => (cpu.contains(&shown.as_str()), "only divisor's values 1m and 1 are supported with the cpu resource"),
                "limits.memory" | "requests.memory" => (mem.contains(&shown.as_str()), "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the memory resource"),
                "limits.ephemeral-storage" | "requests.ephemeral-storage" => (mem.contains(&shown.as_str()), "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the local ephemeral storage resource"),
                _ => (true, ""),
            };
            if !ok {
                errs.push(FieldError::invalid(
                    child(path, "divisor"),
                    &jstr(res),
                    what,
                ));
            }
        }
    }
}

fn key_selector(errs: &mut Errs, sel: &Value, path: &str) {
    let name = s(sel, "name");
    super::name_ref(
        errs,
        names::name_is_dns_subdomain,
        name,
        &child(path, "name"),
    );
    let k = s(sel, "key");
    if k.is_empty() {
        errs.push(FieldError::required(child(path, "key"), ""));
    } else {
        for m in names::config_map_key(k) {
            errs.push(FieldError::invalid(child(path, "key"), &jstr(k), &m));
        }
    }
}

fn env(errs: &mut Errs, list: &[Value], path: &str) {
    for (i, ev) in list.iter().enumerate() {
        let p = idx(path, i);
        let name = s(ev, "name");
        if name.is_empty() {
            errs.push(FieldError::required(child(&p, "name"), ""));
        } else {
            for m in names::env_var_name(name) {
                errs.push(FieldError::invalid(child(&p, "name"), &jstr(name), &m));
            }
        }
        let Some(vf) = get(ev, "valueFrom") else {
            continue;
        };
        let vp = child(&p, "valueFrom");
        let mut n = 0;
        if let Some(f) = get(vf, "fieldRef") {
            n += 1;
            object_field_selector(errs, f, ENV_FIELD_PATHS, &child(&vp, "fieldRef"));
        }
        if let Some(f) = get(vf, "resourceFieldRef") {
            n += 1;
            resource_field_selector(errs, f, false, &child(&vp, "resourceFieldRef"));
        }
        if let Some(f) = get(vf, "configMapKeyRef") {
            n += 1;
            key_selector(errs, f, &child(&vp, "configMapKeyRef"));
        }
        if let Some(f) = get(vf, "secretKeyRef") {
            n += 1;
            key_selector(errs, f, &child(&vp, "secretKeyRef"));
        }
        if n == 0 {
            errs.push(FieldError::invalid(&vp, &jstr(""), "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"));
        } else if !s(ev, "value").is_empty() {
            errs.push(FieldError::invalid(
                &vp,
                &jstr(""),
                "may not be specified when `value` is not empty",
            ));
        } else if n > 1 {
            errs.push(FieldError::invalid(
                &vp,
                &jstr(""),
                "may not have more than one field specified at a time",
            ));
        }
    }
}

fn env_from(errs: &mut Errs, list: &[Value], path: &str) {
    for (i, ev) in list.iter().enumerate() {
        let p = idx(path, i);
        let prefix = s(ev, "prefix");
        if !prefix.is_empty() {
            for m in names::env_var_name(prefix) {
                errs.push(FieldError::invalid(child(&p, "prefix"), &jstr(prefix), &m));
            }
        }
        let mut n = 0;
        for f in ["configMapRef", "secretRef"] {
            if let Some(r) = get(ev, f) {
                n += 1;
                let name = s(r, "name");
                if name.is_empty() {
                    errs.push(FieldError::required(child(&child(&p, f), "name"), ""));
                } else {
                    for m in names::name_is_dns_subdomain(name, true) {
                        errs.push(FieldError::invalid(
                            child(&child(&p, f), "name"),
                            &jstr(name),
                            &m,
                        ));
                    }
                }
            }
        }
        if n == 0 {
            errs.push(FieldError::invalid(
                path,
                &jstr(""),
                "must specify one of: `configMapRef` or `secretRef`",
            ));
        } else if n > 1 {
            errs.push(FieldError::invalid(
                path,
                &jstr(""),
                "may not have more than one field specified at a time",
            ));
        }
    }
}

fn volume_mounts(errs: &mut Errs, c: &Value, devices: &[(&str, &str)], ctx: &PodCtx, path: &str) {
    let mut points = BTreeSet::new();
    let privileged = c.at("/securityContext/privileged").and_then(Value::as_bool) == Some(true);
    for (i, m) in arr(c, "volumeMounts").iter().enumerate() {
        let p = idx(path, i);
        let name = s(m, "name");
        let mp = s(m, "mountPath");
        if name.is_empty() {
            errs.push(FieldError::required(child(&p, "name"), ""));
        }
        let vol = ctx.volumes.get(name);
        if vol.is_none() {
            errs.push(FieldError::not_found(child(&p, "name"), &jstr(name)));
        }
        if mp.is_empty() {
            errs.push(FieldError::required(child(&p, "mountPath"), ""));
        }
        if !points.insert(mp) {
            errs.push(FieldError::invalid(
                child(&p, "mountPath"),
                &jstr(mp),
                "must be unique",
            ));
        }
        if devices.iter().any(|(n, _)| *n == name) {
            errs.push(FieldError::invalid(
                child(&p, "name"),
                &jstr(name),
                "must not already exist in volumeDevices",
            ));
        }
        if devices.iter().any(|(_, d)| *d == mp) {
            errs.push(FieldError::invalid(
                child(&p, "mountPath"),
                &jstr(mp),
                "must not already exist as a path in volumeDevices",
            ));
        }
        if vol.is_some_and(|v| get(v, "image").is_some()) {
            for f in ["subPath", "subPathExpr"] {
                if !s(m, f).is_empty() {
                    errs.push(FieldError::invalid(
                        child(&p, f),
                        &jstr(s(m, f)),
                        "not allowed in image volume sources",
                    ));
                }
            }
        }
        let sub = s(m, "subPath");
        if !sub.is_empty() {
            super::volume::local_descending_path(errs, sub, &child(path, "subPath"));
        }
        let expr = s(m, "subPathExpr");
        if !expr.is_empty() {
            if !sub.is_empty() {
                errs.push(FieldError::invalid(
                    child(&p, "subPathExpr"),
                    &jstr(expr),
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            super::volume::local_descending_path(errs, expr, &child(path, "subPathExpr"));
        }
        let prop = s(m, "mountPropagation");
        if get(m, "mountPropagation").is_some() {
            let pp = child(path, "mountPropagation");
            if !["Bidirectional", "HostToContainer", "None"].contains(&prop) {
                errs.push(FieldError::not_supported(
                    &pp,
                    &jstr(prop),
                    &["Bidirectional", "HostToContainer", "None"],
                ));
            }
            if prop == "Bidirectional" && !privileged {
                errs.push(FieldError::forbidden(
                    &pp,
                    "Bidirectional mount propagation is available only to privileged containers",
                ));
            }
        }
        if let Some(rro) = get(m, "recursiveReadOnly") {
            let rp = child(path, "recursiveReadOnly");
            match rro.as_str().unwrap_or("") {
                "Disabled" => {}
                "Enabled" | "IfPossible" => {
                    if !super::flag(m, "readOnly") {
                        errs.push(FieldError::forbidden(
                            &rp,
                            "may only be specified when readOnly is true",
                        ));
                    }
                    if !prop.is_empty() && prop != "None" {
                        errs.push(FieldError::forbidden(
                            &rp,
                            "may only be specified when mountPropagation is None or not specified",
                        ));
                    }
                }
                other => errs.push(FieldError::not_supported(
                    &rp,
                    &jstr(other),
                    &["Disabled", "Enabled", "IfPossible"],
                )),
            }
        }
    }
}

fn volume_devices(errs: &mut Errs, c: &Value, mounts: &[(&str, &str)], ctx: &PodCtx, path: &str) {
    let (mut paths, mut seen) = (BTreeSet::new(), BTreeSet::new());
    for (i, d) in arr(c, "volumeDevices").iter().enumerate() {
        let p = idx(path, i);
        let (name, dp) = (s(d, "name"), s(d, "devicePath"));
        let vol = ctx.volumes.get(name);
        let is_pvc = vol.is_some_and(|v| {
            get(v, "persistentVolumeClaim").is_some() || get(v, "ephemeral").is_some()
        });
        if name.is_empty() {
            errs.push(FieldError::required(child(&p, "name"), ""));
        }
        if seen.contains(name) {
            errs.push(FieldError::invalid(
                child(&p, "name"),
                &jstr(name),
                "must be unique",
            ));
        }
        if vol.is_some() && !is_pvc {
            errs.push(FieldError::invalid(child(&p, "name"), &jstr(name), "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode"));
        }
        if vol.is_none() {
            errs.push(FieldError::not_found(child(&p, "name"), &jstr(name)));
        }
        if dp.is_empty() {
            errs.push(FieldError::required(child(&p, "devicePath"), ""));
        }
        if paths.contains(dp) {
            errs.push(FieldError::invalid(
                child(&p, "devicePath"),
                &jstr(dp),
                "must be unique",
            ));
        }
        if !dp.is_empty() && dp.split('/').any(|x| x == "..") {
            errs.push(FieldError::invalid(
                child(&p, "devicePath"),
                &jstr(dp),
                "can not contain backsteps ('..')",
            ));
        } else {
            paths.insert(dp);
        }
        if mounts.iter().any(|(n, _)| *n == name) {
            errs.push(FieldError::invalid(
                child(&p, "name"),
                &jstr(name),
                "must not already exist in volumeMounts",
            ));
        }
        if mounts.iter().any(|(_, m)| *m == dp) {
            errs.push(FieldError::invalid(
                child(&p, "devicePath"),
                &jstr(dp),
                "must not already exist as a path in volumeMounts",
            ));
        }
        if !name.is_empty() {
            seen.insert(name);
        }
    }
}

fn probes(errs: &mut Errs, c: &Value, grace: Option<i64>, p: &str) {
    for f in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(probe) = get(c, f) else {
            continue;
        };
        let pp = child(p, f);
        handler(errs, probe, false, grace, &pp);
        for n in [
            "initialDelaySeconds",
            "timeoutSeconds",
            "periodSeconds",
            "successThreshold",
            "failureThreshold",
        ] {
            super::nonneg(errs, int(probe, n), &child(&pp, n));
        }
        if let Some(t) = int(probe, "terminationGracePeriodSeconds") {
            if t <= 0 {
                errs.push(FieldError::invalid(
                    child(&pp, "terminationGracePeriodSeconds"),
                    &Value::from(t),
                    "must be greater than 0",
                ));
            }
        }
        if f == "readinessProbe" {
            if let Some(t) = int(probe, "terminationGracePeriodSeconds") {
                errs.push(FieldError::invalid(
                    child(&pp, "terminationGracePeriodSeconds"),
                    &Value::from(t),
                    "must not be set for readinessProbes",
                ));
            }
        } else if let Some(st) = int(probe, "successThreshold") {
            if st != 1 {
                errs.push(FieldError::invalid(
                    child(&pp, "successThreshold"),
                    &Value::from(st),
                    "must be 1",
                ));
            }
        }
    }
}

fn lifecycle(errs: &mut Errs, l: &Value, grace: Option<i64>, p: &str) {
    for f in ["postStart", "preStop"] {
        if let Some(h) = get(l, f) {
            handler(errs, h, true, grace, &child(p, f));
        }
    }
}

fn port_num_or_name(errs: &mut Errs, port: Option<&Value>, path: &str) {
    match port {
        Some(Value::String(name)) => {
            for m in names::port_name(name) {
                errs.push(FieldError::invalid(path, &jstr(name), &m));
            }
        }
        other => {
            let n = other.and_then(Value::as_i64).unwrap_or(0);
            for m in names::port_num(n) {
                errs.push(FieldError::invalid(path, &Value::from(n), &m));
            }
        }
    }
}

/// `validateHandler`: exactly one of exec, httpGet, tcpSocket, grpc (probes) or sleep (hooks).
fn handler(errs: &mut Errs, h: &Value, is_hook: bool, grace: Option<i64>, p: &str) {
    let kinds: &[&str] = if is_hook {
        &["exec", "httpGet", "tcpSocket", "sleep"]
    } else {
        &["exec", "httpGet", "tcpSocket", "grpc"]
    };
    let mut n = 0;
    for k in kinds {
        let Some(a) = get(h, k) else {
            continue;
        };
        let ap = child(p, k);
        if n > 0 {
            errs.push(FieldError::forbidden(
                ap,
                "may not specify more than 1 handler type",
            ));
            continue;
        }
        n += 1;
        match *k {
            "exec" => {
                if arr(a, "command").is_empty() {
                    errs.push(FieldError::required(child(&ap, "command"), ""));
                }
            }
            "httpGet" => {
                if s(a, "path").is_empty() {
                    errs.push(FieldError::required(child(&ap, "path"), ""));
                }
                port_num_or_name(errs, get(a, "port"), &child(&ap, "port"));
                let scheme = s(a, "scheme");
                if scheme != "HTTP" && scheme != "HTTPS" {
                    errs.push(FieldError::not_supported(
                        child(&ap, "scheme"),
                        &jstr(scheme),
                        &["HTTP", "HTTPS"],
                    ));
                }
                for hd in arr(a, "httpHeaders") {
                    for m in names::http_header_name(s(hd, "name")) {
                        errs.push(FieldError::invalid(
                            child(&ap, "httpHeaders"),
                            &jstr(s(hd, "name")),
                            &m,
                        ));
                    }
                }
            }
            "tcpSocket" => port_num_or_name(errs, get(a, "port"), &child(&ap, "port")),
            "grpc" => port_num_or_name(
                errs,
                Some(&Value::from(int(a, "port").unwrap_or(0))),
                &child(&ap, "port"),
            ),
            _ => {
                let secs = int(a, "seconds").unwrap_or(0);
                if let Some(g) = grace {
                    if secs <= 0 || secs > g {
                        errs.push(FieldError::invalid(&ap, &Value::from(secs), &format!("must be greater than 0 and less than terminationGracePeriodSeconds ({g}). Enable AllowPodLifecycleSleepActionZeroValue feature gate for zero sleep.")));
                    }
                }
            }
        }
    }
    if n == 0 {
        errs.push(FieldError::required(p, "must specify a handler type"));
    }
}

fn resize_policy(errs: &mut Errs, list: &[Value], restart_policy: &str, path: &str) {
    let mut seen = BTreeSet::new();
    for (i, rp) in list.iter().enumerate() {
        let name = s(rp, "resourceName");
        if !seen.insert(name) {
            errs.push(FieldError::duplicate(idx(path, i), &jstr(name)));
        }
        match name {
            "cpu" | "memory" => {}
            "" => errs.push(FieldError::required(path, "")),
            o => errs.push(FieldError::not_supported(
                path,
                &jstr(o),
                &["cpu", "memory"],
            )),
        }
        let pol = s(rp, "restartPolicy");
        match pol {
            "NotRequired" | "RestartContainer" => {}
            "" => errs.push(FieldError::required(path, "")),
            o => errs.push(FieldError::not_supported(
                path,
                &jstr(o),
                &["NotRequired", "RestartContainer"],
            )),
        }
        if restart_policy == "Never" && pol != "NotRequired" {
            errs.push(FieldError::invalid(
                path,
                &jstr(pol),
                "must be 'NotRequired' when `restartPolicy` is 'Never'",
            ));
        }
    }
}
