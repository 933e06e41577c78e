//! Pod volumes (`ValidateVolumes`, `validateVolumeSource`): unique DNS-label names, exactly one
//! source, and the rules of the common sources.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::container::{object_field_selector, resource_field_selector};
use super::{arr, child, dns_label, get, idx, int, jstr, names, s, Errs};
use crate::field::FieldError;
use crate::meta::At as _;

/// Every volume source field of `core/v1.VolumeSource`, in Kubernetes' checking order.
pub const SOURCES: &[&str] = &[
    "emptyDir",
    "hostPath",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "cinder",
    "cephfs",
    "quobyte",
    "downwardAPI",
    "fc",
    "flexVolume",
    "configMap",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "storageos",
    "projected",
    "scaleIO",
    "csi",
    "ephemeral",
    "image",
];

const FILE_MODE_MSG: &str = "must be a number between 0 and 0777 (octal), both inclusive";
const VOLUME_FIELD_PATHS: &[&str] = &[
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
];

/// Validate `spec.volumes`; returns the volumes that validated, by name.
pub fn volumes<'a>(
    errs: &mut Errs,
    list: &'a [Value],
    pod_name: Option<&str>,
    path: &str,
) -> BTreeMap<String, &'a Value> {
    let mut ok = BTreeMap::new();
    let mut names_seen = BTreeSet::new();
    let created: BTreeSet<String> = match pod_name.filter(|n| !n.is_empty()) {
        Some(pn) => list
            .iter()
            .filter(|v| get(v, "ephemeral").is_some())
            .map(|v| format!("{pn}-{}", s(v, "name")))
            .collect(),
        None => BTreeSet::new(),
    };
    for (i, vol) in list.iter().enumerate() {
        let p = idx(path, i);
        let name = s(vol, "name");
        let mut el = Vec::new();
        source(&mut el, vol, name, pod_name, &p);
        if name.is_empty() {
            el.push(FieldError::required(child(&p, "name"), ""));
        } else {
            dns_label(&mut el, name, &child(&p, "name"));
        }
        if names_seen.contains(name) {
            el.push(FieldError::duplicate(child(&p, "name"), &jstr(name)));
        }
        if el.is_empty() {
            names_seen.insert(name);
            ok.insert(name.to_string(), vol);
        } else {
            errs.extend(el);
        }
        if let Some(pvc) = get(vol, "persistentVolumeClaim") {
            let claim = s(pvc, "claimName");
            if created.contains(claim) {
                errs.push(FieldError::invalid(
                    child(&child(&p, "persistentVolumeClaim"), "claimName"),
                    &jstr(claim),
                    "must not reference a PVC that gets created for an ephemeral volume",
                ));
            }
        }
    }
    ok
}

fn mode(errs: &mut Errs, v: &Value, field: &str, path: &str) {
    if let Some(m) = int(v, field) {
        if !(0..=0o777).contains(&m) {
            errs.push(FieldError::invalid(
                child(path, field),
                &Value::from(m),
                FILE_MODE_MSG,
            ));
        }
    }
}

fn key_to_path(errs: &mut Errs, kp: &Value, path: &str) {
    if s(kp, "key").is_empty() {
        errs.push(FieldError::required(child(path, "key"), ""));
    }
    let p = s(kp, "path");
    if p.is_empty() {
        errs.push(FieldError::required(child(path, "path"), ""));
    }
    local_non_reserved_path(errs, p, &child(path, "path"));
    mode(errs, kp, "mode", path);
}

/// `validateLocalDescendingPath`: relative, no `..` element.
pub fn local_descending_path(errs: &mut Errs, target: &str, path: &str) {
    if target.starts_with('/') {
        errs.push(FieldError::invalid(
            path,
            &jstr(target),
            "must be a relative path",
        ));
    }
    no_backsteps(errs, target, path);
}

fn no_backsteps(errs: &mut Errs, target: &str, path: &str) {
    if target.split('/').any(|x| x == "..") {
        errs.push(FieldError::invalid(
            path,
            &jstr(target),
            "must not contain '..'",
        ));
    }
}

/// `ValidateLocalNonReservedPath`.
pub fn local_non_reserved_path(errs: &mut Errs, target: &str, path: &str) {
    local_descending_path(errs, target, path);
    if target.starts_with("..") && !target.starts_with("../") {
        errs.push(FieldError::invalid(
            path,
            &jstr(target),
            "must not start with '..'",
        ));
    }
}

fn downward_file(errs: &mut Errs, f: &Value, path: &str) {
    let p = s(f, "path");
    if p.is_empty() {
        errs.push(FieldError::required(child(path, "path"), ""));
    }
    local_non_reserved_path(errs, p, &child(path, "path"));
    if let Some(fr) = get(f, "fieldRef") {
        object_field_selector(errs, fr, VOLUME_FIELD_PATHS, &child(path, "fieldRef"));
        if get(f, "resourceFieldRef").is_some() {
            errs.push(FieldError::invalid(
                path,
                &jstr("resource"),
                "fieldRef and resourceFieldRef can not be specified simultaneously",
            ));
        }
    } else if let Some(rf) = get(f, "resourceFieldRef") {
        resource_field_selector(errs, rf, true, &child(path, "resourceFieldRef"));
    } else {
        errs.push(FieldError::required(
            path,
            "one of fieldRef and resourceFieldRef is required",
        ));
    }
    mode(errs, f, "mode", path);
}

fn source(errs: &mut Errs, vol: &Value, vol_name: &str, pod_name: Option<&str>, path: &str) {
    let mut n = 0;
    for kind in SOURCES {
        let Some(src) = get(vol, kind) else {
            continue;
        };
        let sp = child(path, kind);
        if n > 0 {
            errs.push(FieldError::forbidden(
                sp,
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        n += 1;
        match *kind {
            "emptyDir" => {
                if let Some(q) = get(src, "sizeLimit").and_then(super::quantity::parse_value) {
                    if q.nanos < 0 {
                        errs.push(FieldError::forbidden(
                            child(&sp, "sizeLimit"),
                            "SizeLimit field must be a valid resource quantity",
                        ));
                    }
                }
            }
            "hostPath" => {
                let hp = s(src, "path");
                if hp.is_empty() {
                    errs.push(FieldError::required(child(&sp, "path"), ""));
                } else {
                    no_backsteps(errs, hp, &child(&sp, "path"));
                    if let Some(t) = src.get("type").and_then(Value::as_str) {
                        let ok = [
                            "",
                            "BlockDevice",
                            "CharDevice",
                            "Directory",
                            "DirectoryOrCreate",
                            "File",
                            "FileOrCreate",
                            "Socket",
                        ];
                        if !ok.contains(&t) {
                            errs.push(FieldError::not_supported(child(&sp, "type"), &jstr(t), &ok));
                        }
                    }
                }
            }
            "secret" | "configMap" => {
                let name_field = if *kind == "secret" {
                    "secretName"
                } else {
                    "name"
                };
                if s(src, name_field).is_empty() {
                    errs.push(FieldError::required(child(&sp, name_field), ""));
                }
                mode(errs, src, "defaultMode", &sp);
                for (i, kp) in arr(src, "items").iter().enumerate() {
                    key_to_path(errs, kp, &idx(&child(&sp, "items"), i));
                }
            }
            "persistentVolumeClaim" => {
                if s(src, "claimName").is_empty() {
                    errs.push(FieldError::required(child(&sp, "claimName"), ""));
                }
            }
            "nfs" => {
                if s(src, "server").is_empty() {
                    errs.push(FieldError::required(child(&sp, "server"), ""));
                }
                let np = s(src, "path");
                if np.is_empty() {
                    errs.push(FieldError::required(child(&sp, "path"), ""));
                }
                if !np.starts_with('/') {
                    errs.push(FieldError::invalid(
                        child(&sp, "path"),
                        &jstr(np),
                        "must be an absolute path",
                    ));
                }
            }
            "downwardAPI" => {
                mode(errs, src, "defaultMode", &sp);
                for f in arr(src, "items") {
                    downward_file(errs, f, &sp);
                }
            }
            "projected" => projected(errs, src, &sp),
            "csi" => {
                let driver = s(src, "driver");
                if driver.is_empty() {
                    errs.push(FieldError::required(child(&sp, "driver"), ""));
                }
            }
            "ephemeral" => {
                match get(src, "volumeClaimTemplate") {
                    None => errs.push(FieldError::required(child(&sp, "volumeClaimTemplate"), "")),
                    Some(t) => {
                        super::meta::labels(
                            errs,
                            t.at("/metadata/labels"),
                            &child(
                                &child(&child(&sp, "volumeClaimTemplate"), "metadata"),
                                "labels",
                            ),
                        );
                        super::claims::pvc_spec(
                            errs,
                            t.get("spec").unwrap_or(&Value::Null),
                            &child(&child(&sp, "volumeClaimTemplate"), "spec"),
                        );
                    }
                }
                if let Some(pn) = pod_name.filter(|n| !n.is_empty() && !vol_name.is_empty()) {
                    let pvc = format!("{pn}-{vol_name}");
                    for m in names::dns1123_subdomain(&pvc) {
                        errs.push(FieldError::invalid(
                            child(path, "name"),
                            &jstr(vol_name),
                            &format!("PVC name {}: {m}", crate::field::go_quote(&pvc)),
                        ));
                    }
                }
            }
            "gitRepo" => {
                if s(src, "repository").is_empty() {
                    errs.push(FieldError::required(child(&sp, "repository"), ""));
                }
                local_descending_path(errs, s(src, "directory"), &child(&sp, "directory"));
            }
            "image" => {
                if s(src, "reference").is_empty() {
                    errs.push(FieldError::required(child(&sp, "reference"), ""));
                }
            }
            "awsElasticBlockStore" | "cinder" | "portworxVolume" => {
                if s(src, "volumeID").is_empty() {
                    errs.push(FieldError::required(child(&sp, "volumeID"), ""));
                }
            }
            "gcePersistentDisk" => {
                if s(src, "pdName").is_empty() {
                    errs.push(FieldError::required(
                        child(&child(path, "persistentDisk"), "pdName"),
                        "",
                    ));
                }
            }
            "rbd" | "cephfs" => {
                if arr(src, "monitors").is_empty() {
                    errs.push(FieldError::required(child(&sp, "monitors"), ""));
                }
                if *kind == "rbd" && s(src, "image").is_empty() {
                    errs.push(FieldError::required(child(&sp, "image"), ""));
                }
            }
            "iscsi" => {
                if s(src, "targetPortal").is_empty() {
                    errs.push(FieldError::required(child(&sp, "targetPortal"), ""));
                }
                if s(src, "iqn").is_empty() {
                    errs.push(FieldError::required(child(&sp, "iqn"), ""));
                }
            }
            "glusterfs" => {
                for f in ["endpoints", "path"] {
                    if s(src, f).is_empty() {
                        errs.push(FieldError::required(child(&sp, f), ""));
                    }
                }
            }
            "flexVolume" => {
                if s(src, "driver").is_empty() {
                    errs.push(FieldError::required(child(&sp, "driver"), ""));
                }
            }
            "azureFile" => {
                for f in ["secretName", "shareName"] {
                    if s(src, f).is_empty() {
                        errs.push(FieldError::required(child(&sp, f), ""));
                    }
                }
            }
            "azureDisk" => {
                if s(src, "diskName").is_empty() {
                    errs.push(FieldError::required(child(&sp, "diskName"), ""));
                }
                if s(src, "diskURI").is_empty() {
                    errs.push(FieldError::required(child(&sp, "diskURI"), ""));
                }
            }
            _ => {}
        }
    }
    if n == 0 {
        errs.push(FieldError::required(path, "must specify a volume type"));
    }
}

fn projected(errs: &mut Errs, src: &Value, path: &str) {
    mode(errs, src, "defaultMode", path);
    let mut all_paths = BTreeSet::new();
    for (i, source) in arr(src, "sources").iter().enumerate() {
        let sp = idx(&child(path, "sources"), i);
        let mut n = 0;
        for kind in ["secret", "configMap"] {
            let Some(x) = get(source, kind) else {
                continue;
            };
            n += 1;
            let pp = child(&sp, kind);
            if s(x, "name").is_empty() {
                errs.push(FieldError::required(child(&pp, "name"), ""));
            }
            for (j, kp) in arr(x, "items").iter().enumerate() {
                key_to_path(errs, kp, &idx(&child(&pp, "items"), j));
                let p = s(kp, "path");
                if !p.is_empty() && !all_paths.insert(p.to_string()) {
                    errs.push(FieldError::invalid(
                        path,
                        &jstr(s(x, "name")),
                        "conflicting duplicate paths",
                    ));
                }
            }
        }
        if let Some(x) = get(source, "downwardAPI") {
            n += 1;
            for f in arr(x, "items") {
                downward_file(errs, f, &child(&sp, "downwardAPI"));
                let p = s(f, "path");
                if !p.is_empty() && !all_paths.insert(p.to_string()) {
                    errs.push(FieldError::invalid(
                        path,
                        &jstr(p),
                        "conflicting duplicate paths",
                    ));
                }
            }
        }
        if let Some(x) = get(source, "serviceAccountToken") {
            n += 1;
            let pp = child(&sp, "serviceAccountToken");
            let exp = int(x, "expirationSeconds").unwrap_or(0);
            if exp < 600 {
                errs.push(FieldError::invalid(
                    child(&pp, "expirationSeconds"),
                    &Value::from(exp),
                    "may not specify a duration less than 10 minutes",
                ));
            }
            if exp > 1 << 32 {
                errs.push(FieldError::invalid(
                    child(&pp, "expirationSeconds"),
                    &Value::from(exp),
                    "may not specify a duration larger than 2^32 seconds",
                ));
            }
            let p = s(x, "path");
            if p.is_empty() {
                errs.push(FieldError::required(child(path, "path"), ""));
            } else {
                local_non_reserved_path(errs, p, &child(path, "path"));
            }
        }
        if let Some(x) = get(source, "clusterTrustBundle") {
            n += 1;
            let pp = child(&sp, "clusterTrustBundle");
            let p = s(x, "path");
            if p.is_empty() {
                errs.push(FieldError::required(child(&pp, "path"), ""));
            }
            local_non_reserved_path(errs, p, &child(&pp, "path"));
            if !all_paths.insert(p.to_string()) {
                errs.push(FieldError::invalid(
                    path,
                    &jstr(p),
                    "conflicting duplicate paths",
                ));
            }
        }
        if n > 1 {
            errs.push(FieldError::forbidden(
                &sp,
                "may not specify more than 1 volume type per source",
            ));
        }
    }
}
