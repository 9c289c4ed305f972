//! The daemon's running flows: started, stopped gracefully and restarted one at a time, each
//! on its own cancellation token, each reporting its end on one channel. A restart starts
//! the new flow once the old one has stored its progress and left its groups.

use crate::config::ResolvedFlow;
use crate::flow::FlowError;
use crate::flow::discovery::claims::TargetClaims;
use crate::flow::plugins::FlowPlugins;
use crate::flow::supervisor;
use crate::flow::telemetry::FlowTelemetry;
use crate::telemetry::Telemetry;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

/// How long a stopping flow may take beyond its `shutdown_timeout` (and the session timeout
/// per replication task after the first, which may each wait to leave the group in turn)
/// before it is abandoned.
pub const STOP_GRACE: Duration = Duration::from_secs(20);

/// A running flow.
pub struct Running {
    /// Its configuration.
    pub flow: Arc<ResolvedFlow>,
    /// Its telemetry.
    pub telemetry: Arc<FlowTelemetry>,
    /// Its plugin roles (shared with the flow: a replacement takes effect there).
    pub plugins: FlowPlugins,
    /// The content hash of each component file it runs, by path.
    pub hashes: BTreeMap<PathBuf, String>,
    id: u64,
    token: CancellationToken,
    abort: AbortHandle,
    /// Set once asked to stop: when to give up waiting.
    stopping: Option<Instant>,
}

/// A flow's end.
pub struct Exit {
    name: String,
    id: u64,
    result: Result<(), FlowError>,
}

/// The running flows.
pub struct Flows {
    running: BTreeMap<String, Running>,
    /// Flows to start once the flow of the same name has stopped.
    pending: BTreeMap<String, Arc<ResolvedFlow>>,
    exits: mpsc::UnboundedReceiver<Exit>,
    exit_tx: mpsc::UnboundedSender<Exit>,
    next_id: u64,
    root: CancellationToken,
    telemetry: Arc<Telemetry>,
    /// The target topics the flows mirror into (two flows never write one).
    claims: TargetClaims,
    /// Component files of flows started in place of an old version since last asked.
    started_files: Vec<PathBuf>,
}

impl Flows {
    /// No flows yet; every flow's token is a child of `root`.
    pub fn new(root: CancellationToken, telemetry: Arc<Telemetry>) -> Self {
        let (exit_tx, exits) = mpsc::unbounded_channel();
        Flows {
            running: BTreeMap::new(),
            pending: BTreeMap::new(),
            exits,
            exit_tx,
            next_id: 0,
            root,
            telemetry,
            claims: TargetClaims::default(),
            started_files: Vec::new(),
        }
    }

    /// The running flows, by name.
    pub fn running(&self) -> &BTreeMap<String, Running> {
        &self.running
    }

    /// Whether no flow runs or waits to start.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty() && self.pending.is_empty()
    }

    /// Starts `flow` now.
    pub fn start(&mut self, flow: ResolvedFlow) {
        self.start_shared(Arc::new(flow));
    }

    /// Starts `flow` now (a configuration already shared: a flow started again).
    fn start_shared(&mut self, flow: Arc<ResolvedFlow>) {
        let name = flow.name.clone();
        let telemetry = Arc::new(FlowTelemetry::with_unreachable_after(
            &name,
            flow.settings.unreachable_after,
        ));
        let plugins = FlowPlugins::for_flow(&flow);
        let hashes = flow
            .slots
            .components
            .iter()
            .map(|(path, (sha, roles))| {
                let stats = self.telemetry.plugins.entry(&path.display().to_string());
                stats.loaded(sha, roles);
                (path.clone(), sha.clone())
            })
            .collect();
        tracing::info!(flow = %name, source = ?flow.source, target = ?flow.target,
            topic_filter = %flow.slots.topic_filter, replication_policy = %flow.slots.replication_policy,
            "configured flow");
        let token = self.root.child_token();
        self.next_id += 1;
        let id = self.next_id;
        let run = supervisor::run(
            flow.clone(),
            telemetry.clone(),
            plugins.clone(),
            self.claims.clone(),
            token.clone(),
        );
        let inner = tokio::spawn(run);
        let (tx, exit_name) = (self.exit_tx.clone(), name.clone());
        let abort = inner.abort_handle();
        tokio::spawn(async move {
            let result = match inner.await {
                Ok(result) => result,
                Err(e) if e.is_cancelled() => Ok(()),
                Err(e) => Err(FlowError::Task {
                    flow: exit_name.clone(),
                    task: "flow",
                    message: e.to_string(),
                }),
            };
            let _ = tx.send(Exit {
                name: exit_name,
                id,
                result,
            });
        });
        self.telemetry.add_flow(telemetry.clone());
        self.running.insert(
            name,
            Running {
                flow,
                telemetry,
                plugins,
                hashes,
                id,
                token,
                abort,
                stopping: None,
            },
        );
    }

    /// The configuration of the flow `name` as it will run: the one waiting to start once
    /// its old version stopped, else the running one.
    pub fn configured(&self, name: &str) -> Option<Arc<ResolvedFlow>> {
        self.pending
            .get(name)
            .or_else(|| self.running.get(name).map(|r| &r.flow))
            .cloned()
    }

    /// Asks the flow `name` to stop gracefully (a version of it waiting to start never
    /// starts).
    pub fn stop(&mut self, name: &str) {
        self.pending.remove(name);
        if let Some(r) = self.running.get_mut(name)
            && r.stopping.is_none()
        {
            tracing::info!(flow = %name, "stopping flow");
            r.token.cancel();
            let s = &r.flow.settings;
            let leaving = s.session_timeout * s.replication_tasks.saturating_sub(1);
            r.stopping = Some(Instant::now() + s.shutdown_timeout + leaving + STOP_GRACE);
        }
    }

    /// Stops the flow of `flow`'s name and starts `flow` once it has stopped (at once if
    /// none runs).
    pub fn restart(&mut self, flow: ResolvedFlow) {
        let name = flow.name.clone();
        if self.running.contains_key(&name) {
            self.stop(&name);
            self.pending.insert(name, Arc::new(flow));
        } else {
            self.start(flow);
        }
    }

    /// Gives the running flow of `flow`'s name the record-transform chain and
    /// `on_transform_error` of `flow` in place (a reload that changed only them): its tasks
    /// apply them from their next batch. A flow waiting to restart takes `flow` when it
    /// starts, and its old version, still stopping, takes the chain at once too.
    pub fn change_chain(&mut self, flow: ResolvedFlow) {
        let name = flow.name.clone();
        let pending = self.pending.contains_key(&name);
        let Some(r) = self.running.get_mut(&name) else {
            self.pending.remove(&name);
            self.start(flow);
            return;
        };
        // The chain's component files run in their reloaded versions now; files no role
        // uses any more are forgotten (the others keep the versions that run).
        let links: std::collections::BTreeSet<&PathBuf> = flow
            .slots
            .transforms
            .iter()
            .filter_map(|(source, _)| match source {
                crate::plugin::PluginSource::File(path) => Some(path),
                _ => None,
            })
            .collect();
        for (path, (sha, roles)) in &flow.slots.components {
            if links.contains(path) || !r.hashes.contains_key(path) {
                let stats = self.telemetry.plugins.entry(&path.display().to_string());
                stats.loaded(sha, roles);
                r.hashes.insert(path.clone(), sha.clone());
            }
        }
        if !pending {
            // (The old version, still stopping, keeps running its files.)
            r.hashes
                .retain(|path, _| flow.slots.components.contains_key(path));
        }
        let names = supervisor::chain_names(&flow.roles.record_transforms);
        r.plugins.replace_chain(
            flow.roles.record_transforms.clone(),
            flow.settings.on_transform_error,
        );
        r.telemetry.transforms_configured(&names);
        tracing::info!(flow = %name, transforms = ?names, on_transform_error = ?flow.settings.on_transform_error,
            "record transforms changed in place: every task applies them from its next batch");
        if pending {
            self.pending.insert(name, Arc::new(flow));
        } else {
            r.flow = Arc::new(flow);
        }
    }

    /// Whether the flow `name` stops and nothing takes its place (a removed flow).
    pub fn stopping_for_good(&self, name: &str) -> bool {
        self.running.get(name).is_some_and(|r| r.stopping.is_some())
            && !self.pending.contains_key(name)
    }

    /// The component files of flows started in place of an old version since the last
    /// call (their plugin files may be newer than their plan).
    pub fn take_started_files(&mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.started_files)
    }

    /// Starts `next`, queued in place of a flow that stopped.
    fn start_queued(&mut self, next: Arc<ResolvedFlow>) {
        self.started_files
            .extend(next.slots.components.keys().cloned());
        self.start_shared(next);
    }

    /// Whether a flow of `name` waits for its old version to stop before it starts.
    pub fn is_pending(&self, name: &str) -> bool {
        self.pending.contains_key(name)
    }

    /// Records that content `sha256` of `path` now runs in the flow `name`.
    pub fn reloaded(&mut self, name: &str, path: PathBuf, sha256: String) {
        if let Some(r) = self.running.get_mut(name) {
            r.hashes.insert(path, sha256);
        }
    }

    /// The next flow to end, or `None` if none is running.
    pub async fn next_exit(&mut self) -> Exit {
        // The sender half is ours too: this never ends by closing.
        self.exits
            .recv()
            .await
            .expect("the flows' exit channel is held open")
    }

    /// Handles a flow's end; returns its error if it failed while not asked to stop.
    pub fn ended(&mut self, exit: Exit) -> Option<FlowError> {
        let Some(r) = self.running.get(&exit.name).filter(|r| r.id == exit.id) else {
            return None; // abandoned after its deadline: already replaced
        };
        let asked = r.stopping.is_some() || self.root.is_cancelled();
        // What it ran (plugin files swapped in since its start included), to start it again.
        let again = (r.flow.clone(), r.plugins.roles(), r.hashes.clone());
        self.running.remove(&exit.name);
        self.telemetry.remove_flow(&exit.name);
        if let Some(next) = self.pending.remove(&exit.name) {
            self.start_queued(next);
        }
        match exit.result {
            Err(e @ FlowError::ModeConflict { .. }) if !asked => {
                // Instances of the other delivery mode started at the same moment: this
                // one starts again, and waits until they stopped (the other flows go on).
                tracing::error!(flow = %exit.name, error = %e, "flow stopped; starting it again");
                if !self.running.contains_key(&exit.name) {
                    let (flow, roles, hashes) = again;
                    self.start_shared(flow);
                    if let Some(r) = self.running.get_mut(&exit.name) {
                        r.plugins.replace((*roles).clone());
                        r.hashes = hashes;
                    }
                }
                None
            }
            Err(e) if !asked => Some(e),
            Err(e) => {
                tracing::warn!(flow = %exit.name, error = %e, "flow failed while stopping");
                None
            }
            Ok(()) => {
                tracing::info!(flow = %exit.name, "flow stopped");
                None
            }
        }
    }

    /// Abandons flows that did not stop by their deadline (and starts their replacements);
    /// their names.
    pub fn abandon_overdue(&mut self) -> Vec<String> {
        let now = Instant::now();
        let overdue: Vec<String> = self
            .running
            .iter()
            .filter(|(_, r)| r.stopping.is_some_and(|d| d <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for name in &overdue {
            if let Some(r) = self.running.remove(name) {
                tracing::error!(flow = %name, "the flow did not stop in time; abandoning it");
                r.abort.abort();
                self.telemetry.remove_flow(name);
            }
            if let Some(next) = self.pending.remove(name) {
                self.start_queued(next);
            }
        }
        overdue
    }

    /// The latest stop deadline of the flows asked to stop.
    pub fn latest_deadline(&self) -> Option<Instant> {
        self.running.values().filter_map(|r| r.stopping).max()
    }

    /// Asks every flow to stop and drops the pending ones.
    pub fn stop_all(&mut self) {
        self.pending.clear();
        let names: Vec<String> = self.running.keys().cloned().collect();
        for name in names {
            self.stop(&name);
        }
    }
}
