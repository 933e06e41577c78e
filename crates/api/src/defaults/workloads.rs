//! apps/v1 and batch/v1 defaults.

use serde_json::{json, Map, Value};

use super::{core, ensure_obj, pod, set_default, zero_status};
use crate::meta::At as _;

pub fn apply(kind: &str, m: &mut Map<String, Value>) {
    match kind {
        "Deployment" => {
            let spec = ensure_obj(m, "spec");
            set_default(spec, "replicas", json!(1));
            let st = ensure_obj(spec, "strategy");
            set_default(st, "type", json!("RollingUpdate"));
            if st.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                let ru = ensure_obj(st, "rollingUpdate");
                set_default(ru, "maxUnavailable", json!("25%"));
                set_default(ru, "maxSurge", json!("25%"));
            }
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
            template(spec);
            zero_status(m, json!({}));
        }
        "ReplicaSet" => {
            let spec = ensure_obj(m, "spec");
            set_default(spec, "replicas", json!(1));
            template(spec);
            zero_status(m, json!({"replicas": 0}));
        }
        "DaemonSet" => {
            let spec = ensure_obj(m, "spec");
            let us = ensure_obj(spec, "updateStrategy");
            set_default(us, "type", json!("RollingUpdate"));
            if us.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                let ru = ensure_obj(us, "rollingUpdate");
                set_default(ru, "maxUnavailable", json!(1));
                set_default(ru, "maxSurge", json!(0));
            }
            set_default(spec, "revisionHistoryLimit", json!(10));
            template(spec);
            zero_status(
                m,
                json!({"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0}),
            );
        }
        "StatefulSet" => {
            let spec = ensure_obj(m, "spec");
            set_default(spec, "podManagementPolicy", json!("OrderedReady"));
            let us = ensure_obj(spec, "updateStrategy");
            if us
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                us.insert("type".into(), json!("RollingUpdate"));
                set_default(us, "rollingUpdate", json!({}));
            }
            if us.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                if let Some(ru) = us.get_mut("rollingUpdate").and_then(Value::as_object_mut) {
                    set_default(ru, "partition", json!(0));
                }
            }
            let p = ensure_obj(spec, "persistentVolumeClaimRetentionPolicy");
            set_default(p, "whenDeleted", json!("Retain"));
            set_default(p, "whenScaled", json!("Retain"));
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            template(spec);
            if let Some(claims) = spec
                .get_mut("volumeClaimTemplates")
                .and_then(Value::as_array_mut)
            {
                for c in claims.iter_mut().filter_map(Value::as_object_mut) {
                    set_default(c, "apiVersion", json!("v1"));
                    set_default(c, "kind", json!("PersistentVolumeClaim"));
                    ensure_obj(c, "metadata")
                        .entry("creationTimestamp")
                        .or_insert(Value::Null);
                    core::pvc_spec(ensure_obj(c, "spec"));
                    set_default(ensure_obj(c, "status"), "phase", json!("Pending"));
                }
            }
            zero_status(m, json!({"availableReplicas": 0, "replicas": 0}));
        }
        "Job" => {
            job(m);
            zero_status(m, json!({}));
        }
        "CronJob" => {
            let spec = ensure_obj(m, "spec");
            set_default(spec, "concurrencyPolicy", json!("Allow"));
            set_default(spec, "suspend", json!(false));
            set_default(spec, "successfulJobsHistoryLimit", json!(3));
            set_default(spec, "failedJobsHistoryLimit", json!(1));
            let jt = ensure_obj(spec, "jobTemplate");
            ensure_obj(jt, "metadata")
                .entry("creationTimestamp")
                .or_insert(Value::Null);
            let js = ensure_obj(jt, "spec");
            pod_failure_policy(js);
            template(js);
            zero_status(m, json!({}));
        }
        _ => {}
    }
}

fn template(spec: &mut Map<String, Value>) {
    let t = spec.entry("template").or_insert_with(|| json!({}));
    pod::template(t);
}

fn pod_failure_policy(spec: &mut Map<String, Value>) {
    if let Some(rules) = spec
        .get_mut("podFailurePolicy")
        .and_then(|p| p.get_mut("rules"))
        .and_then(Value::as_array_mut)
    {
        for r in rules.iter_mut() {
            if let Some(conds) = r.get_mut("onPodConditions").and_then(Value::as_array_mut) {
                for c in conds.iter_mut().filter_map(Value::as_object_mut) {
                    set_default(c, "status", json!("True"));
                }
            }
        }
    }
}

/// `SetDefaults_Job`.
fn job(m: &mut Map<String, Value>) {
    let template_labels = m
        .get("spec")
        .and_then(|s| s.at("/template/metadata/labels"))
        .filter(|l| !l.is_null())
        .cloned();
    let spec = ensure_obj(m, "spec");
    let has = |s: &Map<String, Value>, k: &str| s.get(k).is_some_and(|v| !v.is_null());
    if !has(spec, "completions") && !has(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
        spec.insert("parallelism".into(), json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    let backoff = if has(spec, "backoffLimitPerIndex") {
        json!(i32::MAX)
    } else {
        json!(6)
    };
    set_default(spec, "backoffLimit", backoff);
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    let replacement = if has(spec, "podFailurePolicy") {
        "Failed"
    } else {
        "TerminatingOrFailed"
    };
    set_default(spec, "podReplacementPolicy", json!(replacement));
    pod_failure_policy(spec);
    template(spec);
    if let Some(labels) = template_labels {
        let md = ensure_obj(m, "metadata");
        if md
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty)
        {
            md.insert("labels".into(), labels);
        }
    }
}

/// The Job strategy's `generateSelector`: unless `manualSelector` is true, label the template
/// with the Job's uid and name and select on the uid.
pub fn generate_job_selector(obj: &mut Value) {
    let uid = obj
        .at("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let name = obj
        .at("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    let spec = ensure_obj(m, "spec");
    if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let labels = ensure_obj(
        ensure_obj(ensure_obj(spec, "template"), "metadata"),
        "labels",
    );
    for (k, v) in [
        ("batch.kubernetes.io/controller-uid", &uid),
        ("batch.kubernetes.io/job-name", &name),
        ("controller-uid", &uid),
        ("job-name", &name),
    ] {
        labels.entry(k).or_insert_with(|| json!(v));
    }
    let labels = Value::Object(labels.clone());
    spec.entry("manualSelector").or_insert(json!(false));
    if spec.get("selector").is_none_or(Value::is_null) {
        spec.insert(
            "selector".into(),
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        );
    }
    let md = ensure_obj(m, "metadata");
    if md
        .get("labels")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty)
    {
        md.insert("labels".into(), labels);
    }
}

/// Keep a Job's generated selector and template labels when an update leaves them out.
pub fn carry_job_selector(new: &mut Value, old: &Value) {
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    if spec.get("selector").is_none_or(Value::is_null) {
        if let Some(sel) = old.at("/spec/selector") {
            spec.insert("selector".into(), sel.clone());
        }
    }
    if let Some(old_labels) = old
        .at("/spec/template/metadata/labels")
        .and_then(Value::as_object)
    {
        let labels = ensure_obj(
            ensure_obj(ensure_obj(spec, "template"), "metadata"),
            "labels",
        );
        for k in [
            "batch.kubernetes.io/controller-uid",
            "batch.kubernetes.io/job-name",
            "controller-uid",
            "job-name",
        ] {
            if let Some(v) = old_labels.get(k) {
                labels.entry(k).or_insert_with(|| v.clone());
            }
        }
    }
}

/// The annotation an apps/v1 DaemonSet carries its template generation in (the internal
/// `spec.templateGeneration`, which the v1 form has no field for).
pub const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

/// The template generation a DaemonSet carries: 0 when the annotation is missing (or does not
/// parse as an integer; Kubernetes would refuse to decode such a body).
fn template_generation(ds: &Value) -> i64 {
    ds.at("/metadata/annotations")
        .and_then(|a| a.get(TEMPLATE_GENERATION))
        .and_then(Value::as_str)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn set_template_generation(ds: &mut Value, generation: i64) {
    let Some(m) = ds.as_object_mut() else {
        return;
    };
    let annotations = ensure_obj(ensure_obj(m, "metadata"), "annotations");
    annotations.insert(TEMPLATE_GENERATION.into(), json!(generation.to_string()));
}

/// The DaemonSet strategy's `PrepareForCreate`: the template generation starts at 1 (one the
/// client sent that is at least 1 stays).
pub fn daemon_set_generation_on_create(ds: &mut Value) {
    let generation = template_generation(ds).max(1);
    set_template_generation(ds, generation);
}

/// The DaemonSet strategy's `PrepareForUpdate`: the stored template generation, plus one when
/// the (defaulted) pod template changes. Whatever the client sent in the annotation is
/// ignored. `metadata.generation` moves with any spec change, in the registry.
pub fn daemon_set_generation_on_update(new: &mut Value, old: &Value) {
    let mut defaulted = new.clone();
    if let Some(m) = defaulted.as_object_mut() {
        apply("DaemonSet", m);
    }
    let changed = defaulted.at("/spec/template") != old.at("/spec/template");
    let generation = template_generation(old).saturating_add(i64::from(changed));
    set_template_generation(new, generation);
}

/// The DaemonSet status strategy keeps the spec, and with it the template generation.
pub fn daemon_set_keep_generation(new: &mut Value, old: &Value) {
    let stored = old
        .at("/metadata/annotations")
        .and_then(|a| a.get(TEMPLATE_GENERATION))
        .cloned();
    let Some(m) = new.as_object_mut() else {
        return;
    };
    match stored {
        Some(v) => {
            ensure_obj(ensure_obj(m, "metadata"), "annotations")
                .insert(TEMPLATE_GENERATION.into(), v);
        }
        None => {
            if let Some(a) = m
                .get_mut("metadata")
                .and_then(|md| md.get_mut("annotations"))
                .and_then(Value::as_object_mut)
            {
                a.remove(TEMPLATE_GENERATION);
            }
        }
    }
}
