use serde_json::{json, Value};

use super::autoscaling::{
    BEHAVIOR_ANNOTATION, CONDITIONS_ANNOTATION, METRIC_SPECS_ANNOTATION, METRIC_STATUSES_ANNOTATION,
};
use super::*;

fn to_events(v: Value) -> Value {
    from_storage("events.k8s.io", "v1", "Event", v)
}

fn to_core(v: Value) -> Value {
    to_storage("events.k8s.io", "v1", "Event", v)
}

fn v1(v: Value) -> Value {
    from_storage("autoscaling", "v1", "HorizontalPodAutoscaler", v)
}

fn v2(v: Value) -> Value {
    to_storage("autoscaling", "v1", "HorizontalPodAutoscaler", v)
}

fn core_event() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "web-0.17a", "namespace": "shop", "resourceVersion": "7"},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "namespace": "shop",
                           "uid": "u-1", "fieldPath": "spec.containers{web}"},
        "reason": "BackOff", "message": "Back-off restarting failed container", "type": "Warning",
        "source": {"component": "kubelet", "host": "node-a"},
        "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:05:00Z",
        "count": 5,
        "eventTime": null,
        "reportingComponent": "kubelet", "reportingInstance": "node-a"
    })
}

#[test]
fn storage_versions_and_identity() {
    assert_eq!(storage_version("events.k8s.io", "v1", "Event"), ("", "v1"));
    assert_eq!(
        storage_version("autoscaling", "v1", "HorizontalPodAutoscaler"),
        ("autoscaling", "v2")
    );
    assert_eq!(
        storage_version("autoscaling", "v2", "HorizontalPodAutoscaler"),
        ("autoscaling", "v2")
    );
    assert_eq!(storage_version("apps", "v1", "Deployment"), ("apps", "v1"));
    assert!(converts("events.k8s.io", "v1", "Event"));
    assert!(converts("autoscaling", "v1", "HorizontalPodAutoscaler"));
    assert!(!converts("", "v1", "Event"));
    assert!(!converts("autoscaling", "v2", "HorizontalPodAutoscaler"));
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "x": [1]});
    assert_eq!(to_storage("", "v1", "ConfigMap", cm.clone()), cm);
    assert_eq!(from_storage("", "v1", "ConfigMap", cm.clone()), cm);
    assert_eq!(from_storage("", "v1", "Event", core_event()), core_event());
}

#[test]
fn core_events_read_as_events_k8s_io() {
    let e = to_events(core_event());
    assert_eq!(
        e,
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "web-0.17a", "namespace": "shop", "resourceVersion": "7"},
            "eventTime": null,
            "reportingController": "kubelet", "reportingInstance": "node-a",
            "reason": "BackOff",
            "regarding": {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "namespace": "shop",
                          "uid": "u-1", "fieldPath": "spec.containers{web}"},
            "note": "Back-off restarting failed container", "type": "Warning",
            "deprecatedSource": {"component": "kubelet", "host": "node-a"},
            "deprecatedFirstTimestamp": "2024-01-01T00:00:00Z",
            "deprecatedLastTimestamp": "2024-01-01T00:05:00Z",
            "deprecatedCount": 5
        })
    );
    // And back: the same core/v1 event.
    assert_eq!(to_core(e), core_event());
}

#[test]
fn events_k8s_io_events_are_stored_as_core_events() {
    // What the scheduler's event recorder writes.
    let ev = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "web-0.1", "namespace": "shop"},
        "eventTime": "2024-01-01T00:00:01.000000Z",
        "series": {"count": 2, "lastObservedTime": "2024-01-01T00:00:09.000000Z"},
        "reportingController": "default-scheduler", "reportingInstance": "default-scheduler-node-a",
        "action": "Binding", "reason": "Scheduled",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "namespace": "shop"},
        "note": "Successfully assigned shop/web-0 to node-a", "type": "Normal",
        "unknownField": true
    });
    let core = to_core(ev.clone());
    assert_eq!(
        core,
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "web-0.1", "namespace": "shop"},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "namespace": "shop"},
            "reason": "Scheduled", "message": "Successfully assigned shop/web-0 to node-a",
            "source": {}, "firstTimestamp": null, "lastTimestamp": null,
            "type": "Normal", "eventTime": "2024-01-01T00:00:01.000000Z",
            "series": {"count": 2, "lastObservedTime": "2024-01-01T00:00:09.000000Z"},
            "action": "Binding",
            "reportingComponent": "default-scheduler",
            "reportingInstance": "default-scheduler-node-a"
        })
    );
    // Back in events.k8s.io/v1: everything but the unknown field, plus Go's zero values.
    let mut want = ev;
    want.as_object_mut().unwrap().remove("unknownField");
    want["deprecatedSource"] = json!({});
    want["deprecatedFirstTimestamp"] = Value::Null;
    want["deprecatedLastTimestamp"] = Value::Null;
    assert_eq!(to_events(core), want);
}

#[test]
fn event_zero_values_follow_each_types_encoding() {
    let bare = json!({"metadata": {"name": "x"}, "series": {}, "count": 0, "message": ""});
    let e = to_events(bare);
    assert_eq!(e["series"], json!({"count": 0, "lastObservedTime": null}));
    assert!(e.get("deprecatedCount").is_none() && e.get("note").is_none());
    assert_eq!(e["regarding"], json!({}));
    let c = to_core(e);
    assert_eq!(c["series"], json!({"lastObservedTime": null}));
    assert_eq!(c["reportingComponent"], "");
    assert_eq!(c["reportingInstance"], "");
    assert_eq!(c["involvedObject"], json!({}));
}

fn hpa_v2() -> Value {
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop", "annotations": {"team": "a"}},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2, "maxReplicas": 10,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 60}}},
                {"type": "Resource", "resource": {"name": "memory",
                    "target": {"type": "AverageValue", "averageValue": "0.5Gi"}}},
                {"type": "Pods", "pods": {"metric": {"name": "qps",
                    "selector": {"matchLabels": {"b": "2", "a": "1"},
                                 "matchExpressions": [{"key": "k", "operator": "Exists"}]}},
                    "target": {"type": "AverageValue", "averageValue": "1k"}}},
                {"type": "External", "external": {"metric": {"name": "queue"},
                    "target": {"type": "Value", "value": "30"}}},
                {"type": "Object", "object": {
                    "describedObject": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "main"},
                    "metric": {"name": "rps"}, "target": {"type": "Value", "value": "2k"}}},
                {"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app",
                    "target": {"type": "Utilization", "averageUtilization": 70}}}
            ],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                 {"type": "Percent", "value": 100, "periodSeconds": 15}]},
                "scaleDown": {"selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}
            }
        },
        "status": {
            "observedGeneration": 3, "lastScaleTime": "2024-01-01T00:00:00Z",
            "currentReplicas": 3, "desiredReplicas": 4,
            "currentMetrics": [
                {"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageValue": "250m", "averageUtilization": 75}}},
                {"type": "Resource", "resource": {"name": "memory",
                    "current": {"averageValue": "300Mi"}}}
            ],
            "conditions": [
                {"type": "AbleToScale", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z",
                 "reason": "ReadyForNewScale", "message": "recommended size matches current size"},
                {"type": "ScalingActive", "status": "False"}
            ]
        }
    })
}

#[test]
fn hpa_v2_reads_as_v1_with_the_rest_in_annotations() {
    let h = v1(hpa_v2());
    assert_eq!(h["apiVersion"], "autoscaling/v1");
    assert_eq!(
        h["spec"],
        json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
               "minReplicas": 2, "maxReplicas": 10, "targetCPUUtilizationPercentage": 60})
    );
    assert_eq!(
        h["status"],
        json!({"observedGeneration": 3, "lastScaleTime": "2024-01-01T00:00:00Z",
               "currentReplicas": 3, "desiredReplicas": 4, "currentCPUUtilizationPercentage": 75})
    );
    let ann = &h["metadata"]["annotations"];
    assert_eq!(ann["team"], "a");
    // Go's encoding of []autoscalingv1.MetricSpec: struct field order, canonical quantities.
    assert_eq!(
        ann[METRIC_SPECS_ANNOTATION],
        concat!(
            r#"[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"512Mi"}},"#,
            r#"{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"1k","selector":{"matchLabels":{"a":"1","b":"2"},"matchExpressions":[{"key":"k","operator":"Exists"}]}}},"#,
            r#"{"type":"External","external":{"metricName":"queue","targetValue":"30"}},"#,
            r#"{"type":"Object","object":{"target":{"kind":"Ingress","name":"main","apiVersion":"networking.k8s.io/v1"},"metricName":"rps","targetValue":"2k"}},"#,
            r#"{"type":"ContainerResource","containerResource":{"name":"cpu","targetAverageUtilization":70,"container":"app"}}]"#
        )
    );
    assert_eq!(
        ann[METRIC_STATUSES_ANNOTATION],
        concat!(
            r#"[{"type":"Resource","resource":{"name":"cpu","currentAverageUtilization":75,"currentAverageValue":"250m"}},"#,
            r#"{"type":"Resource","resource":{"name":"memory","currentAverageValue":"300Mi"}}]"#
        )
    );
    // The internal type's Go field names, nil as null.
    assert_eq!(
        ann[BEHAVIOR_ANNOTATION],
        concat!(
            r#"{"ScaleUp":{"StabilizationWindowSeconds":0,"SelectPolicy":"Max","Policies":[{"Type":"Pods","Value":4,"PeriodSeconds":15},{"Type":"Percent","Value":100,"PeriodSeconds":15}]},"#,
            r#""ScaleDown":{"StabilizationWindowSeconds":null,"SelectPolicy":"Max","Policies":[{"Type":"Percent","Value":100,"PeriodSeconds":15}]}}"#
        )
    );
    assert_eq!(
        ann[CONDITIONS_ANNOTATION],
        concat!(
            r#"[{"type":"AbleToScale","status":"True","lastTransitionTime":"2024-01-01T00:00:00Z","reason":"ReadyForNewScale","message":"recommended size matches current size"},"#,
            r#"{"type":"ScalingActive","status":"False","lastTransitionTime":null}]"#
        )
    );
}

#[test]
fn hpa_round_trips_through_v1() {
    let back = v2(v1(hpa_v2()));
    let mut want = hpa_v2();
    // The CPU target comes back after the metrics of the annotation, quantities canonical.
    let metrics = want["spec"]["metrics"].as_array_mut().unwrap();
    let cpu = metrics.remove(0);
    metrics.push(cpu);
    want["spec"]["metrics"][0]["resource"]["target"]["averageValue"] = json!("512Mi");
    // A condition without a transition time comes back with a null one (Go writes zero times).
    want["status"]["conditions"][1]["lastTransitionTime"] = Value::Null;
    assert_eq!(back["spec"], want["spec"]);
    assert_eq!(back["status"], want["status"]);
    assert_eq!(
        back["metadata"], want["metadata"],
        "the annotations are gone"
    );
    // And v1 → v2 → v1 is stable.
    assert_eq!(v1(back.clone()), v1(hpa_v2()));
    assert_eq!(v2(v1(back.clone())), back);
}

#[test]
fn v1_hpas_get_a_cpu_metric() {
    let h = json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 4,
                 "targetCPUUtilizationPercentage": 60},
        "status": {"currentReplicas": 0, "desiredReplicas": 0, "currentCPUUtilizationPercentage": 20}
    });
    let s = v2(h.clone());
    assert_eq!(
        s,
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 4,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 60}}}]},
            "status": {"desiredReplicas": 0, "currentMetrics": [{"type": "Resource",
                "resource": {"name": "cpu", "current": {"averageUtilization": 20}}}]}
        })
    );
    // Reading it back in v1 records the current metric (its raw value too, "0").
    let mut again = v1(s);
    assert_eq!(
        again["metadata"]["annotations"][METRIC_STATUSES_ANNOTATION],
        r#"[{"type":"Resource","resource":{"name":"cpu","currentAverageUtilization":20,"currentAverageValue":"0"}}]"#
    );
    again["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    assert_eq!(again, h);

    // No target at all: autoscaling/v1's implied 80%.
    let bare = json!({"apiVersion": "autoscaling/v1", "metadata": {"name": "b"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 2}});
    let s = v2(bare);
    assert_eq!(
        s["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}}])
    );
    assert_eq!(
        s["status"],
        json!({"desiredReplicas": 0, "currentMetrics": null})
    );
    assert_eq!(v1(s)["spec"]["targetCPUUtilizationPercentage"], 80);
}

#[test]
fn the_first_cpu_utilization_metric_is_the_v1_target() {
    // Kubernetes' #101370: a CPU average-value metric before the utilization one.
    let h = json!({"metadata": {"name": "h"}, "spec": {"minReplicas": 1, "maxReplicas": 3,
    "metrics": [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "AverageValue", "averageValue": "300m"}}},
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}
    ]}});
    let out = v1(h);
    assert_eq!(out["spec"]["targetCPUUtilizationPercentage"], 70);
    assert_eq!(
        out["metadata"]["annotations"][METRIC_SPECS_ANNOTATION],
        r#"[{"type":"Resource","resource":{"name":"cpu","targetAverageValue":"300m"}}]"#
    );
    assert_eq!(
        out["status"],
        json!({"currentReplicas": 0, "desiredReplicas": 0})
    );
}

#[test]
fn annotations_written_through_v1_become_fields() {
    let h = json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "annotations": {
            METRIC_SPECS_ANNOTATION: r#"[{"type":"External","external":{"metricName":"queue","targetAverageValue":"30"}},{"type":"Object","object":{"target":{"kind":"Service","name":"s"},"metricName":"m","targetValue":"0.5","averageValue":"1"}}]"#,
            BEHAVIOR_ANNOTATION: r#"{"scaleDown":{"stabilizationWindowSeconds":60}}"#,
            CONDITIONS_ANNOTATION: "not json",
            "keep": "me"
        }},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 4}
    });
    let s = v2(h);
    assert_eq!(s["metadata"]["annotations"], json!({"keep": "me"}));
    assert_eq!(
        s["spec"]["metrics"],
        json!([
            {"type": "External", "external": {"metric": {"name": "queue"},
                "target": {"type": "AverageValue", "averageValue": "30"}}},
            {"type": "Object", "object": {"describedObject": {"kind": "Service", "name": "s"},
                "metric": {"name": "m"},
                "target": {"type": "AverageValue", "value": "500m", "averageValue": "1"}}}
        ])
    );
    assert_eq!(
        s["spec"]["behavior"],
        json!({"scaleDown": {"stabilizationWindowSeconds": 60}})
    );
    assert!(s["status"].get("conditions").is_none());
    // An empty behavior is no behavior.
    let h = json!({"metadata": {"name": "x", "annotations": {BEHAVIOR_ANNOTATION: "{}"}},
        "spec": {"maxReplicas": 1}});
    let s = v2(h);
    assert!(s["spec"].get("behavior").is_none());
    assert!(s["metadata"].get("annotations").is_none());
}

#[test]
fn v2_writes_drop_round_trip_annotations() {
    let h = json!({"apiVersion": "autoscaling/v2", "metadata": {"name": "x",
        "annotations": {METRIC_SPECS_ANNOTATION: "[]", "a": "b"}}, "spec": {}});
    let s = to_storage("autoscaling", "v2", "HorizontalPodAutoscaler", h);
    assert_eq!(s["metadata"]["annotations"], json!({"a": "b"}));
    assert_eq!(s["spec"], json!({}));
    // Reads of the storage version are untouched.
    let h = hpa_v2();
    assert_eq!(
        from_storage("autoscaling", "v2", "HorizontalPodAutoscaler", h.clone()),
        h
    );
}
