//! `kmirror offsets failover`'s completeness check as pure functions: which partitions of
//! the group on mirrored topics have a committed offset on the source but no checkpoint
//! (their consumers on the target would start at `auto.offset.reset`), and whether the
//! failover goes ahead without them.

use crate::flow::Routes;
use crate::formats::Checkpoint;
use crate::kafka::{Committed, TopicPartitions};
use std::collections::BTreeSet;

/// A partition of a mirrored topic the group committed an offset for on the source, with
/// no checkpoint to fail it over with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uncovered {
    /// The source topic.
    pub source_topic: String,
    /// Its name on the target.
    pub target_topic: String,
    /// The partition.
    pub partition: i32,
    /// The group's committed offset on the source.
    pub source_offset: i64,
    /// Why there is likely no checkpoint (one of [`NOT_YET`], [`GROUP_FILTERED`],
    /// [`NO_TARGET_TOPIC`], [`NO_TARGET_PARTITION`]).
    pub reason: &'static str,
}

/// Whether every partition of the group could be checked for a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coverage {
    /// The source was read: these partitions have no checkpoint (none: complete).
    Checked(Vec<Uncovered>),
    /// The source could not be read (or a topic the group committed on could not be
    /// decided), so completeness is unknown; why.
    Unknown(String),
}

/// What the failover does about partitions without a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Every partition has a checkpoint: go ahead.
    Complete,
    /// Some have none (or it is unknown) and `--allow-partial` was given: go ahead with
    /// the others, with a warning.
    Partial,
    /// Some have none (or it is unknown): commit nothing, exit 1.
    Refuse,
}

/// Why a checkpoint is likely missing when the flow mirrors the partition.
pub const NOT_YET: &str = "none yet (the group's offset may be older than the oldest offset sync, or the checkpoint pass has not run since)";
/// The group filter rejects the group.
pub const GROUP_FILTERED: &str = "the flow's group filter rejects this group";
/// The target topic is not there.
pub const NO_TARGET_TOPIC: &str = "the target topic does not exist yet";
/// The target topic has fewer partitions.
pub const NO_TARGET_PARTITION: &str = "the target topic lacks this partition yet";

/// The partitions of `committed` (the group's offsets on the source) that `routes` mirror
/// and `checkpoints` (the group's, by target topic) do not cover, in (target topic,
/// partition) order. `target` is the target cluster's topics and `group_accepted` whether
/// the flow checkpoints the group at all; both only choose the reason given.
pub fn uncovered(
    committed: &[Committed],
    routes: &Routes,
    checkpoints: &[Checkpoint],
    target: &TopicPartitions,
    group_accepted: bool,
) -> Vec<Uncovered> {
    let have: BTreeSet<(&str, i32)> = checkpoints
        .iter()
        .map(|c| (c.topic.as_str(), c.partition))
        .collect();
    let mut out: Vec<Uncovered> = committed
        .iter()
        .filter_map(|c| {
            let route = routes
                .get(&c.topic)
                .filter(|r| c.partition < r.partitions)?;
            if have.contains(&(route.target.as_str(), c.partition)) {
                return None;
            }
            let reason = match target.get(&route.target) {
                _ if !group_accepted => GROUP_FILTERED,
                None => NO_TARGET_TOPIC,
                Some(&n) if c.partition >= n => NO_TARGET_PARTITION,
                Some(_) => NOT_YET,
            };
            Some(Uncovered {
                source_topic: c.topic.clone(),
                target_topic: route.target.clone(),
                partition: c.partition,
                source_offset: c.offset,
                reason,
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.target_topic, a.partition).cmp(&(&b.target_topic, b.partition)));
    out.dedup_by(|a, b| a.target_topic == b.target_topic && a.partition == b.partition);
    out
}

/// Whether the failover goes ahead: only with every partition covered, or with
/// `--allow-partial`.
pub fn gate(coverage: &Coverage, allow_partial: bool) -> Gate {
    match coverage {
        Coverage::Checked(missing) if missing.is_empty() => Gate::Complete,
        _ if allow_partial => Gate::Partial,
        _ => Gate::Refuse,
    }
}

/// `topic[partition]` of each, for messages.
pub fn named(missing: &[Uncovered]) -> String {
    missing
        .iter()
        .map(|u| format!("{}[{}]", u.target_topic, u.partition))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why the failover is refused, for `group` and its `coverage`.
pub fn refusal(group: &str, coverage: &Coverage) -> String {
    match coverage {
        Coverage::Checked(missing) => format!(
            "{} partition(s) of group {group} have a committed offset on the source but no \
             checkpoint: {}; nothing committed (their consumers would start at \
             auto.offset.reset). Wait for the next checkpoint pass, or add --allow-partial to \
             commit the other partitions",
            missing.len(),
            named(missing)
        ),
        Coverage::Unknown(why) => format!(
            "cannot check that every partition of group {group} has a checkpoint: {why}; \
             nothing committed. Add --allow-partial to fail over with the checkpoints there are"
        ),
    }
}

/// The warning printed when `--allow-partial` lets an incomplete failover go ahead.
pub fn partial_warning(group: &str, coverage: &Coverage) -> Option<String> {
    match coverage {
        Coverage::Checked(missing) if missing.is_empty() => None,
        Coverage::Checked(missing) => Some(format!(
            "--allow-partial: left out {} partition(s) of group {group} with no checkpoint: {}; \
             its consumers start them at auto.offset.reset",
            missing.len(),
            named(missing)
        )),
        Coverage::Unknown(why) => Some(format!(
            "--allow-partial: partitions of group {group} without a checkpoint are not known \
             ({why}); only the partitions with a checkpoint are committed"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Route;

    fn committed(topic: &str, partition: i32, offset: i64) -> Committed {
        Committed {
            topic: topic.into(),
            partition,
            offset,
            metadata: String::new(),
        }
    }

    fn cp(topic: &str, partition: i32) -> Checkpoint {
        Checkpoint {
            group: "app".into(),
            topic: topic.into(),
            partition,
            upstream: 10,
            downstream: 9,
            metadata: String::new(),
        }
    }

    fn routes() -> Routes {
        [
            ("orders".to_string(), Route::new("primary.orders", 2)),
            ("events".to_string(), Route::new("primary.events", 1)),
        ]
        .into()
    }

    fn target() -> TopicPartitions {
        [
            ("primary.orders".to_string(), 2),
            ("primary.events".to_string(), 1),
        ]
        .into()
    }

    #[test]
    fn only_mirrored_partitions_without_a_checkpoint_are_uncovered() {
        let group = [
            committed("orders", 0, 5),
            committed("orders", 1, 7),
            committed("events", 0, 3),
            committed("unmirrored", 0, 1),
            // Beyond the partitions the route mirrors.
            committed("events", 1, 1),
        ];
        let cps = [cp("primary.orders", 0), cp("primary.events", 0)];
        let missing = uncovered(&group, &routes(), &cps, &target(), true);
        assert_eq!(
            missing,
            vec![Uncovered {
                source_topic: "orders".into(),
                target_topic: "primary.orders".into(),
                partition: 1,
                source_offset: 7,
                reason: NOT_YET,
            }]
        );
        assert_eq!(named(&missing), "primary.orders[1]");
    }

    #[test]
    fn checkpoints_are_matched_by_target_name_not_source_name() {
        let group = [committed("orders", 0, 5)];
        let under_source_name = [cp("orders", 0)];
        assert_eq!(
            uncovered(&group, &routes(), &under_source_name, &target(), true).len(),
            1
        );
        assert!(
            uncovered(
                &group,
                &routes(),
                &[cp("primary.orders", 0)],
                &target(),
                true
            )
            .is_empty()
        );
    }

    #[test]
    fn a_complete_or_empty_group_is_covered() {
        assert!(uncovered(&[], &routes(), &[], &target(), true).is_empty());
        let group = [committed("orders", 0, 5), committed("orders", 1, 6)];
        let cps = [cp("primary.orders", 1), cp("primary.orders", 0)];
        assert!(uncovered(&group, &routes(), &cps, &target(), true).is_empty());
    }

    #[test]
    fn the_reason_names_the_likely_cause() {
        let group = [committed("orders", 1, 5)];
        let reason = |target: &TopicPartitions, accepted| {
            uncovered(&group, &routes(), &[], target, accepted)[0].reason
        };
        assert_eq!(reason(&target(), true), NOT_YET);
        assert_eq!(reason(&target(), false), GROUP_FILTERED);
        assert_eq!(reason(&TopicPartitions::new(), true), NO_TARGET_TOPIC);
        let smaller: TopicPartitions = [("primary.orders".to_string(), 1)].into();
        assert_eq!(reason(&smaller, true), NO_TARGET_PARTITION);
    }

    #[test]
    fn uncovered_partitions_are_sorted_and_listed_once() {
        let group = [
            committed("orders", 1, 5),
            committed("events", 0, 2),
            committed("orders", 0, 4),
            committed("orders", 1, 5),
        ];
        let missing = uncovered(&group, &routes(), &[], &target(), true);
        assert_eq!(
            named(&missing),
            "primary.events[0], primary.orders[0], primary.orders[1]"
        );
    }

    #[test]
    fn an_incomplete_failover_is_refused_unless_partial_is_allowed() {
        let complete = Coverage::Checked(Vec::new());
        let group = [committed("orders", 1, 5)];
        let partial = Coverage::Checked(uncovered(&group, &routes(), &[], &target(), true));
        let unknown = Coverage::Unknown("the source is unreachable".into());
        assert_eq!(gate(&complete, false), Gate::Complete);
        assert_eq!(gate(&complete, true), Gate::Complete);
        assert_eq!(gate(&partial, false), Gate::Refuse);
        assert_eq!(gate(&partial, true), Gate::Partial);
        assert_eq!(
            gate(&unknown, false),
            Gate::Refuse,
            "unknown is not complete"
        );
        assert_eq!(gate(&unknown, true), Gate::Partial);

        assert_eq!(partial_warning("app", &complete), None);
        let warning = partial_warning("app", &partial).expect("a warning");
        assert!(warning.contains("primary.orders[1]"), "{warning}");
        let refused = refusal("app", &partial);
        assert!(
            refused.contains("primary.orders[1]") && refused.contains("--allow-partial"),
            "{refused}"
        );
        assert!(refusal("app", &unknown).contains("unreachable"));
    }
}
