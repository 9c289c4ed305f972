//! The plugin contract as the host sees it: the five roles, their traits, and the error a
//! call can end in. Everything above uses these types; nothing here knows wasmtime,
//! Kafka or the flows.
//!
//! Native built-ins ([`Native`]) and WebAssembly components (the `plugin` runtime)
//! implement the same traits. Calls are fallible because a component can trap, run out of
//! time or memory; a native built-in never fails. A flow holds one implementation of each
//! role in [`FlowRoles`]. Every role gets its own [`Config`]: string key/value pairs from
//! the TOML slot or the CLI's `--config`.

mod error;
mod native;
pub mod transform;

pub use error::{PluginError, TrapKind};
pub use kmirror_mm2::Config;
pub use native::Native;
pub use transform::{ChainLink, Outcome, RecordIn, RecordTransform, Rewritten};

use std::fmt;
use std::sync::Arc;

/// The roles a plugin can play.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// `kmirror:plugin/topic-filter`.
    TopicFilter,
    /// `kmirror:plugin/group-filter`.
    GroupFilter,
    /// `kmirror:plugin/replication-policy`.
    ReplicationPolicy,
    /// `kmirror:plugin/config-property-filter`.
    ConfigPropertyFilter,
    /// `kmirror:plugin/record-transform`.
    RecordTransform,
}

impl Role {
    /// Every role, in WIT order.
    pub const ALL: [Role; 5] = [
        Role::TopicFilter,
        Role::GroupFilter,
        Role::ReplicationPolicy,
        Role::ConfigPropertyFilter,
        Role::RecordTransform,
    ];

    /// The roles a flow has exactly one of (its naming slots, each with an MM2 default);
    /// record transforms are a chain of any length, empty by default.
    pub const SLOTS: [Role; 4] = [
        Role::TopicFilter,
        Role::GroupFilter,
        Role::ReplicationPolicy,
        Role::ConfigPropertyFilter,
    ];

    /// The WIT interface name: `topic-filter`, ...
    pub fn wit_name(self) -> &'static str {
        match self {
            Role::TopicFilter => "topic-filter",
            Role::GroupFilter => "group-filter",
            Role::ReplicationPolicy => "replication-policy",
            Role::ConfigPropertyFilter => "config-property-filter",
            Role::RecordTransform => "record-transform",
        }
    }

    /// The role named `name` (its WIT name).
    pub fn from_wit_name(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.wit_name() == name)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wit_name())
    }
}

/// Decides which source topics are mirrored.
pub trait TopicFilter: Send + Sync {
    /// Whether `topic` should be mirrored.
    fn should_replicate_topic(&self, topic: &str) -> Result<bool, PluginError>;
    /// One answer per name, in order, in one call.
    fn should_replicate_topics(&self, topics: &[String]) -> Result<Vec<bool>, PluginError>;
}

/// Decides which consumer groups are checkpointed and synced.
pub trait GroupFilter: Send + Sync {
    /// Whether `group` should be checkpointed.
    fn should_replicate_group(&self, group: &str) -> Result<bool, PluginError>;
    /// One answer per name, in order, in one call.
    fn should_replicate_groups(&self, groups: &[String]) -> Result<Vec<bool>, PluginError>;
}

/// Decides which topic config properties are copied to the target.
pub trait ConfigPropertyFilter: Send + Sync {
    /// Whether the property `name` is copied.
    fn should_replicate_config_property(&self, name: &str) -> Result<bool, PluginError>;
    /// Whether `name` is copied even when it has the source's default value.
    fn should_replicate_source_default(&self, name: &str) -> Result<bool, PluginError>;
}

/// Names remote topics and recognises internal ones (MM2's `ReplicationPolicy`).
pub trait ReplicationPolicy: Send + Sync {
    /// The target name of `topic` mirrored from `source_alias`.
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> Result<String, PluginError>;
    /// The alias a remote topic came from, `None` for a local topic.
    fn topic_source(&self, topic: &str) -> Result<Option<String>, PluginError>;
    /// The name one hop upstream, `None` if not remote.
    fn upstream_topic(&self, topic: &str) -> Result<Option<String>, PluginError>;
    /// The name on the cluster the topic was first produced to.
    fn original_topic(&self, topic: &str) -> Result<String, PluginError>;
    /// The heartbeats topic's name.
    fn heartbeats_topic(&self) -> Result<String, PluginError>;
    /// The offset-syncs topic for the target `cluster_alias`.
    fn offset_syncs_topic(&self, cluster_alias: &str) -> Result<String, PluginError>;
    /// The checkpoints topic for the source `cluster_alias`.
    fn checkpoints_topic(&self, cluster_alias: &str) -> Result<String, PluginError>;
    /// Whether `topic` is a heartbeats topic, local or remote.
    fn is_heartbeats_topic(&self, topic: &str) -> Result<bool, PluginError>;
    /// Whether `topic` is a checkpoints topic.
    fn is_checkpoints_topic(&self, topic: &str) -> Result<bool, PluginError>;
    /// Whether `topic` is one of MM2's internal topics.
    fn is_mm2_internal_topic(&self, topic: &str) -> Result<bool, PluginError>;
    /// Whether `topic` is internal and never mirrored.
    fn is_internal_topic(&self, topic: &str) -> Result<bool, PluginError>;
    /// The batch form of `format_remote_topic`.
    fn format_remote_topics(
        &self,
        source_alias: &str,
        topics: &[String],
    ) -> Result<Vec<String>, PluginError>;
}

/// One implementation of every role: what a flow decides names with.
#[derive(Clone)]
pub struct FlowRoles {
    /// Which source topics are mirrored.
    pub topic_filter: Arc<dyn TopicFilter>,
    /// Which consumer groups are checkpointed.
    pub group_filter: Arc<dyn GroupFilter>,
    /// How topics are named on the target.
    pub replication_policy: Arc<dyn ReplicationPolicy>,
    /// Which topic configs are copied.
    pub config_property_filter: Arc<dyn ConfigPropertyFilter>,
    /// What becomes of each record, applied in order (empty: records pass untouched).
    pub record_transforms: Vec<ChainLink>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_round_trip() {
        for role in Role::ALL {
            assert_eq!(Role::from_wit_name(role.wit_name()), Some(role));
        }
        assert_eq!(Role::from_wit_name("nope"), None);
    }
}
