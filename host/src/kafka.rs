//! Kafka clients (rdkafka): one place builds every client config, and wraps the admin
//! operations kmirror needs with errors that name the cluster, operation and topic.

use crate::config::validate::ResolvedCluster;
use crate::flow::discovery::Snapshot;
use rdkafka::ClientConfig;
use rdkafka::admin::{
    AdminClient, AdminOptions, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, StreamConsumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::FutureProducer;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::Arc;
use std::time::Duration;

/// A Kafka operation that failed.
#[derive(Debug, thiserror::Error)]
#[error("cluster {cluster}: {operation}: {message}")]
pub struct KafkaError {
    /// The cluster alias.
    pub cluster: String,
    /// What was being done, naming the topic where there is one.
    pub operation: String,
    /// librdkafka's message.
    pub message: String,
}

/// A topic config entry as the source reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfigEntry {
    /// The property name.
    pub name: String,
    /// Its value.
    pub value: String,
    /// Whether it is the broker's default.
    pub is_default: bool,
}

/// A consumer group as the broker lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInfo {
    /// The group id.
    pub name: String,
    /// The broker's state name (`Empty`, `Stable`, ...).
    pub state: String,
    /// How many members it has.
    pub members: usize,
}

/// A committed offset of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The committed offset.
    pub offset: i64,
    /// Its metadata.
    pub metadata: String,
}

/// A topic to create.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    /// Its name.
    pub name: String,
    /// Its partition count.
    pub partitions: i32,
    /// Its replication factor (-1: the broker's default).
    pub replication_factor: i32,
    /// Topic configs.
    pub configs: Vec<(String, String)>,
}

/// How long metadata and admin requests may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One cluster's clients.
#[derive(Clone)]
pub struct Cluster {
    /// Its alias.
    pub alias: String,
    config: ClientConfig,
    admin: Arc<AdminClient<DefaultClientContext>>,
}

impl Cluster {
    /// Builds the clients (librdkafka connects lazily).
    pub fn new(cluster: &ResolvedCluster) -> Result<Self, KafkaError> {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &cluster.bootstrap_servers);
        config.set("client.id", format!("kmirror-{}", cluster.alias));
        for (k, v) in &cluster.librdkafka {
            config.set(k, v);
        }
        let admin = config.create().map_err(|e| KafkaError {
            cluster: cluster.alias.clone(),
            operation: "create admin client".into(),
            message: e.to_string(),
        })?;
        Ok(Cluster {
            alias: cluster.alias.clone(),
            config,
            admin: Arc::new(admin),
        })
    }

    fn error(&self, operation: impl Into<String>, message: impl ToString) -> KafkaError {
        KafkaError {
            cluster: self.alias.clone(),
            operation: operation.into(),
            message: message.to_string(),
        }
    }

    /// A producer with kmirror's delivery settings (idempotent, acks=all) plus `extra`.
    pub fn producer(&self, extra: &[(&str, &str)]) -> Result<FutureProducer, KafkaError> {
        let mut config = self.config.clone();
        config
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("compression.type", "none");
        for (k, v) in extra {
            config.set(*k, *v);
        }
        config
            .create()
            .map_err(|e| self.error("create producer", e))
    }

    /// A consumer in `group` that never commits or stores offsets by itself.
    pub fn consumer(
        &self,
        group: &str,
        extra: &[(&str, &str)],
    ) -> Result<StreamConsumer, KafkaError> {
        let mut config = self.config.clone();
        config
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("isolation.level", "read_committed");
        for (k, v) in extra {
            config.set(*k, *v);
        }
        config
            .create()
            .map_err(|e| self.error(format!("create consumer for group {group}"), e))
    }

    /// Every topic with its partition count (topics the broker reports an error for are
    /// left out).
    pub async fn topics(&self) -> Result<Snapshot, KafkaError> {
        let admin = self.admin.clone();
        let metadata = tokio::task::spawn_blocking(move || {
            admin.inner().fetch_metadata(None, REQUEST_TIMEOUT)
        })
        .await
        .map_err(|e| self.error("list topics", e))?
        .map_err(|e| self.error("list topics", e))?;
        Ok(metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| (t.name().to_string(), t.partitions().len() as i32))
            .collect())
    }

    /// Creates `topics`; a topic that already exists counts as created.
    pub async fn create_topics(
        &self,
        topics: &[TopicSpec],
    ) -> Vec<(String, Result<(), KafkaError>)> {
        let new: Vec<NewTopic> = topics
            .iter()
            .map(|t| {
                let mut n = NewTopic::new(
                    &t.name,
                    t.partitions,
                    TopicReplication::Fixed(t.replication_factor),
                );
                for (k, v) in &t.configs {
                    n = n.set(k, v);
                }
                n
            })
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
        match self.admin.create_topics(new.iter(), &opts).await {
            Err(e) => topics
                .iter()
                .map(|t| {
                    (
                        t.name.clone(),
                        Err(self.error(format!("create topic {}", t.name), &e)),
                    )
                })
                .collect(),
            Ok(results) => results
                .into_iter()
                .map(|r| match r {
                    Ok(name) => (name, Ok(())),
                    Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => (name, Ok(())),
                    Err((name, code)) => {
                        let e = self.error(format!("create topic {name}"), code);
                        (name, Err(e))
                    }
                })
                .collect(),
        }
    }

    /// Raises `topic`'s partition count to `count`.
    pub async fn add_partitions(&self, topic: &str, count: i32) -> Result<(), KafkaError> {
        let op = || format!("add partitions to {topic} (to {count})");
        let new = NewPartitions::new(topic, count as usize);
        let opts = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
        let results = self
            .admin
            .create_partitions([&new], &opts)
            .await
            .map_err(|e| self.error(op(), e))?;
        match results.into_iter().next() {
            Some(Err((_, code))) => Err(self.error(op(), code)),
            _ => Ok(()),
        }
    }

    /// `topic`'s configs (empty when the broker reports none).
    pub async fn topic_configs(&self, topic: &str) -> Result<Vec<TopicConfigEntry>, KafkaError> {
        let op = || format!("describe configs of {topic}");
        let opts = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
        let results = self
            .admin
            .describe_configs([&ResourceSpecifier::Topic(topic)], &opts)
            .await
            .map_err(|e| self.error(op(), e))?;
        let mut entries = Vec::new();
        for result in results {
            let resource = result.map_err(|e| self.error(op(), e))?;
            for e in resource.entries {
                if let (Some(value), false) = (e.value, e.is_sensitive) {
                    entries.push(TopicConfigEntry {
                        name: e.name,
                        value,
                        is_default: e.is_default,
                    });
                }
            }
        }
        Ok(entries)
    }

    /// Every consumer group of the cluster.
    pub async fn groups(&self) -> Result<Vec<GroupInfo>, KafkaError> {
        self.group_list(None).await
    }

    /// One group, `None` if the cluster does not know it.
    pub async fn group(&self, name: &str) -> Result<Option<GroupInfo>, KafkaError> {
        Ok(self
            .group_list(Some(name))
            .await?
            .into_iter()
            .find(|g| g.name == name && g.state != "Dead"))
    }

    async fn group_list(&self, name: Option<&str>) -> Result<Vec<GroupInfo>, KafkaError> {
        let admin = self.admin.clone();
        let name = name.map(str::to_string);
        let list = tokio::task::spawn_blocking(move || {
            admin
                .inner()
                .fetch_group_list(name.as_deref(), REQUEST_TIMEOUT)
                .map(|l| {
                    l.groups()
                        .iter()
                        .map(|g| GroupInfo {
                            name: g.name().to_string(),
                            state: g.state().to_string(),
                            members: g.members().len(),
                        })
                        .collect::<Vec<_>>()
                })
        })
        .await
        .map_err(|e| self.error("list consumer groups", e))?;
        list.map_err(|e| self.error("list consumer groups", e))
    }

    /// A client acting for consumer group `group` (to read or write its committed offsets;
    /// it never joins the group).
    pub fn group_client(&self, group: &str) -> Result<Arc<BaseConsumer>, KafkaError> {
        let mut config = self.config.clone();
        config
            .set("group.id", group)
            .set("enable.auto.commit", "false");
        config
            .create()
            .map(Arc::new)
            .map_err(|e| self.error(format!("create a client for group {group}"), e))
    }

    /// `group`'s committed offsets for `partitions` (partitions without one are left out).
    pub async fn committed(
        &self,
        client: &Arc<BaseConsumer>,
        group: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<Committed>, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in partitions {
            tpl.add_partition(t, *p);
        }
        let client = client.clone();
        let result =
            tokio::task::spawn_blocking(move || client.committed_offsets(tpl, REQUEST_TIMEOUT))
                .await
                .map_err(|e| self.error(format!("read committed offsets of group {group}"), e))?
                .map_err(|e| self.error(format!("read committed offsets of group {group}"), e))?;
        Ok(result
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) if o >= 0 => Some(Committed {
                    topic: e.topic().to_string(),
                    partition: e.partition(),
                    offset: o,
                    metadata: e.metadata().to_string(),
                }),
                _ => None,
            })
            .collect())
    }

    /// Commits `offsets` (topic, partition, offset) for `group`. Kafka refuses it while the
    /// group has members.
    pub async fn commit(
        &self,
        client: &Arc<BaseConsumer>,
        group: &str,
        offsets: &[(String, i32, i64)],
    ) -> Result<(), KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for (t, p, o) in offsets {
            tpl.add_partition_offset(t, *p, Offset::Offset(*o))
                .map_err(|e| self.error("commit", e))?;
        }
        let client = client.clone();
        tokio::task::spawn_blocking(move || client.commit(&tpl, CommitMode::Sync))
            .await
            .map_err(|e| self.error(format!("commit offsets of group {group}"), e))?
            .map_err(|e| self.error(format!("commit offsets of group {group}"), e))
    }

    /// A consumer reading `topic` partition 0 from the beginning, outside any group, and
    /// the topic's end offset when it started.
    pub async fn reader(&self, topic: &str) -> Result<(StreamConsumer, i64), KafkaError> {
        let mut config = self.config.clone();
        config
            .set("group.id", format!("kmirror-reader-{topic}"))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false");
        let consumer: StreamConsumer = config
            .create()
            .map_err(|e| self.error(format!("read {topic}"), e))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Beginning)
            .map_err(|e| self.error(format!("read {topic}"), e))?;
        consumer
            .assign(&tpl)
            .map_err(|e| self.error(format!("read {topic}"), e))?;
        let t = topic.to_string();
        let (consumer, high) = tokio::task::spawn_blocking(move || {
            let high = consumer
                .fetch_watermarks(&t, 0, REQUEST_TIMEOUT)
                .map(|(_, h)| h);
            (consumer, high)
        })
        .await
        .map_err(|e| self.error(format!("end offset of {topic}"), e))?;
        let high = high.map_err(|e| self.error(format!("end offset of {topic}"), e))?;
        Ok((consumer, high))
    }

    /// Creates a single-partition compacted internal topic if it does not exist.
    pub async fn ensure_internal_topic(
        &self,
        name: &str,
        replication_factor: i32,
    ) -> Result<(), KafkaError> {
        if self.topics().await?.contains_key(name) {
            return Ok(());
        }
        let spec = TopicSpec {
            name: name.to_string(),
            partitions: 1,
            replication_factor,
            configs: vec![("cleanup.policy".into(), "compact".into())],
        };
        self.create_topics(&[spec])
            .await
            .into_iter()
            .map(|(_, r)| r)
            .collect::<Result<(), _>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn cluster(props: &[(&str, &str)]) -> Result<Cluster, KafkaError> {
        Cluster::new(&ResolvedCluster {
            alias: "a".into(),
            bootstrap_servers: "127.0.0.1:1".into(),
            librdkafka: props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        })
    }

    #[test]
    fn tls_and_sasl_scram_are_built_in() {
        assert!(cluster(&[("security.protocol", "SSL")]).is_ok());
        let r = cluster(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
        ]);
        assert!(r.is_ok(), "{:?}", r.err());
    }

    #[test]
    fn bad_librdkafka_properties_are_named() {
        let err = cluster(&[("no.such.property", "1")])
            .err()
            .expect("rejected")
            .to_string();
        assert!(
            err.contains("cluster a") && err.contains("no.such.property"),
            "{err}"
        );
    }
}
