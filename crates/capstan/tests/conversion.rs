//! End to end with the real kubectl: resources served in two versions over one storage read
//! the same in either (autoscalers in autoscaling/v1 and v2, events in core/v1 and
//! events.k8s.io/v1).

mod support;

use serde_json::Value;
use support::Server;

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[test]
fn autoscalers_and_events_in_both_versions() {
    let s = Server::start();
    s.ok(&["create", "deployment", "web", "--image=nginx"]);

    // kubectl 1.32 autoscales through autoscaling/v1 ...
    let out = s.ok(&[
        "autoscale",
        "deployment",
        "web",
        "--max=5",
        "--cpu-percent=60",
    ]);
    assert_eq!(
        out.trim(),
        "horizontalpodautoscaler.autoscaling/web autoscaled"
    );
    let v1 = json(&s.ok(&[
        "get",
        "horizontalpodautoscalers.v1.autoscaling",
        "web",
        "-o",
        "json",
    ]));
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
    assert_eq!(v1["spec"]["maxReplicas"], 5);
    // ... and reads and describes through v2, which sees the same autoscaler.
    let v2 = json(&s.ok(&["get", "hpa", "web", "-o", "json"]));
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(
        v2["metadata"]["resourceVersion"],
        v1["metadata"]["resourceVersion"]
    );
    assert_eq!(
        v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        60
    );
    let d = s.ok(&["describe", "hpa", "web"]);
    assert!(
        d.contains("Reference:") && d.contains("Deployment/web"),
        "{d}"
    );
    assert!(
        d.contains("resource cpu on pods  (as a percentage of request):  <unknown> / 60%"),
        "{d}"
    );
    assert!(d.contains("Max replicas:") && d.contains('5'), "{d}");

    // What v1 cannot say travels in annotations and survives a v1 edit.
    s.ok_stdin(
        &["apply", "-f", "-"],
        r#"apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: mem}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 3
  metrics:
  - type: Resource
    resource: {name: memory, target: {type: AverageValue, averageValue: 100Mi}}
"#,
    );
    let ann = s.ok(&[
        "get",
        "horizontalpodautoscalers.v1.autoscaling",
        "mem",
        "-o",
        r#"jsonpath={.metadata.annotations.autoscaling\.alpha\.kubernetes\.io/metrics}"#,
    ]);
    assert_eq!(
        ann,
        r#"[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"100Mi"}}]"#
    );
    s.ok(&[
        "patch",
        "horizontalpodautoscalers.v1.autoscaling",
        "mem",
        "-p",
        r#"{"spec":{"targetCPUUtilizationPercentage":70}}"#,
    ]);
    let v2 = json(&s.ok(&["get", "hpa", "mem", "-o", "json"]));
    let metrics: Vec<&str> = v2["spec"]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["resource"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(metrics, ["memory", "cpu"], "{v2}");
    assert!(v2["metadata"]
        .get("annotations")
        .is_none_or(|a| a.get("autoscaling.alpha.kubernetes.io/metrics").is_none()));
    let t = s.ok(&["get", "horizontalpodautoscalers.v1.autoscaling", "mem"]);
    assert!(t.contains("memory: <unknown>/100Mi"), "{t}");

    // Events written through events.k8s.io (as the scheduler does) and core/v1 (the kubelet).
    s.ok_stdin(
        &["create", "-f", "-"],
        r#"apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: web-0.scheduled}
eventTime: "2024-01-01T00:00:01.000000Z"
reportingController: default-scheduler
reportingInstance: default-scheduler-n1
action: Binding
reason: Scheduled
type: Normal
regarding: {apiVersion: v1, kind: Pod, name: web-0, namespace: default}
note: Successfully assigned default/web-0 to n1
---
apiVersion: v1
kind: Event
metadata: {name: web-0.pulled}
involvedObject: {apiVersion: v1, kind: Pod, name: web-0, namespace: default}
reason: Pulled
message: Container image already present
type: Normal
source: {component: kubelet, host: n1}
firstTimestamp: "2024-01-01T00:00:02Z"
lastTimestamp: "2024-01-01T00:00:02Z"
count: 1
"#,
    );
    // kubectl events (core/v1) shows both with their object and message.
    let ev = s.ok(&["events", "--for", "pod/web-0"]);
    for want in [
        "Scheduled   Pod/web-0   Successfully assigned default/web-0 to n1",
        "Pulled      Pod/web-0   Container image already present",
    ] {
        assert!(ev.contains(want), "{ev}");
    }
    let names = |args: &[&str]| -> Vec<String> {
        let mut n: Vec<String> = s
            .ok(&[&["get", "-o", "name"][..], args].concat())
            .lines()
            .map(str::to_string)
            .collect();
        n.sort();
        n
    };
    assert_eq!(
        names(&["events", "--field-selector", "involvedObject.name=web-0"]),
        ["event/web-0.pulled", "event/web-0.scheduled"]
    );
    assert_eq!(
        names(&[
            "events",
            "--field-selector",
            "reportingComponent=default-scheduler"
        ]),
        ["event/web-0.scheduled"]
    );
    assert_eq!(
        names(&[
            "events.events.k8s.io",
            "--field-selector",
            "regarding.name=web-0,reason=Pulled"
        ]),
        ["event.events.k8s.io/web-0.pulled"]
    );
    let e = json(&s.ok(&[
        "get",
        "events.v1.events.k8s.io",
        "web-0.pulled",
        "-o",
        "json",
    ]));
    assert_eq!(e["note"], "Container image already present");
    assert_eq!(e["deprecatedSource"]["component"], "kubelet");
    let c = json(&s.ok(&["get", "events", "web-0.scheduled", "-o", "json"]));
    assert_eq!(c["message"], "Successfully assigned default/web-0 to n1");
    assert_eq!(c["reportingComponent"], "default-scheduler");
    let wide = s.ok(&["get", "events.events.k8s.io", "-o", "wide"]);
    assert!(
        wide.contains("default-scheduler, default-scheduler-n1") && wide.contains("kubelet, n1"),
        "{wide}"
    );
}
