//! Replication, the data plane (MM2's `MirrorSourceTask`): consume the routed source
//! partitions, produce each record to the same partition of its target topic (key, value,
//! headers and timestamp preserved), and count a source offset as done only once the
//! target acked it.
//!
//! Progress is stored as the committed offsets of the flow's own consumer group on the
//! source cluster (`kmirror.<source>.<target>`), committed only up to acked records: a
//! restart resumes from it, and every Kafka tool shows the mirror's lag. Memory stays
//! bounded: at most `max_in_flight` records are unacknowledged, and a full producer queue
//! pauses consumption. After each ack the offset-sync writer decides whether to emit.

use super::Routes;
use super::offset_syncs::sender::SyncSender;
use super::offset_syncs::{OffsetSyncWriter, TopicPartition};
use super::telemetry::{Counter, FlowTelemetry};
use crate::config::StartOffset;
use crate::kafka::internal::InternalWriter;
use crate::kafka::{Cluster, delivered};
use futures::stream::{FuturesOrdered, StreamExt};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Settings of one replicator.
#[derive(Debug, Clone)]
pub struct ReplicatorSettings {
    /// `source->target`, for logs.
    pub flow: String,
    /// The consumer group holding progress.
    pub progress_group: String,
    /// Where offset syncs go (on `syncs_cluster`).
    pub syncs_topic: String,
    /// `offset_lag_max`.
    pub offset_lag_max: u64,
    /// Delayed syncs are flushed and progress committed this often.
    pub flush_interval: Duration,
    /// Where a partition without stored progress starts.
    pub start_offset: StartOffset,
    /// Unacknowledged records at most.
    pub max_in_flight: usize,
}

/// How long a graceful stop waits for in-flight records.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

type Ack = (TopicPartition, i64, Result<i64, String>);
type AckFuture = Pin<Box<dyn Future<Output = Ack> + Send>>;

/// Why the replicator stopped with an error (it is restarted from stored progress).
#[derive(Debug, thiserror::Error)]
pub enum ReplicateError {
    /// A client could not be created.
    #[error(transparent)]
    Client(#[from] crate::kafka::KafkaError),
    /// The target did not take a record.
    #[error("flow {flow}: producing {topic}[{partition}] offset {offset} failed: {message}")]
    Produce {
        /// The flow.
        flow: String,
        /// The source topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The source offset.
        offset: i64,
        /// Why.
        message: String,
    },
    /// Assigning partitions failed.
    #[error("flow {flow}: {operation}: {message}")]
    Consumer {
        /// The flow.
        flow: String,
        /// What failed.
        operation: &'static str,
        /// Why.
        message: String,
    },
}

struct State {
    settings: ReplicatorSettings,
    producer: FutureProducer,
    routes: HashMap<String, (Arc<str>, i32)>,
    in_flight: FuturesOrdered<AckFuture>,
    syncs: SyncSender,
    acked: HashMap<TopicPartition, i64>,
    dirty: HashSet<TopicPartition>,
    failed: Option<ReplicateError>,
    telemetry: Arc<FlowTelemetry>,
}

/// Runs until `shutdown` (then drains, stores progress and returns `Ok`) or until a
/// record cannot be produced (then stores the progress made and returns the error).
pub async fn run(
    source: &Cluster,
    target: &Cluster,
    syncs_cluster: &Cluster,
    settings: ReplicatorSettings,
    mut assignment: watch::Receiver<Routes>,
    shutdown: CancellationToken,
    telemetry: Arc<FlowTelemetry>,
) -> Result<(), ReplicateError> {
    let reset = match settings.start_offset {
        StartOffset::Earliest => "earliest",
        StartOffset::Latest => "latest",
    };
    let consumer = source.consumer(
        &settings.progress_group,
        &[
            ("auto.offset.reset", reset),
            ("queued.max.messages.kbytes", "32768"),
        ],
    )?;
    let queue = [
        ("queue.buffering.max.messages", "100000"),
        ("queue.buffering.max.kbytes", "65536"),
    ];
    let producer = target.producer(&queue)?;
    let syncs = SyncSender::new(
        OffsetSyncWriter::new(settings.offset_lag_max, session_id()),
        InternalWriter::new(syncs_cluster, &settings.syncs_topic)?,
        telemetry.clone(),
    );
    let mut s = State {
        settings,
        producer,
        routes: HashMap::new(),
        in_flight: FuturesOrdered::new(),
        syncs,
        acked: HashMap::new(),
        dirty: HashSet::new(),
        failed: None,
        telemetry,
    };
    let mut flush = tokio::time::interval(s.settings.flush_interval);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let current = assignment.borrow_and_update().clone();
    s.apply_assignment(&consumer, &current)?;
    loop {
        let can_consume = s.failed.is_none()
            && s.in_flight.len() < s.settings.max_in_flight
            && !s.routes.is_empty();
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            changed = assignment.changed() => {
                if changed.is_err() { break; }
                let next = assignment.borrow_and_update().clone();
                s.apply_assignment(&consumer, &next)?;
            }
            Some(ack) = s.in_flight.next(), if !s.in_flight.is_empty() => s.on_ack(ack),
            _ = s.syncs.completed(), if s.syncs.busy() => {}
            received = consumer.recv(), if can_consume => match received {
                Ok(msg) => s.forward(&msg).await,
                Err(e) => s.telemetry.note_error("consume", "kafka", &e),
            },
            _ = flush.tick() => {
                s.syncs.flush_delayed();
                s.commit(&consumer, CommitMode::Async);
            }
        }
        if s.failed.is_some() && s.in_flight.is_empty() {
            break;
        }
    }
    s.drain(&consumer).await;
    match s.failed.take() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A writer session id, different for every replicator start.
fn session_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 40)
}

impl State {
    /// Assigns new partitions (resuming from stored progress) and drops vanished topics.
    fn apply_assignment(
        &mut self,
        consumer: &StreamConsumer,
        next: &Routes,
    ) -> Result<(), ReplicateError> {
        let mut add = TopicPartitionList::new();
        for (topic, route) in next {
            let had = self.routes.get(topic).map_or(0, |(_, n)| *n);
            for p in had..route.partitions {
                add.add_partition_offset(topic, p, Offset::Stored)
                    .map_err(|e| self.consumer_error("assign", e))?;
            }
            self.routes.insert(
                topic.clone(),
                (Arc::from(route.target.as_str()), route.partitions.max(had)),
            );
        }
        let gone: Vec<String> = self
            .routes
            .keys()
            .filter(|t| !next.contains_key(*t))
            .cloned()
            .collect();
        let mut remove = TopicPartitionList::new();
        for topic in gone {
            if let Some((_, n)) = self.routes.remove(&topic) {
                for p in 0..n {
                    remove.add_partition(&topic, p);
                    self.syncs.forget(&(topic.clone(), p));
                }
            }
        }
        if add.count() > 0 {
            tracing::info!(flow = %self.settings.flow, partitions = add.count(), "assigning source partitions");
            consumer
                .incremental_assign(&add)
                .map_err(|e| self.consumer_error("assign partitions", e))?;
        }
        if remove.count() > 0 {
            self.commit(consumer, CommitMode::Async);
            consumer
                .incremental_unassign(&remove)
                .map_err(|e| self.consumer_error("unassign partitions", e))?;
        }
        Ok(())
    }

    fn consumer_error(&self, operation: &'static str, e: KafkaError) -> ReplicateError {
        ReplicateError::Consumer {
            flow: self.settings.flow.clone(),
            operation,
            message: e.to_string(),
        }
    }

    /// Produces one record to its target partition, waiting while the producer queue is full.
    async fn forward(&mut self, msg: &BorrowedMessage<'_>) {
        let Some((target, _)) = self.routes.get(msg.topic()) else {
            return;
        };
        let target = target.clone();
        let tp: TopicPartition = (msg.topic().to_string(), msg.partition());
        let up = msg.offset();
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&target).partition(msg.partition());
        if let Some(key) = msg.key() {
            record = record.key(key);
        }
        if let Some(payload) = msg.payload() {
            record = record.payload(payload);
        }
        if let Some(ts) = msg.timestamp().to_millis() {
            record = record.timestamp(ts);
        }
        if let Some(headers) = msg.headers() {
            record = record.headers(headers.detach());
        }
        let bytes = msg.payload_len() as u64 + msg.key().map_or(0, |k| k.len() as u64);
        loop {
            match self.producer.send_result(record) {
                Ok(delivery) => {
                    let fut = async move { (tp, up, delivered(delivery).await) };
                    self.in_flight.push_back(Box::pin(fut));
                    self.telemetry.add(Counter::Bytes, bytes);
                    return;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    match self.in_flight.next().await {
                        Some(ack) => self.on_ack(ack),
                        None => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
                Err((e, _)) => {
                    self.fail(tp, up, e.to_string());
                    return;
                }
            }
        }
    }

    fn fail(&mut self, tp: TopicPartition, offset: i64, message: String) {
        if self.failed.is_none() {
            tracing::error!(flow = %self.settings.flow, topic = %tp.0, partition = tp.1, offset, error = %message, "cannot produce to the target; restarting from stored progress");
            self.failed = Some(ReplicateError::Produce {
                flow: self.settings.flow.clone(),
                topic: tp.0,
                partition: tp.1,
                offset,
                message,
            });
        }
    }

    fn on_ack(&mut self, (tp, up, result): Ack) {
        match result {
            // After a failure nothing more is counted as done: a restart re-reads it.
            Ok(_) if self.failed.is_some() => {}
            Ok(down) => {
                self.telemetry.add(Counter::Records, 1);
                self.syncs.on_ack(&tp, up, down);
                self.acked.insert(tp.clone(), up + 1);
                self.dirty.insert(tp);
            }
            Err(message) => self.fail(tp, up, message),
        }
    }

    /// Commits the acked positions of the partitions that moved.
    fn commit(&mut self, consumer: &StreamConsumer, mode: CommitMode) {
        if self.dirty.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for tp in self.dirty.drain() {
            if let Some(next) = self.acked.get(&tp) {
                let _ = tpl.add_partition_offset(&tp.0, tp.1, Offset::Offset(*next));
            }
        }
        if let Err(e) = consumer.commit(&tpl, mode) {
            self.telemetry.note_error("store progress", "kafka", &e);
            // Retry with the next commit.
            for elem in tpl.elements() {
                self.dirty
                    .insert((elem.topic().to_string(), elem.partition()));
            }
        }
    }

    /// Graceful stop: nothing new is fetched; in-flight records are awaited, every
    /// delayed sync is sent, and progress is stored synchronously.
    async fn drain(&mut self, consumer: &StreamConsumer) {
        let waited = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while let Some(ack) = self.in_flight.next().await {
                self.on_ack(ack);
            }
            self.syncs.drain().await;
        })
        .await;
        if waited.is_err() {
            tracing::warn!(flow = %self.settings.flow, "records still in flight after {DRAIN_TIMEOUT:?}; they will be re-read on restart");
        }
        self.commit(consumer, CommitMode::Sync);
        let _ = self.producer.flush(Duration::from_secs(5));
    }
}

/// Runs the replicator until `shutdown`, restarting it from stored progress (with backoff)
/// whenever it stops with an error.
pub async fn run_restarting(
    clusters: [Cluster; 3],
    settings: ReplicatorSettings,
    routes: watch::Receiver<Routes>,
    shutdown: CancellationToken,
    telemetry: Arc<FlowTelemetry>,
) {
    let [source, target, syncs_cluster] = clusters;
    let mut backoff = Duration::from_millis(500);
    loop {
        let run = run(
            &source,
            &target,
            &syncs_cluster,
            settings.clone(),
            routes.clone(),
            shutdown.clone(),
            telemetry.clone(),
        );
        match run.await {
            Ok(()) => return,
            Err(e) => {
                tracing::error!(flow = %settings.flow, error = %e, "replication stopped; restarting from stored progress")
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}
