//! Partition ownership across a flow's instances: every instance reports what its
//! replication tasks own on the flow's control topic (`kmirror-leader.<target>.internal`,
//! on the source; key `report:<instance>`, a JSON [`rules::Report`]), and the leader
//! compares the mirrored partitions with those reports and with the assignment the group
//! coordinator describes (DescribeGroups; some brokers describe none). A partition without
//! an owner for longer than two session timeouts (plus the members' metadata refresh) is a
//! degraded reason, the metric `kmirror_unowned_partitions` and a warning, and the leader's
//! first replication task leaves the group and joins again: one member's rejoin makes the
//! coordinator rebalance the whole group (every member leaving at once is what strands
//! some coordinators). While the partitions stay stuck this is repeated with a doubling
//! wait.
//!
//! The reports need WRITE on the control topic (on the source). A partition counts as owned
//! when a fresh report names it or when the coordinator describes it as assigned: the
//! leader forces a rebalance only when neither does (the stranded group below), never
//! because a report is missing.
//!
//! A group coordinator can strand a group (Tansu keeps a departed member as the leader of
//! a forming group: `docs/scaling.md`); whether a rejoin clears it depends on the broker,
//! so the replication tasks of an instance also leave one at a time at a stop
//! ([`super::replication::leave`]), which is what triggers it.

pub mod rules;

use super::Routes;
use super::telemetry::{FlowTelemetry, InstanceStatus};
use crate::kafka::Cluster;
use crate::kafka::internal::InternalWriter;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use rules::{Limits, Ownership, Report};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The control topic key of an instance's report.
const REPORT_PREFIX: &str = "report:";

/// What the ownership task works with.
pub struct OwnershipContext {
    /// The source cluster (the control topic and the progress group are there).
    pub source: Cluster,
    /// The flow's control topic.
    pub control_topic: String,
    /// The flow's progress group (the replication tasks' group).
    pub progress_group: String,
    /// The group's session timeout.
    pub session_timeout: Duration,
    /// What the flow mirrors.
    pub routes: watch::Receiver<Routes>,
    /// Whether this instance leads.
    pub leader: watch::Receiver<bool>,
    /// Counters and status (this instance's owned partitions are read from it).
    pub telemetry: Arc<FlowTelemetry>,
    /// Bumped when this instance's first replication task is to rejoin the group.
    pub rejoin: watch::Sender<u64>,
}

/// This process's instance name: host, pid and a random part.
pub(crate) fn instance() -> (String, String) {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let random: u32 = rand::random();
    (format!("{host}-{}-{random:08x}", std::process::id()), host)
}

/// Reports this instance's partitions and, on the leader, judges ownership, until
/// `shutdown`.
pub async fn run(ctx: OwnershipContext, shutdown: CancellationToken) {
    let every = (ctx.session_timeout / 2).max(Duration::from_secs(1));
    let limits = Limits::for_session(
        ctx.session_timeout.as_millis() as i64,
        every.as_millis() as i64,
    );
    let (me, host) = instance();
    let telemetry = ctx.telemetry.clone();
    let Some((writer, reader)) = open(&ctx, &shutdown).await else {
        return;
    };
    let mut ownership = Ownership::default();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warned = false;
    let mut leading = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                // Leaves no key behind on the compacted topic: every process start has its own.
                let key = format!("{REPORT_PREFIX}{me}");
                if let Err(e) = writer.tombstone(key.as_bytes(), Duration::from_secs(2)).await {
                    tracing::debug!(flow = %telemetry.flow, error = %e, "ownership report not removed");
                }
                telemetry.loop_ended("ownership");
                return;
            }
            received = reader.recv() => match received {
                Ok(msg) => {
                    let key = msg.key().and_then(|k| std::str::from_utf8(k).ok()).unwrap_or_default();
                    if let Some(instance) = key.strip_prefix(REPORT_PREFIX).filter(|_| msg.payload().is_none()) {
                        ownership.forget(instance);
                    } else if key.starts_with(REPORT_PREFIX)
                        && let Ok(mut report) = serde_json::from_slice::<Report>(msg.payload().unwrap_or_default()) {
                            // Judged by when it arrived here: the instances' clocks need not agree.
                            report.at_ms = crate::flow::telemetry::now_ms();
                            ownership.report(report);
                        }
                }
                Err(e) => telemetry.note_error("read ownership reports", "kafka", &e),
            },
            _ = tick.tick() => {
                telemetry.tick("ownership", every);
                let report = own_report(&telemetry, &me, &host, *ctx.leader.borrow());
                let key = format!("{REPORT_PREFIX}{me}");
                if let Ok(value) = serde_json::to_vec(&report) {
                    let sent = writer.send(key.as_bytes(), &value, None);
                    let t = telemetry.clone();
                    tokio::spawn(async move {
                        if let Err(e) = sent.await {
                            t.note_error("write ownership reports", e.kind(), &e);
                        }
                    });
                }
                let leads = *ctx.leader.borrow();
                if leads && !leading {
                    // A new term: nothing carried over from an earlier one.
                    ownership = Ownership::default();
                }
                leading = leads;
                // This instance's own view needs no round trip.
                ownership.report(report);
                let now = crate::flow::telemetry::now_ms();
                let instances = ownership
                    .instances(now, limits)
                    .into_iter()
                    .map(|(instance, host, partitions, leader, ago_ms)| InstanceStatus {
                        this: instance == me,
                        instance,
                        host,
                        partitions,
                        leader,
                        reported_ms_ago: ago_ms,
                    })
                    .collect();
                telemetry.update(|s| s.instances = instances);
                if !leads {
                    telemetry.update(|s| s.unowned.clear());
                    warned = false;
                    continue;
                }
                // Unknown this pass (the coordinator moving or loading): nothing is judged
                // stuck for want of an answer.
                let assigned = match ctx.source.group_assignment(&ctx.progress_group).await {
                    Ok(assigned) => assigned,
                    Err(e) => {
                        telemetry.note_error("read the group's assignment", e.kind(), &e);
                        continue;
                    }
                };
                let routes = ctx.routes.borrow().clone();
                let verdict = ownership.judge(crate::flow::telemetry::now_ms(), &routes, &assigned, limits);
                let stuck: Vec<String> = verdict.stuck.iter().map(|(t, p)| format!("{t}[{p}]")).collect();
                if !stuck.is_empty() && !warned {
                    tracing::warn!(flow = %telemetry.flow, partitions = %stuck.join(", "), "partitions have had no owner for longer than two session timeouts");
                }
                warned = !stuck.is_empty();
                if verdict.rejoin {
                    tracing::warn!(flow = %telemetry.flow, partitions = stuck.len(), "making the group rebalance: this instance's first replication task rejoins it");
                    ctx.rejoin.send_modify(|n| *n += 1);
                }
                telemetry.update(|s| s.unowned = stuck);
            }
        }
    }
}

/// The control topic's writer and reader, created again (with backoff) until they can be.
async fn open(
    ctx: &OwnershipContext,
    shutdown: &CancellationToken,
) -> Option<(InternalWriter, StreamConsumer)> {
    let mut backoff = Duration::from_millis(500);
    loop {
        let opened = InternalWriter::new(&ctx.source, &ctx.control_topic)
            .map_err(|e| e.to_string())
            .and_then(|w| Ok((w, control_reader(&ctx.source, &ctx.control_topic)?)));
        match opened {
            Ok(both) => return Some(both),
            Err(e) => ctx
                .telemetry
                .note_error("open the control topic", "kafka", &e),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

fn control_reader(source: &Cluster, topic: &str) -> Result<StreamConsumer, String> {
    let consumer: StreamConsumer = source
        .config_with(&[
            ("group.id", &format!("kmirror-reader-{topic}")),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("enable.partition.eof", "false"),
        ])
        .create()
        .map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::End)
        .map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    Ok(consumer)
}

fn own_report(telemetry: &FlowTelemetry, me: &str, host: &str, leader: bool) -> Report {
    let owned: BTreeMap<String, Vec<i32>> = telemetry
        .status()
        .partitions
        .into_iter()
        .map(|(t, ps)| (t, ps.into_keys().collect()))
        .collect();
    Report {
        instance: me.to_string(),
        host: host.to_string(),
        owned,
        at_ms: crate::flow::telemetry::now_ms(),
        leader,
    }
}
