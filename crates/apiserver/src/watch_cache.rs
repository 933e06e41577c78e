//! The watch cache (Kubernetes' Cacher + watchCache): one per stored resource, fed by one store
//! watch. Its current state serves lists; a sliding window of recent events serves watches that
//! start at a recent resourceVersion; every watcher has its own filter.
//!
//! Fan-out policy: each event is serialized once and shared by every watcher. A watcher has a
//! bounded buffer; when an event does not fit, that watcher is closed at once (never blocking
//! the others) and its client re-watches from the last resourceVersion it saw, or relists.
//!
//! Versions: a cache holds objects in their storage version (`WatchCache::info`). Resources
//! served in another version over the same storage (events.k8s.io/v1 events over core/v1,
//! autoscaling/v1 over autoscaling/v2 autoscalers) are the cache's [`View`]s: each cached
//! object converts itself into a view's version the first time a client of that version reads
//! it, and keeps the bytes for every later list and watch event. Objects of every other kind
//! carry no view and are never converted.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use capstan_api::catalogue::ResourceInfo;
use capstan_store::{EventKind, RangeRequest, Store, StoreError, WatchRequest};
use parking_lot::RwLock;
use serde_json::Value;
use tokio::sync::watch;

use crate::watch_queue;

use crate::codec;
use crate::error::{ApiError, ApiResult};
use crate::filter::Filter;

/// Events kept for watches that start in the past.
const WINDOW: usize = 10_000;
/// Writes in flight whose objects are offered to the cache ([`WatchCache::prepare`]).
const MAX_PREPARED: usize = 4096;
/// Events buffered per watcher before it is closed as too slow.
const WATCHER_BUFFER: usize = 1_000;
/// How often the cache asks the store for progress, so that its revision follows the store's
/// even when this resource does not change (bookmarks and consistent lists need it).
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// A version served over the cache's storage other than the storage version: its place among
/// the cache's views and its resource.
#[derive(Debug, Clone, Copy)]
pub struct View {
    pub index: usize,
    pub info: &'static ResourceInfo,
}

/// The resources served over the storage of `info` in a version that must be converted from
/// the stored one, in catalogue order (empty for almost every resource).
pub fn views_of(info: &ResourceInfo) -> &'static [&'static ResourceInfo] {
    static VIEWS: OnceLock<HashMap<&'static str, Vec<&'static ResourceInfo>>> = OnceLock::new();
    let all = VIEWS.get_or_init(|| {
        let mut m: HashMap<&'static str, Vec<&'static ResourceInfo>> = HashMap::new();
        for r in capstan_api::catalogue::RESOURCES {
            if capstan_api::convert::converts(r.group, r.version, r.kind) {
                m.entry(r.storage).or_default().push(r);
            }
        }
        m
    });
    all.get(info.storage).map(Vec::as_slice).unwrap_or(&[])
}

/// One object as the cache keeps it: its JSON and what filters need.
#[derive(Debug)]
pub struct CachedObject {
    pub namespace: String,
    pub name: String,
    /// `metadata.labels` with string values, in key order. Each string is allocated at its
    /// size and the pairs in one slice: a label map of parsed JSON took about 800 bytes for a
    /// pod's three labels, and the cache holds every object of the cluster.
    labels: Box<[(Box<str>, Box<str>)]>,
    /// Values of the kind's selectable fields, in `capstan_api::fields::supported` order
    /// (empty values allocate nothing).
    fields: Box<[(&'static str, Box<str>)]>,
    /// The object in its storage version: as stored (the store's own bytes, shared with it;
    /// its resourceVersion is spliced in on the way out) when `stored_form`, else as clients
    /// see it.
    body: Bytes,
    stored_form: bool,
    pub rev: i64,
    /// The object in the version of each of its storage's [`views_of`], made when first read.
    views: Box<[OnceLock<Bytes>]>,
    /// The object parsed, kept once asked for through [`CachedObject::value_kept`].
    parsed: OnceLock<Value>,
}

impl CachedObject {
    pub fn new(info: &'static ResourceInfo, stored: &Bytes, rev: i64) -> Result<Self, ApiError> {
        if !info.custom {
            // Only what the cache indexes is built.
            let value = codec::decode_stored_sparse(stored, &crate::sparse::keep_of(info))?;
            return Ok(Self::from_value(info, &value, stored.clone(), rev));
        }
        let mut value = codec::decode_stored(stored, rev)?;
        if capstan_api::meta::type_meta(&value).0 != info.api_version() {
            // Stored in an earlier storage version of its definition.
            crate::registry::set_api_version(&mut value, info);
            let json = Bytes::from(serde_json::to_vec(&value).unwrap_or_default());
            return Ok(Self::from_value(info, &value, json, rev));
        }
        Ok(Self::from_value(info, &value, stored.clone(), rev))
    }

    /// The object `value` whose JSON is `body`: its stored form, or its wire form.
    pub fn from_value(info: &'static ResourceInfo, value: &Value, body: Bytes, rev: i64) -> Self {
        let fields = match crate::customresource::selectable(info) {
            Some(s) => s.values(value),
            None => capstan_api::fields::values(info.group, info.kind, info.namespaced, value),
        };
        let fields = fields
            .into_iter()
            .map(|(f, v)| (f, v.into_boxed_str()))
            .collect();
        let mut labels: Vec<(Box<str>, Box<str>)> = capstan_api::meta::labels(value)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str().into(), v.as_str()?.into())))
            .collect();
        labels.sort_unstable();
        let stored_form = codec::is_stored_form(&body);
        CachedObject {
            namespace: capstan_api::meta::namespace(value).to_string(),
            name: capstan_api::meta::name(value).to_string(),
            labels: labels.into_boxed_slice(),
            fields,
            body,
            stored_form,
            rev,
            views: views_of(info).iter().map(|_| OnceLock::new()).collect(),
            parsed: OnceLock::new(),
        }
    }

    /// The object after a write that changed only the selectable fields in `changes` (none of
    /// its labels, name or namespace): what the cache indexes is copied, not parsed again.
    fn changed(&self, body: Bytes, changes: &[(&str, &str)]) -> Self {
        let fields = self
            .fields
            .iter()
            .map(|(f, v)| match changes.iter().find(|(c, _)| c == f) {
                Some((_, new)) => (*f, Box::from(*new)),
                None => (*f, v.clone()),
            })
            .collect();
        CachedObject {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            labels: self.labels.clone(),
            fields,
            stored_form: codec::is_stored_form(&body),
            body,
            rev: 0,
            views: self.views.iter().map(|_| OnceLock::new()).collect(),
            parsed: OnceLock::new(),
        }
    }

    /// The same object as last seen at a later revision (a delete's): the revision is the only
    /// change.
    fn at_revision(&self, rev: i64) -> Self {
        let body = if self.stored_form {
            self.body.clone()
        } else {
            match serde_json::from_slice::<Value>(&self.body) {
                Ok(mut v) if v.is_object() => {
                    capstan_api::meta::set_meta_str(&mut v, "resourceVersion", &rev.to_string());
                    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
                }
                _ => self.body.clone(),
            }
        };
        CachedObject {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            labels: self.labels.clone(),
            fields: self.fields.clone(),
            body,
            stored_form: self.stored_form,
            rev,
            views: self.views.iter().map(|_| OnceLock::new()).collect(),
            parsed: OnceLock::new(),
        }
    }

    /// The object's JSON in its storage version as clients see it, with its resourceVersion.
    pub fn json(&self) -> Bytes {
        if self.stored_form {
            codec::with_resource_version(&self.body, self.rev)
        } else {
            self.body.clone()
        }
    }

    /// Append [`CachedObject::json`] to `out`.
    pub fn write_json(&self, out: &mut bytes::BytesMut) {
        if self.stored_form {
            codec::write_with_resource_version(&self.body, self.rev, out);
        } else {
            out.extend_from_slice(&self.body);
        }
    }

    /// About how many bytes [`CachedObject::write_json`] appends.
    pub fn json_len(&self) -> usize {
        self.body.len() + 40
    }

    /// The object parsed (None if its JSON is not an object's).
    pub fn value(&self) -> Option<Value> {
        if self.stored_form {
            return codec::decode_stored(&self.body, self.rev).ok();
        }
        serde_json::from_slice(&self.body).ok()
    }

    /// The object parsed, parsing it only the first time: for the few objects admission
    /// reads on every request (namespaces, service accounts, priority classes ...).
    pub fn value_kept(&self) -> Option<Value> {
        let v = self
            .parsed
            .get_or_init(|| self.value().unwrap_or(Value::Null));
        (!v.is_null()).then(|| v.clone())
    }

    /// The object's wire JSON in the storage version (`None`) or in a view's version,
    /// converted once and kept.
    pub fn wire(&self, view: Option<View>) -> Bytes {
        let Some(view) = view else {
            return self.json();
        };
        let Some(slot) = self.views.get(view.index) else {
            return convert_json(&self.json(), view.info);
        };
        slot.get_or_init(|| convert_json(&self.json(), view.info))
            .clone()
    }

    /// Append [`CachedObject::wire`] to `out`.
    pub fn write_wire(&self, view: Option<View>, out: &mut bytes::BytesMut) {
        match view {
            None => self.write_json(out),
            Some(_) => out.extend_from_slice(&self.wire(view)),
        }
    }

    /// The value of label `key`, if the object has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.labels[i].1)
    }

    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(f, _)| *f == name)
            .map(|(_, v)| &**v)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as stored in the window and sent to watchers.
#[derive(Debug)]
pub struct CacheEvent {
    pub kind: EventType,
    /// The object after the change; for a delete, its last state with the delete's revision.
    pub obj: Arc<CachedObject>,
    pub prev: Option<Arc<CachedObject>>,
    pub rev: i64,
}

impl CacheEvent {
    fn new(
        kind: EventType,
        obj: Arc<CachedObject>,
        prev: Option<Arc<CachedObject>>,
        rev: i64,
    ) -> Self {
        CacheEvent {
            kind,
            obj,
            prev,
            rev,
        }
    }

    /// Append the event's frame for a client of the storage version (`None`) or of a view to
    /// `out`. Written for each watcher from the stored bytes (a copy with the revision spliced
    /// in, as cheap as copying a frame made once): a frame kept on the event held a second copy
    /// of every object in the window and in the watchers' queues (18 % of the heap at the peak
    /// of the density test's rollout).
    ///
    /// The object goes without its `metadata.managedFields` when `without_managed_fields`.
    pub fn write_frame(
        &self,
        view: Option<View>,
        as_type: EventType,
        without_managed_fields: bool,
        out: &mut bytes::BytesMut,
    ) {
        out.reserve(self.obj.json_len() + 32);
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(as_type.as_str().as_bytes());
        out.extend_from_slice(b"\",\"object\":");
        let start = out.len();
        self.obj.write_wire(view, out);
        if without_managed_fields {
            if let Some(cut) = crate::rawjson::managed_fields_cut(&out[start..]) {
                let end = out.len();
                out.copy_within(start + cut.end..end, start + cut.start);
                out.truncate(end - cut.len());
            }
        }
        out.extend_from_slice(b"}\n");
    }
}

/// `json`, a stored object's wire form, in the version of `info`.
pub fn convert_json(json: &[u8], info: &ResourceInfo) -> Bytes {
    match serde_json::from_slice::<Value>(json) {
        Ok(mut v) if info.custom => {
            crate::registry::set_api_version(&mut v, info);
            Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
        }
        Ok(v) => {
            let v = capstan_api::convert::from_storage(info.group, info.version, info.kind, v);
            Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
        }
        Err(_) => Bytes::copy_from_slice(json),
    }
}

/// What a watcher receives: an event (possibly re-typed by its filter), or the end.
#[derive(Debug, Clone)]
pub struct WatchItem {
    pub kind: EventType,
    pub event: Arc<CacheEvent>,
}

struct Watcher {
    filter: Filter,
    tx: watch_queue::Sender<WatchItem>,
}

struct Inner {
    objects: BTreeMap<String, Arc<CachedObject>>,
    window: VecDeque<Arc<CacheEvent>>,
    /// Every event of this resource after this revision is in the window (the list the cache
    /// started from, or the last event the window dropped). Events of other resources share
    /// the revision sequence, so the window's first event says nothing about what precedes it.
    floor: i64,
    /// Every event up to this revision has been applied.
    rev: i64,
    watchers: HashMap<u64, Watcher>,
    /// Watchers whose field selector asks for one exact `spec.nodeName`, by that node...
    by_node: HashMap<String, HashSet<u64>>,
    /// ...and every other watcher.
    unindexed: HashSet<u64>,
}

/// The cache of one stored resource.
pub struct WatchCache {
    /// The storage version of the objects (and of their JSON).
    pub info: &'static ResourceInfo,
    prefix: String,
    inner: RwLock<Inner>,
    rev_tx: watch::Sender<i64>,
    next_id: AtomicU64,
    progress: RwLock<Option<Arc<tokio::sync::Notify>>>,
    /// Objects this server is writing, already parsed by the registry, by key: the store's
    /// event for a key whose value is the same bytes takes the object from here instead of
    /// parsing it.
    prepared: parking_lot::Mutex<HashMap<String, CachedObject>>,
    /// Set when the resource stops being served (its definition was deleted or changed).
    stopped: tokio::sync::watch::Sender<bool>,
}

/// A registered watch: the events it missed (from the window) then its live channel.
pub struct Subscription {
    pub initial: Vec<WatchItem>,
    pub rx: watch_queue::Receiver<WatchItem>,
    pub id: u64,
    pub cache: Arc<WatchCache>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.cache.unsubscribe(self.id);
    }
}

impl WatchCache {
    pub fn new(info: &'static ResourceInfo, prefix: String) -> Arc<Self> {
        let (rev_tx, _) = watch::channel(0);
        Arc::new(WatchCache {
            info,
            prefix,
            inner: RwLock::new(Inner {
                objects: BTreeMap::new(),
                window: VecDeque::new(),
                floor: 0,
                rev: 0,
                watchers: HashMap::new(),
                by_node: HashMap::new(),
                unindexed: HashSet::new(),
            }),
            rev_tx,
            next_id: AtomicU64::new(1),
            progress: RwLock::new(None),
            prepared: parking_lot::Mutex::new(HashMap::new()),
            stopped: tokio::sync::watch::channel(false).0,
        })
    }

    /// Stop following the store and end every watch (their clients re-watch and find the
    /// resource gone, or served anew).
    pub fn stop(&self) {
        self.stopped.send_replace(true);
        let mut inner = self.inner.write();
        inner.watchers.clear();
        inner.by_node.clear();
        inner.unindexed.clear();
    }

    pub fn is_stopped(&self) -> bool {
        *self.stopped.borrow()
    }

    /// Keep the cache in step with the store until the store goes away.
    pub fn start(self: &Arc<Self>, store: Arc<dyn Store>) {
        let cache = self.clone();
        tokio::spawn(async move {
            let mut stopped = cache.stopped.subscribe();
            loop {
                if *stopped.borrow_and_update() {
                    return;
                }
                let result = tokio::select! {
                    r = cache.run_once(&store) => r,
                    _ = stopped.changed() => return,
                };
                match result {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::warn!(resource = cache.info.plural, error = %e, "watch cache restarts");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
    }

    /// List, then watch from the list's revision. Returns Ok when the store watch ended
    /// cleanly (the store is closing), Err to be restarted.
    async fn run_once(self: &Arc<Self>, store: &Arc<dyn Store>) -> Result<(), StoreError> {
        let list = store
            .range(RangeRequest::prefix(self.prefix.clone()))
            .await?;
        let mut objects = BTreeMap::new();
        for kv in &list.kvs {
            match CachedObject::new(self.info, &kv.value, kv.mod_revision) {
                Ok(o) => {
                    objects.insert(String::from_utf8_lossy(&kv.key).into_owned(), Arc::new(o));
                }
                Err(e) => {
                    tracing::warn!(key = %String::from_utf8_lossy(&kv.key), error = %e.message, "skipping unreadable object")
                }
            }
        }
        {
            let mut inner = self.inner.write();
            inner.objects = objects;
            inner.window.clear();
            inner.floor = list.revision;
            inner.rev = list.revision;
            // Watchers of the old state cannot be continued: they re-watch and relist.
            inner.watchers.clear();
            inner.by_node.clear();
            inner.unindexed.clear();
        }
        self.rev_tx.send_replace(list.revision);
        let mut w = store
            .watch(WatchRequest::prefix(self.prefix.clone()).from_revision(list.revision + 1))
            .await?;
        let notify = Arc::new(tokio::sync::Notify::new());
        *self.progress.write() = Some(notify.clone());
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        loop {
            tokio::select! {
                resp = w.next() => {
                    let Some(resp) = resp else { return Ok(()) };
                    let resp = resp?;
                    self.apply(resp);
                }
                _ = tick.tick() => w.request_progress(),
                _ = notify.notified() => w.request_progress(),
            }
        }
    }

    fn apply(&self, resp: capstan_store::WatchResponse) {
        let mut inner = self.inner.write();
        for ev in resp.events {
            let key = String::from_utf8_lossy(&ev.kv.key).into_owned();
            let rev = ev.kv.mod_revision;
            let prev = inner.objects.get(&key).cloned();
            let event = match ev.kind {
                EventKind::Put => {
                    let prepared = {
                        let mut prepared = self.prepared.lock();
                        match prepared.get(&key) {
                            Some(o) if same_bytes(&o.body, &ev.kv.value) => prepared.remove(&key),
                            _ => None,
                        }
                    };
                    let obj = match prepared {
                        Some(mut o) => {
                            o.rev = rev;
                            Arc::new(o)
                        }
                        None => match CachedObject::new(self.info, &ev.kv.value, rev) {
                            Ok(o) => Arc::new(o),
                            Err(e) => {
                                tracing::warn!(key, error = %e.message, "skipping unreadable object");
                                continue;
                            }
                        },
                    };
                    inner.objects.insert(key, obj.clone());
                    let kind = if prev.is_some() {
                        EventType::Modified
                    } else {
                        EventType::Added
                    };
                    CacheEvent::new(kind, obj, prev, rev)
                }
                EventKind::Delete => {
                    inner.objects.remove(&key);
                    let Some(last) = prev.clone().or_else(|| {
                        let p = ev.prev.as_ref()?;
                        CachedObject::new(self.info, &p.value, p.mod_revision)
                            .ok()
                            .map(Arc::new)
                    }) else {
                        continue;
                    };
                    // A deleted object is reported in its last state, at the delete's revision.
                    let obj = Arc::new(last.at_revision(rev));
                    CacheEvent::new(EventType::Deleted, obj, Some(last), rev)
                }
            };
            let event = Arc::new(event);
            inner.window.push_back(event.clone());
            if inner.window.len() > WINDOW {
                if let Some(dropped) = inner.window.pop_front() {
                    inner.floor = dropped.rev;
                }
            }
            dispatch(&mut inner, &event);
        }
        inner.rev = inner.rev.max(resp.revision);
        let rev = inner.rev;
        drop(inner);
        self.rev_tx.send_replace(rev);
    }

    /// The revision the cache is up to date with.
    pub fn revision(&self) -> i64 {
        self.inner.read().rev
    }

    /// Wait until the cache has caught up with `rev` (asking the store for progress), for at
    /// most `timeout`. False if it did not.
    pub async fn wait_for(&self, rev: i64, timeout: Duration) -> bool {
        let mut rx = self.rev_tx.subscribe();
        if *rx.borrow_and_update() >= rev {
            return true;
        }
        if let Some(n) = self.progress.read().clone() {
            n.notify_one();
        }
        tokio::time::timeout(timeout, async {
            while *rx.borrow_and_update() < rev {
                if rx.changed().await.is_err() {
                    return false;
                }
            }
            true
        })
        .await
        .unwrap_or(false)
    }

    /// Offer the object about to be stored under `key` as `stored` (already parsed as
    /// `value`), before the write, so that applying the write's event need not parse it again.
    /// A write that fails takes its offer back with [`WatchCache::withdraw`].
    pub fn prepare(&self, key: &str, value: &Value, stored: &Bytes) {
        self.offer(
            key,
            CachedObject::from_value(self.info, value, stored.clone(), 0),
        );
    }

    fn offer(&self, key: &str, obj: CachedObject) {
        let mut prepared = self.prepared.lock();
        if prepared.len() >= MAX_PREPARED {
            // Offers of writes whose events never came (the cache relisted meanwhile).
            prepared.clear();
        }
        prepared.insert(key.to_string(), obj);
    }

    /// [`WatchCache::prepare`] for a write made to the stored bytes of the object under `key`
    /// at revision `from` that changes only the selectable fields in `changes` (a binding sets
    /// `spec.nodeName`): the cached object is copied with those fields changed instead of
    /// parsing `stored`. Nothing is offered when the cache does not hold that revision.
    pub fn prepare_changed(&self, key: &str, from: i64, stored: &Bytes, changes: &[(&str, &str)]) {
        let obj = {
            let inner = self.inner.read();
            match inner.objects.get(key) {
                Some(old) if old.rev == from => old.changed(stored.clone(), changes),
                _ => return,
            }
        };
        self.offer(key, obj);
    }

    /// Take back the offer of a write that did not happen.
    pub fn withdraw(&self, key: &str, stored: &Bytes) {
        let mut prepared = self.prepared.lock();
        if prepared
            .get(key)
            .is_some_and(|o| same_bytes(&o.body, stored))
        {
            prepared.remove(key);
        }
    }

    /// One cached object by namespace (empty when cluster-scoped) and name.
    pub fn get(&self, ns: &str, name: &str) -> Option<Arc<CachedObject>> {
        let key =
            crate::registry::object_key(&self.prefix, Some(ns).filter(|n| !n.is_empty()), name);
        self.inner.read().objects.get(&key).cloned()
    }

    /// The cached objects that pass `filter`, sorted by key, with the cache's revision.
    pub fn list(&self, filter: &Filter) -> (Vec<Arc<CachedObject>>, i64) {
        let inner = self.inner.read();
        let items = match filter.namespace.as_deref().filter(|_| self.info.namespaced) {
            // One namespace's objects are one range of keys.
            Some(ns) => {
                let start = format!("{}{ns}/", self.prefix);
                inner
                    .objects
                    .range(start.clone()..)
                    .take_while(|(k, _)| k.starts_with(&start))
                    .map(|(_, o)| o)
                    .filter(|o| filter.matches(o))
                    .cloned()
                    .collect()
            }
            None => inner
                .objects
                .values()
                .filter(|o| filter.matches(o))
                .cloned()
                .collect(),
        };
        (items, inner.rev)
    }

    /// Start a watch after `rev` (or, with `initial`, with the current state as ADDED events).
    pub fn subscribe(
        self: &Arc<Self>,
        filter: Filter,
        rev: Option<i64>,
    ) -> ApiResult<Subscription> {
        let (tx, rx) = watch_queue::channel(WATCHER_BUFFER);
        let mut inner = self.inner.write();
        let mut initial = Vec::new();
        match rev {
            None => {
                for obj in inner.objects.values().filter(|o| filter.matches(o)) {
                    let ev = CacheEvent::new(EventType::Added, obj.clone(), None, obj.rev);
                    initial.push(WatchItem {
                        kind: EventType::Added,
                        event: Arc::new(ev),
                    });
                }
            }
            Some(rev) => {
                // Events after `rev` must all be in the window.
                if rev < inner.floor {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {rev} ({})",
                        inner.floor
                    )));
                }
                for ev in inner.window.iter().filter(|e| e.rev > rev) {
                    if let Some(kind) = filter.event_type(ev) {
                        initial.push(WatchItem {
                            kind,
                            event: ev.clone(),
                        });
                    }
                }
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        match filter.node_name() {
            Some(node) => {
                inner
                    .by_node
                    .entry(node.to_string())
                    .or_default()
                    .insert(id);
            }
            None => {
                inner.unindexed.insert(id);
            }
        }
        inner.watchers.insert(id, Watcher { filter, tx });
        Ok(Subscription {
            initial,
            rx,
            id,
            cache: self.clone(),
        })
    }

    fn unsubscribe(&self, id: u64) {
        let mut inner = self.inner.write();
        remove_watcher(&mut inner, id);
    }

    /// Subscribe to the cache's revision (for bookmarks).
    pub fn revisions(&self) -> watch::Receiver<i64> {
        self.rev_tx.subscribe()
    }

    pub fn watcher_count(&self) -> usize {
        self.inner.read().watchers.len()
    }

    /// How clients of `info` read this cache: `None` for the storage version itself.
    pub fn view_of(&self, info: &'static ResourceInfo) -> Option<View> {
        if info.custom {
            // Other versions of a custom resource convert on every read (index past the
            // cached views' slots).
            return (!std::ptr::eq(info, self.info)).then_some(View {
                index: usize::MAX,
                info,
            });
        }
        views_of(self.info)
            .iter()
            .position(|v| std::ptr::eq(*v, info) || **v == *info)
            .map(|index| View { index, info })
    }
}

/// Whether two values are the same bytes (usually the very same buffer).
fn same_bytes(a: &Bytes, b: &Bytes) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

/// Remove a watcher and its index entry.
fn remove_watcher(inner: &mut Inner, id: u64) {
    let Some(w) = inner.watchers.remove(&id) else {
        return;
    };
    match w.filter.node_name() {
        Some(node) => {
            if let Some(ids) = inner.by_node.get_mut(node) {
                ids.remove(&id);
                if ids.is_empty() {
                    inner.by_node.remove(node);
                }
            }
        }
        None => {
            inner.unindexed.remove(&id);
        }
    }
}

/// Send `event` to every watcher whose filter it passes; close watchers that cannot keep up.
fn dispatch(inner: &mut Inner, event: &Arc<CacheEvent>) {
    // Watchers selecting one node only hear about that node's objects (the node before and
    // after the change, once each).
    let node = event.obj.field("spec.nodeName").filter(|n| !n.is_empty());
    let prev_node = event
        .prev
        .as_deref()
        .and_then(|p| p.field("spec.nodeName"))
        .filter(|n| !n.is_empty() && Some(*n) != node);
    let Inner {
        watchers,
        by_node,
        unindexed,
        ..
    } = inner;
    let indexed = [node, prev_node]
        .into_iter()
        .flatten()
        .filter_map(|n| by_node.get(n))
        .flat_map(|set| set.iter());
    let mut slow = Vec::new();
    for id in unindexed.iter().chain(indexed) {
        let Some(w) = watchers.get(id) else {
            continue;
        };
        if let Some(kind) = w.filter.event_type(event) {
            let item = WatchItem {
                kind,
                event: event.clone(),
            };
            if w.tx.try_send(item).is_err() {
                slow.push(*id);
            }
        }
    }
    for id in slow {
        tracing::debug!(id, "closing a watcher that fell behind");
        remove_watcher(inner, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_store::{Event, KeyValue, WatchResponse};

    fn put(cache: &WatchCache, name: &str, rev: i64) {
        put_in(cache, "default", name, rev)
    }

    fn put_in(cache: &WatchCache, ns: &str, name: &str, rev: i64) {
        let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": {"n": name}}});
        let stored = crate::codec::encode_for_store(&obj);
        let kv = KeyValue {
            key: Bytes::from(format!("/registry/configmaps/{ns}/{name}")),
            value: stored,
            create_revision: rev,
            mod_revision: rev,
            version: 1,
            lease: 0,
        };
        cache.apply(WatchResponse {
            events: vec![Event {
                kind: EventKind::Put,
                kv,
                prev: None,
            }],
            revision: rev,
        });
    }

    fn cache() -> Arc<WatchCache> {
        let info = capstan_api::catalogue::find("", "v1", "configmaps").unwrap();
        WatchCache::new(info, "/registry/configmaps/".into())
    }

    fn event(kind: EventKind, name: &str, value: Bytes, rev: i64) -> WatchResponse {
        WatchResponse {
            events: vec![Event {
                kind,
                kv: KeyValue {
                    key: Bytes::from(format!("/registry/configmaps/default/{name}")),
                    value,
                    create_revision: rev,
                    mod_revision: rev,
                    version: 1,
                    lease: 0,
                },
                prev: None,
            }],
            revision: rev,
        }
    }

    #[test]
    fn offered_objects_are_taken_only_for_their_own_bytes_and_share_them() {
        let c = cache();
        let key = "/registry/configmaps/default/a";
        let v1 = serde_json::json!({"metadata": {"name": "a", "namespace": "default",
            "labels": {"v": "1"}}});
        let v2 = serde_json::json!({"metadata": {"name": "a", "namespace": "default",
            "labels": {"v": "2"}}});
        let (s1, s2) = (
            crate::codec::encode_for_store(&v1),
            crate::codec::encode_for_store(&v2),
        );
        c.prepare(key, &v1, &s1);
        // Another writer's value lands first: parsed, and the offer stays for its own write.
        c.apply(event(EventKind::Put, "a", s2.clone(), 5));
        assert_eq!(c.get("default", "a").unwrap().label("v"), Some("2"));
        assert_eq!(c.prepared.lock().len(), 1);
        c.apply(event(EventKind::Put, "a", s1.clone(), 6));
        assert!(c.prepared.lock().is_empty(), "the offer was taken");
        let obj = c.get("default", "a").unwrap();
        assert_eq!((obj.label("v"), obj.rev), (Some("1"), 6));
        assert_eq!(
            obj.body.as_ptr(),
            s1.as_ptr(),
            "the store's bytes are shared"
        );
        let wire: Value = serde_json::from_slice(&obj.json()).unwrap();
        assert_eq!(wire["metadata"]["resourceVersion"], "6");
        // A failed write takes its offer back.
        c.prepare(key, &v2, &s2);
        c.withdraw(key, &s2);
        assert!(c.prepared.lock().is_empty());
    }

    #[test]
    fn a_write_of_known_field_changes_copies_the_cached_entry() {
        let info = capstan_api::catalogue::find("", "v1", "pods").unwrap();
        let c = WatchCache::new(info, "/registry/pods/".into());
        let key = "/registry/pods/default/p";
        let pod = |node: Option<&str>| {
            let mut v = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web", "b": "2"}},
                "spec": {"schedulerName": "default-scheduler", "restartPolicy": "Always",
                         "containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Pending"}});
            if let Some(n) = node {
                v["spec"]["nodeName"] = n.into();
            }
            crate::codec::encode_for_store(&v)
        };
        let at = |value: Bytes, rev: i64| WatchResponse {
            events: vec![Event {
                kind: EventKind::Put,
                kv: KeyValue {
                    key: Bytes::from(key),
                    value,
                    create_revision: 3,
                    mod_revision: rev,
                    version: 1,
                    lease: 0,
                },
                prev: None,
            }],
            revision: rev,
        };
        c.apply(at(pod(None), 3));
        // Not the revision the cache holds: nothing is offered.
        let bound = pod(Some("n1"));
        c.prepare_changed(key, 2, &bound, &[("spec.nodeName", "n1")]);
        assert!(c.prepared.lock().is_empty());
        c.prepare_changed(key, 3, &bound, &[("spec.nodeName", "n1")]);
        assert_eq!(c.prepared.lock().len(), 1);
        c.apply(at(bound.clone(), 4));
        assert!(c.prepared.lock().is_empty(), "the offer was taken");
        let got = c.get("default", "p").unwrap();
        assert_eq!(got.body.as_ptr(), bound.as_ptr());
        // Exactly what parsing the new bytes gives.
        let parsed = CachedObject::new(info, &bound, 4).unwrap();
        assert_eq!(got.fields, parsed.fields);
        assert_eq!(got.labels, parsed.labels);
        assert_eq!((got.field("spec.nodeName"), got.rev), (Some("n1"), 4));
        assert_eq!(got.field("status.phase"), Some("Pending"));
        let mut f = Filter::new(info, "", "", "spec.nodeName=n1").unwrap();
        assert_eq!(c.list(&f).0.len(), 1);
        f = Filter::new(info, "", "", "spec.nodeName=").unwrap();
        assert!(c.list(&f).0.is_empty());
    }

    #[test]
    fn a_delete_reports_the_last_state_at_the_delete_revision() {
        let c = cache();
        let mut sub = c.subscribe(Filter::everything(), Some(0)).unwrap();
        put(&c, "a", 3);
        c.apply(event(EventKind::Delete, "a", Bytes::new(), 9));
        let items: Vec<WatchItem> = std::iter::from_fn(|| sub.rx.try_recv().ok()).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].kind, EventType::Deleted);
        let mut out = bytes::BytesMut::new();
        items[1]
            .event
            .write_frame(None, items[1].kind, false, &mut out);
        let frame: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(frame["type"], "DELETED");
        assert_eq!(frame["object"]["metadata"]["resourceVersion"], "9");
        assert_eq!(frame["object"]["metadata"]["labels"]["n"], "a");
        assert!(c.get("default", "a").is_none());
    }

    #[test]
    fn a_namespace_list_reads_only_that_namespace() {
        let c = cache();
        for (rev, (ns, name)) in [("team", "a"), ("team2", "b"), ("tea", "c"), ("team", "d")]
            .into_iter()
            .enumerate()
        {
            put_in(&c, ns, name, rev as i64 + 1);
        }
        let mut f = Filter::everything();
        f.namespace = Some("team".into());
        let names: Vec<String> = c.list(&f).0.iter().map(|o| o.name.clone()).collect();
        assert_eq!(names, ["a", "d"]);
        assert_eq!(c.list(&Filter::everything()).0.len(), 4);
    }

    #[test]
    fn a_slow_watcher_is_closed_without_holding_back_the_others() {
        let c = cache();
        let mut slow = c.subscribe(Filter::everything(), Some(0)).unwrap();
        let mut fast = c.subscribe(Filter::everything(), Some(0)).unwrap();
        let mut fast_seen = 0;
        for i in 1..=(WATCHER_BUFFER as i64 + 10) {
            put(&c, &format!("o{i}"), i);
            while fast.rx.try_recv().is_ok() {
                fast_seen += 1;
            }
        }
        assert_eq!(
            fast_seen,
            WATCHER_BUFFER + 10,
            "the reading watcher got every event"
        );
        // The slow one got a full buffer, then its channel was closed.
        let mut slow_seen = 0;
        loop {
            match slow.rx.try_recv() {
                Ok(_) => slow_seen += 1,
                Err(watch_queue::TryRecvError::Disconnected) => break,
                Err(watch_queue::TryRecvError::Empty) => panic!("the slow watcher was not closed"),
            }
        }
        assert_eq!(slow_seen, WATCHER_BUFFER);
        assert_eq!(c.watcher_count(), 1);
    }

    #[test]
    fn watches_resume_from_the_window_or_are_gone() {
        let c = cache();
        for i in 1..=5 {
            put(&c, &format!("o{i}"), i);
        }
        let sub = c.subscribe(Filter::everything(), Some(3)).unwrap();
        let revs: Vec<i64> = sub.initial.iter().map(|i| i.event.rev).collect();
        assert_eq!(revs, vec![4, 5]);
        // Everything from the start is still in the window here; a window that lost events
        // answers 410 Gone.
        for i in 6..=(WINDOW as i64 + 10) {
            put(&c, &format!("p{i}"), i);
        }
        assert_eq!(
            c.subscribe(Filter::everything(), Some(2))
                .err()
                .map(|e| e.code),
            Some(410)
        );
        let all = c.subscribe(Filter::everything(), None).unwrap();
        assert_eq!(all.initial.len(), WINDOW + 10);
    }

    #[test]
    fn gaps_left_by_other_resources_are_not_missing_events() {
        // Revisions 1-9 went to other resources: a watch from 5 misses nothing.
        let c = cache();
        put(&c, "a", 10);
        put(&c, "b", 20);
        let sub = c.subscribe(Filter::everything(), Some(5)).unwrap();
        let revs: Vec<i64> = sub.initial.iter().map(|i| i.event.rev).collect();
        assert_eq!(revs, vec![10, 20]);
    }

    #[test]
    fn label_changes_turn_into_added_and_deleted_for_filtered_watchers() {
        let info = capstan_api::catalogue::find("", "v1", "configmaps").unwrap();
        let c = cache();
        let filter = Filter::new(info, "default", "n=x", "").unwrap();
        let mut sub = c.subscribe(filter, Some(0)).unwrap();
        put(&c, "x", 1); // label n=x: ADDED
                         // Relabel the same object: it leaves the filter.
        let obj = serde_json::json!({"metadata": {"name": "x", "namespace": "default", "labels": {"n": "y"}}});
        let kv = KeyValue {
            key: Bytes::from("/registry/configmaps/default/x"),
            value: crate::codec::encode_for_store(&obj),
            create_revision: 1,
            mod_revision: 2,
            version: 2,
            lease: 0,
        };
        c.apply(WatchResponse {
            events: vec![Event {
                kind: EventKind::Put,
                kv,
                prev: None,
            }],
            revision: 2,
        });
        let kinds: Vec<EventType> = std::iter::from_fn(|| sub.rx.try_recv().ok())
            .map(|i| i.kind)
            .collect();
        assert_eq!(kinds, vec![EventType::Added, EventType::Deleted]);
    }

    #[test]
    fn cached_labels_are_the_string_labels_in_key_order() {
        let info = capstan_api::catalogue::find("", "v1", "configmaps").unwrap();
        let obj = serde_json::json!({"metadata": {"name": "x", "namespace": "default",
            "labels": {"zone": "b", "app": "web", "count": 3, "tier": ""}}});
        let o = CachedObject::from_value(info, &obj, crate::codec::encode_for_store(&obj), 2);
        assert_eq!(o.label("app"), Some("web"));
        assert_eq!(o.label("zone"), Some("b"));
        assert_eq!(o.label("tier"), Some(""));
        // Non-string values count as absent, as label selectors treat them.
        assert_eq!(o.label("count"), None);
        assert_eq!(o.label("other"), None);
        let keys: Vec<&str> = o.labels.iter().map(|(k, _)| &**k).collect();
        assert_eq!(keys, ["app", "tier", "zone"]);
        for (selector, matches) in [
            ("app=web,zone in (a,b)", true),
            ("tier=", true),
            ("count", false),
            ("!count,app!=db", true),
            ("zone=a", false),
        ] {
            let f = Filter::new(info, "default", selector, "").unwrap();
            assert_eq!(f.matches(&o), matches, "{selector}");
        }
    }

    #[test]
    fn objects_convert_once_per_view_and_other_kinds_never() {
        let core = capstan_api::catalogue::find("", "v1", "events").unwrap();
        let events = capstan_api::catalogue::find("events.k8s.io", "v1", "events").unwrap();
        let c = WatchCache::new(core, "/registry/events/".into());
        assert!(c.view_of(core).is_none());
        let view = c
            .view_of(events)
            .expect("events.k8s.io reads the core cache");
        let ev = serde_json::json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "web-0"}, "message": "hello"});
        let kv = KeyValue {
            key: Bytes::from("/registry/events/default/e"),
            value: crate::codec::encode_for_store(&ev),
            create_revision: 1,
            mod_revision: 1,
            version: 1,
            lease: 0,
        };
        c.apply(WatchResponse {
            events: vec![Event {
                kind: EventKind::Put,
                kv,
                prev: None,
            }],
            revision: 1,
        });
        let (objs, _) = c.list(&Filter::everything());
        let first = objs[0].wire(Some(view));
        let again = objs[0].wire(Some(view));
        assert_eq!(
            first.as_ptr(),
            again.as_ptr(),
            "converted once, then shared"
        );
        let v: Value = serde_json::from_slice(&first).unwrap();
        assert_eq!(v["apiVersion"], "events.k8s.io/v1");
        assert_eq!(v["note"], "hello");
        assert_eq!(v["regarding"]["name"], "web-0");
        assert_eq!(v["metadata"]["resourceVersion"], "1");
        assert_eq!(objs[0].wire(None), objs[0].json());

        let cms = capstan_api::catalogue::find("", "v1", "configmaps").unwrap();
        assert!(views_of(cms).is_empty());
        assert_eq!(views_of(core), &[events]);
    }
}
