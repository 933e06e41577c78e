//! `capstan up`: a whole single-node cluster in one process.
//!
//! One process runs the API server over the embedded store (as `capstan server`), the
//! controllers, the scheduler and the kubelet. The components in the process reach the API
//! server through the in-process transport ([`capstan_apiserver::InProcess`]): no TCP or TLS,
//! but the full request pipeline. The kubelet authenticates as `system:node:NAME` (group
//! `system:nodes`), so the Node authorizer and NodeRestriction govern it as in any cluster. Unless
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
use capstan_kubelet::containerd;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use crate::node::{NodeFlags, Progress, Running, Signals};
use crate::server_cmd::ServerArgs;

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    server: ServerArgs,

    #[command(flatten)]
    node: NodeFlags,

    /// Merge the admin kubeconfig into ~/.kube/config as context `capstan` (done anyway when
    /// --data-dir is the default).
    #[arg(long)]
    write_kubeconfig: bool,

    #[command(flatten)]
    addons: AddonFlags,
}

/// What runs besides the control plane and the kubelet.
#[derive(clap::Args, Debug, Clone)]
struct AddonFlags {
    /// How Services reach their endpoints: iptables, nftables or userspace.
    #[arg(long, default_value = "iptables")]
    proxy_mode: String,

    /// Components not to run: proxy, dns, ingress, dashboard (comma-separated or repeated).
    #[arg(long, value_delimiter = ',', value_parser = ["proxy", "dns", "ingress", "dashboard"])]
    disable: Vec<String>,

    /// The port the ingress controller serves plain HTTP on (all addresses).
    #[arg(long, default_value_t = 80)]
    ingress_http_port: u16,

    /// The port the ingress controller serves HTTPS on.
    #[arg(long, default_value_t = 443)]
    ingress_https_port: u16,

    /// The port of the ingress controller's /metrics and /healthz.
    #[arg(long, default_value_t = 10254)]
    ingress_metrics_port: u16,

    /// Where the dashboard listens (HTTPS, with a certificate of its own).
    #[arg(long, default_value = "127.0.0.1:8443")]
    dashboard_address: std::net::SocketAddr,

    /// The port the cluster DNS answers on, on the node's address (the kube-dns Service's
    /// port 53 leads there).
    #[arg(long, default_value_t = 10053)]
    cluster_dns_port: u16,
}

impl AddonFlags {
    fn enabled(&self, what: &str) -> bool {
        !self.disable.iter().any(|d| d == what)
    }
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let progress = Progress::new();
    let UpArgs {
        server,
        node: args,
        write_kubeconfig,
        addons,
    } = args;
    let service_cidr = server.service_cidr().to_string();
    let cluster_cidr = server.cluster_cidr();
    let data_dir = server.data_dir().to_path_buf();
    let default_dir = crate::default_data_dir();
    crate::datadir::check(&data_dir)?;
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
        in_process,
        serve,
    } = started;

    let main = async move {
        let mut running = Running::default();
        let outcome = tokio::select! {
            r = bring_up(&args, &addons, write_kubeconfig, &data_dir, &default_dir,
                         &server_url, &kubeconfig, &pki, &in_process, &service_cidr, cluster_cidr,
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
        crate::node::shutdown(running).await;
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
    addons: &AddonFlags,
    write_kubeconfig: bool,
    data_dir: &Path,
    default_dir: &Path,
    server_url: &str,
    kubeconfig: &Path,
    pki: &capstan_pki::Pki,
    in_process: &capstan_apiserver::InProcess,
    service_cidr: &str,
    cluster_cidr: Option<String>,
    progress: &Arc<Progress>,
    running: &mut Running,
) -> anyhow::Result<()> {
    // The API server answers at its front door (what kubectl uses) ...
    let front_door = kube::Client::try_from(crate::scheduler_cmd::config(kubeconfig).await?)
        .context("building the admin client")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match front_door.apiserver_version().await {
            Ok(_) => break,
            Err(e) if Instant::now() > deadline => {
                anyhow::bail!("the API server does not answer on {server_url}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    progress.step("API server ready", server_url);
    // ... and the components in this process reach it in process.
    let admin = in_process.client_as("kubernetes-admin", &["system:masters"]);
    for (lease, what) in [
        ("kube-controller-manager", "controllers running"),
        ("kube-scheduler", "scheduler running"),
    ] {
        tokio::spawn(wait_leader(admin.clone(), lease, what, progress.clone()));
    }

    let (endpoint, cni_conf_dir) =
        crate::node::start_runtime(args, data_dir, default_dir, progress, running).await?;

    // The kubelet, in process, as system:node:NAME.
    let mut opts =
        crate::node::kubelet_options(args, data_dir, default_dir, pki.ca_cert_pem(), cni_conf_dir);
    let dns_ip = crate::node::cluster_dns_ip(service_cidr)?;
    if addons.enabled("dns") {
        opts.cluster_dns = vec![dns_ip];
    }
    // The control plane of this process, shown as kube-system mirror pods (as kubeadm's).
    opts.host_pods = capstan_kubelet::host_pods::control_plane(admin.clone());
    let node_name = opts.node_name.clone();
    // The kubelet as system:node:NAME (the Node authorizer and NodeRestriction govern it),
    // the proxy as system:kube-proxy (system:node-proxier), as kubeadm's clusters have them.
    let node_client = in_process
        .clone()
        .with_user_agent("kubelet")
        .client_as(&format!("system:node:{node_name}"), &["system:nodes"]);
    // A Node kept from an earlier run still says Ready: only what this kubelet wrote counts
    // (times in Node status are whole seconds).
    let since =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(1);
    crate::node::start_kubelet(node_client.clone(), &endpoint, opts, running)?;
    if addons.enabled("proxy") {
        crate::node::start_proxy(
            in_process
                .clone()
                .with_user_agent("kube-proxy")
                .client_as("system:kube-proxy", &[]),
            &node_name,
            &addons.proxy_mode,
            cluster_cidr,
            running,
        )?;
        progress.step("proxy running", &addons.proxy_mode);
    }
    let hint = format!(
        "kubectl --kubeconfig {} describe node {node_name}",
        kubeconfig.display()
    );
    crate::node::wait_node_ready(&admin, &node_name, since, progress, running, &hint).await?;
    if addons.enabled("dns") {
        let addr = crate::node::start_cluster_dns(
            admin.clone(),
            &node_name,
            dns_ip,
            addons.cluster_dns_port,
            running,
        )
        .await?;
        progress.step("cluster DNS ready", &format!("{dns_ip} → {addr}"));
    }
    if addons.enabled("ingress") {
        let ports = start_ingress(addons, in_process, &admin, &node_name, running).await?;
        progress.step("ingress serving", &ports);
    }
    let mut dashboard_url = None;
    if addons.enabled("dashboard") {
        let dashboard = capstan_dashboard::Dashboard::bind(
            capstan_dashboard::Options {
                bind: addons.dashboard_address,
                tls: capstan_dashboard::Tls::SelfSigned,
            },
            capstan_dashboard::ApiTarget {
                url: server_url.to_string(),
                ca_pem: Some(pki.ca_cert_pem().to_string()),
            },
        )
        .await
        .context(
            "starting the dashboard (another port: --dashboard-address, or --disable dashboard)",
        )?;
        let url = dashboard.url();
        dashboard_account(&admin).await?;
        running.components.push(crate::node::Component::spawn(
            "the dashboard",
            move |stop| async move {
                if let Err(e) = dashboard.serve(stop).await {
                    tracing::error!("dashboard: {e:#}");
                }
            },
        ));
        progress.step("dashboard serving", &url);
        dashboard_url = Some(url);
    }

    eprintln!();
    eprintln!("kubeconfig: {}", kubeconfig.display());
    if write_kubeconfig || data_dir == default_dir {
        match merge_kubeconfig(pki, server_url) {
            Ok(path) => eprintln!("merged into {} as context capstan", path.display()),
            Err(e) => eprintln!("could not merge the kubeconfig into ~/.kube/config: {e:#}"),
        }
    }
    eprintln!(
        "try: kubectl --kubeconfig {} get nodes",
        kubeconfig.display()
    );
    if let Some(url) = dashboard_url {
        eprintln!(
            "dashboard: {url} (sign in with the token of: kubectl --kubeconfig {} -n \
             kube-system create token capstan-dashboard)",
            kubeconfig.display()
        );
    }
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

/// The ingress controller, as k3s runs Traefik: serving Ingresses of the IngressClass
/// `capstan` (made the cluster's default class when it does not exist yet) on the node's
/// ports, as the ServiceAccount of its manifest (`kube-system/capstan-ingress`). Returns the ports it serves, for the progress line.
async fn start_ingress(
    addons: &AddonFlags,
    in_process: &capstan_apiserver::InProcess,
    admin: &kube::Client,
    node_name: &str,
    running: &mut Running,
) -> anyhow::Result<String> {
    let opts = capstan_ingress::Options {
        http_port: addons.ingress_http_port,
        https_port: addons.ingress_https_port,
        metrics_port: addons.ingress_metrics_port,
        node_name: Some(node_name.to_string()),
        // One data-plane thread: the rest of the cluster shares this process.
        workers: 1,
        ..Default::default()
    };
    let listeners = capstan_ingress::Listeners::bind(&opts).await.context(
        "starting the ingress controller (other ports: --ingress-http-port, \
         --ingress-https-port, --ingress-metrics-port; or --disable ingress)",
    )?;
    let (http, https, _) = listeners.addrs()?;
    ingress_account(admin).await?;
    let (ns, name) = capstan_ingress::deploy::SERVICE_ACCOUNT;
    let client = in_process.client_as(
        &format!("system:serviceaccount:{ns}:{name}"),
        &[
            "system:serviceaccounts",
            &format!("system:serviceaccounts:{ns}"),
        ],
    );
    running.components.push(crate::node::Component::spawn(
        "the ingress controller",
        move |stop| async move {
            if let Err(e) = listeners.serve(opts, client, stop).await {
                tracing::error!("ingress: {e:#}");
            }
        },
    ));
    Ok(format!("HTTP :{}, HTTPS :{}", http.port(), https.port()))
}

/// The controller's ServiceAccount and its permissions, from the controller's manifest
/// (applied), and its IngressClass marked the default class (created only when missing: a
/// user's edits are kept).
async fn ingress_account(admin: &kube::Client) -> anyhow::Result<()> {
    use capstan_ingress::deploy;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    let pp = PatchParams::apply("capstan-up").force();
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "IngressClass",
    ] {
        for object in deploy::of_kind(kind) {
            let (group, version) = match object["apiVersion"].as_str().unwrap_or_default() {
                v if v.contains('/') => v.split_once('/').unwrap_or_default(),
                v => ("", v),
            };
            let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
                Some(ns) => Api::namespaced_with(admin.clone(), ns, &resource),
                None => Api::all_with(admin.clone(), &resource),
            };
            let written = if kind == "IngressClass" {
                match api
                    .create(
                        &Default::default(),
                        &serde_json::from_value(object.clone())?,
                    )
                    .await
                {
                    Err(kube::Error::Api(e)) if e.code == 409 => continue,
                    r => r.map(drop),
                }
            } else {
                api.patch(name, &pp, &Patch::Apply(&object)).await.map(drop)
            };
            written.with_context(|| format!("writing the {kind} {name}"))?;
        }
    }
    Ok(())
}

/// The ServiceAccount `kube-system/capstan-dashboard`, bound to cluster-admin: the dashboard's
/// sign-in for the cluster's owner (`kubectl create token` gives its tokens).
async fn dashboard_account(admin: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use kube::api::{Patch, PatchParams};
    let pp = PatchParams::apply("capstan-up").force();
    let account = serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "capstan-dashboard", "namespace": "kube-system"},
    });
    kube::Api::<ServiceAccount>::namespaced(admin.clone(), "kube-system")
        .patch("capstan-dashboard", &pp, &Patch::Apply(&account))
        .await
        .context("writing the ServiceAccount kube-system/capstan-dashboard")?;
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "capstan-dashboard"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "capstan-dashboard",
                      "namespace": "kube-system"}],
    });
    kube::Api::<ClusterRoleBinding>::all(admin.clone())
        .patch("capstan-dashboard", &pp, &Patch::Apply(&binding))
        .await
        .context("writing the ClusterRoleBinding capstan-dashboard")?;
    Ok(())
}
