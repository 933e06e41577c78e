//! Monitors: one metadata-only list-watch per deletable resource, feeding the graph's changes
//! (Kubernetes' GraphBuilder monitors over metadata informers).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Api, Client};
use tokio::sync::mpsc;

use super::graph::{Event, EventType, Meta, Owners};
use crate::intern::Token;

/// A running monitor.
pub struct Monitor {
    handle: tokio::task::JoinHandle<()>,
    synced: Arc<AtomicBool>,
}

impl Monitor {
    /// Start watching `ar`, sending its changes to `changes`.
    pub fn start(
        client: Client,
        ar: ApiResource,
        changes: mpsc::UnboundedSender<Event>,
    ) -> Monitor {
        let synced = Arc::new(AtomicBool::new(false));
        let handle = tokio::spawn(run(client, ar, changes, synced.clone()));
        Monitor { handle, synced }
    }

    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// What a monitor remembers of an object, under its namespace and name: what the graph needs
/// to tell a real change from a resync, and to report a delete or an update's old state.
/// Kept small because there is one per object in the cluster (100,000 pods).
struct Seen {
    uid: Token,
    owners: Owners,
    finalizers: Box<[String]>,
    deleting: bool,
}

impl Seen {
    fn new(m: &Meta) -> Seen {
        Seen {
            uid: Token::new(&m.uid),
            owners: m.owners.clone(),
            finalizers: m.finalizers.clone().into(),
            deleting: m.deleting,
        }
    }

    /// The object's metadata as the graph takes it (without the resourceVersion, which the
    /// graph does not read).
    fn meta(&self, namespace: &str, name: &str) -> Meta {
        Meta {
            uid: self.uid.to_string(),
            name: name.to_string(),
            namespace: namespace.to_string(),
            owners: self.owners.clone(),
            finalizers: self.finalizers.to_vec(),
            deleting: self.deleting,
            resource_version: String::new(),
        }
    }
}

/// namespace → name → what was last sent.
#[derive(Default)]
struct Cache(HashMap<String, HashMap<Box<str>, Seen>>);

impl Cache {
    fn insert(&mut self, m: &Meta) -> Option<Meta> {
        let old = self
            .0
            .entry(m.namespace.clone())
            .or_default()
            .insert(m.name.as_str().into(), Seen::new(m));
        old.map(|o| o.meta(&m.namespace, &m.name))
    }

    fn remove(&mut self, namespace: &str, name: &str) -> Option<Meta> {
        let names = self.0.get_mut(namespace)?;
        let old = names.remove(name);
        if names.is_empty() {
            self.0.remove(namespace);
        }
        old.map(|o| o.meta(namespace, name))
    }
}

async fn run(
    client: Client,
    ar: ApiResource,
    changes: mpsc::UnboundedSender<Event>,
    synced: Arc<AtomicBool>,
) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &ar);
    let stream = watcher::watcher(api, watcher::Config::default().any_semantic());
    let mut stream = std::pin::pin!(stream);
    let mut cache = Cache::default();
    let mut listing: Option<HashSet<(String, String)>> = None;
    let mut backoff = Duration::from_millis(500);
    let send = |kind: EventType, obj: Meta, old: Option<Meta>| {
        let _ = changes.send(Event {
            virtual_: false,
            kind,
            api_version: ar.api_version.clone(),
            obj_kind: ar.kind.clone(),
            obj,
            old,
        });
    };
    let put = |cache: &mut Cache, m: Meta| match cache.insert(&m) {
        Some(old) if old.same_graph_state(&m) => {}
        // Another object under the same name: the old one was deleted meanwhile.
        Some(old) if old.uid != m.uid => {
            send(EventType::Delete, old, None);
            send(EventType::Add, m, None);
        }
        Some(old) => send(EventType::Update, m, Some(old)),
        None => send(EventType::Add, m, None),
    };
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(WatchEvent::Init) => listing = Some(HashSet::new()),
            Ok(WatchEvent::InitApply(o)) => {
                let m = Meta::from_object_meta(&o.metadata);
                if let Some(l) = listing.as_mut() {
                    l.insert((m.namespace.clone(), m.name.clone()));
                }
                put(&mut cache, m);
            }
            Ok(WatchEvent::InitDone) => {
                if let Some(seen) = listing.take() {
                    let gone: Vec<(String, String)> = cache
                        .0
                        .iter()
                        .flat_map(|(ns, names)| {
                            names.keys().map(move |n| (ns.clone(), n.to_string()))
                        })
                        .filter(|k| !seen.contains(k))
                        .collect();
                    for (ns, name) in gone {
                        if let Some(m) = cache.remove(&ns, &name) {
                            send(EventType::Delete, m, None);
                        }
                    }
                }
                synced.store(true, Ordering::SeqCst);
                backoff = Duration::from_millis(500);
            }
            Ok(WatchEvent::Apply(o)) => {
                put(&mut cache, Meta::from_object_meta(&o.metadata));
                backoff = Duration::from_millis(500);
            }
            Ok(WatchEvent::Delete(o)) => {
                let m = Meta::from_object_meta(&o.metadata);
                let last = cache.remove(&m.namespace, &m.name).unwrap_or(m);
                send(EventType::Delete, last, None);
            }
            Err(e) => {
                tracing::debug!(resource = %ar.plural, group = %ar.group, error = %e, "garbage collector monitor: watch failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}
