//! The `kmirror` command line: argument parsing and dispatch. Each subcommand returns the
//! process exit code.

mod daemon;
mod offsets;
mod plugin;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// kmirror: mirror Kafka clusters, with naming and filtering policies as WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "kmirror", version, about)]
pub struct Cli {
    /// Directory of compiled plugins (default: $KMIRROR_CACHE_DIR, else
    /// $XDG_CACHE_HOME/kmirror/components, else ~/.cache/kmirror/components).
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
    /// Author, check and call plugins.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Translate consumer-group offsets and fail groups over to the target.
    #[command(subcommand)]
    Offsets(offsets::OffsetsCommand),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    let cache = if cli.no_cache {
        None
    } else {
        cli.cache_dir
            .map(kmirror_plugin_cache)
            .or_else(crate::plugin::cache::ComponentCache::default_location)
    };
    match cli.command {
        Command::Plugin(cmd) => plugin::run(cmd, cache),
        Command::Run { config } => daemon::run(&config),
        Command::Validate { config } => daemon::validate(&config),
        Command::Offsets(cmd) => offsets::run(cmd),
    }
}

fn kmirror_plugin_cache(dir: PathBuf) -> crate::plugin::cache::ComponentCache {
    crate::plugin::cache::ComponentCache::new(dir)
}
