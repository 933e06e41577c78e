//! storage.k8s.io/v1: StorageClass, CSIDriver, CSINode, VolumeAttachment.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{arr, child, get, idx, jstr, names, obj, qualified, s, Errs};
use crate::field::FieldError;
use crate::meta::At as _;

pub fn validate(errs: &mut Errs, kind: &str, o: &Value) {
    match kind {
        "StorageClass" => {
            let p = s(o, "provisioner");
            if p.is_empty() {
                errs.push(FieldError::required("provisioner", ""));
            } else {
                qualified(errs, &p.to_lowercase(), "provisioner");
            }
            if let Some(params) = obj(o, "parameters") {
                if params.len() > 512 {
                    errs.push(FieldError::too_many("parameters", params.len(), 512));
                }
                let mut total = 0;
                for (k, v) in params {
                    if k.is_empty() {
                        errs.push(FieldError::invalid(
                            "parameters",
                            &jstr(k),
                            "field can not be empty.",
                        ));
                    }
                    total += k.len() + v.as_str().map_or(0, str::len);
                }
                if total > 256 * 1024 {
                    errs.push(FieldError::too_long("parameters", 256 * 1024));
                }
            }
            if let Some(rp) = o.get("reclaimPolicy").and_then(Value::as_str) {
                if !rp.is_empty() && rp != "Delete" && rp != "Retain" {
                    errs.push(FieldError::not_supported(
                        "reclaimPolicy",
                        &jstr(rp),
                        &["Delete", "Retain"],
                    ));
                }
            }
            match o.get("volumeBindingMode").and_then(Value::as_str) {
                None => errs.push(FieldError::required("volumeBindingMode", "")),
                Some(m) if m != "Immediate" && m != "WaitForFirstConsumer" => {
                    errs.push(FieldError::not_supported(
                        "volumeBindingMode",
                        &jstr(m),
                        &["Immediate", "WaitForFirstConsumer"],
                    ));
                }
                _ => {}
            }
            for (i, term) in arr(o, "allowedTopologies").iter().enumerate() {
                let tp = idx("allowedTopologies", i);
                let exprs = arr(term, "matchLabelExpressions");
                if exprs.is_empty() {
                    errs.push(FieldError::required(
                        &tp,
                        "must contain at least one requirement",
                    ));
                }
                let mut keys = BTreeSet::new();
                for (j, e) in exprs.iter().enumerate() {
                    let ep = idx(&child(&tp, "matchLabelExpressions"), j);
                    if arr(e, "values").is_empty() {
                        errs.push(FieldError::required(child(&ep, "values"), ""));
                    }
                    super::meta::label_name(errs, s(e, "key"), &child(&ep, "key"));
                    if !keys.insert(s(e, "key")) {
                        errs.push(FieldError::duplicate(child(&ep, "key"), &jstr(s(e, "key"))));
                    }
                }
            }
        }
        "CSIDriver" => {
            let spec = o.get("spec").unwrap_or(&Value::Null);
            if let Some(p) = spec.get("fsGroupPolicy").and_then(Value::as_str) {
                let ok = ["File", "None", "ReadWriteOnceWithFSType"];
                if !ok.contains(&p) {
                    errs.push(FieldError::not_supported(
                        "spec.fsGroupPolicy",
                        &jstr(p),
                        &ok,
                    ));
                }
            }
            for (i, m) in arr(spec, "volumeLifecycleModes").iter().enumerate() {
                let m = m.as_str().unwrap_or("");
                if m != "Persistent" && m != "Ephemeral" {
                    errs.push(FieldError::not_supported(
                        idx("spec.volumeLifecycleModes", i),
                        &jstr(m),
                        &["Ephemeral", "Persistent"],
                    ));
                }
            }
        }
        "CSINode" => {
            let mut seen = BTreeSet::new();
            for (i, d) in arr(o.get("spec").unwrap_or(&Value::Null), "drivers")
                .iter()
                .enumerate()
            {
                let dp = idx("spec.drivers", i);
                let name = s(d, "name");
                if name.is_empty() {
                    errs.push(FieldError::required(child(&dp, "name"), ""));
                } else {
                    super::name_ref(
                        errs,
                        names::name_is_dns_subdomain,
                        &name.to_lowercase(),
                        &child(&dp, "name"),
                    );
                }
                if !seen.insert(name) {
                    errs.push(FieldError::duplicate(child(&dp, "name"), &jstr(name)));
                }
                if s(d, "nodeID").is_empty() {
                    errs.push(FieldError::required(child(&dp, "nodeID"), ""));
                }
            }
        }
        "VolumeAttachment" => {
            let spec = o.get("spec").unwrap_or(&Value::Null);
            let attacher = s(spec, "attacher");
            if attacher.is_empty() {
                errs.push(FieldError::required("spec.attacher", ""));
            } else {
                super::name_ref(
                    errs,
                    names::name_is_dns_subdomain,
                    &attacher.to_lowercase(),
                    "spec.attacher",
                );
            }
            let src = spec.get("source").unwrap_or(&Value::Null);
            let n = usize::from(get(src, "persistentVolumeName").is_some())
                + usize::from(get(src, "inlineVolumeSpec").is_some());
            if n != 1 {
                errs.push(FieldError::invalid_shown(
                    "spec.source",
                    "storage.VolumeAttachmentSource{...}",
                    "must specify exactly one of inlineVolumeSpec and persistentVolumeName",
                ));
            }
            let node = s(spec, "nodeName");
            if node.is_empty() {
                errs.push(FieldError::required("spec.nodeName", ""));
            } else {
                super::name_ref(errs, names::name_is_dns_subdomain, node, "spec.nodeName");
            }
        }
        _ => {}
    }
}

pub fn validate_update(errs: &mut Errs, kind: &str, new: &Value, old: &Value) {
    match kind {
        "StorageClass" => {
            if !super::same(new.get("parameters"), old.get("parameters")) {
                errs.push(FieldError::forbidden(
                    "parameters",
                    "updates to parameters are forbidden.",
                ));
            }
            if s(new, "provisioner") != s(old, "provisioner") {
                errs.push(FieldError::forbidden(
                    "provisioner",
                    "updates to provisioner are forbidden.",
                ));
            }
            if !super::same(new.get("reclaimPolicy"), old.get("reclaimPolicy")) {
                errs.push(FieldError::forbidden(
                    "reclaimPolicy",
                    "updates to reclaimPolicy are forbidden.",
                ));
            }
            if !super::same(new.get("volumeBindingMode"), old.get("volumeBindingMode")) {
                errs.push(FieldError::immutable_shown(
                    "volumeBindingMode",
                    &crate::field::go_quote(s(new, "volumeBindingMode")),
                ));
            }
        }
        "VolumeAttachment" => {
            if !super::same(new.get("spec"), old.get("spec")) {
                errs.push(FieldError::immutable_shown(
                    "spec",
                    "storage.VolumeAttachmentSpec{...}",
                ));
            }
        }
        "CSIDriver" => {
            for f in [
                "attachRequired",
                "podInfoOnMount",
                "volumeLifecycleModes",
                "fsGroupPolicy",
            ] {
                let (n, o) = (new.at(&format!("/spec/{f}")), old.at(&format!("/spec/{f}")));
                if !super::same(n, o) {
                    let shown = n.map_or("\"null\"".to_string(), crate::field::show);
                    errs.push(FieldError::immutable_shown(format!("spec.{f}"), &shown));
                }
            }
        }
        _ => {}
    }
}
