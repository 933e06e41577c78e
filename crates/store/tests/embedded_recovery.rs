//! The embedded backend's files: restart, snapshots, torn writes, corruption, disk bounds.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use capstan_store::embedded::{EmbeddedStore, Options};
use capstan_store::{KeyValue, RangeRequest, Store, StoreError, WatchRequest};

fn small(dir: &Path, segment_bytes: u64) -> EmbeddedStore {
    let mut opts = Options::new(dir);
    opts.segment_bytes = segment_bytes;
    EmbeddedStore::open_with(opts).unwrap()
}

async fn everything(s: &EmbeddedStore) -> (Vec<KeyValue>, i64) {
    let r = s.range(RangeRequest::prefix("")).await.unwrap();
    (r.kvs, r.revision)
}

fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .collect();
    out.sort();
    out
}

/// Writes creates, overwrites, deletes and leased keys; returns the last revision.
async fn churn(s: &EmbeddedStore, rounds: usize) -> i64 {
    let lease = s.grant_lease(Duration::from_secs(3600)).await.unwrap();
    let mut last = 0;
    for i in 0..rounds {
        let key = format!("/registry/pods/ns/p{}", i % 50);
        let value = Bytes::from(format!("{{\"i\":{i},\"pad\":\"{}\"}}", "x".repeat(100)));
        last = match s.get(key.as_bytes(), 0).await.unwrap().0 {
            Some(_) if i % 7 == 0 => s.delete(key.as_bytes(), None).await.unwrap().revision,
            Some(kv) => s
                .update(key.as_bytes(), value, kv.mod_revision, 0)
                .await
                .unwrap(),
            None => {
                let l = if i % 3 == 0 { lease } else { 0 };
                s.create(key.as_bytes(), value, l).await.unwrap()
            }
        };
    }
    last
}

#[tokio::test]
async fn reopen_keeps_every_write_across_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let s = small(dir.path(), 8 << 10);
        let last = churn(&s, 2000).await;
        let state = everything(&s).await;
        assert_eq!(state.1, last);
        state
    };
    assert!(
        !files(dir.path(), "snap-").is_empty(),
        "small segments produce snapshots"
    );
    let s = small(dir.path(), 8 << 10);
    assert_eq!(everything(&s).await, before);
    // The store keeps working where it left off, and history after reopening is watchable.
    let rev = s.create(b"/after", Bytes::from("x"), 0).await.unwrap();
    assert_eq!(rev, before.1 + 1);
    let mut w = s
        .watch(WatchRequest::prefix("/after").from_revision(rev))
        .await
        .unwrap();
    let resp = w.next().await.unwrap().unwrap();
    assert_eq!(resp.events[0].kv.mod_revision, rev);
}

#[tokio::test]
async fn leases_survive_a_restart_and_still_expire() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = small(dir.path(), 64 << 20);
        let lease = s.grant_lease(Duration::from_secs(1)).await.unwrap();
        s.create(b"/ev", Bytes::from("e"), lease).await.unwrap();
    }
    let s = small(dir.path(), 64 << 20);
    assert!(s.get(b"/ev", 0).await.unwrap().0.is_some());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.get(b"/ev", 0).await.unwrap().0.is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_torn_final_record_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let s = small(dir.path(), 64 << 20);
        churn(&s, 100).await;
        everything(&s).await
    };
    let wal = files(dir.path(), "wal-").pop().unwrap();
    let len = fs::metadata(&wal).unwrap().len();
    // A record header announcing 500 bytes, followed by only a few of them.
    let mut f = OpenOptions::new().append(true).open(&wal).unwrap();
    f.write_all(&500u32.to_le_bytes()).unwrap();
    f.write_all(&[1, 2, 3, 4, 5, 6, 7]).unwrap();
    drop(f);

    let s = small(dir.path(), 64 << 20);
    assert_eq!(everything(&s).await, before);
    assert_eq!(
        fs::metadata(&wal).unwrap().len(),
        len,
        "the torn bytes are gone"
    );
    let rev = s.create(b"/next", Bytes::from("n"), 0).await.unwrap();
    drop(s);
    let s = small(dir.path(), 64 << 20);
    assert_eq!(
        s.get(b"/next", 0).await.unwrap().0.unwrap().mod_revision,
        rev
    );
}

/// The segment being written is kept ahead of its data with zeros; a clean close cuts them off,
/// and a crash that leaves them (or a write cut short over them) loses nothing acknowledged.
#[tokio::test]
async fn zeros_ahead_of_the_log_are_read_as_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let s = small(dir.path(), 64 << 20);
        churn(&s, 100).await;
        let wal = files(dir.path(), "wal-").pop().unwrap();
        let open = fs::read(&wal).unwrap();
        let state = everything(&s).await;
        drop(s);
        let closed = fs::read(&wal).unwrap();
        assert!(
            open.len() >= 4 << 20,
            "while open the segment holds {} bytes for {} of data",
            open.len(),
            closed.len()
        );
        assert_eq!(&open[..closed.len()], &closed[..]);
        assert!(open[closed.len()..].iter().all(|&b| b == 0));
        state
    };
    let wal = files(dir.path(), "wal-").pop().unwrap();
    let data_len = fs::metadata(&wal).unwrap().len();
    let crash = |tail: &[u8]| {
        let mut f = OpenOptions::new().append(true).open(&wal).unwrap();
        f.write_all(tail).unwrap();
        f.write_all(&vec![0u8; 64 << 10]).unwrap();
    };

    // A crash with the zeros still there.
    crash(&[]);
    let s = small(dir.path(), 64 << 20);
    assert_eq!(everything(&s).await, before);
    drop(s);
    assert_eq!(fs::metadata(&wal).unwrap().len(), data_len);

    // A write cut short over the zeros: a record announcing 2,000 bytes that has only 600,
    // with a checksum that cannot match.
    let mut torn = 2000u32.to_le_bytes().to_vec();
    torn.extend_from_slice(&[0xab; 4]);
    torn.extend(std::iter::repeat_n(7u8, 600));
    crash(&torn);
    let s = small(dir.path(), 64 << 20);
    assert_eq!(everything(&s).await, before);
    drop(s);
    assert_eq!(
        fs::metadata(&wal).unwrap().len(),
        data_len,
        "the torn write is gone"
    );

    // A write whose first sectors never reached the disk: zeros, then the rest of it.
    let mut late = vec![0u8; 1024];
    late.extend(std::iter::repeat_n(9u8, 700));
    crash(&late);
    let s = small(dir.path(), 64 << 20);
    assert_eq!(everything(&s).await, before);
    // Writing goes on where the data ended, and survives a reopen.
    let rev = s
        .create(b"/after-crash", Bytes::from("a"), 0)
        .await
        .unwrap();
    assert_eq!(rev, before.1 + 1);
    drop(s);
    let s = small(dir.path(), 64 << 20);
    let (kvs, last) = everything(&s).await;
    assert_eq!(last, rev);
    assert_eq!(kvs.len(), before.0.len() + 1);
}

/// A record that fails its checksum with whole records after it is damage, not a torn write,
/// even in the last segment: the open fails and nothing is cut off.
#[tokio::test]
async fn a_bad_record_before_others_is_not_taken_for_a_torn_write() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = small(dir.path(), 64 << 20);
        churn(&s, 100).await;
    }
    let wal = files(dir.path(), "wal-").pop().unwrap();
    let mut data = fs::read(&wal).unwrap();
    // The first record's payload (after the 8-byte magic and its 8-byte header).
    data[20] ^= 0x01;
    let mut f = OpenOptions::new().write(true).open(&wal).unwrap();
    f.write_all(&data).unwrap();
    f.write_all(&vec![0u8; 8192]).unwrap();
    drop(f);
    match EmbeddedStore::open(dir.path()) {
        Err(StoreError::Corrupt(msg)) => assert!(msg.contains("at byte 8"), "{msg}"),
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("a corrupt log opened silently"),
    }
    assert_eq!(fs::metadata(&wal).unwrap().len(), data.len() as u64 + 8192);
}

#[tokio::test]
async fn a_corrupt_record_fails_the_open_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = small(dir.path(), 64 << 20);
        churn(&s, 100).await;
    }
    let wal = files(dir.path(), "wal-").pop().unwrap();
    let mut data = fs::read(&wal).unwrap();
    let middle = data.len() / 2;
    data[middle] ^= 0x40;
    fs::write(&wal, &data).unwrap();

    match EmbeddedStore::open(dir.path()) {
        Err(StoreError::Corrupt(msg)) => {
            assert!(
                msg.contains(wal.to_str().unwrap()),
                "message names the file: {msg}"
            );
        }
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("a corrupt log opened silently"),
    }
    // Nothing was truncated or rewritten: the damage is left for a person to inspect.
    assert_eq!(fs::read(&wal).unwrap(), data);
}

#[tokio::test]
async fn a_truncated_snapshot_fails_the_open_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = small(dir.path(), 4 << 10);
        churn(&s, 500).await;
    }
    let snap = files(dir.path(), "snap-")
        .pop()
        .expect("a snapshot was written");
    let len = fs::metadata(&snap).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&snap)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    match EmbeddedStore::open(dir.path()) {
        Err(StoreError::Corrupt(msg)) => assert!(msg.contains(snap.to_str().unwrap()), "{msg}"),
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("a truncated snapshot opened silently"),
    }
}

#[tokio::test]
async fn a_second_process_cannot_open_the_same_directory() {
    let dir = tempfile::tempdir().unwrap();
    let _first = EmbeddedStore::open(dir.path()).unwrap();
    match EmbeddedStore::open(dir.path()) {
        Err(StoreError::Unavailable(msg)) => assert!(msg.contains("in use"), "{msg}"),
        other => panic!("expected Unavailable, got {:?}", other.err()),
    }
}

#[tokio::test]
async fn disk_use_stays_bounded_under_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let s = small(dir.path(), 64 << 10);
    let value = Bytes::from(vec![b'v'; 1024]);
    let mut revs = [0i64; 10];
    for i in 0..5000 {
        let k = format!("/k{}", i % 10);
        let r = &mut revs[i % 10];
        *r = if *r == 0 {
            s.create(k.as_bytes(), value.clone(), 0).await.unwrap()
        } else {
            s.update(k.as_bytes(), value.clone(), *r, 0).await.unwrap()
        };
    }
    // 5 MB were written; the live data is 10 KiB. Let the last snapshot finish.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let total: u64 = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(total < 400 << 10, "data directory holds {total} bytes");
    let (live, history) = s.data_bytes();
    assert!(
        history <= live.max(4 << 20),
        "history {history} live {live}"
    );
}

/// A snapshot rewrites all the live data, so one is taken only once the log has grown as large
/// as that: overwriting 100 KiB of live data ten times over starts a few dozen segments, not
/// one per `segment_bytes` (4 KiB here, which would be 250), and every write survives a reopen.
#[tokio::test]
async fn snapshots_wait_for_the_log_to_reach_the_live_size() {
    let dir = tempfile::tempdir().unwrap();
    let value = Bytes::from(vec![b'v'; 1024]);
    {
        let s = small(dir.path(), 4 << 10);
        let mut revs = vec![0i64; 100];
        for i in 0..1000 {
            let k = format!("/k{:03}", i % 100);
            let r = &mut revs[i % 100];
            *r = if *r == 0 {
                s.create(k.as_bytes(), value.clone(), 0).await.unwrap()
            } else {
                s.update(k.as_bytes(), value.clone(), *r, 0).await.unwrap()
            };
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let newest = files(dir.path(), "wal-")
        .last()
        .and_then(|p| {
            p.file_stem()?
                .to_str()?
                .strip_prefix("wal-")?
                .parse::<u64>()
                .ok()
        })
        .unwrap();
    assert!(
        (5..40).contains(&newest),
        "{newest} segments for 1 MiB of log over 100 KiB of live data"
    );
    let s = small(dir.path(), 4 << 10);
    let (kvs, rev) = everything(&s).await;
    assert_eq!(kvs.len(), 100);
    assert_eq!(rev, 1000);
    assert!(kvs.iter().all(|kv| kv.version == 10 && kv.value == value));
}
