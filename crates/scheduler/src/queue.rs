//! The scheduling queue: pods waiting for a decision, in three places as Kubernetes keeps them
//! (`pkg/scheduler/backend/queue/scheduling_queue.go`):
//! - active: ready to be scheduled, highest priority first, then earliest arrival (PrioritySort);
//! - backoff: failed recently, waiting `initial × 2^(attempts-1)` (capped) before becoming active;
//! - unschedulable: rejected by some plugins; moved back only by a cluster event one of those
//!   plugins registered (queueing hints), or after five minutes.
//!
//! Pure state: the caller passes the time in, so tests are deterministic.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::framework::{Changed, ClusterEvent};
use crate::types::PodInfo;

/// How long a pod may stay unschedulable before it is retried anyway.
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Active,
    Backoff,
    Unschedulable,
    /// PreEnqueue (scheduling gates) refused it; waits for an update.
    Gated,
    /// Popped and being scheduled.
    InFlight,
}

/// A pod in the queue with its scheduling history.
#[derive(Debug, Clone)]
pub struct QueuedPod {
    pub info: Arc<PodInfo>,
    /// Arrival order (PrioritySort's timestamp).
    pub seq: u64,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When the first attempt began.
    pub initial_attempt: Option<Instant>,
    /// Plugins that rejected it in its last attempt.
    pub unschedulable_plugins: BTreeSet<&'static str>,
    place: Place,
    /// Bumped whenever the pod moves, so stale heap entries are skipped.
    version: u64,
    backoff_until: Instant,
    unschedulable_since: Instant,
    /// `moves` when the pod was popped (to detect events during its cycle).
    popped_at_move: u64,
}

#[derive(PartialEq, Eq)]
struct ActiveKey {
    priority: i32,
    seq: u64,
    version: u64,
    key: Arc<str>,
}

impl Ord for ActiveKey {
    fn cmp(&self, o: &Self) -> Ordering {
        self.priority
            .cmp(&o.priority)
            .then_with(|| o.seq.cmp(&self.seq))
    }
}

impl PartialOrd for ActiveKey {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// Decides whether a cluster event could help a pod rejected by the given plugins.
pub trait Hints {
    fn worth_retrying(
        &self,
        pod: &PodInfo,
        plugins: &BTreeSet<&'static str>,
        event: ClusterEvent,
        changed: Changed<'_>,
    ) -> bool;
}

pub struct SchedulingQueue {
    pods: HashMap<Arc<str>, QueuedPod>,
    active: BinaryHeap<ActiveKey>,
    backoff: BinaryHeap<Reverse<(Instant, u64, Arc<str>)>>,
    next_seq: u64,
    /// Count of cluster events that moved pods; see `QueuedPod::popped_at_move`.
    moves: u64,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl SchedulingQueue {
    pub fn new(initial_backoff: Duration, max_backoff: Duration) -> SchedulingQueue {
        SchedulingQueue {
            pods: HashMap::new(),
            active: BinaryHeap::new(),
            backoff: BinaryHeap::new(),
            next_seq: 0,
            moves: 0,
            initial_backoff,
            max_backoff,
        }
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.pods.contains_key(key)
    }

    /// Counts of pods (active, backoff, unschedulable, gated).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let mut c = (0, 0, 0, 0);
        for p in self.pods.values() {
            match p.place {
                Place::Active | Place::InFlight => c.0 += 1,
                Place::Backoff => c.1 += 1,
                Place::Unschedulable => c.2 += 1,
                Place::Gated => c.3 += 1,
            }
        }
        c
    }

    /// A new pending pod, or an update of one already queued. `gated` is the PreEnqueue verdict.
    pub fn add(&mut self, info: Arc<PodInfo>, gated: bool, now: Instant) {
        let key: Arc<str> = Arc::from(info.key.as_str());
        if let Some(p) = self.pods.get_mut(&key) {
            let spec_changed =
                p.info.pod().spec != info.pod().spec || p.info.labels() != info.labels();
            p.info = info;
            match p.place {
                Place::InFlight | Place::Active => {}
                Place::Backoff if !gated => {}
                Place::Unschedulable | Place::Gated | Place::Backoff => {
                    if gated {
                        p.place = Place::Gated;
                        p.version += 1;
                    } else if spec_changed || p.place == Place::Gated {
                        Self::requeue(p, &mut self.active, &mut self.backoff, now);
                    }
                }
            }
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut p = QueuedPod {
            info,
            seq,
            attempts: 0,
            initial_attempt: None,
            unschedulable_plugins: BTreeSet::new(),
            place: Place::Gated,
            version: 0,
            backoff_until: now,
            unschedulable_since: now,
            popped_at_move: 0,
        };
        if !gated {
            p.place = Place::Active;
            self.active.push(ActiveKey {
                priority: p.info.priority,
                seq,
                version: 0,
                key: key.clone(),
            });
        }
        self.pods.insert(key, p);
    }

    /// The pod left the queue's concern (deleted, bound by someone else, no longer ours).
    pub fn delete(&mut self, key: &str) {
        self.pods.remove(key);
    }

    /// Take the next pod to schedule, moving expired backoffs first.
    pub fn pop(&mut self, now: Instant) -> Option<QueuedPod> {
        self.flush_backoff(now);
        while let Some(top) = self.active.pop() {
            let Some(p) = self.pods.get_mut(&top.key) else {
                continue;
            };
            if p.place != Place::Active || p.version != top.version {
                continue;
            }
            p.place = Place::InFlight;
            p.attempts += 1;
            p.initial_attempt.get_or_insert(now);
            p.popped_at_move = self.moves;
            return Some(p.clone());
        }
        None
    }

    /// When the earliest backoff ends (for the caller's timer).
    pub fn next_backoff(&mut self) -> Option<Instant> {
        while let Some(Reverse((t, v, key))) = self.backoff.peek() {
            match self.pods.get(key) {
                Some(p) if p.place == Place::Backoff && p.version == *v => return Some(*t),
                _ => {
                    self.backoff.pop();
                }
            }
        }
        None
    }

    fn flush_backoff(&mut self, now: Instant) {
        while let Some(Reverse((t, v, key))) = self.backoff.peek().cloned() {
            if t > now {
                break;
            }
            self.backoff.pop();
            if let Some(p) = self.pods.get_mut(&key) {
                if p.place == Place::Backoff && p.version == v {
                    Self::to_active(p, &mut self.active, key);
                }
            }
        }
    }

    fn to_active(p: &mut QueuedPod, active: &mut BinaryHeap<ActiveKey>, key: Arc<str>) {
        p.place = Place::Active;
        p.version += 1;
        active.push(ActiveKey {
            priority: p.info.priority,
            seq: p.seq,
            version: p.version,
            key,
        });
    }

    fn backoff_duration(attempts: u32, initial: Duration, max: Duration) -> Duration {
        let mut d = initial;
        for _ in 1..attempts {
            d = d.saturating_mul(2);
            if d > max {
                return max;
            }
        }
        d.min(max)
    }

    /// Back to active, or to backoff if its backoff has not yet ended.
    fn requeue(
        p: &mut QueuedPod,
        active: &mut BinaryHeap<ActiveKey>,
        backoff: &mut BinaryHeap<Reverse<(Instant, u64, Arc<str>)>>,
        now: Instant,
    ) {
        let key: Arc<str> = Arc::from(p.info.key.as_str());
        let until = p.initial_attempt.map(|_| p.backoff_until).unwrap_or(now);
        if until > now {
            p.place = Place::Backoff;
            p.version += 1;
            backoff.push(Reverse((until, p.version, key)));
        } else {
            Self::to_active(p, active, key);
        }
    }

    /// The pod's cycle failed. `plugins` rejected it (empty for an error); `error` means an
    /// internal error (always backoff). A pod rejected while a relevant event happened during its
    /// cycle goes to backoff rather than waiting for another event.
    pub fn failed(
        &mut self,
        key: &str,
        plugins: BTreeSet<&'static str>,
        error: bool,
        now: Instant,
    ) {
        let (initial, max) = (self.initial_backoff, self.max_backoff);
        let moved = self.moves;
        let Some(p) = self.pods.get_mut(key) else {
            return;
        };
        p.backoff_until = now + Self::backoff_duration(p.attempts, initial, max);
        p.unschedulable_plugins = plugins;
        p.version += 1;
        if error || p.popped_at_move != moved || p.unschedulable_plugins.is_empty() {
            p.place = Place::Backoff;
            let k: Arc<str> = Arc::from(key);
            self.backoff.push(Reverse((p.backoff_until, p.version, k)));
        } else {
            p.place = Place::Unschedulable;
            p.unschedulable_since = now;
        }
    }

    /// The pod was scheduled (assumed and sent to bind): it leaves the queue.
    pub fn done(&mut self, key: &str) {
        self.pods.remove(key);
    }

    /// A cluster event: move unschedulable pods it may help.
    pub fn on_event(
        &mut self,
        event: ClusterEvent,
        changed: Changed<'_>,
        hints: &dyn Hints,
        now: Instant,
    ) {
        self.moves += 1;
        for p in self.pods.values_mut() {
            if p.place != Place::Unschedulable {
                continue;
            }
            if hints.worth_retrying(&p.info, &p.unschedulable_plugins, event, changed) {
                Self::requeue(p, &mut self.active, &mut self.backoff, now);
            }
        }
    }

    /// Retry pods that stayed unschedulable longer than `MAX_IN_UNSCHEDULABLE`.
    pub fn flush_unschedulable(&mut self, now: Instant) {
        for p in self.pods.values_mut() {
            if p.place == Place::Unschedulable
                && now.duration_since(p.unschedulable_since) >= MAX_IN_UNSCHEDULABLE
            {
                Self::requeue(p, &mut self.active, &mut self.backoff, now);
            }
        }
    }

    /// Whether any pod is ready to pop now.
    pub fn has_active(&self) -> bool {
        self.pods.values().any(|p| p.place == Place::Active)
    }

    pub fn get(&self, key: &str) -> Option<&QueuedPod> {
        self.pods.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::testing::pod;

    struct Always(bool);
    impl Hints for Always {
        fn worth_retrying(
            &self,
            _: &PodInfo,
            _: &BTreeSet<&'static str>,
            _: ClusterEvent,
            _: Changed<'_>,
        ) -> bool {
            self.0
        }
    }

    fn info(name: &str, priority: i32) -> Arc<PodInfo> {
        let mut p = pod(name, &[]);
        p.spec.as_mut().unwrap().priority = Some(priority);
        Arc::new(PodInfo::new(p))
    }

    fn q() -> SchedulingQueue {
        SchedulingQueue::new(Duration::from_secs(1), Duration::from_secs(10))
    }

    #[test]
    fn pops_by_priority_then_arrival() {
        let now = Instant::now();
        let mut q = q();
        q.add(info("a", 0), false, now);
        q.add(info("b", 5), false, now);
        q.add(info("c", 0), false, now);
        q.add(info("d", 5), false, now);
        let order: Vec<String> =
            std::iter::from_fn(|| q.pop(now).map(|p| p.info.key.clone())).collect();
        assert_eq!(order, ["default/b", "default/d", "default/a", "default/c"]);
    }

    #[test]
    fn gated_pods_wait_for_an_update_that_ungates_them() {
        let now = Instant::now();
        let mut q = q();
        q.add(info("a", 0), true, now);
        assert!(q.pop(now).is_none());
        q.add(info("a", 0), false, now);
        assert_eq!(q.pop(now).unwrap().info.key, "default/a");
    }

    #[test]
    fn unschedulable_pod_moves_only_on_a_relevant_event_then_waits_out_backoff() {
        let t0 = Instant::now();
        let mut q = q();
        q.add(info("a", 0), false, t0);
        let p = q.pop(t0).unwrap();
        q.failed(&p.info.key, ["NodeResourcesFit"].into(), false, t0);
        assert!(q.pop(t0).is_none());
        q.on_event(ClusterEvent::NodeAdd, Changed::None, &Always(false), t0);
        assert!(q.pop(t0 + Duration::from_secs(30)).is_none());
        q.on_event(ClusterEvent::NodeAdd, Changed::None, &Always(true), t0);
        // First attempt failed: 1 s backoff from the failure.
        assert!(q.pop(t0 + Duration::from_millis(500)).is_none());
        assert_eq!(q.next_backoff(), Some(t0 + Duration::from_secs(1)));
        assert!(q.pop(t0 + Duration::from_secs(1)).is_some());
    }

    #[test]
    fn backoff_doubles_per_attempt_up_to_the_maximum() {
        let d = |n| {
            SchedulingQueue::backoff_duration(n, Duration::from_secs(1), Duration::from_secs(10))
        };
        assert_eq!(d(1), Duration::from_secs(1));
        assert_eq!(d(2), Duration::from_secs(2));
        assert_eq!(d(4), Duration::from_secs(8));
        assert_eq!(d(5), Duration::from_secs(10));
        assert_eq!(d(50), Duration::from_secs(10));
    }

    #[test]
    fn event_during_the_cycle_sends_the_pod_to_backoff_not_unschedulable() {
        let t0 = Instant::now();
        let mut q = q();
        q.add(info("a", 0), false, t0);
        let p = q.pop(t0).unwrap();
        q.on_event(ClusterEvent::NodeAdd, Changed::None, &Always(true), t0);
        q.failed(&p.info.key, ["NodeResourcesFit"].into(), false, t0);
        assert!(q.pop(t0 + Duration::from_secs(1)).is_some());
    }

    #[test]
    fn errors_retry_after_backoff_without_an_event() {
        let t0 = Instant::now();
        let mut q = q();
        q.add(info("a", 0), false, t0);
        let p = q.pop(t0).unwrap();
        q.failed(&p.info.key, BTreeSet::new(), true, t0);
        assert!(q.pop(t0).is_none());
        assert!(q.pop(t0 + Duration::from_secs(1)).is_some());
    }

    #[test]
    fn long_unschedulable_pods_are_flushed() {
        let t0 = Instant::now();
        let mut q = q();
        q.add(info("a", 0), false, t0);
        let p = q.pop(t0).unwrap();
        q.failed(&p.info.key, ["X"].into(), false, t0);
        q.flush_unschedulable(t0 + Duration::from_secs(60));
        assert!(q.pop(t0 + Duration::from_secs(60)).is_none());
        let later = t0 + MAX_IN_UNSCHEDULABLE;
        q.flush_unschedulable(later);
        assert!(q.pop(later).is_some());
    }

    #[test]
    fn deleted_pods_are_never_popped() {
        let now = Instant::now();
        let mut q = q();
        q.add(info("a", 0), false, now);
        q.delete("default/a");
        assert!(q.pop(now).is_none());
        assert!(q.is_empty());
    }
}
