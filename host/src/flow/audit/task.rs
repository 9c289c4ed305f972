//! The audit's loop (I/O): on the leader, a pass every `audit_interval`, throttled to
//! `audit_records_per_second`; what it finds goes to the flow's status (and so to the
//! metrics) and to the log.

use super::{Bounds, Cursor, Placed, Planned, Tp, behind, follow_routes, plan};
use crate::config::AuditSettings;
use crate::flow::offset_syncs::SharedStore;
use crate::flow::telemetry::{AuditStatus, FlowTelemetry, now_ms};
use crate::flow::verify::read::{Pair, READ_TIMEOUT, check_range};
use crate::flow::verify::{LISTED, PartitionReport};
use crate::flow::{OWN_GROUP_PREFIX, Routes};
use crate::kafka::Cluster;
use rdkafka::consumer::{Consumer, StreamConsumer};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Source offsets read and compared at a time (held in memory with their copies).
const STRETCH: u64 = 2_000;

/// How the audit's readers read: a record asked for that the log no longer holds is an
/// error (the next pass finds where the log starts and reports the gap), never a silent
/// jump to the log start; small fetches, as the audit reads little at a time.
const READER: &[(&str, &str)] = &[
    ("enable.partition.eof", "true"),
    ("auto.offset.reset", "error"),
    ("fetch.max.bytes", "4194304"),
    ("max.partition.fetch.bytes", "1048576"),
    ("queued.max.messages.kbytes", "4096"),
];

/// How long a topic's cleanup policy, once read, is trusted.
const POLICY_FOR: Duration = Duration::from_secs(600);

/// What the audit works with.
pub struct AuditContext {
    /// The source cluster.
    pub source: Cluster,
    /// The target cluster.
    pub target: Cluster,
    /// The offset syncs the leader reads (the map).
    pub store: Arc<SharedStore>,
    /// What the flow mirrors.
    pub routes: watch::Receiver<Routes>,
    /// How often and how fast.
    pub settings: AuditSettings,
    /// Counters and status.
    pub telemetry: Arc<FlowTelemetry>,
}

/// The audit's two readers.
struct Readers {
    source: Arc<StreamConsumer>,
    target: Arc<StreamConsumer>,
}

/// Audits until `stop` (the flow stops, or this instance no longer leads it).
pub async fn run(ctx: AuditContext, stop: CancellationToken) {
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = audit(&ctx) => {}
    }
    ctx.telemetry.update(|s| s.audit = None);
    ctx.telemetry.loop_ended("audit");
}

async fn audit(ctx: &AuditContext) {
    let flow = ctx.telemetry.flow.clone();
    // The map is complete once the offset syncs were read to their end.
    while !ctx.store.is_ready() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let readers = loop {
        match open(ctx) {
            Ok(r) => break r,
            Err(e) => {
                ctx.telemetry.note_error("audit", "kafka", &e);
                tokio::time::sleep(ctx.settings.interval).await;
            }
        }
    };
    tracing::info!(%flow, interval = ?ctx.settings.interval, records_per_second = ctx.settings.records_per_second, "auditing the mirrored records");
    let mut cursors = BTreeMap::new();
    let mut status = AuditStatus::default();
    // Shown (and exported at 0) before the first pass, so that what it finds is an
    // increase a rule sees.
    ctx.telemetry.update(|s| s.audit = Some(status.clone()));
    let mut policies = Policies::default();
    loop {
        let started = Instant::now();
        pass(ctx, &readers, &mut cursors, &mut status, &mut policies).await;
        status.passes += 1;
        status.last_pass_ms = Some(now_ms());
        status.behind = behind(&cursors, |(t, p)| {
            ctx.store
                .store
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .newest_upstream(t, *p)
        });
        ctx.telemetry.update(|s| s.audit = Some(status.clone()));
        ctx.telemetry
            .tick("audit", ctx.settings.interval * 2 + READ_TIMEOUT);
        tokio::time::sleep(ctx.settings.interval.saturating_sub(started.elapsed())).await;
    }
}

fn open(ctx: &AuditContext) -> Result<Readers, String> {
    let group = format!("{OWN_GROUP_PREFIX}audit");
    let source = ctx
        .source
        .consumer(&group, READER)
        .map_err(|e| e.to_string())?;
    let target = ctx
        .target
        .consumer(&group, READER)
        .map_err(|e| e.to_string())?;
    Ok(Readers {
        source: Arc::new(source),
        target: Arc::new(target),
    })
}

/// Compacted topics (their records are removed by key on each side independently, so
/// record-by-record pairs do not hold): not audited. Read per topic, trusted for
/// [`POLICY_FOR`].
#[derive(Default)]
struct Policies {
    compacted: BTreeMap<String, (bool, Instant)>,
}

impl Policies {
    /// Whether `topic` is compacted on the source or `target` on the target (`None`: not
    /// known, the configs could not be read).
    async fn compacted(&mut self, ctx: &AuditContext, topic: &str, target: &str) -> Option<bool> {
        if let Some((c, at)) = self.compacted.get(topic)
            && at.elapsed() < POLICY_FOR
        {
            return Some(*c);
        }
        let policy = |cluster: &Cluster, name: &str| {
            let (cluster, name) = (cluster.clone(), name.to_string());
            async move {
                let values = cluster.topic_config_values(&name).await.ok()?;
                Some(
                    values
                        .get("cleanup.policy")
                        .is_some_and(|p| p.contains("compact")),
                )
            }
        };
        let (s, t) = tokio::join!(policy(&ctx.source, topic), policy(&ctx.target, target));
        // A cluster that serves no configs: its side is taken as not compacted.
        let c = match (s, t) {
            (None, None) => return None,
            (s, t) => s.unwrap_or(false) || t.unwrap_or(false),
        };
        self.compacted
            .insert(topic.to_string(), (c, Instant::now()));
        Some(c)
    }
}

/// One pass over every mirrored partition.
async fn pass(
    ctx: &AuditContext,
    readers: &Readers,
    cursors: &mut BTreeMap<Tp, Cursor>,
    status: &mut AuditStatus,
    policies: &mut Policies,
) {
    let flow = ctx.telemetry.flow.clone();
    let routes = ctx.routes.borrow().clone();
    let placed = |(t, p): &Tp| {
        let store = ctx.store.store.lock().unwrap_or_else(|e| e.into_inner());
        Some((
            store.oldest_upstream(t, *p)?,
            store.newest_upstream(t, *p)?,
            store.epoch(t, *p)?,
        ))
    };
    let rewound = follow_routes(cursors, &routes, |tp| {
        placed(tp).map(|(oldest, _, epoch)| Placed { oldest, epoch })
    });
    for (topic, partition) in rewound {
        tracing::info!(%flow, %topic, partition, "audit: the offset map of this partition was rewound (records mirrored again, or a topic recreated): audited again from the oldest record it places");
    }
    let mut compacted = 0;
    let mut skip = Vec::new();
    for (topic, route) in &routes {
        if policies.compacted(ctx, topic, &route.target).await == Some(true) {
            compacted += 1;
            skip.push(topic.clone());
        }
    }
    status.compacted_topics = compacted;
    // The log start of each partition with something to audit.
    let mut bounds = BTreeMap::new();
    for (tp, c) in cursors.iter() {
        let Some((oldest, newest, _)) = placed(tp) else {
            continue;
        };
        if newest < c.next || skip.contains(&tp.0) {
            continue;
        }
        ctx.telemetry
            .tick("audit", ctx.settings.interval * 2 + READ_TIMEOUT);
        match log_start(&readers.source, tp).await {
            Ok(low) => {
                bounds.insert(
                    tp.clone(),
                    Bounds {
                        oldest_placed: oldest,
                        newest_placed: newest,
                        low,
                    },
                );
            }
            Err(e) => {
                // The cluster is likely unreachable: the next pass tries again.
                ctx.telemetry.note_error("audit", "kafka", &e);
                break;
            }
        }
    }
    let rate = ctx.settings.records_per_second;
    let budget = (rate as f64 * ctx.settings.interval.as_secs_f64()).max(1.0) as u64;
    let planned = plan(cursors, |tp| bounds.get(tp).copied(), budget);
    let started = Instant::now();
    let mut read = 0u64;
    for p in planned {
        let Some(cursor) = cursors.get_mut(&p.tp) else {
            continue;
        };
        if let Some((a, b)) = p.unplaced {
            status.unplaced += (b - a) as u64;
            tracing::warn!(flow = %ctx.telemetry.flow, topic = %p.tp.0, partition = p.tp.1, from = a, to = b, "audit: the offset syncs the leader keeps no longer place these source offsets (the audit fell behind): not audited; a lower audit_interval or a higher audit_records_per_second keeps up");
        }
        if let Some((a, b)) = p.unreadable {
            status.unreadable += (b - a) as u64;
            tracing::warn!(flow = %ctx.telemetry.flow, topic = %p.tp.0, partition = p.tp.1, from = a, to = b, "audit: these source offsets were no longer readable when the audit reached them (retention, DeleteRecords): not audited");
        }
        let mut report = PartitionReport::default();
        let removed = std::sync::Mutex::new(std::collections::BTreeSet::new());
        let result = match log_start(&readers.target, &(p.target.clone(), p.tp.1)).await {
            Ok(target_low) => {
                let throttle = (&mut read, started);
                let low = (target_low, &removed);
                audit_range(ctx, readers, &p, cursor, (&mut report, low), throttle).await
            }
            Err(e) => Err(e),
        };
        // Not placed because their copies are gone from the target: counted apart.
        let removed = removed
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .len() as u64;
        report.unmapped = report.unmapped.saturating_sub(removed);
        status.removed_on_target += removed;
        if let Err(e) = result {
            status.failed_reads += 1;
            ctx.telemetry.note_error("audit", "kafka", &e);
        }
        note(ctx, status, &p, &report);
        ctx.telemetry
            .tick("audit", ctx.settings.interval * 2 + READ_TIMEOUT);
    }
}

/// Audits `p`'s range stretch by stretch, moving `cursor` after each; keeps the pass under
/// its rate (`read`: source offsets read so far in the pass, which began at `started`).
async fn audit_range(
    ctx: &AuditContext,
    readers: &Readers,
    p: &Planned,
    cursor: &mut Cursor,
    (report, (target_low, removed)): (
        &mut PartitionReport,
        (i64, &std::sync::Mutex<std::collections::BTreeSet<i64>>),
    ),
    (read, started): (&mut u64, Instant),
) -> Result<(), String> {
    let (topic, partition) = (&p.tp.0, p.tp.1);
    let store = || ctx.store.store.lock().unwrap_or_else(|e| e.into_inner());
    // A copy below the target's log start (its retention, or DeleteRecords there) is not
    // compared, and counted apart from what the map does not place (`removed`).
    let place = |u: i64| {
        let at = store().exact(topic, partition, u)?;
        if at < target_low {
            removed.lock().unwrap_or_else(|e| e.into_inner()).insert(u);
            return None;
        }
        Some(at)
    };
    let linked = |a: i64, b: i64| store().linked(topic, partition, a, b);
    let covered = Some(p.to - 1);
    let pair = Pair {
        topic,
        target: &p.target,
        partition,
    };
    let rate = ctx.settings.records_per_second.max(1);
    let mut at = p.from;
    while at < p.to {
        let end = (at + STRETCH.min(rate) as i64).min(p.to);
        let readers = (&*readers.source, &*readers.target);
        let mut position = cursor.position;
        check_range(
            readers,
            pair,
            (at, end),
            STRETCH as i64,
            (&place, &linked),
            covered,
            &mut position,
            report,
            &mut |_| {},
        )
        .await?;
        cursor.position = position;
        cursor.next = end;
        *read += (end - at) as u64;
        at = end;
        // Throttled: the pass reads at most `rate` source offsets a second.
        let due = Duration::from_secs_f64(*read as f64 / rate as f64);
        tokio::time::sleep(due.saturating_sub(started.elapsed())).await;
    }
    Ok(())
}

/// Adds a partition's findings to the status and logs its differences.
fn note(ctx: &AuditContext, status: &mut AuditStatus, p: &Planned, r: &PartitionReport) {
    status.equal += r.equal;
    status.mismatched += r.mismatched_count;
    status.missing += r.missing_count;
    status.extra += r.extra_count;
    status.unplaced += r.unmapped;
    status.target_unplaced += r.target_unplaced;
    if !r.differs() {
        return;
    }
    let (topic, partition) = (&p.tp.0, p.tp.1);
    let mut found: Vec<String> = Vec::new();
    for (up, down, what) in &r.mismatched {
        found.push(format!(
            "{topic}[{partition}] source offset {up}: target offset {down} of {} differs in its {what}",
            p.target
        ));
    }
    for (up, down) in &r.missing {
        found.push(format!(
            "{topic}[{partition}] source offset {up}: no record at target offset {down} of {}",
            p.target
        ));
    }
    for at in &r.extra {
        found.push(format!(
            "{topic}[{partition}]: target offset {at} of {} is no source record's",
            p.target
        ));
    }
    tracing::warn!(flow = %ctx.telemetry.flow, topic = %topic, partition, mismatched = r.mismatched_count, missing = r.missing_count, extra = r.extra_count, first = %found.first().map_or("", String::as_str), "audit: the target differs from the source");
    for f in found {
        status.differences.push(f);
    }
    let over = status.differences.len().saturating_sub(LISTED);
    status.differences.drain(..over);
}

/// A partition's log start, through `reader`.
async fn log_start(reader: &Arc<StreamConsumer>, (topic, p): &Tp) -> Result<i64, String> {
    let (client, topic, p) = (reader.clone(), topic.clone(), *p);
    tokio::task::spawn_blocking(move || {
        client
            .fetch_watermarks(&topic, p, Duration::from_secs(10))
            .map(|(low, _)| low)
            .map_err(|e| format!("the log start of {topic}[{p}]: {e}"))
    })
    .await
    .map_err(|e| e.to_string())?
}
