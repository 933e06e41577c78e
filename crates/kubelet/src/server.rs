//! The kubelet's HTTPS server (port 10250): logs, exec, attach, port-forward, stats, pods.

use std::sync::Arc;

use crate::Kubelet;

/// Serve until the process ends.
pub async fn serve(k: Arc<Kubelet>) -> anyhow::Result<()> {
    let _ = k;
    std::future::pending().await
}
