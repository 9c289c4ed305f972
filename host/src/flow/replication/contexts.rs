//! The librdkafka callbacks of the data plane: delivery reports of the target producer, and
//! the consumer group's rebalances and commit results. Callbacks run on the replicator's
//! own thread, inside `poll`; they hand their results to [`Core`] (a rebalance must finish
//! its work — drain, commit — before the partitions are released, so it runs there).

use super::core::Core;
use rdkafka::ClientContext;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::ProducerContext;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// One delivery report: the partition's slot key and the target offset, or the error.
#[derive(Debug, Clone, Copy)]
pub struct Delivered {
    /// The slot key the record was sent with.
    pub key: u64,
    /// The target offset, or why the target did not take the record.
    pub result: Result<i64, RDKafkaErrorCode>,
}

/// Collects the target producer's delivery reports (on the producer's own polling
/// thread) for the replicator's loop.
#[derive(Default)]
pub struct Deliveries {
    queue: Mutex<Vec<Delivered>>,
    arrived: Condvar,
}

impl Deliveries {
    /// Moves the reports collected so far into `into`, waiting up to `timeout` for one if
    /// there is none.
    pub fn take(&self, into: &mut Vec<Delivered>, timeout: Duration) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.is_empty() && !timeout.is_zero() {
            queue = self
                .arrived
                .wait_timeout(queue, timeout)
                .map(|(q, _)| q)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        into.append(&mut queue);
    }
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, key: usize) {
        let result = match result {
            Ok(m) => Ok(m.offset()),
            Err((e, _)) => Err(e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail)),
        };
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Delivered {
                key: key as u64,
                result,
            });
        self.arrived.notify_one();
    }
}

/// The outcome of an asynchronous commit.
#[derive(Debug, Clone)]
pub struct CommitOutcome {
    /// The error of the whole request, if any.
    pub error: Option<String>,
    /// (topic, partition, offset, error) of each partition.
    pub partitions: Vec<(String, i32, i64, Option<String>)>,
}

/// The consumer group member's callbacks.
pub struct Membership {
    core: Arc<Mutex<Core>>,
    commits: Mutex<Vec<CommitOutcome>>,
}

impl Membership {
    /// Callbacks acting on `core`.
    pub fn new(core: Arc<Mutex<Core>>) -> Self {
        Membership {
            core,
            commits: Mutex::new(Vec::new()),
        }
    }

    fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The commit outcomes collected so far.
    pub fn take_commits(&self) -> Vec<CommitOutcome> {
        std::mem::take(&mut *self.commits.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl ClientContext for Membership {}

impl ConsumerContext for Membership {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => self.core().revoke(consumer, tpl),
            Rebalance::Error(e) => self.core().rebalance_failed(e),
            Rebalance::Assign(_) => {}
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.core().assign(consumer, tpl);
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        self.record_commit(result, offsets);
    }
}

impl Membership {
    /// Records the outcome of a commit of `offsets`.
    pub fn record_commit(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        let outcome = CommitOutcome {
            error: result.err().map(|e| e.to_string()),
            partitions: offsets
                .elements()
                .iter()
                .map(|e| {
                    let offset = e.offset().to_raw().unwrap_or(-1);
                    let error = e.error().err().map(|e| e.to_string());
                    (e.topic().to_string(), e.partition(), offset, error)
                })
                .collect(),
        };
        self.commits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(outcome);
    }
}
