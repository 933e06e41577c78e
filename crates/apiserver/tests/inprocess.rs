//! The in-process transport, through kube clients, against a server set up as `capstan
//! server` sets it up (x509 + token authentication, the Node authorizer and RBAC, the whole
//! admission chain, audit): every request still passes the full pipeline. The last test
//! measures the same verbs over HTTPS and in process, side by side.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_apiserver::access::{access, AccessOptions};
use capstan_apiserver::{ApiServer, Config, InProcess};
use capstan_pki::{ClientAuth, Pki, PkiOptions};
use capstan_store::embedded::EmbeddedStore;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

/// The bearer token of the token file, and its user.
const TOKEN: &str = "in-process-test-token";
const TOKEN_USER: &str = "token-user";

struct Cluster {
    api: Arc<ApiServer>,
    in_process: InProcess,
    pki: Arc<Pki>,
    audit_log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

async fn cluster() -> Cluster {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pki = Arc::new(
        Pki::load_or_create(
            &dir.path().join("pki"),
            PkiOptions {
                service_cidr: "10.43.0.0/16".into(),
                hostname: Some("inprocess-test".into()),
                ..Default::default()
            },
        )
        .expect("the PKI"),
    );
    let token_file = dir.path().join("tokens.csv");
    std::fs::write(
        &token_file,
        format!("{TOKEN},{TOKEN_USER},uid-1,\"team-a\"\n"),
    )
    .expect("the token file");
    let access = access(AccessOptions {
        key: pki.clone(),
        token_file: Some(token_file),
        jwks_uri: None,
        allow_anonymous: false,
        client_certs: Some(pki.client_cert_check().expect("the client cert check")),
    })
    .expect("the access control");
    let (auth, enable) = access.into_parts();
    let store = Arc::new(EmbeddedStore::open(dir.path().join("store")).expect("the store"));
    let audit_log = dir.path().join("audit.log");
    let api = ApiServer::new(
        store,
        auth,
        Config {
            audit_log: Some(audit_log.clone()),
            ..Default::default()
        },
    )
    .await
    .expect("the server");
    enable.enable(&api).await;
    let in_process = api.in_process();
    Cluster {
        api,
        in_process,
        pki,
        audit_log,
        _dir: dir,
    }
}

impl Cluster {
    fn admin(&self) -> kube::Client {
        self.in_process
            .client_as("kubernetes-admin", &["system:masters"])
    }

    /// A namespace with its `default` service account (which the ServiceAccount admission
    /// plugin wants for pods; the controllers are not running here).
    async fn namespace(&self, name: &str) {
        let admin = self.admin();
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("a namespace");
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("creating the namespace");
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": "default"}})).expect("an SA");
        Api::<ServiceAccount>::namespaced(admin, name)
            .create(&PostParams::default(), &sa)
            .await
            .expect("creating the default service account");
    }
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "inproc"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .expect("a pod")
}

fn config_map(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": value}}))
        .expect("a config map")
}

/// `f` until it is true, within `timeout`.
async fn wait_until(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

type Events = futures::stream::BoxStream<'static, kube::Result<WatchEvent<ConfigMap>>>;

/// The next event of a watch, within 10 seconds.
async fn next(events: &mut Events) -> WatchEvent<ConfigMap> {
    tokio::time::timeout(Duration::from_secs(10), events.try_next())
        .await
        .expect("an event within 10s")
        .expect("a well-formed event")
        .expect("the watch stays open")
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn get_list_create_delete_with_admission_and_validation() {
    let c = cluster().await;
    c.namespace("crud").await;
    let pods: Api<Pod> = Api::namespaced(c.admin(), "crud");

    let created = pods
        .create(&PostParams::default(), &pod("web"))
        .await
        .expect("creating a pod");
    // Admission and the pod strategy's defaults ran.
    let spec = created.spec.as_ref().expect("a spec");
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(
        spec.containers[0].image_pull_policy.as_deref(),
        Some("Always")
    );
    assert!(created.metadata.uid.is_some());
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );

    let got = pods.get("web").await.expect("getting the pod");
    assert_eq!(got.metadata.uid, created.metadata.uid);
    let listed = pods
        .list(&ListParams::default().labels("app=inproc"))
        .await
        .expect("listing pods");
    assert_eq!(listed.items.len(), 1);
    assert!(listed.metadata.resource_version.is_some());
    let none = pods
        .list(&ListParams::default().labels("app=other"))
        .await
        .expect("listing pods");
    assert!(none.items.is_empty());

    // Validation ran: a pod without containers is 422.
    let bad: Pod =
        serde_json::from_value(json!({"metadata": {"name": "bad"}, "spec": {"containers": []}}))
            .expect("a pod");
    let status = api_error(
        pods.create(&PostParams::default(), &bad)
            .await
            .expect_err("no containers"),
    );
    assert_eq!(status.code, 422, "{status:?}");
    assert_eq!(status.reason, "Invalid");

    // A missing object is 404, a second create 409.
    assert_eq!(
        api_error(pods.get("nope").await.expect_err("missing")).code,
        404
    );
    assert_eq!(
        api_error(
            pods.create(&PostParams::default(), &pod("web"))
                .await
                .expect_err("exists")
        )
        .code,
        409
    );

    pods.delete("web", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleting the pod");
    wait_until("the pod to be gone", Duration::from_secs(10), async || {
        matches!(pods.get_opt("web").await, Ok(None))
    })
    .await;
}

/// A component's client says what it is in its User-Agent, as Kubernetes' components do, so
/// its writes are recorded in managedFields under its name; a client without one is `unknown`.
#[tokio::test]
async fn components_are_field_managers_by_their_user_agent() {
    let c = cluster().await;
    c.namespace("ua").await;
    let manager = |cm: &ConfigMap| {
        cm.metadata
            .managed_fields
            .iter()
            .flatten()
            .map(|e| e.manager.clone().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let cm = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}}))
            .expect("a config map")
    };
    let controllers = c
        .in_process
        .clone()
        .with_user_agent("kube-controller-manager")
        .client_as("kubernetes-admin", &["system:masters"]);
    let written = Api::<ConfigMap>::namespaced(controllers, "ua")
        .create(&PostParams::default(), &cm("by-controller"))
        .await
        .expect("creating as the controller manager");
    assert_eq!(manager(&written), ["kube-controller-manager"]);
    let plain = Api::<ConfigMap>::namespaced(c.admin(), "ua")
        .create(&PostParams::default(), &cm("by-admin"))
        .await
        .expect("creating without a user agent");
    assert_eq!(manager(&plain), ["unknown"]);
}

#[tokio::test]
async fn a_watch_streams_events_as_they_happen() {
    let c = cluster().await;
    c.namespace("watched").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.admin(), "watched");
    let start = cms
        .list(&ListParams::default())
        .await
        .expect("listing")
        .metadata
        .resource_version
        .expect("a resource version");
    let mut events: Events = cms
        .watch(&WatchParams::default().timeout(60), &start)
        .await
        .expect("starting the watch")
        .boxed();

    cms.create(&PostParams::default(), &config_map("one", "1"))
        .await
        .expect("creating");
    match next(&mut events).await {
        WatchEvent::Added(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("one")),
        other => panic!("expected ADDED, got {other:?}"),
    }
    cms.replace("one", &PostParams::default(), &{
        let mut cm = cms.get("one").await.expect("getting");
        cm.data = Some([("k".to_string(), "2".to_string())].into());
        cm
    })
    .await
    .expect("updating");
    match next(&mut events).await {
        WatchEvent::Modified(cm) => {
            assert_eq!(
                cm.data.and_then(|d| d.get("k").cloned()).as_deref(),
                Some("2")
            )
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    cms.delete("one", &DeleteParams::default())
        .await
        .expect("deleting");
    match next(&mut events).await {
        WatchEvent::Deleted(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("one")),
        other => panic!("expected DELETED, got {other:?}"),
    }

    // The watch is registered while its body is read, and gone once the client drops it.
    let admin = c.admin();
    let watchers = async || {
        let metrics = admin
            .request_text(
                http::Request::get("/metrics")
                    .body(Vec::new())
                    .expect("a request"),
            )
            .await
            .expect("the metrics");
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(
                    "apiserver_registered_watchers{group=\"\",kind=\"ConfigMap\",version=\"v1\"} ",
                )
            })
            .and_then(|n| n.trim().parse::<usize>().ok())
            .expect("the ConfigMap watcher count")
    };
    assert_eq!(watchers().await, 1);
    drop(events);
    wait_until("the watch to end", Duration::from_secs(10), async || {
        watchers().await == 0
    })
    .await;
}

#[tokio::test]
async fn authorization_runs_for_in_process_users() {
    let c = cluster().await;
    c.namespace("team").await;
    let jane = c.in_process.client_as("jane", &[]);
    let status = api_error(
        Api::<Pod>::namespaced(jane.clone(), "team")
            .list(&ListParams::default())
            .await
            .expect_err("jane has no rights yet"),
    );
    assert_eq!(status.code, 403, "{status:?}");
    assert_eq!(
        status.message,
        "pods is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"\" in the namespace \"team\""
    );

    // RBAC grants, and the same client is then allowed.
    let admin = c.admin();
    let role = serde_json::from_value(json!({
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    }))
    .expect("a role");
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(admin.clone(), "team")
        .create(&PostParams::default(), &role)
        .await
        .expect("creating the role");
    let binding = serde_json::from_value(json!({
        "metadata": {"name": "jane-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "jane"}],
    }))
    .expect("a binding");
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin, "team")
        .create(&PostParams::default(), &binding)
        .await
        .expect("creating the binding");
    let pods = Api::<Pod>::namespaced(jane.clone(), "team");
    wait_until(
        "jane's binding to apply",
        Duration::from_secs(10),
        async || pods.list(&ListParams::default()).await.is_ok(),
    )
    .await;
    // Reading only: a create is still forbidden.
    let status = api_error(
        pods.create(&PostParams::default(), &pod("p"))
            .await
            .expect_err("jane may not create"),
    );
    assert_eq!(status.code, 403);
}

#[tokio::test]
async fn a_node_identity_meets_the_node_authorizer_and_node_restriction() {
    let c = cluster().await;
    let kubelet = c.in_process.client_as("system:node:n1", &["system:nodes"]);
    let nodes: Api<Node> = Api::all(kubelet);
    let node = |name: &str| -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("a node")
    };
    nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .expect("a kubelet registers its own node");
    let status = api_error(
        nodes
            .create(&PostParams::default(), &node("n2"))
            .await
            .expect_err("another node's object"),
    );
    assert_eq!(status.code, 403, "{status:?}");
    assert!(
        status
            .message
            .contains("node \"n1\" is not allowed to modify node \"n2\""),
        "{}",
        status.message
    );
    // The Node authorizer: a secret no pod of n1 uses is not readable.
    let status = api_error(
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
            nodes.clone().into_client(),
            "default",
        )
        .get("anything")
        .await
        .expect_err("not related to n1"),
    );
    assert_eq!(status.code, 403, "{status:?}");
}

#[tokio::test]
async fn a_bearer_token_is_authenticated_as_over_the_network() {
    let c = cluster().await;
    let client = c.in_process.client_with_token(TOKEN).expect("a client");
    let review: k8s_openapi::api::authentication::v1::SelfSubjectReview =
        serde_json::from_value(json!({})).expect("a review");
    let answer = Api::<k8s_openapi::api::authentication::v1::SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &review)
        .await
        .expect("a self subject review");
    let user = answer
        .status
        .and_then(|s| s.user_info)
        .expect("the user info");
    assert_eq!(user.username.as_deref(), Some(TOKEN_USER));
    assert_eq!(user.uid.as_deref(), Some("uid-1"));
    let groups = user.groups.unwrap_or_default();
    assert!(groups.contains(&"team-a".to_string()), "{groups:?}");
    assert!(groups.contains(&"system:authenticated".to_string()));

    let wrong = c
        .in_process
        .client_with_token("not-a-token")
        .expect("a client");
    let err = Api::<Namespace>::all(wrong)
        .list(&ListParams::default())
        .await
        .expect_err("an unknown token");
    assert_eq!(api_error(err).code, 401);
}

#[tokio::test]
async fn concurrent_requests_are_served_together() {
    let c = cluster().await;
    c.namespace("many").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.admin(), "many");
    let writes = (0..64).map(|i| {
        let cms = cms.clone();
        async move {
            cms.create(
                &PostParams::default(),
                &config_map(&format!("cm-{i}"), &i.to_string()),
            )
            .await?;
            cms.get(&format!("cm-{i}")).await
        }
    });
    let results = futures::future::join_all(writes).await;
    for (i, r) in results.into_iter().enumerate() {
        let cm = r.unwrap_or_else(|e| panic!("config map {i}: {e}"));
        assert_eq!(
            cm.data.and_then(|d| d.get("k").cloned()),
            Some(i.to_string())
        );
    }
    // And while a watch holds its stream open, other requests still go through.
    let _watch = cms
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .expect("a watch");
    let listed = cms.list(&ListParams::default()).await.expect("a list");
    assert_eq!(listed.items.len(), 64);
}

#[tokio::test]
async fn audit_records_the_in_process_user() {
    let c = cluster().await;
    let client = c.in_process.client_as("system:kube-proxy", &[]);
    let status = api_error(
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "x"}})).expect("a namespace"),
            )
            .await
            .expect_err("the proxy may not create namespaces"),
    );
    assert_eq!(status.code, 403);
    Api::<k8s_openapi::api::core::v1::Service>::all(client)
        .list(&ListParams::default())
        .await
        .expect("the proxy lists services (system:node-proxier)");
    let path = c.audit_log.clone();
    let mut lines = Vec::new();
    wait_until("the audit entries", Duration::from_secs(10), async || {
        lines = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["user"]["username"] == "system:kube-proxy")
            .collect();
        lines.len() >= 2
    })
    .await;
    let denied = lines
        .iter()
        .find(|e| e["verb"] == "create")
        .expect("the denied create");
    assert_eq!(denied["responseStatus"]["code"], 403);
    assert_eq!(denied["sourceIPs"][0], "127.0.0.1");
    let groups = denied["user"]["groups"].as_array().expect("groups");
    assert!(groups.iter().any(|g| g == "system:authenticated"));
}

// ---- HTTPS and in process, side by side ----

/// The API server on a loopback port over TLS, as `capstan server` serves it; stopped on drop.
struct Https {
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Https {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn https(c: &Cluster) -> Https {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let port = listener.local_addr().expect("an address").port();
    let tls = c
        .pki
        .server_tls_config(ClientAuth::Request)
        .expect("the TLS configuration");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(capstan_apiserver::server::serve(
        listener,
        tls,
        c.api.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    Https {
        url: format!("https://127.0.0.1:{port}"),
        stop: Some(stop),
    }
}

/// How the HTTPS client's TCP connection is set up.
#[derive(Clone, Copy, PartialEq)]
enum Tcp {
    /// As `capstan_runtime::client::client` makes it (what the components use today).
    Runtime,
    /// The same client with TCP_NODELAY set on its connection.
    NoDelay,
}

/// An HTTPS client with a client certificate, over HTTP/2 as the components' clients are.
async fn https_client(
    c: &Cluster,
    url: &str,
    user: &str,
    groups: &[&str],
    tcp: Tcp,
) -> kube::Client {
    use kube::client::ConfigExt;
    let (cert, key) = c
        .pki
        .issue_client_cert(user, groups, Duration::from_secs(3600))
        .expect("a client certificate");
    let yaml = capstan_pki::kubeconfig::render(&capstan_pki::kubeconfig::Entry {
        cluster_name: "bench",
        server_url: url,
        ca_pem: c.pki.ca_cert_pem(),
        user_name: user,
        cert_pem: &cert,
        key_pem: &key,
    });
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).expect("a kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("a client configuration");
    if tcp == Tcp::Runtime {
        return capstan_runtime::client::client(config).expect("an HTTPS client");
    }
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.enforce_http(false);
    connector.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(
            config
                .rustls_client_config()
                .expect("the TLS configuration"),
        )
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(connector);
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .map_err(tower::BoxError::from)
        .service(hyper);
    kube::Client::new(service, "default")
}

#[tokio::test]
async fn the_network_cannot_claim_an_in_process_identity() {
    let c = cluster().await;
    let server = https(&c).await;
    // Over HTTPS without a certificate or token, nothing authenticates the request.
    let http = reqwest_like_get(&server.url, "/api/v1/namespaces").await;
    assert_eq!(http, 401);
    // With a certificate, the same user as in process.
    let client = https_client(&c, &server.url, "system:kube-proxy", &[], Tcp::Runtime).await;
    Api::<k8s_openapi::api::core::v1::Service>::all(client)
        .list(&ListParams::default())
        .await
        .expect("the proxy lists services over HTTPS");
}

/// The status code of an unauthenticated GET over HTTPS (the cluster CA is not checked).
async fn reqwest_like_get(url: &str, path: &str) -> u16 {
    let mut config = kube::Config::new(url.parse().expect("a URL"));
    config.accept_invalid_certs = true;
    let client = capstan_runtime::client::client(config).expect("a client");
    let req = http::Request::get(path)
        .body(Vec::new())
        .expect("a request");
    match client.request::<serde_json::Value>(req).await {
        Ok(_) => 200,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("no HTTP answer: {e}"),
    }
}

struct Figures {
    creates_per_sec: f64,
    get_p50: Duration,
    get_p99: Duration,
}

/// `n` pod creates one after another, then `n` GETs of them, one after another.
async fn measure(client: kube::Client, ns: &str, n: usize) -> Figures {
    let pods: Api<Pod> = Api::namespaced(client, ns);
    // Warm up (connection, caches) outside the measurement.
    pods.create(&PostParams::default(), &pod("warm"))
        .await
        .expect("the warm-up create");
    pods.get("warm").await.expect("the warm-up get");
    let started = Instant::now();
    for i in 0..n {
        pods.create(&PostParams::default(), &pod(&format!("p-{i}")))
            .await
            .expect("a create");
    }
    let creates_per_sec = n as f64 / started.elapsed().as_secs_f64();
    let mut gets = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        let p = pods.get(&format!("p-{i}")).await.expect("a get");
        gets.push(t.elapsed());
        assert_eq!(p.metadata.name, Some(format!("p-{i}")));
    }
    gets.sort();
    let at = |q: f64| gets[((gets.len() as f64 * q).ceil() as usize).clamp(1, gets.len()) - 1];
    Figures {
        creates_per_sec,
        get_p50: at(0.50),
        get_p99: at(0.99),
    }
}

/// Pod creates/s and GET p50/p99, over HTTPS (TLS on loopback, HTTP/2, client certificate)
/// (also with TCP_NODELAY on the client connection) and in process, against the same server
/// in one run. `INPROCESS_BENCH_PODS` sets the
/// number of pods per transport (default 200).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_in_process_side_by_side() {
    let n: usize = std::env::var("INPROCESS_BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(200);
    let c = cluster().await;
    let server = https(&c).await;
    let admin = ("kubernetes-admin", &["system:masters"][..]);
    let mut rows = Vec::new();
    for (name, ns, tcp) in [
        ("HTTPS", "over-https", Some(Tcp::Runtime)),
        ("HTTPS+nodelay", "over-https-nodelay", Some(Tcp::NoDelay)),
        ("in-process", "in-process", None),
    ] {
        c.namespace(ns).await;
        let client = match tcp {
            Some(tcp) => https_client(&c, &server.url, admin.0, admin.1, tcp).await,
            None => c.in_process.client_as(admin.0, admin.1),
        };
        rows.push((name, ns, measure(client, ns, n).await));
    }
    let profile = if cfg!(debug_assertions) {
        "debug build"
    } else {
        "release build"
    };
    println!(
        "transport      pod creates/s  GET p50    GET p99    ({n} pods each, sequential, {profile})"
    );
    for (name, _, f) in &rows {
        println!(
            "{name:<14} {:>13.0}  {:>8.3}ms {:>8.3}ms",
            f.creates_per_sec,
            f.get_p50.as_secs_f64() * 1e3,
            f.get_p99.as_secs_f64() * 1e3
        );
    }
    // Both transports wrote every pod.
    for (_, ns, _) in &rows {
        let listed = Api::<Pod>::namespaced(c.admin(), ns)
            .list(&ListParams::default())
            .await
            .expect("a list");
        assert_eq!(listed.items.len(), n + 1, "pods in {ns}");
    }
}
