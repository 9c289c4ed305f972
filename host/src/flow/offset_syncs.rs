//! When to emit an OffsetSync, as a pure state machine (MM2's `OffsetSyncWriter` rules).
//!
//! Per source partition (state `prev_up`, `prev_down`, `last_sync_down`, all starting at -1)
//! a sync is emitted when any holds:
//! - no sync yet in this process lifetime;
//! - `down - (last_sync_down + 1) >= offset_lag_max` (the translation would be too stale);
//! - `up - prev_up != 1` (an upstream gap: compaction, transaction markers);
//! - `down < prev_down` (the target topic was truncated or recreated);
//! - `down - prev_down != 1` (a downstream gap) — not in MM2, but it keeps every break of
//!   the 1:1 run of offsets visible, which exact translation needs; MM2 readers are unaffected.
//!
//! Otherwise the sync is kept as the partition's *delayed* sync, promoted to pending on
//! each flush so an idle partition ends exact. Only the newest pending sync per partition
//! matters; the caller sends at most a few at a time.

use crate::formats::OffsetSync;
use std::collections::{BTreeMap, HashMap};

/// A source partition.
pub type TopicPartition = (String, i32);

#[derive(Debug, Clone, Copy)]
struct PartitionState {
    prev_up: i64,
    prev_down: i64,
    last_sync_down: i64,
}

impl Default for PartitionState {
    fn default() -> Self {
        PartitionState {
            prev_up: -1,
            prev_down: -1,
            last_sync_down: -1,
        }
    }
}

/// Why a sync was emitted (for metrics and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// First record of the partition in this process lifetime.
    First,
    /// `offset_lag_max` records since the last sync.
    LagMax,
    /// A gap in upstream offsets.
    UpstreamGap,
    /// The downstream offset went backwards.
    DownstreamRewind,
    /// A gap in downstream offsets.
    DownstreamGap,
}

/// The sync-emission state of one flow.
#[derive(Debug)]
pub struct OffsetSyncWriter {
    lag_max: i64,
    partitions: HashMap<TopicPartition, PartitionState>,
    pending: BTreeMap<TopicPartition, OffsetSync>,
    delayed: BTreeMap<TopicPartition, OffsetSync>,
}

impl OffsetSyncWriter {
    /// A writer emitting at least every `offset_lag_max` records.
    pub fn new(offset_lag_max: u64) -> Self {
        OffsetSyncWriter {
            lag_max: i64::try_from(offset_lag_max).unwrap_or(i64::MAX).max(1),
            partitions: HashMap::new(),
            pending: BTreeMap::new(),
            delayed: BTreeMap::new(),
        }
    }

    /// Records that source `up` of `tp` was acked by the target at `down`. Returns the
    /// trigger when a sync became pending, `None` when it was delayed.
    pub fn on_ack(&mut self, tp: &TopicPartition, up: i64, down: i64) -> Option<Trigger> {
        let state = self.partitions.entry(tp.clone()).or_default();
        let trigger = if state.last_sync_down == -1 {
            Some(Trigger::First)
        } else if up - state.prev_up != 1 {
            Some(Trigger::UpstreamGap)
        } else if down < state.prev_down {
            Some(Trigger::DownstreamRewind)
        } else if down - state.prev_down != 1 {
            Some(Trigger::DownstreamGap)
        } else if down - (state.last_sync_down + 1) >= self.lag_max {
            Some(Trigger::LagMax)
        } else {
            None
        };
        state.prev_up = up;
        state.prev_down = down;
        let sync = OffsetSync {
            topic: tp.0.clone(),
            partition: tp.1,
            upstream: up,
            downstream: down,
        };
        if trigger.is_some() {
            state.last_sync_down = down;
            self.delayed.remove(tp);
            self.pending.insert(tp.clone(), sync);
        } else {
            self.delayed.insert(tp.clone(), sync);
        }
        trigger
    }

    /// Makes every delayed sync pending (on each flush interval).
    pub fn promote_delayed(&mut self) {
        // As in MM2, a promoted sync does not reset the lag count.
        self.pending.append(&mut self.delayed);
    }

    /// Takes up to `max` pending syncs to send.
    pub fn take_pending(&mut self, max: usize) -> Vec<OffsetSync> {
        let keys: Vec<TopicPartition> = self.pending.keys().take(max).cloned().collect();
        keys.into_iter()
            .filter_map(|k| self.pending.remove(&k))
            .collect()
    }

    /// Whether syncs are waiting to be sent.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Forgets a partition (it is no longer replicated).
    pub fn forget(&mut self, tp: &TopicPartition) {
        self.partitions.remove(tp);
        self.pending.remove(tp);
        self.delayed.remove(tp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp() -> TopicPartition {
        ("orders".to_string(), 0)
    }

    #[test]
    fn first_record_emits() {
        let mut w = OffsetSyncWriter::new(100);
        assert_eq!(w.on_ack(&tp(), 5, 0), Some(Trigger::First));
        let sent = w.take_pending(10);
        assert_eq!(
            sent,
            vec![OffsetSync {
                topic: "orders".into(),
                partition: 0,
                upstream: 5,
                downstream: 0
            }]
        );
        assert!(!w.has_pending());
    }

    #[test]
    fn a_contiguous_run_is_delayed_until_lag_max() {
        let mut w = OffsetSyncWriter::new(10);
        w.on_ack(&tp(), 0, 0);
        w.take_pending(10);
        for i in 1..10 {
            assert_eq!(w.on_ack(&tp(), i, i), None, "offset {i}");
        }
        // down - (last_sync_down + 1) = 10 - 1 = 9 < 10; at 11 it is 10.
        assert_eq!(w.on_ack(&tp(), 10, 10), None);
        assert_eq!(w.on_ack(&tp(), 11, 11), Some(Trigger::LagMax));
        assert_eq!(w.take_pending(10)[0].upstream, 11);
    }

    #[test]
    fn upstream_gaps_emit() {
        let mut w = OffsetSyncWriter::new(100);
        w.on_ack(&tp(), 0, 0);
        assert_eq!(w.on_ack(&tp(), 1, 1), None);
        assert_eq!(w.on_ack(&tp(), 3, 2), Some(Trigger::UpstreamGap));
    }

    #[test]
    fn downstream_rewinds_and_gaps_emit() {
        let mut w = OffsetSyncWriter::new(100);
        w.on_ack(&tp(), 0, 10);
        assert_eq!(w.on_ack(&tp(), 1, 3), Some(Trigger::DownstreamRewind));
        assert_eq!(w.on_ack(&tp(), 2, 5), Some(Trigger::DownstreamGap));
        assert_eq!(w.on_ack(&tp(), 3, 6), None);
    }

    #[test]
    fn delayed_syncs_are_flushed_and_only_the_newest_counts() {
        let mut w = OffsetSyncWriter::new(100);
        let other = ("payments".to_string(), 2);
        w.on_ack(&tp(), 0, 0);
        w.on_ack(&other, 7, 0);
        w.take_pending(10);
        for i in 1..=5 {
            w.on_ack(&tp(), i, i);
        }
        w.on_ack(&other, 8, 1);
        assert!(!w.has_pending());
        w.promote_delayed();
        let mut sent = w.take_pending(10);
        sent.sort_by_key(|s| s.topic.clone());
        assert_eq!(sent.len(), 2);
        assert_eq!((sent[0].upstream, sent[0].downstream), (5, 5));
        assert_eq!((sent[1].upstream, sent[1].downstream), (8, 1));
        // As in MM2, the lag still counts from the last triggered sync (at 0).
        for i in 6..=100 {
            assert_eq!(w.on_ack(&tp(), i, i), None, "{i}");
        }
        assert_eq!(w.on_ack(&tp(), 101, 101), Some(Trigger::LagMax));
    }

    #[test]
    fn pending_is_bounded_per_call_and_newest_wins() {
        let mut w = OffsetSyncWriter::new(1);
        for i in 0..5 {
            w.on_ack(&tp(), i, i);
        }
        let sent = w.take_pending(10);
        assert_eq!(sent.len(), 1, "one pending sync per partition");
        assert_eq!(sent[0].upstream, 4);
        for p in 0..5 {
            w.on_ack(&("t".to_string(), p), 0, 0);
        }
        assert_eq!(w.take_pending(3).len(), 3);
        assert_eq!(w.take_pending(3).len(), 2);
    }
}
