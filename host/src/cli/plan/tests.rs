use super::render::render;
use super::rows::*;
use crate::flow::Routes;
use crate::flow::discovery::rules::{self, Decided, Decision, SkipReason};
use crate::kafka::TopicPartitions;
use crate::kafka::acls::AclBinding;
use crate::policy::Native;
use kmirror_mm2::{Config, Configure, DefaultReplicationPolicy, DefaultTopicFilter};
use std::collections::{BTreeMap, BTreeSet};

fn snapshot(entries: &[(&str, i32)]) -> TopicPartitions {
    entries.iter().map(|(t, p)| (t.to_string(), *p)).collect()
}

fn rows_of(source: &TopicPartitions, target: &TopicPartitions) -> Vec<TopicRow> {
    let config = Config::from(vec![("topics.exclude".to_string(), "hidden.*".to_string())]);
    let filter = Native(DefaultTopicFilter::configure(&config).unwrap());
    let policy = Native(DefaultReplicationPolicy::default());
    let topics: Vec<String> = source.keys().cloned().collect();
    let reserved: BTreeSet<String> = ["mm2-offset-syncs.backup.internal".to_string()].into();
    let decided = rules::decide_all(&topics, &filter, &policy, "primary", "backup", &reserved);
    let plan = rules::plan(source, target, &decided.decisions, &Routes::new());
    rows(source, target, &decided, &plan)
}

#[test]
fn every_source_topic_gets_an_action_and_a_reason() {
    let source = snapshot(&[
        ("orders", 3),
        ("grown", 6),
        ("fresh", 2),
        ("hidden.x", 1),
        ("backup.loop", 1),
        ("__consumer_offsets", 50),
        ("shrunk", 2),
    ]);
    let target = snapshot(&[
        ("primary.orders", 3),
        ("primary.grown", 4),
        ("primary.shrunk", 5),
    ]);
    let rows = rows_of(&source, &target);
    let by: BTreeMap<&str, &TopicRow> = rows.iter().map(|r| (r.source.as_str(), r)).collect();
    assert_eq!(rows.len(), 7);
    assert_eq!(by["orders"].action, "in sync");
    assert_eq!(by["orders"].target.as_deref(), Some("primary.orders"));
    assert_eq!(by["grown"].action, "grow");
    assert_eq!(by["grown"].target_partitions, Some(4));
    assert_eq!(by["fresh"].action, "create");
    assert_eq!(by["fresh"].target_partitions, None);
    assert_eq!(by["hidden.x"].reason.as_deref(), Some("filtered"));
    assert_eq!(by["backup.loop"].reason.as_deref(), Some("cycle"));
    assert_eq!(by["__consumer_offsets"].reason.as_deref(), Some("internal"));
    assert_eq!(by["shrunk"].action, "in sync");
    assert!(
        by["shrunk"]
            .reason
            .as_deref()
            .unwrap()
            .contains("more partitions")
    );
    let text = render(&FlowPlan {
        flow: "primary->backup".into(),
        topics: rows.clone(),
        checkpointed_groups: Some(vec![GroupRow {
            group: "billing".into(),
            partitions: 3,
        }]),
        groups_without_offsets: vec![],
        filtered_groups: 1,
        errors: vec![],
        acls: None,
        transforms: vec![
            ("drop_by_header.wasm".into(), "header=internal".into()),
            ("json_mask.wasm".into(), "fields=card.number,email".into()),
        ],
        on_transform_error: "pause".into(),
        candidate: None,
    });
    assert!(text.contains("skip: cycle"), "{text}");
    assert!(
        text.contains("  record transform 0: drop_by_header.wasm { header=internal }\n  record transform 1: json_mask.wasm { fields=card.number,email }\n  on a transform error: pause the record's partition\n"),
        "{text}"
    );
    assert!(text.contains("3 -> 3"), "{text}");
    assert!(text.contains("billing (3 partitions)"), "{text}");
}

#[test]
fn collisions_and_bad_answers_are_skipped_with_the_reason() {
    let source = snapshot(&[("a", 1), ("b", 1)]);
    let decided = Decided {
        decisions: [
            ("a".to_string(), Decision::Mirror("same".into())),
            ("b".to_string(), Decision::Mirror("same".into())),
        ]
        .into(),
        failed: vec![],
    };
    let plan = rules::plan(
        &source,
        &TopicPartitions::new(),
        &decided.decisions,
        &Routes::new(),
    );
    let found = rows(&source, &TopicPartitions::new(), &decided, &plan);
    assert!(found.iter().all(|r| r.action == "skip"));
    assert_eq!(
        found[0].reason.as_deref(),
        Some("collision: b map there too")
    );
    let decided = Decided {
        decisions: [(
            "a".to_string(),
            Decision::Skip(SkipReason::InvalidName(
                "format-remote-topic gave ``".into(),
            )),
        )]
        .into(),
        failed: vec![],
    };
    let plan = rules::plan(
        &source,
        &TopicPartitions::new(),
        &decided.decisions,
        &Routes::new(),
    );
    let found = rows(&source, &TopicPartitions::new(), &decided, &plan);
    assert!(
        found[0]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("bad policy answer")
    );
    assert_eq!(found[1].reason.as_deref(), Some("undecided"));
}

#[test]
fn changes_name_renamed_dropped_and_added_topics() {
    let row = |source: &str, target: Option<&str>, action: &'static str| TopicRow {
        source: source.into(),
        partitions: 1,
        target: target.map(str::to_string),
        target_partitions: None,
        action,
        reason: (action == "skip").then(|| "filtered".to_string()),
    };
    let now = vec![
        row("kept", Some("primary.kept"), "in sync"),
        row("renamed", Some("primary.renamed"), "in sync"),
        row("dropped", Some("primary.dropped"), "in sync"),
        row("added", Some("primary.added"), "skip"),
        row("gone", Some("primary.gone"), "in sync"),
    ];
    let next = vec![
        row("kept", Some("primary.kept"), "in sync"),
        row("renamed", Some("dr.renamed"), "create"),
        row("dropped", Some("primary.dropped"), "skip"),
        row("added", Some("primary.added"), "create"),
    ];
    let c = changes(&now, &next);
    assert_eq!(
        c.renamed,
        vec![(
            "renamed".into(),
            "primary.renamed".into(),
            "dr.renamed".into()
        )]
    );
    assert_eq!(
        c.dropped,
        vec![(
            "dropped".into(),
            "primary.dropped".into(),
            "filtered".into()
        )]
    );
    assert_eq!(c.added, vec![("added".into(), "primary.added".into())]);
    assert!(changes(&now, &now).is_empty());
}

#[test]
fn acls_to_sync_are_listed_per_flow() {
    use crate::kafka::acls::{AclOperation, AclPermission, PatternType};
    let binding = AclBinding {
        resource_name: "primary.orders".into(),
        pattern: PatternType::Literal,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: AclOperation::Read,
        permission: AclPermission::Allow,
    };
    let plan = |acls| FlowPlan {
        flow: "primary->backup".into(),
        topics: vec![],
        checkpointed_groups: None,
        groups_without_offsets: vec![],
        filtered_groups: 0,
        errors: vec![],
        acls,
        transforms: vec![],
        on_transform_error: "pause".into(),
        candidate: None,
    };
    let text = render(&plan(Some(AclRows {
        create: vec![binding.clone()],
        delete: vec![binding],
        note: None,
    })));
    assert!(
        text.contains(
            "  create ACL: ALLOW READ on topic primary.orders (LITERAL) to User:alice from *"
        ) && text.contains("  delete ACL: ALLOW READ"),
        "{text}"
    );
    let text = render(&plan(Some(AclRows::default())));
    assert!(
        text.contains("topic ACLs to create on the target: none"),
        "{text}"
    );
    assert!(render(&plan(None)).contains("topic ACLs are not synced"));
}
