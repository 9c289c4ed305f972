//! The bytes a replication task keeps sent and not yet acknowledged. Over the budget, new
//! records wait until half of it is acknowledged, then go on in a burst: a trickle of
//! single records would wake librdkafka's broker thread once per record.

/// Below this a record is counted as this many bytes (headers, framing).
const MIN_SIZE: usize = 100;

/// A byte budget for un-acknowledged records, judged from the producer's queue length and
/// the records' average size (no per-record bookkeeping).
#[derive(Debug, Clone)]
pub struct UnackedBudget {
    bytes: usize,
    average: usize,
    holding: bool,
}

impl UnackedBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> Self {
        UnackedBudget {
            bytes: bytes.max(1),
            average: 0,
            holding: false,
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
        self.holding = if self.holding {
            held > self.bytes / 2
        } else {
            held >= self.bytes
        };
        self.holding
    }

    /// Whether the budget held records back when last asked ([`UnackedBudget::holds`]).
    pub fn holding(&self) -> bool {
        self.holding
    }

    /// Whether `records` un-acknowledged records leave room (half the budget).
    pub fn has_room(&self, records: usize) -> bool {
        self.held(records) <= self.bytes / 2
    }

    /// How many acknowledgements, with `records` un-acknowledged, let records go on again
    /// (at least one).
    pub fn acks_until_room(&self, records: usize) -> usize {
        if !self.holding {
            return 1;
        }
        let over = self.held(records).saturating_sub(self.bytes / 2);
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
    fn a_record_larger_than_the_budget_still_goes() {
        let mut b = UnackedBudget::new(1_000);
        b.sent(50_000);
        assert!(!b.holds(0), "nothing un-acknowledged: never held");
        assert!(b.holds(1));
    }
}
