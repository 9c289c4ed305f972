//! Admin operations a test does on a broker with its own client (rdkafka's admin API, or
//! Kafka's own `AclCommand` on the JVM), never through kmirror's code: topics with configs,
//! partition growth, config changes, `DeleteRecords` and ACLs.

use super::{Client, kafka, wait_for};
use rdkafka::ClientConfig;
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewPartitions, NewTopic, ResourceSpecifier,
    TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::FromClientConfig;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

fn block<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt")
        .block_on(f)
}

fn admin(addr: &str) -> AdminClient<DefaultClientContext> {
    AdminClient::from_config(ClientConfig::new().set("bootstrap.servers", addr)).expect("admin")
}

/// A topic config as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigValue {
    pub value: Option<String>,
    /// Where it comes from: `DynamicTopic`, `StaticBroker`, `Default`...
    pub source: String,
}

impl Client {
    /// Creates `topic` with `partitions` partitions and the topic configs `configs`.
    pub fn create_topic_with(&self, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
        let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        for (k, v) in configs {
            new = new.set(k, v);
        }
        let res = block(admin(&self.addr).create_topics(&[new], &AdminOptions::new()))
            .expect("create topic");
        assert!(res.iter().all(Result::is_ok), "create {topic}: {res:?}");
        wait_for("the topic to appear", Duration::from_secs(30), || {
            (self.partitions(topic) == Some(partitions)).then_some(())
        });
    }

    /// Raises `topic` to `partitions` partitions (CreatePartitions).
    pub fn grow(&self, topic: &str, partitions: usize) {
        let res = block(admin(&self.addr).create_partitions(
            &[NewPartitions::new(topic, partitions)],
            &AdminOptions::new(),
        ))
        .expect("create partitions");
        assert!(res.iter().all(Result::is_ok), "grow {topic}: {res:?}");
        wait_for("the partitions to appear", Duration::from_secs(30), || {
            (self.partitions(topic) == Some(partitions as i32)).then_some(())
        });
    }

    /// `topic`'s configs (DescribeConfigs).
    pub fn topic_configs(&self, topic: &str) -> BTreeMap<String, ConfigValue> {
        let res = block(
            admin(&self.addr)
                .describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new()),
        )
        .expect("describe configs");
        let resource = res
            .into_iter()
            .next()
            .expect("one resource")
            .unwrap_or_else(|e| panic!("describe {topic}: {e}"));
        resource
            .entries
            .into_iter()
            .map(|e| {
                (
                    e.name,
                    ConfigValue {
                        value: e.value,
                        source: format!("{:?}", e.source),
                    },
                )
            })
            .collect()
    }

    /// The topic configs of `topic` set on the topic itself (not defaults or broker-wide).
    pub fn topic_overrides(&self, topic: &str) -> BTreeMap<String, String> {
        self.topic_configs(topic)
            .into_iter()
            .filter(|(_, v)| v.source == "DynamicTopic")
            .map(|(k, v)| (k, v.value.unwrap_or_default()))
            .collect()
    }

    /// Sets `topic`'s configs to exactly `configs` (AlterConfigs replaces every override).
    pub fn set_topic_configs(&self, topic: &str, configs: &[(&str, &str)]) {
        let mut alter = AlterConfig::new(ResourceSpecifier::Topic(topic));
        for (k, v) in configs {
            alter = alter.set(k, v);
        }
        let res = block(admin(&self.addr).alter_configs(&[alter], &AdminOptions::new()))
            .expect("alter configs");
        assert!(res.iter().all(Result::is_ok), "alter {topic}: {res:?}");
    }

    /// Deletes the records of `topic`[`partition`] before `offset` (DeleteRecords).
    pub fn delete_records(&self, topic: &str, partition: i32, offset: i64) {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
            .expect("tpl");
        let res = block(admin(&self.addr).delete_records(&tpl, &AdminOptions::new()))
            .expect("delete records");
        for e in res.elements() {
            assert!(
                e.error().is_ok(),
                "delete records of {topic}[{partition}]: {:?}",
                e.error()
            );
        }
    }

    /// The first offset of `topic`[`partition`] still in the log.
    pub fn log_start(&self, topic: &str, partition: i32) -> i64 {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .create()
            .expect("consumer");
        c.fetch_watermarks(topic, partition, Duration::from_secs(10))
            .expect("watermarks")
            .0
    }
}

/// Runs Kafka's own `kafka-acls` (`org.apache.kafka.tools.AclCommand`) against `addr` with
/// `args`; returns its standard output. Panics if it fails.
pub fn acl_command(addr: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = kafka::java(dir.path(), "256m")
        .arg("org.apache.kafka.tools.AclCommand")
        .args(["--bootstrap-server", addr])
        .args(args)
        .output()
        .expect("java");
    assert!(
        out.status.success(),
        "kafka-acls {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The ACL bindings on `topic` (literal) as `kafka-acls --list` prints them, one
/// `principal operation permission` triple each, sorted.
pub fn topic_acls(addr: &str, topic: &str) -> Vec<String> {
    let out = acl_command(addr, &["--list", "--topic", topic]);
    let mut acls: Vec<String> = out
        .lines()
        .filter_map(|l| {
            // `(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)`
            let l = l.trim().strip_prefix('(')?.strip_suffix(')')?;
            let field = |name: &str| {
                l.split(", ")
                    .find_map(|f| f.strip_prefix(&format!("{name}=")))
                    .map(str::to_string)
            };
            Some(format!(
                "{} {} {}",
                field("principal")?,
                field("operation")?,
                field("permissionType")?
            ))
        })
        .collect();
    acls.sort();
    acls
}

/// Every topic ACL binding on the cluster at `addr` (`kafka-acls --list`), one
/// `resource pattern principal operation permission` line each, sorted.
pub fn all_topic_acls(addr: &str) -> Vec<String> {
    let out = acl_command(addr, &["--list"]);
    let mut acls = Vec::new();
    let mut resource: Option<(String, String)> = None;
    for line in out.lines() {
        // `Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:`
        if let Some(rest) = line.split("ResourcePattern(").nth(1) {
            let field = |name: &str| {
                rest.split(", ")
                    .find_map(|f| f.strip_prefix(&format!("{name}=")))
                    .map(|v| v.trim_end_matches([')', '`', ':']).to_string())
            };
            resource = (field("resourceType").as_deref() == Some("TOPIC"))
                .then(|| field("name").zip(field("patternType")))
                .flatten();
            continue;
        }
        let (Some((name, pattern)), Some(l)) = (
            &resource,
            line.trim()
                .strip_prefix('(')
                .and_then(|l| l.strip_suffix(')')),
        ) else {
            continue;
        };
        let field = |f: &str| {
            l.split(", ")
                .find_map(|x| x.strip_prefix(&format!("{f}=")))
                .unwrap_or_default()
                .to_string()
        };
        acls.push(format!(
            "{name} {pattern} {} {} {}",
            field("principal"),
            field("operation"),
            field("permissionType")
        ));
    }
    acls.sort();
    acls
}
