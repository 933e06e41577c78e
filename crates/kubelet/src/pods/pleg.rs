//! The pod lifecycle event generator: every second, list the runtime's sandboxes and
//! containers, wake the workers of pods whose containers changed (a container exited, a
//! sandbox died), and remove runtime objects that belong to no pod the kubelet knows.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use capstan_cri::v1 as cri;

use super::manager::Manager;
use super::runtime::{
    pod_status, ANN_POD_DELETION_GRACE, ANN_POD_TERMINATION_GRACE, LABEL_POD_NAME,
    LABEL_POD_NAMESPACE, LABEL_POD_UID,
};
use super::util::pod_uid;
use super::worker::{remove_pod_dir, remove_runtime_objects};

const RELIST_PERIOD: Duration = Duration::from_secs(1);

/// What the runtime has per pod UID: (object ID, state) of its sandboxes and containers.
type Snapshot = HashMap<String, Vec<(String, i32)>>;

/// Where a leftover pod's logs went (from its sandbox labels).
#[derive(Clone, Default)]
struct Leftover {
    namespace: String,
    name: String,
}

async fn snapshot(m: &Manager) -> Option<(Snapshot, HashMap<String, Leftover>)> {
    let sandboxes =
        m.k.runtime
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
            .await
            .ok()?
            .items;
    let containers =
        m.k.runtime
            .list_containers(cri::ListContainersRequest { filter: None })
            .await
            .ok()?
            .containers;
    let mut snap: Snapshot = HashMap::new();
    let mut names = HashMap::new();
    for sb in sandboxes {
        let Some(uid) = sb.labels.get(LABEL_POD_UID) else {
            continue;
        };
        names.insert(
            uid.clone(),
            Leftover {
                namespace: sb
                    .labels
                    .get(LABEL_POD_NAMESPACE)
                    .cloned()
                    .unwrap_or_default(),
                name: sb.labels.get(LABEL_POD_NAME).cloned().unwrap_or_default(),
            },
        );
        snap.entry(uid.clone())
            .or_default()
            .push((sb.id.clone(), 100 + sb.state));
    }
    for c in containers {
        let Some(uid) = c.labels.get(LABEL_POD_UID) else {
            continue;
        };
        snap.entry(uid.clone())
            .or_default()
            .push((c.id.clone(), c.state));
    }
    for v in snap.values_mut() {
        v.sort();
    }
    Some((snap, names))
}

/// Relist forever.
pub async fn run(m: Arc<Manager>) {
    let mut prev: Snapshot = HashMap::new();
    loop {
        tokio::time::sleep(RELIST_PERIOD).await;
        let Some((now, names)) = snapshot(&m).await else {
            continue;
        };
        for (uid, objs) in &now {
            if prev.get(uid) != Some(objs) {
                m.wake(uid);
            }
        }
        for uid in prev.keys() {
            if !now.contains_key(uid) {
                m.wake(uid);
            }
        }
        if m.k.pods.has_synced() {
            let known: HashSet<String> =
                m.k.pods
                    .list()
                    .iter()
                    .map(|p| pod_uid(p).to_string())
                    .collect();
            for uid in now.keys() {
                if known.contains(uid) || m.workers.lock().contains_key(uid) {
                    continue;
                }
                if !m.cleaning.lock().insert(uid.clone()) {
                    continue;
                }
                let m = m.clone();
                let uid = uid.clone();
                let left = names.get(&uid).cloned().unwrap_or_default();
                tokio::spawn(async move {
                    remove_orphan(&m, &uid, &left).await;
                    m.cleaning.lock().remove(&uid);
                });
            }
        }
        prev = now;
    }
}

/// Stop and remove what the runtime runs for a pod the kubelet does not know (deleted
/// while the kubelet was away), with the grace period recorded on its containers.
async fn remove_orphan(m: &Manager, uid: &str, left: &Leftover) {
    let Ok(rp) = pod_status(&*m.k.runtime, uid).await else {
        return;
    };
    tracing::info!(pod_uid = %uid, pod = %left.name, "removing the runtime objects of an unknown pod");
    for c in rp.running() {
        let ann: BTreeMap<String, String> =
            m.k.runtime
                .container_status(cri::ContainerStatusRequest {
                    container_id: c.id.clone(),
                    verbose: false,
                })
                .await
                .ok()
                .and_then(|r| r.status)
                .map(|s| s.annotations.into_iter().collect())
                .unwrap_or_default();
        let grace = ann
            .get(ANN_POD_DELETION_GRACE)
            .or_else(|| ann.get(ANN_POD_TERMINATION_GRACE))
            .and_then(|g| g.parse::<i64>().ok())
            .unwrap_or(2)
            .clamp(2, 30);
        let _ =
            m.k.runtime
                .stop_container(cri::StopContainerRequest {
                    container_id: c.id.clone(),
                    timeout: grace,
                })
                .await;
        m.probes.container_stopped(&c.id);
    }
    remove_runtime_objects(m, &rp).await;
    if !left.namespace.is_empty() && !left.name.is_empty() {
        let _ = std::fs::remove_dir_all(
            m.k.opts
                .pod_logs_dir
                .join(format!("{}_{}_{}", left.namespace, left.name, uid)),
        );
    }
    if crate::volumes::cleanup(&m.k, uid).await.is_ok() {
        remove_pod_dir(m, uid);
    }
}
