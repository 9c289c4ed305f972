//! `kmirror offsets translate | failover`: a group's checkpoints, and committing them to
//! the target group for a failover.

use crate::config::{self, LoadedConfig};
use crate::flow::checkpoint::{self, SyncPlan, TargetGroup};
use crate::flow::checkpointer::read_checkpoints;
use crate::formats::Checkpoint;
use crate::kafka::Cluster;
use crate::policy::RoleHandle;
use clap::{Args, Subcommand};
use std::collections::BTreeMap;
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
    let RoleHandle::ReplicationPolicy(policy) = &flow.replication_policy.handle else {
        return Err((2, "the flow has no replication policy".into()));
    };
    let topic = policy
        .checkpoints_topic(&flow.source.alias)
        .map_err(|e| (1, e.to_string()))?;
    let target = Cluster::new(&flow.target).map_err(|e| (1, e.to_string()))?;
    let all = read_checkpoints(&target, &topic, Duration::from_secs(30))
        .await
        .map_err(|e| (1, e.to_string()))?;
    let mut checkpoints: Vec<Checkpoint> = all.into_values().filter(|c| c.group == group).collect();
    checkpoints.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    Ok(Opened {
        target,
        checkpoints,
    })
}

/// Runs an offsets subcommand.
pub fn run(cmd: OffsetsCommand) -> ExitCode {
    let (path, flow, group) = match &cmd {
        OffsetsCommand::Translate { args, .. } | OffsetsCommand::Failover { args, .. } => {
            (args.config.clone(), args.flow.clone(), args.group.clone())
        }
    };
    let cfg = match config::load(&path) {
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
    let state = match o.target.group(group).await {
        Ok(g) => TargetGroup::from_state(
            g.as_ref().map(|g| g.state.as_str()),
            g.as_ref().map_or(0, |g| g.members),
        ),
        Err(e) => return fail(1, &e.to_string()),
    };
    let client = match o.target.group_client(group) {
        Ok(c) => c,
        Err(e) => return fail(1, &e.to_string()),
    };
    let partitions: Vec<(String, i32)> = o
        .checkpoints
        .iter()
        .map(|c| (c.topic.clone(), c.partition))
        .collect();
    let committed: BTreeMap<(String, i32), i64> =
        match o.target.committed(&client, group, &partitions).await {
            Ok(c) => c
                .into_iter()
                .map(|c| ((c.topic, c.partition), c.offset))
                .collect(),
            Err(e) => return fail(1, &e.to_string()),
        };
    let refs: Vec<&Checkpoint> = o.checkpoints.iter().collect();
    println!(
        "{:<40} {:>9} {:>16} {:>14}",
        "target topic", "partition", "target committed", "would commit"
    );
    for c in &o.checkpoints {
        let now = committed
            .get(&(c.topic.clone(), c.partition))
            .map_or("-".to_string(), |o| o.to_string());
        let next = if committed
            .get(&(c.topic.clone(), c.partition))
            .is_none_or(|t| *t < c.downstream)
        {
            c.downstream.to_string()
        } else {
            "(ahead, kept)".to_string()
        };
        println!(
            "{:<40} {:>9} {:>16} {:>14}",
            c.topic, c.partition, now, next
        );
    }
    match checkpoint::plan_group_sync(&state, &committed, &refs) {
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
        SyncPlan::Commit(offsets) if apply => match o.target.commit(&client, group, &offsets).await
        {
            Ok(()) => {
                println!(
                    "committed {} partition(s) for group {group} on the target",
                    offsets.len()
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(1, &e.to_string()),
        },
        SyncPlan::Commit(offsets) => {
            println!(
                "dry run: {} partition(s) would be committed; add --apply to commit",
                offsets.len()
            );
            ExitCode::SUCCESS
        }
    }
}
