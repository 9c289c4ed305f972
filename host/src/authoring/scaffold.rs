//! `kmirror plugin new`: scaffolds a plugin project — Rust, Python or JavaScript — that
//! `kmirror plugin build` turns into a component passing `kmirror plugin check` as it is.
//! Everything it needs of kmirror (the WIT contract; for Rust the SDK crates) is written
//! into the project from the binary, so it works from an installed binary or a container.

use super::sdk;
use crate::policy::Role;
use std::path::{Path, PathBuf};

const CARGO_TOML: &str = include_str!("templates/rust/Cargo.toml.tmpl");
const RUST_README: &str = include_str!("templates/rust/README.md.tmpl");
const LANG_README: &str = include_str!("templates/README.lang.md.tmpl");

/// The language a plugin is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust with kmirror's SDK (wasm32-wasip2).
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js (StarlingMonkey).
    Javascript,
}

impl Lang {
    /// Its name in `kmirror-plugin.toml`.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Javascript => "javascript",
        }
    }
}

/// The WIT world a plugin playing only `role` targets.
pub fn world(role: Role) -> String {
    format!("{}-plugin", role.wit_name())
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
    /// The SDK given with --sdk is not there.
    #[error("--sdk {0}: not a directory with a Cargo.toml")]
    NoSdk(PathBuf),
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

/// Writes the project `dir/name` for `role` in `lang`; returns its path. A Rust project
/// depends on the SDK vendored into it, or on the SDK crate at `sdk` if given.
pub fn scaffold(
    name: &str,
    role: Role,
    lang: Lang,
    dir: &Path,
    sdk: Option<&Path>,
) -> Result<PathBuf, ScaffoldError> {
    if !valid_name(name) {
        return Err(ScaffoldError::Name(name.to_string()));
    }
    let root = dir.join(name);
    if root.exists() {
        return Err(ScaffoldError::Exists(root));
    }
    let mut files: Vec<(String, String)> = vec![(sdk::WIT.0.into(), sdk::WIT.1.into())];
    match lang {
        Lang::Rust => {
            let dependency = match sdk {
                Some(p) if p.join("Cargo.toml").is_file() => {
                    let p = p
                        .canonicalize()
                        .map_err(|_| ScaffoldError::NoSdk(p.into()))?;
                    p.display().to_string()
                }
                Some(p) => return Err(ScaffoldError::NoSdk(p.into())),
                None => {
                    for (path, text) in sdk::rust_sdk() {
                        files.push((path.into(), text));
                    }
                    "vendor/kmirror-plugin-sdk".to_string()
                }
            };
            files.push((
                "Cargo.toml".into(),
                CARGO_TOML.replace("NAME", name).replace("SDK", &dependency),
            ));
            files.push(("src/lib.rs".into(), rust_lib(name, &type_name(name), role)));
            files.push((".gitignore".into(), format!("/target\n/{name}.wasm\n")));
            files.push(("README.md".into(), readme(RUST_README, name, role)));
        }
        Lang::Python | Lang::Javascript => {
            let (file, source) = lang_source(name, role, lang);
            files.push((file.into(), source));
            files.push((
                "kmirror-plugin.toml".into(),
                manifest(name, role, lang, file),
            ));
            let gitignore = match lang {
                Lang::Python => format!("/{name}.wasm\n__pycache__/\n"),
                _ => format!("/{name}.wasm\nnode_modules/\n"),
            };
            files.push((".gitignore".into(), gitignore));
            let (language, tool, install) = match lang {
                Lang::Python => (
                    "Python",
                    "componentize-py",
                    "`pip install componentize-py==0.25.1`",
                ),
                _ => (
                    "JavaScript",
                    "componentize-js",
                    "`npm install -g @bytecodealliance/componentize-js@0.23.0`",
                ),
            };
            let text = readme(LANG_README, name, role)
                .replace("LANG", language)
                .replace("TOOL", tool)
                .replace("INSTALL", install);
            files.push(("README.md".into(), text));
        }
    }
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

fn manifest(name: &str, role: Role, lang: Lang, source: &str) -> String {
    format!(
        "# How `kmirror plugin build` builds this plugin.\nname = \"{name}\"\nlanguage = \"{}\"\nworld = \"{}\"\nsource = \"{source}\"\nwit = \"wit\"\n",
        lang.name(),
        world(role)
    )
}

fn readme(template: &str, name: &str, role: Role) -> String {
    template
        .replace("NAME", name)
        .replace("ROLE", role.wit_name())
        .replace("VERSION", sdk::VERSION)
}

/// (file, text) of a Python or JavaScript plugin for `role`.
fn lang_source(name: &str, role: Role, lang: Lang) -> (&'static str, String) {
    let (example, text) = match (lang, role) {
        (Lang::Python, Role::ReplicationPolicy) => (
            "prefix-policy",
            include_str!("../../../plugins/python/prefix-policy/app.py"),
        ),
        (Lang::Python, Role::TopicFilter) => (
            "regex-filter",
            include_str!("../../../plugins/python/regex-filter/app.py"),
        ),
        (Lang::Python, Role::GroupFilter) => (
            "NAME",
            include_str!("templates/python/group_filter.py.tmpl"),
        ),
        (Lang::Python, Role::ConfigPropertyFilter) => (
            "NAME",
            include_str!("templates/python/config_property_filter.py.tmpl"),
        ),
        (Lang::Python, Role::RecordTransform) => (
            "drop-by-header",
            include_str!("../../../plugins/python/drop-by-header/app.py"),
        ),
        (_, Role::RecordTransform) => (
            "drop-by-header",
            include_str!("../../../plugins/javascript/drop-by-header/plugin.js"),
        ),
        (_, Role::ReplicationPolicy) => (
            "prefix-policy",
            include_str!("../../../plugins/javascript/prefix-policy/plugin.js"),
        ),
        (_, Role::TopicFilter) => (
            "regex-filter",
            include_str!("../../../plugins/javascript/regex-filter/plugin.js"),
        ),
        (_, Role::GroupFilter) => (
            "NAME",
            include_str!("templates/javascript/group_filter.js.tmpl"),
        ),
        (_, Role::ConfigPropertyFilter) => (
            "NAME",
            include_str!("templates/javascript/config_property_filter.js.tmpl"),
        ),
    };
    let file = if lang == Lang::Python {
        "app.py"
    } else {
        "plugin.js"
    };
    (file, text.replace(example, name))
}

fn rust_lib(name: &str, ty: &str, role: Role) -> String {
    let body = match role {
        Role::ReplicationPolicy => include_str!("templates/rust/replication_policy.rs.tmpl"),
        Role::TopicFilter => include_str!("templates/rust/topic_filter.rs.tmpl"),
        Role::GroupFilter => include_str!("templates/rust/group_filter.rs.tmpl"),
        Role::ConfigPropertyFilter => include_str!("templates/rust/config_property_filter.rs.tmpl"),
        Role::RecordTransform => include_str!("templates/rust/record_transform.rs.tmpl"),
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
        assert!(matches!(
            scaffold("Bad", Role::TopicFilter, Lang::Rust, dir.path(), None),
            Err(ScaffoldError::Name(_))
        ));
        let made = scaffold("ok", Role::TopicFilter, Lang::Rust, dir.path(), None).unwrap();
        let text = std::fs::read_to_string(made.join("src/lib.rs")).unwrap();
        assert!(
            text.contains("pub struct Ok {") && text.contains("export_plugin!(topic_filter: Ok)"),
            "{text}"
        );
        assert!(matches!(
            scaffold("ok", Role::TopicFilter, Lang::Rust, dir.path(), None),
            Err(ScaffoldError::Exists(_))
        ));
    }

    /// A scaffold refers to nothing outside itself: no absolute path, the SDK and WIT inside.
    #[test]
    fn scaffolds_are_self_contained() {
        let dir = tempfile::tempdir().unwrap();
        let rust = scaffold("r", Role::ReplicationPolicy, Lang::Rust, dir.path(), None).unwrap();
        let cargo = std::fs::read_to_string(rust.join("Cargo.toml")).unwrap();
        assert!(
            cargo.contains("path = \"vendor/kmirror-plugin-sdk\""),
            "{cargo}"
        );
        assert!(!cargo.contains(env!("CARGO_MANIFEST_DIR")), "{cargo}");
        for f in [
            "wit/plugin.wit",
            "vendor/kmirror-plugin-sdk-macros/src/lib.rs",
            "vendor/kmirror-mm2/src/policy.rs",
        ] {
            assert!(rust.join(f).is_file(), "{f}");
        }
        for lang in [Lang::Python, Lang::Javascript] {
            for role in Role::ALL {
                let name = format!("{}-{}", lang.name(), role.wit_name());
                let made = scaffold(&name, role, lang, dir.path(), None).unwrap();
                let manifest = std::fs::read_to_string(made.join("kmirror-plugin.toml")).unwrap();
                assert!(
                    manifest.contains(&format!("world = \"{}\"", world(role))),
                    "{manifest}"
                );
                assert!(made.join("wit/plugin.wit").is_file());
                let source = if lang == Lang::Python {
                    "app.py"
                } else {
                    "plugin.js"
                };
                let text = std::fs::read_to_string(made.join(source)).unwrap();
                assert!(text.contains(&name) && !text.contains("NAME"), "{text}");
            }
        }
    }
}
