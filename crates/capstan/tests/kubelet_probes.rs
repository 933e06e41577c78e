//! The kubelet's probes and lifecycle hooks on a real node (containerd, busybox): a
//! failing liveness probe restarts its container, a readiness probe gates the pod's Ready
//! condition and its Service endpoints, httpGet probes reach busybox httpd through a named
//! port, and preStop hooks run before the container is stopped.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::*;

const WAIT: Duration = Duration::from_secs(120);

fn jsonpath(server: &Server, kind_name: &[&str], path: &str) -> String {
    let mut args = vec!["get"];
    args.extend_from_slice(kind_name);
    let expr = format!("jsonpath={path}");
    args.extend_from_slice(&["-o", &expr]);
    let out = server.kubectl(&args);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ready_condition(server: &Server, pod: &str) -> String {
    jsonpath(
        server,
        &["pod", pod],
        "{.status.conditions[?(@.type==\"Ready\")].status}",
    )
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

fn wait_running(server: &Server, kubelet: &Kubelet, pod: &str) {
    let mut phase = String::new();
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(&format!("pod {pod} running"), WAIT, || {
            phase = jsonpath(server, &["pod", pod], "{.status.phase}");
            phase == "Running"
        })
    }));
    if ok.is_err() {
        panic!(
            "pod {pod} is {phase:?}:\n{}\nkubelet log:\n{}",
            server.ok(&["get", "pod", pod, "-o", "yaml"]),
            kubelet.log_tail(40)
        );
    }
}

#[test]
fn probes_and_hooks_on_a_real_node() {
    let cidr = unique_cluster_cidr();
    let server = Server::start_cluster(&["--cluster-cidr", &cidr]);
    let kubelet = server.kubelet("node-a");
    let busybox = kubelet.image("busybox");
    let host_dir = tempfile::tempdir().expect("host dir");
    let host = host_dir.path().display().to_string();

    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: live}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: c
    image: {busybox}
    command: ["sh", "-c", "touch /tmp/healthy; sleep 6; rm -f /tmp/healthy; sleep 3600"]
    livenessProbe:
      exec: {{command: ["test", "-f", "/tmp/healthy"]}}
      periodSeconds: 2
      failureThreshold: 2
---
apiVersion: v1
kind: Pod
metadata: {{name: gated, labels: {{app: gated}}}}
spec:
  volumes:
  - name: flags
    hostPath: {{path: "{host}", type: Directory}}
  containers:
  - name: c
    image: {busybox}
    command: ["sh", "-c", "sleep 3600"]
    ports: [{{containerPort: 80, name: web}}]
    volumeMounts: [{{name: flags, mountPath: /flags}}]
    readinessProbe:
      exec: {{command: ["test", "-f", "/flags/ready"]}}
      periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {{name: gated}}
spec:
  selector: {{app: gated}}
  ports: [{{port: 80, targetPort: web}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: web}}
spec:
  containers:
  - name: c
    image: {busybox}
    command: ["sh", "-c", "mkdir -p /www && echo ok > /www/healthz && exec httpd -f -p 8080 -h /www"]
    ports: [{{containerPort: 8080, name: http}}]
    readinessProbe:
      httpGet: {{path: /healthz, port: http}}
      periodSeconds: 1
  - name: bad
    image: {busybox}
    command: ["sh", "-c", "mkdir -p /www && exec httpd -f -p 8081 -h /www"]
    readinessProbe:
      httpGet: {{path: /missing, port: 8081}}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {{name: stopper}}
spec:
  terminationGracePeriodSeconds: 30
  volumes:
  - name: flags
    hostPath: {{path: "{host}", type: Directory}}
  containers:
  - name: c
    image: {busybox}
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    volumeMounts: [{{name: flags, mountPath: /flags}}]
    lifecycle:
      preStop:
        exec: {{command: ["sh", "-c", "echo stopping > /flags/prestop"]}}
  - name: sleeper
    image: {busybox}
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    lifecycle:
      preStop:
        sleep: {{seconds: 5}}
"#
        ),
    );

    for pod in ["live", "gated", "web", "stopper"] {
        wait_running(&server, &kubelet, pod);
    }

    // Readiness: not ready (and a not-ready endpoint) until the probe's file appears.
    let ip = jsonpath(&server, &["pod", "gated"], "{.status.podIP}");
    assert!(!ip.is_empty(), "gated has an IP");
    wait_until("gated's address listed as not ready", WAIT, || {
        jsonpath(
            &server,
            &["endpoints", "gated"],
            "{.subsets[0].notReadyAddresses[0].ip}",
        ) == ip
    });
    assert_eq!(ready_condition(&server, "gated"), "False");
    assert_eq!(
        jsonpath(
            &server,
            &["pod", "gated"],
            "{.status.containerStatuses[0].ready}"
        ),
        "false"
    );
    assert_eq!(
        jsonpath(
            &server,
            &["pod", "gated"],
            "{.status.containerStatuses[0].started}"
        ),
        "true"
    );
    std::fs::write(Path::new(&host).join("ready"), "").expect("flag");
    wait_until("gated Ready", WAIT, || {
        ready_condition(&server, "gated") == "True"
    });
    wait_until("gated's address ready", WAIT, || {
        jsonpath(
            &server,
            &["endpoints", "gated"],
            "{.subsets[0].addresses[0].ip}",
        ) == ip
    });
    assert_eq!(
        jsonpath(
            &server,
            &["endpoints", "gated"],
            "{.subsets[0].notReadyAddresses}"
        ),
        ""
    );
    // And back when the file goes away.
    std::fs::remove_file(Path::new(&host).join("ready")).expect("unflag");
    wait_until("gated not Ready again", WAIT, || {
        ready_condition(&server, "gated") == "False"
    });
    assert!(events(&server, "gated").contains("Unhealthy: Readiness probe failed: "));

    // httpGet through a named port: the httpd container is ready, the 404 one is not.
    wait_until("web's httpd container ready", WAIT, || {
        jsonpath(
            &server,
            &["pod", "web"],
            "{.status.containerStatuses[?(@.name==\"c\")].ready}",
        ) == "true"
    });
    wait_until("web's 404 probe reported", WAIT, || {
        events(&server, "web")
            .contains("Unhealthy: Readiness probe failed: HTTP probe failed with statuscode: 404")
    });
    assert_eq!(
        jsonpath(
            &server,
            &["pod", "web"],
            "{.status.containerStatuses[?(@.name==\"bad\")].ready}"
        ),
        "false"
    );
    assert_eq!(ready_condition(&server, "web"), "False");

    // Liveness: the file goes after 6 s, two failures later the container is killed and
    // restarted.
    wait_until("live restarted", WAIT, || {
        jsonpath(
            &server,
            &["pod", "live"],
            "{.status.containerStatuses[0].restartCount}",
        )
        .parse::<u32>()
        .is_ok_and(|n| n >= 1)
    });
    let ev = events(&server, "live");
    assert!(ev.contains("Unhealthy: Liveness probe failed: "), "{ev}");
    assert!(
        ev.contains("Killing: Container c failed liveness probe, will be restarted"),
        "{ev}"
    );
    wait_until("live restarted twice", WAIT, || {
        jsonpath(
            &server,
            &["pod", "live"],
            "{.status.containerStatuses[0].restartCount}",
        )
        .parse::<u32>()
        .is_ok_and(|n| n >= 2)
    });

    // preStop: the exec hook writes its file before the container stops, and the sleep
    // hook holds the deletion for its 5 seconds.
    let prestop = Path::new(&host).join("prestop");
    assert!(!prestop.exists());
    let start = Instant::now();
    server.ok(&["delete", "pod", "stopper", "--wait=true", "--timeout=90s"]);
    let took = start.elapsed();
    assert_eq!(
        std::fs::read_to_string(&prestop).unwrap_or_default(),
        "stopping\n",
        "the preStop hook ran"
    );
    assert!(took >= Duration::from_secs(5), "deletion took {took:?}");
    assert!(took < Duration::from_secs(30), "deletion took {took:?}");

    for pod in ["live", "gated", "web"] {
        server.ok(&["delete", "pod", pod, "--wait=false"]);
    }
}
