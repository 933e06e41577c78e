//! Pod volumes: directories on the host under `ROOT/pods/<uid>/volumes/<plugin>/<name>`,
//! bind-mounted into containers by the runtime.
//!
//! As Kubernetes' volume manager: only the volumes some container mounts are set up;
//! emptyDir is a directory (a tmpfs for medium Memory); configMap, secret, downwardAPI and
//! projected volumes are written by the [`atomic`] writer (secret, downwardAPI and
//! projected on a tmpfs, so their contents never reach the disk) and refreshed on every
//! [`prepare`]; hostPath is the host's path after its type check; a persistentVolumeClaim
//! resolves to its bound hostPath or local PersistentVolume.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use capstan_cri::v1::{Mount, MountPropagation};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, PersistentVolume, Pod, Secret, Volume,
    VolumeMount,
};

use crate::Kubelet;

pub mod atomic;
pub mod downward;
pub mod objects;
pub mod quantity;
pub mod sys;

use atomic::{FileProjection, Payload};
use downward::NodeInfo;
use objects::Objects;
use quantity::Quantity;

/// Plugin directory names under `volumes/`, as Kubernetes names them.
pub const EMPTY_DIR: &str = "kubernetes.io~empty-dir";
pub const CONFIG_MAP: &str = "kubernetes.io~configmap";
pub const SECRET: &str = "kubernetes.io~secret";
pub const PROJECTED: &str = "kubernetes.io~projected";
pub const DOWNWARD_API: &str = "kubernetes.io~downward-api";

/// The mode of configMap, secret, downwardAPI and projected files unless the pod says.
const DEFAULT_MODE: i32 = 0o644;
/// Projected service account tokens live this long unless the pod says.
const DEFAULT_TOKEN_EXPIRATION: i64 = 3600;

/// One prepared volume: where it is on the host.
#[derive(Clone, Debug, Default)]
pub struct HostVolume {
    pub path: PathBuf,
    /// Mounted read-only whatever the volumeMount says (configMap, secret, projected, ...).
    pub read_only: bool,
}

/// A pod's prepared volumes by name.
#[derive(Clone, Debug, Default)]
pub struct PodVolumes {
    pub volumes: BTreeMap<String, HostVolume>,
}

impl PodVolumes {
    /// The CRI mounts of one container (its volumeMounts, subPath, readOnly, mount
    /// propagation). An error is the message of a CreateContainerConfigError. A
    /// `subPathExpr` needs the container's environment: use [`PodVolumes::mounts_with_env`].
    pub fn mounts(&self, pod: &Pod, container: &Container) -> Result<Vec<Mount>, String> {
        self.mounts_with_env(pod, container, &[])
    }

    /// [`PodVolumes::mounts`] with the container's environment (from
    /// [`crate::env::container_env`]) for `subPathExpr`.
    pub fn mounts_with_env(
        &self,
        pod: &Pod,
        container: &Container,
        env: &[(String, String)],
    ) -> Result<Vec<Mount>, String> {
        let _ = pod;
        let mut out = Vec::new();
        for vm in container.volume_mounts.iter().flatten() {
            let Some(vol) = self.volumes.get(&vm.name) else {
                return Err(format!(
                    "cannot find volume {:?} to mount into container {:?}",
                    vm.name, container.name
                ));
            };
            let mut host_path = vol.path.clone();
            let sub_path = match vm.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
                Some(expr) => expand_sub_path(expr, env)?,
                None => vm.sub_path.clone().unwrap_or_default(),
            };
            if !sub_path.is_empty() {
                host_path = resolve_sub_path(&vol.path, &sub_path, vm, &container.name)?;
            }
            let container_path = if vm.mount_path.starts_with('/') {
                vm.mount_path.clone()
            } else {
                format!("/{}", vm.mount_path)
            };
            let propagation = match vm.mount_propagation.as_deref() {
                None | Some("None") => MountPropagation::PropagationPrivate,
                Some("HostToContainer") => MountPropagation::PropagationHostToContainer,
                Some("Bidirectional") => MountPropagation::PropagationBidirectional,
                Some(other) => return Err(format!("invalid MountPropagation mode: {other:?}")),
            };
            let read_only = vm.read_only.unwrap_or(false) || vol.read_only;
            let recursive_read_only = resolve_recursive_read_only(vm)?;
            out.push(Mount {
                container_path,
                host_path: host_path.to_string_lossy().into_owned(),
                readonly: read_only,
                selinux_relabel: false,
                propagation: propagation as i32,
                recursive_read_only,
                ..Default::default()
            });
        }
        Ok(out)
    }
}

/// Expand a `subPathExpr` with the container's environment; every referenced variable
/// must have a non-empty value.
fn expand_sub_path(expr: &str, env: &[(String, String)]) -> Result<String, String> {
    let map: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut missing = BTreeSet::new();
    let out = crate::env::expand_with(expr, |name| match map.get(name) {
        Some(v) if !v.is_empty() => Some(v.to_string()),
        _ => {
            missing.insert(name.to_string());
            Some(String::new())
        }
    });
    if !missing.is_empty() {
        return Err(format!(
            "missing value for {}",
            missing.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(out)
}

/// The host path of `volume`/`sub_path`: created (with the volume's mode) when missing,
/// and never outside the volume after symlinks are followed.
fn resolve_sub_path(
    volume: &Path,
    sub_path: &str,
    vm: &VolumeMount,
    container: &str,
) -> Result<PathBuf, String> {
    if sub_path.starts_with('/') {
        return Err(format!(
            "error SubPath `{sub_path}` must not be an absolute path"
        ));
    }
    if sub_path.split('/').any(|p| p == "..") {
        return Err(format!(
            "unable to provision SubPath `{sub_path}`: must not contain '..'"
        ));
    }
    let joined = volume.join(sub_path);
    let prepare_err = || {
        format!(
            "failed to prepare subPath for volumeMount {:?} of container {:?}",
            vm.name, container
        )
    };
    let base = fs::canonicalize(volume).map_err(|_| prepare_err())?;
    if fs::symlink_metadata(&joined).is_err() {
        // Create the missing directories, checking the deepest existing one is inside.
        let create_err = || {
            format!(
                "failed to create subPath directory for volumeMount {:?} of container {:?}",
                vm.name, container
            )
        };
        let mode = fs::metadata(volume)
            .map(|m| m.mode() & 0o7777)
            .unwrap_or(0o755);
        let mut existing = joined.clone();
        let mut to_create = Vec::new();
        while fs::symlink_metadata(&existing).is_err() {
            to_create.push(existing.clone());
            if !existing.pop() {
                return Err(create_err());
            }
        }
        let real = fs::canonicalize(&existing).map_err(|_| create_err())?;
        if !real.starts_with(&base) {
            return Err(create_err());
        }
        for dir in to_create.iter().rev() {
            match fs::create_dir(dir) {
                Ok(()) => {
                    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(mode));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(_) => return Err(create_err()),
            }
        }
    }
    let real = fs::canonicalize(&joined).map_err(|_| prepare_err())?;
    if !real.starts_with(&base) {
        return Err(prepare_err());
    }
    Ok(real)
}

fn resolve_recursive_read_only(vm: &VolumeMount) -> Result<bool, String> {
    match vm.recursive_read_only.as_deref() {
        None | Some("Disabled") => Ok(false),
        Some(mode) if !vm.read_only.unwrap_or(false) => Err(format!(
            "failed to resolve recursive read-only mode: volume {:?} requested recursive read-only mode {mode:?}, but it is not read-only",
            vm.name
        )),
        // containerd 1.6 cannot make mounts recursively read-only.
        Some("IfPossible") => Ok(false),
        Some("Enabled") => Err(format!(
            "failed to resolve recursive read-only mode: volume {:?} requested recursive read-only mode, but it is not supported by the runtime",
            vm.name
        )),
        Some(other) => Err(format!(
            "failed to resolve recursive read-only mode: unknown recursive read-only mode {other:?}"
        )),
    }
}

/// Why a volume is not ready.
#[derive(Debug)]
enum VolumeError {
    /// The volume's SetUp failed (a FailedMount "MountVolume.SetUp failed ..." event).
    SetUp(String),
    /// The volume could not even be resolved (claims, unknown plugins).
    Process(String),
}

/// Make (or refresh: configMap, secret, projected and downwardAPI contents follow their
/// sources) every volume of `pod`. An error is the message of a FailedMount event.
pub async fn prepare(k: &Kubelet, pod: &Pod) -> Result<PodVolumes, String> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let live = objects::Live::new(k);
    prepare_with(&live, &k.pod_dir(&uid), pod).await
}

/// [`prepare`] against any [`Objects`], in `pod_dir`.
pub async fn prepare_with(
    objects: &dyn Objects,
    pod_dir: &Path,
    pod: &Pod,
) -> Result<PodVolumes, String> {
    let volumes_dir = pod_dir.join("volumes");
    for d in [pod_dir, volumes_dir.as_path()] {
        if !d.exists() {
            fs::create_dir_all(d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
            let _ = fs::set_permissions(d, fs::Permissions::from_mode(0o750));
        }
    }
    let used = used_volume_names(pod);
    let ctx = Ctx {
        objects,
        pod,
        volumes_dir: &volumes_dir,
        node: objects.node(),
        fs_group: pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|s| s.fs_group)
            .and_then(|g| u32::try_from(g).ok()),
        fs_user: fs_user_from(pod),
    };
    let mut out = PodVolumes::default();
    let mut setup_errors = Vec::new();
    let mut process_errors = Vec::new();
    let mut failed = BTreeSet::new();
    for vol in pod
        .spec
        .as_ref()
        .map(|s| s.volumes.iter().flatten())
        .into_iter()
        .flatten()
    {
        if !used.contains(vol.name.as_str()) {
            continue;
        }
        match ctx.setup(vol).await {
            Ok(hv) => {
                out.volumes.insert(vol.name.clone(), hv);
            }
            Err(VolumeError::SetUp(e)) => {
                tracing::debug!(volume = %vol.name, error = %e, "volume setup failed");
                failed.insert(vol.name.clone());
                setup_errors.push(format!(
                    "MountVolume.SetUp failed for volume {:?} : {e}",
                    vol.name
                ));
            }
            Err(VolumeError::Process(e)) => {
                failed.insert(vol.name.clone());
                process_errors.push((vol.name.clone(), e));
            }
        }
    }
    if !process_errors.is_empty() {
        let names: Vec<&str> = process_errors.iter().map(|(n, _)| n.as_str()).collect();
        let messages: Vec<&str> = process_errors.iter().map(|(_, e)| e.as_str()).collect();
        let failed: Vec<&str> = failed.iter().map(String::as_str).collect();
        return Err(format!(
            "Unable to attach or mount volumes: unmounted volumes=[{}], unattached volumes=[{}], failed to process volumes=[{}]: {}",
            failed.join(" "),
            names.join(" "),
            names.join(" "),
            messages.join("; ")
        ));
    }
    if let Some(first) = setup_errors.into_iter().next() {
        return Err(first);
    }
    Ok(out)
}

/// The volumes some container (init, regular or ephemeral) mounts or maps.
fn used_volume_names(pod: &Pod) -> BTreeSet<&str> {
    let mut used = BTreeSet::new();
    let Some(spec) = pod.spec.as_ref() else {
        return used;
    };
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        for m in c.volume_mounts.iter().flatten() {
            used.insert(m.name.as_str());
        }
        for d in c.volume_devices.iter().flatten() {
            used.insert(d.name.as_str());
        }
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        for m in c.volume_mounts.iter().flatten() {
            used.insert(m.name.as_str());
        }
    }
    used
}

/// The user every container runs as, when they all run as the same one
/// (`FsUserFrom`): projected tokens are owned by it.
fn fs_user_from(pod: &Pod) -> Option<u32> {
    let spec = pod.spec.as_ref()?;
    let pod_user = spec.security_context.as_ref().and_then(|s| s.run_as_user);
    let mut user: Option<i64> = None;
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        let u = c
            .security_context
            .as_ref()
            .and_then(|s| s.run_as_user)
            .or(pod_user)?;
        match user {
            Some(prev) if prev != u => return None,
            _ => user = Some(u),
        }
    }
    user.and_then(|u| u32::try_from(u).ok())
}

/// Everything one prepare needs.
struct Ctx<'a> {
    objects: &'a dyn Objects,
    pod: &'a Pod,
    volumes_dir: &'a Path,
    node: NodeInfo,
    fs_group: Option<u32>,
    fs_user: Option<u32>,
}

impl Ctx<'_> {
    fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("default")
    }

    fn plugin_dir(&self, plugin: &str, name: &str) -> PathBuf {
        self.volumes_dir.join(plugin).join(name)
    }

    async fn setup(&self, vol: &Volume) -> Result<HostVolume, VolumeError> {
        use VolumeError::*;
        if let Some(ed) = &vol.empty_dir {
            let dir = self.plugin_dir(EMPTY_DIR, &vol.name);
            let medium = ed.medium.as_deref().unwrap_or("");
            let size = ed.size_limit.as_ref().and_then(|q| Quantity::parse(&q.0));
            self.setup_empty_dir(&dir, medium, size).map_err(SetUp)?;
            return Ok(HostVolume {
                path: dir,
                read_only: false,
            });
        }
        if let Some(src) = &vol.config_map {
            let optional = src.optional.unwrap_or(false);
            let cm = self
                .objects
                .config_map(self.namespace(), &src.name)
                .await
                .map_err(SetUp)?;
            if cm.is_none() && !optional {
                return Err(SetUp(format!("configmap {:?} not found", src.name)));
            }
            let payload = config_map_payload(
                src.items.as_deref(),
                cm.as_deref(),
                src.default_mode.unwrap_or(DEFAULT_MODE),
                optional,
            )
            .map_err(SetUp)?;
            let dir = self.plugin_dir(CONFIG_MAP, &vol.name);
            self.write_atomic(&dir, false, &payload).map_err(SetUp)?;
            return Ok(HostVolume {
                path: dir,
                read_only: true,
            });
        }
        if let Some(src) = &vol.secret {
            let name = src.secret_name.clone().unwrap_or_default();
            let optional = src.optional.unwrap_or(false);
            let secret = self
                .objects
                .secret(self.namespace(), &name)
                .await
                .map_err(SetUp)?;
            if secret.is_none() && !optional {
                return Err(SetUp(format!("secret {name:?} not found")));
            }
            let payload = secret_payload(
                src.items.as_deref(),
                secret.as_deref(),
                src.default_mode.unwrap_or(DEFAULT_MODE),
                optional,
            )
            .map_err(SetUp)?;
            let dir = self.plugin_dir(SECRET, &vol.name);
            self.write_atomic(&dir, true, &payload).map_err(SetUp)?;
            return Ok(HostVolume {
                path: dir,
                read_only: true,
            });
        }
        if let Some(src) = &vol.downward_api {
            let payload = downward_payload(
                src.items.as_deref().unwrap_or_default(),
                self.pod,
                &self.node,
                src.default_mode.unwrap_or(DEFAULT_MODE),
            )
            .map_err(SetUp)?;
            let dir = self.plugin_dir(DOWNWARD_API, &vol.name);
            self.write_atomic(&dir, true, &payload).map_err(SetUp)?;
            return Ok(HostVolume {
                path: dir,
                read_only: true,
            });
        }
        if let Some(src) = &vol.projected {
            let payload = self.projected_payload(src).await.map_err(SetUp)?;
            let dir = self.plugin_dir(PROJECTED, &vol.name);
            self.write_atomic(&dir, true, &payload).map_err(SetUp)?;
            return Ok(HostVolume {
                path: dir,
                read_only: true,
            });
        }
        if let Some(hp) = &vol.host_path {
            if !self.objects.hollow() {
                check_host_path(&hp.path, hp.type_.as_deref().unwrap_or("")).map_err(SetUp)?;
            }
            return Ok(HostVolume {
                path: PathBuf::from(&hp.path),
                read_only: false,
            });
        }
        if let Some(pvc) = &vol.persistent_volume_claim {
            return self
                .claim_volume(&pvc.claim_name, pvc.read_only.unwrap_or(false), false)
                .await;
        }
        if vol.ephemeral.is_some() {
            let claim = format!(
                "{}-{}",
                self.pod.metadata.name.as_deref().unwrap_or_default(),
                vol.name
            );
            return self.claim_volume(&claim, false, true).await;
        }
        Err(Process(format!(
            "failed to get Plugin from volumeSpec for volume {:?} err=no volume plugin matched",
            vol.name
        )))
    }

    fn setup_empty_dir(
        &self,
        dir: &Path,
        medium: &str,
        size_limit: Option<Quantity>,
    ) -> Result<(), String> {
        let fresh = !dir.exists();
        match medium {
            "" => {
                if fresh {
                    fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
                    fs::set_permissions(dir, fs::Permissions::from_mode(0o777))
                        .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
                }
            }
            "Memory" => {
                if fresh {
                    fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
                }
                if !self.objects.hollow() && !sys::is_mount_point(dir) {
                    let size = self.memory_volume_size(size_limit);
                    sys::mount_tmpfs(dir, size).map_err(|e| {
                        format!("mount failed: mounting tmpfs at {}: {e}", dir.display())
                    })?;
                    let perm = fs::metadata(dir).map(|m| m.mode() & 0o777).unwrap_or(0);
                    if perm != 0o777 {
                        let mode =
                            fs::metadata(dir).map(|m| m.mode() & 0o7000).unwrap_or(0) | 0o777;
                        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(mode));
                    }
                } else if !fresh {
                    return Ok(());
                }
            }
            m if m.starts_with("HugePages") => {
                return Err(format!(
                    "hugePages storage requested, but huge pages are not supported on this node (medium {m:?})"
                ));
            }
            other => return Err(format!("unknown storage medium {other:?}")),
        }
        if fresh && !self.objects.hollow() {
            if let Some(gid) = self.fs_group {
                sys::set_ownership(dir, gid, false)
                    .map_err(|e| format!("set ownership of {}: {e}", dir.display()))?;
            }
        }
        Ok(())
    }

    /// The size of a memory-backed volume: the node's allocatable memory, capped by the
    /// pod's memory limit and the volume's sizeLimit.
    fn memory_volume_size(&self, size_limit: Option<Quantity>) -> Option<i64> {
        let mut size = self
            .node
            .allocatable
            .get("memory")
            .and_then(|q| Quantity::parse(&q.0))
            .map(|q| q.value())
            .filter(|v| *v > 0);
        if let Some(limit) = pod_memory_limit(self.pod) {
            if limit > 0 && size.is_none_or(|s| limit < s) {
                size = Some(limit);
            }
        }
        if let Some(l) = size_limit.map(|q| q.value()).filter(|v| *v > 0) {
            if size.is_none_or(|s| l < s) {
                size = Some(l);
            }
        }
        size
    }

    /// Write an atomic-writer volume (on a tmpfs when `memory`).
    fn write_atomic(&self, dir: &Path, memory: bool, payload: &Payload) -> Result<(), String> {
        if !dir.exists() {
            fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            if !memory {
                let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o777));
            }
        }
        if memory && !self.objects.hollow() && !sys::is_mount_point(dir) {
            let size = self.memory_volume_size(None);
            match sys::mount_tmpfs(dir, size) {
                Ok(()) => {}
                // Without the privilege to mount, keep the files on disk.
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    tracing::warn!(dir = %dir.display(), "cannot mount tmpfs; volume stays on disk");
                    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o777));
                }
                Err(e) => {
                    return Err(format!(
                        "mount failed: mounting tmpfs at {}: {e}",
                        dir.display()
                    ))
                }
            }
        }
        let gid = self.fs_group.filter(|_| !self.objects.hollow());
        let set_perms = move |d: &Path| -> io::Result<()> {
            match gid {
                Some(g) => sys::set_ownership(d, g, true),
                None => Ok(()),
            }
        };
        atomic::write(dir, payload, Some(&set_perms))?;
        Ok(())
    }

    async fn projected_payload(
        &self,
        src: &k8s_openapi::api::core::v1::ProjectedVolumeSource,
    ) -> Result<Payload, String> {
        let default_mode = src.default_mode.unwrap_or(DEFAULT_MODE);
        let ns = self.namespace().to_string();
        let mut payload = Payload::new();
        let mut errors: Vec<String> = Vec::new();
        for source in src.sources.iter().flatten() {
            if let Some(s) = &source.secret {
                let optional = s.optional.unwrap_or(false);
                let secret = match self.objects.secret(&ns, &s.name).await {
                    Ok(Some(v)) => Some(v),
                    Ok(None) if optional => None,
                    Ok(None) => {
                        errors.push(format!("secret {:?} not found", s.name));
                        continue;
                    }
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                };
                match secret_payload(
                    s.items.as_deref(),
                    secret.as_deref(),
                    default_mode,
                    optional,
                ) {
                    Ok(p) => payload.extend(p),
                    Err(e) => errors.push(e),
                }
            } else if let Some(c) = &source.config_map {
                let optional = c.optional.unwrap_or(false);
                let cm = match self.objects.config_map(&ns, &c.name).await {
                    Ok(Some(v)) => Some(v),
                    Ok(None) if optional => None,
                    Ok(None) => {
                        errors.push(format!("configmap {:?} not found", c.name));
                        continue;
                    }
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                };
                match config_map_payload(c.items.as_deref(), cm.as_deref(), default_mode, optional)
                {
                    Ok(p) => payload.extend(p),
                    Err(e) => errors.push(e),
                }
            } else if let Some(d) = &source.downward_api {
                match downward_payload(
                    d.items.as_deref().unwrap_or_default(),
                    self.pod,
                    &self.node,
                    default_mode,
                ) {
                    Ok(p) => payload.extend(p),
                    Err(e) => errors.push(e),
                }
            } else if let Some(t) = &source.service_account_token {
                // With an fsGroup or a single user the token is private to them.
                let mode = if self.fs_user.is_some() || self.fs_group.is_some() {
                    0o600
                } else {
                    default_mode
                };
                let sa = self
                    .pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.service_account_name.clone())
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "default".into());
                let audience = t.audience.as_deref().filter(|a| !a.is_empty());
                let expiration = t.expiration_seconds.unwrap_or(DEFAULT_TOKEN_EXPIRATION);
                match self
                    .objects
                    .token(self.pod, &sa, audience, expiration)
                    .await
                {
                    Ok(token) => {
                        payload.insert(
                            t.path.clone(),
                            FileProjection {
                                data: token.into_bytes(),
                                mode: mode as u32,
                                fs_user: self.fs_user,
                            },
                        );
                    }
                    Err(e) => errors.push(e),
                }
            } else if let Some(b) = &source.cluster_trust_bundle {
                if !b.optional.unwrap_or(false) {
                    errors.push(
                        "ClusterTrustBundle projection requires the ClusterTrustBundleProjection feature gate"
                            .into(),
                    );
                }
            }
        }
        if !errors.is_empty() {
            return Err(aggregate(errors));
        }
        Ok(payload)
    }

    /// A persistentVolumeClaim (or generic ephemeral) volume: its bound PV's path.
    async fn claim_volume(
        &self,
        claim_name: &str,
        read_only: bool,
        ephemeral: bool,
    ) -> Result<HostVolume, VolumeError> {
        use VolumeError::*;
        let ns = self.namespace().to_string();
        let wrap = |e: String| Process(format!("error processing PVC {ns}/{claim_name}: {e}"));
        let pvc = match self.objects.claim(&ns, claim_name).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(wrap(format!(
                    "failed to fetch PVC from API server: persistentvolumeclaims {claim_name:?} not found"
                )))
            }
            Err(e) => return Err(wrap(format!("failed to fetch PVC from API server: {e}"))),
        };
        if ephemeral {
            let pod_uid = self.pod.metadata.uid.as_deref().unwrap_or_default();
            let owned = pvc
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == pod_uid);
            if !owned {
                return Err(wrap(format!(
                    "PVC {ns}/{claim_name} was not created for pod {ns}/{} (pod is not owner)",
                    self.pod.metadata.name.as_deref().unwrap_or_default()
                )));
            }
        }
        if pvc.metadata.deletion_timestamp.is_some()
            && !pvc
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == "kubernetes.io/pvc-protection")
        {
            return Err(wrap("PVC is being deleted".into()));
        }
        let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase != Some("Bound") {
            return Err(wrap("PVC is not bound".into()));
        }
        let pv_name = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .unwrap_or_default();
        if pv_name.is_empty() {
            return Err(wrap("PVC has empty pvc.Spec.VolumeName".into()));
        }
        let pv: std::sync::Arc<PersistentVolume> = match self.objects.volume(&pv_name).await {
            Ok(Some(pv)) => pv,
            Ok(None) => {
                return Err(wrap(format!(
                    "failed to fetch PV {pv_name} from API server: persistentvolumes {pv_name:?} not found"
                )))
            }
            Err(e) => {
                return Err(wrap(format!(
                    "failed to fetch PV {pv_name} from API server: {e}"
                )))
            }
        };
        let spec = pv.spec.clone().unwrap_or_default();
        let Some(claim_ref) = spec.claim_ref.as_ref() else {
            return Err(wrap(format!(
                "found PV object {pv_name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
            )));
        };
        let pvc_uid = pvc.metadata.uid.clone().unwrap_or_default();
        let ref_uid = claim_ref.uid.clone().unwrap_or_default();
        if ref_uid != pvc_uid {
            return Err(wrap(format!(
                "found PV object {pv_name} but its pv.Spec.ClaimRef.UID ({ref_uid}) does not point to claim.UID ({pvc_uid})"
            )));
        }
        if spec.volume_mode.as_deref() == Some("Block") {
            return Err(wrap(format!(
                "volume {pv_name} has volumeMode Block, which this kubelet does not support"
            )));
        }
        if let Some(hp) = &spec.host_path {
            if !self.objects.hollow() {
                check_host_path(&hp.path, hp.type_.as_deref().unwrap_or("")).map_err(SetUp)?;
            }
            return Ok(HostVolume {
                path: PathBuf::from(&hp.path),
                read_only,
            });
        }
        if let Some(local) = &spec.local {
            let path = Path::new(&local.path);
            if !path.exists() {
                return Err(SetUp(format!(
                    "mount failed: the local volume path {} does not exist",
                    local.path
                )));
            }
            if let (Some(gid), false) = (self.fs_group, read_only) {
                if path.is_dir() {
                    let _ = sys::set_ownership(path, gid, false);
                }
            }
            return Ok(HostVolume {
                path: path.to_path_buf(),
                read_only,
            });
        }
        Err(Process(format!(
            "failed to get Plugin from volumeSpec for volume {pv_name:?} err=no volume plugin matched"
        )))
    }
}

/// The memory limit of the whole pod, when every container has one: the larger of the
/// sum of the regular containers (and restartable init containers) and the largest init
/// container.
fn pod_memory_limit(pod: &Pod) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let limit = |c: &Container| -> Option<i64> {
        c.resources
            .as_ref()?
            .limits
            .as_ref()?
            .get("memory")
            .and_then(|q| Quantity::parse(&q.0))
            .map(|q| q.value())
    };
    let mut sum: i64 = 0;
    for c in &spec.containers {
        sum = sum.saturating_add(limit(c)?);
    }
    let mut init_max: i64 = 0;
    for c in spec.init_containers.iter().flatten() {
        let l = limit(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sum = sum.saturating_add(l);
        } else {
            init_max = init_max.max(l);
        }
    }
    Some(sum.max(init_max))
}

/// `[a, b]` for several errors (duplicates once), the message itself for one.
fn aggregate(errors: Vec<String>) -> String {
    let mut seen = BTreeSet::new();
    let unique: Vec<String> = errors
        .into_iter()
        .filter(|e| seen.insert(e.clone()))
        .collect();
    if unique.len() == 1 {
        unique.into_iter().next().unwrap_or_default()
    } else {
        format!("[{}]", unique.join(", "))
    }
}

/// A configMap volume's files: every key (data and binaryData) or the listed items.
pub fn config_map_payload(
    items: Option<&[KeyToPath]>,
    cm: Option<&ConfigMap>,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, String> {
    let empty = BTreeMap::new();
    let empty_bin = BTreeMap::new();
    let data = cm.and_then(|c| c.data.as_ref()).unwrap_or(&empty);
    let binary = cm
        .and_then(|c| c.binary_data.as_ref())
        .unwrap_or(&empty_bin);
    let mode = |m: Option<i32>| m.unwrap_or(default_mode) as u32;
    let mut payload = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data {
                payload.insert(k.clone(), file(v.as_bytes().to_vec(), mode(None)));
            }
            for (k, v) in binary {
                payload.insert(k.clone(), file(v.0.clone(), mode(None)));
            }
        }
        Some(items) => {
            for item in items {
                let content = if let Some(v) = data.get(&item.key) {
                    v.as_bytes().to_vec()
                } else if let Some(v) = binary.get(&item.key) {
                    v.0.clone()
                } else if optional {
                    continue;
                } else {
                    return Err(format!(
                        "configmap references non-existent config key: {}",
                        item.key
                    ));
                };
                payload.insert(item.path.clone(), file(content, mode(item.mode)));
            }
        }
    }
    Ok(payload)
}

/// A secret volume's files: every key or the listed items.
pub fn secret_payload(
    items: Option<&[KeyToPath]>,
    secret: Option<&Secret>,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, String> {
    let empty = BTreeMap::new();
    let data = secret.and_then(|s| s.data.as_ref()).unwrap_or(&empty);
    let mode = |m: Option<i32>| m.unwrap_or(default_mode) as u32;
    let mut payload = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data {
                payload.insert(k.clone(), file(v.0.clone(), mode(None)));
            }
        }
        Some(items) => {
            for item in items {
                let Some(v) = data.get(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(format!("references non-existent secret key: {}", item.key));
                };
                payload.insert(item.path.clone(), file(v.0.clone(), mode(item.mode)));
            }
        }
    }
    Ok(payload)
}

/// A downwardAPI volume's files.
pub fn downward_payload(
    items: &[DownwardAPIVolumeFile],
    pod: &Pod,
    node: &NodeInfo,
    default_mode: i32,
) -> Result<Payload, String> {
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let mode = item.mode.unwrap_or(default_mode) as u32;
        let mut data = Vec::new();
        if let Some(f) = &item.field_ref {
            match downward::extract_field_path(pod, &f.field_path) {
                Ok(v) => data = v.into_bytes(),
                Err(e) => errors.push(e),
            }
        } else if let Some(r) = &item.resource_field_ref {
            let container = r.container_name.clone().unwrap_or_default();
            match downward::resource_value_by_container(r, pod, &container, node) {
                Ok(v) => data = v.into_bytes(),
                Err(e) => errors.push(e),
            }
        }
        payload.insert(atomic::clean(&item.path), file(data, mode));
    }
    if !errors.is_empty() {
        return Err(aggregate(errors));
    }
    Ok(payload)
}

fn file(data: Vec<u8>, mode: u32) -> FileProjection {
    FileProjection {
        data,
        mode,
        fs_user: None,
    }
}

/// The hostPath type check (Kubernetes' messages).
pub fn check_host_path(path: &str, kind: &str) -> Result<(), String> {
    if path.split('/').any(|p| p == "..") {
        return Err(format!("invalid HostPath `{path}`: must not contain '..'"));
    }
    let p = Path::new(path);
    let meta = fs::metadata(p).ok();
    let exists = meta.is_some();
    let ft = meta.as_ref().map(|m| m.file_type());
    let is = |f: fn(&fs::FileType) -> bool| ft.as_ref().is_some_and(f);
    let fail = |what: &str| {
        Err(format!(
            "hostPath type check failed: {path} is not a {what}"
        ))
    };
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" if !exists => {
            fs::create_dir_all(p).map_err(|e| format!("mkdir {path}: {e}"))?;
            let _ = fs::set_permissions(p, fs::Permissions::from_mode(0o755));
            Ok(())
        }
        "DirectoryOrCreate" | "Directory" => {
            if is(fs::FileType::is_dir) {
                Ok(())
            } else {
                fail("directory")
            }
        }
        "FileOrCreate" if !exists => {
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| format!("open {path}: {e}"))?;
            let _ = fs::set_permissions(p, fs::Permissions::from_mode(0o644));
            Ok(())
        }
        "FileOrCreate" | "File" => {
            if is(fs::FileType::is_file) {
                Ok(())
            } else {
                fail("file")
            }
        }
        "Socket" => {
            if is(FileTypeExt::is_socket) {
                Ok(())
            } else {
                fail("socket file")
            }
        }
        "CharDevice" => {
            if is(FileTypeExt::is_char_device) {
                Ok(())
            } else {
                fail("character device")
            }
        }
        "BlockDevice" => {
            if is(FileTypeExt::is_block_device) {
                Ok(())
            } else {
                fail("block device")
            }
        }
        other => Err(format!("{other} is an invalid volume type")),
    }
}

/// Remove a terminated pod's volumes (unmounting tmpfs ones).
pub async fn cleanup(k: &Kubelet, uid: &str) -> std::io::Result<()> {
    objects::forget_pod(k, uid);
    cleanup_dir(&k.pod_dir(uid))
}

/// Unmount everything under `pod_dir`, remove its volume directories, and the pod
/// directory itself once nothing else is left in it.
pub fn cleanup_dir(pod_dir: &Path) -> io::Result<()> {
    if !pod_dir.exists() {
        return Ok(());
    }
    sys::unmount_all_under(pod_dir)?;
    for sub in ["volumes", "volume-subpaths", "plugins"] {
        let d = pod_dir.join(sub);
        match fs::remove_dir_all(&d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let _ = fs::remove_dir(pod_dir);
    Ok(())
}

#[cfg(test)]
mod tests;
