//! Config reload (SIGHUP): the file is loaded and validated whole, as at start (plugins
//! compiled, role-checked and configured); then compared with the running flows by name.
//! Added flows start, removed flows stop gracefully, changed flows restart (a changed
//! replication policy is reviewed like a hot reload: renaming mirrored topics needs
//! `allow_policy_change`), unchanged flows are not touched. A flow whose record-transform
//! chain or `on_transform_error` is all that changed takes them in place, between two
//! batches of its running tasks, without a restart: a masking or dropping transform is a
//! privacy control, and a restart would leave records to the old chain while the old
//! flow's tasks leave. Any problem rejects the whole reload and the running configuration
//! goes on.

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
    /// Flows that take a new record-transform chain (and `on_transform_error`) in place.
    pub live: Vec<ResolvedFlow>,
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
            ("record transforms changed in place", names(&self.live)),
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

/// Whether the running `old` flow can become `new` in place: only its record-transform
/// chain and `on_transform_error` differ (and the plugin limits, where they matter, not).
pub fn chain_only(
    old: &ResolvedFlow,
    old_limits: Limits,
    new: &ResolvedFlow,
    new_limits: Limits,
) -> bool {
    let mut settings = new.settings.clone();
    settings.on_transform_error = old.settings.on_transform_error;
    old.source == new.source
        && old.target == new.target
        && old.settings == settings
        && old.slots.same_roles_but_transforms(&new.slots)
        && !(new.slots.uses_components() && old_limits != new_limits)
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
        live: Vec::new(),
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
        if chain_only(&now.flow, old_limits, &flow, new_limits) {
            plan.live.push(flow);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OnUnproducible;
    use crate::plugin::PluginSource;
    use crate::plugin::cache::CacheChoice;

    fn flow(extra: &str) -> ResolvedFlow {
        let text = format!(
            "[clusters.primary]\nbootstrap_servers = \"127.0.0.1:19092\"\n\n[clusters.backup]\nbootstrap_servers = \"127.0.0.1:29092\"\n\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\n{extra}\n"
        );
        let loaded = crate::config::load_str(
            &text,
            Path::new("/etc/kmirror/kmirror.toml"),
            &CacheChoice::Disabled,
        )
        .expect("a valid config");
        loaded.flows.into_iter().next().expect("one flow")
    }

    fn limits() -> Limits {
        Limits::default()
    }

    #[test]
    fn a_changed_chain_or_transform_error_policy_is_taken_in_place() {
        let old = flow("");
        let mut chained = flow("on_transform_error = \"skip\"");
        assert_eq!(chained.settings.on_transform_error, OnUnproducible::Skip);
        assert!(
            chain_only(&old, limits(), &chained, limits()),
            "the policy alone"
        );
        chained
            .slots
            .transforms
            .push((PluginSource::Builtin("keep-all".into()), Default::default()));
        assert!(changed(&old, limits(), &chained, limits()));
        assert!(
            chain_only(&old, limits(), &chained, limits()),
            "a link added too"
        );
        // And back: the chain removed.
        assert!(chain_only(&chained, limits(), &old, limits()));
    }

    #[test]
    fn any_other_change_restarts_the_flow() {
        let old = flow("");
        for other in [
            "offset_lag_max = 50",
            "on_unproducible = \"skip\"",
            "topic_filter = { builtin = \"default-topic-filter\", config = { topics = \"orders\" } }",
        ] {
            let new = flow(other);
            assert!(changed(&old, limits(), &new, limits()), "{other}");
            assert!(!chain_only(&old, limits(), &new, limits()), "{other}");
        }
        // A transform chain beside another change: restarted as a whole.
        let mut new = flow("offset_lag_max = 50");
        new.slots
            .transforms
            .push((PluginSource::Builtin("keep-all".into()), Default::default()));
        assert!(!chain_only(&old, limits(), &new, limits()));
    }
}
