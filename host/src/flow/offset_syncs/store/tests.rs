//! The store against a brute-force model of what was mirrored, and against MM2's rule on
//! the same syncs.

use super::*;
use crate::flow::offset_syncs::OffsetSyncWriter;
use proptest::prelude::*;

fn sync(up: i64, down: i64) -> OffsetSync {
    OffsetSync {
        topic: "t".into(),
        partition: 0,
        upstream: up,
        downstream: down,
    }
}

fn marked(session: u64, seq: u64) -> Option<SyncMarker> {
    Some(SyncMarker::new(session, seq))
}

#[test]
fn mm2_slots_keep_exponentially_spaced_syncs() {
    let mut m = Mm2Syncs::new(0, 0);
    for up in 1..=1000 {
        m.add(up, up, true);
    }
    // Exact at the head, coarser further back, never past the truth.
    assert_eq!(m.translate(1000), Some(1000));
    assert_eq!(m.translate(1001), Some(1001));
    for g in 0..=1000 {
        let t = m.translate(g).unwrap();
        assert!(t <= g + 1 && (t == g || t <= g), "g={g} t={t}");
    }
    assert!(
        m.translate(10).unwrap() < 10,
        "far from the head MM2 is imprecise"
    );
    // While loading, only the newest sync is kept.
    let mut loading = Mm2Syncs::new(0, 0);
    for up in 1..=10 {
        loading.add(up, up, false);
    }
    assert_eq!(loading.translate(5), None);
}

#[test]
fn exact_inside_runs_and_across_gaps() {
    let mut s = OffsetSyncStore::new();
    // Records 0..=9 -> 0..=9, upstream gap, 20..=29 -> 10..=19.
    s.add(&sync(0, 0), marked(1, 0)).unwrap();
    s.add(&sync(9, 9), marked(1, 1)).unwrap();
    s.add(&sync(20, 10), marked(1, 2)).unwrap();
    s.add(&sync(29, 19), marked(1, 3)).unwrap();
    assert_eq!(s.translate("t", 0, 0), Some(0));
    assert_eq!(s.translate("t", 0, 5), Some(5));
    assert_eq!(s.translate("t", 0, 9), Some(9));
    assert_eq!(
        s.translate("t", 0, 10),
        Some(10),
        "in the gap: the first record after it"
    );
    assert_eq!(s.translate("t", 0, 15), Some(10));
    assert_eq!(s.translate("t", 0, 25), Some(15));
    assert_eq!(s.translate("t", 0, 30), Some(20), "a group at the end");
    assert_eq!(s.translate("t", 0, 500), Some(20));
    assert_eq!(s.translate("t", 1, 5), None, "unknown partition");
}

#[test]
fn unmarked_or_broken_streams_fall_back_to_mm2s_rule() {
    let mut s = OffsetSyncStore::new();
    s.add(&sync(0, 0), None).unwrap();
    s.add(&sync(100, 100), None).unwrap();
    assert_eq!(
        s.translate("t", 0, 50),
        Some(1),
        "MM2-written syncs: conservative"
    );
    let mut s = OffsetSyncStore::new();
    s.add(&sync(0, 0), marked(1, 0)).unwrap();
    s.add(&sync(100, 100), marked(1, 2)).unwrap();
    assert_eq!(
        s.translate("t", 0, 50),
        Some(1),
        "a sequence hole: conservative"
    );
    let mut s = OffsetSyncStore::new();
    s.add(&sync(0, 0), marked(1, 0)).unwrap();
    s.add(&sync(100, 100), marked(2, 1)).unwrap();
    assert_eq!(
        s.translate("t", 0, 50),
        Some(1),
        "another session: conservative"
    );
}

#[test]
fn rewinds_invalidate_older_syncs() {
    let mut s = OffsetSyncStore::new();
    s.add(&sync(100, 100), marked(1, 0)).unwrap();
    s.add(&sync(200, 200), marked(1, 1)).unwrap();
    assert_eq!(s.translation("t", 0, 150).map(|t| t.epoch), Some(0));
    s.add(&sync(50, 300), marked(2, 0)).unwrap();
    assert_eq!(s.translate("t", 0, 150), Some(301));
    assert_eq!(s.translate("t", 0, 40), None);
    assert_eq!(
        s.translation("t", 0, 150).map(|t| t.epoch),
        Some(1),
        "a reset bumps the epoch"
    );
}

#[test]
fn a_recreated_target_topic_resets_the_partition() {
    let mut s = OffsetSyncStore::new();
    s.add(&sync(0, 0), marked(1, 0)).unwrap();
    s.add(&sync(1000, 1000), marked(1, 1)).unwrap();
    assert_eq!(s.translate("t", 0, 1500), Some(1001));
    // The target topic was deleted and recreated: the mirror continues at 1001 -> 0.
    s.add(&sync(1001, 0), marked(2, 0)).unwrap();
    assert_eq!(
        s.translate("t", 0, 1500),
        Some(1),
        "never past the new topic's records"
    );
    assert_eq!(
        s.translate("t", 0, 500),
        None,
        "the old topic's syncs are gone"
    );
    assert_eq!(s.translation("t", 0, 1500).map(|t| t.epoch), Some(1));
}

#[test]
fn impossible_offsets_are_refused_and_arithmetic_never_wraps() {
    let mut s = OffsetSyncStore::new();
    assert!(s.add(&sync(-1, 0), None).is_err());
    assert!(s.add(&sync(0, -5), None).is_err());
    assert!(s.add(&sync(i64::MAX, 0), None).is_err());
    assert_eq!(s.translate("t", 0, 5), None, "nothing was added");
    s.add(&sync(MAX_OFFSET, MAX_OFFSET), marked(1, 0)).unwrap();
    assert_eq!(s.translate("t", 0, i64::MAX), Some(MAX_OFFSET + 1));
    assert_eq!(s.translate("t", 0, i64::MIN), None);
}

#[test]
fn one_sync_per_gap_is_exact() {
    let mut s = OffsetSyncStore::new();
    // Records 0..=9 -> 0..=9, a transaction marker at 10, 11..=20 -> 10..=19: the writer
    // emits (0, 0) and (11, 10) only.
    s.add(&sync(0, 0), marked(1, 0)).unwrap();
    s.add(&sync(11, 10), marked(1, 1)).unwrap();
    s.add(&sync(20, 19), marked(1, 2)).unwrap();
    for g in 0..=9 {
        assert_eq!(s.translate("t", 0, g), Some(g), "inside the first run");
    }
    assert_eq!(
        s.translate("t", 0, 10),
        Some(10),
        "the marker: the next record"
    );
    assert_eq!(s.translate("t", 0, 15), Some(14));
    assert_eq!(s.translate("t", 0, 21), Some(20), "a group at the end");
}

/// What a simulated mirror did: every copy of every source record, and the syncs that
/// reached the topic.
struct Mirrored {
    /// (up, down) for every record written to the target, in order.
    copies: Vec<(i64, i64)>,
    /// Syncs as delivered.
    syncs: Vec<(OffsetSync, SyncMarker)>,
    next_down: i64,
}

#[derive(Debug, Clone)]
struct Scenario {
    upstream_steps: Vec<i64>,
    downstream_gaps: Vec<i64>,
    lag_max: u64,
    flush_every: usize,
    lose_every: usize,
    restart_at: Option<(usize, usize)>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        proptest::collection::vec(prop_oneof![8 => Just(1i64), 1 => 2i64..6], 1..300),
        proptest::collection::vec(prop_oneof![12 => Just(0i64), 1 => 1i64..3], 300),
        1u64..40,
        1usize..60,
        prop_oneof![3 => Just(0usize), 1 => 2usize..6],
        proptest::option::of((0usize..300, 0usize..300)),
    )
        .prop_map(
            |(upstream_steps, downstream_gaps, lag_max, flush_every, lose_every, restart_at)| {
                Scenario {
                    upstream_steps,
                    downstream_gaps,
                    lag_max,
                    flush_every,
                    lose_every,
                    restart_at,
                }
            },
        )
}

fn simulate(sc: &Scenario) -> Mirrored {
    let ups: Vec<i64> = sc
        .upstream_steps
        .iter()
        .scan(-1i64, |acc, s| {
            *acc += s;
            Some(*acc)
        })
        .collect();
    let mut m = Mirrored {
        copies: Vec::new(),
        syncs: Vec::new(),
        next_down: 0,
    };
    let tp = ("t".to_string(), 0);
    let mut writer = OffsetSyncWriter::new(sc.lag_max, 1);
    let mut taken = 0usize;
    let deliver = |w: &mut OffsetSyncWriter<(String, i32)>, m: &mut Mirrored, taken: &mut usize| {
        for s in w.take_pending(usize::MAX) {
            *taken += 1;
            if sc.lose_every == 0 || !(*taken).is_multiple_of(sc.lose_every) {
                m.syncs.push((sync(s.upstream, s.downstream), s.marker));
            }
        }
    };
    let mut i = 0;
    let mut restarted = false;
    while i < ups.len() {
        m.next_down += sc.downstream_gaps[i % sc.downstream_gaps.len()];
        let down = m.next_down;
        m.next_down += 1;
        m.copies.push((ups[i], down));
        writer.on_ack(&tp, ups[i], down);
        if i % sc.flush_every == 0 {
            writer.promote_delayed();
            deliver(&mut writer, &mut m, &mut taken);
        }
        if let Some((at, back)) = sc.restart_at
            && i == at
            && !restarted
        {
            // A crash: undelivered syncs are lost; the new process resumes from an
            // earlier stored position and re-mirrors (duplicates downstream).
            restarted = true;
            writer = OffsetSyncWriter::new(sc.lag_max, 2);
            i = i.saturating_sub(back % (i + 1));
            continue;
        }
        i += 1;
    }
    writer.promote_delayed();
    deliver(&mut writer, &mut m, &mut taken);
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn never_later_than_the_truth_never_earlier_than_mm2_and_exact_when_complete(sc in scenario()) {
        let m = simulate(&sc);
        let mut store = OffsetSyncStore::new();
        let mut mm2: Option<Mm2Syncs> = None;
        for (s, marker) in &m.syncs {
            store.add(s, Some(*marker)).expect("valid offsets");
            match mm2.as_mut() {
                Some(x) => x.add(s.upstream, s.downstream, true),
                None => mm2 = Some(Mm2Syncs::new(s.upstream, s.downstream)),
            }
        }
        let complete = sc.lose_every == 0 && sc.restart_at.is_none_or(|(at, _)| at >= sc.upstream_steps.len());
        let last_up = m.copies.iter().map(|c| c.0).max().unwrap_or(0);
        let first_up = m.copies.first().map_or(0, |c| c.0);
        for g in first_up..=last_up + 1 {
            let got = store.translate("t", 0, g);
            // No skip: every record at or after g has a copy at or after the translation.
            if let Some(t) = got {
                let mut ups_after: Vec<i64> = m.copies.iter().map(|c| c.0).filter(|u| *u >= g).collect();
                ups_after.dedup();
                for u in ups_after {
                    let latest = m.copies.iter().filter(|c| c.0 == u).map(|c| c.1).max().unwrap_or(i64::MAX);
                    prop_assert!(t <= latest, "g={g}: translated to {t}, but record {u} is at {latest} at most");
                }
                prop_assert!(t <= m.next_down, "g={g}: {t} is past the end {}", m.next_down);
            }
            if let Some(x) = mm2.as_ref().and_then(|x| x.translate(g)) {
                prop_assert!(got.is_some_and(|t| t >= x), "g={g}: kmirror {got:?} is earlier than MM2 {x}");
            }
            if complete {
                // Exact: nothing skipped (checked above) and nothing re-read — no record
                // between the translation and the first record at or after g. (An offset
                // inside a downstream gap holds no record, so it reads the same as the next.)
                let truth = m.copies.iter().find(|c| c.0 >= g).map_or(m.next_down, |c| c.1);
                let t = got.unwrap_or(-1);
                let reread = m.copies.iter().filter(|c| c.1 >= t && c.1 < truth).count();
                prop_assert!(t >= 0 && reread == 0, "g={}: translated to {:?}, truth {}, {} re-read", g, got, truth, reread);
            }
        }
        // `kmirror verify`'s placement: never wrong, and complete up to the newest sync
        // when no sync was lost.
        for &(u, _) in &m.copies {
            if let Some(t) = store.exact("t", 0, u) {
                prop_assert!(m.copies.contains(&(u, t)), "exact({u}) = {t}, not where {u} was copied");
            }
        }
        if complete {
            let newest = store.newest_upstream("t", 0).unwrap_or(-1);
            for &(u, d) in m.copies.iter().filter(|c| c.0 <= newest) {
                prop_assert_eq!(store.exact("t", 0, u), Some(d), "record {} not placed exactly", u);
            }
        }
    }
}

#[test]
fn a_former_owners_late_syncs_are_refused() {
    // Owner A (generation 5) mirrors 0..=50, stalls with 51..=60 queued; B (generation 7)
    // takes over from 51 and mirrors 51..=150; A resumes, its queued copies land after B's
    // (down 151..=160) and its syncs arrive late; B goes on after A's copies.
    let m = |session, seq, generation| {
        Some(SyncMarker {
            generation: Some(generation),
            ..SyncMarker::new(session, seq)
        })
    };
    let mut store = OffsetSyncStore::new();
    store.add(&sync(0, 0), m(1, 0, 5)).unwrap();
    store.add(&sync(50, 50), m(1, 1, 5)).unwrap();
    store.add(&sync(51, 51), m(2, 0, 7)).unwrap();
    store.add(&sync(150, 150), m(2, 1, 7)).unwrap();
    for late in [sync(51, 151), sync(60, 160)] {
        assert!(
            matches!(
                store.add(&late, m(1, 2, 5)),
                Err(Refused::StaleOwner {
                    generation: 5,
                    newest: 7,
                    ..
                })
            ),
            "{late:?}"
        );
    }
    store.add(&sync(151, 161), m(2, 2, 7)).unwrap();
    store.add(&sync(200, 210), m(2, 3, 7)).unwrap();
    // A group at 70 reads B's copy of 70 next, not A's late copies (which would skip
    // everything B wrote before them).
    assert_eq!(store.translate("t", 0, 70), Some(70));
    assert_eq!(store.translate("t", 0, 151), Some(161));
    assert_eq!(store.translate("t", 0, 175), Some(185));
}

#[test]
fn a_rewind_of_the_same_or_a_newer_owner_and_unmarked_syncs_are_accepted() {
    let m = |generation| {
        Some(SyncMarker {
            generation: Some(generation),
            ..SyncMarker::new(9, 0)
        })
    };
    let mut store = OffsetSyncStore::new();
    store.add(&sync(100, 100), m(4)).unwrap();
    // The target topic recreated: a rewind by the same owner generation resets.
    store.add(&sync(100, 0), m(4)).unwrap();
    assert_eq!(store.translate("t", 0, 100), Some(0));
    // A newer owner's rewind (the source re-mirrored from earlier) resets too.
    store.add(&sync(50, 10), m(6)).unwrap();
    assert_eq!(store.translate("t", 0, 50), Some(10));
    // An older generation that does not rewind is a true, newer fact: accepted.
    store.add(&sync(60, 20), m(5)).unwrap();
    assert_eq!(store.translate("t", 0, 60), Some(20));
    // MM2's syncs carry no marker: never refused.
    store.add(&sync(1, 1), None).unwrap();
    assert_eq!(store.translate("t", 0, 1), Some(1));
}

#[test]
fn an_older_generation_long_after_the_newest_is_a_new_start() {
    // The progress group was deleted after a long stop: generations start again at 1.
    let m = |generation| {
        Some(SyncMarker {
            generation: Some(generation),
            ..SyncMarker::new(3, 0)
        })
    };
    let mut store = OffsetSyncStore::new();
    store.add_at(&sync(500, 500), m(50), Some(1_000)).unwrap();
    let soon = store.add_at(&sync(0, 600), m(1), Some(1_000 + 60_000));
    assert!(
        matches!(soon, Err(Refused::StaleOwner { .. })),
        "a minute later: a late sync"
    );
    let later = 1_000 + STALE_OWNER_WINDOW_MS + 1;
    store.add_at(&sync(0, 600), m(1), Some(later)).unwrap();
    assert_eq!(store.translate("t", 0, 0), Some(600), "a new start");
    store.add_at(&sync(10, 610), m(1), Some(later + 1)).unwrap();
    assert_eq!(
        store.translate("t", 0, 10),
        Some(610),
        "its generation is the newest now"
    );
}

/// Issue 34, item 10: however many partitions the syncs topic names, the syncs kept densely
/// stay within the store's budget (before: 4,096 per partition, room for 8,192, for every
/// partition — some 400 MB at 1,000 partitions); each partition keeps its newest ones, and
/// what is older still translates by MM2's slots, never later than the truth.
#[test]
fn the_syncs_kept_stay_within_the_budget_over_all_partitions() {
    let budget = 64 * 100;
    let mut store = OffsetSyncStore::with_budget(budget);
    let synced = |store: &mut OffsetSyncStore, topic: &str, partition: i32, n: i64| {
        for i in 0..n {
            let mut s = sync(i * 10, i * 10);
            s.topic = topic.to_string();
            s.partition = partition;
            store.add(&s, marked(1, i as u64)).expect("accepted");
        }
    };
    // One busy partition alone keeps up to the per-partition maximum, without room to spare.
    synced(&mut store, "busy", 0, 10_000);
    assert_eq!(store.kept(), budget.min(MAX_SYNCS_PER_PARTITION));
    assert!(
        store.capacity() <= MAX_SYNCS_PER_PARTITION,
        "{}",
        store.capacity()
    );
    // 999 more partitions named (garbage, MM2's leftovers): every share shrinks.
    for p in 0..999 {
        synced(&mut store, "other", p, 3);
    }
    assert!(store.kept() <= budget, "{} kept", store.kept());
    assert!(
        store.capacity() <= budget * 2,
        "room held: {}",
        store.capacity()
    );
    // The busy partition still writes: it keeps its newest share.
    synced(&mut store, "busy", 0, 10_000);
    assert!(store.kept() <= budget, "{} kept", store.kept());
    let keep = share(budget, 1000);
    assert_eq!(keep, MIN_SYNCS_PER_PARTITION);
    assert_eq!(
        store.translate("busy", 0, 99_990),
        Some(99_990),
        "the newest exact"
    );
    assert_eq!(
        store.oldest_downstream("busy", 0),
        Some((10_000 - keep as i64) * 10)
    );
    // Older than the kept syncs: MM2's slots, which never answer later than the truth.
    let old = store.translate("busy", 0, 5_005).expect("a slot");
    assert!(old <= 5_005, "{old}");
}

#[test]
fn the_share_is_the_budget_split_evenly_within_its_bounds() {
    assert_eq!(share(MAX_SYNCS, 1), MAX_SYNCS_PER_PARTITION);
    assert_eq!(share(MAX_SYNCS, 0), MAX_SYNCS_PER_PARTITION);
    assert_eq!(share(MAX_SYNCS, 1_000), 1_048);
    assert_eq!(share(MAX_SYNCS, 100_000), MIN_SYNCS_PER_PARTITION);
}

#[test]
fn records_are_linked_within_one_sessions_consecutive_syncs_only() {
    let mut s = OffsetSyncStore::new();
    // Session 1: syncs at 0 and 10 (a run), then at 20 after a break (an intruder on the
    // target at 20); session 2 (a restart) re-mirrors from 25.
    s.add(&sync(0, 0), marked(1, 0)).unwrap();
    s.add(&sync(10, 10), marked(1, 1)).unwrap();
    s.add(&sync(20, 21), marked(1, 2)).unwrap();
    s.add(&sync(25, 30), marked(2, 0)).unwrap();
    assert!(s.linked("t", 0, 3, 7), "one run");
    assert!(s.linked("t", 0, 9, 20), "consecutive syncs of a session");
    assert!(s.linked("t", 0, 0, 24));
    assert!(!s.linked("t", 0, 24, 25), "a new session");
    assert!(!s.linked("t", 0, 3, 26));
    assert!(s.linked("t", 0, 25, 40));
    // A sync missing (seq 3 -> 5) unlinks; unmarked (MM2's) syncs never link.
    s.add(&sync(50, 55), marked(2, 2)).unwrap();
    assert!(!s.linked("t", 0, 30, 50));
    let mut mm2 = OffsetSyncStore::new();
    mm2.add(&sync(0, 0), None).unwrap();
    mm2.add(&sync(10, 10), None).unwrap();
    assert!(!mm2.linked("t", 0, 1, 10));
    assert!(mm2.linked("t", 0, 10, 10), "one sync links with itself");
    assert!(!s.linked("other", 0, 1, 2));
}
