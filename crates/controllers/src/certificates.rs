//! The CertificateSigningRequest controllers (Kubernetes' pkg/controller/certificates):
//!
//! - **csrapproving** approves kubelet client certificate requests
//!   (`kubernetes.io/kube-apiserver-client-kubelet`) whose requestor the authorizer allows to
//!   ask for one: `create` on `certificatesigningrequests/selfnodeclient` when a node renews
//!   its own certificate (the request's user is the certificate's common name), or on
//!   `certificatesigningrequests/nodeclient` (a bootstrapping node), each asked with a
//!   SubjectAccessReview on behalf of the requestor.
//! - **csrsigning** signs approved requests of the built-in signers
//!   (`kube-apiserver-client`, `kube-apiserver-client-kubelet`, `kubelet-serving` and the
//!   legacy `legacy-unknown`) with the cluster signing CA, after the signer's checks of the
//!   request's subject, subject alternative names and usages; a request the signer refuses
//!   gets a `Failed` condition (reason `SignerValidationFailure`) and is never signed.
//!
//! Requests are PKCS#10 PEM. Reading their subject and subject alternative names needs only a
//! small DER walk (below); signing, which checks the request's signature, is `capstan-pki`'s.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use capstan_pki::rustls::pki_types::pem::PemObject;
use capstan_pki::rustls::pki_types::CertificateSigningRequestDer;
use capstan_pki::CaSigner;
use capstan_runtime::{Change, Informer, Queue};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::ByteString;
use kube::api::PostParams;
use kube::{Api, Client};

use crate::{util, Ctx};

pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
pub const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

const DIGITAL_SIGNATURE: &str = "digital signature";
const KEY_ENCIPHERMENT: &str = "key encipherment";
const CLIENT_AUTH: &str = "client auth";
const SERVER_AUTH: &str = "server auth";

/// The shortest certificate the signer issues, whatever `expirationSeconds` asks.
const MIN_DURATION: Duration = Duration::from_secs(10 * 60);
/// Certificates at least this long start five minutes in the past and end five minutes
/// early, as Kubernetes' signer backdates them; shorter ones end exactly `duration` from now.
const SHORT_LIVED: Duration = Duration::from_secs(8 * 3600);
const BACKDATE: Duration = Duration::from_secs(5 * 60);

// ---------------------------------------------------------------------------------------------
// Approving

/// A kind of request the approver recognizes and the permission its requestor needs.
struct Recognizer {
    recognize: fn(&CertificateSigningRequest, &CsrInfo) -> bool,
    subresource: &'static str,
    message: &'static str,
}

const RECOGNIZERS: &[Recognizer] = &[
    Recognizer {
        recognize: is_self_node_client_cert,
        subresource: "selfnodeclient",
        message: "Auto approving self kubelet client certificate after SubjectAccessReview.",
    },
    Recognizer {
        recognize: is_node_client_cert,
        subresource: "nodeclient",
        message: "Auto approving kubelet client certificate after SubjectAccessReview.",
    },
];

/// Start csrapproving.
pub fn start_approving(ctx: &Ctx) {
    let csrs = ctx.informers.get::<CertificateSigningRequest>();
    let queue = Queue::new("csrapproving");
    enqueue_changes(&csrs, &queue);
    let client = ctx.client.clone();
    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        csrs.wait_synced().await;
        queue.run_workers(workers, move |key| {
            let csrs = csrs.clone();
            let client = client.clone();
            async move { approve(&client, &csrs, &key).await }
        });
    });
}

fn enqueue_changes(csrs: &Informer<CertificateSigningRequest>, queue: &Arc<Queue>) {
    let q = queue.clone();
    csrs.on_change(move |c| {
        if let Change::Add(o) | Change::Update { new: o, .. } = c {
            if let Some(name) = o.metadata.name.as_deref() {
                q.add(name);
            }
        }
    });
}

async fn approve(
    client: &Client,
    csrs: &Informer<CertificateSigningRequest>,
    name: &str,
) -> anyhow::Result<()> {
    let Some(csr) = csrs.get("", name) else {
        return Ok(());
    };
    if has_certificate(&csr) {
        return Ok(());
    }
    let (approved, denied) = approval(&csr);
    if approved || denied {
        return Ok(());
    }
    let info =
        parse_csr(&csr.spec.request.0).map_err(|e| anyhow!("unable to parse csr {name:?}: {e}"))?;
    let mut tried = Vec::new();
    for r in RECOGNIZERS {
        if !(r.recognize)(&csr, &info) {
            continue;
        }
        tried.push(r.subresource);
        if !authorize(client, &csr, r.subresource).await? {
            continue;
        }
        let mut csr = (*csr).clone();
        let status = csr.status.get_or_insert_with(Default::default);
        status
            .conditions
            .get_or_insert_with(Vec::new)
            .push(CertificateSigningRequestCondition {
                type_: "Approved".into(),
                status: "True".into(),
                reason: Some("AutoApproved".into()),
                message: Some(r.message.into()),
                ..Default::default()
            });
        let api: Api<CertificateSigningRequest> = Api::all(client.clone());
        api.replace_subresource("approval", name, &PostParams::default(), &csr)
            .await
            .context("error updating approval for csr")?;
        return Ok(());
    }
    if !tried.is_empty() {
        // Retried with back-off: the requestor may be granted the permission later.
        return Err(anyhow!(
            "recognized csr {name:?} as [{}] but subject access review was not approved",
            tried.join(" ")
        ));
    }
    Ok(())
}

/// Ask the authorizer whether the request's author may create the `subresource` of
/// certificatesigningrequests.
async fn authorize(
    client: &Client,
    csr: &CertificateSigningRequest,
    subresource: &str,
) -> anyhow::Result<bool> {
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: csr.spec.username.clone(),
            uid: csr.spec.uid.clone(),
            groups: csr.spec.groups.clone(),
            extra: csr.spec.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                verb: Some("create".into()),
                subresource: Some(subresource.into()),
                version: Some("*".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let out = api
        .create(&PostParams::default(), &sar)
        .await
        .context("creating a SubjectAccessReview")?;
    Ok(out.status.is_some_and(|s| s.allowed))
}

fn usages(csr: &CertificateSigningRequest) -> BTreeSet<&str> {
    csr.spec
        .usages
        .iter()
        .flatten()
        .map(String::as_str)
        .collect()
}

fn is_node_client_cert(csr: &CertificateSigningRequest, info: &CsrInfo) -> bool {
    csr.spec.signer_name == KUBE_APISERVER_CLIENT_KUBELET
        && validate_kubelet_client(info, &usages(csr)).is_ok()
}

fn is_self_node_client_cert(csr: &CertificateSigningRequest, info: &CsrInfo) -> bool {
    csr.spec.username.as_deref() == Some(info.common_name.as_str())
        && is_node_client_cert(csr, info)
}

fn has_certificate(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

/// Whether the request carries an Approved and a Denied condition (of any status, as
/// Kubernetes' `GetCertApprovalCondition` reads them).
fn approval(csr: &CertificateSigningRequest) -> (bool, bool) {
    let conditions = csr.status.as_ref().and_then(|s| s.conditions.as_ref());
    let has = |t: &str| conditions.into_iter().flatten().any(|c| c.type_ == t);
    (has("Approved"), has("Denied"))
}

fn has_true_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

// ---------------------------------------------------------------------------------------------
// Signing

/// Start csrsigning: idle without a signing CA (`--cluster-signing-cert-file` / `-key-file`)
/// or when it does not load.
pub fn start_signing(ctx: &Ctx) {
    let Some((cert, key)) = ctx.opts.cluster_signing.clone() else {
        tracing::info!("csrsigning: no cluster signing CA configured; not signing certificates");
        return;
    };
    let ca = match CaSigner::load(&cert, &key) {
        Ok(ca) => Arc::new(ca),
        Err(e) => {
            tracing::error!(error = %e, "csrsigning: cannot load the cluster signing CA; not signing certificates");
            return;
        }
    };
    let csrs = ctx.informers.get::<CertificateSigningRequest>();
    let queue = Queue::new("csrsigning");
    enqueue_changes(&csrs, &queue);
    let client = ctx.client.clone();
    let workers = ctx.opts.workers;
    let max = ctx.opts.cluster_signing_duration;
    tokio::spawn(async move {
        csrs.wait_synced().await;
        queue.run_workers(workers, move |key| {
            let csrs = csrs.clone();
            let client = client.clone();
            let ca = ca.clone();
            async move { sign(&client, &csrs, &ca, max, &key).await }
        });
    });
}

async fn sign(
    client: &Client,
    csrs: &Informer<CertificateSigningRequest>,
    ca: &Arc<CaSigner>,
    max: Duration,
    name: &str,
) -> anyhow::Result<()> {
    let Some(csr) = csrs.get("", name) else {
        return Ok(());
    };
    if has_certificate(&csr) {
        return Ok(());
    }
    let (approved, denied) = approval(&csr);
    if !approved || denied || has_true_condition(&csr, "Failed") {
        return Ok(());
    }
    let signer = csr.spec.signer_name.as_str();
    if ![
        KUBE_APISERVER_CLIENT,
        KUBE_APISERVER_CLIENT_KUBELET,
        KUBELET_SERVING,
        LEGACY_UNKNOWN,
    ]
    .contains(&signer)
    {
        return Ok(());
    }
    let info =
        parse_csr(&csr.spec.request.0).map_err(|e| anyhow!("unable to parse csr {name:?}: {e}"))?;
    let usage_list: Vec<&str> = csr
        .spec
        .usages
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let mut csr = (*csr).clone();
    if let Err(msg) = validate_for_signer(signer, &info, &usage_list) {
        let now = Time(Timestamp::now());
        csr.status
            .get_or_insert_with(CertificateSigningRequestStatus::default)
            .conditions
            .get_or_insert_with(Vec::new)
            .push(CertificateSigningRequestCondition {
                type_: "Failed".into(),
                status: "True".into(),
                reason: Some("SignerValidationFailure".into()),
                message: Some(msg),
                last_update_time: Some(now),
                ..Default::default()
            });
        return match api.replace_status(name, &PostParams::default(), &csr).await {
            // A conflict means a newer version exists; its update event brings it back.
            Err(e) if !util::is_conflict(&e) => {
                Err(anyhow!(e).context("error adding failure condition for csr"))
            }
            _ => Ok(()),
        };
    }
    let validity = validity(csr.spec.expiration_seconds, max);
    let pem = csr.spec.request.0.clone();
    let owned: Vec<String> = usage_list.iter().map(|s| s.to_string()).collect();
    let ca = ca.clone();
    let cert = tokio::task::spawn_blocking(move || {
        let usages: Vec<&str> = owned.iter().map(String::as_str).collect();
        ca.sign_csr(&pem, &usages, validity)
    })
    .await
    .context("signing task")?
    .map_err(|e| anyhow!("error auto signing csr: {e}"))?;
    csr.status
        .get_or_insert_with(CertificateSigningRequestStatus::default)
        .certificate = Some(ByteString(cert.into_bytes()));
    api.replace_status(name, &PostParams::default(), &csr)
        .await
        .context("error updating signature for csr")?;
    Ok(())
}

/// How long after now the certificate ends, as Kubernetes' signer decides it: the request's
/// `expirationSeconds` within [10 minutes, `max`] (`max` when unset); certificates of at
/// least eight hours are backdated five minutes, which shortens them by as much.
fn validity(expiration_seconds: Option<i32>, max: Duration) -> Duration {
    let ttl = match expiration_seconds {
        None => max,
        Some(s) => {
            let requested = Duration::from_secs(u64::try_from(s).unwrap_or(0));
            if requested > max {
                max
            } else if requested < MIN_DURATION {
                MIN_DURATION
            } else {
                requested
            }
        }
    };
    if ttl >= SHORT_LIVED {
        ttl - BACKDATE
    } else {
        ttl
    }
}

/// The signer's checks of a request (`Err`: the Failed condition's message).
fn validate_for_signer(signer: &str, info: &CsrInfo, usages: &[&str]) -> Result<(), String> {
    let set: BTreeSet<&str> = usages.iter().copied().collect();
    match signer {
        KUBELET_SERVING => validate_kubelet_serving(info, &set),
        KUBE_APISERVER_CLIENT_KUBELET => validate_kubelet_client(info, &set),
        KUBE_APISERVER_CLIENT => validate_apiserver_client_usages(usages),
        _ => Ok(()),
    }
}

fn set_of<'a>(v: &[&'a str]) -> BTreeSet<&'a str> {
    v.iter().copied().collect()
}

/// The usages of a set, sorted, as Go prints a string list: `[a b c]`.
fn listed(set: &BTreeSet<&str>) -> String {
    format!("[{}]", set.iter().copied().collect::<Vec<_>>().join(" "))
}

fn validate_kubelet_client(info: &CsrInfo, usages: &BTreeSet<&str>) -> Result<(), String> {
    if info.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if !info.dns_names.is_empty() {
        return Err("DNS subjectAltNames are not allowed".into());
    }
    if !info.emails.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !info.ips.is_empty() {
        return Err("IP subjectAltNames are not allowed".into());
    }
    if !info.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    if !info.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    let full = set_of(&[DIGITAL_SIGNATURE, KEY_ENCIPHERMENT, CLIENT_AUTH]);
    let no_rsa = set_of(&[DIGITAL_SIGNATURE, CLIENT_AUTH]);
    if *usages != full && *usages != no_rsa {
        return Err(format!("usages did not match {}", listed(&full)));
    }
    Ok(())
}

fn validate_kubelet_serving(info: &CsrInfo, usages: &BTreeSet<&str>) -> Result<(), String> {
    if info.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if info.dns_names.is_empty() && info.ips.is_empty() {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if !info.emails.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !info.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    let full = set_of(&[DIGITAL_SIGNATURE, KEY_ENCIPHERMENT, SERVER_AUTH]);
    let no_rsa = set_of(&[DIGITAL_SIGNATURE, SERVER_AUTH]);
    if *usages != full && *usages != no_rsa {
        return Err(format!("usages did not match {}", listed(&full)));
    }
    if !info.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

fn validate_apiserver_client_usages(usages: &[&str]) -> Result<(), String> {
    let mut client_auth = false;
    for u in usages {
        match *u {
            DIGITAL_SIGNATURE | KEY_ENCIPHERMENT => {}
            CLIENT_AUTH => client_auth = true,
            other => return Err(format!("invalid usage for client certificate: {other}")),
        }
    }
    if !client_auth {
        return Err(format!(
            "missing required usage for client certificate: {CLIENT_AUTH}"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reading a PKCS#10 request

/// What the approver and the signers check in a request.
#[derive(Debug, Default, PartialEq)]
pub struct CsrInfo {
    /// The subject's common name (the last one, if several).
    pub common_name: String,
    /// The subject's organizations, in order.
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub emails: Vec<String>,
    pub ips: Vec<Vec<u8>>,
    pub uris: Vec<String>,
}

const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
const OID_EXTENSION_REQUEST: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
const BOOLEAN: u8 = 0x01;
const INTEGER: u8 = 0x02;
const ATTRIBUTES: u8 = 0xa0;

/// Parse the subject and subject alternative names of a PEM certificate request.
pub fn parse_csr(pem: &[u8]) -> Result<CsrInfo, String> {
    let der = CertificateSigningRequestDer::from_pem_slice(pem)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    parse_csr_der(der.as_ref()).ok_or_else(|| "x509: malformed certificate request".to_string())
}

fn parse_csr_der(der: &[u8]) -> Option<CsrInfo> {
    let (request, _) = read(der, SEQUENCE)?;
    let (info, _) = read(request, SEQUENCE)?;
    let (_version, rest) = read(info, INTEGER)?;
    let (subject, rest) = read(rest, SEQUENCE)?;
    let (_public_key, rest) = read(rest, SEQUENCE)?;
    let mut out = CsrInfo::default();
    for rdn in elements(subject, SET)? {
        for atv in elements(rdn, SEQUENCE)? {
            let (oid, value) = read(atv, OID)?;
            let (tag, content, _) = read_any(value)?;
            if oid == OID_COMMON_NAME {
                out.common_name = decode_string(tag, content)?;
            } else if oid == OID_ORGANIZATION {
                out.organizations.push(decode_string(tag, content)?);
            }
        }
    }
    if rest.is_empty() {
        return Some(out);
    }
    let (attributes, _) = read(rest, ATTRIBUTES)?;
    for attr in elements(attributes, SEQUENCE)? {
        let (oid, values) = read(attr, OID)?;
        if oid != OID_EXTENSION_REQUEST {
            continue;
        }
        let (values, _) = read(values, SET)?;
        for extensions in elements(values, SEQUENCE)? {
            for ext in elements(extensions, SEQUENCE)? {
                let (oid, mut rest) = read(ext, OID)?;
                if let Some((_, after)) = read(rest, BOOLEAN) {
                    rest = after;
                }
                let (value, _) = read(rest, OCTET_STRING)?;
                if oid == OID_SUBJECT_ALT_NAME {
                    read_sans(value, &mut out)?;
                }
            }
        }
    }
    Some(out)
}

fn read_sans(value: &[u8], out: &mut CsrInfo) -> Option<()> {
    let (names, _) = read(value, SEQUENCE)?;
    let mut rest = names;
    while !rest.is_empty() {
        let (tag, content, after) = read_any(rest)?;
        rest = after;
        let text = || String::from_utf8_lossy(content).into_owned();
        match tag {
            0x81 => out.emails.push(text()),
            0x82 => out.dns_names.push(text()),
            0x86 => out.uris.push(text()),
            0x87 => out.ips.push(content.to_vec()),
            _ => {}
        }
    }
    Some(())
}

/// One DER element: (tag, content, what follows). Only low tag numbers (all X.509 uses).
fn read_any(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// One element that must have `tag`: (content, what follows).
fn read(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, content, rest) = read_any(input)?;
    (t == tag).then_some((content, rest))
}

/// The contents of every element in `input`, each of which must have `tag`.
fn elements(mut input: &[u8], tag: u8) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    while !input.is_empty() {
        let (content, rest) = read(input, tag)?;
        out.push(content);
        input = rest;
    }
    Some(out)
}

fn decode_string(tag: u8, content: &[u8]) -> Option<String> {
    match tag {
        // UTF8String, PrintableString, IA5String, NumericString
        0x0c | 0x13 | 0x16 | 0x12 => Some(String::from_utf8_lossy(content).into_owned()),
        // T61String, read as Latin-1
        0x14 => Some(content.iter().map(|&b| char::from(b)).collect()),
        // BMPString
        0x1e => {
            if !content.len().is_multiple_of(2) {
                return None;
            }
            let units: Vec<u16> = content
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            Some(String::from_utf16_lossy(&units))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBELET_CSR: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHrMIGSAgEAMDAxFTATBgNVBAoMDHN5c3RlbTpub2RlczEXMBUGA1UEAwwOc3lz
dGVtOm5vZGU6bjEwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQ3Hxoq8bERugxZ
J5UNEwBXDcZLQ6StfLUbv6ZfsEI7vgYBwj5bell4nUr8q0nEzpIs4A41hWeLzBA3
vVv1qYh7oAAwCgYIKoZIzj0EAwIDSAAwRQIgKJIVuYP0hFlQgNJ88QyoDUZxaDvn
o20zkGQkZXoppZMCIQDhJOF8yJ0z0nU4ywa15YjJxH7OOFL6uviao+e8dB6evw==
-----END CERTIFICATE REQUEST-----
";

    /// O=b-org, O=a-org, CN=jane; SANs DNS web.example.com, IP 10.0.0.1,
    /// email jane@example.com, URI spiffe://x/y.
    const SANS_CSR: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIIBPTCB5AIBADAvMQ4wDAYDVQQKDAViLW9yZzEOMAwGA1UECgwFYS1vcmcxDTAL
BgNVBAMMBGphbmUwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQ3Hxoq8bERugxZ
J5UNEwBXDcZLQ6StfLUbv6ZfsEI7vgYBwj5bell4nUr8q0nEzpIs4A41hWeLzBA3
vVv1qYh7oFMwUQYJKoZIhvcNAQkOMUQwQjBABgNVHREEOTA3gg93ZWIuZXhhbXBs
ZS5jb22HBAoAAAGBEGphbmVAZXhhbXBsZS5jb22GDHNwaWZmZTovL3gveTAKBggq
hkjOPQQDAgNIADBFAiAacBBILh3j98ZSbbpS9O8stmEkpDlajY0s0kSbRjGE8gIh
ANPX0DzbHpaGrhYJ+eYbQMr5l2rjIeZtlTEU1aeIzOP+
-----END CERTIFICATE REQUEST-----
";

    #[test]
    fn reads_subject_and_alternative_names() {
        let k = parse_csr(KUBELET_CSR.as_bytes()).unwrap();
        assert_eq!(k.common_name, "system:node:n1");
        assert_eq!(k.organizations, ["system:nodes"]);
        assert!(k.dns_names.is_empty() && k.ips.is_empty());

        let s = parse_csr(SANS_CSR.as_bytes()).unwrap();
        assert_eq!(
            s,
            CsrInfo {
                common_name: "jane".into(),
                organizations: vec!["b-org".into(), "a-org".into()],
                dns_names: vec!["web.example.com".into()],
                emails: vec!["jane@example.com".into()],
                ips: vec![vec![10, 0, 0, 1]],
                uris: vec!["spiffe://x/y".into()],
            }
        );
    }

    #[test]
    fn malformed_requests_are_errors_not_panics() {
        assert_eq!(
            parse_csr(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
            Err("PEM block type must be CERTIFICATE REQUEST".into())
        );
        assert!(parse_csr(b"garbage").is_err());
        // Every truncation of a valid request is refused cleanly.
        let der = CertificateSigningRequestDer::from_pem_slice(SANS_CSR.as_bytes()).unwrap();
        let bytes = der.as_ref();
        for n in 0..bytes.len() {
            let _ = parse_csr_der(&bytes[..n]);
        }
        assert!(parse_csr_der(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_none());
        assert!(parse_csr_der(&[0x30, 0x80]).is_none());
    }

    fn info(cn: &str, orgs: &[&str]) -> CsrInfo {
        CsrInfo {
            common_name: cn.into(),
            organizations: orgs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn kubelet_client_requests_are_checked_as_kubernetes_does() {
        let ok = info("system:node:n1", &["system:nodes"]);
        let full = [DIGITAL_SIGNATURE, KEY_ENCIPHERMENT, CLIENT_AUTH];
        assert_eq!(validate_kubelet_client(&ok, &set_of(&full)), Ok(()));
        assert_eq!(
            validate_kubelet_client(&ok, &set_of(&[DIGITAL_SIGNATURE, CLIENT_AUTH])),
            Ok(())
        );
        assert_eq!(
            validate_kubelet_client(&ok, &set_of(&[CLIENT_AUTH])),
            Err("usages did not match [client auth digital signature key encipherment]".into())
        );
        assert_eq!(
            validate_kubelet_client(&info("system:node:n1", &["x"]), &set_of(&full)),
            Err("subject organization is not system:nodes".into())
        );
        assert_eq!(
            validate_kubelet_client(&info("bob", &["system:nodes"]), &set_of(&full)),
            Err("subject common name does not begin with system:node:".into())
        );
        let mut with_dns = ok;
        with_dns.dns_names.push("n1".into());
        assert_eq!(
            validate_kubelet_client(&with_dns, &set_of(&full)),
            Err("DNS subjectAltNames are not allowed".into())
        );
    }

    #[test]
    fn kubelet_serving_requests_need_a_name_and_server_usages() {
        let mut i = info("system:node:n1", &["system:nodes"]);
        let usages = set_of(&[DIGITAL_SIGNATURE, KEY_ENCIPHERMENT, SERVER_AUTH]);
        assert_eq!(
            validate_kubelet_serving(&i, &usages),
            Err("DNS or IP subjectAltName is required".into())
        );
        i.ips.push(vec![10, 0, 0, 1]);
        assert_eq!(validate_kubelet_serving(&i, &usages), Ok(()));
        assert_eq!(
            validate_kubelet_serving(&i, &set_of(&[SERVER_AUTH])),
            Err("usages did not match [digital signature key encipherment server auth]".into())
        );
        i.uris.push("spiffe://x".into());
        assert_eq!(
            validate_kubelet_serving(&i, &usages),
            Err("URI subjectAltNames are not allowed".into())
        );
    }

    #[test]
    fn apiserver_client_requests_need_client_auth_only() {
        assert_eq!(
            validate_apiserver_client_usages(&[DIGITAL_SIGNATURE, CLIENT_AUTH]),
            Ok(())
        );
        assert_eq!(
            validate_apiserver_client_usages(&[CLIENT_AUTH, SERVER_AUTH]),
            Err("invalid usage for client certificate: server auth".into())
        );
        assert_eq!(
            validate_apiserver_client_usages(&[DIGITAL_SIGNATURE]),
            Err("missing required usage for client certificate: client auth".into())
        );
        // The legacy signer takes anything.
        assert_eq!(
            validate_for_signer(LEGACY_UNKNOWN, &CsrInfo::default(), &["server auth"]),
            Ok(())
        );
    }

    #[test]
    fn validity_honours_expiration_seconds_within_bounds() {
        let year = Duration::from_secs(365 * 24 * 3600);
        assert_eq!(validity(None, year), year - BACKDATE);
        assert_eq!(validity(Some(3600), year), Duration::from_secs(3600));
        assert_eq!(validity(Some(60), year), MIN_DURATION);
        assert_eq!(validity(Some(-5), year), MIN_DURATION);
        assert_eq!(validity(Some(i32::MAX), year), year - BACKDATE);
        let day = Duration::from_secs(24 * 3600);
        assert_eq!(validity(Some(2 * 24 * 3600), day), day - BACKDATE);
    }

    #[test]
    fn approval_reads_condition_types() {
        let mut csr = CertificateSigningRequest::default();
        assert_eq!(approval(&csr), (false, false));
        csr.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: "Denied".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_eq!(approval(&csr), (false, true));
        assert!(has_true_condition(&csr, "Denied"));
        assert!(!has_true_condition(&csr, "Failed"));
    }

    #[test]
    fn self_node_client_needs_the_requestor_to_be_the_node() {
        let mut csr = CertificateSigningRequest::default();
        csr.spec.signer_name = KUBE_APISERVER_CLIENT_KUBELET.into();
        csr.spec.usages = Some(vec![DIGITAL_SIGNATURE.into(), CLIENT_AUTH.into()]);
        csr.spec.username = Some("system:node:n1".into());
        let i = info("system:node:n1", &["system:nodes"]);
        assert!(is_self_node_client_cert(&csr, &i));
        assert!(is_node_client_cert(&csr, &i));
        csr.spec.username = Some("system:bootstrap:abcdef".into());
        assert!(!is_self_node_client_cert(&csr, &i));
        assert!(is_node_client_cert(&csr, &i));
        csr.spec.signer_name = KUBE_APISERVER_CLIENT.into();
        assert!(!is_node_client_cert(&csr, &i));
    }
}
