//! The controller manager: Kubernetes' built-in controllers, each a level-triggered loop over
//! shared informers (one list-watch per resource for all of them) and a rate-limited work
//! queue, writing only through the API server.
//!
//! Each controller is a module with `pub fn start(ctx: &Ctx)`: it registers its informer
//! handlers (which only enqueue keys) and spawns workers that wait for the informers' first
//! list before they sync anything.

use std::sync::Arc;
use std::time::Duration;

use capstan_runtime::leader::LeaderElection;
use capstan_runtime::{Informers, Recorder};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;

mod credentials;
pub mod expectations;
mod intern;
mod podcache;
pub mod util;

pub mod certificates;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod garbagecollector;
pub mod job;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod persistentvolume;
pub mod podautoscaler;
pub mod podgc;
pub mod replicaset;
pub mod resourcequota;
pub mod statefulset;
pub mod ttlafterfinished;

/// How a controller starts: register informer handlers, spawn workers.
pub type StartFn = fn(&Ctx);

/// The controllers: the name `--controllers` takes, the service account whose credentials it
/// uses (Kubernetes' names and roles), and how it starts.
pub const CONTROLLERS: &[(&str, &str, StartFn)] = &[
    (
        "replicaset",
        "replicaset-controller",
        replicaset::start_replicaset,
    ),
    (
        "replicationcontroller",
        "replication-controller",
        replicaset::start_replicationcontroller,
    ),
    ("deployment", "deployment-controller", deployment::start),
    ("statefulset", "statefulset-controller", statefulset::start),
    ("daemonset", "daemon-set-controller", daemonset::start),
    ("job", "job-controller", job::start),
    ("cronjob", "cronjob-controller", cronjob::start),
    ("endpoint", "endpoint-controller", endpoints::start),
    (
        "endpointslice",
        "endpointslice-controller",
        endpointslice::start,
    ),
    ("namespace", "namespace-controller", namespace::start),
    (
        "garbagecollector",
        "generic-garbage-collector",
        garbagecollector::start,
    ),
    ("nodelifecycle", "node-controller", nodelifecycle::start),
    ("nodeipam", "node-controller", nodeipam::start),
    (
        "resourcequota",
        "resourcequota-controller",
        resourcequota::start,
    ),
    ("podgc", "pod-garbage-collector", podgc::start),
    (
        "ttl-after-finished",
        "ttl-after-finished-controller",
        ttlafterfinished::start,
    ),
    ("disruption", "disruption-controller", disruption::start),
    (
        "horizontalpodautoscaling",
        "horizontal-pod-autoscaler",
        podautoscaler::start,
    ),
    (
        "persistentvolume-binder",
        "persistent-volume-binder",
        persistentvolume::start_binder,
    ),
    (
        "csrapproving",
        "certificate-controller",
        certificates::start_approving,
    ),
    (
        "csrsigning",
        "certificate-controller",
        certificates::start_signing,
    ),
];

/// How the controllers run (the kube-controller-manager flags they mirror).
#[derive(Debug, Clone)]
pub struct Options {
    /// `--controllers`: `*` (every controller), names, and `-name` to leave one out.
    pub controllers: Vec<String>,
    /// `--cluster-cidr`: pod addresses nodeipam hands out per node (None: nodeipam idle).
    pub cluster_cidr: Option<String>,
    /// `--node-cidr-mask-size`.
    pub node_cidr_mask_size: u8,
    /// `--node-monitor-period`: how often node health is checked.
    pub node_monitor_period: Duration,
    /// `--node-monitor-grace-period`: silence after which a node is NotReady/Unknown.
    pub node_monitor_grace_period: Duration,
    /// `--terminated-pod-gc-threshold`.
    pub terminated_pod_gc_threshold: usize,
    /// Workers per controller (`--concurrent-*-syncs`).
    pub workers: usize,
    /// Hold the `kube-system/kube-controller-manager` lease before running.
    pub leader_elect: bool,
    /// `--cluster-signing-cert-file` / `--cluster-signing-key-file` (PEM): the CA that signs
    /// approved CertificateSigningRequests of the kubernetes.io/kube-apiserver-client(-kubelet)
    /// and kubelet-serving signers (None: csrsigning idle).
    pub cluster_signing: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// `--cluster-signing-duration`: the longest certificate csrsigning issues.
    pub cluster_signing_duration: Duration,
    /// Where the local-path provisioner of the default StorageClass makes volumes.
    pub local_storage_dir: std::path::PathBuf,
    /// Run each controller with its own service account's token (and so its own RBAC role),
    /// as `--use-service-account-credentials`; otherwise with the manager's credentials.
    pub use_service_account_credentials: bool,
    /// `--horizontal-pod-autoscaler-sync-period`: how often each autoscaler is looked at.
    pub hpa_sync_period: Duration,
    /// `--horizontal-pod-autoscaler-downscale-stabilization`: the scale-down window of
    /// autoscalers that set none.
    pub hpa_downscale_stabilization: Duration,
    /// `--horizontal-pod-autoscaler-tolerance`.
    pub hpa_tolerance: f64,
    /// `--horizontal-pod-autoscaler-cpu-initialization-period`.
    pub hpa_cpu_initialization_period: Duration,
    /// `--horizontal-pod-autoscaler-initial-readiness-delay`.
    pub hpa_initial_readiness_delay: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            controllers: vec!["*".into()],
            cluster_cidr: None,
            node_cidr_mask_size: 24,
            node_monitor_period: Duration::from_secs(5),
            node_monitor_grace_period: Duration::from_secs(40),
            terminated_pod_gc_threshold: 12_500,
            workers: 5,
            leader_elect: true,
            cluster_signing: None,
            cluster_signing_duration: Duration::from_secs(365 * 24 * 3600),
            local_storage_dir: "/var/lib/capstan/storage".into(),
            use_service_account_credentials: true,
            hpa_sync_period: Duration::from_secs(15),
            hpa_downscale_stabilization: Duration::from_secs(300),
            hpa_tolerance: 0.1,
            hpa_cpu_initialization_period: Duration::from_secs(300),
            hpa_initial_readiness_delay: Duration::from_secs(30),
        }
    }
}

impl Options {
    /// Whether the controller `name` runs (Kubernetes' `--controllers` semantics).
    pub fn enabled(&self, name: &str) -> bool {
        let mut star = false;
        for c in &self.controllers {
            if c == &format!("-{name}") {
                return false;
            }
            if c == name {
                return true;
            }
            star |= c == "*";
        }
        star
    }

    /// An unknown controller name in `--controllers`, if any.
    pub fn unknown_controller(&self) -> Option<&str> {
        self.controllers
            .iter()
            .map(|c| c.trim_start_matches('-'))
            .find(|c| *c != "*" && !CONTROLLERS.iter().any(|(n, _, _)| n == c))
    }
}

/// What every controller is given.
#[derive(Clone)]
pub struct Ctx {
    /// The controller's own client (its service account's credentials) for its writes.
    pub client: Client,
    /// The shared informers (read with the manager's credentials).
    pub informers: Arc<Informers>,
    pub opts: Arc<Options>,
}

impl Ctx {
    /// An event recorder reporting as `component` (e.g. `replicaset-controller`).
    pub fn recorder(&self, component: &str) -> Recorder {
        Recorder::new(self.client.clone(), component)
    }
}

/// Run the enabled controllers until leadership is lost (an error) or forever. `config` is the
/// manager's own connection (its informers use it; with `use_service_account_credentials` each
/// controller writes with a token of its service account in kube-system).
pub async fn run(config: kube::Config, opts: Options) -> anyhow::Result<()> {
    let client = capstan_runtime::client::client(config.clone())?;
    let token_client: TokenClient = Arc::new(move |token: &str| {
        let mut config = config.clone();
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.to_string().into()),
            ..Default::default()
        };
        // HTTP/2: one multiplexed connection per controller instead of one per request in
        // flight.
        capstan_runtime::client::client(config)
    });
    run_with(client, token_client, opts).await
}

/// Makes a client that authenticates with a service account token (a controller's own
/// credentials, see [`Options::use_service_account_credentials`]).
pub type TokenClient = Arc<dyn Fn(&str) -> anyhow::Result<Client> + Send + Sync>;

/// [`run`] over clients the caller makes: `client` is the manager's own, `token_client` makes
/// the controllers' (for instance in-process clients of an API server in the same process).
pub async fn run_with(
    client: Client,
    token_client: TokenClient,
    opts: Options,
) -> anyhow::Result<()> {
    if let Some(name) = opts.unknown_controller() {
        anyhow::bail!("--controllers: unknown controller {name:?}");
    }
    let mut lost = None;
    if opts.leader_elect {
        let le = LeaderElection {
            namespace: "kube-system".into(),
            name: "kube-controller-manager".into(),
            identity: format!(
                "{}_{}",
                capstan_runtime::events::hostname(),
                rand::random::<u64>()
            ),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        };
        lost = Some(le.acquire(client.clone()).await);
    }
    let informers = Informers::new(client.clone());
    informers.set_transform::<Pod>(podcache::trim_pod);
    informers.set_packing::<Pod>(podcache::pack);
    let opts = Arc::new(opts);
    for (name, account, start) in CONTROLLERS {
        if !opts.enabled(name) {
            continue;
        }
        let client = if opts.use_service_account_credentials {
            credentials::client_for(&client, &token_client, account).await?
        } else {
            client.clone()
        };
        tracing::debug!(controller = name, "starting");
        start(&Ctx {
            client,
            informers: informers.clone(),
            opts: opts.clone(),
        });
    }
    let ctx = Ctx {
        client,
        informers,
        opts,
    };
    ctx.informers.start();
    match lost {
        Some(mut rx) => {
            let _ = rx.wait_for(|held| !held).await;
            anyhow::bail!("leader election lost")
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controllers_flag_follows_kubernetes() {
        let o = |c: &[&str]| Options {
            controllers: c.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        assert!(o(&["*"]).enabled("job"));
        assert!(!o(&["*", "-job"]).enabled("job"));
        assert!(o(&["job"]).enabled("job"));
        assert!(!o(&["job"]).enabled("cronjob"));
        assert_eq!(o(&["*", "-nope"]).unknown_controller(), Some("nope"));
        assert_eq!(o(&["*", "-job"]).unknown_controller(), None);
    }
}
