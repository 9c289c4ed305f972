//! Test component: a topic filter that never returns for the topic `loop` and accepts
//! every other topic.

use kmirror_plugin_sdk::{Config, Configure, TopicFilter};

pub struct LoopForever;

impl Configure for LoopForever {
    fn configure(_: &Config) -> Result<Self, String> {
        Ok(LoopForever)
    }
}

impl TopicFilter for LoopForever {
    // For "loop" the loop never ends on purpose: the sandbox's fuel or deadline stops it.
    #[allow(clippy::while_immutable_condition)]
    fn should_replicate_topic(&self, topic: &str) -> bool {
        let mut n: u64 = 0;
        while topic == "loop" {
            n = std::hint::black_box(n.wrapping_add(1));
        }
        n == 0
    }
}

kmirror_plugin_sdk::export_plugin!(topic_filter: LoopForever);
