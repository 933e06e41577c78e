//! `capstan bench dns`: queries per second and latency of DNS servers over UDP.
//!
//! Each of `--concurrency` clients has its own UDP socket and keeps one query in flight:
//! it sends, waits for the answer with that id (or `--timeout`), records the latency and
//! sends the next, cycling through the `--name`s. Servers given with several `--server`s are
//! measured one after another, with the same load, so that capstan dns and a reference
//! (CoreDNS, dnsmasq) can be compared in one run.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use tokio::net::UdpSocket;

use capstan_dns::client;
use capstan_dns::wire::{rcode, rtype, Edns, Message, Name, Question, CLASS_IN};

use crate::duration::parse_duration;

/// A server to measure: `ADDR` or `LABEL=ADDR`.
#[derive(Clone, Debug)]
pub struct Target {
    pub label: String,
    pub addr: SocketAddr,
}

fn parse_target(text: &str) -> Result<Target, String> {
    let (label, addr) = match text.split_once('=') {
        Some((l, a)) => (l.to_string(), a),
        None => (text.to_string(), text),
    };
    let addr = match addr.parse::<IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, 53),
        Err(_) => addr
            .parse::<SocketAddr>()
            .map_err(|_| format!("{addr:?} is not IP or IP:PORT"))?,
    };
    Ok(Target { label, addr })
}

fn parse_qtype(text: &str) -> Result<u16, String> {
    Ok(match text.to_ascii_uppercase().as_str() {
        "A" => rtype::A,
        "AAAA" => rtype::AAAA,
        "CNAME" => rtype::CNAME,
        "MX" => rtype::MX,
        "NS" => rtype::NS,
        "PTR" => rtype::PTR,
        "SOA" => rtype::SOA,
        "SRV" => rtype::SRV,
        "TXT" => rtype::TXT,
        other => other
            .strip_prefix("TYPE")
            .unwrap_or(other)
            .parse::<u16>()
            .map_err(|_| format!("unknown query type {text:?}"))?,
    })
}

#[derive(clap::Args, Debug, Clone)]
pub struct DnsArgs {
    /// A DNS server to measure: ADDR (port 53 if left out) or LABEL=ADDR. Repeatable: the
    /// servers are measured one after another.
    #[arg(long = "server", required = true, value_name = "[LABEL=]IP[:PORT]", value_parser = parse_target)]
    pub servers: Vec<Target>,
    /// A name to ask for (repeatable: asked in turn).
    #[arg(long = "name", required = true, value_name = "NAME")]
    pub names: Vec<String>,
    /// The query type.
    #[arg(long, default_value = "A", value_parser = parse_qtype)]
    pub qtype: u16,
    /// How long to measure each server.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Queries in flight at once, each client on its own socket.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// How long to wait for an answer before counting the query as lost.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Print one JSON object per server instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The measurement of one server.
#[derive(Clone, Debug, Serialize)]
pub struct DnsMeasurement {
    pub label: String,
    pub server: String,
    pub concurrency: usize,
    pub seconds: f64,
    /// Queries answered.
    pub answered: u64,
    pub queries_per_s: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Answers with NOERROR or NXDOMAIN.
    pub ok: u64,
    /// Answers with another rcode (SERVFAIL, REFUSED, ...) and send/receive failures.
    pub errors: u64,
    /// Queries without an answer within the timeout.
    pub timeouts: u64,
}

pub async fn run(args: DnsArgs) -> anyhow::Result<()> {
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    if !args.json {
        println!(
            "{:<12} {:<22} {:>10} {:>12} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "server",
            "address",
            "answered",
            "queries/s",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "max ms",
            "errors",
            "timeouts"
        );
    }
    for target in &args.servers {
        let m = measure(target, &args).await?;
        if args.json {
            println!("{}", serde_json::to_string(&m)?);
        } else {
            println!(
                "{:<12} {:<22} {:>10} {:>12.0} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8} {:>8}",
                m.label,
                m.server,
                m.answered,
                m.queries_per_s,
                m.p50_ms,
                m.p90_ms,
                m.p99_ms,
                m.max_ms,
                m.errors,
                m.timeouts
            );
        }
    }
    Ok(())
}

/// Check that `target` answers each name, then load it for `args.duration`.
pub async fn measure(target: &Target, args: &DnsArgs) -> anyhow::Result<DnsMeasurement> {
    let mut queries = Vec::new();
    for name in &args.names {
        let q = Message {
            id: 0,
            recursion_desired: true,
            questions: vec![Question {
                name: Name::parse(name)
                    .map_err(|e| anyhow::anyhow!("invalid name {name:?}: {e}"))?,
                qtype: args.qtype,
                qclass: CLASS_IN,
            }],
            edns: Some(Edns::new(1232)),
            ..Message::default()
        };
        let probe = client::exchange_udp(target.addr, &q, args.timeout.max(Duration::from_secs(2)))
            .await
            .with_context(|| {
                format!("{} ({}) does not answer {name}", target.label, target.addr)
            })?;
        if probe.rcode != rcode::NOERROR && probe.rcode != rcode::NXDOMAIN {
            bail!(
                "{} ({}) answers {name} with rcode {}",
                target.label,
                target.addr,
                probe.rcode
            );
        }
        queries.push(q.encode(u16::MAX as usize));
    }
    let queries = Arc::new(queries);
    // A short warm-up, then the measured run.
    let warm = (args.duration / 20).min(Duration::from_secs(1));
    load(target.addr, &queries, args.concurrency, warm, args.timeout).await?;
    let started = Instant::now();
    let results = load(
        target.addr,
        &queries,
        args.concurrency,
        args.duration,
        args.timeout,
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    let mut micros = Vec::new();
    let (mut ok, mut errors, mut timeouts) = (0, 0, 0);
    for r in results {
        micros.extend(r.micros);
        ok += r.ok;
        errors += r.errors;
        timeouts += r.timeouts;
    }
    micros.sort_unstable();
    let pct = |p: f64| -> f64 {
        if micros.is_empty() {
            return 0.0;
        }
        let rank = (p * micros.len() as f64).ceil() as usize;
        micros[rank.clamp(1, micros.len()) - 1] as f64 / 1000.0
    };
    Ok(DnsMeasurement {
        label: target.label.clone(),
        server: target.addr.to_string(),
        concurrency: args.concurrency,
        seconds: (seconds * 1000.0).round() / 1000.0,
        answered: micros.len() as u64,
        queries_per_s: (micros.len() as f64 / seconds.max(1e-9)).round(),
        p50_ms: pct(0.50),
        p90_ms: pct(0.90),
        p99_ms: pct(0.99),
        max_ms: micros.last().copied().unwrap_or(0) as f64 / 1000.0,
        ok,
        errors,
        timeouts,
    })
}

#[derive(Default)]
struct ClientResult {
    micros: Vec<u32>,
    ok: u64,
    errors: u64,
    timeouts: u64,
}

async fn load(
    server: SocketAddr,
    queries: &Arc<Vec<Vec<u8>>>,
    concurrency: usize,
    duration: Duration,
    timeout: Duration,
) -> anyhow::Result<Vec<ClientResult>> {
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::with_capacity(concurrency);
    for i in 0..concurrency {
        let local: SocketAddr = match server.ip() {
            IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let sock = UdpSocket::bind(local)
            .await
            .context("binding a UDP socket")?;
        sock.connect(server)
            .await
            .with_context(|| format!("connecting to {server}"))?;
        let queries = queries.clone();
        tasks.push(tokio::spawn(client_loop(
            sock, queries, i, deadline, timeout,
        )));
    }
    let mut out = Vec::with_capacity(concurrency);
    for t in tasks {
        out.push(t.await.context("a benchmark client failed")?);
    }
    Ok(out)
}

async fn client_loop(
    sock: UdpSocket,
    queries: Arc<Vec<Vec<u8>>>,
    first: usize,
    deadline: Instant,
    timeout: Duration,
) -> ClientResult {
    let mut r = ClientResult {
        micros: Vec::with_capacity(1 << 16),
        ..ClientResult::default()
    };
    let mut id: u16 = rand_id(first);
    let mut out = Vec::with_capacity(512);
    let mut buf = vec![0u8; 65_535];
    let mut i = first;
    while Instant::now() < deadline {
        id = id.wrapping_add(1);
        out.clear();
        out.extend_from_slice(&queries[i % queries.len()]);
        i += 1;
        out[0..2].copy_from_slice(&id.to_be_bytes());
        let sent = Instant::now();
        if sock.send(&out).await.is_err() {
            r.errors += 1;
            continue;
        }
        let until = sent + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, sock.recv(&mut buf)).await {
                Ok(Ok(n)) => {
                    if n < 12 || buf[0..2] != id.to_be_bytes() {
                        // A late answer to an earlier query, or junk.
                        continue;
                    }
                    let micros = sent.elapsed().as_micros().min(u32::MAX as u128) as u32;
                    r.micros.push(micros);
                    match (buf[3] & 0x0F) as u16 {
                        rcode::NOERROR | rcode::NXDOMAIN => r.ok += 1,
                        _ => r.errors += 1,
                    }
                    break;
                }
                Ok(Err(_)) => {
                    r.errors += 1;
                    break;
                }
                Err(_) => {
                    r.timeouts += 1;
                    break;
                }
            }
        }
    }
    r
}

fn rand_id(seed: usize) -> u16 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t as usize)
        .wrapping_mul(2_654_435_761)
        .wrapping_add(seed * 7919) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_dns::zone::{PortSpec, ServiceKind, ServiceSpec};
    use capstan_dns::{Options, PodMode, Zone, ZoneConfig};

    #[test]
    fn parses_targets_and_types() {
        let t = parse_target("coredns=10.96.0.10").unwrap();
        assert_eq!((t.label.as_str(), t.addr.port()), ("coredns", 53));
        let t = parse_target("127.0.0.1:1053").unwrap();
        assert_eq!(t.label, "127.0.0.1:1053");
        assert!(parse_target("x=nope").is_err());
        assert_eq!(parse_qtype("srv"), Ok(rtype::SRV));
        assert_eq!(parse_qtype("TYPE65"), Ok(65));
        assert!(parse_qtype("bogus").is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn measures_a_server() {
        let zone = Zone::new(ZoneConfig {
            domain: Name::parse("cluster.local").unwrap(),
            ttl: 30,
            pods: PodMode::Insecure,
            local_ips: vec![],
        });
        zone.set_namespace("default", true);
        zone.set_service(
            "default",
            "kubernetes",
            Some(&ServiceSpec {
                kind: ServiceKind::ClusterIp(vec!["10.96.0.1".parse().unwrap()]),
                ports: vec![PortSpec {
                    name: "https".into(),
                    protocol: "TCP".into(),
                    port: 443,
                }],
            }),
        );
        zone.set_ready();
        let dns = capstan_dns::serve(
            Options {
                listen: vec!["127.0.0.1:0".parse().unwrap()],
                workers: 1,
                ..Options::default()
            },
            Some(Arc::new(zone)),
        )
        .await
        .unwrap();
        let args = DnsArgs {
            servers: vec![],
            names: vec![
                "kubernetes.default.svc.cluster.local".into(),
                "nope.default.svc.cluster.local".into(),
            ],
            qtype: rtype::A,
            duration: Duration::from_millis(500),
            concurrency: 4,
            timeout: Duration::from_secs(1),
            json: false,
        };
        let target = Target {
            label: "capstan".into(),
            addr: dns.addrs()[0],
        };
        let m = measure(&target, &args).await.unwrap();
        assert!(m.answered > 100, "{m:?}");
        assert_eq!(m.ok, m.answered);
        assert_eq!((m.errors, m.timeouts), (0, 0));
        assert!(m.p50_ms <= m.p90_ms && m.p90_ms <= m.p99_ms && m.p99_ms <= m.max_ms);
        // A server that does not answer is an error up front, not a silent zero.
        let quiet = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let target = Target {
            label: "quiet".into(),
            addr: quiet.local_addr().unwrap(),
        };
        let args = DnsArgs {
            timeout: Duration::from_millis(200),
            ..args
        };
        assert!(measure(&target, &args).await.is_err());
    }
}
