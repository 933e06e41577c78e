//! The watch workload: how long a write takes to reach each of many watchers of its prefix.
//!
//! A writer creates keys at a steady rate (open loop: a write starts on every tick whether or
//! not the previous ones finished), each value starting with the nanoseconds since a shared
//! `Instant` at which its write was sent. Every watcher subtracts that from its receipt time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use capstan_store::{EventKind, Store, WatchRequest, Watcher};
use tokio::sync::{watch as signal, Semaphore};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use super::workloads::{filler, numbered_key, stamped_value};
use super::{Measurement, Target, Workload};
use crate::latency::Latencies;
use crate::report::round;

/// Writes the writer may have outstanding; past this it falls behind its rate.
const MAX_IN_FLIGHT: usize = 1024;

/// How long watchers may keep receiving after the last write was acknowledged.
const GRACE: Duration = Duration::from_secs(30);

/// What one watcher saw.
struct Received {
    latencies: Latencies,
    last: Option<Instant>,
}

/// Run the watch workload: `--watchers` watchers, a writer at `--watch-rate`.
pub(crate) async fn watch(target: &Target<'_>) -> Result<Measurement> {
    let options = target.options;
    let prefix = Bytes::from(format!("{}watch/", target.prefix));
    let total = options.count.unwrap_or_else(|| {
        let n = options.watch_rate * options.watch_duration.as_secs_f64();
        n.round().max(1.0) as u64
    });
    let epoch = Instant::now();
    let (stop, stopped) = signal::channel(false);
    let mut watchers = JoinSet::new();
    let from = target.store.current_revision().await? + 1;
    for _ in 0..options.watchers {
        let request = WatchRequest::prefix(prefix.clone()).from_revision(from);
        let watcher = target
            .store
            .watch(request)
            .await
            .context("starting a watch")?;
        watchers.spawn(receive(watcher, total, epoch, stopped.clone()));
    }
    let writer = SteadyWriter {
        store: target.store.clone(),
        prefix,
        rate: options.watch_rate,
        value_size: options.value_size,
        epoch,
    };
    let (write_start, write_elapsed) = writer.run(total).await?;
    let timer = tokio::spawn(async move {
        tokio::time::sleep(GRACE).await;
        let _ = stop.send(true);
    });
    let received = collect(watchers).await;
    timer.abort();
    let (latencies, last) = received?;
    let delivered = latencies.len() as u64;
    let elapsed = last.map_or(write_elapsed, |t| t.duration_since(write_start));
    let mut m = Measurement::new(
        target.backend,
        Workload::Watch,
        options.watchers,
        latencies.summary(),
        elapsed,
    );
    m.value_size = Some(options.value_size);
    m.write_rate = Some(round(
        total as f64 / write_elapsed.as_secs_f64().max(1e-9),
        1,
    ));
    m.missed = Some((total * options.watchers as u64).saturating_sub(delivered));
    Ok(m)
}

/// Merge every watcher's latencies, and find when the last event arrived.
async fn collect(mut watchers: JoinSet<Result<Received>>) -> Result<(Latencies, Option<Instant>)> {
    let mut all = Latencies::default();
    let mut last: Option<Instant> = None;
    while let Some(joined) = watchers.join_next().await {
        let received = joined.context("a watcher task failed")??;
        all.merge(received.latencies);
        last = last.max(received.last);
    }
    Ok((all, last))
}

/// Receive `total` created keys (or until told to stop), recording each one's delivery latency.
async fn receive(
    mut watcher: Watcher,
    total: u64,
    epoch: Instant,
    mut stop: signal::Receiver<bool>,
) -> Result<Received> {
    let mut latencies = Latencies::with_capacity(total as usize);
    let mut last = None;
    while (latencies.len() as u64) < total {
        let response = tokio::select! {
            _ = stop.changed() => break,
            response = watcher.next() => response,
        };
        let response = match response {
            Some(r) => r.context("the watch failed")?,
            None => bail!("a watch ended after {} of {total} events", latencies.len()),
        };
        let now = Instant::now();
        let now_nanos = nanos_since(epoch, now);
        for event in response.events.iter().filter(|e| e.kind == EventKind::Put) {
            let sent = sent_at(&event.kv.value).context("a watch event without a timestamp")?;
            latencies.record_nanos(now_nanos.saturating_sub(sent));
            last = Some(now);
        }
    }
    Ok(Received { latencies, last })
}

/// The send timestamp a writer put in the first 8 bytes of a value.
fn sent_at(value: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(value.get(..8)?.try_into().ok()?))
}

fn nanos_since(epoch: Instant, now: Instant) -> u64 {
    u64::try_from(now.duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

/// A writer that starts one create every `1 / rate` seconds, whatever the store's latency.
struct SteadyWriter {
    store: Arc<dyn Store>,
    prefix: Bytes,
    rate: f64,
    value_size: usize,
    epoch: Instant,
}

impl SteadyWriter {
    /// Write `total` keys; returns when the first write started and how long all took.
    async fn run(self, total: u64) -> Result<(Instant, Duration)> {
        let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / self.rate));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
        let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let filler = filler(self.value_size);
        let mut writes = JoinSet::new();
        let started = Instant::now();
        for n in 0..total {
            ticker.tick().await;
            let permit = permits.clone().acquire_owned().await?;
            let mut key = Vec::with_capacity(self.prefix.len() + 10);
            numbered_key(&mut key, &self.prefix, n);
            let (store, filler, epoch) = (self.store.clone(), filler.clone(), self.epoch);
            writes.spawn(async move {
                let _permit = permit;
                let value = stamped_value(&filler, nanos_since(epoch, Instant::now()));
                let written = store.create(&key, value, 0).await;
                written.with_context(|| format!("creating {}", String::from_utf8_lossy(&key)))
            });
            while let Some(done) = writes.try_join_next() {
                done.context("a write task failed")??;
            }
        }
        while let Some(done) = writes.join_next().await {
            done.context("a write task failed")??;
        }
        Ok((started, started.elapsed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        let value = stamped_value(&filler(32), 123_456_789);
        assert_eq!(sent_at(&value), Some(123_456_789));
        assert_eq!(sent_at(b"short"), None);
    }
}
