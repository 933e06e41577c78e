//! The etcd backend against real etcd members: failover when a member dies under load,
//! watches that survive it, and the etcd-specific mappings (errors, compaction, leases).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use capstan_store::etcd::{EtcdConfig, EtcdStore};
use capstan_store::{
    EventKind, RangeRequest, Revision, Store, StoreError, WatchRequest, WatchResponse, Watcher,
    MAX_VALUE_BYTES,
};
use capstan_testkit::EtcdCluster;
use tokio::time::{sleep, timeout, Instant};

/// Start a cluster without blocking the test's runtime while etcd boots.
async fn cluster(members: usize) -> EtcdCluster {
    tokio::task::spawn_blocking(move || EtcdCluster::start(members))
        .await
        .unwrap()
        .expect("etcd starts")
}

fn config(cluster: &EtcdCluster) -> EtcdConfig {
    EtcdConfig {
        compaction_interval: None,
        ..EtcdConfig::new(cluster.client_endpoints())
    }
}

/// A client of a 3-member cluster that starts on the leader, so that killing the member in use
/// makes the client fail over while the cluster elects a new leader (the worst case).
async fn on_the_leader() -> (EtcdCluster, Arc<EtcdStore>, usize) {
    let cluster = cluster(3).await;
    let leader = cluster.wait_for_leader().unwrap();
    let mut config = config(&cluster);
    config.endpoints.rotate_left(leader);
    let store = EtcdStore::connect(config).await.unwrap();
    assert_eq!(store.current_endpoint(), cluster.client_endpoint(leader));
    (cluster, Arc::new(store), leader)
}

async fn single() -> (EtcdCluster, EtcdStore) {
    let cluster = cluster(1).await;
    let store = EtcdStore::connect(config(&cluster)).await.unwrap();
    (cluster, store)
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The next watch response, failing the test after 10 s.
async fn next(w: &mut Watcher) -> capstan_store::Result<WatchResponse> {
    timeout(Duration::from_secs(10), w.next())
        .await
        .expect("a watch response within 10 s")
        .expect("the watch is still open")
}

/// Every key under `prefix`, read in pages as a client would.
async fn all_keys(store: &EtcdStore, prefix: &str) -> BTreeMap<Bytes, capstan_store::KeyValue> {
    let mut keys = BTreeMap::new();
    let mut req = RangeRequest::prefix(b(prefix)).limit(500);
    loop {
        let page = store.range(req.clone()).await.unwrap();
        let last = page.kvs.last().map(|kv| kv.key.clone());
        for kv in page.kvs {
            keys.insert(kv.key.clone(), kv);
        }
        match last {
            Some(last) if page.more => req = req.at(page.revision).after(&last),
            _ => return keys,
        }
    }
}

/// How soon after the member in use dies writes must succeed again: an election (1-2 s with
/// etcd's default timings) and the client's failover, with room for a busy machine.
const RECOVERY: Duration = Duration::from_secs(5);

/// One writer's acknowledged creates: (key, value, revision, when).
type Acks = Vec<(Bytes, Bytes, Revision, Instant)>;

/// Create distinct keys under `prefix` until `stop`, recording every acknowledged write.
async fn write_until(store: Arc<EtcdStore>, prefix: String, stop: Arc<AtomicBool>) -> Acks {
    let mut acks: Acks = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let (key, value) = (b(&format!("{prefix}{n:06}")), b(&format!("v{n}")));
        n += 1;
        // Errors are allowed (a retried create may report AlreadyExists, the cluster may be
        // electing): only acknowledged writes carry promises.
        if let Ok(rev) = store.create(&key, value.clone(), 0).await {
            if let Some(&(_, _, previous, _)) = acks.last() {
                assert!(
                    rev > previous,
                    "revision went backwards: {previous} then {rev}"
                );
            }
            acks.push((key, value, rev, Instant::now()));
        }
    }
    acks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_killing_the_member_in_use() {
    let (cluster, store, leader) = on_the_leader().await;

    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let prefix = format!("/registry/failover/w{w}/");
            tokio::spawn(write_until(store.clone(), prefix, stop.clone()))
        })
        .collect();
    // Linearizable reads on any member must never see the revision go backwards.
    let monitor = {
        let (store, stop) = (store.clone(), stop.clone());
        tokio::spawn(async move {
            let mut highest = 0;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(rev) = store.current_revision().await {
                    assert!(
                        rev >= highest,
                        "current revision went from {highest} to {rev}"
                    );
                    highest = rev;
                }
                sleep(Duration::from_millis(20)).await;
            }
        })
    };

    sleep(Duration::from_millis(1500)).await;
    let killed_at = Instant::now();
    cluster.kill(leader);
    sleep(RECOVERY + Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    monitor.await.unwrap();

    let mut acks = Vec::new();
    for (w, writer) in writers.into_iter().enumerate() {
        let mine = writer.await.unwrap();
        let before = mine.iter().filter(|a| a.3 < killed_at).count();
        let first_after = mine
            .iter()
            .find(|a| a.3 > killed_at)
            .map(|a| a.3 - killed_at);
        assert!(before > 0, "writer {w} wrote nothing before the kill");
        let first_after = first_after.unwrap_or_else(|| panic!("writer {w} stalled"));
        assert!(first_after < RECOVERY, "writer {w} took {first_after:?}");
        acks.extend(mine);
    }
    assert_ne!(store.current_endpoint(), cluster.client_endpoint(leader));

    let stored = all_keys(&store, "/registry/failover/").await;
    let mut revisions: Vec<Revision> = acks.iter().map(|a| a.2).collect();
    for (key, value, rev, _) in &acks {
        let kv = stored
            .get(key)
            .unwrap_or_else(|| panic!("acknowledged {key:?} is lost"));
        assert_eq!((&kv.value, kv.mod_revision), (value, *rev), "{key:?}");
    }
    revisions.sort_unstable();
    revisions.dedup();
    assert_eq!(
        revisions.len(),
        acks.len(),
        "two writes acknowledged the same revision"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_survives_killing_the_member_it_streams_from() {
    let (cluster, store, leader) = on_the_leader().await;
    let from = store.current_revision().await.unwrap() + 1;
    let mut watcher = store
        .watch(WatchRequest::prefix("/registry/watched/").from_revision(from))
        .await
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let prefix = format!("/registry/watched/w{w}/");
            tokio::spawn(write_until(store.clone(), prefix, stop.clone()))
        })
        .collect();
    sleep(Duration::from_secs(1)).await;
    let killed_at = Instant::now();
    cluster.kill(leader);
    sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acks = Vec::new();
    for writer in writers {
        acks.extend(writer.await.unwrap());
    }
    assert!(
        acks.iter().any(|a| a.3 > killed_at),
        "no write after the kill"
    );

    // Every create that landed (acknowledged or not) must arrive exactly once, in order.
    let stored = all_keys(&store, "/registry/watched/").await;
    let mut expected: Vec<Revision> = stored.values().map(|kv| kv.create_revision).collect();
    expected.sort_unstable();
    let last = *expected.last().unwrap();
    let mut seen = Vec::new();
    while seen.last().is_none_or(|&r| r < last) {
        let resp = next(&mut watcher).await.expect("no watch error");
        for event in resp.events {
            assert_eq!(event.kind, EventKind::Put);
            assert_eq!(stored[&event.kv.key].create_revision, event.kv.mod_revision);
            seen.push(event.kv.mod_revision);
        }
    }
    assert_eq!(seen, expected, "the watch lost or repeated events");
}

#[tokio::test]
async fn writes_map_etcd_errors() {
    let (_cluster, store) = single().await;
    let r1 = store.create(b"/k/a", b("1"), 0).await.unwrap();
    assert!(matches!(
        store.create(b"/k/a", b("x"), 0).await,
        Err(StoreError::AlreadyExists { .. })
    ));
    let (kv, _) = store.get(b"/k/a", 0).await.unwrap();
    let kv = kv.unwrap();
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r1, r1, 1)
    );

    match store.update(b"/k/a", b("2"), r1 - 1, 0).await {
        Err(StoreError::Conflict {
            expected, current, ..
        }) => {
            assert_eq!(expected, r1 - 1);
            assert_eq!(current.unwrap().mod_revision, r1);
        }
        other => panic!("expected Conflict, got {other:?}"),
    }
    let r2 = store.update(b"/k/a", b("2"), r1, 0).await.unwrap();
    assert!(r2 > r1);
    for expected in [0, r2] {
        assert!(matches!(
            store.update(b"/k/missing", b("x"), expected, 0).await,
            Err(StoreError::NotFound { .. })
        ));
    }

    assert!(matches!(
        store.delete(b"/k/a", Some(r1)).await,
        Err(StoreError::Conflict { .. })
    ));
    let deleted = store.delete(b"/k/a", Some(r2)).await.unwrap();
    assert_eq!((deleted.prev.value, deleted.prev.version), (b("2"), 2));
    assert!(deleted.revision > r2);
    for expected in [None, Some(r2)] {
        assert!(matches!(
            store.delete(b"/k/a", expected).await,
            Err(StoreError::NotFound { .. })
        ));
    }
    store.create(b"/k/b", b("b"), 0).await.unwrap();
    assert_eq!(
        store.delete(b"/k/b", None).await.unwrap().prev.value,
        b("b")
    );

    // The limit is capstan's, not etcd's: a value just under it fits, one over is refused.
    let fits = Bytes::from(vec![7u8; MAX_VALUE_BYTES - 4]);
    store.create(b"/k/c", fits, 0).await.unwrap();
    let over = Bytes::from(vec![7u8; MAX_VALUE_BYTES]);
    assert!(matches!(
        store.create(b"/k/d", over, 0).await,
        Err(StoreError::TooLarge { .. })
    ));
    assert!(matches!(
        store.create(b"/k/e", b("x"), 12345).await,
        Err(StoreError::LeaseNotFound(12345))
    ));
}

#[tokio::test]
async fn reads_at_revisions_pages_and_counts() {
    let (_cluster, store) = single().await;
    let mut revs = Vec::new();
    for i in 0..5 {
        revs.push(
            store
                .create(format!("/p/{i}").as_bytes(), b("v"), 0)
                .await
                .unwrap(),
        );
    }
    store.create(b"/q/other", b("v"), 0).await.unwrap();
    let page = store
        .range(RangeRequest::prefix(b("/p/")).limit(2))
        .await
        .unwrap();
    assert_eq!((page.kvs.len(), page.count, page.more), (2, 5, true));
    let rest = store
        .range(
            RangeRequest::prefix(b("/p/"))
                .at(page.revision)
                .after(&page.kvs[1].key),
        )
        .await
        .unwrap();
    assert_eq!((rest.kvs.len(), rest.more), (3, false));
    let counted = store
        .range(RangeRequest::prefix(b("/p/")).count_only())
        .await
        .unwrap();
    assert_eq!((counted.count, counted.kvs.len()), (5, 0));
    let past = store
        .range(RangeRequest::prefix(b("/p/")).at(revs[1]))
        .await
        .unwrap();
    assert_eq!((past.kvs.len(), past.revision), (2, revs[1]));

    let current = store.current_revision().await.unwrap();
    assert_eq!(store.get(b"/p/0", 0).await.unwrap().1, current);
    assert_eq!(store.get(b"/p/4", revs[3]).await.unwrap().0, None);
    match store.get(b"/p/0", current + 100).await {
        Err(StoreError::FutureRevision {
            requested,
            current: c,
        }) => {
            assert_eq!((requested, c), (current + 100, current));
        }
        other => panic!("expected FutureRevision, got {other:?}"),
    }
}

#[tokio::test]
async fn compaction_is_reported_and_learned() {
    let (cluster, store) = single().await;
    assert_eq!(store.compacted_revision().await.unwrap(), 0);
    let mut revs = Vec::new();
    for i in 0..6 {
        revs.push(
            store
                .create(format!("/c/{i}").as_bytes(), b("v"), 0)
                .await
                .unwrap(),
        );
    }
    store.compact(revs[2]).await.unwrap();
    assert_eq!(store.compacted_revision().await.unwrap(), revs[2]);
    assert!(store.get(b"/c/0", revs[2]).await.is_ok());
    match store.get(b"/c/0", revs[1]).await {
        Err(StoreError::Compacted {
            requested,
            compacted,
        }) => assert_eq!((requested, compacted), (revs[1], revs[2])),
        other => panic!("expected Compacted, got {other:?}"),
    }
    assert!(matches!(
        store.compact(revs[2]).await,
        Err(StoreError::Compacted { compacted, .. }) if compacted == revs[2]
    ));
    assert!(matches!(
        store.compact(revs[5] + 100).await,
        Err(StoreError::FutureRevision { .. })
    ));

    // Another client compacts further: this one learns the exact revision from etcd.
    let other = EtcdStore::connect(config(&cluster)).await.unwrap();
    other.compact(revs[4]).await.unwrap();
    assert_eq!(store.compacted_revision().await.unwrap(), revs[4]);

    // A watch from below the compacted revision ends with Compacted.
    let mut watcher = store
        .watch(WatchRequest::prefix("/c/").from_revision(revs[3]))
        .await
        .unwrap();
    match next(&mut watcher).await {
        Err(StoreError::Compacted {
            requested,
            compacted,
        }) => assert_eq!((requested, compacted), (revs[3], revs[4])),
        other => panic!("expected Compacted, got {other:?}"),
    }
    assert!(timeout(Duration::from_secs(5), watcher.next())
        .await
        .unwrap()
        .is_none());
    // From the compacted revision itself, history is still there.
    let mut watcher = store
        .watch(WatchRequest::prefix("/c/").from_revision(revs[4]))
        .await
        .unwrap();
    let first = next(&mut watcher).await.unwrap();
    assert_eq!(first.events[0].kv.mod_revision, revs[4]);
}

#[tokio::test]
async fn background_compactor_follows_one_interval_behind() {
    let cluster = cluster(1).await;
    let config = EtcdConfig {
        compaction_interval: Some(Duration::from_millis(500)),
        ..EtcdConfig::new(cluster.client_endpoints())
    };
    let store = EtcdStore::connect(config).await.unwrap();
    assert!(store.compacts_periodically());
    let first = store.create(b"/bg/a", b("1"), 0).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.compacted_revision().await.unwrap() < first {
        assert!(Instant::now() < deadline, "no compaction within 5 s");
        sleep(Duration::from_millis(100)).await;
    }
    drop(store);
}

#[tokio::test]
async fn watch_delivers_events_with_previous_values_and_progress() {
    let (_cluster, store) = single().await;
    let mut watcher = store.watch(WatchRequest::prefix("/w/")).await.unwrap();
    let r1 = store.create(b"/w/a", b("1"), 0).await.unwrap();
    let r2 = store.update(b"/w/a", b("2"), r1, 0).await.unwrap();
    let r3 = store.delete(b"/w/a", None).await.unwrap().revision;

    let mut events = Vec::new();
    while events.len() < 3 {
        let resp = next(&mut watcher).await.unwrap();
        assert!(!resp.is_progress(), "progress before the events: {resp:?}");
        events.extend(resp.events);
    }
    assert_eq!(events[0].kind, EventKind::Put);
    assert_eq!(
        (events[0].kv.mod_revision, events[0].prev.is_none()),
        (r1, true)
    );
    assert_eq!(events[1].prev.as_ref().unwrap().value, b("1"));
    assert_eq!(events[1].kv.mod_revision, r2);
    let delete = &events[2];
    assert_eq!(delete.kind, EventKind::Delete);
    assert_eq!(
        (&delete.kv.key[..], delete.kv.mod_revision),
        (&b"/w/a"[..], r3)
    );
    assert!(delete.kv.value.is_empty());
    assert_eq!(delete.prev.as_ref().unwrap().value, b("2"));

    // Progress on request, also when other keys moved the revision on, and right after a
    // write (the notification must not overtake the event).
    store.create(b"/elsewhere", b("x"), 0).await.unwrap();
    watcher.request_progress();
    let progress = next(&mut watcher).await.unwrap();
    assert!(progress.is_progress());
    assert_eq!(progress.revision, store.current_revision().await.unwrap());
    let r4 = store.create(b"/w/b", b("1"), 0).await.unwrap();
    watcher.request_progress();
    let resp = next(&mut watcher).await.unwrap();
    assert_eq!(resp.events[0].kv.mod_revision, r4, "{resp:?}");
    let progress = next(&mut watcher).await.unwrap();
    assert!(progress.is_progress() && progress.revision >= r4);

    // A watch from a past revision replays history.
    let mut replay = store
        .watch(WatchRequest::key("/w/a").from_revision(r1))
        .await
        .unwrap();
    let mut revisions = Vec::new();
    while revisions.len() < 3 {
        revisions.extend(
            next(&mut replay)
                .await
                .unwrap()
                .events
                .iter()
                .map(|e| e.revision()),
        );
    }
    assert_eq!(revisions, [r1, r2, r3]);
}

#[tokio::test]
async fn periodic_progress_when_idle() {
    let (_cluster, store) = single().await;
    let mut watcher = store
        .watch(WatchRequest::prefix("/idle/").progress_every(Duration::from_millis(300)))
        .await
        .unwrap();
    let current = store.current_revision().await.unwrap();
    let started = Instant::now();
    for _ in 0..2 {
        let resp = next(&mut watcher).await.unwrap();
        assert!(resp.is_progress());
        assert_eq!(resp.revision, current);
    }
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn leases_expire_keep_alive_and_revoke() {
    let (_cluster, store) = single().await;
    let lease = store.grant_lease(Duration::from_secs(2)).await.unwrap();
    store.create(b"/l/expiring", b("v"), lease).await.unwrap();
    let (kv, _) = store.get(b"/l/expiring", 0).await.unwrap();
    assert_eq!(kv.unwrap().lease, lease);
    let mut watcher = store.watch(WatchRequest::key("/l/expiring")).await.unwrap();
    // Kept alive past its TTL, it survives.
    for _ in 0..3 {
        sleep(Duration::from_millis(900)).await;
        store.keep_alive(lease).await.unwrap();
    }
    assert!(store.get(b"/l/expiring", 0).await.unwrap().0.is_some());
    // Left alone, it expires and takes its key along.
    let resp = timeout(Duration::from_secs(8), watcher.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(resp.events[0].kind, EventKind::Delete);
    assert!(store.get(b"/l/expiring", 0).await.unwrap().0.is_none());
    assert!(
        matches!(store.keep_alive(lease).await, Err(StoreError::LeaseNotFound(l)) if l == lease)
    );

    let lease = store.grant_lease(Duration::from_millis(100)).await.unwrap();
    store.create(b"/l/revoked", b("v"), lease).await.unwrap();
    store.revoke_lease(lease).await.unwrap();
    assert!(store.get(b"/l/revoked", 0).await.unwrap().0.is_none());
    assert!(matches!(
        store.revoke_lease(lease).await,
        Err(StoreError::LeaseNotFound(_))
    ));
}

#[tokio::test]
async fn dead_endpoints_fail_over_or_report_unavailable() {
    let cluster = cluster(1).await;
    // Nothing listens on the first endpoint (a port we just freed): the client moves on.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let mut config = config(&cluster);
    config.endpoints.insert(0, dead.clone());
    let started = Instant::now();
    let store = EtcdStore::connect(config).await.unwrap();
    store.create(b"/d/a", b("v"), 0).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(store.current_endpoint(), cluster.client_endpoint(0));

    let config = EtcdConfig {
        request_timeout: Duration::from_secs(2),
        ..EtcdConfig::new([dead])
    };
    let started = Instant::now();
    assert!(matches!(
        EtcdStore::connect(config).await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(started.elapsed() < Duration::from_secs(4));
}
