//! MM2's documented DefaultReplicationPolicy / IdentityReplicationPolicy behaviour.

use super::*;
use proptest::prelude::*;

fn default() -> DefaultReplicationPolicy {
    DefaultReplicationPolicy::default()
}

fn cfg(pairs: &[(&str, &str)]) -> Config {
    pairs.iter().copied().collect()
}

#[test]
fn default_formats_remote_topics_with_the_separator() {
    let p = default();
    assert_eq!(p.format_remote_topic("us-west", "topic1"), "us-west.topic1");
    assert_eq!(p.format_remote_topic("a", "b.c"), "a.b.c");
    let dash = DefaultReplicationPolicy::configure(&cfg(&[(SEPARATOR_CONFIG, "__")])).unwrap();
    assert_eq!(dash.format_remote_topic("a", "t"), "a__t");
}

#[test]
fn default_topic_source_is_the_text_before_the_first_separator() {
    let p = default();
    assert_eq!(p.topic_source("us-west.topic1").as_deref(), Some("us-west"));
    assert_eq!(p.topic_source("a.b.c").as_deref(), Some("a"));
    assert_eq!(p.topic_source("topic1"), None);
    // Java's split drops trailing empty parts: these are not remote.
    assert_eq!(p.topic_source("a."), None);
    assert_eq!(p.topic_source("a.."), None);
    assert_eq!(p.topic_source("."), None);
    // ...but keeps a leading empty part.
    assert_eq!(p.topic_source(".a").as_deref(), Some(""));
    assert_eq!(p.topic_source("a..b").as_deref(), Some("a"));
}

#[test]
fn default_upstream_topic_strips_one_hop() {
    let p = default();
    assert_eq!(
        p.upstream_topic("us-west.topic1").as_deref(),
        Some("topic1")
    );
    assert_eq!(p.upstream_topic("b.a.t").as_deref(), Some("a.t"));
    assert_eq!(p.upstream_topic("a..b").as_deref(), Some(".b"));
    assert_eq!(p.upstream_topic("topic1"), None);
    assert_eq!(p.upstream_topic("a."), None);
}

#[test]
fn original_topic_follows_every_hop() {
    let p = default();
    assert_eq!(p.original_topic("c.b.a.orders"), "orders");
    assert_eq!(p.original_topic("orders"), "orders");
    assert_eq!(p.original_topic("a.orders."), "orders.");
}

#[test]
fn internal_topic_names() {
    let p = default();
    assert_eq!(p.heartbeats_topic(), "heartbeats");
    assert_eq!(
        p.offset_syncs_topic("backup"),
        "mm2-offset-syncs.backup.internal"
    );
    assert_eq!(
        p.checkpoints_topic("primary"),
        "primary.checkpoints.internal"
    );

    let sep = DefaultReplicationPolicy::configure(&cfg(&[(SEPARATOR_CONFIG, "_")])).unwrap();
    assert_eq!(sep.offset_syncs_topic("b"), "mm2-offset-syncs_b_internal");
    assert_eq!(sep.checkpoints_topic("p"), "p_checkpoints_internal");
    assert!(sep.is_checkpoints_topic("p_checkpoints_internal"));
    assert!(sep.is_mm2_internal_topic("mm2-offset-syncs_b_internal"));

    let legacy = DefaultReplicationPolicy::configure(&cfg(&[
        (SEPARATOR_CONFIG, "_"),
        (INTERNAL_SEPARATOR_ENABLED_CONFIG, "false"),
    ]))
    .unwrap();
    assert_eq!(
        legacy.offset_syncs_topic("b"),
        "mm2-offset-syncs.b.internal"
    );
    assert_eq!(legacy.checkpoints_topic("p"), "p.checkpoints.internal");
    assert_eq!(legacy.format_remote_topic("p", "t"), "p_t");
}

#[test]
fn internal_topic_predicates() {
    let p = default();
    for t in [
        "__consumer_offsets",
        "__transaction_state",
        ".hidden",
        "connect-offsets-internal",
        "mm2-offset-syncs.backup.internal",
        "primary.checkpoints.internal",
        "x.internal",
    ] {
        assert!(p.is_internal_topic(t), "{t} is internal");
    }
    for t in [
        "orders",
        "heartbeats",
        "a.b",
        "internal",
        "my_internal",
        "_single",
    ] {
        assert!(!p.is_internal_topic(t), "{t} is not internal");
    }
    assert!(p.is_heartbeats_topic("heartbeats"));
    assert!(p.is_heartbeats_topic("a.b.heartbeats"));
    assert!(!p.is_heartbeats_topic("heartbeats2"));
    assert!(!p.is_heartbeats_topic("a.myheartbeats"));
    assert!(p.is_checkpoints_topic("a.checkpoints.internal"));
    assert!(!p.is_checkpoints_topic("a.checkpoints"));
    assert!(p.is_mm2_internal_topic("a.internal"));
    assert!(!p.is_mm2_internal_topic("a-internal"));
}

#[test]
fn configuration_is_strict() {
    let err = DefaultReplicationPolicy::configure(&cfg(&[("separator", "_")])).unwrap_err();
    assert!(err.contains("`separator`"), "{err}");
    let err = DefaultReplicationPolicy::configure(&cfg(&[(SEPARATOR_CONFIG, "")])).unwrap_err();
    assert!(err.contains("must not be empty"), "{err}");
    let err =
        DefaultReplicationPolicy::configure(&cfg(&[(INTERNAL_SEPARATOR_ENABLED_CONFIG, "1")]))
            .unwrap_err();
    assert!(err.contains("true or false"), "{err}");
}

#[test]
fn identity_keeps_names_but_prefixes_heartbeats() {
    let p = IdentityReplicationPolicy::configure(&cfg(&[(SOURCE_CLUSTER_ALIAS_CONFIG, "primary")]))
        .unwrap();
    assert_eq!(p.format_remote_topic("primary", "orders"), "orders");
    assert_eq!(
        p.format_remote_topic("primary", "heartbeats"),
        "primary.heartbeats"
    );
    assert_eq!(p.topic_source("orders").as_deref(), Some("primary"));
    assert_eq!(
        p.topic_source("primary.heartbeats").as_deref(),
        Some("primary")
    );
    assert_eq!(p.topic_source("heartbeats"), None);
    assert_eq!(p.upstream_topic("orders").as_deref(), Some("orders"));
    assert_eq!(
        p.upstream_topic("b.a.heartbeats").as_deref(),
        Some("a.heartbeats")
    );
    assert_eq!(p.original_topic("orders"), "orders");
    assert_eq!(p.original_topic("b.a.heartbeats"), "heartbeats");
    assert!(p.is_heartbeats_topic("b.a.heartbeats"));
    assert_eq!(
        p.offset_syncs_topic("backup"),
        "mm2-offset-syncs.backup.internal"
    );

    let unset = IdentityReplicationPolicy::configure(&Config::new()).unwrap();
    assert_eq!(unset.topic_source("orders"), None);
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_-]{1,12}(\\.[a-zA-Z0-9_-]{1,8}){0,3}"
}

fn alias() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_-]{1,10}"
}

proptest! {
    #[test]
    fn default_round_trips(a in alias(), t in name()) {
        let p = default();
        let remote = p.format_remote_topic(&a, &t);
        prop_assert_eq!(p.topic_source(&remote), Some(a.clone()));
        prop_assert_eq!(p.upstream_topic(&remote), Some(t.clone()));
        prop_assert_eq!(p.original_topic(&remote), p.original_topic(&t));
    }

    #[test]
    fn multi_hop_original_topic(hops in proptest::collection::vec(alias(), 0..4), t in "[a-z_-]{1,10}") {
        let p = default();
        let remote = hops.iter().fold(t.clone(), |acc, a| p.format_remote_topic(a, &acc));
        prop_assert_eq!(p.original_topic(&remote), t);
    }

    #[test]
    fn batch_equals_single(a in alias(), ts in proptest::collection::vec(name(), 0..8)) {
        let p = default();
        let single: Vec<String> = ts.iter().map(|t| p.format_remote_topic(&a, t)).collect();
        prop_assert_eq!(p.format_remote_topics(&a, &ts), single);
    }
}
