//! `capstan bench api`'s measurements: the same aligned table or JSON lines as
//! `capstan bench store`, with the server as the backend.

use std::time::Duration;

use serde::Serialize;

use crate::latency::Summary;
use crate::report::round;

/// One row of results.
///
/// Serialized as one JSON line; optional fields that do not apply to the row are left out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ApiMeasurement {
    /// The server's gitVersion, or `--label`.
    pub backend: String,
    /// `create-configmaps`, `create-pods`, `get`, `update`, `patch`, `list`, `delete`,
    /// `list-pods`, `watch` or `memory`.
    pub workload: String,
    /// The HTTP version spoken: `h2` or `http/1.1`.
    pub http: String,
    /// Concurrent clients (for watch: watchers; for memory: the clients that loaded the Pods).
    pub clients: usize,
    /// Operations per second (watch: events delivered per second over all watchers; memory:
    /// Pods loaded per second).
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Operations measured (watch: events delivered; memory: Pods held).
    pub count: u64,
    /// Wall time of the measurement.
    pub seconds: f64,
    /// Requests answered 429 or 5xx, left out of the latencies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
    /// Size of each object sent, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_bytes: Option<u64>,
    /// Items per list response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<u64>,
    /// Size of each list response, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_bytes: Option<u64>,
    /// The list's `resourceVersion` parameter: `"0"` (from the cache) or `""` (consistent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Writes per second the watch workload's writer achieved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_rate: Option<f64>,
    /// The watch writer's own request latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_p99_ms: Option<f64>,
    /// Events written but not delivered, summed over watchers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed: Option<u64>,
    /// Watches the server ended early that were resumed from their last resourceVersion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch_restarts: Option<u64>,
    /// Pods in the namespace (memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods: Option<u64>,
    /// The server's resident memory: present (possibly `null`) on memory rows only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<Option<u64>>,
    /// The server's resident memory before the Pods were loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_before_bytes: Option<u64>,
    /// CPU cores the benchmark process used during the measurement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cpu: Option<f64>,
    /// CPU cores the server used during the measurement (from its /metrics).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu: Option<f64>,
    /// Why a value is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl ApiMeasurement {
    /// A measurement of `summary.count` operations by `clients` over `elapsed`.
    pub(crate) fn new(
        workload: &str,
        clients: usize,
        summary: Summary,
        elapsed: Duration,
    ) -> ApiMeasurement {
        ApiMeasurement {
            backend: String::new(),
            workload: workload.to_owned(),
            http: String::new(),
            clients,
            ops_per_s: round(summary.count as f64 / elapsed.as_secs_f64().max(1e-9), 1),
            p50_ms: round(summary.p50_ms, 3),
            p99_ms: round(summary.p99_ms, 3),
            max_ms: round(summary.max_ms, 3),
            count: summary.count,
            seconds: round(elapsed.as_secs_f64(), 3),
            errors: None,
            object_bytes: None,
            items: None,
            response_bytes: None,
            resource_version: None,
            write_rate: None,
            write_p99_ms: None,
            missed: None,
            watch_restarts: None,
            pods: None,
            rss_bytes: None,
            rss_before_bytes: None,
            client_cpu: None,
            server_cpu: None,
            note: None,
        }
    }

    /// This measurement as one line of JSON (no trailing newline).
    pub fn to_json_line(&self) -> anyhow::Result<String> {
        Ok(serde_json::to_string(self)?)
    }

    /// This measurement as a row of [`api_table_header`]'s table.
    pub fn table_row(&self) -> String {
        format!(
            "{:<12} {:<17} {:>7} {:>10.1} {:>9.3} {:>9.3} {:>9.3}  {}",
            self.backend,
            self.workload,
            self.clients,
            self.ops_per_s,
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.extra()
        )
    }

    /// The row-specific details, for the table's last column.
    fn extra(&self) -> String {
        let mut parts = vec![format!("count={}", self.count)];
        if let Some(rv) = &self.resource_version {
            parts.push(format!("rv={rv:?}"));
        }
        if let Some(items) = self.items {
            parts.push(format!("items={items}"));
        }
        if let Some(bytes) = self.response_bytes {
            parts.push(format!("response={}", human_bytes(bytes)));
        }
        if let Some(bytes) = self.object_bytes {
            parts.push(format!("object={bytes}B"));
        }
        if let Some(rate) = self.write_rate {
            parts.push(format!("write_rate={rate:.0}/s"));
        }
        if let Some(p99) = self.write_p99_ms {
            parts.push(format!("write_p99={p99:.1}ms"));
        }
        if let Some(missed) = self.missed {
            parts.push(format!("missed={missed}"));
        }
        if let Some(restarts) = self.watch_restarts.filter(|r| *r > 0) {
            parts.push(format!("restarts={restarts}"));
        }
        if let Some(pods) = self.pods {
            parts.push(format!("pods={pods}"));
        }
        if let Some(rss) = self.rss_bytes {
            parts.push(format!("rss={}", rss.map_or("null".into(), human_bytes)));
        }
        if let Some(before) = self.rss_before_bytes {
            parts.push(format!("rss_before={}", human_bytes(before)));
        }
        if let Some(errors) = self.errors.filter(|e| *e > 0) {
            parts.push(format!("errors={errors}"));
        }
        if let Some(cpu) = self.client_cpu {
            parts.push(format!("bench_cpu={cpu:.2}"));
        }
        if let Some(cpu) = self.server_cpu {
            parts.push(format!("server_cpu={cpu:.2}"));
        }
        if let Some(note) = &self.note {
            parts.push(format!("note: {note}"));
        }
        parts.join(" ")
    }
}

/// The header line of the table [`ApiMeasurement::table_row`] fills.
pub fn api_table_header() -> String {
    format!(
        "{:<12} {:<17} {:>7} {:>10} {:>9} {:>9} {:>9}  extra",
        "backend", "workload", "clients", "ops/s", "p50 ms", "p99 ms", "max ms"
    )
}

fn human_bytes(bytes: u64) -> String {
    if bytes >= 1024 * 1024 {
        format!("{:.1}MiB", bytes as f64 / (1024.0 * 1024.0))
    } else if bytes >= 1024 {
        format!("{:.1}KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ApiMeasurement {
        let summary = Summary {
            count: 100,
            p50_ms: 1.0,
            p99_ms: 2.0,
            max_ms: 3.0,
        };
        let mut m = ApiMeasurement::new("memory", 64, summary, Duration::from_secs(2));
        m.backend = "v1.32.0".into();
        m
    }

    #[test]
    fn json_lines() {
        let mut m = sample();
        let v: serde_json::Value = serde_json::from_str(&m.to_json_line().unwrap()).unwrap();
        assert_eq!(v["backend"], "v1.32.0");
        assert_eq!(v["workload"], "memory");
        assert_eq!(v["clients"], 64);
        assert_eq!(v["ops_per_s"], 50.0);
        assert_eq!(v["count"], 100);
        assert!(v.get("rss_bytes").is_none());
        m.rss_bytes = Some(None);
        m.note = Some("no /metrics".into());
        let line = m.to_json_line().unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert!(
            v["rss_bytes"].is_null() && v.get("rss_bytes").is_some(),
            "{line}"
        );
        m.rss_bytes = Some(Some(5));
        let v: serde_json::Value = serde_json::from_str(&m.to_json_line().unwrap()).unwrap();
        assert_eq!(v["rss_bytes"], 5);
    }

    #[test]
    fn table_row_lines_up_with_header() {
        let row = sample().table_row();
        assert_eq!(row.find("count="), api_table_header().find("extra"));
    }
}
