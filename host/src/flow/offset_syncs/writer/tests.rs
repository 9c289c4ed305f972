use super::*;

fn tp() -> TopicPartition {
    ("orders".to_string(), 0)
}

type TopicPartition = (String, i32);

fn ups(sent: &[PendingSync<TopicPartition>]) -> Vec<(i64, i64)> {
    sent.iter().map(|s| (s.upstream, s.downstream)).collect()
}

fn writer(lag: u64) -> OffsetSyncWriter<TopicPartition> {
    OffsetSyncWriter::new(lag, 7)
}

#[test]
fn first_record_emits() {
    let mut w = writer(100);
    assert_eq!(w.on_ack(&tp(), 5, 0), Some(Trigger::First));
    let sent = w.take_pending(10);
    assert_eq!(
        sent[0],
        PendingSync {
            key: tp(),
            upstream: 5,
            downstream: 0,
            marker: SyncMarker::new(7, 0),
        }
    );
    assert!(!w.has_pending());
}

#[test]
fn a_contiguous_run_is_delayed_until_lag_max() {
    let mut w = writer(10);
    w.on_ack(&tp(), 0, 0);
    w.take_pending(10);
    for i in 1..=10 {
        assert_eq!(w.on_ack(&tp(), i, i), None, "offset {i}");
    }
    // down - (last_sync_down + 1) = 11 - 1 = 10 >= 10
    assert_eq!(w.on_ack(&tp(), 11, 11), Some(Trigger::LagMax));
    assert_eq!(ups(&w.take_pending(10)), vec![(11, 11)]);
}

#[test]
fn an_upstream_gap_costs_one_sync() {
    let mut w = writer(100);
    w.on_ack(&tp(), 0, 0);
    assert_eq!(w.on_ack(&tp(), 1, 1), None);
    assert_eq!(w.on_ack(&tp(), 2, 2), None);
    assert_eq!(w.on_ack(&tp(), 5, 3), Some(Trigger::UpstreamGap));
    let sent = w.take_pending(10);
    // The run 0..=2 is known from (0, 0) and (5, 3): 3 records downstream, then 5.
    assert_eq!(ups(&sent), vec![(0, 0), (5, 3)]);
    let seqs: Vec<u64> = sent.iter().map(|s| s.marker.seq).collect();
    assert_eq!(seqs, vec![0, 1]);
}

#[test]
fn every_partition_start_gets_a_new_session() {
    let mut w = writer(100);
    let other = ("payments".to_string(), 1);
    w.on_ack(&tp(), 0, 0);
    w.on_ack(&other, 0, 0);
    w.forget(&tp());
    w.on_ack(&tp(), 1, 1);
    let sent = w.take_pending(10);
    let sessions: Vec<u64> = sent.iter().map(|s| s.marker.session).collect();
    assert_eq!(sent.len(), 3);
    assert_eq!(
        sessions[0], 7,
        "the first partition start uses the given session"
    );
    assert!(
        sessions[0] != sessions[1] && sessions[1] != sessions[2] && sessions[0] != sessions[2],
        "{sessions:?}"
    );
    let restarted = sent.iter().find(|s| s.upstream == 1).map(|s| s.marker);
    assert_eq!(
        restarted.map(|m| m.seq),
        Some(0),
        "a new session starts at 0"
    );
}

#[test]
fn a_partition_handed_over_gets_its_delayed_sync_first() {
    let mut w = writer(100);
    w.on_ack(&tp(), 0, 0);
    w.on_ack(&tp(), 1, 1);
    w.take_pending(10);
    w.promote_one(&tp());
    w.forget(&tp());
    assert_eq!(ups(&w.take_pending(10)), vec![(1, 1)]);
}

#[test]
fn downstream_rewinds_and_gaps_emit() {
    let mut w = writer(100);
    w.on_ack(&tp(), 0, 10);
    assert_eq!(w.on_ack(&tp(), 1, 3), Some(Trigger::DownstreamRewind));
    assert_eq!(w.on_ack(&tp(), 2, 5), Some(Trigger::DownstreamGap));
    assert_eq!(w.on_ack(&tp(), 3, 6), None);
}

#[test]
fn delayed_syncs_are_flushed_and_lag_counts_from_the_last_trigger() {
    let mut w = writer(100);
    let other = ("payments".to_string(), 2);
    w.on_ack(&tp(), 0, 0);
    w.on_ack(&other, 7, 0);
    w.take_pending(10);
    for i in 1..=5 {
        w.on_ack(&tp(), i, i);
    }
    w.on_ack(&other, 8, 1);
    assert!(!w.has_pending());
    w.promote_delayed();
    let mut sent = ups(&w.take_pending(10));
    sent.sort();
    assert_eq!(sent, vec![(5, 5), (8, 1)]);
    for i in 6..=100 {
        assert_eq!(w.on_ack(&tp(), i, i), None, "{i}");
    }
    assert_eq!(w.on_ack(&tp(), 101, 101), Some(Trigger::LagMax));
}

#[test]
fn non_break_syncs_coalesce_but_breaks_never_do() {
    let mut w = writer(1);
    for i in 0..5 {
        w.on_ack(&tp(), i, i);
    }
    // The first sync anchors the run and stays; the LagMax syncs after it coalesce.
    assert_eq!(ups(&w.take_pending(10)), vec![(0, 0), (4, 4)]);
    let mut w = writer(1000);
    w.on_ack(&tp(), 0, 0);
    w.on_ack(&tp(), 10, 1);
    w.on_ack(&tp(), 20, 2);
    w.on_ack(&tp(), 21, 3);
    w.promote_delayed();
    assert_eq!(
        ups(&w.take_pending(10)),
        vec![(0, 0), (10, 1), (20, 2), (21, 3)]
    );
}

#[test]
fn pending_is_bounded_per_call_and_fair_across_partitions() {
    let mut w = writer(100);
    for p in 0..5 {
        w.on_ack(&("t".to_string(), p), 0, 0);
    }
    assert_eq!(w.take_pending(3).len(), 3);
    assert_eq!(w.take_pending(3).len(), 2);
    assert!(!w.has_pending());
}

#[test]
fn a_full_queue_drops_the_oldest_and_leaves_a_sequence_hole() {
    let mut w = writer(100);
    for i in 0..(MAX_QUEUED_PER_PARTITION as i64 + 10) {
        w.on_ack(&tp(), i * 2, i); // every record is an upstream gap
    }
    assert!(w.take_dropped() > 0);
    assert_eq!(w.take_dropped(), 0, "counted once");
    let sent = w.take_pending(usize::MAX);
    assert_eq!(sent.len(), MAX_QUEUED_PER_PARTITION);
    assert!(sent[0].marker.seq > 0, "the oldest were dropped");
}

#[test]
fn markers_round_trip() {
    let m = SyncMarker::new(0xdead_beef, 42);
    assert_eq!(SyncMarker::decode(m.encode().as_bytes()), Some(m));
    assert_eq!(SyncMarker::decode(b"nope"), None);
    assert_eq!(SyncMarker::decode(b"zz:1"), None);
}
