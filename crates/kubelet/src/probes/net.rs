//! The network side of probes and hooks: TCP dials, an HTTP/1.1 GET client (HTTP or HTTPS
//! without certificate checks, redirects followed only on the same host), and the gRPC
//! health check (`grpc.health.v1.Health/Check` over HTTP/2 with a hand-made protobuf
//! encoding). Errors read like the Go kubelet's (`dial tcp 10.1.2.3:80: connect:
//! connection refused`).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

use super::gofmt;

/// How much of a response body is read (Kubernetes: 10 KiB).
pub const MAX_BODY: usize = 10 * 1024;
/// How many requests one GET makes at most (the first and its redirects).
const MAX_REQUESTS: usize = 10;

/// `kube-probe/1.32` or `kube-lifecycle/1.32`.
pub fn user_agent(purpose: &str) -> String {
    let v = crate::KUBELET_VERSION.trim_start_matches('v');
    let mut parts = v.split('.');
    let major = parts.next().unwrap_or("1");
    let minor = parts.next().unwrap_or("0");
    format!("kube-{purpose}/{major}.{minor}")
}

/// Connect to `host:port` the way the probes' dialer does: an empty host is this machine,
/// names are resolved. The error is Go's (`dial tcp ADDR: connect: connection refused`).
pub async fn dial(host: &str, port: u16) -> Result<TcpStream, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let ips: Vec<IpAddr> = if bare.is_empty() {
        vec![IpAddr::from([127, 0, 0, 1])]
    } else if let Ok(ip) = bare.parse::<IpAddr>() {
        vec![ip]
    } else {
        match tokio::net::lookup_host((bare, port)).await {
            Ok(addrs) => addrs.map(|a| a.ip()).collect(),
            Err(_) => return Err(format!("dial tcp: lookup {bare}: no such host")),
        }
    };
    let mut last = format!("dial tcp: lookup {bare}: no such host");
    for ip in ips {
        let addr = SocketAddr::new(ip, port);
        let socket = match ip {
            IpAddr::V4(_) => TcpSocket::new_v4(),
            IpAddr::V6(_) => TcpSocket::new_v6(),
        };
        let socket = match socket {
            Ok(s) => s,
            Err(e) => {
                last = format!("dial tcp {addr}: socket: {}", gofmt::os_error(&e));
                continue;
            }
        };
        match socket.connect(addr).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = format!("dial tcp {addr}: connect: {}", gofmt::os_error(&e)),
        }
    }
    Err(last)
}

/// The TCP probe: success when a connection opens within `timeout`.
pub async fn tcp_check(host: &str, port: u16, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, dial(host, port)).await {
        Ok(Ok(_stream)) => Ok(()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!(
            "dial tcp {}: i/o timeout",
            gofmt::join_host_port(host, port)
        )),
    }
}

/// An absolute http(s) URL, split the way the GET client needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// `http` or `https`.
    pub scheme: String,
    /// `host`, `host:port` or `[v6]:port`.
    pub authority: String,
    /// Path and query (empty or starting with `/`).
    pub path: String,
}

impl Url {
    /// The URL the way Go prints it in errors.
    pub fn text(&self) -> String {
        format!("{}://{}{}", self.scheme, self.authority, self.path)
    }

    /// `url.Hostname()`: the host without port or brackets.
    pub fn hostname(&self) -> &str {
        let a = self.authority.as_str();
        if let Some(rest) = a.strip_prefix('[') {
            return rest.split(']').next().unwrap_or("");
        }
        match a.rfind(':') {
            Some(i) => &a[..i],
            None => a,
        }
    }

    /// The port, or the scheme's default.
    pub fn port(&self) -> Option<u16> {
        let a = self.authority.as_str();
        let after = match a.strip_prefix('[') {
            Some(rest) => rest.split_once(']').map(|(_, p)| p).unwrap_or(""),
            None => a.rfind(':').map(|i| &a[i..]).unwrap_or(""),
        };
        match after.strip_prefix(':') {
            Some(p) if !p.is_empty() => p.parse().ok(),
            _ => Some(if self.scheme == "https" { 443 } else { 80 }),
        }
    }

    /// Parse an absolute URL (`scheme://authority/path?query#fragment`).
    pub fn parse(s: &str) -> Option<Url> {
        let (scheme, rest) = s.split_once("://")?;
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            return None;
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        let path = strip_fragment(&rest[end..]);
        Some(Url {
            scheme: scheme.to_ascii_lowercase(),
            authority: authority.to_string(),
            path: normalize_path(path),
        })
    }

    /// Resolve a Location header against this URL.
    pub fn join(&self, location: &str) -> Option<Url> {
        let loc = location.trim();
        if loc.contains("://") && Url::parse(loc).is_some() {
            return Url::parse(loc);
        }
        if let Some(rest) = loc.strip_prefix("//") {
            return Url::parse(&format!("{}://{rest}", self.scheme));
        }
        let loc = strip_fragment(loc);
        let path = if loc.starts_with('/') {
            loc.to_string()
        } else if loc.starts_with('?') {
            let base = self.path.split('?').next().unwrap_or("");
            format!("{}{loc}", if base.is_empty() { "/" } else { base })
        } else if loc.is_empty() {
            self.path.clone()
        } else {
            let base = self.path.split('?').next().unwrap_or("");
            let dir = match base.rfind('/') {
                Some(i) => &base[..=i],
                None => "/",
            };
            format!("{dir}{loc}")
        };
        Some(Url {
            scheme: self.scheme.clone(),
            authority: self.authority.clone(),
            path: normalize_path(&path),
        })
    }
}

fn strip_fragment(s: &str) -> &str {
    s.split('#').next().unwrap_or("")
}

/// Paths without a leading slash get one (Go re-parses the URL it builds, which adds it).
fn normalize_path(p: &str) -> String {
    if p.is_empty() || p.starts_with('/') {
        p.to_string()
    } else {
        format!("/{p}")
    }
}

/// A response: its status code and the first [`MAX_BODY`] bytes of its body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why a GET failed.
#[derive(Debug, PartialEq, Eq)]
pub enum GetError {
    /// The request failed (Go's `client.Do` error, e.g. `Get "http://...": dial tcp ...`).
    Request(String),
    /// The response came but reading its body failed.
    Body(String),
}

impl GetError {
    pub fn text(&self) -> &str {
        match self {
            GetError::Request(s) | GetError::Body(s) => s,
        }
    }
}

/// One GET as the kubelet makes it: `Connection: close`, no compression, redirects
/// followed only to the same host name (a redirect elsewhere is returned as the response),
/// `deadline` over everything (None: no limit).
pub async fn get(
    url: Url,
    headers: &[(String, String)],
    host_header: Option<&str>,
    deadline: Option<Instant>,
) -> Result<Response, GetError> {
    let first_host = url.hostname().to_string();
    let mut url = url;
    let mut host_header = host_header.map(str::to_string);
    let mut requests = 0;
    loop {
        requests += 1;
        let attempt = request(&url, headers, host_header.as_deref());
        let outcome = match deadline {
            Some(d) => match tokio::time::timeout_at(d, attempt).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(GetError::Request(format!(
                        "Get {}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                        gofmt::quote_str(&url.text())
                    )))
                }
            },
            None => attempt.await,
        };
        let (status, location, body, conn) = match outcome {
            Ok(r) => r,
            Err(e) => {
                return Err(GetError::Request(format!(
                    "Get {}: {e}",
                    gofmt::quote_str(&url.text())
                )))
            }
        };
        let redirect = matches!(status, 301 | 302 | 303 | 307 | 308);
        if let (true, Some(loc)) = (redirect, location.as_deref()) {
            let Some(next) = url.join(loc) else {
                conn.abort();
                return Err(GetError::Request(format!(
                    "Get {}: failed to parse Location header {}",
                    gofmt::quote_str(&url.text()),
                    gofmt::quote_str(loc)
                )));
            };
            if next.hostname() == first_host {
                conn.abort();
                if requests >= MAX_REQUESTS {
                    return Err(GetError::Request(format!(
                        "Get {}: stopped after 10 redirects",
                        gofmt::quote_str(&next.text())
                    )));
                }
                // A custom Host survives only relative redirects.
                if loc.contains("//") {
                    host_header = None;
                }
                url = next;
                continue;
            }
        }
        let body = read_body(body, deadline).await;
        conn.abort();
        return body.map(|body| Response { status, body });
    }
}

/// Read up to [`MAX_BODY`] bytes of a body.
async fn read_body(mut body: Incoming, deadline: Option<Instant>) -> Result<Vec<u8>, GetError> {
    let read = async {
        let mut out = Vec::new();
        while out.len() < MAX_BODY {
            match body.frame().await {
                None => break,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        let room = MAX_BODY - out.len();
                        out.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
                Some(Err(e)) => return Err(GetError::Body(hyper_error(&e))),
            }
        }
        Ok(out)
    };
    match deadline {
        Some(d) => tokio::time::timeout_at(d, read).await.unwrap_or_else(|_| {
            Err(GetError::Body(
                "context deadline exceeded (Client.Timeout or context cancellation while reading body)"
                    .into(),
            ))
        }),
        None => read.await,
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Exchange = (u16, Option<String>, Incoming, tokio::task::JoinHandle<()>);

/// One request/response on a fresh connection.
async fn request(
    url: &Url,
    headers: &[(String, String)],
    host_header: Option<&str>,
) -> Result<Exchange, String> {
    let port = url
        .port()
        .ok_or_else(|| format!("invalid port in URL {}", gofmt::quote_str(&url.text())))?;
    let host = url.hostname().to_string();
    let tcp = dial(&host, port).await?;
    let io: Box<dyn Io> = match url.scheme.as_str() {
        "http" => Box::new(tcp),
        "https" => {
            let name = rustls::pki_types::ServerName::try_from(host.clone()).unwrap_or(
                rustls::pki_types::ServerName::IpAddress(rustls::pki_types::IpAddr::from(
                    std::net::Ipv4Addr::UNSPECIFIED,
                )),
            );
            let config = tls_config().ok_or_else(|| "tls: no usable configuration".to_string())?;
            let connector = tokio_rustls::TlsConnector::from(config);
            match connector.connect(name, tcp).await {
                Ok(s) => Box::new(s),
                Err(e) => return Err(tls_error(&e)),
            }
        }
        other => {
            return Err(format!(
                "unsupported protocol scheme {}",
                gofmt::quote_str(other)
            ))
        }
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| hyper_error(&e))?;
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = if url.path.is_empty() {
        "/"
    } else {
        url.path.as_str()
    };
    let mut req = hyper::Request::builder()
        .method(hyper::Method::GET)
        .uri(path);
    let host_value = host_header
        .filter(|h| !h.is_empty())
        .unwrap_or(&url.authority);
    req = req.header(hyper::header::HOST, host_value);
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("host") {
            continue;
        }
        let name = hyper::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            format!(
                "net/http: invalid header field name {}",
                gofmt::quote_str(name)
            )
        })?;
        let value = hyper::header::HeaderValue::from_bytes(value.as_bytes()).map_err(|_| {
            format!(
                "net/http: invalid header field value for {}",
                gofmt::quote_str(name.as_str())
            )
        })?;
        req = req.header(name, value);
    }
    req = req.header(hyper::header::CONNECTION, "close");
    let req = req.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
    let resp = match sender.send_request(req).await {
        Ok(r) => r,
        Err(e) => {
            conn.abort();
            return Err(hyper_error(&e));
        }
    };
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get(hyper::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok((status, location, resp.into_body(), conn))
}

/// A hyper error in Go's words.
fn hyper_error(e: &hyper::Error) -> String {
    if e.is_incomplete_message() || e.is_closed() {
        return "EOF".into();
    }
    if e.is_parse() || e.is_parse_status() {
        return "net/http: HTTP/1.x transport connection broken: malformed HTTP response".into();
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return format!("read: {}", gofmt::os_error(io));
        }
        source = s.source();
    }
    e.to_string()
}

/// A TLS handshake error in Go's words. A plain-HTTP answer to the ClientHello is what Go
/// calls `server gave HTTP response to HTTPS client`.
fn tls_error(e: &std::io::Error) -> String {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)) => {
            "http: server gave HTTP response to HTTPS client".into()
        }
        Some(rustls::Error::AlertReceived(alert)) => {
            format!("remote error: tls: {}", format!("{alert:?}").to_lowercase())
        }
        Some(other) => format!("tls: {other}"),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof => "EOF".into(),
        None => gofmt::os_error(e),
    }
}

/// The client TLS settings of probes and hooks: no certificate verification (Kubernetes'
/// probes skip it too), HTTP/1.1 only.
fn tls_config() -> Option<Arc<rustls::ClientConfig>> {
    static CONFIG: OnceLock<Option<Arc<rustls::ClientConfig>>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map(|b| {
                    Arc::new(
                        b.dangerous()
                            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
                            .with_no_client_auth(),
                    )
                })
                .ok()
        })
        .clone()
}

/// Accept any server certificate (signatures are still checked).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
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
            &self.0.signature_verification_algorithms,
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
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The serving states of `grpc.health.v1.HealthCheckResponse`.
pub fn serving_status_name(status: u64) -> String {
    match status {
        0 => "UNKNOWN".into(),
        1 => "SERVING".into(),
        2 => "NOT_SERVING".into(),
        3 => "SERVICE_UNKNOWN".into(),
        n => n.to_string(),
    }
}

/// `HealthCheckRequest { service = 1 }` in protobuf.
pub fn encode_health_request(service: &str) -> Vec<u8> {
    let mut out = Vec::new();
    if !service.is_empty() {
        out.push(0x0a);
        put_varint(&mut out, service.len() as u64);
        out.extend_from_slice(service.as_bytes());
    }
    out
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The `status` (field 1) of a `HealthCheckResponse`; unknown fields are skipped.
pub fn decode_health_response(buf: &[u8]) -> Result<u64, String> {
    let bad = || "proto: cannot parse invalid wire-format data".to_string();
    let mut pos = 0;
    let mut status = 0;
    while pos < buf.len() {
        let key = get_varint(buf, &mut pos).ok_or_else(bad)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                let v = get_varint(buf, &mut pos).ok_or_else(bad)?;
                if field == 1 {
                    status = v;
                }
            }
            1 => {
                pos = pos
                    .checked_add(8)
                    .filter(|p| *p <= buf.len())
                    .ok_or_else(bad)?
            }
            5 => {
                pos = pos
                    .checked_add(4)
                    .filter(|p| *p <= buf.len())
                    .ok_or_else(bad)?
            }
            2 => {
                let len = get_varint(buf, &mut pos).ok_or_else(bad)?;
                pos = usize::try_from(len)
                    .ok()
                    .and_then(|l| pos.checked_add(l))
                    .filter(|p| *p <= buf.len())
                    .ok_or_else(bad)?;
            }
            _ => return Err(bad()),
        }
    }
    Ok(status)
}

/// Wrap a message in gRPC's length-prefixed frame.
pub fn grpc_frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// The first message of a gRPC response body.
pub fn grpc_unframe(body: &[u8]) -> Result<&[u8], (capstan_cri::Code, String)> {
    if body.len() < 5 {
        return Err((
            capstan_cri::Code::Internal,
            "server closed the stream without sending a response message".into(),
        ));
    }
    if body[0] != 0 {
        return Err((
            capstan_cri::Code::Internal,
            "grpc: compressed flag set with identity or empty encoding".into(),
        ));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    body.get(5..5 + len).ok_or((
        capstan_cri::Code::Internal,
        "server closed the stream without sending a complete message".into(),
    ))
}

/// Decode a `grpc-message` value (percent-encoded).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn code_from_http(status: u16) -> capstan_cri::Code {
    use capstan_cri::Code;
    match status {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// How a gRPC health check ended.
#[derive(Debug, PartialEq, Eq)]
pub enum GrpcOutcome {
    /// The server answered with this serving status.
    Status(u64),
    /// No connection within the timeout.
    ConnectTimeout,
    /// The call did not finish within the timeout.
    CallTimeout,
    /// The call failed with a gRPC status.
    Failed(capstan_cri::Code, String),
}

/// Call `grpc.health.v1.Health/Check` on `host:port`. Like grpc-go with a blocking dial,
/// failed connections are retried until the timeout.
pub async fn grpc_check(host: &str, port: u16, service: &str, timeout: Duration) -> GrpcOutcome {
    let deadline = Instant::now() + timeout;
    let authority = gofmt::join_host_port(host, port);
    let mut sender = loop {
        let attempt = async {
            let tcp = dial(host, port).await?;
            let (sender, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                    .await
                    .map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok::<_, String>(sender)
        };
        match tokio::time::timeout_at(deadline, attempt).await {
            Ok(Ok(s)) => break s,
            Ok(Err(_)) => {
                let retry = (Instant::now() + Duration::from_millis(200)).min(deadline);
                tokio::time::sleep_until(retry).await;
                if Instant::now() >= deadline {
                    return GrpcOutcome::ConnectTimeout;
                }
            }
            Err(_) => return GrpcOutcome::ConnectTimeout,
        }
    };
    let call = async {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let body = grpc_frame(&encode_health_request(service));
        let req = hyper::Request::builder()
            .method(hyper::Method::POST)
            .uri(format!("http://{authority}/grpc.health.v1.Health/Check"))
            .header(hyper::header::CONTENT_TYPE, "application/grpc")
            .header(hyper::header::TE, "trailers")
            .header(
                hyper::header::USER_AGENT,
                format!("{} grpc-go/1.65.0", user_agent("probe")),
            )
            .header("grpc-timeout", format!("{}u", remaining.as_micros().max(1)))
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| (capstan_cri::Code::Internal, e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| (capstan_cri::Code::Unavailable, e.to_string()))?;
        let (parts, mut body) = resp.into_parts();
        let header_status = grpc_status(&parts.headers);
        if let Some((code, msg)) = header_status {
            return if code == capstan_cri::Code::Ok {
                Err((
                    capstan_cri::Code::Internal,
                    "server closed the stream without sending a response message".into(),
                ))
            } else {
                Err((code, msg))
            };
        }
        if parts.status != hyper::StatusCode::OK {
            return Err((
                code_from_http(parts.status.as_u16()),
                format!(
                    "unexpected HTTP status code received from server: {} ({})",
                    parts.status.as_u16(),
                    parts.status.canonical_reason().unwrap_or("")
                ),
            ));
        }
        let mut data = Vec::new();
        let mut trailer_status = None;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| (capstan_cri::Code::Unavailable, e.to_string()))?;
            match frame.into_data() {
                Ok(d) => data.extend_from_slice(&d),
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        trailer_status = grpc_status(&trailers);
                    }
                }
            }
        }
        match trailer_status {
            Some((capstan_cri::Code::Ok, _)) => {}
            Some((code, msg)) => return Err((code, msg)),
            None => {
                return Err((
                    capstan_cri::Code::Internal,
                    "server closed the stream without sending trailers".into(),
                ))
            }
        }
        let message = grpc_unframe(&data)?;
        decode_health_response(message).map_err(|e| {
            (
                capstan_cri::Code::Internal,
                format!("grpc: failed to unmarshal the received message: {e}"),
            )
        })
    };
    match tokio::time::timeout_at(deadline, call).await {
        Ok(Ok(status)) => GrpcOutcome::Status(status),
        Ok(Err((capstan_cri::Code::DeadlineExceeded, _))) => GrpcOutcome::CallTimeout,
        Ok(Err((code, msg))) => GrpcOutcome::Failed(code, msg),
        Err(_) => GrpcOutcome::CallTimeout,
    }
}

fn grpc_status(headers: &hyper::HeaderMap) -> Option<(capstan_cri::Code, String)> {
    let code = headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .trim()
        .parse::<i32>()
        .ok()?;
    let msg = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(percent_decode)
        .unwrap_or_default();
    Some((capstan_cri::Code::from_i32(code), msg))
}
