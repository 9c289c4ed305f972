//! MM2's `ReplicationPolicy` with its default bodies, and the two policies MM2 ships.

use crate::config::{Config, Configure};

/// The name of MM2's heartbeats topic.
pub const HEARTBEATS_TOPIC: &str = "heartbeats";

/// How topics are named across clusters (MM2's `ReplicationPolicy`).
///
/// An implementation supplies [`format_remote_topic`](Self::format_remote_topic),
/// [`topic_source`](Self::topic_source) and [`upstream_topic`](Self::upstream_topic);
/// everything else has MM2's default body.
pub trait ReplicationPolicy {
    /// The name on the target of `topic` mirrored from the cluster `source_alias`.
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> String;

    /// The alias of the cluster a remote topic came from; `None` for a local topic.
    fn topic_source(&self, topic: &str) -> Option<String>;

    /// The name one hop upstream; `None` if `topic` is not remote.
    fn upstream_topic(&self, topic: &str) -> Option<String>;

    /// The name on the cluster the topic was first produced to.
    fn original_topic(&self, topic: &str) -> String {
        let mut current = topic.to_string();
        // A policy whose upstream names never converge would loop forever; no sane policy
        // has more hops than characters in the name.
        for _ in 0..=topic.len() {
            match self.upstream_topic(&current) {
                Some(up) if up != current => current = up,
                _ => break,
            }
        }
        current
    }

    /// The heartbeats topic's name.
    fn heartbeats_topic(&self) -> String {
        HEARTBEATS_TOPIC.to_string()
    }

    /// The offset-syncs topic for the target `cluster_alias`.
    fn offset_syncs_topic(&self, cluster_alias: &str) -> String {
        format!("mm2-offset-syncs.{cluster_alias}.internal")
    }

    /// The checkpoints topic for the source `cluster_alias`.
    fn checkpoints_topic(&self, cluster_alias: &str) -> String {
        format!("{cluster_alias}.checkpoints.internal")
    }

    /// Whether `topic` is a heartbeats topic, local or remote.
    fn is_heartbeats_topic(&self, topic: &str) -> bool {
        self.heartbeats_topic() == self.original_topic(topic)
    }

    /// Whether `topic` is a checkpoints topic, local or remote.
    fn is_checkpoints_topic(&self, topic: &str) -> bool {
        topic.ends_with(".checkpoints.internal")
    }

    /// Whether `topic` is one of MM2's own internal topics.
    fn is_mm2_internal_topic(&self, topic: &str) -> bool {
        topic.ends_with(".internal")
    }

    /// Whether `topic` is internal (Kafka's, Connect's or MM2's) and never mirrored.
    fn is_internal_topic(&self, topic: &str) -> bool {
        let kafka_internal = topic.starts_with("__") || topic.starts_with('.');
        let connect_internal = topic.ends_with("-internal") || topic.ends_with(".internal");
        self.is_mm2_internal_topic(topic) || kafka_internal || connect_internal
    }

    /// The batch form of [`format_remote_topic`](Self::format_remote_topic).
    fn format_remote_topics(&self, source_alias: &str, topics: &[String]) -> Vec<String> {
        topics
            .iter()
            .map(|t| self.format_remote_topic(source_alias, t))
            .collect()
    }
}

/// Configuration key of the separator between alias and topic.
pub const SEPARATOR_CONFIG: &str = "replication.policy.separator";
/// Configuration key: whether internal topic names use the separator too.
pub const INTERNAL_SEPARATOR_ENABLED_CONFIG: &str =
    "replication.policy.internal.topic.separator.enabled";
/// Configuration key of the identity policy's source cluster alias.
pub const SOURCE_CLUSTER_ALIAS_CONFIG: &str = "source.cluster.alias";

/// MM2's `DefaultReplicationPolicy`: remote topics are `<source alias><separator><topic>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultReplicationPolicy {
    separator: String,
    internal_separator_enabled: bool,
}

impl Default for DefaultReplicationPolicy {
    fn default() -> Self {
        DefaultReplicationPolicy {
            separator: ".".to_string(),
            internal_separator_enabled: true,
        }
    }
}

impl DefaultReplicationPolicy {
    /// A policy with `separator` (MM2's default is `.`).
    pub fn with_separator(separator: &str) -> Self {
        DefaultReplicationPolicy {
            separator: separator.to_string(),
            ..Self::default()
        }
    }

    /// The separator between alias and topic.
    pub fn separator(&self) -> &str {
        &self.separator
    }

    fn from_known_keys(config: &Config) -> Result<Self, String> {
        let separator = config.get(SEPARATOR_CONFIG).unwrap_or(".").to_string();
        if separator.is_empty() {
            return Err(format!("`{SEPARATOR_CONFIG}` must not be empty"));
        }
        let internal_separator_enabled =
            config.get_bool(INTERNAL_SEPARATOR_ENABLED_CONFIG, true)?;
        Ok(DefaultReplicationPolicy {
            separator,
            internal_separator_enabled,
        })
    }

    fn internal_separator(&self) -> &str {
        if self.internal_separator_enabled {
            &self.separator
        } else {
            "."
        }
    }

    fn internal_suffix(&self) -> String {
        format!("{}internal", self.internal_separator())
    }

    fn checkpoints_suffix(&self) -> String {
        format!(
            "{}checkpoints{}",
            self.internal_separator(),
            self.internal_suffix()
        )
    }
}

impl Configure for DefaultReplicationPolicy {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys(
            "default-policy",
            &[SEPARATOR_CONFIG, INTERNAL_SEPARATOR_ENABLED_CONFIG],
        )?;
        Self::from_known_keys(config)
    }
}

impl ReplicationPolicy for DefaultReplicationPolicy {
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> String {
        format!("{source_alias}{}{topic}", self.separator)
    }

    /// The text before the first separator, as long as a non-empty part follows it
    /// (Java's `String.split` drops trailing empty parts, so `a.` and `a..` are local).
    fn topic_source(&self, topic: &str) -> Option<String> {
        let (source, rest) = topic.split_once(self.separator.as_str())?;
        rest.split(self.separator.as_str())
            .any(|part| !part.is_empty())
            .then(|| source.to_string())
    }

    fn upstream_topic(&self, topic: &str) -> Option<String> {
        let source = self.topic_source(topic)?;
        Some(topic[source.len() + self.separator.len()..].to_string())
    }

    fn offset_syncs_topic(&self, cluster_alias: &str) -> String {
        format!(
            "mm2-offset-syncs{}{cluster_alias}{}",
            self.internal_separator(),
            self.internal_suffix()
        )
    }

    fn checkpoints_topic(&self, cluster_alias: &str) -> String {
        format!("{cluster_alias}{}", self.checkpoints_suffix())
    }

    fn is_checkpoints_topic(&self, topic: &str) -> bool {
        topic.ends_with(&self.checkpoints_suffix())
    }

    fn is_mm2_internal_topic(&self, topic: &str) -> bool {
        topic.ends_with(&self.internal_suffix())
    }
}

/// MM2's `IdentityReplicationPolicy`: remote topics keep their names (heartbeats are still
/// prefixed so replication hops stay visible); the source of any topic is the configured
/// `source.cluster.alias`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdentityReplicationPolicy {
    source_cluster_alias: Option<String>,
    inner: DefaultReplicationPolicy,
}

impl IdentityReplicationPolicy {
    /// An identity policy whose topics come from `source_cluster_alias`.
    pub fn new(source_cluster_alias: Option<&str>) -> Self {
        IdentityReplicationPolicy {
            source_cluster_alias: source_cluster_alias.map(str::to_string),
            inner: DefaultReplicationPolicy::default(),
        }
    }

    fn looks_like_heartbeat(&self, topic: &str) -> bool {
        topic.ends_with(&self.heartbeats_topic())
    }
}

impl Configure for IdentityReplicationPolicy {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys(
            "identity-policy",
            &[
                SEPARATOR_CONFIG,
                INTERNAL_SEPARATOR_ENABLED_CONFIG,
                SOURCE_CLUSTER_ALIAS_CONFIG,
            ],
        )?;
        Ok(IdentityReplicationPolicy {
            source_cluster_alias: config.get(SOURCE_CLUSTER_ALIAS_CONFIG).map(str::to_string),
            inner: DefaultReplicationPolicy::from_known_keys(config)?,
        })
    }
}

impl ReplicationPolicy for IdentityReplicationPolicy {
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> String {
        if self.looks_like_heartbeat(topic) {
            self.inner.format_remote_topic(source_alias, topic)
        } else {
            topic.to_string()
        }
    }

    fn topic_source(&self, topic: &str) -> Option<String> {
        if self.looks_like_heartbeat(topic) {
            self.inner.topic_source(topic)
        } else {
            self.source_cluster_alias.clone()
        }
    }

    fn upstream_topic(&self, topic: &str) -> Option<String> {
        if self.looks_like_heartbeat(topic) {
            self.inner.upstream_topic(topic)
        } else {
            Some(topic.to_string())
        }
    }

    fn original_topic(&self, topic: &str) -> String {
        if self.looks_like_heartbeat(topic) {
            self.inner.original_topic(topic)
        } else {
            topic.to_string()
        }
    }

    fn offset_syncs_topic(&self, cluster_alias: &str) -> String {
        self.inner.offset_syncs_topic(cluster_alias)
    }

    fn checkpoints_topic(&self, cluster_alias: &str) -> String {
        self.inner.checkpoints_topic(cluster_alias)
    }

    fn is_checkpoints_topic(&self, topic: &str) -> bool {
        self.inner.is_checkpoints_topic(topic)
    }

    fn is_mm2_internal_topic(&self, topic: &str) -> bool {
        self.inner.is_mm2_internal_topic(topic)
    }
}

#[cfg(test)]
mod tests;
