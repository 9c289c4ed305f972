//! One flow's `[[flows]]` table from MM2's flow settings.

use super::client::kmirror_value;
use super::{Props, Translation, Untranslated, quoted, refuse, slot};
use std::collections::BTreeMap;

/// MM2's replication policies and the built-ins that implement them.
const POLICIES: [(&str, &str); 2] = [
    (
        "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
        "default-policy",
    ),
    (
        "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "identity-policy",
    ),
];

/// MM2's filter classes, the kmirror slot each fills, its default class, the built-in and
/// the plugin role for a custom class.
const FILTERS: [(&str, &str, &str, &str, &str); 3] = [
    (
        "topic.filter.class",
        "topic_filter",
        "org.apache.kafka.connect.mirror.DefaultTopicFilter",
        "default-topic-filter",
        "topic-filter",
    ),
    (
        "group.filter.class",
        "group_filter",
        "org.apache.kafka.connect.mirror.DefaultGroupFilter",
        "default-group-filter",
        "group-filter",
    ),
    (
        "config.property.filter.class",
        "config_property_filter",
        "org.apache.kafka.connect.mirror.DefaultConfigPropertyFilter",
        "default-config-property-filter",
        "config-property-filter",
    ),
];

/// Filter settings: the slot, the key its built-in takes, and the MM2 keys giving it
/// (the first present wins: MM2's deprecated `*.blacklist` names only count without the
/// new one).
const FILTER_KEYS: [(&str, &str, &[&str]); 6] = [
    ("topic_filter", "topics", &["topics", "topics.whitelist"]),
    (
        "topic_filter",
        "topics.exclude",
        &["topics.exclude", "topics.blacklist"],
    ),
    ("group_filter", "groups", &["groups", "groups.whitelist"]),
    (
        "group_filter",
        "groups.exclude",
        &["groups.exclude", "groups.blacklist"],
    ),
    (
        "config_property_filter",
        "config.properties.exclude",
        &["config.properties.exclude", "config.properties.blacklist"],
    ),
    (
        "config_property_filter",
        "use.defaults.from",
        &["use.defaults.from"],
    ),
];

/// Intervals in seconds and the kmirror key; a negative one turns the feature (the second
/// key, if any) off, as in MM2.
const INTERVALS: [(&str, &str, Option<&str>); 7] = [
    (
        "refresh.topics.interval.seconds",
        "refresh_topics_interval",
        None,
    ),
    (
        "refresh.groups.interval.seconds",
        "refresh_groups_interval",
        None,
    ),
    (
        "emit.heartbeats.interval.seconds",
        "emit_heartbeats_interval",
        Some("emit_heartbeats_enabled"),
    ),
    (
        "emit.checkpoints.interval.seconds",
        "emit_checkpoints_interval",
        Some("emit_checkpoints_enabled"),
    ),
    (
        "sync.group.offsets.interval.seconds",
        "sync_group_offsets_interval",
        Some("sync_group_offsets"),
    ),
    (
        "sync.topic.configs.interval.seconds",
        "sync_topic_configs_interval",
        Some("sync_topic_configs"),
    ),
    (
        "sync.topic.acls.interval.seconds",
        "sync_topic_acls_interval",
        Some("sync_topic_acls_enabled"),
    ),
];

/// Switches and the kmirror key.
const SWITCHES: [(&str, &str); 5] = [
    ("emit.heartbeats.enabled", "emit_heartbeats_enabled"),
    ("emit.checkpoints.enabled", "emit_checkpoints_enabled"),
    ("sync.group.offsets.enabled", "sync_group_offsets"),
    ("sync.topic.configs.enabled", "sync_topic_configs"),
    ("sync.topic.acls.enabled", "sync_topic_acls_enabled"),
];

/// Flow keys with no kmirror counterpart, and why.
const FLOW_REFUSED: [(&str, &str); 5] = [
    (
        "refresh.topics.enabled",
        "kmirror always discovers topics; to look seldom, set refresh_topics_interval long",
    ),
    (
        "refresh.groups.enabled",
        "kmirror always discovers groups while checkpoints are on; to look seldom, set refresh_groups_interval long",
    ),
    (
        "emit.offset-syncs.enabled",
        "kmirror always writes offset syncs (checkpoints and failover translate with them)",
    ),
    (
        "heartbeats.topic.retention.ms",
        "kmirror creates the heartbeats topic with the broker's retention; change it with kafka-configs",
    ),
    (
        "checkpoints.topic.retention.ms",
        "kmirror creates the checkpoints topic with the broker's retention; change it with kafka-configs",
    ),
];

/// One flow's `[[flows]]` table.
pub(super) fn flow(
    p: &mut Props,
    source: &str,
    target: &str,
    pair: &str,
    out: &mut Translation,
) -> String {
    let mut lines: Vec<String> = vec![
        "[[flows]]".into(),
        format!("source = {}", quoted(source)),
        format!("target = {}", quoted(target)),
    ];
    lines.push("take_over_from_mm2 = true".into());

    // The replication policy.
    let class = p.flow(pair, "replication.policy.class");
    let builtin = match &class {
        Some((k, v)) if !POLICIES.iter().any(|(c, _)| c == v) => {
            refuse(
                out,
                k.clone(),
                format!(
                    "`{v}` is a Java class: write it as a plugin (`kmirror plugin new --role replication-policy`) and name it in replication_policy; the flow uses MM2's default policy until then"
                ),
            );
            "default-policy"
        }
        Some((_, v)) => POLICIES
            .iter()
            .find(|(c, _)| c == v)
            .map_or("default-policy", |(_, b)| *b),
        None => "default-policy",
    };
    let mut policy_config = Vec::new();
    for key in [
        "replication.policy.separator",
        "replication.policy.internal.topic.separator.enabled",
    ] {
        if let Some((k, v)) = p.flow(pair, key) {
            match kmirror_value(&v) {
                Ok(v) => policy_config.push(format!("{} = {}", quoted(key), quoted(&v))),
                Err(why) => refuse(out, k, why),
            }
        }
    }
    if class.is_some() || !policy_config.is_empty() {
        lines.push(slot("replication_policy", builtin, &policy_config));
    }

    // Filters.
    for (class_key, slot_key, default_class, builtin, role) in FILTERS {
        let mut config = Vec::new();
        for (slot_of, key, candidates) in FILTER_KEYS {
            if slot_of != slot_key {
                continue;
            }
            let mut found = candidates.iter().filter_map(|c| p.flow(pair, c));
            if let Some((k, v)) = found.next() {
                match kmirror_value(&v) {
                    Ok(v) => config.push(format!("{} = {}", quoted(key), quoted(&v))),
                    Err(why) => refuse(out, k, why),
                }
            }
            for (k, _) in found {
                out.not_needed.push(Untranslated {
                    key: k,
                    reason: format!("MM2 ignores its deprecated name when `{key}` is set"),
                });
            }
        }
        match p.flow(pair, class_key) {
            Some((k, v)) if v != default_class => refuse(
                out,
                k,
                format!(
                    "`{v}` is a Java class: write it as a plugin (`kmirror plugin new --role {role}`) and name it in {slot_key}; the flow uses MM2's default filter until then"
                ),
            ),
            _ => {}
        }
        if !config.is_empty() {
            lines.push(slot(slot_key, builtin, &config));
        }
    }

    // Intervals and switches.
    let mut set: BTreeMap<&str, String> = BTreeMap::new();
    for (mm2, key) in SWITCHES {
        if let Some((k, v)) = p.flow(pair, mm2) {
            match v.to_ascii_lowercase().as_str() {
                "true" | "false" => {
                    set.insert(key, format!("{key} = {}   # {k}", v.to_ascii_lowercase()));
                }
                _ => refuse(out, k, format!("`{v}`: MM2 takes true or false")),
            }
        }
    }
    for (mm2, key, off) in INTERVALS {
        let Some((k, v)) = p.flow(pair, mm2) else {
            continue;
        };
        match v.parse::<i64>() {
            Ok(s) if s > 0 => {
                set.insert(key, format!("{key} = \"{s}s\"   # {k}"));
            }
            Ok(_) => match off {
                Some(off) => {
                    set.insert(off, format!("{off} = false   # {k} = {v}"));
                }
                None => refuse(
                    out,
                    k,
                    format!("`{v}`: kmirror always refreshes; set a long interval to look seldom"),
                ),
            },
            Err(_) => refuse(out, k, format!("`{v}`: MM2 takes whole seconds")),
        }
    }
    lines.extend(set.into_values());
    if let Some((k, v)) = p.flow(pair, "offset.lag.max") {
        match v.parse::<u64>() {
            // MM2's 0 and kmirror's 1 both write a sync for every record.
            Ok(0) => {
                lines.push(format!("offset_lag_max = 1   # {k} = 0"));
                out.notes.push(format!(
                    "{k} = 0 (a sync for every record) became offset_lag_max = 1, kmirror's least (a sync at least every other record); kmirror's translation is exact whatever it is, from the syncs it writes at every break of the offsets' 1:1 run"
                ));
            }
            Ok(n) => lines.push(format!("offset_lag_max = {n}   # {k}")),
            _ => refuse(out, k, format!("`{v}`: a whole number of records")),
        }
    }
    if let Some((k, v)) = p.flow(pair, "replication.factor") {
        match v.parse::<i32>() {
            Ok(-1) => {} // the broker's default, kmirror's default too
            Ok(n) if (1..=i32::from(i16::MAX)).contains(&n) => {
                lines.push(format!("replication_factor = {n}   # {k}"));
            }
            _ => refuse(
                out,
                k,
                format!("`{v}`: a replication factor is -1 (the broker's) or 1 and up"),
            ),
        }
    }
    if let Some((k, v)) = p.flow(pair, "offset-syncs.topic.location") {
        match v.to_ascii_lowercase().as_str() {
            "source" | "target" => lines.push(format!(
                "offset_syncs_topic_location = \"{}\"   # {k}",
                v.to_ascii_lowercase()
            )),
            _ => refuse(out, k, format!("`{v}`: MM2 takes source or target")),
        }
    }
    if let Some((k, v)) = p.flow(pair, "tasks.max") {
        let most = crate::config::settings::MAX_REPLICATION_TASKS;
        match v.parse::<u32>() {
            Ok(n) if (1..=most).contains(&n) => lines.push(format!(
                "replication_tasks = {n}   # {k} (per instance; kmirror's default is the CPUs, at most 4)"
            )),
            Ok(n) if n > most => {
                lines.push(format!(
                    "replication_tasks = {most}   # {k} = {n}: at most {most} per instance; run more instances to spread wider"
                ));
                out.notes.push(format!(
                    "{k} = {n}: MM2 spreads its tasks over its workers; kmirror runs up to {most} per instance (each instance of a flow shares its partitions)"
                ));
            }
            _ => refuse(out, k, format!("`{v}`: a number of tasks, 1 or more")),
        }
    }
    if let Some((k, v)) = p
        .flow(pair, "consumer.auto.offset.reset")
        .or_else(|| p.flow(pair, &format!("{source}.consumer.auto.offset.reset")))
    {
        match v.to_ascii_lowercase().as_str() {
            "earliest" | "latest" => lines.push(format!(
                "start_offset = \"{}\"   # {k}",
                v.to_ascii_lowercase()
            )),
            _ => refuse(
                out,
                k,
                format!("`{v}`: kmirror starts new partitions at earliest or latest"),
            ),
        }
    }
    for (key, why) in FLOW_REFUSED {
        if why.is_empty() {
            continue;
        }
        if let Some((k, v)) = p.flow(pair, key) {
            let harmless = key.ends_with(".enabled") && v.eq_ignore_ascii_case("true");
            if !harmless {
                refuse(out, k, why.to_string());
            }
        }
    }
    let mut text = lines.join("\n");
    text.push_str("\n\n");
    text
}
