//! `capstan dns` end to end: a control plane, Services and EndpointSlices made with kubectl,
//! `capstan dns` as a child process forwarding to a dnsmasq on loopback, and questions asked
//! with capstan-dns's own client over UDP and TCP.
//!
//! (busybox's nslookup cannot ask a server on another port than 53, so it is not used here.)

mod support;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use capstan_dns::client::{exchange_tcp, query, resolve};
use capstan_dns::wire::{rcode, rtype, Message, Name, RData};
use support::{wait_until, Server};

/// A child process killed when dropped.
struct Proc {
    child: Child,
    log: std::path::PathBuf,
}

impl Proc {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free for both UDP and TCP on 127.0.0.1.
fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn ask(addr: SocketAddr, name: &str, qtype: u16) -> Message {
    rt().block_on(resolve(addr, name, qtype, Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("asking {name}: {e:#}"))
}

fn addresses(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.to_string()),
            RData::Aaaa(a) => Some(a.to_string()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

fn name(s: &str) -> Name {
    Name::parse(s).unwrap()
}

/// dnsmasq on loopback, answering external.test itself and nothing else (no upstreams).
fn dnsmasq(dir: &std::path::Path) -> (Proc, SocketAddr) {
    let port = free_port();
    let log = dir.join("dnsmasq.log");
    let child = Command::new("dnsmasq")
        .args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            "--address=/external.test/192.0.2.10",
            "--pid-file=",
        ])
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("dnsmasq runs (apt-get install dnsmasq-base)");
    let proc = Proc { child, log };
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_until("dnsmasq answers", Duration::from_secs(10), || {
        rt().block_on(resolve(
            addr,
            "external.test",
            rtype::A,
            Duration::from_millis(300),
        ))
        .is_ok_and(|m| addresses(&m) == ["192.0.2.10"])
    });
    (proc, addr)
}

const OBJECTS: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: default}
spec:
  clusterIP: None
  ports: [{name: pg, port: 5432, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-1
  namespace: default
  labels: {kubernetes.io/service-name: db}
addressType: IPv4
ports: [{name: pg, port: 5432, protocol: TCP}]
endpoints:
- addresses: [10.1.0.1]
  hostname: db-0
  conditions: {ready: true}
- addresses: [10.1.0.2]
  hostname: db-1
  conditions: {ready: false}
- addresses: [10.1.0.3]
---
apiVersion: v1
kind: Service
metadata: {name: ext, namespace: default}
spec:
  type: ExternalName
  externalName: external.test
"#;

#[test]
fn cluster_dns() {
    let server = Server::start_cluster(&[]);
    let (upstream, upstream_addr) = dnsmasq(server.dir.path());
    server.ok_stdin(&["apply", "-f", "-"], OBJECTS);
    let web_ip = server.ok(&["get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    assert!(!web_ip.is_empty());

    let port = free_port();
    let ready_port = free_port();
    let dns_addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let log = server.dir.path().join("dns.log");
    let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("dns")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .arg("--listen")
        .arg(dns_addr.to_string())
        .arg("--upstream")
        .arg(upstream_addr.to_string())
        .arg("--ready-listen")
        .arg(format!("127.0.0.1:{ready_port}"))
        .env("CAPSTAN_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("capstan dns starts");
    let dns = Proc { child, log };

    let started = std::time::Instant::now();
    while !rt()
        .block_on(resolve(
            dns_addr,
            "web.default.svc.cluster.local",
            rtype::A,
            Duration::from_millis(500),
        ))
        .is_ok_and(|m| addresses(&m) == [web_ip.as_str()])
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "capstan dns did not answer for web within 30 s:\n{}",
            dns.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let ready = http_get(([127, 0, 0, 1], ready_port).into(), "/ready");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");

    // A ClusterIP service: A, SRV with the service name as target, PTR.
    let m = ask(dns_addr, "web.default.svc.cluster.local", rtype::A);
    assert!(m.authoritative);
    assert_eq!(m.answers[0].ttl, 30);
    let m = ask(dns_addr, "kubernetes.default.svc.cluster.local", rtype::A);
    assert_eq!(addresses(&m).len(), 1, "{m:?}");
    let m = ask(
        dns_addr,
        "_http._tcp.web.default.svc.cluster.local",
        rtype::SRV,
    );
    assert_eq!(m.answers.len(), 1, "{m:?}");
    assert_eq!(
        m.answers[0].data,
        RData::Srv {
            priority: 0,
            weight: 100,
            port: 80,
            target: name("web.default.svc.cluster.local"),
        }
    );
    assert_eq!(m.additional.len(), 1);
    assert_eq!(m.additional[0].data, RData::A(web_ip.parse().unwrap()));
    let reverse: Vec<&str> = web_ip.split('.').rev().collect();
    let m = ask(
        dns_addr,
        &format!("{}.in-addr.arpa", reverse.join(".")),
        rtype::PTR,
    );
    assert_eq!(
        m.answers[0].data,
        RData::Ptr(name("web.default.svc.cluster.local"))
    );

    // A headless service: ready endpoints only, by hostname or dashed IP, SRV per endpoint.
    let m = ask(dns_addr, "db.default.svc.cluster.local", rtype::A);
    assert_eq!(addresses(&m), ["10.1.0.1", "10.1.0.3"]);
    let m = ask(dns_addr, "db-0.db.default.svc.cluster.local", rtype::A);
    assert_eq!(addresses(&m), ["10.1.0.1"]);
    let m = ask(dns_addr, "db-1.db.default.svc.cluster.local", rtype::A);
    assert_eq!(m.rcode, rcode::NXDOMAIN, "not ready: {m:?}");
    let m = ask(
        dns_addr,
        "_pg._tcp.db.default.svc.cluster.local",
        rtype::SRV,
    );
    let mut targets: Vec<String> = m
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::Srv {
                target,
                port,
                weight,
                ..
            } => {
                assert_eq!((*port, *weight), (5432, 50));
                target.to_string()
            }
            other => panic!("{other:?}"),
        })
        .collect();
    targets.sort();
    assert_eq!(
        targets,
        [
            "10-1-0-3.db.default.svc.cluster.local.",
            "db-0.db.default.svc.cluster.local."
        ]
    );
    assert_eq!(m.additional.len(), 2);
    let m = ask(dns_addr, "1.0.1.10.in-addr.arpa", rtype::PTR);
    assert_eq!(
        m.answers[0].data,
        RData::Ptr(name("db-0.db.default.svc.cluster.local"))
    );

    // An ExternalName service: a CNAME, and the target resolved through the upstream.
    let m = ask(dns_addr, "ext.default.svc.cluster.local", rtype::A);
    assert_eq!(m.answers[0].data, RData::Cname(name("external.test")));
    assert_eq!(addresses(&m), ["192.0.2.10"]);

    // Pods, names that do not exist, and the rest forwarded.
    let m = ask(dns_addr, "10-244-0-5.default.pod.cluster.local", rtype::A);
    assert_eq!(addresses(&m), ["10.244.0.5"]);
    let m = ask(dns_addr, "nope.default.svc.cluster.local", rtype::A);
    assert_eq!(m.rcode, rcode::NXDOMAIN);
    assert!(matches!(m.authority[0].data, RData::Soa { .. }));
    let m = ask(dns_addr, "web.nosuchns.svc.cluster.local", rtype::A);
    assert_eq!(m.rcode, rcode::NXDOMAIN);
    let m = ask(dns_addr, "web.default.svc.cluster.local", rtype::AAAA);
    assert_eq!((m.rcode, m.answers.len()), (rcode::NOERROR, 0));
    let m = ask(dns_addr, "external.test", rtype::A);
    assert_eq!(addresses(&m), ["192.0.2.10"]);
    assert!(!m.authoritative || m.recursion_available);
    let m = ask(dns_addr, "dns-version.cluster.local", rtype::TXT);
    assert_eq!(m.answers[0].data, RData::Txt(vec![b"1.1.0".to_vec()]));

    // Over TCP too.
    let q = query("db.default.svc.cluster.local", rtype::A, None).unwrap();
    let m = rt()
        .block_on(exchange_tcp(dns_addr, &q, Duration::from_secs(5)))
        .unwrap();
    assert_eq!(addresses(&m), ["10.1.0.1", "10.1.0.3"]);

    // Changes show up: an endpoint becomes ready, a service goes away.
    server.ok(&[
        "patch",
        "endpointslice",
        "db-1",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/endpoints/1/conditions/ready","value":true}]"#,
    ]);
    wait_until("db-1 is resolvable", Duration::from_secs(5), || {
        addresses(&ask(dns_addr, "db.default.svc.cluster.local", rtype::A))
            == ["10.1.0.1", "10.1.0.2", "10.1.0.3"]
    });
    let m = ask(dns_addr, "db-1.db.default.svc.cluster.local", rtype::A);
    assert_eq!(addresses(&m), ["10.1.0.2"]);
    server.ok(&["delete", "service", "web"]);
    wait_until("web is gone", Duration::from_secs(5), || {
        ask(dns_addr, "web.default.svc.cluster.local", rtype::A).rcode == rcode::NXDOMAIN
    });
    let m = ask(
        dns_addr,
        &format!("{}.in-addr.arpa", reverse.join(".")),
        rtype::PTR,
    );
    assert!(
        m.answers.is_empty(),
        "the PTR went with the service (forwarded now): {m:?}"
    );
    server.ok(&["delete", "endpointslice", "db-1"]);
    wait_until("db has no endpoints", Duration::from_secs(5), || {
        ask(dns_addr, "db.default.svc.cluster.local", rtype::A).rcode == rcode::NXDOMAIN
    });

    drop(dns);
    assert!(!upstream.log().contains("FAILED"), "{}", upstream.log());
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: dns\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}
