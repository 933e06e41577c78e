//! Pods: readiness, status reasons, restarts, wide columns.

use serde_json::{json, Value};

use super::*;

pub(super) fn crash_looping_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop", "creationTimestamp": ago(2 * DAY + 3 * 3600)},
        "spec": {"nodeName": "node-a", "containers": [
            {"name": "app", "image": "shop/web:1.4"}, {"name": "proxy", "image": "envoy:1.30"}]},
        "status": {
            "phase": "Running", "podIP": "10.244.1.5", "podIPs": [{"ip": "10.244.1.5"}],
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "app", "ready": false, "restartCount": 3,
                 "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                 "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                              "finishedAt": ago(300)}}},
                {"name": "proxy", "ready": true, "restartCount": 0,
                 "state": {"running": {"startedAt": ago(DAY)}}}
            ]
        }
    })
}

#[test]
fn pod_in_crash_loop() {
    assert_eq!(
        names("", "Pod"),
        [
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates"
        ]
    );
    assert_eq!(
        cells("", "Pod", &crash_looping_pod()),
        json!([
            "web-0",
            "1/2",
            "CrashLoopBackOff",
            "3 (5m ago)",
            "2d3h",
            "10.244.1.5",
            "node-a",
            "<none>",
            "<none>"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    assert!(row_conditions("", "Pod", &crash_looping_pod()).is_empty());
}

#[test]
fn pod_initializing() {
    let mut pod = json!({
        "metadata": {"name": "db-0", "creationTimestamp": ago(42)},
        "spec": {"initContainers": [{"name": "migrate"}, {"name": "seed"}],
                 "containers": [{"name": "db"}]},
        "status": {"phase": "Pending",
            "initContainerStatuses": [
                {"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "seed", "restartCount": 0, "state": {"running": {}}}],
            "containerStatuses": [
                {"name": "db", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]}
    });
    let c = cells("", "Pod", &pod);
    assert_eq!(
        c[..5],
        json!(["db-0", "0/1", "Init:1/2", "0", "42s"])
            .as_array()
            .unwrap()[..]
    );
    assert_eq!(c[5], json!("<none>"));
    assert_eq!(c[6], json!("<none>"));

    pod["status"]["initContainerStatuses"][1]["state"] =
        json!({"waiting": {"reason": "CrashLoopBackOff"}});
    pod["status"]["initContainerStatuses"][1]["restartCount"] = json!(4);
    pod["status"]["initContainerStatuses"][1]["lastState"] =
        json!({"terminated": {"exitCode": 2, "finishedAt": ago(125)}});
    let c = cells("", "Pod", &pod);
    assert_eq!(c[2], json!("Init:CrashLoopBackOff"));
    assert_eq!(c[3], json!("4 (2m5s ago)"));

    pod["status"]["initContainerStatuses"][1]["state"] =
        json!({"terminated": {"exitCode": 2, "reason": "Error"}});
    assert_eq!(cells("", "Pod", &pod)[2], json!("Init:Error"));
    pod["status"]["initContainerStatuses"][1]["state"] =
        json!({"terminated": {"exitCode": 137, "signal": 9}});
    assert_eq!(cells("", "Pod", &pod)[2], json!("Init:Signal:9"));
    pod["status"]["initContainerStatuses"][1]["state"] = json!({"terminated": {"exitCode": 3}});
    assert_eq!(cells("", "Pod", &pod)[2], json!("Init:ExitCode:3"));
}

#[test]
fn pod_with_sidecar_counts_it() {
    let pod = json!({
        "metadata": {"name": "app", "creationTimestamp": ago(3600)},
        "spec": {"initContainers": [{"name": "log-shipper", "restartPolicy": "Always"}],
                 "containers": [{"name": "main"}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
            "initContainerStatuses": [{"name": "log-shipper", "started": true, "ready": true,
                "restartCount": 1, "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(600)}}}],
            "containerStatuses": [{"name": "main", "ready": true, "restartCount": 0, "state": {"running": {}}}]}
    });
    let c = cells("", "Pod", &pod);
    assert_eq!(c[1], json!("2/2"));
    assert_eq!(c[2], json!("Running"));
    assert_eq!(c[3], json!("1 (10m ago)"));
    assert_eq!(c[4], json!("60m"));
}

#[test]
fn pod_terminating_completed_and_lost() {
    let mut pod = crash_looping_pod();
    pod["metadata"]["deletionTimestamp"] = json!(ago(10));
    assert_eq!(cells("", "Pod", &pod)[2], json!("Terminating"));
    pod["status"]["reason"] = json!("NodeLost");
    assert_eq!(cells("", "Pod", &pod)[2], json!("Unknown"));

    let done = json!({
        "metadata": {"name": "backup-28561", "creationTimestamp": ago(600)},
        "spec": {"containers": [{"name": "backup"}]},
        "status": {"phase": "Succeeded", "containerStatuses": [{"name": "backup", "ready": false,
            "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}
    });
    assert_eq!(
        cells("", "Pod", &done)[..4],
        json!(["backup-28561", "0/1", "Completed", "0"])
            .as_array()
            .unwrap()[..]
    );
    assert_eq!(
        row_conditions("", "Pod", &done),
        vec![
            json!({"type": "Completed", "status": "True", "reason": "Succeeded",
                    "message": "The pod has completed successfully."})
        ]
    );
    // A deleted pod that already finished is not "Terminating".
    let mut deleted = done.clone();
    deleted["metadata"]["deletionTimestamp"] = json!(ago(1));
    assert_eq!(cells("", "Pod", &deleted)[2], json!("Completed"));

    let oom = json!({
        "metadata": {"name": "hog"}, "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "c", "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}
    });
    assert_eq!(cells("", "Pod", &oom)[2], json!("OOMKilled"));
    assert_eq!(cells("", "Pod", &oom)[4], json!("<unknown>"));
}

#[test]
fn pod_gates_nomination_and_scheduling_gates() {
    let pod = json!({
        "metadata": {"name": "gated"},
        "spec": {"containers": [{"name": "c"}],
                 "readinessGates": [{"conditionType": "www.example.com/lb"}, {"conditionType": "x/y"}]},
        "status": {"phase": "Pending", "nominatedNodeName": "node-b",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"},
                           {"type": "www.example.com/lb", "status": "True"}]}
    });
    let c = cells("", "Pod", &pod);
    assert_eq!(c[2], json!("SchedulingGated"));
    assert_eq!(c[7], json!("node-b"));
    assert_eq!(c[8], json!("1/2"));
}
