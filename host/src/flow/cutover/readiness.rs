//! Whether a consumer group is ready to fail over, per partition it reads, as pure
//! functions over what was read from both clusters: where its offset lands on the target
//! (exactly, or approximately with how many records it re-reads), the unmirrored tail it
//! would lose, whether it is active on the target, and whether the principals that read
//! the source topic may READ the target topic.

use crate::flow::offset_syncs::store::OffsetSyncStore;
use crate::kafka::acls::{AclBinding, AclOperation, AclPermission, PatternType};
use std::collections::BTreeSet;

/// Where a group's source offset lands on the target.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Placement {
    /// Exactly: the target offset of the next record the group has not read.
    Exact {
        /// The target offset.
        offset: i64,
    },
    /// Not exactly (a sync lost, or past the newest sync): an offset at or before the
    /// exact one, so nothing is skipped.
    Approximate {
        /// The target offset.
        offset: i64,
        /// Records the group reads again there (`None`: unknown, MM2's older syncs).
        rereads: Option<i64>,
    },
    /// No offset sync at or before the group's offset: it cannot be translated.
    Unplaced,
}

impl Placement {
    /// The target offset, when there is one.
    pub fn offset(&self) -> Option<i64> {
        match self {
            Placement::Exact { offset } | Placement::Approximate { offset, .. } => Some(*offset),
            Placement::Unplaced => None,
        }
    }
}

/// Where source offset `g` of `topic`/`partition` lands on the target, never past `bound`
/// (the target partition's end, when known): exact where the offset syncs place it (a sync
/// names `g`, it lies within a run of records or in the gap after one, or right after the
/// newest record they place), approximate elsewhere.
pub fn place(
    store: &OffsetSyncStore,
    topic: &str,
    partition: i32,
    g: i64,
    bound: Option<i64>,
) -> Placement {
    let capped = |o: i64| bound.map_or(o, |b| o.min(b));
    match store.translate_rereads(topic, partition, g) {
        Some((offset, Some(0))) => Placement::Exact {
            offset: capped(offset),
        },
        Some((offset, rereads)) => Placement::Approximate {
            offset: capped(offset),
            rereads,
        },
        None => Placement::Unplaced,
    }
}

/// Whether the principals that may read the source topic may read the target topic.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ReadAccess {
    /// Every one of them may.
    Granted,
    /// These may not.
    Missing {
        /// The principals.
        principals: Vec<String>,
    },
    /// The source grants no one READ on the topic by ACL: nothing to compare.
    NoSourceAcls,
    /// A cluster serves no ACLs, or they could not be read (why).
    Unknown {
        /// Why.
        why: String,
    },
}

fn matches(b: &AclBinding, topic: &str) -> bool {
    match b.pattern {
        PatternType::Literal => b.resource_name == topic || b.resource_name == "*",
        PatternType::Prefixed => topic.starts_with(&b.resource_name),
    }
}

fn reads(b: &AclBinding) -> bool {
    matches!(b.operation, AclOperation::Read | AclOperation::All)
}

/// Whether `principal` may READ `topic` by `acls` from any host: an ALLOW for it (or for
/// `User:*`) and no DENY.
fn may_read(acls: &[AclBinding], principal: &str, topic: &str) -> bool {
    let applies = |b: &&AclBinding| {
        reads(b)
            && matches(b, topic)
            && (b.principal == principal || b.principal == "User:*")
            && b.host == "*"
    };
    let denied = acls
        .iter()
        .filter(applies)
        .any(|b| b.permission == AclPermission::Deny);
    !denied
        && acls
            .iter()
            .filter(applies)
            .any(|b| b.permission == AclPermission::Allow)
}

/// [`ReadAccess`] of the principals the source's ACLs allow to READ `source_topic`, on
/// `target_topic` by the target's ACLs.
pub fn read_access(
    source: &[AclBinding],
    target: &[AclBinding],
    source_topic: &str,
    target_topic: &str,
) -> ReadAccess {
    let principals: BTreeSet<&str> = source
        .iter()
        .filter(|b| b.permission == AclPermission::Allow && reads(b) && matches(b, source_topic))
        .map(|b| b.principal.as_str())
        .collect();
    if principals.is_empty() {
        return ReadAccess::NoSourceAcls;
    }
    let missing: Vec<String> = principals
        .into_iter()
        .filter(|p| !may_read(target, p, target_topic))
        .map(String::from)
        .collect();
    if missing.is_empty() {
        ReadAccess::Granted
    } else {
        ReadAccess::Missing {
            principals: missing,
        }
    }
}

/// One partition a group reads, as a failover would move it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartitionReadiness {
    /// The source topic.
    pub topic: String,
    /// Its name on the target.
    pub target_topic: String,
    /// The partition.
    pub partition: i32,
    /// The group's committed offset on the source (or the last checkpoint's, when the
    /// source cannot be read).
    pub source_offset: i64,
    /// Where it lands on the target.
    pub placement: Placement,
    /// Records after the group's position the target does not hold (`None`: unknown, the
    /// source cannot be read): the group would never read them after the failover.
    pub tail: Option<i64>,
    /// How old the oldest of them is, in seconds.
    pub tail_seconds: Option<i64>,
    /// READ on the target topic.
    pub access: ReadAccess,
}

/// The records after source offset `g` the target does not hold: from the later of `g`
/// and the mirrored position to the source's end.
pub fn tail(g: i64, mirrored: Option<i64>, end: Option<i64>) -> Option<i64> {
    let (m, e) = (mirrored?, end?);
    Some((e - g.max(m)).max(0))
}

/// One group's readiness.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GroupReadiness {
    /// The group.
    pub group: String,
    /// The group's state on the target when it has members there (its consumers run
    /// there already: its offsets cannot be committed).
    pub active_on_target: Option<String>,
    /// Whether a failover committed its offsets already (the control topic says so).
    pub failed_over: bool,
    /// Its partitions, in (target topic, partition) order.
    pub partitions: Vec<PartitionReadiness>,
}

impl GroupReadiness {
    /// What keeps it from being ready, one line each (none: ready).
    pub fn blockers(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(state) = &self.active_on_target {
            out.push(format!(
                "active on the target ({state}): stop its consumers there first"
            ));
        }
        let unplaced = self
            .partitions
            .iter()
            .filter(|p| p.placement == Placement::Unplaced)
            .count();
        if unplaced > 0 {
            out.push(format!(
                "{unplaced} partition(s) without an offset sync to translate with"
            ));
        }
        let tail: i64 = self.partitions.iter().filter_map(|p| p.tail).sum();
        if tail > 0 {
            out.push(format!(
                "{tail} record(s) not mirrored yet behind its position"
            ));
        }
        let denied: BTreeSet<&str> = self
            .partitions
            .iter()
            .flat_map(|p| match &p.access {
                ReadAccess::Missing { principals } => {
                    principals.iter().map(String::as_str).collect()
                }
                _ => Vec::new(),
            })
            .collect();
        if !denied.is_empty() {
            let names: Vec<&str> = denied.into_iter().collect();
            out.push(format!(
                "no READ on a target topic for {}",
                names.join(", ")
            ));
        }
        out
    }

    /// Whether nothing keeps it from failing over.
    pub fn ready(&self) -> bool {
        self.blockers().is_empty()
    }

    /// Records it would re-read on the target, where known.
    pub fn rereads(&self) -> i64 {
        self.partitions
            .iter()
            .filter_map(|p| match p.placement {
                Placement::Approximate { rereads, .. } => rereads,
                _ => None,
            })
            .sum()
    }

    /// How bad it is, larger first: blockers, then the tail, then the re-reads.
    fn severity(&self) -> (usize, i64, i64) {
        let tail = self.partitions.iter().filter_map(|p| p.tail).sum();
        (self.blockers().len(), tail, self.rereads())
    }
}

/// Orders `groups` worst first (then by name).
pub fn worst_first(groups: &mut [GroupReadiness]) {
    groups.sort_by(|a, b| {
        b.severity()
            .cmp(&a.severity())
            .then_with(|| a.group.cmp(&b.group))
    });
}

#[cfg(test)]
mod tests;
