//! `capstan proxy`: kube-proxy. Makes Services reach their endpoints on this node, in one of
//! the userspace, iptables (default) or nftables modes, until SIGTERM or Ctrl-C — then removes
//! its rules. `--cleanup` removes the rules of every mode and exits.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context};
use capstan_proxy::runner::{self, Mode, ProxyOptions};

use crate::controller_manager_cmd::parse_go_duration;

#[derive(clap::Args, Debug)]
pub struct ProxyArgs {
    /// The kubeconfig to reach the API server with (in-cluster configuration when not given).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// userspace, iptables, nftables or ipvs (not available).
    #[arg(long, default_value = "iptables", value_parser = parse_mode)]
    pub proxy_mode: Mode,

    /// This node's name (the machine's host name by default).
    #[arg(long)]
    pub hostname_override: Option<String>,

    /// The pod network (comma-separated CIDRs): service traffic from outside it is
    /// masqueraded.
    #[arg(long)]
    pub cluster_cidr: Option<String>,

    /// The least time between two rule syncs (Go duration).
    #[arg(long, default_value = "100ms", value_parser = parse_go_duration)]
    pub min_sync_period: Duration,

    /// The most time between two rule syncs (Go duration).
    #[arg(long, default_value = "30s", value_parser = parse_go_duration)]
    pub sync_period: Duration,

    /// userspace mode: how long an idle UDP client keeps its endpoint (Go duration).
    #[arg(long, default_value = "250ms", value_parser = parse_go_duration)]
    pub udp_timeout: Duration,

    /// Remove the rules of every proxy mode, then exit.
    #[arg(long)]
    pub cleanup: bool,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse::<Mode>().map_err(|e| e.to_string())
}

impl ProxyArgs {
    fn options(&self) -> ProxyOptions {
        let defaults = ProxyOptions::default();
        ProxyOptions {
            node_name: self
                .hostname_override
                .as_deref()
                .map(|n| n.trim().to_lowercase())
                .filter(|n| !n.is_empty())
                .unwrap_or(defaults.node_name.clone()),
            mode: self.proxy_mode,
            cluster_cidr: self.cluster_cidr.clone().filter(|c| !c.trim().is_empty()),
            min_sync_period: self.min_sync_period,
            sync_period: self.sync_period.max(self.min_sync_period),
            udp_idle_timeout: self.udp_timeout,
            ..defaults
        }
    }
}

pub async fn run(args: ProxyArgs) -> anyhow::Result<()> {
    let opts = args.options();
    if args.cleanup {
        let node = capstan_proxy::NodeInfo {
            name: opts.node_name.clone(),
            ..Default::default()
        };
        let rt = tokio::runtime::Handle::current();
        let errors =
            tokio::task::spawn_blocking(move || runner::cleanup_modes(&node, None, rt)).await?;
        if !errors.is_empty() {
            return Err(anyhow!("cleanup failed: {}", errors.join("; ")));
        }
        eprintln!("capstan: removed the rules of every proxy mode");
        return Ok(());
    }
    runner::check_mode(opts.mode)?;
    let config = match &args.kubeconfig {
        Some(path) => crate::scheduler_cmd::config(path).await?,
        None => kube::Config::incluster().map_err(|_| {
            anyhow!("no kubeconfig: pass --kubeconfig PATH (not running in a pod either)")
        })?,
    };
    let client = capstan_runtime::client::client(config).context("building the API client")?;
    let mut signals = crate::node::Signals::new()?;
    let shutdown = async move {
        signals.recv().await;
        tracing::info!("stopping");
    };
    runner::run(opts, client, shutdown).await
}
