//! The cluster's zone, per Kubernetes' DNS specification (kubernetes/dns
//! docs/specification.md, schema 1.1.0) and as CoreDNS's `kubernetes` plugin answers it in a
//! kubeadm cluster (`pods insecure`, `fallthrough in-addr.arpa ip6.arpa`, `ttl 30`):
//!
//! - `<svc>.<ns>.svc.<zone>`: A/AAAA of the cluster IPs; for a headless service the IPs of its
//!   ready endpoints; for an ExternalName service a CNAME to the external name (followed when
//!   the target is in the zone, resolved upstream by the caller otherwise);
//! - `<host>.<svc>.<ns>.svc.<zone>`: an endpoint by hostname (or its IP with dashes);
//! - `_<port>._<proto>.<svc>.<ns>.svc.<zone>` (and the service name itself): SRV, with the
//!   targets' addresses in the additional section;
//! - `<a-b-c-d>.<ns>.pod.<zone>`: the IP written in the name, in an existing namespace;
//! - PTR in in-addr.arpa and ip6.arpa for cluster IPs and endpoint IPs (other reverse names
//!   fall through to the upstream resolvers);
//! - `dns-version.<zone>` TXT, SOA and NS at the apex;
//! - NXDOMAIN (with the SOA) for names in the zone that do not exist, NODATA for names that
//!   exist without records of the asked type.
//!
//! The zone is updated object by object: a change of a Service or of one EndpointSlice
//! rebuilds that service's entry and that slice's reverse records only.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::wire::{rtype, Name, RData, Record};

/// The version of the DNS specification this zone implements (served as `dns-version` TXT).
pub const SCHEMA_VERSION: &str = "1.1.0";

/// How `<ip>.<ns>.pod.<zone>` names are answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodMode {
    /// Not at all (NXDOMAIN).
    Disabled,
    /// With the IP written in the name, without checking that such a pod exists (kubeadm's
    /// `pods insecure`).
    Insecure,
}

/// What the zone is configured with.
#[derive(Clone, Debug)]
pub struct ZoneConfig {
    /// The cluster domain, e.g. `cluster.local`.
    pub domain: Name,
    /// TTL of every record (kubeadm's Corefile: 30).
    pub ttl: u32,
    pub pods: PodMode,
    /// The addresses this server answers on (not loopback): the NS records name the services
    /// whose endpoints have these IPs, or `ns.dns.<zone>` with these IPs.
    pub local_ips: Vec<IpAddr>,
}

/// A Service, reduced to what DNS needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSpec {
    pub kind: ServiceKind,
    pub ports: Vec<PortSpec>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceKind {
    /// Cluster IPs (ClusterIP, NodePort and LoadBalancer services).
    ClusterIp(Vec<IpAddr>),
    /// clusterIP: None.
    Headless,
    /// spec.externalName, as written.
    ExternalName(String),
}

/// A port of a Service or an EndpointSlice; `port` is -1 for "no ports declared".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSpec {
    pub name: String,
    pub protocol: String,
    pub port: i32,
}

impl PortSpec {
    /// The stand-in for an object without ports (A records still exist, SRV records do not).
    pub fn none() -> PortSpec {
        PortSpec {
            name: String::new(),
            protocol: String::new(),
            port: -1,
        }
    }
}

/// An EndpointSlice, reduced to what DNS needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceSpec {
    /// Its kubernetes.io/service-name label.
    pub service: String,
    /// Its ports ([`PortSpec::none`] alone when it declares none).
    pub ports: Vec<PortSpec>,
    /// Its ready addresses (readiness unknown counts as ready).
    pub endpoints: Vec<EndpointSpec>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointSpec {
    pub ip: IpAddr,
    /// The address as the API wrote it (its dashed form names an endpoint without hostname).
    pub raw: String,
    pub hostname: Option<String>,
}

/// What the zone says about a question.
#[derive(Debug)]
pub enum Answer {
    /// Not the zone's to answer: ask the upstream resolvers.
    Forward,
    /// Refused (zone transfers).
    Refused,
    /// Authoritative records. With `chase`, the answer ends in a CNAME to a name outside the
    /// zone that the caller resolves upstream.
    Records {
        answers: Vec<Record>,
        additional: Vec<Record>,
        chase: Option<Chase>,
    },
    /// The name exists without records of this type (the SOA goes in the authority section).
    NoData(Record),
    /// The name does not exist.
    NxDomain(Record),
    /// The name would not exist, but the zone has not seen the cluster's objects yet.
    NotReady(Record),
}

/// A CNAME chain that leaves the zone: resolve `target` (type `qtype`) upstream and answer
/// `cnames` followed by what that gives; if it cannot be resolved, the CNAMEs are left out.
#[derive(Debug)]
pub struct Chase {
    pub cnames: Vec<Record>,
    pub target: Name,
    pub qtype: u16,
}

/// The cluster zone: safe to query from many threads while it is updated.
pub struct Zone {
    cfg: ZoneConfig,
    in_addr: Name,
    ip6: Name,
    ns_name: Name,
    state: RwLock<State>,
    ready: AtomicBool,
    ready_tx: tokio::sync::watch::Sender<bool>,
    serial: AtomicU32,
}

#[derive(Default)]
struct State {
    namespaces: HashSet<String>,
    /// namespace → service name → entry.
    services: HashMap<String, HashMap<String, Arc<Svc>>>,
    /// (namespace, slice name) → slice.
    slices: HashMap<(String, String), Arc<Slice>>,
    /// (namespace, service name) → names of its slices.
    slices_of: HashMap<(String, String), BTreeSet<String>>,
    reverse: HashMap<IpAddr, Rev>,
}

struct Svc {
    name: String,
    namespace: String,
    /// `<svc>.<ns>.svc.<zone>`.
    fqdn: Name,
    kind: Kind,
    ports: Vec<PortSpec>,
    slices: Vec<Arc<Slice>>,
}

enum Kind {
    ClusterIp(Vec<IpAddr>),
    Headless,
    /// The CNAME target; None when it is an IP address or not a valid name (no records).
    ExternalName(Option<Name>),
}

struct Slice {
    service: String,
    ports: Vec<PortSpec>,
    addrs: Vec<Addr>,
}

struct Addr {
    ip: IpAddr,
    /// The hostname, or the address with dashes.
    host: String,
    /// `<host>.<svc>.<ns>.svc.<zone>`.
    fqdn: Name,
}

#[derive(Default)]
struct Rev {
    /// Services with this cluster IP: (namespace, name).
    services: Vec<(String, String)>,
    /// Endpoints with this IP: (namespace, slice name, PTR target).
    endpoints: Vec<(String, String, Name)>,
}

/// One thing a name stands for, before it becomes records.
struct Item<'a> {
    host: Host<'a>,
    port: i32,
    /// The name an SRV record targets for it.
    key: Cow<'a, Name>,
    ttl: u32,
}

enum Host<'a> {
    Ip(IpAddr),
    Name(&'a Name),
    Text(&'static str),
}

/// A name that does not exist.
struct NameError;

type Lookup<T> = Result<T, NameError>;

fn label_eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

fn unix_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

/// The IP of an IPv4-mapped IPv6 address as IPv4 (Go's ParseIP does the same).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

impl Zone {
    pub fn new(cfg: ZoneConfig) -> Zone {
        let cfg = ZoneConfig {
            domain: cfg.domain.to_lowercase(),
            ..cfg
        };
        let parse = |s: &str| Name::parse(s).unwrap_or_else(|_| Name::root());
        Zone {
            ns_name: cfg
                .domain
                .prepend(b"dns")
                .and_then(|n| n.prepend(b"ns"))
                .unwrap_or_else(|_| cfg.domain.clone()),
            cfg,
            in_addr: parse("in-addr.arpa"),
            ip6: parse("ip6.arpa"),
            state: RwLock::new(State::default()),
            ready: AtomicBool::new(false),
            ready_tx: tokio::sync::watch::channel(false).0,
            serial: AtomicU32::new(unix_now()),
        }
    }

    pub fn config(&self) -> &ZoneConfig {
        &self.cfg
    }

    /// The zone has seen the cluster's Services, EndpointSlices and Namespaces: from now on a
    /// name that is not there does not exist (before, such questions get SERVFAIL).
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
        self.ready_tx.send_replace(true);
    }

    /// Wait until [`Zone::set_ready`].
    pub async fn wait_ready(&self) {
        let mut rx = self.ready_tx.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// The SOA serial: the time of the last change, in seconds since 1970.
    pub fn serial(&self) -> u32 {
        self.serial.load(Ordering::Relaxed)
    }

    fn touch(&self) {
        let now = unix_now();
        self.serial.fetch_max(now, Ordering::Relaxed);
    }

    /// How many services the zone holds.
    pub fn service_count(&self) -> usize {
        self.state.read().services.values().map(HashMap::len).sum()
    }

    // -----------------------------------------------------------------------------------------
    // Updates

    /// A namespace appeared (`present`) or went away.
    pub fn set_namespace(&self, name: &str, present: bool) {
        let mut st = self.state.write();
        let changed = if present {
            st.namespaces.insert(name.to_string())
        } else {
            st.namespaces.remove(name)
        };
        drop(st);
        if changed {
            self.touch();
        }
    }

    /// A Service changed (`Some`) or was deleted (`None`).
    pub fn set_service(&self, namespace: &str, name: &str, spec: Option<&ServiceSpec>) {
        let mut st = self.state.write();
        let old = st.services.get_mut(namespace).and_then(|m| m.remove(name));
        if let Some(old) = &old {
            if let Kind::ClusterIp(ips) = &old.kind {
                for ip in ips {
                    st.unindex_service(*ip, namespace, name);
                }
            }
        }
        if let Some((spec, fqdn)) = spec.zip(self.service_fqdn(namespace, name)) {
            let kind = match &spec.kind {
                ServiceKind::ClusterIp(ips) => {
                    Kind::ClusterIp(ips.iter().copied().map(canonical).collect())
                }
                ServiceKind::Headless => Kind::Headless,
                // An IP address or an invalid name gives no records (as CoreDNS).
                ServiceKind::ExternalName(target) => Kind::ExternalName(
                    target
                        .parse::<IpAddr>()
                        .is_err()
                        .then(|| Name::parse(target).ok())
                        .flatten(),
                ),
            };
            if let Kind::ClusterIp(ips) = &kind {
                for ip in ips {
                    st.reverse
                        .entry(*ip)
                        .or_default()
                        .services
                        .push((namespace.to_string(), name.to_string()));
                }
            }
            let ports = if spec.ports.is_empty() {
                vec![PortSpec::none()]
            } else {
                spec.ports.clone()
            };
            let svc = Svc {
                name: name.to_string(),
                namespace: namespace.to_string(),
                fqdn,
                kind,
                ports,
                slices: st.slices_for(namespace, name),
            };
            st.services
                .entry(namespace.to_string())
                .or_default()
                .insert(name.to_string(), Arc::new(svc));
        }
        if st.services.get(namespace).is_some_and(HashMap::is_empty) {
            st.services.remove(namespace);
        }
        drop(st);
        self.touch();
    }

    /// An EndpointSlice changed (`Some`) or was deleted (`None`).
    pub fn set_slice(&self, namespace: &str, slice: &str, spec: Option<&SliceSpec>) {
        let key = (namespace.to_string(), slice.to_string());
        let new = spec.map(|s| {
            let svc_fqdn = self.service_fqdn(namespace, &s.service);
            let addrs = s
                .endpoints
                .iter()
                .filter_map(|e| {
                    let host = match &e.hostname {
                        Some(h) if !h.is_empty() => h.clone(),
                        _ => e.raw.replace(['.', ':'], "-"),
                    };
                    let fqdn = svc_fqdn.as_ref()?.prepend(host.as_bytes()).ok()?;
                    Some(Addr {
                        ip: canonical(e.ip),
                        host,
                        fqdn,
                    })
                })
                .collect();
            let ports = if s.ports.is_empty() {
                vec![PortSpec::none()]
            } else {
                s.ports.clone()
            };
            Arc::new(Slice {
                service: s.service.clone(),
                ports,
                addrs,
            })
        });
        let mut st = self.state.write();
        let old = match &new {
            Some(n) => st.slices.insert(key.clone(), n.clone()),
            None => st.slices.remove(&key),
        };
        if let Some(old) = &old {
            for a in &old.addrs {
                st.unindex_endpoint(a.ip, namespace, slice);
            }
            let owner = (namespace.to_string(), old.service.clone());
            if let Some(set) = st.slices_of.get_mut(&owner) {
                set.remove(slice);
                if set.is_empty() {
                    st.slices_of.remove(&owner);
                }
            }
        }
        if let Some(new) = &new {
            for a in &new.addrs {
                st.reverse.entry(a.ip).or_default().endpoints.push((
                    namespace.to_string(),
                    slice.to_string(),
                    a.fqdn.clone(),
                ));
            }
            st.slices_of
                .entry((namespace.to_string(), new.service.clone()))
                .or_default()
                .insert(slice.to_string());
        }
        if let Some(old) = &old {
            if new.as_ref().is_none_or(|n| n.service != old.service) {
                st.refresh_service(namespace, &old.service);
            }
        }
        if let Some(new) = &new {
            st.refresh_service(namespace, &new.service);
        }
        drop(st);
        self.touch();
    }

    fn service_fqdn(&self, namespace: &str, name: &str) -> Option<Name> {
        self.cfg
            .domain
            .prepend(b"svc")
            .and_then(|n| n.prepend(namespace.as_bytes()))
            .and_then(|n| n.prepend(name.as_bytes()))
            .ok()
    }

    // -----------------------------------------------------------------------------------------
    // Questions

    /// Answer `qname`/`qtype` from the zone, or say whose job it is.
    pub fn lookup(&self, qname: &Name, qtype: u16) -> Answer {
        if let Some(apex) = [&self.in_addr, &self.ip6]
            .into_iter()
            .find(|z| qname.is_within(z))
        {
            return self.lookup_reverse(qname, qtype, apex);
        }
        if !qname.is_within(&self.cfg.domain) {
            return Answer::Forward;
        }
        let lower = qname.to_lowercase();
        let segs = lower.labels_before(&self.cfg.domain).unwrap_or_default();
        let st = self.state.read();
        let result: Lookup<(Vec<Record>, Vec<Record>, Option<Chase>)> = match qtype {
            rtype::AXFR | rtype::IXFR => return Answer::Refused,
            rtype::A | rtype::AAAA => self
                .address(&st, qname, &segs, qtype, &[])
                .map(|(r, c)| (r, Vec::new(), c)),
            rtype::TXT => self.services(&st, &segs, qtype).map(|items| {
                let txt = items
                    .iter()
                    .filter_map(|i| match i.host {
                        Host::Text(t) => Some(Record::new(
                            qname.clone(),
                            i.ttl,
                            RData::Txt(vec![t.as_bytes().to_vec()]),
                        )),
                        _ => None,
                    })
                    .collect();
                (txt, Vec::new(), None)
            }),
            rtype::CNAME => self.services(&st, &segs, qtype).map(|items| {
                let cname = match items.first() {
                    Some(Item {
                        host: Host::Name(target),
                        ttl,
                        ..
                    }) => vec![Record::new(
                        qname.clone(),
                        *ttl,
                        RData::Cname((*target).clone()),
                    )],
                    _ => Vec::new(),
                };
                (cname, Vec::new(), None)
            }),
            rtype::PTR => self
                .records(&st, &segs)
                .map(|_| (Vec::new(), Vec::new(), None)),
            rtype::MX => self
                .services(&st, &segs, qtype)
                .map(|_| (Vec::new(), Vec::new(), None)),
            rtype::SRV => self.srv(&st, qname, &segs).map(|(a, x)| (a, x, None)),
            rtype::SOA => Ok(if segs.is_empty() {
                (vec![self.soa(qname, &self.cfg.domain)], Vec::new(), None)
            } else {
                (Vec::new(), Vec::new(), None)
            }),
            rtype::NS if segs.is_empty() => Ok(self.ns(&st, qname, &self.cfg.domain)),
            _ => self
                .services(&st, &segs, rtype::A)
                .map(|_| (Vec::new(), Vec::new(), None)),
        };
        drop(st);
        self.finish(qname, &self.cfg.domain, result)
    }

    fn finish(
        &self,
        qname: &Name,
        zone: &Name,
        result: Lookup<(Vec<Record>, Vec<Record>, Option<Chase>)>,
    ) -> Answer {
        match result {
            Err(NameError) if self.is_ready() => Answer::NxDomain(self.soa(qname, zone)),
            Err(NameError) => Answer::NotReady(self.soa(qname, zone)),
            Ok((answers, _, None)) if answers.is_empty() => Answer::NoData(self.soa(qname, zone)),
            Ok((answers, additional, chase)) => Answer::Records {
                answers,
                additional,
                chase,
            },
        }
    }

    /// The SOA of `zone`, owned by the zone's name as `qname` spells it.
    pub fn soa(&self, qname: &Name, zone: &Name) -> Record {
        let ttl = self.cfg.ttl.min(300);
        let owner = qname.tail_like(zone);
        let (mname, rname) = if zone == &self.cfg.domain {
            (self.ns_name.clone(), zone.prepend(b"hostmaster"))
        } else {
            (
                zone.prepend(b"dns")
                    .and_then(|n| n.prepend(b"ns"))
                    .unwrap_or_else(|_| zone.clone()),
                zone.prepend(b"hostmaster"),
            )
        };
        Record::new(
            owner,
            ttl,
            RData::Soa {
                mname,
                rname: rname.unwrap_or_else(|_| zone.clone()),
                serial: self.serial(),
                refresh: 7200,
                retry: 1800,
                expire: 86400,
                minimum: self.cfg.ttl,
            },
        )
    }

    /// The NS records of a zone apex, with the name servers' addresses as additional records.
    fn ns(
        &self,
        st: &State,
        qname: &Name,
        zone: &Name,
    ) -> (Vec<Record>, Vec<Record>, Option<Chase>) {
        let mut answers: Vec<Record> = Vec::new();
        let mut additional = Vec::new();
        for (name, ip) in self.ns_addrs(st, zone) {
            if !answers
                .iter()
                .any(|r| matches!(&r.data, RData::Ns(n) if *n == name))
            {
                answers.push(Record::new(
                    qname.clone(),
                    self.cfg.ttl,
                    RData::Ns(name.clone()),
                ));
            }
            additional.push(address_record(name, ip, self.cfg.ttl));
        }
        (answers, additional, None)
    }

    /// The name servers: the services whose endpoints have our addresses, or
    /// `ns.dns.<zone>` with our addresses.
    fn ns_addrs(&self, st: &State, zone: &Name) -> Vec<(Name, IpAddr)> {
        let mut out = Vec::new();
        let mut found = false;
        for local in &self.cfg.local_ips {
            let Some(rev) = st.reverse.get(local) else {
                continue;
            };
            let mut seen: Vec<(&str, &str)> = Vec::new();
            for (ns, slice, _) in &rev.endpoints {
                if seen.contains(&(ns.as_str(), slice.as_str())) {
                    continue;
                }
                seen.push((ns, slice));
                found = true;
                let Some(sl) = st.slices.get(&(ns.clone(), slice.clone())) else {
                    continue;
                };
                let Some(svc) = st.service(ns, &sl.service) else {
                    continue;
                };
                match &svc.kind {
                    Kind::Headless => {
                        for a in &sl.addrs {
                            out.push((a.fqdn.clone(), a.ip));
                        }
                    }
                    Kind::ClusterIp(ips) => {
                        for ip in ips {
                            out.push((svc.fqdn.clone(), *ip));
                        }
                    }
                    Kind::ExternalName(_) => {}
                }
            }
        }
        if !found {
            let ns_name = if zone == &self.cfg.domain {
                self.ns_name.clone()
            } else {
                zone.prepend(b"dns")
                    .and_then(|n| n.prepend(b"ns"))
                    .unwrap_or_else(|_| zone.clone())
            };
            for ip in &self.cfg.local_ips {
                out.push((ns_name.clone(), *ip));
            }
        }
        out
    }

    /// What a name in the zone stands for, for a question of type `qtype` (CoreDNS's
    /// `Services`): `dns-version` TXT, the name servers' own names, or [`Zone::records`].
    fn services<'a>(&self, st: &'a State, segs: &[&[u8]], qtype: u16) -> Lookup<Vec<Item<'a>>> {
        if qtype == rtype::TXT {
            if segs.len() == 1 && label_eq(segs[0], "dns-version") {
                return Ok(vec![Item {
                    host: Host::Text(SCHEMA_VERSION),
                    port: 0,
                    key: Cow::Owned(Name::root()),
                    ttl: 28800,
                }]);
            }
            // Other names have no TXT records: NODATA if they exist.
            let exists = self.records(st, segs).is_ok_and(|r| !r.is_empty());
            return if exists {
                Ok(Vec::new())
            } else {
                Err(NameError)
            };
        }
        if segs.len() == 2 && label_eq(segs[0], "ns") && label_eq(segs[1], "dns") {
            let items = self
                .ns_addrs(st, &self.cfg.domain)
                .into_iter()
                .filter(|(_, ip)| {
                    (qtype == rtype::A && ip.is_ipv4()) || (qtype == rtype::AAAA && ip.is_ipv6())
                })
                .map(|(name, ip)| Item {
                    host: Host::Ip(ip),
                    port: 0,
                    key: Cow::Owned(name),
                    ttl: self.cfg.ttl,
                })
                .collect();
            return Ok(items);
        }
        let mut items = self.records(st, segs)?;
        if qtype == rtype::SRV {
            // SRV records of ExternalName services are not served.
            items.retain(|i| !matches!(i.host, Host::Name(_)));
        }
        Ok(items)
    }

    /// Parse `[[_port._proto.]|[endpoint.]]service.namespace.(svc|pod)` and find what it
    /// names (CoreDNS's `Records`).
    fn records<'a>(&self, st: &'a State, segs: &[&[u8]]) -> Lookup<Vec<Item<'a>>> {
        let n = segs.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let kind = segs[n - 1];
        let is_svc = label_eq(kind, "svc");
        let is_pod = label_eq(kind, "pod");
        if !is_svc && !is_pod {
            return Err(NameError);
        }
        if n == 1 {
            return Ok(Vec::new());
        }
        if n > 5 {
            return Err(NameError);
        }
        fn text(b: &[u8]) -> Lookup<&str> {
            std::str::from_utf8(b).map_err(|_| NameError)
        }
        let namespace = text(segs[n - 2])?;
        let service = if n >= 3 { text(segs[n - 3])? } else { "" };
        let (endpoint, port, proto) = match n {
            4 => (text(segs[0])?, "", ""),
            5 => (
                "",
                strip_underscore(text(segs[0])?),
                strip_underscore(text(segs[1])?),
            ),
            _ => ("", "", ""),
        };
        if !st.namespaces.contains(namespace) {
            return Err(NameError);
        }
        if is_pod {
            return self.pods(namespace, service);
        }
        if service.is_empty() {
            return Ok(Vec::new());
        }
        let Some(svc) = st.service(namespace, service) else {
            return Err(NameError);
        };
        let ttl = self.cfg.ttl;
        let mut items = Vec::new();
        let mut found = false;
        if let Kind::ExternalName(target) = &svc.kind {
            // An ExternalName service has no endpoints.
            let (Some(target), true) = (target, endpoint.is_empty()) else {
                return Err(NameError);
            };
            items.push(Item {
                host: Host::Name(target),
                port: 0,
                key: Cow::Borrowed(&svc.fqdn),
                ttl,
            });
            found = true;
        } else if matches!(svc.kind, Kind::Headless) || !endpoint.is_empty() {
            for slice in &svc.slices {
                for a in &slice.addrs {
                    if !endpoint.is_empty() && !a.host.eq_ignore_ascii_case(endpoint) {
                        continue;
                    }
                    for p in &slice.ports {
                        if !port_matches(port, proto, p) {
                            continue;
                        }
                        found = true;
                        items.push(Item {
                            host: Host::Ip(a.ip),
                            port: p.port,
                            key: Cow::Borrowed(&a.fqdn),
                            ttl,
                        });
                    }
                }
            }
        } else if let Kind::ClusterIp(ips) = &svc.kind {
            for p in &svc.ports {
                if !port_matches(port, proto, p) {
                    continue;
                }
                found = true;
                for ip in ips {
                    items.push(Item {
                        host: Host::Ip(*ip),
                        port: p.port,
                        key: Cow::Borrowed(&svc.fqdn),
                        ttl,
                    });
                }
            }
        }
        if found {
            Ok(items)
        } else {
            Err(NameError)
        }
    }

    /// `<ip-with-dashes>.<namespace>.pod.<zone>` in insecure mode.
    fn pods<'a>(&self, namespace: &str, pod: &str) -> Lookup<Vec<Item<'a>>> {
        if self.cfg.pods == PodMode::Disabled {
            return Err(NameError);
        }
        if pod.is_empty() {
            return Ok(Vec::new());
        }
        let text = if pod.matches('-').count() == 3 && !pod.contains("--") {
            pod.replace('-', ".")
        } else {
            pod.replace('-', ":")
        };
        let Ok(ip) = text.parse::<IpAddr>() else {
            return Err(NameError);
        };
        let key = Name::from_labels([pod, namespace, "pod"])
            .ok()
            .and_then(|prefix| join(&prefix, &self.cfg.domain))
            .ok_or(NameError)?;
        Ok(vec![Item {
            host: Host::Ip(canonical(ip)),
            port: 0,
            key: Cow::Owned(key),
            ttl: self.cfg.ttl,
        }])
    }

    /// A or AAAA records of `qname` (which is in the zone), following CNAMEs inside the zone.
    fn address(
        &self,
        st: &State,
        qname: &Name,
        segs: &[&[u8]],
        qtype: u16,
        previous: &[Record],
    ) -> Lookup<(Vec<Record>, Option<Chase>)> {
        let items = self.services(st, segs, qtype)?;
        let mut records: Vec<Record> = Vec::new();
        for item in items {
            match item.host {
                Host::Name(target) => {
                    if target.eq_ignore_case(qname) || previous.len() > 7 {
                        continue;
                    }
                    let cname = Record::new(qname.clone(), item.ttl, RData::Cname(target.clone()));
                    if previous.iter().any(|r| same_cname(r, &cname)) {
                        continue;
                    }
                    if target.is_within(&self.cfg.domain) {
                        let mut chain = previous.to_vec();
                        chain.push(cname.clone());
                        let lower = target.to_lowercase();
                        let segs = lower.labels_before(&self.cfg.domain).unwrap_or_default();
                        match self.address(st, target, &segs, qtype, &chain) {
                            Ok((next, None)) if !next.is_empty() => {
                                records.push(cname);
                                records.extend(next);
                            }
                            Ok((next, Some(mut chase))) => {
                                chase.cnames.insert(0, cname);
                                records.extend(next);
                                return Ok((records, Some(chase)));
                            }
                            _ => {}
                        }
                        continue;
                    }
                    return Ok((
                        records,
                        Some(Chase {
                            cnames: vec![cname],
                            target: target.clone(),
                            qtype,
                        }),
                    ));
                }
                Host::Ip(ip) => {
                    let wanted = match ip {
                        IpAddr::V4(_) => qtype == rtype::A,
                        IpAddr::V6(_) => qtype == rtype::AAAA,
                    };
                    let dup = records.iter().any(|r| match (&r.data, ip) {
                        (RData::A(a), IpAddr::V4(b)) => *a == b,
                        (RData::Aaaa(a), IpAddr::V6(b)) => *a == b,
                        _ => false,
                    });
                    if wanted && !dup {
                        records.push(address_record(qname.clone(), ip, item.ttl));
                    }
                }
                Host::Text(_) => {}
            }
        }
        Ok((records, None))
    }

    /// SRV records: one per distinct (target, port), weights shared equally, and each
    /// target's address in the additional section.
    fn srv(&self, st: &State, qname: &Name, segs: &[&[u8]]) -> Lookup<(Vec<Record>, Vec<Record>)> {
        let items = self.services(st, segs, rtype::SRV)?;
        let weight = if items.is_empty() {
            100
        } else {
            ((100.0 / items.len() as f64).floor() as u16).max(1)
        };
        let mut answers: Vec<Record> = Vec::new();
        let mut additional: Vec<Record> = Vec::new();
        let mut seen_srv: HashSet<(&Name, i32)> = HashSet::new();
        let mut seen_addr: HashSet<(&Name, IpAddr)> = HashSet::new();
        for item in &items {
            if item.port == -1 {
                continue;
            }
            let Host::Ip(ip) = item.host else {
                continue;
            };
            let target: &Name = &item.key;
            if seen_srv.insert((target, item.port)) {
                answers.push(Record::new(
                    qname.clone(),
                    item.ttl,
                    RData::Srv {
                        priority: 0,
                        weight,
                        port: item.port.clamp(0, u16::MAX as i32) as u16,
                        target: target.clone(),
                    },
                ));
            }
            if seen_addr.insert((target, ip)) {
                additional.push(address_record(target.clone(), ip, item.ttl));
            }
        }
        Ok((answers, additional))
    }

    fn lookup_reverse(&self, qname: &Name, qtype: u16, apex: &Name) -> Answer {
        if matches!(qtype, rtype::AXFR | rtype::IXFR) {
            return Answer::Refused;
        }
        let lower = qname.to_lowercase();
        let segs = lower.labels_before(apex).unwrap_or_default();
        if segs.is_empty() {
            let st = self.state.read();
            let result = match qtype {
                rtype::SOA => (vec![self.soa(qname, apex)], Vec::new(), None),
                rtype::NS => self.ns(&st, qname, apex),
                _ => (Vec::new(), Vec::new(), None),
            };
            drop(st);
            return self.finish(qname, apex, Ok(result));
        }
        match qtype {
            // CoreDNS answers SOA only at the apex, with NODATA below it.
            rtype::SOA => Answer::NoData(self.soa(qname, apex)),
            rtype::PTR => {
                let Some(ip) = reverse_ip(&segs, apex == &self.ip6) else {
                    return Answer::Forward;
                };
                let st = self.state.read();
                let targets = st.ptr_targets(ip);
                drop(st);
                if targets.is_empty() {
                    return Answer::Forward;
                }
                Answer::Records {
                    answers: targets
                        .into_iter()
                        .map(|t| Record::new(qname.clone(), self.cfg.ttl, RData::Ptr(t)))
                        .collect(),
                    additional: Vec::new(),
                    chase: None,
                }
            }
            _ => Answer::Forward,
        }
    }
}

impl State {
    fn service(&self, namespace: &str, name: &str) -> Option<&Arc<Svc>> {
        self.services.get(namespace)?.get(name)
    }

    fn slices_for(&self, namespace: &str, service: &str) -> Vec<Arc<Slice>> {
        self.slices_of
            .get(&(namespace.to_string(), service.to_string()))
            .map(|names| {
                names
                    .iter()
                    .filter_map(|s| {
                        self.slices
                            .get(&(namespace.to_string(), s.clone()))
                            .cloned()
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Give the service `namespace/name` (if it exists) its current slices.
    fn refresh_service(&mut self, namespace: &str, name: &str) {
        let Some(old) = self.service(namespace, name).cloned() else {
            return;
        };
        let slices = self.slices_for(namespace, name);
        let svc = Svc {
            name: old.name.clone(),
            namespace: old.namespace.clone(),
            fqdn: old.fqdn.clone(),
            kind: match &old.kind {
                Kind::ClusterIp(ips) => Kind::ClusterIp(ips.clone()),
                Kind::Headless => Kind::Headless,
                Kind::ExternalName(t) => Kind::ExternalName(t.clone()),
            },
            ports: old.ports.clone(),
            slices,
        };
        if let Some(m) = self.services.get_mut(namespace) {
            m.insert(name.to_string(), Arc::new(svc));
        }
    }

    fn unindex_service(&mut self, ip: IpAddr, namespace: &str, name: &str) {
        if let Some(rev) = self.reverse.get_mut(&ip) {
            rev.services
                .retain(|(ns, n)| !(ns == namespace && n == name));
            if rev.services.is_empty() && rev.endpoints.is_empty() {
                self.reverse.remove(&ip);
            }
        }
    }

    fn unindex_endpoint(&mut self, ip: IpAddr, namespace: &str, slice: &str) {
        if let Some(rev) = self.reverse.get_mut(&ip) {
            rev.endpoints
                .retain(|(ns, s, _)| !(ns == namespace && s == slice));
            if rev.services.is_empty() && rev.endpoints.is_empty() {
                self.reverse.remove(&ip);
            }
        }
    }

    /// PTR targets of an IP: the first service with it as cluster IP, else every endpoint
    /// with it.
    fn ptr_targets(&self, ip: IpAddr) -> Vec<Name> {
        let Some(rev) = self.reverse.get(&canonical(ip)) else {
            return Vec::new();
        };
        if let Some(svc) = rev
            .services
            .iter()
            .find_map(|(ns, name)| self.service(ns, name))
        {
            return vec![svc.fqdn.clone()];
        }
        let mut out: Vec<Name> = Vec::new();
        for (_, _, target) in &rev.endpoints {
            if !out.contains(target) {
                out.push(target.clone());
            }
        }
        out
    }
}

fn address_record(name: Name, ip: IpAddr, ttl: u32) -> Record {
    match ip {
        IpAddr::V4(v4) => Record::new(name, ttl, RData::A(v4)),
        IpAddr::V6(v6) => Record::new(name, ttl, RData::Aaaa(v6)),
    }
}

fn same_cname(a: &Record, b: &Record) -> bool {
    match (&a.data, &b.data) {
        (RData::Cname(x), RData::Cname(y)) => a.name.eq_ignore_case(&b.name) && x.eq_ignore_case(y),
        _ => false,
    }
}

fn strip_underscore(s: &str) -> &str {
    s.strip_prefix('_').unwrap_or(s)
}

fn port_matches(port: &str, proto: &str, p: &PortSpec) -> bool {
    (port.is_empty() || port.eq_ignore_ascii_case(&p.name))
        && (proto.is_empty() || proto.eq_ignore_ascii_case(&p.protocol))
}

/// `prefix` (a name) followed by the labels of `zone`.
fn join(prefix: &Name, zone: &Name) -> Option<Name> {
    let labels: Vec<&[u8]> = prefix.labels().chain(zone.labels()).collect();
    Name::from_labels(labels).ok()
}

/// The address a reverse name stands for: 4 decimal labels under in-addr.arpa, 32 nibbles
/// under ip6.arpa, least significant first.
fn reverse_ip(segs: &[&[u8]], v6: bool) -> Option<IpAddr> {
    if v6 {
        if segs.len() != 32 {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, label) in segs.iter().rev().enumerate() {
            let [c] = label else {
                return None;
            };
            let nibble = (*c as char).to_digit(16)? as u8;
            bytes[i / 2] |= if i % 2 == 0 { nibble << 4 } else { nibble };
        }
        return Some(IpAddr::V6(Ipv6Addr::from(bytes)));
    }
    if segs.len() != 4 {
        return None;
    }
    let text = segs
        .iter()
        .rev()
        .map(|l| std::str::from_utf8(l).ok())
        .collect::<Option<Vec<&str>>>()?
        .join(".");
    text.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::parse(s).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn port(name: &str, proto: &str, port: i32) -> PortSpec {
        PortSpec {
            name: name.into(),
            protocol: proto.into(),
            port,
        }
    }

    fn ep(addr: &str, hostname: Option<&str>) -> EndpointSpec {
        EndpointSpec {
            ip: ip(addr),
            raw: addr.into(),
            hostname: hostname.map(String::from),
        }
    }

    fn zone() -> Zone {
        let z = Zone::new(ZoneConfig {
            domain: n("cluster.local"),
            ttl: 30,
            pods: PodMode::Insecure,
            local_ips: vec![],
        });
        z.set_namespace("default", true);
        z.set_namespace("other", true);
        z.set_service(
            "default",
            "web",
            Some(&ServiceSpec {
                kind: ServiceKind::ClusterIp(vec![ip("10.96.0.10"), ip("fd00::10")]),
                ports: vec![port("http", "TCP", 80), port("dns", "UDP", 53)],
            }),
        );
        z.set_service(
            "default",
            "db",
            Some(&ServiceSpec {
                kind: ServiceKind::Headless,
                ports: vec![port("pg", "TCP", 5432)],
            }),
        );
        z.set_slice(
            "default",
            "db-abc",
            Some(&SliceSpec {
                service: "db".into(),
                ports: vec![port("pg", "TCP", 5432)],
                endpoints: vec![ep("10.1.0.1", Some("db-0")), ep("10.1.0.2", None)],
            }),
        );
        z.set_service(
            "default",
            "ext",
            Some(&ServiceSpec {
                kind: ServiceKind::ExternalName("example.com".into()),
                ports: vec![],
            }),
        );
        z.set_service(
            "default",
            "alias",
            Some(&ServiceSpec {
                kind: ServiceKind::ExternalName("web.default.svc.cluster.local".into()),
                ports: vec![],
            }),
        );
        z.set_ready();
        z
    }

    fn records(a: Answer) -> (Vec<Record>, Vec<Record>) {
        match a {
            Answer::Records {
                answers,
                additional,
                chase: None,
            } => (answers, additional),
            other => panic!("expected records, got {other:?}"),
        }
    }

    fn a_ips(recs: &[Record]) -> Vec<String> {
        recs.iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.to_string()),
                RData::Aaaa(a) => Some(a.to_string()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn cluster_ip_service_a_aaaa() {
        let z = zone();
        let (ans, _) = records(z.lookup(&n("web.default.svc.cluster.local"), rtype::A));
        assert_eq!(a_ips(&ans), vec!["10.96.0.10"]);
        assert_eq!(ans[0].ttl, 30);
        let (ans, _) = records(z.lookup(&n("WEB.Default.svc.Cluster.Local"), rtype::AAAA));
        assert_eq!(a_ips(&ans), vec!["fd00::10"]);
        // The owner keeps the question's case.
        assert_eq!(ans[0].name.to_string(), "WEB.Default.svc.Cluster.Local.");
    }

    #[test]
    fn nxdomain_and_nodata() {
        let z = zone();
        for name in [
            "nope.default.svc.cluster.local",
            "web.nope.svc.cluster.local",
            "x.y.z.web.default.svc.cluster.local",
            "web.default.foo.cluster.local",
            "foo.cluster.local",
            "nope.svc.cluster.local",
        ] {
            match z.lookup(&n(name), rtype::A) {
                Answer::NxDomain(soa) => {
                    assert_eq!(soa.name.to_string(), "cluster.local.", "{name}");
                    let RData::Soa {
                        mname,
                        rname,
                        minimum,
                        ..
                    } = &soa.data
                    else {
                        panic!()
                    };
                    assert_eq!(mname.to_string(), "ns.dns.cluster.local.");
                    assert_eq!(rname.to_string(), "hostmaster.cluster.local.");
                    assert_eq!(*minimum, 30);
                }
                other => panic!("{name}: expected NXDOMAIN, got {other:?}"),
            }
        }
        for (name, t) in [
            ("web.default.svc.cluster.local", rtype::MX),
            ("web.default.svc.cluster.local", rtype::TXT),
            ("web.default.svc.cluster.local", 99),
            ("web.default.svc.cluster.local", rtype::PTR),
            ("default.svc.cluster.local", rtype::A),
            ("svc.cluster.local", rtype::A),
            ("cluster.local", rtype::A),
            ("db.default.svc.cluster.local", rtype::AAAA),
        ] {
            assert!(
                matches!(z.lookup(&n(name), t), Answer::NoData(_)),
                "{name} type {t}: expected NODATA"
            );
        }
    }

    #[test]
    fn not_ready_is_servfail_not_nxdomain() {
        let z = Zone::new(ZoneConfig {
            domain: n("cluster.local"),
            ttl: 30,
            pods: PodMode::Insecure,
            local_ips: vec![],
        });
        assert!(matches!(
            z.lookup(&n("web.default.svc.cluster.local"), rtype::A),
            Answer::NotReady(_)
        ));
        z.set_ready();
        assert!(matches!(
            z.lookup(&n("web.default.svc.cluster.local"), rtype::A),
            Answer::NxDomain(_)
        ));
    }

    #[test]
    fn srv_for_cluster_ip_service() {
        let z = zone();
        let (ans, extra) =
            records(z.lookup(&n("_http._tcp.web.default.svc.cluster.local"), rtype::SRV));
        assert_eq!(ans.len(), 1);
        let RData::Srv {
            priority,
            weight,
            port,
            target,
        } = &ans[0].data
        else {
            panic!()
        };
        // Dual-stack: two cluster IPs behind one target share the weight.
        assert_eq!((*priority, *weight, *port), (0, 50, 80));
        assert_eq!(target.to_string(), "web.default.svc.cluster.local.");
        assert_eq!(a_ips(&extra), vec!["10.96.0.10", "fd00::10"]);
        // Protocol must match; names are case-insensitive.
        assert!(matches!(
            z.lookup(&n("_http._udp.web.default.svc.cluster.local"), rtype::SRV),
            Answer::NxDomain(_)
        ));
        let (ans, _) = records(z.lookup(&n("_DNS._UDP.web.default.svc.cluster.local"), rtype::SRV));
        assert!(matches!(ans[0].data, RData::Srv { port: 53, .. }));
        // The service name alone: every port.
        let (ans, _) = records(z.lookup(&n("web.default.svc.cluster.local"), rtype::SRV));
        assert_eq!(ans.len(), 2);
    }

    #[test]
    fn headless_service_endpoints() {
        let z = zone();
        let (ans, _) = records(z.lookup(&n("db.default.svc.cluster.local"), rtype::A));
        assert_eq!(a_ips(&ans), vec!["10.1.0.1", "10.1.0.2"]);
        let (ans, _) = records(z.lookup(&n("db-0.db.default.svc.cluster.local"), rtype::A));
        assert_eq!(a_ips(&ans), vec!["10.1.0.1"]);
        // An endpoint without hostname is named by its dashed IP.
        let (ans, _) = records(z.lookup(&n("10-1-0-2.db.default.svc.cluster.local"), rtype::A));
        assert_eq!(a_ips(&ans), vec!["10.1.0.2"]);
        assert!(matches!(
            z.lookup(&n("db-9.db.default.svc.cluster.local"), rtype::A),
            Answer::NxDomain(_)
        ));
        let (ans, extra) =
            records(z.lookup(&n("_pg._tcp.db.default.svc.cluster.local"), rtype::SRV));
        let targets: Vec<String> = ans
            .iter()
            .map(|r| match &r.data {
                RData::Srv {
                    target,
                    weight,
                    port,
                    ..
                } => {
                    assert_eq!((*weight, *port), (50, 5432));
                    target.to_string()
                }
                _ => panic!(),
            })
            .collect();
        assert_eq!(
            targets,
            vec![
                "db-0.db.default.svc.cluster.local.",
                "10-1-0-2.db.default.svc.cluster.local."
            ]
        );
        assert_eq!(extra.len(), 2);
        assert_eq!(
            extra[0].name.to_string(),
            "db-0.db.default.svc.cluster.local."
        );
        assert_eq!(a_ips(&extra), vec!["10.1.0.1", "10.1.0.2"]);
    }

    #[test]
    fn headless_without_ready_endpoints_is_nxdomain() {
        let z = zone();
        z.set_slice("default", "db-abc", None);
        assert!(matches!(
            z.lookup(&n("db.default.svc.cluster.local"), rtype::A),
            Answer::NxDomain(_)
        ));
    }

    #[test]
    fn endpoints_of_cluster_ip_services_by_hostname() {
        let z = zone();
        z.set_slice(
            "default",
            "web-1",
            Some(&SliceSpec {
                service: "web".into(),
                ports: vec![port("http", "TCP", 8080)],
                endpoints: vec![ep("10.2.0.7", Some("w0"))],
            }),
        );
        let (ans, _) = records(z.lookup(&n("w0.web.default.svc.cluster.local"), rtype::A));
        assert_eq!(a_ips(&ans), vec!["10.2.0.7"]);
        // The service name still answers with the cluster IP.
        let (ans, _) = records(z.lookup(&n("web.default.svc.cluster.local"), rtype::A));
        assert_eq!(a_ips(&ans), vec!["10.96.0.10"]);
    }

    #[test]
    fn external_name() {
        let z = zone();
        match z.lookup(&n("ext.default.svc.cluster.local"), rtype::A) {
            Answer::Records {
                answers,
                chase: Some(chase),
                ..
            } => {
                assert!(answers.is_empty());
                assert_eq!(chase.target.to_string(), "example.com.");
                assert_eq!(chase.qtype, rtype::A);
                assert!(
                    matches!(&chase.cnames[..], [r] if r.data == RData::Cname(n("example.com")))
                );
            }
            other => panic!("{other:?}"),
        }
        let (ans, _) = records(z.lookup(&n("ext.default.svc.cluster.local"), rtype::CNAME));
        assert_eq!(ans[0].data, RData::Cname(n("example.com")));
        // In-zone targets are followed.
        let (ans, _) = records(z.lookup(&n("alias.default.svc.cluster.local"), rtype::A));
        assert_eq!(ans.len(), 2);
        assert_eq!(
            ans[0].data,
            RData::Cname(n("web.default.svc.cluster.local"))
        );
        assert_eq!(ans[1].name.to_string(), "web.default.svc.cluster.local.");
        assert_eq!(a_ips(&ans), vec!["10.96.0.10"]);
        // No SRV for ExternalName services.
        assert!(matches!(
            z.lookup(&n("ext.default.svc.cluster.local"), rtype::SRV),
            Answer::NoData(_)
        ));
    }

    #[test]
    fn cname_loops_end() {
        let z = zone();
        for (a, b) in [("l1", "l2"), ("l2", "l1")] {
            z.set_service(
                "default",
                a,
                Some(&ServiceSpec {
                    kind: ServiceKind::ExternalName(format!("{b}.default.svc.cluster.local")),
                    ports: vec![],
                }),
            );
        }
        assert!(matches!(
            z.lookup(&n("l1.default.svc.cluster.local"), rtype::A),
            Answer::NoData(_)
        ));
    }

    #[test]
    fn pods_insecure() {
        let z = zone();
        let (ans, _) = records(z.lookup(&n("10-244-1-5.default.pod.cluster.local"), rtype::A));
        assert_eq!(a_ips(&ans), vec!["10.244.1.5"]);
        let (ans, _) = records(z.lookup(&n("fd00--5.default.pod.cluster.local"), rtype::AAAA));
        assert_eq!(a_ips(&ans), vec!["fd00::5"]);
        assert!(matches!(
            z.lookup(&n("10-244-1-5.nope.pod.cluster.local"), rtype::A),
            Answer::NxDomain(_)
        ));
        assert!(matches!(
            z.lookup(&n("not-an-ip.default.pod.cluster.local"), rtype::A),
            Answer::NxDomain(_)
        ));
        assert!(matches!(
            z.lookup(&n("10-244-1-5.default.pod.cluster.local"), rtype::AAAA),
            Answer::NoData(_)
        ));
    }

    #[test]
    fn reverse_records() {
        let z = zone();
        let (ans, _) = records(z.lookup(&n("10.0.96.10.in-addr.arpa"), rtype::PTR));
        assert_eq!(ans[0].data, RData::Ptr(n("web.default.svc.cluster.local")));
        let (ans, _) = records(z.lookup(&n("1.0.1.10.in-addr.arpa"), rtype::PTR));
        assert_eq!(
            ans[0].data,
            RData::Ptr(n("db-0.db.default.svc.cluster.local"))
        );
        let (ans, _) = records(z.lookup(&n("2.0.1.10.IN-ADDR.ARPA"), rtype::PTR));
        assert_eq!(
            ans[0].data,
            RData::Ptr(n("10-1-0-2.db.default.svc.cluster.local"))
        );
        let v6 = "0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa";
        let (ans, _) = records(z.lookup(&n(v6), rtype::PTR));
        assert_eq!(ans[0].data, RData::Ptr(n("web.default.svc.cluster.local")));
        // Unknown addresses and other types fall through to the upstreams.
        assert!(matches!(
            z.lookup(&n("9.9.9.9.in-addr.arpa"), rtype::PTR),
            Answer::Forward
        ));
        assert!(matches!(
            z.lookup(&n("10.0.96.10.in-addr.arpa"), rtype::A),
            Answer::Forward
        ));
        assert!(matches!(
            z.lookup(&n("96.10.in-addr.arpa"), rtype::PTR),
            Answer::Forward
        ));
        let (ans, _) = records(z.lookup(&n("in-addr.arpa"), rtype::SOA));
        assert_eq!(ans[0].name.to_string(), "in-addr.arpa.");
        // Removing the service removes its PTR.
        z.set_service("default", "web", None);
        assert!(matches!(
            z.lookup(&n("10.0.96.10.in-addr.arpa"), rtype::PTR),
            Answer::Forward
        ));
    }

    #[test]
    fn apex_and_specials() {
        let z = zone();
        let (ans, _) = records(z.lookup(&n("cluster.local"), rtype::SOA));
        assert!(matches!(ans[0].data, RData::Soa { .. }));
        let (ans, _) = records(z.lookup(&n("dns-version.cluster.local"), rtype::TXT));
        assert_eq!(ans[0].data, RData::Txt(vec![b"1.1.0".to_vec()]));
        assert_eq!(ans[0].ttl, 28800);
        assert!(matches!(
            z.lookup(&n("cluster.local"), rtype::AXFR),
            Answer::Refused
        ));
        assert!(matches!(
            z.lookup(&n("example.com"), rtype::A),
            Answer::Forward
        ));
        // Without local addresses there is no name server to name.
        assert!(matches!(
            z.lookup(&n("cluster.local"), rtype::NS),
            Answer::NoData(_)
        ));
        let z = Zone::new(ZoneConfig {
            domain: n("cluster.local"),
            ttl: 30,
            pods: PodMode::Insecure,
            local_ips: vec![ip("192.0.2.53")],
        });
        z.set_ready();
        let (ans, extra) = records(z.lookup(&n("cluster.local"), rtype::NS));
        assert_eq!(ans[0].data, RData::Ns(n("ns.dns.cluster.local")));
        assert_eq!(a_ips(&extra), vec!["192.0.2.53"]);
        let (ans, _) = records(z.lookup(&n("ns.dns.cluster.local"), rtype::A));
        assert_eq!(a_ips(&ans), vec!["192.0.2.53"]);
        // With a kube-dns service whose endpoint is us, that service is the name server.
        z.set_namespace("kube-system", true);
        z.set_service(
            "kube-system",
            "kube-dns",
            Some(&ServiceSpec {
                kind: ServiceKind::ClusterIp(vec![ip("10.96.0.10")]),
                ports: vec![port("dns", "UDP", 53)],
            }),
        );
        z.set_slice(
            "kube-system",
            "kube-dns-x",
            Some(&SliceSpec {
                service: "kube-dns".into(),
                ports: vec![port("dns", "UDP", 53)],
                endpoints: vec![ep("192.0.2.53", None)],
            }),
        );
        let (ans, extra) = records(z.lookup(&n("cluster.local"), rtype::NS));
        assert_eq!(
            ans[0].data,
            RData::Ns(n("kube-dns.kube-system.svc.cluster.local"))
        );
        assert_eq!(a_ips(&extra), vec!["10.96.0.10"]);
    }

    #[test]
    fn incremental_updates() {
        let z = zone();
        // A slice moving from one service to another leaves the first.
        z.set_service(
            "default",
            "db2",
            Some(&ServiceSpec {
                kind: ServiceKind::Headless,
                ports: vec![],
            }),
        );
        z.set_slice(
            "default",
            "db-abc",
            Some(&SliceSpec {
                service: "db2".into(),
                ports: vec![],
                endpoints: vec![ep("10.1.0.9", None)],
            }),
        );
        assert!(matches!(
            z.lookup(&n("db.default.svc.cluster.local"), rtype::A),
            Answer::NxDomain(_)
        ));
        let (ans, _) = records(z.lookup(&n("db2.default.svc.cluster.local"), rtype::A));
        assert_eq!(a_ips(&ans), vec!["10.1.0.9"]);
        // No ports: A records, but no SRV records.
        assert!(matches!(
            z.lookup(&n("db2.default.svc.cluster.local"), rtype::SRV),
            Answer::NoData(_)
        ));
        // The old address's PTR went away with it.
        assert!(matches!(
            z.lookup(&n("1.0.1.10.in-addr.arpa"), rtype::PTR),
            Answer::Forward
        ));
        // A slice that arrives before its service is used when the service comes.
        z.set_slice(
            "default",
            "late-1",
            Some(&SliceSpec {
                service: "late".into(),
                ports: vec![],
                endpoints: vec![ep("10.3.0.1", None)],
            }),
        );
        assert!(matches!(
            z.lookup(&n("late.default.svc.cluster.local"), rtype::A),
            Answer::NxDomain(_)
        ));
        z.set_service(
            "default",
            "late",
            Some(&ServiceSpec {
                kind: ServiceKind::Headless,
                ports: vec![],
            }),
        );
        let (ans, _) = records(z.lookup(&n("late.default.svc.cluster.local"), rtype::A));
        assert_eq!(a_ips(&ans), vec!["10.3.0.1"]);
        // Deleting a namespace hides its names.
        z.set_namespace("default", false);
        assert!(matches!(
            z.lookup(&n("late.default.svc.cluster.local"), rtype::A),
            Answer::NxDomain(_)
        ));
    }

    #[test]
    fn many_services_update_quickly() {
        let z = zone();
        let start = std::time::Instant::now();
        for i in 0..20_000u32 {
            let name = format!("s{i}");
            z.set_service(
                "default",
                &name,
                Some(&ServiceSpec {
                    kind: ServiceKind::ClusterIp(vec![IpAddr::V4(Ipv4Addr::from(0x0A60_0000 + i))]),
                    ports: vec![port("http", "TCP", 80)],
                }),
            );
            z.set_slice(
                "default",
                &format!("{name}-x"),
                Some(&SliceSpec {
                    service: name.clone(),
                    ports: vec![port("http", "TCP", 8080)],
                    endpoints: vec![ep(&Ipv4Addr::from(0x0AF4_0000 + i).to_string(), None)],
                }),
            );
        }
        let loaded = start.elapsed();
        // One more update is a small fraction of the whole load: not O(all services).
        let start = std::time::Instant::now();
        for _ in 0..100 {
            z.set_service(
                "default",
                "s7",
                Some(&ServiceSpec {
                    kind: ServiceKind::ClusterIp(vec![ip("10.200.0.7")]),
                    ports: vec![port("http", "TCP", 80)],
                }),
            );
        }
        let hundred = start.elapsed();
        assert!(
            hundred * 20 < loaded,
            "100 updates took {hundred:?}, loading 40000 objects {loaded:?}"
        );
        let (ans, _) = records(z.lookup(&n("s7.default.svc.cluster.local"), rtype::A));
        assert_eq!(a_ips(&ans), vec!["10.200.0.7"]);
        assert_eq!(z.service_count(), 20_004);
    }
}
