//! When to emit an OffsetSync, as a pure state machine: MM2's rules, plus what exact
//! translation needs.
//!
//! Per source partition (state `prev_up`, `prev_down`, `last_sync_down`, all starting at -1)
//! a sync is emitted when any holds (MM2's `OffsetSyncWriter` rules):
//! - no sync yet for this partition in this writer session;
//! - `down - (last_sync_down + 1) >= offset_lag_max` (the translation would be too stale);
//! - `up - prev_up != 1` (an upstream gap: compaction, transaction markers, a skipped record);
//! - `down < prev_down` (the target topic was truncated or recreated);
//!
//! and, beyond MM2, `down - prev_down != 1` (a downstream gap). Otherwise the sync is kept
//! as the partition's *delayed* sync, queued on each flush so an idle partition ends exact.
//!
//! For exact translation, every break of the 1:1 run of offsets gets its own sync (the
//! first record after the break), and break syncs are never coalesced (MM2 keeps only the
//! newest pending sync; a non-break sync may still replace a queued non-break one, but never
//! the first sync of a partition, which anchors its first run). So between two consecutive
//! syncs `a` and `b` there is at most one break, right before `b`: the `b.down - a.down`
//! records from `a` on are contiguous upstream from `a.up`, and the first record after them
//! is `b`. One sync per break is enough — a transaction marker costs one sync, as in MM2.
//!
//! Each queued sync gets a [`SyncMarker`]: a session, fresh each time the writer starts a
//! partition (so a partition that leaves and comes back, or moves to another instance,
//! never continues an old sequence), and a per-partition sequence number, written as a
//! record header MM2 readers ignore. Two syncs with the same session and consecutive
//! numbers have no sync missing between them, so the store can translate exactly between
//! them; a hole (a dropped or lost sync, a restart, a handover) makes it fall back to MM2's
//! conservative rule.

use super::SyncMarker;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;

/// Queued syncs per partition at most; beyond it the oldest is dropped (a sequence hole).
const MAX_QUEUED_PER_PARTITION: usize = 1024;

/// Spreads session numbers: an odd multiplier is a bijection on u64, so every partition
/// start of one writer gets a distinct session.
const SESSION_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

#[derive(Debug, Clone, Copy)]
struct PartitionState {
    session: u64,
    prev_up: i64,
    prev_down: i64,
    last_sync_down: i64,
    next_seq: u64,
    /// The newest (up, down) not yet covered by a sync.
    delayed: Option<(i64, i64)>,
}

/// Why a sync was emitted (for metrics and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// First record of the partition in this writer session.
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
    /// Whether the sync bounds a run (its first record, or the first after a break): such a
    /// sync is never replaced by a later one.
    fn starts_run(self) -> bool {
        self != Trigger::LagMax
    }
}

/// A sync ready to be written: the partition's key, the offsets and the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingSync<K> {
    /// Which partition (the caller's key for it).
    pub key: K,
    /// The source offset.
    pub upstream: i64,
    /// The target offset.
    pub downstream: i64,
    /// Its session and sequence number.
    pub marker: SyncMarker,
}

#[derive(Debug)]
struct Queued {
    upstream: i64,
    downstream: i64,
    marker: SyncMarker,
    /// A later non-break sync of the same run may replace it.
    coalescible: bool,
}

/// The sync-emission state of one replicator, per partition key `K`.
#[derive(Debug)]
pub struct OffsetSyncWriter<K> {
    lag_max: i64,
    base_session: u64,
    sessions: u64,
    partitions: HashMap<K, PartitionState>,
    queued: BTreeMap<K, VecDeque<Queued>>,
    dropped: u64,
}

impl<K: Clone + Eq + Hash + Ord> OffsetSyncWriter<K> {
    /// A writer emitting at least every `offset_lag_max` records; its first partition's
    /// session is `session`, each later partition start gets another.
    pub fn new(offset_lag_max: u64, session: u64) -> Self {
        OffsetSyncWriter {
            lag_max: i64::try_from(offset_lag_max).unwrap_or(i64::MAX).max(1),
            base_session: session,
            sessions: 0,
            partitions: HashMap::new(),
            queued: BTreeMap::new(),
            dropped: 0,
        }
    }

    fn state(&mut self, key: &K) -> &mut PartitionState {
        if !self.partitions.contains_key(key) {
            let session = self
                .base_session
                .wrapping_add(self.sessions.wrapping_mul(SESSION_STEP));
            self.sessions += 1;
            self.partitions.insert(
                key.clone(),
                PartitionState {
                    session,
                    prev_up: -1,
                    prev_down: -1,
                    last_sync_down: -1,
                    next_seq: 0,
                    delayed: None,
                },
            );
        }
        self.partitions
            .get_mut(key)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }

    /// Records that source `up` of `key` was acked by the target at `down`. Returns the
    /// trigger when a sync was queued, `None` when it was delayed.
    pub fn on_ack(&mut self, key: &K, up: i64, down: i64) -> Option<Trigger> {
        let lag_max = self.lag_max;
        let state = self.state(key);
        let trigger = if state.last_sync_down == -1 {
            Some(Trigger::First)
        } else if up.wrapping_sub(state.prev_up) != 1 {
            Some(Trigger::UpstreamGap)
        } else if down < state.prev_down {
            Some(Trigger::DownstreamRewind)
        } else if down.wrapping_sub(state.prev_down) != 1 {
            Some(Trigger::DownstreamGap)
        } else if down.saturating_sub(state.last_sync_down.saturating_add(1)) >= lag_max {
            Some(Trigger::LagMax)
        } else {
            None
        };
        state.prev_up = up;
        state.prev_down = down;
        match trigger {
            None => state.delayed = Some((up, down)),
            Some(t) => {
                state.last_sync_down = down;
                state.delayed = None;
                self.queue(key, up, down, !t.starts_run());
            }
        }
        trigger
    }

    fn queue(&mut self, key: &K, upstream: i64, downstream: i64, coalescible: bool) {
        let queue = self.queued.entry(key.clone()).or_default();
        if let (true, Some(last)) = (coalescible, queue.back_mut())
            && last.coalescible
        {
            last.upstream = upstream;
            last.downstream = downstream;
            return;
        }
        let Some(state) = self.partitions.get_mut(key) else {
            return;
        };
        let marker = SyncMarker::new(state.session, state.next_seq);
        state.next_seq += 1;
        queue.push_back(Queued {
            upstream,
            downstream,
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
        let delayed: Vec<(K, (i64, i64))> = self
            .partitions
            .iter_mut()
            .filter_map(|(k, s)| s.delayed.take().map(|d| (k.clone(), d)))
            .collect();
        for (key, (up, down)) in delayed {
            self.queue(&key, up, down, true);
        }
    }

    /// Queues `key`'s delayed sync now (before the partition is handed over).
    pub fn promote_one(&mut self, key: &K) {
        if let Some((up, down)) = self.partitions.get_mut(key).and_then(|s| s.delayed.take()) {
            self.queue(key, up, down, true);
        }
    }

    /// Takes up to `max` queued syncs to send, oldest first per partition.
    pub fn take_pending(&mut self, max: usize) -> Vec<PendingSync<K>> {
        let mut out = Vec::new();
        while out.len() < max {
            let before = out.len();
            for (key, queue) in self.queued.iter_mut() {
                if out.len() >= max {
                    break;
                }
                if let Some(q) = queue.pop_front() {
                    out.push(PendingSync {
                        key: key.clone(),
                        upstream: q.upstream,
                        downstream: q.downstream,
                        marker: q.marker,
                    });
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

    /// Forgets a partition (it is no longer replicated here). Queued syncs stay queued;
    /// if it comes back, it starts a new session.
    pub fn forget(&mut self, key: &K) {
        self.partitions.remove(key);
    }
}

#[cfg(test)]
mod tests;
