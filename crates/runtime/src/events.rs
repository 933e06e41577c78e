//! Events as Kubernetes' controllers record them (core/v1 Events through client-go's legacy
//! recorder, which `kubectl describe` and `kubectl get events` show). Recording never blocks
//! a controller: events go through a bounded buffer (dropped when the API is slower than the
//! controllers, as Kubernetes drops them) and a repeat of the same event within ten minutes
//! raises the first one's `count` and `lastTimestamp` instead of creating another.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde_json::json;
use tokio::sync::mpsc;

const AGGREGATE_WINDOW: Duration = Duration::from_secs(10 * 60);
const BUFFER: usize = 10_000;
/// Kubernetes' spam filter: per object, a burst of 25 events, then one per five minutes.
const SPAM_BURST: f64 = 25.0;
const SPAM_REFILL: Duration = Duration::from_secs(300);

/// `Normal` or `Warning`, as Kubernetes' event types.
pub const NORMAL: &str = "Normal";
pub const WARNING: &str = "Warning";

struct Record {
    regarding: ObjectReference,
    type_: &'static str,
    reason: String,
    message: String,
}

/// Records events for one component (`source.component`, e.g. `replicaset-controller`).
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Record>,
}

impl Recorder {
    /// Start a recorder writing through `client`.
    pub fn new(client: Client, component: &str) -> Recorder {
        Recorder::with_host(client, component, &hostname())
    }

    /// Start a recorder whose events name `host` as their `source.host` (the kubelet: its node).
    pub fn with_host(client: Client, component: &str, host: &str) -> Recorder {
        let (tx, rx) = mpsc::channel(BUFFER);
        tokio::spawn(write(client, component.to_string(), host.to_string(), rx));
        Recorder { tx }
    }

    /// Record an event about `regarding` (see [`object_ref`]).
    pub fn record(
        &self,
        regarding: ObjectReference,
        type_: &'static str,
        reason: &str,
        message: impl Into<String>,
    ) {
        let _ = self.tx.try_send(Record {
            regarding,
            type_,
            reason: reason.to_string(),
            message: message.into(),
        });
    }

    /// Record a `Normal` event about an object.
    pub fn normal<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.record(object_ref(obj), NORMAL, reason, message);
    }

    /// Record a `Warning` event about an object.
    pub fn warning<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.record(object_ref(obj), WARNING, reason, message);
    }
}

/// The reference to `obj` an event carries in `involvedObject`.
pub fn object_ref<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    let m = obj.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        namespace: m.namespace.clone(),
        name: m.name.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        ..Default::default()
    }
}

/// This machine's name (the events' `source.host`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

async fn write(client: Client, component: String, host: String, mut rx: mpsc::Receiver<Record>) {
    // (namespace, involved uid, type, reason, message) → (event name, count, first seen)
    type Seen = HashMap<(String, String, &'static str, String, String), (String, i32, Instant)>;
    let mut seen: Seen = HashMap::new();
    // involved uid → (tokens, last refill)
    let mut buckets: HashMap<String, (f64, Instant)> = HashMap::new();
    let mut last_sweep = Instant::now();
    while let Some(r) = rx.recv().await {
        let now = Instant::now();
        if now.duration_since(last_sweep) > AGGREGATE_WINDOW {
            seen.retain(|_, v| now.duration_since(v.2) < AGGREGATE_WINDOW);
            buckets.retain(|_, b| now.duration_since(b.1) < SPAM_REFILL * 25);
            last_sweep = now;
        }
        let uid = r.regarding.uid.clone().unwrap_or_default();
        let bucket = buckets.entry(uid).or_insert((SPAM_BURST, now));
        let refill = now.duration_since(bucket.1).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        bucket.0 = (bucket.0 + refill).min(SPAM_BURST);
        bucket.1 = now;
        if bucket.0 < 1.0 {
            continue;
        }
        bucket.0 -= 1.0;
        let ns = r
            .regarding
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(client.clone(), &ns);
        let key = (
            ns.clone(),
            r.regarding.uid.clone().unwrap_or_default(),
            r.type_,
            r.reason.clone(),
            r.message.clone(),
        );
        let ts = Time(k8s_openapi::jiff::Timestamp::now());
        if let Some((name, count, at)) = seen.get_mut(&key) {
            if now.duration_since(*at) < AGGREGATE_WINDOW {
                *count += 1;
                let patch = json!({"count": *count, "lastTimestamp": ts});
                if api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .is_ok()
                {
                    continue;
                }
            }
        }
        let base = r.regarding.name.clone().unwrap_or_else(|| "event".into());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!("{base}.{nanos:x}");
        let ev = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: r.regarding,
            reason: Some(r.reason),
            message: Some(r.message),
            type_: Some(r.type_.to_string()),
            source: Some(EventSource {
                component: Some(component.clone()),
                host: None,
            }),
            first_timestamp: Some(ts.clone()),
            last_timestamp: Some(ts),
            count: Some(1),
            reporting_component: Some(component.clone()),
            reporting_instance: Some(host.clone()),
            ..Default::default()
        };
        match api.create(&PostParams::default(), &ev).await {
            Ok(_) => {
                seen.insert(key, (name, 1, now));
            }
            Err(e) => tracing::debug!(error = %e, "event not recorded"),
        }
    }
}
