//! Pod volumes: directories on the host under `ROOT/pods/<uid>/volumes`, bind-mounted into
//! containers by the runtime.

use std::collections::BTreeMap;
use std::path::PathBuf;

use capstan_cri::v1::Mount;
use k8s_openapi::api::core::v1::{Container, Pod};

use crate::Kubelet;

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
    /// propagation). An error is the message of a CreateContainerConfigError.
    pub fn mounts(&self, pod: &Pod, container: &Container) -> Result<Vec<Mount>, String> {
        let _ = (pod, container);
        Ok(Vec::new())
    }
}

/// Make (or refresh: configMap, secret, projected and downwardAPI contents follow their
/// sources) every volume of `pod`. An error is the message of a FailedMount event.
pub async fn prepare(k: &Kubelet, pod: &Pod) -> Result<PodVolumes, String> {
    let _ = (k, pod);
    Ok(PodVolumes::default())
}

/// Remove a terminated pod's volumes (unmounting tmpfs ones).
pub async fn cleanup(k: &Kubelet, uid: &str) -> std::io::Result<()> {
    let _ = (k, uid);
    Ok(())
}
