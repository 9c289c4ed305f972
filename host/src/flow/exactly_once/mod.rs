//! Exactly-once mirroring (`exactly_once = true`): records and the flow's progress are
//! committed in one transaction on the target, so a crash, a kill or a partition moving
//! between instances never mirrors a record twice or loses one.
//!
//! The flow's partitions are spread over a fixed number of shards ([`shards`]); each shard
//! has one transactional id for the flow's life. The instances share the shards through a
//! consumer group on the target (`kmirror.<source>.<target>.shards`, subscribed to the
//! shards topic `kmirror-shards.<source>.internal`, one partition per shard). The owner
//! of a shard runs it ([`shard`]): `init_transactions` with the shard's id first fences
//! any previous owner — a paused or partitioned instance that still believes it owns the
//! shard can never commit again — then it reads the shard's progress from the target and
//! mirrors in transactions ([`ledger`]). Progress is kept by `send_offsets_to_transaction`
//! under the progress group `kmirror.<source>.<target>` on the target, keyed by the target
//! topics' partitions (which mirror the source's one to one). `docs/exactly-once.md`
//! explains the choice.

pub mod ledger;
pub mod shard;
pub mod shards;

use self::shard::{ShardContext, ShardSettings, stop};
use super::Routes;
use super::replication::ChainSource;
use super::telemetry::FlowTelemetry;
use crate::kafka::Cluster;
use crate::kafka::admin::TopicSpec;
use crate::kafka::clients::group_generation;
use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What an instance's exactly-once side of a flow runs with.
pub struct ExactlyOnceContext {
    /// Where records come from.
    pub source: Cluster,
    /// Where records, progress and the shards group live.
    pub target: Cluster,
    /// Where offset syncs go when not on the target (`None`: on the target, written
    /// inside the transaction of the records they describe).
    pub syncs_cluster: Option<Cluster>,
    /// `source->target`, for logs.
    pub flow: String,
    /// The source cluster's alias.
    pub source_alias: String,
    /// The target cluster's alias.
    pub target_alias: String,
    /// The progress group (on both clusters).
    pub progress_group: String,
    /// The offset-syncs topic.
    pub syncs_topic: String,
    /// Shards when the shards topic is created.
    pub shards: u32,
    /// The shards topic's replication factor (`None`: the broker's default).
    pub replication_factor: Option<i32>,
    /// Each shard's settings.
    pub settings: ShardSettings,
    /// The group session timeout: how soon a dead instance's shards move.
    pub session_timeout: Duration,
    /// How long a graceful stop (or a shard moving away) may take.
    pub drain_timeout: Duration,
    /// What discovery routes.
    pub routes: watch::Receiver<Routes>,
    /// Counters and status.
    pub telemetry: Arc<FlowTelemetry>,
    /// The record-transform chain in force, if any.
    pub roles: Option<ChainSource>,
}

/// Runs the instance's shards of the flow until `shutdown`: the shards topic is made sure
/// of, then the shards group is joined and each shard assigned to this instance runs.
pub async fn run(mut ctx: ExactlyOnceContext, shutdown: CancellationToken) {
    let topic = shards::shards_topic(&ctx.source_alias);
    let shards = super::retry("create the shards topic", &ctx.telemetry, &shutdown, || {
        ensure_shards_topic(&ctx.target, &topic, ctx.shards, ctx.replication_factor)
    })
    .await;
    let Some(shards) = shards else { return };
    if shards != ctx.shards {
        tracing::warn!(flow = %ctx.flow, topic, configured = ctx.shards, shards, "the shards topic has another shard count than exactly_once_shards (or its default, 4): the topic's count is kept (the shard of every partition depends on it)");
    }
    ctx.shards = shards;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let name = format!("kmirror-shards-{}", ctx.flow);
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            supervise(ctx, topic, shutdown)
        }));
        let _ = done_tx.send(result);
    });
    if let Err(e) = spawned {
        panic!("cannot start the shards thread: {e}");
    }
    match done_rx.await {
        Ok(Ok(())) => {}
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("the shards thread ended without a result"),
    }
}

/// Creates the shards topic with `shards` partitions unless it exists; its partition count.
async fn ensure_shards_topic(
    target: &Cluster,
    topic: &str,
    shards: u32,
    replication_factor: Option<i32>,
) -> Result<u32, crate::kafka::KafkaError> {
    if let Some(n) = target.topics().await?.get(topic) {
        return Ok(*n as u32);
    }
    let spec = TopicSpec {
        name: topic.to_string(),
        partitions: shards as i32,
        replication_factor,
        configs: Vec::new(),
    };
    for (_, result) in target.create_topics(&[spec]).await {
        // Another instance may have created it meanwhile: its count is read below.
        if let Err(e) = result {
            tracing::debug!(topic, error = %e, "shards topic not created here");
        }
    }
    // Never the configured count unseen: instances that disagreed on it would map a
    // partition to two shards. Not visible yet: tried again.
    match target.topics().await?.get(topic) {
        Some(n) => Ok(*n as u32),
        None => Err(crate::kafka::KafkaError {
            cluster: target.alias.clone(),
            operation: format!("create the shards topic {topic}"),
            message: "not visible yet after its creation".into(),
        }),
    }
}

/// The shard count the shards group's current assignment was made from: the partitions of
/// `topic` its members hold, as the coordinator describes the stable group (every member
/// reads the same answer, whatever its metadata says). Where the coordinator shows no
/// member's assignment (Tansu), the topic's partition count from the cluster's metadata.
/// An error while the group rebalances, or when neither can be read. `metadata_only`:
/// the metadata's count alone (a group that seems to rebalance for ever: a broker that
/// never shows it stable).
fn shard_count<C: ConsumerContext>(
    member: &BaseConsumer<C>,
    group: &str,
    topic: &str,
    cluster: &str,
    metadata_only: bool,
) -> Result<u32, String> {
    let what = |e: &dyn std::fmt::Display| format!("cluster {cluster}: shards topic {topic}: {e}");
    let groups = member
        .fetch_group_list(Some(group), Duration::from_secs(5))
        .map_err(|e| what(&format!("describe group {group}: {e}")))?;
    let described = groups
        .groups()
        .iter()
        .find(|g| g.name() == group && !metadata_only);
    if described.is_some_and(|g| g.state().is_empty()) {
        // Answered with an error (the coordinator moving or loading): not a group whose
        // members hold nothing.
        return Err(what(&format!(
            "the coordinator did not describe group {group} (it answered with an error)"
        )));
    }
    if let Some(g) = described
        && matches!(g.state(), "PreparingRebalance" | "CompletingRebalance")
    {
        // Kafka shows members' assignments of a stable group only.
        return Err(what(&format!(
            "group {group} is rebalancing ({})",
            g.state()
        )));
    }
    let held = described.and_then(|g| {
        g.members()
            .iter()
            .filter_map(|m| m.assignment())
            .filter_map(crate::kafka::assignment::decode_assignment)
            .flatten()
            .filter(|(t, p)| t == topic && *p >= 0)
            .map(|(_, p)| p)
            .max()
    });
    let metadata = member
        .fetch_metadata(Some(topic), Duration::from_secs(5))
        .map_err(|e| what(&e))?;
    match metadata.topics().iter().find(|t| t.name() == topic) {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
            let listed = t.partitions().len() as u32;
            match held {
                None => Ok(listed),
                Some(max) if (max as u32) < listed => Ok(max as u32 + 1),
                // More than the metadata lists: a broker's metadata behind the group's
                // (or a bad assignment): asked again.
                Some(max) => Err(what(&format!(
                    "the group's members hold shard {max}, the metadata lists {listed} partition(s)"
                ))),
            }
        }
        Some(t) => Err(what(
            &t.error()
                .map(|e| format!("{e:?}"))
                .unwrap_or_else(|| "no partitions".into())
                .to_string(),
        )),
        None => Err(what(&"not in the metadata")),
    }
}

/// A running shard.
struct Running {
    stop: Arc<AtomicU8>,
    thread: JoinHandle<Result<(), shard::ShardError>>,
}

/// What the shards group's callbacks and the supervisor share.
#[derive(Default)]
struct Shared {
    /// The shards assigned to this instance, and the generation they were assigned in.
    assigned: Mutex<(Vec<u32>, i32)>,
    /// The running shards.
    running: Mutex<BTreeMap<u32, Running>>,
}

impl Shared {
    /// The shards running now.
    fn running_shards(&self) -> Vec<u32> {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect()
    }

    /// Stops `shards` (committing their open transactions unless `abandon`), waiting for
    /// each until `deadline`.
    fn stop(&self, shards: &[u32], abandon: bool, deadline: Instant) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let how = if abandon {
            stop::ABANDON
        } else {
            stop::GRACEFUL
        };
        let stopping: Vec<(u32, Running)> = shards
            .iter()
            .filter_map(|s| running.remove(s).map(|r| (*s, r)))
            .collect();
        drop(running);
        for (_, r) in &stopping {
            r.stop.store(how, Ordering::Release);
        }
        for (shard, r) in stopping {
            while !r.thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if !r.thread.is_finished() {
                // It ends by itself; a newer owner fences it anyway.
                r.stop.store(stop::ABANDON, Ordering::Release);
                tracing::warn!(shard, "shard did not stop in time; left to end by itself");
                continue;
            }
            if let Ok(Err(e)) = r.thread.join() {
                tracing::warn!(shard, error = %e, "shard ended with an error");
            }
        }
    }
}

/// The shards group's callbacks: a shard taken away stops (its transaction committed
/// first, unless the assignment was lost) before the group moves on.
struct ShardsGroup {
    shared: Arc<Shared>,
    drain_timeout: Duration,
}

impl ClientContext for ShardsGroup {}

impl ConsumerContext for ShardsGroup {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let lost = consumer.assignment_lost();
            let shards: Vec<u32> = tpl
                .elements()
                .iter()
                .map(|e| e.partition() as u32)
                .collect();
            if lost {
                tracing::warn!(shards = ?shards, "shards lost (this instance missed the group's session): another instance owns them now, and this one is fenced from their transactions; their open transactions are abandoned");
            } else {
                tracing::info!(shards = ?shards, "shards revoked from this instance");
            }
            *self
                .shared
                .assigned
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = (Vec::new(), -1);
            self.shared
                .stop(&shards, lost, Instant::now() + self.drain_timeout);
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let shards: Vec<u32> = tpl
                .elements()
                .iter()
                .map(|e| e.partition() as u32)
                .collect();
            let generation = group_generation(consumer).unwrap_or(-1);
            tracing::info!(shards = ?shards, generation, "shards assigned to this instance");
            *self
                .shared
                .assigned
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = (shards, generation);
            // The shards topic is never read: its partitions only stand for the shards.
            if let Err(e) = consumer.pause(tpl) {
                tracing::debug!(error = %e, "shards topic not paused");
            }
        }
    }
}

fn supervise(mut ctx: ExactlyOnceContext, topic: String, shutdown: CancellationToken) {
    let shared = Arc::new(Shared::default());
    let timing = ctx.target.member_timing(ctx.session_timeout);
    let group = shards::shards_group(&ctx.source_alias, &ctx.target_alias);
    let context = ShardsGroup {
        shared: shared.clone(),
        drain_timeout: ctx.drain_timeout,
    };
    let mut settings: Vec<(&str, &str)> = timing.iter().map(|(k, v)| (*k, v.as_str())).collect();
    settings.extend([
        ("partition.assignment.strategy", "roundrobin"),
        ("allow.auto.create.topics", "false"),
        // The shards topic's partition count is checked this often (librdkafka's
        // default, five minutes, would leave a grown count unnoticed that long): a
        // change makes the group rebalance, and every instance reads the new count.
        ("topic.metadata.refresh.interval.ms", "5000"),
    ]);
    let member = ctx.target.group_member(&group, &settings, context);
    let member = match member {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(flow = %ctx.flow, error = %e, "cannot join the shards group; exactly-once mirroring does not run");
            ctx.telemetry
                .note_error("join the shards group", "kafka", &e);
            return;
        }
    };
    if let Err(e) = member.subscribe(&[topic.as_str()]) {
        tracing::error!(flow = %ctx.flow, error = %e, "cannot subscribe to the shards topic; exactly-once mirroring does not run");
        ctx.telemetry
            .note_error("join the shards group", "kafka", &e);
        return;
    }
    tracing::info!(flow = %ctx.flow, group, topic, shards = ctx.shards, "exactly-once: joining the shards group");
    let mut failed_at: BTreeMap<u32, Instant> = BTreeMap::new();
    // The generation whose shard count was read: the count is read again at every new
    // assignment, before any shard of it starts.
    let mut counted: Option<i32> = None;
    // When reading the count last failed (it is tried again 2 s later).
    let mut count_failed: Option<Instant> = None;
    let mut count_failures = 0u32;
    let mut count_generation: Option<i32> = None;
    while !shutdown.is_cancelled() {
        // Serves the group (rebalances run in here); the topic is never read.
        if let Some(Err(e)) = member.poll(Duration::from_millis(100)) {
            ctx.telemetry.note_error("shards group", "kafka", &e);
        }
        let (assigned, generation) = shared
            .assigned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if !assigned.is_empty() && counted != Some(generation) {
            // The shards topic grown or recreated with another count maps partitions to
            // other shards: every instance must use the count the group's assignment was
            // made from, or one partition would have two writers (two transactional ids,
            // neither fencing the other). The group rebalances when the count changes and
            // every member's shards stop (committed) before it (eager assignment), so
            // reading it here, before any shard of the new generation starts, is enough.
            let due = count_failed.is_none_or(|at: Instant| at.elapsed() >= Duration::from_secs(2));
            if !due {
                ctx.telemetry.tick("shards", Duration::from_secs(1));
                continue;
            }
            // Ten seconds of a group that never seems stable (in this generation): the
            // metadata decides. A group holding more shards than the metadata lists never
            // falls back (that metadata is behind).
            if count_generation != Some(generation) {
                count_generation = Some(generation);
                count_failures = 0;
            }
            let metadata_only = count_failures >= 5;
            match shard_count(&member, &group, &topic, &ctx.target.alias, metadata_only) {
                Ok(n) => {
                    if n != ctx.shards {
                        tracing::warn!(flow = %ctx.flow, topic, was = ctx.shards, shards = n, "the shards topic's partition count changed: the flow's partitions are spread over {n} shards from now on (every instance follows at the group's rebalance)");
                        let running = shared.running_shards();
                        shared.stop(&running, false, Instant::now() + ctx.drain_timeout);
                        ctx.shards = n;
                    }
                    counted = Some(generation);
                    count_failed = None;
                    count_failures = 0;
                }
                Err(why) => {
                    // No shard starts on a count not known to be current; tried again in
                    // 2 s (the loop goes on serving the group meanwhile).
                    if count_failed.is_none() {
                        tracing::warn!(flow = %ctx.flow, reason = %why, "the shard count of the shards group's assignment cannot be read: no shard starts until it can");
                    }
                    ctx.telemetry.note_error(
                        "read the shards topic's partition count",
                        "kafka",
                        &why,
                    );
                    count_failed = Some(Instant::now());
                    if why.contains("is rebalancing") {
                        count_failures += 1;
                    }
                    ctx.telemetry.tick("shards", Duration::from_secs(1));
                    continue;
                }
            }
        }
        let mut running = shared.running.lock().unwrap_or_else(|e| e.into_inner());
        // Shards that ended by themselves (an error: fenced, a client failure).
        let ended: Vec<u32> = running
            .iter()
            .filter(|(_, r)| r.thread.is_finished())
            .map(|(s, _)| *s)
            .collect();
        for s in ended {
            if let Some(r) = running.remove(&s) {
                match r.thread.join() {
                    Ok(Err(e)) => {
                        tracing::error!(flow = %ctx.flow, shard = s, error = %e, "shard stopped; it starts again from stored progress while this instance still owns it");
                        ctx.telemetry
                            .note_error("exactly-once shard", "transaction", &e);
                    }
                    Err(_) => tracing::error!(flow = %ctx.flow, shard = s, "shard panicked"),
                    Ok(Ok(())) => {}
                }
                failed_at.insert(s, Instant::now());
            }
        }
        for s in &assigned {
            if running.contains_key(s) {
                continue;
            }
            // A shard that ended with an error waits a session before it starts again: an
            // instance that was paused learns meanwhile that its shards moved, instead of
            // fencing their new owner.
            if failed_at
                .get(s)
                .is_some_and(|t| t.elapsed() < ctx.session_timeout)
            {
                continue;
            }
            let stop = Arc::new(AtomicU8::new(stop::RUN));
            let shard_ctx = ShardContext {
                source: ctx.source.clone(),
                target: ctx.target.clone(),
                syncs_cluster: ctx.syncs_cluster.clone(),
                flow: ctx.flow.clone(),
                shard: *s,
                shards: ctx.shards,
                transactional_id: shards::transactional_id(
                    &ctx.source_alias,
                    &ctx.target_alias,
                    *s,
                ),
                progress_group: ctx.progress_group.clone(),
                syncs_topic: ctx.syncs_topic.clone(),
                generation,
                settings: ctx.settings.clone(),
                routes: ctx.routes.clone(),
                stop: stop.clone(),
                telemetry: ctx.telemetry.clone(),
                roles: ctx.roles.clone(),
                session: super::replication::session_id(),
            };
            let spawned = std::thread::Builder::new()
                .name(format!("kmirror-shard-{s}"))
                .spawn(move || shard::run(shard_ctx));
            match spawned {
                Ok(thread) => {
                    running.insert(*s, Running { stop, thread });
                }
                Err(e) => {
                    tracing::error!(flow = %ctx.flow, shard = s, error = %e, "cannot start a shard thread");
                    failed_at.insert(*s, Instant::now());
                }
            }
        }
        drop(running);
        ctx.telemetry.tick("shards", Duration::from_secs(1));
    }
    // A graceful stop: every shard commits its open transaction, then the group is left.
    let all = shared.running_shards();
    shared.stop(&all, false, Instant::now() + ctx.drain_timeout);
    ctx.telemetry.loop_ended("shards");
    drop(member);
}
