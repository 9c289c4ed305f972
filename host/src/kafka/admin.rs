//! The admin operations kmirror uses: topics and their partitions and configs, consumer
//! groups and their committed offsets. Each error names the cluster, the operation and the
//! topic or group.

use super::{Cluster, KafkaError, REQUEST_TIMEOUT, TopicPartitions};
use rdkafka::admin::{AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
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

/// Whether a topic config entry, as a cluster describes it, may be copied to another
/// cluster at all (MM2's `MirrorSourceConnector.targetConfig`): not sensitive, not read-only,
/// and not a static broker setting (`server.properties` would become an explicit override
/// on every target topic, which a target that does not know the key refuses). The
/// config-property filter decides the rest.
pub fn copyable(entry: &rdkafka::admin::ConfigEntry) -> bool {
    entry.value.is_some()
        && !entry.is_sensitive
        && !entry.is_read_only
        && entry.source != rdkafka::admin::ConfigSource::StaticBroker
}

/// What creating a topic did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Creation {
    /// It was created as asked.
    Created,
    /// It existed already (with whatever partitions it has).
    Existed,
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

/// How many metadata records one CreateTopics request may make the controller write, at
/// most: a KRaft controller refuses a request that would write more than 10,000 (a topic
/// is one record, plus one per partition and one per config) with POLICY_VIOLATION for
/// every topic in it — found mirroring 10,000 new topics at once into Apache Kafka 4.3.
pub const MAX_RECORDS_PER_CREATE: usize = 5_000;

/// `topics` split into consecutive ranges that each make at most
/// [`MAX_RECORDS_PER_CREATE`] records (a topic larger than that alone is a range of its own).
pub fn creation_batches(topics: &[TopicSpec]) -> Vec<std::ops::Range<usize>> {
    let mut batches = Vec::new();
    let (mut start, mut records) = (0, 0);
    for (i, t) in topics.iter().enumerate() {
        let own = 1 + t.partitions.max(0) as usize + t.configs.len();
        if i > start && records + own > MAX_RECORDS_PER_CREATE {
            batches.push(start..i);
            (start, records) = (i, 0);
        }
        records += own;
    }
    if start < topics.len() {
        batches.push(start..topics.len());
    }
    batches
}

/// An existing internal topic kmirror cannot use as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "internal topic {topic} on cluster {cluster} has {partitions} partitions, but must have exactly one ({why}): delete it so kmirror creates it again with one partition, or point the flow at a cluster where it has one"
)]
pub struct MisshapenTopic {
    /// The cluster alias.
    pub cluster: String,
    /// The topic.
    pub topic: String,
    /// Its partition count.
    pub partitions: i32,
    /// Why it must have one.
    pub why: &'static str,
}

/// Whether an existing internal topic with `partitions` partitions can serve: one that must
/// have a single partition (`single` says why) is refused with more.
pub fn check_internal_partitions(
    cluster: &str,
    topic: &str,
    partitions: i32,
    single: Option<&'static str>,
) -> Result<(), MisshapenTopic> {
    match single {
        Some(why) if partitions != 1 => Err(MisshapenTopic {
            cluster: cluster.to_string(),
            topic: topic.to_string(),
            partitions,
            why,
        }),
        _ => Ok(()),
    }
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

    /// Creates `topics`, in requests of at most [`MAX_RECORDS_PER_CREATE`] metadata records
    /// each; a topic that already exists is reported as such.
    pub async fn create_topics(
        &self,
        topics: &[TopicSpec],
    ) -> Vec<(String, Result<Creation, KafkaError>)> {
        let mut out = Vec::with_capacity(topics.len());
        for batch in creation_batches(topics) {
            out.extend(self.create_topics_at_once(&topics[batch]).await);
        }
        out
    }

    /// Creates `topics` with one CreateTopics request.
    async fn create_topics_at_once(
        &self,
        topics: &[TopicSpec],
    ) -> Vec<(String, Result<Creation, KafkaError>)> {
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
                    Ok(name) => (name, Ok(Creation::Created)),
                    Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => {
                        (name, Ok(Creation::Existed))
                    }
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

    /// `topic`'s configs that may be copied to another cluster ([`copyable`]; empty when
    /// the broker reports none).
    pub async fn topic_configs(&self, topic: &str) -> Result<Vec<TopicConfigEntry>, KafkaError> {
        Ok(self
            .describe_topic_configs(topic)
            .await?
            .into_iter()
            .filter(copyable)
            .filter_map(|e| {
                Some(TopicConfigEntry {
                    value: e.value?,
                    name: e.name,
                    is_default: e.is_default,
                })
            })
            .collect())
    }

    /// `topic`'s effective config values (whatever their source), by name.
    pub async fn topic_config_values(
        &self,
        topic: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, KafkaError> {
        Ok(self
            .describe_topic_configs(topic)
            .await?
            .into_iter()
            .filter_map(|e| Some((e.name, e.value?)))
            .collect())
    }

    async fn describe_topic_configs(
        &self,
        topic: &str,
    ) -> Result<Vec<rdkafka::admin::ConfigEntry>, KafkaError> {
        self.describe_topic_entries(topic).await
    }

    /// Whether the internal topic `name`, if it exists, can serve (see
    /// [`check_internal_partitions`]).
    pub async fn check_internal_topic(
        &self,
        name: &str,
        single: Option<&'static str>,
    ) -> Result<Result<(), MisshapenTopic>, KafkaError> {
        Ok(match self.topics().await?.get(name) {
            Some(partitions) => check_internal_partitions(&self.alias, name, *partitions, single),
            None => Ok(()),
        })
    }

    /// Creates a single-partition compacted internal topic if it does not exist. An
    /// existing one with several partitions is refused (the inner error) when the topic
    /// must have one — `single` says why — and accepted otherwise.
    pub async fn ensure_internal_topic(
        &self,
        name: &str,
        replication_factor: Option<i32>,
        single: Option<&'static str>,
    ) -> Result<Result<(), MisshapenTopic>, KafkaError> {
        if let Some(partitions) = self.topics().await?.get(name) {
            return Ok(check_internal_partitions(
                &self.alias,
                name,
                *partitions,
                single,
            ));
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
            .try_for_each(|(_, r)| r.map(|_| ()))
            .map(Ok)
    }

    /// Every consumer group of the cluster.
    pub async fn groups(&self) -> Result<Vec<GroupInfo>, KafkaError> {
        self.group_list(None).await
    }

    /// One group, `None` if the cluster does not know it; an error if its coordinator
    /// answered with one (moving, loading), which must never read as an empty group.
    pub async fn group(&self, name: &str) -> Result<Option<GroupInfo>, KafkaError> {
        described(self.group_list(Some(name)).await?, name)
            .map_err(|e| self.error(format!("describe group {name}"), e))
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
        let result = tokio::task::spawn_blocking(move || {
            // The group's coordinator moving or loading (a broker just started) answers
            // for a moment with a coordinator error: asked again, within the timeout.
            let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
            loop {
                match client.committed_offsets(tpl.clone(), REQUEST_TIMEOUT) {
                    Err(e) if coordinator_moving(&e) && std::time::Instant::now() < deadline => {
                        std::thread::sleep(std::time::Duration::from_millis(200));
                    }
                    other => return other,
                }
            }
        })
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

    /// How long the cluster keeps a group's committed offsets after their last commit
    /// (`offsets.retention.minutes` of a broker; `None` when it does not say: Tansu, no
    /// DESCRIBE_CONFIGS on the cluster).
    pub async fn offsets_retention(&self) -> Option<std::time::Duration> {
        use rdkafka::admin::{AdminOptions, ResourceSpecifier};
        let admin = self.admin().clone();
        let broker = tokio::task::spawn_blocking(move || {
            admin
                .inner()
                .fetch_metadata(None, REQUEST_TIMEOUT)
                .ok()
                .and_then(|m| m.brokers().first().map(|b| b.id()))
        })
        .await
        .ok()
        .flatten()?;
        let options = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
        let described = self
            .admin()
            .describe_configs(&[ResourceSpecifier::Broker(broker)], &options)
            .await
            .ok()?;
        let minutes = described
            .into_iter()
            .flatten()
            .flat_map(|r| r.entries)
            .find(|e| e.name == "offsets.retention.minutes")?
            .value?
            .parse::<u64>()
            .ok()?;
        Some(std::time::Duration::from_secs(minutes.saturating_mul(60)))
    }

    /// Commits `offsets` (topic, partition, offset) for `group`; an error unless Kafka
    /// stored every partition (naming those it refused, and how many it stored). Kafka
    /// refuses it while the group has members.
    pub async fn commit(
        &self,
        client: &Arc<BaseConsumer>,
        group: &str,
        offsets: &[(String, i32, i64)],
    ) -> Result<(), KafkaError> {
        let outcome = self.commit_reporting(client, group, offsets).await?;
        let refused: Vec<String> = outcome
            .refused()
            .take(10)
            .map(|(t, p, at, why)| format!("{t}[{p}] at {at}: {}", why.as_deref().unwrap_or("")))
            .collect();
        if refused.is_empty() {
            return Ok(());
        }
        Err(self.error(
            format!("commit offsets of group {group}"),
            format!(
                "{} of {} partition(s) stored; refused: {}",
                outcome.stored(),
                outcome.partitions.len(),
                refused.join("; ")
            ),
        ))
    }

    /// Commits `offsets` (topic, partition, offset) for `group`; which partitions Kafka
    /// stored, and why not the others. Kafka refuses it while the group has members.
    pub async fn commit_reporting(
        &self,
        client: &Arc<BaseConsumer>,
        group: &str,
        offsets: &[(String, i32, i64)],
    ) -> Result<super::commit::CommitOutcome, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for (t, p, o) in offsets {
            tpl.add_partition_offset(t, *p, Offset::Offset(*o))
                .map_err(|e| self.error("commit", e))?;
        }
        let client = client.clone();
        let op = || format!("commit offsets of group {group}");
        tokio::task::spawn_blocking(move || super::commit::commit_sync(&client, &tpl))
            .await
            .map_err(|e| self.error(op(), e))
    }
}

/// Whether `e` is a group coordinator moving or loading: retried.
fn coordinator_moving(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::error::RDKafkaErrorCode as Code;
    matches!(
        e.rdkafka_error_code(),
        Some(
            Code::NotCoordinator | Code::CoordinatorLoadInProgress | Code::CoordinatorNotAvailable
        )
    )
}

/// Group `name` among the groups DescribeGroups answered: `None` if it is not there or is
/// `Dead`. A group the coordinator answered with an error (NOT_COORDINATOR,
/// COORDINATOR_LOAD_IN_PROGRESS) has no state and no members, and librdkafka's list does
/// not carry its error: that is an error here, not an empty group.
fn described(groups: Vec<GroupInfo>, name: &str) -> Result<Option<GroupInfo>, String> {
    match groups.into_iter().find(|g| g.name == name) {
        Some(g) if g.state.is_empty() => Err(format!(
            "the coordinator did not describe group {name} (it answered with an error, e.g. moving or loading)"
        )),
        Some(g) if g.state == "Dead" => Ok(None),
        found => Ok(found),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::admin::{ConfigEntry, ConfigSource};

    fn entry(name: &str, source: ConfigSource, read_only: bool, sensitive: bool) -> ConfigEntry {
        ConfigEntry {
            name: name.into(),
            value: Some("v".into()),
            is_default: source == ConfigSource::Default,
            source,
            is_read_only: read_only,
            is_sensitive: sensitive,
        }
    }

    #[test]
    fn a_group_its_coordinator_did_not_describe_is_an_error_not_an_empty_group() {
        let g = |state: &str, members: usize| GroupInfo {
            name: "g".into(),
            state: state.into(),
            members,
        };
        assert_eq!(
            described(vec![g("Stable", 2)], "g"),
            Ok(Some(g("Stable", 2)))
        );
        assert_eq!(described(vec![g("Empty", 0)], "g"), Ok(Some(g("Empty", 0))));
        assert_eq!(described(vec![g("Dead", 0)], "g"), Ok(None), "unknown");
        assert_eq!(described(vec![], "g"), Ok(None));
        assert!(
            described(vec![g("", 0)], "g").is_err(),
            "NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS: no state, no members"
        );
    }

    #[test]
    fn creations_are_split_below_the_controllers_record_limit() {
        let spec = |partitions: i32, configs: usize| TopicSpec {
            name: "t".into(),
            partitions,
            replication_factor: None,
            configs: vec![("cleanup.policy".into(), "compact".into()); configs],
        };
        // 10,000 one-partition topics with one config: 3 records each, 1,666 a request.
        let many: Vec<TopicSpec> = (0..10_000).map(|_| spec(1, 1)).collect();
        let batches = creation_batches(&many);
        assert_eq!(batches.len(), 7);
        assert_eq!(batches[0], 0..1_666);
        assert_eq!(batches.last().unwrap().end, 10_000);
        for (a, b) in batches.iter().zip(batches.iter().skip(1)) {
            assert_eq!(a.end, b.start, "consecutive, nothing left out");
        }
        for b in &batches {
            let records: usize = many[b.clone()].iter().map(|t| 2 + t.configs.len()).sum();
            assert!(records <= MAX_RECORDS_PER_CREATE, "{b:?}: {records}");
        }
        // A topic bigger than the limit goes alone; small ones stay one request.
        let mixed = vec![spec(3, 0), spec(6_000, 0), spec(2, 2)];
        assert_eq!(creation_batches(&mixed), vec![0..1, 1..2, 2..3]);
        assert_eq!(creation_batches(&[spec(1, 0), spec(1, 0)]), vec![0..2]);
        assert!(creation_batches(&[]).is_empty());
    }

    #[test]
    fn static_broker_read_only_and_sensitive_configs_are_never_copied() {
        assert!(copyable(&entry(
            "cleanup.policy",
            ConfigSource::DynamicTopic,
            false,
            false
        )));
        assert!(copyable(&entry(
            "retention.ms",
            ConfigSource::DynamicBroker,
            false,
            false
        )));
        assert!(
            copyable(&entry("segment.bytes", ConfigSource::Default, false, false)),
            "the filter decides defaults"
        );
        assert!(
            !copyable(&entry("log.dirs", ConfigSource::StaticBroker, false, false)),
            "server.properties"
        );
        assert!(
            !copyable(&entry(
                "message.format.version",
                ConfigSource::DynamicTopic,
                true,
                false
            )),
            "read-only"
        );
        assert!(
            !copyable(&entry(
                "sasl.jaas.config",
                ConfigSource::DynamicTopic,
                false,
                true
            )),
            "sensitive"
        );
        let none = ConfigEntry {
            value: None,
            ..entry("x", ConfigSource::DynamicTopic, false, false)
        };
        assert!(!copyable(&none));
    }

    #[test]
    fn an_internal_topic_that_must_have_one_partition_is_refused_with_more() {
        let why = "its one partition elects the flow's leader";
        assert_eq!(
            check_internal_partitions("primary", "kmirror-leader.b.internal", 1, Some(why)),
            Ok(())
        );
        let refused =
            check_internal_partitions("primary", "kmirror-leader.b.internal", 3, Some(why))
                .expect_err("three partitions");
        let text = refused.to_string();
        for part in [
            "kmirror-leader.b.internal",
            "cluster primary",
            "3 partitions",
            why,
            "delete it",
        ] {
            assert!(text.contains(part), "{text}");
        }
        assert_eq!(
            check_internal_partitions("backup", "heartbeats", 3, None),
            Ok(()),
            "heartbeats: any"
        );
    }
}
