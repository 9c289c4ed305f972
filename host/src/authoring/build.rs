//! `kmirror plugin build [DIR]`: turns a plugin project into a component, without kmirror's
//! repository.
//!
//! - A Rust crate (`Cargo.toml`): `cargo build --release` for `wasm32-wasip2` (a component
//!   as it is), or for `wasm32-unknown-unknown` then made a component in process with
//!   wit-component.
//! - A Python or JavaScript project (`kmirror-plugin.toml` naming its language, WIT world
//!   and source): `componentize-py` or `componentize-js` against the project's WIT.
//!
//! The component is written to `DIR/<name>.wasm` unless `--out` says otherwise.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The manifest of a Python or JavaScript plugin project.
pub const MANIFEST: &str = "kmirror-plugin.toml";

/// `kmirror-plugin.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The plugin's name: the component is `<name>.wasm`.
    pub name: String,
    /// `python` or `javascript`.
    pub language: String,
    /// The WIT world it implements (`replication-policy-plugin`, `topic-filter-plugin`, ...).
    pub world: String,
    /// The source file (`app.py`, `plugin.js`), relative to the project.
    pub source: PathBuf,
    /// The WIT directory, relative to the project (default `wit`).
    #[serde(default = "default_wit")]
    pub wit: PathBuf,
}

fn default_wit() -> PathBuf {
    PathBuf::from("wit")
}

/// The Rust target a Rust plugin is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RustTarget {
    /// `wasm32-wasip2`: a component as built; a panic's message is kept.
    #[value(name = "wasm32-wasip2")]
    Wasip2,
    /// `wasm32-unknown-unknown`, made a component with wit-component: no WASI imports.
    #[value(name = "wasm32-unknown-unknown")]
    Unknown,
}

impl RustTarget {
    fn triple(self) -> &'static str {
        match self {
            RustTarget::Wasip2 => "wasm32-wasip2",
            RustTarget::Unknown => "wasm32-unknown-unknown",
        }
    }
}

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Neither a Cargo.toml nor a kmirror-plugin.toml.
    #[error(
        "{0} is not a plugin project: no Cargo.toml (Rust) or kmirror-plugin.toml (Python, JavaScript); `kmirror plugin new` makes one"
    )]
    NotAProject(PathBuf),
    /// A manifest could not be read.
    #[error("{path}: {message}")]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A tool is not installed.
    #[error("`{tool}` is not installed or not on PATH; {hint}")]
    MissingTool {
        /// The tool.
        tool: String,
        /// How to install it.
        hint: &'static str,
    },
    /// A tool ran and failed.
    #[error("{tool} failed ({status}){details}")]
    Tool {
        /// The tool.
        tool: String,
        /// Its exit status.
        status: String,
        /// What it said, if captured.
        details: String,
    },
    /// The build made no component, or it could not be written.
    #[error("{0}")]
    Output(String),
}

/// Builds the project in `dir`; returns the component's path.
pub fn build(dir: &Path, target: RustTarget, out: Option<&Path>) -> Result<PathBuf, BuildError> {
    if dir.join("Cargo.toml").is_file() {
        return build_rust(dir, target, out);
    }
    let path = dir.join(MANIFEST);
    if !path.is_file() {
        return Err(BuildError::NotAProject(dir.to_path_buf()));
    }
    let bad = |message: String| BuildError::Manifest {
        path: path.clone(),
        message,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
    let manifest: Manifest = toml::from_str(&text).map_err(|e| bad(e.message().to_string()))?;
    let out = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| dir.join(format!("{}.wasm", manifest.name)));
    let out = std::path::absolute(&out).unwrap_or(out);
    if !dir.join(&manifest.source).is_file() {
        return Err(bad(format!(
            "source `{}` not found",
            manifest.source.display()
        )));
    }
    if !dir.join(&manifest.wit).exists() {
        return Err(bad(format!("wit `{}` not found", manifest.wit.display())));
    }
    match manifest.language.as_str() {
        "python" => build_python(dir, &manifest, &out)?,
        "javascript" | "js" => build_javascript(dir, &manifest, &out)?,
        other => {
            return Err(bad(format!(
                "unknown language `{other}`: python or javascript (a Rust plugin is a Cargo crate)"
            )));
        }
    }
    if !out.is_file() {
        return Err(BuildError::Output(format!(
            "the build wrote no {}",
            out.display()
        )));
    }
    Ok(out)
}

/// Runs `cmd` (its output goes to the terminal); an error names `tool`.
fn run(mut cmd: Command, tool: &str, hint: &'static str) -> Result<(), BuildError> {
    let status = cmd.status().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => BuildError::MissingTool {
            tool: tool.to_string(),
            hint,
        },
        _ => BuildError::Tool {
            tool: tool.to_string(),
            status: e.to_string(),
            details: String::new(),
        },
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(BuildError::Tool {
            tool: tool.to_string(),
            status: status.to_string(),
            details: String::new(),
        })
    }
}

fn build_python(dir: &Path, m: &Manifest, out: &Path) -> Result<(), BuildError> {
    let module = m
        .source
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("app")
        .to_string();
    let mut cmd = Command::new("componentize-py");
    cmd.current_dir(dir)
        .arg("-d")
        .arg(&m.wit)
        .arg("-w")
        .arg(&m.world)
        .arg("componentize")
        .arg(&module)
        .arg("-p")
        .arg(".")
        .arg("-o")
        .arg(out);
    // componentize-py imports the module to snapshot it, which leaves a __pycache__ in the
    // project: removed again unless the project had one.
    let cache = dir.join("__pycache__");
    let had_cache = cache.exists();
    let built = run(
        cmd,
        "componentize-py",
        "install it with `pip install componentize-py==0.25.1`",
    );
    if !had_cache {
        let _ = std::fs::remove_dir_all(&cache);
    }
    built
}

fn build_javascript(dir: &Path, m: &Manifest, out: &Path) -> Result<(), BuildError> {
    let local = dir.join("node_modules/.bin/componentize-js");
    let tool = if local.is_file() {
        local
    } else {
        PathBuf::from("componentize-js")
    };
    let mut cmd = Command::new(&tool);
    // No wasi:http (the host does not grant it); stdio stays, so what the plugin prints is
    // kept for its errors.
    cmd.current_dir(dir)
        .arg(&m.source)
        .arg("--wit")
        .arg(&m.wit)
        .arg("-n")
        .arg(&m.world)
        .args(["-d", "http", "fetch-event"])
        .arg("-o")
        .arg(out);
    run(
        cmd,
        "componentize-js",
        "install it with `npm install -g @bytecodealliance/componentize-js@0.23.0` (or into the project's node_modules)",
    )
}

#[derive(Deserialize)]
struct Package {
    package: PackageName,
}

#[derive(Deserialize)]
struct PackageName {
    name: String,
}

fn build_rust(dir: &Path, target: RustTarget, out: Option<&Path>) -> Result<PathBuf, BuildError> {
    let manifest = dir.join("Cargo.toml");
    let bad = |message: String| BuildError::Manifest {
        path: manifest.clone(),
        message,
    };
    let text = std::fs::read_to_string(&manifest).map_err(|e| bad(e.to_string()))?;
    let name = toml::from_str::<Package>(&text)
        .map_err(|e| bad(format!("not a package: {}", e.message())))?
        .package
        .name;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--message-format=json-render-diagnostics",
        ])
        .args(["--target", target.triple()])
        .arg("--manifest-path")
        .arg(&manifest)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| BuildError::MissingTool {
            tool: format!("cargo ({e})"),
            hint: "install Rust with rustup",
        })?;
    if !output.status.success() {
        let hint = format!(
            "; if the target is missing: `rustup target add {}`",
            target.triple()
        );
        return Err(BuildError::Tool {
            tool: "cargo build".into(),
            status: output.status.to_string(),
            details: hint,
        });
    }
    let built =
        wasm_artifact(&String::from_utf8_lossy(&output.stdout), &manifest).ok_or_else(|| {
            BuildError::Output(format!(
                "cargo built no cdylib .wasm for {name}: is `crate-type = [\"cdylib\"]` set?"
            ))
        })?;
    let bytes = std::fs::read(&built)
        .map_err(|e| BuildError::Output(format!("{}: {e}", built.display())))?;
    let component = match target {
        RustTarget::Wasip2 => bytes,
        RustTarget::Unknown => wit_component::ComponentEncoder::default()
            .module(&bytes)
            .and_then(|e| e.validate(true).encode())
            .map_err(|e| {
                BuildError::Output(format!(
                    "cannot make {} a component: {e:#}",
                    built.display()
                ))
            })?,
    };
    let out = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| dir.join(format!("{name}.wasm")));
    std::fs::write(&out, component)
        .map_err(|e| BuildError::Output(format!("{}: {e}", out.display())))?;
    Ok(out)
}

/// The `.wasm` file of the cdylib cargo built for the package at `manifest`, from cargo's
/// JSON messages.
fn wasm_artifact(messages: &str, manifest: &Path) -> Option<PathBuf> {
    let manifest = manifest.canonicalize().ok()?;
    messages
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| {
            m["manifest_path"]
                .as_str()
                .and_then(|p| Path::new(p).canonicalize().ok())
                .is_some_and(|p| p == manifest)
        })
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "cdylib"))
        })
        .flat_map(|m| {
            m["filenames"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|f| f.as_str().map(PathBuf::from))
                .collect::<Vec<_>>()
        })
        .find(|f| f.extension().is_some_and(|e| e == "wasm"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cdylib_wasm_is_found_among_cargo_messages() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("Cargo.toml");
        std::fs::write(&manifest, "").unwrap();
        let m = manifest.display();
        let messages = format!(
            "{{\"reason\":\"compiler-artifact\",\"manifest_path\":\"/elsewhere/Cargo.toml\",\"target\":{{\"kind\":[\"cdylib\"]}},\"filenames\":[\"/x/dep.wasm\"]}}\n\
             not json\n\
             {{\"reason\":\"compiler-artifact\",\"manifest_path\":\"{m}\",\"target\":{{\"kind\":[\"cdylib\",\"rlib\"]}},\"filenames\":[\"/t/p.rlib\",\"/t/p.wasm\"]}}\n\
             {{\"reason\":\"build-finished\",\"success\":true}}"
        );
        assert_eq!(
            wasm_artifact(&messages, &manifest),
            Some(PathBuf::from("/t/p.wasm"))
        );
        assert_eq!(wasm_artifact("", &manifest), None);
    }

    #[test]
    fn projects_are_recognised_or_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let e = build(dir.path(), RustTarget::Wasip2, None).unwrap_err();
        assert!(matches!(e, BuildError::NotAProject(_)), "{e}");
        std::fs::write(
            dir.path().join(MANIFEST),
            "name = \"x\"\nlanguage = \"cobol\"\nworld = \"w\"\nsource = \"x.cob\"\n",
        )
        .unwrap();
        let e = build(dir.path(), RustTarget::Wasip2, None).unwrap_err();
        assert!(e.to_string().contains("source `x.cob` not found"), "{e}");
        std::fs::write(dir.path().join("x.cob"), "").unwrap();
        std::fs::create_dir(dir.path().join("wit")).unwrap();
        let e = build(dir.path(), RustTarget::Wasip2, None).unwrap_err();
        assert!(e.to_string().contains("unknown language `cobol`"), "{e}");
        std::fs::write(
            dir.path().join(MANIFEST),
            "name = \"x\"\nlang = \"python\"\n",
        )
        .unwrap();
        let e = build(dir.path(), RustTarget::Wasip2, None).unwrap_err();
        assert!(e.to_string().contains("unknown field `lang`"), "{e}");
    }
}
