//! `capstan ingress` end to end: a control plane (`Server::start_cluster`), the controller as
//! a child process on free loopback ports, and backends that are small HTTP servers on
//! threads of this test, answering with their name and what they were sent. Backends listen
//! on the address of a netns test bed's bridge (a private address of this machine that the
//! bed creates and removes), since EndpointSlices may not name loopback addresses. Services
//! (without selectors) and EndpointSlices are written by hand.
//!
//! Checked: routing by host (exact and wildcard) and by path (Prefix, Exact), round-robin
//! over a service's endpoints with a retry past an endpoint that refuses connections, 404
//! for unknown hosts, 503 for a service without ready endpoints, X-Forwarded-* headers, the
//! HTTP→HTTPS redirect, HTTPS by SNI over HTTP/1.1 and HTTP/2, a host whose TLS Secret is
//! invalid failing its handshake (with a Warning event) while the others serve, a rule
//! conflict's Warning event, protocol upgrades, status.loadBalancer from the node's
//! InternalIP, /metrics and /healthz, and that editing an Ingress while a client loops
//! requests fails none of them.

mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_testkit::netbed::Bed;
use support::{wait_until, Server};

/// The node address the controller publishes (from the Node's InternalIP).
const NODE_IP: &str = "192.0.2.44";

// ---------------------------------------------------------------------------------------------
// Backends

/// An HTTP/1.1 server on threads: answers every request with its name, the Host, the
/// X-Forwarded-* headers and the path; an `Upgrade: echo` request switches to echoing bytes.
struct Backend {
    port: u16,
    ip: IpAddr,
    stop: Arc<AtomicBool>,
}

impl Backend {
    fn start(name: &str, ip: IpAddr) -> Backend {
        let listener = TcpListener::bind((ip, 0)).expect("backend binds");
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let (stopped, name) = (stop.clone(), name.to_string());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let name = name.clone();
                std::thread::spawn(move || serve_backend(conn, &name));
            }
        });
        Backend { port, ip, stop }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&(self.ip, self.port).into(), Duration::from_secs(1));
    }
}

fn serve_backend(stream: TcpStream, name: &str) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let get = |k: &str| {
            headers
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let length: usize = get("content-length").parse().unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        if get("upgrade") == "echo" {
            let _ = out.write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n",
            );
            let mut buf = [0u8; 1024];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if out.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
        }
        let text = format!(
            "{name}\nhost={}\nxff={}\nproto={}\nfhost={}\npath={path}\n",
            get("host"),
            get("x-forwarded-for"),
            get("x-forwarded-proto"),
            get("x-forwarded-host"),
        );
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if out.write_all(resp.as_bytes()).is_err() {
            return;
        }
        if get("connection").eq_ignore_ascii_case("close") {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Clients

/// A plain HTTP/1.1 GET on a new connection: (status, headers, body).
fn http_get(port: u16, host: &str, path: &str) -> std::io::Result<(u16, String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nX-Forwarded-For: 6.6.6.6\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no header end in {text:?}")))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status in {head:?}")))?;
    Ok((status, head.to_string(), body.to_string()))
}

/// The first line of a body (the backend's name).
fn who(body: &str) -> &str {
    body.lines().next().unwrap_or("")
}

/// curl over HTTPS with `host` resolved to loopback: (http version, status, body), or curl's
/// error.
fn curl_https(
    port: u16,
    host: &str,
    path: &str,
    ca: &Path,
    http2: bool,
) -> Result<(String, u16, String), String> {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("{host}:{port}:127.0.0.1")])
        .arg(if http2 { "--http2" } else { "--http1.1" })
        .args(["-w", "\n%{http_version} %{http_code}"])
        .arg(format!("https://{host}:{port}{path}"))
        .output()
        .expect("curl runs");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap_or(("", &text));
    let mut parts = tail.split_whitespace();
    let version = parts.next().unwrap_or("").to_string();
    let status = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((version, status, body.to_string()))
}

// ---------------------------------------------------------------------------------------------
// The controller process

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Controller {
    child: Option<Child>,
    log: PathBuf,
    http: u16,
    https: u16,
    metrics: u16,
}

impl Controller {
    fn start(server: &Server, dir: &Path, extra: &[&str]) -> Controller {
        let (http, https, metrics) = (free_port(), free_port(), free_port());
        let log = dir.join("ingress.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .arg("ingress")
            .arg("--kubeconfig")
            .arg(server.kubeconfig())
            .args(["--bind-address", "127.0.0.1"])
            .args(["--http-port", &http.to_string()])
            .args(["--https-port", &https.to_string()])
            .args(["--metrics-port", &metrics.to_string()])
            .args(extra)
            .env("CAPSTAN_LOG", "info,capstan_ingress=debug")
            .env_remove("NODE_NAME")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("capstan ingress starts");
        Controller {
            child: Some(child),
            log,
            http,
            https,
            metrics,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then the exit status (killed after 20 s).
    fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("a running controller");
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
                panic!(
                    "capstan ingress did not exit after SIGTERM:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn metrics(&self, path: &str) -> (u16, String) {
        http_get(self.metrics, "localhost", path)
            .map(|(s, _, b)| (s, b))
            .unwrap_or((0, String::new()))
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------

fn slice(name: &str, service: &str, ip: IpAddr, port: u16, port_name: &str, ready: bool) -> String {
    format!(
        r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}
  namespace: default
  labels: {{kubernetes.io/service-name: {service}}}
addressType: IPv4
ports: [{{name: "{port_name}", port: {port}, protocol: TCP}}]
endpoints:
- {{addresses: ["{ip}"], conditions: {{ready: {ready}}}}}
"#
    )
}

/// A self-signed certificate for `host`: (cert path, key path).
fn certificate(dir: &Path, host: &str) -> (PathBuf, PathBuf) {
    let (crt, key) = (
        dir.join(format!("{host}.crt")),
        dir.join(format!("{host}.key")),
    );
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", &format!("/CN={host}")])
        .args(["-addext", &format!("subjectAltName=DNS:{host}")])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (crt, key)
}

fn paths_ingress(loop_backend: &str) -> String {
    format!(
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: paths, namespace: default}}
spec:
  ingressClassName: capstan
  rules:
  - host: paths.example.com
    http:
      paths:
      - {{path: /api, pathType: Prefix, backend: {{service: {{name: beta, port: {{number: 8080}}}}}}}}
      - {{path: /exact, pathType: Exact, backend: {{service: {{name: alpha, port: {{name: http}}}}}}}}
      - {{path: /empty, pathType: Prefix, backend: {{service: {{name: empty, port: {{number: 80}}}}}}}}
      - {{path: /loop, pathType: Prefix, backend: {{service: {{name: {loop_backend}, port: {{name: http}}}}}}}}
"#
    )
}

#[test]
fn ingress_routes_terminates_tls_and_reloads_without_dropping_requests() {
    let bed = Bed::new();
    let ip: IpAddr = bed.host_ip().into();
    let server = Server::start_cluster(&[]);
    let work = tempfile::tempdir().unwrap();
    let alpha1 = Backend::start("alpha-1", ip);
    let alpha2 = Backend::start("alpha-2", ip);
    let beta = Backend::start("beta", ip);
    let gamma = Backend::start("gamma", ip);
    // A port nothing listens on: connections to it are refused.
    let dead = {
        let l = TcpListener::bind((ip, 0)).unwrap();
        l.local_addr().unwrap().port()
    };

    // The node whose InternalIP the controller publishes.
    server.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Node\nmetadata: {name: edge-0}\n",
    );
    server.ok(&[
        "patch",
        "node",
        "edge-0",
        "--subresource=status",
        "--type=merge",
        "-p",
        &format!(r#"{{"status":{{"addresses":[{{"type":"InternalIP","address":"{NODE_IP}"}}]}}}}"#),
    ]);

    let mut objects = String::from(
        r#"
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: capstan}
spec: {controller: capstan.dev/ingress}
---
apiVersion: v1
kind: Service
metadata: {name: alpha, namespace: default}
spec:
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: beta, namespace: default}
spec:
  ports: [{port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: gamma, namespace: default}
spec:
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: default}
spec:
  ports: [{port: 80}]
"#,
    );
    for s in [
        slice("alpha-1", "alpha", ip, alpha1.port, "http", true),
        slice("alpha-2", "alpha", ip, alpha2.port, "http", true),
        slice("alpha-dead", "alpha", ip, dead, "http", true),
        slice("beta-1", "beta", ip, beta.port, "", true),
        slice("gamma-1", "gamma", ip, gamma.port, "http", true),
        // Not ready: the service has no endpoint to send to.
        slice("empty-1", "empty", ip, beta.port, "", false),
    ] {
        objects.push_str("---");
        objects.push_str(&s);
    }
    server.ok_stdin(&["apply", "-f", "-"], &objects);

    let (crt, key) = certificate(work.path(), "secure.example.com");
    server.ok(&[
        "create",
        "secret",
        "tls",
        "secure-tls",
        &format!("--cert={}", crt.display()),
        &format!("--key={}", key.display()),
    ]);
    // The right type and keys, but no certificate in it.
    server.ok(&[
        "create",
        "secret",
        "generic",
        "broken-tls",
        "--type=kubernetes.io/tls",
        "--from-literal=tls.crt=not a certificate",
        "--from-literal=tls.key=not a key",
    ]);
    server.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: hosts, namespace: default}
spec:
  ingressClassName: capstan
  tls:
  - {hosts: [secure.example.com], secretName: secure-tls}
  - {hosts: [broken.example.com], secretName: broken-tls}
  rules:
  - host: a.example.com
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: alpha, port: {name: http}}}}]
  - host: "*.wild.example.com"
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: beta, port: {number: 8080}}}}]
  - host: secure.example.com
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: alpha, port: {name: http}}}}]
  - host: broken.example.com
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: beta, port: {number: 8080}}}}]
"#,
    );
    server.ok_stdin(&["apply", "-f", "-"], &paths_ingress("alpha"));
    // Another controller's Ingress for the same host: not ours, never served.
    server.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: foreign, namespace: default}
spec:
  ingressClassName: nginx
  rules:
  - host: foreign.example.com
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: gamma, port: {name: http}}}}]
"#,
    );

    let ctl = Controller::start(&server, work.path(), &["--node-name", "edge-0"]);
    let ctx = |what: &str| format!("{what}\n--- ingress log ---\n{}", ctl.log());
    wait_until(
        "the ingress controller is healthy",
        Duration::from_secs(60),
        || ctl.metrics("/healthz").0 == 200,
    );

    // Routing by host and path.
    let get = |host: &str, path: &str| {
        http_get(ctl.http, host, path)
            .unwrap_or_else(|e| panic!("{}", ctx(&format!("GET {host}{path}: {e}"))))
    };
    let (status, _, body) = get("a.example.com", "/anything");
    assert_eq!(status, 200, "{}", ctx(&body));
    assert!(who(&body).starts_with("alpha-"), "{body}");
    assert!(body.contains("host=a.example.com\n"), "{body}");
    // X-Forwarded-For is the client's address, whatever the client claimed.
    assert!(body.contains("xff=127.0.0.1\n"), "{body}");
    assert!(body.contains("proto=http\n"), "{body}");
    assert!(body.contains("fhost=a.example.com\n"), "{body}");
    assert_eq!(who(&get("x.wild.example.com", "/").2), "beta");
    assert_eq!(
        get("x.y.wild.example.com", "/").0,
        404,
        "a wildcard covers one label"
    );
    assert_eq!(who(&get("paths.example.com", "/api/v1").2), "beta");
    assert_eq!(
        get("paths.example.com", "/apiv1").0,
        404,
        "prefixes match whole elements"
    );
    assert_eq!(
        who(&get("paths.example.com", "/exact").2).get(..5),
        Some("alpha")
    );
    assert_eq!(get("paths.example.com", "/exact/more").0, 404);
    let (status, _, body) = get("paths.example.com", "/empty");
    assert_eq!(status, 503, "{body}");
    assert_eq!(get("unknown.example.com", "/").0, 404);
    assert_eq!(
        get("foreign.example.com", "/").0,
        404,
        "another class's Ingress"
    );

    // Round-robin over alpha's endpoints; the one refusing connections is skipped by the
    // retry, so no request fails.
    let mut seen = BTreeSet::new();
    for _ in 0..12 {
        let (status, _, body) = get("a.example.com", "/");
        assert_eq!(status, 200, "{}", ctx(&body));
        seen.insert(who(&body).to_string());
    }
    assert_eq!(
        seen,
        BTreeSet::from(["alpha-1".to_string(), "alpha-2".to_string()])
    );

    // HTTPS: by SNI, HTTP/1.1 and HTTP/2; plain HTTP to that host is redirected.
    let (status, head, _) = get("secure.example.com", "/x?y=1");
    assert_eq!(status, 308, "{head}");
    assert!(
        head.contains(&format!(
            "location: https://secure.example.com:{}/x?y=1",
            ctl.https
        )),
        "{head}"
    );
    for http2 in [false, true] {
        let (version, status, body) =
            curl_https(ctl.https, "secure.example.com", "/tls", &crt, http2)
                .unwrap_or_else(|e| panic!("{}", ctx(&format!("https: {e}"))));
        assert_eq!(status, 200, "{body}");
        assert_eq!(version, if http2 { "2" } else { "1.1" });
        assert!(who(&body).starts_with("alpha-"), "{body}");
        assert!(body.contains("proto=https\n"), "{body}");
        assert!(
            body.contains(&format!("host=secure.example.com:{}\n", ctl.https)),
            "{body}"
        );
    }
    // The host with an invalid Secret has no certificate: its handshakes fail.
    let err = curl_https(ctl.https, "broken.example.com", "/", &crt, false)
        .expect_err("no certificate for broken.example.com");
    assert!(!err.is_empty());
    assert!(curl_https(ctl.https, "secure.example.com", "/", &crt, false).is_ok());
    wait_until(
        "a TLSSecretInvalid warning on the ingress",
        Duration::from_secs(20),
        || {
            server
                .ok(&[
                    "get",
                    "events",
                    "--field-selector",
                    "involvedObject.name=hosts",
                    "-o",
                    "jsonpath={range .items[*]}{.type}/{.reason}: {.message}{\"\\n\"}{end}",
                ])
                .lines()
                .any(|l| l.starts_with("Warning/TLSSecretInvalid") && l.contains("broken-tls"))
        },
    );

    // Upgrades pass through: after 101 the connection is the backend's.
    {
        let mut s = TcpStream::connect(("127.0.0.1", ctl.http)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET /ws HTTP/1.1\r\nHost: x.wild.example.com\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"
        )
        .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        s.write_all(b"ping through the ingress").unwrap();
        let mut back = [0u8; 24];
        s.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"ping through the ingress");
    }

    // A newer Ingress claiming a path an older one has: the older keeps it, the newer is
    // warned.
    server.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: late, namespace: default}
spec:
  ingressClassName: capstan
  rules:
  - host: a.example.com
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: gamma, port: {name: http}}}}]
  - host: late.example.com
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: gamma, port: {name: http}}}}]
"#,
    );
    wait_until(
        "the late ingress's own host is served",
        Duration::from_secs(20),
        || {
            http_get(ctl.http, "late.example.com", "/")
                .is_ok_and(|(s, _, b)| s == 200 && who(&b) == "gamma")
        },
    );
    assert!(who(&get("a.example.com", "/").2).starts_with("alpha-"));
    wait_until(
        "a RuleConflict warning on the late ingress",
        Duration::from_secs(20),
        || {
            server
                .ok(&[
                    "get",
                    "events",
                    "--field-selector",
                    "involvedObject.name=late",
                    "-o",
                    "jsonpath={range .items[*]}{.type}/{.reason}: {.message}{\"\\n\"}{end}",
                ])
                .lines()
                .any(|l| l.starts_with("Warning/RuleConflict") && l.contains("default/hosts"))
        },
    );

    // status.loadBalancer: the node's InternalIP, on our Ingresses only.
    wait_until(
        "status.loadBalancer on our ingresses",
        Duration::from_secs(20),
        || {
            ["hosts", "paths", "late"].iter().all(|name| {
                server.ok(&[
                    "get",
                    "ingress",
                    name,
                    "-o",
                    "jsonpath={.status.loadBalancer.ingress[*].ip}",
                ]) == NODE_IP
            })
        },
    );
    assert!(
        !server
            .ok(&["get", "ingress", "foreign", "-o", "jsonpath={.status}"])
            .contains(NODE_IP),
        "another class's Ingress keeps its status"
    );

    // Edits while a client loops: every request succeeds, and the edits take effect.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let last = Arc::new(Last::default());
    let looper = {
        let (stop, ok, failed, last) = (stop.clone(), ok.clone(), failed.clone(), last.clone());
        let port = ctl.http;
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(180);
            let mut failures = Vec::new();
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                match http_get(port, "paths.example.com", "/loop") {
                    Ok((200, _, body)) => {
                        ok.fetch_add(1, Ordering::SeqCst);
                        last.set(who(&body));
                    }
                    other => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        failures.push(format!("{other:?}"));
                    }
                }
            }
            failures
        })
    };
    for round in 0..6 {
        let (backend, want) = if round % 2 == 0 {
            ("gamma", "gamma")
        } else {
            ("alpha", "alpha-")
        };
        server.ok_stdin(&["apply", "-f", "-"], &paths_ingress(backend));
        wait_until(
            &format!("round {round}: /loop answered by {backend}"),
            Duration::from_secs(20),
            || last.get().starts_with(want),
        );
    }
    stop.store(true, Ordering::SeqCst);
    let failures = looper.join().expect("the client loop");
    let (ok, failed) = (ok.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    assert_eq!(failed, 0, "failed requests during edits: {failures:?}");
    assert!(ok >= 30, "only {ok} requests went through");

    // Metrics.
    let (status, text) = ctl.metrics("/metrics");
    assert_eq!(status, 200);
    for want in [
        r#"capstan_ingress_requests_total{namespace="default",ingress="hosts",service="alpha",status="200"}"#,
        r#"capstan_ingress_requests_total{namespace="default",ingress="hosts",service="alpha",status="308"}"#,
        r#"capstan_ingress_requests_total{namespace="default",ingress="paths",service="empty",status="503"}"#,
        r#"capstan_ingress_requests_total{namespace="",ingress="",service="",status="404"}"#,
        r#"capstan_ingress_request_duration_seconds_bucket{namespace="default",ingress="paths",service="gamma",le="+Inf"}"#,
    ] {
        assert!(text.contains(want), "{want} missing in:\n{text}");
    }
    let reloads: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("capstan_ingress_config_reloads_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(reloads >= 7, "{reloads} reloads after 7 edits:\n{text}");
    // Request log lines.
    assert!(
        ctl.log().contains("capstan_ingress::access"),
        "{}",
        ctl.log()
    );

    // SIGTERM: a clean exit.
    let mut ctl = ctl;
    let status = ctl.terminate();
    assert!(status.success(), "exit status {status}:\n{}", ctl.log());
}

#[test]
fn a_port_in_use_fails_at_once() {
    let server = Server::start();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("ingress")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(["--bind-address", "127.0.0.1", "--http-port", &port])
        .args(["--https-port", &free_port().to_string()])
        .args(["--metrics-port", &free_port().to_string()])
        .output()
        .expect("capstan ingress runs");
    assert!(!out.status.success());
    assert!(started.elapsed() < Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port} for HTTP")),
        "{err}"
    );
}

/// The last backend name the client loop saw.
#[derive(Default)]
struct Last(std::sync::Mutex<String>);

impl Last {
    fn set(&self, v: &str) {
        if let Ok(mut g) = self.0.lock() {
            *g = v.to_string();
        }
    }

    fn get(&self) -> String {
        self.0.lock().map(|g| g.clone()).unwrap_or_default()
    }
}
