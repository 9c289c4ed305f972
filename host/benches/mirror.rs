//! Mirror throughput on two local brokers: kmirror (the real binary) against a bare
//! rdkafka consume->produce loop in the same run, plus kmirror's peak memory.
//!
//! `cargo xtask plugins && cargo bench -p kmirror --bench mirror` (RECORDS=n to resize).

#[path = "../../tests/e2e/support/mod.rs"]
mod support;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};
use support::{Broker, Client, Kmirror, write_config};

const PARTITIONS: i32 = 4;

fn reader(addr: &str, topic: &str) -> BaseConsumer {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("group.id", support::unique("bench-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("reader");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("tpl");
    }
    c.assign(&tpl).expect("assign");
    c
}

/// Counts records of `topic` until `n` arrived; returns when the n-th arrived.
fn count_until(addr: &str, topic: &str, n: usize, timeout: Duration) -> Instant {
    let c = reader(addr, topic);
    let (mut seen, deadline) = (0, Instant::now() + timeout);
    while seen < n {
        assert!(
            Instant::now() < deadline,
            "only {seen} of {n} records arrived in {topic}"
        );
        if let Some(Ok(_)) = c.poll(Duration::from_millis(100)) {
            seen += 1;
        }
    }
    Instant::now()
}

/// The baseline: consume every record of `topic` on `src` and produce it to `dst`.
fn bare_copy(src: &str, dst: &str, topic: &str, n: usize) -> Duration {
    let started = Instant::now();
    let c = reader(src, topic);
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", dst)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let mut copied = 0;
    while copied < n {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            let mut r: BaseRecord<'_, [u8], [u8]> =
                BaseRecord::to("baseline").partition(m.partition());
            if let Some(k) = m.key() {
                r = r.key(k);
            }
            if let Some(v) = m.payload() {
                r = r.payload(v);
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
    p.flush(Duration::from_secs(60)).expect("flush");
    started.elapsed()
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("mirror: benchmark");
        return;
    }
    let n: usize = std::env::var("RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let (primary, backup) = (Broker::start(), Broker::start());
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("bench", PARTITIONS);
    dst.create_topic("baseline", PARTITIONS);
    let value = vec![b'x'; 200];
    let started = Instant::now();
    for i in 0..n {
        src.produce(
            "bench",
            (i % PARTITIONS as usize) as i32,
            format!("{i}").as_bytes(),
            &value,
            &[],
            1_700_000_000_000,
        );
    }
    src.flush();
    println!(
        "produced {n} records of 200 bytes in {:?}",
        started.elapsed()
    );

    let bare = bare_copy(&primary.addr, &backup.addr, "bench", n);
    println!(
        "bare consume->produce: {n} records in {bare:.2?} = {:.0} records/s",
        n as f64 / bare.as_secs_f64()
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        "emit_heartbeats_enabled = false",
    );
    let started = Instant::now();
    let mut kmirror = Kmirror::start(&config, &dir.path().join("kmirror.log"));
    let done = count_until(&backup.addr, "primary.bench", n, Duration::from_secs(600));
    let took = done - started;
    let rss = kmirror.pid().and_then(peak_rss_kib);
    println!(
        "kmirror (process start to last record readable on the target): {n} records in {took:.2?} = {:.0} records/s; peak RSS {} MiB",
        n as f64 / took.as_secs_f64(),
        rss.map_or("?".to_string(), |k| (k / 1024).to_string())
    );
    assert_eq!(kmirror.stop(), Some(0));
}
