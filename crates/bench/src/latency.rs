//! Latency samples and exact percentiles over them.

use std::time::Duration;

/// The latencies of one measurement, in nanoseconds. Percentiles are computed exactly from
/// every sample (nearest rank), which is cheap at benchmark sizes (8 bytes a sample).
#[derive(Debug, Default)]
pub(crate) struct Latencies {
    nanos: Vec<u64>,
}

/// The percentiles a measurement reports.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Summary {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The largest sample; 0 when there are none.
    pub max_ms: f64,
}

impl Latencies {
    /// Room for `n` samples up front, so that recording does not reallocate.
    pub fn with_capacity(n: usize) -> Self {
        Latencies {
            nanos: Vec::with_capacity(n),
        }
    }

    pub fn record(&mut self, latency: Duration) {
        self.record_nanos(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn record_nanos(&mut self, nanos: u64) {
        self.nanos.push(nanos);
    }

    /// Add another client's samples to these.
    pub fn merge(&mut self, other: Latencies) {
        self.nanos.extend_from_slice(&other.nanos);
    }

    pub fn len(&self) -> usize {
        self.nanos.len()
    }

    /// The nearest-rank percentile `p` (0..=1), in milliseconds, without consuming the samples.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        let mut sorted = self.nanos.clone();
        sorted.sort_unstable();
        to_ms(percentile(&sorted, p))
    }

    /// Sort the samples and read the percentiles off them.
    pub fn summary(mut self) -> Summary {
        self.nanos.sort_unstable();
        Summary {
            count: self.nanos.len() as u64,
            p50_ms: to_ms(percentile(&self.nanos, 0.50)),
            p99_ms: to_ms(percentile(&self.nanos, 0.99)),
            max_ms: to_ms(self.nanos.last().copied().unwrap_or(0)),
        }
    }
}

/// The nearest-rank percentile `p` (0..=1) of sorted samples; 0 when there are none.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(crate) fn to_ms(nanos: u64) -> f64 {
    nanos as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut l = Latencies::default();
        for ms in (1..=100).rev() {
            l.record(Duration::from_millis(ms));
        }
        let s = l.summary();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50_ms, 50.0);
        assert_eq!(s.p99_ms, 99.0);
        assert_eq!(s.max_ms, 100.0);
    }

    #[test]
    fn merge_and_empty() {
        assert_eq!(Latencies::default().summary().p99_ms, 0.0);
        let mut a = Latencies::default();
        a.record_nanos(1_000_000);
        let mut b = Latencies::default();
        b.record_nanos(3_000_000);
        a.merge(b);
        let s = a.summary();
        assert_eq!((s.count, s.p50_ms, s.p99_ms), (2, 1.0, 3.0));
    }
}
