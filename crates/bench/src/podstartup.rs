//! `capstan bench podstartup`: Kubernetes' pod start-up latency measurement. Many pods are
//! created at once on one node; each one's latency runs from the moment its create request was
//! sent to the moment a watch sees it Running with every container running. As in Kubernetes'
//! SLO, image pulls are left out: a warm-up pod pulls the image first. With `--kubelet-pid` the
//! kubelet's resident memory is read while all the pods run.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use serde_json::json;

use crate::latency::Latencies;

#[derive(clap::Args, Debug, Clone)]
pub struct PodStartupArgs {
    /// The kubeconfig of the cluster.
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: PathBuf,
    /// How many pods to create at once.
    #[arg(long, default_value_t = 100)]
    pub pods: usize,
    /// The node to run them on (spec.nodeName; the scheduler is left out of the figure).
    #[arg(long)]
    pub node: String,
    /// The image of the pods' one container.
    #[arg(long, default_value = "registry.k8s.io/pause:3.10")]
    pub image: String,
    /// The container's command (none: the image's own).
    #[arg(long, num_args = 1.., value_delimiter = ' ')]
    pub command: Vec<String>,
    /// Create requests in flight at once.
    #[arg(long, default_value_t = 20)]
    pub concurrency: usize,
    /// The kubelet's process id: report its resident memory with every pod running.
    #[arg(long)]
    pub kubelet_pid: Option<u32>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_seconds: u64,
    /// Leave the namespace and its pods in place.
    #[arg(long)]
    pub keep: bool,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct PodStartupMeasurement {
    pub pods: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// From the first create to the last pod Running.
    pub all_running_seconds: f64,
    pub kubelet_rss_mb: Option<f64>,
}

pub async fn run(args: PodStartupArgs) -> Result<()> {
    if args.pods == 0 {
        bail!("--pods must be at least 1");
    }
    let m = measure(&args).await?;
    println!(
        "pod startup, {} pods at once on node {}: p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms; all running after {:.2} s",
        m.pods, args.node, m.p50_ms, m.p90_ms, m.p99_ms, m.max_ms, m.all_running_seconds
    );
    if let Some(rss) = m.kubelet_rss_mb {
        println!("kubelet RSS with {} pods running: {rss:.1} MB", m.pods);
    }
    Ok(())
}

fn pod(name: &str, args: &PodStartupArgs) -> Result<Pod> {
    let mut container =
        json!({"name": "c", "image": args.image, "imagePullPolicy": "IfNotPresent"});
    if !args.command.is_empty() {
        container["command"] = json!(args.command);
    }
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"bench": "podstartup"}},
        "spec": {
            "nodeName": args.node,
            "terminationGracePeriodSeconds": 0,
            "containers": [container],
        },
    }))?)
}

/// Running with every container running.
fn is_running(p: &Pod) -> bool {
    let Some(status) = &p.status else {
        return false;
    };
    if status.phase.as_deref() != Some("Running") {
        return false;
    }
    let statuses = status.container_statuses.as_deref().unwrap_or_default();
    !statuses.is_empty()
        && statuses
            .iter()
            .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

async fn wait_running(pods: &Api<Pod>, name: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(p) = pods.get_opt(name).await? {
            if is_running(&p) {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("pod {name} not running after {} s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn measure(args: &PodStartupArgs) -> Result<PodStartupMeasurement> {
    let client = crate::scheduler::client(&args.kubeconfig).await?;
    let ns = format!("bench-podstartup-{:x}", std::process::id());
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
    )
    .await
    .context("creating the namespace")?;
    let result = measure_in(args, client, &ns).await;
    if !args.keep {
        let _ = nss.delete(&ns, &DeleteParams::default()).await;
        // Until its pods are gone the node still counts them (they are terminating), and
        // a run right after this one would find the node full.
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline && matches!(nss.get_opt(&ns).await, Ok(Some(_))) {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    result
}

async fn measure_in(
    args: &PodStartupArgs,
    client: kube::Client,
    ns: &str,
) -> Result<PodStartupMeasurement> {
    let timeout = Duration::from_secs(args.timeout_seconds);
    let pods: Api<Pod> = Api::namespaced(client, ns);
    // The service account admission needs the namespace's default account.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match pods
            .create(&PostParams::default(), &pod("warm-up", args)?)
            .await
        {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "warm-up pod not created yet");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e).context("creating the warm-up pod"),
        }
    }
    wait_running(&pods, "warm-up", timeout)
        .await
        .context("the warm-up pod (it pulls the image)")?;
    pods.delete("warm-up", &DeleteParams::default().grace_period(0))
        .await
        .context("deleting the warm-up pod")?;

    // Watch from now on: the first time each pod is seen running.
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let watch_api = pods.clone();
    let watch = tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher::watcher(
            watch_api,
            watcher::Config::default().labels("bench=podstartup")
        )
        .default_backoff());
        while let Some(ev) = stream.next().await {
            if let Err(e) = &ev {
                tracing::warn!(error = %e, "pod watch failed; retrying");
            }
            if let Ok(Event::Apply(p) | Event::InitApply(p)) = ev {
                if is_running(&p) {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    if tx.send((name, Instant::now())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let start = Instant::now();
    let bodies = (0..args.pods)
        .map(|i| {
            let name = format!("p-{i:05}");
            pod(&name, args).map(|body| (name, body))
        })
        .collect::<Result<Vec<(String, Pod)>>>()?;
    let (create_api, create_sent) = (pods.clone(), sent.clone());
    let creates = futures::stream::iter(bodies)
        .map(move |(name, body)| {
            let pods = create_api.clone();
            let sent = create_sent.clone();
            async move {
                sent.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name.clone(), Instant::now());
                pods.create(&PostParams::default(), &body)
                    .await
                    .with_context(|| format!("creating pod {name}"))
                    .map(|_| ())
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect::<Vec<Result<()>>>();
    let created = tokio::spawn(creates);

    let deadline = start + timeout;
    let mut running: HashMap<String, Instant> = HashMap::new();
    while running.len() < args.pods {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some((name, at))) if name != "warm-up" => {
                running.entry(name).or_insert(at);
            }
            Ok(Some(_)) => {}
            _ => {
                watch.abort();
                bail!(
                    "only {} of {} pods running after {} s",
                    running.len(),
                    args.pods,
                    args.timeout_seconds
                );
            }
        }
    }
    watch.abort();
    for r in created.await.context("the create task")? {
        r?;
    }
    let kubelet_rss_mb = args.kubelet_pid.and_then(crate::controllers::rss_mb);

    let sent = sent.lock().unwrap_or_else(|e| e.into_inner());
    let mut latencies = Latencies::with_capacity(args.pods);
    let mut nanos = Vec::with_capacity(args.pods);
    let mut last = start;
    for (name, at) in &running {
        let from = sent.get(name).copied().unwrap_or(start);
        let d = at.saturating_duration_since(from);
        latencies.record(d);
        nanos.push(d.as_nanos() as u64);
        last = last.max(*at);
    }
    nanos.sort_unstable();
    let p90 = nanos
        .get(((nanos.len() as f64 * 0.9).ceil() as usize).clamp(1, nanos.len().max(1)) - 1)
        .copied()
        .unwrap_or(0);
    let s = latencies.summary();
    Ok(PodStartupMeasurement {
        pods: args.pods,
        p50_ms: s.p50_ms,
        p90_ms: p90 as f64 / 1e6,
        p99_ms: s.p99_ms,
        max_ms: s.max_ms,
        all_running_seconds: last.duration_since(start).as_secs_f64(),
        kubelet_rss_mb,
    })
}
