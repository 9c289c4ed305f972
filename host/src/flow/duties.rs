//! The elected duties of a flow — checkpoints (with the offset-sync reader that feeds
//! them and the audit), group offset sync, heartbeats, topic-ACL sync and the audit — started when this instance
//! becomes the leader and stopped as soon as it is not. (Discovery runs on every instance,
//! for the routes their replication follows; only the leader changes the target.)

use super::acls::task::{AclContext, SyncOff};
use super::audit::task::AuditContext;
use super::checkpoints::task::CheckpointContext;
use super::discovery::clusters::Live;
use super::offset_syncs::SharedStore;
use super::plugins::{FlowPlugins, InternalTopics};
use super::telemetry::FlowTelemetry;
use super::{
    CHECKPOINTS_SINGLE, Routes, acls, audit, checkpoints, heartbeats, offset_syncs, retry,
};
use crate::config::ResolvedFlow;
use crate::kafka::Cluster;
use crate::kafka::internal::InternalWriter;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What the duties work with.
pub struct DutiesContext {
    /// The flow.
    pub flow: Arc<ResolvedFlow>,
    /// The source cluster.
    pub source: Cluster,
    /// The target cluster.
    pub target: Cluster,
    /// Where the offset syncs are.
    pub syncs_cluster: Cluster,
    /// The internal topics.
    pub topics: InternalTopics,
    /// The flow's plugins.
    pub plugins: FlowPlugins,
    /// What the flow mirrors.
    pub routes: watch::Receiver<Routes>,
    /// Counters and status.
    pub telemetry: Arc<FlowTelemetry>,
}

/// Runs the duties whenever `leader` says so, until `stop`. A duty that panics panics this
/// task (the flow fails).
pub async fn run(ctx: DutiesContext, mut leader: watch::Receiver<bool>, stop: CancellationToken) {
    // Outlives leadership terms: ACL sync turned off once stays off.
    let acls_off = SyncOff::default();
    loop {
        ctx.telemetry.update(|s| s.leader = false);
        tokio::select! {
            _ = stop.cancelled() => return,
            elected = leader.wait_for(|l| *l) => if elected.is_err() { return },
        }
        ctx.telemetry.update(|s| s.leader = true);
        let duty = stop.child_token();
        let mut set = JoinSet::new();
        spawn(&ctx, &mut set, &duty, (&leader, &acls_off));
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = leader.wait_for(|l| !*l) => {}
            Some(Err(e)) = set.join_next() => {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
        duty.cancel();
        while let Some(joined) = set.join_next().await {
            if let Err(e) = joined
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        if stop.is_cancelled() {
            return;
        }
    }
}

fn spawn(
    ctx: &DutiesContext,
    set: &mut JoinSet<()>,
    stop: &CancellationToken,
    (leader, acls_off): (&watch::Receiver<bool>, &SyncOff),
) {
    let flow = &ctx.flow;
    let (src, dst) = (&flow.source.alias, &flow.target.alias);
    let rf = flow.settings.replication_factor;
    let topics = ctx.topics.clone();
    let (source, target) = (ctx.source.clone(), ctx.target.clone());
    let telemetry = ctx.telemetry.clone();
    // The offset syncs, read by the leader for the checkpoints and the audit.
    let store = Arc::new(SharedStore::default());
    if flow.settings.checkpoints.is_some() || flow.settings.audit.is_some() {
        let reader = offset_syncs::reader::run(
            ctx.syncs_cluster.clone(),
            topics.offset_syncs.clone(),
            store.clone(),
            telemetry.clone(),
            stop.clone(),
        );
        set.spawn(reader);
    }
    if let Some(settings) = flow.settings.audit {
        let ctx = AuditContext {
            source: source.clone(),
            target: target.clone(),
            store: store.clone(),
            routes: ctx.routes.clone(),
            settings,
            telemetry: telemetry.clone(),
        };
        set.spawn(audit::task::run(ctx, stop.clone()));
    }
    if let Some(cp) = flow.settings.checkpoints {
        let ctx = CheckpointContext {
            source: source.clone(),
            target: target.clone(),
            checkpoints_topic: topics.checkpoints.clone(),
            settings: cp,
            plugins: ctx.plugins.clone(),
            store,
            routes: ctx.routes.clone(),
            telemetry: telemetry.clone(),
        };
        let (target, stop, telemetry) = (target.clone(), stop.clone(), telemetry.clone());
        set.spawn(async move {
            let created = retry("create the checkpoints topic", &telemetry, &stop, || {
                target.ensure_internal_topic(&ctx.checkpoints_topic, rf, Some(CHECKPOINTS_SINGLE))
            });
            match created.await {
                Some(Ok(())) => checkpoints::task::run(ctx, stop).await,
                Some(Err(refused)) => {
                    tracing::error!(flow = %telemetry.flow, error = %refused, "checkpoints disabled");
                    telemetry.note_error("create the checkpoints topic", "config", &refused);
                }
                None => {}
            }
        });
    }
    if let Some(every) = flow.settings.heartbeats {
        let (target, stop, telemetry) = (target.clone(), stop.clone(), telemetry.clone());
        let (source_alias, target_alias) = (src.clone(), dst.clone());
        set.spawn(async move {
            let created = retry("create the heartbeats topic", &telemetry, &stop, || {
                target.ensure_internal_topic(&topics.heartbeats, rf, None)
            });
            if created.await.is_none() {
                return;
            }
            match InternalWriter::new(&target, &topics.heartbeats) {
                Ok(out) => heartbeats::run(out, source_alias, target_alias, every, telemetry, stop).await,
                Err(e) => tracing::error!(flow = %telemetry.flow, error = %e, "heartbeats disabled: cannot create a producer"),
            }
        });
    }
    if let Some(acl) = flow.settings.sync_topic_acls {
        let ctx = AclContext {
            clusters: Live { source, target },
            plugins: ctx.plugins.clone(),
            interval: acl.interval,
            delete: acl.delete,
            replication_factor: rf,
            routes: ctx.routes.clone(),
            leader: leader.clone(),
            telemetry,
            off: acls_off.clone(),
        };
        set.spawn(acls::task::run(ctx, stop.clone()));
    }
}
