//! `capstan bench scheduler`: how fast pods get bound.
//! - `--mode api` (any kubeconfig): creates fake nodes (Node objects only) and pods through the
//!   API and measures pods/s from the first create to the last pod seen bound (by watching);
//! - `--mode cycle`: the scheduling cycle alone, in process, with the default profile and the
//!   binding treated as instant.

use std::collections::HashSet;
use std::path::PathBuf;

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::core::{Request, WatchEvent};
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::{json, Value};

use capstan_scheduler::config::{build_profiles, default_config};
use capstan_scheduler::core::{Action, Core};
use capstan_scheduler::queue::SchedulingQueue;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Through the API of a running cluster (its scheduler does the work).
    Api,
    /// The scheduling cycle in process.
    Cycle,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// Pods with CPU and memory requests only.
    Basic,
    /// 30 apps; each app's pods repel each other per node (required anti-affinity) and spread
    /// over zones (topology spread, maxSkew 1).
    Spread,
}

#[derive(clap::Args, Debug, Clone)]
pub struct SchedulerArgs {
    #[arg(long, value_enum, default_value = "cycle")]
    pub mode: Mode,
    #[arg(long, value_enum, default_value = "basic")]
    pub workload: Workload,
    #[arg(long, default_value_t = 5000)]
    pub nodes: usize,
    #[arg(long, default_value_t = 10_000)]
    pub pods: usize,
    /// The kubeconfig of the cluster (api mode).
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Concurrent pod creators (api mode).
    #[arg(long, default_value_t = 32)]
    pub clients: usize,
    /// Give up waiting for pods to be bound after this long (api mode).
    #[arg(long, default_value = "300")]
    pub timeout_seconds: u64,
}

pub async fn run(args: SchedulerArgs) -> Result<()> {
    if args.nodes == 0 || args.pods == 0 {
        bail!("--nodes and --pods must be at least 1");
    }
    match args.mode {
        Mode::Cycle => {
            let r = cycle(args.workload, args.nodes, args.pods)?;
            println!(
                "scheduler cycle ({:?}): {} nodes, {} pods: {} scheduled, {} unschedulable in {:.3} s = {:.0} pods/s",
                args.workload, args.nodes, args.pods, r.scheduled, r.unschedulable, r.seconds, r.pods_per_second
            );
        }
        Mode::Api => {
            let r = on_one_thread(&args).await?;
            println!(
                "scheduler via API ({:?}): {} nodes, {} pods: created in {:.2} s, all bound after {:.2} s = {:.0} pods/s end to end",
                args.workload, args.nodes, args.pods, r.created_seconds, r.seconds, r.pods_per_second
            );
        }
    }
    Ok(())
}

/// The api mode on a runtime of its own with one thread: the harness shares the machine with
/// the cluster it measures, and its 32 connections on one thread cost it about a third less
/// than on the default runtime, whose worker threads keep waking one another.
async fn on_one_thread(args: &SchedulerArgs) -> Result<SchedulerMeasurement> {
    let args = args.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("bench-scheduler".into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the harness's runtime")
                .and_then(|rt| rt.block_on(through_api(&args)));
            let _ = tx.send(result);
        })
        .context("starting the harness's thread")?;
    rx.await.context("the harness's thread stopped")?
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct SchedulerMeasurement {
    pub scheduled: usize,
    pub unschedulable: usize,
    pub seconds: f64,
    pub created_seconds: f64,
    pub pods_per_second: f64,
}

/// What the api mode reads of a watched pod.
#[derive(Clone, Debug, Deserialize)]
struct BoundPod {
    metadata: BoundPodMeta,
    #[serde(default)]
    spec: BoundPodSpec,
}

#[derive(Clone, Debug, Deserialize)]
struct BoundPodMeta {
    name: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct BoundPodSpec {
    #[serde(rename = "nodeName")]
    node_name: Option<String>,
}

/// A fake node: 32 CPUs, 128 GiB, 110 pods, in one of 10 zones.
pub fn node_json(i: usize, run: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": format!("bench-node-{i}"),
            "labels": {
                "kubernetes.io/hostname": format!("bench-node-{i}"),
                "topology.kubernetes.io/zone": format!("zone-{}", i % 10),
                "capstan.dev/bench": run,
            },
        },
        "status": {
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}],
        },
    })
}

/// A pending pod of the workload.
pub fn pod_json(i: usize, ns: &str, workload: Workload) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("pod-{i}"), "namespace": ns, "labels": {"app": format!("app-{}", i % 30)}},
        "spec": {
            "containers": [{
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            }],
        },
    });
    if workload == Workload::Spread {
        let app = format!("app-{}", i % 30);
        pod["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": app}},
            "topologyKey": "kubernetes.io/hostname",
        }]}});
        pod["spec"]["topologySpreadConstraints"] = json!([{
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
        }]);
    }
    pod
}

/// The scheduling cycle alone: every decision of `pods` pods over `nodes` nodes.
pub fn cycle(workload: Workload, nodes: usize, pods: usize) -> Result<SchedulerMeasurement> {
    let profiles = build_profiles(&default_config()).map_err(|e| anyhow!(e))?;
    let mut core = Core::new(
        profiles,
        SchedulingQueue::new(Duration::from_secs(1), Duration::from_secs(10)),
    );
    core.seed(1);
    let now = Instant::now();
    for i in 0..nodes {
        let n: Node = serde_json::from_value(node_json(i, "cycle"))?;
        core.on_node(n, now);
    }
    let mut ns = k8s_openapi::api::core::v1::Namespace::default();
    ns.metadata.name = Some("bench".into());
    core.on_namespace(ns, now);
    for i in 0..pods {
        let mut p: Pod = serde_json::from_value(pod_json(i, "bench", workload))?;
        p.metadata.uid = Some(format!("uid-{i}"));
        core.on_pod(p, now);
    }
    let (mut scheduled, mut unschedulable) = (0, 0);
    let started = Instant::now();
    while let Some(action) = core.schedule_one(now) {
        match action {
            Action::Bind { pod, .. } => {
                scheduled += 1;
                core.bind_result(&pod.key, true, false, now);
            }
            Action::Failed { .. } => unschedulable += 1,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(SchedulerMeasurement {
        scheduled,
        unschedulable,
        seconds,
        created_seconds: 0.0,
        pods_per_second: (scheduled + unschedulable) as f64 / seconds.max(1e-9),
    })
}

pub(crate) async fn client(path: &PathBuf) -> Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("cannot use the kubeconfig {}", path.display()))?;
    Client::try_from(config).context("building the client")
}

/// Nodes and pods through the API; the cluster's scheduler binds them.
pub async fn through_api(args: &SchedulerArgs) -> Result<SchedulerMeasurement> {
    let path = args
        .kubeconfig
        .as_ref()
        .ok_or_else(|| anyhow!("api mode needs --kubeconfig PATH (or KUBECONFIG)"))?;
    let client = client(path).await?;
    let run = format!(
        "{:x}",
        std::process::id() as u64 * 7919 + Instant::now().elapsed().as_nanos() as u64
    );
    let ns = format!("bench-scheduler-{run}");
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
    )
    .await
    .context("creating the namespace")?;
    let nodes: Api<Node> = Api::all(client.clone());
    let result = measure(args, &client, &ns, &run).await;
    // Clean up whatever happened.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let _ = pods
        .delete_collection(
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
            &ListParams::default(),
        )
        .await;
    let _ = nodes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("capstan.dev/bench={run}")),
        )
        .await;
    let _ = nss.delete(&ns, &DeleteParams::default()).await;
    result
}

async fn measure(
    args: &SchedulerArgs,
    client: &Client,
    ns: &str,
    run: &str,
) -> Result<SchedulerMeasurement> {
    let nodes: Api<Node> = Api::all(client.clone());
    futures::stream::iter(0..args.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let n: Node = serde_json::from_value(node_json(i, run))?;
                nodes
                    .create(&PostParams::default(), &n)
                    .await
                    .context("creating a node")?;
                // Admission taints new nodes not-ready until a node controller sees them
                // Ready; no controller looks after these, so lift it here.
                let patch = json!({"spec": {"taints": null}});
                nodes
                    .patch(
                        &format!("bench-node-{i}"),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .context("untainting a node")?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.clients)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    // Watch for bindings before the first pod exists. The harness shares the machine with the
    // cluster, so it watches only bound pods (a field selector: each pod arrives once, when it
    // is bound, not also when it is created), reads only what it needs of each event (the
    // pod's name and node) and sends bodies encoded up front without parsing the answers.
    let want = args.pods;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Instant>();
    let collection = format!("/api/v1/namespaces/{ns}/pods");
    let watch = Request::new(&collection)
        .watch(
            &WatchParams::default()
                .fields("spec.nodeName!=")
                .timeout(290),
            "0",
        )
        .context("building the watch")?;
    let mut events = client
        .request_events::<BoundPod>(watch)
        .await
        .context("watching pods")?
        .boxed();
    let watching = tokio::spawn(async move {
        let mut bound: HashSet<String> = HashSet::new();
        while let Some(ev) = events.next().await {
            let pod = match ev {
                Ok(WatchEvent::Added(p)) | Ok(WatchEvent::Modified(p)) => p,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "pod watch failed");
                    return;
                }
            };
            if pod.spec.node_name.is_some() {
                bound.insert(pod.metadata.name);
                if bound.len() >= want {
                    let _ = done_tx.send(Instant::now());
                    return;
                }
            }
        }
    });
    let bodies = (0..args.pods)
        .map(|i| {
            let create = Request::new(&collection)
                .create(
                    &PostParams::default(),
                    serde_json::to_vec(&pod_json(i, ns, args.workload))?,
                )
                .context("building a create")?;
            anyhow::Ok(create)
        })
        .collect::<Result<Vec<_>>>()?;
    let started = Instant::now();
    futures::stream::iter(bodies)
        .map(|create| {
            let client = client.clone();
            async move {
                client
                    .request_text(create)
                    .await
                    .context("creating a pod")?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.clients)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    let created = started.elapsed().as_secs_f64();
    let finished = tokio::time::timeout(Duration::from_secs(args.timeout_seconds), done_rx).await;
    watching.abort();
    let finished = match finished {
        Ok(Ok(t)) => t,
        _ => bail!(
            "not all {} pods were bound within {} s",
            args.pods,
            args.timeout_seconds
        ),
    };
    let seconds = finished.duration_since(started).as_secs_f64();
    Ok(SchedulerMeasurement {
        scheduled: args.pods,
        unschedulable: 0,
        seconds,
        created_seconds: created,
        pods_per_second: args.pods as f64 / seconds.max(1e-9),
    })
}
