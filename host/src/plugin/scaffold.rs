//! `kmirror plugin new`: scaffolds a plugin crate that builds to a component and passes
//! `kmirror plugin check` as it is.

use super::Role;
use std::path::{Path, PathBuf};

/// The SDK next to this host's sources, when kmirror was built from its repository.
pub fn bundled_sdk() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/sdk");
    path.join("Cargo.toml")
        .is_file()
        .then(|| path.canonicalize().ok())
        .flatten()
}

/// Why a scaffold could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The name is not a valid crate name.
    #[error(
        "invalid plugin name `{0}`: use lowercase letters, digits, `-` and `_`, starting with a letter"
    )]
    Name(String),
    /// The directory exists already.
    #[error("{0} already exists; choose another name or --dir")]
    Exists(PathBuf),
    /// The SDK could not be found.
    #[error(
        "cannot find the kmirror plugin SDK; pass --sdk PATH (the plugins/sdk directory of the kmirror repository)"
    )]
    NoSdk,
    /// Writing failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

fn type_name(name: &str) -> String {
    name.split(['-', '_'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Writes the crate `dir/name` for `role`, depending on the SDK at `sdk`; returns its path.
pub fn scaffold(
    name: &str,
    role: Role,
    dir: &Path,
    sdk: Option<&Path>,
) -> Result<PathBuf, ScaffoldError> {
    if !valid_name(name) {
        return Err(ScaffoldError::Name(name.to_string()));
    }
    let sdk = match sdk {
        Some(p) => p.canonicalize().map_err(|_| ScaffoldError::NoSdk)?,
        None => bundled_sdk().ok_or(ScaffoldError::NoSdk)?,
    };
    let root = dir.join(name);
    if root.exists() {
        return Err(ScaffoldError::Exists(root));
    }
    let ty = type_name(name);
    let files = [
        ("Cargo.toml", cargo_toml(name, &sdk)),
        ("src/lib.rs", lib_rs(name, &ty, role)),
        (".gitignore", "/target\n".to_string()),
        ("README.md", readme(name, role)),
    ];
    for (file, text) in files {
        let path = root.join(file);
        let io = |source| ScaffoldError::Io {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&path, text).map_err(io)?;
    }
    Ok(root)
}

fn cargo_toml(name: &str, sdk: &Path) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
kmirror-plugin-sdk = {{ path = "{sdk}" }}

[profile.release]
opt-level = "s"
lto = true
codegen-units = 1
strip = "debuginfo"

# A plugin is its own workspace, wherever it lives.
[workspace]
"#,
        sdk = sdk.display()
    )
}

fn readme(name: &str, role: Role) -> String {
    let file = name.replace('-', "_");
    format!(
        "# {name}\n\nA kmirror {role} plugin.\n\n```sh\ncargo test                                        # the logic, natively\n\
         cargo build --release --target wasm32-wasip2      # the component\n\
         kmirror plugin check target/wasm32-wasip2/release/{file}.wasm\n```\n"
    )
}

fn lib_rs(name: &str, ty: &str, role: Role) -> String {
    let body = match role {
        Role::ReplicationPolicy => POLICY,
        Role::TopicFilter => TOPIC_FILTER,
        Role::GroupFilter => GROUP_FILTER,
        Role::ConfigPropertyFilter => CONFIG_FILTER,
    };
    format!(
        "//! {name}: a kmirror {role} plugin.\n{}",
        body.replace("NAME", name).replace("Plugin", ty)
    )
}

const POLICY: &str = r#"//!
//! Remote topics are named `<source alias><separator><topic>`; configuration key
//! `separator` (default `.`). Change the three functions below to your naming scheme; MM2's
//! defaults cover the rest (original-topic, internal topic names, heartbeats).

use kmirror_plugin_sdk::{Config, Configure, ReplicationPolicy};

pub struct Plugin {
    separator: String,
}

impl Configure for Plugin {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys("NAME", &["separator"])?;
        let separator = config.get("separator").unwrap_or(".").to_string();
        if separator.is_empty() {
            return Err("`separator` must not be empty".to_string());
        }
        Ok(Plugin { separator })
    }
}

impl ReplicationPolicy for Plugin {
    fn format_remote_topic(&self, source_alias: &str, topic: &str) -> String {
        format!("{source_alias}{}{topic}", self.separator)
    }

    fn topic_source(&self, topic: &str) -> Option<String> {
        let (source, rest) = topic.split_once(self.separator.as_str())?;
        (!rest.is_empty()).then(|| source.to_string())
    }

    fn upstream_topic(&self, topic: &str) -> Option<String> {
        let (_, rest) = topic.split_once(self.separator.as_str())?;
        (!rest.is_empty()).then(|| rest.to_string())
    }
}

kmirror_plugin_sdk::export_plugin!(replication_policy: Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let p = Plugin::configure(&Config::new()).unwrap();
        let remote = p.format_remote_topic("us-west", "orders");
        assert_eq!(p.topic_source(&remote).as_deref(), Some("us-west"));
        assert_eq!(p.upstream_topic(&remote).as_deref(), Some("orders"));
    }
}
"#;

const TOPIC_FILTER: &str = r#"//!
//! Mirrors the topics matching `topics` (default `.*`) except those matching
//! `topics.exclude` (default: MM2's internal-topic patterns). Comma-separated regexes,
//! each matching the whole name.

use kmirror_plugin_sdk::filter::TOPICS_EXCLUDE_DEFAULT;
use kmirror_plugin_sdk::{Config, Configure, PatternList, TopicFilter};

pub struct Plugin {
    include: PatternList,
    exclude: PatternList,
}

impl Configure for Plugin {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys("NAME", &["topics", "topics.exclude"])?;
        Ok(Plugin {
            include: PatternList::parse(config.get("topics").unwrap_or(".*"))?,
            exclude: PatternList::parse(config.get("topics.exclude").unwrap_or(TOPICS_EXCLUDE_DEFAULT))?,
        })
    }
}

impl TopicFilter for Plugin {
    fn should_replicate_topic(&self, topic: &str) -> bool {
        self.include.matches(topic) && !self.exclude.matches(topic)
    }
}

kmirror_plugin_sdk::export_plugin!(topic_filter: Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excludes_internal_topics() {
        let f = Plugin::configure(&Config::new()).unwrap();
        assert!(f.should_replicate_topic("orders"));
        assert!(!f.should_replicate_topic("__consumer_offsets"));
    }
}
"#;

const GROUP_FILTER: &str = r#"//!
//! Checkpoints the groups matching `groups` (default `.*`) except those matching
//! `groups.exclude` (default: MM2's console-consumer/connect/internal patterns).

use kmirror_plugin_sdk::filter::GROUPS_EXCLUDE_DEFAULT;
use kmirror_plugin_sdk::{Config, Configure, GroupFilter, PatternList};

pub struct Plugin {
    include: PatternList,
    exclude: PatternList,
}

impl Configure for Plugin {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys("NAME", &["groups", "groups.exclude"])?;
        Ok(Plugin {
            include: PatternList::parse(config.get("groups").unwrap_or(".*"))?,
            exclude: PatternList::parse(config.get("groups.exclude").unwrap_or(GROUPS_EXCLUDE_DEFAULT))?,
        })
    }
}

impl GroupFilter for Plugin {
    fn should_replicate_group(&self, group: &str) -> bool {
        self.include.matches(group) && !self.exclude.matches(group)
    }
}

kmirror_plugin_sdk::export_plugin!(group_filter: Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excludes_console_consumers() {
        let f = Plugin::configure(&Config::new()).unwrap();
        assert!(f.should_replicate_group("billing"));
        assert!(!f.should_replicate_group("console-consumer-1"));
    }
}
"#;

const CONFIG_FILTER: &str = r#"//!
//! Copies every topic config property except those matching `config.properties.exclude`
//! (default: MM2's list).

use kmirror_plugin_sdk::filter::CONFIG_PROPERTIES_EXCLUDE_DEFAULT;
use kmirror_plugin_sdk::{Config, ConfigPropertyFilter, Configure, PatternList};

pub struct Plugin {
    exclude: PatternList,
}

impl Configure for Plugin {
    fn configure(config: &Config) -> Result<Self, String> {
        config.check_keys("NAME", &["config.properties.exclude"])?;
        let list = config.get("config.properties.exclude").unwrap_or(CONFIG_PROPERTIES_EXCLUDE_DEFAULT);
        Ok(Plugin { exclude: PatternList::parse(list)? })
    }
}

impl ConfigPropertyFilter for Plugin {
    fn should_replicate_config_property(&self, name: &str) -> bool {
        !self.exclude.matches(name)
    }
}

kmirror_plugin_sdk::export_plugin!(config_property_filter: Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excludes_throttling() {
        let f = Plugin::configure(&Config::new()).unwrap();
        assert!(f.should_replicate_config_property("retention.ms"));
        assert!(!f.should_replicate_config_property("leader.replication.throttled.replicas"));
    }
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("my-policy_2"));
        assert!(!valid_name("My") && !valid_name("1x") && !valid_name("") && !valid_name("a b"));
        assert_eq!(type_name("my-policy_2"), "MyPolicy2");
    }

    #[test]
    fn refuses_existing_dirs_and_bad_names() {
        let dir = tempfile::tempdir().unwrap();
        let sdk = bundled_sdk();
        assert!(matches!(
            scaffold("Bad", Role::TopicFilter, dir.path(), sdk.as_deref()),
            Err(ScaffoldError::Name(_))
        ));
        let made = scaffold("ok", Role::TopicFilter, dir.path(), sdk.as_deref()).unwrap();
        assert!(made.join("src/lib.rs").is_file());
        let text = std::fs::read_to_string(made.join("src/lib.rs")).unwrap();
        assert!(
            text.contains("pub struct Ok {") && text.contains("export_plugin!(topic_filter: Ok)"),
            "{text}"
        );
        assert!(matches!(
            scaffold("ok", Role::TopicFilter, dir.path(), sdk.as_deref()),
            Err(ScaffoldError::Exists(_))
        ));
    }
}
