//! verbs: the latency of each verb on ConfigMaps under a moderate load of `--verb-clients`
//! clients, one verb at a time: get, update (a replace carrying the object's
//! resourceVersion), merge patch, list of the namespace (`--verb-objects` items), create, and
//! delete (of the objects just created).
//!
//! Every client owns its objects, so updates never conflict.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use http::Method;
use tokio::task::JoinSet;

use super::client::{call, post, Cluster, CpuMeter};
use super::creates::{join, Worked};
use super::objects::{
    collection, configmap, configmap_patch, configmap_update, list_items, resource_version,
};
use super::{ApiMeasurement, ApiOptions};
use crate::latency::Latencies;
use crate::store::workloads::Budget;

/// An object a client owns, and its latest resourceVersion.
#[derive(Clone)]
struct Owned {
    name: String,
    resource_version: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Get,
    Update,
    Patch,
    List,
}

impl Verb {
    fn name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::List => "list",
        }
    }
}

/// Run the verbs workload in `ns`, recording one measurement per verb.
pub(crate) async fn verbs(
    cluster: &Arc<Cluster>,
    ns: &str,
    options: &ApiOptions,
    record: &mut dyn FnMut(ApiMeasurement),
) -> Result<()> {
    let clients = options.verb_clients;
    let path: Arc<str> = collection(ns, "configmaps").into();
    let ns_name: Arc<str> = ns.into();
    let mut owned = setup(cluster, &path, options)
        .await
        .context("creating the ConfigMaps of the verbs workload")?;
    cluster.warm_up(clients).await;
    for verb in [Verb::Get, Verb::Update, Verb::Patch, Verb::List] {
        let meter = CpuMeter::start(cluster).await;
        let budget = Arc::new(Budget::new(options.duration, options.count));
        let started = Instant::now();
        let mut tasks = JoinSet::new();
        for (i, objects) in std::mem::take(&mut owned).into_iter().enumerate() {
            let client = cluster.client(i).clone();
            let (ns, path, budget) = (ns_name.clone(), path.clone(), budget.clone());
            tasks.spawn(verb_loop(client, ns, path, verb, objects, budget));
        }
        let mut all = Worked {
            latencies: Latencies::default(),
            errors: 0,
        };
        while let Some(joined) = tasks.join_next().await {
            let (objects, worked) = joined.context("a benchmark client failed")??;
            owned.push(objects);
            all.latencies.merge(worked.latencies);
            all.errors += worked.errors;
        }
        let elapsed = started.elapsed();
        let mut m = ApiMeasurement::new(verb.name(), clients, all.latencies.summary(), elapsed);
        meter.finish(cluster, &mut m).await;
        m.errors = Some(all.errors);
        if verb == Verb::List {
            let body = call(cluster.client(0), Method::GET, &path, None)
                .await
                .map_err(|e| anyhow!("GET {path}: {e}"))?;
            m.items = list_items(&body);
            m.response_bytes = Some(body.len() as u64);
        }
        record(m);
    }

    // create, then delete what was created.
    let meter = CpuMeter::start(cluster).await;
    let budget = Arc::new(Budget::new(options.duration, options.count));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..clients {
        let client = cluster.client(i).clone();
        let (path, budget) = (path.clone(), budget.clone());
        tasks.spawn(create_loop(client, path, i, budget));
    }
    let mut all = Worked {
        latencies: Latencies::default(),
        errors: 0,
    };
    let mut created = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (names, worked) = joined.context("a benchmark client failed")??;
        created.push(names);
        all.latencies.merge(worked.latencies);
        all.errors += worked.errors;
    }
    let elapsed = started.elapsed();
    let mut m = ApiMeasurement::new("create", clients, all.latencies.summary(), elapsed);
    meter.finish(cluster, &mut m).await;
    m.errors = Some(all.errors);
    m.object_bytes = Some(configmap("d-0-0", 0).len() as u64);
    record(m);

    let meter = CpuMeter::start(cluster).await;
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (i, names) in created.into_iter().enumerate() {
        let client = cluster.client(i).clone();
        let path = path.clone();
        tasks.spawn(async move {
            let mut worked = Worked {
                latencies: Latencies::with_capacity(names.len()),
                errors: 0,
            };
            for name in names {
                let uri = format!("{path}/{name}");
                let start = Instant::now();
                match call(&client, Method::DELETE, &uri, None).await {
                    Ok(_) => worked.latencies.record(start.elapsed()),
                    Err(e) if e.is_transient() => worked.errors += 1,
                    Err(e) => return Err(anyhow!("DELETE {uri}: {e}")),
                }
            }
            Ok(worked)
        });
    }
    let worked = join(tasks).await?;
    let elapsed = started.elapsed();
    let mut m = ApiMeasurement::new("delete", clients, worked.latencies.summary(), elapsed);
    meter.finish(cluster, &mut m).await;
    m.errors = Some(worked.errors);
    record(m);
    Ok(())
}

/// Create `--verb-objects` ConfigMaps; object `k` belongs to client `k % --verb-clients`.
async fn setup(
    cluster: &Cluster,
    path: &Arc<str>,
    options: &ApiOptions,
) -> Result<Vec<Vec<Owned>>> {
    let clients = options.verb_clients;
    let mut tasks = JoinSet::new();
    for i in 0..clients {
        let client = cluster.client(i).clone();
        let path = path.clone();
        let mine: Vec<usize> = (i..options.verb_objects).step_by(clients).collect();
        tasks.spawn(async move {
            let mut owned = Vec::with_capacity(mine.len());
            for k in mine {
                let name = format!("obj-{k}");
                let body = post(&client, &path, configmap(&name, k as u64))
                    .await
                    .map_err(|e| anyhow!("POST {path}: {e}"))?;
                let resource_version = resource_version(&body)
                    .ok_or_else(|| anyhow!("POST {path}: no resourceVersion in the response"))?;
                owned.push(Owned {
                    name,
                    resource_version,
                });
            }
            Ok::<_, anyhow::Error>((i, owned))
        });
    }
    let mut owned = vec![Vec::new(); clients];
    while let Some(joined) = tasks.join_next().await {
        let (i, objects) = joined.context("a benchmark client failed")??;
        owned[i] = objects;
    }
    Ok(owned)
}

/// One client doing `verb` on its objects in turn until the budget runs out.
async fn verb_loop(
    client: kube::Client,
    ns: Arc<str>,
    path: Arc<str>,
    verb: Verb,
    mut owned: Vec<Owned>,
    budget: Arc<Budget>,
) -> Result<(Vec<Owned>, Worked)> {
    let mut worked = Worked {
        latencies: Latencies::default(),
        errors: 0,
    };
    for n in 0u64.. {
        let k = n as usize % owned.len();
        let object = &owned[k];
        let item = format!("{path}/{}", object.name);
        let (method, uri, body): (Method, &str, Option<(&'static str, Bytes)>) = match verb {
            Verb::Get => (Method::GET, &item, None),
            Verb::Update => (
                Method::PUT,
                &item,
                Some((
                    "application/json",
                    configmap_update(&ns, &object.name, &object.resource_version, n),
                )),
            ),
            Verb::Patch => (
                Method::PATCH,
                &item,
                Some(("application/merge-patch+json", configmap_patch(n))),
            ),
            Verb::List => (Method::GET, &path, None),
        };
        let start = Instant::now();
        if !budget.take(start) {
            break;
        }
        let response = call(&client, method.clone(), uri, body).await;
        let latency = start.elapsed();
        match response {
            Ok(body) => {
                worked.latencies.record(latency);
                if matches!(verb, Verb::Update | Verb::Patch) {
                    owned[k].resource_version = resource_version(&body)
                        .ok_or_else(|| anyhow!("{method} {uri}: no resourceVersion"))?;
                }
            }
            Err(e) if e.is_transient() => worked.errors += 1,
            Err(e) => return Err(anyhow!("{method} {uri}: {e}")),
        }
    }
    Ok((owned, worked))
}

/// One client creating ConfigMaps `d-<i>-<n>` until the budget runs out; returns their names.
async fn create_loop(
    client: kube::Client,
    path: Arc<str>,
    i: usize,
    budget: Arc<Budget>,
) -> Result<(Vec<String>, Worked)> {
    let mut worked = Worked {
        latencies: Latencies::default(),
        errors: 0,
    };
    let mut names = Vec::new();
    for n in 0u64.. {
        let name = format!("d-{i}-{n}");
        let body = configmap(&name, n);
        let start = Instant::now();
        if !budget.take(start) {
            break;
        }
        match post(&client, &path, body).await {
            Ok(_) => {
                worked.latencies.record(start.elapsed());
                names.push(name);
            }
            Err(e) if e.is_transient() => worked.errors += 1,
            Err(e) => return Err(anyhow!("POST {path}: {e}")),
        }
    }
    Ok((names, worked))
}
