//! The ACL sync loop: on the leader, a pass at once and then every interval; each pass
//! lists both clusters' topic bindings, decides their topics through the plugins, and
//! creates (and, if asked, deletes) what [`rules::plan`] says. A failed step is counted,
//! reported in `/status` and tried again at the next pass.

use super::clusters::AclClusters;
use super::rules::{self, AclPlan};
use crate::flow::Routes;
use crate::flow::discovery::rules::{Decided, decide_with};
use crate::flow::plugins::FlowPlugins;
use crate::flow::telemetry::{AclSyncStatus, Counter, FlowTelemetry, now_ms};
use crate::kafka::acls::{AclBinding, AclError};
use crate::policy::PluginError;
use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The loop's name in the liveness table.
const LOOP: &str = "acl sync";

/// Whether ACL sync was turned off for the rest of this run (the target does not serve
/// ACLs), and why. Shared by every leadership term of the flow, so it is said once.
#[derive(Debug, Clone, Default)]
pub struct SyncOff(Arc<OnceLock<String>>);

impl SyncOff {
    /// Why it is off, if it is.
    pub fn reason(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }

    /// Turns it off; whether it was on.
    fn set(&self, why: String) -> bool {
        self.0.set(why).is_ok()
    }
}

/// What the ACL sync works with.
pub struct AclContext<C> {
    /// The source and target clusters.
    pub clusters: C,
    /// The flow's plugins.
    pub plugins: FlowPlugins,
    /// How often a pass runs.
    pub interval: Duration,
    /// Whether bindings the flow created (its ledger) whose source binding is gone are
    /// deleted.
    pub delete: bool,
    /// Replication factor of the ledger topic (`None`: the broker's default).
    pub replication_factor: Option<i32>,
    /// What the flow mirrors (deletion touches only these topics).
    pub routes: watch::Receiver<Routes>,
    /// Whether this instance leads the flow; a pass runs only while it does.
    pub leader: watch::Receiver<bool>,
    /// Counters and status.
    pub telemetry: Arc<FlowTelemetry>,
    /// Off for the rest of the run.
    pub off: SyncOff,
}

/// What a pass came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything it had to do was done.
    Synced,
    /// Something failed; tried again next pass.
    Failed,
    /// The source serves no ACLs: nothing to sync this time.
    Skipped,
    /// The target does not serve ACLs: ACL sync is off for the rest of the run.
    Off,
}

/// Runs ACL sync until `stop`. Once it is turned off it does nothing more, but still
/// returns only at `stop`: a duty that ended early would end the duties' watch for the
/// others' panics.
pub async fn run<C: AclClusters>(ctx: AclContext<C>, stop: CancellationToken) {
    if ctx.off.reason().is_none() {
        passes(AclSync { ctx }, &stop).await;
    }
    stop.cancelled().await;
}

/// The passes, until `stop` or until ACL sync is turned off.
async fn passes<C: AclClusters>(mut sync: AclSync<C>, stop: &CancellationToken) {
    let interval = sync.ctx.interval;
    loop {
        if !*sync.ctx.leader.borrow() {
            // Not watched while it waits to lead.
            sync.ctx.telemetry.loop_ended(LOOP);
            tokio::select! {
                _ = stop.cancelled() => return,
                led = sync.ctx.leader.wait_for(|l| *l) => if led.is_err() { return },
            }
        }
        let outcome = tokio::select! {
            _ = stop.cancelled() => None,
            o = sync.pass() => Some(o),
        };
        if matches!(outcome, None | Some(Outcome::Off)) {
            sync.ctx.telemetry.loop_ended(LOOP);
            return;
        }
        sync.ctx.telemetry.tick(LOOP, interval);
        tokio::select! {
            _ = stop.cancelled() => {
                sync.ctx.telemetry.loop_ended(LOOP);
                return;
            }
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// A pass's plan, and the topics a plugin failed on (their bindings wait for a later pass).
#[derive(Debug, Default)]
pub struct Planned {
    /// What to create and delete.
    pub plan: AclPlan,
    /// Topics a plugin call failed for.
    pub failed: Vec<(String, PluginError)>,
}

/// Decides the topics of `source`'s bindings (and, with deletion on — `synced`, the
/// ledger's bindings — of the mirrored topics) with one batched plugin call and plans
/// against `target` (`kmirror plan` shows the same).
pub async fn planned(
    plugins: &FlowPlugins,
    source: &[AclBinding],
    target: &[AclBinding],
    routes: &Routes,
    synced: Option<&BTreeSet<AclBinding>>,
) -> Result<Planned, PluginError> {
    // An empty source listing cannot be told from a source whose authorizer is off or that
    // no longer lets kmirror describe its ACLs (librdkafka drops DescribeAcls' top-level
    // error): it never deletes anything.
    let synced = synced.filter(|_| !source.is_empty());
    let delete = synced.is_some();
    let mut names: BTreeSet<String> = source
        .iter()
        .filter(|b| rules::eligible(b))
        .map(|b| b.resource_name.clone())
        .collect();
    if delete {
        names.extend(routes.keys().cloned());
    }
    let decided = if names.is_empty() {
        Decided::default()
    } else {
        let names: Vec<String> = names.into_iter().collect();
        plugins.batch(&names, decide_with).await?
    };
    let desired = rules::desired(source, &decided.decisions);
    let mirrored = if delete {
        rules::mirrored_targets(routes, &decided.decisions)
    } else {
        BTreeSet::new()
    };
    Ok(Planned {
        plan: rules::plan(&desired, target, &mirrored, synced),
        failed: decided.failed,
    })
}

/// One flow's ACL sync.
pub struct AclSync<C> {
    /// What it works with.
    pub ctx: AclContext<C>,
}

impl<C: AclClusters> AclSync<C> {
    /// One pass; its result is in `/status` (`last_acl_sync`) and the counters.
    pub async fn pass(&mut self) -> Outcome {
        let clusters = &self.ctx.clusters;
        let (source, target) = tokio::join!(clusters.source_acls(), clusters.target_acls());
        let target = match target {
            Ok(t) => t,
            Err(e) if e.is_not_served() => return self.turn_off(&e, AclSyncStatus::default()),
            Err(e) => return self.failed("describe target ACLs", e.kind(), &e),
        };
        let source = match source {
            Ok(s) => s,
            Err(e) if e.is_not_served() => return self.nothing_to_sync(&e),
            Err(e) => return self.failed("describe source ACLs", e.kind(), &e),
        };
        let routes = self.ctx.routes.borrow().clone();
        let delete = self.ctx.delete;
        if delete && source.is_empty() {
            tracing::warn!(flow = %self.ctx.telemetry.flow, "acl sync: the source lists no ACLs; nothing is deleted on the target (an empty listing may be a source without an authorizer or without DESCRIBE rights)");
        }
        // With deletion on, only what the ledger says this flow created may go; a ledger
        // that cannot be read deletes nothing this pass.
        let mut ledger_failed = None;
        let synced = if delete && !source.is_empty() {
            match self.ctx.clusters.synced().await {
                Ok(fold) => {
                    if fold.malformed > 0 {
                        tracing::warn!(flow = %self.ctx.telemetry.flow, records = fold.malformed, "acl sync: the ledger holds records that are not bindings; they are skipped");
                    }
                    Some(fold.synced)
                }
                Err(e) => {
                    ledger_failed = Some(e);
                    None
                }
            }
        } else {
            None
        };
        let planned = match planned(
            &self.ctx.plugins,
            &source,
            &target,
            &routes,
            synced.as_ref(),
        )
        .await
        {
            Ok(p) => p,
            Err(e) => {
                return self.failed("acl sync: topic filter / replication policy", e.kind(), &e);
            }
        };
        let telemetry = self.ctx.telemetry.clone();
        let mut pass = AclSyncStatus::default();
        for (topic, e) in &planned.failed {
            pass.failed += 1;
            telemetry.note_error("acl sync: decide a topic", e.kind(), e);
            pass.error = Some(format!("topic {topic}: {e}"));
        }
        if let Some(e) = &ledger_failed {
            pass.failed += 1;
            pass.error = Some(format!(
                "acl sync: read the ledger (nothing deleted this pass): {e}"
            ));
            telemetry.note_error("acl sync: read the ledger", e.kind(), e);
        }
        let AclPlan { create, delete } = planned.plan;
        let flow = telemetry.flow.clone();
        let rf = self.ctx.replication_factor;
        // The ledger first: a binding is recorded before it is created, so a crash between
        // the two cannot leave one the flow made but does not know of (a recorded binding
        // that was never created is harmless: only a binding present on the target is ever
        // deleted). One whose record failed is still created, and never deleted.
        if !create.is_empty()
            && let Err(e) = self
                .ctx
                .clusters
                .record(&flow, rf, create.clone(), Vec::new())
                .await
        {
            pass.failed += 1;
            pass.error = Some(format!("acl sync: record in the ledger: {e}"));
            telemetry.note_error("acl sync: record in the ledger", e.kind(), &e);
            tracing::warn!(flow = %telemetry.flow, bindings = create.len(), error = %e, "ACL bindings created without their record in the ledger: sync_topic_acls_delete will never delete them");
        }
        let (mut deleted, mut unmade) = (Vec::new(), Vec::new());
        if !create.is_empty() {
            let results = self.ctx.clusters.create(create.clone()).await;
            for (b, r) in create.iter().zip(results) {
                match r {
                    Ok(()) => {
                        pass.created += 1;
                        tracing::info!(flow = %telemetry.flow, acl = %b, "created ACL on the target");
                    }
                    Err(e) if e.is_not_served() => return self.turn_off(&e, pass),
                    Err(e) => {
                        // Its record goes again: the flow did not make it.
                        unmade.push(b.clone());
                        self.step_failed(&mut pass, "create ACL", &e);
                    }
                }
            }
        }
        if !delete.is_empty() {
            let results = self.ctx.clusters.delete(delete.clone()).await;
            for (b, r) in delete.iter().zip(results) {
                match r {
                    Ok(n) => {
                        pass.deleted += n as u64;
                        deleted.push(b.clone());
                        tracing::info!(flow = %telemetry.flow, acl = %b, "deleted ACL from the target: its source binding is gone");
                    }
                    Err(e) if e.is_not_served() => return self.turn_off(&e, pass),
                    Err(e) => self.step_failed(&mut pass, "delete ACL", &e),
                }
            }
        }
        // What was deleted, or could not be created, is not the flow's (tombstones after
        // the calls: a crash between leaves a record of a binding that is not there, which
        // is harmless unless someone makes that very binding by hand meanwhile).
        deleted.extend(unmade);
        if !deleted.is_empty()
            && let Err(e) = self
                .ctx
                .clusters
                .record(&flow, rf, Vec::new(), deleted)
                .await
        {
            pass.failed += 1;
            pass.error = Some(format!("acl sync: record in the ledger: {e}"));
            telemetry.note_error("acl sync: record in the ledger", e.kind(), &e);
        }
        let outcome = if pass.failed > 0 {
            Outcome::Failed
        } else {
            Outcome::Synced
        };
        self.record(pass);
        outcome
    }

    fn step_failed(&self, pass: &mut AclSyncStatus, what: &'static str, e: &AclError) {
        pass.failed += 1;
        pass.error = Some(e.to_string());
        self.ctx.telemetry.note_error(what, e.kind(), e);
    }

    /// Records `pass` in `/status` and adds it to the counters.
    fn record(&self, pass: AclSyncStatus) {
        let t = &self.ctx.telemetry;
        t.add(Counter::AclsCreated, pass.created);
        t.add(Counter::AclsDeleted, pass.deleted);
        t.add(Counter::AclSyncFailures, pass.failed);
        t.update(|s| {
            s.last_acl_sync = Some(AclSyncStatus {
                at_ms: now_ms(),
                ..pass
            })
        });
    }

    /// A step the whole pass needs failed: counted, and tried again next pass.
    fn failed(&self, what: &'static str, kind: &'static str, e: &dyn std::fmt::Display) -> Outcome {
        self.ctx.telemetry.note_error(what, kind, e);
        self.record(AclSyncStatus {
            failed: 1,
            error: Some(format!("{what}: {e}")),
            ..AclSyncStatus::default()
        });
        Outcome::Failed
    }

    /// The source serves no ACLs: nothing to sync now; said once, asked again next pass.
    fn nothing_to_sync(&self, e: &AclError) -> Outcome {
        let t = &self.ctx.telemetry;
        if t.first_time("acl sync: the source serves no ACLs") {
            tracing::info!(flow = %t.flow, cluster = %self.ctx.clusters.source_alias(), error = %e, "the source serves no ACLs, so no topic ACLs are synced; consider sync_topic_acls_enabled = false");
        }
        self.record(AclSyncStatus {
            error: Some(e.to_string()),
            ..AclSyncStatus::default()
        });
        Outcome::Skipped
    }

    /// The target does not serve ACLs: off for the rest of the run, said once.
    fn turn_off(&self, e: &AclError, pass: AclSyncStatus) -> Outcome {
        let t = &self.ctx.telemetry;
        let why = format!(
            "the target {} does not serve ACLs ({}); ACL sync is off until kmirror restarts (as with sync_topic_acls_enabled = false)",
            self.ctx.clusters.target_alias(),
            e.kafka()
        );
        if self.ctx.off.set(why.clone()) {
            tracing::warn!(flow = %t.flow, "{why}");
        }
        self.record(AclSyncStatus {
            error: Some(why),
            disabled: true,
            ..pass
        });
        Outcome::Off
    }
}

#[cfg(test)]
mod tests;
