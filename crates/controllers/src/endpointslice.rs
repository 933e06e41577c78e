//! The EndpointSlice controller (Kubernetes' `endpointslice-controller`): for every Service
//! with a selector, EndpointSlices labelled `kubernetes.io/service-name=<service>` and
//! `endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io`, owned by the
//! Service, named `<service>-<random>`, one group of slices per address type (IPv4/IPv6) and
//! per set of resolved ports, at most 100 endpoints each. Every pod with an address is an
//! endpoint (terminating pods too) with `ready`/`serving`/`terminating` conditions, its node
//! and zone, a reference to the pod and its hostname (when its subdomain is the service).
//!
//! Reconciliation keeps churn low as Kubernetes' reconciler does: endpoints that stay are
//! updated in the slice that holds them, new ones first fill the slices being updated anyway,
//! then the unchanged slice they fit best, and only then new slices; a slice that would be
//! deleted while another is created is reused instead. A service without endpoints keeps one
//! empty placeholder slice. A tracker of the generations this controller wrote tells a stale
//! informer cache from a foreign change.
//!
//! The helpers both endpoint controllers share (which services a pod change touches, which
//! pods are endpoints, target port lookup, the last-change trigger time) live here too.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use capstan_runtime::{Change, Informer, Queue, Recorder};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service, ServicePort};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice, ForZone,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use parking_lot::Mutex;

use crate::util;
use crate::Ctx;

/// The `endpointslice.kubernetes.io/managed-by` value of this controller's slices.
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// Set (to "") on the Endpoints and EndpointSlices of a headless service.
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
/// When the change that the endpoints reflect happened.
pub const ANNOTATION_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// `--max-endpoints-per-slice` (Kubernetes' default).
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;
/// A change to a slice is looked at after at least this long, batching the changes.
const SLICE_CHANGE_MIN_SYNC_DELAY: Duration = Duration::from_secs(1);
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
const TOPOLOGY_MODE: &str = "service.kubernetes.io/topology-mode";
const TOPOLOGY_AWARE_HINTS: &str = "service.kubernetes.io/topology-aware-hints";

// ---------------------------------------------------------------------------------------------
// Shared with the Endpoints controller.
// ---------------------------------------------------------------------------------------------

/// The selector of a service whose endpoints the controllers manage. A service without one
/// (or with an empty one, which Kubernetes stores as none) gets its endpoints out of band.
pub(crate) fn service_selector(svc: &Service) -> Option<&BTreeMap<String, String>> {
    svc.spec
        .as_ref()?
        .selector
        .as_ref()
        .filter(|s| !s.is_empty())
}

/// Whether every `key=value` of a service selector is among `labels`.
pub(crate) fn selector_matches(
    selector: &BTreeMap<String, String>,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// Whether the service is of type ExternalName (no endpoints for it).
pub(crate) fn is_external_name(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("ExternalName")
}

/// The service's cluster IP is set (it is not headless).
pub(crate) fn is_service_ip_set(svc: &Service) -> bool {
    let ip = svc
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .unwrap_or_default();
    !ip.is_empty() && ip != "None"
}

/// `spec.publishNotReadyAddresses`.
pub(crate) fn publish_not_ready(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false)
}

/// The keys of the services in `namespace` selecting a pod with `labels`.
pub(crate) fn services_selecting(
    services: &Informer<Service>,
    namespace: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    services.for_each_in(namespace, |svc| {
        if service_selector(svc).is_some_and(|sel| selector_matches(sel, labels)) {
            keys.insert(capstan_runtime::key(
                Some(namespace),
                svc.metadata.name.as_deref().unwrap_or_default(),
            ));
        }
    });
    keys
}

/// The services whose endpoints a pod change may change (Kubernetes'
/// GetPodServiceMemberships / GetServicesToUpdateOnPodChange).
pub(crate) fn services_for_pod_change(
    services: &Informer<Service>,
    change: &Change<'_, Pod>,
) -> BTreeSet<String> {
    match change {
        Change::Add(p) | Change::Delete(p) => services_selecting(
            services,
            p.metadata.namespace.as_deref().unwrap_or_default(),
            p.metadata.labels.as_ref(),
        ),
        Change::Update { old, new } => {
            if old.metadata.resource_version == new.metadata.resource_version {
                return BTreeSet::new();
            }
            let (pod_changed, labels_changed) = pod_endpoints_changed(old, new);
            if !pod_changed && !labels_changed {
                return BTreeSet::new();
            }
            let ns = new.metadata.namespace.as_deref().unwrap_or_default();
            let current = services_selecting(services, ns, new.metadata.labels.as_ref());
            if !labels_changed {
                return current;
            }
            let before = services_selecting(services, ns, old.metadata.labels.as_ref());
            if pod_changed {
                current.union(&before).cloned().collect()
            } else {
                current.symmetric_difference(&before).cloned().collect()
            }
        }
    }
}

/// (the pod changed in a way its endpoints show, its labels or hostname changed).
fn pod_endpoints_changed(old: &Pod, new: &Pod) -> (bool, bool) {
    let host = |p: &Pod| {
        p.spec
            .as_ref()
            .map(|s| (s.hostname.clone(), s.subdomain.clone()))
    };
    let labels_changed = old.metadata.labels.as_ref().filter(|l| !l.is_empty())
        != new.metadata.labels.as_ref().filter(|l| !l.is_empty())
        || host(old) != host(new);
    // Kubernetes compares the deletion timestamps by pointer: any deletion counts.
    let changed = old.metadata.deletion_timestamp.is_some()
        || new.metadata.deletion_timestamp.is_some()
        || util::is_pod_ready(old) != util::is_pod_ready(new)
        || pod_ips(old) != pod_ips(new);
    (changed, labels_changed)
}

/// The pod's addresses (`status.podIPs`, or `status.podIP` when only that is set).
pub(crate) fn pod_ips(pod: &Pod) -> Vec<String> {
    let Some(st) = pod.status.as_ref() else {
        return Vec::new();
    };
    let ips: Vec<String> = st
        .pod_ips
        .iter()
        .flatten()
        .map(|p| p.ip.clone())
        .filter(|ip| !ip.is_empty())
        .collect();
    if !ips.is_empty() {
        return ips;
    }
    st.pod_ip
        .iter()
        .filter(|ip| !ip.is_empty())
        .cloned()
        .collect()
}

fn is_ipv6(ip: &str) -> bool {
    ip.parse::<std::net::Ipv6Addr>().is_ok()
}

/// Whether a pod belongs in a service's endpoints: not terminal, has an address, and (unless
/// `include_terminating`) not being deleted.
pub(crate) fn should_pod_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded") | Some("Failed")) {
        return false;
    }
    if pod_ips(pod).is_empty() {
        return false;
    }
    include_terminating || pod.metadata.deletion_timestamp.is_none()
}

/// Whether an endpoint of `svc` carries the pod's hostname: the pod has one and its
/// subdomain is the service.
pub(crate) fn should_set_hostname(pod: &Pod, svc: &Service) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.hostname.as_deref().is_some_and(|h| !h.is_empty())
        && spec.subdomain.as_deref() == svc.metadata.name.as_deref()
        && pod.metadata.namespace == svc.metadata.namespace
}

/// The pod port a service port leads to: a number as is, a name looked up among the ports
/// of the pod's containers (and sidecar init containers) with the same protocol.
pub(crate) fn find_port(pod: &Pod, sp: &ServicePort) -> Option<i32> {
    match sp.target_port.as_ref() {
        None => Some(sp.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            let proto = sp.protocol.as_deref().unwrap_or("TCP");
            let spec = pod.spec.as_ref()?;
            let sidecars = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"));
            spec.containers
                .iter()
                .chain(sidecars)
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == proto
                })
                .map(|p| p.container_port)
        }
    }
}

/// The pod's Ready condition's last transition (the change its endpoints reflect).
fn pod_trigger_time(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

#[derive(Default)]
struct TriggerState {
    service: Option<Timestamp>,
    pods: HashMap<String, Timestamp>,
}

/// Computes the `endpoints.kubernetes.io/last-change-trigger-time` annotation as Kubernetes'
/// TriggerTimeTracker: the earliest pod readiness change (or service creation) that is new
/// since the previous sync of the service; a service's first sync reports its creation.
#[derive(Default)]
pub(crate) struct TriggerTimeTracker {
    states: Mutex<HashMap<String, TriggerState>>,
}

impl TriggerTimeTracker {
    pub(crate) fn compute(&self, key: &str, svc: &Service, pods: &[Arc<Pod>]) -> Option<Timestamp> {
        let mut states = self.states.lock();
        let known = states.contains_key(key);
        let state = states.entry(key.to_string()).or_default();
        let mut min: Option<Timestamp> = None;
        let mut seen = HashMap::new();
        for pod in pods {
            let Some(t) = pod_trigger_time(pod) else {
                continue;
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            if state.pods.get(&name).is_none_or(|prev| t > *prev) {
                min = Some(min.map_or(t, |m| m.min(t)));
            }
            seen.insert(name, t);
        }
        let created = svc.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if let Some(c) = created {
            if state.service.is_none_or(|prev| c > prev) {
                min = Some(min.map_or(c, |m| m.min(c)));
            }
        }
        state.pods = seen;
        state.service = created;
        if !known {
            return created;
        }
        min
    }

    pub(crate) fn delete(&self, key: &str) {
        self.states.lock().remove(key);
    }
}

/// A time as Go's RFC3339Nano in UTC (fraction without trailing zeros).
pub(crate) fn format_rfc3339_nano(t: Timestamp) -> String {
    let secs = t.as_second();
    let nanos = t.subsec_nanosecond();
    let whole = Timestamp::from_second(secs).unwrap_or(t);
    let base = whole.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    if nanos == 0 {
        format!("{base}Z")
    } else {
        let frac = format!("{nanos:09}");
        format!("{base}.{}Z", frac.trim_end_matches('0'))
    }
}

/// The message of an API error as Kubernetes' controllers print it (`%v` of a StatusError).
pub(crate) fn error_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

/// Whether a create failed because the namespace is being deleted.
pub(crate) fn is_namespace_terminating(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.details.as_ref().is_some_and(|d| {
        d.causes.iter().any(|c| c.reason == "NamespaceTerminating")
    }))
}

// ---------------------------------------------------------------------------------------------
// Go hashing (the order Kubernetes gives a slice's ports).
// ---------------------------------------------------------------------------------------------

/// FNV-1a, 128 bits, as Go's hash/fnv New128a, hex encoded.
pub(crate) fn fnv128a_hex(data: &[u8]) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h = OFFSET;
    for b in data {
        h ^= u128::from(*b);
        h = h.wrapping_mul(PRIME);
    }
    format!("{h:032x}")
}

/// go-spew's `%#v` of a `*string`-like pointer field (`(*T)value` or `(*T)<nil>`).
pub(crate) fn spew_ptr<T: std::fmt::Display>(ty: &str, v: Option<T>) -> String {
    match v {
        Some(v) => format!("({ty}){v}"),
        None => format!("({ty})<nil>"),
    }
}

/// go-spew's `%#v` of a discovery/v1 EndpointPort (what Kubernetes hashes to order ports).
fn spew_slice_port(p: &EndpointPort) -> String {
    format!(
        "(v1.EndpointPort){{Name:{} Port:{} Protocol:{} AppProtocol:{}}}",
        spew_ptr("*string", p.name.as_deref()),
        spew_ptr("*int32", p.port),
        spew_ptr("*v1.Protocol", p.protocol.as_deref()),
        spew_ptr("*string", p.app_protocol.as_deref()),
    )
}

/// Sort ports as Kubernetes' NewPortMapKey leaves them (by their spew hash).
fn sort_slice_ports(ports: &mut [EndpointPort]) {
    ports.sort_by_cached_key(|p| fnv128a_hex(spew_slice_port(p).as_bytes()));
}

/// A key identifying a set of ports regardless of order.
fn port_map_key(ports: &[EndpointPort]) -> String {
    let mut keys: Vec<String> = ports.iter().map(spew_slice_port).collect();
    keys.sort();
    keys.join("\n")
}

// ---------------------------------------------------------------------------------------------
// Generations this controller wrote.
// ---------------------------------------------------------------------------------------------

const DELETION_EXPECTED: i64 = -1;

#[derive(Default)]
struct TrackerState {
    /// service key → slice uid → generation written (or DELETION_EXPECTED).
    generations: HashMap<String, HashMap<String, i64>>,
    /// service key → the uid of the service the generations are for.
    service_uids: HashMap<String, String>,
}

/// Kubernetes' EndpointSliceTracker: the generation of every slice this controller wrote, so
/// a cache that has not caught up is recognised (and the sync retried) and changes it made
/// itself do not trigger another sync.
#[derive(Default)]
struct SliceTracker {
    state: Mutex<TrackerState>,
}

fn slice_service_key(s: &EndpointSlice) -> String {
    let name = s
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SERVICE_NAME))
        .cloned()
        .unwrap_or_default();
    capstan_runtime::key(s.metadata.namespace.as_deref(), &name)
}

fn uid(meta: &ObjectMeta) -> String {
    meta.uid.clone().unwrap_or_default()
}

impl SliceTracker {
    fn has(&self, s: &EndpointSlice) -> bool {
        let st = self.state.lock();
        st.generations
            .get(&slice_service_key(s))
            .is_some_and(|g| g.contains_key(&uid(&s.metadata)))
    }

    /// Whether a slice change is news: not one this controller wrote itself.
    fn should_sync(&self, s: &EndpointSlice) -> bool {
        let st = self.state.lock();
        let Some(g) = st.generations.get(&slice_service_key(s)) else {
            return true;
        };
        match g.get(&uid(&s.metadata)) {
            None => true,
            Some(gen) => s.metadata.generation.unwrap_or(0) > *gen,
        }
    }

    /// Whether the cached slices of a service are older than what this controller wrote.
    fn stale_slices(&self, svc: &Service, slices: &[Arc<EndpointSlice>]) -> bool {
        let mut st = self.state.lock();
        let key = capstan_runtime::key(
            svc.metadata.namespace.as_deref(),
            svc.metadata.name.as_deref().unwrap_or_default(),
        );
        let svc_uid = uid(&svc.metadata);
        if let Some(tracked) = st.service_uids.get(&key) {
            if !tracked.is_empty() && !svc_uid.is_empty() && *tracked != svc_uid {
                st.generations.remove(&key);
            }
        }
        st.service_uids.insert(key.clone(), svc_uid);
        let Some(g) = st.generations.get(&key) else {
            return false;
        };
        let mut provided = HashMap::new();
        for s in slices {
            let gen = s.metadata.generation.unwrap_or(0);
            provided.insert(uid(&s.metadata), gen);
            if let Some(want) = g.get(&uid(&s.metadata)) {
                if *want == DELETION_EXPECTED || *want > gen {
                    return true;
                }
            }
        }
        g.iter()
            .any(|(u, gen)| *gen != DELETION_EXPECTED && !provided.contains_key(u))
    }

    fn update(&self, s: &EndpointSlice) {
        self.state
            .lock()
            .generations
            .entry(slice_service_key(s))
            .or_default()
            .insert(uid(&s.metadata), s.metadata.generation.unwrap_or(0));
    }

    fn expect_deletion(&self, s: &EndpointSlice) {
        self.state
            .lock()
            .generations
            .entry(slice_service_key(s))
            .or_default()
            .insert(uid(&s.metadata), DELETION_EXPECTED);
    }

    /// Forget a deleted slice; false if its deletion was not this controller's doing.
    fn handle_deletion(&self, s: &EndpointSlice) -> bool {
        let mut st = self.state.lock();
        if let Some(g) = st.generations.get_mut(&slice_service_key(s)) {
            if let Some(gen) = g.remove(&uid(&s.metadata)) {
                return gen == DELETION_EXPECTED;
            }
        }
        true
    }

    fn delete_service(&self, key: &str) {
        let mut st = self.state.lock();
        st.generations.remove(key);
        st.service_uids.remove(key);
    }
}

// ---------------------------------------------------------------------------------------------
// Desired state and reconciliation (pure).
// ---------------------------------------------------------------------------------------------

/// The address types a service's slices have (from its IP families).
fn address_types(svc: &Service) -> Vec<&'static str> {
    let spec = svc.spec.as_ref();
    let families: Vec<&str> = spec
        .and_then(|s| s.ip_families.as_ref())
        .map(|f| f.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let mut types = Vec::new();
    if families.contains(&"IPv4") {
        types.push("IPv4");
    }
    if families.contains(&"IPv6") {
        types.push("IPv6");
    }
    if !types.is_empty() {
        return types;
    }
    if is_service_ip_set(svc) {
        let ip = spec
            .and_then(|s| s.cluster_ip.as_deref())
            .unwrap_or_default();
        return vec![if is_ipv6(ip) { "IPv6" } else { "IPv4" }];
    }
    vec!["IPv4", "IPv6"]
}

/// The ports of a pod's endpoint: each service port whose target port the pod has.
fn endpoint_ports(svc: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let mut out = Vec::new();
    for sp in ports {
        let Some(n) = find_port(pod, sp) else {
            continue;
        };
        out.push(EndpointPort {
            name: Some(sp.name.clone().unwrap_or_default()),
            port: Some(n),
            protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
            app_protocol: sp.app_protocol.clone(),
        });
    }
    sort_slice_ports(&mut out);
    out
}

/// The endpoint of a pod for one address type.
fn pod_to_endpoint(pod: &Pod, zone: Option<String>, svc: &Service, address_type: &str) -> Endpoint {
    let serving = util::is_pod_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let ready = publish_not_ready(svc) || (serving && !terminating);
    let want_v6 = address_type == "IPv6";
    let addresses = pod_ips(pod)
        .iter()
        .filter_map(|ip| ip.parse::<std::net::IpAddr>().ok())
        .filter(|ip| ip.is_ipv6() == want_v6)
        .map(|ip| ip.to_string())
        .collect();
    let node = pod
        .spec
        .as_ref()
        .map(|s| s.node_name.clone().unwrap_or_default())
        .filter(|n| !n.is_empty());
    Endpoint {
        addresses,
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        }),
        node_name: node,
        zone: zone.filter(|z| !z.is_empty()),
        hostname: should_set_hostname(pod, svc)
            .then(|| pod.spec.as_ref().and_then(|s| s.hostname.clone()))
            .flatten(),
        ..Default::default()
    }
}

/// What identifies an endpoint across syncs: its addresses, hostname and pod.
fn endpoint_key(ep: &Endpoint) -> String {
    let mut addrs = ep.addresses.clone();
    addrs.sort();
    let (ns, name) = ep
        .target_ref
        .as_ref()
        .map(|r| {
            (
                r.namespace.clone().unwrap_or_default(),
                r.name.clone().unwrap_or_default(),
            )
        })
        .unwrap_or_default();
    format!(
        "{}|{}|{ns}|{name}",
        addrs.join(","),
        ep.hostname.as_deref().unwrap_or_default()
    )
}

/// Whether two endpoints with the same key differ in nothing the slice shows.
fn endpoints_equal_beyond_key(a: &Endpoint, b: &Endpoint) -> bool {
    let cond = |e: &Endpoint| {
        let c = e.conditions.clone().unwrap_or_default();
        (c.ready, c.serving, c.terminating)
    };
    let target = |e: &Endpoint| {
        e.target_ref.clone().map(|mut r| {
            r.resource_version = None;
            r
        })
    };
    a.node_name == b.node_name && a.zone == b.zone && cond(a) == cond(b) && target(a) == target(b)
}

/// The slice labels for a service: its labels except the reserved ones, the headless label
/// as the service is, the service name and this controller. Also whether the copied service
/// labels differ from the slice's.
fn slice_labels(
    current: Option<&BTreeMap<String, String>>,
    svc: &Service,
) -> (BTreeMap<String, String>, bool) {
    let reserved = |k: &str| matches!(k, LABEL_SERVICE_NAME | LABEL_MANAGED_BY | LABEL_HEADLESS);
    let own: BTreeMap<String, String> = current
        .into_iter()
        .flatten()
        .filter(|(k, _)| !reserved(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut labels: BTreeMap<String, String> = svc
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| !reserved(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let changed = own != labels;
    if !is_service_ip_set(svc) {
        labels.insert(LABEL_HEADLESS.into(), String::new());
    }
    labels.insert(
        LABEL_SERVICE_NAME.into(),
        svc.metadata.name.clone().unwrap_or_default(),
    );
    labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY.into());
    (labels, changed)
}

fn owned_by(slice: &EndpointSlice, svc: &Service) -> bool {
    let svc_uid = svc.metadata.uid.as_deref().unwrap_or_default();
    slice
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == svc_uid && o.kind == "Service" && o.api_version == "v1")
}

/// A new (unnamed) slice of a service.
fn new_slice(svc: &Service, ports: Vec<EndpointPort>, address_type: &str) -> EndpointSlice {
    let name = svc.metadata.name.clone().unwrap_or_default();
    EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: svc.metadata.namespace.clone(),
            labels: Some(slice_labels(None, svc).0),
            owner_references: Some(vec![util::owner_ref(svc)]),
            ..Default::default()
        },
        address_type: address_type.to_string(),
        endpoints: Vec::new(),
        ports: Some(ports),
    }
}

/// What a sync writes.
#[derive(Debug, Default)]
struct Changes {
    create: Vec<EndpointSlice>,
    update: Vec<EndpointSlice>,
    delete: Vec<EndpointSlice>,
}

/// Reconcile the slices of one port set: (create, update, delete).
fn reconcile_ports(
    svc: &Service,
    existing: &[Arc<EndpointSlice>],
    desired: &mut BTreeMap<String, Endpoint>,
    ports: &[EndpointPort],
    address_type: &str,
    max: usize,
) -> Changes {
    let mut by_name: BTreeMap<String, EndpointSlice> = BTreeMap::new();
    let mut unchanged: BTreeSet<String> = BTreeSet::new();
    let mut to_update: BTreeSet<String> = BTreeSet::new();
    let mut to_delete: BTreeSet<String> = BTreeSet::new();

    // 1. Keep the endpoints still wanted where they are (updated if they changed).
    for s in existing {
        let name = s.metadata.name.clone().unwrap_or_default();
        let mut kept = Vec::new();
        let mut changed = false;
        for ep in &s.endpoints {
            if let Some(want) = desired.remove(&endpoint_key(ep)) {
                if !endpoints_equal_beyond_key(&want, ep) {
                    changed = true;
                }
                kept.push(want);
            }
        }
        let (labels, labels_changed) = slice_labels(s.metadata.labels.as_ref(), svc);
        if changed || kept.len() != s.endpoints.len() {
            if kept.is_empty() {
                to_delete.insert(name.clone());
                by_name.insert(name, (**s).clone());
            } else {
                let mut copy = (**s).clone();
                copy.endpoints = kept;
                copy.metadata.labels = Some(labels);
                to_update.insert(name.clone());
                by_name.insert(name, copy);
            }
        } else if labels_changed {
            let mut copy = (**s).clone();
            copy.metadata.labels = Some(labels);
            to_update.insert(name.clone());
            by_name.insert(name, copy);
        } else {
            unchanged.insert(name.clone());
            by_name.insert(name, (**s).clone());
        }
    }

    // 2. New endpoints fill the slices written anyway, fullest first.
    if !desired.is_empty() && !to_update.is_empty() {
        let mut names: Vec<String> = to_update.iter().cloned().collect();
        names.sort_by_key(|n| std::cmp::Reverse(by_name.get(n).map_or(0, |s| s.endpoints.len())));
        for n in names {
            let Some(s) = by_name.get_mut(&n) else {
                continue;
            };
            while s.endpoints.len() < max {
                let Some((_, ep)) = desired.pop_first() else {
                    break;
                };
                s.endpoints.push(ep);
            }
        }
    }

    // 3. Then the unchanged slice they fit best, then new slices.
    let mut create = Vec::new();
    while !desired.is_empty() {
        let mut fill: Option<EndpointSlice> = None;
        if desired.len() < max && !unchanged.is_empty() {
            let mut best: Option<(usize, &String)> = None;
            for n in &unchanged {
                let len = by_name.get(n).map_or(0, |s| s.endpoints.len());
                let Some(room) = max.checked_sub(desired.len() + len) else {
                    continue;
                };
                if best.is_none_or(|(b, _)| room < b) {
                    best = Some((room, n));
                }
            }
            if let Some((_, n)) = best {
                fill = by_name.get(n).cloned();
            }
        }
        let mut s = fill.unwrap_or_else(|| new_slice(svc, ports.to_vec(), address_type));
        while s.endpoints.len() < max {
            let Some((_, ep)) = desired.pop_first() else {
                break;
            };
            s.endpoints.push(ep);
        }
        match s.metadata.name.clone() {
            Some(n) => {
                unchanged.remove(&n);
                to_update.insert(n.clone());
                by_name.insert(n, s);
            }
            None => create.push(s),
        }
    }
    let pick = |names: &BTreeSet<String>| -> Vec<EndpointSlice> {
        names
            .iter()
            .filter_map(|n| by_name.get(n).cloned())
            .collect()
    };
    Changes {
        create,
        update: pick(&to_update),
        delete: pick(&to_delete),
    }
}

/// Whether an existing slice is the empty placeholder this service would get.
fn is_placeholder_of(s: &EndpointSlice, placeholder: &EndpointSlice) -> bool {
    s.metadata.namespace == placeholder.metadata.namespace
        && s.metadata.labels.clone().unwrap_or_default()
            == placeholder.metadata.labels.clone().unwrap_or_default()
        && s.address_type == placeholder.address_type
        && s.endpoints.is_empty()
        && s.ports.as_ref().is_none_or(Vec::is_empty)
}

fn hints_annotation_enabled(svc: &Service) -> bool {
    let a = svc.metadata.annotations.as_ref();
    let v = a
        .and_then(|a| a.get(TOPOLOGY_AWARE_HINTS))
        .or_else(|| a.and_then(|a| a.get(TOPOLOGY_MODE)));
    matches!(v.map(String::as_str), Some("Auto" | "auto"))
}

fn prefer_close(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.traffic_distribution.as_deref())
        == Some("PreferClose")
        && !hints_annotation_enabled(svc)
}

fn endpoint_ready(ep: &Endpoint) -> bool {
    ep.conditions.as_ref().and_then(|c| c.ready) == Some(true)
}

/// `trafficDistribution: PreferClose`: ready endpoints hint their own zone.
fn needs_zone_hints(s: &EndpointSlice) -> bool {
    s.endpoints.iter().filter(|e| endpoint_ready(e)).any(|e| {
        e.zone.as_ref().is_some_and(|z| {
            let zones = e.hints.as_ref().and_then(|h| h.for_zones.as_ref());
            !matches!(zones.map(Vec::as_slice), Some([f]) if f.name == *z)
        })
    })
}

fn set_zone_hints(s: &mut EndpointSlice) {
    for e in s.endpoints.iter_mut().filter(|e| endpoint_ready(e)) {
        e.hints = e.zone.as_ref().map(|z| EndpointHints {
            for_zones: Some(vec![ForZone { name: z.clone() }]),
        });
    }
}

fn clear_hints(s: &mut EndpointSlice) {
    for e in &mut s.endpoints {
        e.hints = None;
    }
}

/// Plan the changes to one address type's slices. `zone_of(node)` is `None` when the node is
/// unknown, `Some(zone label)` otherwise. Also returns the pods that could not be placed.
fn plan_address_type(
    svc: &Service,
    pods: &[Arc<Pod>],
    existing: &[Arc<EndpointSlice>],
    address_type: &str,
    max: usize,
    zone_of: &dyn Fn(&str) -> Option<Option<String>>,
) -> (Changes, Vec<String>) {
    let mut errors = Vec::new();
    let mut changes = Changes::default();
    let ns = svc.metadata.namespace.clone().unwrap_or_default();
    let svc_name = svc.metadata.name.clone().unwrap_or_default();

    let mut existing_by_ports: BTreeMap<String, Vec<Arc<EndpointSlice>>> = BTreeMap::new();
    for s in existing {
        if owned_by(s, svc) {
            let key = port_map_key(s.ports.as_deref().unwrap_or_default());
            existing_by_ports.entry(key).or_default().push(s.clone());
        } else {
            changes.delete.push((**s).clone());
        }
    }

    // The endpoints wanted, grouped by the ports they resolve.
    let mut desired: BTreeMap<String, (Vec<EndpointPort>, BTreeMap<String, Endpoint>)> =
        BTreeMap::new();
    for pod in pods {
        if !should_pod_be_in_endpoints(pod, true) {
            continue;
        }
        let ports = endpoint_ports(svc, pod);
        let key = port_map_key(&ports);
        let entry = desired
            .entry(key)
            .or_insert_with(|| (ports, BTreeMap::new()));
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let zone = match zone_of(&node) {
            Some(z) => z,
            None if publish_not_ready(svc) => None,
            None => {
                errors.push(format!(
                    "skipping Pod {} for Service {ns}/{svc_name}: Node {node} Not Found",
                    pod.metadata.name.as_deref().unwrap_or_default()
                ));
                continue;
            }
        };
        let ep = pod_to_endpoint(pod, zone, svc, address_type);
        if !ep.addresses.is_empty() {
            entry.1.insert(endpoint_key(&ep), ep);
        }
    }

    let desired_keys: BTreeSet<String> = desired.keys().cloned().collect();
    for (key, (ports, mut eps)) in desired {
        let current = existing_by_ports.get(&key).cloned().unwrap_or_default();
        let c = reconcile_ports(svc, &current, &mut eps, &ports, address_type, max);
        changes.create.extend(c.create);
        changes.update.extend(c.update);
        changes.delete.extend(c.delete);
    }
    for (key, slices) in &existing_by_ports {
        if !desired_keys.contains(key) {
            changes.delete.extend(slices.iter().map(|s| (**s).clone()));
        }
    }

    // A service without endpoints keeps one empty slice.
    if existing.len() == changes.delete.len() && changes.create.is_empty() {
        let placeholder = new_slice(svc, Vec::new(), address_type);
        if changes.delete.len() == 1 && is_placeholder_of(&changes.delete[0], &placeholder) {
            changes.delete.clear();
        } else {
            changes.create.push(placeholder);
        }
    }

    // Topology hints: zones for PreferClose, none otherwise.
    if prefer_close(svc) {
        let written: BTreeSet<String> = changes
            .update
            .iter()
            .chain(&changes.delete)
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        for s in existing {
            let name = s.metadata.name.clone().unwrap_or_default();
            if !written.contains(&name) && needs_zone_hints(s) {
                changes.update.push((**s).clone());
            }
        }
        changes
            .create
            .iter_mut()
            .chain(changes.update.iter_mut())
            .for_each(set_zone_hints);
    } else {
        changes
            .create
            .iter_mut()
            .chain(changes.update.iter_mut())
            .for_each(clear_hints);
    }

    // Reuse a slice about to be deleted rather than create another.
    let mut i = 0;
    while i < changes.delete.len() && !changes.create.is_empty() {
        let d = &changes.delete[i];
        let reusable = changes
            .create
            .last()
            .is_some_and(|c| c.address_type == d.address_type)
            && owned_by(d, svc);
        if reusable {
            let d = changes.delete.remove(i);
            if let Some(mut s) = changes.create.pop() {
                s.metadata.name = d.metadata.name.clone();
                s.metadata.uid = d.metadata.uid.clone();
                s.metadata.resource_version = d.metadata.resource_version.clone();
                s.metadata.creation_timestamp = d.metadata.creation_timestamp.clone();
                changes.update.push(s);
            }
        } else {
            i += 1;
        }
    }
    (changes, errors)
}

fn set_trigger_time(s: &mut EndpointSlice, t: Option<Timestamp>) {
    let a = s.metadata.annotations.get_or_insert_with(BTreeMap::new);
    match t {
        Some(t) => {
            a.insert(ANNOTATION_TRIGGER_TIME.into(), format_rfc3339_nano(t));
        }
        None => {
            a.remove(ANNOTATION_TRIGGER_TIME);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The controller.
// ---------------------------------------------------------------------------------------------

struct Controller {
    client: kube::Client,
    services: Arc<Informer<Service>>,
    pods: Arc<Informer<Pod>>,
    nodes: Arc<Informer<Node>>,
    slices: Arc<Informer<EndpointSlice>>,
    tracker: SliceTracker,
    triggers: TriggerTimeTracker,
    recorder: Recorder,
    max_per_slice: usize,
}

fn is_managed(s: &EndpointSlice) -> bool {
    s.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .map(String::as_str)
        == Some(MANAGED_BY)
}

fn service_label(s: &EndpointSlice) -> Option<&str> {
    s.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SERVICE_NAME))
        .map(String::as_str)
        .filter(|n| !n.is_empty())
}

pub fn start(ctx: &Ctx) {
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        services: ctx.informers.get::<Service>(),
        pods: ctx.informers.get::<Pod>(),
        nodes: ctx.informers.get::<Node>(),
        slices: ctx.informers.get::<EndpointSlice>(),
        tracker: SliceTracker::default(),
        triggers: TriggerTimeTracker::default(),
        recorder: ctx.recorder("endpoint-slice-controller"),
        max_per_slice: MAX_ENDPOINTS_PER_SLICE,
    });
    let queue = Queue::new("endpoint_slice");

    let q = queue.clone();
    c.services.on_change(move |ch| {
        let o = ch.object();
        q.add(capstan_runtime::key(
            o.metadata.namespace.as_deref(),
            o.metadata.name.as_deref().unwrap_or_default(),
        ));
    });

    let (q, services) = (queue.clone(), c.services.clone());
    c.pods.on_change(move |ch| {
        for key in services_for_pod_change(&services, ch) {
            q.add(key);
        }
    });

    let (q, cc) = (queue.clone(), Arc::downgrade(&c));
    c.slices.on_change(move |ch| {
        let Some(c) = cc.upgrade() else {
            return;
        };
        let enqueue = |s: &EndpointSlice| {
            if let Some(name) = service_label(s) {
                let key = capstan_runtime::key(s.metadata.namespace.as_deref(), name);
                q.add_after(key, SLICE_CHANGE_MIN_SYNC_DELAY);
            }
        };
        match ch {
            Change::Add(s) => {
                if is_managed(s) && c.tracker.should_sync(s) {
                    enqueue(s);
                }
            }
            Change::Update { old, new } => {
                if service_label(old) != service_label(new) {
                    enqueue(new);
                    enqueue(old);
                } else if is_managed(old) != is_managed(new)
                    || (is_managed(new) && c.tracker.should_sync(new))
                {
                    enqueue(new);
                }
            }
            Change::Delete(s) => {
                if is_managed(s) && c.tracker.has(s) && !c.tracker.handle_deletion(s) {
                    enqueue(s);
                }
            }
        }
    });

    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        c.services.wait_synced().await;
        c.pods.wait_synced().await;
        c.nodes.wait_synced().await;
        c.slices.wait_synced().await;
        queue.run_workers(workers, move |key| {
            let c = c.clone();
            async move { c.sync(&key).await }
        });
    });
}

impl Controller {
    async fn sync(&self, key: &str) -> anyhow::Result<()> {
        let (ns, name) = capstan_runtime::split_key(key);
        let Some(svc) = self.services.get(ns, name) else {
            self.triggers.delete(key);
            self.tracker.delete_service(key);
            return Ok(());
        };
        if is_external_name(&svc) {
            return Ok(());
        }
        let Some(selector) = service_selector(&svc) else {
            return Ok(());
        };
        let mut pods = Vec::new();
        self.pods.for_each_in(ns, |p| {
            if selector_matches(selector, p.metadata.labels.as_ref()) {
                pods.push(p.clone());
            }
        });
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut slices = Vec::new();
        self.slices.for_each_in(ns, |s| {
            if is_managed(s)
                && service_label(s) == Some(name)
                && s.metadata.deletion_timestamp.is_none()
            {
                slices.push(s.clone());
            }
        });
        slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        if self.tracker.stale_slices(&svc, &slices) {
            anyhow::bail!("EndpointSlice informer cache is out of date");
        }
        let trigger = self.triggers.compute(key, &svc, &pods);
        if let Err(e) = self.reconcile(&svc, &pods, &slices, trigger).await {
            self.recorder.warning(
                &*svc,
                "FailedToUpdateEndpointSlices",
                format!("Error updating Endpoint Slices for Service {ns}/{name}: {e:#}"),
            );
            return Err(e);
        }
        Ok(())
    }

    async fn reconcile(
        &self,
        svc: &Service,
        pods: &[Arc<Pod>],
        slices: &[Arc<EndpointSlice>],
        trigger: Option<Timestamp>,
    ) -> anyhow::Result<()> {
        let types = address_types(svc);
        let mut errors: Vec<String> = Vec::new();
        let mut unsupported = Vec::new();
        let mut by_type: BTreeMap<&str, Vec<Arc<EndpointSlice>>> = BTreeMap::new();
        for s in slices {
            match types.iter().find(|t| **t == s.address_type) {
                Some(t) => by_type.entry(*t).or_default().push(s.clone()),
                None => unsupported.push(s.clone()),
            }
        }
        let nodes = self.nodes.clone();
        let zone_of = move |node: &str| -> Option<Option<String>> {
            let n = nodes.get("", node)?;
            Some(
                n.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(ZONE_LABEL))
                    .cloned(),
            )
        };
        for t in &types {
            let existing = by_type.remove(t).unwrap_or_default();
            let (changes, errs) =
                plan_address_type(svc, pods, &existing, t, self.max_per_slice, &zone_of);
            errors.extend(errs);
            if let Err(e) = self.apply(svc, changes, trigger).await {
                errors.push(format!("{e:#}"));
            }
        }
        let ns = svc.metadata.namespace.as_deref().unwrap_or_default();
        let name = svc.metadata.name.as_deref().unwrap_or_default();
        for s in unsupported {
            if let Err(e) = self.delete_slice(&s).await {
                errors.push(format!(
                    "error deleting {} EndpointSlice for Service {ns}/{name}: {e}",
                    s.metadata.name.as_deref().unwrap_or_default()
                ));
            }
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(anyhow::anyhow!("{}", errors[0])),
            _ => Err(anyhow::anyhow!("[{}]", errors.join(", "))),
        }
    }

    async fn delete_slice(&self, s: &EndpointSlice) -> anyhow::Result<()> {
        let api: Api<EndpointSlice> = Api::namespaced(
            self.client.clone(),
            s.metadata.namespace.as_deref().unwrap_or_default(),
        );
        match api
            .delete(
                s.metadata.name.as_deref().unwrap_or_default(),
                &DeleteParams::default(),
            )
            .await
        {
            Ok(_) => {
                self.tracker.expect_deletion(s);
                Ok(())
            }
            Err(e) if util::is_not_found(&e) => Ok(()),
            Err(e) => Err(anyhow::anyhow!(error_message(&e))),
        }
    }

    /// Write the planned changes (Kubernetes' finalize).
    async fn apply(
        &self,
        svc: &Service,
        changes: Changes,
        trigger: Option<Timestamp>,
    ) -> anyhow::Result<()> {
        let ns = svc.metadata.namespace.as_deref().unwrap_or_default();
        let name = svc.metadata.name.as_deref().unwrap_or_default();
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), ns);
        // No new slices for a service being deleted (the garbage collector is removing them).
        if svc.metadata.deletion_timestamp.is_none() {
            for mut s in changes.create {
                set_trigger_time(&mut s, trigger);
                match api.create(&PostParams::default(), &s).await {
                    Ok(created) => self.tracker.update(&created),
                    Err(e) if is_namespace_terminating(&e) => return Ok(()),
                    Err(e) => anyhow::bail!(
                        "failed to create EndpointSlice for Service {ns}/{name}: {}",
                        error_message(&e)
                    ),
                }
            }
        }
        for mut s in changes.update {
            set_trigger_time(&mut s, trigger);
            let slice_name = s.metadata.name.clone().unwrap_or_default();
            match api.replace(&slice_name, &PostParams::default(), &s).await {
                Ok(updated) => self.tracker.update(&updated),
                Err(e) => anyhow::bail!(
                    "failed to update {slice_name} EndpointSlice for Service {ns}/{name}: {}",
                    error_message(&e)
                ),
            }
        }
        for s in changes.delete {
            if let Err(e) = self.delete_slice(&s).await {
                anyhow::bail!(
                    "failed to delete {} EndpointSlice for Service {ns}/{name}: {e}",
                    s.metadata.name.as_deref().unwrap_or_default()
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodCondition, PodIP, PodSpec, PodStatus, ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn svc(ports: &[(&str, i32, IntOrString)]) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("svc-uid".into()),
                labels: Some(BTreeMap::from([("team".into(), "a".into())])),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some(BTreeMap::from([("app".into(), "web".into())])),
                cluster_ip: Some("10.96.0.10".into()),
                ip_families: Some(vec!["IPv4".into()]),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, p, t)| ServicePort {
                            name: Some(n.to_string()),
                            port: *p,
                            protocol: Some("TCP".into()),
                            target_port: Some(t.clone()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn pod(i: usize, ready: bool) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(format!("web-{i}")),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{i}")),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                containers: vec![Container {
                    name: "c".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("http".into()),
                        container_port: 8080,
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some(format!("10.0.{}.{}", i / 250, i % 250 + 1)),
                pod_ips: Some(vec![PodIP {
                    ip: format!("10.0.{}.{}", i / 250, i % 250 + 1),
                }]),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    last_transition_time: Some(Time(Timestamp::UNIX_EPOCH)),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    fn zone(_: &str) -> Option<Option<String>> {
        Some(Some("z1".into()))
    }

    /// Apply planned changes as the API server would (names for new slices, generations).
    fn apply(existing: &mut Vec<Arc<EndpointSlice>>, c: Changes) {
        let deleted: BTreeSet<_> = c.delete.iter().map(|s| s.metadata.name.clone()).collect();
        existing.retain(|s| !deleted.contains(&s.metadata.name));
        for u in c.update {
            let i = existing
                .iter()
                .position(|s| s.metadata.name == u.metadata.name)
                .expect("updated slice exists");
            existing[i] = Arc::new(u);
        }
        for (n, mut s) in c.create.into_iter().enumerate() {
            s.metadata.name = Some(format!("web-new{}-{n}", existing.len()));
            existing.push(Arc::new(s));
        }
    }

    fn plan(
        s: &Service,
        pods: &[Arc<Pod>],
        existing: &[Arc<EndpointSlice>],
    ) -> (Changes, Vec<String>) {
        plan_address_type(s, pods, existing, "IPv4", 100, &zone)
    }

    #[test]
    fn endpoints_carry_conditions_ports_and_topology() {
        let s = svc(&[("http", 80, IntOrString::String("http".into()))]);
        let pods = vec![pod(0, true), pod(1, false)];
        let (c, errs) = plan(&s, &pods, &[]);
        assert!(errs.is_empty());
        assert_eq!(c.create.len(), 1);
        let slice = &c.create[0];
        assert_eq!(slice.metadata.generate_name.as_deref(), Some("web-"));
        let labels = slice.metadata.labels.clone().unwrap();
        assert_eq!(labels[LABEL_SERVICE_NAME], "web");
        assert_eq!(labels[LABEL_MANAGED_BY], MANAGED_BY);
        assert_eq!(labels["team"], "a");
        assert!(!labels.contains_key(LABEL_HEADLESS));
        let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Service", "svc-uid")
        );
        let ports = slice.ports.as_ref().unwrap();
        assert_eq!(ports[0].port, Some(8080));
        assert_eq!(ports[0].name.as_deref(), Some("http"));
        assert_eq!(slice.endpoints.len(), 2);
        let ready: Vec<_> = slice
            .endpoints
            .iter()
            .map(|e| e.conditions.as_ref().unwrap().ready.unwrap())
            .collect();
        assert_eq!(ready, vec![true, false]);
        assert_eq!(slice.endpoints[0].zone.as_deref(), Some("z1"));
        assert_eq!(slice.endpoints[0].node_name.as_deref(), Some("n1"));
    }

    #[test]
    fn terminating_pods_are_not_ready_but_serving() {
        let s = svc(&[("http", 80, IntOrString::Int(80))]);
        let mut p = (*pod(0, true)).clone();
        p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let ep = pod_to_endpoint(&p, None, &s, "IPv4");
        let c = ep.conditions.unwrap();
        assert_eq!(
            (c.ready, c.serving, c.terminating),
            (Some(false), Some(true), Some(true))
        );
    }

    #[test]
    fn large_services_split_and_small_changes_update_in_place() {
        let s = svc(&[("http", 80, IntOrString::Int(80))]);
        let pods: Vec<_> = (0..250).map(|i| pod(i, true)).collect();
        let mut slices = Vec::new();
        let (c, _) = plan(&s, &pods, &slices);
        let mut sizes: Vec<_> = c.create.iter().map(|s| s.endpoints.len()).collect();
        sizes.sort();
        assert_eq!(sizes, vec![50, 100, 100]);
        apply(&mut slices, c);

        // Nothing changed: nothing to write.
        let (c, _) = plan(&s, &pods, &slices);
        assert!(c.create.is_empty() && c.update.is_empty() && c.delete.is_empty());

        // One pod gone, one became unready: two in-place updates, no new slices.
        let mut pods2 = pods.clone();
        pods2.remove(0);
        pods2[10] = pod(11, false);
        let (c, _) = plan(&s, &pods2, &slices);
        assert!(c.create.is_empty() && c.delete.is_empty());
        assert!(!c.update.is_empty() && c.update.len() <= 2);
        apply(&mut slices, c);
        let total: usize = slices.iter().map(|s| s.endpoints.len()).sum();
        assert_eq!(total, 249);

        // A new pod fits into an existing slice instead of a new one.
        pods2.push(pod(300, true));
        let (c, _) = plan(&s, &pods2, &slices);
        assert!(c.create.is_empty());
        apply(&mut slices, c);
        assert_eq!(slices.len(), 3);
        assert!(slices.iter().all(|s| s.endpoints.len() <= 100));
    }

    #[test]
    fn empty_services_keep_one_placeholder() {
        let s = svc(&[("http", 80, IntOrString::Int(80))]);
        let mut slices = Vec::new();
        let (c, _) = plan(&s, &[], &slices);
        assert_eq!(c.create.len(), 1);
        assert!(c.create[0].endpoints.is_empty());
        assert_eq!(c.create[0].ports.as_deref(), Some(&[][..]));
        apply(&mut slices, c);
        let (c, _) = plan(&s, &[], &slices);
        assert!(c.create.is_empty() && c.update.is_empty() && c.delete.is_empty());

        // Pods arrive: the placeholder is reused (its ports change) rather than replaced.
        let pods = vec![pod(0, true)];
        let (c, _) = plan(&s, &pods, &slices);
        assert!(c.create.is_empty() && c.delete.is_empty());
        assert_eq!(c.update.len(), 1);
        assert_eq!(c.update[0].metadata.name, slices[0].metadata.name);
        assert_eq!(c.update[0].endpoints.len(), 1);
        apply(&mut slices, c);

        // And they leave: back to an empty slice, again in place.
        let (c, _) = plan(&s, &[], &slices);
        assert!(c.create.is_empty() && c.delete.is_empty());
        assert_eq!(c.update.len(), 1);
        assert!(c.update[0].endpoints.is_empty());
    }

    #[test]
    fn missing_nodes_and_foreign_slices() {
        let s = svc(&[("http", 80, IntOrString::Int(80))]);
        let (c, errs) = plan_address_type(&s, &[pod(0, true)], &[], "IPv4", 100, &|_| None);
        assert_eq!(
            errs,
            vec!["skipping Pod web-0 for Service default/web: Node n1 Not Found".to_string()]
        );
        assert_eq!(c.create.len(), 1, "an empty placeholder meanwhile");
        assert!(c.create[0].endpoints.is_empty());

        // A slice of an old service of the same name is replaced.
        let mut old = new_slice(&s, vec![], "IPv4");
        old.metadata.name = Some("web-old".into());
        old.metadata.owner_references.as_mut().unwrap()[0].uid = "other".into();
        old.endpoints.push(Endpoint {
            addresses: vec!["1.1.1.1".into()],
            ..Default::default()
        });
        let (c, _) = plan(&s, &[pod(0, true)], &[Arc::new(old)]);
        assert_eq!(c.create.len(), 1);
        assert_eq!(c.delete.len(), 1);
        assert!(c.update.is_empty(), "not owned: never reused");
    }

    #[test]
    fn headless_and_port_resolution() {
        let mut s = svc(&[
            ("http", 80, IntOrString::String("http".into())),
            ("missing", 81, IntOrString::String("nope".into())),
            ("metrics", 9090, IntOrString::Int(9090)),
        ]);
        s.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        let ports = endpoint_ports(&s, &pod(0, true));
        let mut nums: Vec<_> = ports.iter().map(|p| p.port.unwrap()).collect();
        nums.sort();
        assert_eq!(
            nums,
            vec![8080, 9090],
            "the unresolved named port is left out"
        );
        let (labels, _) = slice_labels(None, &s);
        assert_eq!(labels.get(LABEL_HEADLESS).map(String::as_str), Some(""));
        assert_eq!(address_types(&s), vec!["IPv4"]);
        s.spec.as_mut().unwrap().ip_families = None;
        assert_eq!(address_types(&s), vec!["IPv4", "IPv6"]);
    }

    #[test]
    fn trigger_times_report_new_changes_only() {
        let s = {
            let mut s = svc(&[]);
            s.metadata.creation_timestamp = Some(Time(Timestamp::from_second(100).unwrap()));
            s
        };
        let t = TriggerTimeTracker::default();
        let at = |secs: i64| {
            let mut p = (*pod(0, true)).clone();
            p.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time =
                Some(Time(Timestamp::from_second(secs).unwrap()));
            Arc::new(p)
        };
        assert_eq!(
            t.compute("default/web", &s, &[at(200)]),
            Some(Timestamp::from_second(100).unwrap()),
            "first sync: the service's creation"
        );
        assert_eq!(t.compute("default/web", &s, &[at(200)]), None);
        assert_eq!(
            t.compute("default/web", &s, &[at(300)]),
            Some(Timestamp::from_second(300).unwrap())
        );
        assert_eq!(
            format_rfc3339_nano(Timestamp::from_second(300).unwrap()),
            "1970-01-01T00:05:00Z"
        );
        assert_eq!(
            format_rfc3339_nano(Timestamp::new(300, 120_000_000).unwrap()),
            "1970-01-01T00:05:00.12Z"
        );
    }

    #[test]
    fn pod_changes_reach_the_right_services() {
        let old = pod(0, false);
        let mut new = (*old).clone();
        new.metadata.resource_version = Some("2".into());
        assert_eq!(pod_endpoints_changed(&old, &new), (false, false));
        new.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "True".into();
        assert_eq!(pod_endpoints_changed(&old, &new), (true, false));
        new.metadata.labels = Some(BTreeMap::from([("app".into(), "other".into())]));
        assert_eq!(pod_endpoints_changed(&old, &new), (true, true));
    }

    #[test]
    fn generation_tracker_tells_stale_caches() {
        let t = SliceTracker::default();
        let s = svc(&[]);
        let mut slice = new_slice(&s, vec![], "IPv4");
        slice.metadata.namespace = Some("default".into());
        slice.metadata.uid = Some("s1".into());
        slice.metadata.generation = Some(2);
        assert!(t.should_sync(&slice));
        t.update(&slice);
        assert!(!t.should_sync(&slice), "our own write");
        let mut older = slice.clone();
        older.metadata.generation = Some(1);
        assert!(t.stale_slices(&s, &[Arc::new(older)]));
        assert!(
            t.stale_slices(&s, &[]),
            "a written slice missing from the cache"
        );
        assert!(!t.stale_slices(&s, &[Arc::new(slice.clone())]));
        t.expect_deletion(&slice);
        assert!(t.handle_deletion(&slice));
        let mut foreign = slice.clone();
        foreign.metadata.uid = Some("s2".into());
        t.update(&foreign);
        assert!(!t.handle_deletion(&foreign), "deleted by someone else");
    }

    #[test]
    fn fnv128a_matches_go() {
        // Go: hex.EncodeToString(fnv.New128a().Sum(nil)) and of "a".
        assert_eq!(fnv128a_hex(b""), "6c62272e07bb014262b821756295c58d");
        assert_eq!(fnv128a_hex(b"a"), "d228cb696f1a8caf78912b704e4a8964");
    }
}
