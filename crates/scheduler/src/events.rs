//! Events as the scheduler reports them (events.k8s.io/v1, like Kubernetes' event broadcaster):
//! recording never blocks the scheduling loop; a bounded buffer drops events when the API is
//! slower than the scheduler (Kubernetes drops them too), and a repeat of the same event within
//! six minutes updates the first one's `series` instead of creating another.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::mpsc;

use crate::types::PodInfo;

/// How long a repeated event is folded into the first one's series.
const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
const BUFFER: usize = 10_000;
/// Events written at once. One, as client-go's legacy recorder (Kubernetes' controllers')
/// writes them, and ours (`capstan_runtime::events`): the writer must not take from the
/// scheduling loop and its bindings the CPU a burst of pods needs. Under such a burst events
/// trail the bindings (by a few seconds for 10,000 pods) and are all written once it is over,
/// up to `BUFFER` queued.
const CONCURRENCY: usize = 1;

/// One event to record.
#[derive(Debug, Clone)]
pub struct Record {
    pub regarding: ObjectReference,
    pub type_: &'static str,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

impl Record {
    /// An event about a pod.
    pub fn pod(
        pod: &PodInfo,
        type_: &'static str,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) -> Record {
        Record {
            regarding: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(pod.namespace().to_string()),
                name: Some(pod.name().to_string()),
                uid: pod.metadata().uid.clone(),
                resource_version: pod.metadata().resource_version.clone(),
                ..Default::default()
            },
            type_,
            reason,
            action,
            note,
        }
    }
}

/// Hands events to the background writer.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Record>,
}

impl Recorder {
    /// Start the writer. `controller` is e.g. "default-scheduler"; `instance` names this process.
    pub fn start(client: Client, controller: String, instance: String) -> Recorder {
        let (tx, rx) = mpsc::channel(BUFFER);
        tokio::spawn(write_events(client, controller, instance, rx));
        Recorder { tx }
    }

    /// A recorder that drops everything (tests, benchmarks of the loop alone).
    pub fn discard() -> Recorder {
        let (tx, _) = mpsc::channel(1);
        Recorder { tx }
    }

    pub fn record(&self, r: Record) {
        if self.tx.try_send(r).is_err() {
            tracing::debug!("event buffer full or closed; dropping event");
        }
    }
}

struct Seen {
    namespace: String,
    name: String,
    count: i32,
    first: Instant,
}

/// The events recorded within the last [`SERIES_WINDOW`], by what makes two of them the same
/// (object, reason, action, note), with their expiry in the order they were created: expiring
/// costs only the entries that expire, not a pass over all of them per event (with 10,000 pods
/// scheduled that pass was most of the event writer's CPU).
#[derive(Default)]
struct SeriesCache {
    seen: HashMap<String, Seen>,
    order: VecDeque<(Instant, String)>,
}

impl SeriesCache {
    fn expire(&mut self, now: Instant) {
        while let Some((first, _)) = self.order.front() {
            if now.saturating_duration_since(*first) < SERIES_WINDOW {
                break;
            }
            let Some((first, key)) = self.order.pop_front() else {
                break;
            };
            // The key may have expired and been recorded again since: keep the newer one.
            if self.seen.get(&key).is_some_and(|s| s.first == first) {
                self.seen.remove(&key);
            }
        }
    }

    /// Count a repeat of `key`: the series' event (namespace, name) and its new count, or None
    /// when the event has not been recorded within the window.
    fn repeat(&mut self, key: &str, now: Instant) -> Option<(String, String, i32)> {
        self.expire(now);
        self.seen.get_mut(key).map(|s| {
            s.count += 1;
            (s.namespace.clone(), s.name.clone(), s.count)
        })
    }

    fn insert(&mut self, key: String, namespace: String, name: String, now: Instant) {
        self.order.push_back((now, key.clone()));
        self.seen.insert(
            key,
            Seen {
                namespace,
                name,
                count: 1,
                first: now,
            },
        );
    }
}

async fn write_events(
    client: Client,
    controller: String,
    instance: String,
    rx: mpsc::Receiver<Record>,
) {
    let seen: std::sync::Mutex<SeriesCache> = Default::default();
    let stream = tokio_stream_from(rx);
    stream
        .for_each_concurrent(CONCURRENCY, |r| {
            let client = client.clone();
            let (controller, instance) = (controller.clone(), instance.clone());
            let seen = &seen;
            async move {
                let ns = r.regarding.namespace.clone().unwrap_or_else(|| "default".into());
                let api: Api<Event> = Api::namespaced(client, &ns);
                let key = format!(
                    "{}\x00{}\x00{}\x00{}",
                    r.regarding.uid.as_deref().unwrap_or(""),
                    r.reason,
                    r.action,
                    r.note
                );
                let now = chrono_now();
                let repeat = {
                    let mut m = seen.lock().unwrap_or_else(|e| e.into_inner());
                    m.repeat(&key, Instant::now())
                };
                if let Some((ns, name, count)) = repeat {
                    let patch = serde_json::json!({"series": {"count": count, "lastObservedTime": MicroTime(now)}});
                    let api: Api<Event> = Api::namespaced(api.into_client(), &ns);
                    if let Err(e) = api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                        tracing::debug!(error = %e, "updating event series");
                    }
                    return;
                }
                let name = format!(
                    "{}.{:x}",
                    r.regarding.name.as_deref().unwrap_or("object"),
                    unix_nanos()
                );
                let ev = Event {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns.clone()),
                        ..Default::default()
                    },
                    event_time: Some(MicroTime(now)),
                    reporting_controller: Some(controller),
                    reporting_instance: Some(instance),
                    action: Some(r.action.into()),
                    reason: Some(r.reason.into()),
                    regarding: Some(r.regarding),
                    note: Some(r.note),
                    type_: Some(r.type_.into()),
                    series: None::<EventSeries>,
                    ..Default::default()
                };
                // The answer is not read: only whether the write succeeded.
                let create = serde_json::to_vec(&ev)
                    .map_err(kube::Error::SerdeError)
                    .and_then(|body| {
                        kube::core::Request::new(api.resource_url())
                            .create(&PostParams::default(), body)
                            .map_err(kube::Error::BuildRequest)
                    });
                let written = match create {
                    Ok(req) => api.into_client().request_text(req).await.map(|_| ()),
                    Err(e) => Err(e),
                };
                match written {
                    Ok(()) => {
                        let mut m = seen.lock().unwrap_or_else(|e| e.into_inner());
                        m.insert(key, ns, name, Instant::now());
                    }
                    Err(e) => tracing::debug!(error = %e, "recording event"),
                }
            }
        })
        .await;
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The current time as k8s-openapi's timestamp type.
pub fn chrono_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_within_the_window_counts_into_the_first_events_series() {
        let t0 = Instant::now();
        let mut c = SeriesCache::default();
        assert_eq!(c.repeat("a", t0), None);
        c.insert("a".into(), "ns".into(), "p.1".into(), t0);
        c.insert(
            "b".into(),
            "ns".into(),
            "q.1".into(),
            t0 + Duration::from_secs(60),
        );
        assert_eq!(
            c.repeat("a", t0 + Duration::from_secs(1)),
            Some(("ns".into(), "p.1".into(), 2))
        );
        assert_eq!(
            c.repeat("a", t0 + Duration::from_secs(2)),
            Some(("ns".into(), "p.1".into(), 3))
        );
        // Six minutes after the first, "a" expires and "b" (a minute younger) does not.
        let later = t0 + SERIES_WINDOW;
        assert_eq!(c.repeat("a", later), None);
        assert_eq!(c.repeat("b", later), Some(("ns".into(), "q.1".into(), 2)));
        assert_eq!(c.seen.len(), 1);
        assert_eq!(c.order.len(), 1);
    }

    #[test]
    fn an_event_created_twice_at_once_expires_with_its_later_copy() {
        // Two writers saw no series for "a" and both created an event: the later one is kept,
        // and the earlier one's expiry does not remove it.
        let t0 = Instant::now();
        let mut c = SeriesCache::default();
        c.insert("a".into(), "ns".into(), "p.1".into(), t0);
        c.insert(
            "a".into(),
            "ns".into(),
            "p.2".into(),
            t0 + Duration::from_secs(10),
        );
        let t1 = t0 + SERIES_WINDOW + Duration::from_secs(1);
        assert_eq!(c.repeat("a", t1), Some(("ns".into(), "p.2".into(), 2)));
        assert_eq!(c.order.len(), 1);
        assert_eq!(c.repeat("a", t1 + Duration::from_secs(10)), None);
        assert!(c.seen.is_empty() && c.order.is_empty());
    }
}
