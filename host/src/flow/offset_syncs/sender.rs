//! The writer's syncs on their way to the offset-syncs topic, from the data plane's thread
//! (which also serves their delivery reports: no thread of their own):
//! at most a few in flight (only the newest pending sync per partition matters while the
//! topic is slow), the rest queued in the writer, where only what exact translation needs
//! is kept.
//!
//! An exactly-once shard whose syncs topic is on the target writes them itself, inside the
//! transaction of the records they describe ([`SyncSender::in_transactions`]): the sender
//! then only decides and builds them ([`SyncSender::stage`]).

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
    /// `None`: the caller writes the syncs inside its transactions.
    producer: Option<BaseProducer<SyncDeliveries>>,
    telemetry: Arc<FlowTelemetry>,
    topic: String,
}

/// A sync to write: key, value and the [`MARKER_HEADER`] value.
pub struct SyncRecord {
    /// The partition the sync describes (the data plane's key).
    pub partition: PartitionKey,
    /// MM2's OffsetSync key.
    pub key: Vec<u8>,
    /// MM2's OffsetSync value.
    pub value: Vec<u8>,
    /// The marker header's value.
    pub marker: String,
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
            telemetry: telemetry.clone(),
        };
        Ok(SyncSender {
            writer,
            names: HashMap::new(),
            retired: Vec::new(),
            producer: Some(cluster.base_producer(&[], context)?),
            telemetry,
            topic: topic.to_string(),
        })
    }

    /// A sender whose syncs the caller writes inside its own transactions: it decides and
    /// builds them ([`SyncSender::stage`]) and sends nothing itself.
    pub fn in_transactions(
        writer: OffsetSyncWriter<PartitionKey>,
        topic: &str,
        telemetry: Arc<FlowTelemetry>,
    ) -> Self {
        SyncSender {
            writer,
            names: HashMap::new(),
            retired: Vec::new(),
            producer: None,
            telemetry,
            topic: topic.to_string(),
        }
    }

    /// Whether syncs wait for the caller's next transaction.
    pub fn waiting(&self) -> bool {
        self.producer.is_none() && self.writer.has_pending()
    }

    /// The acked `(key, upstream, downstream)` of a transaction about to commit go through
    /// the writer; every sync it has queued (these and earlier ones) is returned, to be
    /// written inside the transaction. If the transaction aborts, [`SyncSender::aborted`]
    /// must be called with what was returned.
    pub fn stage(&mut self, acked: &[(PartitionKey, i64, i64)]) -> Vec<SyncRecord> {
        for (key, up, down) in acked {
            self.writer.on_ack(key, *up, *down);
        }
        self.count_dropped();
        let pending = self.writer.take_pending(usize::MAX);
        let out = pending
            .into_iter()
            .filter_map(|p| {
                let (key, value, marker) = self.parts(&p)?;
                Some(SyncRecord {
                    partition: p.key,
                    key,
                    value,
                    marker,
                })
            })
            .collect();
        self.forget_retired();
        out
    }

    /// The transaction `staged` was written in committed.
    pub fn committed(&self, staged: &[SyncRecord]) {
        self.telemetry
            .add(Counter::OffsetSyncs, staged.len() as u64);
    }

    /// The transaction `staged` was written in aborted: each partition of it starts a new
    /// sync session (its sequence has a hole now; the records are read and acked again).
    pub fn aborted(&mut self, staged: &[SyncRecord]) {
        for s in staged {
            self.writer.forget(&s.partition);
        }
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
        if let Some(producer) = &self.producer {
            producer.poll(Duration::ZERO);
            if self.writer.has_pending() {
                self.pump();
            }
        }
    }

    fn count_dropped(&mut self) {
        let dropped = self.writer.take_dropped();
        if dropped > 0 {
            self.telemetry.add(Counter::OffsetSyncsDropped, dropped);
        }
    }

    fn forget_retired(&mut self) {
        if !self.retired.is_empty() && !self.writer.has_pending() {
            for key in self.retired.drain(..) {
                self.names.remove(&key);
            }
        }
    }

    /// Sends what fits in flight now (nothing when the caller writes the syncs).
    pub fn pump(&mut self) {
        self.count_dropped();
        let Some(producer) = &self.producer else {
            return;
        };
        let room = MAX_SYNCS_IN_FLIGHT
            .saturating_sub(producer.context().in_flight.load(Ordering::Acquire));
        if room > 0 && self.writer.has_pending() {
            for sync in self.writer.take_pending(room) {
                self.send(sync);
            }
        }
        self.forget_retired();
    }

    /// The record of `p`: key, value and marker (`None` if its partition is unknown).
    fn parts(&self, p: &PendingSync<PartitionKey>) -> Option<(Vec<u8>, Vec<u8>, String)> {
        let (topic, partition, generation) = self.names.get(&p.key)?;
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
        Some((sync.key(), sync.value(), marker.encode()))
    }

    fn send(&mut self, p: PendingSync<PartitionKey>) {
        let Some((key, value, marker)) = self.parts(&p) else {
            return;
        };
        let Some(producer) = &self.producer else {
            return;
        };
        let headers = OwnedHeaders::new().insert(Header {
            key: MARKER_HEADER,
            value: Some(marker.as_bytes()),
        });
        let record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic)
            .partition(0)
            .key(key.as_slice())
            .payload(value.as_slice())
            .headers(headers);
        producer.context().in_flight.fetch_add(1, Ordering::AcqRel);
        if let Err((e, _)) = producer.send(record) {
            producer.context().in_flight.fetch_sub(1, Ordering::AcqRel);
            self.telemetry
                .note_error("offset sync", "kafka", &e.to_string());
        }
    }

    /// Sends every queued sync and waits up to `timeout` for all of them (a graceful stop).
    pub fn drain(&mut self, timeout: Duration) {
        if self.producer.is_none() {
            return;
        }
        let deadline = std::time::Instant::now() + timeout;
        self.writer.promote_delayed();
        loop {
            self.pump();
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !self.writer.has_pending() || left.is_zero() {
                break;
            }
            if let Some(producer) = &self.producer {
                producer.poll(left.min(Duration::from_millis(20)));
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if let Some(producer) = &self.producer {
            let _ = producer.flush(left);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(r: &SyncRecord) -> (OffsetSync, SyncMarker) {
        let sync = OffsetSync::decode(Some(&r.key), Some(&r.value)).expect("an OffsetSync");
        let marker = SyncMarker::decode(r.marker.as_bytes()).expect("a marker");
        (sync, marker)
    }

    #[test]
    fn syncs_staged_in_a_transaction_start_a_new_session_after_an_abort() {
        let telemetry = Arc::new(FlowTelemetry::new("a->b"));
        let mut s = SyncSender::in_transactions(
            OffsetSyncWriter::new(100, 7),
            "mm2-offset-syncs.a.internal",
            telemetry,
        );
        s.register(1, Arc::from("t"), 0, 3);
        s.register(2, Arc::from("u"), 4, 3);
        // A transaction of records 0..5 of t[0] at 0..5: its first record's sync, written by
        // the caller; nothing waits afterwards.
        let acked: Vec<_> = (0..5).map(|i| (1, i, i)).collect();
        let first = s.stage(&acked);
        assert_eq!(first.len(), 1);
        let (sync, marker) = decoded(&first[0]);
        assert_eq!(
            (
                sync.topic.as_str(),
                sync.partition,
                sync.upstream,
                sync.downstream
            ),
            ("t", 0, 0, 0)
        );
        assert_eq!((marker.seq, marker.generation), (0, Some(3)));
        assert!(!s.waiting(), "all staged");
        s.committed(&first);
        // The next transaction (records 5..8 after the marker at 5) aborts: its sync is gone
        // and the partition starts a new session, so the store never joins the aborted
        // sync's sequence to later ones.
        let aborted = s.stage(&[(1, 5, 6), (1, 6, 7), (1, 7, 8)]);
        assert_eq!(aborted.len(), 1, "the first record after the marker");
        let (_, lost) = decoded(&aborted[0]);
        assert_eq!((lost.session, lost.seq), (marker.session, 1));
        s.aborted(&aborted);
        // Read again, the records land after the abort marker at 9.
        let again = s.stage(&[(1, 5, 10), (1, 6, 11)]);
        assert_eq!(again.len(), 1);
        let (sync, fresh) = decoded(&again[0]);
        assert_eq!((sync.upstream, sync.downstream), (5, 10));
        assert_ne!(
            fresh.session, marker.session,
            "a new session after the abort"
        );
        assert_eq!(fresh.seq, 0);
        // An idle partition's delayed sync waits for a transaction of its own.
        s.flush_delayed();
        assert!(
            s.waiting(),
            "the delayed sync of record 6 waits for a transaction"
        );
        let delayed = s.stage(&[]);
        assert_eq!(delayed.len(), 1);
        assert_eq!(decoded(&delayed[0]).0.upstream, 6);
        // A released partition's last sync is written, then the partition is forgotten.
        s.stage(&[(2, 0, 0), (2, 1, 1)]);
        s.retire(2);
        let last = s.stage(&[]);
        assert_eq!(last.len(), 1);
        assert_eq!(decoded(&last[0]).0.topic, "u");
        assert!(s.names.get(&2).is_none());
        assert!(!s.waiting());
    }
}
