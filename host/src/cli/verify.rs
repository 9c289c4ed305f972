//! `kmirror verify`: reads a flow's source partitions and their target partitions, pairs
//! the records through the flow's exact offset map (its offset syncs) and compares them
//! record by record (`flow::verify`); reports per partition what is equal, mismatched,
//! missing on the target, extra on the target, not placed exactly by the map, not covered
//! by it yet, and the source range no longer readable. Exit 0 when nothing differs, 1 when
//! something does, 2 when the check could not run.

use super::fail;
use crate::config::{self, SyncsLocation};
use crate::flow::discovery::rules;
use crate::flow::offset_syncs::store::OffsetSyncStore;
use crate::flow::offset_syncs::{MARKER_HEADER, SyncMarker};
use crate::flow::plugins::{FlowPlugins, InternalTopics};
use crate::flow::verify::PartitionReport;
use crate::flow::verify::read::{Pair, Position, READ_TIMEOUT, READER, check_range};
use crate::flow::{OWN_GROUP_PREFIX, Routes};
use crate::formats::OffsetSync;
use crate::kafka::Cluster;
use crate::kafka::internal::{InternalReader, ReadEvent};
use crate::plugin::cache::CacheChoice;
use clap::Args;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `kmirror verify`'s arguments.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// The flow, SOURCE->TARGET.
    #[arg(long)]
    flow: String,
    /// Only these source topics (comma-separated; default: every topic the flow mirrors).
    #[arg(long, value_delimiter = ',')]
    topics: Vec<String>,
    /// The source offset each partition is compared from (default: the oldest the map
    /// places).
    #[arg(long)]
    from: Option<i64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Source offsets read and compared at a time (memory per partition; tests use a
    /// small one to cross stretch boundaries).
    #[arg(long, hide = true, default_value_t = 20_000)]
    stretch: i64,
}

/// One partition's outcome.
#[derive(Debug, serde::Serialize)]
struct Row {
    topic: String,
    partition: i32,
    target: String,
    /// The source range compared, [from, to).
    from: i64,
    to: i64,
    /// Source records before `from` the log no longer holds, when asked from there.
    unreadable: Option<(i64, i64)>,
    #[serde(flatten)]
    report: PartitionReport,
}

/// Runs `kmirror verify`.
pub fn run(args: VerifyArgs, cache: &CacheChoice) -> ExitCode {
    let flow = match super::load_flow(&args.config, &args.flow, cache) {
        Ok(flow) => flow,
        Err(code) => return code,
    };
    if !flow.roles.record_transforms.is_empty() {
        return fail(
            2,
            &format!(
                "flow {} transforms records: verify compares records byte for byte, so it checks flows without record transforms only",
                flow.name
            ),
        );
    }
    let runtime = match super::runtime(2) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        match verify(&flow, &args).await {
            Ok(rows) => print(&rows, args.json),
            Err(e) => fail(2, &e),
        }
    })
}

async fn verify(flow: &config::ResolvedFlow, args: &VerifyArgs) -> Result<Vec<Row>, String> {
    let source = Cluster::new(&flow.source).map_err(|e| e.to_string())?;
    let target = Cluster::new(&flow.target).map_err(|e| e.to_string())?;
    let (mut routes, internal) = mirrored(flow, &source, &target).await?;
    if !args.topics.is_empty() {
        for t in &args.topics {
            if !routes.contains_key(t) {
                return Err(format!("flow {} does not mirror topic `{t}`", flow.name));
            }
        }
        routes.retain(|t, _| args.topics.contains(t));
    }
    let store = read_syncs(
        syncs_cluster(flow, &source, &target),
        &internal.offset_syncs,
    )
    .await?;
    let reader = source
        .consumer(&format!("{OWN_GROUP_PREFIX}verify"), READER)
        .map_err(|e| e.to_string())?;
    let target_reader = target
        .consumer(&format!("{OWN_GROUP_PREFIX}verify"), READER)
        .map_err(|e| e.to_string())?;
    // Each partition's range first: the progress has a total.
    let mut planned = Vec::new();
    for (topic, route) in &routes {
        for partition in 0..route.partitions {
            let (low, high) = reader
                .fetch_watermarks(topic, partition, READ_TIMEOUT)
                .map_err(|e| format!("{topic}[{partition}]: {e}"))?;
            planned.push(plan(
                &store,
                topic,
                &route.target,
                partition,
                args.from,
                low,
                high,
            ));
        }
    }
    let mut progress = Progress::new(planned.iter().map(|r| r.to - r.from).sum(), args.json);
    let mut rows = Vec::new();
    for mut row in planned {
        let readers = (&reader, &target_reader);
        check(
            readers,
            &store,
            &mut row,
            args.stretch.max(1),
            &mut progress,
        )
        .await?;
        rows.push(row);
    }
    progress.done();
    Ok(rows)
}

/// What the flow mirrors (every source topic its plugins route, as discovery decides),
/// and its internal topics.
pub(super) async fn mirrored(
    flow: &config::ResolvedFlow,
    source: &Cluster,
    target: &Cluster,
) -> Result<(Routes, InternalTopics), String> {
    let plugins = FlowPlugins::for_flow(flow);
    let internal = plugins.internal_topics().await.map_err(|e| e.to_string())?;
    let plugins = plugins.reserving(&internal);
    let (listed, on_target) = tokio::join!(source.topics(), target.topics());
    let listed = listed.map_err(|e| e.to_string())?;
    let on_target = on_target.map_err(|e| e.to_string())?;
    let names: Vec<String> = listed.keys().cloned().collect();
    let decided = plugins
        .batch(&names, rules::decide_with)
        .await
        .map_err(|e| format!("deciding the source topics: {e}"))?;
    // Topics failed back into this flow's target (`kmirror failback`) are mirrored too.
    let control = crate::flow::cutover::control_topic(&flow.source.alias);
    let failed_back = match crate::flow::cutover::control::read(target, &control, READ_TIMEOUT)
        .await
    {
        Ok(state) => state.unwrap_or_default().failed_back,
        Err(e) => {
            eprintln!(
                "warning: cannot read {control} on cluster {} ({e}): topics failed back into it (kmirror failback) are left out",
                target.alias
            );
            Default::default()
        }
    };
    let mut refused = Vec::new();
    let decisions = rules::with_failed_back(
        &decided.decisions,
        &failed_back,
        (&listed, &on_target),
        &mut refused,
    );
    for r in &refused {
        eprintln!("warning: {}", rules::describe(r));
    }
    let mut routes = rules::plan(&listed, &on_target, &decisions, &Routes::new()).mirror;
    rules::start_failed_back(&mut routes, &failed_back);
    Ok((routes, internal))
}

/// The cluster the flow's offset syncs are on.
pub(super) fn syncs_cluster<'a>(
    flow: &config::ResolvedFlow,
    source: &'a Cluster,
    target: &'a Cluster,
) -> &'a Cluster {
    match flow.settings.offset_syncs_topic_location {
        SyncsLocation::Source => source,
        SyncsLocation::Target => target,
    }
}

/// Every offset sync of the flow, read to the end.
pub(super) async fn read_syncs(cluster: &Cluster, topic: &str) -> Result<OffsetSyncStore, String> {
    let mut reader = InternalReader::open(cluster, topic)
        .await
        .map_err(|e| format!("reading the offset syncs ({topic}): {e}"))?;
    // As many syncs as the store keeps per partition (its newest 4,096): the range compared
    // by default starts at the oldest one kept.
    let mut store = OffsetSyncStore::with_budget(usize::MAX / 2);
    let deadline = Instant::now() + READ_TIMEOUT;
    while !reader.caught_up() {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = tokio::time::timeout(left, reader.next())
            .await
            .map_err(|_| format!("{topic} not read to its end within {READ_TIMEOUT:?}"))?
            .map_err(|e| format!("reading the offset syncs ({topic}): {e}"))?;
        let ReadEvent::Record(msg) = event else {
            continue;
        };
        let Ok(sync) = OffsetSync::decode(msg.key(), msg.payload()) else {
            continue; // malformed: the daemon counts and reports those
        };
        let marker = msg
            .headers()
            .and_then(|h| {
                use rdkafka::message::Headers;
                h.iter().find(|h| h.key == MARKER_HEADER)
            })
            .and_then(|h| h.value)
            .and_then(SyncMarker::decode);
        // A refused sync (a former owner's late one) is refused here as in the daemon.
        let _ = store.add_at(&sync, marker, msg.timestamp().to_millis());
    }
    Ok(store)
}

/// A partition's row before the check: the source range it compares, [from, to) — from
/// `from` (default: the oldest record the syncs place) to the newest the syncs place.
fn plan(
    store: &OffsetSyncStore,
    topic: &str,
    target_topic: &str,
    partition: i32,
    from: Option<i64>,
    low: i64,
    high: i64,
) -> Row {
    let covered = store.newest_upstream(topic, partition);
    // From the oldest record the syncs place (no sync: the log start, all of it not
    // covered), or from `--from`; only a range asked for is reported unreadable.
    let asked = from
        .or(store.oldest_upstream(topic, partition))
        .unwrap_or(low);
    let start = asked.max(low).min(high);
    let end = covered.map_or(start, |c| (c + 1).min(high)).max(start);
    Row {
        topic: topic.to_string(),
        partition,
        target: target_topic.to_string(),
        from: start,
        to: end,
        unreadable: from.filter(|f| *f < low).map(|f| (f, low)),
        report: PartitionReport {
            // What lies past the newest sync is not read: counted as offsets.
            not_covered: (high - end).max(0) as u64,
            ..PartitionReport::default()
        },
    }
}

/// Compares `row`'s range `stretch` source offsets at a time.
async fn check(
    readers: (&StreamConsumer, &StreamConsumer),
    store: &OffsetSyncStore,
    row: &mut Row,
    stretch: i64,
    progress: &mut Progress,
) -> Result<(), String> {
    let (topic, partition) = (row.topic.clone(), row.partition);
    let covered = store.newest_upstream(&topic, partition);
    let place = |u: i64| store.exact(&topic, partition, u);
    let linked = |a: i64, b: i64| store.linked(&topic, partition, a, b);
    let pair = Pair {
        topic: &topic,
        target: &row.target,
        partition,
    };
    let mut position = Position::default();
    check_range(
        readers,
        pair,
        (row.from, row.to),
        stretch,
        (&place, &linked),
        covered,
        &mut position,
        &mut row.report,
        &mut |n| progress.advance(n),
    )
    .await
}

/// Progress on standard error: a line rewritten in place on a terminal, a plain line every
/// few seconds otherwise; nothing under `--json` unless on a terminal.
struct Progress {
    total: i64,
    done: i64,
    started: Instant,
    shown: Instant,
    terminal: bool,
    quiet: bool,
}

impl Progress {
    fn new(total: i64, json: bool) -> Self {
        use std::io::IsTerminal;
        let terminal = std::io::stderr().is_terminal();
        Progress {
            total,
            done: 0,
            started: Instant::now(),
            shown: Instant::now(),
            terminal,
            quiet: json && !terminal,
        }
    }

    fn advance(&mut self, n: i64) {
        self.done += n;
        let every = if self.terminal {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(5)
        };
        if !self.quiet && self.shown.elapsed() >= every {
            self.shown = Instant::now();
            self.show();
        }
    }

    fn show(&self) {
        let pct = if self.total > 0 {
            self.done * 100 / self.total
        } else {
            100
        };
        let line = format!(
            "verified {} of {} source offsets ({pct}%) in {:.0?}",
            self.done,
            self.total,
            self.started.elapsed()
        );
        if self.terminal {
            let width = 30;
            let filled = (pct as usize * width / 100).min(width);
            eprint!(
                "\r[{}{}] {line}",
                "#".repeat(filled),
                " ".repeat(width - filled)
            );
        } else {
            eprintln!("{line}");
        }
    }

    fn done(&self) {
        if self.terminal {
            self.show();
            eprintln!();
        }
    }
}

fn print(rows: &[Row], json: bool) -> ExitCode {
    let differs = rows
        .iter()
        .any(|r| r.report.differs() || r.unreadable.is_some());
    if json {
        println!("{}", serde_json::to_string_pretty(rows).unwrap_or_default());
    } else {
        println!(
            "{:<32} {:>4} {:>21} {:>9} {:>10} {:>8} {:>8} {:>9} {:>11}",
            "source topic",
            "part",
            "source range",
            "equal",
            "mismatched",
            "missing",
            "extra",
            "unmapped",
            "not covered"
        );
        for r in rows {
            println!(
                "{:<32} {:>4} {:>21} {:>9} {:>10} {:>8} {:>8} {:>9} {:>11}",
                r.topic,
                r.partition,
                format!("{}..{}", r.from, r.to),
                r.report.equal,
                r.report.mismatched_count,
                r.report.missing_count,
                r.report.extra_count,
                r.report.unmapped,
                r.report.not_covered
            );
            for (up, down, what) in &r.report.mismatched {
                println!(
                    "  {}[{}] source offset {up}: target offset {down} differs in its {what}",
                    r.topic, r.partition
                );
            }
            for (up, down) in &r.report.missing {
                println!(
                    "  {}[{}] source offset {up}: no record at target offset {down} of {}",
                    r.topic, r.partition, r.target
                );
            }
            for at in &r.report.extra {
                println!(
                    "  {}[{}]: target offset {at} of {} is no source record's",
                    r.topic, r.partition, r.target
                );
            }
            if let Some((a, b)) = r.unreadable {
                println!(
                    "  {}[{}]: source offsets {a}..{b} are no longer readable (retention or deletion)",
                    r.topic, r.partition
                );
            }
        }
        let total = |f: fn(&Row) -> u64| rows.iter().map(f).sum::<u64>();
        println!(
            "{} partitions: {} records equal, {} mismatched, {} missing on the target, {} extra on the target; not compared: {} source records the offset syncs do not place exactly (a sync lost: a crash, a handover) and {} target records among their copies, {} source offsets past the newest sync",
            rows.len(),
            total(|r| r.report.equal),
            total(|r| r.report.mismatched_count),
            total(|r| r.report.missing_count),
            total(|r| r.report.extra_count),
            total(|r| r.report.unmapped),
            total(|r| r.report.target_unplaced),
            total(|r| r.report.not_covered),
        );
    }
    if differs {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
