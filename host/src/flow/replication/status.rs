//! What a replication task reports to `/status` (its partitions, their positions, lag and
//! how long their progress has gone unstored), and its graceful stop's drain.

use super::book::Book;
use super::core::{Core, Member, offsets_tpl};
use crate::flow::telemetry::{Counter, MemberStatus, PartitionStatus};
use crate::kafka::clients::{cached_watermarks, group_generation};
use rdkafka::TopicPartitionList;
use rdkafka::consumer::Consumer;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

impl Core {
    pub(super) fn publish_status(&mut self, consumer: &Member, now: Instant) {
        let mut partitions: BTreeMap<String, BTreeMap<i32, PartitionStatus>> = BTreeMap::new();
        let mut oldest: Option<Instant> = None;
        for p in self.book.partitions() {
            // Where mirroring has got: before the first record since the assignment (a quiet
            // partition handed over), the stored progress read at the assignment — its lag
            // is known, not blank.
            let position = p
                .progress
                .committable()
                .or(p.progress.committed())
                .or(p.progress.stored())
                .or(p.expect);
            let end = cached_watermarks(consumer.client(), &p.topic, p.partition).map(|(_, h)| h);
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
        let member = MemberStatus {
            partitions,
            oldest_unacked_ms: oldest.map(|o| now.saturating_duration_since(o).as_millis() as i64),
            rebalances: self.rebalances,
            generation: group_generation(consumer),
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
