//! capstan's cluster PKI, laid out the way kubeadm and k3s lay theirs out.
//!
//! [`Pki::load_or_create`] keeps, in one directory (e.g. `DATA_DIR/pki`):
//!
//! | file | what |
//! | --- | --- |
//! | `ca.crt`, `ca.key` | cluster CA, ECDSA P-256, 10 years, CN `capstan-ca` |
//! | `apiserver.crt`, `apiserver.key` | API server serving certificate, signed by the CA |
//! | `sa.key`, `sa.pub` | service-account token signing key pair, RSA 2048 (RS256) |
//!
//! Private keys are PKCS#8 PEM files of mode 0600; certificates are 0644.
//! Every file is written atomically (temporary file, then rename).
//!
//! The CA is never replaced once it exists. The serving certificate is
//! issued again when its SANs no longer cover the options, when it is
//! within 30 days of expiry, or when its key file is missing or does not
//! match it. A file that exists but cannot be parsed is an error naming the
//! file; nothing is silently generated over it.
//!
//! Certificates for users and components come from
//! [`Pki::issue_client_cert`] (CN = user, one O per group, EKU clientAuth:
//! what the Kubernetes x509 authenticator reads), [`Pki::issue_serving_cert`]
//! and [`Pki::sign_csr`]. [`Pki::server_tls_config`] builds the API server's
//! rustls config, and [`identity_from_cert`] reads the user and groups from
//! a client certificate that rustls has verified. The [`kubeconfig`] module
//! writes and merges kubeconfig files.
//!
//! All cryptography uses ring (never aws-lc-rs), so rustls finds a single
//! crypto provider in the binary.

pub mod kubeconfig;

mod der;
mod fsutil;
mod sa;

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, CertificateSigningRequestDer, PrivateKeyDer, PrivatePkcs8KeyDer,
};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

pub use rustls;
pub use sa::ServiceAccountKey;

/// File names inside the PKI directory.
pub const CA_CERT_FILE: &str = "ca.crt";
pub const CA_KEY_FILE: &str = "ca.key";
pub const APISERVER_CERT_FILE: &str = "apiserver.crt";
pub const APISERVER_KEY_FILE: &str = "apiserver.key";
pub const SA_KEY_FILE: &str = "sa.key";
pub const SA_PUB_FILE: &str = "sa.pub";

/// Common name of the cluster CA.
pub const CA_COMMON_NAME: &str = "capstan-ca";
/// Common name of the API server serving certificate.
pub const APISERVER_COMMON_NAME: &str = "kube-apiserver";

const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
const APISERVER_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Leaf certificates start this far in the past, to tolerate clock skew.
const BACKDATE: Duration = Duration::from_secs(5 * 60);

const KEY_MODE: u32 = 0o600;
const CERT_MODE: u32 = 0o644;

/// Errors of this crate. Problems with a file name the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{}: {error}", path.display())]
    Io { path: PathBuf, error: io::Error },
    /// A file exists but its content is unusable (unparsable, mismatched, …).
    #[error("{}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    /// An argument or option is invalid (bad CIDR, bad CSR, unknown usage, …).
    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },
    /// A cryptographic operation failed.
    #[error("{0}")]
    Crypto(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn invalid(what: &'static str, reason: impl fmt::Display) -> Error {
    Error::Invalid {
        what,
        reason: reason.to_string(),
    }
}

fn crypto(context: &str, e: impl fmt::Display) -> Error {
    Error::Crypto(format!("{context}: {e}"))
}

/// What the PKI must cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PkiOptions {
    /// Cluster DNS domain; the serving cert covers `kubernetes.default.svc.<domain>`.
    pub cluster_domain: String,
    /// Service CIDR(s), comma-separated for dual stack ("10.43.0.0/16" or
    /// "10.43.0.0/16,fd00:43::/112"); the first IP of each is a SAN.
    pub service_cidr: String,
    /// More SANs for the serving certificate: IP addresses or DNS names.
    pub extra_sans: Vec<String>,
    /// The host name to cover; `None` reads the kernel's host name.
    pub hostname: Option<String>,
}

impl Default for PkiOptions {
    fn default() -> Self {
        Self {
            cluster_domain: "cluster.local".into(),
            service_cidr: "10.43.0.0/16".into(),
            extra_sans: Vec::new(),
            hostname: None,
        }
    }
}

impl PkiOptions {
    /// The DNS names and IPs the API server certificate must cover.
    pub fn apiserver_sans(&self) -> Result<(Vec<String>, Vec<IpAddr>)> {
        let domain = self.cluster_domain.trim_matches('.').to_ascii_lowercase();
        if domain.is_empty() {
            return Err(invalid("cluster domain", "empty"));
        }
        let mut names: Vec<String> = vec![
            "kubernetes".into(),
            "kubernetes.default".into(),
            "kubernetes.default.svc".into(),
            format!("kubernetes.default.svc.{domain}"),
            "localhost".into(),
        ];
        let mut ips: Vec<IpAddr> = vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()];
        let hostname = match &self.hostname {
            Some(h) => Some(h.clone()),
            None => detect_hostname(),
        };
        if let Some(h) = hostname {
            let h = h.trim().trim_end_matches('.').to_ascii_lowercase();
            if !h.is_empty() {
                names.push(h);
            }
        }
        for cidr in self.service_cidr.split(',').map(str::trim) {
            if !cidr.is_empty() {
                ips.push(first_service_ip(cidr)?);
            }
        }
        for san in &self.extra_sans {
            let san = san.trim();
            if san.is_empty() {
                continue;
            }
            match san.parse::<IpAddr>() {
                Ok(ip) => ips.push(ip),
                Err(_) => {
                    if !san.is_ascii() || san.contains(char::is_whitespace) {
                        return Err(invalid("SAN", format!("{san:?} is not a DNS name or IP")));
                    }
                    names.push(san.trim_end_matches('.').to_ascii_lowercase());
                }
            }
        }
        dedup(&mut names);
        dedup(&mut ips);
        Ok((names, ips))
    }
}

fn dedup<T: PartialEq>(v: &mut Vec<T>) {
    let mut i = 0;
    while i < v.len() {
        if v[..i].contains(&v[i]) {
            v.remove(i);
        } else {
            i += 1;
        }
    }
}

fn detect_hostname() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
}

/// The first usable IP of a CIDR (network address + 1): the ClusterIP of
/// the `kubernetes` Service for the service CIDR.
pub fn first_service_ip(cidr: &str) -> Result<IpAddr> {
    let bad = |reason: &str| invalid("service CIDR", format!("{cidr:?}: {reason}"));
    let (addr, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| bad("expected ADDRESS/PREFIX"))?;
    let addr: IpAddr = addr.trim().parse().map_err(|_| bad("bad address"))?;
    let prefix: u32 = prefix
        .trim()
        .parse()
        .map_err(|_| bad("bad prefix length"))?;
    match addr {
        IpAddr::V4(a) => {
            if prefix > 30 {
                return Err(bad("prefix too long"));
            }
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            Ok(Ipv4Addr::from((u32::from(a) & mask) + 1).into())
        }
        IpAddr::V6(a) => {
            if prefix > 126 {
                return Err(bad("prefix too long"));
            }
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            Ok(Ipv6Addr::from((u128::from(a) & mask) + 1).into())
        }
    }
}

/// Whether the API server asks clients for a certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// Never ask for a client certificate.
    None,
    /// Ask for one, verify it against the cluster CA if sent, but also let
    /// clients without one connect (token and anonymous requests).
    #[default]
    Optional,
    /// Ask for one, but let every client connect: a certificate that does not
    /// verify (another CA, expired) is left for the server to refuse per
    /// request with [`ClientCertCheck`], as Kubernetes answers such clients
    /// 401 rather than failing the handshake. The handshake still proves the
    /// client holds the certificate's key. This is what the API server uses.
    Request,
    /// A client certificate from the cluster CA is mandatory.
    Required,
}

/// A CA that issues certificates: the cluster CA inside [`Pki`], or one loaded on its own from
/// a certificate and key (the controller manager's `--cluster-signing-*-file`).
pub struct CaSigner {
    cert_der: CertificateDer<'static>,
    key: KeyPair,
    subject: Vec<u8>,
    not_after: OffsetDateTime,
}

impl CaSigner {
    /// Load a CA from its PEM certificate and key files.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<CaSigner> {
        let read = |p: &Path| {
            fsutil::read_optional(p)?.ok_or_else(|| Error::File {
                path: p.to_path_buf(),
                reason: "missing".into(),
            })
        };
        let cert = LoadedCert::parse(cert_path, &read(cert_path)?)?;
        let key = parse_key(key_path, &read(key_path)?)?;
        let (subject, not_after) = {
            let x = cert.x509();
            if !x.is_ca() {
                return Err(Error::File {
                    path: cert_path.to_path_buf(),
                    reason: "is not a CA certificate (basicConstraints CA:FALSE)".into(),
                });
            }
            if x.tbs_certificate.subject_pki.raw != key.subject_public_key_info() {
                return Err(Error::File {
                    path: key_path.to_path_buf(),
                    reason: format!("does not match {}", cert_path.display()),
                });
            }
            (
                x.tbs_certificate.subject.as_raw().to_vec(),
                x.validity().not_after.to_datetime(),
            )
        };
        Ok(CaSigner {
            cert_der: cert.der,
            key,
            subject,
            not_after,
        })
    }

    /// Signs a PKCS#10 certificate signing request (PEM) like the
    /// Kubernetes CSR signers do: the request's signature is checked, its
    /// subject (byte for byte) and SANs (DNS, IP, email, URI) are kept, its
    /// requested extensions are otherwise ignored, and key usages come from
    /// `usages` — Kubernetes `spec.usages` strings such as
    /// `"digital signature"`, `"key encipherment"`, `"client auth"`,
    /// `"server auth"`. Which usages a signer allows is the caller's policy.
    /// Returns the certificate PEM; the validity is capped at the CA's expiry.
    pub fn sign_csr(&self, csr_pem: &[u8], usages: &[&str], validity: Duration) -> Result<String> {
        use x509_parser::certification_request::X509CertificationRequest;
        use x509_parser::extensions::ParsedExtension;

        let csr_der = CertificateSigningRequestDer::from_pem_slice(csr_pem)
            .map_err(|e| invalid("CSR", format!("not a PEM CERTIFICATE REQUEST ({e})")))?;
        let (_, csr) = X509CertificationRequest::from_der(csr_der.as_ref())
            .map_err(|e| invalid("CSR", format!("cannot parse ({e})")))?;
        csr.verify_signature()
            .map_err(|e| invalid("CSR", format!("bad signature ({e})")))?;

        let info = &csr.certification_request_info;
        let public_key = rcgen::SubjectPublicKeyInfo::from_der(info.subject_pki.raw)
            .map_err(|e| invalid("CSR", format!("unsupported public key ({e})")))?;

        let mut params = CertificateParams::default();
        for usage in usages {
            match parse_usage(usage) {
                Some(Usage::Key(k)) if !params.key_usages.contains(&k) => params.key_usages.push(k),
                Some(Usage::Ext(e)) if !params.extended_key_usages.contains(&e) => {
                    params.extended_key_usages.push(e)
                }
                Some(_) => {}
                None => return Err(invalid("usage", format!("unknown usage {usage:?}"))),
            }
        }
        for ext in csr.requested_extensions().into_iter().flatten() {
            let ParsedExtension::SubjectAlternativeName(san) = ext else {
                continue;
            };
            for name in &san.general_names {
                let ia5 = |s: &str| {
                    rcgen::string::Ia5String::try_from(s)
                        .map_err(|e| invalid("CSR", format!("bad SAN {s:?}: {e}")))
                };
                params.subject_alt_names.push(match name {
                    GeneralName::DNSName(s) => SanType::DnsName(ia5(s)?),
                    GeneralName::RFC822Name(s) => SanType::Rfc822Name(ia5(s)?),
                    GeneralName::URI(s) => SanType::URI(ia5(s)?),
                    GeneralName::IPAddress(b) => SanType::IpAddress(
                        ip_from_bytes(b).ok_or_else(|| invalid("CSR", "bad IP address SAN"))?,
                    ),
                    other => return Err(invalid("CSR", format!("unsupported SAN type {other:?}"))),
                });
            }
        }
        let cert = self.sign_leaf(params, info.subject.as_raw(), &public_key, validity)?;
        Ok(pem_encode("CERTIFICATE", &cert))
    }

    fn leaf_not_after(&self, validity: Duration) -> OffsetDateTime {
        (now() + validity).min(self.not_after)
    }

    /// Issues a non-CA certificate with rcgen, then splices in the CA's
    /// exact subject as issuer and `subject` (a DER Name) and signs again.
    fn sign_leaf(
        &self,
        mut params: CertificateParams,
        subject: &[u8],
        public_key: &impl PublicKeyData,
        validity: Duration,
    ) -> Result<Vec<u8>> {
        if validity.is_zero() {
            return Err(invalid("validity", "zero"));
        }
        let start = now() - BACKDATE;
        params.not_before = start;
        params.not_after = self.leaf_not_after(validity);
        if params.not_after <= start + BACKDATE {
            return Err(Error::Crypto("the cluster CA has expired".into()));
        }
        params.serial_number = Some(random_serial()?);
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        // Placeholder subject, replaced below. An empty real subject keeps
        // an empty placeholder so rcgen marks the SAN extension critical.
        let empty_subject = der::read(subject)
            .map(|(n, _)| n.content.is_empty())
            .unwrap_or(false);
        params.distinguished_name = DistinguishedName::new();
        if !empty_subject {
            params.distinguished_name.push(DnType::CommonName, "-");
        }
        let issuer = Issuer::from_ca_cert_der(&self.cert_der, &self.key)
            .map_err(|e| crypto("reading the CA certificate", e))?;
        let cert = params
            .signed_by(public_key, &issuer)
            .map_err(|e| crypto("signing a certificate", e))?;
        der::resign_with_names(cert.der(), &self.subject, subject, &self.key).map_err(Error::Crypto)
    }
}

/// The cluster PKI: CA, API server serving pair and service-account keys.
pub struct Pki {
    dir: PathBuf,
    options: PkiOptions,
    ca_cert_pem: String,
    ca: CaSigner,
    apiserver_cert_pem: String,
    apiserver_key_pem: String,
    sa: ServiceAccountKey,
    written: Vec<PathBuf>,
}

impl fmt::Debug for Pki {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pki")
            .field("dir", &self.dir)
            .field("options", &self.options)
            .field("ca_not_after", &self.ca.not_after)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

/// A certificate file parsed far enough for our checks.
struct LoadedCert {
    der: CertificateDer<'static>,
    pem: String,
}

impl LoadedCert {
    fn parse(path: &Path, bytes: &[u8]) -> Result<Self> {
        let bad = |reason: String| Error::File {
            path: path.to_path_buf(),
            reason,
        };
        let der = CertificateDer::from_pem_slice(bytes)
            .map_err(|e| bad(format!("not a PEM certificate ({e})")))?;
        X509Certificate::from_der(&der)
            .map_err(|e| bad(format!("cannot parse certificate ({e})")))?;
        let pem = String::from_utf8(bytes.to_vec()).map_err(|_| bad("not valid UTF-8".into()))?;
        Ok(Self { der, pem })
    }

    fn x509(&self) -> X509Certificate<'_> {
        // Parsed successfully in `parse`.
        X509Certificate::from_der(&self.der)
            .expect("certificate parsed before")
            .1
    }
}

/// Reads a private key PEM (PKCS#8, SEC1 or PKCS#1) into an rcgen key pair.
fn parse_key(path: &Path, bytes: &[u8]) -> Result<KeyPair> {
    let bad = |reason: String| Error::File {
        path: path.to_path_buf(),
        reason,
    };
    let key = PrivateKeyDer::from_pem_slice(bytes)
        .map_err(|e| bad(format!("not a PEM private key ({e})")))?;
    let pkcs8 = match &key {
        PrivateKeyDer::Pkcs8(k) => k.secret_pkcs8_der().to_vec(),
        PrivateKeyDer::Pkcs1(k) => der::pkcs8_from_pkcs1(k.secret_pkcs1_der()),
        PrivateKeyDer::Sec1(k) => {
            let curve = der::sec1_curve(k.secret_sec1_der()).unwrap_or(der::OID_P256);
            if curve != der::OID_P256 && curve != der::OID_P384 {
                return Err(bad("unsupported elliptic curve".into()));
            }
            der::pkcs8_from_sec1(k.secret_sec1_der(), curve)
        }
        _ => return Err(bad("unsupported private key format".into())),
    };
    KeyPair::try_from(&PrivatePkcs8KeyDer::from(pkcs8))
        .map_err(|e| bad(format!("unusable private key ({e})")))
}

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

fn random_serial() -> Result<SerialNumber> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::Crypto("no randomness for a serial number".into()))?;
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01; // positive and full length
    Ok(SerialNumber::from_slice(&bytes))
}

fn to_system_time(t: OffsetDateTime) -> SystemTime {
    let secs = t.unix_timestamp();
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}

/// PEM with 64-column lines.
pub(crate) fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Kubernetes CertificateSigningRequest usages (`spec.usages`).
enum Usage {
    Key(KeyUsagePurpose),
    Ext(ExtendedKeyUsagePurpose),
}

fn parse_usage(u: &str) -> Option<Usage> {
    use ExtendedKeyUsagePurpose as E;
    use KeyUsagePurpose as K;
    let oid = |o: &[u64]| Usage::Ext(E::Other(o.to_vec()));
    Some(match u {
        "signing" | "digital signature" => Usage::Key(K::DigitalSignature),
        "content commitment" => Usage::Key(K::ContentCommitment),
        "key encipherment" => Usage::Key(K::KeyEncipherment),
        "key agreement" => Usage::Key(K::KeyAgreement),
        "data encipherment" => Usage::Key(K::DataEncipherment),
        "cert sign" => Usage::Key(K::KeyCertSign),
        "crl sign" => Usage::Key(K::CrlSign),
        "encipher only" => Usage::Key(K::EncipherOnly),
        "decipher only" => Usage::Key(K::DecipherOnly),
        "any" => Usage::Ext(E::Any),
        "server auth" => Usage::Ext(E::ServerAuth),
        "client auth" => Usage::Ext(E::ClientAuth),
        "code signing" => Usage::Ext(E::CodeSigning),
        "email protection" | "s/mime" => Usage::Ext(E::EmailProtection),
        "timestamping" => Usage::Ext(E::TimeStamping),
        "ocsp signing" => Usage::Ext(E::OcspSigning),
        "ipsec end system" => oid(&[1, 3, 6, 1, 5, 5, 7, 3, 5]),
        "ipsec tunnel" => oid(&[1, 3, 6, 1, 5, 5, 7, 3, 6]),
        "ipsec user" => oid(&[1, 3, 6, 1, 5, 5, 7, 3, 7]),
        "microsoft sgc" => oid(&[1, 3, 6, 1, 4, 1, 311, 10, 3, 3]),
        "netscape sgc" => oid(&[2, 16, 840, 1, 113730, 4, 1]),
        _ => return None,
    })
}

impl Pki {
    /// Loads the PKI from `dir`, generating whatever is missing (see the
    /// crate documentation for the rules).
    pub fn load_or_create(dir: &Path, options: PkiOptions) -> Result<Pki> {
        // Validate the options before touching the disk.
        let (want_names, want_ips) = options.apiserver_sans()?;
        fsutil::ensure_dir(dir)?;
        let mut written = Vec::new();

        // --- cluster CA ---
        let ca_crt_path = dir.join(CA_CERT_FILE);
        let ca_key_path = dir.join(CA_KEY_FILE);
        let ca_crt = fsutil::read_optional(&ca_crt_path)?;
        let ca_key = fsutil::read_optional(&ca_key_path)?;
        let (ca_cert, ca_key) = match (ca_crt, ca_key) {
            (Some(crt), Some(key)) => {
                let cert = LoadedCert::parse(&ca_crt_path, &crt)?;
                let key = parse_key(&ca_key_path, &key)?;
                {
                    let x = cert.x509();
                    if !x.is_ca() {
                        return Err(Error::File {
                            path: ca_crt_path,
                            reason: "is not a CA certificate (basicConstraints CA:FALSE)".into(),
                        });
                    }
                    if x.tbs_certificate.subject_pki.raw != key.subject_public_key_info() {
                        return Err(Error::File {
                            path: ca_key_path,
                            reason: format!("does not match {}", ca_crt_path.display()),
                        });
                    }
                }
                (cert, key)
            }
            (None, None) => {
                let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
                    .map_err(|e| crypto("generating the CA key", e))?;
                fsutil::write_atomic(&ca_key_path, key.serialize_pem().as_bytes(), KEY_MODE)?;
                written.push(ca_key_path.clone());
                let cert = self_signed_ca(&key, &ca_crt_path)?;
                written.push(ca_crt_path);
                (cert, key)
            }
            // A first start that died between writing the key and the
            // certificate: the key is the CA's identity, finish the job.
            (None, Some(key)) => {
                let key = parse_key(&ca_key_path, &key)?;
                let cert = self_signed_ca(&key, &ca_crt_path)?;
                written.push(ca_crt_path);
                (cert, key)
            }
            (Some(_), None) => {
                return Err(Error::File {
                    path: ca_key_path,
                    reason: format!(
                        "missing, but {} exists; the CA cannot sign without its key \
                         (restore the key, or remove both files to create a new CA)",
                        ca_crt_path.display()
                    ),
                })
            }
        };
        let (ca_subject, ca_not_after) = {
            let x = ca_cert.x509();
            (
                x.tbs_certificate.subject.as_raw().to_vec(),
                x.validity().not_after.to_datetime(),
            )
        };

        // --- service-account key pair ---
        let sa_key_path = dir.join(SA_KEY_FILE);
        let sa_pub_path = dir.join(SA_PUB_FILE);
        let sa_key = fsutil::read_optional(&sa_key_path)?;
        let sa_pub = fsutil::read_optional(&sa_pub_path)?;
        let sa = match (sa_key, sa_pub) {
            (Some(key), Some(public)) => ServiceAccountKey::load(
                &sa_key_path,
                &key,
                Some((sa_pub_path.as_path(), public.as_slice())),
            )?,
            (Some(key), None) => {
                let sa = ServiceAccountKey::load(&sa_key_path, &key, None)?;
                fsutil::write_atomic(&sa_pub_path, sa.public_key_pem().as_bytes(), CERT_MODE)?;
                written.push(sa_pub_path);
                sa
            }
            (None, None) => {
                let sa = ServiceAccountKey::generate()?;
                fsutil::write_atomic(&sa_key_path, sa.private_key_pem().as_bytes(), KEY_MODE)?;
                fsutil::write_atomic(&sa_pub_path, sa.public_key_pem().as_bytes(), CERT_MODE)?;
                written.push(sa_key_path);
                written.push(sa_pub_path);
                sa
            }
            (None, Some(_)) => {
                return Err(Error::File {
                    path: sa_key_path,
                    reason: format!(
                        "missing, but {} exists; tokens signed by that key could not be \
                         issued any more (restore the key, or remove both files)",
                        sa_pub_path.display()
                    ),
                })
            }
        };

        let mut pki = Pki {
            dir: dir.to_path_buf(),
            options,
            ca_cert_pem: ca_cert.pem.clone(),
            ca: CaSigner {
                cert_der: ca_cert.der,
                key: ca_key,
                subject: ca_subject,
                not_after: ca_not_after,
            },
            apiserver_cert_pem: String::new(),
            apiserver_key_pem: String::new(),
            sa,
            written,
        };

        // --- API server serving certificate ---
        let crt_path = dir.join(APISERVER_CERT_FILE);
        let key_path = dir.join(APISERVER_KEY_FILE);
        let crt = fsutil::read_optional(&crt_path)?;
        let key = fsutil::read_optional(&key_path)?;
        let existing = match (crt, key) {
            (Some(crt), Some(key)) => {
                let cert = LoadedCert::parse(&crt_path, &crt)?;
                let key_pair = parse_key(&key_path, &key)?;
                let key_pem = String::from_utf8(key).map_err(|_| Error::File {
                    path: key_path.clone(),
                    reason: "not valid UTF-8".into(),
                })?;
                pki.check_issued_by_ca(&crt_path, &cert)?;
                let x = cert.x509();
                let key_matches =
                    x.tbs_certificate.subject_pki.raw == key_pair.subject_public_key_info();
                let covers = covers_sans(&x, &want_names, &want_ips);
                let not_after = x.validity().not_after.to_datetime();
                // Renew when close to expiry, unless a new certificate would
                // not last longer (it is capped at the CA's own expiry).
                let renewal_helps = pki.ca.leaf_not_after(APISERVER_VALIDITY)
                    > not_after + time::Duration::hours(1);
                let expiring = not_after < now() + RENEW_BEFORE && renewal_helps;
                (key_matches && covers && !expiring).then_some((cert.pem, key_pem))
            }
            _ => None,
        };
        match existing {
            Some((cert_pem, key_pem)) => {
                pki.apiserver_cert_pem = cert_pem;
                pki.apiserver_key_pem = key_pem;
            }
            None => {
                let names: Vec<&str> = want_names.iter().map(String::as_str).collect();
                let (cert_pem, key_pem) = pki.issue_serving_cert_named(
                    APISERVER_COMMON_NAME,
                    &names,
                    &want_ips,
                    APISERVER_VALIDITY,
                )?;
                fsutil::write_atomic(&key_path, key_pem.as_bytes(), KEY_MODE)?;
                fsutil::write_atomic(&crt_path, cert_pem.as_bytes(), CERT_MODE)?;
                pki.written.push(key_path);
                pki.written.push(crt_path);
                pki.apiserver_cert_pem = cert_pem;
                pki.apiserver_key_pem = key_pem;
            }
        }
        Ok(pki)
    }

    fn check_issued_by_ca(&self, path: &Path, cert: &LoadedCert) -> Result<()> {
        let x = cert.x509();
        let ca = X509Certificate::from_der(&self.ca.cert_der)
            .expect("CA parsed before")
            .1;
        if x.tbs_certificate.issuer.as_raw() != self.ca.subject.as_slice()
            || x.verify_signature(Some(ca.public_key())).is_err()
        {
            return Err(Error::File {
                path: path.to_path_buf(),
                reason: format!(
                    "is not signed by the cluster CA {} (remove it to have a new one issued)",
                    self.dir.join(CA_CERT_FILE).display()
                ),
            });
        }
        Ok(())
    }

    /// The PKI directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The options this PKI was loaded with.
    pub fn options(&self) -> &PkiOptions {
        &self.options
    }

    /// Files generated or rewritten by [`Pki::load_or_create`] (for logging).
    pub fn written_files(&self) -> &[PathBuf] {
        &self.written
    }

    /// `ca.crt` as PEM.
    pub fn ca_cert_pem(&self) -> &str {
        &self.ca_cert_pem
    }

    /// `ca.crt` as DER.
    pub fn ca_cert_der(&self) -> &CertificateDer<'static> {
        &self.ca.cert_der
    }

    /// When the CA expires; issued certificates never outlive it.
    pub fn ca_not_after(&self) -> SystemTime {
        to_system_time(self.ca.not_after)
    }

    /// `apiserver.crt` as PEM.
    pub fn apiserver_cert_pem(&self) -> &str {
        &self.apiserver_cert_pem
    }

    /// `apiserver.key` as PEM (PKCS#8).
    pub fn apiserver_key_pem(&self) -> &str {
        &self.apiserver_key_pem
    }

    /// The service-account token key pair (`sa.key`/`sa.pub`).
    pub fn service_account_key(&self) -> &ServiceAccountKey {
        &self.sa
    }

    /// A client certificate for `user` in `groups`: CN=user, one O per
    /// group, EKU clientAuth, ECDSA P-256 key. Returns (cert PEM, key PEM).
    /// The validity is capped at the CA's expiry.
    pub fn issue_client_cert(
        &self,
        user: &str,
        groups: &[&str],
        validity: Duration,
    ) -> Result<(String, String)> {
        if user.is_empty() {
            return Err(invalid("user", "empty user name"));
        }
        let key = new_leaf_key()?;
        let mut params = CertificateParams::default();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let subject = der::name(user, groups);
        let cert = self.ca.sign_leaf(params, &subject, &key, validity)?;
        Ok((pem_encode("CERTIFICATE", &cert), key.serialize_pem()))
    }

    /// A serving certificate (EKU serverAuth) for DNS `names` and `ips`,
    /// with a new ECDSA P-256 key; CN is the first name (or IP). Returns
    /// (cert PEM, key PEM). The validity is capped at the CA's expiry.
    pub fn issue_serving_cert(
        &self,
        names: &[&str],
        ips: &[IpAddr],
        validity: Duration,
    ) -> Result<(String, String)> {
        let cn = match (names.first(), ips.first()) {
            (Some(n), _) => n.to_string(),
            (None, Some(ip)) => ip.to_string(),
            (None, None) => return Err(invalid("serving certificate", "no names and no IPs")),
        };
        self.issue_serving_cert_named(&cn, names, ips, validity)
    }

    fn issue_serving_cert_named(
        &self,
        common_name: &str,
        names: &[&str],
        ips: &[IpAddr],
        validity: Duration,
    ) -> Result<(String, String)> {
        let key = new_leaf_key()?;
        let mut params = CertificateParams::default();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        for n in names {
            let n = n.trim_end_matches('.');
            params.subject_alt_names.push(SanType::DnsName(
                n.try_into()
                    .map_err(|e| invalid("DNS name", format!("{n:?}: {e}")))?,
            ));
        }
        params
            .subject_alt_names
            .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
        let subject = der::name(common_name, &[]);
        let cert = self.ca.sign_leaf(params, &subject, &key, validity)?;
        Ok((pem_encode("CERTIFICATE", &cert), key.serialize_pem()))
    }

    /// Sign a PEM certificate signing request with the cluster CA (see [`CaSigner::sign_csr`]).
    pub fn sign_csr(&self, csr_pem: &[u8], usages: &[&str], validity: Duration) -> Result<String> {
        self.ca.sign_csr(csr_pem, usages, validity)
    }

    /// The API server's rustls config: `apiserver.crt`/`.key`, ALPN `h2`
    /// and `http/1.1`, and client certificates per `client_auth`.
    pub fn server_tls_config(&self, client_auth: ClientAuth) -> Result<Arc<ServerConfig>> {
        // The chain ends with the cluster CA, so that a joining node can pin the CA by its
        // hash from the handshake alone, before it sends any credential.
        let chain = format!(
            "{}\n{}",
            self.apiserver_cert_pem.trim_end(),
            self.ca_cert_pem()
        );
        self.server_tls_config_for(&chain, &self.apiserver_key_pem, client_auth)
    }

    /// A rustls server config for any certificate/key pair (e.g. a kubelet's
    /// serving pair), with client certificates checked against the cluster CA.
    ///
    /// When a client presents a certificate, rustls (webpki) verifies the
    /// chain to the cluster CA, the validity period and, when present, that
    /// the extended key usage allows clientAuth; a certificate failing any
    /// of these aborts the handshake. So [`identity_from_cert`] may be
    /// applied directly to the peer certificate of an established session.
    pub fn server_tls_config_for(
        &self,
        cert_pem: &str,
        key_pem: &str,
        client_auth: ClientAuth,
    ) -> Result<Arc<ServerConfig>> {
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("certificate", e))?;
        if chain.is_empty() {
            return Err(invalid("certificate", "no CERTIFICATE block"));
        }
        let key =
            PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| invalid("key", e))?;
        let provider = crypto_provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| crypto("TLS versions", e))?;
        let builder = match client_auth {
            ClientAuth::None => builder.with_no_client_auth(),
            ClientAuth::Request => {
                let inner = WebPkiClientVerifier::builder_with_provider(self.ca_roots(), provider)
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| crypto("client certificate verifier", e))?;
                builder.with_client_cert_verifier(Arc::new(AcceptAnyClientCert { inner }))
            }
            ClientAuth::Optional | ClientAuth::Required => {
                let mut verifier =
                    WebPkiClientVerifier::builder_with_provider(self.ca_roots(), provider);
                if client_auth == ClientAuth::Optional {
                    verifier = verifier.allow_unauthenticated();
                }
                let verifier = verifier
                    .build()
                    .map_err(|e| crypto("client certificate verifier", e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| crypto("server certificate", e))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// A rustls client config trusting only the cluster CA, presenting
    /// `identity` (cert PEM, key PEM) if given. No ALPN is set.
    pub fn client_tls_config(&self, identity: Option<(&str, &str)>) -> Result<Arc<ClientConfig>> {
        let builder = ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| crypto("TLS versions", e))?
            .with_root_certificates(self.ca_roots());
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert_pem, key_pem)) => {
                let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| invalid("certificate", e))?;
                let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
                    .map_err(|e| invalid("key", e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| crypto("client certificate", e))?
            }
        };
        Ok(Arc::new(config))
    }

    /// The check of a client certificate chain against the cluster CA, for
    /// connections accepted with [`ClientAuth::Request`].
    pub fn client_cert_check(&self) -> Result<ClientCertCheck> {
        let verifier =
            WebPkiClientVerifier::builder_with_provider(self.ca_roots(), crypto_provider())
                .build()
                .map_err(|e| crypto("client certificate verifier", e))?;
        Ok(ClientCertCheck { verifier })
    }

    fn ca_roots(&self) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        roots
            .add(self.ca.cert_der.clone())
            .expect("the CA certificate was parsed on load");
        Arc::new(roots)
    }
}

fn new_leaf_key() -> Result<KeyPair> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| crypto("generating a key", e))
}

fn self_signed_ca(key: &KeyPair, path: &Path) -> Result<LoadedCert> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let start = now() - time::Duration::hours(1);
    params.not_before = start;
    params.not_after = now() + CA_VALIDITY;
    params.serial_number = Some(random_serial()?);
    let cert = params
        .self_signed(key)
        .map_err(|e| crypto("self-signing the CA", e))?;
    let pem = cert.pem();
    fsutil::write_atomic(path, pem.as_bytes(), CERT_MODE)?;
    Ok(LoadedCert {
        der: cert.der().clone(),
        pem,
    })
}

fn ip_from_bytes(b: &[u8]) -> Option<IpAddr> {
    match b.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(b).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(b).ok()?)),
        _ => None,
    }
}

/// DNS names and IPs in a certificate's SAN extension.
fn cert_sans(x: &X509Certificate<'_>) -> (Vec<String>, Vec<IpAddr>) {
    let mut names = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = x.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => names.push(d.to_ascii_lowercase()),
                GeneralName::IPAddress(b) => ips.extend(ip_from_bytes(b)),
                _ => {}
            }
        }
    }
    (names, ips)
}

fn covers_sans(x: &X509Certificate<'_>, names: &[String], ips: &[IpAddr]) -> bool {
    let (have_names, have_ips) = cert_sans(x);
    names.iter().all(|n| have_names.contains(n)) && ips.iter().all(|ip| have_ips.contains(ip))
}

/// The DNS names and IPs of a certificate's SANs (PEM or DER input), for
/// diagnostics and tests.
pub fn certificate_sans(cert: &[u8]) -> Option<(Vec<String>, Vec<IpAddr>)> {
    let der = match CertificateDer::from_pem_slice(cert) {
        Ok(d) => d.as_ref().to_vec(),
        Err(_) => cert.to_vec(),
    };
    let (_, x) = X509Certificate::from_der(&der).ok()?;
    Some(cert_sans(&x))
}

/// The ring crypto provider, used for every rustls config made here.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The Kubernetes user of a client certificate: (CN, every O in order).
/// `None` if the certificate does not parse or has no (or an empty) CN.
///
/// This only reads the subject. It does not check the chain, validity
/// period or extended key usage: apply it to a peer certificate that
/// rustls has already verified ([`Pki::server_tls_config`] with
/// [`ClientAuth::Optional`] or [`ClientAuth::Required`] does that).
pub fn identity_from_cert(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    // As Go's x509 does: the last CN wins, every O is a group.
    let user = subject
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .last()?
        .to_string();
    if user.is_empty() {
        return None;
    }
    let groups = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .map(str::to_string)
        .collect();
    Some((user, groups))
}

/// Verifies client certificate chains against the cluster CA after the
/// handshake (see [`ClientAuth::Request`]).
#[derive(Debug, Clone)]
pub struct ClientCertCheck {
    verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>,
}

impl ClientCertCheck {
    /// The identity (CN, O values) of a chain (leaf first) issued by the
    /// cluster CA and valid now, or why it is not acceptable.
    pub fn identity(
        &self,
        chain: &[CertificateDer<'_>],
    ) -> std::result::Result<(String, Vec<String>), String> {
        let (leaf, intermediates) = chain.split_first().ok_or("no client certificate")?;
        self.verifier
            .verify_client_cert(leaf, intermediates, rustls::pki_types::UnixTime::now())
            .map_err(|e| format!("verifying certificate: {e}"))?;
        identity_from_cert(leaf.as_ref())
            .ok_or_else(|| "the certificate has no subject".to_string())
    }
}

/// Accepts any client certificate at the handshake (still checking the
/// handshake signature made with its key); see [`ClientAuth::Request`].
#[derive(Debug)]
struct AcceptAnyClientCert {
    inner: Arc<dyn rustls::server::danger::ClientCertVerifier>,
}

impl rustls::server::danger::ClientCertVerifier for AcceptAnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The pin of a CA certificate (PEM or DER) that joining nodes check, as kubeadm's
/// `--discovery-token-ca-cert-hash`: `sha256:` and the hex SHA-256 of its
/// SubjectPublicKeyInfo.
pub fn ca_cert_hash(cert: &[u8]) -> Result<String> {
    let der = match CertificateDer::from_pem_slice(cert) {
        Ok(d) => d.as_ref().to_vec(),
        Err(_) => cert.to_vec(),
    };
    let (_, x) =
        X509Certificate::from_der(&der).map_err(|e| crypto("parsing the CA certificate", e))?;
    let digest = ring::digest::digest(&ring::digest::SHA256, x.tbs_certificate.subject_pki.raw);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sha256:{hex}"))
}

/// A new private key (PEM) and a certificate signing request (PEM) for the client identity
/// `common_name` in `organizations`, as a kubelet asks for its client certificate.
pub fn client_csr(common_name: &str, organizations: &[&str]) -> Result<(String, String)> {
    let key = new_leaf_key()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    for o in organizations {
        params.distinguished_name.push(DnType::OrganizationName, *o);
    }
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    let csr = params
        .serialize_request(&key)
        .map_err(|e| crypto("making the certificate signing request", e))?;
    let pem = csr
        .pem()
        .map_err(|e| crypto("encoding the certificate signing request", e))?;
    Ok((key.serialize_pem(), pem))
}
