//! The checkpoint loop: every `emit_checkpoints_interval`, once the offset syncs are read,
//! translate the committed offsets of the source groups the group filter accepts, on the
//! topics this flow mirrors, and emit the checkpoints that move forward; every
//! `sync_group_offsets_interval` (when enabled) sync them to idle target groups.

use super::rules::{self, CheckpointKey};
use crate::config::CheckpointSettings;
use crate::flow::group_sync::{self, SyncPlan};
use crate::flow::offset_syncs::SharedStore;
use crate::flow::plugins::FlowPlugins;
use crate::flow::telemetry::{Counter, FlowTelemetry};
use crate::flow::{OWN_GROUP_PREFIX, Routes};
use crate::formats::Checkpoint;
use crate::kafka::internal::{InternalWriter, read_to_end};
use crate::kafka::{Cluster, KafkaError};
use futures::StreamExt;
use rdkafka::consumer::BaseConsumer;
use rdkafka::message::Message;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Reads every checkpoint of `topic` (the last one per key), e.g. after a restart.
pub async fn read_checkpoints(
    cluster: &Cluster,
    topic: &str,
    timeout: Duration,
) -> Result<HashMap<CheckpointKey, Checkpoint>, KafkaError> {
    let mut last = HashMap::new();
    read_to_end(cluster, topic, timeout, |msg| {
        if let Ok(cp) = Checkpoint::decode(msg.key(), msg.payload()) {
            last.insert(rules::key(&cp), cp);
        }
    })
    .await?;
    Ok(last)
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
        last: HashMap::new(),
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
        Ok(last) => {
            tracing::info!(flow = %cp.ctx.telemetry.flow, checkpoints = last.len(), topic = %cp.ctx.checkpoints_topic, "reloaded checkpoints");
            cp.last = last;
        }
        Err(e) => cp
            .ctx
            .telemetry
            .note_error("reload checkpoints", e.kind(), &e),
    }
    let mut tick = tokio::time::interval(cp.ctx.settings.emit_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
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
                    cp.last.insert(rules::key(&c), c);
                }
                Err(e) => cp.ctx.telemetry.note_error("emit checkpoint", e.kind(), &e),
            }
        }
        if count > 0 {
            tracing::debug!(flow = %cp.ctx.telemetry.flow, groups = cp.accepted.len(), checkpoints = count, took = ?started.elapsed(), "checkpoint pass");
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
            Ok(accepted) => self.accepted = accepted,
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
                        .telemetry
                        .note_error("read source group offsets", e.kind(), &e);
                    continue;
                }
            };
            let store = self
                .ctx
                .store
                .store
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            for c in committed {
                let Some(downstream) = store.translate(&c.topic, c.partition, c.offset) else {
                    continue;
                };
                let Some(next) = rules::checkpoint(&routes, &group, c, downstream) else {
                    continue;
                };
                if rules::should_emit(self.last.get(&rules::key(&next)), &next) {
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
