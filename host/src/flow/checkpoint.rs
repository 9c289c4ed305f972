//! Checkpoint decisions as pure functions: the target-side name of a checkpointed topic,
//! when a checkpoint is emitted, and what group offset sync may write to a target group.

use crate::formats::Checkpoint;
use crate::plugin::PluginError;
use crate::policy::ReplicationPolicy;
use std::collections::BTreeMap;

/// The name on the target of source topic `topic` (MM2's `renameTopicPartition`): a topic
/// that came from the target maps back to its original name, any other is formatted as
/// a remote topic of `source_alias`.
pub fn target_topic(
    policy: &dyn ReplicationPolicy,
    source_alias: &str,
    target_alias: &str,
    topic: &str,
) -> Result<String, PluginError> {
    if policy.topic_source(topic)?.as_deref() == Some(target_alias) {
        policy.original_topic(topic)
    } else {
        policy.format_remote_topic(source_alias, topic)
    }
}

/// (group, target topic, partition).
pub type CheckpointKey = (String, String, i32);

/// The key of a checkpoint.
pub fn key(c: &Checkpoint) -> CheckpointKey {
    (c.group.clone(), c.topic.clone(), c.partition)
}

/// Whether `next` is emitted after `last`: the first one, one that moves forward, or one
/// whose upstream group rewound (its committed offset went back).
pub fn should_emit(last: Option<&Checkpoint>, next: &Checkpoint) -> bool {
    match last {
        None => true,
        Some(l) => next.upstream < l.upstream || next.downstream > l.downstream,
    }
}

/// A consumer group's state on the target, as far as offset sync cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetGroup {
    /// The group does not exist on the target.
    Unknown,
    /// The group exists without members.
    Empty,
    /// The group has members (consumers are running against the target): never touched.
    Active {
        /// How many members.
        members: usize,
        /// The broker's state name (`Stable`, `PreparingRebalance`, ...).
        state: String,
    },
}

impl TargetGroup {
    /// From the broker's group state and member count.
    pub fn from_state(state: Option<&str>, members: usize) -> TargetGroup {
        match state {
            None | Some("Dead") => TargetGroup::Unknown,
            Some("Empty") if members == 0 => TargetGroup::Empty,
            Some(s) => TargetGroup::Active {
                members,
                state: s.to_string(),
            },
        }
    }
}

/// What group offset sync does for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncPlan {
    /// Commit these (target topic, partition, offset).
    Commit(Vec<(String, i32, i64)>),
    /// Leave the group alone: it is active on the target.
    SkipActive,
    /// Nothing is behind.
    UpToDate,
}

/// Plans group offset sync: only for an EMPTY or unknown target group, and only for
/// partitions where the target's committed offset is behind the checkpoint (never rewind).
pub fn plan_group_sync(
    group: &TargetGroup,
    target_committed: &BTreeMap<(String, i32), i64>,
    checkpoints: &[&Checkpoint],
) -> SyncPlan {
    if matches!(group, TargetGroup::Active { .. }) {
        return SyncPlan::SkipActive;
    }
    let commits: Vec<(String, i32, i64)> = checkpoints
        .iter()
        .filter(|c| {
            target_committed
                .get(&(c.topic.clone(), c.partition))
                .is_none_or(|t| *t < c.downstream)
        })
        .map(|c| (c.topic.clone(), c.partition, c.downstream))
        .collect();
    if commits.is_empty() {
        SyncPlan::UpToDate
    } else {
        SyncPlan::Commit(commits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Native;
    use kmirror_mm2::DefaultReplicationPolicy;

    fn cp(up: i64, down: i64) -> Checkpoint {
        Checkpoint {
            group: "g".into(),
            topic: "primary.t".into(),
            partition: 0,
            upstream: up,
            downstream: down,
            metadata: String::new(),
        }
    }

    #[test]
    fn topics_are_renamed_both_ways() {
        let p = Native(DefaultReplicationPolicy::default());
        assert_eq!(
            target_topic(&p, "primary", "backup", "orders").unwrap(),
            "primary.orders"
        );
        assert_eq!(
            target_topic(&p, "primary", "backup", "backup.orders").unwrap(),
            "orders"
        );
        assert_eq!(
            target_topic(&p, "primary", "backup", "east.backup.orders").unwrap(),
            "primary.east.backup.orders"
        );
    }

    #[test]
    fn checkpoints_only_move_forward_unless_the_group_rewound() {
        assert!(should_emit(None, &cp(10, 5)));
        assert!(!should_emit(Some(&cp(10, 5)), &cp(10, 5)), "same");
        assert!(should_emit(Some(&cp(10, 5)), &cp(12, 7)), "forward");
        assert!(
            !should_emit(Some(&cp(10, 5)), &cp(12, 5)),
            "upstream moved, downstream did not"
        );
        assert!(
            !should_emit(Some(&cp(10, 5)), &cp(11, 4)),
            "would go backwards"
        );
        assert!(
            should_emit(Some(&cp(10, 5)), &cp(3, 2)),
            "the upstream group rewound"
        );
    }

    #[test]
    fn target_group_states() {
        assert_eq!(TargetGroup::from_state(None, 0), TargetGroup::Unknown);
        assert_eq!(
            TargetGroup::from_state(Some("Dead"), 0),
            TargetGroup::Unknown
        );
        assert_eq!(
            TargetGroup::from_state(Some("Empty"), 0),
            TargetGroup::Empty
        );
        assert_eq!(
            TargetGroup::from_state(Some("Stable"), 2),
            TargetGroup::Active {
                members: 2,
                state: "Stable".into()
            }
        );
    }

    #[test]
    fn group_sync_never_rewinds_and_never_touches_active_groups() {
        let (a, b) = (
            cp(10, 8),
            Checkpoint {
                partition: 1,
                ..cp(20, 15)
            },
        );
        let committed: BTreeMap<(String, i32), i64> = [(("primary.t".to_string(), 0), 9)].into();
        assert_eq!(
            plan_group_sync(&TargetGroup::Empty, &committed, &[&a, &b]),
            SyncPlan::Commit(vec![("primary.t".into(), 1, 15)]),
            "partition 0 is already ahead on the target"
        );
        assert_eq!(
            plan_group_sync(&TargetGroup::Unknown, &BTreeMap::new(), &[&a]),
            SyncPlan::Commit(vec![("primary.t".into(), 0, 8)])
        );
        let active = TargetGroup::Active {
            members: 1,
            state: "Stable".into(),
        };
        assert_eq!(
            plan_group_sync(&active, &BTreeMap::new(), &[&a]),
            SyncPlan::SkipActive
        );
        assert_eq!(
            plan_group_sync(&TargetGroup::Empty, &committed, &[&a]),
            SyncPlan::UpToDate
        );
    }
}
