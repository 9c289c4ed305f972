//! The writer's syncs on their way to the offset-syncs topic: at most a few in flight, the
//! rest queued in the writer (where only what exact translation needs is kept).

use super::{MARKER_HEADER, OffsetSyncWriter, TopicPartition};
use crate::flow::telemetry::{Counter, FlowTelemetry};
use crate::kafka::internal::InternalWriter;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rdkafka::message::{Header, OwnedHeaders};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Offset syncs in flight at most (only the newest pending one per partition matters).
const MAX_SYNCS_IN_FLIGHT: usize = 8;

type Sent = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Decides and sends one replicator's offset syncs.
pub struct SyncSender {
    writer: OffsetSyncWriter,
    out: InternalWriter,
    in_flight: FuturesUnordered<Sent>,
    telemetry: Arc<FlowTelemetry>,
}

impl SyncSender {
    /// Sends the syncs `writer` decides on through `out`.
    pub fn new(
        writer: OffsetSyncWriter,
        out: InternalWriter,
        telemetry: Arc<FlowTelemetry>,
    ) -> Self {
        SyncSender {
            writer,
            out,
            in_flight: FuturesUnordered::new(),
            telemetry,
        }
    }

    /// Source `up` of `tp` was acked by the target at `down`.
    pub fn on_ack(&mut self, tp: &TopicPartition, up: i64, down: i64) {
        if self.writer.on_ack(tp, up, down).is_some() {
            self.send();
        }
    }

    /// Queues every delayed sync and sends what fits (each flush interval).
    pub fn flush_delayed(&mut self) {
        self.writer.promote_delayed();
        self.send();
    }

    /// Forgets a partition that is no longer replicated.
    pub fn forget(&mut self, tp: &TopicPartition) {
        self.writer.forget(tp);
    }

    /// Whether a sync is in flight.
    pub fn busy(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Waits for one sync in flight to be acked, then sends more.
    pub async fn completed(&mut self) {
        if self.in_flight.next().await.is_some() {
            self.send();
        }
    }

    /// Sends every queued sync and waits for all of them (a graceful stop).
    pub async fn drain(&mut self) {
        self.writer.promote_delayed();
        loop {
            self.send();
            if self.in_flight.next().await.is_none() && !self.writer.has_pending() {
                return;
            }
        }
    }

    fn send(&mut self) {
        let dropped = self.writer.take_dropped();
        if dropped > 0 {
            self.telemetry.add(Counter::OffsetSyncsDropped, dropped);
        }
        let room = MAX_SYNCS_IN_FLIGHT.saturating_sub(self.in_flight.len());
        for (sync, marker) in self.writer.take_pending(room) {
            let marker = marker.encode();
            let headers = OwnedHeaders::new().insert(Header {
                key: MARKER_HEADER,
                value: Some(marker.as_bytes()),
            });
            let sent = self.out.send(&sync.key(), &sync.value(), Some(headers));
            let telemetry = self.telemetry.clone();
            self.in_flight.push(Box::pin(async move {
                match sent.await {
                    Ok(_) => telemetry.add(Counter::OffsetSyncs, 1),
                    Err(e) => telemetry.note_error("offset sync", e.kind(), &e),
                }
            }));
        }
    }
}
