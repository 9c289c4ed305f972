//! The checkpoint loop: every `emit_checkpoints_interval`, once the offset syncs are read,
//! translate the committed offsets of the source groups the group filter accepts, on the
//! topics this flow mirrors, and emit the checkpoints that move forward; every
//! `sync_group_offsets_interval` (when enabled) sync them to idle target groups.

use super::rules::{self, CheckpointKey};
use crate::config::CheckpointSettings;
use crate::flow::group_sync::{self, SyncPlan};
use crate::flow::offset_syncs::SharedStore;
use crate::flow::plugins::FlowPlugins;
use crate::flow::telemetry::{Counter, FlowTelemetry, GroupStatus};
use crate::flow::{OWN_GROUP_PREFIX, Routes};
use crate::formats::Checkpoint;
use crate::kafka::internal::{InternalWriter, read_to_end};
use crate::kafka::{Cluster, KafkaError};
use futures::StreamExt;
use rdkafka::consumer::BaseConsumer;
use rdkafka::message::Message;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

mod probe;

/// Every checkpoint of a checkpoints topic (the last one per key), and whether the topic
/// was read to its end.
#[derive(Debug, Default)]
pub struct Checkpoints {
    /// The last checkpoint per (group, topic, partition).
    pub last: HashMap<CheckpointKey, Checkpoint>,
    /// Whether the end was reached within the timeout (else `last` may miss some).
    pub complete: bool,
}

/// Reads every checkpoint of `topic` on `cluster`, e.g. after a restart, for up to `timeout`.
pub async fn read_checkpoints(
    cluster: &Cluster,
    topic: &str,
    timeout: Duration,
) -> Result<Checkpoints, KafkaError> {
    let mut last = HashMap::new();
    let complete = read_to_end(cluster, topic, timeout, |msg| {
        if let Ok(cp) = Checkpoint::decode(msg.key(), msg.payload()) {
            last.insert(rules::key(&cp), cp);
        }
    })
    .await?;
    Ok(Checkpoints { last, complete })
}

/// Everything the checkpoint task works with.
pub struct CheckpointContext {
    /// The source cluster (groups and their committed offsets).
    pub source: Cluster,
    /// The target cluster (checkpoints, target groups).
    pub target: Cluster,
    /// The checkpoints topic on the target.
    pub checkpoints_topic: String,
    /// Intervals.
    pub settings: CheckpointSettings,
    /// The flow's plugins (the group filter).
    pub plugins: FlowPlugins,
    /// The offset-sync store.
    pub store: Arc<SharedStore>,
    /// What the flow mirrors, and under which names.
    pub routes: watch::Receiver<Routes>,
    /// Counters and status.
    pub telemetry: Arc<FlowTelemetry>,
}

/// Runs the checkpoint and group-offset-sync loop until `shutdown`.
pub async fn run(ctx: CheckpointContext, shutdown: CancellationToken) {
    let writer = match InternalWriter::new(&ctx.target, &ctx.checkpoints_topic) {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(flow = %ctx.telemetry.flow, error = %e, "checkpoints disabled: cannot create a producer");
            return;
        }
    };
    let mut cp = Checkpointer {
        epochs: HashMap::new(),
        last: HashMap::new(),
        confirmed: HashSet::new(),
        bounds: HashMap::new(),
        probed: HashMap::new(),
        clients: HashMap::new(),
        accepted: Vec::new(),
        listed_at: None,
        synced_at: None,
        ctx,
    };
    match read_checkpoints(
        &cp.ctx.target,
        &cp.ctx.checkpoints_topic,
        Duration::from_secs(30),
    )
    .await
    {
        Ok(read) => {
            if !read.complete {
                tracing::warn!(flow = %cp.ctx.telemetry.flow, topic = %cp.ctx.checkpoints_topic, "the checkpoints topic was not read to its end; checkpoints may be emitted again");
            }
            tracing::info!(flow = %cp.ctx.telemetry.flow, checkpoints = read.last.len(), topic = %cp.ctx.checkpoints_topic, "reloaded checkpoints");
            cp.last = read.last;
        }
        Err(e) => cp
            .ctx
            .telemetry
            .note_error("reload checkpoints", e.kind(), &e),
    }
    let mut tick = tokio::time::interval(cp.ctx.settings.emit_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let every = cp.ctx.settings.emit_interval;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                // Stopped (leadership lost, or the flow stops): another instance places
                // the groups now.
                cp.ctx.telemetry.update(|s| s.groups.clear());
                cp.ctx.telemetry.loop_ended("checkpoints");
                return;
            }
            _ = tick.tick() => {}
        }
        cp.ctx.telemetry.tick("checkpoints", every);
        if !cp.ctx.store.is_ready() {
            continue;
        }
        let started = Instant::now();
        let emitted = cp.pass().await;
        let count = emitted.len();
        // Sent together; each is recorded as emitted only once the target acked it.
        let mut sends: futures::stream::FuturesUnordered<_> = emitted
            .into_iter()
            .map(|c| {
                let sent = writer.send(&c.key(), &c.value(), None);
                async move { (c, sent.await) }
            })
            .collect();
        while let Some((c, sent)) = sends.next().await {
            match sent {
                Ok(_) => {
                    cp.ctx.telemetry.add(Counter::Checkpoints, 1);
                    cp.confirmed.insert(rules::key(&c));
                    cp.last.insert(rules::key(&c), c);
                }
                Err(e) => cp.ctx.telemetry.note_error("emit checkpoint", e.kind(), &e),
            }
        }
        cp.ctx
            .telemetry
            .update(|s| s.last_checkpoint_pass_ms = Some(crate::flow::telemetry::now_ms()));
        tracing::debug!(flow = %cp.ctx.telemetry.flow, groups = cp.accepted.len(), checkpoints = count, took = ?started.elapsed(), "checkpoint pass");
        if let Some(sync) = cp.ctx.settings.sync_group_offsets {
            let since = cp.synced_at.map(|t| started.saturating_duration_since(t));
            if rules::sync_due(since, every, sync) {
                cp.synced_at = Some(started);
                cp.sync_groups().await;
            }
        }
    }
}

/// A translation, and the oldest and newest target offsets its syncs describe.
struct Translated {
    offset: i64,
    epoch: u64,
    oldest_downstream: Option<i64>,
    newest_downstream: Option<i64>,
}

struct Checkpointer {
    ctx: CheckpointContext,
    /// The store's epoch per source partition when its checkpoints were made.
    epochs: HashMap<(String, i32), u64>,
    /// The last checkpoint per key: emitted by this process, or reloaded at its start.
    last: HashMap<CheckpointKey, Checkpoint>,
    /// The keys whose last checkpoint this process emitted or derived again from the syncs
    /// as they are now; only those are synced to target groups.
    confirmed: HashSet<CheckpointKey>,
    /// The end no checkpoint of a target partition may pass, as of the last pass.
    bounds: HashMap<(String, i32), i64>,
    /// Target partitions that end before their newest synced record: that record's offset
    /// and whether the log does not reach it (stale syncs).
    probed: HashMap<(String, i32), (i64, bool)>,
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
                self.ctx.telemetry.note_error("group client", e.kind(), &e);
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
                    .telemetry
                    .note_error("list source groups", e.kind(), &e);
            }
        };
        match self.ctx.plugins.accept_groups(names).await {
            Ok(accepted) => {
                // Clients of groups no longer accepted (or gone) are released.
                self.clients
                    .retain(|(_, g), _| g == OWN_GROUP_PREFIX || accepted.contains(g));
                self.accepted = accepted;
            }
            Err(e) => self.ctx.telemetry.note_error("group filter", e.kind(), &e),
        }
    }

    /// The checkpoints of this pass that should be emitted.
    async fn pass(&mut self) -> Vec<Checkpoint> {
        self.refresh_groups().await;
        let routes = self.ctx.routes.borrow().clone();
        let partitions: Vec<(String, i32)> = routes
            .iter()
            .flat_map(|(t, r)| (0..r.partitions).map(move |p| (t.clone(), p)))
            .collect();
        if partitions.is_empty() {
            // Nothing mirrored (e.g. every topic failed over): no group to place.
            self.ctx.telemetry.update(|s| s.groups.clear());
            return Vec::new();
        }
        // A target partition that ends before every retained sync is not the one the syncs
        // describe (the topic was recreated and no new sync arrived yet): no checkpoint
        // from them. (Some brokers report an end that lags the true one by up to a batch,
        // so the end is used to detect this, not as a cap.)
        // The newest record the syncs describe per target partition, before the ends are
        // read: a sync arriving meanwhile could otherwise look like a record past the end.
        let newest: HashMap<(String, i32), i64> = {
            let store = self
                .ctx
                .store
                .store
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            partitions
                .iter()
                .filter_map(|(t, p)| {
                    Some((
                        (routes.get(t)?.target.clone(), *p),
                        store.newest_downstream(t, *p)?,
                    ))
                })
                .collect()
        };
        let ends = self.target_ends(&routes, &partitions).await;
        let Some(ends) = ends else {
            return Vec::new();
        };
        let stale = self.stale_partitions(&newest, &ends).await;
        // This pass's bounds only; what is stale now is confirmed no more.
        self.bounds.clear();
        for target in &stale {
            self.unconfirm(target);
        }
        // Every accepted group's committed offsets, from the one admin client.
        let offsets = match self.ctx.source.committed_of_groups(&self.accepted).await {
            Ok(o) => o,
            Err(e) => {
                self.ctx
                    .telemetry
                    .note_error("read source group offsets", e.kind(), &e);
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        let mut groups: BTreeMap<String, GroupStatus> = BTreeMap::new();
        for (group, committed) in offsets {
            let committed: Vec<_> = match committed {
                Ok(c) => c
                    .into_iter()
                    .filter(|c| {
                        routes
                            .get(&c.topic)
                            .is_some_and(|r| c.partition < r.partitions)
                    })
                    .collect(),
                Err(e) => {
                    self.ctx.telemetry.note_error(
                        "read source group offsets",
                        "kafka",
                        &format!("group {group}: {e}"),
                    );
                    continue;
                }
            };
            let translated: Vec<_> = {
                let store = self
                    .ctx
                    .store
                    .store
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let mut placed = GroupStatus {
                    partitions: committed.len(),
                    ..GroupStatus::default()
                };
                for c in &committed {
                    // Records behind the group's position the syncs do not place yet: not
                    // mirrored, or mirrored within the last flush.
                    if let Some(newest) = store.newest_upstream(&c.topic, c.partition) {
                        placed.tail += (c.offset - newest - 1).max(0);
                    }
                    match store.translate_rereads(&c.topic, c.partition, c.offset) {
                        Some((_, Some(0))) => placed.exact += 1,
                        Some((_, rereads)) => {
                            placed.approximate += 1;
                            placed.rereads += rereads.unwrap_or(0);
                        }
                        None => {}
                    }
                }
                if placed.partitions > 0 {
                    groups.insert(group.clone(), placed);
                }
                committed
                    .into_iter()
                    .filter_map(|c| {
                        let t = store.translation(&c.topic, c.partition, c.offset)?;
                        let oldest = store.oldest_downstream(&c.topic, c.partition);
                        let newest = store.newest_downstream(&c.topic, c.partition);
                        Some((
                            c,
                            Translated {
                                offset: t.offset,
                                epoch: t.epoch,
                                oldest_downstream: oldest,
                                newest_downstream: newest,
                            },
                        ))
                    })
                    .collect()
            };
            for (c, t) in translated {
                self.follow_epoch(&routes, &c.topic, c.partition, t.epoch);
                let Some(route) = routes.get(&c.topic) else {
                    continue;
                };
                let target = (route.target.clone(), c.partition);
                let end = ends.get(&target).copied();
                if stale.contains(&target) {
                    continue;
                }
                if !rules::syncs_match_target(end, t.oldest_downstream) {
                    self.unconfirm(&target);
                    continue;
                }
                let bound = rules::checkpoint_bound(end, t.newest_downstream);
                if let Some(b) = bound {
                    self.bounds.insert(target, b);
                }
                if bound.is_some_and(|b| t.offset > b) {
                    continue; // never beyond the partition's end
                }
                let Some(next) = rules::checkpoint(&routes, &group, c, t.offset) else {
                    continue;
                };
                let key = rules::key(&next);
                let confirmed = self.confirmed.contains(&key);
                match rules::verdict(self.last.get(&key), confirmed, &next) {
                    rules::Verdict::Emit => out.push(next),
                    rules::Verdict::Confirm => {
                        self.confirmed.insert(key);
                    }
                    rules::Verdict::Keep => {}
                }
            }
        }
        // Shown per group (`/status` groups, `kmirror_group_*` metrics); whether a group is
        // active on the target is what the last group sync saw.
        self.ctx.telemetry.update(|s| {
            for (g, placed) in &mut groups {
                placed.active_on_target = s.groups.get(g).and_then(|o| o.active_on_target);
            }
            s.groups = groups;
        });
        out
    }

    /// When the store reset a partition (a rewind: the target topic was recreated, or the
    /// source re-mirrored), checkpoints made from its old syncs are forgotten, so the new
    /// ones are emitted even if they are behind.
    fn follow_epoch(&mut self, routes: &Routes, topic: &str, partition: i32, epoch: u64) {
        let key = (topic.to_string(), partition);
        let known = self.epochs.insert(key, epoch);
        if known.is_some_and(|k| k != epoch)
            && let Some(route) = routes.get(topic)
        {
            self.last
                .retain(|k, _| !(k.1 == route.target && k.2 == partition));
            self.confirmed
                .retain(|k| !(k.1 == route.target && k.2 == partition));
            tracing::info!(flow = %self.ctx.telemetry.flow, topic, partition, "offset syncs were reset; checkpoints start over");
        }
    }

    /// Commits checkpoints to idle target groups where the target is behind: only those
    /// this process confirmed, and never beyond the partition's end.
    async fn sync_groups(&mut self) {
        let mut by_group: BTreeMap<String, Vec<Checkpoint>> = BTreeMap::new();
        for (k, c) in &self.last {
            let within = self
                .bounds
                .get(&(c.topic.clone(), c.partition))
                .is_some_and(|b| c.downstream <= *b);
            if self.accepted.contains(&c.group) && self.confirmed.contains(k) && within {
                by_group.entry(c.group.clone()).or_default().push(c.clone());
            }
        }
        let flow = self.ctx.telemetry.flow.clone();
        for (group, cps) in by_group {
            let Some(client) = self.client(true, &group) else {
                continue;
            };
            let target = &self.ctx.target;
            let sync = match group_sync::prepare(target, &client, &group, &cps).await {
                Ok(s) => s,
                Err(e) => {
                    self.ctx
                        .telemetry
                        .note_error("read target group", e.kind(), &e);
                    continue;
                }
            };
            let active = matches!(sync.plan, SyncPlan::SkipActive);
            self.ctx.telemetry.update(|s| {
                if let Some(g) = s.groups.get_mut(&group) {
                    g.active_on_target = Some(active);
                }
            });
            match &sync.plan {
                SyncPlan::Commit(_) => {
                    match group_sync::apply(target, &client, &group, &sync.plan).await {
                        Ok(partitions) => {
                            self.ctx.telemetry.add(Counter::GroupOffsetSyncs, 1);
                            tracing::info!(flow = %flow, group = %group, partitions, "synced group offsets to the target");
                        }
                        Err(e) => self
                            .ctx
                            .telemetry
                            .note_error("sync group offsets", e.kind(), &e),
                    }
                }
                SyncPlan::SkipActive => {
                    self.ctx
                        .telemetry
                        .add(Counter::ActiveTargetGroupsSkipped, 1);
                    if self
                        .ctx
                        .telemetry
                        .first_time(&format!("active target group {group}"))
                    {
                        tracing::warn!(flow = %flow, group = %group, "target group is active; its offsets are not synced");
                    }
                }
                SyncPlan::UpToDate => {}
            }
        }
    }
}
