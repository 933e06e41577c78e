//! The commit thread: the only writer. It applies queued writes to the MVCC index, makes them
//! durable with one fsync per batch (group commit: writers that arrive during an fsync share
//! the next one), then publishes them to readers and watchers and acknowledges them. It also
//! expires leases and rotates the log into snapshots.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::RwLock;
use tokio::sync::{oneshot, watch};

use super::disk::{self, Disk, SnapshotData};
use super::mvcc::Mvcc;
use super::record::Record;
use crate::{DeleteResponse, LeaseId, Result, Revision, StoreError};

/// A write for the commit thread.
pub(crate) enum Op {
    Create {
        key: Bytes,
        value: Bytes,
        lease: LeaseId,
    },
    Update {
        key: Bytes,
        value: Bytes,
        expected: Revision,
        lease: LeaseId,
    },
    Delete {
        key: Bytes,
        expected: Option<Revision>,
    },
    Compact(Revision),
    GrantLease {
        ttl: Duration,
    },
    KeepAlive(LeaseId),
    RevokeLease(LeaseId),
}

pub(crate) enum Reply {
    Revision(Revision),
    Deleted(DeleteResponse),
    Lease(LeaseId),
    Done,
}

pub(crate) struct Request {
    pub op: Op,
    pub reply: oneshot::Sender<Result<Reply>>,
}

/// State shared by the commit thread, readers and watch tasks.
pub(crate) struct Shared {
    pub mvcc: RwLock<Mvcc>,
    /// The newest published revision; watch tasks wait on it.
    pub published: watch::Sender<Revision>,
    /// Set when a write could not be made durable: from then on every write fails.
    pub failed: AtomicBool,
    /// Batches made durable (one fsync each).
    pub commits: AtomicU64,
}

/// Tuning of the commit loop.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CommitOptions {
    pub max_batch: usize,
    pub segment_bytes: u64,
    /// While writes keep coming, a batch waits up to this long after its first write for
    /// more to share its fsync.
    pub window: Duration,
}

pub(crate) fn run(shared: Arc<Shared>, mut disk: Disk, rx: Receiver<Request>, opts: CommitOptions) {
    let now = Instant::now();
    let mut deadlines: HashMap<LeaseId, Instant> = shared
        .mvcc
        .read()
        .leases
        .iter()
        .map(|(&id, l)| (id, now + Duration::from_millis(l.ttl_ms as u64)))
        .collect();
    let snapshotting = Arc::new(AtomicBool::new(false));
    let mut buf = Vec::with_capacity(1 << 20);
    let mut batch = Vec::with_capacity(opts.max_batch);
    // Group commit. A write that finds the store idle is committed at once. While writes
    // keep coming, a batch waits (up to the window) until it holds as many as the last one
    // did, up to `GATHER`: concurrent writers, acknowledged together, come back together, so
    // an fsync is shared by several of them instead of by those that happened to arrive
    // during the last one (two or three when the server's work between writes spreads them
    // out, each fsync costing this machine ~40 µs of CPU). A lone writer's batches hold one
    // write and never wait. Batches already larger than `GATHER` do not wait either: the
    // fsyncs saved would be few, and writers all waiting on one batch leave the CPU idle
    // during its fsync.
    // No batch yet: the first waits for nothing (`last_size` 0) whatever the time.
    let mut last_commit = Instant::now();
    let mut last_size = 0;
    loop {
        let timeout = deadlines
            .values()
            .min()
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(3600));
        match rx.recv_timeout(timeout) {
            Ok(req) => batch.push(req),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        let first = Instant::now();
        let want = if first.duration_since(last_commit) < opts.window {
            last_size.min(opts.max_batch).min(GATHER)
        } else {
            0
        };
        gather(&rx, &mut batch, opts.max_batch, want, first + opts.window);
        last_size = batch.len();
        commit_batch(&shared, &mut disk, &mut batch, &mut deadlines, &mut buf);
        last_commit = Instant::now();
        // A snapshot writes all the live data: taken once the segment is as large as that
        // (and at least `segment_bytes`), snapshots cost at most as many bytes as the log.
        let wal = disk.wal_bytes();
        if wal >= opts.segment_bytes
            && !snapshotting.load(Ordering::Acquire)
            && wal >= shared.mvcc.read().live_bytes() as u64
        {
            start_snapshot(&shared, &mut disk, &snapshotting);
        }
    }
    // Let a snapshot in flight finish before the lock on the directory is released.
    while snapshotting.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// At most this many writes are waited for before an fsync.
const GATHER: usize = 8;

/// Take the queued writes into `batch`; while it holds fewer than `want`, look again every
/// tenth of the window until `until`. The thread sleeps rather than waiting on the channel:
/// writers that find it waiting wake it one by one, each with a system call, which would
/// cost more than the fsyncs saved.
fn gather(
    rx: &Receiver<Request>,
    batch: &mut Vec<Request>,
    max: usize,
    want: usize,
    until: Instant,
) {
    let step = until.saturating_duration_since(Instant::now()) / 10;
    loop {
        while batch.len() < max {
            match rx.try_recv() {
                Ok(req) => batch.push(req),
                Err(_) => break,
            }
        }
        if batch.len() >= want || Instant::now() + step > until {
            return;
        }
        std::thread::sleep(step);
    }
}

fn commit_batch(
    shared: &Shared,
    disk: &mut Disk,
    batch: &mut Vec<Request>,
    deadlines: &mut HashMap<LeaseId, Instant>,
    buf: &mut Vec<u8>,
) {
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(batch.len());
    let failed = shared.failed.load(Ordering::Acquire);
    {
        let mut m = shared.mvcc.write();
        for req in batch.drain(..) {
            let result = if failed {
                Err(StoreError::Unavailable(
                    "an earlier write could not be made durable".into(),
                ))
            } else {
                apply(&mut m, req.op, &mut records, deadlines)
            };
            results.push((req.reply, result));
        }
        let now = Instant::now();
        let expired: Vec<LeaseId> = deadlines
            .iter()
            .filter(|(_, &d)| d <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in expired {
            deadlines.remove(&id);
            if !failed {
                let _ = m.revoke_lease(id, &mut records);
            }
        }
    }
    if !records.is_empty() {
        buf.clear();
        for r in &records {
            r.encode(buf);
        }
        if let Err(e) = disk.append(buf) {
            tracing::error!(dir = %disk.dir().display(), error = %e,
                "cannot make writes durable; the store refuses writes from now on");
            shared.failed.store(true, Ordering::Release);
            for (reply, _) in results {
                let _ = reply.send(Err(StoreError::Unavailable(format!(
                    "write-ahead log: {e}"
                ))));
            }
            return;
        }
        shared.commits.fetch_add(1, Ordering::Relaxed);
        let rev = {
            let mut m = shared.mvcc.write();
            m.publish();
            m.published()
        };
        shared.published.send_replace(rev);
    }
    for (reply, result) in results {
        let _ = reply.send(result);
    }
}

fn apply(
    m: &mut Mvcc,
    op: Op,
    records: &mut Vec<Record>,
    deadlines: &mut HashMap<LeaseId, Instant>,
) -> Result<Reply> {
    match op {
        Op::Create { key, value, lease } => {
            m.create(key, value, lease, records).map(Reply::Revision)
        }
        Op::Update {
            key,
            value,
            expected,
            lease,
        } => m
            .update(key, value, expected, lease, records)
            .map(Reply::Revision),
        Op::Delete { key, expected } => m.delete(key, expected, records).map(Reply::Deleted),
        Op::Compact(rev) => m.compact(rev, records).map(|_| Reply::Done),
        Op::GrantLease { ttl } => {
            let ttl_ms = ttl.as_millis().max(1) as i64;
            let id = m.grant_lease(ttl_ms, records);
            deadlines.insert(id, Instant::now() + ttl);
            Ok(Reply::Lease(id))
        }
        Op::KeepAlive(id) => match m.leases.get(&id) {
            Some(l) => {
                deadlines.insert(id, Instant::now() + Duration::from_millis(l.ttl_ms as u64));
                Ok(Reply::Done)
            }
            None => Err(StoreError::LeaseNotFound(id)),
        },
        Op::RevokeLease(id) => {
            deadlines.remove(&id);
            m.revoke_lease(id, records).map(|_| Reply::Done)
        }
    }
}

/// Start a new segment and write a snapshot of the state so far in the background; once it is
/// durable, older segments and snapshots are deleted, which bounds the disk used.
fn start_snapshot(shared: &Shared, disk: &mut Disk, snapshotting: &Arc<AtomicBool>) {
    let next_segment = match disk.rotate() {
        Ok(seq) => seq,
        Err(e) => {
            tracing::warn!(error = %e, "cannot start a new write-ahead log segment");
            return;
        }
    };
    let snap = {
        let m = shared.mvcc.read();
        SnapshotData {
            rev: m.published(),
            compacted: m.compacted(),
            next_segment,
            leases: m.leases.iter().map(|(&id, l)| (id, l.ttl_ms)).collect(),
            kvs: m.live_at_published(),
        }
    };
    snapshotting.store(true, Ordering::Release);
    let dir = disk.dir().to_path_buf();
    let flag = snapshotting.clone();
    let spawned = std::thread::Builder::new()
        .name("capstan-snapshot".into())
        .spawn(move || {
            if let Err(e) = disk::write_snapshot(&dir, snap) {
                tracing::warn!(dir = %dir.display(), error = %e, "snapshot failed; will retry");
            }
            flag.store(false, Ordering::Release);
        });
    if spawned.is_err() {
        snapshotting.store(false, Ordering::Release);
    }
}
