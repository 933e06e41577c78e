//! Crash test of the embedded store: a child process writes as fast as it can and prints each
//! acknowledged write; it is killed with SIGKILL at random moments, 50 times. After every kill
//! the store reopens, every acknowledged write is there, and the revision never goes back.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use capstan_store::embedded::EmbeddedStore;
use capstan_store::Store;
use rand::Rng;

const KILLS: usize = 50;

/// Run the writer until killed after `delay`; return the acknowledged (key, revision) lines.
fn write_until_killed(dir: &std::path::Path, delay: Duration) -> Vec<(String, i64)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["debug", "store-writer", "--writers", "16"])
        .args(["--segment-bytes", "65536", "--store-dir"])
        .arg(dir)
        .env("CAPSTAN_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("capstan starts");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            assert!(!line.starts_with("error"), "the writer failed: {line}");
            let (key, rev) = line.rsplit_once(' ').expect("`key revision`");
            acked.push((key.to_string(), rev.parse().expect("a revision")));
        }
        acked
    });
    std::thread::sleep(delay);
    child.kill().expect("SIGKILL"); // std's kill sends SIGKILL on Unix
    child.wait().unwrap();
    reader.join().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rng();
    // The newest acknowledged revision of every key, over all runs.
    let mut acked: HashMap<String, i64> = HashMap::new();
    let mut last_revision = 0;
    let mut total = 0;
    for round in 0..KILLS {
        let delay = Duration::from_millis(rng.random_range(5..250));
        let lines = write_until_killed(dir.path(), delay);
        total += lines.len();
        for (key, rev) in lines {
            let newest = acked.entry(key).or_insert(rev);
            *newest = (*newest).max(rev);
        }

        let store = EmbeddedStore::open(dir.path())
            .unwrap_or_else(|e| panic!("round {round}: the store does not reopen: {e}"));
        let revision = store.current_revision().await.unwrap();
        assert!(
            revision >= last_revision,
            "round {round}: revision went back from {last_revision} to {revision}"
        );
        last_revision = revision;
        for (key, &rev) in &acked {
            let kv = store.get(key.as_bytes(), 0).await.unwrap().0;
            let kv = kv.unwrap_or_else(|| panic!("round {round}: acknowledged {key} is lost"));
            assert!(
                kv.mod_revision >= rev,
                "round {round}: {key} is at revision {} but {rev} was acknowledged",
                kv.mod_revision
            );
            assert!(revision >= rev);
        }
    }
    assert!(total > 1000, "the writers acknowledged only {total} writes");
}
