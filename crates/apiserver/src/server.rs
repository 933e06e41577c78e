//! HTTPS serving: TLS (with optional client certificates), HTTP/1.1 and HTTP/2, and reading
//! bodies within the size limit before the API server handles a request.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::auth::ConnInfo;
use crate::codec::MAX_BODY_BYTES;
use crate::error::ApiError;
use crate::handlers::{error_response, Body};
use crate::ApiServer;

/// Accept TLS connections on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    api: Arc<ApiServer>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = &mut shutdown => return,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let api = api.clone();
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            // Certificates are verified here, once per connection, when the TLS layer only
            // requested them (see `capstan_pki::ClientAuth::Request`).
            let (client_cert, client_cert_error) = match stream.get_ref().1.peer_certificates() {
                None | Some([]) => (None, None),
                Some(chain) => match &api.auth.client_certs {
                    Some(check) => match check.identity(chain) {
                        Ok(id) => (Some(id), None),
                        Err(e) => (None, Some(e)),
                    },
                    None => (capstan_pki::identity_from_cert(chain[0].as_ref()), None),
                },
            };
            let conn = Arc::new(ConnInfo {
                peer: Some(peer),
                client_cert,
                client_cert_error,
                in_process_user: None,
            });
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let api = api.clone();
                let conn = conn.clone();
                async move { Ok::<_, Infallible>(handle_incoming(&api, req, &conn).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
        });
    }
}

/// Read the body (at most 3 MiB) and hand the request to the API server.
pub async fn handle_incoming(
    api: &Arc<ApiServer>,
    req: Request<Incoming>,
    conn: &ConnInfo,
) -> Response<Body> {
    let started = std::time::Instant::now();
    let (parts, body) = req.into_parts();
    let method = parts.method.clone();
    let path = parts.uri.path().to_string();
    let body = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let err = if e
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                ApiError::too_large()
            } else {
                ApiError::bad_request(format!("error reading the request body: {e}"))
            };
            return error_response(&err);
        }
    };
    let resp = api.handle(Request::from_parts(parts, body), conn).await;
    tracing::debug!(%method, path, status = resp.status().as_u16(), elapsed_us = started.elapsed().as_micros() as u64, "request");
    resp
}

/// The in-process transport: a request from a component running in this process, through
/// the same pipeline (authentication sees the component's identity).
pub async fn handle_in_process(
    api: &Arc<ApiServer>,
    req: Request<Bytes>,
    conn: &ConnInfo,
) -> Response<Body> {
    api.handle(req, conn).await
}
