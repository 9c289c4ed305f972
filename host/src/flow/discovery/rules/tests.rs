use super::*;
use crate::policy::Native;
use kmirror_mm2::{
    Config, Configure, DefaultReplicationPolicy, DefaultTopicFilter, IdentityReplicationPolicy,
};
use std::collections::BTreeSet;

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
    let d = decide_all(
        &topics,
        &f,
        &policy(),
        "primary",
        "backup",
        &BTreeSet::new(),
    )
    .decisions;
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

/// A policy that names some topics badly and fails on others.
struct Liar;

impl ReplicationPolicy for Liar {
    fn format_remote_topic(&self, s: &str, t: &str) -> Result<String, PluginError> {
        match t {
            "slash" => Ok(format!("{s}/{t}")),
            "internal" => Ok("mm2-offset-syncs.backup.internal".into()),
            "trap" => Err(PluginError::Trap {
                plugin: "liar".into(),
                function: "format-remote-topic",
                kind: crate::policy::TrapKind::Unreachable,
                message: "boom".into(),
                output: String::new(),
            }),
            _ => Ok(format!("{s}.{t}")),
        }
    }
    fn topic_source(&self, _: &str) -> Result<Option<String>, PluginError> {
        Ok(None)
    }
    fn upstream_topic(&self, _: &str) -> Result<Option<String>, PluginError> {
        Ok(None)
    }
    fn original_topic(&self, t: &str) -> Result<String, PluginError> {
        Ok(t.into())
    }
    fn heartbeats_topic(&self) -> Result<String, PluginError> {
        Ok("heartbeats".into())
    }
    fn offset_syncs_topic(&self, a: &str) -> Result<String, PluginError> {
        Ok(format!("mm2-offset-syncs.{a}.internal"))
    }
    fn checkpoints_topic(&self, a: &str) -> Result<String, PluginError> {
        Ok(format!("{a}.checkpoints.internal"))
    }
    fn is_heartbeats_topic(&self, t: &str) -> Result<bool, PluginError> {
        Ok(t == "heartbeats")
    }
    fn is_checkpoints_topic(&self, _: &str) -> Result<bool, PluginError> {
        Ok(false)
    }
    fn is_mm2_internal_topic(&self, _: &str) -> Result<bool, PluginError> {
        Ok(false)
    }
    fn is_internal_topic(&self, _: &str) -> Result<bool, PluginError> {
        Ok(false)
    }
    fn format_remote_topics(&self, s: &str, ts: &[String]) -> Result<Vec<String>, PluginError> {
        ts.iter().map(|t| self.format_remote_topic(s, t)).collect()
    }
}

#[test]
fn a_bad_answer_or_a_trap_skips_that_topic_only() {
    let f = Native(DefaultTopicFilter::default());
    let topics: Vec<String> = ["ok", "slash", "internal", "trap"]
        .map(String::from)
        .to_vec();
    let reserved: BTreeSet<String> = ["mm2-offset-syncs.backup.internal".to_string()].into();
    let d = decide_all(&topics, &f, &Liar, "primary", "backup", &reserved);
    assert_eq!(d.decisions["ok"], Decision::Mirror("primary.ok".into()));
    assert!(
        matches!(&d.decisions["slash"], Decision::Skip(SkipReason::InvalidName(why)) if why.contains("not allowed")),
        "{:?}",
        d.decisions["slash"]
    );
    assert!(
        matches!(&d.decisions["internal"], Decision::Skip(SkipReason::InvalidName(why)) if why.contains("internal topics"))
    );
    assert_eq!(d.failed.len(), 1);
    assert_eq!(d.failed[0].0, "trap");
    assert!(
        !d.decisions.contains_key("trap"),
        "undecided, asked again later"
    );
    let p = plan(
        &snap(&[("ok", 1), ("slash", 1), ("internal", 1)]),
        &snap(&[]),
        &d.decisions,
        &BTreeMap::new(),
    );
    assert_eq!(p.mirror.keys().collect::<Vec<_>>(), vec!["ok"]);
    assert_eq!(
        p.problems
            .iter()
            .filter(|p| matches!(p, Problem::RefusedName { .. }))
            .count(),
        2
    );
}

#[test]
fn an_instance_that_does_not_lead_routes_only_what_the_target_has() {
    let mut p = plan(
        &snap(&[("new", 2), ("grown", 6), ("same", 1)]),
        &snap(&[("primary.grown", 4), ("primary.same", 1)]),
        &mirrored(&[
            ("new", "primary.new"),
            ("grown", "primary.grown"),
            ("same", "primary.same"),
        ]),
        &BTreeMap::new(),
    );
    assert_eq!(p.actions.len(), 2);
    without_changes(&mut p);
    assert!(p.actions.is_empty());
    assert_eq!(
        p.mirror["new"].partitions, 0,
        "subscribed to, nothing routed until the leader created it"
    );
    assert_eq!(
        p.mirror["grown"].partitions, 4,
        "the target's partitions, until the leader grows it"
    );
    assert_eq!(p.mirror["same"].partitions, 1);
}

/// `kmirror failback`: a topic the policy skips (it came from this flow's target) is
/// mirrored into the topic it was mirrored from, each partition starting where the
/// failover left it; the other decisions stand.
#[test]
fn a_failed_back_topic_is_mirrored_home_from_where_the_failover_left_it() {
    use crate::flow::cutover::control::TopicFailedBack;
    let decisions: BTreeMap<String, Decision> = [
        (
            "primary.orders".to_string(),
            Decision::Skip(SkipReason::Cycle),
        ),
        ("logs".to_string(), Decision::Mirror("backup.logs".into())),
    ]
    .into();
    let source = snap(&[("primary.orders", 2), ("logs", 1)]);
    let target = snap(&[("orders", 2)]);
    let mut problems = Vec::new();
    assert!(matches!(
        with_failed_back(
            &decisions,
            &BTreeMap::new(),
            (&source, &target),
            &mut problems
        ),
        std::borrow::Cow::Borrowed(_)
    ));
    let back: BTreeMap<String, TopicFailedBack> = [(
        "primary.orders".to_string(),
        TopicFailedBack {
            target_topic: "orders".into(),
            at_ms: 1,
            from: [(0, 120), (1, 80)].into(),
            quarantine_topic: "kmirror-quarantine.orders.internal".into(),
            quarantined: BTreeMap::new(),
        },
    )]
    .into();
    let all = with_failed_back(&decisions, &back, (&source, &target), &mut problems);
    assert!(problems.is_empty(), "{problems:?}");
    let mut p = plan(&source, &target, &all, &Routes::new());
    start_failed_back(&mut p.mirror, &back);
    let orders = &p.mirror["primary.orders"];
    assert_eq!((orders.target.as_str(), orders.partitions), ("orders", 2));
    assert_eq!(
        (orders.start_of(0), orders.start_of(1)),
        (Some(120), Some(80))
    );
    assert_eq!(p.mirror["logs"].start, None);
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, Action::CreateTopic { target, .. } if target == "orders")),
        "the topic it goes home to exists: {:?}",
        p.actions
    );
}

/// A failback entry that is not sound is refused with a problem, and changes nothing: it
/// never moves a topic the flow mirrors elsewhere, creates a topic, or starts a partition
/// it does not place (which would copy its history again).
#[test]
fn an_unsound_failback_entry_is_refused_and_changes_nothing() {
    use crate::flow::cutover::control::TopicFailedBack;
    let entry = |target: &str, from: &[(i32, i64)]| TopicFailedBack {
        target_topic: target.into(),
        at_ms: 1,
        from: from.iter().copied().collect(),
        quarantine_topic: "q".into(),
        quarantined: BTreeMap::new(),
    };
    let decisions: BTreeMap<String, Decision> = [
        ("primary.a".to_string(), Decision::Skip(SkipReason::Cycle)),
        ("logs".to_string(), Decision::Mirror("backup.logs".into())),
    ]
    .into();
    let source = snap(&[("primary.a", 2), ("logs", 1)]);
    let target = snap(&[("a", 2), ("backup.logs", 1), ("elsewhere", 1)]);
    for (topic, e, want) in [
        (
            "logs",
            entry("elsewhere", &[(0, 0)]),
            "mirrors it to backup.logs",
        ),
        (
            "primary.a",
            entry("gone", &[(0, 1), (1, 1)]),
            "does not exist on the target",
        ),
        ("primary.a", entry("a", &[(0, 1)]), "every partition"),
        (
            "primary.a",
            entry("a", &[(0, 1), (1, -2)]),
            "every partition",
        ),
        (
            "primary.a",
            entry("bad name!", &[(0, 1), (1, 1)]),
            "not a valid topic name",
        ),
    ] {
        let back: BTreeMap<String, TopicFailedBack> = [(topic.to_string(), e)].into();
        let mut problems = Vec::new();
        let all = with_failed_back(&decisions, &back, (&source, &target), &mut problems);
        assert_eq!(*all, decisions, "{want}");
        assert_eq!(problems.len(), 1, "{want}");
        let text = describe(&problems[0]);
        assert!(text.contains(want), "{text}");
        assert!(degrades(&problems[0]));
    }
}
