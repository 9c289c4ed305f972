//! The daemon: runs every flow of a configuration until the shutdown future resolves, then
//! stops them gracefully (stop fetching, finish in-flight produces, store progress). A
//! flow that fails stops the daemon with an error: it exits non-zero, never silently.
//!
//! While it runs it takes changes without a restart:
//! - [`watch`] + [`plugins`]: the plugin directory is watched; a changed component replaces
//!   the running one only after every check passes.
//! - [`reload`]: a config reload (SIGHUP) starts, stops and restarts exactly the flows that
//!   changed.
//!
//! [`flows`] keeps the running set.

mod flows;
mod plugins;
mod reload;
mod watch;

pub use flows::STOP_GRACE;
pub use watch::DEBOUNCE;

use crate::config::LoadedConfig;
use crate::flow::FlowError;
use crate::plugin::PluginHost;
use crate::plugin::cache::CacheChoice;
use crate::telemetry::Telemetry;
use flows::Flows;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A flow could not start, or failed.
    #[error(transparent)]
    Flow(#[from] FlowError),
    /// A flow's task panicked outside the flow's own watch.
    #[error("flow task panicked: {0}")]
    Panic(String),
    /// The flows did not stop within the stop deadline.
    #[error("the flows did not stop within {0:?}; exiting without waiting further")]
    StopTimeout(Duration),
    /// The status endpoint could not listen.
    #[error("status endpoint: {0}")]
    Status(String),
}

/// Where a config reload reads from.
pub struct Reloads {
    /// The configuration file.
    pub path: PathBuf,
    /// How compiled plugins are cached.
    pub cache: CacheChoice,
    /// One message per reload request (SIGHUP).
    pub requests: mpsc::UnboundedReceiver<()>,
}

/// What finished on the blocking pool.
enum Done {
    Rescan(Vec<plugins::Accepted>, plugins::Seen),
    Reload(Result<reload::Plan, String>),
}

/// A reload that restarts flows, until they run their new configuration.
struct Restarting {
    summary: String,
    flows: Vec<String>,
    /// Old versions abandoned after their stop deadline: their tasks may still mirror.
    abandoned: Vec<String>,
}

/// The daemon's state between events.
struct Daemon {
    telemetry: Arc<Telemetry>,
    flows: Flows,
    host: PluginHost,
    status_listen: Option<String>,
    watch: Option<watch::DirWatch>,
    changes_tx: mpsc::UnboundedSender<Vec<PathBuf>>,
    /// Changed paths not yet rescanned.
    changed: Vec<PathBuf>,
    /// `Some` while no rescan runs.
    seen: Option<plugins::Seen>,
    reloading: bool,
    reload_again: bool,
    /// An applied reload that restarts flows: its summary and the flows it restarts. It is
    /// reported once each of them stopped and started again.
    restarting: Option<Restarting>,
    /// A reload whose plan met a plugin rescan (running when the plan was ready, or ended
    /// while it was made): it is planned again once the rescan ended, from the files and
    /// flows as they are then (a rescan copies the roles in force and installs the copy,
    /// and a plan carries plugin files read before it: either would undo the other).
    reload_after_rescan: bool,
    /// Rescans started so far (a reload notes the count when it starts planning).
    rescans: u64,
    /// The rescan count when the running reload started planning.
    reload_saw: u64,
    done_tx: mpsc::UnboundedSender<Done>,
}

/// Runs `config`'s flows until `shutdown` resolves, hot-reloading its plugin directory and,
/// with `reloads`, the configuration file. A flow that cannot start or fails stops all of
/// them and is returned as the error.
pub async fn run(
    config: LoadedConfig,
    reloads: Option<Reloads>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    let telemetry = Arc::new(Telemetry::new(config.plugin_host.registry().clone()));
    // Kept alive until the flows stopped.
    let _status = match &config.status_listen {
        Some(listen) => {
            let server = crate::status::serve(listen, telemetry.clone())
                .await
                .map_err(DaemonError::Status)?;
            tracing::info!(addr = %server.addr, "status endpoint: /health, /ready, /status, /metrics");
            Some(server)
        }
        None => None,
    };
    let root = CancellationToken::new();
    let (changes_tx, mut changes) = mpsc::unbounded_channel();
    let (done_tx, mut done) = mpsc::unbounded_channel();
    let mut d = Daemon {
        flows: Flows::new(root.clone(), telemetry.clone()),
        telemetry,
        host: config.plugin_host,
        status_listen: config.status_listen,
        watch: None,
        changes_tx,
        changed: Vec::new(),
        seen: Some(plugins::Seen::default()),
        reloading: false,
        reload_again: false,
        restarting: None,
        reload_after_rescan: false,
        rescans: 0,
        reload_saw: 0,
        done_tx,
    };
    d.watch_dir(&config.plugins_dir);
    for flow in config.flows {
        d.flows.start(flow);
    }
    let (path, cache, mut requests) = match reloads {
        Some(r) => (Some(r.path), r.cache, Some(r.requests)),
        None => (None, CacheChoice::FromConfig, None),
    };

    tokio::pin!(shutdown);
    let mut failure = None;
    let mut stopping = false;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        if stopping && d.flows.is_empty() {
            break;
        }
        tokio::select! {
            _ = &mut shutdown, if !stopping => {
                tracing::info!("stopping: finishing in-flight records and storing progress");
                stopping = true;
                // Flows waiting to restart never start: the reload is not reported done.
                d.restarting = None;
                d.flows.stop_all();
                root.cancel();
            }
            exit = d.flows.next_exit() => {
                if let Some(e) = d.flows.ended(exit) {
                    tracing::error!(error = %e, "flow failed; stopping every flow");
                    failure.get_or_insert(DaemonError::Flow(e));
                    stopping = true;
                    d.flows.stop_all();
                    root.cancel();
                }
                d.restarted();
                d.rescan_restarted();
            }
            _ = tick.tick() => {
                if stopping {
                    if let Some(deadline) = d.flows.latest_deadline()
                        && std::time::Instant::now() >= deadline {
                            let grace = STOP_GRACE;
                            tracing::error!(?grace, "the flows did not stop in time");
                            return Err(failure.unwrap_or(DaemonError::StopTimeout(grace)));
                        }
                } else {
                    let abandoned = d.flows.abandon_overdue();
                    if let Some(r) = &mut d.restarting {
                        r.abandoned
                            .extend(abandoned.into_iter().filter(|n| r.flows.contains(n)));
                    }
                    d.restarted();
                    d.rescan_restarted();
                }
            }
            Some(paths) = changes.recv(), if !stopping => {
                d.changed.extend(paths);
                d.rescan();
            }
            Some(()) = async { requests.as_mut()?.recv().await }, if !stopping => {
                if let Some(path) = &path {
                    d.reload(path, &cache);
                }
            }
            Some(finished) = done.recv() => {
                if !stopping {
                    d.finished(finished, path.as_deref(), &cache);
                }
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

impl Daemon {
    /// Watches `dir` (replacing the watch of another directory).
    fn watch_dir(&mut self, dir: &Path) {
        if self.watch.as_ref().is_some_and(|w| w.dir == dir) {
            return;
        }
        self.watch = None;
        if !dir.is_dir() {
            tracing::info!(dir = %dir.display(), "the plugin directory does not exist; not watched");
            return;
        }
        match watch::watch(dir, self.changes_tx.clone()) {
            Ok(w) => {
                tracing::info!(dir = %dir.display(), "watching the plugin directory for changes");
                self.watch = Some(w);
            }
            Err(e) => tracing::warn!(error = %e, "plugin hot reload is off"),
        }
    }

    /// Starts a rescan of the plugin files unless one runs (it is then run again after).
    fn rescan(&mut self) {
        let Some(mut seen) = self.seen.take() else {
            return; // running: the paths wait for the next one
        };
        self.rescans += 1;
        let changed = std::mem::take(&mut self.changed);
        let targets: Vec<plugins::Target> = self
            .flows
            .running()
            .iter()
            .map(|(name, r)| plugins::Target {
                name: name.clone(),
                flow: r.flow.clone(),
                plugins: r.plugins.clone(),
                hashes: r.hashes.clone(),
                telemetry: r.telemetry.clone(),
            })
            .collect();
        let host = self.host.clone();
        let done = self.done_tx.clone();
        tokio::task::spawn_blocking(move || {
            let accepted = plugins::rescan(&host, &targets, &changed, &mut seen);
            let _ = done.send(Done::Rescan(accepted, seen));
        });
    }

    /// Starts a config reload unless one runs (then one more runs after it).
    fn reload(&mut self, path: &Path, cache: &CacheChoice) {
        if self.reloading {
            self.reload_again = true;
            return;
        }
        self.reloading = true;
        self.reload_saw = self.rescans;
        tracing::info!(config = %path.display(), "reloading the configuration");
        let current: BTreeMap<String, reload::Current> = self
            .flows
            .running()
            .iter()
            // A removed flow still stopping is gone: listed again, it starts anew.
            .filter(|(name, _)| !self.flows.stopping_for_good(name))
            .map(|(name, r)| {
                // A flow waiting to restart is compared as it will run.
                let configured = self.flows.configured(name);
                let (flow, roles) = match configured.filter(|f| !Arc::ptr_eq(f, &r.flow)) {
                    Some(next) => {
                        let roles = Arc::new(next.roles.clone());
                        (next, roles)
                    }
                    None => (r.flow.clone(), r.plugins.roles()),
                };
                (
                    name.clone(),
                    reload::Current {
                        flow,
                        roles,
                        names: r.plugins.names().clone(),
                        mirrored: r.telemetry.status().mirrored,
                    },
                )
            })
            .collect();
        let (path, cache) = (path.to_path_buf(), cache.clone());
        let registry = self.telemetry.plugins.clone();
        let limits = self.host.limits();
        let done = self.done_tx.clone();
        tokio::task::spawn_blocking(move || {
            let plan = reload::prepare(&path, &cache, &registry, limits, &current);
            let _ = done.send(Done::Reload(plan));
        });
    }

    fn finished(&mut self, done: Done, path: Option<&Path>, cache: &CacheChoice) {
        match done {
            Done::Rescan(accepted, seen) => {
                for a in accepted {
                    self.flows.reloaded(&a.flow, a.path, a.sha256);
                }
                self.seen = Some(seen);
                if std::mem::take(&mut self.reload_after_rescan)
                    && let Some(path) = path
                {
                    self.reload(path, cache);
                }
                if !self.changed.is_empty() {
                    self.rescan();
                }
            }
            Done::Reload(plan) => {
                self.reloading = false;
                match plan {
                    // Never beside a rescan (see `reload_after_rescan`).
                    Ok(_) if self.seen.is_none() || self.rescans != self.reload_saw => {
                        tracing::info!(
                            "a plugin file was checked meanwhile: the configuration is reloaded again once that check ended"
                        );
                        if self.seen.is_none() {
                            self.reload_after_rescan = true;
                        } else {
                            self.reload_again = true;
                        }
                    }
                    Ok(plan) => self.apply(plan),
                    Err(why) => {
                        tracing::error!(reason = %why, "configuration reload rejected; the running configuration goes on");
                        self.telemetry.config_reloaded(false, &why);
                    }
                }
                if std::mem::take(&mut self.reload_again)
                    && let Some(path) = path
                {
                    self.reload(path, cache);
                }
            }
        }
    }

    fn apply(&mut self, plan: reload::Plan) {
        let summary = plan.summary();
        if plan.status_listen != self.status_listen {
            tracing::warn!("[status] listen changed: it takes effect when kmirror restarts");
        }
        self.host = plan.plugin_host;
        self.watch_dir(&plan.plugins_dir);
        for name in &plan.stop {
            self.flows.stop(name);
        }
        for flow in plan.live {
            self.flows.change_chain(flow);
        }
        let restarting: Vec<String> = plan.restart.iter().map(|f| f.name.clone()).collect();
        for flow in plan.restart {
            self.flows.restart(flow);
        }
        for flow in plan.start {
            // A removed flow still stopping and listed again: it starts once stopped.
            self.flows.restart(flow);
        }
        if restarting.is_empty() {
            tracing::info!(changes = %summary, "configuration reloaded");
            self.telemetry.config_reloaded(true, &summary);
        } else {
            // The old flows mirror with the old configuration until they stopped: the
            // reload is reported done only then.
            tracing::info!(changes = %summary, "configuration reload accepted: restarting {} once the old flow(s) stopped", restarting.join(", "));
            match &mut self.restarting {
                // An earlier reload still restarting: both are reported together.
                Some(earlier) => {
                    earlier.summary.push_str("; then ");
                    earlier.summary.push_str(&summary);
                    earlier.flows.extend(restarting);
                }
                None => {
                    self.restarting = Some(Restarting {
                        summary,
                        flows: restarting,
                        abandoned: Vec::new(),
                    })
                }
            }
            self.restarted();
        }
    }

    /// Checks the component files of flows that just started their new version (planned
    /// before a rescan may have swapped newer files into the old one): a newer file is
    /// swapped in as by any rescan.
    fn rescan_restarted(&mut self) {
        let paths = self.flows.take_started_files();
        if !paths.is_empty() {
            self.changed.extend(paths);
            self.rescan();
        }
    }

    /// Reports the reload that restarts flows once every one of them runs its new
    /// configuration.
    fn restarted(&mut self) {
        let Some(r) = &self.restarting else {
            return;
        };
        if r.flows.iter().any(|n| self.flows.is_pending(n)) {
            return;
        }
        if r.abandoned.is_empty() {
            tracing::info!(changes = %r.summary, "configuration reloaded");
            self.telemetry.config_reloaded(true, &r.summary);
        } else {
            let message = format!(
                "{}; the old version of {} did not stop in time and was abandoned: its tasks may mirror with the old configuration until they end",
                r.summary,
                r.abandoned.join(", ")
            );
            tracing::warn!(changes = %message, "configuration reloaded");
            self.telemetry.config_reloaded(true, &message);
        }
        self.restarting = None;
    }
}
