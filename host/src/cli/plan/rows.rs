//! What `plan` shows for a flow: a row per source topic with its decision, the groups
//! checkpointed, the topic ACLs to sync, and what a candidate would change.

use crate::flow::discovery::rules::{Action, Decided, Decision, Plan, Problem, SkipReason};
use crate::kafka::TopicPartitions;
use crate::kafka::acls::AclBinding;
use serde::Serialize;
use std::collections::BTreeMap;

/// What is done about one source topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopicRow {
    /// The source topic.
    pub source: String,
    /// Its partitions.
    pub partitions: i32,
    /// The target topic the policy names (also for a skipped topic, when it names one).
    pub target: Option<String>,
    /// The target topic's partitions, if it exists.
    pub target_partitions: Option<i32>,
    /// `create`, `grow`, `in sync` or `skip`.
    pub action: &'static str,
    /// Why it is skipped, or a remark.
    pub reason: Option<String>,
}

impl TopicRow {
    /// Whether the topic is mirrored (created, grown or in sync).
    pub fn mirrored(&self) -> bool {
        self.action != "skip"
    }
}

/// A consumer group that would be checkpointed, with its partitions on mirrored topics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupRow {
    /// The group.
    pub group: String,
    /// Its committed partitions on mirrored topics.
    pub partitions: usize,
}

/// A flow's plan.
#[derive(Debug, Clone, Serialize)]
pub struct FlowPlan {
    /// `source->target`.
    pub flow: String,
    /// Every source topic, by name.
    pub topics: Vec<TopicRow>,
    /// Groups checkpointed (the group filter accepts them and they have committed offsets
    /// on mirrored topics); `None` when checkpoints are off.
    pub checkpointed_groups: Option<Vec<GroupRow>>,
    /// Accepted groups with no committed offset on a mirrored topic (nothing to
    /// checkpoint yet).
    pub groups_without_offsets: Vec<String>,
    /// Groups the group filter rejects.
    pub filtered_groups: usize,
    /// What could not be read (a cluster unreachable, a plugin failing).
    pub errors: Vec<String>,
    /// The topic ACLs its ACL sync would change; `None` when ACL sync is off.
    pub acls: Option<AclRows>,
    /// Its record-transform chain, in order: each link's plugin and configuration
    /// (`KEY=VALUE, ...`).
    pub transforms: Vec<(String, String)>,
    /// What happens to a record a transform fails on (`pause` or `skip`).
    pub on_transform_error: String,
    /// Against the candidate: what a reload would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<Changes>,
}

/// The topic ACLs a flow's ACL sync would change on the target.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AclRows {
    /// Bindings it would create.
    pub create: Vec<AclBinding>,
    /// Bindings it would delete (only with `sync_topic_acls_delete`).
    pub delete: Vec<AclBinding>,
    /// Why they could not be planned (all or some), e.g. a cluster serves no ACLs.
    pub note: Option<String>,
}

/// What moving from one plan to another changes for mirrored topics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    /// (source topic, target now, target with the candidate).
    pub renamed: Vec<(String, String, String)>,
    /// (source topic, its target now (kept on the target cluster), why the candidate
    /// skips it).
    pub dropped: Vec<(String, String, String)>,
    /// (source topic, target with the candidate).
    pub added: Vec<(String, String)>,
}

impl Changes {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.renamed.is_empty() && self.dropped.is_empty() && self.added.is_empty()
    }
}

/// The rows of a pass: every source topic with its decision, the plan's action for it,
/// and the problems that keep it from being mirrored.
pub fn rows(
    source: &TopicPartitions,
    target: &TopicPartitions,
    decided: &Decided,
    plan: &Plan,
) -> Vec<TopicRow> {
    let failed: BTreeMap<&str, String> = decided
        .failed
        .iter()
        .map(|(t, e)| (t.as_str(), e.to_string()))
        .collect();
    let mut collisions: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in &plan.problems {
        if let Problem::Collision { sources, .. } = p {
            for s in sources {
                let others = sources.iter().filter(|o| *o != s).map(String::as_str);
                collisions.entry(s.as_str()).or_default().extend(others);
            }
        }
    }
    let mut out = Vec::new();
    for (topic, &partitions) in source {
        let mut row = TopicRow {
            source: topic.clone(),
            partitions,
            target: None,
            target_partitions: None,
            action: "skip",
            reason: None,
        };
        match decided.decisions.get(topic) {
            None => {
                row.reason = Some(match failed.get(topic.as_str()) {
                    Some(e) => format!("plugin failed: {e}"),
                    None => "undecided".into(),
                })
            }
            Some(Decision::Skip(why)) => {
                row.reason = Some(match why {
                    SkipReason::Filtered => "filtered".into(),
                    SkipReason::Internal => "internal".into(),
                    SkipReason::Cycle => "cycle".into(),
                    SkipReason::InvalidName(why) => format!("bad policy answer: {why}"),
                })
            }
            Some(Decision::Mirror(name)) => {
                row.target = Some(name.clone());
                row.target_partitions = target.get(name).copied();
                if let Some(others) = collisions.get(topic.as_str()) {
                    row.reason = Some(format!("collision: {} map there too", others.join(", ")));
                } else {
                    row.action = "in sync";
                    for a in &plan.actions {
                        match a {
                            Action::CreateTopic { source, .. } if source == topic => {
                                row.action = "create";
                            }
                            Action::AddPartitions { source, .. } if source == topic => {
                                row.action = "grow";
                            }
                            _ => {}
                        }
                    }
                    if row.target_partitions.is_some_and(|t| t > partitions) {
                        row.reason = Some("the target has more partitions (kept)".into());
                    }
                }
            }
        }
        out.push(row);
    }
    out
}

/// What moving from `now` to `candidate` changes, topic by topic.
pub fn changes(now: &[TopicRow], candidate: &[TopicRow]) -> Changes {
    let by_name: BTreeMap<&str, &TopicRow> =
        candidate.iter().map(|r| (r.source.as_str(), r)).collect();
    let mut out = Changes::default();
    for row in now {
        let Some(next) = by_name.get(row.source.as_str()) else {
            continue;
        };
        match (row.mirrored(), next.mirrored()) {
            (true, true) if row.target != next.target => out.renamed.push((
                row.source.clone(),
                row.target.clone().unwrap_or_default(),
                next.target.clone().unwrap_or_default(),
            )),
            (true, false) => out.dropped.push((
                row.source.clone(),
                row.target.clone().unwrap_or_default(),
                next.reason.clone().unwrap_or_default(),
            )),
            (false, true) => out
                .added
                .push((row.source.clone(), next.target.clone().unwrap_or_default())),
            _ => {}
        }
    }
    out
}
