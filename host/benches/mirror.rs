//! Mirror throughput, side by side in one run on the same preloaded data (3 topics x 4
//! partitions, records with a key and a header, 200 B and 1 KiB values):
//!
//! - (a) `bare`: a bare rdkafka consume->produce loop with kmirror's client settings
//!   (BaseConsumer + ThreadedProducer, idempotent, acks=all, linger 5 ms), one process;
//! - (b) `pipe`: what a user without a mirror writes: `pipe.py`, a consume->produce loop on
//!   confluent-kafka with the same producer guarantees, one process per topic;
//! - (c) `kmirror`: the real binary with the default WASM policy and topic filter
//!   (`default_policy.wasm`, `regex_filter.wasm`);
//! - (d) `kmirror exactly-once`: the same with `exactly_once = true` (default transaction
//!   settings; `EOS_SHARDS=n` sets its shard count); its records count once their
//!   transaction is committed.
//!
//! Each contender writes to a fresh target broker. Reported per contender, median of
//! `REPS` (default 3) runs: records/s and MB/s from process start and in steady state (first
//! record to last), CPU seconds (user + system), peak RSS; then the ratios.
//!
//! `scripts/bench.sh mirror` (or `cargo bench -p kmirror --bench mirror`; `RECORDS=n` per
//! size, default 300000; `REPS=n`).

mod common;
#[path = "../../tests/e2e/support/mod.rs"]
mod support;

use common::{Run, median, now_s};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
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

/// The bare loop, run as `mirror --bare SRC DST SIZE COUNT`: copies every partition of the
/// size's topics to `bare-<topic>`, prints `first=<s> last=<s>`.
fn bare(src: &str, dst: &str, size: usize, count: usize) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", src)
        .set("group.id", "bare")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("queued.max.messages.kbytes", "32768")
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
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", dst)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.type", "none")
        .set("queue.buffering.max.messages", "100000")
        .set("queue.buffering.max.kbytes", "65536")
        .create()
        .expect("producer");
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
    println!("first={} last={}", first.unwrap_or(0.0), now_s());
}

fn parse_times(out: &str) -> (f64, f64) {
    let get = |k: &str| {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (get("first="), get("last="))
}

/// Runs child processes to completion; their combined wall, steady (first record of any
/// to last of all), CPU (user + system, all of them) and the largest peak RSS.
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
        rss = rss.max(usage.ru_maxrss as f64 / 1024.0);
    }
    let total = started.elapsed().as_secs_f64();
    let (mut first, mut last) = (f64::MAX, 0.0f64);
    for r in readers {
        let (f, l) = parse_times(&r.join().unwrap_or_default());
        first = first.min(f);
        last = last.max(l);
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
        println!("mirror: benchmark");
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
    // `EOS_SHARDS=n`: the exactly-once contender's shard count (default: kmirror's).
    let eos_extra = match std::env::var("EOS_SHARDS") {
        Ok(n) => format!("exactly_once = true\nexactly_once_shards = {n}\n"),
        Err(_) => "exactly_once = true\n".to_string(),
    };
    let primary = Broker::start();
    println!(
        "mirror benchmark: {n} records per size, {TOPICS} topics x {PARTITIONS} partitions, key + header, {reps} runs each (median)"
    );
    for size in sizes {
        let started = Instant::now();
        let counts = preload(&primary.addr, size, n);
        println!(
            "\n== {size} B values: preloaded {n} records in {:.1?}",
            started.elapsed()
        );
        let (mut a, mut b, mut c, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for rep in 0..reps {
            // Interleaved, each first in turn, so load drifts affect all four alike.
            for which in 0..4 {
                match (which + rep) % 4 {
                    0 => a.push(run_bare(&primary.addr, size, n)),
                    1 => b.push(run_pipe(&primary.addr, size, &counts)),
                    2 => c.push(run_kmirror(&primary.addr, size, n, rep, "")),
                    // Its own source alias, so its progress groups are not (c)'s: a
                    // flow without progress on the target takes the source group's.
                    _ => d.push(run_kmirror(&primary.addr, size, n, rep + 100, &eos_extra)),
                }
            }
            println!(
                "  run {rep}: bare {:.0}/s, pipe {:.0}/s, kmirror {:.0}/s, exactly-once {:.0}/s (steady)",
                n as f64 / a[rep].steady,
                n as f64 / b[rep].steady,
                n as f64 / c[rep].steady,
                n as f64 / d[rep].steady
            );
        }
        let (sa, sb, sc, sd) = (
            summarize(&a, n, size),
            summarize(&b, n, size),
            summarize(&c, n, size),
            summarize(&d, n, size),
        );
        println!(
            "  {:<28} {:>14} {:>14} {:>9} {:>9} {:>9}",
            "contender", "rec/s (start)", "rec/s (steady)", "MB/s", "CPU s", "RSS MiB"
        );
        for (name, s) in [
            ("(a) bare rdkafka loop", &sa),
            ("(b) confluent-kafka pipe x3", &sb),
            ("(c) kmirror, WASM plugins", &sc),
            ("(d) kmirror, exactly-once", &sd),
        ] {
            println!(
                "  {name:<28} {:>14.0} {:>14.0} {:>9.1} {:>9.2} {:>9.0}",
                s.rate_total, s.rate_steady, s.mbps, s.cpu, s.rss
            );
        }
        println!(
            "  ratios: kmirror/bare {:.2} (steady) {:.2} (from start); kmirror/pipe {:.2} (steady) {:.2} (from start)",
            sc.rate_steady / sa.rate_steady,
            sc.rate_total / sa.rate_total,
            sc.rate_steady / sb.rate_steady,
            sc.rate_total / sb.rate_total
        );
        println!(
            "  exactly-once/at-least-once {:.2} (steady) {:.2} (from start), CPU {:.2}x",
            sd.rate_steady / sc.rate_steady,
            sd.rate_total / sc.rate_total,
            sd.cpu / sc.cpu
        );
    }
}
