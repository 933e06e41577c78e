//! The control loop: watch Ingresses, IngressClasses, Services, EndpointSlices and the named
//! TLS Secrets; on every change build a new table and swap it in; report problems as events
//! and the address we serve on in each Ingress's `status.loadBalancer`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use capstan_runtime::informer::{Change, Informer};
use capstan_runtime::{Informers, Recorder};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, IngressLoadBalancerIngress};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use parking_lot::RwLock;
use serde_json::json;
use tokio::sync::Notify;

use crate::class::OurClass;
use crate::metrics::Metrics;
use crate::routes::{self, CertState, Current, Keep, Sources, Warning, SERVICE_NAME_LABEL};
use crate::secrets::SecretStore;
use crate::stopped;

/// Changes arriving within this long of each other make one rebuild.
const COALESCE: Duration = Duration::from_millis(30);
/// When a status update or a Secret read failed, try again after this long.
const RETRY: Duration = Duration::from_secs(5);

/// The address written into status.loadBalancer.ingress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Published {
    Ip(String),
    Hostname(String),
}

impl Published {
    pub fn parse(s: &str) -> Published {
        match s.parse::<std::net::IpAddr>() {
            Ok(ip) => Published::Ip(ip.to_string()),
            Err(_) => Published::Hostname(s.to_string()),
        }
    }

    fn matches(&self, status: Option<&Vec<IngressLoadBalancerIngress>>) -> bool {
        let Some([one]) = status.map(Vec::as_slice) else {
            return false;
        };
        match self {
            Published::Ip(ip) => one.ip.as_deref() == Some(ip) && one.hostname.is_none(),
            Published::Hostname(h) => one.hostname.as_deref() == Some(h) && one.ip.is_none(),
        }
    }

    fn json(&self) -> serde_json::Value {
        match self {
            Published::Ip(ip) => json!({ "ip": ip }),
            Published::Hostname(h) => json!({ "hostname": h }),
        }
    }
}

pub struct Controller {
    pub client: Client,
    pub class: String,
    pub publish: Option<Published>,
    pub current: Arc<Current>,
    pub metrics: Arc<Metrics>,
}

struct InformerSources<'a> {
    services: &'a Informer<Service>,
    slices: &'a Informer<EndpointSlice>,
    secrets: &'a SecretStore,
}

impl Sources for InformerSources<'_> {
    fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.services.get(namespace, name)
    }

    fn slices(&self, namespace: &str, service: &str) -> Vec<Arc<EndpointSlice>> {
        let mut out = Vec::new();
        self.slices.for_each_in(namespace, |s| {
            if slice_service(s) == Some(service) {
                out.push(s.clone());
            }
        });
        out
    }

    fn cert(&self, namespace: &str, name: &str) -> CertState {
        self.secrets.cert(namespace, name)
    }
}

fn slice_service(s: &EndpointSlice) -> Option<&str> {
    s.metadata
        .labels
        .as_ref()?
        .get(SERVICE_NAME_LABEL)
        .map(String::as_str)
}

/// The services the Ingresses' backends name, `(namespace, name)`.
fn named_services(ingresses: &[Arc<Ingress>]) -> HashSet<(String, String)> {
    let mut out = HashSet::new();
    for ing in ingresses {
        let ns = ing.namespace().unwrap_or_default();
        let Some(spec) = ing.spec.as_ref() else {
            continue;
        };
        let backends = spec.default_backend.iter().chain(
            spec.rules
                .iter()
                .flatten()
                .filter_map(|r| r.http.as_ref())
                .flat_map(|h| h.paths.iter().map(|p| &p.backend)),
        );
        for b in backends {
            if let Some(s) = &b.service {
                out.insert((ns.clone(), s.name.clone()));
            }
        }
    }
    out
}

impl Controller {
    /// Run until `shutdown` fires. `first` is notified once the first table took effect.
    pub async fn run(
        self,
        shutdown: tokio::sync::watch::Receiver<bool>,
        first: Arc<Notify>,
    ) -> anyhow::Result<()> {
        let mut shutdown = shutdown;
        let informers = Informers::new(self.client.clone());
        let ingresses = informers.get::<Ingress>();
        let classes = informers.get::<IngressClass>();
        let services = informers.get::<Service>();
        let slices = informers.get::<EndpointSlice>();
        let wake = Arc::new(Notify::new());
        // Services the table uses: only their changes (and their slices') need a rebuild.
        let used: Arc<RwLock<HashSet<(String, String)>>> = Arc::default();

        let w = wake.clone();
        ingresses.on_change(move |_| w.notify_one());
        let (w, class) = (wake.clone(), self.class.clone());
        classes.on_change(move |c| {
            if c.object().metadata.name.as_deref() == Some(class.as_str()) {
                w.notify_one();
            }
        });
        let (w, u) = (wake.clone(), used.clone());
        services.on_change(move |c| {
            let s = c.object();
            let key = (s.namespace().unwrap_or_default(), s.name_any());
            if u.read().contains(&key) {
                w.notify_one();
            }
        });
        let (w, u) = (wake.clone(), used.clone());
        slices.on_change(move |c: &Change<'_, EndpointSlice>| {
            let relevant = |s: &EndpointSlice| {
                slice_service(s).is_some_and(|svc| {
                    u.read()
                        .contains(&(s.namespace().unwrap_or_default(), svc.to_string()))
                })
            };
            let hit = match c {
                Change::Update { old, new } => relevant(old) || relevant(new),
                other => relevant(other.object()),
            };
            if hit {
                w.notify_one();
            }
        });
        informers.start();
        let secrets = Arc::new(SecretStore::new(wake.clone()));
        let watch = tokio::spawn(secrets.clone().watch(self.client.clone()));
        let _abort = AbortOnDrop(watch);

        let synced = async {
            ingresses.wait_synced().await;
            classes.wait_synced().await;
            services.wait_synced().await;
            slices.wait_synced().await;
        };
        let mut synced = std::pin::pin!(synced);
        loop {
            tokio::select! {
                _ = &mut synced => break,
                _ = tokio::time::sleep(Duration::from_secs(10)) => tracing::warn!(
                    "still waiting to list Ingresses, IngressClasses, Services and EndpointSlices \
                     (can the kubeconfig's user list and watch them?)"
                ),
                _ = stopped(&mut shutdown) => return Ok(()),
            }
        }
        tracing::info!("caches synced; building the configuration");

        let recorder = Recorder::new(self.client.clone(), "capstan-ingress");
        let keep = Keep::new(self.metrics.clone());
        let mut warned: HashSet<Warning> = HashSet::new();
        let mut synced: HashMap<String, i64> = HashMap::new();
        let mut first = Some(first);
        loop {
            let ours_class = OurClass::new(&self.class, classes.get("", &self.class).as_deref());
            let ours: Vec<Arc<Ingress>> = ingresses
                .list()
                .into_iter()
                .filter(|i| ours_class.owns(i))
                .collect();
            *used.write() = named_services(&ours);
            let missing = secrets.set_wanted(routes::tls_secrets(&ours));
            if !missing.is_empty() {
                secrets.fetch(&self.client, missing).await;
            }
            let sources = InformerSources {
                services: &services,
                slices: &slices,
                secrets: &secrets,
            };
            let built = routes::build(&ours, &sources, &keep);
            self.current.store(built.table);
            self.metrics.reloaded(ours.len());
            if let Some(f) = first.take() {
                f.notify_one();
                tracing::info!(ingresses = ours.len(), "serving");
            } else {
                tracing::debug!(ingresses = ours.len(), "configuration reloaded");
            }

            let by_name: HashMap<(String, String), &Arc<Ingress>> = ours
                .iter()
                .map(|i| ((i.namespace().unwrap_or_default(), i.name_any()), i))
                .collect();
            // Warnings: once each, until they go away and come back.
            let now: HashSet<Warning> = built.warnings.iter().cloned().collect();
            for w in &built.warnings {
                if warned.contains(w) {
                    continue;
                }
                tracing::warn!(ingress = %format!("{}/{}", w.namespace, w.ingress), reason = w.reason, "{}", w.message);
                if let Some(ing) = by_name.get(&(w.namespace.clone(), w.ingress.clone())) {
                    recorder.warning(&***ing, w.reason, w.message.clone());
                }
            }
            warned = now;
            // A Normal event for each new or changed Ingress, as ingress-nginx's "Sync".
            let mut still = HashMap::new();
            for ing in &ours {
                let uid = ing.uid().unwrap_or_default();
                let generation = ing.metadata.generation.unwrap_or(0);
                if synced.get(&uid) != Some(&generation) {
                    recorder.normal(&**ing, "Sync", "Scheduled for sync");
                }
                still.insert(uid, generation);
            }
            synced = still;

            let mut retry = secrets.has_unreadable();
            if let Some(publish) = &self.publish {
                retry |= !self.update_status(&ours, publish).await;
            }
            let retry_after = async {
                if retry {
                    tokio::time::sleep(RETRY).await
                } else {
                    std::future::pending::<()>().await
                }
            };
            tokio::select! {
                _ = wake.notified() => {}
                _ = retry_after => {}
                _ = stopped(&mut shutdown) => return Ok(()),
            }
            tokio::time::sleep(COALESCE).await;
        }
    }

    /// Write our address into the status of Ingresses that lack it; false if a write failed.
    async fn update_status(&self, ours: &[Arc<Ingress>], publish: &Published) -> bool {
        let mut ok = true;
        for ing in ours {
            let current = ing
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref());
            if publish.matches(current) {
                continue;
            }
            let ns = ing.namespace().unwrap_or_default();
            let name = ing.name_any();
            let api: Api<Ingress> = Api::namespaced(self.client.clone(), &ns);
            let patch = json!({"status": {"loadBalancer": {"ingress": [publish.json()]}}});
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => tracing::info!(ingress = %format!("{ns}/{name}"), "status updated"),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => {
                    tracing::warn!(ingress = %format!("{ns}/{name}"), error = %e, "cannot update the status");
                    ok = false;
                }
            }
        }
        ok
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
    fn published_address_matches_status() {
        let ip = Published::parse("192.0.2.1");
        assert_eq!(ip, Published::Ip("192.0.2.1".into()));
        let host = Published::parse("lb.example.com");
        assert_eq!(host, Published::Hostname("lb.example.com".into()));
        let st = |ip: Option<&str>, h: Option<&str>| {
            vec![IngressLoadBalancerIngress {
                ip: ip.map(Into::into),
                hostname: h.map(Into::into),
                ..Default::default()
            }]
        };
        assert!(ip.matches(Some(&st(Some("192.0.2.1"), None))));
        assert!(!ip.matches(Some(&st(Some("192.0.2.2"), None))));
        assert!(!ip.matches(None));
        assert!(!ip.matches(Some(&vec![])));
        assert!(host.matches(Some(&st(None, Some("lb.example.com")))));
        assert!(!host.matches(Some(&st(Some("192.0.2.1"), Some("lb.example.com")))));
    }
}
