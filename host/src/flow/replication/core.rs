//! The data plane's state and rules, shared by the replicator's loop and its consumer-group
//! callbacks (both on the replicator's thread): forwarding a record, delivery reports,
//! unproducible records, partitions assigned and revoked, progress commits, and the status
//! of every owned partition.

use super::ReplicatorSettings;
use super::contexts::{CommitOutcome, Delivered, Deliveries, Membership};
use super::failures::{Failure, OnUnproducible, classify};
use super::progress::InFlight;
use super::table::{Hold, SlotKey, Table};
use crate::flow::Routes;
use crate::flow::offset_syncs::sender::SyncSender;
use crate::flow::telemetry::{
    Counter, FlowTelemetry, MemberStatus, PartitionStatus, Paused, now_ms,
};
use crate::kafka::clients::cached_watermarks;
use crate::kafka::clients::group_generation;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The replicator's group member.
pub type Member = BaseConsumer<Membership>;

/// What became of a record handed to [`Core::forward`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarded {
    /// Sent, skipped or not ours: the next record may come.
    Done,
    /// No room (the producer's queue is full or too many records are in flight): offer it
    /// again later.
    Full,
}

/// How long a revocation waits for the revoked partitions' records in flight.
const REVOKE_DRAIN: Duration = Duration::from_secs(10);

/// The data plane's state.
pub struct Core {
    settings: ReplicatorSettings,
    producer: ThreadedProducer<Deliveries>,
    syncs: SyncSender,
    table: Table,
    routes: Routes,
    telemetry: Arc<FlowTelemetry>,
    in_flight: usize,
    delivered: Vec<Delivered>,
    records: u64,
    bytes: u64,
    fatal: Option<String>,
    rebalances: u64,
}

fn tpl_of(partitions: &[(Arc<str>, i32)]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (t, p) in partitions {
        tpl.add_partition(t, *p);
    }
    tpl
}

impl Core {
    /// The state of a replicator producing through `producer` and sending syncs through
    /// `syncs`.
    pub fn new(
        settings: ReplicatorSettings,
        producer: ThreadedProducer<Deliveries>,
        syncs: SyncSender,
        telemetry: Arc<FlowTelemetry>,
    ) -> Self {
        Core {
            settings,
            producer,
            syncs,
            table: Table::default(),
            routes: Routes::new(),
            telemetry,
            in_flight: 0,
            delivered: Vec::new(),
            records: 0,
            bytes: 0,
            fatal: None,
            rebalances: 0,
        }
    }

    /// Why the producer became unusable, once.
    pub fn take_fatal(&mut self) -> Option<String> {
        self.fatal.take()
    }

    /// Produces `msg` to its partition's target, unless the partition is held.
    pub fn forward(
        &mut self,
        consumer: &Member,
        msg: &BorrowedMessage<'_>,
        now: Instant,
    ) -> Forwarded {
        if self.in_flight >= self.settings.max_in_flight {
            return Forwarded::Full;
        }
        let Some(p) = self.table.get_by_name_mut(msg.topic(), msg.partition()) else {
            return Forwarded::Done;
        };
        let (Hold::None, Some(target)) = (&p.hold, &p.target) else {
            return Forwarded::Done;
        };
        let up = msg.offset();
        let key = p.key;
        let timestamp = msg.timestamp().to_millis();
        let mut record: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(target, key as usize).partition(p.partition);
        if let Some(k) = msg.key() {
            record = record.key(k);
        }
        if let Some(v) = msg.payload() {
            record = record.payload(v);
        }
        if let Some(ts) = timestamp {
            record = record.timestamp(ts);
        }
        if let Some(h) = msg.headers() {
            if h.count() > 0 {
                record = record.headers(h.detach());
            }
        }
        match self.producer.send(record) {
            Ok(()) => {
                p.progress.sent(InFlight {
                    upstream: up,
                    timestamp,
                    sent: now,
                });
                self.in_flight += 1;
                self.bytes += (msg.payload_len() + msg.key().map_or(0, <[u8]>::len)) as u64;
                Forwarded::Done
            }
            Err((e, _)) => {
                let code = e
                    .rdkafka_error_code()
                    .unwrap_or(rdkafka::error::RDKafkaErrorCode::Fail);
                match classify(code, true) {
                    Failure::Backpressure => Forwarded::Full,
                    Failure::Purged => Forwarded::Done,
                    Failure::Unproducible(reason) => {
                        self.unproducible(consumer, key, up, reason);
                        Forwarded::Done
                    }
                    Failure::Fatal(reason) => {
                        self.fatal.get_or_insert(reason);
                        Forwarded::Full
                    }
                }
            }
        }
    }

    /// The record at `offset` of partition `key` will not be taken by the target.
    fn unproducible(&mut self, consumer: &Member, key: SlotKey, offset: i64, reason: String) {
        let Some(p) = self.table.get_mut(key) else {
            return;
        };
        let (topic, partition) = (p.topic.clone(), p.partition);
        let what = format!("{topic}[{partition}] offset {offset}: {reason}");
        match self.settings.on_unproducible {
            OnUnproducible::Skip => {
                p.progress.skipped(offset);
                self.telemetry.add(Counter::UnproducibleSkipped, 1);
                self.telemetry.note_error(
                    "skipped a record the target will not take",
                    "unproducible",
                    &what,
                );
            }
            OnUnproducible::Pause => {
                p.progress.block(offset);
                p.hold = Hold::Unproducible {
                    paused: Paused {
                        offset,
                        reason: reason.clone(),
                        since_ms: now_ms(),
                    },
                    retry_at: Instant::now() + self.settings.retry_paused_every,
                };
                if let Err(e) = consumer.pause(&tpl_of(&[(topic.clone(), partition)])) {
                    self.telemetry.note_error("pause a partition", "kafka", &e);
                }
                self.telemetry.add(Counter::UnproduciblePaused, 1);
                self.telemetry.note_error(
                    "the target will not take a record",
                    "unproducible",
                    &what,
                );
                if self.telemetry.first_time(&format!("unproducible {what}")) {
                    tracing::error!(flow = %self.settings.flow, topic = %topic, partition, offset, reason = %reason,
                        "the target will not take this record: its partition is paused there, every other partition goes on (on_unproducible = \"skip\" skips such records)");
                }
            }
        }
    }

    /// Handles the producer's delivery reports (collected on its own thread), waiting up to
    /// `timeout` for one.
    pub fn poll_producer(&mut self, consumer: &Member, timeout: Duration) {
        self.syncs.poll();
        let mut delivered = std::mem::take(&mut self.delivered);
        self.producer.context().take(&mut delivered, timeout);
        let now = now_ms();
        for d in delivered.drain(..) {
            self.in_flight = self.in_flight.saturating_sub(1);
            let Some(p) = self.table.get_mut(d.key) else {
                continue; // handed over meanwhile
            };
            let Some(record) = p.progress.delivered() else {
                continue;
            };
            let counts = p.progress.counts(record.upstream);
            match d.result {
                Ok(down) => {
                    self.records += 1;
                    if counts {
                        self.syncs.on_ack(d.key, record.upstream, down);
                    }
                    if let Some(ts) = record.timestamp {
                        self.telemetry.latency.observe_ms(now - ts, 1);
                    }
                }
                Err(code) => match classify(code, false) {
                    Failure::Purged | Failure::Backpressure => {}
                    Failure::Unproducible(reason) if counts => {
                        self.unproducible(consumer, d.key, record.upstream, reason)
                    }
                    Failure::Unproducible(_) => {}
                    Failure::Fatal(reason) => {
                        self.fatal.get_or_insert(reason);
                    }
                },
            }
        }
        self.delivered = delivered;
        if self.records > 0 {
            self.telemetry
                .add(Counter::Records, std::mem::take(&mut self.records));
            self.telemetry
                .add(Counter::Bytes, std::mem::take(&mut self.bytes));
        }
    }

    /// The group assigned `tpl` to this instance.
    pub fn assign(&mut self, consumer: &Member, tpl: &TopicPartitionList) {
        let mut waiting = Vec::new();
        let mut names = Vec::new();
        for e in tpl.elements() {
            let (topic, partition) = (e.topic(), e.partition());
            let route = self.routes.get(topic);
            let key = self.table.insert(
                topic,
                partition,
                route.map(|r| Arc::from(r.target.as_str())),
            );
            self.syncs.register(key, Arc::from(topic), partition);
            if route.is_none_or(|r| partition >= r.partitions) {
                if let Some(p) = self.table.get_mut(key) {
                    p.hold = Hold::Waiting;
                }
                waiting.push((Arc::from(topic), partition));
            }
            names.push(format!("{topic}[{partition}]"));
        }
        if !waiting.is_empty() {
            if let Err(e) = consumer.pause(&tpl_of(&waiting)) {
                self.telemetry.note_error("pause a partition", "kafka", &e);
            }
        }
        self.rebalances += 1;
        tracing::info!(flow = %self.settings.flow, partitions = names.len(), assigned = %names.join(", "), owned = self.table.len(), "partitions assigned to this instance");
    }

    /// The group takes `tpl` from this instance: their records in flight are awaited and
    /// their progress committed before they go (unless the assignment was lost, when no
    /// commit is allowed and they are abandoned).
    pub fn revoke(&mut self, consumer: &Member, tpl: &TopicPartitionList) {
        let lost = consumer.assignment_lost();
        let keys: Vec<SlotKey> = tpl
            .elements()
            .iter()
            .filter_map(|e| {
                self.table
                    .get_by_name_mut(e.topic(), e.partition())
                    .map(|p| p.key)
            })
            .collect();
        if !lost {
            let deadline = Instant::now() + REVOKE_DRAIN.min(self.settings.drain_timeout);
            while Instant::now() < deadline
                && keys.iter().any(|k| {
                    self.table
                        .get_mut(*k)
                        .is_some_and(|p| p.progress.in_flight() > 0)
                })
            {
                self.poll_producer(consumer, Duration::from_millis(10));
            }
            let mut commit = TopicPartitionList::new();
            for k in &keys {
                if let Some(p) = self.table.get_mut(*k) {
                    if let Some(at) = p.progress.take_commit() {
                        let _ =
                            commit.add_partition_offset(&p.topic, p.partition, Offset::Offset(at));
                    }
                }
            }
            if commit.count() > 0 {
                match consumer.commit(&commit, CommitMode::Sync) {
                    Ok(()) => self.telemetry.update(|s| s.last_commit_ms = Some(now_ms())),
                    Err(e) => {
                        self.telemetry.add(Counter::CommitFailures, 1);
                        self.telemetry.note_error(
                            "store progress of revoked partitions",
                            "commit",
                            &e,
                        );
                    }
                }
            }
        }
        let mut names = Vec::new();
        for e in tpl.elements() {
            if let Some(p) = self.table.remove(e.topic(), e.partition()) {
                self.syncs.retire(p.key);
                names.push(format!("{}[{}]", p.topic, p.partition));
            }
        }
        self.rebalances += 1;
        tracing::info!(flow = %self.settings.flow, partitions = names.len(), revoked = %names.join(", "), lost, owned = self.table.len(), "partitions revoked from this instance");
    }

    /// A rebalance failed.
    pub fn rebalance_failed(&mut self, e: &rdkafka::error::KafkaError) {
        self.telemetry.note_error("rebalance", "kafka", e);
    }

    /// New routes from discovery: owned partitions follow them (held while their topic is
    /// not routed or the target lacks the partition). Returns the topics to subscribe to.
    pub fn set_routes(&mut self, consumer: &Member, routes: Routes) -> Vec<String> {
        let (mut pause, mut resume) = (Vec::new(), Vec::new());
        for p in self.table.iter_mut() {
            let route = routes.get(&*p.topic).filter(|r| p.partition < r.partitions);
            p.target = routes.get(&*p.topic).map(|r| Arc::from(r.target.as_str()));
            match (route.is_some(), &p.hold) {
                (true, Hold::Waiting) => {
                    p.hold = Hold::None;
                    resume.push((p.topic.clone(), p.partition));
                }
                (false, Hold::None) => {
                    p.hold = Hold::Waiting;
                    pause.push((p.topic.clone(), p.partition));
                }
                _ => {}
            }
        }
        if !pause.is_empty() {
            let _ = consumer.pause(&tpl_of(&pause));
        }
        if !resume.is_empty() {
            let _ = consumer.resume(&tpl_of(&resume));
        }
        self.routes = routes;
        self.routes.keys().cloned().collect()
    }

    /// The partitions that are not held (what back-pressure pauses and resumes).
    pub fn flowing(&self) -> TopicPartitionList {
        let flowing: Vec<(Arc<str>, i32)> = self
            .table
            .iter()
            .filter(|p| p.hold == Hold::None)
            .map(|p| (p.topic.clone(), p.partition))
            .collect();
        tpl_of(&flowing)
    }

    /// The progress of every partition that moved since the last commit, to be committed
    /// (by the committer; the outcome comes back through [`Self::committed`]).
    pub fn take_commits(&mut self) -> Option<TopicPartitionList> {
        let mut tpl = TopicPartitionList::new();
        for p in self.table.iter_mut() {
            if let Some(at) = p.progress.take_commit() {
                let _ = tpl.add_partition_offset(&p.topic, p.partition, Offset::Offset(at));
            }
        }
        (tpl.count() > 0).then_some(tpl)
    }

    fn commit_failed(&mut self, tpl: &TopicPartitionList, error: &str) {
        for e in tpl.elements() {
            if let (Some(p), Some(at)) = (
                self.table.get_by_name_mut(e.topic(), e.partition()),
                e.offset().to_raw(),
            ) {
                p.progress.commit_failed(at);
            }
        }
        self.telemetry.add(Counter::CommitFailures, 1);
        self.telemetry
            .note_error("store progress", "commit", &error);
        let error = error.to_string();
        self.telemetry.update(|s| s.commit_failing = Some(error));
    }

    /// Outcomes of asynchronous commits: failures are retried with the next commit.
    pub fn committed(&mut self, outcomes: Vec<CommitOutcome>) {
        for o in outcomes {
            let failed: Vec<&(String, i32, i64, Option<String>)> = o
                .partitions
                .iter()
                .filter(|p| o.error.is_some() || p.3.is_some())
                .collect();
            if failed.is_empty() {
                self.telemetry.update(|s| {
                    s.last_commit_ms = Some(now_ms());
                    s.commit_failing = None;
                });
                continue;
            }
            let mut tpl = TopicPartitionList::new();
            for (t, p, at, _) in &failed {
                let _ = tpl.add_partition_offset(t, *p, Offset::Offset(*at));
            }
            let why = o
                .error
                .clone()
                .or_else(|| failed.iter().find_map(|p| p.3.clone()))
                .unwrap_or_default();
            self.commit_failed(&tpl, &why);
        }
    }

    /// Every flush interval: delayed syncs, retries of paused partitions, status.
    pub fn tick(&mut self, consumer: &Member, now: Instant) {
        self.telemetry
            .add(Counter::Records, std::mem::take(&mut self.records));
        self.telemetry
            .add(Counter::Bytes, std::mem::take(&mut self.bytes));
        self.syncs.flush_delayed();
        self.retry_paused(consumer, now);
        self.publish_status(consumer, now);
    }

    fn retry_paused(&mut self, consumer: &Member, now: Instant) {
        for p in self.table.iter_mut() {
            let Hold::Unproducible { retry_at, .. } = &p.hold else {
                continue;
            };
            if *retry_at > now {
                continue;
            }
            let Some(at) = p.progress.unblock() else {
                continue; // abandoned records still in flight
            };
            p.hold = Hold::None;
            let tp = tpl_of(&[(p.topic.clone(), p.partition)]);
            let seeked = consumer.seek(&p.topic, p.partition, Offset::Offset(at), Duration::ZERO);
            if let Err(e) = seeked.and_then(|()| consumer.resume(&tp)) {
                self.telemetry
                    .note_error("resume a paused partition", "kafka", &e);
            }
            tracing::info!(flow = %self.settings.flow, topic = %p.topic, partition = p.partition, offset = at, "retrying the record the target did not take");
        }
    }

    fn publish_status(&mut self, consumer: &Member, now: Instant) {
        let mut partitions: BTreeMap<String, BTreeMap<i32, PartitionStatus>> = BTreeMap::new();
        let mut oldest: Option<Instant> = None;
        for p in self.table.iter() {
            let position = p.progress.committable();
            let end = cached_watermarks(consumer.client(), &p.topic, p.partition).map(|(_, h)| h);
            if let Some(sent) = p.progress.oldest_sent() {
                oldest = Some(oldest.map_or(sent, |o| o.min(sent)));
            }
            let (state, paused) = match &p.hold {
                Hold::None => ("mirroring", None),
                Hold::Waiting => ("waiting", None),
                Hold::Unproducible { paused, .. } => ("paused", Some(paused.clone())),
            };
            let status = PartitionStatus {
                position,
                end,
                lag: end.zip(position).map(|(e, pos)| (e - pos).max(0)),
                in_flight: p.progress.in_flight(),
                state,
                paused,
            };
            partitions
                .entry(p.topic.to_string())
                .or_default()
                .insert(p.partition, status);
        }
        let member = MemberStatus {
            partitions,
            oldest_unacked_ms: oldest.map(|o| now.saturating_duration_since(o).as_millis() as i64),
            rebalances: self.rebalances,
            generation: group_generation(consumer),
        };
        let index = self.settings.member;
        self.telemetry.update(|s| {
            s.publish_member(index, Some(member));
            s.replicator_restarting = None;
        });
    }

    /// A graceful stop: waits until `deadline` for the records in flight and the offset
    /// syncs; returns the progress to commit.
    pub fn drain(&mut self, consumer: &Member, deadline: Instant) -> Option<TopicPartitionList> {
        while self.in_flight > 0 && Instant::now() < deadline {
            self.poll_producer(consumer, Duration::from_millis(20));
        }
        if self.in_flight > 0 {
            tracing::warn!(flow = %self.settings.flow, in_flight = self.in_flight, "records still in flight at the stop deadline; they will be mirrored again after a restart");
        }
        self.syncs
            .drain(deadline.saturating_duration_since(Instant::now()));
        self.telemetry
            .add(Counter::Records, std::mem::take(&mut self.records));
        self.telemetry
            .add(Counter::Bytes, std::mem::take(&mut self.bytes));
        self.take_commits()
    }
}
