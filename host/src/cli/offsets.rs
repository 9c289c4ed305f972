//! `kmirror offsets translate | failover`: a group's checkpoints, and committing them to
//! the target group for a failover.

use crate::config::{self, LoadedConfig};
use crate::flow::checkpoints::read_checkpoints;
use crate::flow::group_sync::{self, SyncPlan};
use crate::flow::plugins::FlowPlugins;
use crate::formats::Checkpoint;
use crate::kafka::Cluster;
use crate::plugin::cache::CacheChoice;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Which group of which flow.
#[derive(Debug, Args)]
pub struct GroupArgs {
    /// The configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// The flow, SOURCE->TARGET.
    #[arg(long)]
    flow: String,
    /// The consumer group.
    #[arg(long)]
    group: String,
}

/// Offset subcommands.
#[derive(Debug, Subcommand)]
pub enum OffsetsCommand {
    /// Print a group's translated offsets on the target, from the checkpoints topic
    /// (what MM2's RemoteClusterUtils.translateOffsets returns).
    Translate {
        #[command(flatten)]
        args: GroupArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show what a failover would commit to the target group; commit it with --apply.
    Failover {
        #[command(flatten)]
        args: GroupArgs,
        /// Commit (refused while the target group has active members).
        #[arg(long)]
        apply: bool,
    },
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(code)
}

struct Opened {
    target: Cluster,
    checkpoints: Vec<Checkpoint>,
}

async fn open(cfg: LoadedConfig, flow: &str, group: &str) -> Result<Opened, (u8, String)> {
    let names: Vec<String> = cfg.flows.iter().map(|f| f.name.clone()).collect();
    let Some(flow) = cfg.flows.into_iter().find(|f| f.name == flow) else {
        return Err((
            2,
            format!("no flow `{flow}`; flows are: {}", names.join(", ")),
        ));
    };
    let plugins = FlowPlugins::for_flow(&flow);
    let topic = plugins
        .internal_topics()
        .await
        .map_err(|e| (1, e.to_string()))?
        .checkpoints;
    let target = Cluster::new(&flow.target).map_err(|e| (1, e.to_string()))?;
    let read = read_checkpoints(&target, &topic, Duration::from_secs(30))
        .await
        .map_err(|e| (1, e.to_string()))?;
    if !read.complete {
        // A partial read could miss the newest checkpoint of a partition: refuse, rather
        // than fail a group over to older offsets or leave partitions out.
        return Err((
            1,
            format!(
                "could not read {topic} on cluster {} to its end within 30s; try again",
                target.alias
            ),
        ));
    }
    let mut checkpoints: Vec<Checkpoint> = read
        .last
        .into_values()
        .filter(|c| c.group == group)
        .collect();
    checkpoints.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    Ok(Opened {
        target,
        checkpoints,
    })
}

/// Runs an offsets subcommand.
pub fn run(cmd: OffsetsCommand, cache: &CacheChoice) -> ExitCode {
    let (path, flow, group) = match &cmd {
        OffsetsCommand::Translate { args, .. } | OffsetsCommand::Failover { args, .. } => {
            (args.config.clone(), args.flow.clone(), args.group.clone())
        }
    };
    let cfg = match config::load(&path, cache) {
        Ok(cfg) => cfg,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(1, &format!("cannot start the runtime: {e}")),
    };
    runtime.block_on(async move {
        let opened = match open(cfg, &flow, &group).await {
            Ok(o) => o,
            Err((code, message)) => return fail(code, &message),
        };
        match cmd {
            OffsetsCommand::Translate { json, .. } => translate(&opened, json),
            OffsetsCommand::Failover { apply, .. } => failover(&opened, &group, apply).await,
        }
    })
}

fn translate(o: &Opened, json: bool) -> ExitCode {
    if json {
        let rows: Vec<serde_json::Value> = o
            .checkpoints
            .iter()
            .map(|c| serde_json::json!({ "topic": c.topic, "partition": c.partition, "offset": c.downstream, "upstream_offset": c.upstream, "metadata": c.metadata }))
            .collect();
        println!("{}", serde_json::Value::Array(rows));
    } else if o.checkpoints.is_empty() {
        println!("no checkpoints for this group");
    } else {
        println!(
            "{:<40} {:>9} {:>14} {:>14}",
            "target topic", "partition", "target offset", "source offset"
        );
        for c in &o.checkpoints {
            println!(
                "{:<40} {:>9} {:>14} {:>14}",
                c.topic, c.partition, c.downstream, c.upstream
            );
        }
    }
    ExitCode::SUCCESS
}

async fn failover(o: &Opened, group: &str, apply: bool) -> ExitCode {
    if o.checkpoints.is_empty() {
        return fail(
            1,
            &format!("no checkpoints for group {group}: nothing to fail over"),
        );
    }
    let client = match o.target.group_client(group) {
        Ok(c) => c,
        Err(e) => return fail(1, &e.to_string()),
    };
    let sync = match group_sync::prepare(&o.target, &client, group, &o.checkpoints).await {
        Ok(s) => s,
        Err(e) => return fail(1, &e.to_string()),
    };
    println!(
        "{:<40} {:>9} {:>16} {:>14}",
        "target topic", "partition", "target committed", "would commit"
    );
    for c in &o.checkpoints {
        let committed = group_sync::committed_of(&sync.committed, c);
        let now = committed.map_or("-".to_string(), |o| o.to_string());
        let next = if group_sync::is_behind(committed, c) {
            c.downstream.to_string()
        } else {
            "(ahead, kept)".to_string()
        };
        println!(
            "{:<40} {:>9} {:>16} {:>14}",
            c.topic, c.partition, now, next
        );
    }
    let state = &sync.state;
    match &sync.plan {
        SyncPlan::SkipActive => fail(
            1,
            &format!(
                "target group {group} has active members ({state:?}); stop its consumers first"
            ),
        ),
        SyncPlan::UpToDate => {
            println!("target group {group} is up to date");
            ExitCode::SUCCESS
        }
        SyncPlan::Commit(_) if apply => {
            match group_sync::apply(&o.target, &client, group, &sync.plan).await {
                Ok(partitions) => {
                    println!("committed {partitions} partition(s) for group {group} on the target");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(1, &e.to_string()),
            }
        }
        SyncPlan::Commit(offsets) => {
            println!(
                "dry run: {} partition(s) would be committed; add --apply to commit",
                offsets.len()
            );
            ExitCode::SUCCESS
        }
    }
}
