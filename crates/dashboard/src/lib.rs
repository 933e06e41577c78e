//! `capstan dashboard`: a web UI for the cluster, in the spirit of kubernetes/dashboard and
//! Headlamp, served from the binary.
//!
//! The server does two things:
//! - it serves the UI, plain JavaScript modules and CSS embedded in the binary
//!   ([`assets`]), and
//! - it forwards `/api/*`, `/apis/*` and `/version` to the API server ([`proxy`]), passing on
//!   the bearer token the browser sends and nothing of its own: every request runs as the user
//!   who logged in, so RBAC decides what they see and do. The dashboard holds no credentials;
//!   it needs only the API server's URL and the CA to check it with.
//!
//! It listens on HTTPS with a self-signed certificate (or one given) by default, and on plain
//! HTTP when asked (`--insecure-http`, meant for loopback).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

mod assets;
mod proxy;
mod tls;

pub use proxy::is_api_path;

/// The response body type: static bytes or the API server's stream.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub(crate) type Body = BoxBody<Bytes, BoxError>;

/// How the dashboard serves.
#[derive(Clone, Debug)]
pub struct Options {
    /// The address to listen on (port 0: any free port; see [`Dashboard::local_addr`]).
    pub bind: SocketAddr,
    pub tls: Tls,
}

/// The dashboard's own TLS.
#[derive(Clone, Debug)]
pub enum Tls {
    /// A certificate made at start for localhost, the loopback addresses, the bind address and
    /// the host name.
    SelfSigned,
    /// A certificate chain and its private key, PEM files.
    Files { cert: PathBuf, key: PathBuf },
    /// Plain HTTP.
    Off,
}

/// The API server the dashboard forwards to.
#[derive(Clone, Debug)]
pub struct ApiTarget {
    /// `https://host:port` (a path prefix is kept).
    pub url: String,
    /// The CA certificate(s) to check the API server's certificate with, PEM. Required for
    /// an https URL.
    pub ca_pem: Option<String>,
}

/// A bound dashboard, not serving yet.
pub struct Dashboard {
    listener: TcpListener,
    local: SocketAddr,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    cert_pem: Option<String>,
    proxy: Arc<proxy::Proxy>,
}

impl Dashboard {
    /// Bind the listening socket and prepare TLS and the API client; errors (address in use,
    /// unreadable certificate, bad CA) come out here, before anything serves.
    pub async fn bind(opts: Options, api: ApiTarget) -> anyhow::Result<Dashboard> {
        let proxy = Arc::new(proxy::Proxy::new(&api)?);
        let (acceptor, cert_pem) = match &opts.tls {
            Tls::Off => (None, None),
            tls => {
                let (config, pem) = tls::server_config(tls, opts.bind.ip())?;
                (Some(tokio_rustls::TlsAcceptor::from(config)), pem)
            }
        };
        let listener = TcpListener::bind(opts.bind)
            .await
            .with_context(|| format!("cannot listen on {}", opts.bind))?;
        let local = listener.local_addr().context("reading the bound address")?;
        Ok(Dashboard {
            listener,
            local,
            acceptor,
            cert_pem,
            proxy,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The URL to open in a browser.
    pub fn url(&self) -> String {
        let scheme = if self.acceptor.is_some() {
            "https"
        } else {
            "http"
        };
        let host = match self.local.ip() {
            ip if ip.is_unspecified() => "localhost".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        format!("{scheme}://{host}:{}/", self.local.port())
    }

    /// The self-signed certificate made at start (PEM), if the dashboard made one.
    pub fn self_signed_cert_pem(&self) -> Option<&str> {
        self.cert_pem.as_deref()
    }

    /// Serve until `shutdown` completes; open connections (watches, log streams) are then
    /// closed.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Dashboard {
            listener,
            acceptor,
            proxy,
            ..
        } = self;
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                _ = &mut shutdown => break,
                // Reap finished connections so the set does not grow.
                Some(_) = conns.join_next(), if !conns.is_empty() => continue,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: wait a little, go on.
                        tracing::warn!("dashboard: accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let _ = stream.set_nodelay(true);
            let proxy = proxy.clone();
            let acceptor = acceptor.clone();
            conns.spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let proxy = proxy.clone();
                    async move { Ok::<_, Infallible>(handle(&proxy, req).await) }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let result = match acceptor {
                    Some(acceptor) => {
                        let tls = match tokio::time::timeout(
                            std::time::Duration::from_secs(10),
                            acceptor.accept(stream),
                        )
                        .await
                        {
                            Ok(Ok(tls)) => tls,
                            Ok(Err(e)) => {
                                tracing::debug!("dashboard: TLS handshake with {peer}: {e}");
                                return;
                            }
                            Err(_) => return,
                        };
                        builder.serve_connection(TokioIo::new(tls), service).await
                    }
                    None => {
                        builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await
                    }
                };
                if let Err(e) = result {
                    tracing::debug!("dashboard: connection from {peer}: {e}");
                }
            });
        }
        conns.shutdown().await;
        Ok(())
    }
}

/// Bind, then serve until `shutdown` completes (what `capstan up` runs).
pub async fn run(
    opts: Options,
    api: ApiTarget,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let dashboard = Dashboard::bind(opts, api).await?;
    tracing::info!("dashboard serving on {}", dashboard.url());
    dashboard.serve(shutdown).await
}

/// One request: the API goes to the API server, everything else is the UI's files.
async fn handle(proxy: &proxy::Proxy, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    if is_api_path(path) {
        return proxy.forward(req).await;
    }
    match assets::find(path) {
        Some(asset) if req.method() == Method::GET || req.method() == Method::HEAD => {
            let mut resp = Response::new(full(asset.body));
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            assets::security_headers(h);
            resp
        }
        Some(_) => text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n"),
        None => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    assets::security_headers(resp.headers_mut());
    resp
}

#[cfg(test)]
mod tests;
