//! The daemon's telemetry, as `/status` and `/metrics` show it: the running flows' telemetry
//! (the set changes when a config reload adds or removes flows), every plugin's stats, and
//! the outcome of config reloads.

use crate::flow::telemetry::FlowTelemetry;
use crate::plugin::stats::PluginRegistry;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

/// The last config reload's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigReload {
    /// When it was tried, in ms since the epoch.
    pub at_ms: i64,
    /// Whether it was applied.
    pub accepted: bool,
    /// What it did, or why it was refused.
    pub message: String,
}

/// Everything the status endpoint renders.
#[derive(Default)]
pub struct Telemetry {
    flows: RwLock<Vec<Arc<FlowTelemetry>>>,
    /// Every plugin's stats.
    pub plugins: Arc<PluginRegistry>,
    reloads: [AtomicU64; 2],
    last_reload: Mutex<Option<ConfigReload>>,
}

impl Telemetry {
    /// Telemetry counting plugin calls in `plugins`.
    pub fn new(plugins: Arc<PluginRegistry>) -> Self {
        Telemetry {
            plugins,
            ..Telemetry::default()
        }
    }

    /// The running flows' telemetry.
    pub fn flows(&self) -> Vec<Arc<FlowTelemetry>> {
        self.flows
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Shows `flow` (replacing a flow of the same name).
    pub fn add_flow(&self, flow: Arc<FlowTelemetry>) {
        let mut flows = self.flows.write().unwrap_or_else(PoisonError::into_inner);
        flows.retain(|f| f.flow != flow.flow);
        flows.push(flow);
        flows.sort_by(|a, b| a.flow.cmp(&b.flow));
    }

    /// Stops showing the flow `name`.
    pub fn remove_flow(&self, name: &str) {
        let mut flows = self.flows.write().unwrap_or_else(PoisonError::into_inner);
        flows.retain(|f| f.flow != name);
    }

    /// Records a config reload's outcome.
    pub fn config_reloaded(&self, accepted: bool, message: &str) {
        self.reloads[usize::from(!accepted)].fetch_add(1, Ordering::Relaxed);
        let at_ms = crate::flow::telemetry::now_ms();
        *self
            .last_reload
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(ConfigReload {
            at_ms,
            accepted,
            message: message.to_string(),
        });
    }

    /// (accepted, rejected) config reloads so far.
    pub fn config_reloads(&self) -> (u64, u64) {
        (
            self.reloads[0].load(Ordering::Relaxed),
            self.reloads[1].load(Ordering::Relaxed),
        )
    }

    /// `/status`'s JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let flows: Vec<serde_json::Value> = self.flows().iter().map(|f| f.to_json()).collect();
        let plugins: Vec<serde_json::Value> =
            self.plugins.all().iter().map(|p| p.to_json()).collect();
        let (accepted, rejected) = self.config_reloads();
        let last = self
            .last_reload
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        serde_json::json!({
            "flows": flows,
            "plugins": plugins,
            "config_reloads": { "accepted": accepted, "rejected": rejected, "last": last },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_come_and_go_and_reloads_are_counted() {
        let t = Telemetry::default();
        t.add_flow(Arc::new(FlowTelemetry::new("b->a")));
        t.add_flow(Arc::new(FlowTelemetry::new("a->b")));
        t.add_flow(Arc::new(FlowTelemetry::new("a->b")));
        let names: Vec<String> = t.flows().iter().map(|f| f.flow.clone()).collect();
        assert_eq!(names, ["a->b", "b->a"]);
        t.remove_flow("a->b");
        assert_eq!(t.flows().len(), 1);
        t.config_reloaded(false, "flows[0].source: unknown cluster");
        t.config_reloaded(true, "started b->c");
        assert_eq!(t.config_reloads(), (1, 1));
        let json = t.to_json();
        assert_eq!(json["config_reloads"]["last"]["message"], "started b->c");
        assert_eq!(json["flows"][0]["flow"], "b->a", "{json}");
    }
}
