//! `kmirror plan --config FILE [--json] [--plugin-dir DIR | --candidate FILE]`: what every
//! flow would mirror, decided by the same rules and plugins as discovery, against both
//! clusters as they are now — read-only (listing topics and groups, reading committed
//! offsets, describing topic ACLs; nothing is created, committed or produced anywhere),
//! with the topic ACLs its ACL sync would create (and delete). With a candidate plugin
//! directory or configuration, also which topics a reload to it would rename, drop or add:
//! the review before a hot reload.

mod read;
mod render;
mod rows;
#[cfg(test)]
mod tests;

use crate::config::{self, LoadedConfig};
use crate::plugin::cache::CacheChoice;
use clap::Args;
use read::plan_flow;
use render::render;
use rows::FlowPlan;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

/// `kmirror plan` arguments.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Only this flow (SOURCE->TARGET).
    #[arg(long)]
    flow: Option<String>,
    /// Also plan with every plugin read from DIR instead of the configured plugin
    /// directory, and show what a reload to it would change.
    #[arg(long, value_name = "DIR", conflicts_with = "candidate")]
    plugin_dir: Option<PathBuf>,
    /// Also plan with this second configuration file, and show what a reload to it would
    /// change.
    #[arg(long, value_name = "FILE")]
    candidate: Option<PathBuf>,
}

/// Flows only in one of the two configurations.
#[derive(Debug, Default, Serialize)]
struct FlowChanges {
    added: Vec<String>,
    removed: Vec<String>,
}

/// Runs `kmirror plan`.
pub fn run(args: PlanArgs, cache: &CacheChoice) -> ExitCode {
    let load = |path: &PathBuf| {
        config::load(path, cache).map_err(|errors| {
            eprintln!("{errors}");
            ExitCode::from(2)
        })
    };
    let current = match load(&args.config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let candidate: Option<LoadedConfig> = match (&args.plugin_dir, &args.candidate) {
        (Some(dir), _) => match config::load_with_plugins_dir(&args.config, cache, dir) {
            Ok(c) => Some(c),
            Err(errors) => {
                eprintln!("with plugins from {}:\n{errors}", dir.display());
                return ExitCode::from(2);
            }
        },
        (None, Some(file)) => match load(file) {
            Ok(c) => Some(c),
            Err(code) => return code,
        },
        (None, None) => None,
    };
    if let Some(name) = &args.flow
        && !current.flows.iter().any(|f| &f.name == name)
    {
        let names: Vec<&str> = current.flows.iter().map(|f| f.name.as_str()).collect();
        eprintln!("error: no flow `{name}`; flows are: {}", names.join(", "));
        return ExitCode::from(2);
    }
    let flows = candidate.as_ref().map(|c| FlowChanges {
        added: c
            .flows
            .iter()
            .filter(|f| !current.flows.iter().any(|g| g.name == f.name))
            .map(|f| f.name.clone())
            .collect(),
        removed: current
            .flows
            .iter()
            .filter(|f| !c.flows.iter().any(|g| g.name == f.name))
            .map(|f| f.name.clone())
            .collect(),
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let plans: Vec<FlowPlan> = runtime.block_on(async {
        let mut plans = Vec::new();
        for flow in current
            .flows
            .iter()
            .filter(|f| args.flow.as_ref().is_none_or(|n| &f.name == n))
        {
            let other = candidate
                .as_ref()
                .and_then(|c| c.flows.iter().find(|f| f.name == flow.name));
            plans.push(plan_flow(flow, other).await);
        }
        plans
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    let failed = plans.iter().any(|p| !p.errors.is_empty());
    if args.json {
        let mut doc = serde_json::json!({ "flows": plans });
        if let Some(flows) = &flows {
            doc["candidate_flows"] = serde_json::to_value(flows).unwrap_or_default();
        }
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        for p in &plans {
            print!("{}", render(p));
        }
        if let Some(flows) = &flows {
            for f in &flows.added {
                println!("the candidate adds flow {f}");
            }
            for f in &flows.removed {
                println!("the candidate removes flow {f}");
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
