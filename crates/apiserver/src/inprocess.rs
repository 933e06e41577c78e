//! The in-process transport: `kube::Client`s for components that run in the API server's own
//! process (the scheduler, the controllers, the kubelet, the proxy and DNS of `capstan up`).
//!
//! Over HTTPS every call of such a component pays for TCP, TLS and HTTP framing on loopback.
//! Here the client's `http::Request` goes straight to [`ApiServer::handle`], the function the
//! HTTPS server calls once it has read a request, and the handler's response comes back as it
//! is: a streamed body (a watch is an endless one). Nothing else is skipped: authentication,
//! impersonation, authorization (RBAC, the Node authorizer), admission, validation, metrics
//! and audit all see the request as they would see it from the network.
//!
//! Who the request comes from is fixed when the client is made, in one of two ways:
//!
//! * an identity ([`InProcess::client`], [`InProcess::client_as`]): the connection carries the
//!   user as a client certificate would, in [`ConnInfo::in_process_user`], which
//!   [`crate::auth::InProcessAuthenticator`] recognizes. Only this module sets that field —
//!   the HTTPS server always leaves it empty, and no header can set it — so the identity cannot
//!   be claimed from the network;
//! * a bearer token ([`InProcess::client_with_token`]): the connection carries no identity and
//!   the token is sent in `Authorization`, so the token authenticators decide as for any
//!   remote client (a controller's service account token, for instance).
//!
//! The server is held weakly: once its owner drops it, in-process requests fail as requests
//! to a stopped server do (an error from the transport, not an HTTP status).
//!
//! Protocol upgrades (exec, attach, port-forward over SPDY or WebSocket) need a connection to
//! take over and are refused here; they work over HTTPS.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response};
use http_body_util::{BodyExt, Limited};

use crate::auth::{ConnInfo, User};
use crate::codec::MAX_BODY_BYTES;
use crate::error::ApiError;
use crate::handlers::{error_response, full, Body};
use crate::ApiServer;

/// What the transport fails with (the server has stopped).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The address in-process requests are recorded as coming from (audit's `sourceIPs`): this
/// host, as a loopback connection would be.
const SOURCE: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

impl ApiServer {
    /// Clients for components running in this process; see [`InProcess`].
    pub fn in_process(self: &Arc<Self>) -> InProcess {
        InProcess::new(self)
    }
}

/// Makes in-process clients of one API server.
#[derive(Clone)]
pub struct InProcess {
    api: Weak<ApiServer>,
    /// Sent as `User-Agent` by requests that carry none ([`InProcess::with_user_agent`]).
    user_agent: Option<HeaderValue>,
    /// See [`InProcess::trimming_managed_fields`].
    trim_managed_fields: bool,
}

/// Marks an in-process request whose watch events leave out `metadata.managedFields`. Only
/// this module puts it on a request: a request from the network carries no extensions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TrimManagedFields;

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess")
            .field("server_running", &(self.api.strong_count() > 0))
            .finish()
    }
}

impl InProcess {
    pub fn new(api: &Arc<ApiServer>) -> Self {
        InProcess {
            api: Arc::downgrade(api),
            user_agent: None,
            trim_managed_fields: false,
        }
    }

    /// Clients made from this one say they are `component` in their `User-Agent`, as
    /// Kubernetes' components do (`kube-scheduler/v1.32.0 (linux/amd64) kubernetes/capstan`):
    /// a write without a fieldManager is recorded in managedFields under that name.
    pub fn with_user_agent(mut self, component: &str) -> Self {
        let ua = format!(
            "{component}/{} ({}/{}) kubernetes/capstan",
            crate::KUBERNETES_VERSION,
            std::env::consts::OS,
            capstan_api::go_arch()
        );
        self.user_agent = HeaderValue::from_str(&ua).ok();
        self
    }

    /// Clients made from this one receive watch events without `metadata.managedFields`, as
    /// kube-scheduler's informers drop them: for components that keep many objects and never
    /// read who manages which field. The server skips those bytes instead of the client
    /// parsing them (a third of the scheduler's informer time per pod).
    pub fn trimming_managed_fields(mut self) -> Self {
        self.trim_managed_fields = true;
        self
    }

    /// A client whose requests authenticate as `user` (as with a client certificate naming
    /// it; `system:authenticated` is added by authentication, as for every user).
    pub fn client(&self, user: User) -> kube::Client {
        kube::Client::new(self.service_as(user), "default")
    }

    /// [`Self::client`] for a user with just a name and groups (a certificate's CN and Os).
    pub fn client_as(&self, name: &str, groups: &[&str]) -> kube::Client {
        self.client(User {
            name: name.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        })
    }

    /// A client that sends `token` as its bearer token; the token authenticators decide who
    /// it is. Err when the token cannot be a header value.
    pub fn client_with_token(&self, token: &str) -> Result<kube::Client, String> {
        Ok(kube::Client::new(
            self.service_with_token(token)?,
            "default",
        ))
    }

    /// The tower service behind [`Self::client`], to build other client stacks on.
    pub fn service_as(&self, user: User) -> InProcessService {
        InProcessService {
            api: self.api.clone(),
            conn: Arc::new(ConnInfo {
                peer: Some(SOURCE),
                in_process_user: Some(user),
                ..Default::default()
            }),
            authorization: None,
            user_agent: self.user_agent.clone(),
            trim_managed_fields: self.trim_managed_fields,
        }
    }

    /// The tower service behind [`Self::client_with_token`].
    pub fn service_with_token(&self, token: &str) -> Result<InProcessService, String> {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| "the bearer token is not a valid header value".to_string())?;
        value.set_sensitive(true);
        Ok(InProcessService {
            api: self.api.clone(),
            conn: Arc::new(ConnInfo {
                peer: Some(SOURCE),
                ..Default::default()
            }),
            authorization: Some(value),
            user_agent: self.user_agent.clone(),
            trim_managed_fields: self.trim_managed_fields,
        })
    }
}

/// A tower service that serves each request with the API server in this process.
#[derive(Clone)]
pub struct InProcessService {
    api: Weak<ApiServer>,
    conn: Arc<ConnInfo>,
    /// Sent as `Authorization` on every request (a bearer token).
    authorization: Option<HeaderValue>,
    /// Sent as `User-Agent` by requests that carry none.
    user_agent: Option<HeaderValue>,
    trim_managed_fields: bool,
}

impl std::fmt::Debug for InProcessService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessService")
            .field(
                "user",
                &self.conn.in_process_user.as_ref().map(|u| u.name.as_str()),
            )
            .field("bearer_token", &self.authorization.is_some())
            .finish()
    }
}

/// Why an in-process request got no answer.
#[derive(Debug)]
pub struct ServerStopped;

impl std::fmt::Display for ServerStopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the in-process API server has stopped")
    }
}

impl std::error::Error for ServerStopped {}

impl<B> tower::Service<Request<B>> for InProcessService
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if let Some(ua) = &self.user_agent {
            req.headers_mut()
                .entry(http::header::USER_AGENT)
                .or_insert_with(|| ua.clone());
        }
        let api = self.api.upgrade();
        let conn = self.conn.clone();
        let authorization = self.authorization.clone();
        let trim = self.trim_managed_fields;
        Box::pin(async move {
            let api = api.ok_or_else(|| Box::new(ServerStopped) as BoxError)?;
            // The request is served on a task of its own, as the HTTPS server serves each
            // one: a caller that stops waiting does not cut a write short, and a handler that
            // panics fails this request only.
            let served = tokio::spawn(async move {
                handle(&api, req, &conn, authorization.as_ref(), trim).await
            });
            Ok(served.await.unwrap_or_else(|e| {
                if e.is_cancelled() {
                    // The runtime is shutting down with the request in flight.
                    tracing::debug!(error = %e, "an in-process request was cancelled");
                } else {
                    tracing::error!(error = %e, "an in-process request failed");
                }
                error_response(&ApiError::internal("the request handler failed"))
            }))
        })
    }
}

/// Read the body (at most 3 MiB, as over HTTPS) and hand the request to the API server.
async fn handle<B>(
    api: &Arc<ApiServer>,
    req: Request<B>,
    conn: &ConnInfo,
    authorization: Option<&HeaderValue>,
    trim_managed_fields: bool,
) -> Response<Body>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let started = std::time::Instant::now();
    let (mut parts, body) = req.into_parts();
    // Only what a request over the network carries: its method, URI, headers and body. The
    // caller's extensions stay on its side.
    parts.extensions = http::Extensions::new();
    if trim_managed_fields {
        parts.extensions.insert(TrimManagedFields);
    }
    if let Some(value) = authorization {
        parts
            .headers
            .insert(http::header::AUTHORIZATION, value.clone());
    }
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
    let head = parts.method == Method::HEAD;
    let method = parts.method.clone();
    let path = parts.uri.path().to_string();
    let mut resp = api.handle(Request::from_parts(parts, body), conn).await;
    if head {
        // As an HTTP server answers HEAD: the headers of the GET, no body.
        *resp.body_mut() = full(Bytes::new());
    }
    tracing::debug!(%method, path, status = resp.status().as_u16(),
        elapsed_us = started.elapsed().as_micros() as u64, transport = "in-process", "request");
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{AuthChain, InProcessAuthenticator, MastersAuthorizer};
    use tower::ServiceExt;

    async fn server() -> (Arc<ApiServer>, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Arc::new(
            capstan_store::embedded::EmbeddedStore::open(dir.path()).expect("the store opens"),
        );
        let auth = AuthChain {
            authenticators: vec![Box::new(InProcessAuthenticator)],
            authorizers: vec![Box::new(MastersAuthorizer)],
            ..Default::default()
        };
        let api = ApiServer::new(store, auth, crate::Config::default())
            .await
            .expect("the server starts");
        (api, dir)
    }

    fn admin() -> User {
        User {
            name: "admin".into(),
            groups: vec!["system:masters".into()],
            ..Default::default()
        }
    }

    async fn body_of(resp: Response<Body>) -> serde_json::Value {
        let bytes = resp
            .into_body()
            .collect()
            .await
            .expect("an infallible body")
            .to_bytes();
        serde_json::from_slice(&bytes).expect("a JSON body")
    }

    /// Each in-process request is a task, and the runtime moves a task's future when it is
    /// spawned, finished and joined: the handler's state must stay on the heap.
    #[tokio::test]
    async fn a_request_s_future_is_small() {
        let (api, _dir) = server().await;
        let conn = ConnInfo::default();
        let req = Request::get("/api").body(Bytes::new()).expect("a request");
        let served = api.handle(req, &conn);
        assert!(
            std::mem::size_of_val(&served) <= 1024,
            "ApiServer::handle's future is {} bytes",
            std::mem::size_of_val(&served)
        );
        drop(served);
        let req = Request::get("/api")
            .body(http_body_util::Full::new(Bytes::new()))
            .expect("a request");
        let served = handle(&api, req, &conn, None, false);
        assert!(
            std::mem::size_of_val(&served) <= 2048,
            "the in-process task's future is {} bytes",
            std::mem::size_of_val(&served)
        );
    }

    #[tokio::test]
    async fn an_oversized_body_is_413_before_the_handler() {
        let (api, _dir) = server().await;
        let svc = api.in_process().service_as(admin());
        let big = Bytes::from(vec![b' '; MAX_BODY_BYTES + 1]);
        let req = Request::post("/api/v1/namespaces/default/configmaps")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(big))
            .expect("a request");
        let resp = svc.oneshot(req).await.expect("an answer");
        assert_eq!(resp.status(), 413);
        assert_eq!(body_of(resp).await["reason"], "RequestEntityTooLarge");
    }

    #[tokio::test]
    async fn a_body_that_fails_to_arrive_is_400() {
        let (api, _dir) = server().await;
        let svc = api.in_process().service_as(admin());
        let frames = futures::stream::iter(vec![
            Ok(hyper::body::Frame::data(Bytes::from_static(b"{"))),
            Err(std::io::Error::other("the sender went away")),
        ]);
        let req = Request::post("/api/v1/namespaces/default/configmaps")
            .body(http_body_util::StreamBody::new(frames))
            .expect("a request");
        let resp = svc.oneshot(req).await.expect("an answer");
        assert_eq!(resp.status(), 400);
        let body = body_of(resp).await;
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("the sender went away")),
            "{body}"
        );
    }

    #[tokio::test]
    async fn a_trimming_client_watches_objects_without_managed_fields() {
        use futures::{StreamExt, TryStreamExt};
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, PostParams, WatchEvent, WatchParams};
        let (api, _dir) = server().await;
        let plain: Api<ConfigMap> = Api::namespaced(api.in_process().client(admin()), "default");
        let trimming: Api<ConfigMap> = Api::namespaced(
            api.in_process().trimming_managed_fields().client(admin()),
            "default",
        );
        for name in ["a", "b"] {
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": {"app": name}},
                "data": {"k": "v"},
            }))
            .expect("a config map");
            plain
                .create(&PostParams::default(), &cm)
                .await
                .expect("created");
        }
        let first_two = |api: Api<ConfigMap>| async move {
            let events = api
                .watch(&WatchParams::default().timeout(5), "0")
                .await
                .expect("a watch");
            let events: Vec<WatchEvent<ConfigMap>> =
                events.take(2).try_collect().await.expect("two events");
            events
                .into_iter()
                .map(|e| match e {
                    WatchEvent::Added(cm) => cm,
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>()
        };
        let seen = first_two(plain).await;
        assert!(seen.iter().all(|cm| cm.metadata.managed_fields.is_some()));
        let trimmed = first_two(trimming).await;
        for (t, s) in trimmed.iter().zip(&seen) {
            assert_eq!(t.metadata.managed_fields, None);
            let mut s = s.clone();
            s.metadata.managed_fields = None;
            assert_eq!(t, &s, "everything else is the same");
        }
        assert_eq!(trimmed[1].data.as_ref().unwrap()["k"], "v");
    }

    #[tokio::test]
    async fn head_answers_without_a_body() {
        let (api, _dir) = server().await;
        let svc = api.in_process().service_as(admin());
        let req = Request::head("/api/v1/namespaces/default")
            .body(http_body_util::Empty::<Bytes>::new())
            .expect("a request");
        let resp = svc.oneshot(req).await.expect("an answer");
        assert_eq!(resp.status(), 200);
        let bytes = resp.into_body().collect().await.expect("a body").to_bytes();
        assert!(bytes.is_empty());
    }

    #[tokio::test]
    async fn a_stopped_server_fails_the_transport() {
        let (api, _dir) = server().await;
        let svc = api.in_process().service_as(admin());
        drop(api);
        let req = Request::get("/version")
            .body(http_body_util::Empty::<Bytes>::new())
            .expect("a request");
        let err = svc.oneshot(req).await.expect_err("no server");
        assert!(err.is::<ServerStopped>(), "{err}");
    }

    #[test]
    fn a_token_must_be_a_header_value() {
        let in_process = InProcess {
            api: Weak::new(),
            user_agent: None,
            trim_managed_fields: false,
        };
        assert!(in_process.service_with_token("bad\ntoken").is_err());
        assert!(in_process.service_with_token("abc.def").is_ok());
    }
}
