//! Discovery's rules as pure functions: which source topics are mirrored under which
//! names ([`decide`]), and what to do about it given both clusters' snapshots ([`plan`]).

use crate::flow::cutover::control::TopicFailedBack;
use crate::flow::plugins::FlowNames;
use crate::flow::{Route, Routes};
use crate::kafka::invalid_topic_name;
use crate::policy::{FlowRoles, PluginError, ReplicationPolicy, TopicFilter};
use std::collections::{BTreeMap, BTreeSet};

/// Topic name -> partition count, as a cluster lists them.
pub type Snapshot = crate::kafka::TopicPartitions;

/// Whether a source topic is mirrored, and as what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Mirrored to this target topic.
    Mirror(String),
    /// Not mirrored, and why.
    Skip(SkipReason),
}

/// Why a topic is not mirrored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// The replication policy's name for it is not usable, and why.
    InvalidName(String),
    /// The policy calls it internal.
    Internal,
    /// It came from the target cluster (directly or through hops).
    Cycle,
    /// The topic filter rejected it.
    Filtered,
}

/// MM2's rule: mirror `topic` when (the filter accepts it, or it is a heartbeats topic),
/// it is not internal, and it is not a cycle (`topic-source` equals the target alias at
/// any upstream hop). `accepted` is the topic filter's answer (asked in batches).
pub fn decide(
    topic: &str,
    accepted: bool,
    policy: &dyn ReplicationPolicy,
    source_alias: &str,
    target_alias: &str,
) -> Result<Decision, PluginError> {
    if policy.is_internal_topic(topic)? {
        return Ok(Decision::Skip(SkipReason::Internal));
    }
    if is_cycle(topic, policy, target_alias)? {
        return Ok(Decision::Skip(SkipReason::Cycle));
    }
    if !accepted && !policy.is_heartbeats_topic(topic)? {
        return Ok(Decision::Skip(SkipReason::Filtered));
    }
    Ok(Decision::Mirror(
        policy.format_remote_topic(source_alias, topic)?,
    ))
}

/// Whether `topic` came from `target_alias`, following upstream hops (MM2's `isCycle`).
pub fn is_cycle(
    topic: &str,
    policy: &dyn ReplicationPolicy,
    target_alias: &str,
) -> Result<bool, PluginError> {
    let mut current = topic.to_string();
    // A policy whose upstream names never end would loop; no real name has more hops
    // than characters.
    for _ in 0..=topic.len() {
        match policy.topic_source(&current)? {
            None => return Ok(false),
            Some(source) if source == target_alias => return Ok(true),
            Some(_) => {}
        }
        match policy.upstream_topic(&current)? {
            Some(up) if up != current => current = up,
            _ => return Ok(false),
        }
    }
    Ok(false)
}

/// What deciding a batch of new topics gave.
#[derive(Debug, Default)]
pub struct Decided {
    /// The topics decided.
    pub decisions: BTreeMap<String, Decision>,
    /// Topics a plugin call failed for (a trap, a timeout, an error): undecided, so not
    /// mirrored, and asked again later. One topic's failure never decides the others.
    pub failed: Vec<(String, PluginError)>,
}

/// Decides every name of `topics`, with one batched filter call (names one by one only if
/// the batch fails). A name the policy gives that is not a valid Kafka topic name, or that
/// is one of the flow's `reserved` internal topics, skips that topic.
pub fn decide_all(
    topics: &[String],
    filter: &dyn TopicFilter,
    policy: &dyn ReplicationPolicy,
    source_alias: &str,
    target_alias: &str,
    reserved: &BTreeSet<String>,
) -> Decided {
    let accepted: Vec<Result<bool, PluginError>> = match filter.should_replicate_topics(topics) {
        Ok(answers) => answers.into_iter().map(Ok).collect(),
        Err(_) => topics
            .iter()
            .map(|t| filter.should_replicate_topic(t))
            .collect(),
    };
    let mut out = Decided::default();
    for (t, ok) in topics.iter().zip(accepted) {
        match ok.and_then(|ok| decide(t, ok, policy, source_alias, target_alias)) {
            Ok(Decision::Mirror(name)) => {
                let why = invalid_topic_name(&name).or_else(|| {
                    reserved
                        .contains(&name)
                        .then(|| "it is one of the flow's internal topics".to_string())
                });
                let decision = match why {
                    None => Decision::Mirror(name),
                    Some(why) => Decision::Skip(SkipReason::InvalidName(format!(
                        "format-remote-topic gave {}: {why}",
                        shown(&name)
                    ))),
                };
                out.decisions.insert(t.clone(), decision);
            }
            Ok(decision) => {
                out.decisions.insert(t.clone(), decision);
            }
            Err(e) => out.failed.push((t.clone(), e)),
        }
    }
    out
}

/// A name for messages: quoted, cut to 80 characters.
fn shown(name: &str) -> String {
    if name.chars().count() > 80 {
        let head: String = name.chars().take(80).collect();
        format!("`{head}`... ({} bytes)", name.len())
    } else {
        format!("`{name}`")
    }
}

/// [`decide_all`] over a flow's roles: the batch rule discovery hands the plugin facade.
pub fn decide_with(
    roles: &FlowRoles,
    names: &FlowNames,
    topics: &[String],
) -> Result<Decided, PluginError> {
    Ok(decide_all(
        topics,
        &*roles.topic_filter,
        &*roles.replication_policy,
        &names.source,
        &names.target,
        &names.reserved,
    ))
}

/// One thing to do on the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create `target` with `partitions` partitions, for source topic `source`.
    CreateTopic {
        /// The source topic.
        source: String,
        /// The target topic.
        target: String,
        /// Its partition count.
        partitions: i32,
    },
    /// Raise `target`'s partition count to `to` (the source grew).
    AddPartitions {
        /// The source topic.
        source: String,
        /// The target topic.
        target: String,
        /// The target's current count.
        from: i32,
        /// The source's count.
        to: i32,
    },
}

/// Something to report, not to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The replication policy named a source topic unusably: it is not mirrored.
    RefusedName {
        /// The source topic.
        source: String,
        /// What the policy said and why it is refused.
        reason: String,
    },
    /// A plugin call failed deciding a source topic (trap, timeout, error): not mirrored
    /// for now, asked again later.
    Undecided {
        /// The source topic.
        source: String,
        /// The plugin's error.
        error: String,
    },
    /// Several source topics map to one target name: none of them is mirrored.
    Collision {
        /// The target name.
        target: String,
        /// The source topics.
        sources: Vec<String>,
    },
    /// A previously mirrored source topic is gone; its target is kept.
    SourceVanished {
        /// The source topic.
        source: String,
        /// Its target topic.
        target: String,
    },
    /// A source topic has fewer partitions than before; the target keeps its partitions.
    SourceShrank {
        /// The source topic.
        source: String,
        /// The partition count last seen.
        from: i32,
        /// The partition count now.
        to: i32,
    },
    /// The target topic has more partitions than the source (kept; never shrunk).
    TargetLarger {
        /// The target topic.
        target: String,
        /// Source partitions.
        source_partitions: i32,
        /// Target partitions.
        target_partitions: i32,
    },
    /// Creating the target topic failed: the source topic is not mirrored until it works.
    CreateFailed {
        /// The source topic.
        source: String,
        /// The target topic.
        target: String,
        /// Why.
        error: String,
    },
    /// Growing the target topic failed: only the partitions it has are mirrored.
    GrowFailed {
        /// The target topic.
        target: String,
        /// Its partitions.
        from: i32,
        /// The source's.
        to: i32,
        /// Why.
        error: String,
    },
    /// The source topic's configs could not be read or filtered: its target topic is not
    /// created without them (a compacted topic would become a deleting one).
    ConfigsUnreadable {
        /// The source topic.
        source: String,
        /// Why.
        error: String,
    },
    /// Syncing an existing target topic's configs failed.
    ConfigSyncFailed {
        /// The target topic.
        target: String,
        /// Why.
        error: String,
    },
    /// A failback entry (`kmirror failback`) this flow cannot follow: the topic is not
    /// mirrored home.
    FailbackRefused {
        /// The source topic.
        source: String,
        /// The target topic the entry names.
        target: String,
        /// Why.
        why: String,
    },
    /// Another flow of this daemon mirrors into the same target topic: neither does.
    OtherFlow {
        /// The source topic.
        source: String,
        /// The target topic.
        target: String,
        /// The other flows.
        flows: Vec<String>,
    },
}

/// Whether a problem makes the flow degraded (something it should do does not happen), not
/// only something to report.
pub fn degrades(problem: &Problem) -> bool {
    matches!(
        problem,
        Problem::CreateFailed { .. }
            | Problem::GrowFailed { .. }
            | Problem::ConfigsUnreadable { .. }
            | Problem::ConfigSyncFailed { .. }
            | Problem::OtherFlow { .. }
            | Problem::Collision { .. }
            | Problem::FailbackRefused { .. }
    )
}

/// Whether `problem` is about source topics `withheld` says are left out (failed over) or
/// their target topics `targets` only: it is then not reported.
pub fn concerns(
    problem: &Problem,
    withheld: &dyn Fn(&str) -> bool,
    targets: &BTreeSet<String>,
) -> bool {
    match problem {
        Problem::RefusedName { source, .. }
        | Problem::Undecided { source, .. }
        | Problem::SourceVanished { source, .. }
        | Problem::SourceShrank { source, .. }
        | Problem::CreateFailed { source, .. }
        | Problem::ConfigsUnreadable { source, .. }
        | Problem::FailbackRefused { source, .. }
        | Problem::OtherFlow { source, .. } => withheld(source),
        Problem::Collision { sources, .. } => sources.iter().all(|s| withheld(s)),
        Problem::TargetLarger { target, .. }
        | Problem::GrowFailed { target, .. }
        | Problem::ConfigSyncFailed { target, .. } => targets.contains(target),
    }
}

/// What a discovery pass decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Target changes, in order.
    pub actions: Vec<Action>,
    /// What is mirrored once the actions are done.
    pub mirror: Routes,
    /// What to report.
    pub problems: Vec<Problem>,
}

/// Plans a pass from the source and target snapshots, the decisions for the source
/// topics, and what was mirrored on the previous pass.
pub fn plan(
    source: &Snapshot,
    target: &Snapshot,
    decisions: &BTreeMap<String, Decision>,
    previous: &Routes,
) -> Plan {
    let mut plan = Plan::default();
    let mut by_target: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (topic, decision) in decisions {
        if let (Decision::Skip(SkipReason::InvalidName(reason)), true) =
            (decision, source.contains_key(topic))
        {
            plan.problems.push(Problem::RefusedName {
                source: topic.clone(),
                reason: reason.clone(),
            });
        }
        if let (Decision::Mirror(t), true) = (decision, source.contains_key(topic)) {
            by_target
                .entry(t.as_str())
                .or_default()
                .push(topic.as_str());
        }
    }
    for (target_name, sources) in by_target {
        if sources.len() > 1 {
            plan.problems.push(Problem::Collision {
                target: target_name.to_string(),
                sources: sources.iter().map(|s| s.to_string()).collect(),
            });
            continue;
        }
        let topic = sources[0];
        let partitions = source[topic];
        match target.get(target_name) {
            None => plan.actions.push(Action::CreateTopic {
                source: topic.to_string(),
                target: target_name.to_string(),
                partitions,
            }),
            Some(&have) if have < partitions => plan.actions.push(Action::AddPartitions {
                source: topic.to_string(),
                target: target_name.to_string(),
                from: have,
                to: partitions,
            }),
            Some(&have) if have > partitions => plan.problems.push(Problem::TargetLarger {
                target: target_name.to_string(),
                source_partitions: partitions,
                target_partitions: have,
            }),
            Some(_) => {}
        }
        if let Some(before) = previous.get(topic).filter(|r| r.partitions > partitions) {
            plan.problems.push(Problem::SourceShrank {
                source: topic.to_string(),
                from: before.partitions,
                to: partitions,
            });
        }
        plan.mirror
            .insert(topic.to_string(), Route::new(target_name, partitions));
    }
    let now: BTreeSet<&String> = source.keys().collect();
    for (topic, route) in previous {
        if !now.contains(topic) {
            plan.problems.push(Problem::SourceVanished {
                source: topic.clone(),
                target: route.target.clone(),
            });
        }
    }
    plan
}

/// The plan of an instance that does not lead the flow: it changes nothing on the target
/// (the leader does), so it routes only what the target has: a topic still to be created is
/// routed with no partition (its replication tasks subscribe to it now, so their group
/// rebalance overlaps the leader's election and the creation, and its partitions flow as
/// soon as a pass finds the target topic), a topic still to be grown keeps the target's
/// partitions.
pub fn without_changes(plan: &mut Plan) {
    for action in std::mem::take(&mut plan.actions) {
        match action {
            Action::CreateTopic { source, .. } => {
                if let Some(route) = plan.mirror.get_mut(&source) {
                    route.partitions = 0;
                }
            }
            Action::AddPartitions { source, from, .. } => {
                if let Some(route) = plan.mirror.get_mut(&source) {
                    route.partitions = from;
                }
            }
        }
    }
}

/// A problem in words, for logs and `/status`.
pub fn describe(problem: &Problem) -> String {
    match problem {
        Problem::RefusedName { source, reason } => {
            format!("source topic {source} is not mirrored: the replication policy's {reason}")
        }
        Problem::Undecided { source, error } => {
            format!(
                "source topic {source} is not mirrored for now (asked again in a minute): {error}"
            )
        }
        Problem::Collision { target, sources } => {
            format!(
                "source topics {} all map to target topic {target}; none of them is mirrored",
                sources.join(", ")
            )
        }
        Problem::SourceVanished { source, target } => {
            format!("source topic {source} vanished; target topic {target} is kept")
        }
        Problem::SourceShrank { source, from, to } => {
            format!(
                "source topic {source} shrank from {from} to {to} partitions; the target keeps its partitions"
            )
        }
        Problem::TargetLarger {
            target,
            source_partitions,
            target_partitions,
        } => format!(
            "target topic {target} has {target_partitions} partitions, more than the source's {source_partitions}"
        ),
        Problem::CreateFailed {
            source,
            target,
            error,
        } => format!(
            "source topic {source} is not mirrored: creating target topic {target} failed (tried again at the next pass): {error}"
        ),
        Problem::GrowFailed {
            target,
            from,
            to,
            error,
        } => format!(
            "target topic {target} could not be grown from {from} to {to} partitions (tried again at the next pass; partitions {from}.. are not mirrored meanwhile): {error}"
        ),
        Problem::ConfigsUnreadable { source, error } => format!(
            "source topic {source} is not mirrored yet: its configs could not be read or filtered, and its target topic is not created without them (tried again at the next pass): {error}"
        ),
        Problem::ConfigSyncFailed { target, error } => {
            format!("the configs of target topic {target} could not be synced: {error}")
        }
        Problem::FailbackRefused {
            source,
            target,
            why,
        } => format!("source topic {source} is not failed back into {target}: {why}"),
        Problem::OtherFlow {
            source,
            target,
            flows,
        } => format!(
            "source topic {source} is not mirrored: flow(s) {} also mirror into target topic {target}, and two sources in one topic would mix their records and offsets",
            flows.join(", ")
        ),
    }
}

/// The decisions with the topics failed back (`kmirror failback`) mirrored into the topic
/// each was mirrored from, though the flow's topic filter or replication policy skip it
/// (it came from this flow's target); borrowed when there is none. An entry is followed
/// only when it is sound — its target topic exists on the target and is a valid name, the
/// flow does not mirror the source topic elsewhere already, its start covers every
/// partition with an offset — and otherwise refused with a problem (a foreign or damaged
/// record never moves a mirrored topic, creates a topic, or copies a history again).
pub fn with_failed_back<'a>(
    decisions: &'a BTreeMap<String, Decision>,
    failed_back: &BTreeMap<String, TopicFailedBack>,
    (source, target): (&Snapshot, &Snapshot),
    problems: &mut Vec<Problem>,
) -> std::borrow::Cow<'a, BTreeMap<String, Decision>> {
    if failed_back.is_empty() {
        return std::borrow::Cow::Borrowed(decisions);
    }
    let mut all = decisions.clone();
    for (topic, back) in failed_back {
        let Some(partitions) = source.get(topic) else {
            continue; // not on the source (now): nothing to mirror
        };
        let why = match decisions.get(topic) {
            Some(Decision::Mirror(t)) if *t != back.target_topic => {
                Some(format!("the flow mirrors it to {t} already"))
            }
            Some(Decision::Skip(SkipReason::Internal | SkipReason::InvalidName(_))) => {
                Some("the replication policy calls it internal or names it unusably".into())
            }
            _ if invalid_topic_name(&back.target_topic).is_some() => {
                Some("that is not a valid topic name".into())
            }
            _ if !target.contains_key(&back.target_topic) => {
                Some("it does not exist on the target (a failback never creates it)".into())
            }
            _ if (0..*partitions).any(|p| back.from.get(&p).is_none_or(|at| *at < 0)) => {
                Some("its entry does not say where every partition starts".into())
            }
            _ => None,
        };
        match why {
            Some(why) => problems.push(Problem::FailbackRefused {
                source: topic.clone(),
                target: back.target_topic.clone(),
                why,
            }),
            None => {
                all.insert(topic.clone(), Decision::Mirror(back.target_topic.clone()));
            }
        }
    }
    std::borrow::Cow::Owned(all)
}

/// A failed-back topic's route starts each partition without stored progress where the
/// failover left it, not where `start_offset` says (the history before it is the target
/// topic's own).
pub fn start_failed_back(mirror: &mut Routes, failed_back: &BTreeMap<String, TopicFailedBack>) {
    for (topic, back) in failed_back {
        if let Some(route) = mirror.get_mut(topic)
            && route.target == back.target_topic
        {
            route.start = Some(std::sync::Arc::new(back.from.clone()));
        }
    }
}

#[cfg(test)]
mod tests;
