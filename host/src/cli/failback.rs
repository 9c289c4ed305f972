//! `kmirror failback --config F --flow A->B`: after `kmirror failover` moved a flow's topics
//! from A to B and their writes followed to B, brings them home to A without copying
//! their history again.
//!
//! 1. Per failed-over topic and partition: where B's era begins (the target offset just
//!    after the last record the failover left mirrored, exact from the offset syncs) and
//!    A's divergent tail (the records A took after that one, which never reached B).
//! 2. The tail is copied, record by record, to `kmirror-quarantine.<topic>.internal` on A
//!    (same partition; a header names each record's origin), and listed per partition.
//! 3. A `failback:<B's topic>` record on the reverse flow's control topic (on A) has the
//!    running reverse flow B->A mirror B's topic into A's, each partition from where B's
//!    era begins, whatever its topic filter and replication policy say of it.
//! 4. Then the reverse flow's failover, as `kmirror failover --flow B->A` does it: a wait
//!    until B's era is mirrored to A (or `--now`), the topics stopped, and each group's
//!    offsets translated through the reverse flow's exact map and committed on A — so a
//!    failed-back group resumes after the divergent tail, never in it. A group that had
//!    not read B's era up to its beginning has no place there (it would read the tail) and
//!    is refused, named.
//!
//! Re-running it goes on where it stopped: a topic already failed back is not prepared
//! again, a quarantine copy interrupted goes on after its last record, and the failover
//! of step 4 is resumable itself. `--dry-run` prints the plan and changes nothing.

use super::cutover::{self, Failed, FailoverArgs, READ};
use super::cutover_read;
use super::{fail, verify};
use crate::config::ResolvedFlow;
use crate::flow::cutover::control::{self, Quarantined, TopicFailedBack};
use crate::flow::cutover::control_topic;
use crate::flow::offset_syncs::store::OffsetSyncStore;
use crate::flow::telemetry::now_ms;
use crate::flow::verify::read::{READER, read_range};
use crate::kafka::internal::InternalWriter;
use crate::kafka::{Cluster, TopicSpec};
use crate::plugin::cache::CacheChoice;
use clap::Args;
use rdkafka::consumer::StreamConsumer;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The header each quarantined record carries: `<topic>/<partition>/<offset>` of its origin.
pub const QUARANTINED_FROM: &str = "kmirror-quarantined-from";

/// Records copied to quarantine at a time.
const COPY_STRETCH: i64 = 5_000;

/// `kmirror failback`'s arguments.
#[derive(Debug, Args)]
pub struct FailbackArgs {
    /// The configuration file (with the flow failed over and its reverse, which the daemon
    /// runs).
    #[arg(long, short)]
    config: PathBuf,
    /// The flow that was failed over, SOURCE->TARGET (its topics go home to SOURCE).
    #[arg(long)]
    flow: String,
    /// Only these topics, by their names on SOURCE (default: every topic failed over).
    #[arg(long, value_delimiter = ',')]
    topics: Vec<String>,
    /// Only these consumer groups (default: every group the reverse flow's group filter
    /// accepts that committed on a chosen topic on TARGET).
    #[arg(long, value_delimiter = ',')]
    groups: Vec<String>,
    /// Print the plan (tails, where each partition resumes) and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not wait for TARGET's records to reach SOURCE: stop at once, naming the tail.
    #[arg(long)]
    now: bool,
    /// How long to wait for TARGET's records to reach SOURCE (e.g. 30s, 10m).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    wait: Duration,
    /// Print JSON (the failover step's report).
    #[arg(long)]
    json: bool,
}

/// Runs `kmirror failback`.
pub fn run(args: FailbackArgs, cache: &CacheChoice) -> ExitCode {
    let cfg = match super::load_config(&args.config, cache) {
        Ok(cfg) => cfg,
        Err(code) => return code,
    };
    let mut flows = cfg.flows;
    let Some(i) = flows.iter().position(|f| f.name == args.flow) else {
        let names: Vec<&str> = flows.iter().map(|f| f.name.as_str()).collect();
        return fail(
            2,
            &format!("no flow `{}`; flows are: {}", args.flow, names.join(", ")),
        );
    };
    let flow = flows.swap_remove(i);
    let reverse = flows
        .iter()
        .position(|f| f.source.alias == flow.target.alias && f.target.alias == flow.source.alias);
    let Some(j) = reverse else {
        return fail(
            2,
            &format!(
                "failing {} back needs the reverse flow {}->{} in the configuration (the running daemon mirrors {}'s records back through it)",
                flow.name, flow.target.alias, flow.source.alias, flow.target.alias
            ),
        );
    };
    let reverse = flows.swap_remove(j);
    let runtime = match super::runtime(2) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        match failback(flow, reverse, &args).await {
            Ok(code) => code,
            Err((code, message)) => fail(code, &message),
        }
    })
}

/// One partition's plan.
#[derive(Debug, Clone, Copy)]
struct PartitionPlan {
    partition: i32,
    /// Where B's era begins on B.
    resume: i64,
    /// A's divergent tail, [from, to).
    tail: (i64, i64),
}

/// One topic's plan.
#[derive(Debug)]
struct TopicPlan {
    /// Its name on A.
    topic: String,
    /// Its name on B.
    on_b: String,
    partitions: Vec<PartitionPlan>,
    /// Failed back before (the plan is that record's).
    done: Option<TopicFailedBack>,
}

async fn failback(
    flow: ResolvedFlow,
    reverse: ResolvedFlow,
    args: &FailbackArgs,
) -> Result<ExitCode, Failed> {
    let o = cutover::open(flow, &args.topics).await?;
    let state = cutover::read_control(&o).await?;
    for t in &args.topics {
        if !state.topics.contains_key(t) {
            return Err((
                2,
                format!("topic `{t}` was not failed over (kmirror failover first)"),
            ));
        }
    }
    let mut o = o;
    o.routes.retain(|t, _| state.topics.contains_key(t));
    if o.routes.is_empty() {
        return Err((
            2,
            format!(
                "no topic of flow {} is failed over: nothing to fail back",
                o.flow.name
            ),
        ));
    }
    let (a, b) = (o.source.clone(), o.target.clone());
    let home_control = control_topic(&reverse.source.alias);
    let home = control::read(&a, &home_control, READ)
        .await
        .map_err(|e| (2, format!("reading {home_control}: {e}")))?
        .unwrap_or_default();
    let positions = cutover_read::positions(&o).await.map_err(|e| (2, e))?;
    let syncs = verify::syncs_cluster(&o.flow, &a, &b);
    let store = verify::read_syncs(syncs, &o.internal.offset_syncs)
        .await
        .map_err(|e| (2, e))?;
    let reader = a
        .consumer(
            &format!("{}failback", crate::flow::OWN_GROUP_PREFIX),
            READER,
        )
        .map_err(|e| (2, e.to_string()))?;
    let on_b_listed = b.topics().await.map_err(|e| (2, e.to_string()))?;
    let mut plans = Vec::new();
    for (topic, route) in &o.routes {
        // Its name on B as the failover recorded it.
        let on_b = state.topics[topic].target_topic.clone();
        if let Some(done) = home.failed_back.get(&on_b) {
            plans.push(TopicPlan {
                topic: topic.clone(),
                on_b,
                partitions: Vec::new(),
                done: Some(done.clone()),
            });
            continue;
        }
        let mut partitions = Vec::new();
        for p in 0..route.partitions {
            let pos = positions
                .get(&(topic.clone(), p))
                .copied()
                .unwrap_or_default();
            let end = pos.end.ok_or_else(|| {
                (
                    1,
                    format!("the end of {topic}[{p}] on {} is unknown", a.alias),
                )
            })?;
            let (resume, tail_from) = resume_at(&store, &reader, (topic, p), pos.mirrored).await?;
            if end < tail_from {
                return Err((
                    1,
                    format!(
                        "{topic}[{p}] ends at {end} on {}, before what was mirrored ({tail_from}): its log was rewritten (recreated?); nothing was changed",
                        a.alias
                    ),
                ));
            }
            partitions.push(PartitionPlan {
                partition: p,
                resume,
                tail: (tail_from, end),
            });
        }
        // Partitions B's topic gained in its era: all of them is B's era.
        let grown = on_b_listed.get(&on_b).copied().unwrap_or(0);
        for p in route.partitions..grown {
            partitions.push(PartitionPlan {
                partition: p,
                resume: 0,
                tail: (0, 0),
            });
        }
        plans.push(TopicPlan {
            topic: topic.clone(),
            on_b,
            partitions,
            done: None,
        });
    }
    show(&plans, &a, &b, args.json);
    // The groups failed back: the ones named, else the ones the failover moved to B (a
    // group that stayed on A, its offsets synced to B, must not be moved past A's tail).
    let groups: Vec<String> = if args.groups.is_empty() {
        state.groups.keys().cloned().collect()
    } else {
        args.groups.clone()
    };
    if groups.is_empty() {
        return Err((
            2,
            "no consumer group was failed over with these topics: name the groups to fail back with --groups".into(),
        ));
    }
    let fresh: Vec<&TopicPlan> = plans.iter().filter(|p| p.done.is_none()).collect();
    if args.now && !fresh.is_empty() {
        return Err((
            2,
            format!(
                "--now would stop the reverse flow before it mirrored anything of {}'s era; run without it (the wait is bounded by --wait), and with --now afterwards if need be",
                b.alias
            ),
        ));
    }
    if !fresh.is_empty() {
        refuse_stored_progress(&b, &reverse, &fresh).await?;
    }
    if args.dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    let writer = home_writer(&a, &home_control, &reverse).await?;
    for plan in &plans {
        if plan.done.is_some() {
            continue;
        }
        let quarantine_topic = quarantine_topic(&plan.topic);
        let quarantined =
            quarantine(&a, &reader, plan, &quarantine_topic, (&reverse, args.json)).await?;
        let entry = TopicFailedBack {
            target_topic: plan.topic.clone(),
            at_ms: now_ms(),
            from: plan
                .partitions
                .iter()
                .map(|p| (p.partition, p.resume))
                .collect(),
            quarantine_topic,
            quarantined,
        };
        let value = serde_json::to_vec(&entry).map_err(|e| (1, e.to_string()))?;
        writer
            .send(control::failback_key(&plan.on_b).as_bytes(), &value, None)
            .await
            .map_err(|e| (1, e.to_string()))?;
        say(
            args.json,
            &format!(
                "failing back {} -> {}: flow {} mirrors it into {} from where the failover left it",
                plan.on_b, plan.topic, reverse.name, plan.topic
            ),
        );
    }
    // The rest is the reverse flow's failover of those topics.
    let failover = FailoverArgs {
        config: args.config.clone(),
        flow: reverse.name.clone(),
        topics: plans.iter().map(|p| p.on_b.clone()).collect(),
        groups,
        dry_run: false,
        now: args.now,
        wait: args.wait,
        json: args.json,
    };
    say(
        args.json,
        &format!(
            "failing over {} (waiting for the daemon to mirror the failed-back topics)",
            reverse.name
        ),
    );
    cutover::failover(reverse, &failover).await
}

/// A line of progress: on standard output, or standard error under `--json` (whose output
/// is the failover step's one object).
fn say(json: bool, line: &str) {
    if json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// Refuses when the reverse flow has stored progress for a topic about to be failed back:
/// it would go on from there, not from where the failover left the topic (a second round,
/// or a policy under which it mirrored the topic before). Such progress is the operator's
/// to remove (`kmirror offsets`), knowingly.
async fn refuse_stored_progress(
    b: &Cluster,
    reverse: &ResolvedFlow,
    plans: &[&TopicPlan],
) -> Result<(), Failed> {
    let group = crate::flow::progress_group(&reverse.source.alias, &reverse.target.alias);
    let client = b.group_client(&group).map_err(|e| (2, e.to_string()))?;
    let partitions: Vec<(String, i32)> = plans
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.on_b.clone(), p.partition)))
        .collect();
    let stored = b
        .committed(&client, &group, &partitions)
        .await
        .map_err(|e| (2, e.to_string()))?;
    if let Some(c) = stored.first() {
        return Err((
            1,
            format!(
                "flow {} has stored progress for {}[{}] (offset {}) in its group {group} on {}: it would mirror from there, not from where the failover left the topic; nothing was changed (remove that progress first if it is stale)",
                reverse.name, c.topic, c.partition, c.offset, b.alias
            ),
        ));
    }
    Ok(())
}

/// Where B's era of a partition begins on B, and where A's divergent tail begins on A.
/// The newest offset sync names the last record that reached B (a graceful stop flushes
/// it; the offset-syncs topic is compacted, so it outlives the flow's stored progress,
/// which the broker expires once nobody commits it): B's era begins just after that
/// record's copy, A's tail just after the record. Stored progress past it (`mirrored`)
/// is trusted only when what lies between on A is no record (transaction markers, aborted
/// records); otherwise the map cannot say where those records went and the partition is
/// refused. No sync at all: nothing was mirrored, unless progress says otherwise.
async fn resume_at(
    store: &OffsetSyncStore,
    reader: &StreamConsumer,
    (topic, p): (&str, i32),
    mirrored: Option<i64>,
) -> Result<(i64, i64), Failed> {
    let refused = |why: String| {
        (
            1,
            format!(
                "{topic}[{p}]: {why}, so where the failover left it on the target is not known exactly; nothing was changed"
            ),
        )
    };
    let Some(last) = store.newest_upstream(topic, p) else {
        return match mirrored {
            None | Some(0) => Ok((0, 0)),
            Some(m) => Err(refused(format!(
                "its progress says {m} records were mirrored but no offset sync places one"
            ))),
        };
    };
    let at = store.exact(topic, p, last).ok_or_else(|| {
        refused(format!(
            "the newest offset sync does not place offset {last}"
        ))
    })?;
    if let Some(m) = mirrored.filter(|m| *m > last + 1) {
        let between = read_range(reader, topic, p, last + 1, m)
            .await
            .map_err(|e| (1, e))?;
        if !between.is_empty() {
            return Err(refused(format!(
                "the offset syncs place its records up to offset {last} only, not the last one mirrored ({})",
                m - 1
            )));
        }
        return Ok((at + 1, m));
    }
    Ok((at + 1, last + 1))
}

/// The quarantine topic of `topic` (on A).
fn quarantine_topic(topic: &str) -> String {
    format!("kmirror-quarantine.{topic}.internal")
}

/// The reverse flow's control topic on A, created if missing, and a writer to it.
async fn home_writer(
    a: &Cluster,
    topic: &str,
    reverse: &ResolvedFlow,
) -> Result<InternalWriter, Failed> {
    let rf = reverse.settings.replication_factor;
    a.ensure_internal_topic(topic, rf, Some(control::CONTROL_SINGLE))
        .await
        .map_err(|e| (1, e.to_string()))?
        .map_err(|e| (1, e.to_string()))?;
    InternalWriter::new(a, topic).map_err(|e| (1, e.to_string()))
}

/// Copies each partition's divergent tail to the quarantine topic (created, with the
/// topic's partition count and no retention limit, once there is something to copy),
/// going on after the last record an interrupted run copied. A's end is read again after
/// each copy: records written meanwhile (producers not stopped yet) are copied too; a
/// partition still growing after a few rounds is refused.
async fn quarantine(
    a: &Cluster,
    reader: &StreamConsumer,
    plan: &TopicPlan,
    quarantine_topic: &str,
    (reverse, json): (&ResolvedFlow, bool),
) -> Result<BTreeMap<i32, Quarantined>, Failed> {
    const ROUNDS: usize = 5;
    let mut out = BTreeMap::new();
    let mut producer: Option<FutureProducer> = None;
    let on_a = a
        .topics()
        .await
        .map_err(|e| (1, e.to_string()))?
        .get(&plan.topic)
        .copied()
        .unwrap_or(0);
    for p in plan.partitions.iter().filter(|p| p.partition < on_a) {
        let (from, mut to) = p.tail;
        let mut rounds = 0;
        loop {
            if to > from {
                if producer.is_none() {
                    producer = Some(open_quarantine(a, plan, quarantine_topic, reverse).await?);
                }
                let producer = producer.as_ref().expect("opened above");
                let copied = already_copied(reader, quarantine_topic, p.partition).await?;
                let at = copied.map_or(from, |o| o + 1).max(from);
                copy(
                    reader,
                    producer,
                    (&plan.topic, p.partition),
                    (at, to),
                    quarantine_topic,
                )
                .await?;
            }
            let now = end_of(reader, &plan.topic, p.partition).await?;
            if now <= to {
                break;
            }
            rounds += 1;
            if rounds >= ROUNDS {
                return Err((
                    1,
                    format!(
                        "{}[{}] keeps growing on {} ({now} records now): stop its producers, then run the failback again (it goes on where it stopped)",
                        plan.topic, p.partition, a.alias
                    ),
                ));
            }
            to = now;
        }
        if to <= from {
            continue;
        }
        let records = end_of(reader, quarantine_topic, p.partition).await?;
        say(
            json,
            &format!(
                "{}[{}]: its divergent tail, offsets {from}..{to}, is in {quarantine_topic} ({records} record(s))",
                plan.topic, p.partition
            ),
        );
        out.insert(
            p.partition,
            Quarantined {
                from,
                to,
                records: records as u64,
            },
        );
    }
    Ok(out)
}

/// Creates the quarantine topic (kept until deleted: it may be the only copy of the tail)
/// and a producer to it.
async fn open_quarantine(
    a: &Cluster,
    plan: &TopicPlan,
    quarantine_topic: &str,
    reverse: &ResolvedFlow,
) -> Result<FutureProducer, Failed> {
    let spec = TopicSpec {
        name: quarantine_topic.to_string(),
        partitions: plan.partitions.len() as i32,
        replication_factor: reverse.settings.replication_factor,
        configs: vec![
            ("retention.ms".into(), "-1".into()),
            ("retention.bytes".into(), "-1".into()),
        ],
    };
    for (_, created) in a.create_topics(&[spec]).await {
        created.map_err(|e| (1, e.to_string()))?;
    }
    a.producer(&[("enable.idempotence", "true")])
        .map_err(|e| (1, e.to_string()))
}

/// Copies the records of `topic`[`partition`] at offsets `from..to` to the same partition
/// of `quarantine_topic`, in order, each with a header naming its origin.
async fn copy(
    reader: &StreamConsumer,
    producer: &FutureProducer,
    (topic, partition): (&str, i32),
    (from, to): (i64, i64),
    quarantine_topic: &str,
) -> Result<(), Failed> {
    let mut at = from;
    while at < to {
        let stretch_end = (at + COPY_STRETCH).min(to);
        let records = read_range(reader, topic, partition, at, stretch_end)
            .await
            .map_err(|e| (1, e))?;
        let origins: Vec<String> = records
            .iter()
            .map(|r| format!("{topic}/{partition}/{}", r.offset))
            .collect();
        // Sent together (the idempotent producer keeps their order), awaited together.
        let sends = records.iter().zip(&origins).map(|(r, origin)| {
            let mut headers = OwnedHeaders::new();
            for (k, v) in &r.headers {
                headers = headers.insert(Header {
                    key: k,
                    value: v.as_deref(),
                });
            }
            headers = headers.insert(Header {
                key: QUARANTINED_FROM,
                value: Some(origin.as_bytes()),
            });
            let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(quarantine_topic)
                .partition(partition)
                .headers(headers);
            if let Some(k) = &r.key {
                record = record.key(k);
            }
            if let Some(v) = &r.value {
                record = record.payload(v);
            }
            if let Some(ts) = r.timestamp {
                record = record.timestamp(ts);
            }
            async move {
                producer
                    .send(record, Duration::from_secs(60))
                    .await
                    .map_err(|(e, _)| (1, format!("copying {origin} to {quarantine_topic}: {e}")))
            }
        });
        futures::future::try_join_all(sends).await?;
        at = stretch_end;
    }
    Ok(())
}

/// The origin offset of the last record in the quarantine partition, if any.
async fn already_copied(
    reader: &StreamConsumer,
    topic: &str,
    partition: i32,
) -> Result<Option<i64>, Failed> {
    let end = end_of(reader, topic, partition).await?;
    if end == 0 {
        return Ok(None);
    }
    let last = read_range(reader, topic, partition, end - 1, end)
        .await
        .map_err(|e| (1, e))?;
    Ok(last.last().and_then(|r| {
        let (_, v) = r
            .headers
            .iter()
            .rev()
            .find(|(k, _)| k == QUARANTINED_FROM)?;
        let text = std::str::from_utf8(v.as_deref()?).ok()?;
        text.rsplit('/').next()?.parse().ok()
    }))
}

/// A partition's end offset (asked again for up to 30 s while the partition has no
/// leader yet: a topic just created).
async fn end_of(reader: &StreamConsumer, topic: &str, partition: i32) -> Result<i64, Failed> {
    use rdkafka::consumer::Consumer;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match reader.fetch_watermarks(topic, partition, Duration::from_secs(10)) {
            Ok((_, high)) => return Ok(high),
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::debug!(topic, partition, error = %e, "asking for the end again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err((1, format!("{topic}[{partition}]: {e}"))),
        }
    }
}

fn show(plans: &[TopicPlan], a: &Cluster, b: &Cluster, json: bool) {
    let out = |line: String| say(json, &line);
    for plan in plans {
        if let Some(done) = &plan.done {
            out(format!(
                "{} -> {}: failed back already (its tail in {})",
                plan.on_b, plan.topic, done.quarantine_topic
            ));
            continue;
        }
        out(format!(
            "{} on {} goes home to {} on {}:",
            plan.on_b, b.alias, plan.topic, a.alias
        ));
        out(format!(
            "  {:>4}  {:>20}  {:>12}  {:>10}",
            "part", "divergent tail on A", "tail offsets", "B from"
        ));
        for p in &plan.partitions {
            out(format!(
                "  {:>4}  {:>20}  {:>12}  {:>10}",
                p.partition,
                format!("{}..{}", p.tail.0, p.tail.1),
                p.tail.1 - p.tail.0,
                p.resume
            ));
        }
    }
}
