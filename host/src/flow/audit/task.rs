//! The audit's loop (I/O): on the leader, a pass every `audit_interval`, throttled to
//! `audit_records_per_second`; what it finds goes to the flow's status (and so to the
//! metrics) and to the log.

use super::{Bounds, Cursor, Planned, Tp, behind, follow_routes, plan};
use crate::config::AuditSettings;
use crate::flow::offset_syncs::SharedStore;
use crate::flow::telemetry::{AuditStatus, FlowTelemetry, now_ms};
use crate::flow::verify::read::{Pair, READ_TIMEOUT, READER, check_range};
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
    target: StreamConsumer,
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
    loop {
        let started = Instant::now();
        pass(ctx, &readers, &mut cursors, &mut status).await;
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
        target,
    })
}

/// One pass over every mirrored partition.
async fn pass(
    ctx: &AuditContext,
    readers: &Readers,
    cursors: &mut BTreeMap<Tp, Cursor>,
    status: &mut AuditStatus,
) {
    let routes = ctx.routes.borrow().clone();
    let placed = |(t, p): &Tp| {
        let store = ctx.store.store.lock().unwrap_or_else(|e| e.into_inner());
        Some((store.oldest_upstream(t, *p)?, store.newest_upstream(t, *p)?))
    };
    follow_routes(cursors, &routes, placed);
    // The log start of each partition with something to audit.
    let mut bounds = BTreeMap::new();
    for (tp, c) in cursors.iter() {
        let Some((oldest, newest)) = placed(tp) else {
            continue;
        };
        if newest < c.next {
            continue;
        }
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
            Err(e) => ctx.telemetry.note_error("audit", "kafka", &e),
        }
    }
    let rate = ctx.settings.records_per_second;
    let budget = rate.saturating_mul(ctx.settings.interval.as_secs().max(1));
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
        let result = audit_range(ctx, readers, &p, cursor, &mut report, (&mut read, started)).await;
        if let Err(e) = result {
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
    report: &mut PartitionReport,
    (read, started): (&mut u64, Instant),
) -> Result<(), String> {
    let (topic, partition) = (&p.tp.0, p.tp.1);
    let place = |u: i64| {
        ctx.store
            .store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .exact(topic, partition, u)
    };
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
        let readers = (&*readers.source, &readers.target);
        let mut position = cursor.position;
        check_range(
            readers,
            pair,
            (at, end),
            STRETCH as i64,
            &place,
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

/// A source partition's log start.
async fn log_start(source: &Arc<StreamConsumer>, (topic, p): &Tp) -> Result<i64, String> {
    let (client, topic, p) = (source.clone(), topic.clone(), *p);
    tokio::task::spawn_blocking(move || {
        client
            .fetch_watermarks(&topic, p, Duration::from_secs(10))
            .map(|(low, _)| low)
            .map_err(|e| format!("the log start of {topic}[{p}]: {e}"))
    })
    .await
    .map_err(|e| e.to_string())?
}
