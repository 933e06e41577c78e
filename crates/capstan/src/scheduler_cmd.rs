//! `capstan scheduler`: the scheduler alone, against any API server (like kube-scheduler).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context};
use capstan_scheduler::config::{self, Config};
use capstan_scheduler::leader::LeaderElection;
use capstan_scheduler::run::Options;

#[derive(clap::Args, Debug)]
pub struct SchedulerArgs {
    /// The kubeconfig to reach the API server with (default: the configuration file's
    /// clientConnection.kubeconfig).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// A KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) file.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Hold the leader lease before scheduling (default: the configuration's
    /// leaderElection.leaderElect, true).
    #[arg(long)]
    pub leader_elect: Option<bool>,
}

pub async fn run(args: SchedulerArgs) -> anyhow::Result<()> {
    let cfg = match &args.config {
        Some(p) => config::load(p).map_err(|e| anyhow!("{}: {e}", p.display()))?,
        None => config::default_config(),
    };
    let kubeconfig = args
        .kubeconfig
        .clone()
        .or_else(|| {
            (!cfg.client_connection.kubeconfig.is_empty())
                .then(|| PathBuf::from(&cfg.client_connection.kubeconfig))
        })
        .ok_or_else(|| {
            anyhow!("no kubeconfig: pass --kubeconfig PATH or set clientConnection.kubeconfig")
        })?;
    let leader = args
        .leader_elect
        .unwrap_or(cfg.leader_election.leader_elect);
    start(&kubeconfig, &cfg, leader).await
}

/// Run the scheduler with this configuration until it fails or loses its lease.
pub async fn start(kubeconfig: &Path, cfg: &Config, leader_elect: bool) -> anyhow::Result<()> {
    start_with(client(kubeconfig).await?, cfg, leader_elect).await
}

/// [`start`] over a client the caller made (an in-process one inside `capstan server`).
pub async fn start_with(
    client: kube::Client,
    cfg: &Config,
    leader_elect: bool,
) -> anyhow::Result<()> {
    let mut profiles = config::build_profiles(cfg).map_err(|e| anyhow!(e))?;
    // A profile without its own percentageOfNodesToScore uses the global one.
    for p in &mut profiles {
        if p.percentage_of_nodes_to_score.is_none() && cfg.percentage_of_nodes_to_score > 0 {
            p.percentage_of_nodes_to_score = Some(cfg.percentage_of_nodes_to_score);
        }
    }
    let le = &cfg.leader_election;
    let leader = leader_elect.then(|| LeaderElection {
        namespace: le.resource_namespace.clone(),
        name: le.resource_name.clone(),
        identity: format!("{}_{}", capstan_scheduler::run::hostname(), uuid()),
        lease_duration: le.lease_duration.as_std(),
        renew_deadline: le.renew_deadline.as_std(),
        retry_period: le.retry_period.as_std(),
    });
    capstan_scheduler::run::run(
        client,
        Options {
            profiles,
            initial_backoff: Duration::from_secs(cfg.pod_initial_backoff_seconds.max(0) as u64),
            max_backoff: Duration::from_secs(cfg.pod_max_backoff_seconds.max(0) as u64),
            leader,
            bind_concurrency: 256,
        },
    )
    .await
}

async fn client(path: &Path) -> anyhow::Result<kube::Client> {
    // HTTP/2: the binder's many concurrent requests share one connection.
    capstan_runtime::client::client(config(path).await?).context("building the API client")
}

/// The connection a kubeconfig file describes.
pub(crate) async fn config(path: &Path) -> anyhow::Result<kube::Config> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| anyhow!("cannot read the kubeconfig {}: {e}", path.display()))?;
    kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| anyhow!("cannot use the kubeconfig {}: {e}", path.display()))
}

fn uuid() -> String {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}
