//! Synchronous offset commits that say, partition by partition, what Kafka stored.
//!
//! librdkafka answers a commit of several partitions, some of which Kafka refused (no READ
//! on one topic, a topic deleted meanwhile), with the error of the last refused partition
//! as the error of the whole request, and never writes the per-partition outcome into the
//! caller's list. Taken at its word the whole commit failed; reading the list, all of it
//! succeeded. Neither is true, so after a failed commit of more than one partition the
//! group's committed offsets are read back: a partition whose committed offset is the one
//! just committed is stored, every other one carries the request's error (which is one
//! refused partition's: where partitions were refused for different reasons, the reason
//! given for some is another's).

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::time::Duration;

/// How long reading back the committed offsets after a failed commit may take.
pub const READ_BACK_TIMEOUT: Duration = Duration::from_secs(5);

/// The outcome of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// The error librdkafka gave the request, if any (on a partial failure, one refused
    /// partition's error: see the module's documentation).
    pub error: Option<String>,
    /// (topic, partition, offset, why it was not stored) of each partition committed; the
    /// last field is `None` exactly for the partitions Kafka stored.
    pub partitions: Vec<(String, i32, i64, Option<String>)>,
}

impl CommitOutcome {
    /// How many partitions Kafka stored.
    pub fn stored(&self) -> usize {
        self.partitions.iter().filter(|p| p.3.is_none()).count()
    }

    /// The partitions Kafka did not store, with why.
    pub fn refused(&self) -> impl Iterator<Item = &(String, i32, i64, Option<String>)> {
        self.partitions.iter().filter(|p| p.3.is_some())
    }
}

/// Commits `offsets` for `consumer`'s group and waits for the answer; after a failed
/// commit of several partitions, reads the group's offsets back (at most
/// [`READ_BACK_TIMEOUT`]) to tell the stored partitions from the refused ones.
pub fn commit_sync<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    offsets: &TopicPartitionList,
) -> CommitOutcome {
    let requested = requested(offsets);
    let error = match consumer.commit(offsets, CommitMode::Sync) {
        Ok(()) => return judge(requested, None, None),
        Err(e) => e.to_string(),
    };
    let read_back = (requested.len() > 1)
        .then(|| {
            let mut tpl = TopicPartitionList::new();
            for (t, p, _) in &requested {
                tpl.add_partition(t, *p);
            }
            consumer
                .committed_offsets(tpl, READ_BACK_TIMEOUT)
                .map_err(|e| {
                    tracing::debug!(error = %e, "committed offsets not read back after a failed commit: every partition counts as refused");
                })
                .ok()
        })
        .flatten()
        .map(|list| {
            list.elements()
                .iter()
                .map(|e| {
                    let at = match (e.error(), e.offset()) {
                        (Ok(()), Offset::Offset(o)) => Some(o),
                        _ => None,
                    };
                    ((e.topic().to_string(), e.partition()), at)
                })
                .collect()
        });
    judge(requested, Some(error), read_back)
}

fn requested(offsets: &TopicPartitionList) -> Vec<(String, i32, i64)> {
    offsets
        .elements()
        .iter()
        .map(|e| {
            let at = e.offset().to_raw().unwrap_or(-1);
            (e.topic().to_string(), e.partition(), at)
        })
        .collect()
}

/// The outcome of a commit of `requested` that failed with `error` (or succeeded, `None`),
/// given the group's committed offsets read back afterwards (`None`: not read, or the read
/// failed — then every partition counts as refused).
fn judge(
    requested: Vec<(String, i32, i64)>,
    error: Option<String>,
    read_back: Option<HashMap<(String, i32), Option<i64>>>,
) -> CommitOutcome {
    let partitions = requested
        .into_iter()
        .map(|(t, p, at)| {
            let stored = match (&error, &read_back) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(_), Some(back)) => back.get(&(t.clone(), p)) == Some(&Some(at)),
            };
            let why = (!stored).then(|| error.clone().unwrap_or_default());
            (t, p, at, why)
        })
        .collect();
    CommitOutcome { error, partitions }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked() -> Vec<(String, i32, i64)> {
        vec![
            ("orders".into(), 0, 10),
            ("orders".into(), 1, 20),
            ("secret".into(), 0, 30),
        ]
    }

    #[test]
    fn a_commit_kafka_accepted_stores_every_partition() {
        let o = judge(asked(), None, None);
        assert_eq!(o.stored(), 3);
        assert_eq!(o.error, None);
    }

    #[test]
    fn a_partial_failure_stores_only_what_the_group_holds_afterwards() {
        let why = "Broker: Topic authorization failed".to_string();
        let back: HashMap<_, _> = [
            (("orders".to_string(), 0), Some(10)),
            (("orders".to_string(), 1), Some(20)),
            // An offset read back as refused (no READ on the topic): not stored.
            (("secret".to_string(), 0), None),
        ]
        .into();
        let o = judge(asked(), Some(why.clone()), Some(back));
        assert_eq!(o.stored(), 2);
        let refused: Vec<_> = o.refused().collect();
        assert_eq!(refused, [&("secret".to_string(), 0, 30, Some(why.clone()))]);
        assert_eq!(o.error, Some(why));
    }

    #[test]
    fn an_older_offset_read_back_is_not_the_one_committed() {
        let back: HashMap<_, _> = [
            (("orders".to_string(), 0), Some(9)),
            (("orders".to_string(), 1), Some(20)),
        ]
        .into();
        let o = judge(asked(), Some("refused".into()), Some(back));
        let refused: Vec<_> = o.refused().map(|p| (p.0.as_str(), p.1)).collect();
        assert_eq!(
            refused,
            [("orders", 0), ("secret", 0)],
            "missing counts too"
        );
    }

    #[test]
    fn without_a_read_back_a_failed_commit_stored_nothing() {
        let o = judge(asked(), Some("coordinator not available".into()), None);
        assert_eq!(o.stored(), 0);
        assert!(
            o.refused()
                .all(|p| p.3.as_deref() == Some("coordinator not available"))
        );
    }
}
