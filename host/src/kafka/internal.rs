//! The single-partition internal topics (offset syncs, checkpoints, heartbeats): one way to
//! write a record to partition 0, and one way to read a topic from its beginning and know
//! when the end seen at start was reached.

use super::{Cluster, KafkaError, REQUEST_TIMEOUT, delivered};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Writes records to partition 0 of one internal topic.
#[derive(Clone)]
pub struct InternalWriter {
    producer: FutureProducer,
    topic: Arc<str>,
    cluster: Arc<str>,
}

impl InternalWriter {
    /// A writer of `topic` on `cluster`, with its own idempotent producer.
    pub fn new(cluster: &Cluster, topic: &str) -> Result<Self, KafkaError> {
        Ok(InternalWriter {
            producer: cluster.producer(&[])?,
            topic: topic.into(),
            cluster: cluster.alias.as_str().into(),
        })
    }

    /// The topic written to.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    fn error(&self, message: String) -> KafkaError {
        KafkaError {
            cluster: self.cluster.to_string(),
            operation: format!("write to {}", self.topic),
            message,
        }
    }

    /// Queues one record without waiting; the future resolves to its offset once the
    /// cluster acked it. A full local queue is an error, not a wait.
    pub fn send(
        &self,
        key: &[u8],
        value: &[u8],
        headers: Option<OwnedHeaders>,
    ) -> impl Future<Output = Result<i64, KafkaError>> + Send + use<> {
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.topic)
            .partition(0)
            .key(key)
            .payload(value);
        if let Some(h) = headers {
            record = record.headers(h);
        }
        let queued = self
            .producer
            .send_result(record)
            .map_err(|(e, _)| self.error(e.to_string()));
        let this = self.clone();
        async move {
            match queued {
                Ok(delivery) => delivered(delivery).await.map_err(|m| this.error(m)),
                Err(e) => Err(e),
            }
        }
    }

    /// Writes a tombstone for `key` (compaction then removes the key) and waits up to
    /// `timeout` for it to be acked.
    pub async fn tombstone(&self, key: &[u8], timeout: Duration) -> Result<i64, KafkaError> {
        let record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&self.topic).partition(0).key(key);
        let delivery = self
            .producer
            .send_result(record)
            .map_err(|(e, _)| self.error(e.to_string()))?;
        match tokio::time::timeout(timeout, delivered(delivery)).await {
            Ok(acked) => acked.map_err(|m| self.error(m)),
            Err(_) => Err(self.error(format!("not acked within {timeout:?}"))),
        }
    }

    /// Waits up to `timeout` for every queued record.
    pub fn flush(&self, timeout: Duration) {
        use rdkafka::producer::Producer;
        let _ = self.producer.flush(timeout);
    }
}

/// What [`InternalReader::next`] saw.
pub enum ReadEvent<'a> {
    /// A record.
    Record(BorrowedMessage<'a>),
    /// The reader reached the end of the topic as it was when the reader opened; it keeps
    /// reading what comes after.
    CaughtUp,
}

/// Records read past the reported end at most before a read counts as caught up anyway
/// (the topic keeps growing while it is read).
const MAX_PAST_END: u32 = 10_000;

/// Reads partition 0 of an internal topic from its beginning, outside any group.
pub struct InternalReader {
    consumer: StreamConsumer,
    topic: String,
    cluster: String,
    end: i64,
    reached_end: bool,
    past_end: u32,
    caught_up: bool,
}

impl InternalReader {
    /// Opens `topic` on `cluster` at its beginning and notes its end offset.
    pub async fn open(cluster: &Cluster, topic: &str) -> Result<Self, KafkaError> {
        let op = || format!("read {topic}");
        let consumer: StreamConsumer = cluster
            .config_with(&[
                ("group.id", &format!("kmirror-reader-{topic}")),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("enable.partition.eof", "false"),
            ])
            .create()
            .map_err(|e| cluster.error(op(), e))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Beginning)
            .map_err(|e| cluster.error(op(), e))?;
        consumer.assign(&tpl).map_err(|e| cluster.error(op(), e))?;
        let t = topic.to_string();
        let (consumer, high) = tokio::task::spawn_blocking(move || {
            let high = consumer
                .fetch_watermarks(&t, 0, REQUEST_TIMEOUT)
                .map(|(_, h)| h);
            (consumer, high)
        })
        .await
        .map_err(|e| cluster.error(format!("end offset of {topic}"), e))?;
        let end = high.map_err(|e| cluster.error(format!("end offset of {topic}"), e))?;
        Ok(InternalReader {
            consumer,
            topic: topic.to_string(),
            cluster: cluster.alias.clone(),
            end,
            reached_end: false,
            past_end: 0,
            caught_up: end <= 0,
        })
    }

    /// Whether the end seen at open was reached.
    pub fn caught_up(&self) -> bool {
        self.caught_up
    }

    /// The next record, or [`ReadEvent::CaughtUp`] once when the end seen at open is reached.
    ///
    /// Caught up means: a record at or past the end offset reported at open was read, and
    /// what the client had already fetched with it was read too. Some brokers report the
    /// last batch's base offset + 1 as the end; the rest of that batch comes in the same
    /// fetch, so it is read before the reader counts as caught up. Readiness never waits
    /// for the topic to go quiet: under steady writes it is reached as soon as the local
    /// queue runs dry once, or after a bounded number of records past the end.
    pub async fn next(&mut self) -> Result<ReadEvent<'_>, KafkaError> {
        let received = if self.reached_end && !self.caught_up {
            if self.past_end >= MAX_PAST_END {
                self.caught_up = true;
                return Ok(ReadEvent::CaughtUp);
            }
            // Only what is already here: the inner future is polled before the timer.
            match tokio::time::timeout(Duration::ZERO, self.consumer.recv()).await {
                Ok(r) => {
                    self.past_end += 1;
                    r
                }
                Err(_) => {
                    self.caught_up = true;
                    return Ok(ReadEvent::CaughtUp);
                }
            }
        } else {
            self.consumer.recv().await
        };
        match received {
            Ok(msg) => {
                self.reached_end |= msg.offset() + 1 >= self.end;
                Ok(ReadEvent::Record(msg))
            }
            Err(e) => Err(KafkaError {
                cluster: self.cluster.clone(),
                operation: format!("read {}", self.topic),
                message: e.to_string(),
            }),
        }
    }
}

/// Reads `topic` from its beginning to the end it had when the read started, giving each
/// record to `each`; stops at `timeout`. Returns whether the end was reached.
pub async fn read_to_end(
    cluster: &Cluster,
    topic: &str,
    timeout: Duration,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> Result<bool, KafkaError> {
    let mut reader = InternalReader::open(cluster, topic).await?;
    let deadline = Instant::now() + timeout;
    while !reader.caught_up() {
        match tokio::time::timeout_at(deadline.into(), reader.next()).await {
            Err(_) => return Ok(false),
            Ok(Ok(ReadEvent::Record(msg))) => each(&msg),
            Ok(Ok(ReadEvent::CaughtUp)) => {}
            Ok(Err(_)) => {}
        }
    }
    Ok(true)
}

impl Cluster {
    /// Whether each partition's log reaches the given offset (holds a record at or after
    /// it): `Some(true)`, `Some(false)` when the offset is at or past its end, `None` when no
    /// answer came within `timeout` each. Asked one partition at a time (librdkafka names
    /// no partition with an out-of-range error), outside any group.
    pub async fn logs_reach(
        &self,
        at: Vec<(String, i32, i64)>,
        timeout: Duration,
    ) -> Result<Vec<((String, i32), Option<bool>)>, KafkaError> {
        use rdkafka::consumer::BaseConsumer;
        let op = "probe the ends of target partitions";
        let consumer: BaseConsumer = self
            .config_with(&[
                ("group.id", "kmirror-probe"),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("enable.partition.eof", "true"),
                ("auto.offset.reset", "error"),
                ("fetch.wait.max.ms", "10"),
            ])
            .create()
            .map_err(|e| self.error(op, e))?;
        tokio::task::spawn_blocking(move || {
            at.into_iter()
                .map(|(t, p, o)| {
                    let reaches = log_reaches(&consumer, &t, p, o, timeout);
                    ((t, p), reaches)
                })
                .collect()
        })
        .await
        .map_err(|e| self.error(op, e))
    }
}

/// Whether `topic`/`partition` holds a record at or after `offset` (see
/// [`Cluster::logs_reach`]).
fn log_reaches(
    consumer: &rdkafka::consumer::BaseConsumer,
    topic: &str,
    partition: i32,
    offset: i64,
    timeout: Duration,
) -> Option<bool> {
    use rdkafka::error::{KafkaError as RdError, RDKafkaErrorCode as Code};
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
        .ok()?;
    consumer.assign(&tpl).ok()?;
    let deadline = Instant::now() + timeout;
    let answer = loop {
        if Instant::now() >= deadline {
            break None;
        }
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) if m.topic() == topic && m.partition() == partition => {
                break Some(m.offset() >= offset);
            }
            Some(Err(RdError::PartitionEOF(p))) if p == partition => break Some(false),
            Some(Err(e))
                if matches!(
                    e.rdkafka_error_code(),
                    Some(Code::AutoOffsetReset | Code::OffsetOutOfRange)
                ) =>
            {
                break Some(false);
            }
            _ => {}
        }
    };
    let _ = consumer.unassign();
    // What the partition still had queued (an error, a fetched record) must not answer the
    // next probe.
    for _ in 0..1000 {
        if consumer.poll(Duration::ZERO).is_none() {
            break;
        }
    }
    answer
}

/// Reads every partition of `topic` from its beginning to the ends they had when the read
/// started (past a lagging reported end: what came with the last fetch is read too), giving
/// each record's key and value to `each`; stops at `timeout`. Returns whether every
/// partition's end was reached.
pub async fn read_topic_to_end<F>(
    cluster: &Cluster,
    topic: &str,
    timeout: Duration,
    mut each: F,
) -> Result<bool, KafkaError>
where
    F: FnMut(Option<&[u8]>, Option<&[u8]>) + Send + 'static,
{
    use rdkafka::consumer::BaseConsumer;
    let op = || format!("read {topic}");
    let partitions = cluster.topics().await?.get(topic).copied().unwrap_or(0);
    let consumer: BaseConsumer = cluster
        .config_with(&[
            ("group.id", &format!("kmirror-reader-{topic}")),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("enable.partition.eof", "false"),
        ])
        .create()
        .map_err(|e| cluster.error(op(), e))?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| cluster.error(op(), e))?;
    }
    consumer.assign(&tpl).map_err(|e| cluster.error(op(), e))?;
    let (name, error) = (topic.to_string(), cluster.error(op(), "read failed"));
    let done = tokio::task::spawn_blocking(move || {
        let mut ends = Vec::new();
        for p in 0..partitions {
            let (_, high) = consumer
                .fetch_watermarks(&name, p, REQUEST_TIMEOUT)
                .map_err(|e| e.to_string())?;
            ends.push(high);
        }
        let mut reached: Vec<bool> = ends.iter().map(|e| *e <= 0).collect();
        let deadline = Instant::now() + timeout;
        loop {
            let all = reached.iter().all(|r| *r);
            let wait = if all {
                Duration::ZERO
            } else {
                Duration::from_millis(100)
            };
            match consumer.poll(wait) {
                Some(Ok(m)) => {
                    each(m.key(), m.payload());
                    if let (Some(r), Some(end)) = (
                        reached.get_mut(m.partition() as usize),
                        ends.get(m.partition() as usize),
                    ) {
                        *r |= m.offset() + 1 >= *end;
                    }
                }
                Some(Err(e)) => return Err(e.to_string()),
                // Everything reached and what was fetched with it read.
                None if all => return Ok(true),
                None => {}
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
        }
    })
    .await
    .map_err(|e| cluster.error(op(), e))?;
    done.map_err(|message| KafkaError { message, ..error })
}
