//! Checkpoints and consumer-group failover end to end: a group consumes part of a topic
//! with gaps in its source offsets (transaction markers), kmirror emits checkpoints
//! (decoded here independently) and the group continues on the target from exactly the
//! record after its last one — nothing skipped, nothing re-read. A failover that would
//! leave out a partition the group committed on the source but that has no checkpoint is
//! refused, unless `--allow-partial` names it and commits the others.
//!
//! An *active* target group (a consumer subscribed on the target) is left alone by the
//! group offset sync and `offsets failover --apply` refuses it, naming it — on Apache Kafka
//! (Tansu's DescribeGroups returns no group for a subscribed consumer, so it cannot make a
//! group look active; the decisions are unit-tested too, `host/src/flow/checkpoint.rs`).

mod support;

use rdkafka::ClientConfig;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::path::Path;
use std::time::Duration;
use support::*;

const T: Duration = Duration::from_secs(60);

/// Produces `batches` transactions of `per` records to each partition; every commit marker
/// leaves a gap in the offsets. Values are `p<partition>-<n>`.
fn produce_transactions(addr: &str, topic: &str, partitions: i32, batches: usize, per: usize) {
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("transactional.id", unique("tx"))
        .create()
        .expect("tx producer");
    p.init_transactions(Duration::from_secs(10))
        .expect("init transactions");
    let mut n = vec![0usize; partitions as usize];
    for _ in 0..batches {
        p.begin_transaction().expect("begin");
        for part in 0..partitions {
            for _ in 0..per {
                let v = format!("p{part}-{}", n[part as usize]);
                n[part as usize] += 1;
                p.send(
                    BaseRecord::<[u8], [u8]>::to(topic)
                        .partition(part)
                        .payload(v.as_bytes()),
                )
                .map_err(|(e, _)| e)
                .expect("send");
            }
        }
        p.commit_transaction(Duration::from_secs(10))
            .expect("commit");
    }
}

/// (offset, value) of every record of a partition.
fn records(
    addr: &str,
    topic: &str,
    partition: i32,
    expected_in_partition: usize,
) -> Vec<(i64, String)> {
    let c = Client::new(addr);
    let mut recs: Vec<(i64, String)> = c
        .read_all_partition(topic, partition, expected_in_partition, T)
        .into_iter()
        .filter(|r| r.partition == partition)
        .map(|r| {
            (
                r.offset,
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned(),
            )
        })
        .collect();
    recs.sort();
    recs
}

/// `kmirror offsets SUBCOMMAND --config CFG --flow primary->backup --group GROUP [EXTRA]`.
fn offsets(
    subcommand: &str,
    cfg: &str,
    group: &str,
    extra: &[&str],
) -> (Option<i32>, String, String) {
    let mut args = vec![
        "offsets",
        subcommand,
        "--config",
        cfg,
        "--flow",
        "primary->backup",
        "--group",
        group,
    ];
    args.extend_from_slice(extra);
    kmirror_cli(&args)
}

/// The checkpoint test config, with a `/status` endpoint on `status` if given.
fn config(
    dir: &Path,
    primary: &str,
    backup: &str,
    sync: bool,
    status: Option<&str>,
) -> std::path::PathBuf {
    let extra = format!(
        "emit_checkpoints_interval = \"500ms\"\nrefresh_groups_interval = \"500ms\"\nsync_group_offsets = {sync}\nsync_group_offsets_interval = \"500ms\"\noffset_lag_max = 1000\n"
    );
    let path = write_config(dir, primary, backup, &extra);
    if let Some(status) = status {
        let text = std::fs::read_to_string(&path).expect("read config");
        std::fs::write(&path, format!("[status]\nlisten = \"{status}\"\n\n{text}"))
            .expect("write config");
    }
    path
}

/// When the flow's last checkpoint pass ran, from `/status`.
fn last_checkpoint_pass(status: &str) -> Option<i64> {
    http_get(status, "/status")?.1["flows"][0]["last_checkpoint_pass_ms"].as_i64()
}

/// Waits until `n` more checkpoint passes have run (`last_checkpoint_pass_ms` advanced `n`
/// times; it is set at the end of each pass, once its checkpoints were sent).
fn wait_checkpoint_passes(status: &str, n: usize) {
    let mut last = wait_for("a checkpoint pass in /status", T, || {
        last_checkpoint_pass(status)
    });
    for i in 1..=n {
        last = wait_for(&format!("checkpoint pass +{i} in /status"), T, || {
            last_checkpoint_pass(status).filter(|&t| t > last)
        });
    }
}

#[test]
fn groups_fail_over_to_exactly_the_next_record() {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("orders", 2);
    // 12 transactions of 9 records per partition: a commit marker after every 9 records.
    produce_transactions(&primary.addr, "orders", 2, 12, 9);
    let source: Vec<Vec<(i64, String)>> = (0..2)
        .map(|p| records(&primary.addr, "orders", p, 108))
        .collect();
    assert_eq!(source[0].len(), 108);
    assert!(
        source[0].windows(2).any(|w| w[1].0 - w[0].0 > 1),
        "the source offsets have gaps"
    );

    // Groups consume part of the topic at the source and commit their position (the offset
    // of the next record to read, as Kafka consumers do).
    let positions = [(0, source[0][40].0), (1, source[1][71].0)];
    commit(&primary.addr, "app", "orders", &positions);
    commit(&primary.addr, "console-consumer-7", "orders", &positions);
    commit(&primary.addr, "later", "orders", &[(0, source[0][10].0)]);

    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), &primary.addr, &backup.addr, false, None);
    let mut kmirror = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));

    let cps = wait_for("checkpoints for app", T, || {
        let cps = checkpoints(&backup.addr);
        let n = cps.keys().filter(|k| k.0 == "app").count();
        (n == 2 && cps.keys().any(|k| k.0 == "later")).then_some(cps)
    });
    assert!(
        !cps.keys().any(|k| k.0 == "console-consumer-7"),
        "the group filter excludes console consumers"
    );
    assert!(
        !cps.keys().any(|k| k.0.starts_with("kmirror.")),
        "kmirror's own progress group is not checkpointed"
    );

    // Each checkpoint points exactly at the mirrored copy of the next record to read.
    let target: Vec<Vec<(i64, String)>> = (0..2)
        .map(|p| records(&backup.addr, "primary.orders", p, 108))
        .collect();
    for (p, pos) in positions {
        let (up, down) = cps[&("app".to_string(), "primary.orders".to_string(), p)];
        assert_eq!(up, pos, "upstream offset is the group's committed offset");
        let next_value = &source[p as usize]
            .iter()
            .find(|(o, _)| *o >= pos)
            .expect("next record")
            .1;
        let at = target[p as usize]
            .iter()
            .find(|(o, _)| *o >= down)
            .expect("record at the checkpoint");
        assert_eq!(
            &at.1, next_value,
            "partition {p}: the target continues with the next record (nothing skipped)"
        );
        let before = target[p as usize]
            .iter()
            .rev()
            .find(|(o, _)| *o < down)
            .expect("a record before");
        let last_consumed = &source[p as usize]
            .iter()
            .rev()
            .find(|(o, _)| *o < pos)
            .expect("last consumed")
            .1;
        assert_eq!(&before.1, last_consumed, "partition {p}: nothing re-read");
    }

    // offsets translate: what RemoteClusterUtils.translateOffsets returns.
    let cfg_s = cfg.to_str().expect("path");
    let (code, out, err) = offsets("translate", cfg_s, "app", &["--json"]);
    assert_eq!(code, Some(0), "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).expect("json");
    for (p, _) in positions {
        let (_, down) = cps[&("app".to_string(), "primary.orders".to_string(), p)];
        assert!(
            rows.as_array()
                .expect("rows")
                .iter()
                .any(|r| r["topic"] == "primary.orders"
                    && r["partition"] == p
                    && r["offset"] == down),
            "{out}"
        );
    }

    // failover: a dry run commits nothing; --apply commits; a consumer on the target then
    // reads exactly the next record.
    let (code, out, err) = offsets("failover", cfg_s, "app", &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("dry run"), "{out}");
    assert!(
        committed(&backup.addr, "app", "primary.orders", 2).is_empty(),
        "dry run commits nothing"
    );
    let (code, out, err) = offsets("failover", cfg_s, "app", &["--apply"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let on_target = committed(&backup.addr, "app", "primary.orders", 2);
    for (p, _) in positions {
        assert_eq!(
            on_target[&p],
            cps[&("app".to_string(), "primary.orders".to_string(), p)].1
        );
    }

    // The same consumer group, now on the target, resumes from its committed offsets.
    let consumer = group_client(&backup.addr, "app");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("primary.orders", 0, Offset::Stored)
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let first = wait_for("the first record on the target", T, || {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                Some(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned())
            }
            _ => None,
        }
    });
    assert_eq!(
        first, source[0][40].1,
        "continues from exactly the record after the last one consumed at the source"
    );
    drop(consumer);

    assert_eq!(kmirror.stop(), Some(0), "log:\n{}", kmirror.logs());
}

#[test]
fn group_offsets_are_synced_to_idle_target_groups_and_never_rewound() {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("events", 1);
    produce_transactions(&primary.addr, "events", 1, 5, 10);
    let source = records(&primary.addr, "events", 0, 50);
    commit(&primary.addr, "idle", "events", &[(0, source[23].0)]);
    commit(&primary.addr, "ahead", "events", &[(0, source[5].0)]);

    let dst = Client::new(&backup.addr);
    dst.create_topic("primary.events", 1);
    // "ahead" already consumed further on the target: never rewound.
    commit(&backup.addr, "ahead", "primary.events", &[(0, 40)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = config(dir.path(), &primary.addr, &backup.addr, true, Some(&status));
    let mut kmirror = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));

    let cps = wait_for("checkpoints of both groups", T, || {
        let cps = checkpoints(&backup.addr);
        (["idle", "ahead"]
            .iter()
            .all(|g| cps.keys().any(|k| k.0 == *g)))
        .then_some(cps)
    });
    let idle_down = cps[&("idle".to_string(), "primary.events".to_string(), 0)].1;
    wait_for("the idle group synced", T, || {
        (committed(&backup.addr, "idle", "primary.events", 1).get(&0) == Some(&idle_down))
            .then_some(())
    });
    // A few more sync rounds, then nothing else moved: "ahead" is never rewound. A pass
    // syncs when the sync interval has elapsed, so of two passes in a row at least one
    // syncs; three passes later, one whole sync round has run and finished since here.
    let rounds = kmirror
        .logs()
        .matches("synced group offsets to the target")
        .count();
    wait_checkpoint_passes(&status, 3);
    assert_eq!(
        committed(&backup.addr, "ahead", "primary.events", 1).get(&0),
        Some(&40),
        "never rewound"
    );
    assert_eq!(
        kmirror
            .logs()
            .matches("synced group offsets to the target")
            .count(),
        rounds,
        "an up-to-date group is not committed again"
    );
    assert_eq!(kmirror.stop(), Some(0), "log:\n{}", kmirror.logs());

    // After a restart the last checkpoints are reloaded: nothing is emitted again.
    let before = dst
        .read_all("primary.checkpoints.internal", 1, 1, Duration::from_secs(3))
        .len();
    let log = dir.path().join("kmirror2.log");
    // A fresh status address: the first instance's listener may linger.
    let status = free_addr();
    let cfg = config(dir.path(), &primary.addr, &backup.addr, true, Some(&status));
    let mut again = Kmirror::start(&cfg, &log);
    wait_for("the checkpoints reloaded", T, || {
        again.logs().contains("reloaded checkpoints").then_some(())
    });
    wait_for("a checkpoint pass", T, || {
        again.logs().contains("offset syncs read").then_some(())
    });
    wait_checkpoint_passes(&status, 2);
    let after = dst
        .read_all(
            "primary.checkpoints.internal",
            1,
            before,
            Duration::from_secs(3),
        )
        .len();
    assert_eq!(
        after,
        before,
        "no checkpoint re-emitted after a restart; log:\n{}",
        again.logs()
    );
    assert_eq!(again.stop(), Some(0));
}

#[test]
fn failover_refuses_partitions_without_a_checkpoint_unless_partial_is_allowed() {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("orders", 2);
    produce_transactions(&primary.addr, "orders", 2, 3, 10);
    let source: Vec<Vec<(i64, String)>> = (0..2)
        .map(|p| records(&primary.addr, "orders", p, 30))
        .collect();

    // While kmirror runs, the group has an offset on partition 0 only: it gets a checkpoint.
    commit(&primary.addr, "app", "orders", &[(0, source[0][12].0)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), &primary.addr, &backup.addr, false, None);
    let mut kmirror = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    let key = |p: i32| ("app".to_string(), "primary.orders".to_string(), p);
    let cps = wait_for("a checkpoint of app on partition 0", T, || {
        let cps = checkpoints(&backup.addr);
        cps.contains_key(&key(0)).then_some(cps)
    });
    assert_eq!(kmirror.stop(), Some(0), "log:\n{}", kmirror.logs());

    // With kmirror stopped, the group commits partition 1 too: no pass ever sees it, so it
    // has no checkpoint (as when its offset is older than the oldest offset sync).
    commit(&primary.addr, "app", "orders", &[(1, source[1][7].0)]);
    assert!(!checkpoints(&backup.addr).contains_key(&key(1)));
    let cfg_s = cfg.to_str().expect("path");
    let names_partition_1 = |out: &str| {
        out.lines().any(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            cells.len() > 3
                && cells[0] == "primary.orders"
                && cells[1] == "1"
                && l.contains("no checkpoint")
        })
    };

    // The dry run lists the partition and exits 1, so scripts notice.
    let (code, out, err) = offsets("failover", cfg_s, "app", &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(names_partition_1(&out), "{out}");
    assert!(err.contains("primary.orders[1]"), "{err}");

    // --apply without --allow-partial: refused, nothing committed.
    let (code, out, err) = offsets("failover", cfg_s, "app", &["--apply"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(names_partition_1(&out), "{out}");
    assert!(
        err.contains("primary.orders[1]") && err.contains("--allow-partial"),
        "{err}"
    );
    assert!(
        committed(&backup.addr, "app", "primary.orders", 2).is_empty(),
        "a refused failover commits nothing"
    );

    // --allow-partial: partition 0 committed, partition 1 left out and named in a warning.
    let (code, out, err) = offsets("failover", cfg_s, "app", &["--apply", "--allow-partial"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        err.contains("warning") && err.contains("primary.orders[1]"),
        "{err}"
    );
    let on_target = committed(&backup.addr, "app", "primary.orders", 2);
    assert_eq!(on_target.get(&0), Some(&cps[&key(0)].1), "{out}");
    assert_eq!(on_target.get(&1), None, "partition 1 is left out");
}

/// Finding 4: checkpoints reloaded after a restart carry no epoch. With the target topic
/// recreated while kmirror was down, the reloaded checkpoint points into the old topic;
/// the new syncs give no (or a lower) translation, and group offset sync committed the
/// stale offset to the empty target group, whose consumers then skipped everything. Now a
/// reloaded checkpoint is synced only once this process derived it again from the syncs as
/// they are, and never beyond the partition's end.
#[test]
fn a_checkpoint_reloaded_after_the_target_topic_was_recreated_is_not_synced() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("events", 1);
    for i in 0..100 {
        let v = format!("e-{i}");
        src.produce(
            "events",
            0,
            v.as_bytes(),
            v.as_bytes(),
            &[],
            1_700_000_000_000 + i,
        );
    }
    src.flush();
    commit(&primary.addr, "app", "events", &[(0, 80)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        false,
        Some(&status),
    );
    let mut kmirror = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    wait_for("app's checkpoint", T, || {
        checkpoints(&backup.addr)
            .get(&("app".to_string(), "primary.events".to_string(), 0))
            .filter(|c| c.0 == 80)
            .map(|_| ())
    });
    assert_eq!(kmirror.stop(), Some(0), "log:\n{}", kmirror.logs());

    // While kmirror is down the target topic is recreated, empty; new records follow.
    dst.delete_topic("primary.events");
    dst.create_topic("primary.events", 1);
    for i in 100..110 {
        let v = format!("e-{i}");
        src.produce(
            "events",
            0,
            v.as_bytes(),
            v.as_bytes(),
            &[],
            1_700_000_000_000 + i,
        );
    }
    src.flush();
    let cfg = config(dir.path(), &primary.addr, &backup.addr, true, Some(&status));
    let mut again = Kmirror::start(&cfg, &dir.path().join("kmirror2.log"));
    dst.read_all("primary.events", 1, 10, T);
    wait_for("the checkpoints reloaded", T, || {
        again.logs().contains("reloaded checkpoints").then_some(())
    });
    wait_checkpoint_passes(&status, 4);
    let synced = committed(&backup.addr, "app", "primary.events", 1);
    assert!(
        synced.get(&0).is_none_or(|o| *o <= 10),
        "the reloaded checkpoint (80, into the old topic) was synced to the recreated one: {synced:?}; log:\n{}",
        again.logs()
    );
    assert_eq!(again.stop(), Some(0));
}

#[test]
fn an_active_target_group_is_left_alone_and_its_failover_refused() {
    use rdkafka::consumer::BaseConsumer;
    let (primary, backup) = Broker::kafka_pair(
        &kafka::KafkaOptions::default(),
        &kafka::KafkaOptions::default(),
    );
    let src = Client::new(&primary.addr);
    src.create_topic("orders", 1);
    src.produce_ids("orders", 1, 0, 50);
    commit(&primary.addr, "app", "orders", &[(0, 30)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = config(dir.path(), &primary.addr, &backup.addr, true, Some(&status));
    let mut k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    wait_for("primary.orders on the target", T, || {
        Client::new(&backup.addr).partitions("primary.orders")
    });
    // The group is active on the target before any sync: a member sits subscribed.
    let member: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &backup.addr)
        .set("group.id", "app")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .set("auto.offset.reset", "latest")
        .create()
        .expect("member");
    member.subscribe(&["primary.orders"]).expect("subscribe");
    wait_for("the member's assignment", T, || {
        let _ = member.poll(Duration::from_millis(100));
        (member.assignment().ok()?.count() == 1).then_some(())
    });
    // Checkpoints flow, the sync skips the active group: nothing committed for it.
    wait_for("app checkpointed", T, || {
        checkpoints(&backup.addr)
            .contains_key(&("app".into(), "primary.orders".into(), 0))
            .then_some(())
    });
    wait_checkpoint_passes(&status, 3);
    let _ = member.poll(Duration::from_millis(100));
    assert!(
        committed(&backup.addr, "app", "primary.orders", 1).is_empty(),
        "the sync wrote to an active group; log:\n{}",
        k.logs()
    );
    let skipped =
        http_get(&status, "/status").expect("status").1["flows"][0]["active_target_groups_skipped"]
            .as_u64()
            .unwrap_or(0);
    assert!(skipped > 0, "the skip is counted");
    // A failover of the active group is refused, naming it; nothing is committed.
    let cfg_s = cfg.to_str().expect("path");
    let (code, out, err) = offsets("failover", cfg_s, "app", &["--apply"]);
    let _ = member.poll(Duration::from_millis(100));
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(
        format!("{out}{err}").contains("app") && format!("{out}{err}").contains("active"),
        "{out}{err}"
    );
    assert!(committed(&backup.addr, "app", "primary.orders", 1).is_empty());
    // Once the member leaves, the sync commits the translated offset.
    drop(member);
    let synced = poll_until(T, || {
        let c = committed(&backup.addr, "app", "primary.orders", 1);
        (c.get(&0) == Some(&30)).then_some(())
    });
    assert!(
        synced.is_some(),
        "not synced after the member left: {:?}; log:\n{}",
        committed(&backup.addr, "app", "primary.orders", 1),
        k.logs()
    );
    assert_eq!(k.stop(), Some(0), "log:\n{}", k.logs());
}
