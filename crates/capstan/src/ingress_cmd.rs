//! `capstan ingress`: the Ingress controller (ingress-nginx's job) against an API server.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;

#[derive(clap::Args, Debug)]
pub struct IngressArgs {
    /// The kubeconfig to reach the API server with (default: $KUBECONFIG, ~/.kube/config, or
    /// the in-cluster service account when run as a pod).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The port plain HTTP is served on.
    #[arg(long, default_value_t = 80)]
    pub http_port: u16,

    /// The port HTTPS (HTTP/1.1 and HTTP/2) is served on.
    #[arg(long, default_value_t = 443)]
    pub https_port: u16,

    /// The port of /metrics (Prometheus) and /healthz.
    #[arg(long, default_value_t = 10254)]
    pub metrics_port: u16,

    /// The IngressClass whose Ingresses are served; its spec.controller must be
    /// `capstan.dev/ingress`.
    #[arg(long, default_value = "capstan")]
    pub ingress_class: String,

    /// The address written into each Ingress's status.loadBalancer (an IP or a host name;
    /// default: the InternalIP of --node-name, else this machine's first non-loopback
    /// address).
    #[arg(long)]
    pub publish_address: Option<String>,

    /// The Node this controller runs on (its InternalIP is the default publish address).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// The address the listeners bind.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
}

pub async fn run(args: IngressArgs) -> anyhow::Result<()> {
    let config = match &args.kubeconfig {
        Some(path) => crate::scheduler_cmd::config(path).await?,
        None => kube::Config::infer()
            .await
            .map_err(|e| anyhow::anyhow!("no kubeconfig: pass --kubeconfig PATH ({e})"))?,
    };
    let client = capstan_runtime::client::client(config).context("building the API client")?;
    let opts = capstan_ingress::Options {
        bind_address: args.bind_address,
        http_port: args.http_port,
        https_port: args.https_port,
        metrics_port: args.metrics_port,
        ingress_class: args.ingress_class,
        publish_address: args.publish_address,
        node_name: args.node_name,
        workers: 0,
    };
    capstan_ingress::run(opts, client, shutdown_signal()).await
}

/// SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
