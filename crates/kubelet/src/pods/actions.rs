//! What a sync must do to bring a pod's runtime state to its spec (Kubernetes'
//! computePodActions): whether the sandbox must be (re)made, which init containers, sidecars
//! and containers to start, which to kill. Pure: it looks at the pod, what the runtime has
//! and the probe results, nothing else.

use k8s_openapi::api::core::v1::{Container, Pod};

use super::runtime::{CState, ContainerInfo, RuntimePod};
use super::util::container_hash;
use capstan_cri::v1 as cri;

/// The probe results the actions and the status depend on.
pub trait ProbeResults {
    /// Readiness (true when there is no readiness probe).
    fn ready(&self, container_id: &str) -> bool;
    /// Startup (true when there is no startup probe).
    fn started(&self, container_id: &str) -> bool;
    /// Some(message) when liveness or startup failed: kill and restart.
    fn failed(&self, container_id: &str) -> Option<String>;
}

impl ProbeResults for crate::probes::Probes {
    fn ready(&self, id: &str) -> bool {
        crate::probes::Probes::ready(self, id)
    }
    fn started(&self, id: &str) -> bool {
        crate::probes::Probes::started(self, id)
    }
    fn failed(&self, id: &str) -> Option<String> {
        crate::probes::Probes::failed(self, id)
    }
}

/// Why a container is killed (decides which grace period applies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KillReason {
    #[default]
    Unknown,
    LivenessProbe,
    StartupProbe,
    PostStartHook,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillInfo {
    pub id: String,
    pub name: String,
    /// The Killing event's message ("" → "Stopping container NAME").
    pub message: String,
    pub reason: KillReason,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every container and the sandbox.
    pub kill_pod: bool,
    pub create_sandbox: bool,
    /// The current sandbox ("" when there is none).
    pub sandbox_id: String,
    /// The attempt number of the sandbox to create.
    pub attempt: u32,
    /// Indexes into spec.initContainers, in order.
    pub init_containers_to_start: Vec<usize>,
    /// Indexes into spec.containers.
    pub containers_to_start: Vec<usize>,
    pub containers_to_kill: Vec<KillInfo>,
}

impl PodActions {
    /// Whether carrying these out changes anything.
    pub fn is_noop(&self) -> bool {
        !self.kill_pod
            && !self.create_sandbox
            && self.init_containers_to_start.is_empty()
            && self.containers_to_start.is_empty()
            && self.containers_to_kill.is_empty()
    }
}

/// A sidecar: an init container with restartPolicy Always.
pub fn is_restartable_init(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

pub fn should_restart_on_failure(pod: &Pod) -> bool {
    restart_policy(pod) != "Never"
}

pub fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

pub fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[])
}

pub fn containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
}

/// Whether a new sandbox is needed, the attempt number for it, and the current sandbox's ID
/// (Kubernetes' PodSandboxChanged).
pub fn sandbox_changed(pod: &Pod, rp: &RuntimePod) -> (bool, u32, String) {
    let Some(newest) = rp.sandboxes.first() else {
        return (true, 0, String::new());
    };
    let ready = cri::PodSandboxState::SandboxReady as i32;
    let attempt = newest.metadata.as_ref().map(|m| m.attempt).unwrap_or(0);
    let ready_count = rp.sandboxes.iter().filter(|s| s.state == ready).count();
    if ready_count > 1 || newest.state != ready {
        return (true, attempt + 1, newest.id.clone());
    }
    let want = if host_network(pod) {
        cri::NamespaceMode::Node as i32
    } else {
        cri::NamespaceMode::Pod as i32
    };
    let have = newest
        .linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.as_ref())
        .map(|o| o.network)
        .unwrap_or(cri::NamespaceMode::Pod as i32);
    if have != want {
        return (true, attempt + 1, String::new());
    }
    if !host_network(pod) && newest.network.as_ref().is_some_and(|n| n.ip.is_empty()) {
        return (true, attempt + 1, newest.id.clone());
    }
    (false, attempt, newest.id.clone())
}

fn container_succeeded(c: &Container, rp: &RuntimePod) -> bool {
    rp.find(&c.name)
        .is_some_and(|s| s.state() == CState::Exited && s.exit_code == 0)
}

fn init_failed(s: &ContainerInfo) -> bool {
    match s.state() {
        CState::Exited => s.exit_code != 0,
        CState::Unknown => true,
        _ => false,
    }
}

/// Whether a container that is not running should be started (again).
pub fn should_container_be_restarted(c: &Container, pod: &Pod, rp: &RuntimePod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(s) = rp.find(&c.name) else {
        return true;
    };
    match s.state() {
        CState::Running => false,
        CState::Unknown | CState::Created => true,
        CState::Exited => {
            if is_restartable_init(c) {
                return true;
            }
            match restart_policy(pod) {
                "Never" => false,
                "OnFailure" => s.exit_code != 0,
                _ => true,
            }
        }
    }
}

/// Whether a regular container has been created (so the pod was initialized).
pub fn any_regular_container_created(pod: &Pod, rp: &RuntimePod) -> bool {
    containers(pod).iter().any(|c| {
        rp.find(&c.name).is_some_and(|s| {
            matches!(
                s.state(),
                CState::Created | CState::Running | CState::Exited
            )
        })
    })
}

fn changed(c: &Container, s: &ContainerInfo) -> bool {
    !s.hash.is_empty() && s.hash != container_hash(c)
}

fn unknown_message(init: bool) -> String {
    if init {
        "Init container is in \"unknown\" state, try killing it before restart".into()
    } else {
        "Container is in \"unknown\" state, try killing it before restart".into()
    }
}

/// The probe failure message, and whether it was the startup probe.
fn probe_failure(
    probes: &dyn ProbeResults,
    id: &str,
    name: &str,
    init: bool,
) -> Option<(String, KillReason)> {
    let msg = probes.failed(id)?;
    let startup = !probes.started(id);
    let reason = if startup {
        KillReason::StartupProbe
    } else {
        KillReason::LivenessProbe
    };
    let msg = if msg.is_empty() {
        format!(
            "{} {name} failed {} probe",
            if init { "Init container" } else { "Container" },
            if startup { "startup" } else { "liveness" }
        )
    } else {
        msg
    };
    Some((msg, reason))
}

/// Compute what to do for `pod` given what the runtime has.
pub fn compute_pod_actions(pod: &Pod, rp: &RuntimePod, probes: &dyn ProbeResults) -> PodActions {
    let (create, attempt, sandbox_id) = sandbox_changed(pod, rp);
    let mut a = PodActions {
        kill_pod: create,
        create_sandbox: create,
        sandbox_id,
        attempt,
        ..Default::default()
    };
    let inits = init_containers(pod);
    let regular = containers(pod);

    if create {
        if !should_restart_on_failure(pod) && attempt != 0 && !rp.containers.is_empty() {
            // Everything ran and nothing is to run again: no new sandbox.
            a.create_sandbox = false;
            return a;
        }
        let to_start: Vec<usize> = regular
            .iter()
            .enumerate()
            .filter(|(_, c)| !(restart_policy(pod) == "OnFailure" && container_succeeded(c, rp)))
            .map(|(i, _)| i)
            .collect();
        if to_start.is_empty() && any_regular_container_created(pod, rp) {
            a.create_sandbox = false;
            return a;
        }
        if !inits.is_empty() {
            a.init_containers_to_start = vec![0];
            return a;
        }
        a.containers_to_start = to_start;
        return a;
    }

    let initialized = compute_init_actions(pod, rp, probes, &mut a);
    if a.kill_pod || !initialized {
        return a;
    }

    let mut keep = 0;
    for (idx, c) in regular.iter().enumerate() {
        let status = rp.find(&c.name);
        let running = status.is_some_and(|s| s.state() == CState::Running);
        if !running {
            if should_container_be_restarted(c, pod, rp) {
                a.containers_to_start.push(idx);
                if let Some(s) = status.filter(|s| s.state() == CState::Unknown) {
                    a.containers_to_kill.push(KillInfo {
                        id: s.id.clone(),
                        name: c.name.clone(),
                        message: unknown_message(false),
                        reason: KillReason::Unknown,
                    });
                }
            }
            continue;
        }
        let Some(s) = status else { continue };
        let mut restart = should_restart_on_failure(pod);
        let (message, reason) = if changed(c, s) {
            restart = true;
            (
                format!("Container {} definition changed", c.name),
                KillReason::Unknown,
            )
        } else if let Some(f) = probe_failure(probes, &s.id, &c.name, false) {
            f
        } else {
            keep += 1;
            continue;
        };
        let message = if restart {
            a.containers_to_start.push(idx);
            if message.contains("will be restarted") {
                message
            } else {
                format!("{message}, will be restarted")
            }
        } else {
            message
        };
        a.containers_to_kill.push(KillInfo {
            id: s.id.clone(),
            name: c.name.clone(),
            message,
            reason,
        });
    }

    if keep == 0 && a.containers_to_start.is_empty() {
        a.kill_pod = true;
        // Sidecars must not keep a finished pod alive.
        a.init_containers_to_start.clear();
    }
    a
}

/// The init container part of the actions; true once the pod is initialized (Kubernetes'
/// computeInitContainerActions).
fn compute_init_actions(
    pod: &Pod,
    rp: &RuntimePod,
    probes: &dyn ProbeResults,
    a: &mut PodActions,
) -> bool {
    let inits = init_containers(pod);
    if inits.is_empty() {
        return true;
    }
    let mut initialized = containers(pod).iter().any(|c| {
        rp.find(&c.name)
            .is_some_and(|s| matches!(s.state(), CState::Created | CState::Running))
    });
    let mut previously_initialized = initialized;
    let restart_on_failure = should_restart_on_failure(pod);
    let last = inits.len() - 1;

    for i in (0..inits.len()).rev() {
        let c = &inits[i];
        let sidecar = is_restartable_init(c);
        let Some(s) = rp.find(&c.name) else {
            if previously_initialized && sidecar {
                a.init_containers_to_start.push(i);
            }
            continue;
        };
        if previously_initialized && !sidecar {
            continue;
        }
        match s.state() {
            CState::Created => a.init_containers_to_start.push(i),
            CState::Running => {
                if sidecar {
                    'sidecar: {
                        if c.startup_probe.is_some() && !probes.started(&s.id) {
                            if let Some((msg, reason)) = probe_failure(probes, &s.id, &c.name, true)
                            {
                                a.containers_to_kill.push(KillInfo {
                                    id: s.id.clone(),
                                    name: c.name.clone(),
                                    message: msg,
                                    reason,
                                });
                                a.init_containers_to_start.push(i);
                            }
                            break 'sidecar;
                        }
                        if i == last {
                            initialized = true;
                        } else if !previously_initialized {
                            a.init_containers_to_start.push(i + 1);
                        }
                        if changed(c, s) {
                            a.containers_to_kill.push(KillInfo {
                                id: s.id.clone(),
                                name: c.name.clone(),
                                message: format!("Init container {} definition changed", c.name),
                                reason: KillReason::Unknown,
                            });
                            a.init_containers_to_start.push(i);
                            break 'sidecar;
                        }
                        if let Some((msg, reason)) = probe_failure(probes, &s.id, &c.name, true) {
                            a.containers_to_kill.push(KillInfo {
                                id: s.id.clone(),
                                name: c.name.clone(),
                                message: msg,
                                reason,
                            });
                            a.init_containers_to_start.push(i);
                        }
                    }
                }
                // A regular init container still running: wait for it.
            }
            CState::Exited => {
                if sidecar {
                    a.init_containers_to_start.push(i);
                } else if init_failed(s) {
                    if !restart_on_failure {
                        a.kill_pod = true;
                        a.init_containers_to_start.clear();
                        return false;
                    }
                    a.init_containers_to_start.push(i);
                } else if i == last {
                    initialized = true;
                } else {
                    a.init_containers_to_start.push(i + 1);
                }
            }
            CState::Unknown => {
                if !sidecar && !restart_on_failure {
                    a.kill_pod = true;
                    a.init_containers_to_start.clear();
                    return false;
                }
                a.containers_to_kill.push(KillInfo {
                    id: s.id.clone(),
                    name: c.name.clone(),
                    message: unknown_message(true),
                    reason: KillReason::Unknown,
                });
                a.init_containers_to_start.push(i);
            }
        }
        previously_initialized = true;
    }
    if !previously_initialized {
        a.init_containers_to_start.push(0);
    }
    a.init_containers_to_start.reverse();
    initialized
}
