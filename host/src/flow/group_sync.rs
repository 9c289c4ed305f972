//! Group offset sync (MM2's `sync.group.offsets.enabled`): translated offsets are
//! committed to the same consumer group on the target, only when that group is EMPTY or
//! unknown there, and only where the target is behind — never rewound. The checkpoint
//! task runs it every `sync_group_offsets_interval`; `kmirror offsets failover` runs it
//! once, on demand.

use crate::formats::Checkpoint;
use crate::kafka::{Cluster, KafkaError};
use rdkafka::consumer::BaseConsumer;
use std::collections::BTreeMap;
use std::sync::Arc;

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

/// Target committed offsets by (topic, partition).
pub type TargetOffsets = BTreeMap<(String, i32), i64>;

/// Whether the target's committed offset (if any) is behind a checkpoint's: the one
/// never-rewind rule.
pub fn is_behind(target_committed: Option<i64>, checkpoint: &Checkpoint) -> bool {
    target_committed.is_none_or(|t| t < checkpoint.downstream)
}

/// Plans group offset sync: only for an EMPTY or unknown target group, and only for
/// partitions where the target's committed offset is behind the checkpoint.
pub fn plan_group_sync(
    group: &TargetGroup,
    target_committed: &TargetOffsets,
    checkpoints: &[&Checkpoint],
) -> SyncPlan {
    if matches!(group, TargetGroup::Active { .. }) {
        return SyncPlan::SkipActive;
    }
    let commits: Vec<(String, i32, i64)> = checkpoints
        .iter()
        .filter(|c| is_behind(committed_of(target_committed, c), c))
        .map(|c| (c.topic.clone(), c.partition, c.downstream))
        .collect();
    if commits.is_empty() {
        SyncPlan::UpToDate
    } else {
        SyncPlan::Commit(commits)
    }
}

/// The target's committed offset for `c`'s partition.
pub fn committed_of(target_committed: &TargetOffsets, c: &Checkpoint) -> Option<i64> {
    target_committed
        .get(&(c.topic.clone(), c.partition))
        .copied()
}

/// One group's state on the target and the plan for it.
#[derive(Debug, Clone)]
pub struct GroupSync {
    /// The group's state on the target.
    pub state: TargetGroup,
    /// Its committed offsets there, for the checkpoints' partitions.
    pub committed: TargetOffsets,
    /// What would be committed.
    pub plan: SyncPlan,
}

/// Reads `group`'s state and committed offsets on `target` (through `client`, a client of
/// that group) and plans the sync of `checkpoints`.
pub async fn prepare(
    target: &Cluster,
    client: &Arc<BaseConsumer>,
    group: &str,
    checkpoints: &[Checkpoint],
) -> Result<GroupSync, KafkaError> {
    let state = target.group(group).await.map(|g| {
        TargetGroup::from_state(
            g.as_ref().map(|g| g.state.as_str()),
            g.as_ref().map_or(0, |g| g.members),
        )
    })?;
    let partitions: Vec<(String, i32)> = checkpoints
        .iter()
        .map(|c| (c.topic.clone(), c.partition))
        .collect();
    let committed: TargetOffsets = target
        .committed(client, group, &partitions)
        .await?
        .into_iter()
        .map(|c| ((c.topic, c.partition), c.offset))
        .collect();
    let refs: Vec<&Checkpoint> = checkpoints.iter().collect();
    let plan = plan_group_sync(&state, &committed, &refs);
    Ok(GroupSync {
        state,
        committed,
        plan,
    })
}

/// Commits a planned sync; returns how many partitions were committed.
pub async fn apply(
    target: &Cluster,
    client: &Arc<BaseConsumer>,
    group: &str,
    plan: &SyncPlan,
) -> Result<usize, KafkaError> {
    match plan {
        SyncPlan::Commit(offsets) => {
            target.commit(client, group, offsets).await?;
            Ok(offsets.len())
        }
        SyncPlan::SkipActive | SyncPlan::UpToDate => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
