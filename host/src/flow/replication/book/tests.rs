//! The book driven like the data plane drives it: a simulated consumer (positions, pauses,
//! seeks, assignments) and a simulated producer (records in flight per target partition,
//! delivered in order per partition but in any order across partitions, refused now and
//! then), records dropped by a transform or failing in one, with rebalances (graceful and lost), target switches, routing changes, purges
//! after a fatal error (and the restart from stored progress), back-pressure, commits that
//! fail, and time passing — in every order proptest finds.
//!
//! Checked after every step: stored progress never passes a record that was neither acked
//! nor skipped. Checked at the end, once the faults stop: every partition is mirrored to
//! its end and stored there (nothing lost, nothing stuck).

use super::*;
use crate::flow::Route;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

type Tp = (String, i32);

const TOPICS: [&str; 2] = ["orders", "payments"];
const PARTITIONS: i32 = 2;

/// The source log of a partition: offsets with holes (compaction, transaction markers).
fn log(len: i64) -> Vec<i64> {
    (0..len).filter(|o| o % 7 != 3).collect()
}

struct Sim {
    book: Book,
    now: Instant,
    logs: BTreeMap<Tp, Vec<i64>>,
    /// Owned partitions: index into the log of the next record handed out, and paused.
    consumer: BTreeMap<Tp, (usize, bool)>,
    /// In flight per (target topic, partition): (key, upstream).
    producer: BTreeMap<(String, i32), VecDeque<(SlotKey, Tp, i64)>>,
    /// Stored progress (the group's committed offsets).
    stored: BTreeMap<Tp, i64>,
    /// Records done: acked (to any target) or skipped.
    done: BTreeSet<(Tp, i64)>,
    orphans: Orphans,
    /// librdkafka keeps a partition's application pause across an unassign and a new
    /// assign in the same consumer: the flags of partitions no longer assigned.
    kept_pauses: BTreeMap<Tp, bool>,
    routes: Routes,
    skip: bool,
    generation: i32,
}

fn settings(skip: bool) -> BookSettings {
    BookSettings {
        max_in_flight: 6,
        on_unproducible: if skip {
            OnUnproducible::Skip
        } else {
            OnUnproducible::Pause
        },
        on_transform_error: if skip {
            OnUnproducible::Skip
        } else {
            OnUnproducible::Pause
        },
        retry_paused_every: Duration::from_millis(300),
        on_source_truncation: OnSourceTruncation::Continue,
        start_latest: false,
    }
}

fn routes(target_of_orders: &str, payments: bool, partitions: i32) -> Routes {
    let mut r = Routes::new();
    r.insert("orders".into(), Route::new(target_of_orders, partitions));
    if payments {
        r.insert("payments".into(), Route::new("b.payments", PARTITIONS));
    }
    r
}

impl Sim {
    fn new(skip: bool) -> Sim {
        let mut logs = BTreeMap::new();
        for t in TOPICS {
            for p in 0..PARTITIONS {
                logs.insert((t.to_string(), p), log(25));
            }
        }
        let mut sim = Sim {
            book: Book::new(settings(skip)),
            now: Instant::now(),
            logs,
            consumer: BTreeMap::new(),
            producer: BTreeMap::new(),
            stored: BTreeMap::new(),
            done: BTreeSet::new(),
            orphans: Orphans::default(),
            kept_pauses: BTreeMap::new(),
            routes: routes("b.orders", true, PARTITIONS),
            skip,
            generation: 1,
        };
        sim.book.set_routes(sim.routes.clone());
        let all: Vec<Tp> = sim.logs.keys().cloned().collect();
        sim.assign(&all);
        sim
    }

    fn apply_effects(&mut self) {
        for e in self.book.take_effects() {
            match e {
                Effect::Pause(t, p) => {
                    if let Some(c) = self.consumer.get_mut(&(t.to_string(), p)) {
                        c.1 = true;
                    }
                }
                Effect::Resume(t, p) => {
                    if let Some(c) = self.consumer.get_mut(&(t.to_string(), p)) {
                        c.1 = false;
                    }
                }
                Effect::Seek(t, p, at) => {
                    let tp = (t.to_string(), p);
                    let idx = self.logs[&tp].partition_point(|o| *o < at);
                    if let Some(c) = self.consumer.get_mut(&tp) {
                        c.0 = idx;
                    }
                }
                Effect::Unproducible {
                    topic,
                    partition,
                    offset,
                    skipped: true,
                    ..
                } => {
                    self.done.insert(((topic.to_string(), partition), offset));
                }
                _ => {}
            }
        }
    }

    fn assign(&mut self, tps: &[Tp]) {
        self.generation += 1;
        let now = self.now;
        let orphans = &mut self.orphans;
        self.book
            .assign(tps, self.generation, |t, p| orphans.take(t, p, now));
        for tp in tps {
            let from = self.stored.get(tp).copied().unwrap_or(0);
            let idx = self.logs[tp].partition_point(|o| *o < from);
            let paused = self.kept_pauses.remove(tp).unwrap_or(false);
            self.consumer.insert(tp.clone(), (idx, paused));
        }
        self.apply_effects();
    }

    /// The consumer hands out the next record of the `pick`-th flowing partition.
    fn poll(&mut self, pick: usize, refuse: u8) {
        let flowing: Vec<Tp> = self
            .consumer
            .iter()
            .filter(|(tp, (i, paused))| !paused && *i < self.logs[*tp].len())
            .map(|(tp, _)| tp.clone())
            .collect();
        if flowing.is_empty() {
            return;
        }
        let tp = flowing[pick % flowing.len()].clone();
        let idx = self.consumer[&tp].0;
        let offset = self.logs[&tp][idx];
        self.consumer.get_mut(&tp).expect("owned").0 += 1;
        match self.book.offer(&tp.0, tp.1, offset) {
            Offer::Send {
                key,
                target,
                partition,
            } => match refuse {
                // The local queue stays full: the worker holds the record, then declines it.
                1 => self.book.decline(key, offset),
                2 => self.book.refused(
                    key,
                    offset,
                    Refusal::Transient("unknown partition".into()),
                    self.now,
                ),
                3 => self.book.refused(
                    key,
                    offset,
                    Refusal::Unproducible("too large".into()),
                    self.now,
                ),
                // A record transform dropped it: done, nothing produced.
                4 => {
                    self.book.dropped(key, offset);
                    self.done.insert((tp.clone(), offset));
                }
                // A record transform failed on it.
                5 => self
                    .book
                    .transform_failed(key, offset, "trapped".into(), self.now),
                _ => {
                    self.book.sent(
                        key,
                        InFlight {
                            upstream: offset,
                            timestamp: None,
                            sent: self.now,
                        },
                    );
                    self.producer
                        .entry((target.to_string(), partition))
                        .or_default()
                        .push_back((key, tp.clone(), offset));
                }
            },
            Offer::Full => {
                let key = self.book.keys_of(std::slice::from_ref(&tp))[0];
                self.book.decline(key, offset);
            }
            Offer::Declined => {}
        }
        self.apply_effects();
    }

    /// The target reports on the oldest record in flight of the `pick`-th busy partition.
    fn deliver(&mut self, pick: usize, outcome: u8) {
        let busy: Vec<(String, i32)> = self
            .producer
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        if busy.is_empty() {
            return;
        }
        let target = busy[pick % busy.len()].clone();
        let Some((key, tp, up)) = self.producer.get_mut(&target).and_then(|q| q.pop_front()) else {
            return;
        };
        let result = match outcome {
            1 => Err(Refusal::Unproducible("rejected".into())),
            2 => Err(Refusal::Transient("unknown partition".into())),
            _ => Ok(0),
        };
        if let Some(ack) = self.book.delivered(key, result, self.now)
            && ack.counts
        {
            self.done.insert((tp, up));
        }
        self.apply_effects();
        if self.book.take_fatal().is_some() {
            self.restart();
        }
    }

    /// A fatal producer error: librdkafka purges everything in flight, the member leaves
    /// (the revocation commits what is committable), and the replicator starts over from
    /// stored progress.
    fn fatal(&mut self) {
        let queued: Vec<(SlotKey, Tp, i64)> = self
            .producer
            .values_mut()
            .flat_map(std::mem::take)
            .collect();
        if queued.is_empty() {
            return;
        }
        let mut first = true;
        for (key, _, _) in queued {
            let refusal = if first {
                Refusal::Fatal("out of order sequence".into())
            } else {
                Refusal::Transient("purged".into())
            };
            first = false;
            self.book.delivered(key, Err(refusal), self.now);
        }
        self.apply_effects();
        assert!(self.book.take_fatal().is_some());
        self.restart();
    }

    fn restart(&mut self) {
        let owned: Vec<Tp> = self.consumer.keys().cloned().collect();
        let keys = self.book.keys_of(&owned);
        for (t, p, at) in self.book.take_commits_of(&keys) {
            self.store(&t, p, at);
        }
        // Reports still to come belong to the old producer and are dropped with it; the
        // new consumer has no pauses.
        self.producer.clear();
        self.kept_pauses.clear();
        self.book = Book::new(settings(self.skip));
        self.consumer.clear();
        self.book.set_routes(self.routes.clone());
        self.assign(&owned);
    }

    fn store(&mut self, topic: &str, partition: i32, at: i64) {
        let tp = (topic.to_string(), partition);
        let before = self.stored.insert(tp.clone(), at).unwrap_or(0);
        assert!(
            at >= before,
            "{tp:?}: stored progress went back from {before} to {at}"
        );
    }

    fn commit(&mut self, fail: bool) {
        for (t, p, at) in self.book.take_commits() {
            if fail {
                self.book.commit_result(&t, p, at, false);
            } else {
                self.store(&t, p, at);
                self.book.commit_result(&t, p, at, true);
            }
        }
    }

    /// The `pick`-th owned partition leaves: gracefully (its records in flight are awaited
    /// and its progress stored), or with the assignment lost.
    fn revoke(&mut self, pick: usize, lost: bool) {
        let owned: Vec<Tp> = self.consumer.keys().cloned().collect();
        if owned.is_empty() {
            return;
        }
        let tp = owned[pick % owned.len()].clone();
        let one = std::slice::from_ref(&tp);
        let keys = self.book.keys_of(one);
        if !lost {
            // Drain: the target acks what is in flight for this partition.
            while self.book.in_flight_of(&keys) > 0 {
                let Some(target) = self
                    .producer
                    .iter()
                    .find(|(_, q)| q.front().is_some_and(|r| keys.contains(&r.0)))
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                self.deliver_from(&target);
            }
            for (t, p, at) in self.book.take_commits_of(&keys) {
                self.store(&t, p, at);
            }
        }
        for (t, p, at) in self.book.remove(one) {
            if lost {
                self.orphans.remember(t, p, at, self.now);
            }
        }
        if let Some((_, paused)) = self.consumer.remove(&tp) {
            self.kept_pauses.insert(tp, paused);
        }
        self.apply_effects();
    }

    fn deliver_from(&mut self, target: &(String, i32)) {
        if let Some((key, tp, up)) = self.producer.get_mut(target).and_then(|q| q.pop_front()) {
            if let Some(ack) = self.book.delivered(key, Ok(0), self.now)
                && ack.counts
            {
                self.done.insert((tp, up));
            }
            self.apply_effects();
        }
    }

    fn assign_missing(&mut self) {
        let missing: Vec<Tp> = self
            .logs
            .keys()
            .filter(|tp| !self.consumer.contains_key(*tp))
            .cloned()
            .collect();
        if !missing.is_empty() {
            self.assign(&missing);
        }
    }

    fn set_routes(&mut self, r: Routes) {
        self.routes = r.clone();
        self.book.set_routes(r);
        self.apply_effects();
    }

    fn tick(&mut self, ms: u64) {
        self.now += Duration::from_millis(ms);
        self.book.tick(self.now);
        self.apply_effects();
    }

    /// Stored progress never passes a record that is not done.
    fn check(&self) {
        for (tp, at) in &self.stored {
            for o in self.logs[tp].iter().take_while(|o| **o < *at) {
                assert!(
                    self.done.contains(&(tp.clone(), *o)),
                    "{tp:?}: progress {at} stored past record {o}, which was neither acked nor skipped"
                );
            }
        }
    }

    /// The faults stop: everything is routed, delivered and stored.
    fn quiesce(&mut self) {
        self.book.set_backpressure(false);
        self.set_routes(routes("b.orders", true, PARTITIONS));
        self.assign_missing();
        for _ in 0..5000 {
            self.tick(400);
            let busy: Vec<(String, i32)> = self.producer.keys().cloned().collect();
            for t in busy {
                while self.producer.get(&t).is_some_and(|q| !q.is_empty()) {
                    self.deliver_from(&t);
                }
            }
            self.poll(0, 0);
            self.commit(false);
            let all_done = self.logs.iter().all(|(tp, l)| {
                self.consumer.get(tp).is_some_and(|c| c.0 >= l.len())
                    && self.stored.get(tp) == l.last().map(|o| o + 1).as_ref()
            });
            if all_done && self.book.in_flight() == 0 {
                break;
            }
        }
        for (tp, l) in &self.logs {
            let end = l.last().map(|o| o + 1);
            assert_eq!(
                self.stored.get(tp).copied(),
                end,
                "{tp:?} is stuck: consumer at {:?}, book {:?}",
                self.consumer.get(tp),
                self.book
                    .partitions()
                    .find(|p| *p.topic == *tp.0 && p.partition == tp.1)
                    .map(|p| (
                        Book::state_of(p),
                        p.paused,
                        p.rewind,
                        p.progress.committable()
                    ))
            );
            for o in l {
                assert!(
                    self.done.contains(&(tp.clone(), *o)),
                    "{tp:?}: record {o} was never mirrored"
                );
            }
        }
    }
}

fn run(ops: &[(u8, u8, u8)], skip: bool) {
    let mut sim = Sim::new(skip);
    for &(op, a, b) in ops {
        match op % 16 {
            0..=4 => sim.poll(a as usize, if b % 9 < 6 { 0 } else { b % 6 }),
            5..=8 => sim.deliver(a as usize, if b % 11 < 9 { 0 } else { 1 + b % 2 }),
            9 => sim.commit(b % 3 == 0),
            10 => sim.tick(u64::from(a) * 5),
            11 => sim.revoke(a as usize, b % 2 == 0),
            12 => sim.assign_missing(),
            13 => {
                let target = if a % 2 == 0 {
                    "b.orders"
                } else {
                    "b.orders.renamed"
                };
                let partitions = if b % 3 == 0 { 1 } else { PARTITIONS };
                sim.set_routes(routes(target, b % 4 != 1, partitions));
            }
            14 => {
                sim.book.set_backpressure(a % 2 == 0);
                sim.apply_effects();
            }
            _ => {
                if a % 8 == 0 {
                    sim.fatal();
                } else {
                    sim.book.recommit_unstored();
                }
            }
        }
        sim.check();
    }
    sim.quiesce();
    sim.check();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Whatever the order of records, reports, refusals, rebalances, switches, purges,
    /// back-pressure and commits: stored progress never passes an unfinished record, and
    /// once the faults stop every record is mirrored and its progress stored.
    #[test]
    fn never_loses_a_record_whatever_the_order(
        ops in proptest::collection::vec((0u8..16, any::<u8>(), any::<u8>()), 1..400),
        skip in any::<bool>(),
    ) {
        run(&ops, skip);
    }
}

#[test]
fn a_record_declined_while_another_waits_for_room_is_read_again() {
    // The finding this book replaced: the loop held one record, polled on, and dropped
    // what a newly flowing partition delivered meanwhile.
    let mut sim = Sim::new(false);
    sim.book.set_backpressure(true);
    sim.apply_effects();
    assert!(sim.consumer.values().all(|c| c.1), "every partition paused");
    // A partition assigned while the target has no room starts paused too; a record the
    // consumer had already fetched is declined and read again later.
    sim.revoke(0, false);
    sim.assign_missing();
    let tp = ("orders".to_string(), 0);
    let key = sim.book.keys_of(std::slice::from_ref(&tp))[0];
    assert_eq!(sim.book.offer("orders", 0, 0), Offer::Declined);
    sim.apply_effects();
    sim.consumer.get_mut(&tp).expect("owned").0 = 5; // the consumer moved past it
    sim.book.set_backpressure(false);
    sim.apply_effects();
    assert_eq!(
        sim.consumer[&tp],
        (0, false),
        "sought back to the declined record"
    );
    assert!(sim.book.in_flight_of(&[key]) == 0);
    sim.quiesce();
}

#[test]
fn purged_records_are_never_counted_as_done() {
    let mut sim = Sim::new(false);
    for _ in 0..6 {
        sim.poll(0, 0);
    }
    let sent = sim.book.in_flight();
    assert!(sent > 0);
    sim.fatal();
    sim.check();
    sim.quiesce();
}

#[test]
fn a_target_switch_waits_for_the_records_in_flight() {
    let mut sim = Sim::new(false);
    sim.poll(0, 0);
    sim.poll(0, 0);
    let tp = ("orders".to_string(), 0);
    assert_eq!(sim.producer[&("b.orders".to_string(), 0)].len(), 2);
    sim.set_routes(routes("b.orders.renamed", true, PARTITIONS));
    assert!(
        sim.consumer[&tp].1,
        "paused until its records in flight are acked"
    );
    assert_eq!(sim.book.offer("orders", 0, 2), Offer::Declined);
    sim.apply_effects();
    sim.deliver_from(&("b.orders".to_string(), 0));
    assert!(
        sim.consumer[&tp].1,
        "one record still in flight to the old target"
    );
    sim.deliver_from(&("b.orders".to_string(), 0));
    assert!(!sim.consumer[&tp].1, "switched and flowing");
    let Offer::Send { target, .. } = sim.book.offer("orders", 0, 2) else {
        panic!("flows")
    };
    assert_eq!(&*target, "b.orders.renamed");
}

#[test]
fn a_lost_partition_coming_back_skips_what_this_instance_mirrored() {
    let mut sim = Sim::new(false);
    for _ in 0..40 {
        sim.poll(0, 0);
        sim.deliver(0, 0);
    }
    let tp = ("orders".to_string(), 0);
    let mirrored = sim
        .book
        .partitions()
        .find(|p| &*p.topic == "orders" && p.partition == 0)
        .and_then(|p| p.progress.committable());
    assert!(mirrored.is_some_and(|m| m > 0));
    // Nothing stored yet (every commit was refused); the assignment is lost and comes back.
    sim.revoke(0, true);
    assert!(!sim.consumer.contains_key(&tp));
    sim.assign_missing();
    sim.poll(0, 0); // hands out offset 0 again: skipped forward
    let m = mirrored.expect("mirrored");
    assert_eq!(
        sim.consumer[&tp].0,
        sim.logs[&tp].partition_point(|o| *o < m),
        "sought forward to where this instance had got"
    );
    sim.commit(false);
    assert_eq!(
        sim.stored.get(&tp).copied(),
        mirrored,
        "the progress it had is stored"
    );
    sim.check();
}

/// A record declined while its partition flows (a transform's unasked record, or a failed
/// one offered while a seek was pending): the partition is sought back to it, and records
/// after it that were fetched before the seek took effect are not taken — neither sent
/// nor dropped — until it is read again (they were, and progress jumped past it).
#[test]
fn a_record_declined_while_its_partition_flows_holds_back_the_later_ones() {
    let mut book = Book::new(settings(false));
    book.set_routes(routes("b.orders", false, 1));
    book.assign(&[("orders".to_string(), 0)], 1, |_, _| None);
    book.take_effects();
    let now = Instant::now();
    let send = |book: &mut Book, offset: i64| match book.offer("orders", 0, offset) {
        Offer::Send { key, .. } => key,
        other => panic!("{offset}: {other:?}"),
    };
    for offset in 0..5 {
        let key = send(&mut book, offset);
        book.sent(
            key,
            InFlight {
                upstream: offset,
                timestamp: None,
                sent: now,
            },
        );
    }
    let key = send(&mut book, 5);
    book.decline(key, 5);
    let effects = book.take_effects();
    assert!(
        effects.contains(&Effect::Seek("orders".into(), 0, 5)),
        "sought back at once: {effects:?}"
    );
    // Fetched before the seek took effect: not taken, whatever the transform made of them.
    assert_eq!(book.offer("orders", 0, 6), Offer::Declined);
    assert_eq!(book.offer("orders", 0, 7), Offer::Declined);
    // Read again from 5: 5 dropped by the transform, 6 sent.
    let key = send(&mut book, 5);
    book.dropped(key, 5);
    let key = send(&mut book, 6);
    book.sent(
        key,
        InFlight {
            upstream: 6,
            timestamp: None,
            sent: now,
        },
    );
    for _ in 0..6 {
        book.delivered(key, Ok(0), now);
    }
    let committable = book
        .partitions()
        .next()
        .and_then(|p| p.progress.committable());
    assert_eq!(committable, Some(7), "0..5 acked, 5 dropped, 6 acked");
}

/// A book owning `orders[0]`, assigned with the stored position `stored`.
fn truncation_book(pause: bool, start_latest: bool, stored: Option<i64>) -> Book {
    let mut book = Book::new(BookSettings {
        on_source_truncation: if pause {
            OnSourceTruncation::Pause
        } else {
            OnSourceTruncation::Continue
        },
        start_latest,
        ..settings(false)
    });
    book.set_routes(routes("b.orders", false, 1));
    book.assign(&[("orders".to_string(), 0)], 1, |_, _| None);
    if let Some(at) = stored {
        book.expect("orders", 0, at);
    }
    book.take_effects();
    book
}

fn truncations(effects: &[Effect]) -> Vec<(Truncation, bool)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Truncated {
                truncation, paused, ..
            } => Some((truncation.clone(), *paused)),
            _ => None,
        })
        .collect()
}

/// The log range a fetch reports with the record at `offset`: from `low` (unknown: none)
/// to just past that record, the newest.
fn range_to(low: Option<i64>, offset: i64) -> Option<(i64, i64)> {
    low.map(|low| (low, offset + 1))
}

fn send_and_ack(book: &mut Book, offset: i64, low: Option<i64>, now: Instant) -> Offer {
    let offer = book.offer_at("orders", 0, offset, || range_to(low, offset), now);
    if let Offer::Send { key, .. } = &offer {
        book.sent(
            *key,
            InFlight {
                upstream: offset,
                timestamp: None,
                sent: now,
            },
        );
        book.delivered(*key, Ok(offset), now);
    }
    offer
}

/// Stored at 10, the log now starts at 40: 10..40 is reported lost, and under
/// `continue` the partition goes on from 40 and stores progress past the lost range.
#[test]
fn records_deleted_before_they_were_mirrored_are_reported_and_passed_under_continue() {
    let now = Instant::now();
    let mut book = truncation_book(false, false, Some(10));
    assert!(matches!(
        send_and_ack(&mut book, 40, Some(40), now),
        Offer::Send { .. }
    ));
    let effects = book.take_effects();
    assert_eq!(
        truncations(&effects),
        vec![(Truncation::Deleted { from: 10, to: 40 }, false)]
    );
    assert!(matches!(
        send_and_ack(&mut book, 41, Some(40), now),
        Offer::Send { .. }
    ));
    assert!(
        truncations(&book.take_effects()).is_empty(),
        "reported once"
    );
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 42)]);
}

/// Under `pause` the partition stops at the first record after the lost range, its stored
/// progress stays where it was (a restart reports the loss again), it does not retry by
/// itself, and the range is reported once however often the record is read again.
#[test]
fn records_deleted_before_they_were_mirrored_stop_the_partition_under_pause() {
    let now = Instant::now();
    let mut book = truncation_book(true, false, Some(10));
    assert_eq!(send_and_ack(&mut book, 40, Some(40), now), Offer::Declined);
    let effects = book.take_effects();
    assert_eq!(
        truncations(&effects),
        vec![(Truncation::Deleted { from: 10, to: 40 }, true)]
    );
    assert!(
        effects.contains(&Effect::Pause("orders".into(), 0)),
        "{effects:?}"
    );
    let p = book.partitions().next().unwrap();
    assert_eq!(Book::state_of(p), "paused");
    let reason = &p.stopped.as_ref().unwrap().paused.reason;
    assert!(reason.contains("records 10..40"), "{reason}");
    assert!(
        book.take_commits().is_empty(),
        "the stored position stays at 10"
    );
    book.tick(now + Duration::from_secs(24 * 3600));
    let p = book.partitions().next().unwrap();
    assert_eq!(Book::state_of(p), "paused", "not retried by itself");
    assert_eq!(send_and_ack(&mut book, 40, Some(40), now), Offer::Declined);
    assert!(
        truncations(&book.take_effects()).is_empty(),
        "reported once"
    );
}

/// While mirroring: 0..5 done, then the next record handed out is 20 and the log starts
/// at 20 (a lagging mirror, retention ran) — 5..20 lost. A gap the log start does not
/// explain (compaction, a transaction marker) is no loss.
#[test]
fn a_gap_is_a_loss_only_when_the_log_start_passed_it() {
    let now = Instant::now();
    let mut book = truncation_book(false, false, None);
    for offset in 0..5 {
        send_and_ack(&mut book, offset, Some(0), now);
    }
    assert!(matches!(
        send_and_ack(&mut book, 9, Some(0), now),
        Offer::Send { .. }
    ));
    assert!(truncations(&book.take_effects()).is_empty(), "compaction");
    assert!(matches!(
        send_and_ack(&mut book, 20, Some(20), now),
        Offer::Send { .. }
    ));
    assert_eq!(
        truncations(&book.take_effects()),
        vec![(Truncation::Deleted { from: 10, to: 20 }, false)]
    );
    // The log start unknown: no report on a guess.
    assert!(matches!(
        send_and_ack(&mut book, 30, None, now),
        Offer::Send { .. }
    ));
    assert!(truncations(&book.take_effects()).is_empty());
}

/// With `start_offset = "latest"` librdkafka answers the lost position with the end: the
/// records from the log start on still exist, so the partition is sought back to it.
#[test]
fn under_start_latest_the_records_after_the_lost_range_are_read_again() {
    let now = Instant::now();
    let mut book = truncation_book(false, true, Some(10));
    assert_eq!(send_and_ack(&mut book, 90, Some(40), now), Offer::Declined);
    let effects = book.take_effects();
    assert_eq!(
        truncations(&effects),
        vec![(Truncation::Deleted { from: 10, to: 40 }, false)]
    );
    assert!(
        effects.contains(&Effect::Seek("orders".into(), 0, 40)),
        "{effects:?}"
    );
    // Fetched before the seek took effect: not taken.
    assert_eq!(send_and_ack(&mut book, 91, Some(40), now), Offer::Declined);
    for offset in 40..43 {
        assert!(matches!(
            send_and_ack(&mut book, offset, Some(40), now),
            Offer::Send { .. }
        ));
    }
    assert!(truncations(&book.take_effects()).is_empty());
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 43)]);
    // Nothing left between the log start and the record in hand (the log starts with a
    // transaction marker): the record is read again and taken, not waited past.
    let mut book = truncation_book(false, true, Some(10));
    assert_eq!(send_and_ack(&mut book, 90, Some(40), now), Offer::Declined);
    assert_eq!(send_and_ack(&mut book, 91, Some(40), now), Offer::Declined);
    for offset in 90..92 {
        assert!(matches!(
            send_and_ack(&mut book, offset, Some(40), now),
            Offer::Send { .. }
        ));
    }
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 92)]);
}

/// Stored at 500, the first record handed out is 0: the topic was created again; reported
/// (nothing known lost), and mirrored from its start under `continue`.
#[test]
fn a_log_started_again_below_the_stored_position_is_reported() {
    let now = Instant::now();
    let mut book = truncation_book(false, false, Some(500));
    assert!(matches!(
        send_and_ack(&mut book, 0, Some(0), now),
        Offer::Send { .. }
    ));
    assert_eq!(
        truncations(&book.take_effects()),
        vec![(Truncation::WentBack { from: 500, to: 0 }, false)]
    );
    // Without a stored position (a partition never mirrored) nothing is judged.
    let mut book = truncation_book(false, false, None);
    assert!(matches!(
        send_and_ack(&mut book, 7, Some(7), now),
        Offer::Send { .. }
    ));
    assert!(truncations(&book.take_effects()).is_empty());
}

/// A record declined (sought back to) and deleted at the source before it was read again:
/// librdkafka resets to the log start, the range is reported from the awaited record, and
/// the partition flows on instead of waiting for a record that is gone.
#[test]
fn a_declined_record_deleted_before_it_is_read_again_does_not_stall_its_partition() {
    let now = Instant::now();
    let mut book = truncation_book(false, false, None);
    for offset in 0..30 {
        send_and_ack(&mut book, offset, Some(0), now);
    }
    let Offer::Send { key, .. } = book.offer_at("orders", 0, 30, || Some((0, 31)), now) else {
        panic!("30 is offered");
    };
    book.decline(key, 30);
    book.take_effects();
    assert!(matches!(
        send_and_ack(&mut book, 33, Some(33), now),
        Offer::Send { .. }
    ));
    assert_eq!(
        truncations(&book.take_effects()),
        vec![(Truncation::Deleted { from: 30, to: 33 }, false)]
    );
    assert!(matches!(
        send_and_ack(&mut book, 34, Some(33), now),
        Offer::Send { .. }
    ));
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 35)]);
}

/// Offers, sends and acks each of `offsets`, asserting each is sent.
fn assert_sent(book: &mut Book, offsets: std::ops::Range<i64>, low: Option<i64>, now: Instant) {
    for offset in offsets {
        let offer = send_and_ack(book, offset, low, now);
        assert!(matches!(offer, Offer::Send { .. }), "{offset}: {offer:?}");
    }
}

/// Sends `offset` without its delivery report.
fn send_only(book: &mut Book, offset: i64, low: Option<i64>, now: Instant) -> Option<SlotKey> {
    match book.offer_at("orders", 0, offset, || range_to(low, offset), now) {
        Offer::Send { key, .. } => {
            book.sent(
                key,
                InFlight {
                    upstream: offset,
                    timestamp: None,
                    sent: now,
                },
            );
            Some(key)
        }
        _ => None,
    }
}

fn seeks(effects: &[Effect]) -> Vec<i64> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Seek(_, _, at) => Some(*at),
            _ => None,
        })
        .collect()
}

/// Mirrored up to 500, the topic is deleted and created again while the partition is
/// assigned: librdkafka resets the position the new log does not hold to its start and
/// hands out 0. That is a new log, not a record handed out twice: it is reported, read
/// from 0, and its lower progress is committed (before this, every record below 500 of the
/// new log was declined as a re-delivery and never mirrored).
#[test]
fn a_log_started_again_under_an_assigned_partition_is_mirrored_from_its_start() {
    let now = Instant::now();
    let mut book = truncation_book(false, false, None);
    for offset in 0..500 {
        send_and_ack(&mut book, offset, Some(0), now);
    }
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 500)]);
    book.commit_result("orders", 0, 500, true);
    book.take_effects();
    assert_eq!(send_and_ack(&mut book, 0, Some(0), now), Offer::Declined);
    let effects = book.take_effects();
    assert_eq!(
        truncations(&effects),
        vec![(Truncation::WentBack { from: 500, to: 0 }, false)]
    );
    assert_eq!(seeks(&effects), vec![0], "{effects:?}");
    // Fetched before the seek took effect: not taken, not reported again.
    assert_eq!(send_and_ack(&mut book, 1, Some(0), now), Offer::Declined);
    assert!(truncations(&book.take_effects()).is_empty());
    assert_sent(&mut book, 0..20, Some(0), now);
    assert_eq!(
        book.take_commits(),
        vec![("orders".into(), 0, 20)],
        "the new log's position is committed though it is lower"
    );
    assert!(truncations(&book.take_effects()).is_empty());
}

/// librdkafka resumes a partition kept through a cooperative rebalance from a stale
/// position (its first fetch's start: librdkafka #4637, #4686) while the log still holds
/// every record: what it hands out again is not mirrored again (CI's rolling restart
/// mirrored 55 records of three partitions twice this way, taken for a log started again);
/// the partition is sought once per stale stretch to where it goes on, and flows on.
#[test]
fn a_stale_fetch_after_a_rebalance_is_not_mirrored_again() {
    let now = Instant::now();
    let mut book = truncation_book(false, false, None);
    assert_sent(&mut book, 0..55, Some(0), now);
    book.rebalanced(now);
    book.take_effects();
    for offset in 0..3 {
        let offer = book.offer_at("orders", 0, offset, || Some((0, 80)), now);
        assert_eq!(offer, Offer::Declined, "{offset}");
    }
    let effects = book.take_effects();
    assert!(truncations(&effects).is_empty(), "{effects:?}");
    assert_eq!(seeks(&effects), vec![55], "sought once: {effects:?}");
    // An error answer carries no log range: within the window, still a stale fetch.
    let offer = book.offer_at("orders", 0, 0, || None, now);
    assert_eq!(offer, Offer::Declined);
    assert_eq!(
        seeks(&book.take_effects()),
        vec![55],
        "a new stretch: sought again"
    );
    assert_sent(&mut book, 55..60, Some(0), now);
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 60)]);
    // A later stale stretch is sought forward again.
    let offer = book.offer_at("orders", 0, 10, || Some((0, 80)), now);
    assert_eq!(offer, Offer::Declined);
    assert_eq!(seeks(&book.take_effects()), vec![60]);
    assert!(truncations(&book.take_effects()).is_empty());
}

/// Away from a rebalance, a record below the next one is a log started again even if the
/// new log already reaches past the old position (a topic created again and refilled):
/// reported and mirrored from its start, never passed over as a stale fetch.
#[test]
fn a_log_started_again_and_refilled_past_the_position_is_not_taken_for_a_stale_fetch() {
    let now = Instant::now();
    let mut book = truncation_book(false, false, None);
    assert_sent(&mut book, 0..55, Some(0), now);
    book.rebalanced(now);
    let later = now + STALE_WINDOW;
    let offer = book.offer_at("orders", 0, 0, || Some((0, 80)), later);
    assert_eq!(offer, Offer::Declined);
    let effects = book.take_effects();
    assert_eq!(
        truncations(&effects),
        vec![(Truncation::WentBack { from: 55, to: 0 }, false)]
    );
    assert_eq!(seeks(&effects), vec![0], "{effects:?}");
    assert_sent(&mut book, 0..5, Some(0), later);
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 5)]);
}

/// A stale fetch sought forward, and then the log started again (librdkafka answered the
/// position with the new log's start): a record below a position the log no longer holds
/// is the new log's — reported and mirrored from there, never declined as stale for good.
#[test]
fn after_a_stale_fetch_a_log_started_again_is_still_reported() {
    let now = Instant::now();
    let mut book = truncation_book(false, false, None);
    assert_sent(&mut book, 0..55, Some(0), now);
    book.rebalanced(now);
    let offer = book.offer_at("orders", 0, 0, || Some((0, 80)), now);
    assert_eq!(offer, Offer::Declined);
    book.take_effects();
    let offer = book.offer_at("orders", 0, 0, || Some((0, 1)), now);
    assert_eq!(offer, Offer::Declined);
    let effects = book.take_effects();
    assert_eq!(
        truncations(&effects),
        vec![(Truncation::WentBack { from: 55, to: 0 }, false)]
    );
    assert_eq!(seeks(&effects), vec![0], "{effects:?}");
    assert_sent(&mut book, 0..5, Some(0), now);
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 5)]);
}

/// The same with records of the old log still in flight: the new log is read only once
/// their reports are in, and they do not count as progress of the new log.
#[test]
fn a_log_started_again_waits_for_the_old_logs_records_in_flight() {
    let now = Instant::now();
    let mut book = truncation_book(false, false, None);
    // Six in flight (the book's limit), three acked.
    let key = (0..6)
        .filter_map(|o| send_only(&mut book, o, Some(0), now))
        .last()
        .expect("sent");
    for _ in 0..3 {
        book.delivered(key, Ok(0), now);
    }
    book.take_effects();
    assert_eq!(send_and_ack(&mut book, 0, Some(0), now), Offer::Declined);
    assert_eq!(send_and_ack(&mut book, 1, Some(0), now), Offer::Declined);
    let effects = book.take_effects();
    assert_eq!(truncations(&effects).len(), 1, "{effects:?}");
    assert!(
        seeks(&effects).is_empty(),
        "not before the reports: {effects:?}"
    );
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 0)]);
    for _ in 0..3 {
        let ack = book.delivered(key, Ok(0), now).expect("acked");
        assert!(
            !ack.counts,
            "an old log's record is no progress of the new one"
        );
    }
    let effects = book.take_effects();
    assert_eq!(seeks(&effects), vec![0], "{effects:?}");
    assert_sent(&mut book, 0..3, Some(0), now);
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 3)]);
}

/// Under `start_offset = "latest"` librdkafka answers the position the new log lacks with
/// the new log's end: the records before it are read from the log start, not skipped.
#[test]
fn under_start_latest_a_log_started_again_is_read_from_its_start() {
    let now = Instant::now();
    // While assigned.
    let mut book = truncation_book(false, true, None);
    for offset in 0..500 {
        send_and_ack(&mut book, offset, Some(0), now);
    }
    book.take_effects();
    assert_eq!(send_and_ack(&mut book, 40, Some(0), now), Offer::Declined);
    let effects = book.take_effects();
    assert_eq!(
        truncations(&effects),
        vec![(Truncation::WentBack { from: 500, to: 40 }, false)]
    );
    assert_eq!(seeks(&effects), vec![0]);
    assert_eq!(send_and_ack(&mut book, 41, Some(0), now), Offer::Declined);
    assert_sent(&mut book, 0..42, Some(0), now);
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 42)]);
    // At assignment, stored at 500 (item 6 of issue 34: before, 0..40 were skipped).
    let mut book = truncation_book(false, true, Some(500));
    assert_eq!(send_and_ack(&mut book, 40, Some(0), now), Offer::Declined);
    let effects = book.take_effects();
    assert_eq!(
        truncations(&effects),
        vec![(Truncation::WentBack { from: 500, to: 40 }, false)]
    );
    assert_eq!(seeks(&effects), vec![0]);
    assert_eq!(send_and_ack(&mut book, 41, Some(0), now), Offer::Declined);
    assert_sent(&mut book, 0..42, Some(0), now);
    assert!(truncations(&book.take_effects()).is_empty());
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 42)]);
}

/// Under `on_source_truncation = "pause"` a log started again stops the partition there.
#[test]
fn under_pause_a_log_started_again_stops_its_partition() {
    let now = Instant::now();
    let mut book = truncation_book(true, false, None);
    for offset in 0..50 {
        send_and_ack(&mut book, offset, Some(0), now);
    }
    book.take_effects();
    assert_eq!(send_and_ack(&mut book, 0, Some(0), now), Offer::Declined);
    assert_eq!(
        truncations(&book.take_effects()),
        vec![(Truncation::WentBack { from: 50, to: 0 }, true)]
    );
    assert_eq!(send_and_ack(&mut book, 1, Some(0), now), Offer::Declined);
    let p = book.partitions().next().expect("owned");
    assert_eq!(Book::state_of(p), "paused");
}

/// Under "latest" a partition assigned with a stored position its log no longer spans is
/// read from the log start (the shell found it outside the log's range): the first record
/// is judged against the stored position and the lost range reported, and what follows is
/// mirrored without waiting for a new record.
#[test]
fn under_start_latest_a_stored_position_outside_the_log_is_read_from_its_start() {
    let now = Instant::now();
    let mut book = truncation_book(false, true, Some(50));
    assert!(book.starts_latest());
    book.read_from("orders", 0, 80);
    assert_eq!(seeks(&book.take_effects()), vec![80]);
    assert!(matches!(
        send_and_ack(&mut book, 80, Some(80), now),
        Offer::Send { .. }
    ));
    assert_eq!(
        truncations(&book.take_effects()),
        vec![(Truncation::Deleted { from: 50, to: 80 }, false)]
    );
    // Once records were read, the position is the book's own: nothing is sought.
    book.read_from("orders", 0, 0);
    assert!(seeks(&book.take_effects()).is_empty());
}

/// Issue 34, item 5: under "latest" a partition without stored progress starts at its end,
/// and that position is committed before any record arrives (before: nothing was
/// committable until the first ack, so a next owner started at a later end and what
/// arrived in between was never mirrored).
#[test]
fn under_start_latest_the_starting_end_is_committed_before_any_record() {
    let now = Instant::now();
    let mut book = truncation_book(false, true, None);
    book.start_from("orders", 0, 70, true);
    assert_eq!(seeks(&book.take_effects()), vec![70]);
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 70)]);
    // The first record is the next one: no gap judged, mirrored.
    assert!(matches!(
        send_and_ack(&mut book, 70, Some(0), now),
        Offer::Send { .. }
    ));
    assert!(truncations(&book.take_effects()).is_empty());
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 71)]);
    // A partition with stored progress, or one mirrored already, is left as it is.
    let mut book = truncation_book(false, true, Some(10));
    book.start_from("orders", 0, 70, true);
    assert!(book.take_effects().is_empty());
    assert!(book.take_commits().is_empty());
}

/// Issue 34, item 2: a partition that does not move is committed again after an
/// assignment (its stored commit may be old already) and then every `every`, with its
/// progress or, never read, the position it was assigned with — so the broker never
/// expires it (before: only partitions that moved were committed, and a quiet one's
/// offset expired `offsets.retention.minutes` after its last commit).
#[test]
fn a_quiet_partitions_position_is_committed_again_within_the_retention() {
    let t0 = Instant::now();
    let hour = Duration::from_secs(3600);
    let mut book = Book::new(settings(false));
    book.set_routes(routes("b.orders", true, 2));
    book.assign(
        &[("orders".to_string(), 0), ("payments".to_string(), 0)],
        1,
        |_, _| None,
    );
    book.expect("orders", 0, 500);
    book.expect("payments", 0, 7);
    // Right after the assignment: both stored positions, as they are.
    let mut first = book.take_commits_refreshing(t0, hour);
    first.sort();
    assert_eq!(
        first,
        vec![("orders".into(), 0, 500), ("payments".into(), 0, 7)]
    );
    book.commit_result("orders", 0, 500, true);
    book.commit_result("payments", 0, 7, true);
    // Nothing moved, not due: nothing.
    assert!(book.take_commits_refreshing(t0 + hour / 2, hour).is_empty());
    // orders moves: committed as always; payments stays quiet.
    assert!(matches!(
        send_and_ack(&mut book, 500, Some(0), t0),
        Offer::Send { .. }
    ));
    assert_eq!(
        book.take_commits_refreshing(t0 + hour / 2, hour),
        vec![("orders".into(), 0, 501)]
    );
    book.commit_result("orders", 0, 501, true);
    // An hour after the assignment: payments is committed again; orders only an hour after
    // its last commit.
    assert_eq!(
        book.take_commits_refreshing(t0 + hour, hour),
        vec![("payments".into(), 0, 7)]
    );
    // A refresh that failed is tried again at the next commit.
    book.commit_result("payments", 0, 7, false);
    assert_eq!(
        book.take_commits_refreshing(t0 + hour + Duration::from_secs(1), hour),
        vec![("payments".into(), 0, 7)]
    );
    assert_eq!(
        book.take_commits_refreshing(t0 + hour * 3 / 2, hour),
        vec![("orders".into(), 0, 501)]
    );
}

/// A partition sought back to a record refused for a while (a transient refusal), with
/// later records of it still in the batch in hand: those are not taken before the record
/// is read again (before, they were sent, progress moved past the refused record, and the
/// records read again looked like a log started again).
#[test]
fn records_in_hand_after_a_retried_record_wait_for_it() {
    let now = Instant::now();
    let mut book = truncation_book(false, false, None);
    let key = (0..3)
        .filter_map(|o| send_only(&mut book, o, Some(0), now))
        .last()
        .expect("sent");
    book.delivered(key, Ok(0), now);
    book.delivered(
        key,
        Err(Refusal::Transient("leader not available".into())),
        now,
    );
    book.delivered(key, Err(Refusal::Transient("abandoned".into())), now);
    book.take_effects();
    book.tick(now + RETRY_TRANSIENT);
    assert_eq!(seeks(&book.take_effects()), vec![1]);
    // 3 and 4 were fetched before the seek took effect.
    assert_eq!(send_and_ack(&mut book, 3, Some(0), now), Offer::Declined);
    assert_eq!(send_and_ack(&mut book, 4, Some(0), now), Offer::Declined);
    assert_sent(&mut book, 1..5, Some(0), now);
    assert!(truncations(&book.take_effects()).is_empty());
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 5)]);
}

/// After a log started again, a commit of the old log's position confirmed late does not
/// count as stored: the new log's lower position is still committed at the stop.
#[test]
fn an_old_logs_commit_confirmed_late_does_not_hide_the_new_position() {
    let now = Instant::now();
    let mut book = truncation_book(false, false, None);
    for offset in 0..50 {
        send_and_ack(&mut book, offset, Some(0), now);
    }
    assert_eq!(book.take_commits(), vec![("orders".into(), 0, 50)]);
    assert_eq!(send_and_ack(&mut book, 0, Some(0), now), Offer::Declined);
    book.commit_result("orders", 0, 50, true); // the old log's commit, confirmed now
    for offset in 0..3 {
        send_and_ack(&mut book, offset, Some(0), now);
    }
    assert_eq!(book.take_unstored(), vec![("orders".into(), 0, 3)]);
}

/// A partition stopped by a log started again (under `pause`) is not committed again by
/// the hourly refresh: its stored position stays where it was, for an operator to move.
#[test]
fn a_stopped_partition_is_not_refreshed() {
    let now = Instant::now();
    let hour = Duration::from_secs(3600);
    let mut book = truncation_book(true, false, None);
    for offset in 0..50 {
        send_and_ack(&mut book, offset, Some(0), now);
    }
    assert_eq!(
        book.take_commits_refreshing(now, hour),
        vec![("orders".into(), 0, 50)]
    );
    book.commit_result("orders", 0, 50, true);
    assert_eq!(send_and_ack(&mut book, 0, Some(0), now), Offer::Declined);
    assert!(
        book.take_commits_refreshing(now + hour * 2, hour)
            .is_empty()
    );
}

/// librdkafka may restart a partition it kept across a cooperative rebalance from its first
/// fetch's position (#4637): seen end to end, 10 records done, then record 0 again, taken as
/// a log started again and mirrored twice. After a rebalance every kept partition is sought
/// to where it goes on; new ones, and partitions waiting for a seek of their own, are not.
#[test]
fn a_rebalance_seeks_each_kept_partition_to_where_it_goes_on() {
    let now = Instant::now();
    let mut book = truncation_book(false, false, None);
    assert_sent(&mut book, 0..10, Some(0), now);
    book.take_effects();
    book.reseek_kept(&[]);
    assert_eq!(seeks(&book.take_effects()), vec![10], "kept: sought to 10");
    book.reseek_kept(&[("orders".to_string(), 0)]);
    assert!(
        seeks(&book.take_effects()).is_empty(),
        "newly assigned: left alone"
    );
    // Waiting for its own seek back (a log started again): left to it.
    assert_eq!(send_and_ack(&mut book, 3, Some(3), now), Offer::Declined);
    book.take_effects();
    book.reseek_kept(&[]);
    assert!(seeks(&book.take_effects()).is_empty());
}
