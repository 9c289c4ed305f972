//! Taking over from MirrorMaker 2 end to end.
//!
//! - From a real MirrorMaker 2 (dedicated mode, Apache Kafka's own jars): MM2 copies part of
//!   a topic and checkpoints a group, stops; kmirror takes over — every record on the
//!   target exactly once, the group's checkpoints going on from MM2's — and MM2's own
//!   client (`RemoteClusterUtils.translateOffsets`, `tests/kafka/Translate.java`) reads
//!   kmirror's checkpoints with the answers `kmirror offsets translate` gives.
//! - From state written in MM2's formats by the test (it runs on Tansu too, and covers what
//!   a real MM2 rarely leaves): Connect's offsets topic `mm2-offsets.primary.internal` with
//!   a superseded position and a tombstone, and MM2's offset syncs (no kmirror marker).

mod support;

use std::time::Duration;
use support::*;

const T: Duration = Duration::from_secs(90);
const PER_PARTITION: usize = 100;
/// How much of each partition MM2 had mirrored.
const MM2_COPIED: usize = 60;

/// An OffsetSync in MM2's format (no marker header).
fn sync(src: &Client, topic: &str, partition: i32, up: i64, down: i64) {
    let mut key = (topic.len() as i16).to_be_bytes().to_vec();
    key.extend(topic.as_bytes());
    key.extend(partition.to_be_bytes());
    let mut value = up.to_be_bytes().to_vec();
    value.extend(down.to_be_bytes());
    src.produce(
        "mm2-offset-syncs.backup.internal",
        0,
        &key,
        &value,
        &[],
        1_700_000_000_000,
    );
}

/// A config whose flow takes over from MM2 at its first start (quick checkpoints, no
/// heartbeats), with a status endpoint and `extra` flow lines.
fn takeover_config(
    dir: &std::path::Path,
    (primary, backup): (&str, &str),
    status: &str,
    extra: &str,
) -> std::path::PathBuf {
    let flows = format!(
        r#"[[flows]]
source = "primary"
target = "backup"
take_over_from_mm2 = true
refresh_topics_interval = "1s"
offset_flush_interval = "500ms"
emit_heartbeats_enabled = false
emit_checkpoints_interval = "500ms"
refresh_groups_interval = "500ms"
replication_factor = 1
session_timeout = "6s"
{extra}
"#
    );
    config_file(dir, primary, backup, &plugins_dir(), Some(status), &flows)
}

/// MM2's positions in `mm2-offsets.primary.internal` on `target`: (topic, partition) ->
/// the last upstream offset it wrote and committed.
fn mm2_positions(target: &str) -> std::collections::BTreeMap<(String, i32), i64> {
    let mut out = std::collections::BTreeMap::new();
    let dst = Client::new(target);
    let Some(parts) = dst.partitions("mm2-offsets.primary.internal") else {
        return out;
    };
    for r in dst.read_all(
        "mm2-offsets.primary.internal",
        parts,
        1,
        Duration::from_secs(3),
    ) {
        let Some(key) = r.key.as_deref() else {
            continue;
        };
        let key: serde_json::Value = serde_json::from_slice(key).expect("json key");
        if key[0] != "MirrorSourceConnector" {
            continue;
        }
        let (topic, partition) = (
            key[1]["topic"].as_str().expect("topic").to_string(),
            key[1]["partition"].as_i64().expect("partition") as i32,
        );
        match r.value.as_deref() {
            Some(v) => {
                let v: serde_json::Value = serde_json::from_slice(v).expect("json value");
                out.insert((topic, partition), v["offset"].as_i64().expect("offset"));
            }
            None => {
                out.remove(&(topic, partition));
            }
        }
    }
    out
}

/// MM2's own answer (RemoteClusterUtils.translateOffsets on the target) for `group`:
/// "topic partition offset" lines.
fn mm2_translate(target: &str, group: &str) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let program =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/kafka/Translate.java");
    let out = kafka::java(dir.path(), "256m")
        .arg(program)
        .args([target, "primary", group])
        .output()
        .expect("java");
    assert!(
        out.status.success(),
        "Translate.java: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn kmirror_takes_over_from_a_real_mirrormaker_2() {
    let (primary, backup) = Broker::kafka_pair(
        &kafka::KafkaOptions::default(),
        &kafka::KafkaOptions::default(),
    );
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("orders", 2);
    src.produce_ids("orders", 2, 0, 200);

    // MM2 copies all 200 and checkpoints the group, then stops.
    let mm2_properties = kafka::Mm2::test_properties(
        &primary.addr,
        &backup.addr,
        "primary->backup.topics = orders\nprimary->backup.groups = app",
    );
    let mut mm2 = kafka::Mm2::start(&mm2_properties);
    let copied = poll_until(Duration::from_secs(180), || {
        let pos = mm2_positions(&backup.addr);
        (pos.get(&("orders".to_string(), 0)) == Some(&99)
            && pos.get(&("orders".to_string(), 1)) == Some(&99))
        .then_some(())
    });
    assert!(
        copied.is_some(),
        "MirrorMaker 2 did not copy in 180 s; positions {:?}; its log:\n{}",
        mm2_positions(&backup.addr),
        mm2.log()
    );
    // The group, caught up, commits while MM2 runs (MM2 translates only offsets near the
    // syncs it keeps: a sparse set, the newest densest).
    commit(&primary.addr, "app", "orders", &[(0, 100), (1, 100)]);
    let mm2_done = poll_until(Duration::from_secs(120), || {
        let cps = checkpoints(&backup.addr);
        let checkpointed = cps.contains_key(&("app".into(), "primary.orders".into(), 0))
            && cps.contains_key(&("app".into(), "primary.orders".into(), 1));
        checkpointed.then_some(cps)
    });
    let mm2_checkpoints = mm2_done.unwrap_or_else(|| {
        panic!(
            "MirrorMaker 2 did not checkpoint app in 120 s; its log:\n{}",
            mm2.log()
        )
    });
    mm2.stop();
    // MM2 translates to the last sync at or before a group's offset (+1 past it): never
    // ahead.
    for p in 0..2 {
        assert!(
            mm2_checkpoints[&("app".into(), "primary.orders".into(), p)].1 <= 100,
            "MM2's own checkpoint: {mm2_checkpoints:?}"
        );
    }
    let by_mm2 = dst.read_all("primary.orders", 2, 200, Duration::from_secs(30));
    assert_eq!(by_mm2.len(), 200, "MM2 copied every record once");

    // The rest after MM2 stopped; the group moves on.
    src.produce_ids("orders", 2, 200, 300);
    commit(&primary.addr, "app", "orders", &[(0, 120), (1, 130)]);

    // kmirror's configuration is MM2's, translated by `kmirror import-mm2-config`: every
    // key translated or needing nothing, and the flow taking over.
    let dir = tempfile::tempdir().expect("tempdir");
    let properties = dir.path().join("mm2.properties");
    std::fs::write(&properties, &mm2_properties).expect("mm2.properties");
    let cfg = dir.path().join("kmirror.toml");
    let plugins = plugins_dir();
    let (code, _, err) = kmirror_cli(&[
        "import-mm2-config",
        properties.to_str().expect("path"),
        "--output",
        cfg.to_str().expect("path"),
        "--plugins-dir",
        plugins.to_str().expect("path"),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("every key translated"), "{err}");
    let imported = std::fs::read_to_string(&cfg).expect("kmirror.toml");
    for line in [
        "take_over_from_mm2 = true",
        r#"topic_filter = { builtin = "default-topic-filter", config = { "topics" = "orders" } }"#,
        r#"group_filter = { builtin = "default-group-filter", config = { "groups" = "app" } }"#,
        "sync_group_offsets = true",
        "emit_checkpoints_interval = \"1s\"",
    ] {
        assert!(imported.contains(line), "{line}:\n{imported}");
    }
    let mut k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    let (missing, dup) = tally(&dst, "primary.orders", 2, 300, T);
    assert_eq!(
        (missing, dup),
        (0, 0),
        "every record exactly once; log:\n{}",
        k.logs()
    );
    assert!(
        k.logs().contains("took over from MirrorMaker 2"),
        "{}",
        k.logs()
    );
    // The group's checkpoints go on from MM2's: exact at its new positions.
    let want = vec![
        "primary.orders 0 120".to_string(),
        "primary.orders 1 130".to_string(),
    ];
    wait_for("app checkpointed at 120 / 130", T, || {
        let cps = checkpoints(&backup.addr);
        (cps.get(&("app".into(), "primary.orders".into(), 0))
            .map(|c| c.1)
            == Some(120)
            && cps
                .get(&("app".into(), "primary.orders".into(), 1))
                .map(|c| c.1)
                == Some(130))
        .then_some(())
    });
    // MM2's client reads kmirror's checkpoints as kmirror's own command does.
    assert_eq!(mm2_translate(&backup.addr, "app"), want);
    let (code, out, err) = kmirror_cli(&[
        "offsets",
        "translate",
        "--config",
        cfg.to_str().expect("path"),
        "--flow",
        "primary->backup",
        "--group",
        "app",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).expect("json");
    let mut ours: Vec<String> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            format!(
                "{} {} {}",
                r["topic"].as_str().expect("topic"),
                r["partition"],
                r["offset"]
            )
        })
        .collect();
    ours.sort();
    assert_eq!(ours, want, "kmirror offsets translate");
    assert_eq!(k.stop(), Some(0), "log:\n{}", k.logs());
}

#[test]
fn kmirror_takes_over_from_mirrormaker_2_without_copying_again() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("orders", 2);
    let value = |p: usize, i: usize| format!("p{p}-{i}");
    for i in 0..PER_PARTITION {
        for p in 0..2 {
            let v = value(p, i);
            src.produce(
                "orders",
                p as i32,
                v.as_bytes(),
                v.as_bytes(),
                &[],
                1_700_000_000_000 + i as i64,
            );
        }
    }
    src.flush();
    // What MM2 left: the first 60 records of each partition on the target, its positions
    // (an older one first, superseded; a deleted one for a topic it no longer mirrors) and
    // its offset syncs.
    dst.create_topic("primary.orders", 2);
    for i in 0..MM2_COPIED {
        for p in 0..2 {
            let v = value(p, i);
            dst.produce(
                "primary.orders",
                p as i32,
                v.as_bytes(),
                v.as_bytes(),
                &[],
                1_700_000_000_000 + i as i64,
            );
        }
    }
    dst.create_topic("mm2-offsets.primary.internal", 3);
    let last = (MM2_COPIED - 1).to_string();
    for (key, val, part) in [
        (
            mm2_offsets_key("orders", 0),
            r#"{"offset":10}"#.to_string(),
            0,
        ),
        (
            mm2_offsets_key("orders", 0),
            format!(r#"{{"offset":{last}}}"#),
            0,
        ),
        (
            mm2_offsets_key("orders", 1),
            format!(r#"{{"offset":{last}}}"#),
            2,
        ),
        (mm2_offsets_key("gone", 0), r#"{"offset":5}"#.to_string(), 1),
        // Records no one should trust (the topic is writable by anyone allowed to): each is
        // refused naming why, and the valid ones are seeded beside them.
        (
            mm2_offsets_key("orders", -1),
            r#"{"offset":1}"#.to_string(),
            1,
        ),
        (
            mm2_offsets_key("../bad topic", 0),
            r#"{"offset":1}"#.to_string(),
            1,
        ),
        (
            mm2_offsets_key("orders", 7),
            format!(r#"{{"offset":{}}}"#, i64::MAX),
            1,
        ),
    ] {
        dst.produce(
            "mm2-offsets.primary.internal",
            part,
            key.as_bytes(),
            val.as_bytes(),
            &[],
            1_700_000_000_000,
        );
    }
    dst.produce_tombstone(
        "mm2-offsets.primary.internal",
        1,
        mm2_offsets_key("gone", 0).as_bytes(),
    );
    dst.flush();
    src.create_topic("mm2-offset-syncs.backup.internal", 1);
    for p in 0..2 {
        sync(&src, "orders", p, 0, 0);
        sync(
            &src,
            "orders",
            p,
            MM2_COPIED as i64 - 1,
            MM2_COPIED as i64 - 1,
        );
    }
    src.flush();
    // A consumer group: one partition in MM2's part, one in what kmirror will copy.
    commit(
        &primary.addr,
        "app",
        "orders",
        &[(0, MM2_COPIED as i64 - 1), (1, 75)],
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = takeover_config(dir.path(), (&primary.addr, &backup.addr), &status, "");
    let cfg_s = cfg.to_str().expect("path");

    // The dry run shows what would be seeded.
    let (code, out, err) = kmirror_cli(&["offsets", "import-mm2", "--config", cfg_s]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    for p in 0..2 {
        assert!(
            out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    "orders",
                    &p.to_string(),
                    &last,
                    &MM2_COPIED.to_string(),
                    "-"
                ]),
            "partition {p} seeded at {MM2_COPIED}:\n{out}"
        );
    }
    assert!(
        !out.contains("gone"),
        "a deleted position is not seeded:\n{out}"
    );
    for why in [
        "partition -1 is not a partition number",
        "is not a topic name",
        "offset 9223372036854775807 is not an offset",
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with("refused record") && l.contains(why)),
            "{why}:\n{out}"
        );
    }
    assert!(
        committed(&primary.addr, "kmirror.primary.backup", "orders", 2).is_empty(),
        "a dry run"
    );

    // The daemon takes over at its first start.
    let mut k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    let recs = dst.read_all("primary.orders", 2, 2 * PER_PARTITION, T);
    let counts = count_values(&recs);
    for p in 0..2 {
        for i in 0..PER_PARTITION {
            assert_eq!(
                counts.get(&value(p, i)).copied(),
                Some(1),
                "{} on the target exactly once; log:\n{}",
                value(p, i),
                k.logs()
            );
        }
    }
    assert!(
        k.logs().contains("took over from MirrorMaker 2"),
        "{}",
        k.logs()
    );
    // Each of the three, at every try of the takeover (one, unless a try failed).
    let refused = k
        .logs()
        .matches("a record of MirrorMaker 2's offsets topic is refused")
        .count();
    assert!(
        refused >= 3 && refused.is_multiple_of(3),
        "{refused}: {}",
        k.logs()
    );
    // Checkpoints go on from MM2's syncs and kmirror's own: both exact here.
    let cps = wait_for("app's checkpoints", T, || {
        let cps = checkpoints(&backup.addr);
        (cps.len() == 2).then_some(cps)
    });
    assert_eq!(
        cps[&("app".into(), "primary.orders".into(), 0)],
        (MM2_COPIED as i64 - 1, MM2_COPIED as i64 - 1),
        "at MM2's sync"
    );
    assert_eq!(
        cps[&("app".into(), "primary.orders".into(), 1)],
        (75, 75),
        "in kmirror's part: exact"
    );
    assert_eq!(k.stop(), Some(0), "log:\n{}", k.logs());
    // A takeover is for a flow none of whose instances runs: wait until the progress group
    // is empty (under load a stopping instance's last member may linger until its session
    // times out; a commit meanwhile is refused by the coordinator).
    let empty = poll_until(Duration::from_secs(30), || {
        group_members(&primary.addr, "kmirror.primary.backup")
            .is_empty()
            .then_some(())
    });
    assert!(
        empty.is_some(),
        "the progress group still has members: {:?}",
        group_members(&primary.addr, "kmirror.primary.backup")
    );

    // The flow has progress now: a takeover is refused, unless forced.
    let (code, out, err) = kmirror_cli(&["offsets", "import-mm2", "--config", cfg_s, "--apply"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("already has progress") && err.contains("--force"),
        "{err}"
    );
    let (code, out, err) = kmirror_cli(&[
        "offsets",
        "import-mm2",
        "--config",
        cfg_s,
        "--apply",
        "--force",
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(
        committed(&primary.addr, "kmirror.primary.backup", "orders", 2),
        [(0, MM2_COPIED as i64), (1, MM2_COPIED as i64)].into(),
        "forced: seeded again"
    );
}
