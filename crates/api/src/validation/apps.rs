//! apps/v1 workloads and ReplicationControllers: selectors matching templates, replica counts,
//! update strategies, and the fields updates may not touch.

use serde_json::Value;

use super::{child, get, gofmt, int, jstr, meta, names, nonneg, obj, pod, s, Errs};
use crate::field::FieldError;
use crate::meta::At as _;

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

/// What `metav1.LabelSelectorAsSelector` makes of a `spec.selector`.
#[derive(Clone, Copy)]
enum Sel<'a> {
    /// No selector at all: `labels.Nothing()`, which matches no labels (so a template's
    /// labels never satisfy it).
    Nothing,
    /// A selector that converts; an empty one matches everything.
    Of(&'a Value),
    /// One that does not convert (an unknown operator, values where none belong ...).
    Unconvertible,
}

fn as_selector(sel: Option<&Value>) -> Sel<'_> {
    match sel {
        None => Sel::Nothing,
        Some(s) if meta::selector_is_convertible(s) => Sel::Of(s),
        Some(_) => Sel::Unconvertible,
    }
}

/// The selector checks Deployments, ReplicaSets and StatefulSets share: required, valid
/// (strictly) and non-empty (`empty selector is invalid for <kind_word>`).
fn required_selector<'a>(errs: &mut Errs, spec: &'a Value, kind_word: &str) -> Option<&'a Value> {
    let sel = get(spec, "selector");
    match sel {
        None => errs.push(FieldError::required("spec.selector", "")),
        Some(sel) => {
            meta::label_selector(errs, Some(sel), "spec.selector");
            if meta::selector_is_empty(sel) {
                errs.push(FieldError::invalid_shown(
                    "spec.selector",
                    &gofmt::label_selector(Some(sel)),
                    &format!("empty selector is invalid for {kind_word}"),
                ));
            }
        }
    }
    sel
}

/// `Invalid` on `spec.selector` for a selector that does not convert, with `detail`.
fn unconvertible(errs: &mut Errs, spec: &Value, detail: &str) {
    errs.push(FieldError::invalid_shown(
        "spec.selector",
        &gofmt::label_selector(get(spec, "selector")),
        detail,
    ));
}

/// The template's labels must satisfy the selector: never when there is no selector, always
/// when it is empty.
fn labels_match(errs: &mut Errs, sel: Sel<'_>, template: &Value) {
    let labels = template.at("/metadata/labels");
    let matches = match sel {
        Sel::Nothing => false,
        Sel::Of(sel) => meta::selector_matches(sel, labels),
        Sel::Unconvertible => true,
    };
    if !matches {
        errs.push(FieldError::invalid_shown(
            "spec.template.metadata.labels",
            &gofmt::string_map(labels),
            "`selector` does not match template `labels`",
        ));
    }
}

/// `ValidatePodTemplateSpecForReplicaSet` (Deployments and ReplicaSets), run when the selector
/// converts.
fn template_for_replica_set(errs: &mut Errs, spec: &Value, sel: Sel<'_>, owner: &str) {
    let Some(t) = get(spec, "template") else {
        errs.push(FieldError::required("spec.template", ""));
        return;
    };
    labels_match(errs, sel, t);
    pod::template_spec(errs, Some(t), "spec.template");
    always_restart(errs, t);
    active_deadline_forbidden(errs, t, owner);
}

fn always_restart(errs: &mut Errs, t: &Value) {
    let rp = t
        .at("/spec/restartPolicy")
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

/// Workload pods run until replaced: `activeDeadlineSeconds in <owner> is not Supported`.
fn active_deadline_forbidden(errs: &mut Errs, t: &Value, owner: &str) {
    if t.at("/spec/activeDeadlineSeconds")
        .is_some_and(|v| !v.is_null())
    {
        errs.push(FieldError::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            &format!("activeDeadlineSeconds in {owner} is not Supported"),
        ));
    }
}

/// `ValidatePositiveIntOrPercent`.
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

/// `getIntOrPercentValue`: a valid percent's number (and `true`), else the integer (a string
/// that is not a valid percent counts as what `strconv.Atoi` makes of it, 0 when nothing).
fn int_or_percent_value(v: Option<&Value>) -> (i64, bool) {
    match v {
        Some(Value::String(s)) if names::percent(s).is_empty() => {
            (s[..s.len() - 1].parse().unwrap_or(0), true)
        }
        Some(Value::String(s)) => (s.parse().unwrap_or(0), false),
        Some(v) => (v.as_i64().unwrap_or(0), false),
        None => (0, false),
    }
}

/// `IsNotMoreThan100Percent`.
fn not_more_than_100_percent(errs: &mut Errs, v: Option<&Value>, path: &str) {
    let (n, pct) = int_or_percent_value(v);
    if pct && n > 100 {
        errs.push(FieldError::invalid_shown(
            path,
            &gofmt::int_or_string(v.unwrap_or(&Value::Null)),
            "must not be greater than 100%",
        ));
    }
}

/// `ValidateRollingUpdateDeployment`.
fn rolling_update(errs: &mut Errs, ru: &Value, path: &str) {
    let (mu, ms) = (get(ru, "maxUnavailable"), get(ru, "maxSurge"));
    let mup = child(path, "maxUnavailable");
    int_or_percent(errs, mu, &mup);
    int_or_percent(errs, ms, &child(path, "maxSurge"));
    if int_or_percent_value(mu).0 == 0 && int_or_percent_value(ms).0 == 0 {
        errs.push(FieldError::invalid_shown(
            &mup,
            &gofmt::int_or_string(mu.unwrap_or(&Value::from(0))),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
    not_more_than_100_percent(errs, mu, &mup);
}

/// `ValidateRollingUpdateDaemonSet`: both within 100%, and exactly one of them non-zero.
fn daemon_set_rolling_update(errs: &mut Errs, ru: &Value, path: &str) {
    let (mu, ms) = (get(ru, "maxUnavailable"), get(ru, "maxSurge"));
    let (mup, msp) = (child(path, "maxUnavailable"), child(path, "maxSurge"));
    int_or_percent(errs, mu, &mup);
    int_or_percent(errs, ms, &msp);
    not_more_than_100_percent(errs, mu, &mup);
    not_more_than_100_percent(errs, ms, &msp);
    let has_unavailable = int_or_percent_value(mu).0 != 0;
    let has_surge = int_or_percent_value(ms).0 != 0;
    if has_unavailable && has_surge {
        errs.push(FieldError::invalid_shown(
            &msp,
            &gofmt::int_or_string(ms.unwrap_or(&Value::from(0))),
            "may not be set when maxUnavailable is non-zero",
        ));
    } else if !has_unavailable && !has_surge {
        errs.push(FieldError::required(&mup, "cannot be 0 when maxSurge is 0"));
    }
}

fn deployment_spec(errs: &mut Errs, spec: &Value) {
    nonneg(errs, int(spec, "replicas"), "spec.replicas");
    let sel = as_selector(required_selector(errs, spec, "deployment"));
    match sel {
        Sel::Unconvertible => unconvertible(errs, spec, "invalid label selector"),
        _ => template_for_replica_set(errs, spec, sel, "ReplicaSet"),
    }
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
            Some(ru) => rolling_update(errs, ru, "spec.strategy.rollingUpdate"),
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
    let sel = as_selector(required_selector(errs, spec, "deployment"));
    match sel {
        Sel::Unconvertible => unconvertible(errs, spec, "invalid label selector"),
        _ => template_for_replica_set(errs, spec, sel, "ReplicaSet"),
    }
}

/// `ValidateDaemonSetSpec`: the selector is not required (a missing one matches no template
/// labels), and the template is validated in full whatever the selector.
fn daemon_set_spec(errs: &mut Errs, spec: &Value) {
    let sel = get(spec, "selector");
    meta::label_selector(errs, sel, "spec.selector");
    let template = get(spec, "template");
    labels_match(errs, as_selector(sel), template.unwrap_or(&Value::Null));
    if sel.is_some_and(meta::selector_is_empty) {
        errs.push(FieldError::invalid_shown(
            "spec.selector",
            &gofmt::label_selector(sel),
            "empty selector is invalid for daemonset",
        ));
    }
    match template {
        None => errs.push(FieldError::required("spec.template", "")),
        Some(t) => {
            pod::template_spec(errs, Some(t), "spec.template");
            always_restart(errs, t);
            active_deadline_forbidden(errs, t, "DaemonSet");
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
            Some(ru) => daemon_set_rolling_update(errs, ru, "spec.updateStrategy.rollingUpdate"),
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

/// `validateRollingUpdateStatefulSet`.
fn stateful_set_rolling_update(errs: &mut Errs, ru: &Value) {
    let path = "spec.updateStrategy.rollingUpdate";
    nonneg(errs, int(ru, "partition"), &child(path, "partition"));
    if let Some(mu) = get(ru, "maxUnavailable") {
        let mup = child(path, "maxUnavailable");
        int_or_percent(errs, Some(mu), &mup);
        if int_or_percent_value(Some(mu)).0 == 0 {
            errs.push(FieldError::invalid_shown(
                &mup,
                &gofmt::int_or_string(mu),
                "cannot be 0",
            ));
        }
        not_more_than_100_percent(errs, Some(mu), &mup);
    }
}

/// `ValidateStatefulSetSpec`. The pod template is not validated as a pod (its volume mounts
/// may name volumeClaimTemplates, which are not volumes of the template): only its labels
/// against the selector, its labels and annotations, the pod-specific annotations, the
/// restart policy and the absence of an active deadline. Kubernetes v1.32 does not validate
/// the volumeClaimTemplates either.
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
                stateful_set_rolling_update(errs, ru);
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
    nonneg(errs, int(spec, "replicas"), "spec.replicas");
    nonneg(errs, int(spec, "minReadySeconds"), "spec.minReadySeconds");
    if let Some(o) = get(spec, "ordinals") {
        nonneg(errs, int(o, "start"), "spec.ordinals.start");
    }
    let sel = as_selector(required_selector(errs, spec, "statefulset"));
    let t = spec.get("template").unwrap_or(&Value::Null);
    match sel {
        Sel::Unconvertible => unconvertible(errs, spec, ""),
        // `ValidatePodTemplateSpecForStatefulSet`.
        _ => {
            labels_match(errs, sel, t);
            pod::template_metadata(errs, t, "spec.template");
        }
    }
    always_restart(errs, t);
    active_deadline_forbidden(errs, t, "StatefulSet");
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
    let labels = t.at("/metadata/labels");
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
    if t.at("/spec/activeDeadlineSeconds")
        .is_some_and(|v| !v.is_null())
    {
        errs.push(FieldError::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            "activeDeadlineSeconds in ReplicationController is not Supported",
        ));
    }
}

fn immutable_selector(errs: &mut Errs, new: &Value, old: &Value) {
    let (n, o) = (new.at("/spec/selector"), old.at("/spec/selector"));
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
