//! Measurements and how they are printed: an aligned table, or one JSON object per line.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::latency::Summary;

/// The store backend a measurement was taken against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Embedded,
    Etcd,
}

/// What a store measurement exercised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Creates of distinct keys by concurrent writers.
    Write,
    /// Point reads of existing keys by concurrent readers.
    Get,
    /// Whole reads of a range of keys.
    Range,
    /// Delivery latency of writes to many watchers of a prefix.
    Watch,
    /// Process memory per byte of live data (embedded only).
    Memory,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Embedded => "embedded",
            Backend::Etcd => "etcd",
        }
    }
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Write => "write",
            Workload::Get => "get",
            Workload::Range => "range",
            Workload::Watch => "watch",
            Workload::Memory => "memory",
        }
    }

    /// Workloads whose operations are writes report `writes_per_s` rather than `ops_per_s`.
    fn is_write(self) -> bool {
        matches!(self, Workload::Write | Workload::Memory)
    }
}

/// One row of results: a workload at one concurrency against one backend.
///
/// Serialized as one JSON line; fields that do not apply to the workload are left out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub backend: Backend,
    pub workload: Workload,
    /// Concurrent clients: writers, readers, range readers, watchers, or loaders for memory.
    pub writers: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops_per_s: Option<f64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Operations measured (for watch: events delivered, over all watchers).
    pub count: u64,
    /// Wall time of the measurement.
    pub seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_size: Option<usize>,
    /// Keys per range read (range) or keys loaded (memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<u64>,
    /// Writes per second the watch workload's writer achieved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_rate: Option<f64>,
    /// Watch events that were written but not delivered before the grace period ran out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<u64>,
    /// Sum of key and value sizes of the loaded keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_bytes: Option<u64>,
    /// Growth of the process's resident set while loading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// `rss_bytes / live_bytes`: bytes of memory per byte of data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
}

impl Measurement {
    /// A measurement of `summary.count` operations by `clients` over `elapsed`.
    pub(crate) fn new(
        backend: Backend,
        workload: Workload,
        clients: usize,
        summary: Summary,
        elapsed: Duration,
    ) -> Self {
        let rate = round(summary.count as f64 / elapsed.as_secs_f64().max(1e-9), 2);
        let (writes_per_s, ops_per_s) = if workload.is_write() {
            (Some(rate), None)
        } else {
            (None, Some(rate))
        };
        Measurement {
            backend,
            workload,
            writers: clients,
            writes_per_s,
            ops_per_s,
            p50_ms: summary.p50_ms,
            p99_ms: summary.p99_ms,
            count: summary.count,
            seconds: round(elapsed.as_secs_f64(), 3),
            value_size: None,
            keys: None,
            write_rate: None,
            missed: None,
            live_bytes: None,
            rss_bytes: None,
            ratio: None,
        }
    }

    /// Operations (or writes) per second, whichever this workload reports.
    pub fn throughput(&self) -> f64 {
        self.writes_per_s.or(self.ops_per_s).unwrap_or(0.0)
    }

    /// This measurement as one line of JSON (no trailing newline).
    pub fn to_json_line(&self) -> anyhow::Result<String> {
        Ok(serde_json::to_string(self)?)
    }

    /// This measurement as a row of [`table_header`]'s table.
    pub fn table_row(&self) -> String {
        format!(
            "{:<9} {:<8} {:>7} {:>12.1} {:>9.4} {:>9.4}  {}",
            self.backend.name(),
            self.workload.name(),
            self.writers,
            self.throughput(),
            self.p50_ms,
            self.p99_ms,
            self.extra()
        )
    }

    /// The workload-specific details, for the table's last column.
    fn extra(&self) -> String {
        let mut parts = vec![format!("count={}", self.count)];
        if let Some(size) = self.value_size {
            parts.push(format!("value={size}B"));
        }
        if let Some(keys) = self.keys {
            parts.push(format!("keys={keys}"));
        }
        if let Some(rate) = self.write_rate {
            parts.push(format!("write_rate={rate:.0}/s"));
        }
        if let Some(missed) = self.missed {
            parts.push(format!("missed={missed}"));
        }
        if let (Some(live), Some(rss), Some(ratio)) = (self.live_bytes, self.rss_bytes, self.ratio)
        {
            parts.push(format!(
                "live={} rss_growth={} ratio={ratio:.2}",
                mib(live),
                mib(rss)
            ));
        }
        parts.join(" ")
    }
}

/// The header line of the table [`Measurement::table_row`] fills.
pub fn table_header() -> String {
    format!(
        "{:<9} {:<8} {:>7} {:>12} {:>9} {:>9}  extra",
        "backend", "workload", "clients", "ops/s", "p50 ms", "p99 ms"
    )
}

/// `x` rounded to `decimals` places, to keep JSON lines short.
pub(crate) fn round(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

fn mib(bytes: u64) -> String {
    format!("{:.1}MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Measurement {
        let summary = Summary {
            count: 100,
            p50_ms: 1.0,
            p99_ms: 2.0,
            max_ms: 3.0,
        };
        Measurement::new(
            Backend::Etcd,
            Workload::Write,
            64,
            summary,
            Duration::from_secs(2),
        )
    }

    #[test]
    fn writes_report_writes_per_s() {
        let line = sample().to_json_line().unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["backend"], "etcd");
        assert_eq!(v["workload"], "write");
        assert_eq!(v["writers"], 64);
        assert_eq!(v["writes_per_s"], 50.0);
        assert!(v.get("ops_per_s").is_none());
        assert!(v.get("ratio").is_none());
    }

    #[test]
    fn table_row_lines_up_with_header() {
        let row = sample().table_row();
        let header = table_header();
        assert_eq!(row.find("count="), header.find("extra"));
    }
}
