//! Host pods: control-plane components that run inside this process, published as mirror
//! pods.
//!
//! In a kubeadm cluster the API server, the controller manager and the scheduler are static
//! pods, so `kubectl get pods -n kube-system` lists `kube-apiserver-<node>` and its siblings as
//! mirror pods. `capstan up` runs those components inside its own process, not in containers;
//! it hands them to the kubelet as [`HostPod`]s. The kubelet gives each the identity of a
//! static pod read from a manifest (the same defaults, `<component>-<node>` in `kube-system`,
//! the `kubernetes.io/config.*` annotations, `config.source: file` as kubeadm's pods have) and
//! keeps its mirror pod in the API exactly as for a static pod: owned by the Node, re-created
//! when deleted, replaced when its hash no longer matches. The pod spec is what kubeadm's
//! manifests say (labels `component` and `tier: control-plane`, `hostNetwork`,
//! `priorityClassName: system-node-critical`, one container named after the component). Its
//! image (`capstan:<version>`) names the binary; no image is ever pulled.
//!
//! A host pod is never run: it gets no pod worker, so nothing of it goes through CRI (no
//! sandbox, no container, nothing for the runtime relist or orphan cleanup to find). Its status
//! is computed here: phase Running, the node's address as host and pod IP (host network), one
//! container running since the component started, with container ID `capstan://<component>`,
//! ready while the component's health check answers true; the Ready and ContainersReady
//! conditions follow. Health is polled every [`POLL`] and the status written when it changed.
//! A component that restarted (a new process on the same data) counts one more restart, as a
//! static pod's container restarted after a reboot does.
//!
//! The etcd mirror pod of kubeadm clusters has no counterpart: capstan's store is embedded in
//! the API server's process (or is an external etcd that no kubelet here runs), so a store pod
//! would only repeat the API server's.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, HostIP, Node, Pod, PodCondition, PodIP,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::Notify;

use crate::pods::util::{format_pod, now_time, pod_name, pod_namespace, pod_uid};
use crate::static_pods::{self, CONFIG_SEEN};
use crate::{Kubelet, Options};

/// The namespace of host pods (kubeadm's control-plane pods live there).
pub const NAMESPACE: &str = "kube-system";

/// How often health is checked and mirror pods are reconciled.
pub const POLL: Duration = Duration::from_secs(2);

/// How long one health check may take before it counts as failed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether a host pod's component is healthy now.
pub type Health = Arc<dyn Fn() -> bool + Send + Sync>;

/// A component running in this process that the kubelet reports as a pod but never runs.
#[derive(Clone)]
pub struct HostPod {
    /// The component's name (`kube-apiserver`): the pod is `<component>-<node>` and its one
    /// container is named after it. Must be a DNS label.
    pub component: String,
    /// The command line the component runs with (the container's `command`).
    pub command: Vec<String>,
    /// The image the container shows; never pulled.
    pub image: String,
    /// When the component started (the container's `startedAt`).
    pub started_at: SystemTime,
    /// Whether the component is healthy (the container's `ready`). Called every [`POLL`] from
    /// the kubelet's task: it must answer at once.
    pub health: Health,
}

impl HostPod {
    /// A host pod with capstan's image.
    pub fn new(
        component: impl Into<String>,
        command: Vec<String>,
        started_at: SystemTime,
        health: Health,
    ) -> HostPod {
        HostPod {
            component: component.into(),
            command,
            image: default_image(),
            started_at,
            health,
        }
    }
}

impl fmt::Debug for HostPod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostPod")
            .field("component", &self.component)
            .field("command", &self.command)
            .field("image", &self.image)
            .field("started_at", &self.started_at)
            .finish_non_exhaustive()
    }
}

/// `capstan:<version>`, the image host pods show (the Kubernetes version capstan serves, as
/// kubeadm's images are tagged).
pub fn default_image() -> String {
    format!("capstan:{}", crate::KUBELET_VERSION)
}

/// The mirror pod name of a component on a node.
pub fn pod_name_of(component: &str, node: &str) -> String {
    format!("{component}-{}", node.to_lowercase())
}

/// Whether `namespace/name` is the mirror pod of one of the kubelet's host pods.
pub fn is_host_pod(opts: &Options, namespace: &str, name: &str) -> bool {
    namespace == NAMESPACE
        && opts
            .host_pods
            .iter()
            .any(|h| pod_name_of(&h.component, &opts.node_name) == name)
}

/// The container ID a host pod's container shows.
pub fn container_id(component: &str) -> String {
    format!("capstan://{component}")
}

// ---------------------------------------------------------------------------------------
// The pod.

/// The static pod a host pod stands for: kubeadm's manifest for the component, given the
/// static pod identity (name, hash, annotations, defaults) on `node`.
pub fn static_pod(hp: &HostPod, node: &str) -> Result<Pod, String> {
    let mut container = json!({
        "name": hp.component,
        "image": hp.image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {},
    });
    if !hp.command.is_empty() {
        container["command"] = json!(hp.command);
    }
    let manifest = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": hp.component,
            "namespace": NAMESPACE,
            "labels": {"component": hp.component, "tier": "control-plane"},
        },
        "spec": {
            "containers": [container],
            "hostNetwork": true,
            "priorityClassName": "system-node-critical",
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        },
    });
    let data = serde_json::to_vec(&manifest).map_err(|e| e.to_string())?;
    // The "file" only feeds the hash: one per component.
    let source = format!("capstan-host-pod:{}", hp.component);
    let mut pod = static_pods::parse_manifest(&data, &source, node)?;
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            CONFIG_SEEN.into(),
            k8s_openapi::jiff::Timestamp::now().to_string(),
        );
    Ok(pod)
}

/// A system time as an API time (whole seconds, as the API keeps times).
pub fn api_time(t: SystemTime) -> Time {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    crate::pods::util::time_from_nanos(secs.saturating_mul(1_000_000_000)).unwrap_or_else(now_time)
}

/// What the kubelet remembers of a host pod across mirror pods.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Remembered {
    /// The container's restart count (decided when the kubelet first sees the pod).
    pub restarts: i32,
    /// The pod's start time (kept from an earlier mirror pod of the same hash).
    pub start_time: Option<Time>,
}

/// What the kubelet takes over from the mirror pod it finds at start (of the same hash, else
/// None): a container that was running since another time restarted once more, and the pod
/// keeps its start time.
pub fn remember(hp: &HostPod, found: Option<&PodStatus>) -> Remembered {
    let started = api_time(hp.started_at);
    let Some(status) = found else {
        return Remembered::default();
    };
    let previous = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == hp.component);
    let restarts = match previous {
        None => 0,
        Some(c) => {
            let was = c
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.as_ref());
            if was == Some(&started) {
                c.restart_count.max(0)
            } else {
                c.restart_count.max(0).saturating_add(1)
            }
        }
    };
    Remembered {
        restarts,
        start_time: status.start_time.clone(),
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

/// The status of a host pod's mirror pod, from its current status: what the kubelet owns is
/// rewritten (conditions keep their transition time while their status stays), the rest kept.
pub fn desired_status(
    hp: &HostPod,
    ready: bool,
    remembered: &Remembered,
    current: &PodStatus,
    host_ips: &[String],
) -> PodStatus {
    let mut s = current.clone();
    s.phase = Some("Running".into());
    s.reason = None;
    s.message = None;
    let unready = format!("containers with unready status: [{}]", hp.component);
    let (reason, message) = if ready {
        ("", "")
    } else {
        ("ContainersNotReady", unready.as_str())
    };
    let owned = [
        condition("PodReadyToStartContainers", true, "", ""),
        condition("Initialized", true, "", ""),
        condition("Ready", ready, reason, message),
        condition("ContainersReady", ready, reason, message),
        condition("PodScheduled", true, "", ""),
    ];
    let mut conditions: Vec<PodCondition> = current
        .conditions
        .iter()
        .flatten()
        .filter(|c| !owned.iter().any(|o| o.type_ == c.type_))
        .cloned()
        .collect();
    for mut c in owned {
        let prev = current
            .conditions
            .iter()
            .flatten()
            .find(|p| p.type_ == c.type_);
        c.last_transition_time = match prev {
            Some(p) if p.status == c.status && p.last_transition_time.is_some() => {
                p.last_transition_time.clone()
            }
            _ => Some(now_time()),
        };
        conditions.push(c);
    }
    s.conditions = Some(conditions);
    if !host_ips.is_empty() {
        let ips: Vec<&String> = host_ips.iter().take(2).collect();
        s.host_ip = Some(ips[0].clone());
        s.host_ips = Some(ips.iter().map(|ip| HostIP { ip: (*ip).clone() }).collect());
        s.pod_ip = Some(ips[0].clone());
        s.pod_ips = Some(ips.iter().map(|ip| PodIP { ip: (*ip).clone() }).collect());
    }
    let started = api_time(hp.started_at);
    s.start_time = remembered
        .start_time
        .clone()
        .or_else(|| current.start_time.clone())
        .or_else(|| Some(started.clone()));
    s.qos_class = Some("BestEffort".into());
    s.init_container_statuses = None;
    s.container_statuses = Some(vec![ContainerStatus {
        name: hp.component.clone(),
        image: hp.image.clone(),
        image_id: String::new(),
        container_id: Some(container_id(&hp.component)),
        ready,
        started: Some(true),
        restart_count: remembered.restarts,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(started),
            }),
            ..Default::default()
        }),
        last_state: Some(ContainerState::default()),
        ..Default::default()
    }]);
    s
}

// ---------------------------------------------------------------------------------------
// Keeping the mirror pods.

/// One host pod as the kubelet keeps it.
struct Entry {
    hp: HostPod,
    /// The static pod it stands for (identity and hash).
    pod: Pod,
    /// Decided when the kubelet first sees the pod in the API.
    remembered: Option<Remembered>,
    /// A pod that is not a mirror pod holds the name (warned once).
    blocked: bool,
}

/// Publish the kubelet's host pods (nothing when it has none).
pub fn start(k: &Arc<Kubelet>) {
    if k.opts.host_pods.is_empty() {
        return;
    }
    let node = k.opts.node_name.clone();
    let mut entries = Vec::new();
    for hp in &k.opts.host_pods {
        match static_pod(hp, &node) {
            Ok(pod) => entries.push(Entry {
                hp: hp.clone(),
                pod,
                remembered: None,
                blocked: false,
            }),
            Err(e) => {
                tracing::error!(component = %hp.component, error = %e, "not publishing a host pod")
            }
        }
    }
    let wake = Arc::new(Notify::new());
    let names: HashSet<String> = entries
        .iter()
        .map(|e| pod_name(&e.pod).to_string())
        .collect();
    {
        let wake = wake.clone();
        k.pods.on_change(move |c| {
            let p = c.object();
            if pod_namespace(p) == NAMESPACE && names.contains(pod_name(p)) {
                wake.notify_one();
            }
        });
    }
    tokio::spawn(run(k.clone(), entries, wake));
}

async fn run(k: Arc<Kubelet>, mut entries: Vec<Entry>, wake: Arc<Notify>) {
    let mut node_rx = k.node.subscribe();
    loop {
        let node = k.node.borrow().clone();
        if let Some(node) = node.filter(|_| k.pods.has_synced()) {
            let host_ips = crate::pods::manager::node_ips(&k, Some(&node));
            for e in &mut entries {
                sync(&k, &node, &host_ips, e).await;
            }
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(POLL) => {}
            r = node_rx.changed() => {
                if r.is_err() {
                    // The kubelet is gone.
                    return;
                }
            }
        }
    }
}

/// Keep one host pod's mirror pod: create it when missing, replace it when it is being
/// deleted or of another hash, and write its status when it changed.
async fn sync(k: &Kubelet, node: &Node, host_ips: &[String], e: &mut Entry) {
    let name = pod_name(&e.pod).to_string();
    let existing = k.pods.get(NAMESPACE, &name);
    if let Some(p) = existing.as_ref().filter(|p| !static_pods::is_mirror(p)) {
        if !e.blocked {
            tracing::warn!(pod = %format_pod(p), "a pod that is not a mirror pod has the name of a host pod: not publishing the host pod");
            e.blocked = true;
        }
        return;
    }
    e.blocked = false;
    let current = existing.filter(|p| static_pods::is_mirror_of(p, &e.pod));
    if e.remembered.is_none() {
        e.remembered = Some(remember(
            &e.hp,
            current.as_ref().and_then(|p| p.status.as_ref()),
        ));
    }
    let mirror: Pod = match current {
        Some(p) if p.metadata.deletion_timestamp.is_none() => (*p).clone(),
        _ => {
            if let Some(old) = k.pods.get(NAMESPACE, &name) {
                tracing::info!(pod = %format_pod(&old), "deleting the mirror pod of a host pod: it is being deleted or is outdated");
                if !delete(k, &old).await {
                    return;
                }
            }
            if node.metadata.deletion_timestamp.is_some() {
                return;
            }
            match create(k, &e.pod, node).await {
                Some(p) => p,
                None => return,
            }
        }
    };
    let ready = (e.hp.health)();
    let remembered = e.remembered.clone().unwrap_or_default();
    let now = mirror.status.clone().unwrap_or_default();
    let want = desired_status(&e.hp, ready, &remembered, &now, host_ips);
    if want == now {
        return;
    }
    let mut body = mirror;
    body.status = Some(want);
    body.metadata.managed_fields = None;
    let api: Api<Pod> = Api::namespaced(k.client.clone(), NAMESPACE);
    match api
        .replace_status(&name, &PostParams::default(), &body)
        .await
    {
        Ok(_) => tracing::debug!(pod = %name, ready, "host pod status written"),
        // Changed meanwhile: the informer brings the new one and wakes the loop.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
        Err(err) => tracing::warn!(pod = %name, error = %err, "writing a host pod's status"),
    }
}

/// Create a host pod's mirror pod; the created pod (None on failure; a conflict is left to
/// the informer).
async fn create(k: &Kubelet, pod: &Pod, node: &Node) -> Option<Pod> {
    let mp = match static_pods::mirror_pod(pod, node) {
        Ok(mp) => mp,
        Err(e) => {
            tracing::debug!(pod = %format_pod(pod), error = %e, "no mirror pod yet");
            return None;
        }
    };
    let api: Api<Pod> = Api::namespaced(k.client.clone(), NAMESPACE);
    match api.create(&PostParams::default(), &mp).await {
        Ok(created) => {
            tracing::info!(pod = %format_pod(&created), "created mirror pod of a host pod");
            Some(created)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => None,
        Err(e) => {
            tracing::warn!(pod = %format_pod(pod), error = %e, "failed creating a mirror pod");
            None
        }
    }
}

/// Delete a mirror pod at once (this UID only); whether it is gone.
async fn delete(k: &Kubelet, pod: &Pod) -> bool {
    let api: Api<Pod> = Api::namespaced(k.client.clone(), NAMESPACE);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(pod_uid(pod).to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(pod_name(pod), &dp).await {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Err(kube::Error::Api(s)) if s.code == 409 => false,
        Err(e) => {
            tracing::warn!(pod = %format_pod(pod), error = %e, "failed deleting a mirror pod");
            false
        }
    }
}

// ---------------------------------------------------------------------------------------
// Health checks and the control plane of one process.

/// Health from `check`, run every [`POLL`] on a task of its own (false until it first
/// answers; a check taking longer than a few seconds counts as failed). The task ends when
/// the returned health is dropped.
pub fn polled<F, Fut>(check: F) -> Health
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let flag = Arc::new(AtomicBool::new(false));
    let weak = Arc::downgrade(&flag);
    tokio::spawn(async move {
        loop {
            let ok = tokio::time::timeout(CHECK_TIMEOUT, check())
                .await
                .unwrap_or(false);
            match weak.upgrade() {
                Some(f) => f.store(ok, Ordering::Relaxed),
                None => return,
            }
            tokio::time::sleep(POLL).await;
        }
    });
    Arc::new(move || flag.load(Ordering::Relaxed))
}

/// Whether the API server answers `/readyz` with success.
pub async fn api_ready(client: &Client) -> bool {
    let Ok(req) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    client.request_text(req).await.is_ok()
}

/// Whether the lease `namespace/name` is held by an identity starting with `holder_prefix`
/// and not expired (renewed within its duration).
pub async fn lease_held(client: &Client, namespace: &str, name: &str, holder_prefix: &str) -> bool {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match leases.get_opt(name).await {
        Ok(Some(lease)) => held_now(&lease, holder_prefix, k8s_openapi::jiff::Timestamp::now()),
        _ => false,
    }
}

/// Whether a lease is held by `holder_prefix…` at `now`.
pub fn held_now(lease: &Lease, holder_prefix: &str, now: k8s_openapi::jiff::Timestamp) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return false;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder.is_empty() || !holder.starts_with(holder_prefix) {
        return false;
    }
    let (Some(renewed), Some(secs)) = (spec.renew_time.as_ref(), spec.lease_duration_seconds)
    else {
        return false;
    };
    let Ok(expires) = renewed
        .0
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(i64::from(
            secs,
        )))
    else {
        return false;
    };
    expires > now
}

/// The control plane running in this process, as host pods: kube-apiserver (healthy while
/// `/readyz` answers), kube-controller-manager and kube-scheduler (healthy while their
/// leader-election lease in kube-system is held by an instance on this host, whose identity
/// is `<hostname>_<random>`). `client` reads the leases and asks `/readyz`. The command line
/// and start time are this process's.
pub fn control_plane(client: Client) -> Vec<HostPod> {
    let command: Vec<String> = std::env::args().collect();
    let started = process_start_time().unwrap_or_else(SystemTime::now);
    let prefix = format!("{}_", capstan_runtime::events::hostname());
    let mut out = Vec::new();
    let c = client.clone();
    out.push(HostPod::new(
        "kube-apiserver",
        command.clone(),
        started,
        polled(move || {
            let c = c.clone();
            async move { api_ready(&c).await }
        }),
    ));
    for component in ["kube-controller-manager", "kube-scheduler"] {
        let c = client.clone();
        let prefix = prefix.clone();
        out.push(HostPod::new(
            component,
            command.clone(),
            started,
            polled(move || {
                let (c, prefix) = (c.clone(), prefix.clone());
                async move { lease_held(&c, NAMESPACE, component, &prefix).await }
            }),
        ));
    }
    out
}

/// When this process started (from /proc: its start in clock ticks after boot, and the boot
/// time).
pub fn process_start_time() -> Option<SystemTime> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name: state is field 3, starttime field 22.
    let rest = stat.rsplit_once(") ")?.1;
    let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|h| *h > 0)?;
    let after_boot =
        Duration::from_secs(ticks / hz) + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz);
    Some(UNIX_EPOCH + Duration::from_secs(boot) + after_boot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::Timestamp;

    fn hp(ready: bool) -> HostPod {
        HostPod::new(
            "kube-scheduler",
            vec!["capstan".into(), "up".into()],
            UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            Arc::new(move || ready),
        )
    }

    #[test]
    fn the_pod_is_a_kubeadm_control_plane_static_pod() {
        let p = static_pod(&hp(true), "Node-A").unwrap();
        assert_eq!(pod_name(&p), "kube-scheduler-node-a");
        assert_eq!(pod_namespace(&p), "kube-system");
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["component"], "kube-scheduler");
        assert_eq!(labels["tier"], "control-plane");
        let ann = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[static_pods::CONFIG_SOURCE], "file");
        assert_eq!(ann[static_pods::CONFIG_HASH], pod_uid(&p));
        assert_eq!(pod_uid(&p).len(), 32);
        assert!(ann.contains_key(CONFIG_SEEN));
        assert!(static_pods::is_static(&p));
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.host_network, Some(true));
        assert_eq!(
            spec.priority_class_name.as_deref(),
            Some("system-node-critical")
        );
        assert_eq!(spec.node_name.as_deref(), Some("Node-A"));
        assert_eq!(spec.containers.len(), 1);
        let c = &spec.containers[0];
        assert_eq!(c.name, "kube-scheduler");
        assert_eq!(c.image.as_deref(), Some("capstan:v1.32.0"));
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            c.command.as_deref(),
            Some(&["capstan".into(), "up".into()][..])
        );
        let tol = spec.tolerations.as_ref().unwrap();
        assert_eq!(tol[0].effect.as_deref(), Some("NoExecute"));
        assert!(is_host_pod(
            &Options {
                node_name: "Node-A".into(),
                host_pods: vec![hp(true)],
                ..Options::default()
            },
            "kube-system",
            "kube-scheduler-node-a"
        ));
        assert!(!is_host_pod(
            &Options {
                node_name: "Node-A".into(),
                host_pods: vec![hp(true)],
                ..Options::default()
            },
            "default",
            "kube-scheduler-node-a"
        ));
    }

    #[test]
    fn the_hash_follows_the_command_line_not_the_start_time() {
        let a = static_pod(&hp(true), "n1").unwrap();
        let mut later = hp(false);
        later.started_at += Duration::from_secs(60);
        assert_eq!(pod_uid(&a), pod_uid(&static_pod(&later, "n1").unwrap()));
        let mut other = hp(true);
        other.command.push("--verbose".into());
        assert_ne!(pod_uid(&a), pod_uid(&static_pod(&other, "n1").unwrap()));
        assert_ne!(pod_uid(&a), pod_uid(&static_pod(&hp(true), "n2").unwrap()));
        // A component name that is no DNS label is refused, not published.
        let mut bad = hp(true);
        bad.component = "Kube_Scheduler".into();
        assert!(static_pod(&bad, "n1").is_err());
    }

    #[test]
    fn mirror_pods_are_owned_by_the_node() {
        let p = static_pod(&hp(true), "n1").unwrap();
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        node.metadata.uid = Some("node-uid".into());
        let mp = static_pods::mirror_pod(&p, &node).unwrap();
        assert!(static_pods::is_mirror_of(&mp, &p));
        let owner = &mp.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Node", "node-uid")
        );
    }

    fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == t)
            .unwrap()
    }

    #[test]
    fn the_status_is_running_and_readiness_follows_health() {
        let ips = vec![
            "10.0.0.5".to_string(),
            "fd00::5".to_string(),
            "x".to_string(),
        ];
        let created = PodStatus {
            phase: Some("Pending".into()),
            qos_class: Some("BestEffort".into()),
            ..Default::default()
        };
        let r = Remembered::default();
        let up = desired_status(&hp(true), true, &r, &created, &ips);
        assert_eq!(up.phase.as_deref(), Some("Running"));
        assert_eq!(up.pod_ip.as_deref(), Some("10.0.0.5"));
        assert_eq!(up.host_ip.as_deref(), Some("10.0.0.5"));
        assert_eq!(up.pod_ips.as_ref().unwrap().len(), 2);
        assert_eq!(up.host_ips.as_ref().unwrap()[1].ip, "fd00::5");
        let started = api_time(hp(true).started_at);
        assert_eq!(up.start_time.as_ref(), Some(&started));
        let types: Vec<&str> = up
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            types,
            [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled"
            ]
        );
        assert_eq!(cond(&up, "Ready").status, "True");
        let cs = &up.container_statuses.as_ref().unwrap()[0];
        assert!(cs.ready);
        assert_eq!(cs.container_id.as_deref(), Some("capstan://kube-scheduler"));
        assert_eq!(cs.restart_count, 0);
        assert_eq!(
            cs.state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.as_ref()),
            Some(&started)
        );
        // The same again: nothing to write.
        assert_eq!(desired_status(&hp(true), true, &r, &up, &ips), up);

        // Unhealthy: not ready, with the reason Kubernetes gives; the other conditions keep
        // their transition times.
        let mut aged = up.clone();
        let old = Time(Timestamp::from_second(1_600_000_000).unwrap());
        for c in aged.conditions.iter_mut().flatten() {
            c.last_transition_time = Some(old.clone());
        }
        let down = desired_status(&hp(false), false, &r, &aged, &ips);
        let ready = cond(&down, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [kube-scheduler]")
        );
        assert_ne!(ready.last_transition_time.as_ref(), Some(&old));
        assert_eq!(cond(&down, "ContainersReady").status, "False");
        assert_eq!(
            cond(&down, "PodScheduled").last_transition_time.as_ref(),
            Some(&old)
        );
        assert!(!down.container_statuses.as_ref().unwrap()[0].ready);
        assert_eq!(down.phase.as_deref(), Some("Running"));

        // Conditions the kubelet does not own are kept; no node address keeps the IPs.
        let mut other = down.clone();
        other
            .conditions
            .as_mut()
            .unwrap()
            .push(condition("example.com/Gate", true, "", ""));
        let again = desired_status(&hp(false), false, &r, &other, &[]);
        assert!(again
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .any(|c| c.type_ == "example.com/Gate"));
        assert_eq!(again.pod_ip.as_deref(), Some("10.0.0.5"));
    }

    #[test]
    fn a_restarted_component_counts_a_restart_and_keeps_the_start_time() {
        let h = hp(true);
        assert_eq!(remember(&h, None), Remembered::default());
        let ips = vec!["10.0.0.5".to_string()];
        let first = desired_status(
            &h,
            true,
            &Remembered::default(),
            &PodStatus::default(),
            &ips,
        );
        // The same process seeing its own pod again (a kubelet restart): no restart.
        let same = remember(&h, Some(&first));
        assert_eq!(same.restarts, 0);
        // A new process, 10 minutes later.
        let mut next = h.clone();
        next.started_at += Duration::from_secs(600);
        let r = remember(&next, Some(&first));
        assert_eq!(r.restarts, 1);
        assert_eq!(r.start_time, first.start_time);
        let s = desired_status(&next, true, &r, &first, &ips);
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.restart_count, 1);
        assert_eq!(s.start_time, first.start_time);
        assert_eq!(
            cs.state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.as_ref()),
            Some(&api_time(next.started_at))
        );
        // Garbage in the old status never panics or goes negative.
        let mut odd = first.clone();
        odd.container_statuses.as_mut().unwrap()[0].restart_count = -4;
        odd.container_statuses.as_mut().unwrap()[0].state = None;
        assert_eq!(remember(&next, Some(&odd)).restarts, 1);
    }

    fn lease(holder: Option<&str>, renewed: Option<i64>, secs: Option<i32>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                renew_time: renewed.map(|s| MicroTime(Timestamp::from_second(s).unwrap())),
                lease_duration_seconds: secs,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_counts_while_held_by_this_host_and_fresh() {
        let now = Timestamp::from_second(1_700_000_100).unwrap();
        let fresh = lease(Some("node-a_123"), Some(1_700_000_090), Some(15));
        assert!(held_now(&fresh, "node-a_", now));
        assert!(!held_now(&fresh, "node-b_", now));
        assert!(!held_now(
            &lease(Some("node-a_1"), Some(1_700_000_080), Some(15)),
            "node-a_",
            now
        ));
        assert!(!held_now(
            &lease(Some(""), Some(1_700_000_090), Some(15)),
            "",
            now
        ));
        assert!(!held_now(
            &lease(None, Some(1_700_000_090), Some(15)),
            "node-a_",
            now
        ));
        assert!(!held_now(
            &lease(Some("node-a_1"), None, Some(15)),
            "node-a_",
            now
        ));
        assert!(!held_now(
            &lease(Some("node-a_1"), Some(1_700_000_090), None),
            "node-a_",
            now
        ));
        assert!(!held_now(&Lease::default(), "node-a_", now));
    }

    #[test]
    fn the_process_start_time_is_in_the_past() {
        let t = process_start_time().expect("/proc is readable");
        let now = SystemTime::now();
        assert!(t <= now);
        assert!(now.duration_since(t).unwrap() < Duration::from_secs(24 * 3600));
    }

    #[tokio::test]
    async fn polled_health_follows_the_check() {
        let flag = Arc::new(AtomicBool::new(true));
        let f = flag.clone();
        let health = polled(move || {
            let v = f.load(Ordering::Relaxed);
            async move { v }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !health() {
            assert!(std::time::Instant::now() < deadline, "never healthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        flag.store(false, Ordering::Relaxed);
        while health() {
            assert!(std::time::Instant::now() < deadline, "never unhealthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
