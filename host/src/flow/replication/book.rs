//! The data plane's bookkeeping as a pure state machine: which partitions the replicator
//! owns, where each one's records go, whether it flows, what its progress is, and what the
//! consumer must be told (pause, resume, seek) so that **no record the consumer handed out
//! is ever lost**: every record is either sent, skipped (`on_unproducible = "skip"`), or
//! declined — and a declined record's partition is sought back to it before it flows
//! again. The shell ([`super::core`]) applies the [`Effect`]s to librdkafka.
//!
//! A partition flows when it is routed, not stopped at a record the target will not take,
//! not waiting to retry a transient refusal, not draining its records in flight towards a
//! previous target, and the target has room. Every change of those goes through one
//! function (`settle`), which pauses or resumes it, seeks it back to the first declined
//! record, switches its target once its records in flight are acked (so delivery reports,
//! matched in order per partition, never mix two target topics), and unblocks it once the
//! records abandoned after a failed one have reported.

pub use super::effects::{Ack, Effect, Offer, Refusal};
pub use super::orphans::Orphans;
use super::progress::InFlight;
use super::table::{Partition, SlotKey, Stopped, Table};
use super::truncation::{self, Truncation};
use crate::config::{OnSourceTruncation, OnUnproducible};
use crate::flow::Routes;
use crate::flow::telemetry::{Paused, now_ms};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a transient refusal (a partition the producer does not know yet, purged
/// records) waits before the record is tried again.
pub const RETRY_TRANSIENT: Duration = Duration::from_secs(1);

/// How long after a rebalance a partition kept through it may still be handed out from a
/// stale position by librdkafka (it resumes the whole assignment around the rebalance).
pub const STALE_WINDOW: Duration = Duration::from_secs(30);

/// The book's limits.
#[derive(Debug, Clone)]
pub struct BookSettings {
    /// Unacknowledged records at most.
    pub max_in_flight: usize,
    /// What happens to a record the target will not take.
    pub on_unproducible: OnUnproducible,
    /// What happens to a record a transform fails on.
    pub on_transform_error: OnUnproducible,
    /// How often a partition stopped at such a record tries it again.
    pub retry_paused_every: Duration,
    /// What happens when a source partition lost records before they were mirrored.
    pub on_source_truncation: OnSourceTruncation,
    /// Whether the consumer starts a partition without stored progress at its end
    /// (`start_offset = "latest"`): librdkafka then also answers an out-of-range position
    /// with the end, so records after the lost range are sought back to.
    pub start_latest: bool,
}

/// The bookkeeping of one replicator.
#[derive(Debug)]
pub struct Book {
    settings: BookSettings,
    table: Table,
    routes: Routes,
    in_flight: usize,
    backpressure: bool,
    effects: Vec<Effect>,
    fatal: Option<String>,
}

fn first(a: Option<i64>, b: i64) -> Option<i64> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl Book {
    /// An empty book.
    pub fn new(settings: BookSettings) -> Self {
        Book {
            settings,
            table: Table::default(),
            routes: Routes::new(),
            in_flight: 0,
            backpressure: false,
            effects: Vec::new(),
            fatal: None,
        }
    }

    /// What the consumer and the sync sender must be told since the last call.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// Why the producer became unusable, once.
    pub fn take_fatal(&mut self) -> Option<String> {
        self.fatal.take()
    }

    /// Records in flight over all partitions.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether the target has no room (the flowing partitions are paused).
    pub fn backpressure(&self) -> bool {
        self.backpressure
    }

    /// Every owned partition.
    pub fn partitions(&self) -> impl Iterator<Item = &Partition> {
        self.table.iter()
    }

    /// How many partitions are owned.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no partition is owned.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The partition's state in words, for `/status`.
    pub fn state_of(p: &Partition) -> &'static str {
        if p.route.is_none() {
            "waiting"
        } else if p.stopped.is_some() {
            "paused"
        } else if p.retry.is_some() {
            "retrying"
        } else if p.target != p.route {
            "switching"
        } else {
            "mirroring"
        }
    }

    fn route_of(&self, topic: &str, partition: i32) -> Option<Arc<str>> {
        self.routes
            .get(topic)
            .filter(|r| partition < r.partitions)
            .map(|r| Arc::from(r.target.as_str()))
    }

    /// The group assigned `partitions` in `generation`; `floors` gives what this instance
    /// is known to have mirrored of a partition before (see [`Orphans`]).
    pub fn assign(
        &mut self,
        partitions: &[(String, i32)],
        generation: i32,
        mut floors: impl FnMut(&str, i32) -> Option<i64>,
    ) {
        for (topic, partition) in partitions {
            if self.table.get_by_name_mut(topic, *partition).is_some() {
                continue;
            }
            let route = self.route_of(topic, *partition);
            let key = self.table.insert(topic, *partition);
            let Some(p) = self.table.get_mut(key) else {
                continue;
            };
            p.generation = generation;
            p.target = route.clone();
            p.route = route;
            p.floor = floors(topic, *partition);
            self.effects.push(Effect::Started {
                key,
                topic: p.topic.clone(),
                partition: p.partition,
                generation,
            });
            // librdkafka keeps the application's pause of a partition across an unassign
            // and a new assign: the new partition is paused or resumed explicitly.
            let flows = self.should_flow(key);
            if let Some(p) = self.table.get_mut(key) {
                p.paused = flows;
            }
            self.settle(key);
        }
    }

    /// The keys of the owned partitions among `partitions`.
    pub fn keys_of(&mut self, partitions: &[(String, i32)]) -> Vec<SlotKey> {
        partitions
            .iter()
            .filter_map(|(t, p)| self.table.get_by_name_mut(t, *p).map(|p| p.key))
            .collect()
    }

    /// Records in flight of the partitions `keys`.
    pub fn in_flight_of(&mut self, keys: &[SlotKey]) -> usize {
        keys.iter()
            .filter_map(|k| self.table.get_mut(*k).map(|p| p.progress.in_flight()))
            .sum()
    }

    /// The partitions `partitions` go; returns (topic, partition, committable offset) of
    /// each, for the caller to remember when the assignment was `lost`.
    pub fn remove(&mut self, partitions: &[(String, i32)]) -> Vec<(Arc<str>, i32, i64)> {
        let mut gone = Vec::new();
        for (topic, partition) in partitions {
            if let Some(p) = self.table.remove(topic, *partition) {
                self.effects.push(Effect::Retired(p.key));
                if let Some(at) = p.progress.committable() {
                    gone.push((p.topic.clone(), p.partition, at));
                }
            }
        }
        gone
    }

    /// New routes from discovery; returns the routed topics (the subscription).
    pub fn set_routes(&mut self, routes: Routes) -> Vec<String> {
        self.routes = routes;
        let keys: Vec<SlotKey> = self.table.iter().map(|p| p.key).collect();
        for key in keys {
            let Some((topic, partition)) = self
                .table
                .get_mut(key)
                .map(|p| (p.topic.clone(), p.partition))
            else {
                continue;
            };
            let route = self.route_of(&topic, partition);
            if let Some(p) = self.table.get_mut(key) {
                p.route = route;
            }
            self.settle(key);
        }
        self.routes.keys().cloned().collect()
    }

    /// Where the partition `topic`/`partition` starts without stored progress, if its
    /// route says (a topic failed back).
    pub fn route_start(&self, topic: &str, partition: i32) -> Option<i64> {
        self.routes.get(topic)?.start_of(partition)
    }

    /// The group's stored position of the partition `topic`/`partition` when it was
    /// assigned: the first record handed out is checked against it (see [`truncation`]).
    pub fn expect(&mut self, topic: &str, partition: i32, stored: i64) {
        if let Some(p) = self.table.get_by_name_mut(topic, partition)
            && p.progress.next().is_none()
        {
            p.expect = Some(stored);
        }
    }

    /// Whether a partition without stored progress starts at its log's end.
    pub fn starts_latest(&self) -> bool {
        self.settings.start_latest
    }

    /// The partition `topic`/`partition`, just assigned, is read from `at` (its log start:
    /// the stored position lies outside the log).
    pub fn read_from(&mut self, topic: &str, partition: i32, at: i64) {
        if let Some(p) = self.table.get_by_name_mut(topic, partition)
            && p.progress.next().is_none()
        {
            self.effects
                .push(Effect::Seek(p.topic.clone(), p.partition, at));
        }
    }

    /// The partition `topic`/`partition`, just assigned without stored progress, starts at
    /// `at` (its end, under "latest"): committable from now on, though no record came yet;
    /// `seek`: the consumer is sent there.
    pub fn start_from(&mut self, topic: &str, partition: i32, at: i64, seek: bool) {
        if let Some(p) = self.table.get_by_name_mut(topic, partition)
            && p.progress.next().is_none()
            && p.expect.is_none()
            && p.floor.is_none()
        {
            p.progress.start_at(at);
            if seek {
                self.effects
                    .push(Effect::Seek(p.topic.clone(), p.partition, at));
            }
        }
    }

    /// What to do with the record at `offset` of `topic`/`partition`, with no record
    /// ever lost at the source.
    #[cfg(test)]
    pub fn offer(&mut self, topic: &str, partition: i32, offset: i64) -> Offer {
        self.offer_at(topic, partition, offset, || None, Instant::now())
    }

    /// What to do with the record at `offset` of `topic`/`partition`; `range` gives the
    /// partition's log range, (log start, end), as the fetch that brought the record saw it
    /// (asked only when the record is not the one expected).
    pub fn offer_at(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        range: impl FnOnce() -> Option<(i64, i64)>,
        now: Instant,
    ) -> Offer {
        let room = self.in_flight < self.settings.max_in_flight;
        let start_latest = self.settings.start_latest;
        let mut range = Some(range);
        let mut seen: Option<(i64, i64)> = None;
        let mut log_range = move || {
            if let Some(f) = range.take() {
                seen = f();
            }
            seen
        };
        let (flows, judged) = match self.table.get_by_name_mut(topic, partition) {
            None => return Offer::Declined,
            Some(p) => {
                if let Some(floor) = p.floor.take()
                    && offset < floor
                    && p.progress.in_flight() == 0
                {
                    // Mirrored by this instance before the assignment was lost: skip
                    // forward to where it had got.
                    p.progress.start_at(floor);
                    p.skip_below = Some(floor);
                    self.effects
                        .push(Effect::Seek(p.topic.clone(), p.partition, floor));
                    return Offer::Declined;
                }
                if let Some(n) = p.progress.next().filter(|n| offset < *n) {
                    if p.awaiting.is_some_and(|a| offset > a)
                        || p.progress.blocked_at().is_some_and(|b| offset > b)
                    {
                        // Fetched before the seek back (to the new log's start) took
                        // effect.
                        return Offer::Declined;
                    }
                    let range = log_range();
                    // Within a while of a rebalance the partition was kept through,
                    // librdkafka may resume it from a stale position (its first fetch's
                    // start: librdkafka #4637, #4686) and hand out records this task
                    // mirrored already. Such a record, while the log still holds `n` (or
                    // its range is unknown: an error answer), is not mirrored again: the
                    // partition is sought to where it goes on, once per stale stretch.
                    // Outside that window (or below a position the log no longer holds)
                    // it is a log started again. The window is what keeps a topic created
                    // again and refilled past `n` from passing for a stale fetch.
                    let stale_window = p.stale_until.is_some_and(|until| now < until);
                    let spans = range.is_none_or(|(low, high)| low <= n && n <= high);
                    if stale_window && spans {
                        let stretch = p
                            .stale_seek
                            .is_some_and(|(to, from)| to == n && offset > from);
                        if !stretch {
                            p.stale_seek = Some((n, offset));
                            p.skip_below = Some(n);
                            self.effects
                                .push(Effect::Seek(p.topic.clone(), p.partition, n));
                            tracing::debug!(
                                topic,
                                partition,
                                offset,
                                next = n,
                                "a stale fetch after a rebalance: sought forward, not mirrored again"
                            );
                        }
                        return Offer::Declined;
                    }
                    if range.is_none() && p.skip_below.is_some_and(|f| offset < f) {
                        // Handed out before the seek forward took effect.
                        return Offer::Declined;
                    }
                    // librdkafka hands out records in order and never one before the last
                    // it handed out, but after resetting a position the log no longer
                    // holds: the log started again below the records done.
                    let key = p.key;
                    let low = if start_latest {
                        range.map(|(low, _)| low).filter(|low| *low >= 0)
                    } else {
                        None
                    };
                    return self.log_restarted(key, n, offset, low, now);
                }
                p.skip_below = None;
                // Where the partition should go on: at the record it was sought back to,
                // after the last record done, or at the stored position it was assigned
                // with. A record past it is a gap: compaction or a transaction marker, or
                // records the source deleted before they were mirrored.
                let first = p.progress.next().is_none() && p.awaiting.is_none();
                let expected = match (p.awaiting, p.progress.next()) {
                    (Some(a), Some(n)) => Some(a.min(n)),
                    (a, n) => a.or(n),
                }
                .or(p.expect);
                let judged = expected.and_then(|e| {
                    // The log start tells a deletion from a gap; under "latest" it is also
                    // where a log started again is read from.
                    let ask = offset > e || (first && offset < e && start_latest);
                    let low = if ask {
                        log_range().map(|(low, _)| low).filter(|low| *low >= 0)
                    } else {
                        None
                    };
                    truncation::judge(e, offset, low, first).map(|t| (t, low))
                });
                p.expect = None;
                (p.key, judged)
            }
        };
        if let Some((t, low)) = judged
            && let Some(offer) = self.truncated(flows, offset, t, low, now)
        {
            return offer;
        }
        if let Some(p) = self.table.get_mut(flows) {
            match p.awaiting {
                // Fetched before the seek back to a declined record took effect.
                Some(a) if offset > a => return Offer::Declined,
                Some(_) => p.awaiting = None,
                None => {}
            }
        }
        if !self.should_flow(flows) {
            self.decline(flows, offset);
            return Offer::Declined;
        }
        if !room {
            return Offer::Full;
        }
        match self.table.get_mut(flows) {
            Some(p) => match &p.target {
                Some(target) => Offer::Send {
                    key: p.key,
                    target: target.clone(),
                    partition: p.partition,
                },
                None => Offer::Declined,
            },
            None => Offer::Declined,
        }
    }

    /// The record at `offset` of partition `key` is not produced now: the partition reads
    /// it again before it flows, and takes no later record before it.
    pub fn decline(&mut self, key: SlotKey, offset: i64) {
        if let Some(p) = self.table.get_mut(key) {
            p.rewind = first(p.rewind, offset);
            p.awaiting = first(p.awaiting, offset);
            if !p.paused {
                p.paused = true;
                self.effects
                    .push(Effect::Pause(p.topic.clone(), p.partition));
            }
        }
        // A partition that still flows (a record declined for itself: a transform's
        // unasked record) is sought back now.
        self.settle(key);
    }

    /// `record` of partition `key` was handed to the producer.
    pub fn sent(&mut self, key: SlotKey, record: InFlight) {
        if let Some(p) = self.table.get_mut(key) {
            p.progress.sent(record);
            self.in_flight += 1;
        }
    }

    /// The record at `offset` of partition `key` was dropped by a transform: done, with
    /// nothing produced (the offset syncs see the gap).
    pub fn dropped(&mut self, key: SlotKey, offset: i64) {
        if let Some(p) = self.table.get_mut(key) {
            p.progress.skipped(offset);
        }
    }

    /// What becomes of a record a transform fails on, from now on (`on_transform_error`,
    /// changed by a reload).
    pub fn transform_errors(&mut self, on_error: OnUnproducible) {
        self.settings.on_transform_error = on_error;
    }

    /// A transform failed on the record at `offset` of partition `key`: it is skipped or
    /// its partition stops there, as `on_transform_error` says.
    pub fn transform_failed(&mut self, key: SlotKey, offset: i64, reason: String, now: Instant) {
        let skip = self.settings.on_transform_error == OnUnproducible::Skip;
        self.stop_or_skip(key, offset, reason, skip, true, now);
    }

    /// The producer refused the record at `offset` of partition `key` outright.
    pub fn refused(&mut self, key: SlotKey, offset: i64, refusal: Refusal, now: Instant) {
        match refusal {
            Refusal::Unproducible(reason) => self.unproducible(key, offset, reason, now),
            Refusal::Transient(reason) => self.retry_later(key, offset, reason, now),
            Refusal::Fatal(reason) => {
                self.fatal.get_or_insert(reason);
                self.decline(key, offset);
            }
        }
    }

    /// The delivery report of the oldest record in flight of partition `key`: its target
    /// offset, or why it was refused. Returns the ack, if it was one.
    pub fn delivered(
        &mut self,
        key: SlotKey,
        result: Result<i64, Refusal>,
        now: Instant,
    ) -> Option<Ack> {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Err(Refusal::Fatal(reason)) = &result {
            // Whichever record it is reported for, the producer is unusable.
            self.fatal.get_or_insert_with(|| reason.clone());
        }
        let (record, counts) = {
            let p = self.table.get_mut(key)?; // handed over meanwhile
            let record = p.progress.delivered()?;
            (record, p.progress.counts(record.upstream))
        };
        let up = record.upstream;
        let ack = match result {
            Ok(down) => Some(Ack {
                key,
                upstream: up,
                downstream: down,
                timestamp: record.timestamp,
                counts,
            }),
            // Abandoned after an earlier refused record (a fatal one still blocks below).
            Err(Refusal::Unproducible(_) | Refusal::Transient(_)) if !counts => None,
            Err(Refusal::Unproducible(reason)) => {
                self.unproducible(key, up, reason, now);
                None
            }
            Err(Refusal::Transient(reason)) => {
                if let Some(p) = self.table.get_mut(key) {
                    p.progress.block(up);
                }
                self.retry_later(key, up, reason, now);
                None
            }
            Err(Refusal::Fatal(_)) => {
                // Never counted as done: the restart resumes at this record.
                if let Some(p) = self.table.get_mut(key) {
                    p.progress.block(up);
                    p.rewind = first(p.rewind, up);
                }
                None
            }
        };
        if self
            .table
            .get_mut(key)
            .is_some_and(|p| p.progress.in_flight() == 0)
        {
            self.settle(key);
        }
        ack
    }

    fn unproducible(&mut self, key: SlotKey, offset: i64, reason: String, now: Instant) {
        let skip = self.settings.on_unproducible == OnUnproducible::Skip;
        self.stop_or_skip(key, offset, reason, skip, false, now);
    }

    fn stop_or_skip(
        &mut self,
        key: SlotKey,
        offset: i64,
        reason: String,
        skip: bool,
        transform: bool,
        now: Instant,
    ) {
        let retry_at = now + self.settings.retry_paused_every;
        let Some(p) = self.table.get_mut(key) else {
            return;
        };
        if skip {
            p.progress.skipped(offset);
        } else {
            p.progress.block(offset);
            p.rewind = first(p.rewind, offset);
            p.stopped = Some(Stopped {
                paused: Paused {
                    offset,
                    reason: reason.clone(),
                    since_ms: now_ms(),
                },
                retry_at,
            });
        }
        self.effects.push(Effect::Unproducible {
            topic: p.topic.clone(),
            partition: p.partition,
            offset,
            reason,
            skipped: skip,
            transform,
        });
        self.settle(key);
    }

    /// Records of partition `key` before `offset` are gone from the source (`t`): the
    /// range is reported once, then the partition stops at `offset`
    /// (`on_source_truncation = "pause"`, never retried by itself) or goes on from the log
    /// start. Returns what becomes of the record, unless it goes on to be offered.
    fn truncated(
        &mut self,
        key: SlotKey,
        offset: i64,
        t: Truncation,
        low: Option<i64>,
        now: Instant,
    ) -> Option<Offer> {
        let pause = self.settings.on_source_truncation == OnSourceTruncation::Pause;
        let p = self.table.get_mut(key)?;
        let fresh = match &p.lost {
            Some(known) => t.beyond(known),
            None => Some(t.clone()),
        };
        if fresh.is_some() {
            p.lost = Some(t.clone());
            self.effects.push(Effect::Truncated {
                topic: p.topic.clone(),
                partition: p.partition,
                truncation: t.clone(),
                paused: pause,
            });
        }
        if pause {
            p.progress.block(offset);
            p.rewind = first(p.rewind, offset);
            p.stopped = Some(Stopped {
                paused: Paused {
                    offset,
                    reason: format!("{t} (on_source_truncation = \"pause\")"),
                    since_ms: now_ms(),
                },
                retry_at: now + truncation::NEVER,
            });
            self.settle(key);
            return Some(Offer::Declined);
        }
        if let Truncation::Deleted { to, .. } = t {
            // The lost range counts as done: progress goes on from the log start, and a
            // record the partition was sought back to that is gone is awaited no more.
            p.progress.skipped(to - 1);
            if p.awaiting.is_some_and(|a| a < to) {
                p.awaiting = None;
            }
            if self.settings.start_latest && offset > to {
                // librdkafka answered the lost position with the partition's end: the
                // records from the log start on are read again. The records in hand after
                // this one are not taken; the first one read again is at or before it
                // (the log start may be a marker or compacted away: then it is this one).
                let (topic, partition) = (p.topic.clone(), p.partition);
                self.decline(key, to);
                // (Declining may give the partition a new key.)
                if let Some(p) = self.table.get_by_name_mut(&topic, partition) {
                    p.awaiting = Some(offset);
                }
                return Some(Offer::Declined);
            }
        }
        if let Truncation::WentBack { .. } = t
            && let Some(low) = low.filter(|l| self.settings.start_latest && *l < offset)
        {
            // librdkafka answered the stored position, past the new log, with its
            // end: the new log is read from its start, the records in hand after
            // this one not taken until then.
            let (topic, partition) = (p.topic.clone(), p.partition);
            self.decline(key, low);
            if let Some(p) = self.table.get_by_name_mut(&topic, partition) {
                p.awaiting = Some(offset);
            }
            return Some(Offer::Declined);
        }
        None
    }

    /// The record at `offset` was handed out below `next`, the record after the last one
    /// done: the source partition's log started again. It is reported (nothing is known
    /// lost: what the old log held past `next` is unknown), then the partition stops there
    /// (`on_source_truncation = "pause"`) or, once the old log's records in flight are
    /// reported, is read again from the new log's start: the record in hand, or under
    /// "latest" (librdkafka answered with the new log's end) the log start `low`.
    fn log_restarted(
        &mut self,
        key: SlotKey,
        next: i64,
        offset: i64,
        low: Option<i64>,
        now: Instant,
    ) -> Offer {
        let t = Truncation::WentBack {
            from: next,
            to: offset,
        };
        let from = low.filter(|l| *l < offset).unwrap_or(offset);
        if self.settings.on_source_truncation == OnSourceTruncation::Continue
            && let Some(p) = self.table.get_mut(key)
        {
            p.progress.restart(from);
            p.lost = None;
        }
        if let Some(offer) = self.truncated(key, offset, t, None, now) {
            return offer; // paused there
        }
        let Some(p) = self.table.get_mut(key) else {
            return Offer::Declined;
        };
        let (topic, partition) = (p.topic.clone(), p.partition);
        self.decline(key, from);
        if let Some(p) = self.table.get_by_name_mut(&topic, partition) {
            p.awaiting = Some(offset);
        }
        Offer::Declined
    }

    fn retry_later(&mut self, key: SlotKey, offset: i64, reason: String, now: Instant) {
        let Some(p) = self.table.get_mut(key) else {
            return;
        };
        p.rewind = first(p.rewind, offset);
        p.retry = Some((now + RETRY_TRANSIENT, reason));
        if let Some(t) = &p.target {
            self.effects.push(Effect::RefreshMetadata(t.clone()));
        }
        self.settle(key);
    }

    /// The target has no room (`on`), or has room again: the flowing partitions are paused
    /// or resumed.
    pub fn set_backpressure(&mut self, on: bool) {
        if self.backpressure == on {
            return;
        }
        self.backpressure = on;
        self.settle_all();
    }

    /// Retries whose time has come; how long each partition's progress has been unstored.
    pub fn tick(&mut self, now: Instant) {
        let mut retrying = Vec::new();
        for p in self.table.iter_mut() {
            let idle = p.progress.in_flight() == 0;
            if p.stopped.as_ref().is_some_and(|s| s.retry_at <= now) && idle {
                p.stopped = None;
                retrying.push(Effect::Retrying(
                    p.topic.clone(),
                    p.partition,
                    p.progress.blocked_at().unwrap_or_default(),
                ));
            }
            if p.retry.as_ref().is_some_and(|(at, _)| *at <= now) && idle {
                p.retry = None;
            }
            if p.progress.unstored() {
                p.unstored_since.get_or_insert(now);
            } else {
                p.unstored_since = None;
            }
        }
        self.effects.extend(retrying);
        self.settle_all();
    }

    /// The progress of every partition that moved since its last commit, to commit:
    /// (topic, partition, offset).
    pub fn take_commits(&mut self) -> Vec<(Arc<str>, i32, i64)> {
        self.table
            .iter_mut()
            .filter_map(|p| {
                let at = p.progress.take_commit()?;
                Some((p.topic.clone(), p.partition, at))
            })
            .collect()
    }

    /// [`Self::take_commits`], and the position of every partition not committed for
    /// `every` (or not since it was assigned) though it did not move: its progress, else
    /// the stored position it was assigned with — so a quiet partition's committed offset
    /// never reaches the broker's offset retention (issue 34 item 2).
    pub fn take_commits_refreshing(
        &mut self,
        now: Instant,
        every: Duration,
    ) -> Vec<(Arc<str>, i32, i64)> {
        self.table
            .iter_mut()
            .filter_map(|p| {
                let due = p
                    .refreshed
                    .is_none_or(|t| now.saturating_duration_since(t) >= every);
                let at = match p.progress.take_commit() {
                    Some(at) => at,
                    // A partition stopped at a record is left alone: its stored position
                    // is where an operator may move it (`kmirror offsets`) while it waits.
                    None if due && p.stopped.is_none() => p
                        .progress
                        .committed()
                        .or(p.progress.stored())
                        .or(p.progress.committable())
                        .or(p.expect)?,
                    None => return None,
                };
                p.refreshed = Some(now);
                Some((p.topic.clone(), p.partition, at))
            })
            .collect()
    }

    /// The progress of every partition not confirmed stored, for the last commit of a stop.
    pub fn take_unstored(&mut self) -> Vec<(Arc<str>, i32, i64)> {
        self.table
            .iter_mut()
            .filter_map(|p| {
                let at = p.progress.take_unstored()?;
                Some((p.topic.clone(), p.partition, at))
            })
            .collect()
    }

    /// The progress of the partitions `keys` not confirmed stored, to commit before they
    /// are revoked: a commit taken earlier whose outcome is not known yet (or failed) is
    /// not counted on.
    pub fn take_commits_of(&mut self, keys: &[SlotKey]) -> Vec<(Arc<str>, i32, i64)> {
        keys.iter()
            .filter_map(|k| {
                let p = self.table.get_mut(*k)?;
                let at = p.progress.take_unstored()?;
                Some((p.topic.clone(), p.partition, at))
            })
            .collect()
    }

    /// The outcome of committing `offset` for `topic`/`partition`: stored, or to be
    /// committed again with the next commit.
    pub fn commit_result(&mut self, topic: &str, partition: i32, offset: i64, stored: bool) {
        if let Some(p) = self.table.get_by_name_mut(topic, partition) {
            if stored {
                p.progress.commit_succeeded(offset);
                if !p.progress.unstored() {
                    p.unstored_since = None;
                }
            } else {
                p.progress.commit_failed(offset);
                p.refreshed = None;
            }
        }
    }

    /// A rebalance at `now`: every partition this task keeps may be resumed from a stale
    /// position for a while ([`STALE_WINDOW`]).
    pub fn rebalanced(&mut self, now: Instant) {
        for p in self.table.iter_mut() {
            p.stale_until = Some(now + STALE_WINDOW);
        }
    }

    /// After a cooperative rebalance that kept partitions (`assigned` are the new ones):
    /// librdkafka pauses and resumes the whole assignment around it and may restart a kept
    /// partition's fetch from a stale start — its first fetch's position, the log start
    /// when nothing was stored (librdkafka #4637) — which would hand out records already
    /// done and look like a log started again. Each kept partition that flows is sought to
    /// where it goes on (what was fetched before is dropped by the seek).
    pub fn reseek_kept(&mut self, assigned: &[(String, i32)]) {
        for p in self.table.iter_mut() {
            let new = assigned
                .iter()
                .any(|(t, n)| **t == *p.topic && *n == p.partition);
            if new || p.awaiting.is_some() || p.rewind.is_some() || p.stopped.is_some() {
                continue;
            }
            if let Some(next) = p.progress.next() {
                self.effects
                    .push(Effect::Seek(p.topic.clone(), p.partition, next));
            }
        }
    }

    /// Every partition whose progress is not stored is committed again with the next
    /// commit (after a rebalance: what a stale generation refused, the current one stores).
    pub fn recommit_unstored(&mut self) {
        for p in self.table.iter_mut() {
            if p.progress.unstored()
                && let Some(c) = p.progress.committed()
            {
                p.progress.commit_failed(c);
            }
        }
    }

    fn should_flow(&mut self, key: SlotKey) -> bool {
        let backpressure = self.backpressure;
        self.table.get_mut(key).is_some_and(|p| {
            let idle = p.progress.in_flight() == 0;
            p.route.is_some()
                && p.stopped.is_none()
                && p.retry.is_none()
                && !backpressure
                && (p.target == p.route || idle)
                && (p.progress.blocked_at().is_none() || idle)
        })
    }

    fn settle_all(&mut self) {
        let keys: Vec<SlotKey> = self.table.iter().map(|p| p.key).collect();
        for key in keys {
            self.settle(key);
        }
    }

    /// Pauses or resumes partition `key` as its state says; on resuming, switches its
    /// target (a new key) and unblocks it (both only once nothing is in flight, which
    /// flowing implies then), and seeks it back to its first declined record.
    fn settle(&mut self, key: SlotKey) {
        let flow = self.should_flow(key);
        let Some(p) = self.table.get_mut(key) else {
            return;
        };
        if !flow {
            if !p.paused {
                p.paused = true;
                self.effects
                    .push(Effect::Pause(p.topic.clone(), p.partition));
            }
            return;
        }
        if let Some(b) = p.progress.blocked_at() {
            p.progress.unblock();
            p.rewind = first(p.rewind, b);
        }
        let (topic, partition, generation) = (p.topic.clone(), p.partition, p.generation);
        let rewind = p.rewind.take();
        let paused = std::mem::replace(&mut p.paused, false);
        let switch = p.target != p.route;
        if switch {
            let had = p.target.is_some();
            p.target = p.route.clone();
            if had && let Some(new) = self.table.rekey(key) {
                self.effects.push(Effect::Retired(key));
                self.effects.push(Effect::Started {
                    key: new,
                    topic: topic.clone(),
                    partition,
                    generation,
                });
            }
        }
        if let Some(at) = rewind {
            // Records after it fetched before the seek takes effect (a batch in hand) are
            // not taken: they would move progress past the records read again, and those
            // would then look like a log started again.
            if let Some(p) = self.table.get_by_name_mut(&topic, partition) {
                p.awaiting = first(p.awaiting, at);
            }
            self.effects
                .push(Effect::Seek(topic.clone(), partition, at));
        }
        if paused {
            self.effects.push(Effect::Resume(topic, partition));
        }
    }
}

#[cfg(test)]
mod tests;
