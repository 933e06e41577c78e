//! End-to-end: `kubectl get componentstatuses` (`cs`) — computed by the API server on every
//! request from the scheduler's and controller manager's leader leases and the store's health.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::{wait_until, Server};

const WARNING: &str = "Warning: v1 ComponentStatus is deprecated in v1.19+";

/// `(status, message, error)` of the Healthy condition of every component, by name, from
/// `kubectl get cs -o json`.
fn statuses(server: &Server) -> Vec<(String, String, String, String)> {
    let list: Value = serde_json::from_str(&server.ok(&["get", "cs", "-o", "json"])).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let c = &item["conditions"][0];
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            assert_eq!(c["type"], "Healthy", "{item}");
            (
                s(&item["metadata"]["name"]),
                s(&c["status"]),
                s(&c["message"]),
                s(&c["error"]),
            )
        })
        .collect()
}

fn status_of(server: &Server, name: &str) -> (String, String, String) {
    statuses(server)
        .into_iter()
        .find(|(n, ..)| n == name)
        .map(|(_, s, m, e)| (s, m, e))
        .unwrap_or_else(|| panic!("no componentstatus {name}"))
}

fn healthy(server: &Server, name: &str) -> bool {
    status_of(server, name) == ("True".into(), "ok".into(), String::new())
}

/// A child process killed (and reaped) when dropped, even if the test fails.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_cluster_reports_its_components_healthy() {
    let server = Server::start_cluster(&[]);
    wait_until(
        "the scheduler and the controller manager hold their leases",
        Duration::from_secs(60),
        || healthy(&server, "scheduler") && healthy(&server, "controller-manager"),
    );
    assert_eq!(
        statuses(&server)
            .into_iter()
            .map(|(n, s, m, e)| format!("{n} {s} {m} {e}"))
            .collect::<Vec<_>>(),
        [
            "scheduler True ok ",
            "controller-manager True ok ",
            "etcd-0 True ok "
        ]
    );

    // The table kubectl prints, with the deprecation warning on stderr.
    let out = server.kubectl(&["get", "cs"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["NAME", "STATUS", "MESSAGE", "ERROR"],
            vec!["scheduler", "Healthy", "ok"],
            vec!["controller-manager", "Healthy", "ok"],
            vec!["etcd-0", "Healthy", "ok"],
        ],
        "{stdout}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(WARNING),
        "{out:?}"
    );

    // One by name, in full.
    let out = server.kubectl(&["get", "componentstatus", "scheduler", "-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(WARNING));
    let cs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cs["kind"], "ComponentStatus");
    assert_eq!(cs["apiVersion"], "v1");
    assert_eq!(cs["metadata"]["name"], "scheduler");
    assert_eq!(
        cs["conditions"],
        serde_json::json!([{"type": "Healthy", "status": "True", "message": "ok"}])
    );

    // The raw list: kind ComponentStatusList, no resourceVersion.
    let raw: Value =
        serde_json::from_str(&server.ok(&["get", "--raw", "/api/v1/componentstatuses"])).unwrap();
    assert_eq!(raw["kind"], "ComponentStatusList");
    assert_eq!(raw["metadata"], serde_json::json!({}));
    assert_eq!(raw["items"].as_array().map(Vec::len), Some(3));

    // Selectors: by name; a label selector matches nothing (components have no labels).
    assert_eq!(
        server.ok(&[
            "get",
            "cs",
            "--field-selector",
            "metadata.name=etcd-0",
            "-o",
            "name"
        ]),
        "componentstatus/etcd-0\n"
    );
    assert_eq!(
        server.ok(&["get", "cs", "-l", "tier=control-plane", "-o", "name"]),
        ""
    );

    // Unknown names are NotFound; watches and writes are not allowed.
    let err = server.fails(&["get", "cs", "kube-proxy"]);
    assert!(
        err.contains("NotFound") && err.contains("componentstatuses \"kube-proxy\" not found"),
        "{err}"
    );
    let err = server.fails(&["get", "--raw", "/api/v1/componentstatuses?watch=true"]);
    assert!(err.contains("MethodNotAllowed"), "{err}");
    let err = server.fails(&["delete", "cs", "scheduler"]);
    assert!(err.contains("MethodNotAllowed"), "{err}");
    let out = server.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: ComponentStatus\nmetadata:\n  name: mine\nconditions: []\n",
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("MethodNotAllowed"),
        "{out:?}"
    );
}

#[test]
fn components_without_a_live_leader_are_unhealthy() {
    // No scheduler and no controller manager in the server.
    let server = Server::start();
    assert_eq!(
        status_of(&server, "scheduler"),
        (
            "False".into(),
            "no leader: lease kube-system/kube-scheduler not found".into(),
            String::new()
        )
    );
    assert_eq!(
        status_of(&server, "controller-manager").1,
        "no leader: lease kube-system/kube-controller-manager not found"
    );
    assert!(healthy(&server, "etcd-0"));
    let table = server.ok(&["get", "cs", "scheduler"]);
    assert!(
        table.contains("Unhealthy") && table.contains("no leader"),
        "{table}"
    );

    // A scheduler in its own process, with a short lease: healthy while it runs...
    let config = server.dir.path().join("scheduler.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         leaderElection:\n  leaderElect: true\n  leaseDuration: 4s\n  renewDeadline: 3s\n  retryPeriod: 1s\n",
    )
    .unwrap();
    let log = std::fs::File::create(server.dir.path().join("scheduler.log")).unwrap();
    let scheduler = Killed(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .arg("scheduler")
            .arg("--kubeconfig")
            .arg(server.kubeconfig())
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("capstan scheduler starts"),
    );
    wait_until(
        "the separate scheduler takes its lease",
        Duration::from_secs(30),
        || healthy(&server, "scheduler"),
    );
    let holder = server.ok(&[
        "get",
        "lease",
        "-n",
        "kube-system",
        "kube-scheduler",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    assert!(!holder.is_empty());

    // ...and unhealthy once it dies without releasing the lease and the lease runs out.
    drop(scheduler);
    wait_until(
        "the dead scheduler's lease expires",
        Duration::from_secs(30),
        || status_of(&server, "scheduler").0 == "False",
    );
    let (_, message, error) = status_of(&server, "scheduler");
    assert!(
        message.starts_with(&format!(
            "leader {holder} stopped renewing lease kube-system/kube-scheduler at "
        )) && message.ends_with("(lease duration 4s)"),
        "{message}"
    );
    assert_eq!(error, "");
}

#[test]
fn each_etcd_member_is_probed_on_its_own() {
    let etcd = capstan_testkit::EtcdCluster::start(3).expect("etcd starts");
    let endpoints = etcd.client_endpoints();
    let server = Server::start_with(&["--etcd-servers", &endpoints.join(",")]);
    let names: Vec<String> = statuses(&server).into_iter().map(|s| s.0).collect();
    assert_eq!(
        names,
        [
            "scheduler",
            "controller-manager",
            "etcd-0",
            "etcd-1",
            "etcd-2"
        ]
    );
    for i in 0..3 {
        assert!(healthy(&server, &format!("etcd-{i}")), "etcd-{i}");
    }

    // One member dies: only its entry turns unhealthy (the other two keep quorum).
    etcd.kill(2);
    wait_until("etcd-2 reported unhealthy", Duration::from_secs(30), || {
        status_of(&server, "etcd-2").0 == "False"
    });
    let (_, message, error) = status_of(&server, "etcd-2");
    assert_eq!(message, "");
    assert!(
        error.starts_with(&format!("error getting data from etcd {}: ", endpoints[2]))
            && error.contains("Connection refused"),
        "{error}"
    );
    assert!(healthy(&server, "etcd-0") && healthy(&server, "etcd-1"));
    let out = server.kubectl(&["get", "cs", "etcd-2"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Unhealthy"));
}
