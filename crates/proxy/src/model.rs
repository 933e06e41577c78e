//! From API objects to a [`Snapshot`], as kube-proxy's service and endpoints change trackers
//! do (pkg/proxy/servicechangetracker.go, endpointschangetracker.go, endpointslicecache.go).
//!
//! [`Tracker`] is fed every Service and EndpointSlice change the informers see. It keeps, per
//! Service (`namespace/name`), the ports it last read from the Service and the endpoints of
//! each of its EndpointSlices, and remembers which Services changed. [`Tracker::apply`]
//! patches a [`Snapshot`] for those Services only: one changed object among 10,000 Services
//! costs the work of one Service, and every entry of the snapshot that did not change keeps its
//! `Arc`, so backends can skip it with `Arc::ptr_eq`.
//!
//! What kube-proxy does and this does too:
//! - Services without a cluster IP (headless, `None`) and ExternalName Services are skipped.
//! - Only IPv4 is proxied: a Service's IPv4 cluster IP (a Service with none is skipped), its
//!   IPv4 external IPs, load balancer ingress IPs (in VIP mode) and source ranges. EndpointSlices
//!   whose `addressType` is not `IPv4` (`IPv6`, `FQDN`) are ignored, and so are endpoints whose
//!   address is not IPv4.
//! - Slices join their Service by the `kubernetes.io/service-name` label, and service ports by
//!   port name and protocol; several slices of one Service merge; an endpoint in two slices
//!   (while it moves between them) counts once, preferring the copy on this node.
//! - Endpoint conditions: `ready` nil is true, `serving` nil is true, `terminating` nil is false
//!   (as kube-proxy reads them).
//! - Slice ports without a name or a port number are ignored, as kube-proxy ignores them.
//! - sessionAffinity ClientIP times out after `sessionAffinityConfig.clientIP.timeoutSeconds`,
//!   10800 (3 hours) by default.
//! - externalTrafficPolicy Local counts only for Services reachable from outside (NodePort,
//!   LoadBalancer, or with external IPs); the health check node port only for LoadBalancer
//!   Services with it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::{Endpoint, Protocol, ServicePort, ServicePortName, Snapshot};

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The default sessionAffinity ClientIP timeout (3 hours), as the API server defaults it.
pub const DEFAULT_AFFINITY_SECONDS: u32 = 10800;

/// `namespace/name` of a Service.
type ServiceKey = (String, String);

/// The ports of one EndpointSlice with the endpoints it lists for them.
#[derive(Debug, PartialEq, Eq)]
struct SliceInfo {
    /// (port name, protocol, port number).
    ports: Vec<(String, Protocol, u16)>,
    /// IPv4 endpoints: address, conditions, node (no port yet).
    endpoints: Vec<SliceEndpoint>,
}

#[derive(Debug, PartialEq, Eq)]
struct SliceEndpoint {
    ip: IpAddr,
    ready: bool,
    serving: bool,
    terminating: bool,
    node_name: Option<String>,
}

/// What the tracker knows of one Service: its ports (empty when the Service is absent or not
/// proxied) and its slices by name.
#[derive(Default)]
struct ServiceState {
    ports: Vec<Arc<ServicePort>>,
    slices: HashMap<String, Arc<SliceInfo>>,
}

/// Keeps the state of every Service and EndpointSlice and turns changes into snapshot patches.
pub struct Tracker {
    node_name: String,
    services: HashMap<ServiceKey, ServiceState>,
    /// Services whose snapshot entries are stale.
    dirty: HashSet<ServiceKey>,
}

impl Tracker {
    /// A tracker for the proxy on node `node_name` (an endpoint listed twice is taken from the
    /// copy on this node).
    pub fn new(node_name: impl Into<String>) -> Tracker {
        Tracker {
            node_name: node_name.into(),
            services: HashMap::new(),
            dirty: HashSet::new(),
        }
    }

    /// A Service was added or updated (`Some`) or deleted (`None` for `new`, the last seen
    /// object as `old`). Returns whether the proxy's view changed.
    pub fn on_service(&mut self, old: Option<&Service>, new: Option<&Service>) -> bool {
        let Some(any) = new.or(old) else {
            return false;
        };
        let key = (
            any.metadata.namespace.clone().unwrap_or_default(),
            any.metadata.name.clone().unwrap_or_default(),
        );
        let ports = new.map(service_ports).unwrap_or_default();
        let state = self.services.entry(key.clone()).or_default();
        let same = state.ports.len() == ports.len()
            && state.ports.iter().zip(&ports).all(|(a, b)| **a == *b);
        if same {
            self.forget_if_empty(&key);
            return false;
        }
        state.ports = ports.into_iter().map(Arc::new).collect();
        self.dirty.insert(key.clone());
        self.forget_if_empty(&key);
        true
    }

    /// An EndpointSlice was added or updated (`new` is `Some`) or deleted. Returns whether the
    /// proxy's view changed.
    pub fn on_slice(&mut self, old: Option<&EndpointSlice>, new: Option<&EndpointSlice>) -> bool {
        let mut changed = false;
        // A slice relabelled to another Service leaves the old one.
        if let Some(old) = old {
            if let Some((old_key, name)) = slice_keys(old) {
                let moved = new.and_then(slice_keys).map(|(k, _)| k) != Some(old_key.clone());
                if moved || new.is_none() {
                    changed |= self.remove_slice(&old_key, &name);
                }
            }
        }
        let Some(new) = new else {
            return changed;
        };
        let Some((key, name)) = slice_keys(new) else {
            tracing::warn!(
                slice = %format!("{}/{}", new.metadata.namespace.as_deref().unwrap_or(""),
                    new.metadata.name.as_deref().unwrap_or("")),
                "ignoring an EndpointSlice without the {SERVICE_NAME_LABEL} label"
            );
            return changed;
        };
        if new.address_type != "IPv4" {
            if old.is_none() {
                tracing::info!(
                    slice = %format!("{}/{}", key.0, name),
                    address_type = %new.address_type,
                    "ignoring an EndpointSlice that is not IPv4: this proxy serves IPv4 only"
                );
            }
            return self.remove_slice(&key, &name) || changed;
        }
        let info = slice_info(new);
        let state = self.services.entry(key.clone()).or_default();
        if state.slices.get(&name).is_some_and(|s| **s == info) {
            return changed;
        }
        state.slices.insert(name, Arc::new(info));
        self.dirty.insert(key);
        true
    }

    fn remove_slice(&mut self, key: &ServiceKey, name: &str) -> bool {
        let Some(state) = self.services.get_mut(key) else {
            return false;
        };
        if state.slices.remove(name).is_none() {
            return false;
        }
        self.dirty.insert(key.clone());
        self.forget_if_empty(key);
        true
    }

    /// Drop the state of a Service that has neither ports nor slices (it stays dirty, so that
    /// its snapshot entries go).
    fn forget_if_empty(&mut self, key: &ServiceKey) {
        if self
            .services
            .get(key)
            .is_some_and(|s| s.ports.is_empty() && s.slices.is_empty())
        {
            self.services.remove(key);
        }
    }

    /// Whether some change has not been applied to a snapshot yet.
    pub fn has_pending(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// How many Services are known (with ports or slices).
    pub fn len(&self) -> usize {
        self.services.len()
    }

    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// Bring `snapshot` up to date with every change since the last call, touching only the
    /// entries of Services that changed. Returns how many Services were updated.
    pub fn apply(&mut self, snapshot: &mut Snapshot) -> usize {
        let dirty: Vec<ServiceKey> = self.dirty.drain().collect();
        for key in &dirty {
            let empty = ServiceState::default();
            let state = self.services.get(key).unwrap_or(&empty);
            let endpoints = merge_endpoints(state, &self.node_name);
            patch(
                &mut snapshot.services,
                key,
                state.ports.iter().map(|p| (p.name.clone(), p.clone())),
            );
            patch(
                &mut snapshot.endpoints,
                key,
                endpoints
                    .into_iter()
                    .map(|(name, eps)| (name, Arc::new(eps))),
            );
        }
        dirty.len()
    }

    /// A snapshot of everything, built from scratch (tests and first syncs).
    pub fn snapshot(&mut self) -> Snapshot {
        self.dirty.extend(self.services.keys().cloned());
        let mut snapshot = Snapshot::default();
        self.apply(&mut snapshot);
        snapshot
    }
}

/// Replace the entries of Service `key` in `map` by `new`, keeping the `Arc` of every entry
/// whose value did not change.
fn patch<V: PartialEq>(
    map: &mut BTreeMap<ServicePortName, Arc<V>>,
    key: &ServiceKey,
    new: impl Iterator<Item = (ServicePortName, Arc<V>)>,
) {
    let start = ServicePortName {
        namespace: key.0.clone(),
        name: key.1.clone(),
        port: String::new(),
        protocol: Protocol::Tcp,
    };
    let mut old: HashMap<ServicePortName, Arc<V>> = HashMap::new();
    let stale: Vec<ServicePortName> = map
        .range(start..)
        .take_while(|(k, _)| k.namespace == key.0 && k.name == key.1)
        .map(|(k, _)| k.clone())
        .collect();
    for k in stale {
        if let Some(v) = map.remove(&k) {
            old.insert(k, v);
        }
    }
    for (name, value) in new {
        let value = match old.remove(&name) {
            Some(prev) if *prev == *value => prev,
            _ => value,
        };
        map.insert(name, value);
    }
}

/// The endpoints of every port of a Service that the Service has, merged over its slices,
/// de-duplicated by address and port and sorted.
fn merge_endpoints(state: &ServiceState, node: &str) -> BTreeMap<ServicePortName, Vec<Endpoint>> {
    let mut out = BTreeMap::new();
    for port in &state.ports {
        let mut by_addr: BTreeMap<(IpAddr, u16), Endpoint> = BTreeMap::new();
        for slice in state.slices.values() {
            for (name, protocol, number) in &slice.ports {
                if *name != port.name.port || *protocol != port.name.protocol {
                    continue;
                }
                for e in &slice.endpoints {
                    let local = !node.is_empty() && e.node_name.as_deref() == Some(node);
                    let entry = Endpoint {
                        ip: e.ip,
                        port: *number,
                        ready: e.ready,
                        serving: e.serving,
                        terminating: e.terminating,
                        node_name: e.node_name.clone(),
                    };
                    match by_addr.get(&(e.ip, *number)) {
                        Some(_) if !local => {}
                        _ => {
                            by_addr.insert((e.ip, *number), entry);
                        }
                    }
                }
            }
        }
        if !by_addr.is_empty() {
            out.insert(port.name.clone(), by_addr.into_values().collect());
        }
    }
    out
}

/// (Service key, slice name) of a slice, if it names its Service.
fn slice_keys(slice: &EndpointSlice) -> Option<(ServiceKey, String)> {
    let service = slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    let namespace = slice.metadata.namespace.as_deref().unwrap_or_default();
    let name = slice.metadata.name.as_deref().unwrap_or_default();
    if service.is_empty() || namespace.is_empty() || name.is_empty() {
        return None;
    }
    Some(((namespace.to_string(), service.clone()), name.to_string()))
}

fn slice_info(slice: &EndpointSlice) -> SliceInfo {
    let mut ports: Vec<(String, Protocol, u16)> = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            // kube-proxy ignores ports without a name (the controller writes "" for a
            // Service's unnamed port) and without a usable number.
            let name = p.name.clone()?;
            let number = u16::try_from(p.port?).ok().filter(|n| *n != 0)?;
            let protocol = protocol(p.protocol.as_deref())?;
            Some((name, protocol, number))
        })
        .collect();
    ports.sort();
    ports.dedup();
    let mut endpoints: Vec<SliceEndpoint> = slice
        .endpoints
        .iter()
        .filter_map(|e| {
            let ip: Ipv4Addr = e.addresses.first()?.trim().parse().ok()?;
            let c = e.conditions.as_ref();
            Some(SliceEndpoint {
                ip: IpAddr::V4(ip),
                ready: c.and_then(|c| c.ready).unwrap_or(true),
                serving: c.and_then(|c| c.serving).unwrap_or(true),
                terminating: c.and_then(|c| c.terminating).unwrap_or(false),
                node_name: e.node_name.clone(),
            })
        })
        .collect();
    endpoints.sort_by(|a, b| (a.ip, &a.node_name).cmp(&(b.ip, &b.node_name)));
    SliceInfo { ports, endpoints }
}

/// A protocol as the API spells it; TCP when absent (the API server's default).
fn protocol(p: Option<&str>) -> Option<Protocol> {
    match p.unwrap_or("TCP") {
        "TCP" => Some(Protocol::Tcp),
        "UDP" => Some(Protocol::Udp),
        "SCTP" => Some(Protocol::Sctp),
        _ => None,
    }
}

fn parse_v4(s: &str) -> Option<IpAddr> {
    s.trim().parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The service ports the proxy serves for `svc` (none for Services it skips).
pub fn service_ports(svc: &Service) -> Vec<ServicePort> {
    let Some(spec) = svc.spec.as_ref() else {
        return Vec::new();
    };
    let type_ = spec.type_.as_deref().unwrap_or("ClusterIP");
    if type_ == "ExternalName" {
        return Vec::new();
    }
    let primary = spec.cluster_ip.as_deref().unwrap_or("");
    if primary.is_empty() || primary == "None" {
        return Vec::new();
    }
    // The IPv4 one of spec.clusterIPs (or spec.clusterIP on old objects without the list).
    let cluster_ips: Vec<IpAddr> = match spec.cluster_ips.as_deref() {
        Some(ips) if !ips.is_empty() => ips.iter().filter_map(|s| parse_v4(s)).take(1).collect(),
        _ => parse_v4(primary).into_iter().collect(),
    };
    if cluster_ips.is_empty() {
        return Vec::new();
    }
    let external_ips: Vec<IpAddr> = spec
        .external_ips
        .iter()
        .flatten()
        .filter_map(|s| parse_v4(s))
        .collect();
    let load_balancer_ips: Vec<IpAddr> = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter(|i| matches!(i.ip_mode.as_deref(), None | Some("VIP")))
        .filter_map(|i| i.ip.as_deref().and_then(parse_v4))
        .collect();
    let load_balancer_source_ranges: Vec<String> = spec
        .load_balancer_source_ranges
        .iter()
        .flatten()
        .map(|r| r.trim().to_string())
        .filter(|r| !r.contains(':') && !r.is_empty())
        .collect();
    let session_affinity_seconds =
        (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
            spec.session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .and_then(|t| u32::try_from(t).ok())
                .filter(|t| *t > 0)
                .unwrap_or(DEFAULT_AFFINITY_SECONDS)
        });
    let externally_accessible = type_ == "LoadBalancer"
        || type_ == "NodePort"
        || (type_ == "ClusterIP" && !external_ips.is_empty());
    let external_policy_local =
        externally_accessible && spec.external_traffic_policy.as_deref() == Some("Local");
    let internal_policy_local = spec.internal_traffic_policy.as_deref() == Some("Local");
    let health_check_node_port = if type_ == "LoadBalancer" && external_policy_local {
        spec.health_check_node_port
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
    } else {
        None
    };
    let namespace = svc.metadata.namespace.clone().unwrap_or_default();
    let name = svc.metadata.name.clone().unwrap_or_default();
    let mut out: Vec<ServicePort> = Vec::new();
    for p in spec.ports.iter().flatten() {
        let Some(protocol) = protocol(p.protocol.as_deref()) else {
            continue;
        };
        let Some(port) = u16::try_from(p.port).ok().filter(|p| *p != 0) else {
            continue;
        };
        let port_name = ServicePortName {
            namespace: namespace.clone(),
            name: name.clone(),
            port: p.name.clone().unwrap_or_default(),
            protocol,
        };
        if out.iter().any(|o| o.name == port_name) {
            continue;
        }
        out.push(ServicePort {
            name: port_name,
            cluster_ips: cluster_ips.clone(),
            port,
            node_port: p
                .node_port
                .and_then(|n| u16::try_from(n).ok())
                .filter(|n| *n != 0),
            external_ips: external_ips.clone(),
            load_balancer_ips: load_balancer_ips.clone(),
            load_balancer_source_ranges: load_balancer_source_ranges.clone(),
            session_affinity_seconds,
            external_policy_local,
            internal_policy_local,
            health_check_node_port,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(json: &str) -> Service {
        serde_json::from_str(json).expect("a Service")
    }

    fn slice(json: &str) -> EndpointSlice {
        serde_json::from_str(json).expect("an EndpointSlice")
    }

    fn spn(ns: &str, name: &str, port: &str, protocol: Protocol) -> ServicePortName {
        ServicePortName {
            namespace: ns.into(),
            name: name.into(),
            port: port.into(),
            protocol,
        }
    }

    const WEB: &str = r#"{"metadata":{"namespace":"default","name":"web"},
        "spec":{"type":"ClusterIP","clusterIP":"10.96.0.10","clusterIPs":["10.96.0.10"],
        "ports":[{"name":"http","port":80,"protocol":"TCP"},
                 {"name":"dns","port":53,"protocol":"UDP"}]}}"#;

    fn web_slice(name: &str, ips: &[&str]) -> EndpointSlice {
        let eps: Vec<String> = ips
            .iter()
            .map(|ip| {
                format!(r#"{{"addresses":["{ip}"],"conditions":{{"ready":true}},"nodeName":"n1"}}"#)
            })
            .collect();
        slice(&format!(
            r#"{{"metadata":{{"namespace":"default","name":"{name}",
                "labels":{{"kubernetes.io/service-name":"web"}}}},
              "addressType":"IPv4",
              "ports":[{{"name":"http","port":8080,"protocol":"TCP"}},
                       {{"name":"dns","port":5353,"protocol":"UDP"}}],
              "endpoints":[{}]}}"#,
            eps.join(",")
        ))
    }

    #[test]
    fn service_ports_and_defaults() {
        let s = svc(WEB);
        let ports = service_ports(&s);
        assert_eq!(ports.len(), 2);
        let http = ports
            .iter()
            .find(|p| p.name.port == "http")
            .expect("the http port");
        assert_eq!(http.name.protocol, Protocol::Tcp);
        assert_eq!(
            http.cluster_ips,
            vec!["10.96.0.10".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(http.port, 80);
        assert_eq!(http.node_port, None);
        assert_eq!(http.session_affinity_seconds, None);
        assert!(!http.external_policy_local && !http.internal_policy_local);

        let affinity = svc(r#"{"metadata":{"namespace":"a","name":"b"},
            "spec":{"clusterIP":"10.0.0.1","sessionAffinity":"ClientIP",
            "ports":[{"port":80}]}}"#);
        let p = &service_ports(&affinity)[0];
        assert_eq!(p.session_affinity_seconds, Some(DEFAULT_AFFINITY_SECONDS));
        assert_eq!(p.name.port, "");
        assert_eq!(p.name.protocol, Protocol::Tcp, "protocol defaults to TCP");
        let timed = svc(r#"{"metadata":{"namespace":"a","name":"b"},
            "spec":{"clusterIP":"10.0.0.1","sessionAffinity":"ClientIP",
            "sessionAffinityConfig":{"clientIP":{"timeoutSeconds":30}},
            "ports":[{"port":80}]}}"#);
        assert_eq!(service_ports(&timed)[0].session_affinity_seconds, Some(30));
    }

    #[test]
    fn skipped_services() {
        for spec in [
            r#"{"clusterIP":"None","ports":[{"port":80}]}"#,
            r#"{"clusterIP":"","ports":[{"port":80}]}"#,
            r#"{"type":"ExternalName","externalName":"example.com","ports":[{"port":80}]}"#,
            r#"{"clusterIP":"fd00::1","clusterIPs":["fd00::1"],"ports":[{"port":80}]}"#,
        ] {
            let s = svc(&format!(
                r#"{{"metadata":{{"namespace":"a","name":"b"}},"spec":{spec}}}"#
            ));
            assert!(service_ports(&s).is_empty(), "{spec} is not proxied");
        }
        // Dual-stack: the IPv4 address, wherever it is in the list.
        let dual = svc(r#"{"metadata":{"namespace":"a","name":"b"},
            "spec":{"clusterIP":"fd00::1","clusterIPs":["fd00::1","10.0.0.7"],"ports":[{"port":80}]}}"#);
        assert_eq!(
            service_ports(&dual)[0].cluster_ips,
            vec!["10.0.0.7".parse::<IpAddr>().unwrap()]
        );
    }

    #[test]
    fn external_fields_and_policies() {
        let lb = svc(r#"{"metadata":{"namespace":"a","name":"lb"},
            "spec":{"type":"LoadBalancer","clusterIP":"10.0.0.2",
              "externalIPs":["192.0.2.1","2001:db8::1"],
              "loadBalancerSourceRanges":[" 198.51.100.0/24 ","2001:db8::/32"],
              "externalTrafficPolicy":"Local","internalTrafficPolicy":"Local",
              "healthCheckNodePort":32000,
              "ports":[{"name":"web","port":80,"nodePort":30080}]},
            "status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.5"},
              {"ip":"203.0.113.6","ipMode":"Proxy"},{"hostname":"lb.example.com"}]}}}"#);
        let p = &service_ports(&lb)[0];
        assert_eq!(p.node_port, Some(30080));
        assert_eq!(p.external_ips, vec!["192.0.2.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            p.load_balancer_ips,
            vec!["203.0.113.5".parse::<IpAddr>().unwrap()],
            "Proxy-mode ingress and hostnames are not VIPs"
        );
        assert_eq!(p.load_balancer_source_ranges, vec!["198.51.100.0/24"]);
        assert!(p.external_policy_local && p.internal_policy_local);
        assert_eq!(p.health_check_node_port, Some(32000));

        // externalTrafficPolicy means nothing for a Service not reachable from outside.
        let internal = svc(r#"{"metadata":{"namespace":"a","name":"c"},
            "spec":{"type":"ClusterIP","clusterIP":"10.0.0.3","externalTrafficPolicy":"Local",
              "ports":[{"port":80}]}}"#);
        assert!(!service_ports(&internal)[0].external_policy_local);
        // ...but does for a ClusterIP Service with external IPs.
        let external = svc(r#"{"metadata":{"namespace":"a","name":"c"},
            "spec":{"type":"ClusterIP","clusterIP":"10.0.0.3","externalTrafficPolicy":"Local",
              "externalIPs":["192.0.2.9"],"ports":[{"port":80}]}}"#);
        let p = &service_ports(&external)[0];
        assert!(p.external_policy_local);
        assert_eq!(p.health_check_node_port, None);
    }

    #[test]
    fn slices_join_by_label_port_name_and_protocol() {
        let mut t = Tracker::new("n1");
        assert!(t.on_slice(None, Some(&web_slice("web-a", &["10.1.0.2", "10.1.0.1"]))));
        assert!(t.on_service(None, Some(&svc(WEB))));
        let snap = t.snapshot();
        let http = spn("default", "web", "http", Protocol::Tcp);
        let dns = spn("default", "web", "dns", Protocol::Udp);
        assert_eq!(snap.services.len(), 2);
        let eps = &snap.endpoints[&http];
        assert_eq!(
            eps.iter()
                .map(|e| (e.ip.to_string(), e.port))
                .collect::<Vec<_>>(),
            vec![
                ("10.1.0.1".to_string(), 8080),
                ("10.1.0.2".to_string(), 8080)
            ],
            "sorted by address, with the slice's port number"
        );
        assert_eq!(snap.endpoints[&dns][0].port, 5353);

        // A slice port named like the service port but of another protocol does not join.
        let udp_http = slice(
            r#"{"metadata":{"namespace":"default","name":"web-b",
                "labels":{"kubernetes.io/service-name":"web"}},
              "addressType":"IPv4",
              "ports":[{"name":"http","port":9999,"protocol":"UDP"}],
              "endpoints":[{"addresses":["10.1.0.9"]}]}"#,
        );
        t.on_slice(None, Some(&udp_http));
        let mut snap2 = snap.clone();
        t.apply(&mut snap2);
        assert_eq!(snap2.endpoints[&http].len(), 2);
        assert!(!snap2
            .services
            .contains_key(&spn("default", "web", "http", Protocol::Udp)));
    }

    #[test]
    fn merge_dedup_and_conditions() {
        let mut t = Tracker::new("n2");
        t.on_service(None, Some(&svc(WEB)));
        t.on_slice(None, Some(&web_slice("web-a", &["10.1.0.1", "10.1.0.2"])));
        // The same endpoint in a second slice (moving between slices), on this node there.
        let moving = slice(
            r#"{"metadata":{"namespace":"default","name":"web-b",
                "labels":{"kubernetes.io/service-name":"web"}},
              "addressType":"IPv4",
              "ports":[{"name":"http","port":8080,"protocol":"TCP"}],
              "endpoints":[{"addresses":["10.1.0.2"],"nodeName":"n2"},
                {"addresses":["10.1.0.3"],"conditions":{"ready":false,"serving":true,"terminating":true}},
                {"addresses":["10.1.0.4"],"conditions":{"ready":false}},
                {"addresses":["fd00::5"]},
                {"addresses":[]}]}"#,
        );
        t.on_slice(None, Some(&moving));
        let snap = t.snapshot();
        let eps = &snap.endpoints[&spn("default", "web", "http", Protocol::Tcp)];
        let ips: Vec<String> = eps.iter().map(|e| e.ip.to_string()).collect();
        assert_eq!(ips, vec!["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4"]);
        assert_eq!(
            eps[1].node_name.as_deref(),
            Some("n2"),
            "the local copy wins"
        );
        // Conditions: nil ready is true; nil serving is true; nil terminating is false.
        assert!(eps[1].ready && eps[1].serving && !eps[1].terminating);
        assert!(!eps[2].ready && eps[2].serving && eps[2].terminating);
        assert!(!eps[3].ready && eps[3].serving && !eps[3].terminating);
    }

    #[test]
    fn ignored_slices_and_ports() {
        let mut t = Tracker::new("n1");
        t.on_service(None, Some(&svc(WEB)));
        let v6 = slice(
            r#"{"metadata":{"namespace":"default","name":"web-v6",
                "labels":{"kubernetes.io/service-name":"web"}},
              "addressType":"IPv6",
              "ports":[{"name":"http","port":8080,"protocol":"TCP"}],
              "endpoints":[{"addresses":["fd00::1"]}]}"#,
        );
        let unlabelled = slice(
            r#"{"metadata":{"namespace":"default","name":"stray"},
              "addressType":"IPv4",
              "ports":[{"name":"http","port":8080,"protocol":"TCP"}],
              "endpoints":[{"addresses":["10.9.9.9"]}]}"#,
        );
        let bad_ports = slice(
            r#"{"metadata":{"namespace":"default","name":"web-bad",
                "labels":{"kubernetes.io/service-name":"web"}},
              "addressType":"IPv4",
              "ports":[{"port":8080,"protocol":"TCP"},{"name":"http","protocol":"TCP"},
                       {"name":"http","port":0,"protocol":"TCP"}],
              "endpoints":[{"addresses":["10.9.9.8"]}]}"#,
        );
        assert!(!t.on_slice(None, Some(&v6)));
        assert!(!t.on_slice(None, Some(&unlabelled)));
        t.on_slice(None, Some(&bad_ports));
        let snap = t.snapshot();
        assert!(snap.endpoints.is_empty(), "{:?}", snap.endpoints);
    }

    #[test]
    fn incremental_updates_keep_unchanged_entries() {
        let mut t = Tracker::new("n1");
        let mut snap = Snapshot::default();
        for i in 0..50 {
            let s = svc(&format!(
                r#"{{"metadata":{{"namespace":"ns","name":"s{i}"}},
                "spec":{{"clusterIP":"10.0.1.{i}","ports":[{{"name":"p","port":80}}]}}}}"#
            ));
            t.on_service(None, Some(&s));
            let sl = slice(&format!(
                r#"{{"metadata":{{"namespace":"ns","name":"s{i}-x",
                    "labels":{{"kubernetes.io/service-name":"s{i}"}}}},
                  "addressType":"IPv4","ports":[{{"name":"p","port":8080}}],
                  "endpoints":[{{"addresses":["10.2.0.{i}"]}}]}}"#
            ));
            t.on_slice(None, Some(&sl));
        }
        assert_eq!(t.apply(&mut snap), 50);
        assert_eq!(snap.services.len(), 50);
        assert_eq!(snap.endpoints.len(), 50);
        let before = snap.clone();

        // One slice changes: one Service is redone, every other entry is the same Arc.
        let old = slice(
            r#"{"metadata":{"namespace":"ns","name":"s7-x",
                "labels":{"kubernetes.io/service-name":"s7"}},
              "addressType":"IPv4","ports":[{"name":"p","port":8080}],
              "endpoints":[{"addresses":["10.2.0.7"]}]}"#,
        );
        let new = slice(
            r#"{"metadata":{"namespace":"ns","name":"s7-x",
                "labels":{"kubernetes.io/service-name":"s7"}},
              "addressType":"IPv4","ports":[{"name":"p","port":8080}],
              "endpoints":[{"addresses":["10.2.0.7"]},{"addresses":["10.2.0.77"]}]}"#,
        );
        assert!(t.on_slice(Some(&old), Some(&new)));
        assert!(t.has_pending());
        assert_eq!(t.apply(&mut snap), 1);
        assert!(!t.has_pending());
        let s7 = spn("ns", "s7", "p", Protocol::Tcp);
        assert_eq!(snap.endpoints[&s7].len(), 2);
        for (k, v) in &before.endpoints {
            if *k != s7 {
                assert!(Arc::ptr_eq(v, &snap.endpoints[k]), "{k} kept its Arc");
            }
        }
        assert!(Arc::ptr_eq(&before.services[&s7], &snap.services[&s7]));

        // An update that changes nothing the proxy uses is not a change.
        assert!(!t.on_slice(Some(&new), Some(&new)));
        assert_eq!(t.apply(&mut snap), 0);

        // Deleting the Service removes its port and endpoints; deleting its slice forgets it.
        let s3 = svc(r#"{"metadata":{"namespace":"ns","name":"s3"},
            "spec":{"clusterIP":"10.0.1.3","ports":[{"name":"p","port":80}]}}"#);
        assert!(t.on_service(Some(&s3), None));
        t.apply(&mut snap);
        let s3p = spn("ns", "s3", "p", Protocol::Tcp);
        assert!(!snap.services.contains_key(&s3p));
        assert!(!snap.endpoints.contains_key(&s3p));
        let s3x = slice(
            r#"{"metadata":{"namespace":"ns","name":"s3-x",
                "labels":{"kubernetes.io/service-name":"s3"}},
              "addressType":"IPv4","ports":[{"name":"p","port":8080}],
              "endpoints":[{"addresses":["10.2.0.3"]}]}"#,
        );
        assert!(t.on_slice(Some(&s3x), None));
        t.apply(&mut snap);
        assert_eq!(t.len(), 49);
        assert_eq!(snap.services.len(), 49);
        // The incrementally patched snapshot equals one built from scratch.
        let mut fresh = Tracker::new("n1");
        for k in t.services.keys() {
            fresh.services.insert(
                k.clone(),
                ServiceState {
                    ports: t.services[k].ports.clone(),
                    slices: t.services[k].slices.clone(),
                },
            );
        }
        assert_eq!(fresh.snapshot(), snap);
    }

    #[test]
    fn relabelled_slice_moves_between_services() {
        let mut t = Tracker::new("n1");
        for name in ["a", "b"] {
            t.on_service(
                None,
                Some(&svc(&format!(
                    r#"{{"metadata":{{"namespace":"ns","name":"{name}"}},
                    "spec":{{"clusterIP":"10.0.0.1","ports":[{{"port":80}}]}}}}"#
                ))),
            );
        }
        let labelled = |svc: &str| {
            slice(&format!(
                r#"{{"metadata":{{"namespace":"ns","name":"x",
                    "labels":{{"kubernetes.io/service-name":"{svc}"}}}},
                  "addressType":"IPv4","ports":[{{"name":"","port":8080}}],
                  "endpoints":[{{"addresses":["10.2.0.1"]}}]}}"#
            ))
        };
        t.on_slice(None, Some(&labelled("a")));
        let mut snap = Snapshot::default();
        t.apply(&mut snap);
        let a = spn("ns", "a", "", Protocol::Tcp);
        let b = spn("ns", "b", "", Protocol::Tcp);
        assert!(snap.endpoints.contains_key(&a));
        t.on_slice(Some(&labelled("a")), Some(&labelled("b")));
        t.apply(&mut snap);
        assert!(!snap.endpoints.contains_key(&a));
        assert!(snap.endpoints.contains_key(&b));
    }

    #[test]
    fn one_change_among_ten_thousand_services_patches_one() {
        use k8s_openapi::api::core::v1::{ServicePort as Port, ServiceSpec};
        use k8s_openapi::api::discovery::v1::{Endpoint as Ep, EndpointPort};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let slice_of = |i: usize, extra: bool| EndpointSlice {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(format!("s{i}-x")),
                labels: Some([(SERVICE_NAME_LABEL.to_string(), format!("s{i}"))].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            ports: Some(vec![EndpointPort {
                name: Some("p".into()),
                port: Some(8080),
                ..Default::default()
            }]),
            endpoints: (0..if extra { 3 } else { 2 })
                .map(|k| Ep {
                    addresses: vec![format!("10.{}.{}.{k}", 100 + i / 256, i % 256)],
                    ..Default::default()
                })
                .collect(),
        };
        let mut t = Tracker::new("n1");
        let started = std::time::Instant::now();
        for i in 0..10_000 {
            let svc = Service {
                metadata: ObjectMeta {
                    namespace: Some("ns".into()),
                    name: Some(format!("s{i}")),
                    ..Default::default()
                },
                spec: Some(ServiceSpec {
                    cluster_ip: Some(format!("10.0.{}.{}", i / 256, i % 256)),
                    ports: Some(vec![Port {
                        name: Some("p".into()),
                        port: 80,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            };
            t.on_service(None, Some(&svc));
            t.on_slice(None, Some(&slice_of(i, false)));
        }
        let mut snap = Snapshot::default();
        assert_eq!(t.apply(&mut snap), 10_000);
        let full = started.elapsed();
        let before = snap.clone();
        let started = std::time::Instant::now();
        assert!(t.on_slice(Some(&slice_of(4321, false)), Some(&slice_of(4321, true))));
        assert_eq!(t.apply(&mut snap), 1);
        let one = started.elapsed();
        let changed = spn("ns", "s4321", "p", Protocol::Tcp);
        assert_eq!(snap.endpoints[&changed].len(), 3);
        let shared = before
            .endpoints
            .iter()
            .filter(|(k, v)| Arc::ptr_eq(v, &snap.endpoints[*k]))
            .count();
        assert_eq!(shared, 9_999, "every other service port keeps its entry");
        eprintln!("10,000 services: first build {full:?}; one slice change {one:?}");
    }
}
