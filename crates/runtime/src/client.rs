//! API clients that speak HTTP/2 when the server offers it.
//!
//! kube's default client speaks HTTP/1.1 only, so every request in flight holds a TLS
//! connection of its own, and the pool keeps them all open afterwards: a component that writes
//! for many objects at once (a kubelet starting 100 pods) ends up with a hundred idle
//! connections and their buffers. client-go negotiates HTTP/2 and multiplexes everything over
//! one connection; this client does the same (ALPN h2, falling back to HTTP/1.1).

use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;

/// A client for `config` that multiplexes its requests over one HTTP/2 connection.
pub fn client(config: kube::Config) -> anyhow::Result<kube::Client> {
    let tls = config.rustls_client_config()?;
    // TCP_NODELAY, as client-go sets it: without it a request's body frame waits for the
    // previous segment's (delayed) ACK, ~40 ms per write.
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    let hyper = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .map_err(tower::BoxError::from)
        .service(hyper);
    Ok(kube::Client::new(service, config.default_namespace))
}
