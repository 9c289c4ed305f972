//! Checkpoints for 10,000 group-partitions (1,000 groups x 10 partitions) per pass, end to
//! end on two local brokers with the real `kmirror` binary: the committed offsets of all
//! groups come from one admin client (ListConsumerGroupOffsets, all requests in flight
//! together); reported: time until all are visible, each pass's duration, and kmirror's
//! peak RSS and thread count (no client per group). Run twice in the same process: idle,
//! and while kmirror mirrors a backlog at full speed (`CHECKPOINT_LOAD` records of 200 B
//! preloaded into a 12-partition topic, default 2,000,000, about 6 s of mirroring here;
//! 0 skips this run): then also the records mirrored by the time the checkpoints became
//! visible, and kmirror's CPU.
//!
//! `cargo xtask plugins && cargo bench -p kmirror --bench checkpoints`

mod common;
#[path = "../../tests/e2e/support/mod.rs"]
mod support;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};
use support::{Broker, Client, Kmirror, free_addr, http_get, write_config};

const PARTITIONS: i32 = 10;
fn groups() -> usize {
    std::env::var("CHECKPOINT_GROUPS")
        .ok()
        .and_then(|g| g.parse().ok())
        .unwrap_or(1000)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("checkpoints: benchmark ({})", support::broker_label());
        return;
    }
    let load = std::env::var("CHECKPOINT_LOAD")
        .ok()
        .and_then(|g| g.parse().ok())
        .unwrap_or(2_000_000);
    run(0);
    if load > 0 {
        run(load);
    }
}

/// One run: the checkpoints, with `load` records to mirror at the same time.
fn run(load: usize) {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("t", PARTITIONS);
    for p in 0..PARTITIONS {
        for i in 0..20 {
            src.produce(
                "t",
                p,
                b"k",
                format!("{p}-{i}").as_bytes(),
                &[],
                1_700_000_000_000,
            );
        }
    }
    src.flush();
    for g in 0..groups() {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &primary.addr)
            .set("group.id", format!("group-{g}"))
            .create()
            .expect("group client");
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset("t", p, Offset::Offset(((g + p as usize) % 20) as i64))
                .expect("tpl");
        }
        c.commit(&tpl, CommitMode::Sync).expect("commit");
    }
    if load > 0 {
        src.create_topic("load", 12);
        let value = vec![b'v'; 200];
        for i in 0..load {
            let key = i.to_string();
            src.produce(
                "load",
                (i % 12) as i32,
                key.as_bytes(),
                &value,
                &[],
                1_700_000_000_000,
            );
        }
        src.flush();
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = "emit_checkpoints_interval = \"1s\"\nrefresh_groups_interval = \"1s\"\nemit_heartbeats_enabled = false";
    let config = write_config(dir.path(), &primary.addr, &backup.addr, extra);
    let status = free_addr();
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        format!("[status]\nlisten = \"{status}\"\n\n{text}"),
    )
    .expect("config");
    let records = || {
        http_get(&status, "/status")
            .and_then(|(_, s)| s["flows"][0]["records"].as_u64())
            .unwrap_or(0)
    };
    let started = Instant::now();
    // SAFETY: set before the child starts; read by the child only.
    unsafe { std::env::set_var("KMIRROR_LOG", "info,kmirror::flow::checkpoints=debug") };
    let mut kmirror = Kmirror::start(&config, &dir.path().join("kmirror.log"));
    let dst = Client::new(&backup.addr);
    let target = groups() * PARTITIONS as usize;
    loop {
        let n = dst
            .read_all(
                "primary.checkpoints.internal",
                1,
                target,
                Duration::from_secs(2),
            )
            .len();
        if n >= target {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "only {n} checkpoints after 300 s"
        );
    }
    let took = started.elapsed();
    let mirrored = records();
    println!(
        "{}: {target} checkpoints ({} groups x {PARTITIONS} partitions) visible on the target {took:.2?} after kmirror started; {mirrored} records mirrored by then{}; its passes:",
        if load > 0 {
            format!("while mirroring a backlog of {load} records")
        } else {
            "idle".to_string()
        },
        groups(),
        kmirror.pid().map_or(String::new(), |pid| {
            let (cpu, _) = common::usage(pid);
            format!(", kmirror CPU {cpu:.2} s")
        }),
    );
    for line in kmirror
        .logs()
        .lines()
        .filter(|l| l.contains("checkpoint pass"))
        .take(6)
    {
        println!("  {line}");
    }
    if let Some(pid) = kmirror.pid() {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        for key in ["VmHWM:", "Threads:"] {
            if let Some(l) = status.lines().find(|l| l.starts_with(key)) {
                println!("  kmirror {l}");
            }
        }
    }
    assert_eq!(kmirror.stop(), Some(0));
}
