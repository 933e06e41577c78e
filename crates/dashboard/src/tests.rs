//! The dashboard server against a fake API server: what is forwarded (the bearer token, the
//! path and query, the body) and what is not (cookies, other headers, paths outside the API),
//! streaming both ways of a watch, the UI's files, and TLS on both sides.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::{ApiTarget, Dashboard, Options, Tls};

/// What the fake API server saw of one request.
#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    uri: String,
    headers: HeaderMap,
    body: Bytes,
}

/// A response body fed through a channel: the test decides when each chunk goes, and sees
/// (the sender closes) when the reader went away.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b))))
    }
}

type FakeBody = http_body_util::Either<Full<Bytes>, ChannelBody>;

struct FakeApi {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Senders of the streams opened on /api/v1/stream, in order.
    streams: mpsc::UnboundedReceiver<mpsc::Sender<Bytes>>,
    _stop: oneshot::Sender<()>,
}

/// A fake API server: /api/v1/stream streams (see [`FakeApi::streams`]), /api/v1/denied
/// answers 401 with WWW-Authenticate, everything else 200 with a small JSON body.
async fn fake_api(tls: Option<Arc<rustls::ServerConfig>>) -> FakeApi {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (streams_tx, streams) = mpsc::unbounded_channel();
    let (stop, mut stopped) = oneshot::channel::<()>();
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = tokio::select! {
                _ = &mut stopped => return,
                a = listener.accept() => a.unwrap(),
            };
            let seen = seen2.clone();
            let streams_tx = streams_tx.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let seen = seen.clone();
                    let streams_tx = streams_tx.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.unwrap().to_bytes();
                        let path = parts.uri.path().to_string();
                        seen.lock().unwrap().push(Seen {
                            method: parts.method.clone(),
                            uri: parts.uri.to_string(),
                            headers: parts.headers.clone(),
                            body,
                        });
                        let resp: Response<FakeBody> = match path.as_str() {
                            "/api/v1/stream" => {
                                let (tx, rx) = mpsc::channel(4);
                                streams_tx.send(tx).unwrap();
                                Response::new(http_body_util::Either::Right(ChannelBody(rx)))
                            }
                            "/api/v1/denied" => Response::builder()
                                .status(401)
                                .header("www-authenticate", "Basic realm=\"kubernetes\"")
                                .header("content-type", "application/json")
                                .body(http_body_util::Either::Left(Full::new(Bytes::from(
                                    r#"{"kind":"Status","code":401,"message":"Unauthorized"}"#,
                                ))))
                                .unwrap(),
                            _ => Response::builder()
                                .header("content-type", "application/json")
                                .header("set-cookie", "x=1")
                                .header("audit-id", "abc")
                                .body(http_body_util::Either::Left(Full::new(Bytes::from(
                                    r#"{"kind":"APIVersions"}"#,
                                ))))
                                .unwrap(),
                        };
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let _ = match tls {
                    Some(cfg) => {
                        let Ok(stream) = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await
                        else {
                            return;
                        };
                        builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await
                    }
                    None => builder.serve_connection(TokioIo::new(tcp), service).await,
                };
            });
        }
    });
    FakeApi {
        addr,
        seen,
        streams,
        _stop: stop,
    }
}

impl FakeApi {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Start serving; returns the base URL and the handle that stops the server when dropped.
async fn serve(api: ApiTarget, tls: Tls) -> (String, oneshot::Sender<()>, Option<String>) {
    let d = Dashboard::bind(
        Options {
            bind: "127.0.0.1:0".parse().unwrap(),
            tls,
        },
        api,
    )
    .await
    .unwrap();
    let url = d.url();
    let cert = d.self_signed_cert_pem().map(str::to_string);
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(d.serve(async {
        let _ = stopped.await;
    }));
    (url, stop, cert)
}

fn http_target(api: &FakeApi) -> ApiTarget {
    ApiTarget {
        url: format!("http://{}", api.addr),
        ca_pem: None,
    }
}

type TestClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn send(
    client: &TestClient,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response<Incoming> {
    let mut req = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    client
        .request(req.body(Full::new(Bytes::from(body.to_string()))).unwrap())
        .await
        .unwrap()
}

async fn text(resp: Response<Incoming>) -> String {
    String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap()
}

#[tokio::test]
async fn forwards_the_bearer_token_and_only_the_api_headers() {
    let api = fake_api(None).await;
    let (url, _stop, _) = serve(http_target(&api), Tls::Off).await;
    let c = client();
    let resp = send(
        &c,
        Method::GET,
        &format!("{url}api/v1/namespaces/default/pods?limit=5&labelSelector=app%3Dweb"),
        &[
            ("authorization", "Bearer user-token"),
            ("accept", "application/json;as=Table;v=v1;g=meta.k8s.io"),
            ("cookie", "session=secret"),
            ("impersonate-user", "system:admin"),
            ("x-forwarded-for", "10.0.0.1"),
        ],
        "",
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    // The API server's own headers come back, minus cookies; the answer cannot run as a page.
    assert_eq!(resp.headers()["audit-id"], "abc");
    assert!(resp.headers().get("set-cookie").is_none());
    assert!(resp.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("sandbox"));
    assert_eq!(text(resp).await, r#"{"kind":"APIVersions"}"#);

    let seen = api.seen();
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert_eq!(s.method, Method::GET);
    assert_eq!(
        s.uri,
        "/api/v1/namespaces/default/pods?limit=5&labelSelector=app%3Dweb"
    );
    assert_eq!(s.headers["authorization"], "Bearer user-token");
    assert_eq!(
        s.headers["accept"],
        "application/json;as=Table;v=v1;g=meta.k8s.io"
    );
    for h in ["cookie", "impersonate-user", "x-forwarded-for"] {
        assert!(s.headers.get(h).is_none(), "{h} was forwarded");
    }
    assert!(s.headers["user-agent"]
        .to_str()
        .unwrap()
        .starts_with("capstan-dashboard/"));

    // Without a token the request is anonymous: the dashboard adds no credentials.
    let resp = send(&c, Method::GET, &format!("{url}version"), &[], "").await;
    assert_eq!(resp.status(), StatusCode::OK);
    let seen = api.seen();
    assert_eq!(seen[1].uri, "/version");
    assert!(seen[1].headers.get("authorization").is_none());

    // A basic-auth header is not a bearer token: dropped.
    send(
        &c,
        Method::GET,
        &format!("{url}apis"),
        &[("authorization", "Basic YTpi")],
        "",
    )
    .await;
    assert!(api.seen()[2].headers.get("authorization").is_none());
}

#[tokio::test]
async fn forwards_writes_with_their_body() {
    let api = fake_api(None).await;
    let (url, _stop, _) = serve(http_target(&api), Tls::Off).await;
    let c = client();
    let yaml = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n";
    for method in [Method::PUT, Method::POST, Method::PATCH, Method::DELETE] {
        let resp = send(
            &c,
            method.clone(),
            &format!("{url}apis/apps/v1/namespaces/default/deployments/web"),
            &[
                ("authorization", "Bearer t"),
                ("content-type", "application/yaml"),
            ],
            yaml,
        )
        .await;
        assert_eq!(resp.status(), StatusCode::OK, "{method}");
        let s = api.seen().pop().unwrap();
        assert_eq!(s.method, method);
        assert_eq!(s.headers["content-type"], "application/yaml");
        assert_eq!(s.body, yaml.as_bytes());
    }
    // Methods the API does not take are not forwarded.
    let resp = send(&c, Method::OPTIONS, &format!("{url}api/v1"), &[], "").await;
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(api.seen().len(), 4);
}

#[tokio::test]
async fn only_api_paths_are_forwarded() {
    let api = fake_api(None).await;
    let (url, _stop, _) = serve(http_target(&api), Tls::Off).await;
    let c = client();
    for (path, code) in [
        ("metrics", StatusCode::NOT_FOUND),
        ("healthz", StatusCode::NOT_FOUND),
        ("openapi/v2", StatusCode::NOT_FOUND),
        ("apix/v1", StatusCode::NOT_FOUND),
        ("api/../metrics", StatusCode::BAD_REQUEST),
        ("api/%2e%2e/metrics", StatusCode::BAD_REQUEST),
        ("apis//metrics", StatusCode::BAD_REQUEST),
    ] {
        let resp = send(
            &c,
            Method::GET,
            &format!("{url}{path}"),
            &[("authorization", "Bearer t")],
            "",
        )
        .await;
        assert_eq!(resp.status(), code, "{path}");
        if code == StatusCode::BAD_REQUEST {
            // Refusals are Status objects, which the UI shows like the API server's.
            let v: serde_json::Value = serde_json::from_str(&text(resp).await).unwrap();
            assert_eq!(v["kind"], "Status");
            assert_eq!(v["code"], 400);
        }
    }
    assert!(api.seen().is_empty(), "forwarded: {:?}", api.seen());
}

#[tokio::test]
async fn serves_the_ui_files() {
    let api = fake_api(None).await;
    let (url, _stop, _) = serve(http_target(&api), Tls::Off).await;
    let c = client();
    let resp = send(&c, Method::GET, &url, &[], "").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let csp = resp.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(text(resp).await.contains("/js/boot.js"));
    for asset in crate::assets::ASSETS {
        let resp = send(
            &c,
            Method::GET,
            &format!("{url}{}", &asset.path[1..]),
            &[],
            "",
        )
        .await;
        assert_eq!(resp.status(), StatusCode::OK, "{}", asset.path);
        assert_eq!(resp.headers()["content-type"], asset.content_type);
        assert_eq!(text(resp).await.as_bytes(), asset.body);
    }
    let resp = send(&c, Method::GET, &format!("{url}nothing.js"), &[], "").await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let resp = send(&c, Method::POST, &url, &[], "x").await;
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(api.seen().is_empty());
}

#[tokio::test]
async fn watch_streams_flow_through_and_end_with_the_browser() {
    let mut api = fake_api(None).await;
    let (url, _stop, _) = serve(http_target(&api), Tls::Off).await;
    let c = client();
    let resp = send(
        &c,
        Method::GET,
        &format!("{url}api/v1/stream?watch=1"),
        &[("authorization", "Bearer t")],
        "",
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let upstream = tokio::time::timeout(Duration::from_secs(5), api.streams.recv())
        .await
        .unwrap()
        .unwrap();
    let mut body = resp.into_body();
    // Each event reaches the browser while the stream is still open.
    for event in ["{\"type\":\"ADDED\"}\n", "{\"type\":\"MODIFIED\"}\n"] {
        upstream.send(Bytes::from(event)).await.unwrap();
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("the event arrives before the stream ends")
            .unwrap()
            .unwrap();
        assert_eq!(frame.into_data().unwrap(), event.as_bytes());
    }
    // The browser goes away: the dashboard lets go of the API server's stream too.
    drop(body);
    tokio::time::timeout(Duration::from_secs(5), upstream.closed())
        .await
        .expect("the upstream watch is closed when the browser leaves");
}

#[tokio::test]
async fn api_errors_pass_through_without_a_password_prompt() {
    let api = fake_api(None).await;
    let (url, _stop, _) = serve(http_target(&api), Tls::Off).await;
    let resp = send(
        &client(),
        Method::GET,
        &format!("{url}api/v1/denied"),
        &[],
        "",
    )
    .await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers().get("www-authenticate").is_none());
    assert!(text(resp).await.contains("Unauthorized"));
}

#[tokio::test]
async fn an_unreachable_api_server_is_a_status_message() {
    // A port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let target = ApiTarget {
        url: format!("http://127.0.0.1:{port}"),
        ca_pem: None,
    };
    let (url, _stop, _) = serve(target, Tls::Off).await;
    let resp = send(&client(), Method::GET, &format!("{url}api"), &[], "").await;
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    let v: serde_json::Value = serde_json::from_str(&text(resp).await).unwrap();
    assert_eq!(v["kind"], "Status");
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("cannot reach the API server"), "{msg}");
}

#[tokio::test]
async fn bad_targets_fail_at_bind() {
    let bind = |url: &str, ca: Option<&str>| {
        Dashboard::bind(
            Options {
                bind: "127.0.0.1:0".parse().unwrap(),
                tls: Tls::Off,
            },
            ApiTarget {
                url: url.to_string(),
                ca_pem: ca.map(str::to_string),
            },
        )
    };
    let e = bind("https://127.0.0.1:6443", None).await.err().unwrap();
    assert!(format!("{e:#}").contains("no CA certificate"), "{e:#}");
    let e = bind("ftp://x", None).await.err().unwrap();
    assert!(format!("{e:#}").contains("neither https nor http"), "{e:#}");
    let e = bind("not a url", None).await.err().unwrap();
    assert!(format!("{e:#}").contains("not a URL"), "{e:#}");
    let e = bind(
        "https://127.0.0.1:6443",
        Some("-----BEGIN CERTIFICATE-----\nnope\n"),
    )
    .await
    .err()
    .unwrap();
    assert!(format!("{e:#}").contains("CA certificate"), "{e:#}");
}

/// A CA, and a serving certificate for 127.0.0.1 that it signed.
fn ca_and_server() -> (String, Arc<rustls::ServerConfig>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
    .unwrap();
    let mut config = config;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    (ca.pem(), Arc::new(config))
}

#[tokio::test]
async fn checks_the_api_server_with_the_given_ca() {
    let (ca_pem, server) = ca_and_server();
    let api = fake_api(Some(server)).await;
    let target = ApiTarget {
        url: format!("https://{}", api.addr),
        ca_pem: Some(ca_pem),
    };
    let (url, _stop, _) = serve(target, Tls::Off).await;
    let resp = send(
        &client(),
        Method::GET,
        &format!("{url}api"),
        &[("authorization", "Bearer t")],
        "",
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(api.seen()[0].headers["authorization"], "Bearer t");

    // Another CA does not vouch for this server: nothing is sent, the UI is told why.
    let (other_ca, _) = ca_and_server();
    let target = ApiTarget {
        url: format!("https://{}", api.addr),
        ca_pem: Some(other_ca),
    };
    let (url, _stop2, _) = serve(target, Tls::Off).await;
    let resp = send(
        &client(),
        Method::GET,
        &format!("{url}api"),
        &[("authorization", "Bearer t")],
        "",
    )
    .await;
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    let body = text(resp).await;
    assert!(body.to_lowercase().contains("certificate"), "{body}");
    assert_eq!(api.seen().len(), 1);
}

#[tokio::test]
async fn serves_https_and_http2_with_a_self_signed_certificate() {
    let api = fake_api(None).await;
    let (url, _stop, cert) = serve(http_target(&api), Tls::SelfSigned).await;
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let cert = cert.expect("a self-signed certificate was made");
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(cert.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .enable_http2()
        .build();
    let c: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let resp = c
        .request(
            Request::get(format!("{url}api/v1"))
                .header("authorization", "Bearer t")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    // HTTP/2: a browser's watches share one connection instead of six.
    assert_eq!(resp.version(), Version::HTTP_2);
    assert_eq!(api.seen()[0].headers["authorization"], "Bearer t");
}
