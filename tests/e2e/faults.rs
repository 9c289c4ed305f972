//! The fault suite, end to end: the real binary between two Tansu brokers, every record a
//! unique id counted on the target at the end (by a client that is not kmirror's).
//!
//! - `kill -9` ten times at random moments under load: nothing missing, duplicates at most
//!   one in-flight window per kill;
//! - a restart under continuous load: checkpoints resume within a few emit intervals;
//! - a record the target will never take: only its partition stops, healthy partitions get
//!   every record exactly once, `/status` names the record;
//! - the target, then the source, unreachable for a while behind a proxy, and back;
//! - a graceful stop during the catch-up of a large topic: nothing missing, nothing twice.
//!
//! Broker stop/start is not tested: this Tansu build keeps data in memory only, so a
//! restarted broker comes back empty; the proxy cuts connections to a broker that stays.
//! The figures each test prints are the ones in docs/reliability.md.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use support::*;

const T: Duration = Duration::from_secs(120);

/// Settings that make the fault tests quick: a short session so a killed instance's
/// partitions move soon, a short stop deadline.
const FAST: &str =
    "session_timeout = \"6s\"\nshutdown_timeout = \"5s\"\nunreachable_after = \"2s\"";

fn config(
    dir: &Path,
    primary: &str,
    backup: &str,
    status: &str,
    extra: &str,
) -> std::path::PathBuf {
    let path = write_config(dir, primary, backup, &format!("{FAST}\n{extra}"));
    let text = std::fs::read_to_string(&path).expect("config");
    std::fs::write(&path, format!("[status]\nlisten = \"{status}\"\n\n{text}")).expect("config");
    path
}

/// Records acked by the running instance, from its `/status`.
fn mirrored_by(status: &str) -> Option<u64> {
    http_get(status, "/status")?.1["flows"][0]["records"].as_u64()
}

#[test]
fn kill_9_ten_times_under_load_loses_nothing() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("load", 4);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = config(dir.path(), &primary.addr, &backup.addr, &status, "");
    let log = dir.path().join("kmirror.log");
    const RATE: usize = 400;
    let mut feeder = Feeder::start(&primary.addr, "load", 4, RATE);
    let mut rng = Lcg(0x6b6d_6972_726f_72);
    let kills = 10;
    for round in 0..kills {
        let mut k = Kmirror::start(&cfg, &log);
        wait_for(&format!("round {round}: this instance mirrors"), T, || {
            (mirrored_by(&status)? > 0).then_some(())
        });
        // A random moment while records flow.
        std::thread::sleep(Duration::from_millis(200 + rng.below(2500)));
        k.kill9();
    }
    let mut last = Kmirror::start(&cfg, &log);
    std::thread::sleep(Duration::from_secs(2)); // the feed goes on a little after the last kill
    let produced = feeder.stop();
    let (missing, duplicated) = tally(&dst, "primary.load", 4, produced, T);
    eprintln!(
        "FIGURES kill -9 x{kills} under load: produced {produced}, missing {missing}, duplicated {duplicated} ({:.0} per kill)",
        duplicated as f64 / kills as f64
    );
    assert_eq!(missing, 0, "log:\n{}", last.logs());
    // One window per kill: what was acked since the last progress commit (every 500 ms
    // here) plus what was in flight. Each restart first catches up what arrived while no
    // instance ran, far faster than the feed, so a kill during the catch-up costs more
    // than half a second of feed: measured on Apache Kafka 399-548 per kill alone (the
    // code before this session's changes alike: 414-548), 862 once beside the other fault
    // tests and a Prometheus. Bounded at three seconds of feed per kill.
    assert!(
        duplicated <= kills * 3 * RATE,
        "{duplicated} duplicates for {kills} kills at {RATE} records/s"
    );
    assert_eq!(last.stop(), Some(0));
}

/// Commits, for `group` on the source, the current end of each partition of `topic`.
fn commit_ends(addr: &str, group: &str, topic: &str, partitions: i32) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("group.id", group)
        .create()
        .expect("group client");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        if let Ok((_, high)) = c.fetch_watermarks(topic, p, Duration::from_secs(5)) {
            let _ = tpl.add_partition_offset(topic, p, Offset::Offset(high));
        }
    }
    c.commit(&tpl, CommitMode::Sync).expect("commit");
}

/// The highest upstream offset checkpointed for `group` on the target.
fn newest_checkpoint(dst: &Client, group: &str) -> Option<i64> {
    dst.read_all("primary.checkpoints.internal", 1, 1, Duration::from_secs(2))
        .iter()
        .filter_map(|r| {
            let k = r.key.as_deref()?;
            let v = r.value.as_deref()?;
            let len = i16::from_be_bytes([k[0], k[1]]) as usize;
            if k.get(2..2 + len)? != group.as_bytes() {
                return None;
            }
            Some(i64::from_be_bytes(v.get(2..10)?.try_into().ok()?))
        })
        .max()
}

#[test]
fn a_restart_under_continuous_load_resumes_checkpoints() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("busy", 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &status,
        "emit_checkpoints_interval = \"1s\"\nrefresh_groups_interval = \"1s\"",
    );
    let log = dir.path().join("kmirror.log");
    // Steady writes: the offset-syncs topic never goes quiet.
    let mut feeder = Feeder::start(&primary.addr, "busy", 2, 1500);
    let mut k = Kmirror::start(&cfg, &log);
    wait_for("a first checkpoint", T, || {
        commit_ends(&primary.addr, "app", "busy", 2);
        newest_checkpoint(&dst, "app")
    });
    assert_eq!(k.stop(), Some(0), "log:\n{}", k.logs());
    let before = newest_checkpoint(&dst, "app").expect("checkpoint");
    let restarted = Instant::now();
    let mut k = Kmirror::start(&cfg, &log);
    let resumed = wait_for(
        "checkpoints resuming within a few emit intervals of the restart",
        Duration::from_secs(20),
        || {
            commit_ends(&primary.addr, "app", "busy", 2);
            newest_checkpoint(&dst, "app").filter(|n| *n > before)
        },
    );
    let took = restarted.elapsed();
    feeder.stop();
    eprintln!(
        "FIGURES restart under ~1500 records/s: checkpoints resumed {took:.1?} after the restart (upstream {before} -> {resumed})"
    );
    assert!(
        k.logs().contains("offset syncs read; translating"),
        "{}",
        k.logs()
    );
    assert_eq!(k.stop(), Some(0));
}

#[test]
fn a_record_the_target_will_not_take_stops_only_its_partition() {
    let (primary, backup) = Broker::pair();
    let dst = Client::new(&backup.addr);
    // The test's own producer may send what kmirror's default librdkafka settings refuse.
    let src = Client::with(&primary.addr, &[("message.max.bytes", "4000000")]);
    // The source topic takes the large record (Kafka's default limit is 1 MiB); the target
    // refuses it.
    src.create_topic_with("mixed", 3, &[("max.message.bytes", "4000000")]);
    let produce = |from: usize, to: usize| src.produce_ids("mixed", 3, from, to);
    produce(0, 300);
    let big = vec![b'x'; 1_500_000];
    src.produce("mixed", 0, b"poison", &big, &[], 1_700_000_000_000);
    src.flush();
    produce(300, 600);

    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = config(dir.path(), &primary.addr, &backup.addr, &status, "");
    let mut k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    let paused = wait_paused(&status, "mixed", 0);
    assert_eq!(paused["offset"], 100, "{paused}");
    assert!(
        paused["reason"]
            .as_str()
            .is_some_and(|r| r.contains("message.max.bytes")),
        "{paused}"
    );
    let counts = count_values(&dst.read_all("primary.mixed", 3, 500, Duration::from_secs(30)));
    let mut healthy_copies = BTreeMap::new();
    for i in 0..600 {
        let got = counts.get(&format!("id-{i}")).copied().unwrap_or(0);
        let expected = usize::from(i % 3 != 0 || i < 300);
        assert_eq!(got, expected, "id-{i}");
        if i % 3 != 0 {
            *healthy_copies.entry(got).or_insert(0) += 1;
        }
    }
    // Degraded while it is paused (polled: a rebalance re-pauses it at the same record).
    let (code, health) = poll_until(Duration::from_secs(60), || {
        let (code, h) = http_get(&status, "/health")?;
        (h["health"]["primary->backup"]["state"] == "degraded").then_some((code, h))
    })
    .unwrap_or_else(|| {
        panic!(
            "not degraded while paused: {:?}\nlog:\n{}",
            http_get(&status, "/health"),
            k.logs()
        )
    });
    assert_eq!(code, 200, "alive: {health}");
    let reasons = health["health"]["primary->backup"]["reasons"].to_string();
    assert!(
        reasons.contains("mixed[0] is paused at offset 100"),
        "{reasons}"
    );
    let metrics = http_text(&status, "/metrics").expect("metrics");
    assert!(
        metrics.contains("kmirror_paused_partitions{flow=\"primary->backup\"} 1"),
        "{metrics}"
    );
    assert!(k.running(), "no restart loop, no exit");
    eprintln!(
        "FIGURES poison record: healthy partitions got {} records exactly once, 0 duplicated; partition 0 paused at offset 100",
        healthy_copies.get(&1).copied().unwrap_or(0)
    );
    assert_eq!(k.stop(), Some(0));
}

#[test]
fn the_target_then_the_source_unreachable_for_a_while_loses_nothing() {
    let primary_proxied = Broker::behind_proxy();
    let backup_proxied = Broker::behind_proxy();
    let ((primary, source_proxy), (backup, target_proxy)) = (primary_proxied, backup_proxied);
    let src = Client::new(&primary.addr);
    src.create_topic("orders", 3);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = config(dir.path(), &primary.addr, &backup.addr, &status, "");
    let mut k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    let mut feeder = Feeder::start(&primary.addr, "orders", 3, 300);
    wait_for("records flowing", T, || {
        (mirrored_by(&status)? > 200).then_some(())
    });

    target_proxy.cut();
    let degraded = wait_for("the flow degraded while the target is cut off", T, || {
        let (_, h) = http_get(&status, "/health")?;
        let reasons = h["health"]["primary->backup"]["reasons"].to_string();
        (reasons.contains("has not acknowledged") || reasons.contains("unreachable"))
            .then_some(reasons)
    });
    std::thread::sleep(Duration::from_secs(3)); // the outage lasts a while
    target_proxy.restore();
    wait_for("healthy again", T, || {
        (http_get(&status, "/health")?.1["health"]["primary->backup"]["state"] == "ok")
            .then_some(())
    });
    // The feed stops while the source is cut; what it wrote is read after.
    let before_cut = feeder.stop();
    source_proxy.cut();
    std::thread::sleep(Duration::from_secs(3)); // the outage lasts a while
    source_proxy.restore();
    let dst = Client::new(&backup.addr);
    let (missing, duplicated) = tally(&dst, "primary.orders", 3, before_cut, T);
    eprintln!(
        "FIGURES target cut 3s+ then source cut 3s: produced {before_cut}, missing {missing}, duplicated {duplicated}; degraded meanwhile: {degraded}"
    );
    assert_eq!(missing, 0, "log:\n{}", k.logs());
    assert!(duplicated <= 2 * 300, "{duplicated} duplicates");
    assert!(k.running(), "kmirror rode out both outages");
    assert_eq!(k.stop(), Some(0));
}

#[test]
fn a_graceful_stop_during_catch_up_loses_and_duplicates_nothing() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("backlog", 4);
    const N: usize = 60_000;
    for i in 0..N {
        let id = format!("id-{i}");
        src.produce(
            "backlog",
            (i % 4) as i32,
            id.as_bytes(),
            id.as_bytes(),
            &[],
            1_700_000_000_000,
        );
    }
    src.flush();
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = config(dir.path(), &primary.addr, &backup.addr, &status, "");
    let log = dir.path().join("kmirror.log");
    let mut k = Kmirror::start(&cfg, &log);
    wait_for("the catch-up under way", T, || {
        (mirrored_by(&status)? > 5_000).then_some(())
    });
    let stopping = Instant::now();
    assert_eq!(k.stop(), Some(0), "log:\n{}", k.logs());
    let stop_took = stopping.elapsed();
    let mut k = Kmirror::start(&cfg, &log);
    let (missing, duplicated) = tally(&dst, "primary.backlog", 4, N, T);
    // The stop may meet a rebalance it has not joined (the group's second cooperative
    // round): it joins it to store its last progress (worker.rs, `stop`).
    let rejoined = k
        .logs()
        .contains("stored the last progress after rejoining the group");
    eprintln!(
        "FIGURES graceful stop during catch-up of {N}: stop took {stop_took:.1?}, missing {missing}, duplicated {duplicated}, rejoined a new generation to commit: {rejoined}"
    );
    assert_eq!((missing, duplicated), (0, 0), "log:\n{}", k.logs());
    assert_eq!(k.stop(), Some(0));
}
