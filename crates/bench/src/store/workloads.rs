//! The closed-loop workloads: writes, point reads, range reads, plus loading and cleanup.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use capstan_store::{RangeRequest, Store, StoreError};
use tokio::task::JoinSet;

use super::{Measurement, Target, Workload};
use crate::latency::Latencies;

/// Clients used to load keys before a measurement and to delete them after.
pub(crate) const LOAD_CLIENTS: usize = 64;

/// Keys per page when listing the benchmark's keys for deletion.
const DELETE_PAGE: usize = 1000;

/// When a measurement stops: at a deadline, or after a number of operations over all clients.
pub(crate) struct Budget {
    deadline: Option<Instant>,
    remaining: Option<AtomicU64>,
}

impl Budget {
    /// `count` operations if given, else `duration` from now.
    pub fn new(duration: Duration, count: Option<u64>) -> Self {
        match count {
            Some(n) => Budget {
                deadline: None,
                remaining: Some(AtomicU64::new(n)),
            },
            None => Budget {
                deadline: Some(Instant::now() + duration),
                remaining: None,
            },
        }
    }

    /// May one more operation start at `now`?
    pub fn take(&self, now: Instant) -> bool {
        if self.deadline.is_some_and(|d| now >= d) {
            return false;
        }
        match &self.remaining {
            Some(n) => n
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
            None => true,
        }
    }
}

/// A value of `size` bytes, distinct per call: `stamp` in its first 8 bytes, filler after.
pub(crate) fn stamped_value(filler: &[u8], stamp: u64) -> Bytes {
    let mut value = filler.to_vec();
    value[..8].copy_from_slice(&stamp.to_le_bytes());
    Bytes::from(value)
}

/// The filler every value starts from: printable, and not all zeroes.
pub(crate) fn filler(size: usize) -> Arc<[u8]> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

/// `prefix` followed by `n` zero-padded, written into `key` (reused, to avoid allocating).
pub(crate) fn numbered_key(key: &mut Vec<u8>, prefix: &[u8], n: u64) {
    key.clear();
    key.extend_from_slice(prefix);
    // Writing into a Vec cannot fail.
    let _ = write!(key, "{n:010}");
}

/// Wait for every task and merge their latencies.
pub(crate) async fn join_latencies(mut tasks: JoinSet<Result<Latencies>>) -> Result<Latencies> {
    let mut all = Latencies::default();
    while let Some(joined) = tasks.join_next().await {
        all.merge(joined.context("a benchmark task failed")??);
    }
    Ok(all)
}

/// `writers` clients each creating distinct keys, back to back, until the budget runs out.
pub(crate) async fn write(target: &Target<'_>, writers: usize) -> Result<Measurement> {
    let options = target.options;
    let filler = filler(options.value_size);
    let budget = Arc::new(Budget::new(options.duration, options.count));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..writers {
        let prefix = format!("{}write-{writers}/w{i}/", target.prefix);
        let store = target.store.clone();
        tasks.spawn(write_loop(store, prefix, filler.clone(), budget.clone()));
    }
    let latencies = join_latencies(tasks).await?;
    let elapsed = started.elapsed();
    let mut m = Measurement::new(
        target.backend,
        Workload::Write,
        writers,
        latencies.summary(),
        elapsed,
    );
    m.value_size = Some(options.value_size);
    Ok(m)
}

async fn write_loop(
    store: Arc<dyn Store>,
    prefix: String,
    filler: Arc<[u8]>,
    budget: Arc<Budget>,
) -> Result<Latencies> {
    let mut latencies = Latencies::default();
    let mut key = Vec::with_capacity(prefix.len() + 10);
    for n in 0u64.. {
        let start = Instant::now();
        if !budget.take(start) {
            break;
        }
        numbered_key(&mut key, prefix.as_bytes(), n);
        let value = stamped_value(&filler, n);
        store
            .create(&key, value, 0)
            .await
            .with_context(|| format!("creating {}", String::from_utf8_lossy(&key)))?;
        latencies.record(start.elapsed());
    }
    Ok(latencies)
}

/// Keys loaded for the get and range workloads.
pub(crate) struct Dataset {
    /// The prefix every key of the set starts with, and no other key.
    pub prefix: Bytes,
    pub keys: Arc<Vec<Bytes>>,
}

/// Load `--range-keys` keys under `<prefix>data/`.
pub(crate) async fn load_dataset(target: &Target<'_>) -> Result<Dataset> {
    let options = target.options;
    let prefix = Bytes::from(format!("{}data/", target.prefix));
    let n = options.range_keys;
    load(&target.store, &prefix, n, options.value_size, Vec::new())
        .await
        .with_context(|| format!("loading {n} keys for the get and range workloads"))?;
    let keys = (0..n as u64)
        .map(|i| {
            let mut key = Vec::new();
            numbered_key(&mut key, &prefix, i);
            Bytes::from(key)
        })
        .collect();
    Ok(Dataset {
        prefix,
        keys: Arc::new(keys),
    })
}

/// What loading keys produced.
pub(crate) struct Loaded {
    pub latencies: Latencies,
    pub elapsed: Duration,
    /// Sum of the sizes of the keys and values written.
    pub live_bytes: u64,
}

/// How many concurrent clients [`load`] uses for `n` keys.
pub(crate) fn load_clients(n: usize) -> usize {
    LOAD_CLIENTS.min(n).max(1)
}

/// Create keys `<prefix>0000000000` to `n - 1` with [`load_clients`] concurrent writers.
/// Client `i` records its latencies into `latencies[i]` if given (so that callers can allocate
/// them beforehand), else into a fresh one.
pub(crate) async fn load(
    store: &Arc<dyn Store>,
    prefix: &[u8],
    n: usize,
    value_size: usize,
    latencies: Vec<Latencies>,
) -> Result<Loaded> {
    let filler = filler(value_size);
    let clients = load_clients(n);
    let mut given = latencies.into_iter();
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for first in 0..clients {
        let indexes = (first as u64..n as u64).step_by(clients);
        let (store, prefix, filler) = (store.clone(), prefix.to_vec(), filler.clone());
        let samples = given.next().unwrap_or_default();
        tasks.spawn(load_loop(store, prefix, indexes, filler, samples));
    }
    let latencies = join_latencies(tasks).await?;
    let key_len = prefix.len() as u64 + 10;
    Ok(Loaded {
        elapsed: started.elapsed(),
        live_bytes: latencies.len() as u64 * (key_len + value_size as u64),
        latencies,
    })
}

/// One loader's share of the keys: those at `indexes`.
async fn load_loop(
    store: Arc<dyn Store>,
    prefix: Vec<u8>,
    indexes: std::iter::StepBy<std::ops::Range<u64>>,
    filler: Arc<[u8]>,
    mut latencies: Latencies,
) -> Result<Latencies> {
    let mut key = Vec::with_capacity(prefix.len() + 10);
    for i in indexes {
        numbered_key(&mut key, &prefix, i);
        let start = Instant::now();
        store
            .create(&key, stamped_value(&filler, i), 0)
            .await
            .with_context(|| format!("creating {}", String::from_utf8_lossy(&key)))?;
        latencies.record(start.elapsed());
    }
    Ok(latencies)
}

/// `--readers` clients reading random keys of the dataset, one at a time.
pub(crate) async fn get(target: &Target<'_>, data: &Dataset) -> Result<Measurement> {
    let options = target.options;
    let budget = Arc::new(Budget::new(options.duration, options.count));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..options.readers {
        let job = get_loop(target.store.clone(), data.keys.clone(), budget.clone(), i);
        tasks.spawn(job);
    }
    let latencies = join_latencies(tasks).await?;
    let elapsed = started.elapsed();
    let mut m = Measurement::new(
        target.backend,
        Workload::Get,
        options.readers,
        latencies.summary(),
        elapsed,
    );
    m.value_size = Some(options.value_size);
    Ok(m)
}

async fn get_loop(
    store: Arc<dyn Store>,
    keys: Arc<Vec<Bytes>>,
    budget: Arc<Budget>,
    reader: usize,
) -> Result<Latencies> {
    let mut latencies = Latencies::default();
    let mut rng = XorShift::new(reader as u64);
    loop {
        let start = Instant::now();
        if !budget.take(start) {
            return Ok(latencies);
        }
        let key = &keys[rng.below(keys.len())];
        let (found, _) = store
            .get(key, 0)
            .await
            .with_context(|| format!("reading {}", String::from_utf8_lossy(key)))?;
        ensure!(
            found.is_some(),
            "key {} vanished during the get workload",
            String::from_utf8_lossy(key)
        );
        latencies.record(start.elapsed());
        // A store that answers without suspending would otherwise let one client hog a worker
        // thread; this yields now and then (every 128 operations or so) so all clients run.
        tokio::task::consume_budget().await;
    }
}

/// `--range-clients` clients each reading the whole dataset as one range, repeatedly.
pub(crate) async fn range(target: &Target<'_>, data: &Dataset) -> Result<Measurement> {
    let options = target.options;
    let budget = Arc::new(Budget::new(options.duration, options.count));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..options.range_clients {
        let job = range_loop(
            target.store.clone(),
            data.prefix.clone(),
            data.keys.len(),
            budget.clone(),
        );
        tasks.spawn(job);
    }
    let latencies = join_latencies(tasks).await?;
    let elapsed = started.elapsed();
    let mut m = Measurement::new(
        target.backend,
        Workload::Range,
        options.range_clients,
        latencies.summary(),
        elapsed,
    );
    m.value_size = Some(options.value_size);
    m.keys = Some(data.keys.len() as u64);
    Ok(m)
}

async fn range_loop(
    store: Arc<dyn Store>,
    prefix: Bytes,
    expected: usize,
    budget: Arc<Budget>,
) -> Result<Latencies> {
    let mut latencies = Latencies::default();
    loop {
        let start = Instant::now();
        if !budget.take(start) {
            return Ok(latencies);
        }
        let response = store
            .range(RangeRequest::prefix(prefix.clone()))
            .await
            .with_context(|| format!("reading the range of {expected} keys"))?;
        ensure!(
            response.kvs.len() == expected && !response.more,
            "the range returned {} keys, expected {expected}",
            response.kvs.len()
        );
        latencies.record(start.elapsed());
        // A store that answers without suspending would otherwise let one client hog a worker
        // thread; this yields now and then (every 128 operations or so) so all clients run.
        tokio::task::consume_budget().await;
    }
}

/// Delete every key under `prefix`, a page at a time, with concurrent deletes. Returns how many.
pub(crate) async fn delete_prefix(store: &Arc<dyn Store>, prefix: &str) -> Result<u64> {
    let mut deleted = 0;
    let first = RangeRequest::prefix(Bytes::copy_from_slice(prefix.as_bytes()));
    let mut request = first.limit(DELETE_PAGE);
    loop {
        let page = store.range(request.clone()).await?;
        let keys: Vec<Bytes> = page.kvs.into_iter().map(|kv| kv.key).collect();
        let Some(last) = keys.last() else {
            return Ok(deleted);
        };
        request = request.after(last);
        deleted += keys.len() as u64;
        delete_keys(store, keys).await?;
        if !page.more {
            return Ok(deleted);
        }
    }
}

/// Delete `keys` with up to [`LOAD_CLIENTS`] concurrent deleters; already-gone keys are fine.
async fn delete_keys(store: &Arc<dyn Store>, keys: Vec<Bytes>) -> Result<()> {
    let per_task = keys.len().div_ceil(LOAD_CLIENTS).max(1);
    let mut tasks = JoinSet::new();
    for chunk in keys.chunks(per_task) {
        let (store, chunk) = (store.clone(), chunk.to_vec());
        tasks.spawn(async move {
            for key in chunk {
                match store.delete(&key, None).await {
                    Ok(_) | Err(StoreError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.context("a delete task failed")??;
    }
    Ok(())
}

/// A tiny, allocation-free pseudo-random generator for picking keys (xorshift64*).
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A number in `0..n` (n > 0); the slight modulo bias does not matter here.
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_budget_allows_exactly_count() {
        let budget = Budget::new(Duration::ZERO, Some(3));
        let now = Instant::now();
        let allowed = (0..10).filter(|_| budget.take(now)).count();
        assert_eq!(allowed, 3);
    }

    #[test]
    fn duration_budget_stops_at_deadline() {
        let budget = Budget::new(Duration::from_secs(60), None);
        assert!(budget.take(Instant::now()));
        assert!(!budget.take(Instant::now() + Duration::from_secs(61)));
    }

    #[test]
    fn keys_and_values() {
        let mut key = Vec::new();
        numbered_key(&mut key, b"/p/", 42);
        assert_eq!(key, b"/p/0000000042");
        let value = stamped_value(&filler(16), 7);
        assert_eq!(value.len(), 16);
        assert_eq!(&value[..8], &7u64.to_le_bytes());
    }

    #[test]
    fn xorshift_stays_in_bounds() {
        let mut rng = XorShift::new(0);
        assert!((0..1000).all(|_| rng.below(7) < 7));
    }
}
