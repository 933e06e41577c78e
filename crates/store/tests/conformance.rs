//! One conformance suite, run against both backends: the embedded store and a real etcd.
//!
//! Each behaviour is an `async fn(Arc<dyn Store>)`; `conformance!` runs it once per backend.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use capstan_store::embedded::EmbeddedStore;
use capstan_store::etcd::{EtcdConfig, EtcdStore};
use capstan_store::{
    EventKind, KeyValue, RangeRequest, Store, StoreError, WatchRequest, WatchResponse, Watcher,
    MAX_VALUE_BYTES,
};
use capstan_testkit::EtcdCluster;
use tokio::sync::Barrier;
use tokio::time::timeout;

/// A store under test and whatever must live as long as it.
struct Backend {
    store: Arc<dyn Store>,
    _guard: Box<dyn std::any::Any + Send>,
}

fn embedded() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    Backend {
        store: Arc::new(store),
        _guard: Box::new(dir),
    }
}

async fn etcd() -> Backend {
    let cluster = tokio::task::spawn_blocking(|| EtcdCluster::start(1))
        .await
        .unwrap()
        .expect("etcd starts");
    let store = EtcdStore::connect(EtcdConfig::new(cluster.client_endpoints()))
        .await
        .expect("connects to etcd");
    Backend {
        store: Arc::new(store),
        _guard: Box::new(cluster),
    }
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                let b = super::embedded();
                super::$name(b.store.clone()).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn etcd() {
                let b = super::etcd().await;
                super::$name(b.store.clone()).await;
            }
        }
    )*};
}

conformance!(
    create_update_delete_follow_revisions,
    reads_at_past_revisions,
    racing_writers_exactly_one_wins_each_round,
    watch_orders_concurrent_writes_across_keys,
    watch_from_every_revision_in_a_window,
    compaction_then_watch_from_compacted_fails,
    lease_expiry_deletes_attached_keys,
    large_ranges_page_at_one_revision,
    oversized_values_are_rejected,
    progress_notifications_report_the_current_revision,
);

fn val(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Wait for the next non-progress response, failing the test after 10 s.
async fn next_events(w: &mut Watcher) -> WatchResponse {
    loop {
        let resp = timeout(Duration::from_secs(10), w.next())
            .await
            .expect("watch event in time")
            .expect("watch still open")
            .expect("watch without error");
        if !resp.is_progress() {
            return resp;
        }
    }
}

/// Collect events until one at revision `last` arrives.
async fn collect_until(w: &mut Watcher, last: i64) -> Vec<capstan_store::Event> {
    let mut out = Vec::new();
    while out.last().map(|e: &capstan_store::Event| e.revision()) != Some(last) {
        let resp = next_events(w).await;
        out.extend(resp.events);
        assert!(out.last().unwrap().revision() <= last, "event past {last}");
    }
    out
}

async fn create_update_delete_follow_revisions(s: Arc<dyn Store>) {
    let k = b"/registry/configmaps/default/a";
    let r1 = s.create(k, val("one"), 0).await.unwrap();
    assert!(r1 > 0);
    assert_eq!(s.current_revision().await.unwrap(), r1);
    let (kv, rev) = s.get(k, 0).await.unwrap();
    let kv = kv.unwrap();
    assert_eq!(rev, r1);
    assert_eq!(
        (
            kv.create_revision,
            kv.mod_revision,
            kv.version,
            &kv.value[..]
        ),
        (r1, r1, 1, &b"one"[..])
    );

    match s.create(k, val("again"), 0).await {
        Err(StoreError::AlreadyExists { key }) => assert_eq!(&key[..], k),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    match s.update(k, val("stale"), r1 - 1, 0).await {
        Err(StoreError::Conflict { current, .. }) => {
            assert_eq!(current.unwrap().mod_revision, r1)
        }
        other => panic!("expected Conflict, got {other:?}"),
    }
    let r2 = s.update(k, val("two"), r1, 0).await.unwrap();
    assert!(r2 > r1);
    let kv = s.get(k, 0).await.unwrap().0.unwrap();
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r1, r2, 2)
    );

    assert!(matches!(
        s.delete(k, Some(r1)).await,
        Err(StoreError::Conflict { .. })
    ));
    let del = s.delete(k, Some(r2)).await.unwrap();
    assert!(del.revision > r2);
    assert_eq!(&del.prev.value[..], b"two");
    assert_eq!(s.get(k, 0).await.unwrap().0, None);
    assert!(matches!(
        s.delete(k, None).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        s.update(k, val("x"), del.revision, 0).await,
        Err(StoreError::NotFound { .. })
    ));

    // A new generation starts over at version 1.
    let r4 = s.create(k, val("new"), 0).await.unwrap();
    let kv = s.get(k, 0).await.unwrap().0.unwrap();
    assert_eq!((kv.create_revision, kv.version), (r4, 1));
}

async fn reads_at_past_revisions(s: Arc<dyn Store>) {
    let r1 = s.create(b"/p/a", val("a1"), 0).await.unwrap();
    let r2 = s.create(b"/p/b", val("b1"), 0).await.unwrap();
    let r3 = s.update(b"/p/a", val("a2"), r1, 0).await.unwrap();
    let r4 = s.delete(b"/p/b", None).await.unwrap().revision;

    assert_eq!(
        &s.get(b"/p/a", r1).await.unwrap().0.unwrap().value[..],
        b"a1"
    );
    assert_eq!(
        &s.get(b"/p/a", r3).await.unwrap().0.unwrap().value[..],
        b"a2"
    );
    assert!(s.get(b"/p/b", r4).await.unwrap().0.is_none());
    let at = |rev| RangeRequest::prefix("/p/").at(rev);
    let keys = |r: capstan_store::RangeResponse| -> Vec<Vec<u8>> {
        r.kvs.into_iter().map(|kv| kv.key.to_vec()).collect()
    };
    assert_eq!(
        keys(s.range(at(r2)).await.unwrap()),
        vec![b"/p/a".to_vec(), b"/p/b".to_vec()]
    );
    assert_eq!(keys(s.range(at(r4)).await.unwrap()), vec![b"/p/a".to_vec()]);
    let past = s.range(at(r2)).await.unwrap();
    assert_eq!(&past.kvs[0].value[..], b"a1");
    assert_eq!(
        past.revision, r2,
        "the response carries the revision it was served at"
    );

    match s.get(b"/p/a", r4 + 100).await {
        Err(StoreError::FutureRevision { requested, .. }) => assert_eq!(requested, r4 + 100),
        other => panic!("expected FutureRevision, got {other:?}"),
    }
}

async fn racing_writers_exactly_one_wins_each_round(s: Arc<dyn Store>) {
    const WRITERS: usize = 12;
    const ROUNDS: usize = 25;
    let key: &'static [u8] = b"/race/key";
    s.create(key, val("0"), 0).await.unwrap();
    let barrier = Arc::new(Barrier::new(WRITERS));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (s, barrier) = (s.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let mut wins = Vec::new();
            for round in 0..ROUNDS {
                // Everyone reads the same revision, then everyone tries to write on it.
                let seen = s.get(key, 0).await.unwrap().0.unwrap();
                barrier.wait().await;
                match s
                    .update(key, val(&format!("{round}:{w}")), seen.mod_revision, 0)
                    .await
                {
                    Ok(rev) => wins.push((round, rev)),
                    Err(StoreError::Conflict { .. }) => {}
                    Err(e) => panic!("unexpected error {e}"),
                }
                barrier.wait().await;
            }
            wins
        }));
    }
    let mut per_round = vec![0; ROUNDS];
    let mut revs = HashSet::new();
    for t in tasks {
        for (round, rev) in t.await.unwrap() {
            per_round[round] += 1;
            assert!(revs.insert(rev), "two writes got revision {rev}");
        }
    }
    assert_eq!(per_round, vec![1; ROUNDS], "exactly one winner per round");
    let kv = s.get(key, 0).await.unwrap().0.unwrap();
    assert_eq!(kv.version, ROUNDS as i64 + 1);
}

async fn watch_orders_concurrent_writes_across_keys(s: Arc<dyn Store>) {
    const WRITERS: usize = 8;
    const WRITES: usize = 40;
    let start = s.current_revision().await.unwrap() + 1;
    let mut w = s
        .watch(WatchRequest::prefix("/order/").from_revision(start))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..WRITERS {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("/order/k{i}");
            let mut rev = s.create(key.as_bytes(), val("0"), 0).await.unwrap();
            for n in 1..WRITES {
                rev = s
                    .update(key.as_bytes(), val(&n.to_string()), rev, 0)
                    .await
                    .unwrap();
            }
            rev
        }));
    }
    let mut last = 0;
    for t in tasks {
        last = last.max(t.await.unwrap());
    }
    let events = collect_until(&mut w, last).await;
    assert_eq!(events.len(), WRITERS * WRITES, "no gaps, no duplicates");
    let mut latest: BTreeMap<Bytes, KeyValue> = BTreeMap::new();
    for (i, ev) in events.iter().enumerate() {
        assert_eq!(
            ev.revision(),
            start + i as i64,
            "revisions in order without gaps"
        );
        assert_eq!(ev.kind, EventKind::Put);
        // Each event's previous value is exactly the key's value before it.
        assert_eq!(ev.prev.as_ref(), latest.get(&ev.kv.key));
        let n: usize = std::str::from_utf8(&ev.kv.value).unwrap().parse().unwrap();
        assert_eq!(ev.kv.version, n as i64 + 1);
        latest.insert(ev.kv.key.clone(), ev.kv.clone());
    }
}

/// Writes a mix of creates, updates and deletes; returns (first, last) revision.
async fn write_history(s: &Arc<dyn Store>, prefix: &str, n: usize) -> (i64, i64) {
    let mut first = 0;
    let mut last = 0;
    for i in 0..n {
        let key = format!("{prefix}{}", i % 4);
        let rev = match s.get(key.as_bytes(), 0).await.unwrap().0 {
            Some(_) if i % 5 == 4 => s.delete(key.as_bytes(), None).await.unwrap().revision,
            Some(kv) => s
                .update(key.as_bytes(), val(&i.to_string()), kv.mod_revision, 0)
                .await
                .unwrap(),
            None => s
                .create(key.as_bytes(), val(&i.to_string()), 0)
                .await
                .unwrap(),
        };
        if first == 0 {
            first = rev;
        }
        last = rev;
    }
    (first, last)
}

async fn watch_from_every_revision_in_a_window(s: Arc<dyn Store>) {
    let (first, last) = write_history(&s, "/window/", 30).await;
    let mut all = s
        .watch(WatchRequest::prefix("/window/").from_revision(first))
        .await
        .unwrap();
    let full = collect_until(&mut all, last).await;
    assert_eq!(full.len() as i64, last - first + 1);
    assert!(full.iter().any(|e| e.kind == EventKind::Delete));
    for ev in full.iter().filter(|e| e.kind == EventKind::Delete) {
        assert!(ev.prev.is_some(), "a delete carries the deleted value");
        assert!(ev.kv.value.is_empty());
    }
    for from in first..=last {
        let mut w = s
            .watch(WatchRequest::prefix("/window/").from_revision(from))
            .await
            .unwrap();
        let got = collect_until(&mut w, last).await;
        assert_eq!(
            &got[..],
            &full[(from - first) as usize..],
            "watch from {from}"
        );
    }
}

async fn compaction_then_watch_from_compacted_fails(s: Arc<dyn Store>) {
    let (first, last) = write_history(&s, "/compact/", 10).await;
    let at = first + 5;
    s.compact(at).await.unwrap();
    assert!(s.compacted_revision().await.unwrap() >= at);
    match s.get(b"/compact/0", first).await {
        Err(StoreError::Compacted { requested, .. }) => assert_eq!(requested, first),
        other => panic!("expected Compacted, got {other:?}"),
    }
    // A watch from before the compaction fails with Compacted, at once or as its first message.
    match s
        .watch(WatchRequest::prefix("/compact/").from_revision(first))
        .await
    {
        Err(StoreError::Compacted { .. }) => {}
        Err(e) => panic!("expected Compacted, got {e}"),
        Ok(mut w) => loop {
            match timeout(Duration::from_secs(10), w.next()).await.unwrap() {
                Some(Err(StoreError::Compacted { .. })) => break,
                Some(Ok(resp)) if resp.is_progress() => continue,
                other => panic!("expected Compacted, got {other:?}"),
            }
        },
    }
    // From the compaction revision on, history is intact.
    s.range(RangeRequest::prefix("/compact/").at(at))
        .await
        .unwrap();
    let mut w = s
        .watch(WatchRequest::prefix("/compact/").from_revision(at + 1))
        .await
        .unwrap();
    let got = collect_until(&mut w, last).await;
    assert_eq!(got.len() as i64, last - at);
}

async fn lease_expiry_deletes_attached_keys(s: Arc<dyn Store>) {
    let lease = s.grant_lease(Duration::from_secs(2)).await.unwrap();
    let kept = s.grant_lease(Duration::from_secs(60)).await.unwrap();
    let start = s.current_revision().await.unwrap() + 1;
    let mut w = s
        .watch(WatchRequest::prefix("/lease/").from_revision(start))
        .await
        .unwrap();
    s.create(b"/lease/event", val("e"), lease).await.unwrap();
    s.create(b"/lease/kept", val("k"), kept).await.unwrap();
    s.create(b"/lease/plain", val("p"), 0).await.unwrap();
    assert_eq!(
        s.get(b"/lease/event", 0).await.unwrap().0.unwrap().lease,
        lease
    );
    assert!(matches!(
        s.create(b"/lease/bad", val("x"), 987_654_321).await,
        Err(StoreError::LeaseNotFound(_))
    ));

    // Expiry shows up as a delete event, within a few seconds of the TTL.
    let mut deleted = None;
    while deleted.is_none() {
        for ev in next_events(&mut w).await.events {
            if ev.kind == EventKind::Delete {
                deleted = Some(ev);
            }
        }
    }
    let ev = deleted.unwrap();
    assert_eq!(&ev.kv.key[..], b"/lease/event");
    assert!(s.get(b"/lease/event", 0).await.unwrap().0.is_none());
    assert!(s.get(b"/lease/plain", 0).await.unwrap().0.is_some());

    s.keep_alive(kept).await.unwrap();
    s.revoke_lease(kept).await.unwrap();
    assert!(s.get(b"/lease/kept", 0).await.unwrap().0.is_none());
    assert!(matches!(
        s.keep_alive(kept).await,
        Err(StoreError::LeaseNotFound(_))
    ));
}

async fn large_ranges_page_at_one_revision(s: Arc<dyn Store>) {
    const KEYS: usize = 2000;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for i in (t..KEYS).step_by(8) {
                let key = format!("/page/{i:05}");
                s.create(key.as_bytes(), val(&"x".repeat(200)), 0)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let first = s
        .range(RangeRequest::prefix("/page/").limit(300))
        .await
        .unwrap();
    assert_eq!(first.kvs.len(), 300);
    assert_eq!(first.count, KEYS as i64);
    assert!(first.more);
    let at = first.revision;
    // Writes after the first page must not show in later pages of the same snapshot.
    s.create(b"/page/00000a", val("late"), 0).await.unwrap();
    s.delete(b"/page/01999", None).await.unwrap();

    let mut keys: Vec<Bytes> = first.kvs.iter().map(|kv| kv.key.clone()).collect();
    let mut more = first.more;
    while more {
        let page = s
            .range(
                RangeRequest::prefix("/page/")
                    .after(keys.last().unwrap())
                    .limit(300)
                    .at(at),
            )
            .await
            .unwrap();
        assert!(!page.kvs.is_empty());
        keys.extend(page.kvs.iter().map(|kv| kv.key.clone()));
        more = page.more;
    }
    let expected: Vec<Bytes> = (0..KEYS)
        .map(|i| Bytes::from(format!("/page/{i:05}")))
        .collect();
    assert_eq!(keys, expected);

    let now = s
        .range(RangeRequest::prefix("/page/").count_only())
        .await
        .unwrap();
    assert_eq!(now.count, KEYS as i64);
    assert!(now.kvs.is_empty());
}

async fn oversized_values_are_rejected(s: Arc<dyn Store>) {
    let key = b"/big/one";
    let big = Bytes::from(vec![b'x'; MAX_VALUE_BYTES + 1]);
    match s.create(key, big.clone(), 0).await {
        Err(StoreError::TooLarge { size, limit }) => {
            assert!(size > limit);
            assert_eq!(limit, MAX_VALUE_BYTES);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(s.get(key, 0).await.unwrap().0.is_none());
    let rev = s.create(key, val("small"), 0).await.unwrap();
    assert!(matches!(
        s.update(key, big, rev, 0).await,
        Err(StoreError::TooLarge { .. })
    ));
    assert_eq!(&s.get(key, 0).await.unwrap().0.unwrap().value[..], b"small");
    // Just under the limit is fine.
    let fits = Bytes::from(vec![b'y'; MAX_VALUE_BYTES - key.len() - 64]);
    s.update(key, fits, rev, 0).await.unwrap();
}

async fn progress_notifications_report_the_current_revision(s: Arc<dyn Store>) {
    let mut w = s.watch(WatchRequest::prefix("/quiet/")).await.unwrap();
    let rev = s.create(b"/elsewhere", val("x"), 0).await.unwrap();
    // Progress may lag a write briefly; ask until it reports the write's revision.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        w.request_progress();
        let resp = timeout(Duration::from_secs(5), w.next())
            .await
            .expect("progress in time")
            .unwrap()
            .unwrap();
        assert!(resp.is_progress(), "no event matches the watched prefix");
        if resp.revision >= rev {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "progress never reached {rev}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut periodic = s
        .watch(WatchRequest::prefix("/quiet/").progress_every(Duration::from_millis(200)))
        .await
        .unwrap();
    let resp = timeout(Duration::from_secs(10), periodic.next())
        .await
        .expect("periodic progress")
        .unwrap()
        .unwrap();
    assert!(resp.is_progress());
}
