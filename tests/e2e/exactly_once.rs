//! Exactly-once mirroring, end to end: the real binary between two Tansu brokers,
//! `exactly_once = true`, every record a unique id, the target counted by a reader that
//! is neither kmirror's code nor librdkafka: it decodes the raw record batches and drops
//! aborted transactions itself (this Tansu build hands aborted records to
//! `read_committed` readers; see `support/txn.rs`).
//!
//! - `kill -9` at random moments under load, then a last run: 0 missing, 0 duplicated;
//! - two instances, one stopped with SIGSTOP until its shards move, then SIGCONT: 0
//!   duplicated, and the resumed instance is fenced (its log says so);
//! - a graceful stop under load: 0 missing, 0 duplicated;
//! - checkpoints and `offsets translate` stay exact across commit markers: a group between
//!   two transactions translates to the first record after the marker;
//! - a record the target will not take stops only its partition (its progress stays at it);
//! - a flow switched from at-least-once goes on from the source group's progress;
//! - instances of both delivery modes never mirror at once: the newcomer waits;
//! - a topic created while the flow runs joins its shards and is mirrored exactly once;
//! - the shards topic grown under a running instance: it follows the new count, and with a
//!   second instance started after the change nothing is lost or duplicated.
//!
//! Not tested here: a source producer that aborts transactions. Both this Tansu build and
//! librdkafka's mock cluster send an empty aborted-transactions list in every Fetch
//! response, so no broker here lets a `read_committed` source consumer (kmirror's, or any)
//! drop aborted source records.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

const T: Duration = Duration::from_secs(120);

/// Quick fault settings, exactly-once with four shards, a transaction every `interval`.
fn config(
    dir: &Path,
    primary: &str,
    backup: &str,
    status: &str,
    interval: &str,
) -> std::path::PathBuf {
    let flow = format!(
        "session_timeout = \"6s\"\nshutdown_timeout = \"5s\"\nexactly_once = true\ntransaction_interval = \"{interval}\"\nexactly_once_shards = 4"
    );
    with_status(dir, primary, backup, status, &flow)
}

/// The same flow at least once (quick session timeout).
fn at_least_once_config(
    dir: &Path,
    primary: &str,
    backup: &str,
    status: &str,
) -> std::path::PathBuf {
    with_status(dir, primary, backup, status, "session_timeout = \"6s\"")
}

/// A config with `flow` settings and the status endpoint on `status`.
fn with_status(
    dir: &Path,
    primary: &str,
    backup: &str,
    status: &str,
    flow: &str,
) -> std::path::PathBuf {
    let path = write_config(dir, primary, backup, flow);
    let text = std::fs::read_to_string(&path).expect("config");
    std::fs::write(&path, format!("[status]\nlisten = \"{status}\"\n\n{text}")).expect("config");
    path
}

/// Records committed by the running instance, from its `/status`.
fn mirrored_by(status: &str) -> Option<u64> {
    http_get(status, "/status")?.1["flows"][0]["records"].as_u64()
}

/// Waits (up to 60 s) until the instance at `status` has committed a record.
fn first_commit(status: &str, k: &Kmirror) {
    if poll_until(Duration::from_secs(60), || {
        (mirrored_by(status)? > 0).then_some(())
    })
    .is_none()
    {
        panic!("no record committed in 60 s; log:\n{}", k.logs());
    }
}

/// What the target holds of `topic` once aborted transactions are dropped: how often
/// each id arrived, and the totals of the raw reads.
fn committed_ids(
    addr: &str,
    topic: &str,
    partitions: i32,
) -> (BTreeMap<String, usize>, txn::Committed) {
    let mut counts = BTreeMap::new();
    let mut total = txn::Committed::default();
    for p in 0..partitions {
        let c = txn::read_committed(addr, topic, p);
        for v in &c.values {
            *counts
                .entry(String::from_utf8_lossy(v).into_owned())
                .or_insert(0) += 1;
        }
        total.aborted_records += c.aborted_records;
        total.aborts += c.aborts;
        total.commits += c.commits;
        total.open_records += c.open_records;
    }
    (counts, total)
}

/// Waits until every id `id-0..id-n` is committed on the target; (missing, duplicated,
/// raw totals).
fn tally_committed(
    addr: &str,
    topic: &str,
    partitions: i32,
    n: usize,
) -> (usize, usize, txn::Committed) {
    let mut last = None;
    poll_until(T, || {
        let (counts, total) = committed_ids(addr, topic, partitions);
        let present = (0..n)
            .filter(|i| counts.contains_key(&format!("id-{i}")))
            .count();
        let done = present == n;
        last = Some((counts, total));
        done.then_some(())
    });
    let (counts, total) = last.expect("read");
    if BrokerKind::from_env() == BrokerKind::Kafka {
        // Kafka filters aborted transactions for a read_committed consumer (librdkafka's
        // default), which Tansu does not: there the raw reader is the only judge; here
        // librdkafka must agree with it, record for record.
        let seen = count_values(&Client::new(addr).read_all(
            topic,
            partitions,
            counts.values().sum(),
            Duration::from_secs(10),
        ));
        assert_eq!(
            seen, counts,
            "a read_committed consumer and the raw reader disagree on {topic}"
        );
    }
    let missing = (0..n)
        .filter(|i| !counts.contains_key(&format!("id-{i}")))
        .count();
    let duplicated = counts.values().map(|c| c - 1).sum();
    (missing, duplicated, total)
}

#[test]
fn kill_9_under_load_mirrors_every_record_exactly_once() {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("load", 4);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = config(dir.path(), &primary.addr, &backup.addr, &status, "300ms");
    let log = dir.path().join("kmirror.log");
    const RATE: usize = 400;
    let mut feeder = Feeder::start(&primary.addr, "load", 4, RATE);
    let mut rng = Lcg(0x656f_735f_6b69_6c6c);
    let kills = std::env::var("KMIRROR_EOS_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    for round in 0..kills {
        let mut k = Kmirror::start(&cfg, &log);
        wait_for(
            &format!("round {round}: this instance commits transactions"),
            T,
            || (mirrored_by(&status)? > 0).then_some(()),
        );
        // A random moment while records flow (transactions open and commit every 300 ms).
        std::thread::sleep(Duration::from_millis(100 + rng.below(1500)));
        k.kill9();
    }
    let mut last = Kmirror::start(&cfg, &log);
    wait_for("the last instance commits transactions", T, || {
        (mirrored_by(&status)? > 0).then_some(())
    });
    let produced = feeder.stop();
    let (missing, duplicated, total) = tally_committed(&backup.addr, "primary.load", 4, produced);
    eprintln!(
        "FIGURES exactly-once kill -9 x{kills} under load: produced {produced}, missing {missing}, duplicated {duplicated}, transactions committed {}, aborted {} ({} records dropped by the reader), open {}",
        total.commits, total.aborts, total.aborted_records, total.open_records
    );
    assert_eq!(missing, 0, "log:\n{}", last.logs());
    assert_eq!(duplicated, 0, "log:\n{}", last.logs());
    assert_eq!(last.stop(), Some(0));
    // Counted again once nothing writes any more: still once each, no transaction open.
    let (counts, total) = committed_ids(&backup.addr, "primary.load", 4);
    assert_eq!(
        counts.values().map(|c| c - 1).sum::<usize>(),
        0,
        "duplicates after the stop"
    );
    assert_eq!(total.open_records, 0, "{total:?}");
    // Every record is committed once more with its position: the progress stored on the
    // target is exactly where the source ends.
    let stored = committed(&backup.addr, "kmirror.primary.backup", "primary.load", 4);
    let ends: i64 = (0..4)
        .map(|p| {
            src.read_all_partition("load", p, 0, Duration::from_secs(1))
                .len() as i64
        })
        .sum();
    assert_eq!(
        stored.values().sum::<i64>(),
        ends,
        "stored progress {stored:?}"
    );
}

#[test]
fn a_graceful_stop_under_load_commits_its_transaction() {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("calm", 3);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = config(dir.path(), &primary.addr, &backup.addr, &status, "5s");
    let log = dir.path().join("kmirror.log");
    let mut feeder = Feeder::start(&primary.addr, "calm", 3, 300);
    let mut k = Kmirror::start(&cfg, &log);
    first_commit(&status, &k);
    // Stopped in the middle of a 5 s transaction: it is committed, not aborted.
    std::thread::sleep(Duration::from_millis(1500));
    let produced_at_stop = feeder.produced();
    assert_eq!(k.stop(), Some(0), "log:\n{}", k.logs());
    let (counts, total) = committed_ids(&backup.addr, "primary.calm", 3);
    assert_eq!(total.aborts, 0, "a graceful stop aborts nothing: {total:?}");
    assert_eq!(total.open_records, 0, "no transaction left open: {total:?}");
    assert!(
        counts.len() >= produced_at_stop / 2,
        "the open transaction was committed: {} of {produced_at_stop}",
        counts.len()
    );
    let mut k = Kmirror::start(&cfg, &log);
    let produced = feeder.stop();
    let (missing, duplicated, total) = tally_committed(&backup.addr, "primary.calm", 3, produced);
    eprintln!(
        "FIGURES exactly-once graceful stop under load: produced {produced}, missing {missing}, duplicated {duplicated}, aborted transactions {}",
        total.aborts
    );
    assert_eq!((missing, duplicated), (0, 0), "log:\n{}", k.logs());
    assert_eq!(k.stop(), Some(0));
}

#[test]
fn a_paused_instance_whose_shards_moved_is_fenced_and_duplicates_nothing() {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("shared", 4);
    let dir = tempfile::tempdir().expect("tempdir");
    let (status_a, status_b) = (free_addr(), free_addr());
    let cfg_a = config(dir.path(), &primary.addr, &backup.addr, &status_a, "300ms");
    let text = std::fs::read_to_string(&cfg_a).expect("config");
    let cfg_b = dir.path().join("b.toml");
    std::fs::write(&cfg_b, text.replace(&status_a, &status_b)).expect("config");
    let mut feeder = Feeder::start(&primary.addr, "shared", 4, 300);
    let mut a = Kmirror::start(&cfg_a, &dir.path().join("a.log"));
    let mut b = Kmirror::start(&cfg_b, &dir.path().join("b.log"));
    let shards_of = |status: &str| -> Option<usize> {
        let s = http_get(status, "/status")?.1;
        Some(s["flows"][0]["partitions"].as_object().map_or(0, |t| {
            t.values()
                .map(|p| p.as_object().map_or(0, |p| p.len()))
                .sum()
        }))
    };
    wait_for("both instances mirror some partitions", T, || {
        (shards_of(&status_a)? > 0 && shards_of(&status_b)? > 0 && mirrored_by(&status_a)? > 0)
            .then_some(())
    });
    // A stops answering in the middle of its transactions; its shards move to B.
    let taken = |log: &str| {
        log.matches("shard taken: any earlier owner of it is fenced")
            .count()
    };
    let taken_before = taken(&b.logs());
    a.signal("-STOP");
    wait_for("B mirrors every partition", T, || {
        (shards_of(&status_b)? == 4).then_some(())
    });
    // The fence itself: B ran init_transactions under A's shards' transactional ids while A
    // was stopped (the ids' epochs moved past A's producers).
    wait_for("B took A's shards over (init_transactions)", T, || {
        (taken(&b.logs()) > taken_before).then_some(())
    });
    a.signal("-CONT");
    // A notices: its commits are refused (fenced), its shards are gone; it rejoins.
    wait_for("A says it was fenced", T, || {
        let log = a.logs();
        (log.contains("this one is fenced") || log.contains("fenced by a newer owner"))
            .then_some(())
    });
    let produced = feeder.stop();
    let (missing, duplicated, total) = tally_committed(&backup.addr, "primary.shared", 4, produced);
    eprintln!(
        "FIGURES exactly-once SIGSTOP/SIGCONT of one of two instances: produced {produced}, missing {missing}, duplicated {duplicated}, aborted transactions {} ({} records)",
        total.aborts, total.aborted_records
    );
    assert_eq!(duplicated, 0, "A:\n{}\nB:\n{}", a.logs(), b.logs());
    assert_eq!(missing, 0, "A:\n{}\nB:\n{}", a.logs(), b.logs());
    assert_eq!(b.stop(), Some(0));
    assert_eq!(a.stop(), Some(0));
    let (counts, total) = committed_ids(&backup.addr, "primary.shared", 4);
    assert_eq!(
        counts.values().map(|c| c - 1).sum::<usize>(),
        0,
        "duplicates after the stops"
    );
    assert_eq!(total.open_records, 0, "{total:?}");
}

/// Issue 34 item 7: the shards topic grown while an instance runs. Every partition's shard
/// depends on the count, so an instance started before the change and one started after
/// must agree on it, or a partition has two writers (two transactional ids, neither fencing
/// the other) and another none. Before the fix the first instance kept the count it read
/// at its start.
#[test]
fn a_grown_shards_topic_is_followed_by_the_instances_started_before() {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    // Twelve partitions: every residue of a topic's partitions modulo 2 x 3 shards.
    src.create_topic("spread", 12);
    let dir = tempfile::tempdir().expect("tempdir");
    let (status_a, status_b) = (free_addr(), free_addr());
    let flow = "session_timeout = \"6s\"\nshutdown_timeout = \"5s\"\nexactly_once = true\ntransaction_interval = \"300ms\"\nexactly_once_shards = 2";
    let cfg_a = with_status(dir.path(), &primary.addr, &backup.addr, &status_a, flow);
    let text = std::fs::read_to_string(&cfg_a).expect("config");
    let cfg_b = dir.path().join("b.toml");
    std::fs::write(&cfg_b, text.replace(&status_a, &status_b)).expect("config");
    src.produce_ids("spread", 12, 0, 600);
    src.flush();
    let mut a = Kmirror::start(&cfg_a, &dir.path().join("a.log"));
    let (missing, duplicated, _) = tally_committed(&backup.addr, "primary.spread", 12, 600);
    assert_eq!((missing, duplicated), (0, 0), "A:\n{}", a.logs());
    // An operator grows the shards topic (or it is recreated with another count).
    Client::new(&backup.addr).grow("kmirror-shards.primary.internal", 3);
    wait_for("A follows the new shard count", T, || {
        a.logs()
            .contains("the shards topic's partition count changed")
            .then_some(())
    });
    // A second instance, started after the change, shares the shards with A.
    let mut b = Kmirror::start(&cfg_b, &dir.path().join("b.log"));
    let owns = |status: &str| -> Option<usize> {
        let s = http_get(status, "/status")?.1;
        Some(s["flows"][0]["partitions"].as_object().map_or(0, |t| {
            t.values()
                .map(|p| p.as_object().map_or(0, |p| p.len()))
                .sum()
        }))
    };
    wait_for("both instances mirror some partitions", T, || {
        (owns(&status_a)? > 0 && owns(&status_b)? > 0).then_some(())
    });
    src.produce_ids("spread", 12, 600, 1800);
    src.flush();
    let (missing, duplicated, _) = tally_committed(&backup.addr, "primary.spread", 12, 1800);
    eprintln!(
        "FIGURES exactly-once, shards topic grown 2 -> 3 under an instance started before: missing {missing}, duplicated {duplicated}"
    );
    assert_eq!(
        (missing, duplicated),
        (0, 0),
        "A:\n{}\nB:\n{}",
        a.logs(),
        b.logs()
    );
    assert_eq!(b.stop(), Some(0));
    assert_eq!(a.stop(), Some(0));
}

#[test]
fn translation_is_exact_across_commit_markers() {
    translation_across_markers(false);
}

/// With the offset-syncs topic on the target, the syncs are written inside the transaction
/// of the records they describe: every one of them is a committed transactional record.
#[test]
fn offset_syncs_on_the_target_are_written_inside_the_transactions() {
    translation_across_markers(true);
}

fn translation_across_markers(syncs_on_target: bool) {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("ledger", 1);
    for i in 0..30i64 {
        let v = format!("r{i}");
        src.produce(
            "ledger",
            0,
            v.as_bytes(),
            v.as_bytes(),
            &[],
            1_700_000_000_000 + i,
        );
    }
    src.flush();
    // Between the first two transactions, inside the second, between the last two.
    let groups = [("g-between", 10), ("g-inside", 15), ("g-later", 20)];
    for (g, at) in groups {
        commit(&primary.addr, g, "ledger", &[(0, at)]);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    // Ten records per transaction: three transactions, a commit marker after each.
    let path = write_config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        &format!(
            "exactly_once = true\ntransaction_max_records = 10\nexactly_once_shards = 1\nemit_checkpoints_interval = \"500ms\"\nrefresh_groups_interval = \"500ms\"\noffset_syncs_topic_location = \"{}\"",
            if syncs_on_target { "target" } else { "source" }
        ),
    );
    let text = std::fs::read_to_string(&path).expect("config");
    std::fs::write(&path, format!("[status]\nlisten = \"{status}\"\n\n{text}")).expect("config");
    let mut k = Kmirror::start(&path, &dir.path().join("kmirror.log"));
    let read = wait_for("every record committed on the target", T, || {
        let c = txn::read_committed(&backup.addr, "primary.ledger", 0);
        (c.values.len() == 30).then_some(c)
    });
    // r0..r9 at 0..9, a marker at 10, r10..r19 at 11..20, a marker at 21, r20.. at 22..
    let at = |value: &str| -> i64 {
        let i = read
            .values
            .iter()
            .position(|v| v == value.as_bytes())
            .expect(value);
        read.offsets[i]
    };
    assert_eq!(
        (at("r9"), at("r10"), at("r19"), at("r20")),
        (9, 11, 20, 22),
        "markers between the transactions: {:?}",
        read.offsets
    );
    let expected = [
        ("g-between", 10, at("r10")),
        ("g-inside", 15, at("r15")),
        ("g-later", 20, at("r20")),
    ];
    let cps = wait_for("a checkpoint of every group", T, || {
        let cps = checkpoints(&backup.addr);
        expected
            .iter()
            .all(|(g, _, down)| {
                cps.get(&(g.to_string(), "primary.ledger".to_string(), 0))
                    .is_some_and(|(_, d)| d == down)
            })
            .then_some(cps)
    });
    for (g, up, down) in expected {
        assert_eq!(
            cps[&(g.to_string(), "primary.ledger".to_string(), 0)],
            (up, down),
            "{g}: the first record after the marker"
        );
    }
    for (g, _, down) in expected {
        let (code, out, err) = kmirror_cli(&[
            "offsets",
            "translate",
            "--config",
            path.to_str().unwrap(),
            "--flow",
            "primary->backup",
            "--group",
            g,
            "--json",
        ]);
        assert_eq!(code, Some(0), "{err}");
        let rows: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert!(
            rows.as_array()
                .expect("rows")
                .iter()
                .any(|r| r["topic"] == "primary.ledger"
                    && r["partition"] == 0
                    && r["offset"] == down),
            "{g}: {out}"
        );
    }
    if syncs_on_target {
        let syncs = txn::read_committed(&backup.addr, "mm2-offset-syncs.primary.internal", 0);
        assert!(!syncs.values.is_empty(), "no offset sync on the target");
        assert_eq!(
            (syncs.transactional, syncs.aborts, syncs.open_records),
            (syncs.values.len(), 0, 0),
            "every offset sync inside a committed transaction: {syncs:?}"
        );
    }
    assert_eq!(k.stop(), Some(0));
}

#[test]
fn a_record_the_target_will_not_take_stops_only_its_partition() {
    let (primary, backup) = Broker::pair();
    // The test's own producer may send what kmirror's default librdkafka settings refuse.
    let src = Client::with(&primary.addr, &[("message.max.bytes", "4000000")]);
    // The source topic takes the large record (Kafka's default limit is 1 MiB).
    src.create_topic_with("mixed", 3, &[("max.message.bytes", "4000000")]);
    let produce = |from: usize, to: usize| src.produce_ids("mixed", 3, from, to);
    produce(0, 300);
    src.produce(
        "mixed",
        0,
        b"poison",
        &vec![b'x'; 1_500_000],
        &[],
        1_700_000_000_000,
    );
    src.flush();
    produce(300, 600);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = config(dir.path(), &primary.addr, &backup.addr, &status, "300ms");
    let mut k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    let paused = wait_paused(&status, "mixed", 0);
    assert_eq!(paused["offset"], 100, "{paused}");
    // Every other record exactly once; partition 0 up to the record it stopped at.
    let counts = wait_for("the healthy records committed", T, || {
        let (counts, _) = committed_ids(&backup.addr, "primary.mixed", 3);
        (counts.len() == 500).then_some(counts)
    });
    for i in 0..600 {
        let expected = usize::from(i % 3 != 0 || i < 300);
        assert_eq!(
            counts.get(&format!("id-{i}")).copied().unwrap_or(0),
            expected,
            "id-{i}"
        );
    }
    assert_eq!(k.stop(), Some(0));
    // Its stored progress stays at the record.
    let stored = committed(&backup.addr, "kmirror.primary.backup", "primary.mixed", 3);
    assert_eq!(stored.get(&0), Some(&100), "{stored:?}");
}

#[test]
fn a_flow_switched_from_at_least_once_goes_on_where_it_was() {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("switch", 2);
    let produce = |from: usize, to: usize| src.produce_ids("switch", 2, from, to);
    produce(0, 300);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let alo = at_least_once_config(dir.path(), &primary.addr, &backup.addr, &status);
    let mut k = Kmirror::start(&alo, &dir.path().join("alo.log"));
    wait_for("at-least-once mirrored the first 300", T, || {
        (mirrored_by(&status)? >= 300).then_some(())
    });
    assert_eq!(k.stop(), Some(0));
    produce(300, 600);
    let eos = config(dir.path(), &primary.addr, &backup.addr, &status, "300ms");
    let mut k = Kmirror::start(&eos, &dir.path().join("eos.log"));
    let (missing, duplicated, _) = tally_committed(&backup.addr, "primary.switch", 2, 600);
    assert_eq!((missing, duplicated), (0, 0), "log:\n{}", k.logs());
    assert_eq!(k.stop(), Some(0));
}

/// Exactly-once, then at-least-once, then exactly-once again (issue 34 item 3): the last
/// switch goes on where at-least-once got (the source group), not from the target's older
/// progress of the first exactly-once run — that re-mirrored the whole at-least-once period.
#[test]
fn a_flow_switched_back_to_exactly_once_does_not_mirror_the_at_least_once_period_again() {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("switch", 2);
    let produce = |from: usize, to: usize| src.produce_ids("switch", 2, from, to);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let eos = || config(dir.path(), &primary.addr, &backup.addr, &status, "300ms");
    let alo = || at_least_once_config(dir.path(), &primary.addr, &backup.addr, &status);
    produce(0, 200);
    let mut k = Kmirror::start(&eos(), &dir.path().join("eos-1.log"));
    let (missing, duplicated, _) = tally_committed(&backup.addr, "primary.switch", 2, 200);
    assert_eq!((missing, duplicated), (0, 0), "log:\n{}", k.logs());
    assert_eq!(k.stop(), Some(0));
    produce(200, 400);
    let mut k = Kmirror::start(&alo(), &dir.path().join("alo.log"));
    wait_for("at-least-once mirrored the next 200", T, || {
        (mirrored_by(&status)? >= 200).then_some(())
    });
    assert_eq!(k.stop(), Some(0));
    produce(400, 600);
    let mut k = Kmirror::start(&eos(), &dir.path().join("eos-2.log"));
    let (missing, duplicated, _) = tally_committed(&backup.addr, "primary.switch", 2, 600);
    assert_eq!((missing, duplicated), (0, 0), "log:\n{}", k.logs());
    assert_eq!(k.stop(), Some(0));
}

/// Asserts that the instance `waiting` (status at `waiting_status`) says it waits for the
/// `other` mode's instances and mirrors nothing while the one at `running_status` mirrors
/// 500 more records.
fn waits_while_the_other_mirrors(
    waiting: &Kmirror,
    waiting_status: &str,
    other: &str,
    running_status: &str,
) {
    let said = format!("{other} instances of this flow run");
    wait_for(
        &format!("the instance to wait for the {other} ones"),
        T,
        || waiting.logs().contains(&said).then_some(()),
    );
    let before = mirrored_by(running_status).unwrap_or(0);
    wait_for(
        &format!("the {other} instance to mirror on meanwhile"),
        T,
        || (mirrored_by(running_status)? >= before + 500).then_some(()),
    );
    assert_eq!(
        mirrored_by(waiting_status),
        Some(0),
        "the waiting instance mirrored (or shows no status); log:\n{}",
        waiting.logs()
    );
}

/// One flow's configurations in both delivery modes, in `dir`, each with a status endpoint
/// of its own: [(at-least-once, its status), (exactly-once, its status)].
fn both_modes(dir: &Path, primary: &str, backup: &str) -> [(PathBuf, String); 2] {
    let (status_a, status_b) = (free_addr(), free_addr());
    let alo_text = std::fs::read_to_string(at_least_once_config(dir, primary, backup, &status_a))
        .expect("config");
    let alo = dir.join("alo.toml");
    std::fs::write(&alo, alo_text).expect("config");
    let eos = config(dir, primary, backup, &status_b, "300ms");
    [(alo, status_a), (eos, status_b)]
}

/// Issue 34 item 3: instances of one flow in both delivery modes. A rolling update that
/// turns exactly-once on starts an exactly-once instance beside at-least-once ones: it waits
/// until they stopped (before the fix both ran, and 25,087 of 73,650 records were
/// duplicated on the target); an at-least-once instance started beside exactly-once ones
/// waits likewise. Nothing is lost or duplicated across both switches.
#[test]
fn instances_of_both_delivery_modes_never_mirror_at_once() {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("shared", 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let [(alo, status_a), (eos, status_b)] = both_modes(dir.path(), &primary.addr, &backup.addr);
    let mut feeder = Feeder::start(&primary.addr, "shared", 2, 500);
    let mut a = Kmirror::start(&alo, &dir.path().join("alo-1.log"));
    first_commit(&status_a, &a);
    // Exactly-once turned on, one instance first: it waits.
    let mut b = Kmirror::start(&eos, &dir.path().join("eos.log"));
    waits_while_the_other_mirrors(&b, &status_b, "at-least-once", &status_a);
    // The last at-least-once instance stops: exactly-once starts where it got.
    assert_eq!(a.stop(), Some(0), "log:\n{}", a.logs());
    first_commit(&status_b, &b);
    // An at-least-once instance started beside it (a rollback half done) waits too.
    let mut a = Kmirror::start(&alo, &dir.path().join("alo-2.log"));
    waits_while_the_other_mirrors(&a, &status_a, "exactly-once", &status_b);
    assert_eq!(a.stop(), Some(0), "a waiting instance stops cleanly");
    let produced = feeder.stop();
    let (missing, duplicated, _) = tally_committed(&backup.addr, "primary.shared", 2, produced);
    eprintln!(
        "FIGURES both delivery modes started side by side: produced {produced}, missing {missing}, duplicated {duplicated}"
    );
    assert_eq!(
        (missing, duplicated),
        (0, 0),
        "exactly-once log:\n{}",
        b.logs()
    );
    assert_eq!(b.stop(), Some(0));
}

/// Issue 34 item 3, the last path: instances of both delivery modes started at the same
/// moment both find the other's group empty. The at-least-once one watches the shards'
/// group while it runs: it stops within seconds, starts again and waits, and the
/// exactly-once one goes on. Nothing is lost; what the at-least-once instance mirrored
/// before it stopped is all that can be duplicated.
#[test]
fn instances_of_both_delivery_modes_started_together_leave_the_flow_to_exactly_once() {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("together", 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let [(alo, status_a), (eos, status_b)] = both_modes(dir.path(), &primary.addr, &backup.addr);
    let mut feeder = Feeder::start(&primary.addr, "together", 2, 300);
    let mut a = Kmirror::start(&alo, &dir.path().join("alo.log"));
    let mut b = Kmirror::start(&eos, &dir.path().join("eos.log"));
    let conflict = "this at-least-once flow stops and starts again";
    let waits = "exactly-once instances of this flow run";
    // Both found the other's group empty (the case here), or the exactly-once one had
    // joined first and the at-least-once one waits from its start.
    wait_for(
        "the at-least-once instance to see the shards' group",
        T,
        || {
            let logs = a.logs();
            (logs.contains(conflict) || logs.contains(waits)).then_some(())
        },
    );
    let started_together = a.logs().contains(conflict);
    waits_while_the_other_mirrors(&a, &status_a, "exactly-once", &status_b);
    if started_together {
        let after = a.logs();
        let after = &after[after.find(conflict).expect("seen")..];
        assert!(
            after.contains(waits),
            "it waits after starting again:\n{after}"
        );
    }
    assert_eq!(a.stop(), Some(0), "log:\n{}", a.logs());
    let produced = feeder.stop();
    let (missing, duplicated, _) = tally_committed(&backup.addr, "primary.together", 2, produced);
    eprintln!(
        "FIGURES both delivery modes started at the same moment (overlapping: {started_together}): produced {produced}, missing {missing}, duplicated {duplicated}"
    );
    assert_eq!(missing, 0, "exactly-once log:\n{}", b.logs());
    // Duplicated: only what the at-least-once flow mirrored before its watch stopped it
    // (its count as it stopped; the backlog the feed built before the start included —
    // a bound of "two seconds of the feed" failed 2 runs in 5 once starts got faster).
    let logs = a.logs();
    let mirrored: usize = if started_together {
        let before = &logs[..logs.find(conflict).expect("seen")];
        before
            .rfind("flow stopped flow=")
            .and_then(|at| before[at..].split("records=").nth(1))
            .and_then(|n| n.split_whitespace().next()?.parse().ok())
            .expect("the at-least-once flow's count as it stopped")
    } else {
        0
    };
    assert!(
        duplicated <= mirrored,
        "{duplicated} duplicated, {mirrored} mirrored by the at-least-once flow before it stopped; its log:\n{logs}"
    );
    assert_eq!(b.stop(), Some(0));
}

/// A topic created while an exactly-once flow runs joins the shards (their partitions
/// follow the routes without a restart) and is mirrored exactly once, while the topic
/// that was there goes on unharmed.
#[test]
fn a_topic_created_while_running_joins_its_shards_exactly_once() {
    let (primary, backup) = Broker::pair();
    let src = Client::new(&primary.addr);
    src.create_topic("before", 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = free_addr();
    let cfg = config(dir.path(), &primary.addr, &backup.addr, &status, "300ms");
    let mut first = Feeder::start(&primary.addr, "before", 2, 300);
    let mut k = Kmirror::start(&cfg, &dir.path().join("kmirror.log"));
    first_commit(&status, &k);
    src.create_topic("after", 3);
    let mut second = Feeder::start(&primary.addr, "after", 3, 300);
    wait_for("the new topic's partitions in the shards", T, || {
        let s = http_get(&status, "/status")?.1;
        (s["flows"][0]["partitions"]["after"]
            .as_object()
            .map_or(0, |p| p.len())
            == 3)
            .then_some(())
    });
    let (n_first, n_second) = (first.stop(), second.stop());
    for (topic, partitions, produced) in [
        ("primary.before", 2, n_first),
        ("primary.after", 3, n_second),
    ] {
        let (missing, duplicated, total) =
            tally_committed(&backup.addr, topic, partitions, produced);
        eprintln!(
            "FIGURES exactly-once, a topic created while running: {topic}: produced {produced}, missing {missing}, duplicated {duplicated}, aborted transactions {}",
            total.aborts
        );
        assert_eq!((missing, duplicated), (0, 0), "{topic}; log:\n{}", k.logs());
    }
    assert_eq!(k.stop(), Some(0));
}
