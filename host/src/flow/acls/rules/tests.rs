//! MM2's ACL rules as a table (with the flow's real decision rules and MM2's built-in
//! roles), and the plan: create what is missing, delete only what counts as previously
//! synced, and only when asked.

use super::*;
use crate::flow::Route;
use crate::flow::discovery::rules::decide_with;
use crate::flow::plugins::FlowNames;
use AclOperation::*;
use AclPermission::*;
use PatternType::*;

fn acl(
    topic: &str,
    pattern: PatternType,
    principal: &str,
    operation: AclOperation,
    permission: AclPermission,
) -> AclBinding {
    AclBinding {
        resource_name: topic.into(),
        pattern,
        principal: principal.into(),
        host: "*".into(),
        operation,
        permission,
    }
}

/// The decisions of the flow primary -> backup with `policy` and a topic filter of `topics`.
fn decisions(policy: &str, topics: &str, names: &[&str]) -> BTreeMap<String, Decision> {
    let roles = crate::flow::testing::roles(policy, topics);
    let flow = FlowNames {
        source: "primary".into(),
        target: "backup".into(),
        offset_syncs_alias: "backup".into(),
        reserved: ["mm2-offset-syncs.backup.internal".to_string()].into(),
    };
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let decided = decide_with(&roles, &flow, &names).unwrap();
    assert!(decided.failed.is_empty());
    decided.decisions
}

#[test]
fn mm2s_filtering_and_renaming_table() {
    let with_host = AclBinding {
        host: "10.0.0.7".into(),
        ..acl("orders", Literal, "User:alice", Describe, Allow)
    };
    // (source binding, what the target gets, why)
    let table: Vec<(AclBinding, Option<AclBinding>, &str)> = vec![
        (
            acl("orders", Literal, "User:alice", Read, Allow),
            Some(acl("primary.orders", Literal, "User:alice", Read, Allow)),
            "renamed through the policy",
        ),
        (
            acl("orders", Literal, "User:producer", Write, Allow),
            None,
            "ALLOW WRITE is never synced",
        ),
        (
            acl("orders", Literal, "User:admin", All, Allow),
            Some(acl("primary.orders", Literal, "User:admin", Read, Allow)),
            "ALLOW ALL becomes ALLOW READ",
        ),
        (
            acl("orders", Literal, "User:mallory", All, Deny),
            Some(acl("primary.orders", Literal, "User:mallory", All, Deny)),
            "DENY ALL stays DENY ALL",
        ),
        (
            acl("orders", Literal, "User:mallory", Write, Deny),
            Some(acl("primary.orders", Literal, "User:mallory", Write, Deny)),
            "DENY WRITE is synced (only ALLOW WRITE is left out)",
        ),
        (
            with_host.clone(),
            Some(AclBinding {
                resource_name: "primary.orders".into(),
                ..with_host
            }),
            "principal, host, operation and permission kept",
        ),
        (
            acl("orders-eu", Literal, "User:alice", DescribeConfigs, Allow),
            Some(acl(
                "primary.orders-eu",
                Literal,
                "User:alice",
                DescribeConfigs,
                Allow,
            )),
            "every other operation kept",
        ),
        (
            acl("orders", Prefixed, "User:alice", Read, Allow),
            None,
            "PREFIXED patterns are not synced (MM2: LITERAL only)",
        ),
        (
            acl("payments", Literal, "User:alice", Read, Allow),
            None,
            "the topic filter rejects it",
        ),
        (
            acl("orders.replica", Literal, "User:alice", Read, Allow),
            None,
            "the filter's default excludes",
        ),
        (
            acl("__consumer_offsets", Literal, "User:alice", Read, Allow),
            None,
            "an internal topic",
        ),
        (
            acl("backup.orders", Literal, "User:alice", Read, Allow),
            None,
            "a cycle: it came from the target",
        ),
        (
            acl("heartbeats", Literal, "User:monitor", Read, Allow),
            Some(acl(
                "primary.heartbeats",
                Literal,
                "User:monitor",
                Read,
                Allow,
            )),
            "heartbeats topics pass the filter, as in MM2",
        ),
        (
            acl("*", Literal, "User:alice", Read, Allow),
            None,
            "the wildcard names no topic (`primary.*` is not a topic name)",
        ),
    ];
    let names: Vec<&str> = table
        .iter()
        .map(|(b, _, _)| b.resource_name.as_str())
        .collect();
    let decisions = decisions("default-policy", "orders.*,backup\\..*,\\*", &names);
    for (source, want, why) in &table {
        let got = desired(std::slice::from_ref(source), &decisions);
        let got: Vec<&AclBinding> = got.iter().collect();
        assert_eq!(got, want.iter().collect::<Vec<_>>(), "{why}: {source}");
    }
    let all: Vec<AclBinding> = table.iter().map(|(b, _, _)| b.clone()).collect();
    let expected: BTreeSet<AclBinding> = table.iter().filter_map(|(_, w, _)| w.clone()).collect();
    assert_eq!(desired(&all, &decisions), expected);
}

#[test]
fn the_identity_policy_keeps_names_and_the_wildcard_is_never_synced() {
    let decisions = decisions("identity-policy", ".*", &["orders", "*"]);
    let source = vec![
        acl("orders", Literal, "User:alice", All, Allow),
        acl("*", Literal, "User:alice", Read, Allow),
    ];
    assert_eq!(
        desired(&source, &decisions).into_iter().collect::<Vec<_>>(),
        vec![acl("orders", Literal, "User:alice", Read, Allow)],
        "a LITERAL `*` would grant every target topic: it is not a topic name"
    );
}

#[test]
fn a_topic_without_a_decision_gives_nothing_and_duplicates_merge() {
    let decisions = decisions("default-policy", ".*", &["orders"]);
    let source = vec![
        acl("orders", Literal, "User:alice", All, Allow),
        acl("orders", Literal, "User:alice", Read, Allow),
        acl("undecided", Literal, "User:alice", Read, Allow),
    ];
    assert_eq!(
        desired(&source, &decisions).into_iter().collect::<Vec<_>>(),
        vec![acl("primary.orders", Literal, "User:alice", Read, Allow)]
    );
}

fn set(bindings: &[AclBinding]) -> BTreeSet<AclBinding> {
    bindings.iter().cloned().collect()
}

#[test]
fn only_missing_bindings_are_created_and_nothing_is_deleted_by_default() {
    let want = set(&[
        acl("primary.orders", Literal, "User:alice", Read, Allow),
        acl("primary.orders", Literal, "User:bob", Read, Allow),
    ]);
    let target = vec![
        acl("primary.orders", Literal, "User:alice", Read, Allow),
        acl("primary.orders", Literal, "User:gone", Read, Allow),
    ];
    let mirrored = ["primary.orders".to_string()].into();
    let p = plan(&want, &target, &mirrored, None);
    assert_eq!(
        p.create,
        vec![acl("primary.orders", Literal, "User:bob", Read, Allow)]
    );
    assert!(p.delete.is_empty(), "deletion is opt-in");
    let after: Vec<AclBinding> = target.iter().cloned().chain(p.create).collect();
    assert!(
        plan(&want, &after, &mirrored, None).is_empty(),
        "a second pass has nothing to do"
    );
}

#[test]
fn deletion_removes_only_previously_synced_bindings_of_mirrored_topics() {
    let want = set(&[acl("primary.orders", Literal, "User:alice", Read, Allow)]);
    let kept_and_why = [
        (
            acl("primary.orders", Literal, "User:alice", Read, Allow),
            "still desired",
        ),
        (
            acl("primary.orders", Literal, "User:mallory", Read, Deny),
            "a DENY is never deleted",
        ),
        (
            acl("primary.orders", Prefixed, "User:alice", Describe, Allow),
            "PREFIXED is never produced by the rules",
        ),
        (
            acl("primary.orders", Literal, "User:writer", Write, Allow),
            "ALLOW WRITE is never produced by the rules",
        ),
        (
            acl("primary.orders", Literal, "User:admin", All, Allow),
            "ALLOW ALL is never produced by the rules",
        ),
        (
            acl("primary.unmirrored", Literal, "User:bob", Read, Allow),
            "not a mirrored topic",
        ),
        (
            acl("local-topic", Literal, "User:bob", Read, Allow),
            "a target-only topic",
        ),
    ];
    let deleted = [
        acl("primary.orders", Literal, "User:bob", Read, Allow),
        acl("primary.orders", Literal, "User:bob", Describe, Allow),
        acl("primary.payments", Literal, "User:carol", Read, Allow),
    ];
    let target: Vec<AclBinding> = kept_and_why
        .iter()
        .map(|(b, _)| b.clone())
        .chain(deleted.iter().cloned())
        .collect();
    let mirrored = ["primary.orders".to_string(), "primary.payments".to_string()].into();
    // The ledger names everything above (as if the flow had made each binding), so the
    // shape rules alone keep the first group...
    let ledger: BTreeSet<AclBinding> = target.iter().cloned().collect();
    let p = plan(&want, &target, &mirrored, Some(&ledger));
    assert!(p.create.is_empty());
    assert_eq!(set(&p.delete), set(&deleted));
    for (b, why) in &kept_and_why {
        assert!(!p.delete.contains(b), "{why}: {b}");
    }
    assert!(plan(&want, &target, &mirrored, None).delete.is_empty());
    // ...and a binding the flow did not create (an operator's, MirrorMaker 2's) is kept
    // however it looks: only what the ledger names is deleted.
    let operators = acl("primary.orders", Literal, "User:bob", Read, Allow);
    let ledger: BTreeSet<AclBinding> = ledger.into_iter().filter(|b| *b != operators).collect();
    let p = plan(&want, &target, &mirrored, Some(&ledger));
    assert!(!p.delete.contains(&operators), "{p:?}");
    assert_eq!(p.delete.len(), deleted.len() - 1);
    assert!(
        plan(&want, &target, &mirrored, Some(&BTreeSet::new()))
            .delete
            .is_empty()
    );
}

#[test]
fn deletion_touches_only_topics_mirrored_under_the_name_the_plugins_give_now() {
    let routes: Routes = [
        ("orders".to_string(), Route::new("primary.orders", 3)),
        ("payments".to_string(), Route::new("primary.payments", 1)),
        ("renamed".to_string(), Route::new("primary.renamed", 1)),
    ]
    .into();
    let mut decisions = decisions("default-policy", ".*", &["orders"]);
    // `payments`: a plugin failed on it (no decision). `renamed`: the policy names it
    // differently now.
    decisions.insert("renamed".into(), Decision::Mirror("dr.renamed".into()));
    assert_eq!(
        mirrored_targets(&routes, &decisions),
        ["primary.orders".to_string()].into()
    );
}
