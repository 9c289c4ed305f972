use super::*;
use crate::config::load_str;
use crate::plugin::cache::CacheChoice;
use std::path::Path;

fn fixture(name: &str) -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/mm2")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("fixture");
    parse(&text).expect("properties")
}

/// The translation, checked to be a configuration kmirror loads.
fn translated(props: &BTreeMap<String, String>) -> (Translation, crate::config::LoadedConfig) {
    let t = translate(props, "plugins.d").expect("translated");
    let loaded = load_str(
        &t.toml,
        Path::new("/etc/kmirror/kmirror.toml"),
        &CacheChoice::Disabled,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", t.toml));
    (t, loaded)
}

fn keys(list: &[Untranslated]) -> Vec<&str> {
    list.iter().map(|u| u.key.as_str()).collect()
}

#[test]
fn the_sample_configuration_kafka_ships_becomes_two_flows_taking_over() {
    let (t, cfg) = translated(&fixture("connect-mirror-maker.properties"));
    assert!(t.untranslated.is_empty(), "{:?}", t.untranslated);
    let names: Vec<&str> = cfg.flows.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["A->B", "B->A"]);
    for f in &cfg.flows {
        assert!(f.settings.take_over_from_mm2, "{}", f.name);
        assert_eq!(f.settings.replication_factor, Some(1), "{}", f.name);
    }
    assert_eq!(
        cfg.flows[0].source.bootstrap_servers,
        "A_host1:9092,A_host2:9092,A_host3:9092"
    );
    // Connect's and MM2's internal-topic settings need nothing, and say why.
    let not_needed = keys(&t.not_needed);
    for key in [
        "checkpoints.topic.replication.factor",
        "offset.storage.replication.factor",
        "status.storage.replication.factor",
        "config.storage.replication.factor",
    ] {
        assert!(not_needed.contains(&key), "{key}: {not_needed:?}");
    }
    assert!(t.toml.contains("topic_filter = { builtin = \"default-topic-filter\", config = { \"topics\" = \".*\" } }"), "{}", t.toml);
}

#[test]
fn a_tuned_bidirectional_configuration_translates_what_has_an_equivalent_and_names_the_rest() {
    let (t, cfg) = translated(&fixture("bidirectional.properties"));
    let toml = &t.toml;
    let flow = |name: &str| {
        cfg.flows
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("{name}:\n{toml}"))
    };
    let (ew, we) = (flow("east->west"), flow("west->east"));
    // Global keys reach every flow; a flow's own keys only it.
    for f in [ew, we] {
        assert_eq!(f.settings.replication_factor, Some(3));
        assert_eq!(f.settings.offset_lag_max, 50);
        assert_eq!(
            f.settings.refresh_topics_interval,
            std::time::Duration::from_secs(30)
        );
        assert!(f.settings.heartbeats.is_none(), "-1 turns heartbeats off");
        assert_eq!(
            f.settings.replication_tasks, 8,
            "tasks.max = 16, at most 8 per instance"
        );
        assert!(f.settings.take_over_from_mm2);
    }
    assert!(
        ew.settings
            .checkpoints
            .as_ref()
            .is_some_and(|c| c.sync_group_offsets.is_some()),
        "{toml}"
    );
    assert!(we.settings.checkpoints.is_none(), "{toml}");
    assert!(
        toml.contains("\"topics\" = \"orders.*, payments\", \"topics.exclude\" = '.*\\.tmp'"),
        "{toml}"
    );
    assert!(toml.contains("group_filter = { builtin = \"default-group-filter\", config = { \"groups\" = \"billing.*\" } }"), "{toml}");
    assert!(
        toml.contains("offset_syncs_topic_location = \"target\""),
        "{toml}"
    );
    assert!(toml.contains("replication_policy = { builtin = \"default-policy\", config = { \"replication.policy.separator\" = \"_\" } }"), "{toml}");
    // Client settings: librdkafka's names, SCRAM credentials from the JAAS line.
    let east = &ew.source.librdkafka;
    assert_eq!(
        east.get("sasl.mechanism").map(String::as_str),
        Some("SCRAM-SHA-512")
    );
    assert_eq!(
        east.get("sasl.username").map(String::as_str),
        Some("mirror")
    );
    assert_eq!(
        east.get("sasl.password").map(String::as_str),
        Some("s3cret")
    );
    assert_eq!(
        east.get("max.partition.fetch.bytes").map(String::as_str),
        Some("2097152")
    );
    let west = &ew.target.librdkafka;
    assert_eq!(west.get("linger.ms").map(String::as_str), Some("20"));
    assert_eq!(
        west.get("compression.type").map(String::as_str),
        Some("zstd")
    );
    assert!(
        t.notes
            .iter()
            .any(|n| n.contains("east.sasl.jaas.config") && n.contains("secret")),
        "{:?}",
        t.notes
    );
    // Never dropped in silence: each key without an equivalent, with its reason.
    let why = |key: &str| {
        t.untranslated
            .iter()
            .find(|u| u.key == key)
            .map(|u| u.reason.clone())
            .unwrap_or_else(|| panic!("{key} not named: {:?}", t.untranslated))
    };
    assert!(
        why("west->east.replication.policy.class")
            .contains("kmirror plugin new --role replication-policy")
    );
    assert!(why("east.ssl.truststore.location").contains("ssl.ca.location"));
    assert!(why("west.producer.acks").contains("acks=all"));
    assert!(why("refresh.groups.enabled").contains("refresh_groups_interval"));
    assert!(why("some.typo.setting").contains("not a MirrorMaker 2 setting"));
    assert_eq!(t.untranslated.len(), 5, "{:?}", t.untranslated);
    assert!(keys(&t.not_needed).contains(&"key.converter"));
    // The file says so too.
    assert!(
        toml.contains("#   some.typo.setting: not a MirrorMaker 2 setting"),
        "{toml}"
    );
    // Translated, needing nothing or named with why: every key of the input, once.
    let props = fixture("bidirectional.properties");
    for key in props.keys() {
        let places = [
            t.translated.contains(key),
            keys(&t.untranslated).contains(&key.as_str()),
            keys(&t.not_needed).contains(&key.as_str()),
        ];
        assert_eq!(
            places.iter().filter(|p| **p).count(),
            1,
            "{key}: {places:?}"
        );
    }
    assert!(
        t.translated.contains("east->west.groups")
            && t.translated.contains("east.sasl.jaas.config")
    );
}

#[test]
fn exactly_once_source_support_turns_exactly_once_on_without_a_takeover() {
    let mut props = fixture("connect-mirror-maker.properties");
    props.insert("exactly.once.source.support".into(), "enabled".into());
    let (t, cfg) = translated(&props);
    for f in &cfg.flows {
        assert!(f.settings.exactly_once.is_some(), "{}", f.name);
        assert!(!f.settings.take_over_from_mm2, "{}", f.name);
    }
    assert_eq!(t.notes.len(), 2, "{:?}", t.notes);
}

#[test]
fn inputs_that_cannot_be_translated_say_why() {
    let props = |text: &str| parse(text).expect("properties");
    assert_eq!(
        translate(&props("A.bootstrap.servers = a:1"), "p").err(),
        Some(ImportError::NoClusters)
    );
    assert_eq!(
        translate(&props("clusters = a.b, c"), "p").err(),
        Some(ImportError::BadAlias("a.b".into()))
    );
    assert_eq!(
        translate(&props("clusters = A, B\nA.bootstrap.servers = a:1"), "p").err(),
        Some(ImportError::NoBootstrap("B".into()))
    );
    assert_eq!(
        translate(
            &props("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = false"),
            "p"
        )
        .err(),
        Some(ImportError::NoFlows)
    );
    let (t, _) = translated(&props(
        "clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = true\nA->B.emit.checkpoints.interval.seconds = soon\nreplication.factor = 0\nA->B.offset-syncs.topic.location = middle",
    ));
    let named = keys(&t.untranslated);
    assert_eq!(
        named,
        [
            "A->B.emit.checkpoints.interval.seconds",
            "A->B.offset-syncs.topic.location",
            "replication.factor"
        ],
        "{:?}",
        t.untranslated
    );
}
