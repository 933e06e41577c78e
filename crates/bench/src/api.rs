//! `capstan bench api`: load against any Kubernetes API server — capstan or a real
//! kube-apiserver — through nothing but its HTTP API and a kubeconfig.
//!
//! Workloads (each in a fresh namespace `bench-<run-id>-<workload>`, deleted at the end):
//!
//! * `create-configmaps`, `create-pods`: `--clients` concurrent clients creating small
//!   ConfigMaps or realistic Pods (about 2 KB of JSON; they stay Pending) back to back.
//! * `verbs`: get, update (a replace carrying the resourceVersion), merge patch, a small
//!   namespace list and delete, one after the other, by `--verb-clients` clients.
//! * `list-pods`: `--list-pods` Pods are loaded (untimed), then the whole namespace is listed
//!   `--list-repeats` times from the watch cache (`resourceVersion=0`, as informers do) and as a
//!   consistent read (`resourceVersion` unset).
//! * `memory`: the server's `process_resident_memory_bytes` (from its `/metrics`) once those
//!   Pods are loaded.
//! * `watch`: `--watchers` watches of a namespace's ConfigMaps while a writer creates and
//!   patches ConfigMaps at `--watch-rate`; each write carries its send time, so each delivery
//!   has a latency, and each its sequence number, so each watcher's gaps are counted.
//!
//! They run in that order except that the Pods of `list-pods` and `memory` are loaded first,
//! while the server holds nothing else the benchmark wrote.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, ensure, Result};

use crate::duration::parse_duration;
use crate::store::print_line;

mod client;
mod creates;
mod histogram;
mod lists;
mod objects;
mod report;
mod verbs;
mod watch;

pub use report::{api_table_header, ApiMeasurement};

use client::Cluster;

/// Arguments of `capstan bench api`.
#[derive(clap::Args, Debug)]
pub struct ApiArgs {
    #[command(flatten)]
    pub options: ApiOptions,

    /// Print one JSON object per measurement and line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What `capstan bench api` can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiWorkload {
    /// Concurrent creates of small ConfigMaps.
    CreateConfigmaps,
    /// Concurrent creates of realistic Pods.
    CreatePods,
    /// Concurrent creates of a custom resource as small as create-configmaps' ConfigMaps
    /// (the benchmark installs, then deletes, its CustomResourceDefinition).
    CreateCustom,
    /// get, update, patch, list and delete latency under moderate load.
    Verbs,
    /// Whole lists of a namespace of many Pods, from the cache and consistent.
    ListPods,
    /// Delivery latency and completeness of many watches.
    Watch,
    /// The server's resident memory holding the Pods of list-pods.
    Memory,
}

/// What `capstan bench api` runs, against what, and how big. [`Default`] matches the command
/// line's defaults (with no kubeconfig).
#[derive(clap::Args, Clone, Debug)]
pub struct ApiOptions {
    /// The kubeconfig of the cluster to measure. Its user must be able to create and delete
    /// namespaces and, for `memory`, to read /metrics.
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current context).
    #[arg(long)]
    pub context: Option<String>,

    /// What to call the server in the results (default: its gitVersion from /version).
    #[arg(long)]
    pub label: Option<String>,

    /// Workloads to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "create-configmaps,create-pods,verbs,list-pods,watch,memory"
    )]
    pub workloads: Vec<ApiWorkload>,

    /// Concurrent clients of create-configmaps and create-pods.
    #[arg(long, default_value_t = 32)]
    pub clients: usize,

    /// How long each create measurement and each verb of `verbs` runs.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Run each create measurement and each verb for this many operations instead of for
    /// --duration.
    #[arg(long)]
    pub count: Option<u64>,

    /// Concurrent clients of the verbs workload.
    #[arg(long, default_value_t = 8)]
    pub verb_clients: usize,

    /// ConfigMaps that verbs gets, updates, patches and lists (its namespace holds only these).
    #[arg(long, default_value_t = 50)]
    pub verb_objects: usize,

    /// Pods loaded for list-pods and memory.
    #[arg(long, default_value_t = 10_000)]
    pub list_pods: usize,

    /// Timed lists per resourceVersion mode.
    #[arg(long, default_value_t = 10)]
    pub list_repeats: usize,

    /// Concurrent clients loading the Pods of list-pods (untimed).
    #[arg(long, default_value_t = 64)]
    pub load_clients: usize,

    /// Concurrent watches of the watch workload.
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,

    /// Writes per second during the watch workload.
    #[arg(long, default_value_t = 1000.0)]
    pub watch_rate: f64,

    /// How long the watch workload writes.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub watch_duration: Duration,

    /// How long watchers may keep receiving after the last write before the events they have
    /// not received count as missed.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub watch_grace: Duration,

    /// Independent HTTP clients the requests are spread over, each with connections of its
    /// own. The watch workload adds clients so that no HTTP/2 connection carries more than
    /// 100 watches.
    #[arg(long, default_value_t = 4)]
    pub client_pool: usize,

    /// Negotiate HTTP/2 as client-go does (each client multiplexes its requests on one
    /// connection) instead of speaking HTTP/1.1 as kube-rs does (each request in flight holds
    /// a connection of its own).
    #[arg(long)]
    pub http2: bool,

    /// Leave the benchmark's namespaces and objects in place instead of deleting them.
    #[arg(long)]
    pub keep_namespaces: bool,
}

impl Default for ApiOptions {
    fn default() -> Self {
        ApiOptions {
            kubeconfig: None,
            context: None,
            label: None,
            workloads: vec![
                ApiWorkload::CreateConfigmaps,
                ApiWorkload::CreatePods,
                ApiWorkload::Verbs,
                ApiWorkload::ListPods,
                ApiWorkload::Watch,
                ApiWorkload::Memory,
            ],
            clients: 32,
            duration: Duration::from_secs(10),
            count: None,
            verb_clients: 8,
            verb_objects: 50,
            list_pods: 10_000,
            list_repeats: 10,
            load_clients: 64,
            watchers: 1000,
            watch_rate: 1000.0,
            watch_duration: Duration::from_secs(10),
            watch_grace: Duration::from_secs(30),
            client_pool: 4,
            http2: false,
            keep_namespaces: false,
        }
    }
}

impl ApiOptions {
    fn runs(&self, workload: ApiWorkload) -> bool {
        self.workloads.contains(&workload)
    }

    /// Reject sizes the workloads cannot run with, before anything starts.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.kubeconfig.is_some(),
            "no kubeconfig: pass --kubeconfig PATH or set KUBECONFIG"
        );
        ensure!(!self.workloads.is_empty(), "--workloads needs at least one");
        ensure!(self.count != Some(0), "--count must be at least 1");
        ensure!(self.client_pool > 0, "--client-pool must be at least 1");
        if self.runs(ApiWorkload::CreateConfigmaps)
            || self.runs(ApiWorkload::CreatePods)
            || self.runs(ApiWorkload::CreateCustom)
        {
            ensure!(self.clients > 0, "--clients must be at least 1");
        }
        if self.runs(ApiWorkload::Verbs) {
            ensure!(self.verb_clients > 0, "--verb-clients must be at least 1");
            ensure!(
                self.verb_objects >= self.verb_clients,
                "--verb-objects must be at least --verb-clients (every client owns objects)"
            );
        }
        if self.runs(ApiWorkload::ListPods) || self.runs(ApiWorkload::Memory) {
            ensure!(self.list_pods > 0, "--list-pods must be at least 1");
            ensure!(self.load_clients > 0, "--load-clients must be at least 1");
        }
        if self.runs(ApiWorkload::ListPods) {
            ensure!(self.list_repeats > 0, "--list-repeats must be at least 1");
        }
        if self.runs(ApiWorkload::Watch) {
            ensure!(self.watchers > 0, "--watchers must be at least 1");
            ensure!(
                self.watch_rate.is_finite() && self.watch_rate > 0.0,
                "--watch-rate must be a positive number of writes per second"
            );
            ensure!(
                !self.watch_duration.is_zero(),
                "--watch-duration must be positive"
            );
        }
        Ok(())
    }
}

/// Run `capstan bench api` and print its measurements to stdout as they complete.
pub async fn run(args: ApiArgs) -> Result<()> {
    args.options.validate()?;
    let json = args.json;
    let mut failed = None;
    let mut header_printed = json;
    let result = run_api_bench_with(&args.options, &mut |m: &ApiMeasurement| {
        if !header_printed {
            print_line(Ok(api_table_header()), &mut failed);
            header_printed = true;
        }
        let line = if json {
            m.to_json_line()
        } else {
            Ok(m.table_row())
        };
        print_line(line, &mut failed);
    })
    .await;
    result?;
    failed.map_or(Ok(()), Err)
}

/// Run the API benchmark and return every measurement.
pub async fn run_api_bench(options: &ApiOptions) -> Result<Vec<ApiMeasurement>> {
    run_api_bench_with(options, &mut |_| {}).await
}

/// Run the API benchmark, handing each measurement to `on_result` as soon as it is taken.
/// The namespaces it created are deleted at the end, also when a workload fails or the
/// process is interrupted (Ctrl-C).
pub async fn run_api_bench_with(
    options: &ApiOptions,
    on_result: &mut dyn FnMut(&ApiMeasurement),
) -> Result<Vec<ApiMeasurement>> {
    options.validate()?;
    client::raise_open_files_limit();
    let cluster = Arc::new(Cluster::connect(options).await?);
    // The first request: is the server there, and does it accept the credentials?
    let version = cluster.git_version().await?;
    let backend = options.label.clone().unwrap_or(version);
    let mut results = Vec::new();
    let protocol = cluster.protocol();
    let mut record = |mut m: ApiMeasurement| {
        m.backend = backend.clone();
        m.http = protocol.to_owned();
        on_result(&m);
        results.push(m);
    };
    let outcome = tokio::select! {
        outcome = run_workloads(&cluster, options, &mut record) => outcome,
        _ = interrupted() => Err(anyhow!("interrupted")),
    };
    if !options.keep_namespaces {
        cluster.delete_namespaces().await;
    }
    outcome?;
    Ok(results)
}

/// Resolves on Ctrl-C (never, if the signal cannot be listened for).
async fn interrupted() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The selected workloads, in order, each in its own namespace.
async fn run_workloads(
    cluster: &Arc<Cluster>,
    options: &ApiOptions,
    record: &mut dyn FnMut(ApiMeasurement),
) -> Result<()> {
    let run_id = crate::store::run_id();
    let keep = options.keep_namespaces;
    if options.runs(ApiWorkload::ListPods) || options.runs(ApiWorkload::Memory) {
        let ns = cluster.create_namespace(&run_id, "list-pods").await?;
        lists::list_pods(cluster, &ns, options, record).await?;
        cluster.finish_namespace(&ns, keep).await;
    }
    for (workload, kind) in [
        (ApiWorkload::CreateConfigmaps, objects::Kind::ConfigMap),
        (ApiWorkload::CreatePods, objects::Kind::Pod),
        (ApiWorkload::CreateCustom, objects::Kind::Custom),
    ] {
        if options.runs(workload) {
            if kind == objects::Kind::Custom {
                cluster.install_bench_crd().await?;
            }
            let ns = cluster
                .create_namespace(&run_id, kind.workload_name())
                .await?;
            record(creates::creates(cluster, &ns, kind, options).await?);
            cluster.finish_namespace(&ns, keep).await;
            if kind == objects::Kind::Custom && !keep {
                cluster.remove_bench_crd().await;
            }
        }
    }
    if options.runs(ApiWorkload::Verbs) {
        let ns = cluster.create_namespace(&run_id, "verbs").await?;
        verbs::verbs(cluster, &ns, options, record).await?;
        cluster.finish_namespace(&ns, keep).await;
    }
    if options.runs(ApiWorkload::Watch) {
        let ns = cluster.create_namespace(&run_id, "watch").await?;
        record(watch::watch(cluster, &ns, options).await?);
        cluster.finish_namespace(&ns, keep).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_defaults_match_default() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            options: ApiOptions,
        }
        // KUBECONFIG from the environment would fill in --kubeconfig.
        let mut parsed = Cli::parse_from(["bench"]).options;
        parsed.kubeconfig = None;
        let default = ApiOptions::default();
        assert_eq!(format!("{parsed:?}"), format!("{default:?}"));
    }

    #[test]
    fn workload_names_parse() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            options: ApiOptions,
        }
        let parsed =
            Cli::try_parse_from(["bench", "--workloads", "watch,list-pods,create-configmaps"])
                .unwrap()
                .options;
        assert_eq!(
            parsed.workloads,
            [
                ApiWorkload::Watch,
                ApiWorkload::ListPods,
                ApiWorkload::CreateConfigmaps
            ]
        );
        assert!(Cli::try_parse_from(["bench", "--workloads", "nope"]).is_err());
    }

    #[test]
    fn validation() {
        let ok = ApiOptions {
            kubeconfig: Some("k".into()),
            ..Default::default()
        };
        ok.validate().unwrap();
        let err = ApiOptions::default().validate().unwrap_err().to_string();
        assert!(err.contains("--kubeconfig"), "{err}");
        let few_objects = ApiOptions {
            verb_objects: 2,
            ..ok.clone()
        };
        assert!(few_objects.validate().is_err());
        let no_rate = ApiOptions {
            watch_rate: 0.0,
            ..ok
        };
        assert!(no_rate.validate().is_err());
    }
}
