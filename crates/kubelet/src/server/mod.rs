//! The kubelet's HTTPS server (port 10250): container logs, exec, attach and port-forward
//! (relayed to the runtime's streaming server), stats, resource metrics and the node's pods.
//!
//! Every request is authenticated — a client certificate from the cluster CA, or a bearer
//! token the API server vouches for (TokenReview) — and authorized by the API server
//! (SubjectAccessReview) as access to the `nodes` resource: `nodes/stats`, `nodes/metrics`,
//! `nodes/log` for those paths and `nodes/proxy` for everything else, the verb from the
//! HTTP method.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;

use crate::Kubelet;

pub mod auth;
pub mod logs;
pub mod stats;
pub mod stream;

pub type Body = BoxBody<Bytes, Infallible>;

/// What the request handlers share.
pub struct Server {
    pub k: Arc<Kubelet>,
    pub auth: auth::Auth,
    pub stats: stats::Stats,
}

/// Serve until the process ends. Client certificates are checked against
/// `opts.client_ca` (the kubelet's --client-ca-file, or the CA of its kubeconfig).
pub async fn serve(k: Arc<Kubelet>) -> anyhow::Result<()> {
    let ca = k.opts.client_ca.clone();
    serve_with_client_ca(k, ca).await
}

/// Serve until the process ends, accepting client certificates issued by `client_ca`
/// (PEM; None: only bearer tokens authenticate).
pub async fn serve_with_client_ca(
    k: Arc<Kubelet>,
    client_ca: Option<Vec<u8>>,
) -> anyhow::Result<()> {
    let tls = tls_config(&k, client_ca.as_deref())?;
    let addr = SocketAddr::new(k.opts.address, k.opts.port);
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("the kubelet cannot listen on {addr}"))?;
    tracing::info!(%addr, "kubelet server listening");
    let server = Arc::new(Server {
        auth: auth::Auth::new(k.client.clone(), k.opts.node_name.clone()),
        stats: stats::Stats::default(),
        k,
    });
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "kubelet server: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let server = server.clone();
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "kubelet server: TLS handshake failed");
                    return;
                }
            };
            let cert_user = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| auth::identity_from_cert(leaf.as_ref()));
            let cert_user = Arc::new(cert_user);
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let server = server.clone();
                let cert_user = cert_user.clone();
                async move { Ok::<_, Infallible>(server.handle(req, &cert_user).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "kubelet server: connection ended");
            }
        });
    }
}

/// Certificates (DER) as one PEM bundle.
pub fn pem_bundle(ders: &[Vec<u8>]) -> Vec<u8> {
    let mut pem = String::new();
    for der in ders {
        pem.push_str(&pem_encode("CERTIFICATE", der));
    }
    pem.into_bytes()
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The serving certificate: the configured files, or a self-signed pair kept in ROOT/pki
/// (kubelet.crt, kubelet.key) for the node's name and addresses.
fn serving_pair(k: &Kubelet) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    if let (Some(cert), Some(key)) = (&k.opts.tls_cert_file, &k.opts.tls_private_key_file) {
        let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
        return Ok((read(cert)?, read(key)?));
    }
    let dir = k.opts.root_dir.join("pki");
    let (cert_path, key_path) = (dir.join("kubelet.crt"), dir.join("kubelet.key"));
    if let (Ok(c), Ok(key)) = (std::fs::read(&cert_path), std::fs::read(&key_path)) {
        return Ok((c, key));
    }
    let mut names = vec![k.opts.node_name.clone(), "localhost".to_string()];
    names.push("127.0.0.1".into());
    if let Some(ip) = k.opts.node_ip {
        names.push(ip.to_string());
    }
    let mut params = rcgen::CertificateParams::new(names).context("the serving certificate")?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("{}@{stamp}", k.opts.node_name),
    );
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2099, 1, 1);
    let key = rcgen::KeyPair::generate().context("generating the serving key")?;
    let cert = params
        .self_signed(&key)
        .context("self-signing the serving certificate")?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(&cert_path, cert.pem())
        .with_context(|| format!("writing {}", cert_path.display()))?;
    write_private(&key_path, key.serialize_pem().as_bytes())?;
    Ok((cert.pem().into_bytes(), key.serialize_pem().into_bytes()))
}

fn write_private(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(data)
        .with_context(|| format!("writing {}", path.display()))
}

/// TLS with the serving pair; client certificates are asked for and, when sent, must chain
/// to `client_ca` (clients without one go on to token authentication).
fn tls_config(k: &Kubelet, client_ca: Option<&[u8]>) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let (cert_pem, key_pem) = serving_pair(k)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .context("the serving certificate")?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).context("the serving key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS versions")?;
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(client_ca.unwrap_or_default()).flatten() {
        let _ = roots.add(der);
    }
    let builder = if roots.is_empty() {
        builder.with_no_client_auth()
    } else {
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .context("the client certificate verifier")?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .context("the serving certificate")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed()
}

/// A plain-text answer, as Go's http.Error writes it.
pub fn text(code: u16, msg: &str) -> Response<Body> {
    let mut r = Response::new(full(format!("{msg}\n")));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// An error answer as go-restful's WriteError writes it: the text alone.
pub fn restful_error(code: u16, msg: &str) -> Response<Body> {
    let mut r = Response::new(full(msg.to_string()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r
}

pub fn json(code: u16, v: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(full(serde_json::to_vec(v).unwrap_or_default()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A streamed body fed by a channel; it ends when the sender is dropped.
pub fn channel_body(rx: mpsc::Receiver<Bytes>) -> Body {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    StreamBody::new(stream).boxed()
}

/// The decoded query pairs, in order (repeated keys kept).
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

/// Decode `%XX` escapes and `+` (a space in a query).
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%' && i + 2 < b.len())
            .then(|| std::str::from_utf8(&b[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        if let Some(v) = hex {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Server {
    /// Authenticate, authorize, then route.
    pub async fn handle(
        self: &Arc<Self>,
        req: Request<Incoming>,
        cert_user: &Option<auth::User>,
    ) -> Response<Body> {
        let user = match cert_user {
            Some(u) => u.clone(),
            None => match auth::bearer_token(req.headers()) {
                Some(token) => match self.auth.authenticate_token(&token).await {
                    Ok(Some(u)) => u,
                    Ok(None) => return text(401, "Unauthorized"),
                    Err(e) => {
                        tracing::warn!(error = %e, "kubelet server: token review failed");
                        return text(401, "Unauthorized");
                    }
                },
                None => return text(401, "Unauthorized"),
            },
        };
        let path = req.uri().path().to_string();
        let (verb, subresource) = auth::attributes(req.method(), &path);
        match self.auth.authorize(&user, verb, subresource, &path).await {
            Ok(true) => {}
            Ok(false) => {
                return text(
                    403,
                    &format!(
                    "Forbidden (user={}, verb={verb}, resource=nodes, subresource={subresource})",
                    user.name
                ),
                )
            }
            Err(e) => {
                tracing::warn!(error = %e, "kubelet server: authorization failed");
                return text(
                    500,
                    &format!(
                        "Authorization error (user={}, verb={verb}, resource=nodes, subresource={subresource})",
                        user.name
                    ),
                );
            }
        }
        self.route(req).await
    }

    /// Serve an authorized request.
    pub async fn route(self: &Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let path = req.uri().path().to_string();
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let get = matches!(*req.method(), Method::GET | Method::HEAD);
        let stream_method = matches!(*req.method(), Method::GET | Method::POST);
        match parts.as_slice() {
            ["healthz"] | ["healthz", ""] if get => text_ok("ok"),
            ["healthz", "ping" | "log" | "syncloop"] if get => text_ok("ok"),
            ["pods"] | ["pods", ""] if get => self.pods(),
            ["containerLogs", ns, pod, container] if get => {
                self.container_logs(ns, pod, container, req.uri().query())
                    .await
            }
            ["exec", ..] | ["attach", ..] | ["portforward", ..] if stream_method => {
                stream::serve(self, req).await
            }
            ["stats", "summary"] | ["stats", "summary", ""] if get => {
                stats::summary(self, req.uri().query()).await
            }
            ["metrics", "resource"] if get => stats::resource_metrics(self).await,
            _ => text(404, "404 page not found"),
        }
    }

    /// `/pods`: the pods bound to this node.
    fn pods(&self) -> Response<Body> {
        let mut pods = self.k.pods.list();
        pods.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        let items: Vec<serde_json::Value> = pods
            .iter()
            .filter_map(|p| serde_json::to_value(p.as_ref()).ok())
            .map(|mut v| {
                if let Some(o) = v.as_object_mut() {
                    o.remove("apiVersion");
                    o.remove("kind");
                }
                v
            })
            .collect();
        json(
            200,
            &serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}),
        )
    }

    /// `/containerLogs/{namespace}/{pod}/{container}`.
    async fn container_logs(
        self: &Arc<Self>,
        ns: &str,
        pod_name: &str,
        container: &str,
        query: Option<&str>,
    ) -> Response<Body> {
        let (ns, pod_name, container) = (
            percent_decode(ns),
            percent_decode(pod_name),
            percent_decode(container),
        );
        if pod_name.is_empty() {
            return restful_error(400, r#"{"message": "Missing podID."}"#);
        }
        if container.is_empty() {
            return restful_error(400, r#"{"message": "Missing container name."}"#);
        }
        if ns.is_empty() {
            return restful_error(400, r#"{"message": "Missing podNamespace."}"#);
        }
        let opts =
            match logs::LogOptions::from_query(&query_pairs(query), std::time::SystemTime::now()) {
                Ok(o) => o,
                Err(e) => return restful_error(e.code, &e.message),
            };
        let Some(pod) = self.k.pods.get(&ns, &pod_name) else {
            return restful_error(404, &format!("pod {pod_name:?} does not exist"));
        };
        if !pod_has_container(&pod, &container) {
            return restful_error(
                404,
                &format!("container {container:?} not found in pod {pod_name:?}"),
            );
        }
        let id = match container_for_logs(&pod, &container, opts.previous) {
            Ok(id) => id,
            Err(msg) => return restful_error(400, &msg),
        };
        let status = self
            .k
            .runtime
            .container_status(capstan_cri::v1::ContainerStatusRequest {
                container_id: id.clone(),
                verbose: false,
            })
            .await;
        let path = match status.ok().and_then(|s| s.status) {
            Some(s) if !s.log_path.is_empty() => std::path::PathBuf::from(s.log_path),
            _ => {
                return restful_error(
                    400,
                    &format!("unable to retrieve container logs for containerd://{id}"),
                )
            }
        };
        if let Err(e) = std::fs::metadata(&path) {
            return restful_error(
                400,
                &format!(
                    "failed to open log file {:?}: {e}",
                    path.display().to_string()
                ),
            );
        }
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(logs::read_logs(path, id, opts, self.k.runtime.clone(), tx));
        let mut r = Response::new(channel_body(rx));
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain"),
        );
        r
    }
}

fn text_ok(s: &str) -> Response<Body> {
    let mut r = Response::new(full(s.to_string()));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Whether the pod's spec has a container (of any kind) of that name.
pub fn pod_has_container(pod: &k8s_openapi::api::core::v1::Pod, name: &str) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    spec.containers.iter().any(|c| c.name == name)
        || spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
}

/// The runtime's ID without its `<runtime>://` prefix.
pub fn strip_runtime(id: &str) -> &str {
    id.split_once("://").map(|(_, i)| i).unwrap_or(id)
}

/// Which container instance's logs to read, from the pod's status, with the kubelet's
/// messages when there is none.
pub fn container_for_logs(
    pod: &k8s_openapi::api::core::v1::Pod,
    container: &str,
    previous: bool,
) -> Result<String, String> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = pod.status.as_ref();
    let found = [
        status.and_then(|s| s.container_statuses.as_ref()),
        status.and_then(|s| s.init_container_statuses.as_ref()),
        status.and_then(|s| s.ephemeral_container_statuses.as_ref()),
    ]
    .into_iter()
    .flatten()
    .flatten()
    .find(|c| c.name == container);
    let Some(cs) = found else {
        return Err(format!(
            "container {container:?} in pod {name:?} is not available"
        ));
    };
    let last = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let state = cs.state.as_ref();
    let (waiting, running, terminated) = (
        state.and_then(|s| s.waiting.as_ref()),
        state.and_then(|s| s.running.as_ref()),
        state.and_then(|s| s.terminated.as_ref()),
    );
    let last_id = last
        .and_then(|t| t.container_id.as_deref())
        .filter(|i| !i.is_empty());
    let id = if previous {
        last_id.ok_or_else(|| {
            format!("previous terminated container {container:?} in pod {name:?} not found")
        })?
    } else if running.is_some() {
        cs.container_id.as_deref().unwrap_or_default()
    } else if let Some(t) = terminated {
        match t.container_id.as_deref().filter(|i| !i.is_empty()) {
            Some(i) => i,
            None => last_id
                .ok_or_else(|| format!("container {container:?} in pod {name:?} is terminated"))?,
        }
    } else if last.is_some() {
        last_id.ok_or_else(|| format!("container {container:?} in pod {name:?} is terminated"))?
    } else if let Some(w) = waiting {
        let reason = w.reason.as_deref().unwrap_or_default();
        return Err(match reason {
            "ErrImagePull" => {
                format!("container {container:?} in pod {name:?} is waiting to start: image can't be pulled")
            }
            "ImagePullBackOff" => format!(
                "container {container:?} in pod {name:?} is waiting to start: trying and failing to pull image"
            ),
            _ => format!("container {container:?} in pod {name:?} is waiting to start: {reason}"),
        });
    } else {
        return Err(format!(
            "container {container:?} in pod {name:?} is waiting to start - no logs yet"
        ));
    };
    let id = strip_runtime(id);
    if id.is_empty() {
        return Err(format!(
            "container {container:?} in pod {name:?} is waiting to start - no logs yet"
        ));
    }
    Ok(id.to_string())
}

#[cfg(test)]
pub(crate) mod tests_support {
    use std::collections::HashMap;

    use capstan_cri::v1;
    use capstan_cri::{Result, Status};
    use parking_lot::Mutex;

    /// A runtime that knows some sandboxes, containers and stats, and hands out one
    /// streaming URL.
    #[derive(Default)]
    pub struct FakeRuntime {
        pub statuses: Mutex<HashMap<String, v1::ContainerStatus>>,
        pub sandboxes: Vec<v1::PodSandbox>,
        pub containers: Vec<v1::Container>,
        pub stream_url: String,
        pub pod_stats: Vec<v1::PodSandboxStats>,
        pub container_stats: Vec<v1::ContainerStats>,
        /// The last exec, attach or port-forward request.
        pub last_stream: Mutex<Option<String>>,
    }

    // Written as #[async_trait] expands methods, which it cannot do inside a macro.
    macro_rules! unimplemented_methods {
        ($($method:ident($req:ident) -> $resp:ident;)*) => {
            $(
                fn $method<'life0, 'async_trait>(
                    &'life0 self,
                    _: v1::$req,
                ) -> std::pin::Pin<
                    Box<dyn std::future::Future<Output = Result<v1::$resp>> + Send + 'async_trait>,
                >
                where
                    'life0: 'async_trait,
                    Self: 'async_trait,
                {
                    Box::pin(async move { Err(Status::unimplemented(stringify!($method))) })
                }
            )*
        };
    }

    #[async_trait::async_trait]
    impl capstan_cri::Runtime for FakeRuntime {
        async fn container_status(
            &self,
            req: v1::ContainerStatusRequest,
        ) -> Result<v1::ContainerStatusResponse> {
            match self.statuses.lock().get(&req.container_id) {
                Some(s) => Ok(v1::ContainerStatusResponse {
                    status: Some(s.clone()),
                    ..Default::default()
                }),
                None => Err(Status::not_found(format!(
                    "an error occurred when try to find container {:?}: not found",
                    req.container_id
                ))),
            }
        }
        async fn list_pod_sandbox(
            &self,
            _: v1::ListPodSandboxRequest,
        ) -> Result<v1::ListPodSandboxResponse> {
            Ok(v1::ListPodSandboxResponse {
                items: self.sandboxes.clone(),
            })
        }
        async fn list_containers(
            &self,
            req: v1::ListContainersRequest,
        ) -> Result<v1::ListContainersResponse> {
            let f = req.filter.unwrap_or_default();
            let containers = self
                .containers
                .iter()
                .filter(|c| f.pod_sandbox_id.is_empty() || c.pod_sandbox_id == f.pod_sandbox_id)
                .filter(|c| f.state.as_ref().is_none_or(|s| s.state == c.state))
                .cloned()
                .collect();
            Ok(v1::ListContainersResponse { containers })
        }
        async fn exec(&self, req: v1::ExecRequest) -> Result<v1::ExecResponse> {
            *self.last_stream.lock() = Some(format!("exec {} {:?}", req.container_id, req.cmd));
            Ok(v1::ExecResponse {
                url: self.stream_url.clone(),
            })
        }
        async fn attach(&self, req: v1::AttachRequest) -> Result<v1::AttachResponse> {
            *self.last_stream.lock() = Some(format!("attach {}", req.container_id));
            Ok(v1::AttachResponse {
                url: self.stream_url.clone(),
            })
        }
        async fn port_forward(
            &self,
            req: v1::PortForwardRequest,
        ) -> Result<v1::PortForwardResponse> {
            *self.last_stream.lock() =
                Some(format!("portforward {} {:?}", req.pod_sandbox_id, req.port));
            Ok(v1::PortForwardResponse {
                url: self.stream_url.clone(),
            })
        }
        async fn list_pod_sandbox_stats(
            &self,
            _: v1::ListPodSandboxStatsRequest,
        ) -> Result<v1::ListPodSandboxStatsResponse> {
            Ok(v1::ListPodSandboxStatsResponse {
                stats: self.pod_stats.clone(),
            })
        }
        async fn list_container_stats(
            &self,
            _: v1::ListContainerStatsRequest,
        ) -> Result<v1::ListContainerStatsResponse> {
            Ok(v1::ListContainerStatsResponse {
                stats: self.container_stats.clone(),
            })
        }
        unimplemented_methods! {
            version(VersionRequest) -> VersionResponse;
            run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse;
            stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse;
            remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse;
            pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse;
            create_container(CreateContainerRequest) -> CreateContainerResponse;
            start_container(StartContainerRequest) -> StartContainerResponse;
            stop_container(StopContainerRequest) -> StopContainerResponse;
            remove_container(RemoveContainerRequest) -> RemoveContainerResponse;
            update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse;
            reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse;
            exec_sync(ExecSyncRequest) -> ExecSyncResponse;
            container_stats(ContainerStatsRequest) -> ContainerStatsResponse;
            pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse;
            update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse;
            status(StatusRequest) -> StatusResponse;
            list_images(ListImagesRequest) -> ListImagesResponse;
            image_status(ImageStatusRequest) -> ImageStatusResponse;
            pull_image(PullImageRequest) -> PullImageResponse;
            remove_image(RemoveImageRequest) -> RemoveImageResponse;
            image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn log_container_follows_the_kubelets_rules() {
        let running = pod(
            serde_json::json!({"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 1,
            "containerID": "containerd://new", "state": {"running": {}},
            "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://old"}}}]}),
        );
        assert_eq!(container_for_logs(&running, "c", false).unwrap(), "new");
        assert_eq!(container_for_logs(&running, "c", true).unwrap(), "old");
        let fresh = pod(
            serde_json::json!({"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        assert_eq!(
            container_for_logs(&fresh, "c", false).unwrap_err(),
            r#"container "c" in pod "p" is waiting to start: ContainerCreating"#
        );
        assert_eq!(
            container_for_logs(&fresh, "c", true).unwrap_err(),
            r#"previous terminated container "c" in pod "p" not found"#
        );
        let pulling = pod(
            serde_json::json!({"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}),
        );
        assert!(container_for_logs(&pulling, "c", false)
            .unwrap_err()
            .ends_with("trying and failing to pull image"));
        let none = pod(serde_json::json!({}));
        assert_eq!(
            container_for_logs(&none, "c", false).unwrap_err(),
            r#"container "c" in pod "p" is not available"#
        );
        // A restarting container shows its last run.
        let backoff = pod(
            serde_json::json!({"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 2,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://dead"}}}]}),
        );
        assert_eq!(container_for_logs(&backoff, "c", false).unwrap(), "dead");
    }

    #[test]
    fn queries_decode() {
        assert_eq!(
            query_pairs(Some("command=sh&command=-c&command=echo+a%20b%3B&stdin=1")),
            vec![
                ("command".to_string(), "sh".to_string()),
                ("command".into(), "-c".into()),
                ("command".into(), "echo a b;".into()),
                ("stdin".into(), "1".into()),
            ]
        );
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%4"), "%4");
    }
}
