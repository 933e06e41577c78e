//! Pods and pod templates.

use serde_json::{json, Value};

use super::duration::{self, Nanos};
use super::format::{at, containers, flag, format_labels, int, list, name, text};
use super::{doc, Column, Description, Printer, AGE, NAME};

const POD_STATUS: &str = "io.k8s.api.core.v1.PodStatus";
const POD_SPEC: &str = "io.k8s.api.core.v1.PodSpec";

pub(crate) static POD: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Ready",
            "string",
            Description::Text("The aggregate readiness state of this pod for accepting traffic."),
        ),
        Column::new(
            "Status",
            "string",
            Description::Text("The aggregate status of the containers in this pod."),
        ),
        Column::new(
            "Restarts",
            "string",
            Description::Text(
                "The number of times the containers in this pod have been restarted and when \
                 the last container in this pod has restarted.",
            ),
        ),
        AGE,
        Column::new("IP", "string", doc(POD_STATUS, "podIP")).wide(),
        Column::new("Node", "string", doc(POD_SPEC, "nodeName")).wide(),
        Column::new(
            "Nominated Node",
            "string",
            doc(POD_STATUS, "nominatedNodeName"),
        )
        .wide(),
        Column::new("Readiness Gates", "string", doc(POD_SPEC, "readinessGates")).wide(),
    ],
    row: pod_row,
};

pub(crate) static POD_TEMPLATE: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Containers",
            "string",
            Description::Text("Names of each container in the template."),
        ),
        Column::new(
            "Images",
            "string",
            Description::Text("Images referenced by each container in the template."),
        ),
        Column::new(
            "Pod Labels",
            "string",
            Description::Text("The labels for the pod template."),
        ),
    ],
    row: pod_template_row,
};

fn pod_template_row(obj: &Value, _now: Nanos) -> Vec<Value> {
    let (names, images) = containers(list(obj, &["template", "spec", "containers"]));
    vec![
        json!(name(obj)),
        json!(names),
        json!(images),
        json!(format_labels(at(obj, &["template", "metadata", "labels"]))),
    ]
}

/// The "Completed" row condition of pods that have finished.
pub(crate) fn conditions(pod: &Value) -> Vec<Value> {
    let (reason, message) = match text(pod, &["status", "phase"]) {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return Vec::new(),
    };
    vec![json!({"type": "Completed", "status": "True", "reason": reason, "message": message})]
}

fn condition_is_true(pod: &Value, type_: &str) -> Option<bool> {
    list(pod, &["status", "conditions"])
        .iter()
        .find(|c| text(c, &["type"]) == type_)
        .map(|c| text(c, &["status"]) == "True")
}

fn finished_at(status: &Value) -> Option<Nanos> {
    duration::timestamp(at(status, &["lastState", "terminated", "finishedAt"]))
}

fn latest(a: Option<Nanos>, b: Option<Nanos>) -> Option<Nanos> {
    a.max(b)
}

/// The reason a terminated container without one of its own gets: its signal or exit code.
fn terminated_reason(term: &Value) -> String {
    let signal = int(term, &["signal"]);
    if signal != 0 {
        format!("Signal:{signal}")
    } else {
        format!("ExitCode:{}", int(term, &["exitCode"]))
    }
}

fn pod_row(pod: &Value, now: Nanos) -> Vec<Value> {
    let init_specs = list(pod, &["spec", "initContainers"]);
    let restartable = |name: &str| {
        init_specs
            .iter()
            .any(|c| text(c, &["name"]) == name && text(c, &["restartPolicy"]) == "Always")
    };
    let total = list(pod, &["spec", "containers"]).len()
        + init_specs
            .iter()
            .filter(|c| text(c, &["restartPolicy"]) == "Always")
            .count();
    let mut ready = 0usize;
    let mut restarts = 0i64;
    let mut sidecar_restarts = 0i64;
    let mut last_restart: Option<Nanos> = None;
    let mut last_sidecar_restart: Option<Nanos> = None;

    let phase = text(pod, &["status", "phase"]);
    let mut reason = match text(pod, &["status", "reason"]) {
        "" => phase.to_string(),
        r => r.to_string(),
    };
    if list(pod, &["status", "conditions"])
        .iter()
        .any(|c| text(c, &["type"]) == "PodScheduled" && text(c, &["reason"]) == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }

    let mut initializing = false;
    for (i, c) in list(pod, &["status", "initContainerStatuses"])
        .iter()
        .enumerate()
    {
        let count = int(c, &["restartCount"]);
        restarts += count;
        last_restart = latest(last_restart, finished_at(c));
        let is_sidecar = restartable(text(c, &["name"]));
        if is_sidecar {
            sidecar_restarts += count;
            last_sidecar_restart = latest(last_sidecar_restart, finished_at(c));
        }
        let terminated = at(c, &["state", "terminated"]);
        let waiting_reason = text(c, &["state", "waiting", "reason"]);
        if terminated.is_some_and(|t| int(t, &["exitCode"]) == 0) {
            continue;
        } else if is_sidecar && flag(c, &["started"]) {
            if flag(c, &["ready"]) {
                ready += 1;
            }
            continue;
        } else if let Some(t) = terminated {
            reason = match text(t, &["reason"]) {
                "" => format!("Init:{}", terminated_reason(t)),
                r => format!("Init:{r}"),
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    if !initializing || condition_is_true(pod, "Initialized") == Some(true) {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for c in list(pod, &["status", "containerStatuses"]).iter().rev() {
            restarts += int(c, &["restartCount"]);
            last_restart = latest(last_restart, finished_at(c));
            let waiting_reason = text(c, &["state", "waiting", "reason"]);
            let terminated = at(c, &["state", "terminated"]);
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_string();
            } else if let Some(t) = terminated {
                reason = match text(t, &["reason"]) {
                    "" => terminated_reason(t),
                    r => r.to_string(),
                };
            } else if flag(c, &["ready"]) && at(c, &["state", "running"]).is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if condition_is_true(pod, "Ready") == Some(true) {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }

    if at(pod, &["metadata", "deletionTimestamp"]).is_some() {
        if text(pod, &["status", "reason"]) == "NodeLost" {
            reason = "Unknown".into();
        } else if phase != "Failed" && phase != "Succeeded" {
            reason = "Terminating".into();
        }
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => {
            format!("{restarts} ({} ago)", duration::human_duration(now - t))
        }
        _ => restarts.to_string(),
    };

    // The primary IP: podIPs[0], or podIP when podIPs is unset.
    let ip = list(pod, &["status", "podIPs"])
        .first()
        .map(|p| text(p, &["ip"]))
        .unwrap_or_else(|| text(pod, &["status", "podIP"]));
    let or_none = |s: &str| {
        if s.is_empty() {
            "<none>".to_string()
        } else {
            s.to_string()
        }
    };
    let gates = list(pod, &["spec", "readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let passing = gates
            .iter()
            .filter(|g| condition_is_true(pod, text(g, &["conditionType"])) == Some(true))
            .count();
        format!("{passing}/{}", gates.len())
    };
    vec![
        json!(name(pod)),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        json!(duration::since(
            at(pod, &["metadata", "creationTimestamp"]),
            now
        )),
        json!(or_none(ip)),
        json!(or_none(text(pod, &["spec", "nodeName"]))),
        json!(or_none(text(pod, &["status", "nominatedNodeName"]))),
        json!(readiness_gates),
    ]
}
