//! Webhook admission against a real in-process HTTPS webhook (certificates from capstan_pki),
//! and, where timing or call order matters, against an in-process transport.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use capstan_api::catalogue::{self, ResourceInfo};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use super::*;
use crate::admission::Operation;
use crate::auth::User;
use crate::objects::MemoryObjects;
use capstan_api::meta::At as _;

/// The cluster CA (PEM) and a serving pair for `hook.hooks.svc`, `localhost` and 127.0.0.1.
struct Certs {
    ca: String,
    server: Arc<rustls::ServerConfig>,
}

fn certs() -> &'static Certs {
    static CERTS: OnceLock<Certs> = OnceLock::new();
    CERTS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = capstan_pki::PkiOptions {
            hostname: Some("test-host".into()),
            ..Default::default()
        };
        let pki = capstan_pki::Pki::load_or_create(dir.path(), options).expect("pki");
        let (cert, key) = pki
            .issue_serving_cert(
                &["hook.hooks.svc", "localhost"],
                &["127.0.0.1".parse().expect("ip")],
                Duration::from_secs(3600),
            )
            .expect("serving cert");
        let server = pki
            .server_tls_config_for(&cert, &key, capstan_pki::ClientAuth::None)
            .expect("server config");
        Certs {
            ca: pki.ca_cert_pem().to_string(),
            server,
        }
    })
}

type Handler = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// A webhook server on 127.0.0.1: answers each AdmissionReview with `handler(request)` as the
/// response (uid filled in), counting the calls.
struct Server {
    port: u16,
    calls: Arc<AtomicUsize>,
}

async fn serve(handler: Handler) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let calls = Arc::new(AtomicUsize::new(0));
    let acceptor = tokio_rustls::TlsAcceptor::from(certs().server.clone());
    let counter = calls.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, handler, counter) = (acceptor.clone(), handler.clone(), counter.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |req: http::Request<hyper::body::Incoming>| {
                        let (handler, counter) = (handler.clone(), counter.clone());
                        async move {
                            counter.fetch_add(1, Ordering::SeqCst);
                            let path = req.uri().to_string();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let review: Value =
                                serde_json::from_slice(&body).unwrap_or(Value::Null);
                            let mut request = review["request"].clone();
                            request["path"] = json!(path);
                            let mut response = handler(&request);
                            response["uid"] = request["uid"].clone();
                            let answer = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
                            let bytes = serde_json::to_vec(&answer).unwrap_or_default();
                            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(bytes))))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Server { port, calls }
}

fn ca_bundle() -> String {
    base64::engine::general_purpose::STANDARD.encode(certs().ca.as_bytes())
}

fn info(group: &str, plural: &str) -> &'static ResourceInfo {
    catalogue::RESOURCES
        .iter()
        .find(|r| r.group == group && r.plural == plural)
        .expect("in the catalogue")
}

/// A webhook on every ConfigMap write, served at `client_config`, with `extra` fields.
fn hook(name: &str, client_config: Value, extra: Value) -> Value {
    let mut h = json!({"name": name, "clientConfig": client_config,
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "scope": "*"}],
        "failurePolicy": "Fail", "matchPolicy": "Equivalent", "sideEffects": "None", "timeoutSeconds": 10,
        "admissionReviewVersions": ["v1"], "namespaceSelector": {}, "objectSelector": {}});
    for (k, v) in extra.as_object().expect("object") {
        h[k] = v.clone();
    }
    h
}

fn url_config(port: u16, path: &str) -> Value {
    json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca_bundle()})
}

/// Objects with namespaces `prod` and `dev` and the configurations given.
fn objects(phase: Phase, hooks: Vec<Value>) -> Arc<MemoryObjects> {
    let objects = Arc::new(MemoryObjects::default());
    for (ns, env) in [("prod", "prod"), ("dev", "dev")] {
        objects.insert(
            "",
            "namespaces",
            json!({"metadata": {"name": ns, "labels": {"env": env}}}),
        );
    }
    objects.insert(
        GROUP,
        phase.resource(),
        json!({"metadata": {"name": "hooks"}, "webhooks": hooks}),
    );
    objects
}

fn config_map(ns: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": ns, "labels": labels}, "data": {"a": "b"}})
}

fn user() -> &'static User {
    static USER: OnceLock<User> = OnceLock::new();
    USER.get_or_init(|| User {
        name: "alice".into(),
        groups: vec!["system:authenticated".into()],
        ..Default::default()
    })
}

fn attrs<'a>(objects: &'a MemoryObjects, ns: &'a str, dry_run: bool) -> Attributes<'a> {
    Attributes {
        user: user(),
        operation: Operation::Create,
        info: info("", "configmaps"),
        subresource: "",
        namespace: ns,
        name: "cm",
        dry_run,
        objects,
    }
}

async fn validate(phase_objects: Arc<MemoryObjects>, obj: &Value) -> ApiResult<()> {
    let plugin = Webhooks::validating(phase_objects.clone());
    let ns = capstan_api::meta::namespace(obj).to_string();
    plugin
        .validate(&attrs(&phase_objects, &ns, false), Some(obj), None)
        .await
}

async fn admit(phase_objects: Arc<MemoryObjects>, obj: &mut Value) -> ApiResult<()> {
    let plugin = Webhooks::mutating(phase_objects.clone());
    let ns = capstan_api::meta::namespace(obj).to_string();
    plugin
        .admit(&attrs(&phase_objects, &ns, false), Some(obj), None)
        .await
}

fn deny_labelled(req: &Value) -> Value {
    if req.at("/object/metadata/labels/deny") == Some(&json!("yes")) {
        json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": "configmaps labelled deny=yes are not allowed"}})
    } else {
        json!({"allowed": true})
    }
}

#[tokio::test]
async fn a_validating_webhook_denial_passes_its_message_through() {
    let server = serve(Arc::new(deny_labelled)).await;
    let objects = objects(
        Phase::Validating,
        vec![hook(
            "deny.example.com",
            url_config(server.port, "/validate"),
            json!({}),
        )],
    );
    let err = validate(objects.clone(), &config_map("prod", json!({"deny": "yes"})))
        .await
        .unwrap_err();
    assert_eq!(err.code, 403);
    assert_eq!(err.reason, "Forbidden");
    assert_eq!(
        err.message,
        "admission webhook \"deny.example.com\" denied the request: configmaps labelled deny=yes are not allowed"
    );
    validate(objects, &config_map("prod", json!({"deny": "no"})))
        .await
        .unwrap();
    assert_eq!(server.calls.load(Ordering::SeqCst), 2);
}

fn add_label(req: &Value) -> Value {
    assert_eq!(req["path"], json!("/mutate?timeout=10s"));
    assert_eq!(req["userInfo"]["username"], json!("alice"));
    let patch = if req.at("/object/metadata/labels").is_some() {
        json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "true"}])
    } else {
        json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "true"}}])
    };
    json!({"allowed": true, "patchType": "JSONPatch",
        "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string())})
}

#[tokio::test]
async fn a_mutating_webhook_behind_a_service_adds_a_label() {
    let server = serve(Arc::new(add_label)).await;
    let objects = objects(
        Phase::Mutating,
        vec![hook(
            "label.example.com",
            json!({"service": {"namespace": "hooks", "name": "hook", "path": "/mutate", "port": 443}, "caBundle": ca_bundle()}),
            json!({"reinvocationPolicy": "Never"}),
        )],
    );
    objects.insert(
        "",
        "services",
        json!({"metadata": {"name": "hook", "namespace": "hooks"},
            "spec": {"type": "ClusterIP", "ports": [{"port": 443, "targetPort": 8443}]}}),
    );
    objects.insert(
        "",
        "endpoints",
        json!({"metadata": {"name": "hook", "namespace": "hooks"},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": server.port}]}]}),
    );
    let mut obj = config_map("prod", json!({"app": "web"}));
    admit(objects.clone(), &mut obj).await.unwrap();
    assert_eq!(
        obj["metadata"]["labels"],
        json!({"app": "web", "mutated": "true"})
    );
    let mut bare = config_map("prod", Value::Null);
    bare["metadata"]
        .as_object_mut()
        .expect("object")
        .remove("labels");
    admit(objects, &mut bare).await.unwrap();
    assert_eq!(bare["metadata"]["labels"], json!({"mutated": "true"}));
}

#[tokio::test]
async fn webhooks_whose_selectors_do_not_match_are_not_called() {
    let server = serve(Arc::new(|_: &Value| json!({"allowed": false}))).await;
    let objects = objects(
        Phase::Validating,
        vec![
            hook(
                "prod-only.example.com",
                url_config(server.port, "/"),
                json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}),
            ),
            hook(
                "team-a.example.com",
                url_config(server.port, "/"),
                json!({"objectSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}}),
            ),
        ],
    );
    validate(objects.clone(), &config_map("dev", json!({"team": "b"})))
        .await
        .unwrap();
    assert_eq!(server.calls.load(Ordering::SeqCst), 0);
    let err = validate(objects.clone(), &config_map("dev", json!({"team": "a"})))
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "admission webhook \"team-a.example.com\" denied the request without explanation"
    );
    assert_eq!(err.code, 400);
    assert_eq!(server.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_unreachable_webhook_fails_closed_or_open_by_its_failure_policy() {
    // Nothing listens on port 1.
    let cc = json!({"url": "https://127.0.0.1:1/check", "caBundle": ca_bundle()});
    let closed = objects(
        Phase::Validating,
        vec![hook("down.example.com", cc.clone(), json!({}))],
    );
    let err = validate(closed, &config_map("prod", json!({})))
        .await
        .unwrap_err();
    assert_eq!((err.code, err.reason), (500, "InternalError"));
    assert_eq!(
        err.message,
        "Internal error occurred: failed calling webhook \"down.example.com\": failed to call webhook: \
         Post \"https://127.0.0.1:1/check?timeout=10s\": dial tcp 127.0.0.1:1: connect: connection refused"
    );
    let open = objects(
        Phase::Validating,
        vec![hook(
            "down.example.com",
            cc.clone(),
            json!({"failurePolicy": "Ignore"}),
        )],
    );
    validate(open, &config_map("prod", json!({})))
        .await
        .unwrap();
    let mutating = objects(
        Phase::Mutating,
        vec![hook(
            "down.example.com",
            cc,
            json!({"failurePolicy": "Ignore"}),
        )],
    );
    let mut obj = config_map("prod", json!({}));
    admit(mutating, &mut obj).await.unwrap();
}

#[tokio::test]
async fn a_certificate_outside_the_ca_bundle_is_a_call_failure() {
    let server = serve(Arc::new(|_: &Value| json!({"allowed": true}))).await;
    let other_ca = {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = capstan_pki::PkiOptions {
            hostname: Some("other".into()),
            ..Default::default()
        };
        let pki = capstan_pki::Pki::load_or_create(dir.path(), options).expect("pki");
        base64::engine::general_purpose::STANDARD.encode(pki.ca_cert_pem())
    };
    let objects = objects(
        Phase::Validating,
        vec![hook(
            "tls.example.com",
            json!({"url": format!("https://localhost:{}/", server.port), "caBundle": other_ca}),
            json!({}),
        )],
    );
    let err = validate(objects, &config_map("prod", json!({})))
        .await
        .unwrap_err();
    assert_eq!(err.code, 500);
    assert!(
        err.message.ends_with(
            "tls: failed to verify certificate: x509: certificate signed by unknown authority"
        ),
        "{}",
        err.message
    );
}

/// `(path, request) -> response`; `None` never answers.
type Answer = Box<dyn Fn(&str, &Value) -> Option<Value> + Send + Sync>;

/// A transport answering in-process, recording which webhooks (by path) it was asked.
struct FakeTransport {
    answer: Answer,
    asked: Mutex<Vec<String>>,
}

#[async_trait]
impl Transport for FakeTransport {
    async fn post(&self, target: &Target, body: Vec<u8>) -> Result<Vec<u8>, String> {
        let path = target.path.split('?').next().unwrap_or("").to_string();
        self.asked.lock().expect("lock").push(path.clone());
        let review: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        let request = &review["request"];
        let Some(mut response) = (self.answer)(&path, request) else {
            // Never answers: the caller's timeout must end the call.
            std::future::pending::<()>().await;
            unreachable!();
        };
        response["uid"] = request["uid"].clone();
        Ok(serde_json::to_vec(
            &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
        )
        .expect("json"))
    }
}

fn fake(
    answer: impl Fn(&str, &Value) -> Option<Value> + Send + Sync + 'static,
) -> Arc<FakeTransport> {
    Arc::new(FakeTransport {
        answer: Box::new(answer),
        asked: Mutex::new(Vec::new()),
    })
}

fn patch_label(key: &str, value: &str) -> Value {
    let patch = json!([{"op": "add", "path": format!("/metadata/labels/{key}"), "value": value}]);
    json!({"allowed": true, "patchType": "JSONPatch",
        "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string())})
}

#[tokio::test]
async fn a_webhook_that_does_not_answer_in_time_fails_with_a_deadline() {
    let transport = fake(|_, _| None);
    let objects = objects(
        Phase::Validating,
        vec![hook(
            "slow.example.com",
            json!({"url": "https://slow.example.com/v"}),
            json!({"timeoutSeconds": 1}),
        )],
    );
    let plugin = Webhooks::with_transport(Phase::Validating, objects.clone(), transport);
    let obj = config_map("prod", json!({}));
    let err = plugin
        .validate(&attrs(&objects, "prod", false), Some(&obj), None)
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "Internal error occurred: failed calling webhook \"slow.example.com\": failed to call webhook: \
         Post \"https://slow.example.com/v?timeout=1s\": context deadline exceeded"
    );
}

#[tokio::test]
async fn webhooks_with_side_effects_refuse_dry_run_requests() {
    let transport = fake(|_, _| Some(json!({"allowed": true})));
    let objects = objects(
        Phase::Validating,
        vec![hook(
            "effects.example.com",
            json!({"url": "https://fx.example.com/v"}),
            json!({"sideEffects": "Some"}),
        )],
    );
    let plugin = Webhooks::with_transport(Phase::Validating, objects.clone(), transport.clone());
    let obj = config_map("prod", json!({}));
    let err = plugin
        .validate(&attrs(&objects, "prod", true), Some(&obj), None)
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            400,
            "admission webhook \"effects.example.com\" does not support dry run"
        )
    );
    assert!(transport.asked.lock().expect("lock").is_empty());
    plugin
        .validate(&attrs(&objects, "prod", false), Some(&obj), None)
        .await
        .unwrap();
}

#[tokio::test]
async fn reinvocable_webhooks_run_again_after_a_later_change() {
    let transport = fake(|path, req| {
        Some(match path {
            // Records how many labels it saw; changes nothing once its label is there.
            "/first" if req.at("/object/metadata/labels/first").is_some() => {
                json!({"allowed": true})
            }
            "/first" => patch_label("first", "1"),
            "/second" => patch_label("second", "2"),
            _ => json!({"allowed": true}),
        })
    });
    let objects = objects(
        Phase::Mutating,
        vec![
            hook(
                "first.example.com",
                json!({"url": "https://h.example.com/first"}),
                json!({"reinvocationPolicy": "IfNeeded"}),
            ),
            hook(
                "second.example.com",
                json!({"url": "https://h.example.com/second"}),
                json!({"reinvocationPolicy": "Never"}),
            ),
            hook(
                "third.example.com",
                json!({"url": "https://h.example.com/third"}),
                json!({"reinvocationPolicy": "IfNeeded"}),
            ),
        ],
    );
    let plugin = Webhooks::with_transport(Phase::Mutating, objects.clone(), transport.clone());
    let mut obj = config_map("prod", json!({}));
    plugin
        .admit(&attrs(&objects, "prod", false), Some(&mut obj), None)
        .await
        .unwrap();
    assert_eq!(
        obj["metadata"]["labels"],
        json!({"first": "1", "second": "2"})
    );
    // first changed the object, then second did: first runs again; third ran after the last
    // change and is not called again.
    assert_eq!(
        *transport.asked.lock().expect("lock"),
        ["/first", "/second", "/third", "/first"]
    );
}

#[tokio::test]
async fn writes_of_webhook_configurations_skip_webhooks() {
    let transport = fake(|_, _| Some(json!({"allowed": false})));
    let mut everything = hook(
        "all.example.com",
        json!({"url": "https://all.example.com/"}),
        json!({}),
    );
    everything["rules"] = json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "*"}]);
    let objects = objects(Phase::Validating, vec![everything]);
    let plugin = Webhooks::with_transport(Phase::Validating, objects.clone(), transport.clone());
    let mut a = attrs(&objects, "", false);
    a.info = info(GROUP, "validatingwebhookconfigurations");
    a.name = "hooks";
    plugin
        .validate(&a, Some(&json!({"metadata": {"name": "hooks"}})), None)
        .await
        .unwrap();
    assert!(transport.asked.lock().expect("lock").is_empty());
}
