//! The admin operations kmirror uses: topics and their partitions and configs, consumer
//! groups and their committed offsets. Each error names the cluster, the operation and the
//! topic or group.

use super::{Cluster, KafkaError, REQUEST_TIMEOUT, TopicPartitions};
use rdkafka::admin::{AdminOptions, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::Arc;

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
    /// Its replication factor (`None`: the broker's default).
    pub replication_factor: Option<i32>,
    /// Topic configs.
    pub configs: Vec<(String, String)>,
}

impl Cluster {
    /// Every topic with its partition count (topics the broker reports an error for are
    /// left out).
    pub async fn topics(&self) -> Result<TopicPartitions, KafkaError> {
        let admin = self.admin().clone();
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
                    TopicReplication::Fixed(t.replication_factor.unwrap_or(-1)),
                );
                for (k, v) in &t.configs {
                    n = n.set(k, v);
                }
                n
            })
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
        match self.admin().create_topics(new.iter(), &opts).await {
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
            .admin()
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
            .admin()
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

    /// Creates a single-partition compacted internal topic if it does not exist.
    pub async fn ensure_internal_topic(
        &self,
        name: &str,
        replication_factor: Option<i32>,
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
        let admin = self.admin().clone();
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
        self.config_with(&[("group.id", group), ("enable.auto.commit", "false")])
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
        let op = || format!("read committed offsets of group {group}");
        let result =
            tokio::task::spawn_blocking(move || client.committed_offsets(tpl, REQUEST_TIMEOUT))
                .await
                .map_err(|e| self.error(op(), e))?
                .map_err(|e| self.error(op(), e))?;
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

    /// The end offsets of `partitions` (one request per broker), through `client`.
    /// Partitions the cluster reports no end for are left out.
    pub async fn end_offsets(
        &self,
        client: &Arc<BaseConsumer>,
        partitions: &[(String, i32)],
    ) -> Result<Vec<((String, i32), i64)>, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in partitions {
            tpl.add_partition_offset(t, *p, Offset::End)
                .map_err(|e| self.error("end offsets", e))?;
        }
        let client = client.clone();
        let result =
            tokio::task::spawn_blocking(move || client.offsets_for_times(tpl, REQUEST_TIMEOUT))
                .await
                .map_err(|e| self.error("end offsets", e))?
                .map_err(|e| self.error("end offsets", e))?;
        Ok(result
            .elements()
            .iter()
            .filter_map(|e| match (e.error(), e.offset()) {
                (Ok(()), Offset::Offset(o)) if o >= 0 => {
                    Some(((e.topic().to_string(), e.partition()), o))
                }
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
        let op = || format!("commit offsets of group {group}");
        tokio::task::spawn_blocking(move || client.commit(&tpl, CommitMode::Sync))
            .await
            .map_err(|e| self.error(op(), e))?
            .map_err(|e| self.error(op(), e))
    }
}
