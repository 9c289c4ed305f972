//! Plugins: WebAssembly components and native built-ins behind the traits of
//! [`crate::policy`].
//!
//! - [`engine`]: the one place wasmtime is configured — engine, limits, epoch ticker, and
//!   the WASI context that grants nothing.
//! - [`cache`]: compiled components on disk, keyed by content hash and engine settings.
//! - [`component`]: loading a component file and detecting its roles.
//! - [`instance`]: a long-lived, configured instance per role, re-created after a trap.
//! - [`builtin`]: the native built-ins (MM2's defaults) by name.
//! - [`conformance`], [`eval`], [`scaffold`]: what `kmirror plugin check|eval|new` do.

mod bindings;
pub mod builtin;
pub mod cache;
pub mod component;
pub mod conformance;
pub mod engine;
mod error;
pub mod eval;
mod instance;
pub mod scaffold;

pub use component::PluginComponent;
pub use engine::{Limits, PluginHost};
pub use error::{PluginError, TrapKind};
pub use kmirror_mm2::Config;

use crate::policy::RoleHandle;
use std::fmt;
use std::path::PathBuf;

/// The roles a plugin can play.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// `kmirror:plugin/topic-filter`.
    TopicFilter,
    /// `kmirror:plugin/group-filter`.
    GroupFilter,
    /// `kmirror:plugin/replication-policy`.
    ReplicationPolicy,
    /// `kmirror:plugin/config-property-filter`.
    ConfigPropertyFilter,
}

impl Role {
    /// Every role, in WIT order.
    pub const ALL: [Role; 4] = [
        Role::TopicFilter,
        Role::GroupFilter,
        Role::ReplicationPolicy,
        Role::ConfigPropertyFilter,
    ];

    /// The WIT interface name: `topic-filter`, ...
    pub fn wit_name(self) -> &'static str {
        match self {
            Role::TopicFilter => "topic-filter",
            Role::GroupFilter => "group-filter",
            Role::ReplicationPolicy => "replication-policy",
            Role::ConfigPropertyFilter => "config-property-filter",
        }
    }

    /// The role named `name` (its WIT name).
    pub fn from_wit_name(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.wit_name() == name)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wit_name())
    }
}

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

    /// A configured implementation of `role`.
    pub fn instantiate(&self, role: Role, config: &Config) -> Result<RoleHandle, PluginError> {
        match self {
            Plugin::Builtin(b) if b.role == role => {
                (b.build)(config).map_err(|message| PluginError::Config {
                    plugin: format!("builtin:{}", b.name),
                    role,
                    message,
                })
            }
            Plugin::Builtin(b) => Err(PluginError::MissingRole {
                plugin: format!("builtin:{}", b.name),
                role,
                exports: b.role.to_string(),
            }),
            Plugin::Component(c) => c.instantiate(role, config),
        }
    }

    /// How the plugin is named in messages.
    pub fn name(&self) -> String {
        match self {
            Plugin::Builtin(b) => format!("builtin:{}", b.name),
            Plugin::Component(c) => c.path().display().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_round_trip() {
        for role in Role::ALL {
            assert_eq!(Role::from_wit_name(role.wit_name()), Some(role));
        }
        assert_eq!(Role::from_wit_name("nope"), None);
    }

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
