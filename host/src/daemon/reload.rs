//! Config reload (SIGHUP): the file is loaded and validated whole, as at start (plugins
//! compiled, role-checked and configured); then compared with the running flows by name.
//! Added flows start, removed flows stop gracefully, changed flows restart (a changed
//! replication policy is reviewed like a hot reload: renaming mirrored topics needs
//! `allow_policy_change`), unchanged flows are not touched. Any problem rejects the whole
//! reload and the running configuration goes on.

use crate::config::{LoadedConfig, ResolvedFlow};
use crate::flow::Routes;
use crate::flow::plugins::FlowNames;
use crate::flow::reload::review;
use crate::plugin::cache::CacheChoice;
use crate::plugin::stats::PluginRegistry;
use crate::plugin::{Limits, PluginHost};
use crate::policy::FlowRoles;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// A running flow, as a config reload compares it.
pub struct Current {
    /// Its configuration.
    pub flow: Arc<ResolvedFlow>,
    /// The roles it runs now (perhaps hot-reloaded since it started).
    pub roles: Arc<FlowRoles>,
    /// Its aliases.
    pub names: FlowNames,
    /// What it mirrors now.
    pub mirrored: Routes,
}

/// What a valid reload changes.
pub struct Plan {
    /// The new configuration's plugin runtime and directory, and status address.
    pub plugin_host: PluginHost,
    /// The plugin directory.
    pub plugins_dir: std::path::PathBuf,
    /// `[status] listen`.
    pub status_listen: Option<String>,
    /// Flows to start.
    pub start: Vec<ResolvedFlow>,
    /// Flows to restart with a new configuration.
    pub restart: Vec<ResolvedFlow>,
    /// Flows to stop, by name.
    pub stop: Vec<String>,
    /// Flows left as they run.
    pub unchanged: Vec<String>,
}

impl Plan {
    /// One line for the log and `/status`.
    pub fn summary(&self) -> String {
        let names = |flows: &[ResolvedFlow]| {
            flows
                .iter()
                .map(|f| f.name.clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        for (what, list) in [
            ("started", names(&self.start)),
            ("restarted", names(&self.restart)),
            ("stopped", self.stop.join(", ")),
            ("unchanged", self.unchanged.join(", ")),
        ] {
            if !list.is_empty() {
                parts.push(format!("{what}: {list}"));
            }
        }
        if parts.is_empty() {
            "no flows".to_string()
        } else {
            parts.join("; ")
        }
    }
}

/// Whether the running `old` flow must restart to become `new`.
pub fn changed(
    old: &ResolvedFlow,
    old_limits: Limits,
    new: &ResolvedFlow,
    new_limits: Limits,
) -> bool {
    old.source != new.source
        || old.target != new.target
        || old.settings != new.settings
        || !old.slots.same_slots(&new.slots)
        || (new.slots.uses_components() && old_limits != new_limits)
}

/// Loads `path` and plans the change from `current`; `Err` with every reason to refuse.
pub fn prepare(
    path: &Path,
    cache: &CacheChoice,
    registry: &Arc<PluginRegistry>,
    old_limits: Limits,
    current: &BTreeMap<String, Current>,
) -> Result<Plan, String> {
    let loaded: LoadedConfig =
        crate::config::reload(path, cache, registry).map_err(|e| e.to_string())?;
    let new_limits = loaded.plugin_host.limits();
    let mut plan = Plan {
        plugin_host: loaded.plugin_host,
        plugins_dir: loaded.plugins_dir,
        status_listen: loaded.status_listen,
        start: Vec::new(),
        restart: Vec::new(),
        stop: Vec::new(),
        unchanged: Vec::new(),
    };
    let mut refusals = Vec::new();
    let mut seen = Vec::new();
    for flow in loaded.flows {
        seen.push(flow.name.clone());
        let Some(now) = current.get(&flow.name) else {
            plan.start.push(flow);
            continue;
        };
        if !changed(&now.flow, old_limits, &flow, new_limits) {
            plan.unchanged.push(flow.name.clone());
            continue;
        }
        let allow = flow.settings.allow_policy_change;
        if let Err(refusal) = review(&now.roles, &flow.roles, &now.names, &now.mirrored, allow) {
            refusals.push(format!(
                "flow {}: the new configuration: {refusal}",
                flow.name
            ));
            continue;
        }
        plan.restart.push(flow);
    }
    plan.stop = current
        .keys()
        .filter(|n| !seen.contains(n))
        .cloned()
        .collect();
    if refusals.is_empty() {
        Ok(plan)
    } else {
        Err(refusals.join("\n"))
    }
}
