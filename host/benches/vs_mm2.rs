//! kmirror beside MirrorMaker 2 on the same two Apache Kafka clusters and the same
//! preloaded data (one topic of 40 partitions; a key and one header per record; 1 KiB and
//! 200 B values), runs interleaved, medians of `REPS` (default 3):
//!
//! - `kmirror`: the real binary, its defaults (the built-in MM2 policy and filter);
//! - `mm2`: MirrorMaker 2 in dedicated mode (`org.apache.kafka.connect.mirror.MirrorMaker`,
//!   Apache Kafka's own jars) with its defaults, in the JVM its script starts
//!   (`connect-mirror-maker.sh`: `-Xms256M -Xmx2G`, G1);
//! - `mm2 tuned`: the same as operators tune it ([`TUNED`]): tasks = cores, producer batching
//!   and linger, consumer fetch sizes.
//!
//! Two parts (`PARTS`, default `copy,live`):
//!
//! - `copy`: each run mirrors the preloaded topic into a fresh target broker; progress is
//!   the sum of the target partitions' high watermarks, read the same way for every
//!   contender. Reported per contender: steady records/s and MB/s (from the first tenth of
//!   the records to the last), records per CPU-second of the process in that steady state,
//!   peak RSS, start to the first record on the target, and then new topics to their first
//!   record (both sides list topics every 5 s).
//! - `live` ([`live`]): a topic fed at 10,000 records/s on fresh clusters: end-to-end lag
//!   p50/p99, the delay of group offset sync, and the records a group re-reads after
//!   failing over at the checkpoints.
//!
//! `scripts/bench.sh mm2` (or `KMIRROR_TEST_BROKER=kafka cargo bench -p kmirror --bench
//! vs_mm2`); `RECORDS` per size (default 1,000,000), `REPS`, `SIZES` (default 1024,200),
//! `CONTENDERS` (default `kmirror,mm2,mm2-tuned`); `MIRROR_LOGS=dir` keeps each mirror's log.

mod common;
#[path = "vs_mm2/live.rs"]
mod live;
#[path = "../../tests/e2e/support/mod.rs"]
mod support;

use common::{median, usage};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::{Duration, Instant};
use support::{Broker, Client, kafka};

const PARTITIONS: i32 = 40;

/// New topics timed per run, each created at a random moment of the 5 s topic refresh.
const NEW_TOPICS: usize = 3;

/// MirrorMaker 2 as operators tune it for throughput (on two cores).
const TUNED: &str = "tasks.max = 2
src.consumer.fetch.max.bytes = 52428800
src.consumer.max.partition.fetch.bytes = 2097152
src.consumer.max.poll.records = 2000
backup.producer.linger.ms = 50
backup.producer.batch.size = 524288
backup.producer.buffer.memory = 67108864
backup.producer.compression.type = none
backup.offset.flush.interval.ms = 10000
emit.checkpoints.interval.seconds = 5
sync.group.offsets.interval.seconds = 5
refresh.groups.interval.seconds = 5
";

/// The JVM `connect-mirror-maker.sh` starts (its heap, and kafka-run-class's G1 options).
const MM2_JVM: [&str; 8] = [
    "-Xms256M",
    "-Xmx2G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
];

/// One run's figures.
#[derive(Debug, Clone, Copy)]
struct Figures {
    /// Records per second, steady.
    rate: f64,
    /// CPU seconds of the process in the steady state.
    steady_cpu: f64,
    /// Records copied in the steady state.
    steady_records: usize,
    /// Peak RSS, MiB.
    rss: f64,
    /// From process start to the first record on the target, s.
    first: f64,
    /// From a new source topic's first record to its arrival on the target, s, for
    /// [`NEW_TOPICS`] topics created one after another.
    new_topic: [f64; NEW_TOPICS],
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn preload(addr: &str, topic: &str, size: usize, n: usize) {
    let c = Client::new(addr);
    c.create_topic(topic, PARTITIONS);
    produce_ids(&c, topic, size, 0..n, None);
}

/// Produces the records `ids` to `topic` round-robin over its partitions (key and header
/// `id` = the number, a `size`-byte value), at `per_second` a second if given, and waits
/// for their acks.
fn produce_ids(
    c: &Client,
    topic: &str,
    size: usize,
    ids: std::ops::Range<usize>,
    per_second: Option<usize>,
) {
    let value = vec![b'v'; size];
    let (start, from) = (Instant::now(), ids.start);
    for i in ids {
        let id = i.to_string();
        c.produce(
            topic,
            (i % PARTITIONS as usize) as i32,
            id.as_bytes(),
            &value,
            &[("id", id.as_bytes())],
            1_700_000_000_000 + i as i64,
        );
        if let Some(rate) = per_second.filter(|_| i % 50 == 0) {
            let due = start + Duration::from_secs_f64((i - from) as f64 / rate as f64);
            // Pacing the feed, not waiting for a condition.
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
    }
    c.flush();
}

/// The records on `topic` of `addr` (its partitions' high watermarks), 0 while it is missing.
fn on_target(reader: &BaseConsumer, topic: &str) -> usize {
    (0..PARTITIONS)
        .map(|p| {
            reader
                .fetch_watermarks(topic, p, Duration::from_secs(5))
                .map_or(0, |(_, high)| high.max(0) as usize)
        })
        .sum()
}

/// A client of `addr` that reads high watermarks.
fn watcher(addr: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("group.id", "bench-watch")
        .create()
        .expect("reader")
}

/// Times the process `pid`, started at `started`, until `topic` on `dst` holds `n` records.
fn measure(pid: u32, started: Instant, dst: &str, topic: &str, n: usize) -> Figures {
    let reader = watcher(dst);
    let deadline = Instant::now() + Duration::from_secs(1800);
    let (mut first, mut tenth) = (None, None);
    let mut sample;
    loop {
        let done = on_target(&reader, topic);
        sample = usage(pid);
        if done > 0 {
            first.get_or_insert_with(|| started.elapsed().as_secs_f64());
        }
        if done >= n / 10 && tenth.is_none() {
            tenth = Some((Instant::now(), sample.0, done));
        }
        if done >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {done} of {n} in 30 minutes"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (at, cpu, done) = tenth.expect("a tenth");
    let secs = at.elapsed().as_secs_f64().max(1e-3);
    Figures {
        rate: (n - done) as f64 / secs,
        steady_cpu: (sample.0 - cpu).max(1e-3),
        steady_records: n - done,
        rss: sample.1,
        first: first.unwrap_or(0.0),
        new_topic: [0.0; NEW_TOPICS],
    }
}

/// Creates `fresh` on `src` with one record and returns the seconds until `mirrored` on
/// `dst` holds it (both mirrors look for new topics every 5 s).
fn new_topic(src: &str, fresh: &str, dst: &str, mirrored: &str) -> f64 {
    let c = Client::new(src);
    c.create_topic(fresh, 1);
    let reader = watcher(dst);
    let at = Instant::now();
    c.produce(fresh, 0, b"k", b"v", &[("id", b"0")], 1_700_000_000_000);
    c.flush();
    let deadline = at + Duration::from_secs(120);
    while reader
        .fetch_watermarks(mirrored, 0, Duration::from_secs(5))
        .map_or(0, |(_, high)| high)
        < 1
    {
        assert!(
            Instant::now() < deadline,
            "{mirrored} never got its first record"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    at.elapsed().as_secs_f64()
}

/// Who mirrors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    Kmirror,
    Mm2,
    Mm2Tuned,
}

impl Contender {
    fn parse(name: &str) -> Contender {
        match name {
            "kmirror" => Contender::Kmirror,
            "mm2" => Contender::Mm2,
            "mm2-tuned" => Contender::Mm2Tuned,
            other => panic!("unknown contender {other}"),
        }
    }
}

/// A mirror running from `src` (alias `alias`) to `dst` (alias `backup`).
enum Mirror {
    /// The process, and the directory of its configuration (kept while it runs).
    Kmirror(support::Kmirror, #[allow(dead_code)] tempfile::TempDir),
    Mm2(kafka::Mm2),
}

impl Mirror {
    /// Starts `who` mirroring the topics `topics` (a comma-separated list of regular
    /// expressions) with a 5 s topic refresh; `sync_groups` turns on group offset sync, off
    /// by default on both sides.
    fn start(
        who: Contender,
        src: &str,
        alias: &str,
        dst: &str,
        topics: &str,
        sync_groups: bool,
    ) -> Mirror {
        match who {
            Contender::Kmirror => {
                let dir = tempfile::tempdir().expect("tempdir");
                let config = dir.path().join("kmirror.toml");
                std::fs::write(
                    &config,
                    format!(
                        "[clusters.{alias}]\nbootstrap_servers = \"{src}\"\n[clusters.backup]\nbootstrap_servers = \"{dst}\"\n[plugins]\ndir = \"{}\"\n[[flows]]\nsource = \"{alias}\"\ntarget = \"backup\"\nreplication_factor = 1\nsync_group_offsets = {sync_groups}\ntopic_filter = {{ builtin = \"default-topic-filter\", config = {{ \"topics\" = \"{topics}\" }} }}\n",
                        dir.path().display(),
                    ),
                )
                .expect("config");
                let log = dir.path().join("kmirror.log");
                Mirror::Kmirror(support::Kmirror::start(&config, &log), dir)
            }
            Contender::Mm2 | Contender::Mm2Tuned => {
                let properties = format!(
                    "clusters = {alias}, backup
{alias}.bootstrap.servers = {src}
backup.bootstrap.servers = {dst}
{alias}->backup.enabled = true
{alias}->backup.topics = {topics}
backup->{alias}.enabled = false
backup->{alias}.emit.heartbeats.enabled = false
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.replication.factor = 1
config.storage.replication.factor = 1
status.storage.replication.factor = 1
refresh.topics.interval.seconds = 5
sync.group.offsets.enabled = {sync_groups}
{}",
                    if who == Contender::Mm2Tuned {
                        TUNED
                    } else {
                        ""
                    }
                );
                Mirror::Mm2(kafka::Mm2::start_with_jvm(&properties, &MM2_JVM))
            }
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Mirror::Kmirror(k, _) => k.pid(),
            Mirror::Mm2(m) => m.pid(),
        }
        .expect("a running mirror")
    }

    /// Stops it; with `MIRROR_LOGS=dir` its log is kept there.
    fn stop(mut self) {
        let log = match &mut self {
            Mirror::Kmirror(k, _) => {
                k.stop();
                k.logs()
            }
            Mirror::Mm2(m) => {
                m.stop();
                m.log()
            }
        };
        if let Some(dir) = std::env::var_os("MIRROR_LOGS") {
            let name = support::unique(match self {
                Mirror::Kmirror(..) => "kmirror",
                Mirror::Mm2(_) => "mm2",
            });
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::write(std::path::Path::new(&dir).join(format!("{name}.log")), log);
        }
    }
}

/// Copies the preloaded `topic` into a fresh target broker with `who`, then times a new
/// topic (`fresh-<fresh>`) to its first record there.
fn copy_run(who: Contender, src: &str, topic: &str, n: usize, fresh: &str) -> Figures {
    // A source alias of its own per run: kmirror stores its progress on the source (the
    // group `kmirror.<source>.<target>`), where a second run would find the first's.
    let alias = format!("src{}", fresh.replace('-', "x"));
    let dst = Broker::start();
    let fresh = format!("fresh-{fresh}-");
    let topics = format!("{topic}, {fresh}.*");
    let started = Instant::now();
    let mirror = Mirror::start(who, src, &alias, &dst.addr, &topics, false);
    let mut figures = measure(
        mirror.pid(),
        started,
        &dst.addr,
        &format!("{alias}.{topic}"),
        n,
    );
    // Both sides list the source's topics every 5 s: each topic is created at a random
    // moment of that period, so the figure is not the phase of one timer against another.
    let mut phase = support::Lcg(
        alias
            .bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))),
    );
    for (i, t) in figures.new_topic.iter_mut().enumerate() {
        std::thread::sleep(Duration::from_millis(phase.below(5_000)));
        let name = format!("{fresh}{i}");
        *t = new_topic(src, &name, &dst.addr, &format!("{alias}.{name}"));
    }
    mirror.stop();
    figures
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env_usize("RECORDS", 1_000_000);
    let reps = env_usize("REPS", 3);
    let sizes: Vec<usize> = std::env::var("SIZES")
        .unwrap_or("1024,200".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let contenders: Vec<String> = std::env::var("CONTENDERS")
        .unwrap_or("kmirror,mm2,mm2-tuned".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let parts = std::env::var("PARTS").unwrap_or("copy,live".into());
    if parts.contains("copy") {
        copy_part(n, reps, &sizes, &contenders);
    }
    if parts.contains("live") {
        live::part(reps, &contenders);
    }
}

/// The bulk copy of `n` preloaded records per size, and a new topic after it.
fn copy_part(n: usize, reps: usize, sizes: &[usize], contenders: &[String]) {
    let src = Broker::start();
    println!(
        "kmirror beside MirrorMaker 2 (Apache Kafka, broker: {}), {n} records per size over {PARTITIONS} partitions, median of {reps}",
        support::broker_label()
    );
    for &size in sizes {
        let topic = format!("vs-{size}");
        preload(&src.addr, &topic, size, n);
        let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); contenders.len()];
        for rep in 0..reps {
            for (i, c) in contenders.iter().enumerate() {
                let tag = match Contender::parse(c) {
                    Contender::Kmirror => "k",
                    Contender::Mm2 => "d",
                    Contender::Mm2Tuned => "t",
                };
                let f = copy_run(
                    Contender::parse(c),
                    &src.addr,
                    &topic,
                    n,
                    &format!("{size}-{rep}-{tag}"),
                );
                eprintln!("  {size} B, run {rep}, {c}: {f:?}");
                runs[i].push(f);
            }
        }
        println!(
            "\n{size} B values ({} B per record with key and header):",
            size + 20
        );
        println!(
            "{:<10} {:>12} {:>9} {:>16} {:>10} {:>14} {:>13}",
            "", "records/s", "MB/s", "records/CPU-s", "RSS MiB", "first record s", "new topic s"
        );
        let mut table = Vec::new();
        for (c, r) in contenders.iter().zip(&runs) {
            let rate = median(r.iter().map(|f| f.rate).collect());
            let per_cpu = median(
                r.iter()
                    .map(|f| f.steady_records as f64 / f.steady_cpu)
                    .collect(),
            );
            let rss = median(r.iter().map(|f| f.rss).collect());
            let first = median(r.iter().map(|f| f.first).collect());
            let fresh = median(r.iter().flat_map(|f| f.new_topic).collect());
            println!(
                "{c:<10} {rate:>12.0} {:>9.1} {per_cpu:>16.0} {rss:>10.0} {first:>14.2} {fresh:>13.2}",
                rate * (size + 20) as f64 / 1e6
            );
            table.push((c.clone(), rate, per_cpu, rss));
        }
        if let (Some(k), Some(m)) = (
            table.iter().find(|t| t.0 == "kmirror"),
            table.iter().find(|t| t.0 == "mm2-tuned"),
        ) {
            println!(
                "kmirror / tuned MM2: {:.2}x records/s, {:.2}x records per CPU-second, {:.2}x peak RSS",
                k.1 / m.1,
                k.2 / m.2,
                k.3 / m.3
            );
        }
    }
}
