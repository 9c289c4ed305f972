use super::*;
use crate::flow::offset_syncs::SyncMarker;
use crate::formats::OffsetSync;

fn store(syncs: &[(i64, i64, u64, u64)]) -> OffsetSyncStore {
    let mut s = OffsetSyncStore::new();
    for &(up, down, session, seq) in syncs {
        let sync = OffsetSync {
            topic: "t".into(),
            partition: 0,
            upstream: up,
            downstream: down,
        };
        s.add(&sync, Some(SyncMarker::new(session, seq))).unwrap();
    }
    s
}

#[test]
fn an_offset_in_a_run_in_a_gap_or_right_after_the_newest_sync_is_exact() {
    // Records 0..10 at 100..110; 10..15 at 110..115; 15..20 not mirrored (filtered); 20 at
    // 115.
    let s = store(&[(0, 100, 1, 0), (10, 110, 1, 1), (20, 115, 1, 2)]);
    assert_eq!(place(&s, "t", 0, 5, None), Placement::Exact { offset: 105 });
    assert_eq!(
        place(&s, "t", 0, 12, None),
        Placement::Exact { offset: 112 }
    );
    assert_eq!(
        place(&s, "t", 0, 17, None),
        Placement::Exact { offset: 115 }
    );
    assert_eq!(
        place(&s, "t", 0, 21, None),
        Placement::Exact { offset: 116 }
    );
    // Never past the target's end.
    assert_eq!(
        place(&s, "t", 0, 21, Some(114)),
        Placement::Exact { offset: 114 }
    );
}

#[test]
fn past_the_newest_sync_or_across_a_hole_is_approximate_with_its_rereads() {
    let s = store(&[(0, 100, 1, 0), (10, 110, 1, 1)]);
    // Past the newest sync by more than one: MM2's rule, re-reading 25 - 10 - 1.
    assert_eq!(
        place(&s, "t", 0, 25, None),
        Placement::Approximate {
            offset: 111,
            rereads: Some(14)
        }
    );
    // A hole in the sequence between two syncs (session changed): approximate.
    let holed = store(&[(0, 100, 1, 0), (10, 110, 2, 0)]);
    assert_eq!(
        place(&holed, "t", 0, 5, None),
        Placement::Approximate {
            offset: 101,
            rereads: Some(4)
        }
    );
    // Before every sync: nothing to translate with.
    let late = store(&[(50, 100, 1, 0)]);
    assert_eq!(place(&late, "t", 0, 10, None), Placement::Unplaced);
    assert_eq!(place(&late, "t", 0, 10, None).offset(), None);
}

#[test]
fn the_tail_counts_from_the_later_of_the_group_and_the_mirror() {
    assert_eq!(tail(10, Some(15), Some(20)), Some(5));
    assert_eq!(tail(18, Some(15), Some(20)), Some(2));
    assert_eq!(tail(20, Some(20), Some(20)), Some(0));
    assert_eq!(tail(10, None, Some(20)), None);
}

fn acl(
    name: &str,
    pattern: PatternType,
    who: &str,
    op: AclOperation,
    perm: AclPermission,
) -> AclBinding {
    AclBinding {
        resource_name: name.into(),
        pattern,
        principal: who.into(),
        host: "*".into(),
        operation: op,
        permission: perm,
    }
}

#[test]
fn read_access_compares_the_source_readers_with_the_target_acls() {
    use AclOperation::*;
    use AclPermission::*;
    use PatternType::*;
    let source = vec![
        acl("orders", Literal, "User:app", Read, Allow),
        acl("ord", Prefixed, "User:audit", All, Allow),
        acl("orders", Literal, "User:writer", Write, Allow),
        acl("payments", Literal, "User:other", Read, Allow),
    ];
    let target = vec![
        acl("primary.", Prefixed, "User:app", Read, Allow),
        acl("primary.orders", Literal, "User:audit", Read, Allow),
        acl("primary.orders", Literal, "User:audit", Read, Deny),
    ];
    assert_eq!(
        read_access(&source, &target, "orders", "primary.orders"),
        ReadAccess::Missing {
            principals: vec!["User:audit".into()]
        }
    );
    let open = vec![acl("*", Literal, "User:*", Read, Allow)];
    assert_eq!(
        read_access(&source, &open, "orders", "primary.orders"),
        ReadAccess::Granted
    );
    assert_eq!(
        read_access(&source, &target, "unlisted", "primary.unlisted"),
        ReadAccess::NoSourceAcls
    );
}

fn partition(topic: &str, placement: Placement, tail: Option<i64>) -> PartitionReadiness {
    PartitionReadiness {
        topic: topic.into(),
        target_topic: format!("primary.{topic}"),
        partition: 0,
        source_offset: 10,
        placement,
        tail,
        tail_seconds: None,
        access: ReadAccess::NoSourceAcls,
    }
}

fn group(name: &str, active: Option<&str>, partitions: Vec<PartitionReadiness>) -> GroupReadiness {
    GroupReadiness {
        group: name.into(),
        active_on_target: active.map(String::from),
        failed_over: false,
        partitions,
    }
}

#[test]
fn groups_are_ready_only_without_blockers_and_ordered_worst_first() {
    let exact = Placement::Exact { offset: 1 };
    let approx = Placement::Approximate {
        offset: 1,
        rereads: Some(7),
    };
    let ready = group(
        "a-ready",
        None,
        vec![partition("t", exact.clone(), Some(0))],
    );
    let rereads = group("b-rereads", None, vec![partition("t", approx, Some(0))]);
    let tail = group("c-tail", None, vec![partition("t", exact.clone(), Some(4))]);
    let active = group(
        "d-active",
        Some("Stable"),
        vec![partition("t", exact.clone(), Some(0))],
    );
    let both = group(
        "e-both",
        Some("Stable"),
        vec![partition("t", Placement::Unplaced, Some(9))],
    );
    assert!(ready.ready() && rereads.ready());
    assert_eq!(rereads.rereads(), 7);
    assert!(!tail.ready() && !active.ready() && !both.ready());
    assert_eq!(both.blockers().len(), 3, "{:?}", both.blockers());
    let mut all = vec![ready, rereads, tail, active, both];
    worst_first(&mut all);
    let order: Vec<&str> = all.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(
        order,
        ["e-both", "c-tail", "d-active", "b-rereads", "a-ready"]
    );
}

#[test]
fn a_principal_denied_on_the_target_blocks_the_group() {
    let mut p = partition("t", Placement::Exact { offset: 1 }, Some(0));
    p.access = ReadAccess::Missing {
        principals: vec!["User:app".into()],
    };
    let g = group("g", None, vec![p]);
    assert!(!g.ready());
    assert!(g.blockers()[0].contains("User:app"), "{:?}", g.blockers());
}
