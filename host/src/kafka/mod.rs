//! Kafka clients (rdkafka): one place builds every client configuration, and wraps the
//! operations kmirror needs with errors that name the cluster, the operation and the topic
//! or group.
//!
//! - this module: [`ClusterSettings`], [`Cluster`] and [`KafkaError`];
//! - [`clients`]: producers and consumers with kmirror's guarantees;
//! - [`admin`]: topics, partitions, configs, consumer groups and their offsets;
//! - [`commit`]: synchronous commits that say which partitions Kafka stored;
//! - [`groups`]: committed offsets of many groups at once, from the one admin client;
//! - [`acls`]: topic ACL bindings (describe, create, delete), from the one admin client;
//! - [`internal`]: writing to and reading back the single-partition internal topics
//!   (offset syncs, checkpoints, heartbeats);
//! - [`secrets`]: properties shown by an allow-list, error text scrubbed, offline checks.

pub mod acls;
pub mod admin;
pub mod assignment;
pub mod clients;
pub mod commit;
pub mod configs;
mod connection;
mod describe;
pub mod groups;
pub mod internal;
pub mod secrets;

pub use admin::{Committed, Creation, GroupInfo, TopicConfigEntry, TopicSpec};

use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::DeliveryFuture;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A Kafka operation that failed.
#[derive(Debug, thiserror::Error)]
#[error("cluster {cluster}: {operation}: {message}")]
pub struct KafkaError {
    /// The cluster alias.
    pub cluster: String,
    /// What was being done, naming the topic or group where there is one.
    pub operation: String,
    /// librdkafka's message.
    pub message: String,
}

impl KafkaError {
    /// A short, stable name of the error's kind (for rate-limited logging).
    pub fn kind(&self) -> &'static str {
        "kafka"
    }
}

/// How long metadata and admin requests may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why `name` is not a valid Kafka topic name, or `None` if it is: 1 to 249 characters of
/// `a-z A-Z 0-9 . _ -`, and neither `.` nor `..`.
pub fn invalid_topic_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a topic name cannot be empty".into());
    }
    if name.len() > 249 {
        return Some(format!(
            "{} characters, over Kafka's limit of 249",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Some("`.` and `..` are not topic names".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Some(format!(
            "{c:?} is not allowed in a topic name (only a-z, A-Z, 0-9, `.`, `_` and `-`)"
        ));
    }
    None
}

/// Topic name -> partition count.
pub type TopicPartitions = BTreeMap<String, i32>;

/// One cluster as configured: its alias and client properties.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// The alias (what replication policies see: `primary.orders`).
    pub alias: String,
    /// `bootstrap.servers`.
    pub bootstrap_servers: String,
    /// librdkafka passthrough properties.
    pub librdkafka: BTreeMap<String, String>,
}

impl fmt::Debug for ClusterSettings {
    /// Only properties known not to be secret are shown; every other value is `***`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("alias", &self.alias)
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("librdkafka", &secrets::shown(&self.librdkafka))
            .finish()
    }
}

/// One cluster's clients.
#[derive(Clone)]
pub struct Cluster {
    /// Its alias.
    pub alias: String,
    config: ClientConfig,
    admin: Arc<AdminClient<DefaultClientContext>>,
    /// Values never to appear in a message.
    hidden: Arc<Vec<String>>,
    /// Why connections failed lately (authentication, TLS), from librdkafka's events.
    connection: Arc<connection::LastFailure>,
}

impl Cluster {
    /// Builds the clients (librdkafka connects lazily).
    pub fn new(cluster: &ClusterSettings) -> Result<Self, KafkaError> {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &cluster.bootstrap_servers);
        config.set("client.id", format!("kmirror-{}", cluster.alias));
        for (k, v) in &cluster.librdkafka {
            config.set(k, v);
        }
        let hidden = Arc::new(secrets::hidden_values(&cluster.librdkafka));
        let admin = config.create().map_err(|e| KafkaError {
            cluster: cluster.alias.clone(),
            operation: "create admin client".into(),
            message: secrets::scrub(&e.to_string(), &hidden),
        })?;
        let admin = Arc::new(admin);
        let failure = Arc::new(connection::LastFailure::default());
        connection::watch(
            cluster.alias.clone(),
            Arc::downgrade(&admin),
            hidden.clone(),
            failure.clone(),
        );
        Ok(Cluster {
            alias: cluster.alias.clone(),
            config,
            admin,
            hidden,
            connection: failure,
        })
    }

    /// An error of `operation`, its librdkafka text scrubbed of this cluster's secrets; a
    /// transport failure or timeout says why connections failed lately, where librdkafka
    /// said (an authentication refused, a certificate not trusted).
    pub(crate) fn error(&self, operation: impl Into<String>, message: impl ToString) -> KafkaError {
        let mut message = secrets::scrub(&message.to_string(), &self.hidden);
        let lower = message.to_ascii_lowercase();
        if [
            "transport",
            "brokers down",
            "allbrokersdown",
            "timed out",
            "timedout",
        ]
        .iter()
        .any(|k| lower.contains(k))
            && let Some(why) = self.connection.recent()
        {
            message = format!("{message} (last connection failure: {why})");
        }
        KafkaError {
            cluster: self.alias.clone(),
            operation: operation.into(),
            message,
        }
    }

    pub(crate) fn admin(&self) -> &Arc<AdminClient<DefaultClientContext>> {
        &self.admin
    }

    /// The cluster's client configuration with `settings` on top.
    pub(crate) fn config_with(&self, settings: &[(&str, &str)]) -> ClientConfig {
        let mut config = self.config.clone();
        for (k, v) in settings {
            config.set(*k, *v);
        }
        config
    }
}

/// The offset a produced record got, or why it was not taken: the one mapping of a
/// delivery result.
pub async fn delivered(delivery: DeliveryFuture) -> Result<i64, String> {
    match delivery.await {
        Ok(Ok(d)) => Ok(d.offset),
        Ok(Err((e, _))) => Err(e.to_string()),
        Err(_) => Err("the producer was dropped".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(props: &[(&str, &str)]) -> Result<Cluster, KafkaError> {
        Cluster::new(&ClusterSettings {
            alias: "a".into(),
            bootstrap_servers: "127.0.0.1:1".into(),
            librdkafka: props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        })
    }

    #[test]
    fn topic_names_follow_kafkas_rules() {
        assert_eq!(invalid_topic_name("prod-primary.orders_2"), None);
        assert_eq!(invalid_topic_name(&"a".repeat(249)), None);
        for bad in ["", ".", "..", "a/b", "a b", "ordres\u{e9}"] {
            assert!(invalid_topic_name(bad).is_some(), "{bad:?}");
        }
        assert!(
            invalid_topic_name(&"a".repeat(250))
                .unwrap()
                .contains("249")
        );
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
    fn every_compression_codec_is_built_in_and_reaches_the_producer() {
        for codec in ["gzip", "snappy", "lz4", "zstd"] {
            let c = cluster(&[("compression.type", codec)]).expect("cluster");
            let _ = c
                .producer(&[])
                .unwrap_or_else(|e| panic!("{codec} is not built in: {e}"));
            assert_eq!(
                c.producer_config(&[]).get("compression.type"),
                Some(codec),
                "the user's codec wins"
            );
        }
        let c = cluster(&[]).expect("cluster");
        assert_eq!(
            c.producer_config(&[]).get("compression.type"),
            Some("none"),
            "kmirror's default"
        );
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
