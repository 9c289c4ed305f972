//! An environment-prefixed replication policy: `orders` from `us-west` becomes
//! `prod-us-west.orders` on the target, and the mapping reverses exactly.
//!
//! Configuration: `prefix` (default `prod-`) marks remote topics; `separator` (default `.`)
//! separates the source alias from the topic. A topic without the prefix is local.
//! Multi-hop names nest: `prod-b.prod-a.orders` came from `b`, which had it from `a`.

use kmirror_plugin_sdk::{Config, Configure, ReplicationPolicy};

/// The policy's prefix and separator.
pub struct ProdPrefix {
    prefix: String,
    separator: String,
}

impl Configure for ProdPrefix {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys("prod-prefix", &["prefix", "separator"])?;
        let prefix = config.get("prefix").unwrap_or("prod-").to_string();
        let separator = config.get("separator").unwrap_or(".").to_string();
        if prefix.is_empty() || separator.is_empty() {
            return Err("`prefix` and `separator` must not be empty".to_string());
        }
        Ok(ProdPrefix { prefix, separator })
    }
}

impl ProdPrefix {
    /// `(alias, upstream topic)` of a remote name.
    fn split(&self, topic: &str) -> Option<(String, String)> {
        let rest = topic.strip_prefix(&self.prefix)?;
        let (alias, upstream) = rest.split_once(self.separator.as_str())?;
        (!upstream.is_empty()).then(|| (alias.to_string(), upstream.to_string()))
    }
}

impl ReplicationPolicy for ProdPrefix {
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> String {
        format!("{}{source_alias}{}{topic}", self.prefix, self.separator)
    }

    fn topic_source(&self, topic: &str) -> Option<String> {
        self.split(topic).map(|(alias, _)| alias)
    }

    fn upstream_topic(&self, topic: &str) -> Option<String> {
        self.split(topic).map(|(_, upstream)| upstream)
    }
}

kmirror_plugin_sdk::export_plugin!(replication_policy: ProdPrefix);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_reverses() {
        let p = ProdPrefix::configure(&Config::new()).unwrap();
        assert_eq!(
            p.format_remote_topic("us-west", "orders"),
            "prod-us-west.orders"
        );
        assert_eq!(
            p.topic_source("prod-us-west.orders").as_deref(),
            Some("us-west")
        );
        assert_eq!(
            p.upstream_topic("prod-us-west.orders.v2").as_deref(),
            Some("orders.v2")
        );
        assert_eq!(p.topic_source("us-west.orders"), None);
        assert_eq!(p.original_topic("prod-b.prod-a.orders"), "orders");
        assert!(p.is_heartbeats_topic("prod-a.heartbeats"));
    }
}
