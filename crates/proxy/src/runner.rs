//! The proxy's control loop, as kube-proxy's: watch Services, EndpointSlices and this node's
//! Node object, keep a [`Snapshot`] up to date through a [`Tracker`], and hand it to the mode's
//! [`Proxier`] whenever something changed — at most once per `min_sync_period`, and at least
//! once per `sync_period` — in a blocking task, never two at a time. A failed sync is retried
//! with back-off (doubling from `min_sync_period` up to 30 s). On shutdown the proxier removes
//! everything it installed.
//!
//! Like kube-proxy it waits for the first list of Services and EndpointSlices before the first
//! sync (so a restart never installs a partial view) and waits for its Node (up to
//! `node_wait`) to learn the node's addresses. When those addresses change, kube-proxy exits
//! to be restarted with the new ones; this replaces its proxier in place instead (the old one
//! cleans up, the new one syncs everything), which works the same without a supervisor. A
//! deleted Node (kube-proxy exits) leaves the proxy going with the last addresses.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use capstan_runtime::{Change, Informer, Informers};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use kube::Api;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::iptables::IptablesProxier;
use crate::model::Tracker;
use crate::nftables::NftablesProxier;
use crate::userspace::UserspaceProxier;
use crate::{NodeInfo, Proxier, Snapshot};

/// A proxy mode (`--proxy-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A socket per service port, iptables portals to it (kube-proxy ≤ 1.25's default).
    Userspace,
    /// iptables NAT rules (kube-proxy's default on Linux).
    Iptables,
    /// nftables rules in a table of their own.
    Nftables,
    /// IPVS virtual servers: not available (see [`check_mode`]).
    Ipvs,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Userspace, Mode::Iptables, Mode::Nftables, Mode::Ipvs];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Userspace => "userspace",
            Mode::Iptables => "iptables",
            Mode::Nftables => "nftables",
            Mode::Ipvs => "ipvs",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mode {
    type Err = anyhow::Error;

    /// A mode by its kube-proxy name; empty means the default, iptables.
    fn from_str(s: &str) -> anyhow::Result<Mode> {
        match s {
            "" | "iptables" => Ok(Mode::Iptables),
            "userspace" => Ok(Mode::Userspace),
            "nftables" => Ok(Mode::Nftables),
            "ipvs" => Ok(Mode::Ipvs),
            other => bail!(
                "unknown proxy mode {other:?}: expected userspace, iptables, nftables or ipvs"
            ),
        }
    }
}

/// How the proxy runs.
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    /// This node's name (the Node whose addresses NodePorts answer on, and what
    /// `nodeName` of endpoints is compared with for traffic policies).
    pub node_name: String,
    pub mode: Mode,
    /// The pod network (`--cluster-cidr`): traffic to services from outside it is masqueraded.
    pub cluster_cidr: Option<String>,
    /// The least time between two syncs. 100 ms: a removed endpoint stops getting new
    /// connections well within a second of its EndpointSlice changing, while a burst of
    /// changes still costs one sync per 100 ms. (kube-proxy's default is 1 s.)
    pub min_sync_period: Duration,
    /// The most time between two syncs, even with nothing changed (kube-proxy: 30 s).
    pub sync_period: Duration,
    /// userspace mode: how long a UDP client's socket to its endpoint stays open without
    /// traffic (kube-proxy's `--udp-timeout`, 250 ms).
    pub udp_idle_timeout: Duration,
    /// How long to wait at start for this node's Node object and its addresses before going
    /// on without them.
    pub node_wait: Duration,
}

impl Default for ProxyOptions {
    fn default() -> ProxyOptions {
        ProxyOptions {
            node_name: capstan_runtime::events::hostname(),
            mode: Mode::Iptables,
            cluster_cidr: None,
            min_sync_period: Duration::from_millis(100),
            sync_period: Duration::from_secs(30),
            udp_idle_timeout: crate::userspace::DEFAULT_UDP_IDLE_TIMEOUT,
            node_wait: Duration::from_secs(30),
        }
    }
}

/// Fail with one clear line for a mode this machine cannot run. IPVS needs the kernel's IP
/// virtual server, and capstan has no IPVS proxier either way.
pub fn check_mode(mode: Mode) -> anyhow::Result<()> {
    if mode != Mode::Ipvs {
        return Ok(());
    }
    if !std::path::Path::new("/proc/net/ip_vs").exists() {
        bail!(
            "proxy mode ipvs: this kernel has no IPVS (no /proc/net/ip_vs; the ip_vs module is \
             not loaded or not built); use --proxy-mode iptables or nftables"
        );
    }
    bail!("proxy mode ipvs is not implemented by capstan; use --proxy-mode iptables or nftables")
}

/// The proxier of `mode` for `node`. userspace mode runs its sockets on `rt`.
pub fn new_proxier(
    mode: Mode,
    node: NodeInfo,
    rt: tokio::runtime::Handle,
    opts: &ProxyOptions,
) -> anyhow::Result<Box<dyn Proxier>> {
    check_mode(mode)?;
    Ok(match mode {
        Mode::Userspace => {
            Box::new(UserspaceProxier::new(node, rt).with_udp_idle_timeout(opts.udp_idle_timeout))
        }
        Mode::Iptables => Box::new(IptablesProxier::new(node)?),
        Mode::Nftables => Box::new(NftablesProxier::new(node)?),
        Mode::Ipvs => unreachable!("check_mode refused ipvs"),
    })
}

/// Remove the rules of every mode except `keep` (kube-proxy cleans up after the other modes
/// when it starts, so switching modes leaves nothing stale behind). Blocking. Returns the
/// errors of the modes that could not be cleaned up.
pub fn cleanup_modes(
    node: &NodeInfo,
    keep: Option<Mode>,
    rt: tokio::runtime::Handle,
) -> Vec<String> {
    let mut errors = Vec::new();
    for mode in [Mode::Userspace, Mode::Iptables, Mode::Nftables] {
        if Some(mode) == keep {
            continue;
        }
        let proxier: anyhow::Result<Box<dyn Proxier>> = match mode {
            Mode::Userspace => Ok(Box::new(UserspaceProxier::new(node.clone(), rt.clone()))),
            Mode::Iptables => IptablesProxier::new(node.clone()).map(|p| Box::new(p) as _),
            Mode::Nftables => NftablesProxier::new(node.clone()).map(|p| Box::new(p) as _),
            Mode::Ipvs => continue,
        };
        if let Err(e) = proxier.and_then(|mut p| p.cleanup()) {
            errors.push(format!("{mode}: {e:#}"));
        }
    }
    errors
}

/// The addresses of a Node that NodePorts answer on: its InternalIPs, then its ExternalIPs.
pub fn node_ips(node: &Node) -> Vec<IpAddr> {
    let addrs = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out: Vec<IpAddr> = Vec::new();
    for kind in ["InternalIP", "ExternalIP"] {
        for a in addrs.iter().filter(|a| a.type_ == kind) {
            if let Ok(ip) = a.address.trim().parse::<IpAddr>() {
                if !out.contains(&ip) {
                    out.push(ip);
                }
            }
        }
    }
    out
}

/// Run the proxy until `shutdown` resolves (then remove its rules and return Ok), or until it
/// cannot go on (an error).
pub async fn run(
    opts: ProxyOptions,
    client: kube::Client,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    check_mode(opts.mode)?;
    let mut shutdown = std::pin::pin!(shutdown);

    // Services and EndpointSlices feed the tracker; a change wakes the loop.
    let tracker = Arc::new(Mutex::new(Tracker::new(opts.node_name.clone())));
    let wake = Arc::new(Notify::new());
    let informers = Informers::new(client.clone());
    let services = informers.get::<Service>();
    let slices = informers.get::<EndpointSlice>();
    {
        let (tracker, wake) = (tracker.clone(), wake.clone());
        services.on_change(move |c: &Change<'_, Service>| {
            let (old, new) = old_new(c);
            let changed = tracker.lock().on_service(old, new);
            if changed {
                wake.notify_one();
            }
        });
    }
    {
        let (tracker, wake) = (tracker.clone(), wake.clone());
        slices.on_change(move |c: &Change<'_, EndpointSlice>| {
            let (old, new) = old_new(c);
            let changed = tracker.lock().on_slice(old, new);
            if changed {
                wake.notify_one();
            }
        });
    }

    // This node only: its addresses, as a watch of `Some(ips)` (None once deleted).
    let node_informer = Arc::new(Informer::<Node>::new());
    let (node_tx, mut node_rx) = watch::channel::<Option<Option<Vec<IpAddr>>>>(None);
    {
        let name = opts.node_name.clone();
        node_informer.on_change(move |c: &Change<'_, Node>| {
            if c.object().metadata.name.as_deref() != Some(name.as_str()) {
                return;
            }
            let value = match c {
                Change::Delete(_) => None,
                _ => Some(node_ips(c.object())),
            };
            node_tx.send_replace(Some(value));
        });
    }
    let node_watch = watcher::watcher(
        Api::<Node>::all(client.clone()),
        watcher::Config::default()
            .fields(&format!("metadata.name={}", opts.node_name))
            .any_semantic(),
    );
    let node_task = tokio::spawn(node_informer.clone().run(node_watch, None));
    let _stop_node = AbortOnDrop(node_task);
    informers.start();

    // Wait for the first lists, and for the Node to have addresses (for a while).
    let synced = async {
        services.wait_synced().await;
        slices.wait_synced().await;
        node_informer.wait_synced().await;
    };
    tokio::select! {
        _ = synced => {}
        _ = &mut shutdown => return Ok(()),
    }
    let mut ips: Vec<IpAddr> = Vec::new();
    let node_found = async {
        loop {
            if let Some(Some(found)) = node_rx.borrow_and_update().clone() {
                if !found.is_empty() {
                    return found;
                }
            }
            if node_rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        found = node_found => ips = found,
        _ = tokio::time::sleep(opts.node_wait) => {
            tracing::warn!(node = %opts.node_name, waited = ?opts.node_wait,
                "no Node with addresses by this name; NodePorts answer on no node address");
        }
        _ = &mut shutdown => return Ok(()),
    }
    tracing::info!(node = %opts.node_name, mode = %opts.mode, ips = ?ips, "proxy starting");

    let node = NodeInfo {
        name: opts.node_name.clone(),
        ips: ips.clone(),
        cluster_cidr: opts.cluster_cidr.clone(),
    };
    let rt = tokio::runtime::Handle::current();
    let mode = opts.mode;
    let (proxier, cleanup_errors) = {
        let (node, opts2, rt) = (node.clone(), opts.clone(), rt.clone());
        tokio::task::spawn_blocking(move || {
            let errors = cleanup_modes(&node, Some(mode), rt.clone());
            (new_proxier(mode, node, rt, &opts2), errors)
        })
        .await
        .context("starting the proxier")?
    };
    for e in cleanup_errors {
        tracing::warn!(error = %e, "cleaning up another proxy mode's rules failed");
    }
    let mut proxier = Some(proxier?);

    let mut snapshot = Snapshot::default();
    let mut last_sync: Option<Instant> = None;
    let mut next_periodic = Instant::now() + opts.sync_period;
    let mut backoff: Option<Duration> = None;
    let mut force = true;
    let mut node_watched = true;
    let result: anyhow::Result<()> = loop {
        // Wait for a change, the periodic sync, a node change or shutdown.
        if !force && !tracker.lock().has_pending() {
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep_until(next_periodic) => force = true,
                r = node_rx.changed(), if node_watched => {
                    node_watched = r.is_ok();
                    let now = node_rx.borrow_and_update().clone();
                    match now {
                        Some(None) => tracing::warn!(node = %opts.node_name,
                            "the Node was deleted; proxying on with its last addresses"),
                        Some(Some(new)) if !new.is_empty() && new != ips => {
                            // kube-proxy exits to be restarted with the new addresses; a new
                            // proxier in place does the same without the restart.
                            tracing::info!(node = %opts.node_name, old = ?ips, new = ?new,
                                "the node's addresses changed; restarting the proxier");
                            ips = new;
                            let node = NodeInfo { ips: ips.clone(), ..node.clone() };
                            let old = proxier.take();
                            let (rt, opts2) = (rt.clone(), opts.clone());
                            let made = tokio::task::spawn_blocking(move || {
                                if let Some(mut old) = old {
                                    if let Err(e) = old.cleanup() {
                                        tracing::warn!(error = %format!("{e:#}"),
                                            "removing the old proxier's rules failed");
                                    }
                                }
                                new_proxier(mode, node, rt, &opts2)
                            })
                            .await
                            .context("restarting the proxier")?;
                            match made {
                                Ok(p) => proxier = Some(p),
                                Err(e) => break Err(e.context("restarting the proxier")),
                            }
                            force = true;
                        }
                        _ => {}
                    }
                    continue;
                }
                _ = &mut shutdown => break Ok(()),
            }
        }
        // No more often than min_sync_period (counted from the start of the last sync).
        if let Some(last) = last_sync {
            let at = last + opts.min_sync_period.max(backoff.unwrap_or_default());
            if Instant::now() < at {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = &mut shutdown => break Ok(()),
                }
            }
        }
        let updated = tracker.lock().apply(&mut snapshot);
        if updated == 0 && !force {
            continue;
        }
        let Some(mut p) = proxier.take() else {
            break Err(anyhow!("the proxier was lost"));
        };
        let snap = std::mem::take(&mut snapshot);
        let started = Instant::now();
        let joined = tokio::task::spawn_blocking(move || {
            let r = p.sync(&snap);
            (p, snap, r)
        })
        .await;
        let (p, snap, r) = match joined {
            Ok(x) => x,
            Err(e) => break Err(anyhow!("the proxier's sync panicked: {e}")),
        };
        proxier = Some(p);
        snapshot = snap;
        last_sync = Some(started);
        match r {
            Ok(()) => {
                if backoff.take().is_some() {
                    tracing::info!("proxy rules synced again");
                }
                force = false;
                next_periodic = Instant::now() + opts.sync_period;
                tracing::debug!(services = snapshot.services.len(), updated,
                    took = ?started.elapsed(), "proxy rules synced");
            }
            Err(e) => {
                let next = backoff
                    .map_or(opts.min_sync_period.max(Duration::from_millis(100)), |b| {
                        (b * 2).min(Duration::from_secs(30))
                    });
                backoff = Some(next);
                force = true;
                tracing::warn!(error = %format!("{e:#}"), retry_in = ?next, "syncing the proxy rules failed");
            }
        }
    };
    if result.is_ok() {
        if let Some(mut p) = proxier.take() {
            tracing::info!("removing the proxy rules");
            tokio::task::spawn_blocking(move || p.cleanup())
                .await
                .context("cleaning up")?
                .context("removing the proxy's rules")?;
        }
    }
    result
}

fn old_new<'a, K>(c: &Change<'a, K>) -> (Option<&'a K>, Option<&'a K>) {
    match *c {
        Change::Add(new) => (None, Some(&**new)),
        Change::Update { old, new } => (Some(&**old), Some(&**new)),
        Change::Delete(old) => (Some(&**old), None),
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_by_kube_proxy_names() {
        assert_eq!("".parse::<Mode>().unwrap(), Mode::Iptables);
        for m in Mode::ALL {
            assert_eq!(m.as_str().parse::<Mode>().unwrap(), m);
        }
        let e = "kernelspace".parse::<Mode>().unwrap_err().to_string();
        assert!(e.contains("unknown proxy mode"), "{e}");
    }

    #[test]
    fn ipvs_fails_with_one_line() {
        let e = check_mode(Mode::Ipvs).unwrap_err().to_string();
        assert!(e.starts_with("proxy mode ipvs"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        for m in [Mode::Userspace, Mode::Iptables, Mode::Nftables] {
            check_mode(m).unwrap();
        }
    }

    #[test]
    fn node_addresses_internal_first() {
        let node: Node = serde_json::from_str(
            r#"{"metadata":{"name":"n"},"status":{"addresses":[
                {"type":"Hostname","address":"n"},
                {"type":"ExternalIP","address":"203.0.113.1"},
                {"type":"InternalIP","address":"10.0.0.5"},
                {"type":"InternalIP","address":"not-an-ip"},
                {"type":"ExternalIP","address":"10.0.0.5"}]}}"#,
        )
        .unwrap();
        let ips: Vec<String> = node_ips(&node).iter().map(|i| i.to_string()).collect();
        assert_eq!(ips, vec!["10.0.0.5", "203.0.113.1"]);
        assert!(node_ips(&Node::default()).is_empty());
    }
}
