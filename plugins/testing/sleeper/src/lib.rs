//! Test component: sleeps (a WASI clock wait, where epoch interruption cannot reach it) in
//! `configure` when configured with `sleep = configure`, or in every role function with
//! `sleep = calls`. It plays every role, so each role function is tried.

use kmirror_plugin_sdk::{
    Config, ConfigPropertyFilter, Configure, GroupFilter, ReplicationPolicy, TopicFilter,
};
use std::time::Duration;

pub struct Sleeper {
    in_calls: bool,
}

fn nap() {
    std::thread::sleep(Duration::from_secs(30));
}

impl Configure for Sleeper {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys("sleeper", &["sleep"])?;
        match config.get("sleep") {
            Some("configure") => {
                nap();
                Ok(Sleeper { in_calls: false })
            }
            Some("calls") => Ok(Sleeper { in_calls: true }),
            _ => Ok(Sleeper { in_calls: false }),
        }
    }
}

impl Sleeper {
    fn maybe_nap(&self) {
        if self.in_calls {
            nap();
        }
    }
}

impl TopicFilter for Sleeper {
    fn should_replicate_topic(&self, _: &str) -> bool {
        self.maybe_nap();
        true
    }
}

impl GroupFilter for Sleeper {
    fn should_replicate_group(&self, _: &str) -> bool {
        self.maybe_nap();
        true
    }
}

impl ConfigPropertyFilter for Sleeper {
    fn should_replicate_config_property(&self, _: &str) -> bool {
        self.maybe_nap();
        true
    }
}

impl ReplicationPolicy for Sleeper {
    fn format_remote_topic(&self, source: &str, topic: &str) -> String {
        self.maybe_nap();
        format!("{source}.{topic}")
    }
    fn topic_source(&self, _: &str) -> Option<String> {
        self.maybe_nap();
        None
    }
    fn upstream_topic(&self, _: &str) -> Option<String> {
        self.maybe_nap();
        None
    }
}

kmirror_plugin_sdk::export_plugin!(
    topic_filter: Sleeper,
    group_filter: Sleeper,
    replication_policy: Sleeper,
    config_property_filter: Sleeper
);
