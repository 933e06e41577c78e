//! `capstan bench density`: Kubernetes' density and load test (clusterloader2's idea) against
//! any cluster. On nodes that are already there — hollow ones from `capstan bench nodes` or
//! `capstan bench hollow`, or real ones — it creates `--pods-per-node` pods per node through
//! Deployments spread over namespaces, waits until every pod is Running, then churns (scales
//! every Deployment to half and back, then rolls every Deployment to a new template), and
//! judges the run by Kubernetes' scalability SLOs:
//! - API call latency, from the API server's own `apiserver_request_duration_seconds`
//!   histograms over the run (as clusterloader2 reads them): p99 ≤ 1 s for mutating calls and
//!   single-object reads, ≤ 5 s for namespace lists, ≤ 30 s for cluster lists;
//! - pod start-up latency, from a pod's creationTimestamp to a watch seeing it Running:
//!   p99 ≤ 5 s;
//! - plus the control plane's CPU time and peak resident memory (`process_*` from /metrics,
//!   and `/proc` of the processes named with `--pid`).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use futures::{StreamExt, TryStreamExt};
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::core::{Request, WatchEvent};
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Mutex;

use crate::latency::Latencies;

/// The label every object of a run carries (its value is the run's id).
const RUN_LABEL: &str = "capstan.dev/density";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Churn {
    /// Scale every Deployment to half its replicas, then back.
    Scale,
    /// Roll every Deployment to a new pod template.
    Update,
    /// No churn.
    None,
}

#[derive(clap::Args, Debug, Clone)]
pub struct DensityArgs {
    /// The kubeconfig of the cluster (an identity that may create namespaces and Deployments
    /// and read /metrics, as cluster-admin may).
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: PathBuf,
    /// The Ready nodes the run waits for (start them first, e.g. `capstan bench nodes --count
    /// N`); pods are created for this many nodes.
    #[arg(long, default_value_t = 5000)]
    pub nodes: usize,
    #[arg(long, default_value_t = 30)]
    pub pods_per_node: usize,
    /// Replicas of each Deployment (the last one takes what is left).
    #[arg(long, default_value_t = 250)]
    pub deployment_size: usize,
    /// Namespaces the Deployments are spread over.
    #[arg(long, default_value_t = 50)]
    pub namespaces: usize,
    /// Deployments created (and patched) at once.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// The churn after every pod is Running (comma-separated, in this order).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "scale,update"
    )]
    pub churn: Vec<Churn>,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout_seconds: u64,
    /// Control-plane processes on this machine whose CPU time and peak memory to report
    /// (comma-separated process ids); /metrics' own process figures are reported anyway.
    #[arg(long, value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// How often to sample the control plane's memory.
    #[arg(long, default_value = "2s", value_parser = crate::duration::parse_duration)]
    pub sample_interval: Duration,
    /// Leave the namespaces and their pods in place.
    #[arg(long)]
    pub keep: bool,
    /// Also print the result as one JSON line (for `capstan bench report`).
    #[arg(long)]
    pub json: bool,
    /// The name of the system measured, in the JSON line.
    #[arg(long, default_value = "capstan")]
    pub label: String,
}

pub async fn run(args: DensityArgs) -> Result<()> {
    validate(&args)?;
    let result = measure(&args).await?;
    print!("{}", result.text());
    if args.json {
        println!("{}", result.json(&args.label));
    }
    Ok(())
}

fn validate(args: &DensityArgs) -> Result<()> {
    if args.nodes == 0 || args.pods_per_node == 0 {
        bail!("--nodes and --pods-per-node must be at least 1");
    }
    if args.deployment_size == 0 || args.namespaces == 0 || args.clients == 0 {
        bail!("--deployment-size, --namespaces and --clients must be at least 1");
    }
    if args.churn.contains(&Churn::None) && args.churn.len() > 1 {
        bail!("--churn none cannot be combined with other churn");
    }
    Ok(())
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct DensityResult {
    pub nodes: usize,
    pub pods: usize,
    pub deployments: usize,
    pub namespaces: usize,
    /// From the first Deployment create to the last pod seen Running.
    pub all_running_seconds: f64,
    /// Pod start-up, creationTimestamp → Running seen by the watch (Kubernetes' SLI; the
    /// timestamp has whole seconds, so this reads up to 1 s high).
    pub startup: StartupSummary,
    /// First seen by the watch → Running seen by the watch.
    pub startup_watched: StartupSummary,
    /// Churn phases: (what, seconds).
    pub churn: Vec<(String, f64)>,
    /// API calls over the whole run, per verb/resource/scope.
    pub api: Vec<ApiCall>,
    pub control_plane: ControlPlane,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StartupSummary {
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

/// The control plane's resources over the run.
#[derive(Debug, Clone, Default)]
pub struct ControlPlane {
    /// From the API server's /metrics: CPU seconds over the run and the most resident memory
    /// sampled.
    pub metrics_cpu_seconds: Option<f64>,
    pub metrics_peak_rss_bytes: Option<f64>,
    /// From /proc of the --pid processes: CPU seconds over the run and the sum of their peak
    /// resident memory (VmHWM).
    pub proc_cpu_seconds: Option<f64>,
    pub proc_peak_rss_bytes: Option<f64>,
    pub seconds: f64,
}

/// One kind of API call over the run.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiCall {
    pub key: HistKey,
    pub count: f64,
    pub p99_seconds: f64,
    /// Kubernetes' SLO for this call, in seconds.
    pub slo_seconds: f64,
}

impl ApiCall {
    pub fn met(&self) -> bool {
        self.p99_seconds <= self.slo_seconds
    }
}

impl DensityResult {
    /// Whether every SLO was met (API calls and pod start-up).
    pub fn slos_met(&self) -> bool {
        self.api.iter().all(ApiCall::met) && self.startup.p99_ms <= 5000.0
    }

    pub fn text(&self) -> String {
        let mut out = format!(
            "density: {} pods ({} per node on {} nodes) in {} Deployments over {} namespaces\n",
            self.pods,
            self.pods / self.nodes.max(1),
            self.nodes,
            self.deployments,
            self.namespaces
        );
        out.push_str(&format!(
            "  all pods Running {:.1} s after the first Deployment was created = {:.0} pods/s\n",
            self.all_running_seconds,
            self.pods as f64 / self.all_running_seconds.max(1e-9)
        ));
        let s = self.startup;
        out.push_str(&format!(
            "  pod start-up (creationTimestamp → Running watched): p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms over {} pods — SLO p99 ≤ 5 s: {}\n",
            s.p50_ms, s.p90_ms, s.p99_ms, s.count, verdict(s.p99_ms <= 5000.0)
        ));
        let w = self.startup_watched;
        out.push_str(&format!(
            "  pod start-up (first watched → Running watched): p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms\n",
            w.p50_ms, w.p90_ms, w.p99_ms
        ));
        for (what, secs) in &self.churn {
            out.push_str(&format!("  churn: {what}: {secs:.1} s\n"));
        }
        let cp = &self.control_plane;
        let mb = |b: f64| b / 1048576.0;
        if let (Some(cpu), Some(rss)) = (cp.metrics_cpu_seconds, cp.metrics_peak_rss_bytes) {
            out.push_str(&format!(
                "  API server process (/metrics): {cpu:.1} CPU s over {:.1} s ({:.2} cores), peak RSS {:.0} MB\n",
                cp.seconds,
                cpu / cp.seconds.max(1e-9),
                mb(rss)
            ));
        }
        if let (Some(cpu), Some(rss)) = (cp.proc_cpu_seconds, cp.proc_peak_rss_bytes) {
            out.push_str(&format!(
                "  --pid processes: {cpu:.1} CPU s ({:.2} cores), peak RSS (VmHWM summed) {:.0} MB\n",
                cpu / cp.seconds.max(1e-9),
                mb(rss)
            ));
        }
        let failed = self.api.iter().filter(|c| !c.met()).count();
        out.push_str(&format!(
            "  API calls over the run (API server histograms), p99 against the SLO — {}:\n",
            if failed == 0 {
                "all met".to_string()
            } else {
                format!("{failed} NOT met")
            }
        ));
        for c in &self.api {
            let (verb, resource, sub, scope) = &c.key;
            let resource = if sub.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{sub}")
            };
            out.push_str(&format!(
                "    {verb:<7} {resource:<32} {scope:<9} {:>9} calls  p99 {:>8.1} ms  (SLO {:>5.0} ms) {}\n",
                c.count,
                c.p99_seconds * 1000.0,
                c.slo_seconds * 1000.0,
                verdict(c.met())
            ));
        }
        out.push_str(&format!(
            "  every SLO: {}\n",
            if self.slos_met() { "met" } else { "NOT met" }
        ));
        out
    }

    pub fn json(&self, label: &str) -> Value {
        let cp = &self.control_plane;
        json!({
            "benchmark": "density",
            "label": label,
            "nodes": self.nodes,
            "pods": self.pods,
            "deployments": self.deployments,
            "namespaces": self.namespaces,
            "all_running_seconds": self.all_running_seconds,
            "pods_per_s": self.pods as f64 / self.all_running_seconds.max(1e-9),
            "p50_ms": self.startup.p50_ms,
            "p90_ms": self.startup.p90_ms,
            "p99_ms": self.startup.p99_ms,
            "watched_p99_ms": self.startup_watched.p99_ms,
            "rss_bytes": cp.proc_peak_rss_bytes.or(cp.metrics_peak_rss_bytes),
            "metrics_peak_rss_bytes": cp.metrics_peak_rss_bytes,
            "metrics_cpu_seconds": cp.metrics_cpu_seconds,
            "proc_peak_rss_bytes": cp.proc_peak_rss_bytes,
            "proc_cpu_seconds": cp.proc_cpu_seconds,
            "seconds": cp.seconds,
            "churn": self.churn.iter().map(|(w, s)| json!({"phase": w, "seconds": s})).collect::<Vec<_>>(),
            "api": self.api.iter().map(|c| json!({
                "verb": c.key.0, "resource": c.key.1, "subresource": c.key.2, "scope": c.key.3,
                "count": c.count, "p99_ms": c.p99_seconds * 1000.0, "slo_ms": c.slo_seconds * 1000.0,
                "met": c.met(),
            })).collect::<Vec<_>>(),
            "slos_met": self.slos_met(),
        })
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

// ---- the run ----

pub async fn measure(args: &DensityArgs) -> Result<DensityResult> {
    validate(args)?;
    let client = crate::scheduler::client(&args.kubeconfig).await?;
    let timeout = Duration::from_secs(args.timeout_seconds);
    wait_for_nodes(&client, args.nodes, timeout).await?;

    let run = format!(
        "{:x}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
            & 0xffffff
    );
    let total = args.nodes * args.pods_per_node;
    let sizes = deployment_sizes(total, args.deployment_size);
    let namespaces: Vec<String> = (0..args.namespaces.min(sizes.len()))
        .map(|i| format!("density-{run}-{i}"))
        .collect();
    let deployments: Vec<(String, String, usize)> = sizes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                namespaces[i % namespaces.len()].clone(),
                format!("d-{i}"),
                *n,
            )
        })
        .collect();

    let before = scrape(&client).await.context("reading /metrics")?;
    let sampler = Sampler::start(client.clone(), args.pid.clone(), args.sample_interval);
    let started = Instant::now();

    let tracker = Arc::new(Mutex::new(Tracker::default()));
    let watch = tokio::spawn(watch_pods(
        client.clone(),
        format!("{RUN_LABEL}={run}"),
        tracker.clone(),
    ));
    // The watch lists first: wait until it has.
    let ready_by = Instant::now() + Duration::from_secs(30);
    while !tracker.lock().unwrap().synced {
        if Instant::now() > ready_by {
            bail!("the pod watch did not start within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let outcome = async {
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        for ns in &namespaces {
            nss.create(
                &PostParams::default(),
                &serde_json::from_value(
                    json!({"metadata": {"name": ns, "labels": {RUN_LABEL: run}}}),
                )?,
            )
            .await
            .with_context(|| format!("creating namespace {ns}"))?;
        }
        let create_started = SystemTime::now();
        futures::stream::iter(deployments.iter().map(|(ns, name, n)| {
            let client = client.clone();
            let run = run.clone();
            async move {
                let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client, ns);
                api.create(
                    &PostParams::default(),
                    &serde_json::from_value(deployment(name, &run, *n))?,
                )
                .await
                .with_context(|| format!("creating Deployment {ns}/{name}"))
            }
        }))
        .buffer_unordered(args.clients)
        .try_collect::<Vec<_>>()
        .await?;
        wait_pods(&tracker, total, timeout, "every pod Running").await?;
        let (startup, watched, last_running) = tracker.lock().unwrap().startup();
        let all_running_seconds = last_running
            .and_then(|t| t.duration_since(create_started).ok())
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);

        let mut churn = Vec::new();
        for c in &args.churn {
            match c {
                Churn::Scale => {
                    let half: Vec<usize> = deployments.iter().map(|d| d.2 / 2).collect();
                    let t = Instant::now();
                    scale(&client, &deployments, &half, args.clients).await?;
                    wait_pods(&tracker, half.iter().sum(), timeout, "scaled to half").await?;
                    churn.push((
                        "scale every Deployment to half".to_string(),
                        t.elapsed().as_secs_f64(),
                    ));
                    let full: Vec<usize> = deployments.iter().map(|d| d.2).collect();
                    let t = Instant::now();
                    scale(&client, &deployments, &full, args.clients).await?;
                    wait_pods(&tracker, total, timeout, "scaled back").await?;
                    churn.push((
                        "scale every Deployment back".to_string(),
                        t.elapsed().as_secs_f64(),
                    ));
                }
                Churn::Update => {
                    let t = Instant::now();
                    roll(&client, &deployments, args.clients).await?;
                    wait_rolled(&client, &run, &tracker, total, timeout).await?;
                    churn.push((
                        "roll every Deployment to a new template".to_string(),
                        t.elapsed().as_secs_f64(),
                    ));
                }
                Churn::None => {}
            }
        }
        anyhow::Ok((startup, watched, all_running_seconds, churn))
    }
    .await;
    watch.abort();
    let seconds = started.elapsed().as_secs_f64();
    let samples = sampler.stop().await;
    let after = scrape(&client).await.context("reading /metrics")?;
    if !args.keep {
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        for ns in &namespaces {
            let _ = nss.delete(ns, &Default::default()).await;
        }
    }
    let (startup, startup_watched, all_running_seconds, churn) = outcome?;

    let api = api_calls(&after.histograms.delta(&before.histograms));
    let control_plane = ControlPlane {
        metrics_cpu_seconds: after
            .cpu_seconds
            .zip(before.cpu_seconds)
            .map(|(a, b)| a - b),
        metrics_peak_rss_bytes: samples.metrics_peak_rss,
        proc_cpu_seconds: samples.proc_cpu_seconds,
        proc_peak_rss_bytes: samples.proc_peak_rss,
        seconds,
    };
    Ok(DensityResult {
        nodes: args.nodes,
        pods: total,
        deployments: deployments.len(),
        namespaces: namespaces.len(),
        all_running_seconds,
        startup,
        startup_watched,
        churn,
        api,
        control_plane,
    })
}

/// Replicas of each Deployment: `size` each, the last one what is left.
pub fn deployment_sizes(total: usize, size: usize) -> Vec<usize> {
    let mut out = vec![size; total / size];
    if !total.is_multiple_of(size) {
        out.push(total % size);
    }
    out
}

fn deployment(name: &str, run: &str, replicas: usize) -> Value {
    json!({
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, RUN_LABEL: run}},
                "spec": {
                    "containers": [{
                        "name": "pause",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "10m", "memory": "10Mi"}},
                    }],
                    "terminationGracePeriodSeconds": 1,
                },
            },
        },
    })
}

async fn scale(
    client: &Client,
    deployments: &[(String, String, usize)],
    replicas: &[usize],
    clients: usize,
) -> Result<()> {
    futures::stream::iter(deployments.iter().zip(replicas).map(|((ns, name, _), n)| {
        let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), ns);
        async move {
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"replicas": n}})),
            )
            .await
            .with_context(|| format!("scaling Deployment {ns}/{name}"))
        }
    }))
    .buffer_unordered(clients)
    .try_collect::<Vec<_>>()
    .await?;
    Ok(())
}

async fn roll(
    client: &Client,
    deployments: &[(String, String, usize)],
    clients: usize,
) -> Result<()> {
    futures::stream::iter(deployments.iter().map(|(ns, name, _)| {
        let api: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(client.clone(), ns);
        async move {
            let patch = json!({"spec": {"template": {"metadata": {"annotations": {"capstan.dev/density-rollout": "1"}}}}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("updating Deployment {ns}/{name}"))
        }
    }))
    .buffer_unordered(clients)
    .try_collect::<Vec<_>>()
    .await?;
    Ok(())
}

/// Wait until exactly `want` pods of the run exist (not being deleted), all of them Running.
async fn wait_pods(
    tracker: &Mutex<Tracker>,
    want: usize,
    timeout: Duration,
    what: &str,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let (live, running) = tracker.lock().unwrap().counts();
        if live == want && running == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{what}: after {} s {live} pods exist and {running} are Running; {want} wanted",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[derive(Deserialize)]
struct DeploymentStatusOnly {
    metadata: MiniMeta,
    #[serde(default)]
    spec: DeploymentSpecOnly,
    #[serde(default)]
    status: DeploymentStatusFields,
}

#[derive(Deserialize, Default)]
struct DeploymentSpecOnly {
    #[serde(default)]
    replicas: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct DeploymentStatusFields {
    #[serde(default)]
    observed_generation: i64,
    #[serde(default)]
    replicas: i64,
    #[serde(default)]
    updated_replicas: i64,
    #[serde(default)]
    available_replicas: i64,
}

#[derive(Deserialize)]
struct DeploymentList {
    items: Vec<DeploymentStatusOnly>,
}

/// Wait until every Deployment of the run has rolled out its new template and the run's pods
/// are all Running again.
async fn wait_rolled(
    client: &Client,
    run: &str,
    tracker: &Mutex<Tracker>,
    want: usize,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={run}"));
    let request = Request::new("/apis/apps/v1/deployments")
        .list(&lp)
        .map_err(|e| anyhow::anyhow!("building a list request: {e}"))?;
    loop {
        let list: DeploymentList = client
            .request(clone_request(&request))
            .await
            .context("listing Deployments")?;
        let pending = list
            .items
            .iter()
            .filter(|d| {
                let want = d.spec.replicas.unwrap_or(1);
                d.status.observed_generation < d.metadata.generation.unwrap_or(0)
                    || d.status.updated_replicas != want
                    || d.status.replicas != want
                    || d.status.available_replicas != want
            })
            .count();
        let (live, running) = tracker.lock().unwrap().counts();
        if pending == 0 && live == want && running == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "rolling update: after {} s {pending} Deployments have not rolled out; {live} pods exist, {running} Running",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn clone_request(r: &http::Request<Vec<u8>>) -> http::Request<Vec<u8>> {
    let mut out = http::Request::new(r.body().clone());
    *out.method_mut() = r.method().clone();
    *out.uri_mut() = r.uri().clone();
    *out.headers_mut() = r.headers().clone();
    out
}

#[derive(Deserialize)]
struct NodeList {
    items: Vec<MiniNode>,
}

#[derive(Deserialize)]
struct MiniNode {
    #[serde(default)]
    spec: MiniNodeSpec,
    #[serde(default)]
    status: MiniNodeStatus,
}

#[derive(Deserialize, Default)]
struct MiniNodeSpec {
    #[serde(default)]
    unschedulable: bool,
}

#[derive(Deserialize, Default)]
struct MiniNodeStatus {
    #[serde(default)]
    conditions: Vec<MiniCondition>,
}

#[derive(Deserialize)]
struct MiniCondition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
}

async fn wait_for_nodes(client: &Client, want: usize, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let request = Request::new("/api/v1/nodes")
        .list(&ListParams::default())
        .map_err(|e| anyhow::anyhow!("building a list request: {e}"))?;
    loop {
        let list: NodeList = client
            .request(clone_request(&request))
            .await
            .context("listing nodes")?;
        let ready = list
            .items
            .iter()
            .filter(|n| {
                !n.spec.unschedulable
                    && n.status
                        .conditions
                        .iter()
                        .any(|c| c.kind == "Ready" && c.status == "True")
            })
            .count();
        if ready >= want {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "only {ready} of the {want} nodes wanted are Ready after {} s (start them first, e.g. `capstan bench nodes --count {want}`)",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

// ---- watching the run's pods ----

#[derive(Clone, Debug, Deserialize)]
struct MiniPod {
    metadata: MiniMeta,
    #[serde(default)]
    status: Option<MiniPodStatus>,
}

#[derive(Clone, Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MiniMeta {
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    creation_timestamp: Option<String>,
    #[serde(default)]
    deletion_timestamp: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
}

#[derive(Clone, Debug, Deserialize)]
struct MiniPodStatus {
    #[serde(default)]
    phase: Option<String>,
}

#[derive(Deserialize)]
struct PodList {
    metadata: MiniMeta,
    items: Vec<MiniPod>,
}

/// What the watch knows of one pod.
#[derive(Debug, Clone)]
struct Tracked {
    created: Option<SystemTime>,
    first_seen: SystemTime,
    running_seen: Option<SystemTime>,
    running: bool,
    terminating: bool,
}

/// The run's pods as the watch sees them.
#[derive(Debug, Default)]
struct Tracker {
    pods: HashMap<String, Tracked>,
    /// Start-up latencies of pods since deleted (kept for the figures).
    done: Vec<Tracked>,
    synced: bool,
}

impl Tracker {
    fn observe(&mut self, pod: &MiniPod, deleted: bool, now: SystemTime) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        if deleted {
            if let Some(t) = self.pods.remove(&uid) {
                self.done.push(t);
            }
            return;
        }
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let t = self.pods.entry(uid).or_insert_with(|| Tracked {
            created: pod
                .metadata
                .creation_timestamp
                .as_deref()
                .and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(SystemTime::from),
            first_seen: now,
            running_seen: None,
            running: false,
            terminating: false,
        });
        t.running = running;
        if running && t.running_seen.is_none() {
            t.running_seen = Some(now);
        }
        t.terminating = pod.metadata.deletion_timestamp.is_some();
    }

    /// (pods not being deleted, those of them Running).
    fn counts(&self) -> (usize, usize) {
        let live = self.pods.values().filter(|t| !t.terminating);
        let (mut n, mut running) = (0, 0);
        for t in live {
            n += 1;
            running += usize::from(t.running);
        }
        (n, running)
    }

    /// Start-up latencies of every pod seen Running (creationTimestamp-based, watch-based) and
    /// when the last one was.
    fn startup(&self) -> (StartupSummary, StartupSummary, Option<SystemTime>) {
        let mut from_created = Latencies::default();
        let mut from_seen = Latencies::default();
        let mut last = None;
        for t in self.pods.values().chain(&self.done) {
            let Some(running) = t.running_seen else {
                continue;
            };
            if last.is_none_or(|l| running > l) {
                last = Some(running);
            }
            if let Some(c) = t.created {
                from_created.record(running.duration_since(c).unwrap_or_default());
            }
            from_seen.record(running.duration_since(t.first_seen).unwrap_or_default());
        }
        (summary(from_created), summary(from_seen), last)
    }
}

fn summary(l: Latencies) -> StartupSummary {
    let p90 = l.percentile_ms(0.90);
    let s = l.summary();
    StartupSummary {
        count: s.count,
        p50_ms: s.p50_ms,
        p90_ms: p90,
        p99_ms: s.p99_ms,
    }
}

/// List and watch the run's pods into the tracker, re-watching from the last version seen
/// (and re-listing when that is gone) until aborted.
async fn watch_pods(client: Client, selector: String, tracker: Arc<Mutex<Tracker>>) {
    let lp = ListParams::default().labels(&selector);
    let wp = WatchParams::default().labels(&selector).timeout(290);
    let path = "/api/v1/pods";
    let mut version: Option<String> = None;
    loop {
        if version.is_none() {
            let list = match Request::new(path).list(&lp) {
                Ok(r) => client.request::<PodList>(r).await,
                Err(e) => {
                    tracing::warn!(error = %e, "building the pod list request");
                    return;
                }
            };
            match list {
                Ok(list) => {
                    let now = SystemTime::now();
                    let mut t = tracker.lock().unwrap();
                    let listed: std::collections::HashSet<String> = list
                        .items
                        .iter()
                        .filter_map(|p| p.metadata.uid.clone())
                        .collect();
                    let gone: Vec<String> = t
                        .pods
                        .keys()
                        .filter(|u| !listed.contains(*u))
                        .cloned()
                        .collect();
                    for uid in gone {
                        if let Some(p) = t.pods.remove(&uid) {
                            t.done.push(p);
                        }
                    }
                    for p in &list.items {
                        t.observe(p, false, now);
                    }
                    t.synced = true;
                    version = list.metadata.resource_version;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "listing pods failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            }
        }
        let from = version.clone().unwrap_or_default();
        let stream = match Request::new(path).watch(&wp, &from) {
            Ok(r) => client.request_events::<MiniPod>(r).await,
            Err(e) => {
                tracing::warn!(error = %e, "building the pod watch request");
                return;
            }
        };
        let mut stream = match stream {
            Ok(s) => std::pin::pin!(s),
            Err(e) => {
                tracing::debug!(error = %e, "watching pods failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        while let Some(ev) = stream.next().await {
            let now = SystemTime::now();
            match ev {
                Ok(WatchEvent::Added(p)) | Ok(WatchEvent::Modified(p)) => {
                    version = p.metadata.resource_version.clone().or(version);
                    tracker.lock().unwrap().observe(&p, false, now);
                }
                Ok(WatchEvent::Deleted(p)) => {
                    version = p.metadata.resource_version.clone().or(version);
                    tracker.lock().unwrap().observe(&p, true, now);
                }
                Ok(WatchEvent::Bookmark(b)) => version = Some(b.metadata.resource_version),
                Ok(WatchEvent::Error(status)) => {
                    if status.code == 410 {
                        version = None;
                    }
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "the pod watch broke; re-watching");
                    break;
                }
            }
        }
    }
}

// ---- the control plane's figures ----

/// (verb, resource, subresource, scope) of an API call.
pub type HistKey = (String, String, String, String);

/// One histogram: cumulative counts per upper bound (ascending, +Inf last) and the count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hist {
    pub buckets: Vec<(f64, f64)>,
    pub count: f64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histograms(pub BTreeMap<HistKey, Hist>);

impl Histograms {
    /// What was observed between `before` and these.
    pub fn delta(&self, before: &Histograms) -> Histograms {
        let mut out = BTreeMap::new();
        for (k, h) in &self.0 {
            let b = before.0.get(k);
            let buckets = h
                .buckets
                .iter()
                .map(|(le, c)| {
                    let prior = b
                        .and_then(|b| b.buckets.iter().find(|(l, _)| l == le))
                        .map_or(0.0, |(_, c)| *c);
                    (*le, c - prior)
                })
                .collect();
            let count = h.count - b.map_or(0.0, |b| b.count);
            if count > 0.0 {
                out.insert(k.clone(), Hist { buckets, count });
            }
        }
        Histograms(out)
    }
}

impl Hist {
    /// The `q` quantile as Prometheus' histogram_quantile computes it: linear within the
    /// bucket it falls in; the largest finite bound when it falls in +Inf.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.count <= 0.0 {
            return 0.0;
        }
        let rank = q * self.count;
        let mut lower = (0.0, 0.0);
        for &(le, c) in &self.buckets {
            if c >= rank {
                if le.is_infinite() {
                    return lower.0;
                }
                let (lo, lo_count) = lower;
                let in_bucket = c - lo_count;
                if in_bucket <= 0.0 {
                    return le;
                }
                return lo + (le - lo) * (rank - lo_count) / in_bucket;
            }
            lower = (le, c);
        }
        lower.0
    }
}

/// What one read of /metrics gave.
#[derive(Debug, Default)]
pub struct Scrape {
    pub histograms: Histograms,
    pub cpu_seconds: Option<f64>,
    pub rss_bytes: Option<f64>,
}

/// Parse the Prometheus text of an API server's /metrics: request-duration histograms,
/// process CPU and memory.
pub fn parse_metrics(text: &str) -> Scrape {
    let mut out = Scrape::default();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let (name, labels) = match name_labels.split_once('{') {
            Some((n, l)) => (n, parse_labels(l.trim_end_matches('}'))),
            None => (name_labels, BTreeMap::new()),
        };
        match name {
            "process_cpu_seconds_total" => out.cpu_seconds = Some(value),
            "process_resident_memory_bytes" => out.rss_bytes = Some(value),
            "apiserver_request_duration_seconds_bucket"
            | "apiserver_request_duration_seconds_count" => {
                let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
                let key = (
                    get("verb"),
                    get("resource"),
                    get("subresource"),
                    get("scope"),
                );
                let h = out.histograms.0.entry(key).or_default();
                if name.ends_with("_count") {
                    h.count += value;
                } else {
                    let le = match labels.get("le").map(String::as_str) {
                        Some("+Inf") => f64::INFINITY,
                        Some(l) => match l.parse() {
                            Ok(l) => l,
                            Err(_) => continue,
                        },
                        None => continue,
                    };
                    // Series that differ in labels we do not key on (group, version,
                    // component, dry_run) add up.
                    match h.buckets.iter_mut().find(|(l, _)| *l == le) {
                        Some((_, c)) => *c += value,
                        None => h.buckets.push((le, value)),
                    }
                }
            }
            _ => {}
        }
    }
    for h in out.histograms.0.values_mut() {
        h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, e)) = chars.next() {
                        value.push(match e {
                            'n' => '\n',
                            other => other,
                        });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    out
}

/// Kubernetes' latency SLO of a call (seconds), or None for calls it does not judge (watches,
/// connects, collection deletes).
pub fn slo_seconds(verb: &str, scope: &str) -> Option<f64> {
    match verb {
        "POST" | "PUT" | "PATCH" | "DELETE" | "GET" => Some(1.0),
        "LIST" => Some(match scope {
            "cluster" => 30.0,
            "namespace" => 5.0,
            _ => 1.0,
        }),
        _ => None,
    }
}

/// The judged calls of a run, slowest against its SLO first.
pub fn api_calls(h: &Histograms) -> Vec<ApiCall> {
    let mut out: Vec<ApiCall> =
        h.0.iter()
            .filter_map(|(key, hist)| {
                let slo = slo_seconds(&key.0, &key.3)?;
                Some(ApiCall {
                    key: key.clone(),
                    count: hist.count,
                    p99_seconds: hist.quantile(0.99),
                    slo_seconds: slo,
                })
            })
            .collect();
    out.sort_by(|a, b| {
        (b.p99_seconds / b.slo_seconds)
            .total_cmp(&(a.p99_seconds / a.slo_seconds))
            .then_with(|| a.key.cmp(&b.key))
    });
    out
}

async fn scrape(client: &Client) -> Result<Scrape> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .context("building the /metrics request")?;
    let text = client.request_text(request).await?;
    Ok(parse_metrics(&text))
}

/// Samples the control plane's memory in the background.
struct Sampler {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Samples>,
}

#[derive(Debug, Default)]
struct Samples {
    metrics_peak_rss: Option<f64>,
    proc_cpu_seconds: Option<f64>,
    proc_peak_rss: Option<f64>,
}

impl Sampler {
    fn start(client: Client, pids: Vec<u32>, every: Duration) -> Sampler {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let cpu_before: Option<f64> = proc_cpu_seconds(&pids);
            let mut peak: Option<f64> = None;
            loop {
                if let Ok(s) = scrape(&client).await {
                    if let Some(r) = s.rss_bytes {
                        peak = Some(peak.map_or(r, |p: f64| p.max(r)));
                    }
                }
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tokio::time::sleep(every) => {}
                }
            }
            Samples {
                metrics_peak_rss: peak,
                proc_cpu_seconds: proc_cpu_seconds(&pids).zip(cpu_before).map(|(a, b)| a - b),
                proc_peak_rss: proc_peak_rss(&pids),
            }
        });
        Sampler { stop, task }
    }

    async fn stop(self) -> Samples {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

/// utime + stime of these processes, in seconds (None when there are none or one is gone).
fn proc_cpu_seconds(pids: &[u32]) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    let mut total = 0.0;
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command (which may hold spaces) start at field 3.
        let after = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = after.split_whitespace().collect();
        let utime: f64 = fields.get(11)?.parse().ok()?;
        let stime: f64 = fields.get(12)?.parse().ok()?;
        total += (utime + stime) / 100.0;
    }
    Some(total)
}

/// The sum of these processes' peak resident memory (VmHWM), in bytes.
fn proc_peak_rss(pids: &[u32]) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    let mut total = 0.0;
    for pid in pids {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        total += kb * 1024.0;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = r#"# HELP apiserver_request_duration_seconds x
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1",le="0.1"} 90
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1",le="1"} 99
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1",le="2"} 100
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1",le="+Inf"} 100
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1"} 12.5
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1"} 100
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1",le="0.1"} 0
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1",le="+Inf"} 4
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 4
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1"} 100
process_cpu_seconds_total 12.25
process_resident_memory_bytes 1.048576e+08
"#;

    #[test]
    fn metrics_are_read_per_call_kind_with_process_figures() {
        let s = parse_metrics(METRICS);
        assert_eq!(s.cpu_seconds, Some(12.25));
        assert_eq!(s.rss_bytes, Some(104857600.0));
        let post = &s.histograms.0[&(
            "POST".to_string(),
            "pods".to_string(),
            String::new(),
            "namespace".to_string(),
        )];
        assert_eq!(post.count, 100.0);
        assert_eq!(
            post.buckets,
            vec![
                (0.1, 90.0),
                (1.0, 99.0),
                (2.0, 100.0),
                (f64::INFINITY, 100.0)
            ]
        );
        assert_eq!(s.histograms.0.len(), 2);
    }

    #[test]
    fn quantiles_interpolate_within_a_bucket_as_prometheus_does() {
        let h = Hist {
            buckets: vec![
                (0.1, 90.0),
                (1.0, 99.0),
                (2.0, 100.0),
                (f64::INFINITY, 100.0),
            ],
            count: 100.0,
        };
        // Rank 99 is the last of the (0.1, 1] bucket.
        assert!((h.quantile(0.99) - 1.0).abs() < 1e-9);
        // Rank 50 is inside the first bucket: 0 + 0.1 * 50/90.
        assert!((h.quantile(0.5) - 0.1 * 50.0 / 90.0).abs() < 1e-9);
        // Rank 99.5 is half-way through (1, 2].
        assert!((h.quantile(0.995) - 1.5).abs() < 1e-9);
        // Everything above the largest finite bound reads as that bound.
        let slow = Hist {
            buckets: vec![(1.0, 0.0), (f64::INFINITY, 4.0)],
            count: 4.0,
        };
        assert_eq!(slow.quantile(0.99), 1.0);
        assert_eq!(Hist::default().quantile(0.99), 0.0);
    }

    #[test]
    fn a_run_sees_only_what_happened_during_it() {
        let before = parse_metrics(METRICS).histograms;
        let after_text = METRICS
            .replace("le=\"0.1\"} 90", "le=\"0.1\"} 180")
            .replace("le=\"1\"} 99", "le=\"1\"} 198")
            .replace("le=\"2\"} 100", "le=\"2\"} 200")
            .replace("le=\"+Inf\"} 100", "le=\"+Inf\"} 200")
            .replace(
                "verb=\"POST\",version=\"v1\"} 100",
                "verb=\"POST\",version=\"v1\"} 200",
            );
        let after = parse_metrics(&after_text).histograms;
        let d = after.delta(&before);
        // The LIST saw nothing new and is gone; the POSTs are the 100 new ones.
        assert_eq!(d.0.len(), 1);
        let calls = api_calls(&d);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].count, 100.0);
        assert!((calls[0].p99_seconds - 1.0).abs() < 1e-9, "{calls:?}");
        assert_eq!(calls[0].slo_seconds, 1.0);
        assert!(calls[0].met());
    }

    #[test]
    fn slos_are_kubernetes_by_verb_and_scope() {
        assert_eq!(slo_seconds("PATCH", "resource"), Some(1.0));
        assert_eq!(slo_seconds("GET", "resource"), Some(1.0));
        assert_eq!(slo_seconds("LIST", "namespace"), Some(5.0));
        assert_eq!(slo_seconds("LIST", "cluster"), Some(30.0));
        assert_eq!(slo_seconds("WATCH", "cluster"), None);
        assert_eq!(slo_seconds("DELETECOLLECTION", "namespace"), None);
        // A cluster LIST of 2 s meets its SLO; a POST of 2 s does not; the slowest against
        // its SLO comes first.
        let h = |secs: f64| Hist {
            buckets: vec![(secs, 1.0), (f64::INFINITY, 1.0)],
            count: 1.0,
        };
        let key = |v: &str, s: &str| {
            (
                v.to_string(),
                "pods".to_string(),
                String::new(),
                s.to_string(),
            )
        };
        let calls = api_calls(&Histograms(BTreeMap::from([
            (key("LIST", "cluster"), h(2.0)),
            (key("POST", "namespace"), h(2.0)),
            (key("WATCH", "cluster"), h(60.0)),
        ])));
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].key.0, "POST");
        assert!(!calls[0].met());
        assert!(calls[1].met());
    }

    #[test]
    fn labels_with_escapes_and_commas() {
        let l = parse_labels(r#"a="x,y",b="q\"uote",c="""#);
        assert_eq!(l["a"], "x,y");
        assert_eq!(l["b"], "q\"uote");
        assert_eq!(l["c"], "");
    }

    #[test]
    fn deployments_split_the_pods() {
        assert_eq!(deployment_sizes(150_000, 250).len(), 600);
        assert_eq!(deployment_sizes(10, 4), vec![4, 4, 2]);
        assert_eq!(deployment_sizes(3, 5), vec![3]);
    }

    #[test]
    fn the_tracker_times_start_up_and_counts_live_pods() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let pod = |uid: &str, phase: &str, deleting: bool| MiniPod {
            metadata: MiniMeta {
                uid: Some(uid.into()),
                creation_timestamp: Some("2023-11-14T22:13:20Z".into()),
                deletion_timestamp: deleting.then(|| "2023-11-14T22:14:00Z".to_string()),
                ..Default::default()
            },
            status: Some(MiniPodStatus {
                phase: Some(phase.into()),
            }),
        };
        let mut t = Tracker::default();
        t.observe(
            &pod("a", "Pending", false),
            false,
            t0 + Duration::from_millis(100),
        );
        t.observe(
            &pod("b", "Pending", false),
            false,
            t0 + Duration::from_millis(200),
        );
        assert_eq!(t.counts(), (2, 0));
        t.observe(
            &pod("a", "Running", false),
            false,
            t0 + Duration::from_millis(1100),
        );
        t.observe(
            &pod("b", "Running", false),
            false,
            t0 + Duration::from_millis(3200),
        );
        // A later update does not move the time it was first seen Running.
        t.observe(
            &pod("a", "Running", false),
            false,
            t0 + Duration::from_millis(9000),
        );
        assert_eq!(t.counts(), (2, 2));
        t.observe(
            &pod("b", "Running", true),
            false,
            t0 + Duration::from_millis(9500),
        );
        assert_eq!(t.counts(), (1, 1));
        t.observe(
            &pod("b", "Running", true),
            true,
            t0 + Duration::from_millis(9600),
        );
        assert_eq!(t.counts(), (1, 1));
        let (created, watched, last) = t.startup();
        // The creationTimestamp is t0: 1.1 s and 3.2 s; watched: 1.0 s and 3.0 s.
        assert_eq!(
            (created.count, created.p50_ms, created.p99_ms),
            (2, 1100.0, 3200.0)
        );
        assert_eq!((watched.p50_ms, watched.p99_ms), (1000.0, 3000.0));
        assert_eq!(last, Some(t0 + Duration::from_millis(3200)));
    }
}
