//! `capstan kubelet`: the node agent alone, against any API server and any CRI runtime.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use capstan_kubelet::Options;
use k8s_openapi::api::core::v1::Taint;

use crate::controller_manager_cmd::parse_go_duration;

#[derive(clap::Args, Debug)]
pub struct KubeletArgs {
    /// The kubeconfig the kubelet talks to the API server with.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: PathBuf,

    /// The CRI runtime's socket.
    #[arg(long, default_value = "unix:///run/containerd/containerd.sock")]
    pub container_runtime_endpoint: String,

    /// The container runtime: `remote` (the CRI runtime at --container-runtime-endpoint) or
    /// `fake` (a hollow kubelet, as Kubernetes' kubemark: an in-memory runtime that runs
    /// nothing, the machine described by --hollow-* instead of probed, no server on --port
    /// unless --hollow-serve).
    #[arg(long, value_enum, default_value = "remote")]
    pub runtime: RuntimeKind,

    /// The CPUs a hollow node (--runtime fake) reports.
    #[arg(long, default_value_t = 32)]
    pub hollow_cpu: u64,

    /// The memory a hollow node reports (a quantity, e.g. 256Gi).
    #[arg(long, default_value = "256Gi", value_parser = parse_bytes)]
    pub hollow_memory: u64,

    /// The disk (ephemeral-storage) a hollow node reports.
    #[arg(long, default_value = "100Gi", value_parser = parse_bytes)]
    pub hollow_storage: u64,

    /// A hollow kubelet also serves its HTTPS API on --address/--port (as kubemark's do):
    /// resource metrics of the usage its pods' annotations ask for, pod logs, health.
    #[arg(long)]
    pub hollow_serve: bool,

    /// The node's name (the machine's host name by default).
    #[arg(long)]
    pub hostname_override: Option<String>,

    /// The kubelet's state: pod volumes, serving certificate.
    #[arg(long, default_value = "/var/lib/capstan/kubelet")]
    pub root_dir: PathBuf,

    /// Where container logs are written (Kubernetes: /var/log/pods).
    #[arg(long, default_value = "/var/log/pods")]
    pub pod_logs_dir: PathBuf,

    /// The image of every pod's sandbox.
    #[arg(long, default_value = "registry.k8s.io/pause:3.10")]
    pub pod_infra_container_image: String,

    /// The node's InternalIP (found from the default route otherwise).
    #[arg(long)]
    pub node_ip: Option<IpAddr>,

    /// The address the kubelet's HTTPS server listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub address: IpAddr,

    /// The port of the kubelet's HTTPS server.
    #[arg(long, default_value_t = 10250)]
    pub port: u16,

    /// The serving certificate (PEM); self-signed in ROOT_DIR/pki when not given.
    #[arg(long, value_name = "PATH")]
    pub tls_cert_file: Option<PathBuf>,

    /// The serving certificate's key (PEM).
    #[arg(long, value_name = "PATH")]
    pub tls_private_key_file: Option<PathBuf>,

    /// The CA (PEM) whose client certificates the kubelet's server accepts (the API server's
    /// kubelet client certificate); the CA of --kubeconfig when not given.
    #[arg(long, value_name = "PATH")]
    pub client_ca_file: Option<PathBuf>,

    /// The most pods this node runs.
    #[arg(long, default_value_t = 110)]
    pub max_pods: u32,

    /// How often node status is computed (Go duration).
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    pub node_status_update_frequency: Duration,

    /// How often node status is written even when nothing changed (Go duration; Kubernetes'
    /// nodeStatusReportFrequency).
    #[arg(long, default_value = "5m", value_parser = parse_go_duration)]
    pub node_status_report_frequency: Duration,

    /// The node Lease's duration; it is renewed every quarter of it.
    #[arg(long, default_value_t = 40)]
    pub node_lease_duration_seconds: i32,

    /// DNS servers for pods with dnsPolicy ClusterFirst (comma separated).
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Vec<IpAddr>,

    /// The cluster's DNS domain.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,

    /// A directory of static pod manifests.
    #[arg(long, value_name = "PATH")]
    pub pod_manifest_path: Option<PathBuf>,

    /// The CNI configuration directory of the runtime: the kubelet writes the node's
    /// bridge network there once the node has a podCIDR.
    #[arg(long, value_name = "PATH")]
    pub cni_conf_dir: Option<PathBuf>,

    /// The Linux bridge of the node's CNI network.
    #[arg(long, default_value = "cni0")]
    pub cni_bridge_name: String,

    /// Labels to register the node with (key=value,...).
    #[arg(long, value_delimiter = ',')]
    pub node_labels: Vec<String>,

    /// Taints to register the node with (key=value:Effect,...).
    #[arg(long, value_delimiter = ',')]
    pub register_with_taints: Vec<String>,

    /// Hard eviction thresholds (`memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%`
    /// by default; signals not named keep their default).
    #[arg(long, default_value = "", value_parser = capstan_kubelet::EvictionHard::parse)]
    pub eviction_hard: capstan_kubelet::EvictionHard,

    /// How often every pod is synced without a change (Go duration).
    #[arg(long, default_value = "1m", value_parser = parse_go_duration)]
    pub sync_frequency: Duration,
}

/// Which container runtime the kubelet drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    /// A CRI runtime over gRPC.
    Remote,
    /// The in-memory fake runtime of hollow kubelets.
    Fake,
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    capstan_kubelet::fake_runtime::parse_bytes(s)
        .ok_or_else(|| format!("{s:?} is not a quantity of bytes"))
}

fn parse_label(s: &str) -> anyhow::Result<(String, String)> {
    let (k, v) = s
        .split_once('=')
        .with_context(|| format!("node label {s:?}: want key=value"))?;
    Ok((k.to_string(), v.to_string()))
}

fn parse_taint(s: &str) -> anyhow::Result<Taint> {
    let (kv, effect) = s
        .rsplit_once(':')
        .with_context(|| format!("taint {s:?}: want key[=value]:Effect"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        anyhow::bail!("taint {s:?}: effect must be NoSchedule, PreferNoSchedule or NoExecute");
    }
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k.to_string(), Some(v.to_string())),
        None => (kv.to_string(), None),
    };
    Ok(Taint {
        key,
        value,
        effect: effect.to_string(),
        time_added: None,
    })
}

impl KubeletArgs {
    pub fn options(&self) -> anyhow::Result<Options> {
        let defaults = Options::default();
        let mut opts = Options {
            node_name: self
                .hostname_override
                .clone()
                .map(|n| n.to_lowercase())
                .unwrap_or(defaults.node_name.clone()),
            root_dir: self.root_dir.clone(),
            pod_logs_dir: self.pod_logs_dir.clone(),
            pod_infra_image: self.pod_infra_container_image.clone(),
            node_ip: self.node_ip,
            address: self.address,
            port: self.port,
            tls_cert_file: self.tls_cert_file.clone(),
            tls_private_key_file: self.tls_private_key_file.clone(),
            max_pods: self.max_pods,
            node_status_update_frequency: self.node_status_update_frequency,
            node_status_report_frequency: self.node_status_report_frequency,
            node_lease_duration_seconds: self.node_lease_duration_seconds,
            cluster_dns: self.cluster_dns.clone(),
            cluster_domain: self.cluster_domain.clone(),
            pod_manifest_path: self.pod_manifest_path.clone(),
            cni_conf_dir: self.cni_conf_dir.clone(),
            node_labels: self
                .node_labels
                .iter()
                .map(|l| parse_label(l))
                .collect::<anyhow::Result<BTreeMap<_, _>>>()?,
            register_with_taints: self
                .register_with_taints
                .iter()
                .map(|t| parse_taint(t))
                .collect::<anyhow::Result<Vec<_>>>()?,
            sync_frequency: self.sync_frequency,
            cni_bridge: self.cni_bridge_name.clone(),
            eviction_hard: self.eviction_hard,
            ..defaults
        };
        if self.runtime == RuntimeKind::Fake {
            if self.hollow_cpu == 0 {
                anyhow::bail!("--hollow-cpu must be at least 1");
            }
            let ip = self
                .node_ip
                .filter(|ip| !ip.is_unspecified())
                .unwrap_or_else(|| capstan_kubelet::fake_runtime::default_node_ip(&opts.node_name));
            opts.hollow = Some(Arc::new(capstan_kubelet::fake_runtime::Hollow::new(
                &opts.node_name,
                self.hollow_cpu,
                self.hollow_memory,
                self.hollow_storage,
                ip,
            )));
            // Nothing reads a CNI configuration: the fake runtime hands out pod addresses.
            opts.cni_conf_dir = None;
        }
        Ok(opts)
    }
}

pub async fn run(args: KubeletArgs) -> anyhow::Result<()> {
    let mut opts = args.options()?;
    let config = crate::scheduler_cmd::config(&args.kubeconfig).await?;
    opts.client_ca = match &args.client_ca_file {
        Some(path) => Some(
            std::fs::read(path)
                .with_context(|| format!("reading --client-ca-file {}", path.display()))?,
        ),
        None => config
            .root_cert
            .as_deref()
            .map(capstan_kubelet::server::pem_bundle),
    };
    // One multiplexed HTTP/2 connection, as client-go's: the kubelet writes for every pod at once.
    let client = capstan_runtime::client::client(config).context("building the API client")?;
    if args.runtime == RuntimeKind::Fake {
        tracing::info!(node = %opts.node_name, "hollow kubelet starting (fake runtime)");
        let k = capstan_kubelet::fake_runtime::start(client, opts)?;
        if args.hollow_serve {
            return capstan_kubelet::server::serve(k).await;
        }
        return std::future::pending().await;
    }
    let runtime = capstan_cri::Cri::connect(&args.container_runtime_endpoint)
        .map_err(|e| anyhow::anyhow!(e))?;
    tracing::info!(node = %opts.node_name, runtime = %args.container_runtime_endpoint, "kubelet starting");
    capstan_kubelet::run(client, Arc::new(runtime), opts).await
}
