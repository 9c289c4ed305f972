//! Taking over from MirrorMaker 2 end to end. MM2 itself does not run here: the test writes
//! the state MM2 leaves, in MM2's formats — the first part of the source copied to the
//! target topic, Connect's offsets topic `mm2-offsets.primary.internal` (JSON keys and
//! values, the last record per key winning, a tombstone deleting one), and MM2's offset
//! syncs (no kmirror marker) — then kmirror takes over: every record reaches the target
//! exactly once, and a group's checkpoints go on exactly.

mod support;

use std::time::Duration;
use support::*;

const T: Duration = Duration::from_secs(90);
const PER_PARTITION: usize = 100;
/// How much of each partition MM2 had mirrored.
const MM2_COPIED: usize = 60;

fn mm2_key(topic: &str, partition: i32) -> String {
    format!(
        r#"["MirrorSourceConnector",{{"cluster":"primary","partition":{partition},"topic":"{topic}"}}]"#
    )
}

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

#[test]
fn kmirror_takes_over_from_mirrormaker_2_without_copying_again() {
    let (primary, backup) = (Broker::start(), Broker::start());
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
        (mm2_key("orders", 0), r#"{"offset":10}"#.to_string(), 0),
        (mm2_key("orders", 0), format!(r#"{{"offset":{last}}}"#), 0),
        (mm2_key("orders", 1), format!(r#"{{"offset":{last}}}"#), 2),
        (mm2_key("gone", 0), r#"{"offset":5}"#.to_string(), 1),
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
        mm2_key("gone", 0).as_bytes(),
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
    let flows = r#"[[flows]]
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
"#;
    let cfg = config_file(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &plugins_dir(),
        Some(&status),
        flows,
    );
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
