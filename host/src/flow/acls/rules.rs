//! MM2's topic-ACL rules (`MirrorSourceConnector.syncTopicAcls`) and kmirror's opt-in
//! deletion, as pure functions over plain bindings.

use crate::flow::Routes;
use crate::flow::discovery::rules::Decision;
use crate::kafka::acls::{AclBinding, AclOperation, AclPermission, PatternType};
use std::collections::{BTreeMap, BTreeSet};

/// Whether MM2 syncs a source binding at all, before its topic is asked about: a LITERAL
/// pattern (MM2 filters `patternType() == LITERAL`; PREFIXED bindings are never synced) and
/// not ALLOW WRITE (`shouldReplicateAcl`: only the mirror writes to a mirrored topic). DENY
/// bindings are synced, DENY WRITE included.
pub fn eligible(b: &AclBinding) -> bool {
    b.pattern == PatternType::Literal
        && !(b.permission == AclPermission::Allow && b.operation == AclOperation::Write)
}

/// The binding the target gets for source binding `b` on the target topic `target_topic`
/// (MM2's `targetAclBinding`): ALLOW ALL is downgraded to ALLOW READ, so consumers can read
/// the mirror and nothing else writes to it; principal, host and every other operation and
/// permission (DENY ALL included) are kept.
pub fn target_binding(b: &AclBinding, target_topic: &str) -> AclBinding {
    let operation = match (b.permission, b.operation) {
        (AclPermission::Allow, AclOperation::All) => AclOperation::Read,
        (_, op) => op,
    };
    AclBinding {
        resource_name: target_topic.to_string(),
        pattern: PatternType::Literal,
        operation,
        ..b.clone()
    }
}

/// The bindings the target should have: each [`eligible`] source binding whose topic the
/// flow mirrors (`decisions`, the flow's discovery rules: the topic filter, heartbeats,
/// internal topics and cycles, as MM2's `shouldReplicateTopic`), renamed through the
/// replication policy. A name with no decision (a plugin failed on it) gives nothing.
pub fn desired(
    source: &[AclBinding],
    decisions: &BTreeMap<String, Decision>,
) -> BTreeSet<AclBinding> {
    source
        .iter()
        .filter(|b| eligible(b))
        .filter_map(|b| match decisions.get(&b.resource_name) {
            Some(Decision::Mirror(target)) => Some(target_binding(b, target)),
            _ => None,
        })
        .collect()
}

/// The target topics whose bindings deletion may touch: those discovery mirrors (`routes`)
/// under the name the plugins give now (`decisions`), so a topic a plugin failed on, or
/// whose name is changing, is left alone.
pub fn mirrored_targets(
    routes: &Routes,
    decisions: &BTreeMap<String, Decision>,
) -> BTreeSet<String> {
    routes
        .iter()
        .filter(|(source, route)| {
            matches!(decisions.get(*source), Some(Decision::Mirror(t)) if *t == route.target)
        })
        .map(|(_, route)| route.target.clone())
        .collect()
}

/// Whether target binding `b` is one kmirror counts as previously synced: one the rules
/// could have produced for a topic of `mirrored` — LITERAL, on a mirrored target topic,
/// ALLOW, and an operation other than WRITE and ALL (which the rules never give). DENY
/// bindings never count: deleting one could only widen access.
pub fn previously_synced(b: &AclBinding, mirrored: &BTreeSet<String>) -> bool {
    b.pattern == PatternType::Literal
        && b.permission == AclPermission::Allow
        && !matches!(b.operation, AclOperation::Write | AclOperation::All)
        && mirrored.contains(&b.resource_name)
}

/// What one pass changes on the target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclPlan {
    /// Desired bindings the target lacks.
    pub create: Vec<AclBinding>,
    /// Previously synced bindings no current source binding maps to (only with deletion on).
    pub delete: Vec<AclBinding>,
}

impl AclPlan {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.delete.is_empty()
    }
}

/// Compares `desired` with the target's bindings: what is missing is created; with
/// deletion on (`synced`: the ledger's bindings, [`super::ledger`]), every binding the flow
/// created (in `synced`) that still has the [`previously_synced`] shape, on a topic of
/// `mirrored`, and is no longer desired is deleted. Nothing else is ever deleted.
pub fn plan(
    desired: &BTreeSet<AclBinding>,
    target: &[AclBinding],
    mirrored: &BTreeSet<String>,
    synced: Option<&BTreeSet<AclBinding>>,
) -> AclPlan {
    let present: BTreeSet<&AclBinding> = target.iter().collect();
    let create = desired
        .iter()
        .filter(|b| !present.contains(b))
        .cloned()
        .collect();
    let delete = match synced {
        Some(synced) => {
            let gone: BTreeSet<&AclBinding> = present
                .into_iter()
                .filter(|b| {
                    synced.contains(*b) && previously_synced(b, mirrored) && !desired.contains(*b)
                })
                .collect();
            gone.into_iter().cloned().collect()
        }
        None => Vec::new(),
    };
    AclPlan { create, delete }
}

#[cfg(test)]
mod tests;
