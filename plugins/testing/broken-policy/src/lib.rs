//! Test component: a replication policy with a classic bug, kept to prove that
//! `kmirror plugin check` catches it. It takes the source alias from the *last* separator
//! instead of the first, so `upstream-topic(format-remote-topic(a, "x.y"))` is `y`, not
//! `x.y`.

use kmirror_plugin_sdk::{Config, Configure, ReplicationPolicy};

pub struct BrokenPolicy;

impl Configure for BrokenPolicy {
    fn configure(_: &Config) -> Result<Self, String> {
        Ok(BrokenPolicy)
    }
}

impl ReplicationPolicy for BrokenPolicy {
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> String {
        format!("{source_alias}.{topic}")
    }

    fn topic_source(&self, topic: &str) -> Option<String> {
        topic.rsplit_once('.').map(|(source, _)| source.to_string())
    }

    fn upstream_topic(&self, topic: &str) -> Option<String> {
        topic.rsplit_once('.').map(|(_, rest)| rest.to_string())
    }
}

kmirror_plugin_sdk::export_plugin!(replication_policy: BrokenPolicy);
