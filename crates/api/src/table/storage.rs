//! storage.k8s.io: storage classes, CSI drivers and nodes, volume attachments, storage
//! capacities and volume attributes classes.

use serde_json::{json, Value};

use super::core::annotation_true;
use super::duration::{self, Nanos};
use super::format::{at, count, list, name, text};
use super::quantity;
use super::{doc, Column, Description, Printer, AGE, NAME};

fn age(obj: &Value, now: Nanos) -> Value {
    json!(duration::since(
        at(obj, &["metadata", "creationTimestamp"]),
        now
    ))
}

fn bool_or(obj: &Value, path: &[&str], default: bool) -> bool {
    at(obj, path).and_then(Value::as_bool).unwrap_or(default)
}

const STORAGE_CLASS_DEF: &str = "io.k8s.api.storage.v1.StorageClass";

pub(crate) static STORAGE_CLASS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Provisioner",
            "string",
            doc(STORAGE_CLASS_DEF, "provisioner"),
        ),
        Column::new(
            "ReclaimPolicy",
            "string",
            doc(STORAGE_CLASS_DEF, "reclaimPolicy"),
        ),
        Column::new(
            "VolumeBindingMode",
            "string",
            doc(STORAGE_CLASS_DEF, "volumeBindingMode"),
        ),
        Column::new(
            "AllowVolumeExpansion",
            "string",
            doc(STORAGE_CLASS_DEF, "allowVolumeExpansion"),
        ),
        AGE,
    ],
    row: |obj, now| {
        let mut class = name(obj).to_string();
        if annotation_true(obj, "storageclass.kubernetes.io/is-default-class")
            || annotation_true(obj, "storageclass.beta.kubernetes.io/is-default-class")
        {
            class.push_str(" (default)");
        }
        let or = |field: &str, default: &'static str| match text(obj, &[field]) {
            "" => default.to_string(),
            v => v.to_string(),
        };
        vec![
            json!(class),
            json!(text(obj, &["provisioner"])),
            json!(or("reclaimPolicy", "Delete")),
            json!(or("volumeBindingMode", "Immediate")),
            json!(bool_or(obj, &["allowVolumeExpansion"], false)),
            age(obj, now),
        ]
    },
};

const CSI_DRIVER_SPEC: &str = "io.k8s.api.storage.v1.CSIDriverSpec";

pub(crate) static CSI_DRIVER: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "AttachRequired",
            "boolean",
            doc(CSI_DRIVER_SPEC, "attachRequired"),
        ),
        Column::new(
            "PodInfoOnMount",
            "boolean",
            doc(CSI_DRIVER_SPEC, "podInfoOnMount"),
        ),
        Column::new(
            "StorageCapacity",
            "boolean",
            doc(CSI_DRIVER_SPEC, "storageCapacity"),
        ),
        Column::new(
            "TokenRequests",
            "string",
            doc(CSI_DRIVER_SPEC, "tokenRequests"),
        ),
        Column::new(
            "RequiresRepublish",
            "boolean",
            doc(CSI_DRIVER_SPEC, "requiresRepublish"),
        ),
        Column::new(
            "Modes",
            "string",
            doc(CSI_DRIVER_SPEC, "volumeLifecycleModes"),
        ),
        AGE,
    ],
    row: |obj, now| {
        let token_requests = match at(obj, &["spec", "tokenRequests"]) {
            None => "<unset>".to_string(),
            Some(t) => t
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|r| text(r, &["audience"]))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default(),
        };
        let modes: Vec<&str> = list(obj, &["spec", "volumeLifecycleModes"])
            .iter()
            .map(|m| m.as_str().unwrap_or(""))
            .collect();
        let modes = modes.join(",");
        vec![
            json!(name(obj)),
            json!(bool_or(obj, &["spec", "attachRequired"], true)),
            json!(bool_or(obj, &["spec", "podInfoOnMount"], false)),
            json!(bool_or(obj, &["spec", "storageCapacity"], false)),
            json!(token_requests),
            json!(bool_or(obj, &["spec", "requiresRepublish"], false)),
            json!(if modes.is_empty() {
                "<none>".into()
            } else {
                modes
            }),
            age(obj, now),
        ]
    },
};

pub(crate) static CSI_NODE: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Drivers",
            "integer",
            Description::Text("Drivers indicates the number of CSI drivers registered on the node"),
        ),
        AGE,
    ],
    row: |obj, now| {
        vec![
            json!(name(obj)),
            json!(count(obj, &["spec", "drivers"])),
            age(obj, now),
        ]
    },
};

const VA_SPEC: &str = "io.k8s.api.storage.v1.VolumeAttachmentSpec";

pub(crate) static VOLUME_ATTACHMENT: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Attacher", "string", doc(VA_SPEC, "attacher")).name_format(),
        Column::new(
            "PV",
            "string",
            doc(
                "io.k8s.api.storage.v1.VolumeAttachmentSource",
                "persistentVolumeName",
            ),
        ),
        Column::new("Node", "string", doc(VA_SPEC, "nodeName")),
        Column::new(
            "Attached",
            "boolean",
            doc("io.k8s.api.storage.v1.VolumeAttachmentStatus", "attached"),
        ),
        AGE,
    ],
    row: |obj, now| {
        vec![
            json!(name(obj)),
            json!(text(obj, &["spec", "attacher"])),
            json!(text(obj, &["spec", "source", "persistentVolumeName"])),
            json!(text(obj, &["spec", "nodeName"])),
            json!(bool_or(obj, &["status", "attached"], false)),
            age(obj, now),
        ]
    },
};

const CAPACITY_DEF: &str = "io.k8s.api.storage.v1.CSIStorageCapacity";

pub(crate) static CSI_STORAGE_CAPACITY: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "StorageClassName",
            "string",
            doc(CAPACITY_DEF, "storageClassName"),
        ),
        Column::new("Capacity", "string", doc(CAPACITY_DEF, "capacity")),
    ],
    row: |obj, _now| {
        let capacity = match at(obj, &["capacity"]) {
            None => "<unset>".to_string(),
            c => quantity::field(c),
        };
        vec![
            json!(name(obj)),
            json!(text(obj, &["storageClassName"])),
            json!(capacity),
        ]
    },
};

pub(crate) static VOLUME_ATTRIBUTES_CLASS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "DriverName",
            "string",
            doc(
                "io.k8s.api.storage.v1beta1.VolumeAttributesClass",
                "driverName",
            ),
        ),
        AGE,
    ],
    row: |obj, now| {
        let mut class = name(obj).to_string();
        if annotation_true(
            obj,
            "volumeattributesclass.alpha.kubernetes.io/is-default-class",
        ) {
            class.push_str(" (default)");
        }
        vec![
            json!(class),
            json!(text(obj, &["driverName"])),
            age(obj, now),
        ]
    },
};
