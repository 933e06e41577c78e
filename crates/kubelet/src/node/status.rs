//! Node status as the kubelet computes it (Kubernetes' node status setters): capacity and
//! allocatable, the pressure and Ready conditions, addresses, daemon endpoints, node info
//! and images. Everything here is pure: the caller observes the machine and the runtime,
//! and applies the result to a copy of the Node read from the API server.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use capstan_cri::v1;
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeRuntimeHandler, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::machine::{FsStats, MachineInfo};

/// At most this many images are reported, largest first.
pub const MAX_IMAGES_IN_NODE_STATUS: usize = 50;
/// At most this many names are reported per image.
pub const MAX_NAMES_PER_IMAGE: usize = 5;

/// How long a pressure condition stays True after its signal recovered
/// (--eviction-pressure-transition-period).
pub const PRESSURE_TRANSITION_PERIOD: Duration = Duration::from_secs(5 * 60);

/// The runtime's health as the kubelet last saw it (Kubernetes' runtimeState).
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeHealth {
    /// Why the runtime is not usable (empty: it is).
    pub runtime_errors: Vec<String>,
    /// Why the pod network is not ready (empty: it is).
    pub network_errors: Vec<String>,
}

impl Default for RuntimeHealth {
    /// Before the first status check.
    fn default() -> Self {
        RuntimeHealth {
            runtime_errors: vec!["container runtime status check may not have completed yet".into()],
            network_errors: vec!["network state unknown".into()],
        }
    }
}

impl RuntimeHealth {
    /// The health a CRI Status answer reports (conditions RuntimeReady and NetworkReady).
    pub fn from_status(status: &v1::StatusResponse) -> RuntimeHealth {
        let find = |t: &str| {
            status
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.r#type == t))
        };
        let describe = |c: Option<&v1::RuntimeCondition>| match c {
            Some(c) => format!(
                "{}={} reason:{} message:{}",
                c.r#type, c.status, c.reason, c.message
            ),
            None => "<nil>".to_string(),
        };
        let mut h = RuntimeHealth {
            runtime_errors: Vec::new(),
            network_errors: Vec::new(),
        };
        let network = find("NetworkReady");
        if !network.is_some_and(|c| c.status) {
            h.network_errors.push(format!(
                "container runtime network not ready: {}",
                describe(network)
            ));
        }
        let runtime = find("RuntimeReady");
        if !runtime.is_some_and(|c| c.status) {
            h.runtime_errors.push(format!(
                "container runtime not ready: {}",
                describe(runtime)
            ));
        }
        h
    }

    /// Whether the runtime and its network are both ready.
    pub fn ready(&self) -> bool {
        self.runtime_errors.is_empty() && self.network_errors.is_empty()
    }
}

/// Whether each eviction signal is past its threshold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

/// Tracks pressure with the transition period: a condition is reported until its signal
/// has stayed under the threshold for [`PRESSURE_TRANSITION_PERIOD`].
#[derive(Debug, Default)]
pub struct PressureTracker {
    memory_seen: Option<Instant>,
    disk_seen: Option<Instant>,
    /// The thresholds (--eviction-hard).
    pub thresholds: crate::EvictionHard,
}

impl PressureTracker {
    /// A tracker for these thresholds.
    pub fn new(thresholds: crate::EvictionHard) -> PressureTracker {
        PressureTracker {
            thresholds,
            ..Default::default()
        }
    }

    /// Observe the signals at `now`; `None` means unknown (no pressure is inferred).
    pub fn observe(
        &mut self,
        memory_available: Option<u64>,
        nodefs: Option<&FsStats>,
        now: Instant,
    ) -> Pressure {
        if memory_available.is_some_and(|a| a < self.thresholds.memory_available) {
            self.memory_seen = Some(now);
        }
        let t = self.thresholds;
        if nodefs.is_some_and(|fs| disk_signal_met(fs, &t)) {
            self.disk_seen = Some(now);
        }
        let recent = |t: Option<Instant>| {
            t.is_some_and(|t| now.saturating_duration_since(t) < PRESSURE_TRANSITION_PERIOD)
        };
        Pressure {
            memory: recent(self.memory_seen),
            disk: recent(self.disk_seen),
            // No PID threshold is configured by default.
            pid: false,
        }
    }
}

fn disk_signal_met(fs: &FsStats, t: &crate::EvictionHard) -> bool {
    let below = |avail: u64, total: u64, fraction: f32| {
        total > 0 && (avail as f64) < (total as f64) * f64::from(fraction)
    };
    below(fs.available_bytes, fs.capacity_bytes, t.nodefs_available)
        || below(fs.inodes_free, fs.inodes, t.nodefs_inodes_free)
}

/// Everything one status computation needs.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub node_name: String,
    pub machine: MachineInfo,
    pub max_pods: u32,
    /// The filesystem of the kubelet's root directory.
    pub rootfs: Option<FsStats>,
    pub pressure: Pressure,
    pub runtime: RuntimeHealth,
    /// `containerd://1.6.20` (None: the runtime's version is not known).
    pub runtime_version: Option<String>,
    pub runtime_handlers: Vec<NodeRuntimeHandler>,
    /// The runtime's images (None: listing failed).
    pub images: Option<Vec<v1::Image>>,
    /// InternalIP and Hostname (None: no address could be found; left as it was).
    pub addresses: Option<Vec<NodeAddress>>,
    pub kubelet_port: u16,
    pub kubelet_version: String,
    /// The hard eviction thresholds allocatable reserves.
    pub eviction: crate::EvictionHard,
}

/// An event the status change calls for, recorded once the status is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    pub type_: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// Apply `obs` to `node`'s status at `now` (Kubernetes' setNodeStatus); returns the events
/// the transitions call for.
pub fn set_node_status(node: &mut Node, obs: &Observed, now: Timestamp) -> Vec<NodeEvent> {
    let mut events = Vec::new();
    let now = Time(truncate_to_seconds(now));
    let status = node.status.get_or_insert_with(Default::default);

    if let Some(addresses) = &obs.addresses {
        status.addresses = Some(addresses.clone());
    }
    set_machine_info(status, obs, &mut events);
    set_version_info(status, obs);
    status.daemon_endpoints = Some(NodeDaemonEndpoints {
        kubelet_endpoint: Some(DaemonEndpoint {
            port: i32::from(obs.kubelet_port),
        }),
    });
    status.images = Some(obs.images.as_deref().map(images).unwrap_or_default());
    let info = status.node_info.get_or_insert_with(Default::default);
    info.operating_system = std::env::consts::OS.to_string();
    info.architecture = go_arch().to_string();
    status.runtime_handlers = if obs.runtime_handlers.is_empty() {
        None
    } else {
        Some(obs.runtime_handlers.clone())
    };

    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let name = &obs.node_name;
    let mut pressure = |type_: &str, under: bool, on: [&'static str; 3], off: [&'static str; 3]| {
        if let Some(ev) = set_pressure_condition(conditions, type_, under, on, off, &now) {
            events.push(NodeEvent {
                type_: capstan_runtime::events::NORMAL,
                reason: ev,
                message: format!("Node {name} status is now: {ev}"),
            });
        }
    };
    pressure(
        "MemoryPressure",
        obs.pressure.memory,
        [
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
            "NodeHasInsufficientMemory",
        ],
        [
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            "NodeHasSufficientMemory",
        ],
    );
    pressure(
        "DiskPressure",
        obs.pressure.disk,
        [
            "KubeletHasDiskPressure",
            "kubelet has disk pressure",
            "NodeHasDiskPressure",
        ],
        [
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            "NodeHasNoDiskPressure",
        ],
    );
    pressure(
        "PIDPressure",
        obs.pressure.pid,
        [
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
            "NodeHasInsufficientPID",
        ],
        [
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            "NodeHasSufficientPID",
        ],
    );
    let capacity = status.capacity.clone().unwrap_or_default();
    if let Some(ev) = set_ready_condition(conditions, obs, &capacity, &now) {
        events.push(NodeEvent {
            type_: capstan_runtime::events::NORMAL,
            reason: ev,
            message: format!("Node {name} status is now: {ev}"),
        });
    }
    events
}

pub use capstan_api::go_arch;

fn truncate_to_seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

fn set_machine_info(status: &mut NodeStatus, obs: &Observed, events: &mut Vec<NodeEvent>) {
    let m = &obs.machine;
    let info = status.node_info.get_or_insert_with(Default::default);
    info.machine_id = m.machine_id.clone();
    info.system_uuid = m.system_uuid.clone();
    if !info.boot_id.is_empty() && !m.boot_id.is_empty() && info.boot_id != m.boot_id {
        events.push(NodeEvent {
            type_: capstan_runtime::events::WARNING,
            reason: "Rebooted",
            message: format!(
                "Node {} has been rebooted, boot id: {}",
                obs.node_name, m.boot_id
            ),
        });
    }
    if !m.boot_id.is_empty() {
        info.boot_id = m.boot_id.clone();
    }

    // Capacity: what the machine has (other resources already listed are kept).
    let capacity = status.capacity.get_or_insert_with(BTreeMap::new);
    let mut mine: BTreeMap<String, (i64, i64)> = BTreeMap::new(); // name → (capacity, reserved)
    mine.insert("cpu".into(), (clamp(m.num_cpus), 0));
    let huge_total: u64 = m
        .huge_pages
        .iter()
        .map(|(size, pages)| size.saturating_mul(*pages))
        .sum();
    mine.insert(
        "memory".into(),
        (
            clamp(m.memory_capacity),
            clamp(obs.eviction.memory_available.saturating_add(huge_total)),
        ),
    );
    mine.insert("pods".into(), (i64::from(obs.max_pods), 0));
    if let Some(fs) = &obs.rootfs {
        let cap = clamp(fs.capacity_bytes);
        // The threshold is a float32 fraction of capacity, truncated (as Kubernetes does).
        let reserved = (cap as f64 * f64::from(obs.eviction.nodefs_available)) as i64;
        mine.insert("ephemeral-storage".into(), (cap, reserved));
    }
    for (size, pages) in &m.huge_pages {
        let name = format!("hugepages-{}", format_binary_si(clamp(*size)));
        mine.insert(name, (clamp(size.saturating_mul(*pages)), 0));
    }
    let binary = |name: &str| name != "cpu" && name != "pods";
    for (name, (cap, _)) in &mine {
        let q = if binary(name) {
            format_binary_si(*cap)
        } else {
            format_decimal_si(*cap)
        };
        capacity.insert(name.clone(), Quantity(q));
    }

    // Allocatable: capacity less the reservations, never negative.
    let allocatable = status.allocatable.get_or_insert_with(BTreeMap::new);
    allocatable.retain(|k, _| capacity.contains_key(k));
    for (name, q) in capacity.iter() {
        let value = match mine.get(name) {
            Some((cap, reserved)) => {
                let v = (cap - reserved).max(0);
                Quantity(if binary(name) {
                    format_binary_si(v)
                } else {
                    format_decimal_si(v)
                })
            }
            None => q.clone(),
        };
        allocatable.insert(name.clone(), value);
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn set_version_info(status: &mut NodeStatus, obs: &Observed) {
    let info: &mut NodeSystemInfo = status.node_info.get_or_insert_with(Default::default);
    info.kernel_version = obs.machine.kernel_version.clone();
    info.os_image = obs.machine.os_image.clone();
    if let Some(v) = &obs.runtime_version {
        info.container_runtime_version = v.clone();
    }
    info.kubelet_version = obs.kubelet_version.clone();
    // v1.32 still reports it (DisableNodeKubeProxyVersion is off by default).
    info.kube_proxy_version = obs.kubelet_version.clone();
}

/// `containerd://1.6.20` from a CRI Version answer: the version is kept when it is a
/// semantic version, otherwise only its leading numeric components are.
pub fn runtime_version_string(v: &v1::VersionResponse) -> String {
    format!(
        "{}://{}",
        v.runtime_name,
        normalize_version(&v.runtime_version).unwrap_or_else(|| "Unknown".into())
    )
}

fn normalize_version(s: &str) -> Option<String> {
    let s = s.trim();
    let s = s.strip_prefix('v').unwrap_or(s);
    let numeric_end = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let (numbers, rest) = s.split_at(numeric_end);
    let parts: Vec<&str> = numbers.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) || parts.is_empty() {
        return None;
    }
    let numbers = parts
        .iter()
        .map(|p| p.trim_start_matches('0'))
        .map(|p| if p.is_empty() { "0" } else { p })
        .collect::<Vec<_>>()
        .join(".");
    let ident = |x: &str| {
        !x.is_empty()
            && x.split('.').all(|id| {
                !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            })
    };
    let semver_rest = match rest.split_once('+') {
        _ if rest.is_empty() => true,
        Some((pre, build)) => {
            (pre.is_empty() || pre.strip_prefix('-').is_some_and(ident)) && ident(build)
        }
        None => rest.strip_prefix('-').is_some_and(ident),
    };
    if parts.len() == 3 && semver_rest {
        Some(format!("{numbers}{rest}"))
    } else {
        Some(numbers)
    }
}

/// The node's images: largest first, at most [`MAX_IMAGES_IN_NODE_STATUS`], each named by
/// its digests then its tags (at most [`MAX_NAMES_PER_IMAGE`]).
pub fn images(list: &[v1::Image]) -> Vec<ContainerImage> {
    let mut sorted: Vec<&v1::Image> = list.iter().collect();
    sorted.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| a.id.cmp(&b.id)));
    sorted
        .into_iter()
        .take(MAX_IMAGES_IN_NODE_STATUS)
        .map(|img| {
            let mut names: Vec<String> = img
                .repo_digests
                .iter()
                .chain(img.repo_tags.iter())
                .cloned()
                .collect();
            names.truncate(MAX_NAMES_PER_IMAGE);
            ContainerImage {
                names: Some(names),
                size_bytes: Some(clamp(img.size)),
            }
        })
        .collect()
}

/// Update one pressure condition; returns the event reason when it transitioned.
fn set_pressure_condition(
    conditions: &mut Vec<NodeCondition>,
    type_: &str,
    under_pressure: bool,
    on: [&'static str; 3],
    off: [&'static str; 3],
    now: &Time,
) -> Option<&'static str> {
    let idx = match conditions.iter().position(|c| c.type_ == type_) {
        Some(i) => i,
        None => {
            conditions.push(NodeCondition {
                type_: type_.to_string(),
                status: "Unknown".into(),
                ..Default::default()
            });
            conditions.len() - 1
        }
    };
    let c = &mut conditions[idx];
    c.last_heartbeat_time = Some(now.clone());
    let (want, [reason, message, event]) = if under_pressure {
        ("True", on)
    } else {
        ("False", off)
    };
    if c.status == want {
        return None;
    }
    c.status = want.into();
    c.reason = Some(reason.into());
    c.message = Some(message.into());
    c.last_transition_time = Some(now.clone());
    Some(event)
}

/// Errors as one message: one alone, several as `[a, b]` (duplicates dropped).
pub fn aggregate_message(errors: &[String]) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.len() {
        0 => None,
        1 => Some(seen[0].to_string()),
        _ => Some(format!("[{}]", seen.join(", "))),
    }
}

/// Update the Ready condition (kept last); returns the event reason when it transitioned.
fn set_ready_condition(
    conditions: &mut Vec<NodeCondition>,
    obs: &Observed,
    capacity: &BTreeMap<String, Quantity>,
    now: &Time,
) -> Option<&'static str> {
    let mut errors: Vec<String> = obs
        .runtime
        .runtime_errors
        .iter()
        .chain(obs.runtime.network_errors.iter())
        .cloned()
        .collect();
    let missing: Vec<&str> = ["cpu", "memory", "pods", "ephemeral-storage"]
        .into_iter()
        .filter(|r| !capacity.contains_key(*r))
        .collect();
    if !missing.is_empty() {
        errors.push(format!(
            "missing node capacity for resources: {}",
            missing.join(", ")
        ));
    }
    let mut new = match aggregate_message(&errors) {
        None => NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("KubeletReady".into()),
            message: Some("kubelet is posting ready status".into()),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: None,
        },
        Some(message) => NodeCondition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: Some("KubeletNotReady".into()),
            message: Some(message),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: None,
        },
    };
    match conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(old) => {
            let transitioned = old.status != new.status;
            new.last_transition_time = if transitioned {
                Some(now.clone())
            } else {
                old.last_transition_time.clone()
            };
            *old = new;
            if !transitioned {
                return None;
            }
            Some(if old.status == "True" {
                "NodeReady"
            } else {
                "NodeNotReady"
            })
        }
        None => {
            new.last_transition_time = Some(now.clone());
            conditions.push(new);
            None
        }
    }
}

/// Whether `new` differs from `old` in anything but heartbeat times (quantities compare by
/// value, as Kubernetes' semantic equality does).
pub fn status_changed(old: Option<&NodeStatus>, new: Option<&NodeStatus>) -> bool {
    let (old, new) = match (old, new) {
        (None, None) => return false,
        (Some(o), Some(n)) => (o, n),
        _ => return true,
    };
    if conditions_changed(
        old.conditions.as_deref().unwrap_or_default(),
        new.conditions.as_deref().unwrap_or_default(),
    ) {
        return true;
    }
    if !quantities_equal(old.capacity.as_ref(), new.capacity.as_ref())
        || !quantities_equal(old.allocatable.as_ref(), new.allocatable.as_ref())
    {
        return true;
    }
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        s.conditions = None;
        s.capacity = None;
        s.allocatable = None;
        // An empty list and no list are the same on the wire.
        if s.images.as_ref().is_some_and(Vec::is_empty) {
            s.images = None;
        }
        s
    };
    strip(old) != strip(new)
}

fn conditions_changed(old: &[NodeCondition], new: &[NodeCondition]) -> bool {
    if old.len() != new.len() {
        return true;
    }
    new.iter().any(|n| {
        let Some(o) = old.iter().find(|o| o.type_ == n.type_) else {
            return true;
        };
        let mut o = o.clone();
        let mut n = n.clone();
        o.last_heartbeat_time = None;
        n.last_heartbeat_time = None;
        o != n
    })
}

fn quantities_equal(
    a: Option<&BTreeMap<String, Quantity>>,
    b: Option<&BTreeMap<String, Quantity>>,
) -> bool {
    let empty = BTreeMap::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    a.len() == b.len()
        && a.iter().all(|(k, qa)| {
            b.get(k).is_some_and(|qb| {
                qa.0 == qb.0
                    || matches!((quantity_nanos(&qa.0), quantity_nanos(&qb.0)),
                        (Some(x), Some(y)) if x == y)
            })
        })
}

/// A quantity's exact value in nano-units (`1Ki` → 1024·10⁹), for comparing; None if the
/// text is not a quantity.
pub fn quantity_nanos(s: &str) -> Option<i128> {
    capstan_api::validation::quantity::parse(s.trim()).map(|q| q.nanos)
}

/// A count in Kubernetes' canonical DecimalSI form (`110`, `2`, `1k`, `1500`).
pub fn format_decimal_si(v: i64) -> String {
    if v == 0 {
        return "0".into();
    }
    let mut n = v;
    let mut exp = 0usize;
    const SUFFIXES: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
    while n % 1000 == 0 && exp < SUFFIXES.len() - 1 {
        n /= 1000;
        exp += 1;
    }
    format!("{n}{}", SUFFIXES[exp])
}

/// Bytes in Kubernetes' canonical BinarySI form (`24683656Ki`, `2Mi`, `94580335255`; values
/// under 1024 and those not a multiple of 1024 are plain numbers).
pub fn format_binary_si(v: i64) -> String {
    if v > -1024 && v < 1024 {
        return format_decimal_si(v);
    }
    let mut n = v;
    let mut exp = 0usize;
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    while n % 1024 == 0 && exp < SUFFIXES.len() - 1 {
        n /= 1024;
        exp += 1;
    }
    format!("{n}{}", SUFFIXES[exp])
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: u64 = 1024 * 1024 * 1024;

    fn ready_runtime() -> RuntimeHealth {
        RuntimeHealth {
            runtime_errors: vec![],
            network_errors: vec![],
        }
    }

    fn observed() -> Observed {
        Observed {
            node_name: "node-a".into(),
            machine: MachineInfo {
                num_cpus: 2,
                memory_capacity: 24683656 * 1024,
                huge_pages: [(2 * 1024 * 1024, 0), (GI, 0)].into_iter().collect(),
                machine_id: "abc".into(),
                system_uuid: "uuid-1".into(),
                boot_id: "boot-1".into(),
                kernel_version: "6.1.0".into(),
                os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            },
            max_pods: 110,
            eviction: crate::EvictionHard::default(),
            rootfs: Some(FsStats {
                capacity_bytes: 66053021 * 4096,
                available_bytes: 8832220 * 4096,
                inodes: 16777216,
                inodes_free: 16233945,
            }),
            pressure: Pressure::default(),
            runtime: ready_runtime(),
            runtime_version: Some("containerd://1.6.20".into()),
            runtime_handlers: vec![],
            images: Some(vec![]),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: "192.0.2.2".into(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: "node-a".into(),
                },
            ]),
            kubelet_port: 10250,
            kubelet_version: "v1.32.0".into(),
        }
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn cond<'a>(n: &'a Node, type_: &str) -> &'a NodeCondition {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == type_))
            .unwrap_or_else(|| panic!("no {type_} condition"))
    }

    fn q<'a>(m: &'a Option<BTreeMap<String, Quantity>>, k: &str) -> &'a str {
        &m.as_ref().unwrap()[k].0
    }

    #[test]
    fn quantities_format_canonically() {
        assert_eq!(format_decimal_si(0), "0");
        assert_eq!(format_decimal_si(2), "2");
        assert_eq!(format_decimal_si(110), "110");
        assert_eq!(format_decimal_si(1000), "1k");
        assert_eq!(format_decimal_si(1500), "1500");
        assert_eq!(format_decimal_si(2_000_000), "2M");
        assert_eq!(format_binary_si(0), "0");
        // Under 1024 a binary quantity prints as a decimal one.
        assert_eq!(format_binary_si(1000), "1k");
        assert_eq!(format_binary_si(1500), "1500");
        assert_eq!(format_binary_si(1024), "1Ki");
        assert_eq!(format_binary_si(2 * 1024 * 1024), "2Mi");
        assert_eq!(format_binary_si(GI as i64), "1Gi");
        assert_eq!(format_binary_si(24683656 * 1024), "24683656Ki");
        assert_eq!(format_binary_si(94580335255), "94580335255");
        const N: i128 = 1_000_000_000;
        assert_eq!(quantity_nanos("1Ki"), Some(1024 * N));
        assert_eq!(quantity_nanos("1024"), Some(1024 * N));
        assert_eq!(quantity_nanos("500m"), Some(N / 2));
        assert_eq!(quantity_nanos("1.5k"), Some(1500 * N));
        assert_eq!(quantity_nanos("2"), Some(2 * N));
        assert_eq!(quantity_nanos("x"), None);
        assert_eq!(quantity_nanos("1Qi"), None);
        assert_eq!(quantity_nanos(""), None);
    }

    #[test]
    fn capacity_and_allocatable_follow_the_eviction_reservations() {
        let mut node = Node::default();
        let obs = observed();
        set_node_status(&mut node, &obs, t(0));
        let s = node.status.as_ref().unwrap();
        assert_eq!(q(&s.capacity, "cpu"), "2");
        assert_eq!(q(&s.capacity, "memory"), "24683656Ki");
        assert_eq!(q(&s.capacity, "pods"), "110");
        assert_eq!(q(&s.capacity, "hugepages-2Mi"), "0");
        assert_eq!(q(&s.capacity, "hugepages-1Gi"), "0");
        let cap = 66053021u64 * 4096;
        assert_eq!(q(&s.capacity, "ephemeral-storage"), "264212084Ki");
        // memory less 100Mi; ephemeral-storage less 10% (a float32 fraction, truncated).
        assert_eq!(q(&s.allocatable, "memory"), "24581256Ki");
        let reserved = (cap as f64 * f64::from(0.1f32)) as u64;
        assert_eq!(
            q(&s.allocatable, "ephemeral-storage"),
            (cap - reserved).to_string()
        );
        assert_eq!(q(&s.allocatable, "cpu"), "2");
        assert_eq!(q(&s.allocatable, "pods"), "110");
        assert_eq!(q(&s.allocatable, "hugepages-2Mi"), "0");

        // Huge pages come out of allocatable memory; an extended resource is kept.
        let mut obs = observed();
        obs.machine.huge_pages.insert(2 * 1024 * 1024, 512);
        obs.max_pods = 1000;
        let mut node = Node {
            status: Some(NodeStatus {
                capacity: Some([("example.com/dongle".to_string(), Quantity("3".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        set_node_status(&mut node, &obs, t(0));
        let s = node.status.as_ref().unwrap();
        assert_eq!(q(&s.capacity, "hugepages-2Mi"), "1Gi");
        assert_eq!(q(&s.allocatable, "memory"), "23532680Ki");
        assert_eq!(q(&s.capacity, "pods"), "1k");
        assert_eq!(q(&s.capacity, "example.com/dongle"), "3");
        assert_eq!(q(&s.allocatable, "example.com/dongle"), "3");

        // A machine with less memory than the reservation has none allocatable.
        let mut obs = observed();
        obs.machine.memory_capacity = 50 * 1024 * 1024;
        let mut node = Node::default();
        set_node_status(&mut node, &obs, t(0));
        assert_eq!(q(&node.status.as_ref().unwrap().allocatable, "memory"), "0");
    }

    #[test]
    fn conditions_start_healthy_and_ready_is_last() {
        let mut node = Node::default();
        let events = set_node_status(&mut node, &observed(), t(0));
        let conds = node.status.as_ref().unwrap().conditions.as_ref().unwrap();
        let types: Vec<&str> = conds.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        let mem = cond(&node, "MemoryPressure");
        assert_eq!(mem.status, "False");
        assert_eq!(mem.reason.as_deref(), Some("KubeletHasSufficientMemory"));
        assert_eq!(
            mem.message.as_deref(),
            Some("kubelet has sufficient memory available")
        );
        assert_eq!(
            cond(&node, "DiskPressure").reason.as_deref(),
            Some("KubeletHasNoDiskPressure")
        );
        assert_eq!(
            cond(&node, "PIDPressure").reason.as_deref(),
            Some("KubeletHasSufficientPID")
        );
        let ready = cond(&node, "Ready");
        assert_eq!(ready.status, "True");
        assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("kubelet is posting ready status")
        );
        assert_eq!(ready.last_transition_time, Some(Time(t(0))));
        let reasons: Vec<&str> = events.iter().map(|e| e.reason).collect();
        assert_eq!(
            reasons,
            [
                "NodeHasSufficientMemory",
                "NodeHasNoDiskPressure",
                "NodeHasSufficientPID"
            ]
        );
        assert_eq!(
            events[0].message,
            "Node node-a status is now: NodeHasSufficientMemory"
        );
    }

    #[test]
    fn network_not_ready_makes_the_node_not_ready_then_ready() {
        let status = v1::StatusResponse {
            status: Some(v1::RuntimeStatus {
                conditions: vec![
                    v1::RuntimeCondition {
                        r#type: "RuntimeReady".into(),
                        status: true,
                        ..Default::default()
                    },
                    v1::RuntimeCondition {
                        r#type: "NetworkReady".into(),
                        status: false,
                        reason: "NetworkPluginNotReady".into(),
                        message: "Network plugin returns error: cni plugin not initialized".into(),
                    },
                ],
            }),
            ..Default::default()
        };
        let mut obs = observed();
        obs.runtime = RuntimeHealth::from_status(&status);
        assert!(!obs.runtime.ready());
        let mut node = Node::default();
        set_node_status(&mut node, &obs, t(0));
        let ready = cond(&node, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized")
        );

        // Unchanged a minute later: only the heartbeat moves, and it is not a change.
        let before = node.clone();
        let events = set_node_status(&mut node, &obs, t(60));
        assert!(events.is_empty());
        assert_eq!(cond(&node, "Ready").last_heartbeat_time, Some(Time(t(60))));
        assert_eq!(cond(&node, "Ready").last_transition_time, Some(Time(t(0))));
        assert!(!status_changed(
            before.status.as_ref(),
            node.status.as_ref()
        ));

        // The network comes up: Ready transitions, with its event.
        obs.runtime = ready_runtime();
        let before = node.clone();
        let events = set_node_status(&mut node, &obs, t(70));
        let ready = cond(&node, "Ready");
        assert_eq!(ready.status, "True");
        assert_eq!(ready.last_transition_time, Some(Time(t(70))));
        assert_eq!(
            events,
            [NodeEvent {
                type_: "Normal",
                reason: "NodeReady",
                message: "Node node-a status is now: NodeReady".into()
            }]
        );
        assert!(status_changed(before.status.as_ref(), node.status.as_ref()));
        // Memory pressure's transition time did not move.
        assert_eq!(
            cond(&node, "MemoryPressure").last_transition_time,
            Some(Time(t(0)))
        );

        // The runtime goes away: NotReady with both reasons.
        obs.runtime = RuntimeHealth::from_status(&v1::StatusResponse::default());
        let events = set_node_status(&mut node, &obs, t(80));
        assert_eq!(events[0].reason, "NodeNotReady");
        assert_eq!(
            cond(&node, "Ready").message.as_deref(),
            Some(
                "[container runtime not ready: <nil>, container runtime network not ready: <nil>]"
            )
        );
    }

    #[test]
    fn initial_runtime_health_is_not_ready() {
        let mut obs = observed();
        obs.runtime = RuntimeHealth::default();
        let mut node = Node::default();
        set_node_status(&mut node, &obs, t(0));
        assert_eq!(
            cond(&node, "Ready").message.as_deref(),
            Some("[container runtime status check may not have completed yet, network state unknown]")
        );
    }

    #[test]
    fn pressure_transitions_record_events_and_linger() {
        let mut tracker = PressureTracker::default();
        let start = Instant::now();
        let fs_ok = FsStats {
            capacity_bytes: 1000,
            available_bytes: 500,
            inodes: 100,
            inodes_free: 50,
        };
        let fs_full = FsStats {
            available_bytes: 99,
            ..fs_ok
        };
        let fs_no_inodes = FsStats {
            inodes_free: 4,
            ..fs_ok
        };
        let p = tracker.observe(Some(GI), Some(&fs_ok), start);
        assert_eq!(p, Pressure::default());
        let p = tracker.observe(Some(GI), Some(&fs_no_inodes), start);
        assert!(p.disk);
        let mut tracker = PressureTracker::default();
        let p = tracker.observe(Some(50 * 1024 * 1024), Some(&fs_full), start);
        assert!(p.memory && p.disk && !p.pid);
        // Recovered signals keep the condition for the transition period.
        let later = start + Duration::from_secs(60);
        assert!(tracker.observe(Some(GI), Some(&fs_ok), later).memory);
        let much_later = start + PRESSURE_TRANSITION_PERIOD + Duration::from_secs(1);
        assert_eq!(
            tracker.observe(Some(GI), Some(&fs_ok), much_later),
            Pressure::default()
        );
        // Unknown signals are no pressure.
        let mut fresh = PressureTracker::default();
        assert_eq!(fresh.observe(None, None, start), Pressure::default());

        let mut node = Node::default();
        let mut obs = observed();
        set_node_status(&mut node, &obs, t(0));
        obs.pressure.memory = true;
        let events = set_node_status(&mut node, &obs, t(10));
        assert_eq!(events[0].reason, "NodeHasInsufficientMemory");
        let mem = cond(&node, "MemoryPressure");
        assert_eq!(mem.status, "True");
        assert_eq!(mem.reason.as_deref(), Some("KubeletHasInsufficientMemory"));
        assert_eq!(mem.last_transition_time, Some(Time(t(10))));
        obs.pressure = Pressure {
            memory: false,
            disk: true,
            pid: true,
        };
        let events = set_node_status(&mut node, &obs, t(20));
        let reasons: Vec<&str> = events.iter().map(|e| e.reason).collect();
        assert_eq!(
            reasons,
            [
                "NodeHasSufficientMemory",
                "NodeHasDiskPressure",
                "NodeHasInsufficientPID"
            ]
        );
        assert_eq!(
            cond(&node, "DiskPressure").message.as_deref(),
            Some("kubelet has disk pressure")
        );
        assert_eq!(
            cond(&node, "PIDPressure").reason.as_deref(),
            Some("KubeletHasInsufficientPID")
        );
        // Ready stays True under pressure (the eviction manager acts, not readiness).
        assert_eq!(cond(&node, "Ready").status, "True");
    }

    #[test]
    fn node_info_addresses_and_endpoints() {
        let mut node = Node::default();
        set_node_status(&mut node, &observed(), t(0));
        let s = node.status.as_ref().unwrap();
        let info = s.node_info.as_ref().unwrap();
        assert_eq!(info.machine_id, "abc");
        assert_eq!(info.system_uuid, "uuid-1");
        assert_eq!(info.boot_id, "boot-1");
        assert_eq!(info.kernel_version, "6.1.0");
        assert_eq!(info.os_image, "Debian GNU/Linux 12 (bookworm)");
        assert_eq!(info.container_runtime_version, "containerd://1.6.20");
        assert_eq!(info.kubelet_version, "v1.32.0");
        assert_eq!(info.kube_proxy_version, "v1.32.0");
        assert_eq!(info.operating_system, "linux");
        assert_eq!(info.architecture, go_arch());
        assert!(["amd64", "arm64"].contains(&go_arch()));
        let addrs = s.addresses.as_ref().unwrap();
        assert_eq!(addrs[0].type_, "InternalIP");
        assert_eq!(addrs[1].type_, "Hostname");
        assert_eq!(
            s.daemon_endpoints
                .as_ref()
                .unwrap()
                .kubelet_endpoint
                .as_ref()
                .unwrap()
                .port,
            10250
        );

        // A new boot id is a reboot.
        let mut obs = observed();
        obs.machine.boot_id = "boot-2".into();
        obs.addresses = None;
        let events = set_node_status(&mut node, &obs, t(5));
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].type_, "Warning");
        assert_eq!(events[0].reason, "Rebooted");
        assert_eq!(
            events[0].message,
            "Node node-a has been rebooted, boot id: boot-2"
        );
        // Addresses that could not be found are left as they were.
        assert_eq!(
            node.status.as_ref().unwrap().addresses.as_ref().unwrap()[0].address,
            "192.0.2.2"
        );
    }

    #[test]
    fn runtime_versions_are_normalized() {
        let v = |name: &str, ver: &str| {
            runtime_version_string(&v1::VersionResponse {
                runtime_name: name.into(),
                runtime_version: ver.into(),
                ..Default::default()
            })
        };
        assert_eq!(v("containerd", "1.6.20~ds1"), "containerd://1.6.20");
        assert_eq!(v("containerd", "v1.7.3"), "containerd://1.7.3");
        assert_eq!(v("cri-o", "1.32.0-rc.1+abc"), "cri-o://1.32.0-rc.1+abc");
        assert_eq!(v("containerd", "1.6"), "containerd://1.6");
        assert_eq!(v("containerd", "garbage"), "containerd://Unknown");
    }

    #[test]
    fn images_are_largest_first_digests_then_tags() {
        let img = |id: &str, size: u64, tags: &[&str], digests: &[&str]| v1::Image {
            id: id.into(),
            size,
            repo_tags: tags.iter().map(|s| s.to_string()).collect(),
            repo_digests: digests.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let list = vec![
            img(
                "sha256:a",
                300_000,
                &["reg/pause:3.10"],
                &["reg/pause@sha256:1"],
            ),
            img(
                "sha256:b",
                2_000_000,
                &["reg/busybox:1.35"],
                &["reg/busybox@sha256:2"],
            ),
            img("sha256:c", 10, &["t1", "t2", "t3", "t4"], &["d1", "d2"]),
        ];
        let out = images(&list);
        assert_eq!(out.len(), 3);
        assert_eq!(
            out[0].names.as_deref().unwrap(),
            ["reg/busybox@sha256:2", "reg/busybox:1.35"]
        );
        assert_eq!(out[0].size_bytes, Some(2_000_000));
        assert_eq!(out[1].size_bytes, Some(300_000));
        assert_eq!(
            out[2].names.as_deref().unwrap(),
            ["d1", "d2", "t1", "t2", "t3"]
        );
        let many: Vec<v1::Image> = (0..60)
            .map(|i| img(&format!("sha256:{i}"), i, &[], &[]))
            .collect();
        let out = images(&many);
        assert_eq!(out.len(), MAX_IMAGES_IN_NODE_STATUS);
        assert_eq!(out[0].size_bytes, Some(59));

        // A new image is a status change; an image-listing failure reports none.
        let mut node = Node::default();
        let mut obs = observed();
        set_node_status(&mut node, &obs, t(0));
        let before = node.clone();
        obs.images = Some(list);
        set_node_status(&mut node, &obs, t(1));
        assert!(status_changed(before.status.as_ref(), node.status.as_ref()));
        obs.images = None;
        set_node_status(&mut node, &obs, t(2));
        assert_eq!(
            node.status.as_ref().unwrap().images.as_deref(),
            Some(&[][..])
        );
    }

    #[test]
    fn foreign_conditions_are_kept_and_quantities_compare_by_value() {
        let mut node = Node {
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "NetworkUnavailable".into(),
                    status: "False".into(),
                    reason: Some("RouteCreated".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        set_node_status(&mut node, &observed(), t(0));
        let conds = node.status.as_ref().unwrap().conditions.as_ref().unwrap();
        assert_eq!(conds.len(), 5);
        assert_eq!(conds[0].type_, "NetworkUnavailable");

        let mut other = node.clone();
        other
            .status
            .as_mut()
            .unwrap()
            .capacity
            .as_mut()
            .unwrap()
            .insert("hugepages-2Mi".into(), Quantity("0Mi".into()));
        assert!(!status_changed(node.status.as_ref(), other.status.as_ref()));
        other
            .status
            .as_mut()
            .unwrap()
            .allocatable
            .as_mut()
            .unwrap()
            .insert("cpu".into(), Quantity("1".into()));
        assert!(status_changed(node.status.as_ref(), other.status.as_ref()));
        assert!(status_changed(None, node.status.as_ref()));
        assert!(!status_changed(None, None));
    }
}
