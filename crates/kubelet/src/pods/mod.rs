//! Pod workers: run each pod bound to this node through the CRI runtime and report its status.

use std::sync::Arc;

use crate::Kubelet;

/// Start the pod manager: a worker per pod, fed by [`Kubelet::pods`].
pub fn start(k: Arc<Kubelet>) {
    let _ = k;
}
