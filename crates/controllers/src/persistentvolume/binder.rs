//! The binder: one worker for claims and one for volumes (binding must not race with
//! itself), every claim and volume synced again every 15 seconds, as Kubernetes' binder.
//!
//! A claim without `pv.kubernetes.io/bind-completed` is unbound: it gets the best matching
//! volume (or the one it names), else a volume from its class's provisioner, else waits
//! Pending. A bound claim whose volume vanished or was given to another claim is Lost. A
//! volume whose claim is gone is Released and reclaimed by its policy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use capstan_runtime::{Change, Informer, Queue, Recorder};
use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus, PersistentVolumeStatus,
    Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

use super::matching::{
    annotation, check_volume_satisfy_claim, claim_class, claim_has_class, default_class,
    find_best_match, is_volume_bound_to_claim, nanos, volume_mode_mismatch,
};
use super::*;
use crate::util;

const COMPONENT: &str = "persistentvolume-controller";
/// Kubernetes' `--pvclaimbinder-sync-period`.
const RESYNC: Duration = Duration::from_secs(15);

const WARNING: &str = capstan_runtime::events::WARNING;

struct Binder {
    client: Client,
    volumes: Arc<Informer<PersistentVolume>>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
    classes: Arc<Informer<StorageClass>>,
    pods: Arc<Informer<Pod>>,
    written_volumes: Written<PersistentVolume>,
    written_claims: Written<PersistentVolumeClaim>,
    claim_queue: Arc<Queue>,
    volume_queue: Arc<Queue>,
    recorder: Recorder,
}

type Result<T> = anyhow::Result<T>;

pub(super) fn start(ctx: &Ctx) {
    let b = Arc::new(Binder {
        client: ctx.client.clone(),
        volumes: ctx.informers.get::<PersistentVolume>(),
        claims: ctx.informers.get::<PersistentVolumeClaim>(),
        classes: ctx.informers.get::<StorageClass>(),
        pods: ctx.informers.get::<Pod>(),
        written_volumes: Written::new(),
        written_claims: Written::new(),
        claim_queue: Queue::new("persistentvolume-claims"),
        volume_queue: Queue::new("persistentvolume-volumes"),
        recorder: ctx.recorder(COMPONENT),
    });
    {
        let b2 = b.clone();
        b.claims.on_change(move |c| match c {
            Change::Add(o) | Change::Update { new: o, .. } => b2.claim_queue.add(claim_key(o)),
            Change::Delete(o) => {
                b2.written_claims.forget(&claim_key(o));
                // Release its volume now rather than at the next resync.
                if let Some(v) = o
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .filter(|v| !v.is_empty())
                {
                    b2.volume_queue.add(v);
                }
            }
        });
    }
    {
        let b2 = b.clone();
        b.volumes.on_change(move |c| match c {
            Change::Add(o) | Change::Update { new: o, .. } => {
                if let Some(name) = o.metadata.name.as_deref() {
                    b2.volume_queue.add(name);
                }
            }
            Change::Delete(o) => {
                if let Some(name) = o.metadata.name.as_deref() {
                    b2.written_volumes.forget(name);
                }
                // Its claim is Lost now rather than at the next resync.
                if let Some(r) = o.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
                    b2.claim_queue.add(format!(
                        "{}/{}",
                        r.namespace.as_deref().unwrap_or(""),
                        r.name.as_deref().unwrap_or("")
                    ));
                }
            }
        });
    }
    tokio::spawn(async move {
        b.volumes.wait_synced().await;
        b.claims.wait_synced().await;
        b.classes.wait_synced().await;
        b.pods.wait_synced().await;
        let b2 = b.clone();
        b.claim_queue.run_workers(1, move |key| {
            let b = b2.clone();
            async move { b.sync_claim(&key).await }
        });
        let b2 = b.clone();
        b.volume_queue.run_workers(1, move |key| {
            let b = b2.clone();
            async move { b.sync_volume(&key).await }
        });
        let mut tick = tokio::time::interval(RESYNC);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for c in b.claims.list() {
                b.claim_queue.add(claim_key(&c));
            }
            for v in b.volumes.list() {
                if let Some(name) = v.metadata.name.as_deref() {
                    b.volume_queue.add(name);
                }
            }
        }
    });
}

fn has_annotation(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> bool {
    annotation(meta, key).is_some()
}

fn set_annotation(
    meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
    value: &str,
) {
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), value.to_string());
}

fn volume_phase(v: &PersistentVolume) -> &str {
    v.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn claim_phase(c: &PersistentVolumeClaim) -> &str {
    c.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn volume_name_of(c: &PersistentVolumeClaim) -> &str {
    c.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

fn reclaim_policy(v: &PersistentVolume) -> &str {
    v.spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("Retain")
}

fn name_of<K: kube::Resource>(o: &K) -> String {
    o.meta().name.clone().unwrap_or_default()
}

fn is_terminated(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// Whether the pod mounts the claim `name` (directly, or as its generic ephemeral volume).
fn uses_claim(pod: &Pod, name: &str) -> bool {
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|c| c.claim_name == name)
                || (v.ephemeral.is_some() && format!("{pod_name}-{}", v.name) == name)
        })
}

/// Whether the Go regular expression `/tmp/.+` (unanchored) matches: the paths Kubernetes'
/// hostPath deleter agrees to remove.
pub(super) fn host_path_deletable(path: &str) -> bool {
    path.match_indices("/tmp/")
        .any(|(i, _)| path.len() > i + "/tmp/".len())
}

/// `os.RemoveAll`: remove a directory tree or a file; already gone is fine.
pub(super) fn remove_all(path: &std::path::Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    }
}

impl Binder {
    fn pv_api(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    fn pvc_api(&self, ns: &str) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.written_volumes
            .newest(name, self.volumes.get("", name))
    }

    fn claim(&self, key: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.written_claims.newest(key, self.claims.get_key(key))
    }

    fn all_volumes(&self) -> Vec<Arc<PersistentVolume>> {
        self.volumes
            .list()
            .into_iter()
            .filter_map(|v| {
                let name = name_of(v.as_ref());
                self.written_volumes.newest(&name, Some(v))
            })
            .collect()
    }

    // -----------------------------------------------------------------------------------------
    // Claims

    async fn sync_claim(&self, key: &str) -> Result<()> {
        let Some(claim) = self.claim(key) else {
            return Ok(());
        };
        if has_annotation(&claim.metadata, ANN_BIND_COMPLETED) {
            self.sync_bound_claim(claim).await
        } else {
            self.sync_unbound_claim(claim).await
        }
    }

    async fn sync_unbound_claim(&self, claim: Arc<PersistentVolumeClaim>) -> Result<()> {
        let key = claim_key(&claim);
        let wanted = volume_name_of(&claim).to_string();
        if wanted.is_empty() {
            let delay = self.is_delay_binding_mode(&claim)?;
            let volumes = self.all_volumes();
            let found = find_best_match(&claim, &volumes, delay)
                .map_err(|e| anyhow!("error finding PV for claim {key:?}: {e}"))?;
            let Some(volume) = found else {
                if self.assign_default_class(&claim).await? {
                    // The update brings the claim back with its class.
                    return Ok(());
                }
                let class = claim_class(&claim).to_string();
                if delay && !has_annotation(&claim.metadata, ANN_SELECTED_NODE) {
                    self.emit_wait_for_consumer(&claim);
                } else if !class.is_empty() {
                    // A provisioner makes the volume; the claim binds to it in a later sync.
                    return self.provision_claim(&claim, &class).await;
                } else {
                    self.recorder.normal(
                        claim.as_ref(),
                        "FailedBinding",
                        "no persistent volumes available for this claim and no storage class is set",
                    );
                }
                self.update_claim_status(&claim, CLAIM_PENDING, None)
                    .await?;
                return Ok(());
            };
            return self.bind(volume, claim).await;
        }
        // The user asked for a particular volume.
        let Some(volume) = self.volume(&wanted) else {
            self.update_claim_status(&claim, CLAIM_PENDING, None)
                .await?;
            return Ok(());
        };
        let claim_ref = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        if claim_ref.is_none() {
            if let Err(e) = check_volume_satisfy_claim(&volume, &claim) {
                self.recorder.warning(
                    claim.as_ref(),
                    "VolumeMismatch",
                    format!("Cannot bind to requested volume {wanted:?}: {e}"),
                );
                self.update_claim_status(&claim, CLAIM_PENDING, None)
                    .await?;
                return Ok(());
            }
            return self.bind(volume, claim).await;
        }
        if is_volume_bound_to_claim(&volume, &claim) {
            return self.bind(volume, claim).await;
        }
        if !has_annotation(&claim.metadata, ANN_BOUND_BY_CONTROLLER) {
            self.recorder.warning(
                claim.as_ref(),
                "FailedBinding",
                format!("volume {wanted:?} already bound to a different claim."),
            );
            self.update_claim_status(&claim, CLAIM_PENDING, None)
                .await?;
            return Ok(());
        }
        // Someone removed the claim's bind-completed annotation.
        self.recorder.warning(
            claim.as_ref(),
            "FailedBinding",
            format!("volume {wanted:?} already bound to a different claim."),
        );
        let other = claim_ref
            .map(|r| {
                format!(
                    "{}/{}",
                    r.namespace.as_deref().unwrap_or(""),
                    r.name.as_deref().unwrap_or("")
                )
            })
            .unwrap_or_default();
        Err(anyhow!(
            "invalid binding of claim {key:?} to volume {wanted:?}: volume already claimed by {other:?}"
        ))
    }

    async fn sync_bound_claim(&self, claim: Arc<PersistentVolumeClaim>) -> Result<()> {
        let wanted = volume_name_of(&claim).to_string();
        if wanted.is_empty() {
            self.update_claim_status_with_event(
                &claim,
                CLAIM_LOST,
                "ClaimLost",
                "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
            )
            .await?;
            return Ok(());
        }
        let Some(volume) = self.volume(&wanted) else {
            self.update_claim_status_with_event(
                &claim,
                CLAIM_LOST,
                "ClaimLost",
                "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
            )
            .await?;
            return Ok(());
        };
        match volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
            // Unbound meanwhile, or the informer has not seen the volume's binding yet: bind
            // again (a no-op for what is already written).
            None => self.bind(volume, claim).await,
            Some(r) if r.uid == claim.metadata.uid => self.bind(volume, claim).await,
            Some(_) => {
                self.update_claim_status_with_event(
                    &claim,
                    CLAIM_LOST,
                    "ClaimMisbound",
                    "Two claims are bound to the same volume, this one is bound incorrectly",
                )
                .await?;
                Ok(())
            }
        }
    }

    /// Whether the claim's class binds only once a pod uses the claim (WaitForFirstConsumer).
    fn is_delay_binding_mode(&self, claim: &PersistentVolumeClaim) -> Result<bool> {
        let name = claim_class(claim);
        if name.is_empty() {
            return Ok(false);
        }
        let Some(class) = self.classes.get("", name) else {
            return Ok(false);
        };
        match class.volume_binding_mode.as_deref() {
            None => Err(anyhow!(
                "VolumeBindingMode not set for StorageClass {name:?}"
            )),
            Some(mode) => Ok(mode == "WaitForFirstConsumer"),
        }
    }

    /// Give a claim without a class the default class (retroactive default StorageClass).
    async fn assign_default_class(&self, claim: &PersistentVolumeClaim) -> Result<bool> {
        if claim_has_class(claim) {
            return Ok(false);
        }
        let Some(class) = default_class(&self.classes.list()) else {
            return Ok(false);
        };
        let mut c = claim.clone();
        c.spec
            .get_or_insert_with(Default::default)
            .storage_class_name = class.metadata.name.clone();
        let key = claim_key(claim);
        let ns = claim.metadata.namespace.as_deref().unwrap_or("");
        let new = self
            .pvc_api(ns)
            .replace(&name_of(claim), &PostParams::default(), &c)
            .await
            .with_context(|| format!("can't update PersistentVolumeClaim[{key:?}]"))?;
        self.written_claims.store(key, new);
        Ok(true)
    }

    /// The event of a claim waiting for its first consumer: the pods using it that are not
    /// scheduled yet, if any.
    fn emit_wait_for_consumer(&self, claim: &PersistentVolumeClaim) {
        let ns = claim.metadata.namespace.as_deref().unwrap_or("");
        let name = claim.metadata.name.as_deref().unwrap_or("");
        let mut pods = Vec::new();
        self.pods.for_each_in(ns, |p| {
            let Some(spec) = p.spec.as_ref() else {
                return;
            };
            if spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) || is_terminated(p) {
                return;
            }
            if uses_claim(p, name) {
                pods.push(p.metadata.name.clone().unwrap_or_default());
            }
        });
        pods.sort();
        let (reason, message) = match pods.len() {
            0 => (
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding".to_string(),
            ),
            1 => (
                "WaitForPodScheduled",
                format!("waiting for pod {} to be scheduled", pods[0]),
            ),
            _ => (
                "WaitForPodScheduled",
                format!("waiting for pods {} to be scheduled", pods.join(",")),
            ),
        };
        self.recorder.normal(claim, reason, message);
    }

    /// Ask the class's provisioner for a volume. Only external provisioners exist here (no
    /// in-tree volume plugin provisions): they are told through the claim's annotations.
    async fn provision_claim(&self, claim: &PersistentVolumeClaim, class_name: &str) -> Result<()> {
        let Some(class) = self.classes.get("", class_name) else {
            self.recorder.warning(
                claim,
                "ProvisioningFailed",
                format!("storageclass.storage.k8s.io {class_name:?} not found"),
            );
            return Ok(());
        };
        let provisioner = class.provisioner.as_str();
        if provisioner.starts_with("kubernetes.io/") {
            self.recorder.warning(
                claim,
                "ProvisioningFailed",
                format!("no volume plugin matched name: {provisioner}"),
            );
            return Ok(());
        }
        let claim = match self.set_claim_provisioner(claim, provisioner).await {
            Ok(c) => c,
            Err(e) => {
                self.recorder.warning(
                    claim,
                    "ProvisioningFailed",
                    format!("Error saving claim: {e}"),
                );
                return Err(e);
            }
        };
        self.recorder.normal(
            claim.as_ref(),
            "ExternalProvisioning",
            format!(
                "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
            ),
        );
        Ok(())
    }

    async fn set_claim_provisioner(
        &self,
        claim: &PersistentVolumeClaim,
        provisioner: &str,
    ) -> Result<Arc<PersistentVolumeClaim>> {
        if annotation(&claim.metadata, ANN_BETA_STORAGE_PROVISIONER) == Some(provisioner) {
            return Ok(Arc::new(claim.clone()));
        }
        let mut c = claim.clone();
        set_annotation(&mut c.metadata, ANN_BETA_STORAGE_PROVISIONER, provisioner);
        set_annotation(&mut c.metadata, ANN_STORAGE_PROVISIONER, provisioner);
        let ns = claim.metadata.namespace.as_deref().unwrap_or("");
        let new = self
            .pvc_api(ns)
            .replace(&name_of(claim), &PostParams::default(), &c)
            .await?;
        Ok(self.written_claims.store(claim_key(claim), new))
    }

    // -----------------------------------------------------------------------------------------
    // Binding

    /// Bind both ends, volume first; any failure leaves the rest to the next sync.
    async fn bind(
        &self,
        volume: Arc<PersistentVolume>,
        claim: Arc<PersistentVolumeClaim>,
    ) -> Result<()> {
        let volume = self.bind_volume_to_claim(volume, &claim).await?;
        let volume = self.update_volume_phase(volume, VOLUME_BOUND, None).await?;
        let claim = self.bind_claim_to_volume(claim, &volume).await?;
        self.update_claim_status(&claim, CLAIM_BOUND, Some(&volume))
            .await?;
        Ok(())
    }

    async fn bind_volume_to_claim(
        &self,
        volume: Arc<PersistentVolume>,
        claim: &PersistentVolumeClaim,
    ) -> Result<Arc<PersistentVolume>> {
        let set_by_controller = !is_volume_bound_to_claim(&volume, claim);
        let mut v = (*volume).clone();
        let mut dirty = false;
        let spec = v.spec.get_or_insert_with(Default::default);
        let points_here = spec.claim_ref.as_ref().is_some_and(|r| {
            r.name == claim.metadata.name
                && r.namespace == claim.metadata.namespace
                && r.uid == claim.metadata.uid
        });
        if !points_here {
            spec.claim_ref = Some(claim_ref(claim));
            dirty = true;
        }
        if set_by_controller && !has_annotation(&v.metadata, ANN_BOUND_BY_CONTROLLER) {
            set_annotation(&mut v.metadata, ANN_BOUND_BY_CONTROLLER, "yes");
            dirty = true;
        }
        if !dirty {
            return Ok(volume);
        }
        let name = name_of(&v);
        let new = self
            .pv_api()
            .replace(&name, &PostParams::default(), &v)
            .await
            .with_context(|| format!("binding volume {name:?} to claim {:?}", claim_key(claim)))?;
        Ok(self.written_volumes.store(name, new))
    }

    async fn bind_claim_to_volume(
        &self,
        claim: Arc<PersistentVolumeClaim>,
        volume: &PersistentVolume,
    ) -> Result<Arc<PersistentVolumeClaim>> {
        let volume_name = name_of(volume);
        let mut c = (*claim).clone();
        let mut dirty = false;
        if volume_name_of(&claim) != volume_name {
            c.spec.get_or_insert_with(Default::default).volume_name = Some(volume_name.clone());
            dirty = true;
            if !has_annotation(&c.metadata, ANN_BOUND_BY_CONTROLLER) {
                set_annotation(&mut c.metadata, ANN_BOUND_BY_CONTROLLER, "yes");
            }
        }
        if !has_annotation(&c.metadata, ANN_BIND_COMPLETED) {
            set_annotation(&mut c.metadata, ANN_BIND_COMPLETED, "yes");
            dirty = true;
        }
        if !dirty {
            return Ok(claim);
        }
        let key = claim_key(&claim);
        let ns = claim.metadata.namespace.as_deref().unwrap_or("");
        let new = self
            .pvc_api(ns)
            .replace(&name_of(claim.as_ref()), &PostParams::default(), &c)
            .await
            .with_context(|| format!("binding claim {key:?} to volume {volume_name:?}"))?;
        Ok(self.written_claims.store(key, new))
    }

    /// Set the claim's phase, and its access modes and capacity from the bound volume (when
    /// it becomes Bound) or none (without a volume).
    async fn update_claim_status(
        &self,
        claim: &Arc<PersistentVolumeClaim>,
        phase: &str,
        volume: Option<&PersistentVolume>,
    ) -> Result<Arc<PersistentVolumeClaim>> {
        let old_phase = claim_phase(claim).to_string();
        let mut c = (**claim).clone();
        let status = c
            .status
            .get_or_insert_with(PersistentVolumeClaimStatus::default);
        let mut dirty = false;
        if old_phase != phase {
            status.phase = Some(phase.to_string());
            dirty = true;
        }
        match volume {
            None => {
                if status.access_modes.is_some() {
                    status.access_modes = None;
                    dirty = true;
                }
                if status.capacity.is_some() {
                    status.capacity = None;
                    dirty = true;
                }
            }
            Some(v) => {
                let spec = v.spec.as_ref();
                let modes = spec.and_then(|s| s.access_modes.clone());
                if status.access_modes != modes {
                    status.access_modes = modes;
                    dirty = true;
                }
                // Only when becoming Bound: a different size later may be intended (a file
                // system smaller than its block device).
                if old_phase != phase {
                    let Some(cap) = spec.and_then(|s| s.capacity.as_ref()?.get("storage")) else {
                        return Err(anyhow!(
                            "PersistentVolume {:?} is without a storage capacity",
                            name_of(v)
                        ));
                    };
                    let current = status.capacity.as_ref().and_then(|c| c.get("storage"));
                    if current.is_none_or(|cur| nanos(Some(cur)) != nanos(Some(cap))) {
                        status.capacity = spec.and_then(|s| s.capacity.clone());
                        dirty = true;
                    }
                }
            }
        }
        if !dirty {
            return Ok(claim.clone());
        }
        let key = claim_key(claim);
        let ns = claim.metadata.namespace.as_deref().unwrap_or("");
        let new = self
            .pvc_api(ns)
            .replace_status(&name_of(claim.as_ref()), &PostParams::default(), &c)
            .await
            .with_context(|| format!("updating the status of claim {key:?}"))?;
        Ok(self.written_claims.store(key, new))
    }

    /// A phase change with a Warning event (none when the phase already is `phase`).
    async fn update_claim_status_with_event(
        &self,
        claim: &Arc<PersistentVolumeClaim>,
        phase: &str,
        reason: &str,
        message: &str,
    ) -> Result<()> {
        if claim_phase(claim) == phase {
            return Ok(());
        }
        let new = self.update_claim_status(claim, phase, None).await?;
        self.recorder.warning(new.as_ref(), reason, message);
        Ok(())
    }

    async fn update_volume_phase(
        &self,
        volume: Arc<PersistentVolume>,
        phase: &str,
        message: Option<&str>,
    ) -> Result<Arc<PersistentVolume>> {
        if volume_phase(&volume) == phase {
            return Ok(volume);
        }
        let mut v = (*volume).clone();
        let status = v.status.get_or_insert_with(PersistentVolumeStatus::default);
        status.phase = Some(phase.to_string());
        status.message = message.filter(|m| !m.is_empty()).map(str::to_string);
        let name = name_of(&v);
        let new = self
            .pv_api()
            .replace_status(&name, &PostParams::default(), &v)
            .await
            .with_context(|| format!("updating the phase of volume {name:?}"))?;
        Ok(self.written_volumes.store(name, new))
    }

    async fn update_volume_phase_with_event(
        &self,
        volume: Arc<PersistentVolume>,
        phase: &str,
        type_: &'static str,
        reason: &str,
        message: &str,
    ) -> Result<Arc<PersistentVolume>> {
        if volume_phase(&volume) == phase {
            return Ok(volume);
        }
        let new = self
            .update_volume_phase(volume, phase, Some(message))
            .await?;
        self.recorder.record(
            capstan_runtime::events::object_ref(new.as_ref()),
            type_,
            reason,
            message,
        );
        Ok(new)
    }

    // -----------------------------------------------------------------------------------------
    // Volumes

    async fn sync_volume(&self, name: &str) -> Result<()> {
        let Some(volume) = self.volume(name) else {
            return Ok(());
        };
        let Some(r) = volume.spec.as_ref().and_then(|s| s.claim_ref.clone()) else {
            let was = volume_phase(&volume).to_string();
            self.update_volume_phase(volume, VOLUME_AVAILABLE, None)
                .await?;
            if was != VOLUME_AVAILABLE {
                // A new volume for the claims still waiting (Kubernetes leaves them to their
                // next periodic sync).
                self.enqueue_unbound_claims();
            }
            return Ok(());
        };
        let ns = r.namespace.clone().unwrap_or_default();
        let claim_name = r.name.clone().unwrap_or_default();
        let key = format!("{ns}/{claim_name}");
        if r.uid.as_deref().unwrap_or("").is_empty() {
            // Reserved for a claim that has not bound to it yet.
            self.update_volume_phase(volume, VOLUME_AVAILABLE, None)
                .await?;
            self.claim_queue.add(key);
            return Ok(());
        }
        let phase = volume_phase(&volume).to_string();
        let mut claim = self.claim(&key);
        if claim.is_none() && phase != VOLUME_RELEASED && phase != VOLUME_FAILED {
            // Not reclaimed on the informer's word alone: its claim may be too new for it.
            claim = self
                .pvc_api(&ns)
                .get_opt(&claim_name)
                .await
                .with_context(|| format!("reading claim {key:?}"))?
                .map(Arc::new);
        }
        if claim.as_ref().is_some_and(|c| c.metadata.uid != r.uid) {
            // The informer's claim may be an older one of the same name.
            claim = self
                .pvc_api(&ns)
                .get_opt(&claim_name)
                .await
                .with_context(|| format!("reading claim {key:?}"))?
                .filter(|c| c.metadata.uid == r.uid)
                .map(Arc::new);
        }
        let Some(claim) = claim else {
            let volume = if phase != VOLUME_RELEASED && phase != VOLUME_FAILED {
                self.update_volume_phase(volume, VOLUME_RELEASED, None)
                    .await?
            } else {
                volume
            };
            return self.reclaim_volume(volume).await;
        };
        let bound_to = volume_name_of(&claim).to_string();
        if bound_to.is_empty() {
            if volume_mode_mismatch(&claim, &volume) {
                self.recorder.warning(
                    volume.as_ref(),
                    "VolumeMismatch",
                    format!(
                        "Cannot bind PersistentVolume to requested PersistentVolumeClaim {claim_name:?} due to incompatible volumeMode."
                    ),
                );
                self.recorder.warning(
                    claim.as_ref(),
                    "VolumeMismatch",
                    format!(
                        "Cannot bind PersistentVolume {name:?} to requested PersistentVolumeClaim due to incompatible volumeMode."
                    ),
                );
                return Ok(());
            }
            // Either half-bound by this controller or pre-bound by a user or a provisioner:
            // the claim's sync completes it.
            self.claim_queue.add(key);
            return Ok(());
        }
        if bound_to == name {
            self.update_volume_phase(volume, VOLUME_BOUND, None).await?;
            return Ok(());
        }
        // The claim is bound to another volume.
        if has_annotation(&volume.metadata, ANN_DYNAMICALLY_PROVISIONED)
            && reclaim_policy(&volume) == "Delete"
        {
            // Provisioned for the claim, which found another: not needed any more.
            let volume = if phase != VOLUME_RELEASED && phase != VOLUME_FAILED {
                self.update_volume_phase(volume, VOLUME_RELEASED, None)
                    .await?
            } else {
                volume
            };
            return self.reclaim_volume(volume).await;
        }
        self.unbind_volume(volume).await
    }

    fn enqueue_unbound_claims(&self) {
        for c in self.claims.list() {
            if !has_annotation(&c.metadata, ANN_BIND_COMPLETED) && volume_name_of(&c).is_empty() {
                self.claim_queue.add(claim_key(&c));
            }
        }
    }

    /// Undo a binding: entirely if the controller made it, else only the claim's uid (the
    /// volume stays reserved for the claim its creator named).
    async fn unbind_volume(&self, volume: Arc<PersistentVolume>) -> Result<()> {
        let mut v = (*volume).clone();
        if has_annotation(&v.metadata, ANN_BOUND_BY_CONTROLLER) {
            if let Some(spec) = v.spec.as_mut() {
                spec.claim_ref = None;
            }
            if let Some(a) = v.metadata.annotations.as_mut() {
                a.remove(ANN_BOUND_BY_CONTROLLER);
                if a.is_empty() {
                    v.metadata.annotations = None;
                }
            }
        } else if let Some(r) = v.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
            r.uid = None;
        }
        let name = name_of(&v);
        let new = self
            .pv_api()
            .replace(&name, &PostParams::default(), &v)
            .await
            .with_context(|| format!("unbinding volume {name:?}"))?;
        let new = self.written_volumes.store(name, new);
        self.update_volume_phase(new, VOLUME_AVAILABLE, None)
            .await?;
        Ok(())
    }

    /// Whether the volume's claim is gone (or bound elsewhere): it needs reclaiming.
    fn is_volume_released(&self, volume: &PersistentVolume) -> bool {
        let Some(r) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
            return false;
        };
        if r.uid.as_deref().unwrap_or("").is_empty() {
            return false;
        }
        let key = format!(
            "{}/{}",
            r.namespace.as_deref().unwrap_or(""),
            r.name.as_deref().unwrap_or("")
        );
        match self.claim(&key) {
            Some(c) if c.metadata.uid == r.uid => {
                let bound_to = volume_name_of(&c);
                !bound_to.is_empty() && bound_to != name_of(volume)
            }
            _ => true,
        }
    }

    async fn reclaim_volume(&self, volume: Arc<PersistentVolume>) -> Result<()> {
        match reclaim_policy(&volume) {
            "Retain" => Ok(()),
            "Recycle" => self.recycle_volume(volume).await,
            "Delete" => self.delete_volume(volume).await,
            _ => {
                self.update_volume_phase_with_event(
                    volume,
                    VOLUME_FAILED,
                    WARNING,
                    "VolumeUnknownReclaimPolicy",
                    "Volume has unrecognized PersistentVolumeReclaimPolicy",
                )
                .await?;
                Ok(())
            }
        }
    }

    /// Recycling (scrubbing a volume for reuse) is deprecated and no volume type here has a
    /// recycler: the volume fails, as Kubernetes fails volumes without a recycler plugin.
    async fn recycle_volume(&self, volume: Arc<PersistentVolume>) -> Result<()> {
        let name = name_of(volume.as_ref());
        let Ok(Some(fresh)) = self.pv_api().get_opt(&name).await else {
            return Ok(());
        };
        if !self.is_volume_released(&fresh) {
            return Ok(());
        }
        // Never scrub a volume pods still use (unless its claim name is already taken by a
        // new claim, which uses another volume).
        if let Some(r) = fresh.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
            let ns = r.namespace.as_deref().unwrap_or("");
            let claim_name = r.name.as_deref().unwrap_or("");
            let mut users = Vec::new();
            self.pods.for_each_in(ns, |p| {
                if !is_terminated(p) && uses_claim(p, claim_name) {
                    users.push(format!("{ns}/{}", p.metadata.name.as_deref().unwrap_or("")));
                }
            });
            users.sort();
            if !users.is_empty() && self.claim(&format!("{ns}/{claim_name}")).is_none() {
                self.recorder.normal(
                    &fresh,
                    "VolumeFailedRecycle",
                    format!("Volume is used by pods: {}", users.join(",")),
                );
                return Ok(());
            }
        }
        self.update_volume_phase_with_event(
            Arc::new(fresh),
            VOLUME_FAILED,
            WARNING,
            "VolumeFailedRecycle",
            "No recycler plugin found for the volume!",
        )
        .await?;
        Ok(())
    }

    /// Delete a released volume with the Delete policy: volumes of external provisioners
    /// (capstan's local-path among them) are left to their provisioner; hostPath volumes
    /// under a `/tmp/` path are removed as Kubernetes' hostPath deleter removes them; other
    /// volumes cannot be deleted here and fail.
    async fn delete_volume(&self, volume: Arc<PersistentVolume>) -> Result<()> {
        let name = name_of(volume.as_ref());
        // Read it again: a previous deletion may have finished meanwhile.
        let Ok(Some(fresh)) = self.pv_api().get_opt(&name).await else {
            return Ok(());
        };
        if !self.is_volume_released(&fresh) {
            return Ok(());
        }
        let fresh = self
            .written_volumes
            .newest(&name, Some(Arc::new(fresh)))
            .unwrap_or(volume);
        match self.do_delete_volume(&fresh).await {
            Ok(false) => Ok(()),
            Ok(true) => {
                match self.pv_api().delete(&name, &DeleteParams::default()).await {
                    Ok(_) => self.written_volumes.forget(&name),
                    Err(e) if util::is_not_found(&e) => self.written_volumes.forget(&name),
                    // Tried again at the next sync of the volume.
                    Err(e) => {
                        tracing::info!(volume = %name, error = %e, "deleting the volume failed")
                    }
                }
                Ok(())
            }
            Err(msg) => {
                // Failed; tried again at every sync of the volume.
                self.update_volume_phase_with_event(
                    fresh,
                    VOLUME_FAILED,
                    WARNING,
                    "VolumeFailedDelete",
                    &msg,
                )
                .await?;
                Ok(())
            }
        }
    }

    /// Delete the storage of a volume: `Ok(false)` when its external provisioner does it.
    async fn do_delete_volume(
        &self,
        volume: &PersistentVolume,
    ) -> std::result::Result<bool, String> {
        if let Some(p) =
            annotation(&volume.metadata, ANN_DYNAMICALLY_PROVISIONED).filter(|p| !p.is_empty())
        {
            if !p.starts_with("kubernetes.io/") {
                return Ok(false);
            }
            if p != "kubernetes.io/host-path" {
                return Err(format!("no volume plugin matched name: {p}"));
            }
        }
        let Some(path) = volume
            .spec
            .as_ref()
            .and_then(|s| s.host_path.as_ref())
            .map(|h| h.path.clone())
        else {
            return Err("no deletable volume plugin matched".into());
        };
        if !host_path_deletable(&path) {
            return Err(format!(
                "host_path deleter only supports /tmp/.+ but received provided {path}"
            ));
        }
        tokio::task::spawn_blocking(move || remove_all(std::path::Path::new(&path)))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_path_deleter_takes_tmp_paths_only() {
        assert!(host_path_deletable("/tmp/data"));
        assert!(host_path_deletable("/var/tmp/x"));
        assert!(!host_path_deletable("/tmp/"));
        assert!(!host_path_deletable("/data/volume"));
        assert!(!host_path_deletable("/tmpx/a"));
    }

    #[test]
    fn remove_all_takes_trees_files_and_missing_paths() {
        let dir = std::env::temp_dir().join(format!("capstan-pv-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/b/f"), b"x").unwrap();
        std::fs::write(dir.join("file"), b"x").unwrap();
        remove_all(&dir.join("file")).unwrap();
        assert!(!dir.join("file").exists());
        remove_all(&dir).unwrap();
        assert!(!dir.exists());
        remove_all(&dir).unwrap();
    }
}
