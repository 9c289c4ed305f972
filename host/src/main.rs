//! The `kmirror` binary: parses the command line, sets up logging, runs the command.

use clap::Parser;
use std::io::IsTerminal;
use std::process::ExitCode;

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KMIRROR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    // Plugins are compiled in child processes of this binary, killed at the compile timeout.
    if let Ok(exe) = std::env::current_exe() {
        kmirror::plugin::compile::compile_out_of_process(exe);
    }
    kmirror::cli::run(kmirror::cli::Cli::parse())
}
