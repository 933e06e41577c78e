//! The CronJob controller (Kubernetes v1.32's pkg/controller/cronjob, "v2"): creates a Job
//! named `<cronjob>-<scheduled minutes since the epoch>` for the most recent unmet schedule
//! time (within `startingDeadlineSeconds`), honouring `concurrencyPolicy` and `suspend`, tracks
//! `status.active`, `lastScheduleTime` and `lastSuccessfulTime`, keeps the finished-job history
//! limits, and requeues each CronJob for its next schedule time. Schedules are parsed as
//! robfig/cron's standard parser does (five fields or a descriptor such as `@hourly`, with
//! `TZ=`/`CRON_TZ=` or `spec.timeZone` read from the system zoneinfo).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use capstan_runtime::{Change, Informer, Queue, Recorder};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::civil::{Date, DateTime};
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, PostParams, PropagationPolicy};
use kube::{Api, Client};
use parking_lot::Mutex;

use crate::job::Delayed;
use crate::util;
use crate::Ctx;

/// The annotation holding the time a Job was scheduled for (RFC 3339, in the CronJob's zone).
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// Requeue a little after the schedule time, for clock skew.
const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);

// =============================================================================================
// Time zones (Go's time.LoadLocation over the system zoneinfo).

static ZONES: LazyLock<Mutex<HashMap<String, TimeZone>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn zoneinfo_dirs() -> Vec<String> {
    let mut dirs = Vec::new();
    if let Ok(d) = std::env::var("ZONEINFO") {
        if !d.is_empty() {
            dirs.push(format!("{}/", d.trim_end_matches('/')));
        }
    }
    dirs.extend(
        [
            "/usr/share/zoneinfo/",
            "/usr/share/lib/zoneinfo/",
            "/usr/lib/locale/TZ/",
            "/etc/zoneinfo/",
        ]
        .map(String::from),
    );
    dirs
}

fn read_zone(name: &str) -> Option<TimeZone> {
    zoneinfo_dirs().iter().find_map(|d| {
        let data = std::fs::read(format!("{d}{name}")).ok()?;
        TimeZone::tzif(name, &data).ok()
    })
}

/// The controller's local zone (Go's time.Local: `TZ`, else /etc/localtime, else UTC).
fn local_zone() -> TimeZone {
    static LOCAL: OnceLock<TimeZone> = OnceLock::new();
    LOCAL
        .get_or_init(|| match std::env::var("TZ") {
            Err(_) => std::fs::read("/etc/localtime")
                .ok()
                .and_then(|d| TimeZone::tzif("Local", &d).ok())
                .unwrap_or(TimeZone::UTC),
            Ok(tz) => {
                let tz = tz.strip_prefix(':').unwrap_or(&tz).to_string();
                if tz.is_empty() || tz == "UTC" {
                    TimeZone::UTC
                } else if tz.starts_with('/') {
                    std::fs::read(&tz)
                        .ok()
                        .and_then(|d| TimeZone::tzif("Local", &d).ok())
                        .unwrap_or(TimeZone::UTC)
                } else {
                    read_zone(&tz).unwrap_or(TimeZone::UTC)
                }
            }
        })
        .clone()
}

/// Load a named zone as Go's `time.LoadLocation` does; `Err` holds Go's message.
pub fn load_location(name: &str) -> Result<TimeZone, String> {
    match name {
        "" | "UTC" => return Ok(TimeZone::UTC),
        "Local" => return Ok(local_zone()),
        _ => {}
    }
    if name.split('/').any(|p| p == "..") || name.starts_with('/') || name.starts_with('\\') {
        return Err("time: invalid location name".into());
    }
    if let Some(tz) = ZONES.lock().get(name) {
        return Ok(tz.clone());
    }
    let tz = read_zone(name).ok_or_else(|| format!("unknown time zone {name}"))?;
    ZONES.lock().insert(name.to_string(), tz.clone());
    Ok(tz)
}

// =============================================================================================
// Cron schedules (robfig/cron v3's standard parser and `Next`).

use capstan_api::validation::cron::{parse_spec, Spec, STAR};

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    /// Bit sets of the allowed minutes, hours, days of month, months and weekdays (`STAR`
    /// marks a field given as `*` or `?`).
    Spec {
        minute: u64,
        hour: u64,
        dom: u64,
        month: u64,
        dow: u64,
    },
    /// `@every <duration>`, in whole seconds.
    Every(i64),
}

/// A parsed schedule.
#[derive(Clone, Debug)]
pub struct Schedule {
    kind: Kind,
    tz: TimeZone,
}

/// Parse a schedule as `cron.ParseStandard`; `Err` holds its message.
pub fn parse_standard(spec: &str) -> Result<Schedule, String> {
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let mut spec = spec;
    let mut tz = local_zone();
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let eq = spec.find('=').unwrap_or(0);
        let sp = spec.find(' ').unwrap_or(spec.len());
        let name = &spec[eq + 1..sp];
        tz = load_location(name).map_err(|e| format!("provided bad location {name}: {e}"))?;
        spec = spec[sp..].trim();
    }
    let kind = match parse_spec(spec)? {
        Spec::Fields {
            minute,
            hour,
            dom,
            month,
            dow,
        } => Kind::Spec {
            minute,
            hour,
            dom,
            month,
            dow,
        },
        Spec::Every(secs) => Kind::Every((secs.floor() as i64).max(1)),
    };
    Ok(Schedule { kind, tz })
}

fn bit(set: u64, i: i8) -> bool {
    (0..63).contains(&i) && set & (1 << i) != 0
}

impl Schedule {
    fn civil(&self, secs: i64) -> Option<DateTime> {
        Some(self.tz.to_datetime(Timestamp::from_second(secs).ok()?))
    }

    /// Go's `time.Date` in the schedule's zone (months and days overflow into the next ones;
    /// a wall time in a DST gap or fold resolves to the later instant).
    fn date(&self, y: i16, mo: i8, d: i8, h: i8, mi: i8, s: i8) -> Option<i64> {
        let m0 = i32::from(mo) - 1;
        let year = i32::from(y) + m0.div_euclid(12);
        let month = (m0.rem_euclid(12) + 1) as i8;
        let first = Date::new(i16::try_from(year).ok()?, month, 1).ok()?;
        let day = first
            .checked_add(SignedDuration::from_hours(24 * (i64::from(d) - 1)))
            .ok()?;
        let dt = day.at(h, mi, s, 0);
        let ts = self.tz.to_ambiguous_timestamp(dt).later().ok()?;
        Some(ts.as_second())
    }

    /// The first schedule time after `after` (None: none within five years).
    pub fn next(&self, after: Timestamp) -> Option<Timestamp> {
        let (minute, hour, dom, month, dow) = match self.kind {
            Kind::Every(secs) => {
                return after
                    .as_second()
                    .checked_add(secs)
                    .and_then(|s| Timestamp::from_second(s).ok())
            }
            Kind::Spec {
                minute,
                hour,
                dom,
                month,
                dow,
            } => (minute, hour, dom, month, dow),
        };
        let day_matches = |c: &DateTime| {
            let dom_match = bit(dom, c.day());
            let dow_match = bit(dow, c.weekday().to_sunday_zero_offset());
            if dom & STAR != 0 || dow & STAR != 0 {
                dom_match && dow_match
            } else {
                dom_match || dow_match
            }
        };
        let mut t = after.as_second() + 1;
        let mut added = false;
        let year_limit = i32::from(self.civil(t)?.year()) + 5;
        'wrap: loop {
            if i32::from(self.civil(t)?.year()) > year_limit {
                return None;
            }
            loop {
                let c = self.civil(t)?;
                if bit(month, c.month()) {
                    break;
                }
                if !added {
                    added = true;
                    t = self.date(c.year(), c.month(), 1, 0, 0, 0)?;
                }
                let c = self.civil(t)?;
                t = self.date(
                    c.year(),
                    c.month() + 1,
                    c.day(),
                    c.hour(),
                    c.minute(),
                    c.second(),
                )?;
                if self.civil(t)?.month() == 1 {
                    continue 'wrap;
                }
            }
            loop {
                let c = self.civil(t)?;
                if day_matches(&c) {
                    break;
                }
                if !added {
                    added = true;
                    t = self.date(c.year(), c.month(), c.day(), 0, 0, 0)?;
                }
                let c = self.civil(t)?;
                t = self.date(
                    c.year(),
                    c.month(),
                    c.day() + 1,
                    c.hour(),
                    c.minute(),
                    c.second(),
                )?;
                // A DST change can move midnight: get back to it.
                let h = i64::from(self.civil(t)?.hour());
                if h != 0 {
                    t += if h > 12 { (24 - h) * 3600 } else { -h * 3600 };
                }
                if self.civil(t)?.day() == 1 {
                    continue 'wrap;
                }
            }
            loop {
                let c = self.civil(t)?;
                if bit(hour, c.hour()) {
                    break;
                }
                if !added {
                    added = true;
                    t = self.date(c.year(), c.month(), c.day(), c.hour(), 0, 0)?;
                }
                t += 3600;
                if self.civil(t)?.hour() == 0 {
                    continue 'wrap;
                }
            }
            loop {
                let c = self.civil(t)?;
                if bit(minute, c.minute()) {
                    break;
                }
                if !added {
                    added = true;
                    t -= t.rem_euclid(60);
                }
                t += 60;
                if self.civil(t)?.minute() == 0 {
                    continue 'wrap;
                }
            }
            loop {
                if self.civil(t)?.second() == 0 {
                    break;
                }
                added = true;
                t += 1;
                if self.civil(t)?.second() == 0 {
                    continue 'wrap;
                }
            }
            return Timestamp::from_second(t).ok();
        }
    }
}

// =============================================================================================
// Schedule arithmetic (Kubernetes' cronjob utils).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missed {
    None,
    Few,
    Many,
}

const TOO_CLOSE: &str = "time difference between two schedules is less than 1 second";

/// The CronJob's fields the schedule arithmetic reads.
#[derive(Debug, Clone, Copy)]
struct Times {
    created: Timestamp,
    last_schedule: Option<Timestamp>,
    starting_deadline_seconds: Option<i64>,
}

impl Times {
    fn of(cj: &CronJob) -> Times {
        Times {
            created: cj
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
            last_schedule: cj
                .status
                .as_ref()
                .and_then(|s| s.last_schedule_time.as_ref())
                .map(|t| t.0),
            starting_deadline_seconds: cj.spec.as_ref().and_then(|s| s.starting_deadline_seconds),
        }
    }
}

/// (the last schedule time or the creation time, the most recent time a Job should have been
/// created at or before `now`, how many schedules were missed).
fn most_recent_schedule_time(
    t: Times,
    now: Timestamp,
    sched: &Schedule,
    include_deadline: bool,
) -> (Timestamp, Option<Timestamp>, Missed, Option<String>) {
    let mut earliest = t.last_schedule.unwrap_or(t.created);
    if let (true, Some(sds)) = (include_deadline, t.starting_deadline_seconds) {
        let deadline = now
            .checked_sub(SignedDuration::from_secs(sds))
            .unwrap_or(Timestamp::MIN);
        if deadline > earliest {
            earliest = deadline;
        }
    }
    let Some(t1) = sched.next(earliest) else {
        return (earliest, None, Missed::None, Some(TOO_CLOSE.into()));
    };
    if now < t1 {
        return (earliest, None, Missed::None, None);
    }
    let Some(t2) = sched.next(t1) else {
        return (earliest, None, Missed::None, Some(TOO_CLOSE.into()));
    };
    if now < t2 {
        return (earliest, Some(t1), Missed::None, None);
    }
    let between_ms = t2.duration_since(t1).as_millis();
    let between = ((between_ms + 500).div_euclid(1000)) as i64;
    if between < 1 {
        return (earliest, None, Missed::None, Some(TOO_CLOSE.into()));
    }
    let elapsed = now.duration_since(t1).as_secs();
    let missed_count = elapsed / between + 1;
    let back = (missed_count - 2).saturating_mul(between);
    let potential_earliest = t1
        .checked_add(SignedDuration::from_secs(back))
        .unwrap_or(t1);
    let mut most_recent = None;
    let mut cur = sched.next(potential_earliest);
    while let Some(c) = cur.filter(|c| *c <= now) {
        most_recent = Some(c);
        cur = sched.next(c);
    }
    let missed = if missed_count > 100 {
        Missed::Many
    } else if missed_count > 0 {
        Missed::Few
    } else {
        Missed::None
    };
    (earliest, most_recent, missed, None)
}

/// How long until the next schedule time (plus a small delta); None if there is none.
fn next_schedule_time_duration(t: Times, now: Timestamp, sched: &Schedule) -> Option<Duration> {
    let (earliest, most_recent, missed, err) = most_recent_schedule_time(t, now, sched, false);
    let from = match (err, most_recent) {
        (Some(_), _) => now,
        (None, Some(m)) => m,
        (None, None) if missed == Missed::None => earliest,
        (None, None) => now,
    };
    let next = sched.next(from)?;
    let d = next.duration_since(now) + SignedDuration::try_from(NEXT_SCHEDULE_DELTA).ok()?;
    Some(d.try_into().unwrap_or(Duration::ZERO))
}

// =============================================================================================
// The controller.

pub fn start(ctx: &Ctx) {
    let queue = Queue::new("cronjob");
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        cronjobs: ctx.informers.get::<CronJob>(),
        jobs: ctx.informers.get::<Job>(),
        queue: queue.clone(),
        delayed: Delayed::new(queue),
        recorder: ctx.recorder("cronjob-controller"),
    });
    let h = c.clone();
    c.cronjobs.on_change(move |ch| match ch {
        Change::Add(cj) | Change::Delete(cj) => h.queue.add(key_of(&***cj)),
        Change::Update { old, new } => h.cronjob_updated(old, new),
    });
    let h = c.clone();
    c.jobs.on_change(move |ch| match ch {
        Change::Add(j) => {
            if j.metadata.deletion_timestamp.is_some() {
                h.job_deleted(j);
            } else if let Some(cj) = h.owner(j) {
                h.queue.add(key_of(&*cj));
            }
        }
        Change::Update { old, new } => h.job_updated(old, new),
        Change::Delete(j) => h.job_deleted(j),
    });
    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        c.jobs.wait_synced().await;
        c.cronjobs.wait_synced().await;
        let w = c.clone();
        c.queue.run_workers(workers, move |key| {
            let c = w.clone();
            async move {
                if let Some(d) = c.sync(&key).await? {
                    c.delayed.add_after(key, d);
                }
                Ok(())
            }
        });
    });
}

struct Controller {
    client: Client,
    cronjobs: Arc<Informer<CronJob>>,
    jobs: Arc<Informer<Job>>,
    queue: Arc<Queue>,
    recorder: Recorder,
    delayed: Delayed,
}

fn key_of<K: kube::Resource>(o: &K) -> String {
    capstan_runtime::key(
        o.meta().namespace.as_deref(),
        o.meta().name.as_deref().unwrap_or_default(),
    )
}

fn job_finished_type(j: &Job) -> Option<&str> {
    crate::job::finished_condition(j)
}

fn in_active_list(cj: &CronJob, uid: &str) -> bool {
    active_list(cj)
        .iter()
        .any(|r| r.uid.as_deref() == Some(uid))
}

fn active_list(cj: &CronJob) -> &[ObjectReference] {
    cj.status
        .as_ref()
        .and_then(|s| s.active.as_deref())
        .unwrap_or_default()
}

fn delete_from_active_list(cj: &mut CronJob, uid: &str) {
    let st = cj.status.get_or_insert_with(Default::default);
    if let Some(a) = st.active.as_mut() {
        a.retain(|r| r.uid.as_deref() != Some(uid));
    }
}

fn job_name(cj_name: &str, scheduled: Timestamp) -> String {
    format!("{cj_name}-{}", scheduled.as_second().div_euclid(60))
}

/// The schedule with the CronJob's time zone, as the controller parses it (warning when the
/// schedule itself carries TZ).
fn format_schedule(cj: &CronJob, recorder: Option<&Recorder>) -> String {
    let spec = cj.spec.as_ref();
    let schedule = spec.map(|s| s.schedule.as_str()).unwrap_or_default();
    if schedule.contains("TZ") {
        if let Some(r) = recorder {
            r.warning(
                cj,
                "UnsupportedSchedule",
                format!("CRON_TZ or TZ used in schedule {schedule:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details"),
            );
        }
        return schedule.to_string();
    }
    if let Some(tz) = spec.and_then(|s| s.time_zone.as_deref()) {
        if load_location(tz).is_err() {
            return schedule.to_string();
        }
        return format!("TZ={tz} {schedule}");
    }
    schedule.to_string()
}

/// RFC 3339 as Go formats it (`Z` for UTC).
fn rfc3339(t: Timestamp, tz: &TimeZone) -> String {
    let z = t.to_zoned(tz.clone());
    if z.offset().seconds() == 0 {
        z.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        z.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
    }
}

/// The Job a CronJob creates for `scheduled`.
fn job_from_template(cj: &CronJob, scheduled: Timestamp) -> Result<Job, String> {
    let spec = cj.spec.clone().unwrap_or_default();
    let tm = spec.job_template.metadata.clone().unwrap_or_default();
    let tz = load_location(spec.time_zone.as_deref().unwrap_or_default())?;
    let mut annotations = tm.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_TIMESTAMP.into(), rfc3339(scheduled, &tz));
    let name = cj.metadata.name.as_deref().unwrap_or_default();
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(job_name(name, scheduled)),
            namespace: cj.metadata.namespace.clone(),
            labels: tm.labels.filter(|l| !l.is_empty()),
            annotations: Some(annotations),
            owner_references: Some(vec![util::owner_ref(cj)]),
            ..Default::default()
        },
        spec: Some(spec.job_template.spec.unwrap_or_default()),
        status: None,
    })
}

fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..Default::default()
    }
}

fn error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        e => e.to_string(),
    }
}

/// Oldest first by start time (unstarted last), then by name.
fn by_start_time(a: &Job, b: &Job) -> std::cmp::Ordering {
    let st = |j: &Job| {
        j.status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0)
    };
    match (st(a), st(b)) {
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (Some(_), None) => std::cmp::Ordering::Less,
        (x, y) if x == y => a.metadata.name.cmp(&b.metadata.name),
        (x, y) => x.cmp(&y),
    }
}

/// What a sync decided about the CronJob.
struct Outcome {
    requeue: Option<Duration>,
    update_status: bool,
    error: Option<anyhow::Error>,
}

impl Controller {
    fn cronjobs_api(&self, ns: &str) -> Api<CronJob> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn jobs_api(&self, ns: &str) -> Api<Job> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn resolve(&self, ns: &str, r: &OwnerReference) -> Option<Arc<CronJob>> {
        if r.kind != "CronJob" {
            return None;
        }
        self.cronjobs
            .get(ns, &r.name)
            .filter(|cj| cj.metadata.uid.as_deref() == Some(&r.uid))
    }

    fn owner(&self, j: &Job) -> Option<Arc<CronJob>> {
        let r = util::controller_ref(&j.metadata)?;
        self.resolve(j.metadata.namespace.as_deref().unwrap_or_default(), r)
    }

    fn job_updated(&self, old: &Job, new: &Job) {
        if old.metadata.resource_version == new.metadata.resource_version {
            return;
        }
        let cur = util::controller_ref(&new.metadata);
        let prev = util::controller_ref(&old.metadata);
        if cur != prev {
            if let Some(cj) = self.owner(old) {
                self.queue.add(key_of(&*cj));
            }
        }
        if let Some(cj) = self.owner(new) {
            self.queue.add(key_of(&*cj));
        }
    }

    fn job_deleted(&self, j: &Job) {
        if let Some(cj) = self.owner(j) {
            self.queue.add(key_of(&*cj));
        }
    }

    /// A new schedule or time zone: requeue for its next time; anything else: sync now.
    fn cronjob_updated(&self, old: &CronJob, new: &CronJob) {
        let sched = |c: &CronJob| {
            c.spec
                .as_ref()
                .map(|s| (s.schedule.clone(), s.time_zone.clone()))
        };
        let key = key_of(new);
        if sched(old) == sched(new) {
            self.queue.add(key);
            return;
        }
        match parse_standard(&format_schedule(new, None)) {
            Err(_) => {
                let schedule = new
                    .spec
                    .as_ref()
                    .map(|s| s.schedule.clone())
                    .unwrap_or_default();
                self.recorder.warning(
                    new,
                    "UnParseableCronJobSchedule",
                    format!("unparseable schedule for cronjob: {schedule}"),
                );
            }
            Ok(s) => match next_schedule_time_duration(Times::of(new), Timestamp::now(), &s) {
                Some(d) => self.delayed.add_after(key, d),
                None => self.queue.add(key),
            },
        }
    }

    async fn sync(&self, key: &str) -> anyhow::Result<Option<Duration>> {
        let (ns, name) = capstan_runtime::split_key(key);
        let Some(cj) = self.cronjobs.get(ns, name) else {
            return Ok(None);
        };
        // Every job this CronJob controls (also those its template no longer labels).
        let mut jobs: Vec<Arc<Job>> = Vec::new();
        self.jobs.for_each_in(ns, |j| {
            if util::controller_ref(&j.metadata).is_some_and(|r| r.name == name) {
                jobs.push(j.clone());
            }
        });
        let mut copy = (*cj).clone();
        let cleaned = self.cleanup_finished_jobs(&mut copy, &jobs).await;
        let out = self.sync_cronjob(&mut copy, &jobs).await;
        if cleaned || out.update_status {
            let st = copy.status.get_or_insert_with(Default::default);
            if st.active.as_ref().is_some_and(Vec::is_empty) {
                st.active = None;
            }
            self.cronjobs_api(ns)
                .replace_status(name, &PostParams::default(), &copy)
                .await
                .context("updating CronJob status")?;
        }
        if out.requeue.is_some() {
            return Ok(out.requeue);
        }
        match out.error {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    async fn sync_cronjob(&self, cj: &mut CronJob, jobs: &[Arc<Job>]) -> Outcome {
        let mut out = Outcome {
            requeue: None,
            update_status: false,
            error: None,
        };
        let now = Timestamp::now();
        let ns = cj.metadata.namespace.clone().unwrap_or_default();
        let name = cj.metadata.name.clone().unwrap_or_default();
        let children: HashSet<String> =
            jobs.iter().filter_map(|j| j.metadata.uid.clone()).collect();
        for j in jobs {
            let juid = j.metadata.uid.as_deref().unwrap_or_default();
            let jname = j.metadata.name.as_deref().unwrap_or_default();
            let found = in_active_list(cj, juid);
            let finished = job_finished_type(j);
            if !found && finished.is_none() {
                // Maybe our cache of the CronJob is older than the Job: read it fresh.
                match self.cronjobs_api(&ns).get(&name).await {
                    Err(e) => {
                        out.error = Some(e.into());
                        return out;
                    }
                    Ok(fresh) if in_active_list(&fresh, juid) => {
                        *cj = fresh;
                        continue;
                    }
                    Ok(_) => {}
                }
                self.recorder.warning(
                    &*cj,
                    "UnexpectedJob",
                    format!("Saw a job that the controller did not create or forgot: {jname}"),
                );
            } else if let (true, Some(status)) = (found, finished) {
                delete_from_active_list(cj, juid);
                self.recorder.normal(
                    &*cj,
                    "SawCompletedJob",
                    format!("Saw completed job: {jname}, status: {status}"),
                );
                out.update_status = true;
            } else if finished == Some("Complete") {
                let completed = j.status.as_ref().and_then(|s| s.completion_time.clone());
                let st = cj.status.get_or_insert_with(Default::default);
                match (&st.last_successful_time, &completed) {
                    (None, _) => {
                        st.last_successful_time = completed;
                        out.update_status = true;
                    }
                    (Some(last), Some(c)) if c.0 > last.0 => {
                        st.last_successful_time = completed;
                        out.update_status = true;
                    }
                    _ => {}
                }
            }
        }

        // Active jobs that are gone for good leave the active list.
        for r in active_list(cj).to_vec() {
            let ruid = r.uid.clone().unwrap_or_default();
            if children.contains(&ruid) {
                continue;
            }
            let rns = r.namespace.clone().unwrap_or_else(|| ns.clone());
            let rname = r.name.clone().unwrap_or_default();
            match self.jobs_api(&rns).get(&rname).await {
                Err(e) if util::is_not_found(&e) => {
                    self.recorder.normal(
                        &*cj,
                        "MissingJob",
                        format!("Active job went missing: {rname}"),
                    );
                    delete_from_active_list(cj, &ruid);
                    out.update_status = true;
                }
                Err(e) => {
                    out.error = Some(e.into());
                    return out;
                }
                Ok(_) => {}
            }
        }

        if cj.metadata.deletion_timestamp.is_some() {
            return out;
        }
        let spec = cj.spec.clone().unwrap_or_default();
        if let Some(tz) = spec.time_zone.as_deref() {
            if let Err(e) = load_location(tz) {
                self.recorder.warning(
                    &*cj,
                    "UnknownTimeZone",
                    format!("invalid timeZone: {tz:?}: {e}"),
                );
                return out;
            }
        }
        if spec.suspend == Some(true) {
            return out;
        }
        let sched = match parse_standard(&format_schedule(cj, Some(&self.recorder))) {
            Ok(s) => s,
            Err(e) => {
                self.recorder.warning(
                    &*cj,
                    "UnparseableSchedule",
                    format!("unparseable schedule: {:?} : {e}", spec.schedule),
                );
                return out;
            }
        };
        let times = Times::of(cj);
        let (_, most_recent, missed, err) = most_recent_schedule_time(times, now, &sched, true);
        let scheduled = match (most_recent.filter(|t| *t <= now), err) {
            (None, Some(e)) => {
                self.recorder.warning(
                    &*cj,
                    "InvalidSchedule",
                    format!("invalid schedule: {} : {e}", spec.schedule),
                );
                return out;
            }
            (None, None) => {
                out.requeue = next_schedule_time_duration(times, now, &sched);
                return out;
            }
            (Some(t), _) => {
                if missed == Missed::Many {
                    self.recorder.warning(
                        &*cj,
                        "TooManyMissedTimes",
                        "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
                    );
                }
                t
            }
        };
        out.requeue = next_schedule_time_duration(times, now, &sched);

        if let Some(sds) = spec.starting_deadline_seconds {
            let too_late = scheduled
                .checked_add(SignedDuration::from_secs(sds))
                .is_ok_and(|t| t < now);
            if too_late {
                let when = scheduled
                    .to_zoned(TimeZone::UTC)
                    .strftime("%a, %d %b %Y %H:%M:%S %z")
                    .to_string();
                self.recorder.warning(
                    &*cj,
                    "MissSchedule",
                    format!("Missed scheduled time to start a job: {when}"),
                );
                return out;
            }
        }
        let jname = job_name(&name, scheduled);
        let already = active_list(cj).iter().any(|r| {
            r.name.as_deref() == Some(jname.as_str()) && r.namespace.as_deref() == Some(ns.as_str())
        }) || times.last_schedule.map(Timestamp::as_second)
            == Some(scheduled.as_second());
        if already {
            return out;
        }
        let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
        if policy == "Forbid" && !active_list(cj).is_empty() {
            self.recorder.normal(
                &*cj,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid",
            );
            return out;
        }
        if policy == "Replace" {
            for r in active_list(cj).to_vec() {
                let rns = r.namespace.clone().unwrap_or_else(|| ns.clone());
                let rname = r.name.clone().unwrap_or_default();
                let job = match self.jobs_api(&rns).get(&rname).await {
                    Ok(j) => j,
                    Err(e) => {
                        self.recorder.warning(
                            &*cj,
                            "FailedGet",
                            format!("Get job: {}", error_text(&e)),
                        );
                        out.requeue = None;
                        out.error = Some(e.into());
                        return out;
                    }
                };
                if !self.delete_job(cj, &job).await {
                    out.requeue = None;
                    out.error = Some(anyhow::anyhow!("could not replace job {rns}/{rname}"));
                    return out;
                }
                out.update_status = true;
            }
        }

        let req = match job_from_template(cj, scheduled) {
            Ok(j) => j,
            Err(e) => {
                out.requeue = None;
                out.error = Some(anyhow::anyhow!("unable to make Job from template: {e}"));
                return out;
            }
        };
        let created = match self
            .jobs_api(&ns)
            .create(&PostParams::default(), &req)
            .await
        {
            Ok(j) => {
                self.recorder.normal(
                    &*cj,
                    "SuccessfulCreate",
                    format!(
                        "Created job {}",
                        j.metadata.name.as_deref().unwrap_or_default()
                    ),
                );
                j
            }
            Err(e) if e.to_string().contains("because it is being terminated") => {
                out.requeue = None;
                out.error = Some(e.into());
                return out;
            }
            Err(e) if util::is_conflict(&e) => {
                // Already there: ours but missing from the active list, or someone else's.
                let existing = match self.jobs_api(&ns).get(&jname).await {
                    Ok(j) => j,
                    Err(e) => {
                        out.requeue = None;
                        out.error = Some(e.into());
                        return out;
                    }
                };
                let ours = util::controller_ref(&existing.metadata)
                    .is_some_and(|r| Some(&r.uid) == cj.metadata.uid.as_ref());
                if !ours || in_active_list(cj, existing.metadata.uid.as_deref().unwrap_or_default())
                {
                    out.requeue = None;
                    return out;
                }
                existing
            }
            Err(e) => {
                self.recorder.warning(
                    &*cj,
                    "FailedCreate",
                    format!("Error creating job: {}", error_text(&e)),
                );
                out.requeue = None;
                out.error = Some(e.into());
                return out;
            }
        };
        let st = cj.status.get_or_insert_with(Default::default);
        st.active
            .get_or_insert_with(Vec::new)
            .push(job_ref(&created));
        st.last_schedule_time = Some(Time(scheduled));
        out.update_status = true;
        out
    }

    /// Delete finished jobs beyond the history limits, oldest first.
    async fn cleanup_finished_jobs(&self, cj: &mut CronJob, jobs: &[Arc<Job>]) -> bool {
        let spec = cj.spec.clone().unwrap_or_default();
        if spec.failed_jobs_history_limit.is_none() && spec.successful_jobs_history_limit.is_none()
        {
            return false;
        }
        let mut succeeded: Vec<&Job> = Vec::new();
        let mut failed: Vec<&Job> = Vec::new();
        for j in jobs {
            match job_finished_type(j) {
                Some("Complete") => succeeded.push(j),
                Some("Failed") => failed.push(j),
                _ => {}
            }
        }
        let mut update = false;
        for (mut list, limit) in [
            (succeeded, spec.successful_jobs_history_limit),
            (failed, spec.failed_jobs_history_limit),
        ] {
            let Some(limit) = limit else {
                continue;
            };
            let excess = list.len() as i64 - i64::from(limit);
            if excess <= 0 {
                continue;
            }
            list.sort_by(|a, b| by_start_time(a, b));
            for j in list.into_iter().take(excess as usize) {
                if self.delete_job(cj, j).await {
                    update = true;
                }
            }
        }
        update
    }

    /// Delete a job (its pods in the background) and drop it from the active list.
    async fn delete_job(&self, cj: &mut CronJob, job: &Job) -> bool {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let name = job.metadata.name.as_deref().unwrap_or_default();
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        if let Err(e) = self.jobs_api(ns).delete(name, &dp).await {
            self.recorder.warning(
                &*cj,
                "FailedDelete",
                format!("Deleted job: {}", error_text(&e)),
            );
            return false;
        }
        delete_from_active_list(cj, job.metadata.uid.as_deref().unwrap_or_default());
        self.recorder
            .normal(&*cj, "SuccessfulDelete", format!("Deleted job {name}"));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn utc(spec: &str) -> Schedule {
        let mut s = parse_standard(spec).unwrap();
        s.tz = TimeZone::UTC;
        s
    }

    #[test]
    fn parse_errors_match_robfig() {
        let err = |s: &str| parse_standard(s).unwrap_err();
        assert_eq!(err(""), "empty spec string");
        assert_eq!(err("* * *"), "expected exactly 5 fields, found 3: [* * *]");
        assert_eq!(
            err("60 * * * *"),
            "end of range (60) above maximum (59): 60"
        );
        assert_eq!(
            err("* * 0 * *"),
            "beginning of range (0) below minimum (1): 0"
        );
        assert_eq!(err("* * * * 7"), "end of range (7) above maximum (6): 7");
        assert_eq!(err("@fortnightly"), "unrecognized descriptor: @fortnightly");
        assert_eq!(
            err("x * * * *"),
            "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax"
        );
        assert_eq!(
            err("*/0 * * * *"),
            "step of range should be a positive number: */0"
        );
        assert_eq!(
            err("5-1 * * * *"),
            "beginning of range (5) beyond end of range (1): 5-1"
        );
        assert_eq!(err("1-2-3 * * * *"), "too many hyphens: 1-2-3");
        assert_eq!(
            err("TZ=Mars/Olympus * * * * *"),
            "provided bad location Mars/Olympus: unknown time zone Mars/Olympus"
        );
        assert!(
            err("@every 5x").starts_with("failed to parse duration @every 5x: time: unknown unit")
        );
        for ok in [
            "*/5 * * * *",
            "0 9-17 * jan-jun MON-FRI",
            "15,45 * 1 */2 ?",
            "@hourly",
            "@every 1h30m",
        ] {
            assert!(parse_standard(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn next_times() {
        let n = |spec: &str, from: &str| utc(spec).next(ts(from)).map(|t| t.to_string());
        assert_eq!(
            n("* * * * *", "2024-05-14T10:05:30Z").as_deref(),
            Some("2024-05-14T10:06:00Z")
        );
        assert_eq!(
            n("* * * * *", "2024-05-14T10:05:00Z").as_deref(),
            Some("2024-05-14T10:06:00Z")
        );
        assert_eq!(
            n("*/15 * * * *", "2024-05-14T10:05:00Z").as_deref(),
            Some("2024-05-14T10:15:00Z")
        );
        assert_eq!(
            n("0 0 * * *", "2024-12-31T23:59:59Z").as_deref(),
            Some("2025-01-01T00:00:00Z")
        );
        assert_eq!(
            n("@hourly", "2024-05-14T10:00:00Z").as_deref(),
            Some("2024-05-14T11:00:00Z")
        );
        assert_eq!(
            n("@monthly", "2024-01-31T12:00:00Z").as_deref(),
            Some("2024-02-01T00:00:00Z")
        );
        // Leap day only.
        assert_eq!(
            n("0 0 29 2 *", "2025-01-01T00:00:00Z").as_deref(),
            Some("2028-02-29T00:00:00Z")
        );
        // Day of month OR day of week when both are restricted (the 13th, or a Friday).
        assert_eq!(
            n("0 0 13 * 5", "2024-09-01T00:00:00Z").as_deref(),
            Some("2024-09-06T00:00:00Z")
        );
        // ... AND when one is a star: Fridays only.
        assert_eq!(
            n("0 0 * * fri", "2024-09-01T00:00:00Z").as_deref(),
            Some("2024-09-06T00:00:00Z")
        );
        assert_eq!(
            n("30 6-16/4 * * 1-5", "2024-09-06T15:00:00Z").as_deref(),
            Some("2024-09-09T06:30:00Z")
        );
        // Never: the 31st of February.
        assert_eq!(n("59 23 31 2 *", "2024-01-01T00:00:00Z"), None);
        assert_eq!(
            n("@every 90s", "2024-05-14T10:00:00.5Z").as_deref(),
            Some("2024-05-14T10:01:30Z")
        );
    }

    #[test]
    fn time_zones_shift_the_schedule() {
        let Ok(paris) = load_location("Europe/Paris") else {
            return; // no zoneinfo on this machine
        };
        let s = Schedule {
            tz: paris,
            ..parse_standard("0 9 * * *").unwrap()
        };
        // 09:00 in Paris in summer is 07:00 UTC.
        assert_eq!(
            s.next(ts("2024-07-01T00:00:00Z")).unwrap().to_string(),
            "2024-07-01T07:00:00Z"
        );
        // Spring forward: 02:30 does not exist on 2024-03-31 in Paris, so (as robfig/cron)
        // that day is skipped.
        let gap = Schedule {
            tz: load_location("Europe/Paris").unwrap(),
            ..parse_standard("30 2 * * *").unwrap()
        };
        assert_eq!(
            gap.next(ts("2024-03-30T12:00:00Z")).unwrap().to_string(),
            "2024-04-01T00:30:00Z"
        );
        assert_eq!(
            load_location("Mars/Olympus").unwrap_err(),
            "unknown time zone Mars/Olympus"
        );
        assert_eq!(
            load_location("../etc/passwd").unwrap_err(),
            "time: invalid location name"
        );
        assert!(load_location("").is_ok());
        let z = load_location("Asia/Kolkata").unwrap();
        assert_eq!(
            rfc3339(ts("2024-05-14T10:00:00Z"), &z),
            "2024-05-14T15:30:00+05:30"
        );
        assert_eq!(
            rfc3339(ts("2024-05-14T10:00:00Z"), &TimeZone::UTC),
            "2024-05-14T10:00:00Z"
        );
    }

    fn times(created: &str, last: Option<&str>, sds: Option<i64>) -> Times {
        Times {
            created: ts(created),
            last_schedule: last.map(ts),
            starting_deadline_seconds: sds,
        }
    }

    #[test]
    fn most_recent_schedule_times() {
        let s = utc("*/10 * * * *");
        let now = ts("2024-05-14T10:25:00Z");
        // Nothing due yet.
        let (e, m, missed, err) =
            most_recent_schedule_time(times("2024-05-14T10:21:00Z", None, None), now, &s, true);
        assert_eq!(
            (e, m, missed, err),
            (ts("2024-05-14T10:21:00Z"), None, Missed::None, None)
        );
        // One due.
        let (_, m, missed, _) =
            most_recent_schedule_time(times("2024-05-14T10:15:00Z", None, None), now, &s, true);
        assert_eq!(
            (m, missed),
            (Some(ts("2024-05-14T10:20:00Z")), Missed::None)
        );
        // Several missed: the most recent one is started.
        let (_, m, missed, _) = most_recent_schedule_time(
            times("2024-05-14T08:00:00Z", Some("2024-05-14T09:00:00Z"), None),
            now,
            &s,
            true,
        );
        assert_eq!((m, missed), (Some(ts("2024-05-14T10:20:00Z")), Missed::Few));
        // Way too many.
        let (_, m, missed, _) =
            most_recent_schedule_time(times("2024-01-01T00:00:00Z", None, None), now, &s, true);
        assert_eq!(
            (m, missed),
            (Some(ts("2024-05-14T10:20:00Z")), Missed::Many)
        );
        // A starting deadline moves the earliest time forward.
        let (e, _, missed, _) = most_recent_schedule_time(
            times("2024-01-01T00:00:00Z", None, Some(200)),
            now,
            &s,
            true,
        );
        assert_eq!((e, missed), (ts("2024-05-14T10:21:40Z"), Missed::None));
        // Impossible schedule.
        let (_, m, _, err) = most_recent_schedule_time(
            times("2024-01-01T00:00:00Z", None, None),
            now,
            &utc("59 23 31 2 *"),
            true,
        );
        assert_eq!((m, err.as_deref()), (None, Some(TOO_CLOSE)));
    }

    #[test]
    fn requeue_at_the_next_schedule() {
        let s = utc("*/10 * * * *");
        let now = ts("2024-05-14T10:25:00Z");
        let d = next_schedule_time_duration(times("2024-05-14T10:21:00Z", None, None), now, &s);
        assert_eq!(d, Some(Duration::from_millis(5 * 60 * 1000 + 100)));
        let d = next_schedule_time_duration(
            times("2024-05-14T10:00:00Z", Some("2024-05-14T10:20:00Z"), None),
            now,
            &s,
        );
        assert_eq!(d, Some(Duration::from_millis(5 * 60 * 1000 + 100)));
        assert_eq!(
            next_schedule_time_duration(
                times("2024-05-14T10:00:00Z", None, None),
                now,
                &utc("59 23 31 2 *")
            ),
            None
        );
    }

    #[test]
    fn jobs_from_the_template() {
        let cj: CronJob = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "hello", "namespace": "ns", "uid": "cj-uid"},
            "spec": {
                "schedule": "* * * * *",
                "jobTemplate": {
                    "metadata": {"labels": {"app": "x"}, "annotations": {"a": "b"}},
                    "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}}
                }
            }
        }))
        .unwrap();
        let at = ts("2024-05-14T10:06:00Z");
        let j = job_from_template(&cj, at).unwrap();
        assert_eq!(j.metadata.name.as_deref(), Some("hello-28594686"));
        let a = j.metadata.annotations.unwrap();
        assert_eq!(
            a.get(SCHEDULED_TIMESTAMP).map(String::as_str),
            Some("2024-05-14T10:06:00Z")
        );
        assert_eq!(a.get("a").map(String::as_str), Some("b"));
        let r = &j.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (r.kind.as_str(), r.uid.as_str(), r.controller),
            ("CronJob", "cj-uid", Some(true))
        );
        assert!(j.spec.unwrap().template.spec.is_some());
        assert_eq!(format_schedule(&cj, None), "* * * * *");
    }

    #[test]
    fn history_is_pruned_oldest_first() {
        let job = |name: &str, start: Option<&str>| Job {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            status: Some(k8s_openapi::api::batch::v1::JobStatus {
                start_time: start.map(|s| Time(ts(s))),
                ..Default::default()
            }),
            spec: None,
        };
        let mut v = [
            job("c", None),
            job("b", Some("2024-05-14T10:00:00Z")),
            job("a", Some("2024-05-14T10:00:00Z")),
            job("d", Some("2024-05-14T09:00:00Z")),
        ];
        v.sort_by(by_start_time);
        let names: Vec<_> = v.iter().map(|j| j.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, vec!["d", "a", "b", "c"]);
    }
}
