//! list-pods and memory: load `--list-pods` Pods into a namespace with many clients (its rate
//! and latency are the memory row's), read the server's resident memory, then time whole
//! lists of the namespace from the watch cache (`resourceVersion=0`) and consistent
//! (`resourceVersion` unset).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use http::Method;
use tokio::task::JoinSet;

use super::client::{call, post, Cluster, CpuMeter};
use super::creates::{join, Worked};
use super::objects::{collection, list_items, pod};
use super::{ApiMeasurement, ApiOptions, ApiWorkload};
use crate::latency::Latencies;

/// Attempts at each Pod of the load before giving up on a throttling or failing server.
const LOAD_ATTEMPTS: u32 = 10;

/// Run list-pods and/or memory in `ns`.
pub(crate) async fn list_pods(
    cluster: &Arc<Cluster>,
    ns: &str,
    options: &ApiOptions,
    record: &mut dyn FnMut(ApiMeasurement),
) -> Result<()> {
    let path = collection(ns, "pods");
    let memory = options.runs(ApiWorkload::Memory);
    let before = if memory {
        cluster
            .process_metrics()
            .await
            .ok()
            .and_then(|m| m.rss_bytes)
    } else {
        None
    };
    let clients = options.load_clients.min(options.list_pods);
    cluster.warm_up(clients).await;
    let meter = CpuMeter::start(cluster).await;
    let started = Instant::now();
    let loaded = load(cluster, &path, options.list_pods, clients)
        .await
        .with_context(|| format!("loading {} Pods into {ns}", options.list_pods))?;
    let elapsed = started.elapsed();
    let mut load_cpu = ApiMeasurement::new("load", clients, Default::default(), elapsed);
    meter.finish(cluster, &mut load_cpu).await;
    if memory {
        // Let the server finish applying the writes to its caches.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut m = ApiMeasurement::new("memory", clients, loaded.latencies.summary(), elapsed);
        m.errors = Some(loaded.errors);
        m.pods = Some(options.list_pods as u64);
        m.object_bytes = Some(pod("lp-00000", 0).len() as u64);
        match cluster.process_metrics().await {
            Ok(metrics) => {
                m.rss_bytes = Some(metrics.rss_bytes);
                if metrics.rss_bytes.is_none() {
                    m.note =
                        Some("the server's /metrics has no process_resident_memory_bytes".into());
                }
            }
            Err(e) => {
                m.rss_bytes = Some(None);
                m.note = Some(format!("cannot read the server's memory: {e}"));
            }
        }
        m.rss_before_bytes = before;
        m.client_cpu = load_cpu.client_cpu;
        m.server_cpu = load_cpu.server_cpu;
        record(m);
    }
    if options.runs(ApiWorkload::ListPods) {
        for rv in ["0", ""] {
            record(time_lists(cluster, &path, rv, options.list_repeats).await?);
        }
    }
    Ok(())
}

/// List `path` with `resourceVersion=rv` once untimed, then `repeats` times timed, one after
/// the other.
async fn time_lists(
    cluster: &Cluster,
    path: &str,
    rv: &str,
    repeats: usize,
) -> Result<ApiMeasurement> {
    let uri = if rv.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?resourceVersion={rv}")
    };
    let client = cluster.client(0);
    let first = call(client, Method::GET, &uri, None)
        .await
        .map_err(|e| anyhow!("GET {uri}: {e}"))?;
    let items = list_items(&first).ok_or_else(|| anyhow!("GET {uri}: not a list"))?;
    let mut bytes = first.len() as u64;
    drop(first);
    let meter = CpuMeter::start(cluster).await;
    let mut latencies = Latencies::with_capacity(repeats);
    let mut errors = 0;
    let started = Instant::now();
    for _ in 0..repeats {
        let start = Instant::now();
        match call(client, Method::GET, &uri, None).await {
            Ok(body) => {
                latencies.record(start.elapsed());
                bytes = body.len() as u64;
            }
            Err(e) if e.is_transient() => errors += 1,
            Err(e) => return Err(anyhow!("GET {uri}: {e}")),
        }
    }
    let elapsed = started.elapsed();
    let mut m = ApiMeasurement::new("list-pods", 1, latencies.summary(), elapsed);
    meter.finish(cluster, &mut m).await;
    m.errors = Some(errors);
    m.resource_version = Some(rv.to_owned());
    m.items = Some(items);
    m.response_bytes = Some(bytes);
    Ok(m)
}

/// Create Pods `lp-00000` to `n - 1` in `path` with `clients` concurrent clients, retrying
/// throttled and failed creates.
async fn load(cluster: &Cluster, path: &str, n: usize, clients: usize) -> Result<Worked> {
    let path: Arc<str> = path.into();
    let mut tasks = JoinSet::new();
    for first in 0..clients {
        let client = cluster.client(first).clone();
        let path = path.clone();
        tasks.spawn(async move {
            let mut worked = Worked {
                latencies: Latencies::default(),
                errors: 0,
            };
            for i in (first..n).step_by(clients) {
                let name = format!("lp-{i:05}");
                let body = pod(&name, i as u64);
                for attempt in 1.. {
                    let start = Instant::now();
                    match post(&client, &path, body.clone()).await {
                        Ok(_) => {
                            worked.latencies.record(start.elapsed());
                            break;
                        }
                        Err(e) if e.is_transient() && attempt < LOAD_ATTEMPTS => {
                            worked.errors += 1;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Err(e) => return Err(anyhow!("POST {path}: {e}")),
                    }
                }
            }
            Ok(worked)
        });
    }
    join(tasks).await
}
