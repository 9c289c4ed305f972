//! Replication, the data plane (MM2's `MirrorSourceTask`): the routed source partitions
//! this instance is assigned, each record produced to the same partition of its target
//! topic (key, value, headers and timestamp preserved), a source offset counted as done only
//! once the target acked it.
//!
//! Partitions are shared through Kafka's consumer-group protocol: every instance of a flow
//! joins the flow's progress group (`kmirror.<source>.<target>`) on the source, subscribed to
//! the routed topics, with cooperative rebalancing; one instance is the N = 1 case — unless
//! the flow is declared to run on one instance (`single_instance`, [`super::single`]): then
//! each task takes its share of the routed partitions by `assign()`, with the same
//! callbacks a rebalance would run, and commits without a group generation. The
//! group's committed offsets are the progress: committed only up to acked records, through
//! the member (so a member that lost its partitions cannot commit them), and every Kafka
//! tool shows the mirror's lag. A revoked partition's records in flight are awaited and its
//! progress committed before it is released.
//!
//! A record the target will never take (too large, rejected, not authorized) affects only
//! its partition: paused there (`on_unproducible = "pause"`, retried now and then) or
//! skipped (`"skip"`). Retriable errors are retried by librdkafka without end; memory
//! stays bounded by a record limit, a byte budget for un-acknowledged records (`budget`:
//! half the producer's queue, keys and values counted), the consumer's prefetch and one
//! fetched batch (at most 4 MiB) per task.
//!
//! - `worker`: the thread and its loop; `core`: the shell it shares with the group
//!   callbacks (`contexts`), applying what the [`book`] decides — the owned partitions,
//!   whether each flows, their progress, as a pure state machine — to librdkafka;
//!   [`effects`]: what it decides, as values; `status`: what a task reports; `table`:
//!   owned partitions; [`progress`]: one partition's progress (pure); [`failures`]: what a
//!   produce error means (pure); [`chain`]: the record-transform chain over a batch (pure); [`outgoing`]: a record as the chain left it, to produce; [`orphans`]: progress of partitions whose assignment was
//!   lost; [`leave`]: the order the tasks leave the group in at a graceful stop.

pub mod book;
mod budget;
pub mod chain;
pub(crate) mod contexts;
mod core;
pub mod effects;
pub mod failures;
pub mod leave;
pub mod orphans;
pub mod outgoing;
pub mod progress;
mod rebalance;
mod status;
mod table;
pub mod truncation;
mod worker;
pub(crate) use worker::transformed;

pub use failures::OnUnproducible;

/// The record-transform chain in force and what becomes of a record it fails on, read at
/// every batch: a plugin file swap or a config reload changes either between two batches.
#[derive(Clone)]
pub struct Chain {
    /// The roles in force (their `record_transforms` are the chain; empty: none).
    pub roles: Arc<crate::policy::FlowRoles>,
    /// `on_transform_error`.
    pub on_error: OnUnproducible,
}

/// Where tasks read the chain in force from.
pub type ChainSource = Arc<dyn Fn() -> Chain + Send + Sync>;

/// What an instance's replication tasks of one flow share.
#[derive(Clone)]
pub struct TaskShared {
    /// What they mirrored of partitions whose assignment was lost.
    pub orphans: Arc<std::sync::Mutex<orphans::Orphans>>,
    /// The order they leave the group in at a graceful stop.
    pub leave: Arc<leave::LeaveOrder>,
    /// Bumped when they are to rejoin the group (the leader found partitions without an
    /// owner).
    pub rejoin: watch::Receiver<u64>,
    /// The flow's roles in force, for its record-transform chain (none: records pass
    /// untouched).
    pub roles: Option<ChainSource>,
    /// A single-instance flow's: how many tasks the instance splits the routed partitions
    /// over (each takes its share by `assign()`, no group); `None`: they share them through
    /// the progress group.
    pub split: Option<u32>,
    /// Cancelled when the single-instance lease is lost: the tasks stop at once, without a
    /// drain.
    pub abandon: CancellationToken,
    /// Held while a task runs (the lease is let go once every task ended).
    pub running: Option<tokio::sync::mpsc::Sender<()>>,
    /// Where a single instance's tasks register their producers (purged when the lease
    /// is lost).
    pub producers: Option<Producers>,
    /// A single instance's lease epoch: the owner generation of its partitions' offset
    /// syncs (a group member's is its group generation).
    pub epoch: Option<i32>,
    /// When a single instance's lease term ends: the tasks stop forwarding by themselves
    /// once it passed (as if `abandon` were cancelled).
    pub term: Option<crate::flow::single::TermEnd>,
}

/// The target producers of a single instance's replication tasks: purged at once, from the
/// lease's task, when the lease is lost — whatever the tasks' threads are doing.
#[derive(Clone, Default)]
pub struct Producers(
    Arc<
        std::sync::Mutex<
            Vec<std::sync::Weak<rdkafka::producer::ThreadedProducer<contexts::Deliveries>>>,
        >,
    >,
);

impl Producers {
    /// Registers `producer` (held weakly: a task's producer still goes with its task).
    fn add(&self, producer: &Arc<rdkafka::producer::ThreadedProducer<contexts::Deliveries>>) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|p| p.strong_count() > 0);
        all.push(Arc::downgrade(producer));
    }

    /// Purges what every live producer holds, queued or in flight (their delivery reports
    /// say so: nothing purged counts as mirrored); how many producers there were.
    pub fn purge_all(&self) -> usize {
        use rdkafka::producer::{Producer, PurgeConfig};
        let all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let live: Vec<_> = all.iter().filter_map(std::sync::Weak::upgrade).collect();
        for p in &live {
            p.purge(PurgeConfig::default().queue().inflight().non_blocking());
        }
        live.len()
    }
}

impl std::fmt::Debug for TaskShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskShared")
            .field("orphans", &self.orphans)
            .field("leave", &self.leave)
            .field("transforms", &self.roles.is_some())
            .field("split", &self.split)
            .finish()
    }
}

impl TaskShared {
    /// For tasks whose graceful stop may wait up to `stop_bound` for their turn to leave,
    /// rejoining the group whenever `rejoin` changes.
    pub fn new(stop_bound: Duration, rejoin: watch::Receiver<u64>) -> Self {
        TaskShared {
            orphans: Arc::default(),
            leave: Arc::new(leave::LeaveOrder::new(stop_bound)),
            rejoin,
            roles: None,
            split: None,
            abandon: CancellationToken::new(),
            running: None,
            producers: None,
            epoch: None,
            term: None,
        }
    }

    /// The same for a single-instance flow's `tasks` tasks, under the lease of `epoch`: each
    /// takes its share of the routed partitions itself, registers its producer in
    /// `producers`, stops at once when `abandon` is cancelled or its `term` ended, and holds
    /// `running` while it runs.
    pub fn single(
        mut self,
        (tasks, epoch): (u32, i32),
        abandon: CancellationToken,
        running: tokio::sync::mpsc::Sender<()>,
        producers: Producers,
        term: crate::flow::single::TermEnd,
    ) -> Self {
        self.split = Some(tasks);
        self.epoch = Some(epoch);
        self.term = Some(term);
        self.abandon = abandon;
        self.running = Some(running);
        self.producers = Some(producers);
        self
    }

    /// The same, applying the record-transform chain of the roles `roles` gives.
    pub fn with_roles(mut self, roles: ChainSource) -> Self {
        self.roles = Some(roles);
        self
    }
}

use super::Routes;
use super::telemetry::FlowTelemetry;
pub use crate::config::OnSourceTruncation;
use crate::config::StartOffset;
use crate::kafka::Cluster;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use worker::WorkerContext;

/// Settings of one replicator.
#[derive(Debug, Clone)]
pub struct ReplicatorSettings {
    /// `source->target`, for logs.
    pub flow: String,
    /// The consumer group sharing the partitions and holding progress.
    pub progress_group: String,
    /// Where offset syncs go (on the syncs cluster).
    pub syncs_topic: String,
    /// `offset_lag_max`.
    pub offset_lag_max: u64,
    /// Delayed syncs are flushed and progress committed this often.
    pub flush_interval: Duration,
    /// Where a partition without stored progress starts.
    pub start_offset: StartOffset,
    /// Unacknowledged records at most.
    pub max_in_flight: usize,
    /// What happens to a record the target will not take.
    pub on_unproducible: OnUnproducible,
    /// What happens to a record a record transform fails on.
    pub on_transform_error: OnUnproducible,
    /// What happens when a source partition lost records before they were mirrored.
    pub on_source_truncation: OnSourceTruncation,
    /// How often a paused partition tries its record again.
    pub retry_paused_every: Duration,
    /// How long a graceful stop (or a revocation) waits for records in flight.
    pub drain_timeout: Duration,
    /// The group session timeout: how soon a dead instance's partitions move.
    pub session_timeout: Duration,
    /// Which of the instance's replication tasks (group members) this is.
    pub member: u32,
    /// How often owned partitions' positions are committed again though they did not
    /// move ([`progress::refresh_every`]).
    pub refresh_every: Duration,
}

impl ReplicatorSettings {
    /// Settings with kmirror's defaults for the limits and timeouts.
    pub fn new(flow: &str, progress_group: &str, syncs_topic: &str) -> Self {
        ReplicatorSettings {
            flow: flow.to_string(),
            progress_group: progress_group.to_string(),
            syncs_topic: syncs_topic.to_string(),
            offset_lag_max: 100,
            flush_interval: Duration::from_secs(1),
            start_offset: StartOffset::Earliest,
            max_in_flight: 100_000,
            on_unproducible: OnUnproducible::Pause,
            on_transform_error: OnUnproducible::Pause,
            on_source_truncation: OnSourceTruncation::Continue,
            retry_paused_every: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(10),
            session_timeout: Duration::from_secs(10),
            member: 0,
            refresh_every: progress::REFRESH_EVERY,
        }
    }
}

/// Why a replicator stopped with an error (it is restarted from stored progress).
#[derive(Debug, thiserror::Error)]
pub enum ReplicateError {
    /// A client could not be created.
    #[error(transparent)]
    Client(#[from] crate::kafka::KafkaError),
    /// The producer became unusable.
    #[error("flow {flow}: the target producer failed: {message}")]
    Fatal {
        /// The flow.
        flow: String,
        /// Why.
        message: String,
    },
    /// A consumer operation failed.
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

/// A writer session id, different for every replicator start of every instance.
pub(crate) fn session_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // RandomState is seeded from the OS per process: two instances started at the same
    // nanosecond still differ.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(nanos);
    h.write_u32(std::process::id());
    h.finish()
}

/// Runs one replicator on its own thread until `shutdown`; `Ok` after a graceful stop.
pub async fn run(
    clusters: [Cluster; 3],
    settings: ReplicatorSettings,
    routes: watch::Receiver<Routes>,
    shutdown: CancellationToken,
    telemetry: Arc<FlowTelemetry>,
    shared: TaskShared,
) -> Result<(), ReplicateError> {
    let [source, target, syncs_cluster] = clusters;
    let ctx = WorkerContext {
        source,
        target,
        syncs_cluster,
        settings,
        routes,
        shutdown,
        telemetry,
        session: session_id(),
        orphans: shared.orphans,
        leave: shared.leave,
        rejoin: shared.rejoin,
        roles: shared.roles,
        split: shared.split,
        abandon: shared.abandon,
        producers: shared.producers,
        epoch: shared.epoch,
        term: shared.term,
    };
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let name = format!("kmirror-replicate-{}", ctx.settings.flow);
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| worker::run(ctx)));
        let _ = done_tx.send(result);
    });
    if let Err(e) = thread {
        panic!("cannot start the replication thread: {e}");
    }
    match done_rx.await {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("the replication thread ended without a result"),
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
    shared: TaskShared,
) {
    let mut backoff = Duration::from_millis(500);
    // A task that ends outside the group holds no other task's turn to leave.
    let leave = shared.leave.clone();
    let member = settings.member;
    let _left = scopeguard(move || leave.left(member, None, std::time::Instant::now()));
    loop {
        let run = run(
            clusters.clone(),
            settings.clone(),
            routes.clone(),
            shutdown.clone(),
            telemetry.clone(),
            shared.clone(),
        );
        let started = std::time::Instant::now();
        match run.await {
            Ok(()) => return,
            Err(e) => {
                tracing::error!(flow = %settings.flow, error = %e, "replication stopped; restarting from stored progress");
                let why = e.to_string();
                telemetry.update(|s| s.replicator_restarting = Some(why));
            }
        }
        if started.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_millis(500);
        }
        if shared.abandon.is_cancelled() || shared.term.as_ref().is_some_and(|t| t.over()) {
            return; // the single-instance lease is lost (or its term ended): never again
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

/// Runs `f` when dropped.
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}
