//! Records the source lost before they were mirrored. librdkafka answers a position the
//! source partition no longer holds with `auto.offset.reset`, silently: retention or
//! `DeleteRecords` removed records a lagging mirror had not read yet, or the topic was
//! deleted and created again. The data plane notices from the records themselves: the
//! first record handed out after the position it expected (the stored position at
//! assignment, the record after the last one done, or the record it sought back to) lies
//! past it while the partition's log now starts past it too — a gap the source made, not
//! compaction or a transaction marker (those leave the log start where it was); or, first
//! after an assignment, it lies before the stored position (the log was started again).

use std::fmt;
use std::time::Duration;

/// How long a partition stopped by a truncation waits before it tries again by itself:
/// never, in practice (a restart with `on_source_truncation = "continue"`, or progress
/// moved with `kmirror offsets`, lets it go on).
pub const NEVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// What the source lost of one partition.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Truncation {
    /// The records `from..to` were deleted before they were mirrored (the log now starts
    /// at `to`).
    Deleted {
        /// The first record lost.
        from: i64,
        /// The log start: the first record still there.
        to: i64,
    },
    /// The stored position `from` lies past the partition's log, which now holds `to` as
    /// its first record: the topic was deleted and created again (or its log was
    /// truncated). What the old log held past `from` is unknown.
    WentBack {
        /// The stored position.
        from: i64,
        /// The first record handed out.
        to: i64,
    },
}

impl Truncation {
    /// What this truncation adds to `known`, reported before for the same partition: all
    /// of it, the part of a deleted range past the known one, or nothing (seen already).
    pub fn beyond(&self, known: &Truncation) -> Option<Truncation> {
        if self == known {
            return None;
        }
        match (self, known) {
            (Truncation::Deleted { from, to }, Truncation::Deleted { to: seen, .. })
                if from < seen =>
            {
                (to > seen).then_some(Truncation::Deleted {
                    from: *seen,
                    to: *to,
                })
            }
            _ => Some(self.clone()),
        }
    }

    /// How many records are known to be lost.
    pub fn records(&self) -> u64 {
        match self {
            Truncation::Deleted { from, to } => (to - from).max(0) as u64,
            Truncation::WentBack { .. } => 0,
        }
    }
}

impl fmt::Display for Truncation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Truncation::Deleted { from, to } => write!(
                f,
                "records {from}..{to} ({} records) were deleted at the source before they were mirrored",
                to - from
            ),
            Truncation::WentBack { from, to } => write!(
                f,
                "the stored position {from} lies past the source partition's log, which starts again at {to} (topic deleted and created again?): what the old log held from {from} on was not mirrored"
            ),
        }
    }
}

/// Whether the record at `offset`, handed out where `expected` was the next one, shows
/// records lost at the source; `low` is the partition's log start if known (asked only
/// for a record past `expected`), `first` whether `expected` is the stored position of a
/// partition just assigned.
pub fn judge(expected: i64, offset: i64, low: Option<i64>, first: bool) -> Option<Truncation> {
    if offset > expected {
        let low = low.filter(|l| *l > expected)?;
        return Some(Truncation::Deleted {
            from: expected,
            to: low.min(offset),
        });
    }
    (first && offset < expected).then_some(Truncation::WentBack {
        from: expected,
        to: offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_record_is_no_loss() {
        assert_eq!(judge(10, 10, None, true), None);
        assert_eq!(judge(10, 10, Some(50), false), None);
    }

    #[test]
    fn a_gap_inside_the_log_is_compaction_or_a_marker() {
        // The log still starts at or before the expected record: nothing was deleted.
        assert_eq!(judge(10, 14, Some(0), false), None);
        assert_eq!(judge(10, 14, Some(10), false), None);
        // The log start unknown: never reported on a guess.
        assert_eq!(judge(10, 14, None, false), None);
    }

    #[test]
    fn a_gap_below_the_log_start_is_a_loss() {
        let t = judge(10, 40, Some(40), true).unwrap();
        assert_eq!(t, Truncation::Deleted { from: 10, to: 40 });
        assert_eq!(t.records(), 30);
        assert_eq!(
            t.to_string(),
            "records 10..40 (30 records) were deleted at the source before they were mirrored"
        );
        // Reset to the end (start_offset = "latest"): only what the log no longer holds
        // is lost; the records from the log start on are still there.
        assert_eq!(
            judge(10, 90, Some(40), false),
            Some(Truncation::Deleted { from: 10, to: 40 })
        );
        // The log start moved again since the record was fetched: the record in hand is
        // not lost.
        assert_eq!(
            judge(10, 40, Some(60), false),
            Some(Truncation::Deleted { from: 10, to: 40 })
        );
    }

    #[test]
    fn a_range_seen_again_or_overlapping_adds_only_its_new_records() {
        let known = Truncation::Deleted { from: 30, to: 33 };
        assert_eq!(known.beyond(&known), None);
        assert_eq!(
            Truncation::Deleted { from: 30, to: 31 }.beyond(&known),
            None
        );
        assert_eq!(
            Truncation::Deleted { from: 31, to: 40 }.beyond(&known),
            Some(Truncation::Deleted { from: 33, to: 40 })
        );
        assert_eq!(
            Truncation::Deleted { from: 50, to: 60 }.beyond(&known),
            Some(Truncation::Deleted { from: 50, to: 60 })
        );
        let recreated = Truncation::WentBack { from: 500, to: 0 };
        assert_eq!(recreated.beyond(&known), Some(recreated.clone()));
        assert_eq!(recreated.beyond(&recreated), None);
    }

    #[test]
    fn a_record_before_the_stored_position_means_a_new_log() {
        let t = judge(500, 0, Some(0), true).unwrap();
        assert_eq!(t, Truncation::WentBack { from: 500, to: 0 });
        assert_eq!(t.records(), 0);
        // Later, a record before the expected one is a re-read (a seek back), not a loss.
        assert_eq!(judge(500, 0, Some(0), false), None);
    }
}
