//! Per-plugin telemetry: calls, errors by kind, call durations, reloads, and what is loaded
//! (content hash, roles, load time), plus the last error and the guest's last output. One
//! [`PluginRegistry`] per daemon, shared by every configuration it loads, so counts survive
//! a hot reload and a config reload; `/status` and `/metrics` render it.

use crate::histogram::Histogram;
use crate::policy::{PluginError, Role};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How a plugin call failed, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The guest trapped (a panic, `unreachable`, out of bounds, ...).
    Trap,
    /// The call ran past its deadline.
    Timeout,
    /// The guest went over its memory cap.
    Memory,
    /// The guest returned an error or an answer the host refused.
    Error,
}

impl ErrorKind {
    /// Every kind, in the order of the counters.
    pub const ALL: [ErrorKind; 4] = [
        ErrorKind::Trap,
        ErrorKind::Timeout,
        ErrorKind::Memory,
        ErrorKind::Error,
    ];

    /// The label in `/metrics` and `/status`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Trap => "trap",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Memory => "memory",
            ErrorKind::Error => "error",
        }
    }

    /// The kind of `e`; `None` for errors that are not the guest's (cancelled calls).
    pub fn of(e: &PluginError) -> Option<ErrorKind> {
        match e {
            PluginError::Trap { .. } => Some(ErrorKind::Trap),
            PluginError::Timeout { .. } => Some(ErrorKind::Timeout),
            PluginError::MemoryLimit { .. } => Some(ErrorKind::Memory),
            PluginError::Cancelled { .. } => None,
            _ => Some(ErrorKind::Error),
        }
    }
}

/// What is loaded under a plugin's name.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Loaded {
    /// SHA-256 of the component file, hex.
    pub sha256: String,
    /// The roles it exports.
    pub roles: Vec<String>,
    /// When it was loaded, in ms since the epoch.
    pub loaded_at_ms: u64,
}

#[derive(Debug, Default)]
struct State {
    loaded: Option<Loaded>,
    last_error: Option<String>,
    last_rejection: Option<String>,
    guest_output: Option<String>,
}

/// One plugin's counters.
#[derive(Debug)]
pub struct PluginStats {
    /// The plugin's name (its file path).
    pub name: String,
    calls: AtomicU64,
    errors: [AtomicU64; ErrorKind::ALL.len()],
    /// Call durations.
    pub durations: Histogram,
    reloads_accepted: AtomicU64,
    reloads_rejected: AtomicU64,
    state: Mutex<State>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl PluginStats {
    fn new(name: &str) -> Self {
        PluginStats {
            name: name.to_string(),
            calls: AtomicU64::new(0),
            errors: Default::default(),
            durations: Histogram::calls(),
            reloads_accepted: AtomicU64::new(0),
            reloads_rejected: AtomicU64::new(0),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records one call that took `took`, failed as `error` if it did; `output` is what the
    /// guest wrote to stdout/stderr during it.
    pub fn call(&self, took: Duration, error: Option<&PluginError>, output: Option<&str>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.durations.observe(took);
        let Some(e) = error else { return };
        let Some(kind) = ErrorKind::of(e) else { return };
        self.errors[kind as usize].fetch_add(1, Ordering::Relaxed);
        let mut state = self.state();
        state.last_error = Some(e.to_string());
        if let Some(out) = output.filter(|o| !o.is_empty()) {
            state.guest_output = Some(out.to_string());
        }
    }

    /// Calls so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Failed calls of `kind` so far.
    pub fn errors(&self, kind: ErrorKind) -> u64 {
        self.errors[kind as usize].load(Ordering::Relaxed)
    }

    /// Marks the component with content hash `sha256` and `roles` as the loaded one.
    pub fn loaded(&self, sha256: &str, roles: &[Role]) {
        self.state().loaded = Some(Loaded {
            sha256: sha256.to_string(),
            roles: roles.iter().map(|r| r.wit_name().to_string()).collect(),
            loaded_at_ms: now_ms(),
        });
    }

    /// What is loaded, if anything.
    pub fn current(&self) -> Option<Loaded> {
        self.state().loaded.clone()
    }

    /// Counts a reload that replaced the running version.
    pub fn reload_accepted(&self) {
        self.reloads_accepted.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a reload that was refused, and why.
    pub fn reload_rejected(&self, why: &str) {
        self.reloads_rejected.fetch_add(1, Ordering::Relaxed);
        self.state().last_rejection = Some(why.to_string());
    }

    /// (accepted, rejected) reloads so far.
    pub fn reloads(&self) -> (u64, u64) {
        (
            self.reloads_accepted.load(Ordering::Relaxed),
            self.reloads_rejected.load(Ordering::Relaxed),
        )
    }

    /// `/status`'s view of this plugin.
    pub fn to_json(&self) -> serde_json::Value {
        let state = self.state();
        let errors: serde_json::Map<String, serde_json::Value> = ErrorKind::ALL
            .iter()
            .map(|k| (k.name().to_string(), self.errors(*k).into()))
            .collect();
        let (accepted, rejected) = self.reloads();
        let (sum, count, _) = self.durations.snapshot();
        serde_json::json!({
            "name": self.name,
            "loaded": state.loaded,
            "calls": self.calls(),
            "errors": errors,
            "mean_call_us": if count == 0 { 0.0 } else { sum * 1e6 / count as f64 },
            "reloads": { "accepted": accepted, "rejected": rejected },
            "last_error": state.last_error,
            "last_rejection": state.last_rejection,
            "guest_output": state.guest_output,
        })
    }
}

/// Every plugin's stats, by name.
#[derive(Debug, Default)]
pub struct PluginRegistry {
    plugins: Mutex<BTreeMap<String, Arc<PluginStats>>>,
}

impl PluginRegistry {
    /// The stats of plugin `name`, created empty on first use.
    pub fn entry(&self, name: &str) -> Arc<PluginStats> {
        let mut plugins = self.plugins.lock().unwrap_or_else(PoisonError::into_inner);
        plugins
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(PluginStats::new(name)))
            .clone()
    }

    /// Every plugin's stats, by name.
    pub fn all(&self) -> Vec<Arc<PluginStats>> {
        let plugins = self.plugins.lock().unwrap_or_else(PoisonError::into_inner);
        plugins.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_errors_are_counted_by_kind() {
        let r = PluginRegistry::default();
        let s = r.entry("p.wasm");
        s.call(Duration::from_micros(5), None, None);
        let trap = PluginError::Trap {
            plugin: "p.wasm".into(),
            function: "f",
            kind: crate::policy::TrapKind::Unreachable,
            message: "unreachable".into(),
            output: "panicked at boom".into(),
        };
        s.call(
            Duration::from_micros(9),
            Some(&trap),
            Some("panicked at boom"),
        );
        let cancelled = PluginError::Cancelled {
            plugin: "p.wasm".into(),
            function: "f",
        };
        s.call(Duration::from_micros(9), Some(&cancelled), None);
        assert_eq!(s.calls(), 3);
        assert_eq!(s.errors(ErrorKind::Trap), 1);
        assert_eq!(
            s.errors(ErrorKind::Error),
            0,
            "a cancelled call is no error"
        );
        assert!(Arc::ptr_eq(&s, &r.entry("p.wasm")));
        s.loaded("ab12", &[Role::TopicFilter]);
        s.reload_rejected("it traps");
        let json = s.to_json();
        assert_eq!(json["errors"]["trap"], 1, "{json}");
        assert_eq!(json["loaded"]["sha256"], "ab12", "{json}");
        assert_eq!(json["loaded"]["roles"][0], "topic-filter", "{json}");
        assert_eq!(json["reloads"]["rejected"], 1, "{json}");
        assert_eq!(json["guest_output"], "panicked at boom", "{json}");
    }
}
