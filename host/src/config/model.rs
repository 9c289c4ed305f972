//! The configuration file's shape and its defaults.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// The whole file.
#[derive(Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Clusters by alias. The alias is what replication policies see (`primary.orders`).
    pub clusters: BTreeMap<String, Spanned<ClusterConfig>>,
    /// Where plugins live and how they are limited.
    #[serde(default)]
    pub plugins: PluginsConfig,
    /// The status endpoint.
    #[serde(default)]
    pub status: StatusConfig,
    /// Source -> target flows.
    #[serde(default)]
    pub flows: Vec<Spanned<FlowConfig>>,
}

/// One cluster.
#[derive(Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// `host:port[,host:port...]`. MM2: `<alias>.bootstrap.servers`.
    pub bootstrap_servers: Spanned<String>,
    /// Passed to librdkafka as they are (TLS, SASL, tuning). Values may use `${ENV_VAR}`.
    /// MM2: `<alias>.<client property>`.
    #[serde(default)]
    pub librdkafka: BTreeMap<String, Spanned<String>>,
}

/// `[plugins]`.
#[derive(Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PluginsConfig {
    /// The plugin directory, relative to the config file.
    #[serde(default = "default_plugins_dir")]
    pub dir: PathBuf,
    /// The compile cache directory (default: the user cache directory).
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// Memory cap per plugin instance, in MiB.
    #[serde(default = "default_memory_limit_mib")]
    pub memory_limit_mib: usize,
    /// Per-call deadline.
    #[serde(default = "default_call_timeout", with = "humantime_serde")]
    pub call_timeout: Duration,
    /// The largest component file loaded, in MiB.
    #[serde(default = "default_max_component_size_mib")]
    pub max_component_size_mib: usize,
    /// The longest compiling one component may take.
    #[serde(default = "default_compile_timeout", with = "humantime_serde")]
    pub compile_timeout: Duration,
}

impl Default for PluginsConfig {
    fn default() -> Self {
        PluginsConfig {
            dir: default_plugins_dir(),
            cache_dir: None,
            memory_limit_mib: default_memory_limit_mib(),
            call_timeout: default_call_timeout(),
            max_component_size_mib: default_max_component_size_mib(),
            compile_timeout: default_compile_timeout(),
        }
    }
}

/// `[status]`: the HTTP endpoint serving `/health` and `/status`.
#[derive(Debug, Deserialize, serde::Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct StatusConfig {
    /// `host:port` to listen on; no endpoint when absent.
    #[serde(default)]
    pub listen: Option<String>,
}

/// A plugin slot: `{ builtin = NAME }` or `{ plugin = FILE }`, with an optional `config`.
#[derive(Debug, Deserialize, serde::Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct SlotConfig {
    /// A native built-in's name.
    #[serde(default)]
    pub builtin: Option<String>,
    /// A component file in the plugin directory.
    #[serde(default)]
    pub plugin: Option<String>,
    /// The role's configuration. Values may use `${ENV_VAR}`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

/// Where offset syncs are written.
#[derive(Debug, Deserialize, serde::Serialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum SyncsLocation {
    /// The source cluster (MM2's default).
    #[default]
    Source,
    /// The target cluster.
    Target,
}

/// Where a newly discovered partition starts.
#[derive(Debug, Deserialize, serde::Serialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum StartOffset {
    /// Its first record (MM2's behaviour).
    #[default]
    Earliest,
    /// Only records produced from now on.
    Latest,
}

/// What a flow does with a record its target will never take (too large, rejected, not
/// authorized).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnUnproducible {
    /// The record's partition stops there, is reported, and retries it every minute; every
    /// other partition goes on.
    #[default]
    Pause,
    /// The record is skipped (logged and counted) and mirroring goes on: MM2's
    /// `errors.tolerance = all`.
    Skip,
}

/// What a flow does with a record a transform fails on: as with a record the target will
/// not take, `pause` (default) or `skip`.
pub type OnTransformError = OnUnproducible;

/// What a flow does when records of a source partition were deleted before they were
/// mirrored (retention or `DeleteRecords` moved the log start past the stored position):
/// the lost range is reported either way, never passed over in silence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnSourceTruncation {
    /// Mirroring goes on from the partition's log start.
    #[default]
    Continue,
    /// The partition stops where the lost range ends (reported like a record the target
    /// will not take) until the flow is restarted with `continue` or its progress moved.
    Pause,
}

/// One `[[flows]]` entry.
#[derive(Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct FlowConfig {
    /// The source cluster alias.
    pub source: Spanned<String>,
    /// The target cluster alias.
    pub target: Spanned<String>,
    /// Which topics are mirrored (default: `default-topic-filter`). MM2: `topic.filter.class`
    /// (with `topics`, `topics.exclude`).
    #[serde(default)]
    pub topic_filter: Option<Spanned<SlotConfig>>,
    /// Which groups are checkpointed (default: `default-group-filter`). MM2:
    /// `group.filter.class` (with `groups`, `groups.exclude`).
    #[serde(default)]
    pub group_filter: Option<Spanned<SlotConfig>>,
    /// How remote topics are named (default: `default-policy`). MM2:
    /// `replication.policy.class`.
    #[serde(default)]
    pub replication_policy: Option<Spanned<SlotConfig>>,
    /// Which topic configs are copied (default: `default-config-property-filter`). MM2:
    /// `config.property.filter.class`.
    #[serde(default)]
    pub config_property_filter: Option<Spanned<SlotConfig>>,
    /// What becomes of each record in flight: record transforms applied in order (default:
    /// none, records pass untouched). MM2: `transforms` (Connect's single message transforms).
    #[serde(default)]
    pub record_transforms: Vec<Spanned<SlotConfig>>,
    /// What happens to a record a transform fails on (a trap, a timeout, a malformed
    /// answer): `pause` (default: its partition stops there, reported) or `skip` (it is left
    /// out, counted). MM2: `errors.tolerance`.
    #[serde(default)]
    pub on_transform_error: OnTransformError,
    /// How often source topics are listed. MM2: `refresh.topics.interval.seconds`.
    #[serde(default = "default_refresh_topics_interval", with = "humantime_serde")]
    pub refresh_topics_interval: Duration,
    /// An offset sync at least every this many records per partition. MM2: `offset.lag.max`.
    #[serde(default = "default_offset_lag_max")]
    pub offset_lag_max: u64,
    /// Replication factor of created topics (default: the target broker's default). MM2:
    /// `replication.factor`.
    #[serde(default)]
    pub replication_factor: Option<i32>,
    /// Whether heartbeats are emitted. MM2: `emit.heartbeats.enabled`.
    #[serde(default = "default_true")]
    pub emit_heartbeats_enabled: bool,
    /// How often a heartbeat is emitted. MM2: `emit.heartbeats.interval.seconds`.
    #[serde(default = "default_heartbeats_interval", with = "humantime_serde")]
    pub emit_heartbeats_interval: Duration,
    /// Where offset syncs are written: `source` (default) or `target`. MM2:
    /// `offset-syncs.topic.location`.
    #[serde(default)]
    pub offset_syncs_topic_location: SyncsLocation,
    /// How often delayed offset syncs are flushed and progress is stored. MM2:
    /// `offset.flush.interval.ms`.
    #[serde(default = "default_flush_interval", with = "humantime_serde")]
    pub offset_flush_interval: Duration,
    /// Where new partitions start: `earliest` (default) or `latest`. MM2:
    /// `consumer.auto.offset.reset`.
    #[serde(default)]
    pub start_offset: StartOffset,
    /// Whether topic configs are copied: to created topics, and every
    /// `sync_topic_configs_interval` to existing ones (MM2's `sync.topic.configs.enabled`).
    #[serde(default = "default_true")]
    pub sync_topic_configs: bool,
    /// How often existing target topics' configs are synced (MM2's
    /// `sync.topic.configs.interval.seconds`, 10 minutes).
    #[serde(default = "default_config_sync_interval", with = "humantime_serde")]
    pub sync_topic_configs_interval: Duration,
    /// Whether checkpoints are emitted. MM2: `emit.checkpoints.enabled`.
    #[serde(default = "default_true")]
    pub emit_checkpoints_enabled: bool,
    /// How often checkpoints are emitted (the first pass once the offset syncs are read).
    /// MM2: `emit.checkpoints.interval.seconds`.
    #[serde(default = "default_five_seconds", with = "humantime_serde")]
    pub emit_checkpoints_interval: Duration,
    /// How often source consumer groups are listed. MM2: `refresh.groups.interval.seconds`.
    #[serde(default = "default_five_seconds", with = "humantime_serde")]
    pub refresh_groups_interval: Duration,
    /// Whether translated offsets are committed to idle target groups (MM2's
    /// `sync.group.offsets.enabled`, off by default as in MM2).
    #[serde(default)]
    pub sync_group_offsets: bool,
    /// How often group offsets are synced. MM2: `sync.group.offsets.interval.seconds`.
    #[serde(default = "default_five_seconds", with = "humantime_serde")]
    pub sync_group_offsets_interval: Duration,
    /// What happens to a record the target will never take: `pause` (default) or `skip`.
    /// MM2: `errors.tolerance`.
    #[serde(default)]
    pub on_unproducible: OnUnproducible,
    /// What happens when a source partition lost records before they were mirrored:
    /// `continue` (default: reported, mirrored on from the log start) or `pause`.
    #[serde(default)]
    pub on_source_truncation: OnSourceTruncation,
    /// The consumer-group session timeout of the flow's instances: how soon a dead
    /// instance's partitions and duties move to another. MM2: `session.timeout.ms`.
    #[serde(default = "default_session_timeout", with = "humantime_serde")]
    pub session_timeout: Duration,
    /// How long a graceful stop waits for records in flight before it stores progress. MM2:
    /// `task.shutdown.graceful.timeout.ms`.
    #[serde(default = "default_shutdown_timeout", with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// Replication tasks (consumer-group members, each with its own clients) per instance
    /// (default: the number of CPUs, at most 4). MM2: `tasks.max`.
    #[serde(default)]
    pub replication_tasks: Option<u32>,
    /// Whether the flow runs on one instance only: its replication tasks take the routed
    /// partitions themselves and it does the elected duties from its start (no consumer
    /// group to join: the first record within a second of the start), holding a lease on
    /// the source that fences any second instance (docs/scaling.md).
    #[serde(default)]
    pub single_instance: bool,
    /// How long a cluster may be unreachable before the flow reports itself degraded.
    #[serde(default = "default_unreachable_after", with = "humantime_serde")]
    pub unreachable_after: Duration,
    /// Whether a hot reload (or a config reload) may install a replication policy that
    /// gives already-mirrored topics different target names. Off: such a reload is refused
    /// and the running policy keeps serving.
    #[serde(default)]
    pub allow_policy_change: bool,
    /// Whether the flow takes over from a MirrorMaker 2 that mirrored the same clusters: at
    /// its first start (no progress stored yet) its progress is seeded from MM2's offsets
    /// topic on the target (`mm2-offsets.<source>.internal`).
    #[serde(default)]
    pub take_over_from_mm2: bool,
    /// Whether the leader syncs topic ACLs to the target (MM2's `sync.topic.acls.enabled`):
    /// LITERAL source bindings of mirrored topics, renamed, ALLOW WRITE left out, ALLOW ALL
    /// as READ.
    #[serde(default = "default_true")]
    pub sync_topic_acls_enabled: bool,
    /// How often topic ACLs are synced (MM2's `sync.topic.acls.interval.seconds`, 10
    /// minutes).
    #[serde(default = "default_acl_sync_interval", with = "humantime_serde")]
    pub sync_topic_acls_interval: Duration,
    /// Whether synced ACLs whose source binding is gone are deleted from the target (MM2
    /// never deletes; off by default).
    #[serde(default)]
    pub sync_topic_acls_delete: bool,
    /// Whether records and progress are committed in one target transaction (MM2's
    /// `exactly.once.support`; off by default: at-least-once).
    #[serde(default)]
    pub exactly_once: bool,
    /// How often an exactly-once flow commits its transaction (its records become visible
    /// to `read_committed` readers then).
    #[serde(default = "default_transaction_interval", with = "humantime_serde")]
    pub transaction_interval: Duration,
    /// Records at most in one transaction of a shard.
    #[serde(default = "default_transaction_max_records")]
    pub transaction_max_records: u64,
    /// Key and value bytes at most in one transaction of a shard.
    #[serde(default = "default_transaction_max_bytes")]
    pub transaction_max_bytes: u64,
    /// How many shards (transactional ids) an exactly-once flow's partitions are spread
    /// over; fixed at the flow's first start (the shards topic keeps it). MM2: `tasks.max`.
    #[serde(default)]
    pub exactly_once_shards: Option<u32>,
    /// How often the leader audits what was mirrored since its last pass: both sides read
    /// through the exact offset map, every record compared (key, value, headers, timestamp,
    /// order); differences are logged, counted and listed in /status. Off when unset.
    /// Flows with record transforms are not audited (their records differ by design).
    #[serde(default, with = "humantime_serde::option")]
    pub audit_interval: Option<Duration>,
    /// Source records the audit reads a second at most (and as many of their copies).
    #[serde(default = "default_audit_records_per_second")]
    pub audit_records_per_second: u64,
}

fn default_plugins_dir() -> PathBuf {
    PathBuf::from("plugins.d")
}
fn default_memory_limit_mib() -> usize {
    64
}
fn default_call_timeout() -> Duration {
    Duration::from_secs(1)
}
fn default_refresh_topics_interval() -> Duration {
    Duration::from_secs(5)
}
fn default_config_sync_interval() -> Duration {
    Duration::from_secs(600)
}
fn default_acl_sync_interval() -> Duration {
    Duration::from_secs(600)
}
fn default_audit_records_per_second() -> u64 {
    10_000
}
fn default_offset_lag_max() -> u64 {
    100
}
fn default_true() -> bool {
    true
}
fn default_heartbeats_interval() -> Duration {
    Duration::from_secs(1)
}
fn default_five_seconds() -> Duration {
    Duration::from_secs(5)
}
fn default_flush_interval() -> Duration {
    Duration::from_secs(1)
}
fn default_transaction_interval() -> Duration {
    Duration::from_secs(1)
}
fn default_transaction_max_records() -> u64 {
    100_000
}
fn default_transaction_max_bytes() -> u64 {
    64 << 20
}
fn default_session_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_unreachable_after() -> Duration {
    Duration::from_secs(30)
}
fn default_max_component_size_mib() -> usize {
    32
}
fn default_compile_timeout() -> Duration {
    Duration::from_secs(60)
}
