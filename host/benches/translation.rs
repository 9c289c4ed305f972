//! Offset translation: accuracy of kmirror's store against MM2's rule on the same syncs,
//! for a group 10,000 records behind the head of a topic with gaps (transaction markers),
//! and the translation rate at 1,000 group-partitions.
//!
//! `cargo bench -p kmirror --bench translation`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kmirror::flow::offset_syncs::store::{Mm2Syncs, OffsetSyncStore};
use kmirror::flow::offset_syncs::{OffsetSync, OffsetSyncWriter};
use std::hint::black_box;

/// A partition of `n` transactional records: 9 records, then a commit marker (a gap).
/// Returns (up, down) per mirrored record.
fn topic_with_gaps(n: usize) -> Vec<(i64, i64)> {
    let mut up = 0i64;
    (0..n as i64)
        .map(|down| {
            let r = (up, down);
            up += if down % 9 == 8 { 2 } else { 1 };
            r
        })
        .collect()
}

/// Mirrors `records` through kmirror's writer (offset_lag_max 100, flushed every 1,000
/// records) into kmirror's store and MM2's slots (running, and restarted at the end).
fn syncs(records: &[(i64, i64)]) -> (OffsetSyncStore, Mm2Syncs, Mm2Syncs) {
    let tp = ("t".to_string(), 0);
    let mut w = OffsetSyncWriter::new(100, 1);
    let mut store = OffsetSyncStore::new();
    let mut running: Option<Mm2Syncs> = None;
    let mut sent = Vec::new();
    for (i, (up, down)) in records.iter().enumerate() {
        w.on_ack(&tp, *up, *down);
        if i % 1000 == 999 {
            w.promote_delayed();
        }
        sent.extend(w.take_pending(usize::MAX));
    }
    w.promote_delayed();
    sent.extend(w.take_pending(usize::MAX));
    let sent: Vec<(OffsetSync, _)> = sent
        .into_iter()
        .map(|p| {
            let sync = OffsetSync {
                topic: "t".into(),
                partition: 0,
                upstream: p.upstream,
                downstream: p.downstream,
            };
            (sync, p.marker)
        })
        .collect();
    for (s, m) in &sent {
        let _ = store.add(s, Some(*m));
        match running.as_mut() {
            Some(x) => x.add(s.upstream, s.downstream, true),
            None => running = Some(Mm2Syncs::new(s.upstream, s.downstream)),
        }
    }
    // MM2 after a restart: while reading the topic to its end it keeps only the newest sync.
    let (first, _) = &sent[0];
    let mut restarted = Mm2Syncs::new(first.upstream, first.downstream);
    for (s, _) in &sent {
        restarted.add(s.upstream, s.downstream, false);
    }
    println!(
        "{} records mirrored (a transaction marker every 9): kmirror wrote {} offset syncs ({:.1}% of records); MM2's rules on the same records: {} ({:.1}%)",
        records.len(),
        sent.len(),
        100.0 * sent.len() as f64 / records.len() as f64,
        mm2_sync_count(records, 100),
        100.0 * mm2_sync_count(records, 100) as f64 / records.len() as f64,
    );
    (
        store,
        running.unwrap_or_else(|| Mm2Syncs::new(0, 0)),
        restarted,
    )
}

/// How many syncs MM2's `OffsetSyncWriter` emits for `records`: the first, an upstream
/// gap, a downstream rewind, or `offset.lag.max` records since the last (delayed syncs,
/// flushed at commit, not counted: kmirror's count above includes its flushes).
fn mm2_sync_count(records: &[(i64, i64)], lag_max: i64) -> usize {
    let (mut prev_up, mut prev_down, mut last_sync_down) = (-1i64, -1i64, -1i64);
    let mut n = 0;
    for (up, down) in records {
        if last_sync_down == -1
            || up - prev_up != 1
            || *down < prev_down
            || down - (last_sync_down + 1) >= lag_max
        {
            n += 1;
            last_sync_down = *down;
        }
        prev_up = *up;
        prev_down = *down;
    }
    n
}

fn accuracy(records: &[(i64, i64)], store: &OffsetSyncStore, mm2: &Mm2Syncs, restarted: &Mm2Syncs) {
    let head = records.len() - 1;
    let truth = |g: i64| {
        records
            .iter()
            .find(|(u, _)| *u >= g)
            .map_or(records.len() as i64, |r| r.1)
    };
    let (mut k_total, mut m_total, mut none_after_restart, mut n) = (0i64, 0i64, 0, 0);
    let (mut k_max, mut m_max) = (0i64, 0i64);
    // Groups 10,000 records behind the head, at 100 neighbouring positions.
    for behind in 10_000..10_100 {
        let g = records[head - behind].0;
        let t = truth(g);
        let k = store.translate("t", 0, g).expect("kmirror translates");
        let m = mm2.translate(g).expect("MM2 translates");
        assert!(k <= t && m <= t, "never past the truth");
        k_total += t - k;
        m_total += t - m;
        k_max = k_max.max(t - k);
        m_max = m_max.max(t - m);
        none_after_restart += usize::from(restarted.translate(g).is_none());
        n += 1;
    }
    println!(
        "group 10,000 records behind the head (100 positions): records re-read per failover — kmirror: mean {:.1}, max {k_max}; MM2's rule on the same syncs: mean {:.1}, max {m_max}; MM2 after a restart: no checkpoint at {none_after_restart}/{n} positions",
        k_total as f64 / n as f64,
        m_total as f64 / n as f64,
    );
}

fn bench(c: &mut Criterion) {
    let records = topic_with_gaps(200_000);
    let (store, mm2, restarted) = syncs(&records);
    accuracy(&records, &store, &mm2, &restarted);

    // 1,000 group-partitions: 100 groups x 10 partitions share one partition's syncs here;
    // the lookup cost is per (partition, offset) pair.
    let offsets: Vec<i64> = (0..1000)
        .map(|i| records[records.len() - 1 - i * 150].0)
        .collect();
    let mut group = c.benchmark_group("translate");
    group.throughput(Throughput::Elements(offsets.len() as u64));
    group.bench_function("kmirror-1000-group-partitions", |b| {
        b.iter(|| {
            offsets
                .iter()
                .map(|g| store.translate("t", 0, *g).unwrap_or(0))
                .sum::<i64>()
        })
    });
    group.bench_function("mm2-1000-group-partitions", |b| {
        b.iter(|| {
            offsets
                .iter()
                .map(|g| mm2.translate(*g).unwrap_or(0))
                .sum::<i64>()
        })
    });
    group.finish();
    black_box(&restarted);
}

criterion_group!(benches, bench);
criterion_main!(benches);
