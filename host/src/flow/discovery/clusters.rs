//! What discovery needs of the two clusters, as a trait: the real clusters in production,
//! a scripted fake in the tests of the loop (this broker serves neither CreatePartitions
//! nor DescribeConfigs entries, and failures are easier to script than to provoke).

use super::rules::Snapshot;
use crate::kafka::{Cluster, Creation, KafkaError, TopicConfigEntry, TopicSpec};
use std::collections::BTreeMap;
use std::future::Future;

/// The source and target of a flow, as discovery uses them.
pub trait Clusters: Send + Sync + 'static {
    /// The source cluster's alias.
    fn source_alias(&self) -> &str;
    /// The target cluster's alias.
    fn target_alias(&self) -> &str;
    /// The source's topics with their partition counts.
    fn source_topics(&self) -> impl Future<Output = Result<Snapshot, KafkaError>> + Send;
    /// The target's topics with their partition counts.
    fn target_topics(&self) -> impl Future<Output = Result<Snapshot, KafkaError>> + Send;
    /// The topic ids of `topics` on the source (a topic deleted and created again under its
    /// name has a new one); topics without one (gone, or a broker without topic ids) are
    /// left out.
    fn source_topic_ids(
        &self,
        topics: Vec<String>,
    ) -> impl Future<Output = Result<BTreeMap<String, String>, KafkaError>> + Send;
    /// Creates topics on the target.
    fn create_topics(
        &self,
        specs: Vec<TopicSpec>,
    ) -> impl Future<Output = Vec<(String, Result<Creation, KafkaError>)>> + Send;
    /// Raises a target topic's partition count.
    fn add_partitions(
        &self,
        topic: String,
        count: i32,
    ) -> impl Future<Output = Result<(), KafkaError>> + Send;
    /// A source topic's configs that may be copied.
    fn source_configs(
        &self,
        topic: String,
    ) -> impl Future<Output = Result<Vec<TopicConfigEntry>, KafkaError>> + Send;
    /// A target topic's effective config values.
    fn target_configs(
        &self,
        topic: String,
    ) -> impl Future<Output = Result<BTreeMap<String, String>, KafkaError>> + Send;
    /// Sets `configs` on a target topic, leaving its other configs alone.
    fn set_target_configs(
        &self,
        topic: String,
        configs: Vec<(String, String)>,
    ) -> impl Future<Output = Result<(), KafkaError>> + Send;
}

/// The real clusters.
#[derive(Clone)]
pub struct Live {
    /// The source cluster.
    pub source: Cluster,
    /// The target cluster.
    pub target: Cluster,
}

impl Clusters for Live {
    fn source_alias(&self) -> &str {
        &self.source.alias
    }
    fn target_alias(&self) -> &str {
        &self.target.alias
    }
    async fn source_topics(&self) -> Result<Snapshot, KafkaError> {
        self.source.topics().await
    }
    async fn target_topics(&self) -> Result<Snapshot, KafkaError> {
        self.target.topics().await
    }
    async fn source_topic_ids(
        &self,
        topics: Vec<String>,
    ) -> Result<BTreeMap<String, String>, KafkaError> {
        self.source.topic_ids(&topics).await
    }
    async fn create_topics(
        &self,
        specs: Vec<TopicSpec>,
    ) -> Vec<(String, Result<Creation, KafkaError>)> {
        self.target.create_topics(&specs).await
    }
    async fn add_partitions(&self, topic: String, count: i32) -> Result<(), KafkaError> {
        self.target.add_partitions(&topic, count).await
    }
    async fn source_configs(&self, topic: String) -> Result<Vec<TopicConfigEntry>, KafkaError> {
        self.source.topic_configs(&topic).await
    }
    async fn target_configs(&self, topic: String) -> Result<BTreeMap<String, String>, KafkaError> {
        self.target.topic_config_values(&topic).await
    }
    async fn set_target_configs(
        &self,
        topic: String,
        configs: Vec<(String, String)>,
    ) -> Result<(), KafkaError> {
        self.target.set_topic_configs(&topic, &configs).await
    }
}
