//! The comparison of `kmirror verify` and of the background audit (`flow::audit`), pure
//! here (its reads in `read`): a source partition's records and its target
//! partition's records, paired through the flow's exact offset map (the offset syncs), and
//! compared record by record — key, value, headers, timestamp and order.
//!
//! The map places a source record exactly when a sync names it, or when it lies in a run
//! of contiguous offsets between two syncs of one writer session with no sync missing
//! between them (`offset_syncs::writer`); past the newest sync, the records are not yet
//! covered (mirrored, perhaps, but the map does not say where yet). Both sides are read in
//! offset order, so the pairing streams: a target record the map gives no source record
//! for is extra, a mapped target offset with no record is missing.

pub mod read;

use serde::Serialize;

/// A record as compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Its offset in its partition.
    pub offset: i64,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its value.
    pub value: Option<Vec<u8>>,
    /// Its headers, in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Its timestamp (ms since the epoch), if it has one.
    pub timestamp: Option<i64>,
    /// Whether the broker set the timestamp when it appended the record (a topic with
    /// `message.timestamp.type=LogAppendTime`): such a timestamp is not the record's own,
    /// and is not compared.
    pub log_append_time: bool,
}

impl Seen {
    /// What differs between this source record and `target`, if anything.
    fn differs(&self, target: &Seen) -> Option<&'static str> {
        if self.key != target.key {
            Some("key")
        } else if self.value != target.value {
            Some("value")
        } else if self.headers != target.headers {
            Some("headers")
        } else if self.timestamp != target.timestamp
            && !self.log_append_time
            && !target.log_append_time
        {
            Some("timestamp")
        } else {
            None
        }
    }
}

/// How many differences of each kind a report lists by offset at most (all are counted).
pub const LISTED: usize = 20;

/// One partition's verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PartitionReport {
    /// Source records compared with their target record and found equal.
    pub equal: u64,
    /// Source records whose target record differs: (source offset, target offset, what
    /// differs), the first [`LISTED`].
    pub mismatched: Vec<(i64, i64, &'static str)>,
    /// How many differ.
    pub mismatched_count: u64,
    /// Source records whose mapped target offset holds no record: (source offset, target
    /// offset), the first [`LISTED`].
    pub missing: Vec<(i64, i64)>,
    /// How many are missing.
    pub missing_count: u64,
    /// Target records in the compared range that no source record maps to: their
    /// offsets, the first [`LISTED`].
    pub extra: Vec<i64>,
    /// How many are extra.
    pub extra_count: u64,
    /// Source records the map places only approximately (a sync missing: a restart, a
    /// handover): not compared.
    pub unmapped: u64,
    /// Source records past the newest sync: not compared yet (`kmirror verify` does not
    /// read them, and counts their offsets).
    pub not_covered: u64,
    /// Target records among the copies of records the map does not place (after a crash,
    /// a lost sync): neither compared nor counted extra.
    pub target_unplaced: u64,
    /// Whether the last source record compared was one the map does not place (the next
    /// stretch's first target records may be its copies).
    #[serde(skip)]
    pub ends_unplaced: bool,
    /// The last source record compared that the map places (the next stretch's first
    /// placed record is judged linked to it or not).
    #[serde(skip)]
    pub last_placed: Option<i64>,
}

impl PartitionReport {
    /// Adds `other` (a later stretch of the same partition) to this report.
    pub fn add(&mut self, other: PartitionReport) {
        fn extend<T>(into: &mut Vec<T>, from: Vec<T>) {
            let room = LISTED.saturating_sub(into.len());
            into.extend(from.into_iter().take(room));
        }
        self.equal += other.equal;
        self.mismatched_count += other.mismatched_count;
        self.missing_count += other.missing_count;
        self.extra_count += other.extra_count;
        self.unmapped += other.unmapped;
        self.not_covered += other.not_covered;
        self.target_unplaced += other.target_unplaced;
        self.ends_unplaced = other.ends_unplaced;
        self.last_placed = other.last_placed.or(self.last_placed);
        extend(&mut self.mismatched, other.mismatched);
        extend(&mut self.missing, other.missing);
        extend(&mut self.extra, other.extra);
    }

    /// Whether anything differs.
    pub fn differs(&self) -> bool {
        self.mismatched_count + self.missing_count + self.extra_count > 0
    }
}

/// Compares `source` (a partition's records from some offset on, ascending) with `target`
/// (its target partition's records from just after the previous placed one, ascending, up
/// to the mapped offset of the last covered one), placing each source record with `map`
/// (its exact target offset, `None` when the map is not exact there); source records past
/// `covered_to` are not compared. `after_unplaced`: the source record before these was
/// one the map does not place (a previous stretch's [`PartitionReport::ends_unplaced`]).
///
/// A target record between two placed source records with nothing unplaced between them
/// is no source record's copy: extra. Between a placed record and the next with unplaced
/// ones between them, the target records are the unplaced ones' copies (or duplicates the
/// map cannot tell from them): not judged.
pub fn compare(
    source: impl IntoIterator<Item = Seen>,
    target: impl IntoIterator<Item = Seen>,
    map: impl Fn(i64) -> Option<i64>,
    covered_to: Option<i64>,
    after_unplaced: bool,
) -> PartitionReport {
    let carried = Carried {
        after_unplaced,
        last_placed: None,
    };
    compare_linked(source, target, map, |_, _| true, covered_to, carried)
}

/// What a partition's comparison carries from one stretch to the next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Carried {
    /// The last source record compared was one the map does not place.
    pub after_unplaced: bool,
    /// The last source record compared that the map places.
    pub last_placed: Option<i64>,
}

/// [`compare`], where `linked(a, b)` says whether the map links placed source records `a`
/// and `b` (one writer's contiguous run, or consecutive syncs of one writer session).
/// Between two placed records it does not link, a writer that crashed or handed over may
/// have left copies the next writer mirrored again (the duplicates of an at-least-once
/// restart): target records there equal, in order, to the source records from `b` on are
/// those copies (not judged); any other is extra.
pub fn compare_linked(
    source: impl IntoIterator<Item = Seen>,
    target: impl IntoIterator<Item = Seen>,
    map: impl Fn(i64) -> Option<i64>,
    linked: impl Fn(i64, i64) -> bool,
    covered_to: Option<i64>,
    carried: Carried,
) -> PartitionReport {
    let mut report = PartitionReport::default();
    let mut target = target.into_iter().peekable();
    let mut unplaced = carried.after_unplaced;
    let mut last_placed = carried.last_placed;
    let skipped = |report: &mut PartitionReport, at: i64, unplaced: bool| {
        if unplaced {
            report.target_unplaced += 1;
        } else {
            report.extra_count += 1;
            if report.extra.len() < LISTED {
                report.extra.push(at);
            }
        }
    };
    let source: Vec<Seen> = source.into_iter().collect();
    for (i, s) in source.iter().enumerate() {
        if covered_to.is_none_or(|c| s.offset > c) {
            report.not_covered += 1;
            continue;
        }
        let Some(at) = map(s.offset) else {
            report.unmapped += 1;
            unplaced = true;
            continue;
        };
        // Target records before the one this record maps to: no source record's, or the
        // copies of unplaced ones.
        if unplaced {
            while let Some(t) = target.next_if(|t| t.offset < at) {
                skipped(&mut report, t.offset, true);
            }
        } else if last_placed.is_some_and(|l| !linked(l, s.offset)) {
            // Between two writers the map does not link (a crash, a handover): the first
            // writer's copies of the records the second mirrored again — this one and the
            // ones after it, in order — are duplicates; anything else is extra.
            let mut k = 0;
            while let Some(t) = target.next_if(|t| t.offset < at) {
                let copy = source.get(i + k).is_some_and(|r| r.differs(&t).is_none());
                skipped(&mut report, t.offset, copy);
                k += 1;
            }
        } else {
            while let Some(t) = target.next_if(|t| t.offset < at) {
                skipped(&mut report, t.offset, false);
            }
        }
        unplaced = false;
        last_placed = Some(s.offset);
        match target.next_if(|t| t.offset == at) {
            Some(t) => match s.differs(&t) {
                None => report.equal += 1,
                Some(what) => {
                    report.mismatched_count += 1;
                    if report.mismatched.len() < LISTED {
                        report.mismatched.push((s.offset, at, what));
                    }
                }
            },
            None => {
                report.missing_count += 1;
                if report.missing.len() < LISTED {
                    report.missing.push((s.offset, at));
                }
            }
        }
    }
    // The caller reads the target only up to the last placed record's place: what is
    // left follows it.
    for t in target {
        skipped(&mut report, t.offset, unplaced);
    }
    report.ends_unplaced = unplaced;
    report.last_placed = last_placed;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(offset: i64, value: &str) -> Seen {
        Seen {
            offset,
            key: Some(b"k".to_vec()),
            value: Some(value.as_bytes().to_vec()),
            headers: vec![("id".into(), Some(value.as_bytes().to_vec()))],
            timestamp: Some(1_700_000_000_000 + offset),
            log_append_time: false,
        }
    }

    /// Source offsets 10..20 with a transaction marker at 15 (no record), mirrored to
    /// target offsets 0..9: 10..15 at 0..5, 16..20 at 5..9.
    fn source() -> Vec<Seen> {
        (10..20)
            .filter(|o| *o != 15)
            .map(|o| rec(o, &format!("v{o}")))
            .collect()
    }

    fn target_of(source: &[Seen]) -> Vec<Seen> {
        source
            .iter()
            .enumerate()
            .map(|(i, s)| Seen {
                offset: i as i64,
                timestamp: s.timestamp,
                ..s.clone()
            })
            .collect()
    }

    fn map(up: i64) -> Option<i64> {
        match up {
            10..=14 => Some(up - 10),
            16..=19 => Some(up - 11),
            _ => None,
        }
    }

    #[test]
    fn a_faithful_mirror_compares_equal_through_the_map() {
        let s = source();
        let report = compare(s.clone(), target_of(&s), map, Some(19), false);
        assert_eq!(report.equal, 9);
        assert!(!report.differs(), "{report:?}");
    }

    #[test]
    fn a_changed_a_deleted_and_an_added_record_are_each_named() {
        let s = source();
        let mut t = target_of(&s);
        t[2].value = Some(b"changed".to_vec()); // source 12
        t[6].headers.clear(); // source 17 (target 6, 7 once one is added before it)
        t.remove(4); // source 14 at target 4: gone
        // One added between target 6 and 7: the map skips over it (a downstream gap).
        let added = Seen {
            offset: 6,
            ..rec(99, "added")
        };
        let t: Vec<Seen> = t
            .into_iter()
            .map(|r| {
                if r.offset >= 6 {
                    Seen {
                        offset: r.offset + 1,
                        ..r
                    }
                } else {
                    r
                }
            })
            .chain(std::iter::once(added))
            .collect();
        let mut t = t;
        t.sort_by_key(|r| r.offset);
        let shifted = |up: i64| map(up).map(|d| if d >= 6 { d + 1 } else { d });
        let report = compare(s, t, shifted, Some(19), false);
        assert_eq!(
            report.mismatched,
            vec![(12, 2, "value"), (17, 7, "headers")],
            "{report:?}"
        );
        assert_eq!(report.missing, vec![(14, 4)], "{report:?}");
        assert_eq!(report.extra, vec![6], "{report:?}");
        assert_eq!(report.equal, 6);
        assert!(report.differs());
    }

    #[test]
    fn records_the_map_does_not_place_exactly_or_not_yet_are_not_compared() {
        let s = source();
        let t = target_of(&s);
        // Placed up to 12, then not (a sync lost): the copies of 13.. are not called extra.
        let partial = |up: i64| if up < 13 { map(up) } else { None };
        let report = compare(s.clone(), t.clone(), partial, Some(19), false);
        assert_eq!((report.equal, report.unmapped), (3, 6), "{report:?}");
        assert_eq!(
            (report.extra_count, report.target_unplaced),
            (0, 6),
            "{report:?}"
        );
        assert!(report.ends_unplaced && !report.differs());
        // A gap in the map between two placed stretches (a crash: 11..=13 unplaced), with
        // a duplicate the restart wrote: neither is called extra; the placed ones compare.
        let mut dup = t.clone();
        dup.insert(
            4,
            Seen {
                offset: 4,
                ..t[3].clone()
            },
        );
        for (i, r) in dup.iter_mut().enumerate() {
            r.offset = i as i64;
        }
        let gap = |up: i64| match up {
            10 => Some(0),
            11..=13 => None,
            14 => Some(5),
            16..=19 => Some(up - 10),
            _ => None,
        };
        let report = compare(s.clone(), dup, gap, Some(19), false);
        assert_eq!(
            (report.equal, report.unmapped, report.target_unplaced),
            (6, 3, 4),
            "{report:?}"
        );
        assert!(!report.differs(), "{report:?}");
        // The next stretch starts after unplaced records: its first target records are
        // theirs, not extra.
        let report = compare(s[5..].to_vec(), t[4..].to_vec(), map, Some(19), true);
        assert_eq!(
            (report.target_unplaced, report.extra_count),
            (1, 0),
            "{report:?}"
        );
        let report = compare(s.clone(), t[..5].to_vec(), map, Some(14), false);
        assert_eq!((report.equal, report.not_covered), (5, 4), "{report:?}");
        assert!(!report.differs());
        let report = compare(s, Vec::new(), map, None, false);
        assert_eq!(report.not_covered, 9);
    }

    #[test]
    fn a_timestamp_or_key_changed_is_a_mismatch() {
        let s = vec![rec(0, "a"), rec(1, "b")];
        let mut t = s.clone();
        t[0].timestamp = Some(1);
        t[1].key = None;
        let report = compare(s, t, Some, Some(1), false);
        assert_eq!(report.mismatched, vec![(0, 0, "timestamp"), (1, 1, "key")]);
    }

    #[test]
    fn a_timestamp_the_broker_set_is_not_compared() {
        let s = vec![rec(0, "a")];
        let mut t = s.clone();
        t[0].timestamp = Some(1);
        t[0].log_append_time = true;
        let report = compare(s, t, Some, Some(0), false);
        assert_eq!((report.equal, report.mismatched_count), (1, 0));
    }

    /// A writer crashed after its last sync (source 10 at target 0): its copies of 11 and
    /// 12 are on the target (1, 2), the next writer mirrored 11.. again from target 3 on
    /// with a sync of its own session. The copies between are not another writer's records.
    #[test]
    fn the_copies_a_crashed_writer_left_between_two_sessions_are_not_extra() {
        let s: Vec<Seen> = (10..14).map(|o| rec(o, &format!("v{o}"))).collect();
        let mut t = vec![Seen {
            offset: 0,
            ..s[0].clone()
        }];
        t.push(Seen {
            offset: 1,
            ..s[1].clone()
        });
        t.push(Seen {
            offset: 2,
            ..s[2].clone()
        });
        for (i, r) in s[1..].iter().enumerate() {
            t.push(Seen {
                offset: 3 + i as i64,
                ..r.clone()
            });
        }
        let map = |up: i64| match up {
            10 => Some(0),
            11..=13 => Some(up - 8),
            _ => None,
        };
        // The second session's run is linked within itself, not to the first's sync.
        let linked = |a: i64, b: i64| (a >= 11) == (b >= 11);
        let report = compare_linked(
            s.clone(),
            t.clone(),
            map,
            linked,
            Some(13),
            Carried::default(),
        );
        assert_eq!(
            (report.equal, report.extra_count, report.target_unplaced),
            (4, 0, 2),
            "{report:?}"
        );
        // Linked (one session, as if no crash), the same two records are extra.
        let report = compare_linked(
            s.clone(),
            t.clone(),
            map,
            |_, _| true,
            Some(13),
            Carried::default(),
        );
        assert_eq!((report.extra_count, report.extra.clone()), (2, vec![1, 2]));
        // Not copies of what the second writer mirrored (another writer's records): extra.
        let mut intruded = t;
        intruded[2].value = Some(b"intruder".to_vec());
        let report = compare_linked(s, intruded, map, linked, Some(13), Carried::default());
        assert_eq!(
            (
                report.target_unplaced,
                report.extra_count,
                report.extra.clone()
            ),
            (1, 1, vec![2]),
            "{report:?}"
        );
    }
}
