//! One partition's progress through the data plane, as a pure state machine: which source
//! offsets are in flight to the target, which are done (acked, or skipped as unproducible),
//! and the offset that may be committed — the first one not done, never past a record the
//! partition is blocked at.
//!
//! Delivery reports of one partition arrive in the order the records were produced
//! (librdkafka keeps per-partition order, the producer is idempotent), so the oldest record
//! in flight is always the one a report is about.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How often an owned partition's stored position is committed again though it did not
/// move: committed offsets of a group without members (a single instance's, the
/// exactly-once shards' target group, a former group after a switch to `single_instance`)
/// expire `offsets.retention.minutes` (7 days by default) after their last commit, and a
/// quiet partition would then be mirrored again from its start (or, under "latest", skip
/// what arrived meanwhile). Also right after an assignment: how old the stored commit is,
/// is unknown. At most: a cluster whose retention is shorter is refreshed a quarter of its
/// retention apart ([`refresh_every`]).
pub const REFRESH_EVERY: Duration = Duration::from_secs(3600);

/// How often stored positions are committed again on clusters that keep a group's
/// committed offsets `retention` after their last commit (`offsets.retention.minutes`;
/// `None`: unknown): a quarter of it, at most [`REFRESH_EVERY`], at least 5 s.
pub fn refresh_every(retention: Option<Duration>) -> Duration {
    retention.map_or(REFRESH_EVERY, |r| {
        (r / 4).clamp(Duration::from_secs(5), REFRESH_EVERY)
    })
}

/// A record produced and not yet acked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    /// Its source offset.
    pub upstream: i64,
    /// Its timestamp (ms since the epoch), if it has one.
    pub timestamp: Option<i64>,
    /// When it was handed to the producer.
    pub sent: Instant,
}

/// The progress of one source partition.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    in_flight: VecDeque<InFlight>,
    /// The offset after the last record handed to the producer or skipped.
    next: Option<i64>,
    /// The record the partition is blocked at (it cannot be produced), if any.
    blocked: Option<i64>,
    /// The offset last committed (or being committed).
    committed: Option<i64>,
    /// The offset last confirmed stored.
    stored: Option<i64>,
}

impl Progress {
    /// A partition nothing was read from yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `record` was handed to the producer.
    pub fn sent(&mut self, record: InFlight) {
        self.next = Some(record.upstream + 1);
        self.in_flight.push_back(record);
    }

    /// The record at `upstream` is done without being produced (skipped).
    pub fn skipped(&mut self, upstream: i64) {
        self.next = Some(self.next.map_or(upstream + 1, |n| n.max(upstream + 1)));
    }

    /// The oldest record in flight got its delivery report (ack or failure); returns it.
    pub fn delivered(&mut self) -> Option<InFlight> {
        self.in_flight.pop_front()
    }

    /// Blocks the partition at `upstream`: nothing at or after it counts as done until
    /// [`Self::unblock`].
    pub fn block(&mut self, upstream: i64) {
        self.blocked = Some(self.blocked.map_or(upstream, |b| b.min(upstream)));
    }

    /// The offset after the last record sent or skipped (`None` before the first).
    pub fn next(&self) -> Option<i64> {
        self.next
    }

    /// The offset the partition is blocked at.
    pub fn blocked_at(&self) -> Option<i64> {
        self.blocked
    }

    /// Whether the record at `upstream` counts: not at or after a block.
    pub fn counts(&self, upstream: i64) -> bool {
        self.blocked.is_none_or(|b| upstream < b)
    }

    /// Unblocks the partition to re-read from its block; only once nothing is in flight (the
    /// abandoned records' reports must have arrived). Returns the offset to read from.
    pub fn unblock(&mut self) -> Option<i64> {
        if !self.in_flight.is_empty() {
            return None;
        }
        let at = self.blocked.take()?;
        self.next = Some(at);
        Some(at)
    }

    /// How many records are in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// When the oldest record in flight was sent.
    pub fn oldest_sent(&self) -> Option<Instant> {
        self.in_flight.front().map(|r| r.sent)
    }

    /// The offset that may be committed: the oldest record in flight, else the one after
    /// the last done; never past the block.
    pub fn committable(&self) -> Option<i64> {
        let done = self.in_flight.front().map(|r| r.upstream).or(self.next)?;
        Some(self.blocked.map_or(done, |b| done.min(b)))
    }

    /// The committable offset if it moved since the last commit; remembers it as committed.
    pub fn take_commit(&mut self) -> Option<i64> {
        let at = self.committable()?;
        if self.committed.is_some_and(|c| c >= at) {
            return None;
        }
        self.committed = Some(at);
        Some(at)
    }

    /// The committable offset if it is not confirmed stored, whether or not a commit of it
    /// was taken (its outcome may not be known yet); remembers it as committed. For the
    /// last commit of a partition about to go.
    pub fn take_unstored(&mut self) -> Option<i64> {
        let at = self.committable()?;
        if self.stored.is_some_and(|s| s >= at) {
            return None;
        }
        self.committed = Some(at);
        Some(at)
    }

    /// A commit of `offset` failed: it is tried again with the next one.
    pub fn commit_failed(&mut self, offset: i64) {
        if self.committed == Some(offset) {
            self.committed = None;
        }
    }

    /// The offset last committed (or being committed).
    pub fn committed(&self) -> Option<i64> {
        self.committed
    }

    /// A commit of `offset` was confirmed. One not taken since the log started again
    /// ([`Self::restart`]; an old log's position confirmed late) changes nothing.
    pub fn commit_succeeded(&mut self, offset: i64) {
        if self.committed.is_none_or(|c| c < offset) {
            return;
        }
        self.stored = Some(self.stored.map_or(offset, |s| s.max(offset)));
    }

    /// The offset last confirmed stored.
    pub fn stored(&self) -> Option<i64> {
        self.stored
    }

    /// Whether progress moved past what is confirmed stored.
    pub fn unstored(&self) -> bool {
        self.committable()
            .is_some_and(|at| self.stored.is_none_or(|s| s < at))
    }

    /// The source partition's log started again (its topic was deleted and created, or the
    /// log truncated) below the records done: what was committed or stored of the old log
    /// means nothing for the new one, and the next commit stores the new position even
    /// though it is lower. The partition is blocked at `at`, the first record of the new
    /// log to mirror: the old log's records still in flight no longer count, and
    /// [`Self::unblock`] goes on from `at`.
    pub fn restart(&mut self, at: i64) {
        self.committed = None;
        self.stored = None;
        self.blocked = Some(at);
    }

    /// Nothing was sent yet and nothing below `at` needs mirroring (it is known to be on
    /// the target): the partition starts at `at`.
    pub fn start_at(&mut self, at: i64) {
        if self.in_flight.is_empty() {
            self.next = Some(self.next.map_or(at, |n| n.max(at)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_refreshed_a_quarter_of_the_retention_apart_at_most_hourly() {
        let min = |m: u64| Some(Duration::from_secs(60 * m));
        assert_eq!(refresh_every(None), REFRESH_EVERY);
        assert_eq!(
            refresh_every(min(7 * 24 * 60)),
            REFRESH_EVERY,
            "Kafka's 7 days"
        );
        assert_eq!(refresh_every(min(60)), Duration::from_secs(15 * 60));
        assert_eq!(refresh_every(min(1)), Duration::from_secs(15));
        assert_eq!(refresh_every(Some(Duration::ZERO)), Duration::from_secs(5));
    }
    use proptest::prelude::*;

    fn rec(up: i64) -> InFlight {
        InFlight {
            upstream: up,
            timestamp: None,
            sent: Instant::now(),
        }
    }

    #[test]
    fn commits_follow_acks_in_order() {
        let mut p = Progress::new();
        assert_eq!(p.committable(), None, "nothing read yet");
        p.sent(rec(10));
        p.sent(rec(11));
        assert_eq!(p.committable(), Some(10), "10 is not acked");
        p.delivered();
        assert_eq!(p.take_commit(), Some(11));
        assert_eq!(p.take_commit(), None, "unchanged");
        p.delivered();
        assert_eq!(p.take_commit(), Some(12));
    }

    #[test]
    fn a_skipped_record_is_done_once_the_earlier_ones_are() {
        let mut p = Progress::new();
        p.sent(rec(0));
        p.skipped(1);
        assert_eq!(p.committable(), Some(0));
        p.delivered();
        assert_eq!(p.committable(), Some(2));
    }

    #[test]
    fn a_block_holds_the_commit_until_unblocked_after_the_abandoned_reports() {
        let mut p = Progress::new();
        for up in 0..5 {
            p.sent(rec(up));
        }
        p.delivered(); // 0 acked
        p.delivered(); // 1 failed: blocked there
        p.block(1);
        assert_eq!(p.committable(), Some(1));
        assert!(!p.counts(3) && p.counts(0));
        assert_eq!(p.unblock(), None, "2..=4 still in flight");
        p.delivered();
        p.delivered();
        p.delivered();
        assert_eq!(
            p.committable(),
            Some(1),
            "abandoned acks never pass the block"
        );
        assert_eq!(p.unblock(), Some(1), "re-read from the record that failed");
        assert_eq!(p.committable(), Some(1));
        assert_eq!(p.blocked_at(), None);
    }

    #[test]
    fn a_failed_commit_is_tried_again() {
        let mut p = Progress::new();
        p.skipped(4);
        assert_eq!(p.take_commit(), Some(5));
        p.commit_failed(5);
        assert_eq!(p.take_commit(), Some(5));
    }

    #[test]
    fn a_partition_about_to_go_commits_what_is_not_confirmed_stored() {
        let mut p = Progress::new();
        p.skipped(4);
        // The committer took 5; its outcome is not known yet (it failed: a rebalance).
        assert_eq!(p.take_commit(), Some(5));
        assert_eq!(p.take_commit(), None, "taken already");
        assert_eq!(p.take_unstored(), Some(5), "not confirmed: committed again");
        p.commit_succeeded(5);
        assert_eq!(p.take_unstored(), None, "stored");
        p.skipped(5);
        assert_eq!(p.take_unstored(), Some(6));
    }

    proptest! {
        /// Whatever the order of sends, reports, skips and blocks, the committable offset
        /// never passes a record that is neither acked nor skipped.
        #[test]
        fn never_commits_past_an_unfinished_record(ops in proptest::collection::vec(0u8..4, 1..200)) {
            let mut p = Progress::new();
            let mut next = 0i64;
            let mut done = std::collections::BTreeSet::new();
            let mut failed_unskipped = std::collections::BTreeSet::new();
            for op in ops {
                match op {
                    0 => { p.sent(rec(next)); next += 1; }
                    1 => { p.skipped(next); done.insert(next); next += 1; }
                    2 => if let Some(r) = p.delivered() && p.counts(r.upstream) { done.insert(r.upstream); },
                    _ => if let Some(r) = p.delivered() { p.block(r.upstream); failed_unskipped.insert(r.upstream); },
                }
                if let Some(c) = p.committable() {
                    for up in 0..c {
                        prop_assert!(done.contains(&up) && !failed_unskipped.contains(&up),
                            "committable {c} passes {up}, which is not done");
                    }
                }
            }
        }
    }
}
