//! A topic filter and a group filter from MM2's regex-list settings.
//!
//! Topic filter keys: `topics` (default `.*`) and `topics.exclude` (default MM2's:
//! `.*[\-\.]internal, .*\.replica, __.*`). Group filter keys: `groups` (default `.*`) and
//! `groups.exclude` (default MM2's: `console-consumer-.*, connect-.*, __.*`). Lists are
//! comma-separated, each regex matches the whole name, excludes win.

use kmirror_plugin_sdk::filter::{
    GROUPS_DEFAULT, GROUPS_EXCLUDE_DEFAULT, TOPICS_DEFAULT, TOPICS_EXCLUDE_DEFAULT,
};
use kmirror_plugin_sdk::{Config, Configure, GroupFilter, PatternList, TopicFilter};

/// Names that are included and not excluded.
pub struct RegexFilter {
    include: PatternList,
    exclude: PatternList,
}

impl RegexFilter {
    fn from_keys(config: &Config, keys: [(&str, &str); 2]) -> Result<Self, String> {
        let known: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
        config.check_keys("regex-filter", &known)?;
        let list = |(key, default): (&str, &str)| {
            PatternList::parse(config.get(key).unwrap_or(default))
                .map_err(|e| format!("`{key}`: {e}"))
        };
        Ok(RegexFilter {
            include: list(keys[0])?,
            exclude: list(keys[1])?,
        })
    }

    fn accepts(&self, name: &str) -> bool {
        self.include.matches(name) && !self.exclude.matches(name)
    }
}

/// The topic-filter role of [`RegexFilter`].
pub struct Topics(RegexFilter);

impl Configure for Topics {
    fn configure(config: &Config) -> Result<Self, String> {
        RegexFilter::from_keys(
            config,
            [
                ("topics", TOPICS_DEFAULT),
                ("topics.exclude", TOPICS_EXCLUDE_DEFAULT),
            ],
        )
        .map(Topics)
    }
}

impl TopicFilter for Topics {
    fn should_replicate_topic(&self, topic: &str) -> bool {
        self.0.accepts(topic)
    }
}

/// The group-filter role of [`RegexFilter`].
pub struct Groups(RegexFilter);

impl Configure for Groups {
    fn configure(config: &Config) -> Result<Self, String> {
        RegexFilter::from_keys(
            config,
            [
                ("groups", GROUPS_DEFAULT),
                ("groups.exclude", GROUPS_EXCLUDE_DEFAULT),
            ],
        )
        .map(Groups)
    }
}

impl GroupFilter for Groups {
    fn should_replicate_group(&self, group: &str) -> bool {
        self.0.accepts(group)
    }
}

kmirror_plugin_sdk::export_plugin!(topic_filter: Topics, group_filter: Groups);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_excludes() {
        let t = Topics::configure(&Config::new()).unwrap();
        assert!(t.should_replicate_topic("orders"));
        assert!(!t.should_replicate_topic("__consumer_offsets"));
        let cfg: Config = [("topics", "orders.*"), ("topics.exclude", ".*\\.tmp")]
            .into_iter()
            .collect();
        let t = Topics::configure(&cfg).unwrap();
        assert!(t.should_replicate_topic("orders-eu") && !t.should_replicate_topic("orders.tmp"));
        let g = Groups::configure(&Config::new()).unwrap();
        assert!(!g.should_replicate_group("console-consumer-1") && g.should_replicate_group("app"));
        assert!(
            Groups::configure(&cfg).is_err(),
            "topic keys are not group keys"
        );
    }
}
