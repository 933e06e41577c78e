//! Prometheus metrics at /metrics, named as kube-apiserver names them: requests by verb,
//! resource and code with latency histograms, requests in flight, registered watchers, and
//! store operation latency.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use capstan_store::{
    DeleteResponse, KeyValue, LeaseId, RangeRequest, RangeResponse, Result, Revision, Store,
    WatchRequest, Watcher,
};
use parking_lot::Mutex;

/// Histogram buckets, in seconds (kube-apiserver's request-duration buckets, abridged).
const BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

#[derive(Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += secs;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        for (i, b) in BUCKETS.iter().enumerate() {
            let c = self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

/// Request labels: (verb, group, version, resource, subresource, scope).
type RequestKey = (String, String, String, String, String, &'static str);

/// The counts and latencies of one request key.
#[derive(Default)]
struct Series {
    /// Requests by response code.
    codes: Vec<(u16, u64)>,
    durations: Histogram,
}

/// Request series found by a hash of their labels, so that counting a request allocates
/// nothing once its series exists (every request of the server passes here).
#[derive(Default)]
struct RequestSeries(HashMap<u64, Vec<(RequestKey, Series)>>);

impl RequestSeries {
    fn series(&mut self, labels: [&str; 5], scope: &'static str) -> &mut Series {
        let mut h = std::hash::DefaultHasher::new();
        labels.hash(&mut h);
        scope.hash(&mut h);
        let same = |k: &RequestKey| {
            k.0 == labels[0]
                && k.1 == labels[1]
                && k.2 == labels[2]
                && k.3 == labels[3]
                && k.4 == labels[4]
                && k.5 == scope
        };
        let slot = self.0.entry(h.finish()).or_default();
        let i = match slot.iter().position(|(k, _)| same(k)) {
            Some(i) => i,
            None => {
                let [verb, g, v, r, sub] = labels.map(str::to_string);
                slot.push(((verb, g, v, r, sub, scope), Series::default()));
                slot.len() - 1
            }
        };
        &mut slot[i].1
    }

    /// Every series, in label order (for a stable exposition).
    fn sorted(&self) -> Vec<&(RequestKey, Series)> {
        let mut all: Vec<_> = self.0.values().flatten().collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

/// All metrics of one API server.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<RequestSeries>,
    store_ops: Mutex<BTreeMap<&'static str, Histogram>>,
    inflight_read: AtomicI64,
    inflight_mutating: AtomicI64,
}

/// Marks a request in flight until dropped.
pub struct InFlight<'a> {
    gauge: &'a AtomicI64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.gauge.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Arc::new(Metrics::default())
    }

    pub fn in_flight(&self, mutating: bool) -> InFlight<'_> {
        let gauge = if mutating {
            &self.inflight_mutating
        } else {
            &self.inflight_read
        };
        gauge.fetch_add(1, Ordering::Relaxed);
        InFlight { gauge }
    }

    /// Count a finished resource request.
    pub fn request(&self, info: &crate::request::RequestInfo, code: u16, elapsed: Duration) {
        let scope = if !info.name.is_empty() {
            "resource"
        } else if info.namespace.is_empty() {
            "cluster"
        } else {
            "namespace"
        };
        let verb = match info.verb.as_str() {
            "watch" => "WATCH",
            "list" => "LIST",
            "get" => "GET",
            "create" => "POST",
            "update" => "PUT",
            "patch" => "PATCH",
            "delete" => "DELETE",
            "deletecollection" => "DELETECOLLECTION",
            other => other,
        };
        let labels = [
            verb,
            &info.group,
            &info.version,
            &info.resource,
            &info.subresource,
        ];
        let mut requests = self.requests.lock();
        let series = requests.series(labels, scope);
        match series.codes.iter_mut().find(|(c, _)| *c == code) {
            Some((_, n)) => *n += 1,
            None => series.codes.push((code, 1)),
        }
        if info.verb != "watch" {
            series.durations.observe(elapsed.as_secs_f64());
        }
    }

    fn store_op(&self, op: &'static str, elapsed: Duration) {
        self.store_ops
            .lock()
            .entry(op)
            .or_default()
            .observe(elapsed.as_secs_f64());
    }

    /// The Prometheus text exposition. `watchers` lists (group, version, kind, count).
    pub fn render(&self, watchers: &[(String, String, String, usize)]) -> String {
        let mut out = String::with_capacity(16 << 10);
        out.push_str("# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.\n# TYPE apiserver_request_total counter\n");
        let requests = self.requests.lock();
        let series = requests.sorted();
        for ((verb, g, v, r, sub, scope), s) in &series {
            let mut codes = s.codes.clone();
            codes.sort_unstable();
            for (code, n) in codes {
                let _ = writeln!(out, "apiserver_request_total{{code=\"{code}\",component=\"apiserver\",dry_run=\"\",group=\"{g}\",resource=\"{r}\",scope=\"{scope}\",subresource=\"{sub}\",verb=\"{verb}\",version=\"{v}\"}} {n}");
            }
        }
        out.push_str("# HELP apiserver_request_duration_seconds Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.\n# TYPE apiserver_request_duration_seconds histogram\n");
        for ((verb, g, v, r, sub, scope), s) in &series {
            if s.durations.count == 0 {
                continue;
            }
            let labels = format!("component=\"apiserver\",dry_run=\"\",group=\"{g}\",resource=\"{r}\",scope=\"{scope}\",subresource=\"{sub}\",verb=\"{verb}\",version=\"{v}\"");
            s.durations
                .render(&mut out, "apiserver_request_duration_seconds", &labels);
        }
        drop(requests);
        out.push_str("# HELP apiserver_current_inflight_requests Maximal number of currently used inflight request limit of this apiserver per request kind in last second.\n# TYPE apiserver_current_inflight_requests gauge\n");
        let _ = writeln!(
            out,
            "apiserver_current_inflight_requests{{request_kind=\"mutating\"}} {}",
            self.inflight_mutating.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "apiserver_current_inflight_requests{{request_kind=\"readOnly\"}} {}",
            self.inflight_read.load(Ordering::Relaxed)
        );
        out.push_str("# HELP apiserver_registered_watchers Number of currently registered watchers for a given resources\n# TYPE apiserver_registered_watchers gauge\n");
        for (g, v, k, n) in watchers {
            let _ = writeln!(
                out,
                "apiserver_registered_watchers{{group=\"{g}\",kind=\"{k}\",version=\"{v}\"}} {n}"
            );
        }
        process_metrics(&mut out);
        out.push_str("# HELP etcd_request_duration_seconds Etcd request latency in seconds for each operation and object type.\n# TYPE etcd_request_duration_seconds histogram\n");
        for (op, h) in self.store_ops.lock().iter() {
            h.render(
                &mut out,
                "etcd_request_duration_seconds",
                &format!("operation=\"{op}\""),
            );
        }
        out
    }
}

/// process_resident_memory_bytes and process_cpu_seconds_total, as Go's process collector
/// reports them (benchmarks read the server's memory from here).
fn process_metrics(out: &mut String) {
    let page = 4096u64;
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * page);
    if let Some(rss) = rss {
        out.push_str("# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge\n");
        let _ = writeln!(out, "process_resident_memory_bytes {rss}");
    }
    // utime and stime are fields 14 and 15 of /proc/self/stat, in clock ticks (100 Hz).
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / 100.0)
        });
    if let Some(cpu) = cpu {
        out.push_str("# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n# TYPE process_cpu_seconds_total counter\n");
        let _ = writeln!(out, "process_cpu_seconds_total {cpu}");
    }
}

/// A store that records each operation's latency.
pub struct MeteredStore {
    pub inner: Arc<dyn Store>,
    pub metrics: Arc<Metrics>,
}

macro_rules! timed {
    ($self:ident, $op:literal, $call:expr) => {{
        let started = Instant::now();
        let r = $call.await;
        $self.metrics.store_op($op, started.elapsed());
        r
    }};
}

#[async_trait]
impl Store for MeteredStore {
    async fn get(&self, key: &[u8], revision: Revision) -> Result<(Option<KeyValue>, Revision)> {
        timed!(self, "get", self.inner.get(key, revision))
    }
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        timed!(self, "list", self.inner.range(req))
    }
    async fn create(&self, key: &[u8], value: Bytes, lease: LeaseId) -> Result<Revision> {
        timed!(self, "create", self.inner.create(key, value, lease))
    }
    async fn update(
        &self,
        key: &[u8],
        value: Bytes,
        expected: Revision,
        lease: LeaseId,
    ) -> Result<Revision> {
        timed!(
            self,
            "update",
            self.inner.update(key, value, expected, lease)
        )
    }
    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<DeleteResponse> {
        timed!(self, "delete", self.inner.delete(key, expected))
    }
    async fn watch(&self, req: WatchRequest) -> Result<Watcher> {
        self.inner.watch(req).await
    }
    async fn compact(&self, revision: Revision) -> Result<()> {
        timed!(self, "compact", self.inner.compact(revision))
    }
    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }
    async fn compacted_revision(&self) -> Result<Revision> {
        self.inner.compacted_revision().await
    }
    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId> {
        timed!(self, "grant", self.inner.grant_lease(ttl))
    }
    async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        self.inner.keep_alive(lease).await
    }
    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        timed!(self, "revoke", self.inner.revoke_lease(lease))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GET /api/v1/namespaces/default/pods/p
    fn get_pod() -> crate::request::RequestInfo {
        crate::request::RequestInfo {
            is_resource: true,
            verb: "get".into(),
            version: "v1".into(),
            resource: "pods".into(),
            namespace: "default".into(),
            name: "p".into(),
            ..Default::default()
        }
    }

    #[test]
    fn requests_render_in_prometheus_text() {
        let m = Metrics::new();
        let info = get_pod();
        m.request(&info, 200, Duration::from_millis(3));
        {
            let _f = m.in_flight(true);
            assert!(m.render(&[]).contains("request_kind=\"mutating\"} 1"));
        }
        let text = m.render(&[("".into(), "v1".into(), "Pod".into(), 2)]);
        assert!(text.contains("apiserver_request_total{code=\"200\""));
        assert!(text.contains("verb=\"GET\""));
        assert!(text.contains("apiserver_request_duration_seconds_bucket{"));
        assert!(text.contains("le=\"0.005\"} 1"));
        assert!(text
            .contains("apiserver_registered_watchers{group=\"\",kind=\"Pod\",version=\"v1\"} 2"));
        assert!(text.contains("request_kind=\"mutating\"} 0"));
    }

    #[test]
    fn each_series_counts_its_codes_and_only_its_own_requests() {
        let m = Metrics::new();
        let get = get_pod();
        let watch = crate::request::RequestInfo {
            verb: "watch".into(),
            name: String::new(),
            ..get.clone()
        };
        let status = crate::request::RequestInfo {
            subresource: "status".into(),
            ..get.clone()
        };
        for code in [404, 200, 200] {
            m.request(&get, code, Duration::from_millis(30));
        }
        m.request(&watch, 200, Duration::from_secs(30));
        m.request(&status, 200, Duration::from_millis(1));
        let text = m.render(&[]);
        let totals: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .collect();
        let line = |code: &str, sub: &str, verb: &str| {
            format!("apiserver_request_total{{code=\"{code}\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"{}\",subresource=\"{sub}\",verb=\"{verb}\",version=\"v1\"}}",
                if verb == "WATCH" { "namespace" } else { "resource" })
        };
        assert_eq!(
            totals,
            [
                format!("{} 2", line("200", "", "GET")),
                format!("{} 1", line("404", "", "GET")),
                format!("{} 1", line("200", "status", "GET")),
                format!("{} 1", line("200", "", "WATCH")),
            ]
        );
        // Watches have no latency histogram; the two GET series have one each.
        let counts: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("apiserver_request_duration_seconds_count"))
            .collect();
        assert_eq!(counts.len(), 2, "{counts:?}");
        assert!(counts[0].contains("subresource=\"\"") && counts[0].ends_with(" 3"));
        assert!(counts[1].contains("subresource=\"status\"") && counts[1].ends_with(" 1"));
    }
}
