//! `kmirror plugin check | eval | new | builtins`.

use crate::authoring::{conformance, eval, scaffold};
use crate::plugin::cache::ComponentCache;
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
    /// Scaffold a plugin crate that builds to a component and passes `plugin check`.
    New {
        /// The crate name (lowercase, `-` and `_` allowed).
        name: String,
        /// The role it plays.
        #[arg(long, value_parser = parse_role)]
        role: Role,
        /// Where to create it (default: the current directory).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// The kmirror plugin SDK crate to depend on (default: the one in kmirror's sources).
        #[arg(long)]
        sdk: Option<PathBuf>,
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

fn open(
    source: &str,
    opts: &CallOpts,
    cache: Option<ComponentCache>,
) -> Result<(Plugin, Config), String> {
    let defaults = Limits::default();
    let limits = Limits {
        call_deadline: opts.call_timeout.unwrap_or(defaults.call_deadline),
        memory_bytes: opts
            .memory_limit_mib
            .map_or(defaults.memory_bytes, |m| m << 20),
        compile_timeout: opts.compile_timeout.unwrap_or(defaults.compile_timeout),
        ..defaults
    };
    let host = PluginHost::new(limits, cache).map_err(|e| e.to_string())?;
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
        PluginCommand::New {
            name,
            role,
            dir,
            sdk,
        } => match scaffold::scaffold(&name, role, &dir, sdk.as_deref()) {
            Ok(path) => {
                println!("created {} ({role} plugin)", path.display());
                println!(
                    "build it:  cd {} && cargo build --release --target wasm32-wasip2",
                    path.display()
                );
                println!(
                    "check it:  kmirror plugin check {}/target/wasm32-wasip2/release/{}.wasm",
                    path.display(),
                    name.replace('-', "_")
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(USAGE, &e.to_string()),
        },
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
