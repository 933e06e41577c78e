//! The Deployment controller (Kubernetes' pkg/controller/deployment): each Deployment owns a
//! ReplicaSet per pod template (named `<deployment>-<pod-template-hash>`, the hash label added
//! to its selector, labels and template), rolls pods from the old ones to the new one with the
//! RollingUpdate (maxSurge/maxUnavailable) or Recreate strategy, scales them proportionally
//! when the deployment is resized mid-rollout, keeps `revisionHistoryLimit` old ones for
//! rollbacks, and reports the rollout in the deployment's status and conditions.
//!
//! It writes ReplicaSets only; the ReplicaSet controller turns them into pods.

mod helpers;
mod rollout;

use std::sync::Arc;

use capstan_api::selector::LabelSelector as Matcher;
use capstan_runtime::{Change, Informer, Queue, Recorder};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::PostParams;
use kube::{Api, Client};

use crate::util::{self, controller_ref};
use crate::Ctx;
use helpers::*;

/// The deployment controller's state: its informers, queue, client and event recorder.
pub(crate) struct Controller {
    client: Client,
    deployments: Arc<Informer<Deployment>>,
    rss: Arc<Informer<ReplicaSet>>,
    pods: Arc<Informer<Pod>>,
    recorder: Recorder,
    queue: Arc<Queue>,
}

pub fn start(ctx: &Ctx) {
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        deployments: ctx.informers.get::<Deployment>(),
        rss: ctx.informers.get::<ReplicaSet>(),
        pods: ctx.informers.get::<Pod>(),
        recorder: ctx.recorder("deployment-controller"),
        queue: Queue::new("deployment"),
    });

    let q = c.queue.clone();
    c.deployments.on_change(move |ch| {
        let d = ch.object();
        q.add(key_of(&d.metadata));
    });

    let h = c.clone();
    c.rss.on_change(move |ch| h.replica_set_changed(ch));

    let h = c.clone();
    c.pods.on_change(move |ch| {
        if let Change::Delete(pod) = ch {
            h.pod_deleted(pod);
        }
    });

    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        c.deployments.wait_synced().await;
        c.rss.wait_synced().await;
        c.pods.wait_synced().await;
        let w = c.clone();
        c.queue.run_workers(workers, move |key| {
            let c = w.clone();
            async move { c.sync(&key).await }
        });
    });
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    capstan_runtime::key(
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// The message of an API error as Kubernetes prints it (`%v` of a status error).
pub(crate) fn error_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

fn is_invalid(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422)
}

fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

/// The namespace is being deleted: every create fails, nothing to retry.
fn is_namespace_terminating(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
}

impl Controller {
    /// The deployment a controller reference names, if it still is that object.
    fn resolve(&self, namespace: &str, r: &OwnerReference) -> Option<Arc<Deployment>> {
        if r.kind != "Deployment" {
            return None;
        }
        let d = self.deployments.get(namespace, &r.name)?;
        (d.metadata.uid.as_deref() == Some(r.uid.as_str())).then_some(d)
    }

    /// Deployments whose selector matches an orphan replica set's labels (an empty selector
    /// matches nothing here).
    fn deployments_selecting(&self, rs: &ReplicaSet) -> Vec<Arc<Deployment>> {
        let labels = rs.metadata.labels.as_ref();
        if labels.is_none_or(|l| l.is_empty()) {
            return Vec::new();
        }
        let ns = rs.metadata.namespace.as_deref().unwrap_or_default();
        self.deployments
            .list_namespace(ns)
            .into_iter()
            .filter(|d| {
                let Some(s) = d.spec.as_ref() else {
                    return false;
                };
                if util::selects_everything(&s.selector) {
                    return false;
                }
                util::matcher(&s.selector).is_some_and(|m| util::matches(&m, labels))
            })
            .collect()
    }

    fn enqueue(&self, d: &Deployment) {
        self.queue.add(key_of(&d.metadata));
    }

    fn replica_set_changed(&self, ch: &Change<'_, ReplicaSet>) {
        match ch {
            Change::Add(rs) => {
                if rs.metadata.deletion_timestamp.is_some() {
                    return self.replica_set_deleted(rs);
                }
                let ns = rs.metadata.namespace.as_deref().unwrap_or_default();
                if let Some(r) = controller_ref(&rs.metadata) {
                    if let Some(d) = self.resolve(ns, r) {
                        self.enqueue(&d);
                    }
                    return;
                }
                for d in self.deployments_selecting(rs) {
                    self.enqueue(&d);
                }
            }
            Change::Update { old, new } => {
                if old.metadata.resource_version == new.metadata.resource_version {
                    return;
                }
                let ns = new.metadata.namespace.as_deref().unwrap_or_default();
                let cur_ref = controller_ref(&new.metadata);
                let old_ref = controller_ref(&old.metadata);
                let ref_changed = cur_ref != old_ref;
                if ref_changed {
                    if let Some(d) = old_ref.and_then(|r| self.resolve(ns, r)) {
                        self.enqueue(&d);
                    }
                }
                if let Some(r) = cur_ref {
                    if let Some(d) = self.resolve(ns, r) {
                        self.enqueue(&d);
                    }
                    return;
                }
                if ref_changed || old.metadata.labels != new.metadata.labels {
                    for d in self.deployments_selecting(new) {
                        self.enqueue(&d);
                    }
                }
            }
            Change::Delete(rs) => self.replica_set_deleted(rs),
        }
    }

    fn replica_set_deleted(&self, rs: &ReplicaSet) {
        let ns = rs.metadata.namespace.as_deref().unwrap_or_default();
        if let Some(d) = controller_ref(&rs.metadata).and_then(|r| self.resolve(ns, r)) {
            self.enqueue(&d);
        }
    }

    /// A Recreate deployment waits for its old pods to be gone: look again when one goes.
    fn pod_deleted(&self, pod: &Pod) {
        let Some(r) = controller_ref(&pod.metadata) else {
            return;
        };
        if r.kind != "ReplicaSet" {
            return;
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let Some(rs) = self.rss.get(ns, &r.name) else {
            return;
        };
        if rs.metadata.uid.as_deref() != Some(r.uid.as_str()) {
            return;
        }
        if let Some(d) = controller_ref(&rs.metadata).and_then(|r| self.resolve(ns, r)) {
            if strategy_type(&d) == RECREATE {
                self.enqueue(&d);
            }
        }
    }

    async fn sync(&self, key: &str) -> anyhow::Result<()> {
        let Some(cached) = self.deployments.get_key(key) else {
            return Ok(());
        };
        let mut d = (*cached).clone();
        let Some(spec) = d.spec.as_ref() else {
            return Ok(());
        };
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        if util::selects_everything(&spec.selector) {
            self.recorder.warning(
                &d,
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.",
            );
            let observed = d.status.as_ref().and_then(|s| s.observed_generation);
            if observed.unwrap_or(0) < d.metadata.generation.unwrap_or(0) {
                d.status
                    .get_or_insert_with(Default::default)
                    .observed_generation = d.metadata.generation;
                let api: Api<Deployment> = Api::namespaced(self.client.clone(), &ns);
                let _ = api.replace_status(&name, &PostParams::default(), &d).await;
            }
            return Ok(());
        }
        let Some(selector) = util::matcher(&spec.selector) else {
            // Validation keeps invalid selectors out; one that slips in is reported, and the
            // deployment is looked at again when it changes.
            tracing::warn!(deployment = %key, "deployment has an invalid label selector");
            return Ok(());
        };
        let rs_list = self.claim_replica_sets(&d, &selector).await?;
        let mut run = rollout::Run::new(self, d, rs_list, selector);
        match run.sync().await {
            Err(e)
                if e.downcast_ref::<kube::Error>()
                    .is_some_and(is_namespace_terminating) =>
            {
                Ok(())
            }
            other => other,
        }
    }

    /// The replica sets this deployment controls, after adopting matching orphans and
    /// releasing its own that no longer match (Kubernetes' ClaimReplicaSets).
    async fn claim_replica_sets(
        &self,
        d: &Deployment,
        selector: &Matcher,
    ) -> anyhow::Result<Vec<ReplicaSet>> {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let deleting = d.metadata.deletion_timestamp.is_some();
        let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), &ns);
        let mut candidates = self.rss.list_namespace(&ns);
        candidates.sort_by(|a, b| by_creation(a, b));
        let mut owned = Vec::new();
        let mut errors: Vec<String> = Vec::new();
        let mut can_adopt: Option<Result<(), String>> = None;
        for rs in candidates {
            let matches = util::matches(selector, rs.metadata.labels.as_ref());
            match controller_ref(&rs.metadata) {
                Some(r) if r.uid != uid => {}
                Some(_) => {
                    if matches {
                        owned.push((*rs).clone());
                    } else if !deleting {
                        match util::release(&api, &*rs, &uid).await {
                            Ok(_) => {}
                            Err(e) if util::is_not_found(&e) || is_invalid(&e) => {}
                            Err(e) => errors.push(error_message(&e)),
                        }
                    }
                }
                None => {
                    if deleting || !matches || rs.metadata.deletion_timestamp.is_some() {
                        continue;
                    }
                    if can_adopt.is_none() {
                        can_adopt = Some(self.recheck_deletion(d).await);
                    }
                    if let Some(Err(e)) = &can_adopt {
                        errors.push(format!(
                            "can't adopt ReplicaSet {ns}/{} ({}): {e}",
                            rs.metadata.name.as_deref().unwrap_or_default(),
                            rs.metadata.uid.as_deref().unwrap_or_default()
                        ));
                        continue;
                    }
                    match util::adopt(&api, &*rs, &util::owner_ref(d)).await {
                        Ok(adopted) => owned.push(adopted),
                        Err(e) if util::is_not_found(&e) => {}
                        Err(e) => errors.push(error_message(&e)),
                    }
                }
            }
        }
        if !errors.is_empty() {
            anyhow::bail!("{}", errors.join("; "));
        }
        Ok(owned)
    }

    /// Before adopting, make sure (with a live read) the deployment is still there and not
    /// being deleted.
    async fn recheck_deletion(&self, d: &Deployment) -> Result<(), String> {
        let ns = d.metadata.namespace.as_deref().unwrap_or_default();
        let name = d.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), ns);
        let fresh = api.get(name).await.map_err(|e| error_message(&e))?;
        if fresh.metadata.uid != d.metadata.uid {
            return Err(format!(
                "original Deployment {ns}/{name} is gone: got uid {}, wanted {}",
                fresh.metadata.uid.as_deref().unwrap_or_default(),
                d.metadata.uid.as_deref().unwrap_or_default()
            ));
        }
        if let Some(t) = fresh.metadata.deletion_timestamp {
            return Err(format!("{ns}/{name} has just been deleted at {}", t.0));
        }
        Ok(())
    }
}
