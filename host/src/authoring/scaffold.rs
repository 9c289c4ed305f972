//! `kmirror plugin new`: scaffolds a plugin crate that builds to a component and passes
//! `kmirror plugin check` as it is.

use crate::policy::Role;
use std::path::{Path, PathBuf};

const CARGO_TOML: &str = include_str!("templates/rust/Cargo.toml.tmpl");
const README: &str = include_str!("templates/rust/README.md.tmpl");

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
    CARGO_TOML
        .replace("NAME", name)
        .replace("SDK", &sdk.display().to_string())
}

fn readme(name: &str, role: Role) -> String {
    README
        .replace("NAME", name)
        .replace("ROLE", role.wit_name())
        .replace("FILE", &name.replace('-', "_"))
}

fn lib_rs(name: &str, ty: &str, role: Role) -> String {
    let body = match role {
        Role::ReplicationPolicy => include_str!("templates/rust/replication_policy.rs.tmpl"),
        Role::TopicFilter => include_str!("templates/rust/topic_filter.rs.tmpl"),
        Role::GroupFilter => include_str!("templates/rust/group_filter.rs.tmpl"),
        Role::ConfigPropertyFilter => include_str!("templates/rust/config_property_filter.rs.tmpl"),
    };
    format!(
        "//! {name}: a kmirror {role} plugin.\n{}",
        body.replace("NAME", name).replace("Plugin", ty)
    )
}

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
