//! Carrying out a pod's actions through CRI (Kubernetes' kuberuntime SyncPod): kill what
//! must go, make the sandbox, start init containers, sidecars and containers (pulling images,
//! honouring the crash back-off), run postStart hooks; and killing containers and pods with
//! their grace period and preStop hooks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_cri::v1 as cri;
use capstan_runtime::events::{NORMAL, WARNING};
use futures::future::join_all;
use k8s_openapi::api::core::v1::{Container, Pod, PodIP, Secret};

use super::actions::{
    compute_pod_actions, containers, host_network, init_containers, is_restartable_init, KillReason,
};
use super::container::{
    container_config, image_user, restart_count_from_logs, verify_run_as_non_root, ConfigInputs,
};
use super::manager::Manager;
use super::runtime::{is_not_found, sandbox_ips, CState, RuntimePod};
use super::sandbox::{log_directory, sandbox_config};
use super::util::{
    container_hash, container_ref, format_pod, go_duration, now_nanos, pod_name, pod_namespace,
    pod_uid,
};
use crate::volumes::PodVolumes;

/// When to try again after a container failed to start for a reason without its own
/// back-off (the pod worker's back-off in Kubernetes).
const START_RETRY: Duration = Duration::from_secs(10);

/// The shortest time a container is given to stop.
const MIN_GRACE_SECONDS: i64 = 2;

pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";
pub const CREATE_CONTAINER_ERROR: &str = "CreateContainerError";
pub const RUN_CONTAINER_ERROR: &str = "RunContainerError";
pub const POST_START_HOOK_ERROR: &str = "PostStartHookError";

#[derive(Debug, Default)]
pub struct SyncOutcome {
    /// Something was started, killed or made.
    pub changed: bool,
    /// Sync again after this long (a back-off ends).
    pub requeue: Option<Duration>,
}

impl SyncOutcome {
    fn retry_in(&mut self, d: Duration) {
        self.requeue = Some(self.requeue.map_or(d, |r| r.min(d)));
    }
}

/// Why a container did not start: its waiting reason and message.
#[derive(Debug)]
pub struct StartError {
    pub reason: String,
    pub message: String,
    pub retry: Option<Duration>,
}

impl StartError {
    fn new(reason: &str, message: impl Into<String>) -> StartError {
        StartError {
            reason: reason.into(),
            message: message.into(),
            retry: None,
        }
    }
}

fn container_event(
    m: &Manager,
    pod: &Pod,
    name: &str,
    type_: &'static str,
    reason: &str,
    msg: String,
) {
    m.k.recorder
        .record(container_ref(pod, name), type_, reason, msg);
}

/// The spec of a container of the pod, by name.
pub fn find_spec<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    init_containers(pod)
        .iter()
        .chain(containers(pod))
        .find(|c| c.name == name)
}

/// The key of a container's crash back-off.
fn backoff_key(pod: &Pod, c: &Container) -> String {
    format!(
        "{}_{}_{}_{}_{}",
        pod_name(pod),
        pod_namespace(pod),
        pod_uid(pod),
        c.name,
        container_hash(c)
    )
}

/// Kill one container: Killing event, preStop hook within the grace period, then stop.
pub async fn kill_container(
    m: &Manager,
    pod: &Pod,
    id: &str,
    name: &str,
    message: &str,
    reason: KillReason,
    grace_override: Option<i64>,
) -> Result<(), String> {
    let spec = find_spec(pod, name);
    let tgps = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds);
    let mut grace = match (pod.metadata.deletion_grace_period_seconds, tgps) {
        (Some(g), _) => g,
        (None, Some(t)) => {
            let probe = match reason {
                KillReason::LivenessProbe => spec.and_then(|c| c.liveness_probe.as_ref()),
                KillReason::StartupProbe => spec.and_then(|c| c.startup_probe.as_ref()),
                _ => None,
            };
            probe
                .and_then(|p| p.termination_grace_period_seconds)
                .unwrap_or(t)
        }
        (None, None) => MIN_GRACE_SECONDS,
    };
    let message = if message.is_empty() {
        format!("Stopping container {name}")
    } else {
        message.to_string()
    };
    container_event(m, pod, name, NORMAL, "Killing", message);
    if let Some(g) = grace_override {
        grace = g;
    }
    if let Some(pre) = spec
        .and_then(|c| c.lifecycle.as_ref())
        .and_then(|l| l.pre_stop.as_ref())
    {
        if grace > 0 {
            let start = Instant::now();
            let hook = crate::probes::run_hook(&m.k, pod, name, id, pre);
            match tokio::time::timeout(Duration::from_secs(grace as u64), hook).await {
                Ok(Err(e)) => {
                    tracing::info!(pod = %format_pod(pod), container = %name, error = %e, "preStop hook failed");
                    container_event(
                        m,
                        pod,
                        name,
                        WARNING,
                        "FailedPreStopHook",
                        "PreStopHook failed".into(),
                    );
                }
                Ok(Ok(())) => {}
                Err(_) => {
                    tracing::info!(pod = %format_pod(pod), container = %name, "preStop hook did not complete within the grace period");
                }
            }
            grace -= start.elapsed().as_secs() as i64;
        }
    }
    let grace = grace.max(MIN_GRACE_SECONDS);
    let r =
        m.k.runtime
            .stop_container(cri::StopContainerRequest {
                container_id: id.to_string(),
                timeout: grace,
            })
            .await;
    m.probes.container_stopped(id);
    m.probed.lock().remove(id);
    match r {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(format!(
            "failed to stop container {name:?}: {}",
            e.message()
        )),
    }
}

/// Kill every running container of a pod (regular containers first, then sidecars in
/// reverse order) and stop its sandboxes.
pub async fn kill_pod(
    m: &Manager,
    pod: &Pod,
    rp: &RuntimePod,
    grace_override: Option<i64>,
) -> Result<(), String> {
    let start = Instant::now();
    let sidecar_names: Vec<&str> = init_containers(pod)
        .iter()
        .filter(|c| is_restartable_init(c))
        .map(|c| c.name.as_str())
        .collect();
    let running: Vec<_> = rp.running().collect();
    let (sidecars, others): (Vec<_>, Vec<_>) = running
        .into_iter()
        .partition(|c| sidecar_names.contains(&c.name.as_str()));
    let mut errors = Vec::new();
    let results = join_all(others.iter().map(|c| {
        kill_container(
            m,
            pod,
            &c.id,
            &c.name,
            "",
            KillReason::Unknown,
            grace_override,
        )
    }))
    .await;
    errors.extend(results.into_iter().filter_map(Result::err));
    // Sidecars stop after the containers they serve, last started first.
    let mut ordered = sidecars;
    ordered.sort_by_key(|c| {
        std::cmp::Reverse(sidecar_names.iter().position(|n| *n == c.name).unwrap_or(0))
    });
    for c in ordered {
        let left = grace_override.map(|g| g - start.elapsed().as_secs() as i64);
        if let Err(e) = kill_container(m, pod, &c.id, &c.name, "", KillReason::Unknown, left).await
        {
            errors.push(e);
        }
    }
    for sb in &rp.sandboxes {
        match m
            .k
            .runtime
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: sb.id.clone(),
            })
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => errors.push(format!(
                "failed to stop sandbox {:?}: {}",
                sb.id,
                e.message()
            )),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Remove a container and its log file.
pub async fn remove_container(m: &Manager, id: &str) {
    if let Ok(r) =
        m.k.runtime
            .container_status(cri::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: false,
            })
            .await
    {
        if let Some(p) = r.status.map(|s| s.log_path).filter(|p| !p.is_empty()) {
            let _ = std::fs::remove_file(p);
        }
    }
    if let Err(e) =
        m.k.runtime
            .remove_container(cri::RemoveContainerRequest {
                container_id: id.to_string(),
            })
            .await
    {
        if !is_not_found(&e) {
            tracing::warn!(container = %id, error = %e.message(), "cannot remove container");
        }
    }
}

/// Remove every instance of the pod's init containers (a new sandbox starts them over).
async fn purge_init_containers(m: &Manager, pod: &Pod, rp: &RuntimePod) {
    for c in &rp.containers {
        if init_containers(pod).iter().any(|i| i.name == c.name) {
            remove_container(m, &c.id).await;
        }
    }
}

/// Remove dead instances of the pod's regular containers beyond the newest one (Kubernetes'
/// container garbage collection keeps one dead container per container name).
async fn gc_dead_containers(m: &Manager, pod: &Pod, rp: &RuntimePod) {
    for c in containers(pod) {
        let dead = rp
            .containers
            .iter()
            .filter(|s| s.name == c.name && s.state() == CState::Exited);
        for s in dead.skip(1) {
            remove_container(m, &s.id).await;
        }
    }
}

/// Keep only the newest finished instance of each init container.
async fn prune_init_containers(m: &Manager, pod: &Pod, rp: &RuntimePod) {
    for ic in init_containers(pod) {
        let mut count = 0;
        for c in rp.containers.iter().filter(|c| c.name == ic.name) {
            if !matches!(c.state(), CState::Exited | CState::Unknown) {
                continue;
            }
            count += 1;
            if count > 1 {
                remove_container(m, &c.id).await;
            }
        }
    }
}

async fn create_sandbox(
    m: &Manager,
    pod: &Pod,
    attempt: u32,
) -> Result<(String, Vec<String>), String> {
    let dir = log_directory(&m.k, pod);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return Err(format!(
            "create pod log directory {} failed: {e}",
            dir.display()
        ));
    }
    let config = sandbox_config(&m.k, pod, attempt, |msg| {
        m.k.recorder
            .warning(pod, "MissingClusterDNS", msg.to_string())
    });
    let id = match m
        .k
        .runtime
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        })
        .await
    {
        Ok(r) => r.pod_sandbox_id,
        Err(e) => {
            let msg = super::util::grpc_error(&e);
            m.k.recorder.warning(
                pod,
                "FailedCreatePodSandBox",
                format!("Failed to create pod sandbox: {msg}"),
            );
            return Err(msg);
        }
    };
    let status =
        m.k.runtime
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.clone(),
                verbose: false,
            })
            .await;
    match status {
        Ok(r) => Ok((id, r.status.as_ref().map(sandbox_ips).unwrap_or_default())),
        Err(e) => {
            let msg = super::util::grpc_error(&e);
            m.k.recorder.warning(
                pod,
                "FailedStatusPodSandBox",
                format!("Unable to get pod sandbox status: {msg}"),
            );
            Err(msg)
        }
    }
}

/// Why the runtime's pod network is not ready (None when it is, or when the runtime does
/// not say).
async fn network_not_ready(m: &Manager) -> Option<String> {
    let status =
        m.k.runtime
            .status(cri::StatusRequest { verbose: false })
            .await
            .ok()?
            .status?;
    let c = status
        .conditions
        .iter()
        .find(|c| c.r#type == "NetworkReady")?;
    (!c.status).then(|| {
        format!(
            "container runtime network not ready: NetworkReady=false reason:{} message:{}",
            c.reason, c.message
        )
    })
}

/// What starting containers of one pod shares.
struct StartCtx<'a> {
    pod: &'a Arc<Pod>,
    /// The pod with its IPs filled in, for the environment (downward API).
    env_pod: Pod,
    rp: &'a RuntimePod,
    sandbox_id: String,
    sandbox: cri::PodSandboxConfig,
    ips: Vec<String>,
    volumes: &'a PodVolumes,
    secrets: Option<Vec<Secret>>,
}

/// Start one container: back-off check, image, config, create, start, postStart.
async fn start_container(
    m: &Manager,
    cx: &mut StartCtx<'_>,
    c: &Container,
) -> Result<(), StartError> {
    let pod: &Pod = cx.pod;
    let k = &m.k;
    let cref = container_ref(pod, &c.name);

    // The crash back-off, counted from when the last instance exited.
    if let Some(last) = cx
        .rp
        .containers
        .iter()
        .find(|s| s.name == c.name && s.state() == CState::Exited)
    {
        let key = backoff_key(pod, c);
        let now = now_nanos();
        let mut b = m.crash.lock();
        if let Some(left) = b.remaining(&key, last.finished_at, now) {
            let current = b.get(&key);
            drop(b);
            container_event(
                m,
                pod,
                &c.name,
                WARNING,
                "BackOff",
                format!(
                    "Back-off restarting failed container {} in pod {}",
                    c.name,
                    format_pod(pod)
                ),
            );
            return Err(StartError {
                reason: CRASH_LOOP_BACK_OFF.into(),
                message: format!(
                    "back-off {} restarting failed container={} pod={}",
                    go_duration(current),
                    c.name,
                    format_pod(pod)
                ),
                retry: Some(left),
            });
        }
        b.next(&key, last.finished_at, now);
    }

    let image_ref = match m
        .images
        .ensure(k, pod, c, &cref, &mut cx.secrets, Some(&cx.sandbox))
        .await
    {
        Ok(r) => r,
        Err(e) => {
            container_event(
                m,
                pod,
                &c.name,
                WARNING,
                "Failed",
                format!("Error: {}", e.reason),
            );
            let retry = (e.reason == super::images::ERR_IMAGE_PULL
                || e.reason == super::images::IMAGE_PULL_BACKOFF)
                .then(|| {
                    m.images
                        .retry_in(pod_uid(pod), c.image.as_deref().unwrap_or_default())
                });
            return Err(StartError {
                reason: e.reason.into(),
                message: e.message,
                retry: retry.flatten(),
            });
        }
    };

    let restart_count = match cx.rp.find(&c.name) {
        Some(s) => s.restart_count + 1,
        None => restart_count_from_logs(k, pod, &c.name),
    };

    let config_error = |msg: String| {
        container_event(m, pod, &c.name, WARNING, "Failed", format!("Error: {msg}"));
        StartError::new(CREATE_CONTAINER_CONFIG_ERROR, msg)
    };
    let env = crate::env::container_env_with_ips(k, &cx.env_pod, c, &cx.ips)
        .await
        .map_err(config_error)?;
    let (uid, username) = image_user(k, &image_ref).await.map_err(config_error)?;
    verify_run_as_non_root(pod, c, uid, &username).map_err(config_error)?;
    let config = container_config(
        k,
        pod,
        c,
        &ConfigInputs {
            restart_count,
            image_ref: &image_ref,
            pod_ips: &cx.ips,
            env: &env,
            volumes: cx.volumes,
            memory_capacity: m.memory_capacity,
        },
    )
    .map_err(config_error)?;

    let id = match k
        .runtime
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: cx.sandbox_id.clone(),
            config: Some(config),
            sandbox_config: Some(cx.sandbox.clone()),
        })
        .await
    {
        Ok(r) => r.container_id,
        Err(e) => {
            let msg = e.message().to_string();
            container_event(m, pod, &c.name, WARNING, "Failed", format!("Error: {msg}"));
            return Err(StartError::new(CREATE_CONTAINER_ERROR, msg));
        }
    };
    container_event(
        m,
        pod,
        &c.name,
        NORMAL,
        "Created",
        format!("Created container {}", c.name),
    );

    if let Err(e) = k
        .runtime
        .start_container(cri::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
    {
        let msg = e.message().replace(&id, &c.name);
        container_event(m, pod, &c.name, WARNING, "Failed", format!("Error: {msg}"));
        return Err(StartError::new(RUN_CONTAINER_ERROR, msg));
    }
    container_event(
        m,
        pod,
        &c.name,
        NORMAL,
        "Started",
        format!("Started container {}", c.name),
    );
    m.probes
        .container_started(cx.pod, &c.name, &id, cx.ips.first().map(String::as_str));
    m.probed.lock().insert(id.clone(), pod_uid(pod).to_string());

    if let Some(post) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
        if let Err(msg) = crate::probes::run_hook(k, pod, &c.name, &id, post).await {
            tracing::info!(pod = %format_pod(pod), container = %c.name, error = %msg, "postStart hook failed");
            container_event(
                m,
                pod,
                &c.name,
                WARNING,
                "FailedPostStartHook",
                "PostStartHook failed".into(),
            );
            if let Err(e) = kill_container(
                m,
                pod,
                &id,
                &c.name,
                "FailedPostStartHook",
                KillReason::PostStartHook,
                None,
            )
            .await
            {
                tracing::warn!(error = %e, "cannot kill a container whose postStart hook failed");
            }
            return Err(StartError::new(POST_START_HOOK_ERROR, msg));
        }
    }
    Ok(())
}

/// The pod as the environment sees it: with its IPs and the node's.
fn env_pod(m: &Manager, pod: &Pod, ips: &[String]) -> Pod {
    let mut p = pod.clone();
    let st = p.status.get_or_insert_with(Default::default);
    if let Some(ip) = ips.first() {
        st.pod_ip = Some(ip.clone());
        st.pod_ips = Some(ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect());
    }
    if let Some(h) = m.host_ips().first() {
        st.host_ip = Some(h.clone());
    }
    p
}

/// Bring the pod's runtime state to its spec.
pub async fn sync_runtime(
    m: &Manager,
    pod: &Arc<Pod>,
    rp: &RuntimePod,
    volumes: &PodVolumes,
) -> SyncOutcome {
    let mut out = SyncOutcome::default();
    gc_dead_containers(m, pod, rp).await;
    let actions = compute_pod_actions(pod, rp, &*m.probes);
    if actions.is_noop() {
        return out;
    }
    out.changed = true;
    let uid = pod_uid(pod).to_string();

    if actions.create_sandbox && !actions.sandbox_id.is_empty() {
        m.k.recorder.normal(
            &**pod,
            "SandboxChanged",
            "Pod sandbox changed, it will be killed and re-created.",
        );
    }
    if actions.kill_pod {
        if let Err(e) = kill_pod(m, pod, rp, None).await {
            tracing::warn!(pod = %format_pod(pod), error = %e, "killing the pod failed");
            out.retry_in(Duration::from_secs(2));
            return out;
        }
        if actions.create_sandbox {
            purge_init_containers(m, pod, rp).await;
        }
    } else {
        for kill in &actions.containers_to_kill {
            if let Err(e) = kill_container(
                m,
                pod,
                &kill.id,
                &kill.name,
                &kill.message,
                kill.reason,
                None,
            )
            .await
            {
                tracing::warn!(pod = %format_pod(pod), container = %kill.name, error = %e, "killing a container failed");
                out.retry_in(Duration::from_secs(2));
                return out;
            }
        }
    }
    prune_init_containers(m, pod, rp).await;

    let mut ips = rp.ips.clone();
    let mut sandbox_id = actions.sandbox_id.clone();
    if actions.create_sandbox && !host_network(pod) {
        if let Some(err) = network_not_ready(m).await {
            m.k.recorder.warning(
                &**pod,
                "NetworkNotReady",
                format!("network is not ready: {err}"),
            );
            out.retry_in(Duration::from_secs(2));
            return out;
        }
    }
    if actions.create_sandbox {
        match create_sandbox(m, pod, actions.attempt).await {
            Ok((id, new_ips)) => {
                sandbox_id = id;
                if !host_network(pod) {
                    ips = new_ips;
                }
            }
            Err(e) => {
                tracing::warn!(pod = %format_pod(pod), error = %e, "creating the sandbox failed");
                out.retry_in(Duration::from_secs(5));
                return out;
            }
        }
    }
    if actions.init_containers_to_start.is_empty() && actions.containers_to_start.is_empty() {
        return out;
    }
    if host_network(pod) {
        ips = m.host_ips();
    }

    let sandbox = sandbox_config(&m.k, pod, actions.attempt, |msg| {
        m.k.recorder
            .warning(&**pod, "MissingClusterDNS", msg.to_string())
    });
    let mut cx = StartCtx {
        pod,
        env_pod: env_pod(m, pod, &ips),
        rp,
        sandbox_id,
        sandbox,
        ips,
        volumes,
        secrets: None,
    };
    let inits = init_containers(pod);
    for &i in &actions.init_containers_to_start {
        let Some(c) = inits.get(i) else { continue };
        match start_container(m, &mut cx, c).await {
            Ok(()) => m.set_reason(&uid, &c.name, None),
            Err(e) => {
                out.retry_in(e.retry.unwrap_or(START_RETRY));
                m.set_reason(&uid, &c.name, Some((e.reason, e.message)));
                if !is_restartable_init(c) {
                    return out;
                }
            }
        }
    }
    let regular = containers(pod);
    for &i in &actions.containers_to_start {
        let Some(c) = regular.get(i) else { continue };
        match start_container(m, &mut cx, c).await {
            Ok(()) => m.set_reason(&uid, &c.name, None),
            Err(e) => {
                out.retry_in(e.retry.unwrap_or(START_RETRY));
                m.set_reason(&uid, &c.name, Some((e.reason, e.message)));
            }
        }
    }
    out
}
