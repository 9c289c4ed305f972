//! End to end: two real brokers, the real `kmirror` binary with a WASM replication policy
//! (`prod_prefix.wasm`, built from `plugins/`), records checked by an independent client.
//!
//! Not testable on this Tansu build, so covered by unit tests of the pure logic instead
//! (`host/src/flow/discovery/tests.rs`): raising a target's partition count when the source
//! grew (no CreatePartitions), and copying topic configs (DescribeConfigs returns none).
//! Deleting a source topic while kmirror runs is covered by unit tests too: on this Tansu
//! build it crashes any librdkafka consumer assigned to the topic (Tansu answers the
//! consumer's metadata request by topic id with null topic names, and librdkafka 2.12
//! dereferences them in `rd_kafka_metadata_cache_find`), which no client code can avoid.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;
use support::*;

const T: Duration = Duration::from_secs(60);

fn flow_with_prefix_policy() -> &'static str {
    r#"topic_filter = { builtin = "default-topic-filter", config = { "topics.exclude" = ".*\\.tmp, __.*, .*[\\-\\.]internal" } }
replication_policy = { plugin = "prod_prefix.wasm", config = { "prefix" = "prod-" } }"#
}

/// Produces `n` records per partition whose values are unique ids `topic/p/i`.
fn produce_ids(c: &Client, topic: &str, partitions: i32, from: usize, n: usize) {
    for p in 0..partitions {
        for i in from..from + n {
            let id = format!("{topic}/{p}/{i}");
            let ts = 1_700_000_000_000 + i as i64;
            c.produce(
                topic,
                p,
                format!("k{i}").as_bytes(),
                id.as_bytes(),
                &[("id", id.as_bytes()), ("n", &[p as u8])],
                ts,
            );
        }
    }
    c.flush();
}

fn ids(recs: &[Rec]) -> BTreeMap<String, usize> {
    let mut count = BTreeMap::new();
    for r in recs {
        *count
            .entry(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .or_insert(0) += 1;
    }
    count
}

/// Decodes an OffsetSync independently of kmirror: key = STRING topic, INT32 partition;
/// value = INT64 upstream, INT64 downstream.
fn decode_sync(key: &[u8], value: &[u8]) -> (String, i32, i64, i64) {
    let len = i16::from_be_bytes([key[0], key[1]]) as usize;
    let topic = String::from_utf8(key[2..2 + len].to_vec()).expect("utf8");
    let partition = i32::from_be_bytes(key[2 + len..6 + len].try_into().expect("partition"));
    assert_eq!(key.len(), 6 + len, "offset sync key has no trailing bytes");
    assert_eq!(value.len(), 16, "offset sync value is two INT64s");
    let up = i64::from_be_bytes(value[0..8].try_into().expect("up"));
    let down = i64::from_be_bytes(value[8..16].try_into().expect("down"));
    (topic, partition, up, down)
}

#[test]
fn records_topics_syncs_and_heartbeats_are_mirrored() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("orders", 3);
    src.create_topic("payments", 2);
    src.create_topic("orders.tmp", 1);
    produce_ids(&src, "orders", 3, 0, 40);
    produce_ids(&src, "payments", 2, 0, 25);
    produce_ids(&src, "orders.tmp", 1, 0, 5);

    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        flow_with_prefix_policy(),
    );
    let mut kmirror = Kmirror::start(&config, &dir.path().join("kmirror.log"));

    wait_for("prod-primary.orders on the target", T, || {
        dst.partitions("prod-primary.orders")
    });
    assert_eq!(
        dst.partitions("prod-primary.orders"),
        Some(3),
        "same partition count"
    );
    assert_eq!(
        wait_for("prod-primary.payments", T, || dst
            .partitions("prod-primary.payments")),
        2
    );

    let source_orders = src.read_all("orders", 3, 120, T);
    let mirrored = dst.read_all("prod-primary.orders", 3, 120, T);
    assert_eq!(
        mirrored.len(),
        120,
        "every record, once; log:\n{}",
        kmirror.logs()
    );
    // Same partition, key, value, headers and timestamp, in the same order per partition.
    let strip = |r: &Rec| {
        (
            r.partition,
            r.key.clone(),
            r.value.clone(),
            r.headers.clone(),
            r.timestamp,
        )
    };
    let mut a: Vec<_> = source_orders.iter().map(strip).collect();
    let mut b: Vec<_> = mirrored.iter().map(strip).collect();
    a.sort_by_key(|r| (r.0, r.4));
    b.sort_by_key(|r| (r.0, r.4));
    assert_eq!(a, b);
    assert_eq!(
        ids(&dst.read_all("prod-primary.payments", 2, 50, T)).len(),
        50
    );

    // The excluded topic is not mirrored.
    assert!(
        !dst.topics().contains_key("prod-primary.orders.tmp"),
        "filtered topic mirrored"
    );

    // Offset syncs: on the source, decodable, each consistent with the record at that target offset.
    let syncs = src.read_all("mm2-offset-syncs.backup.internal", 1, 5, T);
    assert!(
        syncs.len() >= 5,
        "at least the first sync per partition: {syncs:?}"
    );
    let by_offset: BTreeMap<(i32, i64), &Rec> = mirrored
        .iter()
        .map(|r| ((r.partition, r.offset), r))
        .collect();
    let src_by_offset: BTreeMap<(String, i32, i64), &Rec> = source_orders
        .iter()
        .map(|r| (("orders".to_string(), r.partition, r.offset), r))
        .collect();
    let mut checked = 0;
    for s in &syncs {
        let (topic, partition, up, down) = decode_sync(
            s.key.as_deref().expect("key"),
            s.value.as_deref().expect("value"),
        );
        if topic != "orders" {
            continue;
        }
        let upstream = src_by_offset
            .get(&(topic.clone(), partition, up))
            .expect("the synced upstream record exists");
        let downstream = by_offset
            .get(&(partition, down))
            .expect("the synced downstream record exists");
        assert_eq!(
            upstream.value, downstream.value,
            "sync {topic}[{partition}] {up}->{down} points at the same record"
        );
        checked += 1;
    }
    assert!(checked >= 3, "syncs for every orders partition");

    // Heartbeats: MM2 format, source alias primary, target alias backup, recent timestamps.
    let hbs = dst.read_all("heartbeats", 1, 2, T);
    assert!(hbs.len() >= 2, "heartbeats emitted");
    let key = hbs[0].key.clone().expect("key");
    assert_eq!(
        key,
        [&[0u8, 7][..], b"primary", &[0, 6], b"backup"].concat()
    );
    let value = hbs[0].value.clone().expect("value");
    assert_eq!(&value[0..2], &[0, 0], "version 0");
    let ts = i64::from_be_bytes(value[2..10].try_into().expect("ts"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("now")
        .as_millis() as i64;
    assert!((now - ts).abs() < 600_000, "timestamp {ts} is now-ish");

    assert_eq!(
        kmirror.stop(),
        Some(0),
        "graceful stop exits 0; log:\n{}",
        kmirror.logs()
    );
}

#[test]
fn a_topic_created_while_running_is_mirrored_within_two_refresh_intervals() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("first", 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        flow_with_prefix_policy(),
    );
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        text.replace(
            "refresh_topics_interval = \"1s\"",
            "refresh_topics_interval = \"2s\"",
        ),
    )
    .expect("config");
    let mut kmirror = Kmirror::start(&config, &dir.path().join("kmirror.log"));
    wait_for("the first topic", T, || {
        dst.partitions("prod-primary.first")
    });

    let created = std::time::Instant::now();
    src.create_topic("late-arrival", 2);
    produce_ids(&src, "late-arrival", 2, 0, 10);
    wait_for("the new topic on the target", T, || {
        dst.partitions("prod-primary.late-arrival")
    });
    let took = created.elapsed();
    assert!(
        took <= Duration::from_secs(4),
        "mirrored after {took:?}, more than two 2s refresh intervals"
    );
    assert_eq!(
        ids(&dst.read_all("prod-primary.late-arrival", 2, 20, T)).len(),
        20,
        "log:\n{}",
        kmirror.logs()
    );
    assert_eq!(kmirror.stop(), Some(0));
}

#[test]
fn upstream_heartbeats_flow_through_renamed() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    // A heartbeats topic on the source, as an upstream mirror would have written it.
    src.create_topic("heartbeats", 1);
    let key = [&[0u8, 4][..], b"east", &[0, 7], b"primary"].concat();
    let value = [&[0u8, 0][..], &1_700_000_000_000i64.to_be_bytes()].concat();
    src.produce("heartbeats", 0, &key, &value, &[], 1_700_000_000_000);
    src.flush();
    let dir = tempfile::tempdir().expect("tempdir");
    // Heartbeats pass even a filter that accepts nothing else.
    let flow = r#"topic_filter = { builtin = "default-topic-filter", config = { "topics" = "nothing-matches" } }
replication_policy = { plugin = "prod_prefix.wasm" }"#;
    let config = write_config(dir.path(), &primary.addr, &backup.addr, flow);
    let mut kmirror = Kmirror::start(&config, &dir.path().join("kmirror.log"));
    let hops = wait_for("prod-primary.heartbeats", T, || {
        dst.partitions("prod-primary.heartbeats")
    });
    assert_eq!(hops, 1);
    let recs = dst.read_all("prod-primary.heartbeats", 1, 1, T);
    assert_eq!(recs[0].key.as_deref(), Some(key.as_slice()));
    assert_eq!(recs[0].value.as_deref(), Some(value.as_slice()));
    assert_eq!(kmirror.stop(), Some(0));
}

#[test]
fn status_reports_mirrored_topics_and_syncs_can_live_on_the_target() {
    let (primary, backup) = Broker::pair();
    let (src, dst) = (Client::new(&primary.addr), Client::new(&backup.addr));
    src.create_topic("keep", 1);
    src.create_topic("orders", 2);
    produce_ids(&src, "orders", 2, 0, 3);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let config = write_config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        "offset_syncs_topic_location = \"target\"",
    );
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("[status]\nlisten = \"{addr}\"\n\n{text}")).expect("config");
    let mut kmirror = Kmirror::start(&config, &dir.path().join("kmirror.log"));

    let status = wait_for("both topics in /status", T, || {
        let (_, s) = http_get(&addr, "/status")?;
        (s["flows"][0]["mirrored"].as_object()?.len() == 2).then_some(s)
    });
    let flow = &status["flows"][0];
    assert_eq!(flow["flow"], "primary->backup");
    assert_eq!(flow["state"], "running");
    assert_eq!(
        flow["mirrored"]["orders"],
        serde_json::json!(["primary.orders", 2])
    );
    assert_eq!(
        flow["mirrored"]["keep"],
        serde_json::json!(["primary.keep", 1])
    );
    let (code, health) = http_get(&addr, "/health").expect("health");
    assert_eq!((code, &health["healthy"]), (200, &serde_json::json!(true)));
    wait_for("records counted", T, || {
        (http_get(&addr, "/status")?.1["flows"][0]["records"].as_u64()? >= 6).then_some(())
    });

    // Prometheus metrics, labelled by flow.
    let metrics = http_text(&addr, "/metrics").expect("metrics");
    let records: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("kmirror_records_total{flow=\"primary->backup\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no records counter in:\n{metrics}"));
    assert!(records >= 6, "{metrics}");
    assert!(
        metrics.contains("kmirror_mirrored_topics{flow=\"primary->backup\"} 2"),
        "{metrics}"
    );

    // Offset syncs on the target, as configured, named after the source cluster as MM2
    // names them there (so flows A->C and B->C never share one).
    assert!(
        wait_for("syncs on the target", T, || dst
            .partitions("mm2-offset-syncs.primary.internal"))
            == 1
    );
    assert!(
        !dst.topics()
            .contains_key("mm2-offset-syncs.backup.internal")
    );
    assert!(
        !src.topics()
            .contains_key("mm2-offset-syncs.backup.internal")
    );

    assert!(
        kmirror.running(),
        "the flow survives; log:\n{}",
        kmirror.logs()
    );
    assert_eq!(kmirror.stop(), Some(0), "log:\n{}", kmirror.logs());
}

#[test]
fn compressed_topics_are_mirrored_and_the_target_traffic_is_compressed_as_configured() {
    let primary = Broker::start();
    let (backup, proxy) = Broker::behind_proxy();
    // The source topic is written zstd-compressed.
    let src = Client::with(&primary.addr, &[("compression.type", "zstd")]);
    src.create_topic("logs", 2);
    let value = vec![b'a'; 1024];
    const N: usize = 2000;
    for i in 0..N {
        src.produce(
            "logs",
            (i % 2) as i32,
            format!("{i}").as_bytes(),
            &value,
            &[],
            1_700_000_000_000,
        );
    }
    src.flush();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &primary.addr,
        &backup.addr,
        "emit_heartbeats_enabled = false\nemit_checkpoints_enabled = false",
    );
    let text = std::fs::read_to_string(&config).expect("config");
    let text = format!("{text}\n[clusters.backup.librdkafka]\n\"compression.type\" = \"zstd\"\n");
    std::fs::write(&config, text).expect("config");
    let before = proxy.upstream_bytes();
    let mut kmirror = Kmirror::start(&config, &dir.path().join("kmirror.log"));
    let dst = Client::new(&backup.addr);
    let recs = dst.read_all("primary.logs", 2, N, T);
    assert_eq!(recs.len(), N, "log:\n{}", kmirror.logs());
    assert!(
        recs.iter()
            .all(|r| r.value.as_deref() == Some(value.as_slice())),
        "values intact"
    );
    let sent = proxy.upstream_bytes() - before;
    let raw = (N * value.len()) as u64;
    eprintln!("FIGURES zstd: {raw} bytes of values went to the target as {sent} bytes on the wire");
    assert!(
        sent < raw / 10,
        "the target traffic is compressed: {sent} bytes on the wire for {raw} bytes of values"
    );
    assert_eq!(kmirror.stop(), Some(0));
}
