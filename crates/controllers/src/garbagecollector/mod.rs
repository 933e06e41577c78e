//! The garbage collector (Kubernetes' pkg/controller/garbagecollector): deletes objects whose
//! owners are all gone, and carries out foreground and orphan deletions.
//!
//! Discovery (re-run every 30 s, and a second after a CustomResourceDefinition changes) finds
//! every resource that can be listed, watched and deleted, custom resources included; a
//! metadata-only monitor per resource feeds a single-threaded graph builder ([`graph::Graph`]) with every object's owner references. The builder queues
//! uids for two pools of workers:
//!
//! - attempt-to-delete: an object whose owners may all be gone is looked up live, each owner
//!   is verified by uid with a live GET (an owner with the same name but another uid is a
//!   different object), and the object is deleted when none remains (with Background
//!   propagation unless it carries the orphan or foreground finalizer, or it must go in the
//!   foreground because an owner waits for it); an owner being deleted in the foreground
//!   loses its `foregroundDeletion` finalizer once no dependent blocks it;
//! - attempt-to-orphan: an owner deleted with the `orphan` finalizer has its references
//!   removed from its dependents, then loses the finalizer.

pub mod discovery;
pub mod graph;
mod monitor;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use capstan_runtime::events::WARNING;
use capstan_runtime::{Queue, Recorder};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use kube::core::PartialObjectMeta;
use kube::{Api, Client};
use parking_lot::{Mutex, RwLock};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};

use crate::util::{is_conflict, is_not_found};
use crate::Ctx;
use discovery::{Discovered, Gvr, Resources};
use graph::{AbsentCache, Effects, Event, Graph, Meta, Node, ObjRef, FOREGROUND, ORPHAN};
use monitor::Monitor;

/// How often discovery is re-run for new or removed resources.
const RESYNC_PERIOD: Duration = Duration::from_secs(30);
/// How long the workers wait for the monitors' first lists before collecting anyway.
const INITIAL_SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// A kind missing from the REST mapper triggers a new discovery at most this often.
const MAPPER_REFRESH_INTERVAL: Duration = Duration::from_secs(5);
/// After a CustomResourceDefinition changes, discovery runs again this much later.
const CRD_SETTLE: Duration = Duration::from_secs(1);
/// Owners verified absent that are remembered.
const ABSENT_CACHE_SIZE: usize = 500;

type MetaApi = Api<PartialObjectMeta<DynamicObject>>;

/// Why an attempt did not finish.
#[derive(Debug)]
enum GcError {
    /// The object was found absent; a virtual delete event was queued for the graph.
    VirtualDeleteQueued,
    /// A cluster-scoped object names a namespaced owner: never retried.
    NamespacedOwnerOfClusterScoped,
    /// No resource serves the reference's kind at its apiVersion (yet).
    RestMapping {
        kind: String,
        api_version: String,
    },
    Api(kube::Error),
    Other(String),
}

impl std::fmt::Display for GcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GcError::VirtualDeleteQueued => write!(f, "enqueued virtual delete event"),
            GcError::NamespacedOwnerOfClusterScoped => {
                write!(
                    f,
                    "cluster-scoped objects cannot refer to namespaced owners"
                )
            }
            GcError::RestMapping { kind, api_version } => {
                write!(f, "unable to get REST mapping for {kind}/{api_version}.")
            }
            GcError::Api(e) => write!(f, "{e}"),
            GcError::Other(s) => write!(f, "{s}"),
        }
    }
}

impl From<kube::Error> for GcError {
    fn from(e: kube::Error) -> GcError {
        GcError::Api(e)
    }
}

impl GcError {
    fn is_not_found(&self) -> bool {
        matches!(self, GcError::Api(e) if is_not_found(e))
    }
    fn is_conflict(&self) -> bool {
        matches!(self, GcError::Api(e) if is_conflict(e))
    }
}

struct Gc {
    client: Client,
    graph: Mutex<Graph>,
    absent: Mutex<AbsentCache>,
    mapper: RwLock<Resources>,
    mapper_refreshed: Mutex<Option<Instant>>,
    changes: mpsc::UnboundedSender<Event>,
    attempt_to_delete: Arc<Queue>,
    attempt_to_orphan: Arc<Queue>,
    monitors: Mutex<HashMap<Gvr, Monitor>>,
    recorder: Recorder,
    /// A CustomResourceDefinition changed: discovery may have new resources.
    crds_changed: Notify,
}

pub fn start(ctx: &Ctx) {
    let (tx, rx) = mpsc::unbounded_channel();
    let gc = Arc::new(Gc {
        client: ctx.client.clone(),
        graph: Mutex::new(Graph::default()),
        absent: Mutex::new(AbsentCache::new(ABSENT_CACHE_SIZE)),
        mapper: RwLock::new(Resources::default()),
        mapper_refreshed: Mutex::new(None),
        changes: tx,
        attempt_to_delete: Queue::new("garbage_collector_attempt_to_delete"),
        attempt_to_orphan: Queue::new("garbage_collector_attempt_to_orphan"),
        monitors: Mutex::new(HashMap::new()),
        recorder: ctx.recorder("garbage-collector-controller"),
        crds_changed: Notify::new(),
    });
    {
        // Not in Kubernetes (which waits for its next discovery period): a new custom
        // resource is monitored as soon as it is served.
        let gc = gc.clone();
        ctx.informers
            .get::<CustomResourceDefinition>()
            .on_change(move |_| gc.crds_changed.notify_one());
    }
    let workers = ctx.opts.workers;
    tokio::spawn(gc.run(rx, workers));
}

/// The resources the collector monitors: listable, watchable and deletable, except events.
fn deletable(resources: &Resources) -> HashMap<Gvr, Discovered> {
    resources
        .preferred
        .iter()
        .filter(|r| ["delete", "list", "watch"].iter().all(|v| r.supports(v)))
        .filter(|r| {
            !(r.ar.plural == "events" && (r.ar.group.is_empty() || r.ar.group == "events.k8s.io"))
        })
        .map(|r| (r.gvr(), r.clone()))
        .collect()
}

impl Gc {
    async fn run(self: Arc<Self>, rx: mpsc::UnboundedReceiver<Event>, workers: usize) {
        tokio::spawn(self.clone().process_graph_changes(rx));
        let mut started = false;
        loop {
            let synced = self.sync_resources().await;
            if !started && synced {
                let deadline = Instant::now() + INITIAL_SYNC_TIMEOUT;
                while !self.is_synced() && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if !self.is_synced() {
                    tracing::info!("garbage collector: not all resource monitors could be synced, proceeding anyways");
                }
                self.start_workers(workers);
                started = true;
            }
            let wait = if started {
                RESYNC_PERIOD
            } else {
                Duration::from_secs(1)
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.crds_changed.notified(), if started => {
                    // Let the definition become established (and its neighbours arrive).
                    tokio::time::sleep(CRD_SETTLE).await;
                }
            }
        }
    }

    fn is_synced(&self) -> bool {
        let monitors = self.monitors.lock();
        !monitors.is_empty() && monitors.values().all(Monitor::has_synced)
    }

    /// Re-run discovery; start monitors for new resources and stop those of removed ones.
    /// False when discovery found nothing to monitor.
    async fn sync_resources(&self) -> bool {
        let resources = match discovery::discover(&self.client).await {
            Ok(r) => r,
            Err(e) => {
                tracing::info!(error = %e, "garbage collector: failed to discover preferred resources");
                return !self.monitors.lock().is_empty();
            }
        };
        let wanted = deletable(&resources);
        if wanted.is_empty() {
            tracing::debug!("no resources reported by discovery, skipping garbage collector sync");
            return !self.monitors.lock().is_empty();
        }
        *self.mapper.write() = resources;
        *self.mapper_refreshed.lock() = Some(Instant::now());
        let mut monitors = self.monitors.lock();
        let before = monitors.len();
        monitors.retain(|gvr, _| wanted.contains_key(gvr));
        let removed = before - monitors.len();
        let mut added = 0;
        for (gvr, d) in wanted {
            if monitors.contains_key(&gvr) {
                continue;
            }
            monitors.insert(
                gvr,
                Monitor::start(self.client.clone(), d.ar, self.changes.clone()),
            );
            added += 1;
        }
        if added > 0 || removed > 0 {
            tracing::debug!(added, removed, "garbage collector: synced monitors");
        }
        true
    }

    /// The single graph builder: apply each change, then queue what it asks for.
    async fn process_graph_changes(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<Event>) {
        while let Some(ev) = rx.recv().await {
            let mut out = Effects::default();
            self.graph.lock().process(&ev, &mut out);
            self.apply(out);
        }
    }

    fn apply(&self, out: Effects) {
        {
            let mut absent = self.absent.lock();
            for r in out.absent {
                absent.add(r);
            }
        }
        for (dep, message) in out.invalid_namespace {
            let r = ObjectReference {
                api_version: Some(dep.api_version),
                kind: Some(dep.kind),
                namespace: Some(dep.namespace).filter(|n| !n.is_empty()),
                name: Some(dep.name),
                uid: Some(dep.uid),
                ..Default::default()
            };
            self.recorder
                .record(r, WARNING, "OwnerRefInvalidNamespace", message);
        }
        for uid in out.attempt_to_delete {
            self.attempt_to_delete.add(uid);
        }
        for uid in out.attempt_to_delete_later {
            self.attempt_to_delete.add_rate_limited(uid);
        }
        for uid in out.attempt_to_orphan {
            self.attempt_to_orphan.add(uid);
        }
    }

    fn start_workers(self: &Arc<Self>, workers: usize) {
        let gc = self.clone();
        self.attempt_to_delete.run_workers(workers, move |uid| {
            let gc = gc.clone();
            async move { gc.attempt_to_delete_worker(&uid).await }
        });
        let gc = self.clone();
        self.attempt_to_orphan.run_workers(workers, move |uid| {
            let gc = gc.clone();
            async move { gc.attempt_to_orphan_worker(&uid).await }
        });
    }

    fn node(&self, uid: &str) -> Option<Node> {
        self.graph.lock().get(uid).cloned()
    }

    fn enqueue_virtual_delete(&self, id: &ObjRef) {
        let _ = self.changes.send(Event::virtual_delete(id));
    }

    async fn attempt_to_delete_worker(&self, uid: &str) -> anyhow::Result<()> {
        let Some(node) = self.node(uid) else {
            // Gone from the graph since it was queued.
            return Ok(());
        };
        match self.attempt_to_delete_item(&node).await {
            Err(GcError::VirtualDeleteQueued) | Err(GcError::NamespacedOwnerOfClusterScoped) => {
                Ok(())
            }
            Err(e) => Err(anyhow!("error syncing item {}: {e}", node.identity)),
            Ok(()) => {
                if self.node(uid).is_some_and(|n| n.virtual_) {
                    // Not seen by a monitor yet: look again later, so a virtual node of an
                    // object created and deleted between lists does not linger.
                    return Err(anyhow!(
                        "item {} hasn't been observed via informer yet",
                        node.identity
                    ));
                }
                Ok(())
            }
        }
    }

    /// Look up the object live and delete it when all its owners are gone (or, for an owner
    /// deleting its dependents, finish when none blocks it any more).
    async fn attempt_to_delete_item(&self, item: &Node) -> Result<(), GcError> {
        if item.being_deleted && !item.deleting_dependents {
            return Ok(());
        }
        let latest = match self.get_object(&item.identity).await {
            Err(e) if e.is_not_found() => {
                self.enqueue_virtual_delete(&item.identity);
                return Err(GcError::VirtualDeleteQueued);
            }
            r => r?,
        };
        if latest.uid != item.identity.uid {
            self.enqueue_virtual_delete(&item.identity);
            return Err(GcError::VirtualDeleteQueued);
        }
        if item.deleting_dependents {
            return self.process_deleting_dependents_item(item).await;
        }
        if latest.owners.is_empty() {
            return Ok(());
        }
        let (solid, dangling, waiting) = self.classify_references(item, &latest.owners).await?;
        tracing::debug!(item = %item.identity, solid = solid.len(), dangling = dangling.len(), waiting = waiting.len(), "garbage collector: classified references");
        if !solid.is_empty() {
            if dangling.is_empty() && waiting.is_empty() {
                return Ok(());
            }
            // Drop the references to absent owners and to owners waiting for their dependents
            // (which would otherwise wait for this object forever).
            let uids: Vec<String> = dangling
                .iter()
                .chain(waiting.iter())
                .map(|r| r.uid.clone())
                .collect();
            let smp = delete_owner_refs_smp(&item.identity.uid, &uids);
            return self
                .patch(item, &smp, |live| delete_owner_refs_jmp(live, &uids))
                .await;
        }
        let has_dependents = self
            .graph
            .lock()
            .get(&item.identity.uid)
            .is_some_and(|n| !n.dependents.is_empty());
        let policy = if !waiting.is_empty() && has_dependents {
            let dependent_deleting_dependents = self
                .graph
                .lock()
                .dependents(&item.identity.uid)
                .iter()
                .any(|d| d.deleting_dependents);
            if dependent_deleting_dependents {
                // A possible cycle: stop blocking the owners, then go in the foreground.
                tracing::debug!(item = %item.identity, "garbage collector: owner and dependent both delete dependents; unblocking owner references");
                let smp = unblock_owner_refs_smp(item);
                let owners = item.owners.clone();
                self.patch(item, &smp, |live| unblock_owner_refs_jmp(live, &owners))
                    .await?;
            }
            PropagationPolicy::Foreground
        } else if latest.has_finalizer(ORPHAN) {
            PropagationPolicy::Orphan
        } else if latest.has_finalizer(FOREGROUND) {
            PropagationPolicy::Foreground
        } else {
            PropagationPolicy::Background
        };
        tracing::debug!(item = %item.identity, ?policy, "garbage collector: deleting item");
        match self
            .delete_object(
                &item.identity,
                &latest.resource_version,
                &latest.owners,
                policy,
            )
            .await
        {
            Err(e) if e.is_not_found() => {
                self.enqueue_virtual_delete(&item.identity);
                Err(GcError::VirtualDeleteQueued)
            }
            r => r,
        }
    }

    /// An owner deleting in the foreground: done when no dependent blocks it; otherwise its
    /// blocking dependents are (re)considered for deletion.
    async fn process_deleting_dependents_item(&self, item: &Node) -> Result<(), GcError> {
        let blocking: Vec<(String, bool)> = self
            .graph
            .lock()
            .blocking_dependents(&item.identity.uid)
            .iter()
            .map(|d| (d.identity.uid.clone(), d.deleting_dependents))
            .collect();
        if blocking.is_empty() {
            tracing::debug!(item = %item.identity, "garbage collector: removing the foregroundDeletion finalizer");
            return self.remove_finalizer(&item.identity, FOREGROUND).await;
        }
        for (uid, deleting_dependents) in blocking {
            if !deleting_dependents {
                self.attempt_to_delete.add(uid);
            }
        }
        Ok(())
    }

    /// Split references into solid (owner exists, not waiting for its dependents), dangling
    /// (owner absent) and waiting (owner being deleted in the foreground).
    async fn classify_references(
        &self,
        item: &Node,
        refs: &[OwnerReference],
    ) -> Result<
        (
            Vec<OwnerReference>,
            Vec<OwnerReference>,
            Vec<OwnerReference>,
        ),
        GcError,
    > {
        let (mut solid, mut dangling, mut waiting) = (Vec::new(), Vec::new(), Vec::new());
        for r in refs {
            match self.is_dangling(r, item).await? {
                None => dangling.push(r.clone()),
                Some(owner) if owner.deleting && owner.has_finalizer(FOREGROUND) => {
                    waiting.push(r.clone())
                }
                Some(_) => solid.push(r.clone()),
            }
        }
        Ok((solid, dangling, waiting))
    }

    /// The owner a reference names, looked up live (`None`: it does not exist, or another
    /// object with its name does).
    async fn is_dangling(&self, r: &OwnerReference, item: &Node) -> Result<Option<Meta>, GcError> {
        let mut key = ObjRef::of_owner(r, "");
        if self.absent.lock().has(&key) {
            return Ok(None);
        }
        key.namespace = item.identity.namespace.clone();
        if self.absent.lock().has(&key) {
            return Ok(None);
        }
        let d = self.api_resource(&r.api_version, &r.kind).await?;
        if !d.namespaced {
            key.namespace.clear();
        }
        if item.identity.namespace.is_empty() && d.namespaced {
            tracing::debug!(item = %item.identity, owner = %key, "garbage collector: item is cluster-scoped, but refers to a namespaced owner");
            return Err(GcError::NamespacedOwnerOfClusterScoped);
        }
        let api = self.meta_api(&d, &item.identity.namespace);
        match api.get(&r.name).await {
            Err(e) if is_not_found(&e) => {
                self.absent.lock().add(key);
                Ok(None)
            }
            Err(e) => Err(e.into()),
            Ok(owner) => {
                let owner = Meta::from_object_meta(&owner.metadata);
                if owner.uid != r.uid {
                    self.absent.lock().add(key);
                    return Ok(None);
                }
                Ok(Some(owner))
            }
        }
    }

    async fn attempt_to_orphan_worker(&self, uid: &str) -> anyhow::Result<()> {
        let Some(owner) = self.node(uid) else {
            return Ok(());
        };
        let dependents: Vec<Node> = self
            .graph
            .lock()
            .dependents(uid)
            .into_iter()
            .cloned()
            .collect();
        self.orphan_dependents(&owner.identity, &dependents)
            .await
            .map_err(|e| anyhow!("orphanDependents for {} failed with {e}", owner.identity))?;
        self.remove_finalizer(&owner.identity, ORPHAN)
            .await
            .map_err(|e| {
                anyhow!(
                    "removeOrphanFinalizer for {} failed with {e}",
                    owner.identity
                )
            })
    }

    /// Remove the owner's references from its dependents.
    async fn orphan_dependents(&self, owner: &ObjRef, dependents: &[Node]) -> Result<(), GcError> {
        let owner_uid = vec![owner.uid.clone()];
        let results = futures::future::join_all(dependents.iter().map(|dep| {
            let smp = delete_owner_refs_smp(&dep.identity.uid, &owner_uid);
            let owner_uid = owner_uid.clone();
            async move {
                match self
                    .patch(dep, &smp, |live| delete_owner_refs_jmp(live, &owner_uid))
                    .await
                {
                    Err(e) if !e.is_not_found() => {
                        Some(format!("orphaning {} failed, {e}", dep.identity))
                    }
                    _ => None,
                }
            }
        }))
        .await;
        let mut errors: Vec<String> = results.into_iter().flatten().collect();
        if errors.is_empty() {
            return Ok(());
        }
        errors.sort();
        Err(GcError::Other(format!(
            "failed to orphan dependents of owner {owner}, got errors: {}",
            aggregate(&errors)
        )))
    }

    /// Remove `finalizer` from the object (a merge patch guarded by its resourceVersion,
    /// retried on conflicts).
    async fn remove_finalizer(&self, id: &ObjRef, finalizer: &str) -> Result<(), GcError> {
        const STEPS: u32 = 4;
        let mut delay = Duration::from_millis(10);
        for step in 0..STEPS {
            let obj = match self.get_object(id).await {
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => {
                    return Err(GcError::Other(format!(
                        "cannot finalize owner {id}, because cannot get it: {e}. The garbage collector will retry later"
                    )))
                }
                Ok(o) => o,
            };
            if !obj.has_finalizer(finalizer) {
                return Ok(());
            }
            let rest: Vec<&String> = obj.finalizers.iter().filter(|f| *f != finalizer).collect();
            let patch = json!({"metadata": {
                "resourceVersion": obj.resource_version,
                "finalizers": if rest.is_empty() { Value::Null } else { json!(rest) },
            }});
            match self.patch_object(id, &Patch::Merge(&patch)).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_conflict() && step + 1 < STEPS => {
                    tokio::time::sleep(delay).await;
                    delay *= 5;
                }
                Err(e) if e.is_conflict() => {
                    return Err(GcError::Other(format!(
                        "updateMaxRetries({STEPS}) has reached. The garbage collector will retry later for owner {id}"
                    )))
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The resource serving `kind` at `api_version`; a miss re-runs discovery (at most every
    /// few seconds), since a new custom resource may not have been discovered yet.
    async fn api_resource(&self, api_version: &str, kind: &str) -> Result<Discovered, GcError> {
        if let Some(d) = self.mapper.read().mapping(api_version, kind) {
            return Ok(d.clone());
        }
        let refresh = {
            let mut last = self.mapper_refreshed.lock();
            let stale = last.is_none_or(|t| t.elapsed() >= MAPPER_REFRESH_INTERVAL);
            if stale {
                *last = Some(Instant::now());
            }
            stale
        };
        if refresh {
            if let Ok(r) = discovery::discover(&self.client).await {
                let found = r.mapping(api_version, kind).cloned();
                *self.mapper.write() = r;
                if let Some(d) = found {
                    return Ok(d);
                }
            }
        }
        Err(GcError::RestMapping {
            kind: kind.to_string(),
            api_version: api_version.to_string(),
        })
    }

    fn meta_api(&self, d: &Discovered, namespace: &str) -> MetaApi {
        if d.namespaced && !namespace.is_empty() {
            Api::namespaced_with(self.client.clone(), namespace, &d.ar)
        } else {
            Api::all_with(self.client.clone(), &d.ar)
        }
    }

    async fn api_for(&self, id: &ObjRef) -> Result<MetaApi, GcError> {
        let d = self.api_resource(&id.api_version, &id.kind).await?;
        Ok(self.meta_api(&d, &id.namespace))
    }

    async fn get_object(&self, id: &ObjRef) -> Result<Meta, GcError> {
        let api = self.api_for(id).await?;
        let o = api.get(&id.name).await?;
        Ok(Meta::from_object_meta(&o.metadata))
    }

    async fn patch_object(&self, id: &ObjRef, patch: &Patch<&Value>) -> Result<(), GcError> {
        let api = self.api_for(id).await?;
        api.patch(&id.name, &PatchParams::default(), patch).await?;
        Ok(())
    }

    /// A strategic merge patch, or (for resources that do not take one, such as custom
    /// resources) the JSON merge patch `jmp` makes from the live object.
    async fn patch(
        &self,
        item: &Node,
        smp: &Value,
        jmp: impl FnOnce(&Meta) -> Value,
    ) -> Result<(), GcError> {
        match self
            .patch_object(&item.identity, &Patch::Strategic(smp))
            .await
        {
            Err(GcError::Api(e)) if smp_unsupported(&e) => {
                let live = self.get_object(&item.identity).await?;
                let p = jmp(&live);
                self.patch_object(&item.identity, &Patch::Merge(&p)).await
            }
            r => r,
        }
    }

    /// Delete with the object's uid and resourceVersion as preconditions; when only the
    /// resourceVersion moved (its owners are the same), retry with the uid alone.
    async fn delete_object(
        &self,
        id: &ObjRef,
        resource_version: &str,
        owners: &[OwnerReference],
        policy: PropagationPolicy,
    ) -> Result<(), GcError> {
        let api = self.api_for(id).await?;
        let params = |rv: Option<&str>| DeleteParams {
            propagation_policy: Some(policy.clone()),
            preconditions: Some(Preconditions {
                uid: Some(id.uid.clone()),
                resource_version: rv.map(str::to_string),
            }),
            ..Default::default()
        };
        let rv = (!resource_version.is_empty()).then_some(resource_version);
        match api.delete(&id.name, &params(rv)).await {
            Ok(_) => Ok(()),
            Err(e) if is_conflict(&e) && rv.is_some() => match api.get(&id.name).await {
                Err(live) if is_not_found(&live) => Err(live.into()),
                Ok(live)
                    if live.metadata.uid.as_deref() == Some(id.uid.as_str())
                        && live.metadata.resource_version.as_deref() != rv
                        && live.metadata.owner_references.clone().unwrap_or_default() == owners =>
                {
                    api.delete(&id.name, &params(None)).await?;
                    Ok(())
                }
                _ => Err(e.into()),
            },
            Err(e) => Err(e.into()),
        }
    }
}

/// A strategic merge patch is not accepted for this resource (Kubernetes answers 415 for
/// custom resources).
fn smp_unsupported(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.code == 415
                || (s.code == 400
                    && s.message
                        .contains("strategic merge patch format is not supported"))
        }
        _ => false,
    }
}

/// Go's error aggregate text: one message alone, several in brackets.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// The strategic merge patch deleting the references to `owner_uids` (guarded by the
/// dependent's uid).
fn delete_owner_refs_smp(dependent_uid: &str, owner_uids: &[String]) -> Value {
    let refs: Vec<Value> = owner_uids
        .iter()
        .map(|u| json!({"$patch": "delete", "uid": u}))
        .collect();
    json!({"metadata": {"ownerReferences": refs, "uid": dependent_uid}})
}

/// The JSON merge patch keeping all references but those to `owner_uids` (guarded by the
/// resourceVersion).
fn delete_owner_refs_jmp(live: &Meta, owner_uids: &[String]) -> Value {
    let kept: Vec<&OwnerReference> = live
        .owners
        .iter()
        .filter(|r| !owner_uids.contains(&r.uid))
        .collect();
    json!({"metadata": {
        "resourceVersion": live.resource_version,
        "ownerReferences": if kept.is_empty() { Value::Null } else { json!(kept) },
    }})
}

/// The strategic merge patch setting `blockOwnerDeletion: false` on the blocking references.
fn unblock_owner_refs_smp(n: &Node) -> Value {
    let refs: Vec<OwnerReference> = n
        .owners
        .iter()
        .filter(|r| r.block_owner_deletion == Some(true))
        .map(|r| OwnerReference {
            block_owner_deletion: Some(false),
            ..r.clone()
        })
        .collect();
    json!({"metadata": {"ownerReferences": refs, "uid": n.identity.uid}})
}

/// The JSON merge patch making every reference non-blocking.
fn unblock_owner_refs_jmp(live: &Meta, owners: &[OwnerReference]) -> Value {
    let refs: Vec<OwnerReference> = owners
        .iter()
        .map(|r| OwnerReference {
            block_owner_deletion: Some(false),
            ..r.clone()
        })
        .collect();
    json!({"metadata": {
        "resourceVersion": live.resource_version,
        "ownerReferences": refs,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oref(uid: &str, block: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: format!("n-{uid}"),
            uid: uid.into(),
            controller: None,
            block_owner_deletion: block,
        }
    }

    #[test]
    fn owner_reference_patches_match_kubernetes() {
        assert_eq!(
            delete_owner_refs_smp("d", &["a".into(), "b".into()]),
            json!({"metadata": {"ownerReferences": [
                {"$patch": "delete", "uid": "a"},
                {"$patch": "delete", "uid": "b"}
            ], "uid": "d"}})
        );
        let live = Meta {
            resource_version: "7".into(),
            owners: vec![oref("a", None), oref("b", Some(true))].into(),
            ..Default::default()
        };
        let p = delete_owner_refs_jmp(&live, &["a".into()]);
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], "b");
        let p = delete_owner_refs_jmp(&live, &["a".into(), "b".into()]);
        assert!(p["metadata"]["ownerReferences"].is_null());

        let n = Node {
            identity: ObjRef {
                uid: "me".into(),
                ..Default::default()
            },
            owners: live.owners.clone(),
            ..Default::default()
        };
        let p = unblock_owner_refs_smp(&n);
        assert_eq!(p["metadata"]["uid"], "me");
        let refs = p["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0]["blockOwnerDeletion"], false);
        let p = unblock_owner_refs_jmp(&live, &live.owners);
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
            false
        );
    }

    #[test]
    fn events_are_not_monitored() {
        let d = |group: &str, plural: &str, verbs: &[&str]| Discovered {
            ar: kube::discovery::ApiResource {
                group: group.into(),
                version: "v1".into(),
                api_version: "v1".into(),
                kind: "K".into(),
                plural: plural.into(),
            },
            namespaced: true,
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
        };
        let all = &["delete", "list", "watch"];
        let r = Resources {
            preferred: vec![
                d("", "events", all),
                d("events.k8s.io", "events", all),
                d("", "configmaps", all),
                d("", "bindings", &["create"]),
                d("example.com", "events", all),
            ],
            ..Default::default()
        };
        let mut names: Vec<String> = deletable(&r)
            .keys()
            .map(|g| format!("{}/{}", g.group, g.resource))
            .collect();
        names.sort();
        assert_eq!(names, ["/configmaps", "example.com/events"]);
        assert_eq!(aggregate(&["x".into()]), "x");
        assert_eq!(aggregate(&["x".into(), "y".into()]), "[x, y]");
    }
}
