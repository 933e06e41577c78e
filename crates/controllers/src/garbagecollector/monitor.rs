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

use super::graph::{Event, EventType, Meta};

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

async fn run(
    client: Client,
    ar: ApiResource,
    changes: mpsc::UnboundedSender<Event>,
    synced: Arc<AtomicBool>,
) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &ar);
    let stream = watcher::watcher(api, watcher::Config::default().any_semantic());
    let mut stream = std::pin::pin!(stream);
    // namespace/name → what was last sent.
    let mut cache: HashMap<(String, String), Meta> = HashMap::new();
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
    let put = |cache: &mut HashMap<(String, String), Meta>, m: Meta| {
        let key = (m.namespace.clone(), m.name.clone());
        match cache.insert(key, m.clone()) {
            Some(old) if old.same_graph_state(&m) => {}
            // Another object under the same name: the old one was deleted meanwhile.
            Some(old) if old.uid != m.uid => {
                send(EventType::Delete, old, None);
                send(EventType::Add, m, None);
            }
            Some(old) => send(EventType::Update, m, Some(old)),
            None => send(EventType::Add, m, None),
        }
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
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        if let Some(m) = cache.remove(&k) {
                            let _ = changes.send(Event {
                                virtual_: false,
                                kind: EventType::Delete,
                                api_version: ar.api_version.clone(),
                                obj_kind: ar.kind.clone(),
                                obj: m,
                                old: None,
                            });
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
                let last = cache
                    .remove(&(m.namespace.clone(), m.name.clone()))
                    .unwrap_or(m);
                let _ = changes.send(Event {
                    virtual_: false,
                    kind: EventType::Delete,
                    api_version: ar.api_version.clone(),
                    obj_kind: ar.kind.clone(),
                    obj: last,
                    old: None,
                });
            }
            Err(e) => {
                tracing::debug!(resource = %ar.plural, group = %ar.group, error = %e, "garbage collector monitor: watch failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}
