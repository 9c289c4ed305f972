//! Histograms cheap enough for every record or plugin call: fixed buckets of atomic
//! counters, rendered as Prometheus histograms at scrape time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Replication latency buckets, in seconds (the last bucket is +Inf).
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

/// Plugin call duration buckets, in seconds: a call takes microseconds, a deadline 1 s.
pub const CALL_BUCKETS: [f64; 12] = [
    0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0,
];

/// A histogram over fixed bucket bounds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Box<[AtomicU64]>,
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// An empty histogram with these upper bounds (ascending, in seconds).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    /// A replication-latency histogram.
    pub fn latency() -> Self {
        Self::new(&LATENCY_BUCKETS)
    }

    /// A plugin-call-duration histogram.
    pub fn calls() -> Self {
        Self::new(&CALL_BUCKETS)
    }

    /// Records `n` observations of `millis` milliseconds.
    pub fn observe_ms(&self, millis: i64, n: u64) {
        self.observe_n(Duration::from_millis(millis.max(0) as u64), n);
    }

    /// Records one observation of `d`.
    pub fn observe(&self, d: Duration) {
        self.observe_n(d, 1);
    }

    fn observe_n(&self, d: Duration, n: u64) {
        let seconds = d.as_secs_f64();
        let bucket = self
            .bounds
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[bucket].fetch_add(n, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos
            .fetch_add(nanos.saturating_mul(n), Ordering::Relaxed);
    }

    /// (sum in seconds, count, (upper bound, count) of each bucket, not cumulative).
    pub fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(self.counts.len());
        for (i, c) in self.counts.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            total += n;
            let bound = self.bounds.get(i).copied().unwrap_or(f64::INFINITY);
            buckets.push((bound, n));
        }
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        (sum, total, buckets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_buckets() {
        let h = Histogram::latency();
        h.observe_ms(3, 2);
        h.observe_ms(70_000, 1);
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 3);
        assert!((sum - 70.006).abs() < 1e-9, "{sum}");
        assert_eq!(buckets[1], (0.0025, 0), "3 ms is above 2.5 ms");
        assert_eq!(buckets[2], (0.005, 2));
        assert_eq!(buckets.last().copied(), Some((f64::INFINITY, 1)));
    }

    #[test]
    fn call_durations_keep_microseconds() {
        let h = Histogram::calls();
        h.observe(Duration::from_micros(7));
        h.observe(Duration::from_micros(70));
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 2);
        assert!((sum - 0.000077).abs() < 1e-12, "{sum}");
        assert_eq!(buckets[0], (0.00001, 1));
        assert_eq!(buckets[2], (0.0001, 1));
    }
}
