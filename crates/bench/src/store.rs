//! `capstan bench store`: the same workloads against the embedded store and etcd, side by side.
//!
//! Workloads: `write` (creates of distinct keys by 1 and 64 writers), `get` (point reads),
//! `range` (whole reads of a 10,000-key range), `watch` (delivery latency to 100 watchers) and
//! `memory` (resident memory per byte of data, embedded only). Everything is written under a
//! unique prefix `/bench/<run-id>/`, which is deleted from etcd at the end.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use capstan_store::embedded::EmbeddedStore;
use capstan_store::etcd::{EtcdConfig, EtcdStore};
use capstan_store::Store;

pub use crate::report::{Backend, Measurement, Workload};

mod memory;
mod watch;
pub(crate) mod workloads;

/// Arguments of `capstan bench store`.
#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    #[command(flatten)]
    pub options: StoreOptions,

    /// Print one JSON object per measurement and line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What `capstan bench store` runs, and how big. [`Default`] matches the command line's defaults.
#[derive(clap::Args, Clone, Debug)]
pub struct StoreOptions {
    /// Backends to measure. Default: embedded, and etcd too when --etcd-endpoints is given.
    #[arg(long, value_delimiter = ',')]
    pub backends: Vec<Backend>,

    /// etcd client URLs, for example http://127.0.0.1:2379.
    #[arg(long, value_delimiter = ',', value_name = "URL")]
    pub etcd_endpoints: Vec<String>,

    /// Where to create the embedded store's temporary data directories (default: the system
    /// temporary directory). Use a directory on the disk you want to measure.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Workloads to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "write,get,range,watch,memory"
    )]
    pub workloads: Vec<Workload>,

    /// How long each write, get and range measurement runs.
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse_duration)]
    pub duration: Duration,

    /// Run each write, get, range and watch measurement for this many operations instead of
    /// for --duration.
    #[arg(long)]
    pub count: Option<u64>,

    /// Numbers of concurrent writers, one write measurement each.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    pub writers: Vec<usize>,

    /// Size of every value written, in bytes (at least 16).
    #[arg(long, default_value_t = 1024)]
    pub value_size: usize,

    /// Concurrent readers of the get workload.
    #[arg(long, default_value_t = 16)]
    pub readers: usize,

    /// Keys loaded for the get and range workloads; each range read returns all of them.
    #[arg(long, default_value_t = 10_000)]
    pub range_keys: usize,

    /// Concurrent clients of the range workload.
    #[arg(long, default_value_t = 1)]
    pub range_clients: usize,

    /// Watchers of the watch workload, all on the same prefix.
    #[arg(long, default_value_t = 100)]
    pub watchers: usize,

    /// Writes per second during the watch workload.
    #[arg(long, default_value_t = 1000.0)]
    pub watch_rate: f64,

    /// How long the watch workload writes.
    #[arg(long, default_value = "3s", value_parser = crate::duration::parse_duration)]
    pub watch_duration: Duration,

    /// Keys loaded by the memory workload.
    #[arg(long, default_value_t = 100_000)]
    pub memory_keys: usize,

    /// Leave the keys written to etcd in place instead of deleting them at the end.
    #[arg(long)]
    pub keep_keys: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            backends: Vec::new(),
            etcd_endpoints: Vec::new(),
            data_dir: None,
            workloads: vec![
                Workload::Write,
                Workload::Get,
                Workload::Range,
                Workload::Watch,
                Workload::Memory,
            ],
            duration: Duration::from_secs(10),
            count: None,
            writers: vec![1, 64],
            value_size: 1024,
            readers: 16,
            range_keys: 10_000,
            range_clients: 1,
            watchers: 100,
            watch_rate: 1000.0,
            watch_duration: Duration::from_secs(3),
            memory_keys: 100_000,
            keep_keys: false,
        }
    }
}

impl StoreOptions {
    /// The backends to measure: as asked, or embedded plus etcd when endpoints were given.
    pub fn selected_backends(&self) -> Result<Vec<Backend>> {
        let backends = if self.backends.is_empty() {
            let mut all = vec![Backend::Embedded];
            if !self.etcd_endpoints.is_empty() {
                all.push(Backend::Etcd);
            }
            all
        } else {
            self.backends.clone()
        };
        if backends.contains(&Backend::Etcd) && self.etcd_endpoints.is_empty() {
            bail!("the etcd backend needs --etcd-endpoints URL[,URL...]");
        }
        Ok(backends)
    }

    fn runs(&self, workload: Workload) -> bool {
        self.workloads.contains(&workload)
    }

    /// Reject sizes the workloads cannot run with and backends without an address, before
    /// anything starts.
    pub fn validate(&self) -> Result<()> {
        self.selected_backends()?;
        ensure!(
            (16..=capstan_store::MAX_VALUE_BYTES).contains(&self.value_size),
            "--value-size must be between 16 and {} bytes",
            capstan_store::MAX_VALUE_BYTES
        );
        ensure!(self.count != Some(0), "--count must be at least 1");
        if self.runs(Workload::Write) {
            ensure!(
                !self.writers.is_empty(),
                "--writers needs at least one number"
            );
            ensure!(
                !self.writers.contains(&0),
                "--writers must all be at least 1"
            );
        }
        if self.runs(Workload::Get) {
            ensure!(self.readers > 0, "--readers must be at least 1");
        }
        if self.runs(Workload::Get) || self.runs(Workload::Range) {
            ensure!(self.range_keys > 0, "--range-keys must be at least 1");
            ensure!(self.range_clients > 0, "--range-clients must be at least 1");
        }
        if self.runs(Workload::Watch) {
            ensure!(self.watchers > 0, "--watchers must be at least 1");
            ensure!(
                self.watch_rate.is_finite() && self.watch_rate > 0.0,
                "--watch-rate must be a positive number of writes per second"
            );
        }
        if self.runs(Workload::Memory) {
            ensure!(self.memory_keys > 0, "--memory-keys must be at least 1");
        }
        Ok(())
    }
}

/// Run `capstan bench store` and print its measurements to stdout as they complete.
pub async fn run(args: StoreArgs) -> Result<()> {
    args.options.validate()?;
    let json = args.json;
    let mut failed = None;
    if !json {
        print_line(Ok(crate::report::table_header()), &mut failed);
    }
    let result = run_store_bench_with(&args.options, &mut |m: &Measurement| {
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

/// Write one line to stdout, remembering the first failure (say, a closed pipe) instead of
/// panicking as `println!` would.
pub(crate) fn print_line(line: Result<String>, failed: &mut Option<anyhow::Error>) {
    if failed.is_some() {
        return;
    }
    let written = line.and_then(|line| {
        writeln!(std::io::stdout().lock(), "{line}").context("writing the results to stdout")
    });
    if let Err(e) = written {
        *failed = Some(e);
    }
}

/// Run the store benchmark and return every measurement.
pub async fn run_store_bench(options: &StoreOptions) -> Result<Vec<Measurement>> {
    run_store_bench_with(options, &mut |_| {}).await
}

/// Run the store benchmark, handing each measurement to `on_result` as soon as it is taken.
pub async fn run_store_bench_with(
    options: &StoreOptions,
    on_result: &mut dyn FnMut(&Measurement),
) -> Result<Vec<Measurement>> {
    options.validate()?;
    let backends = options.selected_backends()?;
    let prefix = format!("/bench/{}/", run_id());
    let mut results = Vec::new();
    let mut record = |m: Measurement| {
        on_result(&m);
        results.push(m);
    };
    for backend in backends {
        match backend {
            Backend::Embedded => bench_embedded(options, &prefix, &mut record).await?,
            Backend::Etcd => bench_etcd(options, &prefix, &mut record).await?,
        }
    }
    Ok(results)
}

/// Everything a workload needs: the store under test and where to write.
pub(crate) struct Target<'a> {
    pub backend: Backend,
    pub store: Arc<dyn Store>,
    pub options: &'a StoreOptions,
    /// `/bench/<run-id>/`; each workload writes below it.
    pub prefix: String,
}

/// The embedded store in a fresh temporary directory, removed afterwards.
async fn bench_embedded(
    options: &StoreOptions,
    prefix: &str,
    record: &mut dyn FnMut(Measurement),
) -> Result<()> {
    let parent = options.data_dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("creating the data directory {}", parent.display()))?;
    let dir = tempfile::Builder::new()
        .prefix("capstan-bench-")
        .tempdir_in(&parent)
        .with_context(|| format!("creating a temporary directory in {}", parent.display()))?;
    // Memory first: it needs an allocator not yet fragmented by the other workloads.
    if options.runs(Workload::Memory) {
        record(memory::memory(options, &dir.path().join("memory"), prefix).await?);
    }
    let store = open_embedded(&dir.path().join("store"))?;
    let target = Target {
        backend: Backend::Embedded,
        store,
        options,
        prefix: prefix.to_owned(),
    };
    run_workloads(&target, record).await?;
    drop(target);
    dir.close()
        .context("removing the embedded store's temporary directory")
}

/// Open an embedded store, as a trait object.
pub(crate) fn open_embedded(dir: &Path) -> Result<Arc<dyn Store>> {
    let store = EmbeddedStore::open(dir)
        .with_context(|| format!("opening the embedded store in {}", dir.display()))?;
    Ok(Arc::new(store))
}

/// The etcd at `--etcd-endpoints`; the keys written are deleted afterwards unless --keep-keys.
async fn bench_etcd(
    options: &StoreOptions,
    prefix: &str,
    record: &mut dyn FnMut(Measurement),
) -> Result<()> {
    let endpoints = options.etcd_endpoints.clone();
    let shown = endpoints.join(",");
    let config = EtcdConfig {
        // Compacting someone's etcd is not a benchmark's business.
        compaction_interval: None,
        ..EtcdConfig::new(endpoints)
    };
    let store = EtcdStore::connect(config)
        .await
        .with_context(|| format!("connecting to etcd at {shown}"))?;
    let target = Target {
        backend: Backend::Etcd,
        store: Arc::new(store),
        options,
        prefix: prefix.to_owned(),
    };
    let result = run_workloads(&target, record).await;
    if !options.keep_keys {
        let cleaned = workloads::delete_prefix(&target.store, prefix)
            .await
            .with_context(|| format!("deleting the benchmark's keys under {prefix} from etcd"));
        // A failed workload's error matters more than a failed cleanup's.
        result?;
        cleaned?;
        return Ok(());
    }
    result
}

/// The workloads every backend runs, in order, on one store.
async fn run_workloads(target: &Target<'_>, record: &mut dyn FnMut(Measurement)) -> Result<()> {
    let options = target.options;
    if options.runs(Workload::Write) {
        for &writers in &options.writers {
            record(workloads::write(target, writers).await?);
        }
    }
    if options.runs(Workload::Get) || options.runs(Workload::Range) {
        let data = workloads::load_dataset(target).await?;
        if options.runs(Workload::Get) {
            record(workloads::get(target, &data).await?);
        }
        if options.runs(Workload::Range) {
            record(workloads::range(target, &data).await?);
        }
    }
    if options.runs(Workload::Watch) {
        record(watch::watch(target).await?);
    }
    Ok(())
}

/// A run identifier unique enough to keep concurrent and past runs' keys apart.
pub(crate) fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!("{:x}-{:x}", std::process::id(), nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_needs_endpoints() {
        let options = StoreOptions {
            backends: vec![Backend::Etcd],
            ..Default::default()
        };
        let err = options.selected_backends().unwrap_err().to_string();
        assert!(err.contains("--etcd-endpoints"), "{err}");
    }

    #[test]
    fn endpoints_add_etcd_by_default() {
        let mut options = StoreOptions::default();
        assert_eq!(options.selected_backends().unwrap(), [Backend::Embedded]);
        options.etcd_endpoints = vec!["http://127.0.0.1:2379".into()];
        assert_eq!(
            options.selected_backends().unwrap(),
            [Backend::Embedded, Backend::Etcd]
        );
    }

    #[test]
    fn command_line_defaults_match_default() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            options: StoreOptions,
        }
        let parsed = Cli::parse_from(["bench"]).options;
        let default = StoreOptions::default();
        assert_eq!(format!("{parsed:?}"), format!("{default:?}"));
    }

    #[test]
    fn small_values_are_rejected() {
        let options = StoreOptions {
            value_size: 8,
            ..Default::default()
        };
        assert!(options.validate().is_err());
    }
}
