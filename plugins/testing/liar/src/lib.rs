//! Test component: a replication policy and topic filter whose answers are wrong in the
//! way `lie` says, for the topics whose name starts with `bad` (others get MM2's default):
//!
//! - `huge`: an 8 MiB name; `long`: 300 characters; `empty`: an empty name;
//!   `illegal`: a name with `/` and spaces; `internal`: the flow's offset-syncs topic name;
//! - `trap`: a panic; `count`: a batch answer with one element too many;
//! - `chatty`: writes to stdout and stderr in every call (a WASI guest only).

use kmirror_plugin_sdk::{Config, Configure, ReplicationPolicy, TopicFilter};

pub struct Liar {
    lie: String,
}

impl Configure for Liar {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys("liar", &["lie"])?;
        Ok(Liar {
            lie: config.get("lie").unwrap_or("").to_string(),
        })
    }
}

impl Liar {
    fn chat(&self) {
        if self.lie == "chatty" {
            println!("liar: a line on stdout");
            eprintln!("liar: a line on stderr");
        }
    }
}

impl TopicFilter for Liar {
    fn should_replicate_topic(&self, topic: &str) -> bool {
        self.chat();
        if self.lie == "trap" && topic.starts_with("bad") {
            panic!("liar traps on {topic}");
        }
        true
    }

    fn should_replicate_topics(&self, topics: &[String]) -> Vec<bool> {
        let mut answers: Vec<bool> = topics
            .iter()
            .map(|t| self.should_replicate_topic(t))
            .collect();
        if self.lie == "count" {
            answers.push(true);
        }
        answers
    }
}

impl ReplicationPolicy for Liar {
    fn format_remote_topic(&self, source: &str, topic: &str) -> String {
        self.chat();
        if !topic.starts_with("bad") {
            return format!("{source}.{topic}");
        }
        match self.lie.as_str() {
            "huge" => "x".repeat(8 << 20),
            "long" => "y".repeat(300),
            "empty" => String::new(),
            "illegal" => format!("{source}/{topic} with spaces"),
            "internal" => "mm2-offset-syncs.backup.internal".to_string(),
            "trap" => panic!("liar traps on {topic}"),
            _ => format!("{source}.{topic}"),
        }
    }

    fn topic_source(&self, topic: &str) -> Option<String> {
        self.chat();
        let (source, rest) = topic.split_once('.')?;
        (!rest.is_empty()).then(|| source.to_string())
    }

    fn upstream_topic(&self, topic: &str) -> Option<String> {
        let (_, rest) = topic.split_once('.')?;
        (!rest.is_empty()).then(|| rest.to_string())
    }
}

kmirror_plugin_sdk::export_plugin!(topic_filter: Liar, replication_policy: Liar);
