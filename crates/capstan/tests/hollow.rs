#![allow(clippy::useless_format)]
//! Hollow kubelets: `capstan kubelet --runtime fake` (the real kubelet over an in-memory
//! runtime) and `capstan bench hollow` (many of them in one process) against a real control
//! plane.

mod support;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use support::{wait_until, Server};

/// A name no other test (process or thread) uses.
fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A child process killed (and reaped) when dropped, even when the test fails.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn spawn(cmd: &mut Command, log: PathBuf) -> Proc {
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let child = cmd
            .env("CAPSTAN_LOG", "info")
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("capstan starts");
        Proc { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn jsonpath(server: &Server, args: &[&str], path: &str) -> String {
    let jp = format!("jsonpath={path}");
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-o", jp.as_str()]);
    let out = server.kubectl(&all);
    if out.status.success() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        String::new()
    }
}

/// Whether `ip` is inside `cidr` (IPv4).
fn in_cidr(ip: &str, cidr: &str) -> bool {
    let (Some((net, len)), Ok(ip)) = (cidr.split_once('/'), ip.parse::<Ipv4Addr>()) else {
        return false;
    };
    let (Ok(net), Ok(len)) = (net.parse::<Ipv4Addr>(), len.parse::<u32>()) else {
        return false;
    };
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    u32::from(ip) & mask == u32::from(net) & mask
}

/// Files named `name` under `dir`.
fn find_files(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            find_files(&p, name, out);
        } else if p.file_name().is_some_and(|n| n == name) {
            out.push(p);
        }
    }
}

#[test]
fn a_hollow_kubelet_registers_runs_pods_and_renews_its_lease() {
    let server = Server::start_cluster(&[]);
    let node = unique("hollow");
    let dir = tempfile::tempdir().unwrap();
    // The kubelet's own identity (system:node:NAME): the Node authorizer and NodeRestriction
    // judge everything it does.
    let kubeconfig = server.node_kubeconfig(&node, dir.path());
    let root = dir.path().join("root");
    let mut kubelet = Proc::spawn(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["kubelet", "--runtime", "fake", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--hostname-override", &node, "--root-dir"])
            .arg(&root)
            .arg("--pod-logs-dir")
            .arg(dir.path().join("logs"))
            .args(["--node-status-update-frequency", "2s"])
            .args(["--node-lease-duration-seconds", "8"])
            .args(["--hollow-cpu", "16", "--hollow-memory", "64Gi"]),
        dir.path().join("kubelet.log"),
    );

    let ready = "{.status.conditions[?(@.type==\"Ready\")].status}";
    wait_until(
        "the hollow node to be Ready",
        Duration::from_secs(60),
        || {
            assert!(kubelet.running(), "the kubelet exited:\n{}", kubelet.log());
            jsonpath(&server, &["get", "node", &node], ready) == "True"
        },
    );
    let get_node = |path: &str| jsonpath(&server, &["get", "node", &node], path);
    assert_eq!(
        get_node("{.status.nodeInfo.containerRuntimeVersion}"),
        "fake://1.0.0"
    );
    assert_eq!(get_node("{.status.capacity.cpu}"), "16");
    assert_eq!(get_node("{.status.capacity.memory}"), "64Gi");
    assert_eq!(get_node("{.status.capacity.pods}"), "110");
    let internal_ip = get_node("{.status.addresses[?(@.type==\"InternalIP\")].address}");
    assert!(
        in_cidr(&internal_ip, "198.18.0.0/15"),
        "InternalIP {internal_ip:?}"
    );
    // The node's pod CIDR (nodeipam gives it right after registration) reaches the runtime.
    wait_until(
        "the kubelet to apply its pod CIDR",
        Duration::from_secs(30),
        || kubelet.log().contains("updated pod CIDR"),
    );
    let pod_cidr = get_node("{.spec.podCIDR}");
    assert!(!pod_cidr.is_empty(), "the node has no podCIDR");

    // A Deployment's pods run, each with its own address from the node's pod CIDR.
    let ns = unique("hollow-ns");
    server.ok(&["create", "namespace", &ns]);
    server.ok_stdin(
        &["apply", "-n", &ns, "-f", "-"],
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
      initContainers: [{{name: setup, image: busybox:1.36}}]
      containers:
      - name: web
        image: nginx:1.27
        readinessProbe: {{httpGet: {{port: 80, path: /}}, periodSeconds: 1}}
        livenessProbe: {{tcpSocket: {{port: 80}}, periodSeconds: 1, failureThreshold: 1}}
        volumeMounts: [{{name: scratch, mountPath: /scratch}}, {{name: mem, mountPath: /mem}}]
      volumes:
      - {{name: scratch, emptyDir: {{}}}}
      - {{name: mem, emptyDir: {{medium: Memory}}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: job-like
  annotations: {{hollow.capstan.dev/exit-code: "0", hollow.capstan.dev/run-seconds: "1"}}
spec:
  restartPolicy: Never
  containers: [{{name: main, image: busybox:1.36}}]
"#
        ),
    );
    let pods = || {
        jsonpath(
            &server,
            &["get", "pods", "-n", &ns, "-l", "app=web"],
            "{range .items[*]}{.status.phase} {.status.podIP}{\"\\n\"}{end}",
        )
    };
    wait_until(
        "three Running pods with addresses",
        Duration::from_secs(60),
        || {
            let out = pods();
            let lines: Vec<&str> = out.lines().collect();
            lines.len() == 3
                && lines
                    .iter()
                    .all(|l| l.starts_with("Running ") && l.len() > "Running ".len())
        },
    );
    let out = pods();
    let ips: std::collections::HashSet<&str> =
        out.lines().filter_map(|l| l.split(' ').nth(1)).collect();
    assert_eq!(ips.len(), 3, "pod addresses are distinct: {out}");
    for ip in &ips {
        assert!(in_cidr(ip, &pod_cidr), "pod IP {ip} outside {pod_cidr}");
    }
    // The init container ran to completion; the app container reports its image and becomes
    // ready once its readiness probe (every second) has passed, which may come after Running.
    let first = || {
        jsonpath(
            &server,
            &["get", "pods", "-n", &ns, "-l", "app=web"],
            "{.items[0].status.initContainerStatuses[0].state.terminated.reason} {.items[0].status.containerStatuses[0].image} {.items[0].status.containerStatuses[0].ready}",
        )
    };
    assert!(
        first().starts_with("Completed docker.io/library/nginx:1.27 "),
        "{}",
        first()
    );
    wait_until(
        "the first pod's container to be ready",
        Duration::from_secs(30),
        || first() == "Completed docker.io/library/nginx:1.27 true",
    );
    // The annotated pod ends as asked.
    wait_until(
        "the job-like pod to succeed",
        Duration::from_secs(30),
        || {
            jsonpath(
                &server,
                &["get", "pod", "-n", &ns, "job-like"],
                "{.status.phase}",
            ) == "Succeeded"
        },
    );

    // Volumes are plain files on disk: the service account token was written, and nothing
    // (not even the memory-backed emptyDir) was mounted.
    let mut tokens = Vec::new();
    find_files(&root.join("pods"), "token", &mut tokens);
    assert!(
        !tokens.is_empty(),
        "no projected token under {}",
        root.display()
    );
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let root_text = root.to_string_lossy().into_owned();
    assert!(
        !mountinfo.contains(&root_text),
        "the hollow kubelet mounted something under its root"
    );

    // The Lease is renewed (every 2 s with an 8 s duration).
    let renew = || {
        jsonpath(
            &server,
            &["get", "lease", "-n", "kube-node-lease", &node],
            "{.spec.renewTime}",
        )
    };
    let first_renewal = renew();
    assert!(!first_renewal.is_empty(), "no node lease");
    assert_eq!(
        jsonpath(
            &server,
            &["get", "lease", "-n", "kube-node-lease", &node],
            "{.spec.holderIdentity} {.metadata.ownerReferences[0].kind}"
        ),
        format!("{node} Node")
    );
    wait_until("the lease to be renewed", Duration::from_secs(20), || {
        let now = renew();
        !now.is_empty() && now != first_renewal
    });

    // Deleted pods go away: the kubelet stops them and confirms the deletion.
    server.ok(&["delete", "deployment", "-n", &ns, "web", "--wait=false"]);
    wait_until(
        "the Deployment's pods to be gone",
        Duration::from_secs(60),
        || pods().trim().is_empty(),
    );
    server.ok(&["delete", "pod", "-n", &ns, "job-like", "--wait=false"]);
    wait_until(
        "the finished pod to be gone",
        Duration::from_secs(60),
        || {
            let out = server.kubectl(&["get", "pod", "-n", &ns, "job-like"]);
            !out.status.success()
        },
    );
    assert!(kubelet.running(), "the kubelet exited:\n{}", kubelet.log());
}

/// The HorizontalPodAutoscaler controller reads the usage a hollow kubelet reports for its pods
/// (`hollow.capstan.dev/cpu-millicores`) through the resource metrics API, scales their
/// Deployment up to its maximum, and back down when the usage falls, reporting as Kubernetes
/// does in status, conditions, events and `kubectl get hpa`.
#[test]
fn a_horizontal_pod_autoscaler_follows_the_usage_the_metrics_api_reports() {
    let server = Server::start_cluster(&["--horizontal-pod-autoscaler-sync-period", "2s"]);
    let node = unique("hpa");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.node_kubeconfig(&node, dir.path());
    // Reachable by the API server, which scrapes the kubelet's /metrics/resource.
    let port = support::free_port().to_string();
    let mut kubelet = Proc::spawn(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["kubelet", "--runtime", "fake", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--hostname-override", &node, "--root-dir"])
            .arg(dir.path().join("root"))
            .arg("--pod-logs-dir")
            .arg(dir.path().join("logs"))
            .args([
                "--hollow-serve",
                "--node-ip",
                "127.0.0.1",
                "--address",
                "127.0.0.1",
            ])
            .args(["--port", &port, "--node-status-update-frequency", "2s"]),
        dir.path().join("kubelet.log"),
    );
    let ready = "{.status.conditions[?(@.type==\"Ready\")].status}";
    wait_until(
        "the hollow node to be Ready",
        Duration::from_secs(60),
        || {
            assert!(kubelet.running(), "the kubelet exited:\n{}", kubelet.log());
            jsonpath(&server, &["get", "node", &node], ready) == "True"
        },
    );

    let ns = unique("hpa-ns");
    server.ok(&["create", "namespace", &ns]);
    let deployment = |millicores: u32| {
        format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: busy}}
spec:
  selector: {{matchLabels: {{app: busy}}}}
  template:
    metadata:
      labels: {{app: busy}}
      annotations: {{hollow.capstan.dev/cpu-millicores: "{millicores}"}}
    spec:
      containers:
      - name: main
        image: busybox:1.36
        resources: {{requests: {{cpu: 100m}}}}
"#
        )
    };
    server.ok_stdin(&["apply", "-n", &ns, "-f", "-"], &deployment(250));
    server.ok_stdin(
        &["apply", "-n", &ns, "-f", "-"],
        r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: busy}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: busy}
  minReplicas: 1
  maxReplicas: 4
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 0
      policies: [{type: Percent, value: 100, periodSeconds: 15}]
"#,
    );
    let replicas = || {
        jsonpath(
            &server,
            &["get", "deployment", "-n", &ns, "busy"],
            "{.spec.replicas}",
        )
    };
    // 250m of 100m requested is 250 % against 50 %: five replicas asked, four allowed.
    wait_until(
        "the autoscaler to scale the Deployment to its maximum",
        Duration::from_secs(150),
        || replicas() == "4",
    );
    let hpa = |path: &str| jsonpath(&server, &["get", "hpa", "-n", &ns, "busy"], path);
    wait_until(
        "the autoscaler's status to show the usage",
        Duration::from_secs(60),
        || hpa("{.status.currentReplicas}") == "4",
    );
    // The pods all still use ~250 % (a rate over two samples of their CPU time); the status
    // says so, and that the maximum holds.
    let near_250 = |s: &str| s.parse::<i64>().is_ok_and(|v| (240..=260).contains(&v));
    let utilization = hpa("{.status.currentMetrics[0].resource.current.averageUtilization}");
    assert!(near_250(&utilization), "averageUtilization {utilization:?}");
    let value = hpa("{.status.currentMetrics[0].resource.current.averageValue}");
    assert!(
        value.strip_suffix('m').is_some_and(near_250),
        "averageValue {value:?}"
    );
    assert_eq!(hpa("{.status.desiredReplicas}"), "4");
    let condition = |t: &str| {
        hpa(&format!(
            "{{.status.conditions[?(@.type==\"{t}\")].status}} {{.status.conditions[?(@.type==\"{t}\")].reason}}"
        ))
    };
    assert_eq!(condition("ScalingActive"), "True ValidMetricFound");
    assert_eq!(condition("ScalingLimited"), "True TooManyReplicas");
    assert!(condition("AbleToScale").starts_with("True "));
    let table = server.ok(&["get", "hpa", "-n", &ns, "busy"]);
    let targets = table
        .split_whitespace()
        .find(|w| w.ends_with("%/50%"))
        .unwrap_or_default();
    assert!(
        near_250(targets.trim_end_matches("%/50%")),
        "no cpu: ~250%/50% in\n{table}"
    );
    // The controller speaks through autoscaling/v1 too.
    let v1 = server.ok(&[
        "get",
        "horizontalpodautoscalers.v1.autoscaling",
        "-n",
        &ns,
        "busy",
        "-o",
        "jsonpath={.status.currentCPUUtilizationPercentage}",
    ]);
    assert!(near_250(&v1), "currentCPUUtilizationPercentage {v1:?}");
    let events = || {
        server.ok(&[
            "get",
            "events",
            "-n",
            &ns,
            "--field-selector",
            "involvedObject.kind=HorizontalPodAutoscaler",
            "-o",
            "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
        ])
    };
    let ev = events();
    assert!(
        ev.contains("SuccessfulRescale: New size: 4; reason: cpu resource utilization (percentage of request) above target"),
        "{ev}"
    );

    // The usage falls to 10 % (a new template): with no scale-down window it goes to 1.
    server.ok_stdin(&["apply", "-n", &ns, "-f", "-"], &deployment(10));
    wait_until(
        "the autoscaler to scale the Deployment down to its minimum",
        Duration::from_secs(180),
        || replicas() == "1",
    );
    let ev = events();
    assert!(
        ev.contains("SuccessfulRescale: New size: 1; reason: All metrics below target"),
        "{ev}"
    );

    // A target that does not exist: AbleToScale False, FailedGetScale, nothing else touched.
    server.ok_stdin(
        &["apply", "-n", &ns, "-f", "-"],
        r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: nothing}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: absent}
  maxReplicas: 3
"#,
    );
    let absent = |path: &str| jsonpath(&server, &["get", "hpa", "-n", &ns, "nothing"], path);
    wait_until(
        "the autoscaler of a missing target to say so",
        Duration::from_secs(60),
        || absent("{.status.conditions[?(@.type==\"AbleToScale\")].reason}") == "FailedGetScale",
    );
    assert_eq!(
        absent("{.status.conditions[?(@.type==\"AbleToScale\")].status}"),
        "False"
    );
    assert_eq!(replicas(), "1");
    assert!(kubelet.running(), "the kubelet exited:\n{}", kubelet.log());
}

#[test]
fn bench_hollow_runs_fifty_kubelets_in_one_process() {
    let server = Server::start_cluster(&[]);
    let prefix = format!("{}-", unique("hb"));
    let dir = tempfile::tempdir().unwrap();
    let mut bench = Proc::spawn(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["bench", "hollow", "--kubeconfig"])
            .arg(server.kubeconfig())
            .args(["--count", "50", "--prefix", &prefix, "--root-dir"])
            .arg(dir.path().join("root"))
            .args(["--report-interval", "2s"])
            .stdin(Stdio::null()),
        dir.path().join("bench.log"),
    );
    let ready_nodes = || {
        let out = jsonpath(
            &server,
            &["get", "nodes"],
            "{range .items[*]}{.metadata.name} {.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
        );
        out.lines()
            .filter(|l| l.starts_with(&prefix) && l.ends_with(" True"))
            .count()
    };
    wait_until("50 hollow nodes Ready", Duration::from_secs(120), || {
        assert!(bench.running(), "the bench exited:\n{}", bench.log());
        ready_nodes() == 50
    });
    wait_until(
        "the bench to report its memory",
        Duration::from_secs(30),
        || bench.log().contains("hollow: 50 kubelets Ready after"),
    );
    let log = bench.log();
    let rss: f64 = log
        .lines()
        .find(|l| l.contains("kubelets Ready after"))
        .and_then(|l| l.split("RSS ").nth(1))
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no RSS in the bench's report:\n{log}"));
    assert!(rss > 1.0, "RSS {rss} MiB");
    // Each node has its own Lease, held by itself (a kubelet creates it after registering,
    // so a node may be Ready a moment before its Lease exists).
    wait_until("50 node Leases", Duration::from_secs(30), || {
        let leases = jsonpath(
            &server,
            &["get", "leases", "-n", "kube-node-lease"],
            "{range .items[*]}{.spec.holderIdentity}{\"\\n\"}{end}",
        );
        leases.lines().filter(|l| l.starts_with(&prefix)).count() == 50
    });
    // The hollow nodes run pods.
    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: on-hollow}}
spec:
  nodeName: {prefix}7
  containers: [{{name: c, image: registry.k8s.io/pause:3.10}}]
"#
        ),
    );
    wait_until(
        "the pod on a hollow node to run",
        Duration::from_secs(60),
        || jsonpath(&server, &["get", "pod", "on-hollow"], "{.status.phase}") == "Running",
    );
}
