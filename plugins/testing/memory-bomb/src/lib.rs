//! Test component: a topic filter that allocates without bound for the topic `bomb`
//! and accepts every other topic.

use kmirror_plugin_sdk::{Config, Configure, TopicFilter};

pub struct MemoryBomb;

impl Configure for MemoryBomb {
    fn configure(_: &Config) -> Result<Self, String> {
        Ok(MemoryBomb)
    }
}

impl TopicFilter for MemoryBomb {
    // For "bomb" the loop never ends on purpose: it allocates until the sandbox's memory
    // limit stops the plugin.
    #[allow(clippy::while_immutable_condition)]
    fn should_replicate_topic(&self, topic: &str) -> bool {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        while topic == "bomb" {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
        hoard.is_empty()
    }
}

kmirror_plugin_sdk::export_plugin!(topic_filter: MemoryBomb);
