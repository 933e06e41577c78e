//! Container environment: env (value, fieldRef, resourceFieldRef, configMapKeyRef,
//! secretKeyRef), envFrom, and the service link variables.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::Kubelet;

/// The environment of `container`, in Kubernetes' order. An error is the message of a
/// CreateContainerConfigError (for example `configmap "x" not found`).
pub async fn container_env(
    k: &Kubelet,
    pod: &Pod,
    container: &Container,
) -> Result<Vec<(String, String)>, String> {
    let _ = (k, pod, container);
    Ok(Vec::new())
}

/// Expand `$(VAR)` references in a command or argument (`$$` escapes `$`); unknown
/// references stay as written.
pub fn expand(text: &str, env: &[(String, String)]) -> String {
    let _ = env;
    text.to_string()
}
