//! The kubelet: the node agent. It registers its Node and keeps it and its Lease fresh
//! ([`node`]), runs the pods bound to the node through a CRI runtime ([`pods`], with
//! [`volumes`] and [`env`]), and serves logs, exec, port-forward and stats on port 10250
//! ([`server`]). It reaches the cluster only through the API server, and the runtime only
//! through [`capstan_cri::Runtime`].

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capstan_cri::Runtime;
use capstan_runtime::informer::Informer;
use capstan_runtime::Recorder;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::Client;
use tokio::sync::watch;

pub mod containerd;
pub mod env;
pub mod fake_runtime;
pub mod host_pods;
pub mod node;
pub mod pause;
pub mod pods;
pub mod probes;
pub mod server;
pub mod static_pods;
pub mod volumes;

/// The version the kubelet reports in `nodeInfo.kubeletVersion` (the API server's version).
pub const KUBELET_VERSION: &str = "v1.32.0";

/// The kubelet's settings (kubelet flags of the same names).
#[derive(Clone, Debug)]
pub struct Options {
    /// The Node's name (--hostname-override; the machine's host name by default).
    pub node_name: String,
    /// Where the kubelet keeps pod volumes, its serving certificate and other state
    /// (--root-dir). Pod directories are `ROOT/pods/<uid>`.
    pub root_dir: PathBuf,
    /// Where container logs go: `LOGS/<namespace>_<pod>_<uid>/<container>/<restart>.log`
    /// (Kubernetes: /var/log/pods).
    pub pod_logs_dir: PathBuf,
    /// The image of every pod's sandbox (--pod-infra-container-image).
    pub pod_infra_image: String,
    /// The address reported as the node's InternalIP (--node-ip; found from the default
    /// route otherwise).
    pub node_ip: Option<IpAddr>,
    /// Where the kubelet's HTTPS server listens (--address, --port).
    pub address: IpAddr,
    pub port: u16,
    /// The serving certificate and key (PEM); a self-signed pair in ROOT/pki otherwise.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// The CA (PEM) whose client certificates the kubelet's server accepts (--client-ca-file;
    /// `capstan kubelet` falls back to the CA of its kubeconfig). None: bearer tokens only.
    pub client_ca: Option<Vec<u8>>,
    /// The most pods this node runs (--max-pods).
    pub max_pods: u32,
    /// How often node status is computed and written when it changed
    /// (--node-status-update-frequency).
    pub node_status_update_frequency: Duration,
    /// How often node status is written even when unchanged.
    pub node_status_report_frequency: Duration,
    /// The node Lease's duration (--node-lease-duration-seconds); it is renewed every
    /// quarter of it (10 s by default).
    pub node_lease_duration_seconds: i32,
    /// The DNS servers and search domain given to pods with dnsPolicy ClusterFirst.
    pub cluster_dns: Vec<IpAddr>,
    pub cluster_domain: String,
    /// A directory of static pod manifests (--pod-manifest-path).
    pub pod_manifest_path: Option<PathBuf>,
    /// The CNI configuration directory the runtime reads; the kubelet writes a bridge
    /// network for node.spec.podCIDR there (None: leave the pod network to someone else).
    pub cni_conf_dir: Option<PathBuf>,
    /// Labels and taints the node registers with (--node-labels, --register-with-taints).
    pub node_labels: BTreeMap<String, String>,
    pub register_with_taints: Vec<Taint>,
    /// How often every pod is synced even without a change (--sync-frequency).
    pub sync_frequency: Duration,
    /// The Linux bridge of the node's CNI network (cni0).
    pub cni_bridge: String,
    /// Hard eviction thresholds (--eviction-hard).
    pub eviction_hard: EvictionHard,
    /// Components of this process the kubelet reports as mirror pods but never runs
    /// ([`host_pods`]).
    pub host_pods: Vec<host_pods::HostPod>,
    /// A hollow kubelet (`--runtime fake`): the node is this machine instead of the host,
    /// which is neither probed nor changed (no tmpfs mounts, no hostPath checks) and serves
    /// nothing on the kubelet port.
    pub hollow: Option<Arc<fake_runtime::Hollow>>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            node_name: capstan_runtime::events::hostname().to_lowercase(),
            root_dir: PathBuf::from("/var/lib/capstan/kubelet"),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            pod_infra_image: "registry.k8s.io/pause:3.10".into(),
            node_ip: None,
            address: IpAddr::from([0, 0, 0, 0]),
            port: 10250,
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca: None,
            max_pods: 110,
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
            node_lease_duration_seconds: 40,
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".into(),
            pod_manifest_path: None,
            cni_conf_dir: None,
            node_labels: BTreeMap::new(),
            register_with_taints: Vec::new(),
            sync_frequency: Duration::from_secs(60),
            cni_bridge: "cni0".into(),
            eviction_hard: EvictionHard::default(),
            host_pods: Vec::new(),
            hollow: None,
        }
    }
}

/// Hard eviction thresholds (--eviction-hard): past one, the node reports the matching
/// pressure condition; node allocatable also reserves them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvictionHard {
    /// memory.available, bytes.
    pub memory_available: u64,
    /// nodefs.available, a fraction of the filesystem (float32, as Kubernetes keeps it).
    pub nodefs_available: f32,
    /// nodefs.inodesFree, a fraction of the inodes.
    pub nodefs_inodes_free: f32,
}

impl Default for EvictionHard {
    /// Kubernetes' defaults on Linux: memory.available<100Mi, nodefs.available<10%,
    /// nodefs.inodesFree<5%.
    fn default() -> EvictionHard {
        EvictionHard {
            memory_available: 100 * 1024 * 1024,
            nodefs_available: 0.1,
            nodefs_inodes_free: 0.05,
        }
    }
}

impl EvictionHard {
    /// Parse `signal<quantity|percent,...` (for example `memory.available<200Mi,nodefs.available<5%`);
    /// signals not named keep their defaults.
    pub fn parse(text: &str) -> Result<EvictionHard, String> {
        let mut out = EvictionHard::default();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (signal, value) = item
                .split_once('<')
                .ok_or_else(|| format!("eviction threshold {item:?}: want signal<value"))?;
            let fraction = |v: &str| -> Result<f32, String> {
                let pct: f32 = v
                    .strip_suffix('%')
                    .and_then(|n| n.parse().ok())
                    .filter(|n: &f32| (0.0..=100.0).contains(n))
                    .ok_or_else(|| format!("eviction threshold {item:?}: want a percentage"))?;
                Ok(pct / 100.0)
            };
            match signal {
                "memory.available" => {
                    out.memory_available = parse_bytes(value)
                        .ok_or_else(|| format!("eviction threshold {item:?}: bad quantity"))?
                }
                "nodefs.available" => out.nodefs_available = fraction(value)?,
                "nodefs.inodesFree" => out.nodefs_inodes_free = fraction(value)?,
                "imagefs.available" | "imagefs.inodesFree" | "pid.available" => {}
                _ => {
                    return Err(format!(
                        "eviction threshold {item:?}: unknown signal {signal:?}"
                    ))
                }
            }
        }
        Ok(out)
    }
}

/// `100Mi`, `1G`, `1048576` as bytes (rounded up); None for a malformed or negative quantity.
fn parse_bytes(text: &str) -> Option<u64> {
    let nanos = capstan_api::validation::quantity::parse(text.trim())?.nanos;
    let bytes = nanos / 1_000_000_000 + i128::from(nanos % 1_000_000_000 > 0);
    u64::try_from(bytes).ok()
}

/// What every part of the kubelet shares.
pub struct Kubelet {
    pub opts: Options,
    /// The kubelet's own client (in a real cluster: user `system:node:NAME`, group
    /// `system:nodes`, so the Node authorizer and NodeRestriction admission govern it).
    pub client: Client,
    pub runtime: Arc<dyn Runtime>,
    /// The pods bound to this node (a watch with fieldSelector spec.nodeName=NAME).
    pub pods: Arc<Informer<Pod>>,
    /// Events with source `kubelet` on this node.
    pub recorder: Recorder,
    /// This node's Node object as last written or read by [`node`] (None until registered).
    pub node: watch::Sender<Option<Arc<Node>>>,
}

impl Kubelet {
    pub fn new(client: Client, runtime: Arc<dyn Runtime>, opts: Options) -> Arc<Kubelet> {
        let recorder = Recorder::with_host(client.clone(), "kubelet", &opts.node_name);
        Arc::new(Kubelet {
            opts,
            client,
            runtime,
            pods: Arc::new(Informer::new()),
            recorder,
            node: watch::channel(None).0,
        })
    }

    /// The directory of one pod's state: `ROOT/pods/<uid>`.
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.opts.root_dir.join("pods").join(uid)
    }
}

/// Run the kubelet until the process ends: start the pod watch, register the node, run the
/// pod workers and the server.
pub async fn run(client: Client, runtime: Arc<dyn Runtime>, opts: Options) -> anyhow::Result<()> {
    let k = Kubelet::new(client, runtime, opts);
    start(&k)?;
    if k.opts.hollow.is_some() {
        return std::future::pending().await;
    }
    server::serve(k).await
}

/// Start the pod watch, node registration and the pod workers as tasks, and return.
pub fn start(k: &Arc<Kubelet>) -> anyhow::Result<()> {
    std::fs::create_dir_all(&k.opts.root_dir)?;
    std::fs::create_dir_all(&k.opts.pod_logs_dir)?;
    let api: kube::Api<Pod> = kube::Api::all(k.client.clone());
    let selector = format!("spec.nodeName={}", k.opts.node_name);
    let stream = kube::runtime::watcher::watcher(
        api,
        kube::runtime::watcher::Config::default()
            .fields(&selector)
            .any_semantic(),
    );
    tokio::spawn(k.pods.clone().run(stream, None));

    tokio::spawn(node::run(k.clone()));
    pods::start(k.clone());
    host_pods::start(k);
    Ok(())
}

#[cfg(test)]
mod eviction_tests {
    use super::EvictionHard;

    #[test]
    fn eviction_hard_parses_and_keeps_defaults() {
        let e = EvictionHard::parse("memory.available<200Mi,nodefs.available<1%").unwrap();
        assert_eq!(e.memory_available, 200 << 20);
        assert!((e.nodefs_available - 0.01).abs() < 1e-6);
        assert!((e.nodefs_inodes_free - 0.05).abs() < 1e-6);
        assert!(EvictionHard::parse("disk<1%").is_err());
        assert!(EvictionHard::parse("nodefs.available<x").is_err());
        assert!(EvictionHard::parse("memory.available<lots").is_err());
    }
}
