//! Heartbeats: an MM2 Heartbeat record to the target's heartbeats topic every interval.

use crate::flow::FlowStats;
use crate::formats::Heartbeat;
use crate::kafka::Cluster;
use rdkafka::producer::FutureRecord;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

/// Emits heartbeats from `source_alias` to `target` on `topic` until `shutdown`.
pub async fn run(
    target: &Cluster,
    source_alias: &str,
    topic: &str,
    interval: Duration,
    shutdown: CancellationToken,
    stats: Arc<FlowStats>,
) {
    let producer = match target.producer(&[]) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "heartbeats disabled: cannot create a producer");
            return;
        }
    };
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let hb = Heartbeat {
            source_alias: source_alias.to_string(),
            target_alias: target.alias.clone(),
            timestamp_ms: now,
        };
        let (key, value) = (hb.key(), hb.value());
        let record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic)
            .partition(0)
            .key(key.as_slice())
            .payload(value.as_slice());
        tokio::select! {
            _ = shutdown.cancelled() => return,
            sent = producer.send(record, Duration::from_secs(5)) => match sent {
                Ok(_) => { stats.heartbeats.fetch_add(1, Ordering::Relaxed); }
                Err((e, _)) => stats.note_error("heartbeat", &e.to_string()),
            }
        }
    }
}
