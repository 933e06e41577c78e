//! Core configuration and storage kinds: config maps, secrets, service accounts, persistent
//! volumes and claims, resource quotas.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::duration::{self, Nanos};
use super::format::{at, count, list, meta_map, name, opt_text, text};
use super::quantity;
use super::{doc, Column, Description, Printer, AGE, NAME};

fn age(obj: &Value, now: Nanos) -> Value {
    json!(duration::since(
        at(obj, &["metadata", "creationTimestamp"]),
        now
    ))
}

pub(crate) static CONFIG_MAP: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Data",
            "string",
            doc("io.k8s.api.core.v1.ConfigMap", "data"),
        ),
        AGE,
    ],
    row: |obj, now| {
        vec![
            json!(name(obj)),
            json!(count(obj, &["data"]) + count(obj, &["binaryData"])),
            age(obj, now),
        ]
    },
};

const SECRET_DEF: &str = "io.k8s.api.core.v1.Secret";

pub(crate) static SECRET: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Type", "string", doc(SECRET_DEF, "type")),
        Column::new("Data", "string", doc(SECRET_DEF, "data")),
        AGE,
    ],
    row: |obj, now| {
        // stringData is merged into data when a secret is written.
        let keys: BTreeSet<&String> = ["data", "stringData"]
            .iter()
            .filter_map(|f| at(obj, &[f]).and_then(Value::as_object))
            .flat_map(|m| m.keys())
            .collect();
        vec![
            json!(name(obj)),
            json!(text(obj, &["type"])),
            json!(keys.len()),
            age(obj, now),
        ]
    },
};

pub(crate) static SERVICE_ACCOUNT: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Secrets",
            "string",
            doc("io.k8s.api.core.v1.ServiceAccount", "secrets"),
        ),
        AGE,
    ],
    row: |obj, now| {
        vec![
            json!(name(obj)),
            json!(count(obj, &["secrets"])),
            age(obj, now),
        ]
    },
};

/// Access modes in their short forms, in Kubernetes' fixed order.
fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|v| v.as_str() == Some(m));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(long, _)| has(long))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
const PV_SPEC: &str = "io.k8s.api.core.v1.PersistentVolumeSpec";
const PV_STATUS: &str = "io.k8s.api.core.v1.PersistentVolumeStatus";

pub(crate) static PERSISTENT_VOLUME: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Capacity", "string", doc(PV_SPEC, "capacity")),
        Column::new("Access Modes", "string", doc(PV_SPEC, "accessModes")),
        Column::new(
            "Reclaim Policy",
            "string",
            doc(PV_SPEC, "persistentVolumeReclaimPolicy"),
        ),
        Column::new("Status", "string", doc(PV_STATUS, "phase")),
        Column::new("Claim", "string", doc(PV_SPEC, "claimRef")),
        Column::new(
            "StorageClass",
            "string",
            Description::Text("StorageClass of the pv"),
        ),
        Column::new(
            "VolumeAttributesClass",
            "string",
            Description::Text("VolumeAttributesClass of the pv"),
        ),
        Column::new("Reason", "string", doc(PV_STATUS, "reason")),
        AGE,
        Column::new("VolumeMode", "string", doc(PV_SPEC, "volumeMode")).wide(),
    ],
    row: pv_row,
};

fn phase_or_terminating(obj: &Value) -> String {
    if at(obj, &["metadata", "deletionTimestamp"]).is_some() {
        "Terminating".into()
    } else {
        text(obj, &["status", "phase"]).into()
    }
}

fn unset_or(v: Option<&str>) -> String {
    v.unwrap_or("<unset>").to_string()
}

fn pv_row(pv: &Value, now: Nanos) -> Vec<Value> {
    let claim = at(pv, &["spec", "claimRef"]).map_or(String::new(), |c| {
        format!("{}/{}", text(c, &["namespace"]), text(c, &["name"]))
    });
    let class = meta_map(pv, "annotations", BETA_STORAGE_CLASS)
        .unwrap_or_else(|| text(pv, &["spec", "storageClassName"]));
    vec![
        json!(name(pv)),
        json!(quantity::field(at(pv, &["spec", "capacity", "storage"]))),
        json!(access_modes(list(pv, &["spec", "accessModes"]))),
        json!(text(pv, &["spec", "persistentVolumeReclaimPolicy"])),
        json!(phase_or_terminating(pv)),
        json!(claim),
        json!(class),
        json!(unset_or(opt_text(
            pv,
            &["spec", "volumeAttributesClassName"]
        ))),
        json!(text(pv, &["status", "reason"])),
        age(pv, now),
        json!(unset_or(opt_text(pv, &["spec", "volumeMode"]))),
    ]
}

const PVC_SPEC: &str = "io.k8s.api.core.v1.PersistentVolumeClaimSpec";
const PVC_STATUS: &str = "io.k8s.api.core.v1.PersistentVolumeClaimStatus";

pub(crate) static PERSISTENT_VOLUME_CLAIM: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Status", "string", doc(PVC_STATUS, "phase")),
        Column::new("Volume", "string", doc(PVC_SPEC, "volumeName")),
        Column::new("Capacity", "string", doc(PVC_STATUS, "capacity")),
        Column::new("Access Modes", "string", doc(PVC_STATUS, "accessModes")),
        Column::new(
            "StorageClass",
            "string",
            Description::Text("StorageClass of the pvc"),
        ),
        Column::new(
            "VolumeAttributesClass",
            "string",
            Description::Text("VolumeAttributesClass of the pvc"),
        ),
        AGE,
        Column::new("VolumeMode", "string", doc(PVC_SPEC, "volumeMode")).wide(),
    ],
    row: pvc_row,
};

fn pvc_row(pvc: &Value, now: Nanos) -> Vec<Value> {
    let volume = text(pvc, &["spec", "volumeName"]);
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            quantity::field(at(pvc, &["status", "capacity", "storage"])),
            access_modes(list(pvc, &["status", "accessModes"])),
        )
    };
    let class = meta_map(pvc, "annotations", BETA_STORAGE_CLASS)
        .unwrap_or_else(|| text(pvc, &["spec", "storageClassName"]));
    vec![
        json!(name(pvc)),
        json!(phase_or_terminating(pvc)),
        json!(volume),
        json!(capacity),
        json!(modes),
        json!(class),
        json!(unset_or(opt_text(
            pvc,
            &["spec", "volumeAttributesClassName"]
        ))),
        age(pvc, now),
        json!(unset_or(opt_text(pvc, &["spec", "volumeMode"]))),
    ]
}

pub(crate) static RESOURCE_QUOTA: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Request",
            "string",
            Description::Text(
                "Request represents a minimum amount of cpu/memory that a container may consume.",
            ),
        ),
        Column::new(
            "Limit",
            "string",
            Description::Text(
                "Limits control the maximum amount of cpu/memory that a container may use \
                 independent of contention on the node.",
            ),
        ),
        AGE,
    ],
    row: quota_row,
};

/// "resource: used/hard" for every hard limit, sorted by resource name; resources named
/// `limits.*` go to the Limit column, all others to Request.
fn quota_row(quota: &Value, now: Nanos) -> Vec<Value> {
    let mut requests: Vec<String> = Vec::new();
    let mut limits: Vec<String> = Vec::new();
    if let Some(hard) = at(quota, &["status", "hard"]).and_then(Value::as_object) {
        let mut resources: Vec<&String> = hard.keys().collect();
        resources.sort();
        for r in resources {
            let used = quantity::field(at(quota, &["status", "used", r]));
            let entry = format!("{r}: {used}/{}", quantity::field(hard.get(r)));
            let pieces: Vec<&str> = r.split('.').collect();
            if pieces.len() > 1 && pieces[0] == "limits" {
                limits.push(entry);
            } else {
                requests.push(entry);
            }
        }
    }
    vec![
        json!(name(quota)),
        json!(requests.join(", ")),
        json!(limits.join(", ")),
        age(quota, now),
    ]
}
