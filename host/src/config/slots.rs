//! Resolving a flow's four plugin slots and its record-transform chain: `{ builtin = NAME }`
//! or `{ plugin = FILE }` (MM2's default built-in when a slot is absent; no transform when the
//! chain is), each loaded, role-checked and configured, so `kmirror validate` catches a wrong
//! plugin without connecting anywhere.

use super::errors::Validator;
use super::model::{FlowConfig, SlotConfig};
use crate::plugin::{Plugin, PluginHost, PluginSource, builtin};
use crate::policy::{ChainLink, Config, FlowRoles, PluginError, Role};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;

/// Where each of a flow's roles came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotSources {
    /// The topic filter's source.
    pub topic_filter: PluginSource,
    /// The group filter's source.
    pub group_filter: PluginSource,
    /// The replication policy's source.
    pub replication_policy: PluginSource,
    /// The config-property filter's source.
    pub config_property_filter: PluginSource,
    /// Each role's configuration (`${VAR}`s substituted).
    pub configs: BTreeMap<Role, Config>,
    /// The record-transform chain, in order: each link's source and configuration.
    pub transforms: Vec<(PluginSource, Config)>,
    /// The component files among the sources: content hash and the roles they export.
    pub components: BTreeMap<PathBuf, (String, Vec<Role>)>,
}

impl SlotSources {
    /// Where `role` comes from; `None` for the record-transform chain (see `transforms`).
    pub fn source(&self, role: Role) -> Option<&PluginSource> {
        match role {
            Role::TopicFilter => Some(&self.topic_filter),
            Role::GroupFilter => Some(&self.group_filter),
            Role::ReplicationPolicy => Some(&self.replication_policy),
            Role::ConfigPropertyFilter => Some(&self.config_property_filter),
            Role::RecordTransform => None,
        }
    }

    /// `role`'s configuration.
    pub fn config(&self, role: Role) -> Config {
        self.configs.get(&role).cloned().unwrap_or_default()
    }

    /// Whether `other` names the same sources with the same configurations (component
    /// contents aside: a hot reload deals with those).
    pub fn same_slots(&self, other: &SlotSources) -> bool {
        self.same_roles_but_transforms(other) && self.transforms == other.transforms
    }

    /// Whether `other` names the same sources with the same configurations for every role
    /// but the record-transform chain.
    pub fn same_roles_but_transforms(&self, other: &SlotSources) -> bool {
        Role::SLOTS
            .iter()
            .all(|r| self.source(*r) == other.source(*r))
            && self.configs == other.configs
    }

    /// Whether any role comes from a component file.
    pub fn uses_components(&self) -> bool {
        Role::SLOTS
            .iter()
            .any(|r| matches!(self.source(*r), Some(PluginSource::File(_))))
            || self
                .transforms
                .iter()
                .any(|(s, _)| matches!(s, PluginSource::File(_)))
    }

    /// The links of the transform chain loaded from the component file `path`.
    pub fn transforms_from(&self, path: &Path) -> Vec<usize> {
        self.transforms
            .iter()
            .enumerate()
            .filter(|(_, (s, _))| matches!(s, PluginSource::File(p) if p == path))
            .map(|(i, _)| i)
            .collect()
    }

    /// The roles loaded from the component file `path`.
    pub fn roles_from(&self, path: &Path) -> Vec<Role> {
        Role::SLOTS
            .into_iter()
            .filter(|r| matches!(self.source(*r), Some(PluginSource::File(p)) if p == path))
            .collect()
    }

    /// (slot key, source) in the order of the TOML file.
    pub fn all(&self) -> [(&'static str, &PluginSource); 4] {
        [
            ("topic_filter", &self.topic_filter),
            ("group_filter", &self.group_filter),
            ("replication_policy", &self.replication_policy),
            ("config_property_filter", &self.config_property_filter),
        ]
    }
}

/// The configured role, or `None` with the error recorded at the slot.
fn built<T: ?Sized>(
    v: &mut Validator,
    (key, span, _): &(String, Range<usize>, Opened),
    result: Result<Arc<T>, PluginError>,
) -> Option<Arc<T>> {
    match result {
        Ok(x) => Some(x),
        Err(e) => {
            v.error(span.clone(), key, &e.to_string());
            None
        }
    }
}

/// Opens each plugin file once, however many slots name it.
pub(super) struct SlotLoader<'h> {
    host: &'h PluginHost,
    dir: PathBuf,
    opened: BTreeMap<PathBuf, Result<Arc<Plugin>, String>>,
}

/// One slot, opened and with its configuration.
struct Opened {
    source: PluginSource,
    plugin: Arc<Plugin>,
    config: Config,
}

impl<'h> SlotLoader<'h> {
    pub(super) fn new(host: &'h PluginHost, dir: &Path) -> Self {
        SlotLoader {
            host,
            dir: dir.to_path_buf(),
            opened: BTreeMap::new(),
        }
    }

    /// The roles of flow `i`; `None` (with every error recorded) if a slot is wrong.
    pub(super) fn flow_roles(
        &mut self,
        v: &mut Validator,
        i: usize,
        flow: &FlowConfig,
        flow_span: Range<usize>,
    ) -> Option<(FlowRoles, SlotSources)> {
        let mut slot =
            |v: &mut Validator, role: Role, name: &str, cfg: &Option<Spanned<SlotConfig>>| {
                let key = format!("flows[{i}].{name}");
                let (span, opened) = self.open(v, role, &key, cfg, flow_span.clone())?;
                Some((key, span, opened))
            };
        let tf = slot(v, Role::TopicFilter, "topic_filter", &flow.topic_filter);
        let gf = slot(v, Role::GroupFilter, "group_filter", &flow.group_filter);
        let rp = slot(
            v,
            Role::ReplicationPolicy,
            "replication_policy",
            &flow.replication_policy,
        );
        let cf = slot(
            v,
            Role::ConfigPropertyFilter,
            "config_property_filter",
            &flow.config_property_filter,
        );
        let topic_filter = tf.as_ref().and_then(|s| {
            let r = s.2.plugin.topic_filter(&s.2.config);
            built(v, s, r)
        });
        let group_filter = gf.as_ref().and_then(|s| {
            let r = s.2.plugin.group_filter(&s.2.config);
            built(v, s, r)
        });
        let replication_policy = rp.as_ref().and_then(|s| {
            let r = s.2.plugin.replication_policy(&s.2.config);
            built(v, s, r)
        });
        let config_property_filter = cf.as_ref().and_then(|s| {
            let r = s.2.plugin.config_property_filter(&s.2.config);
            built(v, s, r)
        });
        let mut links = Vec::new();
        let mut chain = Vec::new();
        for (n, cfg) in flow.record_transforms.iter().enumerate() {
            let key = format!("flows[{i}].record_transforms[{n}]");
            let opened = self.open(
                v,
                Role::RecordTransform,
                &key,
                &Some(cfg.clone()),
                flow_span.clone(),
            );
            let Some((span, opened)) = opened else {
                continue;
            };
            let slot = (key, span, opened);
            let r = slot.2.plugin.record_transform(&slot.2.config);
            if let Some(transform) = built(v, &slot, r) {
                links.push(ChainLink {
                    name: slot.2.source.short_name(),
                    transform,
                });
                chain.push(slot.2);
            }
        }
        let roles = FlowRoles {
            topic_filter: topic_filter?,
            group_filter: group_filter?,
            replication_policy: replication_policy?,
            config_property_filter: config_property_filter?,
            record_transforms: (links.len() == flow.record_transforms.len()).then_some(links)?,
        };
        let (tf, gf, rp, cf) = (tf?.2, gf?.2, rp?.2, cf?.2);
        let components = [&tf, &gf, &rp, &cf]
            .into_iter()
            .chain(chain.iter())
            .filter_map(|o| match (&o.source, &*o.plugin) {
                (PluginSource::File(path), Plugin::Component(c)) => {
                    Some((path.clone(), (c.sha256().to_string(), c.roles().to_vec())))
                }
                _ => None,
            })
            .collect();
        let configs = [
            (Role::TopicFilter, tf.config),
            (Role::GroupFilter, gf.config),
            (Role::ReplicationPolicy, rp.config),
            (Role::ConfigPropertyFilter, cf.config),
        ]
        .into_iter()
        .collect();
        let sources = SlotSources {
            topic_filter: tf.source,
            group_filter: gf.source,
            replication_policy: rp.source,
            config_property_filter: cf.source,
            configs,
            transforms: chain.into_iter().map(|o| (o.source, o.config)).collect(),
            components,
        };
        Some((roles, sources))
    }

    /// Opens the plugin of one slot (not yet configured) and substitutes its config.
    fn open(
        &mut self,
        v: &mut Validator,
        role: Role,
        key: &str,
        slot: &Option<Spanned<SlotConfig>>,
        flow_span: Range<usize>,
    ) -> Option<(Range<usize>, Opened)> {
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
            .map(|(k, value)| {
                (
                    k.clone(),
                    v.substitute(value, span.clone(), &format!("{key}.config.{k}")),
                )
            })
            .collect();
        let opened = match (&cfg.builtin, &cfg.plugin) {
            (Some(_), Some(_)) | (None, None) => {
                v.error(
                    span,
                    key,
                    "give exactly one of `builtin = NAME` or `plugin = FILE`",
                );
                return None;
            }
            (Some(name), None) => match builtin::find(name) {
                Ok(b) if b.role == role => Opened {
                    source: PluginSource::Builtin(name.clone()),
                    plugin: Arc::new(Plugin::Builtin(b)),
                    config,
                },
                Ok(b) => {
                    let message = format!("built-in `{name}` is a {}, not a {role}", b.role);
                    v.error(span, key, &message);
                    return None;
                }
                Err(e) => {
                    v.error(span, key, &e.to_string());
                    return None;
                }
            },
            (None, Some(file)) => {
                let path = self.dir.join(file);
                let host = self.host;
                let opened = self.opened.entry(path.clone()).or_insert_with(|| {
                    Plugin::open(host, &PluginSource::File(path.clone()))
                        .map(Arc::new)
                        .map_err(|e| e.to_string())
                });
                let plugin = match opened {
                    Ok(p) => p.clone(),
                    Err(message) => {
                        v.error(span, key, message);
                        return None;
                    }
                };
                Opened {
                    source: PluginSource::File(path),
                    plugin,
                    config,
                }
            }
        };
        Some((span, opened))
    }
}
