//! The host's view of every plugin role: plain Rust traits.
//!
//! Native built-ins and WebAssembly components implement the same traits, so the rest of
//! the host never sees wasmtime. Calls are fallible because a component can trap, run out
//! of time or memory; a native built-in never fails.

use crate::plugin::PluginError;
use std::sync::Arc;

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

/// A native implementation of one of MM2's roles, seen through the host traits.
pub struct Native<T>(pub T);

impl<T: kmirror_mm2::TopicFilter + Send + Sync> TopicFilter for Native<T> {
    fn should_replicate_topic(&self, topic: &str) -> Result<bool, PluginError> {
        Ok(self.0.should_replicate_topic(topic))
    }
    fn should_replicate_topics(&self, topics: &[String]) -> Result<Vec<bool>, PluginError> {
        Ok(self.0.should_replicate_topics(topics))
    }
}

impl<T: kmirror_mm2::GroupFilter + Send + Sync> GroupFilter for Native<T> {
    fn should_replicate_group(&self, group: &str) -> Result<bool, PluginError> {
        Ok(self.0.should_replicate_group(group))
    }
    fn should_replicate_groups(&self, groups: &[String]) -> Result<Vec<bool>, PluginError> {
        Ok(self.0.should_replicate_groups(groups))
    }
}

impl<T: kmirror_mm2::ConfigPropertyFilter + Send + Sync> ConfigPropertyFilter for Native<T> {
    fn should_replicate_config_property(&self, name: &str) -> Result<bool, PluginError> {
        Ok(self.0.should_replicate_config_property(name))
    }
    fn should_replicate_source_default(&self, name: &str) -> Result<bool, PluginError> {
        Ok(self.0.should_replicate_source_default(name))
    }
}

impl<T: kmirror_mm2::ReplicationPolicy + Send + Sync> ReplicationPolicy for Native<T> {
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> Result<String, PluginError> {
        Ok(self.0.format_remote_topic(source_alias, topic))
    }
    fn topic_source(&self, topic: &str) -> Result<Option<String>, PluginError> {
        Ok(self.0.topic_source(topic))
    }
    fn upstream_topic(&self, topic: &str) -> Result<Option<String>, PluginError> {
        Ok(self.0.upstream_topic(topic))
    }
    fn original_topic(&self, topic: &str) -> Result<String, PluginError> {
        Ok(self.0.original_topic(topic))
    }
    fn heartbeats_topic(&self) -> Result<String, PluginError> {
        Ok(self.0.heartbeats_topic())
    }
    fn offset_syncs_topic(&self, cluster_alias: &str) -> Result<String, PluginError> {
        Ok(self.0.offset_syncs_topic(cluster_alias))
    }
    fn checkpoints_topic(&self, cluster_alias: &str) -> Result<String, PluginError> {
        Ok(self.0.checkpoints_topic(cluster_alias))
    }
    fn is_heartbeats_topic(&self, topic: &str) -> Result<bool, PluginError> {
        Ok(self.0.is_heartbeats_topic(topic))
    }
    fn is_checkpoints_topic(&self, topic: &str) -> Result<bool, PluginError> {
        Ok(self.0.is_checkpoints_topic(topic))
    }
    fn is_mm2_internal_topic(&self, topic: &str) -> Result<bool, PluginError> {
        Ok(self.0.is_mm2_internal_topic(topic))
    }
    fn is_internal_topic(&self, topic: &str) -> Result<bool, PluginError> {
        Ok(self.0.is_internal_topic(topic))
    }
    fn format_remote_topics(
        &self,
        source_alias: &str,
        topics: &[String],
    ) -> Result<Vec<String>, PluginError> {
        Ok(self.0.format_remote_topics(source_alias, topics))
    }
}

/// One role of a loaded plugin, native or WebAssembly.
#[derive(Clone)]
pub enum RoleHandle {
    /// A topic filter.
    TopicFilter(Arc<dyn TopicFilter>),
    /// A group filter.
    GroupFilter(Arc<dyn GroupFilter>),
    /// A replication policy.
    ReplicationPolicy(Arc<dyn ReplicationPolicy>),
    /// A config-property filter.
    ConfigPropertyFilter(Arc<dyn ConfigPropertyFilter>),
}
