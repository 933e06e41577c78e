//! The controller manager as a whole: its command line, its credentials, the default
//! StorageClass, and `capstan bench controllers` and `capstan bench density` against a
//! running cluster.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{wait_until, Server};

#[test]
fn controller_manager_flags_are_checked_with_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("none.kubeconfig");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["controller-manager", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&["--node-monitor-grace-period", "4x"]);
    assert!(err.contains("invalid duration \"4x\""), "{err}");
    let err = run(&["--controllers", "*,-nope"]);
    assert!(
        err.contains("unknown controller \"nope\"") && err.trim().lines().count() == 1,
        "{err}"
    );
}

#[test]
fn controllers_write_as_their_own_accounts_and_scale_a_deployment() {
    let s = Server::start_cluster(&[]);
    // Each controller has its service account in kube-system, and writes as it (the manager
    // makes them one after another as it starts its controllers).
    let wanted = [
        "replicaset-controller",
        "deployment-controller",
        "generic-garbage-collector",
        "node-controller",
        "namespace-controller",
        "horizontal-pod-autoscaler",
    ];
    wait_until("the controllers' accounts", Duration::from_secs(60), || {
        let accounts = s.ok(&["get", "serviceaccounts", "-n", "kube-system", "-o", "name"]);
        wanted
            .iter()
            .all(|a| accounts.contains(&format!("serviceaccount/{a}\n")))
    });
    // The bench scales a Deployment from 0 and waits until every pod exists.
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["bench", "controllers", "--kubeconfig"])
        .arg(s.kubeconfig())
        .args(["--replicas", "60", "--timeout-seconds", "120", "--keep"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("deployment scaled 0 → 60") && text.contains("all pods created"),
        "{text}"
    );
    // The pods are the ReplicaSet controller's, and so are their creation events.
    let ns = s
        .ok(&["get", "ns", "-o", "name"])
        .lines()
        .find_map(|l| {
            l.strip_prefix("namespace/bench-controllers-")
                .map(String::from)
        })
        .expect("the bench namespace is kept");
    let ns = format!("bench-controllers-{ns}");
    let pods = s.ok(&["get", "pods", "-n", &ns, "-o", "name"]);
    assert_eq!(pods.lines().count(), 60);
    wait_until("SuccessfulCreate events", Duration::from_secs(60), || {
        let ev = s.ok(&[
            "get",
            "events",
            "-n",
            &ns,
            "--field-selector",
            "reason=SuccessfulCreate",
            "-o",
            "jsonpath={range .items[*]}{.source.component} {.reportingComponent}{\"\\n\"}{end}",
        ]);
        ev.lines()
            .any(|l| l == "replicaset-controller replicaset-controller")
    });
    // The default StorageClass exists (as k3s's local-path).
    wait_until("the default StorageClass", Duration::from_secs(30), || {
        s.kubectl(&["get", "storageclass", "local-path"])
            .status
            .success()
    });
    let class = s.ok(&["get", "storageclass"]);
    assert!(class.contains("local-path (default)"), "{class}");
}

#[test]
fn the_density_bench_runs_pods_on_hollow_nodes_churns_and_judges_the_slos() {
    let s = Server::start_cluster(&[]);
    let _nodes = s.hollow_nodes(&["density-0", "density-1", "density-2"]);
    let density = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["bench", "density", "--kubeconfig"])
            .arg(s.kubeconfig())
            .args(args)
            .output()
            .unwrap()
    };
    // Bad input: one line each.
    let out = density(&["--nodes", "3", "--churn", "none,scale"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--churn none cannot be combined") && err.trim().lines().count() == 1,
        "{err}"
    );
    let out = density(&["--nodes", "5", "--timeout-seconds", "3"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("only 3 of the 5 nodes wanted are Ready"),
        "{err}"
    );

    // 3 nodes x 4 pods in Deployments of 5 (5, 5, 2) over 2 namespaces, then churn.
    let pid = s.pid().to_string();
    let out = density(&[
        "--nodes",
        "3",
        "--pods-per-node",
        "4",
        "--deployment-size",
        "5",
        "--namespaces",
        "2",
        "--timeout-seconds",
        "120",
        "--pid",
        &pid,
        "--json",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text.lines().last().unwrap();
    let v: serde_json::Value = serde_json::from_str(line).expect(line);
    assert_eq!(v["pods"], 12, "{v}");
    assert_eq!(
        (v["deployments"].as_u64(), v["namespaces"].as_u64()),
        (Some(3), Some(2))
    );
    let startup = v["p99_ms"].as_f64().unwrap();
    assert!(
        startup > 0.0 && v["all_running_seconds"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    let phases: Vec<&str> = v["churn"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases.len(), 3, "{v}");
    assert!(phases[2].contains("roll"), "{phases:?}");
    // The control plane's own figures: the server process was measured.
    assert!(v["proc_peak_rss_bytes"].as_f64().unwrap() > 10e6, "{v}");
    assert!(v["metrics_peak_rss_bytes"].as_f64().unwrap() > 10e6, "{v}");
    // The API server's histograms saw the controllers create the pods (12, then 6 more
    // after the halving, then 12 for the rollout) and the bench create its Deployments.
    let calls = v["api"].as_array().unwrap();
    let count = |verb: &str, resource: &str, sub: &str| {
        calls
            .iter()
            .find(|c| c["verb"] == verb && c["resource"] == resource && c["subresource"] == sub)
            .and_then(|c| c["count"].as_f64())
            .unwrap_or(0.0)
    };
    assert!(count("POST", "pods", "") >= 30.0, "{v}");
    assert_eq!(count("POST", "deployments", ""), 3.0, "{v}");
    assert!(count("POST", "pods", "binding") >= 30.0, "{v}");
    let met = calls.iter().all(|c| c["met"] == true) && startup <= 5000.0;
    assert_eq!(v["slos_met"], met, "{v}");
    assert!(text.contains("every SLO: "), "{text}");
    // The run's namespaces are deleted afterwards.
    wait_until(
        "the run's namespaces deleted",
        Duration::from_secs(60),
        || {
            s.ok(&["get", "ns", "-l", "capstan.dev/density", "-o", "name"])
                .trim()
                .is_empty()
        },
    );
}
