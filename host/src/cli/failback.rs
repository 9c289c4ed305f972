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
    let mut plans = Vec::new();
    for (topic, route) in &o.routes {
        if let Some(done) = home.failed_back.get(&route.target) {
            plans.push(TopicPlan {
                topic: topic.clone(),
                on_b: route.target.clone(),
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
            let mirrored = pos.mirrored.unwrap_or(0);
            let resume = resume_at(&store, &reader, (topic, p), mirrored).await?;
            partitions.push(PartitionPlan {
                partition: p,
                resume,
                tail: (mirrored, end.max(mirrored)),
            });
        }
        plans.push(TopicPlan {
            topic: topic.clone(),
            on_b: route.target.clone(),
            partitions,
            done: None,
        });
    }
    show(&plans, &a, &b);
    if args.dry_run {
        return Ok(ExitCode::SUCCESS);
    }
    let writer = home_writer(&a, &home_control, &reverse).await?;
    for plan in &plans {
        if plan.done.is_some() {
            continue;
        }
        let quarantine_topic = quarantine_topic(&plan.topic);
        let quarantined = quarantine(&a, &reader, plan, &quarantine_topic, &reverse).await?;
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
        println!(
            "failing back {} -> {}: flow {} mirrors it into {} from where the failover left it",
            plan.on_b, plan.topic, reverse.name, plan.topic
        );
    }
    // The rest is the reverse flow's failover of those topics.
    let failover = FailoverArgs {
        config: args.config.clone(),
        flow: reverse.name.clone(),
        topics: plans.iter().map(|p| p.on_b.clone()).collect(),
        groups: args.groups.clone(),
        dry_run: false,
        now: args.now,
        wait: args.wait,
        json: args.json,
    };
    println!(
        "failing over {} (waiting for the daemon to mirror the failed-back topics)",
        reverse.name
    );
    cutover::failover(reverse, &failover).await
}

/// Where B's era of a partition begins on B: the target offset after the last record the
/// failover left mirrored (`mirrored` is the next source offset it would have mirrored),
/// from the exact offset map; 0 when nothing was mirrored. What lies between the last
/// placed record and `mirrored` on A must be no record (transaction markers, aborted
/// records), or the map cannot say and the partition is refused.
async fn resume_at(
    store: &OffsetSyncStore,
    reader: &StreamConsumer,
    (topic, p): (&str, i32),
    mirrored: i64,
) -> Result<i64, Failed> {
    if mirrored == 0 {
        return Ok(0);
    }
    if let Some(at) = store.exact(topic, p, mirrored - 1) {
        return Ok(at + 1);
    }
    let refused = |why: String| {
        (
            1,
            format!(
                "{topic}[{p}]: {why}, so where the failover left it on the target is not known exactly; nothing was changed"
            ),
        )
    };
    let Some(last) = store.newest_upstream(topic, p).filter(|u| *u < mirrored) else {
        return Err(refused(
            "the offset syncs place no record before it stopped".into(),
        ));
    };
    let between = read_range(reader, topic, p, last + 1, mirrored)
        .await
        .map_err(|e| (1, e))?;
    match store.exact(topic, p, last) {
        Some(at) if between.is_empty() => Ok(at + 1),
        _ => Err(refused(format!(
            "the offset syncs place its records up to offset {last} only, not the last one mirrored ({})",
            mirrored - 1
        ))),
    }
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

/// Copies each partition's divergent tail to the quarantine topic (created with the
/// topic's partition count), going on after the last record an interrupted run copied.
async fn quarantine(
    a: &Cluster,
    reader: &StreamConsumer,
    plan: &TopicPlan,
    quarantine_topic: &str,
    reverse: &ResolvedFlow,
) -> Result<BTreeMap<i32, Quarantined>, Failed> {
    let mut out = BTreeMap::new();
    let tails: Vec<&PartitionPlan> = plan
        .partitions
        .iter()
        .filter(|p| p.tail.1 > p.tail.0)
        .collect();
    if tails.is_empty() {
        return Ok(out);
    }
    let spec = TopicSpec {
        name: quarantine_topic.to_string(),
        partitions: plan.partitions.len() as i32,
        replication_factor: reverse.settings.replication_factor,
        configs: Vec::new(),
    };
    for (_, created) in a.create_topics(&[spec]).await {
        created.map_err(|e| (1, e.to_string()))?;
    }
    let producer: FutureProducer = a
        .producer(&[("enable.idempotence", "true")])
        .map_err(|e| (1, e.to_string()))?;
    for p in tails {
        let (from, to) = p.tail;
        let copied = already_copied(reader, quarantine_topic, p.partition).await?;
        let mut at = copied.map_or(from, |o| o + 1).max(from);
        while at < to {
            let stretch_end = (at + COPY_STRETCH).min(to);
            let records = read_range(reader, &plan.topic, p.partition, at, stretch_end)
                .await
                .map_err(|e| (1, e))?;
            for r in &records {
                let origin = format!("{}/{}/{}", plan.topic, p.partition, r.offset);
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
                    .partition(p.partition)
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
                producer
                    .send(record, Duration::from_secs(30))
                    .await
                    .map_err(|(e, _)| {
                        (1, format!("copying {origin} to {quarantine_topic}: {e}"))
                    })?;
            }
            at = stretch_end;
        }
        let records = end_of(reader, quarantine_topic, p.partition).await?;
        println!(
            "{}[{}]: its divergent tail, offsets {from}..{to}, is in {quarantine_topic} ({records} record(s))",
            plan.topic, p.partition
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

fn show(plans: &[TopicPlan], a: &Cluster, b: &Cluster) {
    for plan in plans {
        if let Some(done) = &plan.done {
            println!(
                "{} -> {}: failed back already (its tail in {})",
                plan.on_b, plan.topic, done.quarantine_topic
            );
            continue;
        }
        println!(
            "{} on {} goes home to {} on {}:",
            plan.on_b, b.alias, plan.topic, a.alias
        );
        println!(
            "  {:>4}  {:>20}  {:>12}  {:>10}",
            "part", "divergent tail on A", "tail offsets", "B from"
        );
        for p in &plan.partitions {
            println!(
                "  {:>4}  {:>20}  {:>12}  {:>10}",
                p.partition,
                format!("{}..{}", p.tail.0, p.tail.1),
                p.tail.1 - p.tail.0,
                p.resume
            );
        }
    }
}
