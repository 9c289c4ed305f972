//! What the [`super::book::Book`] decides and hears, as plain values: the effects the shell
//! applies to librdkafka and the offset-sync sender, what to do with a record, why the
//! target refused one, and an ack.

use super::table::SlotKey;
use std::sync::Arc;

/// What the consumer (and the offset-sync sender) must be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Stop fetching the partition.
    Pause(Arc<str>, i32),
    /// Fetch the partition again (from where it was sought to, if it was).
    Resume(Arc<str>, i32),
    /// Read the partition from this offset next.
    Seek(Arc<str>, i32, i64),
    /// A partition starts under `key` (its offset syncs are keyed by it).
    Started {
        /// The key.
        key: SlotKey,
        /// The source topic.
        topic: Arc<str>,
        /// The partition.
        partition: i32,
        /// The consumer-group generation it was assigned in.
        generation: i32,
    },
    /// The partition's `key` ends (its last syncs are sent, then it is forgotten).
    Retired(SlotKey),
    /// The producer's metadata of this target topic is stale (it does not know a partition).
    RefreshMetadata(Arc<str>),
    /// A record the target will not take, or a transform failed on.
    Unproducible {
        /// Where.
        topic: Arc<str>,
        /// Partition.
        partition: i32,
        /// Its source offset.
        offset: i64,
        /// Why.
        reason: String,
        /// Skipped (`true`) or stopped at (`false`).
        skipped: bool,
        /// A record transform failed on it (not the target refusing it).
        transform: bool,
    },
    /// Records of a source partition were gone before they were mirrored.
    Truncated {
        /// The source topic.
        topic: Arc<str>,
        /// The partition.
        partition: i32,
        /// What was lost.
        truncation: super::truncation::Truncation,
        /// Whether the partition stopped there (`on_source_truncation = "pause"`).
        paused: bool,
    },
    /// A stopped partition tries its record again.
    Retrying(Arc<str>, i32, i64),
}

/// What to do with a record the consumer handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// Produce it to `partition` of `target`, with `key` as the delivery's opaque.
    Send {
        /// The partition's key.
        key: SlotKey,
        /// The target topic.
        target: Arc<str>,
        /// The target partition (the source's number).
        partition: i32,
    },
    /// Not produced now: not this replicator's, already mirrored, or its partition does not
    /// flow (then it is sought back to the record).
    Declined,
    /// No room: offer it again later (or [`Book::decline`] it).
    Full,
}

/// Why the target refused a record, as the book needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It will never take this record (`on_unproducible` decides).
    Unproducible(String),
    /// Not now: the record is tried again shortly (the partition waits meanwhile).
    Transient(String),
    /// The producer is unusable; the replicator restarts from stored progress.
    Fatal(String),
}

/// An acked record, for offset syncs and latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// The partition's key.
    pub key: SlotKey,
    /// The source offset.
    pub upstream: i64,
    /// The target offset.
    pub downstream: i64,
    /// The record's timestamp.
    pub timestamp: Option<i64>,
    /// Whether it counts (not abandoned after a failed record before it).
    pub counts: bool,
}
