use super::*;
use crate::flow::Route;

fn routes(entries: &[(&str, &str, i32)]) -> Routes {
    entries
        .iter()
        .map(|(s, t, n)| (s.to_string(), Route::new(*t, *n)))
        .collect()
}

fn tp(t: &str, p: i32) -> Tp {
    (t.to_string(), p)
}

fn placed(oldest: i64) -> Option<Placed> {
    Some(Placed { oldest, epoch: 0 })
}

fn bounds(oldest: i64, newest: i64, low: i64) -> Bounds {
    Bounds {
        oldest_placed: oldest,
        newest_placed: newest,
        low,
    }
}

#[test]
fn a_partition_starts_at_the_oldest_placed_offset_once_the_map_places_something() {
    let mut cursors = BTreeMap::new();
    let r = routes(&[("orders", "primary.orders", 2)]);
    follow_routes(
        &mut cursors,
        &r,
        |tp| if tp.1 == 0 { placed(40) } else { None },
    );
    assert_eq!(
        cursors.len(),
        1,
        "partition 1 has no syncs yet: {cursors:?}"
    );
    assert_eq!(cursors[&tp("orders", 0)].next, 40);
    // Later the map places partition 1 too; partition 0 keeps its cursor.
    cursors.get_mut(&tp("orders", 0)).unwrap().next = 70;
    follow_routes(&mut cursors, &r, |_| placed(10));
    assert_eq!(cursors[&tp("orders", 0)].next, 70);
    assert_eq!(cursors[&tp("orders", 1)].next, 10);
}

#[test]
fn cursors_of_topics_no_longer_mirrored_or_renamed_or_shrunk_are_dropped() {
    let mut cursors = BTreeMap::new();
    follow_routes(
        &mut cursors,
        &routes(&[("a", "primary.a", 2), ("b", "primary.b", 1)]),
        |_| placed(0),
    );
    cursors.get_mut(&tp("a", 0)).unwrap().next = 5;
    // `b` failed over (not routed), `a` renamed by a new policy.
    follow_routes(&mut cursors, &routes(&[("a", "backup.a", 1)]), |_| {
        placed(3)
    });
    assert_eq!(cursors.len(), 1);
    let c = &cursors[&tp("a", 0)];
    assert_eq!((c.target.as_str(), c.next), ("backup.a", 3), "started over");
}

#[test]
fn a_pass_reads_to_the_newest_placed_offset_and_shares_its_budget() {
    let mut cursors = BTreeMap::new();
    follow_routes(
        &mut cursors,
        &routes(&[
            ("busy", "p.busy", 1),
            ("calm", "p.calm", 1),
            ("done", "p.done", 1),
        ]),
        |_| placed(0),
    );
    cursors.get_mut(&tp("done", 0)).unwrap().next = 51;
    let b = |t: &Tp| match t.0.as_str() {
        "busy" => Some(bounds(0, 999, 0)),
        "calm" => Some(bounds(0, 9, 0)),
        _ => Some(bounds(0, 50, 0)),
    };
    let planned = plan(&mut cursors, b, 100);
    let ranges: Vec<(&str, i64, i64)> = planned
        .iter()
        .map(|p| (p.tp.0.as_str(), p.from, p.to))
        .collect();
    // Two partitions have work: 50 each at most; `done` is audited to its newest sync.
    assert_eq!(ranges, [("busy", 0, 50), ("calm", 0, 10)]);
    // Nothing placed past the cursor, or no bounds (its log start unknown): no work.
    let planned = plan(&mut cursors, |_| None, 100);
    assert!(planned.is_empty());
}

#[test]
fn a_cursor_below_the_log_start_moves_to_it_and_reports_the_gap() {
    let mut cursors = BTreeMap::new();
    follow_routes(&mut cursors, &routes(&[("t", "p.t", 1)]), |_| placed(0));
    let c = cursors.get_mut(&tp("t", 0)).unwrap();
    c.next = 10;
    c.position = Position {
        next_target: Some(12),
        ends_unplaced: true,
        last_placed: Some(9),
    };
    let planned = plan(&mut cursors, |_| Some(bounds(0, 99, 40)), 1_000);
    assert_eq!(planned.len(), 1);
    assert_eq!(planned[0].unreadable, Some((10, 40)));
    assert_eq!((planned[0].from, planned[0].to), (40, 100));
    let c = &cursors[&tp("t", 0)];
    assert_eq!(c.next, 40);
    assert_eq!(
        c.position,
        Position::default(),
        "the target side is found again"
    );
    // Even with nothing placed past the log start, the gap is reported.
    cursors.get_mut(&tp("t", 0)).unwrap().next = 0;
    let planned = plan(&mut cursors, |_| Some(bounds(0, 30, 40)), 1_000);
    assert_eq!(planned[0].unreadable, Some((0, 40)));
    assert_eq!((planned[0].from, planned[0].to), (40, 40));
}

#[test]
fn behind_counts_placed_offsets_not_audited_yet() {
    let mut cursors = BTreeMap::new();
    follow_routes(&mut cursors, &routes(&[("t", "p.t", 2)]), |_| placed(0));
    cursors.get_mut(&tp("t", 0)).unwrap().next = 95;
    cursors.get_mut(&tp("t", 1)).unwrap().next = 200;
    assert_eq!(behind(&cursors, |_| Some(99)), 5);
}

#[test]
fn a_cursor_the_map_no_longer_places_moves_to_the_oldest_placed_offset() {
    let mut cursors = BTreeMap::new();
    follow_routes(&mut cursors, &routes(&[("t", "p.t", 1)]), |_| placed(0));
    cursors.get_mut(&tp("t", 0)).unwrap().position.next_target = Some(7);
    // The log starts at 5, the kept syncs place 20..=99.
    let planned = plan(&mut cursors, |_| Some(bounds(20, 99, 5)), 1_000);
    assert_eq!(planned[0].unreadable, Some((0, 5)));
    assert_eq!(planned[0].unplaced, Some((5, 20)));
    assert_eq!((planned[0].from, planned[0].to), (20, 100));
    assert_eq!(cursors[&tp("t", 0)].position, Position::default());
}

#[test]
fn a_rewound_map_starts_the_partition_over() {
    let mut cursors = BTreeMap::new();
    let r = routes(&[("t", "p.t", 1)]);
    follow_routes(&mut cursors, &r, |_| placed(0));
    let c = cursors.get_mut(&tp("t", 0)).unwrap();
    c.next = 500;
    c.position.next_target = Some(480);
    // The same epoch: the cursor stays.
    assert!(follow_routes(&mut cursors, &r, |_| placed(200)).is_empty());
    assert_eq!(cursors[&tp("t", 0)].next, 500);
    // Rewound (the target recreated, records mirrored again): from the new oldest.
    let rewound = follow_routes(&mut cursors, &r, |_| {
        Some(Placed {
            oldest: 300,
            epoch: 1,
        })
    });
    assert_eq!(rewound, [tp("t", 0)]);
    let c = &cursors[&tp("t", 0)];
    assert_eq!((c.next, c.epoch, c.position), (300, 1, Position::default()));
}
