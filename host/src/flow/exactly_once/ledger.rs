//! What one shard's open transaction holds, as a pure state machine: per partition the
//! position stored on the target (committed with the last transaction), the position after
//! the last record taken into the open one, and its records not yet acked; the
//! transaction's size and age. A commit moves every partition's stored position to where
//! its records reached; an abort moves them back (the shell seeks the source there).

use super::super::replication::truncation::{Truncation, judge};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// One partition of the shard.
#[derive(Debug, Clone)]
pub struct Part {
    /// The source topic.
    pub source: String,
    /// The partition.
    pub partition: i32,
    /// The target topic.
    pub target: String,
    /// The position stored on the target (the next record to mirror), if any.
    stored: Option<i64>,
    /// Where this assignment began reading (the first record seen, without stored
    /// progress).
    base: Option<i64>,
    /// The position after the last record taken into the open transaction.
    next: Option<i64>,
    /// Source offsets of records produced and not yet acked, in order.
    in_flight: VecDeque<i64>,
    /// Whether the next record is the first since the stored position was read.
    first: bool,
    /// Where the partition stops: no record at or past it is taken (the target will not
    /// take it, a transform failed on it, or records were lost at the source under
    /// `pause`).
    blocked: Option<Blocked>,
    /// When its position was last stored (`None`: not since it was added).
    stored_at: Option<Instant>,
    /// Its stored position is to be stored again with the next transaction, though it did
    /// not move ([`Ledger::refresh_due`]).
    refresh: bool,
}

/// Where a partition stops, since when, and whether it tries again by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    /// No record at or past this one is taken.
    pub at: i64,
    /// Since when.
    pub since: Instant,
    /// Whether it reads the record again after a while (else only after a restart).
    pub retry: bool,
}

impl Part {
    /// The position to read from after an abort, if this assignment read anything.
    fn rewind(&self) -> Option<i64> {
        self.stored.or(self.base)
    }

    /// The next record expected, if known.
    pub fn expected(&self) -> Option<i64> {
        self.next.or(self.stored)
    }

    /// The position stored on the target.
    pub fn stored(&self) -> Option<i64> {
        self.stored
    }

    /// Records produced and not yet acked.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Where the partition stops, if it does.
    pub fn blocked(&self) -> Option<Blocked> {
        self.blocked
    }
}

/// What to do with a record fetched for a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// Take it into the transaction.
    Take,
    /// Ignore it: before the expected one (fetched before a seek), or not this shard's.
    Ignore,
    /// Ignore it: its partition stops at or before it (the shell pauses the partition).
    Stopped,
    /// Records were lost at the source before it: reported; under `continue` it is taken
    /// (`take`), else its partition stops there.
    Lost {
        /// What was lost.
        truncation: Truncation,
        /// Whether the record is taken.
        take: bool,
    },
    /// Records were lost at the source or its log started again, and librdkafka's reset
    /// (to the end, under `start_offset = "latest"`) skipped records the log still holds:
    /// reported, and the partition is read again from `at` (the record in hand is not
    /// taken).
    Reread {
        /// What was lost.
        truncation: Truncation,
        /// Where to read from.
        at: i64,
    },
}

/// A partition's position to move back to after an abort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewind {
    /// The source topic.
    pub source: String,
    /// The partition.
    pub partition: i32,
    /// Where to read from again.
    pub at: i64,
}

impl Rewind {
    /// Back to `at` of `source`/`partition`.
    pub fn to(source: &str, partition: i32, at: i64) -> Rewind {
        Rewind {
            source: source.to_string(),
            partition,
            at,
        }
    }
}

/// A partition's position to store on the target with the transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The source topic.
    pub source: String,
    /// The target topic (progress is kept under its partitions).
    pub target: String,
    /// The partition.
    pub partition: i32,
    /// The next record to mirror.
    pub at: i64,
}

/// The shard's partitions and its open transaction.
#[derive(Debug, Default)]
pub struct Ledger {
    parts: BTreeMap<u64, Part>,
    keys: BTreeMap<(String, i32), u64>,
    next_key: u64,
    /// When the open transaction began; `None`: none is open.
    opened: Option<Instant>,
    records: u64,
    bytes: u64,
    /// (key, upstream, downstream) of records acked in the open transaction.
    acked: Vec<(u64, i64, i64)>,
    /// A record the target did not take in the open transaction: (key, offset, why).
    failed: Option<(u64, i64, String)>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a partition whose position stored on the target is `stored`; returns its key.
    pub fn add(&mut self, source: &str, partition: i32, target: &str, stored: Option<i64>) -> u64 {
        let key = self.next_key;
        self.next_key += 1;
        self.parts.insert(
            key,
            Part {
                source: source.to_string(),
                partition,
                target: target.to_string(),
                stored,
                base: None,
                next: None,
                in_flight: VecDeque::new(),
                first: true,
                blocked: None,
                stored_at: None,
                refresh: false,
            },
        );
        self.keys.insert((source.to_string(), partition), key);
        key
    }

    /// Removes a partition (only between transactions).
    pub fn remove(&mut self, source: &str, partition: i32) -> Option<u64> {
        let key = self.keys.remove(&(source.to_string(), partition))?;
        self.parts.remove(&key);
        Some(key)
    }

    /// The key of a partition of the shard.
    pub fn key(&self, source: &str, partition: i32) -> Option<u64> {
        self.keys.get(&(source.to_string(), partition)).copied()
    }

    /// A partition by key.
    pub fn part(&self, key: u64) -> Option<&Part> {
        self.parts.get(&key)
    }

    /// A partition by key, to change.
    pub fn part_mut(&mut self, key: u64) -> Option<&mut Part> {
        self.parts.get_mut(&key)
    }

    /// Every partition.
    pub fn parts(&self) -> impl Iterator<Item = (u64, &Part)> {
        self.parts.iter().map(|(k, p)| (*k, p))
    }

    /// Whether a transaction is open.
    pub fn open(&self) -> bool {
        self.opened.is_some()
    }

    /// A transaction began.
    pub fn began(&mut self, now: Instant) {
        self.opened = Some(now);
    }

    /// What to do with the record at `offset` of partition `key`; `low` gives the
    /// partition's log start if known (asked only at a gap); `pause`: whether records lost
    /// at the source stop the partition.
    pub fn judge(
        &mut self,
        key: u64,
        offset: i64,
        low: impl FnOnce() -> Option<i64>,
        pause: bool,
    ) -> Take {
        let Some(part) = self.parts.get_mut(&key) else {
            return Take::Ignore;
        };
        if part.blocked.is_some_and(|b| offset >= b.at) {
            return Take::Stopped;
        }
        let first = std::mem::replace(&mut part.first, false);
        let Some(expected) = part.expected() else {
            part.base = Some(offset);
            return Take::Take;
        };
        if offset == expected {
            return Take::Take;
        }
        // librdkafka hands out a partition's records in order, never one before the last it
        // handed out but after a seek (a new assignment's first record, `first`) or after
        // resetting a position the log no longer holds: a record below the expected one
        // (not the first) is a log started again while the partition was read.
        let low = low();
        let truncation = if offset < expected {
            Truncation::WentBack {
                from: expected,
                to: offset,
            }
        } else {
            match judge(expected, offset, low, first) {
                Some(t) => t,
                None => return Take::Take, // compaction, or a transaction marker
            }
        };
        if pause {
            part.first = true;
            part.blocked = Some(Blocked {
                at: expected.min(offset),
                since: Instant::now(),
                retry: false,
            });
            return Take::Lost {
                truncation,
                take: false,
            };
        }
        // Where reading goes on: the record in hand, or the log start before it when
        // librdkafka answered the lost position with the log's end ("latest").
        let from = match truncation {
            Truncation::Deleted { to, .. } => to,
            Truncation::WentBack { .. } => low.filter(|l| *l < offset).unwrap_or(offset),
        };
        if let Truncation::WentBack { .. } = truncation {
            // A new log: the stored position moves back with the next commit.
            part.base = Some(from);
            part.stored = None;
        }
        if from < offset {
            // Stored with the next transaction even if no record is read meanwhile.
            part.next = Some(from);
            return Take::Reread {
                truncation,
                at: from,
            };
        }
        if let Truncation::WentBack { .. } = truncation {
            part.next = None;
        }
        Take::Lost {
            truncation,
            take: true,
        }
    }

    /// The partition `key`, without stored progress, starts at `at` (its end): the
    /// position is stored with the next transaction even if no record comes.
    pub fn start_at(&mut self, key: u64, at: i64) {
        if let Some(part) = self.parts.get_mut(&key)
            && part.stored.is_none()
        {
            part.base = Some(at);
            part.next = Some(at);
        }
    }

    /// Whether a partition moved past its stored position, or is to store it again.
    pub fn unstored(&self) -> bool {
        self.parts
            .values()
            .any(|p| p.refresh || (p.next.is_some() && p.next != p.stored))
    }

    /// Partitions whose position was not stored for `every` (or not since they were
    /// added: how old the stored commit is, is unknown) store it again with the next
    /// transaction, though they did not move: the target group has no members, so the
    /// broker expires its offsets `offsets.retention.minutes` after their last commit, and
    /// a quiet partition would be mirrored again from its start (issue 34 item 2).
    pub fn refresh_due(&mut self, now: Instant, every: Duration) {
        for p in self.parts.values_mut() {
            let old = p
                .stored_at
                .is_none_or(|t| now.saturating_duration_since(t) >= every);
            // A partition stopped for good waits for an operator, who may move its stored
            // position meanwhile: left alone.
            let stopped = p.blocked.is_some_and(|b| !b.retry);
            if old && !stopped && p.next.or(p.stored).is_some() {
                p.refresh = true;
            }
        }
    }

    /// The record at `offset` of `key` was produced (`bytes` of key and value).
    pub fn produced(&mut self, key: u64, offset: i64, bytes: usize) {
        if let Some(part) = self.parts.get_mut(&key) {
            part.next = Some(offset + 1);
            part.in_flight.push_back(offset);
        }
        self.records += 1;
        self.bytes += bytes as u64;
    }

    /// The record at `offset` of `key` is done without being produced (dropped by a
    /// transform, or skipped).
    pub fn passed(&mut self, key: u64, offset: i64) {
        if let Some(part) = self.parts.get_mut(&key) {
            part.next = Some(offset + 1);
        }
    }

    /// The partition `key` stops at `offset`: no record at or past it is taken (records
    /// before it still are: after an abort they are read again); `retry`: it reads the
    /// record again after a while.
    pub fn block(&mut self, key: u64, offset: i64, now: Instant, retry: bool) {
        if let Some(part) = self.parts.get_mut(&key) {
            part.blocked = Some(Blocked {
                at: offset,
                since: now,
                retry,
            });
        }
    }

    /// Partitions stopped at their own record for at least `after` (and not waiting for a
    /// restart): they read it again (returned).
    pub fn unblock_due(&mut self, now: Instant, after: Duration) -> Vec<Rewind> {
        let mut out = Vec::new();
        for part in self.parts.values_mut() {
            let Some(b) = part.blocked else { continue };
            let reached = part.expected().is_none_or(|e| e >= b.at);
            if b.retry && reached && now.duration_since(b.since) >= after {
                part.blocked = None;
                part.first = true;
                out.push(Rewind {
                    source: part.source.clone(),
                    partition: part.partition,
                    at: b.at,
                });
            }
        }
        out
    }

    /// A delivery report of `key`: the target offset, or why the target did not take it.
    pub fn delivered(&mut self, key: u64, result: Result<i64, String>) {
        let Some(part) = self.parts.get_mut(&key) else {
            return;
        };
        let Some(up) = part.in_flight.pop_front() else {
            return;
        };
        match result {
            Ok(down) => self.acked.push((key, up, down)),
            Err(why) => {
                if self.failed.is_none() {
                    self.failed = Some((key, up, why));
                }
            }
        }
    }

    /// (key, upstream, downstream) of the records acked in the open transaction.
    pub fn acked(&self) -> &[(u64, i64, i64)] {
        &self.acked
    }

    /// Records produced and not yet acked.
    pub fn in_flight(&self) -> usize {
        self.parts.values().map(|p| p.in_flight.len()).sum()
    }

    /// The record the target did not take in the open transaction, if any.
    pub fn failed(&self) -> Option<&(u64, i64, String)> {
        self.failed.as_ref()
    }

    /// Whether the open transaction is due: older than `interval`, or at a cap.
    pub fn due(&self, now: Instant, interval: Duration, max_records: u64, max_bytes: u64) -> bool {
        self.opened
            .is_some_and(|t| now.duration_since(t) >= interval)
            || self.full(max_records, max_bytes)
    }

    /// Whether the open transaction reached a size cap.
    pub fn full(&self, max_records: u64, max_bytes: u64) -> bool {
        self.opened.is_some() && (self.records >= max_records || self.bytes >= max_bytes)
    }

    /// The positions to store with the transaction: every partition that moved past its
    /// stored position.
    pub fn positions(&self) -> Vec<Position> {
        self.parts
            .values()
            .filter_map(|p| {
                let at = p.next.or(p.stored)?;
                (p.refresh || p.stored != Some(at)).then(|| Position {
                    source: p.source.clone(),
                    target: p.target.clone(),
                    partition: p.partition,
                    at,
                })
            })
            .collect()
    }

    /// The transaction committed: stored positions move; returns the records it held and
    /// the acked (key, upstream, downstream) pairs, for the offset syncs.
    pub fn committed(&mut self) -> (u64, u64, Vec<(u64, i64, i64)>) {
        let now = Instant::now();
        for part in self.parts.values_mut() {
            let moved = part.next.is_some() && part.next != part.stored;
            if part.next.is_some() {
                part.stored = part.next;
            }
            if moved || part.refresh {
                part.stored_at = Some(now);
                part.refresh = false;
            }
        }
        self.close()
    }

    /// The transaction aborted: every partition moves back to its stored position (the
    /// partitions that read anything are returned, with where to read from again).
    pub fn aborted(&mut self) -> Vec<Rewind> {
        let mut out = Vec::new();
        // Every partition that read anything goes back (not only those with records in the
        // transaction: the consumer may have handed out records of theirs not taken yet).
        for part in self.parts.values_mut() {
            part.in_flight.clear();
            // Without stored progress, where the assignment began stays to be stored.
            part.next = if part.stored.is_none() {
                part.base
            } else {
                None
            };
            if let Some(at) = part.rewind() {
                part.first = true;
                out.push(Rewind {
                    source: part.source.clone(),
                    partition: part.partition,
                    at,
                });
            }
        }
        self.close();
        out
    }

    fn close(&mut self) -> (u64, u64, Vec<(u64, i64, i64)>) {
        self.opened = None;
        self.failed = None;
        let records = std::mem::take(&mut self.records);
        let bytes = std::mem::take(&mut self.bytes);
        (records, bytes, std::mem::take(&mut self.acked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> (Ledger, u64, u64) {
        let mut l = Ledger::new();
        let a = l.add("orders", 0, "primary.orders", Some(10));
        let b = l.add("orders", 1, "primary.orders", None);
        (l, a, b)
    }

    #[test]
    fn a_commit_stores_where_each_partition_reached() {
        let (mut l, a, b) = ledger();
        let now = Instant::now();
        l.began(now);
        assert_eq!(l.judge(a, 10, || None, false), Take::Take);
        l.produced(a, 10, 100);
        assert_eq!(l.judge(b, 0, || None, false), Take::Take);
        l.passed(b, 0); // dropped by a transform: progress moves all the same
        l.delivered(a, Ok(55));
        assert_eq!(l.in_flight(), 0);
        assert_eq!(
            l.positions(),
            vec![
                Position {
                    source: "orders".into(),
                    target: "primary.orders".into(),
                    partition: 0,
                    at: 11
                },
                Position {
                    source: "orders".into(),
                    target: "primary.orders".into(),
                    partition: 1,
                    at: 1
                },
            ]
        );
        let (records, bytes, acked) = l.committed();
        assert_eq!((records, bytes, acked), (1, 100, vec![(a, 10, 55)]));
        assert!(!l.open());
        assert_eq!(l.part(a).unwrap().stored(), Some(11));
        assert!(l.positions().is_empty(), "nothing moved since");
    }

    #[test]
    fn an_abort_rewinds_to_the_stored_position_or_where_the_assignment_began() {
        let (mut l, a, b) = ledger();
        l.began(Instant::now());
        for o in 10..15 {
            assert_eq!(l.judge(a, o, || None, false), Take::Take);
            l.produced(a, o, 1);
        }
        assert_eq!(
            l.judge(b, 7, || None, false),
            Take::Take,
            "no stored progress: begins where it reads"
        );
        l.produced(b, 7, 1);
        l.delivered(a, Ok(0));
        l.delivered(a, Err("too large".into()));
        assert_eq!(l.failed().map(|f| f.1), Some(11));
        let mut rewinds = l.aborted();
        rewinds.sort_by_key(|r| r.partition);
        assert_eq!(
            rewinds,
            vec![
                Rewind {
                    source: "orders".into(),
                    partition: 0,
                    at: 10
                },
                Rewind {
                    source: "orders".into(),
                    partition: 1,
                    at: 7
                },
            ]
        );
        assert_eq!(l.in_flight(), 0);
        assert!(l.failed().is_none());
        // Records fetched before the seek took effect are ignored, the re-read ones taken.
        assert_eq!(l.judge(a, 10, || None, false), Take::Take);
        l.produced(a, 10, 1);
        assert_eq!(
            l.judge(a, 13, || None, false),
            Take::Take,
            "a gap inside the log (compaction) is no loss"
        );
        l.produced(a, 13, 1);
        // A record below the expected one is never one fetched before a seek (librdkafka's
        // seek discards those — `replicate_faults::a_seek_hands_out_no_record_fetched_before_it`
        // — and the shell skips the rest of a batch it sought back in): the log started again.
        assert_eq!(
            l.judge(a, 12, || Some(0), false),
            Take::Reread {
                truncation: Truncation::WentBack { from: 14, to: 12 },
                at: 0
            },
        );
    }

    #[test]
    fn records_lost_at_the_source_are_reported_and_continue_or_stop() {
        let (mut l, a, _) = ledger();
        // Stored at 10; the log now starts at 40: 10..40 were deleted unmirrored.
        match l.judge(a, 40, || Some(40), false) {
            Take::Lost { truncation, take } => {
                assert_eq!(truncation, Truncation::Deleted { from: 10, to: 40 });
                assert!(take);
            }
            other => panic!("{other:?}"),
        }
        let (mut l, a, _) = ledger();
        match l.judge(a, 40, || Some(40), true) {
            Take::Lost { take: false, .. } => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(l.judge(a, 41, || Some(40), true), Take::Stopped);
        assert_eq!(l.positions(), vec![], "progress stays at 10");
        // A recreated topic: the first record lies below the stored position.
        let (mut l, a, _) = ledger();
        match l.judge(a, 0, || Some(0), false) {
            Take::Lost {
                truncation: Truncation::WentBack { from: 10, to: 0 },
                take: true,
            } => {}
            other => panic!("{other:?}"),
        }
        l.began(Instant::now());
        l.produced(a, 0, 1);
        assert_eq!(l.positions()[0].at, 1, "progress follows the new log");
    }

    #[test]
    fn a_start_at_the_end_is_stored_without_a_record_and_survives_an_abort() {
        let (mut l, a, b) = ledger();
        l.start_at(a, 99); // has stored progress: unchanged
        l.start_at(b, 40);
        assert!(l.unstored());
        assert_eq!(l.positions().len(), 1);
        assert_eq!(l.positions()[0].at, 40);
        l.began(Instant::now());
        assert_eq!(l.judge(b, 40, || None, false), Take::Take);
        l.produced(b, 40, 1);
        let rewinds = l.aborted();
        assert!(
            rewinds.contains(&Rewind {
                source: "orders".into(),
                partition: 1,
                at: 40
            }),
            "{rewinds:?}"
        );
        assert_eq!(l.positions()[0].at, 40, "still to be stored");
        l.began(Instant::now());
        l.committed();
        assert_eq!(l.part(b).unwrap().stored(), Some(40));
        assert!(!l.unstored());
    }

    #[test]
    fn a_transaction_is_due_by_age_or_size() {
        let (mut l, a, _) = ledger();
        let t0 = Instant::now();
        let sec = Duration::from_secs(1);
        assert!(!l.due(t0 + sec * 5, sec, 10, 1000), "none open");
        l.began(t0);
        assert!(!l.due(t0, sec, 10, 1000));
        assert!(l.due(t0 + sec, sec, 10, 1000));
        for o in 10..20 {
            l.produced(a, o, 1);
        }
        assert!(l.due(t0, sec, 10, 1000), "record cap");
        let (mut l, a, _) = ledger();
        l.began(t0);
        l.produced(a, 10, 1000);
        assert!(l.due(t0, sec, 10, 1000), "byte cap");
    }

    #[test]
    fn a_stopped_partition_reads_its_record_again_when_due() {
        let (mut l, a, _) = ledger();
        let t0 = Instant::now();
        let minute = Duration::from_secs(60);
        // The target refused 12 in a transaction that began at the stored 10: it was
        // aborted, 10 and 11 are taken again, 12 is not.
        l.block(a, 12, t0, true);
        l.began(t0);
        for o in 10..12 {
            assert_eq!(l.judge(a, o, || None, false), Take::Take);
            l.produced(a, o, 1);
        }
        assert_eq!(l.judge(a, 12, || None, false), Take::Stopped);
        assert_eq!(l.judge(a, 13, || None, false), Take::Stopped);
        assert!(l.unblock_due(t0, minute).is_empty(), "not yet");
        let due = l.unblock_due(t0 + minute, minute);
        assert_eq!(
            due,
            vec![Rewind {
                source: "orders".into(),
                partition: 0,
                at: 12
            }]
        );
        assert_eq!(
            l.judge(a, 12, || None, false),
            Take::Take,
            "read again where it stopped"
        );
        // Lost records under `pause` wait for a restart.
        let (mut l, a, _) = ledger();
        assert!(matches!(
            l.judge(a, 40, || Some(40), true),
            Take::Lost { take: false, .. }
        ));
        assert!(l.unblock_due(t0 + minute * 1000, minute).is_empty());
        assert_eq!(l.part(a).unwrap().blocked().map(|b| b.at), Some(10));
    }

    /// Issue 34, item 1: under "latest", librdkafka answers a stored position below the log
    /// start with the log's end; the records from the log start on are still there and are
    /// read again, not skipped (before: `take` at the end, 40..90 never mirrored nor
    /// counted).
    #[test]
    fn under_latest_records_after_a_lost_range_are_read_again_from_the_log_start() {
        let (mut l, a, _) = ledger();
        assert_eq!(
            l.judge(a, 90, || Some(40), false),
            Take::Reread {
                truncation: Truncation::Deleted { from: 10, to: 40 },
                at: 40
            }
        );
        assert_eq!(l.positions()[0].at, 40, "the lost range is passed");
        l.began(Instant::now());
        for o in 40..43 {
            assert_eq!(l.judge(a, o, || Some(40), false), Take::Take);
            l.produced(a, o, 1);
        }
        assert_eq!(l.positions()[0].at, 43);
        // An abort goes back to the stored 10 (below the log start again): the range is
        // judged once more and read from the log start.
        let rewinds = l.aborted();
        assert_eq!(rewinds, vec![Rewind::to("orders", 0, 10)]);
        assert!(matches!(
            l.judge(a, 95, || Some(40), false),
            Take::Reread { at: 40, .. }
        ));
    }

    /// Issue 34, item 6: a recreated topic under "latest": the first record handed out is
    /// the new log's end, below the stored position; the new log is read from its start.
    #[test]
    fn under_latest_a_recreated_topic_is_read_from_its_start() {
        let (mut l, a, _) = ledger();
        assert_eq!(
            l.judge(a, 7, || Some(0), false),
            Take::Reread {
                truncation: Truncation::WentBack { from: 10, to: 7 },
                at: 0
            }
        );
        assert_eq!(l.part(a).unwrap().stored(), None, "a new log");
        l.began(Instant::now());
        for o in 0..8 {
            assert_eq!(l.judge(a, o, || Some(0), false), Take::Take, "{o}");
            l.produced(a, o, 1);
        }
        assert_eq!(l.positions()[0].at, 8);
        // Aborted: read again from the new log's start, not from the old position.
        assert_eq!(l.aborted(), vec![Rewind::to("orders", 0, 0)]);
    }

    /// A topic deleted and created again while its partition is read: librdkafka resets
    /// the position the new log lacks and hands out its first record, below the expected
    /// one. It is reported and taken (before: ignored as if fetched before a seek, and the
    /// new log's records below the old position were never mirrored).
    #[test]
    fn a_log_started_again_while_read_is_mirrored_from_its_start() {
        let (mut l, a, _) = ledger();
        l.began(Instant::now());
        for o in 10..500 {
            assert_eq!(l.judge(a, o, || Some(0), false), Take::Take);
            l.produced(a, o, 1);
        }
        match l.judge(a, 0, || Some(0), false) {
            Take::Lost {
                truncation: Truncation::WentBack { from: 500, to: 0 },
                take: true,
            } => {}
            other => panic!("{other:?}"),
        }
        l.produced(a, 0, 1);
        assert_eq!(l.judge(a, 1, || Some(0), false), Take::Take);
        l.produced(a, 1, 1);
        assert_eq!(l.positions()[0].at, 2, "the new log's position is stored");
        l.committed();
        assert_eq!(l.part(a).unwrap().stored(), Some(2));
        // Under `pause` it stops there, reported once.
        let (mut l, a, _) = ledger();
        l.began(Instant::now());
        for o in 10..20 {
            l.judge(a, o, || Some(0), false);
            l.produced(a, o, 1);
        }
        assert!(matches!(
            l.judge(a, 0, || Some(0), true),
            Take::Lost { take: false, .. }
        ));
        assert_eq!(l.judge(a, 1, || Some(0), true), Take::Stopped);
    }

    /// Issue 34, item 2: the target group has no members, so a quiet partition's stored
    /// position is stored again (an offsets-only transaction) once after the shard took it
    /// and then every `every` (before: only positions that moved were stored, and a quiet
    /// partition's expired with the broker's offset retention).
    #[test]
    fn a_quiet_partitions_position_is_stored_again_within_the_retention() {
        let (mut l, _a, b) = ledger();
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        assert!(!l.unstored());
        l.refresh_due(t0, hour);
        // a has a stored position (10); b none yet (nothing to store).
        assert!(l.unstored(), "an offsets-only transaction is due");
        assert_eq!(
            l.positions(),
            vec![Position {
                source: "orders".into(),
                target: "primary.orders".into(),
                partition: 0,
                at: 10
            }]
        );
        l.began(t0);
        l.committed();
        assert!(!l.unstored());
        l.refresh_due(t0 + hour / 2, hour);
        assert!(!l.unstored(), "stored within the hour");
        // b moves and is stored; a stays quiet and is due again an hour after its store.
        l.began(t0);
        assert_eq!(l.judge(b, 3, || None, false), Take::Take);
        l.produced(b, 3, 1);
        l.delivered(b, Ok(0));
        l.committed();
        l.refresh_due(Instant::now() + hour, hour);
        let due: Vec<i64> = l.positions().iter().map(|p| p.at).collect();
        assert_eq!(due, vec![10, 4]);
        // Aborted: still due.
        l.began(t0);
        l.aborted();
        assert!(l.unstored());
    }
}
