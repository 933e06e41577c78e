//! Feeding the zone from the API: watches of Services, EndpointSlices (those with a
//! kubernetes.io/service-name label) and Namespaces, each change applied to the zone as it
//! comes (one service or one slice at a time).

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;

use capstan_runtime::{Change, Informer};

use crate::zone::{EndpointSpec, PortSpec, ServiceKind, ServiceSpec, SliceSpec, Zone};

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What DNS needs of a Service; None if it has no spec.
pub fn service_spec(svc: &Service) -> Option<ServiceSpec> {
    let spec = svc.spec.as_ref()?;
    let kind = if spec.type_.as_deref() == Some("ExternalName") {
        ServiceKind::ExternalName(spec.external_name.clone().unwrap_or_default())
    } else {
        let ips: Vec<&str> = match &spec.cluster_ips {
            Some(ips) if !ips.is_empty() => ips.iter().map(String::as_str).collect(),
            _ => spec.cluster_ip.as_deref().into_iter().collect(),
        };
        if ips.first() == Some(&"None") {
            ServiceKind::Headless
        } else {
            ServiceKind::ClusterIp(ips.iter().filter_map(|ip| ip.parse().ok()).collect())
        }
    };
    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| PortSpec {
            name: p.name.clone().unwrap_or_default(),
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            port: p.port,
        })
        .collect();
    Some(ServiceSpec { kind, ports })
}

/// What DNS needs of an EndpointSlice: its service and ready addresses; None without the
/// service-name label.
pub fn slice_spec(slice: &EndpointSlice) -> Option<SliceSpec> {
    let service = slice.labels().get(SERVICE_NAME_LABEL)?.clone();
    let ip_slice = matches!(slice.address_type.as_str(), "IPv4" | "IPv6");
    let ports = slice
        .ports
        .iter()
        .flatten()
        .map(|p| PortSpec {
            name: p.name.clone().unwrap_or_default(),
            protocol: p.protocol.clone().unwrap_or_default(),
            port: p.port.unwrap_or(-1),
        })
        .collect();
    let endpoints = slice
        .endpoints
        .iter()
        .filter(|_| ip_slice)
        // Readiness unknown counts as ready, as the API documents.
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| {
            e.addresses.iter().filter_map(|a| {
                Some(EndpointSpec {
                    ip: a.parse::<IpAddr>().ok()?,
                    raw: a.clone(),
                    hostname: e.hostname.clone(),
                })
            })
        })
        .collect();
    Some(SliceSpec {
        service,
        ports,
        endpoints,
    })
}

fn trim_service(s: &mut Service) {
    s.metadata.annotations = None;
    s.metadata.labels = None;
    s.status = None;
}

fn trim_slice(s: &mut EndpointSlice) {
    s.metadata.annotations = None;
    s.metadata.owner_references = None;
}

fn trim_namespace(n: &mut Namespace) {
    n.metadata.annotations = None;
    n.metadata.labels = None;
    n.spec = None;
    n.status = None;
}

/// Start watching the cluster into `zone`; the zone is marked ready once all three lists
/// are in. Returns the watch tasks.
pub fn watch(client: Client, zone: Arc<Zone>) -> Vec<JoinHandle<()>> {
    let services = Arc::new(Informer::<Service>::new());
    let slices = Arc::new(Informer::<EndpointSlice>::new());
    let namespaces = Arc::new(Informer::<Namespace>::new());
    {
        let zone = zone.clone();
        services.on_change(move |c| {
            let s = c.object();
            let ns = s.namespace().unwrap_or_default();
            match c {
                Change::Add(_) | Change::Update { .. } => {
                    zone.set_service(&ns, &s.name_any(), service_spec(s).as_ref())
                }
                Change::Delete(_) => zone.set_service(&ns, &s.name_any(), None),
            }
        });
    }
    {
        let zone = zone.clone();
        slices.on_change(move |c| {
            let s = c.object();
            let ns = s.namespace().unwrap_or_default();
            match c {
                Change::Add(_) | Change::Update { .. } => {
                    zone.set_slice(&ns, &s.name_any(), slice_spec(s).as_ref())
                }
                Change::Delete(_) => zone.set_slice(&ns, &s.name_any(), None),
            }
        });
    }
    {
        let zone = zone.clone();
        namespaces.on_change(move |c| {
            let present = !matches!(c, Change::Delete(_));
            zone.set_namespace(&c.object().name_any(), present);
        });
    }
    let config = watcher::Config::default().any_semantic();
    let mut tasks = vec![
        tokio::spawn(services.clone().run(
            watcher::watcher(Api::<Service>::all(client.clone()), config.clone()),
            Some(trim_service as fn(&mut Service)),
        )),
        tokio::spawn(slices.clone().run(
            watcher::watcher(
                Api::<EndpointSlice>::all(client.clone()),
                config.clone().labels(SERVICE_NAME_LABEL),
            ),
            Some(trim_slice as fn(&mut EndpointSlice)),
        )),
        tokio::spawn(namespaces.clone().run(
            watcher::watcher(Api::<Namespace>::all(client), config),
            Some(trim_namespace as fn(&mut Namespace)),
        )),
    ];
    tasks.push(tokio::spawn(async move {
        let synced = async {
            services.wait_synced().await;
            slices.wait_synced().await;
            namespaces.wait_synced().await;
        };
        tokio::pin!(synced);
        let mut waited = 0;
        while tokio::time::timeout(std::time::Duration::from_secs(10), &mut synced)
            .await
            .is_err()
        {
            waited += 10;
            tracing::warn!(
                services = services.has_synced(),
                endpointslices = slices.has_synced(),
                namespaces = namespaces.has_synced(),
                "cluster DNS still cannot list the cluster's objects after {waited} s \
                 (it needs list and watch on services, endpointslices and namespaces); \
                 unknown cluster names get SERVFAIL meanwhile"
            );
        }
        zone.set_ready();
        tracing::info!(
            services = zone.service_count(),
            "cluster DNS has the cluster's services"
        );
    }));
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_services() {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5", "fd00::5"],
                     "ports": [{"name": "http", "port": 80}, {"port": 53, "protocol": "UDP"}]}
        }))
        .unwrap();
        let spec = service_spec(&svc).unwrap();
        assert_eq!(
            spec.kind,
            ServiceKind::ClusterIp(vec![
                "10.96.0.5".parse().unwrap(),
                "fd00::5".parse().unwrap()
            ])
        );
        assert_eq!(spec.ports[0].protocol, "TCP");
        assert_eq!(spec.ports[1].name, "");
        let headless: Service = serde_json::from_value(json!({
            "metadata": {"name": "db"}, "spec": {"clusterIP": "None"}
        }))
        .unwrap();
        assert_eq!(service_spec(&headless).unwrap().kind, ServiceKind::Headless);
        let ext: Service = serde_json::from_value(json!({
            "metadata": {"name": "x"}, "spec": {"type": "ExternalName", "externalName": "example.com"}
        }))
        .unwrap();
        assert_eq!(
            service_spec(&ext).unwrap().kind,
            ServiceKind::ExternalName("example.com".into())
        );
    }

    #[test]
    fn reads_slices() {
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "db-1", "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4",
            "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "hostname": "db-0", "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.3"]},
                {"addresses": ["not-an-ip"]}
            ]
        }))
        .unwrap();
        let spec = slice_spec(&slice).unwrap();
        assert_eq!(spec.service, "db");
        let ips: Vec<String> = spec.endpoints.iter().map(|e| e.raw.clone()).collect();
        assert_eq!(ips, vec!["10.0.0.1", "10.0.0.3"]);
        assert_eq!(spec.endpoints[0].hostname.as_deref(), Some("db-0"));
        let fqdn: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "f", "labels": {"kubernetes.io/service-name": "f"}},
            "addressType": "FQDN",
            "endpoints": [{"addresses": ["example.com"]}]
        }))
        .unwrap();
        assert!(slice_spec(&fqdn).unwrap().endpoints.is_empty());
        let unlabelled: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "u"}, "addressType": "IPv4", "endpoints": []
        }))
        .unwrap();
        assert!(slice_spec(&unlabelled).is_none());
    }
}
