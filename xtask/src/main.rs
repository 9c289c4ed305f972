//! `cargo xtask plugins`: builds every plugin crate under `plugins/` into WebAssembly
//! components, two ways:
//!
//! - `target/plugins/<name>.wasm`: built for `wasm32-unknown-unknown` and turned into a
//!   component with `wit-component` — no imports at all;
//! - `target/plugins/wasip2/<name>.wasm`: built for `wasm32-wasip2`, where rustc itself
//!   emits a component that imports WASI interfaces.
//!
//! A plugin crate is a package under `plugins/` whose `[lib]` is a `cdylib`.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

const PROFILE: &str = "plugin";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("plugins") => build_plugins(),
        _ => bail!("usage: cargo xtask plugins"),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// Package names of the plugin crates, found by their `cdylib` lib.
fn plugin_packages(root: &Path) -> Result<Vec<String>> {
    let mut manifests = Vec::new();
    for dir in [root.join("plugins"), root.join("plugins/testing")] {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let manifest = entry?.path().join("Cargo.toml");
            if manifest.is_file() {
                manifests.push(manifest);
            }
        }
    }
    let mut names = Vec::new();
    for manifest in manifests {
        let text = std::fs::read_to_string(&manifest)?;
        let doc: toml::Table = text
            .parse()
            .with_context(|| format!("parsing {}", manifest.display()))?;
        let is_cdylib = doc
            .get("lib")
            .and_then(|l| l.get("crate-type"))
            .and_then(|t| t.as_array())
            .is_some_and(|types| types.iter().any(|t| t.as_str() == Some("cdylib")));
        let name = doc
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str());
        if let (true, Some(name)) = (is_cdylib, name) {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

fn cargo_build(root: &Path, target: &str, packages: &[String]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--target", target, "--profile", PROFILE]);
    for p in packages {
        cmd.args(["--package", p]);
    }
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build --target {target} failed: {status}");
    }
    Ok(())
}

fn build_plugins() -> Result<()> {
    let root = workspace_root();
    let target = target_dir(&root);
    let packages = plugin_packages(&root)?;
    let out = target.join("plugins");
    std::fs::create_dir_all(out.join("wasip2"))?;

    cargo_build(&root, "wasm32-unknown-unknown", &packages)?;
    cargo_build(&root, "wasm32-wasip2", &packages)?;

    for package in &packages {
        let file = format!("{}.wasm", package.replace('-', "_"));
        let module_path = target
            .join("wasm32-unknown-unknown")
            .join(PROFILE)
            .join(&file);
        let module = std::fs::read(&module_path)
            .with_context(|| format!("reading {}", module_path.display()))?;
        let component = wit_component::ComponentEncoder::default()
            .module(&module)
            .and_then(|e| e.validate(true).encode())
            .with_context(|| format!("turning {} into a component", module_path.display()))?;
        write_if_changed(&out.join(&file), &component)?;

        let wasip2 = target.join("wasm32-wasip2").join(PROFILE).join(&file);
        let bytes =
            std::fs::read(&wasip2).with_context(|| format!("reading {}", wasip2.display()))?;
        write_if_changed(&out.join("wasip2").join(&file), &bytes)?;
    }
    println!("built {} plugins into {}", packages.len(), out.display());
    Ok(())
}

/// Keeps the file's modification time when nothing changed (the host's plugin watcher and
/// on-disk compile cache then see no change).
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<()> {
    if std::fs::read(path).ok().as_deref() == Some(bytes) {
        return Ok(());
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}
