//! watch: how long a write takes to reach each of many watches, and whether every watch gets
//! every event.
//!
//! `--watchers` watches of the namespace's ConfigMaps start at the namespace's current
//! resourceVersion, each its own long-lived request. A writer then writes at `--watch-rate`
//! for `--watch-duration` (open loop: a write starts on every tick whether or not earlier ones
//! have finished): the first second's worth of writes create ConfigMaps `w-<slot>`, the later
//! ones merge-patch them in turn. Every write carries its sequence number and its send time
//! (nanoseconds since a shared `Instant`) in the ConfigMap's data, so each watcher records each
//! event's delivery latency and marks its sequence number as seen; the events it never saw
//! are missed. A watch the server ends early is resumed from its last resourceVersion, as
//! informers do.
//!
//! Watchers parse only the few fields they need, with serde_json into borrowed strings.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt as _;
use serde::Deserialize;
use tokio::sync::{mpsc, Mutex, Semaphore};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use super::client::{call, send, Cluster, CpuMeter};
use super::histogram::{Histogram, Totals};
use super::objects::{collection, resource_version};
use super::{ApiMeasurement, ApiOptions};
use crate::latency::Latencies;
use crate::report::round;

/// Writes the writer may have outstanding; past this it falls behind its rate.
const MAX_IN_FLIGHT: usize = 1024;

/// Connections opened for the writer before it starts.
const WRITER_CONNECTIONS: usize = 64;

/// Watches per client (so per HTTP/2 connection).
const WATCHES_PER_CONNECTION: usize = 100;

/// Watches being opened at once (each may need a TLS handshake).
const OPENING_AT_ONCE: usize = 64;

/// How long opening all the watches may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(120);

/// Early ends of one watch that are resumed before it gives up.
const MAX_RESTARTS: u64 = 10;

/// Attempts at one write the server throttles or fails.
const WRITE_ATTEMPTS: u32 = 10;

/// Run the watch workload in `ns`.
pub(crate) async fn watch(
    cluster: &Arc<Cluster>,
    ns: &str,
    options: &ApiOptions,
) -> Result<ApiMeasurement> {
    let path = collection(ns, "configmaps");
    let list = call(cluster.client(0), Method::GET, &path, None)
        .await
        .map_err(|e| anyhow!("GET {path}: {e}"))?;
    let from = resource_version(&list)
        .ok_or_else(|| anyhow!("GET {path}: the list has no resourceVersion"))?;
    let total = (options.watch_rate * options.watch_duration.as_secs_f64())
        .round()
        .max(1.0) as u64;
    let slots = (options.watch_rate.ceil() as u64).clamp(1, total) as usize;
    let epoch = Instant::now();
    let (ready_tx, mut ready) = mpsc::channel(options.watchers.min(4096));
    let opening = Arc::new(Semaphore::new(OPENING_AT_ONCE));
    let timeout = options.watch_duration + options.watch_grace + Duration::from_secs(120);
    let base: Arc<str> = format!(
        "{path}?watch=true&timeoutSeconds={}&resourceVersion=",
        timeout.as_secs()
    )
    .into();
    // HTTP/2 servers cap the streams of a connection (hyper: 200, Go: 250).
    let pool = cluster.new_clients(
        options
            .watchers
            .div_ceil(WATCHES_PER_CONNECTION)
            .max(options.client_pool),
    )?;
    let mut watchers = JoinSet::new();
    let mut tallies = Vec::with_capacity(options.watchers);
    for i in 0..options.watchers {
        let tally = Arc::new(std::sync::Mutex::new(Tally::new(total)));
        tallies.push(tally.clone());
        let w = Watcher {
            client: pool[i % pool.len()].clone(),
            base: base.clone(),
            resource_version: from.clone(),
            epoch,
            opening: opening.clone(),
            tally,
        };
        watchers.spawn(w.run(ready_tx.clone()));
    }
    drop(ready_tx);
    let opened = async {
        for _ in 0..options.watchers {
            match ready.recv().await {
                Some(Ok(())) => {}
                Some(Err(e)) => bail!("cannot open a watch: {e}"),
                None => bail!("a watcher ended before its watch was open"),
            }
        }
        Ok(())
    };
    tokio::time::timeout(OPEN_TIMEOUT, opened)
        .await
        .map_err(|_| {
            anyhow!(
                "opening {} watches took over {OPEN_TIMEOUT:?}",
                options.watchers
            )
        })??;

    cluster.warm_up(WRITER_CONNECTIONS).await;
    let meter = CpuMeter::start(cluster).await;
    let writer = Writer {
        cluster: cluster.clone(),
        path: path.into(),
        rate: options.watch_rate,
        slots,
        epoch,
    };
    let written = writer.run(total).await?;
    // Watchers end once they have seen every write; what they have not seen after the grace
    // period is missed.
    let finished = async {
        while let Some(joined) = watchers.join_next().await {
            joined.context("a watcher task failed")??;
        }
        Ok::<_, anyhow::Error>(())
    };
    if let Ok(finished) = tokio::time::timeout(options.watch_grace, finished).await {
        finished?;
    }
    watchers.abort_all();
    let mut all = Collected::default();
    for tally in &tallies {
        all.add(&tally.lock().unwrap_or_else(|p| p.into_inner()));
    }
    drop(tallies);
    let delivered = all.totals.summary();
    let elapsed = all
        .last
        .map_or(written.elapsed, |t| t.duration_since(written.started));
    let mut m = ApiMeasurement::new("watch", options.watchers, delivered, elapsed);
    meter.finish(cluster, &mut m).await;
    m.write_rate = Some(round(
        total as f64 / written.elapsed.as_secs_f64().max(1e-9),
        1,
    ));
    m.write_p99_ms = Some(round(written.latencies.summary().p99_ms, 3));
    m.errors = Some(written.errors);
    m.missed = Some((total * options.watchers as u64).saturating_sub(delivered.count));
    m.watch_restarts = Some(all.restarts);
    if let Some(reason) = all.gave_up {
        m.note = Some(format!(
            "{} watches gave up early; the last because {reason}",
            all.gave_up_count
        ));
    }
    Ok(m)
}

/// Everything the watchers saw.
#[derive(Default)]
struct Collected {
    totals: Totals,
    last: Option<Instant>,
    restarts: u64,
    /// Watches that stopped before seeing every write, and the last one's reason.
    gave_up_count: u64,
    gave_up: Option<String>,
}

impl Collected {
    fn add(&mut self, tally: &Tally) {
        tally.latencies.merge_into(&mut self.totals);
        self.last = self.last.max(tally.last);
        self.restarts += tally.restarts;
        if let Some(reason) = &tally.gave_up {
            self.gave_up_count += 1;
            self.gave_up = Some(reason.clone());
        }
    }
}

/// One watch of the namespace.
struct Watcher {
    client: kube::Client,
    /// The watch URL up to the resourceVersion.
    base: Arc<str>,
    resource_version: String,
    epoch: Instant,
    opening: Arc<Semaphore>,
    /// What it has seen, shared so that it can be read after the task is aborted.
    tally: Arc<std::sync::Mutex<Tally>>,
}

/// The few fields of a watch event the watcher reads.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    #[serde(borrow)]
    object: Object<'a>,
}

#[derive(Deserialize)]
struct Object<'a> {
    #[serde(default, borrow)]
    metadata: Metadata<'a>,
    #[serde(default, borrow)]
    data: Option<Data<'a>>,
    /// The status code of an ERROR event.
    #[serde(default)]
    code: Option<u16>,
}

#[derive(Default, Deserialize)]
struct Metadata<'a> {
    #[serde(rename = "resourceVersion", default, borrow)]
    resource_version: Option<&'a str>,
}

#[derive(Deserialize)]
struct Data<'a> {
    #[serde(default, borrow)]
    seq: Option<&'a str>,
    #[serde(default, borrow)]
    sent: Option<&'a str>,
}

/// What one watcher has seen.
struct Tally {
    /// Writes expected: sequence numbers 0 to `total - 1`.
    total: u64,
    /// Bit `n` is set once the write with sequence number `n` has been seen.
    seen: Vec<u64>,
    got: u64,
    latencies: Histogram,
    /// When the last new write arrived.
    last: Option<Instant>,
    /// Watches the server ended that were resumed.
    restarts: u64,
    /// Why the watcher stopped before seeing every write.
    gave_up: Option<String>,
}

/// What a line of a watch stream said.
#[derive(Debug, PartialEq)]
enum Line {
    /// A write (or something else the watcher does not count); the watch goes on.
    Event,
    /// An ERROR event: the watch is over.
    Error(u16),
}

impl Tally {
    fn new(total: u64) -> Tally {
        Tally {
            total,
            seen: vec![0; total.div_ceil(64) as usize],
            got: 0,
            latencies: Histogram::default(),
            last: None,
            restarts: 0,
            gave_up: None,
        }
    }

    fn complete(&self) -> bool {
        self.got >= self.total
    }

    /// Take in one line of the watch stream, received at `now` (nanoseconds since the epoch).
    fn line(
        &mut self,
        line: &[u8],
        now: u64,
        at: Instant,
        resource_version: &mut String,
    ) -> Result<Line> {
        if let Some((seq, sent, rv)) = fast_fields(line) {
            self.saw(seq, sent, now, at);
            resource_version.clear();
            resource_version.push_str(rv);
            return Ok(Line::Event);
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(Line::Event);
        }
        let event: Event = serde_json::from_slice(line).with_context(|| {
            let shown = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
            format!("a watch event is not valid JSON: {shown}")
        })?;
        match event.kind {
            "ADDED" | "MODIFIED" => {
                if let Some((seq, sent)) =
                    event.object.data.as_ref().and_then(|d| {
                        Some((d.seq?.parse::<u64>().ok()?, d.sent?.parse::<u64>().ok()?))
                    })
                {
                    self.saw(seq, sent, now, at);
                }
            }
            "ERROR" => return Ok(Line::Error(event.object.code.unwrap_or(0))),
            _ => {}
        }
        if let Some(rv) = event.object.metadata.resource_version {
            resource_version.clear();
            resource_version.push_str(rv);
        }
        Ok(Line::Event)
    }

    /// Write `seq`, sent at `sent`, arrived at `now`.
    fn saw(&mut self, seq: u64, sent: u64, now: u64, at: Instant) {
        if seq >= self.total {
            return;
        }
        let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        if self.seen[word] & bit == 0 {
            self.seen[word] |= bit;
            self.got += 1;
            self.latencies.record_nanos(now.saturating_sub(sent));
            self.last = Some(at);
        }
    }
}

/// The sequence number, send time and resourceVersion of an ADDED or MODIFIED event of a
/// written ConfigMap, found by searching the line rather than parsing it, when the event has
/// the usual shape (`{"type":"ADDED",...`, fields without spaces, as Go and capstan write
/// them). `None` means: parse it.
fn fast_fields(line: &[u8]) -> Option<(u64, u64, &str)> {
    use memchr::memmem::{Finder, FinderRev};
    use std::sync::LazyLock;
    // Searchers built once: a million lines a second go through here. The data is at the
    // end of the object and the resourceVersion near its start, so each is searched from
    // its own end.
    static SEQ: LazyLock<FinderRev<'static>> = LazyLock::new(|| FinderRev::new(br#""seq":""#));
    static SENT: LazyLock<FinderRev<'static>> = LazyLock::new(|| FinderRev::new(br#""sent":""#));
    static RV: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(br#""resourceVersion":""#));
    if !(line.starts_with(br#"{"type":"ADDED","#) || line.starts_with(br#"{"type":"MODIFIED","#)) {
        return None;
    }
    let after = |at: Option<usize>, key_len: usize| -> Option<&[u8]> {
        let at = at? + key_len;
        let len = memchr::memchr(b'"', &line[at..])?;
        Some(&line[at..at + len])
    };
    let number = |text: &[u8]| -> Option<u64> {
        if text.is_empty() || text.len() > 19 || !text.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(text.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
    };
    let seq = number(after(SEQ.rfind(line), SEQ.needle().len())?)?;
    let sent = number(after(SENT.rfind(line), SENT.needle().len())?)?;
    let rv = std::str::from_utf8(after(RV.find(line), RV.needle().len())?).ok()?;
    Some((seq, sent, rv))
}

impl Watcher {
    /// Watch until every write has been seen (or the task is aborted), resuming watches the
    /// server ends. The first open's outcome goes to `ready`.
    async fn run(mut self, ready: mpsc::Sender<Result<(), String>>) -> Result<()> {
        let mut ready = Some(ready);
        let mut partial = Vec::new();
        let mut restarts = 0;
        loop {
            let uri = format!("{}{}", self.base, self.resource_version);
            let opened = {
                let _permit = self.opening.acquire().await;
                send(&self.client, Method::GET, &uri, None).await
            };
            let response = match (opened, ready.take()) {
                (Ok(response), ready) => {
                    if let Some(ready) = ready {
                        let _ = ready.send(Ok(())).await;
                    }
                    response
                }
                (Err(e), Some(ready)) => {
                    let _ = ready.send(Err(format!("GET {uri}: {e}"))).await;
                    return Err(anyhow!("GET {uri}: {e}"));
                }
                // A resumed watch that cannot open (say, 410 Gone): what was missed stays
                // missed.
                (Err(e), None) => {
                    self.give_up(format!("resuming a watch failed: {e}"));
                    return Ok(());
                }
            };
            let mut body = response.into_body();
            partial.clear();
            let ended = loop {
                let data: Bytes = match body.frame().await {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => data,
                        Err(_) => continue,
                    },
                    Some(Err(e)) => {
                        break format!("the watch failed: {}", super::client::one_line(&e))
                    }
                    None => break "the server ended the watch".to_owned(),
                };
                let at = Instant::now();
                let now = nanos_since(self.epoch, at);
                let mut tally = self.tally.lock().unwrap_or_else(|p| p.into_inner());
                let mut rest: &[u8] = &data;
                while let Some(end) = memchr::memchr(b'\n', rest) {
                    let line = if partial.is_empty() {
                        tally.line(&rest[..end], now, at, &mut self.resource_version)?
                    } else {
                        partial.extend_from_slice(&rest[..end]);
                        let line = tally.line(&partial, now, at, &mut self.resource_version)?;
                        partial.clear();
                        line
                    };
                    if let Line::Error(code) = line {
                        tally.gave_up = Some(format!("of an ERROR event (code {code})"));
                        return Ok(());
                    }
                    rest = &rest[end + 1..];
                }
                partial.extend_from_slice(rest);
                if tally.complete() {
                    return Ok(());
                }
            };
            if restarts >= MAX_RESTARTS {
                self.give_up(format!("{ended}, {MAX_RESTARTS} times"));
                return Ok(());
            }
            restarts += 1;
            self.tally
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .restarts = restarts;
        }
    }

    fn give_up(&self, reason: String) {
        self.tally.lock().unwrap_or_else(|p| p.into_inner()).gave_up = Some(reason);
    }
}

fn nanos_since(epoch: Instant, now: Instant) -> u64 {
    u64::try_from(now.duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

/// What the writer did.
struct Written {
    started: Instant,
    elapsed: Duration,
    latencies: Latencies,
    /// Writes answered 429 or 5xx (and retried).
    errors: u64,
}

/// A writer that starts one write every `1 / rate` seconds, whatever the server's latency.
struct Writer {
    cluster: Arc<Cluster>,
    path: Arc<str>,
    rate: f64,
    /// ConfigMaps written in turn: write `n` creates `w-<n>` if `n < slots`, else patches
    /// `w-<n % slots>`.
    slots: usize,
    epoch: Instant,
}

impl Writer {
    async fn run(self, total: u64) -> Result<Written> {
        let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / self.rate));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
        let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        // Writes to one ConfigMap go one at a time, so a patch never overtakes its create.
        let locks: Vec<Arc<Mutex<()>>> = (0..self.slots).map(|_| Arc::default()).collect();
        let mut latencies = Latencies::with_capacity(total as usize);
        let mut errors = 0;
        let mut writes = JoinSet::new();
        let started = Instant::now();
        for n in 0..total {
            ticker.tick().await;
            let permit = permits.clone().acquire_owned().await?;
            let lock = locks[n as usize % self.slots].clone();
            let client = self.cluster.client(n as usize).clone();
            let (path, epoch, slots) = (self.path.clone(), self.epoch, self.slots as u64);
            writes.spawn(async move {
                let _permit = permit;
                let _turn = lock.lock_owned().await;
                write(&client, &path, n, slots, epoch).await
            });
            while let Some(done) = writes.try_join_next() {
                let (latency, retried) = done.context("a write task failed")??;
                latencies.record(latency);
                errors += retried;
            }
        }
        while let Some(done) = writes.join_next().await {
            let (latency, retried) = done.context("a write task failed")??;
            latencies.record(latency);
            errors += retried;
        }
        Ok(Written {
            started,
            elapsed: started.elapsed(),
            latencies,
            errors,
        })
    }
}

/// Write number `n`: create or merge-patch its ConfigMap with its sequence number and send
/// time. Returns the successful request's latency and how many attempts failed before it.
async fn write(
    client: &kube::Client,
    path: &str,
    n: u64,
    slots: u64,
    epoch: Instant,
) -> Result<(Duration, u64)> {
    let slot = n % slots;
    let mut failed = 0;
    loop {
        let start = Instant::now();
        let sent = nanos_since(epoch, start);
        let (method, uri, content_type, body) = if n < slots {
            let body = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"w-{slot}"}},"data":{{"seq":"{n}","sent":"{sent}"}}}}"#
            );
            (Method::POST, path.to_owned(), "application/json", body)
        } else {
            let body = format!(r#"{{"data":{{"seq":"{n}","sent":"{sent}"}}}}"#);
            let uri = format!("{path}/w-{slot}");
            (Method::PATCH, uri, "application/merge-patch+json", body)
        };
        match call(
            client,
            method.clone(),
            &uri,
            Some((content_type, body.into())),
        )
        .await
        {
            Ok(_) => return Ok((start.elapsed(), failed)),
            Err(e) if e.is_transient() && failed + 1 < u64::from(WRITE_ATTEMPTS) => {
                failed += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(anyhow!("{method} {uri}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_write_once_and_tracks_resource_versions() {
        let mut t = Tally::new(100);
        let mut rv = String::from("1");
        let at = Instant::now();
        let added = br#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"w-3","resourceVersion":"42","uid":"x"},"data":{"sent":"1000000","seq":"3"}}}"#;
        assert_eq!(fast_fields(added), Some((3, 1_000_000, "42")));
        assert_eq!(t.line(added, 3_000_000, at, &mut rv).unwrap(), Line::Event);
        assert_eq!(t.line(added, 4_000_000, at, &mut rv).unwrap(), Line::Event);
        assert_eq!((t.got, rv.as_str()), (1, "42"));
        assert_eq!(t.latencies.count(), 1);
        // Another shape: parsed.
        let modified = br#"{"object":{"metadata":{"resourceVersion":"43"},"data":{"seq":"99","sent":"5"}},"type":"MODIFIED"}"#;
        assert_eq!(fast_fields(modified), None);
        assert_eq!(t.line(modified, 10, at, &mut rv).unwrap(), Line::Event);
        assert_eq!((t.got, rv.as_str()), (2, "43"));
        let spaced = br#"{"type":"MODIFIED", "object": {"metadata": {"resourceVersion": "44"}, "data": {"seq": "98", "sent": "5"}}}"#;
        assert_eq!(fast_fields(spaced), None);
        assert_eq!(t.line(spaced, 10, at, &mut rv).unwrap(), Line::Event);
        assert_eq!((t.got, rv.as_str()), (3, "44"));
        let out_of_range = br#"{"type":"MODIFIED","object":{"metadata":{"resourceVersion":"45"},"data":{"seq":"100","sent":"5"}}}"#;
        assert_eq!(t.line(out_of_range, 10, at, &mut rv).unwrap(), Line::Event);
        assert_eq!((t.got, rv.as_str()), (3, "45"));
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"50"}}}"#;
        assert_eq!(t.line(bookmark, 10, at, &mut rv).unwrap(), Line::Event);
        assert_eq!(rv, "50");
        assert_eq!(t.line(b"  ", 10, at, &mut rv).unwrap(), Line::Event);
        let gone = br#"{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}}"#;
        assert_eq!(t.line(gone, 10, at, &mut rv).unwrap(), Line::Error(410));
        assert!(t.line(b"{not json", 10, at, &mut rv).is_err());
        assert!(!t.complete());
    }
}
