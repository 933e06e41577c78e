//! `capstan controller-manager`: the controllers alone, against any API server (like
//! kube-controller-manager); `capstan server` runs the same controllers in process.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use capstan_controllers::Options;

/// The flags shared by `capstan controller-manager` and `capstan server`.
#[derive(clap::Args, Debug, Clone)]
pub struct ControllerFlags {
    /// Controllers to run: `*` for all, a name to add one, `-name` to leave one out
    /// (for example `*,-nodeipam`).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,

    /// The range pod addresses come from; nodeipam gives each node a slice of it.
    #[arg(long, default_value = "10.42.0.0/16")]
    pub cluster_cidr: String,

    /// The prefix length of each node's slice of --cluster-cidr.
    #[arg(long, default_value_t = 24)]
    pub node_cidr_mask_size: u8,

    /// How long a node may stay silent before it is marked not ready (Go duration, e.g. 40s).
    #[arg(long, default_value = "40s", value_parser = parse_go_duration)]
    pub node_monitor_grace_period: Duration,

    /// How often node health is checked.
    #[arg(long, default_value = "5s", value_parser = parse_go_duration)]
    pub node_monitor_period: Duration,

    /// Terminated pods kept before the oldest are deleted (0: never).
    #[arg(long, default_value_t = 12_500)]
    pub terminated_pod_gc_threshold: usize,

    /// The CA certificate (PEM) that signs approved CertificateSigningRequests
    /// (`capstan server`: its own cluster CA).
    #[arg(long, value_name = "PATH")]
    pub cluster_signing_cert_file: Option<PathBuf>,

    /// The CA's private key (PEM).
    #[arg(long, value_name = "PATH")]
    pub cluster_signing_key_file: Option<PathBuf>,

    /// The longest validity of a signed certificate.
    #[arg(long, default_value = "8760h", value_parser = parse_go_duration)]
    pub cluster_signing_duration: Duration,

    /// Where the local-path provisioner creates volumes for the default StorageClass
    /// (`capstan server`: DATA_DIR/storage).
    #[arg(long, value_name = "PATH")]
    pub local_storage_dir: Option<PathBuf>,

    /// How often each HorizontalPodAutoscaler is looked at.
    #[arg(long, default_value = "15s", value_parser = parse_go_duration)]
    pub horizontal_pod_autoscaler_sync_period: Duration,

    /// How long an autoscaler without its own scale-down window waits before scaling down
    /// (the highest recommendation of this window holds).
    #[arg(long, default_value = "5m", value_parser = parse_go_duration)]
    pub horizontal_pod_autoscaler_downscale_stabilization: Duration,

    /// How far from its target a metric may be before an autoscaler acts (0.1: 10 %).
    #[arg(long, default_value_t = 0.1)]
    pub horizontal_pod_autoscaler_tolerance: f64,

    /// How long after a pod starts its CPU samples may be skipped (see Kubernetes' HPA).
    #[arg(long, default_value = "5m", value_parser = parse_go_duration)]
    pub horizontal_pod_autoscaler_cpu_initialization_period: Duration,

    /// How long after a pod starts a not-ready pod still counts as starting.
    #[arg(long, default_value = "30s", value_parser = parse_go_duration)]
    pub horizontal_pod_autoscaler_initial_readiness_delay: Duration,
}

impl ControllerFlags {
    pub fn options(&self, leader_elect: bool) -> Options {
        let defaults = Options::default();
        Options {
            cluster_signing: self
                .cluster_signing_cert_file
                .clone()
                .zip(self.cluster_signing_key_file.clone()),
            cluster_signing_duration: self.cluster_signing_duration,
            local_storage_dir: self
                .local_storage_dir
                .clone()
                .unwrap_or(defaults.local_storage_dir.clone()),
            controllers: self.controllers.clone(),
            cluster_cidr: Some(self.cluster_cidr.clone()).filter(|c| !c.is_empty()),
            node_cidr_mask_size: self.node_cidr_mask_size,
            node_monitor_period: self.node_monitor_period,
            node_monitor_grace_period: self.node_monitor_grace_period,
            terminated_pod_gc_threshold: self.terminated_pod_gc_threshold,
            leader_elect,
            hpa_sync_period: self.horizontal_pod_autoscaler_sync_period,
            hpa_downscale_stabilization: self.horizontal_pod_autoscaler_downscale_stabilization,
            hpa_tolerance: self.horizontal_pod_autoscaler_tolerance,
            hpa_cpu_initialization_period: self.horizontal_pod_autoscaler_cpu_initialization_period,
            hpa_initial_readiness_delay: self.horizontal_pod_autoscaler_initial_readiness_delay,
            ..defaults
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct ControllerManagerArgs {
    /// The kubeconfig to reach the API server with.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: PathBuf,

    /// Hold the kube-system/kube-controller-manager lease before running.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,

    #[command(flatten)]
    pub flags: ControllerFlags,
}

pub async fn run(args: ControllerManagerArgs) -> anyhow::Result<()> {
    start(&args.kubeconfig, args.flags.options(args.leader_elect)).await
}

/// Run the controllers until they fail or lose their lease.
pub async fn start(kubeconfig: &Path, opts: Options) -> anyhow::Result<()> {
    if let Some(name) = opts.unknown_controller() {
        anyhow::bail!("--controllers: unknown controller {name:?}");
    }
    let config = crate::scheduler_cmd::config(kubeconfig)
        .await
        .with_context(|| format!("connecting with {}", kubeconfig.display()))?;
    capstan_controllers::run(config, opts).await
}

/// A Go duration: a sequence of numbers with units (`40s`, `1m30s`, `500ms`, `2h`).
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    capstan_controllers::util::parse_go_duration(text)
        .ok_or_else(|| format!("invalid duration {text:?}: expected e.g. 40s, 1m30s or 500ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("40s"), Ok(Duration::from_secs(40)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_go_duration("40").is_err());
        assert!(parse_go_duration("s").is_err());
        assert!(parse_go_duration("3x").is_err());
        assert!(parse_go_duration("").is_err());
        assert_eq!(
            parse_go_duration("1m0.5s"),
            Ok(Duration::from_millis(60_500))
        );
        assert!(parse_go_duration("1e400s").is_err());
    }
}
