//! What a replication task reports to `/status` (its partitions, their positions, lag and
//! how long their progress has gone unstored), and its graceful stop's drain.

use super::book::Book;
use super::core::{Core, Member, offsets_tpl};
use crate::flow::telemetry::{Counter, MemberStatus, PartitionStatus};
use crate::kafka::clients::cached_watermarks;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::Consumer;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Partitions whose log end is read again from librdkafka's cache per status tick at most:
/// librdkafka finds a partition's topic by a linear search of the consumer's topics, so
/// reading every end every tick cost time quadratic in the topics (at 5,000 topics per task
/// about a fifth of a core, on the thread that mirrors). Beyond this many partitions, each
/// end is up to (partitions / this) ticks old in `/status`.
const ENDS_PER_TICK: usize = 1_000;

/// Whether the `i`th of `count` partitions has its end read again in a tick that starts at
/// the `first`th: the [`ENDS_PER_TICK`] from there on, wrapping around.
fn read_again(i: usize, count: usize, first: usize) -> bool {
    (i + count - first) % count.max(1) < ENDS_PER_TICK
}

impl Core {
    pub(super) fn publish_status(&mut self, consumer: &Member, now: Instant) {
        let mut partitions: BTreeMap<String, BTreeMap<i32, PartitionStatus>> = BTreeMap::new();
        let mut oldest: Option<Instant> = None;
        let count = self.book.partitions().count();
        let first = if count > 0 { self.ends_from % count } else { 0 };
        self.ends_from = first + ENDS_PER_TICK;
        let fresh = |i: usize| read_again(i, count, first);
        let mut ends = std::mem::take(&mut self.ends);
        let mut kept = std::collections::HashMap::with_capacity(count);
        for (i, p) in self.book.partitions().enumerate() {
            // Where mirroring has got: before the first record since the assignment (a quiet
            // partition handed over), the stored progress read at the assignment — its lag
            // is known, not blank.
            let position = p
                .progress
                .committable()
                .or(p.progress.committed())
                .or(p.progress.stored())
                .or(p.expect);
            let key = (p.topic.clone(), p.partition);
            let end = match ends.remove(&key) {
                // An end not known last time is asked for again at once.
                Some(Some(end)) if !fresh(i) => Some(end),
                _ => cached_watermarks(consumer.client(), &p.topic, p.partition).map(|(_, h)| h),
            };
            kept.insert(key, end);
            if let Some(sent) = p.progress.oldest_sent() {
                oldest = Some(oldest.map_or(sent, |o| o.min(sent)));
            }
            let status = PartitionStatus {
                position,
                end,
                lag: end.zip(position).map(|(e, pos)| (e - pos).max(0)),
                in_flight: p.progress.in_flight(),
                state: Book::state_of(p),
                paused: p.stopped.as_ref().map(|s| s.paused.clone()),
                unstored_ms: p
                    .unstored_since
                    .map(|t| now.saturating_duration_since(t).as_millis() as i64),
            };
            partitions
                .entry(p.topic.to_string())
                .or_default()
                .insert(p.partition, status);
        }
        self.ends = kept;
        let member = MemberStatus {
            partitions,
            oldest_unacked_ms: oldest.map(|o| now.saturating_duration_since(o).as_millis() as i64),
            rebalances: self.rebalances,
            generation: self.group_generation,
        };
        let index = self.settings.member;
        self.telemetry.update(|s| {
            s.publish_member(index, Some(member));
            s.replicator_restarting = None;
        });
    }

    /// A graceful stop: waits until `deadline` for the records in flight and the offset
    /// syncs.
    pub fn drain(&mut self, consumer: &Member, deadline: Instant) {
        while self.book.in_flight() > 0 && Instant::now() < deadline {
            self.poll_producer(consumer, Duration::from_millis(20));
        }
        if self.book.in_flight() > 0 {
            tracing::warn!(flow = %self.settings.flow, in_flight = self.book.in_flight(), "records still in flight at the stop deadline; they will be mirrored again after a restart");
        }
        self.syncs
            .drain(deadline.saturating_duration_since(Instant::now()));
        self.telemetry
            .add(Counter::Records, std::mem::take(&mut self.records));
        self.telemetry
            .add(Counter::Bytes, std::mem::take(&mut self.bytes));
        self.telemetry
            .add(Counter::RecordsDropped, std::mem::take(&mut self.dropped));
    }

    /// The last commit of a stop: every partition's progress not confirmed stored (a
    /// commit taken earlier may have failed). Taken once no commit runs and its outcome
    /// was taken in.
    pub fn take_final_commits(&mut self) -> Option<TopicPartitionList> {
        let commits = self.book.take_unstored();
        (!commits.is_empty()).then(|| offsets_tpl(&commits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// However many partitions, each has its end read within ceil(count / ENDS_PER_TICK)
    /// ticks, and a tick reads at most ENDS_PER_TICK of them.
    #[test]
    fn every_end_is_read_again_within_a_bounded_number_of_ticks() {
        for count in [1, 7, ENDS_PER_TICK, ENDS_PER_TICK + 1, 5_003] {
            let ticks = count.div_ceil(ENDS_PER_TICK);
            let mut from = 0;
            let mut seen = vec![0; count];
            for _ in 0..ticks {
                let first = from % count;
                from = first + ENDS_PER_TICK;
                let read: Vec<usize> = (0..count)
                    .filter(|i| read_again(*i, count, first))
                    .collect();
                assert!(read.len() <= ENDS_PER_TICK, "{count}");
                for i in read {
                    seen[i] += 1;
                }
            }
            assert!(seen.iter().all(|n| *n >= 1), "{count}: {seen:?}");
        }
    }
}
