//! The embedded backend: capstan's default store, in one data directory.
//!
//! # Design
//! - All data is in memory ([`mvcc`]): every key's versions in a B-tree plus a revision-ordered
//!   log, so reads, ranges and watches never touch the disk.
//! - One commit thread is the only writer ([`commit`]). Writers queue requests; the thread
//!   applies a whole batch, appends its records to the write-ahead log with one `fdatasync`, and
//!   only then publishes the batch to readers and watchers and acknowledges it (group commit).
//!   Readers see nothing newer than the last durable revision.
//! - Watch tasks are woken by the commit thread through a `tokio::sync::watch` channel holding
//!   the published revision, then copy the events they have not yet sent from the log. A slow
//!   watcher only falls behind in the log; once compaction passes it, it gets `Compacted`.
//! - History is compacted automatically ([`Retention`]): the newest 1,000 revisions are always
//!   kept; older history is dropped while superseded values exceed half the live data (or
//!   4 MiB), or the log exceeds 200,000 revisions.
//!
//! # On-disk format
//! The data directory holds:
//! - `LOCK`: locked (`flock`) while a process has the store open.
//! - `wal-<seq>.log` (seq: 20 decimal digits): write-ahead log segments. Each starts with the
//!   8 bytes `CAPWAL1\n`, followed by records. A record is `len: u32 LE`, `crc32(payload): u32
//!   LE`, then `len` bytes of payload whose first byte is the kind (see [`record::Record`]):
//!   1 put (`rev, lease, key_len: u32, key, value`), 2 delete (`rev, key`), 3 lease grant
//!   (`id, ttl_ms`), 4 lease revoke (`id`), 5 compact (`rev`); integers are i64 LE unless
//!   noted. Revisions in puts and deletes follow each other by exactly one. The segment being
//!   written is kept ahead of its records with zeros (a sixteenth of `segment_bytes`, at most
//!   4 MiB, at a time), so that each batch's `fdatasync` overwrites blocks the file already has
//!   instead of growing it (no journal commit per batch); an all-zero frame header ends the
//!   records, and a clean close or a rotation cuts the zeros off.
//! - `snap-<rev>.snap`: the live keys at revision `rev`. `CAPSNP1\n`, then lease-grant records,
//!   live-key records (kind 6: `create_rev, mod_rev, version, lease, key_len: u32, key,
//!   value`), and a final kind-7 record (`rev, compacted, next_segment, record_count`) without
//!   which the snapshot is invalid. Written as `*.tmp`, fsynced, then renamed.
//!
//! When the current segment exceeds both `segment_bytes` (64 MiB by default) and the live
//! data's size, a new segment starts and a snapshot of the state at that moment is written in
//! the background; once it is durable the older segments and snapshots are deleted. Writing
//! snapshots thus costs at most as many bytes as the log (a snapshot per 64 MiB of log would
//! rewrite a large store over and over), and disk use is about one snapshot (the live data)
//! plus at most two segments of about that size.
//!
//! Opening loads the newest snapshot and replays the segments from its `next_segment` on. A
//! write cut short at the end of the last segment (a crash during a write, never acknowledged:
//! a record running past the end of the file, or failing its checksum where only zeros follow
//! or where a whole sector of it is still zeros) is cut off with a warning; any other damage —
//! a bad checksum before the end, a missing segment, a revision gap, a bad header — fails the
//! open with `Corrupt` naming the file.

mod commit;
mod disk;
mod mvcc;
mod record;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::RwLock;
use tokio::sync::{oneshot, watch};

use commit::{CommitOptions, Op, Reply, Request, Shared};
pub use mvcc::Retention;

use crate::{
    check_size, DeleteResponse, KeyValue, LeaseId, RangeRequest, RangeResponse, Result, Revision,
    Store, StoreError, WatchRequest, WatchResponse, Watcher,
};

/// Options for opening an embedded store.
#[derive(Clone, Debug)]
pub struct Options {
    pub dir: PathBuf,
    /// Start a new log segment (and a snapshot) once the current one reaches this size and
    /// the live data's.
    pub segment_bytes: u64,
    /// At most this many writes share one fsync.
    pub max_batch: usize,
    /// While concurrent writers keep coming, how long a batch may wait for them to share its
    /// fsync (a lone writer's writes, and one that finds the store idle, do not wait).
    pub commit_window: Duration,
    pub retention: Retention,
}

impl Options {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Options {
            dir: dir.into(),
            segment_bytes: 64 << 20,
            max_batch: 4096,
            commit_window: Duration::from_millis(1),
            retention: Retention::default(),
        }
    }
}

/// The embedded store. Dropping it finishes the writes in flight and closes the files.
pub struct EmbeddedStore {
    shared: Arc<Shared>,
    tx: Option<Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

/// Events copied per watch response at most.
const WATCH_BATCH: usize = 1000;

impl EmbeddedStore {
    /// Open (or create) the store in `dir` with default options.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(Options::new(dir.as_ref()))
    }

    pub fn open_with(opts: Options) -> Result<Self> {
        let chunk = disk::prealloc_chunk(opts.segment_bytes);
        let (mvcc, disk) = disk::open(&opts.dir, opts.retention, chunk)?;
        let (published, _) = watch::channel(mvcc.published());
        let shared = Arc::new(Shared {
            mvcc: RwLock::new(mvcc),
            published,
            failed: AtomicBool::new(false),
            commits: AtomicU64::new(0),
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let commit_opts = CommitOptions {
            max_batch: opts.max_batch.max(1),
            segment_bytes: opts.segment_bytes,
            window: opts.commit_window,
        };
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("capstan-commit".into())
            .spawn(move || commit::run(thread_shared, disk, rx, commit_opts))
            .map_err(|e| StoreError::Unavailable(format!("cannot start the commit thread: {e}")))?;
        Ok(EmbeddedStore {
            shared,
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Batches of writes made durable so far: one fsync of the log each.
    pub fn commits(&self) -> u64 {
        self.shared.commits.load(Ordering::Relaxed)
    }

    /// Bytes of live keys and values, and of superseded values kept as history.
    pub fn data_bytes(&self) -> (usize, usize) {
        let m = self.shared.mvcc.read();
        (m.live_bytes(), m.history_bytes())
    }

    async fn submit(&self, op: Op) -> Result<Reply> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(StoreError::Unavailable(
                "an earlier write could not be made durable".into(),
            ));
        }
        let (reply, rx) = oneshot::channel();
        let closed = || StoreError::Unavailable("the store is closed".into());
        self.tx
            .as_ref()
            .ok_or_else(closed)?
            .send(Request { op, reply })
            .map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn unexpected() -> StoreError {
    StoreError::Unavailable("unexpected reply from the commit thread".into())
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn get(&self, key: &[u8], revision: Revision) -> Result<(Option<KeyValue>, Revision)> {
        self.shared.mvcc.read().get(key, revision)
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        self.shared.mvcc.read().range(&req)
    }

    async fn create(&self, key: &[u8], value: Bytes, lease: LeaseId) -> Result<Revision> {
        check_size(key, &value)?;
        let key = Bytes::copy_from_slice(key);
        match self.submit(Op::Create { key, value, lease }).await? {
            Reply::Revision(rev) => Ok(rev),
            _ => Err(unexpected()),
        }
    }

    async fn update(
        &self,
        key: &[u8],
        value: Bytes,
        expected: Revision,
        lease: LeaseId,
    ) -> Result<Revision> {
        check_size(key, &value)?;
        let key = Bytes::copy_from_slice(key);
        let op = Op::Update {
            key,
            value,
            expected,
            lease,
        };
        match self.submit(op).await? {
            Reply::Revision(rev) => Ok(rev),
            _ => Err(unexpected()),
        }
    }

    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<DeleteResponse> {
        let key = Bytes::copy_from_slice(key);
        match self.submit(Op::Delete { key, expected }).await? {
            Reply::Deleted(d) => Ok(d),
            _ => Err(unexpected()),
        }
    }

    async fn watch(&self, req: WatchRequest) -> Result<Watcher> {
        let next = {
            let m = self.shared.mvcc.read();
            if req.start_revision > 0 {
                // Fail now rather than on the first read, as etcd does for compacted starts.
                m.events(&req.range(), req.start_revision, m.published(), 0)?;
                req.start_revision
            } else {
                m.published() + 1
            }
        };
        let (watcher, tx, progress) = Watcher::new();
        let task = WatchTask {
            shared: self.shared.clone(),
            range: req.range(),
            next,
            interval: req.progress_interval,
            tx,
            progress,
            last_sent: tokio::time::Instant::now(),
        };
        tokio::spawn(task.run());
        Ok(watcher)
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.submit(Op::Compact(revision)).await.map(|_| ())
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.shared.mvcc.read().published())
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        Ok(self.shared.mvcc.read().compacted())
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId> {
        match self.submit(Op::GrantLease { ttl }).await? {
            Reply::Lease(id) => Ok(id),
            _ => Err(unexpected()),
        }
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        self.submit(Op::KeepAlive(lease)).await.map(|_| ())
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        self.submit(Op::RevokeLease(lease)).await.map(|_| ())
    }
}

/// One watcher: copies published events in its range from the log into its channel.
struct WatchTask {
    shared: Arc<Shared>,
    range: RangeRequest,
    /// The next revision to look at.
    next: Revision,
    interval: Option<Duration>,
    tx: tokio::sync::mpsc::Sender<Result<WatchResponse>>,
    progress: Arc<tokio::sync::Notify>,
    /// When something was last sent, for periodic progress notifications.
    last_sent: tokio::time::Instant,
}

impl WatchTask {
    async fn run(mut self) {
        let mut published = self.shared.published.subscribe();
        let mut progress_due = false;
        loop {
            published.borrow_and_update();
            if !self.drain().await {
                return;
            }
            if progress_due {
                let resp = WatchResponse {
                    events: Vec::new(),
                    revision: self.next - 1,
                };
                if self.tx.send(Ok(resp)).await.is_err() {
                    return;
                }
                self.last_sent = tokio::time::Instant::now();
                progress_due = false;
            }
            let (interval, last_sent) = (self.interval, self.last_sent);
            let idle = async move {
                match interval {
                    Some(d) => tokio::time::sleep_until(last_sent + d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = published.changed() => {
                    if changed.is_err() {
                        return; // the store is gone
                    }
                }
                _ = self.progress.notified() => progress_due = true,
                _ = self.tx.closed() => return,
                _ = idle => progress_due = true,
            }
        }
    }

    /// Send every published event not sent yet. False when the watch has ended.
    async fn drain(&mut self) -> bool {
        loop {
            let batch = {
                let m = self.shared.mvcc.read();
                let published = m.published();
                if self.next > published {
                    return true;
                }
                m.events(&self.range, self.next, published, WATCH_BATCH)
                    .map(|(events, next)| (events, next, published))
            };
            match batch {
                Ok((events, next, published)) => {
                    self.next = next;
                    if events.is_empty() {
                        continue;
                    }
                    let resp = WatchResponse {
                        events,
                        revision: published,
                    };
                    if self.tx.send(Ok(resp)).await.is_err() {
                        return false;
                    }
                    self.last_sent = tokio::time::Instant::now();
                }
                Err(e) => {
                    let _ = self.tx.send(Err(e)).await;
                    return false;
                }
            }
        }
    }
}
