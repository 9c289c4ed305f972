//! The replicator's thread: one loop over the group member's `poll` (a batch of fetched
//! records per pass) and the target producer's delivery reports, without a future or an
//! allocation per record. A record without room (the byte budget of un-acknowledged
//! records, a full producer queue) is held while delivery reports come in; if none come
//! for a while, or the batch waits too long, the held records are declined (their
//! partitions read them again later) and the flowing partitions are paused
//! (back-pressure) so the group membership keeps being served; they resume when there is
//! room again. A graceful stop waits for this task's turn to leave the group
//! ([`LeaveOrder`]), then drains, bounded by the drain timeout.

use super::ReplicateError;
use super::ReplicatorSettings;
use super::book::Orphans;
use super::budget::UnackedBudget;
use super::chain::{self, Fate};
use super::contexts::{Deliveries, Membership};
use super::core::{Core, Forwarded, Member, Shared, tpl_of};
use super::leave::LeaveOrder;
use crate::config::{OnUnproducible, StartOffset};
use crate::flow::Routes;
use crate::flow::offset_syncs::OffsetSyncWriter;
use crate::flow::offset_syncs::sender::SyncSender;
use crate::flow::telemetry::FlowTelemetry;
use crate::kafka::Cluster;
use crate::kafka::clients::{group_generation, headers_of};
use crate::kafka::commit::commit_sync;
use crate::policy::{ChainLink, RecordIn};
use rdkafka::consumer::Consumer;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long `poll` waits for a record when nothing else is due.
const POLL: Duration = Duration::from_millis(50);
/// How long a held record waits for room, with no delivery report coming in, before the
/// flowing partitions are paused.
const HOLD_BEFORE_PAUSE: Duration = Duration::from_secs(2);
/// How long a fetched batch may wait for room however slowly it goes through (a slow
/// target): the consumer is not polled meanwhile, and its poll interval is 30 s.
const BATCH_HOLD_MAX: Duration = Duration::from_secs(10);
/// Delivery reports are served at least every this many records.
const REPORTS_EVERY: u32 = 256;
/// Records at most in one batch (fetched, then through the record-transform chain).
const MAX_BATCH: usize = 500;
/// Key and value bytes at most in one batch (far below a plugin's memory limit).
const MAX_BATCH_BYTES: usize = 4 << 20;
/// How long the chain may spend on one batch: a batch call that failed is asked again
/// record by record, and each call may run to its deadline; past this the rest of the batch
/// is read again later, so the group membership is served (its poll interval is 30 s).
const CHAIN_BUDGET: Duration = Duration::from_secs(10);

/// What one replicator run works with.
pub struct WorkerContext {
    /// Where records come from (and progress is stored).
    pub source: Cluster,
    /// Where records go.
    pub target: Cluster,
    /// Where offset syncs go.
    pub syncs_cluster: Cluster,
    /// Settings.
    pub settings: ReplicatorSettings,
    /// What discovery routes.
    pub routes: watch::Receiver<Routes>,
    /// Stops the run.
    pub shutdown: CancellationToken,
    /// Counters and status.
    pub telemetry: Arc<FlowTelemetry>,
    /// This run's offset-sync session.
    pub session: u64,
    /// What the instance's tasks mirrored of partitions whose assignment was lost.
    pub orphans: Arc<Mutex<Orphans>>,
    /// The order in which the instance's tasks leave the group at a graceful stop.
    pub leave: Arc<LeaveOrder>,
    /// Changes when the task is to rejoin the group.
    pub rejoin: watch::Receiver<u64>,
    /// The flow's roles in force, for the record-transform chain.
    pub roles: Option<super::ChainSource>,
    /// A single-instance flow's task count: the task takes its share of the routed
    /// partitions itself (`None`: through the group).
    pub split: Option<u32>,
    /// Cancelled when the single-instance lease is lost: stop at once.
    pub abandon: CancellationToken,
    /// Where a single instance's task registers its producer.
    pub producers: Option<super::Producers>,
    /// A single instance's lease epoch (its partitions' owner generation).
    pub epoch: Option<i32>,
    /// When a single instance's lease term ends.
    pub term: Option<crate::flow::single::TermEnd>,
}

impl WorkerContext {
    /// Whether the task must stop at once: the single-instance lease is lost, or its term
    /// ended (checked here, by the task itself, on the boot clock: a process that stalled
    /// past the term, or a machine woken from a suspend, forwards nothing more whatever
    /// the lease's task is doing).
    fn abandoned(&self) -> bool {
        self.abandon.is_cancelled() || self.term.as_ref().is_some_and(|t| t.over())
    }
}

/// Commits progress through the group member on its own thread, one commit at a time, so
/// a slow or missing group coordinator never stalls the data plane. Outcomes go to the
/// member's context, where the loop picks them up; whether one runs is kept there too
/// (`contexts::Committing`), where a revocation waits for it.
struct Committer {
    tx: Option<mpsc::Sender<TopicPartitionList>>,
    consumer: Arc<Member>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Committer {
    fn start(consumer: Arc<Member>, flow: &str) -> Committer {
        let (tx, rx) = mpsc::channel::<TopicPartitionList>();
        let member = consumer.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("kmirror-commit-{flow}"))
            .spawn(move || {
                while let Ok(tpl) = rx.recv() {
                    let outcome = commit_sync(&member, &tpl);
                    member.context().record_commit(outcome);
                    member.context().committing().set(false);
                }
            });
        match spawned {
            Ok(thread) => Committer {
                tx: Some(tx),
                consumer,
                thread: Some(thread),
            },
            Err(e) => {
                tracing::error!(flow, error = %e, "cannot start the committer thread; progress is stored at the stop only");
                Committer {
                    tx: None,
                    consumer,
                    thread: None,
                }
            }
        }
    }

    /// Ends the committer thread (after the commit it runs, if any), releasing its handle
    /// of the group member.
    fn finish(mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn idle(&self) -> bool {
        self.consumer.context().committing().idle()
    }

    /// Waits until no commit runs, at most until `deadline`; whether none runs.
    fn wait_idle(&self, deadline: Instant) -> bool {
        self.consumer.context().committing().wait_idle(deadline)
    }

    fn commit(&self, tpl: TopicPartitionList) {
        if let Some(tx) = &self.tx {
            let committing = self.consumer.context().committing();
            committing.set(true);
            if tx.send(tpl).is_err() {
                committing.set(false);
            }
        }
    }
}

/// A task's producer queue (KiB) unless the target's librdkafka settings say otherwise;
/// the task keeps at most half of it un-acknowledged (`core::UNACKED_SHARE`). With the
/// consumer's prefetch below it is most of a task's memory (docs/performance.md has the
/// measured trade).
const PRODUCER_QUEUE_KBYTES: &str = "16384";
/// A task's consumer prefetch (KiB) unless the source's librdkafka settings say otherwise.
const CONSUMER_QUEUE_KBYTES: &str = "8192";
/// How long a task's producer lets a batch fill (ms) unless the target's librdkafka
/// settings say otherwise (kmirror's other producers: 5). Under load, librdkafka's broker
/// thread polls without a timeout while a partition has a batch ready and its five
/// requests in flight: small batches (5 ms) kept it spinning — measured at 1 KiB with 16 +
/// 16 MiB queues, 5 ms: 150,000-161,000 records/s and 6.7-7.0 CPU s; 50 ms: 188,000 and
/// 4.4 CPU s. A record waits at most this long when traffic is light.
pub const LINGER_MS: &str = "50";

/// New topics at most looked up when a single instance's task takes them, one request each.
/// More are left to librdkafka's own lookup of unknown topics (once a second, one request
/// for all of them): a request for every topic instead costs librdkafka's main thread time
/// quadratic in the topics (it finds each listed topic among its own by a linear search;
/// at 20,000 topics it was busy for minutes, and calls that wait on it stalled the tasks).
const METADATA_PER_TOPIC: usize = 8;
/// How long looking up new topics may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// Liveness names of the replication tasks.
const LOOP_NAMES: [&str; 8] = [
    "replication",
    "replication-1",
    "replication-2",
    "replication-3",
    "replication-4",
    "replication-5",
    "replication-6",
    "replication-7",
];

impl WorkerContext {
    fn loop_name(&self) -> &'static str {
        LOOP_NAMES[(self.settings.member as usize).min(LOOP_NAMES.len() - 1)]
    }
}

fn member(ctx: &WorkerContext, core: Arc<Shared>) -> Result<Member, ReplicateError> {
    let s = &ctx.settings;
    let timing = ctx.source.member_timing(s.session_timeout);
    let reset = match s.start_offset {
        StartOffset::Earliest => "earliest",
        StartOffset::Latest => "latest",
    };
    // Prefetched records: memory for speed (the user's value wins; docs/performance.md).
    let queued = ctx
        .source
        .setting_or("queued.max.messages.kbytes", CONSUMER_QUEUE_KBYTES);
    let mut settings: Vec<(&str, &str)> = timing.iter().map(|(k, v)| (*k, v.as_str())).collect();
    settings.extend([
        ("partition.assignment.strategy", "cooperative-sticky"),
        ("auto.offset.reset", reset),
        ("allow.auto.create.topics", "false"),
        ("queued.max.messages.kbytes", queued.as_str()),
        ("topic.metadata.refresh.interval.ms", "30000"),
    ]);
    Ok(ctx
        .source
        .group_member(&s.progress_group, &settings, Membership::new(core))?)
}

/// The bytes a task keeps un-acknowledged at most, for a producer queue of `kbytes` KiB.
fn unacked_budget(kbytes: &str) -> usize {
    let kbytes = kbytes.trim().parse::<usize>().ok().filter(|k| *k > 0);
    kbytes.unwrap_or(16384).saturating_mul(1024) / super::core::UNACKED_SHARE
}

/// Runs one replicator until shutdown (then drains and returns `Ok`) or until the
/// producer becomes unusable.
pub fn run(mut ctx: WorkerContext) -> Result<(), ReplicateError> {
    let s = &ctx.settings;
    let queue = ctx
        .target
        .setting_or("queue.buffering.max.kbytes", PRODUCER_QUEUE_KBYTES);
    let linger = ctx.target.setting_or("linger.ms", LINGER_MS);
    // Never give up on a record: retriable errors are retried until they pass. A single
    // instance's records give up a quarter of a lease after they were queued, so none is
    // sent after its term ended (then it is sent again from the book while the term lasts).
    let timeout = match ctx.term {
        Some(_) => crate::flow::single::queued_for_at_most(s.session_timeout).as_millis(),
        None => 0,
    }
    .to_string();
    let producer = ctx.target.threaded_producer(
        &[
            ("queue.buffering.max.messages", "100000"), // PRODUCER_QUEUE
            ("queue.buffering.max.kbytes", queue.as_str()),
            ("linger.ms", linger.as_str()),
            ("message.timeout.ms", timeout.as_str()),
        ],
        Deliveries::default(),
    )?;
    let syncs = SyncSender::new(
        OffsetSyncWriter::new(s.offset_lag_max, ctx.session),
        &ctx.syncs_cluster,
        &s.syncs_topic,
        ctx.telemetry.clone(),
    )?;
    let core = Shared::new(Core::new(
        s.clone(),
        producer,
        syncs,
        ctx.telemetry.clone(),
        ctx.orphans.clone(),
        match ctx.term {
            // A single instance's records wait at most half their give-up time at the
            // rate the target acknowledges (a slow, healthy target times nothing out).
            Some(_) => UnackedBudget::paced(
                unacked_budget(&queue),
                crate::flow::single::queued_for_at_most(s.session_timeout) / 2,
            ),
            None => UnackedBudget::new(unacked_budget(&queue)),
        },
        ctx.epoch,
    ));
    if let Some(producers) = &ctx.producers {
        producers.add(&core.lock().producer);
    }
    let consumer = Arc::new(member(&ctx, core.clone())?);
    let committer = Committer::start(consumer.clone(), &ctx.settings.flow);
    let flush = s.flush_interval;
    let mut drain_timeout = s.drain_timeout;
    // What the group is asked for (the routed topics), or what a single instance's task
    // took itself.
    let mut following = Following::default();
    let initial = ctx.routes.borrow_and_update().clone();
    ctx.rejoin.borrow_and_update();
    follow(&consumer, &core, initial, &mut following, &ctx)?;

    // Records fetched and not yet forwarded, with what the transform chain made of them;
    // while they wait for room the consumer is not polled.
    let mut pending: VecDeque<(BorrowedMessage<'_>, Fate)> = VecDeque::new();
    let mut held_since: Option<Instant> = None;
    // When the records in `pending` were fetched.
    let mut fetched_at = Instant::now();
    let mut since_reports = 0u32;
    let mut next_tick = Instant::now() + flush;
    let mut stopping: Option<Instant> = None;
    let mut rejoin = false;
    loop {
        if ctx.abandoned() {
            // The single-instance lease is lost (or its term ended): another instance may
            // mirror a third of a lease from now. The lease's task purged the producer; purged again here
            // (should it have ended otherwise), nothing more is sent, and what was acked
            // has its progress stored.
            core.lock().purge();
            drain_timeout = drain_timeout.min(ctx.settings.session_timeout / 6);
            break;
        }
        if ctx.shutdown.is_cancelled() {
            if ctx.split.is_some() {
                break; // not in a group: no turn to wait for
            }
            // Keep mirroring what it owns until this task's turn to leave (see
            // `LeaveOrder`), taking nothing new.
            let since = *stopping.get_or_insert_with(|| {
                core.lock().stop_taking();
                Instant::now()
            });
            let generation = group_generation(&consumer);
            if ctx
                .leave
                .may_leave(ctx.settings.member, generation, since, Instant::now())
            {
                break;
            }
        }
        if ctx.rejoin.has_changed().unwrap_or(false) {
            ctx.rejoin.borrow_and_update();
            // One member's rejoin rebalances the whole group: the first task's.
            rejoin = ctx.settings.member == 0;
        }
        if rejoin && pending.is_empty() {
            // Leave (the revocation drains and commits) and join again: a new assignment.
            rejoin = false;
            if ctx.split.is_none() {
                consumer.unsubscribe();
                following.subscribed.clear();
                let routes = ctx.routes.borrow().clone();
                follow(&consumer, &core, routes, &mut following, &ctx)?;
            }
        }
        // A single instance's task takes and lets go of partitions here, as a rebalance
        // would: never with fetched records waiting (they could belong to a partition let
        // go and taken again).
        let between_batches = ctx.split.is_none() || pending.is_empty();
        if between_batches && ctx.routes.has_changed().unwrap_or(false) {
            let routes = ctx.routes.borrow_and_update().clone();
            follow(&consumer, &core, routes, &mut following, &ctx)?;
        }
        // While records wait for room, the consumer is not polled (it would hand out the
        // next ones): only delivery reports are served, for at most HOLD_BEFORE_PAUSE.
        if pending.is_empty() {
            let batch = fetch(&consumer, &core, &ctx);
            // Read after the fetch: a record produced once a reload replaced the chain is
            // never transformed by the chain it replaced.
            let chain = ctx
                .roles
                .as_ref()
                .map(|chain| chain())
                .filter(|c| !c.roles.record_transforms.is_empty());
            if batch.is_empty() {
                since_reports = REPORTS_EVERY;
            }
            since_reports += batch.len() as u32;
            match chain {
                Some(chain) => {
                    // What a failure means follows the chain in force (a reload may change
                    // it between two batches).
                    core.lock().transform_errors(chain.on_error);
                    let fates = transformed(
                        &chain.roles.record_transforms,
                        &batch,
                        chain.on_error,
                        &ctx.telemetry,
                    );
                    pending.extend(batch.into_iter().zip(fates));
                }
                None => pending.extend(batch.into_iter().map(|m| (m, Fate::Keep))),
            }
            fetched_at = Instant::now();
        }
        let now = Instant::now();
        let mut c = core.lock();
        c.committed(consumer.context().take_commits());
        while let Some((msg, fate)) = pending.front() {
            if ctx.abandoned() {
                break; // the lease is lost or its term ended: nothing more is sent
            }
            if c.forward(&consumer, msg, fate, now) == Forwarded::Done {
                pending.pop_front();
                held_since = None;
                continue;
            }
            let since = *held_since.get_or_insert(now);
            if now.duration_since(since) >= HOLD_BEFORE_PAUSE
                || now.duration_since(fetched_at) >= BATCH_HOLD_MAX
            {
                // It lasts: the records are read again later (and transformed again), and
                // nothing flows until there is room.
                c.set_backpressure(&consumer, true);
                for (msg, _) in pending.drain(..) {
                    c.decline(&consumer, &msg);
                }
                held_since = None;
            }
            break;
        }
        if let Some(reason) = c.take_fatal() {
            return Err(ReplicateError::Fatal {
                flow: ctx.settings.flow.clone(),
                message: reason,
            });
        }
        if !pending.is_empty() {
            // The budget holds records until half of it is acknowledged: acknowledgements
            // coming in are progress, not a stall.
            if c.wait_for_room(&consumer, Duration::from_millis(10)) > 0 && c.budget_holds() {
                held_since = None;
            }
        } else {
            if c.backpressure() && c.has_room() {
                c.set_backpressure(&consumer, false);
            }
            if since_reports >= REPORTS_EVERY || c.backpressure() {
                c.poll_producer(&consumer, Duration::ZERO);
                since_reports = 0;
            }
        }
        if now >= next_tick {
            c.tick(&consumer, now);
            if committer.idle()
                && let Some(tpl) = c.take_commits()
            {
                committer.commit(tpl);
            }
            next_tick = now + flush;
            ctx.telemetry.tick(ctx.loop_name(), flush);
        }
    }
    {
        let mut c = core.lock();
        for (msg, _) in pending.drain(..) {
            c.decline(&consumer, &msg);
        }
    }
    stop(&consumer, &core, &committer, drain_timeout);
    ctx.telemetry.loop_ended(ctx.loop_name());
    let member = ctx.settings.member;
    ctx.telemetry.update(|s| s.publish_member(member, None));
    // Leave the group now (the consumer closes when its last handle goes), then let the
    // next task take its turn.
    let generation = group_generation(&consumer);
    committer.finish();
    drop(consumer);
    // The producer goes with the last handle of the core: what it still holds is purged,
    // never sent (a lost single-instance lease relies on it).
    drop(core);
    let abandoned = ctx.abandoned();
    tracing::info!(flow = %ctx.settings.flow, member, abandoned, "replication task stopped");
    ctx.leave.left(member, generation, Instant::now());
    Ok(())
}

/// The next records: the first waits up to [`POLL`]; what the consumer has fetched already
/// follows, up to [`MAX_BATCH`] records or [`MAX_BATCH_BYTES`] (one pass of the loop per
/// batch, not per record: measured, 1,000,000 records, 200 B 437,882 -> 595,852 rec/s,
/// 1 KiB 170,820 -> 201,579) — but never across a rebalance (a partition revoked and
/// assigned again must not see records of its previous assignment offered to the new one;
/// `poll` returns nothing on a rebalance event, and the count of rebalances is checked
/// too).
fn fetch<'c>(consumer: &'c Member, core: &Shared, ctx: &WorkerContext) -> Vec<BorrowedMessage<'c>> {
    let mut batch = Vec::new();
    let rebalances = core.lock().rebalances;
    let mut wait = POLL;
    let mut bytes = 0;
    while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
        match consumer.poll(wait) {
            Some(Ok(msg)) => {
                bytes += msg.payload_len() + msg.key().map_or(0, <[u8]>::len);
                batch.push(msg);
            }
            Some(Err(e)) => ctx.telemetry.note_error("consume", "kafka", &e),
            None => break,
        }
        wait = Duration::ZERO;
        if core.lock().rebalances != rebalances {
            break;
        }
    }
    batch
}

/// The fate of each of `batch`'s records through `chain`, counted per link in
/// `telemetry`.
pub(crate) fn transformed(
    chain: &[ChainLink],
    batch: &[BorrowedMessage<'_>],
    on_error: OnUnproducible,
    telemetry: &FlowTelemetry,
) -> Vec<Fate> {
    // The batch's headers in one vector (their names are borrowed from it), and how many
    // each record has.
    let mut headers = Vec::new();
    let counts: Vec<usize> = batch
        .iter()
        .map(|m| {
            let before = headers.len();
            headers.extend(headers_of(m));
            headers.len() - before
        })
        .collect();
    let mut rest = headers.as_slice();
    let records: Vec<RecordIn<'_>> = batch
        .iter()
        .zip(counts)
        .map(|(m, count)| {
            let (mine, after) = rest.split_at(count);
            rest = after;
            RecordIn {
                topic: m.topic(),
                partition: m.partition(),
                offset: m.offset(),
                timestamp: m.timestamp().to_millis().unwrap_or(-1),
                key: m.key(),
                value: m.payload(),
                headers: mine.iter().map(|(k, v)| (k.as_ref(), *v)).collect(),
            }
        })
        .collect();
    let pause = on_error == OnUnproducible::Pause;
    let deadline = Instant::now() + CHAIN_BUDGET;
    let (fates, tallies) = chain::apply(chain, &records, pause, deadline);
    let names: Vec<&str> = chain.iter().map(|l| l.name.as_str()).collect();
    telemetry.transformed(&names, &tallies);
    fates
}

/// What a task follows of the routes.
#[derive(Default)]
struct Following {
    /// The topics the group member is subscribed to.
    subscribed: Vec<String>,
    /// The partitions a single instance's task took itself.
    taken: BTreeSet<(String, i32)>,
    /// Whether it took its first share (partitions taken later are of topics new since).
    started: bool,
}

/// Follows new routes: through the group, or (a single instance's task) by taking its share.
fn follow(
    consumer: &Arc<Member>,
    core: &Shared,
    routes: Routes,
    following: &mut Following,
    ctx: &WorkerContext,
) -> Result<(), ReplicateError> {
    match ctx.split {
        Some(tasks) => take_share(consumer, core, routes, following, ctx, tasks),
        None => resubscribe(consumer, core, routes, &mut following.subscribed, ctx),
    }
}

/// A single instance's task takes its share of the routed partitions and lets go of those
/// no longer in it, through the callbacks a group's rebalance runs: a partition let go has
/// its records in flight awaited and its progress committed first; a partition taken
/// starts from its stored progress.
fn take_share(
    consumer: &Arc<Member>,
    core: &Shared,
    routes: Routes,
    following: &mut Following,
    ctx: &WorkerContext,
    tasks: u32,
) -> Result<(), ReplicateError> {
    let (taken, fresh) = (&mut following.taken, following.started);
    following.started = true;
    let share = crate::flow::single::share(&routes, ctx.settings.member, tasks);
    core.lock().set_routes(consumer, routes);
    let failed =
        |operation: &'static str, e: rdkafka::error::KafkaError| ReplicateError::Consumer {
            flow: ctx.settings.flow.clone(),
            operation,
            message: e.to_string(),
        };
    let gone = tpl_of(taken.difference(&share).map(|(t, p)| (t.as_str(), *p)));
    if gone.count() > 0 {
        core.lock().revoke(consumer, &gone);
        consumer
            .incremental_unassign(&gone)
            .map_err(|e| failed("let go of partitions no longer routed", e))?;
    }
    let new: Vec<(&str, i32)> = share
        .difference(taken)
        .map(|(t, p)| (t.as_str(), *p))
        .collect();
    if !new.is_empty() {
        // The consumer looks up a topic created since it started only on its one-second
        // timer for unknown topics (measured: 1.0-1.2 s from taking a new topic's partition
        // to its first fetch): asked now, off this thread, it starts once the answer comes.
        let topics: BTreeSet<String> = new.iter().map(|(t, _)| t.to_string()).collect();
        look_up(consumer, topics, ctx);
        let (tpl, stored) = starts(consumer, &new, fresh, ctx);
        consumer
            .incremental_assign(&tpl)
            .map_err(|e| failed("take the routed partitions", e))?;
        core.lock().assign(consumer, &tpl, stored);
        tracing::debug!(flow = %ctx.settings.flow, member = ctx.settings.member, partitions = tpl.count(), "took the routed partitions");
    }
    *taken = share;
    Ok(())
}

/// Asks the source for `topics`' metadata on a thread of its own, into `consumer`'s cache,
/// one request per topic, when they are at most [`METADATA_PER_TOPIC`] (more are looked up
/// by librdkafka itself).
fn look_up(consumer: &Arc<Member>, topics: BTreeSet<String>, ctx: &WorkerContext) {
    if topics.len() > METADATA_PER_TOPIC {
        return;
    }
    let consumer = consumer.clone();
    let telemetry = ctx.telemetry.clone();
    let spawned = std::thread::Builder::new()
        .name("kmirror-metadata".into())
        .spawn(move || {
            let asked = topics.iter().try_for_each(|t| {
                consumer
                    .fetch_metadata(Some(t), METADATA_TIMEOUT)
                    .map(|_| ())
            });
            if let Err(e) = asked {
                telemetry.note_error("look up the routed topics", "kafka", &e);
            }
        });
    if let Err(e) = spawned {
        ctx.telemetry
            .note_error("look up the routed topics", "kafka", &e);
    }
}

/// Where the partitions `new` start: their stored progress, or (none stored) the log's start
/// (`earliest`) or end (`latest`), asked for all of them at once (one ListOffsets request
/// per broker): a logical position makes librdkafka send one ListOffsets request per
/// partition, and 10,000 of them queued on one connection timed out on Apache Kafka. For
/// `fresh` partitions under `earliest` (topics new since the task's first share) offset 0,
/// which needs no query at all — a query waits behind the fetch the broker holds on the
/// connection (up to `fetch.wait.max.ms`, 500 ms) — and a log that starts later answers out
/// of range, the consumer then starting from its start as `auto.offset.reset` says.
/// Unknown (no answer): the consumer asks. Returns them, and the stored progress when it
/// was read.
fn starts(
    consumer: &Member,
    new: &[(&str, i32)],
    fresh: bool,
    ctx: &WorkerContext,
) -> (TopicPartitionList, Option<TopicPartitionList>) {
    let tpl = tpl_of(new.iter().copied());
    let stored = match consumer.committed_offsets(tpl.clone(), METADATA_TIMEOUT) {
        Ok(stored) => stored,
        Err(e) => {
            ctx.telemetry
                .note_error("read the taken partitions' stored progress", "kafka", &e);
            return (tpl, None);
        }
    };
    let latest = ctx.settings.start_offset == StartOffset::Latest;
    let elements = stored.elements();
    let unstored: Vec<(&str, i32)> = elements
        .iter()
        .filter(|e| !matches!(e.offset(), Offset::Offset(_)))
        .map(|e| (e.topic(), e.partition()))
        .collect();
    let bounds = if latest || !fresh {
        let which = if latest {
            Offset::End
        } else {
            Offset::Beginning
        };
        log_bounds(consumer, &unstored, which, &ctx.telemetry)
    } else {
        HashMap::new()
    };
    let mut starts = TopicPartitionList::new();
    for e in &elements {
        let at = match e.offset() {
            Offset::Offset(at) => Offset::Offset(at),
            _ => match bounds.get(&(e.topic().to_string(), e.partition())) {
                Some(at) => Offset::Offset(*at),
                None if latest => Offset::End,
                None => Offset::Offset(0),
            },
        };
        let _ = starts.add_partition_offset(e.topic(), e.partition(), at);
    }
    (starts, Some(stored))
}

/// How many partitions one offset query asks about when the query for all of them failed.
const BOUNDS_CHUNK: usize = 500;

/// The start (`which` = `Beginning`) or end (`End`) offsets of `partitions`, asked with one
/// ListOffsets request per leader. librdkafka fails the whole query when one partition's
/// answer is an error (a leader moving, a topic deleted since it was routed) and then
/// answers nothing: the query is then asked again in chunks, and a chunk that fails is
/// left out (the consumer asks for those itself).
pub(super) fn log_bounds(
    consumer: &Member,
    partitions: &[(&str, i32)],
    which: Offset,
    telemetry: &FlowTelemetry,
) -> HashMap<(String, i32), i64> {
    let ask = |some: &[(&str, i32)]| {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in some {
            // As a timestamp, -2 (`Beginning`) asks for the log's start, -1 (`End`) its end.
            let _ = tpl.add_partition_offset(t, *p, which);
        }
        consumer
            .offsets_for_times(tpl, METADATA_TIMEOUT)
            .map(|answer| {
                answer
                    .elements()
                    .iter()
                    .filter(|e| e.error().is_ok())
                    .filter_map(|e| match e.offset() {
                        Offset::Offset(o) if o >= 0 => {
                            Some(((e.topic().to_string(), e.partition()), o))
                        }
                        _ => None,
                    })
                    .collect::<Vec<_>>()
            })
    };
    if partitions.is_empty() {
        return HashMap::new();
    }
    match ask(partitions) {
        Ok(all) => all.into_iter().collect(),
        Err(e) => {
            telemetry.note_error("ask where partitions' logs start or end", "kafka", &e);
            // A cluster that answers nothing fails every chunk: two failures end it.
            let mut failures = 0;
            let mut found = HashMap::new();
            for chunk in partitions.chunks(BOUNDS_CHUNK) {
                match ask(chunk) {
                    Ok(some) => found.extend(some),
                    Err(_) if failures == 0 => failures += 1,
                    Err(_) => break,
                }
            }
            found
        }
    }
}

/// Follows new routes: owned partitions take their new targets, and the subscription the
/// routed topics.
fn resubscribe(
    consumer: &Member,
    core: &Shared,
    routes: Routes,
    subscribed: &mut Vec<String>,
    ctx: &WorkerContext,
) -> Result<(), ReplicateError> {
    let topics = core.lock().set_routes(consumer, routes);
    if topics == *subscribed {
        return Ok(());
    }
    if topics.is_empty() {
        consumer.unsubscribe();
    } else {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&names)
            .map_err(|e| ReplicateError::Consumer {
                flow: ctx.settings.flow.clone(),
                operation: "subscribe to the routed topics",
                message: e.to_string(),
            })?;
    }
    tracing::info!(flow = %ctx.settings.flow, topics = topics.len(), "subscription follows the routed topics");
    *subscribed = topics;
    Ok(())
}

/// The graceful stop: nothing new is forwarded; in-flight records and syncs are awaited
/// and progress committed, all within `timeout`; then the group is left.
///
/// While a task drains it does not poll its consumer, so a rebalance that began meanwhile
/// (another task joining or leaving, the group's second cooperative round) moves the group
/// to a generation this member has not joined, and the coordinator refuses its last
/// commit (`IllegalGeneration`): librdkafka then counts the assignment as lost, and all the
/// progress since the last stored commit would be mirrored again by the next owner. So a
/// last commit refused for a stale generation is kept and committed again once the member
/// is back in the group (see [`commit_after_rejoining`]).
fn stop(consumer: &Member, core: &Shared, committer: &Committer, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    core.lock().drain(consumer, deadline);
    // A commit still running finishes first, and its outcome is taken in; then the last
    // one: every partition's progress not confirmed stored.
    committer.wait_idle(deadline);
    let pending = {
        let mut c = core.lock();
        c.committed(consumer.context().take_commits());
        c.take_final_commits()
    };
    let Some(tpl) = pending else {
        return;
    };
    committer.commit(tpl.clone());
    let confirmed = committer.wait_idle(deadline);
    let outcomes = consumer.context().take_commits();
    // Only what a stale generation refused is committed again (the rest is stored, and may
    // be another owner's to move on by now).
    let refused = refused_for_a_stale_generation(&outcomes);
    core.lock().committed(outcomes);
    if !confirmed {
        tracing::warn!("progress commit not confirmed before the stop deadline");
        return;
    }
    if let Some(refused) = refused {
        commit_after_rejoining(consumer, core, refused, deadline);
    }
}

/// The partitions a stale generation kept from being stored, if a commit was refused so.
fn refused_for_a_stale_generation(
    outcomes: &[super::contexts::CommitOutcome],
) -> Option<TopicPartitionList> {
    let mut tpl = TopicPartitionList::new();
    for o in outcomes.iter().filter(|o| stale_generation(o)) {
        for (t, p, at, _) in o.refused() {
            let _ = tpl.add_partition_offset(t, *p, Offset::Offset(*at));
        }
    }
    (tpl.count() > 0).then_some(tpl)
}

/// Whether a commit was refused because the group moved on to a generation (or member
/// epoch) the member has not joined.
fn stale_generation(outcome: &super::contexts::CommitOutcome) -> bool {
    const STALE: [&str; 5] = [
        "IllegalGeneration",
        "RebalanceInProgress",
        "UnknownMemberId",
        "StaleMemberEpoch",
        "FencedMemberEpoch",
    ];
    outcome
        .error
        .iter()
        .any(|e| STALE.iter().any(|s| e.contains(s)))
}

/// Commits `tpl` — the last progress, refused for a stale generation — again once the
/// member is back in the group, until `deadline`. The member's partitions are paused and it
/// serves the group's callbacks (librdkafka counted the assignment as lost, so no revoke
/// commits them); a record handed out meanwhile is not taken (progress is committed as the
/// book had it, never from the consumer's position). The coordinator checks a commit's
/// generation and member, not who owns each partition now, so the progress is stored even
/// if the partitions went to another task (which, if it started earlier, mirrors some
/// records again: never fewer stored than before).
fn commit_after_rejoining(
    consumer: &Member,
    core: &Shared,
    mut tpl: TopicPartitionList,
    deadline: Instant,
) {
    if let Ok(assigned) = consumer.assignment() {
        let _ = consumer.pause(&assigned);
    }
    let mut attempts = 0;
    while Instant::now() < deadline {
        let _ = consumer.poll(Duration::from_millis(100));
        attempts += 1;
        let outcome = commit_sync(consumer, &tpl);
        let stale = stale_generation(&outcome);
        let refused = refused_for_a_stale_generation(std::slice::from_ref(&outcome));
        let why = outcome.error.clone();
        consumer.context().record_commit(outcome);
        core.lock().committed(consumer.context().take_commits());
        match refused {
            None if !stale && why.is_some() => {
                // Refused for another reason (counted and reported as a commit failure):
                // not a matter of rejoining.
                tracing::warn!(attempts, error = ?why, "the last progress was refused again, not for a stale generation: the next owner mirrors the refused partitions again");
                return;
            }
            None => {
                tracing::info!(generation = ?group_generation(consumer), attempts, "stored the last progress after rejoining the group");
                return;
            }
            // Only what is still refused is tried again.
            Some(left) => tpl = left,
        }
    }
    tracing::warn!(
        attempts,
        partitions = tpl.count(),
        "the last progress was refused for a stale generation and the group did not take this member back before the stop deadline: the next owner mirrors it again"
    );
}
