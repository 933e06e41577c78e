//! The dashboard's serving certificate: made at start, or read from files.

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::Tls;

/// The server configuration (HTTP/2 and HTTP/1.1 by ALPN), and the certificate's PEM when it
/// was made here.
pub(crate) fn server_config(
    tls: &Tls,
    bind: IpAddr,
) -> anyhow::Result<(Arc<rustls::ServerConfig>, Option<String>)> {
    let (chain, key, made) = match tls {
        Tls::Off => return Err(anyhow!("TLS is off")),
        Tls::SelfSigned => {
            let certified = rcgen::generate_simple_self_signed(subject_alt_names(bind))
                .context("making the dashboard's self-signed certificate")?;
            let pem = certified.cert.pem();
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                certified.signing_key.serialize_der(),
            ));
            (vec![certified.cert.der().clone()], key, Some(pem))
        }
        Tls::Files { cert, key } => {
            let chain = CertificateDer::pem_file_iter(cert)
                .with_context(|| format!("cannot read {}", cert.display()))?
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("cannot read the certificates in {}", cert.display()))?;
            if chain.is_empty() {
                anyhow::bail!("{} holds no PEM certificate", cert.display());
            }
            let key_der = PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("cannot read a PEM private key from {}", key.display()))?;
            (chain, key_der, None)
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the dashboard's certificate and key do not go together")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((Arc::new(config), made))
}

/// localhost, the loopback addresses, the bind address and this host's name.
fn subject_alt_names(bind: IpAddr) -> Vec<String> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if !bind.is_unspecified() && !bind.is_loopback() {
        names.push(bind.to_string());
    }
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        let plain = host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        if !host.is_empty() && host != "localhost" && plain {
            names.push(host.to_string());
        }
    }
    names
}
