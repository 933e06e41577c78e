//! Records of the write-ahead log and the snapshot, and their framing.
//!
//! Every record is framed as `len: u32 LE | crc32(payload): u32 LE | payload`, so that a torn
//! or corrupt record is detected. Integers in payloads are little-endian.

use bytes::Bytes;

use crate::{LeaseId, Revision};

/// One durable change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    /// kind 1: `rev i64 | lease i64 | key_len u32 | key | value`
    Put {
        rev: Revision,
        key: Bytes,
        value: Bytes,
        lease: LeaseId,
    },
    /// kind 2: `rev i64 | key`
    Delete { rev: Revision, key: Bytes },
    /// kind 3: `id i64 | ttl_ms i64`
    LeaseGrant { id: LeaseId, ttl_ms: i64 },
    /// kind 4: `id i64`
    LeaseRevoke { id: LeaseId },
    /// kind 5: `rev i64`
    Compact { rev: Revision },
    /// kind 6 (snapshots only): one live key. `create_rev i64 | mod_rev i64 | version i64 |
    /// lease i64 | key_len u32 | key | value`
    Live {
        key: Bytes,
        value: Bytes,
        create_rev: Revision,
        mod_rev: Revision,
        version: i64,
        lease: LeaseId,
    },
    /// kind 7 (snapshots only): the last record, `rev i64 | compacted i64 | next_segment u64 |
    /// records u64` — a snapshot without it is incomplete.
    SnapshotEnd {
        rev: Revision,
        compacted: Revision,
        next_segment: u64,
        records: u64,
    },
}

/// Size of the frame header (length and checksum).
pub(crate) const FRAME_HEADER: usize = 8;

/// A frame could not be read at this offset.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// The data ends inside the frame: a write that was cut short.
    Truncated,
    /// The frame is whole but its checksum or contents are wrong.
    Corrupt(String),
}

impl Record {
    /// Append this record, framed, to `buf`.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        let start = buf.len();
        buf.extend_from_slice(&[0u8; FRAME_HEADER]);
        match self {
            Record::Put {
                rev,
                key,
                value,
                lease,
            } => {
                buf.push(1);
                buf.extend_from_slice(&rev.to_le_bytes());
                buf.extend_from_slice(&lease.to_le_bytes());
                buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
                buf.extend_from_slice(key);
                buf.extend_from_slice(value);
            }
            Record::Delete { rev, key } => {
                buf.push(2);
                buf.extend_from_slice(&rev.to_le_bytes());
                buf.extend_from_slice(key);
            }
            Record::LeaseGrant { id, ttl_ms } => {
                buf.push(3);
                buf.extend_from_slice(&id.to_le_bytes());
                buf.extend_from_slice(&ttl_ms.to_le_bytes());
            }
            Record::LeaseRevoke { id } => {
                buf.push(4);
                buf.extend_from_slice(&id.to_le_bytes());
            }
            Record::Compact { rev } => {
                buf.push(5);
                buf.extend_from_slice(&rev.to_le_bytes());
            }
            Record::Live {
                key,
                value,
                create_rev,
                mod_rev,
                version,
                lease,
            } => {
                buf.push(6);
                for n in [create_rev, mod_rev, version, lease] {
                    buf.extend_from_slice(&n.to_le_bytes());
                }
                buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
                buf.extend_from_slice(key);
                buf.extend_from_slice(value);
            }
            Record::SnapshotEnd {
                rev,
                compacted,
                next_segment,
                records,
            } => {
                buf.push(7);
                buf.extend_from_slice(&rev.to_le_bytes());
                buf.extend_from_slice(&compacted.to_le_bytes());
                buf.extend_from_slice(&next_segment.to_le_bytes());
                buf.extend_from_slice(&records.to_le_bytes());
            }
        }
        let payload = &buf[start + FRAME_HEADER..];
        let len = payload.len() as u32;
        let crc = crc32fast::hash(payload);
        buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
        buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    }

    /// Read one framed record from the start of `data`: the record and the bytes it took.
    /// Keys and values are slices of `data` (no copy).
    pub fn decode(data: &Bytes) -> Result<(Record, usize), FrameError> {
        if data.len() < FRAME_HEADER {
            return Err(FrameError::Truncated);
        }
        let len = u32::from_le_bytes(data[0..4].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(data[4..8].try_into().unwrap());
        let end = FRAME_HEADER + len;
        if data.len() < end {
            return Err(FrameError::Truncated);
        }
        let payload = data.slice(FRAME_HEADER..end);
        if crc32fast::hash(&payload) != crc {
            return Err(FrameError::Corrupt("checksum mismatch".into()));
        }
        let record = decode_payload(payload)
            .ok_or_else(|| FrameError::Corrupt("malformed record".into()))?;
        Ok((record, end))
    }
}

/// A little reader over a payload; every method returns None when the payload is too short.
struct Reader {
    data: Bytes,
    pos: usize,
}

impl Reader {
    fn take(&mut self, n: usize) -> Option<Bytes> {
        let end = self.pos.checked_add(n)?;
        if end > self.data.len() {
            return None;
        }
        let out = self.data.slice(self.pos..end);
        self.pos = end;
        Some(out)
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?[..].try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?[..].try_into().ok()?))
    }

    fn rest(&mut self) -> Bytes {
        let out = self.data.slice(self.pos..);
        self.pos = self.data.len();
        out
    }

    fn done(&self) -> bool {
        self.pos == self.data.len()
    }
}

fn decode_payload(data: Bytes) -> Option<Record> {
    let mut r = Reader { data, pos: 0 };
    let kind = r.take(1)?[0];
    let record = match kind {
        1 => {
            let rev = r.i64()?;
            let lease = r.i64()?;
            let klen = r.u32()? as usize;
            let key = r.take(klen)?;
            Record::Put {
                rev,
                key,
                value: r.rest(),
                lease,
            }
        }
        2 => {
            let rev = r.i64()?;
            Record::Delete { rev, key: r.rest() }
        }
        3 => Record::LeaseGrant {
            id: r.i64()?,
            ttl_ms: r.i64()?,
        },
        4 => Record::LeaseRevoke { id: r.i64()? },
        5 => Record::Compact { rev: r.i64()? },
        6 => {
            let create_rev = r.i64()?;
            let mod_rev = r.i64()?;
            let version = r.i64()?;
            let lease = r.i64()?;
            let klen = r.u32()? as usize;
            let key = r.take(klen)?;
            Record::Live {
                key,
                value: r.rest(),
                create_rev,
                mod_rev,
                version,
                lease,
            }
        }
        7 => Record::SnapshotEnd {
            rev: r.i64()?,
            compacted: r.i64()?,
            next_segment: r.i64()? as u64,
            records: r.i64()? as u64,
        },
        _ => return None,
    };
    r.done().then_some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Record> {
        vec![
            Record::Put {
                rev: 7,
                key: Bytes::from_static(b"/registry/pods/a"),
                value: Bytes::from_static(b"{}"),
                lease: 3,
            },
            Record::Delete {
                rev: 8,
                key: Bytes::from_static(b"k"),
            },
            Record::LeaseGrant {
                id: 3,
                ttl_ms: 5000,
            },
            Record::LeaseRevoke { id: 3 },
            Record::Compact { rev: 5 },
            Record::Live {
                key: Bytes::from_static(b"k"),
                value: Bytes::new(),
                create_rev: 1,
                mod_rev: 2,
                version: 2,
                lease: 0,
            },
            Record::SnapshotEnd {
                rev: 9,
                compacted: 4,
                next_segment: 2,
                records: 1,
            },
        ]
    }

    #[test]
    fn records_round_trip() {
        let mut buf = Vec::new();
        for r in all() {
            r.encode(&mut buf);
        }
        let mut data = Bytes::from(buf);
        let mut got = Vec::new();
        while !data.is_empty() {
            let (r, n) = Record::decode(&data).unwrap();
            got.push(r);
            data = data.slice(n..);
        }
        assert_eq!(got, all());
    }

    #[test]
    fn cut_records_are_truncated_and_flipped_bits_corrupt() {
        let mut buf = Vec::new();
        all()[0].encode(&mut buf);
        for cut in 0..buf.len() {
            let data = Bytes::copy_from_slice(&buf[..cut]);
            assert_eq!(Record::decode(&data).unwrap_err(), FrameError::Truncated);
        }
        let mut bad = buf.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            Record::decode(&Bytes::from(bad)),
            Err(FrameError::Corrupt(_))
        ));
    }
}
