//! `capstan bench controllers`: how fast the controllers turn desired state into objects, and
//! what they hold in memory. A Deployment is created with 0 replicas and then scaled to
//! `--replicas`; the time from the scale to the last Pod seen created (by watching) is the
//! figure. With `--controller-pid` the controller manager's resident memory is read from
//! /proc before and after (it then caches every one of those pods).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use serde_json::json;

#[derive(clap::Args, Debug, Clone)]
pub struct ControllersArgs {
    /// The kubeconfig of the cluster.
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: PathBuf,
    /// Scale the Deployment from 0 to this many replicas.
    #[arg(long, default_value_t = 10_000)]
    pub replicas: usize,
    /// The controller manager's process id: report its resident memory.
    #[arg(long)]
    pub controller_pid: Option<u32>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_seconds: u64,
    /// Leave the namespace and its pods in place (to measure memory with them cached).
    #[arg(long)]
    pub keep: bool,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct ControllersMeasurement {
    pub replicas: usize,
    /// From the scale request to the last pod seen created.
    pub seconds: f64,
    pub first_pod_seconds: f64,
    pub rss_before_mb: Option<f64>,
    pub rss_after_mb: Option<f64>,
}

pub async fn run(args: ControllersArgs) -> Result<()> {
    if args.replicas == 0 {
        bail!("--replicas must be at least 1");
    }
    let m = measure(&args).await?;
    println!(
        "deployment scaled 0 → {}: first pod after {:.3} s, all pods created after {:.2} s = {:.0} pods/s",
        m.replicas,
        m.first_pod_seconds,
        m.seconds,
        m.replicas as f64 / m.seconds.max(1e-9)
    );
    if let (Some(b), Some(a)) = (m.rss_before_mb, m.rss_after_mb) {
        println!(
            "controller manager RSS: {b:.1} MB before, {a:.1} MB with the {} pods cached",
            m.replicas
        );
    }
    Ok(())
}

/// Resident memory of a process, in MB (VmRSS from /proc).
pub fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

pub async fn measure(args: &ControllersArgs) -> Result<ControllersMeasurement> {
    let client = crate::scheduler::client(&args.kubeconfig).await?;
    let run = format!("{:x}", std::process::id());
    let ns = format!("bench-controllers-{run}");
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
    )
    .await
    .context("creating the namespace")?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "scale"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "scale"}},
            "template": {
                "metadata": {"labels": {"app": "scale"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    }))?;
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .context("creating the deployment")?;
    let rss_before_mb = args.controller_pid.and_then(rss_mb);

    // Watch pods of the namespace from now on; count creations.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watch = tokio::spawn(async move {
        let mut seen = std::collections::HashSet::new();
        let mut stream =
            std::pin::pin!(watcher::watcher(pods, watcher::Config::default()).default_backoff());
        while let Some(ev) = stream.next().await {
            if let Ok(Event::Apply(p) | Event::InitApply(p)) = ev {
                if seen.insert(p.metadata.uid.unwrap_or_default())
                    && tx.send(Instant::now()).is_err()
                {
                    return;
                }
            }
        }
    });
    // Let the watch start before scaling.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    deployments
        .patch(
            "scale",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": args.replicas}})),
        )
        .await
        .context("scaling the deployment")?;
    let deadline = start + Duration::from_secs(args.timeout_seconds);
    let mut count = 0;
    let mut first = None;
    let mut last = start;
    while count < args.replicas {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(at)) => {
                count += 1;
                first.get_or_insert(at);
                last = at;
            }
            _ => {
                watch.abort();
                bail!(
                    "only {count} of {} pods created after {} s",
                    args.replicas,
                    args.timeout_seconds
                );
            }
        }
    }
    watch.abort();
    // Give the manager a moment to take the last pods into its caches.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after_mb = args.controller_pid.and_then(rss_mb);
    if !args.keep {
        let _ = nss.delete(&ns, &DeleteParams::default()).await;
    }
    Ok(ControllersMeasurement {
        replicas: args.replicas,
        seconds: last.duration_since(start).as_secs_f64(),
        first_pod_seconds: first
            .map(|f| f.duration_since(start).as_secs_f64())
            .unwrap_or(0.0),
        rss_before_mb,
        rss_after_mb,
    })
}
