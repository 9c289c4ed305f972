//! Test component: a topic filter that panics (a wasm `unreachable` trap) on the topic
//! `panic` and accepts every other topic.

use kmirror_plugin_sdk::{Config, Configure, TopicFilter};

pub struct Trap;

impl Configure for Trap {
    fn configure(_: &Config) -> Result<Self, String> {
        Ok(Trap)
    }
}

impl TopicFilter for Trap {
    fn should_replicate_topic(&self, topic: &str) -> bool {
        if topic == "panic" {
            panic!("asked to panic");
        }
        true
    }
}

kmirror_plugin_sdk::export_plugin!(topic_filter: Trap);
