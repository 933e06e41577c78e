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
    let bad = || format!("invalid duration {text:?}: expected e.g. 40s, 1m30s or 500ms");
    let mut rest = text.trim();
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..n].parse().map_err(|_| bad())?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += number * scale;
        rest = &rest[u..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
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
    }
}
