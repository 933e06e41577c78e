//! The kubelet's server and the API server's way to it, driven with the real kubectl:
//! `kubectl logs` (follow, tail, timestamps, previous), `kubectl exec` (exit codes, stdin),
//! `kubectl get --raw .../nodes/NODE/proxy/...`, and who may do what.

mod support;

use std::process::Output;
use std::time::Duration;

use support::{wait_until, Server};

const WAIT: Duration = Duration::from_secs(120);

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn pod_yaml(name: &str, image: &str, restart: &str, script: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: {restart}
  terminationGracePeriodSeconds: 1
  containers:
  - name: {name}
    image: {image}
    command: ["sh", "-c", {script:?}]
"#
    )
}

fn jsonpath(server: &Server, pod: &str, path: &str) -> String {
    let out = server.kubectl(&["get", "pod", pod, "-o", &format!("jsonpath={path}")]);
    stdout(&out)
}

fn wait_phase(server: &Server, pod: &str, phases: &[&str]) {
    wait_until(&format!("pod {pod} in {phases:?}"), WAIT, || {
        phases.contains(&jsonpath(server, pod, "{.status.phase}").as_str())
    });
}

#[test]
fn logs_exec_and_node_proxy() {
    let cidr = support::unique_cluster_cidr();
    let server = Server::start_cluster(&["--cluster-cidr", &cidr]);
    let kubelet = server.kubelet("node-a");
    let busybox = kubelet.image("busybox");

    // A pod that writes a few lines, one of them to stderr, pauses, then ends.
    server.ok_stdin(
        &["apply", "-f", "-"],
        &pod_yaml(
            "counter",
            &busybox,
            "Never",
            "echo one; echo two; sleep 1; echo three >&2; sleep 3; echo four",
        ),
    );
    server.ok_stdin(
        &["apply", "-f", "-"],
        &pod_yaml("shell", &busybox, "Always", "sleep 3600"),
    );
    wait_phase(&server, "counter", &["Running", "Succeeded"]);

    // -f follows until the container exits.
    let followed = server.ok(&["logs", "-f", "counter"]);
    assert_eq!(followed, "one\ntwo\nthree\nfour\n");
    wait_phase(&server, "counter", &["Succeeded"]);
    assert_eq!(server.ok(&["logs", "counter"]), "one\ntwo\nthree\nfour\n");
    assert_eq!(
        server.ok(&["logs", "counter", "--tail", "2"]),
        "three\nfour\n"
    );
    assert_eq!(
        server.ok(&["logs", "counter", "--limit-bytes", "6"]),
        "one\ntw"
    );
    let stamped = server.ok(&["logs", "counter", "--timestamps"]);
    let lines: Vec<&str> = stamped.lines().collect();
    assert_eq!(lines.len(), 4, "{stamped}");
    for (line, want) in lines.iter().zip(["one", "two", "three", "four"]) {
        let (ts, text) = line.split_once(' ').unwrap();
        assert_eq!(text, want);
        // RFC 3339 with nine fraction digits, as the kubelet writes it.
        assert_eq!(ts.len(), "2024-01-01T00:00:00.000000000Z".len(), "{ts}");
        assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T', "{ts}");
    }
    // Never restarted: no previous instance.
    let err = server.fails(&["logs", "counter", "--previous"]);
    assert!(
        err.contains(r#"previous terminated container "counter" in pod "counter" not found"#),
        "{err}"
    );
    // A container that is not in the pod.
    let err = server.fails(&["logs", "counter", "-c", "nope"]);
    assert!(
        err.contains("container nope is not valid for pod counter"),
        "{err}"
    );

    // exec: output and exit code come back.
    wait_phase(&server, "shell", &["Running"]);
    let out = server.kubectl(&[
        "exec",
        "shell",
        "--",
        "sh",
        "-c",
        "echo hi; echo oops >&2; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hi\n");
    assert!(stderr(&out).contains("oops"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("command terminated with exit code 3"),
        "{}",
        stderr(&out)
    );
    // kubectl 1.32 speaks WebSocket v5 first; it is served, not refused into SPDY.
    let out = server.kubectl(&["exec", "-v=4", "shell", "--", "echo", "ws"]);
    assert_eq!(stdout(&out), "ws\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("The subprotocol is v5.channel.k8s.io")
            && !stderr(&out).contains("allback"),
        "{}",
        stderr(&out)
    );
    // exec -i: stdin reaches the command, and its end ends it.
    assert_eq!(
        server.ok_stdin(&["exec", "-i", "shell", "--", "cat"], "hello\nworld\n"),
        "hello\nworld\n"
    );
    let out = server.kubectl(&["exec", "shell", "-c", "nope", "--", "true"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("container nope is not valid for pod shell"),
        "{}",
        stderr(&out)
    );

    // The kubelet's own endpoints through the API server's node proxy.
    let pods: serde_json::Value =
        serde_json::from_str(&server.ok(&["get", "--raw", "/api/v1/nodes/node-a/proxy/pods"]))
            .unwrap();
    assert_eq!(pods["kind"], "PodList");
    let names: Vec<&str> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert!(
        names.contains(&"counter") && names.contains(&"shell"),
        "{names:?}"
    );
    assert_eq!(
        server.ok(&["get", "--raw", "/api/v1/nodes/node-a/proxy/healthz"]),
        "ok"
    );
    let summary: serde_json::Value = serde_json::from_str(&server.ok(&[
        "get",
        "--raw",
        "/api/v1/nodes/node-a/proxy/stats/summary",
    ]))
    .unwrap();
    assert_eq!(summary["node"]["nodeName"], "node-a");
    assert!(
        summary["node"]["cpu"]["usageCoreNanoSeconds"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    let shell = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "shell")
        .unwrap_or_else(|| panic!("no stats for the shell pod: {summary}"));
    assert_eq!(shell["podRef"]["namespace"], "default");
    assert_eq!(shell["containers"][0]["name"], "shell");
    let metrics = server.ok(&[
        "get",
        "--raw",
        "/api/v1/nodes/node-a/proxy/metrics/resource",
    ]);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("node_cpu_usage_seconds_total ")),
        "{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l.starts_with(
            "container_memory_working_set_bytes{container=\"shell\",namespace=\"default\",pod=\"shell\"}"
        )),
        "{metrics}"
    );

    // Who may: a user who may only read pods is refused logs, exec and the node proxy...
    server.ok(&[
        "create",
        "role",
        "pod-reader",
        "--verb=get",
        "--resource=pods",
    ]);
    server.ok(&[
        "create",
        "rolebinding",
        "jane-pods",
        "--role=pod-reader",
        "--user=jane",
    ]);
    wait_until("jane may read pods", WAIT, || {
        server
            .kubectl(&["get", "pod", "counter", "--as", "jane"])
            .status
            .success()
    });
    let err = server.fails(&["logs", "counter", "--as", "jane"]);
    assert!(
        err.contains(r#"User "jane" cannot get resource "pods/log" in API group "" in the namespace "default""#),
        "{err}"
    );
    let err = server.fails(&["exec", "shell", "--as", "jane", "--", "true"]);
    assert!(
        err.contains(r#"User "jane" cannot create resource "pods/exec""#),
        "{err}"
    );
    let err = server.fails(&[
        "get",
        "--raw",
        "/api/v1/nodes/node-a/proxy/pods",
        "--as",
        "jane",
    ]);
    assert!(
        err.contains(r#"User "jane" cannot get resource "nodes/proxy""#),
        "{err}"
    );
    // ...until granted.
    server.ok(&[
        "create",
        "role",
        "log-reader",
        "--verb=get",
        "--resource=pods/log",
    ]);
    server.ok(&[
        "create",
        "rolebinding",
        "jane-logs",
        "--role=log-reader",
        "--user=jane",
    ]);
    wait_until("jane may read logs", WAIT, || {
        server
            .kubectl(&["logs", "counter", "--as", "jane"])
            .status
            .success()
    });

    // The kubelet itself: no credentials is 401, a token without rights 403.
    let direct = format!("https://127.0.0.1:{}", kubelet.port());
    let anon = support::kubectl(
        std::path::Path::new("/dev/null"),
        &[
            "--server",
            &direct,
            "--insecure-skip-tls-verify",
            "--token",
            "not-a-token",
            "get",
            "--raw",
            "/pods",
        ],
        None,
    );
    assert!(!anon.status.success());
    assert!(
        stderr(&anon).contains("You must be logged in to the server"),
        "{}",
        stderr(&anon)
    );
    let token = server.ok(&["create", "token", "default"]);
    let denied = support::kubectl(
        std::path::Path::new("/dev/null"),
        &[
            "--server",
            &direct,
            "--insecure-skip-tls-verify",
            "--token",
            token.trim(),
            "get",
            "--raw",
            "/stats/summary",
        ],
        None,
    );
    assert!(!denied.status.success());
    assert!(
        stderr(&denied).contains(
            "Forbidden (user=system:serviceaccount:default:default, verb=get, resource=nodes, subresource=stats)"
        ),
        "{}\n{}",
        stderr(&denied),
        kubelet.log_tail(20)
    );
}

#[test]
fn previous_logs_attach_and_port_forward() {
    let cidr = support::unique_cluster_cidr();
    let server = Server::start_cluster(&["--cluster-cidr", &cidr]);
    let kubelet = server.kubelet("node-b");
    let busybox = kubelet.image("busybox");
    server.ok_stdin(
        &["apply", "-f", "-"],
        &pod_yaml(
            "crasher",
            &busybox,
            "Always",
            "echo run $(cat /proc/sys/kernel/random/uuid); sleep 1; exit 1",
        ),
    );
    wait_until("the container restarted", WAIT, || {
        jsonpath(
            &server,
            "crasher",
            "{.status.containerStatuses[0].restartCount}",
        )
        .parse::<u32>()
        .is_ok_and(|n| n >= 1)
    });
    let previous = server.ok(&["logs", "crasher", "--previous"]);
    assert!(previous.starts_with("run "), "{previous:?}");
    assert_eq!(previous.lines().count(), 1, "{previous:?}");
    // The current instance's run is another one.
    wait_until("the current instance logged", WAIT, || {
        let now = server.kubectl(&["logs", "crasher"]);
        now.status.success() && stdout(&now).starts_with("run ") && stdout(&now) != previous
    });
    // attach: to a container that reads its stdin once.
    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            "{}    stdin: true\n    stdinOnce: true\n",
            pod_yaml("reader", &busybox, "Never", "read line; echo got $line")
        ),
    );
    wait_phase(&server, "reader", &["Running"]);
    let attached = server.kubectl_stdin(&["attach", "-i", "reader"], "hello\n");
    assert!(
        stdout(&attached).contains("got hello"),
        "{}\n{}",
        stdout(&attached),
        stderr(&attached)
    );
    wait_phase(&server, "reader", &["Succeeded"]);
    assert_eq!(server.ok(&["logs", "reader"]), "got hello\n");

    // port-forward: a local port reaches the pod's.
    server.ok_stdin(
        &["apply", "-f", "-"],
        &pod_yaml(
            "web",
            &busybox,
            "Always",
            "mkdir -p /www && echo hello-pf > /www/index.html && exec httpd -f -p 8080 -h /www",
        ),
    );
    wait_phase(&server, "web", &["Running"]);
    wait_until("the pod's web server answers", WAIT, || {
        server
            .kubectl(&[
                "exec",
                "web",
                "--",
                "wget",
                "-q",
                "-O",
                "-",
                "http://127.0.0.1:8080/",
            ])
            .status
            .success()
    });
    let mut forward = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(["port-forward", "pod/web", "0:8080"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Its output is read to the end, lest kubectl write into a closed pipe.
    let out = forward.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(out)) {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let first = rx
        .recv_timeout(WAIT)
        .expect("kubectl port-forward says where it listens");
    // "Forwarding from 127.0.0.1:PORT -> 8080"
    let port: u16 = first
        .split_once("127.0.0.1:")
        .and_then(|(_, rest)| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no local port in {first:?}"));
    let mut page = String::new();
    for _ in 0..2 {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        conn.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        page.clear();
        conn.read_to_string(&mut page).unwrap();
        assert!(page.contains("hello-pf"), "{page}");
    }
    let _ = forward.kill();
    let _ = forward.wait();

    // A pod that is not scheduled has no logs to give.
    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            "{}  nodeSelector:\n    nowhere: \"true\"\n",
            pod_yaml("stuck", &busybox, "Always", "true")
        ),
    );
    let err = server.fails(&["logs", "stuck"]);
    assert!(
        err.contains("pod stuck does not have a host assigned"),
        "{err}"
    );
    let err = server.fails(&["exec", "stuck", "--", "true"]);
    assert!(
        err.contains("pod stuck does not have a host assigned") || err.contains("Pending"),
        "{err}"
    );
}
