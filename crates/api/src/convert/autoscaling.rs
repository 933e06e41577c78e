//! autoscaling/v2 ⇄ autoscaling/v1 HorizontalPodAutoscaler (Kubernetes'
//! `pkg/apis/autoscaling/v1` conversion; v2 is the internal version's shape).
//!
//! autoscaling/v1 has one metric of its own, `spec.targetCPUUtilizationPercentage` (the first
//! Resource `cpu` metric with an `averageUtilization` target) and
//! `status.currentCPUUtilizationPercentage` (the last current `cpu` metric with an
//! `averageUtilization`). Everything else of a v2 object travels through v1 in annotations,
//! JSON-encoded:
//!
//! - the other metric specs, as autoscaling/v1 `MetricSpec`s (the v2beta1 shape:
//!   `targetAverageValue`, `metricName` ...), under [`METRIC_SPECS_ANNOTATION`];
//! - every current metric, as v1 `MetricStatus`es, under [`METRIC_STATUSES_ANNOTATION`];
//! - `spec.behavior`, encoded from Kubernetes' internal type, whose fields have no JSON names
//!   (`{"ScaleUp":{"StabilizationWindowSeconds":0,...}}`), under [`BEHAVIOR_ANNOTATION`];
//! - `status.conditions`, under [`CONDITIONS_ANNOTATION`].
//!
//! Written back through v1, the annotations turn into fields again (metrics from the annotation
//! come first, then the CPU target), and are dropped; annotations that do not parse are
//! dropped too. A v1 object with no metric at all gets the CPU target autoscaling/v1 always
//! implied, 80%. Quantities come out in their canonical spelling, as Go re-encodes them.

use serde_json::{json, Map, Value};

use super::gojson::{Fields, Go};
use super::{non_empty, non_zero, present};
use crate::validation::quantity;

/// `autoscaling.MetricSpecsAnnotation`.
pub const METRIC_SPECS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// `autoscaling.MetricStatusesAnnotation`.
pub const METRIC_STATUSES_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// `autoscaling.HorizontalPodAutoscalerConditionsAnnotation`.
pub const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// `autoscaling.BehaviorSpecsAnnotation`.
pub const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";

/// The annotations only conversion may set (Kubernetes' `DropRoundTripHorizontalPodAutoscalerAnnotations`).
const ROUND_TRIP: [&str; 4] = [
    METRIC_SPECS_ANNOTATION,
    METRIC_STATUSES_ANNOTATION,
    CONDITIONS_ANNOTATION,
    BEHAVIOR_ANNOTATION,
];

/// The CPU target autoscaling/v1 implies when an object has no metric.
const DEFAULT_CPU_UTILIZATION: i64 = 80;

/// Drop the round-trip annotations (what an autoscaling/v2 object loses on its way in).
pub fn drop_round_trip_annotations(obj: Value) -> Value {
    let mut obj = obj;
    if let Some(md) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        take_round_trip(md);
    }
    obj
}

/// Remove the round-trip annotations from `md` (and `annotations` itself once empty, as Go
/// leaves out an empty map): their string values in [`ROUND_TRIP`] order.
fn take_round_trip(md: &mut Map<String, Value>) -> [Option<String>; 4] {
    let mut out = [None, None, None, None];
    let Some(ann) = md.get_mut("annotations").and_then(Value::as_object_mut) else {
        return out;
    };
    if !ROUND_TRIP.iter().any(|k| ann.contains_key(*k)) {
        return out;
    }
    for (slot, key) in out.iter_mut().zip(ROUND_TRIP) {
        *slot = ann.remove(key).and_then(|v| v.as_str().map(str::to_string));
    }
    if ann.is_empty() {
        md.remove("annotations");
    }
    out
}

// ---- v2 (stored) → v1 ----

/// A stored autoscaling/v2 HorizontalPodAutoscaler as autoscaling/v1 presents it.
pub fn v2_to_v1(obj: Value) -> Value {
    let Value::Object(mut m) = obj else {
        return obj;
    };
    let spec = m.remove("spec").unwrap_or(Value::Null);
    let status = m.remove("status").unwrap_or(Value::Null);
    let mut md = match m.remove("metadata") {
        Some(Value::Object(md)) => Some(md),
        _ => None,
    };

    let metrics = list(&spec, "metrics");
    let other: Vec<Go> = metrics
        .iter()
        .filter(|m| !is_cpu_utilization_target(m))
        .map(metric_spec_v1)
        .collect();
    let current = list(&status, "currentMetrics");
    let conditions = list(&status, "conditions");
    let mut annotations = Vec::new();
    if !other.is_empty() {
        annotations.push((METRIC_SPECS_ANNOTATION, Go::List(other).encode()));
    }
    if !current.is_empty() {
        let enc = Go::List(current.iter().map(metric_status_v1).collect()).encode();
        annotations.push((METRIC_STATUSES_ANNOTATION, enc));
    }
    if let Some(b) = field(&spec, "behavior") {
        annotations.push((BEHAVIOR_ANNOTATION, behavior_go(b).encode()));
    }
    if !conditions.is_empty() {
        let enc = Go::List(conditions.iter().map(condition_v1).collect()).encode();
        annotations.push((CONDITIONS_ANNOTATION, enc));
    }
    if let Some(md) = md.as_mut() {
        take_round_trip(md);
    }
    if !annotations.is_empty() {
        let md = md.get_or_insert_with(Map::new);
        let ann = md
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if !ann.is_object() {
            *ann = Value::Object(Map::new());
        }
        let ann = ann.as_object_mut().expect("made an object");
        for (k, v) in annotations {
            ann.insert(k.to_string(), Value::String(v));
        }
    }

    let mut out_spec = Map::new();
    out_spec.insert(
        "scaleTargetRef".into(),
        target_ref(spec.get("scaleTargetRef")),
    );
    put(
        &mut out_spec,
        "minReplicas",
        present(spec.get("minReplicas").cloned()),
    );
    out_spec.insert("maxReplicas".into(), int_or_zero(spec.get("maxReplicas")));
    let cpu_target = metrics
        .iter()
        .find(|m| is_cpu_utilization_target(m))
        .and_then(|m| field(m, "resource"))
        .and_then(|r| field(r, "target"))
        .and_then(|t| field(t, "averageUtilization"))
        .cloned();
    put(&mut out_spec, "targetCPUUtilizationPercentage", cpu_target);

    let mut out_status = Map::new();
    for f in ["observedGeneration", "lastScaleTime"] {
        put(&mut out_status, f, present(status.get(f).cloned()));
    }
    out_status.insert(
        "currentReplicas".into(),
        int_or_zero(status.get("currentReplicas")),
    );
    out_status.insert(
        "desiredReplicas".into(),
        int_or_zero(status.get("desiredReplicas")),
    );
    let cpu_current = current
        .iter()
        .filter(|m| is_cpu_resource(m))
        .filter_map(|m| {
            field(m, "resource")
                .and_then(|r| field(r, "current"))
                .and_then(|c| field(c, "averageUtilization"))
        })
        .next_back()
        .cloned();
    put(
        &mut out_status,
        "currentCPUUtilizationPercentage",
        cpu_current,
    );

    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("autoscaling/v1"));
    out.insert("kind".into(), json!("HorizontalPodAutoscaler"));
    if let Some(md) = md {
        out.insert("metadata".into(), Value::Object(md));
    }
    out.insert("spec".into(), Value::Object(out_spec));
    out.insert("status".into(), Value::Object(out_status));
    Value::Object(out)
}

/// A Resource `cpu` metric (spec or status).
fn is_cpu_resource(m: &Value) -> bool {
    str_of(m, "type") == "Resource"
        && field(m, "resource").is_some_and(|r| str_of(r, "name") == "cpu")
}

/// What autoscaling/v1's `targetCPUUtilizationPercentage` stands for.
fn is_cpu_utilization_target(m: &Value) -> bool {
    is_cpu_resource(m)
        && field(m, "resource")
            .and_then(|r| field(r, "target"))
            .and_then(|t| field(t, "averageUtilization"))
            .is_some()
}

/// A v2 MetricSpec as an autoscaling/v1 MetricSpec.
fn metric_spec_v1(m: &Value) -> Go {
    let mut f = Fields::new().put("type", json!(str_of(m, "type")));
    if let Some(o) = field(m, "object") {
        let (metric, target) = (field_or_null(o, "metric"), field_or_null(o, "target"));
        f = f.put(
            "object",
            Fields::new()
                .put("target", ref_go(o.get("describedObject")))
                .put("metricName", json!(str_of(metric, "name")))
                .put("targetValue", quantity_or_zero(target.get("value")))
                .opt("selector", selector_go(metric.get("selector")))
                .opt("averageValue", quantity_opt(target.get("averageValue"))),
        );
    }
    if let Some(p) = field(m, "pods") {
        let (metric, target) = (field_or_null(p, "metric"), field_or_null(p, "target"));
        f = f.put(
            "pods",
            Fields::new()
                .put("metricName", json!(str_of(metric, "name")))
                .put(
                    "targetAverageValue",
                    quantity_or_zero(target.get("averageValue")),
                )
                .opt("selector", selector_go(metric.get("selector"))),
        );
    }
    if let Some(r) = field(m, "resource") {
        let target = field_or_null(r, "target");
        f = f.put(
            "resource",
            Fields::new()
                .put("name", json!(str_of(r, "name")))
                .opt(
                    "targetAverageUtilization",
                    present(target.get("averageUtilization").cloned()),
                )
                .opt(
                    "targetAverageValue",
                    quantity_opt(target.get("averageValue")),
                ),
        );
    }
    if let Some(r) = field(m, "containerResource") {
        let target = field_or_null(r, "target");
        f = f.put(
            "containerResource",
            Fields::new()
                .put("name", json!(str_of(r, "name")))
                .opt(
                    "targetAverageUtilization",
                    present(target.get("averageUtilization").cloned()),
                )
                .opt(
                    "targetAverageValue",
                    quantity_opt(target.get("averageValue")),
                )
                .put("container", json!(str_of(r, "container"))),
        );
    }
    if let Some(e) = field(m, "external") {
        let (metric, target) = (field_or_null(e, "metric"), field_or_null(e, "target"));
        f = f.put(
            "external",
            Fields::new()
                .put("metricName", json!(str_of(metric, "name")))
                .opt("metricSelector", selector_go(metric.get("selector")))
                .opt("targetValue", quantity_opt(target.get("value")))
                .opt(
                    "targetAverageValue",
                    quantity_opt(target.get("averageValue")),
                ),
        );
    }
    f.done()
}

/// A v2 MetricStatus as an autoscaling/v1 MetricStatus.
fn metric_status_v1(m: &Value) -> Go {
    let mut f = Fields::new().put("type", json!(str_of(m, "type")));
    if let Some(o) = field(m, "object") {
        let (metric, current) = (field_or_null(o, "metric"), field_or_null(o, "current"));
        f = f.put(
            "object",
            Fields::new()
                .put("target", ref_go(o.get("describedObject")))
                .put("metricName", json!(str_of(metric, "name")))
                .put("currentValue", quantity_or_zero(current.get("value")))
                .opt("selector", selector_go(metric.get("selector")))
                .opt("averageValue", quantity_opt(current.get("averageValue"))),
        );
    }
    if let Some(p) = field(m, "pods") {
        let (metric, current) = (field_or_null(p, "metric"), field_or_null(p, "current"));
        f = f.put(
            "pods",
            Fields::new()
                .put("metricName", json!(str_of(metric, "name")))
                .put(
                    "currentAverageValue",
                    quantity_or_zero(current.get("averageValue")),
                )
                .opt("selector", selector_go(metric.get("selector"))),
        );
    }
    if let Some(r) = field(m, "resource") {
        let current = field_or_null(r, "current");
        f = f.put(
            "resource",
            Fields::new()
                .put("name", json!(str_of(r, "name")))
                .opt(
                    "currentAverageUtilization",
                    present(current.get("averageUtilization").cloned()),
                )
                .put(
                    "currentAverageValue",
                    quantity_or_zero(current.get("averageValue")),
                ),
        );
    }
    if let Some(r) = field(m, "containerResource") {
        let current = field_or_null(r, "current");
        f = f.put(
            "containerResource",
            Fields::new()
                .put("name", json!(str_of(r, "name")))
                .opt(
                    "currentAverageUtilization",
                    present(current.get("averageUtilization").cloned()),
                )
                .put(
                    "currentAverageValue",
                    quantity_or_zero(current.get("averageValue")),
                )
                .put("container", json!(str_of(r, "container"))),
        );
    }
    if let Some(e) = field(m, "external") {
        let (metric, current) = (field_or_null(e, "metric"), field_or_null(e, "current"));
        f = f.put(
            "external",
            Fields::new()
                .put("metricName", json!(str_of(metric, "name")))
                .opt("metricSelector", selector_go(metric.get("selector")))
                .put("currentValue", quantity_or_zero(current.get("value")))
                .opt(
                    "currentAverageValue",
                    quantity_opt(current.get("averageValue")),
                ),
        );
    }
    f.done()
}

/// An HPA condition as autoscaling/v1's type encodes it (a zero `lastTransitionTime` is
/// `null`: Go's `omitempty` does not leave out structs).
fn condition_v1(c: &Value) -> Go {
    Fields::new()
        .put("type", json!(str_of(c, "type")))
        .put("status", json!(str_of(c, "status")))
        .put(
            "lastTransitionTime",
            present(c.get("lastTransitionTime").cloned()).unwrap_or(Value::Null),
        )
        .opt("reason", non_empty(c.get("reason").cloned()))
        .opt("message", non_empty(c.get("message").cloned()))
        .done()
}

/// `spec.behavior` encoded from Kubernetes' internal type: Go field names, nil pointers and
/// slices as `null`.
fn behavior_go(b: &Value) -> Go {
    let rules = |r: Option<&Value>| -> Go {
        let Some(r) = r else {
            return Go::Plain(Value::Null);
        };
        let policies = match field(r, "policies").and_then(Value::as_array) {
            Some(ps) => Go::List(
                ps.iter()
                    .map(|p| {
                        Fields::new()
                            .put("Type", json!(str_of(p, "type")))
                            .put("Value", int_or_zero(p.get("value")))
                            .put("PeriodSeconds", int_or_zero(p.get("periodSeconds")))
                            .done()
                    })
                    .collect(),
            ),
            None => Go::Plain(Value::Null),
        };
        Fields::new()
            .put(
                "StabilizationWindowSeconds",
                field(r, "stabilizationWindowSeconds")
                    .cloned()
                    .unwrap_or(Value::Null),
            )
            .put(
                "SelectPolicy",
                field(r, "selectPolicy").cloned().unwrap_or(Value::Null),
            )
            .put("Policies", policies)
            .done()
    };
    Fields::new()
        .put("ScaleUp", rules(field(b, "scaleUp")))
        .put("ScaleDown", rules(field(b, "scaleDown")))
        .done()
}

/// A CrossVersionObjectReference as Go encodes it (`apiVersion` only when set).
fn ref_go(r: Option<&Value>) -> Go {
    let r = r.unwrap_or(&Value::Null);
    Fields::new()
        .put("kind", json!(str_of(r, "kind")))
        .put("name", json!(str_of(r, "name")))
        .opt("apiVersion", non_empty(r.get("apiVersion").cloned()))
        .done()
}

/// A metav1.LabelSelector as Go encodes it (`matchLabels` before `matchExpressions`).
fn selector_go(s: Option<&Value>) -> Option<Go> {
    let s = s.filter(|s| !s.is_null())?;
    let labels = field(s, "matchLabels")
        .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        .cloned();
    let exprs = field(s, "matchExpressions")
        .and_then(Value::as_array)
        .filter(|e| !e.is_empty())
        .map(|e| {
            Go::List(
                e.iter()
                    .map(|r| {
                        Fields::new()
                            .put("key", json!(str_of(r, "key")))
                            .put("operator", json!(str_of(r, "operator")))
                            .opt(
                                "values",
                                field(r, "values")
                                    .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
                                    .cloned(),
                            )
                            .done()
                    })
                    .collect(),
            )
        });
    Some(
        Fields::new()
            .opt("matchLabels", labels)
            .opt("matchExpressions", exprs)
            .done(),
    )
}

// ---- v1 → v2 (stored) ----

/// An autoscaling/v1 HorizontalPodAutoscaler in its stored autoscaling/v2 form.
pub fn v1_to_v2(obj: Value) -> Value {
    let Value::Object(mut m) = obj else {
        return obj;
    };
    let spec = m.remove("spec").unwrap_or(Value::Null);
    let status = m.remove("status").unwrap_or(Value::Null);
    let mut md = match m.remove("metadata") {
        Some(Value::Object(md)) => Some(md),
        _ => None,
    };
    let [metrics_a, current_a, conditions_a, behavior_a] = match md.as_mut() {
        Some(md) => take_round_trip(md),
        None => Default::default(),
    };
    let parse_list = |a: Option<String>| -> Option<Vec<Value>> {
        match serde_json::from_str::<Value>(a.as_deref()?) {
            Ok(Value::Array(items)) if items.iter().all(Value::is_object) => Some(items),
            _ => None,
        }
    };

    let mut out_spec = Map::new();
    out_spec.insert(
        "scaleTargetRef".into(),
        target_ref(spec.get("scaleTargetRef")),
    );
    put(
        &mut out_spec,
        "minReplicas",
        present(spec.get("minReplicas").cloned()),
    );
    out_spec.insert("maxReplicas".into(), int_or_zero(spec.get("maxReplicas")));
    let cpu = present(spec.get("targetCPUUtilizationPercentage").cloned()).map(cpu_target);
    let mut metrics: Vec<Value> = parse_list(metrics_a)
        .map(|ms| ms.iter().map(metric_spec_v2).collect())
        .unwrap_or_default();
    metrics.extend(cpu);
    if metrics.is_empty() {
        metrics.push(cpu_target(json!(DEFAULT_CPU_UTILIZATION)));
    }
    out_spec.insert("metrics".into(), Value::Array(metrics));
    if let Some(b) = behavior_a.as_deref().and_then(behavior_v2) {
        out_spec.insert("behavior".into(), b);
    }

    let mut out_status = Map::new();
    for f in ["observedGeneration", "lastScaleTime"] {
        put(&mut out_status, f, present(status.get(f).cloned()));
    }
    put(
        &mut out_status,
        "currentReplicas",
        non_zero(status.get("currentReplicas").cloned()),
    );
    out_status.insert(
        "desiredReplicas".into(),
        int_or_zero(status.get("desiredReplicas")),
    );
    let current = match parse_list(current_a) {
        // The annotation carries more than the CPU percentage: it wins.
        Some(ms) => Value::Array(ms.iter().map(metric_status_v2).collect()),
        None => match present(status.get("currentCPUUtilizationPercentage").cloned()) {
            Some(u) => json!([{"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": u}}}]),
            None => Value::Null,
        },
    };
    out_status.insert("currentMetrics".into(), current);
    if let Some(cs) = parse_list(conditions_a).filter(|cs| !cs.is_empty()) {
        out_status.insert(
            "conditions".into(),
            Value::Array(cs.iter().map(condition_v2).collect()),
        );
    }

    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("autoscaling/v2"));
    out.insert("kind".into(), json!("HorizontalPodAutoscaler"));
    if let Some(md) = md {
        out.insert("metadata".into(), Value::Object(md));
    }
    out.insert("spec".into(), Value::Object(out_spec));
    out.insert("status".into(), Value::Object(out_status));
    Value::Object(out)
}

fn cpu_target(utilization: Value) -> Value {
    json!({"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": utilization}}})
}

/// An autoscaling/v1 MetricSpec (from the annotation) as a v2 MetricSpec.
fn metric_spec_v2(m: &Value) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!(str_of(m, "type")));
    if let Some(o) = field(m, "object") {
        let average = quantity_opt(o.get("averageValue"));
        let mut target = Map::new();
        target.insert(
            "type".into(),
            json!(if average.is_none() {
                "Value"
            } else {
                "AverageValue"
            }),
        );
        target.insert("value".into(), quantity_or_zero(o.get("targetValue")));
        put(&mut target, "averageValue", average);
        out.insert(
            "object".into(),
            json!({
                "describedObject": target_ref(o.get("target")),
                "target": target,
                "metric": identifier(o, "metricName", "selector"),
            }),
        );
    }
    if let Some(p) = field(m, "pods") {
        out.insert(
            "pods".into(),
            json!({
                "metric": identifier(p, "metricName", "selector"),
                "target": {"type": "AverageValue",
                    "averageValue": quantity_or_zero(p.get("targetAverageValue"))},
            }),
        );
    }
    for key in ["resource", "containerResource"] {
        let Some(r) = field(m, key) else {
            continue;
        };
        let utilization = present(r.get("targetAverageUtilization").cloned());
        let mut target = Map::new();
        target.insert(
            "type".into(),
            json!(if utilization.is_none() {
                "AverageValue"
            } else {
                "Utilization"
            }),
        );
        put(
            &mut target,
            "averageValue",
            quantity_opt(r.get("targetAverageValue")),
        );
        put(&mut target, "averageUtilization", utilization);
        let mut source = Map::new();
        source.insert("name".into(), json!(str_of(r, "name")));
        source.insert("target".into(), Value::Object(target));
        if key == "containerResource" {
            source.insert("container".into(), json!(str_of(r, "container")));
        }
        out.insert(key.into(), Value::Object(source));
    }
    if let Some(e) = field(m, "external") {
        let value = quantity_opt(e.get("targetValue"));
        let mut target = Map::new();
        target.insert(
            "type".into(),
            json!(if value.is_none() {
                "AverageValue"
            } else {
                "Value"
            }),
        );
        put(&mut target, "value", value);
        put(
            &mut target,
            "averageValue",
            quantity_opt(e.get("targetAverageValue")),
        );
        out.insert(
            "external".into(),
            json!({
                "metric": identifier(e, "metricName", "metricSelector"),
                "target": target,
            }),
        );
    }
    Value::Object(out)
}

/// An autoscaling/v1 MetricStatus (from the annotation) as a v2 MetricStatus.
fn metric_status_v2(m: &Value) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!(str_of(m, "type")));
    if let Some(o) = field(m, "object") {
        let mut current = Map::new();
        current.insert("value".into(), quantity_or_zero(o.get("currentValue")));
        put(
            &mut current,
            "averageValue",
            quantity_opt(o.get("averageValue")),
        );
        out.insert(
            "object".into(),
            json!({
                "metric": identifier(o, "metricName", "selector"),
                "current": current,
                "describedObject": target_ref(o.get("target")),
            }),
        );
    }
    if let Some(p) = field(m, "pods") {
        out.insert(
            "pods".into(),
            json!({
                "metric": identifier(p, "metricName", "selector"),
                "current": {"averageValue": quantity_or_zero(p.get("currentAverageValue"))},
            }),
        );
    }
    for key in ["resource", "containerResource"] {
        let Some(r) = field(m, key) else {
            continue;
        };
        let mut current = Map::new();
        current.insert(
            "averageValue".into(),
            quantity_or_zero(r.get("currentAverageValue")),
        );
        put(
            &mut current,
            "averageUtilization",
            present(r.get("currentAverageUtilization").cloned()),
        );
        let mut source = Map::new();
        source.insert("name".into(), json!(str_of(r, "name")));
        source.insert("current".into(), Value::Object(current));
        if key == "containerResource" {
            source.insert("container".into(), json!(str_of(r, "container")));
        }
        out.insert(key.into(), Value::Object(source));
    }
    if let Some(e) = field(m, "external") {
        let mut current = Map::new();
        current.insert("value".into(), quantity_or_zero(e.get("currentValue")));
        put(
            &mut current,
            "averageValue",
            quantity_opt(e.get("currentAverageValue")),
        );
        out.insert(
            "external".into(),
            json!({
                "metric": identifier(e, "metricName", "metricSelector"),
                "current": current,
            }),
        );
    }
    Value::Object(out)
}

/// A v2 MetricIdentifier from a v1 source's name and selector fields.
fn identifier(source: &Value, name: &str, selector: &str) -> Value {
    let mut id = Map::new();
    id.insert("name".into(), json!(str_of(source, name)));
    put(&mut id, "selector", present(source.get(selector).cloned()));
    Value::Object(id)
}

fn condition_v2(c: &Value) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!(str_of(c, "type")));
    out.insert("status".into(), json!(str_of(c, "status")));
    out.insert(
        "lastTransitionTime".into(),
        present(c.get("lastTransitionTime").cloned()).unwrap_or(Value::Null),
    );
    put(&mut out, "reason", non_empty(c.get("reason").cloned()));
    put(&mut out, "message", non_empty(c.get("message").cloned()));
    Value::Object(out)
}

/// The behavior annotation back as `spec.behavior`; `None` when it does not parse or sets
/// neither direction. Go matches field names without regard to case, and so does this.
fn behavior_v2(enc: &str) -> Option<Value> {
    let b: Value = serde_json::from_str(enc).ok()?;
    let b = b.as_object()?;
    let rules = |name: &str| -> Option<Value> {
        let r = ci(b, name)?.as_object()?;
        let mut out = Map::new();
        put(
            &mut out,
            "stabilizationWindowSeconds",
            ci(r, "StabilizationWindowSeconds").cloned(),
        );
        put(&mut out, "selectPolicy", ci(r, "SelectPolicy").cloned());
        if let Some(ps) = ci(r, "Policies").and_then(Value::as_array) {
            let ps: Vec<Value> = ps
                .iter()
                .filter_map(Value::as_object)
                .map(|p| {
                    json!({
                        "type": ci(p, "Type").cloned().unwrap_or_else(|| json!("")),
                        "value": ci(p, "Value").cloned().unwrap_or_else(|| json!(0)),
                        "periodSeconds": ci(p, "PeriodSeconds").cloned().unwrap_or_else(|| json!(0)),
                    })
                })
                .collect();
            if !ps.is_empty() {
                out.insert("policies".into(), Value::Array(ps));
            }
        }
        Some(Value::Object(out))
    };
    let mut out = Map::new();
    put(&mut out, "scaleUp", rules("ScaleUp"));
    put(&mut out, "scaleDown", rules("ScaleDown"));
    (!out.is_empty()).then_some(Value::Object(out))
}

/// A field looked up the way Go's JSON decoder finds it: exact name first, then any case.
fn ci<'a>(m: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    m.get(name)
        .or_else(|| {
            m.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        })
        .filter(|v| !v.is_null())
}

// ---- helpers ----

/// A CrossVersionObjectReference in v2 form: `kind` and `name` always, `apiVersion` when set.
fn target_ref(r: Option<&Value>) -> Value {
    let r = r.unwrap_or(&Value::Null);
    let mut out = Map::new();
    out.insert("kind".into(), json!(str_of(r, "kind")));
    out.insert("name".into(), json!(str_of(r, "name")));
    put(
        &mut out,
        "apiVersion",
        non_empty(r.get("apiVersion").cloned()),
    );
    Value::Object(out)
}

fn put(m: &mut Map<String, Value>, k: &str, v: Option<Value>) {
    if let Some(v) = v {
        m.insert(k.to_string(), v);
    }
}

fn field<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    v.get(k).filter(|x| !x.is_null())
}

fn field_or_null<'a>(v: &'a Value, k: &str) -> &'a Value {
    field(v, k).unwrap_or(&Value::Null)
}

fn list<'a>(v: &'a Value, k: &str) -> &'a [Value] {
    v.get(k)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn int_or_zero(v: Option<&Value>) -> Value {
    present(v.cloned()).unwrap_or_else(|| json!(0))
}

/// A quantity in its canonical spelling (as it was when it does not parse).
fn quantity_opt(v: Option<&Value>) -> Option<Value> {
    let v = v.filter(|v| !v.is_null())?;
    Some(match quantity::parse_value(v) {
        Some(q) => Value::String(q.canonical()),
        None => v.clone(),
    })
}

/// A quantity Go always writes: "0" when unset.
fn quantity_or_zero(v: Option<&Value>) -> Value {
    quantity_opt(v).unwrap_or_else(|| json!("0"))
}
