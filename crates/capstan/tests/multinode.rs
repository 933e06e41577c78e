//! Several nodes on one machine: a control plane in the host's network namespace and three
//! `capstan agent`s, each in a network namespace of its own, two on one bridge and the third on a
//! subnet of its own behind the host (the test bed of `capstan_testkit::netbed`), joined with a
//! bootstrap token. Checks the whole service path of issue 9: pods on different nodes reach each
//! other by IP (direct routes on the shared segment, VXLAN to the routed node), cluster DNS
//! names a Service, the Service reaches every backend from every node (one node per proxy
//! mode: iptables, nftables, userspace with exact round-robin), and a NodePort answers from
//! the host.

mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use capstan_testkit::netbed::{Bed, NodeNs};
use support::{node, unique_cluster_cidr, wait_until, Server};

/// A `capstan agent` (or another capstan command) inside a node's namespace; stopped with
/// SIGTERM (so that it removes its pods and rules) and then killed on drop.
struct InNs {
    child: Option<Child>,
    log: PathBuf,
}

impl InNs {
    fn spawn(ns: &NodeNs, args: &[String], log: PathBuf) -> InNs {
        let file = std::fs::File::create(&log).unwrap();
        let child = ns
            .command(env!("CARGO_BIN_EXE_capstan"))
            .args(args)
            .env("CAPSTAN_LOG", "info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("capstan starts in the namespace");
        InNs {
            child: Some(child),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for InNs {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            for _ in 0..300 {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn join_command(server: &Server, host: &str) -> (String, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["token", "create", "--print-join-command", "--kubeconfig"])
        .arg(server.kubeconfig())
        .args(["--server", &format!("https://{host}:{}", server.port())])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "capstan token create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |flag: &str| {
        let i = words.iter().position(|w| *w == flag).expect(flag);
        words[i + 1].to_string()
    };
    assert_eq!(words[..2], ["capstan", "agent"], "{line}");
    (after("--server"), after("--token"), after("--ca-cert-hash"))
}

/// The pod's IP once it runs.
fn running_pod_ip(server: &Server, name: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let out = server.kubectl(&[
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.status.phase} {.status.podIP}",
        ]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if let Some(("Running", pod_ip)) = text.split_once(' ') {
            if !pod_ip.is_empty() {
                return pod_ip.to_string();
            }
        }
        if std::time::Instant::now() > deadline {
            let describe = server.kubectl(&["describe", "pod", name]);
            panic!(
                "pod {name} is not Running after 120s:\n{}",
                String::from_utf8_lossy(&describe.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn http_get(addr: &str) -> std::io::Result<String> {
    let mut s =
        std::net::TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    Ok(body)
}

fn write_kubeconfig_for(server: &Server, host: &str, dir: &Path) -> PathBuf {
    // The admin kubeconfig, pointing at the host's bridge address instead of loopback.
    let text = std::fs::read_to_string(server.kubeconfig()).unwrap();
    let port = server.port();
    let text = text.replace(&format!("127.0.0.1:{port}"), &format!("{host}:{port}"));
    let path = dir.join("admin-bridge.kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn three_agents_join_and_services_reach_pods_across_nodes() {
    let mut bed = Bed::new();
    let host = bed.host_ip().to_string();
    let registry = node::Registry::start_on(std::net::Ipv4Addr::UNSPECIFIED);
    let cluster_cidr = unique_cluster_cidr();
    let server = Server::start_cluster(&[
        "--bind-address",
        "0.0.0.0",
        "--advertise-address",
        &host,
        "--cluster-cidr",
        &cluster_cidr,
    ]);
    let (url, token, hash) = join_command(&server, &host);
    assert_eq!(url, format!("https://{host}:{}", server.port()));
    let work = tempfile::tempdir().unwrap();

    // Bad joins end at once with one line, and leave no credentials behind.
    for (token, hash, says) in [
        (token.as_str(), "sha256:00", "refusing to join"),
        ("not-a-token", hash.as_str(), "--token must look like"),
        (
            "abcdef.0123456789abcdef",
            hash.as_str(),
            "certificate signing request",
        ),
    ] {
        let dir = work.path().join("bad-join");
        let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args([
                "agent",
                "--server",
                &url,
                "--token",
                token,
                "--ca-cert-hash",
                hash,
            ])
            .arg("--data-dir")
            .arg(&dir)
            .env("CAPSTAN_LOG", "error")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains(says), "{says:?} not in: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(!dir.join("kubelet.kubeconfig").exists());
    }

    // Cluster DNS: `capstan dns` on node 0, behind the kube-dns Service.
    // Nodes 0 and 1 share a segment (direct routes between them); node 2 is behind a router,
    // reached through the VXLAN overlay.
    let nodes: Vec<NodeNs> = vec![bed.node(), bed.node(), bed.routed_node()];
    let dns_ip = "10.43.0.10";
    let admin_bridge = write_kubeconfig_for(&server, &host, work.path());
    let dns = InNs::spawn(
        &nodes[0],
        &[
            "dns".into(),
            "--kubeconfig".into(),
            admin_bridge.display().to_string(),
            "--listen".into(),
            format!("{}:5353", nodes[0].ip),
        ],
        work.path().join("dns.log"),
    );
    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: v1
kind: Service
metadata: {{name: kube-dns, namespace: kube-system}}
spec:
  clusterIP: {dns_ip}
  ports:
  - {{name: dns, port: 53, protocol: UDP, targetPort: 5353}}
  - {{name: dns-tcp, port: 53, protocol: TCP, targetPort: 5353}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-node0
  namespace: kube-system
  labels: {{kubernetes.io/service-name: kube-dns}}
addressType: IPv4
endpoints:
- addresses: ["{}"]
  conditions: {{ready: true}}
ports:
- {{name: dns, port: 5353, protocol: UDP}}
- {{name: dns-tcp, port: 5353, protocol: TCP}}
"#,
            nodes[0].ip
        ),
    );

    let modes = ["iptables", "nftables", "userspace"];
    let mut agents = Vec::new();
    for (i, ns) in nodes.iter().enumerate() {
        let dir = work.path().join(format!("node-{i}"));
        agents.push(InNs::spawn(
            ns,
            &[
                "agent".into(),
                "--server".into(),
                url.clone(),
                "--token".into(),
                token.clone(),
                "--ca-cert-hash".into(),
                hash.clone(),
                "--data-dir".into(),
                dir.display().to_string(),
                "--node-name".into(),
                format!("node-{i}"),
                "--node-ip".into(),
                ns.ip.to_string(),
                "--insecure-registry".into(),
                format!("{host}:{}", registry.port()),
                "--cluster-cidr".into(),
                cluster_cidr.clone(),
                "--cluster-dns".into(),
                dns_ip.into(),
                "--proxy-mode".into(),
                modes[i].into(),
                "--eviction-hard".into(),
                "nodefs.available<1%,nodefs.inodesFree<1%".into(),
            ],
            work.path().join(format!("agent-{i}.log")),
        ));
    }
    for (i, agent) in agents.iter().enumerate() {
        let name = format!("node-{i}");
        wait_until(&format!("{name} Ready"), Duration::from_secs(120), || {
            let out = server.kubectl(&[
                "get",
                "node",
                &name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ]);
            if !out.status.success() {
                // Fail fast with the agent's log when it has exited.
                assert!(
                    !agent.log().contains("capstan: "),
                    "agent {i} failed:\n{}",
                    agent.log()
                );
            }
            String::from_utf8_lossy(&out.stdout) == "True"
        });
    }
    // The nodes' certificates came from the CSR flow, as system:node:NAME.
    let csrs = server.ok(&["get", "csr", "-o", "jsonpath={.items[*].spec.username}"]);
    assert_eq!(
        csrs.split_whitespace()
            .filter(|u| u.starts_with("system:bootstrap:"))
            .count(),
        3,
        "{csrs}"
    );

    // Three web backends, one per node, each answering with its pod name; one client per node.
    let busybox = registry.image_at(&host, "busybox");
    for i in 0..3 {
        server.ok_stdin(
            &["apply", "-f", "-"],
            &format!(
                r#"
apiVersion: v1
kind: Pod
metadata: {{name: web-{i}, labels: {{app: web}}}}
spec:
  nodeName: node-{i}
  containers:
  - name: web
    image: {busybox}
    command: ["sh", "-c", "mkdir -p /www && echo web-{i} > /www/index.html && exec httpd -f -p 80 -h /www"]
    ports: [{{containerPort: 80}}]
    readinessProbe: {{tcpSocket: {{port: 80}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Pod
metadata: {{name: client-{i}}}
spec:
  nodeName: node-{i}
  containers:
  - {{name: c, image: {busybox}, command: ["sleep", "3600"]}}
"#
            ),
        );
    }
    server.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80, targetPort: 80}]
"#,
    );
    let web_ips: Vec<String> = (0..3)
        .map(|i| running_pod_ip(&server, &format!("web-{i}")))
        .collect();
    for i in 0..3 {
        running_pod_ip(&server, &format!("client-{i}"));
    }
    wait_until("web has 3 ready endpoints", Duration::from_secs(60), || {
        let out = server.kubectl(&[
            "get",
            "endpoints",
            "web",
            "-o",
            "jsonpath={.subsets[*].addresses[*].ip}",
        ]);
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .count()
            == 3
    });
    let exec = |pod: &str, script: &str| -> String {
        let out = server.kubectl(&["exec", pod, "--", "sh", "-c", script]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };

    // The pod network: direct routes between the nodes that share a segment, the overlay to
    // and from the routed one.
    let routes = |i: usize| {
        nodes[i]
            .exec(&["ip", "-4", "route", "show", "proto", "77"])
            .unwrap_or_default()
    };
    let overlay = |i: usize| routes(i).matches("dev capstan.1 onlink").count();
    wait_until("the pod network's routes", Duration::from_secs(30), || {
        routes(0).contains(&format!("via {} dev eth0", nodes[1].ip))
            && routes(1).contains(&format!("via {} dev eth0", nodes[0].ip))
            && overlay(0) == 1
            && overlay(1) == 1
            && overlay(2) == 2
    });
    // Pods on different nodes reach each other by IP.
    for i in 0..3 {
        let other = (i + 1) % 3;
        let got = exec(
            &format!("client-{i}"),
            &format!("timeout 5 wget -q -O - http://{}/", web_ips[other]),
        );
        assert_eq!(
            got.trim(),
            format!("web-{other}"),
            "client-{i} → web-{other}"
        );
    }

    // By name, through the cluster DNS and each node's proxy: every backend answers.
    for i in 0..3 {
        let mut seen = BTreeSet::new();
        let mut order = Vec::new();
        let got = exec(
            &format!("client-{i}"),
            "for n in $(seq 1 30); do timeout 5 wget -q -O - http://web.default.svc.cluster.local/; done",
        );
        for line in got.lines() {
            seen.insert(line.trim().to_string());
            order.push(line.trim().to_string());
        }
        assert_eq!(
            seen,
            BTreeSet::from(["web-0".to_string(), "web-1".into(), "web-2".into()]),
            "{} proxy on node-{i}: {got}\nagent log:\n{}\ndns log:\n{}",
            modes[i],
            agents[i].log(),
            dns.log()
        );
        if modes[i] == "userspace" {
            // Exact round-robin: every third answer is the same backend.
            assert_eq!(order.len(), 30, "{got}");
            for (k, name) in order.iter().enumerate().skip(3) {
                assert_eq!(name, &order[k - 3], "round-robin order: {order:?}");
            }
        }
    }

    // The NodePort answers on every node's address, from the host.
    let node_port = server.ok(&[
        "get",
        "service",
        "web",
        "-o",
        "jsonpath={.spec.ports[0].nodePort}",
    ]);
    for ns in &nodes {
        let addr = format!("{}:{node_port}", ns.ip);
        let mut answered = String::new();
        wait_until(&format!("NodePort {addr}"), Duration::from_secs(20), || {
            answered = http_get(&addr).unwrap_or_default();
            answered.contains("web-")
        });
    }
    drop(agents);
    drop(dns);
}
