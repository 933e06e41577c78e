//! TLS: certificates from `kubernetes.io/tls` Secrets (`tls.crt`, `tls.key`, PEM), chosen by
//! the client's SNI name: the host's own certificate, else a wildcard one (`*.example.com`
//! covers one label), else the default certificate (a `spec.tls` entry without hosts). A host
//! whose Secret is missing or invalid has no certificate: its handshakes fail, whatever the
//! default, while every other host keeps serving.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use crate::routes::Current;

/// The Secret type Ingress TLS needs.
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

/// A certificate and key from one Secret, with the names the certificate covers.
pub struct Cert {
    pub key: Arc<CertifiedKey>,
    /// DNS names of the subjectAltName extension (the subject's CN when there are none),
    /// lowercase.
    names: Vec<String>,
    /// notAfter, in seconds since the epoch.
    pub not_after: i64,
}

impl std::fmt::Debug for Cert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cert")
            .field("names", &self.names)
            .field("not_after", &self.not_after)
            .finish()
    }
}

impl Cert {
    /// Whether the certificate is valid for `host` (exactly, or through a wildcard name
    /// covering its first label). `host` may itself be a wildcard (`*.example.com`).
    pub fn covers(&self, host: &str) -> bool {
        self.names.iter().any(|n| {
            n == host
                || match (n.strip_prefix("*."), host.split_once('.')) {
                    (Some(suffix), Some((label, rest))) => !label.is_empty() && rest == suffix,
                    _ => false,
                }
        })
    }

    /// The names the certificate covers.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// Load the certificate chain and key of a TLS Secret.
pub fn load(secret: &Secret) -> Result<Cert, String> {
    let type_ = secret.type_.as_deref().unwrap_or("Opaque");
    if type_ != TLS_SECRET_TYPE {
        return Err(format!("is of type {type_}, not {TLS_SECRET_TYPE}"));
    }
    let data = secret.data.as_ref();
    let get = |k: &str| {
        data.and_then(|d| d.get(k))
            .map(|b| b.0.as_slice())
            .filter(|b| !b.is_empty())
            .ok_or_else(|| format!("has no {k}"))
    };
    load_pem(get("tls.crt")?, get("tls.key")?)
}

/// Load a PEM certificate chain (leaf first) and its PEM private key.
pub fn load_pem(crt: &[u8], key: &[u8]) -> Result<Cert, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(crt)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls.crt is not PEM certificates: {e}"))?;
    let Some(leaf) = chain.first() else {
        return Err("tls.crt holds no certificate".into());
    };
    let (names, not_after) = inspect(leaf)?;
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| format!("tls.key is not a PEM private key: {e}"))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("tls.key: unsupported private key: {e}"))?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(_) => return Err("tls.key does not match the certificate in tls.crt".into()),
    }
    Ok(Cert {
        key: Arc::new(certified),
        names,
        not_after,
    })
}

fn inspect(leaf: &CertificateDer<'_>) -> Result<(Vec<String>, i64), String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| format!("tls.crt: cannot parse the certificate: {e}"))?;
    let mut names: Vec<String> = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(s) => names.push(s.to_ascii_lowercase()),
                GeneralName::IPAddress(b) => match b.len() {
                    4 => {
                        let a: [u8; 4] = [b[0], b[1], b[2], b[3]];
                        names.push(std::net::Ipv4Addr::from(a).to_string())
                    }
                    16 => {
                        let mut a = [0u8; 16];
                        a.copy_from_slice(b);
                        names.push(std::net::Ipv6Addr::from(a).to_string())
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
    if names.is_empty() {
        for cn in cert.subject().iter_common_name() {
            if let Ok(s) = cn.as_str() {
                names.push(s.to_ascii_lowercase());
            }
        }
    }
    Ok((names, cert.validity().not_after.timestamp()))
}

/// Hosts to certificates. `None` marks a host whose certificate could not be loaded.
#[derive(Default, Debug)]
pub struct CertTable {
    exact: HashMap<String, Option<Arc<CertifiedKey>>>,
    /// `*.example.com` under `example.com`.
    wildcard: HashMap<String, Option<Arc<CertifiedKey>>>,
    default: Option<Arc<CertifiedKey>>,
}

impl CertTable {
    /// Give `host` (exact or `*.suffix`) its certificate unless it has one already; false if
    /// it had.
    pub fn insert(&mut self, host: &str, key: Option<Arc<CertifiedKey>>) -> bool {
        let map = match host.strip_prefix("*.") {
            Some(suffix) => (&mut self.wildcard, suffix),
            None => (&mut self.exact, host),
        };
        if map.0.contains_key(map.1) {
            return false;
        }
        map.0.insert(map.1.to_string(), key);
        true
    }

    /// Set the certificate for names no entry covers, unless one is set; false if it was.
    pub fn set_default(&mut self, key: Arc<CertifiedKey>) -> bool {
        if self.default.is_some() {
            return false;
        }
        self.default = Some(key);
        true
    }

    /// The certificate to present for an SNI name (None: no SNI).
    pub fn lookup(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let Some(name) = sni else {
            return self.default.clone();
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(entry) = self.exact.get(&name) {
            return entry.clone();
        }
        if let Some(entry) = wildcard_suffix(&name).and_then(|s| self.wildcard.get(s)) {
            return entry.clone();
        }
        self.default.clone()
    }

    /// Whether a rule host (exact or `*.suffix`) is listed in a TLS entry whose certificate
    /// loaded: plain HTTP requests for it are redirected to HTTPS.
    pub fn has_cert(&self, host: &str) -> bool {
        if let Some(suffix) = host.strip_prefix("*.") {
            return matches!(self.wildcard.get(suffix), Some(Some(_)));
        }
        match self.exact.get(host) {
            Some(entry) => entry.is_some(),
            None => matches!(
                wildcard_suffix(host).and_then(|s| self.wildcard.get(s)),
                Some(Some(_))
            ),
        }
    }
}

/// `example.com` for `foo.example.com` (the part a `*.example.com` wildcard covers); None
/// when the first label is empty or there is no dot.
pub fn wildcard_suffix(host: &str) -> Option<&str> {
    let (label, rest) = host.split_once('.')?;
    (!label.is_empty() && !rest.is_empty()).then_some(rest)
}

/// Picks certificates from the routing table in effect at handshake time.
#[derive(Debug)]
pub struct Resolver {
    current: Arc<Current>,
}

impl Resolver {
    pub fn new(current: Arc<Current>) -> Resolver {
        Resolver { current }
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.load().certs.lookup(hello.server_name())
    }
}

/// The HTTPS listener's configuration: certificates by SNI, ALPN h2 then http/1.1.
pub fn server_config(current: Arc<Current>) -> anyhow::Result<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow::anyhow!("TLS configuration: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Resolver::new(current)));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    /// A self-signed certificate for `names`: (cert PEM, key PEM).
    pub fn self_signed(names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let c = rcgen::generate_simple_self_signed(names).expect("rcgen");
        (c.cert.pem(), c.signing_key.serialize_pem())
    }

    pub fn secret(type_: &str, crt: &str, key: &str) -> Secret {
        Secret {
            type_: Some(type_.into()),
            data: Some(BTreeMap::from([
                ("tls.crt".to_string(), ByteString(crt.as_bytes().to_vec())),
                ("tls.key".to_string(), ByteString(key.as_bytes().to_vec())),
            ])),
            ..Default::default()
        }
    }

    #[test]
    fn loads_a_tls_secret_and_knows_its_names() {
        let (crt, key) = self_signed(&["a.example.com", "*.wild.example.com"]);
        let cert = load(&secret(TLS_SECRET_TYPE, &crt, &key)).expect("loads");
        assert!(cert.covers("a.example.com"));
        assert!(cert.covers("x.wild.example.com"));
        assert!(cert.covers("*.wild.example.com"));
        assert!(!cert.covers("wild.example.com"));
        assert!(!cert.covers("x.y.wild.example.com"));
        assert!(!cert.covers("b.example.com"));
        assert!(cert.not_after > 0);
    }

    #[test]
    fn rejects_bad_secrets_with_a_reason() {
        let (crt, key) = self_signed(&["a.example.com"]);
        let (_, other_key) = self_signed(&["b.example.com"]);
        let err = |s: &Secret| load(s).expect_err("rejected");
        assert!(err(&secret("Opaque", &crt, &key)).contains("not kubernetes.io/tls"));
        assert!(err(&secret(TLS_SECRET_TYPE, "", &key)).contains("no tls.crt"));
        assert!(err(&secret(TLS_SECRET_TYPE, "garbage", &key)).contains("no certificate"));
        assert!(err(&secret(TLS_SECRET_TYPE, &crt, "garbage")).contains("tls.key"));
        assert!(err(&secret(TLS_SECRET_TYPE, &crt, &other_key)).contains("does not match"));
        let truncated = &crt[..crt.len() / 2];
        let e = err(&secret(TLS_SECRET_TYPE, truncated, &key));
        assert!(e.contains("tls.crt"), "{e}");
        assert!(err(&Secret::default()).contains("Opaque"));
    }

    #[test]
    fn sni_picks_exact_then_wildcard_then_default_and_broken_hosts_fail() {
        let key = |n: &str| {
            let (c, k) = self_signed(&[n]);
            load_pem(c.as_bytes(), k.as_bytes()).unwrap().key
        };
        let (a, wild, def) = (key("a.example.com"), key("*.example.com"), key("default"));
        let mut t = CertTable::default();
        assert!(t.insert("a.example.com", Some(a.clone())));
        assert!(
            !t.insert("a.example.com", Some(wild.clone())),
            "first one stays"
        );
        assert!(t.insert("*.example.com", Some(wild.clone())));
        assert!(t.insert("broken.example.com", None));
        assert!(t.set_default(def.clone()));
        assert!(!t.set_default(a.clone()));
        let is = |got: Option<Arc<CertifiedKey>>, want: &Arc<CertifiedKey>| {
            got.is_some_and(|g| Arc::ptr_eq(&g, want))
        };
        assert!(is(t.lookup(Some("a.example.com")), &a));
        assert!(is(t.lookup(Some("A.Example.COM.")), &a));
        assert!(is(t.lookup(Some("b.example.com")), &wild));
        // A wildcard covers one label only.
        assert!(is(t.lookup(Some("x.b.example.com")), &def));
        assert!(is(t.lookup(Some("example.com")), &def));
        assert!(is(t.lookup(None), &def));
        // A host whose secret failed does not fall back to the wildcard or the default.
        assert!(t.lookup(Some("broken.example.com")).is_none());

        assert!(t.has_cert("a.example.com"));
        assert!(t.has_cert("c.example.com"));
        assert!(t.has_cert("*.example.com"));
        assert!(!t.has_cert("broken.example.com"));
        assert!(!t.has_cert("other.org"), "the default does not count");
    }
}
