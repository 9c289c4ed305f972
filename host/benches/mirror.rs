//! Mirror throughput, side by side in one run on the same preloaded data (3 topics x 4
//! partitions, records with a key and a header, 200 B and 1 KiB values):
//!
//! - (a) `bare`: a bare rdkafka consume->produce loop with kmirror's client settings
//!   (BaseConsumer + ThreadedProducer, idempotent, acks=all, linger 50 ms, fetch queue
//!   backoff 10 ms; its queues 64 MiB + 32 MiB, more than kmirror's defaults: the loop
//!   has no byte budget to keep a small queue from filling), one process;
//! - (b) `pipe`: what a user without a mirror writes: `pipe.py`, a consume->produce loop on
//!   confluent-kafka with the same producer guarantees, one process per topic;
//! - (c) `kmirror`: the real binary with the default WASM policy and topic filter
//!   (`default_policy.wasm`, `regex_filter.wasm`);
//! - (d) `kmirror exactly-once`: the same with `exactly_once = true` (default transaction
//!   settings; `EOS_SHARDS=n` sets its shard count, `EOS_EXTRA` adds flow lines, e.g.
//!   `EOS_EXTRA='transaction_interval = "3s"'`); its records count once their
//!   transaction is committed;
//! - (e) `produce alone`: the data produced into a fresh target broker by one rdkafka
//!   producer with (a)'s settings, nothing consumed;
//! - (f) `consume alone`: the data consumed from the source by one rdkafka consumer with
//!   (a)'s settings, nothing produced. The slower of (e) and (f) is the brokers' limit on
//!   this machine: what no mirror can beat; kmirror's steady rate is reported as a fraction
//!   of it;
//! - (g) `produce alone, txns`: (e) by one transactional producer committing every second:
//!   the brokers' limit for exactly-once.
//!
//! `CONTENDERS=cd` runs only some of them (default `abcdefg`).
//!
//! Each contender writes to a fresh target broker. Reported per contender, median of
//! `REPS` (default 3) runs: records/s and MB/s from process start and in steady state (first
//! record to last), CPU seconds (user + system), peak RSS; then the ratios.
//!
//! `scripts/bench.sh mirror` (or `cargo bench -p kmirror --bench mirror`; `RECORDS=n` per
//! size, default 300000; `REPS=n`). For kmirror's runs: `TASKS=n` sets
//! `replication_tasks`; `KMIRROR_FLOW` adds flow lines to the at-least-once runs (e.g.
//! `KMIRROR_FLOW='single_instance = true'`: no group to join at start); `SOURCE_RDKAFKA` / `TARGET_RDKAFKA` (`key=value,…`) add librdkafka
//! settings to the source / target cluster (to measure a queue size or `linger.ms`);
//! `KMIRROR_LOG` and `BENCH_LOG=file` keep its log; `PERF_OUT=path` a CPU profile.

mod common;
#[path = "../../tests/e2e/support/mod.rs"]
mod support;

use common::{Run, median, now_s};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{Broker, Client};

const TOPICS: usize = 3;
const PARTITIONS: i32 = 4;

fn topic(size: usize, t: usize) -> String {
    format!("bench-{size}-{t}")
}

fn producer(dst: &str) -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", dst)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "50")
        .set("compression.type", "none")
        .set("queue.buffering.max.messages", "100000")
        .set("queue.buffering.max.kbytes", "65536")
        .create()
        .expect("producer")
}

fn consumer(src: &str, size: usize) -> BaseConsumer {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", src)
        .set("group.id", "bare")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("queued.max.messages.kbytes", "32768")
        .set("fetch.queue.backoff.ms", "10")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for t in 0..TOPICS {
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(&topic(size, t), p, Offset::Beginning)
                .expect("tpl");
        }
    }
    c.assign(&tpl).expect("assign");
    c
}

/// (e), run as `mirror --produce-alone DST SIZE COUNT`: produces the preloaded data's
/// shape (same keys, values, header, spread) into `bare-<topic>`, prints the times.
fn produce_alone(dst: &str, size: usize, count: usize) {
    produce_alone_as(dst, size, count, false)
}

/// (g), run as `mirror --produce-alone-txn DST SIZE COUNT`: the same in transactions
/// committed every second (exactly-once's default `transaction_interval`) by one
/// transactional producer: the brokers' limit for exactly-once.
fn produce_alone_txn(dst: &str, size: usize, count: usize) {
    produce_alone_as(dst, size, count, true)
}

fn produce_alone_as(dst: &str, size: usize, count: usize, txn: bool) {
    let p = if txn {
        let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", dst)
            .set("transactional.id", "bench-produce-alone")
            .set("acks", "all")
            .set("linger.ms", "100")
            .set("compression.type", "none")
            .set("queue.buffering.max.messages", "100000")
            .set("queue.buffering.max.kbytes", "65536")
            .create()
            .expect("producer");
        p.init_transactions(Duration::from_secs(30)).expect("init");
        p.begin_transaction().expect("begin");
        p
    } else {
        producer(dst)
    };
    let value = vec![b'v'; size];
    let first = now_s();
    let mut began = Instant::now();
    for i in 0..count {
        if txn && began.elapsed() >= Duration::from_secs(1) {
            p.commit_transaction(Duration::from_secs(60))
                .expect("commit");
            p.begin_transaction().expect("begin");
            began = Instant::now();
        }
        let (t, part) = (i % TOPICS, ((i / TOPICS) % PARTITIONS as usize) as i32);
        let (target, id) = (format!("bare-{}", topic(size, t)), i.to_string());
        let headers = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
            key: "id",
            value: Some(id.as_bytes()),
        });
        let mut r = Some(
            BaseRecord::<'_, [u8], [u8]>::to(&target)
                .partition(part)
                .key(id.as_bytes())
                .payload(&value)
                .headers(headers)
                .timestamp(1_700_000_000_000 + i as i64),
        );
        while let Some(rec) = r.take() {
            if let Err((_, back)) = p.send(rec) {
                p.poll(Duration::from_millis(5));
                r = Some(back);
            }
        }
    }
    if txn {
        p.commit_transaction(Duration::from_secs(60))
            .expect("commit");
    }
    p.flush(Duration::from_secs(120)).expect("flush");
    println!("first={first} last={} hwm_kb={}", now_s(), hwm_kb());
}

/// (f), run as `mirror --consume-alone SRC SIZE COUNT`: reads every record (touching key,
/// value and headers as a mirror does), prints the times.
fn consume_alone(src: &str, size: usize, count: usize) {
    let c = consumer(src, size);
    let (mut read, mut first, mut bytes) = (0, None, 0usize);
    let deadline = Instant::now() + Duration::from_secs(600);
    while read < count {
        assert!(
            Instant::now() < deadline,
            "consumed {read} of {count} in 600 s"
        );
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            first.get_or_insert_with(now_s);
            bytes += m.key().map_or(0, <[u8]>::len) + m.payload().map_or(0, <[u8]>::len);
            bytes += m.headers().map_or(0, |h| {
                h.iter()
                    .map(|h| h.value.map_or(0, <[u8]>::len))
                    .sum::<usize>()
            });
            read += 1;
        }
    }
    println!(
        "first={} last={} bytes={bytes} hwm_kb={}",
        first.unwrap_or(0.0),
        now_s(),
        hwm_kb()
    );
}

/// The bare loop, run as `mirror --bare SRC DST SIZE COUNT`: copies every partition of the
/// size's topics to `bare-<topic>`, prints `first=<s> last=<s>`.
fn bare(src: &str, dst: &str, size: usize, count: usize) {
    let c = consumer(src, size);
    let p = producer(dst);
    let (mut copied, mut first) = (0, None);
    while copied < count {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            first.get_or_insert_with(now_s);
            let target = format!("bare-{}", m.topic());
            let mut r: BaseRecord<'_, [u8], [u8]> =
                BaseRecord::to(&target).partition(m.partition());
            if let Some(k) = m.key() {
                r = r.key(k);
            }
            if let Some(v) = m.payload() {
                r = r.payload(v);
            }
            if let Some(h) = m.headers() {
                r = r.headers(h.detach());
            }
            if let Some(ts) = m.timestamp().to_millis() {
                r = r.timestamp(ts);
            }
            let mut r = Some(r);
            while let Some(rec) = r.take() {
                if let Err((_, back)) = p.send(rec) {
                    p.poll(Duration::from_millis(5));
                    r = Some(back);
                }
            }
            copied += 1;
        }
    }
    p.flush(Duration::from_secs(120)).expect("flush");
    println!(
        "first={} last={} hwm_kb={}",
        first.unwrap_or(0.0),
        now_s(),
        hwm_kb()
    );
}

fn parse_times(out: &str) -> (f64, f64, f64) {
    let get = |k: &str| {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (get("first="), get("last="), get("hwm_kb="))
}

/// This process's peak RSS in KiB (`VmHWM`). A child's `ru_maxrss` from `wait4` cannot be
/// used: Linux carries the parent's peak over the exec, so every child would report at
/// least the benchmark's own (preloading) footprint.
fn hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Runs child processes to completion; their combined wall, steady (first record of any
/// to last of all), CPU (user + system, all of them) and the largest peak RSS (as each
/// child reports it: `hwm_kb=`).
fn run_children(cmds: Vec<Command>) -> Run {
    let started = Instant::now();
    let mut children: Vec<_> = cmds
        .into_iter()
        .map(|mut c| c.stdout(Stdio::piped()).spawn().expect("child"))
        .collect();
    let readers: Vec<_> = children
        .iter_mut()
        .map(|c| {
            let mut out = c.stdout.take().expect("stdout");
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = std::io::Read::read_to_string(&mut out, &mut text);
                text
            })
        })
        .collect();
    let (mut cpu, mut rss) = (0.0, 0.0f64);
    for c in &children {
        // SAFETY: waiting for our own child; both out-parameters are valid.
        let mut status = 0;
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::wait4(c.id() as i32, &mut status, 0, &mut usage) };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        cpu += secs(usage.ru_utime) + secs(usage.ru_stime);
    }
    let total = started.elapsed().as_secs_f64();
    let (mut first, mut last) = (f64::MAX, 0.0f64);
    for r in readers {
        let (f, l, hwm) = parse_times(&r.join().unwrap_or_default());
        first = first.min(f);
        last = last.max(l);
        rss = rss.max(hwm / 1024.0);
    }
    drop(children);
    Run {
        total,
        steady: (last - first).max(1e-3),
        cpu,
        rss,
    }
}

fn preload(addr: &str, size: usize, n: usize) -> Vec<Vec<usize>> {
    let c = Client::new(addr);
    let value = vec![b'v'; size];
    let mut counts = vec![vec![0usize; PARTITIONS as usize]; TOPICS];
    for t in 0..TOPICS {
        c.create_topic(&topic(size, t), PARTITIONS);
    }
    for i in 0..n {
        let (t, p) = (i % TOPICS, ((i / TOPICS) % PARTITIONS as usize) as i32);
        let id = i.to_string();
        c.produce(
            &topic(size, t),
            p,
            id.as_bytes(),
            &value,
            &[("id", id.as_bytes())],
            1_700_000_000_000 + i as i64,
        );
        counts[t][p as usize] += 1;
    }
    c.flush();
    counts
}

fn run_bare(src: &str, size: usize, n: usize) -> Run {
    let dst = Broker::start();
    let c = Client::new(&dst.addr);
    for t in 0..TOPICS {
        c.create_topic(&format!("bare-{}", topic(size, t)), PARTITIONS);
    }
    let mut cmd = Command::new(std::env::current_exe().expect("exe"));
    cmd.args(["--bare", src, &dst.addr, &size.to_string(), &n.to_string()]);
    run_children(vec![cmd])
}

fn run_alone(flag: &str, src: &str, size: usize, n: usize) -> Run {
    let mut cmd = Command::new(std::env::current_exe().expect("exe"));
    // Kept until the run ends (only a producing contender needs a target).
    let _dst;
    if flag != "--consume-alone" {
        let dst = Broker::start();
        let c = Client::new(&dst.addr);
        for t in 0..TOPICS {
            c.create_topic(&format!("bare-{}", topic(size, t)), PARTITIONS);
        }
        cmd.args([flag, &dst.addr, &size.to_string(), &n.to_string()]);
        _dst = Some(dst);
    } else {
        cmd.args([flag, src, &size.to_string(), &n.to_string()]);
        _dst = None;
    }
    run_children(vec![cmd])
}

fn run_pipe(src: &str, size: usize, counts: &[Vec<usize>]) -> Run {
    let dst = Broker::start();
    let c = Client::new(&dst.addr);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/pipe.py");
    let cmds = (0..TOPICS)
        .map(|t| {
            c.create_topic(&format!("pipe-{}", topic(size, t)), PARTITIONS);
            let per: Vec<String> = counts[t].iter().map(|n| n.to_string()).collect();
            let mut cmd = Command::new("python3");
            cmd.arg(&script).args([
                src,
                &dst.addr,
                &topic(size, t),
                &format!("pipe-{}", topic(size, t)),
                &per.join(","),
            ]);
            cmd
        })
        .collect();
    run_children(cmds)
}

fn run_kmirror(src: &str, size: usize, n: usize, rep: usize, flow_extra: &str) -> Run {
    let cache = tempfile::tempdir().expect("tempdir");
    let profile = std::env::var("PERF_OUT")
        .ok()
        .map(|out| format!("{out}.{size}.{rep}"));
    common::run_kmirror(
        src,
        &format!("bench-{size}-.*"),
        n,
        rep,
        &support::plugins_dir(),
        cache.path(),
        flow_extra,
        profile,
    )
}

struct Summary {
    rate_total: f64,
    rate_steady: f64,
    mbps: f64,
    cpu: f64,
    rss: f64,
}

fn summarize(runs: &[Run], n: usize, size: usize) -> Summary {
    let bytes = (n * (size + 8)) as f64 / 1e6;
    Summary {
        rate_total: median(runs.iter().map(|r| n as f64 / r.total).collect()),
        rate_steady: median(runs.iter().map(|r| n as f64 / r.steady).collect()),
        mbps: median(runs.iter().map(|r| bytes / r.steady).collect()),
        cpu: median(runs.iter().map(|r| r.cpu).collect()),
        rss: median(runs.iter().map(|r| r.rss).collect()),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        println!("mirror: benchmark ({})", support::broker_label());
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--bare") {
        let a = &args[i + 1..];
        bare(
            &a[0],
            &a[1],
            a[2].parse().expect("size"),
            a[3].parse().expect("count"),
        );
        return;
    }
    for (flag, run) in [
        ("--produce-alone", produce_alone as fn(&str, usize, usize)),
        ("--consume-alone", consume_alone),
        ("--produce-alone-txn", produce_alone_txn),
    ] {
        if let Some(i) = args.iter().position(|a| a == flag) {
            let a = &args[i + 1..];
            run(
                &a[0],
                a[1].parse().expect("size"),
                a[2].parse().expect("count"),
            );
            return;
        }
    }
    let n: usize = std::env::var("RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300_000);
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let sizes: Vec<usize> = std::env::var("SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_else(|| vec![200, 1024]);
    // `EOS_SHARDS=n`: the exactly-once contender's shard count (default: kmirror's);
    // `EOS_EXTRA`: more flow lines for it.
    let mut eos_extra = "exactly_once = true\n".to_string();
    if let Ok(n) = std::env::var("EOS_SHARDS") {
        eos_extra.push_str(&format!("exactly_once_shards = {n}\n"));
    }
    if let Ok(extra) = std::env::var("EOS_EXTRA") {
        eos_extra.push_str(&extra);
        eos_extra.push('\n');
    }
    let contenders: Vec<char> = std::env::var("CONTENDERS")
        .unwrap_or_else(|_| "abcdefg".into())
        .chars()
        .filter(|c| ('a'..='g').contains(c))
        .collect();
    let primary = Broker::start();
    println!(
        "mirror benchmark: {n} records per size, {TOPICS} topics x {PARTITIONS} partitions, key + header, {reps} runs each (median), contenders {}",
        contenders.iter().collect::<String>()
    );
    let names = [
        ('a', "(a) bare rdkafka loop"),
        ('b', "(b) confluent-kafka pipe x3"),
        ('c', "(c) kmirror, WASM plugins"),
        ('d', "(d) kmirror, exactly-once"),
        ('e', "(e) produce alone"),
        ('f', "(f) consume alone"),
        ('g', "(g) produce alone, txns"),
    ];
    for size in sizes {
        let started = Instant::now();
        let counts = preload(&primary.addr, size, n);
        println!(
            "\n== {size} B values: preloaded {n} records in {:.1?}",
            started.elapsed()
        );
        let mut runs: std::collections::BTreeMap<char, Vec<Run>> = Default::default();
        for rep in 0..reps {
            // Interleaved, each first in turn, so load drifts affect all alike.
            let mut line = Vec::new();
            for i in 0..contenders.len() {
                let which = contenders[(i + rep) % contenders.len()];
                let run = match which {
                    'a' => run_bare(&primary.addr, size, n),
                    'b' => run_pipe(&primary.addr, size, &counts),
                    'c' => run_kmirror(&primary.addr, size, n, rep, ""),
                    // Its own source alias, so its progress groups are not (c)'s: a
                    // flow without progress on the target takes the source group's.
                    'd' => run_kmirror(&primary.addr, size, n, rep + 100, &eos_extra),
                    'e' => run_alone("--produce-alone", &primary.addr, size, n),
                    'f' => run_alone("--consume-alone", &primary.addr, size, n),
                    _ => run_alone("--produce-alone-txn", &primary.addr, size, n),
                };
                line.push(format!("{which} {:.0}/s", n as f64 / run.steady));
                runs.entry(which).or_default().push(run);
            }
            println!("  run {rep} (steady): {}", line.join(", "));
        }
        let sums: std::collections::BTreeMap<char, Summary> = runs
            .iter()
            .map(|(c, r)| (*c, summarize(r, n, size)))
            .collect();
        println!(
            "  {:<28} {:>14} {:>14} {:>9} {:>9} {:>9}",
            "contender", "rec/s (start)", "rec/s (steady)", "MB/s", "CPU s", "RSS MiB"
        );
        for (c, name) in names {
            if let Some(s) = sums.get(&c) {
                println!(
                    "  {name:<28} {:>14.0} {:>14.0} {:>9.1} {:>9.2} {:>9.0}",
                    s.rate_total, s.rate_steady, s.mbps, s.cpu, s.rss
                );
            }
        }
        let ratio = |x: char, y: char, f: fn(&Summary) -> f64| {
            sums.get(&x).zip(sums.get(&y)).map(|(x, y)| f(x) / f(y))
        };
        let steady = |s: &Summary| s.rate_steady;
        let total = |s: &Summary| s.rate_total;
        if let (Some(a), Some(b)) = (ratio('c', 'a', steady), ratio('c', 'a', total)) {
            println!("  kmirror/bare {a:.2} (steady) {b:.2} (from start)");
        }
        if let (Some(a), Some(b)) = (ratio('c', 'b', steady), ratio('c', 'b', total)) {
            println!("  kmirror/pipe {a:.2} (steady) {b:.2} (from start)");
        }
        if let (Some(a), Some(b), Some(cpu)) = (
            ratio('d', 'c', steady),
            ratio('d', 'c', total),
            ratio('d', 'c', |s| s.cpu),
        ) {
            println!(
                "  exactly-once/at-least-once {a:.2} (steady) {b:.2} (from start), CPU {cpu:.2}x"
            );
        }
        // The brokers' limit: the slower of producing alone and consuming alone.
        let limit = [sums.get(&'e'), sums.get(&'f')]
            .into_iter()
            .flatten()
            .map(|s| s.rate_steady)
            .reduce(f64::min);
        if let (Some(d), Some(g)) = (sums.get(&'d'), sums.get(&'g')) {
            println!(
                "  exactly-once/transactional produce alone {:.2} (steady)",
                d.rate_steady / g.rate_steady
            );
        }
        if let Some(limit) = limit {
            for (c, what) in [('c', "kmirror"), ('d', "exactly-once")] {
                if let Some(s) = sums.get(&c) {
                    println!(
                        "  {what}/brokers' limit {:.2} (steady; limit {limit:.0}/s, the slower of (e) and (f) present)",
                        s.rate_steady / limit
                    );
                }
            }
        }
    }
}
