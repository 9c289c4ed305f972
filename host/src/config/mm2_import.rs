//! MirrorMaker 2's dedicated-mode configuration (`connect-mirror-maker.properties`)
//! translated into a kmirror configuration: `kmirror import-mm2-config`.
//!
//! Pure: the properties in, the TOML text and what could not be translated out. Every key
//! of the input is either translated, known to need nothing in kmirror (named in
//! [`Translation::not_needed`]), or refused with a reason ([`Translation::untranslated`]) —
//! never dropped in silence.
//!
//! MM2's rules followed: `clusters` names the aliases; `<alias>.<client property>` configures
//! every client of that cluster (`<alias>.producer.`, `.consumer.`, `.admin.` one kind of
//! client); a property without a prefix applies to every flow (or, for a client property,
//! every cluster) unless `<source>-><target>.<property>` overrides it for one flow; a flow
//! runs when `<source>-><target>.enabled = true`. Keys left out keep kmirror's defaults,
//! which differ from MM2's only in being faster (discovery every 5 s instead of 10
//! minutes, checkpoints every 5 s instead of a minute); the features on by default are the
//! same.

use std::collections::{BTreeMap, BTreeSet};

mod client;
mod flow;

use client::client_settings;
use flow::flow;

/// A key that was not translated, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untranslated {
    /// The MM2 property.
    pub key: String,
    /// Why, and what to do instead.
    pub reason: String,
}

/// The result of a translation.
#[derive(Debug, Clone, Default)]
pub struct Translation {
    /// The kmirror configuration (TOML).
    pub toml: String,
    /// The keys translated.
    pub translated: BTreeSet<String>,
    /// Keys that could not be translated, with the reason.
    pub untranslated: Vec<Untranslated>,
    /// Keys that need nothing in kmirror (MM2's Connect internals), with the reason.
    pub not_needed: Vec<Untranslated>,
    /// Translated with a change in meaning worth reading (an exactly-once flow that cannot
    /// take over MM2's progress, secrets copied).
    pub notes: Vec<String>,
}

/// Why the input cannot be translated at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("no `clusters` property: MM2's dedicated mode names its cluster aliases there")]
    NoClusters,
    #[error("cluster alias `{0}`: kmirror's aliases are 1-64 letters, digits, `_` or `-`")]
    BadAlias(String),
    #[error("cluster `{0}` has no `{0}.bootstrap.servers`")]
    NoBootstrap(String),
    #[error("no flow is enabled (`<source>-><target>.enabled = true`)")]
    NoFlows,
}

/// Keys of MM2's Connect runtime that kmirror has no need of.
const CONNECT_INTERNALS: [(&str, &str); 15] = [
    (
        "offset.storage.",
        "Connect's offsets topic: kmirror stores progress in the flow's consumer group",
    ),
    (
        "status.storage.",
        "Connect's status topic: kmirror reports status on /status and /metrics",
    ),
    (
        "config.storage.",
        "Connect's config topic: kmirror reads its configuration file",
    ),
    (
        "key.converter",
        "kmirror copies keys, values and headers byte for byte (MM2's ByteArrayConverter)",
    ),
    (
        "value.converter",
        "kmirror copies keys, values and headers byte for byte (MM2's ByteArrayConverter)",
    ),
    (
        "header.converter",
        "kmirror copies keys, values and headers byte for byte (MM2's ByteArrayConverter)",
    ),
    (
        "dedicated.mode.",
        "MM2's dedicated-mode REST server: kmirror instances need none to share a flow",
    ),
    (
        "listeners",
        "Connect's REST listeners: kmirror's endpoint is [status] listen",
    ),
    (
        "rest.",
        "Connect's REST server: kmirror's endpoint is [status] listen",
    ),
    (
        "offset.flush.",
        "Connect's offset commit cadence: kmirror stores progress about every second",
    ),
    (
        "checkpoints.topic.replication.factor",
        "kmirror creates its internal topics with replication_factor",
    ),
    (
        "heartbeats.topic.replication.factor",
        "kmirror creates its internal topics with replication_factor",
    ),
    (
        "offset-syncs.topic.replication.factor",
        "kmirror creates its internal topics with replication_factor",
    ),
    (
        "scheduled.rebalance.max.delay.ms",
        "Connect's rebalance delay: kmirror's instances share a flow through a consumer group",
    ),
    (
        "task.shutdown.graceful.timeout.ms",
        "Connect's task stop bound: kmirror's is the flow's shutdown_timeout",
    ),
];

/// Properties by name, with which keys were used.
struct Props {
    all: BTreeMap<String, String>,
    used: BTreeSet<String>,
}

impl Props {
    /// The value of `key` for the flow `pair` (`A->B`): its own, else the global one.
    fn flow(&mut self, pair: &str, key: &str) -> Option<(String, String)> {
        // A global value overridden by the flow's own is still a known key.
        if self.all.contains_key(key) {
            self.used.insert(key.to_string());
        }
        for k in [format!("{pair}.{key}"), key.to_string()] {
            if let Some(v) = self.all.get(&k) {
                self.used.insert(k.clone());
                return Some((k, v.trim().to_string()));
            }
        }
        None
    }
}

/// Reads a Java properties file (`key = value`, `key: value` or `key value`; `#` and `!`
/// comments; `\` continuations and escapes), as MM2 does.
pub fn parse(text: &str) -> Result<BTreeMap<String, String>, String> {
    java_properties::read(text.as_bytes())
        .map(|all| all.into_iter().collect())
        .map_err(|e| e.to_string())
}

/// A TOML basic string.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Translates MM2 `properties` (already parsed) into a kmirror configuration, its
/// `[plugins] dir` being `plugins_dir`.
pub fn translate(
    properties: &BTreeMap<String, String>,
    plugins_dir: &str,
) -> Result<Translation, ImportError> {
    let mut p = Props {
        all: properties.clone(),
        used: BTreeSet::new(),
    };
    let mut out = Translation::default();
    let aliases: Vec<String> = p
        .all
        .get("clusters")
        .ok_or(ImportError::NoClusters)?
        .split(',')
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect();
    p.used.insert("clusters".into());
    if aliases.is_empty() {
        return Err(ImportError::NoClusters);
    }
    for a in &aliases {
        let ok = (1..=64).contains(&a.len())
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            return Err(ImportError::BadAlias(a.clone()));
        }
    }
    let mut toml = String::from(
        "# Translated from MirrorMaker 2's configuration by `kmirror import-mm2-config`.\n\
         # Each flow takes over MM2's progress at its first start (take_over_from_mm2): stop\n\
         # MM2 first, then `kmirror plan --config <this file>`, then `kmirror run`.\n\n",
    );

    // Clusters: bootstrap servers and client settings.
    for alias in &aliases {
        let servers = format!("{alias}.bootstrap.servers");
        let Some(bootstrap) = p.all.get(&servers).cloned() else {
            return Err(ImportError::NoBootstrap(alias.clone()));
        };
        p.used.insert(servers);
        let bootstrap: Vec<&str> = bootstrap.split(',').map(str::trim).collect();
        let bootstrap = match client::kmirror_value(&bootstrap.join(",")) {
            Ok(b) => b,
            Err(_) => return Err(ImportError::NoBootstrap(alias.clone())),
        };
        toml.push_str(&format!(
            "[clusters.{alias}]\nbootstrap_servers = {}\n",
            quoted(&bootstrap)
        ));
        let is_source = aliases.iter().any(|t| {
            p.all
                .get(&format!("{alias}->{t}.enabled"))
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        });
        let librdkafka = client_settings(&mut p, alias, is_source, &mut out);
        if !librdkafka.is_empty() {
            toml.push_str(&format!("[clusters.{alias}.librdkafka]\n"));
            for (k, (v, from)) in &librdkafka {
                toml.push_str(&format!("{} = {}   # {from}\n", quoted(k), quoted(v)));
            }
        }
        toml.push('\n');
    }
    toml.push_str(&format!("[plugins]\ndir = {}\n\n", quoted(plugins_dir)));

    // Flows: every enabled pair.
    let mut flows = 0;
    let mut enabled_pairs: Vec<String> = Vec::new();
    for source in &aliases {
        for target in aliases.iter().filter(|t| *t != source) {
            let pair = format!("{source}->{target}");
            let enabled = format!("{pair}.enabled");
            let on = p
                .all
                .get(&enabled)
                .map(|v| v.trim().eq_ignore_ascii_case("true"));
            if on.is_some() {
                p.used.insert(enabled);
            }
            if on != Some(true) {
                continue;
            }
            flows += 1;
            enabled_pairs.push(format!("{pair}."));
            toml.push_str(&flow(&mut p, source, target, &pair, &mut out));
            // MM2 runs a heartbeats connector for the reverse pair too, enabled or not:
            // `<source>.heartbeats` on the target then came from it.
            let back = format!("{target}->{source}");
            let reverse_on = p
                .all
                .get(&format!("{back}.enabled"))
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
            let reverse_beats = p
                .all
                .get(&format!("{back}.emit.heartbeats.enabled"))
                .or_else(|| p.all.get("emit.heartbeats.enabled"))
                .is_none_or(|v| !v.trim().eq_ignore_ascii_case("false"));
            if !reverse_on && reverse_beats {
                out.notes.push(format!(
                    "MM2 also wrote heartbeats {back} (it emits them for pairs that are not enabled), which {pair} mirrored as `{source}.heartbeats` on {target}; kmirror emits heartbeats only for its flows, so that topic stops growing"
                ));
            }
        }
    }
    if flows == 0 {
        return Err(ImportError::NoFlows);
    }

    // What was not used: flow keys of pairs that are not enabled, Connect internals, the rest.
    let pairs: Vec<String> = aliases
        .iter()
        .flat_map(|s| aliases.iter().map(move |t| format!("{s}->{t}.")))
        .collect();
    for (key, _) in p.all.iter().filter(|(k, _)| !p.used.contains(*k)) {
        let bare = pairs
            .iter()
            .find_map(|pre| key.strip_prefix(pre.as_str()))
            .unwrap_or(key);
        let of_enabled = enabled_pairs
            .iter()
            .any(|pre| key.starts_with(pre.as_str()));
        if let Some(pre) = pairs.iter().find(|pre| key.starts_with(pre.as_str()))
            && !of_enabled
        {
            out.not_needed.push(Untranslated {
                key: key.clone(),
                reason: format!("the flow {} is not enabled", pre.trim_end_matches('.')),
            });
            continue;
        }
        if bare == "offset.storage.topic" {
            refuse(
                &mut out,
                key.clone(),
                "kmirror takes over only from MM2's own offsets topic, mm2-offsets.<source>.internal: a flow would start from start_offset instead".into(),
            );
            continue;
        }
        if bare == "exactly.once.source.support" {
            out.not_needed.push(Untranslated {
                key: key.clone(),
                reason: "MM2 reads it only as a worker setting of the target, `<target>.exactly.once.source.support`".into(),
            });
            continue;
        }
        if let Some(why) = connect_internal(bare) {
            out.not_needed.push(Untranslated {
                key: key.clone(),
                reason: why.to_string(),
            });
            continue;
        }
        let reason = if ["producer.", "consumer.", "admin.", "source.", "target."]
            .iter()
            .any(|c| bare.starts_with(c))
        {
            "client settings of one flow: kmirror's are per cluster — set them under the cluster's librdkafka table".to_string()
        } else if bare == "config.providers" || bare.starts_with("config.providers.") {
            "MM2 config providers: kmirror substitutes environment variables (`${NAME}`) only"
                .to_string()
        } else if of_enabled {
            "not a MirrorMaker 2 flow setting kmirror knows: check its spelling, or set the equivalent by hand".to_string()
        } else {
            "not a MirrorMaker 2 setting kmirror knows: check its spelling, or set the equivalent by hand".to_string()
        };
        refuse(&mut out, key.clone(), reason);
    }
    // A global key is judged once per flow: named once.
    out.untranslated.sort_by(|a, b| a.key.cmp(&b.key));
    out.untranslated.dedup_by(|a, b| a.key == b.key);
    out.not_needed.sort_by(|a, b| a.key.cmp(&b.key));
    out.not_needed.dedup_by(|a, b| a.key == b.key);
    if !out.untranslated.is_empty() {
        toml.push_str("# Not translated (see `kmirror import-mm2-config`'s output for why):\n");
        for u in &out.untranslated {
            let line = format!("{}: {}", u.key, u.reason).replace(['\n', '\r'], " ");
            toml.push_str(&format!("#   {line}\n"));
        }
    }
    let named: BTreeSet<&str> = out
        .untranslated
        .iter()
        .chain(&out.not_needed)
        .map(|u| u.key.as_str())
        .collect();
    out.translated = p
        .used
        .iter()
        .filter(|k| !named.contains(k.as_str()))
        .cloned()
        .collect();
    out.toml = toml;
    Ok(out)
}

/// Why kmirror needs nothing for `key`, a setting of MM2's Connect runtime.
fn connect_internal(key: &str) -> Option<&'static str> {
    CONNECT_INTERNALS
        .iter()
        .find(|(pre, _)| key == *pre || (pre.ends_with('.') && key.starts_with(pre)))
        .map(|(_, why)| *why)
}

/// Records `key` as not translated, with `reason`.
fn refuse(out: &mut Translation, key: String, reason: String) {
    out.untranslated.push(Untranslated { key, reason });
}

/// A slot as an inline table: `{ builtin = "...", config = { ... } }`.
fn slot(key: &str, builtin: &str, config: &[String]) -> String {
    if config.is_empty() {
        format!("{key} = {{ builtin = {} }}", quoted(builtin))
    } else {
        format!(
            "{key} = {{ builtin = {}, config = {{ {} }} }}",
            quoted(builtin),
            config.join(", ")
        )
    }
}

#[cfg(test)]
#[path = "mm2_import/tests.rs"]
mod tests;
