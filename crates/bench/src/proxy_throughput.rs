//! `capstan bench proxy-throughput`: what the userspace proxy mode costs a stream of bytes, as a
//! share of a direct connection. In a private network namespace (it needs root), a backend on
//! an address of the namespace sends `--bytes` per connection; the client reads them once
//! straight from the backend, once through the Service's cluster IP (the userspace proxy's portal
//! rule redirects it to the proxy socket, which copies to the backend), alternating, `--runs`
//! times each, and the best of each is compared.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use capstan_proxy::netns::NetNs;
use capstan_proxy::userspace::UserspaceProxier;
use capstan_proxy::{
    Endpoint, NodeInfo, Protocol, Proxier, ServicePort, ServicePortName, Snapshot,
};

#[derive(clap::Args, Debug, Clone)]
pub struct ThroughputArgs {
    /// Bytes per connection (suffixes K, M, G: binary).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub bytes: u64,
    /// Connections timed per path.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n.parse().map_err(|_| format!("invalid size {s:?}"))?;
    let mult = match unit {
        "" => 1,
        "K" | "Ki" => 1 << 10,
        "M" | "Mi" => 1 << 20,
        "G" | "Gi" => 1 << 30,
        _ => return Err(format!("invalid size {s:?}: use e.g. 512M or 1G")),
    };
    Ok(n * mult)
}

const BACKEND: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const NODE: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const CLUSTER_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 77, 1);

pub async fn run(args: ThroughputArgs) -> Result<()> {
    let t = measure(&args).await?;
    println!(
        "userspace proxy throughput: direct {:.2} GiB/s, through the proxy {:.2} GiB/s = {:.0}% \
         ({} per connection, best of {})",
        gib(t.direct),
        gib(t.proxied),
        100.0 * t.proxied / t.direct,
        human(args.bytes),
        args.runs
    );
    Ok(())
}

/// Bytes per second, best of the runs.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    pub direct: f64,
    pub proxied: f64,
}

fn gib(bps: f64) -> f64 {
    bps / f64::from(1u32 << 30)
}

/// Run the measurement; see the module documentation.
pub async fn measure(args: &ThroughputArgs) -> Result<Throughput> {
    let args = args.clone();
    let ns = NetNs::new("capbench").context("the benchmark needs root")?;
    ns.add_addresses(&[&format!("{NODE}/32"), &format!("{BACKEND}/32")])?;
    // A route to the service range, so that a connection to the cluster IP leaves through the
    // OUTPUT chain where the portal redirects it.
    ns.exec(&["ip", "route", "add", "10.96.0.0/12", "dev", "lo"])?;
    let bytes = args.bytes;
    let listener = ns
        .run(|| TcpListener::bind((BACKEND, 9000)))?
        .context("binding the backend")?;
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            std::thread::spawn(move || {
                let chunk = vec![0u8; 256 << 10];
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if conn.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n as u64;
                }
            });
        }
    });

    let node = NodeInfo {
        name: "bench".into(),
        ips: vec![IpAddr::V4(NODE)],
        cluster_cidr: Some("10.244.0.0/16".into()),
    };
    let name = ServicePortName {
        namespace: "default".into(),
        name: "stream".into(),
        port: String::new(),
        protocol: Protocol::Tcp,
    };
    let mut snapshot = Snapshot::default();
    snapshot.services.insert(
        name.clone(),
        Arc::new(ServicePort {
            name: name.clone(),
            cluster_ips: vec![IpAddr::V4(CLUSTER_IP)],
            port: 80,
            node_port: None,
            external_ips: vec![],
            load_balancer_ips: vec![],
            load_balancer_source_ranges: vec![],
            session_affinity_seconds: None,
            external_policy_local: false,
            internal_policy_local: false,
            health_check_node_port: None,
        }),
    );
    snapshot.endpoints.insert(
        name.clone(),
        Arc::new(vec![Endpoint {
            ip: IpAddr::V4(BACKEND),
            port: 9000,
            ready: true,
            serving: true,
            terminating: false,
            node_name: Some("bench".into()),
        }]),
    );
    let mut proxier =
        UserspaceProxier::new(node, tokio::runtime::Handle::current()).in_netns(ns.name())?;
    let mut proxier = tokio::task::spawn_blocking(move || -> Result<UserspaceProxier> {
        proxier.sync(&snapshot)?;
        Ok(proxier)
    })
    .await??;

    let direct = SocketAddr::from((BACKEND, 9000));
    let proxied = SocketAddr::from((CLUSTER_IP, 80));
    let (best_direct, best_proxied) = ns.run(move || -> Result<(f64, f64)> {
        let mut best = (0f64, 0f64);
        for _ in 0..args.runs {
            best.0 = best.0.max(read_all(direct, bytes)?);
            best.1 = best.1.max(read_all(proxied, bytes)?);
        }
        Ok(best)
    })??;
    tokio::task::spawn_blocking(move || proxier.cleanup()).await??;
    drop(ns);
    Ok(Throughput {
        direct: best_direct,
        proxied: best_proxied,
    })
}

/// Read `bytes` from a new connection to `addr`: bytes per second.
fn read_all(addr: SocketAddr, bytes: u64) -> Result<f64> {
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connecting to {addr}"))?;
    let start = Instant::now();
    let mut buf = vec![0u8; 256 << 10];
    let mut got = 0u64;
    while got < bytes {
        let n = conn
            .read(&mut buf)
            .with_context(|| format!("reading from {addr}"))?;
        if n == 0 {
            anyhow::bail!("{addr} closed after {got} of {bytes} bytes");
        }
        got += n as u64;
    }
    Ok(got as f64 / start.elapsed().as_secs_f64())
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bytes_flow_through_the_userspace_proxy() {
        let t = measure(&ThroughputArgs {
            bytes: 16 << 20,
            runs: 1,
        })
        .await
        .unwrap();
        assert!(t.direct > 0.0 && t.proxied > 0.0, "{t:?}");
        // A copy through user space cannot beat the kernel's loopback.
        assert!(t.proxied < t.direct * 1.5, "{t:?}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert!(parse_size("1T").is_err());
    }
}
