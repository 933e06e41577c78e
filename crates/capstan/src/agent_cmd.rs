//! `capstan agent`: join this machine to a cluster as a node — the kubelet (with a managed
//! containerd unless a runtime is named), the service proxy and the pod network routes.
//!
//! The first start bootstraps the node's identity as Kubernetes' kubelet TLS bootstrap does:
//! with a bootstrap token (`capstan token create`) it reads `kube-public/cluster-info`,
//! checks the cluster CA against `--ca-cert-hash`, sends a CertificateSigningRequest for
//! `system:node:NAME` (signer `kubernetes.io/kube-apiserver-client-kubelet`, approved by the
//! controller manager), and keeps the issued certificate in DATA_DIR/kubelet.kubeconfig. Later
//! starts reuse it and need no token.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Api;
use serde_json::json;

use crate::node::{Component, NodeFlags, Progress, Running, Signals};

#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    /// The API server, e.g. https://10.0.0.1:6443.
    #[arg(long, value_name = "URL")]
    server: String,

    /// A bootstrap token (`capstan token create`); needed on the first start only.
    #[arg(long, env = "CAPSTAN_TOKEN", hide_env_values = true)]
    token: Option<String>,

    /// The pin of the cluster CA (`sha256:...`, printed by `capstan token create
    /// --print-join-command`); needed with --token.
    #[arg(long, value_name = "sha256:HEX")]
    ca_cert_hash: Option<String>,

    /// Where the node keeps its credentials, kubelet state and managed containerd
    /// (default: the capstan data directory's `agent`).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,

    #[command(flatten)]
    node: NodeFlags,

    /// How Services reach their endpoints: iptables, nftables or userspace (ipvs needs a
    /// kernel with IP_VS).
    #[arg(long, default_value = "iptables")]
    proxy_mode: String,

    /// The cluster's pod CIDR (the controller manager's --cluster-cidr): traffic between pods
    /// isn't masqueraded, traffic to services from outside it is.
    #[arg(long, value_name = "CIDR")]
    cluster_cidr: Option<String>,

    /// The cluster DNS server(s) pods resolve names with.
    #[arg(long, value_name = "IP", value_delimiter = ',')]
    cluster_dns: Vec<std::net::IpAddr>,

    /// The cluster's DNS domain.
    #[arg(long, default_value = "cluster.local")]
    cluster_domain: String,

    /// The pod network between nodes: vxlan (routes through the address of each node on a
    /// connected network, a VXLAN overlay to the others), host-gw (routes only) or none
    /// (another network plugin does it).
    #[arg(long, default_value = "vxlan")]
    pod_network: String,
}

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    pod_network_mode(&args.pod_network)?;
    let progress = Progress::new();
    let default_dir = crate::default_data_dir().join("agent");
    let data_dir = args.data_dir.clone().unwrap_or_else(|| default_dir.clone());
    crate::datadir::prepare(&data_dir)?;
    let server = args.server.trim_end_matches('/').to_string();
    let node_name = args
        .node
        .node_name
        .clone()
        .map(|n| n.to_lowercase())
        .unwrap_or_else(|| capstan_kubelet::Options::default().node_name);
    let kubeconfig = data_dir.join("kubelet.kubeconfig");
    if !kubeconfig.exists() {
        let token = args.token.as_deref().context(
            "this node has no credentials yet: pass --token (from `capstan token create`) and \
             --ca-cert-hash",
        )?;
        bootstrap(
            &server,
            token,
            args.ca_cert_hash.as_deref(),
            &node_name,
            &kubeconfig,
        )
        .await?;
        progress.step("node credentials issued", &kubeconfig.display().to_string());
    }
    let config = crate::scheduler_cmd::config(&kubeconfig).await?;
    let ca_pem = ca_of(&kubeconfig)?;
    let client = capstan_runtime::client::client(config).context("building the node's client")?;
    client
        .apiserver_version()
        .await
        .with_context(|| format!("the API server at {server} does not answer"))?;
    progress.step("API server reached", &server);

    let mut signals = Signals::new()?;
    let mut running = Running::default();
    let outcome = tokio::select! {
        r = bring_up(&args, &data_dir, &default_dir, client, &ca_pem, &progress, &mut running) => r,
        _ = signals.recv() => Err(anyhow::anyhow!("interrupted while starting")),
    };
    if outcome.is_ok() {
        eprintln!("capstan agent: node {node_name} is Ready (Ctrl-C stops it)");
        signals.recv().await;
    }
    eprintln!("capstan agent: stopping");
    tokio::spawn(async move {
        signals.recv().await;
        eprintln!("capstan agent: stopping at once (second signal)");
        std::process::exit(130);
    });
    crate::node::shutdown(running).await;
    outcome?;
    eprintln!("capstan agent: stopped");
    std::process::exit(0)
}

/// `--pod-network`: how pods on other nodes are reached (None: not by capstan).
fn pod_network_mode(value: &str) -> anyhow::Result<Option<capstan_proxy::podnet::Mode>> {
    Ok(match value {
        "vxlan" => Some(capstan_proxy::podnet::Mode::Vxlan),
        "host-gw" => Some(capstan_proxy::podnet::Mode::HostGw),
        "none" => None,
        other => anyhow::bail!("--pod-network {other:?}: use vxlan, host-gw or none"),
    })
}

async fn bring_up(
    args: &AgentArgs,
    data_dir: &Path,
    default_dir: &Path,
    client: kube::Client,
    ca_pem: &str,
    progress: &Progress,
    running: &mut Running,
) -> anyhow::Result<()> {
    let (endpoint, cni_conf_dir) =
        crate::node::start_runtime(&args.node, data_dir, default_dir, progress, running).await?;
    let mut opts =
        crate::node::kubelet_options(&args.node, data_dir, default_dir, ca_pem, cni_conf_dir);
    opts.cluster_dns = args.cluster_dns.clone();
    opts.cluster_domain = args.cluster_domain.clone();
    let node_name = opts.node_name.clone();
    let since =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(1);
    crate::node::start_kubelet(client.clone(), &endpoint, opts, running)?;

    if let Some(mode) = pod_network_mode(&args.pod_network)? {
        let opts = capstan_proxy::podnet::Options {
            node_name: node_name.clone(),
            cluster_cidr: args.cluster_cidr.clone(),
            netns: None,
            mode,
        };
        let c = client.clone();
        running.components.push(Component::spawn(
            "the pod network",
            move |stop| async move {
                if let Err(e) = capstan_proxy::podnet::run(c, opts, stop).await {
                    tracing::error!("pod network: {e:#}");
                }
            },
        ));
    }
    crate::node::start_proxy(
        client.clone(),
        &node_name,
        &args.proxy_mode,
        args.cluster_cidr.clone(),
        running,
    )?;
    progress.step("proxy started", &args.proxy_mode);

    crate::node::wait_node_ready(
        &client,
        &node_name,
        since,
        progress,
        running,
        &format!("kubectl describe node {node_name}"),
    )
    .await
}

/// The cluster CA whose hash is `pin`, from the certificate chain the API server at `server`
/// presents (capstan's API server ends its chain with the cluster CA). Nothing is sent but a
/// TLS handshake.
async fn discover_ca(server: &str, pin: &str) -> anyhow::Result<String> {
    use capstan_pki::rustls;
    use std::sync::{Arc, Mutex};

    /// Accepts any chain, keeping it: the pin decides afterwards.
    #[derive(Debug)]
    struct Record {
        chain: Mutex<Vec<Vec<u8>>>,
        provider: Arc<rustls::crypto::CryptoProvider>,
    }
    impl rustls::client::danger::ServerCertVerifier for Record {
        fn verify_server_cert(
            &self,
            end_entity: &rustls::pki_types::CertificateDer<'_>,
            intermediates: &[rustls::pki_types::CertificateDer<'_>],
            _server_name: &rustls::pki_types::ServerName<'_>,
            _ocsp: &[u8],
            _now: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            let mut chain = vec![end_entity.to_vec()];
            chain.extend(intermediates.iter().map(|c| c.to_vec()));
            *self.chain.lock().unwrap_or_else(|e| e.into_inner()) = chain;
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &rustls::pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &rustls::pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    let authority = server
        .strip_prefix("https://")
        .with_context(|| format!("--server {server:?} must be an https:// URL"))?
        .split('/')
        .next()
        .unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && p.parse::<u16>().is_ok() => {
            (h.to_string(), p.parse::<u16>().unwrap_or(443))
        }
        _ => (authority.to_string(), 443),
    };
    if host.is_empty() {
        anyhow::bail!("--server {server:?} has no host");
    }
    let provider = capstan_pki::crypto_provider();
    let record = Arc::new(Record {
        chain: Mutex::new(Vec::new()),
        provider: provider.clone(),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .dangerous()
        .with_custom_certificate_verifier(record.clone())
        .with_no_client_auth();
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let name = rustls::pki_types::ServerName::try_from(bare.clone())
        .with_context(|| format!("--server host {host:?}"))?;
    let tcp = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect((bare.as_str(), port)),
    )
    .await
    .map_err(|_| anyhow::anyhow!("connecting to {server} timed out"))?
    .with_context(|| format!("connecting to {server}"))?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .with_context(|| format!("TLS handshake with {server}"))?;
    let chain = record
        .chain
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for der in &chain {
        if let Ok(hash) = capstan_pki::ca_cert_hash(der) {
            if hash.eq_ignore_ascii_case(pin.trim()) {
                use base64::Engine;
                let b64 = base64::engine::general_purpose::STANDARD.encode(der);
                let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
                for line in b64.as_bytes().chunks(64) {
                    pem.push_str(std::str::from_utf8(line).unwrap_or_default());
                    pem.push('\n');
                }
                pem.push_str("-----END CERTIFICATE-----\n");
                return Ok(pem);
            }
        }
    }
    let presented: Vec<String> = chain
        .iter()
        .filter_map(|der| capstan_pki::ca_cert_hash(der).ok())
        .collect();
    anyhow::bail!(
        "no certificate that {server} presents has hash {pin} (it presents {}): refusing to \
         join (wrong server, or a stale --ca-cert-hash)",
        presented.join(", ")
    )
}

/// The kubelet TLS bootstrap: a client certificate for `system:node:NAME`, written with the
/// cluster CA into a kubeconfig at `out`.
async fn bootstrap(
    server: &str,
    token: &str,
    ca_hash: Option<&str>,
    node_name: &str,
    out: &Path,
) -> anyhow::Result<()> {
    if !token_is_well_formed(token) {
        anyhow::bail!(
            "--token must look like abcdef.0123456789abcdef (from `capstan token create`)"
        );
    }
    let ca_hash = ca_hash.context(
        "--ca-cert-hash is needed with --token, to check that the server is the cluster's \
         (`capstan token create --print-join-command` prints it)",
    )?;
    // Discovery: the cluster CA from the server's TLS handshake, pinned by its hash before
    // any credential is sent.
    let ca_pem = discover_ca(server, ca_hash).await?;
    use base64::Engine;

    // The certificate request, as the bootstrap token's user.
    let client = client_from_yaml(&kubeconfig_yaml(server, &ca_pem, Some(token), None)).await?;
    let user = format!("system:node:{node_name}");
    let (key_pem, csr_pem) = capstan_pki::client_csr(&user, &["system:nodes"])?;
    let csrs: Api<CertificateSigningRequest> = Api::all(client);
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "node-csr-"},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(&csr_pem),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"],
        },
    }))?;
    let created = csrs
        .create(&Default::default(), &csr)
        .await
        .context("sending the node's certificate signing request")?;
    let name = created.metadata.name.clone().unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(120);
    let cert_pem = loop {
        let current = csrs
            .get(&name)
            .await
            .with_context(|| format!("reading the certificate signing request {name}"))?;
        let status = current.status.unwrap_or_default();
        if let Some(c) = status
            .conditions
            .iter()
            .flatten()
            .find(|c| (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True")
        {
            anyhow::bail!(
                "the certificate signing request {name} was {}: {}",
                c.type_.to_lowercase(),
                c.message.clone().unwrap_or_default()
            );
        }
        if let Some(cert) = status.certificate.filter(|c| !c.0.is_empty()) {
            break String::from_utf8(cert.0).context("the issued certificate is not PEM")?;
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "the certificate signing request {name} was not approved and signed within 2 \
                 minutes: is the controller manager running?"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let yaml = kubeconfig_yaml(server, &ca_pem, None, Some((&user, &cert_pem, &key_pem)));
    write_private(out, yaml.as_bytes())
}

fn token_is_well_formed(token: &str) -> bool {
    let Some((id, secret)) = token.split_once('.') else {
        return false;
    };
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    ok(id, 6) && ok(secret, 16)
}

/// A kubeconfig for `server` with the cluster CA, and a token or a client certificate.
fn kubeconfig_yaml(
    server: &str,
    ca_pem: &str,
    token: Option<&str>,
    cert: Option<(&str, &str, &str)>,
) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let cluster = format!("certificate-authority-data: {}", b64(ca_pem));
    let (user_name, user) = match (token, cert) {
        (_, Some((name, cert, key))) => (
            name.to_string(),
            format!(
                "client-certificate-data: {}\n    client-key-data: {}",
                b64(cert),
                b64(key)
            ),
        ),
        (Some(t), None) => ("bootstrap".to_string(), format!("token: {t}")),
        (None, None) => ("anonymous".to_string(), "{}".to_string()),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: capstan\n  cluster:\n    server: \
         {server}\n    {cluster}\ncontexts:\n- name: capstan\n  context:\n    cluster: capstan\n    \
         user: \"{user_name}\"\ncurrent-context: capstan\nusers:\n- name: \"{user_name}\"\n  user:\n    \
         {user}\n"
    )
}

async fn client_from_yaml(yaml: &str) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::from_yaml(yaml)
        .map_err(|e| anyhow::anyhow!("building a kubeconfig: {e}"))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| anyhow::anyhow!("building a kubeconfig: {e}"))?;
    kube::Client::try_from(config).context("building a client")
}

/// The CA (PEM) of a kubeconfig written by [`bootstrap`].
fn ca_of(path: &Path) -> anyhow::Result<String> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let data = kc
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority_data.clone())
        .with_context(|| format!("{} has no cluster CA", path.display()))?;
    use base64::Engine;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .with_context(|| format!("the CA in {} is not base64", path.display()))?;
    String::from_utf8(pem).with_context(|| format!("the CA in {} is not PEM", path.display()))
}

fn write_private(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(data)
        .and_then(|_| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_for_shape() {
        assert!(token_is_well_formed("abcdef.0123456789abcdef"));
        assert!(!token_is_well_formed("abcdef0123456789abcdef"));
        assert!(!token_is_well_formed("ABCDEF.0123456789abcdef"));
        assert!(!token_is_well_formed("abcdef.0123"));
    }

    #[test]
    fn kubeconfigs_parse() {
        for yaml in [
            kubeconfig_yaml(
                "https://10.0.0.1:6443",
                "-----BEGIN CERTIFICATE-----\n",
                Some("abcdef.0123456789abcdef"),
                None,
            ),
            kubeconfig_yaml(
                "https://10.0.0.1:6443",
                "-----BEGIN CERTIFICATE-----\n",
                None,
                Some(("system:node:a", "CERT", "KEY")),
            ),
        ] {
            let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
            assert_eq!(kc.current_context.as_deref(), Some("capstan"));
            assert_eq!(kc.auth_infos.len(), 1);
        }
    }
}
