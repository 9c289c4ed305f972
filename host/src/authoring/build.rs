//! `kmirror plugin build [DIR]`: turns a plugin project into a component, without kmirror's
//! repository.
//!
//! - A Rust crate (`Cargo.toml`): `cargo build --release` for `wasm32-wasip2` (a component
//!   as it is), or for `wasm32-unknown-unknown` then made a component in process with
//!   wit-component.
//! - A Python or JavaScript project (`kmirror-plugin.toml` naming its language, WIT world
//!   and source): `componentize-py` or `componentize-js` against the project's WIT. Only
//!   the installed tools are run: looked up in the absolute directories of `PATH`, never in
//!   the project (its `node_modules/.bin` is the project's code, not a toolchain). The
//!   manifest's name must be a plain file name and its paths must stay in the project.
//!
//! The component is written to `DIR/<name>.wasm` unless `--out` says otherwise. `DIR` is
//! made absolute first, so every path handed to a tool names what it means.

use serde::Deserialize;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The manifest of a Python or JavaScript plugin project.
pub const MANIFEST: &str = "kmirror-plugin.toml";

/// `kmirror-plugin.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The plugin's name: the component is `<name>.wasm`. 1 to 64 ASCII letters, digits,
    /// `-` and `_`, not starting with `-`.
    pub name: String,
    /// `python` or `javascript`.
    pub language: String,
    /// The WIT world it implements (`replication-policy-plugin`, `topic-filter-plugin`, ...).
    pub world: String,
    /// The source file (`app.py`, `plugin.js`), relative to the project and inside it.
    pub source: PathBuf,
    /// The WIT directory, relative to the project and inside it (default `wit`).
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
    /// The project directory could not be made absolute.
    #[error("cannot resolve the project directory {dir}: {error}")]
    ProjectDir {
        /// The directory as given.
        dir: PathBuf,
        /// Why.
        error: std::io::Error,
    },
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
    let search = std::env::var_os("PATH").unwrap_or_default();
    build_with(dir, target, out, &search)
}

/// [`build`], with the Python and JavaScript tools looked up in `search` (a `PATH`).
fn build_with(
    dir: &Path,
    target: RustTarget,
    out: Option<&Path>,
    search: &OsStr,
) -> Result<PathBuf, BuildError> {
    let dir = &std::path::absolute(dir).map_err(|error| BuildError::ProjectDir {
        dir: dir.to_path_buf(),
        error,
    })?;
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
    let problems = manifest_problems(&manifest);
    if !problems.is_empty() {
        return Err(bad(problems.join("; ")));
    }
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
        "python" => build_python(dir, &manifest, &out, search)?,
        "javascript" | "js" => build_javascript(dir, &manifest, &out, search)?,
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

/// The longest plugin name.
const MAX_NAME_LEN: usize = 64;

/// What is wrong with `m`'s name and paths: the name becomes a file name beside the
/// project's files, the paths are read by the tools and must stay in the project.
fn manifest_problems(m: &Manifest) -> Vec<String> {
    let mut problems = Vec::new();
    let name = &m.name;
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.is_empty()
        || name.len() > MAX_NAME_LEN
        || name.starts_with('-')
        || !name.chars().all(allowed)
    {
        problems.push(format!(
            "name `{name}` is not a plugin name: use 1 to {MAX_NAME_LEN} ASCII letters, digits, `-` and `_`, not starting with `-`"
        ));
    }
    // `source` and `wit` are only read (a shared WIT directory beside the project is
    // common); only the output, named after `name`, is written.
    problems
}

/// The installed `tool`: the first executable file of that name in an absolute directory
/// of `search`. Relative entries (`.`, `node_modules/.bin`) are skipped: the tool runs in
/// the project, where they would name the project's own files.
fn installed(tool: &str, search: &OsStr, hint: &'static str) -> Result<PathBuf, BuildError> {
    std::env::split_paths(search)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(tool))
        .find(|p| executable(p))
        .ok_or_else(|| BuildError::MissingTool {
            tool: tool.to_string(),
            hint,
        })
}

#[cfg(unix)]
fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn executable(path: &Path) -> bool {
    path.is_file()
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

/// How to install componentize-py.
const PY_HINT: &str = "install it with `pip install componentize-py==0.25.1`";
/// How to install componentize-js.
const JS_HINT: &str = "install it with `npm install -g @bytecodealliance/componentize-js@0.23.0`";
/// How to install componentize-js, for a project that has its own copy.
const JS_LOCAL_HINT: &str = "the project's node_modules/.bin/componentize-js is not run (it is the project's code, not a toolchain); install it globally with `npm install -g @bytecodealliance/componentize-js@0.23.0`";

fn build_python(dir: &Path, m: &Manifest, out: &Path, search: &OsStr) -> Result<(), BuildError> {
    let tool = installed("componentize-py", search, PY_HINT)?;
    let module = m
        .source
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("app")
        .to_string();
    let mut cmd = Command::new(tool);
    cmd.current_dir(dir)
        .arg("-d")
        .arg(dir.join(&m.wit))
        .arg("-w")
        .arg(&m.world)
        .arg("componentize")
        .arg(&module)
        .arg("-p")
        .arg(dir)
        .arg("-o")
        .arg(out);
    // componentize-py imports the module to snapshot it, which leaves a __pycache__ in the
    // project: removed again unless the project had one.
    let cache = dir.join("__pycache__");
    let had_cache = cache.exists();
    let built = run(cmd, "componentize-py", PY_HINT);
    if !had_cache {
        let _ = std::fs::remove_dir_all(&cache);
    }
    built
}

fn build_javascript(
    dir: &Path,
    m: &Manifest,
    out: &Path,
    search: &OsStr,
) -> Result<(), BuildError> {
    let hint = if dir.join("node_modules/.bin/componentize-js").exists() {
        JS_LOCAL_HINT
    } else {
        JS_HINT
    };
    let tool = installed("componentize-js", search, hint)?;
    let mut cmd = Command::new(tool);
    // No wasi:http (the host does not grant it); stdio stays, so what the plugin prints is
    // kept for its errors.
    cmd.current_dir(dir)
        .arg(dir.join(&m.source))
        .arg("--wit")
        .arg(dir.join(&m.wit))
        .arg("-n")
        .arg(&m.world)
        .args(["-d", "http", "fetch-event"])
        .arg("-o")
        .arg(out);
    run(cmd, "componentize-js", hint)
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
mod tests;
