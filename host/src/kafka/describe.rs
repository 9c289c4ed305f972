//! DescribeConfigs of one topic through librdkafka directly: the safe rdkafka crate (0.39)
//! drops each resource's own error and hands back an empty config list for a topic the
//! principal may not describe (`TOPIC_AUTHORIZATION_FAILED`), which a caller cannot tell
//! from a topic with no configs — found on Apache Kafka with an ACL denying
//! DESCRIBE_CONFIGS: the topic was created on the target without its configs. Here a
//! resource's error is an error.

use super::acls::{Failure, answer, items, options, text};
use super::{Cluster, KafkaError};
use rdkafka::admin::{ConfigEntry, ConfigSource};
use rdkafka_sys as sys;
use std::ffi::CString;

/// What librdkafka's config source enum says, as the rdkafka crate names it.
fn source_of(s: sys::rd_kafka_ConfigSource_t) -> ConfigSource {
    use sys::rd_kafka_ConfigSource_t as S;
    match s {
        S::RD_KAFKA_CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG => ConfigSource::DynamicTopic,
        S::RD_KAFKA_CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG => ConfigSource::DynamicBroker,
        S::RD_KAFKA_CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG => {
            ConfigSource::DynamicDefaultBroker
        }
        S::RD_KAFKA_CONFIG_SOURCE_STATIC_BROKER_CONFIG => ConfigSource::StaticBroker,
        S::RD_KAFKA_CONFIG_SOURCE_DEFAULT_CONFIG => ConfigSource::Default,
        _ => ConfigSource::Unknown,
    }
}

impl Cluster {
    /// The error of `operation` on this cluster from librdkafka's `f` (its text, and its
    /// error name when it has one).
    fn failed(&self, operation: impl Into<String>, f: Failure) -> KafkaError {
        let message = if f.name.is_empty() {
            f.message
        } else {
            format!("{} ({})", f.message, f.name)
        };
        self.error(operation, message)
    }

    /// Every config entry of `topic` (DescribeConfigs); an error naming the topic when the
    /// request or the topic's own answer failed.
    pub(super) async fn describe_topic_entries(
        &self,
        topic: &str,
    ) -> Result<Vec<ConfigEntry>, KafkaError> {
        let op = || format!("describe configs of {topic}");
        let name = CString::new(topic).map_err(|_| self.error(op(), "the name has a NUL byte"))?;
        let described = self
            .on_admin(move |rk, queue| {
                // SAFETY: `rk` and `queue` are valid for this call (on_admin); the resource
                // and options are copied by DescribeConfigs and destroyed right after it;
                // the result is read while its event lives (answer).
                unsafe {
                    let mut resource = sys::rd_kafka_ConfigResource_new(
                        sys::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
                        name.as_ptr(),
                    );
                    if resource.is_null() {
                        return Err(Failure::local("not a valid resource name"));
                    }
                    let opts = options(
                        rk,
                        sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS,
                    );
                    sys::rd_kafka_DescribeConfigs(rk, &mut resource, 1, opts, queue);
                    sys::rd_kafka_ConfigResource_destroy(resource);
                    sys::rd_kafka_AdminOptions_destroy(opts);
                    answer(queue, |event| {
                        let result = sys::rd_kafka_event_DescribeConfigs_result(event);
                        if result.is_null() {
                            return Err(Failure::local("not a DescribeConfigs answer"));
                        }
                        let mut n = 0;
                        let resources = items(
                            sys::rd_kafka_DescribeConfigs_result_resources(result, &mut n),
                            n,
                        );
                        let Some(&r) = resources.first() else {
                            return Err(Failure::local("no resource in the answer"));
                        };
                        let err = sys::rd_kafka_ConfigResource_error(r);
                        if err != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                            return Err(Failure {
                                name: text(sys::rd_kafka_err2name(err)),
                                message: text(sys::rd_kafka_ConfigResource_error_string(r)),
                            });
                        }
                        let mut m = 0;
                        let configs = items(sys::rd_kafka_ConfigResource_configs(r, &mut m), m);
                        Ok(configs
                            .iter()
                            .map(|&e| {
                                let value = sys::rd_kafka_ConfigEntry_value(e);
                                ConfigEntry {
                                    name: text(sys::rd_kafka_ConfigEntry_name(e)),
                                    value: (!value.is_null()).then(|| text(value)),
                                    source: source_of(sys::rd_kafka_ConfigEntry_source(e)),
                                    is_read_only: sys::rd_kafka_ConfigEntry_is_read_only(e) != 0,
                                    is_default: sys::rd_kafka_ConfigEntry_is_default(e) != 0,
                                    is_sensitive: sys::rd_kafka_ConfigEntry_is_sensitive(e) != 0,
                                }
                            })
                            .collect())
                    })
                    .and_then(|r| r)
                }
            })
            .await
            .and_then(|r| r);
        described.map_err(|f| self.failed(op(), f))
    }
}

impl Cluster {
    /// The topic id of each of `topics` that exists (DescribeTopics): a topic deleted and
    /// created again under the same name has a new id. A topic the answer has no id for (an
    /// error of its own, or a broker that serves no topic ids) is left out.
    pub async fn topic_ids(
        &self,
        topics: &[String],
    ) -> Result<std::collections::BTreeMap<String, String>, KafkaError> {
        if topics.is_empty() {
            return Ok(Default::default());
        }
        let names: Vec<CString> = topics
            .iter()
            .filter_map(|t| CString::new(t.as_str()).ok())
            .collect();
        let described = self
            .on_admin(move |rk, queue| {
                // SAFETY: `rk` and `queue` are valid for this call (on_admin); the name
                // pointers live in `names` for the whole call and the collection copies
                // them; the collection and options are destroyed right after the request;
                // the result is read while its event lives (answer).
                unsafe {
                    let mut pointers: Vec<*const std::ffi::c_char> =
                        names.iter().map(|n| n.as_ptr()).collect();
                    let collection = sys::rd_kafka_TopicCollection_of_topic_names(
                        pointers.as_mut_ptr(),
                        pointers.len(),
                    );
                    if collection.is_null() {
                        return Err(Failure::local("no topic collection"));
                    }
                    let opts = options(
                        rk,
                        sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
                    );
                    sys::rd_kafka_DescribeTopics(rk, collection, opts, queue);
                    sys::rd_kafka_TopicCollection_destroy(collection);
                    sys::rd_kafka_AdminOptions_destroy(opts);
                    answer(queue, |event| {
                        let result = sys::rd_kafka_event_DescribeTopics_result(event);
                        if result.is_null() {
                            return Err(Failure::local("not a DescribeTopics answer"));
                        }
                        let mut n = 0;
                        let described = items(
                            sys::rd_kafka_DescribeTopics_result_topics(result, &mut n),
                            n,
                        );
                        Ok(described
                            .iter()
                            .filter(|&&d| sys::rd_kafka_TopicDescription_error(d).is_null())
                            .filter_map(|&d| {
                                let id = sys::rd_kafka_TopicDescription_topic_id(d);
                                if id.is_null()
                                    || (sys::rd_kafka_Uuid_most_significant_bits(id) == 0
                                        && sys::rd_kafka_Uuid_least_significant_bits(id) == 0)
                                {
                                    return None;
                                }
                                Some((
                                    text(sys::rd_kafka_TopicDescription_name(d)),
                                    text(sys::rd_kafka_Uuid_base64str(id)),
                                ))
                            })
                            .collect())
                    })
                    .and_then(|r| r)
                }
            })
            .await
            .and_then(|r| r);
        described.map_err(|f| self.failed("describe topics", f))
    }
}
