//! The node's heartbeat: the Lease `kube-node-lease/<node>`, renewed every quarter of its
//! duration (Kubernetes' node lease controller). The Lease is owned by the Node so it goes
//! away with it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::Api;

use crate::Kubelet;

/// The namespace of node Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// Immediate renewal attempts before waiting for the next interval.
const MAX_UPDATE_RETRIES: usize = 5;
const MAX_BACKOFF: Duration = Duration::from_secs(7);

/// How often the Lease is renewed: a quarter of its duration.
pub fn renew_interval(lease_duration_seconds: i32) -> Duration {
    Duration::from_secs_f64((f64::from(lease_duration_seconds.max(1))) * 0.25)
}

/// Renew the Lease until the process ends.
pub async fn run(k: Arc<Kubelet>) {
    let api: Api<Lease> = Api::namespaced(k.client.clone(), NODE_LEASE_NAMESPACE);
    let interval = renew_interval(k.opts.node_lease_duration_seconds);
    let mut c = Controller {
        k,
        api,
        latest: None,
    };
    let mut node = c.k.node.subscribe();
    loop {
        c.sync().await;
        let pause = tokio::time::sleep(super::jitter(interval, 0.04));
        if c.latest.is_some() || c.k.node.borrow().is_some() {
            pause.await;
        } else {
            // No Lease yet (its Node is not known): try again as soon as the Node is.
            tokio::select! {
                _ = pause => {}
                _ = node.wait_for(Option::is_some) => {}
            }
        }
    }
}

struct Controller {
    k: Arc<Kubelet>,
    api: Api<Lease>,
    /// The Lease as last written: renewed from it without a read while nobody else writes.
    latest: Option<Lease>,
}

impl Controller {
    fn name(&self) -> &str {
        &self.k.opts.node_name
    }

    async fn sync(&mut self) {
        if let Some(latest) = self.latest.clone() {
            match self.retry_update(latest).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::info!(node = %self.name(), error = %e, "failed to update lease using latest lease, fallback to ensure lease")
                }
            }
        }
        let (lease, created) = self.backoff_ensure().await;
        self.latest = lease.clone();
        if let (Some(lease), false) = (lease, created) {
            if let Err(e) = self.retry_update(lease).await {
                tracing::error!(node = %self.name(), error = %e, "lease renewal failed, will retry");
            }
        }
    }

    /// Read the Lease, creating it when missing, retrying with back-off until the API
    /// answers. Returns the Lease (None when it could not be made yet: the Node is not
    /// known) and whether this call created it.
    async fn backoff_ensure(&self) -> (Option<Lease>, bool) {
        let mut sleep = Duration::from_millis(100);
        loop {
            match self.ensure().await {
                Ok(r) => return r,
                Err(e) => {
                    sleep = (sleep * 2).min(MAX_BACKOFF);
                    tracing::error!(node = %self.name(), error = %e, retry_in = ?sleep, "failed to ensure lease exists");
                    tokio::time::sleep(sleep).await;
                }
            }
        }
    }

    async fn ensure(&self) -> Result<(Option<Lease>, bool), kube::Error> {
        match self.api.get(self.name()).await {
            Ok(l) => Ok((Some(l), false)),
            Err(kube::Error::Api(e)) if e.code == 404 => {
                let Some(lease) = self.new_lease(None).await else {
                    // The owner could not be set: create it next time.
                    return Ok((None, false));
                };
                let created = self.api.create(&super::post_params(), &lease).await?;
                Ok((Some(created), true))
            }
            Err(e) => Err(e),
        }
    }

    async fn retry_update(&mut self, base: Lease) -> Result<(), String> {
        let mut base = base;
        for attempt in 0..MAX_UPDATE_RETRIES {
            let lease = match self.new_lease(Some(&base)).await {
                Some(l) => l,
                None => return Err("lease could not be built".into()),
            };
            match self
                .api
                .replace(self.name(), &super::post_params(), &lease)
                .await
            {
                Ok(updated) => {
                    self.latest = Some(updated);
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(node = %self.name(), attempt, error = %e, "failed to update lease");
                    if matches!(&e, kube::Error::Api(ae) if ae.code == 409) {
                        match self.backoff_ensure().await {
                            (Some(fresh), _) => base = fresh,
                            (None, _) => return Err("lease is gone".into()),
                        }
                    }
                }
            }
        }
        Err(format!(
            "failed {MAX_UPDATE_RETRIES} attempts to update lease"
        ))
    }

    /// A Lease to write: `base` (or a new one) renewed now, owned by the Node. A new Lease
    /// whose owner cannot be set yet is not made (None); a renewal goes ahead without it.
    async fn new_lease(&self, base: Option<&Lease>) -> Option<Lease> {
        let name = self.name().to_string();
        let mut lease = match base {
            Some(b) => b.clone(),
            None => Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(NODE_LEASE_NAMESPACE.into()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name.clone()),
                    lease_duration_seconds: Some(self.k.opts.node_lease_duration_seconds),
                    ..Default::default()
                }),
            },
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        if lease
            .metadata
            .owner_references
            .as_ref()
            .is_none_or(Vec::is_empty)
        {
            match self.node_uid().await {
                Some(uid) => lease.metadata.owner_references = Some(vec![owner_ref(&name, &uid)]),
                None if base.is_none() => return None,
                None => {}
            }
        }
        Some(lease)
    }

    async fn node_uid(&self) -> Option<String> {
        let known = self
            .k
            .node
            .borrow()
            .as_ref()
            .and_then(|n| n.metadata.uid.clone());
        if known.is_some() {
            return known;
        }
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.k.client.clone());
        match nodes.get(self.name()).await {
            Ok(n) => n.metadata.uid,
            Err(e) => {
                tracing::debug!(node = %self.name(), error = %e, "failed to get node when trying to set owner ref to the node lease");
                None
            }
        }
    }
}

/// The Lease's owner: its Node.
pub fn owner_ref(node: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.into(),
        uid: uid.into(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_is_a_quarter_of_the_duration() {
        assert_eq!(renew_interval(40), Duration::from_secs(10));
        assert_eq!(renew_interval(10), Duration::from_millis(2500));
        assert_eq!(renew_interval(0), Duration::from_millis(250));
        let o = owner_ref("node-a", "u-1");
        assert_eq!(
            (
                o.api_version.as_str(),
                o.kind.as_str(),
                o.name.as_str(),
                o.uid.as_str()
            ),
            ("v1", "Node", "node-a", "u-1")
        );
        assert_eq!(o.controller, None);
        assert_eq!(o.block_owner_deletion, None);
    }
}
