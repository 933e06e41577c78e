//! The TTL-after-finished controller (Kubernetes v1.32's pkg/controller/ttlafterfinished):
//! deletes a finished Job (`Complete` or `Failed`) `spec.ttlSecondsAfterFinished` seconds after
//! the condition's transition, in the foreground (its pods go first), after re-reading the Job
//! from the API in case its TTL was changed meanwhile.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use capstan_runtime::{Change, Informer, Queue};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, Preconditions, PropagationPolicy};
use kube::{Api, Client};

use crate::job::Delayed;
use crate::util;
use crate::Ctx;

pub fn start(ctx: &Ctx) {
    let queue = Queue::new("ttl_jobs_to_delete");
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        jobs: ctx.informers.get::<Job>(),
        queue: queue.clone(),
        delayed: Delayed::new(queue),
    });
    let h = c.clone();
    c.jobs.on_change(move |ch| match ch {
        Change::Add(j) | Change::Update { new: j, .. } => {
            if j.metadata.deletion_timestamp.is_none() && needs_cleanup(j) {
                h.queue.add(key_of(j));
            }
        }
        Change::Delete(_) => {}
    });
    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        c.jobs.wait_synced().await;
        let w = c.clone();
        c.queue.run_workers(workers, move |key| {
            let c = w.clone();
            async move { c.sync(&key).await }
        });
    });
}

struct Controller {
    client: Client,
    jobs: Arc<Informer<Job>>,
    queue: Arc<Queue>,
    delayed: Delayed,
}

fn key_of(j: &Job) -> String {
    capstan_runtime::key(
        j.metadata.namespace.as_deref(),
        j.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn ttl(j: &Job) -> Option<i32> {
    j.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished)
}

/// A finished job with a TTL.
fn needs_cleanup(j: &Job) -> bool {
    ttl(j).is_some() && crate::job::is_finished(j)
}

/// When the job finished: the transition of its `Complete` or `Failed` condition.
fn finish_time(j: &Job) -> Option<Timestamp> {
    j.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
        .filter(|t| *t != Timestamp::UNIX_EPOCH)
}

/// What the TTL says at `now`: not applicable, expire at a time already passed, or wait.
#[derive(Debug, PartialEq)]
enum Ttl {
    NotApplicable,
    Expired,
    Wait(Duration),
}

fn check_ttl(j: &Job, now: Timestamp) -> anyhow::Result<Ttl> {
    if j.metadata.deletion_timestamp.is_some() || !needs_cleanup(j) {
        return Ok(Ttl::NotApplicable);
    }
    let finished = finish_time(j).with_context(|| {
        format!(
            "unable to find the time when the Job {}/{} finished",
            j.metadata.namespace.as_deref().unwrap_or_default(),
            j.metadata.name.as_deref().unwrap_or_default()
        )
    })?;
    let expire = finished
        .checked_add(SignedDuration::from_secs(i64::from(ttl(j).unwrap_or(0))))
        .unwrap_or(Timestamp::MAX);
    let remaining = expire.duration_since(now);
    if remaining.is_zero() || remaining.is_negative() {
        return Ok(Ttl::Expired);
    }
    Ok(Ttl::Wait(remaining.unsigned_abs()))
}

impl Controller {
    /// Whether the job's TTL has run out; if not, it is queued again for when it will.
    fn expired(&self, key: &str, j: &Job) -> anyhow::Result<bool> {
        match check_ttl(j, Timestamp::now())? {
            Ttl::NotApplicable => Ok(false),
            Ttl::Expired => Ok(true),
            Ttl::Wait(d) => {
                self.delayed.add_after(key, d);
                Ok(false)
            }
        }
    }

    async fn sync(&self, key: &str) -> anyhow::Result<()> {
        let Some(job) = self.jobs.get_key(key) else {
            return Ok(());
        };
        if !self.expired(key, &job)? {
            return Ok(());
        }
        // The cache may be stale (a TTL raised meanwhile): check the job as stored.
        let ns = job.metadata.namespace.clone().unwrap_or_default();
        let name = job.metadata.name.clone().unwrap_or_default();
        let api: Api<Job> = Api::namespaced(self.client.clone(), &ns);
        let fresh = match api.get(&name).await {
            Ok(j) => j,
            Err(e) if util::is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if !self.expired(key, &fresh)? {
            return Ok(());
        }
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: fresh.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        tracing::debug!(job = %key, "cleaning up finished job after its TTL");
        match api.delete(&name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) if util::is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn job(ttl: Option<i32>, finished: Option<(&str, Timestamp)>) -> Job {
        Job {
            metadata: Default::default(),
            spec: Some(JobSpec {
                ttl_seconds_after_finished: ttl,
                ..Default::default()
            }),
            status: Some(JobStatus {
                conditions: finished.map(|(t, at)| {
                    vec![JobCondition {
                        type_: t.into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(at)),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn ttl_counts_from_the_finish_condition() {
        let now = Timestamp::now();
        let ago = |s: i64| now - SignedDuration::from_secs(s);
        assert_eq!(
            check_ttl(&job(None, Some(("Complete", ago(100)))), now).unwrap(),
            Ttl::NotApplicable
        );
        assert_eq!(
            check_ttl(&job(Some(10), None), now).unwrap(),
            Ttl::NotApplicable
        );
        assert_eq!(
            check_ttl(&job(Some(0), Some(("Complete", now))), now).unwrap(),
            Ttl::Expired
        );
        assert_eq!(
            check_ttl(&job(Some(60), Some(("Failed", ago(100)))), now).unwrap(),
            Ttl::Expired
        );
        assert_eq!(
            check_ttl(&job(Some(60), Some(("Complete", ago(20)))), now).unwrap(),
            Ttl::Wait(Duration::from_secs(40))
        );
        // A finished condition without a transition time is an error, not a panic.
        let mut j = job(Some(5), Some(("Complete", now)));
        j.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time = None;
        assert!(check_ttl(&j, now)
            .unwrap_err()
            .to_string()
            .starts_with("unable to find the time when the Job"));
        // Being deleted already: nothing to do.
        let mut j = job(Some(0), Some(("Complete", now)));
        j.metadata.deletion_timestamp = Some(Time(now));
        assert_eq!(check_ttl(&j, now).unwrap(), Ttl::NotApplicable);
    }
}
