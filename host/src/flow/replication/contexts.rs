//! The librdkafka callbacks of the data plane: delivery reports of the target producer, and
//! the consumer group's rebalances and commit results. Callbacks run on the replicator's
//! own thread, inside `poll`; a rebalance is handed to a [`Rebalancing`] handler (it must
//! finish its work — drain, commit — before the partitions are released, so it runs
//! there), and every commit's outcome is collected for the loop.

use rdkafka::ClientContext;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::ProducerContext;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// One delivery report: the partition's slot key and the target offset, or the error.
#[derive(Debug, Clone, Copy)]
pub struct Delivered {
    /// The slot key the record was sent with.
    pub key: u64,
    /// The target offset, or why the target did not take the record.
    pub result: Result<i64, RDKafkaErrorCode>,
    /// A failed record the target may have stored all the same: it was on its way when it
    /// was given up (librdkafka's `POSSIBLY_PERSISTED`; a single instance's producer gives
    /// records up a quarter of a lease after they were queued).
    pub unsure: bool,
}

/// Collects the target producer's delivery reports (on the producer's own polling
/// thread) for the replicator's loop.
#[derive(Default)]
pub struct Deliveries {
    queue: Mutex<Vec<Delivered>>,
    arrived: Condvar,
    /// How many reports the waiting loop wants before it is woken (0: the loop is not
    /// waiting, and no report wakes anyone).
    wanted: AtomicUsize,
}

impl Deliveries {
    /// Moves the reports collected so far into `into`, waiting up to `timeout` for one if
    /// there is none.
    pub fn take(&self, into: &mut Vec<Delivered>, timeout: Duration) {
        self.take_at_least(into, 1, timeout);
    }

    /// Moves the reports collected so far into `into`, waiting up to `timeout` until there
    /// are `wanted` of them — the producer's thread wakes the loop once, not per report.
    pub fn take_at_least(&self, into: &mut Vec<Delivered>, wanted: usize, timeout: Duration) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.len() < wanted && !timeout.is_zero() {
            self.wanted.store(wanted.max(1), Ordering::Relaxed);
            let deadline = Instant::now() + timeout;
            while queue.len() < wanted {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                queue = self
                    .arrived
                    .wait_timeout(queue, left)
                    .map(|(q, _)| q)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            self.wanted.store(0, Ordering::Relaxed);
        }
        into.append(&mut queue);
    }

    /// A report came in: the loop is woken if it waits and now has what it wants.
    fn push(&self, report: Delivered) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.push(report);
        // `wanted` is stored and cleared under the queue's lock: a waiter is never missed.
        let wanted = self.wanted.load(Ordering::Relaxed);
        if wanted != 0 && queue.len() >= wanted {
            self.arrived.notify_one();
        }
    }
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, key: usize) {
        let (result, unsure) = match result {
            Ok(m) => (Ok(m.offset()), false),
            Err((e, m)) => (
                Err(e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail)),
                possibly_stored(m),
            ),
        };
        self.push(Delivered {
            key: key as u64,
            result,
            unsure,
        });
    }
}

/// Whether librdkafka says the target may have stored a record it reported as failed.
fn possibly_stored(m: &rdkafka::message::BorrowedMessage<'_>) -> bool {
    // SAFETY: the message is valid for the duration of the delivery callback; librdkafka
    // only reads its status field.
    let status = unsafe { rdkafka_sys::rd_kafka_message_status(m.ptr()) };
    status != rdkafka_sys::rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_NOT_PERSISTED
}

pub use crate::kafka::commit::CommitOutcome;

/// What a group member's rebalances are handed to.
pub trait Rebalancing: Sized + Send + Sync + 'static {
    /// The group assigned `tpl` to the member.
    fn assigned(&self, consumer: &BaseConsumer<Membership<Self>>, tpl: &TopicPartitionList);
    /// The group takes `tpl` from the member (not yet released).
    fn revoking(&self, consumer: &BaseConsumer<Membership<Self>>, tpl: &TopicPartitionList);
    /// A rebalance failed.
    fn failed(&self, error: &rdkafka::error::KafkaError);
}

/// Whether a commit handed to the member's committer has yet to end, and a signal when it
/// does. A revocation waits for it before committing the revoked partitions: a commit taken
/// earlier (older offsets) that reached the coordinator after the revocation's would move
/// the stored progress back, and the next owner would mirror that stretch again.
#[derive(Default)]
pub struct Committing {
    running: Mutex<bool>,
    ended: Condvar,
}

impl Committing {
    /// A commit was handed over (`true`) or ended (`false`).
    pub fn set(&self, running: bool) {
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = running;
        if !running {
            self.ended.notify_all();
        }
    }

    /// Whether no commit is running.
    pub fn idle(&self) -> bool {
        !*self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no commit runs, at most until `deadline`; whether none runs.
    pub fn wait_idle(&self, deadline: Instant) -> bool {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let timeout = deadline.saturating_duration_since(Instant::now());
        let (running, _) = self
            .ended
            .wait_timeout_while(running, timeout, |running| *running)
            .unwrap_or_else(|e| e.into_inner());
        !*running
    }
}

/// The consumer group member's callbacks.
pub struct Membership<H> {
    handler: Arc<H>,
    commits: Mutex<Vec<CommitOutcome>>,
    committing: Committing,
}

impl<H: Rebalancing> Membership<H> {
    /// Callbacks handing rebalances to `handler`.
    pub fn new(handler: Arc<H>) -> Self {
        Membership {
            handler,
            commits: Mutex::new(Vec::new()),
            committing: Committing::default(),
        }
    }

    /// The commit outcomes collected so far.
    pub fn take_commits(&self) -> Vec<CommitOutcome> {
        std::mem::take(&mut *self.commits.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl<H: Rebalancing> ClientContext for Membership<H> {}

impl<H: Rebalancing> ConsumerContext for Membership<H> {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => self.handler.revoking(consumer, tpl),
            Rebalance::Error(e) => self.handler.failed(e),
            Rebalance::Assign(_) => {}
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.handler.assigned(consumer, tpl);
        }
    }

    // No `commit_callback`: kmirror commits synchronously only, and records each outcome
    // where it commits ([`Membership::record_commit`]) — one place, so each is counted once.
}

impl<H> Membership<H> {
    /// Whether a commit runs on the member's committer.
    pub fn committing(&self) -> &Committing {
        &self.committing
    }

    /// Records the outcome of a synchronous commit ([`crate::kafka::commit::commit_sync`]).
    pub fn record_commit(&self, outcome: CommitOutcome) {
        self.commits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(key: u64) -> Delivered {
        Delivered {
            unsure: false,
            key,
            result: Ok(key as i64),
        }
    }

    #[test]
    fn the_loop_is_woken_once_it_has_the_reports_it_wants() {
        let d = Arc::new(Deliveries::default());
        let producer = {
            let d = d.clone();
            std::thread::spawn(move || {
                for k in 0..3 {
                    // Spaced out: the loop must be waiting when they come (not a synchronisation).
                    std::thread::sleep(Duration::from_millis(20));
                    d.push(report(k));
                }
            })
        };
        let mut got = Vec::new();
        let started = Instant::now();
        d.take_at_least(&mut got, 3, Duration::from_secs(20));
        assert_eq!(got.len(), 3, "all three, in one wake");
        // The reports come within ~60 ms: a missed wake-up would end at the timeout.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "woken, not timed out"
        );
        producer.join().unwrap();
        // Nobody waits now: reports just queue up.
        d.push(report(7));
        d.take(&mut got, Duration::ZERO);
        assert_eq!(got.iter().map(|r| r.key).collect::<Vec<_>>(), [0, 1, 2, 7]);
    }

    #[test]
    fn a_wait_for_more_reports_than_come_ends_at_its_timeout_with_what_came() {
        let d = Deliveries::default();
        d.push(report(1));
        let mut got = Vec::new();
        d.take_at_least(&mut got, 5, Duration::from_millis(50));
        assert_eq!(got.len(), 1);
        d.take_at_least(&mut got, 5, Duration::ZERO);
        assert_eq!(got.len(), 1, "no wait, nothing new");
    }
}
