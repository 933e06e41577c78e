//! The Job controller (Kubernetes v1.32's pkg/controller/job): runs pods until the wanted number
//! of completions, counting finished pods through the `batch.kubernetes.io/job-tracking`
//! finalizer and `status.uncountedTerminatedPods` so no pod is counted twice or lost; Indexed
//! jobs (completion index annotation, label, env var and hostname), back-off between pod
//! recreations after failures, `backoffLimit`, `backoffLimitPerIndex`/`maxFailedIndexes`,
//! `activeDeadlineSeconds`, `podFailurePolicy`, `successPolicy`, `suspend`, and the
//! `FailureTarget`/`SuccessCriteriaMet` conditions that precede `Failed`/`Complete` once the
//! job's pods are gone (the JobManagedBy and JobPodReplacementPolicy behaviour, on by default
//! in v1.32).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use capstan_runtime::{Change, Informer, Queue, Recorder};
use k8s_openapi::api::batch::v1::{
    Job, JobCondition, JobStatus, PodFailurePolicy, SuccessPolicy, UncountedTerminatedPods,
};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use parking_lot::Mutex;
use serde_json::json;

use crate::expectations::Expectations;
use crate::util;
use crate::Ctx;

/// The finalizer the controller puts on its pods until it has counted them.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// Annotation and label carrying an Indexed job pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
const INDEX_IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";
const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
/// `spec.managedBy` of jobs this controller manages (unset means the same).
const JOB_CONTROLLER_NAME: &str = "kubernetes.io/job-controller";

/// Pod events are batched: the job is synced this long after the first one.
const SYNC_BATCH_PERIOD: Duration = Duration::from_secs(1);
/// The delay before recreating a pod after the first failure, doubling with each consecutive one.
const POD_FAILURE_BACKOFF: Duration = Duration::from_secs(10);
const MAX_POD_FAILURE_BACKOFF: Duration = Duration::from_secs(10 * 60);
/// Keeps `status.uncountedTerminatedPods` small; the rest is counted in later syncs.
const MAX_UNCOUNTED_PODS: usize = 500;
const MAX_POD_CREATE_DELETE_PER_SYNC: usize = 500;

const COMPLETE: &str = "Complete";
const FAILED: &str = "Failed";
const FAILURE_TARGET: &str = "FailureTarget";
const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
const SUSPENDED: &str = "Suspended";

pub fn start(ctx: &Ctx) {
    let queue = Queue::new("job");
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        jobs: ctx.informers.get::<Job>(),
        pods: ctx.informers.get::<Pod>(),
        queue: queue.clone(),
        delayed: Delayed::new(queue),
        orphans: Queue::new("job_orphan_pod"),
        expectations: Expectations::new(),
        finalizers: FinalizerExpectations::default(),
        backoff: Mutex::new(HashMap::new()),
        recorder: ctx.recorder("job-controller"),
    });
    let h = c.clone();
    c.jobs.on_change(move |ch| h.job_changed(ch));
    let h = c.clone();
    c.pods.on_change(move |ch| match ch {
        Change::Add(p) => h.pod_added(p),
        Change::Update { old, new } => h.pod_updated(old, new),
        Change::Delete(p) => h.pod_deleted(p, true),
    });
    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        c.jobs.wait_synced().await;
        c.pods.wait_synced().await;
        let w = c.clone();
        c.queue.run_workers(workers, move |key| {
            let c = w.clone();
            async move { c.sync(&key).await }
        });
        let w = c.clone();
        c.orphans.run_workers(1, move |key| {
            let c = w.clone();
            async move { c.sync_orphan_pod(&key).await }
        });
    });
}

struct Controller {
    client: Client,
    jobs: Arc<Informer<Job>>,
    pods: Arc<Informer<Pod>>,
    queue: Arc<Queue>,
    delayed: Delayed,
    /// Pods that lost their job but still carry the tracking finalizer.
    orphans: Arc<Queue>,
    expectations: Expectations,
    finalizers: FinalizerExpectations,
    backoff: Mutex<HashMap<String, BackoffRecord>>,
    recorder: Recorder,
}

/// The pod uids whose finalizer removal a job's sync issued but the informer has not shown yet.
#[derive(Default)]
struct FinalizerExpectations {
    m: Mutex<HashMap<String, HashSet<String>>>,
}

impl FinalizerExpectations {
    fn expect(&self, key: &str, uids: &[String]) {
        self.m
            .lock()
            .entry(key.to_string())
            .or_default()
            .extend(uids.iter().cloned());
    }

    fn observed(&self, key: &str, uid: &str) {
        if let Some(s) = self.m.lock().get_mut(key) {
            s.remove(uid);
        }
    }

    fn get(&self, key: &str) -> HashSet<String> {
        self.m.lock().get(key).cloned().unwrap_or_default()
    }

    fn delete(&self, key: &str) {
        self.m.lock().remove(key);
    }
}

/// Delayed additions to a work queue with one pending timer per key (the earliest wins), as
/// client-go's delaying queue: a burst of pod events schedules one sync, not one per event.
pub(crate) struct Delayed {
    queue: Arc<Queue>,
    timers: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Delayed {
    pub(crate) fn new(queue: Arc<Queue>) -> Delayed {
        Delayed {
            queue,
            timers: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Queue `key` after `d`, unless it is already due to be queued no later than that.
    pub(crate) fn add_after(&self, key: impl Into<String>, d: Duration) {
        let key = key.into();
        if d.is_zero() {
            self.queue.add(key);
            return;
        }
        let now = Instant::now();
        let Some(at) = now.checked_add(d) else {
            return; // beyond any meaningful future
        };
        {
            let mut timers = self.timers.lock();
            if timers.get(&key).is_some_and(|p| *p <= at && *p > now) {
                return;
            }
            timers.insert(key.clone(), at);
        }
        let queue = self.queue.clone();
        let timers = self.timers.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            {
                let mut t = timers.lock();
                if t.get(&key) == Some(&at) {
                    t.remove(&key);
                }
            }
            queue.add(key);
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Small accessors.

fn job_key(job: &Job) -> String {
    capstan_runtime::key(
        job.metadata.namespace.as_deref(),
        job.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn pod_key(pod: &Pod) -> String {
    capstan_runtime::key(
        pod.metadata.namespace.as_deref(),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn has_tracking_finalizer(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == TRACKING_FINALIZER)
}

/// The pod's completion index, if it has a valid one.
fn completion_index(pod: &Pod) -> Option<usize> {
    let v = pod.metadata.annotations.as_ref()?.get(COMPLETION_INDEX)?;
    let i: i64 = v.parse().ok()?;
    usize::try_from(i).ok()
}

/// For sorting: unknown indexes first.
fn index_order(pod: &Pod) -> i64 {
    completion_index(pod).map_or(-1, |i| i as i64)
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some() && !matches!(phase(pod), "Succeeded" | "Failed")
}

fn spec(job: &Job) -> Option<&k8s_openapi::api::batch::v1::JobSpec> {
    job.spec.as_ref()
}

fn is_indexed(job: &Job) -> bool {
    spec(job).and_then(|s| s.completion_mode.as_deref()) == Some("Indexed")
}

fn completions(job: &Job) -> Option<i32> {
    spec(job).and_then(|s| s.completions)
}

/// Completions of an Indexed job (required there by validation).
fn index_count(job: &Job) -> usize {
    completions(job).map_or(0, |c| c.max(0) as usize)
}

fn parallelism(job: &Job) -> i32 {
    spec(job).and_then(|s| s.parallelism).unwrap_or(1)
}

fn backoff_limit(job: &Job) -> i32 {
    spec(job).and_then(|s| s.backoff_limit).unwrap_or(6)
}

fn suspended(job: &Job) -> bool {
    spec(job).and_then(|s| s.suspend) == Some(true)
}

fn backoff_limit_per_index(job: &Job) -> Option<i32> {
    spec(job).and_then(|s| s.backoff_limit_per_index)
}

fn pod_failure_policy(job: &Job) -> Option<&PodFailurePolicy> {
    spec(job).and_then(|s| s.pod_failure_policy.as_ref())
}

/// Replace only pods that reached the Failed phase (not ones merely being deleted).
fn only_replace_failed(job: &Job) -> bool {
    spec(job).and_then(|s| s.pod_replacement_policy.as_deref()) == Some("Failed")
        || pod_failure_policy(job).is_some()
}

fn managed_externally(job: &Job) -> Option<&str> {
    spec(job)
        .and_then(|s| s.managed_by.as_deref())
        .filter(|m| *m != JOB_CONTROLLER_NAME)
}

fn conditions(job: &Job) -> &[JobCondition] {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

fn find_condition<'a>(list: &'a [JobCondition], type_: &str) -> Option<&'a JobCondition> {
    list.iter().find(|c| c.type_ == type_)
}

fn condition_true<'a>(job: &'a Job, type_: &str) -> Option<&'a JobCondition> {
    find_condition(conditions(job), type_).filter(|c| c.status == "True")
}

/// `Complete` or `Failed` is True.
pub fn finished_condition(job: &Job) -> Option<&str> {
    conditions(job)
        .iter()
        .find(|c| (c.type_ == COMPLETE || c.type_ == FAILED) && c.status == "True")
        .map(|c| c.type_.as_str())
}

pub fn is_finished(job: &Job) -> bool {
    finished_condition(job).is_some()
}

fn status_mut(job: &mut Job) -> &mut JobStatus {
    job.status.get_or_insert_with(Default::default)
}

fn uncounted_mut(job: &mut Job) -> &mut UncountedTerminatedPods {
    status_mut(job)
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default)
}

fn uncounted_len(job: &Job) -> usize {
    job.status
        .as_ref()
        .and_then(|s| s.uncounted_terminated_pods.as_ref())
        .map_or(0, |u| {
            u.succeeded.as_ref().map_or(0, Vec::len) + u.failed.as_ref().map_or(0, Vec::len)
        })
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn new_condition(type_: &str, status: &str, reason: &str, message: &str) -> JobCondition {
    let now = Time(Timestamp::now());
    JobCondition {
        type_: type_.into(),
        status: status.into(),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(now),
        reason: non_empty(reason),
        message: non_empty(message),
    }
}

fn reason_of(c: &JobCondition) -> &str {
    c.reason.as_deref().unwrap_or_default()
}

fn message_of(c: &JobCondition) -> &str {
    c.message.as_deref().unwrap_or_default()
}

/// Set a condition's status, reason and message (appending it unless it would be a new False
/// condition); whether anything changed.
fn ensure_condition(
    list: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> bool {
    if let Some(c) = list.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status || reason_of(c) != reason || message_of(c) != message {
            *c = new_condition(type_, status, reason, message);
            return true;
        }
        return false;
    }
    if status != "False" {
        list.push(new_condition(type_, status, reason, message));
        return true;
    }
    false
}

/// The text Go's `err.Error()` shows for an API error.
fn error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        e => e.to_string(),
    }
}

fn namespace_terminating(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.message.contains("because it is being terminated"))
}

fn is_invalid(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422)
}

// ---------------------------------------------------------------------------------------------
// Completion index intervals (`status.completedIndexes`, `status.failedIndexes`).

/// Sorted, non-overlapping, non-adjacent closed intervals of indexes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Intervals(Vec<(usize, usize)>);

impl Intervals {
    /// Parse `1,3-5,7`, ignoring corrupt parts and indexes at or beyond `completions`.
    fn parse(s: &str, completions: usize) -> Intervals {
        let mut out: Vec<(usize, usize)> = Vec::new();
        if s.is_empty() {
            return Intervals(out);
        }
        for part in s.split(',') {
            let mut limits = part.split('-');
            let Some(Ok(first)) = limits.next().map(str::parse::<usize>) else {
                continue;
            };
            if first >= completions {
                break;
            }
            let last = match limits.next() {
                Some(l) => match l.parse::<usize>() {
                    Ok(l) => l.min(completions - 1),
                    Err(_) => continue,
                },
                None => first,
            };
            match out.last_mut() {
                Some(prev) if prev.1 + 1 == first => prev.1 = last,
                _ => out.push((first, last)),
            }
        }
        Intervals(out)
    }

    /// These intervals with `new` (indexes in increasing order) added.
    fn with_ordered(&self, new: &[usize]) -> Intervals {
        self.merge(&Intervals(new.iter().map(|&i| (i, i)).collect()))
    }

    fn merge(&self, other: &Intervals) -> Intervals {
        let mut out: Vec<(usize, usize)> = Vec::new();
        let mut push = |iv: (usize, usize)| match out.last_mut() {
            Some(last) if iv.0 <= last.1 + 1 => last.1 = last.1.max(iv.1),
            _ => out.push(iv),
        };
        let (a, b) = (&self.0, &other.0);
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            if a[i].0 < b[j].0 {
                push(a[i]);
                i += 1;
            } else {
                push(b[j]);
                j += 1;
            }
        }
        a[i..].iter().chain(&b[j..]).for_each(|&iv| push(iv));
        Intervals(out)
    }

    fn total(&self) -> usize {
        self.0.iter().map(|(a, b)| b - a + 1).sum()
    }

    fn has(&self, ix: usize) -> bool {
        let p = self.0.partition_point(|iv| iv.1 < ix);
        p < self.0.len() && self.0[p].0 <= ix
    }
}

impl fmt::Display for Intervals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, (a, b)) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{a}")?;
            if b > a {
                let sep = if *b == a + 1 { "," } else { "-" };
                write!(f, "{sep}{b}")?;
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Pod failure policy and success policy.

/// What a failed pod means under the pod failure policy: the job failure message (a FailJob
/// rule matched), whether the failure counts against the back-off limit, and the action.
fn match_pod_failure_policy(
    policy: &PodFailurePolicy,
    pod: &Pod,
) -> (Option<String>, bool, Option<&'static str>) {
    let status = pod.status.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    for (index, rule) in policy.rules.iter().enumerate() {
        let matched: Option<String> = if let Some(req) = &rule.on_exit_codes {
            let statuses = status
                .container_statuses
                .iter()
                .flatten()
                .chain(status.init_container_statuses.iter().flatten());
            statuses
                .filter_map(|cs| {
                    let t = cs.state.as_ref()?.terminated.as_ref()?;
                    let name_ok = req.container_name.as_deref().is_none_or(|n| n == cs.name);
                    let code_ok = t.exit_code != 0
                        && match req.operator.as_str() {
                            "In" => req.values.contains(&t.exit_code),
                            "NotIn" => !req.values.contains(&t.exit_code),
                            _ => false,
                        };
                    (name_ok && code_ok).then(|| {
                        format!(
                            "Container {} for pod {ns}/{name} failed with exit code {} matching {} rule at index {index}",
                            cs.name, t.exit_code, rule.action
                        )
                    })
                })
                .next()
        } else if let Some(patterns) = &rule.on_pod_conditions {
            status.conditions.iter().flatten().find_map(|c| {
                patterns
                    .iter()
                    .any(|p| p.type_ == c.type_ && p.status == c.status)
                    .then(|| {
                        format!(
                            "Pod {ns}/{name} has condition {} matching {} rule at index {index}",
                            c.type_, rule.action
                        )
                    })
            })
        } else {
            None
        };
        let Some(message) = matched else {
            continue;
        };
        match rule.action.as_str() {
            "Ignore" => return (None, false, Some("Ignore")),
            "Count" => return (None, true, Some("Count")),
            "FailIndex" => return (None, true, Some("FailIndex")),
            "FailJob" => return (Some(message), true, Some("FailJob")),
            _ => {}
        }
    }
    (None, true, None)
}

/// Whether `policy` is met by the succeeded indexes; the condition message if so.
fn match_success_policy(
    policy: Option<&SuccessPolicy>,
    completions: usize,
    succeeded: &Intervals,
) -> Option<String> {
    let policy = policy?;
    if succeeded.0.is_empty() {
        return None;
    }
    for (index, rule) in policy.rules.iter().enumerate() {
        let met = if let Some(ix) = &rule.succeeded_indexes {
            let required = Intervals::parse(ix, completions);
            if required.0.is_empty() {
                continue;
            }
            let contains: usize = required
                .0
                .iter()
                .map(|&(a, b)| {
                    succeeded
                        .0
                        .iter()
                        .map(|&(c, d)| (b.min(d) + 1).saturating_sub(a.max(c)))
                        .sum::<usize>()
                })
                .sum();
            contains == required.total()
                || rule
                    .succeeded_count
                    .is_some_and(|n| contains as i64 >= i64::from(n))
        } else {
            rule.succeeded_count
                .is_some_and(|n| succeeded.total() as i64 >= i64::from(n))
        };
        if met {
            return Some(format!("Matched rules at index {index}"));
        }
    }
    None
}

/// A pod that failed, or (unless only Failed pods are replaced) is being deleted unfinished.
fn is_pod_failed(pod: &Pod, job: &Job) -> bool {
    match phase(pod) {
        "Failed" => true,
        _ if only_replace_failed(job) => false,
        "Succeeded" => false,
        _ => pod.metadata.deletion_timestamp.is_some(),
    }
}

fn parse_count_annotation(pod: &Pod, name: &str) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(name))
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|v| (0..=i64::from(i32::MAX)).contains(v))
        .map_or(0, |v| v as i32)
}

fn index_failure_count(pod: &Pod) -> i32 {
    parse_count_annotation(pod, INDEX_FAILURE_COUNT)
}

fn index_absolute_failure_count(pod: &Pod) -> i32 {
    index_failure_count(pod)
        .saturating_add(parse_count_annotation(pod, INDEX_IGNORED_FAILURE_COUNT))
}

fn is_index_failed(job: &Job, pod: &Pod) -> bool {
    let mut counted = false;
    if is_pod_failed(pod, job) {
        match pod_failure_policy(job) {
            Some(p) => {
                let (_, count, action) = match_pod_failure_policy(p, pod);
                if action == Some("FailIndex") {
                    return true;
                }
                counted = count;
            }
            None => counted = true,
        }
    }
    counted && index_failure_count(pod) >= backoff_limit_per_index(job).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Back-off between pod recreations.

#[derive(Debug, Clone, Default, PartialEq)]
struct BackoffRecord {
    failures_after_last_success: i32,
    last_failure_time: Option<Timestamp>,
}

/// When the pod finished: its containers' last finish, else its Ready=False transition, else
/// when it was deleted, else its creation.
fn finished_time(pod: &Pod) -> Timestamp {
    let status = pod.status.as_ref();
    let statuses: Vec<_> = status
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    if !statuses.is_empty() {
        let mut latest: Option<Timestamp> = None;
        let mut all = true;
        for cs in &statuses {
            match cs
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .and_then(|t| t.finished_at.as_ref())
            {
                Some(t) => latest = Some(latest.map_or(t.0, |l| l.max(t.0))),
                None => {
                    all = false;
                    break;
                }
            }
        }
        if let (true, Some(t)) = (all, latest) {
            return t;
        }
    }
    if let Some(c) = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
    {
        if c.status == "False" {
            if let Some(t) = &c.last_transition_time {
                return t.0;
            }
        }
    }
    if let Some(d) = &pod.metadata.deletion_timestamp {
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        return d
            .0
            .checked_sub(SignedDuration::from_secs(grace))
            .unwrap_or(d.0);
    }
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
}

impl BackoffRecord {
    /// The record after these newly finished pods.
    fn next(&self, succeeded: &[Arc<Pod>], failed: &[Arc<Pod>]) -> BackoffRecord {
        let mut failed_times: Vec<Timestamp> = failed.iter().map(|p| finished_time(p)).collect();
        failed_times.sort();
        if succeeded.is_empty() {
            let Some(last) = failed_times.last() else {
                return self.clone();
            };
            return BackoffRecord {
                failures_after_last_success: self.failures_after_last_success
                    + failed_times.len() as i32,
                last_failure_time: Some(*last),
            };
        }
        let last_success = succeeded
            .iter()
            .map(|p| finished_time(p))
            .max()
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let mut r = BackoffRecord::default();
        for t in failed_times.iter().rev() {
            if *t <= last_success {
                break;
            }
            if r.last_failure_time.is_none() {
                r.last_failure_time = Some(*t);
            }
            r.failures_after_last_success += 1;
        }
        r
    }

    fn remaining(&self, now: Timestamp) -> Duration {
        remaining_for_failures(
            self.failures_after_last_success,
            self.last_failure_time,
            now,
        )
    }
}

/// How long pod creation waits after `failures` consecutive failures, the last at `last`.
fn remaining_for_failures(failures: i32, last: Option<Timestamp>, now: Timestamp) -> Duration {
    let Some(last) = last.filter(|_| failures > 0) else {
        return Duration::ZERO;
    };
    let mut backoff = POD_FAILURE_BACKOFF;
    for _ in 1..failures {
        backoff *= 2;
        if backoff >= MAX_POD_FAILURE_BACKOFF {
            backoff = MAX_POD_FAILURE_BACKOFF;
            break;
        }
    }
    let elapsed = now.duration_since(last);
    if elapsed.is_negative() {
        return backoff;
    }
    backoff.saturating_sub(elapsed.unsigned_abs())
}

// ---------------------------------------------------------------------------------------------
// Which pods to remove first (Kubernetes' ActivePods order).

fn ready_since(pod: &Pod) -> Option<Timestamp> {
    util::ready_since(pod)
}

fn max_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
}

/// `Less` first: unassigned, then pending < unknown < running, not ready, ready more recently,
/// more restarts, newer.
fn active_pods_cmp(a: &Pod, b: &Pod) -> Ordering {
    let node = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let (na, nb) = (node(a), node(b));
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return if na.is_empty() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    let ord = |p: &Pod| match phase(p) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    };
    if ord(a) != ord(b) {
        return ord(a).cmp(&ord(b));
    }
    let (ra, rb) = (ready_since(a), ready_since(b));
    if ra.is_some() != rb.is_some() {
        return if ra.is_none() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    if let (Some(x), Some(y)) = (ra, rb) {
        if x != y {
            // More recently ready first (a zero time counts as most recent).
            return y.cmp(&x);
        }
    }
    let (ma, mb) = (max_restarts(a), max_restarts(b));
    if ma != mb {
        return mb.cmp(&ma);
    }
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    match (created(a), created(b)) {
        (x, y) if x == y => Ordering::Equal,
        (None, _) => Ordering::Less,
        (_, None) => Ordering::Greater,
        (Some(x), Some(y)) => y.cmp(&x),
    }
}

/// The active pods to delete: for Indexed jobs every pod without a valid index and all but one
/// per repeated index, then (if still fewer than `rm_at_least`) the first in ActivePods order.
fn active_pods_for_removal(job: &Job, pods: &[Arc<Pod>], rm_at_least: usize) -> Vec<Arc<Pod>> {
    let (mut rm, mut left) = if is_indexed(job) {
        duplicated_index_pods(pods, index_count(job))
    } else {
        (Vec::new(), pods.to_vec())
    };
    if rm.len() < rm_at_least {
        left.sort_by(|a, b| active_pods_cmp(a, b));
        let n = (rm_at_least - rm.len()).min(left.len());
        rm.extend(left.drain(..n));
    }
    rm
}

fn duplicated_index_pods(pods: &[Arc<Pod>], completions: usize) -> (Vec<Arc<Pod>>, Vec<Arc<Pod>>) {
    let mut sorted = pods.to_vec();
    sorted.sort_by_key(|p| index_order(p));
    let (mut rm, mut left) = (Vec::new(), Vec::new());
    let mut groups: BTreeMap<i64, Vec<Arc<Pod>>> = BTreeMap::new();
    for p in sorted {
        match completion_index(&p) {
            Some(i) if i < completions => groups.entry(i as i64).or_default().push(p),
            _ => rm.push(p),
        }
    }
    for (_, mut g) in groups {
        if g.len() == 1 {
            left.extend(g);
        } else {
            g.sort_by(|a, b| active_pods_cmp(a, b));
            if let Some(keep) = g.pop() {
                rm.extend(g);
                left.push(keep);
            }
        }
    }
    (rm, left)
}

// ---------------------------------------------------------------------------------------------
// Pod templates.

/// `<job>-<index>-`, the job name cut so the generated name fits.
fn generate_name_with_index(job: &str, index: usize) -> String {
    let suffix = format!("-{index}-");
    let mut prefix = format!("{job}{suffix}");
    if prefix.len() > 58 {
        let mut cut = 58 - suffix.len();
        while !job.is_char_boundary(cut) {
            cut -= 1;
        }
        prefix = format!("{}{suffix}", &job[..cut]);
    }
    prefix
}

fn add_completion_index_env(template: &mut k8s_openapi::api::core::v1::PodTemplateSpec) {
    let Some(spec) = template.spec.as_mut() else {
        return;
    };
    for c in spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
    {
        let env = c.env.get_or_insert_with(Vec::new);
        if env.iter().any(|e| e.name == COMPLETION_INDEX_ENV) {
            continue;
        }
        env.push(EnvVar {
            name: COMPLETION_INDEX_ENV.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: format!("metadata.labels['{COMPLETION_INDEX}']"),
                }),
                ..Default::default()
            }),
        });
    }
}

// ---------------------------------------------------------------------------------------------
// The state of one sync.

struct SyncCtx {
    job: Job,
    pods: Vec<Arc<Pod>>,
    active_pods: Vec<Arc<Pod>>,
    finished: Option<JobCondition>,
    succeeded: i32,
    failed: i32,
    prev_succeeded_indexes: Intervals,
    succeeded_indexes: Intervals,
    failed_indexes: Option<Intervals>,
    new_backoff: BackoffRecord,
    expected_rm: HashSet<String>,
    uncounted_succeeded: HashSet<String>,
    uncounted_failed: HashSet<String>,
    delayed_deletion: HashMap<usize, Arc<Pod>>,
    terminating: i32,
    ready: i32,
}

impl SyncCtx {
    /// Pods not yet counted (they have the finalizer, are not in `uncounted`, and for Indexed
    /// jobs carry a valid index) that pass `filter`.
    fn valid_pods(
        &self,
        uncounted: Option<&HashSet<String>>,
        filter: impl Fn(&Pod) -> bool,
    ) -> Vec<Arc<Pod>> {
        let indexed = is_indexed(&self.job);
        let n = index_count(&self.job);
        self.pods
            .iter()
            .filter(|p| {
                let u = uid(p);
                has_tracking_finalizer(p)
                    && !uncounted.is_some_and(|s| s.contains(u))
                    && !self.expected_rm.contains(u)
                    && (!indexed || completion_index(p).is_some_and(|i| i < n))
                    && filter(p)
            })
            .cloned()
            .collect()
    }
}

fn is_success_criteria_met(c: &JobCondition) -> bool {
    c.type_ == SUCCESS_CRITERIA_MET && c.status == "True"
}

/// Move uids whose finalizer is gone from `uncountedTerminatedPods` into the counters.
fn clean_uncounted(status: &mut JobStatus, with_finalizer: &HashSet<String>) -> bool {
    let unc = status
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    let mut changed = false;
    let mut counted = (0, 0);
    if let Some(s) = unc.succeeded.as_mut() {
        let before = s.len();
        s.retain(|u| with_finalizer.contains(u));
        counted.0 = before - s.len();
    }
    if let Some(f) = unc.failed.as_mut() {
        let before = f.len();
        f.retain(|u| with_finalizer.contains(u));
        counted.1 = before - f.len();
    }
    if counted.0 > 0 {
        changed = true;
        status.succeeded = Some(
            status
                .succeeded
                .unwrap_or(0)
                .saturating_add(counted.0 as i32),
        );
    }
    if counted.1 > 0 {
        changed = true;
        status.failed = Some(status.failed.unwrap_or(0).saturating_add(counted.1 as i32));
    }
    changed
}

/// Go's omitempty: zero counters, empty strings and lists are left out.
fn normalize_status(job: &mut Job) {
    let s = status_mut(job);
    s.active = s.active.filter(|v| *v != 0);
    s.succeeded = s.succeeded.filter(|v| *v != 0);
    s.failed = s.failed.filter(|v| *v != 0);
    s.completed_indexes = s.completed_indexes.take().filter(|v| !v.is_empty());
    if s.conditions.as_ref().is_some_and(Vec::is_empty) {
        s.conditions = None;
    }
    let u = s
        .uncounted_terminated_pods
        .get_or_insert_with(Default::default);
    u.succeeded = u.succeeded.take().filter(|v| !v.is_empty());
    u.failed = u.failed.take().filter(|v| !v.is_empty());
}

impl Controller {
    fn jobs_api(&self, ns: &str) -> Api<Job> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn pods_api(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    // -----------------------------------------------------------------------------------------
    // Informer handlers: they only compute keys and enqueue.

    fn enqueue_batched(&self, key: String) {
        self.delayed.add_after(key, SYNC_BATCH_PERIOD);
    }

    fn job_changed(&self, ch: &Change<'_, Job>) {
        match ch {
            Change::Add(j) => self.queue.add(job_key(j)),
            Change::Update { old, new } => {
                let key = job_key(new);
                if old.metadata.generation == new.metadata.generation {
                    self.enqueue_batched(key.clone());
                } else {
                    self.queue.add(key.clone());
                }
                if is_finished(new) {
                    self.cleanup_pod_finalizers(new);
                }
                let start = new.status.as_ref().and_then(|s| s.start_time.as_ref());
                let ads = spec(new).and_then(|s| s.active_deadline_seconds);
                if let (Some(start), Some(ads)) = (start, ads) {
                    if spec(old).and_then(|s| s.active_deadline_seconds) != Some(ads) {
                        let passed = Timestamp::now().duration_since(start.0);
                        let left = SignedDuration::from_secs(ads).saturating_sub(passed);
                        self.delayed
                            .add_after(key, left.try_into().unwrap_or(Duration::ZERO));
                    }
                }
            }
            Change::Delete(j) => {
                self.queue.add(job_key(j));
                self.cleanup_pod_finalizers(j);
            }
        }
    }

    /// Queue the job's pods that still carry the tracking finalizer for its removal.
    fn cleanup_pod_finalizers(&self, job: &Job) {
        let Some(m) = spec(job)
            .and_then(|s| s.selector.as_ref())
            .and_then(util::matcher)
        else {
            return;
        };
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let job_uid = job.metadata.uid.as_deref();
        self.pods.for_each_in(ns, |p| {
            if util::matches(&m, p.metadata.labels.as_ref())
                && util::controller_ref(&p.metadata).map(|r| r.uid.as_str()) == job_uid
                && has_tracking_finalizer(p)
            {
                self.orphans.add(pod_key(p));
            }
        });
    }

    fn resolve(&self, ns: &str, r: &OwnerReference) -> Option<Arc<Job>> {
        if r.kind != "Job" {
            return None;
        }
        self.jobs
            .get(ns, &r.name)
            .filter(|j| j.metadata.uid.as_deref() == Some(&r.uid))
    }

    /// Jobs whose selector selects the pod (for orphans that might be adopted).
    fn jobs_selecting(&self, pod: &Pod) -> Vec<String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let mut keys = Vec::new();
        self.jobs.for_each_in(ns, |j| {
            let Some(sel) = spec(j).and_then(|s| s.selector.as_ref()) else {
                return;
            };
            if util::selects_everything(sel) {
                return;
            }
            if let Some(m) = util::matcher(sel) {
                if util::matches(&m, pod.metadata.labels.as_ref()) {
                    keys.push(job_key(j));
                }
            }
        });
        keys
    }

    fn pod_added(&self, pod: &Pod) {
        if pod.metadata.deletion_timestamp.is_some() {
            self.pod_deleted(pod, false);
            return;
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        if let Some(r) = util::controller_ref(&pod.metadata) {
            if let Some(job) = self.resolve(ns, r) {
                let key = job_key(&job);
                self.expectations.creation_observed(&key);
                self.enqueue_batched(key);
            }
            return;
        }
        if has_tracking_finalizer(pod) {
            self.orphans.add(pod_key(pod));
        }
        for key in self.jobs_selecting(pod) {
            self.enqueue_batched(key);
        }
    }

    fn pod_updated(&self, old: &Pod, new: &Pod) {
        if old.metadata.resource_version == new.metadata.resource_version {
            return;
        }
        if new.metadata.deletion_timestamp.is_some() {
            self.pod_deleted(new, false);
            return;
        }
        let ns = new.metadata.namespace.as_deref().unwrap_or_default();
        let finalizer_removed = !has_tracking_finalizer(new);
        let cur = util::controller_ref(&new.metadata);
        let prev = util::controller_ref(&old.metadata);
        let changed = cur != prev;
        if changed {
            if let Some(job) = prev.and_then(|r| self.resolve(ns, r)) {
                let key = job_key(&job);
                if finalizer_removed {
                    self.finalizers.observed(&key, uid(new));
                }
                self.enqueue_batched(key);
            }
        }
        if let Some(r) = cur {
            if let Some(job) = self.resolve(ns, r) {
                let key = job_key(&job);
                if finalizer_removed {
                    self.finalizers.observed(&key, uid(new));
                }
                self.enqueue_batched(key);
            }
            return;
        }
        if has_tracking_finalizer(new) {
            self.orphans.add(pod_key(new));
        }
        if changed || old.metadata.labels != new.metadata.labels {
            for key in self.jobs_selecting(new) {
                self.enqueue_batched(key);
            }
        }
    }

    fn pod_deleted(&self, pod: &Pod, gone: bool) {
        let has_finalizer = has_tracking_finalizer(pod);
        let Some(r) = util::controller_ref(&pod.metadata) else {
            if has_finalizer {
                self.orphans.add(pod_key(pod));
            }
            return;
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let job = self.resolve(ns, r).filter(|j| !is_finished(j));
        let Some(job) = job else {
            if has_finalizer {
                self.orphans.add(pod_key(pod));
            }
            return;
        };
        let key = job_key(&job);
        self.expectations.deletion_observed(&key);
        if gone || !has_finalizer {
            self.finalizers.observed(&key, uid(pod));
        }
        self.enqueue_batched(key);
    }

    // -----------------------------------------------------------------------------------------
    // Orphan pods: drop the finalizer of pods no unfinished job owns.

    async fn sync_orphan_pod(&self, key: &str) -> anyhow::Result<()> {
        let Some(pod) = self.pods.get_key(key) else {
            return Ok(());
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        if let Some(r) = util::controller_ref(&pod.metadata) {
            if r.kind != "Job" || r.api_version != "batch/v1" {
                return Ok(());
            }
            if let Some(job) = self.resolve(ns, r) {
                if managed_externally(&job).is_some() || !is_finished(&job) {
                    return Ok(());
                }
            }
        }
        if has_tracking_finalizer(&pod) {
            match self.remove_finalizer(&pod).await {
                Ok(()) => {}
                Err(e) if util::is_not_found(&e) => {}
                Err(e) => return Err(e).context("removing tracking finalizer"),
            }
        }
        Ok(())
    }

    async fn remove_finalizer(&self, pod: &Pod) -> kube::Result<()> {
        let patch =
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}});
        self.pods_api(pod.metadata.namespace.as_deref().unwrap_or_default())
            .patch(
                pod.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .map(|_| ())
    }

    // -----------------------------------------------------------------------------------------
    // Claiming pods.

    /// The job's pods: those it controls and its selector still selects; orphans it selects
    /// are adopted (with the tracking finalizer), controlled pods it no longer selects released.
    async fn pods_for_job(&self, job: &Job) -> anyhow::Result<Vec<Arc<Pod>>> {
        let selector = spec(job)
            .and_then(|s| s.selector.as_ref())
            .and_then(util::matcher)
            .context("couldn't convert Job selector")?;
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let job_uid = job.metadata.uid.clone().unwrap_or_default();
        let deleting = job.metadata.deletion_timestamp.is_some();
        let mut claimed = Vec::new();
        let mut can_adopt: Option<Result<(), String>> = None;
        let mut first_err: Option<anyhow::Error> = None;
        for pod in self.pods.list_namespace(ns) {
            let selected = util::matches(&selector, pod.metadata.labels.as_ref());
            match util::controller_ref(&pod.metadata) {
                Some(r) if r.uid != job_uid => {}
                Some(_) if selected => claimed.push(pod),
                Some(_) => {
                    if deleting {
                        continue;
                    }
                    if let Err(e) = self.release(&pod, &job_uid).await {
                        if !util::is_not_found(&e) && !is_invalid(&e) {
                            first_err.get_or_insert(anyhow::Error::new(e));
                        }
                    }
                }
                None => {
                    if deleting || !selected || pod.metadata.deletion_timestamp.is_some() {
                        continue;
                    }
                    if can_adopt.is_none() {
                        can_adopt = Some(self.recheck(job).await);
                    }
                    if let Some(Err(e)) = &can_adopt {
                        first_err.get_or_insert(anyhow::anyhow!("can't adopt Pod: {e}"));
                        continue;
                    }
                    match self.adopt(job, &pod).await {
                        Ok(()) => {
                            let mut p = (*pod).clone();
                            if !has_tracking_finalizer(&p) {
                                p.metadata
                                    .finalizers
                                    .get_or_insert_with(Vec::new)
                                    .push(TRACKING_FINALIZER.into());
                            }
                            claimed.push(Arc::new(p));
                        }
                        Err(e) if util::is_not_found(&e) => {}
                        Err(e) => {
                            first_err.get_or_insert(anyhow::Error::new(e));
                        }
                    }
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(claimed),
        }
    }

    /// Before adopting: the job, read fresh from the API, is the same and not being deleted.
    async fn recheck(&self, job: &Job) -> Result<(), String> {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let name = job.metadata.name.as_deref().unwrap_or_default();
        let fresh = self
            .jobs_api(ns)
            .get(name)
            .await
            .map_err(|e| error_text(&e))?;
        if fresh.metadata.uid != job.metadata.uid {
            return Err(format!(
                "original Job {ns}/{name} is gone: got uid {}, wanted {}",
                fresh.metadata.uid.unwrap_or_default(),
                job.metadata.uid.clone().unwrap_or_default()
            ));
        }
        if fresh.metadata.deletion_timestamp.is_some() {
            return Err(format!("{ns}/{name} has just been deleted"));
        }
        Ok(())
    }

    async fn adopt(&self, job: &Job, pod: &Pod) -> kube::Result<()> {
        let patch = json!({"metadata": {
            "ownerReferences": [util::owner_ref(job)],
            "uid": pod.metadata.uid,
            "finalizers": [TRACKING_FINALIZER],
        }});
        self.pods_api(pod.metadata.namespace.as_deref().unwrap_or_default())
            .patch(
                pod.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .map(|_| ())
    }

    async fn release(&self, pod: &Pod, owner_uid: &str) -> kube::Result<()> {
        let patch = json!({"metadata": {
            "ownerReferences": [{"$patch": "delete", "uid": owner_uid}],
            "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER],
            "uid": pod.metadata.uid,
        }});
        self.pods_api(pod.metadata.namespace.as_deref().unwrap_or_default())
            .patch(
                pod.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .map(|_| ())
    }

    // -----------------------------------------------------------------------------------------
    // The sync.

    async fn sync(&self, key: &str) -> anyhow::Result<()> {
        let (ns, name) = capstan_runtime::split_key(key);
        if ns.is_empty() || name.is_empty() {
            return Ok(());
        }
        let Some(shared) = self.jobs.get(ns, name) else {
            self.expectations.delete(key);
            self.finalizers.delete(key);
            self.backoff.lock().remove(key);
            return Ok(());
        };
        if managed_externally(&shared).is_some() {
            return Ok(());
        }
        if is_finished(&shared) {
            self.backoff.lock().remove(key);
            return Ok(());
        }
        let mut job = (*shared).clone();
        if let Some(mode) = spec(&job).and_then(|s| s.completion_mode.as_deref()) {
            if mode != "NonIndexed" && mode != "Indexed" {
                self.recorder.warning(
                    &job,
                    "UnknownCompletionMode",
                    "Skipped Job sync because completion mode is unknown",
                );
                return Ok(());
            }
        }
        uncounted_mut(&mut job);

        // Checked before listing pods, so a pod created meanwhile only defers the sync.
        let satisfied = self.expectations.satisfied(key);
        let pods = self.pods_for_job(&job).await?;
        let active_pods: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| util::is_pod_active(p))
            .cloned()
            .collect();
        let unc = job
            .status
            .as_ref()
            .and_then(|s| s.uncounted_terminated_pods.clone())
            .unwrap_or_default();
        let mut cx = SyncCtx {
            ready: active_pods.iter().filter(|p| util::is_pod_ready(p)).count() as i32,
            terminating: pods.iter().filter(|p| is_terminating(p)).count() as i32,
            uncounted_succeeded: unc.succeeded.unwrap_or_default().into_iter().collect(),
            uncounted_failed: unc.failed.unwrap_or_default().into_iter().collect(),
            expected_rm: self.finalizers.get(key),
            active_pods,
            pods,
            job,
            finished: None,
            succeeded: 0,
            failed: 0,
            prev_succeeded_indexes: Intervals::default(),
            succeeded_indexes: Intervals::default(),
            failed_indexes: None,
            new_backoff: BackoffRecord::default(),
            delayed_deletion: HashMap::new(),
        };
        let mut active = cx.active_pods.len() as i32;
        let new_succeeded =
            cx.valid_pods(Some(&cx.uncounted_succeeded), |p| phase(p) == "Succeeded");
        let job_ref = &cx.job;
        let new_failed = cx.valid_pods(Some(&cx.uncounted_failed), |p| is_pod_failed(p, job_ref));
        let status = cx.job.status.clone().unwrap_or_default();
        cx.succeeded = status
            .succeeded
            .unwrap_or(0)
            .saturating_add(new_succeeded.len() as i32)
            .saturating_add(cx.uncounted_succeeded.len() as i32);
        let counted_new_failed = match pod_failure_policy(&cx.job) {
            Some(p) => new_failed
                .iter()
                .filter(|f| match_pod_failure_policy(p, f).1)
                .count(),
            None => new_failed.len(),
        };
        cx.failed = status
            .failed
            .unwrap_or(0)
            .saturating_add(counted_new_failed as i32)
            .saturating_add(cx.uncounted_failed.len() as i32);

        let now = Timestamp::now();
        if status.start_time.is_none() && !suspended(&cx.job) {
            status_mut(&mut cx.job).start_time = Some(Time(now));
        }
        cx.new_backoff = self
            .backoff
            .lock()
            .get(key)
            .cloned()
            .unwrap_or_default()
            .next(&new_succeeded, &new_failed);

        let mut manage_err: Option<anyhow::Error> = None;
        let exceeds_backoff_limit = cx.failed > backoff_limit(&cx.job);
        cx.finished = condition_true(&cx.job, SUCCESS_CRITERIA_MET).cloned();
        if cx.finished.is_none() {
            if let Some(ft) = condition_true(&cx.job, FAILURE_TARGET) {
                cx.finished = Some(new_condition(FAILED, "True", reason_of(ft), message_of(ft)));
            } else if let Some(msg) = self.fail_job_message(&cx.job, &cx.pods) {
                cx.finished = Some(new_condition(
                    FAILURE_TARGET,
                    "True",
                    "PodFailurePolicy",
                    &msg,
                ));
            }
        }
        if cx.finished.is_none() {
            if exceeds_backoff_limit || past_backoff_limit_on_failure(&cx.job, &cx.pods) {
                cx.finished = Some(new_condition(
                    FAILURE_TARGET,
                    "True",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                ));
            } else if past_active_deadline(&cx.job, now) {
                cx.finished = Some(new_condition(
                    FAILURE_TARGET,
                    "True",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                ));
            } else if let (Some(ads), false) = (
                spec(&cx.job).and_then(|s| s.active_deadline_seconds),
                suspended(&cx.job),
            ) {
                let start = cx
                    .job
                    .status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .map_or(now, |t| t.0);
                let left = SignedDuration::from_secs(ads).saturating_sub(now.duration_since(start));
                self.delayed
                    .add_after(key, left.try_into().unwrap_or(Duration::ZERO));
            }
        }

        if is_indexed(&cx.job) {
            let n = index_count(&cx.job);
            let (prev, cur) = succeeded_indexes(&cx.job, &cx.pods, n);
            cx.prev_succeeded_indexes = prev;
            cx.succeeded_indexes = cur;
            cx.succeeded = cx.succeeded_indexes.total() as i32;
            if backoff_limit_per_index(&cx.job).is_some() {
                let failed = failed_indexes(&cx.job, &cx.pods, n);
                if cx.finished.is_none() {
                    let max = spec(&cx.job).and_then(|s| s.max_failed_indexes);
                    if max.is_some_and(|m| failed.total() as i64 > i64::from(m)) {
                        cx.finished = Some(new_condition(
                            FAILURE_TARGET,
                            "True",
                            "MaxFailedIndexesExceeded",
                            "Job has exceeded the specified maximal number of failed indexes",
                        ));
                    } else if failed.total() > 0
                        && failed.total() + cx.succeeded_indexes.total() >= n
                    {
                        cx.finished = Some(new_condition(
                            FAILURE_TARGET,
                            "True",
                            "FailedIndexes",
                            "Job has failed indexes",
                        ));
                    }
                }
                cx.failed_indexes = Some(failed);
                cx.delayed_deletion = pods_with_delayed_deletion(&cx);
            }
            if cx.finished.is_none() {
                let policy = spec(&cx.job).and_then(|s| s.success_policy.as_ref());
                if let Some(msg) = match_success_policy(policy, n, &cx.succeeded_indexes) {
                    cx.finished = Some(new_condition(
                        SUCCESS_CRITERIA_MET,
                        "True",
                        "SuccessPolicy",
                        &msg,
                    ));
                }
            }
        }

        let mut suspend_changed = false;
        if cx.finished.is_some() {
            let pods = cx.active_pods.clone();
            let (deleted_ready, deleted, err) = self.delete_active_pods(&cx.job, &pods).await;
            if deleted != active || !satisfied {
                // Pods still to go (or not yet seen): not finished yet.
                cx.finished = None;
            }
            active -= deleted;
            cx.terminating += deleted;
            cx.ready -= deleted_ready;
            manage_err = err;
        } else {
            let mut manage_called = false;
            if satisfied && cx.job.metadata.deletion_timestamp.is_none() {
                let (a, err) = self.manage_job(key, &mut cx).await;
                active = a;
                manage_err = err;
                manage_called = true;
            }
            let complete = match completions(&cx.job) {
                None => cx.succeeded > 0 && active == 0,
                Some(c) => cx.succeeded >= c && active == 0,
            };
            if complete {
                cx.finished = Some(new_condition(
                    SUCCESS_CRITERIA_MET,
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                ));
            } else if manage_called {
                let is_suspended = suspended(&cx.job);
                let conds = status_mut(&mut cx.job)
                    .conditions
                    .get_or_insert_with(Vec::new);
                if is_suspended {
                    if ensure_condition(conds, SUSPENDED, "True", "JobSuspended", "Job suspended") {
                        suspend_changed = true;
                        self.recorder.normal(&cx.job, "Suspended", "Job suspended");
                    }
                } else if ensure_condition(conds, SUSPENDED, "False", "JobResumed", "Job resumed") {
                    suspend_changed = true;
                    self.recorder.normal(&cx.job, "Resumed", "Job resumed");
                    // The deadline counts from when the job was last resumed.
                    status_mut(&mut cx.job).start_time = Some(Time(Timestamp::now()));
                }
            }
        }

        let st = status_mut(&mut cx.job);
        let needs_update = suspend_changed
            || st.active.unwrap_or(0) != active
            || st.ready != Some(cx.ready)
            || st.terminating != Some(cx.terminating);
        st.active = Some(active);
        st.ready = Some(cx.ready);
        st.terminating = Some(cx.terminating);
        self.track_status_and_remove_finalizers(key, &mut cx, needs_update)
            .await
            .context("tracking status")?;
        match manage_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The message of the first FailJob rule a failed pod matches.
    fn fail_job_message(&self, job: &Job, pods: &[Arc<Pod>]) -> Option<String> {
        let policy = pod_failure_policy(job)?;
        pods.iter()
            .filter(|p| is_pod_failed(p, job))
            .find_map(|p| match_pod_failure_policy(policy, p).0)
    }

    /// Delete active pods of a finishing job (their finalizers go when they are counted).
    async fn delete_active_pods(
        &self,
        job: &Job,
        pods: &[Arc<Pod>],
    ) -> (i32, i32, Option<anyhow::Error>) {
        let results = futures::future::join_all(pods.iter().map(|p| async move {
            let r = self.delete_pod(job, p).await;
            (r, util::is_pod_ready(p))
        }))
        .await;
        let mut deleted = pods.len() as i32;
        let mut deleted_ready = 0;
        let mut err = None;
        for (r, ready) in results {
            if let Err(e) = r {
                if !util::is_not_found(&e) {
                    deleted -= 1;
                    err.get_or_insert(anyhow::Error::new(e));
                }
            }
            if ready {
                deleted_ready += 1;
            }
        }
        (deleted_ready, deleted, err)
    }

    /// DELETE a pod, recording SuccessfulDelete / FailedDelete as Kubernetes' pod control does.
    async fn delete_pod(&self, job: &Job, pod: &Pod) -> kube::Result<()> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        match self
            .pods_api(ns)
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => {
                self.recorder
                    .normal(job, "SuccessfulDelete", format!("Deleted pod: {name}"));
                Ok(())
            }
            Err(e) => {
                if !util::is_not_found(&e) {
                    self.recorder.warning(
                        job,
                        "FailedDelete",
                        format!("Error deleting: {}", error_text(&e)),
                    );
                }
                Err(e)
            }
        }
    }

    /// Remove the finalizer and delete (suspension, too many pods).
    async fn delete_job_pods(
        &self,
        job: &Job,
        key: &str,
        pods: &[Arc<Pod>],
    ) -> (i32, i32, Option<anyhow::Error>) {
        let results = futures::future::join_all(pods.iter().map(|p| async move {
            let r = async {
                if has_tracking_finalizer(p) {
                    self.remove_finalizer(p).await?;
                }
                self.delete_pod(job, p).await
            }
            .await;
            (r, util::is_pod_ready(p))
        }))
        .await;
        let mut deleted = pods.len() as i32;
        let mut deleted_ready = 0;
        let mut err = None;
        for (r, ready) in results {
            if let Err(e) = r {
                self.expectations.deletion_observed(key);
                if !util::is_not_found(&e) {
                    deleted -= 1;
                    err.get_or_insert(anyhow::Error::new(e));
                }
            }
            if ready {
                deleted_ready += 1;
            }
        }
        (deleted_ready, deleted, err)
    }

    /// Create or delete pods toward the wanted number of active pods; the new active count.
    async fn manage_job(&self, key: &str, cx: &mut SyncCtx) -> (i32, Option<anyhow::Error>) {
        let job = cx.job.clone();
        let mut active = cx.active_pods.len() as i32;
        if suspended(&job) {
            let rm = active_pods_for_removal(&job, &cx.active_pods, active as usize);
            self.expectations.expect_deletions(key, rm.len() as i64);
            let (ready, removed, err) = self.delete_job_pods(&job, key, &rm).await;
            cx.terminating += removed;
            cx.ready -= ready;
            return (active - removed, err);
        }
        let parallelism = parallelism(&job);
        let want_active = match completions(&job) {
            None if cx.succeeded > 0 => active,
            None => parallelism,
            Some(c) => c.saturating_sub(cx.succeeded).min(parallelism).max(0),
        };
        let rm_at_least = (active - want_active).max(0) as usize;
        let mut rm = active_pods_for_removal(&job, &cx.active_pods, rm_at_least);
        rm.truncate(MAX_POD_CREATE_DELETE_PER_SYNC);
        if !rm.is_empty() {
            self.expectations.expect_deletions(key, rm.len() as i64);
            let (ready, removed, err) = self.delete_job_pods(&job, key, &rm).await;
            cx.terminating += removed;
            cx.ready -= ready;
            // Only deletions or creations in one sync; deletions first.
            return (active - removed, err);
        }
        let terminating = if only_replace_failed(&job) {
            cx.terminating
        } else {
            0
        };
        let mut diff = want_active - terminating - active;
        if diff <= 0 {
            return (active, None);
        }
        let per_index = backoff_limit_per_index(&job).is_some();
        if !per_index {
            let remaining = cx.new_backoff.remaining(Timestamp::now());
            if !remaining.is_zero() {
                self.delayed
                    .add_after(key.to_string(), remaining.max(SYNC_BATCH_PERIOD));
                return (0, None);
            }
        }
        diff = diff.min(MAX_POD_CREATE_DELETE_PER_SYNC as i32);
        let mut indexes: Vec<usize> = Vec::new();
        if is_indexed(&job) {
            indexes = first_pending_indexes(cx, diff as usize, index_count(&job));
            if per_index {
                let (now_indexes, remaining) = creation_info_for_independent_indexes(
                    &indexes,
                    &cx.delayed_deletion,
                    Timestamp::now(),
                );
                if !remaining.is_zero() {
                    self.delayed
                        .add_after(key.to_string(), remaining.max(SYNC_BATCH_PERIOD));
                    return (0, None);
                }
                indexes = now_indexes;
            }
            diff = indexes.len() as i32;
        }
        self.expectations.expect_creations(key, i64::from(diff));
        active += diff;
        let mut template = spec(&job).map(|s| s.template.clone()).unwrap_or_default();
        if is_indexed(&job) {
            add_completion_index_env(&mut template);
        }
        {
            let md = template.metadata.get_or_insert_with(Default::default);
            let f = md.finalizers.get_or_insert_with(Vec::new);
            if !f.iter().any(|x| x == TRACKING_FINALIZER) {
                f.push(TRACKING_FINALIZER.into());
            }
        }
        let mut first_err: Option<anyhow::Error> = None;
        let mut indexes = indexes.into_iter();
        let mut remaining = diff;
        let mut batch = remaining.min(1);
        while remaining > 0 {
            let mut creations = Vec::new();
            for _ in 0..batch {
                let index = indexes.next();
                creations.push(self.create_pod(&job, &template, index, &cx.delayed_deletion));
            }
            let results = futures::future::join_all(creations).await;
            let mut failed_now = 0;
            for r in results {
                match r {
                    Ok(()) => {}
                    Err(None) => {} // namespace terminating: nothing more to do
                    Err(Some(e)) => {
                        self.expectations.creation_observed(key);
                        active -= 1;
                        failed_now += 1;
                        first_err.get_or_insert(e);
                    }
                }
            }
            let skipped = remaining - batch;
            if failed_now > 0 && skipped > 0 {
                // Slow start: stop after a failing batch; the rest comes in a later sync.
                active -= skipped;
                for _ in 0..skipped {
                    self.expectations.creation_observed(key);
                }
                break;
            }
            remaining -= batch;
            batch = (2 * batch).min(remaining);
        }
        (active, first_err)
    }

    /// Create one pod from the template (for Indexed jobs, for `index`). `Err(None)`: the
    /// namespace is being terminated.
    async fn create_pod(
        &self,
        job: &Job,
        template: &k8s_openapi::api::core::v1::PodTemplateSpec,
        index: Option<usize>,
        delayed: &HashMap<usize, Arc<Pod>>,
    ) -> Result<(), Option<anyhow::Error>> {
        let job_name = job.metadata.name.as_deref().unwrap_or_default();
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let mut t = template.clone();
        let prefix = match index {
            Some(ix) => {
                let md = t.metadata.get_or_insert_with(Default::default);
                md.annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(COMPLETION_INDEX.into(), ix.to_string());
                md.labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(COMPLETION_INDEX.into(), ix.to_string());
                if backoff_limit_per_index(job).is_some() {
                    let (count, ignored) = new_index_failure_counts(job, delayed.get(&ix));
                    let a = md.annotations.get_or_insert_with(BTreeMap::new);
                    a.insert(INDEX_FAILURE_COUNT.into(), count.to_string());
                    if ignored > 0 {
                        a.insert(INDEX_IGNORED_FAILURE_COUNT.into(), ignored.to_string());
                    }
                }
                if let Some(s) = t.spec.as_mut() {
                    s.hostname = Some(format!("{job_name}-{ix}"));
                }
                generate_name_with_index(job_name, ix)
            }
            None => util::pod_name_prefix(job_name),
        };
        let pod = util::pod_from_template(&t, ns, &prefix, util::owner_ref(job));
        match self.pods_api(ns).create(&PostParams::default(), &pod).await {
            Ok(created) => {
                let name = created.metadata.name.unwrap_or_default();
                self.recorder
                    .normal(job, "SuccessfulCreate", format!("Created pod: {name}"));
                Ok(())
            }
            Err(e) if namespace_terminating(&e) => Err(None),
            Err(e) => {
                self.recorder.warning(
                    job,
                    "FailedCreate",
                    format!("Error creating: {}", error_text(&e)),
                );
                Err(Some(anyhow::Error::new(e)))
            }
        }
    }

    /// Count finished pods through `uncountedTerminatedPods` and the finalizers, then mark the
    /// job finished once everything is counted and no pod is terminating.
    async fn track_status_and_remove_finalizers(
        &self,
        key: &str,
        cx: &mut SyncCtx,
        mut needs_flush: bool,
    ) -> anyhow::Result<()> {
        let indexed = is_indexed(&cx.job);
        let n = index_count(&cx.job);
        if indexed {
            cx.pods.sort_by_key(|p| index_order(p));
        }
        let with_finalizer: HashSet<String> = cx
            .pods
            .iter()
            .filter(|p| has_tracking_finalizer(p) && !cx.expected_rm.contains(uid(p)))
            .map(|p| uid(p).to_string())
            .collect();
        if clean_uncounted(status_mut(&mut cx.job), &with_finalizer) {
            needs_flush = true;
        }
        let mut to_remove: Vec<Arc<Pod>> = Vec::new();
        let mut new_succeeded_indexes: Vec<usize> = Vec::new();
        let mut reached_max = false;
        let pods = cx.pods.clone();
        let policy = pod_failure_policy(&cx.job).cloned();
        for pod in &pods {
            let u = uid(pod);
            if !has_tracking_finalizer(pod) || cx.expected_rm.contains(u) {
                continue;
            }
            let failed = is_pod_failed(pod, &cx.job);
            if !can_remove_finalizer(cx, pod, failed) {
                continue;
            }
            to_remove.push(pod.clone());
            let ix = completion_index(pod);
            let finished_non_success = cx
                .finished
                .as_ref()
                .is_some_and(|c| !is_success_criteria_met(c));
            let unc = uncounted_mut(&mut cx.job);
            if phase(pod) == "Succeeded" && !cx.uncounted_failed.contains(u) {
                if indexed {
                    if let Some(ix) = ix.filter(|i| *i < n && !cx.prev_succeeded_indexes.has(*i)) {
                        new_succeeded_indexes.push(ix);
                        needs_flush = true;
                    }
                } else if !cx.uncounted_succeeded.contains(u) {
                    needs_flush = true;
                    unc.succeeded
                        .get_or_insert_with(Vec::new)
                        .push(u.to_string());
                }
            } else if (failed || finished_non_success)
                && !cx.uncounted_failed.contains(u)
                && (!indexed || ix.is_some_and(|i| i < n))
            {
                let count = policy
                    .as_ref()
                    .is_none_or(|p| match_pod_failure_policy(p, pod).1);
                if count {
                    needs_flush = true;
                    unc.failed.get_or_insert_with(Vec::new).push(u.to_string());
                }
            }
            if new_succeeded_indexes.len() + uncounted_len(&cx.job) >= MAX_UNCOUNTED_PODS {
                reached_max = true;
                break;
            }
        }
        if indexed {
            cx.succeeded_indexes = cx.succeeded_indexes.with_ordered(&new_succeeded_indexes);
            let s = cx.succeeded_indexes.to_string();
            let failed_s = cx.failed_indexes.as_ref().map(ToString::to_string);
            let total = cx.succeeded_indexes.total() as i32;
            let st = status_mut(&mut cx.job);
            if st.completed_indexes.as_deref().unwrap_or_default() != s {
                needs_flush = true;
            }
            st.succeeded = Some(total);
            st.completed_indexes = Some(s);
            if st.failed_indexes != failed_s {
                st.failed_indexes = failed_s;
                needs_flush = true;
            }
        }
        if let Some(f) = cx.finished.clone() {
            if f.type_ == FAILURE_TARGET {
                // Recorded before the pods' finalizers go, so the reason survives a restart.
                status_mut(&mut cx.job)
                    .conditions
                    .get_or_insert_with(Vec::new)
                    .push(f.clone());
                needs_flush = true;
                cx.finished = Some(new_condition(FAILED, "True", reason_of(&f), message_of(&f)));
            } else if is_success_criteria_met(&f) {
                if condition_true(&cx.job, SUCCESS_CRITERIA_MET).is_none() {
                    status_mut(&mut cx.job)
                        .conditions
                        .get_or_insert_with(Vec::new)
                        .push(f.clone());
                    needs_flush = true;
                }
                cx.finished = Some(new_condition(
                    COMPLETE,
                    "True",
                    reason_of(&f),
                    message_of(&f),
                ));
            }
        }
        needs_flush = self
            .flush_uncounted_and_remove_finalizers(key, cx, &to_remove, with_finalizer, needs_flush)
            .await?;
        let job_finished = !reached_max && enact_job_finished(cx);
        if job_finished {
            needs_flush = true;
        }
        if needs_flush {
            cx.job = self
                .update_status(&cx.job)
                .await
                .context("removing uncounted pods from status")?;
            if job_finished {
                if let Some(f) = cx.finished.clone() {
                    self.record_job_finished(&cx.job, &f);
                }
            }
        }
        Ok(())
    }

    async fn flush_uncounted_and_remove_finalizers(
        &self,
        key: &str,
        cx: &mut SyncCtx,
        to_remove: &[Arc<Pod>],
        mut with_finalizer: HashSet<String>,
        mut needs_flush: bool,
    ) -> anyhow::Result<bool> {
        if needs_flush {
            cx.job = self
                .update_status(&cx.job)
                .await
                .context("adding uncounted pods to status")?;
            self.backoff
                .lock()
                .insert(key.to_string(), cx.new_backoff.clone());
            needs_flush = false;
        }
        let mut rm_err = None;
        if !to_remove.is_empty() {
            let (ok, err) = self.remove_tracking_finalizers(key, to_remove).await;
            for (p, ok) in to_remove.iter().zip(ok) {
                if ok {
                    with_finalizer.remove(uid(p));
                }
            }
            rm_err = err;
        }
        if clean_uncounted(status_mut(&mut cx.job), &with_finalizer) {
            needs_flush = true;
        }
        if let Some(e) = rm_err {
            if needs_flush {
                self.update_status(&cx.job)
                    .await
                    .context("removing uncounted pods from status")?;
            }
            return Err(e);
        }
        Ok(needs_flush)
    }

    /// Remove the tracking finalizer from `pods`; which removals succeeded (a pod already gone
    /// counts as done).
    async fn remove_tracking_finalizers(
        &self,
        key: &str,
        pods: &[Arc<Pod>],
    ) -> (Vec<bool>, Option<anyhow::Error>) {
        let uids: Vec<String> = pods.iter().map(|p| uid(p).to_string()).collect();
        self.finalizers.expect(key, &uids);
        let results = futures::future::join_all(pods.iter().map(|p| async move {
            if !has_tracking_finalizer(p) {
                return Ok(false);
            }
            match self.remove_finalizer(p).await {
                Ok(()) => Ok(true),
                Err(e) => {
                    self.finalizers.observed(key, uid(p));
                    if util::is_not_found(&e) {
                        Ok(true)
                    } else {
                        Err(e)
                    }
                }
            }
        }))
        .await;
        let mut ok = Vec::with_capacity(pods.len());
        let mut err = None;
        for r in results {
            match r {
                Ok(done) => ok.push(done),
                Err(e) => {
                    ok.push(false);
                    err.get_or_insert(anyhow::Error::new(e).context("removing tracking finalizer"));
                }
            }
        }
        (ok, err)
    }

    async fn update_status(&self, job: &Job) -> anyhow::Result<Job> {
        let mut j = job.clone();
        normalize_status(&mut j);
        let ns = j.metadata.namespace.clone().unwrap_or_default();
        let name = j.metadata.name.clone().unwrap_or_default();
        let mut updated = self
            .jobs_api(&ns)
            .replace_status(&name, &PostParams::default(), &j)
            .await?;
        // Keep working with the counters as this sync sees them.
        uncounted_mut(&mut updated);
        Ok(updated)
    }

    fn record_job_finished(&self, job: &Job, cond: &JobCondition) {
        if cond.type_ == COMPLETE {
            let succeeded = job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
            if completions(job).is_some_and(|c| succeeded > c) {
                self.recorder.warning(
                    job,
                    "TooManySucceededPods",
                    "Too many succeeded pods running after completion count reached",
                );
            }
            self.recorder.normal(job, "Completed", "Job completed");
        } else {
            self.recorder
                .warning(job, reason_of(cond), message_of(cond).to_string());
        }
    }
}

/// With restartPolicy OnFailure: the container restarts of running pods reach the limit.
fn past_backoff_limit_on_failure(job: &Job, pods: &[Arc<Pod>]) -> bool {
    let restart_policy = spec(job)
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.restart_policy.as_deref());
    if restart_policy != Some("OnFailure") {
        return false;
    }
    let mut restarts: i64 = 0;
    for p in pods {
        if !matches!(phase(p), "Running" | "Pending") {
            continue;
        }
        if let Some(s) = &p.status {
            for cs in s
                .init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
            {
                restarts += i64::from(cs.restart_count);
            }
        }
    }
    let limit = i64::from(backoff_limit(job));
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

fn past_active_deadline(job: &Job, now: Timestamp) -> bool {
    let Some(ads) = spec(job).and_then(|s| s.active_deadline_seconds) else {
        return false;
    };
    let Some(start) = job.status.as_ref().and_then(|s| s.start_time.as_ref()) else {
        return false;
    };
    if suspended(job) {
        return false;
    }
    now.duration_since(start.0) >= SignedDuration::from_secs(ads)
}

/// The finalizer may go when the job is being deleted or finishing, the pod succeeded, or it
/// failed (unless it waits for its replacement to inherit the index failure count).
fn can_remove_finalizer(cx: &SyncCtx, pod: &Pod, failed: bool) -> bool {
    if cx.job.metadata.deletion_timestamp.is_some()
        || cx.finished.is_some()
        || phase(pod) == "Succeeded"
    {
        return true;
    }
    if !failed {
        return false;
    }
    if backoff_limit_per_index(&cx.job).is_some() {
        if let Some(ix) = completion_index(pod) {
            if cx
                .delayed_deletion
                .get(&ix)
                .is_some_and(|p| uid(p) == uid(pod))
            {
                return false;
            }
        }
    }
    true
}

/// Set the final condition once nothing is uncounted or terminating.
fn enact_job_finished(cx: &mut SyncCtx) -> bool {
    let Some(f) = cx.finished.clone() else {
        return false;
    };
    if uncounted_len(&cx.job) > 0 || cx.terminating > 0 {
        return false;
    }
    let st = status_mut(&mut cx.job);
    let conds = st.conditions.get_or_insert_with(Vec::new);
    ensure_condition(conds, &f.type_, &f.status, reason_of(&f), message_of(&f));
    if f.type_ == COMPLETE {
        st.completion_time = f.last_transition_time.clone();
    }
    true
}

/// (`status.completedIndexes`, that plus the indexes of newly succeeded pods).
fn succeeded_indexes(job: &Job, pods: &[Arc<Pod>], n: usize) -> (Intervals, Intervals) {
    let prev = Intervals::parse(
        job.status
            .as_ref()
            .and_then(|s| s.completed_indexes.as_deref())
            .unwrap_or_default(),
        n,
    );
    let mut new: Vec<usize> = pods
        .iter()
        .filter(|p| phase(p) == "Succeeded" && has_tracking_finalizer(p))
        .filter_map(|p| completion_index(p))
        .filter(|i| *i < n)
        .collect();
    new.sort_unstable();
    new.dedup();
    let cur = prev.with_ordered(&new);
    (prev, cur)
}

fn failed_indexes(job: &Job, pods: &[Arc<Pod>], n: usize) -> Intervals {
    let prev = job
        .status
        .as_ref()
        .and_then(|s| s.failed_indexes.as_deref())
        .map(|s| Intervals::parse(s, n))
        .unwrap_or_default();
    let mut new: Vec<usize> = pods
        .iter()
        .filter(|p| has_tracking_finalizer(p) && is_index_failed(job, p))
        .filter_map(|p| completion_index(p))
        .filter(|i| *i < n)
        .collect();
    new.sort_unstable();
    new.dedup();
    prev.with_ordered(&new)
}

/// Per index, the last failed pod whose deletion waits for its replacement to be created.
fn pods_with_delayed_deletion(cx: &SyncCtx) -> HashMap<usize, Arc<Pod>> {
    let active: HashSet<usize> = cx
        .active_pods
        .iter()
        .filter_map(|p| completion_index(p))
        .collect();
    let empty = Intervals::default();
    let failed_ix = cx.failed_indexes.as_ref().unwrap_or(&empty);
    let mut out: HashMap<usize, Arc<Pod>> = HashMap::new();
    for p in cx.valid_pods(None, |p| is_pod_failed(p, &cx.job)) {
        let Some(ix) = completion_index(&p) else {
            continue;
        };
        if cx.succeeded_indexes.has(ix) || failed_ix.has(ix) || active.contains(&ix) {
            continue;
        }
        match out.get(&ix) {
            Some(last) => {
                if index_absolute_failure_count(last) <= index_absolute_failure_count(&p)
                    && finished_time(&p) >= finished_time(last)
                {
                    out.insert(ix, p);
                }
            }
            None => {
                out.insert(ix, p);
            }
        }
    }
    out
}

/// The failure counts a replacement pod for an index starts with.
fn new_index_failure_counts(job: &Job, replaced: Option<&Arc<Pod>>) -> (i32, i32) {
    let Some(p) = replaced else {
        return (0, 0);
    };
    let mut count = index_failure_count(p);
    let mut ignored = parse_count_annotation(p, INDEX_IGNORED_FAILURE_COUNT);
    match pod_failure_policy(job) {
        Some(policy) if !match_pod_failure_policy(policy, p).1 => ignored += 1,
        _ => count += 1,
    }
    (count, ignored)
}

/// The indexes whose back-off has passed; if none, the shortest remaining back-off.
fn creation_info_for_independent_indexes(
    indexes: &[usize],
    delayed: &HashMap<usize, Arc<Pod>>,
    now: Timestamp,
) -> (Vec<usize>, Duration) {
    let mut ready = Vec::new();
    let mut min: Option<Duration> = None;
    for &ix in indexes {
        let remaining = match delayed.get(&ix) {
            None => Duration::ZERO,
            Some(p) => remaining_for_failures(
                index_absolute_failure_count(p) + 1,
                Some(finished_time(p)),
                now,
            ),
        };
        if remaining.is_zero() {
            ready.push(ix);
        } else if min.is_none_or(|m| remaining < m) {
            min = Some(remaining);
        }
    }
    if !ready.is_empty() {
        return (ready, Duration::ZERO);
    }
    (ready, min.unwrap_or(Duration::ZERO))
}

/// The first `count` indexes below `completions` with no active pod, no success and no failure.
fn first_pending_indexes(cx: &SyncCtx, count: usize, completions: usize) -> Vec<usize> {
    if count == 0 {
        return Vec::new();
    }
    let mut active: Vec<usize> = cx
        .active_pods
        .iter()
        .filter_map(|p| completion_index(p))
        .collect();
    active.sort_unstable();
    active.dedup();
    let mut non_pending = cx.succeeded_indexes.with_ordered(&active);
    if only_replace_failed(&cx.job) {
        let mut terminating: Vec<usize> = cx
            .pods
            .iter()
            .filter(|p| is_terminating(p))
            .filter_map(|p| completion_index(p))
            .collect();
        terminating.sort_unstable();
        terminating.dedup();
        non_pending = non_pending.with_ordered(&terminating);
    }
    if let Some(f) = &cx.failed_indexes {
        non_pending = non_pending.merge(f);
    }
    let mut out = Vec::with_capacity(count);
    let mut candidate = 0;
    for &(first, last) in &non_pending.0 {
        while candidate < completions && out.len() < count && candidate < first {
            out.push(candidate);
            candidate += 1;
        }
        if candidate < last + 1 {
            candidate = last + 1;
        }
    }
    while candidate < completions && out.len() < count {
        out.push(candidate);
        candidate += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{
        JobSpec, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyOnPodConditionsPattern,
        PodFailurePolicyRule, SuccessPolicyRule,
    };
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodCondition, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, phase: &str, index: Option<usize>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                finalizers: Some(vec![TRACKING_FINALIZER.into()]),
                annotations: index
                    .map(|i| BTreeMap::from([(COMPLETION_INDEX.into(), i.to_string())])),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        })
    }

    fn failed_with(name: &str, code: i32, at: Timestamp) -> Arc<Pod> {
        let mut p = (*pod(name, "Failed", None)).clone();
        p.status = Some(PodStatus {
            phase: Some("Failed".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "main".into(),
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: code,
                        finished_at: Some(Time(at)),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        Arc::new(p)
    }

    fn job(indexed: bool, completions: Option<i32>) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some("pi".into()),
                namespace: Some("ns".into()),
                uid: Some("job-uid".into()),
                ..Default::default()
            },
            spec: Some(JobSpec {
                completions,
                parallelism: Some(2),
                completion_mode: Some(if indexed { "Indexed" } else { "NonIndexed" }.into()),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[tokio::test]
    async fn delayed_adds_keep_one_timer_per_key() {
        let q = Queue::new("t");
        let d = Delayed::new(q.clone());
        d.add_after("a", Duration::from_millis(30));
        // Later than the pending one: covered by it.
        d.add_after("a", Duration::from_millis(5000));
        assert_eq!(d.timers.lock().len(), 1);
        d.add_after("b", Duration::ZERO);
        assert_eq!(q.len(), 1, "no delay: queued at once");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(q.len(), 2);
        assert!(d.timers.lock().is_empty());
    }

    #[test]
    fn intervals_parse_merge_and_print_like_kubernetes() {
        let iv = Intervals::parse("1,3-5,7,9-20", 10);
        assert_eq!(iv.0, vec![(1, 1), (3, 5), (7, 7), (9, 9)]);
        assert_eq!(iv.to_string(), "1,3-5,7,9");
        assert_eq!(iv.total(), 6);
        assert!(iv.has(4) && iv.has(9) && !iv.has(2) && !iv.has(8) && !iv.has(100));
        // Two adjacent indexes print with a comma, three or more as a range.
        assert_eq!(
            Intervals::default().with_ordered(&[0, 1]).to_string(),
            "0,1"
        );
        assert_eq!(
            Intervals::default().with_ordered(&[0, 1, 2]).to_string(),
            "0-2"
        );
        let merged = iv.with_ordered(&[2, 6, 8]);
        assert_eq!(merged.to_string(), "1-9");
        assert_eq!(Intervals::parse("x,2,4-y,5", 10).to_string(), "2,5");
        assert_eq!(Intervals::parse("", 10).total(), 0);
        // Adjacent intervals in the input collapse.
        assert_eq!(Intervals::parse("0,1,2", 10).0, vec![(0, 2)]);
    }

    #[test]
    fn pending_indexes_skip_active_succeeded_and_failed() {
        let j = job(true, Some(6));
        let cx = SyncCtx {
            job: j.clone(),
            pods: vec![],
            active_pods: vec![pod("a", "Running", Some(1))],
            finished: None,
            succeeded: 0,
            failed: 0,
            prev_succeeded_indexes: Intervals::default(),
            succeeded_indexes: Intervals::parse("0,3", 6),
            failed_indexes: Some(Intervals::parse("4", 6)),
            new_backoff: BackoffRecord::default(),
            expected_rm: HashSet::new(),
            uncounted_succeeded: HashSet::new(),
            uncounted_failed: HashSet::new(),
            delayed_deletion: HashMap::new(),
            terminating: 0,
            ready: 0,
        };
        assert_eq!(first_pending_indexes(&cx, 5, 6), vec![2, 5]);
        assert_eq!(first_pending_indexes(&cx, 1, 6), vec![2]);
        assert_eq!(first_pending_indexes(&cx, 0, 6), Vec::<usize>::new());
    }

    #[test]
    fn duplicated_and_invalid_indexes_are_removed_first() {
        let j = job(true, Some(3));
        let pods = vec![
            pod("a", "Running", Some(0)),
            pod("b", "Pending", Some(0)),
            pod("c", "Running", None),
            pod("d", "Running", Some(7)),
            pod("e", "Running", Some(1)),
        ];
        let rm = active_pods_for_removal(&j, &pods, 0);
        let mut names: Vec<_> = rm
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        names.sort();
        // The pending duplicate of index 0 goes, the running one stays.
        assert_eq!(names, vec!["b", "c", "d"]);
        // NonIndexed: unscheduled/pending pods go before running ones.
        let j = job(false, Some(3));
        let mut running = (*pod("r", "Running", None)).clone();
        running.spec.as_mut().unwrap().node_name = Some("n1".into());
        let pods = vec![Arc::new(running), pod("p", "Pending", None)];
        let rm = active_pods_for_removal(&j, &pods, 1);
        assert_eq!(rm[0].metadata.name.as_deref(), Some("p"));
    }

    #[test]
    fn pod_failure_policy_rules_match_in_order() {
        let policy = PodFailurePolicy {
            rules: vec![
                PodFailurePolicyRule {
                    action: "Ignore".into(),
                    on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                        type_: "DisruptionTarget".into(),
                        status: "True".into(),
                    }]),
                    ..Default::default()
                },
                PodFailurePolicyRule {
                    action: "FailJob".into(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: None,
                        operator: "In".into(),
                        values: vec![42],
                    }),
                    ..Default::default()
                },
                PodFailurePolicyRule {
                    action: "Count".into(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: Some("main".into()),
                        operator: "NotIn".into(),
                        values: vec![1],
                    }),
                    ..Default::default()
                },
            ],
        };
        let now = Timestamp::now();
        let (msg, count, action) = match_pod_failure_policy(&policy, &failed_with("p", 42, now));
        assert_eq!(
            msg.as_deref(),
            Some("Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1")
        );
        assert!(count);
        assert_eq!(action, Some("FailJob"));
        assert_eq!(
            match_pod_failure_policy(&policy, &failed_with("p", 3, now)),
            (None, true, Some("Count"))
        );
        // Exit code 1 matches no rule: counted, no action.
        assert_eq!(
            match_pod_failure_policy(&policy, &failed_with("p", 1, now)),
            (None, true, None)
        );
        let mut disrupted = (*failed_with("p", 1, now)).clone();
        disrupted.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            ..Default::default()
        }]);
        assert_eq!(
            match_pod_failure_policy(&policy, &disrupted),
            (None, false, Some("Ignore"))
        );
    }

    #[test]
    fn success_policy_rules() {
        let policy = SuccessPolicy {
            rules: vec![
                SuccessPolicyRule {
                    succeeded_indexes: Some("0-2".into()),
                    succeeded_count: Some(2),
                },
                SuccessPolicyRule {
                    succeeded_indexes: None,
                    succeeded_count: Some(4),
                },
            ],
        };
        let s = |v: &[usize]| Intervals::default().with_ordered(v);
        assert_eq!(match_success_policy(Some(&policy), 10, &s(&[0])), None);
        assert_eq!(
            match_success_policy(Some(&policy), 10, &s(&[0, 2])).as_deref(),
            Some("Matched rules at index 0")
        );
        assert_eq!(
            match_success_policy(Some(&policy), 10, &s(&[2, 5, 6, 7])).as_deref(),
            Some("Matched rules at index 1")
        );
        assert_eq!(match_success_policy(None, 10, &s(&[0, 1, 2])), None);
    }

    #[test]
    fn backoff_doubles_from_ten_seconds_and_resets_on_success() {
        let now = Timestamp::now();
        assert_eq!(remaining_for_failures(0, Some(now), now), Duration::ZERO);
        assert_eq!(
            remaining_for_failures(1, Some(now), now),
            Duration::from_secs(10)
        );
        assert_eq!(
            remaining_for_failures(3, Some(now), now),
            Duration::from_secs(40)
        );
        assert_eq!(
            remaining_for_failures(20, Some(now), now),
            MAX_POD_FAILURE_BACKOFF
        );
        let earlier = now - SignedDuration::from_secs(15);
        assert_eq!(
            remaining_for_failures(2, Some(earlier), now),
            Duration::from_secs(5)
        );
        assert_eq!(
            remaining_for_failures(1, Some(earlier), now),
            Duration::ZERO
        );

        let t0 = now - SignedDuration::from_secs(30);
        let r = BackoffRecord::default()
            .next(&[], &[failed_with("a", 1, t0), failed_with("b", 1, now)]);
        assert_eq!(r.failures_after_last_success, 2);
        assert_eq!(r.last_failure_time, Some(now));
        // A later success resets the count; failures after it still count.
        let mut ok = (*pod("s", "Succeeded", None)).clone();
        ok.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "False".into(),
            last_transition_time: Some(Time(t0 + SignedDuration::from_secs(10))),
            ..Default::default()
        }]);
        let r2 = r.next(
            &[Arc::new(ok)],
            &[failed_with("c", 1, t0), failed_with("d", 1, now)],
        );
        assert_eq!(r2.failures_after_last_success, 1);
        assert_eq!(r2.last_failure_time, Some(now));
    }

    #[test]
    fn conditions_are_appended_only_when_meaningful() {
        let mut list = Vec::new();
        assert!(!ensure_condition(
            &mut list,
            SUSPENDED,
            "False",
            "JobResumed",
            "Job resumed"
        ));
        assert!(list.is_empty());
        assert!(ensure_condition(
            &mut list,
            SUSPENDED,
            "True",
            "JobSuspended",
            "Job suspended"
        ));
        assert!(!ensure_condition(
            &mut list,
            SUSPENDED,
            "True",
            "JobSuspended",
            "Job suspended"
        ));
        assert!(ensure_condition(
            &mut list,
            SUSPENDED,
            "False",
            "JobResumed",
            "Job resumed"
        ));
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].status, "False");
        assert_eq!(list[0].reason.as_deref(), Some("JobResumed"));
    }

    #[test]
    fn uncounted_pods_move_to_counters_once_their_finalizer_is_gone() {
        let mut st = JobStatus {
            succeeded: Some(1),
            uncounted_terminated_pods: Some(UncountedTerminatedPods {
                succeeded: Some(vec!["a".into(), "b".into()]),
                failed: Some(vec!["c".into()]),
            }),
            ..Default::default()
        };
        let with = HashSet::from(["b".to_string()]);
        assert!(clean_uncounted(&mut st, &with));
        assert_eq!(st.succeeded, Some(2));
        assert_eq!(st.failed, Some(1));
        let u = st.uncounted_terminated_pods.as_ref().unwrap();
        assert_eq!(u.succeeded.as_deref(), Some(&["b".to_string()][..]));
        assert!(!clean_uncounted(&mut st, &with));
    }

    #[test]
    fn pod_names_and_deleted_pods() {
        assert_eq!(generate_name_with_index("pi", 3), "pi-3-");
        let long = "x".repeat(70);
        let g = generate_name_with_index(&long, 12);
        assert_eq!(g.len(), 58);
        assert!(g.ends_with("-12-"));
        let j = job(false, Some(1));
        let mut deleting = (*pod("d", "Running", None)).clone();
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        assert!(is_pod_failed(&deleting, &j));
        assert!(is_terminating(&deleting));
        let mut j2 = j.clone();
        j2.spec.as_mut().unwrap().pod_replacement_policy = Some("Failed".into());
        assert!(!is_pod_failed(&deleting, &j2));
    }
}
