//! Unit tests of the pod workers against an in-memory CRI runtime.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use capstan_cri::v1 as cri;
use capstan_cri::{Runtime, Status};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
    Pod, PodSpec, PodStatus, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;

use super::actions::{compute_pod_actions, KillReason, ProbeResults};
use super::manager::{Manager, ProbeHub};
use super::runtime::{self as rt, CState, ContainerInfo, RuntimePod};
use super::status::{self, Inputs};
use super::sync::sync_runtime;
use super::util::container_hash;
use crate::{Kubelet, Options};

type R<T> = Result<T, Status>;

/// An in-memory CRI runtime.
#[derive(Default)]
struct Fake {
    s: Mutex<FakeState>,
}

#[derive(Default)]
struct FakeState {
    next: u64,
    sandboxes: BTreeMap<String, cri::PodSandboxStatus>,
    containers: BTreeMap<String, (String, cri::ContainerStatus)>,
    /// Images present: reference → (id, size).
    images: HashMap<String, (String, u64)>,
    /// Images a pull finds.
    pullable: HashSet<String>,
    /// Log of calls: "Method arg".
    calls: Vec<String>,
    /// StopContainer timeouts by container name.
    stop_timeouts: Vec<(String, i64)>,
    /// Configs of created containers by ID.
    configs: HashMap<String, cri::ContainerConfig>,
    sandbox_configs: Vec<cri::PodSandboxConfig>,
    clock: i64,
}

impl FakeState {
    fn tick(&mut self) -> i64 {
        self.clock += 1_000_000;
        self.clock
    }
}

fn matches(labels: &HashMap<String, String>, sel: &HashMap<String, String>) -> bool {
    sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl Fake {
    fn new() -> Arc<Fake> {
        let f = Fake::default();
        f.s.lock().clock = super::util::now_nanos();
        Arc::new(f)
    }

    fn add_image(&self, image: &str) {
        let mut s = self.s.lock();
        s.images
            .insert(image.into(), (format!("sha256:{}", image.len()), 1234));
    }

    fn pullable(&self, image: &str) {
        self.s.lock().pullable.insert(image.into());
    }

    /// Make the running container `name` exit with `code`.
    fn exit(&self, name: &str, code: i32) {
        let mut s = self.s.lock();
        let now = s.tick();
        for (_, c) in s.containers.values_mut() {
            if c.metadata.as_ref().map(|m| m.name.as_str()) == Some(name)
                && c.state == cri::ContainerState::ContainerRunning as i32
            {
                c.state = cri::ContainerState::ContainerExited as i32;
                c.exit_code = code;
                c.reason = if code == 0 { "Completed" } else { "Error" }.into();
                c.finished_at = now;
            }
        }
    }

    fn calls(&self) -> Vec<String> {
        self.s.lock().calls.clone()
    }

    fn count(&self, prefix: &str) -> usize {
        self.calls()
            .iter()
            .filter(|c| c.starts_with(prefix))
            .count()
    }

    fn running(&self) -> Vec<String> {
        self.s
            .lock()
            .containers
            .values()
            .filter(|(_, c)| c.state == cri::ContainerState::ContainerRunning as i32)
            .map(|(_, c)| c.metadata.clone().unwrap_or_default().name)
            .collect()
    }
}

fn unimpl<T>() -> R<T> {
    Err(Status::unimplemented("fake"))
}

#[async_trait::async_trait]
impl Runtime for Fake {
    async fn version(&self, _: cri::VersionRequest) -> R<cri::VersionResponse> {
        unimpl()
    }
    async fn run_pod_sandbox(
        &self,
        req: cri::RunPodSandboxRequest,
    ) -> R<cri::RunPodSandboxResponse> {
        let mut s = self.s.lock();
        s.next += 1;
        let id = format!("sb{}", s.next);
        let cfg = req.config.unwrap_or_default();
        let ns = cfg
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|c| c.namespace_options.clone());
        let host = ns.as_ref().map(|n| n.network) == Some(cri::NamespaceMode::Node as i32);
        let now = s.tick();
        let ip = if host {
            String::new()
        } else {
            format!("10.88.0.{}", s.next)
        };
        s.calls.push(format!("RunPodSandbox {id}"));
        s.sandbox_configs.push(cfg.clone());
        s.sandboxes.insert(
            id.clone(),
            cri::PodSandboxStatus {
                id: id.clone(),
                metadata: cfg.metadata.clone(),
                state: cri::PodSandboxState::SandboxReady as i32,
                created_at: now,
                network: Some(cri::PodSandboxNetworkStatus {
                    ip,
                    additional_ips: vec![],
                }),
                linux: Some(cri::LinuxPodSandboxStatus {
                    namespaces: Some(cri::Namespace { options: ns }),
                }),
                labels: cfg.labels.clone(),
                annotations: cfg.annotations.clone(),
                runtime_handler: String::new(),
            },
        );
        Ok(cri::RunPodSandboxResponse { pod_sandbox_id: id })
    }
    async fn stop_pod_sandbox(
        &self,
        req: cri::StopPodSandboxRequest,
    ) -> R<cri::StopPodSandboxResponse> {
        let mut s = self.s.lock();
        s.calls
            .push(format!("StopPodSandbox {}", req.pod_sandbox_id));
        let now = s.tick();
        if let Some(sb) = s.sandboxes.get_mut(&req.pod_sandbox_id) {
            sb.state = cri::PodSandboxState::SandboxNotready as i32;
        }
        for (sid, c) in s.containers.values_mut() {
            if *sid == req.pod_sandbox_id && c.state == cri::ContainerState::ContainerRunning as i32
            {
                c.state = cri::ContainerState::ContainerExited as i32;
                c.exit_code = 137;
                c.reason = "Error".into();
                c.finished_at = now;
            }
        }
        Ok(cri::StopPodSandboxResponse {})
    }
    async fn remove_pod_sandbox(
        &self,
        req: cri::RemovePodSandboxRequest,
    ) -> R<cri::RemovePodSandboxResponse> {
        let mut s = self.s.lock();
        s.calls
            .push(format!("RemovePodSandbox {}", req.pod_sandbox_id));
        s.sandboxes.remove(&req.pod_sandbox_id);
        s.containers
            .retain(|_, (sid, _)| *sid != req.pod_sandbox_id);
        Ok(cri::RemovePodSandboxResponse {})
    }
    async fn pod_sandbox_status(
        &self,
        req: cri::PodSandboxStatusRequest,
    ) -> R<cri::PodSandboxStatusResponse> {
        let s = self.s.lock();
        match s.sandboxes.get(&req.pod_sandbox_id) {
            Some(sb) => Ok(cri::PodSandboxStatusResponse {
                status: Some(sb.clone()),
                ..Default::default()
            }),
            None => Err(Status::not_found("no such sandbox")),
        }
    }
    async fn list_pod_sandbox(
        &self,
        req: cri::ListPodSandboxRequest,
    ) -> R<cri::ListPodSandboxResponse> {
        let s = self.s.lock();
        let sel = req.filter.map(|f| f.label_selector).unwrap_or_default();
        Ok(cri::ListPodSandboxResponse {
            items: s
                .sandboxes
                .values()
                .filter(|sb| matches(&sb.labels, &sel))
                .map(|sb| cri::PodSandbox {
                    id: sb.id.clone(),
                    metadata: sb.metadata.clone(),
                    state: sb.state,
                    created_at: sb.created_at,
                    labels: sb.labels.clone(),
                    annotations: sb.annotations.clone(),
                    runtime_handler: String::new(),
                })
                .collect(),
        })
    }
    async fn create_container(
        &self,
        req: cri::CreateContainerRequest,
    ) -> R<cri::CreateContainerResponse> {
        let mut s = self.s.lock();
        s.next += 1;
        let id = format!("c{}", s.next);
        let cfg = req.config.unwrap_or_default();
        let now = s.tick();
        let name = cfg.metadata.clone().unwrap_or_default().name;
        s.calls.push(format!("CreateContainer {name}"));
        let status = cri::ContainerStatus {
            id: id.clone(),
            metadata: cfg.metadata.clone(),
            state: cri::ContainerState::ContainerCreated as i32,
            created_at: now,
            image: cfg.image.clone(),
            image_ref: format!(
                "{}@sha256:feed",
                cfg.image.clone().unwrap_or_default().image
            ),
            labels: cfg.labels.clone(),
            annotations: cfg.annotations.clone(),
            mounts: cfg.mounts.clone(),
            log_path: format!(
                "{}/{}",
                req.sandbox_config
                    .map(|c| c.log_directory)
                    .unwrap_or_default(),
                cfg.log_path
            ),
            ..Default::default()
        };
        s.configs.insert(id.clone(), cfg);
        s.containers
            .insert(id.clone(), (req.pod_sandbox_id, status));
        Ok(cri::CreateContainerResponse { container_id: id })
    }
    async fn start_container(
        &self,
        req: cri::StartContainerRequest,
    ) -> R<cri::StartContainerResponse> {
        let mut s = self.s.lock();
        let now = s.tick();
        let Some((_, c)) = s.containers.get_mut(&req.container_id) else {
            return Err(Status::not_found("no such container"));
        };
        c.state = cri::ContainerState::ContainerRunning as i32;
        c.started_at = now;
        let name = c.metadata.clone().unwrap_or_default().name;
        s.calls.push(format!("StartContainer {name}"));
        Ok(cri::StartContainerResponse {})
    }
    async fn stop_container(
        &self,
        req: cri::StopContainerRequest,
    ) -> R<cri::StopContainerResponse> {
        let mut s = self.s.lock();
        let now = s.tick();
        let Some((_, c)) = s.containers.get_mut(&req.container_id) else {
            return Err(Status::not_found("no such container"));
        };
        let name = c.metadata.clone().unwrap_or_default().name;
        if c.state == cri::ContainerState::ContainerRunning as i32 {
            c.state = cri::ContainerState::ContainerExited as i32;
            c.exit_code = 143;
            c.reason = "Error".into();
            c.finished_at = now;
        }
        s.calls.push(format!("StopContainer {name}"));
        s.stop_timeouts.push((name, req.timeout));
        Ok(cri::StopContainerResponse {})
    }
    async fn remove_container(
        &self,
        req: cri::RemoveContainerRequest,
    ) -> R<cri::RemoveContainerResponse> {
        let mut s = self.s.lock();
        if let Some((_, c)) = s.containers.remove(&req.container_id) {
            let name = c.metadata.unwrap_or_default().name;
            s.calls.push(format!("RemoveContainer {name}"));
        }
        Ok(cri::RemoveContainerResponse {})
    }
    async fn list_containers(
        &self,
        req: cri::ListContainersRequest,
    ) -> R<cri::ListContainersResponse> {
        let s = self.s.lock();
        let sel = req.filter.map(|f| f.label_selector).unwrap_or_default();
        Ok(cri::ListContainersResponse {
            containers: s
                .containers
                .iter()
                .filter(|(_, (_, c))| matches(&c.labels, &sel))
                .map(|(id, (sid, c))| cri::Container {
                    id: id.clone(),
                    pod_sandbox_id: sid.clone(),
                    metadata: c.metadata.clone(),
                    image: c.image.clone(),
                    image_ref: c.image_ref.clone(),
                    state: c.state,
                    created_at: c.created_at,
                    labels: c.labels.clone(),
                    annotations: c.annotations.clone(),
                    image_id: String::new(),
                })
                .collect(),
        })
    }
    async fn container_status(
        &self,
        req: cri::ContainerStatusRequest,
    ) -> R<cri::ContainerStatusResponse> {
        let s = self.s.lock();
        match s.containers.get(&req.container_id) {
            Some((_, c)) => Ok(cri::ContainerStatusResponse {
                status: Some(c.clone()),
                ..Default::default()
            }),
            None => Err(Status::not_found("no such container")),
        }
    }
    async fn update_container_resources(
        &self,
        _: cri::UpdateContainerResourcesRequest,
    ) -> R<cri::UpdateContainerResourcesResponse> {
        unimpl()
    }
    async fn reopen_container_log(
        &self,
        _: cri::ReopenContainerLogRequest,
    ) -> R<cri::ReopenContainerLogResponse> {
        unimpl()
    }
    async fn exec_sync(&self, _: cri::ExecSyncRequest) -> R<cri::ExecSyncResponse> {
        unimpl()
    }
    async fn exec(&self, _: cri::ExecRequest) -> R<cri::ExecResponse> {
        unimpl()
    }
    async fn attach(&self, _: cri::AttachRequest) -> R<cri::AttachResponse> {
        unimpl()
    }
    async fn port_forward(&self, _: cri::PortForwardRequest) -> R<cri::PortForwardResponse> {
        unimpl()
    }
    async fn container_stats(
        &self,
        _: cri::ContainerStatsRequest,
    ) -> R<cri::ContainerStatsResponse> {
        unimpl()
    }
    async fn list_container_stats(
        &self,
        _: cri::ListContainerStatsRequest,
    ) -> R<cri::ListContainerStatsResponse> {
        unimpl()
    }
    async fn pod_sandbox_stats(
        &self,
        _: cri::PodSandboxStatsRequest,
    ) -> R<cri::PodSandboxStatsResponse> {
        unimpl()
    }
    async fn list_pod_sandbox_stats(
        &self,
        _: cri::ListPodSandboxStatsRequest,
    ) -> R<cri::ListPodSandboxStatsResponse> {
        unimpl()
    }
    async fn update_runtime_config(
        &self,
        _: cri::UpdateRuntimeConfigRequest,
    ) -> R<cri::UpdateRuntimeConfigResponse> {
        unimpl()
    }
    async fn status(&self, _: cri::StatusRequest) -> R<cri::StatusResponse> {
        unimpl()
    }
    async fn list_images(&self, _: cri::ListImagesRequest) -> R<cri::ListImagesResponse> {
        unimpl()
    }
    async fn image_status(&self, req: cri::ImageStatusRequest) -> R<cri::ImageStatusResponse> {
        let s = self.s.lock();
        let image = req.image.unwrap_or_default().image;
        let found = s
            .images
            .get(&image)
            .or_else(|| s.images.values().find(|(id, _)| *id == image));
        Ok(cri::ImageStatusResponse {
            image: found.map(|(id, size)| cri::Image {
                id: id.clone(),
                size: *size,
                ..Default::default()
            }),
            ..Default::default()
        })
    }
    async fn pull_image(&self, req: cri::PullImageRequest) -> R<cri::PullImageResponse> {
        let mut s = self.s.lock();
        let image = req.image.unwrap_or_default().image;
        s.calls.push(format!("PullImage {image}"));
        if !s.pullable.contains(&image) {
            return Err(Status::not_found(format!(
                "failed to pull and unpack image \"{image}\": not found"
            )));
        }
        let id = format!("sha256:{}", image.len());
        s.images.insert(image, (id.clone(), 1234));
        Ok(cri::PullImageResponse { image_ref: id })
    }
    async fn remove_image(&self, _: cri::RemoveImageRequest) -> R<cri::RemoveImageResponse> {
        unimpl()
    }
    async fn image_fs_info(&self, _: cri::ImageFsInfoRequest) -> R<cri::ImageFsInfoResponse> {
        unimpl()
    }
}

/// Probe results the tests set.
#[derive(Default)]
struct FakeProbes {
    unready: Mutex<HashSet<String>>,
    not_started: Mutex<HashSet<String>>,
    failed: Mutex<HashMap<String, String>>,
    started_calls: Mutex<Vec<String>>,
    stopped_calls: Mutex<Vec<String>>,
}

impl ProbeResults for FakeProbes {
    fn ready(&self, id: &str) -> bool {
        !self.unready.lock().contains(id)
    }
    fn started(&self, id: &str) -> bool {
        !self.not_started.lock().contains(id)
    }
    fn failed(&self, id: &str) -> Option<String> {
        self.failed.lock().get(id).cloned()
    }
}

impl ProbeHub for FakeProbes {
    fn container_started(&self, _: &Arc<Pod>, name: &str, _: &str, _: Option<&str>) {
        self.started_calls.lock().push(name.to_string());
    }
    fn container_stopped(&self, id: &str) {
        self.stopped_calls.lock().push(id.to_string());
    }
    fn pod_removed(&self, _: &str) {}
}

struct Env {
    fake: Arc<Fake>,
    probes: Arc<FakeProbes>,
    m: Arc<Manager>,
    _dir: tempfile::TempDir,
}

/// A stand-in API server: empty lists for every list (services for the environment), 404
/// for everything else.
fn fake_api() -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in l.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).into_owned();
                let line = head.lines().next().unwrap_or_default().to_string();
                let list = line.starts_with("GET ")
                    && line.contains("/services")
                    && !line.contains("watch=");
                let (code, body) = if list {
                    (
                        "200 OK",
                        r#"{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}"#,
                    )
                } else {
                    (
                        "404 Not Found",
                        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"NotFound","code":404}"#,
                    )
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 {code}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    format!("http://{addr}")
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new();
    let config = kube::Config::new(fake_api().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let opts = Options {
        node_name: "node-a".into(),
        root_dir: dir.path().join("root"),
        pod_logs_dir: dir.path().join("logs"),
        cluster_dns: vec!["10.96.0.10".parse().unwrap()],
        node_ip: Some("192.168.1.5".parse().unwrap()),
        ..Options::default()
    };
    let k = Kubelet::new(client, fake.clone(), opts);
    let probes = Arc::new(FakeProbes::default());
    let m = Arc::new(Manager::with_probes(k, probes.clone()));
    Env {
        fake,
        probes,
        m,
        _dir: dir,
    }
}

fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox:1.35".into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["sh".into(), "-c".into(), "sleep 1000".into()]),
        termination_message_path: Some("/dev/termination-log".into()),
        termination_message_policy: Some("File".into()),
        ..Default::default()
    }
}

fn pod(name: &str, policy: &str, containers: Vec<Container>, inits: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            labels: Some([("app".to_string(), name.to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            init_containers: (!inits.is_empty()).then_some(inits),
            restart_policy: Some(policy.into()),
            node_name: Some("node-a".into()),
            termination_grace_period_seconds: Some(30),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        }),
    }
}

// ---------------------------------------------------------------------------------------
// Actions.

fn ready_sandbox(id: &str, attempt: u32) -> cri::PodSandboxStatus {
    cri::PodSandboxStatus {
        id: id.into(),
        metadata: Some(cri::PodSandboxMetadata {
            attempt,
            ..Default::default()
        }),
        state: cri::PodSandboxState::SandboxReady as i32,
        network: Some(cri::PodSandboxNetworkStatus {
            ip: "10.88.0.9".into(),
            additional_ips: vec![],
        }),
        ..Default::default()
    }
}

fn cinfo(name: &str, state: CState, exit: i32, c: &Container) -> ContainerInfo {
    ContainerInfo {
        id: format!("id-{name}-{exit}-{state:?}"),
        name: name.into(),
        state: Some(state),
        exit_code: exit,
        hash: container_hash(c),
        created_at: 1,
        ..Default::default()
    }
}

fn rp(sandbox: bool, containers: Vec<ContainerInfo>) -> RuntimePod {
    RuntimePod {
        sandboxes: if sandbox {
            vec![ready_sandbox("sb1", 0)]
        } else {
            vec![]
        },
        containers,
        ips: if sandbox {
            vec!["10.88.0.9".into()]
        } else {
            vec![]
        },
    }
}

#[test]
fn new_pod_gets_a_sandbox_and_its_first_init_container() {
    let probes = FakeProbes::default();
    let p = pod("a", "Always", vec![container("app")], vec![]);
    let a = compute_pod_actions(&p, &rp(false, vec![]), &probes);
    assert!(a.create_sandbox && a.kill_pod);
    assert_eq!(a.sandbox_id, "");
    assert_eq!(a.containers_to_start, vec![0]);

    let p = pod(
        "a",
        "Always",
        vec![container("app")],
        vec![container("i1"), container("i2")],
    );
    let a = compute_pod_actions(&p, &rp(false, vec![]), &probes);
    assert_eq!(a.init_containers_to_start, vec![0]);
    assert!(a.containers_to_start.is_empty());
}

#[test]
fn restart_policies_decide_restarts() {
    let probes = FakeProbes::default();
    let app = container("app");
    for (policy, exit, start, kill_pod) in [
        ("Always", 1, true, false),
        ("Always", 0, true, false),
        ("OnFailure", 1, true, false),
        ("OnFailure", 0, false, true),
        ("Never", 1, false, true),
        ("Never", 0, false, true),
    ] {
        let p = pod("a", policy, vec![app.clone()], vec![]);
        let a = compute_pod_actions(
            &p,
            &rp(true, vec![cinfo("app", CState::Exited, exit, &app)]),
            &probes,
        );
        assert_eq!(
            !a.containers_to_start.is_empty(),
            start,
            "{policy} exit {exit}"
        );
        assert_eq!(a.kill_pod, kill_pod, "{policy} exit {exit}");
        assert!(!a.create_sandbox);
    }
    // A running container is kept.
    let p = pod("a", "Always", vec![app.clone()], vec![]);
    let a = compute_pod_actions(
        &p,
        &rp(true, vec![cinfo("app", CState::Running, 0, &app)]),
        &probes,
    );
    assert!(a.is_noop(), "{a:?}");
    // Deleted pods do not restart anything.
    let mut p = pod("a", "Always", vec![app.clone()], vec![]);
    p.metadata.deletion_timestamp = Some(super::util::now_time());
    let a = compute_pod_actions(
        &p,
        &rp(true, vec![cinfo("app", CState::Exited, 1, &app)]),
        &probes,
    );
    assert!(a.containers_to_start.is_empty());
}

#[test]
fn init_containers_run_in_order() {
    let probes = FakeProbes::default();
    let (i1, i2, app) = (container("i1"), container("i2"), container("app"));
    let p = pod(
        "a",
        "Always",
        vec![app.clone()],
        vec![i1.clone(), i2.clone()],
    );
    // i1 still running: wait.
    let a = compute_pod_actions(
        &p,
        &rp(true, vec![cinfo("i1", CState::Running, 0, &i1)]),
        &probes,
    );
    assert!(a.is_noop(), "{a:?}");
    // i1 done: start i2.
    let a = compute_pod_actions(
        &p,
        &rp(true, vec![cinfo("i1", CState::Exited, 0, &i1)]),
        &probes,
    );
    assert_eq!(a.init_containers_to_start, vec![1]);
    assert!(a.containers_to_start.is_empty());
    // Both done: the app starts.
    let a = compute_pod_actions(
        &p,
        &rp(
            true,
            vec![
                cinfo("i2", CState::Exited, 0, &i2),
                cinfo("i1", CState::Exited, 0, &i1),
            ],
        ),
        &probes,
    );
    assert!(a.init_containers_to_start.is_empty());
    assert_eq!(a.containers_to_start, vec![0]);
    // i1 failed: restarted unless the policy is Never, which fails the pod.
    let failed = rp(true, vec![cinfo("i1", CState::Exited, 1, &i1)]);
    let a = compute_pod_actions(&p, &failed, &probes);
    assert_eq!(a.init_containers_to_start, vec![0]);
    let never = pod(
        "a",
        "Never",
        vec![app.clone()],
        vec![i1.clone(), i2.clone()],
    );
    let a = compute_pod_actions(&never, &failed, &probes);
    assert!(a.kill_pod && a.init_containers_to_start.is_empty());
}

#[test]
fn sidecars_start_then_the_next_init_container() {
    let probes = FakeProbes::default();
    let mut side = container("side");
    side.restart_policy = Some("Always".into());
    side.startup_probe = Some(Probe::default());
    let init = container("init");
    let app = container("app");
    let p = pod(
        "a",
        "Always",
        vec![app.clone()],
        vec![side.clone(), init.clone()],
    );
    let running = cinfo("side", CState::Running, 0, &side);
    // Not started yet (startup probe): wait.
    probes.not_started.lock().insert(running.id.clone());
    let a = compute_pod_actions(&p, &rp(true, vec![running.clone()]), &probes);
    assert!(a.init_containers_to_start.is_empty(), "{a:?}");
    // Started: the next init container runs.
    probes.not_started.lock().clear();
    let a = compute_pod_actions(&p, &rp(true, vec![running.clone()]), &probes);
    assert_eq!(a.init_containers_to_start, vec![1]);
    // Everything initialized, the sidecar exits: it restarts alongside the app.
    let a = compute_pod_actions(
        &p,
        &rp(
            true,
            vec![
                cinfo("app", CState::Running, 0, &app),
                cinfo("init", CState::Exited, 0, &init),
                cinfo("side", CState::Exited, 1, &side),
            ],
        ),
        &probes,
    );
    assert_eq!(a.init_containers_to_start, vec![0]);
    assert!(a.containers_to_start.is_empty());
}

#[test]
fn liveness_failures_and_spec_changes_restart_containers() {
    let probes = FakeProbes::default();
    let app = container("app");
    let p = pod("a", "Always", vec![app.clone()], vec![]);
    let running = cinfo("app", CState::Running, 0, &app);
    probes.failed.lock().insert(
        running.id.clone(),
        "Container app failed liveness probe".into(),
    );
    let a = compute_pod_actions(&p, &rp(true, vec![running.clone()]), &probes);
    assert_eq!(a.containers_to_start, vec![0]);
    assert_eq!(a.containers_to_kill.len(), 1);
    assert_eq!(
        a.containers_to_kill[0].message,
        "Container app failed liveness probe, will be restarted"
    );
    assert_eq!(a.containers_to_kill[0].reason, KillReason::LivenessProbe);
    probes.failed.lock().clear();

    let mut changed = app.clone();
    changed.image = Some("busybox:1.36".into());
    let p = pod("a", "Never", vec![changed], vec![]);
    let a = compute_pod_actions(&p, &rp(true, vec![running]), &probes);
    assert_eq!(a.containers_to_start, vec![0]);
    assert_eq!(
        a.containers_to_kill[0].message,
        "Container app definition changed, will be restarted"
    );
}

#[test]
fn a_dead_sandbox_is_replaced_unless_nothing_would_run() {
    let probes = FakeProbes::default();
    let app = container("app");
    let mut dead = rp(true, vec![cinfo("app", CState::Exited, 137, &app)]);
    dead.sandboxes[0].state = cri::PodSandboxState::SandboxNotready as i32;
    let p = pod("a", "Always", vec![app.clone()], vec![]);
    let a = compute_pod_actions(&p, &dead, &probes);
    assert!(a.create_sandbox && a.kill_pod);
    assert_eq!(a.sandbox_id, "sb1");
    assert_eq!(a.attempt, 1);
    assert_eq!(a.containers_to_start, vec![0]);
    let p = pod("a", "Never", vec![app.clone()], vec![]);
    let a = compute_pod_actions(&p, &dead, &probes);
    assert!(!a.create_sandbox && a.kill_pod);
}

// ---------------------------------------------------------------------------------------
// Phase and status.

fn cs_running(name: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            running: Some(Default::default()),
            ..Default::default()
        }),
        started: Some(true),
        ..Default::default()
    }
}

fn cs_terminated(name: &str, code: i32) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn cs_waiting(name: &str, last_exit: Option<i32>) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting::default()),
            ..Default::default()
        }),
        last_state: last_exit.map(|code| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn phases_follow_kubernetes_rules() {
    let two = |policy: &str| pod("a", policy, vec![container("a"), container("b")], vec![]);
    let ph =
        |p: &Pod, s: Vec<ContainerStatus>, terminal: bool| status::phase(p, &s, terminal, false);
    assert_eq!(
        ph(
            &two("Always"),
            vec![cs_running("a"), cs_running("b")],
            false
        ),
        "Running"
    );
    assert_eq!(
        ph(
            &two("Always"),
            vec![cs_running("a"), cs_waiting("b", None)],
            false
        ),
        "Pending"
    );
    assert_eq!(ph(&two("Always"), vec![cs_running("a")], false), "Pending");
    assert_eq!(
        ph(
            &two("Always"),
            vec![cs_terminated("a", 1), cs_terminated("b", 0)],
            false
        ),
        "Running"
    );
    assert_eq!(
        ph(
            &two("Never"),
            vec![cs_terminated("a", 0), cs_terminated("b", 0)],
            false
        ),
        "Succeeded"
    );
    assert_eq!(
        ph(
            &two("Never"),
            vec![cs_terminated("a", 3), cs_terminated("b", 0)],
            false
        ),
        "Failed"
    );
    assert_eq!(
        ph(
            &two("OnFailure"),
            vec![cs_terminated("a", 3), cs_terminated("b", 0)],
            false
        ),
        "Running"
    );
    assert_eq!(
        ph(
            &two("OnFailure"),
            vec![cs_terminated("a", 0), cs_terminated("b", 0)],
            false
        ),
        "Succeeded"
    );
    // A crash-looping container counts as stopped, not waiting.
    assert_eq!(
        ph(
            &two("Always"),
            vec![cs_running("a"), cs_waiting("b", Some(1))],
            false
        ),
        "Running"
    );
    // Once terminal, a restartable pod is Failed unless everything succeeded.
    assert_eq!(
        ph(
            &two("Always"),
            vec![cs_terminated("a", 143), cs_terminated("b", 0)],
            true
        ),
        "Failed"
    );
    assert_eq!(
        ph(
            &two("Always"),
            vec![cs_terminated("a", 0), cs_terminated("b", 0)],
            true
        ),
        "Succeeded"
    );
    // Init containers.
    let p = pod("a", "Never", vec![container("app")], vec![container("i")]);
    assert_eq!(
        ph(&p, vec![cs_running("i"), cs_waiting("app", None)], false),
        "Pending"
    );
    assert_eq!(
        ph(
            &p,
            vec![cs_terminated("i", 1), cs_waiting("app", None)],
            false
        ),
        "Failed"
    );
    let p = pod("a", "Always", vec![container("app")], vec![container("i")]);
    assert_eq!(
        ph(
            &p,
            vec![cs_waiting("i", Some(1)), cs_waiting("app", None)],
            false
        ),
        "Pending"
    );
}

fn inputs<'a>(
    p: &'a Pod,
    r: &'a RuntimePod,
    old: &'a PodStatus,
    reasons: &'a HashMap<String, (String, String)>,
    probes: &'a FakeProbes,
    hosts: &'a [String],
) -> Inputs<'a> {
    Inputs {
        pod: p,
        rp: r,
        old,
        terminal: false,
        reasons,
        probes,
        host_ips: hosts,
        evict: None,
    }
}

fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a k8s_openapi::api::core::v1::PodCondition {
    s.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == t)
        .unwrap_or_else(|| panic!("no {t} condition"))
}

#[test]
fn status_of_a_running_pod() {
    let app = container("app");
    let p = pod("a", "Always", vec![app.clone(), container("zz")], vec![]);
    let mut running = cinfo("app", CState::Running, 0, &app);
    running.started_at = 1_700_000_000_000_000_000;
    running.image = "docker.io/library/busybox:1.35".into();
    running.image_ref = "docker.io/library/busybox@sha256:1".into();
    running.restart_count = 2;
    let r = rp(true, vec![running.clone()]);
    let probes = FakeProbes::default();
    let reasons = HashMap::new();
    let hosts = vec!["192.168.1.5".to_string()];
    let old = PodStatus::default();
    let s = status::generate(&inputs(&p, &r, &old, &reasons, &probes, &hosts));
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(s.pod_ip.as_deref(), Some("10.88.0.9"));
    assert_eq!(s.host_ip.as_deref(), Some("192.168.1.5"));
    assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    let cs = s.container_statuses.as_ref().unwrap();
    assert_eq!(
        cs.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        vec!["app", "zz"]
    );
    assert_eq!(
        cs[0].container_id.as_deref(),
        Some("containerd://id-app-0-Running")
    );
    assert_eq!(cs[0].image, "docker.io/library/busybox:1.35");
    assert_eq!(cs[0].image_id, "docker.io/library/busybox@sha256:1");
    assert_eq!(cs[0].restart_count, 2);
    assert!(cs[0].ready);
    assert_eq!(cs[0].started, Some(true));
    assert_eq!(
        cs[1]
            .state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("ContainerCreating")
    );
    assert_eq!(cond(&s, "PodReadyToStartContainers").status, "True");
    assert_eq!(cond(&s, "Initialized").status, "True");
    let ready = cond(&s, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some("containers with unready status: [zz]")
    );
    assert_eq!(cond(&s, "PodScheduled").status, "True");
    // Order of kubelet conditions.
    let types: Vec<&str> = s
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(
        types,
        vec![
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled"
        ]
    );

    // A readiness probe not passing keeps the container unready.
    let p1 = pod("a", "Always", vec![app.clone()], vec![]);
    probes.unready.lock().insert(running.id.clone());
    let s = status::generate(&inputs(&p1, &r, &old, &reasons, &probes, &hosts));
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert!(!s.container_statuses.as_ref().unwrap()[0].ready);
    assert_eq!(cond(&s, "ContainersReady").status, "False");
    probes.unready.lock().clear();
    let s = status::generate(&inputs(&p1, &r, &old, &reasons, &probes, &hosts));
    assert_eq!(cond(&s, "Ready").status, "True");
}

#[test]
fn status_of_crashing_and_finished_containers() {
    let app = container("app");
    let p = pod("a", "Always", vec![app.clone()], vec![]);
    let mut older = cinfo("app", CState::Exited, 1, &app);
    older.reason = "Error".into();
    older.finished_at = 1_700_000_000_000_000_000;
    older.id = "old".into();
    let mut newer = older.clone();
    newer.id = "new".into();
    newer.restart_count = 1;
    newer.created_at = 5;
    let r = RuntimePod {
        containers: vec![newer, older],
        ..rp(true, vec![])
    };
    let probes = FakeProbes::default();
    let mut reasons = HashMap::new();
    reasons.insert(
        "app".to_string(),
        (
            "CrashLoopBackOff".to_string(),
            "back-off 10s restarting failed container=app pod=a_default(uid-a)".to_string(),
        ),
    );
    let old = PodStatus::default();
    let hosts = vec![];
    let s = status::generate(&inputs(&p, &r, &old, &reasons, &probes, &hosts));
    let c = &s.container_statuses.as_ref().unwrap()[0];
    let w = c.state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(w.reason.as_deref(), Some("CrashLoopBackOff"));
    assert!(w.message.as_deref().unwrap().starts_with("back-off 10s"));
    let last = c.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(last.exit_code, 1);
    assert_eq!(last.reason.as_deref(), Some("Error"));
    assert_eq!(last.container_id.as_deref(), Some("containerd://new"));
    assert_eq!(c.restart_count, 1);
    assert_eq!(s.phase.as_deref(), Some("Running"));

    // restartPolicy Never, exit 3: Failed, terminated with the exit code.
    let p = pod("a", "Never", vec![app.clone()], vec![]);
    let mut done = cinfo("app", CState::Exited, 3, &app);
    done.reason = "Error".into();
    let r = rp(true, vec![done]);
    let s = status::generate(&inputs(&p, &r, &old, &HashMap::new(), &probes, &hosts));
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    let t = s.container_statuses.as_ref().unwrap()[0]
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodFailed"));
    assert_eq!(s.pod_ip.as_deref(), Some("10.88.0.9"));

    // Its sandbox stopped, the pod keeps its IP.
    let mut stopped = r.clone();
    stopped.ips.clear();
    stopped.sandboxes[0].state = cri::PodSandboxState::SandboxNotready as i32;
    let s2 = status::generate(&inputs(&p, &stopped, &s, &HashMap::new(), &probes, &hosts));
    assert_eq!(s2.pod_ip.as_deref(), Some("10.88.0.9"));
    assert_eq!(cond(&s2, "PodReadyToStartContainers").status, "False");
}

#[test]
fn init_container_statuses_and_initialized_condition() {
    let (i1, app) = (container("i1"), container("app"));
    let p = pod("a", "Always", vec![app.clone()], vec![i1.clone()]);
    let r = rp(true, vec![cinfo("i1", CState::Running, 0, &i1)]);
    let probes = FakeProbes::default();
    let old = PodStatus::default();
    let hosts = vec![];
    let reasons = HashMap::new();
    let s = status::generate(&inputs(&p, &r, &old, &reasons, &probes, &hosts));
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let init = cond(&s, "Initialized");
    assert_eq!(init.status, "False");
    assert_eq!(init.reason.as_deref(), Some("ContainersNotInitialized"));
    assert_eq!(
        init.message.as_deref(),
        Some("containers with incomplete status: [i1]")
    );
    let app_state = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        app_state
            .state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("PodInitializing")
    );
    let r = rp(
        true,
        vec![
            cinfo("app", CState::Running, 0, &app),
            cinfo("i1", CState::Exited, 0, &i1),
        ],
    );
    let s = status::generate(&inputs(&p, &r, &old, &reasons, &probes, &hosts));
    assert_eq!(cond(&s, "Initialized").status, "True");
    assert!(s.init_container_statuses.as_ref().unwrap()[0].ready);
    assert_eq!(s.phase.as_deref(), Some("Running"));
}

#[test]
fn terminating_statuses_end_terminal() {
    let app = container("app");
    let p = pod("a", "Always", vec![app.clone()], vec![]);
    let mut st = PodStatus {
        phase: Some("Pending".into()),
        container_statuses: Some(vec![ContainerStatus {
            name: "app".into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ImagePullBackOff".into()),
                    message: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let t = status::terminate(&p, &st);
    assert_eq!(t.phase.as_deref(), Some("Failed"));
    let term = t.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(term.exit_code, 137);
    assert_eq!(term.reason.as_deref(), Some("ContainerStatusUnknown"));
    st.phase = Some("Succeeded".into());
    assert_eq!(
        status::terminate(&p, &st).phase.as_deref(),
        Some("Succeeded")
    );

    // The API sees a terminal phase only once nothing can run.
    let api = PodStatus {
        phase: Some("Running".into()),
        ..Default::default()
    };
    let new = PodStatus {
        phase: Some("Failed".into()),
        conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        ..Default::default()
    };
    assert_eq!(
        status::merge_for_api(&api, &new, true).phase.as_deref(),
        Some("Running")
    );
    let merged = status::merge_for_api(&api, &new, false);
    assert_eq!(merged.phase.as_deref(), Some("Failed"));
    let ready = cond(&merged, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("PodFailed"))
    );

    // A container that terminated for good may not come back (restartPolicy Never).
    let never = pod("a", "Never", vec![app.clone()], vec![]);
    let old = PodStatus {
        container_statuses: Some(vec![cs_terminated("app", 0)]),
        ..Default::default()
    };
    let new = PodStatus {
        container_statuses: Some(vec![cs_running("app")]),
        ..Default::default()
    };
    assert!(status::check_transitions(&never, &old, &new).is_err());
    assert!(status::check_transitions(&p, &old, &new).is_ok());
}

#[test]
fn conditions_keep_transition_times_and_start_time() {
    let mut old = PodStatus::default();
    let mut new = PodStatus {
        conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        ..Default::default()
    };
    status::finalize(&mut new, &old);
    assert!(new.start_time.is_some());
    let first = cond(&new, "Ready").last_transition_time.clone().unwrap();
    old = new.clone();
    let mut again = PodStatus {
        conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_transition_time: None,
            ..Default::default()
        }]),
        ..Default::default()
    };
    status::finalize(&mut again, &old);
    assert_eq!(
        cond(&again, "Ready").last_transition_time.clone().unwrap(),
        first
    );
    assert_eq!(again.start_time, old.start_time);
}

// ---------------------------------------------------------------------------------------
// Syncing against the fake runtime.

async fn sync_once(e: &Env, p: &Arc<Pod>) -> super::sync::SyncOutcome {
    let r = rt::pod_status(&*e.fake, super::util::pod_uid(p))
        .await
        .unwrap();
    sync_runtime(&e.m, p, &r, &Default::default()).await
}

#[tokio::test]
async fn sync_starts_a_pod_as_kubernetes_does() {
    let e = env();
    e.fake.add_image("busybox:1.35");
    let mut app = container("app");
    app.args = Some(vec!["$(GREETING)".into()]);
    app.ports = Some(vec![k8s_openapi::api::core::v1::ContainerPort {
        container_port: 80,
        host_port: Some(8080),
        ..Default::default()
    }]);
    let p = Arc::new(pod("web", "Always", vec![app], vec![]));
    let out = sync_once(&e, &p).await;
    assert!(out.changed);
    assert_eq!(e.fake.count("RunPodSandbox"), 1);
    assert_eq!(e.fake.count("StartContainer app"), 1);
    assert_eq!(e.fake.running(), vec!["app"]);
    assert_eq!(
        e.fake.count("PullImage"),
        0,
        "IfNotPresent with the image present"
    );
    assert_eq!(e.probes.started_calls.lock().clone(), vec!["app"]);

    {
        let s = e.fake.s.lock();
        let sb = &s.sandbox_configs[0];
        let md = sb.metadata.clone().unwrap();
        assert_eq!(
            (md.name.as_str(), md.namespace.as_str(), md.uid.as_str()),
            ("web", "default", "uid-web")
        );
        assert_eq!(sb.labels["io.kubernetes.pod.name"], "web");
        assert_eq!(sb.labels["io.kubernetes.pod.uid"], "uid-web");
        assert_eq!(sb.labels["app"], "web");
        assert_eq!(sb.hostname, "web");
        assert!(sb.log_directory.ends_with("logs/default_web_uid-web"));
        let dns = sb.dns_config.clone().unwrap();
        assert_eq!(dns.servers, vec!["10.96.0.10"]);
        assert_eq!(
            &dns.searches[..3],
            &[
                "default.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local"
            ]
        );
        assert_eq!(dns.options, vec!["ndots:5"]);
        assert_eq!(sb.port_mappings.len(), 1);
        assert_eq!(
            (
                sb.port_mappings[0].container_port,
                sb.port_mappings[0].host_port
            ),
            (80, 8080)
        );

        let cfg = s.configs.values().next().unwrap();
        assert_eq!(cfg.log_path, "app/0.log");
        assert_eq!(cfg.labels["io.kubernetes.container.name"], "app");
        assert_eq!(cfg.annotations["io.kubernetes.container.restartCount"], "0");
        assert_eq!(
            cfg.annotations["io.kubernetes.container.terminationMessagePath"],
            "/dev/termination-log"
        );
        assert!(cfg.annotations.contains_key("io.kubernetes.container.hash"));
        assert_eq!(cfg.command, vec!["sh", "-c", "sleep 1000"]);
        let paths: Vec<&str> = cfg
            .mounts
            .iter()
            .map(|m| m.container_path.as_str())
            .collect();
        assert_eq!(paths, vec!["/etc/hosts", "/dev/termination-log"]);
        let hosts = std::fs::read_to_string(&cfg.mounts[0].host_path).unwrap();
        assert!(hosts.starts_with("# Kubernetes-managed hosts file.\n"));
        assert!(hosts.contains("10.88.0.1\tweb\n"), "{hosts}");
        let res = cfg.linux.clone().unwrap().resources.unwrap();
        assert_eq!(res.cpu_shares, 2);
        assert_eq!(res.oom_score_adj, 1000);
        let sc = cfg.linux.clone().unwrap().security_context.unwrap();
        assert!(sc.masked_paths.contains(&"/proc/kcore".to_string()));
    }

    // A second sync changes nothing.
    let out = sync_once(&e, &p).await;
    assert!(!out.changed);
}

#[tokio::test]
async fn crashing_containers_back_off() {
    let e = env();
    e.fake.add_image("busybox:1.35");
    let p = Arc::new(pod("crash", "Always", vec![container("app")], vec![]));
    sync_once(&e, &p).await;
    e.fake.exit("app", 1);
    // The first restart is immediate.
    sync_once(&e, &p).await;
    assert_eq!(e.fake.count("StartContainer app"), 2);
    {
        let s = e.fake.s.lock();
        let latest = s
            .configs
            .values()
            .max_by_key(|c| c.metadata.clone().unwrap().attempt)
            .unwrap();
        assert_eq!(latest.log_path, "app/1.log");
    }
    // The second waits 10 s, then 20 s.
    e.fake.exit("app", 1);
    let out = sync_once(&e, &p).await;
    assert_eq!(e.fake.count("StartContainer app"), 2);
    let wait = out.requeue.unwrap();
    assert!(
        wait <= Duration::from_secs(10) && wait > Duration::from_secs(8),
        "{wait:?}"
    );
    let (reason, message) = e.m.reasons_of("uid-crash")["app"].clone();
    assert_eq!(reason, "CrashLoopBackOff");
    assert_eq!(
        message,
        "back-off 10s restarting failed container=app pod=crash_default(uid-crash)"
    );
    // The status shows it.
    let r = rt::pod_status(&*e.fake, "uid-crash").await.unwrap();
    let s = e.m.generate(&p, &r, false, None);
    let c = &s.container_statuses.unwrap()[0];
    assert_eq!(
        c.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("CrashLoopBackOff")
    );
    assert_eq!(c.restart_count, 1);
    assert_eq!(
        c.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        1
    );
    // Of the two dead instances, only the newest is kept.
    let left = e.fake.s.lock().containers.len();
    assert_eq!(left, 1, "{:?}", e.fake.calls());
    assert_eq!(e.fake.count("RemoveContainer app"), 1);
}

#[tokio::test]
async fn images_follow_the_pull_policy() {
    let e = env();
    let mut never = container("never");
    never.image = Some("missing:1".into());
    never.image_pull_policy = Some("Never".into());
    let mut gone = container("gone");
    gone.image = Some("nothere:1".into());
    let mut always = container("always");
    always.image = Some("pullme:2".into());
    always.image_pull_policy = Some("Always".into());
    e.fake.pullable("pullme:2");
    let p = Arc::new(pod("img", "Always", vec![never, gone, always], vec![]));
    let out = sync_once(&e, &p).await;
    let reasons = e.m.reasons_of("uid-img");
    assert_eq!(reasons["never"].0, "ErrImageNeverPull");
    assert_eq!(
        reasons["never"].1,
        "Container image \"missing:1\" is not present with pull policy of Never"
    );
    assert_eq!(reasons["gone"].0, "ErrImagePull");
    assert!(
        reasons["gone"]
            .1
            .starts_with("rpc error: code = NotFound desc = failed to pull"),
        "{}",
        reasons["gone"].1
    );
    assert!(!reasons.contains_key("always"));
    assert_eq!(e.fake.running(), vec!["always"]);
    assert!(out.requeue.is_some());
    // Within the back-off, no new pull: ImagePullBackOff.
    sync_once(&e, &p).await;
    let reasons = e.m.reasons_of("uid-img");
    assert_eq!(reasons["gone"].0, "ImagePullBackOff");
    assert_eq!(reasons["gone"].1, "Back-off pulling image \"nothere:1\"");
    assert_eq!(e.fake.count("PullImage nothere:1"), 1);
    assert_eq!(e.fake.count("PullImage pullme:2"), 1);
}

#[tokio::test]
async fn init_containers_run_before_the_app_and_failures_stop_never_pods() {
    let e = env();
    e.fake.add_image("busybox:1.35");
    let p = Arc::new(pod(
        "init",
        "Never",
        vec![container("app")],
        vec![container("i1"), container("i2")],
    ));
    sync_once(&e, &p).await;
    assert_eq!(e.fake.running(), vec!["i1"]);
    e.fake.exit("i1", 0);
    sync_once(&e, &p).await;
    assert_eq!(e.fake.running(), vec!["i2"]);
    e.fake.exit("i2", 2);
    sync_once(&e, &p).await;
    assert!(e.fake.running().is_empty());
    assert_eq!(e.fake.count("StartContainer app"), 0);
    assert_eq!(e.fake.count("StopPodSandbox"), 1);
    let r = rt::pod_status(&*e.fake, "uid-init").await.unwrap();
    let s = e.m.generate(&p, &r, false, None);
    assert_eq!(s.phase.as_deref(), Some("Failed"));
}

#[tokio::test]
async fn killing_a_pod_uses_its_grace_period() {
    let e = env();
    e.fake.add_image("busybox:1.35");
    let mut side = container("side");
    side.restart_policy = Some("Always".into());
    let mut p = pod("kill", "Always", vec![container("app")], vec![side]);
    let pa = Arc::new(p.clone());
    sync_once(&e, &pa).await;
    sync_once(&e, &pa).await;
    let mut running = e.fake.running();
    running.sort();
    assert_eq!(running, vec!["app", "side"]);
    p.metadata.deletion_grace_period_seconds = Some(7);
    let r = rt::pod_status(&*e.fake, "uid-kill").await.unwrap();
    super::sync::kill_pod(&e.m, &p, &r, Some(7)).await.unwrap();
    let stops = e.fake.s.lock().stop_timeouts.clone();
    // The app stops first, the sidecar after it.
    assert_eq!(stops[0], ("app".to_string(), 7));
    assert_eq!(stops[1].0, "side");
    assert_eq!(e.fake.count("StopPodSandbox"), 1);
    assert!(e.fake.running().is_empty());
}

// ---------------------------------------------------------------------------------------
// The worker, fed by the informer.

#[tokio::test]
async fn workers_run_pods_and_clean_up_after_force_deletion() {
    use kube::runtime::watcher::Event;
    let e = env();
    e.fake.add_image("busybox:1.35");
    let (tx, rx) = futures::channel::mpsc::unbounded();
    tokio::spawn(e.m.k.pods.clone().run(rx, None));
    super::start_with(e.m.clone());
    let p = pod("w", "Always", vec![container("app")], vec![]);
    tx.unbounded_send(Ok(Event::Init)).unwrap();
    tx.unbounded_send(Ok(Event::InitApply(p.clone()))).unwrap();
    tx.unbounded_send(Ok(Event::InitDone)).unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while e.fake.running() != vec!["app"] {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the app never ran: {:?}",
            e.fake.calls()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The relist notices an exit and the worker restarts the container.
    e.fake.exit("app", 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while e.fake.count("StartContainer app") < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no restart: {:?}",
            e.fake.calls()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Gone from the API: the worker stops everything and removes it.
    tx.unbounded_send(Ok(Event::Delete(p.clone()))).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !e.fake.s.lock().sandboxes.is_empty() || !e.m.workers.lock().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not cleaned up: {:?}",
            e.fake.calls()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(e.fake.s.lock().containers.is_empty());
    let stops = e.fake.s.lock().stop_timeouts.clone();
    assert_eq!(stops.last().unwrap(), &("app".to_string(), 30));
    assert!(e.m.statuses.lock().is_empty());
}

#[tokio::test]
async fn unknown_runtime_pods_are_removed() {
    use kube::runtime::watcher::Event;
    let e = env();
    e.fake.add_image("busybox:1.35");
    // Something left in the runtime by a pod the API no longer has.
    let orphan = Arc::new(pod("orphan", "Always", vec![container("app")], vec![]));
    sync_once(&e, &orphan).await;
    assert_eq!(e.fake.running(), vec!["app"]);
    let (tx, rx) = futures::channel::mpsc::unbounded();
    tokio::spawn(e.m.k.pods.clone().run(rx, None));
    super::start_with(e.m.clone());
    tx.unbounded_send(Ok(Event::Init)).unwrap();
    tx.unbounded_send(Ok(Event::InitDone)).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !e.fake.s.lock().sandboxes.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "orphan kept: {:?}",
            e.fake.calls()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(e.fake.running().is_empty());
}

#[tokio::test]
async fn hostnames_and_dns_policies() {
    let e = env();
    let k = &e.m.k;
    let mut p = pod(
        "a-very-long-name-that-goes-on-and-on-and-on-and-on-and-on-and-on-xyz",
        "Always",
        vec![],
        vec![],
    );
    let (h, d) = super::sandbox::hostname_and_domain(k, &p);
    assert_eq!(h.len(), 63);
    assert_eq!(d, "");
    if let Some(s) = p.spec.as_mut() {
        s.hostname = Some("db-0".into());
        s.subdomain = Some("db".into());
    }
    let (h, d) = super::sandbox::hostname_and_domain(k, &p);
    assert_eq!(
        (h.as_str(), d.as_str()),
        ("db-0", "db.default.svc.cluster.local")
    );
    let hosts = super::sandbox::hosts_file(k, &p, &["10.1.2.3".into()]);
    assert!(hosts.contains("10.1.2.3\tdb-0.db.default.svc.cluster.local\tdb-0\n"));

    let host = super::sandbox::Resolv {
        servers: vec!["1.1.1.1".into()],
        searches: vec!["corp".into()],
        options: vec![],
    };
    if let Some(s) = p.spec.as_mut() {
        s.dns_policy = Some("Default".into());
    }
    let mut warned = Vec::new();
    let d = super::sandbox::dns_config(k, &p, &host, |m| warned.push(m.to_string()));
    assert_eq!(d.servers, vec!["1.1.1.1"]);
    assert_eq!(d.searches, vec!["corp"]);
    if let Some(s) = p.spec.as_mut() {
        s.dns_policy = Some("None".into());
        s.dns_config = Some(k8s_openapi::api::core::v1::PodDNSConfig {
            nameservers: Some(vec!["9.9.9.9".into()]),
            searches: Some(vec!["x.y".into()]),
            options: Some(vec![k8s_openapi::api::core::v1::PodDNSConfigOption {
                name: Some("ndots".into()),
                value: Some("2".into()),
            }]),
        });
    }
    let d = super::sandbox::dns_config(k, &p, &host, |m| warned.push(m.to_string()));
    assert_eq!(d.servers, vec!["9.9.9.9"]);
    assert_eq!(d.searches, vec!["x.y"]);
    assert_eq!(d.options, vec!["ndots:2"]);
    assert!(warned.is_empty());
}

#[test]
fn run_as_non_root_is_checked() {
    use super::container::verify_run_as_non_root;
    let mut c = container("app");
    let p = pod("a", "Always", vec![], vec![]);
    assert!(verify_run_as_non_root(&p, &c, Some(0), "").is_ok());
    c.security_context = Some(k8s_openapi::api::core::v1::SecurityContext {
        run_as_non_root: Some(true),
        ..Default::default()
    });
    let err = verify_run_as_non_root(&p, &c, Some(0), "").unwrap_err();
    assert_eq!(
        err,
        "container has runAsNonRoot and image will run as root (pod: \"a_default(uid-a)\", container: app)"
    );
    assert!(verify_run_as_non_root(&p, &c, Some(1000), "").is_ok());
    assert!(verify_run_as_non_root(&p, &c, None, "nobody")
        .unwrap_err()
        .contains("non-numeric user (nobody)"));
    if let Some(sc) = c.security_context.as_mut() {
        sc.run_as_user = Some(0);
    }
    assert!(verify_run_as_non_root(&p, &c, Some(1000), "")
        .unwrap_err()
        .contains("breaks non-root policy"));
}

#[test]
fn admission_rejects_what_does_not_fit() {
    use super::admission::admit;
    use k8s_openapi::api::core::v1::{
        Node, NodeSpec, NodeStatus, ResourceRequirements, Taint, Toleration,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let node = Node {
        metadata: ObjectMeta {
            name: Some("node-a".into()),
            labels: Some([("disk".to_string(), "ssd".to_string())].into()),
            ..Default::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            allocatable: Some(
                [
                    ("cpu".to_string(), Quantity("2".into())),
                    ("memory".to_string(), Quantity("1Gi".into())),
                    ("pods".to_string(), Quantity("2".into())),
                ]
                .into(),
            ),
            ..Default::default()
        }),
    };
    let small = Arc::new(pod("small", "Always", vec![container("a")], vec![]));
    assert!(admit(&small, &[], Some(&node), 110).is_ok());
    let r = admit(&small, &[small.clone(), small.clone()], Some(&node), 110).unwrap_err();
    assert_eq!(r.reason, "OutOfpods");
    assert_eq!(
        r.message,
        "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
    );
    // Without a node object, --max-pods applies.
    assert_eq!(
        admit(&small, std::slice::from_ref(&small), None, 1)
            .unwrap_err()
            .reason,
        "OutOfpods"
    );

    let mut big = container("big");
    big.resources = Some(ResourceRequirements {
        requests: Some([("cpu".to_string(), Quantity("1500m".into()))].into()),
        ..Default::default()
    });
    let big_pod = Arc::new(pod("big", "Always", vec![big], vec![]));
    assert!(admit(&big_pod, &[], Some(&node), 110).is_ok());
    let r = admit(&big_pod, std::slice::from_ref(&big_pod), Some(&node), 110).unwrap_err();
    assert_eq!(r.reason, "OutOfcpu");
    assert_eq!(
        r.message,
        "Node didn't have enough resource: cpu, requested: 1500, used: 1500, capacity: 2000"
    );

    let mut picky = pod("picky", "Always", vec![container("a")], vec![]);
    if let Some(s) = picky.spec.as_mut() {
        s.node_selector = Some([("disk".to_string(), "hdd".to_string())].into());
    }
    assert_eq!(
        admit(&picky, &[], Some(&node), 110).unwrap_err().reason,
        "NodeAffinity"
    );
    if let Some(s) = picky.spec.as_mut() {
        s.node_selector = Some([("disk".to_string(), "ssd".to_string())].into());
    }
    assert!(admit(&picky, &[], Some(&node), 110).is_ok());

    let mut tainted = node.clone();
    tainted.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: "dedicated".into(),
            value: Some("x".into()),
            effect: "NoExecute".into(),
            time_added: None,
        }]),
        ..Default::default()
    });
    assert_eq!(
        admit(&picky, &[], Some(&tainted), 110).unwrap_err().reason,
        "TaintToleration"
    );
    if let Some(s) = picky.spec.as_mut() {
        s.tolerations = Some(vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        }]);
    }
    assert!(admit(&picky, &[], Some(&tainted), 110).is_ok());

    let mut sysctl = pod("sysctl", "Always", vec![container("a")], vec![]);
    if let Some(s) = sysctl.spec.as_mut() {
        s.security_context = Some(k8s_openapi::api::core::v1::PodSecurityContext {
            sysctls: Some(vec![
                k8s_openapi::api::core::v1::Sysctl {
                    name: "net.ipv4.tcp_syncookies".into(),
                    value: "1".into(),
                },
                k8s_openapi::api::core::v1::Sysctl {
                    name: "kernel/msgmax".into(),
                    value: "1".into(),
                },
            ]),
            ..Default::default()
        });
    }
    let r = admit(&sysctl, &[], Some(&node), 110).unwrap_err();
    assert_eq!(r.reason, "SysctlForbidden");
    assert_eq!(
        r.message,
        "forbidden sysctl: \"kernel.msgmax\" not allowlisted"
    );
}

#[tokio::test]
async fn a_status_writes_copy_is_dropped_once_the_informer_has_that_version() {
    let e = env();
    let with_rv = |rv: &str| {
        let mut p = pod("web", "Always", vec![container("c")], vec![]);
        p.metadata.resource_version = Some(rv.into());
        p
    };
    e.m.written.lock().insert("uid-web".into(), with_rv("10"));
    // An older version reaching the informer keeps the newer copy.
    e.m.informer_has(&with_rv("9"));
    assert!(e.m.written.lock().contains_key("uid-web"));
    // Another pod's version touches nothing.
    e.m.informer_has(&pod("other", "Always", vec![container("c")], vec![]));
    assert!(e.m.written.lock().contains_key("uid-web"));
    e.m.informer_has(&with_rv("10"));
    assert!(!e.m.written.lock().contains_key("uid-web"));
}
