//! `capstan bench hollow`: many hollow kubelets in one process (Kubernetes' kubemark). Each is
//! the real kubelet — registration, node status every 10 s, Lease renewal, pod workers, the
//! pod lifecycle event generator, volumes, events — over an in-memory runtime that runs
//! nothing ([`capstan_kubelet::fake_runtime`]): bound pods become Running at once with an
//! address from the node's pod CIDR. Unlike `capstan bench nodes`, which imitates a kubelet's
//! API traffic, this is the kubelet's own code, so a control plane sees exactly what real
//! nodes send it.
//!
//! Identity: with `--identity impersonate` (the default) the kubeconfig's user (which must be
//! allowed to impersonate, as cluster-admin is) sends every kubelet's requests as
//! `system:node:NAME` in group `system:nodes` through `Impersonate-*` headers, so the Node
//! authorizer and NodeRestriction judge each kubelet as if it had its own certificate, while
//! `--kubelets-per-connection` kubelets share one HTTP/2 connection. With `--identity cert`
//! each kubelet gets a client certificate signed by `--ca-cert`/`--ca-key` and a connection of
//! its own, as real kubelets have.
//!
//! The process's resident memory is printed once every kubelet is Ready and then every
//! `--report-interval`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine;
use capstan_kubelet::fake_runtime::{self, Hollow};
use capstan_kubelet::{Kubelet, Options};
use futures::StreamExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;

#[derive(clap::Args, Debug, Clone)]
pub struct HollowArgs {
    /// The kubeconfig of the cluster. With --identity impersonate its user must be allowed to
    /// impersonate users and groups (cluster-admin is).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,

    /// How many hollow kubelets to run.
    #[arg(long, default_value_t = 1)]
    pub count: usize,

    /// Node names are PREFIX0, PREFIX1, ...
    #[arg(long, default_value = "hollow-node-")]
    pub prefix: String,

    /// CPUs of each node.
    #[arg(long, default_value_t = 32)]
    pub cpu: u64,

    /// Memory of each node (a quantity).
    #[arg(long, default_value = "256Gi")]
    pub memory: String,

    /// The most pods each node runs (--max-pods).
    #[arg(long, default_value_t = 110)]
    pub pods: u32,

    /// Disk (ephemeral-storage) of each node (a quantity).
    #[arg(long, default_value = "100Gi")]
    pub storage: String,

    /// How the kubelets authenticate: `impersonate` (the kubeconfig's user acting as
    /// system:node:NAME over shared connections) or `cert` (a client certificate and a
    /// connection per kubelet; needs --ca-cert and --ca-key).
    #[arg(long, value_enum, default_value = "impersonate")]
    pub identity: Identity,

    /// The cluster CA certificate (PEM) that signs the kubelets' certificates (--identity cert).
    #[arg(long, value_name = "PATH")]
    pub ca_cert: Option<PathBuf>,

    /// The cluster CA key (PEM) (--identity cert).
    #[arg(long, value_name = "PATH")]
    pub ca_key: Option<PathBuf>,

    /// Kubelets sharing one HTTP/2 connection (--identity impersonate). Each kubelet keeps
    /// two or three watches open, and API servers cap the streams of a connection (capstan:
    /// 200, kube-apiserver: 1000 by default).
    #[arg(long, default_value_t = 40)]
    pub kubelets_per_connection: usize,

    /// How many kubelets start per second.
    #[arg(long, default_value_t = 50.0)]
    pub start_rate: f64,

    /// Where the kubelets keep pod directories and logs (a temporary directory, removed on
    /// exit, by default).
    #[arg(long, value_name = "PATH")]
    pub root_dir: Option<PathBuf>,

    /// How often each kubelet computes node status.
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse_duration)]
    pub node_status_update_frequency: Duration,

    /// The node Lease's duration; it is renewed every quarter of it.
    #[arg(long, default_value_t = 40)]
    pub node_lease_duration_seconds: i32,

    /// DNS servers for pods with dnsPolicy ClusterFirst (comma-separated); the address of the
    /// `kube-system/kube-dns` Service when not given and it exists.
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Vec<std::net::IpAddr>,

    /// Extra node labels, key=value (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub labels: Vec<String>,

    /// Stop this long after every kubelet is Ready (0: run until interrupted).
    #[arg(long, default_value = "0s", value_parser = crate::duration::parse_duration)]
    pub duration: Duration,

    /// Delete the hollow Nodes (and so their Leases) when the bench ends.
    #[arg(long)]
    pub delete_nodes: bool,

    /// How often the resident memory is printed while running.
    #[arg(long, default_value = "30s", value_parser = crate::duration::parse_duration)]
    pub report_interval: Duration,
}

/// How hollow kubelets prove who they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Identity {
    Impersonate,
    Cert,
}

type Hyper = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<HttpConnector>,
    kube::client::Body,
>;

/// One HTTP/2-capable connection pool for `config`'s server.
fn connection(config: &kube::Config) -> Result<Hyper> {
    let tls = config
        .rustls_client_config()
        .context("building the TLS configuration")?;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .build();
    Ok(hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https))
}

/// A client for `config` over `hyper`, with the config's credentials and `Impersonate-*`
/// headers.
fn client_over(hyper: &Hyper, config: &kube::Config) -> Result<kube::Client> {
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(hyper.clone());
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// The identity of node `name`.
fn node_user(name: &str) -> String {
    format!("system:node:{name}")
}

/// Clients for the hollow kubelets, made as they start.
enum Clients {
    Impersonate {
        config: kube::Config,
        per_connection: usize,
        current: Option<(Hyper, usize)>,
        connections: usize,
    },
    Cert {
        config: kube::Config,
        ca: capstan_pki::CaSigner,
    },
}

impl Clients {
    fn new(args: &HollowArgs, config: kube::Config) -> Result<Clients> {
        Ok(match args.identity {
            Identity::Impersonate => Clients::Impersonate {
                config,
                per_connection: args.kubelets_per_connection.max(1),
                current: None,
                connections: 0,
            },
            Identity::Cert => {
                let (Some(cert), Some(key)) = (&args.ca_cert, &args.ca_key) else {
                    bail!("--identity cert needs --ca-cert and --ca-key");
                };
                let ca = capstan_pki::CaSigner::load(cert, key).context("loading the CA")?;
                Clients::Cert { config, ca }
            }
        })
    }

    fn for_node(&mut self, name: &str) -> Result<kube::Client> {
        match self {
            Clients::Impersonate {
                config,
                per_connection,
                current,
                connections,
            } => {
                let hyper = match current {
                    Some((h, used)) if *used < *per_connection => {
                        *used += 1;
                        h.clone()
                    }
                    _ => {
                        let h = connection(config)?;
                        *current = Some((h.clone(), 1));
                        *connections += 1;
                        h
                    }
                };
                let mut c = config.clone();
                c.auth_info.impersonate = Some(node_user(name));
                c.auth_info.impersonate_groups = Some(vec!["system:nodes".into()]);
                client_over(&hyper, &c)
            }
            Clients::Cert { config, ca } => {
                let (key_pem, csr_pem) =
                    capstan_pki::client_csr(&node_user(name), &["system:nodes"])
                        .context("making a key")?;
                let cert_pem = ca
                    .sign_csr(
                        csr_pem.as_bytes(),
                        &["digital signature", "key encipherment", "client auth"],
                        Duration::from_secs(365 * 24 * 3600),
                    )
                    .context("signing the node's certificate")?;
                let b64 = base64::engine::general_purpose::STANDARD;
                let auth: kube::config::AuthInfo = serde_json::from_value(serde_json::json!({
                    "client-certificate-data": b64.encode(cert_pem),
                    "client-key-data": b64.encode(key_pem),
                }))?;
                let mut c = config.clone();
                c.auth_info = auth;
                client_over(&connection(&c)?, &c)
            }
        }
    }

    fn connections(&self, kubelets: usize) -> usize {
        match self {
            Clients::Impersonate { connections, .. } => *connections,
            Clients::Cert { .. } => kubelets,
        }
    }
}

/// A kubelet's Options for hollow node `name`.
fn options(args: &HollowArgs, name: &str, index: usize, root: &std::path::Path) -> Result<Options> {
    if args.cpu == 0 {
        bail!("--cpu must be at least 1");
    }
    let memory = fake_runtime::parse_bytes(&args.memory)
        .with_context(|| format!("--memory {:?} is not a quantity", args.memory))?;
    let storage = fake_runtime::parse_bytes(&args.storage)
        .with_context(|| format!("--storage {:?} is not a quantity", args.storage))?;
    let mut labels = std::collections::BTreeMap::new();
    labels.insert("capstan.dev/hollow".to_string(), "true".to_string());
    for l in &args.labels {
        let (k, v) = l
            .split_once('=')
            .with_context(|| format!("label {l:?}: want key=value"))?;
        labels.insert(k.to_string(), v.to_string());
    }
    let dir = root.join(name);
    let defaults = Options::default();
    Ok(Options {
        node_name: name.to_string(),
        root_dir: dir.join("root"),
        pod_logs_dir: dir.join("logs"),
        max_pods: args.pods,
        node_status_update_frequency: args.node_status_update_frequency,
        node_lease_duration_seconds: args.node_lease_duration_seconds,
        node_labels: labels,
        cluster_dns: args.cluster_dns.clone(),
        hollow: Some(Arc::new(Hollow::new(
            name,
            args.cpu,
            memory,
            storage,
            node_ip(index),
        ))),
        ..defaults
    })
}

/// Node `index`'s InternalIP: the benchmarking range 198.18.0.0/15 in order.
pub fn node_ip(index: usize) -> std::net::IpAddr {
    let base = u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0));
    let n = (index as u32 % ((1 << 17) - 2)) + 1;
    std::net::IpAddr::V4(std::net::Ipv4Addr::from(base + n))
}

fn is_ready(k: &Kubelet) -> bool {
    k.node.borrow().as_ref().is_some_and(|n| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    })
}

/// This process's resident memory in MiB.
fn rss_mib() -> f64 {
    crate::controllers::rss_mb(std::process::id()).unwrap_or(0.0)
}

/// Run the hollow kubelets until interrupted (or --duration after they are all Ready).
pub async fn run(args: HollowArgs) -> Result<()> {
    if args.count == 0 {
        bail!("--count must be at least 1");
    }
    if !(args.start_rate > 0.0 && args.start_rate.is_finite()) {
        bail!("--start-rate must be a positive number");
    }
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("cannot read the kubeconfig {}", args.kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("cannot use the kubeconfig {}", args.kubeconfig.display()))?;
    // Validate the flags before anything starts.
    options(&args, "check", 0, std::path::Path::new("/"))?;
    let temp;
    let root = match &args.root_dir {
        Some(r) => r.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("capstan-hollow-")
                .tempdir()
                .context("making a temporary root directory")?;
            temp.path().to_path_buf()
        }
    };
    let mut args = args;
    if args.cluster_dns.is_empty() {
        args.cluster_dns = kube_dns_address(&config).await.into_iter().collect();
    }
    let mut clients = Clients::new(&args, config.clone())?;
    let stop = shutdown();
    tokio::pin!(stop);

    let base_rss = rss_mib();
    let started = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / args.start_rate);
    let mut kubelets: Vec<Arc<Kubelet>> = Vec::with_capacity(args.count);
    let mut next = tokio::time::Instant::now();
    let mut stopped = false;
    for i in 0..args.count {
        let name = format!("{}{i}", args.prefix);
        let client = clients
            .for_node(&name)
            .with_context(|| format!("making the client of {name}"))?;
        let opts = options(&args, &name, i, &root)?;
        let k = fake_runtime::start(client, opts)
            .with_context(|| format!("starting the hollow kubelet of {name}"))?;
        kubelets.push(k);
        next += interval;
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = &mut stop => {
                stopped = true;
                break;
            }
        }
    }
    println!(
        "hollow: started {} kubelets in {:.1}s over {} connection(s) ({:?} identity)",
        kubelets.len(),
        started.elapsed().as_secs_f64(),
        clients.connections(kubelets.len()),
        args.identity
    );

    let mut last_progress = Instant::now();
    while !stopped {
        let ready = kubelets.iter().filter(|k| is_ready(k)).count();
        if ready == kubelets.len() {
            break;
        }
        if last_progress.elapsed() >= Duration::from_secs(10) {
            println!(
                "hollow: {ready}/{} Ready after {:.0}s",
                kubelets.len(),
                started.elapsed().as_secs_f64()
            );
            last_progress = Instant::now();
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = &mut stop => stopped = true,
        }
    }
    let all_ready = Instant::now();
    let report = |what: &str| {
        let rss = rss_mib();
        println!(
            "hollow: {} kubelets {what}: RSS {rss:.1} MiB ({base_rss:.1} MiB before they started, {:.0} KiB per kubelet)",
            kubelets.len(),
            (rss - base_rss).max(0.0) * 1024.0 / kubelets.len().max(1) as f64,
        );
    };
    if !stopped {
        report(&format!(
            "Ready after {:.1}s",
            started.elapsed().as_secs_f64()
        ));
    }
    let mut ticker = tokio::time::interval(args.report_interval.max(Duration::from_secs(1)));
    ticker.tick().await;
    while !stopped {
        let until_end = if args.duration.is_zero() {
            Duration::from_secs(86400 * 365)
        } else {
            args.duration.saturating_sub(all_ready.elapsed())
        };
        tokio::select! {
            _ = ticker.tick() => {
                let ready = kubelets.iter().filter(|k| is_ready(k)).count();
                report(&format!("running ({ready} Ready, {:.0}s)", all_ready.elapsed().as_secs_f64()));
            }
            _ = tokio::time::sleep(until_end) => {
                report("at the end");
                stopped = true;
            }
            _ = &mut stop => stopped = true,
        }
    }
    if args.delete_nodes {
        delete_nodes(&config, &kubelets).await;
    }
    Ok(())
}

/// The ClusterIP of the `kube-system/kube-dns` Service, if there is one.
async fn kube_dns_address(config: &kube::Config) -> Option<std::net::IpAddr> {
    let client = client_over(&connection(config).ok()?, config).ok()?;
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(client, "kube-system");
    let svc = services.get_opt("kube-dns").await.ok()??;
    svc.spec?.cluster_ip?.parse().ok()
}

/// Delete the hollow kubelets' Nodes (their Leases go with them: the Nodes own them).
async fn delete_nodes(config: &kube::Config, kubelets: &[Arc<Kubelet>]) {
    let client = match connection(config).and_then(|h| client_over(&h, config)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hollow: cannot delete the nodes: {e:#}");
            return;
        }
    };
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    let names: Vec<&str> = kubelets.iter().map(|k| k.opts.node_name.as_str()).collect();
    let deleted = futures::stream::iter(names)
        .map(|name| {
            let nodes = nodes.clone();
            async move {
                match nodes.delete(name, &Default::default()).await {
                    Ok(_) => true,
                    Err(kube::Error::Api(e)) if e.code == 404 => true,
                    Err(e) => {
                        eprintln!("hollow: deleting node {name}: {e}");
                        false
                    }
                }
            }
        })
        .buffer_unordered(16)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await;
    println!("hollow: deleted {deleted} node(s)");
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ips_are_in_the_benchmarking_range_and_distinct() {
        assert_eq!(node_ip(0).to_string(), "198.18.0.1");
        assert_eq!(node_ip(255).to_string(), "198.18.1.0");
        assert_eq!(node_ip(131_069).to_string(), "198.19.255.254");
        let ips: std::collections::HashSet<_> = (0..5000).map(node_ip).collect();
        assert_eq!(ips.len(), 5000);
    }

    #[test]
    fn options_describe_the_hollow_machine() {
        let args = HollowArgs {
            kubeconfig: "k".into(),
            count: 1,
            prefix: "h-".into(),
            cpu: 8,
            memory: "16Gi".into(),
            pods: 30,
            storage: "20Gi".into(),
            identity: Identity::Impersonate,
            ca_cert: None,
            ca_key: None,
            kubelets_per_connection: 40,
            start_rate: 50.0,
            root_dir: None,
            node_status_update_frequency: Duration::from_secs(10),
            node_lease_duration_seconds: 40,
            cluster_dns: vec!["10.43.0.10".parse().unwrap()],
            labels: vec!["zone=a".into()],
            duration: Duration::ZERO,
            delete_nodes: false,
            report_interval: Duration::from_secs(30),
        };
        let o = options(&args, "h-3", 3, std::path::Path::new("/r")).unwrap();
        let h = o.hollow.unwrap();
        assert_eq!(
            (h.machine.num_cpus, h.machine.memory_capacity),
            (8, 16 << 30)
        );
        assert_eq!(h.rootfs.capacity_bytes, 20 << 30);
        assert_eq!(h.node_ip.to_string(), "198.18.0.4");
        assert_eq!(o.max_pods, 30);
        assert_eq!(o.root_dir, PathBuf::from("/r/h-3/root"));
        assert_eq!(o.node_labels["zone"], "a");
        assert_eq!(o.node_labels["capstan.dev/hollow"], "true");
        assert!(o.cni_conf_dir.is_none());
        assert_eq!(
            o.cluster_dns,
            vec!["10.43.0.10".parse::<std::net::IpAddr>().unwrap()]
        );
        let bad = HollowArgs {
            memory: "lots".into(),
            ..args.clone()
        };
        assert!(options(&bad, "x", 0, std::path::Path::new("/r")).is_err());
        let bad = HollowArgs {
            labels: vec!["novalue".into()],
            ..args
        };
        assert!(options(&bad, "x", 0, std::path::Path::new("/r")).is_err());
    }
}
