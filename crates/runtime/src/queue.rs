//! A rate-limited work queue of keys, as client-go's workqueue: a key queued many times is
//! processed once; a key is never processed by two workers at once (a key added while being
//! processed is queued again when that worker is done); failed keys come back after a per-key
//! exponential back-off (5 ms doubling to 1000 s), so a controller never hot-loops.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

const BASE_DELAY: Duration = Duration::from_millis(5);
const MAX_DELAY: Duration = Duration::from_secs(1000);

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    /// Keys waiting to be processed (in `queue`, or to be re-queued when processing ends).
    dirty: HashSet<String>,
    processing: HashSet<String>,
    failures: HashMap<String, u32>,
}

/// A work queue of object keys.
pub struct Queue {
    name: String,
    state: Mutex<State>,
    notify: Notify,
}

impl Queue {
    pub fn new(name: impl Into<String>) -> Arc<Queue> {
        Arc::new(Queue {
            name: name.into(),
            state: Mutex::new(State::default()),
            notify: Notify::new(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Queue `key` (nothing happens if it is already waiting).
    pub fn add(&self, key: impl Into<String>) {
        let key = key.into();
        let mut s = self.state.lock();
        if !s.dirty.insert(key.clone()) {
            return;
        }
        if s.processing.contains(&key) {
            return;
        }
        s.queue.push_back(key);
        drop(s);
        self.notify.notify_one();
    }

    /// Queue `key` after `delay`.
    pub fn add_after(self: &Arc<Self>, key: impl Into<String>, delay: Duration) {
        let key = key.into();
        if delay.is_zero() {
            return self.add(key);
        }
        let q = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            q.add(key);
        });
    }

    /// Queue `key` again after its back-off, which doubles with each failure.
    pub fn add_rate_limited(self: &Arc<Self>, key: impl Into<String>) {
        let key = key.into();
        let n = {
            let mut s = self.state.lock();
            let n = s.failures.entry(key.clone()).or_insert(0);
            *n += 1;
            *n
        };
        self.add_after(key, backoff(n));
    }

    /// How many times `key` has failed in a row.
    pub fn failures(&self, key: &str) -> u32 {
        self.state.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Forget `key`'s failures (it succeeded).
    pub fn forget(&self, key: &str) {
        self.state.lock().failures.remove(key);
    }

    /// Wait for the next key; the caller must call [`Queue::done`] with it.
    pub async fn get(&self) -> String {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.state.lock();
                if let Some(key) = s.queue.pop_front() {
                    s.dirty.remove(&key);
                    s.processing.insert(key.clone());
                    if !s.queue.is_empty() {
                        self.notify.notify_one();
                    }
                    return key;
                }
            }
            notified.await;
        }
    }

    /// Processing of `key` ended; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &str) {
        let mut s = self.state.lock();
        s.processing.remove(key);
        if s.dirty.contains(key) {
            s.queue.push_back(key.to_string());
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Keys waiting (not counting those being processed).
    pub fn len(&self) -> usize {
        self.state.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Run `workers` tasks that take keys and call `sync`; an error re-queues the key with
    /// back-off (and is logged), success forgets its failures.
    pub fn run_workers<F, Fut>(self: &Arc<Self>, workers: usize, sync: F)
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let sync = Arc::new(sync);
        for _ in 0..workers.max(1) {
            let q = self.clone();
            let sync = sync.clone();
            tokio::spawn(async move {
                loop {
                    let key = q.get().await;
                    match sync(key.clone()).await {
                        Ok(()) => q.forget(&key),
                        Err(e) => {
                            tracing::info!(controller = %q.name, key = %key, error = %format!("{e:#}"), "sync failed; retrying with back-off");
                            q.add_rate_limited(key.clone());
                        }
                    }
                    q.done(&key);
                }
            });
        }
    }
}

/// The delay before the `n`th retry (n ≥ 1).
fn backoff(n: u32) -> Duration {
    BASE_DELAY
        .saturating_mul(1u32 << n.saturating_sub(1).min(30))
        .min(MAX_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_queued_twice_is_processed_once() {
        let q = Queue::new("t");
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await, "a");
        assert_eq!(q.get().await, "b");
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn a_key_added_while_processing_comes_back_after_done() {
        let q = Queue::new("t");
        q.add("a");
        let k = q.get().await;
        q.add("a");
        assert!(
            q.is_empty(),
            "not handed to a second worker while processing"
        );
        q.done(&k);
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, "a");
    }

    #[tokio::test]
    async fn failures_back_off_exponentially_and_forget_resets() {
        assert_eq!(backoff(1), Duration::from_millis(5));
        assert_eq!(backoff(2), Duration::from_millis(10));
        assert_eq!(backoff(11), Duration::from_millis(5120));
        assert_eq!(backoff(40), MAX_DELAY);
        let q = Queue::new("t");
        for _ in 0..4 {
            q.add_rate_limited("a");
        }
        assert_eq!(q.failures("a"), 4);
        q.forget("a");
        assert_eq!(q.failures("a"), 0);
    }
}
