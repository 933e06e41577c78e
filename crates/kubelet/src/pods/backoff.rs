//! Per-key exponential back-off (client-go's flowcontrol.Backoff), used for restarting
//! crashed containers (CrashLoopBackOff) and for pulling images (ImagePullBackOff): the first
//! delay is 10 s, each further failure doubles it up to 5 min, and a key that stayed quiet
//! for twice the maximum starts over.

use std::collections::HashMap;
use std::time::Duration;

/// Times are nanoseconds since the epoch (what CRI reports), so that a container's
/// `finishedAt` can be the start of its back-off.
pub type Nanos = i64;

#[derive(Clone, Copy, Debug)]
struct Entry {
    backoff: Duration,
    last_update: Nanos,
}

#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

fn since(now: Nanos, then: Nanos) -> Duration {
    Duration::from_nanos(now.saturating_sub(then).max(0) as u64)
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    /// Kubernetes' container and image back-off: 10 s doubling to 5 min.
    pub fn standard() -> Backoff {
        Backoff::new(Duration::from_secs(10), Duration::from_secs(300))
    }

    fn expired(&self, event: Nanos, last_update: Nanos) -> bool {
        since(event, last_update) > self.max * 2
    }

    /// The current delay of `key` (zero when it has none).
    pub fn get(&self, key: &str) -> Duration {
        self.entries.get(key).map(|e| e.backoff).unwrap_or_default()
    }

    /// Whether `key` is still backing off from an event at `event`.
    pub fn in_backoff_since(&self, key: &str, event: Nanos, now: Nanos) -> bool {
        let Some(e) = self.entries.get(key) else {
            return false;
        };
        if self.expired(event, e.last_update) {
            return false;
        }
        since(now, event) < e.backoff
    }

    /// Whether `key` is still backing off from its last update.
    pub fn in_backoff_since_update(&self, key: &str, now: Nanos) -> bool {
        let Some(e) = self.entries.get(key) else {
            return false;
        };
        if self.expired(now, e.last_update) {
            return false;
        }
        since(now, e.last_update) < e.backoff
    }

    /// Record one more failure of `key` at `event`: start at the initial delay, or double.
    pub fn next(&mut self, key: &str, event: Nanos, now: Nanos) {
        let backoff = match self.entries.get(key) {
            Some(e) if !self.expired(event, e.last_update) => (e.backoff * 2).min(self.max),
            _ => self.initial,
        };
        self.entries.insert(
            key.to_string(),
            Entry {
                backoff,
                last_update: now,
            },
        );
    }

    /// When `key`'s back-off from `event` ends (None when it is not backing off).
    pub fn remaining(&self, key: &str, event: Nanos, now: Nanos) -> Option<Duration> {
        if !self.in_backoff_since(key, event, now) {
            return None;
        }
        let e = self.entries.get(key)?;
        e.backoff.checked_sub(since(now, event))
    }

    /// When `key`'s back-off from its last update ends (None when it is not backing off).
    pub fn remaining_since_update(&self, key: &str, now: Nanos) -> Option<Duration> {
        if !self.in_backoff_since_update(key, now) {
            return None;
        }
        let e = self.entries.get(key)?;
        e.backoff.checked_sub(since(now, e.last_update))
    }

    /// Forget `key`.
    pub fn reset(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Forget the keys whose prefix is `prefix` (a pod's entries when it is gone).
    pub fn forget_prefix(&mut self, prefix: &str) {
        self.entries.retain(|k, _| !k.starts_with(prefix));
    }

    /// Forget the keys that contain `part` (a pod's crash entries when it is gone).
    pub fn forget_containing(&mut self, part: &str) {
        self.entries.retain(|k, _| !k.contains(part));
    }

    /// Drop entries quiet for longer than twice the maximum.
    pub fn gc(&mut self, now: Nanos) {
        let max2 = self.max * 2;
        self.entries
            .retain(|_, e| since(now, e.last_update) <= max2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn doubles_to_the_maximum_and_resets_after_quiet() {
        let mut b = Backoff::standard();
        let key = "k";
        assert!(!b.in_backoff_since(key, 0, 0));
        // First failure: no back-off yet, the delay starts at 10 s.
        b.next(key, 0, 0);
        assert_eq!(b.get(key), Duration::from_secs(10));
        assert!(b.in_backoff_since(key, 0, 5 * S));
        assert_eq!(b.remaining(key, 0, 4 * S), Some(Duration::from_secs(6)));
        assert!(!b.in_backoff_since(key, 0, 10 * S));
        let mut t = 10 * S;
        let mut seen = vec![];
        for _ in 0..7 {
            b.next(key, t, t);
            seen.push(b.get(key).as_secs());
            t += S;
        }
        assert_eq!(seen, vec![20, 40, 80, 160, 300, 300, 300]);
        // Quiet for more than 10 minutes: back to 10 s.
        let later = t + 601 * S;
        assert!(!b.in_backoff_since(key, later, later));
        b.next(key, later, later);
        assert_eq!(b.get(key), Duration::from_secs(10));
    }

    #[test]
    fn since_update_and_gc() {
        let mut b = Backoff::standard();
        b.next("img", 0, 0);
        assert!(b.in_backoff_since_update("img", 9 * S));
        assert!(!b.in_backoff_since_update("img", 10 * S));
        b.gc(601 * S);
        assert_eq!(b.get("img"), Duration::ZERO);
        b.next("uid1_a", 0, 0);
        b.next("uid2_a", 0, 0);
        b.forget_prefix("uid1_");
        assert_eq!(b.get("uid1_a"), Duration::ZERO);
        assert_eq!(b.get("uid2_a"), Duration::from_secs(10));
    }
}
