//! Pod workers: run each pod bound to this node through the CRI runtime and report its status.
//!
//! [`start`] registers handlers on [`Kubelet::pods`] that only hand the newest pod to its
//! worker ([`worker`], one task per pod UID). A worker syncs its pod — status
//! ([`status`], written by [`manager`]), volumes, then the runtime ([`actions`] decides,
//! [`sync`] acts: sandbox ([`sandbox`]), images ([`images`]), containers ([`container`])) —
//! and, once the pod is deleted or finished, stops it and reports its final status. A relist
//! of the runtime ([`pleg`]) wakes the workers whose containers changed and removes what
//! belongs to no known pod.

use std::sync::Arc;
use std::time::Duration;

use capstan_runtime::Change;
use k8s_openapi::api::core::v1::Pod;

use crate::Kubelet;

pub mod actions;
pub mod admission;
pub mod backoff;
pub mod container;
pub mod images;
pub mod manager;
pub mod pleg;
pub mod resources;
pub mod runtime;
pub mod sandbox;
pub mod status;
pub mod sync;
pub mod util;
pub mod worker;

#[cfg(test)]
mod tests;

pub use manager::Manager;

/// Start the pod manager: a worker per pod, fed by [`Kubelet::pods`].
pub fn start(k: Arc<Kubelet>) {
    start_with(Manager::new(k));
}

/// Start with a given manager (tests use fake probers).
pub fn start_with(m: Arc<Manager>) {
    {
        let m = m.clone();
        m.k.pods.clone().on_change(move |c| match c {
            // Mirror pods stand for static pods: they only wake the static pod's worker.
            Change::Add(p) | Change::Update { new: p, .. } | Change::Delete(p)
                if crate::static_pods::is_mirror(p) =>
            {
                crate::static_pods::mirror_changed(&m, p)
            }
            Change::Add(p) | Change::Update { new: p, .. } => ensure_worker(&m, p),
            Change::Delete(p) => m.wake(util::pod_uid(p)),
        });
    }
    // Pods the informer took before the handler was registered.
    for p in m.k.pods.list() {
        if !crate::static_pods::is_mirror(&p) {
            ensure_worker(&m, &p);
        }
    }
    // Static pods get their workers before the first relist (which removes what belongs to
    // no known pod).
    crate::static_pods::start(&m);
    tokio::spawn(pleg::run(m.clone()));
    tokio::spawn(housekeeping(m));
}

/// Hand the newest pod to its worker, starting one for a new UID.
pub(crate) fn ensure_worker(m: &Arc<Manager>, pod: &Arc<Pod>) {
    let uid = util::pod_uid(pod);
    if uid.is_empty() {
        return;
    }
    m.informer_has(pod);
    let mut workers = m.workers.lock();
    if let Some(w) = workers.get(uid) {
        w.update(pod.clone());
        return;
    }
    let w = worker::Worker::with_source(pod.clone(), m.statics.contains(uid));
    workers.insert(uid.to_string(), w.clone());
    drop(workers);
    tokio::spawn(worker::run(m.clone(), w));
}

/// Forget stale back-off entries now and then.
async fn housekeeping(m: Arc<Manager>) {
    loop {
        tokio::time::sleep(Duration::from_secs(60)).await;
        m.crash.lock().gc(util::now_nanos());
    }
}
