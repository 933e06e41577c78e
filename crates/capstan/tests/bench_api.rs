//! `capstan bench api` end to end against a real `capstan server`, with tiny sizes: every
//! expected measurement is there and sane, the namespaces are gone afterwards, and the
//! command's failures are one clear line.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use capstan_bench::api::{run_api_bench, ApiMeasurement, ApiOptions};
use serde_json::Value;
use support::Server;

/// Options small enough for a test.
fn tiny(kubeconfig: &Path) -> ApiOptions {
    ApiOptions {
        kubeconfig: Some(kubeconfig.to_path_buf()),
        clients: 2,
        duration: Duration::from_millis(300),
        verb_clients: 2,
        verb_objects: 4,
        list_pods: 50,
        list_repeats: 3,
        load_clients: 8,
        watchers: 5,
        watch_rate: 50.0,
        watch_duration: Duration::from_millis(400),
        watch_grace: Duration::from_secs(10),
        client_pool: 2,
        ..Default::default()
    }
}

/// Check one JSON line's numbers; returns its (workload, resourceVersion) key.
fn check_line(line: &str) -> (String, String) {
    let v: Value = serde_json::from_str(line).expect("valid JSON");
    let workload = v["workload"].as_str().expect("workload").to_owned();
    assert_eq!(v["backend"], "v1.32.0", "{line}");
    assert!(v["http"] == "http/1.1" || v["http"] == "h2", "{line}");
    assert!(v["clients"].as_u64().unwrap() > 0, "{line}");
    assert!(
        v["ops_per_s"].as_f64().unwrap() > 0.0,
        "positive rate: {line}"
    );
    let (p50, p99, max) = (
        v["p50_ms"].as_f64().unwrap(),
        v["p99_ms"].as_f64().unwrap(),
        v["max_ms"].as_f64().unwrap(),
    );
    assert!(
        0.0 < p50 && p50 <= p99 && p99 <= max,
        "p50 <= p99 <= max: {line}"
    );
    assert!(v["count"].as_u64().unwrap() > 0, "count: {line}");
    assert!(v["seconds"].as_f64().unwrap() > 0.0, "{line}");
    match workload.as_str() {
        "watch" => {
            assert_eq!(v["missed"], 0, "every event delivered: {line}");
            assert_eq!(v["count"], 5 * 20, "5 watchers x 20 writes: {line}");
            assert!(v["write_rate"].as_f64().unwrap() > 0.0, "{line}");
        }
        "memory" => {
            assert!(v["rss_bytes"].as_u64().unwrap() > 0, "{line}");
            assert_eq!(v["pods"], 50, "{line}");
        }
        "list-pods" => {
            assert_eq!(v["items"], 50, "{line}");
            assert!(v["response_bytes"].as_u64().unwrap() > 50 * 2000, "{line}");
        }
        // The bench's four ConfigMaps and the namespace's kube-root-ca.crt.
        "list" => assert_eq!(v["items"], 5, "{line}"),
        "create-pods" => {
            assert!(v["object_bytes"].as_u64().unwrap() > 1500, "{line}")
        }
        _ => {}
    }
    let rv = v["resource_version"].as_str().unwrap_or("-").to_owned();
    (workload, rv)
}

fn rows(results: &[ApiMeasurement]) -> BTreeSet<(String, String)> {
    let mut rows = BTreeSet::new();
    for m in results {
        let line = m.to_json_line().unwrap();
        assert!(!line.contains('\n'));
        assert!(rows.insert(check_line(&line)), "duplicate row: {line}");
    }
    rows
}

/// The benchmark's namespaces that are not being deleted.
fn bench_namespaces(s: &Server) -> Vec<String> {
    let template = r#"{range .items[*]}{.metadata.name} {.status.phase}{"\n"}{end}"#;
    s.ok(&["get", "namespaces", "-o", &format!("jsonpath={template}")])
        .lines()
        .filter(|l| l.starts_with("bench-") && !l.ends_with(" Terminating"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_bench_against_capstan() {
    let s = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let results = run_api_bench(&tiny(&s.kubeconfig()))
        .await
        .unwrap_or_else(|e| panic!("bench failed: {e:#}\n{}", s.log()));
    let expected: BTreeSet<(String, String)> = [
        ("memory", "-"),
        ("list-pods", "0"),
        ("list-pods", ""),
        ("create-configmaps", "-"),
        ("create-pods", "-"),
        ("get", "-"),
        ("update", "-"),
        ("patch", "-"),
        ("list", "-"),
        ("create", "-"),
        ("delete", "-"),
        ("watch", "-"),
    ]
    .into_iter()
    .map(|(w, rv)| (w.to_owned(), rv.to_owned()))
    .collect();
    assert_eq!(rows(&results), expected);
    assert!(results.iter().all(|m| m.http == "http/1.1"));
    let s = tokio::task::spawn_blocking(move || {
        assert_eq!(bench_namespaces(&s), Vec::<String>::new());
        s
    })
    .await
    .unwrap();

    // The command line: --json prints one checked line per measurement; --http2 negotiates
    // HTTP/2.
    let out = tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["bench", "api", "--json", "--kubeconfig"])
            .arg(s.kubeconfig())
            .args([
                "--workloads",
                "create-configmaps,watch",
                "--label",
                "v1.32.0",
            ])
            .args([
                "--clients",
                "2",
                "--duration",
                "200ms",
                "--client-pool",
                "1",
                "--http2",
            ])
            .args([
                "--watchers",
                "5",
                "--watch-rate",
                "50",
                "--watch-duration",
                "400ms",
            ])
            .output()
            .unwrap();
        drop(s);
        out
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let workloads: Vec<String> = stdout.lines().map(|l| check_line(l).0).collect();
    assert_eq!(workloads, ["create-configmaps", "watch"]);
    assert!(
        stdout.lines().all(|l| l.contains(r#""http":"h2""#)),
        "{stdout}"
    );
}

/// Run `capstan bench api ARGS`, expecting a one-line failure; returns that line.
fn fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["bench", "api"])
        .args(args)
        .env_remove("KUBECONFIG")
        .env("CAPSTAN_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// A kubeconfig for `server` with `s`'s CA and a token `s` does not know.
fn token_kubeconfig(dir: &Path, s: &Server, server: &str) -> std::path::PathBuf {
    let admin = std::fs::read_to_string(s.kubeconfig()).unwrap();
    let ca = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data:"))
        .expect("the admin kubeconfig has the CA")
        .trim();
    let path = dir.join(format!("kubeconfig-{}", server.len()));
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         users:\n- name: u\n  user:\n    token: not-a-valid-token\n\
         contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn api_bench_failures_are_one_line() {
    let err = fails(&[]);
    assert!(err.contains("--kubeconfig"), "{err}");

    let err = fails(&["--kubeconfig", "/nonexistent/kubeconfig"]);
    assert!(err.contains("cannot read the kubeconfig"), "{err}");

    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let unreachable = token_kubeconfig(dir.path(), &s, &format!("https://127.0.0.1:{closed}"));
    let err = fails(&["--kubeconfig", unreachable.to_str().unwrap()]);
    assert!(err.contains("cannot reach the API server"), "{err}");

    let err = fails(&[
        "--kubeconfig",
        unreachable.to_str().unwrap(),
        "--context",
        "nope",
    ]);
    assert!(err.contains("nope"), "{err}");

    let bad_token = token_kubeconfig(dir.path(), &s, &format!("https://127.0.0.1:{}", s.port));
    let err = fails(&["--kubeconfig", bad_token.to_str().unwrap()]);
    assert!(
        err.contains("rejected the kubeconfig's credentials: 401"),
        "{err}"
    );
}
