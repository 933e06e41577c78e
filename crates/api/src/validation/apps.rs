//! apps/v1 workloads and ReplicationControllers: selectors matching templates, replica counts,
//! update strategies, and the fields updates may not touch.

use serde_json::Value;

use super::{arr, child, get, gofmt, int, jstr, meta, names, nonneg, obj, pod, s, Errs};
use crate::field::FieldError;

pub fn validate(errs: &mut Errs, kind: &str, o: &Value) {
    let spec = o.get("spec").unwrap_or(&Value::Null);
    match kind {
        "Deployment" => deployment_spec(errs, spec),
        "ReplicaSet" => replica_set_spec(errs, spec),
        "StatefulSet" => stateful_set_spec(errs, spec),
        "DaemonSet" => daemon_set_spec(errs, spec),
        "ControllerRevision" => {
            if get(o, "data").is_none() {
                errs.push(FieldError::required("data", "data is mandatory"));
            }
            nonneg(errs, int(o, "revision"), "revision");
        }
        _ => {}
    }
}

/// Selector present, valid and non-empty; returns it when it can be matched against labels.
fn selector<'a>(errs: &mut Errs, spec: &'a Value, kind_word: &str) -> Option<&'a Value> {
    match get(spec, "selector") {
        None => {
            errs.push(FieldError::required("spec.selector", ""));
            None
        }
        Some(sel) => {
            meta::label_selector(errs, Some(sel), "spec.selector");
            if meta::selector_is_empty(sel) {
                errs.push(FieldError::invalid_shown(
                    "spec.selector",
                    &gofmt::label_selector(Some(sel)),
                    &format!("empty selector is invalid for {kind_word}"),
                ));
            }
            if !meta::selector_is_convertible(sel) {
                errs.push(FieldError::invalid_shown(
                    "spec.selector",
                    &gofmt::label_selector(Some(sel)),
                    "invalid label selector",
                ));
                return None;
            }
            Some(sel)
        }
    }
}

fn labels_match(errs: &mut Errs, sel: Option<&Value>, template: &Value) {
    let labels = template.pointer("/metadata/labels");
    if let Some(sel) = sel {
        if !meta::selector_is_empty(sel) && !meta::selector_matches(sel, labels) {
            errs.push(FieldError::invalid_shown(
                "spec.template.metadata.labels",
                &gofmt::string_map(labels),
                "`selector` does not match template `labels`",
            ));
        }
    }
}

/// `ValidatePodTemplateSpecForReplicaSet` (Deployments and ReplicaSets).
fn template_for_replica_set(errs: &mut Errs, spec: &Value, sel: Option<&Value>, owner: &str) {
    let Some(t) = get(spec, "template") else {
        errs.push(FieldError::required("spec.template", ""));
        return;
    };
    labels_match(errs, sel, t);
    pod::template_spec(errs, Some(t), "spec.template");
    always_restart(errs, t);
    if t.pointer("/spec/activeDeadlineSeconds")
        .is_some_and(|v| !v.is_null())
    {
        errs.push(FieldError::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            &format!("activeDeadlineSeconds in {owner} is not Supported"),
        ));
    }
}

fn always_restart(errs: &mut Errs, t: &Value) {
    let rp = t
        .pointer("/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("");
    if rp != "Always" {
        errs.push(FieldError::not_supported(
            "spec.template.spec.restartPolicy",
            &jstr(rp),
            &["Always"],
        ));
    }
}

fn int_or_percent(errs: &mut Errs, v: Option<&Value>, path: &str) {
    match v {
        Some(Value::String(s)) => {
            for m in names::percent(s) {
                errs.push(FieldError::invalid_shown(
                    path,
                    &gofmt::int_or_string(&jstr(s)),
                    &m,
                ));
            }
        }
        Some(v) => nonneg(errs, v.as_i64(), path),
        None => {}
    }
}

/// The integer or percent value (percent of 100 for the 100% check).
fn int_or_percent_value(v: Option<&Value>) -> (i64, bool) {
    match v {
        Some(Value::String(s)) => (s.trim_end_matches('%').parse().unwrap_or(0), true),
        Some(v) => (v.as_i64().unwrap_or(0), false),
        None => (0, false),
    }
}

fn rolling_update(errs: &mut Errs, ru: &Value, path: &str, check_surge: bool) {
    let (mu, ms) = (get(ru, "maxUnavailable"), get(ru, "maxSurge"));
    let mup = child(path, "maxUnavailable");
    int_or_percent(errs, mu, &mup);
    if check_surge {
        int_or_percent(errs, ms, &child(path, "maxSurge"));
    }
    if int_or_percent_value(mu).0 == 0 && int_or_percent_value(ms).0 == 0 {
        errs.push(FieldError::invalid_shown(
            &mup,
            &gofmt::int_or_string(mu.unwrap_or(&Value::from(0))),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
    let (v, pct) = int_or_percent_value(mu);
    if pct && v > 100 {
        errs.push(FieldError::invalid_shown(
            &mup,
            &gofmt::int_or_string(mu.unwrap_or(&Value::Null)),
            "must not be greater than 100%",
        ));
    }
}

fn deployment_spec(errs: &mut Errs, spec: &Value) {
    nonneg(errs, int(spec, "replicas"), "spec.replicas");
    let sel = selector(errs, spec, "deployment");
    template_for_replica_set(errs, spec, sel, "ReplicaSet");
    let st = spec.get("strategy").unwrap_or(&Value::Null);
    let t = s(st, "type");
    match t {
        "Recreate" => {
            if get(st, "rollingUpdate").is_some() {
                errs.push(FieldError::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => match get(st, "rollingUpdate") {
            None => errs.push(FieldError::required(
                "spec.strategy.rollingUpdate",
                "this should be defaulted and never be nil",
            )),
            Some(ru) => rolling_update(errs, ru, "spec.strategy.rollingUpdate", true),
        },
        "" => errs.push(FieldError::required("spec.strategy.type", "")),
        _ => errs.push(FieldError::not_supported(
            "spec.strategy.type",
            &jstr(t),
            &["Recreate", "RollingUpdate"],
        )),
    }
    nonneg(errs, int(spec, "minReadySeconds"), "spec.minReadySeconds");
    nonneg(
        errs,
        int(spec, "revisionHistoryLimit"),
        "spec.revisionHistoryLimit",
    );
    if let Some(rb) = get(spec, "rollbackTo") {
        nonneg(errs, int(rb, "revision"), "spec.rollback.revision");
    }
    if let Some(pd) = int(spec, "progressDeadlineSeconds") {
        nonneg(errs, Some(pd), "spec.progressDeadlineSeconds");
        if pd <= int(spec, "minReadySeconds").unwrap_or(0) {
            errs.push(FieldError::invalid(
                "spec.progressDeadlineSeconds",
                &Value::from(pd),
                "must be greater than minReadySeconds",
            ));
        }
    }
}

fn replica_set_spec(errs: &mut Errs, spec: &Value) {
    nonneg(errs, int(spec, "replicas"), "spec.replicas");
    nonneg(errs, int(spec, "minReadySeconds"), "spec.minReadySeconds");
    let sel = selector(errs, spec, "deployment");
    template_for_replica_set(errs, spec, sel, "ReplicaSet");
}

fn daemon_set_spec(errs: &mut Errs, spec: &Value) {
    let sel = selector(errs, spec, "daemonset");
    match get(spec, "template") {
        None => errs.push(FieldError::required("spec.template", "")),
        Some(t) => {
            labels_match(errs, sel, t);
            pod::template_spec(errs, Some(t), "spec.template");
            always_restart(errs, t);
            if t.pointer("/spec/activeDeadlineSeconds")
                .is_some_and(|v| !v.is_null())
            {
                errs.push(FieldError::invalid_shown(
                    "spec.template.spec.activeDeadlineSeconds",
                    &t.pointer("/spec/activeDeadlineSeconds")
                        .map(|v| v.to_string())
                        .unwrap_or_default(),
                    "activeDeadlineSeconds in DaemonSet is not Supported",
                ));
            }
        }
    }
    nonneg(errs, int(spec, "minReadySeconds"), "spec.minReadySeconds");
    nonneg(
        errs,
        int(spec, "templateGeneration"),
        "spec.templateGeneration",
    );
    let us = spec.get("updateStrategy").unwrap_or(&Value::Null);
    let t = s(us, "type");
    match t {
        "OnDelete" => {}
        "RollingUpdate" => match get(us, "rollingUpdate") {
            None => errs.push(FieldError::required(
                "spec.updateStrategy.rollingUpdate",
                "",
            )),
            Some(ru) => rolling_update(errs, ru, "spec.updateStrategy.rollingUpdate", true),
        },
        "" => errs.push(FieldError::required("spec.updateStrategy.type", "")),
        _ => errs.push(FieldError::not_supported(
            "spec.updateStrategy.type",
            &jstr(t),
            &["OnDelete", "RollingUpdate"],
        )),
    }
    nonneg(
        errs,
        int(spec, "revisionHistoryLimit"),
        "spec.revisionHistoryLimit",
    );
}

fn stateful_set_spec(errs: &mut Errs, spec: &Value) {
    let pmp = s(spec, "podManagementPolicy");
    match pmp {
        "" => errs.push(FieldError::required("spec.podManagementPolicy", "")),
        "OrderedReady" | "Parallel" => {}
        _ => errs.push(FieldError::invalid(
            "spec.podManagementPolicy",
            &jstr(pmp),
            "must be 'OrderedReady' or 'Parallel'",
        )),
    }
    let us = spec.get("updateStrategy").unwrap_or(&Value::Null);
    match s(us, "type") {
        "" => errs.push(FieldError::required("spec.updateStrategy", "")),
        "OnDelete" => {
            if get(us, "rollingUpdate").is_some() {
                errs.push(FieldError::invalid_shown(
                    "spec.updateStrategy.rollingUpdate",
                    "&apps.RollingUpdateStatefulSetStrategy{...}",
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(ru) = get(us, "rollingUpdate") {
                nonneg(
                    errs,
                    int(ru, "partition"),
                    "spec.updateStrategy.rollingUpdate.partition",
                );
                if let Some(mu) = get(ru, "maxUnavailable") {
                    int_or_percent(
                        errs,
                        Some(mu),
                        "spec.updateStrategy.rollingUpdate.maxUnavailable",
                    );
                }
            }
        }
        _ => errs.push(FieldError::invalid_shown(
            "spec.updateStrategy",
            "apps.StatefulSetUpdateStrategy{...}",
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
    if let Some(p) = get(spec, "persistentVolumeClaimRetentionPolicy") {
        for f in ["whenDeleted", "whenScaled"] {
            let v = s(p, f);
            let path = format!("spec.persistentVolumeClaimRetentionPolicy.{f}");
            if !["Retain", "Delete"].contains(&v) {
                errs.push(FieldError::not_supported(
                    path,
                    &jstr(v),
                    &["Retain", "Delete"],
                ));
            }
        }
    }
    if let Some(o) = get(spec, "ordinals") {
        nonneg(errs, int(o, "start"), "spec.ordinals.start");
    }
    nonneg(errs, int(spec, "replicas"), "spec.replicas");
    nonneg(errs, int(spec, "minReadySeconds"), "spec.minReadySeconds");
    let sel = match get(spec, "selector") {
        None => {
            errs.push(FieldError::required("spec.selector", ""));
            None
        }
        Some(sel) => {
            meta::label_selector(errs, Some(sel), "spec.selector");
            if meta::selector_is_empty(sel) {
                errs.push(FieldError::invalid_shown(
                    "spec.selector",
                    &gofmt::label_selector(Some(sel)),
                    "empty selector is not valid for statefulset.",
                ));
            }
            meta::selector_is_convertible(sel).then_some(sel)
        }
    };
    let t = spec.get("template").unwrap_or(&Value::Null);
    labels_match(errs, sel, t);
    pod::template_spec(errs, Some(t), "spec.template");
    always_restart(errs, t);
    if let Some(ads) = t
        .pointer("/spec/activeDeadlineSeconds")
        .filter(|v| !v.is_null())
    {
        errs.push(FieldError::invalid(
            "spec.template.spec.activeDeadlineSeconds",
            ads,
            "must not be specified",
        ));
    }
    for (i, c) in arr(spec, "volumeClaimTemplates").iter().enumerate() {
        let p = format!("spec.volumeClaimTemplates[{i}]");
        meta::labels(errs, c.pointer("/metadata/labels"), &format!("{p}.labels"));
        super::claims::pvc_spec(
            errs,
            c.get("spec").unwrap_or(&Value::Null),
            &format!("{p}.spec"),
        );
    }
}

/// ReplicationController spec (`ValidateReplicationControllerSpec`).
pub fn rc_spec(errs: &mut Errs, o: &Value) {
    let spec = o.get("spec").unwrap_or(&Value::Null);
    nonneg(errs, int(spec, "minReadySeconds"), "spec.minReadySeconds");
    let sel = obj(spec, "selector").filter(|m| !m.is_empty());
    if sel.is_none() {
        errs.push(FieldError::required("spec.selector", ""));
    }
    nonneg(errs, int(spec, "replicas"), "spec.replicas");
    let Some(t) = get(spec, "template") else {
        errs.push(FieldError::required("spec.template", ""));
        return;
    };
    let labels = t.pointer("/metadata/labels");
    if let Some(sel) = sel {
        if !meta::map_selector_matches(sel, labels) {
            errs.push(FieldError::invalid_shown(
                "spec.template.metadata.labels",
                &gofmt::string_map(labels),
                "`selector` does not match template `labels`",
            ));
        }
    }
    pod::template_spec(errs, Some(t), "spec.template");
    always_restart(errs, t);
    if t.pointer("/spec/activeDeadlineSeconds")
        .is_some_and(|v| !v.is_null())
    {
        errs.push(FieldError::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            "activeDeadlineSeconds in ReplicationController is not Supported",
        ));
    }
}

fn immutable_selector(errs: &mut Errs, new: &Value, old: &Value) {
    let (n, o) = (new.pointer("/spec/selector"), old.pointer("/spec/selector"));
    if !super::same(n, o) {
        errs.push(FieldError::immutable_shown(
            "spec.selector",
            &gofmt::label_selector(n),
        ));
    }
}

/// Update rules: apps/v1 selectors are immutable; StatefulSets allow only some spec fields.
pub fn validate_update(errs: &mut Errs, kind: &str, new: &Value, old: &Value) {
    match kind {
        "Deployment" | "ReplicaSet" | "DaemonSet" => immutable_selector(errs, new, old),
        "StatefulSet" => {
            let strip = |v: &Value| {
                let mut spec = v.get("spec").cloned().unwrap_or(Value::Null);
                if let Some(m) = spec.as_object_mut() {
                    for f in [
                        "replicas",
                        "ordinals",
                        "template",
                        "updateStrategy",
                        "persistentVolumeClaimRetentionPolicy",
                        "minReadySeconds",
                    ] {
                        m.remove(f);
                    }
                }
                spec
            };
            if strip(new) != strip(old) {
                errs.push(FieldError::forbidden("spec", "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"));
            }
        }
        "ControllerRevision" => {
            if !super::same(new.get("data"), old.get("data")) {
                errs.push(FieldError::immutable_shown(
                    "data",
                    "runtime.RawExtension{...}",
                ));
            }
        }
        _ => {}
    }
}
