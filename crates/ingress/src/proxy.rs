//! Serving one request: match it against the table in effect, then answer 404 (nothing
//! matched), 308 (plain HTTP to a host with a certificate), 503 (no ready endpoint), or pass
//! it to an endpoint over HTTP/1.1 and stream the answer back.
//!
//! Endpoints are taken in round-robin order. When connecting to one fails, the request goes
//! to the next one, once. A pooled connection that the backend closed just before the
//! request was written does not count: the request goes out on a new connection to the same
//! endpoint. Once a request has been written it is never sent twice.
//!
//! Headers: hop-by-hop headers are dropped both ways; `Host` is passed as the client sent it
//! (the HTTP/2 `:authority` becomes `Host`); X-Forwarded-For and X-Real-IP are set to the
//! client's address, replacing what the client sent (ingress-nginx's default, which trusts
//! no client), X-Forwarded-Proto/-Host/-Port to what the client reached, and X-Request-ID is
//! generated when absent. `Upgrade` requests (WebSockets) get a connection of their own,
//! spliced to the client's once the backend answers 101.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;

use crate::metrics::{Metrics, RouteStats};
use crate::pool::{self, Pool, PooledBody, Sender};
use crate::routes::{normalize_host, Current, Route, Target};

/// Target of the request log lines.
pub const ACCESS_LOG: &str = "capstan_ingress::access";
/// How long a backend may take to answer with its response head (ingress-nginx's
/// proxy-read-timeout).
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The body of every response: a backend's, or one of ours.
pub enum ProxyBody {
    Backend(PooledBody),
    Full(Option<Bytes>),
}

impl ProxyBody {
    fn text(s: String) -> ProxyBody {
        ProxyBody::Full(Some(Bytes::from(s)))
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ProxyBody::Backend(b) => Pin::new(b).poll_frame(cx),
            ProxyBody::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Backend(b) => b.is_end_stream(),
            ProxyBody::Full(d) => d.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Backend(b) => b.size_hint(),
            ProxyBody::Full(d) => SizeHint::with_exact(d.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}

/// The client connection a request came on.
#[derive(Clone, Debug)]
pub struct Conn {
    pub remote: SocketAddr,
    pub local: SocketAddr,
    pub tls: bool,
    /// The client's address and the port it reached, as header values (made once per
    /// connection, not per request).
    client_ip: HeaderValue,
    local_port: HeaderValue,
}

impl Conn {
    pub fn new(remote: SocketAddr, local: SocketAddr, tls: bool) -> Conn {
        Conn {
            remote,
            local,
            tls,
            client_ip: HeaderValue::from_str(&remote.ip().to_string())
                .unwrap_or(HeaderValue::from_static("")),
            local_port: HeaderValue::from(local.port()),
        }
    }
}

/// Everything requests share.
pub struct Proxy {
    pub current: Arc<Current>,
    pub pool: Arc<Pool>,
    pub metrics: Arc<Metrics>,
    /// The HTTPS port redirects point to.
    pub https_port: u16,
}

/// What the access log says about a request beyond its status.
struct Outcome {
    response: Response<ProxyBody>,
    upstream: Option<Target>,
}

impl Proxy {
    /// Answer one request (never an error: failures are status codes).
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        conn: Arc<Conn>,
    ) -> Result<Response<ProxyBody>, Infallible> {
        let started = Instant::now();
        let table = self.current.load();
        let host_value = request_host(&req);
        let raw_host = host_value
            .as_ref()
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let host = normalize_host(raw_host);
        // What the request log needs, only when it is on.
        let logged = tracing::enabled!(target: ACCESS_LOG, tracing::Level::INFO)
            .then(|| (req.method().clone(), req.uri().clone(), req.version()));
        let route = table.lookup(&host, req.uri().path());
        let (outcome, stats): (Outcome, &Arc<RouteStats>) = match route {
            None => (
                Outcome {
                    response: status_page(StatusCode::NOT_FOUND),
                    upstream: None,
                },
                self.metrics.unmatched(),
            ),
            Some(r) if r.ssl_redirect && !conn.tls => (self.redirect(&host, req.uri()), &r.stats),
            Some(r) => (
                self.forward(req, r, host_value.as_ref(), &conn).await,
                &r.stats,
            ),
        };
        let status = outcome.response.status();
        let elapsed = started.elapsed();
        stats.observe(status.as_u16(), elapsed);
        let Some((method, uri, version)) = logged else {
            return Ok(outcome.response);
        };
        tracing::info!(
            target: ACCESS_LOG,
            "{} \"{} {} {:?}\" {} {:.3}ms host={} ingress={} service={} upstream={}",
            conn.remote.ip(),
            method,
            uri.path_and_query().map_or("/", |p| p.as_str()),
            version,
            status.as_u16(),
            elapsed.as_secs_f64() * 1000.0,
            if host.is_empty() { "-" } else { &host },
            route.map_or("-".to_string(), |r| format!("{}/{}", r.namespace, r.ingress)),
            route.map_or("-", |r| r.backend.service.as_str()),
            outcome
                .upstream
                .as_ref()
                .map_or("-".to_string(), ToString::to_string),
        );
        Ok(outcome.response)
    }

    fn redirect(&self, host: &str, uri: &Uri) -> Outcome {
        let port = if self.https_port == 443 {
            String::new()
        } else {
            format!(":{}", self.https_port)
        };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let location = format!(
            "https://{host}{port}{}",
            uri.path_and_query().map_or("/", |p| p.as_str())
        );
        let mut response = status_page(StatusCode::PERMANENT_REDIRECT);
        if let Ok(v) = HeaderValue::from_str(&location) {
            response.headers_mut().insert(header::LOCATION, v);
        }
        Outcome {
            response,
            upstream: None,
        }
    }

    async fn forward(
        &self,
        mut req: Request<Incoming>,
        route: &Route,
        host: Option<&HeaderValue>,
        conn: &Conn,
    ) -> Outcome {
        let Some((first, second)) = route.backend.pick() else {
            return Outcome {
                response: status_page(StatusCode::SERVICE_UNAVAILABLE),
                upstream: None,
            };
        };
        let upgrade = upgrade_protocol(&req);
        prepare_request(&mut req, host, conn, upgrade.as_ref());
        if let Some(protocol) = upgrade {
            return self.upgrade(req, protocol, first, second).await;
        }
        let mut req = req;
        let mut tried = first;
        for target in [Some(first), second].into_iter().flatten() {
            tried = target;
            match self.send(target, req).await {
                Sent::Response(resp, tx) => {
                    return Outcome {
                        response: backend_response(
                            resp,
                            Some((self.pool.clone(), target.clone(), tx)),
                        ),
                        upstream: Some(target.clone()),
                    }
                }
                Sent::Unreachable(back, why) => {
                    tracing::debug!(endpoint = %target, error = %why, "connecting to the endpoint failed");
                    req = back;
                }
                Sent::Failed(status, why) => {
                    tracing::debug!(endpoint = %target, error = %why, "the endpoint did not answer");
                    return Outcome {
                        response: status_page(status),
                        upstream: Some(target.clone()),
                    };
                }
            }
        }
        Outcome {
            response: status_page(StatusCode::BAD_GATEWAY),
            upstream: Some(tried.clone()),
        }
    }

    /// Send `req` to `target`: on an idle pooled connection if one is still open, else on a
    /// new one.
    async fn send(&self, target: &Target, mut req: Request<Incoming>) -> Sent {
        while let Some(mut tx) = self.pool.checkout(target).await {
            match tokio::time::timeout(READ_TIMEOUT, tx.try_send_request(req)).await {
                Err(_) => return Sent::Failed(StatusCode::GATEWAY_TIMEOUT, "timed out".into()),
                Ok(Ok(resp)) => return Sent::Response(resp, tx),
                Ok(Err(mut e)) => match e.take_message() {
                    // The connection closed before the request went out: another one.
                    Some(back) => req = back,
                    None => {
                        return Sent::Failed(StatusCode::BAD_GATEWAY, e.into_error().to_string())
                    }
                },
            }
        }
        let mut tx = match pool::connect(target).await {
            Ok(tx) => tx,
            Err(e) => return Sent::Unreachable(req, e.to_string()),
        };
        match tokio::time::timeout(READ_TIMEOUT, tx.try_send_request(req)).await {
            Err(_) => Sent::Failed(StatusCode::GATEWAY_TIMEOUT, "timed out".into()),
            Ok(Ok(resp)) => Sent::Response(resp, tx),
            Ok(Err(mut e)) => match e.take_message() {
                Some(back) => Sent::Unreachable(back, e.into_error().to_string()),
                None => Sent::Failed(StatusCode::BAD_GATEWAY, e.into_error().to_string()),
            },
        }
    }

    async fn upgrade(
        &self,
        mut req: Request<Incoming>,
        protocol: HeaderValue,
        first: &Target,
        second: Option<&Target>,
    ) -> Outcome {
        let client_side = hyper::upgrade::on(&mut req);
        let mut req = req;
        let mut tried = first;
        for target in [Some(first), second].into_iter().flatten() {
            tried = target;
            let mut tx = match pool::connect_upgradable(target).await {
                Ok(tx) => tx,
                Err(e) => {
                    tracing::debug!(endpoint = %target, error = %e, "connecting to the endpoint failed");
                    continue;
                }
            };
            let mut resp = match tokio::time::timeout(READ_TIMEOUT, tx.try_send_request(req)).await
            {
                Err(_) => {
                    return Outcome {
                        response: status_page(StatusCode::GATEWAY_TIMEOUT),
                        upstream: Some(target.clone()),
                    }
                }
                Ok(Ok(resp)) => resp,
                Ok(Err(mut e)) => match e.take_message() {
                    Some(back) => {
                        req = back;
                        continue;
                    }
                    None => {
                        return Outcome {
                            response: status_page(StatusCode::BAD_GATEWAY),
                            upstream: Some(target.clone()),
                        }
                    }
                },
            };
            if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
                // The backend declined: an ordinary answer, on a connection not reused.
                return Outcome {
                    response: backend_response(resp, None),
                    upstream: Some(target.clone()),
                };
            }
            let backend_side = hyper::upgrade::on(&mut resp);
            tokio::spawn(async move {
                match futures::future::try_join(client_side, backend_side).await {
                    Ok((client, backend)) => {
                        let mut client = TokioIo::new(client);
                        let mut backend = TokioIo::new(backend);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
                    }
                    Err(e) => tracing::debug!(error = %e, "upgrade failed"),
                }
            });
            let (parts, _) = resp.into_parts();
            let mut response = Response::from_parts(parts, ProxyBody::Full(None));
            strip_hop_by_hop(response.headers_mut());
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            response.headers_mut().insert(header::UPGRADE, protocol);
            return Outcome {
                response,
                upstream: Some(target.clone()),
            };
        }
        Outcome {
            response: status_page(StatusCode::BAD_GATEWAY),
            upstream: Some(tried.clone()),
        }
    }
}

enum Sent {
    Response(Response<Incoming>, Sender),
    /// Nothing was written: the request, to try elsewhere.
    Unreachable(Request<Incoming>, String),
    Failed(StatusCode, String),
}

/// The host the client asked for, as sent: the URI's authority (HTTP/2, absolute-form
/// HTTP/1.1), else the Host header.
fn request_host<B>(req: &Request<B>) -> Option<HeaderValue> {
    match req.uri().authority() {
        Some(a) => HeaderValue::from_str(a.as_str()).ok(),
        None => req.headers().get(header::HOST).cloned(),
    }
}

/// The protocol of an HTTP/1.1 `Connection: upgrade` request.
fn upgrade_protocol<B>(req: &Request<B>) -> Option<HeaderValue> {
    if req.version() != Version::HTTP_11 {
        return None;
    }
    let upgrade = req.headers().get(header::UPGRADE)?;
    let asks = req
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    asks.then(|| upgrade.clone())
}

const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for h in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(h);
    }
}

/// 32 random hex digits.
fn request_id() -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let id: u128 = rand::random();
    let mut digits = [0u8; 32];
    for (i, d) in digits.iter_mut().enumerate() {
        *d = HEX[((id >> (124 - 4 * i)) & 0xf) as usize];
    }
    HeaderValue::from_bytes(&digits).unwrap_or(HeaderValue::from_static("0"))
}

/// Turn a client's request into the one the backend gets.
fn prepare_request<B>(
    req: &mut Request<B>,
    host: Option<&HeaderValue>,
    conn: &Conn,
    upgrade: Option<&HeaderValue>,
) {
    // Origin form: the path and query alone (shared, not re-parsed).
    let mut parts = http::uri::Parts::default();
    parts.path_and_query = Some(
        req.uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
    );
    *req.uri_mut() = Uri::from_parts(parts).unwrap_or_else(|_| Uri::from_static("/"));
    *req.version_mut() = Version::HTTP_11;
    let headers = req.headers_mut();
    strip_hop_by_hop(headers);
    if let Some(h) = host.filter(|h| !h.is_empty()) {
        headers.insert(header::HOST, h.clone());
        headers.insert(HeaderName::from_static("x-forwarded-host"), h.clone());
    }
    if !conn.client_ip.is_empty() {
        headers.insert(
            HeaderName::from_static("x-forwarded-for"),
            conn.client_ip.clone(),
        );
        headers.insert(HeaderName::from_static("x-real-ip"), conn.client_ip.clone());
    }
    headers.insert(
        HeaderName::from_static("x-forwarded-proto"),
        HeaderValue::from_static(if conn.tls { "https" } else { "http" }),
    );
    headers.insert(
        HeaderName::from_static("x-forwarded-port"),
        conn.local_port.clone(),
    );
    let rid = HeaderName::from_static("x-request-id");
    if !headers.contains_key(&rid) {
        headers.insert(rid, request_id());
    }
    if let Some(p) = upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, p.clone());
    }
}

fn backend_response(
    resp: Response<Incoming>,
    giveback: Option<(Arc<Pool>, Target, Sender)>,
) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(parts, ProxyBody::Backend(PooledBody::new(body, giveback)))
}

/// A small HTML page for a status we answer ourselves (as nginx words them).
pub fn status_page(status: StatusCode) -> Response<ProxyBody> {
    let reason = match status {
        StatusCode::SERVICE_UNAVAILABLE => "Service Temporarily Unavailable",
        s => s.canonical_reason().unwrap_or(""),
    };
    let title = format!("{} {reason}", status.as_u16());
    let body = format!(
        "<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>\r\n<hr><center>capstan ingress</center>\r\n</body>\r\n</html>\r\n"
    );
    let mut r = Response::new(ProxyBody::text(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(tls: bool) -> Conn {
        Conn::new(
            "192.0.2.7:5555".parse().unwrap(),
            "0.0.0.0:8443".parse().unwrap(),
            tls,
        )
    }

    #[test]
    fn requests_lose_hop_by_hop_headers_and_gain_forwarded_ones() {
        let mut req = Request::builder()
            .uri("http://a.example.com:8080/p?q=1")
            .version(Version::HTTP_2)
            .header("connection", "keep-alive, x-secret")
            .header("x-secret", "1")
            .header("keep-alive", "timeout=5")
            .header("te", "trailers")
            .header("x-forwarded-for", "6.6.6.6")
            .header("x-request-id", "abc")
            .header("accept", "*/*")
            .body(())
            .unwrap();
        let host = request_host(&req).unwrap();
        assert_eq!(host, "a.example.com:8080");
        prepare_request(&mut req, Some(&host), &conn(true), None);
        assert_eq!(req.uri(), "/p?q=1");
        assert_eq!(req.version(), Version::HTTP_11);
        let h = req.headers();
        for gone in ["connection", "x-secret", "keep-alive", "te"] {
            assert!(!h.contains_key(gone), "{gone}");
        }
        assert_eq!(h["host"], "a.example.com:8080");
        assert_eq!(h["x-forwarded-host"], "a.example.com:8080");
        assert_eq!(h["x-forwarded-for"], "192.0.2.7");
        assert_eq!(h["x-real-ip"], "192.0.2.7");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-port"], "8443");
        assert_eq!(h["x-request-id"], "abc");
        assert_eq!(h["accept"], "*/*");

        let mut plain = Request::builder()
            .uri("/x")
            .header("host", "b.example.com")
            .body(())
            .unwrap();
        let host = request_host(&plain).unwrap();
        prepare_request(&mut plain, Some(&host), &conn(false), None);
        assert_eq!(plain.headers()["host"], "b.example.com");
        assert_eq!(plain.headers()["x-forwarded-proto"], "http");
        assert_eq!(plain.headers()["x-request-id"].len(), 32);
    }

    #[test]
    fn upgrades_keep_their_headers() {
        let mut req = Request::builder()
            .uri("/ws")
            .header("host", "a")
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .body(())
            .unwrap();
        let p = upgrade_protocol(&req).expect("an upgrade");
        assert_eq!(p, "websocket");
        prepare_request(
            &mut req,
            Some(&HeaderValue::from_static("a")),
            &conn(false),
            Some(&p),
        );
        assert_eq!(req.headers()["connection"], "upgrade");
        assert_eq!(req.headers()["upgrade"], "websocket");

        let no = Request::builder()
            .uri("/")
            .header("upgrade", "websocket")
            .body(())
            .unwrap();
        assert!(
            upgrade_protocol(&no).is_none(),
            "Upgrade without Connection: upgrade"
        );
    }

    #[test]
    fn status_pages_and_redirects() {
        let r = status_page(StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.status(), 503);
        match r.body() {
            ProxyBody::Full(Some(b)) => {
                assert!(String::from_utf8_lossy(b).contains("503 Service Temporarily Unavailable"))
            }
            _ => panic!("a full body"),
        }
        let p = Proxy {
            current: Arc::new(Current::default()),
            pool: Arc::new(Pool::new()),
            metrics: Arc::new(Metrics::new()),
            https_port: 8443,
        };
        let o = p.redirect("a.example.com", &"/x?y=1".parse().unwrap());
        assert_eq!(o.response.status(), 308);
        assert_eq!(
            o.response.headers()["location"],
            "https://a.example.com:8443/x?y=1"
        );
        let p443 = Proxy {
            https_port: 443,
            ..p
        };
        let o = p443.redirect("a.example.com", &"/".parse().unwrap());
        assert_eq!(o.response.headers()["location"], "https://a.example.com/");
    }
}
