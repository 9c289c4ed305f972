//! Reading both sides of a partition for the comparison (`kmirror verify` and the
//! background audit): a source range, and the target records its mapped copies lie among.

use super::{Carried, PartitionReport, Seen, compare_linked};
use crate::kafka::clients::headers_of;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};

/// How long reading one range may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How the readers read: to a partition's end, and from its log start when a record asked
/// for was deleted (the missing ones are then named). `read_committed` (the clients'
/// default): aborted records and transaction markers are not records.
pub const READER: &[(&str, &str)] = &[
    ("enable.partition.eof", "true"),
    ("auto.offset.reset", "earliest"),
];

/// One partition as compared: the source partition and its copy.
#[derive(Debug, Clone, Copy)]
pub struct Pair<'a> {
    /// The source topic.
    pub topic: &'a str,
    /// Its name on the target.
    pub target: &'a str,
    /// The partition (the same on both sides).
    pub partition: i32,
}

/// Where the map places a source record on the target (`None`: not exactly).
pub type Place<'a> = &'a (dyn Fn(i64) -> Option<i64> + Sync);

/// Whether the map links two placed source records into one writer's stretch.
pub type Linked<'a> = &'a (dyn Fn(i64, i64) -> bool + Sync);

/// Where a partition's comparison stands between stretches (and, for the audit, between
/// passes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    /// The target offset just after the last placed record compared (the next stretch's
    /// target records start there, so that one between two stretches is still found
    /// extra); `None` before the first.
    pub next_target: Option<i64>,
    /// Whether the last source record compared was one the map does not place.
    pub ends_unplaced: bool,
    /// The last source record compared that the map places.
    pub last_placed: Option<i64>,
}

/// Compares source offsets `from..to` of `pair`, `stretch` source offsets at a time (the
/// records of one stretch are held in memory), placing each with `place` (its exact target
/// offset) and `linked` (whether the map links two placed records: see
/// [`compare_linked`]); adds the verdict to `report` and calls `advanced` with each
/// stretch's length.
#[allow(clippy::too_many_arguments)]
pub async fn check_range(
    (source, target): (&StreamConsumer, &StreamConsumer),
    pair: Pair<'_>,
    (from, to): (i64, i64),
    stretch: i64,
    (place, linked): (Place<'_>, Linked<'_>),
    covered: Option<i64>,
    position: &mut Position,
    report: &mut PartitionReport,
    advanced: &mut (dyn FnMut(i64) + Send),
) -> Result<(), String> {
    let mut at = from;
    while at < to {
        let stretch_end = (at + stretch.max(1)).min(to);
        let records = read_range(source, pair.topic, pair.partition, at, stretch_end).await?;
        let first = position
            .next_target
            .or_else(|| records.iter().find_map(|s| place(s.offset)));
        let last = records.iter().rev().find_map(|s| place(s.offset));
        let on_target = match (first, last) {
            (Some(a), Some(b)) if b >= a => {
                read_range(target, pair.target, pair.partition, a, b + 1).await?
            }
            _ => Vec::new(),
        };
        if let Some(b) = last {
            position.next_target = Some(b + 1);
        }
        let carried = Carried {
            after_unplaced: position.ends_unplaced,
            last_placed: position.last_placed,
        };
        let verdict = compare_linked(records, on_target, place, linked, covered, carried);
        position.ends_unplaced = verdict.ends_unplaced;
        position.last_placed = verdict.last_placed.or(position.last_placed);
        report.add(verdict);
        advanced(stretch_end - at);
        at = stretch_end;
    }
    Ok(())
}

/// The records of `topic`[`partition`] at offsets `from..to`, in order.
pub async fn read_range(
    consumer: &StreamConsumer,
    topic: &str,
    partition: i32,
    from: i64,
    to: i64,
) -> Result<Vec<Seen>, String> {
    let mut out = Vec::new();
    if from >= to {
        return Ok(out);
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(from))
        .map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + READ_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let next = tokio::time::timeout(left, consumer.recv())
            .await
            .map_err(|_| {
                format!("{topic}[{partition}] not read from {from} to {to} within {READ_TIMEOUT:?}")
            })?;
        match next {
            Ok(m) => {
                let behind = out.last().map_or(from, |l: &Seen| l.offset + 1);
                if m.topic() != topic || m.partition() != partition || m.offset() < behind {
                    continue; // fetched for an earlier range of this reader
                }
                if m.offset() >= to {
                    break;
                }
                out.push(Seen {
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    headers: headers_of(&m)
                        .map(|(k, v)| (k.into_owned(), v.map(<[u8]>::to_vec)))
                        .collect(),
                    timestamp: m.timestamp().to_millis(),
                    log_append_time: matches!(m.timestamp(), rdkafka::Timestamp::LogAppendTime(_)),
                });
                if m.offset() + 1 >= to {
                    break;
                }
            }
            // The end of what the partition holds (a range ending in markers or aborted
            // records reaches it before `to`).
            Err(KafkaError::PartitionEOF(p)) if p == partition => break,
            Err(KafkaError::PartitionEOF(_)) => continue, // an earlier range's
            Err(e) => return Err(format!("reading {topic}[{partition}]: {e}")),
        }
    }
    consumer.unassign().map_err(|e| e.to_string())?;
    Ok(out)
}
