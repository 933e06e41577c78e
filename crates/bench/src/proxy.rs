//! `capstan bench proxy`: how long a proxy mode (iptables, nftables) takes to program many
//! Services into the kernel, and to apply one Service's endpoint change afterwards.
//!
//! Everything happens in a private network namespace created for the run (and deleted after
//! it), so the host's rules are never touched; it needs root. Services are ClusterIP, one TCP
//! port each, with `--endpoints` ready endpoints on other nodes; the first sync is a full
//! one, then `--syncs` incremental syncs each follow a change of one Service's endpoints.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use capstan_proxy::iptables::IptablesProxier;
use capstan_proxy::netns::NetNs;
use capstan_proxy::nftables::NftablesProxier;
use capstan_proxy::{
    Endpoint, NodeInfo, Protocol, Proxier, ServicePort, ServicePortName, Snapshot,
};

use crate::latency::Latencies;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Iptables,
    Nftables,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Iptables => "iptables",
            Mode::Nftables => "nftables",
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct ProxyArgs {
    #[arg(long, value_enum, default_value = "iptables")]
    pub mode: Mode,
    /// Services (one port each).
    #[arg(long, default_value_t = 10_000)]
    pub services: usize,
    /// Endpoints per Service.
    #[arg(long, default_value_t = 2)]
    pub endpoints: usize,
    /// Incremental syncs to time, each after one Service's endpoints changed.
    #[arg(long, default_value_t = 20)]
    pub syncs: usize,
}

/// What `capstan bench proxy` measured.
#[derive(Clone, Debug)]
pub struct ProxyReport {
    pub mode: Mode,
    pub services: usize,
    pub endpoints: usize,
    /// The first (full) sync: every Service programmed.
    pub first_sync: Duration,
    /// CPU time (user + system) of the first sync, this process and the commands it ran
    /// (iptables-restore, nft): what it costs on a machine that is not shared.
    pub first_sync_cpu: Duration,
    /// A sync right after it, with nothing changed.
    pub unchanged_sync: Duration,
    /// Syncs after one Service's endpoints changed: how many, and their latencies.
    pub incremental_syncs: u64,
    pub incremental_p50_ms: f64,
    pub incremental_p99_ms: f64,
    pub incremental_max_ms: f64,
    /// Removing everything.
    pub cleanup: Duration,
    /// The size of the programmed ruleset: `-A` rules in iptables-save, or lines of
    /// `nft list ruleset`.
    pub ruleset_size: usize,
}

pub async fn run(args: ProxyArgs) -> Result<()> {
    let r = tokio::task::spawn_blocking(move || measure(&args))
        .await
        .context("benchmark thread")??;
    let what = match r.mode {
        Mode::Iptables => "iptables rules",
        Mode::Nftables => "lines of nft ruleset",
    };
    println!(
        "proxy {}: {} services x {} endpoints ({} {what})",
        r.mode.name(),
        r.services,
        r.endpoints,
        r.ruleset_size
    );
    println!(
        "  first sync (all services):     {:>9.3} s ({:.3} s of CPU)",
        r.first_sync.as_secs_f64(),
        r.first_sync_cpu.as_secs_f64()
    );
    println!(
        "  sync with nothing changed:     {:>9.3} s",
        r.unchanged_sync.as_secs_f64()
    );
    println!(
        "  sync after one service's endpoints changed: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} syncs",
        r.incremental_p50_ms, r.incremental_p99_ms, r.incremental_max_ms, r.incremental_syncs
    );
    println!(
        "  cleanup:                       {:>9.3} s",
        r.cleanup.as_secs_f64()
    );
    Ok(())
}

/// Run the benchmark (blocking).
pub fn measure(args: &ProxyArgs) -> Result<ProxyReport> {
    if args.services == 0 || args.services > 1_000_000 {
        bail!("--services must be between 1 and 1000000");
    }
    if args.endpoints > 64 || args.services.saturating_mul(args.endpoints) > 4_000_000 {
        bail!("--endpoints must be at most 64, and services x endpoints at most 4000000");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("capstan bench proxy needs root: it creates a network namespace");
    }
    let ns = NetNs::new("capstan-bench-proxy")?;
    let node = NodeInfo {
        name: "bench-node".into(),
        ips: vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))],
        cluster_cidr: Some("10.128.0.0/10".into()),
    };
    let mut proxier: Box<dyn Proxier> = match args.mode {
        Mode::Iptables => Box::new(IptablesProxier::new(node)?.in_netns(ns.name())),
        Mode::Nftables => Box::new(NftablesProxier::new(node)?.in_netns(ns.name())),
    };

    let mut snapshot = build_snapshot(args.services, args.endpoints);
    let cpu = cpu_time();
    let start = Instant::now();
    proxier.sync(&snapshot).context("first sync")?;
    let first_sync = start.elapsed();
    let first_sync_cpu = cpu_time().saturating_sub(cpu);

    let start = Instant::now();
    proxier
        .sync(&snapshot)
        .context("sync with nothing changed")?;
    let unchanged_sync = start.elapsed();

    let mut latencies = Latencies::with_capacity(args.syncs);
    let names: Vec<ServicePortName> = snapshot.services.keys().cloned().collect();
    for k in 0..args.syncs {
        // A different Service each time, spread over the set.
        let name = &names[k.wrapping_mul(7919) % names.len()];
        let mut eps: Vec<Endpoint> = snapshot
            .endpoints
            .get(name)
            .map(|e| e.as_ref().clone())
            .unwrap_or_default();
        let fresh = endpoint(Ipv4Addr::from(0x0ac0_0000 + k as u32 + 1), "other-node");
        match eps.first_mut() {
            Some(first) => *first = fresh,
            None => eps.push(fresh),
        }
        snapshot.endpoints.insert(name.clone(), Arc::new(eps));
        let start = Instant::now();
        proxier
            .sync(&snapshot)
            .with_context(|| format!("incremental sync {k}"))?;
        latencies.record(start.elapsed());
    }

    let ruleset_size = match args.mode {
        Mode::Iptables => ns
            .exec(&["iptables-save"])?
            .lines()
            .filter(|l| l.starts_with("-A "))
            .count(),
        Mode::Nftables => ns.exec(&["nft", "list", "ruleset"])?.lines().count(),
    };

    let incremental = latencies.summary();
    let start = Instant::now();
    proxier.cleanup().context("cleanup")?;
    let cleanup = start.elapsed();

    Ok(ProxyReport {
        mode: args.mode,
        services: args.services,
        endpoints: args.endpoints,
        first_sync,
        first_sync_cpu,
        unchanged_sync,
        incremental_syncs: incremental.count,
        incremental_p50_ms: incremental.p50_ms,
        incremental_p99_ms: incremental.p99_ms,
        incremental_max_ms: incremental.max_ms,
        cleanup,
        ruleset_size,
    })
}

/// User + system CPU time of this process and of its children that have been waited for.
fn cpu_time() -> Duration {
    let mut total = Duration::ZERO;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: getrusage fills the struct it is given; zeroed is a valid rusage.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid `who` and a pointer to a live rusage.
        if unsafe { libc::getrusage(who, &mut usage) } == 0 {
            for tv in [usage.ru_utime, usage.ru_stime] {
                total += Duration::from_secs(tv.tv_sec.max(0) as u64)
                    + Duration::from_micros(tv.tv_usec.max(0) as u64);
            }
        }
    }
    total
}

fn endpoint(ip: Ipv4Addr, node: &str) -> Endpoint {
    Endpoint {
        ip: IpAddr::V4(ip),
        port: 8080,
        ready: true,
        serving: true,
        terminating: false,
        node_name: Some(node.into()),
    }
}

/// `services` ClusterIP Services in 10.96.0.0/12 with `endpoints` endpoints each in
/// 10.128.0.0/10 (the cluster CIDR).
fn build_snapshot(services: usize, endpoints: usize) -> Snapshot {
    let mut snapshot = Snapshot::default();
    for i in 0..services {
        let name = ServicePortName {
            namespace: format!("bench-{}", i / 1000),
            name: format!("svc-{i}"),
            port: "http".into(),
            protocol: Protocol::Tcp,
        };
        let cluster_ip = Ipv4Addr::from(0x0a60_0000 + i as u32 + 1);
        let svc = ServicePort {
            name: name.clone(),
            cluster_ips: vec![IpAddr::V4(cluster_ip)],
            port: 80,
            node_port: None,
            external_ips: vec![],
            load_balancer_ips: vec![],
            load_balancer_source_ranges: vec![],
            session_affinity_seconds: None,
            external_policy_local: false,
            internal_policy_local: false,
            health_check_node_port: None,
        };
        let eps: Vec<Endpoint> = (0..endpoints)
            .map(|j| {
                let ip = Ipv4Addr::from(0x0a80_0000 + (i * endpoints + j) as u32 + 1);
                endpoint(
                    ip,
                    if j % 2 == 0 {
                        "bench-node"
                    } else {
                        "other-node"
                    },
                )
            })
            .collect();
        if !eps.is_empty() {
            snapshot.endpoints.insert(name.clone(), Arc::new(eps));
        }
        snapshot.services.insert(name, Arc::new(svc));
    }
    snapshot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iptables_bench_programs_and_removes_services() {
        let r = measure(&ProxyArgs {
            mode: Mode::Iptables,
            services: 50,
            endpoints: 2,
            syncs: 3,
        })
        .unwrap();
        assert_eq!(r.services, 50);
        assert_eq!(r.incremental_syncs, 3);
        // 50 x (dispatch + masquerade + 2 picks + 2 x 2 endpoint rules) and the fixed rules.
        assert!(r.ruleset_size >= 50 * 8, "{} rules", r.ruleset_size);
        assert!(r.first_sync > Duration::ZERO);
    }

    #[test]
    fn bad_sizes_are_refused() {
        let args = |services, endpoints| ProxyArgs {
            mode: Mode::Iptables,
            services,
            endpoints,
            syncs: 1,
        };
        assert!(measure(&args(0, 2)).is_err());
        assert!(measure(&args(10, 65)).is_err());
    }

    #[test]
    fn snapshot_addresses_are_distinct() {
        let s = build_snapshot(300, 3);
        assert_eq!(s.services.len(), 300);
        let mut ips = std::collections::HashSet::new();
        for eps in s.endpoints.values() {
            for e in eps.iter() {
                assert!(ips.insert(e.ip));
            }
        }
        assert_eq!(ips.len(), 900);
    }
}
