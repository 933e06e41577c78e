//! Calling a webhook: where it is served (Kubernetes' `util/webhook` client manager and
//! endpoint service resolver) and one HTTPS POST to it.
//!
//! A `clientConfig.url` is called as it is. A `clientConfig.service` is resolved as the API
//! server's endpoint resolver does (capstan has no service proxy inside the API server): the
//! Service's port named by `service.port`, then a ready address of its Endpoints (or, when it
//! has no Endpoints object, of its EndpointSlices) with the matching target port. The TLS
//! server name stays `<name>.<namespace>.svc`, which the webhook's certificate must cover.
//!
//! The server's certificate must chain to `clientConfig.caBundle`; without a bundle, to the
//! system's roots. Each call opens its own connection (no pooling yet).

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use capstan_api::field::go_quote;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::hooks::Endpoint;
use crate::objects::Objects;
use capstan_api::meta::At as _;

/// The largest answer read from a webhook.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Where system root certificates are found, as Go looks for them on Linux.
const SYSTEM_ROOTS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// One webhook call's destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The URL as Kubernetes shows it in errors (`https://svc.ns.svc:443/path?timeout=10s`).
    pub url: String,
    /// Where to connect: `host:port`, a name being looked up.
    pub connect: String,
    /// The name the server's certificate must cover (a DNS name or an IP address).
    pub server_name: String,
    /// The `Host` header.
    pub host: String,
    /// Path and query.
    pub path: String,
    /// PEM roots; empty for the system's.
    pub ca_bundle: Vec<u8>,
}

/// HTTPS to webhooks, behind a trait so tests can answer in-process.
#[async_trait]
pub trait Transport: Send + Sync {
    /// POST `body` (JSON) to `target` and return the answer's body. The error is the reason
    /// the call failed, worded as Go's HTTP client words it (`Post "url": ...`).
    async fn post(&self, target: &Target, body: Vec<u8>) -> Result<Vec<u8>, String>;
}

/// Go's `time.Duration` string of whole seconds, as the `timeout` query parameter carries it.
fn timeout_param(timeout: Duration) -> String {
    let secs = timeout.as_secs();
    if secs >= 60 {
        let (m, s) = (secs / 60, secs % 60);
        format!("{m}m{s}s")
    } else {
        format!("{secs}s")
    }
}

/// Where to call `endpoint`, looking services up in `objects`.
pub fn resolve(
    endpoint: &Endpoint,
    ca_bundle: &[u8],
    timeout: Duration,
    objects: &dyn Objects,
) -> Result<Target, String> {
    let query = format!("timeout={}", timeout_param(timeout));
    match endpoint {
        Endpoint::Url(url) => {
            let uri: http::Uri = url
                .parse()
                .map_err(|e| format!("parse {}: {e}", go_quote(url)))?;
            let authority = uri
                .authority()
                .ok_or_else(|| format!("parse {}: no host", go_quote(url)))?;
            let host = authority.host();
            let port = authority.port_u16().unwrap_or(443);
            let mut path = uri.path().to_string();
            if path.is_empty() {
                path.push('/');
            }
            let server_name = host.trim_start_matches('[').trim_end_matches(']');
            let connect = if server_name.contains(':') {
                format!("[{server_name}]:{port}")
            } else {
                format!("{server_name}:{port}")
            };
            let base = url.split(['?', '#']).next().unwrap_or(url);
            Ok(Target {
                url: format!("{base}?{query}"),
                connect,
                server_name: server_name.to_string(),
                host: authority
                    .as_str()
                    .rsplit('@')
                    .next()
                    .unwrap_or("")
                    .to_string(),
                path: format!("{path}?{query}"),
                ca_bundle: ca_bundle.to_vec(),
            })
        }
        Endpoint::Service {
            namespace,
            name,
            path,
            port,
        } => {
            let server_name = format!("{name}.{namespace}.svc");
            let path = if path.is_empty() { "/" } else { path };
            let url = format!("https://{server_name}:{port}{path}?{query}");
            let connect = service_endpoint(objects, namespace, name, *port)
                .map_err(|e| format!("Post {}: {e}", go_quote(&url)))?;
            Ok(Target {
                url,
                connect,
                host: format!("{server_name}:{port}"),
                server_name,
                path: format!("{path}?{query}"),
                ca_bundle: ca_bundle.to_vec(),
            })
        }
    }
}

/// `ResolveEndpoint`: `ip:port` of a ready endpoint behind the service's `port`.
fn service_endpoint(
    objects: &dyn Objects,
    namespace: &str,
    name: &str,
    port: u16,
) -> Result<String, String> {
    let svc = objects
        .get("", "services", namespace, name)
        .ok_or_else(|| format!("service {} not found", go_quote(name)))?;
    let svc_port = svc
        .at("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
        .ok_or_else(|| {
            format!(
                "no service port {port} found for service {}",
                go_quote(name)
            )
        })?;
    let port_name = svc_port.get("name").and_then(Value::as_str).unwrap_or("");
    match svc
        .at("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
    {
        "ClusterIP" | "NodePort" | "LoadBalancer" => {}
        "ExternalName" => {
            let host = svc
                .at("/spec/externalName")
                .and_then(Value::as_str)
                .unwrap_or("");
            return Ok(format!("{host}:{port}"));
        }
        other => return Err(format!("unsupported service type {}", go_quote(other))),
    }
    let candidates = match objects.get("", "endpoints", namespace, name) {
        Some(eps) => endpoints_addresses(&eps, port_name),
        None => slice_addresses(objects, namespace, name, port_name),
    };
    if candidates.is_empty() {
        return Err(format!(
            "no endpoints available for service {}",
            go_quote(name)
        ));
    }
    let pick = rand::random_range(0..candidates.len());
    let (ip, port) = &candidates[pick];
    Ok(if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    })
}

/// Ready (ip, port) pairs of an Endpoints object for the named service port.
fn endpoints_addresses(eps: &Value, port_name: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for subset in eps
        .get("subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let port = subset
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
            .and_then(|p| p.get("port").and_then(Value::as_u64));
        let Some(port) = port else { continue };
        for a in subset
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(ip) = a.get("ip").and_then(Value::as_str) {
                out.push((ip.to_string(), port));
            }
        }
    }
    out
}

/// Ready (ip, port) pairs of the service's EndpointSlices for the named service port.
fn slice_addresses(
    objects: &dyn Objects,
    namespace: &str,
    name: &str,
    port_name: &str,
) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for slice in objects.list("discovery.k8s.io", "endpointslices", namespace) {
        if slice
            .at("/metadata/labels/kubernetes.io~1service-name")
            .and_then(Value::as_str)
            != Some(name)
        {
            continue;
        }
        let port = slice
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
            .and_then(|p| p.get("port").and_then(Value::as_u64));
        let Some(port) = port else { continue };
        for ep in slice
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if ep.at("/conditions/ready").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            for ip in ep
                .get("addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                out.push((ip.to_string(), port));
            }
        }
    }
    out
}

/// The real transport: rustls (ring) over TCP, HTTP/1.1 with hyper.
pub struct HttpsTransport;

impl HttpsTransport {
    fn tls_config(ca_bundle: &[u8]) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let system;
        let pem: &[u8] = if ca_bundle.is_empty() {
            system = SYSTEM_ROOTS
                .iter()
                .find_map(|p| std::fs::read(p).ok())
                .unwrap_or_default();
            &system
        } else {
            ca_bundle
        };
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem).flatten() {
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return Err(
                "unable to load root certificates: no valid certificate authority data seen".into(),
            );
        }
        let mut config =
            rustls::ClientConfig::builder_with_provider(capstan_pki::crypto_provider())
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(std::sync::Arc::new(config))
    }
}

/// An I/O error of the connection's setup, in Go's words where they differ.
fn dial_error(addr: &str, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            format!("dial tcp {addr}: connect: connection refused")
        }
        _ => format!("dial tcp {addr}: {e}"),
    }
}

fn tls_error(e: &std::io::Error) -> String {
    use rustls::CertificateError as C;
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(c)) => {
            let why = match c {
                // A certificate naming a CA of the bundle that did not sign it is, to Go,
                // signed by an unknown authority too.
                C::UnknownIssuer | C::BadSignature => {
                    "x509: certificate signed by unknown authority".to_string()
                }
                C::NotValidForName | C::NotValidForNameContext { .. } => {
                    "x509: certificate is not valid for the requested name".to_string()
                }
                C::Expired
                | C::ExpiredContext { .. }
                | C::NotValidYet
                | C::NotValidYetContext { .. } => {
                    "x509: certificate has expired or is not yet valid".to_string()
                }
                other => format!("x509: {other:?}"),
            };
            format!("tls: failed to verify certificate: {why}")
        }
        Some(other) => format!("tls: {other}"),
        None => format!("tls: {e}"),
    }
}

/// Kubernetes' rest client error for an answer that is not a success.
fn status_error(code: u16, body: &[u8]) -> String {
    if let Ok(status) = serde_json::from_slice::<Value>(body) {
        if status.get("kind").and_then(Value::as_str) == Some("Status") {
            if let Some(m) = status.get("message").and_then(Value::as_str) {
                return m.to_string();
            }
        }
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(1024)])
        .trim()
        .to_string();
    if code >= 500 && !text.is_empty() {
        format!(
            "an error on the server ({}) has prevented the request from succeeding",
            go_quote(&text)
        )
    } else {
        format!(
            "the server responded with the status code {code} but did not return more information"
        )
    }
}

#[async_trait]
impl Transport for HttpsTransport {
    async fn post(&self, target: &Target, body: Vec<u8>) -> Result<Vec<u8>, String> {
        let post = |e: String| format!("Post {}: {e}", go_quote(&target.url));
        let config = Self::tls_config(&target.ca_bundle).map_err(post)?;
        let server_name = rustls::pki_types::ServerName::try_from(target.server_name.clone())
            .map_err(|e| post(format!("invalid server name: {e}")))?;
        let tcp = tokio::net::TcpStream::connect(&target.connect)
            .await
            .map_err(|e| post(dial_error(&target.connect, &e)))?;
        let _ = tcp.set_nodelay(true);
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(server_name, tcp)
            .await
            .map_err(|e| post(tls_error(&e)))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| post(e.to_string()))?;
        let conn = tokio::spawn(conn);
        let request = http::Request::post(target.path.as_str())
            .header(http::header::HOST, target.host.as_str())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, */*")
            .header(http::header::USER_AGENT, "kube-apiserver-admission")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| post(e.to_string()))?;
        let result = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| post(e.to_string()))?;
            let status = response.status();
            let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| post(e.to_string()))?
                .to_bytes();
            if !status.is_success() {
                return Err(status_error(status.as_u16(), &bytes));
            }
            Ok(bytes.to_vec())
        }
        .await;
        conn.abort();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::MemoryObjects;
    use serde_json::json;

    #[test]
    fn urls_are_called_as_written_with_a_timeout() {
        let t = resolve(
            &Endpoint::Url("https://hook.example.com:8443/validate".into()),
            b"",
            Duration::from_secs(10),
            &MemoryObjects::default(),
        )
        .unwrap();
        assert_eq!(t.url, "https://hook.example.com:8443/validate?timeout=10s");
        assert_eq!(t.connect, "hook.example.com:8443");
        assert_eq!(t.server_name, "hook.example.com");
        assert_eq!(t.host, "hook.example.com:8443");
        assert_eq!(t.path, "/validate?timeout=10s");
        let t = resolve(
            &Endpoint::Url("https://[::1]".into()),
            b"",
            Duration::from_secs(5),
            &MemoryObjects::default(),
        )
        .unwrap();
        assert_eq!(
            (t.connect.as_str(), t.server_name.as_str(), t.path.as_str()),
            ("[::1]:443", "::1", "/?timeout=5s")
        );
    }

    #[test]
    fn services_resolve_to_a_ready_endpoint() {
        let objects = MemoryObjects::default();
        let svc = Endpoint::Service {
            namespace: "hooks".into(),
            name: "policy".into(),
            path: "/v".into(),
            port: 443,
        };
        let err = resolve(&svc, b"", Duration::from_secs(10), &objects).unwrap_err();
        assert_eq!(
            err,
            "Post \"https://policy.hooks.svc:443/v?timeout=10s\": service \"policy\" not found"
        );
        objects.insert(
            "",
            "services",
            json!({"metadata": {"name": "policy", "namespace": "hooks"},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]}}),
        );
        let err = resolve(&svc, b"", Duration::from_secs(10), &objects).unwrap_err();
        assert!(
            err.ends_with("no endpoints available for service \"policy\""),
            "{err}"
        );
        objects.insert(
            "discovery.k8s.io",
            "endpointslices",
            json!({"metadata": {"name": "policy-abc", "namespace": "hooks", "labels": {"kubernetes.io/service-name": "policy"}},
                "ports": [{"name": "https", "port": 8443}],
                "endpoints": [{"addresses": ["10.0.0.9"], "conditions": {"ready": false}}, {"addresses": ["10.0.0.7"]}]}),
        );
        let t = resolve(&svc, b"", Duration::from_secs(10), &objects).unwrap();
        assert_eq!(t.connect, "10.0.0.7:8443");
        objects.insert(
            "",
            "endpoints",
            json!({"metadata": {"name": "policy", "namespace": "hooks"},
                "subsets": [{"addresses": [{"ip": "10.0.0.8"}], "ports": [{"name": "https", "port": 8443}]}]}),
        );
        let t = resolve(&svc, b"", Duration::from_secs(10), &objects).unwrap();
        assert_eq!(
            (t.connect.as_str(), t.server_name.as_str(), t.host.as_str()),
            ("10.0.0.8:8443", "policy.hooks.svc", "policy.hooks.svc:443")
        );
    }
}
