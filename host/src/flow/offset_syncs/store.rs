//! The offset-sync store: translates a source consumer group's offset into the target
//! offset it corresponds to, from the offset syncs of a flow.
//!
//! Per partition it keeps the recent syncs densely (up to [`MAX_SYNCS_PER_PARTITION`], and
//! an equal share of [`MAX_SYNCS`] over all partitions: memory stays bounded however many
//! partitions the syncs topic names) and, as a fallback beyond that bound, MM2's 64
//! exponentially spaced slots ([`Mm2Syncs`]).
//!
//! `translate(g)`: the newest retained sync `a` with `a.up <= g`;
//! - `g == a.up`: `a.down`;
//! - the next sync `b` follows `a` in the same writer session with the next sequence number
//!   (see [`SyncMarker`]), so no sync is missing between them and there is at most one break
//!   between them, right before `b`: the `n = b.down - a.down` records from `a` on are
//!   contiguous upstream from `a.up`. So `g - a.up < n` gives `a.down + (g - a.up)`, and any
//!   later `g` (in the gap) gives `b.down`, the first record after it. Both are exact;
//! - otherwise (no marker, as MM2 writes; a hole; the newest sync): MM2's rule
//!   `a.down + 1`, which never skips a record;
//! - no retained sync at or before `g`: MM2's slots, else no translation.
//!
//! A rewind invalidates everything before it: upstream (an older source offset than the
//! newest, as in MM2: the source partition was re-mirrored from earlier) and downstream (a
//! smaller target offset: the target topic was truncated or recreated). Each reset bumps the
//! partition's *epoch*, so checkpoints made from the old syncs can be replaced.
//! Syncs with impossible offsets (negative, or beyond [`MAX_OFFSET`]) are refused.
//!
//! **Late syncs of a former owner.** Every sync is true when written — the target acked
//! that copy of that record — but a replicator that lost its partition (a stalled instance
//! that resumes) can write after the new owner did, and its copies sit later on the target
//! than the new owner's, interleaved with them. Read as the newest, such a sync is a
//! "rewind" that resets the partition to the former owner's run, and a consumer positioned
//! from it would skip what the new owner wrote before it. So a sync that would rewind the
//! partition is refused when it carries an older owner generation (the consumer-group
//! generation its writer was assigned the partition in, see [`SyncMarker`]) than the newest
//! accepted one, within [`STALE_OWNER_WINDOW`] of it (by the records' timestamps):
//! [`Refused::StaleOwner`]. A sync that does not rewind is accepted whatever its generation
//! (it describes records after everything known, which is true), and so is a rewind of an
//! equal or newer generation (the target topic recreated, the source re-mirrored), or one
//! written long after the newest (the progress group was deleted and its generations
//! started again: a stalled owner's late syncs come within seconds or minutes).

use super::SyncMarker;
use crate::formats::OffsetSync;
use std::collections::{HashMap, VecDeque};

/// How much later than the newest accepted sync a sync of an older owner generation may be
/// written and still be a former owner's late sync (refused when it rewinds).
pub const STALE_OWNER_WINDOW_MS: i64 = 10 * 60 * 1000;

/// Syncs kept per partition for exact translation, at most.
pub const MAX_SYNCS_PER_PARTITION: usize = 4096;

/// Syncs kept for exact translation over all partitions of a flow (about 48 bytes each:
/// some 50 MB): with many partitions each keeps an equal share of it, its newest syncs,
/// never fewer than [`MIN_SYNCS_PER_PARTITION`]. Older group offsets fall back to MM2's
/// slots (64 per partition, about 1 KB).
pub const MAX_SYNCS: usize = 1 << 20;

/// Syncs kept per partition for exact translation, at least.
pub const MIN_SYNCS_PER_PARTITION: usize = 64;

/// How many of its newest syncs each partition keeps densely when `partitions` partitions
/// share a budget of `budget` syncs.
pub fn share(budget: usize, partitions: usize) -> usize {
    (budget / partitions.max(1)).clamp(MIN_SYNCS_PER_PARTITION, MAX_SYNCS_PER_PARTITION)
}

/// MM2's slot count.
pub const MM2_SLOTS: usize = 64;

/// MM2's offset-sync retention: 64 slots, slot `i` holding a sync whose upstream offset
/// agrees with the newest one in all bits above bit `i` — so precision halves with each
/// step away from the head. The reference model for tests, and the fallback here.
#[derive(Debug, Clone)]
pub struct Mm2Syncs {
    slots: [(i64, i64); MM2_SLOTS],
}

impl Mm2Syncs {
    /// A store holding only `(up, down)`.
    pub fn new(up: i64, down: i64) -> Self {
        Mm2Syncs {
            slots: [(up, down); MM2_SLOTS],
        }
    }

    /// Adds a sync. `read_to_end` is false while MM2 is still loading the topic at start,
    /// when it keeps only the newest sync.
    pub fn add(&mut self, up: i64, down: i64, read_to_end: bool) {
        if !read_to_end || self.slots[0].0 > up {
            self.slots = [(up, down); MM2_SLOTS];
            return;
        }
        self.slots[0] = (up, down);
        for i in 1..MM2_SLOTS {
            let mask = i64::MAX << i;
            if (self.slots[i].0 ^ up) & mask != 0 {
                self.slots[i] = (up, down);
            } else {
                break;
            }
        }
    }

    /// MM2's translation: the newest slot with `up <= g` gives `down + (g == up ? 0 : 1)`;
    /// none: `None`.
    pub fn translate(&self, g: i64) -> Option<i64> {
        let (up, down) = *self.slots.iter().find(|(up, _)| *up <= g)?;
        Some(down + i64::from(g != up))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    up: i64,
    down: i64,
    marker: Option<SyncMarker>,
}

/// The largest offset a sync may carry: far beyond any real log, and small enough that
/// offset arithmetic never overflows.
pub const MAX_OFFSET: i64 = 1 << 62;

/// Why a sync was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Offsets no log can have.
    #[error("impossible offsets in an offset sync: upstream {upstream}, downstream {downstream}")]
    Impossible {
        /// The upstream offset.
        upstream: i64,
        /// The downstream offset.
        downstream: i64,
    },
    /// A late sync of a replicator that no longer owned the partition.
    #[error(
        "a late offset sync of a former owner (generation {generation}, the partition's owner is in {newest}): upstream {upstream}, downstream {downstream}"
    )]
    StaleOwner {
        /// Its owner generation.
        generation: i32,
        /// The newest owner generation seen.
        newest: i32,
        /// The upstream offset.
        upstream: i64,
        /// The downstream offset.
        downstream: i64,
    },
}

/// A translated offset and the epoch of the syncs it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translation {
    /// The target offset.
    pub offset: i64,
    /// The partition's epoch (bumped at every rewind).
    pub epoch: u64,
}

#[derive(Debug, Clone)]
struct PartitionSyncs {
    dense: VecDeque<Entry>,
    mm2: Mm2Syncs,
    epoch: u64,
    /// The newest owner generation of an accepted sync, and that sync's timestamp.
    generation: Option<(i32, Option<i64>)>,
}

fn consecutive(a: &Entry, b: &Entry) -> bool {
    matches!((a.marker, b.marker), (Some(x), Some(y)) if x.session == y.session && y.seq == x.seq + 1)
}

impl PartitionSyncs {
    /// Keeps the newest `keep` syncs (and no more room than they need).
    fn trim(&mut self, keep: usize) {
        if self.dense.len() > keep {
            self.dense.drain(..self.dense.len() - keep);
            self.dense.shrink_to(keep);
        }
    }

    fn add(&mut self, e: Entry, timestamp: Option<i64>, keep: usize) -> Result<(), Refused> {
        let rewound = self
            .dense
            .back()
            .is_some_and(|last| last.up > e.up || last.down > e.down);
        let generation = e.marker.and_then(|m| m.generation);
        if let (true, Some(g), Some((newest, newest_at))) = (rewound, generation, self.generation) {
            let late = match (timestamp, newest_at) {
                (Some(at), Some(newest_at)) => at - newest_at < STALE_OWNER_WINDOW_MS,
                _ => true,
            };
            if g < newest && late {
                return Err(Refused::StaleOwner {
                    generation: g,
                    newest,
                    upstream: e.up,
                    downstream: e.down,
                });
            }
        }
        if let Some(g) = generation {
            let newer = self.generation.is_none_or(|(n, _)| g >= n);
            // A rewind of an older generation accepted (long after): it starts over.
            if newer || rewound {
                self.generation = Some((g, timestamp));
            }
        }
        if rewound {
            self.dense.clear();
            self.epoch += 1;
            if self.mm2.slots[0].1 > e.down {
                // The target was truncated or recreated: MM2's slots are stale too.
                self.mm2 = Mm2Syncs::new(e.up, e.down);
            }
        }
        // Room made before the push: the deque never grows past `keep`.
        while self.dense.len() >= keep.max(1) {
            self.dense.pop_front();
        }
        self.dense.push_back(e);
        self.mm2.add(e.up, e.down, true);
        Ok(())
    }

    /// Where source record `up` is on the target, when the syncs say exactly: a sync names
    /// it, or it lies within the contiguous run between two consecutive syncs of one writer
    /// session. `None` in a gap (no record mirrored there), before the oldest sync, past the
    /// newest, or between syncs with one missing.
    fn exact(&self, up: i64) -> Option<i64> {
        let idx = self.dense.partition_point(|e| e.up <= up);
        let a = self.dense.get(idx.checked_sub(1)?)?;
        if a.up == up {
            return Some(a.down);
        }
        let b = self.dense.get(idx)?;
        let run = b.down - a.down;
        (consecutive(a, b) && up - a.up < run).then_some(a.down + (up - a.up))
    }

    /// Whether source records `a` and `b` (`a` < `b`, both placed) lie in one writer's
    /// contiguous stretch: every retained sync from `a`'s to `b`'s follows the one before it
    /// in the same writer session. Not so across a writer's crash or a handover (a new
    /// session), a sync missing, or syncs without markers (MirrorMaker 2's).
    fn linked(&self, a: i64, b: i64) -> bool {
        let ia = self.dense.partition_point(|e| e.up <= a);
        let ib = self.dense.partition_point(|e| e.up <= b);
        if ia == 0 || ib < ia {
            return false;
        }
        (ia - 1..ib - 1).all(|i| consecutive(&self.dense[i], &self.dense[i + 1]))
    }

    fn translate(&self, g: i64) -> Option<i64> {
        self.translate_counted(g).map(|(offset, _)| offset)
    }

    /// The translation of `g` and how many records a consumer moved there reads again:
    /// `Some(0)` when exact (a sync names `g`, it lies in a run or in the gap after one, or
    /// right after the newest sync), `None` when unknown (MM2's older slots).
    fn translate_counted(&self, g: i64) -> Option<(i64, Option<i64>)> {
        let idx = self.dense.partition_point(|e| e.up <= g);
        if idx == 0 {
            // Older than every retained sync: MM2's slots may still hold one.
            return self.mm2.translate(g).map(|o| (o, None));
        }
        let a = &self.dense[idx - 1];
        if a.up == g {
            return Some((a.down, Some(0)));
        }
        match self.dense.get(idx) {
            Some(b) if consecutive(a, b) => {
                let run = b.down - a.down;
                if g - a.up < run {
                    Some((a.down + (g - a.up), Some(0)))
                } else {
                    Some((b.down, Some(0)))
                }
            }
            // Past the newest sync, or a sync missing before the next: right after `a`'s
            // record, re-reading the ones between it and `g`.
            _ => Some((a.down + 1, Some(g - a.up - 1))),
        }
    }
}

/// Every partition's syncs of one flow.
#[derive(Debug, Clone)]
pub struct OffsetSyncStore {
    partitions: HashMap<(String, i32), PartitionSyncs>,
    /// Syncs kept densely over all partitions, at most.
    budget: usize,
}

impl Default for OffsetSyncStore {
    fn default() -> Self {
        Self::with_budget(MAX_SYNCS)
    }
}

impl OffsetSyncStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store keeping at most `budget` syncs densely over all partitions.
    pub fn with_budget(budget: usize) -> Self {
        OffsetSyncStore {
            partitions: HashMap::new(),
            budget,
        }
    }

    /// Syncs kept densely now, over all partitions.
    pub fn kept(&self) -> usize {
        self.partitions.values().map(|p| p.dense.len()).sum()
    }

    /// Room held for syncs now, over all partitions (what the memory bound is about).
    pub fn capacity(&self) -> usize {
        self.partitions.values().map(|p| p.dense.capacity()).sum()
    }

    /// Adds one sync as read from the offset-syncs topic (with its marker header, if any).
    /// A sync with impossible offsets, or a former owner's late rewinding sync, is refused
    /// and changes nothing.
    pub fn add(&mut self, sync: &OffsetSync, marker: Option<SyncMarker>) -> Result<(), Refused> {
        self.add_at(sync, marker, None)
    }

    /// [`Self::add`] of a sync record with its timestamp (ms since the epoch).
    pub fn add_at(
        &mut self,
        sync: &OffsetSync,
        marker: Option<SyncMarker>,
        timestamp: Option<i64>,
    ) -> Result<(), Refused> {
        let valid = 0..=MAX_OFFSET;
        if !valid.contains(&sync.upstream) || !valid.contains(&sync.downstream) {
            return Err(Refused::Impossible {
                upstream: sync.upstream,
                downstream: sync.downstream,
            });
        }
        let e = Entry {
            up: sync.upstream,
            down: sync.downstream,
            marker,
        };
        let key = (sync.topic.clone(), sync.partition);
        let keep = share(self.budget, self.partitions.len());
        match self.partitions.get_mut(&key) {
            Some(p) => p.add(e, timestamp, keep),
            None => {
                // One more partition: every partition's share shrinks.
                let keep = share(self.budget, self.partitions.len() + 1);
                for p in self.partitions.values_mut() {
                    p.trim(keep);
                }
                let mut p = PartitionSyncs {
                    dense: VecDeque::new(),
                    mm2: Mm2Syncs::new(e.up, e.down),
                    epoch: 0,
                    generation: None,
                };
                let added = p.add(e, timestamp, keep);
                self.partitions.insert(key, p);
                added
            }
        }
    }

    /// The target offset for source offset `g` of `topic`/`partition`; `None` when no sync
    /// at or before `g` is known.
    pub fn translate(&self, topic: &str, partition: i32, g: i64) -> Option<i64> {
        self.translation(topic, partition, g).map(|t| t.offset)
    }

    /// The oldest target offset the retained syncs of a partition describe.
    pub fn oldest_downstream(&self, topic: &str, partition: i32) -> Option<i64> {
        let p = self.partitions.get(&(topic.to_string(), partition))?;
        p.dense.front().map(|e| e.down)
    }

    /// The newest target offset the retained syncs of a partition describe: a record known
    /// to be on the target (its end is past it).
    pub fn newest_downstream(&self, topic: &str, partition: i32) -> Option<i64> {
        let p = self.partitions.get(&(topic.to_string(), partition))?;
        p.dense.back().map(|e| e.down)
    }

    /// Where source record `up` of `topic`/`partition` is on the target, when the retained
    /// syncs say exactly (see `PartitionSyncs::exact`).
    pub fn exact(&self, topic: &str, partition: i32, up: i64) -> Option<i64> {
        self.partitions
            .get(&(topic.to_string(), partition))?
            .exact(up)
    }

    /// Whether the retained syncs link placed source records `a` < `b` of
    /// `topic`/`partition` into one writer's contiguous stretch (see
    /// `PartitionSyncs::linked`): only then is a target record between their copies
    /// known to be no copy of theirs.
    pub fn linked(&self, topic: &str, partition: i32, a: i64, b: i64) -> bool {
        self.partitions
            .get(&(topic.to_string(), partition))
            .is_some_and(|p| p.linked(a, b))
    }

    /// The epoch of a partition's syncs (bumped at every rewind: what was placed before
    /// may be placed elsewhere now).
    pub fn epoch(&self, topic: &str, partition: i32) -> Option<u64> {
        Some(self.partitions.get(&(topic.to_string(), partition))?.epoch)
    }

    /// The source offset of the oldest retained sync of a partition: the first record the
    /// syncs place.
    pub fn oldest_upstream(&self, topic: &str, partition: i32) -> Option<i64> {
        let p = self.partitions.get(&(topic.to_string(), partition))?;
        p.dense.front().map(|e| e.up)
    }

    /// The source offset of the newest retained sync of a partition: the last record the
    /// syncs place.
    pub fn newest_upstream(&self, topic: &str, partition: i32) -> Option<i64> {
        let p = self.partitions.get(&(topic.to_string(), partition))?;
        p.dense.back().map(|e| e.up)
    }

    /// [`Self::translate`] with how many records before `g` a consumer moved there reads
    /// again: `Some(0)` when the translation is exact, `None` when unknown.
    pub fn translate_rereads(
        &self,
        topic: &str,
        partition: i32,
        g: i64,
    ) -> Option<(i64, Option<i64>)> {
        self.partitions
            .get(&(topic.to_string(), partition))?
            .translate_counted(g)
    }

    /// [`Self::translate`] with the epoch of the syncs used.
    pub fn translation(&self, topic: &str, partition: i32, g: i64) -> Option<Translation> {
        let p = self.partitions.get(&(topic.to_string(), partition))?;
        let offset = p.translate(g)?;
        Some(Translation {
            offset,
            epoch: p.epoch,
        })
    }
}

#[cfg(test)]
mod tests;
