//! A flow's status as `/status` shows it, and the health derived from it: alive (its loops
//! turn), ready (connected, first discovery pass done) and degraded (with the reasons).

use crate::flow::Routes;
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// The current time in [`Millis`].
pub fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Why a partition stopped at a record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Paused {
    /// The source offset of the record the target does not take.
    pub offset: i64,
    /// Why.
    pub reason: String,
    /// Since when.
    pub since_ms: Millis,
}

/// One source partition as this instance mirrors it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartitionStatus {
    /// The next source offset to mirror (what is stored as progress once acked).
    pub position: Option<i64>,
    /// The source partition's end, as last fetched.
    pub end: Option<i64>,
    /// `end - position`: records not mirrored yet.
    pub lag: Option<i64>,
    /// Records sent and not yet acked by the target.
    pub in_flight: usize,
    /// `mirroring`, `paused` (a record the target will not take), `waiting` (not routed:
    /// the target topic lacks the partition, or the topic is no longer mirrored),
    /// `retrying` (a transient refusal, tried again in a second) or `switching` (its records
    /// in flight to its previous target topic are awaited).
    pub state: &'static str,
    /// Why the partition is paused.
    pub paused: Option<Paused>,
    /// How long its progress has moved without being stored, in ms (`None`: stored).
    pub unstored_ms: Option<i64>,
}

/// What one replication task of this instance (one group member) reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemberStatus {
    /// Topic -> partition -> status, for the partitions this member owns.
    pub partitions: BTreeMap<String, BTreeMap<i32, PartitionStatus>>,
    /// How long its oldest record in flight has waited for the target, in ms.
    pub oldest_unacked_ms: Option<i64>,
    /// How many times partitions were assigned to or revoked from it.
    pub rebalances: u64,
    /// The consumer group generation it last joined in.
    pub generation: Option<i32>,
}

/// A cluster the flow could not reach.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unreachable {
    /// Since when every attempt failed.
    pub since_ms: Millis,
    /// The last error.
    pub error: String,
}

/// One instance of a flow, as its last ownership report tells.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct InstanceStatus {
    /// Its name (host, pid and a random part).
    pub instance: String,
    /// Its host.
    pub host: String,
    /// The partitions its replication tasks own.
    pub partitions: usize,
    /// Whether it leads the flow.
    pub leader: bool,
    /// Whether it is the instance answering.
    pub this: bool,
    /// How long ago its report arrived.
    pub reported_ms_ago: i64,
}

/// What one link of a record-transform chain did with one batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkTally {
    /// Records it kept unchanged.
    pub kept: u64,
    /// Records it dropped.
    pub dropped: u64,
    /// Records it rewrote.
    pub rewritten: u64,
    /// Records it failed on.
    pub failed: u64,
    /// Whether its batch call failed (the records were then asked about one by one).
    pub batch_failed: bool,
}

/// One record transform of the flow's chain, as `/status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TransformStatus {
    /// Its place in the chain (0 first).
    pub position: usize,
    /// Its plugin (the file's name, or `builtin:NAME`).
    pub name: String,
    /// Records it kept unchanged.
    pub kept: u64,
    /// Records it dropped.
    pub dropped: u64,
    /// Records it rewrote.
    pub rewritten: u64,
    /// Records it failed on (a trap, a timeout, a malformed answer).
    pub failed: u64,
    /// Batch calls that failed (their records were then asked about one by one).
    pub batch_failures: u64,
}

/// The last topic-ACL sync pass, as `/status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct AclSyncStatus {
    /// When it ran.
    pub at_ms: Millis,
    /// Bindings it created on the target.
    pub created: u64,
    /// Bindings it deleted from the target.
    pub deleted: u64,
    /// Steps that failed (retried next pass).
    pub failed: u64,
    /// The last error of the pass, or why ACL sync is off.
    pub error: Option<String>,
    /// ACL sync is off until kmirror restarts: the target does not serve ACLs.
    pub disabled: bool,
}

/// A flow's state as `/status` shows it.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FlowStatus {
    /// `starting`, `running`, `stopped` or `failed`.
    pub state: &'static str,
    /// What the last discovery pass mirrors.
    pub mirrored: Routes,
    /// Problems found by the last discovery pass (collisions, vanished or shrunk topics).
    pub problems: Vec<String>,
    /// The problems of the last discovery pass that make the flow degraded (a target topic
    /// that could not be created, grown or configured; a name collision).
    pub discovery_failures: Vec<String>,
    /// The last error, if any.
    pub last_error: Option<String>,
    /// Topic -> partition -> status, for the partitions this instance mirrors.
    pub partitions: BTreeMap<String, BTreeMap<i32, PartitionStatus>>,
    /// When the last discovery pass succeeded.
    pub last_discovery_ms: Option<Millis>,
    /// When the last checkpoint pass ran.
    pub last_checkpoint_pass_ms: Option<Millis>,
    /// When progress was last stored.
    pub last_commit_ms: Option<Millis>,
    /// Why storing progress fails, while it does.
    pub commit_failing: Option<String>,
    /// Why the replicator is restarting, while it is.
    pub replicator_restarting: Option<String>,
    /// Whether offset translation is ready (`None`: checkpoints are off).
    pub translation_ready: Option<bool>,
    /// How long the oldest record in flight has waited for the target, in ms.
    pub oldest_unacked_ms: Option<i64>,
    /// Clusters that could not be reached, by alias.
    pub unreachable: BTreeMap<String, Unreachable>,
    /// How many times partitions were assigned to or revoked from this instance.
    pub rebalances: u64,
    /// Each replication task (group member) of this instance.
    pub members: BTreeMap<u32, MemberStatus>,
    /// Whether this instance leads the flow (discovery's changes, checkpoints, group offset
    /// sync, heartbeats).
    pub leader: bool,
    /// Mirrored partitions no instance has owned for longer than two session timeouts
    /// (`topic[partition]`; judged by the leader only).
    pub unowned: Vec<String>,
    /// The flow's instances as their reports on the control topic tell (fresh ones only).
    pub instances: Vec<InstanceStatus>,
    /// The last topic-ACL sync pass (on the leader; `None` before the first).
    pub last_acl_sync: Option<AclSyncStatus>,
    /// The record-transform chain, in order: what each link did with the records of this
    /// instance.
    pub transforms: Vec<TransformStatus>,
    /// Topic -> partition -> records the source lost before this instance mirrored them
    /// (retention, `DeleteRecords`, a topic deleted and created again).
    pub source_truncated: BTreeMap<String, BTreeMap<i32, SourceTruncated>>,
    /// Source topic -> its last recreation seen (deleted and created again under its name
    /// while mirrored; on the leader).
    pub source_recreated: BTreeMap<String, SourceRecreated>,
    /// Source topic -> its failover (`kmirror failover` stopped mirroring it).
    pub failed_over: BTreeMap<String, FailedOverStatus>,
    /// Consumer group -> how a failover would place it now (the leader's last checkpoint
    /// pass).
    pub groups: BTreeMap<String, GroupStatus>,
    /// The background audit (`audit_interval`; on the leader, `None` before its first pass).
    pub audit: Option<AuditStatus>,
    /// Liveness: each loop's last turn and how often it turns.
    #[serde(skip)]
    pub loops: BTreeMap<&'static str, (Instant, Duration)>,
}

/// What the background audit found, over every pass of this leadership term.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct AuditStatus {
    /// Passes completed.
    pub passes: u64,
    /// When the last pass ended.
    pub last_pass_ms: Option<Millis>,
    /// Source records whose copy was equal.
    pub equal: u64,
    /// Source records whose copy differs (key, value, headers or timestamp).
    pub mismatched: u64,
    /// Source records whose mapped target offset holds no record.
    pub missing: u64,
    /// Target records no source record maps to.
    pub extra: u64,
    /// Source records the offset map does not place exactly (a sync lost in a crash or a
    /// handover), and source offsets skipped because the syncs kept no longer place them:
    /// not compared.
    pub unplaced: u64,
    /// Source records whose copies are gone from the target (below its log start: its
    /// retention, or DeleteRecords there): not compared.
    pub removed_on_target: u64,
    /// Target records among copies the map cannot attribute (a writer that crashed or
    /// handed over left copies the next one mirrored again): not judged.
    pub target_unplaced: u64,
    /// Mirrored topics not audited because they are compacted (on either side).
    pub compacted_topics: u64,
    /// Partition reads that failed (the partition is audited again from where it was at
    /// the next pass).
    pub failed_reads: u64,
    /// Source offsets the source no longer held when the audit reached them (retention).
    pub unreadable: u64,
    /// Source records mirrored and placed but not audited yet (the last pass's view).
    pub behind: u64,
    /// The latest differences found, newest last (at most 20).
    pub differences: Vec<String>,
}

/// How a failover would move one consumer group now, from the leader's checkpoint pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GroupStatus {
    /// Partitions of mirrored topics it committed an offset on, on the source.
    pub partitions: usize,
    /// Of those, the ones its target offset is exact for.
    pub exact: usize,
    /// The ones it is approximate for (it would re-read records).
    pub approximate: usize,
    /// Records it would re-read on the target, where known.
    pub rereads: i64,
    /// Records behind its position the offset syncs do not place yet: not mirrored, or
    /// mirrored within the last offset flush (an upper bound of the unmirrored tail).
    pub tail: i64,
    /// Whether it has members on the target (its offsets are not synced there); `None`
    /// until the group offset sync looked (it is off, or has not run yet).
    pub active_on_target: Option<bool>,
}

/// A source topic `kmirror failover` stopped mirroring.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FailedOverStatus {
    /// Its name on the target.
    pub target: String,
    /// When it was failed over.
    pub at_ms: Millis,
}

/// Records one source partition lost before they were mirrored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SourceTruncated {
    /// Records known lost, over every truncation seen.
    pub records: u64,
    /// The last truncation: what was lost.
    pub last: crate::flow::replication::truncation::Truncation,
    /// When it was seen.
    pub at_ms: Millis,
    /// Whether the partition stopped there (`on_source_truncation = "pause"`).
    pub paused: bool,
}

/// A mirrored source topic deleted and created again under its name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SourceRecreated {
    /// How many times it was seen.
    pub times: u64,
    /// When it was last seen.
    pub at_ms: Millis,
    /// The target topic both lives are mirrored into, the new after the old.
    pub target: String,
    /// The topic id before, and now.
    pub topic_id_before: String,
    pub topic_id: String,
}

/// What a flow's health is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Health {
    /// The flow runs and each of its loops turned recently.
    pub alive: bool,
    /// Both clusters were reached and the first discovery pass is done.
    pub ready: bool,
    /// `ok` or `degraded`.
    pub state: &'static str,
    /// Why it is degraded (empty when ok).
    pub reasons: Vec<String>,
}

/// A loop is dead when it has not turned for this many periods (and at least a minute).
const DEAD_AFTER_PERIODS: u32 = 5;

impl FlowStatus {
    /// Records what member `index` reports, and the instance-wide totals derived from it.
    pub fn publish_member(&mut self, index: u32, member: Option<MemberStatus>) {
        match member {
            Some(m) => {
                self.members.insert(index, m);
            }
            None => {
                self.members.remove(&index);
            }
        }
        self.partitions = BTreeMap::new();
        for m in self.members.values() {
            for (topic, ps) in &m.partitions {
                self.partitions
                    .entry(topic.clone())
                    .or_default()
                    .extend(ps.iter().map(|(p, s)| (*p, s.clone())));
            }
        }
        self.oldest_unacked_ms = self
            .members
            .values()
            .filter_map(|m| m.oldest_unacked_ms)
            .max();
        self.rebalances = self.members.values().map(|m| m.rebalances).sum();
    }

    /// The health at `now`, with clusters and the target counted unreachable after
    /// `unreachable_after`.
    pub fn health(&self, now: Instant, now_ms: Millis, unreachable_after: Duration) -> Health {
        let mut reasons = Vec::new();
        let dead: Vec<&str> = self
            .loops
            .iter()
            .filter(|(_, (last, period))| {
                now.duration_since(*last)
                    > (*period * DEAD_AFTER_PERIODS).max(Duration::from_secs(60))
            })
            .map(|(name, _)| *name)
            .collect();
        for name in &dead {
            reasons.push(format!("the {name} loop has stopped turning"));
        }
        let alive = dead.is_empty() && matches!(self.state, "starting" | "running");
        let ready = self.state == "running" && self.last_discovery_ms.is_some();
        if !ready {
            reasons.push("not ready: the first discovery pass is not done".into());
        }
        for (topic, partitions) in &self.partitions {
            for (p, s) in partitions {
                if let Some(paused) = &s.paused {
                    reasons.push(format!(
                        "partition {topic}[{p}] is paused at offset {}: {}",
                        paused.offset, paused.reason
                    ));
                }
            }
        }
        if !self.unowned.is_empty() {
            let shown: Vec<&str> = self.unowned.iter().take(10).map(String::as_str).collect();
            let more = self.unowned.len().saturating_sub(shown.len());
            reasons.push(format!(
                "{} mirrored partition(s) have had no owner for longer than two session timeouts: {}{} (the group is made to rebalance)",
                self.unowned.len(),
                shown.join(", "),
                if more > 0 { format!(" and {more} more") } else { String::new() }
            ));
        }
        for failure in &self.discovery_failures {
            reasons.push(format!("discovery: {failure}"));
        }
        if let Some(why) = &self.replicator_restarting {
            reasons.push(format!("replication is restarting: {why}"));
        }
        if self.translation_ready == Some(false) {
            reasons.push(
                "offset translation is not ready: the offset syncs are still being read".into(),
            );
        }
        if let Some(why) = &self.commit_failing {
            reasons.push(format!("storing progress fails: {why}"));
        }
        let limit = unreachable_after.as_millis() as i64;
        for (alias, u) in &self.unreachable {
            let for_ms = now_ms - u.since_ms;
            if for_ms >= limit {
                reasons.push(format!(
                    "cluster {alias} unreachable for {}s: {}",
                    for_ms / 1000,
                    u.error
                ));
            }
        }
        if let Some(age) = self.oldest_unacked_ms.filter(|a| *a >= limit) {
            reasons.push(format!(
                "the target has not acknowledged records for {}s",
                age / 1000
            ));
        }
        Health {
            alive,
            ready,
            state: if reasons.is_empty() { "ok" } else { "degraded" },
            reasons,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> FlowStatus {
        FlowStatus {
            state: "running",
            last_discovery_ms: Some(1),
            ..FlowStatus::default()
        }
    }

    #[test]
    fn a_running_flow_is_ok() {
        let h = running().health(Instant::now(), 10, Duration::from_secs(30));
        assert_eq!((h.alive, h.ready, h.state), (true, true, "ok"), "{h:?}");
    }

    #[test]
    fn every_reason_is_named() {
        let mut s = running();
        s.partitions.entry("t".into()).or_default().insert(
            2,
            PartitionStatus {
                position: Some(7),
                end: Some(9),
                lag: Some(2),
                in_flight: 0,
                state: "paused",
                paused: Some(Paused {
                    offset: 7,
                    reason: "too large".into(),
                    since_ms: 0,
                }),
                unstored_ms: None,
            },
        );
        s.replicator_restarting = Some("producer fenced".into());
        s.translation_ready = Some(false);
        s.commit_failing = Some("coordinator gone".into());
        s.unreachable.insert(
            "backup".into(),
            Unreachable {
                since_ms: 0,
                error: "connection refused".into(),
            },
        );
        s.oldest_unacked_ms = Some(45_000);
        s.discovery_failures = vec!["creating target topic primary.t failed".into()];
        s.unowned = vec!["t[3]".into()];
        let h = s.health(Instant::now(), 40_000, Duration::from_secs(30));
        assert_eq!(h.state, "degraded");
        let all = h.reasons.join("\n");
        for want in [
            "partition t[2] is paused at offset 7: too large",
            "replication is restarting: producer fenced",
            "offset translation is not ready",
            "storing progress fails: coordinator gone",
            "cluster backup unreachable for 40s: connection refused",
            "the target has not acknowledged records for 45s",
            "discovery: creating target topic primary.t failed",
            "1 mirrored partition(s) have had no owner for longer than two session timeouts: t[3]",
        ] {
            assert!(all.contains(want), "missing {want:?} in {all}");
        }
        assert!(h.alive && h.ready);
    }

    #[test]
    fn briefly_unreachable_is_not_degraded_and_a_stuck_loop_is_dead() {
        let mut s = running();
        s.unreachable.insert(
            "backup".into(),
            Unreachable {
                since_ms: 39_000,
                error: "x".into(),
            },
        );
        let now = Instant::now();
        s.loops.insert("discovery", (now, Duration::from_secs(1)));
        assert_eq!(s.health(now, 40_000, Duration::from_secs(30)).state, "ok");
        let later = now + Duration::from_secs(61);
        let h = s.health(later, 40_000, Duration::from_secs(30));
        assert!(!h.alive && h.reasons[0].contains("discovery loop"), "{h:?}");
        let mut stopped = running();
        stopped.state = "stopped";
        assert!(!stopped.health(now, 0, Duration::from_secs(30)).alive);
    }
}
