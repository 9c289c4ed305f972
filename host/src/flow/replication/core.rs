//! The data plane's shell around the [`Book`]: it hands records to the target producer,
//! feeds the book the delivery reports, rebalances, routes and commit outcomes, and
//! applies what the book decides (pause, resume, seek, offset-sync sessions) to librdkafka.
//! Rebalances are in `super::rebalance`; status and the graceful stop's drain in
//! `super::status`.

use super::OnUnproducible;
use super::ReplicatorSettings;
use super::book::{Ack, Book, BookSettings, Effect, Offer, Orphans};
use super::budget::UnackedBudget;
use super::chain::Fate;
use super::contexts::{CommitOutcome, Deliveries, Membership, Rebalancing};
use super::failures::classify;
use super::outgoing::{Outgoing, outgoing};
use super::progress::InFlight;
use super::truncation::Truncation;
use crate::flow::Routes;
use crate::flow::offset_syncs::sender::SyncSender;
use crate::flow::telemetry::{Counter, FlowTelemetry, now_ms};
use crate::kafka::clients::cached_watermarks;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The replicator's group member.
pub type Member = BaseConsumer<Membership<Shared>>;

/// The core as the group callbacks and the loop share it (both on the replicator's thread).
pub struct Shared(Mutex<Core>);

impl Shared {
    /// Shares `core`.
    pub fn new(core: Core) -> Arc<Self> {
        Arc::new(Shared(Mutex::new(core)))
    }

    /// The core, locked.
    pub fn lock(&self) -> MutexGuard<'_, Core> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Rebalancing for Shared {
    fn assigned(&self, consumer: &Member, tpl: &TopicPartitionList) {
        self.lock().assign(consumer, tpl, None);
    }
    fn revoking(&self, consumer: &Member, tpl: &TopicPartitionList) {
        self.lock().revoke(consumer, tpl);
    }
    fn failed(&self, error: &rdkafka::error::KafkaError) {
        self.lock()
            .telemetry
            .note_error("rebalance", "kafka", error);
    }
}

/// What became of a record handed to [`Core::forward`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarded {
    /// Sent, skipped, or declined (its partition reads it again later): the next record
    /// may come.
    Done,
    /// No room (the byte budget holds records back, the producer's queue is full or too
    /// many records are in flight): offer it again, or [`Core::decline`] it.
    Full,
}

/// The producer's local queue, in records (`queue.buffering.max.messages`).
pub const PRODUCER_QUEUE: usize = 100_000;

/// The bytes a task keeps sent and not yet acknowledged at most, as a share of its
/// producer's queue (`queue.buffering.max.kbytes`; `super::budget`): below the queue, a
/// record waits for delivery reports (the loop sleeps until enough came in) instead of
/// being refused by a full queue and retried per report. Keys and values are counted
/// (librdkafka counts only values against its queue size), so the budget bounds memory
/// where the queue would not (docs/performance.md, "Memory").
pub const UNACKED_SHARE: usize = 2;

/// How often the producer's metadata of one target topic is refreshed at most.
const REFRESH_EVERY: Duration = Duration::from_secs(1);

pub(super) fn tpl_of<'a>(
    partitions: impl IntoIterator<Item = (&'a str, i32)>,
) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (t, p) in partitions {
        tpl.add_partition(t, p);
    }
    tpl
}

pub(super) fn pairs(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

/// The data plane's state.
pub struct Core {
    pub(super) settings: ReplicatorSettings,
    pub(super) producer: Arc<ThreadedProducer<Deliveries>>,
    pub(super) syncs: SyncSender,
    pub(super) book: Book,
    pub(super) telemetry: Arc<FlowTelemetry>,
    pub(super) orphans: Arc<Mutex<Orphans>>,
    delivered: Vec<super::contexts::Delivered>,
    pub(super) records: u64,
    pub(super) bytes: u64,
    /// Records a transform dropped, not yet counted in the telemetry.
    pub(super) dropped: u64,
    pub(super) rebalances: u64,
    refreshed: HashMap<Arc<str>, Instant>,
    /// The bytes sent and not acknowledged this task keeps at most.
    budget: UnackedBudget,
    /// The owner generation of the partitions it takes, when not a group's (a single
    /// instance's lease epoch).
    pub(super) generation: Option<i32>,
    /// The consumer group's generation as its last rebalance left it (a group's task), for
    /// the status: asking librdkafka waits on its main thread without a timeout, and at
    /// 20,000 topics that thread was busy for minutes — the loop must never wait on it.
    pub(super) group_generation: Option<i32>,
    /// The log ends `/status` showed last, by partition, and where the next status tick
    /// starts reading them again (see `status::ENDS_PER_TICK`).
    pub(super) ends: HashMap<(Arc<str>, i32), Option<i64>>,
    pub(super) ends_from: usize,
    /// Whether the task stops: it then takes no new partition.
    pub(super) stopping: bool,
}

impl Core {
    /// The state of a replicator producing through `producer` and sending syncs through
    /// `syncs`; `orphans` is shared by the instance's replication tasks.
    /// `budget` bounds what is sent and not acknowledged (see [`UNACKED_SHARE`]).
    pub fn new(
        settings: ReplicatorSettings,
        producer: ThreadedProducer<Deliveries>,
        syncs: SyncSender,
        telemetry: Arc<FlowTelemetry>,
        orphans: Arc<Mutex<Orphans>>,
        budget: UnackedBudget,
        generation: Option<i32>,
    ) -> Self {
        let book = Book::new(BookSettings {
            max_in_flight: settings.max_in_flight,
            on_unproducible: settings.on_unproducible,
            on_transform_error: settings.on_transform_error,
            retry_paused_every: settings.retry_paused_every,
            on_source_truncation: settings.on_source_truncation,
            start_latest: settings.start_offset == crate::config::StartOffset::Latest,
        });
        Core {
            settings,
            producer: Arc::new(producer),
            syncs,
            book,
            telemetry,
            orphans,
            delivered: Vec::new(),
            records: 0,
            bytes: 0,
            dropped: 0,
            rebalances: 0,
            refreshed: HashMap::new(),
            budget,
            generation,
            group_generation: None,
            ends: HashMap::new(),
            ends_from: 0,
            stopping: false,
        }
    }

    /// Purges what the producer holds, queued or in flight (a lost single-instance
    /// lease): their reports come back as failures, so no progress is stored for them.
    pub fn purge(&self) {
        use rdkafka::producer::{Producer, PurgeConfig};
        self.producer
            .purge(PurgeConfig::default().queue().inflight());
    }

    /// Why the producer became unusable, once.
    pub fn take_fatal(&mut self) -> Option<String> {
        self.book.take_fatal()
    }

    /// Produces `msg` to its partition's target, as the transform chain left it (`fate`),
    /// if its partition flows.
    pub fn forward(
        &mut self,
        consumer: &Member,
        msg: &BorrowedMessage<'_>,
        fate: &Fate,
        now: Instant,
    ) -> Forwarded {
        if self.budget.holds(self.unacked()) {
            // Offered again once delivery reports came in (see `wait_for_room`).
            return Forwarded::Full;
        }
        let up = msg.offset();
        // Asked only at a gap or a record handed out again: the log range the fetch that
        // brought the record reported (no request on the hot path; unknown, no loss is
        // judged).
        let range = || cached_watermarks(consumer.client(), msg.topic(), msg.partition());
        let offer = self
            .book
            .offer_at(msg.topic(), msg.partition(), up, range, now);
        let (key, target, partition) = match offer {
            Offer::Send {
                key,
                target,
                partition,
            } => (key, target, partition),
            Offer::Declined => {
                self.apply(consumer);
                return Forwarded::Done;
            }
            Offer::Full => return Forwarded::Full,
        };
        let timestamp = msg.timestamp().to_millis();
        let (record, size) = match outgoing(msg, fate, &target, partition, key as usize) {
            Outgoing::Record(record, size) => (record, size),
            Outgoing::Drop => {
                self.book.dropped(key, up);
                self.dropped += 1;
                return Forwarded::Done;
            }
            Outgoing::Failed(reason) => {
                self.book.transform_failed(key, up, reason.to_string(), now);
                self.apply(consumer);
                return Forwarded::Done;
            }
            Outgoing::Unasked => {
                // Never produced untransformed: read again (and transformed) later.
                self.book.decline(key, up);
                self.apply(consumer);
                return Forwarded::Done;
            }
        };
        match self.producer.send(record) {
            Ok(()) => {
                self.budget.sent(size);
                self.book.sent(
                    key,
                    InFlight {
                        upstream: up,
                        timestamp,
                        sent: now,
                    },
                );
                self.bytes += size as u64;
                Forwarded::Done
            }
            Err((e, _)) => {
                let code = e
                    .rdkafka_error_code()
                    .unwrap_or(rdkafka::error::RDKafkaErrorCode::Fail);
                match classify(code, true).refusal() {
                    None => Forwarded::Full,
                    Some(refusal) => {
                        self.book.refused(key, up, refusal, now);
                        self.apply(consumer);
                        Forwarded::Done
                    }
                }
            }
        }
    }

    /// `msg` waited too long for room: it is not produced now, and its partition reads it
    /// again once there is room.
    pub fn decline(&mut self, consumer: &Member, msg: &BorrowedMessage<'_>) {
        let keys = self
            .book
            .keys_of(&[(msg.topic().to_string(), msg.partition())]);
        if let Some(key) = keys.first() {
            self.book.decline(*key, msg.offset());
            self.apply(consumer);
        }
    }

    /// Whether the target has room again after back-pressure: half the record limit, half
    /// the producer's queue and half the byte budget.
    pub fn has_room(&self) -> bool {
        self.book.in_flight() <= self.settings.max_in_flight / 2
            && self.producer.in_flight_count() <= PRODUCER_QUEUE as i32 / 2
            && self.budget.has_room(self.unacked())
    }

    /// The records the producer holds (queued, in flight, reports not yet served).
    fn unacked(&self) -> usize {
        self.producer.in_flight_count().max(0) as usize
    }

    /// Handles delivery reports, waiting up to `timeout` for as many as the byte budget
    /// needs to let records through again (or for one, if it does not hold them back);
    /// how many it handled.
    pub fn wait_for_room(&mut self, consumer: &Member, timeout: Duration) -> usize {
        // Those already in first: they are no longer counted as un-acknowledged.
        let mut taken = self.poll_reports(consumer, 1, Duration::ZERO);
        if self.budget.holding() {
            if self.budget.holds(self.unacked()) {
                let wanted = self.budget.acks_until_room(self.unacked());
                taken += self.poll_reports(consumer, wanted, timeout);
            }
        } else if taken == 0 {
            taken += self.poll_reports(consumer, 1, timeout);
        }
        taken
    }

    /// Whether the byte budget holds new records back.
    pub fn budget_holds(&self) -> bool {
        self.budget.holding()
    }

    /// The target has no room (`on`): the flowing partitions are paused (a record they
    /// deliver meanwhile is read again later); or it has room again.
    pub fn set_backpressure(&mut self, consumer: &Member, on: bool) {
        self.book.set_backpressure(on);
        self.apply(consumer);
    }

    /// Whether the flowing partitions are paused for lack of room.
    pub fn backpressure(&self) -> bool {
        self.book.backpressure()
    }

    /// Handles the producer's delivery reports (collected on its own thread), waiting up to
    /// `timeout` for one.
    pub fn poll_producer(&mut self, consumer: &Member, timeout: Duration) {
        self.poll_reports(consumer, 1, timeout);
    }

    /// Handles delivery reports, waiting up to `timeout` until `wanted` came in; how many.
    fn poll_reports(&mut self, consumer: &Member, wanted: usize, timeout: Duration) -> usize {
        self.syncs.poll();
        let mut delivered = std::mem::take(&mut self.delivered);
        self.producer
            .context()
            .take_at_least(&mut delivered, wanted, timeout);
        let taken = delivered.len();
        let (now, now_ms) = (Instant::now(), now_ms());
        let (mut ok, mut timed_out, mut unsure) = (0, false, 0);
        for d in delivered.drain(..) {
            ok += usize::from(d.result.is_ok());
            unsure += usize::from(d.unsure);
            timed_out |= d.result == Err(rdkafka::types::RDKafkaErrorCode::MessageTimedOut);
            let result = d.result.map_err(|code| {
                classify(code, false)
                    .refusal()
                    .unwrap_or_else(|| super::book::Refusal::Transient(code.to_string()))
            });
            if let Some(ack) = self.book.delivered(d.key, result, now) {
                // Stored, but behind a record that failed: read and sent again from there.
                unsure += usize::from(!ack.counts);
                self.acked(ack, now_ms);
            }
        }
        self.delivered = delivered;
        if unsure > 0 {
            self.resent_unsure(unsure);
        }
        if timed_out {
            // A record given up (a single instance's producer): what was queued behind it
            // is given up too, so a partition's records are sent again in their order
            // rather than the later ones first.
            use rdkafka::producer::{Producer, PurgeConfig};
            self.producer.purge(PurgeConfig::default().queue());
        }
        self.budget.acked(ok, now);
        if self.unacked() == 0 {
            self.budget.idle();
        }
        self.apply(consumer);
        if self.records > 0 {
            self.telemetry
                .add(Counter::Records, std::mem::take(&mut self.records));
            self.telemetry
                .add(Counter::Bytes, std::mem::take(&mut self.bytes));
        }
        taken
    }

    fn acked(&mut self, ack: Ack, now_ms: i64) {
        self.records += 1;
        if ack.counts {
            self.syncs.on_ack(ack.key, ack.upstream, ack.downstream);
        }
        if let Some(ts) = ack.timestamp {
            self.telemetry.latency.observe_ms(now_ms - ts, 1);
        }
    }

    /// Applies what the book decided.
    pub(super) fn apply(&mut self, consumer: &Member) {
        for effect in self.book.take_effects() {
            match effect {
                Effect::Pause(t, p) => {
                    if let Err(e) = consumer.pause(&tpl_of([(&*t, p)])) {
                        self.telemetry.note_error("pause a partition", "kafka", &e);
                    }
                }
                Effect::Resume(t, p) => {
                    if let Err(e) = consumer.resume(&tpl_of([(&*t, p)])) {
                        self.telemetry.note_error("resume a partition", "kafka", &e);
                    }
                }
                Effect::Seek(t, p, at) => {
                    if let Err(e) = consumer.seek(&t, p, Offset::Offset(at), Duration::ZERO) {
                        self.telemetry
                            .note_error("seek a partition back", "kafka", &e);
                    }
                }
                Effect::Started {
                    key,
                    topic,
                    partition,
                    generation,
                } => self.syncs.register(key, topic, partition, generation),
                Effect::Retired(key) => self.syncs.retire(key),
                Effect::RefreshMetadata(topic) => self.refresh_metadata(topic),
                Effect::Unproducible {
                    topic,
                    partition,
                    offset,
                    reason,
                    skipped,
                    transform,
                } => {
                    if transform {
                        self.report_transform_failure(&topic, partition, offset, &reason, skipped)
                    } else {
                        self.report_unproducible(&topic, partition, offset, &reason, skipped)
                    }
                }
                Effect::Truncated {
                    topic,
                    partition,
                    truncation,
                    paused,
                } => self.report_truncation(&topic, partition, &truncation, paused),
                Effect::Retrying(topic, partition, offset) => {
                    tracing::info!(flow = %self.settings.flow, topic = %topic, partition, offset, "retrying the record the target did not take");
                }
            }
        }
    }

    /// Asks the target for `topic`'s metadata off this thread, so the producer learns its
    /// new partitions (at most once a second per topic).
    fn refresh_metadata(&mut self, topic: Arc<str>) {
        let now = Instant::now();
        if self
            .refreshed
            .get(&topic)
            .is_some_and(|t| now.duration_since(*t) < REFRESH_EVERY)
        {
            return;
        }
        self.refreshed.insert(topic.clone(), now);
        let producer = self.producer.clone();
        let spawned = std::thread::Builder::new()
            .name("kmirror-metadata".into())
            .spawn(move || {
                let _ = producer
                    .client()
                    .fetch_metadata(Some(&topic), Duration::from_secs(10));
            });
        if let Err(e) = spawned {
            self.telemetry
                .note_error("refresh the target's metadata", "kafka", &e);
        }
    }

    /// `n` records were given up on their way to the target, which may have stored them,
    /// or stored behind one that failed: they are sent again, and the target may then hold
    /// them twice. Counted and logged (rare: a request the target did not answer in time,
    /// a record it refused with later ones in flight).
    fn resent_unsure(&self, n: usize) {
        self.telemetry
            .add(Counter::RecordsResentPossiblyStored, n as u64);
        tracing::warn!(flow = %self.settings.flow, records = n,
            "records were given up on their way to the target (not answered in time — a single instance waits a quarter of session_timeout — or the producer was reset) and are sent again: the target may have stored them already and then holds them twice (counted in kmirror_records_resent_possibly_stored_total); for a target this slow, raise session_timeout");
    }

    fn report_unproducible(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        reason: &str,
        skipped: bool,
    ) {
        let what = format!("{topic}[{partition}] offset {offset}: {reason}");
        if skipped {
            self.telemetry.add(Counter::UnproducibleSkipped, 1);
            self.telemetry.note_error(
                "skipped a record the target will not take",
                "unproducible",
                &what,
            );
            return;
        }
        self.telemetry.add(Counter::UnproduciblePaused, 1);
        self.telemetry
            .note_error("the target will not take a record", "unproducible", &what);
        if self.telemetry.first_time(&format!("unproducible {what}")) {
            tracing::error!(flow = %self.settings.flow, topic, partition, offset, reason,
                "the target will not take this record: its partition is paused there, every other partition goes on (on_unproducible = \"skip\" skips such records)");
        }
    }

    fn report_truncation(&self, topic: &str, partition: i32, t: &Truncation, paused: bool) {
        self.telemetry.source_truncated(topic, partition, t, paused);
        let what = format!("{topic}[{partition}]: {t}");
        self.telemetry
            .update(|s| s.last_error = Some(format!("records lost at the source: {what}")));
        let then = if paused {
            "the partition is paused there (on_source_truncation = \"pause\"): restart with \"continue\" or move its progress with `kmirror offsets` to go on"
        } else {
            "mirroring goes on from the log start (on_source_truncation = \"pause\" stops the partition instead)"
        };
        tracing::error!(flow = %self.settings.flow, topic, partition, lost = t.records(), "{what}; {then}");
    }

    fn report_transform_failure(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        reason: &str,
        skipped: bool,
    ) {
        let what = format!("{topic}[{partition}] offset {offset}: {reason}");
        if skipped {
            self.telemetry.add(Counter::TransformFailuresSkipped, 1);
            self.telemetry
                .note_error("skipped a record a transform failed on", "transform", &what);
            return;
        }
        self.telemetry.add(Counter::TransformFailuresPaused, 1);
        self.telemetry
            .note_error("a transform failed on a record", "transform", &what);
        if self
            .telemetry
            .first_time(&format!("transform failed {what}"))
        {
            tracing::error!(flow = %self.settings.flow, topic, partition, offset, reason,
                "a record transform failed on this record: its partition is paused there and retries it, every other partition goes on (on_transform_error = \"skip\" skips such records)");
        }
    }

    /// New routes from discovery: owned partitions follow them (held while their topic is
    /// not routed or the target lacks the partition; a new target once their records in
    /// flight are acked). Returns the topics to subscribe to.
    pub fn set_routes(&mut self, consumer: &Member, routes: Routes) -> Vec<String> {
        let topics = self.book.set_routes(routes);
        self.apply(consumer);
        topics
    }

    /// The progress of every partition that moved since the last commit, and of those not
    /// committed for [`super::progress::REFRESH_EVERY`], to be committed (by the committer; the outcome comes back through [`Self::committed`]).
    pub fn take_commits(&mut self) -> Option<TopicPartitionList> {
        let commits = self
            .book
            .take_commits_refreshing(Instant::now(), self.settings.refresh_every);
        (!commits.is_empty()).then(|| offsets_tpl(&commits))
    }

    /// The task stops (it keeps what it owns until its turn to leave the group): it takes
    /// no new partition from now on.
    pub fn stop_taking(&mut self) {
        self.stopping = true;
    }

    /// What becomes of a record a transform fails on, from now on.
    pub fn transform_errors(&mut self, on_error: OnUnproducible) {
        self.book.transform_errors(on_error);
    }

    /// Outcomes of commits: failures are retried with the next commit.
    pub fn committed(&mut self, outcomes: Vec<CommitOutcome>) {
        for o in outcomes {
            let mut failure = o.error.clone();
            for (t, p, at, error) in &o.partitions {
                // A partition's own outcome decides: a request that failed in part stored
                // the others (`kafka::commit`).
                self.book.commit_result(t, *p, *at, error.is_none());
                if failure.is_none() {
                    failure.clone_from(error);
                }
            }
            match failure {
                None => self.telemetry.update(|s| {
                    s.last_commit_ms = Some(now_ms());
                    s.commit_failing = None;
                }),
                Some(why) => {
                    self.telemetry.add(Counter::CommitFailures, 1);
                    self.telemetry.note_error("store progress", "commit", &why);
                    self.telemetry.update(|s| s.commit_failing = Some(why));
                }
            }
        }
    }

    /// Every flush interval: delayed syncs, retries, status.
    pub fn tick(&mut self, consumer: &Member, now: Instant) {
        self.telemetry
            .add(Counter::Records, std::mem::take(&mut self.records));
        self.telemetry
            .add(Counter::RecordsDropped, std::mem::take(&mut self.dropped));
        self.telemetry
            .add(Counter::Bytes, std::mem::take(&mut self.bytes));
        self.syncs.flush_delayed();
        self.book.tick(now);
        self.apply(consumer);
        self.publish_status(consumer, now);
    }
}

pub(super) fn offsets_tpl(commits: &[(Arc<str>, i32, i64)]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (t, p, at) in commits {
        let _ = tpl.add_partition_offset(t, *p, Offset::Offset(*at));
    }
    tpl
}
