//! The capstan store: every object of the cluster lives here, under `/registry/...`.
//!
//! [`Store`] is an MVCC key-value store with etcd v3's semantics as Kubernetes uses them: one
//! global, monotonically increasing revision; every key carries `create_revision`,
//! `mod_revision` and `version`; conditional single-key writes; reads at past revisions; watches
//! from any retained revision with previous values; compaction; leases.
//!
//! Two backends implement it and pass the same conformance suite (`tests/conformance.rs`):
//! - [`embedded`]: the default, a write-ahead-logged in-memory MVCC store in a data directory;
//! - [`etcd`]: the etcd v3 API, for clusters that outgrow one machine.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

pub mod embedded;
pub mod etcd;
mod watch;

pub use watch::{Event, EventKind, WatchResponse, Watcher};

/// A store revision. Revision 0 means "none" (a key never written, or "latest" in requests).
pub type Revision = i64;

/// A lease identifier. 0 means "no lease".
pub type LeaseId = i64;

/// The largest value a single write may carry (etcd's default `--max-request-bytes`).
pub const MAX_VALUE_BYTES: usize = 1536 * 1024;

/// One key at one revision, as etcd's `mvccpb.KeyValue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Bytes,
    pub value: Bytes,
    /// The revision of the write that created this generation of the key.
    pub create_revision: Revision,
    /// The revision of the last write to the key.
    pub mod_revision: Revision,
    /// How many times the key was written since it was created (1 after create).
    pub version: i64,
    pub lease: LeaseId,
}

/// Errors every backend returns with the same meaning; the API server maps them to `Status`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("key {} not found", show_key(.key))]
    NotFound { key: Bytes },
    #[error("key {} already exists", show_key(.key))]
    AlreadyExists { key: Bytes },
    /// A conditional write's expected `mod_revision` did not match. `current` is the key's
    /// present state (None if it no longer exists), so that callers can retry without a read.
    #[error("key {} was modified (expected revision {expected})", show_key(.key))]
    Conflict {
        key: Bytes,
        expected: Revision,
        current: Option<Box<KeyValue>>,
    },
    #[error("revision {requested} has been compacted (compacted up to {compacted})")]
    Compacted {
        requested: Revision,
        compacted: Revision,
    },
    #[error("revision {requested} is a future revision (current is {current})")]
    FutureRevision {
        requested: Revision,
        current: Revision,
    },
    #[error("value of {size} bytes is larger than the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("lease {0} not found")]
    LeaseNotFound(LeaseId),
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
}

/// Short, printable form of a key for error messages.
fn show_key(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A range read: the keys in `[start, end)` (or the single key `start` when `end` is empty).
#[derive(Clone, Debug, Default)]
pub struct RangeRequest {
    pub start: Bytes,
    /// Exclusive end; empty means "only `start`". Use [`prefix_end`] for a prefix range.
    pub end: Bytes,
    /// At most this many keys (0: no limit). `RangeResponse::more` tells if some were left out.
    pub limit: usize,
    /// Read at this revision (0: the current one).
    pub revision: Revision,
    /// Return only the count of matching keys.
    pub count_only: bool,
}

impl RangeRequest {
    /// Every key that starts with `prefix`.
    pub fn prefix(prefix: impl Into<Bytes>) -> Self {
        let start = prefix.into();
        let end = prefix_end(&start);
        RangeRequest {
            start,
            end,
            ..Default::default()
        }
    }

    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    pub fn at(mut self, revision: Revision) -> Self {
        self.revision = revision;
        self
    }

    pub fn count_only(mut self) -> Self {
        self.count_only = true;
        self
    }

    /// Continue a paged range after `last_key` (the last key of the previous page).
    pub fn after(mut self, last_key: &[u8]) -> Self {
        let mut next = last_key.to_vec();
        next.push(0);
        self.start = next.into();
        self
    }

    /// Does `key` fall in this range?
    pub fn contains(&self, key: &[u8]) -> bool {
        if self.end.is_empty() {
            key == &self.start[..]
        } else {
            key >= &self.start[..] && (self.end[..] == [0] || key < &self.end[..])
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct RangeResponse {
    pub kvs: Vec<KeyValue>,
    /// The number of keys in the range at that revision, regardless of `limit`.
    pub count: i64,
    /// True when `limit` left keys out.
    pub more: bool,
    /// The revision the read was served at: the requested one, or the store's current revision
    /// for latest reads (etcd's header carries the current revision either way).
    pub revision: Revision,
}

/// The key just after every key with this prefix (etcd's `GetPrefixRangeEnd`).
pub fn prefix_end(prefix: &[u8]) -> Bytes {
    let mut end = prefix.to_vec();
    while let Some(last) = end.last_mut() {
        if *last < 0xff {
            *last += 1;
            return end.into();
        }
        end.pop();
    }
    // Every byte was 0xff (or the prefix was empty): the range runs to the end of the keyspace.
    Bytes::from_static(&[0])
}

/// What to watch and from where.
#[derive(Clone, Debug, Default)]
pub struct WatchRequest {
    /// A key, or the start of a range.
    pub start: Bytes,
    /// Exclusive end; empty means "only `start`". Use [`prefix_end`] for a prefix.
    pub end: Bytes,
    /// Deliver every event with a revision >= this (0: only events after the current revision).
    pub start_revision: Revision,
    /// Send a progress notification (an empty response carrying the current revision) after
    /// this long without events. None: only when asked with [`Watcher::request_progress`].
    pub progress_interval: Option<Duration>,
}

impl WatchRequest {
    pub fn prefix(prefix: impl Into<Bytes>) -> Self {
        let start = prefix.into();
        let end = prefix_end(&start);
        WatchRequest {
            start,
            end,
            ..Default::default()
        }
    }

    pub fn key(key: impl Into<Bytes>) -> Self {
        WatchRequest {
            start: key.into(),
            ..Default::default()
        }
    }

    pub fn from_revision(mut self, revision: Revision) -> Self {
        self.start_revision = revision;
        self
    }

    pub fn progress_every(mut self, interval: Duration) -> Self {
        self.progress_interval = Some(interval);
        self
    }

    pub(crate) fn range(&self) -> RangeRequest {
        RangeRequest {
            start: self.start.clone(),
            end: self.end.clone(),
            ..Default::default()
        }
    }
}

/// The result of a successful delete.
#[derive(Clone, Debug)]
pub struct DeleteResponse {
    pub revision: Revision,
    /// The key's value just before the delete.
    pub prev: KeyValue,
}

/// An MVCC key-value store with etcd v3's semantics. Every method is atomic.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The key at the current revision (or at `revision` when non-zero), with the revision the
    /// read was served at.
    async fn get(&self, key: &[u8], revision: Revision) -> Result<(Option<KeyValue>, Revision)>;

    /// A range of keys, optionally limited, at a revision, or only counted.
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse>;

    /// Write `key` only if it does not exist. Returns the write's revision.
    async fn create(&self, key: &[u8], value: Bytes, lease: LeaseId) -> Result<Revision>;

    /// Write `key` only if its `mod_revision` is `expected`; `Conflict` otherwise, `NotFound`
    /// if it does not exist. Returns the write's revision.
    async fn update(
        &self,
        key: &[u8],
        value: Bytes,
        expected: Revision,
        lease: LeaseId,
    ) -> Result<Revision>;

    /// Delete `key`, only if its `mod_revision` is `expected` when that is Some.
    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<DeleteResponse>;

    /// Watch a key or range from a revision: every event in revision order, each with the
    /// key's previous value, with no gaps and no duplicates.
    async fn watch(&self, req: WatchRequest) -> Result<Watcher>;

    /// Drop history before `revision`: reads and watches below it fail with `Compacted`.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// The store's current revision.
    async fn current_revision(&self) -> Result<Revision>;

    /// The oldest revision still readable (everything below it was compacted).
    async fn compacted_revision(&self) -> Result<Revision>;

    /// A lease that expires after `ttl` unless kept alive; keys written with it are deleted
    /// when it expires or is revoked.
    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId>;

    /// Restart a lease's TTL.
    async fn keep_alive(&self, lease: LeaseId) -> Result<()>;

    /// End a lease now, deleting the keys attached to it.
    async fn revoke_lease(&self, lease: LeaseId) -> Result<()>;
}

/// Reject values over [`MAX_VALUE_BYTES`] before any backend sees them.
pub(crate) fn check_size(key: &[u8], value: &[u8]) -> Result<()> {
    let size = key.len() + value.len();
    if size > MAX_VALUE_BYTES {
        return Err(StoreError::TooLarge {
            size,
            limit: MAX_VALUE_BYTES,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(&prefix_end(b"/registry/pods/")[..], b"/registry/pods0");
        assert_eq!(&prefix_end(b"a\xff")[..], b"b");
        assert_eq!(&prefix_end(b"\xff\xff")[..], b"\0");
    }

    #[test]
    fn range_contains_respects_bounds() {
        let r = RangeRequest::prefix("/registry/pods/");
        assert!(r.contains(b"/registry/pods/default/a"));
        assert!(!r.contains(b"/registry/podsx"));
        assert!(!r.contains(b"/registry/pod"));
        let single = RangeRequest {
            start: Bytes::from_static(b"k"),
            ..Default::default()
        };
        assert!(single.contains(b"k"));
        assert!(!single.contains(b"k2"));
    }

    #[test]
    fn after_skips_the_last_key() {
        let r = RangeRequest::prefix("/a/").after(b"/a/x");
        assert!(!r.contains(b"/a/x"));
        assert!(r.contains(b"/a/x0"));
    }
}
