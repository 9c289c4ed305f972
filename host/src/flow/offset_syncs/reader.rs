//! Tails the offset-syncs topic into the translation store the checkpoint task reads.
//! Nothing is translated until the reader caught up with the topic's end at start.

use super::{MARKER_HEADER, OffsetSync, OffsetSyncStore, SyncMarker};
use crate::flow::telemetry::{Counter, FlowTelemetry};
use crate::kafka::Cluster;
use crate::kafka::internal::{InternalReader, ReadEvent};
use rdkafka::message::{Headers, Message};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The translation state shared by the sync reader and the checkpoint task.
#[derive(Default)]
pub struct SharedStore {
    /// The syncs read so far.
    pub store: Mutex<OffsetSyncStore>,
    /// Set once the reader caught up with the topic's end at start.
    pub ready: AtomicBool,
}

impl SharedStore {
    /// Whether the store may be used for translation.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

/// How often the reader reports that it is alive.
const LIVENESS: Duration = Duration::from_secs(5);

/// Tails `topic` on `cluster` into `shared` until `shutdown`. Malformed records are
/// skipped and counted.
pub async fn run(
    cluster: Cluster,
    topic: String,
    shared: Arc<SharedStore>,
    telemetry: Arc<FlowTelemetry>,
    shutdown: CancellationToken,
) {
    telemetry.update(|s| s.translation_ready = Some(false));
    let mut reader = loop {
        match InternalReader::open(&cluster, &topic).await {
            Ok(r) => break r,
            Err(e) => telemetry.note_error("read offset syncs", e.kind(), &e),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    };
    let ready = |shared: &SharedStore| {
        shared.ready.store(true, Ordering::Release);
        telemetry.update(|s| s.translation_ready = Some(true));
        tracing::info!(flow = %telemetry.flow, topic = %topic, "offset syncs read; translating");
    };
    if reader.caught_up() {
        ready(&shared);
    }
    let mut alive = tokio::time::interval(LIVENESS);
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => {
                telemetry.loop_ended("offset-sync reader");
                return;
            }
            _ = alive.tick() => {
                telemetry.tick("offset-sync reader", LIVENESS);
                continue;
            }
            event = reader.next() => event,
        };
        let msg = match event {
            Ok(ReadEvent::Record(msg)) => msg,
            Ok(ReadEvent::CaughtUp) => {
                ready(&shared);
                continue;
            }
            Err(e) => {
                telemetry.note_error("read offset syncs", e.kind(), &e);
                continue;
            }
        };
        let decoded =
            OffsetSync::decode(msg.key(), msg.payload()).map_err(|e| (false, e.to_string()));
        let added = decoded.and_then(|sync| {
            let marker = msg
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == MARKER_HEADER))
                .and_then(|h| h.value)
                .and_then(SyncMarker::decode);
            shared
                .store
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .add_at(&sync, marker, msg.timestamp().to_millis())
                .map_err(|e| {
                    let stale = matches!(e, super::store::Refused::StaleOwner { .. });
                    (stale, e.to_string())
                })
        });
        match added {
            Ok(()) => {}
            Err((true, e)) => {
                telemetry.add(Counter::StaleOffsetSyncs, 1);
                if telemetry.first_time("stale offset sync") {
                    tracing::info!(flow = %telemetry.flow, topic, error = %e, "refused a former owner's late offset sync (logged once)");
                }
            }
            Err((false, e)) => {
                telemetry.add(Counter::MalformedOffsetSyncs, 1);
                telemetry.note_error(
                    "malformed offset sync skipped",
                    "malformed",
                    &format!("{topic} offset {}: {e}", msg.offset()),
                );
            }
        }
    }
}
