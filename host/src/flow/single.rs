//! A flow declared to run on one instance (`single_instance = true`): nothing to coordinate,
//! so nothing to wait for. Its replication tasks take the routed partitions themselves
//! (`assign()`, split over the tasks by [`share`]) instead of joining the progress group, and
//! the instance does the elected duties from its start — no group join, which a broker
//! holds for seconds (Tansu for half the session timeout, Kafka for
//! `group.initial.rebalance.delay.ms` on a new group).
//!
//! Two instances must still never both mirror a partition, so the instance holds a
//! **lease** instead of a group membership: a transactional id of the flow on the source
//! (`kmirror.<source>.<target>.single`), renewed by a small transaction on the lease topic
//! (`kmirror-lease.<source>.<target>.internal`, the flow's own) every fifth of the lease
//! (the session timeout).
//!
//! - **Taking it:** `init_transactions` with the id fences any earlier holder — its next
//!   renewal fails. Then the last lease record says whether the earlier holder let go
//!   (`released`, written after its tasks stopped) or may still be mirroring (`held`, or
//!   nothing readable): then the new holder waits one lease before it mirrors, renewing
//!   meanwhile. Each take has an epoch one above the last: the replication tasks' offset
//!   syncs carry it as their owner generation, so a fenced holder's late syncs cannot
//!   rewind what the store translates with.
//! - **Keeping it:** a holder counts itself the holder only until two thirds of a lease after
//!   the start of its last renewal that succeeded. A renewal refused (fenced), none
//!   succeeding by then, or members in the flow's groups lose it: the replication tasks'
//!   producers are purged at once (from this task, whatever the tasks are doing), the tasks
//!   send nothing more and stop, progress of what was acknowledged is stored, and the flow
//!   fails, naming the lease. The next holder mirrors one lease after fencing, so at least a
//!   third of a lease after the last holder purged.
//! - **Letting go:** at a graceful stop, once the replication tasks stopped — and only if
//!   this holder's own wait had passed (else the earlier holder may still run) — a
//!   `released` record: the next start mirrors at once.
//!
//! - **Stalls:** the replication tasks check the term themselves (on the boot clock, which
//!   counts a suspend) and stop forwarding at its end, and their producers give a record
//!   up a quarter of a lease after it was queued ([`queued_for_at_most`]): a holder frozen
//!   with records queued sends none of them once it wakes past its term.
//!
//! What the lease cannot stop: a record already on its way to the target when the lease is
//! lost still lands (a duplicate, never a loss). An instance with `single_instance` refuses
//! to start while the flow's groups have members (checked before the take and again before
//! mirroring), and loses its lease when members appear (checked about once a lease); an
//! instance without it takes the lease before it joins the groups if a single instance may
//! still hold it, and lets go once that one had its lease's time to stop.

use super::replication::Producers;
use super::telemetry::FlowTelemetry;
use super::{FlowError, Routes};
pub use crate::config::queued_for_at_most;
use crate::kafka::{Cluster, KafkaError, REQUEST_TIMEOUT};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Why the lease topic must have one partition.
pub const LEASE_SINGLE: &str =
    "its last record says whether the flow's single instance let go of its lease";

/// The lease topic of a flow (on the source; `.internal`, so never mirrored). The flow's
/// own — named by both aliases, as two aliases of one cluster make two flows — so an empty
/// one means the flow never had a single instance.
pub fn lease_topic(source: &str, target: &str) -> String {
    format!("kmirror-lease.{source}.{target}.internal")
}

/// The transactional id whose holder is the flow's single instance (also the key of its
/// lease records).
pub fn lease_id(source: &str, target: &str) -> String {
    format!("{}.single", super::progress_group(source, target))
}

/// Records read back from the end of the lease topic at a take (each renewal is a record
/// and a transaction marker).
const TAIL: i64 = 8;

/// Whether the instance named in a lease record holds the lease or let go of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// It holds it (and may be mirroring).
    Held,
    /// Its tasks stopped and it let go.
    Released,
}

/// One lease record (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The instance (host, pid and a random part).
    pub instance: String,
    /// Held or released.
    pub state: State,
    /// The take's epoch (one above the last take's).
    #[serde(default)]
    pub epoch: i32,
    /// When, by the writer's clock (for people; never compared).
    pub at_ms: i64,
}

/// What the end of the lease topic said at a take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// No record of this lease: the flow never had a single instance.
    Empty,
    /// The last lease record.
    Last(LeaseRecord),
    /// Records without a readable record of this lease among the last ones.
    Unreadable,
}

/// How long a new holder waits before it mirrors, after what the lease topic said: a
/// whole lease unless the earlier holder let go (or there was none).
pub fn wait_before_mirroring(tail: &Tail, lease: Duration) -> Duration {
    match tail {
        Tail::Empty => Duration::ZERO,
        Tail::Last(r) if r.state == State::Released => Duration::ZERO,
        Tail::Last(_) | Tail::Unreadable => lease,
    }
}

/// The epoch of a take after `tail`: one above the last; unknown, seconds since 2023
/// (above any count of takes).
pub fn next_epoch(tail: &Tail, now_ms: i64) -> i32 {
    match tail {
        Tail::Last(r) => r.epoch.saturating_add(1).max(1),
        Tail::Empty => 1,
        Tail::Unreadable => {
            ((now_ms / 1000 - 1_672_531_200).max(1)).min(i64::from(i32::MAX)) as i32
        }
    }
}

/// The time since boot, a suspend included (Linux's `CLOCK_BOOTTIME`). A term is measured
/// on it: `Instant` stands still while the machine is suspended (a laptop's lid, a VM's
/// snapshot), so a term measured on `Instant` would outlive a suspend by its length while
/// the successor mirrors.
pub fn boot_time() -> Duration {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `clock_gettime` writes the `timespec` it is given and nothing else.
        if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } == 0 {
            return Duration::new(
                ts.tv_sec.max(0) as u64,
                ts.tv_nsec.clamp(0, 999_999_999) as u32,
            );
        }
    }
    // Elsewhere (or should the call fail): the monotonic clock since the first call.
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

/// When the holder's current term ends, on [`boot_time`], shared by the lease's task with
/// the replication tasks: each stops forwarding by itself once the end passed, whatever the
/// lease's task is doing (a stalled process resumed, a machine woken from a suspend: its
/// threads run in any order, and a record must not be handed over after the end).
#[derive(Debug, Clone, Default)]
pub struct TermEnd(Arc<std::sync::atomic::AtomicU64>);

/// A term end that was found passed: it never moves again.
const CLOSED: u64 = 1;

impl TermEnd {
    /// The term ends at `ends` (since boot), unless it was found ended already (then
    /// `false`: a task may have stopped on it, so the lease counts as lost).
    pub fn set(&self, ends: Duration) -> bool {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        let nanos = u64::try_from(ends.as_nanos())
            .unwrap_or(u64::MAX)
            .max(CLOSED + 1);
        self.0
            .fetch_update(AcqRel, Acquire, |now| (now != CLOSED).then_some(nanos))
            .is_ok()
    }

    /// Whether the term ended (never, before the first [`TermEnd::set`]). Once seen ended
    /// it stays ended: a renewal that comes after it cannot reopen it.
    pub fn over(&self) -> bool {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        loop {
            let ends = self.0.load(Acquire);
            if ends == 0 {
                return false;
            }
            if ends == CLOSED {
                return true;
            }
            if u64::try_from(boot_time().as_nanos()).unwrap_or(u64::MAX) < ends {
                return false;
            }
            if self
                .0
                .compare_exchange(ends, CLOSED, AcqRel, Acquire)
                .is_ok()
            {
                return true;
            }
            // Renewed meanwhile: judged again against the new end.
        }
    }
}

/// A holder's term: it holds the lease until two thirds of a lease after the start of its
/// last renewal that succeeded (a new holder waits a whole lease after fencing it). Times
/// are on [`boot_time`].
#[derive(Debug, Clone, Copy)]
pub struct Term {
    lease: Duration,
    renewed: Duration,
}

impl Term {
    /// A term of `lease` whose first renewal started at `at`.
    pub fn new(lease: Duration, at: Duration) -> Self {
        Term { lease, renewed: at }
    }

    /// A renewal that started at `at` succeeded.
    pub fn renewed(&mut self, at: Duration) {
        self.renewed = self.renewed.max(at);
    }

    /// When the holder stops counting itself the holder.
    pub fn ends(&self) -> Duration {
        self.renewed + self.lease * 2 / 3
    }

    /// How long until the term ends (zero once it did).
    pub fn left(&self) -> Duration {
        self.ends().saturating_sub(boot_time())
    }

    /// How often it renews: five times a lease, so two renewals may fail in a row.
    pub fn every(&self) -> Duration {
        self.lease / 5
    }
}

/// How long one transactional call of the lease may take.
fn call_timeout(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_secs(1))
}

/// The partitions task `member` of an instance's `tasks` mirrors: each routed partition
/// goes to one task, spread by topic and partition (stable while the routes grow: a new
/// topic moves no other partition).
pub fn share(routes: &Routes, member: u32, tasks: u32) -> BTreeSet<(String, i32)> {
    let tasks = u64::from(tasks.max(1));
    let mut mine = BTreeSet::new();
    for (topic, route) in routes {
        let mut h = std::hash::DefaultHasher::new();
        topic.hash(&mut h);
        let base = h.finish() % tasks;
        for p in 0..route.partitions.max(0) {
            if (base + p as u64) % tasks == u64::from(member) {
                mine.insert((topic.clone(), p));
            }
        }
    }
    mine
}

/// The first of `groups` on `source` that has members: (group, members).
pub async fn members(
    source: &Cluster,
    groups: &[String],
) -> Result<Option<(String, usize)>, KafkaError> {
    for g in groups {
        if let Some(info) = source.group(g).await?.filter(|i| i.members > 0) {
            return Ok(Some((info.name, info.members)));
        }
    }
    Ok(None)
}

/// Why a single instance does not start or run on while `group` has `members`.
fn joined_message((group, members): (String, usize)) -> String {
    format!(
        "the flow's group {group} has {members} member(s): instances without single_instance run; stop them first (or remove single_instance)"
    )
}

/// The error a single instance refuses to start with while a group has members.
pub fn joined_error(flow: &str, joined: (String, usize)) -> FlowError {
    FlowError::SingleInstance {
        flow: flow.to_string(),
        message: joined_message(joined),
    }
}

/// A blocking call that did not come back.
fn join_error(operation: &str, e: tokio::task::JoinError) -> KafkaError {
    KafkaError {
        cluster: String::new(),
        operation: operation.to_string(),
        message: e.to_string(),
    }
}

/// A transactional call of the lease producer to be called again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Pending {
    #[default]
    None,
    /// `commit_transaction` timed out.
    Commit,
    /// `abort_transaction` timed out.
    Abort,
}

/// Why a lease write failed.
enum WriteError {
    /// Another instance took the lease.
    Fenced(String),
    /// Anything else: the next renewal tries again.
    Failed(String),
}

/// The flow's lease, taken.
pub struct Lease {
    producer: FutureProducer,
    topic: String,
    id: String,
    instance: String,
    epoch: i32,
    lease: Duration,
    flow: String,
    /// When the first renewal (the take's write) started.
    taken: Instant,
    /// The same, on [`boot_time`].
    taken_boot: Duration,
    /// When its term ends, shared with the replication tasks.
    term_end: TermEnd,
    /// Before this, the earlier holder may still mirror: not released before.
    not_before: Instant,
    /// A transactional call that timed out: the next write resumes it (librdkafka refuses
    /// anything else until it is called again).
    pending: Arc<Mutex<Pending>>,
    /// The flow's groups on the source, checked for members about once a lease.
    groups: Option<(Cluster, Vec<String>)>,
}

impl Lease {
    /// Takes the lease of `flow` on `source` (`topic`, transactional `id`) for `lease`:
    /// fences any earlier holder, reads what it left, records this instance as the
    /// holder. Returns the lease and how long to wait before mirroring; `None` at
    /// `shutdown`. Failures are retried (counted and logged in `telemetry`); fenced by
    /// another instance meanwhile, the flow fails.
    pub async fn take(
        source: &Cluster,
        (flow, topic, id): (&str, &str, &str),
        lease: Duration,
        telemetry: &FlowTelemetry,
        shutdown: &CancellationToken,
    ) -> Result<Option<(Lease, Duration)>, FlowError> {
        let call = call_timeout(lease);
        let timeout_ms = (lease.as_millis() * 3).max(10_000).to_string();
        let (instance, _) = super::ownership::instance();
        let fenced = super::retry(
            "take the single-instance lease",
            telemetry,
            shutdown,
            || {
                let source = source.clone();
                let settings = [
                    ("transactional.id", id.to_string()),
                    ("transaction.timeout.ms", timeout_ms.clone()),
                    ("linger.ms", "0".to_string()),
                ];
                async move {
                    tokio::task::spawn_blocking(move || {
                        let settings: Vec<(&str, &str)> =
                            settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
                        let producer = source.producer(&settings)?;
                        // Fences the earlier holder: its open renewal is aborted, its next refused.
                        producer
                            .init_transactions(call)
                            .map_err(|e| source.error("init the lease's transactions", e))?;
                        Ok(producer)
                    })
                    .await
                    .map_err(|e| join_error("take the single-instance lease", e))?
                }
            },
        );
        let Some(producer) = fenced.await else {
            return Ok(None);
        };
        let Some(tail) = last_lease(source, topic, id, telemetry, shutdown).await else {
            return Ok(None);
        };
        let wait = wait_before_mirroring(&tail, lease);
        let mut this = Lease {
            producer,
            topic: topic.to_string(),
            id: id.to_string(),
            instance,
            epoch: next_epoch(&tail, super::telemetry::status::now_ms()),
            lease,
            flow: flow.to_string(),
            taken: Instant::now(),
            taken_boot: boot_time(),
            term_end: TermEnd::default(),
            not_before: Instant::now(),
            pending: Arc::default(),
            groups: None,
        };
        loop {
            this.taken = Instant::now();
            this.taken_boot = boot_time();
            match this.write(State::Held).await {
                Ok(()) => break,
                // Another instance fenced this one while it was taking the lease.
                Err(WriteError::Fenced(why)) => {
                    return Err(FlowError::SingleInstance {
                        flow: this.flow,
                        message: format!(
                            "another instance took the lease while this one was taking it (is a second instance running with single_instance = true?): {why}"
                        ),
                    });
                }
                Err(WriteError::Failed(why)) => {
                    telemetry.note_error("take the single-instance lease", "kafka", &why);
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
        this.not_before = this.taken + wait;
        this.term_end
            .set(Term::new(this.lease, this.taken_boot).ends());
        let previous = match &tail {
            Tail::Empty => "none".to_string(),
            Tail::Last(r) => format!("{} ({:?})", r.instance, r.state),
            Tail::Unreadable => "unreadable".to_string(),
        };
        tracing::info!(flow = %this.flow, instance = %this.instance, epoch = this.epoch, previous = %previous, wait_ms = wait.as_millis() as u64, "single-instance lease taken: any earlier holder is fenced");
        Ok(Some((this, wait)))
    }

    /// The take's epoch (the replication tasks' owner generation).
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// When its term ends, as the lease's task moves it at each renewal: for the
    /// replication tasks, which stop forwarding by themselves once it passed.
    pub fn term_end(&self) -> TermEnd {
        self.term_end.clone()
    }

    /// The same, losing the lease as soon as one of `groups` on `source` has members
    /// (instances without `single_instance` joined the flow), checked about once a lease.
    pub fn watching(mut self, source: Cluster, groups: Vec<String>) -> Self {
        self.groups = Some((source, groups));
        self
    }

    /// Writes one lease record in a transaction of its own (resuming a commit that timed
    /// out first).
    async fn write(&self, state: State) -> Result<(), WriteError> {
        let record = LeaseRecord {
            instance: self.instance.clone(),
            state,
            epoch: self.epoch,
            at_ms: super::telemetry::status::now_ms(),
        };
        let value = serde_json::to_vec(&record).unwrap_or_default();
        let producer = self.producer.clone();
        let (topic, key) = (self.topic.clone(), self.id.clone());
        let call = call_timeout(self.lease);
        let pending = self.pending.clone();
        let written = tokio::task::spawn_blocking(move || {
            let mut pending = pending.lock().unwrap_or_else(|e| e.into_inner());
            let fatal = |e: &RdKafkaError| {
                matches!(e, RdKafkaError::Transaction(r) if r.is_fatal())
                    || e.rdkafka_error_code() == Some(RDKafkaErrorCode::ProducerFenced)
            };
            let retriable = |e: &RdKafkaError| matches!(e, RdKafkaError::Transaction(r) if r.is_retriable() && !r.txn_requires_abort());
            // Ends the transaction so the next can begin; a timeout is resumed next time.
            let abort = |pending: &mut Pending| match producer.abort_transaction(call) {
                Err(e) if retriable(&e) => *pending = Pending::Abort,
                _ => *pending = Pending::None,
            };
            // A failed call: fenced (or another fatal error), or failed — a commit that
            // timed out is resumed by the next write, anything else aborted.
            let failed = |e: RdKafkaError, committing: bool, pending: &mut Pending| {
                if fatal(&e) {
                    return WriteError::Fenced(e.to_string());
                }
                if committing && retriable(&e) {
                    *pending = Pending::Commit;
                } else {
                    abort(pending);
                }
                WriteError::Failed(e.to_string())
            };
            match *pending {
                Pending::None => {}
                Pending::Commit => {
                    *pending = Pending::None;
                    producer
                        .commit_transaction(call)
                        .map_err(|e| failed(e, true, &mut pending))?;
                }
                Pending::Abort => {
                    abort(&mut pending);
                    if *pending != Pending::None {
                        return Err(WriteError::Failed(
                            "aborting the last renewal timed out".into(),
                        ));
                    }
                }
            }
            producer
                .begin_transaction()
                .map_err(|e| failed(e, false, &mut pending))?;
            let queued = producer.send_result(
                FutureRecord::<[u8], [u8]>::to(&topic)
                    .partition(0)
                    .key(key.as_bytes())
                    .payload(&value),
            );
            if let Err((e, _)) = queued {
                return Err(failed(e, false, &mut pending));
            }
            producer
                .commit_transaction(call)
                .map_err(|e| failed(e, true, &mut pending))
        });
        match written.await {
            Ok(result) => result,
            Err(e) => Err(WriteError::Failed(e.to_string())),
        }
    }

    /// Keeps the lease until `stop` and then until `tasks` closes (every replication task
    /// ended), then lets go. Losing it — or this task ending any other way (aborted,
    /// panicked) — cancels `lost` (the replication tasks stop at once); losing it also
    /// purges `producers` and fails the flow.
    pub async fn hold(
        self,
        mut tasks: mpsc::Receiver<()>,
        lost: CancellationToken,
        producers: Producers,
        stop: CancellationToken,
        telemetry: Arc<FlowTelemetry>,
    ) -> Result<(), FlowError> {
        let _abandon_unless_released = lost.clone().drop_guard();
        // The flow's groups are watched on a task of their own: a slow answer (a listing
        // waits for every broker) never holds a renewal up.
        let watching = CancellationToken::new();
        let _stop_watching = watching.clone().drop_guard();
        let mut watcher = tokio::spawn(watch_groups(self.groups.clone(), self.lease, watching));
        let mut watch_ended = false;
        let mut term = Term::new(self.lease, self.taken_boot);
        let mut last_error: Option<String> = None;
        let lose = |why: String| {
            lost.cancel();
            // Off the runtime: a purge waits for the producers' broker threads.
            let producers = producers.clone();
            tokio::task::spawn_blocking(move || producers.purge_all());
            tracing::error!(flow = %self.flow, instance = %self.instance, error = %why, "single-instance lease lost: replication stops");
            Err(FlowError::SingleInstance {
                flow: self.flow.clone(),
                message: format!("lease lost: {why}"),
            })
        };
        loop {
            // Slept on tokio's clock (it stands still in a suspend); the end is checked on
            // the boot clock, and the replication tasks check it themselves.
            let next = term.every().min(term.left());
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                closed = tasks.recv(), if stop.is_cancelled() => if closed.is_none() { break },
                _ = stop.cancelled(), if !stop.is_cancelled() => continue,
                watched = &mut watcher, if !watch_ended => {
                    watch_ended = true;
                    if let Ok(Some(joined)) = watched {
                        return lose(joined_message(joined));
                    }
                    continue;
                }
            }
            if term.left().is_zero() {
                let why = last_error.take().unwrap_or_else(|| "no answer".into());
                return lose(format!(
                    "not renewed for {:?} (two thirds of the lease): {why}",
                    self.lease * 2 / 3
                ));
            }
            let started = boot_time();
            let written = tokio::select! {
                w = self.write(State::Held) => w,
                _ = tokio::time::sleep(term.left()) => Err(WriteError::Failed("the renewal did not end in time".into())),
            };
            match written {
                Ok(())
                    if !term.left().is_zero() && {
                        term.renewed(started);
                        self.term_end.set(term.ends())
                    } =>
                {
                    last_error = None;
                }
                // Written only once the term had ended (the process stalled meanwhile) or
                // a replication task found it ended first: the tasks stop at the end, so
                // the lease is lost.
                Ok(()) => {
                    return lose(format!(
                        "the renewal was written only after the term ended ({:?} after the last one began; did the process stall or the machine sleep?)",
                        self.lease * 2 / 3
                    ));
                }
                Err(WriteError::Fenced(why)) => {
                    return lose(format!(
                        "the lease's transactional id was refused — another instance took the lease (is a second instance running with single_instance = true?), or the id is not authorized: {why}"
                    ));
                }
                Err(WriteError::Failed(why)) => {
                    telemetry.note_error("renew the single-instance lease", "kafka", &why);
                    last_error = Some(why);
                }
            }
        }
        if Instant::now() < self.not_before {
            // Its wait had not passed: the earlier holder may still mirror; the next holder
            // has to wait as this one did.
            tracing::info!(flow = %self.flow, "single-instance lease kept (not released): stopped while waiting for the earlier holder");
            return Ok(());
        }
        self.release().await
    }

    /// Lets go of the lease (a `released` record): the next holder mirrors at once.
    pub async fn release(self) -> Result<(), FlowError> {
        match self.write(State::Released).await {
            Ok(()) => {
                tracing::info!(flow = %self.flow, instance = %self.instance, "single-instance lease released: the next holder mirrors at once");
                Ok(())
            }
            Err(WriteError::Fenced(why)) => Err(FlowError::SingleInstance {
                flow: self.flow,
                message: format!("another instance took the lease: {why}"),
            }),
            Err(WriteError::Failed(why)) => {
                tracing::warn!(flow = %self.flow, error = %why, "single-instance lease not released: the next holder waits one lease before mirroring");
                Ok(())
            }
        }
    }
}

/// Asks `groups` (on their cluster) about once a `lease` until one has members (then
/// returns it) or `stop`; never without groups. An error or no answer is no member.
async fn watch_groups(
    groups: Option<(Cluster, Vec<String>)>,
    lease: Duration,
    stop: CancellationToken,
) -> Option<(String, usize)> {
    let Some((source, groups)) = groups else {
        stop.cancelled().await;
        return None;
    };
    loop {
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(lease) => {}
        }
        if let Ok(Some(joined)) = members(&source, &groups).await {
            return Some(joined);
        }
    }
}

/// What the end of the flow's lease `topic` says of lease `id` (retried until `stop`:
/// `None`).
pub async fn last_lease(
    source: &Cluster,
    topic: &str,
    id: &str,
    telemetry: &FlowTelemetry,
    stop: &CancellationToken,
) -> Option<Tail> {
    super::retry("read the lease topic", telemetry, stop, || {
        read_tail(source.clone(), topic.to_string(), id.to_string())
    })
    .await
}

/// The last record of lease `id` in `topic` (read committed, from its last [`TAIL`]
/// records).
async fn read_tail(source: Cluster, topic: String, id: String) -> Result<Tail, KafkaError> {
    let op = format!("read the end of {topic}");
    let joined = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = source
            .config_with(&[
                ("group.id", "kmirror-lease-reader"),
                ("enable.auto.commit", "false"),
                ("enable.partition.eof", "true"),
                ("isolation.level", "read_committed"),
            ])
            .create()
            .map_err(|e| source.error(&op, e))?;
        let (low, high) = consumer
            .fetch_watermarks(&topic, 0, REQUEST_TIMEOUT)
            .map_err(|e| source.error(&op, e))?;
        if high <= low {
            return Ok(Tail::Empty);
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::OffsetTail(TAIL))
            .map_err(|e| source.error(&op, e))?;
        consumer.assign(&tpl).map_err(|e| source.error(&op, e))?;
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let mut last = None;
        while Instant::now() < deadline {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(msg)) if msg.key() == Some(id.as_bytes()) => {
                    last = Some(msg.payload().and_then(|v| serde_json::from_slice(v).ok()));
                }
                Some(Ok(_)) => {}
                Some(Err(RdKafkaError::PartitionEOF(_))) => {
                    // Nothing readable of this lease at the end (other flows' leases, or
                    // aborted renewals): its last state is unknown.
                    return Ok(match last {
                        Some(Some(record)) => Tail::Last(record),
                        _ => Tail::Unreadable,
                    });
                }
                Some(Err(e)) => return Err(source.error(&op, e)),
                None => {}
            }
        }
        Err(source.error(&op, "no end reached within the request timeout"))
    });
    joined
        .await
        .map_err(|e| join_error("read the lease topic", e))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Route;

    fn record(state: State) -> LeaseRecord {
        LeaseRecord {
            instance: "host-1-abc".into(),
            state,
            epoch: 7,
            at_ms: 1,
        }
    }

    #[test]
    fn a_new_holder_waits_a_lease_unless_the_last_one_let_go() {
        let lease = Duration::from_secs(10);
        assert_eq!(wait_before_mirroring(&Tail::Empty, lease), Duration::ZERO);
        assert_eq!(
            wait_before_mirroring(&Tail::Last(record(State::Released)), lease),
            Duration::ZERO
        );
        assert_eq!(
            wait_before_mirroring(&Tail::Last(record(State::Held)), lease),
            lease
        );
        assert_eq!(wait_before_mirroring(&Tail::Unreadable, lease), lease);
    }

    #[test]
    fn a_holder_counts_itself_the_holder_until_two_thirds_of_a_lease_after_its_last_renewal_began()
    {
        let lease = Duration::from_secs(9);
        let t0 = boot_time();
        let mut term = Term::new(lease, t0);
        assert_eq!(term.every(), Duration::from_millis(1800));
        assert_eq!(term.ends(), t0 + Duration::from_secs(6));
        term.renewed(t0 + Duration::from_secs(2));
        assert_eq!(term.ends(), t0 + Duration::from_secs(8));
        // A late answer to an older renewal never moves the end back.
        term.renewed(t0 + Duration::from_secs(1));
        assert_eq!(term.ends(), t0 + Duration::from_secs(8));
        // Two renewals in a row may fail: the third comes before the end.
        assert!(t0 + Duration::from_secs(2) + term.every() * 3 < term.ends());
    }

    #[test]
    fn a_term_end_is_over_once_the_boot_clock_passed_it_and_never_before_it_is_set() {
        let end = TermEnd::default();
        assert!(!end.over(), "not set: no term to end");
        assert!(end.set(boot_time() + Duration::from_secs(3600)));
        assert!(!end.over());
        let shared = end.clone();
        assert!(end.set(boot_time().saturating_sub(Duration::from_millis(1))));
        assert!(shared.over(), "seen by every clone");
        // Found ended, it stays so: a renewal after it cannot reopen it.
        assert!(!end.set(boot_time() + Duration::from_secs(3600)));
        assert!(end.over());
        // The boot clock moves on, never back.
        let (a, b) = (boot_time(), boot_time());
        assert!(b >= a && a > Duration::ZERO);
    }

    #[test]
    fn a_record_queued_before_the_term_ended_is_given_up_by_the_time_a_successor_may_mirror() {
        use crate::config::MIN_LEASE;
        for lease in [MIN_LEASE, Duration::from_secs(10), Duration::from_secs(300)] {
            let t0 = Duration::from_secs(1000);
            let term = Term::new(lease, t0);
            // A running holder purges its producers at the term's end. A frozen one wakes
            // no sooner than a successor that fenced it right after its last renewal began
            // mirrors (a whole lease after that take), so its queued records (queued by
            // the term's end at the latest) are at least this old on waking:
            let successor_mirrors = t0 + lease;
            let age = successor_mirrors - term.ends();
            // librdkafka looks for records to give up at once on waking only if a second
            // passed since it last looked: the freeze lasted at least `age`.
            assert!(age >= Duration::from_secs(1), "lease {lease:?}");
            // A record past its give-up time is dropped then; one within 100 ms of it may
            // still be sent (librdkafka's grace for a batch already being built).
            assert!(
                queued_for_at_most(lease) + Duration::from_millis(100) < age,
                "lease {lease:?}"
            );
            // The pace (half the give-up time) leaves the default linger (50 ms) room.
            assert!(queued_for_at_most(lease) / 2 > Duration::from_millis(300));
        }
    }

    #[test]
    fn each_take_has_an_epoch_above_the_last() {
        assert_eq!(next_epoch(&Tail::Empty, 0), 1);
        assert_eq!(next_epoch(&Tail::Last(record(State::Held)), 0), 8);
        assert_eq!(next_epoch(&Tail::Last(record(State::Released)), 0), 8);
        // Unknown: seconds since 2023, above any count of takes.
        let now_ms = 1_796_550_000_000;
        assert_eq!(next_epoch(&Tail::Unreadable, now_ms), 124_018_800);
    }

    #[test]
    fn every_routed_partition_goes_to_exactly_one_task_and_a_new_topic_moves_none() {
        let mut routes = Routes::new();
        for (i, n) in [12, 1, 3, 7].into_iter().enumerate() {
            routes.insert(format!("topic-{i}"), Route::new(format!("b.topic-{i}"), n));
        }
        let tasks = 3;
        let shares: Vec<_> = (0..tasks).map(|m| share(&routes, m, tasks)).collect();
        let all: BTreeSet<_> = shares.iter().flatten().cloned().collect();
        assert_eq!(all.len(), 23);
        assert_eq!(
            shares.iter().map(BTreeSet::len).sum::<usize>(),
            23,
            "disjoint"
        );
        // Consecutive partitions of a topic spread over the tasks.
        assert!(
            shares
                .iter()
                .all(|s| s.iter().filter(|(t, _)| t == "topic-0").count() == 4)
        );
        routes.insert("topic-9".into(), Route::new("b.topic-9", 5));
        for (m, before) in shares.iter().enumerate() {
            let after = share(&routes, m as u32, tasks);
            assert!(before.is_subset(&after), "task {m} kept its partitions");
        }
        assert_eq!(share(&routes, 0, 1).len(), 28, "one task takes all");
    }

    #[test]
    fn lease_records_are_json_with_a_named_state() {
        let json = serde_json::to_string(&record(State::Released)).unwrap();
        assert_eq!(
            json,
            r#"{"instance":"host-1-abc","state":"released","epoch":7,"at_ms":1}"#
        );
        let back: LeaseRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back.state, State::Released);
        // A record without an epoch reads as epoch 0.
        let old: LeaseRecord =
            serde_json::from_str(r#"{"instance":"h","state":"held","at_ms":1}"#).unwrap();
        assert_eq!(old.epoch, 0);
    }
}
