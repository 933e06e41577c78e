//! End-to-end: the Deployment controller inside `capstan server` (with the ReplicaSet
//! controller, the scheduler and hollow nodes running the pods), driven with the real
//! kubectl: rollout status, rolling updates, history, undo, scaling, pause/resume,
//! Recreate, revision history cleanup, proportional scaling and the progress deadline.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{wait_until, Server};

const WAIT: Duration = Duration::from_secs(60);

fn json(s: &Server, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&s.ok(&a)).expect("kubectl prints json")
}

fn deployment_yaml(
    name: &str,
    replicas: u32,
    image: &str,
    strategy: &str,
    extra_spec: &str,
    pod_annotations: &str,
) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  annotations: {{kubernetes.io/change-cause: create}}\nspec:\n  replicas: {replicas}\n  strategy: {strategy}\n{extra_spec}  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n      annotations: {{{pod_annotations}}}\n    spec:\n      terminationGracePeriodSeconds: 0\n      containers:\n      - name: c\n        image: {image}\n"
    )
}

fn s_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// The deployment's replica sets (by controller reference), lowest revision first.
fn replica_sets(s: &Server, name: &str) -> Vec<Value> {
    let d = json(s, &["get", "deployment", name]);
    let uid = d["metadata"]["uid"].clone();
    let mut v: Vec<Value> = json(s, &["get", "rs"])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|rs| {
            rs["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["uid"] == uid && r["controller"] == true)
        })
        .collect();
    v.sort_by_key(revision);
    v
}

fn revision(rs: &Value) -> i64 {
    s_of(&rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"])
        .parse()
        .unwrap_or(0)
}

fn ann<'a>(o: &'a Value, key: &str) -> &'a str {
    s_of(&o["metadata"]["annotations"][key])
}

fn condition<'a>(d: &'a Value, type_: &str) -> &'a Value {
    d["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

/// Messages of the ScalingReplicaSet (and other) events about a deployment.
fn events(s: &Server, name: &str) -> Vec<String> {
    json(s, &["get", "events"])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| {
            e["involvedObject"]["kind"] == "Deployment" && e["involvedObject"]["name"] == name
        })
        .map(|e| format!("{}: {}", s_of(&e["reason"]), s_of(&e["message"])))
        .collect()
}

fn wait_event(s: &Server, name: &str, want: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let ev = events(s, name);
        if ev.iter().any(|e| e == want) {
            return;
        }
        if Instant::now() > deadline {
            panic!("no event {want:?} for deployment {name}; events: {ev:#?}");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn rollout_status(s: &Server, name: &str) {
    let out = s.kubectl(&[
        "rollout",
        "status",
        &format!("deployment/{name}"),
        "--timeout=60s",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !stdout.contains("successfully rolled out") {
        let log = s.log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        panic!(
            "rollout status of {name} failed:\n{stdout}\n{}\n{}\n{}\nserver log tail:\n{}\nhollow nodes:\n{}",
            String::from_utf8_lossy(&out.stderr),
            s.ok(&["get", "deployment", name, "-o", "yaml"]),
            s.ok(&["get", "rs,pods", "-o", "wide"]),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            hollow_logs(s)
        );
    }
}

/// The tail of the hollow nodes' logs (for failure messages).
fn hollow_logs(s: &Server) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(s.dir.path())
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with("hollow-") {
            let log = std::fs::read_to_string(e.path()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            out += &format!(
                "{name}:\n{}\n",
                lines[lines.len().saturating_sub(20)..].join("\n")
            );
        }
    }
    out
}

/// The pods of a replica set (by its pod-template-hash), not being deleted.
fn pods_with_hash(s: &Server, hash: &str) -> usize {
    json(
        s,
        &["get", "pods", "-l", &format!("pod-template-hash={hash}")],
    )["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .count()
        })
        .unwrap_or(0)
}

/// The rows of `kubectl rollout history`: revision and change cause.
fn history(s: &Server, name: &str) -> Vec<[String; 2]> {
    let out = s.ok(&["rollout", "history", &format!("deployment/{name}")]);
    out.lines()
        .skip_while(|l| !l.starts_with("REVISION"))
        .skip(1)
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some([w.next()?.to_string(), w.collect::<Vec<_>>().join(" ")])
        })
        .collect()
}

fn hash_of(rs: &Value) -> String {
    s_of(&rs["metadata"]["labels"]["pod-template-hash"]).to_string()
}

#[test]
fn rolling_update_history_undo_scale_and_pause() {
    let s = Server::start_cluster(&[]);
    let _nodes = s.hollow_nodes(&["dep-n1", "dep-n2"]);

    // Created: one replica set web-<hash> at revision 1, 3 pods, rollout complete.
    s.ok_stdin(
        &["apply", "-f", "-"],
        &deployment_yaml(
            "web",
            3,
            "nginx:1",
            "{type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}",
            "",
            "",
        ),
    );
    rollout_status(&s, "web");
    let d = json(&s, &["get", "deployment", "web"]);
    let rss = replica_sets(&s, "web");
    assert_eq!(rss.len(), 1, "{rss:#?}");
    let first = rss[0].clone();
    let first_name = s_of(&first["metadata"]["name"]).to_string();
    let first_hash = hash_of(&first);
    assert_eq!(first_name, format!("web-{first_hash}"));
    assert!(
        first_hash
            .chars()
            .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
        "{first_hash}"
    );
    assert_eq!(
        first["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        first_hash.as_str()
    );
    assert_eq!(
        first["spec"]["template"]["metadata"]["labels"]["pod-template-hash"],
        first_hash.as_str()
    );
    assert_eq!(first["spec"]["replicas"], 3);
    assert_eq!(ann(&first, "deployment.kubernetes.io/revision"), "1");
    assert_eq!(
        ann(&first, "deployment.kubernetes.io/desired-replicas"),
        "3"
    );
    assert_eq!(ann(&first, "deployment.kubernetes.io/max-replicas"), "4");
    assert_eq!(ann(&first, "kubernetes.io/change-cause"), "create");
    let r = &first["metadata"]["ownerReferences"][0];
    assert_eq!(
        (s_of(&r["kind"]), s_of(&r["apiVersion"])),
        ("Deployment", "apps/v1")
    );
    assert_eq!(r["blockOwnerDeletion"], true);
    assert_eq!(ann(&d, "deployment.kubernetes.io/revision"), "1");
    let st = &d["status"];
    for f in [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
    ] {
        assert_eq!(st[f], 3, "{f}: {st}");
    }
    assert!(st["unavailableReplicas"].is_null(), "{st}");
    assert_eq!(st["observedGeneration"], d["metadata"]["generation"]);
    let avail = condition(&d, "Available");
    assert_eq!(
        (
            s_of(&avail["status"]),
            s_of(&avail["reason"]),
            s_of(&avail["message"])
        ),
        (
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability."
        )
    );
    let prog = condition(&d, "Progressing");
    assert_eq!(
        (
            s_of(&prog["status"]),
            s_of(&prog["reason"]),
            s_of(&prog["message"]).to_string()
        ),
        (
            "True",
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{first_name}\" has successfully progressed.")
        )
    );
    assert_eq!(pods_with_hash(&s, &first_hash), 3);
    wait_event(
        &s,
        "web",
        &format!("ScalingReplicaSet: Scaled up replica set {first_name} from 0 to 3"),
    );

    // kubectl set image: a second replica set at revision 2 takes over, one pod at a time.
    // (The change cause is annotated after the change: the deployment's annotations are
    // copied to whichever replica set is new at the time.)
    s.ok(&["set", "image", "deployment/web", "c=nginx:2"]);
    s.ok(&[
        "annotate",
        "deployment",
        "web",
        "kubernetes.io/change-cause=v2",
        "--overwrite",
    ]);
    rollout_status(&s, "web");
    let rss = replica_sets(&s, "web");
    assert_eq!(rss.len(), 2, "{rss:#?}");
    assert_eq!(rss[0]["metadata"]["name"], first_name.as_str());
    assert_eq!((revision(&rss[0]), revision(&rss[1])), (1, 2));
    assert_eq!(
        (&rss[0]["spec"]["replicas"], &rss[1]["spec"]["replicas"]),
        (&Value::from(0), &Value::from(3))
    );
    let second_name = s_of(&rss[1]["metadata"]["name"]).to_string();
    let second_hash = hash_of(&rss[1]);
    assert_ne!(second_hash, first_hash);
    assert_eq!(ann(&rss[1], "kubernetes.io/change-cause"), "v2");
    assert_eq!(
        rss[1]["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
    assert_eq!(pods_with_hash(&s, &second_hash), 3);
    assert_eq!(pods_with_hash(&s, &first_hash), 0);
    let d = json(&s, &["get", "deployment", "web"]);
    assert_eq!(ann(&d, "deployment.kubernetes.io/revision"), "2");
    let ev = events(&s, "web");
    for want in [
        format!("ScalingReplicaSet: Scaled up replica set {second_name} from 0 to 1"),
        format!("ScalingReplicaSet: Scaled down replica set {first_name} from 3 to 2"),
        format!("ScalingReplicaSet: Scaled down replica set {first_name} from 1 to 0"),
    ] {
        assert!(ev.contains(&want), "missing {want:?} in {ev:#?}");
    }
    assert_eq!(history(&s, "web"), [["1", "create"], ["2", "v2"]]);

    // kubectl rollout undo: back to the first template, whose replica set is reused at
    // revision 3 (revision 1 moves to its history).
    s.ok(&["rollout", "undo", "deployment/web"]);
    rollout_status(&s, "web");
    let rss = replica_sets(&s, "web");
    assert_eq!(rss.len(), 2, "{rss:#?}");
    assert_eq!(rss[1]["metadata"]["name"], first_name.as_str());
    assert_eq!((revision(&rss[0]), revision(&rss[1])), (2, 3));
    assert_eq!(
        ann(&rss[1], "deployment.kubernetes.io/revision-history"),
        "1"
    );
    assert_eq!(ann(&rss[1], "kubernetes.io/change-cause"), "create");
    assert_eq!(rss[1]["spec"]["replicas"], 3);
    assert_eq!(rss[0]["spec"]["replicas"], 0);
    let d = json(&s, &["get", "deployment", "web"]);
    assert_eq!(ann(&d, "deployment.kubernetes.io/revision"), "3");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1"
    );
    assert_eq!(pods_with_hash(&s, &first_hash), 3);
    assert_eq!(history(&s, "web"), [["2", "v2"], ["3", "create"]]);

    // kubectl scale: the active replica set follows, its annotations too.
    s.ok(&["scale", "deployment/web", "--replicas=5"]);
    rollout_status(&s, "web");
    let rss = replica_sets(&s, "web");
    assert_eq!(rss[1]["spec"]["replicas"], 5);
    assert_eq!(
        ann(&rss[1], "deployment.kubernetes.io/desired-replicas"),
        "5"
    );
    assert_eq!(ann(&rss[1], "deployment.kubernetes.io/max-replicas"), "6");
    wait_event(
        &s,
        "web",
        &format!("ScalingReplicaSet: Scaled up replica set {first_name} from 3 to 5"),
    );

    // Paused: a template change rolls nothing out, scaling still applies.
    s.ok(&["rollout", "pause", "deployment/web"]);
    wait_until("Progressing=Unknown DeploymentPaused", WAIT, || {
        let d = json(&s, &["get", "deployment", "web"]);
        let c = condition(&d, "Progressing");
        c["status"] == "Unknown"
            && c["reason"] == "DeploymentPaused"
            && c["message"] == "Deployment is paused"
    });
    s.ok(&["set", "image", "deployment/web", "c=nginx:3"]);
    s.ok(&["scale", "deployment/web", "--replicas=4"]);
    wait_until("paused deployment scaled to 4", WAIT, || {
        let d = json(&s, &["get", "deployment", "web"]);
        d["status"]["observedGeneration"] == d["metadata"]["generation"]
            && d["status"]["availableReplicas"] == 4
            && d["status"]["replicas"] == 4
    });
    let rss = replica_sets(&s, "web");
    assert_eq!(rss.len(), 2, "no rollout while paused: {rss:#?}");
    assert_eq!(rss[1]["spec"]["replicas"], 4);
    let status = s.kubectl(&["rollout", "status", "deployment/web", "--timeout=1s"]);
    assert!(!status.status.success());

    // Resumed: the new template rolls out at revision 4.
    s.ok(&["rollout", "resume", "deployment/web"]);
    rollout_status(&s, "web");
    let rss = replica_sets(&s, "web");
    assert_eq!(rss.len(), 3, "{rss:#?}");
    assert_eq!(revision(&rss[2]), 4);
    assert_eq!(rss[2]["spec"]["replicas"], 4);
    assert_eq!(
        rss[2]["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:3"
    );
    let d = json(&s, &["get", "deployment", "web"]);
    assert_eq!(
        condition(&d, "Progressing")["reason"],
        "NewReplicaSetAvailable"
    );
    assert_eq!(d["status"]["updatedReplicas"], 4);
}

#[test]
fn recreate_history_limit_proportional_scaling_and_deadline() {
    let s = Server::start_cluster(&[]);
    let _nodes = s.hollow_nodes(&["dep-m1", "dep-m2"]);

    // Recreate: the old pods are gone before any new one exists; with
    // revisionHistoryLimit 1 only one old replica set is kept.
    s.ok_stdin(
        &["apply", "-f", "-"],
        &deployment_yaml(
            "rec",
            2,
            "nginx:1",
            "{type: Recreate}",
            "  revisionHistoryLimit: 1\n",
            "",
        ),
    );
    rollout_status(&s, "rec");
    let first_hash = hash_of(&replica_sets(&s, "rec")[0]);
    for (image, revision_now) in [("nginx:2", 2), ("nginx:3", 3)] {
        s.ok(&["set", "image", "deployment/rec", &format!("c={image}")]);
        let deadline = Instant::now() + WAIT;
        loop {
            let pods = json(&s, &["get", "pods", "-l", "app=rec"]);
            let items = pods["items"].as_array().cloned().unwrap_or_default();
            let images: Vec<&str> = items
                .iter()
                .map(|p| s_of(&p["spec"]["containers"][0]["image"]))
                .collect();
            assert!(
                images.iter().all(|i| *i == image) || images.iter().all(|i| *i != image),
                "old and new pods together under Recreate: {images:?}"
            );
            let done = images.len() == 2
                && images.iter().all(|i| *i == image)
                && items.iter().all(|p| p["status"]["phase"] == "Running");
            if done {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "recreate to {image} did not finish: {images:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        rollout_status(&s, "rec");
        let d = json(&s, &["get", "deployment", "rec"]);
        assert_eq!(
            ann(&d, "deployment.kubernetes.io/revision"),
            revision_now.to_string()
        );
    }
    wait_until(
        "revision history limited to one old replica set",
        WAIT,
        || replica_sets(&s, "rec").len() == 2,
    );
    let rss = replica_sets(&s, "rec");
    assert_eq!((revision(&rss[0]), revision(&rss[1])), (2, 3));
    assert!(rss.iter().all(|rs| hash_of(rs) != first_hash));
    assert_eq!(ann(&rss[1], "deployment.kubernetes.io/max-replicas"), "2");
    let old_name = s_of(&rss[0]["metadata"]["name"]).to_string();
    wait_event(
        &s,
        "rec",
        &format!("ScalingReplicaSet: Scaled down replica set {old_name} from 2 to 0"),
    );

    // A rollout whose new pods never become ready: maxSurge 1 / maxUnavailable 1 of 4
    // settles at old 3 + new 2.
    s.ok_stdin(
        &["apply", "-f", "-"],
        &deployment_yaml(
            "stuck",
            4,
            "nginx:1",
            "{type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 1}}",
            "  progressDeadlineSeconds: 8\n",
            "",
        ),
    );
    rollout_status(&s, "stuck");
    s.ok(&[
        "patch",
        "deployment",
        "stuck",
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"metadata":{"annotations":{"hollow.capstan.dev/ready":"false"}}}}}"#,
    ]);
    let (old, new) = {
        let deadline = Instant::now() + WAIT;
        loop {
            let rss = replica_sets(&s, "stuck");
            if rss.len() == 2 && rss[0]["spec"]["replicas"] == 3 && rss[1]["spec"]["replicas"] == 2
            {
                break (
                    s_of(&rss[0]["metadata"]["name"]).to_string(),
                    s_of(&rss[1]["metadata"]["name"]).to_string(),
                );
            }
            assert!(
                Instant::now() < deadline,
                "stuck rollout did not settle: {rss:#?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let d = json(&s, &["get", "deployment", "stuck"]);
    assert_eq!(d["status"]["updatedReplicas"], 2);

    // Scaled mid-rollout: 4 → 8 (maxSurge 1): 5 → 9 spread in proportion to the sizes
    // (3 × 9/5 = 5.4 → 5, 2 × 9/5 = 3.6 → 4).
    s.ok(&["scale", "deployment/stuck", "--replicas=8"]);
    wait_event(
        &s,
        "stuck",
        &format!("ScalingReplicaSet: Scaled up replica set {old} from 3 to 5"),
    );
    wait_event(
        &s,
        "stuck",
        &format!("ScalingReplicaSet: Scaled up replica set {new} from 2 to 4"),
    );

    // No progress within 8 s: Progressing=False ProgressDeadlineExceeded, and kubectl
    // rollout status fails.
    wait_until("ProgressDeadlineExceeded", WAIT, || {
        let d = json(&s, &["get", "deployment", "stuck"]);
        let c = condition(&d, "Progressing");
        c["status"] == "False"
            && c["reason"] == "ProgressDeadlineExceeded"
            && c["message"] == format!("ReplicaSet \"{new}\" has timed out progressing.")
    });
    let out = s.kubectl(&["rollout", "status", "deployment/stuck", "--timeout=20s"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("exceeded its progress deadline"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = json(&s, &["get", "deployment", "stuck"]);
    assert!(
        d["status"]["unavailableReplicas"].as_i64().unwrap_or(0) > 0,
        "{}",
        d["status"]
    );

    // Undo recovers: the first replica set takes all 8 replicas again.
    s.ok(&["rollout", "undo", "deployment/stuck"]);
    rollout_status(&s, "stuck");
    let rss = replica_sets(&s, "stuck");
    assert_eq!(rss[1]["metadata"]["name"], old.as_str());
    assert_eq!(rss[1]["spec"]["replicas"], 8);
    assert_eq!(rss[0]["spec"]["replicas"], 0);
    let d = json(&s, &["get", "deployment", "stuck"]);
    let c = condition(&d, "Progressing");
    assert_eq!(
        (s_of(&c["status"]), s_of(&c["reason"])),
        ("True", "NewReplicaSetAvailable")
    );
    assert_eq!(condition(&d, "Available")["status"], "True");
}
