//! `kmirror offsets translate | failover`: a group's checkpoints, and committing them to
//! the target group for a failover — refused when a partition the group committed on the
//! source, of a topic the flow mirrors, has no checkpoint (unless `--allow-partial`).

use super::fail;
use super::failover::{self, Coverage, Gate, Uncovered};
use super::table;
use crate::config::{LoadedConfig, ResolvedFlow};
use crate::flow::checkpoints::read_checkpoints;
use crate::flow::discovery::rules;
use crate::flow::group_sync::{self, SyncPlan};
use crate::flow::plugins::{FlowPlugins, InternalTopics};
use crate::flow::{OWN_GROUP_PREFIX, Routes};
use crate::formats::Checkpoint;
use crate::kafka::Cluster;
use crate::plugin::cache::CacheChoice;
use clap::{Args, Subcommand};
use rdkafka::consumer::BaseConsumer;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
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
    /// Refused (exit 1) when a partition the group committed on the source, of a topic
    /// the flow mirrors, has no checkpoint.
    Failover {
        #[command(flatten)]
        args: GroupArgs,
        /// Commit (refused while the target group has active members).
        #[arg(long)]
        apply: bool,
        /// Go ahead even when some of the group's partitions have no checkpoint (or the
        /// source cannot be read to check): commit the others and name the ones left out.
        #[arg(long)]
        allow_partial: bool,
    },
    /// Take over from MirrorMaker 2: show, per partition MM2 mirrored, the progress its
    /// offsets topic (`mm2-offsets.<source>.internal` on the target) gives; seed the
    /// flow's progress with it with --apply (refused while the flow has progress, unless
    /// --force).
    #[command(name = "import-mm2")]
    ImportMm2(super::import_mm2::ImportArgs),
}

struct Opened {
    flow: ResolvedFlow,
    plugins: FlowPlugins,
    internal: InternalTopics,
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
    let internal = plugins
        .internal_topics()
        .await
        .map_err(|e| (1, e.to_string()))?;
    let topic = internal.checkpoints.clone();
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
        flow,
        plugins,
        internal,
        target,
        checkpoints,
    })
}

/// Which of `group`'s partitions on the source, of topics the flow mirrors (decided with
/// the flow's plugins as discovery decides them), have no checkpoint.
async fn coverage(o: &Opened, group: &str) -> Coverage {
    match read_uncovered(o, group).await {
        Ok(missing) => Coverage::Checked(missing),
        Err(why) => Coverage::Unknown(why),
    }
}

async fn read_uncovered(o: &Opened, group: &str) -> Result<Vec<Uncovered>, String> {
    let source = Cluster::new(&o.flow.source).map_err(|e| e.to_string())?;
    let (listed, target) = tokio::join!(source.topics(), o.target.topics());
    let listed = listed.map_err(|e| e.to_string())?;
    let target = target.map_err(|e| e.to_string())?;
    let plugins = o.plugins.clone().reserving(&o.internal);
    let names: Vec<String> = listed.keys().cloned().collect();
    let decided = plugins
        .batch(&names, rules::decide_with)
        .await
        .map_err(|e| format!("deciding the source topics: {e}"))?;
    let routes = rules::plan(&listed, &target, &decided.decisions, &Routes::new()).mirror;
    // Topics a plugin call failed for might be mirrored: asked about too, so that the group
    // committing on one of them is reported rather than passed over.
    let undecided: BTreeSet<&str> = decided.failed.iter().map(|(t, _)| t.as_str()).collect();
    let partitions: Vec<(String, i32)> = listed
        .iter()
        .filter(|(t, _)| routes.contains_key(*t) || undecided.contains(t.as_str()))
        .flat_map(|(t, &n)| (0..n).map(move |p| (t.clone(), p)))
        .collect();
    let client = source.group_client(group).map_err(|e| e.to_string())?;
    let committed = source
        .committed(&client, group, &partitions)
        .await
        .map_err(|e| e.to_string())?;
    let failed: Vec<String> = decided
        .failed
        .iter()
        .filter(|(t, _)| committed.iter().any(|c| &c.topic == t))
        .map(|(t, e)| format!("{t} ({e})"))
        .collect();
    if !failed.is_empty() {
        return Err(format!(
            "the flow's plugins could not decide topics the group committed on: {}",
            failed.join(", ")
        ));
    }
    let accepted = !group.starts_with(OWN_GROUP_PREFIX)
        && !plugins
            .accept_groups(vec![group.to_string()])
            .await
            .map_err(|e| format!("the group filter: {e}"))?
            .is_empty();
    Ok(failover::uncovered(
        &committed,
        &routes,
        &o.checkpoints,
        &target,
        accepted,
    ))
}

/// Runs an offsets subcommand.
pub fn run(cmd: OffsetsCommand, cache: &CacheChoice) -> ExitCode {
    let (path, flow, group) = match &cmd {
        OffsetsCommand::Translate { args, .. } | OffsetsCommand::Failover { args, .. } => {
            (args.config.clone(), args.flow.clone(), args.group.clone())
        }
        OffsetsCommand::ImportMm2(args) => return super::import_mm2::run(args, cache),
    };
    let cfg = match super::load_config(&path, cache) {
        Ok(cfg) => cfg,
        Err(code) => return code,
    };
    let runtime = match super::runtime(1) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let opened = match open(cfg, &flow, &group).await {
            Ok(o) => o,
            Err((code, message)) => return fail(code, &message),
        };
        match cmd {
            OffsetsCommand::Translate { json, .. } => translate(&opened, json),
            OffsetsCommand::Failover {
                apply,
                allow_partial,
                ..
            } => failover(&opened, &group, apply, allow_partial).await,
            OffsetsCommand::ImportMm2(_) => ExitCode::SUCCESS,
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

async fn failover(o: &Opened, group: &str, apply: bool, allow_partial: bool) -> ExitCode {
    let coverage = coverage(o, group).await;
    let missing: &[Uncovered] = match &coverage {
        Coverage::Checked(missing) => missing,
        Coverage::Unknown(_) => &[],
    };
    if o.checkpoints.is_empty() {
        print_missing(missing);
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
    let mut rows = vec![header()];
    for c in &o.checkpoints {
        let committed = group_sync::committed_of(&sync.committed, c);
        let next = if group_sync::is_behind(committed, c) {
            c.downstream.to_string()
        } else {
            "(ahead, kept)".to_string()
        };
        rows.push(vec![
            c.topic.clone(),
            c.partition.to_string(),
            shown(committed),
            next,
            String::new(),
        ]);
    }
    rows.extend(missing_rows(o, &client, group, missing).await);
    print_rows(&rows);
    match failover::gate(&coverage, allow_partial) {
        Gate::Refuse => return fail(1, &failover::refusal(group, &coverage)),
        Gate::Partial => {
            if let Some(warning) = failover::partial_warning(group, &coverage) {
                eprintln!("warning: {warning}");
            }
        }
        Gate::Complete => {}
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

fn header() -> Vec<String> {
    [
        "target topic",
        "partition",
        "target committed",
        "would commit",
        "note",
    ]
    .map(String::from)
    .to_vec()
}

fn shown(offset: Option<i64>) -> String {
    offset.map_or("-".to_string(), |o| o.to_string())
}

fn print_rows(rows: &[Vec<String>]) {
    let widths = table::widths(rows);
    for row in rows {
        println!("{}", table::line(row, &widths));
    }
}

/// A row per partition without a checkpoint, with the target group's committed offset
/// there (read through `client`; `?` if it cannot be read).
async fn missing_rows(
    o: &Opened,
    client: &Arc<BaseConsumer>,
    group: &str,
    missing: &[Uncovered],
) -> Vec<Vec<String>> {
    if missing.is_empty() {
        return Vec::new();
    }
    let partitions: Vec<(String, i32)> = missing
        .iter()
        .map(|u| (u.target_topic.clone(), u.partition))
        .collect();
    let committed = o.target.committed(client, group, &partitions).await.ok();
    missing
        .iter()
        .map(|u| {
            let now = committed.as_ref().map_or("?".to_string(), |c| {
                let at = c
                    .iter()
                    .find(|c| c.topic == u.target_topic && c.partition == u.partition);
                shown(at.map(|c| c.offset))
            });
            missing_row(u, now)
        })
        .collect()
}

fn missing_row(u: &Uncovered, target_committed: String) -> Vec<String> {
    vec![
        u.target_topic.clone(),
        u.partition.to_string(),
        target_committed,
        "no checkpoint".to_string(),
        format!("source offset {}: {}", u.source_offset, u.reason),
    ]
}

/// The partitions without a checkpoint, when the group has none at all.
fn print_missing(missing: &[Uncovered]) {
    if missing.is_empty() {
        return;
    }
    let mut rows = vec![header()];
    rows.extend(missing.iter().map(|u| missing_row(u, "?".to_string())));
    print_rows(&rows);
}
