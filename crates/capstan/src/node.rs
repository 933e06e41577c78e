//! The node part that `capstan up` and `capstan agent` share: the container runtime (a managed
//! containerd unless one is named), the kubelet in process, waiting for the Node to be Ready,
//! and an orderly shutdown.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use capstan_kubelet::containerd::{self, Containerd, Gate, Layout, Settings};
use capstan_kubelet::pause;
use k8s_openapi::api::core::v1::Node;
use kube::Api;

/// The flags of the node part (kubelet and runtime).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct NodeFlags {
    /// The CRI endpoint of a container runtime to use (unix:///...); without it capstan runs
    /// containerd itself, configured in DATA_DIR/containerd.
    #[arg(long, value_name = "ENDPOINT")]
    pub container_runtime_endpoint: Option<String>,

    /// The node's name (default: the host name, lower-cased).
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,

    /// The node's address (default: the address of the interface of the default route).
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<std::net::IpAddr>,

    /// A registry (HOST:PORT) the managed containerd pulls from over plain HTTP.
    #[arg(long, value_name = "HOST:PORT")]
    pub insecure_registry: Vec<String>,

    /// The port of the kubelet's HTTPS server.
    #[arg(long, default_value_t = 10250)]
    pub kubelet_port: u16,

    /// The Linux bridge of the pod network.
    #[arg(long, default_value = "cni0")]
    pub cni_bridge_name: String,

    /// Hard eviction thresholds (`memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%`
    /// by default; signals not named keep their default).
    #[arg(long, default_value = "", value_parser = capstan_kubelet::EvictionHard::parse)]
    pub eviction_hard: capstan_kubelet::EvictionHard,

    /// The CNI configuration directory the runtime reads (default: the managed containerd's,
    /// DATA_DIR/containerd/cni; /etc/cni/net.d with --container-runtime-endpoint).
    #[arg(long, value_name = "DIR")]
    pub cni_conf_dir: Option<PathBuf>,
}

/// One line per start-up step on stderr, with the time since start.
pub(crate) struct Progress {
    pub start: Instant,
}

impl Progress {
    pub fn new() -> Arc<Progress> {
        Arc::new(Progress {
            start: Instant::now(),
        })
    }

    pub fn step(&self, what: &str, detail: &str) {
        let secs = self.start.elapsed().as_secs_f64();
        if detail.is_empty() {
            eprintln!("  {what:<32} {secs:>6.2}s");
        } else {
            eprintln!("  {what:<32} {secs:>6.2}s  {detail}");
        }
    }
}

/// What has been started, so that shutdown undoes exactly that.
#[derive(Default)]
pub(crate) struct Running {
    pub registry: Option<pause::Registry>,
    pub containerd: Option<Containerd>,
    /// The runtime the kubelet uses (closed at shutdown).
    pub gate: Option<Arc<Gate>>,
    pub kubelet: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// The kubelet's pod directories, whose volume mounts are undone once the managed
    /// containerd's sandboxes are removed.
    pub pods_dir: Option<std::path::PathBuf>,
    /// Other node components (proxy, routes, add-ons), stopped after the kubelet.
    pub components: Vec<Component>,
}

/// A component running as a task, with the way to ask it to stop cleanly.
pub(crate) struct Component {
    pub name: &'static str,
    pub stop: tokio::sync::oneshot::Sender<()>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Component {
    /// Run `f(stop)` as a task; `stop` resolves when shutdown asks the component to end.
    pub fn spawn<F, Fut>(name: &'static str, f: F) -> Component
    where
        F: FnOnce(futures::future::BoxFuture<'static, ()>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let stopped: futures::future::BoxFuture<'static, ()> = Box::pin(async move {
            let _ = rx.await;
        });
        Component {
            name,
            stop,
            task: tokio::spawn(f(stopped)),
        }
    }
}

/// Start (or reach) the container runtime: its CRI endpoint and the CNI configuration
/// directory it reads.
pub(crate) async fn start_runtime(
    args: &NodeFlags,
    data_dir: &Path,
    default_dir: &Path,
    progress: &Progress,
    running: &mut Running,
) -> anyhow::Result<(String, PathBuf)> {
    match &args.container_runtime_endpoint {
        Some(endpoint) => {
            let v = containerd::version(endpoint).await.map_err(|e| {
                anyhow::anyhow!("the container runtime at {endpoint} does not answer: {e}")
            })?;
            progress.step(
                "container runtime ready",
                &format!("{} {} ({endpoint})", v.runtime_name, v.runtime_version),
            );
            let cni = args
                .cni_conf_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("/etc/cni/net.d"));
            Ok((endpoint.clone(), cni))
        }
        None => {
            let binary = containerd::find_binary().context(containerd::NO_RUNTIME)?;
            let mirror = match pause::Arch::host() {
                Some(arch) => {
                    let registry = pause::Registry::start(pause::Image::build(arch))
                        .await
                        .context("serving the pause image on loopback")?;
                    let endpoint = registry.endpoint();
                    running.registry = Some(registry);
                    Some(endpoint)
                }
                None => None,
            };
            let layout = Layout::new(data_dir, containerd::state_dir(data_dir, default_dir));
            let settings = Settings {
                pause_mirror: mirror,
                insecure_registries: args.insecure_registry.clone(),
                restrict_oom_score_adj: containerd::needs_restricted_oom_score_adj(),
                cni_bin_dir: containerd::cni_bin_dir(),
            };
            let managed = Containerd::start(&binary, layout, &settings).await?;
            let endpoint = managed.endpoint();
            let cni = args
                .cni_conf_dir
                .clone()
                .unwrap_or_else(|| managed.layout().cni_conf_dir());
            progress.step(
                "containerd ready",
                &managed.layout().socket().to_string_lossy(),
            );
            running.containerd = Some(managed);
            Ok((endpoint, cni))
        }
    }
}

/// The kubelet's options for a node whose state lives in `data_dir`.
pub(crate) fn kubelet_options(
    args: &NodeFlags,
    data_dir: &Path,
    default_dir: &Path,
    client_ca_pem: &str,
    cni_conf_dir: PathBuf,
) -> capstan_kubelet::Options {
    let defaults = capstan_kubelet::Options::default();
    let node_name = args
        .node_name
        .clone()
        .map(|n| n.to_lowercase())
        .unwrap_or(defaults.node_name.clone());
    capstan_kubelet::Options {
        node_name,
        root_dir: data_dir.join("kubelet"),
        pod_logs_dir: if is_root() && data_dir == default_dir {
            PathBuf::from("/var/log/pods")
        } else {
            data_dir.join("pod-logs")
        },
        node_ip: args.node_ip,
        port: args.kubelet_port,
        client_ca: Some(client_ca_pem.as_bytes().to_vec()),
        cni_conf_dir: Some(cni_conf_dir),
        cni_bridge: args.cni_bridge_name.clone(),
        eviction_hard: args.eviction_hard,
        ..defaults
    }
}

/// Run the kubelet in process on the runtime at `endpoint`.
pub(crate) fn start_kubelet(
    node_client: kube::Client,
    endpoint: &str,
    opts: capstan_kubelet::Options,
    running: &mut Running,
) -> anyhow::Result<()> {
    let cri = capstan_cri::Cri::connect(endpoint).map_err(|e| anyhow::anyhow!(e))?;
    let gate = Gate::new(Arc::new(cri));
    running.gate = Some(gate.clone());
    running.pods_dir = Some(opts.root_dir.join("pods"));
    running.kubelet = Some(tokio::spawn(capstan_kubelet::run(node_client, gate, opts)));
    Ok(())
}

/// Wait until the Node `name` is registered and Ready by what this kubelet wrote (after
/// `since`), failing if the kubelet or the managed containerd stops first.
pub(crate) async fn wait_node_ready(
    client: &kube::Client,
    name: &str,
    since: k8s_openapi::jiff::Timestamp,
    progress: &Progress,
    running: &mut Running,
    hint: &str,
) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut registered = false;
    let mut hinted = false;
    loop {
        if let Some(k) = running.kubelet.as_mut() {
            if k.is_finished() {
                let result = k.await;
                running.kubelet = None;
                return Err(match result {
                    Ok(Err(e)) => e.context("the kubelet stopped"),
                    Ok(Ok(())) => anyhow::anyhow!("the kubelet stopped"),
                    Err(e) => anyhow::anyhow!("the kubelet failed: {e}"),
                });
            }
        }
        if let Some(c) = running.containerd.as_mut() {
            if let Some(status) = c.exited() {
                anyhow::bail!(
                    "containerd exited ({status}); its log ends with:\n{}",
                    c.log_tail(15)
                );
            }
        }
        if let Some(node) = nodes
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .filter(|n| written_since(n, since))
        {
            if !registered {
                registered = true;
                progress.step("kubelet registered", &format!("node {name}"));
            }
            if node_ready(&node) {
                progress.step("node Ready", name);
                return Ok(());
            }
            if !hinted && progress.start.elapsed() > Duration::from_secs(60) {
                hinted = true;
                eprintln!("  (node {name} is not Ready yet: {hint})");
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the Node was created, or its conditions heartbeat, at or after `since`.
fn written_since(node: &Node, since: k8s_openapi::jiff::Timestamp) -> bool {
    let created = node
        .metadata
        .creation_timestamp
        .as_ref()
        .is_some_and(|t| t.0 >= since);
    let heartbeat = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.last_heartbeat_time.as_ref().is_some_and(|t| t.0 >= since))
        });
    created || heartbeat
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Undo what was started, most dependent first.
pub(crate) async fn shutdown(running: Running) {
    // The kubelet first: nothing may start a pod while they are removed.
    if let Some(gate) = &running.gate {
        gate.close(Duration::from_secs(5)).await;
    }
    if let Some(kubelet) = running.kubelet {
        kubelet.abort();
    }
    for c in running.components {
        let _ = c.stop.send(());
        let mut task = c.task;
        if tokio::time::timeout(Duration::from_secs(10), &mut task)
            .await
            .is_err()
        {
            eprintln!("  {} did not stop within 10s", c.name);
            task.abort();
        }
    }
    if let Some(managed) = running.containerd {
        match capstan_cri::Cri::connect(&managed.endpoint()) {
            Ok(cri) => {
                let removal = containerd::remove_all_sandboxes(&cri);
                match tokio::time::timeout(Duration::from_secs(30), removal).await {
                    Ok((removed, errors)) => {
                        if removed > 0 {
                            eprintln!("  removed {removed} pod sandbox(es)");
                        }
                        for e in errors {
                            eprintln!("  {e}");
                        }
                    }
                    Err(_) => eprintln!("  removing the pod sandboxes timed out"),
                }
            }
            Err(e) => eprintln!("  cannot reach containerd: {e}"),
        }
        managed.stop().await;
        // The pods' containers are gone: their tmpfs volumes (secrets, projected tokens)
        // would otherwise stay mounted under the data directory.
        if let Some(dir) = &running.pods_dir {
            if let Err(e) = capstan_kubelet::volumes::sys::unmount_all_under(dir) {
                eprintln!("  unmounting pod volumes under {}: {e}", dir.display());
            }
        }
    }
    drop(running.registry);
}

/// Ctrl-C and SIGTERM.
pub(crate) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn new() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("handling SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("handling SIGINT")?,
        })
    }

    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Run the service proxy in `mode` for `node` as a component (its rules are removed when
/// it is stopped).
pub(crate) fn start_proxy(
    client: kube::Client,
    node: &str,
    mode: &str,
    cluster_cidr: Option<String>,
    running: &mut Running,
) -> anyhow::Result<()> {
    let mode: capstan_proxy::runner::Mode = mode.parse()?;
    capstan_proxy::runner::check_mode(mode)?;
    let opts = capstan_proxy::runner::ProxyOptions {
        node_name: node.to_string(),
        mode,
        cluster_cidr,
        ..Default::default()
    };
    running.components.push(Component::spawn(
        "the service proxy",
        move |stop| async move {
            if let Err(e) = capstan_proxy::runner::run(opts, client, stop).await {
                tracing::error!("service proxy: {e:#}");
            }
        },
    ));
    Ok(())
}

/// The kube-dns Service's address: the tenth of the service range, as kubeadm and k3s choose.
pub(crate) fn cluster_dns_ip(service_cidr: &str) -> anyhow::Result<std::net::IpAddr> {
    let first = capstan_pki::first_service_ip(service_cidr)?;
    Ok(match first {
        std::net::IpAddr::V4(a) => std::net::Ipv4Addr::from(u32::from(a) + 9).into(),
        std::net::IpAddr::V6(a) => std::net::Ipv6Addr::from(u128::from(a) + 9).into(),
    })
}

/// Serve the cluster DNS in process on the node's address and `port`, behind the
/// `kube-system/kube-dns` Service at `service_ip` (port 53, UDP and TCP), whose EndpointSlice
/// names this node. Returns the address it answers on once its records are in.
pub(crate) async fn start_cluster_dns(
    client: kube::Client,
    node_name: &str,
    service_ip: std::net::IpAddr,
    port: u16,
    running: &mut Running,
) -> anyhow::Result<std::net::SocketAddr> {
    use kube::api::{Patch, PatchParams};
    let node = Api::<Node>::all(client.clone())
        .get(node_name)
        .await
        .with_context(|| format!("reading node {node_name}"))?;
    let node_ip: std::net::IpAddr = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .and_then(|a| a.address.parse().ok())
        .with_context(|| format!("node {node_name} has no InternalIP for the cluster DNS"))?;
    let listen = std::net::SocketAddr::new(node_ip, port);
    let mut opts = capstan_dns::Options {
        listen: vec![listen],
        ..Default::default()
    };
    opts.upstreams = capstan_dns::default_upstreams(&opts.listen).unwrap_or_default();
    let dns = capstan_dns::start(opts, client.clone())
        .await
        .with_context(|| format!("starting the cluster DNS on {listen}"))?;
    let pp = PatchParams::apply("capstan-up").force();
    let service = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system",
                     "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS",
                                "kubernetes.io/cluster-service": "true"}},
        "spec": {"clusterIP": service_ip.to_string(), "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": port},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": port},
        ]},
    });
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), "kube-system")
        .patch("kube-dns", &pp, &Patch::Apply(&service))
        .await
        .context("writing the kube-dns Service")?;
    let family = if node_ip.is_ipv6() { "IPv6" } else { "IPv4" };
    let slice = serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kube-dns-capstan", "namespace": "kube-system",
                     "labels": {"kubernetes.io/service-name": "kube-dns",
                                "endpointslice.kubernetes.io/managed-by": "capstan-up"}},
        "addressType": family,
        "endpoints": [{"addresses": [node_ip.to_string()], "conditions": {"ready": true},
                       "nodeName": node_name}],
        "ports": [{"name": "dns", "port": port, "protocol": "UDP"},
                  {"name": "dns-tcp", "port": port, "protocol": "TCP"}],
    });
    Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(client, "kube-system")
        .patch("kube-dns-capstan", &pp, &Patch::Apply(&slice))
        .await
        .context("writing the kube-dns EndpointSlice")?;
    dns.wait_ready().await;
    running.components.push(Component::spawn(
        "the cluster DNS",
        move |stop| async move {
            stop.await;
            dns.shutdown().await;
        },
    ));
    Ok(listen)
}
