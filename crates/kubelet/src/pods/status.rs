//! The pod status the kubelet reports (Kubernetes' generateAPIPodStatus and the status
//! manager's rules): phase, conditions, container statuses, IPs, QoS class, start time.
//! Everything here is pure; [`super::manager`] writes the result.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
    VolumeMountStatus,
};

use super::actions::{
    any_regular_container_created, containers, host_network, init_containers, is_restartable_init,
    restart_policy, sandbox_changed, should_container_be_restarted, ProbeResults,
};
use super::resources::qos_class;
use super::runtime::{CState, ContainerInfo, RuntimePod};
use super::util::{go_list, now_time, time_from_nanos};

pub const CONTAINER_CREATING: &str = "ContainerCreating";
pub const POD_INITIALIZING: &str = "PodInitializing";
pub const STATUS_UNKNOWN: &str = "ContainerStatusUnknown";

/// The condition types the kubelet owns (it rewrites them; others are kept).
pub const KUBELET_CONDITIONS: [&str; 5] = [
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodReadyToStartContainers",
];

pub fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded") | Some("Failed"))
}

/// The inputs of one status computation.
pub struct Inputs<'a> {
    pub pod: &'a Pod,
    pub rp: &'a RuntimePod,
    /// The status the kubelet last computed for this pod, or the API's.
    pub old: &'a PodStatus,
    /// The pod's containers are all stopped and will not run again.
    pub terminal: bool,
    /// Why each container last failed to start: name → (reason, message).
    pub reasons: &'a HashMap<String, (String, String)>,
    pub probes: &'a dyn ProbeResults,
    /// The node's IPs, primary first.
    pub host_ips: &'a [String],
    /// Set when the pod must fail: (reason, message), e.g. DeadlineExceeded.
    pub evict: Option<(String, String)>,
}

fn state_of(s: &ContainerStatus) -> (bool, bool, bool) {
    let st = s.state.as_ref();
    (
        st.and_then(|s| s.running.as_ref()).is_some(),
        st.and_then(|s| s.terminated.as_ref()).is_some(),
        st.and_then(|s| s.waiting.as_ref()).is_some(),
    )
}

fn terminated(s: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    s.state.as_ref().and_then(|s| s.terminated.as_ref())
}

fn last_terminated(s: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    s.last_state.as_ref().and_then(|s| s.terminated.as_ref())
}

fn waiting(reason: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: (!reason.is_empty()).then(|| reason.to_string()),
            message: None,
        }),
        ..Default::default()
    }
}

/// The phase of a pod from its container statuses (Kubernetes' getPhase).
pub fn phase(
    pod: &Pod,
    info: &[ContainerStatus],
    terminal: bool,
    initialized: bool,
) -> &'static str {
    let find = |name: &str| info.iter().find(|s| s.name == name);
    let mut pending_init = 0;
    let mut pending_sidecars = 0;
    let mut failed_init = 0;
    for c in init_containers(pod)
        .iter()
        .filter(|c| !is_restartable_init(c))
    {
        let Some(s) = find(&c.name) else {
            pending_init += 1;
            continue;
        };
        let (running, term, wait) = state_of(s);
        if running {
            pending_init += 1;
        } else if term {
            if terminated(s).is_some_and(|t| t.exit_code != 0) {
                failed_init += 1;
            }
        } else if wait {
            match last_terminated(s) {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            }
        } else {
            pending_init += 1;
        }
    }

    let (mut unknown, mut running, mut waiting_n, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for c in init_containers(pod)
        .iter()
        .filter(|c| is_restartable_init(c))
    {
        let Some(s) = find(&c.name) else {
            unknown += 1;
            continue;
        };
        let (run, term, wait) = state_of(s);
        if run {
            if s.started != Some(true) {
                pending_sidecars += 1;
            }
            running += 1;
        } else if term {
        } else if wait {
            if last_terminated(s).is_none() {
                pending_sidecars += 1;
                waiting_n += 1;
            }
        } else {
            pending_sidecars += 1;
            unknown += 1;
        }
    }
    for c in containers(pod) {
        let Some(s) = find(&c.name) else {
            unknown += 1;
            continue;
        };
        let (run, term, wait) = state_of(s);
        if run {
            running += 1;
        } else if term {
            stopped += 1;
            if terminated(s).is_some_and(|t| t.exit_code == 0) {
                succeeded += 1;
            }
        } else if wait {
            if last_terminated(s).is_some() {
                stopped += 1;
            } else {
                waiting_n += 1;
            }
        } else {
            unknown += 1;
        }
    }

    if failed_init > 0 && restart_policy(pod) == "Never" {
        return "Failed";
    }
    if pending_init > 0 || (pending_sidecars > 0 && !initialized) || waiting_n > 0 {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if terminal {
            return if stopped == succeeded {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        if restart_policy(pod) == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if restart_policy(pod) == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

fn convert_one(
    cs: &ContainerInfo,
    old: Option<&ContainerStatus>,
    spec_image: &str,
) -> ContainerStatus {
    let cid = cs.api_id();
    let mut status = ContainerStatus {
        name: cs.name.clone(),
        restart_count: cs.restart_count,
        image: if cs.image.is_empty() {
            spec_image.to_string()
        } else {
            cs.image.clone()
        },
        image_id: cs.image_ref.clone(),
        container_id: Some(cid.clone()),
        ..Default::default()
    };
    if let Some(o) = old {
        status.volume_mounts = o.volume_mounts.clone();
    }
    let old_running = old
        .and_then(|o| o.state.as_ref())
        .and_then(|s| s.running.as_ref())
        .is_some();
    status.state = Some(match cs.state() {
        CState::Running => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: time_from_nanos(cs.started_at),
            }),
            ..Default::default()
        },
        CState::Created => waiting(""),
        CState::Exited => ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: cs.exit_code,
                reason: (!cs.reason.is_empty()).then(|| cs.reason.clone()),
                message: (!cs.message.is_empty()).then(|| cs.message.clone()),
                started_at: time_from_nanos(cs.started_at),
                finished_at: time_from_nanos(cs.finished_at),
                container_id: Some(cid),
                signal: None,
            }),
            ..Default::default()
        },
        CState::Unknown if old_running => {
            status.restart_count = old.map(|o| o.restart_count).unwrap_or(0) + 1;
            ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some(STATUS_UNKNOWN.into()),
                    message: Some(
                        "The container could not be located when the pod was terminated".into(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }
        }
        CState::Unknown => waiting(""),
    });
    status
}

fn volume_mount_statuses(c: &Container) -> Option<Vec<VolumeMountStatus>> {
    let mounts = c.volume_mounts.as_ref()?;
    if mounts.is_empty() {
        return None;
    }
    Some(
        mounts
            .iter()
            .map(|m| {
                let ro = m.read_only.unwrap_or(false);
                VolumeMountStatus {
                    name: m.name.clone(),
                    mount_path: m.mount_path.clone(),
                    read_only: ro.then_some(true),
                    recursive_read_only: ro.then(|| "Disabled".to_string()),
                }
            })
            .collect(),
    )
}

/// The container statuses of one list of containers (Kubernetes'
/// convertToAPIContainerStatuses).
pub fn container_statuses(
    pod: &Pod,
    rp: &RuntimePod,
    previous: &[ContainerStatus],
    specs: &[Container],
    has_init: bool,
    is_init: bool,
    reasons: &HashMap<String, (String, String)>,
) -> Vec<ContainerStatus> {
    let old: HashMap<&str, &ContainerStatus> =
        previous.iter().map(|s| (s.name.as_str(), s)).collect();
    let default_reason = if has_init {
        POD_INITIALIZING
    } else {
        CONTAINER_CREATING
    };
    let mut statuses: HashMap<String, ContainerStatus> = HashMap::new();
    for c in specs {
        let mut s = ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            state: Some(waiting(default_reason)),
            volume_mounts: volume_mount_statuses(c),
            ..Default::default()
        };
        if let Some(o) = old.get(c.name.as_str()) {
            if terminated(o).is_some() {
                s = (*o).clone();
            } else {
                s.restart_count = o.restart_count;
                s.last_state = o.last_state.clone();
            }
        }
        statuses.insert(c.name.clone(), s);
    }

    // A container that was running and is gone from the runtime did terminate.
    for c in specs {
        if rp.containers.iter().any(|cs| cs.name == c.name) {
            continue;
        }
        let Some(o) = old.get(c.name.as_str()) else {
            continue;
        };
        if terminated(o).is_some() || o.state.as_ref().and_then(|s| s.running.as_ref()).is_none() {
            continue;
        }
        let Some(s) = statuses.get_mut(&c.name) else {
            continue;
        };
        let is_default = s
            .state
            .as_ref()
            .and_then(|st| st.waiting.as_ref())
            .is_some_and(|w| w.reason.as_deref() == Some(default_reason));
        if !is_default || last_terminated(s).is_some() {
            continue;
        }
        s.last_state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                reason: Some(STATUS_UNKNOWN.into()),
                message: Some(
                    "The container could not be located when the pod was deleted.  The container used to be Running"
                        .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        });
        if pod.metadata.deletion_timestamp.is_none() {
            s.restart_count += 1;
        }
    }

    // The runtime's containers, newest first: the newest is the state, the one before it
    // the last state.
    let mut seen: HashMap<&str, u32> = HashMap::new();
    for cs in &rp.containers {
        let Some(spec) = specs.iter().find(|c| c.name == cs.name) else {
            continue;
        };
        let n = seen.entry(cs.name.as_str()).or_default();
        if *n >= 2 {
            continue;
        }
        let o = old.get(cs.name.as_str()).copied();
        let mut status = convert_one(cs, o, spec.image.as_deref().unwrap_or_default());
        if cs.state() == CState::Running {
            if let Some(started) = o.and_then(|o| o.started) {
                status.started = Some(started);
            }
        }
        if *n == 0 {
            if status.volume_mounts.is_none() {
                status.volume_mounts = volume_mount_statuses(spec);
            }
            statuses.insert(cs.name.clone(), status);
        } else if let Some(s) = statuses.get_mut(&cs.name) {
            s.last_state = status.state;
        }
        *n += 1;
    }

    // Containers that failed to start wait, with the reason of the failure.
    for c in specs {
        if is_init {
            let s = rp.find(&c.name);
            if s.is_some_and(|s| s.state() == CState::Exited && s.exit_code == 0) {
                continue;
            }
            if s.is_none()
                && any_regular_container_created(pod, rp)
                && !is_restartable_init(c)
                && statuses
                    .get(&c.name)
                    .and_then(|s| s.state.as_ref())
                    .and_then(|s| s.waiting.as_ref())
                    .is_some()
            {
                if let Some(st) = statuses.get_mut(&c.name) {
                    st.state = Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 0,
                            reason: Some("Completed".into()),
                            message: Some("Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally".into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    });
                }
                continue;
            }
        }
        if !should_container_be_restarted(c, pod, rp) {
            continue;
        }
        let Some((reason, message)) = reasons.get(&c.name) else {
            continue;
        };
        let Some(s) = statuses.get_mut(&c.name) else {
            continue;
        };
        if terminated(s).is_some() {
            s.last_state = s.state.clone();
        }
        s.state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: (!message.is_empty()).then(|| message.clone()),
            }),
            ..Default::default()
        });
    }

    let mut out: Vec<ContainerStatus> = if is_init {
        specs
            .iter()
            .filter_map(|c| statuses.remove(&c.name))
            .collect()
    } else {
        let mut v: Vec<ContainerStatus> = statuses.into_values().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    };
    for s in &mut out {
        s.ready = false;
    }
    out
}

/// Apply the probe results: `started` and `ready` of every container.
fn apply_probes(pod: &Pod, status: &mut PodStatus, probes: &dyn ProbeResults) {
    let raw_id = |s: &ContainerStatus| {
        s.container_id
            .as_deref()
            .map(|id| {
                id.split_once("://")
                    .map(|(_, r)| r)
                    .unwrap_or(id)
                    .to_string()
            })
            .unwrap_or_default()
    };
    for s in status.container_statuses.iter_mut().flatten() {
        let running = state_of(s).0;
        let id = raw_id(s);
        let started = running && probes.started(&id);
        s.started = Some(started);
        s.ready = started && probes.ready(&id);
    }
    let inits = init_containers(pod);
    for s in status.init_container_statuses.iter_mut().flatten() {
        let running = state_of(s).0;
        let id = raw_id(s);
        let started = running && probes.started(&id);
        s.started = Some(started);
        let sidecar = inits
            .iter()
            .find(|c| c.name == s.name)
            .is_some_and(is_restartable_init);
        s.ready = if sidecar {
            started && probes.ready(&id)
        } else {
            terminated(s).is_some_and(|t| t.exit_code == 0)
        };
    }
}

fn condition(type_: &str, ok: bool, reason: &str, message: &str) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: (!reason.is_empty()).then(|| reason.to_string()),
        message: (!message.is_empty()).then(|| message.to_string()),
        ..Default::default()
    }
}

fn containers_ready_condition(pod: &Pod, all: &[ContainerStatus], phase: &str) -> PodCondition {
    let find = |name: &str| all.iter().find(|s| s.name == name);
    let mut unknown = Vec::new();
    let mut unready = Vec::new();
    let sidecars = init_containers(pod)
        .iter()
        .filter(|c| is_restartable_init(c));
    for c in sidecars.chain(containers(pod).iter()) {
        match find(&c.name) {
            Some(s) if s.ready => {}
            Some(_) => unready.push(c.name.clone()),
            None => unknown.push(c.name.clone()),
        }
    }
    if (phase == "Succeeded" && unknown.is_empty()) || phase == "Failed" {
        let reason = if phase == "Failed" {
            "PodFailed"
        } else {
            "PodCompleted"
        };
        return condition("ContainersReady", false, reason, "");
    }
    let mut msgs = Vec::new();
    if !unknown.is_empty() {
        msgs.push(format!(
            "containers with unknown status: {}",
            go_list(&unknown)
        ));
    }
    if !unready.is_empty() {
        msgs.push(format!(
            "containers with unready status: {}",
            go_list(&unready)
        ));
    }
    if msgs.is_empty() {
        condition("ContainersReady", true, "", "")
    } else {
        condition(
            "ContainersReady",
            false,
            "ContainersNotReady",
            &msgs.join(", "),
        )
    }
}

fn ready_condition(
    pod: &Pod,
    conditions: &[PodCondition],
    all: &[ContainerStatus],
    phase: &str,
) -> PodCondition {
    let cr = containers_ready_condition(pod, all, phase);
    if cr.status != "True" {
        return PodCondition {
            type_: "Ready".into(),
            ..cr
        };
    }
    let mut msgs = Vec::new();
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_deref())
        .unwrap_or(&[]);
    for g in gates {
        match conditions.iter().find(|c| c.type_ == g.condition_type) {
            None => msgs.push(format!(
                "corresponding condition of pod readiness gate {:?} does not exist.",
                g.condition_type
            )),
            Some(c) if c.status != "True" => msgs.push(format!(
                "the status of pod readiness gate {:?} is not \"True\", but {}",
                g.condition_type, c.status
            )),
            Some(_) => {}
        }
    }
    if msgs.is_empty() {
        condition("Ready", true, "", "")
    } else {
        condition("Ready", false, "ReadinessGatesNotReady", &msgs.join(", "))
    }
}

fn any_regular_started(pod: &Pod, all: &[ContainerStatus]) -> bool {
    all.iter().any(|s| {
        containers(pod).iter().any(|c| c.name == s.name) && {
            let (run, term, _) = state_of(s);
            run || term
        }
    })
}

fn initialized_condition(pod: &Pod, all: &[ContainerStatus], phase: &str) -> PodCondition {
    let mut unknown = Vec::new();
    let mut incomplete = Vec::new();
    for c in init_containers(pod) {
        let Some(s) = all.iter().find(|s| s.name == c.name) else {
            unknown.push(c.name.clone());
            continue;
        };
        let done = if is_restartable_init(c) {
            s.started == Some(true)
        } else {
            s.ready
        };
        if !done {
            incomplete.push(c.name.clone());
        }
    }
    if phase == "Succeeded" && unknown.is_empty() {
        return condition("Initialized", true, "PodCompleted", "");
    }
    if any_regular_started(pod, all) {
        return condition("Initialized", true, "", "");
    }
    let mut msgs = Vec::new();
    if !unknown.is_empty() {
        msgs.push(format!(
            "containers with unknown status: {}",
            go_list(&unknown)
        ));
    }
    if !incomplete.is_empty() {
        msgs.push(format!(
            "containers with incomplete status: {}",
            go_list(&incomplete)
        ));
    }
    if msgs.is_empty() {
        condition("Initialized", true, "", "")
    } else {
        condition(
            "Initialized",
            false,
            "ContainersNotInitialized",
            &msgs.join(", "),
        )
    }
}

/// Pod IPs ordered as the node's family prefers: one of its family first, then one of the
/// other family.
fn sort_pod_ips(ips: &[String], host_ips: &[String]) -> Vec<String> {
    let v6_first = host_ips
        .first()
        .and_then(|ip| ip.parse::<std::net::IpAddr>().ok())
        .is_some_and(|ip| ip.is_ipv6());
    let parsed: Vec<std::net::IpAddr> = ips.iter().filter_map(|ip| ip.parse().ok()).collect();
    let mut out = Vec::new();
    if let Some(p) = parsed.iter().find(|ip| ip.is_ipv6() == v6_first) {
        out.push(p.to_string());
    }
    if let Some(p) = parsed.iter().find(|ip| ip.is_ipv6() != v6_first) {
        out.push(p.to_string());
    }
    out
}

/// Whether any regular container is running in the runtime.
fn any_active_regular_started(pod: &Pod, rp: &RuntimePod) -> bool {
    containers(pod).iter().any(|c| {
        rp.find(&c.name)
            .is_some_and(|s| s.state() == CState::Running)
    })
}

/// The API status of a pod (Kubernetes' generateAPIPodStatus).
pub fn generate(i: &Inputs) -> PodStatus {
    let pod = i.pod;
    let api = pod.status.clone().unwrap_or_default();
    let mut s = PodStatus::default();

    let mut ips = sort_pod_ips(&i.rp.ips, i.host_ips);
    let sandbox_ready =
        i.rp.sandboxes
            .iter()
            .any(|s| s.state == capstan_cri::v1::PodSandboxState::SandboxReady as i32);
    if ips.is_empty() && !sandbox_ready {
        // Every sandbox is gone or stopped: the pod keeps the IPs it had.
        ips = i
            .old
            .pod_ips
            .iter()
            .flatten()
            .map(|ip| ip.ip.clone())
            .collect();
    }
    if !ips.is_empty() {
        s.pod_ip = Some(ips[0].clone());
        s.pod_ips = Some(ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect());
    }
    s.qos_class = Some(qos_class(pod).to_string());
    let has_init = !init_containers(pod).is_empty();
    s.container_statuses = Some(container_statuses(
        pod,
        i.rp,
        i.old.container_statuses.as_deref().unwrap_or(&[]),
        containers(pod),
        has_init,
        false,
        i.reasons,
    ));
    let inits = container_statuses(
        pod,
        i.rp,
        i.old.init_container_statuses.as_deref().unwrap_or(&[]),
        init_containers(pod),
        has_init,
        true,
        i.reasons,
    );
    s.init_container_statuses = (!inits.is_empty()).then_some(inits);
    apply_probes(pod, &mut s, i.probes);

    let all: Vec<ContainerStatus> = s
        .container_statuses
        .iter()
        .flatten()
        .chain(s.init_container_statuses.iter().flatten())
        .cloned()
        .collect();
    let mut phase = phase(pod, &all, i.terminal, any_active_regular_started(pod, i.rp)).to_string();
    if !is_terminal(Some(&phase)) {
        if is_terminal(i.old.phase.as_deref()) {
            phase = i.old.phase.clone().unwrap_or_default();
        } else if is_terminal(api.phase.as_deref()) {
            phase = api.phase.clone().unwrap_or_default();
        }
    }
    if Some(phase.as_str()) == i.old.phase.as_deref() {
        s.reason = i.old.reason.clone().or_else(|| api.reason.clone());
        s.message = i.old.message.clone().or_else(|| api.message.clone());
    }
    if let Some((reason, message)) = &i.evict {
        phase = "Failed".into();
        s.reason = Some(reason.clone());
        s.message = Some(message.clone());
    }
    if is_terminal(api.phase.as_deref()) && api.phase.as_deref() != Some(phase.as_str()) {
        phase = api.phase.clone().unwrap_or_default();
    }
    s.phase = Some(phase.clone());

    let mut conditions: Vec<PodCondition> = api
        .conditions
        .iter()
        .flatten()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    if let Some(d) = i
        .old
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
    {
        conditions.retain(|c| c.type_ != "DisruptionTarget");
        conditions.push(d.clone());
    }
    let sandbox_ready = !sandbox_changed(pod, i.rp).0;
    conditions.push(condition(
        "PodReadyToStartContainers",
        sandbox_ready,
        "",
        "",
    ));
    let all_init_first: Vec<ContainerStatus> = s
        .init_container_statuses
        .iter()
        .flatten()
        .chain(s.container_statuses.iter().flatten())
        .cloned()
        .collect();
    conditions.push(initialized_condition(pod, &all_init_first, &phase));
    let ready = ready_condition(pod, &conditions, &all_init_first, &phase);
    conditions.push(ready);
    conditions.push(containers_ready_condition(pod, &all_init_first, &phase));
    conditions.push(condition("PodScheduled", true, "", ""));
    s.conditions = Some(conditions);

    if let Some(primary) = i.host_ips.first() {
        s.host_ip = Some(primary.clone());
        s.host_ips = Some(
            i.host_ips
                .iter()
                .take(2)
                .map(|ip| HostIP { ip: ip.clone() })
                .collect(),
        );
        if host_network(pod) && s.pod_ip.is_none() {
            s.pod_ip = Some(primary.clone());
            s.pod_ips = Some(
                i.host_ips
                    .iter()
                    .take(2)
                    .map(|ip| PodIP { ip: ip.clone() })
                    .collect(),
            );
        }
    }
    s
}

/// The status manager's bookkeeping before a write: condition transition times kept while a
/// condition's status stays, the start time set once.
pub fn finalize(new: &mut PodStatus, old: &PodStatus) {
    for c in new.conditions.iter_mut().flatten() {
        if !KUBELET_CONDITIONS.contains(&c.type_.as_str()) {
            continue;
        }
        let prev = old.conditions.iter().flatten().find(|o| o.type_ == c.type_);
        c.last_transition_time = match prev {
            Some(p) if p.status == c.status && p.last_transition_time.is_some() => {
                p.last_transition_time.clone()
            }
            _ => Some(now_time()),
        };
    }
    if old.start_time.is_some() {
        new.start_time = old.start_time.clone();
    } else if new.start_time.is_none() {
        new.start_time = Some(now_time());
    }
}

/// A container that terminated for good may not come back to life in the status (restart
/// policy Never, or OnFailure after success). Err names the offending container.
pub fn check_transitions(pod: &Pod, old: &PodStatus, new: &PodStatus) -> Result<(), String> {
    let policy = restart_policy(pod);
    if policy == "Always" {
        return Ok(());
    }
    let pairs = [
        (&old.container_statuses, &new.container_statuses, false),
        (
            &old.init_container_statuses,
            &new.init_container_statuses,
            true,
        ),
    ];
    for (olds, news, init) in pairs {
        for o in olds.iter().flatten() {
            if init
                && init_containers(pod)
                    .iter()
                    .find(|c| c.name == o.name)
                    .is_some_and(is_restartable_init)
            {
                continue;
            }
            let Some(t) = terminated(o) else { continue };
            if t.exit_code != 0 && policy == "OnFailure" {
                continue;
            }
            if news
                .iter()
                .flatten()
                .any(|n| n.name == o.name && terminated(n).is_none())
            {
                return Err(format!(
                    "terminated container {} attempted illegal transition to non-terminated state",
                    o.name
                ));
            }
        }
    }
    Ok(())
}

/// The status API readers see for `new` written over `api`: conditions the kubelet does not
/// own are kept, and a terminal phase waits until no container can run any more (Kubernetes'
/// mergePodStatus).
pub fn merge_for_api(api: &PodStatus, new: &PodStatus, could_have_running: bool) -> PodStatus {
    let mut out = new.clone();
    let mut conds: Vec<PodCondition> = api
        .conditions
        .iter()
        .flatten()
        .filter(|c| {
            !KUBELET_CONDITIONS.contains(&c.type_.as_str()) && c.type_ != "DisruptionTarget"
        })
        .cloned()
        .collect();
    for c in new.conditions.iter().flatten() {
        if KUBELET_CONDITIONS.contains(&c.type_.as_str()) || c.type_ == "DisruptionTarget" {
            conds.push(c.clone());
        }
    }
    if let Some(d) = api
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
    {
        if !conds.iter().any(|c| c.type_ == "DisruptionTarget") {
            conds.insert(0, d.clone());
        }
    }
    out.conditions = Some(conds);
    // Fields other components own.
    out.nominated_node_name = api.nominated_node_name.clone();
    out.resource_claim_statuses = api.resource_claim_statuses.clone();
    out.resize = api.resize.clone();
    if could_have_running && !is_terminal(api.phase.as_deref()) && is_terminal(new.phase.as_deref())
    {
        out.phase = api.phase.clone();
        out.reason = api.reason.clone();
        out.message = api.message.clone();
    }
    if is_terminal(out.phase.as_deref()) {
        let reason = if out.phase.as_deref() == Some("Failed") {
            "PodFailed"
        } else {
            "PodCompleted"
        };
        for c in out.conditions.iter_mut().flatten() {
            if (c.type_ == "Ready" || c.type_ == "ContainersReady") && c.status == "True" {
                c.status = "False".into();
                c.reason = Some(reason.into());
                c.message = None;
                c.last_transition_time = Some(now_time());
            }
        }
    }
    out
}

fn initialized_before(pod: &Pod, status: &PodStatus) -> bool {
    let inits = init_containers(pod);
    if inits.is_empty() {
        return true;
    }
    for s in status.container_statuses.iter().flatten() {
        if last_terminated(s).is_some()
            || s.state.as_ref().and_then(|s| s.waiting.as_ref()).is_none()
        {
            return true;
        }
    }
    if let Some(last) = inits.last() {
        if let Some(s) = status
            .init_container_statuses
            .iter()
            .flatten()
            .find(|s| s.name == last.name)
        {
            if let Some(t) = last_terminated(s) {
                return t.exit_code == 0;
            }
            if let Some(t) = terminated(s) {
                return t.exit_code == 0;
            }
        }
    }
    false
}

fn unknown_terminated() -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 137,
            reason: Some(STATUS_UNKNOWN.into()),
            message: Some("The container could not be located when the pod was terminated".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The final status of a pod whose containers are all stopped for good (Kubernetes'
/// TerminatePod): every container terminated, the phase terminal.
pub fn terminate(pod: &Pod, status: &PodStatus) -> PodStatus {
    let mut s = status.clone();
    if initialized_before(pod, status) {
        for c in s.container_statuses.iter_mut().flatten() {
            if terminated(c).is_none() {
                c.state = Some(unknown_terminated());
                c.ready = false;
                c.started = Some(false);
            }
        }
    }
    if let Some(inits) = s.init_container_statuses.as_mut() {
        // All but the trailing init containers that never started.
        let mut upto = 0;
        for (i, c) in inits.iter().enumerate().rev() {
            if c.state.as_ref().and_then(|s| s.waiting.as_ref()).is_none()
                || last_terminated(c).is_some()
            {
                upto = i + 1;
                break;
            }
        }
        if upto == 0 && !inits.is_empty() {
            upto = 1;
        }
        for c in inits.iter_mut().take(upto) {
            if terminated(c).is_none() {
                c.state = Some(unknown_terminated());
                c.ready = false;
                c.started = Some(false);
            }
        }
    }
    if !is_terminal(s.phase.as_deref()) {
        s.phase = Some("Failed".into());
    }
    s
}

/// Whether two statuses are the same for writing purposes.
pub fn same(a: &PodStatus, b: &PodStatus) -> bool {
    serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
}
