//! The `kmirror` command line: argument parsing and dispatch. Each subcommand returns the
//! process exit code.

mod cutover;
mod cutover_read;
mod daemon;
mod failback;
mod failover;
mod import_mm2;
mod import_mm2_config;
mod offsets;
mod plan;
mod plugin;
mod plugin_test;
mod status;
mod status_render;
mod table;
mod verify;

use crate::plugin::cache::CacheChoice;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// kmirror: mirror Kafka clusters, with naming and filtering policies as WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "kmirror", version, about)]
pub struct Cli {
    /// Directory of compiled plugins (default: the configuration's `[plugins] cache_dir`,
    /// else $KMIRROR_CACHE_DIR, else $XDG_CACHE_HOME/kmirror/components, else
    /// ~/.cache/kmirror/components).
    #[arg(long, global = true, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile plugins without reading or writing the cache.
    #[arg(long, global = true)]
    pub no_cache: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run every flow of a configuration until SIGINT/SIGTERM.
    Run {
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Check a configuration (and load its plugins) without connecting to any cluster.
    Validate {
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Show what every flow would mirror, read-only: per source topic its target name,
    /// partitions on both sides and the action; the groups checkpointed; with a candidate
    /// plugin directory or configuration, what a reload to it would rename, drop or add.
    Plan(plan::PlanArgs),
    /// Author, check and call plugins.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Translate consumer-group offsets and fail groups over to the target.
    #[command(subcommand)]
    Offsets(offsets::OffsetsCommand),
    /// Translate a MirrorMaker 2 dedicated-mode configuration (`mm2.properties`) into a
    /// kmirror configuration whose flows take over MM2's progress; every key that does not
    /// translate is named with the reason. Exit 0 when all did, 1 when some did not (the
    /// configuration is still written), 2 when nothing could be.
    #[command(name = "import-mm2-config")]
    ImportMm2Config(import_mm2_config::ImportConfigArgs),
    /// Show a running daemon's status (from its `[status]` endpoint) as tables: per flow its
    /// health, members and partitions, then the plugins. Exit 0 when every flow is ok, 1
    /// when any is degraded, 2 when the daemon cannot be reached.
    Status(status::StatusArgs),
    /// Check that the target holds what the source holds: read a flow's source partitions
    /// and their target partitions, pair the records through the flow's exact offset map
    /// (its offset syncs) and compare key, value, headers, timestamp and order. Exit 0 when
    /// nothing differs, 1 when something does, 2 when the check cannot run.
    Verify(verify::VerifyArgs),
    /// Fail a flow's topics and consumer groups over to the target, as one resumable
    /// command: a readiness report per group, a wait until the topics are mirrored to the
    /// source's end (or --now), the topics stopped in the running daemon, and every group's
    /// translated offsets committed on the target. --dry-run reports only (exit 1 when a
    /// group is not ready). Exit 0 when everything chosen failed over, 1 when something did
    /// not (run it again to go on), 2 when it cannot run.
    Failover(cutover::FailoverArgs),
    /// Bring a flow's failed-over topics home to its source without copying their history
    /// again: the source's divergent tail (records that never reached the target) copied to
    /// a quarantine topic and listed, the reverse flow (which the daemon runs) made to
    /// mirror the target's records from where the failover left them, then that flow's
    /// failover: consumer groups land after the tail. Resumable; --dry-run prints the plan.
    Failback(failback::FailbackArgs),
    /// Internal: compiles the component on stdin to stdout (kmirror's compiler process).
    #[command(name = "__compile-plugin", hide = true)]
    CompilePlugin,
}

/// The configuration at `path`; on errors, prints them and gives exit code 2.
pub(crate) fn load_config(
    path: &std::path::Path,
    cache: &CacheChoice,
) -> Result<crate::config::LoadedConfig, ExitCode> {
    crate::config::load(path, cache).map_err(|errors| {
        eprintln!("{errors}");
        ExitCode::from(2)
    })
}

/// The flow named `name` of the configuration at `path`; on errors (the file, or no such
/// flow: the flows there are named), prints them and gives exit code 2.
pub(crate) fn load_flow(
    path: &std::path::Path,
    name: &str,
    cache: &CacheChoice,
) -> Result<crate::config::ResolvedFlow, ExitCode> {
    let cfg = load_config(path, cache)?;
    let names: Vec<String> = cfg.flows.iter().map(|f| f.name.clone()).collect();
    cfg.flows
        .into_iter()
        .find(|f| f.name == name)
        .ok_or_else(|| {
            fail(
                2,
                &format!("no flow `{name}`; flows are: {}", names.join(", ")),
            )
        })
}

/// A runtime for a command's cluster calls; when none can start, the error is printed and
/// `code` given.
pub(crate) fn runtime(code: u8) -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(code, &format!("cannot start the runtime: {e}")))
}

/// Prints `message` as an error and gives exit code `code`.
pub(crate) fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(code)
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    let cache = match (cli.no_cache, cli.cache_dir) {
        (true, _) => CacheChoice::Disabled,
        (false, Some(dir)) => CacheChoice::Dir(dir),
        (false, None) => CacheChoice::FromConfig,
    };
    match cli.command {
        Command::Plugin(cmd) => plugin::run(cmd, cache.resolve(None)),
        Command::Run { config } => daemon::run(&config, &cache),
        Command::Validate { config } => daemon::validate(&config, &cache),
        Command::Offsets(cmd) => offsets::run(cmd, &cache),
        Command::Plan(args) => plan::run(args, &cache),
        Command::Status(args) => status::run(args, &cache),
        Command::Verify(args) => verify::run(args, &cache),
        Command::Failover(args) => cutover::run(args, &cache),
        Command::Failback(args) => failback::run(args, &cache),
        Command::ImportMm2Config(args) => import_mm2_config::run(&args),
        Command::CompilePlugin => crate::plugin::compile::compile_stdin_to_stdout(),
    }
}
