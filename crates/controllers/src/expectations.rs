//! Controller expectations (Kubernetes' ControlleeExpectations): after a controller asks for N
//! creations or deletions it does not act on its owner again until its informer has observed
//! them (or five minutes pass), so it never creates twice what a stale cache does not yet show.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

const TTL: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone, Copy)]
struct Expect {
    add: i64,
    del: i64,
    at: Instant,
}

/// Pending creations and deletions per controller key.
#[derive(Default)]
pub struct Expectations {
    m: Mutex<HashMap<String, Expect>>,
}

impl Expectations {
    pub fn new() -> Expectations {
        Expectations::default()
    }

    /// Expect `adds` creations and `dels` deletions for `key` (replacing what was expected).
    pub fn expect(&self, key: &str, adds: i64, dels: i64) {
        self.m.lock().insert(
            key.to_string(),
            Expect {
                add: adds,
                del: dels,
                at: Instant::now(),
            },
        );
    }

    pub fn expect_creations(&self, key: &str, n: i64) {
        self.expect(key, n, 0)
    }

    pub fn expect_deletions(&self, key: &str, n: i64) {
        self.expect(key, 0, n)
    }

    /// One creation for `key` was observed (or will never happen: the create failed).
    pub fn creation_observed(&self, key: &str) {
        if let Some(e) = self.m.lock().get_mut(key) {
            e.add -= 1;
        }
    }

    /// One deletion for `key` was observed (or will never happen).
    pub fn deletion_observed(&self, key: &str) {
        if let Some(e) = self.m.lock().get_mut(key) {
            e.del -= 1;
        }
    }

    /// Whether `key` may be synced: nothing pending, everything observed, or expired.
    pub fn satisfied(&self, key: &str) -> bool {
        match self.m.lock().get(key) {
            None => true,
            Some(e) => (e.add <= 0 && e.del <= 0) || e.at.elapsed() > TTL,
        }
    }

    /// Forget `key` (its owner is gone).
    pub fn delete(&self, key: &str) {
        self.m.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn satisfied_once_every_expected_change_is_observed() {
        let e = Expectations::new();
        assert!(e.satisfied("ns/a"));
        e.expect_creations("ns/a", 2);
        assert!(!e.satisfied("ns/a"));
        e.creation_observed("ns/a");
        assert!(!e.satisfied("ns/a"));
        e.creation_observed("ns/a");
        assert!(e.satisfied("ns/a"));
        e.expect_deletions("ns/a", 1);
        assert!(!e.satisfied("ns/a"));
        e.delete("ns/a");
        assert!(e.satisfied("ns/a"));
    }
}
