//! Hollow kubelets (Kubernetes' kubemark): the real kubelet over a container runtime that runs
//! nothing, on a machine described by flags instead of probed from the host, so that many
//! kubelets fit in one process and a control plane can be exercised with many nodes.
//!
//! [`FakeRuntime`] keeps sandboxes, containers and images in memory. Every call succeeds at
//! once: images are "pulled" instantly, a sandbox is ready as soon as it is asked for (with an
//! address from the node's pod CIDR, which the kubelet hands over through
//! UpdateRuntimeConfig), and a started container "runs" until it is stopped. Init containers
//! (other than restartable sidecars) finish with exit code 0 as soon as they start, so pods
//! get past them. A pod annotated `hollow.capstan.dev/exit-code: "N"` has its containers exit
//! with N `hollow.capstan.dev/run-seconds` (default 0) after they start, as `capstan bench
//! nodes` does. `hollow.capstan.dev/cpu-millicores` and `hollow.capstan.dev/memory-bytes` give
//! the usage each of its running containers reports (zero otherwise), so the resource metrics
//! API and what reads it (`kubectl top`, the HorizontalPodAutoscaler) see a load.
//!
//! [`Hollow`] is the machine such a kubelet reports ([`crate::Options::hollow`]): CPUs,
//! memory, a disk that never fills, an identity derived from the node name, and an
//! InternalIP that need not belong to this host. [`start`] runs one hollow kubelet inside
//! the current process.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, LazyLock, OnceLock};

use capstan_cri::v1 as cri;
use capstan_cri::{Runtime, Status};
use capstan_runtime::informer::Informer;
use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;

use crate::node::machine::{FsStats, MachineInfo};
use crate::pods::runtime::{LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};
use crate::pods::util::now_nanos;
use crate::{Kubelet, Options};

/// A pod annotation: its containers exit with this code ...
pub const EXIT_CODE: &str = "hollow.capstan.dev/exit-code";
/// ... this many seconds after they start (default 0).
pub const RUN_SECONDS: &str = "hollow.capstan.dev/run-seconds";
/// A pod annotation: the CPU each of its running containers uses, in millicores.
pub const CPU_MILLICORES: &str = "hollow.capstan.dev/cpu-millicores";
/// A pod annotation: the memory working set of each of its running containers, in bytes.
pub const MEMORY_BYTES: &str = "hollow.capstan.dev/memory-bytes";

/// What the runtime calls itself (`fake://1.0.0` in node status).
pub const RUNTIME_NAME: &str = "fake";
pub const RUNTIME_VERSION: &str = "1.0.0";
/// The pod network when the node has no pod CIDR (containerd's default bridge network).
pub const DEFAULT_POD_CIDR: &str = "10.88.0.0/16";
/// The size every fake image reports.
const IMAGE_SIZE: u64 = 10 * 1024 * 1024;

/// The machine a hollow kubelet reports instead of the host's.
#[derive(Clone, Debug)]
pub struct Hollow {
    /// CPUs, memory, identity and kernel of the node.
    pub machine: MachineInfo,
    /// The filesystem of the kubelet's root directory: always empty, so never under pressure.
    pub rootfs: FsStats,
    /// The node's InternalIP (it need not be an address of this host).
    pub node_ip: IpAddr,
}

/// The host's kernel release and OS name, read once per process.
static HOST_RELEASE: LazyLock<(String, String)> = LazyLock::new(|| {
    let m = crate::node::machine::read_machine_info();
    (m.kernel_version, m.os_image)
});

impl Hollow {
    /// A machine for node `node_name` with `cpus` CPUs, `memory` bytes of memory and a disk of
    /// `storage` bytes. The machine ID, system UUID and boot ID are derived from the node name
    /// (the boot ID also from the host's, so it changes when the host reboots, not when the
    /// hollow kubelet restarts).
    pub fn new(node_name: &str, cpus: u64, memory: u64, storage: u64, node_ip: IpAddr) -> Hollow {
        let id = hex(&sha256(node_name.as_bytes()));
        let host_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .unwrap_or_default()
            .trim()
            .to_string();
        let boot = hex(&sha256(format!("{host_boot}/{node_name}").as_bytes()));
        let (kernel_version, os_image) = HOST_RELEASE.clone();
        Hollow {
            machine: MachineInfo {
                num_cpus: cpus,
                memory_capacity: memory,
                huge_pages: Default::default(),
                machine_id: id[..32].to_string(),
                system_uuid: uuid_form(&id[32..64]),
                boot_id: uuid_form(&boot[..32]),
                kernel_version,
                os_image,
            },
            rootfs: FsStats {
                capacity_bytes: storage,
                available_bytes: storage,
                inodes: 100_000_000,
                inodes_free: 100_000_000,
            },
            node_ip,
        }
    }
}

/// A default InternalIP for hollow node `node_name`: an address of the benchmarking range
/// 198.18.0.0/15 (RFC 2544) chosen from the name, so hollow nodes rarely share one.
pub fn default_node_ip(node_name: &str) -> IpAddr {
    let h = sha256(node_name.as_bytes());
    let n = u32::from_be_bytes([0, h[0], h[1], h[2]]) % ((1 << 17) - 2) + 1;
    IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + n))
}

/// A quantity such as `256Gi` or `100G` in bytes (None when malformed or negative).
pub fn parse_bytes(text: &str) -> Option<u64> {
    crate::parse_bytes(text)
}

/// Start one hollow kubelet in this process (its loops run as tasks of the current Tokio
/// runtime) and return it. `opts.hollow` should be set; the runtime is a new [`FakeRuntime`].
pub fn start(client: kube::Client, opts: Options) -> anyhow::Result<Arc<Kubelet>> {
    let runtime = Arc::new(FakeRuntime::new());
    let k = Kubelet::new(client, runtime.clone(), opts);
    runtime.watch_pods(k.pods.clone());
    crate::start(&k)?;
    Ok(k)
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 32 hex digits as 8-4-4-4-12.
fn uuid_form(h: &str) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A 64-hex-digit object ID, as containerd's.
fn new_id() -> String {
    format!(
        "{:032x}{:032x}",
        rand::random::<u128>(),
        rand::random::<u128>()
    )
}

/// One pod CIDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    base: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// `10.42.3.0/24` or `fd00:42::/64` (host bits are cleared).
    pub fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = text.trim().split_once('/')?;
        let addr: IpAddr = addr.parse().ok()?;
        let prefix: u8 = prefix.parse().ok()?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > bits {
            return None;
        }
        let base = from_offset(addr, 0, prefix);
        Some(Cidr { base, prefix })
    }

    fn host_bits(&self) -> u32 {
        let bits = if self.base.is_ipv4() { 32 } else { 128 };
        bits - u32::from(self.prefix)
    }

    /// How many addresses the range holds (saturating at u128::MAX).
    fn size(&self) -> u128 {
        1u128.checked_shl(self.host_bits()).unwrap_or(u128::MAX)
    }

    /// Whether offset `n` may be given to a pod: not the network address, not the gateway
    /// (the first host), not the IPv4 broadcast address.
    fn assignable(&self, n: u128) -> bool {
        let size = self.size();
        if size <= 4 {
            // A tiny range: anything but the network address.
            return n != 0 && n < size;
        }
        n >= 2 && n < size && !(self.base.is_ipv4() && n == size - 1)
    }

    fn addr(&self, n: u128) -> IpAddr {
        from_offset(self.base, n, self.prefix)
    }
}

/// `base` with its host bits (past `prefix`) replaced by `n`.
fn from_offset(base: IpAddr, n: u128, prefix: u8) -> IpAddr {
    match base {
        IpAddr::V4(v4) => {
            let host_bits = 32 - u32::from(prefix);
            let mask = u32::MAX.checked_shl(host_bits).unwrap_or(0);
            let net = u32::from(v4) & mask;
            IpAddr::V4(Ipv4Addr::from(net | (n as u32 & !mask)))
        }
        IpAddr::V6(v6) => {
            let host_bits = 128 - u32::from(prefix);
            let mask = u128::MAX.checked_shl(host_bits).unwrap_or(0);
            let net = u128::from(v6) & mask;
            IpAddr::V6(Ipv6Addr::from(net | (n & !mask)))
        }
    }
}

/// Pod addresses of one CIDR: handed out in order (after the last one given, as host-local
/// IPAM does), never two pods the same, freed when the sandbox stops.
#[derive(Debug)]
struct Pool {
    cidr: Cidr,
    next: u128,
    used: HashSet<u128>,
}

impl Pool {
    fn new(cidr: Cidr) -> Pool {
        Pool {
            cidr,
            next: 0,
            used: HashSet::new(),
        }
    }

    fn allocate(&mut self) -> Option<IpAddr> {
        let size = self.cidr.size();
        // Look at most this many candidates (a /64 is not searched to its end).
        let tries = size.min(1 << 20);
        let mut n = self.next;
        for _ in 0..tries {
            n = if n.saturating_add(1) >= size {
                0
            } else {
                n + 1
            };
            if self.cidr.assignable(n) && !self.used.contains(&n) {
                self.used.insert(n);
                self.next = n;
                return Some(self.cidr.addr(n));
            }
        }
        None
    }

    fn release(&mut self, ip: &IpAddr) {
        if let Some(n) = self.offset_of(ip) {
            self.used.remove(&n);
        }
    }

    fn offset_of(&self, ip: &IpAddr) -> Option<u128> {
        let host_bits = self.cidr.host_bits();
        let mask = |bits: u32| -> u128 {
            if host_bits >= bits {
                u128::MAX
            } else {
                (1u128 << host_bits) - 1
            }
        };
        match (self.cidr.base, ip) {
            (IpAddr::V4(_), IpAddr::V4(v4)) => (from_offset(*ip, 0, self.cidr.prefix)
                == self.cidr.base)
                .then(|| u128::from(u32::from(*v4)) & mask(32)),
            (IpAddr::V6(_), IpAddr::V6(v6)) => (from_offset(*ip, 0, self.cidr.prefix)
                == self.cidr.base)
                .then(|| u128::from(*v6) & mask(128)),
            _ => None,
        }
    }
}

/// When a running container exits by itself: at `at` (CRI nanoseconds) with `code`.
#[derive(Clone, Copy, Debug)]
struct Exit {
    at: i64,
    code: i32,
}

struct Sandbox {
    status: cri::PodSandboxStatus,
    log_directory: String,
    /// The exit a pod annotation asks its containers for: (nanoseconds after their start, code).
    exit: Option<(i64, i32)>,
    /// The usage pod annotations ask its containers to report.
    usage: Usage,
}

/// What a container reports using while it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Usage {
    /// CPU, in nanocores.
    nano_cores: u64,
    /// Memory working set, in bytes.
    memory_bytes: u64,
}

impl Usage {
    /// From a sandbox's annotations; an absent or unparsable figure is zero.
    fn from_annotations(a: &HashMap<String, String>) -> Usage {
        let num = |k: &str| {
            a.get(k)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        Usage {
            nano_cores: num(CPU_MILLICORES).saturating_mul(1_000_000),
            memory_bytes: num(MEMORY_BYTES),
        }
    }
}

struct Container {
    sandbox_id: String,
    status: cri::ContainerStatus,
    /// The exit planned when it was created: (nanoseconds after its start, code).
    planned: Option<(i64, i32)>,
    /// The exit ahead of it while it runs.
    exit: Option<Exit>,
}

#[derive(Default)]
struct State {
    /// One pool per pod CIDR, primary first (empty until the kubelet gives the CIDRs).
    pools: Vec<Pool>,
    sandboxes: HashMap<String, Sandbox>,
    containers: HashMap<String, Container>,
    /// Pulled images by ID.
    images: HashMap<String, cri::Image>,
    /// Running containers with an [`Exit`] still ahead.
    pending_exits: usize,
}

/// An in-memory CRI runtime that runs nothing (see the module documentation).
#[derive(Default)]
pub struct FakeRuntime {
    state: Mutex<State>,
    /// The kubelet's pods, to tell init containers from the others.
    pods: OnceLock<Arc<Informer<Pod>>>,
}

impl FakeRuntime {
    pub fn new() -> FakeRuntime {
        FakeRuntime::default()
    }

    /// Look pods up in `pods` (the kubelet's pod informer) to find which containers are init
    /// containers, which finish at once.
    pub fn watch_pods(&self, pods: Arc<Informer<Pod>>) {
        let _ = self.pods.set(pods);
    }

    /// How many sandboxes and containers the runtime holds.
    pub fn counts(&self) -> (usize, usize) {
        let s = self.state.lock();
        (s.sandboxes.len(), s.containers.len())
    }

    /// Whether container `name` of the pod a sandbox belongs to is an init container that
    /// runs to completion (not a restartable sidecar).
    fn is_init_container(&self, labels: &HashMap<String, String>, name: &str) -> bool {
        let Some(pods) = self.pods.get() else {
            return false;
        };
        let (Some(ns), Some(pod_name), Some(uid)) = (
            labels.get(LABEL_POD_NAMESPACE),
            labels.get(LABEL_POD_NAME),
            labels.get(LABEL_POD_UID),
        ) else {
            return false;
        };
        let Some(pod) = pods.get(ns, pod_name) else {
            return false;
        };
        if pod.metadata.uid.as_deref() != Some(uid.as_str()) {
            return false;
        }
        pod.spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .and_then(|ics| ics.iter().find(|c| c.name == name))
            .is_some_and(|c| c.restart_policy.as_deref() != Some("Always"))
    }
}

impl State {
    /// Apply the exits that are due by `now`.
    fn settle(&mut self, now: i64) {
        if self.pending_exits == 0 {
            return;
        }
        for c in self.containers.values_mut() {
            let Some(exit) = c.exit else { continue };
            if exit.at > now {
                continue;
            }
            c.exit = None;
            self.pending_exits = self.pending_exits.saturating_sub(1);
            finish(&mut c.status, exit.code, exit.at);
        }
    }

    fn allocate_ips(&mut self) -> Result<Vec<IpAddr>, Status> {
        if self.pools.is_empty() {
            if let Some(c) = Cidr::parse(DEFAULT_POD_CIDR) {
                self.pools.push(Pool::new(c));
            }
        }
        let mut ips = Vec::new();
        for i in 0..self.pools.len() {
            match self.pools[i].allocate() {
                Some(ip) => ips.push(ip),
                None => {
                    let cidr = self.pools[i].cidr;
                    for (pool, ip) in self.pools.iter_mut().zip(&ips) {
                        pool.release(ip);
                    }
                    return Err(Status::resource_exhausted(format!(
                        "failed to allocate for range {i}: no IP addresses available in range set: {}/{}",
                        cidr.base, cidr.prefix
                    )));
                }
            }
        }
        Ok(ips)
    }

    fn release_ips(&mut self, network: &Option<cri::PodSandboxNetworkStatus>) {
        let Some(n) = network else { return };
        let ips =
            std::iter::once(n.ip.as_str()).chain(n.additional_ips.iter().map(|i| i.ip.as_str()));
        for ip in ips.filter_map(|s| s.parse::<IpAddr>().ok()) {
            for pool in &mut self.pools {
                pool.release(&ip);
            }
        }
    }

    /// The image a reference names: by ID, tag or digest.
    fn find_image(&self, reference: &str) -> Option<&cri::Image> {
        if let Some(i) = self.images.get(reference) {
            return Some(i);
        }
        let norm = normalize_image(reference);
        self.images
            .values()
            .find(|i| i.repo_tags.contains(&norm) || i.repo_digests.contains(&norm))
    }
}

/// End a running container with `code` at `at`.
fn finish(s: &mut cri::ContainerStatus, code: i32, at: i64) {
    s.state = cri::ContainerState::ContainerExited as i32;
    s.exit_code = code;
    s.finished_at = at;
    s.reason = if code == 0 { "Completed" } else { "Error" }.into();
}

/// A Docker-style reference in full: `nginx` → `docker.io/library/nginx:latest`.
pub fn normalize_image(reference: &str) -> String {
    let r = reference.trim();
    if r.starts_with("sha256:") {
        return r.to_string();
    }
    let (first, rest) = r.split_once('/').unwrap_or(("", r));
    let (domain, path) = if first.is_empty()
        || !(first.contains('.') || first.contains(':') || first == "localhost")
    {
        let path = if first.is_empty() {
            rest.to_string()
        } else {
            format!("{first}/{rest}")
        };
        let path = if path.contains('/') {
            path
        } else {
            format!("library/{path}")
        };
        ("docker.io".to_string(), path)
    } else {
        (first.to_string(), rest.to_string())
    };
    let last = path.rsplit('/').next().unwrap_or_default();
    let tagged = path.contains('@') || last.contains(':');
    format!("{domain}/{path}{}", if tagged { "" } else { ":latest" })
}

/// The image a pull of `reference` makes.
fn image_for(reference: &str) -> cri::Image {
    let norm = normalize_image(reference);
    let digest = hex(&sha256(norm.as_bytes()));
    let repo = match norm.split_once('@') {
        Some((repo, _)) => repo.to_string(),
        None => {
            let slash = norm.rfind('/').unwrap_or(0);
            match norm[slash..].rfind(':') {
                Some(colon) => norm[..slash + colon].to_string(),
                None => norm.clone(),
            }
        }
    };
    let repo_tags = if norm.contains('@') {
        Vec::new()
    } else {
        vec![norm.clone()]
    };
    let repo_digests = if norm.contains('@') {
        vec![norm.clone()]
    } else {
        vec![format!("{repo}@sha256:{digest}")]
    };
    cri::Image {
        id: format!("sha256:{digest}"),
        repo_tags,
        repo_digests,
        size: IMAGE_SIZE,
        ..Default::default()
    }
}

fn matches(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn id_matches(id: &str, want: &str) -> bool {
    want.is_empty() || id.starts_with(want)
}

fn not_found(what: &str, id: &str) -> Status {
    Status::not_found(format!(
        "an error occurred when try to find {what} {id:?}: not found"
    ))
}

fn unsupported(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not supported by the fake runtime"))
}

type R<T> = capstan_cri::Result<T>;

#[async_trait::async_trait]
impl Runtime for FakeRuntime {
    async fn version(&self, _: cri::VersionRequest) -> R<cri::VersionResponse> {
        Ok(cri::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: RUNTIME_NAME.into(),
            runtime_version: RUNTIME_VERSION.into(),
            runtime_api_version: "v1".into(),
        })
    }

    async fn run_pod_sandbox(
        &self,
        req: cri::RunPodSandboxRequest,
    ) -> R<cri::RunPodSandboxResponse> {
        let cfg = req
            .config
            .ok_or_else(|| Status::invalid_argument("sandbox config is required"))?;
        let host_network = cfg
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|c| c.namespace_options.as_ref())
            .is_some_and(|n| n.network == cri::NamespaceMode::Node as i32);
        let namespaces = cfg
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|c| c.namespace_options.clone());
        let exit = cfg.annotations.get(EXIT_CODE).and_then(|code| {
            let code: i32 = code.trim().parse().ok()?;
            let secs: f64 = cfg
                .annotations
                .get(RUN_SECONDS)
                .and_then(|s| s.trim().parse().ok())
                .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                .unwrap_or(0.0);
            Some(((secs.min(1e9) * 1e9) as i64, code))
        });
        let usage = Usage::from_annotations(&cfg.annotations);
        let mut s = self.state.lock();
        let network = if host_network {
            cri::PodSandboxNetworkStatus::default()
        } else {
            let ips = s.allocate_ips()?;
            cri::PodSandboxNetworkStatus {
                ip: ips.first().map(|ip| ip.to_string()).unwrap_or_default(),
                additional_ips: ips
                    .iter()
                    .skip(1)
                    .map(|ip| cri::PodIp { ip: ip.to_string() })
                    .collect(),
            }
        };
        let id = new_id();
        let status = cri::PodSandboxStatus {
            id: id.clone(),
            metadata: cfg.metadata,
            state: cri::PodSandboxState::SandboxReady as i32,
            created_at: now_nanos(),
            network: Some(network),
            linux: Some(cri::LinuxPodSandboxStatus {
                namespaces: Some(cri::Namespace {
                    options: namespaces,
                }),
            }),
            labels: cfg.labels,
            annotations: cfg.annotations,
            runtime_handler: req.runtime_handler,
        };
        s.sandboxes.insert(
            id.clone(),
            Sandbox {
                status,
                log_directory: cfg.log_directory,
                exit,
                usage,
            },
        );
        Ok(cri::RunPodSandboxResponse { pod_sandbox_id: id })
    }

    async fn stop_pod_sandbox(
        &self,
        req: cri::StopPodSandboxRequest,
    ) -> R<cri::StopPodSandboxResponse> {
        let now = now_nanos();
        let mut s = self.state.lock();
        s.settle(now);
        let network = match s.sandboxes.get_mut(&req.pod_sandbox_id) {
            // Stopping a sandbox that is gone succeeds (the kubelet may retry).
            None => return Ok(cri::StopPodSandboxResponse {}),
            Some(sb) => {
                if sb.status.state == cri::PodSandboxState::SandboxNotready as i32 {
                    return Ok(cri::StopPodSandboxResponse {});
                }
                sb.status.state = cri::PodSandboxState::SandboxNotready as i32;
                sb.status.network.clone()
            }
        };
        s.release_ips(&network);
        let mut cleared = 0;
        for c in s.containers.values_mut() {
            if c.sandbox_id == req.pod_sandbox_id
                && c.status.state == cri::ContainerState::ContainerRunning as i32
            {
                finish(&mut c.status, 137, now);
                if c.exit.take().is_some() {
                    cleared += 1;
                }
            }
        }
        s.pending_exits = s.pending_exits.saturating_sub(cleared);
        Ok(cri::StopPodSandboxResponse {})
    }

    async fn remove_pod_sandbox(
        &self,
        req: cri::RemovePodSandboxRequest,
    ) -> R<cri::RemovePodSandboxResponse> {
        let mut s = self.state.lock();
        let Some(sb) = s.sandboxes.remove(&req.pod_sandbox_id) else {
            return Ok(cri::RemovePodSandboxResponse {});
        };
        if sb.status.state == cri::PodSandboxState::SandboxReady as i32 {
            s.release_ips(&sb.status.network);
        }
        let mut cleared = 0;
        s.containers.retain(|_, c| {
            let keep = c.sandbox_id != req.pod_sandbox_id;
            if !keep && c.exit.is_some() {
                cleared += 1;
            }
            keep
        });
        s.pending_exits = s.pending_exits.saturating_sub(cleared);
        Ok(cri::RemovePodSandboxResponse {})
    }

    async fn pod_sandbox_status(
        &self,
        req: cri::PodSandboxStatusRequest,
    ) -> R<cri::PodSandboxStatusResponse> {
        let s = self.state.lock();
        let sb = s
            .sandboxes
            .get(&req.pod_sandbox_id)
            .ok_or_else(|| not_found("sandbox", &req.pod_sandbox_id))?;
        Ok(cri::PodSandboxStatusResponse {
            status: Some(sb.status.clone()),
            ..Default::default()
        })
    }

    async fn list_pod_sandbox(
        &self,
        req: cri::ListPodSandboxRequest,
    ) -> R<cri::ListPodSandboxResponse> {
        let f = req.filter.unwrap_or_default();
        let s = self.state.lock();
        let items = s
            .sandboxes
            .values()
            .map(|sb| &sb.status)
            .filter(|st| id_matches(&st.id, &f.id))
            .filter(|st| f.state.as_ref().is_none_or(|v| v.state == st.state))
            .filter(|st| matches(&st.labels, &f.label_selector))
            .map(|st| cri::PodSandbox {
                id: st.id.clone(),
                metadata: st.metadata.clone(),
                state: st.state,
                created_at: st.created_at,
                labels: st.labels.clone(),
                annotations: st.annotations.clone(),
                runtime_handler: st.runtime_handler.clone(),
            })
            .collect();
        Ok(cri::ListPodSandboxResponse { items })
    }

    async fn create_container(
        &self,
        req: cri::CreateContainerRequest,
    ) -> R<cri::CreateContainerResponse> {
        let cfg = req
            .config
            .ok_or_else(|| Status::invalid_argument("container config is required"))?;
        let name = cfg
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let init = self.is_init_container(&cfg.labels, &name);
        let mut s = self.state.lock();
        let sandbox = s
            .sandboxes
            .get(&req.pod_sandbox_id)
            .ok_or_else(|| not_found("sandbox", &req.pod_sandbox_id))?;
        if sandbox.status.state != cri::PodSandboxState::SandboxReady as i32 {
            return Err(Status::failed_precondition(format!(
                "sandbox container {:?} is not running",
                req.pod_sandbox_id
            )));
        }
        let log_dir = req
            .sandbox_config
            .as_ref()
            .map(|c| c.log_directory.clone())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| sandbox.log_directory.clone());
        let wanted = cfg
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let image = s
            .find_image(&wanted)
            .cloned()
            .unwrap_or_else(|| image_for(&wanted));
        let id = new_id();
        let status = cri::ContainerStatus {
            id: id.clone(),
            metadata: cfg.metadata,
            state: cri::ContainerState::ContainerCreated as i32,
            created_at: now_nanos(),
            image: Some(cri::ImageSpec {
                image: image
                    .repo_tags
                    .first()
                    .cloned()
                    .unwrap_or_else(|| wanted.clone()),
                user_specified_image: cfg
                    .image
                    .as_ref()
                    .map(|i| i.user_specified_image.clone())
                    .unwrap_or_default(),
                ..Default::default()
            }),
            image_ref: image
                .repo_digests
                .first()
                .cloned()
                .unwrap_or(image.id.clone()),
            image_id: image.id.clone(),
            labels: cfg.labels,
            annotations: cfg.annotations,
            mounts: cfg.mounts,
            log_path: if log_dir.is_empty() || cfg.log_path.is_empty() {
                String::new()
            } else {
                format!("{log_dir}/{}", cfg.log_path)
            },
            resources: cfg
                .linux
                .and_then(|l| l.resources)
                .map(|r| cri::ContainerResources {
                    linux: Some(r),
                    ..Default::default()
                }),
            ..Default::default()
        };
        let planned = if init { Some((0, 0)) } else { sandbox.exit };
        s.containers.insert(
            id.clone(),
            Container {
                sandbox_id: req.pod_sandbox_id,
                status,
                planned,
                exit: None,
            },
        );
        Ok(cri::CreateContainerResponse { container_id: id })
    }

    async fn start_container(
        &self,
        req: cri::StartContainerRequest,
    ) -> R<cri::StartContainerResponse> {
        let now = now_nanos();
        let mut s = self.state.lock();
        let c = s
            .containers
            .get_mut(&req.container_id)
            .ok_or_else(|| not_found("container", &req.container_id))?;
        if c.status.state != cri::ContainerState::ContainerCreated as i32 {
            let state = cri::ContainerState::try_from(c.status.state)
                .map(|s| s.as_str_name())
                .unwrap_or("CONTAINER_UNKNOWN");
            return Err(Status::failed_precondition(format!(
                "container {:?} is in {state} state",
                req.container_id
            )));
        }
        c.status.state = cri::ContainerState::ContainerRunning as i32;
        c.status.started_at = now;
        if let Some((after, code)) = c.planned {
            c.exit = Some(Exit {
                at: now.saturating_add(after),
                code,
            });
            s.pending_exits += 1;
        }
        s.settle(now);
        Ok(cri::StartContainerResponse {})
    }

    async fn stop_container(
        &self,
        req: cri::StopContainerRequest,
    ) -> R<cri::StopContainerResponse> {
        let now = now_nanos();
        let mut s = self.state.lock();
        s.settle(now);
        let c = s
            .containers
            .get_mut(&req.container_id)
            .ok_or_else(|| not_found("container", &req.container_id))?;
        let mut cleared = false;
        if c.status.state == cri::ContainerState::ContainerRunning as i32 {
            // Terminated by SIGTERM, or SIGKILL when no grace is given.
            finish(&mut c.status, if req.timeout > 0 { 143 } else { 137 }, now);
            cleared = c.exit.take().is_some();
        }
        if cleared {
            s.pending_exits = s.pending_exits.saturating_sub(1);
        }
        Ok(cri::StopContainerResponse {})
    }

    async fn remove_container(
        &self,
        req: cri::RemoveContainerRequest,
    ) -> R<cri::RemoveContainerResponse> {
        let mut s = self.state.lock();
        if let Some(c) = s.containers.remove(&req.container_id) {
            if c.exit.is_some() {
                s.pending_exits = s.pending_exits.saturating_sub(1);
            }
        }
        Ok(cri::RemoveContainerResponse {})
    }

    async fn list_containers(
        &self,
        req: cri::ListContainersRequest,
    ) -> R<cri::ListContainersResponse> {
        let f = req.filter.unwrap_or_default();
        let mut s = self.state.lock();
        s.settle(now_nanos());
        let containers = s
            .containers
            .values()
            .filter(|c| id_matches(&c.status.id, &f.id))
            .filter(|c| f.pod_sandbox_id.is_empty() || c.sandbox_id == f.pod_sandbox_id)
            .filter(|c| f.state.as_ref().is_none_or(|v| v.state == c.status.state))
            .filter(|c| matches(&c.status.labels, &f.label_selector))
            .map(|c| cri::Container {
                id: c.status.id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: c.status.metadata.clone(),
                image: c.status.image.clone(),
                image_ref: c.status.image_ref.clone(),
                state: c.status.state,
                created_at: c.status.created_at,
                labels: c.status.labels.clone(),
                annotations: c.status.annotations.clone(),
                image_id: c.status.image_id.clone(),
            })
            .collect();
        Ok(cri::ListContainersResponse { containers })
    }

    async fn container_status(
        &self,
        req: cri::ContainerStatusRequest,
    ) -> R<cri::ContainerStatusResponse> {
        let mut s = self.state.lock();
        s.settle(now_nanos());
        let c = s
            .containers
            .get(&req.container_id)
            .ok_or_else(|| not_found("container", &req.container_id))?;
        Ok(cri::ContainerStatusResponse {
            status: Some(c.status.clone()),
            ..Default::default()
        })
    }

    async fn update_container_resources(
        &self,
        req: cri::UpdateContainerResourcesRequest,
    ) -> R<cri::UpdateContainerResourcesResponse> {
        let mut s = self.state.lock();
        let c = s
            .containers
            .get_mut(&req.container_id)
            .ok_or_else(|| not_found("container", &req.container_id))?;
        if let Some(linux) = req.linux {
            c.status.resources = Some(cri::ContainerResources {
                linux: Some(linux),
                ..Default::default()
            });
        }
        Ok(cri::UpdateContainerResourcesResponse {})
    }

    async fn reopen_container_log(
        &self,
        req: cri::ReopenContainerLogRequest,
    ) -> R<cri::ReopenContainerLogResponse> {
        let s = self.state.lock();
        match s.containers.get(&req.container_id) {
            Some(c) if c.status.state == cri::ContainerState::ContainerRunning as i32 => {
                Ok(cri::ReopenContainerLogResponse {})
            }
            Some(_) => Err(Status::failed_precondition("container is not running")),
            None => Err(not_found("container", &req.container_id)),
        }
    }

    /// Commands "run" and succeed without output (exec probes pass).
    async fn exec_sync(&self, req: cri::ExecSyncRequest) -> R<cri::ExecSyncResponse> {
        let mut s = self.state.lock();
        s.settle(now_nanos());
        match s.containers.get(&req.container_id) {
            Some(c) if c.status.state == cri::ContainerState::ContainerRunning as i32 => {
                Ok(cri::ExecSyncResponse::default())
            }
            Some(_) => Err(Status::failed_precondition(format!(
                "container {:?} is not running",
                req.container_id
            ))),
            None => Err(not_found("container", &req.container_id)),
        }
    }

    async fn exec(&self, _: cri::ExecRequest) -> R<cri::ExecResponse> {
        Err(unsupported("exec"))
    }

    async fn attach(&self, _: cri::AttachRequest) -> R<cri::AttachResponse> {
        Err(unsupported("attach"))
    }

    async fn port_forward(&self, _: cri::PortForwardRequest) -> R<cri::PortForwardResponse> {
        Err(unsupported("port-forward"))
    }

    async fn container_stats(
        &self,
        req: cri::ContainerStatsRequest,
    ) -> R<cri::ContainerStatsResponse> {
        let s = self.state.lock();
        let c = s
            .containers
            .get(&req.container_id)
            .ok_or_else(|| not_found("container", &req.container_id))?;
        Ok(cri::ContainerStatsResponse {
            stats: Some(stats(&s, c)),
        })
    }

    async fn list_container_stats(
        &self,
        req: cri::ListContainerStatsRequest,
    ) -> R<cri::ListContainerStatsResponse> {
        let f = req.filter.unwrap_or_default();
        let s = self.state.lock();
        let stats = s
            .containers
            .values()
            .filter(|c| c.status.state == cri::ContainerState::ContainerRunning as i32)
            .filter(|c| id_matches(&c.status.id, &f.id))
            .filter(|c| f.pod_sandbox_id.is_empty() || c.sandbox_id == f.pod_sandbox_id)
            .filter(|c| matches(&c.status.labels, &f.label_selector))
            .map(|c| stats(&s, c))
            .collect();
        Ok(cri::ListContainerStatsResponse { stats })
    }

    async fn pod_sandbox_stats(
        &self,
        req: cri::PodSandboxStatsRequest,
    ) -> R<cri::PodSandboxStatsResponse> {
        let s = self.state.lock();
        let sb = s
            .sandboxes
            .get(&req.pod_sandbox_id)
            .ok_or_else(|| not_found("sandbox", &req.pod_sandbox_id))?;
        Ok(cri::PodSandboxStatsResponse {
            stats: Some(sandbox_stats(&sb.status)),
        })
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: cri::ListPodSandboxStatsRequest,
    ) -> R<cri::ListPodSandboxStatsResponse> {
        let f = req.filter.unwrap_or_default();
        let s = self.state.lock();
        let stats = s
            .sandboxes
            .values()
            .map(|sb| &sb.status)
            .filter(|st| st.state == cri::PodSandboxState::SandboxReady as i32)
            .filter(|st| id_matches(&st.id, &f.id))
            .filter(|st| matches(&st.labels, &f.label_selector))
            .map(sandbox_stats)
            .collect();
        Ok(cri::ListPodSandboxStatsResponse { stats })
    }

    /// The kubelet hands over the node's pod CIDRs; pods get their addresses from them.
    async fn update_runtime_config(
        &self,
        req: cri::UpdateRuntimeConfigRequest,
    ) -> R<cri::UpdateRuntimeConfigResponse> {
        let cidrs = req
            .runtime_config
            .and_then(|c| c.network_config)
            .map(|n| n.pod_cidr)
            .unwrap_or_default();
        let mut parsed = Vec::new();
        for text in cidrs.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let cidr = Cidr::parse(text)
                .ok_or_else(|| Status::invalid_argument(format!("invalid pod CIDR {text:?}")))?;
            parsed.push(cidr);
        }
        let mut s = self.state.lock();
        let current: Vec<Cidr> = s.pools.iter().map(|p| p.cidr).collect();
        if !parsed.is_empty() && parsed != current {
            // Addresses already given stay with their pods; new ones come from the new ranges.
            s.pools = parsed.into_iter().map(Pool::new).collect();
            let in_use: Vec<Option<cri::PodSandboxNetworkStatus>> = s
                .sandboxes
                .values()
                .filter(|sb| sb.status.state == cri::PodSandboxState::SandboxReady as i32)
                .map(|sb| sb.status.network.clone())
                .collect();
            for network in in_use.iter().flatten() {
                let ips = std::iter::once(network.ip.as_str())
                    .chain(network.additional_ips.iter().map(|i| i.ip.as_str()));
                for ip in ips.filter_map(|t| t.parse::<IpAddr>().ok()) {
                    for pool in &mut s.pools {
                        if let Some(n) = pool.offset_of(&ip) {
                            pool.used.insert(n);
                        }
                    }
                }
            }
        }
        Ok(cri::UpdateRuntimeConfigResponse {})
    }

    async fn status(&self, _: cri::StatusRequest) -> R<cri::StatusResponse> {
        let condition = |t: &str| cri::RuntimeCondition {
            r#type: t.into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        };
        Ok(cri::StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![condition("RuntimeReady"), condition("NetworkReady")],
            }),
            ..Default::default()
        })
    }

    async fn list_images(&self, req: cri::ListImagesRequest) -> R<cri::ListImagesResponse> {
        let s = self.state.lock();
        let want = req
            .filter
            .and_then(|f| f.image)
            .map(|i| i.image)
            .filter(|i| !i.is_empty());
        let images = match want {
            Some(w) => s.find_image(&w).cloned().into_iter().collect(),
            None => s.images.values().cloned().collect(),
        };
        Ok(cri::ListImagesResponse { images })
    }

    async fn image_status(&self, req: cri::ImageStatusRequest) -> R<cri::ImageStatusResponse> {
        let want = req.image.map(|i| i.image).unwrap_or_default();
        let s = self.state.lock();
        Ok(cri::ImageStatusResponse {
            image: s.find_image(&want).cloned(),
            ..Default::default()
        })
    }

    /// Every image is there at once.
    async fn pull_image(&self, req: cri::PullImageRequest) -> R<cri::PullImageResponse> {
        let want = req.image.map(|i| i.image).unwrap_or_default();
        if want.trim().is_empty() {
            return Err(Status::invalid_argument("image reference is required"));
        }
        let mut s = self.state.lock();
        if let Some(i) = s.find_image(&want) {
            return Ok(cri::PullImageResponse {
                image_ref: i.id.clone(),
            });
        }
        let image = image_for(&want);
        let id = image.id.clone();
        match s.images.get_mut(&id) {
            // Another name of an image already held (a tag and a digest of it).
            Some(held) => {
                for t in image.repo_tags {
                    if !held.repo_tags.contains(&t) {
                        held.repo_tags.push(t);
                    }
                }
            }
            None => {
                s.images.insert(id.clone(), image);
            }
        }
        Ok(cri::PullImageResponse { image_ref: id })
    }

    async fn remove_image(&self, req: cri::RemoveImageRequest) -> R<cri::RemoveImageResponse> {
        let want = req.image.map(|i| i.image).unwrap_or_default();
        let mut s = self.state.lock();
        if let Some(id) = s.find_image(&want).map(|i| i.id.clone()) {
            s.images.remove(&id);
        }
        Ok(cri::RemoveImageResponse {})
    }

    async fn image_fs_info(&self, _: cri::ImageFsInfoRequest) -> R<cri::ImageFsInfoResponse> {
        let s = self.state.lock();
        let used: u64 = s.images.values().map(|i| i.size).sum();
        let usage = cri::FilesystemUsage {
            timestamp: now_nanos(),
            fs_id: Some(cri::FilesystemIdentifier {
                mountpoint: "/var/lib/fake-runtime".into(),
            }),
            used_bytes: Some(cri::UInt64Value { value: used }),
            inodes_used: Some(cri::UInt64Value {
                value: s.images.len() as u64,
            }),
        };
        Ok(cri::ImageFsInfoResponse {
            image_filesystems: vec![usage.clone()],
            container_filesystems: vec![usage],
        })
    }
}

/// A container's stats: the usage its pod's annotations ask for while it runs (CPU time
/// accumulated at that rate since it started), zero otherwise.
fn stats(s: &State, c: &Container) -> cri::ContainerStats {
    let now = now_nanos();
    let running = c.status.state == cri::ContainerState::ContainerRunning as i32;
    let usage = s
        .sandboxes
        .get(&c.sandbox_id)
        .filter(|_| running)
        .map(|sb| sb.usage)
        .unwrap_or_default();
    let ran_ns = u128::try_from(now.saturating_sub(c.status.started_at)).unwrap_or(0);
    let core_ns = (u128::from(usage.nano_cores) * ran_ns / 1_000_000_000) as u64;
    cri::ContainerStats {
        attributes: Some(cri::ContainerAttributes {
            id: c.status.id.clone(),
            metadata: c.status.metadata.clone(),
            labels: c.status.labels.clone(),
            annotations: c.status.annotations.clone(),
        }),
        cpu: Some(cri::CpuUsage {
            timestamp: now,
            usage_core_nano_seconds: Some(cri::UInt64Value { value: core_ns }),
            usage_nano_cores: Some(cri::UInt64Value {
                value: usage.nano_cores,
            }),
        }),
        memory: Some(cri::MemoryUsage {
            timestamp: now,
            working_set_bytes: Some(cri::UInt64Value {
                value: usage.memory_bytes,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn sandbox_stats(st: &cri::PodSandboxStatus) -> cri::PodSandboxStats {
    cri::PodSandboxStats {
        attributes: Some(cri::PodSandboxAttributes {
            id: st.id.clone(),
            metadata: st.metadata.clone(),
            labels: st.labels.clone(),
            annotations: st.annotations.clone(),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::runtime::LABEL_CONTAINER_NAME;

    fn sandbox_config(uid: &str, annotations: &[(&str, &str)]) -> cri::PodSandboxConfig {
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: format!("pod-{uid}"),
                uid: uid.into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            labels: HashMap::from([
                (LABEL_POD_UID.to_string(), uid.to_string()),
                (LABEL_POD_NAME.to_string(), format!("pod-{uid}")),
                (LABEL_POD_NAMESPACE.to_string(), "default".to_string()),
            ]),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            log_directory: format!("/logs/{uid}"),
            ..Default::default()
        }
    }

    async fn run_sandbox(rt: &FakeRuntime, uid: &str, annotations: &[(&str, &str)]) -> String {
        rt.run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sandbox_config(uid, annotations)),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .pod_sandbox_id
    }

    async fn sandbox_ip(rt: &FakeRuntime, id: &str) -> String {
        rt.pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: false,
        })
        .await
        .unwrap()
        .status
        .unwrap()
        .network
        .unwrap()
        .ip
    }

    async fn create(rt: &FakeRuntime, sandbox: &str, uid: &str, name: &str, image: &str) -> String {
        let cfg = sandbox_config(uid, &[]);
        let mut labels = cfg.labels.clone();
        labels.insert(LABEL_CONTAINER_NAME.into(), name.into());
        rt.create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sandbox.into(),
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: name.into(),
                    attempt: 0,
                }),
                image: Some(cri::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                labels,
                log_path: format!("{name}/0.log"),
                ..Default::default()
            }),
            sandbox_config: Some(cfg),
        })
        .await
        .unwrap()
        .container_id
    }

    async fn status_of(rt: &FakeRuntime, id: &str) -> cri::ContainerStatus {
        rt.container_status(cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        })
        .await
        .unwrap()
        .status
        .unwrap()
    }

    async fn set_cidr(rt: &FakeRuntime, cidr: &str) {
        rt.update_runtime_config(cri::UpdateRuntimeConfigRequest {
            runtime_config: Some(cri::RuntimeConfig {
                network_config: Some(cri::NetworkConfig {
                    pod_cidr: cidr.into(),
                }),
            }),
        })
        .await
        .unwrap();
    }

    #[test]
    fn cidrs_parse_and_skip_reserved_addresses() {
        let c = Cidr::parse("10.42.3.7/24").unwrap();
        assert_eq!(c.base, "10.42.3.0".parse::<IpAddr>().unwrap());
        assert_eq!(c.size(), 256);
        assert!(!c.assignable(0) && !c.assignable(1) && !c.assignable(255));
        assert!(c.assignable(2) && c.assignable(254));
        assert_eq!(c.addr(5), "10.42.3.5".parse::<IpAddr>().unwrap());
        let v6 = Cidr::parse("fd00:42::/64").unwrap();
        assert_eq!(v6.addr(2), "fd00:42::2".parse::<IpAddr>().unwrap());
        assert!(v6.assignable(u128::from(u64::MAX)));
        assert!(Cidr::parse("10.0.0.0/33").is_none());
        assert!(Cidr::parse("10.0.0.0").is_none());
        assert!(Cidr::parse("nonsense/8").is_none());
        assert_eq!(Cidr::parse("0.0.0.0/0").unwrap().size(), 1 << 32);
        assert_eq!(Cidr::parse("::/0").unwrap().size(), u128::MAX);
    }

    #[test]
    fn a_pool_never_repeats_an_address_in_use_and_runs_out() {
        let mut p = Pool::new(Cidr::parse("192.0.2.0/29").unwrap());
        let got: Vec<IpAddr> = std::iter::from_fn(|| p.allocate()).collect();
        let want: Vec<IpAddr> = (2..=6)
            .map(|n| format!("192.0.2.{n}").parse().unwrap())
            .collect();
        assert_eq!(got, want);
        p.release(&"192.0.2.4".parse().unwrap());
        assert_eq!(p.allocate(), Some("192.0.2.4".parse().unwrap()));
        assert_eq!(p.allocate(), None);
        // An address of another range is not taken for one of this.
        p.release(&"192.0.3.4".parse().unwrap());
        assert_eq!(p.allocate(), None);
    }

    #[test]
    fn images_are_normalized_as_docker_references() {
        assert_eq!(normalize_image("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(
            normalize_image("nginx:1.25"),
            "docker.io/library/nginx:1.25"
        );
        assert_eq!(normalize_image("user/app"), "docker.io/user/app:latest");
        assert_eq!(
            normalize_image("registry.k8s.io/pause:3.10"),
            "registry.k8s.io/pause:3.10"
        );
        assert_eq!(
            normalize_image("localhost:5000/app"),
            "localhost:5000/app:latest"
        );
        assert_eq!(normalize_image("localhost/app"), "localhost/app:latest");
        assert_eq!(
            normalize_image("quay.io/a/b@sha256:abc"),
            "quay.io/a/b@sha256:abc"
        );
        let i = image_for("nginx:1.25");
        assert_eq!(
            i.repo_tags,
            vec!["docker.io/library/nginx:1.25".to_string()]
        );
        assert!(i.repo_digests[0].starts_with("docker.io/library/nginx@sha256:"));
        assert!(i.id.starts_with("sha256:") && i.id.len() == 71);
    }

    #[tokio::test]
    async fn pods_get_addresses_from_the_pod_cidr_and_give_them_back() {
        let rt = FakeRuntime::new();
        // Before the kubelet hands over a CIDR: containerd's default network.
        let early = run_sandbox(&rt, "u0", &[]).await;
        assert_eq!(sandbox_ip(&rt, &early).await, "10.88.0.2");
        set_cidr(&rt, "10.42.7.0/24").await;
        let a = run_sandbox(&rt, "u1", &[]).await;
        let b = run_sandbox(&rt, "u2", &[]).await;
        assert_eq!(sandbox_ip(&rt, &a).await, "10.42.7.2");
        assert_eq!(sandbox_ip(&rt, &b).await, "10.42.7.3");
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: a.clone(),
        })
        .await
        .unwrap();
        let st = rt
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: a.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .status
            .unwrap();
        assert_eq!(st.state, cri::PodSandboxState::SandboxNotready as i32);
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: a.clone(),
        })
        .await
        .unwrap();
        assert!(rt
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: a,
                verbose: false,
            })
            .await
            .is_err_and(|e| e.code() == capstan_cri::Code::NotFound));
        // Dual stack: an address of each family.
        set_cidr(&rt, "10.42.8.0/24,fd00:8::/64").await;
        let c = run_sandbox(&rt, "u3", &[]).await;
        let st = rt
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: c,
                verbose: false,
            })
            .await
            .unwrap()
            .status
            .unwrap();
        let net = st.network.unwrap();
        assert_eq!(net.ip, "10.42.8.2");
        assert_eq!(net.additional_ips[0].ip, "fd00:8::2");
        assert!(rt
            .update_runtime_config(cri::UpdateRuntimeConfigRequest {
                runtime_config: Some(cri::RuntimeConfig {
                    network_config: Some(cri::NetworkConfig {
                        pod_cidr: "bogus".into(),
                    }),
                }),
            })
            .await
            .is_err());
    }

    #[tokio::test]
    async fn host_network_sandboxes_have_no_address() {
        let rt = FakeRuntime::new();
        let mut cfg = sandbox_config("h", &[]);
        cfg.linux = Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let id = rt
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(cfg),
                runtime_handler: String::new(),
            })
            .await
            .unwrap()
            .pod_sandbox_id;
        assert_eq!(sandbox_ip(&rt, &id).await, "");
    }

    #[tokio::test]
    async fn containers_run_until_stopped_and_are_listed_by_filter() {
        let rt = FakeRuntime::new();
        let sb = run_sandbox(&rt, "u1", &[]).await;
        let other = run_sandbox(&rt, "u2", &[]).await;
        let id = create(&rt, &sb, "u1", "app", "nginx").await;
        create(&rt, &other, "u2", "app", "nginx").await;
        let st = status_of(&rt, &id).await;
        assert_eq!(st.state, cri::ContainerState::ContainerCreated as i32);
        assert_eq!(st.log_path, "/logs/u1/app/0.log");
        rt.start_container(cri::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
        // Starting twice is refused, as containerd does.
        assert!(rt
            .start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .is_err());
        let st = status_of(&rt, &id).await;
        assert_eq!(st.state, cri::ContainerState::ContainerRunning as i32);
        assert!(st.started_at > 0);
        let listed = rt
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    label_selector: HashMap::from([(LABEL_POD_UID.into(), "u1".into())]),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .containers;
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, id);
        assert_eq!(listed[0].pod_sandbox_id, sb);
        let running = rt
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    state: Some(cri::ContainerStateValue {
                        state: cri::ContainerState::ContainerRunning as i32,
                    }),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .containers;
        assert_eq!(running.len(), 1);
        let ok = rt
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["true".into()],
                timeout: 1,
            })
            .await
            .unwrap();
        assert_eq!(ok.exit_code, 0);
        rt.stop_container(cri::StopContainerRequest {
            container_id: id.clone(),
            timeout: 30,
        })
        .await
        .unwrap();
        let st = status_of(&rt, &id).await;
        assert_eq!(st.state, cri::ContainerState::ContainerExited as i32);
        assert_eq!((st.exit_code, st.reason.as_str()), (143, "Error"));
        assert!(st.finished_at >= st.started_at);
        rt.remove_container(cri::RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
        assert!(rt
            .container_status(cri::ContainerStatusRequest {
                container_id: id,
                verbose: false,
            })
            .await
            .is_err());
        // Removing the sandbox removes its containers.
        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: other,
        })
        .await
        .unwrap();
        assert_eq!(rt.counts(), (1, 0));
    }

    #[tokio::test]
    async fn the_usage_annotations_are_what_running_containers_report() {
        let rt = FakeRuntime::new();
        let busy = run_sandbox(
            &rt,
            "u",
            &[(CPU_MILLICORES, "250"), (MEMORY_BYTES, "1048576")],
        )
        .await;
        let idle = run_sandbox(&rt, "i", &[(CPU_MILLICORES, "lots")]).await;
        let b = create(&rt, &busy, "u", "main", "busybox").await;
        let i = create(&rt, &idle, "i", "main", "busybox").await;
        // Created, not yet running: nothing to report.
        let st = rt
            .container_stats(cri::ContainerStatsRequest {
                container_id: b.clone(),
            })
            .await
            .unwrap()
            .stats
            .unwrap();
        assert_eq!(st.cpu.unwrap().usage_nano_cores.unwrap().value, 0);
        for id in [&b, &i] {
            rt.start_container(cri::StartContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let all = rt
            .list_container_stats(cri::ListContainerStatsRequest::default())
            .await
            .unwrap()
            .stats;
        let of = |id: &str| {
            all.iter()
                .find(|s| s.attributes.as_ref().unwrap().id == id)
                .unwrap()
                .clone()
        };
        let cpu = of(&b).cpu.unwrap();
        assert_eq!(cpu.usage_nano_cores.unwrap().value, 250_000_000);
        // 250m for at least 50 ms: at least 12.5 ms of CPU time, and not more than a second's.
        let core = cpu.usage_core_nano_seconds.unwrap().value;
        assert!((12_500_000..250_000_000).contains(&core), "{core}");
        assert_eq!(
            of(&b).memory.unwrap().working_set_bytes.unwrap().value,
            1_048_576
        );
        // An unparsable figure is zero.
        assert_eq!(of(&i).cpu.unwrap().usage_nano_cores.unwrap().value, 0);
    }

    #[tokio::test]
    async fn the_exit_annotations_end_containers() {
        let rt = FakeRuntime::new();
        let quick = run_sandbox(&rt, "q", &[(EXIT_CODE, "3")]).await;
        let slow = run_sandbox(&rt, "s", &[(EXIT_CODE, "0"), (RUN_SECONDS, "3600")]).await;
        let bad = run_sandbox(&rt, "b", &[(EXIT_CODE, "x")]).await;
        let q = create(&rt, &quick, "q", "main", "busybox").await;
        let s = create(&rt, &slow, "s", "main", "busybox").await;
        let b = create(&rt, &bad, "b", "main", "busybox").await;
        for id in [&q, &s, &b] {
            rt.start_container(cri::StartContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .unwrap();
        }
        let st = status_of(&rt, &q).await;
        assert_eq!(st.state, cri::ContainerState::ContainerExited as i32);
        assert_eq!((st.exit_code, st.reason.as_str()), (3, "Error"));
        assert_eq!(
            status_of(&rt, &s).await.state,
            cri::ContainerState::ContainerRunning as i32
        );
        assert_eq!(
            status_of(&rt, &b).await.state,
            cri::ContainerState::ContainerRunning as i32
        );
        // Stopping the sandbox kills what runs.
        rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: slow,
        })
        .await
        .unwrap();
        let st = status_of(&rt, &s).await;
        assert_eq!(
            (st.state, st.exit_code),
            (cri::ContainerState::ContainerExited as i32, 137)
        );
        assert_eq!(rt.state.lock().pending_exits, 0);
        // A container of a stopped sandbox cannot be made.
        let cfg = sandbox_config("s", &[]);
        let stopped = rt.list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                state: Some(cri::PodSandboxStateValue {
                    state: cri::PodSandboxState::SandboxNotready as i32,
                }),
                ..Default::default()
            }),
        });
        let stopped = stopped.await.unwrap().items;
        assert_eq!(stopped.len(), 1);
        assert!(rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: stopped[0].id.clone(),
                config: Some(cri::ContainerConfig::default()),
                sandbox_config: Some(cfg),
            })
            .await
            .is_err());
    }

    #[tokio::test]
    async fn init_containers_finish_at_once_and_sidecars_keep_running() {
        let pods: Arc<Informer<Pod>> = Arc::new(Informer::new());
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pod-u1", "namespace": "default", "uid": "u1"},
            "spec": {
                "initContainers": [
                    {"name": "setup", "image": "busybox"},
                    {"name": "sidecar", "image": "busybox", "restartPolicy": "Always"}
                ],
                "containers": [{"name": "app", "image": "nginx"}]
            }
        }))
        .unwrap();
        use futures::StreamExt;
        use kube::runtime::watcher::Event;
        let events = futures::stream::iter([
            Ok(Event::Init),
            Ok(Event::InitApply(pod)),
            Ok(Event::InitDone),
        ])
        .chain(futures::stream::pending());
        tokio::spawn(pods.clone().run(events, None));
        pods.wait_synced().await;
        let rt = FakeRuntime::new();
        rt.watch_pods(pods);
        let sb = run_sandbox(&rt, "u1", &[]).await;
        let mut ids = Vec::new();
        for name in ["setup", "sidecar", "app"] {
            let id = create(&rt, &sb, "u1", name, "busybox").await;
            rt.start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap();
            ids.push(id);
        }
        let setup = status_of(&rt, &ids[0]).await;
        assert_eq!(
            (setup.state, setup.exit_code, setup.reason.as_str()),
            (cri::ContainerState::ContainerExited as i32, 0, "Completed")
        );
        for id in &ids[1..] {
            assert_eq!(
                status_of(&rt, id).await.state,
                cri::ContainerState::ContainerRunning as i32
            );
        }
    }

    #[tokio::test]
    async fn images_are_pulled_at_once() {
        let rt = FakeRuntime::new();
        let spec = |i: &str| {
            Some(cri::ImageSpec {
                image: i.into(),
                ..Default::default()
            })
        };
        let absent = rt
            .image_status(cri::ImageStatusRequest {
                image: spec("nginx"),
                verbose: false,
            })
            .await
            .unwrap();
        assert!(absent.image.is_none());
        let pulled = rt
            .pull_image(cri::PullImageRequest {
                image: spec("nginx"),
                ..Default::default()
            })
            .await
            .unwrap();
        for name in [
            "nginx",
            "docker.io/library/nginx:latest",
            pulled.image_ref.as_str(),
        ] {
            let st = rt
                .image_status(cri::ImageStatusRequest {
                    image: spec(name),
                    verbose: false,
                })
                .await
                .unwrap();
            assert_eq!(
                st.image.map(|i| i.id),
                Some(pulled.image_ref.clone()),
                "{name}"
            );
        }
        assert_eq!(
            rt.list_images(cri::ListImagesRequest { filter: None })
                .await
                .unwrap()
                .images
                .len(),
            1
        );
        // A container of it reports the tag and the digested reference.
        let sb = run_sandbox(&rt, "u", &[]).await;
        let c = create(&rt, &sb, "u", "web", &pulled.image_ref).await;
        let st = status_of(&rt, &c).await;
        assert_eq!(st.image.unwrap().image, "docker.io/library/nginx:latest");
        assert!(st.image_ref.starts_with("docker.io/library/nginx@sha256:"));
        rt.remove_image(cri::RemoveImageRequest {
            image: spec("nginx"),
        })
        .await
        .unwrap();
        assert!(rt
            .list_images(cri::ListImagesRequest { filter: None })
            .await
            .unwrap()
            .images
            .is_empty());
        assert!(rt
            .pull_image(cri::PullImageRequest {
                image: spec(" "),
                ..Default::default()
            })
            .await
            .is_err());
    }

    #[tokio::test]
    async fn the_runtime_reports_itself_ready() {
        let rt = FakeRuntime::new();
        let v = rt.version(cri::VersionRequest::default()).await.unwrap();
        assert_eq!(
            crate::node::status::runtime_version_string(&v),
            "fake://1.0.0"
        );
        let st = rt
            .status(cri::StatusRequest { verbose: false })
            .await
            .unwrap();
        assert!(crate::node::status::RuntimeHealth::from_status(&st).ready());
    }

    #[test]
    fn hollow_machines_are_stable_per_name() {
        let ip = default_node_ip("hollow-node-1");
        let a = Hollow::new("hollow-node-1", 32, 256 << 30, 100 << 30, ip);
        let b = Hollow::new("hollow-node-1", 32, 256 << 30, 100 << 30, ip);
        let c = Hollow::new("hollow-node-2", 32, 256 << 30, 100 << 30, ip);
        assert_eq!(a.machine, b.machine);
        assert_ne!(a.machine.machine_id, c.machine.machine_id);
        assert_ne!(a.machine.boot_id, c.machine.boot_id);
        assert_eq!(a.machine.machine_id.len(), 32);
        assert_eq!(a.machine.system_uuid.len(), 36);
        assert_eq!(
            (a.machine.num_cpus, a.machine.memory_capacity),
            (32, 256 << 30)
        );
        let net = Cidr::parse("198.18.0.0/15").unwrap();
        for name in ["a", "b", "hollow-node-999"] {
            let ip = default_node_ip(name);
            assert_eq!(from_offset(ip, 0, 15), net.base, "{ip}");
            assert_ne!(ip, net.base);
        }
        assert_eq!(parse_bytes("256Gi"), Some(256 << 30));
        assert_eq!(parse_bytes("-1"), None);
    }
}
