//! The ReplicaSet and ReplicationController controllers (Kubernetes' pkg/controller/replicaset,
//! whose one implementation serves both kinds): keep `spec.replicas` active pods matching the
//! selector, adopting matching orphans and releasing owned pods that stopped matching, and
//! report the counts (replicas, fully labeled, ready, available) in the owner's status.
//!
//! Creations and deletions are throttled the way Kubernetes throttles them: at most 500 per
//! sync, creations in slow-start batches (1, 2, 4, ...) that stop at the first failure, and no
//! further action for an owner until the pod informer has observed what was asked for
//! (expectations), so a stale cache never causes a second round of creations.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use capstan_api::selector::LabelSelector as Matcher;
use capstan_runtime::{Change, Informer, Queue, Recorder};
use futures::{stream, StreamExt};
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{
    Pod, PodTemplateSpec, ReplicationController, ReplicationControllerCondition,
    ReplicationControllerStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::expectations::Expectations;
use crate::util;
use crate::Ctx;

/// Most pods created or deleted for one owner in one sync (Kubernetes' BurstReplicas).
const BURST_REPLICAS: usize = 500;
/// Requests in flight at once within a slow-start batch or a round of deletions.
const CONCURRENCY: usize = 128;
/// Pods with a lower cost are deleted first when scaling down.
const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The status cause an API server gives when a namespace is being deleted.
const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";

/// Start the ReplicaSet controller (apps/v1 ReplicaSets).
pub fn start_replicaset(ctx: &Ctx) {
    start::<ReplicaSet>(ctx);
}

/// Start the ReplicationController controller (core/v1 ReplicationControllers).
pub fn start_replicationcontroller(ctx: &Ctx) {
    start::<ReplicationController>(ctx);
}

/// What the controller needs from its owner kind.
trait Owner:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The event source and queue name (Kubernetes' component name).
    const COMPONENT: &'static str;
    /// The pod selector; an error for a selector that does not convert.
    fn selector(&self) -> Result<Matcher, String>;
    fn replicas(&self) -> i32;
    fn min_ready_seconds(&self) -> i32;
    fn template(&self) -> Option<&PodTemplateSpec>;
    fn status(&self) -> Status;
    fn set_status(&mut self, status: &Status);
}

/// The status both kinds share.
#[derive(Debug, Clone, Default, PartialEq)]
struct Status {
    replicas: i32,
    fully_labeled: i32,
    ready: i32,
    available: i32,
    observed_generation: i64,
    conditions: Vec<Condition>,
}

#[derive(Debug, Clone, PartialEq)]
struct Condition {
    type_: String,
    status: String,
    reason: Option<String>,
    message: Option<String>,
    last_transition_time: Option<Time>,
}

impl Status {
    fn same_counts(&self, other: &Status) -> bool {
        self.replicas == other.replicas
            && self.fully_labeled == other.fully_labeled
            && self.ready == other.ready
            && self.available == other.available
    }
}

/// Kubernetes omits zero counts from the status it writes.
fn nonzero<T: Default + PartialEq>(v: T) -> Option<T> {
    (v != T::default()).then_some(v)
}

impl Owner for ReplicaSet {
    const COMPONENT: &'static str = "replicaset-controller";

    fn selector(&self) -> Result<Matcher, String> {
        let Some(spec) = self.spec.as_ref() else {
            return Ok(Matcher::nothing());
        };
        let v = serde_json::to_value(&spec.selector).map_err(|e| e.to_string())?;
        Matcher::from_json(&v).map_err(|e| e.to_string())
    }

    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }

    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref()?.template.as_ref()
    }

    fn status(&self) -> Status {
        let Some(s) = self.status.as_ref() else {
            return Status::default();
        };
        Status {
            replicas: s.replicas,
            fully_labeled: s.fully_labeled_replicas.unwrap_or(0),
            ready: s.ready_replicas.unwrap_or(0),
            available: s.available_replicas.unwrap_or(0),
            observed_generation: s.observed_generation.unwrap_or(0),
            conditions: s
                .conditions
                .iter()
                .flatten()
                .map(|c| Condition {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                    last_transition_time: c.last_transition_time.clone(),
                })
                .collect(),
        }
    }

    fn set_status(&mut self, s: &Status) {
        self.status = Some(ReplicaSetStatus {
            replicas: s.replicas,
            fully_labeled_replicas: nonzero(s.fully_labeled),
            ready_replicas: nonzero(s.ready),
            available_replicas: nonzero(s.available),
            observed_generation: nonzero(s.observed_generation),
            conditions: (!s.conditions.is_empty()).then(|| {
                s.conditions
                    .iter()
                    .map(|c| ReplicaSetCondition {
                        type_: c.type_.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                        last_transition_time: c.last_transition_time.clone(),
                    })
                    .collect()
            }),
        });
    }
}

impl Owner for ReplicationController {
    const COMPONENT: &'static str = "replication-controller";

    fn selector(&self) -> Result<Matcher, String> {
        let empty = BTreeMap::new();
        let selector = self
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .unwrap_or(&empty);
        Ok(util::map_matcher(selector))
    }

    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }

    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref()?.template.as_ref()
    }

    fn status(&self) -> Status {
        let Some(s) = self.status.as_ref() else {
            return Status::default();
        };
        Status {
            replicas: s.replicas,
            fully_labeled: s.fully_labeled_replicas.unwrap_or(0),
            ready: s.ready_replicas.unwrap_or(0),
            available: s.available_replicas.unwrap_or(0),
            observed_generation: s.observed_generation.unwrap_or(0),
            conditions: s
                .conditions
                .iter()
                .flatten()
                .map(|c| Condition {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                    last_transition_time: c.last_transition_time.clone(),
                })
                .collect(),
        }
    }

    fn set_status(&mut self, s: &Status) {
        self.status = Some(ReplicationControllerStatus {
            replicas: s.replicas,
            fully_labeled_replicas: nonzero(s.fully_labeled),
            ready_replicas: nonzero(s.ready),
            available_replicas: nonzero(s.available),
            observed_generation: nonzero(s.observed_generation),
            conditions: (!s.conditions.is_empty()).then(|| {
                s.conditions
                    .iter()
                    .map(|c| ReplicationControllerCondition {
                        type_: c.type_.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                        last_transition_time: c.last_transition_time.clone(),
                    })
                    .collect()
            }),
        });
    }
}

/// Expectations with deletions tracked per pod (Kubernetes' UIDTrackingControllerExpectations):
/// a pod's deletion is seen twice (its deletionTimestamp, then its removal) but counts once.
#[derive(Default)]
struct Tracker {
    exp: Expectations,
    deleting: Mutex<HashMap<String, HashSet<String>>>,
}

impl Tracker {
    fn expect_creations(&self, key: &str, n: usize) {
        self.exp.expect_creations(key, n as i64);
    }

    fn expect_deletions(&self, key: &str, pods: HashSet<String>) {
        let n = pods.len() as i64;
        self.deleting.lock().insert(key.to_string(), pods);
        self.exp.expect_deletions(key, n);
    }

    fn creation_observed(&self, key: &str) {
        self.exp.creation_observed(key);
    }

    fn deletion_observed(&self, key: &str, pod_key: &str) {
        let tracked = self
            .deleting
            .lock()
            .get_mut(key)
            .is_some_and(|s| s.remove(pod_key));
        if tracked {
            self.exp.deletion_observed(key);
        }
    }

    fn satisfied(&self, key: &str) -> bool {
        self.exp.satisfied(key)
    }

    fn delete(&self, key: &str) {
        self.deleting.lock().remove(key);
        self.exp.delete(key);
    }
}

struct Controller<K: Owner> {
    client: Client,
    owners: Arc<Informer<K>>,
    pods: Arc<Informer<Pod>>,
    queue: Arc<Queue>,
    tracker: Tracker,
    recorder: Recorder,
}

fn start<K: Owner>(ctx: &Ctx) {
    let c = Arc::new(Controller::<K> {
        client: ctx.client.clone(),
        owners: ctx.informers.get::<K>(),
        pods: ctx.informers.get::<Pod>(),
        queue: Queue::new(K::COMPONENT),
        tracker: Tracker::default(),
        recorder: ctx.recorder(K::COMPONENT),
    });
    let h = c.clone();
    c.owners.on_change(move |ch| h.owner_changed(ch));
    let h = c.clone();
    c.pods.on_change(move |ch| h.pod_changed(ch));
    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        c.owners.wait_synced().await;
        c.pods.wait_synced().await;
        let queue = c.queue.clone();
        queue.run_workers(workers, move |key| {
            let c = c.clone();
            async move { c.sync(&key).await }
        });
    });
}

fn owner_key<K: Resource>(o: &K) -> String {
    capstan_runtime::key(
        o.meta().namespace.as_deref(),
        o.meta().name.as_deref().unwrap_or_default(),
    )
}

fn pod_key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

impl<K: Owner> Controller<K> {
    // ---- informer handlers: compute keys and enqueue, nothing more ----

    fn owner_changed(&self, ch: &Change<'_, K>) {
        match ch {
            Change::Add(o) => self.queue.add(owner_key(o.as_ref())),
            Change::Update { old, new } => {
                if old.meta().uid != new.meta().uid {
                    // Deleted and recreated under the same name: start clean.
                    self.tracker.delete(&owner_key(old.as_ref()));
                }
                self.queue.add(owner_key(new.as_ref()));
            }
            Change::Delete(o) => {
                let key = owner_key(o.as_ref());
                self.tracker.delete(&key);
                self.queue.add(key);
            }
        }
    }

    /// The owner a controller reference points to, if it is of our kind and still exists.
    fn resolve(&self, namespace: &str, r: &OwnerReference) -> Option<Arc<K>> {
        if r.kind != K::kind(&()) {
            return None;
        }
        self.owners
            .get(namespace, &r.name)
            .filter(|o| o.meta().uid.as_deref() == Some(r.uid.as_str()))
    }

    /// Every owner in the pod's namespace whose (non-empty, valid) selector matches it.
    fn owners_selecting(&self, pod: &Pod) -> Vec<String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let mut keys = Vec::new();
        self.owners.for_each_in(ns, |o| {
            if let Ok(m) = o.selector() {
                if !m.is_empty() && util::matches(&m, pod.metadata.labels.as_ref()) {
                    keys.push(owner_key(o.as_ref()));
                }
            }
        });
        if keys.len() > 1 {
            tracing::debug!(
                pod = %pod_key(pod),
                kind = %K::kind(&()),
                "user error: more than one owner selects the pod's labels"
            );
        }
        keys
    }

    fn pod_changed(&self, ch: &Change<'_, Pod>) {
        match ch {
            Change::Add(p) => self.pod_added(p),
            Change::Update { old, new } => self.pod_updated(old, new),
            Change::Delete(p) => self.pod_deleted(p),
        }
    }

    fn pod_added(&self, pod: &Pod) {
        if pod.metadata.deletion_timestamp.is_some() {
            // Seen for the first time already being deleted: not a creation to count.
            self.pod_deleted(pod);
            return;
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        if let Some(r) = util::controller_ref(&pod.metadata) {
            if let Some(owner) = self.resolve(ns, r) {
                let key = owner_key(owner.as_ref());
                self.tracker.creation_observed(&key);
                self.queue.add(key);
            }
            return;
        }
        // An orphan: every owner that selects it may want to adopt it.
        for key in self.owners_selecting(pod) {
            self.queue.add(key);
        }
    }

    fn pod_updated(&self, old: &Pod, new: &Pod) {
        if old.metadata.resource_version == new.metadata.resource_version {
            return;
        }
        let labels_changed = old.metadata.labels != new.metadata.labels;
        if new.metadata.deletion_timestamp.is_some() {
            // A graceful deletion began: replace the pod now rather than when it is gone.
            self.pod_deleted(new);
            if labels_changed {
                self.pod_deleted(old);
            }
            return;
        }
        let ns = new.metadata.namespace.as_deref().unwrap_or_default();
        let old_ref = util::controller_ref(&old.metadata);
        let new_ref = util::controller_ref(&new.metadata);
        let ref_changed = old_ref != new_ref;
        if ref_changed {
            if let Some(owner) = old_ref.and_then(|r| self.resolve(ns, r)) {
                self.queue.add(owner_key(owner.as_ref()));
            }
        }
        if let Some(r) = new_ref {
            if let Some(owner) = self.resolve(ns, r) {
                let key = owner_key(owner.as_ref());
                let min_ready = owner.min_ready_seconds();
                if min_ready > 0 && !util::is_pod_ready(old) && util::is_pod_ready(new) {
                    // Availability changes without an event: look again once it can have.
                    let after = Duration::from_secs(min_ready as u64) + Duration::from_secs(1);
                    self.queue.add_after(key.clone(), after);
                }
                self.queue.add(key);
            }
            return;
        }
        if labels_changed || ref_changed {
            for key in self.owners_selecting(new) {
                self.queue.add(key);
            }
        }
    }

    fn pod_deleted(&self, pod: &Pod) {
        let Some(r) = util::controller_ref(&pod.metadata) else {
            return;
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        if let Some(owner) = self.resolve(ns, r) {
            let key = owner_key(owner.as_ref());
            self.tracker.deletion_observed(&key, &pod_key(pod));
            self.queue.add(key);
        }
    }

    // ---- sync ----

    async fn sync(&self, key: &str) -> anyhow::Result<()> {
        let Some(owner) = self.owners.get_key(key) else {
            self.tracker.delete(key);
            return Ok(());
        };
        let needs_sync = self.tracker.satisfied(key);
        let selector = match owner.selector() {
            Ok(s) => s,
            Err(e) => {
                // Nothing can be matched; retrying would not help until the spec changes.
                tracing::warn!(kind = %K::kind(&()), key, error = %e, "invalid pod selector");
                return Ok(());
            }
        };
        let ns = owner.meta().namespace.clone().unwrap_or_default();
        let uid = owner.meta().uid.clone().unwrap_or_default();
        let deleting = owner.meta().deletion_timestamp.is_some();
        // The pod cache rebuilds each pod it hands out, so the owned pods (100,000 of them
        // for a large ReplicaSet) are not held through the sync: only their names and what
        // the status needs of them; a scale-down reads its candidates again.
        let mut claimed = Census::default();
        let mut adopt = Vec::new();
        let mut release = Vec::new();
        // Only active pods this owner controls or no one does can be claimed: the others of
        // the namespace are not rebuilt from the cache.
        let candidate = |p: &dyn capstan_runtime::informer::Packed<Pod>| {
            crate::podcache::peek(p).is_none_or(|p| {
                !matches!(p.phase(), "Succeeded" | "Failed")
                    && !p.deleting()
                    && p.controller_uid().is_none_or(|u| u == uid)
            })
        };
        self.pods.for_each_in_passing(&ns, candidate, |p| {
            if !util::is_pod_active(p) {
                return;
            }
            match classify(p, &uid, &selector, deleting) {
                Claim::Keep => claimed.add(owner.as_ref(), p),
                Claim::Adopt => adopt.push(p.clone()),
                Claim::Release => release.push(p.clone()),
                Claim::Ignore => {}
            }
        });
        self.claim(&owner, &mut claimed, adopt, release).await?;

        let manage_err = if needs_sync && !deleting {
            self.manage(&owner, key, &ns, &claimed.names).await.err()
        } else {
            None
        };
        let status = calculate_status(
            owner.as_ref(),
            &claimed,
            manage_err.as_ref(),
            Timestamp::now(),
        );
        let status = self.update_status(&owner, status).await?;
        let replicas = owner.replicas();
        let min_ready = owner.min_ready_seconds();
        if manage_err.is_none()
            && min_ready > 0
            && status.ready == replicas
            && status.available != replicas
        {
            self.queue
                .add_after(key.to_string(), Duration::from_secs(min_ready as u64));
        }
        match manage_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Adopt matching orphans and release owned pods that stopped matching; adopted pods join
    /// `claimed`. Any failure fails the sync (after every change was tried).
    async fn claim(
        &self,
        owner: &K,
        claimed: &mut Census,
        adopt: Vec<Arc<Pod>>,
        release: Vec<Arc<Pod>>,
    ) -> anyhow::Result<()> {
        if adopt.is_empty() && release.is_empty() {
            return Ok(());
        }
        let ns = owner.meta().namespace.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let uid = owner.meta().uid.clone().unwrap_or_default();
        let mut errors: Vec<String> = Vec::new();

        let released: Vec<Result<(), String>> = stream::iter(release)
            .map(|p| {
                let api = &api;
                let uid = &uid;
                async move {
                    match util::release(api, p.as_ref(), uid).await {
                        Ok(_) => Ok(()),
                        // Gone, or no longer ours (recreated under the same name): nothing to do.
                        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 422 => Ok(()),
                        Err(e) => Err(api_message(&e)),
                    }
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        errors.extend(released.into_iter().filter_map(Result::err));

        if !adopt.is_empty() {
            // The cache may not show that the owner is being deleted: ask the API server.
            match self.recheck_deletion(owner).await {
                Err(e) => errors.push(e.to_string()),
                Ok(()) => {
                    let controller = util::owner_ref(owner);
                    let adopted: Vec<Result<Option<Arc<Pod>>, String>> = stream::iter(adopt)
                        .map(|p| {
                            let api = &api;
                            let controller = &controller;
                            async move {
                                match util::adopt(api, p.as_ref(), controller).await {
                                    Ok(_) => Ok(Some(p)),
                                    Err(e) if util::is_not_found(&e) => Ok(None),
                                    Err(e) => Err(api_message(&e)),
                                }
                            }
                        })
                        .buffer_unordered(CONCURRENCY)
                        .collect()
                        .await;
                    for r in adopted {
                        match r {
                            Ok(Some(p)) => claimed.add(owner, &p),
                            Ok(None) => {}
                            Err(e) => errors.push(e),
                        }
                    }
                }
            }
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(anyhow!(errors.remove(0))),
            _ => Err(anyhow!("[{}]", errors.join(", "))),
        }
    }

    /// Kubernetes' RecheckDeletionTimestamp: a fresh read of the owner (same uid, not being
    /// deleted) before adopting anything.
    async fn recheck_deletion(&self, owner: &K) -> anyhow::Result<()> {
        let ns = owner.meta().namespace.as_deref().unwrap_or_default();
        let name = owner.meta().name.as_deref().unwrap_or_default();
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        let fresh = api.get(name).await?;
        let want = owner.meta().uid.as_deref().unwrap_or_default();
        let got = fresh.meta().uid.as_deref().unwrap_or_default();
        if got != want {
            anyhow::bail!(
                "original {} {ns}/{name} is gone: got uid {got}, wanted {want}",
                K::kind(&())
            );
        }
        if let Some(t) = fresh.meta().deletion_timestamp.as_ref() {
            anyhow::bail!("{ns}/{name} has just been deleted at {}", go_time(&t.0));
        }
        Ok(())
    }

    /// Create or delete pods so the owner's pods (`names`, in namespace `ns`) move toward
    /// `spec.replicas`.
    async fn manage(
        &self,
        owner: &Arc<K>,
        key: &str,
        ns: &str,
        names: &[Box<str>],
    ) -> anyhow::Result<()> {
        let want = owner.replicas().max(0) as usize;
        let have = names.len();
        if have < want {
            let diff = (want - have).min(BURST_REPLICAS);
            self.tracker.expect_creations(key, diff);
            let pod = self.pod_to_create(owner);
            let (created, err) = slow_start_batch(diff, 1, || self.create_pod(owner, &pod)).await;
            // Pods never attempted (or failed) will not be observed: stop expecting them.
            for _ in created..diff {
                self.tracker.creation_observed(key);
            }
            return match err {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        if have > want {
            let diff = (have - want).min(BURST_REPLICAS);
            let pods: Vec<Arc<Pod>> = names.iter().filter_map(|n| self.pods.get(ns, n)).collect();
            let related = self.related_pods(owner);
            let victims = pods_to_delete(&pods, &related, diff, Timestamp::now());
            self.tracker
                .expect_deletions(key, victims.iter().map(|p| pod_key(p)).collect());
            let ns = owner.meta().namespace.as_deref().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            let results: Vec<anyhow::Result<()>> = stream::iter(victims)
                .map(|p| {
                    let api = &api;
                    async move {
                        let r = self.delete_pod(api, owner, &p).await;
                        if let Err(e) = &r {
                            // The informer will not see this deletion.
                            self.tracker.deletion_observed(key, &pod_key(&p));
                            if util::is_not_found(e) {
                                return Ok(());
                            }
                        }
                        r.map_err(|e| anyhow!("unable to delete pods: {}", api_message(&e)))
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
            if let Some(e) = results.into_iter().find_map(Result::err) {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The pod the owner's template describes (an error when it has no labels).
    fn pod_to_create(&self, owner: &K) -> Result<Pod, String> {
        let default = PodTemplateSpec::default();
        let template = owner.template().unwrap_or(&default);
        let pod = util::pod_from_template(
            template,
            owner.meta().namespace.as_deref().unwrap_or_default(),
            &util::pod_name_prefix(owner.meta().name.as_deref().unwrap_or_default()),
            util::owner_ref(owner),
        );
        if pod.metadata.labels.as_ref().is_none_or(BTreeMap::is_empty) {
            return Err("unable to create pods, no labels".into());
        }
        Ok(pod)
    }

    async fn create_pod(&self, owner: &K, pod: &Result<Pod, String>) -> anyhow::Result<()> {
        let pod = pod.as_ref().map_err(|e| anyhow!("{e}"))?;
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        match create_reading_name(&self.client, &api, pod).await {
            Ok(created) => {
                let name = created.metadata.name.unwrap_or_default();
                self.recorder
                    .normal(owner, "SuccessfulCreate", format!("Created pod: {name}"));
                Ok(())
            }
            Err(e) if namespace_terminating(&e) => {
                // Every creation will fail until the namespace is gone: not an error.
                Ok(())
            }
            Err(e) => {
                let msg = api_message(&e);
                self.recorder
                    .warning(owner, "FailedCreate", format!("Error creating: {msg}"));
                Err(anyhow!(msg))
            }
        }
    }

    async fn delete_pod(&self, api: &Api<Pod>, owner: &K, pod: &Pod) -> kube::Result<()> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                self.recorder
                    .normal(owner, "SuccessfulDelete", format!("Deleted pod: {name}"));
                Ok(())
            }
            Err(e) if util::is_not_found(&e) => Err(e),
            Err(e) => {
                self.recorder.warning(
                    owner,
                    "FailedDelete",
                    format!("Error deleting: {}", api_message(&e)),
                );
                Err(e)
            }
        }
    }

    /// Pods of every owner sharing this owner's controller (a Deployment's ReplicaSets), for
    /// ranking pods by how many related pods share their node. None without a controller.
    fn related_pods(&self, owner: &K) -> Vec<Arc<Pod>> {
        let Some(controller) = util::controller_ref(owner.meta()) else {
            return Vec::new();
        };
        let ns = owner.meta().namespace.as_deref().unwrap_or_default();
        let mut selectors = Vec::new();
        self.owners.for_each_in(ns, |o| {
            if util::controller_ref(o.meta()).is_some_and(|r| r.uid == controller.uid) {
                if let Ok(m) = o.selector() {
                    selectors.push(m);
                }
            }
        });
        let mut related = Vec::new();
        self.pods.for_each_in(ns, |p| {
            if selectors
                .iter()
                .any(|m| util::matches(m, p.metadata.labels.as_ref()))
            {
                related.push(p.clone());
            }
        });
        related
    }

    /// Write the status through the status subresource when it changed (one retry on a
    /// fresh read, as Kubernetes); returns the status now stored.
    async fn update_status(&self, owner: &K, mut status: Status) -> anyhow::Result<Status> {
        let current = owner.status();
        let generation = owner.meta().generation.unwrap_or(0);
        if current.same_counts(&status)
            && current.observed_generation == generation
            && current.conditions == status.conditions
        {
            return Ok(current);
        }
        status.observed_generation = generation;
        let ns = owner.meta().namespace.as_deref().unwrap_or_default();
        let name = owner.meta().name.as_deref().unwrap_or_default();
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        let mut obj = owner.clone();
        let mut retried = false;
        loop {
            obj.set_status(&status);
            match api.replace_status(name, &PostParams::default(), &obj).await {
                Ok(updated) => return Ok(updated.status()),
                Err(e) if retried => return Err(e.into()),
                Err(_) => {
                    retried = true;
                    obj = api.get(name).await?;
                }
            }
        }
    }
}

/// What claiming does with one active pod.
#[derive(Debug, PartialEq, Eq)]
enum Claim {
    /// Ours and matching.
    Keep,
    /// A matching orphan.
    Adopt,
    /// Ours but no longer matching.
    Release,
    /// Someone else's, or not matching, or left alone while the owner is being deleted.
    Ignore,
}

fn classify(pod: &Pod, owner_uid: &str, selector: &Matcher, owner_deleting: bool) -> Claim {
    let matches = util::matches(selector, pod.metadata.labels.as_ref());
    match util::controller_ref(&pod.metadata) {
        Some(r) if r.uid != owner_uid => Claim::Ignore,
        Some(_) if matches => Claim::Keep,
        Some(_) if owner_deleting => Claim::Ignore,
        Some(_) => Claim::Release,
        None if owner_deleting || !matches || util::is_terminating(pod) => Claim::Ignore,
        None => Claim::Adopt,
    }
}

/// Call `f` `count` times: batches of `initial`, doubling after each batch that fully
/// succeeds; the calls of a batch run concurrently; a batch with a failure ends it all.
/// Returns how many calls succeeded and the first error.
async fn slow_start_batch<F, Fut>(
    count: usize,
    initial: usize,
    f: F,
) -> (usize, Option<anyhow::Error>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut remaining = count;
    let mut successes = 0;
    let mut batch = remaining.min(initial.max(1));
    while batch > 0 {
        let results: Vec<anyhow::Result<()>> = stream::iter(0..batch)
            .map(|_| f())
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut first_err = None;
        for r in results {
            match r {
                Ok(()) => successes += 1,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return (successes, Some(e));
        }
        remaining -= batch;
        batch = (2 * batch).min(remaining);
    }
    (successes, None)
}

/// The status `pods` (the owner's active pods) amount to; a ReplicaFailure condition is
/// added on a failed create/delete and removed once syncing succeeds again.
/// What a sync needs of the pods an owner claimed.
#[derive(Default)]
struct Census {
    names: Vec<Box<str>>,
    fully_labeled: i32,
    /// Since when each ready pod is ready.
    ready_since: Vec<Timestamp>,
}

impl Census {
    fn add<K: Owner>(&mut self, owner: &K, p: &Pod) {
        self.names
            .push(p.metadata.name.as_deref().unwrap_or_default().into());
        let template_labels = owner
            .template()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.as_ref());
        let labels = p.metadata.labels.as_ref();
        if template_labels
            .into_iter()
            .flatten()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        {
            self.fully_labeled += 1;
        }
        self.ready_since.extend(util::ready_since(p));
    }
}

fn calculate_status<K: Owner>(
    owner: &K,
    pods: &Census,
    manage_err: Option<&anyhow::Error>,
    now: Timestamp,
) -> Status {
    let mut status = owner.status();
    let min_ready = owner.min_ready_seconds();
    let ready = pods.ready_since.len() as i32;
    // As `util::is_pod_available` for each ready pod.
    let available = pods
        .ready_since
        .iter()
        .filter(|t| min_ready <= 0 || now.duration_since(**t).as_secs() >= i64::from(min_ready))
        .count() as i32;
    let has_failure = status
        .conditions
        .iter()
        .any(|c| c.type_ == "ReplicaFailure");
    match manage_err {
        Some(e) if !has_failure => {
            let diff = pods.names.len() as i64 - i64::from(owner.replicas());
            let reason = match diff.signum() {
                -1 => "FailedCreate",
                1 => "FailedDelete",
                _ => "",
            };
            status.conditions.push(Condition {
                type_: "ReplicaFailure".into(),
                status: "True".into(),
                reason: Some(reason.into()),
                message: Some(format!("{e:#}")),
                last_transition_time: Some(Time(now)),
            });
        }
        None if has_failure => status.conditions.retain(|c| c.type_ != "ReplicaFailure"),
        _ => {}
    }
    status.replicas = pods.names.len() as i32;
    status.fully_labeled = pods.fully_labeled;
    status.ready = ready;
    status.available = available;
    status
}

/// Which pods to delete: all of them, or the first `diff` in Kubernetes' ranking (the pods
/// least worth keeping first).
fn pods_to_delete(
    pods: &[Arc<Pod>],
    related: &[Arc<Pod>],
    diff: usize,
    now: Timestamp,
) -> Vec<Arc<Pod>> {
    if diff >= pods.len() {
        return pods.to_vec();
    }
    let mut on_node: HashMap<&str, usize> = HashMap::new();
    for p in related.iter().filter(|p| util::is_pod_active(p)) {
        *on_node.entry(node_name(p)).or_default() += 1;
    }
    let mut ranked: Vec<(DeletionRank, &Arc<Pod>)> = pods
        .iter()
        .map(|p| {
            let rank = on_node.get(node_name(p)).copied().unwrap_or(0);
            (deletion_rank(p, rank, now), p)
        })
        .collect();
    ranked.sort_by(|a, b| a.0.cmp(&b.0));
    ranked
        .into_iter()
        .take(diff)
        .map(|(_, p)| p.clone())
        .collect()
}

fn node_name(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

/// Kubernetes' ActivePodsWithRanks order as a sort key, smallest deleted first: unassigned,
/// then pending < unknown < running, not ready, lower deletion cost, more related pods on the
/// same node, ready more recently, more container restarts, created more recently. Times are
/// compared on a log2 scale (LogarithmicScaleDown), ties broken by uid.
type DeletionRank = (
    bool,
    u8,
    bool,
    i32,
    Reverse<usize>,
    i64,
    Reverse<i32>,
    i64,
    String,
);

fn deletion_rank(p: &Pod, colocated: usize, now: Timestamp) -> DeletionRank {
    let phase = match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    };
    let ready_since = util::ready_since(p);
    let ready_bucket = match ready_since {
        Some(t) if t == Timestamp::UNIX_EPOCH => i64::MIN,
        Some(t) => log_bucket(now, t),
        None => 0,
    };
    let created_bucket = match p.metadata.creation_timestamp.as_ref() {
        Some(t) => log_bucket(now, t.0),
        None => i64::MIN,
    };
    let restarts = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0);
    (
        !node_name(p).is_empty(),
        phase,
        ready_since.is_some(),
        deletion_cost(p),
        Reverse(colocated),
        ready_bucket,
        Reverse(restarts),
        created_bucket,
        p.metadata.uid.clone().unwrap_or_default(),
    )
}

/// floor(log2(now - t in nanoseconds)), -1 when `t` is not in the past.
fn log_bucket(now: Timestamp, t: Timestamp) -> i64 {
    let d = now.duration_since(t).as_nanos();
    if d > 0 {
        (d as f64).log2() as i64
    } else {
        -1
    }
}

/// The pod's `controller.kubernetes.io/pod-deletion-cost` (0 when absent or invalid: a sign
/// of "+" or leading zeros are not accepted).
fn deletion_cost(p: &Pod) -> i32 {
    let Some(v) = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELETION_COST))
    else {
        return 0;
    };
    let valid_start = match v.as_bytes().first() {
        Some(b'-') | Some(b'1'..=b'9') => true,
        Some(b'0') => v == "0",
        _ => false,
    };
    if !valid_start {
        return 0;
    }
    v.parse().unwrap_or(0)
}

/// An API error's message as Kubernetes' clients print it (the Status message).
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

fn namespace_terminating(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == NAMESPACE_TERMINATING)))
}

/// A time as Go's default formatting prints it (`2006-01-02 15:04:05 +0000 UTC`).
fn go_time(t: &Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S +0000 UTC").to_string()
}

/// What the controller reads of the pod it created: the name the server gave it.
#[derive(serde::Deserialize)]
struct Created {
    metadata: CreatedMeta,
}

#[derive(serde::Deserialize)]
struct CreatedMeta {
    #[serde(default)]
    name: Option<String>,
}

/// Create `pod` and read only its name from the answer: the rest of the created pod (several
/// kilobytes with its managedFields, one per pod a ReplicaSet makes) is skipped, not built.
async fn create_reading_name(client: &Client, api: &Api<Pod>, pod: &Pod) -> kube::Result<Created> {
    let body = serde_json::to_vec(pod).map_err(kube::Error::SerdeError)?;
    let request = kube::core::Request::new(api.resource_url())
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    client.request(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSetSpec;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    struct P {
        name: &'static str,
        node: &'static str,
        phase: &'static str,
        ready_secs_ago: Option<u64>,
        created_secs_ago: u64,
        restarts: i32,
        cost: Option<&'static str>,
    }

    impl Default for P {
        fn default() -> P {
            P {
                name: "p",
                node: "n1",
                phase: "Running",
                ready_secs_ago: Some(1000),
                created_secs_ago: 1000,
                restarts: 0,
                cost: None,
            }
        }
    }

    fn pod(now: Timestamp, p: P) -> Arc<Pod> {
        let ago = |s: u64| Time(now - Duration::from_secs(s));
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(p.name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{}", p.name)),
                creation_timestamp: Some(ago(p.created_secs_ago)),
                labels: Some(labels(&[("app", "web")])),
                annotations: p
                    .cost
                    .map(|c| BTreeMap::from([(DELETION_COST.to_string(), c.to_string())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: (!p.node.is_empty()).then(|| p.node.to_string()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(p.phase.into()),
                conditions: p.ready_secs_ago.map(|s| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: Some(ago(s)),
                        ..Default::default()
                    }]
                }),
                container_statuses: Some(vec![ContainerStatus {
                    name: "c".into(),
                    restart_count: p.restarts,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or_default())
            .collect()
    }

    fn first_deleted(now: Timestamp, a: P, b: P) -> String {
        let pods = vec![pod(now, a), pod(now, b)];
        let out = pods_to_delete(&pods, &pods, 1, now);
        names(&out)[0].to_string()
    }

    #[test]
    fn deletion_ranking_follows_kubernetes_order() {
        let now = Timestamp::now();
        // 1. unassigned before assigned (even if the assigned one is worse otherwise)
        let a = P {
            name: "assigned",
            phase: "Pending",
            ready_secs_ago: None,
            ..Default::default()
        };
        let u = P {
            name: "unassigned",
            node: "",
            ..Default::default()
        };
        assert_eq!(first_deleted(now, a, u), "unassigned");
        // 2. pending < unknown < running
        let p = P {
            name: "pending",
            phase: "Pending",
            ..Default::default()
        };
        let r = P {
            name: "running",
            ..Default::default()
        };
        assert_eq!(first_deleted(now, r, p), "pending");
        let unk = P {
            name: "unknown",
            phase: "Unknown",
            ..Default::default()
        };
        let r = P {
            name: "running",
            ..Default::default()
        };
        assert_eq!(first_deleted(now, r, unk), "unknown");
        // 3. not ready before ready
        let nr = P {
            name: "notready",
            ready_secs_ago: None,
            ..Default::default()
        };
        let r = P {
            name: "ready",
            ..Default::default()
        };
        assert_eq!(first_deleted(now, r, nr), "notready");
        // 4. lower deletion cost first (before the ready-time and creation rules)
        let cheap = P {
            name: "cheap",
            cost: Some("-5"),
            ..Default::default()
        };
        let dear = P {
            name: "dear",
            cost: Some("100"),
            created_secs_ago: 1,
            ready_secs_ago: Some(1),
            ..Default::default()
        };
        assert_eq!(first_deleted(now, dear, cheap), "cheap");
        // invalid costs count as 0
        let invalid = P {
            name: "invalid",
            cost: Some("+7"),
            ..Default::default()
        };
        let one = P {
            name: "one",
            cost: Some("1"),
            ..Default::default()
        };
        assert_eq!(first_deleted(now, one, invalid), "invalid");
        // 6. ready more recently first (different log2 buckets)
        let young = P {
            name: "young",
            ready_secs_ago: Some(10),
            ..Default::default()
        };
        let old = P {
            name: "old",
            ready_secs_ago: Some(10_000),
            ..Default::default()
        };
        assert_eq!(first_deleted(now, old, young), "young");
        // 7. more restarts first
        let crashy = P {
            name: "crashy",
            restarts: 5,
            ..Default::default()
        };
        let calm = P {
            name: "calm",
            ..Default::default()
        };
        assert_eq!(first_deleted(now, calm, crashy), "crashy");
        // 8. newer first
        let newer = P {
            name: "newer",
            created_secs_ago: 10,
            ..Default::default()
        };
        let older = P {
            name: "older",
            created_secs_ago: 100_000,
            ..Default::default()
        };
        assert_eq!(first_deleted(now, older, newer), "newer");
    }

    #[test]
    fn pods_doubled_up_on_a_node_go_first() {
        let now = Timestamp::now();
        let pods = vec![
            pod(
                now,
                P {
                    name: "alone",
                    node: "n1",
                    ..Default::default()
                },
            ),
            pod(
                now,
                P {
                    name: "crowded-a",
                    node: "n2",
                    ..Default::default()
                },
            ),
            pod(
                now,
                P {
                    name: "crowded-b",
                    node: "n2",
                    ..Default::default()
                },
            ),
        ];
        let out = pods_to_delete(&pods, &pods, 2, now);
        let mut got = names(&out);
        got.sort();
        assert_eq!(got, vec!["crowded-a", "crowded-b"]);
        // Without related pods (no controller), ranks are all equal: the older one stays.
        let pods = vec![
            pod(
                now,
                P {
                    name: "old",
                    created_secs_ago: 100_000,
                    node: "n1",
                    ..Default::default()
                },
            ),
            pod(
                now,
                P {
                    name: "new",
                    created_secs_ago: 10,
                    node: "n2",
                    ..Default::default()
                },
            ),
        ];
        assert_eq!(names(&pods_to_delete(&pods, &[], 1, now)), vec!["new"]);
        // Deleting all of them needs no ranking.
        assert_eq!(pods_to_delete(&pods, &[], 5, now).len(), 2);
    }

    #[test]
    fn deletion_cost_parsing_matches_kubernetes() {
        let now = Timestamp::now();
        let cost = |c: &'static str| {
            deletion_cost(&pod(
                now,
                P {
                    cost: Some(c),
                    ..Default::default()
                },
            ))
        };
        assert_eq!(cost("10"), 10);
        assert_eq!(cost("-10"), -10);
        assert_eq!(cost("0"), 0);
        assert_eq!(cost("+10"), 0);
        assert_eq!(cost("010"), 0);
        assert_eq!(cost("abc"), 0);
        assert_eq!(cost("99999999999"), 0);
        assert_eq!(cost(""), 0);
    }

    #[test]
    fn log_buckets_group_times_on_a_log2_scale() {
        let now = Timestamp::now();
        let b = |secs: u64| log_bucket(now, now - Duration::from_secs(secs));
        assert_eq!(b(16), b(17));
        assert!(b(16) < b(64));
        assert_eq!(log_bucket(now, now + Duration::from_secs(5)), -1);
    }

    fn rs(replicas: i32, min_ready: i32) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("rs-uid".into()),
                generation: Some(3),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(replicas),
                min_ready_seconds: Some(min_ready),
                selector: LabelSelector {
                    match_labels: Some(labels(&[("app", "web")])),
                    ..Default::default()
                },
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels(&[("app", "web"), ("tier", "front")])),
                        ..Default::default()
                    }),
                    spec: None,
                }),
            }),
            status: None,
        }
    }

    #[test]
    fn status_counts_labels_readiness_and_availability() {
        let now = Timestamp::now();
        let full = |name: &'static str, ready: Option<u64>| {
            let mut p = (*pod(
                now,
                P {
                    name,
                    ready_secs_ago: ready,
                    ..Default::default()
                },
            ))
            .clone();
            p.metadata.labels = Some(labels(&[("app", "web"), ("tier", "front")]));
            Arc::new(p)
        };
        let pods = [
            full("a", Some(100)),
            full("b", Some(2)),
            full("c", None),
            pod(
                now,
                P {
                    name: "partial",
                    ..Default::default()
                },
            ),
        ];
        let census = |owner: &ReplicaSet| {
            let mut c = Census::default();
            pods.iter().for_each(|p| c.add(owner, p));
            c
        };
        let s = calculate_status(&rs(4, 10), &census(&rs(4, 10)), None, now);
        assert_eq!(
            (s.replicas, s.fully_labeled, s.ready, s.available),
            (4, 3, 3, 2)
        );
        assert!(s.conditions.is_empty());

        // A failed create adds ReplicaFailure/FailedCreate; success removes it again.
        let err = anyhow!("pods \"web-x\" is forbidden: exceeded quota");
        let mut owner = rs(6, 0);
        let s = calculate_status(&owner, &census(&owner), Some(&err), now);
        assert_eq!(s.available, 3);
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(s.conditions[0].type_, "ReplicaFailure");
        assert_eq!(s.conditions[0].reason.as_deref(), Some("FailedCreate"));
        assert_eq!(
            s.conditions[0].message.as_deref(),
            Some("pods \"web-x\" is forbidden: exceeded quota")
        );
        owner.set_status(&s);
        // An existing failure condition is kept as it is while failures go on...
        let later = now + Duration::from_secs(30);
        let again = calculate_status(&owner, &census(&owner), Some(&err), later);
        assert_eq!(again.conditions, s.conditions);
        // ...and dropped once a sync succeeds.
        let ok = calculate_status(&owner, &census(&owner), None, later);
        assert!(ok.conditions.is_empty());
        // Deleting too many pods fails as FailedDelete.
        let s = calculate_status(&rs(1, 0), &census(&rs(1, 0)), Some(&err), now);
        assert_eq!(s.conditions[0].reason.as_deref(), Some("FailedDelete"));
    }

    #[test]
    fn status_round_trips_and_omits_zero_counts() {
        let mut owner = rs(2, 0);
        let s = Status {
            replicas: 2,
            fully_labeled: 2,
            ready: 0,
            available: 0,
            observed_generation: 3,
            conditions: vec![],
        };
        owner.set_status(&s);
        let st = owner.status.as_ref().unwrap();
        assert_eq!(st.ready_replicas, None);
        assert_eq!(st.fully_labeled_replicas, Some(2));
        assert_eq!(st.conditions, None);
        assert_eq!(owner.status(), s);

        let mut rc = ReplicationController::default();
        rc.set_status(&s);
        assert_eq!(rc.status(), s);
    }

    #[test]
    fn claiming_adopts_orphans_and_releases_strays() {
        let now = Timestamp::now();
        let sel = rs(1, 0).selector().unwrap();
        let with_ref = |uid: &str, app: &str, terminating: bool| {
            let mut p = (*pod(now, P::default())).clone();
            p.metadata.labels = Some(labels(&[("app", app)]));
            if !uid.is_empty() {
                p.metadata.owner_references = Some(vec![OwnerReference {
                    uid: uid.into(),
                    controller: Some(true),
                    kind: "ReplicaSet".into(),
                    name: "x".into(),
                    api_version: "apps/v1".into(),
                    ..Default::default()
                }]);
            }
            if terminating {
                p.metadata.deletion_timestamp = Some(Time(now));
            }
            p
        };
        let c = |p: &Pod, deleting| classify(p, "rs-uid", &sel, deleting);
        assert_eq!(c(&with_ref("rs-uid", "web", false), false), Claim::Keep);
        assert_eq!(c(&with_ref("rs-uid", "db", false), false), Claim::Release);
        assert_eq!(c(&with_ref("rs-uid", "db", false), true), Claim::Ignore);
        assert_eq!(c(&with_ref("other", "web", false), false), Claim::Ignore);
        assert_eq!(c(&with_ref("", "web", false), false), Claim::Adopt);
        assert_eq!(c(&with_ref("", "web", false), true), Claim::Ignore);
        assert_eq!(c(&with_ref("", "web", true), false), Claim::Ignore);
        assert_eq!(c(&with_ref("", "db", false), false), Claim::Ignore);
    }

    #[test]
    fn rc_selector_is_a_map_and_empty_selects_nothing() {
        use k8s_openapi::api::core::v1::ReplicationControllerSpec;
        let rc = |sel: Option<BTreeMap<String, String>>| ReplicationController {
            spec: Some(ReplicationControllerSpec {
                selector: sel,
                ..Default::default()
            }),
            ..Default::default()
        };
        let web = labels(&[("app", "web"), ("x", "y")]);
        let m = rc(Some(labels(&[("app", "web")]))).selector().unwrap();
        assert!(util::matches(&m, Some(&web)));
        let m = rc(Some(BTreeMap::new())).selector().unwrap();
        assert!(!util::matches(&m, Some(&web)));
        let m = rc(None).selector().unwrap();
        assert!(!util::matches(&m, Some(&web)));
        assert_eq!(rc(None).replicas(), 1);
    }

    #[test]
    fn invalid_rs_selector_is_an_error_not_a_panic() {
        let mut owner = rs(1, 0);
        if let Some(spec) = owner.spec.as_mut() {
            spec.selector.match_labels = Some(labels(&[("bad key!", "v")]));
        }
        assert!(owner.selector().is_err());
    }

    #[tokio::test]
    async fn slow_start_doubles_batches_and_stops_at_first_failure() {
        let calls = AtomicUsize::new(0);
        let (ok, err) = slow_start_batch(10, 1, || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .await;
        assert_eq!((ok, err.is_none()), (10, true));
        assert_eq!(calls.load(Ordering::SeqCst), 10);

        // Batches 1, 2, 4, 8: the 5th call fails (in the batch of 4), so the batch of 8 never runs.
        let calls = AtomicUsize::new(0);
        let (ok, err) = slow_start_batch(100, 1, || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 4 {
                    Err(anyhow!("quota"))
                } else {
                    Ok(())
                }
            }
        })
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 7);
        assert_eq!(ok, 6);
        assert_eq!(err.map(|e| e.to_string()).as_deref(), Some("quota"));

        let (ok, err) = slow_start_batch(0, 1, || async { Ok(()) }).await;
        assert_eq!((ok, err.is_none()), (0, true));
    }

    #[test]
    fn deletions_count_once_per_pod() {
        let t = Tracker::default();
        t.expect_deletions("ns/rs", HashSet::from(["ns/a".into(), "ns/b".into()]));
        assert!(!t.satisfied("ns/rs"));
        t.deletion_observed("ns/rs", "ns/a");
        // The same pod seen again (terminating, then gone) does not count twice.
        t.deletion_observed("ns/rs", "ns/a");
        assert!(!t.satisfied("ns/rs"));
        t.deletion_observed("ns/rs", "ns/other");
        assert!(!t.satisfied("ns/rs"));
        t.deletion_observed("ns/rs", "ns/b");
        assert!(t.satisfied("ns/rs"));
        t.expect_creations("ns/rs", 2);
        t.creation_observed("ns/rs");
        assert!(!t.satisfied("ns/rs"));
        t.delete("ns/rs");
        assert!(t.satisfied("ns/rs"));
    }

    #[test]
    fn go_time_format() {
        let t: Timestamp = "2024-05-06T07:08:09Z".parse().unwrap();
        assert_eq!(go_time(&t), "2024-05-06 07:08:09 +0000 UTC");
    }
}
