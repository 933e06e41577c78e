//! `capstan dashboard`: the web UI (what kubernetes/dashboard or Headlamp give users), against
//! any API server. Users sign in with their own bearer token; the dashboard takes only the API
//! server's URL and CA from the kubeconfig, never its credentials.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::{anyhow, Context};
use base64::Engine;
use capstan_dashboard::{ApiTarget, Options, Tls};

#[derive(clap::Args, Debug)]
pub struct DashboardArgs {
    /// The kubeconfig whose current cluster names the API server and its CA (default:
    /// $KUBECONFIG, ~/.kube/config, or the in-cluster service account). Its user's
    /// credentials are not used.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The port to serve on.
    #[arg(long, default_value_t = 8443)]
    pub port: u16,

    /// The address to serve on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,

    /// Serve plain HTTP instead of HTTPS (tokens then cross the network in clear text, so
    /// only a loopback --bind-address is accepted).
    #[arg(long)]
    pub insecure_http: bool,

    /// A PEM certificate (chain) to serve HTTPS with, instead of a self-signed one made at
    /// start.
    #[arg(long, value_name = "PATH", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// The PEM private key of --tls-cert-file.
    #[arg(long, value_name = "PATH", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
}

pub async fn run(args: DashboardArgs) -> anyhow::Result<()> {
    let tls = match (&args.tls_cert_file, &args.tls_private_key_file) {
        _ if args.insecure_http => {
            if args.tls_cert_file.is_some() {
                anyhow::bail!("--insecure-http and --tls-cert-file do not go together");
            }
            if !args.bind_address.is_loopback() {
                anyhow::bail!(
                    "--insecure-http sends tokens in clear text: use it only with a loopback --bind-address (got {})",
                    args.bind_address
                );
            }
            Tls::Off
        }
        (Some(cert), Some(key)) => Tls::Files {
            cert: cert.clone(),
            key: key.clone(),
        },
        _ => Tls::SelfSigned,
    };
    let config = match &args.kubeconfig {
        Some(path) => crate::scheduler_cmd::config(path).await?,
        None => kube::Config::infer()
            .await
            .map_err(|e| anyhow!("no kubeconfig: pass --kubeconfig PATH ({e})"))?,
    };
    let api = api_target(&config)?;
    let opts = Options {
        bind: SocketAddr::new(args.bind_address, args.port),
        tls,
    };
    let dashboard = capstan_dashboard::Dashboard::bind(opts, api.clone()).await?;
    tracing::info!(
        "dashboard for the API server {} serving on {}",
        api.url,
        dashboard.url()
    );
    dashboard
        .serve(async {
            if let Err(e) = wait_for_signal().await {
                tracing::warn!("{e:#}");
                std::future::pending::<()>().await;
            }
        })
        .await
}

/// The API server's URL and CA from a kubeconfig's current cluster.
fn api_target(config: &kube::Config) -> anyhow::Result<ApiTarget> {
    if config.accept_invalid_certs {
        anyhow::bail!(
            "the kubeconfig's cluster skips TLS verification (insecure-skip-tls-verify): the dashboard needs its CA"
        );
    }
    let ca_pem = config.root_cert.as_ref().map(|certs| {
        certs
            .iter()
            .map(|der| pem("CERTIFICATE", der))
            .collect::<String>()
    });
    Ok(ApiTarget {
        url: config.cluster_url.to_string(),
        ca_pem,
    })
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
