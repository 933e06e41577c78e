//! `capstan server`: the control plane — the API server over the store — in one process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use capstan_apiserver::ApiServer;
use capstan_pki::{ClientAuth, Pki, PkiOptions};
use capstan_store::Store;

#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    /// Where the store, certificates and kubeconfigs are kept.
    #[arg(long, default_value_os_t = crate::default_data_dir())]
    data_dir: PathBuf,

    /// The HTTPS port of the API server.
    #[arg(long, default_value_t = 6443)]
    secure_port: u16,

    /// The address the API server listens on.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: std::net::IpAddr,

    /// The address written into kubeconfigs and discovery (default: 127.0.0.1).
    #[arg(long)]
    advertise_address: Option<String>,

    /// etcd client URLs; without them the embedded store in DATA_DIR/store is used.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,

    /// The Service IP range; its first address is the `kubernetes` service's.
    #[arg(long, default_value = "10.43.0.0/16")]
    service_cluster_ip_range: String,

    /// The NodePort range.
    #[arg(long, default_value = "30000-32767")]
    service_node_port_range: String,

    /// More names or IPs for the serving certificate.
    #[arg(long, value_delimiter = ',')]
    tls_san: Vec<String>,

    /// Allow unauthenticated requests as system:anonymous.
    #[arg(long)]
    anonymous_auth: bool,

    /// Accept the bearer tokens of this file (Kubernetes' CSV format:
    /// token,user,uid,"group1,group2").
    #[arg(long, value_name = "PATH")]
    token_auth_file: Option<PathBuf>,

    /// Write an audit log here: one JSON line (an audit.k8s.io/v1 Event) per request.
    #[arg(long, value_name = "PATH")]
    audit_log_path: Option<PathBuf>,

    /// Do not run the scheduler in this process.
    #[arg(long)]
    disable_scheduler: bool,

    /// Do not run the controllers in this process.
    #[arg(long)]
    disable_controller_manager: bool,

    #[command(flatten)]
    controller_flags: crate::controller_manager_cmd::ControllerFlags,
}

pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    // Ctrl-C or SIGTERM (what systemd and container runtimes send) stop it cleanly.
    let mut signals = crate::node::Signals::new()?;
    let shutdown = async move {
        signals.recv().await;
        tracing::info!("stopping");
    };
    let started = start(args, shutdown, &|_| {}).await?;
    eprintln!(
        "capstan: API server ready on {}; try: kubectl --kubeconfig {} get namespaces",
        started.server_url,
        started.kubeconfig.display()
    );
    started.serve.await;
    Ok(())
}

// ---- The control plane as a part of a larger process (`capstan up`) ----

/// A control plane that is listening, with the controllers and scheduler started; it answers
/// requests once `serve` is polled, until the shutdown future given to [`start`] resolves.
pub(crate) struct Started {
    /// `https://127.0.0.1:PORT`.
    pub server_url: String,
    /// DATA_DIR/admin.kubeconfig.
    pub kubeconfig: PathBuf,
    /// The cluster's certificates (its CA signs client certificates for in-process components).
    pub pki: Arc<Pki>,
    /// Clients that reach this API server without the network (the full request pipeline,
    /// authenticated as the identity each client is made for).
    pub in_process: capstan_apiserver::InProcess,
    pub serve: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
}

impl ServerArgs {
    pub(crate) fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }

    /// `--service-cluster-ip-range`.
    pub(crate) fn service_cidr(&self) -> &str {
        &self.service_cluster_ip_range
    }

    /// `--cluster-cidr`, when set.
    pub(crate) fn cluster_cidr(&self) -> Option<String> {
        Some(self.controller_flags.cluster_cidr.clone()).filter(|c| !c.is_empty())
    }

    /// The address the API server listens on.
    pub(crate) fn listen_addr(&self) -> SocketAddr {
        SocketAddr::new(self.bind_address, self.secure_port)
    }
}

/// Open the store, prepare the certificates and kubeconfigs, bind the port, build the API
/// server and start the controllers and scheduler (as `capstan server` does). `progress` hears
/// `"store"` once the store is open.
pub(crate) async fn start(
    args: ServerArgs,
    shutdown: impl std::future::Future<Output = ()> + 'static,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Started> {
    crate::datadir::prepare(&args.data_dir)?;
    let store: Arc<dyn Store> = if args.etcd_servers.is_empty() {
        let dir = args.data_dir.join("store");
        Arc::new(
            capstan_store::embedded::EmbeddedStore::open(&dir)
                .with_context(|| format!("opening the store in {}", dir.display()))?,
        )
    } else {
        Arc::new(
            capstan_store::etcd::EtcdStore::connect(capstan_store::etcd::EtcdConfig::new(
                args.etcd_servers.clone(),
            ))
            .await
            .context("connecting to etcd")?,
        )
    };
    progress("store");

    // The address other nodes and pods reach us at (the `kubernetes` Endpoints); local clients
    // use the bind address, or loopback when listening everywhere.
    let advertise = args
        .advertise_address
        .clone()
        .unwrap_or_else(|| host_address().unwrap_or_else(|| "127.0.0.1".into()));
    let local = if args.bind_address.is_unspecified() || args.bind_address.is_loopback() {
        "127.0.0.1".to_string()
    } else {
        args.bind_address.to_string()
    };
    let mut extra_sans = args.tls_san.clone();
    extra_sans.push(advertise.clone());
    let pki_dir = args.data_dir.join("pki");
    let pki = Pki::load_or_create(
        &pki_dir,
        PkiOptions {
            service_cidr: args.service_cluster_ip_range.clone(),
            extra_sans,
            ..Default::default()
        },
    )
    .with_context(|| format!("preparing certificates in {}", pki_dir.display()))?;

    let server_url = format!("https://{}:{}", bracket_v6(&local), args.secure_port);
    // The admin's credentials, and each component's own identity (Kubernetes' default role
    // for that component applies to it).
    let node_name = hostname();
    let identities: [(&str, String, &[&str]); 5] = [
        (
            "admin.kubeconfig",
            "kubernetes-admin".into(),
            &["system:masters"],
        ),
        (
            "components/scheduler.kubeconfig",
            "system:kube-scheduler".into(),
            &[],
        ),
        (
            "components/controller-manager.kubeconfig",
            "system:kube-controller-manager".into(),
            &[],
        ),
        (
            "components/proxy.kubeconfig",
            "system:kube-proxy".into(),
            &[],
        ),
        (
            "components/kubelet.kubeconfig",
            format!("system:node:{node_name}"),
            &["system:nodes"],
        ),
    ];
    for (file, user, groups) in identities {
        let path = args.data_dir.join(file);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let (cert, key) = pki
            .issue_client_cert(&user, groups, Duration::from_secs(365 * 86400))
            .with_context(|| format!("issuing the certificate of {user}"))?;
        capstan_pki::kubeconfig::write(
            &path,
            "capstan",
            &server_url,
            pki.ca_cert_pem(),
            if file == "admin.kubeconfig" {
                "admin"
            } else {
                &user
            },
            &cert,
            &key,
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    let kubeconfig = args.data_dir.join("admin.kubeconfig");

    let pki = Arc::new(pki);
    let access = capstan_apiserver::access::access(capstan_apiserver::access::AccessOptions {
        key: pki.clone(),
        token_file: args.token_auth_file.clone(),
        jwks_uri: Some(format!(
            "https://{}:{}/openid/v1/jwks",
            bracket_v6(&advertise),
            args.secure_port
        )),
        allow_anonymous: args.anonymous_auth,
        client_certs: Some(
            pki.client_cert_check()
                .context("building the client certificate check")?,
        ),
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let (auth, enable) = access.into_parts();
    let addr = SocketAddr::new(args.bind_address, args.secure_port);
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!(
            "port {} is not available (listening on {addr})",
            args.secure_port
        )
    })?;
    let config = capstan_apiserver::Config {
        advertise_address: format!("{}:{}", bracket_v6(&advertise), args.secure_port),
        service_cidr: args.service_cluster_ip_range.clone(),
        node_port_range: parse_port_range(&args.service_node_port_range)?,
        audit_log: args.audit_log_path.clone(),
        etcd_servers: args.etcd_servers.clone(),
    };
    let api = ApiServer::new(store, auth, config)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    enable.enable(&api).await;
    api.kubelet
        .configure(&pki)
        .map_err(|e| anyhow::anyhow!("issuing the kubelet client certificate: {e}"))?;
    capstan_apiserver::namespace_defaults::spawn(&api, pki.ca_cert_pem().to_string());
    let tls = pki
        .server_tls_config(ClientAuth::Request)
        .context("building the TLS configuration")?;
    tracing::info!(%addr, kubeconfig = %kubeconfig.display(), "API server ready");
    // The scheduler and the controllers reach the API server in process, through its whole
    // pipeline, as the users their kubeconfigs in DATA_DIR/components name.
    let in_process = api.in_process();
    if !args.disable_controller_manager {
        let mut flags = args.controller_flags.clone();
        // The cluster CA signs approved certificate requests; volumes live with the data.
        let pki_dir = args.data_dir.join("pki");
        flags
            .cluster_signing_cert_file
            .get_or_insert(pki_dir.join("ca.crt"));
        flags
            .cluster_signing_key_file
            .get_or_insert(pki_dir.join("ca.key"));
        flags
            .local_storage_dir
            .get_or_insert(args.data_dir.join("storage"));
        let opts = flags.options(true);
        let admin = args.data_dir.join("admin.kubeconfig");
        tokio::spawn(async move {
            if let Err(e) = default_storage_class(&admin).await {
                tracing::warn!(error = %format!("{e:#}"), "creating the default StorageClass");
            }
        });
        // Its informers never read managedFields, and Kubernetes' controller manager drops
        // them from every object its informers keep: here the server leaves them out of the
        // watch events instead of the informers parsing them.
        let controllers = in_process
            .clone()
            .with_user_agent("kube-controller-manager")
            .trimming_managed_fields();
        let manager = controllers.client_as("system:kube-controller-manager", &[]);
        let tokens = controllers;
        let token_client: capstan_controllers::TokenClient = Arc::new(move |token: &str| {
            tokens
                .client_with_token(token)
                .map_err(|e| anyhow::anyhow!(e))
        });
        tokio::spawn(async move {
            if let Err(e) = capstan_controllers::run_with(manager, token_client, opts).await {
                tracing::error!(error = %format!("{e:#}"), "controller manager stopped");
            }
        });
    }
    if !args.disable_scheduler {
        let client = in_process
            .clone()
            .with_user_agent("kube-scheduler")
            .trimming_managed_fields()
            .client_as("system:kube-scheduler", &[]);
        tokio::spawn(async move {
            let cfg = capstan_scheduler::config::default_config();
            if let Err(e) = crate::scheduler_cmd::start_with(client, &cfg, true).await {
                tracing::error!(error = %format!("{e:#}"), "scheduler stopped");
            }
        });
    }
    let serve = Box::pin(capstan_apiserver::server::serve(
        listener, tls, api, shutdown,
    ));
    Ok(Started {
        server_url,
        kubeconfig,
        pki,
        in_process,
        serve,
    })
}

/// The `local-path` StorageClass, marked default, whose volumes the controller manager's
/// local-path provisioner makes in DATA_DIR/storage; created at start when missing, as k3s
/// deploys its local-path storage.
async fn default_storage_class(admin: &std::path::Path) -> anyhow::Result<()> {
    use kube::api::{Api, PostParams};
    let client = kube::Client::try_from(crate::scheduler_cmd::config(admin).await?)?;
    let classes: Api<k8s_openapi::api::storage::v1::StorageClass> = Api::all(client);
    let class = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "local-path", "annotations": {
            "storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "capstan.dev/local-path",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }))?;
    match classes.create(&PostParams::default(), &class).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The host's primary IPv4 address: the source address the kernel would pick for a route out.
/// A UDP "connect" only looks the route up; no packet is sent.
fn host_address() -> Option<String> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("10.255.255.255:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then(|| ip.to_string())
}

fn parse_port_range(s: &str) -> anyhow::Result<(u16, u16)> {
    let bad = || anyhow::anyhow!("--service-node-port-range {s:?} is not a range like 30000-32767");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let (a, b): (u16, u16) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok((a, b))
}

fn bracket_v6(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// This machine's name, lower-cased as a node name must be.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
