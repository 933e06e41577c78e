//! `capstan ingress`: an Ingress controller (networking.k8s.io/v1), in the way ingress-nginx
//! serves Ingresses: one HTTP and one HTTPS listener for every host, a routing table built from
//! all Ingresses of our class ([`class`], [`routes`]), certificates by SNI from their TLS
//! Secrets ([`tls`], [`secrets`]), and a reverse proxy to the services' ready endpoints
//! ([`proxy`], [`pool`]). Each change of configuration swaps the whole table at once; requests
//! in flight finish on the table they started with. Status, events and metrics are in
//! [`controller`] and [`metrics`].

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio_rustls::TlsAcceptor;

pub mod class;
pub mod controller;
pub mod deploy;
pub mod metrics;
pub mod pool;
pub mod proxy;
pub mod routes;
pub mod secrets;
pub mod tls;

pub use class::CONTROLLER;
use controller::{Controller, Published};
use metrics::Metrics;
use proxy::{Conn, Proxy, ProxyBody};
use routes::Current;

/// How long open connections may take to finish their requests at shutdown.
const GRACE: Duration = Duration::from_secs(10);
/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The controller's settings (`capstan ingress` flags).
#[derive(Clone, Debug)]
pub struct Options {
    /// The address every listener binds.
    pub bind_address: IpAddr,
    pub http_port: u16,
    pub https_port: u16,
    /// `/metrics` and `/healthz`.
    pub metrics_port: u16,
    /// The IngressClass whose Ingresses we serve (its controller must be
    /// [`CONTROLLER`]).
    pub ingress_class: String,
    /// What to write into status.loadBalancer.ingress (an IP or a host name); default: the
    /// InternalIP of `node_name`, else this machine's first non-loopback address.
    pub publish_address: Option<String>,
    pub node_name: Option<String>,
    /// Data-plane threads (0: one per core).
    pub workers: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            bind_address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            http_port: 80,
            https_port: 443,
            metrics_port: 10254,
            ingress_class: "capstan".into(),
            publish_address: None,
            node_name: None,
            workers: 0,
        }
    }
}

async fn listen(addr: IpAddr, port: u16, what: &str) -> anyhow::Result<TcpListener> {
    let at = SocketAddr::new(addr, port);
    TcpListener::bind(at)
        .await
        .with_context(|| format!("cannot listen on {at} for {what}"))
}

/// Run the controller until `shutdown` completes, then let open requests finish (up to ten
/// seconds). The listeners are bound before anything else: a port in use fails at once.
pub async fn run(
    opts: Options,
    client: Client,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    Listeners::bind(&opts)
        .await?
        .serve(opts, client, shutdown)
        .await
}

/// The controller's sockets, bound: `capstan up` binds them before it reports the ingress
/// as running, so a port in use is one clear error at start.
pub struct Listeners {
    http: TcpListener,
    https: TcpListener,
    metrics: TcpListener,
}

impl Listeners {
    /// Bind the HTTP, HTTPS and metrics ports of `opts` (port 0: any free port).
    pub async fn bind(opts: &Options) -> anyhow::Result<Listeners> {
        Ok(Listeners {
            http: listen(opts.bind_address, opts.http_port, "HTTP").await?,
            https: listen(opts.bind_address, opts.https_port, "HTTPS").await?,
            metrics: listen(opts.bind_address, opts.metrics_port, "metrics").await?,
        })
    }

    /// The bound HTTP, HTTPS and metrics addresses.
    pub fn addrs(&self) -> std::io::Result<(SocketAddr, SocketAddr, SocketAddr)> {
        Ok((
            self.http.local_addr()?,
            self.https.local_addr()?,
            self.metrics.local_addr()?,
        ))
    }

    /// Serve Ingresses on these listeners until `shutdown` completes, then let open requests
    /// finish (up to ten seconds).
    pub async fn serve(
        self,
        opts: Options,
        client: Client,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<()> {
        serve_on(self, opts, client, shutdown).await
    }
}

async fn serve_on(
    listeners: Listeners,
    opts: Options,
    client: Client,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let Listeners {
        http,
        https,
        metrics: metrics_listener,
    } = listeners;
    tracing::info!(
        http = %http.local_addr()?, https = %https.local_addr()?,
        metrics = %metrics_listener.local_addr()?, class = %opts.ingress_class,
        "ingress controller listening"
    );

    let publish = publish_address(&opts, &client).await;
    match &publish {
        Some(p) => tracing::info!(address = ?p, "publishing this address in Ingress status"),
        None => tracing::warn!("no address to publish in Ingress status"),
    }
    let current = Arc::new(Current::default());
    let metrics = Arc::new(Metrics::new());
    let (stop_tx, stop_rx) = watch::channel(false);
    let first = Arc::new(Notify::new());
    let controller = Controller {
        client,
        class: opts.ingress_class.clone(),
        publish,
        current: current.clone(),
        metrics: metrics.clone(),
    };
    let mut control = tokio::spawn(controller.run(stop_rx.clone(), first.clone()));
    let metrics_task = tokio::spawn(serve_metrics(
        metrics_listener,
        metrics.clone(),
        stop_rx.clone(),
    ));

    let tls = TlsAcceptor::from(Arc::new(tls::server_config(current.clone())?));
    // Redirects to HTTPS name the port actually bound.
    let https_port = https.local_addr()?.port();
    let data_plane = DataPlane {
        http: http.into_std().context("HTTP listener")?,
        https: https.into_std().context("HTTPS listener")?,
        current,
        metrics,
        tls,
        https_port,
    };

    let mut shutdown = std::pin::pin!(shutdown);
    // Serve once the first configuration is in effect (connections wait in the backlog).
    tokio::select! {
        _ = first.notified() => {}
        r = &mut control => {
            let _ = stop_tx.send(true);
            return controller_ended(r);
        }
        _ = &mut shutdown => {
            let _ = stop_tx.send(true);
            let _ = control.await;
            let _ = metrics_task.await;
            return Ok(());
        }
    }
    let workers = data_plane.start(opts.workers, stop_rx)?;
    let result = tokio::select! {
        r = &mut control => controller_ended(r),
        _ = &mut shutdown => Ok(()),
    };
    tracing::info!("shutting down: finishing open requests");
    let _ = stop_tx.send(true);
    for w in workers {
        let _ = w.await;
    }
    let _ = metrics_task.await;
    if !control.is_finished() {
        let _ = control.await;
    }
    result
}

/// Resolves once `stop` says true (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn controller_ended(r: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.context("the ingress controller stopped")),
        Err(e) => Err(anyhow::anyhow!("the ingress controller stopped: {e}")),
    }
}

/// What the data plane's threads share.
struct DataPlane {
    http: std::net::TcpListener,
    https: std::net::TcpListener,
    current: Arc<Current>,
    metrics: Arc<Metrics>,
    tls: TlsAcceptor,
    https_port: u16,
}

impl DataPlane {
    /// Serve on `workers` threads (0: one per core), each with a single-threaded runtime of
    /// its own — its own epoll, its own connections to backends — accepting from the shared
    /// listeners, as nginx's worker processes do: a request never hops between threads. The
    /// receivers complete when the threads have finished (after `stop` and the grace period).
    fn start(
        self,
        workers: usize,
        stop: watch::Receiver<bool>,
    ) -> anyhow::Result<Vec<tokio::sync::oneshot::Receiver<()>>> {
        let n = match workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let mut done = Vec::with_capacity(n);
        for i in 0..n {
            let http = self.http.try_clone().context("sharing the HTTP listener")?;
            let https = self
                .https
                .try_clone()
                .context("sharing the HTTPS listener")?;
            let proxy = Proxy {
                current: self.current.clone(),
                pool: Arc::new(pool::Pool::new()),
                metrics: self.metrics.clone(),
                https_port: self.https_port,
            };
            let (tls, stop) = (self.tls.clone(), stop.clone());
            let (tx, rx) = tokio::sync::oneshot::channel();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting a data-plane runtime")?;
            std::thread::Builder::new()
                .name(format!("ingress-{i}"))
                .spawn(move || {
                    runtime.block_on(async move {
                        let (http, https) =
                            match (TcpListener::from_std(http), TcpListener::from_std(https)) {
                                (Ok(a), Ok(b)) => (a, b),
                                (Err(e), _) | (_, Err(e)) => {
                                    tracing::error!(error = %e, "cannot use the listeners");
                                    return;
                                }
                            };
                        let proxy = Arc::new(proxy);
                        tokio::join!(
                            serve(http, proxy.clone(), None, stop.clone()),
                            serve(https, proxy, Some(tls), stop),
                        );
                    });
                    let _ = tx.send(());
                })
                .context("starting a data-plane thread")?;
            done.push(rx);
        }
        Ok(done)
    }
}

fn builder() -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(60))
        .keep_alive(true);
    b.http2().timer(TokioTimer::new());
    b
}

/// Accept connections (TLS ones when `tls` is set) until `stop`, then give open ones
/// [`GRACE`] to finish.
async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    tls: Option<TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
) {
    let builder = Arc::new(builder());
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, remote) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => break,
        };
        let local = stream.local_addr().unwrap_or(remote);
        let _ = stream.set_nodelay(true);
        let watcher = graceful.watcher();
        let (proxy, builder, tls) = (proxy.clone(), builder.clone(), tls.clone());
        tokio::spawn(async move {
            let conn = Arc::new(Conn::new(remote, local, tls.is_some()));
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                proxy.clone().handle(req, conn.clone())
            });
            let result = match tls {
                None => {
                    let c = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(c.into_owned()).await
                }
                Some(acceptor) => {
                    let stream = match tokio::time::timeout(
                        HANDSHAKE_TIMEOUT,
                        acceptor.accept(stream),
                    )
                    .await
                    {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(client = %remote, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    let c = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(c.into_owned()).await
                }
            };
            if let Err(e) = result {
                tracing::debug!(client = %remote, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("open connections did not finish in time");
    }
}

/// `/metrics` (Prometheus text) and `/healthz` (200 once the first configuration is in
/// effect).
async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let stream: TcpStream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => return,
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let metrics = metrics.clone();
                async move {
                    let (status, ctype, body) = match req.uri().path() {
                        "/metrics" => (
                            StatusCode::OK,
                            "text/plain; version=0.0.4; charset=utf-8",
                            metrics.render(),
                        ),
                        "/healthz" | "/readyz" if metrics.is_ready() => {
                            (StatusCode::OK, "text/plain", "ok".to_string())
                        }
                        "/healthz" | "/readyz" => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "text/plain",
                            "the first configuration is not loaded yet".to_string(),
                        ),
                        _ => (StatusCode::NOT_FOUND, "text/plain", "not found".to_string()),
                    };
                    let mut r = Response::new(ProxyBody::Full(Some(body.into())));
                    *r.status_mut() = status;
                    r.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static(ctype),
                    );
                    Ok::<_, std::convert::Infallible>(r)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The address for Ingress status: the flag, else the node's InternalIP, else this machine's
/// first non-loopback address.
async fn publish_address(opts: &Options, client: &Client) -> Option<Published> {
    if let Some(a) = opts.publish_address.as_deref().filter(|a| !a.is_empty()) {
        return Some(Published::parse(a));
    }
    if let Some(node) = opts.node_name.as_deref().filter(|n| !n.is_empty()) {
        let api: Api<Node> = Api::all(client.clone());
        match api.get_opt(node).await {
            Ok(Some(n)) => {
                let ip = n
                    .status
                    .and_then(|s| s.addresses)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|a| a.type_ == "InternalIP")
                    .map(|a| a.address);
                match ip {
                    Some(ip) => return Some(Published::parse(&ip)),
                    None => tracing::warn!(node, "the node has no InternalIP"),
                }
            }
            Ok(None) => tracing::warn!(node, "node not found"),
            Err(e) => tracing::warn!(node, error = %e, "cannot read the node"),
        }
    }
    first_non_loopback().map(|ip| Published::Ip(ip.to_string()))
}

/// This machine's first non-loopback address: IPv4 first, then a global IPv6 one.
pub fn first_non_loopback() -> Option<IpAddr> {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    // SAFETY: getifaddrs fills a list we only read and then free with freeifaddrs; every
    // pointer is checked for null and addresses are read as the family says.
    unsafe {
        let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut list) != 0 {
            return None;
        }
        let mut cur = list;
        while !cur.is_null() {
            let ifa = &*cur;
            let up = ifa.ifa_flags & (libc::IFF_UP as u32) != 0;
            if up && !ifa.ifa_addr.is_null() {
                match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        v4.push(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        v6.push(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            cur = ifa.ifa_next;
        }
        libc::freeifaddrs(list);
    }
    v4.into_iter()
        .find(|a| !a.is_loopback() && !a.is_link_local() && !a.is_unspecified())
        .map(IpAddr::V4)
        .or_else(|| {
            v6.into_iter()
                .find(|a| {
                    !a.is_loopback() && !a.is_unspecified() && (a.segments()[0] & 0xffc0) != 0xfe80
                })
                .map(IpAddr::V6)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_port_in_use_fails_at_once_with_the_address() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = listen("127.0.0.1".parse().unwrap(), port, "HTTP")
            .await
            .expect_err("in use");
        let text = format!("{err:#}");
        assert!(
            text.contains(&format!("cannot listen on 127.0.0.1:{port} for HTTP")),
            "{text}"
        );
        assert!(text.to_lowercase().contains("in use"), "{text}");
    }

    /// A backend on loopback answering `name:<path>:<body length>`; it closes each connection
    /// after one response when `close` is set (without saying so), which leaves the pool a
    /// dead connection to notice. Returns the port and the count of accepted connections.
    fn backend(close: bool) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut out) = conn else { return };
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut r = BufReader::new(out.try_clone().unwrap());
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                        let mut len = 0usize;
                        loop {
                            let mut h = String::new();
                            if r.read_line(&mut h).unwrap_or(0) == 0 {
                                return;
                            }
                            if h.trim().is_empty() {
                                break;
                            }
                            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:")
                            {
                                len = v.trim().parse().unwrap_or(0);
                            }
                        }
                        let mut body = vec![0; len];
                        if r.read_exact(&mut body).is_err() {
                            return;
                        }
                        let text = format!("b:{path}:{len}");
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}",
                            text.len()
                        );
                        if out.write_all(resp.as_bytes()).is_err() || close {
                            return;
                        }
                    }
                });
            }
        });
        (port, accepted)
    }

    struct OneService(u16, Option<Arc<tls::Cert>>);

    impl routes::Sources for OneService {
        fn service(
            &self,
            ns: &str,
            name: &str,
        ) -> Option<Arc<k8s_openapi::api::core::v1::Service>> {
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": ns, "name": name},
                "spec": {"ports": [{"name": "http", "port": 80}]}
            }))
            .ok()
            .map(Arc::new)
        }
        fn slices(
            &self,
            ns: &str,
            svc: &str,
        ) -> Vec<Arc<k8s_openapi::api::discovery::v1::EndpointSlice>> {
            let s = serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": ns, "name": format!("{svc}-1")},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": self.0}],
                "endpoints": [{"addresses": ["127.0.0.1"]}]
            }))
            .unwrap();
            vec![Arc::new(s)]
        }
        fn cert(&self, _: &str, _: &str) -> routes::CertState {
            match &self.1 {
                Some(c) => routes::CertState::Ready(c.clone()),
                None => routes::CertState::Missing,
            }
        }
    }

    async fn proxy_to(port: u16) -> (SocketAddr, watch::Sender<bool>, Arc<Current>) {
        proxy_with(port, None).await
    }

    /// A proxy serving every host and path from the backend on `port`, over TLS with `cert`
    /// (for h2.example.com) when given: (address, stop, table).
    async fn proxy_with(
        port: u16,
        cert: Option<Arc<tls::Cert>>,
    ) -> (SocketAddr, watch::Sender<bool>, Arc<Current>) {
        let ing: k8s_openapi::api::networking::v1::Ingress =
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "default", "name": "i"},
                "spec": {
                    "defaultBackend": {"service": {"name": "web", "port": {"name": "http"}}},
                    "tls": [{"hosts": ["h2.example.com"], "secretName": "s"}]
                }
            }))
            .unwrap();
        let metrics = Arc::new(Metrics::new());
        let keep = routes::Keep::new(metrics.clone());
        let current = Arc::new(Current::default());
        let use_tls = cert.is_some();
        let sources = OneService(port, cert);
        current.store(routes::build(&[Arc::new(ing)], &sources, &keep).table);
        let acceptor = use_tls
            .then(|| TlsAcceptor::from(Arc::new(tls::server_config(current.clone()).unwrap())));
        let proxy = Arc::new(Proxy {
            current: current.clone(),
            pool: Arc::new(pool::Pool::new()),
            metrics,
            https_port: 443,
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = watch::channel(false);
        tokio::spawn(serve(listener, proxy, acceptor, rx));
        (addr, tx, current)
    }

    /// Keep-alive requests over one client connection: (status line, body) of each.
    fn requests(addr: SocketAddr, reqs: &[(&str, &str)]) -> Vec<(String, String)> {
        use std::io::{BufRead, BufReader, Read, Write};
        let s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        let mut out = Vec::new();
        for (path, body) in reqs {
            write!(
                w,
                "POST {path} HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut status = String::new();
            r.read_line(&mut status).unwrap();
            let mut len = 0usize;
            loop {
                let mut h = String::new();
                r.read_line(&mut h).unwrap();
                if h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
            }
            let mut b = vec![0; len];
            r.read_exact(&mut b).unwrap();
            out.push((
                status.trim().to_string(),
                String::from_utf8_lossy(&b).into_owned(),
            ));
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn backend_connections_are_reused_and_bodies_pass() {
        let (port, accepted) = backend(false);
        let (addr, _stop, _) = proxy_to(port).await;
        let reqs: Vec<(String, String)> = (0..20)
            .map(|i| (format!("/r{i}"), "x".repeat(i * 100)))
            .collect();
        let got = tokio::task::spawn_blocking(move || {
            let refs: Vec<(&str, &str)> =
                reqs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            requests(addr, &refs)
        })
        .await
        .unwrap();
        for (i, (status, body)) in got.iter().enumerate() {
            assert_eq!(status, "HTTP/1.1 200 OK");
            assert_eq!(body, &format!("b:/r{i}:{}", i * 100));
        }
        // Sequential requests need one backend connection.
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_the_backend_closed_are_not_used() {
        let (port, accepted) = backend(true);
        let (addr, _stop, _) = proxy_to(port).await;
        for i in 0..10 {
            let path = format!("/c{i}");
            let got = tokio::task::spawn_blocking(move || requests(addr, &[(&path, "abc")]))
                .await
                .unwrap();
            assert_eq!(got[0].0, "HTTP/1.1 200 OK", "request {i}");
            assert_eq!(got[0].1, format!("b:/c{i}:3"));
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 10);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn http2_over_tls_by_alpn_and_sni() {
        use hyper::body::Body as _;
        use rustls::pki_types::pem::PemObject;
        let (port, _) = backend(false);
        let (crt, key) = tls::tests::self_signed(&["h2.example.com"]);
        let cert = Arc::new(tls::load_pem(crt.as_bytes(), key.as_bytes()).unwrap());
        let (addr, _stop, _) = proxy_with(port, Some(cert)).await;

        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(crt.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let connect = |name: &'static str| {
            let connector = connector.clone();
            async move {
                let tcp = TcpStream::connect(addr).await.unwrap();
                let sni = rustls::pki_types::ServerName::try_from(name).unwrap();
                connector.connect(sni, tcp).await
            }
        };
        let stream = connect("h2.example.com").await.expect("handshake");
        assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        for i in 0..3 {
            let req = Request::builder()
                .uri(format!("https://h2.example.com/h2/{i}"))
                .body(ProxyBody::Full(Some(bytes::Bytes::from_static(b"hello"))))
                .unwrap();
            let resp = send.send_request(req).await.unwrap();
            assert_eq!(resp.status(), 200);
            assert_eq!(resp.version(), http::Version::HTTP_2);
            let mut body = resp.into_body();
            let mut got: Vec<u8> = Vec::new();
            while let Some(frame) =
                std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
            {
                if let Ok(d) = frame.unwrap().into_data() {
                    got.extend_from_slice(&d);
                }
            }
            assert_eq!(String::from_utf8_lossy(&got), format!("b:/h2/{i}:5"));
        }
        // A name without a certificate: the handshake fails.
        assert!(connect("other.example.com").await.is_err());
    }

    #[test]
    fn finds_a_non_loopback_address_or_none() {
        if let Some(ip) = first_non_loopback() {
            assert!(!ip.is_loopback());
        }
    }
}
