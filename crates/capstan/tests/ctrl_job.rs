//! End-to-end: the Job, CronJob, TTL-after-finished and pod GC controllers against a real
//! cluster (API server, scheduler, controller manager) with hollow nodes running the pods.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{wait_until, Server};

const WAIT: Duration = Duration::from_secs(60);

fn json(s: &Server, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&s.ok(&a)).unwrap()
}

fn try_json(s: &Server, args: &[&str]) -> Option<Value> {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    let out = s.kubectl(&a);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).unwrap())
}

fn items(v: &Value) -> Vec<Value> {
    v["items"].as_array().cloned().unwrap_or_default()
}

/// (type, reason, message) of the events about `kind/name`.
fn events(s: &Server, kind: &str, name: &str) -> Vec<(String, String, String)> {
    items(&json(s, &["get", "events"]))
        .iter()
        .filter(|e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name)
        .map(|e| {
            let f = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (f("type"), f("reason"), f("message"))
        })
        .collect()
}

fn wait_event(s: &Server, kind: &str, name: &str, reason: &str) -> (String, String, String) {
    let mut found = None;
    wait_until(&format!("event {reason} on {kind}/{name}"), WAIT, || {
        found = events(s, kind, name).into_iter().find(|e| e.1 == reason);
        found.is_some()
    });
    found.unwrap()
}

fn condition<'a>(job: &'a Value, type_: &str) -> Option<&'a Value> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn job_pods(s: &Server, job: &str) -> Vec<Value> {
    items(&json(
        s,
        &[
            "get",
            "pods",
            "-l",
            &format!("batch.kubernetes.io/job-name={job}"),
        ],
    ))
}

fn wait_job(s: &Server, name: &str, cond: &str) -> Value {
    let out = s.kubectl(&[
        "wait",
        &format!("--for=condition={cond}"),
        &format!("job/{name}"),
        "--timeout=60s",
    ]);
    assert!(
        out.status.success(),
        "job {name} never got {cond}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.ok(&["get", "job", name, "-o", "yaml"])
    );
    json(s, &["get", "job", name])
}

const JOBS: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: pi}
spec:
  completions: 3
  parallelism: 2
  template:
    metadata:
      annotations: {hollow.capstan.dev/exit-code: "0", hollow.capstan.dev/run-seconds: "1"}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: fail}
spec:
  backoffLimit: 1
  template:
    metadata:
      annotations: {hollow.capstan.dev/exit-code: "3"}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: idx}
spec:
  completionMode: Indexed
  completions: 3
  parallelism: 3
  template:
    metadata:
      annotations: {hollow.capstan.dev/exit-code: "0"}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: ttl}
spec:
  ttlSecondsAfterFinished: 0
  template:
    metadata:
      annotations: {hollow.capstan.dev/exit-code: "0"}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: deadline}
spec:
  activeDeadlineSeconds: 3
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: pfp}
spec:
  backoffLimit: 6
  podFailurePolicy:
    rules:
    - action: FailJob
      onExitCodes: {containerName: c, operator: In, values: [42]}
  template:
    metadata:
      annotations: {hollow.capstan.dev/exit-code: "42"}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: held}
spec:
  suspend: true
  template:
    metadata:
      annotations: {hollow.capstan.dev/exit-code: "0"}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
"#;

#[test]
fn jobs_complete_fail_index_expire_and_suspend() {
    let s = Server::start_cluster(&[]);
    let _nodes = s.hollow_nodes(&["n1"]);
    s.ok_stdin(&["apply", "-f", "-"], JOBS);

    // A suspended job creates no pods and says so.
    wait_until("held is Suspended", WAIT, || {
        let j = json(&s, &["get", "job", "held"]);
        condition(&j, "Suspended")
            .is_some_and(|c| c["status"] == "True" && c["reason"] == "JobSuspended")
    });
    assert!(job_pods(&s, "held").is_empty());
    assert!(json(&s, &["get", "job", "held"])["status"]["startTime"].is_null());

    // completions 3, parallelism 2: never more than two at once, three successes.
    let mut max_active = 0;
    wait_until("pi completes", WAIT, || {
        let j = json(&s, &["get", "job", "pi"]);
        max_active = max_active.max(j["status"]["active"].as_i64().unwrap_or(0));
        condition(&j, "Complete").is_some()
    });
    assert!(
        max_active <= 2,
        "at most parallelism pods run: {max_active}"
    );
    let pi = wait_job(&s, "pi", "complete");
    let st = &pi["status"];
    assert_eq!(st["succeeded"], 3, "{pi}");
    assert_eq!(st["ready"], 0);
    assert_eq!(st["terminating"], 0);
    assert!(st["active"].is_null() && st["failed"].is_null(), "{st}");
    assert_eq!(st["uncountedTerminatedPods"], serde_json::json!({}));
    assert!(st["startTime"].is_string() && st["completionTime"].is_string());
    let scm = condition(&pi, "SuccessCriteriaMet").expect("SuccessCriteriaMet first");
    let complete = condition(&pi, "Complete").unwrap();
    for c in [scm, complete] {
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "CompletionsReached");
        assert_eq!(c["message"], "Reached expected number of succeeded pods");
    }
    assert_eq!(st["completionTime"], complete["lastTransitionTime"]);
    let pods = job_pods(&s, "pi");
    assert_eq!(pods.len(), 3);
    let uid = pi["metadata"]["uid"].as_str().unwrap();
    for p in &pods {
        let name = p["metadata"]["name"].as_str().unwrap();
        assert!(
            name.starts_with("pi-") && name.len() == "pi-".len() + 5,
            "{name}"
        );
        assert_eq!(
            p["metadata"]["labels"]["batch.kubernetes.io/controller-uid"],
            uid
        );
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "Job");
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
        assert!(
            p["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty()),
            "tracking finalizer removed once counted: {p}"
        );
    }
    let evs = events(&s, "Job", "pi");
    let created = evs.iter().filter(|e| e.1 == "SuccessfulCreate").count();
    assert_eq!(created, 3, "{evs:?}");
    assert!(evs
        .iter()
        .any(|e| e.1 == "SuccessfulCreate" && e.2.starts_with("Created pod: pi-")));
    assert!(evs.contains(&("Normal".into(), "Completed".into(), "Job completed".into())));

    // Indexed: one pod per index, named, labelled, annotated and with the index env var.
    let idx = wait_job(&s, "idx", "complete");
    assert_eq!(idx["status"]["completedIndexes"], "0-2", "{idx}");
    assert_eq!(idx["status"]["succeeded"], 3);
    let mut seen: Vec<String> = Vec::new();
    for p in job_pods(&s, "idx") {
        let ix = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"],
            ix.as_str()
        );
        assert!(p["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with(&format!("idx-{ix}-")));
        assert_eq!(p["spec"]["hostname"], format!("idx-{ix}"));
        let env = &p["spec"]["containers"][0]["env"][0];
        assert_eq!(env["name"], "JOB_COMPLETION_INDEX");
        assert_eq!(
            env["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.labels['batch.kubernetes.io/job-completion-index']"
        );
        seen.push(ix);
    }
    seen.sort();
    assert_eq!(seen, vec!["0", "1", "2"]);

    // backoffLimit 1: the failed pod is replaced once (after the back-off), then the job fails.
    let fail = wait_job(&s, "fail", "failed");
    assert_eq!(fail["status"]["failed"], 2, "{fail}");
    let target = condition(&fail, "FailureTarget").expect("FailureTarget before Failed");
    let failed = condition(&fail, "Failed").unwrap();
    for c in [target, failed] {
        assert_eq!(c["reason"], "BackoffLimitExceeded");
        assert_eq!(c["message"], "Job has reached the specified backoff limit");
    }
    assert!(fail["status"]["completionTime"].is_null());
    assert!(condition(&fail, "Complete").is_none());
    assert_eq!(job_pods(&s, "fail").len(), 2);
    let ev = wait_event(&s, "Job", "fail", "BackoffLimitExceeded");
    assert_eq!(
        ev,
        (
            "Warning".into(),
            "BackoffLimitExceeded".into(),
            "Job has reached the specified backoff limit".into()
        )
    );

    // activeDeadlineSeconds: the running pod is deleted and the job fails.
    let dl = wait_job(&s, "deadline", "failed");
    assert_eq!(
        condition(&dl, "Failed").unwrap()["reason"],
        "DeadlineExceeded"
    );
    assert_eq!(
        condition(&dl, "Failed").unwrap()["message"],
        "Job was active longer than specified deadline"
    );
    wait_until("deadline's pod is deleted", WAIT, || {
        job_pods(&s, "deadline").is_empty()
    });
    assert_eq!(json(&s, &["get", "job", "deadline"])["status"]["failed"], 1);
    wait_event(&s, "Job", "deadline", "DeadlineExceeded");

    // podFailurePolicy FailJob on exit code 42: fails at once despite backoffLimit 6.
    let pfp = wait_job(&s, "pfp", "failed");
    let c = condition(&pfp, "Failed").unwrap();
    assert_eq!(c["reason"], "PodFailurePolicy");
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Container c for pod default/pfp-")
            && msg.ends_with("failed with exit code 42 matching FailJob rule at index 0"),
        "{msg}"
    );
    assert_eq!(job_pods(&s, "pfp").len(), 1);

    // ttlSecondsAfterFinished 0: deleted (in the foreground) once complete.
    wait_until("job ttl is deleted", WAIT, || {
        try_json(&s, &["get", "job", "ttl"]).is_none()
    });

    // Resuming the suspended job runs it, with a JobResumed condition and a start time.
    s.ok(&[
        "patch",
        "job",
        "held",
        "--type=merge",
        "-p",
        r#"{"spec":{"suspend":false}}"#,
    ]);
    let held = wait_job(&s, "held", "complete");
    let c = condition(&held, "Suspended").unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("JobResumed"))
    );
    assert!(held["status"]["startTime"].is_string());
    let evs = events(&s, "Job", "held");
    assert!(
        evs.iter().any(|e| e.1 == "Suspended") && evs.iter().any(|e| e.1 == "Resumed"),
        "{evs:?}"
    );

    // kubectl shows the Job columns from the status.
    let table = s.ok(&["get", "job", "pi", "idx"]);
    assert!(
        table.contains("Complete") && table.contains("3/3"),
        "{table}"
    );
}

const CRONJOBS: &str = r#"
apiVersion: batch/v1
kind: CronJob
metadata: {name: cj}
spec:
  schedule: "* * * * *"
  successfulJobsHistoryLimit: 1
  jobTemplate:
    metadata:
      labels: {app: cj}
    spec:
      template:
        metadata:
          annotations: {hollow.capstan.dev/exit-code: "0", hollow.capstan.dev/run-seconds: "1"}
        spec:
          restartPolicy: Never
          containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: paused}
spec:
  schedule: "* * * * *"
  suspend: true
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: c, image: busybox}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: atlantis}
spec:
  schedule: "0 * * * *"
  timeZone: Europe/Atlantis
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: c, image: busybox}]
"#;

/// Pretend the CronJob last ran five minutes ago, so its latest schedule time is due now
/// rather than at the next minute.
fn backdate(s: &Server, name: &str) {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", "-5 min", "+%Y-%m-%dT%H:%M:00Z"])
        .output()
        .unwrap();
    let when = String::from_utf8(out.stdout).unwrap();
    let patch = format!(r#"{{"status":{{"lastScheduleTime":"{}"}}}}"#, when.trim());
    s.ok(&[
        "patch",
        "cronjob",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ]);
}

fn cronjob_jobs(s: &Server, cj: &str) -> Vec<Value> {
    items(&json(s, &["get", "jobs"]))
        .into_iter()
        .filter(|j| j["metadata"]["ownerReferences"][0]["name"] == cj)
        .collect()
}

#[test]
fn cronjobs_schedule_track_and_prune_history() {
    let s = Server::start_cluster(&[]);
    let _nodes = s.hollow_nodes(&["n1"]);
    s.ok_stdin(&["apply", "-f", "-"], CRONJOBS);
    backdate(&s, "cj");
    backdate(&s, "paused");

    // The missed schedule (the start of this minute) runs now.
    let mut scheduled = Vec::new();
    wait_until("cj creates a job", WAIT, || {
        scheduled = cronjob_jobs(&s, "cj");
        !scheduled.is_empty()
    });
    let job = &scheduled[0];
    let name = job["metadata"]["name"].as_str().unwrap().to_string();
    let minutes: i64 = name.strip_prefix("cj-").unwrap().parse().unwrap();
    let stamp = job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
        .as_str()
        .unwrap()
        .to_string();
    let out = std::process::Command::new("date")
        .args([
            "-u",
            "-d",
            &format!("@{}", minutes * 60),
            "+%Y-%m-%dT%H:%M:%SZ",
        ])
        .output()
        .unwrap();
    assert_eq!(stamp, String::from_utf8(out.stdout).unwrap().trim());
    assert_eq!(job["metadata"]["labels"]["app"], "cj");
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "CronJob");
    assert_eq!(job["metadata"]["ownerReferences"][0]["controller"], true);
    let ev = wait_event(&s, "CronJob", "cj", "SuccessfulCreate");
    assert_eq!(ev.2, format!("Created job {name}"));
    // The next minute's job may already be there when the minute turned meanwhile.
    let cj = json(&s, &["get", "cronjob", "cj"]);
    let last = cj["status"]["lastScheduleTime"]
        .as_str()
        .unwrap_or_default();
    assert!(
        last >= stamp.as_str() && last.ends_with(":00Z"),
        "lastScheduleTime {last} before the job's {stamp}"
    );

    // Finished: out of the active list, lastSuccessfulTime set.
    wait_job(&s, &name, "complete");
    wait_until("cj sees the job complete", WAIT, || {
        let cj = json(&s, &["get", "cronjob", "cj"]);
        cj["status"]["active"].is_null() && cj["status"]["lastSuccessfulTime"].is_string()
    });
    let ev = wait_event(&s, "CronJob", "cj", "SawCompletedJob");
    assert_eq!(ev.2, format!("Saw completed job: {name}, status: Complete"));

    // A job made by hand from the CronJob is one it did not create; once it completes the
    // older of the two successful jobs goes (successfulJobsHistoryLimit 1).
    s.ok(&["create", "job", "--from=cronjob/cj", "manual"]);
    let ev = wait_event(&s, "CronJob", "cj", "UnexpectedJob");
    assert_eq!(
        ev,
        (
            "Warning".into(),
            "UnexpectedJob".into(),
            "Saw a job that the controller did not create or forgot: manual".into()
        )
    );
    wait_job(&s, "manual", "complete");
    wait_until("the older job is pruned", WAIT, || {
        try_json(&s, &["get", "job", &name]).is_none()
    });
    let ev = wait_event(&s, "CronJob", "cj", "SuccessfulDelete");
    assert_eq!(ev.2, format!("Deleted job {name}"));
    assert!(try_json(&s, &["get", "job", "manual"]).is_some());

    // A zone the system does not know: a warning, no job.
    let ev = wait_event(&s, "CronJob", "atlantis", "UnknownTimeZone");
    assert_eq!(
        ev.2,
        r#"invalid timeZone: "Europe/Atlantis": unknown time zone Europe/Atlantis"#
    );
    // Suspended: nothing runs although a schedule time is due.
    assert!(cronjob_jobs(&s, "paused").is_empty());
    assert!(cronjob_jobs(&s, "atlantis").is_empty());
}

#[test]
fn pod_gc_keeps_the_newest_terminated_pods() {
    let s = Server::start_cluster(&["--terminated-pod-gc-threshold=2"]);
    let _nodes = s.hollow_nodes(&["n1"]);
    let mut manifest = String::new();
    for i in 1..=4 {
        manifest.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p{i}\n  annotations: {{hollow.capstan.dev/exit-code: \"0\"}}\nspec:\n  restartPolicy: Never\n  containers: [{{name: c, image: busybox}}]\n"
        ));
    }
    manifest.push_str("---\napiVersion: v1\nkind: Pod\nmetadata: {name: runner}\nspec:\n  containers: [{name: c, image: busybox}]\n");
    s.ok_stdin(&["apply", "-f", "-"], &manifest);
    // Terminated pods beyond the threshold go, oldest (then by name) first; running ones stay.
    wait_until("two terminated pods are collected", WAIT, || {
        let names: Vec<String> = items(&json(&s, &["get", "pods"]))
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        names == ["p3", "p4", "runner"]
    });
    for p in ["p3", "p4"] {
        assert_eq!(json(&s, &["get", "pod", p])["status"]["phase"], "Succeeded");
    }
    assert_eq!(
        json(&s, &["get", "pod", "runner"])["status"]["phase"],
        "Running"
    );
}
