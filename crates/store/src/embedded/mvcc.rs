//! The in-memory MVCC index: every key's versions, the revision log, leases, compaction.
//!
//! Mirrors etcd's `server/storage/mvcc` (a key index with generations plus a revision-ordered
//! history) as a pure state machine: it does no IO. The commit thread applies writes to it and
//! turns the returned [`Record`]s into the write-ahead log; only revisions up to `published`
//! (the last durable one) are visible to readers and watchers.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Bound;

use bytes::Bytes;

use super::record::Record;
use crate::{
    DeleteResponse, Event, EventKind, KeyValue, LeaseId, RangeRequest, RangeResponse, Result,
    Revision, StoreError,
};

/// One write of one key. `value == None` is a tombstone (the key was deleted at `mod_rev`).
#[derive(Clone, Debug)]
pub(crate) struct Version {
    pub mod_rev: Revision,
    pub create_rev: Revision,
    pub version: i64,
    pub lease: LeaseId,
    pub value: Option<Bytes>,
}

impl Version {
    fn to_kv(&self, key: &Bytes) -> Option<KeyValue> {
        let value = self.value.clone()?;
        Some(KeyValue {
            key: key.clone(),
            value,
            create_revision: self.create_rev,
            mod_revision: self.mod_rev,
            version: self.version,
            lease: self.lease,
        })
    }
}

/// How much history is kept before automatic compaction (see [`Mvcc::auto_compact`]).
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    /// The newest revisions that are always kept, so that watchers a little behind can catch up.
    pub min_revisions: usize,
    /// Superseded values may take at most this fraction of the live data's bytes...
    pub history_ratio: f64,
    /// ...or this many bytes, whichever is larger.
    pub history_floor_bytes: usize,
    /// Never keep more than this many revisions of history.
    pub max_revisions: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            min_revisions: 1_000,
            history_ratio: 0.5,
            history_floor_bytes: 4 << 20,
            max_revisions: 200_000,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Lease {
    pub ttl_ms: i64,
    pub keys: HashSet<Bytes>,
}

/// The whole in-memory state of an embedded store.
#[derive(Debug)]
pub(crate) struct Mvcc {
    keys: BTreeMap<Bytes, Vec<Version>>,
    /// `log[i]` is the key written at revision `log_start + i`: one key per revision.
    log: VecDeque<Bytes>,
    log_start: Revision,
    /// The last applied revision.
    current: Revision,
    /// The last durable revision: reads and watches see nothing newer.
    published: Revision,
    /// Reads below this revision fail with `Compacted`.
    compacted: Revision,
    pub leases: HashMap<LeaseId, Lease>,
    next_lease: LeaseId,
    live_bytes: usize,
    history_bytes: usize,
    retention: Retention,
}

impl Mvcc {
    pub fn new(retention: Retention) -> Self {
        Mvcc {
            keys: BTreeMap::new(),
            log: VecDeque::new(),
            log_start: 1,
            current: 0,
            published: 0,
            compacted: 0,
            leases: HashMap::new(),
            next_lease: 1,
            live_bytes: 0,
            history_bytes: 0,
            retention,
        }
    }

    /// Start from a snapshot's live keys at `revision` (no history before it).
    pub fn restore(
        retention: Retention,
        revision: Revision,
        kvs: Vec<(Bytes, Version)>,
        leases: Vec<(LeaseId, i64)>,
    ) -> Self {
        let mut m = Mvcc::new(retention);
        for (id, ttl_ms) in leases {
            m.leases.insert(
                id,
                Lease {
                    ttl_ms,
                    keys: HashSet::new(),
                },
            );
            m.next_lease = m.next_lease.max(id + 1);
        }
        for (key, v) in kvs {
            m.live_bytes += key.len() + v.value.as_ref().map_or(0, |b| b.len());
            if v.lease != 0 {
                if let Some(l) = m.leases.get_mut(&v.lease) {
                    l.keys.insert(key.clone());
                }
            }
            m.keys.insert(key, vec![v]);
        }
        m.current = revision;
        m.published = revision;
        m.compacted = revision;
        m.log_start = revision + 1;
        m
    }

    pub fn current(&self) -> Revision {
        self.current
    }

    pub fn published(&self) -> Revision {
        self.published
    }

    pub fn compacted(&self) -> Revision {
        self.compacted
    }

    /// Make every applied revision visible (called once they are durable).
    pub fn publish(&mut self) {
        self.published = self.current;
    }

    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    pub fn history_bytes(&self) -> usize {
        self.history_bytes
    }

    /// The live keys at the published revision, for a snapshot.
    pub fn live_at_published(&self) -> Vec<(Bytes, Version)> {
        let rev = self.published;
        self.keys
            .iter()
            .filter_map(|(k, vs)| {
                let v = visible(vs, rev)?;
                v.value.as_ref()?;
                Some((k.clone(), v.clone()))
            })
            .collect()
    }

    fn check_read_revision(&self, revision: Revision) -> Result<Revision> {
        if revision <= 0 {
            return Ok(self.published);
        }
        if revision > self.published {
            return Err(StoreError::FutureRevision {
                requested: revision,
                current: self.published,
            });
        }
        if revision < self.compacted {
            return Err(StoreError::Compacted {
                requested: revision,
                compacted: self.compacted,
            });
        }
        Ok(revision)
    }

    pub fn get(&self, key: &[u8], revision: Revision) -> Result<(Option<KeyValue>, Revision)> {
        let rev = self.check_read_revision(revision)?;
        let kv = self
            .keys
            .get_key_value(key)
            .and_then(|(k, vs)| visible(vs, rev)?.to_kv(k));
        Ok((kv, rev))
    }

    pub fn range(&self, req: &RangeRequest) -> Result<RangeResponse> {
        let rev = self.check_read_revision(req.revision)?;
        let mut resp = RangeResponse {
            revision: rev,
            ..Default::default()
        };
        if req.end.is_empty() {
            if let Some(kv) = self.get(&req.start, rev)?.0 {
                resp.count = 1;
                if !req.count_only {
                    resp.kvs.push(kv);
                }
            }
            return Ok(resp);
        }
        let upper = if req.end[..] == [0] {
            Bound::Unbounded
        } else {
            Bound::Excluded(&req.end[..])
        };
        if req.start[..] >= req.end[..] && req.end[..] != [0] {
            return Ok(resp);
        }
        let range = self
            .keys
            .range::<[u8], _>((Bound::Included(&req.start[..]), upper));
        for (k, vs) in range {
            let Some(v) = visible(vs, rev) else { continue };
            if v.value.is_none() {
                continue;
            }
            resp.count += 1;
            if req.count_only {
                continue;
            }
            if req.limit > 0 && resp.kvs.len() >= req.limit {
                resp.more = true;
                continue;
            }
            if let Some(kv) = v.to_kv(k) {
                resp.kvs.push(kv);
            }
        }
        Ok(resp)
    }

    /// The events with revisions in `[from, to]` whose keys fall in `range`, at most `max`.
    /// Returns the events and the next revision to read. `Compacted` if `from` is gone.
    pub fn events(
        &self,
        range: &RangeRequest,
        from: Revision,
        to: Revision,
        max: usize,
    ) -> Result<(Vec<Event>, Revision)> {
        if from < self.log_start && from <= to {
            return Err(StoreError::Compacted {
                requested: from,
                compacted: self.log_start,
            });
        }
        let mut out = Vec::new();
        let mut rev = from;
        while rev <= to && out.len() < max {
            let key = &self.log[(rev - self.log_start) as usize];
            if range.contains(key) {
                if let Some(ev) = self.event_at(key, rev) {
                    out.push(ev);
                }
            }
            rev += 1;
        }
        Ok((out, rev))
    }

    fn event_at(&self, key: &Bytes, rev: Revision) -> Option<Event> {
        let vs = self.keys.get(key)?;
        let i = vs.iter().rposition(|v| v.mod_rev == rev)?;
        let prev = i.checked_sub(1).and_then(|p| vs[p].to_kv(key));
        let v = &vs[i];
        let (kind, kv) = match v.to_kv(key) {
            Some(kv) => (EventKind::Put, kv),
            None => (
                EventKind::Delete,
                KeyValue {
                    key: key.clone(),
                    value: Bytes::new(),
                    create_revision: 0,
                    mod_revision: rev,
                    version: 0,
                    lease: 0,
                },
            ),
        };
        Some(Event { kind, kv, prev })
    }

    /// The key's latest applied version, if it exists (not a tombstone).
    fn latest(&self, key: &[u8]) -> Option<(&Bytes, &Version)> {
        let (k, vs) = self.keys.get_key_value(key)?;
        let v = vs.last()?;
        v.value.as_ref()?;
        Some((k, v))
    }

    pub fn create(
        &mut self,
        key: Bytes,
        value: Bytes,
        lease: LeaseId,
        out: &mut Vec<Record>,
    ) -> Result<Revision> {
        if self.latest(&key).is_some() {
            return Err(StoreError::AlreadyExists { key });
        }
        self.put(key, value, lease, out)
    }

    pub fn update(
        &mut self,
        key: Bytes,
        value: Bytes,
        expected: Revision,
        lease: LeaseId,
        out: &mut Vec<Record>,
    ) -> Result<Revision> {
        match self.latest(&key) {
            None => return Err(StoreError::NotFound { key }),
            Some((k, v)) if v.mod_rev != expected => {
                return Err(StoreError::Conflict {
                    current: v.to_kv(k).map(Box::new),
                    key,
                    expected,
                })
            }
            Some(_) => {}
        }
        self.put(key, value, lease, out)
    }

    pub fn delete(
        &mut self,
        key: Bytes,
        expected: Option<Revision>,
        out: &mut Vec<Record>,
    ) -> Result<DeleteResponse> {
        let prev = match self.latest(&key) {
            None => return Err(StoreError::NotFound { key }),
            Some((k, v)) => {
                let kv = v.to_kv(k).expect("latest is live");
                if let Some(expected) = expected {
                    if v.mod_rev != expected {
                        return Err(StoreError::Conflict {
                            key,
                            expected,
                            current: Some(Box::new(kv)),
                        });
                    }
                }
                kv
            }
        };
        let revision = self.apply_delete(key.clone());
        out.push(Record::Delete { rev: revision, key });
        self.auto_compact();
        Ok(DeleteResponse { revision, prev })
    }

    fn put(
        &mut self,
        key: Bytes,
        value: Bytes,
        lease: LeaseId,
        out: &mut Vec<Record>,
    ) -> Result<Revision> {
        if lease != 0 && !self.leases.contains_key(&lease) {
            return Err(StoreError::LeaseNotFound(lease));
        }
        let rev = self.apply_put(key.clone(), value.clone(), lease);
        out.push(Record::Put {
            rev,
            key,
            value,
            lease,
        });
        self.auto_compact();
        Ok(rev)
    }

    /// Write a put at the next revision, unconditionally (also used by WAL replay).
    pub fn apply_put(&mut self, key: Bytes, value: Bytes, lease: LeaseId) -> Revision {
        self.current += 1;
        let rev = self.current;
        let added = key.len() + value.len();
        let vs = self.keys.entry(key.clone()).or_default();
        let (create_rev, version) = match vs.last() {
            Some(last) if last.value.is_some() => {
                let old = last.value.as_ref().map_or(0, |b| b.len());
                self.live_bytes -= key.len() + old;
                self.history_bytes += old;
                let old_lease = last.lease;
                let cv = (last.create_rev, last.version + 1);
                if old_lease != 0 && old_lease != lease {
                    if let Some(l) = self.leases.get_mut(&old_lease) {
                        l.keys.remove(&key);
                    }
                }
                cv
            }
            _ => (rev, 1),
        };
        grow_exactly_while_small(vs);
        vs.push(Version {
            mod_rev: rev,
            create_rev,
            version,
            lease,
            value: Some(value),
        });
        self.live_bytes += added;
        if lease != 0 {
            if let Some(l) = self.leases.get_mut(&lease) {
                l.keys.insert(key.clone());
            }
        }
        self.log.push_back(key);
        rev
    }

    /// Write a tombstone for a live key at the next revision (also used by WAL replay).
    pub fn apply_delete(&mut self, key: Bytes) -> Revision {
        self.current += 1;
        let rev = self.current;
        let vs = self.keys.entry(key.clone()).or_default();
        if let Some(last) = vs.last() {
            if let Some(old) = &last.value {
                self.live_bytes -= key.len() + old.len();
                self.history_bytes += old.len();
                if last.lease != 0 {
                    if let Some(l) = self.leases.get_mut(&last.lease) {
                        l.keys.remove(&key);
                    }
                }
            }
        }
        grow_exactly_while_small(vs);
        vs.push(Version {
            mod_rev: rev,
            create_rev: 0,
            version: 0,
            lease: 0,
            value: None,
        });
        self.log.push_back(key);
        rev
    }

    pub fn grant_lease(&mut self, ttl_ms: i64, out: &mut Vec<Record>) -> LeaseId {
        let id = self.next_lease;
        self.apply_lease_grant(id, ttl_ms);
        out.push(Record::LeaseGrant { id, ttl_ms });
        id
    }

    pub fn apply_lease_grant(&mut self, id: LeaseId, ttl_ms: i64) {
        self.next_lease = self.next_lease.max(id + 1);
        self.leases.insert(
            id,
            Lease {
                ttl_ms,
                keys: HashSet::new(),
            },
        );
    }

    /// End a lease, deleting its keys (each at its own revision).
    pub fn revoke_lease(&mut self, id: LeaseId, out: &mut Vec<Record>) -> Result<()> {
        let Some(lease) = self.leases.remove(&id) else {
            return Err(StoreError::LeaseNotFound(id));
        };
        let mut keys: Vec<Bytes> = lease.keys.into_iter().collect();
        keys.sort();
        out.push(Record::LeaseRevoke { id });
        for key in keys {
            if self.latest(&key).is_some() {
                let rev = self.apply_delete(key.clone());
                out.push(Record::Delete { rev, key });
            }
        }
        self.auto_compact();
        Ok(())
    }

    /// Remove a lease without touching keys (WAL replay: the deletes follow as records).
    pub fn apply_lease_revoke(&mut self, id: LeaseId) {
        self.leases.remove(&id);
    }

    /// Compact history below `revision`, as an explicit request.
    pub fn compact(&mut self, revision: Revision, out: &mut Vec<Record>) -> Result<()> {
        if revision > self.current {
            return Err(StoreError::FutureRevision {
                requested: revision,
                current: self.current,
            });
        }
        if revision <= self.compacted {
            return Err(StoreError::Compacted {
                requested: revision,
                compacted: self.compacted,
            });
        }
        self.apply_compact(revision);
        out.push(Record::Compact { rev: revision });
        Ok(())
    }

    /// Drop every superseded version below `revision` and the log before it.
    pub fn apply_compact(&mut self, revision: Revision) {
        if revision <= self.compacted {
            return;
        }
        while self.log_start < revision {
            let Some(key) = self.log.pop_front() else {
                break;
            };
            self.log_start += 1;
            self.compact_key(&key, revision);
        }
        self.log_start = self.log_start.max(revision);
        self.compacted = revision;
    }

    /// Keep the key's versions at or after `revision`, plus the one visible at `revision`
    /// unless that is a tombstone.
    fn compact_key(&mut self, key: &Bytes, revision: Revision) {
        let Some(vs) = self.keys.get_mut(key) else {
            return;
        };
        let keep_from = vs.partition_point(|v| v.mod_rev <= revision);
        // `keep_from - 1` is the version visible at `revision`.
        let mut drop = keep_from.saturating_sub(1);
        if keep_from > 0 && vs[keep_from - 1].value.is_none() {
            drop = keep_from;
        }
        if drop == 0 {
            return;
        }
        // Every dropped version was superseded, so its value was counted as history.
        for v in &vs[..drop] {
            self.history_bytes -= v.value.as_ref().map_or(0, |b| b.len());
        }
        vs.drain(..drop);
        if vs.is_empty() {
            self.keys.remove(key);
        } else if vs.capacity() > 2 * vs.len() {
            vs.shrink_to_fit();
        }
    }

    /// Retention policy: keep the newest `min_revisions`; beyond those, compact the oldest
    /// history while superseded values take more than `history_ratio` of the live bytes (or the
    /// floor), or the log is longer than `max_revisions`.
    pub fn auto_compact(&mut self) {
        let r = self.retention;
        let budget =
            ((self.live_bytes as f64 * r.history_ratio) as usize).max(r.history_floor_bytes);
        let over = |m: &Mvcc| {
            m.log.len() > r.min_revisions
                && (m.history_bytes > budget || m.log.len() > r.max_revisions)
        };
        if !over(self) {
            return;
        }
        // Compact in steps of a quarter of the log so the cost is amortized over many writes.
        while over(self) {
            let step = (self.log.len() / 4).max(1);
            let keep = self.log.len() - step;
            let keep = keep.max(r.min_revisions);
            let target = self.current + 1 - keep as Revision;
            // Never compact what is not yet durable: readers must still see published state.
            let target = target.min(self.published + 1);
            if target <= self.compacted {
                break;
            }
            self.apply_compact(target);
        }
    }
}

/// Most keys hold one or two versions; a `Vec`'s first growth would make room for four (256
/// bytes a key, most of the index of a store of pods). Grow by one up to four, then as usual.
fn grow_exactly_while_small(vs: &mut Vec<Version>) {
    if vs.len() == vs.capacity() && vs.len() < 4 {
        vs.reserve_exact(1);
    }
}

/// The version of a key visible at `rev` (possibly a tombstone).
fn visible(vs: &[Version], rev: Revision) -> Option<&Version> {
    let i = vs.partition_point(|v| v.mod_rev <= rev);
    i.checked_sub(1).map(|i| &vs[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn store() -> Mvcc {
        Mvcc::new(Retention::default())
    }

    fn put(m: &mut Mvcc, k: &str, v: &str) -> Revision {
        let mut out = vec![];
        let rev = match m.latest(k.as_bytes()).map(|(_, v)| v.mod_rev) {
            Some(cur) => m.update(b(k), b(v), cur, 0, &mut out).unwrap(),
            None => m.create(b(k), b(v), 0, &mut out).unwrap(),
        };
        m.publish();
        rev
    }

    #[test]
    fn unpublished_writes_are_invisible() {
        let mut m = store();
        let mut out = vec![];
        m.create(b("a"), b("1"), 0, &mut out).unwrap();
        assert_eq!(m.get(b"a", 0).unwrap().0, None);
        assert!(matches!(
            m.get(b"a", 1),
            Err(StoreError::FutureRevision { .. })
        ));
        m.publish();
        assert_eq!(m.get(b"a", 0).unwrap().0.unwrap().value, b("1"));
    }

    #[test]
    fn versions_count_within_a_generation() {
        let mut m = store();
        put(&mut m, "a", "1");
        put(&mut m, "a", "2");
        let kv = m.get(b"a", 0).unwrap().0.unwrap();
        assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (1, 2, 2));
        let mut out = vec![];
        m.delete(b("a"), None, &mut out).unwrap();
        put(&mut m, "a", "3");
        let kv = m.get(b"a", 0).unwrap().0.unwrap();
        assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (4, 4, 1));
    }

    #[test]
    fn compaction_keeps_the_visible_version_and_drops_tombstones() {
        let mut m = store();
        put(&mut m, "a", "1"); // 1
        put(&mut m, "a", "2"); // 2
        put(&mut m, "b", "1"); // 3
        let mut out = vec![];
        m.delete(b("b"), None, &mut out).unwrap(); // 4
        put(&mut m, "c", "1"); // 5
        m.compact(5, &mut out).unwrap();
        assert_eq!(m.get(b"a", 5).unwrap().0.unwrap().value, b("2"));
        assert!(!m.keys.contains_key(&b"b"[..]));
        assert!(matches!(m.get(b"a", 4), Err(StoreError::Compacted { .. })));
        assert_eq!(m.history_bytes, 0);
        let (evs, _) = m.events(&RangeRequest::prefix(""), 5, 5, 10).unwrap();
        assert_eq!(evs.len(), 1);
    }

    #[test]
    fn keys_hold_room_for_the_versions_they_have() {
        let mut m = store();
        put(&mut m, "a", "1");
        assert_eq!(m.keys[&b"a"[..]].capacity(), 1);
        put(&mut m, "a", "2");
        put(&mut m, "a", "3");
        assert_eq!(m.keys[&b"a"[..]].capacity(), 3);
        for v in 4..=9 {
            put(&mut m, "a", &v.to_string());
        }
        assert!(m.keys[&b"a"[..]].capacity() >= 9);
        let mut out = vec![];
        m.compact(m.current(), &mut out).unwrap();
        let vs = &m.keys[&b"a"[..]];
        assert_eq!((vs.len(), vs.capacity()), (1, 1));
        assert_eq!(m.get(b"a", 0).unwrap().0.unwrap().value, b("9"));
    }

    #[test]
    fn history_stays_within_its_budget() {
        let mut m = Mvcc::new(Retention {
            min_revisions: 10,
            history_ratio: 0.5,
            history_floor_bytes: 0,
            max_revisions: 1000,
        });
        let big = "x".repeat(1000);
        for i in 0..20 {
            put(&mut m, &format!("k{i}"), &big);
        }
        for _ in 0..50 {
            for i in 0..20 {
                put(&mut m, &format!("k{i}"), &big);
            }
        }
        assert!(
            m.history_bytes <= m.live_bytes / 2 + 1000,
            "history {} live {}",
            m.history_bytes,
            m.live_bytes
        );
        assert!(m.log.len() >= 10);
    }
}
