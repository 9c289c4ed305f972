//! The partitions a replicator owns: a slab of slots, so each record finds its partition
//! with one lookup by topic name and an index, and each delivery report finds it by the
//! slot number it carries. A slot's generation changes whenever it is reused, so a late
//! report for a partition that was handed over is recognised and ignored.
//! A partition whose target changes gets a new key the same way ([`Table::rekey`]).

use super::progress::Progress;
use super::truncation::Truncation;
use crate::flow::telemetry::Paused;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Identifies a partition's slot and the generation it was assigned in; also the key of
/// its offset syncs (never reused).
pub type SlotKey = u64;

/// A record the target will not take, at which the partition stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// What and since when.
    pub paused: Paused,
    /// When the record is tried again.
    pub retry_at: Instant,
}

/// One source partition owned by the replicator. Whether it flows is decided from its
/// fields by [`super::book::Book`]: it flows when it is routed, not stopped at a record,
/// not waiting to retry, not draining towards a new target and the target has room.
#[derive(Debug)]
pub struct Partition {
    /// Its key.
    pub key: SlotKey,
    /// The source topic.
    pub topic: Arc<str>,
    /// The partition number (the same on the target).
    pub partition: i32,
    /// Where its records in flight went (and where the next ones go while it is routed
    /// there).
    pub target: Option<Arc<str>>,
    /// Where discovery routes it now; `None`: not routed (its topic is not mirrored, or the
    /// target topic lacks this partition).
    pub route: Option<Arc<str>>,
    /// What it did.
    pub progress: Progress,
    /// Stopped at a record the target will not take (`on_unproducible = "pause"`).
    pub stopped: Option<Stopped>,
    /// Waiting to try a record again after a transient refusal (a target partition the
    /// producer does not know yet, purged records): when, and why.
    pub retry: Option<(Instant, String)>,
    /// Whether the consumer has the partition paused (as far as the book asked it).
    pub paused: bool,
    /// The source offset the consumer must read from again when the partition flows: the
    /// first record it handed out that was not taken.
    pub rewind: Option<i64>,
    /// The first record handed out and not taken since the consumer last read from it:
    /// until a record at or before it is handed out again, later records of the partition
    /// (fetched before the seek back took effect) are not taken either.
    pub awaiting: Option<i64>,
    /// Progress this instance is known to have mirrored before the assignment was lost:
    /// the first record below it is skipped forward to it.
    pub floor: Option<i64>,
    /// Sought forward to this offset (to a [`Self::floor`]): records below it handed out
    /// meanwhile were fetched before the seek took effect, not a log started again.
    pub skip_below: Option<i64>,
    /// Until when a record handed out below the next one, while the log still holds the
    /// next, is taken for a stale fetch (set for every partition kept through a rebalance).
    pub stale_until: Option<Instant>,
    /// The last stale fetch sought forward: (the offset it was sought to, the first record
    /// of the stale stretch).
    pub stale_seek: Option<(i64, i64)>,
    /// The group's stored position at assignment, until the first record is handed out.
    pub expect: Option<i64>,
    /// The records the source lost before they were mirrored, as last reported.
    pub lost: Option<Truncation>,
    /// The consumer-group generation the partition was assigned in (its offset syncs'
    /// owner generation).
    pub generation: i32,
    /// Since when its progress has moved without being stored.
    pub unstored_since: Option<Instant>,
    /// When its position was last handed to a commit (moved or not); `None`: not since
    /// the assignment, or that commit failed.
    pub refreshed: Option<Instant>,
}

impl Partition {
    fn new(key: SlotKey, topic: &str, partition: i32) -> Self {
        Partition {
            key,
            topic: topic.into(),
            partition,
            target: None,
            route: None,
            progress: Progress::new(),
            stopped: None,
            retry: None,
            paused: false,
            rewind: None,
            awaiting: None,
            floor: None,
            skip_below: None,
            stale_until: None,
            stale_seek: None,
            expect: None,
            lost: None,
            generation: -1,
            unstored_since: None,
            refreshed: None,
        }
    }
}

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    partition: Option<Partition>,
}

/// Every partition the replicator owns.
#[derive(Debug, Default)]
pub struct Table {
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_topic: HashMap<String, Vec<Option<u32>>>,
}

fn split(key: SlotKey) -> (u32, u32) {
    ((key & 0xffff_ffff) as u32, (key >> 32) as u32)
}

impl Table {
    /// Adds a partition; returns its key (an existing one's if it is already owned).
    pub fn insert(&mut self, topic: &str, partition: i32) -> SlotKey {
        if let Some(p) = self.get_by_name_mut(topic, partition) {
            return p.key;
        }
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot::default());
            (self.slots.len() - 1) as u32
        });
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        let key = u64::from(index) | (u64::from(slot.generation) << 32);
        slot.partition = Some(Partition::new(key, topic, partition));
        let by = self.by_topic.entry(topic.to_string()).or_default();
        let at = usize::try_from(partition).unwrap_or(0);
        if by.len() <= at {
            by.resize(at + 1, None);
        }
        by[at] = Some(index);
        key
    }

    /// Removes the partition `topic`/`partition`, returning it.
    pub fn remove(&mut self, topic: &str, partition: i32) -> Option<Partition> {
        let by = self.by_topic.get_mut(topic)?;
        let index = by.get_mut(usize::try_from(partition).ok()?)?.take()?;
        if by.iter().all(Option::is_none) {
            self.by_topic.remove(topic);
        }
        self.free.push(index);
        self.slots[index as usize].partition.take()
    }

    /// Gives the partition with `key` a new key (a new generation of its slot), so reports
    /// and offset syncs of the old one are told apart; returns the new key.
    pub fn rekey(&mut self, key: SlotKey) -> Option<SlotKey> {
        let (index, generation) = split(key);
        let slot = self.slots.get_mut(index as usize)?;
        if slot.generation != generation {
            return None;
        }
        slot.generation = slot.generation.wrapping_add(1);
        let new = u64::from(index) | (u64::from(slot.generation) << 32);
        if let Some(p) = slot.partition.as_mut() {
            p.key = new;
        }
        Some(new)
    }

    /// The partition a record of `topic`/`partition` belongs to.
    pub fn get_by_name_mut(&mut self, topic: &str, partition: i32) -> Option<&mut Partition> {
        let index = (*self
            .by_topic
            .get(topic)?
            .get(usize::try_from(partition).ok()?)?)?;
        self.slots[index as usize].partition.as_mut()
    }

    /// The partition with `key`, if it is still owned in that generation.
    pub fn get_mut(&mut self, key: SlotKey) -> Option<&mut Partition> {
        let (index, generation) = split(key);
        let slot = self.slots.get_mut(index as usize)?;
        if slot.generation != generation {
            return None;
        }
        slot.partition.as_mut()
    }

    /// Every owned partition.
    pub fn iter(&self) -> impl Iterator<Item = &Partition> {
        self.slots.iter().filter_map(|s| s.partition.as_ref())
    }

    /// Every owned partition, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Partition> {
        self.slots.iter_mut().filter_map(|s| s.partition.as_mut())
    }

    /// How many partitions are owned.
    pub fn len(&self) -> usize {
        self.iter().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_slot_does_not_answer_to_the_old_key() {
        let mut t = Table::default();
        let a = t.insert("orders", 3);
        assert_eq!(
            t.insert("orders", 3),
            a,
            "inserting twice keeps the partition"
        );
        assert_eq!(t.get_by_name_mut("orders", 3).map(|p| p.key), Some(a));
        assert!(t.get_by_name_mut("orders", 2).is_none());
        assert!(t.remove("orders", 3).is_some());
        assert_eq!(t.len(), 0);
        let b = t.insert("payments", 0);
        assert_ne!(a, b, "same slot, new generation");
        assert!(
            t.get_mut(a).is_none(),
            "a late report for the old partition is ignored"
        );
        assert_eq!(t.get_mut(b).map(|p| p.partition), Some(0));
        assert_eq!(t.len(), 1);
        let c = t.rekey(b).expect("owned");
        assert!(t.get_mut(b).is_none(), "the old key no longer answers");
        assert_eq!(t.get_mut(c).map(|p| p.key), Some(c));
    }
}
