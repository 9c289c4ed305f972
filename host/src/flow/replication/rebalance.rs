//! The group's rebalances as the data plane takes them: partitions assigned start in the
//! book (with what this instance remembers of them), partitions revoked are drained and
//! their progress committed before they go — unless the assignment was lost.

use super::core::{Core, Member, offsets_tpl, pairs};
use super::worker::log_bounds;
use crate::kafka::clients::{cached_watermarks, group_generation};
use crate::kafka::commit::commit_sync;
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};

/// How long a revocation waits for the revoked partitions' records in flight.
const REVOKE_DRAIN: Duration = Duration::from_secs(10);
/// How long an assignment waits for the assigned partitions' stored progress.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an assignment waits for a returning partition's log range.
const WATERMARKS_TIMEOUT: Duration = Duration::from_secs(2);

impl Core {
    /// The group assigned `tpl` to this member (or a single instance's task took it), with
    /// the partitions' stored progress if it was read already.
    pub(super) fn assign(
        &mut self,
        consumer: &Member,
        tpl: &TopicPartitionList,
        stored: Option<TopicPartitionList>,
    ) {
        let partitions = pairs(tpl);
        if self.generation.is_none() {
            self.group_generation = group_generation(consumer);
        }
        if self.stopping && !partitions.is_empty() {
            // A stopping task would mirror what it takes with the configuration it stops
            // with (a reload restarting the flow: the old record transforms) until its turn
            // to leave. Taken paused and never read, such a partition waits for its next
            // owner, from its stored progress.
            if let Err(e) = consumer.pause(tpl) {
                self.telemetry
                    .note_error("pause partitions assigned while stopping", "kafka", &e);
            }
            let names: Vec<String> = partitions
                .iter()
                .map(|(t, p)| format!("{t}[{p}]"))
                .collect();
            tracing::info!(flow = %self.settings.flow, partitions = %names.join(", "), "assigned to a stopping task: not taken; left paused for the next owner");
            self.book.recommit_unstored();
            return;
        }
        let generation = self.generation.or(self.group_generation).unwrap_or(-1);
        let now = Instant::now();
        {
            let mut orphans = self.orphans.lock().unwrap_or_else(|e| e.into_inner());
            // Only a floor the partition's log still spans: a source topic recreated
            // meanwhile is mirrored from its stored progress. The log's range as this task
            // last fetched it, or asked for (the partition may come back to a sibling task,
            // which never fetched it); unknown, the floor is not trusted.
            self.book.assign(&partitions, generation, |t, p| {
                let floor = orphans.take(t, p, now)?;
                let (low, high) = cached_watermarks(consumer.client(), t, p)
                    .or_else(|| consumer.fetch_watermarks(t, p, WATERMARKS_TIMEOUT).ok())?;
                (low..=high).contains(&floor).then_some(floor)
            });
        }
        // The positions the partitions start from: the first record of each is checked
        // against it, so records the source deleted meanwhile are not passed over.
        let stored = match stored {
            Some(stored) => Ok(stored),
            None => consumer.committed_offsets(tpl.clone(), COMMITTED_TIMEOUT),
        };
        match stored {
            Ok(stored) => {
                let mut positions = Vec::new();
                // Partitions whose stored progress could not be read: not "none stored".
                let mut unknown = Vec::new();
                // None stored, and the route says where they start (failed back).
                let mut routed = Vec::new();
                for e in stored.elements() {
                    if e.error().is_err() {
                        unknown.push((e.topic().to_string(), e.partition(), -1));
                    } else if let Offset::Offset(at) = e.offset() {
                        self.book.expect(e.topic(), e.partition(), at);
                        positions.push((e.topic().to_string(), e.partition(), at));
                    } else if let Some(at) = self.book.route_start(e.topic(), e.partition()) {
                        tracing::info!(flow = %self.settings.flow, topic = e.topic(), partition = e.partition(), offset = at, "failed back: the partition starts where the failover left it");
                        self.book.start_from(e.topic(), e.partition(), at, true);
                        routed.push((e.topic().to_string(), e.partition(), at));
                    }
                }
                if self.book.starts_latest() {
                    self.outside_the_log(consumer, &positions);
                    let known: Vec<_> = positions
                        .iter()
                        .chain(&unknown)
                        .chain(&routed)
                        .cloned()
                        .collect();
                    self.start_at_the_end(consumer, tpl, &known);
                }
            }
            Err(e) => self.telemetry.note_error(
                "read the assigned partitions' stored progress",
                "kafka",
                &e,
            ),
        }
        if self.generation.is_none() {
            // A group's rebalance: kept partitions go on where they got.
            self.book.reseek_kept(&partitions);
            self.book.rebalanced(now);
        }
        self.apply(consumer);
        // What a stale generation refused is stored by this one.
        self.book.recommit_unstored();
        self.rebalances += 1;
        let names: Vec<String> = partitions
            .iter()
            .map(|(t, p)| format!("{t}[{p}]"))
            .collect();
        tracing::info!(flow = %self.settings.flow, partitions = names.len(), assigned = %names.join(", "), owned = self.book.len(), generation, "partitions assigned to this instance");
    }

    /// Under `start_offset = "latest"`, librdkafka answers a stored position its log no
    /// longer spans (records deleted before they were mirrored, or the topic created
    /// again) with the log's end, and hands out nothing until a new record arrives: what
    /// lies between the log start and the end would wait unmirrored, the loss unreported.
    /// Such partitions are read from their log start instead (one ListOffsets per leader
    /// for each end); the first record is judged against the stored position as always.
    fn outside_the_log(&mut self, consumer: &Member, positions: &[(String, i32, i64)]) {
        if positions.is_empty() {
            return;
        }
        let asked: Vec<(&str, i32)> = positions.iter().map(|(t, p, _)| (t.as_str(), *p)).collect();
        let starts = log_bounds(consumer, &asked, Offset::Beginning, &self.telemetry);
        let ends = log_bounds(consumer, &asked, Offset::End, &self.telemetry);
        for (topic, partition, at) in positions {
            let key = (topic.clone(), *partition);
            let (Some(low), Some(high)) = (starts.get(&key), ends.get(&key)) else {
                continue;
            };
            if at < low || at > high {
                tracing::info!(flow = %self.settings.flow, topic, partition, stored = at, log_start = low, log_end = high, "the stored position lies outside the partition's log: read from its start");
                self.book.read_from(topic, *partition, *low);
            }
        }
    }

    /// Under `start_offset = "latest"`, a partition without stored progress starts at its
    /// log's end as of now, and that position is committable at once: if the partition
    /// moves to another owner before its first record is mirrored, the next owner starts
    /// here, not at a later end past what arrived meanwhile (issue 34 item 5). `stored`
    /// names the partitions with stored progress, or whose progress could not be read
    /// (left to librdkafka: committing an end over an unread position would lose). A position
    /// the assignment names (a single instance's share) is taken as it is; otherwise the
    /// end is asked (one ListOffsets per leader) and the partition sought to it, so
    /// librdkafka's own reset cannot start it later.
    fn start_at_the_end(
        &mut self,
        consumer: &Member,
        tpl: &TopicPartitionList,
        stored: &[(String, i32, i64)],
    ) {
        let stored: std::collections::HashSet<(&str, i32)> =
            stored.iter().map(|(t, p, _)| (t.as_str(), *p)).collect();
        let mut ask = Vec::new();
        for e in tpl.elements() {
            if stored.contains(&(e.topic(), e.partition())) {
                continue;
            }
            match e.offset() {
                Offset::Offset(at) => self.book.start_from(e.topic(), e.partition(), at, false),
                _ => ask.push((e.topic().to_string(), e.partition())),
            }
        }
        if ask.is_empty() {
            return;
        }
        let asked: Vec<(&str, i32)> = ask.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        let ends = log_bounds(consumer, &asked, Offset::End, &self.telemetry);
        for (topic, partition) in &ask {
            if let Some(end) = ends.get(&(topic.clone(), *partition)) {
                self.book.start_from(topic, *partition, *end, true);
            }
        }
    }

    /// The group takes `tpl` from this member: their records in flight are awaited and
    /// their progress committed before they go — unless the assignment was lost, when no
    /// commit is allowed: then what was mirrored is remembered, so a partition that comes
    /// back to this instance before anyone stored more is not mirrored again.
    pub(super) fn revoke(&mut self, consumer: &Member, tpl: &TopicPartitionList) {
        let lost = consumer.assignment_lost();
        let partitions = pairs(tpl);
        let keys = self.book.keys_of(&partitions);
        if !lost {
            let deadline = Instant::now() + REVOKE_DRAIN.min(self.settings.drain_timeout);
            while Instant::now() < deadline && self.book.in_flight_of(&keys) > 0 {
                self.poll_producer(consumer, Duration::from_millis(10));
            }
            // A commit the committer took earlier (older offsets) must not reach the
            // coordinator after this one, and its outcome decides what is still unstored.
            consumer.context().committing().wait_idle(deadline);
            self.committed(consumer.context().take_commits());
            let commits = self.book.take_commits_of(&keys);
            if !commits.is_empty() {
                let tpl = offsets_tpl(&commits);
                let outcome = commit_sync(consumer, &tpl);
                tracing::debug!(flow = %self.settings.flow, outcome = ?outcome, "revoked partitions' progress committed");
                consumer.context().record_commit(outcome);
                // Recorded before the partitions go, so the outcome still finds them.
                self.committed(consumer.context().take_commits());
            }
        }
        let gone = self.book.remove(&partitions);
        if self.generation.is_none() {
            self.book.rebalanced(Instant::now());
            self.group_generation = group_generation(consumer);
        }
        if lost {
            let now = Instant::now();
            let mut orphans = self.orphans.lock().unwrap_or_else(|e| e.into_inner());
            for (t, p, at) in gone {
                orphans.remember(t, p, at, now);
            }
        }
        self.apply(consumer);
        self.rebalances += 1;
        let names: Vec<String> = partitions
            .iter()
            .map(|(t, p)| format!("{t}[{p}]"))
            .collect();
        tracing::info!(flow = %self.settings.flow, partitions = names.len(), revoked = %names.join(", "), lost, owned = self.book.len(), "partitions revoked from this instance");
    }
}
