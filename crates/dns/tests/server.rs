//! The server end to end on loopback: a static zone, a fake upstream, real sockets.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};

use capstan_dns::client::{exchange_tcp, exchange_udp, query, resolve};
use capstan_dns::wire::{rcode, rtype, Edns, Message, Name, RData, Record};
use capstan_dns::zone::{EndpointSpec, PortSpec, ServiceKind, ServiceSpec, SliceSpec};
use capstan_dns::{serve, Options, PodMode, Running, Zone, ZoneConfig};

const T: Duration = Duration::from_secs(3);

/// A fake upstream resolver on loopback (UDP and TCP on one port) that counts questions.
struct Upstream {
    addr: SocketAddr,
    asked: Arc<Mutex<HashMap<String, usize>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Upstream {
    fn asked(&self, name: &str) -> usize {
        self.asked.lock().get(name).copied().unwrap_or(0)
    }
}

fn upstream_answer(q: &Message) -> Message {
    let mut r = Message::reply_to(q);
    r.recursion_available = true;
    r.edns = q.edns.clone();
    let question = &q.questions[0];
    let name = question.name.to_string().to_lowercase();
    let a = |ip: Ipv4Addr, ttl| Record::new(question.name.clone(), ttl, RData::A(ip));
    match name.as_str() {
        "example.test." if question.qtype == rtype::A => {
            r.answers.push(a(Ipv4Addr::new(192, 0, 2, 1), 300))
        }
        "short.test." if question.qtype == rtype::A => {
            r.answers.push(a(Ipv4Addr::new(192, 0, 2, 2), 7))
        }
        "big.test." => {
            for i in 0..150 {
                r.answers.push(a(Ipv4Addr::new(192, 0, 2, i), 60));
            }
        }
        "fail.test." => r.rcode = rcode::SERVFAIL,
        _ => {
            r.rcode = rcode::NXDOMAIN;
            r.authority.push(Record::new(
                Name::parse("test").unwrap(),
                60,
                RData::Soa {
                    mname: Name::parse("ns.test").unwrap(),
                    rname: Name::parse("admin.test").unwrap(),
                    serial: 1,
                    refresh: 1,
                    retry: 1,
                    expire: 1,
                    minimum: 15,
                },
            ));
        }
    }
    r
}

async fn upstream() -> Upstream {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let udp = UdpSocket::bind(addr).await.unwrap();
    let asked: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let count = {
        let asked = asked.clone();
        move |q: &Message| {
            let name = q.questions[0].name.to_string().to_lowercase();
            *asked.lock().entry(name).or_default() += 1;
        }
    };
    let count2 = count.clone();
    let udp_task = tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, peer)) = udp.recv_from(&mut buf).await else {
                return;
            };
            let Ok(q) = Message::decode(&buf[..n]) else {
                continue;
            };
            count(&q);
            let limit = q.edns.as_ref().map_or(512, |e| e.udp_size as usize);
            let _ = udp.send_to(&upstream_answer(&q).encode(limit), peer).await;
        }
    });
    let tcp_task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = tcp.accept().await else {
                return;
            };
            let count = count2.clone();
            tokio::spawn(async move {
                let mut len = [0u8; 2];
                while s.read_exact(&mut len).await.is_ok() {
                    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
                    if s.read_exact(&mut buf).await.is_err() {
                        return;
                    }
                    let Ok(q) = Message::decode(&buf) else {
                        return;
                    };
                    count(&q);
                    let out = upstream_answer(&q).encode(65535);
                    let _ = s.write_all(&(out.len() as u16).to_be_bytes()).await;
                    let _ = s.write_all(&out).await;
                }
            });
        }
    });
    Upstream {
        addr,
        asked,
        tasks: vec![udp_task, tcp_task],
    }
}

fn ip(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

fn zone() -> Arc<Zone> {
    let z = Zone::new(ZoneConfig {
        domain: Name::parse("cluster.local").unwrap(),
        ttl: 30,
        pods: PodMode::Insecure,
        local_ips: vec![],
    });
    z.set_namespace("default", true);
    z.set_service(
        "default",
        "web",
        Some(&ServiceSpec {
            kind: ServiceKind::ClusterIp(vec![ip("10.96.0.10")]),
            ports: vec![PortSpec {
                name: "http".into(),
                protocol: "TCP".into(),
                port: 80,
            }],
        }),
    );
    z.set_service(
        "default",
        "ext",
        Some(&ServiceSpec {
            kind: ServiceKind::ExternalName("example.test".into()),
            ports: vec![],
        }),
    );
    z.set_service(
        "default",
        "many",
        Some(&ServiceSpec {
            kind: ServiceKind::Headless,
            ports: vec![],
        }),
    );
    z.set_slice(
        "default",
        "many-1",
        Some(&SliceSpec {
            service: "many".into(),
            ports: vec![],
            endpoints: (0..200u32)
                .map(|i| {
                    let a = Ipv4Addr::from(0x0A01_0000 + i);
                    EndpointSpec {
                        ip: a.into(),
                        raw: a.to_string(),
                        hostname: None,
                    }
                })
                .collect(),
        }),
    );
    Arc::new(z)
}

async fn start(upstreams: Vec<SocketAddr>, zone: Arc<Zone>) -> (Running, SocketAddr) {
    let running = serve(
        Options {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            upstreams,
            workers: 2,
            ready_listen: Some("127.0.0.1:0".parse().unwrap()),
            ..Options::default()
        },
        Some(zone),
    )
    .await
    .unwrap();
    let addr = running.addrs()[0];
    (running, addr)
}

fn addrs(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.to_string()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_cluster_names_and_forwards_the_rest() {
    let up = upstream().await;
    let z = zone();
    z.set_ready();
    let (_dns, addr) = start(vec![up.addr], z).await;

    let m = resolve(addr, "web.default.svc.cluster.local", rtype::A, T)
        .await
        .unwrap();
    assert!(m.authoritative && m.response);
    assert!(!m.recursion_available);
    assert_eq!(addrs(&m), vec!["10.96.0.10"]);
    assert_eq!(m.answers[0].ttl, 30);
    assert_eq!(m.edns.as_ref().map(|e| e.udp_size), Some(1232));

    let m = resolve(addr, "nope.default.svc.cluster.local", rtype::A, T)
        .await
        .unwrap();
    assert_eq!(m.rcode, rcode::NXDOMAIN);
    assert!(m.authoritative);
    assert!(matches!(m.authority[0].data, RData::Soa { .. }));

    // Forwarded, then served from the cache with the TTL capped at 30 s.
    let m = resolve(addr, "example.test", rtype::A, T).await.unwrap();
    assert_eq!(addrs(&m), vec!["192.0.2.1"]);
    assert!(m.recursion_available);
    assert!(m.answers[0].ttl <= 30);
    let m = resolve(addr, "EXAMPLE.test", rtype::A, T).await.unwrap();
    assert_eq!(addrs(&m), vec!["192.0.2.1"]);
    assert_eq!(m.questions[0].name.to_string(), "EXAMPLE.test.");
    assert_eq!(
        up.asked("example.test."),
        1,
        "the second answer came from the cache"
    );

    // Denials are cached too, by the SOA's negative TTL.
    for _ in 0..2 {
        let m = resolve(addr, "missing.test", rtype::A, T).await.unwrap();
        assert_eq!(m.rcode, rcode::NXDOMAIN);
        assert!(m.authority[0].ttl <= 15);
    }
    assert_eq!(up.asked("missing.test."), 1);

    // An upstream's SERVFAIL is passed on.
    let m = resolve(addr, "fail.test", rtype::A, T).await.unwrap();
    assert_eq!(m.rcode, rcode::SERVFAIL);

    // An ExternalName service: the CNAME, then the target's address from upstream.
    let m = resolve(addr, "ext.default.svc.cluster.local", rtype::A, T)
        .await
        .unwrap();
    assert!(m.authoritative);
    assert_eq!(
        m.answers[0].data,
        RData::Cname(Name::parse("example.test").unwrap())
    );
    assert_eq!(addrs(&m), vec!["192.0.2.1"]);

    // A big upstream answer: the upstream truncates over UDP, we fetch it over TCP, and
    // hand it out truncated over UDP and whole over TCP.
    let q = query("big.test", rtype::A, None).unwrap();
    let m = exchange_udp(addr, &q, T).await.unwrap();
    assert!(m.truncated);
    let m = exchange_tcp(addr, &q, T).await.unwrap();
    assert!(!m.truncated);
    assert_eq!(m.answers.len(), 150);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncates_over_udp_and_answers_in_full_over_tcp() {
    let z = zone();
    z.set_ready();
    let (_dns, addr) = start(vec![], z).await;
    let q = query("many.default.svc.cluster.local", rtype::A, None).unwrap();
    let m = exchange_udp(addr, &q, T).await.unwrap();
    assert!(m.truncated);
    assert!(!m.answers.is_empty() && m.answers.len() < 200);
    // With EDNS and a big enough buffer, all 200 fit.
    let q4k = query("many.default.svc.cluster.local", rtype::A, Some(4096)).unwrap();
    let m = exchange_udp(addr, &q4k, T).await.unwrap();
    assert!(!m.truncated);
    assert_eq!(m.answers.len(), 200);

    // Several questions on one TCP connection.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    for name in [
        "many.default.svc.cluster.local",
        "web.default.svc.cluster.local",
    ] {
        let q = query(name, rtype::A, None).unwrap();
        let wire = q.encode(65535);
        s.write_all(&(wire.len() as u16).to_be_bytes())
            .await
            .unwrap();
        s.write_all(&wire).await.unwrap();
        let mut len = [0u8; 2];
        s.read_exact(&mut len).await.unwrap();
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut buf).await.unwrap();
        let m = Message::decode(&buf).unwrap();
        assert_eq!(m.id, q.id);
        assert!(!m.truncated);
        assert!(!m.answers.is_empty());
    }
    // Without upstreams, other names fail.
    let m = resolve(addr, "example.test", rtype::A, T).await.unwrap();
    assert_eq!(m.rcode, rcode::SERVFAIL);
}

async fn recv(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> Result<std::io::Result<usize>, tokio::time::error::Elapsed> {
    tokio::time::timeout(T, sock.recv(buf)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_unsupported_queries() {
    let z = zone();
    z.set_ready();
    let (_dns, addr) = start(vec![], z).await;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(addr).await.unwrap();
    let mut buf = vec![0u8; 4096];

    // A header and garbage: FORMERR with the same id.
    sock.send(&[
        0xAB, 0xCD, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 0x0C, 0, 1,
    ])
    .await
    .unwrap();
    let n = recv(&sock, &mut buf).await.unwrap().unwrap();
    let m = Message::decode(&buf[..n]).unwrap();
    assert_eq!((m.id, m.rcode), (0xABCD, rcode::FORMERR));

    // Too short for a header, or a response: no answer at all. (A valid query sent right
    // after is answered, so silence is not slowness.)
    sock.send(&[1, 2, 3]).await.unwrap();
    let mut resp = query("web.default.svc.cluster.local", rtype::A, None).unwrap();
    resp.response = true;
    sock.send(&resp.encode(512)).await.unwrap();
    let probe = query("web.default.svc.cluster.local", rtype::A, None).unwrap();
    sock.send(&probe.encode(512)).await.unwrap();
    let n = recv(&sock, &mut buf).await.unwrap().unwrap();
    assert_eq!(Message::decode(&buf[..n]).unwrap().id, probe.id);

    // EDNS version 1: BADVERS.
    let mut q = query("web.default.svc.cluster.local", rtype::A, None).unwrap();
    q.edns = Some(Edns {
        version: 1,
        ..Edns::new(1232)
    });
    let m = exchange_udp(addr, &q, T).await.unwrap();
    assert_eq!(m.rcode, rcode::BADVERS);

    // Another opcode: NOTIMP. Two questions: FORMERR.
    let mut q = query("web.default.svc.cluster.local", rtype::A, None).unwrap();
    q.opcode = 2;
    assert_eq!(
        exchange_udp(addr, &q, T).await.unwrap().rcode,
        rcode::NOTIMP
    );
    let mut q = query("web.default.svc.cluster.local", rtype::A, None).unwrap();
    q.questions.push(q.questions[0].clone());
    assert_eq!(
        exchange_udp(addr, &q, T).await.unwrap().rcode,
        rcode::FORMERR
    );

    // Random garbage never kills the server.
    let mut seed: u64 = 0x1234_5678;
    for _ in 0..2000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let len = (seed % 300) as usize;
        let junk: Vec<u8> = (0..len).map(|i| (seed >> (i % 56)) as u8).collect();
        let _ = sock.send(&junk).await;
    }
    let m = resolve(addr, "web.default.svc.cluster.local", rtype::A, T)
        .await
        .unwrap();
    assert_eq!(addrs(&m), vec!["10.96.0.10"]);
}

async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servfail_until_ready_then_nxdomain() {
    let z = zone();
    let (dns, addr) = start(vec![], z.clone()).await;
    let ready = dns.ready_addr().unwrap();
    assert!(http_get(ready, "/health").await.starts_with("HTTP/1.1 200"));
    assert!(http_get(ready, "/ready").await.starts_with("HTTP/1.1 503"));
    let m = resolve(addr, "nope.default.svc.cluster.local", rtype::A, T)
        .await
        .unwrap();
    assert_eq!(m.rcode, rcode::SERVFAIL);
    // What is known is answered already.
    let m = resolve(addr, "web.default.svc.cluster.local", rtype::A, T)
        .await
        .unwrap();
    assert_eq!(addrs(&m), vec!["10.96.0.10"]);
    z.set_ready();
    dns.wait_ready().await;
    assert!(http_get(ready, "/ready").await.starts_with("HTTP/1.1 200"));
    let m = resolve(addr, "nope.default.svc.cluster.local", rtype::A, T)
        .await
        .unwrap();
    assert_eq!(m.rcode, rcode::NXDOMAIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn address_in_use_fails_at_once_and_shutdown_frees_it() {
    let (dns, addr) = start(vec![], zone()).await;
    let again = serve(
        Options {
            listen: vec![addr],
            ..Options::default()
        },
        Some(zone()),
    )
    .await;
    let err = format!("{:#}", again.err().expect("the address is taken"));
    assert!(
        err.contains(&addr.to_string()) && err.contains("in use"),
        "{err}"
    );
    dns.shutdown().await;
    assert!(exchange_udp(
        addr,
        &query("web.default.svc.cluster.local", rtype::A, None).unwrap(),
        Duration::from_millis(300)
    )
    .await
    .is_err());
    let again = serve(
        Options {
            listen: vec![addr],
            ..Options::default()
        },
        Some(zone()),
    )
    .await;
    assert!(again.is_ok(), "{:?}", again.err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv4_and_ipv6_on_the_same_port() {
    let z = zone();
    z.set_ready();
    // A port free on both loopbacks.
    let port = loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("::1", p)).is_ok()
            && std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok()
            && std::net::UdpSocket::bind(("::1", p)).is_ok()
        {
            break p;
        }
    };
    let v4: SocketAddr = ([127, 0, 0, 1], port).into();
    let v6: SocketAddr = (std::net::Ipv6Addr::LOCALHOST, port).into();
    let dns = serve(
        Options {
            listen: vec![v4, v6],
            ..Options::default()
        },
        Some(z),
    )
    .await
    .unwrap();
    assert_eq!(dns.addrs(), [v4, v6]);
    for addr in [v4, v6] {
        let m = resolve(addr, "web.default.svc.cluster.local", rtype::A, T)
            .await
            .unwrap();
        assert_eq!(addrs(&m), vec!["10.96.0.10"]);
        let q = query("web.default.svc.cluster.local", rtype::A, None).unwrap();
        assert_eq!(
            addrs(&exchange_tcp(addr, &q, T).await.unwrap()),
            vec!["10.96.0.10"]
        );
    }
}
