//! Producers and consumers with kmirror's guarantees, built from a cluster's settings.
//!
//! kmirror's own settings are applied last where its guarantees depend on them (idempotence,
//! `acks=all`, no auto-commit, `read_committed`; validation refuses those keys), and first
//! where they are only defaults (`linger.ms`, `compression.type`): the user's librdkafka
//! settings win there.

use super::{Cluster, KafkaError};
use rdkafka::client::Client;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, StreamConsumer};
use rdkafka::producer::{BaseProducer, FutureProducer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientConfig, ClientContext};
use std::ffi::CString;
use std::time::Duration;

/// Producer defaults a user may override.
const PRODUCER_DEFAULTS: [(&str, &str); 2] = [("linger.ms", "5"), ("compression.type", "none")];

/// Consumer defaults a user may override. librdkafka stops fetching a partition for
/// `fetch.queue.backoff.ms` (default 1 s) once the local queue is full: a consumer whose
/// reader pauses a moment (a full producer queue, a commit) then idles for a whole second.
/// Measured, one exactly-once shard at 1 KiB: 15,000 records/s, one fetch burst per second.
const CONSUMER_DEFAULTS: [(&str, &str); 1] = [("fetch.queue.backoff.ms", "10")];

/// Producer settings kmirror's delivery guarantees depend on.
const PRODUCER_GUARANTEES: [(&str, &str); 2] = [("enable.idempotence", "true"), ("acks", "all")];

impl Cluster {
    /// The user's librdkafka value for `key` if set, else `default`: for kmirror's
    /// defaults that trade memory for speed (queue sizes), which the user may change.
    pub fn setting_or(&self, key: &str, default: &str) -> String {
        self.config
            .get(key)
            .map_or_else(|| default.to_string(), str::to_string)
    }

    pub(crate) fn producer_config(&self, extra: &[(&str, &str)]) -> ClientConfig {
        let mut config = self.config_with(&PRODUCER_GUARANTEES);
        for (k, v) in PRODUCER_DEFAULTS {
            if config.get(k).is_none() {
                config.set(k, v);
            }
        }
        for (k, v) in extra {
            config.set(*k, *v);
        }
        config
    }

    /// A producer with kmirror's delivery settings (idempotent, acks=all) plus `extra`.
    pub fn producer(&self, extra: &[(&str, &str)]) -> Result<FutureProducer, KafkaError> {
        self.producer_config(extra)
            .create()
            .map_err(|e| self.error("create producer", e))
    }

    /// A producer polled by the caller, with `context` receiving its delivery reports.
    pub fn base_producer<C: ProducerContext>(
        &self,
        extra: &[(&str, &str)],
        context: C,
    ) -> Result<BaseProducer<C>, KafkaError> {
        BaseProducer::from_config_and_context(&self.producer_config(extra), context)
            .map_err(|e| self.error("create producer", e))
    }

    /// A producer polled by its own thread, with `context` receiving its delivery reports.
    pub fn threaded_producer<C: ProducerContext + 'static>(
        &self,
        extra: &[(&str, &str)],
        context: C,
    ) -> Result<ThreadedProducer<C>, KafkaError> {
        ThreadedProducer::from_config_and_context(&self.producer_config(extra), context)
            .map_err(|e| self.error("create producer", e))
    }

    fn consumer_config(&self, group: &str, extra: &[(&str, &str)]) -> ClientConfig {
        let mut config = self.config_with(&[
            ("group.id", group),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("enable.partition.eof", "false"),
            ("isolation.level", "read_committed"),
        ]);
        for (k, v) in CONSUMER_DEFAULTS {
            if config.get(k).is_none() {
                config.set(k, v);
            }
        }
        for (k, v) in extra {
            config.set(*k, *v);
        }
        config
    }

    /// A consumer in `group` that never commits or stores offsets by itself.
    pub fn consumer(
        &self,
        group: &str,
        extra: &[(&str, &str)],
    ) -> Result<StreamConsumer, KafkaError> {
        self.consumer_config(group, extra)
            .create()
            .map_err(|e| self.error(format!("create consumer for group {group}"), e))
    }

    /// [`member_timing`] for this cluster (its `heartbeat.interval.ms` wins).
    pub fn member_timing(&self, session: Duration) -> [(&'static str, String); 3] {
        member_timing(session, self.config.get("heartbeat.interval.ms"))
    }

    /// A member of `group` polled by the caller, with `context` receiving its rebalances and
    /// commit results; it never commits or stores offsets by itself.
    pub fn group_member<C: ConsumerContext>(
        &self,
        group: &str,
        extra: &[(&str, &str)],
        context: C,
    ) -> Result<BaseConsumer<C>, KafkaError> {
        BaseConsumer::from_config_and_context(&self.consumer_config(group, extra), context)
            .map_err(|e| self.error(format!("join group {group}"), e))
    }
}

/// The timing settings of a consumer-group member whose session is `session` (at least a
/// second): heartbeats every tenth of it (or the cluster's own `heartbeat.interval.ms`),
/// not librdkafka's third, because a rebalance waits until its last member hears of it at
/// a heartbeat, and the partitions on the move meanwhile wait too; the rebalance timeout
/// (`max.poll.interval.ms`) long enough for a revocation's drain, short enough that a
/// broker does not wait minutes for members at a first join.
pub fn member_timing(session: Duration, heartbeat: Option<&str>) -> [(&'static str, String); 3] {
    let session = session.as_millis().max(1000);
    [
        ("session.timeout.ms", session.to_string()),
        (
            "heartbeat.interval.ms",
            heartbeat.map_or_else(|| (session / 10).to_string(), str::to_string),
        ),
        ("max.poll.interval.ms", session.max(30_000).to_string()),
    ]
}

/// The last known (low, high) watermarks of `topic`/`partition` as the client saw them in
/// its fetches; no request is made. `None` while unknown.
pub fn cached_watermarks<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    partition: i32,
) -> Option<(i64, i64)> {
    let topic = CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is valid while `client` is borrowed; the topic is a valid
    // NUL-terminated string; librdkafka only writes the two out-parameters.
    let err = unsafe {
        rdkafka_sys::rd_kafka_get_watermark_offsets(
            client.native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka_sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
        .then_some((low, high))
}

/// The headers of `msg`, in order. A header name that is not UTF-8 (Kafka does not require
/// it) is given with U+FFFD replacements: rdkafka's own accessor panics on it.
pub fn headers_of<'m>(
    msg: &'m rdkafka::message::BorrowedMessage<'_>,
) -> impl Iterator<Item = (std::borrow::Cow<'m, str>, Option<&'m [u8]>)> + 'm {
    use rdkafka_sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR;
    let mut headers = std::ptr::null_mut();
    // SAFETY: the message pointer is valid while `msg` is borrowed; librdkafka only writes
    // the out-parameter, a pointer to headers the message owns.
    let err = unsafe { rdkafka_sys::rd_kafka_message_headers(msg.ptr(), &mut headers) };
    let count = if err != RD_KAFKA_RESP_ERR_NO_ERROR || headers.is_null() {
        0
    } else {
        // SAFETY: `headers` is the message's, valid while it is.
        unsafe { rdkafka_sys::rd_kafka_header_cnt(headers) }
    };
    (0..count).filter_map(move |idx| {
        let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
        // SAFETY: as above; librdkafka only writes the three out-parameters, pointing
        // into the message, which outlives 'm.
        let err = unsafe {
            rdkafka_sys::rd_kafka_header_get_all(headers, idx, &mut name, &mut value, &mut size)
        };
        if err != RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated name and `size` bytes of value, both the message's.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
        let value = (!value.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) });
        Some((name, value))
    })
}

/// The generation of the consumer group `consumer` last joined, if it is in one.
pub fn group_generation<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
) -> Option<i32> {
    use rdkafka::consumer::Consumer;
    // SAFETY: the pointer is valid while `consumer` is borrowed; the metadata returned is
    // owned here and destroyed before returning.
    unsafe {
        let metadata =
            rdkafka_sys::rd_kafka_consumer_group_metadata(consumer.client().native_ptr());
        if metadata.is_null() {
            return None;
        }
        let generation = rdkafka_sys::rd_kafka_consumer_group_metadata_generation_id(metadata);
        rdkafka_sys::rd_kafka_consumer_group_metadata_destroy(metadata);
        (generation >= 0).then_some(generation)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cluster, ClusterSettings};

    fn cluster(librdkafka: &[(&str, &str)]) -> Cluster {
        Cluster::new(&ClusterSettings {
            alias: "a".into(),
            bootstrap_servers: "127.0.0.1:9".into(),
            librdkafka: librdkafka
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
        .expect("cluster")
    }

    #[test]
    fn a_member_hears_of_a_rebalance_within_a_tenth_of_its_session() {
        let timing = |secs: f64| {
            super::member_timing(std::time::Duration::from_secs_f64(secs), None)
                .map(|(k, v)| format!("{k}={v}"))
                .join(" ")
        };
        assert_eq!(
            timing(10.0),
            "session.timeout.ms=10000 heartbeat.interval.ms=1000 max.poll.interval.ms=30000"
        );
        assert_eq!(
            timing(0.2),
            "session.timeout.ms=1000 heartbeat.interval.ms=100 max.poll.interval.ms=30000",
            "a session of at least a second"
        );
        assert_eq!(
            timing(60.0),
            "session.timeout.ms=60000 heartbeat.interval.ms=6000 max.poll.interval.ms=60000"
        );
        let theirs = cluster(&[("heartbeat.interval.ms", "2500")])
            .member_timing(std::time::Duration::from_secs(10));
        assert_eq!(
            theirs[1],
            ("heartbeat.interval.ms", "2500".to_string()),
            "the user's heartbeat wins"
        );
    }

    #[test]
    fn the_users_queue_sizes_and_fetch_backoff_win_over_kmirrors_defaults() {
        let mine = cluster(&[
            ("queue.buffering.max.kbytes", "1024"),
            ("fetch.queue.backoff.ms", "500"),
        ]);
        assert_eq!(
            mine.setting_or("queue.buffering.max.kbytes", "16384"),
            "1024"
        );
        assert_eq!(
            mine.setting_or("queued.max.messages.kbytes", "8192"),
            "8192"
        );
        assert_eq!(
            mine.consumer_config("g", &[]).get("fetch.queue.backoff.ms"),
            Some("500")
        );
        let default = cluster(&[]);
        assert_eq!(
            default
                .consumer_config("g", &[])
                .get("fetch.queue.backoff.ms"),
            Some("10"),
            "kmirror's default: a full prefetch queue does not idle a partition for 1 s"
        );
    }
}
