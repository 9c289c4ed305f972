//! `kmirror failover`: a flow's cutover to the target as one resumable command.
//!
//! 1. A readiness report per consumer group (`--dry-run` stops here; exit 1 when a group
//!    is not ready).
//! 2. Unless `--now`, a wait until the chosen topics are mirrored to the source's end
//!    (bounded by `--wait`; nothing is changed when it runs out).
//! 3. The topics are stopped: a record per topic on the flow's failover control topic,
//!    which every running instance follows (discovery leaves the topic out at its next
//!    pass, `/status` lists it under `failed_over`); then a wait of two discovery intervals
//!    and a flush interval for the instances to let go of them and store their progress.
//! 4. Each chosen group's offsets, translated afresh through the exact offset map, are
//!    written as checkpoints and committed to the group on the target (never rewinding a
//!    partition the target group is ahead on; a group active on the target is refused and
//!    named), and the group is recorded as failed over.
//!
//! Running it again after an interruption goes on where it stopped: topics already stopped
//! are not waited for, groups already committed are up to date.

use super::cutover_read::{self as read, Opened, Tail, Tp};
use super::{fail, table, verify};
use crate::config::ResolvedFlow;
use crate::flow::cutover::control::{self, ControlState, GroupFailedOver, TopicFailedOver};
use crate::flow::cutover::control_topic;
use crate::flow::cutover::readiness::{self, GroupReadiness, Placement, ReadAccess};
use crate::flow::discovery::rules::{self, Decision};
use crate::flow::group_sync::{self, SyncPlan};
use crate::flow::offset_syncs::store::OffsetSyncStore;
use crate::flow::plugins::FlowPlugins;
use crate::flow::telemetry::now_ms;
use crate::flow::{CHECKPOINTS_SINGLE, Route, Routes};
use crate::kafka::Cluster;
use crate::kafka::internal::InternalWriter;
use crate::plugin::cache::CacheChoice;
use clap::Args;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long reading an internal topic to its end may take.
pub(super) const READ: Duration = Duration::from_secs(30);

/// `kmirror failover`'s arguments.
#[derive(Debug, Args)]
pub struct FailoverArgs {
    /// The configuration file.
    #[arg(long, short)]
    pub(super) config: PathBuf,
    /// The flow, SOURCE->TARGET.
    #[arg(long)]
    pub(super) flow: String,
    /// Only these source topics (comma-separated; default: every topic the flow mirrors).
    #[arg(long, value_delimiter = ',')]
    pub(super) topics: Vec<String>,
    /// Only these consumer groups (comma-separated; default: every group the flow's group
    /// filter accepts that committed an offset on a chosen topic).
    #[arg(long, value_delimiter = ',')]
    pub(super) groups: Vec<String>,
    /// Print the readiness report and change nothing (exit 1 when a group is not ready).
    #[arg(long)]
    pub(super) dry_run: bool,
    /// Do not wait for the mirror to reach the source's end: stop at once, naming the
    /// records not mirrored per partition.
    #[arg(long)]
    pub(super) now: bool,
    /// How long to wait for the mirror to reach the source's end (e.g. 30s, 10m).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    pub(super) wait: Duration,
    /// Print JSON.
    #[arg(long)]
    pub(super) json: bool,
}

/// Runs `kmirror failover`.
pub fn run(args: FailoverArgs, cache: &CacheChoice) -> ExitCode {
    let flow = match super::load_flow(&args.config, &args.flow, cache) {
        Ok(flow) => flow,
        Err(code) => return code,
    };
    let runtime = match super::runtime(2) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        match failover(flow, &args).await {
            Ok(code) => code,
            Err((code, message)) => fail(code, &message),
        }
    })
}

/// `kmirror status --groups`: the readiness report of every flow of the configuration
/// (or of `only`), changing nothing. Exit 0 when every group is ready, 1 when one is not, 2
/// when a flow cannot be read.
pub fn readiness(
    config: &std::path::Path,
    only: Option<&str>,
    json: bool,
    cache: &CacheChoice,
) -> ExitCode {
    let cfg = match super::load_config(config, cache) {
        Ok(cfg) => cfg,
        Err(code) => return code,
    };
    let flows: Vec<ResolvedFlow> = cfg
        .flows
        .into_iter()
        .filter(|f| only.is_none_or(|name| f.name == name))
        .collect();
    if flows.is_empty() {
        return fail(2, &format!("no flow `{}`", only.unwrap_or("")));
    }
    let runtime = match super::runtime(2) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let mut ready = true;
        for flow in flows {
            let name = flow.name.clone();
            let report = async {
                let o = open(flow, &[]).await?;
                let state = read_control(&o).await?;
                let report = assess(&o, &[], &state).await?;
                if !json {
                    println!("flow {name}:");
                }
                show(&o, &report, json);
                Ok::<_, Failed>(report.groups.iter().all(GroupReadiness::ready))
            };
            match report.await {
                Ok(r) => ready &= r,
                Err((code, message)) => return fail(code, &format!("flow {name}: {message}")),
            }
        }
        if ready {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        }
    })
}

pub(super) type Failed = (u8, String);

fn cannot(e: impl std::fmt::Display) -> Failed {
    (2, e.to_string())
}

pub(super) async fn failover(flow: ResolvedFlow, args: &FailoverArgs) -> Result<ExitCode, Failed> {
    let o = open(flow, &args.topics).await?;
    let state = read_control(&o).await?;
    let report = assess(&o, &args.groups, &state).await?;
    show(&o, &report, args.json);
    if args.dry_run {
        let ready = report.groups.iter().all(GroupReadiness::ready);
        return Ok(if ready {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let source_readable = report.source_error.is_none();
    let to_stop: Vec<String> = o
        .routes
        .keys()
        .filter(|t| !state.topics.contains_key(*t))
        .cloned()
        .collect();
    if !to_stop.is_empty() {
        if !args.now {
            if let Some(why) = &report.source_error {
                return Err((
                    1,
                    format!(
                        "the source cannot be read ({why}), so the mirror cannot be seen to reach its end: nothing was changed; fail over with --now to stop where the mirror is"
                    ),
                ));
            }
            wait_mirrored(&o, &to_stop, args.wait, args.json).await?;
        }
        // The tails as they are now, for the record of each topic stopped.
        let now = assess(&o, &args.groups, &state).await?;
        stop(&o, &to_stop, &now).await?;
    }
    // Also when a run killed after the stop is resumed: the instances get their time.
    let state = read_control(&o).await?;
    settle(&o, &state, args.json).await;
    if source_readable {
        still(&o, &state).await?;
    }
    // Translated afresh: the syncs and progress the instances stored while they let go.
    let report = assess(&o, &args.groups, &state).await?;
    if let (true, Some(why)) = (source_readable, &report.source_error) {
        return Err((
            1,
            format!(
                "the source could be read before the topics were stopped, and now cannot ({why}): no group was committed; run again"
            ),
        ));
    }
    let outcomes = commit_groups(&o, &report).await;
    Ok(finish(&o, &report, &state, &outcomes, args.json))
}

pub(super) async fn read_control(o: &Opened) -> Result<ControlState, Failed> {
    Ok(control::read(&o.target, &o.control_topic, READ)
        .await
        .map_err(|e| (2, format!("reading the failover control topic: {e}")))?
        .unwrap_or_default())
}

/// The flow and the chosen topics' routes: as discovery decides them, or — the source
/// cannot be listed (it is gone: a disaster) — from the target's topics back to the source
/// names the replication policy gives and the flow's plugins route there.
pub(super) async fn open(flow: ResolvedFlow, topics: &[String]) -> Result<Opened, Failed> {
    let source = Cluster::new(&flow.source).map_err(cannot)?;
    let target = Cluster::new(&flow.target).map_err(cannot)?;
    let plugins = FlowPlugins::for_flow(&flow);
    let internal = plugins.internal_topics().await.map_err(cannot)?;
    let plugins = plugins.reserving(&internal);
    let mut routes = match verify::mirrored(&flow, &source, &target).await {
        Ok((routes, _)) => routes,
        Err(why) => {
            eprintln!(
                "warning: cannot decide what the flow mirrors from the source ({why}); deciding it from the target's topics"
            );
            routes_from_target(&plugins, &target)
                .await
                .map_err(cannot)?
        }
    };
    for t in topics {
        if !routes.contains_key(t) {
            return Err((2, format!("flow {} does not mirror topic `{t}`", flow.name)));
        }
    }
    if !topics.is_empty() {
        routes.retain(|t, _| topics.contains(t));
    }
    let control_topic = control_topic(&flow.source.alias);
    Ok(Opened {
        flow,
        source,
        target,
        routes,
        internal,
        plugins,
        control_topic,
    })
}

fn upstreams(
    roles: &crate::policy::FlowRoles,
    _: &crate::flow::plugins::FlowNames,
    topics: &[String],
) -> Result<Vec<(String, Option<String>)>, crate::policy::PluginError> {
    topics
        .iter()
        .map(|t| Ok((t.clone(), roles.replication_policy.upstream_topic(t)?)))
        .collect()
}

async fn routes_from_target(plugins: &FlowPlugins, target: &Cluster) -> Result<Routes, String> {
    let listed = target.topics().await.map_err(|e| e.to_string())?;
    let names: Vec<String> = listed.keys().cloned().collect();
    let up = plugins
        .batch(&names, upstreams)
        .await
        .map_err(|e| e.to_string())?;
    let sources: Vec<String> = up.iter().filter_map(|(_, s)| s.clone()).collect();
    let decided = plugins
        .batch(&sources, rules::decide_with)
        .await
        .map_err(|e| e.to_string())?;
    Ok(up
        .into_iter()
        .filter_map(|(target_topic, source)| {
            let source = source?;
            match decided.decisions.get(&source) {
                Some(Decision::Mirror(t)) if *t == target_topic => {
                    let route = Route::new(target_topic.clone(), listed[&target_topic]);
                    Some((source, route))
                }
                _ => None,
            }
        })
        .collect())
}

/// One chosen partition as the report shows it.
#[derive(Debug, serde::Serialize)]
struct PartitionRow {
    topic: String,
    target_topic: String,
    partition: i32,
    source_end: Option<i64>,
    mirrored: Option<i64>,
    unmirrored: Option<i64>,
    unmirrored_seconds: Option<i64>,
    failed_over: bool,
}

/// What the failover knows at one point.
#[derive(Debug, serde::Serialize)]
struct Report {
    /// Why the source cannot be read (the groups' offsets then come from their last
    /// checkpoints, and the tails are unknown).
    source_error: Option<String>,
    /// Why the offset syncs cannot be read (offsets are then placed by nothing).
    syncs_error: Option<String>,
    partitions: Vec<PartitionRow>,
    /// Worst first.
    groups: Vec<GroupReadiness>,
    #[serde(skip)]
    metadata: BTreeMap<String, BTreeMap<Tp, String>>,
}

async fn assess(o: &Opened, groups: &[String], state: &ControlState) -> Result<Report, Failed> {
    let syncs_on = verify::syncs_cluster(&o.flow, &o.source, &o.target);
    let (store, syncs_error) = match verify::read_syncs(syncs_on, &o.internal.offset_syncs).await {
        Ok(s) => (s, None),
        Err(e) => (OffsetSyncStore::new(), Some(e)),
    };
    let mut source_error = None;
    let positions = match read::positions(o).await {
        Ok(p) => p,
        Err(e) => {
            source_error = Some(e);
            BTreeMap::new()
        }
    };
    let offsets = match &source_error {
        None => match read::source_offsets(o, groups).await {
            Ok(offsets) => offsets,
            Err(e) => {
                source_error = Some(e);
                read::checkpointed_offsets(o, groups)
                    .await
                    .map_err(cannot)?
            }
        },
        Some(_) => read::checkpointed_offsets(o, groups)
            .await
            .map_err(cannot)?,
    };
    let mut ranges: BTreeSet<(Tp, i64, i64)> = BTreeSet::new();
    for (tp, p) in &positions {
        if let (Some(m), Some(e)) = (p.mirrored, p.end) {
            ranges.insert((tp.clone(), m, e));
        }
    }
    for committed in offsets.values() {
        for c in committed {
            let tp = (c.topic.clone(), c.partition);
            let p = positions.get(&tp).copied().unwrap_or_default();
            if let (Some(from), Some(e)) = (read::tail_start(c.offset, &p), p.end) {
                ranges.insert((tp, from, e));
            }
        }
    }
    let ranges: Vec<_> = ranges.into_iter().collect();
    let tails = if source_error.is_none() {
        read::tails(read::tail_reader(&o.source).as_ref(), &ranges).await
    } else {
        BTreeMap::new()
    };
    let target_ends = target_ends(o).await;
    let (source_acls, target_acls) = tokio::join!(read::acls(&o.source), read::acls(&o.target));
    let facts = read::Facts {
        opened: o,
        store: &store,
        positions: &positions,
        tails: &tails,
        target_ends: &target_ends,
        source_acls: &source_acls,
        target_acls: &target_acls,
        control: state,
        now_ms: now_ms(),
    };
    let mut out = Vec::new();
    let mut metadata = BTreeMap::new();
    for (group, committed) in &offsets {
        let active = match o.target.group(group).await {
            Ok(Some(g)) if g.members > 0 => Some(g.state),
            Ok(_) => None,
            Err(e) => Some(format!("unknown: {e}")),
        };
        out.push(read::group_readiness(&facts, group, committed, active));
        metadata.insert(
            group.clone(),
            committed
                .iter()
                .map(|c| ((c.topic.clone(), c.partition), c.metadata.clone()))
                .collect(),
        );
    }
    readiness::worst_first(&mut out);
    let partitions = o
        .partitions()
        .into_iter()
        .map(|tp| {
            let p = positions.get(&tp).copied().unwrap_or_default();
            let tail = p
                .mirrored
                .and_then(|m| tails.get(&(tp.clone(), m)))
                .copied()
                .or_else(|| {
                    readiness::tail(p.mirrored?, p.mirrored, p.end).map(|records| Tail {
                        records,
                        oldest_ms: None,
                    })
                });
            PartitionRow {
                target_topic: o.routes[&tp.0].target.clone(),
                failed_over: state.topics.contains_key(&tp.0),
                topic: tp.0,
                partition: tp.1,
                source_end: p.end,
                mirrored: p.mirrored,
                unmirrored: tail.map(|t| t.records),
                unmirrored_seconds: tail
                    .and_then(|t| t.oldest_ms)
                    .map(|at| ((now_ms() - at) / 1000).max(0)),
            }
        })
        .collect();
    Ok(Report {
        source_error,
        syncs_error,
        partitions,
        groups: out,
        metadata,
    })
}

/// The chosen target partitions' ends (none where they cannot be read).
async fn target_ends(o: &Opened) -> BTreeMap<Tp, i64> {
    let on_target: Vec<Tp> = o
        .partitions()
        .into_iter()
        .filter_map(|(t, p)| Some((o.routes.get(&t)?.target.clone(), p)))
        .collect();
    let client = match o.target.group_client("kmirror.failover") {
        Ok(c) => c,
        Err(_) => return BTreeMap::new(),
    };
    match o.target.end_offsets(&client, &on_target).await {
        Ok(ends) => ends.into_iter().collect(),
        Err(_) => BTreeMap::new(),
    }
}

fn shown(v: Option<i64>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

fn print_rows(rows: &[Vec<String>]) {
    let widths = table::widths(rows);
    for row in rows {
        println!("{}", table::line(row, &widths));
    }
}

fn placement_cells(p: &Placement) -> [String; 3] {
    match p {
        Placement::Exact { offset } => [offset.to_string(), "exact".into(), "0".into()],
        Placement::Approximate { offset, rereads } => {
            [offset.to_string(), "approximate".into(), shown(*rereads)]
        }
        Placement::Unplaced => ["-".into(), "no offset sync".into(), "-".into()],
    }
}

fn access_cell(a: &ReadAccess) -> String {
    match a {
        ReadAccess::Granted => "yes".into(),
        ReadAccess::Missing { principals } => format!("NO for {}", principals.join(", ")),
        ReadAccess::NoSourceAcls => "-".into(),
        ReadAccess::Unknown { .. } => "?".into(),
    }
}

fn show(o: &Opened, r: &Report, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({ "flow": o.flow.name, "readiness": r })
        );
        return;
    }
    if let Some(why) = &r.source_error {
        println!(
            "the source cannot be read: {why}\n(group offsets are their last checkpoints'; the unmirrored tails are unknown)"
        );
    }
    if let Some(why) = &r.syncs_error {
        println!("the offset syncs cannot be read: {why}");
    }
    let mut rows = vec![
        [
            "topic",
            "target topic",
            "partition",
            "source end",
            "mirrored",
            "unmirrored",
            "oldest (s)",
            "state",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for p in &r.partitions {
        rows.push(vec![
            p.topic.clone(),
            p.target_topic.clone(),
            p.partition.to_string(),
            shown(p.source_end),
            shown(p.mirrored),
            shown(p.unmirrored),
            shown(p.unmirrored_seconds),
            if p.failed_over {
                "failed over"
            } else {
                "mirroring"
            }
            .into(),
        ]);
    }
    print_rows(&rows);
    println!();
    if r.groups.is_empty() {
        println!("no consumer group committed an offset on these topics");
        return;
    }
    let mut rows = vec![
        [
            "group",
            "target topic",
            "partition",
            "source offset",
            "target offset",
            "placed",
            "re-reads",
            "unmirrored",
            "oldest (s)",
            "READ",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for g in &r.groups {
        for p in &g.partitions {
            let [offset, placed, rereads] = placement_cells(&p.placement);
            rows.push(vec![
                g.group.clone(),
                p.target_topic.clone(),
                p.partition.to_string(),
                p.source_offset.to_string(),
                offset,
                placed,
                rereads,
                shown(p.tail),
                shown(p.tail_seconds),
                access_cell(&p.access),
            ]);
        }
    }
    print_rows(&rows);
    println!();
    for g in &r.groups {
        let blockers = g.blockers();
        let done = if g.failed_over {
            " (failed over earlier)"
        } else {
            ""
        };
        if blockers.is_empty() {
            println!("group {}: ready{done}", g.group);
        } else {
            println!(
                "group {}: NOT ready{done}: {}",
                g.group,
                blockers.join("; ")
            );
        }
    }
}

/// Waits until every partition of `topics` is mirrored to the source's end: its stored
/// progress reached the end, or what lies between holds no record (transaction markers,
/// aborted records). Shows progress on standard error.
async fn wait_mirrored(
    o: &Opened,
    topics: &[String],
    wait: Duration,
    json: bool,
) -> Result<(), Failed> {
    use std::io::IsTerminal;
    let terminal = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut shown = started;
    let reader = read::tail_reader(&o.source);
    loop {
        let positions = read::positions(o).await.map_err(|e| (1, e))?;
        let behind: Vec<(Tp, i64, i64)> = positions
            .into_iter()
            .filter(|(tp, _)| topics.contains(&tp.0))
            .filter_map(|(tp, p)| match (p.mirrored, p.end) {
                (Some(m), Some(e)) if m < e => Some((tp, m, e)),
                (None, Some(e)) if e > 0 => Some((tp, 0, e)),
                _ => None,
            })
            .collect();
        // What is left may be markers only: read it.
        let tails = read::tails(reader.as_ref(), &behind).await;
        let left: Vec<(&Tp, i64)> = behind
            .iter()
            .map(|(tp, m, _)| (tp, tails.get(&(tp.clone(), *m)).map_or(1, |t| t.records)))
            .filter(|(_, records)| *records > 0)
            .collect();
        if left.is_empty() {
            if terminal && !json {
                eprintln!();
            }
            eprintln!("the mirror reached the source's end of every chosen partition");
            return Ok(());
        }
        let records: i64 = left.iter().map(|(_, r)| r).sum();
        let line = format!(
            "waiting for the mirror: {records} record(s) in {} partition(s) left ({}s of {}s)",
            left.len(),
            started.elapsed().as_secs(),
            wait.as_secs()
        );
        if terminal {
            eprint!("\r{line}   ");
        } else if shown.elapsed() >= Duration::from_secs(5) || shown == started {
            eprintln!("{line}");
            shown = Instant::now();
        }
        if started.elapsed() >= wait {
            let named: Vec<String> = left
                .iter()
                .take(10)
                .map(|((t, p), r)| format!("{t}[{p}]: {r}"))
                .collect();
            return Err((
                1,
                format!(
                    "the mirror did not reach the source's end within {}s (stop the source's producers first?); nothing was changed. Behind: {}{}. Run again to go on waiting, or with --now to stop where the mirror is",
                    wait.as_secs(),
                    named.join(", "),
                    if left.len() > 10 { ", ..." } else { "" }
                ),
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Writes a control record per topic of `topics`: the flow stops mirroring it.
async fn stop(o: &Opened, topics: &[String], report: &Report) -> Result<(), Failed> {
    let created = o
        .target
        .ensure_internal_topic(
            &o.control_topic,
            o.flow.settings.replication_factor,
            Some(control::CONTROL_SINGLE),
        )
        .await
        .map_err(|e| (1, e.to_string()))?;
    created.map_err(|e| (1, e.to_string()))?;
    let writer =
        InternalWriter::new(&o.target, &o.control_topic).map_err(|e| (1, e.to_string()))?;
    for topic in topics {
        let unmirrored: BTreeMap<i32, i64> = report
            .partitions
            .iter()
            .filter(|p| p.topic == *topic)
            .filter_map(|p| Some((p.partition, p.unmirrored?)))
            .collect();
        let entry = TopicFailedOver {
            target_topic: o.routes[topic].target.clone(),
            at_ms: now_ms(),
            unmirrored,
        };
        let value = serde_json::to_vec(&entry).map_err(|e| (1, e.to_string()))?;
        writer
            .send(control::topic_key(topic).as_bytes(), &value, None)
            .await
            .map_err(|e| (1, e.to_string()))?;
        let tail: i64 = entry.unmirrored.values().sum();
        println!(
            "stopped mirroring {topic} (-> {}): {tail} record(s) not mirrored",
            entry.target_topic
        );
    }
    Ok(())
}

/// Waits until the running instances had time to see the stop of every chosen topic (at
/// their next discovery pass, one interval at most after it was written; two for slack)
/// and to store their progress: two discovery intervals and a flush interval after the
/// newest stop record, also when this run did not write it.
async fn settle(o: &Opened, state: &ControlState, json: bool) {
    let s = &o.flow.settings;
    let needed = s.refresh_topics_interval * 2 + stored_every(o) + Duration::from_secs(1);
    let newest = o
        .routes
        .keys()
        .filter_map(|t| state.topics.get(t))
        .map(|f| f.at_ms)
        .max();
    let Some(newest) = newest else {
        return;
    };
    let since = Duration::from_millis((now_ms() - newest).max(0) as u64);
    let Some(left) = needed.checked_sub(since) else {
        return;
    };
    if !json {
        println!(
            "waiting {:.0}s for running instances to stop mirroring them (two discovery passes and a flush)",
            left.as_secs_f64()
        );
    }
    tokio::time::sleep(left).await;
}

/// How often a running instance stores progress at most: every flush interval, and in
/// exactly-once mode at each transaction's commit.
fn stored_every(o: &Opened) -> Duration {
    let s = &o.flow.settings;
    let txn = s.exactly_once.as_ref().map(|e| e.transaction_interval);
    s.offset_flush_interval.max(txn.unwrap_or_default())
}

/// Checks that no instance still mirrors a stopped topic: its stored progress does not move
/// over a flush interval (an instance that cannot read the control topic, or of a version
/// without failover, would go on). An error names the partitions that moved.
async fn still(o: &Opened, state: &ControlState) -> Result<(), Failed> {
    let stopped = |tp: &Tp| state.topics.contains_key(&tp.0);
    let before = read::positions(o).await.map_err(|e| (1, e))?;
    tokio::time::sleep(stored_every(o) + Duration::from_millis(500)).await;
    let after = read::positions(o).await.map_err(|e| (1, e))?;
    let moved: Vec<String> = after
        .iter()
        .filter(|(tp, p)| stopped(tp) && before.get(*tp).map(|b| b.mirrored) != Some(p.mirrored))
        .map(|((t, p), _)| format!("{t}[{p}]"))
        .collect();
    if moved.is_empty() {
        return Ok(());
    }
    Err((
        1,
        format!(
            "the flow's progress still moves on topics failed over ({}): an instance goes on mirroring them (one that cannot read {} on cluster {}, or of a version without failover?); no group was committed; stop it and run again",
            moved.join(", "),
            o.control_topic,
            o.target.alias
        ),
    ))
}

/// What became of one group.
#[derive(Debug, serde::Serialize)]
struct Outcome {
    group: String,
    committed: usize,
    /// Why it was not (entirely) failed over.
    not_done: Option<String>,
}

async fn commit_groups(o: &Opened, r: &Report) -> Vec<Outcome> {
    let mut out = Vec::new();
    let writer = match ensure_checkpoints(o).await {
        Ok(w) => Some(w),
        Err(e) => {
            eprintln!("warning: the final checkpoints are not written: {e}");
            None
        }
    };
    let control = InternalWriter::new(&o.target, &o.control_topic).ok();
    for g in &r.groups {
        out.push(commit_group(o, r, g, writer.as_ref(), control.as_ref()).await);
    }
    out
}

async fn ensure_checkpoints(o: &Opened) -> Result<InternalWriter, String> {
    let topic = &o.internal.checkpoints;
    o.target
        .ensure_internal_topic(
            topic,
            o.flow.settings.replication_factor,
            Some(CHECKPOINTS_SINGLE),
        )
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    InternalWriter::new(&o.target, topic).map_err(|e| e.to_string())
}

async fn commit_group(
    o: &Opened,
    r: &Report,
    g: &GroupReadiness,
    checkpoints: Option<&InternalWriter>,
    control: Option<&InternalWriter>,
) -> Outcome {
    let outcome = |committed, not_done: Option<String>| Outcome {
        group: g.group.clone(),
        committed,
        not_done,
    };
    if g.failed_over {
        // Done by an earlier run: its offsets on the target are its consumers' now (or
        // theirs to come), never replaced by the source's stale ones.
        return outcome(0, None);
    }
    if let Some(state) = &g.active_on_target {
        return outcome(
            0,
            Some(format!(
                "active on the target ({state}): stop its consumers there and run again"
            )),
        );
    }
    if g.partitions.is_empty() {
        return outcome(
            0,
            Some(
                "it committed no offset on the chosen topics on the source (is the name right?)"
                    .into(),
            ),
        );
    }
    let empty = BTreeMap::new();
    let metadata = r.metadata.get(&g.group).unwrap_or(&empty);
    let cps = read::checkpoints_of(g, metadata);
    let unplaced: Vec<String> = g
        .partitions
        .iter()
        .filter(|p| p.placement == Placement::Unplaced)
        .map(|p| format!("{}[{}]", p.target_topic, p.partition))
        .collect();
    let client = match o.target.group_client(&g.group) {
        Ok(c) => c,
        Err(e) => return outcome(0, Some(e.to_string())),
    };
    let sync = match group_sync::prepare(&o.target, &client, &g.group, &cps).await {
        Ok(s) => s,
        Err(e) => return outcome(0, Some(e.to_string())),
    };
    let committed = match &sync.plan {
        SyncPlan::SkipActive => {
            return outcome(
                0,
                Some("active on the target: stop its consumers there and run again".into()),
            );
        }
        SyncPlan::UpToDate => 0,
        SyncPlan::Commit(_) => {
            match group_sync::apply(&o.target, &client, &g.group, &sync.plan).await {
                Ok(n) => n,
                Err(e) => return outcome(0, Some(e.to_string())),
            }
        }
    };
    let mut not_done: Vec<String> = Vec::new();
    if !unplaced.is_empty() {
        not_done.push(format!(
            "no offset sync to translate {} with: not committed there (its consumers would start at auto.offset.reset)",
            unplaced.join(", ")
        ));
    }
    match checkpoints {
        Some(w) => {
            for c in &cps {
                if let Err(e) = w.send(&c.key(), &c.value(), None).await {
                    not_done.push(format!("its final checkpoints were not written: {e}"));
                    break;
                }
            }
        }
        None => not_done.push("its final checkpoints were not written".into()),
    }
    if not_done.is_empty() {
        let entry = GroupFailedOver {
            at_ms: now_ms(),
            partitions: cps.len(),
        };
        let written = match (control, serde_json::to_vec(&entry)) {
            (Some(w), Ok(value)) => w
                .send(control::group_key(&g.group).as_bytes(), &value, None)
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
            (None, _) => Err(format!("cannot write to {}", o.control_topic)),
            (_, Err(e)) => Err(e.to_string()),
        };
        if let Err(e) = written {
            not_done.push(format!("committed, but not recorded as failed over: {e}"));
        }
    }
    let not_done = (!not_done.is_empty()).then(|| not_done.join("; "));
    outcome(committed, not_done)
}

fn finish(
    o: &Opened,
    r: &Report,
    state: &ControlState,
    outcomes: &[Outcome],
    json: bool,
) -> ExitCode {
    let stopped: Vec<&String> = o
        .routes
        .keys()
        .filter(|t| state.topics.contains_key(*t))
        .collect();
    let failed = outcomes.iter().any(|g| g.not_done.is_some());
    if json {
        let topics: BTreeMap<&String, &TopicFailedOver> =
            stopped.iter().map(|t| (*t, &state.topics[*t])).collect();
        println!(
            "{}",
            serde_json::json!({ "flow": o.flow.name, "failed_over_topics": topics, "groups": outcomes, "readiness": r })
        );
    } else {
        println!();
        println!(
            "failed over {} of {} topic(s):",
            stopped.len(),
            o.routes.len()
        );
        for t in &stopped {
            let e = &state.topics[*t];
            let tail: i64 = e.unmirrored.values().sum();
            let parts: Vec<String> = e
                .unmirrored
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(p, n)| format!("[{p}] {n}"))
                .collect();
            let named = if parts.is_empty() {
                String::new()
            } else {
                format!(" ({})", parts.join(", "))
            };
            println!(
                "  {t} -> {}: {tail} record(s) left unmirrored{named}",
                e.target_topic
            );
        }
        for g in outcomes {
            match &g.not_done {
                None => println!(
                    "group {}: failed over ({} partition(s) committed now)",
                    g.group, g.committed
                ),
                Some(why) => println!("group {}: NOT failed over: {why}", g.group),
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
