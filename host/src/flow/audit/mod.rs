//! The background audit (`audit_interval`): on the leader, every interval, each mirrored
//! partition's records since the last pass are read on both sides, paired through the
//! flow's exact offset map and compared record by record (`flow::verify`), at most
//! `audit_records_per_second` source records a second. What it finds is counted
//! (`kmirror_audit_records_total`), the differences logged and listed in `/status`.
//!
//! Here the rules, pure: where each partition's audit stands between passes and what a
//! pass reads; the loop is in `task`.
//!
//! A partition's audit starts at the oldest record the map places (the newest syncs the
//! leader keeps) and follows the newest placed one; records past it are mirrored, perhaps,
//! but not placed yet, and wait for a later pass. A new leader starts over (its cursors are
//! in memory): a leadership change audits the kept range again, never less.

pub mod task;

use crate::flow::Routes;
use crate::flow::verify::read::Position;
use std::collections::BTreeMap;

/// A source partition.
pub type Tp = (String, i32);

/// Where one partition's audit stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The target topic it was audited against (a policy change starts it over).
    pub target: String,
    /// The next source offset to audit.
    pub next: i64,
    /// The target side's position after the records audited.
    pub position: Position,
    /// The epoch of the map it was audited by (a rewind places records elsewhere: the
    /// audit starts over).
    pub epoch: u64,
}

/// What the map places of a partition now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// The oldest source offset it places.
    pub oldest: i64,
    /// Its epoch.
    pub epoch: u64,
}

/// What the offset map and the source say of a partition now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The oldest source offset the map places.
    pub oldest_placed: i64,
    /// The newest source offset the map places.
    pub newest_placed: i64,
    /// The source's log start (its oldest readable offset).
    pub low: i64,
}

/// One partition's range in a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The source partition.
    pub tp: Tp,
    /// Its target topic.
    pub target: String,
    /// Source offsets audited, [from, to).
    pub from: i64,
    pub to: i64,
    /// Source offsets gone before the audit reached them, [from, to).
    pub unreadable: Option<(i64, i64)>,
    /// Source offsets skipped because the map no longer places them (the audit fell
    /// behind the syncs the leader keeps), [from, to).
    pub unplaced: Option<(i64, i64)>,
}

/// The partitions of `routes` with their cursors: cursors of partitions no longer mirrored,
/// or mirrored to another target topic, are dropped; a partition seen for the first time,
/// or whose map was rewound since (a new epoch: a topic recreated, records mirrored again
/// from an older position), starts at the oldest placed offset (`placed` says `None` while
/// the map places nothing). Returns the partitions started over after a rewind.
pub fn follow_routes(
    cursors: &mut BTreeMap<Tp, Cursor>,
    routes: &Routes,
    placed: impl Fn(&Tp) -> Option<Placed>,
) -> Vec<Tp> {
    cursors.retain(|(topic, p), c| {
        routes
            .get(topic)
            .is_some_and(|r| r.target == c.target && *p < r.partitions)
    });
    let mut rewound = Vec::new();
    for (topic, route) in routes {
        for p in 0..route.partitions {
            let tp = (topic.clone(), p);
            let Some(now) = placed(&tp) else { continue };
            match cursors.get(&tp) {
                Some(c) if c.epoch == now.epoch => continue,
                Some(_) => rewound.push(tp.clone()),
                None => {}
            }
            cursors.insert(
                tp,
                Cursor {
                    target: route.target.clone(),
                    next: now.oldest,
                    position: Position::default(),
                    epoch: now.epoch,
                },
            );
        }
    }
    rewound
}

/// What a pass audits: each partition from its cursor to its newest placed offset, at most
/// `budget` source offsets in all (shared evenly among the partitions with something to
/// audit, so that a busy partition does not starve the others). A cursor below the source's
/// log start moves to it (the offsets between are reported unreadable) and its target
/// position is forgotten. Partitions without bounds are left out of this pass.
pub fn plan(
    cursors: &mut BTreeMap<Tp, Cursor>,
    bounds: impl Fn(&Tp) -> Option<Bounds>,
    budget: u64,
) -> Vec<Planned> {
    let mut work = Vec::new();
    for (tp, c) in cursors.iter_mut() {
        let Some(b) = bounds(tp) else { continue };
        let mut skipped = |to: i64| {
            let gap = (c.next < to).then_some((c.next, to));
            if gap.is_some() {
                c.next = to;
                c.position = Position::default();
            }
            gap
        };
        let unreadable = skipped(b.low);
        let unplaced = skipped(b.oldest_placed);
        let end = b.newest_placed + 1;
        if end > c.next || unreadable.is_some() || unplaced.is_some() {
            work.push(Planned {
                tp: tp.clone(),
                target: c.target.clone(),
                from: c.next,
                to: end.max(c.next),
                unreadable,
                unplaced,
            });
        }
    }
    let busy = work.iter().filter(|w| w.to > w.from).count().max(1) as u64;
    let share = (budget / busy).max(1) as i64;
    for w in &mut work {
        w.to = w.to.min(w.from + share);
    }
    work
}

/// Source offsets placed but not audited yet, over every cursor.
pub fn behind(cursors: &BTreeMap<Tp, Cursor>, newest_placed: impl Fn(&Tp) -> Option<i64>) -> u64 {
    cursors
        .iter()
        .filter_map(|(tp, c)| newest_placed(tp).map(|n| (n + 1 - c.next).max(0) as u64))
        .sum()
}

#[cfg(test)]
mod tests;
