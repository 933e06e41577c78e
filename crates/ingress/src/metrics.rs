//! Prometheus metrics on `--metrics-port`: requests by ingress, service and status code, a
//! latency histogram (time to the response head), configuration reloads, and the process's
//! memory and CPU. Counters are atomics per (namespace, ingress, service), so counting a
//! request takes no lock; the map of them is only locked when a configuration is built and
//! when `/metrics` is scraped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

/// Latency buckets in seconds (ingress-nginx's request-duration buckets).
pub const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The status codes counted one by one: 100 to 599 (anything else counts as 599's neighbour,
/// which a conforming server never sends).
const FIRST_STATUS: u16 = 100;
const STATUSES: usize = 500;

/// Counters of the requests one ingress sent to one service.
pub struct RouteStats {
    namespace: String,
    ingress: String,
    service: String,
    status: Box<[AtomicU64; STATUSES]>,
    buckets: [AtomicU64; BUCKETS.len()],
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl RouteStats {
    fn new(namespace: &str, ingress: &str, service: &str) -> RouteStats {
        RouteStats {
            namespace: namespace.to_string(),
            ingress: ingress.to_string(),
            service: service.to_string(),
            status: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Count one request answered with `status` after `elapsed`.
    pub fn observe(&self, status: u16, elapsed: Duration) {
        let i = usize::from(status.clamp(FIRST_STATUS, FIRST_STATUS + STATUSES as u16 - 1))
            - usize::from(FIRST_STATUS);
        self.status[i].fetch_add(1, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        if let Some(b) = BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[b].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_micros
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn labels(&self) -> String {
        format!(
            "namespace=\"{}\",ingress=\"{}\",service=\"{}\"",
            escape(&self.namespace),
            escape(&self.ingress),
            escape(&self.service)
        )
    }
}

/// Every metric of one controller.
pub struct Metrics {
    routes: Mutex<BTreeMap<(String, String, String), Arc<RouteStats>>>,
    /// Requests that matched no rule and no default backend.
    unmatched: Arc<RouteStats>,
    reloads: AtomicU64,
    last_reload_unix: AtomicU64,
    ingresses: AtomicU64,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            routes: Mutex::new(BTreeMap::new()),
            unmatched: Arc::new(RouteStats::new("", "", "")),
            reloads: AtomicU64::new(0),
            last_reload_unix: AtomicU64::new(0),
            ingresses: AtomicU64::new(0),
            ready: AtomicBool::new(false),
        }
    }

    /// The counters of requests that `namespace/ingress` routes to `service` (kept across
    /// configurations, so a reload does not reset them).
    pub fn route(&self, namespace: &str, ingress: &str, service: &str) -> Arc<RouteStats> {
        self.routes
            .lock()
            .entry((namespace.into(), ingress.into(), service.into()))
            .or_insert_with(|| Arc::new(RouteStats::new(namespace, ingress, service)))
            .clone()
    }

    /// The counters of requests no rule matched.
    pub fn unmatched(&self) -> &Arc<RouteStats> {
        &self.unmatched
    }

    /// A new configuration of `ingresses` Ingresses took effect.
    pub fn reloaded(&self, ingresses: usize) {
        self.reloads.fetch_add(1, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        self.last_reload_unix.store(now, Ordering::Relaxed);
        self.ingresses.store(ingresses as u64, Ordering::Relaxed);
        self.ready.store(true, Ordering::Release);
    }

    /// How many configurations took effect.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// Whether the first configuration (after the caches synced) took effect: `/healthz`.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The Prometheus text exposition of everything.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let routes: Vec<Arc<RouteStats>> = {
            let map = self.routes.lock();
            std::iter::once(self.unmatched.clone())
                .chain(map.values().cloned())
                .collect()
        };
        out.push_str(
            "# HELP capstan_ingress_requests_total Requests served, by ingress, service and status code.\n\
             # TYPE capstan_ingress_requests_total counter\n",
        );
        for r in &routes {
            let labels = r.labels();
            for (i, c) in r.status.iter().enumerate() {
                let n = c.load(Ordering::Relaxed);
                if n > 0 {
                    let code = FIRST_STATUS as usize + i;
                    let _ = writeln!(
                        out,
                        "capstan_ingress_requests_total{{{labels},status=\"{code}\"}} {n}"
                    );
                }
            }
        }
        out.push_str(
            "# HELP capstan_ingress_request_duration_seconds Time from a request's arrival to its response head, by ingress and service.\n\
             # TYPE capstan_ingress_request_duration_seconds histogram\n",
        );
        for r in &routes {
            let count = r.count.load(Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            let labels = r.labels();
            let mut cumulative = 0;
            for (b, le) in BUCKETS.iter().enumerate() {
                cumulative += r.buckets[b].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "capstan_ingress_request_duration_seconds_bucket{{{labels},le=\"{le}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "capstan_ingress_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {count}"
            );
            let sum = r.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(
                out,
                "capstan_ingress_request_duration_seconds_sum{{{labels}}} {sum}"
            );
            let _ = writeln!(
                out,
                "capstan_ingress_request_duration_seconds_count{{{labels}}} {count}"
            );
        }
        let _ = write!(
            out,
            "# HELP capstan_ingress_config_reloads_total Configurations (routing table and certificates) that took effect.\n\
             # TYPE capstan_ingress_config_reloads_total counter\n\
             capstan_ingress_config_reloads_total {}\n\
             # HELP capstan_ingress_config_last_reload_timestamp_seconds When the last configuration took effect.\n\
             # TYPE capstan_ingress_config_last_reload_timestamp_seconds gauge\n\
             capstan_ingress_config_last_reload_timestamp_seconds {}\n\
             # HELP capstan_ingress_ingresses Ingresses in the configuration.\n\
             # TYPE capstan_ingress_ingresses gauge\n\
             capstan_ingress_ingresses {}\n",
            self.reloads.load(Ordering::Relaxed),
            self.last_reload_unix.load(Ordering::Relaxed),
            self.ingresses.load(Ordering::Relaxed),
        );
        process_metrics(&mut out);
        out
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// process_resident_memory_bytes and process_cpu_seconds_total, as Go's process collector.
fn process_metrics(out: &mut String) {
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * 4096);
    if let Some(rss) = rss {
        let _ = write!(
            out,
            "# HELP process_resident_memory_bytes Resident memory size in bytes.\n\
             # TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {rss}\n"
        );
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
        let _ = write!(
            out,
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n\
             # TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {cpu}\n"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_render_by_ingress_service_and_status() {
        let m = Metrics::new();
        let r = m.route("default", "web", "alpha");
        r.observe(200, Duration::from_millis(3));
        r.observe(200, Duration::from_millis(30));
        r.observe(503, Duration::from_secs(20));
        m.unmatched().observe(404, Duration::from_micros(10));
        // The same labels give the same counters.
        m.route("default", "web", "alpha")
            .observe(200, Duration::ZERO);
        m.reloaded(2);
        let text = m.render();
        assert!(text.contains(
            "capstan_ingress_requests_total{namespace=\"default\",ingress=\"web\",service=\"alpha\",status=\"200\"} 3"
        ), "{text}");
        assert!(text.contains("service=\"alpha\",status=\"503\"} 1"));
        assert!(text.contains(
            "capstan_ingress_requests_total{namespace=\"\",ingress=\"\",service=\"\",status=\"404\"} 1"
        ));
        // Cumulative buckets: 2 at or under 5 ms, 3 under 50 ms, the 20 s one only in +Inf.
        assert!(text.contains("service=\"alpha\",le=\"0.005\"} 2"), "{text}");
        assert!(text.contains("service=\"alpha\",le=\"0.05\"} 3"));
        assert!(text.contains("service=\"alpha\",le=\"10\"} 3"));
        assert!(text.contains("service=\"alpha\",le=\"+Inf\"} 4"));
        assert!(text.contains("capstan_ingress_config_reloads_total 1"));
        assert!(text.contains("capstan_ingress_ingresses 2"));
        assert!(m.is_ready());
    }

    #[test]
    fn odd_status_codes_do_not_panic() {
        let m = Metrics::new();
        m.unmatched().observe(0, Duration::ZERO);
        m.unmatched().observe(999, Duration::ZERO);
        let text = m.render();
        assert!(text.contains("status=\"100\"} 1"));
        assert!(text.contains("status=\"599\"} 1"));
    }
}
