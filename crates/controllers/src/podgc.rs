//! The pod garbage collector (Kubernetes v1.32's pkg/controller/podgc): every 20 seconds it
//! deletes (grace period 0, after marking them Failed through a server-side apply of their
//! status as `PodGC`) terminated pods beyond `--terminated-pod-gc-threshold` (evicted, then
//! oldest first), terminating pods on not-ready nodes tainted `node.kubernetes.io/out-of-service`,
//! pods bound to nodes that no longer exist (after a 40-second quarantine and a fresh read of
//! the node, with a `DisruptionTarget` condition), and terminating pods never scheduled.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_runtime::Informer;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client};
use parking_lot::Mutex;
use serde_json::json;

use crate::util;
use crate::Ctx;

const GC_CHECK_PERIOD: Duration = Duration::from_secs(20);
/// How long a node unknown to the informer may stay missing before it is read from the API.
const QUARANTINE_TIME: Duration = Duration::from_secs(40);
const FIELD_MANAGER: &str = "PodGC";
const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

pub fn start(ctx: &Ctx) {
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        pods: ctx.informers.get::<Pod>(),
        nodes: ctx.informers.get::<Node>(),
        threshold: ctx.opts.terminated_pod_gc_threshold,
        quarantine: Mutex::new(HashMap::new()),
    });
    tokio::spawn(async move {
        c.pods.wait_synced().await;
        c.nodes.wait_synced().await;
        loop {
            c.gc().await;
            tokio::time::sleep(GC_CHECK_PERIOD).await;
        }
    });
}

struct Controller {
    client: Client,
    pods: Arc<Informer<Pod>>,
    nodes: Arc<Informer<Node>>,
    threshold: usize,
    /// Node names pods are bound to but the informer does not know → when to check them.
    quarantine: Mutex<HashMap<String, Instant>>,
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn node_name(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

/// Neither pending, running nor unknown.
fn is_terminated(p: &Pod) -> bool {
    !matches!(phase(p), "Pending" | "Running" | "Unknown")
}

fn is_evicted(p: &Pod) -> bool {
    phase(p) == "Failed" && p.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Evicted")
}

fn is_node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn out_of_service(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .any(|t| t.key == OUT_OF_SERVICE_TAINT)
}

/// Evicted pods first, then oldest first, then by name.
fn gc_order(a: &Pod, b: &Pod) -> std::cmp::Ordering {
    is_evicted(b)
        .cmp(&is_evicted(a))
        .then_with(|| {
            let t = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            t(a).cmp(&t(b))
        })
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// The terminated pods to delete to get back to `threshold`, in deletion order.
fn terminated_to_delete(pods: &[Arc<Pod>], threshold: usize) -> Vec<Arc<Pod>> {
    let mut terminated: Vec<Arc<Pod>> = pods.iter().filter(|p| is_terminated(p)).cloned().collect();
    if terminated.len() <= threshold {
        return Vec::new();
    }
    let n = terminated.len() - threshold;
    terminated.sort_by(|a, b| gc_order(a, b));
    terminated.truncate(n);
    terminated
}

struct Disruption {
    reason: &'static str,
    message: &'static str,
}

impl Controller {
    async fn gc(&self) {
        // Only the pods some pass below may act on: the pod cache rebuilds each pod it hands
        // out, and a large cluster's pods are not held through the deletions.
        let nodes: HashSet<String> = self
            .nodes
            .list()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let mut pods = Vec::new();
        let candidate = |p: &dyn capstan_runtime::informer::Packed<Pod>| {
            crate::podcache::peek(p).is_none_or(|p| {
                let node = p.node_name();
                !matches!(p.phase(), "Pending" | "Running" | "Unknown")
                    || p.deleting()
                    || (!node.is_empty() && !nodes.contains(node))
            })
        };
        self.pods.for_each_passing(candidate, |p| {
            let node = node_name(p);
            if is_terminated(p)
                || p.metadata.deletion_timestamp.is_some()
                || (!node.is_empty() && !nodes.contains(node))
            {
                pods.push(p.clone());
            }
        });
        if self.threshold > 0 {
            self.delete_all(
                terminated_to_delete(&pods, self.threshold),
                None,
                "terminated",
            )
            .await;
        }
        self.gc_terminating(&pods).await;
        self.gc_orphaned(&pods).await;
        let unscheduled: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some() && node_name(p).is_empty())
            .cloned()
            .collect();
        self.delete_all(unscheduled, None, "unscheduled terminating")
            .await;
    }

    /// Terminating pods on not-ready nodes that are out of service.
    async fn gc_terminating(&self, pods: &[Arc<Pod>]) {
        let mut victims: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .filter(|p| {
                self.nodes
                    .get("", node_name(p))
                    .is_some_and(|n| !is_node_ready(&n) && out_of_service(&n))
            })
            .cloned()
            .collect();
        victims.sort_by(|a, b| gc_order(a, b));
        self.delete_all(victims, None, "terminating on out-of-service node")
            .await;
    }

    /// Pods bound to nodes that are gone (checked against the API after a quarantine).
    async fn gc_orphaned(&self, pods: &[Arc<Pod>]) {
        let existing: HashSet<String> = self
            .nodes
            .list()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let now = Instant::now();
        let due: Vec<String> = {
            let mut q = self.quarantine.lock();
            for p in pods {
                let n = node_name(p);
                if !n.is_empty() && !existing.contains(n) {
                    q.entry(n.to_string()).or_insert(now + QUARANTINE_TIME);
                }
            }
            let due: Vec<String> = q
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(n, _)| n.clone())
                .collect();
            for n in &due {
                q.remove(n);
            }
            due
        };
        let api: Api<Node> = Api::all(self.client.clone());
        let mut deleted = HashSet::new();
        for n in due.into_iter().filter(|n| !existing.contains(n)) {
            match api.get(&n).await {
                Err(e) if util::is_not_found(&e) => {
                    deleted.insert(n);
                }
                Err(e) => tracing::info!(node = %n, error = %e, "pod GC: error getting node"),
                Ok(_) => {}
            }
        }
        if deleted.is_empty() {
            return;
        }
        let orphans: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| deleted.contains(node_name(p)))
            .cloned()
            .collect();
        let cond = Disruption {
            reason: "DeletionByPodGC",
            message: "PodGC: node no longer exists",
        };
        self.delete_all(orphans, Some(&cond), "orphaned").await;
    }

    async fn delete_all(&self, pods: Vec<Arc<Pod>>, cond: Option<&Disruption>, what: &str) {
        if pods.is_empty() {
            return;
        }
        tracing::info!(count = pods.len(), kind = what, "pod GC: deleting pods");
        let results =
            futures::future::join_all(pods.iter().map(|p| self.mark_failed_and_delete(p, cond)))
                .await;
        for (p, r) in pods.iter().zip(results) {
            if let Err(e) = r {
                if !util::is_not_found(&e) {
                    tracing::info!(
                        pod = %format!("{}/{}", p.metadata.namespace.as_deref().unwrap_or_default(), p.metadata.name.as_deref().unwrap_or_default()),
                        error = %e,
                        "pod GC: deleting pod failed"
                    );
                }
            }
        }
    }

    /// Mark the pod Failed (so an orphan does not stay Running forever), then force-delete it.
    async fn mark_failed_and_delete(
        &self,
        pod: &Pod,
        cond: Option<&Disruption>,
    ) -> kube::Result<()> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        if !matches!(phase(pod), "Succeeded" | "Failed") {
            let mut status = json!({"phase": "Failed"});
            if let Some(c) = cond {
                status["conditions"] = json!([{
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                }]);
            }
            let apply = json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": ns},
                "status": status,
            });
            api.patch_status(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&apply),
            )
            .await?;
        }
        tracing::info!(pod = %format!("{ns}/{name}"), "PodGC is force deleting Pod");
        api.delete(
            name,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::SignedDuration;

    fn pod(name: &str, phase: &str, age: i64, reason: Option<&str>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::now() - SignedDuration::from_secs(age))),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(phase.into()),
                reason: reason.map(Into::into),
                ..Default::default()
            }),
        })
    }

    #[test]
    fn terminated_pods_beyond_the_threshold_go_evicted_then_oldest_first() {
        let pods = vec![
            pod("running", "Running", 500, None),
            pod("old", "Succeeded", 300, None),
            pod("older", "Failed", 400, None),
            pod("new", "Succeeded", 10, None),
            pod("evicted", "Failed", 5, Some("Evicted")),
            pod("pending", "Pending", 600, None),
        ];
        let names = |v: Vec<Arc<Pod>>| {
            v.iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(terminated_to_delete(&pods, 2)),
            vec!["evicted", "older"]
        );
        assert_eq!(
            names(terminated_to_delete(&pods, 0)),
            vec!["evicted", "older", "old", "new"]
        );
        assert!(terminated_to_delete(&pods, 4).is_empty());
        assert!(!is_terminated(&pod("u", "Unknown", 1, None)));
    }
}
