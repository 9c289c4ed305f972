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
fn an_exactly_once_mm2_becomes_flows_that_take_over_and_says_to_switch_after() {
    let mut props = fixture("connect-mirror-maker.properties");
    props.insert("B.exactly.once.source.support".into(), "enabled".into());
    props.insert("exactly.once.source.support".into(), "enabled".into());
    let (t, cfg) = translated(&props);
    for f in &cfg.flows {
        assert!(f.settings.exactly_once.is_none(), "{}", f.name);
        assert!(f.settings.take_over_from_mm2, "{}", f.name);
    }
    assert_eq!(keys(&t.untranslated), ["B.exactly.once.source.support"]);
    assert!(t.untranslated[0].reason.contains("set exactly_once = true"));
    // MM2 reads it only from the target's worker settings.
    assert!(keys(&t.not_needed).contains(&"exactly.once.source.support"));
}

/// A small MM2 file: clusters A and B, the flow A->B, and `extra`.
fn one_way(extra: &str) -> BTreeMap<String, String> {
    parse(&format!(
        "clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = true\n{extra}"
    ))
    .expect("properties")
}

#[test]
fn client_settings_follow_mm2s_precedence_and_name_what_one_cluster_cannot_hold() {
    let (t, cfg) = translated(&one_way(
        "security.protocol = SSL\nssl.endpoint.identification.algorithm = https\nB.security.protocol = PLAINTEXT\nA.producer.client.id = p\nA.consumer.client.id = c\nA.linger.ms = 5\nB.producer.linger.ms = 7\nA.producer.acks = all\n",
    ));
    let f = &cfg.flows[0];
    let get = |m: &BTreeMap<String, String>, k: &str| m.get(k).cloned();
    // Top-level security settings reach every cluster, under the cluster's own.
    assert_eq!(
        get(&f.source.librdkafka, "security.protocol").as_deref(),
        Some("SSL")
    );
    assert_eq!(
        get(&f.target.librdkafka, "security.protocol").as_deref(),
        Some("PLAINTEXT")
    );
    assert_eq!(
        get(
            &f.target.librdkafka,
            "ssl.endpoint.identification.algorithm"
        )
        .as_deref(),
        Some("https")
    );
    assert_eq!(get(&f.target.librdkafka, "linger.ms").as_deref(), Some("7"));
    let why = |key: &str| {
        t.untranslated
            .iter()
            .find(|u| u.key == key)
            .map(|u| u.reason.clone())
            .unwrap_or_else(|| panic!("{key}: {:?}", t.untranslated))
    };
    // Two client kinds, two values, one cluster: named (the first kept).
    assert!(why("A.producer.client.id").contains("conflicts with A.consumer.client.id"));
    // MM2 gave a plain `A.linger.ms` to no client.
    assert!(why("A.linger.ms").contains("had no effect there"));
    // kmirror's own value: nothing lost.
    assert!(keys(&t.not_needed).contains(&"A.producer.acks"));
}

#[test]
fn keys_of_an_enabled_flow_are_translated_or_named_never_passed_over() {
    let (t, _) = translated(&one_way(
        "A->B.sync.group.offset.enabled = true\nA->B.producer.override.linger.ms = 5\nB->A.topics = x\noffset.storage.topic = custom-offsets\nconfig.providers = file\n",
    ));
    let named = keys(&t.untranslated);
    for key in [
        "A->B.producer.override.linger.ms",
        "A->B.sync.group.offset.enabled",
        "config.providers",
        "offset.storage.topic",
    ] {
        assert!(named.contains(&key), "{key}: {:?}", t.untranslated);
    }
    // A flow that is not enabled needs nothing; MM2's heartbeats for it are noted.
    assert!(keys(&t.not_needed).contains(&"B->A.topics"));
    assert!(
        t.notes.iter().any(|n| n.contains("A.heartbeats")),
        "{:?}",
        t.notes
    );
}

#[test]
fn secrets_and_dollars_reach_librdkafka_as_mm2_had_them() {
    let (t, cfg) = translated(&one_way(
        "A.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username='u s' password=\"pa$$w${x\";\nB.ssl.keystore.type = PKCS12\nB.ssl.keystore.location = /k.p12\nB.ssl.key.password = a$b\n",
    ));
    let f = &cfg.flows[0];
    assert_eq!(
        f.source.librdkafka.get("sasl.username").map(String::as_str),
        Some("u s")
    );
    assert_eq!(
        f.source.librdkafka.get("sasl.password").map(String::as_str),
        Some("pa$$w${x"),
        "{}",
        t.toml
    );
    assert_eq!(
        f.target
            .librdkafka
            .get("ssl.key.password")
            .map(String::as_str),
        Some("a$b")
    );
    assert_eq!(
        f.target
            .librdkafka
            .get("ssl.keystore.location")
            .map(String::as_str),
        Some("/k.p12")
    );
    // MM2's environment reference, as kmirror writes it.
    let t = translate(&one_way("B.ssl.key.password = ${env:KEY_PASSWORD}\n"), "p").expect("t");
    assert!(
        t.toml
            .contains("\"ssl.key.password\" = \"${KEY_PASSWORD}\""),
        "{}",
        t.toml
    );
    // A JKS keystore, a JAAS option librdkafka has not, another config provider: named.
    let (t, _) = translated(&one_way(
        "A.ssl.keystore.location = /k.jks\nA.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username=u password=p tokenauth=true;\nB.ssl.key.password = ${file:/etc/p:pw}\n",
    ));
    assert_eq!(
        keys(&t.untranslated),
        [
            "A.sasl.jaas.config",
            "A.ssl.keystore.location",
            "B.ssl.key.password"
        ],
        "{:?}",
        t.untranslated
    );
}

#[test]
fn jaas_values_are_read_as_javas_parser_reads_them() {
    let plain = "org.apache.kafka.common.security.plain.PlainLoginModule";
    let creds = |line: &str| client::jaas(line).map(|v| (v[0].1.clone(), v[1].1.clone()));
    assert_eq!(
        creds(&format!(
            r#"{plain} required username="a\"b" password='c\\d';"#
        )),
        Ok(("a\"b".into(), "c\\d".into()))
    );
    assert_eq!(
        creds(&format!("{plain}   required\n  password=p   username=u ;")),
        Ok(("u".into(), "p".into()))
    );
    assert!(
        creds(&format!(r#"{plain} required username="u" password="p"#)).is_err(),
        "unterminated"
    );
    assert!(
        creds(&format!("{plain} username=u password=p;")).is_err(),
        "no control flag"
    );
    assert!(creds("com.sun.security.auth.module.Krb5LoginModule required;").is_err());
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
