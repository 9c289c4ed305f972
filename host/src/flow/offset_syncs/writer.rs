//! When to emit an OffsetSync, as a pure state machine: MM2's rules, plus what exact
//! translation needs.
//!
//! Per source partition (state `prev_up`, `prev_down`, `last_sync_down`, all starting at -1)
//! a sync is emitted when any holds (MM2's `OffsetSyncWriter` rules):
//! - no sync yet in this process lifetime;
//! - `down - (last_sync_down + 1) >= offset_lag_max` (the translation would be too stale);
//! - `up - prev_up != 1` (an upstream gap: compaction, transaction markers);
//! - `down < prev_down` (the target topic was truncated or recreated);
//!
//! and, beyond MM2, `down - prev_down != 1` (a downstream gap). Otherwise the sync is kept
//! as the partition's *delayed* sync, queued on each flush so an idle partition ends exact.
//!
//! For exact translation every *run* (records contiguous in both upstream and downstream
//! offsets) is delimited by syncs: at a break, the delayed sync of the run's last record is
//! queued before the break's own sync, and break syncs are never coalesced (MM2 keeps only
//! the newest pending sync; a non-break sync may still replace a queued non-break one, but
//! never the first sync of a partition, which anchors its first run).
//! Each queued sync gets a [`SyncMarker`] — this process's session and a per-partition
//! sequence number — written as a record header MM2 readers ignore. Two consecutive syncs
//! with the same session and consecutive numbers bound one run or one break, so the store
//! can translate exactly between them; a hole (a dropped or lost sync, a restart) makes it
//! fall back to MM2's conservative rule.

use super::{SyncMarker, TopicPartition};
use crate::formats::OffsetSync;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Queued syncs per partition at most; beyond it the oldest is dropped (a sequence hole).
const MAX_QUEUED_PER_PARTITION: usize = 1024;

#[derive(Debug, Clone, Copy)]
struct PartitionState {
    prev_up: i64,
    prev_down: i64,
    last_sync_down: i64,
    next_seq: u64,
}

impl Default for PartitionState {
    fn default() -> Self {
        PartitionState {
            prev_up: -1,
            prev_down: -1,
            last_sync_down: -1,
            next_seq: 0,
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

impl Trigger {
    fn is_break(self) -> bool {
        matches!(
            self,
            Trigger::UpstreamGap | Trigger::DownstreamRewind | Trigger::DownstreamGap
        )
    }

    /// Whether the sync bounds a run (its first record, or the first after a break): such a
    /// sync is never replaced by a later one.
    fn starts_run(self) -> bool {
        self == Trigger::First || self.is_break()
    }
}

#[derive(Debug)]
struct Queued {
    sync: OffsetSync,
    marker: SyncMarker,
    /// A later non-break sync of the same run may replace it.
    coalescible: bool,
}

/// The sync-emission state of one flow.
#[derive(Debug)]
pub struct OffsetSyncWriter {
    lag_max: i64,
    session: u64,
    partitions: HashMap<TopicPartition, PartitionState>,
    queued: BTreeMap<TopicPartition, VecDeque<Queued>>,
    delayed: BTreeMap<TopicPartition, OffsetSync>,
    dropped: u64,
}

impl OffsetSyncWriter {
    /// A writer emitting at least every `offset_lag_max` records, marking its syncs with
    /// `session` (unique per process start).
    pub fn new(offset_lag_max: u64, session: u64) -> Self {
        OffsetSyncWriter {
            lag_max: i64::try_from(offset_lag_max).unwrap_or(i64::MAX).max(1),
            session,
            partitions: HashMap::new(),
            queued: BTreeMap::new(),
            delayed: BTreeMap::new(),
            dropped: 0,
        }
    }

    /// Records that source `up` of `tp` was acked by the target at `down`. Returns the
    /// trigger when a sync was queued, `None` when it was delayed.
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
        match trigger {
            None => {
                self.delayed.insert(tp.clone(), sync);
            }
            Some(t) => {
                state.last_sync_down = down;
                let run_end = self.delayed.remove(tp);
                if t.is_break() {
                    if let Some(end) = run_end {
                        self.queue(tp, end, false);
                    }
                }
                self.queue(tp, sync, !t.starts_run());
            }
        }
        trigger
    }

    fn queue(&mut self, tp: &TopicPartition, sync: OffsetSync, coalescible: bool) {
        let queue = self.queued.entry(tp.clone()).or_default();
        if let (true, Some(last)) = (coalescible, queue.back_mut()) {
            if last.coalescible {
                last.sync = sync;
                return;
            }
        }
        let state = self.partitions.entry(tp.clone()).or_default();
        let marker = SyncMarker {
            session: self.session,
            seq: state.next_seq,
        };
        state.next_seq += 1;
        queue.push_back(Queued {
            sync,
            marker,
            coalescible,
        });
        if queue.len() > MAX_QUEUED_PER_PARTITION {
            queue.pop_front();
            self.dropped += 1;
        }
    }

    /// Queues every delayed sync (on each flush interval). As in MM2, this does not reset
    /// the lag count.
    pub fn promote_delayed(&mut self) {
        for (tp, sync) in std::mem::take(&mut self.delayed) {
            self.queue(&tp, sync, true);
        }
    }

    /// Takes up to `max` queued syncs to send, oldest first per partition.
    pub fn take_pending(&mut self, max: usize) -> Vec<(OffsetSync, SyncMarker)> {
        let mut out = Vec::new();
        while out.len() < max {
            let before = out.len();
            for queue in self.queued.values_mut() {
                if out.len() >= max {
                    break;
                }
                if let Some(q) = queue.pop_front() {
                    out.push((q.sync, q.marker));
                }
            }
            if out.len() == before {
                break;
            }
        }
        self.queued.retain(|_, q| !q.is_empty());
        out
    }

    /// Whether syncs are waiting to be sent.
    pub fn has_pending(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Syncs dropped because a partition's queue was full, since the last call.
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    /// Forgets a partition (it is no longer replicated).
    pub fn forget(&mut self, tp: &TopicPartition) {
        self.partitions.remove(tp);
        self.queued.remove(tp);
        self.delayed.remove(tp);
    }
}

#[cfg(test)]
mod tests;
