//! `capstan token create`: a bootstrap token for `capstan agent` to join the cluster with,
//! as `kubeadm token create`.
//!
//! Besides the token's Secret (`kube-system/bootstrap-token-<id>`), it makes sure of what a
//! join needs, as `kubeadm init` does once: the `kube-public/cluster-info` ConfigMap with the
//! cluster's CA and address (readable without credentials, so a joining node can pin the CA by
//! its hash), and the bindings that let token holders ask for a kubelet client certificate
//! (approved automatically), let nodes renew theirs, and let nodes run the service proxy.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

/// The group bootstrap tokens made here put their holders in.
pub const NODE_TOKEN_GROUP: &str = "system:bootstrappers:capstan:default-node-token";

#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(clap::Subcommand, Debug)]
enum TokenCommand {
    /// Create a bootstrap token and print it (or the whole `capstan agent` command).
    Create(CreateArgs),
}

#[derive(clap::Args, Debug)]
struct CreateArgs {
    /// An admin kubeconfig (default: DATA_DIR/admin.kubeconfig of the default data directory).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,

    /// How long the token is valid (`24h`, `30m`, `0` for ever).
    #[arg(long, default_value = "24h", value_parser = parse_ttl)]
    ttl: Duration,

    /// A description stored with the token.
    #[arg(long, default_value = "")]
    description: String,

    /// Print the whole `capstan agent ...` command a node joins with, not only the token.
    #[arg(long)]
    print_join_command: bool,

    /// The API server's address as nodes reach it (default: the kubeconfig's server, which is
    /// loopback on the control-plane machine itself).
    #[arg(long, value_name = "URL")]
    server: Option<String>,
}

pub async fn run(args: TokenArgs) -> anyhow::Result<()> {
    match args.command {
        TokenCommand::Create(args) => create(args).await,
    }
}

async fn create(args: CreateArgs) -> anyhow::Result<()> {
    let path = args
        .kubeconfig
        .unwrap_or_else(|| crate::default_data_dir().join("admin.kubeconfig"));
    let config = crate::scheduler_cmd::config(&path).await?;
    let server = args
        .server
        .clone()
        .unwrap_or_else(|| config.cluster_url.to_string());
    let server = server.trim_end_matches('/').to_string();
    let ca_pem = read_ca(&path)?;
    let client = kube::Client::try_from(config).context("building the client")?;
    prepare_cluster(&client, &server, &ca_pem).await?;

    let id = random_string(6);
    let secret = random_string(16);
    let mut string_data = serde_json::Map::new();
    string_data.insert("token-id".into(), json!(id));
    string_data.insert("token-secret".into(), json!(secret));
    string_data.insert("usage-bootstrap-authentication".into(), json!("true"));
    string_data.insert("usage-bootstrap-signing".into(), json!("true"));
    string_data.insert("auth-extra-groups".into(), json!(NODE_TOKEN_GROUP));
    if !args.description.is_empty() {
        string_data.insert("description".into(), json!(args.description));
    }
    if !args.ttl.is_zero() {
        let expires = k8s_openapi::jiff::Timestamp::now()
            + k8s_openapi::jiff::SignedDuration::from_secs(args.ttl.as_secs() as i64);
        string_data.insert(
            "expiration".into(),
            json!(expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        );
    }
    let object: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": string_data,
    }))?;
    Api::<Secret>::namespaced(client, "kube-system")
        .create(&Default::default(), &object)
        .await
        .context("creating the bootstrap token Secret")?;
    let token = format!("{id}.{secret}");
    if args.print_join_command {
        let hash = capstan_pki::ca_cert_hash(ca_pem.as_bytes())?;
        println!("capstan agent --server {server} --token {token} --ca-cert-hash {hash}");
    } else {
        println!("{token}");
    }
    Ok(())
}

/// The cluster CA of a kubeconfig's current cluster, as PEM.
fn read_ca(path: &std::path::Path) -> anyhow::Result<String> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| anyhow::anyhow!("cannot read the kubeconfig {}: {e}", path.display()))?;
    let context = kc.current_context.clone().unwrap_or_default();
    let cluster_name = kc
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone());
    let cluster = kc
        .clusters
        .iter()
        .find(|c| Some(&c.name) == cluster_name.as_ref())
        .or(kc.clusters.first())
        .and_then(|c| c.cluster.as_ref())
        .context("the kubeconfig names no cluster")?;
    if let Some(data) = &cluster.certificate_authority_data {
        use base64::Engine;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .context("the kubeconfig's certificate-authority-data is not base64")?;
        return String::from_utf8(pem).context("the kubeconfig's CA is not PEM");
    }
    if let Some(file) = &cluster.certificate_authority {
        return std::fs::read_to_string(file).with_context(|| format!("reading {file}"));
    }
    anyhow::bail!(
        "the kubeconfig {} has no cluster CA to pin joining nodes to",
        path.display()
    )
}

/// What joining needs, made once (idempotent: applied server-side).
async fn prepare_cluster(client: &kube::Client, server: &str, ca_pem: &str) -> anyhow::Result<()> {
    use base64::Engine;
    let pp = PatchParams::apply("capstan-token").force();
    let ca_data = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    \
         certificate-authority-data: {ca_data}\n    server: {server}\ncontexts: []\n\
         current-context: \"\"\nusers: []\npreferences: {{}}\n"
    );
    let info = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cluster-info", "namespace": "kube-public"},
        "data": {"kubeconfig": kubeconfig},
    });
    Api::<ConfigMap>::namespaced(client.clone(), "kube-public")
        .patch("cluster-info", &pp, &Patch::Apply(&info))
        .await
        .context("writing kube-public/cluster-info")?;
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "capstan:bootstrap-signer-clusterinfo", "namespace": "kube-public"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
                   "resourceNames": ["cluster-info"]}],
    });
    Api::<Role>::namespaced(client.clone(), "kube-public")
        .patch(
            "capstan:bootstrap-signer-clusterinfo",
            &pp,
            &Patch::Apply(&role),
        )
        .await
        .context("writing the cluster-info Role")?;
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "capstan:bootstrap-signer-clusterinfo", "namespace": "kube-public"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "capstan:bootstrap-signer-clusterinfo"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": "system:anonymous"},
                     {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": "system:bootstrappers"}],
    });
    Api::<RoleBinding>::namespaced(client.clone(), "kube-public")
        .patch(
            "capstan:bootstrap-signer-clusterinfo",
            &pp,
            &Patch::Apply(&binding),
        )
        .await
        .context("writing the cluster-info RoleBinding")?;
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    for (name, role, group) in [
        (
            "capstan:kubelet-bootstrap",
            "system:node-bootstrapper",
            NODE_TOKEN_GROUP,
        ),
        (
            "capstan:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            NODE_TOKEN_GROUP,
        ),
        (
            "capstan:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
        // `capstan agent` runs the service proxy with the node's own credentials.
        (
            "capstan:node-proxier",
            "system:node-proxier",
            "system:nodes",
        ),
    ] {
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": group}],
        });
        bindings
            .patch(name, &pp, &Patch::Apply(&binding))
            .await
            .with_context(|| format!("writing the ClusterRoleBinding {name}"))?;
    }
    Ok(())
}

/// `len` characters of [a-z0-9] from the system's randomness.
fn random_string(len: usize) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

fn parse_ttl(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let (number, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: use e.g. 24h, 30m, 90s or 0"))?;
    let secs = match unit {
        "h" => n * 3600,
        "m" => n * 60,
        "s" | "" => n,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: use e.g. 24h, 30m, 90s or 0"
            ))
        }
    };
    Ok(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls() {
        assert_eq!(parse_ttl("24h"), Ok(Duration::from_secs(86400)));
        assert_eq!(parse_ttl("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_ttl("0"), Ok(Duration::ZERO));
        assert!(parse_ttl("1d").is_err());
        assert!(parse_ttl("h").is_err());
    }

    #[test]
    fn tokens_are_lowercase_alphanumeric() {
        let t = random_string(16);
        assert_eq!(t.len(), 16);
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    }
}
