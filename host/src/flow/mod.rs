//! One source -> target flow: each loop a file, its decisions pure functions beside it.
//!
//! - [`discovery`]: which topics are mirrored under which names, and the plan of target
//!   changes from both clusters' snapshots (pure).
//! - [`offset_syncs`]: when an OffsetSync is emitted (pure).
//! - [`replicate`]: the data plane: records, progress, offset syncs.
//! - [`heartbeat`]: heartbeat records.
//! - [`supervisor`]: runs a flow: internal topics, the discovery loop, the replicator
//!   (restarted from stored progress after a failure) and heartbeats.

pub mod discovery;
pub mod heartbeat;
pub mod offset_syncs;
pub mod replicate;
pub mod supervisor;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    /// Errors seen.
    pub errors: AtomicU64,
    last_logged: Mutex<HashMap<String, Instant>>,
}

/// The same error is logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(30);

impl FlowStats {
    /// Stats for `flow`.
    pub fn new(flow: &str) -> Self {
        FlowStats { flow: flow.to_string(), ..FlowStats::default() }
    }

    /// Counts an error and logs it, once per `LOG_EVERY` for the same operation and message.
    pub fn note_error(&self, operation: &str, message: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let key = format!("{operation}: {message}");
        let mut last = self.last_logged.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if last.get(&key).is_none_or(|t| now.duration_since(*t) >= LOG_EVERY) {
            last.insert(key, now);
            tracing::warn!(flow = %self.flow, operation, error = message, "flow error (repeats are suppressed for 30s)");
        }
    }

    /// Whether this exact event was already reported; remembers it.
    pub fn first_time(&self, event: &str) -> bool {
        let mut last = self.last_logged.lock().unwrap_or_else(|e| e.into_inner());
        last.insert(format!("once: {event}"), Instant::now()).is_none()
    }
}
