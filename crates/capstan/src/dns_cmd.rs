//! `capstan dns`: the cluster DNS add-on (CoreDNS's job in Kubernetes), against any API
//! server.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::{anyhow, Context};

#[derive(clap::Args, Debug)]
pub struct DnsArgs {
    /// The kubeconfig to reach the API server with (default: the in-cluster service account,
    /// when running in a pod).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// An address to answer on, over UDP and TCP (repeatable).
    #[arg(long, value_name = "IP:PORT", default_value = "0.0.0.0:53")]
    pub listen: Vec<SocketAddr>,

    /// The cluster's DNS domain.
    #[arg(long, value_name = "DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,

    /// A resolver to forward other names to, IP or IP:PORT (repeatable; default: the name
    /// servers of /etc/resolv.conf, except this server itself).
    #[arg(long, value_name = "IP[:PORT]", value_parser = parse_upstream)]
    pub upstream: Vec<SocketAddr>,

    /// TTL of the cluster's records, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub ttl: u32,

    /// Forwarded answers to keep at most (0: no cache).
    #[arg(long, value_name = "ENTRIES", default_value_t = 9984)]
    pub cache_size: usize,

    /// Where to serve HTTP /health and /ready (200 once the cluster's objects are in).
    #[arg(long, value_name = "IP:PORT")]
    pub ready_listen: Option<SocketAddr>,

    /// UDP sockets per address (default: one per CPU).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub workers: usize,
}

/// `IP` (port 53) or `IP:PORT`, IPv6 as `[IP]:PORT`.
fn parse_upstream(text: &str) -> Result<SocketAddr, String> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    text.parse::<SocketAddr>()
        .map_err(|_| format!("{text:?} is not IP or IP:PORT"))
}

pub async fn run(args: DnsArgs) -> anyhow::Result<()> {
    let config = match &args.kubeconfig {
        Some(path) => crate::scheduler_cmd::config(path).await?,
        None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => kube::Config::incluster()
            .map_err(|e| anyhow!("cannot use the in-cluster config: {e}"))?,
        None => anyhow::bail!("no kubeconfig: pass --kubeconfig PATH (or run in a pod)"),
    };
    let client = capstan_runtime::client::client(config).context("building the API client")?;
    let upstreams = if args.upstream.is_empty() {
        let found = capstan_dns::default_upstreams(&args.listen)?;
        if found.is_empty() {
            tracing::warn!(
                "/etc/resolv.conf names no usable upstream name server: names outside the cluster get SERVFAIL"
            );
        }
        found
    } else {
        args.upstream.clone()
    };
    let opts = capstan_dns::Options {
        listen: args.listen.clone(),
        domain: args.cluster_domain.trim_end_matches('.').to_string(),
        upstreams,
        ttl: args.ttl,
        cache_size: args.cache_size,
        ready_listen: args.ready_listen,
        workers: args.workers,
        ..capstan_dns::Options::default()
    };
    let running = capstan_dns::start(opts, client).await?;
    wait_for_signal().await?;
    running.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
