//! What the scheduler knows about pods and nodes, computed once per object: `PodInfo` (requests,
//! host ports, parsed affinity terms) and `NodeInfo` (allocatable, what its pods request, used
//! ports, images). Mirrors `pkg/scheduler/framework/types.go`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};

use capstan_api::selector::label::LabelSelector;
use capstan_api::validation::quantity;
use k8s_openapi::api::core::v1::{
    Container, Node, Pod, PodAffinityTerm, PodCondition, PodSpec, PodStatus, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// Default CPU request (millicores) assumed for scoring when a container names none.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Default memory request (bytes) assumed for scoring when a container names none.
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Amounts of every resource the scheduler accounts: CPU in millicores, the rest in units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// Pod count (only meaningful for allocatable).
    pub allowed_pod_number: i64,
    /// Extended resources, hugepages and attachable volumes, sorted by name.
    pub scalar: Vec<(String, i64)>,
}

impl Resource {
    /// Read a Kubernetes resource list (requests, limits, allocatable).
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Resource {
        let mut r = Resource::default();
        for (name, q) in list {
            r.set(name, quantity_value(name, &q.0));
        }
        r
    }

    /// The amount of one resource by its Kubernetes name.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            "cpu" => self.milli_cpu,
            "memory" => self.memory,
            "ephemeral-storage" => self.ephemeral_storage,
            "pods" => self.allowed_pod_number,
            _ => self
                .scalar
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, v)| *v),
        }
    }

    pub fn set(&mut self, name: &str, v: i64) {
        match name {
            "cpu" => self.milli_cpu = v,
            "memory" => self.memory = v,
            "ephemeral-storage" => self.ephemeral_storage = v,
            "pods" => self.allowed_pod_number = v,
            _ if is_scalar_resource(name) => {
                match self.scalar.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
                    Ok(i) => self.scalar[i].1 = v,
                    Err(i) => self.scalar.insert(i, (name.to_string(), v)),
                }
            }
            _ => {}
        }
    }

    pub fn add(&mut self, o: &Resource) {
        self.milli_cpu = self.milli_cpu.saturating_add(o.milli_cpu);
        self.memory = self.memory.saturating_add(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_add(o.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.saturating_add(o.allowed_pod_number);
        for (n, v) in &o.scalar {
            let cur = self.get(n);
            self.set(n, cur.saturating_add(*v));
        }
    }

    pub fn sub(&mut self, o: &Resource) {
        self.milli_cpu = self.milli_cpu.saturating_sub(o.milli_cpu);
        self.memory = self.memory.saturating_sub(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_sub(o.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.saturating_sub(o.allowed_pod_number);
        for (n, v) in &o.scalar {
            let cur = self.get(n);
            self.set(n, cur.saturating_sub(*v));
        }
    }

    /// Each resource the larger of the two (init containers against the rest).
    pub fn set_max(&mut self, o: &Resource) {
        self.milli_cpu = self.milli_cpu.max(o.milli_cpu);
        self.memory = self.memory.max(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(o.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.max(o.allowed_pod_number);
        for (n, v) in &o.scalar {
            let cur = self.get(n);
            if *v > cur {
                self.set(n, *v);
            }
        }
    }
}

/// Extended resources (`example.com/gpu`), `hugepages-*` and `attachable-volumes-*`.
pub fn is_scalar_resource(name: &str) -> bool {
    name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || (name.contains('/') && !name.starts_with("requests."))
}

/// A quantity as the scheduler counts it: CPU in millicores, everything else in whole units,
/// both rounded up. An unparsable quantity counts as zero (validation rejects those on write).
pub fn quantity_value(name: &str, s: &str) -> i64 {
    let Some(q) = quantity::parse(s) else {
        return 0;
    };
    let v = if name == "cpu" {
        q.milli()
    } else {
        let n = 1_000_000_000i128;
        q.nanos / n + i128::from(q.nanos % n > 0)
    };
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// A host port a pod's container asks for (`hostIP`, protocol, `hostPort`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// "0.0.0.0" when the container names none.
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

/// A parsed pod (anti-)affinity term (`pkg/scheduler/framework.AffinityTerm`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityTerm {
    /// Namespaces named by the term; the pod's own namespace when it names none and has no
    /// namespace selector.
    pub namespaces: BTreeSet<String>,
    pub selector: LabelSelector,
    pub topology_key: String,
    /// Selects namespaces by their labels; `LabelSelector::nothing()` when absent.
    pub namespace_selector: LabelSelector,
}

impl AffinityTerm {
    /// Parse a term of `pod`. Invalid selectors are an error (the API server rejects them).
    pub fn parse(pod_namespace: &str, term: &PodAffinityTerm) -> Result<AffinityTerm, String> {
        let selector = match &term.label_selector {
            Some(s) => label_selector(s)?,
            None => LabelSelector::nothing(),
        };
        let namespace_selector = match &term.namespace_selector {
            Some(s) => label_selector(s)?,
            None => LabelSelector::nothing(),
        };
        let mut namespaces: BTreeSet<String> = term.namespaces.iter().flatten().cloned().collect();
        if namespaces.is_empty() && term.namespace_selector.is_none() {
            namespaces.insert(pod_namespace.to_string());
        }
        Ok(AffinityTerm {
            namespaces,
            selector,
            topology_key: term.topology_key.clone(),
            namespace_selector,
        })
    }

    /// Whether `pod` (whose namespace has `ns_labels`) is one this term selects.
    pub fn matches(&self, pod: &PodInfo, ns_labels: Option<&BTreeMap<String, String>>) -> bool {
        let ns_ok = self.namespaces.contains(pod.namespace())
            || (!self.namespace_selector.is_nothing()
                && self
                    .namespace_selector
                    .matches_fn(|k| ns_labels.and_then(|l| l.get(k)).map(String::as_str)));
        ns_ok
            && self
                .selector
                .matches_fn(|k| pod.labels().get(k).map(String::as_str))
    }

    /// A hash of the term's content (equal terms hash equally), for grouping equal terms.
    pub fn content_hash(&self) -> u64 {
        let mut h = std::hash::DefaultHasher::new();
        self.namespaces.hash(&mut h);
        self.topology_key.hash(&mut h);
        for s in [&self.selector, &self.namespace_selector] {
            s.is_nothing().hash(&mut h);
            for r in s.requirements() {
                r.key().hash(&mut h);
                r.operator().hash(&mut h);
                r.values().hash(&mut h);
            }
        }
        h.finish()
    }
}

/// A weighted (preferred) affinity term.
#[derive(Debug, Clone)]
pub struct WeightedAffinityTerm {
    pub term: AffinityTerm,
    pub weight: i32,
}

/// Convert a typed `metav1.LabelSelector` into a matcher.
pub fn label_selector(
    s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Result<LabelSelector, String> {
    let v = serde_json::to_value(s).map_err(|e| e.to_string())?;
    LabelSelector::from_json(&v).map_err(|e| e.to_string())
}

/// A pod with everything the scheduler derives from it computed once.
#[derive(Debug, Clone)]
pub struct PodInfo {
    /// The pod: whole while it waits to be scheduled, cut down once placed ([`PodInfo::pod`]).
    object: PodObject,
    /// `namespace/name`.
    pub key: String,
    pub priority: i32,
    /// What the pod reserves on a node (`resource.PodRequests`, with sidecars and overhead).
    pub requests: Resource,
    /// CPU and memory requests with Kubernetes' non-zero defaults, used by scoring.
    pub non_zero_cpu: i64,
    pub non_zero_memory: i64,
    pub host_ports: Vec<HostPort>,
    pub required_affinity: Vec<AffinityTerm>,
    pub required_anti_affinity: Vec<AffinityTerm>,
    pub preferred_affinity: Vec<WeightedAffinityTerm>,
    pub preferred_anti_affinity: Vec<WeightedAffinityTerm>,
    /// Set when an affinity term could not be parsed; the pod is then unschedulable.
    pub parse_error: Option<String>,
    /// A hash of the namespace and labels: pods with equal namespace and labels hash equally
    /// (the snapshot groups them, so selectors are evaluated once per group).
    pub label_hash: u64,
}

static EMPTY_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl PodInfo {
    pub fn new(pod: Pod) -> PodInfo {
        PodInfo::from_arc(Arc::new(pod))
    }

    pub fn from_arc(pod: Arc<Pod>) -> PodInfo {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.as_ref();
        let (requests, non_zero_cpu, non_zero_memory) = pod_requests(&pod);
        let mut host_ports = Vec::new();
        for c in spec.into_iter().flat_map(|s| s.containers.iter()) {
            for p in c.ports.iter().flatten() {
                if let Some(port) = p.host_port.filter(|p| *p > 0) {
                    host_ports.push(HostPort {
                        ip: p
                            .host_ip
                            .clone()
                            .filter(|s| !s.is_empty())
                            .unwrap_or_else(|| "0.0.0.0".into()),
                        protocol: p
                            .protocol
                            .clone()
                            .filter(|s| !s.is_empty())
                            .unwrap_or_else(|| "TCP".into()),
                        port,
                    });
                }
            }
        }
        let mut info = PodInfo {
            key: format!("{ns}/{name}"),
            priority: spec.and_then(|s| s.priority).unwrap_or(0),
            requests,
            non_zero_cpu,
            non_zero_memory,
            host_ports,
            required_affinity: Vec::new(),
            required_anti_affinity: Vec::new(),
            preferred_affinity: Vec::new(),
            preferred_anti_affinity: Vec::new(),
            parse_error: None,
            label_hash: label_hash(&ns, pod.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS)),
            object: PodObject::Whole(pod.clone()),
        };
        if let Some(aff) = spec.and_then(|s| s.affinity.as_ref()) {
            let mut errors = Vec::new();
            let mut parse = |t: &PodAffinityTerm| match AffinityTerm::parse(&ns, t) {
                Ok(t) => Some(t),
                Err(e) => {
                    errors.push(e);
                    None
                }
            };
            if let Some(a) = &aff.pod_affinity {
                info.required_affinity = a
                    .required_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .filter_map(&mut parse)
                    .collect();
                info.preferred_affinity = a
                    .preferred_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .filter_map(|w| {
                        parse(&w.pod_affinity_term).map(|term| WeightedAffinityTerm {
                            term,
                            weight: w.weight,
                        })
                    })
                    .collect();
            }
            if let Some(a) = &aff.pod_anti_affinity {
                info.required_anti_affinity = a
                    .required_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .filter_map(&mut parse)
                    .collect();
                info.preferred_anti_affinity = a
                    .preferred_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .filter_map(|w| {
                        parse(&w.pod_affinity_term).map(|term| WeightedAffinityTerm {
                            term,
                            weight: w.weight,
                        })
                    })
                    .collect();
            }
            if !errors.is_empty() {
                info.parse_error = Some(errors.join("; "));
            }
        }
        info
    }

    /// This pod as a placed pod: what the scheduler derived from it kept, the object cut to
    /// what placed pods are read for (identity, labels, owners, deletion, priority, the
    /// volumes VolumeRestrictions compares, start time and the DisruptionTarget condition
    /// preemption reads). The scheduler keeps every placed pod of the cluster; the whole
    /// object is ten times that (containers, volume sources, conditions).
    pub fn placed(self) -> PodInfo {
        let PodObject::Whole(pod) = &self.object else {
            return self;
        };
        let m = &pod.metadata;
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let volumes: Vec<Volume> = spec
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or_default()
            .iter()
            .filter(|v| {
                v.persistent_volume_claim.is_some()
                    || v.gce_persistent_disk.is_some()
                    || v.aws_elastic_block_store.is_some()
                    || v.rbd.is_some()
                    || v.iscsi.is_some()
            })
            .cloned()
            .collect();
        let conditions: Vec<_> = status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
            .iter()
            .filter(|c| c.type_ == "DisruptionTarget")
            .cloned()
            .collect();
        let placed = PlacedPod {
            metadata: ObjectMeta {
                name: m.name.clone(),
                namespace: m.namespace.clone(),
                uid: m.uid.clone(),
                resource_version: m.resource_version.clone(),
                labels: m.labels.clone(),
                owner_references: m.owner_references.clone(),
                deletion_timestamp: m.deletion_timestamp.clone(),
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                ..Default::default()
            },
            spec: spec.map(|s| PlacedSpec {
                node_name: s.node_name.clone(),
                scheduler_name: s.scheduler_name.clone(),
                priority: s.priority,
                priority_class_name: s.priority_class_name.clone(),
                preemption_policy: s.preemption_policy.clone(),
                volumes,
            }),
            status: status.map(|s| PlacedStatus {
                phase: s.phase.clone(),
                start_time: s.start_time.clone(),
                nominated_node_name: s.nominated_node_name.clone(),
                conditions,
            }),
            whole: OnceLock::new(),
        };
        PodInfo {
            object: PodObject::Placed(Arc::new(placed)),
            ..self
        }
    }

    /// The pod object. For a placed pod, what placement reads of it (see
    /// [`PodInfo::placed`]), made into a `Pod` the first time it is asked for; the accessors
    /// below read placed pods without making one.
    pub fn pod(&self) -> &Pod {
        match &self.object {
            PodObject::Whole(p) => p,
            PodObject::Placed(p) => p.pod(),
        }
    }

    /// Whether this is a placed pod's cut-down form.
    pub fn is_placed(&self) -> bool {
        matches!(self.object, PodObject::Placed(_))
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match &self.object {
            PodObject::Whole(p) => &p.metadata,
            PodObject::Placed(p) => &p.metadata,
        }
    }

    /// `spec.volumes` (of a placed pod: those VolumeRestrictions compares).
    pub fn volumes(&self) -> &[Volume] {
        match &self.object {
            PodObject::Whole(p) => p
                .spec
                .as_ref()
                .and_then(|s| s.volumes.as_deref())
                .unwrap_or(&[]),
            PodObject::Placed(p) => p.spec.as_ref().map_or(&[][..], |s| s.volumes.as_slice()),
        }
    }

    /// `status.nominatedNodeName`, empty when unset.
    pub fn nominated_node_name(&self) -> &str {
        match &self.object {
            PodObject::Whole(p) => p
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.as_deref()),
            PodObject::Placed(p) => p
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.as_deref()),
        }
        .unwrap_or("")
    }

    /// `status.startTime`.
    pub fn start_time(&self) -> Option<&Time> {
        match &self.object {
            PodObject::Whole(p) => p.status.as_ref().and_then(|s| s.start_time.as_ref()),
            PodObject::Placed(p) => p.status.as_ref().and_then(|s| s.start_time.as_ref()),
        }
    }

    /// The `DisruptionTarget` condition.
    pub fn disruption_target(&self) -> Option<&PodCondition> {
        let conditions = match &self.object {
            PodObject::Whole(p) => p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .unwrap_or(&[]),
            PodObject::Placed(p) => p
                .status
                .as_ref()
                .map_or(&[][..], |s| s.conditions.as_slice()),
        };
        conditions.iter().find(|c| c.type_ == "DisruptionTarget")
    }

    /// `status.phase`, empty when unset.
    pub fn phase(&self) -> &str {
        match &self.object {
            PodObject::Whole(p) => p.status.as_ref().and_then(|s| s.phase.as_deref()),
            PodObject::Placed(p) => p.status.as_ref().and_then(|s| s.phase.as_deref()),
        }
        .unwrap_or("")
    }

    pub fn namespace(&self) -> &str {
        self.metadata().namespace.as_deref().unwrap_or("")
    }

    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or("")
    }

    pub fn uid(&self) -> &str {
        self.metadata().uid.as_deref().unwrap_or("")
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.metadata().labels.as_ref().unwrap_or(&EMPTY_LABELS)
    }

    /// `spec.nodeName`, empty when unassigned.
    pub fn node_name(&self) -> &str {
        match &self.object {
            PodObject::Whole(p) => p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            PodObject::Placed(p) => p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        }
        .unwrap_or("")
    }

    pub fn scheduler_name(&self) -> &str {
        match &self.object {
            PodObject::Whole(p) => p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()),
            PodObject::Placed(p) => p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()),
        }
        .filter(|s| !s.is_empty())
        .unwrap_or("default-scheduler")
    }

    pub fn has_affinity(&self) -> bool {
        !self.required_affinity.is_empty()
            || !self.preferred_affinity.is_empty()
            || !self.required_anti_affinity.is_empty()
            || !self.preferred_anti_affinity.is_empty()
    }

    /// The pod is being deleted.
    pub fn terminating(&self) -> bool {
        self.metadata().deletion_timestamp.is_some()
    }
}

/// What a [`PodInfo`] holds of its pod.
#[derive(Debug, Clone)]
enum PodObject {
    Whole(Arc<Pod>),
    Placed(Arc<PlacedPod>),
}

/// A placed pod as the scheduler keeps it: about 600 bytes where a `Pod` takes 2,160 before
/// anything it points to (its `PodSpec` alone is 1,416), and the scheduler keeps every placed
/// pod of the cluster.
#[derive(Debug)]
struct PlacedPod {
    metadata: ObjectMeta,
    spec: Option<PlacedSpec>,
    status: Option<PlacedStatus>,
    /// The same as a `Pod`, made when first asked for ([`PodInfo::pod`]).
    whole: OnceLock<Box<Pod>>,
}

#[derive(Debug)]
struct PlacedSpec {
    node_name: Option<String>,
    scheduler_name: Option<String>,
    priority: Option<i32>,
    priority_class_name: Option<String>,
    preemption_policy: Option<String>,
    volumes: Vec<Volume>,
}

#[derive(Debug)]
struct PlacedStatus {
    phase: Option<String>,
    start_time: Option<Time>,
    nominated_node_name: Option<String>,
    conditions: Vec<PodCondition>,
}

impl PlacedPod {
    fn pod(&self) -> &Pod {
        self.whole.get_or_init(|| {
            Box::new(Pod {
                metadata: self.metadata.clone(),
                spec: self.spec.as_ref().map(|s| PodSpec {
                    node_name: s.node_name.clone(),
                    scheduler_name: s.scheduler_name.clone(),
                    priority: s.priority,
                    priority_class_name: s.priority_class_name.clone(),
                    preemption_policy: s.preemption_policy.clone(),
                    volumes: (!s.volumes.is_empty()).then(|| s.volumes.clone()),
                    ..Default::default()
                }),
                status: self.status.as_ref().map(|s| PodStatus {
                    phase: s.phase.clone(),
                    start_time: s.start_time.clone(),
                    nominated_node_name: s.nominated_node_name.clone(),
                    conditions: (!s.conditions.is_empty()).then(|| s.conditions.clone()),
                    ..Default::default()
                }),
            })
        })
    }
}

fn label_hash(namespace: &str, labels: &BTreeMap<String, String>) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    namespace.hash(&mut h);
    labels.hash(&mut h);
    h.finish()
}

fn container_requests(c: &Container) -> Resource {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .map(Resource::from_list)
        .unwrap_or_default()
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// `resource.PodRequests` (with restartable init containers and overhead), plus the non-zero
/// CPU and memory requests scoring uses.
fn pod_requests(pod: &Pod) -> (Resource, i64, i64) {
    let Some(spec) = pod.spec.as_ref() else {
        return (Resource::default(), 0, 0);
    };
    let mut reqs = Resource::default();
    let (mut nz_cpu, mut nz_mem) = (0i64, 0i64);
    let non_zero = |r: &Resource, c: &Container| {
        let has = |n: &str| {
            c.resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .is_some_and(|m| m.contains_key(n))
        };
        (
            if has("cpu") {
                r.milli_cpu
            } else {
                DEFAULT_MILLI_CPU_REQUEST
            },
            if has("memory") {
                r.memory
            } else {
                DEFAULT_MEMORY_REQUEST
            },
        )
    };
    for c in &spec.containers {
        let r = container_requests(c);
        let (a, b) = non_zero(&r, c);
        nz_cpu = nz_cpu.saturating_add(a);
        nz_mem = nz_mem.saturating_add(b);
        reqs.add(&r);
    }
    let mut sidecars = Resource::default();
    let mut init_max = Resource::default();
    let (mut nz_init_cpu, mut nz_init_mem, mut nz_side_cpu, mut nz_side_mem) =
        (0i64, 0i64, 0i64, 0i64);
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c);
        let (a, b) = non_zero(&r, c);
        if is_sidecar(c) {
            reqs.add(&r);
            sidecars.add(&r);
            nz_cpu = nz_cpu.saturating_add(a);
            nz_mem = nz_mem.saturating_add(b);
            nz_side_cpu = nz_side_cpu.saturating_add(a);
            nz_side_mem = nz_side_mem.saturating_add(b);
        } else {
            let mut tmp = r.clone();
            tmp.add(&sidecars);
            init_max.set_max(&tmp);
            nz_init_cpu = nz_init_cpu.max(a.saturating_add(nz_side_cpu));
            nz_init_mem = nz_init_mem.max(b.saturating_add(nz_side_mem));
        }
    }
    reqs.set_max(&init_max);
    nz_cpu = nz_cpu.max(nz_init_cpu);
    nz_mem = nz_mem.max(nz_init_mem);
    if let Some(o) = &spec.overhead {
        let o = Resource::from_list(o);
        reqs.add(&o);
        nz_cpu = nz_cpu.saturating_add(o.milli_cpu);
        nz_mem = nz_mem.saturating_add(o.memory);
    }
    (reqs, nz_cpu, nz_mem)
}

/// A node and the pods the scheduler has placed on it (bound or assumed).
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    pub allocatable: Resource,
    /// Sum of the requests of its pods.
    pub requested: Resource,
    /// Sum of the non-zero CPU/memory requests of its pods (for scoring).
    pub non_zero_cpu: i64,
    pub non_zero_memory: i64,
    pub pods: Vec<Arc<PodInfo>>,
    /// Pods on this node with any (anti-)affinity term.
    pub pods_with_affinity: Vec<Arc<PodInfo>>,
    /// Pods on this node with a required anti-affinity term.
    pub pods_with_required_anti_affinity: Vec<Arc<PodInfo>>,
    pub used_ports: Vec<HostPort>,
    /// `namespace/claim` of each PVC used by a pod here, with the number of pods using it.
    pub pvc_ref_counts: HashMap<String, usize>,
    /// Image name (as listed in node.status.images) → size in bytes.
    pub image_sizes: HashMap<String, i64>,
    /// Bumped on every change.
    pub generation: u64,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// The node has a `NoSchedule` or `NoExecute` taint.
    pub has_no_schedule_taints: bool,
    /// The node has a `PreferNoSchedule` taint.
    pub has_prefer_no_schedule_taints: bool,
    /// Position in `Snapshot::nodes()`, with the snapshot's tag for the node's labels at that
    /// position (see `snapshot::NodeSlots`); `usize::MAX` and 0 outside a snapshot.
    pub index: usize,
    pub slot: u64,
}

impl NodeInfo {
    pub fn new(node: Node) -> NodeInfo {
        let mut n = NodeInfo {
            node: Arc::new(Node::default()),
            allocatable: Resource::default(),
            requested: Resource::default(),
            non_zero_cpu: 0,
            non_zero_memory: 0,
            pods: Vec::new(),
            pods_with_affinity: Vec::new(),
            pods_with_required_anti_affinity: Vec::new(),
            used_ports: Vec::new(),
            pvc_ref_counts: HashMap::new(),
            image_sizes: HashMap::new(),
            generation: 0,
            unschedulable: false,
            has_no_schedule_taints: false,
            has_prefer_no_schedule_taints: false,
            index: usize::MAX,
            slot: 0,
        };
        n.set_node(Arc::new(node));
        n
    }

    /// Replace the Node object (on an update), keeping the pods.
    pub fn set_node(&mut self, node: Arc<Node>) {
        let status = node.status.as_ref();
        self.allocatable = status
            .and_then(|s| s.allocatable.as_ref())
            .map(Resource::from_list)
            .unwrap_or_default();
        self.image_sizes.clear();
        for img in status.and_then(|s| s.images.as_ref()).into_iter().flatten() {
            for name in img.names.iter().flatten() {
                self.image_sizes
                    .insert(name.clone(), img.size_bytes.unwrap_or(0));
            }
        }
        let spec = node.spec.as_ref();
        self.unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let taints = spec.and_then(|s| s.taints.as_deref()).unwrap_or(&[]);
        self.has_no_schedule_taints = taints
            .iter()
            .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute");
        self.has_prefer_no_schedule_taints = taints.iter().any(|t| t.effect == "PreferNoSchedule");
        self.node = node;
        self.generation += 1;
    }

    pub fn name(&self) -> &str {
        self.node.metadata.name.as_deref().unwrap_or("")
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.node.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS)
    }

    pub fn taints(&self) -> &[k8s_openapi::api::core::v1::Taint] {
        self.node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or(&[])
    }

    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_cpu = self.non_zero_cpu.saturating_add(pod.non_zero_cpu);
        self.non_zero_memory = self.non_zero_memory.saturating_add(pod.non_zero_memory);
        self.used_ports.extend(pod.host_ports.iter().cloned());
        for claim in pvc_names(&pod) {
            *self.pvc_ref_counts.entry(claim).or_insert(0) += 1;
        }
        if pod.has_affinity() {
            self.pods_with_affinity.push(pod.clone());
        }
        if !pod.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity.push(pod.clone());
        }
        self.pods.push(pod);
        self.generation += 1;
    }

    /// Remove the pod with this key (`namespace/name`); returns it if it was here.
    pub fn remove_pod(&mut self, key: &str) -> Option<Arc<PodInfo>> {
        let i = self.pods.iter().position(|p| p.key == key)?;
        let pod = self.pods.swap_remove(i);
        self.pods_with_affinity.retain(|p| p.key != key);
        self.pods_with_required_anti_affinity
            .retain(|p| p.key != key);
        self.requested.sub(&pod.requests);
        self.non_zero_cpu = self.non_zero_cpu.saturating_sub(pod.non_zero_cpu);
        self.non_zero_memory = self.non_zero_memory.saturating_sub(pod.non_zero_memory);
        for hp in &pod.host_ports {
            if let Some(j) = self.used_ports.iter().position(|u| u == hp) {
                self.used_ports.swap_remove(j);
            }
        }
        for claim in pvc_names(&pod) {
            if let Some(c) = self.pvc_ref_counts.get_mut(&claim) {
                *c -= 1;
                if *c == 0 {
                    self.pvc_ref_counts.remove(&claim);
                }
            }
        }
        self.generation += 1;
        Some(pod)
    }
}

/// `namespace/claim` for each PersistentVolumeClaim volume of the pod.
pub fn pvc_names(pod: &PodInfo) -> Vec<String> {
    let ns = pod.namespace();
    pod.volumes()
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| format!("{ns}/{}", c.claim_name))
        .collect()
}
