//! create-configmaps and create-pods: `--clients` clients creating objects back to back.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use tokio::task::JoinSet;

use super::client::{post, Cluster, CpuMeter};
use super::objects::Kind;
use super::{ApiMeasurement, ApiOptions};
use crate::latency::Latencies;
use crate::store::workloads::Budget;

/// What one client of a closed-loop workload measured.
pub(crate) struct Worked {
    pub latencies: Latencies,
    /// Requests answered 429 or 5xx.
    pub errors: u64,
}

/// Merge the clients' latencies and error counts.
pub(crate) async fn join(mut tasks: JoinSet<Result<Worked>>) -> Result<Worked> {
    let mut all = Worked {
        latencies: Latencies::default(),
        errors: 0,
    };
    while let Some(joined) = tasks.join_next().await {
        let worked = joined.context("a benchmark client failed")??;
        all.latencies.merge(worked.latencies);
        all.errors += worked.errors;
    }
    Ok(all)
}

/// Create objects of `kind` in `ns` with `--clients` clients until the budget runs out.
pub(crate) async fn creates(
    cluster: &Arc<Cluster>,
    ns: &str,
    kind: Kind,
    options: &ApiOptions,
) -> Result<ApiMeasurement> {
    let clients = options.clients;
    let path: Arc<str> = kind.collection(ns).into();
    let object_bytes = kind
        .object(&format!("{}-{}-{}", short(kind), clients, 0), 0)
        .len();
    cluster.warm_up(clients).await;
    let meter = CpuMeter::start(cluster).await;
    let budget = Arc::new(Budget::new(options.duration, options.count));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..clients {
        let client = cluster.client(i).clone();
        let (budget, path) = (budget.clone(), path.clone());
        tasks.spawn(async move {
            let mut worked = Worked {
                latencies: Latencies::default(),
                errors: 0,
            };
            for n in 0u64.. {
                let body = kind.object(&format!("{}-{i}-{n}", short(kind)), n);
                let start = Instant::now();
                if !budget.take(start) {
                    break;
                }
                match post(&client, &path, body).await {
                    Ok(_) => worked.latencies.record(start.elapsed()),
                    Err(e) if e.is_transient() => worked.errors += 1,
                    Err(e) => return Err(anyhow!("POST {path}: {e}")),
                }
            }
            Ok(worked)
        });
    }
    let worked = join(tasks).await?;
    let elapsed = started.elapsed();
    let mut m = ApiMeasurement::new(
        kind.workload_name(),
        clients,
        worked.latencies.summary(),
        elapsed,
    );
    meter.finish(cluster, &mut m).await;
    m.errors = Some(worked.errors);
    m.object_bytes = Some(object_bytes as u64);
    Ok(m)
}

/// The prefix of the names of created objects.
fn short(kind: Kind) -> &'static str {
    match kind {
        Kind::ConfigMap => "cm",
        Kind::Pod => "pod",
        Kind::Custom => "cr",
    }
}
