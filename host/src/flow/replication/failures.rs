//! What a failed produce means, as a pure function of librdkafka's error code.
//!
//! The data producer never times a record out (`message.timeout.ms = 0`), so librdkafka
//! retries every retriable error (a broker down, a leader change, a full broker) until it
//! succeeds; a delivery report with an error therefore means the target will never take
//! that record as it is. A full local queue is back-pressure, not a failure.

use rdkafka::error::RDKafkaErrorCode as Code;

/// How the data plane treats a produce error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Wait and try the same record again (the local queue is full).
    Backpressure,
    /// The record was purged by a shutdown or a partition handover: not a failure.
    Purged,
    /// This record cannot be produced to this target partition (too large, rejected,
    /// not authorized, no such partition): only its partition is affected.
    Unproducible(String),
    /// The producer itself is unusable: the replicator restarts from stored progress.
    Fatal(String),
}

/// Classifies an error from `send` (`sync`) or from a delivery report.
pub fn classify(code: Code, sync: bool) -> Failure {
    match code {
        Code::QueueFull if sync => Failure::Backpressure,
        Code::PurgeQueue | Code::PurgeInflight => Failure::Purged,
        Code::Fatal
        | Code::OutOfOrderSequenceNumber
        | Code::InvalidProducerEpoch
        | Code::ProducerFenced
        | Code::UnknownProducerId
        | Code::ClusterAuthorizationFailed => Failure::Fatal(code.to_string()),
        Code::MessageSizeTooLarge => Failure::Unproducible(format!(
            "{code} (raise message.max.bytes of the target cluster's librdkafka settings, or max.message.bytes of the target topic)"
        )),
        Code::TopicAuthorizationFailed => Failure::Unproducible(format!(
            "{code} (the target topic denies writes to kmirror's principal)"
        )),
        Code::UnknownPartition => Failure::Unproducible(format!(
            "{code} (the target topic has fewer partitions than the source)"
        )),
        // Everything else librdkafka gives up on is about this record or this partition.
        _ => Failure::Unproducible(code.to_string()),
    }
}

pub use crate::config::OnUnproducible;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_is_backpressure_only_when_sending() {
        assert_eq!(classify(Code::QueueFull, true), Failure::Backpressure);
        assert!(matches!(
            classify(Code::QueueFull, false),
            Failure::Unproducible(_)
        ));
    }

    #[test]
    fn record_and_partition_errors_are_unproducible_producer_errors_fatal() {
        for code in [
            Code::MessageSizeTooLarge,
            Code::InvalidRecord,
            Code::TopicAuthorizationFailed,
            Code::UnknownPartition,
            Code::InvalidTimestamp,
            Code::PolicyViolation,
            Code::MessageBatchTooLarge,
        ] {
            assert!(
                matches!(classify(code, false), Failure::Unproducible(_)),
                "{code:?}"
            );
        }
        for code in [
            Code::Fatal,
            Code::ProducerFenced,
            Code::OutOfOrderSequenceNumber,
        ] {
            assert!(
                matches!(classify(code, false), Failure::Fatal(_)),
                "{code:?}"
            );
        }
        assert_eq!(classify(Code::PurgeInflight, false), Failure::Purged);
        let Failure::Unproducible(why) = classify(Code::MessageSizeTooLarge, true) else {
            panic!()
        };
        assert!(why.contains("message.max.bytes"), "{why}");
    }
}
