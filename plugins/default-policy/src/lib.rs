//! MM2's `DefaultReplicationPolicy` as a plugin: remote topics are `<alias><separator><topic>`.
//!
//! Configuration: `replication.policy.separator` (default `.`) and
//! `replication.policy.internal.topic.separator.enabled` (default `true`), as in MM2.

use kmirror_plugin_sdk::{Config, Configure, DefaultReplicationPolicy, ReplicationPolicy};

/// The policy: its separator, and MM2's internal topic names for that separator.
pub struct DefaultPolicy {
    separator: String,
    internal_names: DefaultReplicationPolicy,
}

impl Configure for DefaultPolicy {
    fn configure(config: &Config) -> Result<Self, String> {
        // The SDK's policy validates the keys and knows MM2's internal topic names.
        let internal_names = DefaultReplicationPolicy::configure(config)?;
        let separator = internal_names.separator().to_string();
        Ok(DefaultPolicy {
            separator,
            internal_names,
        })
    }
}

impl ReplicationPolicy for DefaultPolicy {
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> String {
        [source_alias, &self.separator, topic].concat()
    }

    fn topic_source(&self, topic: &str) -> Option<String> {
        // Like Java's String.split: trailing empty parts do not count.
        let mut parts = topic.split(self.separator.as_str());
        let first = parts.next()?;
        parts.any(|p| !p.is_empty()).then(|| first.to_string())
    }

    fn upstream_topic(&self, topic: &str) -> Option<String> {
        let source = self.topic_source(topic)?;
        topic
            .get(source.len() + self.separator.len()..)
            .map(str::to_string)
    }

    fn offset_syncs_topic(&self, cluster_alias: &str) -> String {
        self.internal_names.offset_syncs_topic(cluster_alias)
    }

    fn checkpoints_topic(&self, cluster_alias: &str) -> String {
        self.internal_names.checkpoints_topic(cluster_alias)
    }

    fn is_checkpoints_topic(&self, topic: &str) -> bool {
        self.internal_names.is_checkpoints_topic(topic)
    }

    fn is_mm2_internal_topic(&self, topic: &str) -> bool {
        self.internal_names.is_mm2_internal_topic(topic)
    }
}

kmirror_plugin_sdk::export_plugin!(replication_policy: DefaultPolicy);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_like_mm2() {
        let p = DefaultPolicy::configure(&Config::new()).unwrap();
        assert_eq!(p.format_remote_topic("us-west", "topic1"), "us-west.topic1");
        assert_eq!(p.topic_source("us-west.topic1").as_deref(), Some("us-west"));
        assert_eq!(p.upstream_topic("topic1"), None);
        assert_eq!(p.topic_source("a."), None);
        assert_eq!(p.original_topic("c.b.a.orders"), "orders");
    }
}
