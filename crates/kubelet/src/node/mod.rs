//! The Node: registration, status and the heartbeat Lease (Kubernetes' kubelet_node_status,
//! nodestatus setters and node lease controller), and the pod network configuration for the
//! node's pod CIDRs.
//!
//! The kubelet registers its Node (retrying with back-off until the API server takes it, and
//! adopting a Node that already exists), then computes status every
//! `node_status_update_frequency` from the machine, the runtime and the Node as stored,
//! patching `nodes/NAME/status` when something other than heartbeat times changed or when
//! `node_status_report_frequency` has passed (after a change, that period is moved by up to
//! half of itself at random, as Kubernetes does, so nodes started together spread out). Right after start, status is also checked
//! every 200 ms until the node turns Ready, so a node is Ready as soon as its runtime and
//! network are. The Lease is renewed independently ([`lease`]).

pub mod cni;
pub mod lease;
pub mod machine;
pub mod status;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_cri::v1;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeRuntimeHandler, NodeRuntimeHandlerFeatures, NodeSpec, ObjectReference,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::Api;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use crate::Kubelet;
use status::{NodeEvent, Observed, PressureTracker, RuntimeHealth};

/// The annotation telling the attach/detach controller it manages this node's volumes.
pub const CONTROLLER_MANAGED_ATTACH_DETACH: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";

/// Labels the kubelet keeps on an existing Node when it re-registers (when it sets them).
const DEFAULT_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "node.kubernetes.io/windows-build",
];

/// How often the runtime's health is checked.
const RUNTIME_CHECK_PERIOD: Duration = Duration::from_secs(5);
/// The runtime counts as down when it has not answered healthy for this long.
const RUNTIME_DOWN_THRESHOLD: Duration = Duration::from_secs(30);
/// How often the runtime's image list is refreshed.
const IMAGE_LIST_PERIOD: Duration = Duration::from_secs(30);
/// How often status is checked right after start, until the node is Ready.
const FAST_STATUS_PERIOD: Duration = Duration::from_millis(200);
/// How long the fast checks go on.
const NODE_READY_GRACE_PERIOD: Duration = Duration::from_secs(120);
/// Attempts of one status update.
const STATUS_UPDATE_RETRIES: usize = 5;

/// Register the node, then keep its status and Lease fresh until the process ends.
pub async fn run(k: Arc<Kubelet>) {
    let agent = Arc::new(Agent::new(k.clone()));
    agent.update_runtime_up().await;
    tokio::spawn({
        let agent = agent.clone();
        async move {
            loop {
                tokio::time::sleep(RUNTIME_CHECK_PERIOD).await;
                agent.update_runtime_up().await;
            }
        }
    });
    tokio::spawn(lease::run(k.clone()));

    let node = agent.register().await;
    agent.publish(node);
    tokio::spawn(agent.clone().watch_node());
    tokio::spawn(agent.clone().fast_status_update());

    loop {
        agent.update_node_status().await;
        let period = jitter(k.opts.node_status_update_frequency, 0.04);
        tokio::time::sleep(period).await;
    }
}

/// `d` stretched by up to `factor` of itself, at random (Kubernetes' wait.Jitter).
pub(crate) fn jitter(d: Duration, factor: f64) -> Duration {
    d.mul_f64(1.0 + rand::random::<f64>() * factor)
}

/// What the runtime last told the kubelet about itself.
#[derive(Default)]
struct RuntimeState {
    /// The last time the runtime answered Status with RuntimeReady.
    last_sync: Option<Instant>,
    checked: bool,
    runtime_error: Option<String>,
    network_error: Option<String>,
    handlers: Vec<NodeRuntimeHandler>,
}

impl RuntimeState {
    fn health(&self, now: Instant) -> RuntimeHealth {
        let mut runtime_errors = Vec::new();
        match self.last_sync {
            None => runtime_errors
                .push("container runtime status check may not have completed yet".to_string()),
            Some(t) if now.saturating_duration_since(t) >= RUNTIME_DOWN_THRESHOLD => {
                runtime_errors.push("container runtime is down".to_string())
            }
            Some(_) => {}
        }
        runtime_errors.extend(self.runtime_error.clone());
        let network_errors = if self.checked {
            self.network_error.iter().cloned().collect()
        } else {
            vec!["network state unknown".to_string()]
        };
        RuntimeHealth {
            runtime_errors,
            network_errors,
        }
    }
}

/// The node agent: state shared by registration, the status loops and the node watch.
pub struct Agent {
    k: Arc<Kubelet>,
    nodes: Api<Node>,
    runtime: Mutex<RuntimeState>,
    pressure: Mutex<PressureTracker>,
    images: Mutex<Option<(Instant, Vec<v1::Image>)>>,
    /// The pod CIDRs the runtime was last told (joined with commas).
    applied_pod_cidr: tokio::sync::Mutex<Option<String>>,
    /// When status is written next even if nothing changed.
    next_report: Mutex<Option<Instant>>,
    /// One status computation and write at a time.
    sync: tokio::sync::Mutex<()>,
}

/// One computed status: the Node to write and what the write is for.
struct Computed {
    node: Node,
    changed: bool,
    labels: BTreeMap<String, String>,
    events: Vec<NodeEvent>,
}

impl Agent {
    pub fn new(k: Arc<Kubelet>) -> Agent {
        let thresholds = k.opts.eviction_hard;
        Agent {
            nodes: Api::all(k.client.clone()),
            k,
            runtime: Mutex::new(RuntimeState::default()),
            pressure: Mutex::new(PressureTracker::new(thresholds)),
            images: Mutex::new(None),
            applied_pod_cidr: tokio::sync::Mutex::new(None),
            next_report: Mutex::new(None),
            sync: tokio::sync::Mutex::new(()),
        }
    }

    fn name(&self) -> &str {
        &self.k.opts.node_name
    }

    /// Ask the runtime how it is (CRI Status): RuntimeReady and NetworkReady.
    pub async fn update_runtime_up(&self) {
        let status = match self
            .k
            .runtime
            .status(v1::StatusRequest { verbose: false })
            .await
        {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e.message(), "container runtime sanity check failed");
                return;
            }
        };
        let health = RuntimeHealth::from_status(&status);
        let mut st = self.runtime.lock();
        st.checked = true;
        st.network_error = health.network_errors.first().cloned();
        st.runtime_error = health.runtime_errors.first().cloned();
        if st.runtime_error.is_none() {
            st.last_sync = Some(Instant::now());
            st.handlers = status
                .runtime_handlers
                .iter()
                .map(|h| NodeRuntimeHandler {
                    name: Some(h.name.clone()),
                    features: Some(NodeRuntimeHandlerFeatures {
                        recursive_read_only_mounts: Some(
                            h.features
                                .as_ref()
                                .is_some_and(|f| f.recursive_read_only_mounts),
                        ),
                        user_namespaces: Some(
                            h.features.as_ref().is_some_and(|f| f.user_namespaces),
                        ),
                    }),
                })
                .collect();
        }
    }

    /// The runtime's images, listed at most every [`IMAGE_LIST_PERIOD`].
    async fn images(&self) -> Option<Vec<v1::Image>> {
        if let Some((at, list)) = self.images.lock().as_ref() {
            if at.elapsed() < IMAGE_LIST_PERIOD {
                return Some(list.clone());
            }
        }
        match self
            .k
            .runtime
            .list_images(v1::ListImagesRequest { filter: None })
            .await
        {
            Ok(r) => {
                *self.images.lock() = Some((Instant::now(), r.images.clone()));
                Some(r.images)
            }
            Err(e) => {
                tracing::warn!(error = %e.message(), "failed to list images");
                None
            }
        }
    }

    /// Forget the cached image list (the next status lists images again).
    pub fn refresh_images(&self) {
        *self.images.lock() = None;
    }

    /// Observe the machine and the runtime now.
    async fn observe(&self) -> Observed {
        let opts = &self.k.opts;
        let (machine, rootfs, memory_available) = match &opts.hollow {
            // A hollow node's machine is described, not probed; its memory is all free.
            Some(h) => (
                h.machine.clone(),
                Some(h.rootfs),
                Some(h.machine.memory_capacity),
            ),
            None => (
                machine::read_machine_info(),
                machine::fs_stats(&opts.root_dir),
                machine::memory_available(),
            ),
        };
        let pressure =
            self.pressure
                .lock()
                .observe(memory_available, rootfs.as_ref(), Instant::now());
        let (runtime, handlers) = {
            let st = self.runtime.lock();
            (st.health(Instant::now()), st.handlers.clone())
        };
        let runtime_version = match self.k.runtime.version(v1::VersionRequest::default()).await {
            Ok(v) => Some(status::runtime_version_string(&v)),
            Err(e) => {
                tracing::debug!(error = %e.message(), "container runtime version unknown");
                None
            }
        };
        Observed {
            node_name: opts.node_name.clone(),
            machine,
            max_pods: opts.max_pods,
            eviction: opts.eviction_hard,
            rootfs,
            pressure,
            runtime,
            runtime_version,
            runtime_handlers: handlers,
            images: self.images().await,
            addresses: self.addresses().await,
            kubelet_port: opts.port,
            kubelet_version: crate::KUBELET_VERSION.to_string(),
        }
    }

    /// InternalIP and Hostname: --node-ip, else the node name when it is an address, else
    /// the name's DNS addresses that are on this host, else the default route's interface.
    async fn addresses(&self) -> Option<Vec<NodeAddress>> {
        let name = self.name().to_string();
        if let Some(h) = &self.k.opts.hollow {
            return Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: h.node_ip.to_string(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: name,
                },
            ]);
        }
        let local = machine::interface_addrs();
        let is_local = |ip: &IpAddr| local.iter().any(|(_, a)| a == ip);
        let ip = match self.k.opts.node_ip.filter(|ip| !ip.is_unspecified()) {
            Some(ip) => {
                // An explicit loopback address is taken as given (single-machine clusters);
                // any other address must be one of this host's.
                if !ip.is_loopback() && !machine::is_usable_node_ip(&ip) {
                    tracing::error!(%ip, "failed to validate nodeIP: not a usable node address");
                    return None;
                }
                if !is_local(&ip) {
                    tracing::error!(%ip, "failed to validate nodeIP: not found in the host's network interfaces");
                    return None;
                }
                ip
            }
            None => match name.parse::<IpAddr>() {
                Ok(ip) => ip,
                Err(_) => {
                    let lookup = tokio::time::timeout(
                        Duration::from_secs(2),
                        tokio::net::lookup_host((name.as_str(), 0)),
                    )
                    .await;
                    let found: Vec<IpAddr> = match lookup {
                        Ok(Ok(addrs)) => addrs
                            .map(|a| a.ip())
                            .filter(|ip| machine::is_usable_node_ip(ip) && is_local(ip))
                            .collect(),
                        _ => Vec::new(),
                    };
                    match found
                        .iter()
                        .find(|ip| ip.is_ipv4())
                        .or_else(|| found.first())
                        .copied()
                        .or_else(|| machine::default_route_ip(&local))
                    {
                        Some(ip) => ip,
                        None => {
                            tracing::error!(node = %name, "can't get ip address of node");
                            return None;
                        }
                    }
                }
            },
        };
        Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: name,
            },
        ])
    }

    /// The Node this kubelet registers: labels, the attach/detach annotation, the taints
    /// it was told to register with, and a first status.
    async fn initial_node(&self) -> (Node, Vec<NodeEvent>) {
        let opts = &self.k.opts;
        let mut labels = BTreeMap::new();
        labels.insert("kubernetes.io/hostname".to_string(), opts.node_name.clone());
        labels.insert(
            "kubernetes.io/os".to_string(),
            std::env::consts::OS.to_string(),
        );
        labels.insert(
            "kubernetes.io/arch".to_string(),
            status::go_arch().to_string(),
        );
        for (k, v) in &opts.node_labels {
            labels.insert(k.clone(), v.clone());
        }
        let mut node = Node {
            metadata: ObjectMeta {
                name: Some(opts.node_name.clone()),
                labels: Some(labels),
                annotations: Some(BTreeMap::from([(
                    CONTROLLER_MANAGED_ATTACH_DETACH.to_string(),
                    "true".to_string(),
                )])),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: (!opts.register_with_taints.is_empty())
                    .then(|| opts.register_with_taints.clone()),
                ..Default::default()
            }),
            status: None,
        };
        let obs = self.observe().await;
        let events = status::set_node_status(&mut node, &obs, Timestamp::now());
        (node, events)
    }

    /// Create the Node, retrying with back-off (100 ms doubling to 7 s) until it works; a
    /// Node that already exists is adopted, with the labels and annotation the kubelet
    /// owns set back.
    pub async fn register(&self) -> Node {
        let mut step = Duration::from_millis(100);
        loop {
            tokio::time::sleep(step).await;
            step = (step * 2).min(Duration::from_secs(7));
            let (node, events) = self.initial_node().await;
            tracing::info!(node = %self.name(), "attempting to register node");
            match self.nodes.create(&post_params(), &node).await {
                Ok(created) => {
                    tracing::info!(node = %self.name(), "successfully registered node");
                    self.record(
                        capstan_runtime::events::NORMAL,
                        "Starting",
                        "Starting kubelet.",
                    );
                    // The status went in with the Node only if the server kept it.
                    let kept = created
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| !c.is_empty());
                    if kept {
                        self.reported(true);
                        self.record_all(&events);
                    }
                    return created;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    match self.adopt_existing(&node).await {
                        Ok(existing) => {
                            tracing::info!(node = %self.name(), "node was previously registered");
                            self.record(
                                capstan_runtime::events::NORMAL,
                                "Starting",
                                "Starting kubelet.",
                            );
                            return existing;
                        }
                        Err(e) => {
                            tracing::error!(node = %self.name(), error = %e, "unable to reconcile node with API server")
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(node = %self.name(), error = %e, "unable to register node with API server")
                }
            }
        }
    }

    async fn adopt_existing(&self, initial: &Node) -> Result<Node, kube::Error> {
        let existing = self.nodes.get(self.name()).await?;
        let Some(patch) = reconcile_patch(initial, &existing) else {
            return Ok(existing);
        };
        self.nodes
            .patch(self.name(), &patch_params(), &Patch::Merge(&patch))
            .await
    }

    /// Publish `node` as the latest known Node (unless a newer one is already known).
    fn publish(&self, node: Node) {
        let rv = |n: &Node| {
            n.metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };
        self.k.node.send_if_modified(|cur| {
            if let (Some(cur), Some(new)) = (cur.as_ref().and_then(|c| rv(c)), rv(&node)) {
                if new < cur {
                    return false;
                }
            }
            *cur = Some(Arc::new(node));
            true
        });
    }

    /// Tell the runtime the node's pod CIDRs and write the CNI network for them. Returns
    /// whether they changed.
    async fn update_pod_cidr(&self, cidrs: &[String]) -> Result<bool, String> {
        let joined = cidrs.join(",");
        let mut applied = self.applied_pod_cidr.lock().await;
        if let Some(dir) = &self.k.opts.cni_conf_dir {
            let content = cni::conflist(
                cidrs,
                &self.k.opts.cni_bridge,
                &cni::ipam_data_dir(&self.k.opts.root_dir),
            );
            match cni::write_if_changed(dir, &content) {
                Ok(true) => {
                    tracing::info!(dir = %dir.display(), pod_cidr = %joined, "wrote the pod network configuration")
                }
                Ok(false) => {}
                Err(e) => return Err(format!("writing the CNI configuration: {e}")),
            }
        }
        if applied.as_deref() == Some(joined.as_str()) {
            return Ok(false);
        }
        self.k
            .runtime
            .update_runtime_config(v1::UpdateRuntimeConfigRequest {
                runtime_config: Some(v1::RuntimeConfig {
                    network_config: Some(v1::NetworkConfig {
                        pod_cidr: joined.clone(),
                    }),
                }),
            })
            .await
            .map_err(|e| format!("failed to update pod CIDR: {}", e.message()))?;
        tracing::info!(pod_cidr = %joined, "updated pod CIDR");
        *applied = Some(joined);
        Ok(true)
    }

    /// Compute the status `orig` should have now (Kubernetes' updateNode).
    async fn compute(&self, orig: &Node) -> Computed {
        let mut node = orig.clone();
        let mut changed = false;
        let cidrs = pod_cidrs(orig);
        if !cidrs.is_empty() {
            match self.update_pod_cidr(&cidrs).await {
                Ok(c) => changed |= c,
                Err(e) => tracing::error!(error = %e, "pod CIDR not applied"),
            }
        }
        // The OS and architecture labels are the kubelet's to keep right.
        let mut labels = BTreeMap::new();
        let current = orig.metadata.labels.clone().unwrap_or_default();
        for (k, v) in [
            ("kubernetes.io/os", std::env::consts::OS),
            ("kubernetes.io/arch", status::go_arch()),
        ] {
            if current.get(k).map(String::as_str) != Some(v) {
                labels.insert(k.to_string(), v.to_string());
            }
        }
        changed |= !labels.is_empty();
        let obs = self.observe().await;
        let events = status::set_node_status(&mut node, &obs, Timestamp::now());
        changed |= status::status_changed(orig.status.as_ref(), node.status.as_ref());
        Computed {
            node,
            changed,
            labels,
            events,
        }
    }

    /// Write a computed status (and any labels it needs) and publish the result.
    async fn write(&self, orig: &Node, c: Computed) -> Result<(), kube::Error> {
        if !c.labels.is_empty() {
            let patch = json!({"metadata": {"labels": c.labels}});
            self.nodes
                .patch(self.name(), &patch_params(), &Patch::Merge(&patch))
                .await?;
        }
        let patch = status_patch(orig, &c.node);
        let updated = self
            .nodes
            .patch_status(self.name(), &patch_params(), &Patch::Strategic(&patch))
            .await?;
        self.reported(c.changed);
        self.record_all(&c.events);
        self.publish(updated);
        Ok(())
    }

    /// Status was written: the next unprompted write is due after the report frequency, moved
    /// by a random part of it (±50 %) when this write carried a change, so that nodes started
    /// together do not keep reporting together (Kubernetes' delayAfterNodeStatusChange).
    fn reported(&self, changed: bool) {
        let every = self.k.opts.node_status_report_frequency;
        let after = if changed {
            every.mul_f64(0.5 + rand::random::<f64>())
        } else {
            every
        };
        *self.next_report.lock() = Some(Instant::now() + after);
    }

    /// One status update, retried a few times (Kubernetes' updateNodeStatus).
    pub async fn update_node_status(&self) {
        let _guard = self.sync.lock().await;
        for attempt in 0..STATUS_UPDATE_RETRIES {
            match self.try_update_node_status().await {
                Ok(()) => return,
                Err(e) => {
                    tracing::error!(node = %self.name(), attempt, error = %e, "error updating node status, will retry")
                }
            }
        }
        tracing::error!(node = %self.name(), "update node status exceeds retry count");
    }

    async fn try_update_node_status(&self) -> Result<(), kube::Error> {
        let orig = self.nodes.get(self.name()).await?;
        let c = self.compute(&orig).await;
        let report_due = self.next_report.lock().is_none_or(|t| Instant::now() >= t);
        if !c.changed && !report_due {
            self.publish(orig);
            return Ok(());
        }
        self.write(&orig, c).await
    }

    /// Right after start: check every 200 ms and write status as soon as the node turns
    /// Ready, instead of waiting for the next regular update.
    async fn fast_status_update(self: Arc<Self>) {
        let start = Instant::now();
        loop {
            if start.elapsed() >= NODE_READY_GRACE_PERIOD {
                tracing::error!(node = %self.name(), "node not becoming ready in time after startup");
                return;
            }
            if self.fast_status_update_once().await {
                return;
            }
            tokio::time::sleep(FAST_STATUS_PERIOD).await;
        }
    }

    /// Whether the fast updates are done (the node is Ready).
    async fn fast_status_update_once(&self) -> bool {
        let _guard = self.sync.lock().await;
        let Some(orig) = self.k.node.borrow().clone() else {
            return false;
        };
        let ready = |n: &Node| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.status.clone())
        };
        match ready(&orig).as_deref() {
            None => return false,
            Some("True") => return true,
            Some(_) => {}
        }
        self.update_runtime_up().await;
        let c = self.compute(&orig).await;
        if !c.changed || ready(&c.node).as_deref() != Some("True") {
            return false;
        }
        tracing::info!(node = %self.name(), "fast updating node status as it just became ready");
        match self.write(&orig, c).await {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(node = %self.name(), error = %e, "fast node status update failed");
                false
            }
        }
    }

    /// Watch this Node: publish every version, and apply new pod CIDRs at once.
    async fn watch_node(self: Arc<Self>) {
        let selector = format!("metadata.name={}", self.name());
        let stream = watcher::watcher(
            self.nodes.clone(),
            watcher::Config::default().fields(&selector),
        );
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(n)) | Ok(watcher::Event::InitApply(n)) => {
                    let cidrs = pod_cidrs(&n);
                    self.publish(n);
                    if !cidrs.is_empty() {
                        if let Err(e) = self.update_pod_cidr(&cidrs).await {
                            tracing::error!(error = %e, "pod CIDR not applied");
                        }
                    }
                }
                Ok(watcher::Event::Delete(_)) => {
                    tracing::warn!(node = %self.name(), "this node's Node object was deleted");
                    self.k.node.send_replace(None);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "node watch failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    fn record(&self, type_: &'static str, reason: &str, message: &str) {
        self.k
            .recorder
            .record(node_ref(self.name()), type_, reason, message.to_string());
    }

    fn record_all(&self, events: &[NodeEvent]) {
        for e in events {
            self.record(e.type_, e.reason, &e.message);
        }
    }
}

/// Writes name the kubelet as their field manager.
pub(crate) const FIELD_MANAGER: &str = "kubelet";

pub(crate) fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// How events name the node (Kubernetes' nodeRef: the node's name doubles as its uid).
pub fn node_ref(name: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("Node".into()),
        name: Some(name.into()),
        uid: Some(name.into()),
        ..Default::default()
    }
}

/// The Node's pod CIDRs (podCIDRs, else podCIDR).
pub fn pod_cidrs(node: &Node) -> Vec<String> {
    let Some(spec) = node.spec.as_ref() else {
        return Vec::new();
    };
    match &spec.pod_cidrs {
        Some(c) if !c.is_empty() => c.clone(),
        _ => spec
            .pod_cidr
            .iter()
            .filter(|c| !c.is_empty())
            .cloned()
            .collect(),
    }
}

/// The metadata patch that sets back, on a Node registered before, the labels and the
/// attach/detach annotation the kubelet owns (None: nothing to change).
pub fn reconcile_patch(initial: &Node, existing: &Node) -> Option<Value> {
    let mut labels = Map::new();
    let want = initial.metadata.labels.clone().unwrap_or_default();
    let have = existing.metadata.labels.clone().unwrap_or_default();
    for key in DEFAULT_LABELS {
        let Some(v) = want.get(*key) else { continue };
        if have.get(*key) != Some(v) {
            labels.insert(
                key.to_string(),
                if v.is_empty() {
                    Value::Null
                } else {
                    Value::String(v.clone())
                },
            );
        }
    }
    let mut annotations = Map::new();
    let want_cmad = initial
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONTROLLER_MANAGED_ATTACH_DETACH));
    let have_cmad = existing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONTROLLER_MANAGED_ATTACH_DETACH));
    if want_cmad != have_cmad {
        annotations.insert(
            CONTROLLER_MANAGED_ATTACH_DETACH.to_string(),
            want_cmad.map_or(Value::Null, |v| Value::String(v.clone())),
        );
    }
    if labels.is_empty() && annotations.is_empty() {
        return None;
    }
    let mut meta = Map::new();
    if !labels.is_empty() {
        meta.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    Some(json!({ "metadata": meta }))
}

/// The strategic merge patch writing the kubelet's part of `new`'s status over `orig`:
/// conditions merge by type (others' conditions stay), resources the machine no longer has
/// are removed, images are replaced.
pub fn status_patch(orig: &Node, new: &Node) -> Value {
    let status = new
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_else(|| json!({}));
    let mut out = Map::new();
    for key in [
        "capacity",
        "allocatable",
        "conditions",
        "addresses",
        "daemonEndpoints",
        "nodeInfo",
        "images",
        "runtimeHandlers",
    ] {
        let v = status.get(key).cloned().unwrap_or(Value::Null);
        let empty_list = v.as_array().is_some_and(Vec::is_empty);
        out.insert(
            key.to_string(),
            if empty_list && key != "conditions" {
                Value::Null
            } else {
                v
            },
        );
    }
    for key in ["capacity", "allocatable"] {
        let old = orig.status.as_ref().and_then(|s| {
            if key == "capacity" {
                s.capacity.as_ref()
            } else {
                s.allocatable.as_ref()
            }
        });
        let Some(old) = old else { continue };
        if let Some(m) = out.get_mut(key).and_then(Value::as_object_mut) {
            for k in old.keys() {
                if !m.contains_key(k) {
                    m.insert(k.clone(), Value::Null);
                }
            }
        }
    }
    json!({ "status": out })
}

#[cfg(test)]
mod tests;
