//! Storage and quota kinds of core/v1: LimitRange, ResourceQuota, PersistentVolume and
//! PersistentVolumeClaim (`ValidatePersistentVolumeClaimSpec` and its update rules).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::resources::{container_resource_name, quantity_value, resource_name};
use super::{
    arr, child, get, gofmt, idx, jstr, key, meta, names, obj, qualified, quantity, s, Errs,
};
use crate::field::FieldError;
use crate::meta::At as _;

const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

pub fn limit_range(errs: &mut Errs, o: &Value) {
    let mut types = BTreeSet::new();
    for (i, l) in arr(o.get("spec").unwrap_or(&Value::Null), "limits")
        .iter()
        .enumerate()
    {
        let p = idx("spec.limits", i);
        let t = s(l, "type");
        let before = errs.len();
        qualified(errs, t, &child(&p, "type"));
        if errs.len() == before
            && !t.contains('/')
            && !["Pod", "Container", "PersistentVolumeClaim"].contains(&t)
        {
            errs.push(FieldError::invalid(
                child(&p, "type"),
                &jstr(t),
                "must be a standard limit type or fully qualified",
            ));
        }
        if !types.insert(t) {
            errs.push(FieldError::duplicate(child(&p, "type"), &jstr(t)));
        }
        let mut q: BTreeMap<&str, BTreeMap<String, quantity::Quantity>> = BTreeMap::new();
        let fields: &[&str] = if t == "Pod" {
            &["max", "min", "maxLimitRequestRatio"]
        } else {
            &[
                "max",
                "min",
                "default",
                "defaultRequest",
                "maxLimitRequestRatio",
            ]
        };
        if t == "Pod" {
            for f in ["default", "defaultRequest"] {
                if obj(l, f).is_some_and(|m| !m.is_empty()) {
                    errs.push(FieldError::forbidden(
                        child(&p, f),
                        "may not be specified when `type` is 'Pod'",
                    ));
                }
            }
        }
        for f in fields {
            for (k, v) in obj(l, f).into_iter().flatten() {
                let kp = key(&child(&p, f), k);
                if t == "Pod" || t == "Container" {
                    container_resource_name(errs, k, &kp);
                } else {
                    resource_name(errs, k, &kp);
                }
                if let Some(x) = quantity::parse_value(v) {
                    q.entry(f).or_default().insert(k.clone(), x);
                }
            }
        }
        if t == "PersistentVolumeClaim"
            && !obj(l, "min").is_some_and(|m| m.contains_key("storage"))
            && !obj(l, "max").is_some_and(|m| m.contains_key("storage"))
        {
            errs.push(FieldError::required(
                child(&p, "limits"),
                "either minimum or maximum storage value is required, but neither was provided",
            ));
        }
        let keys: BTreeSet<String> = q.values().flat_map(|m| m.keys().cloned()).collect();
        for k in keys {
            let g = |f: &str| q.get(f).and_then(|m| m.get(&k)).copied();
            let (min, max, def, defreq, ratio) = (
                g("min"),
                g("max"),
                g("default"),
                g("defaultRequest"),
                g("maxLimitRequestRatio"),
            );
            let inv = |errs: &mut Errs, f: &str, shown: quantity::Quantity, msg: String| {
                errs.push(FieldError::invalid(
                    key(&child(&p, f), &k),
                    &jstr(&shown.canonical()),
                    &msg,
                ));
            };
            if let (Some(mn), Some(mx)) = (min, max) {
                if mn.nanos > mx.nanos {
                    inv(
                        errs,
                        "min",
                        mn,
                        format!(
                            "min value {} is greater than max value {}",
                            mn.canonical(),
                            mx.canonical()
                        ),
                    );
                }
            }
            if let (Some(dr), Some(mn)) = (defreq, min) {
                if mn.nanos > dr.nanos {
                    inv(
                        errs,
                        "defaultRequest",
                        dr,
                        format!(
                            "min value {} is greater than default request value {}",
                            mn.canonical(),
                            dr.canonical()
                        ),
                    );
                }
            }
            if let (Some(dr), Some(mx)) = (defreq, max) {
                if dr.nanos > mx.nanos {
                    inv(
                        errs,
                        "defaultRequest",
                        dr,
                        format!(
                            "default request value {} is greater than max value {}",
                            dr.canonical(),
                            mx.canonical()
                        ),
                    );
                }
            }
            if let (Some(dr), Some(d)) = (defreq, def) {
                if dr.nanos > d.nanos {
                    inv(
                        errs,
                        "defaultRequest",
                        dr,
                        format!(
                            "default request value {} is greater than default limit value {}",
                            dr.canonical(),
                            d.canonical()
                        ),
                    );
                }
            }
            if let (Some(d), Some(mn)) = (def, min) {
                if mn.nanos > d.nanos {
                    inv(
                        errs,
                        "default",
                        mn,
                        format!(
                            "min value {} is greater than default value {}",
                            mn.canonical(),
                            d.canonical()
                        ),
                    );
                }
            }
            if let (Some(d), Some(mx)) = (def, max) {
                if d.nanos > mx.nanos {
                    inv(
                        errs,
                        "default",
                        mx,
                        format!(
                            "default value {} is greater than max value {}",
                            d.canonical(),
                            mx.canonical()
                        ),
                    );
                }
            }
            if let Some(r) = ratio {
                if r.nanos < 1_000_000_000 {
                    inv(
                        errs,
                        "maxLimitRequestRatio",
                        r,
                        format!("ratio {} is less than 1", r.canonical()),
                    );
                }
            }
        }
    }
}

const QUOTA_SCOPES: &[&str] = &[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
    "VolumeAttributesClass",
];

fn quota_resource_name(errs: &mut Errs, name: &str, path: &str) {
    if resource_name(errs, name, path) && !name.contains('/') {
        let standard_quota = [
            "pods",
            "services",
            "replicationcontrollers",
            "resourcequotas",
            "secrets",
            "configmaps",
            "persistentvolumeclaims",
            "services.nodeports",
            "services.loadbalancers",
            "cpu",
            "memory",
            "ephemeral-storage",
            "requests.cpu",
            "requests.memory",
            "requests.storage",
            "requests.ephemeral-storage",
            "limits.cpu",
            "limits.memory",
            "limits.ephemeral-storage",
        ];
        if !standard_quota.contains(&name) && !name.starts_with("requests.hugepages-") {
            errs.push(FieldError::invalid(
                path,
                &jstr(name),
                "must be a standard resource for quota",
            ));
        }
    }
}

pub fn resource_quota(errs: &mut Errs, o: &Value) {
    let spec = o.get("spec").unwrap_or(&Value::Null);
    for (k, v) in obj(spec, "hard").into_iter().flatten() {
        let p = key("spec.hard", k);
        quota_resource_name(errs, k, &p);
        quantity_value(errs, k, v, &p);
    }
    let scopes: Vec<&str> = arr(spec, "scopes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for sc in &scopes {
        if !QUOTA_SCOPES.contains(sc) {
            errs.push(FieldError::invalid_shown(
                "spec.scopes",
                &gofmt::typed_string_slice("core.ResourceQuotaScope", spec.get("scopes")),
                "unsupported scope",
            ));
        }
    }
    for (a, b) in [
        ("BestEffort", "NotBestEffort"),
        ("Terminating", "NotTerminating"),
    ] {
        if scopes.contains(&a) && scopes.contains(&b) {
            errs.push(FieldError::invalid_shown(
                "spec.scopes",
                &gofmt::typed_string_slice("core.ResourceQuotaScope", spec.get("scopes")),
                "conflicting scopes",
            ));
        }
    }
    if let Some(sel) = get(spec, "scopeSelector") {
        for r in arr(sel, "matchExpressions") {
            let p = "spec.scopeSelector.matchExpressions";
            let scope = s(r, "scopeName");
            if !QUOTA_SCOPES.contains(&scope) {
                errs.push(FieldError::invalid(
                    format!("{p}.scopeName"),
                    &jstr(scope),
                    "unsupported scope",
                ));
            }
            let values = arr(r, "values");
            match s(r, "operator") {
                "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(format!("{p}.values"), "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector")),
                "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::invalid_shown(format!("{p}.values"), &gofmt::string_slice(r.get("values")), "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector")),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                op => errs.push(FieldError::invalid(format!("{p}.operator"), &jstr(op), "not a valid selector operator")),
            }
        }
    }
}

/// `ValidatePersistentVolumeClaimSpec`.
pub fn pvc_spec(errs: &mut Errs, spec: &Value, path: &str) {
    let modes = arr(spec, "accessModes");
    if modes.is_empty() {
        errs.push(FieldError::required(
            child(path, "accessModes"),
            "at least 1 access mode is required",
        ));
    }
    meta::label_selector(errs, get(spec, "selector"), &child(path, "selector"));
    access_modes(errs, modes, &child(path, "accessModes"));
    let sp = key(&child(path, "resources"), "storage");
    match spec.at("/resources/requests/storage") {
        None => errs.push(FieldError::required(sp, "")),
        Some(v) => match quantity::parse_value(v) {
            Some(q) if q.nanos <= 0 => errs.push(FieldError::invalid(
                &sp,
                &jstr(&q.canonical()),
                "must be greater than zero",
            )),
            Some(_) => {}
            None => errs.push(FieldError::invalid(&sp, v, quantity::QUANTITY_FORMAT_ERROR)),
        },
    }
    if let Some(sc) = spec
        .get("storageClassName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        super::name_ref(
            errs,
            names::name_is_dns_subdomain,
            sc,
            &child(path, "storageClassName"),
        );
    }
    if let Some(vm) = spec.get("volumeMode").and_then(Value::as_str) {
        if vm != "Block" && vm != "Filesystem" {
            errs.push(FieldError::not_supported(
                child(path, "volumeMode"),
                &jstr(vm),
                &["Block", "Filesystem"],
            ));
        }
    }
    for f in ["dataSource", "dataSourceRef"] {
        if let Some(ds) = get(spec, f) {
            let p = child(path, f);
            if s(ds, "name").is_empty() {
                errs.push(FieldError::required(child(&p, "name"), ""));
            }
            if s(ds, "kind").is_empty() {
                errs.push(FieldError::required(child(&p, "kind"), ""));
            }
            let group = s(ds, "apiGroup");
            if group.is_empty()
                && s(ds, "kind") != "PersistentVolumeClaim"
                && !s(ds, "kind").is_empty()
            {
                errs.push(FieldError::invalid(
                    &p,
                    &jstr(s(ds, "kind")),
                    "must be 'PersistentVolumeClaim' when referencing the default apiGroup",
                ));
            }
        }
    }
}

fn access_modes(errs: &mut Errs, modes: &[Value], path: &str) {
    let (mut rwop, mut other) = (false, false);
    for m in modes {
        let m = m.as_str().unwrap_or("");
        if !ACCESS_MODES.contains(&m) {
            errs.push(FieldError::not_supported(path, &jstr(m), ACCESS_MODES));
        } else if m == "ReadWriteOncePod" {
            rwop = true;
        } else {
            other = true;
        }
    }
    if rwop && other {
        errs.push(FieldError::forbidden(
            path,
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

pub fn pv(errs: &mut Errs, o: &Value) {
    let spec = o.get("spec").unwrap_or(&Value::Null);
    let modes = arr(spec, "accessModes");
    if modes.is_empty() {
        errs.push(FieldError::required("spec.accessModes", ""));
    }
    access_modes(errs, modes, "spec.accessModes");
    match obj(spec, "capacity") {
        None => errs.push(FieldError::required("spec.capacity", "")),
        Some(c) if c.is_empty() => errs.push(FieldError::required("spec.capacity", "")),
        Some(c) => {
            if !c.contains_key("storage") || c.len() > 1 {
                let keys: Vec<String> = c.keys().cloned().collect();
                errs.push(FieldError::not_supported_shown(
                    "spec.capacity",
                    &format!(
                        "[]core.ResourceName{{{}}}",
                        keys.iter()
                            .map(|k| crate::field::go_quote(k))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    &["storage"],
                ));
            }
            for (k, v) in c {
                let p = key("spec.capacity", k);
                if let Some(q) = quantity_value(errs, k, v, &p) {
                    if q.nanos <= 0 {
                        errs.push(FieldError::invalid(
                            &p,
                            &jstr(&q.canonical()),
                            "must be greater than zero",
                        ));
                    }
                }
            }
        }
    }
    if let Some(p) = spec
        .get("persistentVolumeReclaimPolicy")
        .and_then(Value::as_str)
    {
        if !["Delete", "Recycle", "Retain"].contains(&p) {
            errs.push(FieldError::not_supported(
                "spec.persistentVolumeReclaimPolicy",
                &jstr(p),
                &["Delete", "Recycle", "Retain"],
            ));
        }
    }
    if let Some(sc) = spec
        .get("storageClassName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        super::name_ref(
            errs,
            names::name_is_dns_subdomain,
            sc,
            "spec.storageClassName",
        );
    }
    let sources = [
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "hostPath",
        "glusterfs",
        "nfs",
        "rbd",
        "quobyte",
        "iscsi",
        "cinder",
        "cephfs",
        "fc",
        "flocker",
        "flexVolume",
        "azureFile",
        "vsphereVolume",
        "azureDisk",
        "photonPersistentDisk",
        "portworxVolume",
        "scaleIO",
        "local",
        "storageos",
        "csi",
    ];
    let mut n = 0;
    for src in sources {
        let Some(v) = get(spec, src) else {
            continue;
        };
        let p = child("spec", src);
        if n > 0 {
            errs.push(FieldError::forbidden(
                p,
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        n += 1;
        match src {
            "hostPath" | "local" => {
                let hp = s(v, "path");
                if hp.is_empty() {
                    errs.push(FieldError::required(child(&p, "path"), ""));
                } else if hp.split('/').any(|x| x == "..") {
                    errs.push(FieldError::invalid(
                        child(&p, "path"),
                        &jstr(hp),
                        "must not contain '..'",
                    ));
                }
                if src == "local" && get(spec, "nodeAffinity").is_none() {
                    errs.push(FieldError::required(
                        "spec.nodeAffinity",
                        "Local volume requires node affinity",
                    ));
                }
            }
            "nfs" => {
                if s(v, "server").is_empty() {
                    errs.push(FieldError::required(child(&p, "server"), ""));
                }
                let np = s(v, "path");
                if np.is_empty() {
                    errs.push(FieldError::required(child(&p, "path"), ""));
                }
                if !np.starts_with('/') {
                    errs.push(FieldError::invalid(
                        child(&p, "path"),
                        &jstr(np),
                        "must be an absolute path",
                    ));
                }
            }
            "csi" => {
                if s(v, "driver").is_empty() {
                    errs.push(FieldError::required(child(&p, "driver"), ""));
                }
                if s(v, "volumeHandle").is_empty() {
                    errs.push(FieldError::required(child(&p, "volumeHandle"), ""));
                }
            }
            _ => {}
        }
    }
    if n == 0 {
        errs.push(FieldError::required("spec", "must specify a volume type"));
    }
    if let Some(vm) = spec.get("volumeMode").and_then(Value::as_str) {
        if vm != "Block" && vm != "Filesystem" {
            errs.push(FieldError::not_supported(
                "spec.volumeMode",
                &jstr(vm),
                &["Block", "Filesystem"],
            ));
        }
    }
}

pub fn pvc_update(errs: &mut Errs, new: &Value, old: &Value) {
    let (ns, os) = (
        new.get("spec").cloned().unwrap_or(Value::Null),
        old.get("spec").cloned().unwrap_or(Value::Null),
    );
    let (mut n, mut o) = (ns.clone(), os.clone());
    let bound = new.at("/status/phase").and_then(Value::as_str) == Some("Bound");
    if let (Some(nm), Some(om)) = (n.as_object_mut(), o.as_object_mut()) {
        if s(&os, "volumeName").is_empty() {
            match nm.get("volumeName") {
                Some(v) => {
                    om.insert("volumeName".into(), v.clone());
                }
                None => {
                    om.remove("volumeName");
                }
            }
        }
        if bound {
            let old_storage = os.at("/resources/requests/storage").cloned();
            if let Some(req) = nm
                .get_mut("resources")
                .and_then(|r| r.get_mut("requests"))
                .and_then(Value::as_object_mut)
            {
                match old_storage {
                    Some(v) => {
                        req.insert("storage".into(), v);
                    }
                    None => {
                        req.remove("storage");
                    }
                }
            }
            if nm.contains_key("volumeAttributesClassName") {
                match om.get("volumeAttributesClassName") {
                    Some(v) => {
                        nm.insert("volumeAttributesClassName".into(), v.clone());
                    }
                    None => {
                        nm.remove("volumeAttributesClassName");
                    }
                }
            }
        }
        let old_sc_ann = old
            .at("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
            .and_then(Value::as_str);
        if om.get("storageClassName").is_none_or(Value::is_null)
            && nm.get("storageClassName").is_some()
            && old_sc_ann
                .is_none_or(|a| nm.get("storageClassName").and_then(Value::as_str) == Some(a))
        {
            nm.remove("storageClassName");
            om.remove("storageClassName");
        }
    }
    if n != o {
        errs.push(FieldError::forbidden("spec", "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n  core.PersistentVolumeClaimSpec{\n  }\n"));
    }
    let q = |v: &Value| {
        v.at("/resources/requests/storage")
            .and_then(quantity::parse_value)
    };
    if let (Some(nq), Some(oq)) = (q(&ns), q(&os)) {
        if nq.nanos < oq.nanos {
            errs.push(FieldError::forbidden(
                "spec.resources.requests.storage",
                "field can not be less than previous value",
            ));
        }
    }
    if ns.get("volumeMode") != os.get("volumeMode") {
        errs.push(FieldError::immutable_shown(
            "volumeMode",
            &ns.get("volumeMode")
                .and_then(Value::as_str)
                .map_or("\"null\"".into(), crate::field::go_quote),
        ));
    }
}
