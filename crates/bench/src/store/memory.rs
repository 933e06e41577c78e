//! The memory workload: how much resident memory the embedded store needs per byte of data.

use std::path::Path;

use anyhow::{Context, Result};

use super::workloads::{load, load_clients};
use super::{open_embedded, Backend, Measurement, StoreOptions, Workload};
use crate::latency::Latencies;
use crate::report::round;

/// Load `--memory-keys` keys into a fresh embedded store in `dir` and compare the growth of
/// this process's resident set with the bytes of keys and values loaded.
///
/// The store stays open until both readings are taken, so nothing it holds is freed early.
pub(crate) async fn memory(
    options: &StoreOptions,
    dir: &Path,
    prefix: &str,
) -> Result<Measurement> {
    let n = options.memory_keys;
    let clients = load_clients(n);
    let samples = (0..clients)
        .map(|_| Latencies::with_capacity(n / clients + 1))
        .collect();
    let store = open_embedded(dir)?;
    let prefix = format!("{prefix}memory/");
    let before = resident_bytes()?;
    let loaded = load(&store, prefix.as_bytes(), n, options.value_size, samples)
        .await
        .with_context(|| format!("loading {n} keys for the memory workload"))?;
    let after = resident_bytes()?;
    drop(store);
    let growth = after.saturating_sub(before);
    let live = loaded.live_bytes;
    let mut m = Measurement::new(
        Backend::Embedded,
        Workload::Memory,
        clients,
        loaded.latencies.summary(),
        loaded.elapsed,
    );
    m.value_size = Some(options.value_size);
    m.keys = Some(n as u64);
    m.live_bytes = Some(live);
    m.rss_bytes = Some(growth);
    m.ratio = Some(round(growth as f64 / live.max(1) as f64, 4));
    Ok(m)
}

/// This process's resident set size, from the `VmRSS` line of /proc/self/status.
fn resident_bytes() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")
        .context("reading /proc/self/status for the memory workload (Linux only)")?;
    parse_vm_rss(&status).context("no VmRSS line in /proc/self/status")
}

/// The `VmRSS:   1234 kB` line of a /proc status file, in bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vm_rss() {
        let status = "Name:\tcapstan\nVmPeak:\t  9000 kB\nVmRSS:\t  1234 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(1234 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
    }

    #[test]
    fn reads_own_rss() {
        assert!(resident_bytes().unwrap() > 0);
    }
}
