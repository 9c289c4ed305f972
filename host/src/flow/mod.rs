//! One source -> target flow: each loop a file, its decisions pure functions beside it.
//!
//! - [`checkpoint`]: checkpoint naming, emission and group-offset-sync decisions (pure).
//! - [`checkpointer`]: the offset-sync reader, checkpoint emission and group offset sync.
//! - [`discovery`]: which topics are mirrored under which names, and the plan of target
//!   changes from both clusters' snapshots (pure).
//! - [`offset_syncs`]: when an OffsetSync is emitted (pure).
//! - [`sync_store`]: offset translation from the syncs, exact where kmirror wrote them.
//! - [`replicate`]: the data plane: records, progress, offset syncs.
//! - [`heartbeat`]: heartbeat records.
//! - [`supervisor`]: runs a flow: internal topics, the discovery loop, the replicator
//!   (restarted from stored progress after a failure) and heartbeats.

pub mod checkpoint;
pub mod checkpointer;
pub mod discovery;
pub mod heartbeat;
pub mod offset_syncs;
pub mod replicate;
pub mod supervisor;
pub mod sync_store;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Runs a plugin call off the async workers: a plugin may block up to its deadline, and a
/// WASI-importing plugin must not run on a runtime worker thread.
pub(crate) async fn plugin_call<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, crate::plugin::PluginError> + Send + 'static,
) -> Result<T, crate::plugin::PluginError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(crate::plugin::PluginError::Call {
            plugin: "(host)".into(),
            function: "spawn_blocking",
            message: e.to_string(),
        })
    })
}

/// Counters of one flow, and rate-limited error logging.
#[derive(Debug, Default)]
pub struct FlowStats {
    /// The flow's name.
    pub flow: String,
    /// Records acked by the target.
    pub records: AtomicU64,
    /// Key and value bytes produced.
    pub bytes: AtomicU64,
    /// Offset syncs written.
    pub syncs: AtomicU64,
    /// Heartbeats written.
    pub heartbeats: AtomicU64,
    /// Checkpoints emitted.
    pub checkpoints: AtomicU64,
    /// Group offset syncs committed to the target.
    pub group_syncs: AtomicU64,
    /// Group offset syncs skipped because the target group was active.
    pub active_groups_skipped: AtomicU64,
    /// Malformed records skipped on the offset-syncs topic.
    pub malformed_syncs: AtomicU64,
    /// Errors seen.
    pub errors: AtomicU64,
    /// What the last discovery pass found.
    pub status: Mutex<FlowStatus>,
    last_logged: Mutex<HashMap<String, Instant>>,
}

/// A flow's state as `/status` shows it.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FlowStatus {
    /// `starting`, `running` or `stopped`.
    pub state: &'static str,
    /// Source topic -> (target topic, replicated partitions).
    pub mirrored: std::collections::BTreeMap<String, (String, i32)>,
    /// Problems found by the last discovery pass (collisions, vanished or shrunk topics).
    pub problems: Vec<String>,
    /// The last error, if any.
    pub last_error: Option<String>,
}

/// The same error is logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(30);

impl FlowStats {
    /// Stats for `flow`.
    pub fn new(flow: &str) -> Self {
        let status = FlowStatus {
            state: "starting",
            ..FlowStatus::default()
        };
        FlowStats {
            flow: flow.to_string(),
            status: Mutex::new(status),
            ..FlowStats::default()
        }
    }

    /// Updates the status under its lock.
    pub fn update(&self, f: impl FnOnce(&mut FlowStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Counters and status as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let status = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        serde_json::json!({
            "flow": self.flow,
            "state": status.state,
            "mirrored": status.mirrored,
            "problems": status.problems,
            "last_error": status.last_error,
            "records": self.records.load(Ordering::Relaxed),
            "bytes": self.bytes.load(Ordering::Relaxed),
            "offset_syncs": self.syncs.load(Ordering::Relaxed),
            "heartbeats": self.heartbeats.load(Ordering::Relaxed),
            "checkpoints": self.checkpoints.load(Ordering::Relaxed),
            "group_offset_syncs": self.group_syncs.load(Ordering::Relaxed),
            "active_target_groups_skipped": self.active_groups_skipped.load(Ordering::Relaxed),
            "malformed_offset_syncs": self.malformed_syncs.load(Ordering::Relaxed),
            "errors": self.errors.load(Ordering::Relaxed),
        })
    }

    /// Counts an error and logs it, once per `LOG_EVERY` for the same operation and message.
    pub fn note_error(&self, operation: &str, message: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.update(|s| s.last_error = Some(format!("{operation}: {message}")));
        let key = format!("{operation}: {message}");
        let mut last = self.last_logged.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if last
            .get(&key)
            .is_none_or(|t| now.duration_since(*t) >= LOG_EVERY)
        {
            last.insert(key, now);
            tracing::warn!(flow = %self.flow, operation, error = message, "flow error (repeats are suppressed for 30s)");
        }
    }

    /// Whether this exact event was already reported; remembers it.
    pub fn first_time(&self, event: &str) -> bool {
        let mut last = self.last_logged.lock().unwrap_or_else(|e| e.into_inner());
        last.insert(format!("once: {event}"), Instant::now())
            .is_none()
    }
}
