//! Loading and validating a configuration file; every problem is reported at once.

use super::errors::{ConfigError, ConfigErrors, Validator};
use super::model::*;
use super::settings::FlowSettings;
use super::slots::SlotSources;
use crate::kafka::ClusterSettings;
use crate::plugin::cache::CacheChoice;
use crate::plugin::stats::PluginRegistry;
use crate::plugin::{Limits, PluginHost};
use crate::policy::FlowRoles;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;

/// A flow with its clusters, plugins and settings resolved.
pub struct ResolvedFlow {
    /// `source->target`.
    pub name: String,
    /// The source cluster.
    pub source: ClusterSettings,
    /// The target cluster.
    pub target: ClusterSettings,
    /// The configured plugin roles.
    pub roles: FlowRoles,
    /// Where each role came from, for messages.
    pub slots: SlotSources,
    /// How the flow runs.
    pub settings: FlowSettings,
}

/// A valid configuration, ready to run.
pub struct LoadedConfig {
    /// The file it came from.
    pub path: PathBuf,
    /// The plugin directory (absolute or relative to the working directory).
    pub plugins_dir: PathBuf,
    /// The plugin runtime the slots were loaded with.
    pub plugin_host: PluginHost,
    /// `[status] listen`.
    pub status_listen: Option<String>,
    /// The flows.
    pub flows: Vec<ResolvedFlow>,
}

/// Reads and validates `path`; compiled plugins are cached as `cache` says.
pub fn load(path: &Path, cache: &CacheChoice) -> Result<LoadedConfig, ConfigErrors> {
    reload(path, cache, &Arc::default())
}

/// [`load`], with plugin calls counted in `registry` (a daemon's, kept across reloads).
pub fn reload(
    path: &Path,
    cache: &CacheChoice,
    registry: &Arc<PluginRegistry>,
) -> Result<LoadedConfig, ConfigErrors> {
    let text = read(path)?;
    load_text(&text, path, cache, registry.clone(), None)
}

/// [`load`], with every plugin slot read from `plugins_dir` instead of the configured
/// directory (a candidate plugin directory, for `kmirror plan --plugin-dir`).
pub fn load_with_plugins_dir(
    path: &Path,
    cache: &CacheChoice,
    plugins_dir: &Path,
) -> Result<LoadedConfig, ConfigErrors> {
    let text = read(path)?;
    load_text(&text, path, cache, Arc::default(), Some(plugins_dir))
}

fn read(path: &Path) -> Result<String, ConfigErrors> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            key: "(file)".into(),
            message: format!("cannot read: {e}"),
        }])
    })
}

/// Validates `text` as if read from `path` (relative paths resolve against its directory).
pub fn load_str(
    text: &str,
    path: &Path,
    cache: &CacheChoice,
) -> Result<LoadedConfig, ConfigErrors> {
    load_text(text, path, cache, Arc::default(), None)
}

fn load_text(
    text: &str,
    path: &Path,
    cache: &CacheChoice,
    registry: Arc<PluginRegistry>,
    plugins_dir: Option<&Path>,
) -> Result<LoadedConfig, ConfigErrors> {
    let mut v = Validator::new(text, path.to_path_buf());
    // An unknown key is reported and left out; the rest of the file is validated on.
    let parsed: ConfigFile = match super::unknown::parse(text) {
        Ok((parsed, unknown)) => {
            for (span, message) in unknown {
                let key =
                    key_at(text, span.start).unwrap_or_else(|| text[span.clone()].to_string());
                v.error(span, &key, &message);
            }
            parsed
        }
        Err(errors) => {
            for (span, message) in errors {
                let key = key_at(text, span.start).unwrap_or_else(|| "(syntax)".to_string());
                v.error(span, &key, &message);
            }
            return Err(ConfigErrors(v.errors));
        }
    };
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    // Absolute, so the paths of changed files a watcher reports match the slots'.
    let plugins_dir = plugins_dir.map_or_else(|| base.join(&parsed.plugins.dir), Path::to_path_buf);
    let plugins_dir = std::path::absolute(&plugins_dir).unwrap_or(plugins_dir);
    let plugin_host = match v.plugin_host(&parsed.plugins, &base, cache, registry) {
        Some(host) => host,
        None => return Err(ConfigErrors(v.errors)),
    };

    let clusters: BTreeMap<String, ClusterSettings> = parsed
        .clusters
        .iter()
        .map(|(alias, c)| (alias.clone(), v.cluster(alias, c)))
        .collect();
    if parsed.clusters.is_empty() {
        v.error(0..0, "clusters", "no clusters are defined");
    }
    if parsed.flows.is_empty() {
        v.error(0..0, "flows", "no [[flows]] are defined");
    }

    let mut slots = super::slots::SlotLoader::new(&plugin_host, &plugins_dir);
    let mut flows = Vec::new();
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    let aliases: Vec<&str> = clusters.keys().map(String::as_str).collect();
    for (i, flow) in parsed.flows.into_iter().enumerate() {
        let span = flow.span();
        let flow = flow.into_inner();
        let key = |k: &str| format!("flows[{i}].{k}");
        let lookup =
            |v: &mut Validator, name: &Spanned<String>, which: &str| -> Option<ClusterSettings> {
                let found = clusters.get(name.get_ref()).cloned();
                if found.is_none() {
                    let message = format!(
                        "unknown cluster `{}`; clusters are: {}",
                        name.get_ref(),
                        aliases.join(", ")
                    );
                    v.error(name.span(), &key(which), &message);
                }
                found
            };
        let source = lookup(&mut v, &flow.source, "source");
        let target = lookup(&mut v, &flow.target, "target");
        if flow.source.get_ref() == flow.target.get_ref() {
            v.error(
                flow.target.span(),
                &key("target"),
                "source and target must be different clusters",
            );
        }
        let pair = (flow.source.get_ref().clone(), flow.target.get_ref().clone());
        if let Some(first) = seen.insert(pair, i) {
            v.error(
                span.clone(),
                &format!("flows[{i}]"),
                &format!("the same source and target as flows[{first}]"),
            );
        }
        let settings = match FlowSettings::from_config(&flow) {
            Ok(s) => Some(s),
            Err(errors) => {
                for e in errors {
                    let at = v.key_span(span.clone(), e.key);
                    v.error(at, &key(e.key), &e.message);
                }
                None
            }
        };
        if let (Some(s), Some(target)) = (&settings, &target) {
            single_instance_linger(&mut v, s, target, &key, span.clone());
        }
        let roles = slots.flow_roles(&mut v, i, &flow, span.clone());
        if let (Some(source), Some(target), Some((roles, sources)), Some(settings)) =
            (source, target, roles, settings)
        {
            flows.push(ResolvedFlow {
                name: format!("{}->{}", source.alias, target.alias),
                source,
                target,
                roles,
                slots: sources,
                settings,
            });
        }
    }
    if !v.errors.is_empty() {
        v.errors.sort_by_key(|e| (e.line, e.column));
        return Err(ConfigErrors(v.errors));
    }
    Ok(LoadedConfig {
        path: path.to_path_buf(),
        plugins_dir,
        plugin_host,
        status_listen: parsed.status.listen,
        flows,
    })
}

/// A single instance's data producer gives a queued record up after a quarter of its lease
/// ([`super::queued_for_at_most`]) and keeps what waits within half of that at the rate
/// the target acknowledges; the target's `linger.ms`, how long it holds a record on
/// purpose, must be shorter than that half (librdkafka refuses a linger past the give-up
/// time, and every record would risk it).
fn single_instance_linger(
    v: &mut Validator,
    s: &FlowSettings,
    target: &ClusterSettings,
    key: &dyn Fn(&str) -> String,
    span: Range<usize>,
) {
    if !s.single_instance {
        return;
    }
    let Some(linger) = target.librdkafka.get("linger.ms") else {
        return;
    };
    let Ok(linger_ms) = linger.trim().parse::<f64>() else {
        return; // librdkafka names a malformed value when the client is made
    };
    let limit = super::queued_for_at_most(s.session_timeout) / 2;
    if linger_ms >= limit.as_secs_f64() * 1000.0 {
        let at = v.key_span(span, "session_timeout");
        v.error(
            at,
            &key("session_timeout"),
            &format!(
                "a single instance keeps a record queued at most an eighth of session_timeout (the lease, {:?}), {} ms, but cluster `{}` holds records for linger.ms = {linger} ms: raise session_timeout above {} ms or lower linger.ms",
                s.session_timeout,
                limit.as_millis(),
                target.alias,
                (linger_ms * 8.0).ceil() as u64,
            ),
        );
    }
}

/// The key assigned on the line at byte `offset` (`key = ...`), for parse errors.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let start = text[..offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line = text[start..].lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty() && !key.starts_with('[')).then(|| key.to_string())
}

/// librdkafka properties kmirror sets itself, because its guarantees depend on them.
const RESERVED: [&str; 8] = [
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.idempotence",
    "acks",
    "isolation.level",
    "message.timeout.ms",
    "delivery.timeout.ms",
];

/// The longest cluster alias.
const MAX_ALIAS_LEN: usize = 64;

/// Whether `alias` can name a cluster: it becomes part of topic and group names, where `.`
/// is the replication policy's separator.
fn valid_alias(alias: &str) -> bool {
    (1..=MAX_ALIAS_LEN).contains(&alias.len())
        && alias
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The largest memory cap a plugin instance may be given, in MiB (wasm32's address space).
const MAX_MEMORY_LIMIT_MIB: usize = 4096;

impl Validator<'_> {
    /// The plugin runtime `[plugins]` describes.
    fn plugin_host(
        &mut self,
        plugins: &PluginsConfig,
        base: &Path,
        cache: &CacheChoice,
        registry: Arc<PluginRegistry>,
    ) -> Option<PluginHost> {
        let section = 0..0;
        let mut ok = true;
        // `[plugins]` is not spanned: its keys are found by name in the file.
        if plugins.memory_limit_mib == 0 || plugins.memory_limit_mib > MAX_MEMORY_LIMIT_MIB {
            let at = self.key_span(self.table_start("[plugins]"), "memory_limit_mib");
            self.error(
                at,
                "plugins.memory_limit_mib",
                &format!("must be between 1 and {MAX_MEMORY_LIMIT_MIB}"),
            );
            ok = false;
        }
        if plugins.call_timeout.is_zero() {
            let at = self.key_span(self.table_start("[plugins]"), "call_timeout");
            self.error(
                at,
                "plugins.call_timeout",
                "must be longer than 0 (e.g. \"1s\", \"200ms\")",
            );
            ok = false;
        }
        if plugins.max_component_size_mib == 0 || plugins.max_component_size_mib > 1024 {
            let at = self.key_span(self.table_start("[plugins]"), "max_component_size_mib");
            self.error(
                at,
                "plugins.max_component_size_mib",
                "must be between 1 and 1024",
            );
            ok = false;
        }
        if plugins.compile_timeout.is_zero() {
            let at = self.key_span(self.table_start("[plugins]"), "compile_timeout");
            self.error(
                at,
                "plugins.compile_timeout",
                "must be longer than 0 (e.g. \"60s\")",
            );
            ok = false;
        }
        // Invalid limits are reported; the rest is still checked, with the defaults.
        let limits = if ok {
            Limits {
                memory_bytes: plugins.memory_limit_mib << 20,
                call_deadline: plugins.call_timeout,
                max_component_bytes: plugins.max_component_size_mib << 20,
                compile_timeout: plugins.compile_timeout,
                ..Limits::default()
            }
        } else {
            Limits::default()
        };
        let configured = plugins.cache_dir.as_ref().map(|d| base.join(d));
        match PluginHost::with_registry(limits, cache.resolve(configured), registry) {
            Ok(host) => Some(host),
            Err(e) => {
                self.error(section, "plugins", &e.to_string());
                None
            }
        }
    }

    /// Replaces `${NAME}` with the environment variable (`$$` is a literal `$`).
    pub(super) fn substitute(&mut self, value: &str, span: Range<usize>, key: &str) -> String {
        let mut out = String::with_capacity(value.len());
        let mut rest = value;
        while let Some(pos) = rest.find('$') {
            out.push_str(&rest[..pos]);
            let after = &rest[pos + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                out.push('$');
                rest = tail;
            } else if let Some(inner) = after.strip_prefix('{') {
                let Some(end) = inner.find('}') else {
                    self.error(
                        span.clone(),
                        key,
                        "unterminated `${` (write `$$` for a literal `$`)",
                    );
                    return out;
                };
                let name = &inner[..end];
                match std::env::var(name) {
                    Ok(v) => out.push_str(&v),
                    Err(_) => self.error(
                        span.clone(),
                        key,
                        &format!("environment variable `{name}` is not set"),
                    ),
                }
                rest = &inner[end + 1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        out
    }

    fn cluster(&mut self, alias: &str, c: &Spanned<ClusterConfig>) -> ClusterSettings {
        let key = format!("clusters.{alias}");
        let c_ref = c.get_ref();
        let servers = &c_ref.bootstrap_servers;
        let bootstrap_servers = self.substitute(
            servers.get_ref(),
            servers.span(),
            &format!("{key}.bootstrap_servers"),
        );
        if bootstrap_servers.trim().is_empty() {
            self.error(
                servers.span(),
                &format!("{key}.bootstrap_servers"),
                "must not be empty",
            );
        }
        if !valid_alias(alias) {
            self.error(
                c.span(),
                &key,
                &format!(
                    "a cluster alias must be 1 to {MAX_ALIAS_LEN} characters of `a-z`, `A-Z`, `0-9`, `_` and `-` (it is part of topic and group names; `.` separates them)"
                ),
            );
        }
        let mut librdkafka = BTreeMap::new();
        for (k, value) in &c_ref.librdkafka {
            let prop_key = format!("{key}.librdkafka.\"{k}\"");
            if k == "bootstrap.servers" {
                let message =
                    format!("conflicts with {key}.bootstrap_servers; set only bootstrap_servers");
                self.error(value.span(), &prop_key, &message);
            } else if k == "queue.buffering.max.ms" {
                self.error(
                    value.span(),
                    &prop_key,
                    "is librdkafka's other name for linger.ms, which kmirror's producers set (to their default or yours): set linger.ms instead",
                );
            } else if k == "session.timeout.ms" || k == "max.poll.interval.ms" {
                self.error(
                    value.span(),
                    &prop_key,
                    "is set by kmirror from the flow's session_timeout (its groups' session, and their rebalance timeout at least 30 s): set session_timeout instead",
                );
            } else if RESERVED.contains(&k.as_str()) {
                self.error(
                    value.span(),
                    &prop_key,
                    "is set by kmirror (its delivery guarantees depend on it)",
                );
            }
            librdkafka.insert(
                k.clone(),
                self.substitute(value.get_ref(), value.span(), &prop_key),
            );
        }
        // librdkafka itself checks every property, offline: an unknown (misspelled) or
        // invalid one is reported by its key, never with its value.
        for (k, message) in crate::kafka::secrets::check_offline(&librdkafka) {
            if let Some(value) = c_ref.librdkafka.get(&k) {
                let prop_key = format!("{key}.librdkafka.\"{k}\"");
                self.error(
                    value.span(),
                    &prop_key,
                    &format!("librdkafka refuses it: {message}"),
                );
            }
        }
        ClusterSettings {
            alias: alias.to_string(),
            bootstrap_servers,
            librdkafka,
        }
    }
}

#[cfg(test)]
mod tests;
