//! The guest SDK and the WIT contract, embedded in the binary so `kmirror plugin new`
//! writes a self-contained project (the SDK vendored beside it) from an installed binary or
//! a container, with no path into kmirror's sources.

/// (path in a scaffolded project, contents): the WIT contract.
pub const WIT: (&str, &str) = ("wit/plugin.wit", include_str!("../../../wit/plugin.wit"));

/// The version of the embedded SDK (kmirror's own).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// wit-bindgen as the SDK depends on it (the workspace's pin).
const WIT_BINDGEN: &str = r#"wit-bindgen = { version = "=0.60.0", default-features = false, features = ["macros", "realloc"] }"#;
/// regex as MM2's semantics depend on it.
const REGEX: &str = r#"regex = "1""#;

/// (path in a scaffolded project, contents): the vendored Rust SDK crates.
pub fn rust_sdk() -> Vec<(&'static str, String)> {
    let manifest = |name: &str, description: &str, extra: &str| {
        format!(
            "[package]\nname = \"{name}\"\ndescription = \"{description}\"\nversion = \"{VERSION}\"\nedition = \"2024\"\nlicense = \"Apache-2.0\"\npublish = false\n{extra}"
        )
    };
    vec![
        (
            "vendor/kmirror-mm2/Cargo.toml",
            manifest(
                "kmirror-mm2",
                "MirrorMaker 2's default naming and filtering semantics (vendored by kmirror plugin new)",
                &format!("\n[dependencies]\n{REGEX}\n"),
            ),
        ),
        (
            "vendor/kmirror-mm2/src/lib.rs",
            include_str!("../../../plugins/mm2/src/lib.rs").into(),
        ),
        (
            "vendor/kmirror-mm2/src/config.rs",
            include_str!("../../../plugins/mm2/src/config.rs").into(),
        ),
        (
            "vendor/kmirror-mm2/src/filter.rs",
            include_str!("../../../plugins/mm2/src/filter.rs").into(),
        ),
        (
            "vendor/kmirror-mm2/src/pattern.rs",
            include_str!("../../../plugins/mm2/src/pattern.rs").into(),
        ),
        (
            "vendor/kmirror-mm2/src/policy.rs",
            include_str!("../../../plugins/mm2/src/policy.rs").into(),
        ),
        (
            "vendor/kmirror-plugin-sdk-macros/Cargo.toml",
            manifest(
                "kmirror-plugin-sdk-macros",
                "The export_plugin! macro of kmirror's guest SDK (vendored)",
                "\n[lib]\nproc-macro = true\n",
            ),
        ),
        (
            "vendor/kmirror-plugin-sdk-macros/src/lib.rs",
            include_str!("../../../plugins/sdk-macros/src/lib.rs").into(),
        ),
        (
            "vendor/kmirror-plugin-sdk/Cargo.toml",
            manifest(
                "kmirror-plugin-sdk",
                "Write kmirror plugins in plain Rust (vendored)",
                &format!(
                    "\n[dependencies]\nkmirror-mm2 = {{ path = \"../kmirror-mm2\" }}\nkmirror-plugin-sdk-macros = {{ path = \"../kmirror-plugin-sdk-macros\" }}\n{WIT_BINDGEN}\n"
                ),
            ),
        ),
        (
            "vendor/kmirror-plugin-sdk/src/lib.rs",
            include_str!("../../../plugins/sdk/src/lib.rs").into(),
        ),
        (
            "vendor/kmirror-plugin-sdk/src/__private.rs",
            include_str!("../../../plugins/sdk/src/__private.rs").into(),
        ),
        (
            "vendor/kmirror-plugin-sdk/src/transform.rs",
            include_str!("../../../plugins/sdk/src/transform.rs").into(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::Path;

    fn sources(dir: &Path, out: &mut BTreeSet<String>, root: &Path) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out, root);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
                out.insert(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }

    /// Every source file of the SDK crates is embedded (tests aside), so a file added to the
    /// SDK cannot be forgotten by the scaffold.
    #[test]
    fn every_sdk_source_is_embedded() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut on_disk = BTreeSet::new();
        for (krate, vendored) in [
            ("plugins/mm2", "vendor/kmirror-mm2"),
            ("plugins/sdk", "vendor/kmirror-plugin-sdk"),
            ("plugins/sdk-macros", "vendor/kmirror-plugin-sdk-macros"),
        ] {
            let mut files = BTreeSet::new();
            sources(&repo.join(krate), &mut files, &repo.join(krate));
            on_disk.extend(files.into_iter().map(|f| format!("{vendored}/{f}")));
        }
        let embedded: BTreeSet<String> = rust_sdk()
            .into_iter()
            .map(|(p, _)| p.to_string())
            .filter(|p| p.ends_with(".rs"))
            .collect();
        assert_eq!(embedded, on_disk);
    }

    /// The vendored manifests pin what the workspace pins.
    #[test]
    fn vendored_dependencies_match_the_workspace() {
        let root =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"))
                .unwrap();
        let pin = root
            .lines()
            .find(|l| l.starts_with("wit-bindgen = "))
            .unwrap();
        assert_eq!(pin, WIT_BINDGEN);
        assert!(root.contains(&format!("\n{REGEX}\n")), "{root}");
        assert!(root.contains(&format!("version = \"{VERSION}\"")));
    }
}
