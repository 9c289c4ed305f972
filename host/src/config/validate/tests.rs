use super::*;
use crate::plugin::PluginSource;
use std::time::Duration;

fn load(text: &str) -> Result<LoadedConfig, ConfigErrors> {
    load_str(
        text,
        Path::new("/etc/kmirror/kmirror.toml"),
        &CacheChoice::Disabled,
    )
}

fn errors(text: &str) -> Vec<String> {
    match load(text) {
        Ok(_) => panic!("expected errors"),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

const CLUSTERS: &str = r#"
[clusters.primary]
bootstrap_servers = "127.0.0.1:19092"

[clusters.backup]
bootstrap_servers = "127.0.0.1:29092"
"#;

#[test]
fn the_documented_example_with_builtins_loads_with_defaults() {
    let text = format!(
        r#"{CLUSTERS}
[clusters.primary.librdkafka]
"security.protocol" = "PLAINTEXT"

[[flows]]
source = "primary"
target = "backup"
topic_filter = {{ builtin = "default-topic-filter", config = {{ "topics" = "orders.*,payments", "topics.exclude" = ".*\\.tmp" }} }}
group_filter = {{ builtin = "default-group-filter" }}
config_property_filter = {{ builtin = "default-config-property-filter" }}
refresh_topics_interval = "500ms"
offset_lag_max = 100
replication_factor = 1
"#
    );
    let cfg = load(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.plugins_dir, Path::new("/etc/kmirror/plugins.d"));
    let flow = &cfg.flows[0];
    assert_eq!(flow.name, "primary->backup");
    assert_eq!(flow.source.librdkafka["security.protocol"], "PLAINTEXT");
    assert_eq!(
        flow.settings.refresh_topics_interval,
        Duration::from_millis(500)
    );
    assert_eq!(flow.settings.heartbeats, Some(Duration::from_secs(1)));
    assert_eq!(
        flow.slots.replication_policy,
        PluginSource::Builtin("default-policy".into())
    );
    let f = &flow.roles.topic_filter;
    assert!(f.should_replicate_topic("orders-eu").unwrap());
    assert!(!f.should_replicate_topic("orders.tmp").unwrap());
    assert!(!f.should_replicate_topic("shipping").unwrap());
}

#[test]
fn unknown_keys_and_wrong_types_name_line_and_key() {
    let e = errors(&format!(
        "{CLUSTERS}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\nrefresh_topic_interval = \"5s\"\n"
    ));
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("/etc/kmirror/kmirror.toml:11:"),
        "{}",
        e[0]
    );
    assert!(
        e[0].contains("unknown field `refresh_topic_interval`"),
        "{}",
        e[0]
    );
    assert!(
        e[0].contains("did you mean `refresh_topics_interval`?")
            && !e[0].contains("expected one of"),
        "a typo is answered with the nearest key, not every key of the table: {}",
        e[0]
    );
    let e = errors(&format!(
        "{CLUSTERS}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\noffset_lag_maxx = 5\n"
    ));
    assert!(e[0].contains("did you mean `offset_lag_max`?"), "{}", e[0]);
    let e = errors(&format!(
        "{CLUSTERS}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\ncompletely_unrelated = 5\n"
    ));
    assert!(
        e[0].contains("unknown field `completely_unrelated`, expected one of")
            && !e[0].contains("did you mean"),
        "nothing close: the keys are listed: {}",
        e[0]
    );

    let e = errors(&format!(
        "{CLUSTERS}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\nrefresh_topics_interval = 5\n"
    ));
    assert!(
        e[0].contains(":11:") && e[0].contains("refresh_topics_interval")
            || e[0].contains("duration"),
        "{}",
        e[0]
    );
    let e = errors(&format!(
        "{CLUSTERS}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\nrefresh_topics_interval = \"soon\"\n"
    ));
    assert!(e[0].contains(":11:"), "{}", e[0]);
}

#[test]
fn every_semantic_error_is_reported_at_once() {
    let text = format!(
        r#"{CLUSTERS}
[[flows]]
source = "primry"
target = "backup"

[[flows]]
source = "backup"
target = "backup"
topic_filter = {{ builtin = "default-policy" }}
group_filter = {{ builtin = "no-such" }}
replication_policy = {{ builtin = "default-policy", plugin = "x.wasm" }}
config_property_filter = {{ plugin = "missing.wasm" }}
"#
    );
    let e = errors(&text);
    let all = e.join("\n");
    assert!(
        all.contains(
            ":9:10: flows[0].source: unknown cluster `primry`; clusters are: backup, primary"
        ),
        "{all}"
    );
    assert!(
        all.contains(":14:10: flows[1].target: source and target must be different clusters"),
        "{all}"
    );
    assert!(all.contains(":15:16: flows[1].topic_filter: built-in `default-policy` is a replication-policy, not a topic-filter"), "{all}");
    assert!(
        all.contains(":16:16: flows[1].group_filter: unknown built-in `no-such`"),
        "{all}"
    );
    assert!(
        all.contains(":17:22: flows[1].replication_policy: give exactly one of"),
        "{all}"
    );
    assert!(all.contains(":18:26: flows[1].config_property_filter: cannot read plugin /etc/kmirror/plugins.d/missing.wasm"), "{all}");
    assert_eq!(e.len(), 6, "{all}");
}

#[test]
fn builtin_configuration_errors_are_located() {
    let text = format!(
        "{CLUSTERS}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\ntopic_filter = {{ builtin = \"default-topic-filter\", config = {{ \"topic\" = \"x\" }} }}\n"
    );
    let e = errors(&text);
    assert!(
        e[0].contains(":11:16: flows[0].topic_filter:") && e[0].contains("unknown key `topic`"),
        "{}",
        e[0]
    );
}

#[test]
fn environment_variables_are_substituted_and_secrets_hidden() {
    // SAFETY: test-only variables with unique names.
    unsafe { std::env::set_var("KMIRROR_TEST_PASSWORD", "s3cret") };
    unsafe { std::env::set_var("KMIRROR_TEST_SERVERS", "10.0.0.1:9092") };
    let text = r#"
[clusters.primary]
bootstrap_servers = "${KMIRROR_TEST_SERVERS}"
[clusters.primary.librdkafka]
"sasl.password" = "${KMIRROR_TEST_PASSWORD}"
"client.id" = "cost$$center"
[clusters.backup]
bootstrap_servers = "b:9092"
[[flows]]
source = "primary"
target = "backup"
"#;
    let cfg = load(text).unwrap_or_else(|e| panic!("{e}"));
    let primary = &cfg.flows[0].source;
    assert_eq!(primary.bootstrap_servers, "10.0.0.1:9092");
    assert_eq!(primary.librdkafka["sasl.password"], "s3cret");
    assert_eq!(primary.librdkafka["client.id"], "cost$center");
    let shown = format!("{primary:?}");
    assert!(
        !shown.contains("s3cret") && shown.contains("***"),
        "{shown}"
    );

    let e = errors(&text.replace("KMIRROR_TEST_PASSWORD", "KMIRROR_TEST_UNSET_VAR"));
    assert!(
        e[0].contains(":5:19:")
            && e[0].contains("environment variable `KMIRROR_TEST_UNSET_VAR` is not set"),
        "{}",
        e[0]
    );
}

#[test]
fn librdkafka_conflicts_name_both_keys() {
    let text = format!(
        "{CLUSTERS}[clusters.backup.librdkafka]\n\"bootstrap.servers\" = \"x:1\"\n\"enable.idempotence\" = \"false\"\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\n"
    );
    let all = errors(&text).join("\n");
    assert!(all.contains("clusters.backup.librdkafka.\"bootstrap.servers\": conflicts with clusters.backup.bootstrap_servers"), "{all}");
    assert!(
        all.contains("\"enable.idempotence\": is set by kmirror"),
        "{all}"
    );
}

#[test]
fn empty_files_say_what_is_missing() {
    let all = errors("").join("\n");
    assert!(all.contains("missing field `clusters`"), "{all}");
    let all = errors(CLUSTERS).join("\n");
    assert!(all.contains("flows: no [[flows]] are defined"), "{all}");
}

#[test]
fn cluster_aliases_are_plain_names() {
    let long = "a".repeat(65);
    let text = format!(
        "{CLUSTERS}\n[clusters.\"eu/west\"]\nbootstrap_servers = \"a:1\"\n\n[clusters.\"a b\"]\nbootstrap_servers = \"a:1\"\n\n[clusters.\"a.b\"]\nbootstrap_servers = \"a:1\"\n\n[clusters.\"\"]\nbootstrap_servers = \"a:1\"\n\n[clusters.{long}]\nbootstrap_servers = \"a:1\"\n\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\n"
    );
    let e = errors(&text);
    let all = e.join("\n");
    for (line, alias) in [
        (8, "eu/west"),
        (11, "a b"),
        (14, "a.b"),
        (17, ""),
        (20, &long),
    ] {
        let expected = format!(
            "/etc/kmirror/kmirror.toml:{line}:1: clusters.{alias}: a cluster alias must be 1 to 64 characters of `a-z`, `A-Z`, `0-9`, `_` and `-`"
        );
        assert!(
            e.iter().any(|e| e.starts_with(&expected)),
            "{expected}\n{all}"
        );
    }
    assert_eq!(e.len(), 5, "{all}");
}

#[test]
fn cluster_aliases_of_letters_digits_dashes_and_underscores_load() {
    let alias = format!("eu-west_1{}", "A".repeat(55));
    let text = format!(
        "{}\n[[flows]]\nsource = \"{alias}\"\ntarget = \"backup\"\n",
        CLUSTERS.replace("primary", &alias)
    );
    let cfg = load(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.flows[0].source.alias, alias);
    assert_eq!(cfg.flows[0].name, format!("{alias}->backup"));
}

#[test]
fn a_record_transform_chain_is_validated_link_by_link() {
    let ok = load(&format!(
        r#"{CLUSTERS}
[[flows]]
source = "primary"
target = "backup"
record_transforms = [{{ builtin = "keep-all" }}, {{ builtin = "keep-all" }}]
on_transform_error = "skip"
"#
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let flow = &ok.flows[0];
    assert_eq!(flow.roles.record_transforms.len(), 2);
    assert_eq!(flow.slots.transforms.len(), 2);
    assert_eq!(flow.roles.record_transforms[1].name, "builtin:keep-all");
    assert_eq!(flow.settings.on_transform_error, OnUnproducible::Skip);
    assert_eq!(
        load(&format!(
            "{CLUSTERS}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\n"
        ))
        .unwrap()
        .flows[0]
            .settings
            .on_transform_error,
        OnUnproducible::Pause,
        "pause by default"
    );

    let e = errors(&format!(
        r#"{CLUSTERS}
[[flows]]
source = "primary"
target = "backup"
record_transforms = [
  {{ builtin = "keep-all" }},
  {{ builtin = "default-policy" }},
  {{ builtin = "keep-all", config = {{ "x" = "1" }} }},
]
"#
    ));
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with("/etc/kmirror/kmirror.toml:13:")
            && e[0].contains("flows[0].record_transforms[1]")
            && e[0].contains("is a replication-policy, not a record-transform"),
        "{}",
        e[0]
    );
    assert!(
        e[1].starts_with("/etc/kmirror/kmirror.toml:14:")
            && e[1].contains("flows[0].record_transforms[2]")
            && e[1].contains("`x`"),
        "{}",
        e[1]
    );
}

#[test]
fn exactly_once_settings_load_and_are_checked() {
    let flow = |extra: &str| {
        format!("{CLUSTERS}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\n{extra}\n")
    };
    let cfg = load(&flow("exactly_once = true")).unwrap_or_else(|e| panic!("{e}"));
    let eos = cfg.flows[0].settings.exactly_once.expect("on");
    assert_eq!(eos.transaction_interval, Duration::from_secs(1));
    assert_eq!(
        (eos.max_records, eos.max_bytes, eos.shards),
        (100_000, 64 << 20, 4)
    );
    let cfg = load(&flow(
        "exactly_once = true\ntransaction_interval = \"250ms\"\ntransaction_max_records = 500\nexactly_once_shards = 16",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let eos = cfg.flows[0].settings.exactly_once.expect("on");
    assert_eq!(eos.transaction_interval, Duration::from_millis(250));
    assert_eq!((eos.max_records, eos.shards), (500, 16));
    assert!(
        load(&flow("")).unwrap().flows[0]
            .settings
            .exactly_once
            .is_none(),
        "off by default"
    );

    let all = errors(&flow(
        "exactly_once = true\ntransaction_interval = \"0s\"\ntransaction_max_records = 0\nexactly_once_shards = 0\ntake_over_from_mm2 = true\nsingle_instance = true",
    ))
    .join("\n");
    for key in [
        "transaction_interval: must be longer than 0",
        "transaction_max_records: must be at least 1",
        "exactly_once_shards: must be between 1 and 256",
        "take_over_from_mm2: is not supported with exactly_once = true",
        "single_instance: is not supported with exactly_once = true",
    ] {
        assert!(all.contains(key), "{key} missing from:\n{all}");
    }
    let all = errors(&flow("exactly_once_shards = 4")).join("\n");
    assert!(
        all.contains("exactly_once_shards: needs exactly_once = true"),
        "{all}"
    );
}

#[test]
fn a_single_instance_needs_a_lease_of_3s_and_a_linger_below_an_eighth_of_it() {
    let text = |linger: &str, lease: &str| {
        format!(
            "{CLUSTERS}[clusters.backup.librdkafka]\n\"linger.ms\" = \"{linger}\"\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\nsingle_instance = true\nsession_timeout = \"{lease}\"\n"
        )
    };
    let all = errors(&text("1000", "3s")).join("\n");
    assert!(
        all.contains(
            "flows[0].session_timeout: a single instance keeps a record queued at most an eighth"
        ) && all.contains("375 ms")
            && all.contains("cluster `backup` holds records for linger.ms = 1000 ms")
            && all.contains("raise session_timeout above 8000 ms"),
        "{all}"
    );
    assert!(
        load(&text("1000", "9s")).is_ok(),
        "1,125 ms fits a linger of 1,000"
    );
    let all = errors(&text("5", "2s")).join("\n");
    assert!(
        all.contains("flows[0].session_timeout: a single instance's lease must be at least 3s"),
        "{all}"
    );
    // Without single_instance the producer never gives a record up.
    let shared = text("1000", "2s").replace("single_instance = true\n", "");
    assert!(load(&shared).is_ok());
    // librdkafka's other name for linger.ms would race kmirror's own setting.
    let alias = text("5", "10s").replace("\"linger.ms\"", "\"queue.buffering.max.ms\"");
    let all = errors(&alias).join("\n");
    assert!(
        all.contains("\"queue.buffering.max.ms\": is librdkafka's other name for linger.ms"),
        "{all}"
    );
}

#[test]
fn a_clusters_group_timing_comes_from_session_timeout_but_its_heartbeat_is_its_own() {
    let text = |key: &str| {
        format!(
            "{CLUSTERS}[clusters.primary.librdkafka]\n\"{key}\" = \"2000\"\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\n"
        )
    };
    for key in ["session.timeout.ms", "max.poll.interval.ms"] {
        let all = errors(&text(key)).join("\n");
        assert!(
            all.contains(&format!(
                "\"{key}\": is set by kmirror from the flow's session_timeout"
            )) && all.contains("set session_timeout instead"),
            "{all}"
        );
    }
    assert!(load(&text("heartbeat.interval.ms")).is_ok());
}

#[test]
fn the_audit_is_off_by_default_and_its_settings_are_checked() {
    let flow = |extra: &str| {
        format!("{CLUSTERS}\n[[flows]]\nsource = \"primary\"\ntarget = \"backup\"\n{extra}\n")
    };
    assert!(load(&flow("")).unwrap().flows[0].settings.audit.is_none());
    let cfg = load(&flow("audit_interval = \"1m\"")).unwrap_or_else(|e| panic!("{e}"));
    let audit = cfg.flows[0].settings.audit.expect("on");
    assert_eq!(audit.interval, Duration::from_secs(60));
    assert_eq!(audit.records_per_second, 10_000);
    let all = errors(&flow(
        "audit_interval = \"0s\"\naudit_records_per_second = 0\nrecord_transforms = [{ builtin = \"keep-all\" }]",
    ))
    .join("\n");
    for key in [
        "audit_interval: must be longer than 0",
        "audit_records_per_second: must be between 1 and 10000000",
        "audit_interval: is not supported on a flow with record_transforms",
    ] {
        assert!(all.contains(key), "{key} missing from:\n{all}");
    }
    // The rate alone (the audit off) is not an error.
    assert!(load(&flow("audit_records_per_second = 0")).is_ok());
}
