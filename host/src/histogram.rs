//! A replication-latency histogram cheap enough for every record: fixed buckets of
//! atomic counters, rendered as a Prometheus histogram at scrape time.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets, in seconds (the last bucket is +Inf).
pub const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

/// A histogram of latencies.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl LatencyHistogram {
    /// Records `n` observations of `millis` milliseconds.
    pub fn observe_ms(&self, millis: i64, n: u64) {
        let seconds = millis.max(0) as f64 / 1000.0;
        let bucket = BUCKETS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[bucket].fetch_add(n, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(millis.max(0) as u64 * 1000 * n, Ordering::Relaxed);
    }

    /// (sum in seconds, count, (upper bound, count) of each bucket, not cumulative).
    pub fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(BUCKETS.len() + 1);
        for (i, c) in self.counts.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            total += n;
            let bound = BUCKETS.get(i).copied().unwrap_or(f64::INFINITY);
            buckets.push((bound, n));
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        (sum, total, buckets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_buckets() {
        let h = LatencyHistogram::default();
        h.observe_ms(3, 2);
        h.observe_ms(70_000, 1);
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 3);
        assert!((sum - 70.006).abs() < 1e-9, "{sum}");
        assert_eq!(buckets[1], (0.0025, 0), "3 ms is above 2.5 ms");
        assert_eq!(buckets[2], (0.005, 2));
        assert_eq!(buckets.last().copied(), Some((f64::INFINITY, 1)));
    }
}
