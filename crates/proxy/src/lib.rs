//! `capstan proxy`: what kube-proxy does. It watches Services and EndpointSlices, turns them
//! into a [`Snapshot`] of service ports and their endpoints, and hands each new snapshot to one
//! [`Proxier`] backend — userspace (a TCP/UDP proxy per service port), iptables or nftables
//! (NAT rules the kernel applies). Backends diff a snapshot against what they last applied
//! and change only that.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

pub(crate) mod cidr;
pub mod iptables;
pub mod model;
pub mod netns;
pub mod nftables;
pub mod podnet;
pub mod runner;
pub mod userspace;

/// The transport protocol of a service port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// Lower-case, as iptables and nft spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// One port of one Service: `namespace/name:port-name`, as kube-proxy names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePortName {
    pub namespace: String,
    pub name: String,
    /// The port's name; empty for a Service's single unnamed port.
    pub port: String,
    pub protocol: Protocol,
}

impl fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)?;
        if !self.port.is_empty() {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// What a backend needs of one service port (from the Service object).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub name: ServicePortName,
    /// spec.clusterIPs; empty for headless Services (`None`), which the proxy ignores.
    pub cluster_ips: Vec<IpAddr>,
    /// spec.ports[].port.
    pub port: u16,
    /// spec.ports[].nodePort for NodePort and LoadBalancer Services.
    pub node_port: Option<u16>,
    /// spec.externalIPs.
    pub external_ips: Vec<IpAddr>,
    /// status.loadBalancer.ingress[].ip.
    pub load_balancer_ips: Vec<IpAddr>,
    /// spec.loadBalancerSourceRanges (CIDRs, as written).
    pub load_balancer_source_ranges: Vec<String>,
    /// sessionAffinity ClientIP: the timeout in seconds (10800 by default); None otherwise.
    pub session_affinity_seconds: Option<u32>,
    /// spec.externalTrafficPolicy == Local (for NodePort, externalIPs and load balancer IPs).
    pub external_policy_local: bool,
    /// spec.internalTrafficPolicy == Local (for cluster IPs).
    pub internal_policy_local: bool,
    /// spec.healthCheckNodePort, for externalTrafficPolicy Local.
    pub health_check_node_port: Option<u16>,
}

/// One endpoint of a service port (from EndpointSlices).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    pub ip: IpAddr,
    pub port: u16,
    /// conditions.ready (nil counts as true).
    pub ready: bool,
    /// conditions.serving (nil counts as true, as kube-proxy reads it).
    pub serving: bool,
    /// conditions.terminating (nil counts as false).
    pub terminating: bool,
    /// nodeName, when the slice says.
    pub node_name: Option<String>,
}

/// Everything the proxy knows at one moment: every service port with its endpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub services: BTreeMap<ServicePortName, Arc<ServicePort>>,
    /// Endpoints by service port, sorted and de-duplicated; a port with no endpoints may be
    /// absent.
    pub endpoints: BTreeMap<ServicePortName, Arc<Vec<Endpoint>>>,
}

/// This node, as the backends need it.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    pub name: String,
    /// The node's own addresses (NodePorts answer on these).
    pub ips: Vec<IpAddr>,
    /// The cluster's pod CIDR (`--cluster-cidr`): traffic to a service from outside it is
    /// masqueraded. None: masquerade all traffic to services that leaves through NAT rules.
    pub cluster_cidr: Option<String>,
}

/// A proxy mode. `sync` is called with every new snapshot (debounced), `cleanup` on a clean
/// exit; both are blocking (they may run iptables-restore / nft) and are called from
/// `spawn_blocking`, never concurrently.
pub trait Proxier: Send {
    /// Make the data path match `snapshot`; changes only what differs from the last sync.
    fn sync(&mut self, snapshot: &Snapshot) -> anyhow::Result<()>;
    /// Remove everything this proxier installed.
    fn cleanup(&mut self) -> anyhow::Result<()>;
}

/// The endpoints traffic may go to, as Kubernetes chooses them: the ready ones; when none is
/// ready, the ones still serving while terminating (so that connections drain during a rolling
/// update instead of failing).
pub fn usable_endpoints<'a>(
    endpoints: impl IntoIterator<Item = &'a Endpoint> + Clone,
) -> Vec<&'a Endpoint> {
    let ready: Vec<&Endpoint> = endpoints.clone().into_iter().filter(|e| e.ready).collect();
    if !ready.is_empty() {
        return ready;
    }
    endpoints
        .into_iter()
        .filter(|e| e.serving && e.terminating)
        .collect()
}

/// The endpoints of a service port on one node, as the traffic policies pick them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Categorized<'a> {
    /// For traffic to a ClusterIP: `internalTrafficPolicy` applied (this node's usable
    /// endpoints when it is Local, else all usable endpoints).
    pub cluster: Vec<&'a Endpoint>,
    /// This node's usable endpoints (for a Local policy).
    pub local: Vec<&'a Endpoint>,
    /// Every usable endpoint in the cluster, whatever the policies say: what traffic from
    /// outside (NodePorts, external and load balancer IPs) uses under
    /// `externalTrafficPolicy: Cluster`, even when `internalTrafficPolicy` is Local.
    pub all: Vec<&'a Endpoint>,
}

impl<'a> Categorized<'a> {
    /// The endpoints for traffic from outside (`externalTrafficPolicy`).
    pub fn external(&self, service: &ServicePort) -> &[&'a Endpoint] {
        if service.external_policy_local {
            &self.local
        } else {
            &self.all
        }
    }
}

/// Split `endpoints` of `service` into the set for ClusterIP traffic, this node's usable
/// set and the cluster-wide usable set.
pub fn categorize<'a>(
    service: &ServicePort,
    endpoints: &'a [Endpoint],
    node: &str,
) -> Categorized<'a> {
    let local = usable_endpoints(
        endpoints
            .iter()
            .filter(|e| e.node_name.as_deref() == Some(node)),
    );
    let all = usable_endpoints(endpoints.iter());
    let cluster = if service.internal_policy_local {
        local.clone()
    } else {
        all.clone()
    };
    Categorized {
        cluster,
        local,
        all,
    }
}

#[cfg(test)]
mod categorize_tests {
    use super::*;

    fn ep(last: u8, node: &str, ready: bool) -> Endpoint {
        Endpoint {
            ip: IpAddr::from([10, 1, 0, last]),
            port: 80,
            ready,
            serving: ready,
            terminating: false,
            node_name: Some(node.to_string()),
        }
    }

    fn service(internal_local: bool, external_local: bool) -> ServicePort {
        ServicePort {
            name: ServicePortName {
                namespace: "ns".into(),
                name: "svc".into(),
                port: String::new(),
                protocol: Protocol::Tcp,
            },
            cluster_ips: vec![IpAddr::from([10, 96, 0, 1])],
            port: 80,
            node_port: Some(30080),
            external_ips: vec![],
            load_balancer_ips: vec![],
            load_balancer_source_ranges: vec![],
            session_affinity_seconds: None,
            external_policy_local: external_local,
            internal_policy_local: internal_local,
            health_check_node_port: None,
        }
    }

    #[test]
    fn internal_local_external_cluster_keeps_all_endpoints_for_external_traffic() {
        let eps = vec![ep(1, "a", true), ep(2, "b", true), ep(3, "b", false)];
        let svc = service(true, false);
        let cat = categorize(&svc, &eps, "a");
        assert_eq!(cat.cluster, vec![&eps[0]]);
        assert_eq!(cat.local, vec![&eps[0]]);
        assert_eq!(cat.all, vec![&eps[0], &eps[1]]);
        assert_eq!(cat.external(&svc), &[&eps[0], &eps[1]]);
    }

    #[test]
    fn external_local_uses_this_nodes_endpoints() {
        let eps = vec![ep(1, "a", true), ep(2, "b", true)];
        let svc = service(false, true);
        let cat = categorize(&svc, &eps, "b");
        assert_eq!(cat.cluster, vec![&eps[0], &eps[1]]);
        assert_eq!(cat.external(&svc), &[&eps[1]]);
        // A node without endpoints has none locally, whatever the others have.
        let cat = categorize(&svc, &eps, "c");
        assert!(cat.external(&svc).is_empty());
        assert_eq!(cat.all.len(), 2);
    }
}
