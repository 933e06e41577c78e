//! Shared informers: one list-watch per resource type for the whole process, a local cache of
//! the objects (indexed by namespace), and change handlers that every interested controller
//! registers (client-go's SharedInformerFactory). Handlers run after the cache has the change,
//! on the informer's task, so they must be quick: they enqueue keys, nothing more.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource, ResourceExt};
use parking_lot::{Mutex, RwLock};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

/// One change the informer saw, after its cache took it.
pub enum Change<'a, K> {
    Add(&'a Arc<K>),
    Update { old: &'a Arc<K>, new: &'a Arc<K> },
    Delete(&'a Arc<K>),
}

impl<'a, K> Change<'a, K> {
    /// The object as it is now (for a delete: as it was last seen).
    pub fn object(&self) -> &'a Arc<K> {
        match self {
            Change::Add(o) | Change::Delete(o) => o,
            Change::Update { new, .. } => new,
        }
    }
}

type Handler<K> = Box<dyn Fn(&Change<'_, K>) + Send + Sync>;

/// A compact form of a cached object. An informer of a type cached in great numbers (the
/// controller manager's pods) can keep this instead of the object and rebuild the object on
/// every read: reads cost a rebuild, the cache costs a fraction of the objects' size.
pub trait Packed<K>: Send + Sync + std::any::Any {
    /// The object again. `namespace` and `name` are its cache keys, so need not be kept twice.
    fn unpack(&self, namespace: &str, name: &str) -> K;
}

/// Makes the compact form of an object about to be cached.
pub type Pack<K> = fn(&K) -> Box<dyn Packed<K>>;

/// One cached object, as it came or packed.
enum Slot<K> {
    Full(Arc<K>),
    Packed(Box<dyn Packed<K>>),
}

impl<K: 'static> Slot<K> {
    fn load(&self, namespace: &str, name: &str) -> Arc<K> {
        match self {
            Slot::Full(o) => o.clone(),
            Slot::Packed(p) => Arc::new(p.unpack(namespace, name)),
        }
    }
}

fn visit_passing<K: 'static>(
    namespace: &str,
    names: &Names<K>,
    pass: &impl Fn(&dyn Packed<K>) -> bool,
    f: &mut impl FnMut(&Arc<K>),
) {
    for (n, o) in names {
        match o {
            Slot::Full(o) => f(o),
            Slot::Packed(p) if pass(p.as_ref()) => f(&Arc::new(p.unpack(namespace, n))),
            Slot::Packed(_) => {}
        }
    }
}

impl<K: Resource + Send + Sync + 'static> Default for Informer<K> {
    fn default() -> Informer<K> {
        Informer::new()
    }
}

/// One namespace's cached objects by name.
type Names<K> = HashMap<Box<str>, Slot<K>>;

/// The cache and handlers of one resource type.
pub struct Informer<K> {
    /// namespace ("" for cluster-scoped) → name → object.
    cache: RwLock<HashMap<String, Names<K>>>,
    handlers: RwLock<Vec<Handler<K>>>,
    synced: watch::Sender<bool>,
    pack: Option<Pack<K>>,
}

impl<K: Resource + Send + Sync + 'static> Informer<K> {
    /// An informer fed by the caller (see [`Informer::run`]), outside any factory: the kubelet
    /// watches only the pods bound to its node.
    pub fn new() -> Informer<K> {
        Informer {
            cache: RwLock::new(HashMap::new()),
            handlers: RwLock::new(Vec::new()),
            synced: watch::channel(false).0,
            pack: None,
        }
    }

    /// An informer that caches objects in the compact form `pack` makes (see [`Packed`]).
    /// Handlers still see whole objects; every read rebuilds one.
    pub fn packed(pack: Pack<K>) -> Informer<K> {
        Informer {
            pack: Some(pack),
            ..Informer::new()
        }
    }

    /// Call `f` for every change from now on. Handlers registered before the informers start
    /// see every object of the first list as an `Add`.
    pub fn on_change(&self, f: impl Fn(&Change<'_, K>) + Send + Sync + 'static) {
        self.handlers.write().push(Box::new(f));
    }

    /// The cached object `namespace/name` (namespace "" for cluster-scoped objects).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        Some(
            self.cache
                .read()
                .get(namespace)?
                .get(name)?
                .load(namespace, name),
        )
    }

    /// The cached object under a queue key (`namespace/name` or `name`).
    pub fn get_key(&self, key: &str) -> Option<Arc<K>> {
        let (ns, name) = crate::split_key(key);
        self.get(ns, name)
    }

    /// Every cached object in one namespace.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.cache
            .read()
            .get(namespace)
            .map(|m| m.iter().map(|(n, o)| o.load(namespace, n)).collect())
            .unwrap_or_default()
    }

    /// Every cached object.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.cache
            .read()
            .iter()
            .flat_map(|(ns, m)| m.iter().map(move |(n, o)| o.load(ns, n)))
            .collect()
    }

    /// Visit every cached object without cloning the list.
    pub fn for_each(&self, mut f: impl FnMut(&Arc<K>)) {
        for (ns, m) in self.cache.read().iter() {
            for (n, o) in m {
                f(&o.load(ns, n));
            }
        }
    }

    /// Visit every cached object in a namespace without cloning the list.
    pub fn for_each_in(&self, namespace: &str, mut f: impl FnMut(&Arc<K>)) {
        if let Some(m) = self.cache.read().get(namespace) {
            for (n, o) in m {
                f(&o.load(namespace, n));
            }
        }
    }

    /// [`Informer::for_each`] of the objects `pass` lets through, rebuilding only those:
    /// `pass` sees an object's packed form (one kept whole is always visited), so a filter
    /// on what the packed form tells spares rebuilding the rest.
    pub fn for_each_passing(
        &self,
        pass: impl Fn(&dyn Packed<K>) -> bool,
        mut f: impl FnMut(&Arc<K>),
    ) {
        for (ns, m) in self.cache.read().iter() {
            visit_passing(ns, m, &pass, &mut f);
        }
    }

    /// [`Informer::for_each_in`] of the objects `pass` lets through (see
    /// [`Informer::for_each_passing`]).
    pub fn for_each_in_passing(
        &self,
        namespace: &str,
        pass: impl Fn(&dyn Packed<K>) -> bool,
        mut f: impl FnMut(&Arc<K>),
    ) {
        if let Some(m) = self.cache.read().get(namespace) {
            visit_passing(namespace, m, &pass, &mut f);
        }
    }

    /// How many objects are cached in one namespace (without reading them).
    pub fn len_in(&self, namespace: &str) -> usize {
        self.cache.read().get(namespace).map_or(0, HashMap::len)
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.cache.read().values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the first list has been taken into the cache.
    pub fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Wait until the first list has been taken into the cache.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    fn notify(&self, change: Change<'_, K>) {
        for h in self.handlers.read().iter() {
            h(&change);
        }
    }

    fn put(&self, obj: K) {
        let ns = obj.meta().namespace.clone().unwrap_or_default();
        let name = obj.meta().name.clone().unwrap_or_default();
        let new = Arc::new(obj);
        let slot = match self.pack {
            Some(pack) => Slot::Packed(pack(&new)),
            None => Slot::Full(new.clone()),
        };
        let old = self
            .cache
            .write()
            .entry(ns.clone())
            .or_default()
            .insert(name.as_str().into(), slot);
        match old {
            Some(old) => self.notify(Change::Update {
                old: &old.load(&ns, &name),
                new: &new,
            }),
            None => self.notify(Change::Add(&new)),
        }
    }

    fn remove(&self, namespace: &str, name: &str) {
        let old = {
            let mut cache = self.cache.write();
            let old = cache.get_mut(namespace).and_then(|m| m.remove(name));
            if cache.get(namespace).is_some_and(HashMap::is_empty) {
                cache.remove(namespace);
            }
            old
        };
        if let Some(old) = old {
            self.notify(Change::Delete(&old.load(namespace, name)));
        }
    }

    /// Feed the informer from a watcher stream until the stream ends. `transform` trims each
    /// object before it is cached (managedFields are always dropped).
    pub async fn run<S>(self: Arc<Self>, stream: S, transform: Option<fn(&mut K)>)
    where
        S: Stream<Item = Result<Event<K>, watcher::Error>> + Send,
    {
        let mut stream = std::pin::pin!(stream);
        // Names seen during a (re)list: objects cached before it but not in it were deleted.
        let mut listing: Option<HashMap<String, Vec<String>>> = None;
        let trim = |mut o: K| {
            o.meta_mut().managed_fields = None;
            if let Some(t) = transform {
                t(&mut o);
            }
            o
        };
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Init) => listing = Some(HashMap::new()),
                Ok(Event::InitApply(o)) => {
                    if let Some(l) = listing.as_mut() {
                        l.entry(o.meta().namespace.clone().unwrap_or_default())
                            .or_default()
                            .push(o.meta().name.clone().unwrap_or_default());
                    }
                    self.put(trim(o));
                }
                Ok(Event::InitDone) => {
                    if let Some(seen) = listing.take() {
                        let gone: Vec<(String, String)> = {
                            let cache = self.cache.read();
                            let mut gone = Vec::new();
                            for (ns, m) in cache.iter() {
                                let names: std::collections::HashSet<&str> = seen
                                    .get(ns)
                                    .map(|v| v.iter().map(String::as_str).collect())
                                    .unwrap_or_default();
                                for name in m.keys() {
                                    if !names.contains(&**name) {
                                        gone.push((ns.clone(), name.to_string()));
                                    }
                                }
                            }
                            gone
                        };
                        for (ns, name) in gone {
                            self.remove(&ns, &name);
                        }
                    }
                    self.synced.send_replace(true);
                }
                Ok(Event::Apply(o)) => self.put(trim(o)),
                Ok(Event::Delete(o)) => {
                    let ns = o.meta().namespace.clone().unwrap_or_default();
                    self.remove(&ns, &o.name_any());
                }
                Err(e) => {
                    tracing::debug!(error = %e, "informer watch failed; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        }
    }
}

/// A function that trims objects of one type before they are cached.
pub type Transform<K> = fn(&mut K);

/// The process's informers, one per resource type, started together.
pub struct Informers {
    client: Client,
    map: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    pending: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
    transforms: Mutex<HashMap<TypeId, Box<dyn Any + Send>>>,
    packs: Mutex<HashMap<TypeId, Box<dyn Any + Send>>>,
    started: AtomicBool,
}

impl Informers {
    pub fn new(client: Client) -> Arc<Informers> {
        Arc::new(Informers {
            client,
            map: Mutex::new(HashMap::new()),
            pending: Mutex::new(Vec::new()),
            transforms: Mutex::new(HashMap::new()),
            packs: Mutex::new(HashMap::new()),
            started: AtomicBool::new(false),
        })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Trim objects of type `K` with `f` before caching them (call before the first `get`).
    pub fn set_transform<K: 'static>(&self, f: Transform<K>) {
        self.transforms
            .lock()
            .insert(TypeId::of::<K>(), Box::new(f));
    }

    /// Cache objects of type `K` in the compact form `f` makes (call before the first `get`;
    /// see [`Packed`]).
    pub fn set_packing<K: 'static>(&self, f: Pack<K>) {
        self.packs.lock().insert(TypeId::of::<K>(), Box::new(f));
    }

    /// The shared informer of `K`, created on first use. It starts with [`Informers::start`]
    /// (or at once, if that has already been called).
    pub fn get<K>(&self) -> Arc<Informer<K>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let mut map = self.map.lock();
        if let Some(i) = map.get(&TypeId::of::<K>()) {
            return i.clone().downcast::<Informer<K>>().expect("informer type");
        }
        let pack = self
            .packs
            .lock()
            .get(&TypeId::of::<K>())
            .and_then(|p| p.downcast_ref::<Pack<K>>().copied());
        let informer = Arc::new(match pack {
            Some(pack) => Informer::<K>::packed(pack),
            None => Informer::<K>::new(),
        });
        map.insert(TypeId::of::<K>(), informer.clone());
        drop(map);
        let transform = self
            .transforms
            .lock()
            .get(&TypeId::of::<K>())
            .and_then(|t| t.downcast_ref::<Transform<K>>().copied());
        let api: Api<K> = Api::all(self.client.clone());
        let i = informer.clone();
        let start = move || {
            let stream = watcher::watcher(api, watcher::Config::default().any_semantic());
            tokio::spawn(i.run(stream, transform));
        };
        if self.started.load(Ordering::SeqCst) {
            start();
        } else {
            self.pending.lock().push(Box::new(start));
        }
        informer
    }

    /// Start every informer asked for so far; later ones start when first asked for.
    pub fn start(&self) {
        self.started.store(true, Ordering::SeqCst);
        for f in self.pending.lock().drain(..) {
            f();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    /// Keeps a ConfigMap's data alone (its name and namespace come back from the keys).
    struct DataOnly(Option<std::collections::BTreeMap<String, String>>);

    impl Packed<ConfigMap> for DataOnly {
        fn unpack(&self, namespace: &str, name: &str) -> ConfigMap {
            ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some(namespace.into()),
                    ..Default::default()
                },
                data: self.0.clone(),
                ..Default::default()
            }
        }
    }

    fn cm(name: &str, v: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            data: Some([("k".to_string(), v.to_string())].into()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_packed_informer_reads_back_what_it_packed() {
        let inf = Arc::new(Informer::<ConfigMap>::packed(|c| {
            Box::new(DataOnly(c.data.clone()))
        }));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        inf.on_change(move |c| {
            let v = |o: &ConfigMap| o.data.as_ref().unwrap()["k"].clone();
            s.lock().push(match c {
                Change::Add(o) => format!("add {}", v(o)),
                Change::Update { old, new } => format!("update {} -> {}", v(old), v(new)),
                Change::Delete(o) => format!("delete {}", v(o)),
            });
        });
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a", "1"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(cm("a", "2"))),
            Ok(Event::Apply(cm("b", "3"))),
            Ok(Event::Delete(cm("b", "3"))),
        ];
        inf.clone().run(futures::stream::iter(events), None).await;
        assert_eq!(
            *seen.lock(),
            ["add 1", "update 1 -> 2", "add 3", "delete 3"]
        );
        let a = inf.get("ns", "a").unwrap();
        assert_eq!(a.metadata.name.as_deref(), Some("a"));
        assert_eq!(a.data.as_ref().unwrap()["k"], "2");
        assert_eq!(inf.list_namespace("ns").len(), 1);
        let mut n = 0;
        inf.for_each(|_| n += 1);
        assert_eq!(n, 1);
        assert_eq!((inf.len_in("ns"), inf.len_in("other")), (1, 0));
    }

    #[tokio::test]
    async fn a_filter_on_the_packed_form_rebuilds_only_what_passes() {
        let inf = Arc::new(Informer::<ConfigMap>::packed(|c| {
            Box::new(DataOnly(c.data.clone()))
        }));
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a", "keep"))),
            Ok(Event::InitApply(cm("b", "skip"))),
            Ok(Event::InitApply(cm("c", "keep"))),
            Ok(Event::InitDone),
        ];
        inf.clone().run(futures::stream::iter(events), None).await;
        let looked = std::sync::atomic::AtomicUsize::new(0);
        let pass = |p: &dyn Packed<ConfigMap>| {
            looked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let d = (p as &dyn std::any::Any)
                .downcast_ref::<DataOnly>()
                .unwrap();
            d.0.as_ref().unwrap()["k"] == "keep"
        };
        let mut names = Vec::new();
        inf.for_each_in_passing("ns", pass, |o| names.push(o.metadata.name.clone().unwrap()));
        names.sort();
        assert_eq!(names, ["a", "c"]);
        let mut all = 0;
        inf.for_each_passing(pass, |_| all += 1);
        assert_eq!(all, 2);
        assert_eq!(looked.load(std::sync::atomic::Ordering::Relaxed), 6);
        inf.for_each_in_passing("other", pass, |_| panic!("nothing cached there"));
        // Objects kept whole are always visited.
        let whole = Arc::new(Informer::<ConfigMap>::new());
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a", "skip"))),
            Ok(Event::InitDone),
        ];
        whole.clone().run(futures::stream::iter(events), None).await;
        let mut n = 0;
        whole.for_each_passing(|_| false, |_| n += 1);
        assert_eq!(n, 1);
    }
}
