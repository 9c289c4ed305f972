//! Each WASM reference plugin and its native twin agree on random names and aliases.

mod common;

use common::both_kinds;
use kmirror::plugin::{Limits, Plugin, PluginHost, PluginSource, builtin};
use kmirror::policy::{Config, ReplicationPolicy, Role};
use proptest::prelude::*;
use std::sync::{Arc, OnceLock};

fn host() -> &'static PluginHost {
    static HOST: OnceLock<PluginHost> = OnceLock::new();
    HOST.get_or_init(|| PluginHost::new(Limits::default(), None).expect("plugin host"))
}

fn wasm(name: &str, kind: usize) -> Plugin {
    let path = both_kinds(name)[kind].clone();
    Plugin::open(host(), &PluginSource::File(path)).unwrap()
}

fn native(name: &str) -> Plugin {
    Plugin::Builtin(builtin::find(name).unwrap())
}

/// Topic-ish names: letters, digits, `.`, `-`, `_`, with MM2-relevant shapes mixed in.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9._-]{0,24}",
        "(__|\\.)?[a-z]{1,8}([.-](internal|replica|heartbeats|checkpoints))*",
        "[a-z]{1,5}(\\.[a-z]{1,5}){1,4}",
        "(console-consumer|connect)-[a-z0-9-]{0,8}",
    ]
}

fn alias() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_-]{1,10}"
}

fn names() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(name(), 1..24)
}

/// A native built-in and its WASM twin, both kinds.
struct Pair<T: ?Sized> {
    native: Arc<T>,
    wasm: [Arc<T>; 2],
}

/// A filter of any role, as the answers it gives for a list of names.
type Filter = dyn Fn(&[String]) -> Vec<bool> + Send + Sync;

fn policies(config: &[(&str, &str)], builtin: &str, plugin: &str) -> Pair<dyn ReplicationPolicy> {
    let config: Config = config.iter().copied().collect();
    let open = |p: Plugin| p.replication_policy(&config).unwrap();
    Pair {
        native: open(native(builtin)),
        wasm: [open(wasm(plugin, 0)), open(wasm(plugin, 1))],
    }
}

/// The answers of `plugin` as a `role` filter; batch and single calls must agree.
fn filter(plugin: Plugin, role: Role, config: &Config) -> Arc<Filter> {
    match role {
        Role::TopicFilter => {
            let f = plugin.topic_filter(config).unwrap();
            Arc::new(move |ns: &[String]| {
                let batch = f.should_replicate_topics(ns).unwrap();
                let single: Vec<bool> = ns
                    .iter()
                    .map(|n| f.should_replicate_topic(n).unwrap())
                    .collect();
                assert_eq!(batch, single, "batch equals single");
                batch
            })
        }
        Role::GroupFilter => {
            let f = plugin.group_filter(config).unwrap();
            Arc::new(move |ns: &[String]| {
                let batch = f.should_replicate_groups(ns).unwrap();
                let single: Vec<bool> = ns
                    .iter()
                    .map(|n| f.should_replicate_group(n).unwrap())
                    .collect();
                assert_eq!(batch, single, "batch equals single");
                batch
            })
        }
        Role::ConfigPropertyFilter => {
            let f = plugin.config_property_filter(config).unwrap();
            Arc::new(move |ns: &[String]| {
                ns.iter()
                    .flat_map(|n| {
                        [
                            f.should_replicate_config_property(n).unwrap(),
                            f.should_replicate_source_default(n).unwrap(),
                        ]
                    })
                    .collect()
            })
        }
        Role::ReplicationPolicy | Role::RecordTransform => unreachable!("not a filter"),
    }
}

fn pair(builtin: &str, plugin: &str, role: Role, config: &Config) -> Pair<Filter> {
    Pair {
        native: filter(native(builtin), role, config),
        wasm: [
            filter(wasm(plugin, 0), role, config),
            filter(wasm(plugin, 1), role, config),
        ],
    }
}

/// Every replication-policy function, one value per name.
fn policy_answers(p: &Arc<dyn ReplicationPolicy>, a: &str, ts: &[String]) -> Vec<String> {
    let mut out = vec![
        format!("{:?}", p.heartbeats_topic()),
        format!("{:?}", p.offset_syncs_topic(a)),
        format!("{:?}", p.checkpoints_topic(a)),
        format!("{:?}", p.format_remote_topics(a, ts)),
    ];
    for t in ts {
        let remote = p.format_remote_topic(a, t).unwrap();
        out.push(format!(
            "{t}: {remote:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
            p.topic_source(t).unwrap(),
            p.upstream_topic(t).unwrap(),
            p.original_topic(t).unwrap(),
            p.topic_source(&remote).unwrap(),
            p.upstream_topic(&remote).unwrap(),
            p.original_topic(&remote).unwrap(),
            p.is_heartbeats_topic(t).unwrap(),
            p.is_checkpoints_topic(t).unwrap(),
            p.is_mm2_internal_topic(t).unwrap(),
            p.is_internal_topic(t).unwrap(),
        ));
    }
    out
}

fn default_policies() -> &'static [Pair<dyn ReplicationPolicy>; 2] {
    static P: OnceLock<[Pair<dyn ReplicationPolicy>; 2]> = OnceLock::new();
    P.get_or_init(|| {
        [
            policies(&[], "default-policy", "default_policy"),
            policies(
                &[("replication.policy.separator", "__")],
                "default-policy",
                "default_policy",
            ),
        ]
    })
}

fn identity_policies() -> &'static [Pair<dyn ReplicationPolicy>; 2] {
    static P: OnceLock<[Pair<dyn ReplicationPolicy>; 2]> = OnceLock::new();
    P.get_or_init(|| {
        [
            policies(
                &[("source.cluster.alias", "primary")],
                "identity-policy",
                "identity_policy",
            ),
            policies(&[], "identity-policy", "identity_policy"),
        ]
    })
}

fn filters() -> &'static Vec<Pair<Filter>> {
    static P: OnceLock<Vec<Pair<Filter>>> = OnceLock::new();
    P.get_or_init(|| {
        let cfg = |pairs: &[(&str, &str)]| -> Config { pairs.iter().copied().collect() };
        vec![
            pair(
                "default-topic-filter",
                "regex_filter",
                Role::TopicFilter,
                &Config::new(),
            ),
            pair(
                "default-group-filter",
                "regex_filter",
                Role::GroupFilter,
                &Config::new(),
            ),
            pair(
                "default-topic-filter",
                "regex_filter",
                Role::TopicFilter,
                &cfg(&[
                    ("topics", "[a-m].*, x\\..*"),
                    ("topics.exclude", ".*\\.internal|.*-[0-9]+"),
                ]),
            ),
            pair(
                "default-group-filter",
                "regex_filter",
                Role::GroupFilter,
                &cfg(&[("groups", "c.*"), ("groups.exclude", "")]),
            ),
            pair(
                "default-config-property-filter",
                "default_config_filter",
                Role::ConfigPropertyFilter,
                &Config::new(),
            ),
            pair(
                "default-config-property-filter",
                "default_config_filter",
                Role::ConfigPropertyFilter,
                &cfg(&[
                    ("config.properties.exclude", "[a-f].*"),
                    ("use.defaults.from", "source"),
                ]),
            ),
        ]
    })
}

fn check_policies(
    pairs: &[Pair<dyn ReplicationPolicy>],
    a: &str,
    ts: &[String],
) -> Result<(), TestCaseError> {
    for p in pairs {
        let expected = policy_answers(&p.native, a, ts);
        for w in &p.wasm {
            prop_assert_eq!(&policy_answers(w, a, ts), &expected);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn default_policy_twins_agree(a in alias(), ts in names()) {
        check_policies(default_policies(), &a, &ts)?;
    }

    #[test]
    fn identity_policy_twins_agree(a in alias(), ts in names()) {
        check_policies(identity_policies(), &a, &ts)?;
    }

    #[test]
    fn filter_twins_agree(ns in names()) {
        for p in filters() {
            let expected = (p.native)(&ns);
            for w in &p.wasm {
                prop_assert_eq!(&w(&ns), &expected);
            }
        }
    }
}

#[test]
fn twins_agree_on_mm2_edge_cases() {
    let edge: Vec<String> = [
        "a.",
        "a..",
        ".",
        ".a",
        "a..b",
        "",
        "heartbeats",
        "x.heartbeats",
        "__a",
        "b.internal",
        "c-internal",
    ]
    .map(String::from)
    .to_vec();
    check_policies(default_policies(), "src", &edge).unwrap();
    check_policies(identity_policies(), "src", &edge).unwrap();
}
