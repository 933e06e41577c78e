//! Unit tests: probe workers against a fake runtime (paused clock), and the HTTP, TCP and
//! gRPC probers against local servers.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use capstan_cri::v1;
use capstan_cri::{Result as CriResult, Status};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

type ExecFn = dyn Fn(&[String]) -> CriResult<v1::ExecSyncResponse> + Send + Sync;

/// A runtime whose ExecSync answers through a function and records every command.
struct FakeRuntime {
    exec: Mutex<Box<ExecFn>>,
    calls: Mutex<Vec<Vec<String>>>,
    sandbox_ip: String,
}

impl FakeRuntime {
    fn new(
        f: impl Fn(&[String]) -> CriResult<v1::ExecSyncResponse> + Send + Sync + 'static,
    ) -> Arc<FakeRuntime> {
        Arc::new(FakeRuntime {
            exec: Mutex::new(Box::new(f)),
            calls: Mutex::new(Vec::new()),
            sandbox_ip: String::new(),
        })
    }

    fn set(
        &self,
        f: impl Fn(&[String]) -> CriResult<v1::ExecSyncResponse> + Send + Sync + 'static,
    ) {
        *self.exec.lock() = Box::new(f);
    }

    fn count(&self, first: &str) -> usize {
        self.calls
            .lock()
            .iter()
            .filter(|c| c.first().map(String::as_str) == Some(first))
            .count()
    }
}

fn exit(code: i32, stdout: &str) -> CriResult<v1::ExecSyncResponse> {
    Ok(v1::ExecSyncResponse {
        stdout: stdout.as_bytes().to_vec(),
        stderr: Vec::new(),
        exit_code: code,
    })
}

/// The methods the tests do not use, written out the way `async_trait` expands them (an
/// `async fn` made by a macro inside the impl would not be rewritten).
macro_rules! unimplemented_methods {
    ($($method:ident($req:ident) -> $resp:ident;)*) => {
        $(
            fn $method<'life0, 'async_trait>(
                &'life0 self,
                _: v1::$req,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = CriResult<v1::$resp>> + Send + 'async_trait>,
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
    async fn exec_sync(&self, req: v1::ExecSyncRequest) -> CriResult<v1::ExecSyncResponse> {
        self.calls.lock().push(req.cmd.clone());
        let f = self.exec.lock();
        f(&req.cmd)
    }
    async fn container_status(
        &self,
        req: v1::ContainerStatusRequest,
    ) -> CriResult<v1::ContainerStatusResponse> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0);
        Ok(v1::ContainerStatusResponse {
            status: Some(v1::ContainerStatus {
                id: req.container_id,
                started_at: now,
                ..Default::default()
            }),
            ..Default::default()
        })
    }
    async fn list_containers(
        &self,
        req: v1::ListContainersRequest,
    ) -> CriResult<v1::ListContainersResponse> {
        let id = req.filter.map(|f| f.id).unwrap_or_default();
        Ok(v1::ListContainersResponse {
            containers: vec![v1::Container {
                id,
                pod_sandbox_id: "sb".into(),
                ..Default::default()
            }],
        })
    }
    async fn pod_sandbox_status(
        &self,
        _: v1::PodSandboxStatusRequest,
    ) -> CriResult<v1::PodSandboxStatusResponse> {
        Ok(v1::PodSandboxStatusResponse {
            status: Some(v1::PodSandboxStatus {
                network: Some(v1::PodSandboxNetworkStatus {
                    ip: self.sandbox_ip.clone(),
                    additional_ips: Vec::new(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }
    unimplemented_methods! {
        version(VersionRequest) -> VersionResponse;
        run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse;
        stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse;
        remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse;
        list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse;
        create_container(CreateContainerRequest) -> CreateContainerResponse;
        start_container(StartContainerRequest) -> StartContainerResponse;
        stop_container(StopContainerRequest) -> StopContainerResponse;
        remove_container(RemoveContainerRequest) -> RemoveContainerResponse;
        update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse;
        reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse;
        exec(ExecRequest) -> ExecResponse;
        attach(AttachRequest) -> AttachResponse;
        port_forward(PortForwardRequest) -> PortForwardResponse;
        container_stats(ContainerStatsRequest) -> ContainerStatsResponse;
        list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse;
        pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse;
        list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse;
        update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse;
        status(StatusRequest) -> StatusResponse;
        list_images(ListImagesRequest) -> ListImagesResponse;
        image_status(ImageStatusRequest) -> ImageStatusResponse;
        pull_image(PullImageRequest) -> PullImageResponse;
        remove_image(RemoveImageRequest) -> RemoveImageResponse;
        image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse;
    }
}

fn kubelet(rt: Arc<FakeRuntime>) -> Arc<Kubelet> {
    // Nothing listens there: the tests never reach the API (events are captured).
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    let client = kube::Client::try_from(config).expect("client");
    Kubelet::new(client, rt, crate::Options::default())
}

fn pod(container: serde_json::Value, restart_policy: &str) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"restartPolicy": restart_policy, "containers": [container]},
        }))
        .expect("pod"),
    )
}

/// The probers plus the pods they asked to resync. The prober started long ago, so first
/// probes are not spread over a period.
fn probes(rt: Arc<FakeRuntime>) -> (Arc<Probes>, Arc<Mutex<Vec<String>>>, Arc<Kubelet>) {
    let k = kubelet(rt);
    let synced = Arc::new(Mutex::new(Vec::new()));
    let s = synced.clone();
    let born = tokio::time::Instant::now()
        .checked_sub(Duration::from_secs(3600))
        .unwrap_or_else(tokio::time::Instant::now);
    let p = Probes::born_at(
        k.clone(),
        Arc::new(move |uid: &str| s.lock().push(uid.to_string())),
        born,
    );
    (p, synced, k)
}

/// Sleep `n` probe seconds (shortened in tests).
async fn wait(n: u32) {
    tokio::time::sleep(SECOND * n).await;
}

/// Poll `f` until it holds, for at most `n` probe seconds.
async fn wait_for(what: &str, n: u32, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + SECOND * n;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn liveness_fails_after_failure_threshold_then_holds() {
    let rt = FakeRuntime::new(|_| exit(1, "cat: can't open '/tmp/healthy'\n"));
    let (p, synced, _k) = probes(rt.clone());
    let pod = pod(
        serde_json::json!({"name": "c", "image": "i", "livenessProbe": {
            "exec": {"command": ["cat", "/tmp/healthy"]},
            "periodSeconds": 2, "failureThreshold": 3, "terminationGracePeriodSeconds": 7}}),
        "Always",
    );
    p.container_started(&pod, "c", "cid1", Some("10.0.0.5"));
    assert!(p.ready("cid1"), "no readiness probe: ready once started");
    assert!(p.failed("cid1").is_none());
    wait_for("the first probe", 5, || rt.count("cat") >= 1).await;
    wait(1).await;
    assert!(
        p.failed("cid1").is_none(),
        "one failure is below the threshold"
    );
    assert!(synced.lock().is_empty());
    wait_for("the liveness failure", 20, || p.failed("cid1").is_some()).await;
    assert_eq!(
        p.failed("cid1").as_deref(),
        Some("Container c failed liveness probe, will be restarted")
    );
    assert_eq!(p.failed_grace_period("cid1"), Some(7));
    assert_eq!(synced.lock().as_slice(), ["u1"], "one change, one resync");
    assert_eq!(rt.count("cat"), 3);
    // On hold: no more probes until a new container.
    wait(8).await;
    assert_eq!(rt.count("cat"), 3);
    let events = p.events();
    assert_eq!(events.len(), 3);
    assert_eq!(
        events[0],
        (
            "Warning".into(),
            "Unhealthy".into(),
            "Liveness probe failed: cat: can't open '/tmp/healthy'\n".into()
        )
    );
    // The replacement container starts afresh.
    p.container_stopped("cid1");
    assert!(p.failed("cid1").is_none());
    rt.set(|_| exit(0, ""));
    p.container_started(&pod, "c", "cid2", Some("10.0.0.5"));
    wait_for("probes of the new container", 10, || rt.count("cat") >= 6).await;
    assert!(p.failed("cid2").is_none());
    assert_eq!(synced.lock().len(), 1, "success was the standing result");
}

#[tokio::test]
async fn restart_policy_never_and_sidecars_change_the_kill_message() {
    let rt = FakeRuntime::new(|_| exit(1, ""));
    let (p, _, _k) = probes(rt.clone());
    let spec = serde_json::json!({"name": "c", "image": "i", "livenessProbe": {
        "exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 1}});
    p.container_started(&pod(spec, "Never"), "c", "cid", None);
    wait_for("the liveness failure", 10, || p.failed("cid").is_some()).await;
    assert_eq!(
        p.failed("cid").as_deref(),
        Some("Container c failed liveness probe")
    );
    assert_eq!(p.failed_grace_period("cid"), None);

    let sidecar: Arc<Pod> = Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u2"},
            "spec": {"restartPolicy": "Never",
                "initContainers": [{"name": "side", "image": "i", "restartPolicy": "Always",
                    "startupProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1,
                        "failureThreshold": 2}}],
                "containers": [{"name": "c", "image": "i"}]},
        }))
        .expect("pod"),
    );
    p.container_started(&sidecar, "side", "side1", None);
    assert!(!p.started("side1"));
    assert!(!p.ready("side1"));
    wait_for("the startup failure", 10, || p.failed("side1").is_some()).await;
    assert_eq!(
        p.failed("side1").as_deref(),
        Some("Init container side failed startup probe")
    );
    assert!(!p.started("side1"));
    p.pod_removed("u2");
    assert!(p.failed("side1").is_none());
    assert!(
        p.started("side1"),
        "unknown containers have no startup probe"
    );
    assert!(p.failed("cid").is_some(), "other pods keep their probers");
}

#[tokio::test]
async fn readiness_starts_false_and_needs_success_threshold() {
    let healthy = Arc::new(AtomicUsize::new(0));
    let h = healthy.clone();
    let rt = FakeRuntime::new(move |_| {
        if h.load(Ordering::SeqCst) == 1 {
            exit(0, "ok")
        } else {
            exit(1, "")
        }
    });
    let (p, synced, _k) = probes(rt.clone());
    let pod = pod(
        serde_json::json!({"name": "c", "image": "i", "readinessProbe": {
            "exec": {"command": ["test", "-f", "/tmp/ready"]},
            "periodSeconds": 3, "successThreshold": 2, "failureThreshold": 1}}),
        "Always",
    );
    p.container_started(&pod, "c", "cid", None);
    assert!(p.started("cid"));
    wait_for("two probes", 10, || rt.count("test") >= 2).await;
    assert!(
        synced.lock().is_empty(),
        "failure was already the standing result"
    );
    assert_eq!(
        p.result("cid", ProbeType::Readiness),
        Some(ProbeResult::Failure)
    );
    healthy.store(1, Ordering::SeqCst);
    let before = rt.count("test");
    wait_for("one success", 10, || rt.count("test") == before + 1).await;
    assert_eq!(
        p.result("cid", ProbeType::Readiness),
        Some(ProbeResult::Failure),
        "one success is not enough with successThreshold 2"
    );
    wait_for("readiness", 10, || {
        p.result("cid", ProbeType::Readiness) == Some(ProbeResult::Success)
    })
    .await;
    assert!(p.ready("cid"));
    assert_eq!(rt.count("test"), before + 2);
    assert_eq!(synced.lock().as_slice(), ["u1"]);
    // Failing again flips it back (failureThreshold 1) and resyncs again.
    healthy.store(0, Ordering::SeqCst);
    wait_for("unreadiness", 10, || !p.ready("cid")).await;
    assert_eq!(synced.lock().len(), 2);
    let events = p.events();
    assert!(!events.is_empty());
    assert!(events
        .iter()
        .all(|e| e.1 == "Unhealthy" && e.2 == "Readiness probe failed: "));
}

#[tokio::test]
async fn ready_runs_a_failing_readiness_probe_at_once() {
    let healthy = Arc::new(AtomicUsize::new(0));
    let h = healthy.clone();
    let rt = FakeRuntime::new(move |_| exit(if h.load(Ordering::SeqCst) == 1 { 0 } else { 1 }, ""));
    let (p, synced, _k) = probes(rt.clone());
    let pod = pod(
        serde_json::json!({"name": "c", "image": "i", "readinessProbe": {
            "exec": {"command": ["true"]}, "periodSeconds": 300}}),
        "Always",
    );
    p.container_started(&pod, "c", "cid", None);
    wait_for("the first probe", 5, || rt.count("true") == 1).await;
    // Asking for readiness of a container that is not ready probes it now, not in 300 s.
    assert!(!p.ready("cid"));
    wait_for("a probe on demand", 5, || rt.count("true") == 2).await;
    healthy.store(1, Ordering::SeqCst);
    assert!(!p.ready("cid"));
    wait_for("readiness", 5, || {
        p.result("cid", ProbeType::Readiness) == Some(ProbeResult::Success)
    })
    .await;
    assert_eq!(rt.count("true"), 3);
    assert!(p.ready("cid"));
    assert_eq!(synced.lock().as_slice(), ["u1"]);
    // A ready container is not probed out of turn.
    wait(2).await;
    assert_eq!(rt.count("true"), 3);
}

#[tokio::test]
async fn startup_gates_liveness_and_readiness() {
    let opened = Arc::new(AtomicUsize::new(0));
    let o = opened.clone();
    let rt = FakeRuntime::new(move |cmd| match cmd.first().map(String::as_str) {
        Some("startup") if o.load(Ordering::SeqCst) == 1 => exit(0, ""),
        Some("startup") => exit(1, "starting"),
        _ => exit(0, ""),
    });
    let (p, synced, _k) = probes(rt.clone());
    let pod = pod(
        serde_json::json!({"name": "c", "image": "i",
            "startupProbe": {"exec": {"command": ["startup"]}, "periodSeconds": 1, "failureThreshold": 30},
            "livenessProbe": {"exec": {"command": ["live"]}, "periodSeconds": 1},
            "readinessProbe": {"exec": {"command": ["ready"]}, "periodSeconds": 1}}),
        "Always",
    );
    p.container_started(&pod, "c", "cid", None);
    assert!(!p.started("cid"));
    assert!(!p.ready("cid"), "not ready before started");
    wait_for("three startup probes", 10, || rt.count("startup") >= 3).await;
    assert!(!p.started("cid"));
    assert_eq!(rt.count("live"), 0, "liveness waits for startup");
    assert_eq!(rt.count("ready"), 0, "readiness waits for startup");
    assert!(synced.lock().is_empty());
    opened.store(1, Ordering::SeqCst);
    wait_for("started", 10, || p.started("cid")).await;
    wait_for("liveness and readiness", 10, || {
        rt.count("live") >= 1 && rt.count("ready") >= 1 && p.ready("cid")
    })
    .await;
    let startups = rt.count("startup");
    wait(3).await;
    assert_eq!(
        rt.count("startup"),
        startups,
        "startup stops once it succeeded"
    );
    assert!(
        synced.lock().len() >= 2,
        "startup and readiness changes resync"
    );
    assert_eq!(
        p.events()[0],
        (
            "Warning".into(),
            "Unhealthy".into(),
            "Startup probe failed: starting".into()
        )
    );
}

#[tokio::test]
async fn initial_delay_and_timeouts() {
    let rt = FakeRuntime::new(|_| {
        Err(Status::deadline_exceeded(
            "failed to exec in container: timeout 1s exceeded: context deadline exceeded",
        ))
    });
    let (p, _, _k) = probes(rt.clone());
    let pod = pod(
        serde_json::json!({"name": "c", "image": "i", "livenessProbe": {
            "exec": {"command": ["sleep", "5"]}, "initialDelaySeconds": 8,
            "periodSeconds": 1, "failureThreshold": 1}}),
        "Always",
    );
    p.container_started(&pod, "c", "cid", None);
    wait(6).await;
    assert_eq!(rt.count("sleep"), 0, "nothing before initialDelaySeconds");
    wait_for("the probe after the delay", 10, || rt.count("sleep") == 1).await;
    wait_for("the failure", 5, || p.failed("cid").is_some()).await;
    assert_eq!(
        p.events()[0].2,
        "Liveness probe failed: command timed out: \"sleep 5\" timed out after 1s"
    );
}

#[tokio::test]
async fn probe_errors_are_reported_and_do_not_count() {
    let rt = FakeRuntime::new(|_| Err(Status::not_found("container not found")));
    let (p, synced, _k) = probes(rt.clone());
    let pod = pod(
        serde_json::json!({"name": "c", "image": "i",
            "livenessProbe": {"exec": {"command": ["x"]}, "periodSeconds": 1, "failureThreshold": 1},
            "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 1}}),
        "Always",
    );
    p.container_started(&pod, "c", "cid", Some("10.0.0.9"));
    wait_for("two probes", 10, || rt.count("x") >= 6).await;
    assert!(p.failed("cid").is_none(), "errors are thrown away");
    assert!(synced.lock().is_empty());
    let events = p.events();
    assert!(events.iter().any(|e| e.2
        == "Liveness probe errored and resulted in unknown state: rpc error: code = NotFound desc = container not found"));
    assert!(events.iter().any(|e| e.2
        == "Readiness probe errored and resulted in unknown state: strconv.Atoi: parsing \"http\": invalid syntax"));
    // Each error is retried three times at once, and makes one event.
    let n = rt.count("x");
    let liveness_events = events
        .iter()
        .filter(|e| e.2.starts_with("Liveness"))
        .count();
    assert!(
        n == 3 * liveness_events || n == 3 * liveness_events + 3 || n + 3 == 3 * liveness_events
    );
}

#[tokio::test]
async fn deletion_quiets_liveness() {
    let rt = FakeRuntime::new(|_| exit(1, ""));
    let (p, _, k) = probes(rt.clone());
    let mut deleted: Pod = (*pod(
        serde_json::json!({"name": "c", "image": "i", "livenessProbe": {
            "exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 1}}),
        "Always",
    ))
    .clone();
    deleted.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let deleted = Arc::new(deleted);
    let events = futures::stream::iter(vec![Ok(kube::runtime::watcher::Event::Apply(
        (*deleted).clone(),
    ))]);
    k.pods.clone().run(events, None).await;
    p.container_started(&deleted, "c", "cid", None);
    wait(4).await;
    assert_eq!(rt.count("false"), 0);
    assert!(p.failed("cid").is_none());
    assert_eq!(
        p.result("cid", ProbeType::Liveness),
        Some(ProbeResult::Success)
    );
}

#[test]
fn ports_resolve_by_number_name_or_numeric_string() {
    let c: Container = serde_json::from_value(serde_json::json!({
        "name": "c", "ports": [{"name": "http", "containerPort": 8080}]
    }))
    .expect("container");
    assert_eq!(prober::resolve_port(&IntOrString::Int(80), &c), Ok(80));
    assert_eq!(
        prober::resolve_port(&IntOrString::String("http".into()), &c),
        Ok(8080)
    );
    assert_eq!(
        prober::resolve_port(&IntOrString::String("81".into()), &c),
        Ok(81)
    );
    assert_eq!(
        prober::resolve_port(&IntOrString::String("grpc".into()), &c),
        Err("strconv.Atoi: parsing \"grpc\": invalid syntax".into())
    );
    assert_eq!(
        prober::resolve_port(&IntOrString::Int(0), &c),
        Err("invalid port number: 0".into())
    );
    assert_eq!(
        prober::resolve_port(&IntOrString::Int(70000), &c),
        Err("invalid port number: 70000".into())
    );
}

// ---- HTTP ----

/// A tiny HTTP/1.1 server: `respond(path)` gives the raw response (None: never answer).
/// Returns its port and the request heads it saw.
async fn http_server(
    respond: impl Fn(&str, u16) -> Option<String> + Send + Sync + 'static,
) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let respond = Arc::new(respond);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let s = s.clone();
            let respond = respond.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                s.lock().push(head);
                match respond(&path, port) {
                    Some(r) => {
                        let _ = conn.write_all(r.as_bytes()).await;
                        let _ = conn.shutdown().await;
                    }
                    None => tokio::time::sleep(Duration::from_secs(30)).await,
                }
            });
        }
    });
    (port, seen)
}

fn response(code: u16, extra: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {code} X\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )
}

async fn http_probe(
    get: serde_json::Value,
    timeout: u64,
) -> std::result::Result<Outcome, ProbeError> {
    let c: Container = serde_json::from_value(serde_json::json!({
        "name": "c", "ports": [{"name": "web", "containerPort": get["port"]}]
    }))
    .unwrap_or_default();
    let get: k8s_openapi::api::core::v1::HTTPGetAction =
        serde_json::from_value(get).expect("httpGet");
    let (url, headers, host) =
        prober::http_request(&get, &c, "127.0.0.1", "probe").expect("request");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    prober::http_outcome(net::get(url, &headers, host.as_deref(), Some(deadline)).await)
}

#[tokio::test]
async fn http_probe_maps_status_codes_and_follows_local_redirects() {
    let (port, seen) = http_server(|path, port| {
        Some(match path {
            "/ok" => response(200, "", "fine"),
            "/fail" => response(500, "", "broken"),
            "/bad" => response(404, "", ""),
            "/moved" => response(302, "Location: /ok\r\n", ""),
            "/away" => response(
                301,
                &format!("Location: http://localhost.invalid:{port}/ok\r\n"),
                "gone",
            ),
            "/loop" => response(302, "Location: /loop\r\n", ""),
            "/notmod" => response(304, "", ""),
            _ => response(200, "", ""),
        })
    })
    .await;
    let probe = |path: &str| serde_json::json!({"path": path, "port": port});
    assert_eq!(
        http_probe(probe("/ok"), 5).await,
        Ok(Outcome::Success("fine".into()))
    );
    assert_eq!(
        http_probe(probe("/fail"), 5).await,
        Ok(Outcome::Failure(
            "HTTP probe failed with statuscode: 500".into()
        ))
    );
    assert_eq!(
        http_probe(probe("/bad"), 5).await,
        Ok(Outcome::Failure(
            "HTTP probe failed with statuscode: 404".into()
        ))
    );
    assert_eq!(
        http_probe(probe("/moved"), 5).await,
        Ok(Outcome::Success("fine".into()))
    );
    assert_eq!(
        http_probe(probe("/away"), 5).await,
        Ok(Outcome::Warning(
            "Probe terminated redirects, Response body: gone".into()
        ))
    );
    assert_eq!(
        http_probe(probe("/notmod"), 5).await,
        Ok(Outcome::Warning(
            "Probe terminated redirects, Response body: ".into()
        ))
    );
    assert_eq!(
        http_probe(probe("/loop"), 5).await,
        Ok(Outcome::Failure(format!(
            "Get \"http://127.0.0.1:{port}/loop\": stopped after 10 redirects"
        )))
    );
    let heads = seen.lock().clone();
    assert_eq!(
        heads.iter().filter(|h| h.starts_with("GET /loop ")).count(),
        10
    );
    let first = &heads[0];
    assert!(first.starts_with("GET /ok HTTP/1.1\r\n"), "{first}");
    let lower = first.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("host: 127.0.0.1:{port}\r\n")),
        "{first}"
    );
    assert!(lower.contains("user-agent: kube-probe/1.32\r\n"), "{first}");
    assert!(lower.contains("accept: */*\r\n"), "{first}");
    assert!(lower.contains("connection: close\r\n"), "{first}");
}

#[tokio::test]
async fn http_probe_headers_named_ports_and_errors() {
    let (port, seen) = http_server(|path, _| match path {
        "/slow" => None,
        _ => Some(response(200, "", "")),
    })
    .await;
    let get = serde_json::json!({"path": "healthz", "port": port, "httpHeaders": [
        {"name": "X-Custom", "value": "yes"},
        {"name": "Host", "value": "example.test"},
        {"name": "user-agent", "value": "mine"},
        {"name": "Accept", "value": ""}]});
    assert!(matches!(
        http_probe(get.clone(), 5).await,
        Ok(Outcome::Success(_))
    ));
    let head = seen
        .lock()
        .last()
        .cloned()
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(head.starts_with("get /healthz http/1.1"), "{head}");
    assert!(head.contains("x-custom: yes\r\n"), "{head}");
    assert!(head.contains("host: example.test\r\n"), "{head}");
    assert!(head.contains("user-agent: mine\r\n"), "{head}");
    assert!(!head.contains("kube-probe"), "{head}");
    assert!(!head.contains("accept:"), "{head}");

    // Named ports.
    let c: Container = serde_json::from_value(serde_json::json!({
        "name": "c", "ports": [{"name": "web", "containerPort": port}]
    }))
    .expect("container");
    let named: k8s_openapi::api::core::v1::HTTPGetAction =
        serde_json::from_value(serde_json::json!({"port": "web", "scheme": "HTTP"})).expect("get");
    let (url, _, _) = prober::http_request(&named, &c, "10.1.2.3", "probe").expect("request");
    assert_eq!(url.text(), format!("http://10.1.2.3:{port}"));

    // Timeout while waiting for headers.
    let slow = serde_json::json!({"path": "/slow", "port": port});
    assert_eq!(
        http_probe(slow, 1).await,
        Ok(Outcome::Failure(format!(
            "Get \"http://127.0.0.1:{port}/slow\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        )))
    );

    // Connection refused.
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dead = closed.local_addr().expect("addr").port();
    drop(closed);
    assert_eq!(
        http_probe(serde_json::json!({"path": "/", "port": dead}), 5).await,
        Ok(Outcome::Failure(format!(
            "Get \"http://127.0.0.1:{dead}/\": dial tcp 127.0.0.1:{dead}: connect: connection refused"
        )))
    );
}

#[tokio::test]
async fn https_probe_skips_certificate_checks() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
    let key =
        rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(conn).await else {
                    return;
                };
                let mut buf = [0u8; 2048];
                let _ = tls.read(&mut buf).await;
                let _ = tls.write_all(response(200, "", "secure").as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    let get = serde_json::json!({"path": "/", "port": port, "scheme": "HTTPS"});
    assert_eq!(
        http_probe(get, 5).await,
        Ok(Outcome::Success("secure".into()))
    );

    // A plain HTTP server behind an https probe answers the ClientHello with a 400.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let plain = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = [0u8; 2048];
            let _ = conn.read(&mut buf).await;
            let _ = conn.write_all(response(400, "", "").as_bytes()).await;
            let _ = conn.shutdown().await;
        }
    });
    let get = serde_json::json!({"path": "/", "port": plain, "scheme": "HTTPS"});
    assert_eq!(
        http_probe(get, 5).await,
        Ok(Outcome::Failure(format!(
            "Get \"https://127.0.0.1:{plain}/\": http: server gave HTTP response to HTTPS client"
        )))
    );
}

#[tokio::test]
async fn tcp_probe_connects_or_reports_go_errors() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    assert_eq!(
        net::tcp_check("127.0.0.1", port, Duration::from_secs(1)).await,
        Ok(())
    );
    drop(listener);
    assert_eq!(
        net::tcp_check("127.0.0.1", port, Duration::from_secs(1)).await,
        Err(format!(
            "dial tcp 127.0.0.1:{port}: connect: connection refused"
        ))
    );
}

// ---- gRPC ----

#[test]
fn grpc_health_messages_encode_and_decode() {
    assert_eq!(net::encode_health_request(""), Vec::<u8>::new());
    assert_eq!(net::encode_health_request("db"), vec![0x0a, 2, b'd', b'b']);
    let long = "s".repeat(200);
    let enc = net::encode_health_request(&long);
    assert_eq!(&enc[..3], &[0x0a, 0xc8, 0x01]);
    assert_eq!(net::decode_health_response(&[0x08, 0x01]), Ok(1));
    assert_eq!(net::decode_health_response(&[]), Ok(0));
    // Unknown fields are skipped.
    assert_eq!(
        net::decode_health_response(&[0x12, 0x02, b'h', b'i', 0x08, 0x02, 0x1d, 0, 0, 0, 0]),
        Ok(2)
    );
    assert!(net::decode_health_response(&[0x08]).is_err());
    assert!(net::decode_health_response(&[0x12, 0x05, 1]).is_err());
    let framed = net::grpc_frame(&[0x08, 0x01]);
    assert_eq!(framed, vec![0, 0, 0, 0, 2, 0x08, 0x01]);
    assert_eq!(net::grpc_unframe(&framed), Ok(&[0x08u8, 0x01][..]));
    assert!(net::grpc_unframe(&[0, 0, 0]).is_err());
    assert_eq!(net::serving_status_name(2), "NOT_SERVING");
}

type GrpcBody = http_body_util::StreamBody<
    futures::stream::Iter<
        std::vec::IntoIter<std::result::Result<hyper::body::Frame<Bytes>, Infallible>>,
    >,
>;

/// A gRPC health server: services map to serving status; others get NotFound.
async fn grpc_server(statuses: HashMap<String, u64>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let statuses = Arc::new(statuses);
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let statuses = statuses.clone();
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let statuses = statuses.clone();
                    async move {
                        let path = req.uri().path().to_string();
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let mut frames = Vec::new();
                        let mut trailers = hyper::HeaderMap::new();
                        if path != "/grpc.health.v1.Health/Check" {
                            trailers.insert("grpc-status", "12".parse().expect("value"));
                            trailers.insert(
                                "grpc-message",
                                "unknown%20service".parse().expect("value"),
                            );
                        } else {
                            let msg = net::grpc_unframe(&body).unwrap_or(&[]);
                            let service = if msg.len() > 2 {
                                String::from_utf8_lossy(&msg[2..]).into_owned()
                            } else {
                                String::new()
                            };
                            match statuses.get(&service) {
                                Some(s) => {
                                    frames.push(Ok(hyper::body::Frame::data(Bytes::from(
                                        net::grpc_frame(&[0x08, *s as u8]),
                                    ))));
                                    trailers.insert("grpc-status", "0".parse().expect("value"));
                                }
                                None => {
                                    trailers.insert("grpc-status", "5".parse().expect("value"));
                                    trailers.insert(
                                        "grpc-message",
                                        "unknown service".parse().expect("value"),
                                    );
                                }
                            }
                        }
                        frames.push(Ok(hyper::body::Frame::trailers(trailers)));
                        let body: GrpcBody =
                            http_body_util::StreamBody::new(futures::stream::iter(frames));
                        let resp = hyper::Response::builder()
                            .header("content-type", "application/grpc")
                            .body(body)
                            .expect("response");
                        Ok::<_, Infallible>(resp)
                    }
                });
            tokio::spawn(async move {
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(conn), svc)
                        .await;
            });
        }
    });
    port
}

#[tokio::test]
async fn grpc_probe_against_a_health_server() {
    let port = grpc_server(HashMap::from([("".to_string(), 1), ("db".to_string(), 2)])).await;
    let t = Duration::from_secs(2);
    let check = |service: &'static str| async move {
        prober::grpc_outcome(
            net::grpc_check("127.0.0.1", port, service, t).await,
            "127.0.0.1",
            port,
            t,
        )
    };
    assert_eq!(check("").await, Outcome::Success("service healthy".into()));
    assert_eq!(
        check("db").await,
        Outcome::Failure("service unhealthy (responded with \"NOT_SERVING\")".into())
    );
    assert_eq!(
        check("nope").await,
        Outcome::Failure(
            "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"
                .into()
        )
    );
    // Nothing listening: grpc-go keeps dialing until the timeout.
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dead = closed.local_addr().expect("addr").port();
    drop(closed);
    let t1 = Duration::from_secs(1);
    let start = std::time::Instant::now();
    let o = prober::grpc_outcome(
        net::grpc_check("127.0.0.1", dead, "", t1).await,
        "127.0.0.1",
        dead,
        t1,
    );
    assert!(start.elapsed() >= Duration::from_millis(900));
    assert_eq!(
        o,
        Outcome::Failure(format!(
            "timeout: failed to connect service \"127.0.0.1:{dead}\" within 1s: context deadline exceeded"
        ))
    );
}

// ---- hooks ----

#[tokio::test]
async fn exec_hook_failure_message_and_sleep_and_tcp() {
    let rt = FakeRuntime::new(|cmd| match cmd.last().map(String::as_str) {
        Some("exit 3") => Ok(v1::ExecSyncResponse {
            stdout: b"out\n".to_vec(),
            stderr: b"err\n".to_vec(),
            exit_code: 3,
        }),
        _ => exit(0, ""),
    });
    let k = kubelet(rt.clone());
    let pod = pod(serde_json::json!({"name": "c", "image": "i"}), "Always");
    let handler =
        |v: serde_json::Value| -> LifecycleHandler { serde_json::from_value(v).expect("handler") };
    assert_eq!(
        run_hook(
            &k,
            &pod,
            "c",
            "cid",
            &handler(serde_json::json!({"exec": {"command": ["sh", "-c", "true"]}}))
        )
        .await,
        Ok(())
    );
    assert_eq!(
        run_hook(&k, &pod, "c", "cid", &handler(serde_json::json!({"exec": {"command": ["sh", "-c", "exit 3"]}}))).await,
        Err("Exec lifecycle hook ([sh -c exit 3]) for Container \"c\" in Pod \"p_ns(u1)\" failed - error: command 'sh -c exit 3' exited with 3: err\n, message: \"out\\nerr\\n\"".into())
    );
    let start = std::time::Instant::now();
    assert_eq!(
        run_hook(
            &k,
            &pod,
            "c",
            "cid",
            &handler(serde_json::json!({"sleep": {"seconds": 1}}))
        )
        .await,
        Ok(())
    );
    assert!(start.elapsed() >= Duration::from_millis(950));
    assert_eq!(
        run_hook(&k, &pod, "c", "cid", &handler(serde_json::json!({"tcpSocket": {"port": 80}}))).await,
        Err("Cannot run handler: invalid handler: &LifecycleHandler{Exec:nil,HTTPGet:nil,TCPSocket:&TCPSocketAction{Port:{0 80 },Host:,},Sleep:nil,}".into())
    );
}

#[tokio::test]
async fn http_hook_ignores_status_and_reports_request_errors() {
    let (port, seen) = http_server(|_, _| Some(response(500, "", "no"))).await;
    let mut rt = FakeRuntime::new(|_| exit(0, ""));
    Arc::get_mut(&mut rt).expect("unique").sandbox_ip = "127.0.0.1".into();
    let k = kubelet(rt);
    let pod = pod(serde_json::json!({"name": "c", "image": "i"}), "Always");
    let h: LifecycleHandler =
        serde_json::from_value(serde_json::json!({"httpGet": {"path": "/stop", "port": port}}))
            .expect("handler");
    assert_eq!(run_hook(&k, &pod, "c", "cid", &h).await, Ok(()));
    let head = seen
        .lock()
        .last()
        .cloned()
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(head.starts_with("get /stop http/1.1"), "{head}");
    assert!(head.contains("user-agent: kube-lifecycle/1.32"), "{head}");

    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dead = closed.local_addr().expect("addr").port();
    drop(closed);
    let h: LifecycleHandler = serde_json::from_value(
        serde_json::json!({"httpGet": {"path": "/stop", "port": dead, "host": "127.0.0.1"}}),
    )
    .expect("handler");
    assert_eq!(
        run_hook(&k, &pod, "c", "cid", &h).await,
        Err(format!("HTTP lifecycle hook (/stop) for Container \"c\" in Pod \"p_ns(u1)\" failed - error: Get \"http://127.0.0.1:{dead}/stop\": dial tcp 127.0.0.1:{dead}: connect: connection refused"))
    );
}
