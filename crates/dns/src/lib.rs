//! `capstan dns`: the cluster DNS add-on (CoreDNS's job in Kubernetes).
//!
//! Names in the cluster domain are answered from Services, EndpointSlices and Namespaces,
//! watched from the API server, per Kubernetes' DNS specification and as CoreDNS's
//! `kubernetes` plugin does with kubeadm's Corefile (see [`zone`]); everything else is
//! forwarded to upstream resolvers (by default /etc/resolv.conf's) through a cache.
//!
//! ```no_run
//! # async fn f(client: kube::Client) -> anyhow::Result<()> {
//! let dns = capstan_dns::start(capstan_dns::Options::default(), client).await?;
//! dns.wait_ready().await;
//! // ... serves until dropped, or:
//! dns.shutdown().await;
//! # Ok(()) }
//! ```

pub mod cache;
pub mod client;
pub mod forward;
mod netif;
mod server;
pub mod source;
pub mod wire;
pub mod zone;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

pub use zone::{PodMode, Zone, ZoneConfig};

/// How a cluster DNS server runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Addresses to answer on, over UDP and TCP (port 0: any free port, the same for both).
    pub listen: Vec<SocketAddr>,
    /// The cluster domain.
    pub domain: String,
    /// Where to forward names outside the cluster domain; empty: none (SERVFAIL). See
    /// [`default_upstreams`].
    pub upstreams: Vec<SocketAddr>,
    /// TTL of the cluster's records.
    pub ttl: u32,
    /// Forwarded answers kept at most (0: no cache).
    pub cache_size: usize,
    /// The longest a forwarded answer is cached, in seconds.
    pub cache_max_ttl: u32,
    pub pods: PodMode,
    /// UDP sockets per address (0: one per CPU).
    pub workers: usize,
    /// Questions waiting for upstreams at most; more are refused.
    pub max_concurrent_forwards: usize,
    /// Where to serve HTTP `/health` and `/ready` (200 once the cluster's objects are in).
    pub ready_listen: Option<SocketAddr>,
}

impl Default for Options {
    /// kubeadm's CoreDNS: port 53, cluster.local, `ttl 30`, `cache 30`, `pods insecure`,
    /// `max_concurrent 1000`.
    fn default() -> Options {
        Options {
            listen: vec![SocketAddr::from(([0, 0, 0, 0], 53))],
            domain: "cluster.local".into(),
            upstreams: Vec::new(),
            ttl: 30,
            cache_size: 9984,
            cache_max_ttl: 30,
            pods: PodMode::Insecure,
            workers: 0,
            max_concurrent_forwards: 1000,
            ready_listen: None,
        }
    }
}

/// The upstreams by default: /etc/resolv.conf's name servers, minus this server itself.
pub fn default_upstreams(listen: &[SocketAddr]) -> anyhow::Result<Vec<SocketAddr>> {
    let text = std::fs::read_to_string("/etc/resolv.conf")
        .context("reading /etc/resolv.conf for upstream name servers")?;
    Ok(forward::upstreams_from_resolv_conf(
        &text,
        listen,
        &netif::local_addresses(),
    ))
}

/// A running DNS server. It serves until dropped or shut down.
pub struct Running {
    addrs: Vec<SocketAddr>,
    ready_addr: Option<SocketAddr>,
    zone: Arc<Zone>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// The addresses it answers on (UDP and TCP), with actual ports.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The address of the HTTP health and readiness endpoint, if any.
    pub fn ready_addr(&self) -> Option<SocketAddr> {
        self.ready_addr
    }

    pub fn zone(&self) -> &Arc<Zone> {
        &self.zone
    }

    /// Whether the cluster's objects are in (before, unknown cluster names get SERVFAIL).
    pub fn is_ready(&self) -> bool {
        self.zone.is_ready()
    }

    pub async fn wait_ready(&self) {
        self.zone.wait_ready().await;
    }

    /// Stop serving and watching.
    pub async fn shutdown(mut self) {
        let tasks = std::mem::take(&mut self.tasks);
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            let _ = t.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Bind the listen addresses (failing at once if one is taken), then serve the cluster zone
/// fed from `client`'s API server, and forward the rest.
pub async fn start(opts: Options, client: kube::Client) -> anyhow::Result<Running> {
    let mut running = serve(opts, None).await?;
    let watches = source::watch(client, running.zone.clone());
    running.tasks.extend(watches);
    Ok(running)
}

/// Serve a zone fed by the caller (`zone`; a new empty one if None) — for tests and
/// benchmarks without an API server.
pub async fn serve(opts: Options, zone: Option<Arc<Zone>>) -> anyhow::Result<Running> {
    if opts.listen.is_empty() {
        anyhow::bail!("no address to listen on");
    }
    let domain = wire::Name::parse(&opts.domain)
        .map_err(|e| anyhow::anyhow!("invalid cluster domain {:?}: {e}", opts.domain))?;
    if domain.is_root() {
        anyhow::bail!("the cluster domain cannot be the root");
    }
    let workers = match opts.workers {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    };
    let mut bound = Vec::new();
    for addr in &opts.listen {
        bound.push(server::bind(*addr, workers).await?);
    }
    let ready_listener = match opts.ready_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} for /ready"))?,
        ),
        None => None,
    };
    let addrs: Vec<SocketAddr> = bound.iter().map(|b| b.addr).collect();
    let zone = zone.unwrap_or_else(|| {
        Arc::new(Zone::new(ZoneConfig {
            domain,
            ttl: opts.ttl,
            pods: opts.pods,
            local_ips: serving_ips(&addrs),
        }))
    });
    let shared = Arc::new(server::Shared::new(
        zone.clone(),
        cache::Cache::new(opts.cache_size, opts.cache_max_ttl),
        forward::Upstreams::new(opts.upstreams.clone(), opts.max_concurrent_forwards),
    ));
    let mut tasks = Vec::new();
    for b in bound {
        tasks.extend(server::serve(b, shared.clone()));
    }
    let mut ready_addr = None;
    if let Some(listener) = ready_listener {
        ready_addr = listener.local_addr().ok();
        tasks.push(tokio::spawn(serve_ready(listener, zone.clone())));
    }
    tracing::info!(
        listen = ?addrs,
        upstreams = ?opts.upstreams,
        domain = %opts.domain,
        "cluster DNS serving"
    );
    Ok(Running {
        addrs,
        ready_addr,
        zone,
        tasks,
    })
}

/// The addresses clients reach us on, for NS records: the listen addresses, or every
/// interface address for a wildcard one; never loopback.
fn serving_ips(listen: &[SocketAddr]) -> Vec<IpAddr> {
    let mut ips = Vec::new();
    for l in listen {
        let candidates = if l.ip().is_unspecified() {
            netif::local_addresses()
        } else {
            vec![l.ip()]
        };
        for ip in candidates {
            if !ip.is_loopback() && !ips.contains(&ip) {
                ips.push(ip);
            }
        }
    }
    ips
}

/// A minimal HTTP endpoint: `/ready` is 200 once the zone is ready (503 before), `/health`
/// is always 200.
async fn serve_ready(listener: tokio::net::TcpListener, zone: Arc<Zone>) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        let zone = zone.clone();
        tokio::spawn(async move {
            let mut req = Vec::with_capacity(512);
            let mut buf = [0u8; 512];
            let read = async {
                while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
            };
            if tokio::time::timeout(std::time::Duration::from_secs(5), read)
                .await
                .is_err()
            {
                return;
            }
            let line = String::from_utf8_lossy(&req);
            let path = line.split_whitespace().nth(1).unwrap_or("");
            let (status, body) = match path.split('?').next().unwrap_or("") {
                "/health" => ("200 OK", "OK"),
                "/ready" if zone.is_ready() => ("200 OK", "OK"),
                "/ready" => ("503 Service Unavailable", "not synced with the API server"),
                _ => ("404 Not Found", "not found"),
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes()).await;
        });
    }
}
