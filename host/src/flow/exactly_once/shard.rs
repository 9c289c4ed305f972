//! One shard of an exactly-once flow, on its own thread: a transactional producer with the
//! shard's fixed transactional id, a source consumer that reads the shard's partitions by
//! `assign()`, and the [`Ledger`] of the open transaction. At start `init_transactions`
//! fences the shard's previous owner (its open transaction is aborted, and it can never
//! commit again); only then is the shard's progress read from the target, where the
//! transactions store it. Each transaction holds records of several partitions and every
//! partition's new position (`send_offsets_to_transaction`); it is committed every
//! `transaction_interval` or at its size caps. A record the target does not take aborts
//! the transaction and the partitions read again from their stored positions; a commit
//! that fails for good (fenced, the producer unusable) ends the shard: its owner rejoins
//! from stored progress. After each commit the source group's offsets are committed (so
//! consumer-lag tools show the mirror's lag) and the offset syncs are written.

use super::ledger::{Ledger, Rewind, Take};
use super::shards::{ShardPartition, partitions_of};
use crate::config::{OnSourceTruncation, OnUnproducible, StartOffset};
use crate::flow::Routes;
use crate::flow::offset_syncs::MARKER_HEADER;
use crate::flow::offset_syncs::OffsetSyncWriter;
use crate::flow::offset_syncs::sender::{SyncRecord, SyncSender};
use crate::flow::replication::chain::Fate;
use crate::flow::replication::contexts::{Delivered, Deliveries};
use crate::flow::replication::failures::{Failure, classify};
use crate::flow::replication::outgoing::{Outgoing, outgoing};
use crate::flow::replication::{ChainSource, transformed};
use crate::flow::telemetry::{
    Counter, FlowTelemetry, MemberStatus, PartitionStatus, Paused, now_ms,
};
use crate::kafka::Cluster;
use crate::kafka::clients::cached_watermarks;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, DefaultConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long `poll` waits for a record when nothing else is due.
const POLL: Duration = Duration::from_millis(50);
/// Records at most in one fetched batch.
const MAX_BATCH: usize = 500;
/// How long a transactional call (init, send offsets, commit, abort) may take.
const TXN_CALL: Duration = Duration::from_secs(30);
/// kmirror's producer linger (`crate::kafka::clients`), and the shards' unless the user set
/// another.
const DEFAULT_LINGER_MS: &str = "5";
const TRANSACTIONAL_LINGER_MS: &str = "100";
/// How many times a transactional call is made while its error is retriable.
const TXN_ATTEMPTS: u32 = 3;
/// Bytes a shard keeps un-acked at most (roughly: counted as records times the current
/// record's size). More than the connection's in-flight requests hold only queues up in
/// the producer, whose broker thread then spins (polls with no timeout) until a request
/// slot frees: measured, most of the mode's CPU before this cap.
const UNACKED_BYTES: usize = 4 << 20;
/// The delivery-report key of an offset sync written inside a transaction (no partition's).
const SYNC_REPORT: usize = usize::MAX;
/// How long reading the shard's stored progress may take.
const READ_PROGRESS: Duration = Duration::from_secs(15);
/// The transaction timeout: a transaction the broker aborts when its owner vanished.
const TRANSACTION_TIMEOUT_MS: &str = "60000";

/// How a shard's stop is asked for.
pub mod stop {
    /// Keep running.
    pub const RUN: u8 = 0;
    /// Commit the open transaction, then stop.
    pub const GRACEFUL: u8 = 1;
    /// Stop now without committing (the shard is someone else's already).
    pub const ABANDON: u8 = 2;
}

/// What a shard runs with.
pub struct ShardContext {
    /// Where records come from.
    pub source: Cluster,
    /// Where records and progress go.
    pub target: Cluster,
    /// Where offset syncs go when not on the target (`None`: on the target, written
    /// inside the transaction of the records they describe).
    pub syncs_cluster: Option<Cluster>,
    /// `source->target`, for logs.
    pub flow: String,
    /// This shard, and how many the flow has.
    pub shard: u32,
    /// How many shards the flow has.
    pub shards: u32,
    /// The shard's transactional id.
    pub transactional_id: String,
    /// The progress group: on the target it holds the stored positions (written by the
    /// transactions), on the source the same positions for lag tools.
    pub progress_group: String,
    /// The offset-syncs topic.
    pub syncs_topic: String,
    /// The shards group's generation this shard was assigned in (the syncs' owner
    /// generation).
    pub generation: i32,
    /// Settings.
    pub settings: ShardSettings,
    /// What discovery routes.
    pub routes: watch::Receiver<Routes>,
    /// Asks the shard to stop (see [`stop`]).
    pub stop: Arc<AtomicU8>,
    /// Counters and status.
    pub telemetry: Arc<FlowTelemetry>,
    /// The record-transform chain in force, if any.
    pub roles: Option<ChainSource>,
    /// A different number for every run of every shard (offset-sync sessions).
    pub session: u64,
}

/// A shard's settings.
#[derive(Debug, Clone)]
pub struct ShardSettings {
    /// A transaction is committed this often.
    pub transaction_interval: Duration,
    /// Records at most in one transaction.
    pub max_records: u64,
    /// Key and value bytes at most in one transaction.
    pub max_bytes: u64,
    /// Where a partition without stored progress starts.
    pub start_offset: StartOffset,
    /// What happens to a record the target will not take.
    pub on_unproducible: OnUnproducible,
    /// What happens to a record a transform fails on.
    pub on_transform_error: OnUnproducible,
    /// What happens when the source lost records before they were mirrored.
    pub on_source_truncation: OnSourceTruncation,
    /// How often a paused partition tries its record again.
    pub retry_paused_every: Duration,
    /// An offset sync at least every this many records.
    pub offset_lag_max: u64,
    /// How often status is published and delayed syncs are sent.
    pub flush_interval: Duration,
    /// How often positions are stored again though they did not move.
    pub refresh_every: Duration,
}

/// Why a shard ended.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// A client could not be created.
    #[error(transparent)]
    Client(#[from] crate::kafka::KafkaError),
    /// A transactional call failed for good: the shard was taken over (fenced) or the
    /// producer is unusable.
    #[error(
        "shard {shard}: {operation} failed: {message} (fenced by a newer owner of the shard, or the producer is unusable); its transaction is not committed"
    )]
    Transaction {
        /// The shard.
        shard: u32,
        /// What failed.
        operation: &'static str,
        /// Why.
        message: String,
    },
    /// A consumer call failed.
    #[error("shard {shard}: {operation}: {message}")]
    Consumer {
        /// The shard.
        shard: u32,
        /// What failed.
        operation: &'static str,
        /// Why.
        message: String,
    },
}

type Source = BaseConsumer<DefaultConsumerContext>;

/// The shard's clients and state.
struct Shard {
    ctx: ShardContext,
    /// Polled by the shard's own thread (a `ThreadedProducer`'s polling thread spins on a
    /// transactional producer's queue: measured, most of the mode's CPU).
    producer: BaseProducer<Deliveries>,
    progress: Source,
    syncs: SyncSender,
    ledger: Ledger,
    assigned: BTreeSet<ShardPartition>,
    delivered: Vec<Delivered>,
    /// Partitions paused in the source consumer because they stopped.
    paused: BTreeSet<(String, i32)>,
    /// Why each stopped partition stopped, for `/status`.
    reasons: BTreeMap<(String, i32), Paused>,
    /// Records to skip when read again (`on_unproducible = "skip"`).
    skip: BTreeSet<(String, i32, i64)>,
    /// The first delivery error of the open transaction.
    failed_code: Option<RDKafkaErrorCode>,
    /// Partitions sought back during the batch being taken (their later records in it
    /// are read again after the seek).
    rewound: Vec<(String, i32)>,
    dropped: u64,
    /// Offset syncs written inside the transaction being committed.
    staged: Vec<SyncRecord>,
    /// When the shard's status was last published.
    published: Instant,
}

/// Runs the shard until asked to stop (`Ok`), or until a transactional call fails for good.
pub fn run(ctx: ShardContext) -> Result<(), ShardError> {
    let (member, generation) = (ctx.shard, ctx.generation);
    let telemetry = ctx.telemetry.clone();
    let result = Shard::start(ctx).and_then(|(shard, source)| shard.run(&source));
    // Unless a newer run of the shard published its own status meanwhile.
    telemetry.update(|s| {
        let newer = s
            .members
            .get(&member)
            .is_some_and(|m| m.generation != Some(generation));
        if !newer {
            s.publish_member(member, None);
        }
    });
    result
}

impl Shard {
    fn start(ctx: ShardContext) -> Result<(Shard, Source), ShardError> {
        let shard = ctx.shard;
        // Records become visible at the commit anyway: a longer linger than kmirror's 5 ms
        // default costs no latency and most of the producers' wake-ups (measured: 1,000,000
        // x 1 KiB, 11.9 -> 7.8 CPU s). A linger the user set is kept.
        let linger = match ctx.target.producer_config(&[]).get("linger.ms") {
            Some(v) if v != DEFAULT_LINGER_MS => v.to_string(),
            _ => TRANSACTIONAL_LINGER_MS.to_string(),
        };
        // The user's queue sizes win.
        let queue = ctx.target.setting_or("queue.buffering.max.kbytes", "16384");
        let queued = ctx.source.setting_or("queued.max.messages.kbytes", "8192");
        let producer = ctx.target.base_producer(
            &[
                ("linger.ms", linger.as_str()),
                ("transactional.id", ctx.transactional_id.as_str()),
                ("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS),
                ("message.timeout.ms", TRANSACTION_TIMEOUT_MS),
                // Per shard (an instance may run every shard of the flow).
                ("queue.buffering.max.messages", "50000"),
                ("queue.buffering.max.kbytes", queue.as_str()),
            ],
            Deliveries::default(),
        )?;
        // Fences the shard's previous owner: its open transaction is aborted, and it can
        // never commit again. Only then is the stored progress final.
        producer
            .init_transactions(TXN_CALL)
            .map_err(|e| txn_error(shard, "init_transactions", &e))?;
        tracing::info!(flow = %ctx.flow, shard, transactional_id = %ctx.transactional_id, "shard taken: any earlier owner of it is fenced");
        let reset = match ctx.settings.start_offset {
            StartOffset::Earliest => "earliest",
            StartOffset::Latest => "latest",
        };
        let source = ctx.source.group_member(
            &ctx.progress_group,
            &[
                ("auto.offset.reset", reset),
                ("allow.auto.create.topics", "false"),
                ("queued.max.messages.kbytes", queued.as_str()),
            ],
            DefaultConsumerContext,
        )?;
        let progress = ctx
            .target
            .group_member(&ctx.progress_group, &[], DefaultConsumerContext)?;
        let writer = OffsetSyncWriter::new(ctx.settings.offset_lag_max, ctx.session);
        let syncs = match &ctx.syncs_cluster {
            Some(cluster) => {
                SyncSender::new(writer, cluster, &ctx.syncs_topic, ctx.telemetry.clone())?
            }
            None => SyncSender::in_transactions(writer, &ctx.syncs_topic, ctx.telemetry.clone()),
        };
        let shard = Shard {
            ctx,
            producer,
            progress,
            syncs,
            ledger: Ledger::new(),
            assigned: BTreeSet::new(),
            delivered: Vec::new(),
            paused: BTreeSet::new(),
            reasons: BTreeMap::new(),
            skip: BTreeSet::new(),
            failed_code: None,
            rewound: Vec::new(),
            dropped: 0,
            staged: Vec::new(),
            published: Instant::now(),
        };
        Ok((shard, source))
    }

    fn run(mut self, src: &Source) -> Result<(), ShardError> {
        let routes = self.ctx.routes.borrow_and_update().clone();
        self.follow(src, &routes)?;
        let flush = self.ctx.settings.flush_interval;
        let mut next_tick = Instant::now();
        loop {
            match self.ctx.stop.load(Ordering::Acquire) {
                stop::RUN => {}
                stop::GRACEFUL => {
                    self.commit(src)?;
                    // The last delayed syncs (each partition's last acked record), so the
                    // next owner translates exactly to the end: sent by the sync producer,
                    // or, with the syncs topic on the target, in one more transaction.
                    self.syncs.flush_delayed();
                    self.begin_for_syncs()?;
                    self.commit(src)?;
                    self.syncs.drain(Duration::from_secs(5));
                    return Ok(());
                }
                _ => return Ok(()),
            }
            if self.ctx.routes.has_changed().unwrap_or(false) {
                let routes = self.ctx.routes.borrow_and_update().clone();
                self.follow(src, &routes)?;
            }
            let batch = self.fetch(src);
            if !batch.is_empty() {
                self.take(src, &batch)?;
            }
            if self.abandoned() {
                // Nothing is committed or waited for (a batch may have ended early).
                return Ok(());
            }
            self.serve_deliveries(Duration::ZERO);
            let now = Instant::now();
            if !self.ledger.open() && self.ledger.unstored() {
                // Positions to store without a record (a start at the end): an
                // offsets-only transaction.
                self.producer
                    .begin_transaction()
                    .map_err(|e| txn_error(self.ctx.shard, "begin_transaction", &e))?;
                self.ledger.began(now);
            }
            self.begin_for_syncs()?;
            let s = &self.ctx.settings;
            if self.ledger.failed().is_some()
                || self
                    .ledger
                    .due(now, s.transaction_interval, s.max_records, s.max_bytes)
            {
                self.commit(src)?;
            }
            if now >= next_tick {
                next_tick = now + flush;
                // Quiet partitions' positions stored again now and then (an offsets-only
                // transaction when no records flow).
                self.ledger
                    .refresh_due(now, self.ctx.settings.refresh_every);
                self.retry_stopped(src, now)?;
                self.syncs.flush_delayed();
                self.publish_status(src);
                self.published = now;
            }
        }
    }

    /// The shard's partitions follow the routes: partitions that left are released (after
    /// the open transaction is committed), new ones read their stored progress and join.
    fn follow(&mut self, src: &Source, routes: &Routes) -> Result<(), ShardError> {
        let wanted: BTreeSet<ShardPartition> =
            partitions_of(routes, self.ctx.shard, self.ctx.shards)
                .into_iter()
                .collect();
        let gone: Vec<ShardPartition> = self.assigned.difference(&wanted).cloned().collect();
        let new: Vec<ShardPartition> = wanted.difference(&self.assigned).cloned().collect();
        if gone.is_empty() && new.is_empty() {
            return Ok(());
        }
        if !gone.is_empty() {
            self.commit(src)?;
            let tpl = tpl_of(gone.iter().map(|p| (p.source.as_str(), p.partition)));
            src.incremental_unassign(&tpl)
                .map_err(|e| self.consumer_error("release partitions", &e))?;
            for p in &gone {
                if let Some(key) = self.ledger.remove(&p.source, p.partition) {
                    self.syncs.retire(key);
                }
                self.paused.remove(&(p.source.clone(), p.partition));
                self.skip
                    .retain(|(t, q, _)| !(*t == p.source && *q == p.partition));
                self.reasons.remove(&(p.source.clone(), p.partition));
                self.assigned.remove(p);
            }
        }
        if !new.is_empty() {
            // The positions the shard's transactions stored on the target, under the
            // target topics' partitions (read_committed: only committed transactions').
            let wanted = tpl_of(new.iter().map(|p| (p.target.as_str(), p.partition)));
            let stored = self
                .progress
                .committed_offsets(wanted, READ_PROGRESS)
                .map_err(|e| self.consumer_error("read the shard's stored progress", &e))?;
            if let Some(e) = stored.elements().iter().find(|e| e.error().is_err()) {
                let why = format!("{}[{}]: {:?}", e.topic(), e.partition(), e.error());
                return Err(ShardError::Consumer {
                    shard: self.ctx.shard,
                    operation: "read the shard's stored progress",
                    message: why,
                });
            }
            // The source group's progress too: the larger of the two is where the flow
            // got. In this mode the source group is committed after the target, so it is
            // ahead only when at-least-once mode ran meanwhile (a flow switched from it,
            // or switched back to exactly-once: the target's progress is then stale, and
            // going on from it would mirror the whole at-least-once period again — issue
            // 34 item 3).
            let fallback = {
                let tpl = tpl_of(new.iter().map(|p| (p.source.as_str(), p.partition)));
                let read = src
                    .committed_offsets(tpl, READ_PROGRESS)
                    .map_err(|e| self.consumer_error("read the source group's progress", &e))?;
                if let Some(e) = read.elements().iter().find(|e| e.error().is_err()) {
                    return Err(ShardError::Consumer {
                        shard: self.ctx.shard,
                        operation: "read the source group's progress",
                        message: format!("{}[{}]: {:?}", e.topic(), e.partition(), e.error()),
                    });
                }
                read
            };
            let mut assign = TopicPartitionList::new();
            for p in &new {
                let at = match (
                    stored_at(&stored, &p.target, p.partition),
                    stored_at(&fallback, &p.source, p.partition),
                ) {
                    (Some(target), Some(source)) => Some(target.max(source)),
                    (target, source) => target.or(source),
                };
                // None stored: a topic failed back starts where the failover left it.
                let at = at.or_else(|| routes.get(&p.source)?.start_of(p.partition));
                let key = self.ledger.add(&p.source, p.partition, &p.target, at);
                self.syncs.register(
                    key,
                    Arc::from(p.source.as_str()),
                    p.partition,
                    self.ctx.generation,
                );
                let offset = match (at, self.ctx.settings.start_offset) {
                    (Some(n), StartOffset::Earliest) => Offset::Offset(n),
                    (Some(n), StartOffset::Latest) => {
                        // librdkafka would answer a stored position the log no longer
                        // spans with its end and hand out nothing until a new record: read
                        // from the log start instead (the ledger judges the first record
                        // against the stored position, and reports what was lost).
                        match src.fetch_watermarks(&p.source, p.partition, READ_PROGRESS) {
                            Ok((low, high)) if n < low || n > high => {
                                tracing::info!(flow = %self.ctx.flow, topic = %p.source, partition = p.partition, stored = n, log_start = low, log_end = high, "the stored position lies outside the partition's log: read from its start");
                                Offset::Offset(low)
                            }
                            _ => Offset::Offset(n),
                        }
                    }
                    (None, StartOffset::Earliest) => Offset::Beginning,
                    (None, StartOffset::Latest) => {
                        // The end now, stored with the next transaction: if the shard
                        // moves before a record arrives, its next owner starts here, not
                        // at a later end.
                        let (_, high) = src
                            .fetch_watermarks(&p.source, p.partition, READ_PROGRESS)
                            .map_err(|e| self.consumer_error("read a partition's end", &e))?;
                        self.ledger.start_at(key, high);
                        Offset::Offset(high)
                    }
                };
                let _ = assign.add_partition_offset(&p.source, p.partition, offset);
                self.assigned.insert(p.clone());
            }
            src.incremental_assign(&assign)
                .map_err(|e| self.consumer_error("assign the shard's partitions", &e))?;
        }
        tracing::info!(flow = %self.ctx.flow, shard = self.ctx.shard, partitions = self.assigned.len(), added = new.len(), released = gone.len(), "shard partitions follow the routed topics");
        self.publish_status(src);
        Ok(())
    }

    /// The next records: the first waits up to [`POLL`], then what is fetched already.
    fn fetch<'c>(&self, src: &'c Source) -> Vec<BorrowedMessage<'c>> {
        let mut batch = Vec::new();
        let mut wait = POLL;
        while batch.len() < MAX_BATCH {
            match src.poll(wait) {
                Some(Ok(msg)) => batch.push(msg),
                Some(Err(e)) => self.ctx.telemetry.note_error("consume", "kafka", &e),
                None => break,
            }
            wait = Duration::ZERO;
        }
        batch
    }

    /// Takes a batch into the open transaction (beginning one if none is open).
    fn take(&mut self, src: &Source, batch: &[BorrowedMessage<'_>]) -> Result<(), ShardError> {
        let chain = self
            .ctx
            .roles
            .as_ref()
            .map(|chain| chain())
            .filter(|c| !c.roles.record_transforms.is_empty());
        let fates: Vec<Fate> = match &chain {
            Some(chain) => {
                // What a failure means follows the chain in force (a reload may change it
                // between two batches).
                self.ctx.settings.on_transform_error = chain.on_error;
                transformed(
                    &chain.roles.record_transforms,
                    batch,
                    chain.on_error,
                    &self.ctx.telemetry,
                )
            }
            None => Vec::new(),
        };
        let pause_lost = self.ctx.settings.on_source_truncation == OnSourceTruncation::Pause;
        // Partitions sent back to an earlier record in this batch: their later records are
        // read again after the seek, not taken now.
        self.rewound.clear();
        for (i, msg) in batch.iter().enumerate() {
            let (topic, partition, offset) = (msg.topic(), msg.partition(), msg.offset());
            if self
                .rewound
                .iter()
                .any(|(t, p)| t == topic && *p == partition)
            {
                continue;
            }
            let Some(key) = self.ledger.key(topic, partition) else {
                continue;
            };
            let client = src.client();
            let low = || {
                cached_watermarks(client, topic, partition)
                    .map(|(low, _)| low)
                    .filter(|low| *low >= 0)
            };
            match self.ledger.judge(key, offset, low, pause_lost) {
                Take::Take => {}
                Take::Ignore => continue,
                Take::Stopped => {
                    self.pause(src, topic, partition);
                    continue;
                }
                Take::Lost { truncation, take } => {
                    self.ctx
                        .telemetry
                        .source_truncated(topic, partition, &truncation, !take);
                    let then = if take {
                        "mirroring goes on from the log start (on_source_truncation = \"pause\" stops the partition instead)"
                    } else {
                        "the partition is paused there (on_source_truncation = \"pause\"): restart with \"continue\" or move its progress with `kmirror offsets` to go on"
                    };
                    tracing::error!(flow = %self.ctx.flow, topic, partition, lost = truncation.records(), "{topic}[{partition}]: {truncation}; {then}");
                    if !take {
                        self.pause(src, topic, partition);
                        continue;
                    }
                }
                Take::Reread { truncation, at } => {
                    self.ctx
                        .telemetry
                        .source_truncated(topic, partition, &truncation, false);
                    tracing::error!(flow = %self.ctx.flow, topic, partition, lost = truncation.records(), "{topic}[{partition}]: {truncation}; mirroring goes on from the log start, {at} (on_source_truncation = \"pause\" stops the partition instead)");
                    self.rewind(src, &Rewind::to(topic, partition, at))?;
                    continue;
                }
            }
            if !self.ledger.open() {
                self.producer
                    .begin_transaction()
                    .map_err(|e| txn_error(self.ctx.shard, "begin_transaction", &e))?;
                self.ledger.began(Instant::now());
            }
            if self.skip.remove(&(topic.to_string(), partition, offset)) {
                self.ledger.passed(key, offset);
                continue;
            }
            let target = self
                .ledger
                .part(key)
                .map(|p| p.target.clone())
                .unwrap_or_default();
            let fate = fates.get(i).unwrap_or(&Fate::Keep);
            match outgoing(msg, fate, &target, partition, key as usize) {
                Outgoing::Record(mut record, size) => loop {
                    if self.ledger.failed().is_none()
                        && self.producer.in_flight_count().max(0) as usize * size.max(100)
                            >= UNACKED_BYTES
                    {
                        self.wait_for_room(src);
                    }
                    match self.producer.send(record) {
                        Ok(()) => {
                            self.ledger.produced(key, offset, size);
                            let st = &self.ctx.settings;
                            if self.ledger.full(st.max_records, st.max_bytes) {
                                // At a cap: committed now, the rest of the batch goes into
                                // the next transaction (after an abort, the partitions
                                // sought back skip the rest and read it again).
                                self.commit(src)?;
                            }
                            break;
                        }
                        Err((e, back)) => {
                            let code = e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail);
                            match classify(code, true) {
                                Failure::Backpressure if self.ledger.failed().is_some() => {
                                    // The transaction aborts anyway (a record was refused):
                                    // no waiting for room, the partition reads this record
                                    // again after the abort.
                                    self.rewind(src, &Rewind::to(topic, partition, offset))?;
                                }
                                Failure::Backpressure
                                    if self.ctx.stop.load(Ordering::Acquire) != stop::RUN =>
                                {
                                    // Stopping with a full queue (the target slow or
                                    // away): the batch ends here. A graceful stop commits
                                    // what was taken; an abandoned shard serves no report
                                    // any more, so the queue would never drain and this
                                    // loop would spin for the life of the process.
                                    return Ok(());
                                }
                                Failure::Backpressure => {
                                    // Full: wait until a quarter of the queue is acked
                                    // (not one send attempt per report).
                                    record = back;
                                    self.wait_for_room(src);
                                    continue;
                                }
                                Failure::Transient(why) => {
                                    // Not produced now: the partition reads it again.
                                    self.ctx.telemetry.note_error("produce", "kafka", &why);
                                    self.rewind(src, &Rewind::to(topic, partition, offset))?;
                                }
                                Failure::Unproducible(why) => {
                                    self.unproducible(
                                        src, key, topic, partition, offset, &why, false, false,
                                    );
                                }
                                Failure::Fatal(why) => {
                                    return Err(ShardError::Transaction {
                                        shard: self.ctx.shard,
                                        operation: "produce",
                                        message: why,
                                    });
                                }
                            }
                            break;
                        }
                    }
                },
                Outgoing::Drop => {
                    self.dropped += 1;
                    self.ledger.passed(key, offset);
                }
                Outgoing::Failed(reason) => {
                    let reason = reason.to_string();
                    self.unproducible(src, key, topic, partition, offset, &reason, true, false);
                }
                Outgoing::Unasked => {
                    // Read again (and transformed) later: the partition goes back there.
                    self.rewind(src, &Rewind::to(topic, partition, offset))?;
                }
            }
        }
        Ok(())
    }

    /// A record the target does not take (or a transform failed on): skipped, or its
    /// partition stops there. `read_again`: the transaction it was in was aborted, so it
    /// is read again (and skipped then, or stops its partition).
    #[allow(clippy::too_many_arguments)]
    fn unproducible(
        &mut self,
        src: &Source,
        key: u64,
        topic: &str,
        partition: i32,
        offset: i64,
        reason: &str,
        transform: bool,
        read_again: bool,
    ) {
        let skip = if transform {
            self.ctx.settings.on_transform_error == OnUnproducible::Skip
        } else {
            self.ctx.settings.on_unproducible == OnUnproducible::Skip
        };
        let what = format!("{topic}[{partition}] offset {offset}: {reason}");
        let (counter, operation) = match (transform, skip) {
            (false, true) => (
                Counter::UnproducibleSkipped,
                "skipped a record the target will not take",
            ),
            (false, false) => (
                Counter::UnproduciblePaused,
                "the target will not take a record",
            ),
            (true, true) => (
                Counter::TransformFailuresSkipped,
                "skipped a record a transform failed on",
            ),
            (true, false) => (
                Counter::TransformFailuresPaused,
                "a transform failed on a record",
            ),
        };
        self.ctx.telemetry.add(counter, 1);
        self.ctx.telemetry.note_error(
            operation,
            if transform {
                "transform"
            } else {
                "unproducible"
            },
            &what,
        );
        if skip {
            if !read_again {
                self.ledger.passed(key, offset);
            }
            return;
        }
        tracing::error!(flow = %self.ctx.flow, topic, partition, offset, reason, "{operation}: its partition is paused there, every other partition goes on");
        self.ledger.block(key, offset, Instant::now(), true);
        self.reasons.insert(
            (topic.to_string(), partition),
            Paused {
                offset,
                reason: reason.to_string(),
                since_ms: now_ms(),
            },
        );
        if !read_again {
            // (Read again, the records before it are taken first; it pauses on reaching it.)
            self.pause(src, topic, partition);
        }
    }

    fn pause(&mut self, src: &Source, topic: &str, partition: i32) {
        if self.paused.insert((topic.to_string(), partition))
            && let Err(e) = src.pause(&tpl_of([(topic, partition)]))
        {
            self.ctx
                .telemetry
                .note_error("pause a partition", "kafka", &e);
        }
    }

    /// Syncs waiting to be written inside a transaction (delayed ones of an idle partition,
    /// the last of a released one) open one if none is open.
    fn begin_for_syncs(&mut self) -> Result<(), ShardError> {
        if !self.ledger.open() && self.syncs.waiting() {
            self.producer
                .begin_transaction()
                .map_err(|e| txn_error(self.ctx.shard, "begin_transaction", &e))?;
            self.ledger.began(Instant::now());
        }
        Ok(())
    }

    /// Writes the offset syncs of the transaction about to commit (its acked records', and
    /// any queued earlier) inside it, when the syncs topic is on the target.
    fn write_syncs(&mut self, src: &Source) -> Result<(), ShardError> {
        if self.ctx.syncs_cluster.is_some() {
            return Ok(());
        }
        let staged = self.syncs.stage(self.ledger.acked());
        let topic = self.ctx.syncs_topic.clone();
        for sync in &staged {
            let headers = OwnedHeaders::new().insert(Header {
                key: MARKER_HEADER,
                value: Some(sync.marker.as_bytes()),
            });
            let mut record: BaseRecord<'_, [u8], [u8], usize> =
                BaseRecord::with_opaque_to(&topic, SYNC_REPORT)
                    .partition(0)
                    .key(sync.key.as_slice())
                    .payload(sync.value.as_slice())
                    .headers(headers);
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((e, _)) if self.abandoned() => {
                        // Abandoned with a full queue: it never drains (see `take`).
                        self.syncs.aborted(&staged);
                        return Err(ShardError::Transaction {
                            shard: self.ctx.shard,
                            operation: "write an offset sync",
                            message: format!("the shard was abandoned: {e}"),
                        });
                    }
                    Err((e, back))
                        if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) =>
                    {
                        record = back;
                        self.wait_for_room(src);
                    }
                    Err((e, _)) => {
                        // The transaction is aborted (its syncs with it).
                        self.syncs.aborted(&staged);
                        return Err(ShardError::Transaction {
                            shard: self.ctx.shard,
                            operation: "write an offset sync",
                            message: e.to_string(),
                        });
                    }
                }
            }
        }
        self.staged = staged;
        Ok(())
    }

    /// Reads a partition again from `r.at` (resuming it if it was paused).
    /// A seek that fails ends the shard (it starts again from stored progress): reading
    /// on past records of an aborted transaction would lose them.
    fn rewind(&mut self, src: &Source, r: &Rewind) -> Result<(), ShardError> {
        src.seek(
            &r.source,
            r.partition,
            Offset::Offset(r.at),
            Duration::from_secs(5),
        )
        .map_err(|e| self.consumer_error("seek a partition back", &e))?;
        if self.paused.remove(&(r.source.clone(), r.partition))
            && let Err(e) = src.resume(&tpl_of([(r.source.as_str(), r.partition)]))
        {
            self.ctx
                .telemetry
                .note_error("resume a partition", "kafka", &e);
        }
        self.rewound.push((r.source.clone(), r.partition));
        Ok(())
    }

    /// Partitions stopped at a record long enough read it again.
    fn retry_stopped(&mut self, src: &Source, now: Instant) -> Result<(), ShardError> {
        for r in self
            .ledger
            .unblock_due(now, self.ctx.settings.retry_paused_every)
        {
            tracing::info!(flow = %self.ctx.flow, topic = %r.source, partition = r.partition, offset = r.at, "retrying the record its partition stopped at");
            self.reasons.remove(&(r.source.clone(), r.partition));
            self.rewind(src, &r)?;
        }
        Ok(())
    }

    /// Whether the shard was abandoned: it ends without committing or waiting for anything.
    fn abandoned(&self) -> bool {
        self.ctx.stop.load(Ordering::Acquire) == stop::ABANDON
    }

    /// Serves delivery reports until a quarter of what the producer holds is acked (or a
    /// report failed: the transaction is to be aborted). The status stays current meanwhile
    /// (a target away holds the shard here).
    fn wait_for_room(&mut self, src: &Source) {
        let held = self.producer.in_flight_count();
        let deadline = Instant::now() + TXN_CALL;
        while self.producer.in_flight_count() > held - held / 4
            && self.ledger.failed().is_none()
            && self.ctx.stop.load(Ordering::Acquire) != stop::ABANDON
            && Instant::now() < deadline
        {
            self.serve_deliveries(Duration::from_millis(10));
            if self.published.elapsed() >= self.ctx.settings.flush_interval {
                self.publish_status(src);
                self.published = Instant::now();
            }
        }
    }

    fn serve_deliveries(&mut self, timeout: Duration) {
        self.syncs.poll();
        let mut delivered = std::mem::take(&mut self.delivered);
        self.producer.poll(timeout);
        self.producer.context().take(&mut delivered, Duration::ZERO);
        for d in delivered.drain(..) {
            if let Err(code) = d.result {
                self.failed_code.get_or_insert(code);
            }
            self.ledger
                .delivered(d.key, d.result.map_err(|code| code.to_string()));
        }
        self.delivered = delivered;
    }

    /// Ends the open transaction: every record acked, the positions stored, committed. A
    /// record the target did not take aborts it instead (and is skipped or stops its
    /// partition when read again).
    fn commit(&mut self, src: &Source) -> Result<(), ShardError> {
        if !self.ledger.open() {
            return Ok(());
        }
        let shard = self.ctx.shard;
        let began = Instant::now();
        if let Err(e) = self.producer.flush(TXN_CALL) {
            tracing::warn!(flow = %self.ctx.flow, shard, error = %e, "records not all acked before the commit");
        }
        let flushed = began.elapsed();
        self.serve_deliveries(Duration::ZERO);
        if self.ledger.in_flight() > 0 && self.ledger.failed().is_none() {
            return self.abort(src, "records not acked in time");
        }
        if let Some((key, offset, why)) = self.ledger.failed().cloned() {
            let Some((topic, partition)) = self
                .ledger
                .part(key)
                .map(|p| (p.source.clone(), p.partition))
            else {
                return self.abort(src, &why);
            };
            let failure = self.failed_code.take().map(|c| classify(c, false));
            self.abort(src, &format!("{topic}[{partition}] offset {offset}: {why}"))?;
            // Read again: a record the target will never take is skipped, or stops its
            // partition there; anything else is simply tried again.
            match failure {
                Some(Failure::Unproducible(reason)) => {
                    if self.ctx.settings.on_unproducible == OnUnproducible::Skip {
                        // Passed over when read again.
                        self.skip.insert((topic.clone(), partition, offset));
                    }
                    self.unproducible(src, key, &topic, partition, offset, &reason, false, true);
                }
                Some(Failure::Fatal(reason)) => {
                    return Err(ShardError::Transaction {
                        shard,
                        operation: "produce",
                        message: reason,
                    });
                }
                _ => {}
            }
            return Ok(());
        }
        self.write_syncs(src)?;
        let positions = self.ledger.positions();
        if !positions.is_empty() {
            let mut tpl = TopicPartitionList::new();
            for p in &positions {
                let _ = tpl.add_partition_offset(&p.target, p.partition, Offset::Offset(p.at));
            }
            let Some(metadata) = self.progress.group_metadata() else {
                return Err(ShardError::Transaction {
                    shard,
                    operation: "send_offsets_to_transaction",
                    message: "the progress group's metadata is unavailable".into(),
                });
            };
            if let Err(e) =
                self.retrying(|p| p.send_offsets_to_transaction(&tpl, &metadata, TXN_CALL))
            {
                if requires_abort(&e) {
                    return self.abort(src, &e.to_string());
                }
                return Err(txn_error(shard, "send_offsets_to_transaction", &e));
            }
        }
        if let Err(e) = self.retrying(|p| p.commit_transaction(TXN_CALL)) {
            if requires_abort(&e) {
                return self.abort(src, &e.to_string());
            }
            return Err(txn_error(shard, "commit_transaction", &e));
        }
        let (records, bytes, acked) = self.ledger.committed();
        tracing::debug!(flow = %self.ctx.flow, shard, records, bytes, flush_ms = flushed.as_millis() as u64, took_ms = began.elapsed().as_millis() as u64, "transaction committed");
        self.ctx.telemetry.add(Counter::Transactions, 1);
        self.ctx.telemetry.add(Counter::Records, records);
        self.ctx.telemetry.add(Counter::Bytes, bytes);
        self.ctx
            .telemetry
            .add(Counter::RecordsDropped, std::mem::take(&mut self.dropped));
        self.ctx.telemetry.update(|s| {
            s.last_commit_ms = Some(now_ms());
            s.commit_failing = None;
        });
        if self.ctx.syncs_cluster.is_some() {
            // Syncs of committed records only (MM2's way when they go to the source).
            for (key, up, down) in acked {
                self.syncs.on_ack(key, up, down);
            }
        } else {
            self.syncs.committed(&std::mem::take(&mut self.staged));
        }
        // The same positions on the source, for consumer-lag tools (best effort: the
        // target's are the truth).
        if !positions.is_empty() {
            let tpl = tpl_of_offsets(
                positions
                    .iter()
                    .map(|p| (p.source.as_str(), p.partition, p.at)),
            );
            if let Err(e) = src.commit(&tpl, CommitMode::Async) {
                self.ctx
                    .telemetry
                    .note_error("store progress on the source", "commit", &e);
            }
        }
        Ok(())
    }

    /// Aborts the open transaction; its partitions read again from their stored positions.
    fn abort(&mut self, src: &Source, why: &str) -> Result<(), ShardError> {
        let shard = self.ctx.shard;
        tracing::warn!(flow = %self.ctx.flow, shard, reason = why, "transaction aborted; its partitions are read again from their stored positions");
        self.ctx.telemetry.add(Counter::TransactionsAborted, 1);
        self.retrying(|p| p.abort_transaction(TXN_CALL))
            .map_err(|e| txn_error(shard, "abort_transaction", &e))?;
        // Every report of the aborted records is awaited and dropped, so none is taken for
        // a record of the next transaction.
        let deadline = Instant::now() + TXN_CALL;
        while self.producer.in_flight_count() > 0 && Instant::now() < deadline {
            self.producer.poll(Duration::from_millis(5));
        }
        let mut stale = Vec::new();
        self.producer.context().take(&mut stale, Duration::ZERO);
        if self.producer.in_flight_count() > 0 {
            return Err(ShardError::Transaction {
                shard,
                operation: "abort_transaction",
                message: "reports of the aborted records did not all arrive".into(),
            });
        }
        self.syncs.aborted(&std::mem::take(&mut self.staged));
        for r in self.ledger.aborted() {
            self.rewind(src, &r)?;
        }
        self.failed_code = None;
        self.dropped = 0;
        Ok(())
    }

    fn publish_status(&self, src: &Source) {
        let mut partitions: BTreeMap<String, BTreeMap<i32, PartitionStatus>> = BTreeMap::new();
        for (_, p) in self.ledger.parts() {
            let end = cached_watermarks(src.client(), &p.source, p.partition).map(|(_, h)| h);
            let position = p.stored();
            let paused = self.reasons.get(&(p.source.clone(), p.partition)).cloned();
            let state = if p.blocked().is_some() {
                "paused"
            } else {
                "mirroring"
            };
            partitions.entry(p.source.clone()).or_default().insert(
                p.partition,
                PartitionStatus {
                    position,
                    end,
                    lag: end.zip(position).map(|(e, pos)| (e - pos).max(0)),
                    in_flight: p.in_flight(),
                    state,
                    paused,
                    unstored_ms: None,
                },
            );
        }
        let member = MemberStatus {
            partitions,
            oldest_unacked_ms: None,
            rebalances: 0,
            generation: Some(self.ctx.generation),
        };
        let index = self.ctx.shard;
        self.ctx
            .telemetry
            .update(|s| s.publish_member(index, Some(member)));
    }

    /// A transactional call, asked again while librdkafka says the error is retriable (a
    /// timeout: the call resumes where it was), at most [`TXN_ATTEMPTS`] times and never
    /// once the shard is abandoned (another instance owns it: it fenced this one).
    fn retrying(
        &self,
        call: impl Fn(&BaseProducer<Deliveries>) -> Result<(), KafkaError>,
    ) -> Result<(), KafkaError> {
        let mut attempt = 1;
        loop {
            match call(&self.producer) {
                Err(KafkaError::Transaction(e))
                    if e.is_retriable()
                        && attempt < TXN_ATTEMPTS
                        && self.ctx.stop.load(Ordering::Acquire) != stop::ABANDON =>
                {
                    tracing::warn!(flow = %self.ctx.flow, shard = self.ctx.shard, error = %e, attempt, "transactional call not answered in time; asking again");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn consumer_error(&self, operation: &'static str, e: &KafkaError) -> ShardError {
        ShardError::Consumer {
            shard: self.ctx.shard,
            operation,
            message: e.to_string(),
        }
    }
}

/// The stored offset of `topic`/`partition` in `tpl`, if there is one.
fn stored_at(tpl: &TopicPartitionList, topic: &str, partition: i32) -> Option<i64> {
    tpl.find_partition(topic, partition)
        .and_then(|e| match e.offset() {
            Offset::Offset(n) if n >= 0 => Some(n),
            _ => None,
        })
}

/// Whether a transactional call's error only needs the transaction aborted.
fn requires_abort(e: &KafkaError) -> bool {
    matches!(e, KafkaError::Transaction(r) if r.txn_requires_abort() && !r.is_fatal())
}

fn txn_error(shard: u32, operation: &'static str, e: &KafkaError) -> ShardError {
    ShardError::Transaction {
        shard,
        operation,
        message: e.to_string(),
    }
}

fn tpl_of<'a>(partitions: impl IntoIterator<Item = (&'a str, i32)>) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (t, p) in partitions {
        tpl.add_partition(t, p);
    }
    tpl
}

fn tpl_of_offsets<'a>(
    partitions: impl IntoIterator<Item = (&'a str, i32, i64)>,
) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (t, p, at) in partitions {
        let _ = tpl.add_partition_offset(t, p, Offset::Offset(at));
    }
    tpl
}
