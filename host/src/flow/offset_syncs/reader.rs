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

/// Tails `topic` on `cluster` into `shared` until `shutdown`. Malformed records are
/// skipped and counted.
pub async fn run(
    cluster: Cluster,
    topic: String,
    shared: Arc<SharedStore>,
    telemetry: Arc<FlowTelemetry>,
    shutdown: CancellationToken,
) {
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
    if reader.caught_up() {
        shared.ready.store(true, Ordering::Release);
    }
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            event = reader.next() => event,
        };
        let msg = match event {
            Ok(ReadEvent::Record(msg)) => msg,
            Ok(ReadEvent::CaughtUp) => {
                shared.ready.store(true, Ordering::Release);
                tracing::info!(flow = %telemetry.flow, topic = %topic, "offset syncs read; translating");
                continue;
            }
            Err(e) => {
                telemetry.note_error("read offset syncs", e.kind(), &e);
                continue;
            }
        };
        match OffsetSync::decode(msg.key(), msg.payload()) {
            Ok(sync) => {
                let marker = msg
                    .headers()
                    .and_then(|h| h.iter().find(|h| h.key == MARKER_HEADER))
                    .and_then(|h| h.value)
                    .and_then(SyncMarker::decode);
                shared
                    .store
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .add(&sync, marker);
            }
            Err(e) => {
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
