//! One instance at 1,000 partitions (100 topics x 10 partitions): kmirror's peak RSS and
//! thread count while it mirrors them all, how long until every record is acked, and the
//! steady rate (records/s from the first tenth of the records to the last, as the mirror
//! bench measures it at 12 partitions).
//!
//! `cargo xtask plugins && cargo bench -p kmirror --bench scale` (`TOPICS`, `PER_PARTITION`)

#[path = "../../tests/e2e/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};
use support::{Broker, Client, Kmirror, free_addr, http_get, write_config};

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("scale: benchmark ({})", support::broker_label());
        return;
    }
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (topics, per) = (env("TOPICS", 100), env("PER_PARTITION", 100));
    const PARTITIONS: i32 = 10;
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    let value = vec![b'v'; 200];
    for t in 0..topics {
        let name = format!("scale-{t}");
        src.create_topic(&name, PARTITIONS);
        for p in 0..PARTITIONS {
            for i in 0..per {
                src.produce(
                    &name,
                    p,
                    format!("{i}").as_bytes(),
                    &value,
                    &[("n", b"1")],
                    1_700_000_000_000,
                );
            }
        }
    }
    src.flush();
    let total = topics * PARTITIONS as usize * per;
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let config = write_config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        "emit_heartbeats_enabled = false\ntopic_filter = { plugin = \"regex_filter.wasm\", config = { \"topics\" = \"scale-.*\" } }\nreplication_policy = { plugin = \"default_policy.wasm\" }",
    );
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        format!("[status]\nlisten = \"{status}\"\n\n{text}"),
    )
    .expect("config");
    let started = Instant::now();
    let mut k = Kmirror::start(&config, &dir.path().join("kmirror.log"));
    let deadline = started + Duration::from_secs(600);
    let mut tenth: Option<(Instant, usize)> = None;
    loop {
        let done = http_get(&status, "/status")
            .and_then(|(_, s)| s["flows"][0]["records"].as_u64())
            .unwrap_or(0) as usize;
        if tenth.is_none() && done >= total / 10 {
            tenth = Some((Instant::now(), done));
        }
        if done >= total {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {done} of {total} after 600 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    let steady = tenth.map_or(0.0, |(at, done)| {
        (total - done) as f64 / at.elapsed().as_secs_f64().max(1e-3)
    });
    let owned = http_get(&status, "/status")
        .map(|(_, s)| {
            s["flows"][0]["partitions"].as_object().map_or(0, |t| {
                t.values()
                    .map(|p| p.as_object().map_or(0, |p| p.len()))
                    .sum::<usize>()
            })
        })
        .unwrap_or(0);
    let pid = k.pid().expect("pid");
    let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |key: &str| {
        proc_status
            .lines()
            .find(|l| l.starts_with(key))
            .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
            .unwrap_or_default()
    };
    println!(
        "{} partitions ({topics} topics x {PARTITIONS}), {total} records of 200 B: all acked {took:.1?} after start; steady {steady:.0} records/s; partitions owned {owned}; peak RSS {} MiB; threads {}",
        topics * PARTITIONS as usize,
        field("VmHWM:").parse::<u64>().unwrap_or(0) / 1024,
        field("Threads:")
    );
    assert_eq!(k.stop(), Some(0));
}
