//! `capstan up`: a whole single-node cluster in one process.
//!
//! One process runs the API server over the embedded store (as `capstan server`), the
//! controllers, the scheduler and the kubelet. The kubelet authenticates as
//! `system:node:NAME` (group `system:nodes`) with a certificate the cluster CA issues at every
//! start, so the Node authorizer and NodeRestriction govern it as in any cluster. Unless
//! `--container-runtime-endpoint` names a runtime, containerd runs as a child process with
//! capstan's own configuration ([`capstan_kubelet::containerd`]), and the pod sandbox image is
//! capstan's own, served on loopback ([`capstan_kubelet::pause`]).
//!
//! Start-up is shown on stderr, one line per component as it becomes ready. On Ctrl-C or
//! SIGTERM the kubelet is stopped, every pod sandbox of the managed containerd is stopped and
//! removed (so no container outlives the cluster), containerd is stopped, and the process
//! exits 0. The store keeps every object: the next `capstan up` on the same data directory
//! runs the same pods again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use capstan_kubelet::containerd::{self, Containerd, Gate, Layout, Settings};
use capstan_kubelet::pause;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::server_cmd::ServerArgs;

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(flatten)]
    node: NodeFlags,
}

/// The flags of the node part (kubelet and runtime).
#[derive(clap::Args, Debug)]
struct NodeFlags {
    /// The CRI endpoint of a container runtime to use (unix:///...); without it capstan runs
    /// containerd itself, configured in DATA_DIR/containerd.
    #[arg(long, value_name = "ENDPOINT")]
    container_runtime_endpoint: Option<String>,

    /// The node's name (default: the host name, lower-cased).
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,

    /// Merge the admin kubeconfig into ~/.kube/config as context `capstan` (done anyway when
    /// --data-dir is the default).
    #[arg(long)]
    write_kubeconfig: bool,

    /// A registry (HOST:PORT) the managed containerd pulls from over plain HTTP.
    #[arg(long, value_name = "HOST:PORT")]
    insecure_registry: Vec<String>,

    /// The port of the kubelet's HTTPS server.
    #[arg(long, default_value_t = 10250)]
    kubelet_port: u16,

    /// The Linux bridge of the pod network.
    #[arg(long, default_value = "cni0")]
    cni_bridge_name: String,

    /// Hard eviction thresholds (`memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%`
    /// by default; signals not named keep their default).
    #[arg(long, default_value = "", value_parser = capstan_kubelet::EvictionHard::parse)]
    eviction_hard: capstan_kubelet::EvictionHard,

    /// The CNI configuration directory the runtime reads (default: the managed containerd's,
    /// DATA_DIR/containerd/cni; /etc/cni/net.d with --container-runtime-endpoint).
    #[arg(long, value_name = "DIR")]
    cni_conf_dir: Option<PathBuf>,
}

/// One line per start-up step on stderr, with the time since start.
struct Progress {
    start: Instant,
}

impl Progress {
    fn step(&self, what: &str, detail: &str) {
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
struct Running {
    registry: Option<pause::Registry>,
    containerd: Option<Containerd>,
    /// The runtime the kubelet uses (closed at shutdown).
    gate: Option<Arc<Gate>>,
    kubelet: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let progress = Arc::new(Progress {
        start: Instant::now(),
    });
    let UpArgs { server, node: args } = args;
    let data_dir = server.data_dir().to_path_buf();
    let default_dir = crate::default_data_dir();
    // A missing runtime is found before anything is written.
    if args.container_runtime_endpoint.is_none() && containerd::find_binary().is_none() {
        anyhow::bail!("{}", containerd::NO_RUNTIME);
    }
    // A port in use is found before anything is written, too.
    let addr = server.listen_addr();
    if let Err(e) = std::net::TcpListener::bind(addr) {
        anyhow::bail!(
            "port {} is not available on {} ({e}): is another capstan up or API server \
             running? Pick another port with --secure-port",
            addr.port(),
            addr.ip()
        );
    }
    let mut signals = Signals::new()?;

    eprintln!(
        "capstan up: a single-node cluster in {}",
        data_dir.display()
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let p = progress.clone();
    let started = crate::server_cmd::start(
        server,
        async {
            let _ = stop_rx.await;
        },
        &move |what| {
            if what == "store" {
                p.step("store open", "")
            }
        },
    )
    .await?;
    let crate::server_cmd::Started {
        server_url,
        kubeconfig,
        pki,
        serve,
    } = started;

    let main = async move {
        let mut running = Running::default();
        let outcome = tokio::select! {
            r = bring_up(&args, &data_dir, &default_dir, &server_url, &kubeconfig, &pki,
                         &progress, &mut running) => r,
            _ = signals.recv() => Err(anyhow::anyhow!("interrupted while starting")),
        };
        let outcome = match outcome {
            Ok(()) => {
                signals.recv().await;
                Ok(())
            }
            Err(e) => Err(e),
        };
        eprintln!("capstan up: stopping");
        // A second signal while stopping: stop at once.
        tokio::spawn(async move {
            signals.recv().await;
            eprintln!("capstan up: stopping at once (second signal)");
            std::process::exit(130);
        });
        shutdown(running).await;
        let _ = stop_tx.send(());
        outcome
    };
    let ((), outcome) = tokio::join!(serve, main);
    match outcome {
        Ok(()) => {
            eprintln!("capstan up: stopped");
            // Background tasks (watches, workers) end with the process.
            std::process::exit(0)
        }
        Err(e) => Err(e),
    }
}

#[allow(clippy::too_many_arguments)]
async fn bring_up(
    args: &NodeFlags,
    data_dir: &Path,
    default_dir: &Path,
    server_url: &str,
    kubeconfig: &Path,
    pki: &capstan_pki::Pki,
    progress: &Arc<Progress>,
    running: &mut Running,
) -> anyhow::Result<()> {
    // The API server, through its own front door.
    let admin = kube::Client::try_from(crate::scheduler_cmd::config(kubeconfig).await?)
        .context("building the admin client")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match admin.apiserver_version().await {
            Ok(_) => break,
            Err(e) if Instant::now() > deadline => {
                anyhow::bail!("the API server does not answer on {server_url}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    progress.step("API server ready", server_url);
    for (lease, what) in [
        ("kube-controller-manager", "controllers running"),
        ("kube-scheduler", "scheduler running"),
    ] {
        tokio::spawn(wait_leader(admin.clone(), lease, what, progress.clone()));
    }

    // The container runtime.
    let (endpoint, cni_conf_dir) = match &args.container_runtime_endpoint {
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
            (endpoint.clone(), cni)
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
            (endpoint, cni)
        }
    };

    // The kubelet, in process, as system:node:NAME.
    let defaults = capstan_kubelet::Options::default();
    let node_name = args
        .node_name
        .clone()
        .map(|n| n.to_lowercase())
        .unwrap_or(defaults.node_name.clone());
    let node_client = node_client(pki, server_url, &node_name).await?;
    let is_root = is_root();
    let opts = capstan_kubelet::Options {
        node_name: node_name.clone(),
        root_dir: data_dir.join("kubelet"),
        pod_logs_dir: if is_root && data_dir == default_dir {
            PathBuf::from("/var/log/pods")
        } else {
            data_dir.join("pod-logs")
        },
        port: args.kubelet_port,
        client_ca: Some(pki.ca_cert_pem().as_bytes().to_vec()),
        cni_conf_dir: Some(cni_conf_dir),
        cni_bridge: args.cni_bridge_name.clone(),
        eviction_hard: args.eviction_hard,
        ..defaults
    };
    let cri = capstan_cri::Cri::connect(&endpoint).map_err(|e| anyhow::anyhow!(e))?;
    let gate = Gate::new(Arc::new(cri));
    running.gate = Some(gate.clone());
    // A Node kept from an earlier run still says Ready: only what this kubelet wrote counts
    // (times in Node status are whole seconds).
    let since =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(1);
    let kubelet = tokio::spawn(capstan_kubelet::run(node_client, gate, opts));
    running.kubelet = Some(kubelet);

    let nodes: Api<Node> = Api::all(admin.clone());
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
            .get_opt(&node_name)
            .await
            .ok()
            .flatten()
            .filter(|n| written_since(n, since))
        {
            if !registered {
                registered = true;
                progress.step("kubelet registered", &format!("node {node_name}"));
            }
            if node_ready(&node) {
                progress.step("node Ready", &node_name);
                break;
            }
            if !hinted && progress.start.elapsed() > Duration::from_secs(60) {
                hinted = true;
                eprintln!(
                    "  (node {node_name} is not Ready yet: kubectl --kubeconfig {} describe \
                     node {node_name})",
                    kubeconfig.display()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    eprintln!();
    eprintln!("kubeconfig: {}", kubeconfig.display());
    if args.write_kubeconfig || data_dir == default_dir {
        match merge_kubeconfig(pki, server_url) {
            Ok(path) => eprintln!("merged into {} as context capstan", path.display()),
            Err(e) => eprintln!("could not merge the kubeconfig into ~/.kube/config: {e:#}"),
        }
    }
    eprintln!(
        "try: kubectl --kubeconfig {} get nodes",
        kubeconfig.display()
    );
    eprintln!(
        "(Ctrl-C stops the cluster; its objects are kept in {})",
        data_dir.display()
    );
    Ok(())
}

/// Print `what` once the lease `kube-system/NAME` has a holder (within a minute).
async fn wait_leader(client: kube::Client, name: &str, what: &str, progress: Arc<Progress>) {
    let leases: Api<Lease> = Api::namespaced(client, "kube-system");
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(Some(lease)) = leases.get_opt(name).await {
            if lease
                .spec
                .and_then(|s| s.holder_identity)
                .is_some_and(|h| !h.is_empty())
            {
                progress.step(what, "");
                return;
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

/// A client authenticated as `system:node:NAME` (group `system:nodes`), with a certificate
/// from the cluster CA.
async fn node_client(
    pki: &capstan_pki::Pki,
    server_url: &str,
    node: &str,
) -> anyhow::Result<kube::Client> {
    let user = format!("system:node:{node}");
    let (cert, key) = pki
        .issue_client_cert(&user, &["system:nodes"], Duration::from_secs(365 * 86400))
        .with_context(|| format!("issuing the certificate of {user}"))?;
    let yaml = capstan_pki::kubeconfig::render(&capstan_pki::kubeconfig::Entry {
        cluster_name: "capstan",
        server_url,
        ca_pem: pki.ca_cert_pem(),
        user_name: &user,
        cert_pem: &cert,
        key_pem: &key,
    });
    let kc = kube::config::Kubeconfig::from_yaml(&yaml)
        .map_err(|e| anyhow::anyhow!("the kubelet's kubeconfig: {e}"))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| anyhow::anyhow!("the kubelet's kubeconfig: {e}"))?;
    kube::Client::try_from(config).context("building the kubelet's client")
}

/// Merge an admin entry into ~/.kube/config as context `capstan` (made current).
fn merge_kubeconfig(pki: &capstan_pki::Pki, server_url: &str) -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    let path = PathBuf::from(home).join(".kube/config");
    let (cert, key) = pki
        .issue_client_cert(
            "kubernetes-admin",
            &["system:masters"],
            Duration::from_secs(365 * 86400),
        )
        .context("issuing the admin certificate")?;
    let entry = capstan_pki::kubeconfig::Entry {
        cluster_name: "capstan",
        server_url,
        ca_pem: pki.ca_cert_pem(),
        user_name: "capstan-admin",
        cert_pem: &cert,
        key_pem: &key,
    };
    capstan_pki::kubeconfig::merge_into(&path, "capstan", &entry, true)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Undo what was started, most dependent first.
async fn shutdown(running: Running) {
    // The kubelet first: nothing may start a pod while they are removed.
    if let Some(gate) = &running.gate {
        gate.close(Duration::from_secs(5)).await;
    }
    if let Some(kubelet) = running.kubelet {
        kubelet.abort();
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
    }
    drop(running.registry);
}

/// Ctrl-C and SIGTERM.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("handling SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("handling SIGINT")?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}
