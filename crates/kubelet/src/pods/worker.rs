//! One worker per pod UID (Kubernetes' pod_workers.go): it acts only on the newest spec it
//! has and moves the pod through syncing (run it), terminating (stop it within its grace
//! period) and terminated (final status, volumes, deletion from the API).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::manager::Manager;
use super::runtime::{pod_status, CState, RuntimePod};
use super::status::{is_terminal, terminate};
use super::sync::{kill_pod, remove_container, sync_runtime};
use super::util::{format_pod, grpc_error, now_nanos, pod_name, pod_namespace, pod_uid, time_secs};
use capstan_cri::v1 as cri;

const DEADLINE_REASON: &str = "DeadlineExceeded";
const DEADLINE_MESSAGE: &str = "Pod was active on the node longer than the specified deadline";
const RETRY: Duration = Duration::from_secs(2);

pub struct Worker {
    pub uid: String,
    namespace: String,
    name: String,
    /// The newest version of the pod seen (kept after it is deleted from the API).
    pod: Mutex<Arc<Pod>>,
    notify: Notify,
    /// A static pod: it comes from [`Manager::statics`], not from the API.
    static_pod: bool,
}

impl Worker {
    pub fn new(pod: Arc<Pod>) -> Arc<Worker> {
        Worker::with_source(pod, false)
    }

    /// A worker for an API pod or (`static_pod`) a static pod.
    pub fn with_source(pod: Arc<Pod>, static_pod: bool) -> Arc<Worker> {
        Arc::new(Worker {
            uid: pod_uid(&pod).to_string(),
            namespace: pod_namespace(&pod).to_string(),
            name: pod_name(&pod).to_string(),
            pod: Mutex::new(pod),
            notify: Notify::new(),
            static_pod,
        })
    }

    pub fn wake(&self) {
        self.notify.notify_one();
    }

    /// The newest version of the pod seen.
    pub fn pod(&self) -> Arc<Pod> {
        self.pod.lock().clone()
    }

    /// A newer version of the pod arrived.
    pub fn update(&self, pod: Arc<Pod>) {
        *self.pod.lock() = pod;
        self.wake();
    }

    /// The pod as the API has it now, or the last version seen and `true` when it is gone.
    fn current(&self, m: &Manager) -> (Arc<Pod>, bool) {
        if self.static_pod {
            return match m.statics.get(&self.uid) {
                Some(p) => {
                    *self.pod.lock() = p.clone();
                    (p, false)
                }
                None => (self.pod.lock().clone(), true),
            };
        }
        match m
            .k
            .pods
            .get(&self.namespace, &self.name)
            .filter(|p| pod_uid(p) == self.uid)
        {
            Some(p) => {
                *self.pod.lock() = p.clone();
                (p, false)
            }
            None => (self.pod.lock().clone(), true),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Syncing,
    Terminating,
    Terminated,
    /// Admission refused the pod: nothing runs; it is deleted when asked to be.
    Rejected,
}

enum Outcome {
    /// Sync again after this long (or when woken).
    Again(Duration),
    /// The pod reached a terminal phase: stop it.
    Terminal,
}

/// What the terminated state has done already.
#[derive(Default)]
struct Done {
    volumes_cleaned: bool,
    delete_sent: bool,
}

/// Run the worker until its pod is gone and cleaned up. Each state's work is a boxed future
/// of its own, so that the task of a worker waiting for its next sync (most of them, most of
/// the time) holds this loop's few variables rather than room for the largest sync (11 KB).
pub async fn run(m: Arc<Manager>, w: Arc<Worker>) {
    let mut state = State::Syncing;
    let mut admitted = false;
    let mut grace: i64 = 0;
    let mut done = Done::default();
    let mut wait = Duration::ZERO;
    loop {
        if !wait.is_zero() {
            tokio::select! {
                _ = w.notify.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
        let (pod, gone) = w.current(&m);
        wait = match state {
            State::Syncing => {
                if gone || pod.metadata.deletion_timestamp.is_some() {
                    state = State::Terminating;
                    Duration::ZERO
                } else if !admitted
                    && !is_terminal(pod.status.as_ref().and_then(|s| s.phase.as_deref()))
                {
                    match m.admit(&pod) {
                        Ok(()) => admitted = true,
                        Err(r) => {
                            tracing::info!(pod = %format_pod(&pod), reason = %r.reason, "pod rejected");
                            if let Err(e) = Box::pin(m.reject(&pod, &r)).await {
                                tracing::warn!(pod = %format_pod(&pod), error = %e, "status write failed");
                            }
                            state = State::Rejected;
                        }
                    }
                    Duration::ZERO
                } else {
                    match Box::pin(sync_pod(&m, &pod)).await {
                        Ok(Outcome::Terminal) => {
                            state = State::Terminating;
                            Duration::ZERO
                        }
                        Ok(Outcome::Again(d)) => d,
                        Err(e) => {
                            tracing::warn!(pod = %format_pod(&pod), error = %e, "pod sync failed");
                            Duration::from_secs(5)
                        }
                    }
                }
            }
            State::Terminating => {
                grace = effective_grace(grace, &pod);
                match Box::pin(sync_terminating(&m, &pod, gone, grace)).await {
                    Ok(()) => {
                        m.active.lock().remove(&w.uid);
                        state = State::Terminated;
                        Duration::ZERO
                    }
                    Err(e) => {
                        tracing::warn!(pod = %format_pod(&pod), error = %e, "pod termination failed");
                        RETRY
                    }
                }
            }
            State::Rejected => {
                if gone {
                    finish(&m, &w);
                    return;
                }
                if pod.metadata.deletion_timestamp.is_some() && !done.delete_sent {
                    match Box::pin(m.delete_pod(&pod)).await {
                        Ok(()) => done.delete_sent = true,
                        Err(e) => {
                            tracing::warn!(pod = %format_pod(&pod), error = %e, "deleting a rejected pod failed")
                        }
                    }
                }
                if done.delete_sent {
                    RETRY
                } else {
                    m.resync()
                }
            }
            State::Terminated => match Box::pin(sync_terminated(&m, &pod, gone, &mut done)).await {
                Ok(true) => {
                    finish(&m, &w);
                    return;
                }
                Ok(false) => m.resync(),
                Err(e) => {
                    tracing::warn!(pod = %format_pod(&pod), error = %e, "terminated pod cleanup failed");
                    RETRY
                }
            },
        };
    }
}

/// The worker is done: drop it and everything known about its pod.
fn finish(m: &Manager, w: &Arc<Worker>) {
    let mut ws = m.workers.lock();
    if ws.get(&w.uid).is_some_and(|x| Arc::ptr_eq(x, w)) {
        ws.remove(&w.uid);
    }
    drop(ws);
    m.forget(&w.uid);
}

/// The grace period for stopping the pod: it may only shrink (deletionGracePeriodSeconds),
/// defaults to terminationGracePeriodSeconds, and is at least 1 s.
fn effective_grace(current: i64, pod: &Pod) -> i64 {
    let mut g = current;
    if let Some(d) = pod.metadata.deletion_grace_period_seconds {
        if g == 0 || d < g {
            g = d;
        }
    }
    if g == 0 {
        g = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
    }
    g.max(1)
}

/// Tell the probers about running containers they do not know (found after a restart) and
/// about containers that stopped.
fn track_probes(m: &Manager, pod: &Arc<Pod>, rp: &RuntimePod) {
    let uid = pod_uid(pod);
    let running: Vec<(&str, &str)> = rp
        .containers
        .iter()
        .filter(|c| c.state() == CState::Running)
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    let mut probed = m.probed.lock();
    let stopped: Vec<String> = probed
        .iter()
        .filter(|(id, u)| u.as_str() == uid && !running.iter().any(|(r, _)| r == id))
        .map(|(id, _)| id.clone())
        .collect();
    for id in stopped {
        probed.remove(&id);
        m.probes.container_stopped(&id);
    }
    for (id, name) in running {
        if !probed.contains_key(id) {
            probed.insert(id.to_string(), uid.to_string());
            m.probes
                .container_started(pod, name, id, rp.ips.first().map(String::as_str));
        }
    }
}

/// Some((reason, message)) once the pod has run longer than activeDeadlineSeconds, with the
/// time left otherwise.
fn active_deadline(m: &Manager, pod: &Pod) -> (Option<(String, String)>, Option<Duration>) {
    let Some(limit) = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds) else {
        return (None, None);
    };
    let Some(start) = m.old_status(pod).start_time else {
        return (None, None);
    };
    let elapsed = now_nanos() / 1_000_000_000 - time_secs(&start);
    if elapsed >= limit {
        m.k.recorder.normal(pod, DEADLINE_REASON, DEADLINE_MESSAGE);
        (
            Some((DEADLINE_REASON.into(), DEADLINE_MESSAGE.into())),
            None,
        )
    } else {
        (None, Some(Duration::from_secs((limit - elapsed) as u64)))
    }
}

/// Run the pod: status first, then volumes, then the runtime.
async fn sync_pod(m: &Manager, pod: &Arc<Pod>) -> Result<Outcome, String> {
    let uid = pod_uid(pod);
    let rp = pod_status(&*m.k.runtime, uid)
        .await
        .map_err(|e| grpc_error(&e))?;
    track_probes(m, pod, &rp);
    let (evict, deadline_in) = active_deadline(m, pod);
    let status = m.generate(pod, &rp, false, evict);
    let terminal = is_terminal(status.phase.as_deref());
    if let Err(e) = m.set_status(pod, status, false).await {
        tracing::debug!(pod = %format_pod(pod), error = %e, "status write failed");
    }
    if terminal {
        return Ok(Outcome::Terminal);
    }
    if m.statics.contains(uid) {
        crate::static_pods::sync_mirror(m, pod).await;
    }

    let dir = m.k.pod_dir(uid);
    if let Err(e) = std::fs::create_dir_all(dir.join("containers")) {
        return Err(format!(
            "cannot make the pod directory {}: {e}",
            dir.display()
        ));
    }
    let volumes = match crate::volumes::prepare(&m.k, pod).await {
        Ok(v) => v,
        Err(msg) => {
            m.k.recorder.warning(&**pod, "FailedMount", msg);
            return Ok(Outcome::Again(Duration::from_secs(5)));
        }
    };
    let out = sync_runtime(m, pod, &rp, &volumes).await;
    let mut again = m.resync();
    if let Some(d) = out.requeue {
        again = again.min(d + Duration::from_millis(100));
    }
    if let Some(d) = deadline_in {
        again = again.min(d + Duration::from_millis(100));
    }
    if out.changed {
        let rp = pod_status(&*m.k.runtime, uid)
            .await
            .map_err(|e| grpc_error(&e))?;
        track_probes(m, pod, &rp);
        let status = m.generate(pod, &rp, false, None);
        let terminal = is_terminal(status.phase.as_deref());
        if let Err(e) = m.set_status(pod, status, false).await {
            tracing::debug!(pod = %format_pod(pod), error = %e, "status write failed");
        }
        if terminal {
            return Ok(Outcome::Terminal);
        }
    }
    Ok(Outcome::Again(again))
}

/// Stop every container of the pod within `grace` seconds and its sandbox.
async fn sync_terminating(
    m: &Manager,
    pod: &Arc<Pod>,
    gone: bool,
    grace: i64,
) -> Result<(), String> {
    let uid = pod_uid(pod);
    let rp = pod_status(&*m.k.runtime, uid)
        .await
        .map_err(|e| grpc_error(&e))?;
    if !gone {
        let status = m.generate(pod, &rp, false, None);
        if let Err(e) = m.set_status(pod, status, false).await {
            tracing::debug!(pod = %format_pod(pod), error = %e, "status write failed");
        }
    }
    kill_pod(m, pod, &rp, Some(grace)).await?;
    m.probes.pod_removed(uid);
    m.probed.lock().retain(|_, u| u != uid);
    let rp = pod_status(&*m.k.runtime, uid)
        .await
        .map_err(|e| grpc_error(&e))?;
    let running: Vec<String> = rp
        .containers
        .iter()
        .filter(|c| c.state() == CState::Running)
        .map(|c| c.name.clone())
        .collect();
    if !running.is_empty() {
        return Err(format!(
            "detected running containers after a successful KillPod, CRI violation: {running:?}"
        ));
    }
    Ok(())
}

/// After termination: write the final status, clean the volumes of a deleted pod, delete it
/// from the API, and once it is gone, remove what the runtime still has. Ok(true) when the
/// worker is done.
async fn sync_terminated(
    m: &Manager,
    pod: &Arc<Pod>,
    gone: bool,
    done: &mut Done,
) -> Result<bool, String> {
    let uid = pod_uid(pod);
    let rp = pod_status(&*m.k.runtime, uid)
        .await
        .map_err(|e| grpc_error(&e))?;
    if !gone {
        let status = terminate(pod, &m.generate(pod, &rp, true, None));
        m.set_status(pod, status, true).await?;
    }
    let deleting = gone || pod.metadata.deletion_timestamp.is_some();
    if deleting && !done.volumes_cleaned {
        crate::volumes::cleanup(&m.k, uid)
            .await
            .map_err(|e| format!("cannot clean up the pod's volumes: {e}"))?;
        done.volumes_cleaned = true;
    }
    if !gone && pod.metadata.deletion_timestamp.is_some() && !done.delete_sent {
        m.delete_pod(pod).await?;
        done.delete_sent = true;
    }
    if !gone {
        return Ok(false);
    }
    remove_runtime_objects(m, &rp).await;
    let _ = std::fs::remove_dir_all(super::sandbox::log_directory(&m.k, pod));
    remove_pod_dir(m, uid);
    Ok(true)
}

/// Remove a pod's containers and sandboxes from the runtime.
pub async fn remove_runtime_objects(m: &Manager, rp: &RuntimePod) {
    for c in &rp.containers {
        remove_container(m, &c.id).await;
    }
    for sb in &rp.sandboxes {
        let _ =
            m.k.runtime
                .stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: sb.id.clone(),
                })
                .await;
        if let Err(e) =
            m.k.runtime
                .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                    pod_sandbox_id: sb.id.clone(),
                })
                .await
        {
            if !super::runtime::is_not_found(&e) {
                tracing::warn!(sandbox = %sb.id, error = %e.message(), "cannot remove sandbox");
            }
        }
    }
}

/// Remove what the kubelet itself put in the pod directory, then the directory when empty
/// (volumes are [`crate::volumes::cleanup`]'s).
pub fn remove_pod_dir(m: &Manager, uid: &str) {
    if uid.is_empty() {
        return;
    }
    let dir = m.k.pod_dir(uid);
    let _ = std::fs::remove_file(dir.join("etc-hosts"));
    let _ = std::fs::remove_dir_all(dir.join("containers"));
    let _ = std::fs::remove_dir(dir.join("volumes"));
    let _ = std::fs::remove_dir(&dir);
}
