//! What the API server serves from kubelets: `pods/log`, `pods/exec`, `pods/attach`,
//! `pods/portforward` and `nodes/proxy`. The API server finds the pod's node, reaches its
//! kubelet at the node's address and kubelet port over TLS with a client certificate of its
//! own (user `kube-apiserver-kubelet-client`), and relays the answer: log lines as they come,
//! and for exec, attach and port-forward the upgraded connection, both ways.
//!
//! As kube-apiserver without `--kubelet-certificate-authority`, it does not check the
//! kubelet's serving certificate.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use serde_json::Value;

use crate::auth::User;
use crate::error::{ApiError, ApiResult, FieldError};
use crate::handlers::{error_response, Body};
use crate::request::{percent_decode, Query, RequestInfo};
use crate::ApiServer;
use capstan_api::meta::At as _;

pub mod spdy;
pub mod translate;
pub mod websocket;

/// The user the API server's kubelet client certificate names.
pub const CLIENT_USER: &str = "kube-apiserver-kubelet-client";

/// The TLS settings of connections to kubelets.
#[derive(Default)]
pub struct KubeletClient {
    tls: OnceLock<Arc<rustls::ClientConfig>>,
}

impl KubeletClient {
    /// Issue the API server's kubelet client certificate from the cluster CA: user
    /// `kube-apiserver-kubelet-client` in `system:masters` (kubeadm's
    /// apiserver-kubelet-client is an administrator of every kubelet).
    pub fn configure(&self, pki: &capstan_pki::Pki) -> Result<(), String> {
        let (cert, key) = pki
            .issue_client_cert(
                CLIENT_USER,
                &["system:masters"],
                Duration::from_secs(365 * 86400),
            )
            .map_err(|e| e.to_string())?;
        let _ = self.tls.set(client_config(Some((&cert, &key)))?);
        Ok(())
    }

    fn config(&self) -> Arc<rustls::ClientConfig> {
        self.tls
            .get_or_init(|| {
                client_config(None).unwrap_or_else(|_| {
                    Arc::new(
                        rustls::ClientConfig::builder_with_provider(capstan_pki::crypto_provider())
                            .with_safe_default_protocol_versions()
                            .expect("the ring provider supports the default versions")
                            .dangerous()
                            .with_custom_certificate_verifier(Arc::new(AnyServerCert(
                                capstan_pki::crypto_provider(),
                            )))
                            .with_no_client_auth(),
                    )
                })
            })
            .clone()
    }
}

fn client_config(identity: Option<(&str, &str)>) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = capstan_pki::crypto_provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider)));
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts any kubelet serving certificate (but still checks the handshake's signatures).
#[derive(Debug)]
struct AnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Whether the request is one served from a kubelet.
pub fn handles(info: &RequestInfo) -> bool {
    info.is_resource
        && info.group.is_empty()
        && info.version == "v1"
        && !info.name.is_empty()
        && matches!(
            (info.resource.as_str(), info.subresource.as_str()),
            ("pods", "log" | "exec" | "attach" | "portforward") | ("nodes", "proxy")
        )
}

/// Serve a request [`handles`] accepts (already authorized for its verb).
pub async fn serve(
    api: &Arc<ApiServer>,
    parts: &http::request::Parts,
    query: &Query,
    info: &RequestInfo,
    user: &Arc<User>,
    body: Bytes,
) -> Response<Body> {
    let result = match (info.resource.as_str(), info.subresource.as_str()) {
        ("pods", "log") => pod_log(api, parts, query, info).await,
        ("pods", _) => pod_stream(api, parts, info, user).await,
        _ => node_proxy(api, parts, info, body).await,
    };
    result.unwrap_or_else(|e| error_response(&e))
}

/// Every query pair in order (repeated keys kept), decoded.
pub fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// Go's url.QueryEscape.
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Go's url.Values.Encode: keys sorted, values in order.
pub fn encode_query(pairs: &[(&str, String)]) -> String {
    let mut sorted: Vec<&(&str, String)> = pairs.iter().collect();
    sorted.sort_by_key(|(k, _)| *k);
    sorted
        .iter()
        .map(|(k, v)| format!("{}={}", query_escape(k), query_escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// The parameters of a pods/log request, checked as Kubernetes checks PodLogOptions, in
/// the form the kubelet is sent them.
pub fn log_params(name: &str, query: &Query) -> ApiResult<(String, Vec<(&'static str, String)>)> {
    let flag = |key: &str| -> ApiResult<bool> {
        match query.get(key) {
            None | Some("") => Ok(false),
            Some(v) => go_bool(v).ok_or_else(|| {
                ApiError::bad_request(format!("strconv.ParseBool: parsing {v:?}: invalid syntax"))
            }),
        }
    };
    let int = |key: &str| -> ApiResult<Option<i64>> {
        match query.get(key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::bad_request(format!("strconv.ParseInt: parsing {v:?}: invalid syntax"))
            }),
        }
    };
    let tail = int("tailLines")?;
    let limit = int("limitBytes")?;
    let since_seconds = int("sinceSeconds")?;
    let since_time = query.get("sinceTime").filter(|s| !s.is_empty());
    if let Some(t) = since_time {
        if !looks_like_rfc3339(t) {
            return Err(ApiError::bad_request(format!(
                "parsing time {t:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse {t:?} as \"2006\""
            )));
        }
    }
    let mut errors = Vec::new();
    if let Some(t) = tail.filter(|t| *t < 0) {
        errors.push(FieldError::invalid_shown(
            "tailLines",
            &t.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    if let Some(l) = limit.filter(|l| *l < 1) {
        errors.push(FieldError::invalid_shown(
            "limitBytes",
            &l.to_string(),
            "must be greater than 0",
        ));
    }
    match (since_seconds, since_time) {
        (Some(_), Some(_)) => errors.push(FieldError::forbidden(
            "",
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        )),
        (Some(s), None) if s < 1 => errors.push(FieldError::invalid_shown(
            "sinceSeconds",
            &s.to_string(),
            "must be greater than 0",
        )),
        _ => {}
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid_kind("", "PodLogOptions", name, errors));
    }
    let mut params: Vec<(&'static str, String)> = Vec::new();
    if flag("follow")? {
        params.push(("follow", "true".into()));
    }
    if flag("previous")? {
        params.push(("previous", "true".into()));
    }
    if flag("timestamps")? {
        params.push(("timestamps", "true".into()));
    }
    if let Some(s) = since_seconds {
        params.push(("sinceSeconds", s.to_string()));
    }
    if let Some(t) = since_time {
        params.push(("sinceTime", t.to_string()));
    }
    if let Some(t) = tail {
        params.push(("tailLines", t.to_string()));
    }
    if let Some(l) = limit {
        params.push(("limitBytes", l.to_string()));
    }
    Ok((query.str("container").to_string(), params))
}

fn looks_like_rfc3339(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && (b[10] == b'T' || b[10] == b't')
        && b[13] == b':'
        && b[16] == b':'
        && b[..4].iter().all(u8::is_ascii_digit)
}

fn names(list: Option<&Value>) -> Vec<String> {
    list.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The container a request is for: the one named (which must exist), or the pod's only
/// container.
pub fn pick_container(pod: &Value, name: &str, requested: &str) -> ApiResult<String> {
    let spec = pod.get("spec");
    let containers = names(spec.and_then(|s| s.get("containers")));
    let init = names(spec.and_then(|s| s.get("initContainers")));
    let ephemeral = names(spec.and_then(|s| s.get("ephemeralContainers")));
    if requested.is_empty() {
        return match containers.len() {
            1 => Ok(containers[0].clone()),
            0 => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            _ => {
                let mut msg = format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    containers.join(" ")
                );
                if !init.is_empty() {
                    msg.push_str(&format!(
                        " or one of the init containers: [{}]",
                        init.join(" ")
                    ));
                }
                if !ephemeral.is_empty() {
                    msg.push_str(&format!(
                        " or one of the ephemeral containers: [{}]",
                        ephemeral.join(" ")
                    ));
                }
                Err(ApiError::bad_request(msg))
            }
        };
    }
    if containers
        .iter()
        .chain(&init)
        .chain(&ephemeral)
        .any(|c| c == requested)
    {
        Ok(requested.to_string())
    } else {
        Err(ApiError::bad_request(format!(
            "container {requested} is not valid for pod {name}"
        )))
    }
}

/// Where a node's kubelet listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
}

impl Target {
    fn host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The kubelet of a Node object: its InternalIP (else ExternalIP, else Hostname) and the
/// port of `status.daemonEndpoints.kubeletEndpoint`.
pub fn target_of(node: &Value) -> ApiResult<Target> {
    let addrs: Vec<(&str, &str)> = node
        .at("/status/addresses")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| Some((x.get("type")?.as_str()?, x.get("address")?.as_str()?)))
                .collect()
        })
        .unwrap_or_default();
    let host = ["InternalIP", "ExternalIP", "Hostname"]
        .iter()
        .find_map(|t| addrs.iter().find(|(k, v)| k == t && !v.is_empty()))
        .map(|(_, v)| v.to_string())
        .ok_or_else(|| {
            ApiError::new(
                500,
                "",
                format!(
                    "no preferred addresses found; known addresses: [{}]",
                    addrs
                        .iter()
                        .map(|(t, a)| format!("{{{t} {a}}}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            )
        })?;
    let port = node
        .at("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64)
        .filter(|p| *p > 0 && *p <= u64::from(u16::MAX))
        .unwrap_or(10250) as u16;
    Ok(Target { host, port })
}

async fn node_target(api: &ApiServer, node: &str) -> ApiResult<Target> {
    let reg = api
        .registry("", "v1", "nodes")
        .ok_or_else(|| ApiError::internal("no node registry"))?;
    let node = reg.get("", node).await?;
    target_of(&node.value)
}

/// A pod and the target of its node.
async fn pod_and_target(api: &ApiServer, info: &RequestInfo) -> ApiResult<(Value, Option<String>)> {
    let reg = api
        .registry("", "v1", "pods")
        .ok_or_else(|| ApiError::internal("no pod registry"))?;
    let pod = reg.get(&info.namespace, &info.name).await?.value;
    let node = pod
        .at("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    Ok((pod, node))
}

/// Go's error text for a failed request (`Get "https://…": dial tcp …: …`).
fn request_error(method: &Method, url: &str, err: &str) -> String {
    let m = method.as_str();
    let op = format!("{}{}", &m[..1], m[1..].to_ascii_lowercase());
    format!("{op} \"{url}\": {err}")
}

/// Open a TLS connection to the kubelet.
async fn connect(
    api: &ApiServer,
    target: &Target,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let addr = target.host_port();
    let tcp = match tokio::time::timeout(
        Duration::from_secs(30),
        tokio::net::TcpStream::connect(addr.as_str()),
    )
    .await
    {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            let what = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => "connect: connection refused".to_string(),
                _ => e.to_string(),
            };
            return Err(format!("dial tcp {addr}: {what}"));
        }
        Err(_) => return Err(format!("dial tcp {addr}: i/o timeout")),
    };
    let _ = tcp.set_nodelay(true);
    let server_name = match target.host.parse::<std::net::IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => ServerName::try_from(target.host.clone())
            .map_err(|e| format!("invalid kubelet host {:?}: {e}", target.host))?,
    };
    let connector = tokio_rustls::TlsConnector::from(api.kubelet.config());
    connector
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("remote error: tls: {e}"))
}

/// Send one request to the kubelet (a fresh connection, kept for an upgrade).
pub(crate) async fn send(
    api: &ApiServer,
    target: &Target,
    req: Request<Full<Bytes>>,
) -> Result<Response<Incoming>, String> {
    let tls = connect(api, target).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    sender.send_request(req).await.map_err(|e| e.to_string())
}

/// A body that relays the kubelet's as it arrives (a read error ends it).
fn relay_body(body: Incoming) -> Body {
    let stream = futures::stream::unfold(body, |mut b| async move {
        match b.frame().await {
            Some(Ok(f)) => Some((Ok::<_, Infallible>(f), b)),
            _ => None,
        }
    });
    StreamBody::new(stream).boxed()
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "authorization",
    "content-length",
];

/// The client's headers worth passing on (not hop-by-hop, not credentials, not
/// impersonation); with `upgrade`, the upgrade headers too.
fn forward_headers(from: &HeaderMap, upgrade: bool) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in from {
        let n = name.as_str();
        let keep_for_upgrade = upgrade && (n == "connection" || n == "upgrade");
        if (HOP_BY_HOP.contains(&n) && !keep_for_upgrade) || n.starts_with("impersonate-") {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    let connection_upgrade = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    connection_upgrade && headers.contains_key(http::header::UPGRADE)
}

/// `GET pods/{name}/log`.
async fn pod_log(
    api: &Arc<ApiServer>,
    parts: &http::request::Parts,
    query: &Query,
    info: &RequestInfo,
) -> ApiResult<Response<Body>> {
    if parts.method != Method::GET && parts.method != Method::HEAD {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let (pod, node) = pod_and_target(api, info).await?;
    let (requested, params) = log_params(&info.name, query)?;
    let container = pick_container(&pod, &info.name, &requested)?;
    let node = node.ok_or_else(|| {
        ApiError::bad_request(format!("pod {} does not have a host assigned", info.name))
    })?;
    let target = node_target(api, &node).await?;
    let mut path = format!(
        "/containerLogs/{}/{}/{}",
        info.namespace, info.name, container
    );
    if !params.is_empty() {
        path.push('?');
        path.push_str(&encode_query(&params));
    }
    let url = format!("https://{}{path}", target.host_port());
    let req = Request::builder()
        .method(Method::GET)
        .uri(path.as_str())
        .header(http::header::HOST, target.host_port())
        .body(Full::new(Bytes::new()))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let resp = send(api, &target, req)
        .await
        .map_err(|e| ApiError::new(500, "", request_error(&Method::GET, &url, &e)))?;
    let status = resp.status();
    if !(200..=206).contains(&status.as_u16()) {
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&body[..body.len().min(4096)]).into_owned();
        return Err(kubelet_error(
            status.as_u16(),
            "pods/log",
            &info.name,
            &text,
        ));
    }
    let mut r = Response::new(relay_body(resp.into_body()));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    Ok(r)
}

/// A kubelet's refusal as the API server reports it (Kubernetes' generic response check).
pub fn kubelet_error(code: u16, resource: &str, name: &str, body: &str) -> ApiError {
    match code {
        400 => ApiError::bad_request(body.to_string()),
        500 => ApiError::internal(format!("Internal error occurred: {body}")),
        _ => {
            let (reason, msg): (&'static str, String) = match code {
                401 => (
                    "Unauthorized",
                    "the server has asked for the client to provide credentials".into(),
                ),
                403 => (
                    "Forbidden",
                    "the server does not allow access to the requested resource".into(),
                ),
                404 => (
                    "NotFound",
                    "the server could not find the requested resource".into(),
                ),
                429 => (
                    "TooManyRequests",
                    "the server has received too many requests and has asked us to try again later".into(),
                ),
                503 => (
                    "ServiceUnavailable",
                    "the server is currently unable to handle the request".into(),
                ),
                _ => (
                    "",
                    format!("the server responded with the status code {code} but did not return more information"),
                ),
            };
            let mut e = ApiError::new(code, reason, format!("{msg} ( {resource} {name})"));
            let (group, kind) = ("", resource);
            e.details = Some(serde_json::json!({"name": name, "group": group, "kind": kind}));
            e
        }
    }
}

/// `pods/{name}/exec`, `/attach`, `/portforward`: an upgrade relayed to the kubelet.
async fn pod_stream(
    api: &Arc<ApiServer>,
    parts: &http::request::Parts,
    info: &RequestInfo,
    user: &Arc<User>,
) -> ApiResult<Response<Body>> {
    if parts.method != Method::GET && parts.method != Method::POST {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    // A WebSocket upgrade comes as a GET, which also needs the right to create (as
    // Kubernetes' AuthorizePodWebsocketUpgradeCreatePermission).
    if parts.method == Method::GET {
        let mut create = info.clone();
        create.verb = "create".into();
        if let Err(reason) = api.auth.authorize(user, &create) {
            return Err(ApiError::new(
                403,
                "Forbidden",
                crate::auth::forbidden_message(user, &create, &reason),
            ));
        }
    }
    let pairs = query_pairs(parts.uri.query());
    let last = |k: &str| {
        pairs
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let flag = |k: &str| -> ApiResult<bool> {
        match last(k) {
            None | Some("") => Ok(false),
            Some(v) => go_bool(v).ok_or_else(|| {
                ApiError::bad_request(format!("strconv.ParseBool: parsing {v:?}: invalid syntax"))
            }),
        }
    };
    let (pod, node) = pod_and_target(api, info).await?;
    let mut params: Vec<(&'static str, String)> = Vec::new();
    let mut channels = translate::Channels::default();
    let path = if info.subresource == "portforward" {
        for (k, v) in &pairs {
            if k == "ports" || k == "port" {
                params.push(("port", v.clone()));
            }
        }
        format!("/portforward/{}/{}", info.namespace, info.name)
    } else {
        let container = pick_container(&pod, &info.name, last("container").unwrap_or(""))?;
        for (param, key) in [
            ("stdin", "input"),
            ("stdout", "output"),
            ("stderr", "error"),
            ("tty", "tty"),
        ] {
            if flag(param)? {
                params.push((key, "1".into()));
                match param {
                    "stdin" => channels.stdin = true,
                    "stdout" => channels.stdout = true,
                    "stderr" => channels.stderr = true,
                    _ => channels.tty = true,
                }
            }
        }
        if info.subresource == "exec" {
            for (k, v) in &pairs {
                if k == "command" {
                    params.push(("command", v.clone()));
                }
            }
        }
        format!(
            "/{}/{}/{}/{}",
            info.subresource, info.namespace, info.name, container
        )
    };
    let node = node.ok_or_else(|| {
        ApiError::bad_request(format!("pod {} does not have a host assigned", info.name))
    })?;
    if !is_upgrade(&parts.headers) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    let target = node_target(api, &node).await?;
    let mut path = path;
    if !params.is_empty() {
        path.push('?');
        path.push_str(&encode_query(&params));
    }
    if websocket::is_websocket(&parts.headers) {
        // WebSocket clients the kubelet's SPDY can serve: exec and attach as v5 channels,
        // port-forward tunneled. Others are relayed as they are.
        let offered = websocket::offered_protocols(&parts.headers);
        let wanted = if info.subresource == "portforward" {
            translate::TUNNEL_PROTOCOL
        } else {
            translate::V5_PROTOCOL
        };
        if offered.iter().any(|p| p == wanted) {
            return websocket_session(api, parts, &target, &path, wanted, channels).await;
        }
    }
    proxy_upgrade(api, parts, &target, &path, Bytes::new()).await
}

/// A kubelet's answer other than 101, relayed to the client as it is.
fn relay_response(resp: Response<Incoming>) -> Response<Body> {
    let (rparts, rbody) = resp.into_parts();
    let mut r = Response::new(relay_body(rbody));
    *r.status_mut() = rparts.status;
    for (name, value) in &rparts.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            r.headers_mut().append(name, value.clone());
        }
    }
    r
}

/// Serve a WebSocket client (`protocol`) over an SPDY session with the kubelet at `path`.
async fn websocket_session(
    api: &Arc<ApiServer>,
    parts: &http::request::Parts,
    target: &Target,
    path: &str,
    protocol: &'static str,
    channels: translate::Channels,
) -> ApiResult<Response<Body>> {
    let key = parts
        .headers
        .get(http::header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.trim().is_empty())
        .ok_or_else(|| ApiError::bad_request("missing Sec-WebSocket-Key"))?
        .to_string();
    let Some(client_upgrade) = parts.extensions.get::<hyper::upgrade::OnUpgrade>().cloned() else {
        return Err(ApiError::bad_request("Upgrade request required"));
    };
    let spdy_protocol = if protocol == translate::TUNNEL_PROTOCOL {
        translate::PORT_FORWARD_PROTOCOL
    } else {
        translate::V4_PROTOCOL
    };
    let req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(
            http::header::HOST,
            HeaderValue::from_str(&target.host_port())
                .unwrap_or_else(|_| HeaderValue::from_static("kubelet")),
        )
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::UPGRADE, "SPDY/3.1")
        .header("X-Stream-Protocol-Version", spdy_protocol)
        .body(Full::new(Bytes::new()))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut resp = send(api, target, req)
        .await
        .map_err(|e| ApiError::new(500, "", format!("error dialing backend: {e}")))?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(relay_response(resp));
    }
    let kubelet_upgrade = hyper::upgrade::on(&mut resp);
    tokio::spawn(async move {
        match tokio::join!(client_upgrade, kubelet_upgrade) {
            (Ok(client), Ok(kubelet)) => {
                let (client, kubelet) = (TokioIo::new(client), TokioIo::new(kubelet));
                if protocol == translate::TUNNEL_PROTOCOL {
                    translate::tunnel(client, kubelet).await;
                } else {
                    translate::exec_session(client, kubelet, channels).await;
                }
            }
            (c, k) => tracing::debug!(
                client = c.is_ok(),
                kubelet = k.is_ok(),
                "a websocket stream did not start"
            ),
        }
    });
    let mut r = Response::new(crate::handlers::full(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(
        http::header::CONNECTION,
        HeaderValue::from_static("Upgrade"),
    );
    if let Ok(v) = HeaderValue::from_str(&websocket::accept_key(&key)) {
        h.insert(http::header::SEC_WEBSOCKET_ACCEPT, v);
    }
    h.insert(
        http::header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static(protocol),
    );
    Ok(r)
}

/// Relay an upgrade request to the kubelet at `path`; on 101, join the two connections.
async fn proxy_upgrade(
    api: &Arc<ApiServer>,
    parts: &http::request::Parts,
    target: &Target,
    path: &str,
    body: Bytes,
) -> ApiResult<Response<Body>> {
    let Some(client_upgrade) = parts.extensions.get::<hyper::upgrade::OnUpgrade>().cloned() else {
        return Err(ApiError::bad_request("Upgrade request required"));
    };
    let mut builder = Request::builder().method(parts.method.clone()).uri(path);
    if let Some(h) = builder.headers_mut() {
        *h = forward_headers(&parts.headers, true);
        h.insert(
            http::header::HOST,
            HeaderValue::from_str(&target.host_port())
                .unwrap_or_else(|_| HeaderValue::from_static("kubelet")),
        );
    }
    let req = builder
        .body(Full::new(body))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut resp = send(api, target, req)
        .await
        .map_err(|e| ApiError::new(500, "", format!("error dialing backend: {e}")))?;
    let status = resp.status();
    let headers = resp.headers().clone();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(relay_response(resp));
    }
    let backend_upgrade = hyper::upgrade::on(&mut resp);
    tokio::spawn(async move {
        match tokio::join!(client_upgrade, backend_upgrade) {
            (Ok(client), Ok(backend)) => {
                let mut client = TokioIo::new(client);
                let mut backend = TokioIo::new(backend);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
            }
            (c, b) => tracing::debug!(
                client = c.is_ok(),
                kubelet = b.is_ok(),
                "a streaming upgrade did not complete"
            ),
        }
    });
    let mut r = Response::new(crate::handlers::full(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for (name, value) in &headers {
        r.headers_mut().append(name, value.clone());
    }
    Ok(r)
}

/// `nodes/{name}/proxy/{path}`: any request relayed to the node's kubelet.
async fn node_proxy(
    api: &Arc<ApiServer>,
    parts: &http::request::Parts,
    info: &RequestInfo,
    body: Bytes,
) -> ApiResult<Response<Body>> {
    // The name may carry a port: NAME:PORT (or SCHEME:NAME:PORT).
    let segs: Vec<&str> = info.name.split(':').collect();
    let (node, port) = match segs.as_slice() {
        [n] => (*n, None),
        [n, p] if p.parse::<u16>().is_ok() => (*n, p.parse::<u16>().ok()),
        ["https" | "", n, p] => (*n, p.parse::<u16>().ok()),
        _ => {
            return Err(ApiError::bad_request(format!(
                "invalid node request {:?}",
                info.name
            )))
        }
    };
    let mut target = node_target(api, node).await?;
    if let Some(p) = port {
        target.port = p;
    }
    // The path after `.../proxy`, as sent (encoded).
    let raw = parts.uri.path();
    let rest = raw
        .find("/proxy")
        .map(|i| &raw[i + "/proxy".len()..])
        .unwrap_or("");
    let mut path = if rest.is_empty() {
        "/".to_string()
    } else {
        rest.to_string()
    };
    if let Some(q) = parts.uri.query() {
        path.push('?');
        path.push_str(q);
    }
    if is_upgrade(&parts.headers) {
        return proxy_upgrade(api, parts, &target, &path, body).await;
    }
    let url = format!("https://{}{path}", target.host_port());
    let mut builder = Request::builder()
        .method(parts.method.clone())
        .uri(path.as_str());
    if let Some(h) = builder.headers_mut() {
        *h = forward_headers(&parts.headers, false);
        h.insert(
            http::header::HOST,
            HeaderValue::from_str(&target.host_port())
                .unwrap_or_else(|_| HeaderValue::from_static("kubelet")),
        );
    }
    let req = builder
        .body(Full::new(body))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let resp = send(api, &target, req).await.map_err(|e| {
        ApiError::new(
            503,
            "ServiceUnavailable",
            request_error(&parts.method, &url, &e),
        )
    })?;
    Ok(relay_response(resp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn log_parameters_are_checked_and_passed_on() {
        let q = Query::parse(Some(
            "container=c&follow=true&tailLines=10&timestamps=1&limitBytes=5&previous=false",
        ));
        let (c, params) = log_params("p", &q).unwrap();
        assert_eq!(c, "c");
        assert_eq!(
            encode_query(&params),
            "follow=true&limitBytes=5&tailLines=10&timestamps=true"
        );
        let e = log_params("p", &Query::parse(Some("tailLines=-1"))).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "PodLogOptions \"p\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
        );
        let e = log_params(
            "p",
            &Query::parse(Some("sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z")),
        )
        .unwrap_err();
        assert!(e
            .message
            .contains("at most one of `sinceTime` or `sinceSeconds` may be specified"));
        assert_eq!(
            log_params("p", &Query::parse(Some("limitBytes=0")))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            log_params("p", &Query::parse(Some("tailLines=x")))
                .unwrap_err()
                .code,
            400
        );
        let (_, p) =
            log_params("p", &Query::parse(Some("sinceTime=2024-01-01T00:00:00Z"))).unwrap();
        assert_eq!(encode_query(&p), "sinceTime=2024-01-01T00%3A00%3A00Z");
    }

    #[test]
    fn containers_are_chosen_as_kubernetes_chooses() {
        let one = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(pick_container(&one, "p", "").unwrap(), "a");
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        let e = pick_container(&two, "p", "").unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
        );
        assert_eq!(pick_container(&two, "p", "i").unwrap(), "i");
        assert_eq!(
            pick_container(&two, "p", "x").unwrap_err().message,
            "container x is not valid for pod p"
        );
    }

    #[test]
    fn kubelets_are_found_by_address_and_port() {
        let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.5"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10255}}}});
        assert_eq!(
            target_of(&node).unwrap(),
            Target {
                host: "10.0.0.5".into(),
                port: 10255
            }
        );
        let by_name = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}});
        assert_eq!(
            target_of(&by_name).unwrap(),
            Target {
                host: "n1".into(),
                port: 10250
            }
        );
        assert_eq!(target_of(&json!({})).unwrap_err().code, 500);
        let v6 = Target {
            host: "fd00::1".into(),
            port: 1,
        };
        assert_eq!(v6.host_port(), "[fd00::1]:1");
    }

    #[test]
    fn exec_queries_encode_like_go() {
        let params = vec![
            ("output", "1".to_string()),
            ("command", "sh".to_string()),
            ("command", "-c".to_string()),
            ("command", "echo hi; exit 3".to_string()),
            ("input", "1".to_string()),
        ];
        assert_eq!(
            encode_query(&params),
            "command=sh&command=-c&command=echo+hi%3B+exit+3&input=1&output=1"
        );
    }

    #[test]
    fn kubelet_refusals_become_api_errors() {
        let e = kubelet_error(
            400,
            "pods/log",
            "p",
            "container \"c\" in pod \"p\" is waiting to start: ContainerCreating",
        );
        assert_eq!((e.code, e.reason), (400, "BadRequest"));
        assert!(e.message.ends_with("ContainerCreating"));
        let e = kubelet_error(404, "pods/log", "p", "whatever");
        assert_eq!(
            e.message,
            "the server could not find the requested resource ( pods/log p)"
        );
        assert_eq!(kubelet_error(403, "pods/log", "p", "").reason, "Forbidden");
    }

    #[test]
    fn only_kubelet_subresources_are_handled() {
        let info =
            |method: Method, path: &str| RequestInfo::parse(&method, path, &Query::parse(None));
        assert!(handles(&info(
            Method::GET,
            "/api/v1/namespaces/d/pods/p/log"
        )));
        assert!(handles(&info(
            Method::POST,
            "/api/v1/namespaces/d/pods/p/exec"
        )));
        assert!(handles(&info(
            Method::GET,
            "/api/v1/nodes/n/proxy/stats/summary"
        )));
        assert!(!handles(&info(
            Method::GET,
            "/api/v1/namespaces/d/pods/p/status"
        )));
        assert!(!handles(&info(
            Method::GET,
            "/apis/x/v1/namespaces/d/pods/p/log"
        )));
        let mut h = HeaderMap::new();
        assert!(!is_upgrade(&h));
        h.insert("connection", "keep-alive, Upgrade".parse().unwrap());
        h.insert("upgrade", "SPDY/3.1".parse().unwrap());
        assert!(is_upgrade(&h));
        let f = forward_headers(&h, true);
        assert!(f.contains_key("upgrade"));
        assert!(!forward_headers(&h, false).contains_key("upgrade"));
    }
}
