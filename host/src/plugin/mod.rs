//! The plugin runtime: WebAssembly components and native built-ins behind the traits of
//! [`crate::policy`].
//!
//! - [`engine`]: the one place wasmtime is configured — engine, limits, epoch ticker, and
//!   the WASI context that grants nothing.
//! - [`cache`]: compiled components on disk, keyed by content hash and engine settings,
//!   each entry authenticated.
//! - [`compile`]: compiling within a size and time bound (out of process in the binary).
//! - [`component`]: loading a component file and detecting its roles.
//! - `instance`: a long-lived, configured instance per role, re-created after a trap;
//!   `output`: the guest's stdout/stderr in a bounded ring buffer.
//! - [`stats`]: per-plugin calls, errors by kind, durations, reloads, what is loaded.
//! - [`builtin`]: the native built-ins (MM2's defaults) by name.

mod bindings;
pub mod builtin;
pub mod cache;
pub mod compile;
pub mod component;
pub mod engine;
mod instance;
mod output;
pub mod stats;

pub use component::PluginComponent;
pub use engine::{Limits, PluginHost};

use crate::policy::{
    Config, ConfigPropertyFilter, GroupFilter, PluginError, RecordTransform, ReplicationPolicy,
    Role, TopicFilter,
};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Where a role implementation comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    /// A native built-in, by name (`default-policy`, ...).
    Builtin(String),
    /// A WebAssembly component file.
    File(PathBuf),
}

impl PluginSource {
    /// Parses a CLI argument: `builtin:NAME` or a file path.
    pub fn parse(arg: &str) -> PluginSource {
        match arg.strip_prefix("builtin:") {
            Some(name) => PluginSource::Builtin(name.to_string()),
            None => PluginSource::File(PathBuf::from(arg)),
        }
    }

    /// How it is named in metrics: `builtin:NAME`, or the component's file name.
    pub fn short_name(&self) -> String {
        match self {
            PluginSource::Builtin(name) => format!("builtin:{name}"),
            PluginSource::File(path) => path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
        }
    }
}

impl fmt::Display for PluginSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginSource::Builtin(name) => write!(f, "builtin:{name}"),
            PluginSource::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// A plugin opened for use: a built-in or a loaded component, with its roles.
pub enum Plugin {
    /// A native built-in.
    Builtin(&'static builtin::Builtin),
    /// A WebAssembly component.
    Component(PluginComponent),
}

impl Plugin {
    /// Opens `source`: looks up a built-in, or loads (compiles or reads from the cache) a
    /// component and detects its roles.
    pub fn open(host: &PluginHost, source: &PluginSource) -> Result<Plugin, PluginError> {
        match source {
            PluginSource::Builtin(name) => builtin::find(name).map(Plugin::Builtin),
            PluginSource::File(path) => PluginComponent::load(host, path).map(Plugin::Component),
        }
    }

    /// The roles this plugin exports.
    pub fn roles(&self) -> Vec<Role> {
        match self {
            Plugin::Builtin(b) => vec![b.role],
            Plugin::Component(c) => c.roles().to_vec(),
        }
    }

    /// How the plugin is named in messages.
    pub fn name(&self) -> String {
        match self {
            Plugin::Builtin(b) => format!("builtin:{}", b.name),
            Plugin::Component(c) => c.path().display().to_string(),
        }
    }

    /// A configured topic filter.
    pub fn topic_filter(&self, config: &Config) -> Result<Arc<dyn TopicFilter>, PluginError> {
        match self {
            Plugin::Builtin(b) => b.configured(Role::TopicFilter, config, builtin::topic_filter),
            Plugin::Component(c) => c.topic_filter(config),
        }
    }

    /// A configured group filter.
    pub fn group_filter(&self, config: &Config) -> Result<Arc<dyn GroupFilter>, PluginError> {
        match self {
            Plugin::Builtin(b) => b.configured(Role::GroupFilter, config, builtin::group_filter),
            Plugin::Component(c) => c.group_filter(config),
        }
    }

    /// A configured replication policy.
    pub fn replication_policy(
        &self,
        config: &Config,
    ) -> Result<Arc<dyn ReplicationPolicy>, PluginError> {
        match self {
            Plugin::Builtin(b) => {
                b.configured(Role::ReplicationPolicy, config, builtin::replication_policy)
            }
            Plugin::Component(c) => c.replication_policy(config),
        }
    }

    /// A configured config-property filter.
    pub fn config_property_filter(
        &self,
        config: &Config,
    ) -> Result<Arc<dyn ConfigPropertyFilter>, PluginError> {
        match self {
            Plugin::Builtin(b) => b.configured(
                Role::ConfigPropertyFilter,
                config,
                builtin::config_property_filter,
            ),
            Plugin::Component(c) => c.config_property_filter(config),
        }
    }

    /// A configured record transform.
    pub fn record_transform(
        &self,
        config: &Config,
    ) -> Result<Arc<dyn RecordTransform>, PluginError> {
        match self {
            Plugin::Builtin(b) => {
                b.configured(Role::RecordTransform, config, builtin::record_transform)
            }
            Plugin::Component(c) => c.record_transform(config),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse() {
        assert_eq!(
            PluginSource::parse("builtin:default-policy"),
            PluginSource::Builtin("default-policy".into())
        );
        assert_eq!(
            PluginSource::parse("a/b.wasm"),
            PluginSource::File("a/b.wasm".into())
        );
    }
}
