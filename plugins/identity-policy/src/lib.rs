//! MM2's `IdentityReplicationPolicy` as a plugin: topics keep their names on the target.
//!
//! Heartbeats are still prefixed (`<alias>.heartbeats`) so replication hops stay visible.
//! Configuration: `source.cluster.alias` (the alias `topic-source` reports) and MM2's
//! separator keys for the heartbeats topic.

use kmirror_plugin_sdk::{Config, Configure, DefaultReplicationPolicy, ReplicationPolicy};

/// The policy: the configured source alias and a default policy for heartbeats.
pub struct IdentityPolicy {
    source_alias: Option<String>,
    heartbeats: DefaultReplicationPolicy,
}

impl IdentityPolicy {
    fn is_heartbeat(&self, topic: &str) -> bool {
        topic.ends_with("heartbeats")
    }
}

impl Configure for IdentityPolicy {
    fn configure(config: &Config) -> Result<Self, String> {
        let source_alias = config.get("source.cluster.alias").map(str::to_string);
        let rest: Config = config
            .entries()
            .iter()
            .filter(|(k, _)| k != "source.cluster.alias")
            .cloned()
            .collect();
        let heartbeats = DefaultReplicationPolicy::configure(&rest)
            .map_err(|e| e.replace("default-policy", "identity-policy"))?;
        Ok(IdentityPolicy {
            source_alias,
            heartbeats,
        })
    }
}

impl ReplicationPolicy for IdentityPolicy {
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> String {
        match self.is_heartbeat(topic) {
            true => self.heartbeats.format_remote_topic(source_alias, topic),
            false => topic.to_string(),
        }
    }

    fn topic_source(&self, topic: &str) -> Option<String> {
        match self.is_heartbeat(topic) {
            true => self.heartbeats.topic_source(topic),
            false => self.source_alias.clone(),
        }
    }

    fn upstream_topic(&self, topic: &str) -> Option<String> {
        match self.is_heartbeat(topic) {
            true => self.heartbeats.upstream_topic(topic),
            false => Some(topic.to_string()),
        }
    }

    fn offset_syncs_topic(&self, cluster_alias: &str) -> String {
        self.heartbeats.offset_syncs_topic(cluster_alias)
    }

    fn checkpoints_topic(&self, cluster_alias: &str) -> String {
        self.heartbeats.checkpoints_topic(cluster_alias)
    }

    fn is_checkpoints_topic(&self, topic: &str) -> bool {
        self.heartbeats.is_checkpoints_topic(topic)
    }

    fn is_mm2_internal_topic(&self, topic: &str) -> bool {
        self.heartbeats.is_mm2_internal_topic(topic)
    }
}

kmirror_plugin_sdk::export_plugin!(replication_policy: IdentityPolicy);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_names_prefixes_heartbeats() {
        let cfg: Config = [("source.cluster.alias", "primary")].into_iter().collect();
        let p = IdentityPolicy::configure(&cfg).unwrap();
        assert_eq!(p.format_remote_topic("primary", "orders"), "orders");
        assert_eq!(
            p.format_remote_topic("primary", "heartbeats"),
            "primary.heartbeats"
        );
        assert_eq!(p.topic_source("orders").as_deref(), Some("primary"));
        assert_eq!(p.original_topic("b.a.heartbeats"), "heartbeats");
        assert!(IdentityPolicy::configure(&[("x", "y")].into_iter().collect()).is_err());
    }
}
