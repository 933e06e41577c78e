use std::io::{Read, Write};

use super::*;
use crate::netns::NetNs;

fn spn(name: &str, protocol: Protocol) -> ServicePortName {
    ServicePortName {
        namespace: "default".into(),
        name: name.into(),
        port: "p".into(),
        protocol,
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

// ---- Balancer -------------------------------------------------------------------------------

#[test]
fn round_robin_is_exact() {
    let mut b = Balancer::new();
    let client: IpAddr = "10.0.0.1".parse().unwrap();
    assert_eq!(b.pick(client, false), None, "no endpoints, nothing to pick");
    b.set_endpoints(vec![
        addr("10.1.0.3:80"),
        addr("10.1.0.1:80"),
        addr("10.1.0.2:80"),
    ]);
    let picks: Vec<SocketAddr> = (0..9).map(|_| b.pick(client, false).unwrap()).collect();
    let first: HashSet<SocketAddr> = picks[..3].iter().copied().collect();
    assert_eq!(
        first.len(),
        3,
        "the first three picks are three endpoints: {picks:?}"
    );
    for i in 3..9 {
        assert_eq!(picks[i], picks[i - 3], "the order repeats: {picks:?}");
    }
    assert_eq!(&picks[..3], b.order());

    // The same set again (in another order) keeps the rotation where it is.
    let next = b.order()[0];
    b.set_endpoints(vec![
        addr("10.1.0.1:80"),
        addr("10.1.0.2:80"),
        addr("10.1.0.3:80"),
    ]);
    assert_eq!(b.pick(client, false), Some(next));

    // A changed set restarts the rotation over the new set.
    b.set_endpoints(vec![addr("10.1.0.1:80"), addr("10.1.0.2:80")]);
    let picks: Vec<SocketAddr> = (0..4).map(|_| b.pick(client, false).unwrap()).collect();
    assert_eq!(picks[0], b.order()[0]);
    assert_ne!(picks[0], picks[1]);
    assert_eq!(picks[0], picks[2]);
    assert!(!picks.contains(&addr("10.1.0.3:80")));
}

#[test]
fn client_ip_affinity_sticks_expires_and_resets() {
    let mut b = Balancer::new();
    b.set_affinity(Some(Duration::from_millis(300)));
    b.set_endpoints(vec![
        addr("10.1.0.1:80"),
        addr("10.1.0.2:80"),
        addr("10.1.0.3:80"),
    ]);
    let a: IpAddr = "10.0.0.1".parse().unwrap();
    let c: IpAddr = "10.0.0.2".parse().unwrap();
    let first = b.pick(a, false).unwrap();
    for _ in 0..10 {
        assert_eq!(b.pick(a, false), Some(first), "sticks while used");
    }
    let other = b.pick(c, false).unwrap();
    assert_ne!(other, first, "another client takes the next endpoint");
    // After a failed connect the client moves on, and sticks to its new endpoint.
    let moved = b.pick(a, true).unwrap();
    assert_ne!(moved, first);
    assert_eq!(b.pick(a, false), Some(moved));
    // Removing its endpoint ends the session.
    let rest: Vec<SocketAddr> = b.order().iter().copied().filter(|e| *e != moved).collect();
    b.set_endpoints(rest.clone());
    let now = b.pick(a, false).unwrap();
    assert!(rest.contains(&now));
    // Idle longer than the timeout: the session is gone, round-robin goes on.
    std::thread::sleep(Duration::from_millis(350));
    let before = b.order()[b.next];
    assert_eq!(b.pick(a, false), Some(before));
    // Turning affinity off forgets sessions.
    b.set_affinity(None);
    assert!(b.sessions.is_empty());
    let x = b.pick(a, false).unwrap();
    let y = b.pick(a, false).unwrap();
    assert_ne!(x, y, "without affinity one client rotates too");
}

// ---- Proxy sockets on loopback (no rules) ---------------------------------------------------

/// A TCP server on loopback that answers every connection with `name` and closes.
async fn tcp_backend(name: &'static str) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let _ = s.write_all(name.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    a
}

fn endpoint(a: SocketAddr) -> Endpoint {
    Endpoint {
        ip: a.ip(),
        port: a.port(),
        ready: true,
        serving: true,
        terminating: false,
        node_name: None,
    }
}

/// Read what the proxy at `port` answers (blocking; run in spawn_blocking).
fn fetch(port: u16) -> io::Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_round_robin_and_updates_through_the_socket() {
    let rt = tokio::runtime::Handle::current();
    let name = spn("web", Protocol::Tcp);
    let sock = ProxySocket::open(
        &rt,
        &Sockets::default(),
        &name,
        Protocol::Tcp,
        Duration::ZERO,
    )
    .unwrap();
    let backends = [
        tcp_backend("a").await,
        tcp_backend("b").await,
        tcp_backend("c").await,
    ];
    let eps: Vec<Endpoint> = backends.iter().map(|a| endpoint(*a)).collect();
    sock.update(&eps.iter().collect::<Vec<_>>(), None);
    let port = sock.port;
    let answers = tokio::task::spawn_blocking(move || {
        (0..9).map(|_| fetch(port).unwrap()).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let first: HashSet<&String> = answers[..3].iter().collect();
    assert_eq!(first.len(), 3, "{answers:?}");
    for i in 3..9 {
        assert_eq!(answers[i], answers[i - 3], "exact round-robin: {answers:?}");
    }

    // An endpoint removed gets no new connection, at once.
    sock.update(&[&eps[0], &eps[1]], None);
    let answers = tokio::task::spawn_blocking(move || {
        (0..6).map(|_| fetch(port).unwrap()).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert!(answers.iter().all(|a| a == "a" || a == "b"), "{answers:?}");

    // No endpoints: the connection is reset at once, not left hanging.
    sock.update(&[], None);
    let started = Instant::now();
    let err = tokio::task::spawn_blocking(move || fetch(port))
        .await
        .unwrap()
        .expect_err("a service without endpoints refuses");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
    assert!(started.elapsed() < Duration::from_secs(1));

    // Closing the socket stops accepting.
    drop(sock);
    let closed = tokio::task::spawn_blocking(move || {
        // The abort is asynchronous: give the task a moment to drop the listener.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .unwrap();
    assert!(closed, "the proxy port closes with its socket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_connections_survive_endpoint_changes_and_failed_endpoints_are_skipped() {
    let rt = tokio::runtime::Handle::current();
    let name = spn("echo", Protocol::Tcp);
    let sock = ProxySocket::open(
        &rt,
        &Sockets::default(),
        &name,
        Protocol::Tcp,
        Duration::ZERO,
    )
    .unwrap();
    // An echo backend.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    // A closed port: connecting to it fails, and the proxy moves on to the next endpoint.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let eps = [endpoint(dead), endpoint(echo)];
    sock.update(&eps.iter().collect::<Vec<_>>(), None);
    let port = sock.port;
    let balancer = sock.balancer.clone();
    let ok = tokio::task::spawn_blocking(move || {
        let mut conns = Vec::new();
        for _ in 0..2 {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(b"ping").unwrap();
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"ping");
            conns.push(s);
        }
        // The endpoints change; connections already made carry on.
        balancer.lock().set_endpoints(Vec::new());
        for s in &mut conns {
            s.write_all(b"pong").unwrap();
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"pong");
        }
        true
    })
    .await
    .unwrap();
    assert!(ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_clients_get_their_own_endpoint_socket() {
    let rt = tokio::runtime::Handle::current();
    let name = spn("dns", Protocol::Udp);
    let idle = Duration::from_millis(300);
    let sock = ProxySocket::open(&rt, &Sockets::default(), &name, Protocol::Udp, idle).unwrap();
    // Two UDP backends answering "<name>:<payload>".
    let mut eps = Vec::new();
    for tag in ["x", "y"] {
        let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        eps.push(endpoint(s.local_addr().unwrap()));
        tokio::spawn(async move {
            let mut buf = [0u8; 1500];
            while let Ok((n, from)) = s.recv_from(&mut buf).await {
                let reply = format!("{tag}:{}", String::from_utf8_lossy(&buf[..n]));
                let _ = s.send_to(reply.as_bytes(), from).await;
            }
        });
    }
    sock.update(&eps.iter().collect::<Vec<_>>(), None);
    let port = sock.port;
    let ask = move |c: &std::net::UdpSocket, msg: &str| -> String {
        c.send_to(msg.as_bytes(), ("127.0.0.1", port)).unwrap();
        let mut buf = [0u8; 1500];
        let (n, _) = c.recv_from(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let (one, two, later) = tokio::task::spawn_blocking(move || {
        let c1 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let c2 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for c in [&c1, &c2] {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        // One client's datagrams all go to one endpoint while it keeps talking.
        let one: Vec<String> = (0..4).map(|i| ask(&c1, &format!("a{i}"))).collect();
        let two = ask(&c2, "b");
        // After the idle timeout the client's socket is gone; the next datagram picks anew.
        std::thread::sleep(Duration::from_millis(600));
        let later = ask(&c1, "c");
        (one, two, later)
    })
    .await
    .unwrap();
    let tag = |s: &str| s.split(':').next().unwrap_or_default().to_string();
    assert!(one.iter().all(|r| tag(r) == tag(&one[0])), "{one:?}");
    assert_eq!(one[3], format!("{}:a3", tag(&one[0])));
    assert_ne!(
        tag(&two),
        tag(&one[0]),
        "the second client got the other endpoint"
    );
    assert_eq!(
        tag(&later),
        tag(&one[0]),
        "round-robin went on to the first endpoint again"
    );
}

// ---- The whole mode in a network namespace --------------------------------------------------

/// A network namespace of its own (deleted on drop) with an interface `d0` holding `ips` and
/// a default route through it.
fn node_ns(ips: &[&str]) -> NetNs {
    let ns = NetNs::new("cus").unwrap();
    // A veth pair with both ends inside (this kernel may lack dummy interfaces).
    ns.exec(&[
        "ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1",
    ])
    .unwrap();
    for ip in ips {
        ns.exec(&["ip", "addr", "add", &format!("{ip}/24"), "dev", "d0"])
            .unwrap();
    }
    ns.exec(&["ip", "link", "set", "d1", "up"]).unwrap();
    ns.exec(&["ip", "link", "set", "d0", "up"]).unwrap();
    ns.exec(&["ip", "route", "add", "default", "dev", "d0"])
        .unwrap();
    ns
}

fn service(name: &str, ip: &str, port: u16) -> ServicePort {
    ServicePort {
        name: spn(name, Protocol::Tcp),
        cluster_ips: vec![ip.parse().unwrap()],
        port,
        node_port: None,
        external_ips: Vec::new(),
        load_balancer_ips: Vec::new(),
        load_balancer_source_ranges: Vec::new(),
        session_affinity_seconds: None,
        external_policy_local: false,
        internal_policy_local: false,
        health_check_node_port: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portals_in_a_netns_reach_the_endpoints_and_cleanup_removes_them() {
    // The node has 10.77.0.1; three backends listen on 10.77.0.2-4 in the same namespace.
    let ns = node_ns(&["10.77.0.1", "10.77.0.2", "10.77.0.3", "10.77.0.4"]);
    let node = NodeInfo {
        name: "n1".into(),
        ips: vec!["10.77.0.1".parse().unwrap()],
        cluster_cidr: None,
    };
    let rt = tokio::runtime::Handle::current();
    let name = ns.name().to_string();
    let mut proxier = tokio::task::spawn_blocking(move || {
        UserspaceProxier::new(node, rt).in_netns(&name).unwrap()
    })
    .await
    .unwrap();
    let sockets = proxier.sockets.clone();
    let mut backends = Vec::new();
    for (i, ip) in ["10.77.0.2", "10.77.0.3", "10.77.0.4"].iter().enumerate() {
        let a: SocketAddr = format!("{ip}:8080").parse().unwrap();
        let l = TcpListener::from_std(sockets.tcp_listener(a).unwrap()).unwrap();
        let tag = format!("b{i}");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                use tokio::io::AsyncWriteExt;
                let _ = s.write_all(tag.as_bytes()).await;
            }
        });
        backends.push(endpoint(a));
    }

    let mut snap = Snapshot::default();
    let mut web = service("web", "10.96.5.10", 80);
    web.node_port = Some(31080);
    let web = Arc::new(web);
    let empty = Arc::new(service("empty", "10.96.5.11", 80));
    // A UDP service: an echo endpoint answering "echo:<payload>".
    let mut dns = service("dns", "10.96.5.12", 53);
    dns.name.protocol = Protocol::Udp;
    let dns = Arc::new(dns);
    let echo_addr: SocketAddr = "10.77.0.2:5353".parse().unwrap();
    let echo = UdpSocket::from_std(sockets.udp_socket(echo_addr).unwrap()).unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = echo.recv_from(&mut buf).await {
            let reply = format!("echo:{}", String::from_utf8_lossy(&buf[..n]));
            let _ = echo.send_to(reply.as_bytes(), from).await;
        }
    });
    snap.services.insert(web.name.clone(), web.clone());
    snap.services.insert(empty.name.clone(), empty.clone());
    snap.services.insert(dns.name.clone(), dns.clone());
    snap.endpoints
        .insert(web.name.clone(), Arc::new(backends.clone()));
    snap.endpoints
        .insert(dns.name.clone(), Arc::new(vec![endpoint(echo_addr)]));
    let (mut proxier, snap) = tokio::task::spawn_blocking(move || {
        proxier.sync(&snap).unwrap();
        (proxier, snap)
    })
    .await
    .unwrap();
    let (port, _) = proxier.proxy_ports(&web.name).unwrap();

    let saved = ns.exec(&["iptables-save"]).unwrap();
    for want in [
        format!("-A PREROUTING -m comment --comment \"{PORTALS_COMMENT}\" -j {CONTAINER_PORTAL_CHAIN}"),
        format!("-A OUTPUT -m comment --comment \"{PORTALS_COMMENT}\" -j {HOST_PORTAL_CHAIN}"),
        format!("-A {CONTAINER_PORTAL_CHAIN} -d 10.96.5.10/32 -p tcp -m comment --comment \"default/web:p\" -m tcp --dport 80 -j REDIRECT --to-ports {port}"),
        format!("-A {HOST_PORTAL_CHAIN} -d 10.96.5.10/32 -p tcp -m comment --comment \"default/web:p\" -m tcp --dport 80 -j DNAT --to-destination 10.77.0.1:{port}"),
        format!("-A {CONTAINER_NODEPORT_CHAIN} -p tcp -m comment --comment \"default/web:p\" -m tcp --dport 31080 -j REDIRECT --to-ports {port}"),
        format!("-A {HOST_NODEPORT_CHAIN} -p tcp -m comment --comment \"default/web:p\" -m tcp --dport 31080 -j DNAT --to-destination 10.77.0.1:{port}"),
        format!("-A {NON_LOCAL_NODEPORT_CHAIN} -p tcp -m comment --comment \"default/web:p\" -m tcp --dport {port} -m conntrack --ctstate NEW -j ACCEPT"),
    ] {
        assert!(saved.contains(&want), "missing {want:?} in:\n{saved}");
    }
    // The portal rules go before anything else in PREROUTING/OUTPUT; NodePorts after.
    let nat_prerouting: Vec<&str> = saved
        .lines()
        .filter(|l| l.starts_with("-A PREROUTING"))
        .collect();
    assert!(
        nat_prerouting[0].ends_with(CONTAINER_PORTAL_CHAIN),
        "{nat_prerouting:?}"
    );
    assert!(nat_prerouting
        .last()
        .unwrap()
        .ends_with(CONTAINER_NODEPORT_CHAIN));

    // From inside the namespace: cluster IP → host portal → proxy socket → endpoint.
    let get = |target: &'static str| {
        let sockets = sockets.clone();
        async move {
            let fetch = async {
                let mut s = sockets.connect(target.parse().unwrap()).await?;
                let mut out = String::new();
                use tokio::io::AsyncReadExt;
                s.read_to_string(&mut out).await?;
                Ok::<String, io::Error>(out)
            };
            tokio::time::timeout(Duration::from_secs(3), fetch)
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "timed out"))?
        }
    };
    let mut answers = Vec::new();
    for _ in 0..6 {
        answers.push(get("10.96.5.10:80").await.unwrap());
    }
    assert_eq!(
        answers[..3].iter().collect::<HashSet<_>>().len(),
        3,
        "{answers:?}"
    );
    assert_eq!(answers[..3], answers[3..], "{answers:?}");
    // The NodePort on the node's address, from the node.
    let np = get("10.77.0.1:31080").await.unwrap();
    assert!(np.starts_with('b'), "{np}");
    // No endpoints: reset at once.
    let started = Instant::now();
    let err = get("10.96.5.11:80").await.unwrap_err();
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
        ),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));

    // UDP through the portal: the reply comes back from the cluster IP.
    let client = sockets
        .udp_connect("10.96.5.12:53".parse().unwrap())
        .await
        .unwrap();
    for q in ["q1", "q2"] {
        client.send(q.as_bytes()).await.unwrap();
        let mut buf = [0u8; 1500];
        let n = tokio::time::timeout(Duration::from_secs(3), client.recv(&mut buf))
            .await
            .expect("a UDP reply through the portal")
            .unwrap();
        assert_eq!(&buf[..n], format!("echo:{q}").as_bytes());
    }

    // A sync with no change leaves the rules alone (same text); cleanup removes everything.
    let mut proxier = tokio::task::spawn_blocking(move || {
        proxier.sync(&snap).unwrap();
        proxier.cleanup().unwrap();
        proxier
    })
    .await
    .unwrap();
    let saved = ns.exec(&["iptables-save"]).unwrap();
    assert!(!saved.contains("KUBE-"), "left behind:\n{saved}");
    let after = tokio::time::timeout(Duration::from_millis(500), get("10.96.5.10:80")).await;
    assert!(
        !matches!(after, Ok(Ok(_))),
        "the portal is closed: {after:?}"
    );
    // Cleaning up twice is fine.
    tokio::task::spawn_blocking(move || proxier.cleanup().unwrap())
        .await
        .unwrap();
}
