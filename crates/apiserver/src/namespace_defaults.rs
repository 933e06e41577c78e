//! What every active namespace holds (Kubernetes' service account controller and root CA
//! publisher): the `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap with the
//! cluster CA, created when a namespace appears and again whenever they are deleted.
//!
//! They run inside the server because admission depends on them: a pod in a namespace
//! without its `default` ServiceAccount is refused.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{json, Value};

use crate::filter::Filter;
use crate::registry::WriteOptions;
use crate::watch_cache::EventType;
use crate::ApiServer;
use capstan_api::meta::At as _;

/// The ConfigMap every namespace gets, with the CA under `ca.crt`.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// Keep every namespace furnished while the server lives.
pub fn spawn(server: &Arc<ApiServer>, ca_pem: String) {
    let weak = Arc::downgrade(server);
    tokio::spawn(async move {
        // Any of the three watches ending (the server closed a slow watcher) starts over.
        loop {
            if run(&weak, &ca_pem).await.is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// Watch namespaces, service accounts and config maps; None when the server is gone.
async fn run(weak: &Weak<ApiServer>, ca_pem: &str) -> Option<()> {
    let (mut ns_sub, mut sa_sub, mut cm_sub) = {
        let server = weak.upgrade()?;
        let sub = |resource: &str, fs: &str| {
            let reg = server.registry("", "v1", resource)?;
            let f = Filter::new(reg.info, "", "", fs).ok()?;
            reg.cache.subscribe(f, None).ok()
        };
        (
            sub("namespaces", "")?,
            sub("serviceaccounts", "metadata.name=default")?,
            sub("configmaps", &format!("metadata.name={ROOT_CA_CONFIGMAP}"))?,
        )
    };
    for item in std::mem::take(&mut ns_sub.initial) {
        furnish(weak, &item.event.obj.name, ca_pem).await?;
    }
    // What already exists was seen by the furnishing above.
    sa_sub.initial.clear();
    cm_sub.initial.clear();
    loop {
        let (item, kind) = tokio::select! {
            i = ns_sub.rx.recv() => (i?, 0),
            i = sa_sub.rx.recv() => (i?, 1),
            i = cm_sub.rx.recv() => (i?, 2),
        };
        let ns = match kind {
            0 if item.kind != EventType::Deleted => item.event.obj.name.clone(),
            1 | 2 if item.kind == EventType::Deleted => item.event.obj.namespace.clone(),
            2 if item.kind == EventType::Modified => item.event.obj.namespace.clone(),
            _ => continue,
        };
        furnish(weak, &ns, ca_pem).await?;
    }
}

/// Create what namespace `ns` lacks, unless it is going away.
async fn furnish(weak: &Weak<ApiServer>, ns: &str, ca_pem: &str) -> Option<()> {
    let server = weak.upgrade()?;
    let namespaces = server.registry("", "v1", "namespaces")?;
    let Some(nsobj) = namespaces.cache.get("", ns) else {
        return Some(());
    };
    let terminating = nsobj
        .value()
        .map(|v| {
            capstan_api::meta::deletion_timestamp(&v).is_some()
                || v.at("/status/phase").and_then(Value::as_str) == Some("Terminating")
        })
        .unwrap_or(false);
    if terminating {
        return Some(());
    }
    let opts = WriteOptions::default();
    let sas = server.registry("", "v1", "serviceaccounts")?;
    if sas.cache.get(ns, "default").is_none() {
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": ns}});
        if let Err(e) = sas.create(ns, sa, &opts).await {
            if e.code != 409 {
                tracing::warn!(namespace = ns, error = %e.message, "cannot create the default service account");
            }
        }
    }
    let cms = server.registry("", "v1", "configmaps")?;
    let wanted = json!({ "ca.crt": ca_pem });
    let current = cms.cache.get(ns, ROOT_CA_CONFIGMAP).and_then(|o| o.value());
    match current {
        None => {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": ns,
                    "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                "data": wanted});
            if let Err(e) = cms.create(ns, cm, &opts).await {
                if e.code != 409 {
                    tracing::warn!(namespace = ns, error = %e.message, "cannot create {ROOT_CA_CONFIGMAP}");
                }
            }
        }
        Some(cm) if cm.get("data") != Some(&wanted) => {
            let _ = cms
                .update_with(ns, ROOT_CA_CONFIGMAP, "", &opts, |old| {
                    let mut next = old.clone();
                    next["data"] = wanted.clone();
                    Ok(next)
                })
                .await;
        }
        Some(_) => {}
    }
    Some(())
}
