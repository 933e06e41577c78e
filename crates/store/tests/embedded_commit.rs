//! The embedded backend's group commit: concurrent writers share fsyncs, a lone writer's
//! writes are committed one by one.

use std::sync::Arc;

use bytes::Bytes;
use capstan_store::embedded::EmbeddedStore;
use capstan_store::{RangeRequest, Store};

/// `writes` creates, each after `work` rounds of hashing (what a server does between them).
async fn write_from(store: Arc<EmbeddedStore>, writer: usize, writes: usize, work: u64) {
    for i in 0..writes {
        let mut h = i as u64;
        for r in 0..work {
            h = std::hint::black_box(h.rotate_left(5) ^ r).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        let key = format!("/registry/configmaps/ns/w{writer}-{i}-{}", h % 10);
        store
            .create(key.as_bytes(), Bytes::from_static(b"{}"), 0)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_share_their_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let (writers, each) = (16, 40);
    let tasks: Vec<_> = (0..writers)
        .map(|w| tokio::spawn(write_from(store.clone(), w, each, 2_000)))
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let writes = (writers * each) as u64;
    let commits = store.commits();
    // Acknowledged together, the writers come back together and a batch waits for eight of
    // them, and takes those that came meanwhile (50 to 56 fsyncs here). Without that, a batch
    // holds the writes that arrived during the previous fsync, four or five (110 to 160).
    assert!(
        commits * 8 <= writes,
        "{writes} writes from {writers} writers took {commits} fsyncs"
    );
    let all = store
        .range(RangeRequest::prefix("/registry/configmaps/"))
        .await
        .unwrap();
    assert_eq!(all.kvs.len() as u64, writes, "every write is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_writer_is_committed_write_by_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    write_from(store.clone(), 0, 200, 20_000).await;
    assert_eq!(store.commits(), 200);
}
