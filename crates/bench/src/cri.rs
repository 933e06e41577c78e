//! `capstan bench cri`: how fast a CRI runtime itself starts pods, with no kubelet and no API
//! server — the floor under `capstan bench podstartup`. Many pods are started at once, each
//! as the kubelet starts one: RunPodSandbox (the runtime's network plugins included), then
//! CreateContainer and StartContainer of one container. Each pod's latency runs from its
//! RunPodSandbox call to its StartContainer answer. The image is pulled first and left out,
//! as in Kubernetes' start-up SLO. Every sandbox is stopped and removed afterwards.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use capstan_cri::v1 as cri;
use capstan_cri::Runtime as _;
use futures::StreamExt;

use crate::latency::Latencies;

#[derive(clap::Args, Debug, Clone)]
pub struct CriArgs {
    /// The runtime's socket, as the kubelet's --container-runtime-endpoint.
    #[arg(long, value_name = "ENDPOINT")]
    pub endpoint: String,
    /// How many pods to start at once.
    #[arg(long, default_value_t = 100)]
    pub pods: usize,
    /// The image of each pod's one container.
    #[arg(long, default_value = "registry.k8s.io/pause:3.10")]
    pub image: String,
    /// Where the pods' logs go (a fresh directory under the system's temporary one by
    /// default; removed afterwards).
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_seconds: u64,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct CriMeasurement {
    pub pods: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// From the first RunPodSandbox to the last StartContainer answer.
    pub all_started_seconds: f64,
}

pub async fn run(args: CriArgs) -> Result<()> {
    if args.pods == 0 {
        bail!("--pods must be at least 1");
    }
    let m = measure(&args).await?;
    println!(
        "cri pod start, {} pods at once on {}: p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms; all started after {:.2} s",
        m.pods, args.endpoint, m.p50_ms, m.p90_ms, m.p99_ms, m.max_ms, m.all_started_seconds
    );
    Ok(())
}

fn sandbox_config(run: &str, i: usize, log_dir: &str) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: format!("p-{i:05}"),
            uid: format!("{run}-{i:05}"),
            namespace: format!("bench-cri-{run}"),
            attempt: 0,
        }),
        hostname: format!("p-{i:05}"),
        log_directory: format!("{log_dir}/{i:05}"),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Pod as i32,
                    pid: cri::NamespaceMode::Container as i32,
                    ipc: cri::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_config(image: &str) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: "c".into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        log_path: "c/0.log".into(),
        linux: Some(cri::LinuxContainerConfig::default()),
        ..Default::default()
    }
}

/// Start one pod as the kubelet would: its sandbox, then its one container. (Whatever it
/// leaves is removed by namespace afterwards.)
async fn start_pod(
    rt: &capstan_cri::Cri,
    config: cri::PodSandboxConfig,
    image: &str,
) -> Result<()> {
    let sandbox = rt
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .context("RunPodSandbox")?
        .pod_sandbox_id;
    let container = rt
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sandbox,
            config: Some(container_config(image)),
            sandbox_config: Some(config),
        })
        .await
        .context("CreateContainer")?
        .container_id;
    rt.start_container(cri::StartContainerRequest {
        container_id: container,
    })
    .await
    .context("StartContainer")?;
    Ok(())
}

pub async fn measure(args: &CriArgs) -> Result<CriMeasurement> {
    let rt = capstan_cri::Cri::connect(&args.endpoint).map_err(anyhow::Error::msg)?;
    rt.version(cri::VersionRequest {
        version: "v1".into(),
    })
    .await
    .with_context(|| format!("the runtime at {} does not answer", args.endpoint))?;
    rt.pull_image(cri::PullImageRequest {
        image: Some(cri::ImageSpec {
            image: args.image.clone(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .with_context(|| format!("pulling {}", args.image))?;
    let run = format!("{:x}", std::process::id());
    let (log_dir, remove_logs) = match &args.log_dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("capstan-bench-cri-{run}")),
            true,
        ),
    };
    for i in 0..args.pods {
        let dir = log_dir.join(format!("{i:05}")).join("c");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let log_text = log_dir.to_string_lossy().into_owned();

    let start = Instant::now();
    let results = tokio::time::timeout(
        Duration::from_secs(args.timeout_seconds),
        futures::stream::iter(0..args.pods)
            .map(|i| {
                let config = sandbox_config(&run, i, &log_text);
                let rt = &rt;
                async move {
                    let begun = Instant::now();
                    let r = start_pod(rt, config, &args.image).await;
                    (r, begun.elapsed())
                }
            })
            .buffer_unordered(args.pods)
            .collect::<Vec<_>>(),
    )
    .await;
    let all_started_seconds = start.elapsed().as_secs_f64();

    // Remove every sandbox of this run, whatever happened.
    let namespace = format!("bench-cri-{run}");
    if let Ok(list) = rt
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
    {
        let ours = list.items.into_iter().filter(|s| {
            s.metadata
                .as_ref()
                .is_some_and(|m| m.namespace == namespace)
        });
        futures::stream::iter(ours)
            .for_each_concurrent(16, |s| {
                let rt = &rt;
                async move {
                    let _ = rt
                        .stop_pod_sandbox(cri::StopPodSandboxRequest {
                            pod_sandbox_id: s.id.clone(),
                        })
                        .await;
                    let _ = rt
                        .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                            pod_sandbox_id: s.id,
                        })
                        .await;
                }
            })
            .await;
    }
    if remove_logs {
        let _ = std::fs::remove_dir_all(&log_dir);
    }

    let Ok(results) = results else {
        bail!("not every pod started within {} s", args.timeout_seconds);
    };
    let mut latencies = Latencies::with_capacity(args.pods);
    for (r, took) in results {
        r?;
        latencies.record(took);
    }
    Ok(CriMeasurement {
        pods: args.pods,
        p50_ms: latencies.percentile_ms(0.50),
        p90_ms: latencies.percentile_ms(0.90),
        p99_ms: latencies.percentile_ms(0.99),
        max_ms: latencies.percentile_ms(1.0),
        all_started_seconds,
    })
}
