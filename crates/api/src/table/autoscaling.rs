//! autoscaling: horizontal pod autoscalers (v2 and v1 shapes) and the scale subresource.

use serde_json::{json, Value};

use super::duration::{self, Nanos};
use super::format::{at, int, name, opt_int, text};
use super::quantity;
use super::{doc, Column, Printer, AGE, NAME, OBJECT_META};

const HPA_SPEC: &str = "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerSpec";

pub(crate) static HORIZONTAL_POD_AUTOSCALER: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Reference", "string", doc(HPA_SPEC, "scaleTargetRef")),
        Column::new("Targets", "string", doc(HPA_SPEC, "metrics")),
        Column::new("MinPods", "string", doc(HPA_SPEC, "minReplicas")),
        Column::new("MaxPods", "string", doc(HPA_SPEC, "maxReplicas")),
        Column::new(
            "Replicas",
            "string",
            doc(
                "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus",
                "currentReplicas",
            ),
        ),
        AGE,
    ],
    row: hpa_row,
};

/// The metric specs and statuses in autoscaling/v2 form; an autoscaling/v1 object's CPU
/// target and current utilization become a Resource metric, as conversion does.
fn metrics(hpa: &Value) -> (Vec<Value>, Vec<Value>) {
    let specs = match at(hpa, &["spec", "metrics"]) {
        Some(m) => m.as_array().cloned().unwrap_or_default(),
        None => opt_int(hpa, &["spec", "targetCPUUtilizationPercentage"])
            .map(|t| {
                vec![json!({"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": t}}})]
            })
            .unwrap_or_default(),
    };
    let statuses = match at(hpa, &["status", "currentMetrics"]) {
        Some(m) => m.as_array().cloned().unwrap_or_default(),
        None => opt_int(hpa, &["status", "currentCPUUtilizationPercentage"])
            .map(|c| {
                vec![json!({"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageUtilization": c}}})]
            })
            .unwrap_or_default(),
    };
    (specs, statuses)
}

/// One metric as "current/target", Kubernetes' notation for each metric source type.
fn format_metric(spec: &Value, status: Option<&Value>) -> String {
    // The status's source of the same type, when the status at this index has one.
    let current = |source: &str| status.and_then(|s| at(s, &[source]));
    let unknown = || "<unknown>".to_string();
    match text(spec, &["type"]) {
        t @ ("External" | "Object") => {
            let source = if t == "External" {
                "external"
            } else {
                "object"
            };
            let target = at(spec, &[source, "target"]);
            match target.and_then(|t| at(t, &["averageValue"])) {
                Some(avg) => {
                    let cur = current(source)
                        .and_then(|c| at(c, &["current", "averageValue"]))
                        .map_or_else(unknown, |v| quantity::field(Some(v)));
                    format!("{cur}/{} (avg)", quantity::field(Some(avg)))
                }
                None => {
                    let cur = current(source)
                        .map_or_else(unknown, |c| quantity::pointer(at(c, &["current", "value"])));
                    let want = quantity::pointer(target.and_then(|t| at(t, &["value"])));
                    format!("{cur}/{want}")
                }
            }
        }
        "Pods" => {
            let cur = current("pods").map_or_else(unknown, |c| {
                quantity::pointer(at(c, &["current", "averageValue"]))
            });
            let want = quantity::pointer(at(spec, &["pods", "target", "averageValue"]));
            format!("{cur}/{want}")
        }
        t @ ("Resource" | "ContainerResource") => {
            let source = if t == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let resource = text(spec, &[source, "name"]);
            let target = at(spec, &[source, "target"]);
            match target.and_then(|t| at(t, &["averageValue"])) {
                Some(avg) => {
                    let cur = current(source).map_or_else(unknown, |c| {
                        quantity::pointer(at(c, &["current", "averageValue"]))
                    });
                    format!("{resource}: {cur}/{}", quantity::field(Some(avg)))
                }
                None => {
                    let cur = current(source)
                        .and_then(|c| opt_int(c, &["current", "averageUtilization"]))
                        .map_or_else(unknown, |u| format!("{u}%"));
                    let want = target
                        .and_then(|t| opt_int(t, &["averageUtilization"]))
                        .map_or_else(|| "<auto>".to_string(), |u| format!("{u}%"));
                    format!("{resource}: {cur}/{want}")
                }
            }
        }
        _ => "<unknown type>".into(),
    }
}

/// Up to two metrics joined by ", " and how many more there are; `<none>` without metrics.
fn format_metrics(specs: &[Value], statuses: &[Value]) -> String {
    if specs.is_empty() {
        return "<none>".into();
    }
    let shown: Vec<String> = specs
        .iter()
        .enumerate()
        .take(2)
        .map(|(i, s)| format_metric(s, statuses.get(i)))
        .collect();
    let joined = shown.join(", ");
    if specs.len() > 2 {
        format!("{joined} + {} more...", specs.len() - 2)
    } else {
        joined
    }
}

fn hpa_row(hpa: &Value, now: Nanos) -> Vec<Value> {
    let (specs, statuses) = metrics(hpa);
    let reference = format!(
        "{}/{}",
        text(hpa, &["spec", "scaleTargetRef", "kind"]),
        text(hpa, &["spec", "scaleTargetRef", "name"])
    );
    let min_pods = opt_int(hpa, &["spec", "minReplicas"])
        .map_or_else(|| "<unset>".to_string(), |m| m.to_string());
    vec![
        json!(name(hpa)),
        json!(reference),
        json!(format_metrics(&specs, &statuses)),
        json!(min_pods),
        json!(int(hpa, &["spec", "maxReplicas"])),
        json!(int(hpa, &["status", "currentReplicas"])),
        json!(duration::since(
            at(hpa, &["metadata", "creationTimestamp"]),
            now
        )),
    ]
}

pub(crate) static SCALE: Printer = Printer {
    columns: &[
        Column::new("Name", "string", doc(OBJECT_META, "name")),
        Column::new(
            "Desired",
            "integer",
            doc("io.k8s.api.autoscaling.v1.ScaleSpec", "replicas"),
        ),
        Column::new(
            "Available",
            "integer",
            doc("io.k8s.api.autoscaling.v1.ScaleStatus", "replicas"),
        ),
        AGE,
    ],
    row: |obj, now| {
        vec![
            json!(name(obj)),
            json!(int(obj, &["spec", "replicas"])),
            json!(int(obj, &["status", "replicas"])),
            json!(duration::since(
                at(obj, &["metadata", "creationTimestamp"]),
                now
            )),
        ]
    },
};
