//! `capstan proxy` end to end, one proxy mode per test: the API server in the host's network
//! namespace, and on the netns test bed (`capstan_testkit::netbed`) a node namespace running
//! `capstan proxy`, three backend namespaces running `busybox httpd` (each answers with its
//! name), and a client namespace that routes the service range through the node. Services and
//! EndpointSlices are written by hand (no controllers, no kubelet). Checked, from the node
//! itself and from the client: every backend answers through the cluster IP (userspace: in
//! exact round-robin order), ClientIP affinity sticks, the NodePort answers, a service without
//! endpoints refuses at once, an endpoint removed from its slice gets no new connection within
//! a second, a change of the node's address moves the NodePort to it, and SIGTERM makes the
//! proxy remove its rules.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capstan_testkit::netbed::{Bed, NodeNs};
use support::Server;

const WEB_IP: &str = "10.43.77.10";
const STICKY_IP: &str = "10.43.77.11";
const EMPTY_IP: &str = "10.43.77.12";
const NODE_PORT: u16 = 30777;

/// A process in a namespace, killed on drop.
struct Proc {
    child: Option<Child>,
    log: PathBuf,
}

impl Proc {
    fn spawn(ns: &NodeNs, program: &str, args: &[&str], log: PathBuf) -> Proc {
        let file = std::fs::File::create(&log).unwrap();
        let child = ns
            .command(program)
            .args(args)
            .env("CAPSTAN_LOG", "info,capstan_proxy=debug")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{program} starts in {}: {e}", ns.name));
        Proc {
            child: Some(child),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then wait (up to 20 s) for the exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("a running process");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the process did not exit after SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The test bed: server, node, backends, client. Processes stop before the bed goes.
struct Setup {
    _backends: Vec<Proc>,
    backend_ips: Vec<String>,
    node: NodeNs,
    client: NodeNs,
    kubeconfig: PathBuf,
    work: tempfile::TempDir,
    server: Server,
    _relay: Relay,
    // Last: dropping the bed deletes the namespaces.
    _bed: Bed,
}

/// Forwards TCP connections from `listen` to `target` (the API server listens on loopback,
/// which the namespaces can't reach; the relay listens on the host's bridge address).
struct Relay {
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Relay {
    fn start(listen: std::net::IpAddr, target: std::net::SocketAddr) -> Relay {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind((listen, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(inbound) = conn else { continue };
                let Ok(outbound) = std::net::TcpStream::connect(target) else {
                    continue;
                };
                let pipe = |mut from: std::net::TcpStream, mut to: std::net::TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                };
                pipe(inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
                pipe(outbound, inbound);
            }
        });
        Relay { addr, stop }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn setup() -> Setup {
    let mut bed = Bed::new();
    let host = bed.host_ip().to_string();
    // The serving certificate names the bridge address (the advertised one).
    let server = Server::start_with(&["--advertise-address", &host]);
    let relay = Relay::start(bed.host_ip().into(), ([127, 0, 0, 1], server.port()).into());
    let work = tempfile::tempdir().unwrap();
    let node = bed.node();
    let client = bed.node();
    let mut backends = Vec::new();
    let mut backend_ips = Vec::new();
    for i in 0..3 {
        let ns = bed.node();
        let www = work.path().join(format!("www-{i}"));
        std::fs::create_dir_all(&www).unwrap();
        std::fs::write(www.join("index.html"), format!("backend-{i}\n")).unwrap();
        backends.push(Proc::spawn(
            &ns,
            "busybox",
            &["httpd", "-f", "-p", "80", "-h", &www.display().to_string()],
            work.path().join(format!("httpd-{i}.log")),
        ));
        backend_ips.push(ns.ip.to_string());
    }
    // Service traffic from the client goes through the node (as from a pod on another node,
    // or a machine outside the cluster).
    client
        .exec(&[
            "ip",
            "route",
            "add",
            "10.43.0.0/16",
            "via",
            &node.ip.to_string(),
        ])
        .unwrap();

    // The proxy's identity (system:kube-proxy) at the host's bridge address.
    let text =
        std::fs::read_to_string(server.dir.path().join("components/proxy.kubeconfig")).unwrap();
    let text = text.replace(
        &format!("127.0.0.1:{}", server.port()),
        &relay.addr.to_string(),
    );
    let kubeconfig = work.path().join("proxy.kubeconfig");
    std::fs::write(&kubeconfig, text).unwrap();

    // The Node the proxy runs for, with its address (NodePorts answer on it).
    server.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Node\nmetadata: {name: node-0}\n",
    );
    server.ok(&[
        "patch",
        "node",
        "node-0",
        "--subresource=status",
        "--type=merge",
        "-p",
        &format!(
            r#"{{"status":{{"addresses":[{{"type":"InternalIP","address":"{}"}},{{"type":"Hostname","address":"node-0"}}]}}}}"#,
            node.ip
        ),
    ]);

    let eps: Vec<String> = backend_ips
        .iter()
        .map(|ip| format!("- {{addresses: [\"{ip}\"], conditions: {{ready: true}}}}"))
        .collect();
    let eps = eps.join("\n");
    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec:
  type: NodePort
  clusterIP: {WEB_IP}
  ports: [{{name: http, port: 80, targetPort: 80, nodePort: {NODE_PORT}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: http, port: 80, protocol: TCP}}]
endpoints:
{eps}
---
apiVersion: v1
kind: Service
metadata: {{name: sticky, namespace: default}}
spec:
  clusterIP: {STICKY_IP}
  sessionAffinity: ClientIP
  ports: [{{name: http, port: 80, targetPort: 80}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: sticky-1
  namespace: default
  labels: {{kubernetes.io/service-name: sticky}}
addressType: IPv4
ports: [{{name: http, port: 80, protocol: TCP}}]
endpoints:
{eps}
---
apiVersion: v1
kind: Service
metadata: {{name: empty, namespace: default}}
spec:
  clusterIP: {EMPTY_IP}
  ports: [{{name: http, port: 80, targetPort: 80}}]
"#
        ),
    );
    Setup {
        _backends: backends,
        backend_ips,
        node,
        client,
        kubeconfig,
        work,
        server,
        _relay: relay,
        _bed: bed,
    }
}

impl Setup {
    fn proxy(&self, mode: &str) -> Proc {
        Proc::spawn(
            &self.node,
            env!("CARGO_BIN_EXE_capstan"),
            &[
                "proxy",
                "--kubeconfig",
                &self.kubeconfig.display().to_string(),
                "--proxy-mode",
                mode,
                "--hostname-override",
                "node-0",
                "--cluster-cidr",
                "10.244.0.0/16",
            ],
            self.work.path().join(format!("proxy-{mode}.log")),
        )
    }

    /// Remove backend `i` from the `web` slice, with one API request (not kubectl, whose
    /// start-up would blur the timing): returns when the request was sent.
    fn remove_web_endpoint(&self, i: usize) -> std::time::SystemTime {
        use k8s_openapi::api::discovery::v1::EndpointSlice;
        let endpoints: Vec<serde_json::Value> = self
            .backend_ips
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != i)
            .map(|(_, ip)| serde_json::json!({"addresses": [ip], "conditions": {"ready": true}}))
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let kc = kube::config::Kubeconfig::read_from(self.server.kubeconfig()).unwrap();
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .unwrap();
            let client = kube::Client::try_from(config).unwrap();
            let api: kube::Api<EndpointSlice> = kube::Api::namespaced(client, "default");
            // Warm the connection up first, so the timed request is only the write.
            api.get("web-1").await.unwrap();
            let sent = std::time::SystemTime::now();
            api.patch(
                "web-1",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"endpoints": endpoints})),
            )
            .await
            .unwrap();
            sent
        })
    }
}

/// `n` HTTP GETs of `url` from inside `ns` (curl; busybox wget crashes on this machine), one
/// connection each: the answers (`FAIL` for a failed request).
fn get_many(ns: &NodeNs, url: &str, n: usize) -> Vec<String> {
    let script =
        format!("for i in $(seq {n}); do curl -sS -m 3 {url} 2>/dev/null || echo FAIL; done");
    let out = ns.command("sh").args(["-c", &script]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .collect()
}

fn get(ns: &NodeNs, url: &str) -> String {
    get_many(ns, url, 1).pop().unwrap_or_default()
}

/// How long after `since` the proxy's log says its rules were synced (the first "proxy rules
/// synced" line stamped after `since`; the log's UTC time of day, to the microsecond).
fn sync_after(log: &str, since: std::time::SystemTime) -> Option<Duration> {
    let since = since.duration_since(std::time::UNIX_EPOCH).ok()?;
    let day = 86_400.0;
    let since_tod = since.as_secs_f64() % day;
    log.lines()
        .filter(|l| l.contains("proxy rules synced"))
        .filter_map(|l| {
            // "\x1b[2m2026-11-22T21:19:05.689580Z\x1b[0m ..." (colours or not).
            let t = l.find('T').map(|i| &l[i + 1..])?;
            let t = &t[..t.find('Z')?];
            let mut parts = t.split(':');
            let h: f64 = parts.next()?.parse().ok()?;
            let m: f64 = parts.next()?.parse().ok()?;
            let s: f64 = parts.next()?.parse().ok()?;
            let tod = h * 3600.0 + m * 60.0 + s;
            let mut d = tod - since_tod;
            if d < -day / 2.0 {
                d += day;
            }
            (d >= 0.0).then(|| Duration::from_secs_f64(d))
        })
        .next()
}

fn all_backends() -> BTreeSet<String> {
    (0..3).map(|i| format!("backend-{i}")).collect()
}

/// What `iptables-save` and `nft list ruleset` show in the node's namespace.
fn rules(ns: &NodeNs) -> String {
    let ipt = ns.exec(&["iptables-save"]).unwrap_or_default();
    let nft = ns.exec(&["nft", "list", "ruleset"]).unwrap_or_default();
    format!("{ipt}\n{nft}")
}

fn exercise(mode: &str, rule_marker: &str) {
    let s = setup();
    let mut proxy = s.proxy(mode);
    let web = format!("http://{WEB_IP}/");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !get(&s.node, &web).starts_with("backend-") {
        assert!(
            Instant::now() < deadline && !proxy.log().contains("capstan: "),
            "the {mode} proxy does not serve {web}:\n{}\nrules:\n{}\ncurl: {:?}",
            proxy.log(),
            rules(&s.node),
            s.node.exec(&["curl", "-sS", "-m", "3", &web])
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        rules(&s.node).contains(rule_marker),
        "{rule_marker} in:\n{}",
        rules(&s.node)
    );

    // Every backend answers, from the node itself and from the client.
    for (from, ns) in [("node", &s.node), ("client", &s.client)] {
        // The kernel modes pick at random: ask until every backend answered (60 requests
        // miss one with a probability of 3 * (2/3)^60, about 1e-10).
        let mut answers = get_many(ns, &web, 12);
        while mode != "userspace"
            && answers.len() < 60
            && answers.iter().collect::<BTreeSet<_>>().len() < 3
        {
            answers.extend(get_many(ns, &web, 12));
        }
        let seen: BTreeSet<String> = answers.iter().cloned().collect();
        assert_eq!(
            seen,
            all_backends(),
            "{mode}, from the {from}: {answers:?}\n{}",
            proxy.log()
        );
        if mode == "userspace" {
            for k in 3..answers.len() {
                assert_eq!(answers[k], answers[k - 3], "exact round-robin: {answers:?}");
            }
        }
    }

    // The NodePort, on the node's address, from the node and from the client.
    let np = format!("http://{}:{NODE_PORT}/", s.node.ip);
    for ns in [&s.node, &s.client] {
        let answers = get_many(ns, &np, 6);
        assert!(
            answers.iter().all(|a| a.starts_with("backend-")),
            "{mode} NodePort from {}: {answers:?}",
            ns.name
        );
    }

    // ClientIP affinity: one backend per client.
    let sticky = format!("http://{STICKY_IP}/");
    for ns in [&s.node, &s.client] {
        let answers = get_many(ns, &sticky, 8);
        let seen: BTreeSet<&String> = answers.iter().collect();
        assert_eq!(
            seen.len(),
            1,
            "{mode} affinity from {}: {answers:?}",
            ns.name
        );
        assert!(answers[0].starts_with("backend-"), "{answers:?}");
    }

    // No endpoints: refused at once.
    let started = Instant::now();
    let out = s
        .node
        .command("curl")
        .args(["-sS", "-m", "10", &format!("http://{EMPTY_IP}/")])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert!(
        !out.status.success(),
        "a service without endpoints answered"
    );
    assert!(
        took < Duration::from_secs(2),
        "{mode}: refusing took {took:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // An endpoint removed from the slice gets no new connections within a second.
    let removed = "backend-2".to_string();
    let before_write = s.remove_web_endpoint(2);
    let written = Instant::now();
    let mut last_seen: Option<Duration> = None;
    let mut clean_run = 0;
    while clean_run < 8 {
        let answer = get(&s.node, &web);
        assert!(answer.starts_with("backend-"), "{mode}: {answer}");
        if answer == removed {
            last_seen = Some(written.elapsed());
            clean_run = 0;
        } else {
            clean_run += 1;
        }
        assert!(
            written.elapsed() < Duration::from_secs(10),
            "{mode}: the removed endpoint still answers after 10 s\n{}",
            proxy.log()
        );
    }
    if let Some(t) = last_seen {
        assert!(
            t < Duration::from_secs(1),
            "{mode}: the removed endpoint answered {t:?} after its slice changed"
        );
    }
    let synced = sync_after(&proxy.log(), before_write)
        .expect("the proxy logged a sync after the slice changed");
    assert!(
        synced < Duration::from_secs(1),
        "{mode}: the proxy synced the change {synced:?} after the write"
    );
    eprintln!(
        "{mode}: rules synced {synced:?} after the EndpointSlice write was sent; the removed \
         endpoint last answered {last_seen:?} after it returned"
    );
    // The two left answer, and only they (the kernel modes pick at random: six requests went
    // to one of two backends about once in 32 runs; 36 miss one with a probability of 2^-35).
    let mut answers = get_many(&s.node, &web, 6);
    while mode != "userspace"
        && answers.len() < 36
        && answers.iter().collect::<BTreeSet<_>>().len() < 2
    {
        answers.extend(get_many(&s.node, &web, 6));
    }
    let seen: BTreeSet<String> = answers.iter().cloned().collect();
    assert_eq!(
        seen,
        BTreeSet::from(["backend-0".to_string(), "backend-1".to_string()]),
        "{answers:?}"
    );

    // The node's address changes: the proxy takes the new one (NodePorts answer there).
    s.node
        .exec(&["ip", "addr", "add", "192.0.2.77/32", "dev", "lo"])
        .unwrap();
    s.server.ok(&[
        "patch",
        "node",
        "node-0",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"addresses":[{"type":"InternalIP","address":"192.0.2.77"}]}}"#,
    ]);
    let moved = format!("http://192.0.2.77:{NODE_PORT}/");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !get(&s.node, &moved).starts_with("backend-") {
        assert!(
            Instant::now() < deadline,
            "{mode}: the NodePort does not answer on the node's new address\n{}",
            proxy.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The cluster IP still answers (a request may time out on a loaded machine: try again).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = get(&s.node, &web);
        if answer.starts_with("backend-") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{mode}: the cluster IP no longer answers after the node's address changed: {answer}\n{}",
            proxy.log()
        );
        eprintln!("{mode}: the cluster IP answered {answer:?}; trying again");
        std::thread::sleep(Duration::from_millis(200));
    }

    // SIGTERM: the proxy removes its rules and exits cleanly.
    let status = proxy.terminate();
    assert!(
        status.success(),
        "{mode} proxy exit: {status}\n{}",
        proxy.log()
    );
    let left = rules(&s.node);
    assert!(
        !left.contains("KUBE-") && !left.contains("kube-proxy"),
        "{mode} left rules behind:\n{left}"
    );
    let after = get(&s.node, &web);
    assert_ne!(
        after.get(..8),
        Some("backend-"),
        "the service still answers: {after}"
    );
}

#[test]
fn userspace_mode() {
    exercise("userspace", "KUBE-PORTALS-CONTAINER");
}

#[test]
fn iptables_mode() {
    exercise("iptables", "KUBE-SERVICES");
}

#[test]
fn nftables_mode() {
    exercise("nftables", "table ip kube-proxy");
}

#[test]
fn cleanup_removes_every_modes_rules() {
    // Leftovers of all three modes (as a proxy killed with SIGKILL leaves them), and a rule
    // of someone else's that must stay.
    let mut bed = Bed::new();
    let ns = bed.node();
    for cmd in [
        "iptables -t nat -N KUBE-PORTALS-CONTAINER",
        "iptables -t nat -I PREROUTING -m comment --comment \"handle ClusterIPs; NOTE: this must be before the NodePort rules\" -j KUBE-PORTALS-CONTAINER",
        "iptables -t nat -A KUBE-PORTALS-CONTAINER -d 10.43.0.9/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 40000",
        "iptables -N KUBE-NODEPORT-NON-LOCAL",
        "iptables -I INPUT -m comment --comment \"Ensure that non-local NodePort traffic can flow\" -j KUBE-NODEPORT-NON-LOCAL",
        "iptables -t nat -N KUBE-SERVICES",
        "iptables -t nat -I OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
        "nft add table ip kube-proxy",
        "iptables -t nat -A POSTROUTING -s 10.99.0.0/16 -j MASQUERADE",
    ] {
        let out = ns.command("sh").args(["-c", cmd]).output().unwrap();
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let before = rules(&ns);
    assert!(before.contains("KUBE-PORTALS-CONTAINER") && before.contains("kube-proxy"));
    let out = ns
        .command(env!("CARGO_BIN_EXE_capstan"))
        .args(["proxy", "--cleanup"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = rules(&ns);
    assert!(
        !after.contains("KUBE-") && !after.contains("kube-proxy"),
        "left behind:\n{after}"
    );
    assert!(
        after.contains("-A POSTROUTING -s 10.99.0.0/16 -j MASQUERADE"),
        "{after}"
    );
}

#[test]
fn ipvs_mode_fails_with_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args([
            "proxy",
            "--proxy-mode",
            "ipvs",
            "--kubeconfig",
            "/nonexistent",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("ipvs"), "{err}");
}
