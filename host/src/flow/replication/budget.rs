//! The bytes a replication task keeps sent and not yet acknowledged. Over the budget, new
//! records wait until half of it is acknowledged, then go on in a burst: a trickle of
//! single records would wake librdkafka's broker thread once per record.
//!
//! A paced budget ([`UnackedBudget::paced`]) also keeps what waits no longer than a given
//! time at the rate the target acknowledges: a single instance's producer gives a record up
//! a quarter of a lease after it was queued, and a target slower than the byte budget
//! would otherwise see records time out (and be sent again) while it is healthy.

use std::time::{Duration, Instant};

/// Below this a record is counted as this many bytes (headers, framing).
const MIN_SIZE: usize = 100;

/// A paced budget never holds back below this (and starts from it): enough for a batch per
/// partition in flight while the rate is measured.
const PACED_FLOOR: usize = 256 * 1024;

/// How long acknowledgements are counted before the rate is taken.
const RATE_WINDOW: Duration = Duration::from_millis(250);

/// The rate the target acknowledges at, in records per second, measured over windows of
/// [`RATE_WINDOW`] in which records were acknowledged. A window in which the budget held
/// records back measures the budget as much as the target: its rate is believed only when
/// it is higher (else the budget would shrink itself to its floor on a slow link).
#[derive(Debug, Clone)]
struct Pace {
    within: Duration,
    since: Option<Instant>,
    acked: usize,
    rate: f64,
    held: bool,
}

/// A byte budget for un-acknowledged records, judged from the producer's queue length and
/// the records' average size (no per-record bookkeeping).
#[derive(Debug, Clone)]
pub struct UnackedBudget {
    bytes: usize,
    average: usize,
    holding: bool,
    pace: Option<Pace>,
}

impl UnackedBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> Self {
        UnackedBudget {
            bytes: bytes.max(1),
            average: 0,
            holding: false,
            pace: None,
        }
    }

    /// A budget of at most `bytes` that holds no more than the target acknowledges in
    /// `within` (measured; at least 256 KiB).
    pub fn paced(bytes: usize, within: Duration) -> Self {
        UnackedBudget {
            pace: Some(Pace {
                within,
                since: None,
                acked: 0,
                rate: 0.0,
                held: false,
            }),
            ..UnackedBudget::new(bytes)
        }
    }

    /// `records` were acknowledged at `now` (a paced budget measures the rate).
    pub fn acked(&mut self, records: usize, now: Instant) {
        let holding = self.holding;
        let Some(pace) = &mut self.pace else {
            return;
        };
        if records == 0 {
            return; // a window is measured from acknowledgements to acknowledgements
        }
        pace.held |= holding;
        let since = *pace.since.get_or_insert(now);
        pace.acked += records;
        let elapsed = now.saturating_duration_since(since);
        if elapsed >= RATE_WINDOW {
            let sample = pace.acked as f64 / elapsed.as_secs_f64();
            // Quick to follow a faster target; a slower one is believed by halves, and
            // only from a window the budget did not throttle.
            if sample >= pace.rate {
                pace.rate = sample;
            } else if !pace.held {
                pace.rate = pace.rate * 0.5 + sample * 0.5;
            }
            pace.acked = 0;
            pace.held = false;
            pace.since = Some(now);
        }
    }

    /// An idle spell: the next acknowledgements start a new window (the time without any
    /// says nothing of the target's rate).
    pub fn idle(&mut self) {
        if let Some(pace) = &mut self.pace {
            pace.since = None;
            pace.acked = 0;
            pace.held = false;
        }
    }

    /// The bytes held back from: the budget, or what the target acknowledges in the pace's
    /// time.
    fn limit(&self) -> usize {
        match &self.pace {
            None => self.bytes,
            Some(p) => {
                let paced = p.rate * p.within.as_secs_f64() * self.average.max(MIN_SIZE) as f64;
                (paced as usize).clamp(PACED_FLOOR.min(self.bytes), self.bytes)
            }
        }
    }

    /// A record of `size` bytes was sent.
    pub fn sent(&mut self, size: usize) {
        self.average = if self.average == 0 {
            size
        } else {
            (self.average * 15 + size) / 16
        };
    }

    /// The bytes `records` un-acknowledged records come to.
    fn held(&self, records: usize) -> usize {
        records.saturating_mul(self.average.max(MIN_SIZE))
    }

    /// Whether new records wait, with `records` un-acknowledged: from the budget on, until
    /// half of it is left.
    pub fn holds(&mut self, records: usize) -> bool {
        let held = self.held(records);
        let limit = self.limit();
        self.holding = if self.holding {
            held > limit / 2
        } else {
            held >= limit
        };
        if let Some(pace) = &mut self.pace {
            pace.held |= self.holding;
        }
        self.holding
    }

    /// Whether the budget held records back when last asked ([`UnackedBudget::holds`]).
    pub fn holding(&self) -> bool {
        self.holding
    }

    /// Whether `records` un-acknowledged records leave room (half the budget).
    pub fn has_room(&self, records: usize) -> bool {
        self.held(records) <= self.limit() / 2
    }

    /// How many acknowledgements, with `records` un-acknowledged, let records go on again
    /// (at least one).
    pub fn acks_until_room(&self, records: usize) -> usize {
        if !self.holding {
            return 1;
        }
        let over = self.held(records).saturating_sub(self.limit() / 2);
        over.div_ceil(self.average.max(MIN_SIZE)).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_from_the_budget_until_half_of_it_is_acknowledged() {
        let mut b = UnackedBudget::new(10_000);
        b.sent(1_000);
        assert!(!b.holds(9));
        assert!(b.holds(10), "at the budget");
        assert!(b.holding());
        assert_eq!(b.acks_until_room(10), 5);
        assert!(b.holds(6), "still over half");
        assert!(!b.has_room(6));
        assert!(!b.holds(5), "half acknowledged");
        assert!(b.has_room(5));
        assert!(!b.holds(9), "below the budget again, not holding");
        assert_eq!(b.acks_until_room(9), 1);
    }

    #[test]
    fn sizes_are_a_moving_average_with_a_floor() {
        let mut b = UnackedBudget::new(1_600);
        b.sent(10);
        assert!(!b.holds(15), "10-byte records count as 100");
        assert!(b.holds(16));
        let mut b = UnackedBudget::new(100_000);
        b.sent(1_000);
        for _ in 0..64 {
            b.sent(5_000);
        }
        // 4,929 bytes on average after 64 records of 5,000 (from 1,000).
        assert!(!b.holds(20), "the average follows the sizes sent lately");
        assert!(b.holds(21));
    }

    #[test]
    fn a_paced_budget_holds_what_the_target_acknowledges_in_its_time() {
        let (t0, ms) = (Instant::now(), Duration::from_millis);
        let mut b = UnackedBudget::paced(16 << 20, Duration::from_secs(1));
        b.sent(1_000);
        // Nothing measured yet: the floor, 256 KiB (262 records of 1,000 bytes).
        assert!(!b.holds(262));
        assert!(b.holds(263));
        // A target acknowledging 2,000 records/s: 2 MB wait at most.
        b.acked(1, t0);
        b.acked(499, t0 + ms(250));
        assert!(!b.holds(999), "half acknowledged: held no longer");
        assert!(!b.holds(1_999));
        assert!(b.holds(2_000));
        assert!(!b.holds(1_000), "half acknowledged");
        // Faster: followed at once, up to the byte budget.
        b.acked(50_000, t0 + ms(500));
        assert!(!b.holds(16_000));
        assert!(b.holds(16_778), "never above the byte budget");
        assert!(!b.holds(8_000));
        // Slower, while the budget holds records back: not believed (it measures the
        // budget itself, which would shrink to its floor on a slow link).
        assert!(b.holds(16_778));
        for w in 1..=10 {
            b.acked(250, t0 + ms(500 + 250 * w));
        }
        assert!(!b.holds(8_000), "still the byte budget: {b:?}");
        // Slower without holding anything back: believed by halves, window after window
        // (1,000 records/s here).
        for w in 11..=20 {
            assert!(!b.holds(10));
            b.acked(250, t0 + ms(500 + 250 * w));
        }
        assert!(b.holds(1_300), "about 1.2 MB now: {b:?}");
        assert!(!b.holds(500));
        // An idle spell is not a slow target: the next window starts afresh.
        b.idle();
        b.acked(1, t0 + ms(60_000));
        b.acked(5_000, t0 + ms(60_250));
        assert!(!b.holds(16_000));
    }

    #[test]
    fn a_record_larger_than_the_budget_still_goes() {
        let mut b = UnackedBudget::new(1_000);
        b.sent(50_000);
        assert!(!b.holds(0), "nothing un-acknowledged: never held");
        assert!(b.holds(1));
    }
}
