//! Shared copies of values that many cached objects hold alike (a pod template's spec, a
//! ReplicaSet's owner reference, a node's name): one copy each, however many objects use it.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

/// Once this many values are held, those no one uses any more are dropped (then again each
/// time the table has doubled since).
const SWEEP_AT: usize = 256;

/// Shared values, found by the hash of their JSON form (k8s-openapi types are not `Hash`).
pub(crate) struct Interner<T> {
    state: RandomState,
    inner: Mutex<Table<T>>,
}

struct Table<T> {
    by_hash: HashMap<u64, Vec<Arc<T>>>,
    len: usize,
    sweep_at: usize,
}

impl<T: Serialize + PartialEq> Interner<T> {
    pub(crate) fn new() -> Interner<T> {
        Interner {
            state: RandomState::new(),
            inner: Mutex::new(Table {
                by_hash: HashMap::new(),
                len: 0,
                sweep_at: SWEEP_AT,
            }),
        }
    }

    /// The shared copy of `v`.
    pub(crate) fn intern(&self, v: T) -> Arc<T> {
        let mut h = self.state.build_hasher();
        // Writing into a hasher cannot fail; a value that fails to serialize hashes short
        // (and is then told apart by comparison).
        let _ = serde_json::to_writer(HashWriter(&mut h), &v);
        let h = h.finish();
        let mut t = self.inner.lock();
        if let Some(found) = t
            .by_hash
            .get(&h)
            .and_then(|vs| vs.iter().find(|a| ***a == v))
        {
            return found.clone();
        }
        if t.len >= t.sweep_at {
            // Only the table holds a value with one reference, and only under this lock can
            // another be made.
            t.by_hash.retain(|_, vs| {
                vs.retain(|a| Arc::strong_count(a) > 1);
                !vs.is_empty()
            });
            t.len = t.by_hash.values().map(Vec::len).sum();
            t.sweep_at = (t.len * 2).max(SWEEP_AT);
        }
        let a = Arc::new(v);
        t.by_hash.entry(h).or_default().push(a.clone());
        t.len += 1;
        a
    }
}

/// Shared strings.
pub(crate) struct StrInterner {
    inner: Mutex<(HashSet<Arc<str>>, usize)>,
}

impl StrInterner {
    pub(crate) fn new() -> StrInterner {
        StrInterner {
            inner: Mutex::new((HashSet::new(), SWEEP_AT)),
        }
    }

    pub(crate) fn intern(&self, s: &str) -> Arc<str> {
        let mut t = self.inner.lock();
        if let Some(found) = t.0.get(s) {
            return found.clone();
        }
        if t.0.len() >= t.1 {
            t.0.retain(|s| Arc::strong_count(s) > 1);
            t.1 = (t.0.len() * 2).max(SWEEP_AT);
        }
        let a: Arc<str> = s.into();
        t.0.insert(a.clone());
        a
    }
}

/// Feeds serialized bytes to a hasher.
struct HashWriter<'a, H>(&'a mut H);

impl<H: Hasher> std::io::Write for HashWriter<'_, H> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        buf.hash(self.0);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A uid or resourceVersion, kept as a number when it is one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Token {
    Number(u64),
    /// A UUID in its canonical form (lowercase, hyphenated).
    Uuid([u8; 16]),
    Text(Box<str>),
}

impl Token {
    pub(crate) fn new(s: &str) -> Token {
        if let Ok(n) = s.parse::<u64>() {
            if n.to_string() == s {
                return Token::Number(n);
            }
        }
        if let Some(u) = parse_uuid(s) {
            return Token::Uuid(u);
        }
        Token::Text(s.into())
    }
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Token::Number(n) => write!(f, "{n}"),
            Token::Uuid(u) => {
                for (i, b) in u.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
            Token::Text(s) => f.write_str(s),
        }
    }
}

/// The bytes of a lowercase hyphenated UUID (anything else: None, so it is kept as text).
fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
        return None;
    }
    let hex: Vec<u8> = b.iter().copied().filter(|&c| c != b'-').collect();
    if hex.len() != 32 || !hex.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_copy_and_unused_ones_go() {
        let i = Interner::new();
        let a = i.intern(vec!["x".to_string()]);
        let b = i.intern(vec!["x".to_string()]);
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &i.intern(vec!["y".to_string()])));
        for n in 0..SWEEP_AT * 4 {
            i.intern(vec![n.to_string()]);
        }
        // Sweeps left the value still in use, and fewer than all the unused ones.
        assert!(i.inner.lock().len < SWEEP_AT * 3);
        assert!(Arc::ptr_eq(&a, &i.intern(vec!["x".to_string()])));
        let s = StrInterner::new();
        assert!(Arc::ptr_eq(&s.intern("n1"), &s.intern("n1")));
    }

    #[test]
    fn tokens_round_trip() {
        for s in [
            "0",
            "42",
            "007",
            "+1",
            "18446744073709551616",
            "6f1c2e9a-0d6b-4f55-8a8e-1b2c3d4e5f60",
            "6F1C2E9A-0D6B-4F55-8A8E-1B2C3D4E5F60",
            "6f1c2e9a-0d6b-4f55-8a8e-1b2c3d4e5f6",
            "",
        ] {
            assert_eq!(Token::new(s).to_string(), s);
        }
        assert!(matches!(Token::new("42"), Token::Number(42)));
        assert!(matches!(
            Token::new("6f1c2e9a-0d6b-4f55-8a8e-1b2c3d4e5f60"),
            Token::Uuid(_)
        ));
    }
}
