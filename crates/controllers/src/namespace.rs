//! The namespace controller (Kubernetes' pkg/controller/namespace): empties a namespace that is
//! being deleted, then releases it.
//!
//! When a namespace has a deletion timestamp (the API server set it and the phase Terminating),
//! the controller discovers every namespaced resource that can be deleted (custom resources
//! included), deletes each collection in the namespace (or each object, where deletecollection
//! is not served), and checks what remains. The namespace's status conditions report the
//! progress with Kubernetes' types, reasons and messages (NamespaceDeletionDiscoveryFailure,
//! NamespaceDeletionGroupVersionParsingFailure, NamespaceDeletionContentFailure,
//! NamespaceContentRemaining, NamespaceFinalizersRemaining). While content remains it looks
//! again after half the estimated time (pods' grace periods, or 15 s for objects held by
//! finalizers); once the namespace is empty it removes its `kubernetes` finalizer through
//! `PUT /api/v1/namespaces/<name>/finalize`, and the API server deletes it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use capstan_runtime::{Change, Queue};
use k8s_openapi::api::core::v1::{
    Namespace, NamespaceCondition, NamespaceSpec, NamespaceStatus, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    DeleteParams, DynamicObject, ListParams, PostParams, Preconditions, PropagationPolicy,
};
use kube::core::PartialObjectMeta;
use kube::{Api, Client};
use parking_lot::Mutex;

use crate::garbagecollector::discovery::{self, Discovered, Gvr};
use crate::util::{is_conflict, is_not_found};
use crate::Ctx;

/// Namespace events are acted on after this delay, so that every API server has seen the
/// deletion (and refuses new objects) and last-moment creations are visible.
const DELETION_GRACE_PERIOD: Duration = Duration::from_secs(5);
/// `--namespace-sync-period`: terminating namespaces are looked at again this often.
const RESYNC_PERIOD: Duration = Duration::from_secs(5 * 60);
/// The wait assumed for objects held by finalizers.
const FINALIZER_ESTIMATE_SECONDS: i64 = 15;
/// The finalizer this controller removes.
const FINALIZER: &str = "kubernetes";
/// Retries after errors back off up to a minute (Kubernetes' namespace rate limiter).
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);

pub fn start(ctx: &Ctx) {
    let informer = ctx.informers.get::<Namespace>();
    let queue = Queue::new("namespace");
    {
        let q = queue.clone();
        informer.on_change(move |c| {
            if let Change::Add(ns) | Change::Update { new: ns, .. } = c {
                enqueue(&q, ns);
            }
        });
    }
    let deleter = Arc::new(Deleter {
        client: ctx.client.clone(),
        not_supported: Mutex::new(HashSet::new()),
        failures: Mutex::new(HashMap::new()),
    });
    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        informer.wait_synced().await;
        {
            let (informer, q) = (informer.clone(), queue.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(RESYNC_PERIOD).await;
                    for ns in informer.list() {
                        enqueue(&q, &ns);
                    }
                }
            });
        }
        let q = queue.clone();
        queue.run_workers(workers, move |key| {
            let (d, q, informer) = (deleter.clone(), q.clone(), informer.clone());
            async move {
                if informer.get("", &key).is_none() {
                    d.failures.lock().remove(&key);
                    return Ok(());
                }
                match d.delete(&key).await {
                    Ok(0) => {
                        d.failures.lock().remove(&key);
                    }
                    Ok(estimate) => {
                        let wait = estimate / 2 + 1;
                        tracing::debug!(namespace = %key, wait, "content remaining in namespace");
                        q.add_after(key, Duration::from_secs(wait.unsigned_abs()));
                    }
                    Err(e) => {
                        let delay = d.retry_delay(&key);
                        tracing::info!(namespace = %key, error = %format!("{e:#}"), "deletion of namespace failed; retrying");
                        q.add_after(key, delay);
                    }
                }
                Ok(())
            }
        });
    });
}

fn enqueue(q: &Arc<Queue>, ns: &Namespace) {
    if ns.metadata.deletion_timestamp.is_none() {
        return;
    }
    if let Some(name) = &ns.metadata.name {
        q.add_after(name.clone(), DELETION_GRACE_PERIOD);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Operation {
    List,
    DeleteCollection,
}

struct Deleter {
    client: Client,
    /// Operations a resource turned out not to serve.
    not_supported: Mutex<HashSet<(Operation, Gvr)>>,
    failures: Mutex<HashMap<String, u32>>,
}

/// What is left of one resource in the namespace.
#[derive(Debug, Default, Clone, PartialEq)]
struct GvrRemaining {
    /// How long to wait (seconds); 0 does not mean nothing remains.
    estimate: i64,
    remaining: usize,
    finalizers: BTreeMap<String, usize>,
}

/// What is left of the whole namespace.
#[derive(Debug, Default)]
struct Totals {
    by_resource: BTreeMap<Gvr, usize>,
    by_finalizer: BTreeMap<String, usize>,
}

/// The text of an API error as Kubernetes' clients give it (the status message).
fn error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

fn kube_not_found(e: &anyhow::Error) -> bool {
    e.downcast_ref::<kube::Error>().is_some_and(is_not_found)
}

fn kube_conflict(e: &anyhow::Error) -> bool {
    e.downcast_ref::<kube::Error>().is_some_and(is_conflict)
}

fn unsupported(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 405 || s.code == 404)
}

#[derive(Debug, Clone, Copy)]
enum NamespaceUpdate {
    MarkTerminating,
    Finalize,
}

impl Deleter {
    fn retry_delay(&self, key: &str) -> Duration {
        let mut f = self.failures.lock();
        let n = f.entry(key.to_string()).or_insert(0);
        *n += 1;
        retry_delay(*n)
    }

    fn supported(&self, op: Operation, gvr: &Gvr) -> bool {
        !self.not_supported.lock().contains(&(op, gvr.clone()))
    }

    fn set_not_supported(&self, op: Operation, gvr: &Gvr) {
        self.not_supported.lock().insert((op, gvr.clone()));
    }

    fn namespaces(&self) -> Api<Namespace> {
        Api::all(self.client.clone())
    }

    fn meta_api(&self, d: &Discovered, namespace: &str) -> Api<PartialObjectMeta<DynamicObject>> {
        Api::namespaced_with(self.client.clone(), namespace, &d.ar)
    }

    /// Empty and release the namespace `name` if it is being deleted. Ok(0): done (or nothing
    /// to do); Ok(n): content remains, look again in about n/2 seconds.
    async fn delete(&self, name: &str) -> anyhow::Result<i64> {
        let api = self.namespaces();
        let ns = match api.get(name).await {
            Err(e) if is_not_found(&e) => return Ok(0),
            r => r?,
        };
        if ns.metadata.deletion_timestamp.is_none() {
            return Ok(0);
        }
        let ns = match self
            .retry_on_conflict(ns, NamespaceUpdate::MarkTerminating)
            .await
        {
            Err(e) if kube_not_found(&e) => return Ok(0),
            r => r?,
        };
        if ns.metadata.deletion_timestamp.is_none() {
            return Ok(0);
        }
        if finalized(&ns) {
            self.delete_released(&ns).await?;
            return Ok(0);
        }
        let estimate = self.delete_all_content(&ns).await?;
        if estimate > 0 {
            return Ok(estimate);
        }
        match self.retry_on_conflict(ns, NamespaceUpdate::Finalize).await {
            Err(e) if kube_not_found(&e) => Ok(0),
            Err(e) => Err(e),
            Ok(ns) => {
                self.delete_released(&ns).await?;
                Ok(0)
            }
        }
    }

    /// A namespace with no finalizers left should be gone: Kubernetes' API server deletes it
    /// in the update that removes the last one. Where it is still there (an API server that
    /// keeps it), delete it, guarded by its uid, as Kubernetes' controller once did.
    async fn delete_released(&self, ns: &Namespace) -> anyhow::Result<()> {
        let released = finalized(ns)
            && ns.metadata.deletion_timestamp.is_some()
            && ns.metadata.finalizers.as_ref().is_none_or(Vec::is_empty);
        let Some(name) = ns.metadata.name.as_deref().filter(|_| released) else {
            return Ok(());
        };
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: ns.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match self.namespaces().delete(name, &params).await {
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
            r => r.map(|_| ()).map_err(Into::into),
        }
    }

    async fn retry_on_conflict(
        &self,
        mut ns: Namespace,
        update: NamespaceUpdate,
    ) -> anyhow::Result<Namespace> {
        let api = self.namespaces();
        let name = ns.metadata.name.clone().unwrap_or_default();
        for _ in 0..10 {
            let r = match update {
                NamespaceUpdate::MarkTerminating => self.mark_terminating(&api, &ns).await,
                NamespaceUpdate::Finalize => self.finalize(&api, &ns).await,
            };
            match r {
                Ok(n) => return Ok(n),
                Err(e) if kube_conflict(&e) => {
                    let latest = api.get(&name).await?;
                    if latest.metadata.uid != ns.metadata.uid {
                        return Err(anyhow!("namespace uid has changed across retries"));
                    }
                    ns = latest;
                }
                Err(e) => return Err(e),
            }
        }
        Err(anyhow!("namespace {name} kept changing; will retry"))
    }

    /// Make sure the phase is Terminating.
    async fn mark_terminating(
        &self,
        api: &Api<Namespace>,
        ns: &Namespace,
    ) -> anyhow::Result<Namespace> {
        let phase = ns.status.as_ref().and_then(|s| s.phase.as_deref());
        if ns.metadata.deletion_timestamp.is_none() || phase == Some("Terminating") {
            return Ok(ns.clone());
        }
        let mut next = ns.clone();
        next.status.get_or_insert_with(Default::default).phase = Some("Terminating".into());
        let name = ns.metadata.name.clone().unwrap_or_default();
        Ok(api
            .replace_status(&name, &PostParams::default(), &next)
            .await?)
    }

    /// Remove this controller's finalizer from `spec.finalizers`.
    async fn finalize(&self, api: &Api<Namespace>, ns: &Namespace) -> anyhow::Result<Namespace> {
        let rest: BTreeSet<String> = ns
            .spec
            .as_ref()
            .and_then(|s| s.finalizers.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|f| f != FINALIZER)
            .collect();
        let body = Namespace {
            metadata: ns.metadata.clone(),
            spec: Some(NamespaceSpec {
                finalizers: Some(rest.into_iter().collect()),
            }),
            status: None,
        };
        let name = ns.metadata.name.clone().unwrap_or_default();
        match api
            .replace_subresource("finalize", &name, &PostParams::default(), &body)
            .await
        {
            Err(e) if is_not_found(&e) => Ok(ns.clone()),
            r => Ok(r?),
        }
    }

    /// Delete everything in the namespace; the estimated seconds until what remains is gone.
    async fn delete_all_content(&self, ns: &Namespace) -> anyhow::Result<i64> {
        let namespace = ns.metadata.name.clone().unwrap_or_default();
        let deleted_at = ns
            .metadata
            .deletion_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_else(Timestamp::now);
        let mut errors: Vec<String> = Vec::new();
        let mut conditions = ConditionUpdater::default();
        let resources: Vec<Discovered> = match discovery::discover(&self.client).await {
            Ok(r) => r
                .preferred
                .into_iter()
                .filter(|d| d.namespaced && d.supports("delete"))
                .collect(),
            Err(e) => {
                let msg = error_text(&e);
                conditions.discovery_failed(&msg);
                errors.push(msg);
                Vec::new()
            }
        };
        let mut estimate = 0;
        let mut totals = Totals::default();
        for d in &resources {
            let (left, err) = self.delete_resource(d, &namespace, deleted_at).await;
            if let Some(e) = err {
                conditions.delete_content_failed(e.clone());
                errors.push(e);
            }
            estimate = estimate.max(left.estimate);
            if left.remaining > 0 {
                totals.by_resource.insert(d.gvr(), left.remaining);
                for (f, n) in left.finalizers {
                    if n > 0 {
                        *totals.by_finalizer.entry(f).or_insert(0) += n;
                    }
                }
            }
        }
        conditions.content_totals(&totals);
        let mut next = ns.clone();
        let status = next.status.get_or_insert_with(NamespaceStatus::default);
        if conditions.update(status, Timestamp::now()) {
            let r = self
                .namespaces()
                .replace_status(&namespace, &PostParams::default(), &next)
                .await;
            if let Err(e) = r {
                tracing::info!(namespace = %namespace, error = %e, "couldn't update status condition for namespace");
            }
        }
        if !errors.is_empty() {
            return Err(anyhow!(aggregate(&errors)));
        }
        Ok(estimate)
    }

    /// Delete one resource's objects in the namespace and count what is left.
    async fn delete_resource(
        &self,
        d: &Discovered,
        namespace: &str,
        deleted_at: Timestamp,
    ) -> (GvrRemaining, Option<String>) {
        let gvr = d.gvr();
        let estimate = match self
            .estimate_graceful_termination(&gvr, namespace, deleted_at)
            .await
        {
            Ok(e) => e,
            Err(e) => return (GvrRemaining::default(), Some(e)),
        };
        let with_estimate = GvrRemaining {
            estimate,
            ..Default::default()
        };
        match self.delete_collection(d, namespace).await {
            Err(e) => return (with_estimate, Some(e)),
            Ok(true) => {}
            Ok(false) => {
                if let Err(e) = self.delete_each_item(d, namespace).await {
                    return (with_estimate, Some(e));
                }
            }
        }
        let items = match self.list_collection(d, namespace).await {
            Err(e) => return (with_estimate, Some(e)),
            Ok(None) => return (with_estimate, None),
            Ok(Some(items)) => items,
        };
        if items.is_empty() {
            return (GvrRemaining::default(), None);
        }
        let mut finalizers: BTreeMap<String, usize> = BTreeMap::new();
        for item in &items {
            for f in item.metadata.finalizers.iter().flatten() {
                *finalizers.entry(f.clone()).or_insert(0) += 1;
            }
        }
        let remaining = items.len();
        if estimate != 0 {
            return (
                GvrRemaining {
                    estimate,
                    remaining,
                    finalizers,
                },
                None,
            );
        }
        if !finalizers.is_empty() {
            return (
                GvrRemaining {
                    estimate: FINALIZER_ESTIMATE_SECONDS,
                    remaining,
                    finalizers,
                },
                None,
            );
        }
        (
            GvrRemaining {
                estimate,
                remaining,
                finalizers,
            },
            Some(format!(
                "unexpected items still remain in namespace: {namespace} for gvr: {gvr}"
            )),
        )
    }

    /// Delete the collection; false when the resource does not serve deletecollection.
    async fn delete_collection(&self, d: &Discovered, namespace: &str) -> Result<bool, String> {
        let gvr = d.gvr();
        if !d.supports("deletecollection") || !self.supported(Operation::DeleteCollection, &gvr) {
            return Ok(false);
        }
        // Background propagation: the garbage collector must not orphan what this deletes.
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        match self
            .meta_api(d, namespace)
            .delete_collection(&params, &ListParams::default())
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if unsupported(&e) => {
                self.set_not_supported(Operation::DeleteCollection, &gvr);
                Ok(false)
            }
            Err(e) => Err(error_text(&e)),
        }
    }

    /// The objects left (metadata only); None when the resource cannot be listed.
    async fn list_collection(
        &self,
        d: &Discovered,
        namespace: &str,
    ) -> Result<Option<Vec<PartialObjectMeta<DynamicObject>>>, String> {
        let gvr = d.gvr();
        if !d.supports("list") || !self.supported(Operation::List, &gvr) {
            return Ok(None);
        }
        match self
            .meta_api(d, namespace)
            .list(&ListParams::default())
            .await
        {
            Ok(l) => Ok(Some(l.items)),
            Err(e) if unsupported(&e) => {
                self.set_not_supported(Operation::List, &gvr);
                Ok(None)
            }
            Err(e) => Err(error_text(&e)),
        }
    }

    /// List the objects and delete them one by one.
    async fn delete_each_item(&self, d: &Discovered, namespace: &str) -> Result<(), String> {
        let Some(items) = self.list_collection(d, namespace).await? else {
            return Ok(());
        };
        let api = self.meta_api(d, namespace);
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        for item in items {
            let name = item.metadata.name.clone().unwrap_or_default();
            match api.delete(&name, &params).await {
                Ok(_) => {}
                Err(e) if unsupported(&e) => {}
                Err(e) => return Err(error_text(&e)),
            }
        }
        Ok(())
    }

    /// How long graceful deletions in the namespace may still take: pods' grace periods,
    /// counted from the namespace's deletion.
    async fn estimate_graceful_termination(
        &self,
        gvr: &Gvr,
        namespace: &str,
        deleted_at: Timestamp,
    ) -> Result<i64, String> {
        if !(gvr.group.is_empty() && gvr.resource == "pods") {
            return Ok(0);
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let list = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| error_text(&e))?;
        let estimate = pods_estimate(&list.items);
        let elapsed = Timestamp::now().duration_since(deleted_at).as_secs();
        Ok(if elapsed >= estimate { 0 } else { estimate })
    }
}

/// The delay before the `n`th retry in a row (n ≥ 1): 5 ms doubling, at most a minute.
fn retry_delay(n: u32) -> Duration {
    Duration::from_millis(5)
        .saturating_mul(1u32 << n.saturating_sub(1).min(20))
        .min(MAX_RETRY_DELAY)
}

/// The longest grace period of the pods that have not finished.
fn pods_estimate(pods: &[Pod]) -> i64 {
    pods.iter()
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded") | Some("Failed")
            )
        })
        .filter_map(|p| p.spec.as_ref()?.termination_grace_period_seconds)
        .max()
        .unwrap_or(0)
        .max(0)
}

fn finalized(ns: &Namespace) -> bool {
    ns.spec
        .as_ref()
        .and_then(|s| s.finalizers.as_ref())
        .is_none_or(Vec::is_empty)
}

/// Go's error aggregate text: one message alone, several in brackets.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

const DISCOVERY_FAILURE: &str = "NamespaceDeletionDiscoveryFailure";
const GV_PARSING_FAILURE: &str = "NamespaceDeletionGroupVersionParsingFailure";
const CONTENT_FAILURE: &str = "NamespaceDeletionContentFailure";
const CONTENT_REMAINING: &str = "NamespaceContentRemaining";
const FINALIZERS_REMAINING: &str = "NamespaceFinalizersRemaining";

/// The condition types this controller maintains, with their "all is well" reason and message.
const CONDITION_TYPES: &[(&str, &str, &str)] = &[
    (
        DISCOVERY_FAILURE,
        "ResourcesDiscovered",
        "All resources successfully discovered",
    ),
    (
        GV_PARSING_FAILURE,
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    ),
    (
        CONTENT_FAILURE,
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    (
        CONTENT_REMAINING,
        "ContentRemoved",
        "All content successfully removed",
    ),
    (
        FINALIZERS_REMAINING,
        "ContentHasNoFinalizers",
        "All content-preserving finalizers finished",
    ),
];

/// Turns what a deletion pass found into the namespace's conditions.
#[derive(Debug, Default)]
struct ConditionUpdater {
    /// (type, reason, message) of the failing conditions.
    failing: Vec<(&'static str, &'static str, String)>,
    delete_content_errors: Vec<String>,
}

impl ConditionUpdater {
    fn discovery_failed(&mut self, message: &str) {
        self.failing
            .push((DISCOVERY_FAILURE, "DiscoveryFailed", message.to_string()));
    }

    fn delete_content_failed(&mut self, message: String) {
        self.delete_content_errors.push(message);
    }

    fn content_totals(&mut self, totals: &Totals) {
        if !totals.by_resource.is_empty() {
            let mut parts: Vec<String> = totals
                .by_resource
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(g, n)| format!("{}.{} has {n} resource instances", g.resource, g.group))
                .collect();
            parts.sort();
            self.failing.push((
                CONTENT_REMAINING,
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", parts.join(", ")),
            ));
        }
        if !totals.by_finalizer.is_empty() {
            let mut parts: Vec<String> = totals
                .by_finalizer
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(f, n)| format!("{f} in {n} resource instances"))
                .collect();
            parts.sort();
            self.failing.push((
                FINALIZERS_REMAINING,
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    parts.join(", ")
                ),
            ));
        }
    }

    /// Write the conditions into `status`; true when anything changed.
    fn update(mut self, status: &mut NamespaceStatus, now: Timestamp) -> bool {
        if !self.failing.iter().any(|(t, _, _)| *t == CONTENT_FAILURE)
            && !self.delete_content_errors.is_empty()
        {
            let mut msgs = std::mem::take(&mut self.delete_content_errors);
            msgs.sort();
            self.failing.push((
                CONTENT_FAILURE,
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    msgs.len(),
                    msgs.join(", ")
                ),
            ));
        }
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        let mut changed = false;
        for (type_, ok_reason, ok_message) in CONDITION_TYPES {
            let (cstatus, reason, message) = match self.failing.iter().find(|(t, _, _)| t == type_)
            {
                Some((_, r, m)) => ("True", *r, m.clone()),
                None => ("False", *ok_reason, ok_message.to_string()),
            };
            match conditions.iter_mut().find(|c| c.type_ == *type_) {
                None => {
                    conditions.push(NamespaceCondition {
                        type_: type_.to_string(),
                        status: cstatus.into(),
                        last_transition_time: Some(Time(now)),
                        reason: Some(reason.into()),
                        message: Some(message),
                    });
                    changed = true;
                }
                Some(old) => {
                    if old.status != cstatus
                        || old.message.as_deref() != Some(message.as_str())
                        || old.reason.as_deref() != Some(reason)
                    {
                        if old.status != cstatus {
                            old.last_transition_time = Some(Time(now));
                        }
                        old.status = cstatus.into();
                        old.reason = Some(reason.into());
                        old.message = Some(message);
                        changed = true;
                    }
                }
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    fn gvr(group: &str, resource: &str) -> Gvr {
        Gvr {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
        }
    }

    #[test]
    fn conditions_report_remaining_content_like_kubernetes() {
        let mut totals = Totals::default();
        totals.by_resource.insert(gvr("", "pods"), 2);
        totals.by_resource.insert(gvr("example.com", "widgets"), 1);
        totals.by_finalizer.insert("example.com/hold".into(), 3);
        let mut u = ConditionUpdater::default();
        u.content_totals(&totals);
        u.delete_content_failed("b failed".into());
        u.delete_content_failed("a failed".into());
        let mut status = NamespaceStatus::default();
        let t0 = Timestamp::UNIX_EPOCH;
        assert!(u.update(&mut status, t0));
        let get = |s: &NamespaceStatus, t: &str| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == t)
                .cloned()
                .unwrap()
        };
        let c = get(&status, CONTENT_REMAINING);
        assert_eq!(c.status, "True");
        assert_eq!(c.reason.as_deref(), Some("SomeResourcesRemain"));
        assert_eq!(
            c.message.as_deref(),
            Some("Some resources are remaining: pods. has 2 resource instances, widgets.example.com has 1 resource instances")
        );
        let c = get(&status, FINALIZERS_REMAINING);
        assert_eq!(
            c.message.as_deref(),
            Some("Some content in the namespace has finalizers remaining: example.com/hold in 3 resource instances")
        );
        let c = get(&status, CONTENT_FAILURE);
        assert_eq!(
            c.message.as_deref(),
            Some("Failed to delete all resource types, 2 remaining: a failed, b failed")
        );
        let c = get(&status, DISCOVERY_FAILURE);
        assert_eq!(c.status, "False");
        assert_eq!(c.reason.as_deref(), Some("ResourcesDiscovered"));
        assert_eq!(status.conditions.as_ref().unwrap().len(), 5);

        // Unchanged on a second identical pass; all clear later flips to False with a new time.
        let mut u = ConditionUpdater::default();
        u.content_totals(&totals);
        u.delete_content_failed("a failed".into());
        u.delete_content_failed("b failed".into());
        assert!(!u.update(&mut status, t0));
        let t1 = t0 + std::time::Duration::from_secs(60);
        assert!(ConditionUpdater::default().update(&mut status, t1));
        let c = get(&status, CONTENT_REMAINING);
        assert_eq!(c.status, "False");
        assert_eq!(c.reason.as_deref(), Some("ContentRemoved"));
        assert_eq!(
            c.message.as_deref(),
            Some("All content successfully removed")
        );
        assert_eq!(c.last_transition_time, Some(Time(t1)));
        let c = get(&status, DISCOVERY_FAILURE);
        assert_eq!(
            c.last_transition_time,
            Some(Time(t0)),
            "no transition, same time"
        );
    }

    #[test]
    fn pods_estimate_skips_finished_pods() {
        let pod = |phase: &str, grace: Option<i64>| Pod {
            spec: Some(PodSpec {
                termination_grace_period_seconds: grace,
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(pods_estimate(&[]), 0);
        assert_eq!(
            pods_estimate(&[
                pod("Running", Some(30)),
                pod("Succeeded", Some(300)),
                pod("Pending", Some(45)),
                pod("Running", None)
            ]),
            45
        );
    }

    #[test]
    fn retries_back_off_to_a_minute() {
        assert_eq!(retry_delay(1), Duration::from_millis(5));
        assert_eq!(retry_delay(2), Duration::from_millis(10));
        assert_eq!(retry_delay(13), Duration::from_millis(20480));
        assert_eq!(retry_delay(14), Duration::from_millis(40960));
        assert_eq!(retry_delay(15), MAX_RETRY_DELAY);
        assert_eq!(retry_delay(100), MAX_RETRY_DELAY);
    }
}
