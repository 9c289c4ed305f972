//! What a failed produce means, as a pure function of librdkafka's error code.
//!
//! The data producer never times a record out (`message.timeout.ms = 0`), so librdkafka
//! retries every retriable error (a broker down, a leader change, a full broker) until it
//! succeeds; a delivery report with an error therefore means the target will never take
//! that record as it is — except that its metadata may be stale: a target partition (or
//! topic) it does not know yet is tried again once the metadata is refreshed. A full local
//! queue is back-pressure, not a failure. Records are purged only when the producer failed
//! fatally (librdkafka purges its whole queue then); a purged record is not done. Two
//! producers do give records up: a single instance's, a quarter of a lease after a record
//! was queued (`config::queued_for_at_most`), and an exactly-once shard's, at its
//! transaction timeout (a target down that long). A timed-out record is sent again (read
//! again after the shard's abort), never skipped or paused as one the target refused.

use rdkafka::error::RDKafkaErrorCode as Code;

/// How the data plane treats a produce error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Wait and try the same record again (the local queue is full).
    Backpressure,
    /// Not produced now (purged after a fatal error, a partition or topic the producer's
    /// metadata does not show yet): tried again from this record shortly.
    Transient(String),
    /// This record cannot be produced to this target partition (too large, rejected,
    /// not authorized): only its partition is affected.
    Unproducible(String),
    /// The producer itself is unusable: the replicator restarts from stored progress.
    Fatal(String),
}

/// Classifies an error from `send` (`sync`) or from a delivery report.
pub fn classify(code: Code, sync: bool) -> Failure {
    match code {
        Code::QueueFull if sync => Failure::Backpressure,
        Code::PurgeQueue | Code::PurgeInflight => {
            Failure::Transient(format!("{code} (the producer was reset)"))
        }
        Code::MessageTimedOut => Failure::Transient(format!(
            "{code} (given up after waiting for the target: sent again — is the target slow or unreachable?)"
        )),
        // The producer instance the record was queued on is being destroyed (a reset
        // replaces it: `BrokerDestroy`, librdkafka's `__DESTROY`), or librdkafka let go of
        // the broker connection it waited on (`DestroyBroker`): about the producer, not the
        // record. Seen on Kafka at 20,000 topics, where records given up were resent
        // through a new producer; taken as unproducible, each paused its partition.
        Code::BrokerDestroy | Code::DestroyBroker => Failure::Transient(format!(
            "{code} (the producer or its connection was closed under the record; sent again)"
        )),
        Code::UnknownPartition | Code::UnknownTopic | Code::UnknownTopicOrPartition => {
            Failure::Transient(format!(
                "{code} (the producer does not know this target partition yet; retried after a metadata refresh)"
            ))
        }
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
        // Everything else librdkafka gives up on is about this record or this partition.
        _ => Failure::Unproducible(code.to_string()),
    }
}

pub use crate::config::OnUnproducible;

impl Failure {
    /// What the refusal means to the book; `None` for back-pressure (offer it again).
    pub fn refusal(self) -> Option<super::book::Refusal> {
        use super::book::Refusal;
        match self {
            Failure::Backpressure => None,
            Failure::Transient(r) => Some(Refusal::Transient(r)),
            Failure::Unproducible(r) => Some(Refusal::Unproducible(r)),
            Failure::Fatal(r) => Some(Refusal::Fatal(r)),
        }
    }
}

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
        for code in [
            Code::PurgeInflight,
            Code::BrokerDestroy,
            Code::DestroyBroker,
            Code::UnknownPartition,
            Code::UnknownTopic,
            Code::MessageTimedOut,
        ] {
            assert!(
                matches!(classify(code, false), Failure::Transient(_)),
                "{code:?}: tried again, never skipped or paused for good"
            );
            assert!(
                matches!(classify(code, true), Failure::Transient(_)),
                "{code:?}"
            );
        }
        let Failure::Unproducible(why) = classify(Code::MessageSizeTooLarge, true) else {
            panic!()
        };
        assert!(why.contains("message.max.bytes"), "{why}");
    }
}
