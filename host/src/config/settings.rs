//! A flow's runtime settings, built from its `[[flows]]` entry in one validated step:
//! every duration is positive, numbers are in range, features that are off are `None`.

use super::model::{FlowConfig, OnSourceTruncation, OnUnproducible, StartOffset, SyncsLocation};
use std::time::Duration;

/// How a flow runs, as validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSettings {
    /// How often source topics are listed (the first pass runs at start).
    pub refresh_topics_interval: Duration,
    /// An offset sync at least every this many records per partition (>= 1).
    pub offset_lag_max: u64,
    /// Replication factor of created topics; `None`: the target broker's default.
    pub replication_factor: Option<i32>,
    /// The heartbeat interval; `None` when heartbeats are off.
    pub heartbeats: Option<Duration>,
    /// Where offset syncs are written.
    pub offset_syncs_topic_location: SyncsLocation,
    /// How often delayed offset syncs are flushed and progress is stored.
    pub offset_flush_interval: Duration,
    /// Where a partition without stored progress starts.
    pub start_offset: StartOffset,
    /// How often existing target topics get the source's (filtered) configs; `None` when
    /// configs are not copied (not even to created topics).
    pub sync_topic_configs: Option<Duration>,
    /// Checkpoint settings; `None` when checkpoints are off.
    pub checkpoints: Option<CheckpointSettings>,
    /// What happens to a record the target will never take.
    pub on_unproducible: OnUnproducible,
    /// What happens to a record a transform fails on.
    pub on_transform_error: OnUnproducible,
    /// What happens when a source partition lost records before they were mirrored.
    pub on_source_truncation: OnSourceTruncation,
    /// The consumer-group session timeout.
    pub session_timeout: Duration,
    /// How long a graceful stop waits for records in flight.
    pub shutdown_timeout: Duration,
    /// How long a cluster may be unreachable before the flow is degraded.
    pub unreachable_after: Duration,
    /// Replication tasks (group members) per instance.
    pub replication_tasks: u32,
    /// Whether the flow runs on one instance, without groups, holding a lease.
    pub single_instance: bool,
    /// Whether a reload may give already-mirrored topics new target names.
    pub allow_policy_change: bool,
    /// Whether the first start seeds progress from MirrorMaker 2's offsets topic.
    pub take_over_from_mm2: bool,
    /// How topic ACLs are synced to the target; `None` when they are not.
    pub sync_topic_acls: Option<AclSyncSettings>,
    /// How an exactly-once flow's transactions run; `None`: at-least-once.
    pub exactly_once: Option<ExactlyOnceSettings>,
    /// How the leader audits the mirrored records; `None` when it does not.
    pub audit: Option<AuditSettings>,
}

/// The background audit (`flow::audit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditSettings {
    /// How often a pass starts (over what was mirrored since the last).
    pub interval: Duration,
    /// Source records read a second at most.
    pub records_per_second: u64,
}

/// The highest audit rate (records a second).
pub const MAX_AUDIT_RATE: u64 = 10_000_000;

/// The most shards an exactly-once flow may have.
pub const MAX_SHARDS: u32 = 256;
/// Shards of an exactly-once flow unless configured (measured on 2 cores, 12 partitions of
/// 1 KiB records: 4 shards 184,000-198,000 records/s, 0.9x at-least-once; 8 shards 136,000: each
/// shard is a consumer and a transactional producer of its own, and 12 partitions spread
/// unevenly over 8).
pub const DEFAULT_SHARDS: u32 = 4;

/// How an exactly-once flow's transactions run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExactlyOnceSettings {
    /// A shard's open transaction is committed this often.
    pub transaction_interval: Duration,
    /// Records at most in one transaction.
    pub max_records: u64,
    /// Key and value bytes at most in one transaction.
    pub max_bytes: u64,
    /// Shards (transactional ids) when the shards topic is created.
    pub shards: u32,
}

/// The most replication tasks one flow may have per instance.
pub const MAX_REPLICATION_TASKS: u32 = 8;

/// How checkpoints and group offset sync run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointSettings {
    /// How often checkpoints are emitted.
    pub emit_interval: Duration,
    /// How often source consumer groups are listed.
    pub refresh_groups_interval: Duration,
    /// How often group offsets are synced to the target; `None` when off.
    pub sync_group_offsets: Option<Duration>,
}

/// How topic ACLs are synced (MM2's `sync.topic.acls.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclSyncSettings {
    /// How often the leader syncs them (the first pass when it becomes the leader).
    pub interval: Duration,
    /// Whether synced bindings whose source binding is gone are deleted from the target.
    pub delete: bool,
}

/// One setting out of range: the key and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError {
    /// The key within the flow (`emit_checkpoints_interval`).
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

/// The largest replication factor Kafka accepts (an INT16).
const MAX_REPLICATION_FACTOR: i32 = i16::MAX as i32;

/// The shortest lease (`session_timeout`) of a single instance: a holder frozen with
/// records queued stays frozen at least a third of a lease past its term's end before a
/// successor mirrors, and librdkafka times queued records out on waking only if at least a
/// second passed since it last looked.
pub const MIN_LEASE: Duration = Duration::from_secs(3);

/// How long a single instance's data producer keeps a record it has not sent yet before it
/// gives the record up (`message.timeout.ms`): a quarter of the lease. A record handed to
/// the producer before the term ended (at most two thirds of a lease after the last
/// renewal began) is sent within this or never — the successor mirrors only a whole lease
/// after that renewal, so never while this holder's queued records can still leave. This
/// covers a process that stalls with records queued (SIGSTOP, a frozen cgroup, a paused
/// VM): on waking, librdkafka times them out before it sends anything. A record given up is
/// sent again from the book (duplicates, never a loss) while the term lasts. librdkafka's
/// clock does not count a machine's suspend: there the purge at the term's end is what
/// stops queued records (see `docs/scaling.md`). Used by `flow::single`; here so validation can
/// refuse a `linger.ms` that would not fit in it.
pub fn queued_for_at_most(lease: Duration) -> Duration {
    lease / 4
}

impl FlowSettings {
    /// Validates `c`; returns every problem at once.
    pub fn from_config(c: &FlowConfig) -> Result<FlowSettings, Vec<SettingError>> {
        let mut errors = Vec::new();
        let mut positive = |key: &'static str, d: Duration, used: bool| {
            if used && d.is_zero() {
                errors.push(SettingError {
                    key,
                    message: "must be longer than 0 (e.g. \"5s\", \"500ms\")".into(),
                });
            }
            d
        };
        let refresh_topics_interval =
            positive("refresh_topics_interval", c.refresh_topics_interval, true);
        let offset_flush_interval =
            positive("offset_flush_interval", c.offset_flush_interval, true);
        let heartbeats = positive(
            "emit_heartbeats_interval",
            c.emit_heartbeats_interval,
            c.emit_heartbeats_enabled,
        );
        let emit_interval = positive(
            "emit_checkpoints_interval",
            c.emit_checkpoints_interval,
            c.emit_checkpoints_enabled,
        );
        let refresh_groups_interval = positive(
            "refresh_groups_interval",
            c.refresh_groups_interval,
            c.emit_checkpoints_enabled,
        );
        let sync_interval = positive(
            "sync_group_offsets_interval",
            c.sync_group_offsets_interval,
            c.emit_checkpoints_enabled && c.sync_group_offsets,
        );
        let config_sync = positive(
            "sync_topic_configs_interval",
            c.sync_topic_configs_interval,
            c.sync_topic_configs,
        );
        let acl_sync = positive(
            "sync_topic_acls_interval",
            c.sync_topic_acls_interval,
            c.sync_topic_acls_enabled,
        );
        let shutdown_timeout = positive("shutdown_timeout", c.shutdown_timeout, true);
        let unreachable_after = positive("unreachable_after", c.unreachable_after, true);
        let transaction_interval = positive(
            "transaction_interval",
            c.transaction_interval,
            c.exactly_once,
        );
        let audit_interval = positive(
            "audit_interval",
            c.audit_interval.unwrap_or_default(),
            c.audit_interval.is_some(),
        );
        if !(Duration::from_secs(1)..=Duration::from_secs(300)).contains(&c.session_timeout) {
            errors.push(SettingError {
                key: "session_timeout",
                message: "must be between 1s and 300s".into(),
            });
        } else if c.single_instance && c.session_timeout < MIN_LEASE {
            errors.push(SettingError {
                key: "session_timeout",
                message: format!(
                    "a single instance's lease must be at least {MIN_LEASE:?}: a holder frozen past its term sends none of its queued records only if the freeze lasts a second (librdkafka looks for records to give up once a second)"
                ),
            });
        }
        if c.replication_tasks
            .is_some_and(|n| !(1..=MAX_REPLICATION_TASKS).contains(&n))
        {
            errors.push(SettingError {
                key: "replication_tasks",
                message: format!("must be between 1 and {MAX_REPLICATION_TASKS}"),
            });
        }
        if c.offset_lag_max == 0 {
            errors.push(SettingError {
                key: "offset_lag_max",
                message: "must be at least 1".into(),
            });
        }
        if let Some(rf) = c.replication_factor
            && !(1..=MAX_REPLICATION_FACTOR).contains(&rf)
        {
            errors.push(SettingError {
                    key: "replication_factor",
                    message: format!(
                        "must be between 1 and {MAX_REPLICATION_FACTOR} (leave it out for the broker's default)"
                    ),
                });
        }
        if c.sync_group_offsets && !c.emit_checkpoints_enabled {
            errors.push(SettingError {
                key: "sync_group_offsets",
                message: "needs emit_checkpoints_enabled = true (group offsets are synced from checkpoints)".into(),
            });
        }
        if c.sync_topic_acls_delete && !c.sync_topic_acls_enabled {
            errors.push(SettingError {
                key: "sync_topic_acls_delete",
                message: "needs sync_topic_acls_enabled = true (only synced ACLs are deleted)"
                    .into(),
            });
        }
        if c.exactly_once {
            if c.transaction_interval > Duration::from_secs(30) {
                errors.push(SettingError {
                    key: "transaction_interval",
                    message: "must be at most 30s (the transaction timeout is 60s)".into(),
                });
            }
            if c.transaction_max_records == 0 {
                errors.push(SettingError {
                    key: "transaction_max_records",
                    message: "must be at least 1".into(),
                });
            }
            if c.transaction_max_bytes < 1024 {
                errors.push(SettingError {
                    key: "transaction_max_bytes",
                    message: "must be at least 1024".into(),
                });
            }
            if c.exactly_once_shards
                .is_some_and(|n| !(1..=MAX_SHARDS).contains(&n))
            {
                errors.push(SettingError {
                    key: "exactly_once_shards",
                    message: format!("must be between 1 and {MAX_SHARDS}"),
                });
            }
            if c.single_instance {
                errors.push(SettingError {
                    key: "single_instance",
                    message: "is not supported with exactly_once = true (an exactly-once flow's shards are shared through a group on the target, and each shard's transactional id fences already)".into(),
                });
            }
            if c.take_over_from_mm2 {
                errors.push(SettingError {
                    key: "take_over_from_mm2",
                    message: "is not supported with exactly_once = true (an exactly-once flow keeps its progress on the target; take over with exactly_once = false first)".into(),
                });
            }
        } else if c.exactly_once_shards.is_some() {
            errors.push(SettingError {
                key: "exactly_once_shards",
                message: "needs exactly_once = true".into(),
            });
        }
        if c.audit_interval.is_some() {
            if !(1..=MAX_AUDIT_RATE).contains(&c.audit_records_per_second) {
                errors.push(SettingError {
                    key: "audit_records_per_second",
                    message: format!("must be between 1 and {MAX_AUDIT_RATE}"),
                });
            }
            if !c.record_transforms.is_empty() {
                errors.push(SettingError {
                    key: "audit_interval",
                    message: "is not supported on a flow with record_transforms: the audit compares each record with its copy byte for byte, and a transform changes them by design (audit a flow without transforms)".into(),
                });
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(FlowSettings {
            refresh_topics_interval,
            offset_lag_max: c.offset_lag_max,
            replication_factor: c.replication_factor,
            heartbeats: c.emit_heartbeats_enabled.then_some(heartbeats),
            offset_syncs_topic_location: c.offset_syncs_topic_location,
            offset_flush_interval,
            start_offset: c.start_offset,
            sync_topic_configs: c.sync_topic_configs.then_some(config_sync),
            checkpoints: c.emit_checkpoints_enabled.then_some(CheckpointSettings {
                emit_interval,
                refresh_groups_interval,
                sync_group_offsets: c.sync_group_offsets.then_some(sync_interval),
            }),
            on_unproducible: c.on_unproducible,
            on_transform_error: c.on_transform_error,
            on_source_truncation: c.on_source_truncation,
            session_timeout: c.session_timeout,
            shutdown_timeout,
            unreachable_after,
            replication_tasks: c.replication_tasks.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, |n| n.get().min(4) as u32)
            }),
            single_instance: c.single_instance,
            allow_policy_change: c.allow_policy_change,
            take_over_from_mm2: c.take_over_from_mm2,
            sync_topic_acls: c.sync_topic_acls_enabled.then_some(AclSyncSettings {
                interval: acl_sync,
                delete: c.sync_topic_acls_delete,
            }),
            exactly_once: c.exactly_once.then_some(ExactlyOnceSettings {
                transaction_interval,
                max_records: c.transaction_max_records,
                max_bytes: c.transaction_max_bytes,
                shards: c.exactly_once_shards.unwrap_or(DEFAULT_SHARDS),
            }),
            audit: c.audit_interval.map(|_| AuditSettings {
                interval: audit_interval,
                records_per_second: c.audit_records_per_second,
            }),
        })
    }
}
