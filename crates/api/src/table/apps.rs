//! apps/v1: deployments, replica sets, stateful sets, daemon sets, controller revisions.

use serde_json::{json, Value};

use super::duration::{self, Nanos};
use super::format::{
    at, containers, format_label_selector, format_labels, int, label_selector, list, name, opt_int,
    text,
};
use super::{doc, Column, Description, Printer, AGE, CONTAINERS_WIDE, IMAGES_WIDE, NAME};

fn age(obj: &Value, now: Nanos) -> Value {
    json!(duration::since(
        at(obj, &["metadata", "creationTimestamp"]),
        now
    ))
}

fn template_containers(obj: &Value) -> (String, String) {
    containers(list(obj, &["spec", "template", "spec", "containers"]))
}

/// `spec.replicas`, which apps/v1 defaults to 1.
fn desired(obj: &Value) -> i64 {
    opt_int(obj, &["spec", "replicas"]).unwrap_or(1)
}

const DEPLOYMENT_STATUS: &str = "io.k8s.api.apps.v1.DeploymentStatus";

pub(crate) static DEPLOYMENT: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Ready",
            "string",
            Description::Text("Number of the pod with ready state"),
        ),
        Column::new(
            "Up-to-date",
            "string",
            doc(DEPLOYMENT_STATUS, "updatedReplicas"),
        ),
        Column::new(
            "Available",
            "string",
            doc(DEPLOYMENT_STATUS, "availableReplicas"),
        ),
        AGE,
        CONTAINERS_WIDE,
        IMAGES_WIDE,
        Column::new(
            "Selector",
            "string",
            doc("io.k8s.api.apps.v1.DeploymentSpec", "selector"),
        )
        .wide(),
    ],
    row: |obj, now| {
        let (names, images) = template_containers(obj);
        let selector =
            label_selector(at(obj, &["spec", "selector"])).unwrap_or_else(|()| "<invalid>".into());
        vec![
            json!(name(obj)),
            json!(format!(
                "{}/{}",
                int(obj, &["status", "readyReplicas"]),
                desired(obj)
            )),
            json!(int(obj, &["status", "updatedReplicas"])),
            json!(int(obj, &["status", "availableReplicas"])),
            age(obj, now),
            json!(names),
            json!(images),
            json!(selector),
        ]
    },
};

const RS_SPEC: &str = "io.k8s.api.apps.v1.ReplicaSetSpec";
const RS_STATUS: &str = "io.k8s.api.apps.v1.ReplicaSetStatus";

pub(crate) static REPLICA_SET: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Desired", "integer", doc(RS_SPEC, "replicas")),
        Column::new("Current", "integer", doc(RS_STATUS, "replicas")),
        Column::new("Ready", "integer", doc(RS_STATUS, "readyReplicas")),
        AGE,
        CONTAINERS_WIDE,
        IMAGES_WIDE,
        Column::new("Selector", "string", doc(RS_SPEC, "selector")).wide(),
    ],
    row: |obj, now| {
        let (names, images) = template_containers(obj);
        vec![
            json!(name(obj)),
            json!(desired(obj)),
            json!(int(obj, &["status", "replicas"])),
            json!(int(obj, &["status", "readyReplicas"])),
            age(obj, now),
            json!(names),
            json!(images),
            json!(format_label_selector(at(obj, &["spec", "selector"]))),
        ]
    },
};

pub(crate) static STATEFUL_SET: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Ready",
            "string",
            Description::Text("Number of the pod with ready state"),
        ),
        AGE,
        CONTAINERS_WIDE,
        IMAGES_WIDE,
    ],
    row: |obj, now| {
        let (names, images) = template_containers(obj);
        vec![
            json!(name(obj)),
            json!(format!(
                "{}/{}",
                int(obj, &["status", "readyReplicas"]),
                desired(obj)
            )),
            age(obj, now),
            json!(names),
            json!(images),
        ]
    },
};

const DS_STATUS: &str = "io.k8s.api.apps.v1.DaemonSetStatus";

pub(crate) static DAEMON_SET: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Desired",
            "integer",
            doc(DS_STATUS, "desiredNumberScheduled"),
        ),
        Column::new(
            "Current",
            "integer",
            doc(DS_STATUS, "currentNumberScheduled"),
        ),
        Column::new("Ready", "integer", doc(DS_STATUS, "numberReady")),
        Column::new(
            "Up-to-date",
            "integer",
            doc(DS_STATUS, "updatedNumberScheduled"),
        ),
        Column::new("Available", "integer", doc(DS_STATUS, "numberAvailable")),
        Column::new(
            "Node Selector",
            "string",
            doc("io.k8s.api.core.v1.PodSpec", "nodeSelector"),
        ),
        AGE,
        CONTAINERS_WIDE,
        IMAGES_WIDE,
        Column::new(
            "Selector",
            "string",
            doc("io.k8s.api.apps.v1.DaemonSetSpec", "selector"),
        )
        .wide(),
    ],
    row: |obj, now| {
        let (names, images) = template_containers(obj);
        let status = |f: &str| json!(int(obj, &["status", f]));
        vec![
            json!(name(obj)),
            status("desiredNumberScheduled"),
            status("currentNumberScheduled"),
            status("numberReady"),
            status("updatedNumberScheduled"),
            status("numberAvailable"),
            json!(format_labels(at(
                obj,
                &["spec", "template", "spec", "nodeSelector"]
            ))),
            age(obj, now),
            json!(names),
            json!(images),
            json!(format_label_selector(at(obj, &["spec", "selector"]))),
        ]
    },
};

pub(crate) static CONTROLLER_REVISION: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Controller",
            "string",
            Description::Text("Controller of the object"),
        ),
        Column::new(
            "Revision",
            "string",
            doc("io.k8s.api.apps.v1.ControllerRevision", "revision"),
        ),
        AGE,
    ],
    row: |obj, now| {
        vec![
            json!(name(obj)),
            json!(controller_of(obj)),
            json!(int(obj, &["revision"])),
            age(obj, now),
        ]
    },
};

/// The controlling owner as "kind.group/name" in lower case ("statefulset.apps/web").
fn controller_of(obj: &Value) -> String {
    let Some(owner) = list(obj, &["metadata", "ownerReferences"])
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
    else {
        return "<none>".into();
    };
    let api_version = text(owner, &["apiVersion"]);
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = text(owner, &["kind"]);
    let owner_name = text(owner, &["name"]);
    if kind.is_empty() && group.is_empty() {
        return owner_name.to_string();
    }
    let group_kind = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    format!("{}/{owner_name}", group_kind.to_lowercase())
}
