//! A live flow, for each contender on a fresh pair of clusters: a topic of 40 partitions
//! fed at a steady 10,000 records/s (1 KiB values, a key and a header each), then a
//! consumer group's commit on the source. Measured:
//!
//! - **lag**: each record's source append time to its target append time, after the first
//!   [`SETTLE_SECS`] of the feed (both topics
//!   `message.timestamp.type = LogAppendTime`, the target's created before the mirror
//!   starts; both brokers read the same clock), p50 and p99;
//! - **group sync delay**: from the group's commit on the source to the moment every
//!   partition's offset of that group on the target has moved (group offset sync on for
//!   both; the group exists, with offsets, before the mirror starts, as MM2 only lists
//!   groups every 10 minutes by default);
//! - **failover re-reads**: the records a consumer of the target would read again if the
//!   group failed over at the latest checkpoint of each partition, against the exact
//!   position of the source commit (found by matching keys, so duplicates count). A
//!   partition without a checkpoint counts as re-read from the start.
//!
//! `LIVE_SECS` (default 20) sets how long lag is measured; `SYNC_TIMEOUT` (seconds, default
//! 200) how long the group sync is waited for; `LIVE_DUMP=1` prints the highest lag per
//! 2,000 records (where a stall was).

use super::{Contender, Mirror, PARTITIONS, env_usize, produce_ids};
use crate::common::median;
use crate::support::{Broker, Client, checkpoints_of, commit, committed, wait_for};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const RATE: usize = 10_000;
const WARM_UP: usize = 1_000;
/// Seconds of the feed before lag is measured: the mirror's start settles (kmirror's
/// second replication task joins its group, MM2's Connect worker assigns its tasks).
const SETTLE_SECS: usize = 5;
const GROUP: &str = "app";
const TOPIC: &str = "live";
const VALUE: usize = 1024;

/// One run's figures.
#[derive(Debug, Clone, Copy)]
struct Live {
    /// Source append -> target append, ms.
    p50: f64,
    p99: f64,
    /// Commit on the source -> every partition's target offset moved, s (`None`: not
    /// within `SYNC_TIMEOUT`).
    sync: Option<f64>,
    /// Partitions whose target offset never moved.
    unsynced: usize,
    /// Records re-read after a failover at the checkpoints.
    rereads: usize,
    /// Records skipped (a checkpoint past the exact position: loss).
    skipped: usize,
    /// Partitions without a checkpoint.
    unchecked: usize,
    /// Measured records not read back from the target.
    missing: usize,
}

/// The records on `topic` of `addr` (its partitions' high watermarks).
fn held(addr: &str, topic: &str) -> usize {
    super::on_target(&super::watcher(addr), topic)
}

/// One record as read back: its id (from the key), partition, offset and timestamp.
struct Read {
    id: usize,
    partition: i32,
    offset: i64,
    ts: i64,
}

fn read(addr: &str, topic: &str, n: usize) -> Vec<Read> {
    Client::new(addr)
        .read_all(topic, PARTITIONS, n, Duration::from_secs(300))
        .into_iter()
        .map(|r| Read {
            id: String::from_utf8_lossy(r.key.as_deref().unwrap_or_default())
                .parse()
                .expect("a numeric key"),
            partition: r.partition,
            offset: r.offset,
            ts: r.timestamp.expect("a timestamp"),
        })
        .collect()
}

fn percentile(sorted: &[i64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize] as f64
}

fn run(who: Contender, live_secs: usize, sync_timeout: Duration) -> Live {
    let (src, dst) = Broker::pair();
    let (source, target) = (Client::new(&src.addr), Client::new(&dst.addr));
    let mirrored = format!("src.{TOPIC}");
    let log_append = [("message.timestamp.type", "LogAppendTime")];
    source.create_topic_with(TOPIC, PARTITIONS, &log_append);
    target.create_topic_with(&mirrored, PARTITIONS, &log_append);
    produce_ids(&source, TOPIC, VALUE, 0..WARM_UP, None);
    let all: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    commit(&src.addr, GROUP, TOPIC, &all);

    let mirror = Mirror::start(who, &src.addr, "src", &dst.addr, TOPIC, true);
    wait_for("the warm-up records", Duration::from_secs(120), || {
        (held(&dst.addr, &mirrored) >= WARM_UP).then_some(())
    });
    let n = WARM_UP + RATE * (SETTLE_SECS + live_secs);
    let measured = WARM_UP + RATE * SETTLE_SECS;
    produce_ids(&source, TOPIC, VALUE, WARM_UP..n, Some(RATE));
    wait_for(
        "every record on the target",
        Duration::from_secs(300),
        || (held(&dst.addr, &mirrored) >= n).then_some(()),
    );

    // Where the group commits: a different depth behind the head on each partition.
    let per_partition = (n / PARTITIONS as usize) as i64;
    let positions: Vec<(i32, i64)> = (0..PARTITIONS)
        .map(|p| (p, per_partition * (p as i64 + 1) / (PARTITIONS as i64 + 1)))
        .collect();
    let before = committed(&dst.addr, GROUP, &mirrored, PARTITIONS);
    let at = Instant::now();
    commit(&src.addr, GROUP, TOPIC, &positions);
    let mut moved: BTreeMap<i32, f64> = BTreeMap::new();
    while moved.len() < PARTITIONS as usize && at.elapsed() < sync_timeout {
        for (p, o) in committed(&dst.addr, GROUP, &mirrored, PARTITIONS) {
            // Moved forward: a failed read of `before` cannot pass for a move.
            if before.get(&p).is_none_or(|b| o > *b) {
                moved.entry(p).or_insert_with(|| at.elapsed().as_secs_f64());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let synced = checkpoints_of(&dst.addr, "src.checkpoints.internal");
    mirror.stop();

    let up = read(&src.addr, TOPIC, n);
    // Everything the target holds, duplicates included, so none of the last is cut off.
    let down = read(&dst.addr, &mirrored, held(&dst.addr, &mirrored));
    let appended: BTreeMap<usize, (i64, i64)> =
        up.iter().map(|r| (r.id, (r.offset, r.ts))).collect();
    let mut first = BTreeMap::new();
    for r in &down {
        first.entry(r.id).or_insert(r.ts);
    }
    // Records read back from the source but not from the target: their lag is not counted.
    let missing = (measured..n).filter(|id| !first.contains_key(id)).count();
    let mut lags: Vec<i64> = first
        .iter()
        .filter(|(id, _)| **id >= measured)
        .map(|(id, ts)| ts - appended[id].1)
        .collect();
    if std::env::var_os("LIVE_DUMP").is_some() {
        let mut by: BTreeMap<usize, i64> = BTreeMap::new();
        for (id, ts) in &first {
            let l = ts - appended[id].1;
            let e = by.entry(id / 2000).or_insert(0);
            *e = (*e).max(l);
        }
        eprintln!("max lag per 2000 ids: {by:?}");
    }
    lags.sort_unstable();

    let (mut rereads, mut skipped, mut unchecked) = (0, 0, 0);
    for (p, pos) in &positions {
        // The target's records of partition p in order, as source offsets.
        let mut held: Vec<(i64, i64)> = down
            .iter()
            .filter(|r| r.partition == *p)
            .map(|r| (r.offset, appended[&r.id].0))
            .collect();
        held.sort_unstable();
        let exact = held
            .iter()
            .find(|(_, up)| up >= pos)
            .map_or(i64::MAX, |(down, _)| *down);
        let at = match synced.get(&(GROUP.to_string(), mirrored.clone(), *p)) {
            Some((_, down)) => *down,
            None => {
                unchecked += 1;
                0
            }
        };
        let between = |a: i64, b: i64| held.iter().filter(|(d, _)| *d >= a && *d < b).count();
        rereads += between(at, exact);
        skipped += between(exact, at);
    }
    Live {
        p50: percentile(&lags, 0.5),
        p99: percentile(&lags, 0.99),
        sync: (moved.len() == PARTITIONS as usize)
            .then(|| moved.values().copied().fold(0.0, f64::max)),
        unsynced: PARTITIONS as usize - moved.len(),
        rereads,
        skipped,
        unchecked,
        missing,
    }
}

/// Runs every contender `reps` times, interleaved, and prints the medians.
pub fn part(reps: usize, contenders: &[String]) {
    let live_secs = env_usize("LIVE_SECS", 20).max(1);
    let sync_timeout = Duration::from_secs(env_usize("SYNC_TIMEOUT", 200) as u64);
    let mut runs: Vec<Vec<Live>> = vec![Vec::new(); contenders.len()];
    for rep in 0..reps {
        for (i, c) in contenders.iter().enumerate() {
            let f = run(Contender::parse(c), live_secs, sync_timeout);
            eprintln!("  live, run {rep}, {c}: {f:?}");
            runs[i].push(f);
        }
    }
    println!(
        "\nA live flow at {RATE} records/s ({VALUE} B values, {PARTITIONS} partitions, {live_secs} s), then a group's commit at {PARTITIONS} depths, median of {reps}:"
    );
    println!(
        "{:<10} {:>12} {:>12} {:>16} {:>18} {:>14}",
        "", "lag p50 ms", "lag p99 ms", "group sync s", "failover re-reads", "skipped"
    );
    for (c, r) in contenders.iter().zip(&runs) {
        let syncs: Vec<f64> = r.iter().map(|f| f.sync.unwrap_or(f64::INFINITY)).collect();
        let sync = median(syncs);
        let unsynced = r.iter().map(|f| f.unsynced).max().unwrap_or(0);
        let unchecked = r.iter().map(|f| f.unchecked).max().unwrap_or(0);
        let missing = r.iter().map(|f| f.missing).max().unwrap_or(0);
        println!(
            "{c:<10} {:>12.0} {:>12.0} {:>16} {:>18.0} {:>14.0}{}",
            median(r.iter().map(|f| f.p50).collect()),
            median(r.iter().map(|f| f.p99).collect()),
            if sync.is_finite() {
                format!("{sync:.1}")
            } else {
                "never".to_string()
            },
            median(r.iter().map(|f| f.rereads as f64).collect()),
            median(r.iter().map(|f| f.skipped as f64).collect()),
            match (unsynced, unchecked, missing) {
                (0, 0, 0) => String::new(),
                _ => format!(
                    "  (up to {unsynced} partitions never synced, {unchecked} without a checkpoint, {missing} records not read back)"
                ),
            }
        );
    }
}
