//! MM2's filter roles and their default implementations.

use crate::config::{Config, Configure};
use crate::pattern::PatternList;

/// Decides which source topics are mirrored (MM2's `TopicFilter`).
pub trait TopicFilter {
    /// Whether `topic` should be mirrored.
    fn should_replicate_topic(&self, topic: &str) -> bool;

    /// One answer per name, in order.
    fn should_replicate_topics(&self, topics: &[String]) -> Vec<bool> {
        topics
            .iter()
            .map(|t| self.should_replicate_topic(t))
            .collect()
    }
}

/// Decides which consumer groups are checkpointed (MM2's `GroupFilter`).
pub trait GroupFilter {
    /// Whether `group` should be checkpointed and synced.
    fn should_replicate_group(&self, group: &str) -> bool;

    /// One answer per name, in order.
    fn should_replicate_groups(&self, groups: &[String]) -> Vec<bool> {
        groups
            .iter()
            .map(|g| self.should_replicate_group(g))
            .collect()
    }
}

/// Decides which topic config properties are copied (MM2's `ConfigPropertyFilter`).
pub trait ConfigPropertyFilter {
    /// Whether the property `name` is copied to the target topic.
    fn should_replicate_config_property(&self, name: &str) -> bool;

    /// Whether `name` is copied even when it has the source's default value.
    fn should_replicate_source_default(&self, _name: &str) -> bool {
        false
    }
}

/// `topics`: the topics to mirror.
pub const TOPICS_CONFIG: &str = "topics";
/// `topics.exclude`: the topics never mirrored; excludes win over includes.
pub const TOPICS_EXCLUDE_CONFIG: &str = "topics.exclude";
/// MM2's default `topics`.
pub const TOPICS_DEFAULT: &str = ".*";
/// MM2's default `topics.exclude`.
pub const TOPICS_EXCLUDE_DEFAULT: &str = ".*[\\-\\.]internal, .*\\.replica, __.*";
/// `groups`: the consumer groups to checkpoint.
pub const GROUPS_CONFIG: &str = "groups";
/// `groups.exclude`: the groups never checkpointed; excludes win over includes.
pub const GROUPS_EXCLUDE_CONFIG: &str = "groups.exclude";
/// MM2's default `groups`.
pub const GROUPS_DEFAULT: &str = ".*";
/// MM2's default `groups.exclude`.
pub const GROUPS_EXCLUDE_DEFAULT: &str = "console-consumer-.*, connect-.*, __.*";
/// `config.properties.exclude`: topic config properties never copied.
pub const CONFIG_PROPERTIES_EXCLUDE_CONFIG: &str = "config.properties.exclude";
/// MM2's default `config.properties.exclude`.
pub const CONFIG_PROPERTIES_EXCLUDE_DEFAULT: &str = "follower\\.replication\\.throttled\\.replicas, \
     leader\\.replication\\.throttled\\.replicas, message\\.timestamp\\.difference\\.max\\.ms, \
     message\\.timestamp\\.type, unclean\\.leader\\.election\\.enable, min\\.insync\\.replicas";
/// `use.defaults.from`: `target` (MM2's default: the target keeps its own defaults) or
/// `source` (copy the source's default values too).
pub const USE_DEFAULTS_FROM_CONFIG: &str = "use.defaults.from";

/// An include list and an exclude list; a name passes when it is included and not excluded.
#[derive(Debug, Clone)]
struct IncludeExclude {
    include: PatternList,
    exclude: PatternList,
}

impl IncludeExclude {
    fn from_config(
        config: &Config,
        (include_key, include_default): (&str, &str),
        (exclude_key, exclude_default): (&str, &str),
    ) -> Result<Self, String> {
        let list = |key: &str, default: &str| {
            PatternList::parse(config.get(key).unwrap_or(default))
                .map_err(|e| format!("`{key}`: {e}"))
        };
        Ok(IncludeExclude {
            include: list(include_key, include_default)?,
            exclude: list(exclude_key, exclude_default)?,
        })
    }

    fn accepts(&self, name: &str) -> bool {
        self.include.matches(name) && !self.exclude.matches(name)
    }
}

/// MM2's `DefaultTopicFilter`: `topics` minus `topics.exclude`.
#[derive(Debug, Clone)]
pub struct DefaultTopicFilter(IncludeExclude);

impl Default for DefaultTopicFilter {
    fn default() -> Self {
        // The defaults are valid regex lists: tested in `defaults_compile`.
        Self::configure(&Config::new()).unwrap_or_else(|e| panic!("built-in default: {e}"))
    }
}

impl Configure for DefaultTopicFilter {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys(
            "default-topic-filter",
            &[TOPICS_CONFIG, TOPICS_EXCLUDE_CONFIG],
        )?;
        IncludeExclude::from_config(
            config,
            (TOPICS_CONFIG, TOPICS_DEFAULT),
            (TOPICS_EXCLUDE_CONFIG, TOPICS_EXCLUDE_DEFAULT),
        )
        .map(DefaultTopicFilter)
    }
}

impl TopicFilter for DefaultTopicFilter {
    fn should_replicate_topic(&self, topic: &str) -> bool {
        self.0.accepts(topic)
    }
}

/// MM2's `DefaultGroupFilter`: `groups` minus `groups.exclude`.
#[derive(Debug, Clone)]
pub struct DefaultGroupFilter(IncludeExclude);

impl Default for DefaultGroupFilter {
    fn default() -> Self {
        Self::configure(&Config::new()).unwrap_or_else(|e| panic!("built-in default: {e}"))
    }
}

impl Configure for DefaultGroupFilter {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys(
            "default-group-filter",
            &[GROUPS_CONFIG, GROUPS_EXCLUDE_CONFIG],
        )?;
        IncludeExclude::from_config(
            config,
            (GROUPS_CONFIG, GROUPS_DEFAULT),
            (GROUPS_EXCLUDE_CONFIG, GROUPS_EXCLUDE_DEFAULT),
        )
        .map(DefaultGroupFilter)
    }
}

impl GroupFilter for DefaultGroupFilter {
    fn should_replicate_group(&self, group: &str) -> bool {
        self.0.accepts(group)
    }
}

/// MM2's `DefaultConfigPropertyFilter`: every property except `config.properties.exclude`;
/// source defaults are copied only with `use.defaults.from = source`.
#[derive(Debug, Clone)]
pub struct DefaultConfigPropertyFilter {
    exclude: PatternList,
    defaults_from_source: bool,
}

impl Default for DefaultConfigPropertyFilter {
    fn default() -> Self {
        Self::configure(&Config::new()).unwrap_or_else(|e| panic!("built-in default: {e}"))
    }
}

impl Configure for DefaultConfigPropertyFilter {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys(
            "default-config-property-filter",
            &[CONFIG_PROPERTIES_EXCLUDE_CONFIG, USE_DEFAULTS_FROM_CONFIG],
        )?;
        let exclude = PatternList::parse(
            config
                .get(CONFIG_PROPERTIES_EXCLUDE_CONFIG)
                .unwrap_or(CONFIG_PROPERTIES_EXCLUDE_DEFAULT),
        )
        .map_err(|e| format!("`{CONFIG_PROPERTIES_EXCLUDE_CONFIG}`: {e}"))?;
        let defaults_from_source = match config.get(USE_DEFAULTS_FROM_CONFIG).unwrap_or("target") {
            "target" => false,
            "source" => true,
            other => {
                return Err(format!(
                    "`{USE_DEFAULTS_FROM_CONFIG}` must be `source` or `target`, got `{other}`"
                ));
            }
        };
        Ok(DefaultConfigPropertyFilter {
            exclude,
            defaults_from_source,
        })
    }
}

impl ConfigPropertyFilter for DefaultConfigPropertyFilter {
    fn should_replicate_config_property(&self, name: &str) -> bool {
        !self.exclude.matches(name)
    }

    fn should_replicate_source_default(&self, _name: &str) -> bool {
        self.defaults_from_source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Config {
        pairs.iter().copied().collect()
    }

    #[test]
    fn defaults_compile() {
        let _ = DefaultTopicFilter::default();
        let _ = DefaultGroupFilter::default();
        let _ = DefaultConfigPropertyFilter::default();
    }

    #[test]
    fn default_topic_filter_follows_mm2() {
        let f = DefaultTopicFilter::default();
        for t in [
            "orders",
            "a.b",
            "heartbeats",
            "us-west.orders",
            "internal",
            "replica",
        ] {
            assert!(f.should_replicate_topic(t), "{t} is mirrored");
        }
        for t in [
            "__consumer_offsets",
            "__transaction_state",
            "connect-configs-internal",
            "mm2-offset-syncs.b.internal",
            "a.checkpoints.internal",
            "orders.replica",
        ] {
            assert!(!f.should_replicate_topic(t), "{t} is not mirrored");
        }
    }

    #[test]
    fn topic_includes_and_excludes_excludes_win() {
        let f = DefaultTopicFilter::configure(&cfg(&[
            ("topics", "orders.*,payments"),
            ("topics.exclude", ".*\\.tmp"),
        ]))
        .unwrap();
        assert!(f.should_replicate_topic("orders"));
        assert!(f.should_replicate_topic("orders-eu"));
        assert!(f.should_replicate_topic("payments"));
        assert!(!f.should_replicate_topic("orders.tmp"));
        assert!(!f.should_replicate_topic("payments-eu"));
        assert!(!f.should_replicate_topic("shipping"));
        // the given exclude replaces MM2's default exclude list
        assert!(f.should_replicate_topic("orders-internal"));
    }

    #[test]
    fn empty_topics_list_mirrors_nothing() {
        let f = DefaultTopicFilter::configure(&cfg(&[("topics", "")])).unwrap();
        assert!(!f.should_replicate_topic("orders"));
    }

    #[test]
    fn default_group_filter_follows_mm2() {
        let f = DefaultGroupFilter::default();
        assert!(f.should_replicate_group("billing"));
        assert!(f.should_replicate_group("my-console-consumer-1"));
        for g in ["console-consumer-1234", "connect-mirror", "__consumer"] {
            assert!(!f.should_replicate_group(g), "{g}");
        }
        let f = DefaultGroupFilter::configure(&cfg(&[
            ("groups", "app-.*"),
            ("groups.exclude", "app-test"),
        ]))
        .unwrap();
        assert!(f.should_replicate_group("app-prod"));
        assert!(!f.should_replicate_group("app-test"));
        assert!(!f.should_replicate_group("other"));
    }

    #[test]
    fn default_config_property_filter_follows_mm2() {
        let f = DefaultConfigPropertyFilter::default();
        for p in [
            "follower.replication.throttled.replicas",
            "leader.replication.throttled.replicas",
            "message.timestamp.difference.max.ms",
            "message.timestamp.type",
            "unclean.leader.election.enable",
            "min.insync.replicas",
        ] {
            assert!(!f.should_replicate_config_property(p), "{p}");
        }
        for p in [
            "cleanup.policy",
            "retention.ms",
            "min.insync.replicasX",
            "segment.bytes",
        ] {
            assert!(f.should_replicate_config_property(p), "{p}");
        }
        assert!(!f.should_replicate_source_default("retention.ms"));
        let f = DefaultConfigPropertyFilter::configure(&cfg(&[
            ("config.properties.exclude", "retention\\..*"),
            ("use.defaults.from", "source"),
        ]))
        .unwrap();
        assert!(!f.should_replicate_config_property("retention.ms"));
        assert!(f.should_replicate_config_property("min.insync.replicas"));
        assert!(f.should_replicate_source_default("retention.ms"));
    }

    #[test]
    fn bad_filter_configuration_is_named() {
        let err = DefaultTopicFilter::configure(&cfg(&[("topics", "(")])).unwrap_err();
        assert!(err.starts_with("`topics`"), "{err}");
        let err = DefaultGroupFilter::configure(&cfg(&[("topics", "x")])).unwrap_err();
        assert!(err.contains("unknown key `topics`"), "{err}");
        let err = DefaultConfigPropertyFilter::configure(&cfg(&[("use.defaults.from", "x")]))
            .unwrap_err();
        assert!(err.contains("use.defaults.from"), "{err}");
    }

    #[test]
    fn batch_equals_single() {
        let f = DefaultTopicFilter::default();
        let names: Vec<String> = ["a", "__b", "c.internal", "d"].map(String::from).to_vec();
        assert_eq!(
            f.should_replicate_topics(&names),
            vec![true, false, false, true]
        );
    }
}
