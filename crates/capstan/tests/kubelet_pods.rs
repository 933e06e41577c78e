//! The kubelet's pod workers on a real node (containerd, busybox from a local registry):
//! pods run and report their status as Kubernetes' kubelet does, restart policies, crash
//! back-off, init containers, image pull failures, graceful deletion, and a Deployment.

mod support;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

const WAIT: Duration = Duration::from_secs(120);

fn pod_json(server: &Server, name: &str) -> Value {
    let out = server.kubectl(&["get", "pod", name, "-o", "json"]);
    if !out.status.success() {
        return Value::Null;
    }
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or_default()
}

fn condition<'a>(p: &'a Value, t: &str) -> &'a Value {
    p["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == t))
        .unwrap_or(&Value::Null)
}

fn container_status<'a>(p: &'a Value, list: &str, name: &str) -> &'a Value {
    p["status"][list]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

/// `reason: message` of every event about `pod`, one a line.
fn events(server: &Server, pod: &str) -> String {
    let selector = format!("involvedObject.name={pod}");
    server.ok(&[
        "get",
        "events",
        "--field-selector",
        &selector,
        "-o",
        "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
    ])
}

/// Wait until `f` holds for the pod; on timeout, fail with the pod, its events and the
/// kubelet's log.
fn wait_pod(
    server: &Server,
    kubelet: &Kubelet,
    name: &str,
    what: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let p = pod_json(server, name);
        if f(&p) {
            return p;
        }
        if Instant::now() > deadline {
            panic!(
                "pod {name}: {what} did not happen:\n{}\nevents:\n{}\nkubelet log:\n{}",
                serde_json::to_string_pretty(&p["status"]).unwrap_or_default(),
                events(server, name),
                kubelet.log_tail(60)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn in_cidr(ip: &str, cidr: &str) -> bool {
    let Some((net, bits)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(ip), Ok(net), Ok(bits)) = (
        ip.parse::<Ipv4Addr>(),
        net.parse::<Ipv4Addr>(),
        bits.parse::<u32>(),
    ) else {
        return false;
    };
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    u32::from(ip) & mask == u32::from(net) & mask
}

fn pod_yaml(name: &str, restart: &str, image: &str, script: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  restartPolicy: {restart}
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: {image}
    command: ["sh", "-c", {script:?}]
"#
    )
}

#[test]
fn pods_run_restart_and_report_status() {
    let cidr = unique_cluster_cidr();
    let server = Server::start_cluster(&["--cluster-cidr", &cidr]);
    let kubelet = server.kubelet("node-a");
    let busybox = kubelet.image("busybox");

    server.ok_stdin(
        &["apply", "-f", "-"],
        &pod_yaml("web", "Always", &busybox, "sleep 3600"),
    );
    server.ok_stdin(
        &["apply", "-f", "-"],
        &pod_yaml("three", "Never", &busybox, "echo bye; exit 3"),
    );
    server.ok_stdin(
        &["apply", "-f", "-"],
        &pod_yaml("flaky", "OnFailure", &busybox, "exit 1"),
    );
    server.ok_stdin(
        &["apply", "-f", "-"],
        &pod_yaml("missing", "Always", &kubelet.image("nope:1"), "sleep 3600"),
    );
    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: init}}
spec:
  terminationGracePeriodSeconds: 5
  initContainers:
  - name: first
    image: {busybox}
    command: ["sh", "-c", "sleep 2"]
  - name: second
    image: {busybox}
    command: ["true"]
  containers:
  - name: main
    image: {busybox}
    command: ["sleep", "3600"]
"#
        ),
    );

    // A running pod: Ready, an IP from the node's pod CIDR, container statuses filled.
    let web = wait_pod(&server, &kubelet, "web", "Running and Ready", |p| {
        phase(p) == "Running" && condition(p, "Ready")["status"] == "True"
    });
    let node: Value =
        serde_json::from_str(&server.ok(&["get", "node", "node-a", "-o", "json"])).unwrap();
    let pod_cidr = node["spec"]["podCIDR"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pod_ip = web["status"]["podIP"].as_str().unwrap_or_default();
    assert!(
        in_cidr(pod_ip, &pod_cidr),
        "pod IP {pod_ip} outside the node's podCIDR {pod_cidr}"
    );
    assert_eq!(web["status"]["podIPs"][0]["ip"], pod_ip);
    let internal_ip = node["status"]["addresses"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["type"] == "InternalIP"))
        .map(|a| a["address"].clone())
        .unwrap_or(Value::Null);
    assert_eq!(web["status"]["hostIP"], internal_ip);
    assert_eq!(web["status"]["hostIPs"][0]["ip"], internal_ip);
    assert_eq!(web["status"]["qosClass"], "BestEffort");
    assert!(web["status"]["startTime"].is_string());
    for t in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "PodScheduled",
    ] {
        assert_eq!(condition(&web, t)["status"], "True", "{t}");
    }
    let main = container_status(&web, "containerStatuses", "main");
    assert!(
        main["containerID"]
            .as_str()
            .unwrap_or_default()
            .starts_with("containerd://"),
        "{main}"
    );
    assert!(
        main["imageID"]
            .as_str()
            .unwrap_or_default()
            .contains("sha256:"),
        "{main}"
    );
    assert!(
        main["image"]
            .as_str()
            .unwrap_or_default()
            .contains("busybox"),
        "{main}"
    );
    assert_eq!(main["ready"], true);
    assert_eq!(main["started"], true);
    assert_eq!(main["restartCount"], 0);
    assert!(main["state"]["running"]["startedAt"].is_string(), "{main}");
    // Events are written asynchronously: the pod may be Ready before the last one lands.
    let reasons = [
        "Pulled: ",
        "Created: Created container main",
        "Started: Started container main",
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut ev = events(&server, "web");
    while !reasons.iter().all(|r| ev.contains(r)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        ev = events(&server, "web");
    }
    for reason in reasons {
        assert!(ev.contains(reason), "no {reason:?} event in:\n{ev}");
    }

    // restartPolicy Never and exit 3: Failed, with the exit code and the reason.
    let three = wait_pod(&server, &kubelet, "three", "Failed", |p| {
        phase(p) == "Failed"
    });
    let term = &container_status(&three, "containerStatuses", "main")["state"]["terminated"];
    assert_eq!(term["exitCode"], 3, "{three}");
    assert_eq!(term["reason"], "Error");
    // A finished pod keeps the IP it had.
    assert!(three["status"]["podIP"].is_string(), "{three}");
    assert!(term["finishedAt"].is_string() && term["startedAt"].is_string());
    assert_eq!(condition(&three, "Ready")["status"], "False");

    // restartPolicy OnFailure: restarted, backing off.
    let flaky = wait_pod(
        &server,
        &kubelet,
        "flaky",
        "restarts with CrashLoopBackOff",
        |p| {
            let c = container_status(p, "containerStatuses", "main");
            c["state"]["waiting"]["reason"] == "CrashLoopBackOff"
                && c["restartCount"].as_i64().unwrap_or(0) >= 2
        },
    );
    let c = container_status(&flaky, "containerStatuses", "main");
    assert!(
        c["state"]["waiting"]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("back-off "),
        "{c}"
    );
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 1, "{c}");
    assert_eq!(phase(&flaky), "Running");
    let ev = events(&server, "flaky");
    assert!(
        ev.contains("BackOff: Back-off restarting failed container main in pod flaky_default("),
        "{ev}"
    );

    // Init containers ran first, in order.
    let init = wait_pod(&server, &kubelet, "init", "Running", |p| {
        phase(p) == "Running"
    });
    assert_eq!(condition(&init, "Initialized")["status"], "True");
    let first = container_status(&init, "initContainerStatuses", "first");
    let second = container_status(&init, "initContainerStatuses", "second");
    assert_eq!(
        first["state"]["terminated"]["reason"], "Completed",
        "{init}"
    );
    assert_eq!(second["state"]["terminated"]["exitCode"], 0, "{init}");
    assert_eq!(first["ready"], true);
    let first_done = first["state"]["terminated"]["finishedAt"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let second_start = second["state"]["terminated"]["startedAt"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let main_start = container_status(&init, "containerStatuses", "main")["state"]["running"]
        ["startedAt"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        first_done <= second_start && second_start <= main_start,
        "{first_done} {second_start} {main_start}"
    );

    // A missing image: ErrImagePull, then ImagePullBackOff.
    wait_pod(&server, &kubelet, "missing", "image pull back-off", |p| {
        container_status(p, "containerStatuses", "main")["state"]["waiting"]["reason"]
            == "ImagePullBackOff"
    });
    let ev = events(&server, "missing");
    assert!(ev.contains("Failed: Failed to pull image"), "{ev}");
    assert!(ev.contains("Failed: Error: ErrImagePull"), "{ev}");
    assert!(ev.contains("BackOff: Back-off pulling image"), "{ev}");
    let missing = pod_json(&server, "missing");
    assert_eq!(phase(&missing), "Pending");

    // The bad pods did not disturb the good one.
    let web = pod_json(&server, "web");
    assert_eq!(phase(&web), "Running");
    assert_eq!(
        container_status(&web, "containerStatuses", "main")["restartCount"],
        0
    );
}

#[test]
fn graceful_deletion_and_deployments() {
    let cidr = unique_cluster_cidr();
    let server = Server::start_cluster(&["--cluster-cidr", &cidr]);
    let mut kubelet = server.kubelet("node-a");
    let busybox = kubelet.image("busybox");

    // A pod that exits on TERM: deleting it stops it and the pod object goes away.
    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: trap}}
spec:
  terminationGracePeriodSeconds: 60
  containers:
  - name: main
    image: {busybox}
    command: ["sh", "-c", "trap 'echo got TERM; exit 0' TERM; while true; do sleep 1; done"]
"#
        ),
    );
    wait_pod(&server, &kubelet, "trap", "Running", |p| {
        phase(p) == "Running"
    });
    let start = Instant::now();
    server.ok(&["delete", "pod", "trap", "--wait=false"]);
    wait_pod(&server, &kubelet, "trap", "deletion", |p| p.is_null());
    // The TERM handler ended it well within the grace period.
    assert!(
        start.elapsed() < Duration::from_secs(45),
        "took {:?}",
        start.elapsed()
    );
    let ev = events(&server, "trap");
    assert!(ev.contains("Killing: Stopping container main"), "{ev}");

    // A pod bound to the node that does not match its labels is rejected by the kubelet.
    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: misfit}}
spec:
  nodeName: node-a
  nodeSelector: {{disk: none}}
  containers:
  - name: main
    image: {busybox}
    command: ["sleep", "3600"]
"#
        ),
    );
    let misfit = wait_pod(&server, &kubelet, "misfit", "rejection", |p| {
        phase(p) == "Failed"
    });
    assert_eq!(misfit["status"]["reason"], "NodeAffinity", "{misfit}");
    assert!(
        misfit["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Pod was rejected: "),
        "{misfit}"
    );
    server.ok(&["delete", "pod", "misfit", "--wait=false"]);
    wait_pod(&server, &kubelet, "misfit", "deletion", |p| p.is_null());

    // A Deployment of three replicas, all running on the node.
    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: web
        image: {busybox}
        command: ["sleep", "3600"]
"#
        ),
    );
    let deadline = Instant::now() + WAIT;
    loop {
        let out = server.ok(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={range .items[*]}{.status.phase}/{.spec.nodeName}/{.status.podIP} {end}",
        ]);
        let pods: Vec<&str> = out.split_whitespace().collect();
        let running = pods
            .iter()
            .filter(|p| p.starts_with("Running/node-a/10."))
            .count();
        if pods.len() == 3 && running == 3 {
            let ips: std::collections::BTreeSet<&str> =
                pods.iter().filter_map(|p| p.rsplit('/').next()).collect();
            assert_eq!(ips.len(), 3, "pod IPs are distinct: {out}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "deployment pods: {out}\nkubelet log:\n{}",
            kubelet.log_tail(60)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let available = server.ok(&[
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.status.availableReplicas}",
    ]);
    let deadline = Instant::now() + WAIT;
    let mut available = available;
    while available != "3" {
        assert!(Instant::now() < deadline, "availableReplicas {available}");
        std::thread::sleep(Duration::from_millis(500));
        available = server.ok(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.availableReplicas}",
        ]);
    }

    // A restarted kubelet adopts the running containers instead of starting new ones.
    let ids = |server: &Server| {
        server.ok(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={range .items[*]}{.status.containerStatuses[0].containerID}/{.status.containerStatuses[0].restartCount}/{.status.containerStatuses[0].ready} {end}",
        ])
    };
    let before = ids(&server);
    kubelet.restart();
    std::thread::sleep(Duration::from_secs(6));
    assert!(kubelet.is_running(), "{}", kubelet.log_tail(40));
    assert_eq!(ids(&server), before);
    assert_eq!(before.matches("/0/true").count(), 3, "{before}");

    // Scaling down: the removed pods stop and disappear.
    server.ok(&["scale", "deployment", "web", "--replicas=1"]);
    let deadline = Instant::now() + WAIT;
    loop {
        let out = server.ok(&["get", "pods", "-l", "app=web", "-o", "name"]);
        if out.lines().count() == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "pods left: {out}");
        std::thread::sleep(Duration::from_millis(500));
    }
}
