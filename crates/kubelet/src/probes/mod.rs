//! Probes (liveness, readiness, startup: exec, httpGet, tcpSocket, grpc) and lifecycle hooks
//! (postStart, preStop).
//!
//! Every running container with probes gets one worker task per probe type. A worker
//! probes every periodSeconds (after initialDelaySeconds), and its result only changes
//! after successThreshold successes or failureThreshold failures in a row. Readiness
//! starts as failure, liveness as success, startup as unknown; until the startup probe
//! succeeds the other two do not run. Results are kept per container ID; a change asks
//! the pod worker to sync the pod ([`Resync`]), which reads them through
//! [`Probes::ready`], [`Probes::started`] and [`Probes::failed`]. A failed liveness or
//! startup probe puts its worker on hold until the container is replaced.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod, Probe};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::Kubelet;

pub mod gofmt;
mod hooks;
pub mod net;
pub mod prober;
#[cfg(test)]
mod tests;

pub use hooks::pod_label;
pub use prober::{Outcome, ProbeError};

/// Tells the pod worker of pod `uid` to sync now (a probe result changed).
pub type Resync = Arc<dyn Fn(&str) + Send + Sync>;

/// How often a probe runs unless periodSeconds says otherwise.
const DEFAULT_PERIOD: i32 = 10;
/// One second of probe scheduling (periods, initial delays); shortened in unit tests.
#[cfg(not(test))]
const SECOND: Duration = Duration::from_secs(1);
#[cfg(test)]
const SECOND: Duration = Duration::from_millis(200);
/// How many times a probe that could not run is retried at once (Kubernetes: 3).
const MAX_PROBE_RETRIES: usize = 3;

/// The three kinds of probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeType {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeType {
    const ALL: [ProbeType; 3] = [
        ProbeType::Startup,
        ProbeType::Readiness,
        ProbeType::Liveness,
    ];

    /// `Liveness`, as events name it.
    pub fn title(self) -> &'static str {
        match self {
            ProbeType::Liveness => "Liveness",
            ProbeType::Readiness => "Readiness",
            ProbeType::Startup => "Startup",
        }
    }

    /// The container's probe of this kind.
    pub fn spec(self, c: &Container) -> Option<&Probe> {
        match self {
            ProbeType::Liveness => c.liveness_probe.as_ref(),
            ProbeType::Readiness => c.readiness_probe.as_ref(),
            ProbeType::Startup => c.startup_probe.as_ref(),
        }
    }

    /// The result before the first probe.
    fn initial(self) -> ProbeResult {
        match self {
            ProbeType::Liveness => ProbeResult::Success,
            ProbeType::Readiness => ProbeResult::Failure,
            ProbeType::Startup => ProbeResult::Unknown,
        }
    }
}

/// A probe's standing result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeResult {
    Unknown,
    Success,
    Failure,
}

/// One probed container.
struct Entry {
    uid: String,
    container: String,
    /// A restartable init container (sidecar): its kill messages say "Init container".
    sidecar: bool,
    /// restartPolicy Never (and not a sidecar): a killed container stays dead.
    restart_never: bool,
    results: HashMap<ProbeType, ProbeResult>,
    /// Probe-level terminationGracePeriodSeconds of the liveness and startup probes.
    grace: HashMap<ProbeType, i64>,
    readiness_trigger: Arc<Notify>,
    tasks: Vec<AbortHandle>,
}

struct Inner {
    k: Arc<Kubelet>,
    resync: Resync,
    /// When the prober started: workers started soon after spread their first probe over
    /// a period, so a restarted kubelet does not probe everything at once.
    born: Instant,
    entries: Mutex<HashMap<String, Entry>>,
    /// Events recorded in unit tests: (type, reason, message).
    #[cfg(test)]
    events: Mutex<Vec<(String, String, String)>>,
}

impl Inner {
    /// Record a result; true when it changed.
    fn set(&self, container_id: &str, kind: ProbeType, result: ProbeResult) -> Option<String> {
        let mut entries = self.entries.lock();
        let entry = entries.get_mut(container_id)?;
        let old = entry.results.insert(kind, result);
        (old != Some(result)).then(|| entry.uid.clone())
    }

    fn started(&self, container_id: &str) -> bool {
        let entries = self.entries.lock();
        match entries.get(container_id) {
            Some(e) => e
                .results
                .get(&ProbeType::Startup)
                .is_none_or(|r| *r == ProbeResult::Success),
            None => true,
        }
    }

    fn event(
        &self,
        pod: &Pod,
        container: &str,
        type_: &'static str,
        reason: &str,
        message: String,
    ) {
        #[cfg(test)]
        {
            let _ = (pod, container);
            self.events
                .lock()
                .push((type_.to_string(), reason.to_string(), message));
        }
        #[cfg(not(test))]
        {
            let mut regarding = capstan_runtime::events::object_ref(pod);
            regarding.field_path = Some(field_path(pod, container));
            self.k.recorder.record(regarding, type_, reason, message);
        }
    }
}

/// `spec.containers{NAME}` or `spec.initContainers{NAME}`.
pub fn field_path(pod: &Pod, container: &str) -> String {
    let init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == container));
    let regular = pod
        .spec
        .as_ref()
        .is_some_and(|s| s.containers.iter().any(|c| c.name == container));
    if init && !regular {
        format!("spec.initContainers{{{container}}}")
    } else {
        format!("spec.containers{{{container}}}")
    }
}

/// The probers of every running container on the node.
pub struct Probes {
    inner: Arc<Inner>,
}

impl Drop for Probes {
    fn drop(&mut self) {
        for (_, e) in self.inner.entries.lock().drain() {
            e.tasks.iter().for_each(AbortHandle::abort);
        }
    }
}

impl Probes {
    pub fn new(k: Arc<Kubelet>, resync: Resync) -> Arc<Probes> {
        Probes::born_at(k, resync, Instant::now())
    }

    fn born_at(k: Arc<Kubelet>, resync: Resync, born: Instant) -> Arc<Probes> {
        Arc::new(Probes {
            inner: Arc::new(Inner {
                k,
                resync,
                born,
                entries: Mutex::new(HashMap::new()),
                #[cfg(test)]
                events: Mutex::new(Vec::new()),
            }),
        })
    }

    /// A container of `pod` started (or the kubelet found it running): start its probers.
    /// Calling it again for the same container ID does nothing.
    pub fn container_started(
        &self,
        pod: &Arc<Pod>,
        container: &str,
        container_id: &str,
        pod_ip: Option<&str>,
    ) {
        let Some(spec) = hooks::find_container(pod, container) else {
            return;
        };
        let kinds: Vec<ProbeType> = ProbeType::ALL
            .into_iter()
            .filter(|t| t.spec(&spec).is_some())
            .collect();
        if kinds.is_empty() {
            return;
        }
        let mut entries = self.inner.entries.lock();
        if entries.contains_key(container_id) {
            return;
        }
        let sidecar = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.name == container))
            && spec.restart_policy.as_deref() == Some("Always");
        let restart_never = !sidecar
            && pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("Never");
        let trigger = Arc::new(Notify::new());
        let mut entry = Entry {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            container: container.to_string(),
            sidecar,
            restart_never,
            results: HashMap::new(),
            grace: HashMap::new(),
            readiness_trigger: trigger.clone(),
            tasks: Vec::new(),
        };
        let noticed = Instant::now();
        for kind in kinds {
            let Some(probe) = kind.spec(&spec).cloned() else {
                continue;
            };
            entry.results.insert(kind, kind.initial());
            if let Some(g) = probe.termination_grace_period_seconds {
                entry.grace.insert(kind, g);
            }
            let worker = Worker {
                inner: self.inner.clone(),
                kind,
                container_id: container_id.to_string(),
                pod: pod.clone(),
                container: spec.clone(),
                spec: probe,
                pod_ip: pod_ip.unwrap_or("").to_string(),
                trigger: (kind == ProbeType::Readiness).then(|| trigger.clone()),
                started_at: noticed,
                last: None,
                run: 0,
                on_hold: false,
            };
            entry.tasks.push(tokio::spawn(worker.run()).abort_handle());
        }
        entries.insert(container_id.to_string(), entry);
    }

    /// A container stopped: stop its probers and forget its results.
    pub fn container_stopped(&self, container_id: &str) {
        if let Some(e) = self.inner.entries.lock().remove(container_id) {
            e.tasks.iter().for_each(AbortHandle::abort);
        }
    }

    /// The pod is gone: stop all its probers.
    pub fn pod_removed(&self, uid: &str) {
        let mut entries = self.inner.entries.lock();
        entries.retain(|_, e| {
            if e.uid == uid {
                e.tasks.iter().for_each(AbortHandle::abort);
                false
            } else {
                true
            }
        });
    }

    /// The readiness result: true once the readiness probe succeeded (or when there is
    /// none and the container is started). A container not yet ready has its readiness
    /// probe run right away.
    pub fn ready(&self, container_id: &str) -> bool {
        let entries = self.inner.entries.lock();
        let Some(e) = entries.get(container_id) else {
            return true;
        };
        if e.results
            .get(&ProbeType::Startup)
            .is_some_and(|r| *r != ProbeResult::Success)
        {
            return false;
        }
        match e.results.get(&ProbeType::Readiness) {
            None | Some(ProbeResult::Success) => true,
            Some(_) => {
                e.readiness_trigger.notify_one();
                false
            }
        }
    }

    /// The startup result: true once the startup probe succeeded (or when there is none).
    pub fn started(&self, container_id: &str) -> bool {
        self.inner.started(container_id)
    }

    /// Some(message) when the liveness or startup probe failed failureThreshold times: the
    /// worker kills the container (the message goes on the Killing event) and restarts it as
    /// restartPolicy says.
    pub fn failed(&self, container_id: &str) -> Option<String> {
        let entries = self.inner.entries.lock();
        let e = entries.get(container_id)?;
        let kind = failed_kind(e)?;
        let what = if kind == ProbeType::Liveness {
            "liveness"
        } else {
            "startup"
        };
        Some(if e.sidecar {
            format!("Init container {} failed {what} probe", e.container)
        } else if e.restart_never {
            format!("Container {} failed {what} probe", e.container)
        } else {
            format!(
                "Container {} failed {what} probe, will be restarted",
                e.container
            )
        })
    }

    /// The grace period to kill a container that [`failed`](Probes::failed) with: the failed
    /// probe's own terminationGracePeriodSeconds when it sets one (a pod being deleted
    /// uses its deletion grace period instead, as Kubernetes does).
    pub fn failed_grace_period(&self, container_id: &str) -> Option<i64> {
        let entries = self.inner.entries.lock();
        let e = entries.get(container_id)?;
        e.grace.get(&failed_kind(e)?).copied()
    }

    /// The standing result of one probe of a container (None: no such probe).
    pub fn result(&self, container_id: &str, kind: ProbeType) -> Option<ProbeResult> {
        let entries = self.inner.entries.lock();
        entries.get(container_id)?.results.get(&kind).copied()
    }

    #[cfg(test)]
    fn events(&self) -> Vec<(String, String, String)> {
        self.inner.events.lock().clone()
    }
}

fn failed_kind(e: &Entry) -> Option<ProbeType> {
    [ProbeType::Liveness, ProbeType::Startup]
        .into_iter()
        .find(|k| e.results.get(k) == Some(&ProbeResult::Failure))
}

/// One probe of one container.
struct Worker {
    inner: Arc<Inner>,
    kind: ProbeType,
    container_id: String,
    pod: Arc<Pod>,
    container: Container,
    spec: Probe,
    pod_ip: String,
    trigger: Option<Arc<Notify>>,
    /// When the container started (from the runtime when it knows).
    started_at: Instant,
    /// The last result and how many times in a row it came.
    last: Option<ProbeResult>,
    run: i32,
    /// A failed liveness/startup probe waits for a new container.
    on_hold: bool,
}

impl Worker {
    async fn run(mut self) {
        self.started_at = self.container_start().await;
        let period = SECOND
            * self
                .spec
                .period_seconds
                .filter(|p| *p > 0)
                .unwrap_or(DEFAULT_PERIOD) as u32;
        if period > self.inner.born.elapsed() {
            tokio::time::sleep(period.mul_f64(rand::random::<f64>())).await;
        }
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while self.probe_once().await {
            match &self.trigger {
                Some(t) => {
                    tokio::select! {
                        _ = ticker.tick() => {}
                        _ = t.notified() => {}
                    }
                }
                None => {
                    ticker.tick().await;
                }
            }
        }
    }

    /// When the container started, by the runtime's clock; when the runtime cannot say,
    /// when the kubelet noticed it.
    async fn container_start(&self) -> Instant {
        let status = self
            .inner
            .k
            .runtime
            .container_status(capstan_cri::v1::ContainerStatusRequest {
                container_id: self.container_id.clone(),
                verbose: false,
            })
            .await;
        let started_ns = status
            .ok()
            .and_then(|s| s.status)
            .map(|s| s.started_at)
            .filter(|t| *t > 0);
        let Some(ns) = started_ns else {
            return self.started_at;
        };
        let started = std::time::UNIX_EPOCH + Duration::from_nanos(ns as u64);
        match std::time::SystemTime::now().duration_since(started) {
            Ok(age) => Instant::now().checked_sub(age).unwrap_or(self.started_at),
            Err(_) => Instant::now(),
        }
    }

    /// Probe once and record the result. False: this worker is done.
    async fn probe_once(&mut self) -> bool {
        let meta = &self.pod.metadata;
        let current = self
            .inner
            .k
            .pods
            .get(
                meta.namespace.as_deref().unwrap_or(""),
                meta.name.as_deref().unwrap_or(""),
            )
            .filter(|p| p.metadata.uid == meta.uid);
        if let Some(p) = &current {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded") | Some("Failed")) {
                return false;
            }
        }
        if self.on_hold {
            return true;
        }
        let deleting = current
            .as_ref()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some());
        if deleting && self.kind != ProbeType::Readiness {
            // A pod shutting down is not killed for failing probes.
            if let Some(uid) = self
                .inner
                .set(&self.container_id, self.kind, ProbeResult::Success)
            {
                (self.inner.resync)(&uid);
            }
            return false;
        }
        let delay = self.spec.initial_delay_seconds.unwrap_or(0).max(0) as u32;
        if self.started_at.elapsed() < SECOND * delay {
            return true;
        }
        if self.inner.started(&self.container_id) {
            if self.kind == ProbeType::Startup {
                return false;
            }
        } else if self.kind != ProbeType::Startup {
            return true;
        }

        let label = hooks::pod_label(&self.pod);
        let mut outcome = Err(ProbeError {
            state: "unknown",
            message: String::new(),
        });
        for _ in 0..MAX_PROBE_RETRIES {
            outcome = prober::run(
                &self.inner.k,
                &self.spec,
                &self.container,
                &self.container_id,
                &self.pod_ip,
                &label,
            )
            .await;
            if outcome.is_ok() {
                break;
            }
        }
        if !self.inner.entries.lock().contains_key(&self.container_id) {
            return false;
        }
        let title = self.kind.title();
        let warn = capstan_runtime::events::WARNING;
        let result = match outcome {
            Err(e) => {
                self.inner.event(
                    &self.pod,
                    &self.container.name,
                    warn,
                    "Unhealthy",
                    format!(
                        "{title} probe errored and resulted in {} state: {}",
                        e.state, e.message
                    ),
                );
                return true;
            }
            Ok(Outcome::Success(_)) => ProbeResult::Success,
            Ok(Outcome::Warning(msg)) => {
                self.inner.event(
                    &self.pod,
                    &self.container.name,
                    warn,
                    "ProbeWarning",
                    format!("{title} probe warning: {msg}"),
                );
                ProbeResult::Success
            }
            Ok(Outcome::Failure(msg)) => {
                self.inner.event(
                    &self.pod,
                    &self.container.name,
                    warn,
                    "Unhealthy",
                    format!("{title} probe failed: {msg}"),
                );
                ProbeResult::Failure
            }
        };
        if self.last == Some(result) {
            self.run += 1;
        } else {
            self.last = Some(result);
            self.run = 1;
        }
        let threshold = match result {
            ProbeResult::Failure => self.spec.failure_threshold.filter(|t| *t > 0).unwrap_or(3),
            _ => self.spec.success_threshold.filter(|t| *t > 0).unwrap_or(1),
        };
        if self.run < threshold {
            return true;
        }
        if let Some(uid) = self.inner.set(&self.container_id, self.kind, result) {
            (self.inner.resync)(&uid);
        }
        if self.kind != ProbeType::Readiness && result == ProbeResult::Failure {
            self.on_hold = true;
            self.run = 0;
        }
        true
    }
}

/// Run a postStart or preStop handler (exec, httpGet, tcpSocket, sleep) against a
/// container. An error is the handler's failure message (Kubernetes' wording, e.g. `Exec
/// lifecycle hook ([sh -c exit 1]) for Container "c" in Pod "p_ns(uid)" failed - error:
/// ..., message: ""`). tcpSocket handlers fail, as in Kubernetes. A sleep handler takes its
/// seconds; the caller bounds a preStop hook by the grace period by dropping the future.
pub async fn run_hook(
    k: &Kubelet,
    pod: &Pod,
    container: &str,
    container_id: &str,
    handler: &LifecycleHandler,
) -> Result<(), String> {
    hooks::run(k, pod, container, container_id, handler).await
}
