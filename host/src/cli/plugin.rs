//! `kmirror plugin check | eval | test | new | build | builtins`.

use super::plugin_test;
use crate::authoring::build::RustTarget;
use crate::authoring::scaffold::Lang;
use crate::authoring::{build, conformance, eval, scaffold};
use crate::plugin::cache::{CacheOutcome, ComponentCache};
use crate::plugin::{Limits, Plugin, PluginHost, PluginSource, builtin};
use crate::policy::{Config, PluginError, Role};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Exit code for a failed check or call.
const FAILED: u8 = 1;
/// Exit code for a usage or load error.
const USAGE: u8 = 2;

/// Plugin subcommands.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Load a component, list its roles and run the conformance suite.
    Check {
        /// The component file (or builtin:NAME).
        file: String,
        #[command(flatten)]
        opts: CallOpts,
    },
    /// Call one function of a plugin and print the result as JSON.
    Eval {
        /// The component file, or builtin:NAME.
        plugin: String,
        /// The WIT function name, e.g. format-remote-topic.
        function: String,
        /// The function's arguments.
        args: Vec<String>,
        #[command(flatten)]
        opts: CallOpts,
    },
    /// Evaluate one role of a plugin over a file of names and print a table (or JSON): a
    /// policy review before the plugin goes live.
    Test {
        /// The component file, or builtin:NAME.
        plugin: String,
        /// A file of names, one per line (`#` comments and blank lines skipped); `-` for stdin.
        #[arg(long, value_name = "FILE")]
        input: PathBuf,
        /// The role to evaluate (default: the plugin's only role).
        #[arg(long, value_parser = parse_role)]
        role: Option<Role>,
        /// The source cluster alias a replication policy names topics from.
        #[arg(long, default_value = "primary")]
        source_alias: String,
        /// The target cluster alias (for cycle detection).
        #[arg(long, default_value = "backup")]
        target_alias: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        opts: CallOpts,
    },
    /// Scaffold a plugin project (Rust, Python or JavaScript) that `plugin build` turns into
    /// a component passing `plugin check`.
    New {
        /// The plugin name (lowercase, `-` and `_` allowed).
        name: String,
        /// The role it plays.
        #[arg(long, value_parser = parse_role)]
        role: Role,
        /// The language it is written in.
        #[arg(long, value_enum, default_value = "rust")]
        lang: Lang,
        /// Where to create it (default: the current directory).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Rust only: depend on this SDK crate instead of the one vendored into the project.
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Build a plugin project into a component (`<name>.wasm`) and run the conformance suite
    /// on it.
    Build {
        /// The project directory (default: the current directory).
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Where to write the component (default: DIR/<name>.wasm).
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// Rust only: the target to build for.
        #[arg(long, value_enum, default_value = "wasm32-wasip2")]
        target: RustTarget,
        /// Skip the conformance suite.
        #[arg(long)]
        no_check: bool,
        #[command(flatten)]
        opts: CallOpts,
    },
    /// Compile components into the cache ahead of time — for a deployment image, whose
    /// cache directory is then named by KMIRROR_PRECOMPILED_DIR (read-only) — so a daemon's
    /// start or reload loads them in milliseconds.
    Compile {
        /// The component files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        opts: CallOpts,
    },
    /// List the native built-ins.
    Builtins,
}

/// Options of commands that call a plugin.
#[derive(Debug, Args)]
pub struct CallOpts {
    /// A configuration entry for the plugin's role, KEY=VALUE; repeatable.
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_pair)]
    config: Vec<(String, String)>,
    /// Per-call deadline, e.g. 500ms or 2s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    call_timeout: Option<Duration>,
    /// Memory cap per plugin instance, in MiB.
    #[arg(long, value_name = "MIB")]
    memory_limit_mib: Option<usize>,
    /// The longest compiling the component may take, e.g. 30s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    compile_timeout: Option<Duration>,
}

fn parse_pair(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got `{s}`"))
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::from_wit_name(s).ok_or_else(|| {
        let names: Vec<&str> = Role::ALL.iter().map(|r| r.wit_name()).collect();
        format!("unknown role `{s}`; roles are: {}", names.join(", "))
    })
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("invalid duration `{s}`: {e}"))
}

fn limits(opts: &CallOpts) -> Limits {
    let defaults = Limits::default();
    Limits {
        call_deadline: opts.call_timeout.unwrap_or(defaults.call_deadline),
        memory_bytes: opts
            .memory_limit_mib
            .map_or(defaults.memory_bytes, |m| m << 20),
        compile_timeout: opts.compile_timeout.unwrap_or(defaults.compile_timeout),
        ..defaults
    }
}

fn open(
    source: &str,
    opts: &CallOpts,
    cache: Option<ComponentCache>,
) -> Result<(Plugin, Config), String> {
    let host = PluginHost::new(limits(opts), cache).map_err(|e| e.to_string())?;
    let plugin = Plugin::open(&host, &PluginSource::parse(source)).map_err(|e| e.to_string())?;
    Ok((plugin, opts.config.iter().cloned().collect()))
}

/// Runs a plugin subcommand.
pub fn run(cmd: PluginCommand, cache: Option<ComponentCache>) -> ExitCode {
    match cmd {
        PluginCommand::Check { file, opts } => check(&file, &opts, cache),
        PluginCommand::Eval {
            plugin,
            function,
            args,
            opts,
        } => eval_cmd(&plugin, &function, &args, &opts, cache),
        PluginCommand::Test {
            plugin,
            input,
            role,
            source_alias,
            target_alias,
            json,
            opts,
        } => test_cmd(
            &plugin,
            &input,
            role,
            (&source_alias, &target_alias),
            json,
            &opts,
            cache,
        ),
        PluginCommand::New {
            name,
            role,
            lang,
            dir,
            sdk,
        } => match scaffold::scaffold(&name, role, lang, &dir, sdk.as_deref()) {
            Ok(path) => {
                println!(
                    "created {} ({role} plugin, {})",
                    path.display(),
                    lang.name()
                );
                println!(
                    "build and check it:  kmirror plugin build {}",
                    path.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(USAGE, &e.to_string()),
        },
        PluginCommand::Build {
            dir,
            out,
            target,
            no_check,
            opts,
        } => match build::build(&dir, target, out.as_deref()) {
            Ok(component) => {
                let size = std::fs::metadata(&component).map_or(0, |m| m.len());
                println!("built {} ({size} bytes)", component.display());
                // Compiled into the cache the daemon reads, so its start or reload does not
                // compile it again; then checked (loaded from there).
                if cache.is_some() {
                    let compiled = compile(std::slice::from_ref(&component), &opts, cache.clone());
                    if compiled != ExitCode::SUCCESS || no_check {
                        return compiled;
                    }
                }
                if no_check {
                    ExitCode::SUCCESS
                } else {
                    check(&component.display().to_string(), &opts, cache)
                }
            }
            Err(e) => fail(FAILED, &e.to_string()),
        },
        PluginCommand::Compile { files, opts } => compile(&files, &opts, cache),
        PluginCommand::Builtins => {
            for b in &builtin::BUILTINS {
                println!("{:<32} {:<24} {}", b.name, b.role.to_string(), b.summary);
            }
            ExitCode::SUCCESS
        }
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(code)
}

/// Compiles `files` into `cache` (its own directory: a precompiled one is neither written
/// nor counted); exit 2 if there is no cache, or a file cannot be loaded or stored.
fn compile(files: &[PathBuf], opts: &CallOpts, cache: Option<ComponentCache>) -> ExitCode {
    let Some(cache) = cache.map(|c| ComponentCache::new(c.dir())) else {
        return fail(
            USAGE,
            "no cache to compile into: --no-cache was given (name one with --cache-dir DIR or KMIRROR_CACHE_DIR)",
        );
    };
    let host = match PluginHost::new(limits(opts), Some(cache.clone())) {
        Ok(host) => host,
        Err(e) => return fail(USAGE, &e.to_string()),
    };
    let mut code = ExitCode::SUCCESS;
    for file in files {
        let started = std::time::Instant::now();
        let loaded = std::fs::read(file)
            .map_err(|source| PluginError::Read {
                path: file.clone(),
                source,
            })
            .and_then(|bytes| {
                let component = crate::plugin::PluginComponent::from_bytes(&host, file, &bytes)?;
                Ok((component, ComponentCache::key(host.engine(), &bytes)))
            });
        let (component, key) = match loaded {
            Ok(loaded) => loaded,
            Err(e) => {
                eprintln!("error: {e}");
                code = ExitCode::from(USAGE);
                continue;
            }
        };
        let entry = cache.entry_path(&key);
        let roles: Vec<String> = component.roles().iter().map(|r| r.to_string()).collect();
        let how = match component.cache_outcome() {
            CacheOutcome::Hit => "already compiled".to_string(),
            CacheOutcome::Compiled => format!("compiled in {:.2?}", started.elapsed()),
        };
        if !entry.is_file() {
            eprintln!(
                "error: {}: compiled, but the cache {} could not be written (see the warning above)",
                file.display(),
                cache.dir().display()
            );
            code = ExitCode::from(USAGE);
            continue;
        }
        println!(
            "{}: {how} ({}) -> {}",
            file.display(),
            roles.join(", "),
            entry.display()
        );
    }
    code
}

fn check(file: &str, opts: &CallOpts, cache: Option<ComponentCache>) -> ExitCode {
    let (plugin, config) = match open(file, opts, cache) {
        Ok(opened) => opened,
        Err(e) => return fail(USAGE, &e),
    };
    match conformance::check(&plugin, &config) {
        Ok(report) => {
            println!("plugin: {}", plugin.name());
            print!("{}", report.render());
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(FAILED)
            }
        }
        Err(e) => fail(USAGE, &e.to_string()),
    }
}

fn eval_cmd(
    source: &str,
    function: &str,
    args: &[String],
    opts: &CallOpts,
    cache: Option<ComponentCache>,
) -> ExitCode {
    let (plugin, config) = match open(source, opts, cache) {
        Ok(opened) => opened,
        Err(e) => return fail(USAGE, &e),
    };
    match eval::eval(&plugin, function, args, &config) {
        Ok(value) => {
            println!("{value}");
            ExitCode::SUCCESS
        }
        Err(e) if e.is_usage() => fail(USAGE, &e.to_string()),
        Err(eval::EvalError::Plugin(e @ PluginError::Config { .. })) => fail(USAGE, &e.to_string()),
        Err(e) => fail(FAILED, &e.to_string()),
    }
}

fn test_cmd(
    source: &str,
    input: &std::path::Path,
    role: Option<Role>,
    (source_alias, target_alias): (&str, &str),
    json: bool,
    opts: &CallOpts,
    cache: Option<ComponentCache>,
) -> ExitCode {
    let text = if input == std::path::Path::new("-") {
        let mut s = String::new();
        match std::io::Read::read_to_string(&mut std::io::stdin(), &mut s) {
            Ok(_) => s,
            Err(e) => return fail(USAGE, &format!("stdin: {e}")),
        }
    } else {
        match std::fs::read_to_string(input) {
            Ok(s) => s,
            Err(e) => return fail(USAGE, &format!("{}: {e}", input.display())),
        }
    };
    let (plugin, config) = match open(source, opts, cache) {
        Ok(opened) => opened,
        Err(e) => return fail(USAGE, &e),
    };
    let roles = plugin.roles();
    let role = match (role, roles.as_slice()) {
        (Some(r), _) if roles.contains(&r) => r,
        (Some(r), _) => {
            return fail(
                USAGE,
                &format!("{} does not export the {r} role", plugin.name()),
            );
        }
        (None, [only]) => *only,
        (None, _) => {
            let list: Vec<&str> = roles.iter().map(|r| r.wit_name()).collect();
            return fail(
                USAGE,
                &format!(
                    "{} exports several roles ({}): pick one with --role",
                    plugin.name(),
                    list.join(", ")
                ),
            );
        }
    };
    let names = plugin_test::names(&text);
    match plugin_test::evaluate(&plugin, role, &config, &names, source_alias, target_alias) {
        Ok((rows, failed)) => {
            if json {
                println!("{}", serde_json::Value::Array(rows));
            } else {
                print!("{}", plugin_test::table(&rows));
            }
            if failed {
                ExitCode::from(FAILED)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => fail(USAGE, &e.to_string()),
    }
}
