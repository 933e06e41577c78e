//! The local-path provisioner (`capstan.dev/local-path`), an external provisioner as k3s's
//! local-path-provisioner is one, run inside the controller manager with the binder's
//! client.
//!
//! It provisions the claims the binder hands to it (the `volume.kubernetes.io/
//! storage-provisioner` annotation names it; for WaitForFirstConsumer classes only once the
//! claim has a selected node): a directory `<local storage dir>/pvc-<uid>_<namespace>_<name>`
//! and a hostPath PersistentVolume `pvc-<uid>` for it, as big as the claim asks, pre-bound to
//! the claim (the binder completes the binding), with node affinity to the selected node if
//! any. It deletes the directory and the volume once the binder has released a volume of its
//! own whose reclaim policy is Delete.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, Context};
use capstan_runtime::{Change, Informer, Queue, Recorder};
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

use super::binder::remove_all;
use super::matching::{annotation, claim_class, claim_request};
use super::*;
use crate::util;

const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

struct Provisioner {
    client: Client,
    dir: PathBuf,
    volumes: Arc<Informer<PersistentVolume>>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
    classes: Arc<Informer<StorageClass>>,
    nodes: Arc<Informer<Node>>,
    recorder: Recorder,
}

pub(super) fn start(ctx: &Ctx) {
    let p = Arc::new(Provisioner {
        client: ctx.client.clone(),
        dir: ctx.opts.local_storage_dir.clone(),
        volumes: ctx.informers.get::<PersistentVolume>(),
        claims: ctx.informers.get::<PersistentVolumeClaim>(),
        classes: ctx.informers.get::<StorageClass>(),
        nodes: ctx.informers.get::<Node>(),
        // External provisioners report as `<provisioner>_<identity>`.
        recorder: ctx.recorder(&format!(
            "{LOCAL_PATH_PROVISIONER}_{}",
            capstan_runtime::events::hostname()
        )),
    });
    // Keys: `namespace/name` for a claim to provision, a bare name for a volume to delete.
    let queue = Queue::new("local-path-provisioner");
    let q = queue.clone();
    p.claims.on_change(move |c| {
        if let Change::Add(o) | Change::Update { new: o, .. } = c {
            if asks_us(o) {
                q.add(claim_key(o));
            }
        }
    });
    let q = queue.clone();
    p.volumes.on_change(move |c| {
        if let Change::Add(o) | Change::Update { new: o, .. } = c {
            if should_delete(o) {
                if let Some(name) = o.metadata.name.as_deref() {
                    q.add(name);
                }
            }
        }
    });
    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        p.volumes.wait_synced().await;
        p.claims.wait_synced().await;
        p.classes.wait_synced().await;
        p.nodes.wait_synced().await;
        queue.run_workers(workers, move |key| {
            let p = p.clone();
            async move {
                if key.contains('/') {
                    p.provision(&key).await
                } else {
                    p.delete(&key).await
                }
            }
        });
    });
}

/// An unbound claim whose provisioner is this one.
fn asks_us(claim: &PersistentVolumeClaim) -> bool {
    let unbound = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_none_or(str::is_empty);
    let provisioner = annotation(&claim.metadata, ANN_STORAGE_PROVISIONER)
        .or_else(|| annotation(&claim.metadata, ANN_BETA_STORAGE_PROVISIONER));
    unbound && provisioner == Some(LOCAL_PATH_PROVISIONER)
}

/// A released volume of this provisioner with the Delete reclaim policy.
fn should_delete(volume: &PersistentVolume) -> bool {
    volume.metadata.deletion_timestamp.is_none()
        && volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(VOLUME_RELEASED)
        && volume
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
            == Some("Delete")
        && annotation(&volume.metadata, ANN_DYNAMICALLY_PROVISIONED) == Some(LOCAL_PATH_PROVISIONER)
}

/// The directory of a claim's volume: `pvc-<uid>_<namespace>_<name>` (k3s's layout).
fn volume_dir(base: &Path, pv_name: &str, claim: &PersistentVolumeClaim) -> PathBuf {
    base.join(format!(
        "{pv_name}_{}_{}",
        claim.metadata.namespace.as_deref().unwrap_or(""),
        claim.metadata.name.as_deref().unwrap_or("")
    ))
}

/// What the provisioner cannot provide for a claim.
fn unsupported(claim: &PersistentVolumeClaim) -> Option<&'static str> {
    let spec = claim.spec.as_ref()?;
    if spec.selector.is_some() {
        return Some("claim.Spec.Selector is not supported");
    }
    if spec
        .access_modes
        .iter()
        .flatten()
        .any(|m| m != "ReadWriteOnce" && m != "ReadWriteOncePod")
    {
        return Some(
            "the local-path provisioner supports only the ReadWriteOnce and ReadWriteOncePod access modes",
        );
    }
    if spec.volume_mode.as_deref().is_some_and(|m| m != FILESYSTEM) {
        return Some("the local-path provisioner supports only the Filesystem volume mode");
    }
    None
}

/// The volume for a claim (pre-bound to it) on `node`, if one was selected.
fn build_volume(
    pv_name: &str,
    path: &Path,
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    node_hostname: Option<&str>,
) -> PersistentVolume {
    let spec = claim.spec.clone().unwrap_or_default();
    let capacity = claim_request(claim)
        .cloned()
        .map(|q| BTreeMap::from([("storage".to_string(), q)]));
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(pv_name.to_string()),
            annotations: Some(BTreeMap::from([(
                ANN_DYNAMICALLY_PROVISIONED.to_string(),
                LOCAL_PATH_PROVISIONER.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: spec.access_modes,
            capacity,
            claim_ref: Some(claim_ref(claim)),
            host_path: Some(HostPathVolumeSource {
                path: path.to_string_lossy().into_owned(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            mount_options: class.mount_options.clone(),
            node_affinity: node_hostname.map(|h| VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: HOSTNAME_LABEL.into(),
                            operator: "In".into(),
                            values: Some(vec![h.to_string()]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            persistent_volume_reclaim_policy: Some(
                class
                    .reclaim_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".into()),
            ),
            storage_class_name: Some(claim_class(claim).to_string()),
            volume_mode: Some(FILESYSTEM.into()),
            ..Default::default()
        }),
        status: None,
    }
}

/// Create a volume's directory, writable by every pod (local-path makes it 0777).
fn make_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
}

/// Whether `path` is a volume directory of this provisioner under `base` (nothing else is
/// ever removed).
fn owned_path(base: &Path, path: &Path) -> bool {
    path.parent() == Some(base)
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("pvc-") && n != "." && n != "..")
}

impl Provisioner {
    fn pv_api(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    async fn provision(&self, key: &str) -> anyhow::Result<()> {
        let Some(claim) = self.claims.get_key(key) else {
            return Ok(());
        };
        if !asks_us(&claim) {
            return Ok(());
        }
        let class_name = claim_class(&claim).to_string();
        let Some(class) = self.classes.get("", &class_name) else {
            return Err(anyhow!(
                "storageclass.storage.k8s.io {class_name:?} not found"
            ));
        };
        if class.provisioner != LOCAL_PATH_PROVISIONER {
            return Ok(());
        }
        let selected = annotation(&claim.metadata, ANN_SELECTED_NODE)
            .filter(|n| !n.is_empty())
            .map(str::to_string);
        if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
            && selected.is_none()
        {
            // The scheduler picks the node first.
            return Ok(());
        }
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let pv_name = format!("pvc-{uid}");
        if self.volumes.get("", &pv_name).is_some()
            || self
                .pv_api()
                .get_opt(&pv_name)
                .await
                .context("reading the volume")?
                .is_some()
        {
            return Ok(());
        }
        let hostname = match &selected {
            None => None,
            Some(n) => match self.nodes.get("", n) {
                Some(node) => Some(
                    node.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(HOSTNAME_LABEL))
                        .cloned()
                        .unwrap_or_else(|| n.clone()),
                ),
                None => {
                    let msg = format!("failed to get target node: node {n:?} not found");
                    self.recorder
                        .warning(claim.as_ref(), "ProvisioningFailed", msg.clone());
                    return Err(anyhow!(msg));
                }
            },
        };
        self.recorder.normal(
            claim.as_ref(),
            "Provisioning",
            format!("External provisioner is provisioning volume for claim {key:?}"),
        );
        let fail = |e: String| {
            self.recorder.warning(
                claim.as_ref(),
                "ProvisioningFailed",
                format!("failed to provision volume with StorageClass {class_name:?}: {e}"),
            );
            anyhow!("provisioning {key}: {e}")
        };
        if let Some(why) = unsupported(&claim) {
            return Err(fail(why.to_string()));
        }
        let path = volume_dir(&self.dir, &pv_name, &claim);
        let p = path.clone();
        tokio::task::spawn_blocking(move || make_dir(&p))
            .await
            .context("creating the volume directory")?
            .map_err(|e| fail(format!("creating {}: {e}", path.display())))?;
        let volume = build_volume(&pv_name, &path, &claim, &class, hostname.as_deref());
        match self.pv_api().create(&PostParams::default(), &volume).await {
            Ok(_) => {}
            Err(e) if util::is_conflict(&e) => return Ok(()),
            Err(e) => return Err(anyhow!(e).context(format!("creating volume {pv_name}"))),
        }
        self.recorder.normal(
            claim.as_ref(),
            "ProvisioningSucceeded",
            format!("Successfully provisioned volume {pv_name}"),
        );
        Ok(())
    }

    async fn delete(&self, name: &str) -> anyhow::Result<()> {
        let Some(volume) = self.volumes.get("", name) else {
            return Ok(());
        };
        if !should_delete(&volume) {
            return Ok(());
        }
        let path = volume
            .spec
            .as_ref()
            .and_then(|s| {
                s.host_path
                    .as_ref()
                    .map(|h| h.path.clone())
                    .or_else(|| s.local.as_ref().map(|l| l.path.clone()))
            })
            .map(PathBuf::from);
        let result = match path {
            None => Err("the volume has no hostPath".to_string()),
            Some(p) if !owned_path(&self.dir, &p) => Err(format!(
                "refusing to delete {}: not a volume directory under {}",
                p.display(),
                self.dir.display()
            )),
            Some(p) => tokio::task::spawn_blocking(move || remove_all(&p))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string())),
        };
        if let Err(e) = result {
            self.recorder
                .warning(volume.as_ref(), "VolumeFailedDelete", e.clone());
            return Err(anyhow!("deleting volume {name}: {e}"));
        }
        match self.pv_api().delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if util::is_not_found(&e) => Ok(()),
            Err(e) => Err(anyhow!(e).context(format!("deleting volume {name}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, VolumeResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn claim() -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".into()),
                namespace: Some("team".into()),
                uid: Some("1234".into()),
                annotations: Some(BTreeMap::from([(
                    ANN_STORAGE_PROVISIONER.to_string(),
                    LOCAL_PATH_PROVISIONER.to_string(),
                )])),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([("storage".into(), Quantity("2Gi".into()))])),
                    ..Default::default()
                }),
                storage_class_name: Some("lp".into()),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn claims_handed_to_us_and_unbound_are_ours() {
        let mut c = claim();
        assert!(asks_us(&c));
        c.spec.as_mut().unwrap().volume_name = Some("pvc-1234".into());
        assert!(!asks_us(&c));
        let mut other = claim();
        other.metadata.annotations = Some(BTreeMap::from([(
            ANN_BETA_STORAGE_PROVISIONER.to_string(),
            "example.com/nfs".to_string(),
        )]));
        assert!(!asks_us(&other));
    }

    #[test]
    fn the_volume_is_a_pre_bound_host_path_of_the_requested_size() {
        let c = claim();
        let class = StorageClass {
            provisioner: LOCAL_PATH_PROVISIONER.into(),
            reclaim_policy: Some("Retain".into()),
            ..Default::default()
        };
        let base = Path::new("/var/lib/capstan/storage");
        let path = volume_dir(base, "pvc-1234", &c);
        assert_eq!(
            path,
            Path::new("/var/lib/capstan/storage/pvc-1234_team_data")
        );
        let v = build_volume("pvc-1234", &path, &c, &class, Some("n1"));
        let spec = v.spec.as_ref().unwrap();
        assert_eq!(spec.capacity.as_ref().unwrap()["storage"].0, "2Gi");
        assert_eq!(
            spec.host_path.as_ref().unwrap().path,
            "/var/lib/capstan/storage/pvc-1234_team_data"
        );
        let r = spec.claim_ref.as_ref().unwrap();
        assert_eq!(
            (r.namespace.as_deref(), r.name.as_deref(), r.uid.as_deref()),
            (Some("team"), Some("data"), Some("1234"))
        );
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Retain")
        );
        assert_eq!(spec.storage_class_name.as_deref(), Some("lp"));
        let term = &spec
            .node_affinity
            .as_ref()
            .unwrap()
            .required
            .as_ref()
            .unwrap()
            .node_selector_terms[0];
        assert_eq!(
            term.match_expressions.as_ref().unwrap()[0]
                .values
                .as_deref(),
            Some(&["n1".to_string()][..])
        );
        assert_eq!(
            annotation(&v.metadata, ANN_DYNAMICALLY_PROVISIONED),
            Some(LOCAL_PATH_PROVISIONER)
        );
        assert!(build_volume("pvc-1234", &path, &c, &class, None)
            .spec
            .unwrap()
            .node_affinity
            .is_none());
    }

    #[test]
    fn unsupported_claims_are_refused() {
        assert_eq!(unsupported(&claim()), None);
        let mut rwx = claim();
        rwx.spec.as_mut().unwrap().access_modes = Some(vec!["ReadWriteMany".into()]);
        assert!(unsupported(&rwx).is_some());
        let mut block = claim();
        block.spec.as_mut().unwrap().volume_mode = Some("Block".into());
        assert!(unsupported(&block).is_some());
    }

    #[test]
    fn only_released_delete_volumes_of_ours_under_our_directory_are_deleted() {
        let c = claim();
        let class = StorageClass {
            provisioner: LOCAL_PATH_PROVISIONER.into(),
            reclaim_policy: Some("Delete".into()),
            ..Default::default()
        };
        let base = Path::new("/srv/storage");
        let mut v = build_volume("pvc-1", &volume_dir(base, "pvc-1", &c), &c, &class, None);
        assert!(!should_delete(&v));
        v.status = Some(k8s_openapi::api::core::v1::PersistentVolumeStatus {
            phase: Some("Released".into()),
            ..Default::default()
        });
        assert!(should_delete(&v));
        v.spec.as_mut().unwrap().persistent_volume_reclaim_policy = Some("Retain".into());
        assert!(!should_delete(&v));

        assert!(owned_path(base, Path::new("/srv/storage/pvc-1_team_data")));
        assert!(!owned_path(base, Path::new("/srv/storage")));
        assert!(!owned_path(base, Path::new("/srv/other/pvc-1_team_data")));
        assert!(!owned_path(base, Path::new("/srv/storage/pvc-1/x")));
        assert!(!owned_path(base, Path::new("/srv/storage/data")));
    }
}
