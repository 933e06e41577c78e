//! The Node: registration, status and the heartbeat Lease.

use std::sync::Arc;

use crate::Kubelet;

/// Register the node, then keep its status and Lease fresh until the process ends.
pub async fn run(k: Arc<Kubelet>) {
    let _ = k;
}
