//! Checkpoints (MM2's MirrorCheckpointTask): tail the offset-syncs topic into the
//! [`OffsetSyncStore`]; every `emit_checkpoints_interval` translate the committed offsets of
//! the source groups the group filter accepts, on topics this flow mirrors, and emit the
//! checkpoints that move forward to `checkpoints-topic(source alias)` on the target; every
//! `sync_group_offsets_interval` (when enabled) commit them to target groups that are
//! EMPTY or unknown, where the target is behind.

use super::FlowStats;
use super::checkpoint::{self, CheckpointKey, SyncPlan, TargetGroup};
use super::offset_syncs::{MARKER_HEADER, SyncMarker};
use super::replicate::Assignment;
use super::sync_store::OffsetSyncStore;
use crate::formats::{Checkpoint, OffsetSync};
use crate::kafka::{Cluster, KafkaError};
use crate::policy::{GroupFilter, ReplicationPolicy};
use futures::StreamExt;
use rdkafka::consumer::BaseConsumer;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::FutureRecord;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Consumer groups with this prefix are kmirror's own (replication progress): never
/// checkpointed.
pub const OWN_GROUP_PREFIX: &str = "kmirror.";

/// The translation state shared by the sync reader and the checkpointer.
#[derive(Default)]
pub struct SharedStore {
    /// The syncs read so far.
    pub store: Mutex<OffsetSyncStore>,
    /// Set once the reader caught up with the topic's end at start.
    pub ready: AtomicBool,
}

/// Tails `topic` on `cluster` into `shared` until `shutdown`. Malformed records are
/// skipped and counted.
pub async fn read_syncs(
    cluster: Cluster,
    topic: String,
    shared: Arc<SharedStore>,
    stats: Arc<FlowStats>,
    shutdown: CancellationToken,
) {
    let (consumer, end) = loop {
        match cluster.reader(&topic).await {
            Ok(r) => break r,
            Err(e) => stats.note_error("read offset syncs", &e.to_string()),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    };
    if end <= 0 {
        shared.ready.store(true, Ordering::Release);
    }
    let mut stream = consumer.stream();
    let mut reached_end = false;
    loop {
        // Ready once past the end offset reported at start and the topic went quiet (some
        // brokers report the last batch's base offset + 1 as the end).
        let waiting = reached_end && !shared.ready.load(Ordering::Acquire);
        let quiet = tokio::time::sleep(if waiting {
            QUIET
        } else {
            Duration::from_secs(3600)
        });
        let msg = tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = quiet, if waiting => {
                shared.ready.store(true, Ordering::Release);
                tracing::info!(flow = %stats.flow, topic = %topic, "offset syncs read; translating");
                continue;
            }
            m = stream.next() => m,
        };
        let Some(msg) = msg else { return };
        let msg = match msg {
            Ok(m) => m,
            Err(e) => {
                stats.note_error("read offset syncs", &e.to_string());
                continue;
            }
        };
        match OffsetSync::decode(msg.key(), msg.payload()) {
            Ok(sync) => {
                let marker = msg
                    .headers()
                    .and_then(|h| h.iter().find(|h| h.key == MARKER_HEADER))
                    .and_then(|h| h.value)
                    .and_then(SyncMarker::decode);
                shared
                    .store
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .add(&sync, marker);
            }
            Err(e) => {
                stats.malformed_syncs.fetch_add(1, Ordering::Relaxed);
                stats.note_error(
                    "malformed offset sync skipped",
                    &format!("{topic} offset {}: {e}", msg.offset()),
                );
            }
        }
        reached_end |= msg.offset() + 1 >= end;
    }
}

/// How long a topic must be quiet after its reported end before a full read stops.
const QUIET: Duration = Duration::from_millis(500);

/// Reads every checkpoint of `topic` (the last one per key), e.g. after a restart.
pub async fn read_checkpoints(
    cluster: &Cluster,
    topic: &str,
    timeout: Duration,
) -> Result<HashMap<CheckpointKey, Checkpoint>, KafkaError> {
    let mut last = HashMap::new();
    let (consumer, end) = cluster.reader(topic).await?;
    if end <= 0 {
        return Ok(last);
    }
    let deadline = Instant::now() + timeout;
    let mut stream = consumer.stream();
    let mut reached_end = false;
    loop {
        // Past the end offset reported at start, stop once the topic goes quiet: some
        // brokers (Tansu) report the last batch's base offset + 1 as the end.
        let wait = if reached_end {
            (Instant::now() + QUIET).min(deadline)
        } else {
            deadline
        };
        let Ok(Some(msg)) = tokio::time::timeout_at(wait.into(), stream.next()).await else {
            break;
        };
        let Ok(msg) = msg else { continue };
        if let Ok(cp) = Checkpoint::decode(msg.key(), msg.payload()) {
            last.insert(checkpoint::key(&cp), cp);
        }
        reached_end |= msg.offset() + 1 >= end;
    }
    Ok(last)
}

/// What the checkpointer needs from its flow.
pub struct CheckpointSettings {
    /// The source alias.
    pub source_alias: String,
    /// The target alias.
    pub target_alias: String,
    /// Where checkpoints go on the target.
    pub checkpoints_topic: String,
    /// Emission interval.
    pub emit_interval: Duration,
    /// Group listing interval.
    pub refresh_groups_interval: Duration,
    /// Group offset sync interval, when enabled.
    pub sync_group_offsets: Option<Duration>,
}

/// Everything the checkpointer works with.
pub struct CheckpointContext {
    /// The source cluster (groups and their committed offsets).
    pub source: Cluster,
    /// The target cluster (checkpoints, target groups).
    pub target: Cluster,
    /// Names and intervals.
    pub settings: CheckpointSettings,
    /// The flow's group filter.
    pub groups: Arc<dyn GroupFilter>,
    /// The flow's replication policy.
    pub policy: Arc<dyn ReplicationPolicy>,
    /// The offset-sync store.
    pub shared: Arc<SharedStore>,
    /// The topics the flow mirrors.
    pub assignment: watch::Receiver<Assignment>,
    /// Counters and status.
    pub stats: Arc<FlowStats>,
}

/// Runs the checkpoint and group-offset-sync loop until `shutdown`.
pub async fn run(ctx: CheckpointContext, shutdown: CancellationToken) {
    let mut cp = Checkpointer {
        ctx,
        last: HashMap::new(),
        clients: HashMap::new(),
        accepted: Vec::new(),
        listed_at: None,
        synced_at: None,
    };
    match read_checkpoints(
        &cp.ctx.target,
        &cp.ctx.settings.checkpoints_topic,
        Duration::from_secs(30),
    )
    .await
    {
        Ok(last) => {
            tracing::info!(flow = %cp.ctx.stats.flow, checkpoints = last.len(), topic = %cp.ctx.settings.checkpoints_topic, "reloaded checkpoints");
            cp.last = last;
        }
        Err(e) => cp
            .ctx
            .stats
            .note_error("reload checkpoints", &e.to_string()),
    }
    let producer = match cp.ctx.target.producer(&[]) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(flow = %cp.ctx.stats.flow, error = %e, "checkpoints disabled: cannot create a producer");
            return;
        }
    };
    let mut tick = tokio::time::interval(cp.ctx.settings.emit_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !cp.ctx.shared.ready.load(Ordering::Acquire) {
            continue;
        }
        let started = Instant::now();
        let emitted = cp.pass().await;
        let count = emitted.len();
        // Sent together; each is recorded as emitted only once the target acked it.
        let mut sends: futures::stream::FuturesUnordered<_> = emitted
            .into_iter()
            .map(|c| {
                let producer = producer.clone();
                let topic = cp.ctx.settings.checkpoints_topic.clone();
                async move {
                    let (key, value) = (c.key(), c.value());
                    let record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic)
                        .partition(0)
                        .key(key.as_slice())
                        .payload(value.as_slice());
                    let sent = producer
                        .send(record, Duration::from_secs(10))
                        .await
                        .map(|_| ())
                        .map_err(|(e, _)| e);
                    (c, sent)
                }
            })
            .collect();
        while let Some((c, sent)) = sends.next().await {
            match sent {
                Ok(()) => {
                    cp.ctx.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                    cp.last.insert(checkpoint::key(&c), c);
                }
                Err(e) => cp.ctx.stats.note_error("emit checkpoint", &e.to_string()),
            }
        }
        if count > 0 {
            tracing::debug!(flow = %cp.ctx.stats.flow, groups = cp.accepted.len(), checkpoints = count, took = ?started.elapsed(), "checkpoint pass");
        }
        if let Some(every) = cp.ctx.settings.sync_group_offsets {
            if cp.synced_at.is_none_or(|t| t.elapsed() >= every) {
                cp.synced_at = Some(Instant::now());
                cp.sync_groups().await;
            }
        }
    }
}

struct Checkpointer {
    ctx: CheckpointContext,
    last: HashMap<CheckpointKey, Checkpoint>,
    clients: HashMap<(bool, String), Arc<BaseConsumer>>,
    accepted: Vec<String>,
    listed_at: Option<Instant>,
    synced_at: Option<Instant>,
}

impl Checkpointer {
    fn client(&mut self, on_target: bool, group: &str) -> Option<Arc<BaseConsumer>> {
        let key = (on_target, group.to_string());
        if let Some(c) = self.clients.get(&key) {
            return Some(c.clone());
        }
        let cluster = if on_target {
            &self.ctx.target
        } else {
            &self.ctx.source
        };
        match cluster.group_client(group) {
            Ok(c) => {
                self.clients.insert(key, c.clone());
                Some(c)
            }
            Err(e) => {
                self.ctx.stats.note_error("group client", &e.to_string());
                None
            }
        }
    }

    /// Refreshes the accepted groups when due (fail safe: a filter error keeps the last list).
    async fn refresh_groups(&mut self) {
        if self
            .listed_at
            .is_some_and(|t| t.elapsed() < self.ctx.settings.refresh_groups_interval)
        {
            return;
        }
        self.listed_at = Some(Instant::now());
        let names: Vec<String> = match self.ctx.source.groups().await {
            Ok(g) => g
                .into_iter()
                .map(|g| g.name)
                .filter(|n| !n.starts_with(OWN_GROUP_PREFIX))
                .collect(),
            Err(e) => {
                return self
                    .ctx
                    .stats
                    .note_error("list source groups", &e.to_string());
            }
        };
        let filter = self.ctx.groups.clone();
        let asked = names.clone();
        match super::plugin_call(move || filter.should_replicate_groups(&asked)).await {
            Ok(answers) => {
                self.accepted = names
                    .into_iter()
                    .zip(answers)
                    .filter(|(_, ok)| *ok)
                    .map(|(n, _)| n)
                    .collect();
            }
            Err(e) => self.ctx.stats.note_error("group filter", &e.to_string()),
        }
    }

    /// The checkpoints of this pass that should be emitted.
    async fn pass(&mut self) -> Vec<Checkpoint> {
        self.refresh_groups().await;
        let assignment = self.ctx.assignment.borrow().clone();
        let partitions: Vec<(String, i32)> = assignment
            .iter()
            .flat_map(|(t, (_, n))| (0..*n).map(move |p| (t.clone(), p)))
            .collect();
        if partitions.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for group in self.accepted.clone() {
            let Some(client) = self.client(false, &group) else {
                continue;
            };
            let committed = match self
                .ctx
                .source
                .committed(&client, &group, &partitions)
                .await
            {
                Ok(c) => c,
                Err(e) => {
                    self.ctx
                        .stats
                        .note_error("read source group offsets", &e.to_string());
                    continue;
                }
            };
            let committed_count = committed.len();
            let translated: Vec<(crate::kafka::Committed, i64)> = {
                let store = self
                    .ctx
                    .shared
                    .store
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                committed
                    .into_iter()
                    .filter_map(|c| {
                        store
                            .translate(&c.topic, c.partition, c.offset)
                            .map(|t| (c, t))
                    })
                    .collect()
            };
            tracing::trace!(group = %group, committed = committed_count, translated = translated.len(), "group offsets");
            for (c, downstream) in translated {
                let (policy, src, tgt, topic) = (
                    self.ctx.policy.clone(),
                    self.ctx.settings.source_alias.clone(),
                    self.ctx.settings.target_alias.clone(),
                    c.topic.clone(),
                );
                let name = match super::plugin_call(move || {
                    checkpoint::target_topic(&*policy, &src, &tgt, &topic)
                })
                .await
                {
                    Ok(n) => n,
                    Err(e) => {
                        self.ctx
                            .stats
                            .note_error("replication policy", &e.to_string());
                        continue;
                    }
                };
                let next = Checkpoint {
                    group: group.clone(),
                    topic: name,
                    partition: c.partition,
                    upstream: c.offset,
                    downstream,
                    metadata: c.metadata,
                };
                if checkpoint::should_emit(self.last.get(&checkpoint::key(&next)), &next) {
                    out.push(next);
                }
            }
        }
        out
    }

    /// Commits checkpoints to idle target groups where the target is behind.
    async fn sync_groups(&mut self) {
        let mut by_group: BTreeMap<String, Vec<Checkpoint>> = BTreeMap::new();
        for c in self.last.values() {
            if self.accepted.contains(&c.group) {
                by_group.entry(c.group.clone()).or_default().push(c.clone());
            }
        }
        for (group, cps) in by_group {
            let state = match self.ctx.target.group(&group).await {
                Ok(g) => TargetGroup::from_state(
                    g.as_ref().map(|g| g.state.as_str()),
                    g.as_ref().map_or(0, |g| g.members),
                ),
                Err(e) => {
                    self.ctx
                        .stats
                        .note_error("describe target group", &e.to_string());
                    continue;
                }
            };
            let Some(client) = self.client(true, &group) else {
                continue;
            };
            let partitions: Vec<(String, i32)> =
                cps.iter().map(|c| (c.topic.clone(), c.partition)).collect();
            let committed: BTreeMap<(String, i32), i64> = match self
                .ctx
                .target
                .committed(&client, &group, &partitions)
                .await
            {
                Ok(c) => c
                    .into_iter()
                    .map(|c| ((c.topic, c.partition), c.offset))
                    .collect(),
                Err(e) => {
                    self.ctx
                        .stats
                        .note_error("read target group offsets", &e.to_string());
                    continue;
                }
            };
            let refs: Vec<&Checkpoint> = cps.iter().collect();
            match checkpoint::plan_group_sync(&state, &committed, &refs) {
                SyncPlan::Commit(offsets) => {
                    match self.ctx.target.commit(&client, &group, &offsets).await {
                        Ok(()) => {
                            self.ctx.stats.group_syncs.fetch_add(1, Ordering::Relaxed);
                            tracing::info!(flow = %self.ctx.stats.flow, group = %group, partitions = offsets.len(), "synced group offsets to the target");
                        }
                        Err(e) => self
                            .ctx
                            .stats
                            .note_error("sync group offsets", &e.to_string()),
                    }
                }
                SyncPlan::SkipActive => {
                    self.ctx
                        .stats
                        .active_groups_skipped
                        .fetch_add(1, Ordering::Relaxed);
                    if self
                        .ctx
                        .stats
                        .first_time(&format!("active target group {group}"))
                    {
                        tracing::warn!(flow = %self.ctx.stats.flow, group = %group, "target group is active; its offsets are not synced");
                    }
                }
                SyncPlan::UpToDate => {}
            }
        }
    }
}
