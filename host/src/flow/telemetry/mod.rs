//! A flow's telemetry: one table of counters that both `/status` (JSON) and `/metrics`
//! (Prometheus) render, the flow's status and health ([`status`]), a replication-latency
//! histogram ([`crate::histogram`]), and error logging rate-limited per (operation, kind) so its
//! memory stays bounded.

pub mod status;

use crate::flow::replication::truncation::Truncation;
pub use status::{
    AclSyncStatus, AuditStatus, FailedOverStatus, FlowStatus, GroupStatus, Health, InstanceStatus,
    LinkTally, MemberStatus, Millis, PartitionStatus, Paused, SourceRecreated, SourceTruncated,
    TransformStatus, Unreachable, now_ms,
};

use crate::histogram::Histogram;
use std::collections::{HashMap, HashSet};
use std::fmt::Display;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Every counter of a flow. The name is the same in `/status` and, as
/// `kmirror_<name>_total`, in `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Records acked by the target.
    Records,
    /// Key and value bytes produced.
    Bytes,
    /// Offset syncs written.
    OffsetSyncs,
    /// Offset syncs dropped because a partition's queue was full.
    OffsetSyncsDropped,
    /// Heartbeats written.
    Heartbeats,
    /// Checkpoints emitted.
    Checkpoints,
    /// Group offset syncs committed to the target.
    GroupOffsetSyncs,
    /// Group offset syncs skipped because the target group was active.
    ActiveTargetGroupsSkipped,
    /// Malformed records skipped on the offset-syncs topic.
    MalformedOffsetSyncs,
    /// Late offset syncs of a replicator that no longer owned the partition, refused.
    StaleOffsetSyncs,
    /// Records the target would not take that were skipped (`on_unproducible = "skip"`).
    UnproducibleSkipped,
    /// Times a partition was paused at a record the target would not take.
    UnproduciblePaused,
    /// Failed attempts to store progress.
    CommitFailures,
    /// Names the replication policy gave that were refused (invalid, or an internal topic).
    RefusedNames,
    /// Plugin calls that failed deciding a topic (the topic waits and is asked again).
    UndecidedTopics,
    /// Topic ACL bindings created on the target.
    AclsCreated,
    /// Synced topic ACL bindings deleted from the target (`sync_topic_acls_delete`).
    AclsDeleted,
    /// ACL sync steps that failed (a listing, a plugin call, a binding not created or not
    /// deleted); retried at the next pass.
    AclSyncFailures,
    /// Records a record transform dropped (not mirrored, by design).
    RecordsDropped,
    /// Records given up on their way to the target (which may have stored them) and sent
    /// again: possible duplicates.
    RecordsResentPossiblyStored,
    /// Records a transform failed on that were skipped (`on_transform_error = "skip"`).
    TransformFailuresSkipped,
    /// Times a partition was paused at a record a transform failed on.
    TransformFailuresPaused,
    /// Times records of a source partition were found lost at the source (deleted before
    /// they were mirrored, or the topic created again).
    SourceTruncations,
    /// Times a mirrored source topic was found deleted and created again under its name
    /// (its topic id changed).
    SourceTopicsRecreated,
    /// Transactions an exactly-once flow committed on the target.
    Transactions,
    /// Transactions an exactly-once flow aborted (their records are read again).
    TransactionsAborted,
    /// Errors seen.
    Errors,
}

impl Counter {
    /// Every counter, in the order they are shown.
    pub const ALL: [Counter; 27] = [
        Counter::Records,
        Counter::Bytes,
        Counter::OffsetSyncs,
        Counter::OffsetSyncsDropped,
        Counter::Heartbeats,
        Counter::Checkpoints,
        Counter::GroupOffsetSyncs,
        Counter::ActiveTargetGroupsSkipped,
        Counter::MalformedOffsetSyncs,
        Counter::StaleOffsetSyncs,
        Counter::UnproducibleSkipped,
        Counter::UnproduciblePaused,
        Counter::CommitFailures,
        Counter::RefusedNames,
        Counter::UndecidedTopics,
        Counter::AclsCreated,
        Counter::AclsDeleted,
        Counter::AclSyncFailures,
        Counter::RecordsDropped,
        Counter::RecordsResentPossiblyStored,
        Counter::TransformFailuresSkipped,
        Counter::TransformFailuresPaused,
        Counter::SourceTruncations,
        Counter::SourceTopicsRecreated,
        Counter::Transactions,
        Counter::TransactionsAborted,
        Counter::Errors,
    ];

    /// Its name in `/status` and `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            Counter::Records => "records",
            Counter::Bytes => "bytes",
            Counter::OffsetSyncs => "offset_syncs",
            Counter::OffsetSyncsDropped => "offset_syncs_dropped",
            Counter::Heartbeats => "heartbeats",
            Counter::Checkpoints => "checkpoints",
            Counter::GroupOffsetSyncs => "group_offset_syncs",
            Counter::ActiveTargetGroupsSkipped => "active_target_groups_skipped",
            Counter::MalformedOffsetSyncs => "malformed_offset_syncs",
            Counter::StaleOffsetSyncs => "stale_offset_syncs",
            Counter::UnproducibleSkipped => "unproducible_skipped",
            Counter::UnproduciblePaused => "unproducible_paused",
            Counter::CommitFailures => "commit_failures",
            Counter::RefusedNames => "refused_topic_names",
            Counter::UndecidedTopics => "undecided_topics",
            Counter::AclsCreated => "acls_created",
            Counter::AclsDeleted => "acls_deleted",
            Counter::AclSyncFailures => "acl_sync_failures",
            Counter::RecordsDropped => "records_dropped",
            Counter::RecordsResentPossiblyStored => "records_resent_possibly_stored",
            Counter::TransformFailuresSkipped => "transform_failures_skipped",
            Counter::TransformFailuresPaused => "transform_failures_paused",
            Counter::SourceTruncations => "source_truncations",
            Counter::SourceTopicsRecreated => "source_topics_recreated",
            Counter::Transactions => "transactions",
            Counter::TransactionsAborted => "transactions_aborted",
            Counter::Errors => "errors",
        }
    }

    /// What it counts, for `/metrics`.
    pub fn help(self) -> &'static str {
        match self {
            Counter::Records => "Records mirrored (acked by the target)",
            Counter::Bytes => "Key and value bytes mirrored",
            Counter::OffsetSyncs => "Offset syncs written",
            Counter::OffsetSyncsDropped => {
                "Offset syncs dropped because too many were queued (translation falls back to MM2's rule there)"
            }
            Counter::Heartbeats => "Heartbeats written",
            Counter::Checkpoints => "Checkpoints written",
            Counter::GroupOffsetSyncs => "Group offsets committed to the target",
            Counter::ActiveTargetGroupsSkipped => {
                "Group offset syncs skipped: the target group was active"
            }
            Counter::MalformedOffsetSyncs => {
                "Offset-sync records skipped as malformed or impossible"
            }
            Counter::StaleOffsetSyncs => {
                "Late offset syncs of a replicator that no longer owned the partition, refused"
            }
            Counter::UnproducibleSkipped => "Records the target would not take, skipped",
            Counter::UnproduciblePaused => {
                "Times a partition was paused at a record the target would not take"
            }
            Counter::CommitFailures => "Failed attempts to store replication progress",
            Counter::RefusedNames => {
                "Target names the replication policy gave that were refused (invalid or internal)"
            }
            Counter::UndecidedTopics => {
                "Plugin calls that failed deciding a topic (trap, timeout, error); retried later"
            }
            Counter::AclsCreated => "Topic ACL bindings created on the target",
            Counter::AclsDeleted => {
                "Synced topic ACL bindings deleted from the target (sync_topic_acls_delete)"
            }
            Counter::AclSyncFailures => {
                "ACL sync steps that failed (listing, plugin call, a binding not created or deleted); retried next pass"
            }
            Counter::RecordsDropped => "Records a record transform dropped (not mirrored)",
            Counter::RecordsResentPossiblyStored => {
                "Records given up on their way to the target, which may have stored them, and sent again: possible duplicates (a single instance's target slower than a quarter of session_timeout, a producer reset)"
            }
            Counter::TransformFailuresSkipped => {
                "Records a record transform failed on, skipped (on_transform_error = skip)"
            }
            Counter::TransformFailuresPaused => {
                "Times a partition was paused at a record a record transform failed on"
            }
            Counter::SourceTruncations => {
                "Times records of a source partition were found lost at the source (deleted before they were mirrored, or the topic created again)"
            }
            Counter::SourceTopicsRecreated => {
                "Times a mirrored source topic was found deleted and created again (its topic id changed)"
            }
            Counter::Transactions => "Transactions an exactly-once flow committed on the target",
            Counter::TransactionsAborted => {
                "Transactions an exactly-once flow aborted (their records are mirrored again)"
            }
            Counter::Errors => "Errors (Kafka, plugins), each also logged",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The same (operation, kind) of error is logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Events reported once are remembered up to this many; then the memory starts over.
const MAX_REMEMBERED_EVENTS: usize = 10_000;

#[derive(Default)]
struct ErrorLog {
    last_logged: HashMap<(&'static str, &'static str), Instant>,
    reported: HashSet<String>,
}

/// How long a cluster may be unreachable before the flow is degraded, unless configured.
pub const DEFAULT_UNREACHABLE_AFTER: Duration = Duration::from_secs(30);

/// The counters, status and error log of one flow.
pub struct FlowTelemetry {
    /// The flow's name.
    pub flow: String,
    /// Time from a record's timestamp to the target's ack.
    pub latency: Histogram,
    counters: [AtomicU64; Counter::ALL.len()],
    status: Mutex<FlowStatus>,
    errors: Mutex<ErrorLog>,
    unreachable_after: Duration,
}

impl FlowTelemetry {
    /// Telemetry of `flow`, `starting`.
    pub fn new(flow: &str) -> Self {
        Self::with_unreachable_after(flow, DEFAULT_UNREACHABLE_AFTER)
    }

    /// Telemetry of `flow`, degraded once a cluster is unreachable for `unreachable_after`.
    pub fn with_unreachable_after(flow: &str, unreachable_after: Duration) -> Self {
        FlowTelemetry {
            flow: flow.to_string(),
            latency: Histogram::latency(),
            counters: Default::default(),
            status: Mutex::new(FlowStatus {
                state: "starting",
                ..FlowStatus::default()
            }),
            errors: Mutex::new(ErrorLog::default()),
            unreachable_after,
        }
    }

    /// The flow's health now.
    pub fn health(&self) -> Health {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .health(Instant::now(), now_ms(), self.unreachable_after)
    }

    /// A loop of the flow turned; it is dead when it has not for several `period`s.
    pub fn tick(&self, name: &'static str, period: Duration) {
        self.update(|s| {
            s.loops.insert(name, (Instant::now(), period));
        });
    }

    /// A loop of the flow ended (it is no longer watched).
    pub fn loop_ended(&self, name: &'static str) {
        self.update(|s| {
            s.loops.remove(name);
        });
    }

    /// `alias` answered.
    pub fn reached(&self, alias: &str) {
        self.update(|s| {
            s.unreachable.remove(alias);
        });
    }

    /// An attempt to reach `alias` failed.
    pub fn unreachable(&self, alias: &str, error: &dyn Display) {
        let error = error.to_string();
        self.update(|s| {
            s.unreachable
                .entry(alias.to_string())
                .and_modify(|u| u.error = error.clone())
                .or_insert(Unreachable {
                    since_ms: now_ms(),
                    error,
                });
        });
    }

    /// Adds `n` to `counter`.
    pub fn add(&self, counter: Counter, n: u64) {
        self.counters[counter.index()].fetch_add(n, Ordering::Relaxed);
    }

    /// The value of `counter`.
    pub fn count(&self, counter: Counter) -> u64 {
        self.counters[counter.index()].load(Ordering::Relaxed)
    }

    /// Updates the status under its lock.
    pub fn update(&self, f: impl FnOnce(&mut FlowStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Records of `topic`/`partition` were lost at the source before they were mirrored.
    pub fn source_truncated(
        &self,
        topic: &str,
        partition: i32,
        truncation: &Truncation,
        paused: bool,
    ) {
        self.add(Counter::SourceTruncations, 1);
        self.update(|s| {
            let partitions = s.source_truncated.entry(topic.to_string()).or_default();
            // A range seen again (a partition assigned again, a sibling task) or overlapping
            // the last one counts only its new records.
            let fresh = match partitions.get(&partition) {
                Some(known) => truncation.beyond(&known.last),
                None => Some(truncation.clone()),
            };
            let entry = partitions
                .entry(partition)
                .or_insert_with(|| SourceTruncated {
                    records: 0,
                    last: truncation.clone(),
                    at_ms: 0,
                    paused,
                });
            entry.records += fresh.as_ref().map_or(0, Truncation::records);
            entry.last = truncation.clone();
            entry.at_ms = now_ms();
            entry.paused = paused;
        });
    }

    /// The mirrored source topic `topic` was deleted and created again (topic id `before`
    /// then `now`); it is mirrored into `target`.
    pub fn source_recreated(&self, topic: &str, target: &str, before: &str, now: &str) {
        self.add(Counter::SourceTopicsRecreated, 1);
        self.update(|s| {
            let e = s
                .source_recreated
                .entry(topic.to_string())
                .or_insert_with(|| SourceRecreated {
                    times: 0,
                    at_ms: 0,
                    target: String::new(),
                    topic_id_before: String::new(),
                    topic_id: String::new(),
                });
            e.times += 1;
            e.at_ms = now_ms();
            e.target = target.to_string();
            e.topic_id_before = before.to_string();
            e.topic_id = now.to_string();
        });
    }

    /// The record-transform chain is `names` (at the flow's start, or a reload changed it):
    /// each link's counts start afresh.
    pub fn transforms_configured(&self, names: &[String]) {
        self.update(|s| {
            s.transforms = names
                .iter()
                .enumerate()
                .map(|(position, name)| TransformStatus {
                    position,
                    name: name.clone(),
                    ..TransformStatus::default()
                })
                .collect();
        });
    }

    /// What the record-transform chain `names` (in order) answered for a batch: `tallies`,
    /// one per link (a record read again — after back-pressure, a revocation, a paused
    /// partition's retry — is asked, and counted, again).
    pub fn transformed(&self, names: &[&str], tallies: &[LinkTally]) {
        self.update(|s| {
            s.transforms.truncate(names.len());
            for (position, (name, tally)) in names.iter().zip(tallies).enumerate() {
                if s.transforms.len() <= position {
                    s.transforms.push(TransformStatus {
                        position,
                        ..TransformStatus::default()
                    });
                }
                let t = &mut s.transforms[position];
                if t.name != *name {
                    // Another plugin at this place (a reload of the config): counted afresh.
                    *t = TransformStatus {
                        position,
                        name: name.to_string(),
                        ..TransformStatus::default()
                    };
                }
                t.kept += tally.kept;
                t.dropped += tally.dropped;
                t.rewritten += tally.rewritten;
                t.failed += tally.failed;
                t.batch_failures += u64::from(tally.batch_failed);
            }
        });
    }

    /// A copy of the status.
    pub fn status(&self) -> FlowStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Status, health and counters as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let health = self.health();
        let mut json = serde_json::to_value(self.status()).unwrap_or_default();
        if let Some(map) = json.as_object_mut() {
            map.insert("flow".into(), self.flow.clone().into());
            map.insert(
                "health".into(),
                serde_json::to_value(&health).unwrap_or_default(),
            );
        }
        if let Some(map) = json.as_object_mut() {
            for c in Counter::ALL {
                map.insert(c.name().to_string(), self.count(c).into());
            }
        }
        json
    }

    /// Counts an error and logs it, at most once per 30 s for the same operation and kind
    /// (the message of the suppressed repeats may differ, e.g. by offset).
    pub fn note_error(&self, operation: &'static str, kind: &'static str, message: &dyn Display) {
        self.add(Counter::Errors, 1);
        let text = format!("{operation}: {message}");
        self.update(|s| s.last_error = Some(text));
        let mut log = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let due = log
            .last_logged
            .get(&(operation, kind))
            .is_none_or(|t| now.duration_since(*t) >= LOG_EVERY);
        if due {
            log.last_logged.insert((operation, kind), now);
            tracing::warn!(flow = %self.flow, operation, kind, error = %message, "flow error (repeats are suppressed for 30s)");
        }
    }

    /// Whether this exact event was not reported before; remembers it.
    pub fn first_time(&self, event: &str) -> bool {
        let mut log = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if log.reported.len() >= MAX_REMEMBERED_EVENTS {
            log.reported.clear();
        }
        log.reported.insert(event.to_string())
    }

    /// How many distinct (operation, kind) pairs the error log remembers.
    pub fn remembered_error_kinds(&self) -> usize {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_logged
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_names_are_unique_and_indexed_in_order() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
        }
        let names: HashSet<_> = Counter::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), Counter::ALL.len());
    }

    #[test]
    fn error_log_memory_is_bounded_by_operation_and_kind() {
        let t = FlowTelemetry::new("a->b");
        for offset in 0..1000 {
            t.note_error("produce", "kafka", &format!("offset {offset} failed"));
        }
        assert_eq!(t.remembered_error_kinds(), 1);
        assert_eq!(t.count(Counter::Errors), 1000);
        assert_eq!(t.to_json()["errors"], 1000);
        assert!(t.first_time("x") && !t.first_time("x"));
    }
}
