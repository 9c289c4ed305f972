//! Heartbeats (MM2's `MirrorHeartbeatTask`): an MM2 Heartbeat record to the target's
//! heartbeats topic every interval. Mirrored downstream, they show that the path works
//! end to end.

use crate::flow::telemetry::{Counter, FlowTelemetry};
use crate::formats::Heartbeat;
use crate::kafka::internal::InternalWriter;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

/// How long one heartbeat may take to be acked.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Emits heartbeats from `source_alias` to `target_alias` through `out` every `interval`
/// until `shutdown`.
pub async fn run(
    out: InternalWriter,
    source_alias: String,
    target_alias: String,
    interval: Duration,
    telemetry: Arc<FlowTelemetry>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                telemetry.loop_ended("heartbeats");
                return;
            }
            _ = tick.tick() => {}
        }
        telemetry.tick("heartbeats", interval);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let hb = Heartbeat {
            source_alias: source_alias.clone(),
            target_alias: target_alias.clone(),
            timestamp_ms: now,
        };
        let sent = out.send(&hb.key(), &hb.value(), None);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            sent = tokio::time::timeout(SEND_TIMEOUT, sent) => match sent {
                Ok(Ok(_)) => telemetry.add(Counter::Heartbeats, 1),
                Ok(Err(e)) => telemetry.note_error("heartbeat", e.kind(), &e),
                Err(_) => telemetry.note_error("heartbeat", "timeout", &format!("not acked within {SEND_TIMEOUT:?}")),
            }
        }
    }
}
