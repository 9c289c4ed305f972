//! Loading a component file: compile (or read from the cache), check its imports can be
//! satisfied, and detect the roles it exports.

use super::PluginHost;
use super::bindings::{
    config_property_filter, group_filter, record_transform, replication_policy, topic_filter,
};
use super::cache::{CacheOutcome, ComponentCache, hex};
use super::compile::precompile;
use super::instance::{Loaded, RoleGuest, RoleInstance};
use super::stats::PluginStats;
use crate::policy::{
    Config, ConfigPropertyFilter, GroupFilter, PluginError, RecordTransform, ReplicationPolicy,
    Role, TopicFilter,
};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wasmtime::component::Component;

/// The `kmirror:plugin` versions this host speaks: `0.1.x`.
const PACKAGE: &str = "kmirror:plugin/";
const COMPATIBLE_VERSION: &str = "0.1.";

/// A compiled component, ready to instantiate for any of its roles.
pub struct PluginComponent {
    path: PathBuf,
    roles: Vec<Role>,
    loaded: Arc<Loaded>,
    cache_outcome: CacheOutcome,
    sha256: String,
}

/// The roles among `exports` (export names), and the names that are not roles.
pub(crate) fn detect_roles<'a>(exports: impl Iterator<Item = &'a str>) -> (Vec<Role>, Vec<String>) {
    let mut roles = Vec::new();
    let mut others = Vec::new();
    for name in exports {
        let role = name
            .strip_prefix(PACKAGE)
            .and_then(|rest| rest.split_once('@'))
            .filter(|(_, version)| version.starts_with(COMPATIBLE_VERSION))
            .and_then(|(iface, _)| Role::from_wit_name(iface));
        match role {
            Some(role) if !roles.contains(&role) => roles.push(role),
            Some(_) => {}
            None => others.push(name.to_string()),
        }
    }
    roles.sort();
    (roles, others)
}

/// A hint for bytes that are not a component.
fn not_a_component_hint(bytes: &[u8]) -> Option<&'static str> {
    match bytes.get(0..8) {
        Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => Some(
            "it is a core WebAssembly module, not a component: build it for wasm32-wasip2, or turn \
             it into a component with wit-component (`cargo xtask plugins` does both)",
        ),
        Some([0, b'a', b's', b'm', ..]) => None,
        _ => Some("it is not a WebAssembly file"),
    }
}

/// The compiled form of `bytes`: from the cache if an authentic entry exists, else
/// compiled within the host's bounds (and stored).
fn compiled(host: &PluginHost, bytes: &[u8]) -> Result<(Component, CacheOutcome), String> {
    let engine = host.engine();
    let key = host.cache().map(|_| ComponentCache::key(engine, bytes));
    if let (Some(cache), Some(key)) = (host.cache(), &key)
        && let Some(artefact) = cache.read(key)
    {
        // SAFETY: the artefact's HMAC, under a secret only this user can read, binds it
        // to `key` — the SHA-256 of this engine's compatibility hash and of these exact
        // component bytes — so it is what this host's compiler produced for them.
        if let Ok(component) = unsafe { Component::deserialize(engine, &artefact) } {
            return Ok((component, CacheOutcome::Hit));
        }
    }
    let artefact = precompile(engine, bytes, host.limits().compile_timeout)?;
    if let (Some(cache), Some(key)) = (host.cache(), &key) {
        cache.write(key, &artefact);
    }
    // SAFETY: produced just now by this engine's compiler (or a child process building the
    // same engine, checked by `detect_precompiled` and by deserialize's own compatibility
    // check).
    let component =
        unsafe { Component::deserialize(engine, &artefact) }.map_err(|e| format!("{e:#}"))?;
    Ok((component, CacheOutcome::Compiled))
}

impl PluginComponent {
    /// Loads the component at `path`.
    pub fn load(host: &PluginHost, path: &Path) -> Result<Self, PluginError> {
        let read = |source| PluginError::Read {
            path: path.to_path_buf(),
            source,
        };
        let max = host.limits().max_component_bytes;
        let size = std::fs::metadata(path).map_err(read)?.len();
        if size > max as u64 {
            return Err(PluginError::Compile {
                path: path.to_path_buf(),
                message: format!(
                    "the component is {size} bytes, over the limit of {max} (plugins.max_component_size_mib)"
                ),
            });
        }
        let bytes = std::fs::read(path).map_err(read)?;
        Self::from_bytes(host, path, &bytes)
    }

    /// Loads a component from `bytes`; `path` names it in messages.
    pub fn from_bytes(host: &PluginHost, path: &Path, bytes: &[u8]) -> Result<Self, PluginError> {
        let compile_error = |message: String| PluginError::Compile {
            path: path.to_path_buf(),
            message,
        };
        if let Some(hint) = not_a_component_hint(bytes) {
            return Err(compile_error(hint.to_string()));
        }
        let max = host.limits().max_component_bytes;
        if bytes.len() > max {
            return Err(compile_error(format!(
                "the component is {} bytes, over the limit of {max} (plugins.max_component_size_mib)",
                bytes.len()
            )));
        }
        let (component, cache_outcome) = compiled(host, bytes).map_err(compile_error)?;

        let ty = component.component_type();
        let (roles, others) = detect_roles(ty.exports(host.engine()).map(|(name, _)| name));
        if roles.is_empty() {
            let exports = if others.is_empty() {
                "nothing".to_string()
            } else {
                others.join(", ")
            };
            return Err(PluginError::NoRole {
                path: path.to_path_buf(),
                exports,
            });
        }
        let name = path.display().to_string();
        let pre =
            host.linker()
                .instantiate_pre(&component)
                .map_err(|e| PluginError::Instantiate {
                    plugin: name.clone(),
                    message: format!(
                        "{e:#} (plugins may import only WASI interfaces, which grant nothing)"
                    ),
                })?;
        let stats = host.registry().entry(&name);
        Ok(PluginComponent {
            path: path.to_path_buf(),
            roles,
            loaded: Arc::new(Loaded {
                host: host.clone(),
                pre,
                name,
                stats,
            }),
            cache_outcome,
            sha256: hex(&Sha256::digest(bytes)),
        })
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The roles it exports.
    pub fn roles(&self) -> &[Role] {
        &self.roles
    }

    /// SHA-256 of the component's bytes, hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Its stats (shared by every component loaded under the same name).
    pub fn stats(&self) -> &Arc<PluginStats> {
        &self.loaded.stats
    }

    /// Whether it came from the compile cache.
    pub fn cache_outcome(&self) -> CacheOutcome {
        self.cache_outcome
    }

    fn role_instance<G: RoleGuest>(&self, config: &Config) -> Result<RoleInstance<G>, PluginError> {
        if !self.roles.contains(&G::ROLE) {
            return Err(PluginError::MissingRole {
                plugin: self.loaded.name.clone(),
                role: G::ROLE,
                exports: self
                    .roles
                    .iter()
                    .map(Role::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        RoleInstance::new(self.loaded.clone(), config.entries().to_vec())
    }

    /// A new instance playing the topic-filter role, configured with `config`.
    pub fn topic_filter(&self, config: &Config) -> Result<Arc<dyn TopicFilter>, PluginError> {
        Ok(Arc::new(self.role_instance::<topic_filter::Guest>(config)?))
    }

    /// A new instance playing the group-filter role, configured with `config`.
    pub fn group_filter(&self, config: &Config) -> Result<Arc<dyn GroupFilter>, PluginError> {
        Ok(Arc::new(self.role_instance::<group_filter::Guest>(config)?))
    }

    /// A new instance playing the replication-policy role, configured with `config`.
    pub fn replication_policy(
        &self,
        config: &Config,
    ) -> Result<Arc<dyn ReplicationPolicy>, PluginError> {
        Ok(Arc::new(
            self.role_instance::<replication_policy::Guest>(config)?,
        ))
    }

    /// A new instance playing the config-property-filter role, configured with `config`.
    pub fn config_property_filter(
        &self,
        config: &Config,
    ) -> Result<Arc<dyn ConfigPropertyFilter>, PluginError> {
        Ok(Arc::new(
            self.role_instance::<config_property_filter::Guest>(config)?,
        ))
    }

    /// A new instance playing the record-transform role, configured with `config`.
    pub fn record_transform(
        &self,
        config: &Config,
    ) -> Result<Arc<dyn RecordTransform>, PluginError> {
        Ok(Arc::new(
            self.role_instance::<record_transform::Guest>(config)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_detected_by_name_and_version() {
        let (roles, others) = detect_roles(
            [
                "kmirror:plugin/topic-filter@0.1.0",
                "kmirror:plugin/replication-policy@0.1.7",
                "kmirror:plugin/group-filter@0.2.0",
                "example:greeter/greet@1.0.0",
                "kmirror:plugin/unknown@0.1.0",
            ]
            .into_iter(),
        );
        assert_eq!(roles, vec![Role::TopicFilter, Role::ReplicationPolicy]);
        assert_eq!(
            others,
            vec![
                "kmirror:plugin/group-filter@0.2.0",
                "example:greeter/greet@1.0.0",
                "kmirror:plugin/unknown@0.1.0"
            ]
        );
    }

    #[test]
    fn core_modules_get_a_hint() {
        assert!(
            not_a_component_hint(b"\0asm\x01\0\0\0")
                .unwrap()
                .contains("core WebAssembly module")
        );
        assert!(
            not_a_component_hint(b"hello")
                .unwrap()
                .contains("not a WebAssembly file")
        );
        assert!(not_a_component_hint(b"\0asm\x0d\0\x01\0").is_none());
    }
}
