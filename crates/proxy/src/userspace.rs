//! The userspace proxy mode: kube-proxy's original design (Kubernetes ≤ 1.25,
//! pkg/proxy/userspace). Every service port gets a socket of its own on an ephemeral port of
//! the node (TCP or UDP, listening on every address), and iptables NAT "portal" rules send
//! traffic for the service's addresses to it:
//!
//! - `KUBE-PORTALS-CONTAINER` (jumped to first from nat `PREROUTING`, so traffic from pods and
//!   other hosts): cluster IP, external IPs and load balancer IPs → `REDIRECT --to-ports P`.
//! - `KUBE-PORTALS-HOST` (nat `OUTPUT`, traffic from the node itself): the same addresses →
//!   `DNAT --to-destination NODE_IP:P` (REDIRECT of locally generated packets goes to
//!   127.0.0.1, whose replies come from the wrong address).
//! - `KUBE-NODEPORT-CONTAINER` / `KUBE-NODEPORT-HOST` (jumped to last, for packets to a local
//!   address): NodePorts, the same way; `KUBE-NODEPORT-NON-LOCAL` (filter `INPUT`) accepts new
//!   connections to the proxy ports against default-deny firewalls. The NodePort itself is held
//!   open by a socket so nothing else on the node takes it.
//!
//! The proxy picks an endpoint per TCP connection (per UDP client) in exact round-robin order
//! over the usable endpoints ([`crate::categorize`]), sticking to the endpoint a client got last
//! for sessionAffinity ClientIP until the timeout passes without traffic. Endpoint changes
//! apply to the next connection; connections already made carry on. A connection to a service
//! without endpoints is reset at once. A failed connect to an endpoint is retried on the next
//! one (250 ms, 500 ms, 1 s, 2 s), as kube-proxy does. A UDP client gets its own socket to its
//! endpoint, closed after the idle timeout (250 ms by default, kube-proxy's `--udp-timeout`).
//!
//! Beyond kube-proxy's userspace mode, which predates traffic policies: when a service's
//! internal and external policies differ (internalTrafficPolicy or externalTrafficPolicy
//! Local on a service reachable from outside), external addresses and NodePorts get a second
//! socket that picks among the endpoints external traffic may use.
//!
//! Not done: SCTP (kube-proxy's userspace mode never had it), loadBalancerSourceRanges,
//! health check node ports, conntrack flushing for UDP.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use parking_lot::Mutex;
use rand::seq::SliceRandom;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinSet;

use crate::{
    categorize, usable_endpoints, Endpoint, NodeInfo, Protocol, Proxier, ServicePort,
    ServicePortName, Snapshot,
};

/// nat chain for traffic arriving at the node (PREROUTING).
pub const CONTAINER_PORTAL_CHAIN: &str = "KUBE-PORTALS-CONTAINER";
/// nat chain for traffic from the node itself (OUTPUT).
pub const HOST_PORTAL_CHAIN: &str = "KUBE-PORTALS-HOST";
/// nat chain for NodePorts of traffic arriving at the node.
pub const CONTAINER_NODEPORT_CHAIN: &str = "KUBE-NODEPORT-CONTAINER";
/// nat chain for NodePorts of traffic from the node.
pub const HOST_NODEPORT_CHAIN: &str = "KUBE-NODEPORT-HOST";
/// filter chain accepting new connections to proxy ports that serve NodePorts.
pub const NON_LOCAL_NODEPORT_CHAIN: &str = "KUBE-NODEPORT-NON-LOCAL";

const PORTALS_COMMENT: &str = "handle ClusterIPs; NOTE: this must be before the NodePort rules";
const NODEPORTS_COMMENT: &str =
    "handle service NodePorts; NOTE: this must be the last rule in the chain";
const NON_LOCAL_COMMENT: &str = "Ensure that non-local NodePort traffic can flow";

/// How long each successive connect to an endpoint may take before the next one is tried.
const DIAL_TIMEOUTS: [Duration; 4] = [
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
];

/// Rules are rewritten and the jumps to them checked at least this often, even when nothing
/// changed (someone may have flushed them).
const FULL_RESYNC: Duration = Duration::from_secs(25);

/// kube-proxy's default `--udp-timeout`.
pub const DEFAULT_UDP_IDLE_TIMEOUT: Duration = Duration::from_millis(250);

// ---------------------------------------------------------------------------------------------
// Choosing endpoints.

/// Round-robin over a service port's endpoints, with optional ClientIP affinity. Shared by the
/// proxier (which updates it) and the socket's tasks (which pick from it).
#[derive(Debug, Default)]
pub struct Balancer {
    /// The endpoints as last set, sorted: to tell whether an update changes them.
    sorted: Vec<SocketAddr>,
    /// The rotation order (shuffled once per change of the set, as kube-proxy does, so that
    /// proxies on many nodes do not all start with the same endpoint).
    order: Vec<SocketAddr>,
    next: usize,
    affinity: Option<Duration>,
    /// client IP → (endpoint, last used).
    sessions: HashMap<IpAddr, (SocketAddr, Instant)>,
}

impl Balancer {
    pub fn new() -> Balancer {
        Balancer::default()
    }

    /// The endpoints to choose from. A different set restarts the rotation and drops the
    /// sessions of endpoints no longer in it; the same set (in any order) changes nothing.
    pub fn set_endpoints(&mut self, mut endpoints: Vec<SocketAddr>) {
        endpoints.sort();
        endpoints.dedup();
        if endpoints == self.sorted {
            self.expire_sessions();
            return;
        }
        let mut order = endpoints.clone();
        order.shuffle(&mut rand::rng());
        self.sorted = endpoints;
        self.order = order;
        self.next = 0;
        let sorted = &self.sorted;
        self.sessions
            .retain(|_, (ep, _)| sorted.binary_search(ep).is_ok());
        self.expire_sessions();
    }

    /// sessionAffinity ClientIP with this timeout, or none. A change forgets every session.
    pub fn set_affinity(&mut self, timeout: Option<Duration>) {
        if self.affinity != timeout {
            self.affinity = timeout;
            self.sessions.clear();
        }
    }

    fn expire_sessions(&mut self) {
        match self.affinity {
            Some(ttl) => self.sessions.retain(|_, (_, used)| used.elapsed() < ttl),
            None => self.sessions.clear(),
        }
    }

    /// The endpoints in rotation order.
    pub fn order(&self) -> &[SocketAddr] {
        &self.order
    }

    /// The endpoint for a new connection from `client`: its session's endpoint while the
    /// session lasts (unless `reset`, after a failed connect), otherwise the next in turn.
    pub fn pick(&mut self, client: IpAddr, reset: bool) -> Option<SocketAddr> {
        if self.order.is_empty() {
            return None;
        }
        let now = Instant::now();
        if let (Some(ttl), false) = (self.affinity, reset) {
            if let Some((ep, used)) = self.sessions.get_mut(&client) {
                if now.duration_since(*used) < ttl {
                    *used = now;
                    return Some(*ep);
                }
            }
        }
        let ep = self.order[self.next % self.order.len()];
        self.next = (self.next + 1) % self.order.len();
        if self.affinity.is_some() {
            self.sessions.insert(client, (ep, now));
        }
        Some(ep)
    }
}

// ---------------------------------------------------------------------------------------------
// Sockets, in this network namespace or another one.

type Job = Box<dyn FnOnce() + Send>;

/// Makes sockets in one network namespace: a thread that entered it runs the socket calls
/// (a socket stays in the namespace it was made in, whichever thread uses it later).
struct NetnsThread {
    jobs: std::sync::mpsc::Sender<Job>,
}

impl NetnsThread {
    fn start(name: &str) -> anyhow::Result<NetnsThread> {
        let path = format!("/var/run/netns/{name}");
        let file = std::fs::File::open(&path)
            .with_context(|| format!("opening the network namespace {path}"))?;
        let (jobs, rx) = std::sync::mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<io::Result<()>>();
        std::thread::Builder::new()
            .name(format!("netns-{name}"))
            .spawn(move || {
                use std::os::fd::AsRawFd;
                // SAFETY: setns on a valid, open namespace file descriptor; it changes only
                // this thread's network namespace.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                let entered = if rc == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                };
                let ok = entered.is_ok();
                let _ = ready_tx.send(entered);
                if ok {
                    while let Ok(job) = rx.recv() {
                        job();
                    }
                }
            })
            .context("starting a thread for the network namespace")?;
        ready_rx
            .recv()
            .map_err(|_| anyhow!("the network namespace thread died"))?
            .with_context(|| format!("entering the network namespace {name}"))?;
        Ok(NetnsThread { jobs })
    }

    /// Run `f` in the namespace and wait for it (blocking).
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .map_err(|_| io::Error::other("the network namespace thread is gone"))?;
        rx.recv()
            .map_err(|_| io::Error::other("the network namespace thread is gone"))
    }

    /// Run `f` in the namespace and await it.
    async fn run_async<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .map_err(|_| io::Error::other("the network namespace thread is gone"))?;
        rx.await
            .map_err(|_| io::Error::other("the network namespace thread is gone"))
    }
}

/// Where the proxy's sockets are made.
#[derive(Clone, Default)]
struct Sockets {
    netns: Option<Arc<NetnsThread>>,
}

impl Sockets {
    fn make<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        match &self.netns {
            None => f(),
            Some(ns) => ns.run(f)?,
        }
    }

    fn tcp_listener(&self, addr: SocketAddr) -> io::Result<std::net::TcpListener> {
        let l = self.make(move || std::net::TcpListener::bind(addr))?;
        l.set_nonblocking(true)?;
        Ok(l)
    }

    fn udp_socket(&self, addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
        let s = self.make(move || std::net::UdpSocket::bind(addr))?;
        s.set_nonblocking(true)?;
        Ok(s)
    }

    /// A TCP connection to `addr`, made from the namespace.
    async fn connect(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        let Some(ns) = &self.netns else {
            return TcpStream::connect(addr).await;
        };
        let fd = ns
            .run_async(|| {
                // SAFETY: plain socket(2); the result is checked and owned right away.
                let fd = unsafe {
                    libc::socket(
                        libc::AF_INET,
                        libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                        0,
                    )
                };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: fd is a new descriptor that nothing else owns.
                Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
            })
            .await??;
        let socket = tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(fd));
        socket.connect(addr).await
    }

    /// A UDP socket connected to `addr`, made in the namespace.
    async fn udp_connect(&self, addr: SocketAddr) -> io::Result<UdpSocket> {
        let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
        let std = match &self.netns {
            None => std::net::UdpSocket::bind(any)?,
            Some(ns) => {
                ns.run_async(move || std::net::UdpSocket::bind(any))
                    .await??
            }
        };
        std.set_nonblocking(true)?;
        let socket = UdpSocket::from_std(std)?;
        socket.connect(addr).await?;
        Ok(socket)
    }
}

// ---------------------------------------------------------------------------------------------
// The proxy sockets.

/// One proxy socket of a service port: its port and the balancer its tasks pick from.
struct ProxySocket {
    port: u16,
    balancer: Arc<Mutex<Balancer>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ProxySocket {
    fn drop(&mut self) {
        // Stops accepting (TCP) or forwarding (UDP, with every client's socket); TCP
        // connections already made carry on.
        self.task.abort();
    }
}

impl ProxySocket {
    fn open(
        rt: &tokio::runtime::Handle,
        sockets: &Sockets,
        name: &ServicePortName,
        protocol: Protocol,
        udp_idle: Duration,
    ) -> anyhow::Result<ProxySocket> {
        let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
        let balancer = Arc::new(Mutex::new(Balancer::new()));
        let _guard = rt.enter();
        let (port, task) = match protocol {
            Protocol::Tcp => {
                let std = sockets
                    .tcp_listener(any)
                    .with_context(|| format!("opening a TCP proxy socket for {name}"))?;
                let listener = TcpListener::from_std(std)?;
                let port = listener.local_addr()?.port();
                let task = rt.spawn(serve_tcp(
                    listener,
                    balancer.clone(),
                    sockets.clone(),
                    name.clone(),
                ));
                (port, task)
            }
            Protocol::Udp => {
                let std = sockets
                    .udp_socket(any)
                    .with_context(|| format!("opening a UDP proxy socket for {name}"))?;
                let socket = UdpSocket::from_std(std)?;
                let port = socket.local_addr()?.port();
                let task = rt.spawn(serve_udp(
                    Arc::new(socket),
                    balancer.clone(),
                    sockets.clone(),
                    name.clone(),
                    udp_idle,
                ));
                (port, task)
            }
            Protocol::Sctp => return Err(anyhow!("{name}: the userspace proxy has no SCTP")),
        };
        tracing::debug!(service = %name, %port, protocol = protocol.as_str(), "proxying");
        Ok(ProxySocket {
            port,
            balancer,
            task,
        })
    }

    fn update(&self, endpoints: &[&Endpoint], affinity: Option<Duration>) {
        let mut b = self.balancer.lock();
        b.set_affinity(affinity);
        b.set_endpoints(
            endpoints
                .iter()
                .map(|e| SocketAddr::new(e.ip, e.port))
                .collect(),
        );
    }
}

async fn serve_tcp(
    listener: TcpListener,
    balancer: Arc<Mutex<Balancer>>,
    sockets: Sockets,
    name: ServicePortName,
) {
    loop {
        match listener.accept().await {
            Ok((client, peer)) => {
                tokio::spawn(proxy_tcp(
                    client,
                    peer,
                    balancer.clone(),
                    sockets.clone(),
                    name.clone(),
                ));
            }
            Err(e) => {
                // Out of descriptors or a transient error: wait a little rather than spin.
                tracing::warn!(service = %name, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn proxy_tcp(
    client: TcpStream,
    peer: SocketAddr,
    balancer: Arc<Mutex<Balancer>>,
    sockets: Sockets,
    name: ServicePortName,
) {
    let mut backend = None;
    for (attempt, timeout) in DIAL_TIMEOUTS.iter().enumerate() {
        let Some(endpoint) = balancer.lock().pick(peer.ip(), attempt > 0) else {
            break;
        };
        match tokio::time::timeout(*timeout, sockets.connect(endpoint)).await {
            Ok(Ok(stream)) => {
                backend = Some(stream);
                break;
            }
            Ok(Err(e)) => {
                tracing::debug!(service = %name, %endpoint, error = %e, "connecting to an endpoint failed")
            }
            Err(_) => {
                tracing::debug!(service = %name, %endpoint, "connecting to an endpoint timed out")
            }
        }
    }
    let Some(mut backend) = backend else {
        // No endpoint (or none answered): reset the client's connection rather than leave it
        // hanging or closing it as if the service had answered.
        tracing::debug!(service = %name, client = %peer, "no endpoint; resetting the connection");
        let _ = client.set_zero_linger();
        drop(client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = backend.set_nodelay(true);
    let mut client = client;
    let _ = tokio::io::copy_bidirectional_with_sizes(&mut client, &mut backend, 65536, 65536).await;
}

/// One UDP client's socket to its endpoint.
struct UdpClient {
    backend: Arc<UdpSocket>,
    /// Milliseconds since `epoch` of the last datagram either way.
    last: AtomicU64,
}

async fn serve_udp(
    socket: Arc<UdpSocket>,
    balancer: Arc<Mutex<Balancer>>,
    sockets: Sockets,
    name: ServicePortName,
    idle: Duration,
) {
    let epoch = Instant::now();
    let clients: Arc<Mutex<HashMap<SocketAddr, Arc<UdpClient>>>> = Arc::default();
    // The reply tasks end with this task (aborting it drops the set, which aborts them).
    let mut replies = JoinSet::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let received = tokio::select! {
            r = socket.recv_from(&mut buf) => r,
            Some(_) = replies.join_next(), if !replies.is_empty() => continue,
        };
        let (n, peer) = match received {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!(service = %name, error = %e, "receiving failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let now_ms = epoch.elapsed().as_millis() as u64;
        let existing = clients.lock().get(&peer).cloned();
        let client = match existing {
            Some(c) => c,
            None => {
                let Some(endpoint) = balancer.lock().pick(peer.ip(), false) else {
                    tracing::debug!(service = %name, client = %peer, "no endpoint; dropping a datagram");
                    continue;
                };
                let backend = match sockets.udp_connect(endpoint).await {
                    Ok(b) => Arc::new(b),
                    Err(e) => {
                        tracing::debug!(service = %name, %endpoint, error = %e, "opening a UDP socket to an endpoint failed");
                        continue;
                    }
                };
                let client = Arc::new(UdpClient {
                    backend,
                    last: AtomicU64::new(now_ms),
                });
                clients.lock().insert(peer, client.clone());
                replies.spawn(udp_replies(
                    socket.clone(),
                    client.clone(),
                    clients.clone(),
                    peer,
                    idle,
                    epoch,
                ));
                client
            }
        };
        client.last.store(now_ms, Ordering::Relaxed);
        if let Err(e) = client.backend.send(&buf[..n]).await {
            tracing::debug!(service = %name, client = %peer, error = %e, "forwarding a datagram failed");
            clients.lock().remove(&peer);
        }
    }
}

/// Forward replies from a client's endpoint until the client has been idle for `idle`.
async fn udp_replies(
    socket: Arc<UdpSocket>,
    client: Arc<UdpClient>,
    clients: Arc<Mutex<HashMap<SocketAddr, Arc<UdpClient>>>>,
    peer: SocketAddr,
    idle: Duration,
    epoch: Instant,
) {
    let mut buf = vec![0u8; 65536];
    loop {
        let last = Duration::from_millis(client.last.load(Ordering::Relaxed));
        let deadline = tokio::time::Instant::from_std(epoch + last + idle);
        tokio::select! {
            r = client.backend.recv(&mut buf) => match r {
                Ok(n) => {
                    client.last.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
                    if socket.send_to(&buf[..n], peer).await.is_err() {
                        break;
                    }
                }
                Err(_) => break,
            },
            _ = tokio::time::sleep_until(deadline) => {
                let last = Duration::from_millis(client.last.load(Ordering::Relaxed));
                if epoch.elapsed() >= last + idle {
                    break;
                }
            }
        }
    }
    let mut map = clients.lock();
    if map.get(&peer).is_some_and(|c| Arc::ptr_eq(c, &client)) {
        map.remove(&peer);
    }
}

// ---------------------------------------------------------------------------------------------
// iptables.

/// Runs iptables commands here or in a named network namespace.
#[derive(Clone, Debug, Default)]
struct Iptables {
    netns: Option<String>,
}

impl Iptables {
    fn command(&self, program: &str) -> Command {
        match &self.netns {
            None => Command::new(program),
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
        }
    }

    /// `iptables -w ARGS`; Ok(false) when iptables says no (e.g. `-C` of a missing rule).
    fn run(&self, args: &[&str]) -> anyhow::Result<bool> {
        let out = self
            .command("iptables")
            .arg("-w")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running iptables")?;
        Ok(out.status.success())
    }

    fn restore(&self, input: &str) -> anyhow::Result<()> {
        use std::io::Write;
        let mut child = self
            .command("iptables-restore")
            .args(["-w", "--noflush"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("running iptables-restore")?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(input.as_bytes())
                .context("writing to iptables-restore")?;
        }
        let out = child
            .wait_with_output()
            .context("waiting for iptables-restore")?;
        if !out.status.success() {
            return Err(anyhow!(
                "iptables-restore failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(())
    }

    /// Every (table, chain) `iptables-save` lists.
    fn chains(&self) -> anyhow::Result<HashSet<(String, String)>> {
        let out = self
            .command("iptables-save")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .context("running iptables-save")?;
        if !out.status.success() {
            return Err(anyhow!("iptables-save failed"));
        }
        let mut chains = HashSet::new();
        let mut table = String::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(t) = line.strip_prefix('*') {
                table = t.trim().to_string();
            } else if let Some(c) = line.strip_prefix(':') {
                if let Some(name) = c.split_whitespace().next() {
                    chains.insert((table.clone(), name.to_string()));
                }
            }
        }
        Ok(chains)
    }

    /// The local IPv4 addresses (`ip -4 addr`), global scope first.
    fn local_addresses(&self) -> Vec<Ipv4Addr> {
        let out = match &self.netns {
            None => Command::new("ip")
                .args(["-4", "-o", "addr", "show"])
                .output(),
            Some(ns) => Command::new("ip")
                .args(["-n", ns, "-4", "-o", "addr", "show"])
                .output(),
        };
        let Ok(out) = out else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let mut global = Vec::new();
        let mut other = Vec::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let Some(addr) = words.by_ref().skip_while(|w| *w != "inet").nth(1) else {
                continue;
            };
            let Some(ip) = addr.split('/').next().and_then(|a| a.parse().ok()) else {
                continue;
            };
            if line.contains(" scope global") {
                global.push(ip);
            } else {
                other.push(ip);
            }
        }
        global.extend(other);
        global
    }
}

/// The jump rules into our chains: (table, built-in chain, insert first, match args, chain).
fn jumps() -> [(
    &'static str,
    &'static str,
    bool,
    Vec<&'static str>,
    &'static str,
); 5] {
    let portals = vec!["-m", "comment", "--comment", PORTALS_COMMENT];
    let nodeports = vec![
        "-m",
        "addrtype",
        "--dst-type",
        "LOCAL",
        "-m",
        "comment",
        "--comment",
        NODEPORTS_COMMENT,
    ];
    [
        (
            "nat",
            "PREROUTING",
            true,
            portals.clone(),
            CONTAINER_PORTAL_CHAIN,
        ),
        ("nat", "OUTPUT", true, portals, HOST_PORTAL_CHAIN),
        (
            "nat",
            "PREROUTING",
            false,
            nodeports.clone(),
            CONTAINER_NODEPORT_CHAIN,
        ),
        ("nat", "OUTPUT", false, nodeports, HOST_NODEPORT_CHAIN),
        (
            "filter",
            "INPUT",
            true,
            vec!["-m", "comment", "--comment", NON_LOCAL_COMMENT],
            NON_LOCAL_NODEPORT_CHAIN,
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// The proxier.

/// What is set up for one service port.
struct Proxied {
    service: Arc<ServicePort>,
    endpoints: Option<Arc<Vec<Endpoint>>>,
    /// For the cluster IP (and everything, when `external` is None).
    internal: ProxySocket,
    /// For external IPs, load balancer IPs and the NodePort, when their traffic policy picks
    /// other endpoints than the cluster IP's.
    external: Option<ProxySocket>,
}

/// A socket that holds a NodePort open so no other program on the node takes it.
enum Claim {
    Tcp(#[allow(dead_code)] std::net::TcpListener),
    Udp(#[allow(dead_code)] std::net::UdpSocket),
}

/// The userspace proxy mode; see the module documentation.
pub struct UserspaceProxier {
    node: NodeInfo,
    rt: tokio::runtime::Handle,
    iptables: Iptables,
    sockets: Sockets,
    udp_idle: Duration,
    ports: BTreeMap<ServicePortName, Proxied>,
    claims: HashMap<(u16, Protocol), (ServicePortName, Claim)>,
    /// Warned once about (SCTP ports).
    skipped: HashSet<ServicePortName>,
    /// The ports whose NodePort is held, as of the last sync.
    nodeports: HashSet<ServicePortName>,
    /// The address host portals DNAT to.
    host_ip: Option<Ipv4Addr>,
    applied: Option<String>,
    last_full: Option<Instant>,
}

impl UserspaceProxier {
    /// A proxier for `node` whose sockets' tasks run on `rt`.
    pub fn new(node: NodeInfo, rt: tokio::runtime::Handle) -> UserspaceProxier {
        UserspaceProxier {
            node,
            rt,
            iptables: Iptables::default(),
            sockets: Sockets::default(),
            udp_idle: DEFAULT_UDP_IDLE_TIMEOUT,
            ports: BTreeMap::new(),
            claims: HashMap::new(),
            skipped: HashSet::new(),
            nodeports: HashSet::new(),
            host_ip: None,
            applied: None,
            last_full: None,
        }
    }

    /// Work in the network namespace `name` (`ip netns`): its iptables rules, and proxy
    /// sockets made in it.
    pub fn in_netns(mut self, name: &str) -> anyhow::Result<UserspaceProxier> {
        self.iptables.netns = Some(name.to_string());
        self.sockets.netns = Some(Arc::new(NetnsThread::start(name)?));
        Ok(self)
    }

    /// Close a UDP client's endpoint socket after this long without traffic.
    pub fn with_udp_idle_timeout(mut self, idle: Duration) -> UserspaceProxier {
        self.udp_idle = idle;
        self
    }

    /// The proxy socket port of a service port: (cluster IP's, external addresses').
    pub fn proxy_ports(&self, name: &ServicePortName) -> Option<(u16, u16)> {
        let p = self.ports.get(name)?;
        Some((
            p.internal.port,
            p.external.as_ref().map_or(p.internal.port, |e| e.port),
        ))
    }

    /// The address host portals DNAT to: the node's first IPv4 address that is local here,
    /// or else this host's first global IPv4 address.
    fn host_ip(&mut self) -> anyhow::Result<Ipv4Addr> {
        if let Some(ip) = self.host_ip {
            return Ok(ip);
        }
        let local = self.iptables.local_addresses();
        let from_node = self.node.ips.iter().find_map(|ip| match ip {
            IpAddr::V4(v4) if local.contains(v4) => Some(*v4),
            _ => None,
        });
        let ip = from_node
            .or_else(|| local.iter().copied().find(|ip| !ip.is_loopback()))
            .ok_or_else(|| {
                anyhow!("no IPv4 address on this host for the node's portals to send traffic to")
            })?;
        self.host_ip = Some(ip);
        Ok(ip)
    }

    /// Hold NodePort `port` open for `owner`.
    fn claim(&mut self, port: u16, protocol: Protocol, owner: &ServicePortName) -> bool {
        if let Some((o, _)) = self.claims.get(&(port, protocol)) {
            if o == owner {
                return true;
            }
            tracing::warn!(service = %owner, port, other = %o, "NodePort already in use by another service");
            return false;
        }
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
        let claim = match protocol {
            Protocol::Tcp => self.sockets.tcp_listener(addr).map(Claim::Tcp),
            Protocol::Udp => self.sockets.udp_socket(addr).map(Claim::Udp),
            Protocol::Sctp => return false,
        };
        match claim {
            Ok(c) => {
                self.claims.insert((port, protocol), (owner.clone(), c));
                true
            }
            Err(e) => {
                tracing::warn!(service = %owner, port, error = %e, "cannot open the NodePort on this node");
                false
            }
        }
    }

    /// The rules for every proxied port, as iptables-restore input.
    fn rules(&self, host: Ipv4Addr, nodeports: &HashSet<ServicePortName>) -> String {
        let mut container = String::new();
        let mut host_portals = String::new();
        let mut np_container = String::new();
        let mut np_host = String::new();
        let mut non_local = String::new();
        for (name, p) in &self.ports {
            let svc = &p.service;
            let proto = svc.name.protocol.as_str();
            let internal = p.internal.port;
            let external = p.external.as_ref().map_or(internal, |e| e.port);
            let common = |dst: Option<IpAddr>, port: u16| {
                let mut s =
                    format!("-m comment --comment \"{name}\" -p {proto} -m {proto} --dport {port}");
                if let Some(ip) = dst {
                    let _ = write!(s, " -d {ip}/32");
                }
                s
            };
            for ip in &svc.cluster_ips {
                let c = common(Some(*ip), svc.port);
                let _ = writeln!(
                    container,
                    "-A {CONTAINER_PORTAL_CHAIN} {c} -j REDIRECT --to-ports {internal}"
                );
                let _ = writeln!(
                    host_portals,
                    "-A {HOST_PORTAL_CHAIN} {c} -j DNAT --to-destination {host}:{internal}"
                );
            }
            for ip in &svc.external_ips {
                // From outside (not bridged from a local pod), and to a local address from
                // anywhere, and from the node itself when the address is local.
                let c = common(Some(*ip), svc.port);
                let _ = writeln!(
                    container,
                    "-A {CONTAINER_PORTAL_CHAIN} {c} -m physdev ! --physdev-is-in -j REDIRECT --to-ports {external}"
                );
                let _ = writeln!(
                    container,
                    "-A {CONTAINER_PORTAL_CHAIN} {c} -m addrtype --dst-type LOCAL -j REDIRECT --to-ports {external}"
                );
                let _ = writeln!(
                    host_portals,
                    "-A {HOST_PORTAL_CHAIN} {c} -m addrtype --dst-type LOCAL -j DNAT --to-destination {host}:{external}"
                );
            }
            for ip in &svc.load_balancer_ips {
                let c = common(Some(*ip), svc.port);
                let _ = writeln!(
                    container,
                    "-A {CONTAINER_PORTAL_CHAIN} {c} -j REDIRECT --to-ports {external}"
                );
                let _ = writeln!(
                    host_portals,
                    "-A {HOST_PORTAL_CHAIN} {c} -j DNAT --to-destination {host}:{external}"
                );
            }
            if let (Some(np), true) = (svc.node_port, nodeports.contains(name)) {
                let c = common(None, np);
                let _ = writeln!(
                    np_container,
                    "-A {CONTAINER_NODEPORT_CHAIN} {c} -j REDIRECT --to-ports {external}"
                );
                let _ = writeln!(
                    np_host,
                    "-A {HOST_NODEPORT_CHAIN} {c} -j DNAT --to-destination {host}:{external}"
                );
                let c = common(None, external);
                let _ = writeln!(
                    non_local,
                    "-A {NON_LOCAL_NODEPORT_CHAIN} {c} -m conntrack --ctstate NEW -j ACCEPT"
                );
            }
        }
        let mut out = String::from("*nat\n");
        for chain in [
            CONTAINER_PORTAL_CHAIN,
            HOST_PORTAL_CHAIN,
            CONTAINER_NODEPORT_CHAIN,
            HOST_NODEPORT_CHAIN,
        ] {
            let _ = writeln!(out, ":{chain} - [0:0]");
        }
        out.push_str(&container);
        out.push_str(&host_portals);
        out.push_str(&np_container);
        out.push_str(&np_host);
        out.push_str("COMMIT\n*filter\n");
        let _ = writeln!(out, ":{NON_LOCAL_NODEPORT_CHAIN} - [0:0]");
        out.push_str(&non_local);
        out.push_str("COMMIT\n");
        out
    }

    /// Make sure each built-in chain jumps to ours (the chains must exist).
    fn ensure_jumps(&self) -> anyhow::Result<()> {
        for (table, chain, first, matches, target) in jumps() {
            let mut spec: Vec<&str> = matches.clone();
            spec.extend(["-j", target]);
            let mut check = vec!["-t", table, "-C", chain];
            check.extend(&spec);
            if self.iptables.run(&check)? {
                continue;
            }
            let mut add = vec!["-t", table];
            if first {
                add.extend(["-I", chain, "1"]);
            } else {
                add.extend(["-A", chain]);
            }
            add.extend(&spec);
            if !self.iptables.run(&add)? {
                return Err(anyhow!(
                    "iptables could not add the jump from {table} {chain} to {target}"
                ));
            }
        }
        Ok(())
    }

    /// Remove the jumps and chains, whatever state they are in. Tables none of our chains
    /// are in are not touched (iptables-nft would create them, empty, just to look).
    fn remove_rules(&self) -> anyhow::Result<()> {
        let present = self.iptables.chains()?;
        let ours =
            |table: &str, chain: &str| present.contains(&(table.to_string(), chain.to_string()));
        for (table, chain, _, matches, target) in jumps() {
            if !ours(table, target) {
                continue;
            }
            let mut del = vec!["-t", table, "-D", chain];
            del.extend(&matches);
            del.extend(["-j", target]);
            // Delete every copy (a crashed proxy may have left more than one).
            for _ in 0..16 {
                if !self.iptables.run(&del)? {
                    break;
                }
            }
        }
        let mut input = String::new();
        for (table, chains) in [
            (
                "nat",
                &[
                    CONTAINER_PORTAL_CHAIN,
                    HOST_PORTAL_CHAIN,
                    CONTAINER_NODEPORT_CHAIN,
                    HOST_NODEPORT_CHAIN,
                ][..],
            ),
            ("filter", &[NON_LOCAL_NODEPORT_CHAIN][..]),
        ] {
            let chains: Vec<&&str> = chains.iter().filter(|c| ours(table, c)).collect();
            if chains.is_empty() {
                continue;
            }
            let _ = writeln!(input, "*{table}");
            for chain in chains {
                // Declaring flushes it; then it can go.
                let _ = writeln!(input, ":{chain} - [0:0]\n-X {chain}");
            }
            input.push_str("COMMIT\n");
        }
        if input.is_empty() {
            return Ok(());
        }
        self.iptables
            .restore(&input)
            .context("removing the userspace proxy's chains")
    }
}

/// Whether a service port's external addresses need their own socket: when they may reach
/// other endpoints than its cluster IP.
fn needs_external_socket(svc: &ServicePort) -> bool {
    let externally_accessible = svc.node_port.is_some()
        || !svc.external_ips.is_empty()
        || !svc.load_balancer_ips.is_empty();
    externally_accessible && (svc.external_policy_local || svc.internal_policy_local)
}

impl Proxier for UserspaceProxier {
    fn sync(&mut self, snapshot: &Snapshot) -> anyhow::Result<()> {
        let started = Instant::now();
        let no_endpoints: Arc<Vec<Endpoint>> = Arc::default();
        // Close what is gone.
        let gone: Vec<ServicePortName> = self
            .ports
            .keys()
            .filter(|k| !snapshot.services.contains_key(*k))
            .cloned()
            .collect();
        // Whether the rules may differ from the last applied (new, changed or gone ports).
        let mut layout_changed = !gone.is_empty();
        for name in gone {
            self.ports.remove(&name);
            tracing::debug!(service = %name, "stopped proxying");
        }
        self.skipped.retain(|k| snapshot.services.contains_key(k));
        let mut errors = Vec::new();
        for (name, svc) in &snapshot.services {
            if !matches!(svc.name.protocol, Protocol::Tcp | Protocol::Udp) {
                if self.skipped.insert(name.clone()) {
                    tracing::warn!(service = %name, "the userspace proxy does not proxy SCTP");
                }
                continue;
            }
            if svc.cluster_ips.is_empty() {
                continue;
            }
            let endpoints = snapshot.endpoints.get(name);
            let external = needs_external_socket(svc);
            let reuse = self.ports.get(name).is_some_and(|p| {
                p.service.name.protocol == svc.name.protocol && p.external.is_some() == external
            });
            if reuse {
                let p = self.ports.get_mut(name).expect("checked above");
                let unchanged = Arc::ptr_eq(&p.service, svc)
                    && match (&p.endpoints, endpoints) {
                        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                        (None, None) => true,
                        _ => false,
                    };
                if unchanged {
                    continue;
                }
                layout_changed |= !Arc::ptr_eq(&p.service, svc);
                p.service = svc.clone();
                p.endpoints = endpoints.cloned();
            } else {
                layout_changed = true;
                self.ports.remove(name);
                let open = || -> anyhow::Result<Proxied> {
                    let internal = ProxySocket::open(
                        &self.rt,
                        &self.sockets,
                        name,
                        svc.name.protocol,
                        self.udp_idle,
                    )?;
                    let external = if external {
                        Some(ProxySocket::open(
                            &self.rt,
                            &self.sockets,
                            name,
                            svc.name.protocol,
                            self.udp_idle,
                        )?)
                    } else {
                        None
                    };
                    Ok(Proxied {
                        service: svc.clone(),
                        endpoints: endpoints.cloned(),
                        internal,
                        external,
                    })
                };
                match open() {
                    Ok(p) => {
                        tracing::info!(service = %name, port = p.internal.port, "proxying");
                        self.ports.insert(name.clone(), p);
                    }
                    Err(e) => {
                        errors.push(format!("{e:#}"));
                        continue;
                    }
                }
            }
            let p = &self.ports[name];
            let eps = endpoints.unwrap_or(&no_endpoints);
            let cat = categorize(svc, eps, &self.node.name);
            let affinity = svc
                .session_affinity_seconds
                .map(|s| Duration::from_secs(s.into()));
            p.internal.update(&cat.cluster, affinity);
            if let Some(ext) = &p.external {
                let chosen = if svc.external_policy_local {
                    cat.local
                } else {
                    usable_endpoints(eps.iter())
                };
                ext.update(&chosen, affinity);
            }
        }

        // NodePorts: hold each open; give up the ones no longer used.
        let wanted: Vec<(u16, Protocol, ServicePortName)> = self
            .ports
            .iter()
            .filter_map(|(name, p)| {
                p.service
                    .node_port
                    .map(|np| (np, p.service.name.protocol, name.clone()))
            })
            .collect();
        let wanted_keys: HashSet<(u16, Protocol)> =
            wanted.iter().map(|(np, pr, _)| (*np, *pr)).collect();
        self.claims
            .retain(|k, (owner, _)| wanted_keys.contains(k) && self.ports.contains_key(owner));
        let mut nodeports = HashSet::new();
        for (np, protocol, name) in wanted {
            if self.claim(np, protocol, &name) {
                nodeports.insert(name);
            }
        }

        layout_changed |= nodeports != self.nodeports;
        self.nodeports = nodeports;
        let full = self.last_full.is_none_or(|t| t.elapsed() >= FULL_RESYNC);
        if !full && !layout_changed && self.applied.is_some() {
            // Only endpoints changed: the balancers have them already.
            tracing::debug!(ports = self.ports.len(), took = ?started.elapsed(), "userspace proxy synced");
            return if errors.is_empty() {
                Ok(())
            } else {
                Err(anyhow!(errors.join("; ")))
            };
        }
        if full {
            self.host_ip = None;
        }
        let host = self.host_ip()?;
        let rules = self.rules(host, &self.nodeports);
        if full || self.applied.as_deref() != Some(rules.as_str()) {
            self.applied = None;
            self.iptables
                .restore(&rules)
                .context("writing the userspace proxy's portal rules")?;
            self.ensure_jumps()?;
            self.applied = Some(rules);
            if full {
                self.last_full = Some(Instant::now());
            }
        }
        tracing::debug!(ports = self.ports.len(), took = ?started.elapsed(), "userspace proxy synced");
        if !errors.is_empty() {
            return Err(anyhow!(errors.join("; ")));
        }
        Ok(())
    }

    fn cleanup(&mut self) -> anyhow::Result<()> {
        self.ports.clear();
        self.claims.clear();
        self.nodeports.clear();
        self.applied = None;
        self.last_full = None;
        self.remove_rules()
    }
}

#[cfg(test)]
mod tests;
