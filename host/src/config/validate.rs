//! Loading and validating a configuration file; every problem is reported at once.

use super::model::*;
use crate::plugin::cache::ComponentCache;
use crate::plugin::{Config, Limits, Plugin, PluginHost, PluginSource, Role, builtin};
use crate::policy::RoleHandle;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// One problem, located in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The config file.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// The key, as a dotted path (`flows[0].source`).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.key,
            self.message
        )
    }
}

/// Every problem found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// A cluster, with `${ENV}` resolved.
#[derive(Clone)]
pub struct ResolvedCluster {
    /// The alias.
    pub alias: String,
    /// `bootstrap.servers`.
    pub bootstrap_servers: String,
    /// librdkafka passthrough properties.
    pub librdkafka: BTreeMap<String, String>,
}

impl fmt::Debug for ResolvedCluster {
    /// Secrets (passwords, keys, tokens, JAAS configs) are never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let props: BTreeMap<&str, &str> = self
            .librdkafka
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    if is_secret_key(k) { "***" } else { v.as_str() },
                )
            })
            .collect();
        f.debug_struct("Cluster")
            .field("alias", &self.alias)
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("librdkafka", &props)
            .finish()
    }
}

/// Whether a librdkafka property holds a secret.
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["password", "secret", "jaas", "token", ".key.pem", "ssl.key"]
        .iter()
        .any(|s| k.contains(s))
}

/// A plugin slot, resolved and instantiated.
#[derive(Clone)]
pub struct ResolvedSlot {
    /// Where the implementation came from.
    pub source: PluginSource,
    /// Its configuration.
    pub config: Config,
    /// The configured implementation.
    pub handle: RoleHandle,
}

/// A flow with its clusters and plugins resolved.
pub struct ResolvedFlow {
    /// `source->target`.
    pub name: String,
    /// The source cluster.
    pub source: ResolvedCluster,
    /// The target cluster.
    pub target: ResolvedCluster,
    /// The topic filter.
    pub topic_filter: ResolvedSlot,
    /// The group filter.
    pub group_filter: ResolvedSlot,
    /// The replication policy.
    pub replication_policy: ResolvedSlot,
    /// The config-property filter.
    pub config_property_filter: ResolvedSlot,
    /// The flow's settings as written.
    pub settings: FlowConfig,
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

/// Reads and validates `path`.
pub fn load(path: &Path) -> Result<LoadedConfig, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            key: "(file)".into(),
            message: format!("cannot read: {e}"),
        }])
    })?;
    load_str(&text, path)
}

/// Validates `text` as if read from `path` (relative paths resolve against its directory).
pub fn load_str(text: &str, path: &Path) -> Result<LoadedConfig, ConfigErrors> {
    let mut v = Validator {
        text,
        file: path.to_path_buf(),
        errors: Vec::new(),
    };
    let parsed: ConfigFile = match toml::from_str(text) {
        Ok(parsed) => parsed,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            let key = key_at(text, span.start).unwrap_or_else(|| "(syntax)".to_string());
            v.error(span, &key, e.message().trim());
            return Err(ConfigErrors(v.errors));
        }
    };
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let plugins_dir = base.join(&parsed.plugins.dir);
    let limits = Limits {
        memory_bytes: parsed.plugins.memory_limit_mib << 20,
        call_deadline: parsed.plugins.call_timeout,
        ..Limits::default()
    };
    let cache = match &parsed.plugins.cache_dir {
        Some(dir) => Some(ComponentCache::new(base.join(dir))),
        None => ComponentCache::default_location(),
    };
    let plugin_host = match PluginHost::new(limits, cache) {
        Ok(host) => host,
        Err(e) => {
            v.error(0..0, "plugins", &e.to_string());
            return Err(ConfigErrors(v.errors));
        }
    };

    let clusters: BTreeMap<String, ResolvedCluster> = parsed
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

    let mut plugins: BTreeMap<PathBuf, Option<Plugin>> = BTreeMap::new();
    let mut flows = Vec::new();
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    let aliases: Vec<&str> = clusters.keys().map(String::as_str).collect();
    for (i, flow) in parsed.flows.into_iter().enumerate() {
        let span = flow.span();
        let flow = flow.into_inner();
        let key = |k: &str| format!("flows[{i}].{k}");
        let lookup =
            |v: &mut Validator, name: &Spanned<String>, which: &str| -> Option<ResolvedCluster> {
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
        if flow.offset_lag_max == 0 {
            v.error(span.clone(), &key("offset_lag_max"), "must be at least 1");
        }
        let mut slot =
            |v: &mut Validator, role: Role, name: &str, slot: &Option<Spanned<SlotConfig>>| {
                v.slot(
                    &plugin_host,
                    &plugins_dir,
                    &mut plugins,
                    role,
                    &key(name),
                    slot,
                    span.clone(),
                )
            };
        let topic_filter = slot(
            &mut v,
            Role::TopicFilter,
            "topic_filter",
            &flow.topic_filter,
        );
        let group_filter = slot(
            &mut v,
            Role::GroupFilter,
            "group_filter",
            &flow.group_filter,
        );
        let replication_policy = slot(
            &mut v,
            Role::ReplicationPolicy,
            "replication_policy",
            &flow.replication_policy,
        );
        let config_property_filter = slot(
            &mut v,
            Role::ConfigPropertyFilter,
            "config_property_filter",
            &flow.config_property_filter,
        );
        if let (Some(source), Some(target), Some(tf), Some(gf), Some(rp), Some(cf)) = (
            source,
            target,
            topic_filter,
            group_filter,
            replication_policy,
            config_property_filter,
        ) {
            flows.push(ResolvedFlow {
                name: format!("{}->{}", source.alias, target.alias),
                source,
                target,
                topic_filter: tf,
                group_filter: gf,
                replication_policy: rp,
                config_property_filter: cf,
                settings: flow,
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
const RESERVED: [&str; 6] = [
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.idempotence",
    "acks",
    "isolation.level",
];

struct Validator<'a> {
    text: &'a str,
    file: PathBuf,
    errors: Vec<ConfigError>,
}

impl Validator<'_> {
    fn error(&mut self, span: Range<usize>, key: &str, message: &str) {
        let before = &self.text[..span.start.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        self.errors.push(ConfigError {
            file: self.file.clone(),
            line,
            column,
            key: key.to_string(),
            message: message.to_string(),
        });
    }

    /// Replaces `${NAME}` with the environment variable (`$$` is a literal `$`).
    fn substitute(&mut self, value: &str, span: Range<usize>, key: &str) -> String {
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

    fn cluster(&mut self, alias: &str, c: &Spanned<ClusterConfig>) -> ResolvedCluster {
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
        if alias.is_empty() || alias.contains(['.', ' ']) {
            self.error(
                c.span(),
                &key,
                "a cluster alias must be non-empty, without `.` or spaces",
            );
        }
        let mut librdkafka = BTreeMap::new();
        for (k, value) in &c_ref.librdkafka {
            let prop_key = format!("{key}.librdkafka.\"{k}\"");
            if k == "bootstrap.servers" {
                let message =
                    format!("conflicts with {key}.bootstrap_servers; set only bootstrap_servers");
                self.error(value.span(), &prop_key, &message);
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
        ResolvedCluster {
            alias: alias.to_string(),
            bootstrap_servers,
            librdkafka,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn slot(
        &mut self,
        host: &PluginHost,
        dir: &Path,
        plugins: &mut BTreeMap<PathBuf, Option<Plugin>>,
        role: Role,
        key: &str,
        slot: &Option<Spanned<SlotConfig>>,
        flow_span: Range<usize>,
    ) -> Option<ResolvedSlot> {
        let (span, cfg) = match slot {
            Some(s) => (s.span(), s.get_ref().clone()),
            None => (
                flow_span,
                SlotConfig {
                    builtin: Some(builtin::default_for(role).name.into()),
                    plugin: None,
                    config: BTreeMap::new(),
                },
            ),
        };
        let config: Config = cfg
            .config
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    self.substitute(v, span.clone(), &format!("{key}.config.{k}")),
                )
            })
            .collect();
        let (source, plugin) = match (&cfg.builtin, &cfg.plugin) {
            (Some(_), Some(_)) | (None, None) => {
                self.error(
                    span,
                    key,
                    "give exactly one of `builtin = NAME` or `plugin = FILE`",
                );
                return None;
            }
            (Some(name), None) => match builtin::find(name) {
                Ok(b) if b.role == role => {
                    (PluginSource::Builtin(name.clone()), Plugin::Builtin(b))
                }
                Ok(b) => {
                    self.error(
                        span,
                        key,
                        &format!("built-in `{name}` is a {}, not a {role}", b.role),
                    );
                    return None;
                }
                Err(e) => {
                    self.error(span, key, &e.to_string());
                    return None;
                }
            },
            (None, Some(file)) => {
                let path = dir.join(file);
                let entry = plugins.entry(path.clone()).or_insert_with(|| None);
                if entry.is_none() {
                    match Plugin::open(host, &PluginSource::File(path.clone())) {
                        Ok(p) => *entry = Some(p),
                        Err(e) => {
                            self.error(span, key, &e.to_string());
                            return None;
                        }
                    }
                }
                let Some(plugin) = entry.take() else {
                    return None;
                };
                let result = plugin.instantiate(role, &config);
                *entry = Some(plugin);
                return match result {
                    Ok(handle) => Some(ResolvedSlot {
                        source: PluginSource::File(path),
                        config,
                        handle,
                    }),
                    Err(e) => {
                        self.error(span, key, &e.to_string());
                        None
                    }
                };
            }
        };
        match plugin.instantiate(role, &config) {
            Ok(handle) => Some(ResolvedSlot {
                source,
                config,
                handle,
            }),
            Err(e) => {
                self.error(span, key, &e.to_string());
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
