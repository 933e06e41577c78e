//! `capstan bench store` end to end, with tiny sizes: against the embedded store and against a
//! real single-member etcd, checking that every expected measurement is there and sane.

use std::collections::BTreeSet;
use std::time::Duration;

use capstan_bench::store::{run_store_bench, Backend, StoreOptions};
use capstan_bench::Measurement;
use serde_json::Value;

/// Options small enough for a test, writing under `dir`.
fn tiny(dir: &std::path::Path) -> StoreOptions {
    StoreOptions {
        data_dir: Some(dir.to_path_buf()),
        duration: Duration::from_millis(300),
        writers: vec![1, 4],
        readers: 4,
        range_keys: 200,
        watchers: 5,
        watch_rate: 200.0,
        watch_duration: Duration::from_millis(300),
        memory_keys: 2_000,
        ..Default::default()
    }
}

/// Serialize as `--json` prints, parse back, and check every row's shape and numbers.
fn check_json_lines(results: &[Measurement]) -> BTreeSet<(String, String, u64)> {
    let mut rows = BTreeSet::new();
    for m in results {
        let line = m.to_json_line().expect("serializes");
        assert!(!line.contains('\n'), "one line per measurement: {line}");
        let v: Value = serde_json::from_str(&line).expect("valid JSON");
        let backend = v["backend"].as_str().expect("backend").to_owned();
        let workload = v["workload"].as_str().expect("workload").to_owned();
        let writers = v["writers"].as_u64().expect("writers");
        let rate_field = if workload == "write" || workload == "memory" {
            "writes_per_s"
        } else {
            "ops_per_s"
        };
        let rate = v[rate_field].as_f64().unwrap_or(0.0);
        assert!(rate > 0.0, "{rate_field} must be positive: {line}");
        let (p50, p99) = (v["p50_ms"].as_f64().unwrap(), v["p99_ms"].as_f64().unwrap());
        assert!(0.0 <= p50 && p50 <= p99, "p50 <= p99: {line}");
        assert!(v["count"].as_u64().unwrap() > 0, "count: {line}");
        if workload == "watch" {
            assert_eq!(
                v["missed"].as_u64(),
                Some(0),
                "every event delivered: {line}"
            );
        }
        if workload == "memory" {
            assert!(v["live_bytes"].as_u64().unwrap() >= 2_000 * 1024, "{line}");
            assert!(v["rss_bytes"].as_u64().is_some(), "{line}");
            assert!(v["ratio"].as_f64().is_some(), "{line}");
        }
        assert!(
            rows.insert((backend, workload, writers)),
            "duplicate row: {line}"
        );
    }
    rows
}

/// The rows a run with [`tiny`] options must produce for `backend`.
fn expected_rows(backend: &str, with_memory: bool) -> Vec<(String, String, u64)> {
    let mut rows = vec![
        ("write", 1),
        ("write", 4),
        ("get", 4),
        ("range", 1),
        ("watch", 5),
    ];
    if with_memory {
        rows.push(("memory", 64));
    }
    rows.into_iter()
        .map(|(w, n)| (backend.to_owned(), w.to_owned(), n))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_bench_against_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        backends: vec![Backend::Embedded],
        ..tiny(dir.path())
    };
    let results = run_store_bench(&options).await.expect("bench runs");
    let rows = check_json_lines(&results);
    for row in expected_rows("embedded", true) {
        assert!(rows.contains(&row), "missing {row:?} in {rows:?}");
    }
    assert_eq!(rows.len(), 6, "{rows:?}");
    // The bench removes its temporary store.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_bench_against_etcd() {
    let cluster = capstan_testkit::EtcdCluster::start(1).expect("etcd starts");
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        backends: vec![Backend::Etcd],
        etcd_endpoints: cluster.client_endpoints(),
        ..tiny(dir.path())
    };
    let results = run_store_bench(&options).await.expect("bench runs");
    let rows = check_json_lines(&results);
    for row in expected_rows("etcd", false) {
        assert!(rows.contains(&row), "missing {row:?} in {rows:?}");
    }
    assert_eq!(rows.len(), 5, "memory is embedded only: {rows:?}");
    // Every key the bench wrote was deleted.
    let store = capstan_store::etcd::EtcdStore::connect(capstan_store::etcd::EtcdConfig::new(
        cluster.client_endpoints(),
    ))
    .await
    .unwrap();
    let left = capstan_store::Store::range(
        &store,
        capstan_store::RangeRequest::prefix("/bench/").count_only(),
    )
    .await
    .unwrap();
    assert_eq!(left.count, 0, "keys left under /bench/");
}

#[tokio::test]
async fn etcd_without_endpoints_is_a_clear_error() {
    let options = StoreOptions {
        backends: vec![Backend::Etcd],
        ..Default::default()
    };
    let err = run_store_bench(&options).await.unwrap_err();
    assert!(format!("{err:#}").contains("--etcd-endpoints"), "{err:#}");
}
