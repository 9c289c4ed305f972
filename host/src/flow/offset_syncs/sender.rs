//! The writer's syncs on their way to the offset-syncs topic, from the data plane's thread
//! (which also serves their delivery reports: no thread of their own):
//! at most a few in flight (only the newest pending sync per partition matters while the
//! topic is slow), the rest queued in the writer, where only what exact translation needs
//! is kept.

use super::writer::{OffsetSyncWriter, PendingSync};
use super::{MARKER_HEADER, OffsetSync, SyncMarker};
use crate::flow::telemetry::{Counter, FlowTelemetry};
use crate::kafka::{Cluster, KafkaError};
use rdkafka::ClientContext;
use rdkafka::message::{DeliveryResult, Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Offset syncs in flight at most.
const MAX_SYNCS_IN_FLIGHT: usize = 8;

/// A partition as the data plane numbers it (unique for each time it is assigned).
pub type PartitionKey = u64;

/// Counts the syncs' delivery reports.
struct SyncDeliveries {
    in_flight: AtomicUsize,
    telemetry: Arc<FlowTelemetry>,
}

impl ClientContext for SyncDeliveries {}

impl ProducerContext for SyncDeliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        match result {
            Ok(_) => self.telemetry.add(Counter::OffsetSyncs, 1),
            Err((e, _)) => self
                .telemetry
                .note_error("offset sync", "kafka", &e.to_string()),
        }
    }
}

/// Decides and sends one replicator's offset syncs.
pub struct SyncSender {
    writer: OffsetSyncWriter<PartitionKey>,
    names: HashMap<PartitionKey, (Arc<str>, i32, i32)>,
    retired: Vec<PartitionKey>,
    producer: BaseProducer<SyncDeliveries>,
    topic: String,
}

impl SyncSender {
    /// Sends the syncs `writer` decides on to `topic` on `cluster`.
    pub fn new(
        writer: OffsetSyncWriter<PartitionKey>,
        cluster: &Cluster,
        topic: &str,
        telemetry: Arc<FlowTelemetry>,
    ) -> Result<Self, KafkaError> {
        let context = SyncDeliveries {
            in_flight: AtomicUsize::new(0),
            telemetry,
        };
        Ok(SyncSender {
            writer,
            names: HashMap::new(),
            retired: Vec::new(),
            producer: cluster.base_producer(&[], context)?,
            topic: topic.to_string(),
        })
    }

    /// Names `key` (a partition starts being replicated, assigned in the consumer-group
    /// `generation`: its syncs carry it as their owner generation).
    pub fn register(
        &mut self,
        key: PartitionKey,
        topic: Arc<str>,
        partition: i32,
        generation: i32,
    ) {
        self.names.insert(key, (topic, partition, generation));
    }

    /// Source `up` of `key` was acked by the target at `down`.
    pub fn on_ack(&mut self, key: PartitionKey, up: i64, down: i64) {
        if self.writer.on_ack(&key, up, down).is_some() {
            self.pump();
        }
    }

    /// Queues every delayed sync and sends what fits (each flush interval).
    pub fn flush_delayed(&mut self) {
        self.writer.promote_delayed();
        self.pump();
    }

    /// The partition leaves this replicator: its last sync is queued, and it is forgotten
    /// once its queued syncs are sent.
    pub fn retire(&mut self, key: PartitionKey) {
        self.writer.promote_one(&key);
        self.writer.forget(&key);
        self.retired.push(key);
        self.pump();
    }

    /// Serves the syncs' delivery reports (the data plane's loop calls it), then sends more.
    pub fn poll(&mut self) {
        self.producer.poll(Duration::ZERO);
        if self.writer.has_pending() {
            self.pump();
        }
    }

    /// Sends what fits in flight now.
    pub fn pump(&mut self) {
        let dropped = self.writer.take_dropped();
        if dropped > 0 {
            self.producer
                .context()
                .telemetry
                .add(Counter::OffsetSyncsDropped, dropped);
        }
        let room = MAX_SYNCS_IN_FLIGHT
            .saturating_sub(self.producer.context().in_flight.load(Ordering::Acquire));
        if room > 0 && self.writer.has_pending() {
            for sync in self.writer.take_pending(room) {
                self.send(sync);
            }
        }
        if !self.retired.is_empty() && !self.writer.has_pending() {
            for key in self.retired.drain(..) {
                self.names.remove(&key);
            }
        }
    }

    fn send(&mut self, p: PendingSync<PartitionKey>) {
        let Some((topic, partition, generation)) = self.names.get(&p.key) else {
            return;
        };
        let marker = SyncMarker {
            generation: (*generation >= 0).then_some(*generation),
            ..p.marker
        };
        let sync = OffsetSync {
            topic: topic.to_string(),
            partition: *partition,
            upstream: p.upstream,
            downstream: p.downstream,
        };
        let (key, value, marker) = (sync.key(), sync.value(), marker.encode());
        let headers = OwnedHeaders::new().insert(Header {
            key: MARKER_HEADER,
            value: Some(marker.as_bytes()),
        });
        let record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic)
            .partition(0)
            .key(key.as_slice())
            .payload(value.as_slice())
            .headers(headers);
        self.producer
            .context()
            .in_flight
            .fetch_add(1, Ordering::AcqRel);
        if let Err((e, _)) = self.producer.send(record) {
            self.producer
                .context()
                .in_flight
                .fetch_sub(1, Ordering::AcqRel);
            self.producer
                .context()
                .telemetry
                .note_error("offset sync", "kafka", &e.to_string());
        }
    }

    /// Sends every queued sync and waits up to `timeout` for all of them (a graceful stop).
    pub fn drain(&mut self, timeout: Duration) {
        let deadline = std::time::Instant::now() + timeout;
        self.writer.promote_delayed();
        loop {
            self.pump();
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !self.writer.has_pending() || left.is_zero() {
                break;
            }
            self.producer.poll(left.min(Duration::from_millis(20)));
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let _ = self.producer.flush(left);
    }
}
