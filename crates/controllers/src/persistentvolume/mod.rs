//! The PersistentVolume controller (Kubernetes' pkg/controller/volume/persistentvolume,
//! `persistentvolume-binder`) and capstan's built-in local-path provisioner.
//!
//! - [`binder`]: binds claims to volumes (both ends: `PV.spec.claimRef` first, then
//!   `PVC.spec.volumeName`), keeps the phases (volumes Available/Bound/Released/Failed, claims
//!   Pending/Bound/Lost), assigns the default StorageClass to claims without one, hands claims
//!   of classes with an external provisioner to that provisioner (the
//!   `volume.kubernetes.io/storage-provisioner` annotations), and reclaims released volumes
//!   (Retain, Delete, Recycle).
//! - [`localpath`]: the provisioner of `capstan.dev/local-path` classes, as k3s's
//!   local-path-provisioner: a directory per claim under `--local-storage-dir`, a hostPath
//!   volume pre-bound to the claim, and the directory and volume deleted when a released
//!   volume's reclaim policy is Delete. It runs with the binder's client.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim};
use kube::Resource;
use parking_lot::Mutex;

use crate::Ctx;

mod binder;
mod localpath;
mod matching;

/// On a claim: the binding has been through its first setup.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// On a volume or claim: the controller, not the user, made the binding.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// On a volume: the provisioner that made it.
pub const ANN_DYNAMICALLY_PROVISIONED: &str = "pv.kubernetes.io/provisioned-by";
/// On a claim: the provisioner expected to make its volume.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// On a claim: the node the scheduler picked for its first consumer.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The deprecated storage class annotation of claims and volumes.
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
pub const ANN_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
pub const ANN_BETA_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";

/// The provisioner name of capstan's local-path StorageClasses.
pub const LOCAL_PATH_PROVISIONER: &str = "capstan.dev/local-path";

const FILESYSTEM: &str = "Filesystem";
const VOLUME_AVAILABLE: &str = "Available";
const VOLUME_BOUND: &str = "Bound";
const VOLUME_RELEASED: &str = "Released";
const VOLUME_FAILED: &str = "Failed";
const CLAIM_PENDING: &str = "Pending";
const CLAIM_BOUND: &str = "Bound";
const CLAIM_LOST: &str = "Lost";

/// Start the PersistentVolume binder and the local-path provisioner.
pub fn start_binder(ctx: &Ctx) {
    binder::start(ctx);
    localpath::start(ctx);
}

/// `namespace/name` of a claim.
fn claim_key(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or(""),
        claim.metadata.name.as_deref().unwrap_or("")
    )
}

/// The reference a volume's `claimRef` holds.
fn claim_ref(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: claim.metadata.namespace.clone(),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// How long an object this controller wrote may stand in for an informer that has not seen
/// the write yet.
const WRITTEN_TTL: Duration = Duration::from_secs(30);

/// The objects this controller wrote most recently, so that it does not act on the older
/// copies its informers may still hold (Kubernetes' binder keeps its own caches for this):
/// binding writes four objects in a row, and their events come back in any order.
struct Written<K> {
    m: Mutex<HashMap<String, (Arc<K>, Instant)>>,
}

fn revision<K: Resource>(o: &K) -> Option<u64> {
    o.meta().resource_version.as_deref()?.parse().ok()
}

impl<K: Resource> Written<K> {
    fn new() -> Written<K> {
        Written {
            m: Mutex::new(HashMap::new()),
        }
    }

    /// Remember `obj` (just returned by the API server) under `key`.
    fn store(&self, key: String, obj: K) -> Arc<K> {
        let obj = Arc::new(obj);
        self.m.lock().insert(key, (obj.clone(), Instant::now()));
        obj
    }

    /// The newer of the informer's copy and the one written here.
    fn newest(&self, key: &str, cached: Option<Arc<K>>) -> Option<Arc<K>> {
        let mut m = self.m.lock();
        let Some((ours, at)) = m.get(key) else {
            return cached;
        };
        if at.elapsed() > WRITTEN_TTL {
            m.remove(key);
            return cached;
        }
        match &cached {
            Some(c) => match (revision(c.as_ref()), revision(ours.as_ref())) {
                (Some(theirs), Some(mine)) if mine > theirs => Some(ours.clone()),
                _ => {
                    m.remove(key);
                    cached
                }
            },
            None => Some(ours.clone()),
        }
    }

    fn forget(&self, key: &str) {
        self.m.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolume;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pv(rv: &str) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some("v".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn written_objects_stand_in_until_the_informer_catches_up() {
        let w = Written::new();
        assert!(w.newest("v", None).is_none());
        w.store("v".into(), pv("7"));
        let got = w.newest("v", Some(Arc::new(pv("5")))).unwrap();
        assert_eq!(got.metadata.resource_version.as_deref(), Some("7"));
        let got = w.newest("v", None).unwrap();
        assert_eq!(got.metadata.resource_version.as_deref(), Some("7"));
        let got = w.newest("v", Some(Arc::new(pv("8")))).unwrap();
        assert_eq!(got.metadata.resource_version.as_deref(), Some("8"));
        // Caught up: the written copy is dropped.
        assert!(w.newest("v", None).is_none());
        w.store("v".into(), pv("9"));
        w.forget("v");
        assert!(w.newest("v", None).is_none());
    }
}
