//! MM2's native implementations (the `kmirror-mm2` crate) seen through the host traits.

use super::{ConfigPropertyFilter, GroupFilter, PluginError, ReplicationPolicy, TopicFilter};

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
