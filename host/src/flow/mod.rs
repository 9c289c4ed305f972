//! One source -> target flow, each MM2 concept a module with its pure rules beside its loop.
//!
//! - [`discovery`]: which source topics are mirrored under which names, and the target
//!   changes that follow (MM2's `MirrorSourceConnector` topic refresh).
//! - [`replication`]: the data plane: records, progress, offset syncs (`MirrorSourceTask`).
//! - [`offset_syncs`]: when an OffsetSync is written, reading them back, and translating
//!   offsets from them (`OffsetSyncWriter`, `OffsetSyncStore`).
//! - [`checkpoints`]: translating consumer-group offsets into checkpoints
//!   (`MirrorCheckpointTask`).
//! - [`group_sync`]: writing translated offsets to idle target groups; also `offsets failover`.
//! - [`heartbeats`]: heartbeat records (`MirrorHeartbeatTask`).
//! - [`cutover`]: what `kmirror failover` records (topics failed over stop being mirrored)
//!   and whether a group is ready to fail over.
//! - [`acls`]: topic ACLs synced to the target (`MirrorSourceConnector.syncTopicAcls`).
//! - [`verify`]: a partition and its copy compared record by record through the offset map
//!   (`kmirror verify`); [`audit`]: the same, continuously and throttled, on the leader.
//! - [`leadership`]: which instance does the singleton duties, elected through a control
//!   consumer group; [`duties`]: those duties, started and stopped with leadership;
//!   [`ownership`]: every instance reports its partitions, the leader finds partitions
//!   without an owner and makes the group rebalance.
//! - [`plugins`]: the flow's plugin roles behind async, batched calls, swappable while it
//!   runs; [`reload`]: whether a running flow may take new roles.
//! - [`single`]: a flow declared to run on one instance: no groups, a lease instead.
//! - [`takeover`]: seeding the flow's progress from a MirrorMaker 2 it replaces.
//! - [`telemetry`]: the flow's counters and status, rendered by `/status` and `/metrics`.
//! - [`supervisor`]: wires one flow's tasks together and watches them (`tasks`).

pub mod acls;
pub mod audit;
pub mod checkpoints;
pub mod cutover;
pub mod discovery;
pub mod duties;
pub mod exactly_once;
pub mod group_sync;
pub mod heartbeats;
pub mod leadership;
pub mod offset_syncs;
pub mod ownership;
pub mod plugins;
pub mod reload;
pub mod replication;
pub mod single;
pub mod supervisor;
pub mod takeover;
mod tasks;
pub mod telemetry;
pub mod verify;

use crate::kafka::KafkaError;
use crate::policy::PluginError;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use telemetry::FlowTelemetry;
use tokio_util::sync::CancellationToken;

/// Why a flow stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// A Kafka client could not be created.
    #[error("flow {flow}: {source}")]
    Kafka {
        /// The flow.
        flow: String,
        /// The error.
        source: KafkaError,
    },
    /// The replication policy failed to name the internal topics.
    #[error("flow {flow}: {source}")]
    Plugin {
        /// The flow.
        flow: String,
        /// The error.
        source: PluginError,
    },
    /// One of the flow's internal topics exists in a shape kmirror cannot use.
    #[error("flow {flow}: {source}")]
    InternalTopic {
        /// The flow.
        flow: String,
        /// What is wrong with it.
        source: crate::kafka::admin::MisshapenTopic,
    },
    /// A flow declared to run on one instance cannot (another instance took its lease, it
    /// could not renew it, or the flow's groups have members).
    #[error("flow {flow}: single_instance: {message}")]
    SingleInstance {
        /// The flow.
        flow: String,
        /// What happened.
        message: String,
    },
    /// Instances of the flow in the other delivery mode (at-least-once, exactly-once) run:
    /// both at once would mirror every record twice.
    #[error("flow {flow}: {message}")]
    ModeConflict {
        /// The flow.
        flow: String,
        /// What runs, and what to do.
        message: String,
    },
    /// One of the flow's tasks panicked.
    #[error("flow {flow}: the {task} task failed: {message}")]
    Task {
        /// The flow.
        flow: String,
        /// Which task.
        task: &'static str,
        /// The panic.
        message: String,
    },
}

/// Where one source topic is mirrored to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The topic's name on the target.
    pub target: String,
    /// How many of its partitions are replicated (0..partitions).
    pub partitions: i32,
    /// Where a partition without stored progress starts, if not where `start_offset` says:
    /// a topic failed back (`kmirror failback`) starts where the failover left it, so that
    /// the history it shares with its target is not copied again.
    pub start: Option<Arc<BTreeMap<i32, i64>>>,
}

impl Route {
    /// A route to `target` for `partitions` partitions.
    pub fn new(target: impl Into<String>, partitions: i32) -> Self {
        Route {
            target: target.into(),
            partitions,
            start: None,
        }
    }

    /// Where `partition` starts without stored progress, if the route says.
    pub fn start_of(&self, partition: i32) -> Option<i64> {
        self.start.as_ref()?.get(&partition).copied()
    }
}

/// `/status` shows a route as `[target, partitions]`.
impl serde::Serialize for Route {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (&self.target, self.partitions).serialize(s)
    }
}

/// What a flow mirrors: source topic -> its route.
pub type Routes = BTreeMap<String, Route>;

/// Consumer groups with this prefix are kmirror's own (replication progress): never
/// checkpointed.
pub const OWN_GROUP_PREFIX: &str = "kmirror.";

/// Why the offset-syncs topic must have one partition.
pub const SYNCS_SINGLE: &str =
    "offset syncs are written to and read from its partition 0, as MM2 does";
/// Why the checkpoints topic must have one partition.
pub const CHECKPOINTS_SINGLE: &str =
    "checkpoints are written to and read from its partition 0, as MM2's tools read them";

/// The flow's own consumer group on the source, holding replication progress.
pub fn progress_group(source: &str, target: &str) -> String {
    format!("{OWN_GROUP_PREFIX}{source}.{target}")
}

/// Retries `f` with backoff until it succeeds or `shutdown`; `None` on shutdown. Each
/// failure is counted and logged (rate-limited) as `what`.
pub(crate) async fn retry<T, F, Fut>(
    what: &'static str,
    telemetry: &FlowTelemetry,
    shutdown: &CancellationToken,
    mut f: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, KafkaError>>,
{
    let mut backoff = Duration::from_millis(200);
    loop {
        match f().await {
            Ok(v) => return Some(v),
            Err(e) => telemetry.note_error(what, e.kind(), &e),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers for the flow's unit tests.
    use crate::plugin::builtin;
    use crate::policy::{Config, FlowRoles, Role};

    /// MM2's built-in roles with `policy` and a topic filter of `topics`.
    pub fn roles(policy: &str, topics: &str) -> FlowRoles {
        let b = |name: &str| builtin::find(name).unwrap();
        let filter: Config = [("topics", topics)].into_iter().collect();
        FlowRoles {
            topic_filter: b("default-topic-filter")
                .configured(Role::TopicFilter, &filter, builtin::topic_filter)
                .unwrap(),
            group_filter: b("default-group-filter")
                .configured(Role::GroupFilter, &Config::new(), builtin::group_filter)
                .unwrap(),
            replication_policy: b(policy)
                .configured(
                    Role::ReplicationPolicy,
                    &Config::new(),
                    builtin::replication_policy,
                )
                .unwrap(),
            config_property_filter: b("default-config-property-filter")
                .configured(
                    Role::ConfigPropertyFilter,
                    &Config::new(),
                    builtin::config_property_filter,
                )
                .unwrap(),
            record_transforms: Vec::new(),
        }
    }
}
