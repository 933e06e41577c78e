//! Leader election through a coordination.k8s.io/v1 Lease, as client-go's `leaderelection`
//! does: acquire when the lease is free or expired, renew every `retry_period`, and give up
//! leadership if a renewal has not succeeded within `renew_deadline`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaderElection {
    /// Block until this process holds the lease; then keep renewing it in the background.
    /// The returned receiver turns `false` when leadership is lost.
    pub async fn acquire(self, client: Client) -> watch::Receiver<bool> {
        let api: Api<Lease> = Api::namespaced(client, &self.namespace);
        loop {
            match self.try_acquire_or_renew(&api).await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => tracing::debug!(error = %e, "leader election"),
            }
            tokio::time::sleep(self.retry_period).await;
        }
        tracing::info!(lease = %format!("{}/{}", self.namespace, self.name), identity = %self.identity, "became leader");
        let (tx, rx) = watch::channel(true);
        tokio::spawn(async move {
            let mut last_renew = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(self.retry_period).await;
                match self.try_acquire_or_renew(&api).await {
                    Ok(true) => last_renew = tokio::time::Instant::now(),
                    Ok(false) => {
                        tracing::error!("leadership lost: another holder took the lease");
                        let _ = tx.send(false);
                        return;
                    }
                    Err(e) => {
                        if last_renew.elapsed() > self.renew_deadline {
                            tracing::error!(error = %e, "leadership lost: could not renew the lease");
                            let _ = tx.send(false);
                            return;
                        }
                    }
                }
            }
        });
        rx
    }

    /// One attempt; Ok(true) when we hold the lease afterwards.
    async fn try_acquire_or_renew(&self, api: &Api<Lease>) -> Result<bool, kube::Error> {
        let now = k8s_openapi::jiff::Timestamp::now();
        let existing = api.get_opt(&self.name).await?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        if !ours && !holder.is_empty() {
            let renewed = spec.renew_time.as_ref().map(|t| t.0);
            let duration =
                Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64);
            let expired = match renewed {
                Some(t) => {
                    let age = now.duration_since(t);
                    age.as_secs_f64() > duration.as_secs_f64()
                }
                None => true,
            };
            if !expired {
                return Ok(false);
            }
        }
        let acquire_time = if ours {
            spec.acquire_time.map(|t| t.0).unwrap_or(now)
        } else {
            now
        };
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        lease.spec = Some(self.spec(acquire_time, now, transitions));
        match api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn spec(
        &self,
        acquire: k8s_openapi::jiff::Timestamp,
        renew: k8s_openapi::jiff::Timestamp,
        transitions: i32,
    ) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs().max(1) as i32),
            acquire_time: Some(MicroTime(acquire)),
            renew_time: Some(MicroTime(renew)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }
}
