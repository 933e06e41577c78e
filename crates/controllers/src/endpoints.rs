//! The Endpoints controller (Kubernetes' `endpoint-controller`): for every Service with a
//! selector, a core/v1 Endpoints of the same name listing the selected pods that have an
//! address: ready ones under `addresses`, the others under `notReadyAddresses` (all of them
//! under `addresses` with `publishNotReadyAddresses`), with their node, a reference to the pod
//! and the pod's hostname when its subdomain is the service; the ports are the service's
//! target ports resolved on each pod (named ports looked up among its containers' ports).
//!
//! Subsets are packed into Kubernetes' canonical layout (RepackSubsets: one subset per set of
//! addresses sharing the same ports, addresses sorted by IP and pod, ports and subsets sorted
//! by the MD5 of their go-spew form as Kubernetes sorts them), so `kubectl get endpoints`
//! lists them in the same order. At most 1000 addresses are kept (ready ones first) and the
//! Endpoints is then annotated `endpoints.kubernetes.io/over-capacity: truncated`. The
//! Endpoints carries the service's labels, `service.kubernetes.io/headless` for headless
//! services and `endpoints.kubernetes.io/last-change-trigger-time`. An Endpoints whose
//! Service is gone is deleted (those left over from before a restart too).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use capstan_runtime::{Change, Informer, Queue, Recorder};
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use parking_lot::Mutex;

use crate::endpointslice::{
    error_message, find_port, format_rfc3339_nano, is_external_name, is_namespace_terminating,
    is_service_ip_set, pod_ips, publish_not_ready, selector_matches, service_selector,
    services_for_pod_change, should_pod_be_in_endpoints, should_set_hostname, spew_ptr,
    TriggerTimeTracker, ANNOTATION_TRIGGER_TIME, LABEL_HEADLESS,
};
use crate::util;
use crate::Ctx;

/// The most addresses an Endpoints holds.
pub const MAX_CAPACITY: usize = 1000;
pub const ANNOTATION_OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";
/// Endpoints used as leader-election locks carry this; they are never cleaned up.
const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";

struct Controller {
    client: kube::Client,
    services: Arc<Informer<Service>>,
    pods: Arc<Informer<Pod>>,
    endpoints: Arc<Informer<Endpoints>>,
    triggers: TriggerTimeTracker,
    /// service key → the resourceVersion of an Endpoints this controller has since replaced:
    /// a cache still holding it is out of date.
    stale: Mutex<HashMap<String, String>>,
    recorder: Recorder,
}

fn meta_key(m: &ObjectMeta) -> String {
    capstan_runtime::key(
        m.namespace.as_deref(),
        m.name.as_deref().unwrap_or_default(),
    )
}

pub fn start(ctx: &Ctx) {
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        services: ctx.informers.get::<Service>(),
        pods: ctx.informers.get::<Pod>(),
        endpoints: ctx.informers.get::<Endpoints>(),
        triggers: TriggerTimeTracker::default(),
        stale: Mutex::new(HashMap::new()),
        recorder: ctx.recorder("endpoint-controller"),
    });
    let queue = Queue::new("endpoint");

    let q = queue.clone();
    c.services
        .on_change(move |ch| q.add(meta_key(&ch.object().metadata)));

    let (q, services) = (queue.clone(), c.services.clone());
    c.pods.on_change(move |ch| {
        for key in services_for_pod_change(&services, ch) {
            q.add(key);
        }
    });

    let q = queue.clone();
    c.endpoints.on_change(move |ch| {
        if let Change::Delete(e) = ch {
            q.add(meta_key(&e.metadata));
        }
    });

    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        c.services.wait_synced().await;
        c.pods.wait_synced().await;
        c.endpoints.wait_synced().await;
        // Endpoints left behind by services deleted while the controller was down.
        for e in c.endpoints.list() {
            let leader = e
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(LEADER_ANNOTATION));
            if !leader {
                queue.add(meta_key(&e.metadata));
            }
        }
        queue.run_workers(workers, move |key| {
            let c = c.clone();
            async move { c.sync(&key).await }
        });
    });
}

impl Controller {
    async fn sync(&self, key: &str) -> anyhow::Result<()> {
        let (ns, name) = capstan_runtime::split_key(key);
        let api: Api<Endpoints> = Api::namespaced(self.client.clone(), ns);
        let Some(svc) = self.services.get(ns, name) else {
            // The service is gone: so are its endpoints.
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if util::is_not_found(&e) => {}
                Err(e) => return Err(anyhow::anyhow!(error_message(&e))),
            }
            self.triggers.delete(key);
            self.stale.lock().remove(key);
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
        let trigger = self.triggers.compute(key, &svc, &pods);
        let subsets = desired_subsets(&svc, &pods);

        let current = self.endpoints.get(ns, name);
        if let Some(cur) = current.as_ref() {
            let rv = cur.metadata.resource_version.clone().unwrap_or_default();
            if self.stale.lock().get(key) == Some(&rv) {
                anyhow::bail!(
                    "endpoints informer cache is out of date, resource version {rv} already processed for endpoints {key}"
                );
            }
        }
        let svc_labels = svc.metadata.labels.clone().unwrap_or_default();
        if let Some(cur) = current.as_ref() {
            let mut cur_labels = cur.metadata.labels.clone().unwrap_or_default();
            cur_labels.remove(LABEL_HEADLESS);
            if subsets_equal(cur.subsets.as_deref().unwrap_or_default(), &subsets)
                && cur_labels == svc_labels
                && capacity_annotation_correct(cur)
            {
                return Ok(());
            }
        }

        let mut new = match current.as_ref() {
            Some(cur) => (**cur).clone(),
            None => Endpoints {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(ns.to_string()),
                    ..Default::default()
                },
                subsets: None,
            },
        };
        let mut subsets = subsets;
        let truncated = truncate(&mut subsets);
        new.subsets = (!subsets.is_empty()).then_some(subsets);
        let mut labels = svc_labels;
        if is_service_ip_set(&svc) {
            labels.remove(LABEL_HEADLESS);
        } else {
            labels.insert(LABEL_HEADLESS.into(), String::new());
        }
        new.metadata.labels = Some(labels);
        let annotations = new.metadata.annotations.get_or_insert_with(BTreeMap::new);
        match trigger {
            Some(t) => {
                annotations.insert(ANNOTATION_TRIGGER_TIME.into(), format_rfc3339_nano(t));
            }
            None => {
                annotations.remove(ANNOTATION_TRIGGER_TIME);
            }
        }
        if truncated {
            annotations.insert(ANNOTATION_OVER_CAPACITY.into(), "truncated".into());
        } else {
            annotations.remove(ANNOTATION_OVER_CAPACITY);
        }

        let result = match current.as_ref() {
            None => api.create(&PostParams::default(), &new).await,
            Some(_) => api.replace(name, &PostParams::default(), &new).await,
        };
        match result {
            Ok(written) => {
                if let Some(cur) = current.as_ref() {
                    if written.metadata.resource_version != cur.metadata.resource_version {
                        let old = cur.metadata.resource_version.clone().unwrap_or_default();
                        self.stale.lock().insert(key.to_string(), old);
                    }
                }
                Ok(())
            }
            Err(e) => {
                if current.is_none() {
                    if is_namespace_terminating(&e) {
                        return Ok(());
                    }
                    self.recorder.warning(
                        &new,
                        "FailedToCreateEndpoint",
                        format!(
                            "Failed to create endpoint for service {ns}/{name}: {}",
                            error_message(&e)
                        ),
                    );
                } else {
                    self.recorder.warning(
                        &new,
                        "FailedToUpdateEndpoint",
                        format!(
                            "Failed to update endpoint {ns}/{name}: {}",
                            error_message(&e)
                        ),
                    );
                }
                Err(anyhow::anyhow!(error_message(&e)))
            }
        }
    }
}

/// The address of a pod for a service: the pod IP of the service's (first) IP family.
fn pod_address(svc: &Service, pod: &Pod) -> Option<EndpointAddress> {
    let spec = svc.spec.as_ref();
    let v6 = match spec
        .and_then(|s| s.ip_families.as_ref())
        .and_then(|f| f.first())
    {
        Some(f) => f == "IPv6",
        None if is_service_ip_set(svc) => spec
            .and_then(|s| s.cluster_ip.as_deref())
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok()),
        None => pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok()),
    };
    let ip = pod_ips(pod)
        .into_iter()
        .find(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok() == v6)?;
    Some(EndpointAddress {
        ip,
        node_name: Some(
            pod.spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default(),
        ),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        }),
        hostname: None,
    })
}

/// The subsets of a service's Endpoints, packed and sorted.
fn desired_subsets(svc: &Service, pods: &[Arc<Pod>]) -> Vec<EndpointSubset> {
    let publish = publish_not_ready(svc);
    let spec = svc.spec.as_ref();
    let ports = spec.and_then(|s| s.ports.as_deref()).unwrap_or_default();
    let headless = spec.and_then(|s| s.cluster_ip.as_deref()) == Some("None");
    let mut subsets = Vec::new();
    for pod in pods {
        if !should_pod_be_in_endpoints(pod, publish) {
            continue;
        }
        let Some(mut addr) = pod_address(svc, pod) else {
            continue;
        };
        if should_set_hostname(pod, svc) {
            addr.hostname = pod.spec.as_ref().and_then(|s| s.hostname.clone());
        }
        let ready = publish || util::is_pod_ready(pod);
        let subset = |port: Option<EndpointPort>| EndpointSubset {
            addresses: ready.then(|| vec![addr.clone()]),
            not_ready_addresses: (!ready).then(|| vec![addr.clone()]),
            ports: port.map(|p| vec![p]),
        };
        if ports.is_empty() {
            // A headless service may have no ports: its addresses are listed alone.
            if headless {
                subsets.push(subset(None));
            }
            continue;
        }
        for sp in ports {
            let Some(n) = find_port(pod, sp) else {
                continue;
            };
            subsets.push(subset(Some(EndpointPort {
                name: sp.name.clone().filter(|n| !n.is_empty()),
                port: n,
                protocol: sp.protocol.clone(),
                app_protocol: sp.app_protocol.clone(),
            })));
        }
    }
    repack_subsets(subsets)
}

fn target_uid(a: &EndpointAddress) -> Option<&str> {
    a.target_ref
        .as_ref()
        .map(|r| r.uid.as_deref().unwrap_or_default())
}

/// Kubernetes' LessEndpointAddress: by IP, then without a target before with, then pod uid.
fn address_order(a: &EndpointAddress, b: &EndpointAddress) -> std::cmp::Ordering {
    a.ip.as_bytes()
        .cmp(b.ip.as_bytes())
        .then_with(|| target_uid(a).cmp(&target_uid(b)))
}

/// Kubernetes' RepackSubsets: one subset per distinct set of (address, readiness) with every
/// port those addresses share; an address not ready on a port is not ready there; addresses
/// are deduplicated by IP and pod uid; then SortSubsets.
pub(crate) fn repack_subsets(subsets: Vec<EndpointSubset>) -> Vec<EndpointSubset> {
    let mut addrs: Vec<EndpointAddress> = Vec::new();
    let mut addr_index: HashMap<(String, Option<String>), usize> = HashMap::new();
    // port (None: the subset had no ports) → address index → ready
    let mut by_port: Vec<(Option<EndpointPort>, BTreeMap<usize, bool>)> = Vec::new();
    for s in &subsets {
        let ports: Vec<Option<&EndpointPort>> = match s.ports.as_deref() {
            Some(p) if !p.is_empty() => p.iter().map(Some).collect(),
            _ => vec![None],
        };
        for port in ports {
            let pos = match by_port.iter().position(|(p, _)| p.as_ref() == port) {
                Some(i) => i,
                None => {
                    by_port.push((port.cloned(), BTreeMap::new()));
                    by_port.len() - 1
                }
            };
            let all = s
                .addresses
                .iter()
                .flatten()
                .map(|a| (a, true))
                .chain(s.not_ready_addresses.iter().flatten().map(|a| (a, false)));
            for (a, ready) in all {
                let key = (a.ip.clone(), target_uid(a).map(str::to_string));
                let idx = *addr_index.entry(key).or_insert_with(|| {
                    addrs.push(a.clone());
                    addrs.len() - 1
                });
                let set = &mut by_port[pos].1;
                // Not ready wins over ready.
                if set.get(&idx).is_none_or(|was_ready| *was_ready) {
                    set.insert(idx, ready);
                }
            }
        }
    }
    // (the addresses with their readiness, the ports they share)
    type Group = (Vec<(usize, bool)>, Vec<EndpointPort>);
    let mut groups: Vec<Group> = Vec::new();
    for (port, set) in by_port {
        if set.is_empty() {
            continue;
        }
        let members: Vec<(usize, bool)> = set.into_iter().collect();
        let pos = match groups.iter().position(|(m, _)| *m == members) {
            Some(i) => i,
            None => {
                groups.push((members, Vec::new()));
                groups.len() - 1
            }
        };
        if let Some(p) = port.filter(|p| p.port > 0) {
            groups[pos].1.push(p);
        }
    }
    let mut out: Vec<EndpointSubset> = groups
        .into_iter()
        .map(|(members, ports)| {
            let pick = |want: bool| {
                let v: Vec<EndpointAddress> = members
                    .iter()
                    .filter(|(_, r)| *r == want)
                    .map(|(i, _)| addrs[*i].clone())
                    .collect();
                (!v.is_empty()).then_some(v)
            };
            EndpointSubset {
                addresses: pick(true),
                not_ready_addresses: pick(false),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect();
    sort_subsets(&mut out);
    out
}

/// Kubernetes' SortSubsets.
fn sort_subsets(subsets: &mut [EndpointSubset]) {
    for s in subsets.iter_mut() {
        for list in [&mut s.addresses, &mut s.not_ready_addresses] {
            if let Some(l) = list.as_mut() {
                l.sort_by(address_order);
            }
        }
        if let Some(p) = s.ports.as_mut() {
            p.sort_by_cached_key(|p| md5(spew_port(p, true).as_bytes()));
        }
    }
    subsets.sort_by_cached_key(|s| md5(spew_subset(s).as_bytes()));
}

/// Keep at most MAX_CAPACITY addresses, each subset keeping its share (rounded up), ready
/// addresses first; whether anything was cut.
fn truncate(subsets: &mut [EndpointSubset]) -> bool {
    let count = |l: &Option<Vec<EndpointAddress>>| l.as_ref().map_or(0, Vec::len);
    let ready: usize = subsets.iter().map(|s| count(&s.addresses)).sum();
    let not_ready: usize = subsets.iter().map(|s| count(&s.not_ready_addresses)).sum();
    if ready + not_ready <= MAX_CAPACITY {
        return false;
    }
    let truncate_ready = ready > MAX_CAPACITY;
    let (max, total) = if truncate_ready {
        (MAX_CAPACITY, ready)
    } else {
        (MAX_CAPACITY - ready, not_ready)
    };
    let mut room = max;
    for s in subsets.iter_mut() {
        let list = if truncate_ready {
            &mut s.addresses
        } else {
            &mut s.not_ready_addresses
        };
        let n = count(list);
        let share = (n as f64 / total as f64 * max as f64).ceil() as usize;
        let keep = share.min(room);
        if let Some(l) = list.as_mut() {
            l.truncate(keep);
        }
        room -= count(list).min(room);
        if truncate_ready {
            s.not_ready_addresses = None;
        }
    }
    true
}

/// Whether the over-capacity annotation is as it should be (absent: the Endpoints is not
/// over capacity).
fn capacity_annotation_correct(e: &Endpoints) -> bool {
    let n: usize = e
        .subsets
        .iter()
        .flatten()
        .map(|s| {
            s.addresses.as_ref().map_or(0, Vec::len)
                + s.not_ready_addresses.as_ref().map_or(0, Vec::len)
        })
        .sum();
    n <= MAX_CAPACITY
        && !e
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANNOTATION_OVER_CAPACITY))
}

/// Subsets compared as Kubernetes does: empty lists equal missing ones, pod resource
/// versions ignored.
fn subsets_equal(a: &[EndpointSubset], b: &[EndpointSubset]) -> bool {
    fn norm_addrs(l: &Option<Vec<EndpointAddress>>) -> Vec<EndpointAddress> {
        l.iter()
            .flatten()
            .map(|a| {
                let mut a = a.clone();
                if let Some(r) = a.target_ref.as_mut() {
                    r.resource_version = None;
                }
                a.hostname = a.hostname.filter(|h| !h.is_empty());
                a
            })
            .collect()
    }
    fn norm(
        s: &EndpointSubset,
    ) -> (
        Vec<EndpointAddress>,
        Vec<EndpointAddress>,
        Vec<EndpointPort>,
    ) {
        let ports = s
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: p.name.clone().filter(|n| !n.is_empty()),
                ..p.clone()
            })
            .collect();
        (
            norm_addrs(&s.addresses),
            norm_addrs(&s.not_ready_addresses),
            ports,
        )
    }
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| norm(x) == norm(y))
}

// ---------------------------------------------------------------------------------------------
// The order Kubernetes gives ports and subsets: MD5 of their go-spew `%#v` form.
// ---------------------------------------------------------------------------------------------

fn spew_port(p: &EndpointPort, top: bool) -> String {
    format!(
        "{}{{Name:(string){} Port:(int32){} Protocol:(v1.Protocol){} AppProtocol:{}}}",
        if top { "(v1.EndpointPort)" } else { "" },
        p.name.as_deref().unwrap_or_default(),
        p.port,
        p.protocol.as_deref().unwrap_or_default(),
        spew_ptr("*string", p.app_protocol.as_deref()),
    )
}

fn spew_object_ref(r: Option<&ObjectReference>) -> String {
    match r {
        None => "(*v1.ObjectReference)<nil>".into(),
        Some(r) => format!(
            "(*v1.ObjectReference){{Kind:(string){} Namespace:(string){} Name:(string){} UID:(types.UID){} APIVersion:(string){} ResourceVersion:(string){} FieldPath:(string){}}}",
            r.kind.as_deref().unwrap_or_default(),
            r.namespace.as_deref().unwrap_or_default(),
            r.name.as_deref().unwrap_or_default(),
            r.uid.as_deref().unwrap_or_default(),
            r.api_version.as_deref().unwrap_or_default(),
            r.resource_version.as_deref().unwrap_or_default(),
            r.field_path.as_deref().unwrap_or_default(),
        ),
    }
}

fn spew_address(a: &EndpointAddress) -> String {
    format!(
        "{{IP:(string){} Hostname:(string){} NodeName:{} TargetRef:{}}}",
        a.ip,
        a.hostname.as_deref().unwrap_or_default(),
        spew_ptr("*string", a.node_name.as_deref()),
        spew_object_ref(a.target_ref.as_ref()),
    )
}

fn spew_list<T>(ty: &str, l: Option<&Vec<T>>, f: impl Fn(&T) -> String) -> String {
    match l {
        None => format!("({ty})<nil>"),
        Some(l) => {
            let items: Vec<String> = l.iter().map(f).collect();
            format!("({ty})[{}]", items.join(" "))
        }
    }
}

fn spew_subset(s: &EndpointSubset) -> String {
    format!(
        "(v1.EndpointSubset){{Addresses:{} NotReadyAddresses:{} Ports:{}}}",
        spew_list("[]v1.EndpointAddress", s.addresses.as_ref(), spew_address),
        spew_list(
            "[]v1.EndpointAddress",
            s.not_ready_addresses.as_ref(),
            spew_address
        ),
        spew_list("[]v1.EndpointPort", s.ports.as_ref(), |p| spew_port(
            p, false
        )),
    )
}

/// MD5 (RFC 1321).
pub(crate) fn md5(data: &[u8]) -> [u8; 16] {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k: Vec<u32> = (0..64)
        .map(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let mut msg = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_le_bytes());
    let (mut a0, mut b0, mut c0, mut d0) =
        (0x67452301u32, 0xefcdab89u32, 0x98badcfeu32, 0x10325476u32);
    for chunk in msg.chunks(64) {
        let m: Vec<u32> = chunk
            .chunks(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let (mut a, mut b, mut c, mut d) = (a0, b0, c0, d0);
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(S[i]));
        }
        a0 = a0.wrapping_add(a);
        b0 = b0.wrapping_add(b);
        c0 = c0.wrapping_add(c);
        d0 = d0.wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, w) in [a0, b0, c0, d0].iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodCondition, PodIP, PodSpec, PodStatus, ServicePort, ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn hex(b: [u8; 16]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn md5_matches_rfc1321() {
        assert_eq!(hex(md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(md5(b"abc")), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            hex(md5(
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890"
            )),
            "57edf4a22be3c955ac49da2e2107b67a"
        );
    }

    fn addr(ip: &str, uid: Option<&str>) -> EndpointAddress {
        EndpointAddress {
            ip: ip.into(),
            target_ref: uid.map(|u| ObjectReference {
                uid: Some(u.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn port(n: i32) -> EndpointPort {
        EndpointPort {
            port: n,
            ..Default::default()
        }
    }

    fn subset(ready: &[EndpointAddress], not: &[EndpointAddress], ports: &[i32]) -> EndpointSubset {
        EndpointSubset {
            addresses: (!ready.is_empty()).then(|| ready.to_vec()),
            not_ready_addresses: (!not.is_empty()).then(|| not.to_vec()),
            ports: Some(ports.iter().map(|p| port(*p)).collect()),
        }
    }

    fn ports_of(s: &EndpointSubset) -> Vec<i32> {
        let mut v: Vec<i32> = s.ports.iter().flatten().map(|p| p.port).collect();
        v.sort();
        v
    }

    #[test]
    fn repack_groups_addresses_by_shared_ports() {
        // Two addresses on 111, one on 222 and 333.
        let out = repack_subsets(vec![
            subset(&[addr("1.2.3.4", None)], &[], &[111]),
            subset(&[addr("1.2.3.5", None)], &[], &[222]),
            subset(&[addr("1.2.3.6", None)], &[], &[111]),
            subset(&[addr("1.2.3.5", None)], &[], &[333]),
        ]);
        assert_eq!(out.len(), 2);
        let with = |p: i32| out.iter().find(|s| ports_of(s).contains(&p)).unwrap();
        let ips: Vec<_> = with(111)
            .addresses
            .iter()
            .flatten()
            .map(|a| a.ip.as_str())
            .collect();
        assert_eq!(ips, vec!["1.2.3.4", "1.2.3.6"]);
        assert_eq!(ports_of(with(222)), vec![222, 333]);

        // Not ready wins; duplicates collapse; the same IP for two pods stays twice.
        let out = repack_subsets(vec![
            subset(&[addr("1.2.3.4", None)], &[], &[111]),
            subset(&[], &[addr("1.2.3.4", None)], &[111]),
            subset(
                &[addr("5.6.7.8", Some("b")), addr("5.6.7.8", Some("a"))],
                &[],
                &[111],
            ),
        ]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].not_ready_addresses.as_ref().unwrap().len(), 1);
        let uids: Vec<_> = out[0]
            .addresses
            .iter()
            .flatten()
            .map(|a| target_uid(a).unwrap())
            .collect();
        assert_eq!(uids, vec!["a", "b"]);

        // A headless service without ports keeps its addresses, without ports.
        let out = repack_subsets(vec![EndpointSubset {
            addresses: Some(vec![addr("1.2.3.4", None)]),
            ..Default::default()
        }]);
        assert_eq!(out.len(), 1);
        assert!(out[0].ports.is_none());
        assert!(repack_subsets(vec![subset(&[], &[], &[80])]).is_empty());
    }

    #[test]
    fn spew_forms_are_gos() {
        let p = EndpointPort {
            name: Some("http".into()),
            port: 80,
            protocol: Some("TCP".into()),
            app_protocol: None,
        };
        assert_eq!(
            spew_port(&p, true),
            "(v1.EndpointPort){Name:(string)http Port:(int32)80 Protocol:(v1.Protocol)TCP AppProtocol:(*string)<nil>}"
        );
        let s = EndpointSubset {
            addresses: Some(vec![EndpointAddress {
                ip: "10.0.0.1".into(),
                node_name: Some("n1".into()),
                ..Default::default()
            }]),
            not_ready_addresses: None,
            ports: Some(vec![p]),
        };
        assert_eq!(
            spew_subset(&s),
            "(v1.EndpointSubset){Addresses:([]v1.EndpointAddress)[{IP:(string)10.0.0.1 Hostname:(string) NodeName:(*string)n1 TargetRef:(*v1.ObjectReference)<nil>}] NotReadyAddresses:([]v1.EndpointAddress)<nil> Ports:([]v1.EndpointPort)[{Name:(string)http Port:(int32)80 Protocol:(v1.Protocol)TCP AppProtocol:(*string)<nil>}]}"
        );
    }

    #[test]
    fn truncation_keeps_ready_addresses_first() {
        let many = |prefix: &str, n: usize| -> Vec<EndpointAddress> {
            (0..n)
                .map(|i| addr(&format!("{prefix}.{}.{}", i / 250, i % 250), None))
                .collect()
        };
        let mut subsets = vec![
            subset(&many("10.1", 600), &many("10.2", 300), &[80]),
            subset(&many("10.3", 300), &many("10.4", 300), &[81]),
        ];
        assert!(truncate(&mut subsets));
        let total: usize = subsets
            .iter()
            .map(|s| {
                s.addresses.as_ref().map_or(0, Vec::len)
                    + s.not_ready_addresses.as_ref().map_or(0, Vec::len)
            })
            .sum();
        assert_eq!(total, MAX_CAPACITY);
        let ready: usize = subsets
            .iter()
            .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
            .sum();
        assert_eq!(ready, 900, "all ready addresses kept");
        // 100 not-ready slots shared in proportion (50/50).
        assert_eq!(subsets[0].not_ready_addresses.as_ref().unwrap().len(), 50);

        let mut small = vec![subset(&many("10.1", 10), &[], &[80])];
        assert!(!truncate(&mut small));
    }

    fn svc(target: IntOrString, headless: bool) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some(BTreeMap::from([("app".into(), "web".into())])),
                cluster_ip: Some(if headless { "None" } else { "10.96.0.1" }.into()),
                ip_families: Some(vec!["IPv4".into()]),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    protocol: Some("TCP".into()),
                    target_port: Some(target),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn pod(name: &str, ip: &str, ready: bool, container_port: i32) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                hostname: Some(name.into()),
                subdomain: Some("web".into()),
                containers: vec![Container {
                    name: "c".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("http".into()),
                        container_port,
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some(ip.into()),
                pod_ips: Some(vec![PodIP { ip: ip.into() }]),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    #[test]
    fn named_ports_resolve_per_pod() {
        let s = svc(IntOrString::String("http".into()), false);
        let pods = vec![
            pod("a", "10.0.0.2", true, 8080),
            pod("b", "10.0.0.1", true, 9090),
            pod("c", "10.0.0.3", false, 8080),
        ];
        let subsets = desired_subsets(&s, &pods);
        assert_eq!(subsets.len(), 2, "two distinct resolved ports");
        let on = |p: i32| subsets.iter().find(|s| ports_of(s) == vec![p]).unwrap();
        let s8080 = on(8080);
        assert_eq!(s8080.addresses.as_ref().unwrap()[0].ip, "10.0.0.2");
        assert_eq!(
            s8080.not_ready_addresses.as_ref().unwrap()[0].ip,
            "10.0.0.3"
        );
        let a = &s8080.addresses.as_ref().unwrap()[0];
        assert_eq!(a.hostname.as_deref(), Some("a"), "subdomain is the service");
        assert_eq!(a.node_name.as_deref(), Some("n1"));
        assert_eq!(a.target_ref.as_ref().unwrap().name.as_deref(), Some("a"));
        assert_eq!(on(9090).addresses.as_ref().unwrap()[0].ip, "10.0.0.1");
    }

    #[test]
    fn headless_services_without_ports_list_addresses() {
        let mut s = svc(IntOrString::Int(80), true);
        s.spec.as_mut().unwrap().ports = None;
        let subsets = desired_subsets(&s, &[pod("a", "10.0.0.2", true, 80)]);
        assert_eq!(subsets.len(), 1);
        assert!(subsets[0].ports.is_none());
        // Not headless and no ports: nothing.
        let mut s = svc(IntOrString::Int(80), false);
        s.spec.as_mut().unwrap().ports = None;
        assert!(desired_subsets(&s, &[pod("a", "10.0.0.2", true, 80)]).is_empty());
    }

    #[test]
    fn publish_not_ready_and_terminating_pods() {
        let mut s = svc(IntOrString::Int(80), false);
        let mut gone = (*pod("t", "10.0.0.9", true, 80)).clone();
        gone.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let pods = vec![pod("u", "10.0.0.8", false, 80), Arc::new(gone)];
        let subsets = desired_subsets(&s, &pods);
        assert_eq!(subsets.len(), 1);
        assert!(subsets[0].addresses.is_none());
        assert_eq!(subsets[0].not_ready_addresses.as_ref().unwrap().len(), 1);
        s.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
        let subsets = desired_subsets(&s, &pods);
        assert_eq!(subsets[0].addresses.as_ref().unwrap().len(), 2);
        assert!(subsets[0].not_ready_addresses.is_none());
    }

    #[test]
    fn comparison_ignores_resource_versions_and_empty_lists() {
        let mut a = subset(&[addr("1.2.3.4", Some("u"))], &[], &[80]);
        let mut b = a.clone();
        b.addresses.as_mut().unwrap()[0]
            .target_ref
            .as_mut()
            .unwrap()
            .resource_version = Some("7".into());
        b.not_ready_addresses = Some(vec![]);
        assert!(subsets_equal(&[a.clone()], &[b]));
        a.ports = Some(vec![port(81)]);
        assert!(!subsets_equal(
            &[a],
            &[subset(&[addr("1.2.3.4", Some("u"))], &[], &[80])]
        ));
    }
}
