use super::*;
use crate::policy::Native;
use kmirror_mm2::{
    Config, Configure, DefaultReplicationPolicy, DefaultTopicFilter, IdentityReplicationPolicy,
};

fn snap(entries: &[(&str, i32)]) -> Snapshot {
    entries.iter().map(|(n, p)| (n.to_string(), *p)).collect()
}

fn mirrored(entries: &[(&str, &str)]) -> BTreeMap<String, Decision> {
    entries
        .iter()
        .map(|(s, t)| (s.to_string(), Decision::Mirror(t.to_string())))
        .collect()
}

fn policy() -> Native<DefaultReplicationPolicy> {
    Native(DefaultReplicationPolicy::default())
}

#[test]
fn decisions_follow_mm2() {
    let p = policy();
    let d = |t: &str, accepted: bool| decide(t, accepted, &p, "primary", "backup").unwrap();
    assert_eq!(d("orders", true), Decision::Mirror("primary.orders".into()));
    assert_eq!(d("orders", false), Decision::Skip(SkipReason::Filtered));
    assert_eq!(
        d("__consumer_offsets", true),
        Decision::Skip(SkipReason::Internal)
    );
    assert_eq!(
        d("mm2-offset-syncs.backup.internal", true),
        Decision::Skip(SkipReason::Internal)
    );
    // came from the target: a cycle, directly or through hops
    assert_eq!(d("backup.orders", true), Decision::Skip(SkipReason::Cycle));
    assert_eq!(
        d("east.backup.orders", true),
        Decision::Skip(SkipReason::Cycle)
    );
    assert_eq!(
        d("east.orders", true),
        Decision::Mirror("primary.east.orders".into())
    );
    // heartbeats flow whatever the filter says; remote heartbeats too, but never back
    assert_eq!(
        d("heartbeats", false),
        Decision::Mirror("primary.heartbeats".into())
    );
    assert_eq!(
        d("east.heartbeats", false),
        Decision::Mirror("primary.east.heartbeats".into())
    );
    assert_eq!(
        d("backup.heartbeats", false),
        Decision::Skip(SkipReason::Cycle)
    );
}

#[test]
fn identity_policy_cycles_need_the_source_alias() {
    let cfg: Config = [("source.cluster.alias", "primary")].into_iter().collect();
    let p = Native(IdentityReplicationPolicy::configure(&cfg).unwrap());
    assert_eq!(
        decide("orders", true, &p, "primary", "backup").unwrap(),
        Decision::Mirror("orders".into())
    );
    assert!(!is_cycle("orders", &p, "backup").unwrap());
    assert!(
        is_cycle("orders", &p, "primary").unwrap(),
        "identity: everything comes from the configured alias"
    );
}

#[test]
fn decide_all_uses_one_batch() {
    let f = Native(DefaultTopicFilter::default());
    let topics: Vec<String> = ["a", "__b", "backup.c"].map(String::from).to_vec();
    let d = decide_all(&topics, &f, &policy(), "primary", "backup").unwrap();
    assert_eq!(d["a"], Decision::Mirror("primary.a".into()));
    assert_eq!(d["__b"], Decision::Skip(SkipReason::Internal));
    assert_eq!(d["backup.c"], Decision::Skip(SkipReason::Cycle));
}

#[test]
fn missing_targets_are_created_with_the_source_partition_count() {
    let p = plan(
        &snap(&[("orders", 3)]),
        &snap(&[]),
        &mirrored(&[("orders", "primary.orders")]),
        &BTreeMap::new(),
    );
    assert_eq!(
        p.actions,
        vec![Action::CreateTopic {
            source: "orders".into(),
            target: "primary.orders".into(),
            partitions: 3
        }]
    );
    assert_eq!(p.mirror["orders"], Route::new("primary.orders", 3));
    assert!(p.problems.is_empty());
}

#[test]
fn existing_targets_are_reused_and_grown_never_shrunk() {
    let decisions = mirrored(&[("a", "p.a"), ("b", "p.b"), ("c", "p.c")]);
    let p = plan(
        &snap(&[("a", 2), ("b", 6), ("c", 2)]),
        &snap(&[("p.a", 2), ("p.b", 4), ("p.c", 5)]),
        &decisions,
        &BTreeMap::new(),
    );
    assert_eq!(
        p.actions,
        vec![Action::AddPartitions {
            source: "b".into(),
            target: "p.b".into(),
            from: 4,
            to: 6
        }]
    );
    assert_eq!(
        p.problems,
        vec![Problem::TargetLarger {
            target: "p.c".into(),
            source_partitions: 2,
            target_partitions: 5
        }]
    );
    assert_eq!(p.mirror["b"].partitions, 6);
    assert_eq!(
        p.mirror["c"].partitions, 2,
        "only source partitions are replicated"
    );
}

#[test]
fn shrink_and_deletion_are_reported_and_the_target_kept() {
    let previous: Routes = [
        ("a".to_string(), Route::new("p.a", 4)),
        ("gone".to_string(), Route::new("p.gone", 1)),
    ]
    .into();
    let p = plan(
        &snap(&[("a", 2)]),
        &snap(&[("p.a", 4), ("p.gone", 1)]),
        &mirrored(&[("a", "p.a")]),
        &previous,
    );
    assert!(
        p.actions.is_empty(),
        "nothing is deleted or shrunk: {:?}",
        p.actions
    );
    assert!(p.problems.contains(&Problem::SourceShrank {
        source: "a".into(),
        from: 4,
        to: 2
    }));
    assert!(p.problems.contains(&Problem::SourceVanished {
        source: "gone".into(),
        target: "p.gone".into()
    }));
    assert!(!p.mirror.contains_key("gone"));
}

#[test]
fn collisions_refuse_every_source_involved() {
    let decisions = mirrored(&[("x", "same"), ("y", "same"), ("z", "other")]);
    let p = plan(
        &snap(&[("x", 1), ("y", 1), ("z", 1)]),
        &snap(&[]),
        &decisions,
        &BTreeMap::new(),
    );
    assert_eq!(
        p.problems,
        vec![Problem::Collision {
            target: "same".into(),
            sources: vec!["x".into(), "y".into()]
        }]
    );
    assert_eq!(p.mirror.keys().collect::<Vec<_>>(), vec!["z"]);
    assert_eq!(p.actions.len(), 1);
}

#[test]
fn skipped_and_unknown_topics_do_nothing() {
    let mut decisions = mirrored(&[("stale", "p.stale")]);
    decisions.insert("internal".into(), Decision::Skip(SkipReason::Internal));
    let p = plan(
        &snap(&[("internal", 1)]),
        &snap(&[]),
        &decisions,
        &BTreeMap::new(),
    );
    assert_eq!(p, Plan::default());
}
