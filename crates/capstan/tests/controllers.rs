//! The controller manager as a whole: its command line, its credentials, the default
//! StorageClass, and `capstan bench controllers` against a running cluster.

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
    // Each controller has its service account in kube-system, and writes as it.
    wait_until("the controllers' accounts", Duration::from_secs(60), || {
        s.ok(&["get", "serviceaccounts", "-n", "kube-system", "-o", "name"])
            .contains("serviceaccount/replicaset-controller\n")
    });
    let accounts = s.ok(&["get", "serviceaccounts", "-n", "kube-system", "-o", "name"]);
    for a in [
        "replicaset-controller",
        "deployment-controller",
        "generic-garbage-collector",
        "node-controller",
        "namespace-controller",
    ] {
        assert!(
            accounts.contains(&format!("serviceaccount/{a}\n")),
            "{a} missing: {accounts}"
        );
    }
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
