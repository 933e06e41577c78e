//! The machinery every capstan control loop shares, as client-go provides it to Kubernetes'
//! components: shared informers (one list-watch per resource, a local cache, change handlers),
//! rate-limited work queues, an event recorder, and leader election through a Lease.

pub mod client;
pub mod events;
pub mod informer;
pub mod leader;
pub mod queue;

pub use events::Recorder;
pub use informer::{Change, Informer, Informers};
pub use queue::Queue;

/// `namespace/name`, or `name` for a cluster-scoped object: the key objects are queued under.
pub fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Split a key back into (namespace, name); the namespace is empty for cluster-scoped keys.
pub fn split_key(key: &str) -> (&str, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => ("", key),
    }
}
