//! The scheduler's async shell: informers feed the core, the core's decisions become API calls
//! (bindings, status patches, events, preemption deletes), and bind results flow back.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher::{self, Event as WEvent};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::{mpsc, Semaphore};

use crate::core::{Action, Core};
use crate::events::{Record, Recorder};
use crate::framework::Framework;
use crate::leader::LeaderElection;
use crate::queue::SchedulingQueue;
use crate::types::PodInfo;

/// How the scheduler runs.
pub struct Options {
    pub profiles: Vec<Framework>,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Hold this lease before scheduling (None: no leader election).
    pub leader: Option<LeaderElection>,
    /// Bindings in flight at once.
    pub bind_concurrency: usize,
}

enum Input {
    Pod(Box<Pod>),
    PodGone(String),
    Node(Box<Node>),
    NodeGone(String),
    Namespace(Box<Namespace>),
    NamespaceGone(String),
    Pdbs(Vec<PodDisruptionBudget>),
    Synced(&'static str),
    Bound { key: String, ok: bool, retry: bool },
}

/// Run until the process ends or leadership is lost (then an error is returned).
pub async fn run(client: Client, opts: Options) -> anyhow::Result<()> {
    let mut lost = None;
    if let Some(le) = opts.leader.clone() {
        lost = Some(le.acquire(client.clone()).await);
    }
    let instance = hostname();
    let recorder = Recorder::start(
        client.clone(),
        "default-scheduler".into(),
        format!("default-scheduler-{instance}"),
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    spawn_informers(&client, &tx);
    let mut core = Core::new(
        opts.profiles,
        SchedulingQueue::new(opts.initial_backoff, opts.max_backoff),
    );
    let binds = Arc::new(Semaphore::new(opts.bind_concurrency.max(1)));
    let mut synced: HashSet<&'static str> = HashSet::new();
    let mut last_flush = Instant::now();
    loop {
        if let Some(l) = &lost {
            if !*l.borrow() {
                anyhow::bail!("leader election lost");
            }
        }
        // Apply everything that arrived, then decide for one pod.
        while let Ok(input) = rx.try_recv() {
            apply(&mut core, input, &mut synced);
        }
        let ready = synced.len() >= 3;
        let now = Instant::now();
        if now.duration_since(last_flush) > Duration::from_secs(30) {
            core.flush(now);
            last_flush = now;
        }
        let mut did = 0;
        if ready {
            while did < 64 {
                let Some(action) = core.schedule_one(Instant::now()) else {
                    break;
                };
                did += 1;
                dispatch(&client, &recorder, &binds, &tx, action).await;
                if !rx.is_empty() {
                    break;
                }
            }
        }
        if did > 0 {
            tokio::task::yield_now().await;
            continue;
        }
        let wake = core
            .next_wakeup()
            .map(|t| t.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1));
        tokio::select! {
            input = rx.recv() => match input {
                Some(i) => apply(&mut core, i, &mut synced),
                None => anyhow::bail!("informers stopped"),
            },
            _ = tokio::time::sleep(wake) => {}
        }
    }
}

fn apply(core: &mut Core, input: Input, synced: &mut HashSet<&'static str>) {
    let now = Instant::now();
    match input {
        Input::Pod(p) => core.on_pod(*p, now),
        Input::PodGone(k) => core.on_pod_delete(&k, now),
        Input::Node(n) => core.on_node(*n, now),
        Input::NodeGone(n) => core.on_node_delete(&n),
        Input::Namespace(ns) => core.on_namespace(*ns, now),
        Input::NamespaceGone(n) => core.on_namespace_delete(&n),
        Input::Pdbs(pdbs) => core.set_pdbs(pdbs),
        Input::Synced(what) => {
            synced.insert(what);
        }
        Input::Bound { key, ok, retry } => core.bind_result(&key, ok, retry, now),
    }
}

async fn dispatch(
    client: &Client,
    recorder: &Recorder,
    binds: &Arc<Semaphore>,
    tx: &mpsc::UnboundedSender<Input>,
    action: Action,
) {
    match action {
        Action::Bind { pod, node } => {
            let Ok(permit) = binds.clone().acquire_owned().await else {
                return;
            };
            let (client, recorder, tx) = (client.clone(), recorder.clone(), tx.clone());
            tokio::spawn(async move {
                let (ok, retry) = bind(&client, &pod, &node).await;
                drop(permit);
                if ok {
                    recorder.record(Record::pod(
                        &pod,
                        "Normal",
                        "Scheduled",
                        "Binding",
                        format!("Successfully assigned {} to {node}", pod.key),
                    ));
                }
                let _ = tx.send(Input::Bound {
                    key: pod.key.clone(),
                    ok,
                    retry,
                });
            });
        }
        Action::Failed {
            pod,
            reason,
            message,
            nominated_node,
            victims,
            unnominated,
        } => {
            recorder.record(Record::pod(
                &pod,
                "Warning",
                "FailedScheduling",
                "Scheduling",
                message.clone(),
            ));
            let (client, recorder) = (client.clone(), recorder.clone());
            tokio::spawn(async move {
                update_status(&client, &pod, reason, &message, nominated_node.as_deref()).await;
                for p in &unnominated {
                    let api: Api<Pod> = Api::namespaced(client.clone(), p.namespace());
                    let patch = json!({"status": {"nominatedNodeName": null}});
                    let _ = api
                        .patch_status(p.name(), &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                }
                if let Some(node) = nominated_node {
                    for v in victims.iter().filter(|v| !v.terminating()) {
                        preempt(&client, &recorder, &pod, v, &node).await;
                    }
                }
            });
        }
    }
}

/// POST pods/<name>/binding. Returns (bound, worth retrying).
async fn bind(client: &Client, pod: &PodInfo, node: &str) -> (bool, bool) {
    let api: Api<Pod> = Api::namespaced(client.clone(), pod.namespace());
    let binding = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod.name(), "namespace": pod.namespace(), "uid": pod.uid()},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    match api
        .create_subresource::<_, serde_json::Value>(
            "binding",
            pod.name(),
            &PostParams::default(),
            &binding,
        )
        .await
    {
        Ok(_) => (true, false),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
            tracing::debug!(pod = %pod.key, error = %e.message, "binding refused");
            (false, false)
        }
        Err(e) => {
            tracing::warn!(pod = %pod.key, error = %e, "binding failed");
            (false, true)
        }
    }
}

/// Set the PodScheduled=False condition (and nominatedNodeName) unless already so.
async fn update_status(
    client: &Client,
    pod: &PodInfo,
    reason: &str,
    message: &str,
    nominated: Option<&str>,
) {
    let status = pod.pod().status.as_ref();
    let same = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message)
        });
    let current_nominated = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .unwrap_or("");
    if same && nominated.is_none_or(|n| n == current_nominated) {
        return;
    }
    let mut patch = json!({"status": {"conditions": [{
        "type": "PodScheduled",
        "status": "False",
        "reason": reason,
        "message": message,
        "lastProbeTime": null,
        "lastTransitionTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(crate::events::chrono_now()),
    }]}});
    if let Some(n) = nominated {
        patch["status"]["nominatedNodeName"] = json!(n);
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), pod.namespace());
    if let Err(e) = api
        .patch_status(
            pod.name(),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
    {
        tracing::debug!(pod = %pod.key, error = %e, "updating pod status");
    }
}

/// Evict a victim for `preemptor`: mark it DisruptionTarget, delete it, record Preempted.
async fn preempt(
    client: &Client,
    recorder: &Recorder,
    preemptor: &PodInfo,
    victim: &PodInfo,
    node: &str,
) {
    let api: Api<Pod> = Api::namespaced(client.clone(), victim.namespace());
    let cond = json!({"status": {"conditions": [{
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": format!("{}: preempting to accommodate a higher priority pod", preemptor.scheduler_name()),
        "lastTransitionTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(crate::events::chrono_now()),
    }]}});
    let _ = api
        .patch_status(
            victim.name(),
            &PatchParams::default(),
            &Patch::Strategic(&cond),
        )
        .await;
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: victim.metadata().uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(victim.name(), &dp).await {
        Ok(_) => recorder.record(Record::pod(
            victim,
            "Normal",
            "Preempted",
            "Preempting",
            format!("Preempted by pod {} on node {node}", preemptor.uid()),
        )),
        Err(e) => tracing::debug!(victim = %victim.key, error = %e, "preempting"),
    }
}

fn spawn_informers(client: &Client, tx: &mpsc::UnboundedSender<Input>) {
    let pods: Api<Pod> = Api::all(client.clone());
    let cfg = watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed");
    tokio::spawn(feed(
        watcher::watcher(pods, cfg).default_backoff(),
        tx.clone(),
        "pods",
        |p| Input::Pod(Box::new(slim_pod(p))),
        |p: &Pod| {
            Input::PodGone(format!(
                "{}/{}",
                p.namespace().unwrap_or_default(),
                p.name_any()
            ))
        },
        Input::PodGone,
    ));
    let nodes: Api<Node> = Api::all(client.clone());
    tokio::spawn(feed(
        watcher::watcher(nodes, watcher::Config::default()).default_backoff(),
        tx.clone(),
        "nodes",
        |mut n: Node| {
            n.metadata.managed_fields = None;
            Input::Node(Box::new(n))
        },
        |n: &Node| Input::NodeGone(n.name_any()),
        Input::NodeGone,
    ));
    let nss: Api<Namespace> = Api::all(client.clone());
    tokio::spawn(feed(
        watcher::watcher(nss, watcher::Config::default()).default_backoff(),
        tx.clone(),
        "namespaces",
        |n| Input::Namespace(Box::new(n)),
        |n: &Namespace| Input::NamespaceGone(n.name_any()),
        Input::NamespaceGone,
    ));
    let pdbs: Api<PodDisruptionBudget> = Api::all(client.clone());
    let tx2 = tx.clone();
    tokio::spawn(async move {
        let (reader, writer) = kube::runtime::reflector::store();
        let stream = kube::runtime::reflector(
            writer,
            watcher::watcher(pdbs, watcher::Config::default()).default_backoff(),
        );
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            if ev.is_ok() {
                let all: Vec<PodDisruptionBudget> =
                    reader.state().iter().map(|p| (**p).clone()).collect();
                if tx2.send(Input::Pdbs(all)).is_err() {
                    return;
                }
            }
        }
    });
}

/// A pod without what scheduling never reads, as kube-scheduler's informers drop managed
/// fields: the scheduler keeps every pod of the cluster, and a pod's managedFields (a tree of
/// maps) and container statuses are most of its memory.
fn slim_pod(mut pod: Pod) -> Pod {
    pod.metadata.managed_fields = None;
    if let Some(status) = pod.status.as_mut() {
        status.container_statuses = None;
        status.init_container_statuses = None;
        status.ephemeral_container_statuses = None;
    }
    pod
}

/// Forward one watcher's events; after each (re)list, objects that vanished are reported gone.
async fn feed<K, S>(
    stream: S,
    tx: mpsc::UnboundedSender<Input>,
    what: &'static str,
    apply: fn(K) -> Input,
    gone: fn(&K) -> Input,
    gone_key: fn(String) -> Input,
) where
    K: Resource + Clone,
    S: Stream<Item = Result<WEvent<K>, watcher::Error>>,
{
    futures::pin_mut!(stream);
    let key = |o: &K| {
        let m = o.meta();
        match &m.namespace {
            Some(ns) => format!("{ns}/{}", m.name.as_deref().unwrap_or("")),
            None => m.name.clone().unwrap_or_default(),
        }
    };
    let mut known: HashSet<String> = HashSet::new();
    let mut relist: Option<HashSet<String>> = None;
    while let Some(ev) = stream.next().await {
        let input = match ev {
            Ok(WEvent::Apply(o)) | Ok(WEvent::InitApply(o)) => {
                let k = key(&o);
                if let Some(r) = &mut relist {
                    r.insert(k.clone());
                }
                known.insert(k);
                apply(o)
            }
            Ok(WEvent::Delete(o)) => {
                known.remove(&key(&o));
                gone(&o)
            }
            Ok(WEvent::Init) => {
                relist = Some(HashSet::new());
                continue;
            }
            Ok(WEvent::InitDone) => {
                if let Some(seen) = relist.take() {
                    for k in known.iter().filter(|k| !seen.contains(*k)) {
                        let _ = tx.send(gone_key(k.clone()));
                    }
                    known = seen;
                }
                Input::Synced(what)
            }
            Err(e) => {
                tracing::debug!(resource = what, error = %e, "watch");
                continue;
            }
        };
        if tx.send(input).is_err() {
            return;
        }
    }
}

/// This machine's name (for the event reporter and the leader identity).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slim_pod_keeps_what_scheduling_reads() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"},
                         "managedFields": [{"manager": "m", "operation": "Update",
                                            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i",
                     "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running", "nominatedNodeName": "n2",
                       "startTime": "2026-01-01T00:00:00Z",
                       "conditions": [{"type": "PodScheduled", "status": "True"}],
                       "containerStatuses": [{"name": "c", "image": "i", "imageID": "x",
                                              "ready": true, "restartCount": 0}]},
        }))
        .unwrap();
        let slim = slim_pod(pod.clone());
        assert!(slim.metadata.managed_fields.is_none());
        let status = slim.status.as_ref().unwrap();
        assert!(status.container_statuses.is_none());
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.nominated_node_name.as_deref(), Some("n2"));
        assert_eq!(status.conditions.as_ref().map(Vec::len), Some(1));
        assert!(status.start_time.is_some());
        assert_eq!(slim.spec, pod.spec);
        assert_eq!(slim.metadata.labels, pod.metadata.labels);
    }
}
