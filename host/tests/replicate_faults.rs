//! Data-plane faults on librdkafka's in-process mock clusters (no admin APIs there, which
//! the replicator does not use; groups are supported): the target broker goes down and
//! comes back, produce and commit requests fail, a record the target will not take, a stop
//! while the target is down, and the internal-topic reader under continuous writes. The
//! replicator runs in-process; records are checked with a plain rdkafka consumer.
//! `RUST_LOG=kmirror=debug` shows the replicator's logs (a failing test prints them).

use kmirror::config::StartOffset;
use kmirror::flow::replication::{self, OnUnproducible, ReplicatorSettings};
use kmirror::flow::telemetry::{Counter, FlowTelemetry};
use kmirror::flow::{Route, Routes};
use kmirror::kafka::{Cluster, ClusterSettings};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

mod common;

const SYNCS: &str = "mm2-offset-syncs.backup.internal";

fn cluster(alias: &str, servers: String) -> Cluster {
    cluster_with(alias, servers, &[])
}

fn cluster_with(alias: &str, servers: String, props: &[(&str, &str)]) -> Cluster {
    Cluster::new(&ClusterSettings {
        alias: alias.into(),
        bootstrap_servers: servers,
        librdkafka: props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    })
    .expect("cluster")
}

fn produce(servers: &str, topic: &str, range: std::ops::Range<usize>) {
    produce_to(servers, topic, 2, range);
}

/// Produces ids `range` round-robin over `partitions` partitions of `topic`.
fn produce_to(servers: &str, topic: &str, partitions: usize, range: std::ops::Range<usize>) {
    produce_keyed(servers, topic, partitions, range, 0);
}

/// Produces ids `range` round-robin over `partitions` partitions of `topic`, each keyed by
/// its id padded to `key_len` bytes.
fn produce_keyed(
    servers: &str,
    topic: &str,
    partitions: usize,
    range: std::ops::Range<usize>,
    key_len: usize,
) {
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .create()
        .expect("producer");
    for i in range {
        let v = format!("id-{i}");
        let k = format!("{v:k<key_len$}");
        p.send(
            BaseRecord::<str, str>::to(topic)
                .partition((i % partitions) as i32)
                .key(&k)
                .payload(&v),
        )
        .map_err(|(e, _)| e)
        .expect("send");
    }
    p.flush(Duration::from_secs(30)).expect("flush");
}

/// A plain consumer that reads without storing progress.
fn checker(servers: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", "checker")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer")
}

/// How often each id arrived on `topic` (2 partitions), reading until `n` distinct ids or
/// `timeout`.
fn count_ids(servers: &str, topic: &str, n: usize, timeout: Duration) -> BTreeMap<String, usize> {
    count_ids_in(servers, topic, 2, n, timeout)
}

/// How often each id arrived on `topic`'s `partitions`, reading until `n` distinct ids or
/// `timeout`.
fn count_ids_in(
    servers: &str,
    topic: &str,
    partitions: i32,
    n: usize,
    timeout: Duration,
) -> BTreeMap<String, usize> {
    let c = checker(servers);
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("tpl");
    }
    c.assign(&tpl).expect("assign");
    let mut seen = BTreeMap::new();
    let deadline = Instant::now() + timeout;
    while seen.len() < n && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            *seen
                .entry(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned())
                .or_insert(0) += 1;
        }
    }
    seen
}

struct Running {
    task: tokio::task::JoinHandle<Result<(), replication::ReplicateError>>,
    shutdown: CancellationToken,
    telemetry: Arc<FlowTelemetry>,
    routes: watch::Sender<Routes>,
    rejoin: watch::Sender<u64>,
}

impl Running {
    /// The records the replicator has sent and not yet seen acknowledged, all partitions.
    fn in_flight(&self) -> usize {
        self.telemetry
            .status()
            .partitions
            .values()
            .flat_map(|p| p.values())
            .map(|p| p.in_flight)
            .sum()
    }
}

fn settings() -> ReplicatorSettings {
    ReplicatorSettings {
        flush_interval: Duration::from_millis(200),
        start_offset: StartOffset::Earliest,
        max_in_flight: 500,
        session_timeout: Duration::from_secs(6),
        ..ReplicatorSettings::new("primary->backup", "kmirror.primary.backup", SYNCS)
    }
}

fn start(
    source: &MockCluster<'static, DefaultProducerContext>,
    target: &MockCluster<'static, DefaultProducerContext>,
) -> Running {
    start_with(source, target, settings(), &[])
}

fn start_with(
    source: &MockCluster<'static, DefaultProducerContext>,
    target: &MockCluster<'static, DefaultProducerContext>,
    settings: ReplicatorSettings,
    target_props: &[(&str, &str)],
) -> Running {
    let routes: Routes = [("orders".to_string(), Route::new("primary.orders", 2))].into();
    start_routed(source, target, settings, target_props, routes)
}

fn start_routed(
    source: &MockCluster<'static, DefaultProducerContext>,
    target: &MockCluster<'static, DefaultProducerContext>,
    settings: ReplicatorSettings,
    target_props: &[(&str, &str)],
    assignment: Routes,
) -> Running {
    start_transformed(source, target, settings, target_props, assignment, None)
}

fn start_transformed(
    source: &MockCluster<'static, DefaultProducerContext>,
    target: &MockCluster<'static, DefaultProducerContext>,
    settings: ReplicatorSettings,
    target_props: &[(&str, &str)],
    assignment: Routes,
    roles: Option<replication::ChainSource>,
) -> Running {
    logs();
    let (src, tgt) = (
        cluster("primary", source.bootstrap_servers()),
        cluster_with("backup", target.bootstrap_servers(), target_props),
    );
    let telemetry = Arc::new(FlowTelemetry::new("primary->backup"));
    let (tx, rx) = watch::channel(assignment);
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let t = telemetry.clone();
    let (rejoin_tx, rejoin) = watch::channel(0u64);
    let task = tokio::spawn(async move {
        let mut shared = replication::TaskShared::new(Duration::from_secs(6), rejoin);
        if let Some(roles) = roles {
            shared = shared.with_roles(roles);
        }
        replication::run([src.clone(), tgt, src], settings, rx, stop, t, shared).await
    });
    Running {
        task,
        shutdown,
        telemetry,
        routes: tx,
        rejoin: rejoin_tx,
    }
}

/// kmirror's logs, when `RUST_LOG` asks for them (e.g. `RUST_LOG=kmirror=debug`).
fn logs() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
}

fn mocks() -> (
    MockCluster<'static, DefaultProducerContext>,
    MockCluster<'static, DefaultProducerContext>,
) {
    let source = MockCluster::new(1).expect("source mock");
    let target = MockCluster::new(1).expect("target mock");
    source.create_topic("orders", 2, 1).expect("topic");
    source.create_topic(SYNCS, 1, 1).expect("topic");
    target.create_topic("primary.orders", 2, 1).expect("topic");
    (source, target)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_target_going_down_and_up_loses_nothing() {
    let (source, target) = mocks();
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..2000))
        .await
        .expect("produce");
    let running = start(&source, &target);

    let tservers = target.bootstrap_servers();
    let t = tservers.clone();
    let early = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", 500, Duration::from_secs(30))
    })
    .await
    .expect("read");
    assert!(early.len() >= 500, "replication started");

    target.broker_down(1).expect("down");
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 2000..4000))
        .await
        .expect("produce");
    tokio::time::sleep(Duration::from_secs(2)).await; // the target stays down a while
    target.broker_up(1).expect("up");

    let t = tservers.clone();
    let seen = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", 4000, Duration::from_secs(60))
    })
    .await
    .expect("read");
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
    for i in 0..4000 {
        assert!(seen.contains_key(&format!("id-{i}")), "id-{i} lost");
    }
    let dupes: usize = seen.values().map(|c| c - 1).sum();
    assert_eq!(
        dupes, 0,
        "the idempotent producer retried without duplicates"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_produce_errors_lose_nothing() {
    let (source, target) = mocks();
    target.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 5],
    );
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..1000))
        .await
        .expect("produce");
    let running = start(&source, &target);
    let t = target.bootstrap_servers();
    let seen = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", 1000, Duration::from_secs(60))
    })
    .await
    .expect("read");
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
    assert_eq!(seen.len(), 1000, "every record arrived");
}

/// Polls `f` every 100 ms until it holds, or panics after `timeout` naming `what`.
async fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// 1000 ids, a record over the target's `message.max.bytes` on partition 0, 1000 more.
async fn produce_with_poison(source: &MockCluster<'static, DefaultProducerContext>) {
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || {
        produce(&servers, "orders", 0..1000);
        let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .create()
            .expect("producer");
        let big = vec![b'x'; 20_000];
        p.send(
            BaseRecord::<str, [u8]>::to("orders")
                .partition(0)
                .key("poison")
                .payload(&big),
        )
        .map_err(|(e, _)| e)
        .expect("send");
        p.flush(Duration::from_secs(30)).expect("flush");
        produce(&servers, "orders", 1000..2000);
    })
    .await
    .expect("produce");
}

fn paused(t: &FlowTelemetry) -> Option<(i32, i64, String)> {
    let s = t.status();
    s.partitions
        .get("orders")?
        .iter()
        .find_map(|(p, st)| st.paused.as_ref().map(|x| (*p, x.offset, x.reason.clone())))
}

const SMALL_TARGET: [(&str, &str); 1] = [("message.max.bytes", "10000")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unproducible_record_pauses_only_its_partition() {
    let (source, target) = mocks();
    produce_with_poison(&source).await;
    let running = start_with(&source, &target, settings(), &SMALL_TARGET);
    wait_until("the partition paused", Duration::from_secs(60), || {
        paused(&running.telemetry).is_some()
    })
    .await;
    let (partition, offset, reason) = paused(&running.telemetry).expect("paused");
    assert_eq!(
        (partition, offset),
        (0, 500),
        "partition 0 stops at the large record"
    );
    assert!(reason.contains("message.max.bytes"), "{reason}");
    // Partition 1 carries the odd ids, partition 0 the even ones.
    let t = target.bootstrap_servers();
    let seen = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", 1500, Duration::from_secs(60))
    })
    .await
    .expect("read");
    for i in 0..2000 {
        let expected = usize::from(i % 2 == 1 || i < 1000);
        let got = seen.get(&format!("id-{i}")).copied().unwrap_or(0);
        assert_eq!(
            got, expected,
            "id-{i}: {got} copies (healthy partition unaffected, no duplicates)"
        );
    }
    let health = running.telemetry.health();
    assert_eq!(health.state, "degraded");
    assert!(
        health
            .reasons
            .iter()
            .any(|r| r.contains("orders[0] is paused at offset 500")),
        "{health:?}"
    );
    assert_eq!(running.telemetry.count(Counter::UnproduciblePaused), 1);
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
    // The progress of the healthy partition was stored; the paused one stays at the record.
    let committed = committed_progress(&source.bootstrap_servers());
    assert_eq!(committed.get(&0), Some(&500), "{committed:?}");
    assert_eq!(committed.get(&1), Some(&1000), "{committed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_mode_skips_the_record_and_goes_on() {
    let (source, target) = mocks();
    produce_with_poison(&source).await;
    let settings = ReplicatorSettings {
        on_unproducible: OnUnproducible::Skip,
        ..settings()
    };
    let running = start_with(&source, &target, settings, &SMALL_TARGET);
    let t = target.bootstrap_servers();
    let seen = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", 2000, Duration::from_secs(60))
    })
    .await
    .expect("read");
    for i in 0..2000 {
        assert_eq!(seen.get(&format!("id-{i}")), Some(&1), "id-{i}");
    }
    assert_eq!(seen.len(), 2000, "the large record was skipped");
    assert_eq!(running.telemetry.count(Counter::UnproducibleSkipped), 1);
    assert!(paused(&running.telemetry).is_none());
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
    let committed = committed_progress(&source.bootstrap_servers());
    assert_eq!(
        committed.get(&0),
        Some(&1001),
        "past the skipped record: {committed:?}"
    );
}

/// The committed offsets of kmirror's progress group, by partition of `orders`.
fn committed_progress(servers: &str) -> BTreeMap<i32, i64> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", "kmirror.primary.backup")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition("orders", 0);
    tpl.add_partition("orders", 1);
    let got = c
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed");
    got.elements()
        .iter()
        .filter_map(|e| {
            e.offset()
                .to_raw()
                .filter(|o| *o >= 0)
                .map(|o| (e.partition(), o))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_commits_are_reported_and_retried() {
    let (source, target) = mocks();
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..1000))
        .await
        .expect("produce");
    source.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_COMMIT_OFFSET_SIZE; 3],
    );
    let running = start(&source, &target);
    wait_until("commit failures counted", Duration::from_secs(60), || {
        running.telemetry.count(Counter::CommitFailures) > 0
    })
    .await;
    let servers = source.bootstrap_servers();
    wait_until(
        "the progress stored after all",
        Duration::from_secs(60),
        || {
            let c = committed_progress(&servers);
            c.get(&0) == Some(&500) && c.get(&1) == Some(&500)
        },
    )
    .await;
    wait_until("no longer failing", Duration::from_secs(10), || {
        running.telemetry.status().commit_failing.is_none()
    })
    .await;
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_the_target_is_down_is_bounded() {
    let (source, target) = mocks();
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..200))
        .await
        .expect("produce");
    let settings = ReplicatorSettings {
        drain_timeout: Duration::from_secs(2),
        ..settings()
    };
    let running = start_with(&source, &target, settings, &[]);
    let t = target.bootstrap_servers();
    tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", 200, Duration::from_secs(30))
    })
    .await
    .expect("read");
    target.broker_down(1).expect("down");
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 200..5000))
        .await
        .expect("produce");
    wait_until("records stuck in flight", Duration::from_secs(30), || {
        running
            .telemetry
            .status()
            .partitions
            .values()
            .flat_map(|p| p.values())
            .any(|p| p.in_flight > 0)
    })
    .await;
    running.shutdown.cancel();
    // The drain gives up after its 2 s; the group leave and the producer's close follow.
    let stopped = tokio::time::timeout(Duration::from_secs(30), running.task).await;
    stopped
        .expect("the stop is bounded")
        .expect("join")
        .expect("a clean stop");
    // Only acked records count as done: every record below the stored progress of a
    // partition is on the target (ids are produced round-robin: id n is at offset n / 2 of
    // partition n % 2).
    let committed = committed_progress(&source.bootstrap_servers());
    target.broker_up(1).expect("up");
    let t = target.bootstrap_servers();
    let below: usize = committed.values().map(|o| *o as usize).sum();
    let seen = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", below, Duration::from_secs(30))
    })
    .await
    .expect("read");
    for (p, o) in &committed {
        for offset in 0..*o as usize {
            let id = format!("id-{}", offset * 2 + *p as usize);
            assert!(
                seen.contains_key(&id),
                "partition {p}: progress {o} stored, but {id} (offset {offset}) is not on the target"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_internal_topic_reader_catches_up_while_the_topic_keeps_growing() {
    use kmirror::kafka::internal::{InternalReader, ReadEvent};
    let source = MockCluster::new(1).expect("mock");
    source.create_topic("busy.internal", 1, 1).expect("topic");
    let servers = source.bootstrap_servers();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (s, flag, count) = (servers.clone(), stop.clone(), written.clone());
    // A steady writer: a record every 5 ms, never quiet for long.
    let writer = std::thread::spawn(move || {
        let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", &s)
            .set("linger.ms", "0")
            .create()
            .expect("producer");
        let mut i = 0u64;
        while !flag.load(std::sync::atomic::Ordering::Relaxed) && i < 20_000 {
            let v = i.to_string();
            let _ = p.send(
                BaseRecord::<str, str>::to("busy.internal")
                    .partition(0)
                    .payload(&v),
            );
            i += 1;
            count.store(i, std::sync::atomic::Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(5)); // the writer's pace
        }
        p.flush(Duration::from_secs(5)).ok();
    });
    // Some history first.
    wait_until("100 records written", Duration::from_secs(20), || {
        written.load(std::sync::atomic::Ordering::Relaxed) >= 100
    })
    .await;
    let cluster = cluster("primary", servers);
    let mut reader = InternalReader::open(&cluster, "busy.internal")
        .await
        .expect("open");
    let caught_up = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(ReadEvent::CaughtUp) = reader.next().await {
                return;
            }
        }
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().expect("writer");
    caught_up.expect("ready while the topic keeps being written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_cannot_reach_the_end_says_so() {
    use kmirror::flow::checkpoints::read_checkpoints;
    let source = MockCluster::new(1).expect("mock");
    source
        .create_topic("primary.checkpoints.internal", 1, 1)
        .expect("topic");
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || {
        let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .create()
            .expect("producer");
        for i in 0..10 {
            let v = format!("{i}");
            p.send(
                BaseRecord::<str, str>::to("primary.checkpoints.internal")
                    .partition(0)
                    .payload(&v),
            )
            .map_err(|(e, _)| e)
            .expect("send");
        }
        p.flush(Duration::from_secs(10)).expect("flush");
    })
    .await
    .expect("produce");
    source.request_errors(
        RDKafkaApiKey::Fetch,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 500],
    );
    let cluster = cluster("primary", source.bootstrap_servers());
    let read = read_checkpoints(
        &cluster,
        "primary.checkpoints.internal",
        Duration::from_secs(2),
    )
    .await
    .expect("opened");
    assert!(!read.complete, "the fetches fail: the read is incomplete");
}

/// The partitions of `orders` a replicator's telemetry says it owns.
fn owned(t: &FlowTelemetry) -> usize {
    t.status().partitions.get("orders").map_or(0, |p| p.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_handed_over_is_drained_and_committed_first() {
    let (source, target) = mocks();
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..3000))
        .await
        .expect("produce");
    let a = start(&source, &target);
    wait_until(
        "the first member owns both partitions",
        Duration::from_secs(60),
        || owned(&a.telemetry) == 2,
    )
    .await;
    // More records arrive while the second member joins and takes a partition.
    let servers = source.bootstrap_servers();
    let feed = tokio::task::spawn_blocking(move || produce(&servers, "orders", 3000..6000));
    let b = start(&source, &target);
    wait_until(
        "the partitions split between the members",
        Duration::from_secs(60),
        || owned(&a.telemetry) == 1 && owned(&b.telemetry) == 1,
    )
    .await;
    feed.await.expect("produce");
    // Progress never moves backwards across the handover.
    let servers = source.bootstrap_servers();
    let mut last = BTreeMap::new();
    let t = target.bootstrap_servers();
    let seen = tokio::task::spawn_blocking(move || {
        let mut seen = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            for (p, o) in committed_progress(&servers) {
                let before = last.insert(p, o).unwrap_or(0);
                assert!(
                    o >= before,
                    "partition {p}: progress went back from {before} to {o}"
                );
            }
            seen = count_ids(&t, "primary.orders", 6000, Duration::from_secs(2));
            if seen.len() == 6000 {
                break;
            }
        }
        seen
    })
    .await
    .expect("read");
    a.shutdown.cancel();
    b.shutdown.cancel();
    a.task.await.expect("join").expect("a clean stop");
    b.task.await.expect("join").expect("a clean stop");
    for i in 0..6000 {
        assert!(seen.contains_key(&format!("id-{i}")), "id-{i} lost");
    }
    let dupes: usize = seen.values().map(|c| c - 1).sum();
    assert_eq!(
        dupes, 0,
        "the revoked partition's records were drained and committed before it moved"
    );
}

/// A graceful stop stores every partition's progress even when the last commit the loop
/// handed over is refused and its outcome comes in during the stop (the stop committed only
/// what had moved since that commit was taken: nothing, so a restart mirrored the stretch
/// again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_stores_what_a_refused_commit_left_unstored() {
    let (source, target) = mocks();
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..1000))
        .await
        .expect("produce");
    let running = start(&source, &target);
    let servers = source.bootstrap_servers();
    wait_until("the progress stored", Duration::from_secs(60), || {
        let c = committed_progress(&servers);
        c.get(&0) == Some(&500) && c.get(&1) == Some(&500)
    })
    .await;
    // From now on every commit is refused, its answer 2 s in coming.
    source
        .broker_round_trip_time(1, Duration::from_secs(2))
        .expect("rtt");
    source.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS; 1000],
    );
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 1000..1200))
        .await
        .expect("produce");
    let t = target.bootstrap_servers();
    tokio::task::spawn_blocking(move || {
        let seen = count_ids(&t, "primary.orders", 1200, Duration::from_secs(60));
        assert_eq!(seen.len(), 1200, "every record mirrored");
    })
    .await
    .expect("read");
    // Two more refusals: the second was of a commit taken after every record was acked.
    let failures = running.telemetry.count(Counter::CommitFailures);
    wait_until("two commits refused", Duration::from_secs(60), || {
        running.telemetry.count(Counter::CommitFailures) >= failures + 2
    })
    .await;
    // The same progress is handed over again within a flush interval (200 ms) and refused
    // 2 s later: the stop comes inside that window, once commits are no longer refused.
    tokio::time::sleep(Duration::from_millis(700)).await;
    source.clear_request_errors(RDKafkaApiKey::OffsetCommit);
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
    source
        .broker_round_trip_time(1, Duration::ZERO)
        .expect("rtt");
    let servers = source.bootstrap_servers();
    let stored = tokio::task::spawn_blocking(move || committed_progress(&servers))
        .await
        .expect("read");
    assert_eq!(
        stored,
        [(0, 600), (1, 600)].into(),
        "the stop stored every record mirrored"
    );
}

/// The stored progress of `topic`'s `partitions` in kmirror's progress group.
fn committed_of(servers: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", "kmirror.primary.backup")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    c.committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed")
        .elements()
        .iter()
        .filter_map(|e| {
            e.offset()
                .to_raw()
                .filter(|o| *o >= 0)
                .map(|o| (e.partition(), o))
        })
        .collect()
}

/// Reads ids `0..n` from `topic`'s `partitions` on `servers` (at most 60 s) and fails
/// naming those that never arrived.
async fn assert_none_missing(servers: String, topic: &'static str, partitions: i32, n: usize) {
    let seen = tokio::task::spawn_blocking(move || {
        count_ids_in(&servers, topic, partitions, n, Duration::from_secs(60))
    })
    .await
    .expect("read");
    let missing: Vec<usize> = (0..n)
        .filter(|i| !seen.contains_key(&format!("id-{i}")))
        .collect();
    assert!(
        missing.is_empty(),
        "{} records of {topic} lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

/// Finding 1 of the correctness review: while one record waited for room, the loop paused
/// only the partitions flowing at that moment and dropped what a partition that began to
/// flow afterwards (a newly routed topic, here) delivered; its commit then skipped them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_a_partition_routed_while_the_target_is_full_are_not_lost() {
    let (source, target) = mocks();
    source.create_topic("payments", 1, 1).expect("topic");
    target
        .create_topic("primary.payments", 1, 1)
        .expect("topic");
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || {
        produce(&servers, "orders", 0..1000);
        produce_to(&servers, "payments", 1, 0..600);
    })
    .await
    .expect("produce");
    // The target is down from the start: 500 records fill the in-flight window, the next
    // one waits for room, and after 2 s nothing flows.
    target.broker_down(1).expect("down");
    let running = start(&source, &target);
    wait_until("the in-flight window full", Duration::from_secs(30), || {
        running.in_flight() >= 500
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await; // past the 2 s a record waits for room
    // Now a topic is routed: its partition is assigned while the target is still full.
    let mut routes: Routes = [("orders".to_string(), Route::new("primary.orders", 2))].into();
    routes.insert("payments".into(), Route::new("primary.payments", 1));
    running.routes.send_replace(routes);
    wait_until("payments assigned", Duration::from_secs(30), || {
        running
            .telemetry
            .status()
            .partitions
            .contains_key("payments")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await; // its records are fetched meanwhile
    target.broker_up(1).expect("up");
    assert_none_missing(target.bootstrap_servers(), "primary.payments", 1, 600).await;
    let servers = source.bootstrap_servers();
    wait_until(
        "payments' progress stored at its end",
        Duration::from_secs(30),
        || committed_of(&servers, "payments", 1).get(&0) == Some(&600),
    )
    .await;
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
}

/// The byte budget: a task keeps at most half its producer queue un-acknowledged, keys and
/// values counted (here a 64 KiB queue, records of ~1 KiB of key: about 32 of them; a
/// budget of the whole queue lets 66 wait, and librdkafka's own queue limit, which counts
/// only values, thousands), and what waits is mirrored once the target is back — nothing
/// lost, progress stored to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_byte_budget_bounds_what_waits_for_the_target_and_loses_nothing() {
    let (source, target) = mocks();
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce_keyed(&servers, "orders", 2, 0..2000, 1000))
        .await
        .expect("produce");
    target.broker_down(1).expect("down");
    let settings = ReplicatorSettings {
        max_in_flight: 100_000,
        ..settings()
    };
    let running = start_with(
        &source,
        &target,
        settings,
        &[("queue.buffering.max.kbytes", "64")],
    );
    wait_until(
        "records waiting for the target",
        Duration::from_secs(30),
        || running.in_flight() >= 20,
    )
    .await;
    // Watched for a while (the loop keeps offering records meanwhile): never past the
    // budget.
    let watch_until = Instant::now() + Duration::from_millis(1500);
    let mut most = 0;
    while Instant::now() < watch_until {
        most = most.max(running.in_flight());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        (20..=40).contains(&most),
        "{most} records un-acknowledged: the 32 KiB budget holds about 32"
    );
    target.broker_up(1).expect("up");
    assert_none_missing(target.bootstrap_servers(), "primary.orders", 2, 2000).await;
    let servers = source.bootstrap_servers();
    wait_until(
        "progress stored at the end",
        Duration::from_secs(30),
        || {
            let c = committed_of(&servers, "orders", 2);
            c.get(&0) == Some(&1000) && c.get(&1) == Some(&1000)
        },
    )
    .await;
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
}

/// Finding 2: a fatal producer error purges everything in flight; the purged records were
/// counted as done, so the progress stored on the way out skipped them and the restart
/// resumed past them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_producer_error_never_stores_progress_past_purged_records() {
    let (source, target) = mocks();
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..20_000))
        .await
        .expect("produce");
    // A slow target keeps records in flight; then a produce request fails with a sequence
    // desynchronization, which the idempotent producer treats as fatal.
    target
        .broker_round_trip_time(1, Duration::from_millis(200))
        .expect("rtt");
    let running = start(&source, &target);
    wait_until("records acked", Duration::from_secs(30), || {
        running.telemetry.count(Counter::Records) >= 500
    })
    .await;
    target.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER],
    );
    let ended = tokio::time::timeout(Duration::from_secs(60), running.task)
        .await
        .expect("the replicator stops")
        .expect("join");
    assert!(
        matches!(ended, Err(replication::ReplicateError::Fatal { .. })),
        "{ended:?}"
    );
    target.clear_request_errors(RDKafkaApiKey::Produce);
    target
        .broker_round_trip_time(1, Duration::ZERO)
        .expect("rtt");
    // Everything below the stored progress is on the target.
    let committed = committed_progress(&source.bootstrap_servers());
    let below: usize = committed.values().map(|o| *o as usize).sum();
    let t = target.bootstrap_servers();
    let seen = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", below, Duration::from_secs(30))
    })
    .await
    .expect("read");
    for (p, o) in &committed {
        for offset in 0..*o as usize {
            let id = format!("id-{}", offset * 2 + *p as usize);
            assert!(
                seen.contains_key(&id),
                "partition {p}: progress {o} stored past {id}, which never reached the target"
            );
        }
    }
    // The restart resumes there and loses nothing.
    let again = start(&source, &target);
    let t = target.bootstrap_servers();
    let seen = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", 20_000, Duration::from_secs(90))
    })
    .await
    .expect("read");
    again.shutdown.cancel();
    again.task.await.expect("join").expect("a clean stop");
    assert_eq!(seen.len(), 20_000, "every record arrived after the restart");
}

/// Finding 0b: while progress cannot be stored (the group's coordinator is unreachable,
/// or refuses a stale generation while the group churns) the member's session runs out and
/// its assignment is lost; the partitions come back, and everything it had mirrored since
/// its last stored progress was mirrored again. Now what it mirrored is remembered: it
/// resumes there and stores it in the new generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_assignment_does_not_re_mirror_what_was_mirrored() {
    use rdkafka::mocking::MockCoordinator;
    // Three brokers: the partitions on broker 1, the group's coordinator on broker 2.
    let source = MockCluster::new(3).expect("source mock");
    let target = MockCluster::new(1).expect("target mock");
    source.create_topic("orders", 2, 1).expect("topic");
    source.create_topic(SYNCS, 1, 1).expect("topic");
    for p in 0..2 {
        source
            .partition_leader("orders", p, Some(1))
            .expect("leader");
    }
    source.partition_leader(SYNCS, 0, Some(1)).expect("leader");
    source
        .coordinator(MockCoordinator::Group("kmirror.primary.backup".into()), 2)
        .expect("coordinator");
    target.create_topic("primary.orders", 2, 1).expect("topic");
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..1000))
        .await
        .expect("produce");
    let running = start(&source, &target);
    let servers = source.bootstrap_servers();
    wait_until(
        "the first records' progress stored",
        Duration::from_secs(60),
        || {
            let c = committed_progress(&servers);
            c.get(&0) == Some(&500) && c.get(&1) == Some(&500)
        },
    )
    .await;
    // The coordinator goes away; 2000 more records are mirrored, their progress cannot be
    // stored, and the session (6 s) runs out.
    source.broker_down(2).expect("down");
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 1000..3000))
        .await
        .expect("produce");
    wait_until("everything mirrored once", Duration::from_secs(60), || {
        running.telemetry.count(Counter::Records) >= 3000
    })
    .await;
    let rebalances = running.telemetry.status().rebalances;
    wait_until("the assignment lost", Duration::from_secs(60), || {
        running.telemetry.status().rebalances > rebalances
    })
    .await;
    // Back, the coordinator refuses the commits deferred meanwhile: a stale generation.
    source.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION; 2],
    );
    source.broker_up(2).expect("up");
    let servers = source.bootstrap_servers();
    wait_until(
        "the progress stored at the end",
        Duration::from_secs(90),
        || {
            let c = committed_progress(&servers);
            c.get(&0) == Some(&1500) && c.get(&1) == Some(&1500)
        },
    )
    .await;
    let t = target.bootstrap_servers();
    let seen = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", 3000, Duration::from_secs(30))
    })
    .await
    .expect("read");
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
    assert_eq!(seen.len(), 3000, "nothing lost");
    let dupes: usize = seen.values().map(|c| c - 1).sum();
    assert_eq!(
        dupes, 0,
        "what was mirrored before the lost assignment is not mirrored again"
    );
}

/// Every commit's outcome is counted once (it was counted by the committer thread and by
/// the consumer's commit callback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refused_commit_is_counted_once() {
    let (source, target) = mocks();
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..1000))
        .await
        .expect("produce");
    source.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_COMMIT_OFFSET_SIZE; 3],
    );
    let running = start(&source, &target);
    let servers = source.bootstrap_servers();
    wait_until(
        "the progress stored after all",
        Duration::from_secs(60),
        || {
            let c = committed_progress(&servers);
            c.get(&0) == Some(&500) && c.get(&1) == Some(&500)
        },
    )
    .await;
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
    assert_eq!(
        running.telemetry.count(Counter::CommitFailures),
        3,
        "three refused commit requests"
    );
}

/// A partition paused by librdkafka stays paused across an unassign and a new assign in the
/// same consumer: a partition stopped at a record, revoked by a rejoin and assigned again,
/// must be resumed (it stayed "mirroring" in /status without fetching anything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_partition_assigned_again_fetches_again() {
    let (source, target) = mocks();
    produce_with_poison(&source).await;
    let running = start_with(&source, &target, settings(), &SMALL_TARGET);
    wait_until("the partition paused", Duration::from_secs(60), || {
        paused(&running.telemetry).is_some()
    })
    .await;
    let rebalances = running.telemetry.status().rebalances;
    running.rejoin.send_modify(|n| *n += 1);
    wait_until(
        "revoked and assigned again",
        Duration::from_secs(60),
        || running.telemetry.status().rebalances >= rebalances + 2,
    )
    .await;
    // Assigned again, it fetches from its stored progress: the record the target refuses
    // is met again and the partition is paused there again.
    wait_until(
        "paused again at the same record",
        Duration::from_secs(30),
        || paused(&running.telemetry).is_some_and(|(p, o, _)| p == 0 && o == 500),
    )
    .await;
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
}

/// The built-in roles with `test_bad_transform.wasm` (trapping on the record `id-1000`, the
/// 501st of partition 0) as the record-transform chain, failures handled as `on_error` says.
fn trapping_chain(on_error: OnUnproducible) -> replication::ChainSource {
    use kmirror::plugin::{Plugin, PluginHost, PluginSource};
    use kmirror::policy::{ChainLink, Config};
    let host = PluginHost::new(Default::default(), None).expect("host");
    let path = common::plugins_dir().join("test_bad_transform.wasm");
    let plugin = Plugin::open(&host, &PluginSource::File(path)).expect("component");
    let config: Config = [("mode", "trap-on"), ("needle", "id-1000")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let builtin =
        |name: &str| Plugin::open(&host, &PluginSource::Builtin(name.into())).expect("built-in");
    let none = Config::new();
    let roles = Arc::new(kmirror::policy::FlowRoles {
        topic_filter: builtin("default-topic-filter")
            .topic_filter(&none)
            .expect("filter"),
        group_filter: builtin("default-group-filter")
            .group_filter(&none)
            .expect("filter"),
        replication_policy: builtin("default-policy")
            .replication_policy(&none)
            .expect("policy"),
        config_property_filter: builtin("default-config-property-filter")
            .config_property_filter(&none)
            .expect("filter"),
        record_transforms: vec![ChainLink {
            name: "test_bad_transform.wasm".into(),
            transform: plugin.record_transform(&config).expect("configured"),
        }],
    });
    Arc::new(move || replication::Chain {
        roles: roles.clone(),
        on_error,
    })
}

/// A transform that traps on one record: with `pause` its partition stops exactly there
/// (reported, its progress stored up to it) while the other partition goes on; with `skip`
/// the record is left out, counted, and everything else is mirrored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_failing_on_a_record_pauses_its_partition_there_or_skips_it() {
    for on_error in [OnUnproducible::Pause, OnUnproducible::Skip] {
        let (source, target) = mocks();
        let servers = source.bootstrap_servers();
        tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..2000))
            .await
            .expect("produce");
        let settings = ReplicatorSettings {
            on_transform_error: on_error,
            ..settings()
        };
        let routes: Routes = [("orders".to_string(), Route::new("primary.orders", 2))].into();
        let running = start_transformed(
            &source,
            &target,
            settings,
            &[],
            routes,
            Some(trapping_chain(on_error)),
        );
        let skip = on_error == OnUnproducible::Skip;
        let t = target.bootstrap_servers();
        let expected = if skip { 1999 } else { 1500 };
        let seen = tokio::task::spawn_blocking(move || {
            count_ids(&t, "primary.orders", expected, Duration::from_secs(60))
        })
        .await
        .expect("read");
        for i in 0..2000 {
            let want = usize::from(if skip {
                i != 1000
            } else {
                i % 2 == 1 || i < 1000
            });
            let got = seen.get(&format!("id-{i}")).copied().unwrap_or(0);
            assert_eq!(got, want, "{on_error:?}: id-{i}");
        }
        let status = running.telemetry.status();
        assert_eq!(status.transforms[0].failed, 1, "{:?}", status.transforms);
        if skip {
            assert_eq!(
                running.telemetry.count(Counter::TransformFailuresSkipped),
                1
            );
            assert!(paused(&running.telemetry).is_none());
        } else {
            let (partition, offset, reason) = paused(&running.telemetry).expect("paused");
            assert_eq!((partition, offset), (0, 500));
            assert!(
                reason.contains("test_bad_transform.wasm") && reason.contains("trapped"),
                "{reason}"
            );
            assert_eq!(running.telemetry.count(Counter::TransformFailuresPaused), 1);
        }
        running.shutdown.cancel();
        running.task.await.expect("join").expect("a clean stop");
        let committed = committed_progress(&source.bootstrap_servers());
        let stopped_at = if skip { 1000 } else { 500 };
        assert_eq!(
            committed.get(&0),
            Some(&stopped_at),
            "{on_error:?}: {committed:?}"
        );
        assert_eq!(
            committed.get(&1),
            Some(&1000),
            "{on_error:?}: {committed:?}"
        );
    }
}

/// Partition 0 of `orders` as a lagging mirror finds it after retention ran: kmirror's
/// progress is stored at 5, ten small records and then 8 MiB of 100 KiB records were
/// produced, and the mock cluster keeps at most 5 MiB of a partition (it deletes its
/// oldest record batches, moving the log start: the real-broker suite cannot do this,
/// Tansu has neither retention on its memory store nor DeleteRecords). Returns the log's
/// start and end as a plain consumer sees them.
async fn truncated_source(source: &MockCluster<'static, DefaultProducerContext>) -> (i64, i64) {
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || {
        produce_to(&servers, "orders", 1, 0..10);
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("group.id", "kmirror.primary.backup")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("orders", 0, Offset::Offset(5))
            .expect("tpl");
        c.commit(&tpl, rdkafka::consumer::CommitMode::Sync)
            .expect("commit");
        let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("linger.ms", "0")
            .create()
            .expect("producer");
        let big = vec![b'x'; 100 * 1024];
        for i in 0..80 {
            let key = format!("big-{i}");
            p.send(
                BaseRecord::<str, [u8]>::to("orders")
                    .partition(0)
                    .key(&key)
                    .payload(&big),
            )
            .map_err(|(e, _)| e)
            .expect("send");
        }
        p.flush(Duration::from_secs(30)).expect("flush");
        let (low, high) = c
            .fetch_watermarks("orders", 0, Duration::from_secs(10))
            .expect("watermarks");
        assert!(
            low > 10,
            "the mock deleted the oldest batches: log start {low}"
        );
        assert_eq!(high, 90);
        (low, high)
    })
    .await
    .expect("produce")
}

/// The first `expect` keys on partition 0 of the target topic, in order, and its end.
fn target_keys(servers: &str, expect: usize) -> (Vec<String>, i64) {
    let c = checker(servers);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("primary.orders", 0, Offset::Beginning)
        .expect("tpl");
    c.assign(&tpl).expect("assign");
    let mut keys = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while keys.len() < expect && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            keys.push(String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned());
        }
    }
    let (_, end) = c
        .fetch_watermarks("primary.orders", 0, Duration::from_secs(10))
        .expect("watermarks");
    (keys, end)
}

fn source_truncated(t: &FlowTelemetry) -> Option<(u64, String, bool)> {
    let s = t.status();
    let p = s.source_truncated.get("orders")?.get(&0)?;
    Some((p.records, p.last.to_string(), p.paused))
}

/// Stored progress below the source's log start: the lost range is reported (status,
/// counter) and, under the default `continue`, mirroring goes on from the log start —
/// every record still there arrives once, in order, and progress is stored past them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_deleted_at_the_source_before_they_were_mirrored_are_reported() {
    let (source, target) = mocks();
    let (low, high) = truncated_source(&source).await;
    let running = start(&source, &target);
    wait_until("the loss reported", Duration::from_secs(60), || {
        source_truncated(&running.telemetry).is_some()
    })
    .await;
    let (records, last, paused) = source_truncated(&running.telemetry).expect("reported");
    assert_eq!(records, (low - 5) as u64, "{last}");
    assert!(last.contains(&format!("records 5..{low}")), "{last}");
    assert!(!paused);
    let t = target.bootstrap_servers();
    let n = (high - low) as usize;
    let (keys, end) = tokio::task::spawn_blocking(move || target_keys(&t, n))
        .await
        .expect("read");
    let expected: Vec<String> = (low - 10..80).map(|i| format!("big-{i}")).collect();
    assert_eq!(keys, expected, "from the log start on, in order");
    assert_eq!(end, n as i64, "each record once");
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
    let committed = committed_progress(&source.bootstrap_servers());
    assert_eq!(committed.get(&0), Some(&high), "{committed:?}");
}

/// Under `on_source_truncation = "pause"` the partition stops at the log start: nothing
/// of it is mirrored, its stored progress stays where it was (a restart reports the loss
/// again), and the flow is degraded with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_a_partition_that_lost_records_at_the_source() {
    let (source, target) = mocks();
    let (low, _) = truncated_source(&source).await;
    let settings = ReplicatorSettings {
        on_source_truncation: replication::OnSourceTruncation::Pause,
        ..settings()
    };
    let running = start_with(&source, &target, settings, &[]);
    wait_until("the partition paused", Duration::from_secs(60), || {
        paused(&running.telemetry).is_some()
    })
    .await;
    let (partition, offset, reason) = paused(&running.telemetry).expect("paused");
    assert_eq!((partition, offset), (0, low));
    assert!(reason.contains(&format!("records 5..{low}")), "{reason}");
    let (records, _, paused) = source_truncated(&running.telemetry).expect("reported");
    assert_eq!((records, paused), ((low - 5) as u64, true));
    let t = target.bootstrap_servers();
    let (_, end) = tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &t)
            .create()
            .expect("consumer");
        c.fetch_watermarks("primary.orders", 0, Duration::from_secs(10))
            .expect("watermarks")
    })
    .await
    .expect("read");
    assert_eq!(end, 0, "nothing of the partition was mirrored");
    assert_eq!(running.telemetry.health().state, "degraded");
    running.shutdown.cancel();
    running.task.await.expect("join").expect("a clean stop");
    let committed = committed_progress(&source.bootstrap_servers());
    assert_eq!(committed.get(&0), Some(&5), "{committed:?}");
}

/// Issue 34 item 4: an exactly-once shard abandoned (its assignment lost) while its
/// producer queue is full and the target is away serves no delivery report any more, so the
/// queue never drains: the shard must end instead of retrying the send for the life of the
/// process.
#[test]
fn an_abandoned_exactly_once_shard_with_a_full_queue_ends() {
    use kmirror::flow::exactly_once::shard::stop;
    use std::sync::atomic::Ordering;
    logs();
    let (source, target) = mocks();
    // A queue of 1 KiB: a few records fill it.
    let shard = run_shard(
        &source,
        cluster_with(
            "backup",
            target.bootstrap_servers(),
            &[("queue.buffering.max.kbytes", "1")],
        ),
    );
    let (thread, stop_flag, telemetry) = (shard.thread, shard.stop, shard.telemetry);
    // The shard runs (its transactions initialised, its partitions read): its status is up.
    let up = holds_within(Duration::from_secs(30), || {
        telemetry
            .status()
            .members
            .get(&0)
            .is_some_and(|m| m.partitions.values().map(|p| p.len()).sum::<usize>() == 2)
    });
    assert!(up, "the shard never started");
    target.broker_down(1).expect("down");
    produce_keyed(&source.bootstrap_servers(), "orders", 2, 0..400, 200);
    // Records the target never acks: the shard waits for room in its queue (and keeps its
    // status current meanwhile).
    let stuck = holds_within(Duration::from_secs(30), || {
        telemetry.status().members.get(&0).is_some_and(|m| {
            m.partitions
                .values()
                .flat_map(|p| p.values())
                .map(|p| p.in_flight)
                .sum::<usize>()
                > 0
        })
    });
    assert!(stuck, "the shard never filled its queue");
    assert!(
        !thread.is_finished(),
        "still running before it is abandoned"
    );
    stop_flag.store(stop::ABANDON, Ordering::Release);
    let ended = holds_within(Duration::from_secs(20), || thread.is_finished());
    assert!(ended, "an abandoned shard with a full queue never ended");
    let result = thread.join().expect("the shard panicked");
    assert!(result.is_ok(), "abandoned, not failed: {result:?}");
    target.broker_up(1).expect("up");
}

/// Polls `cond` every 50 ms until it holds or `timeout` passes; whether it held.
fn holds_within(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// Issue 34 item 8 (its first half): a single instance's replication task stops forwarding
/// by itself once its lease term ended — measured on the boot clock, so a suspend counts —
/// whatever the lease's task does (a process resumed after a stall runs its threads in any
/// order). Here the lease's task never cancels anything: the task ends on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_instance_task_stops_by_itself_once_its_lease_term_ended() {
    use kmirror::flow::single::{TermEnd, boot_time};
    logs();
    let (source, target) = mocks();
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..1000))
        .await
        .expect("produce");
    let term = TermEnd::default();
    term.set(boot_time() + Duration::from_secs(3600));
    let abandon = CancellationToken::new();
    let (shared, _held) = single_task(abandon.clone(), term.clone());
    let (src, tgt) = (
        cluster("primary", source.bootstrap_servers()),
        cluster("backup", target.bootstrap_servers()),
    );
    let routes: Routes = [("orders".to_string(), Route::new("primary.orders", 2))].into();
    let (_routes_tx, rx) = watch::channel(routes);
    let telemetry = Arc::new(FlowTelemetry::new("primary->backup"));
    let task = tokio::spawn(replication::run(
        [src.clone(), tgt, src],
        settings(),
        rx,
        CancellationToken::new(),
        telemetry.clone(),
        shared,
    ));
    let t = target.bootstrap_servers();
    let early = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", 500, Duration::from_secs(30))
    })
    .await
    .expect("read");
    assert!(early.len() >= 500, "mirroring under its term");
    // The term ends (as after a stall or a suspend longer than the rest of it).
    term.set(boot_time().saturating_sub(Duration::from_millis(1)));
    let ended = tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("the task stopped by itself")
        .expect("joined");
    assert!(ended.is_ok(), "{ended:?}");
    assert!(!abandon.is_cancelled(), "nothing told it to stop");
}

/// The exactly-once ledger takes a record above the expected offset as a gap in the log
/// (compaction) and one below it as a log that started again: it never sees a record
/// fetched before a seek because librdkafka's seek discards what was prefetched for the
/// partition (and the shard skips the rest of a batch it sought back in). This holds the
/// first half to its word: seeks back and forward while the prefetch queue is full, each
/// followed by exactly the sought record and then its successors in order.
#[test]
fn a_seek_hands_out_no_record_fetched_before_it() {
    logs();
    let (source, _target) = mocks();
    let servers = source.bootstrap_servers();
    produce_to(&servers, "orders", 1, 0..5000);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &servers)
        .set("group.id", "seek-barrier")
        .set("enable.auto.commit", "false")
        .set("fetch.queue.backoff.ms", "10")
        // Small fetches: many batches queued ahead of the reader at every seek.
        .set("message.max.bytes", "4096")
        .set("fetch.max.bytes", "4096")
        .set("max.partition.fetch.bytes", "4096")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("orders", 0, Offset::Beginning)
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut expected = 0i64;
    let (mut seeks, mut read) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while seeks < 20 {
        assert!(Instant::now() < deadline, "{seeks} seeks, {read} records");
        let Some(m) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.expect("record");
        assert_eq!(
            m.offset(),
            expected,
            "after {seeks} seeks: a record fetched before the seek, or one skipped"
        );
        read += 1;
        expected += 1;
        // Every few records, once its queue had time to fill: back (an aborted
        // transaction) or forward, anywhere in the log.
        if next(40) == 0 || expected == 5000 {
            let at = next(5000) as i64;
            consumer
                .seek("orders", 0, Offset::Offset(at), Duration::from_secs(5))
                .expect("seek");
            expected = at;
            seeks += 1;
        }
    }
}

/// The exactly-once data path on librdkafka's mock cluster: a shard mirrors through
/// transient produce and transaction errors and a target outage, and a `read_committed`
/// reader of the target (librdkafka's default isolation) sees every record once; a stop
/// commits and ends the shard cleanly.
#[test]
fn an_exactly_once_shard_mirrors_each_record_once_through_target_errors_and_an_outage() {
    use kmirror::flow::exactly_once::shard::stop;
    use std::sync::atomic::Ordering;
    logs();
    let (source, target) = mocks();
    target.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 5],
    );
    target.request_errors(
        RDKafkaApiKey::AddPartitionsToTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS; 3],
    );
    produce(&source.bootstrap_servers(), "orders", 0..1000);
    let shard = run_shard(&source, cluster("backup", target.bootstrap_servers()));
    let (thread, stop_flag) = (shard.thread, shard.stop);
    let tservers = target.bootstrap_servers();
    let seen = count_ids(&tservers, "primary.orders", 1000, Duration::from_secs(60));
    assert_eq!(seen.len(), 1000, "the first thousand mirrored");
    // The target goes down for 3 s with records coming (the outage's length is the fault
    // injected, not a wait for an event: the shard is blocked in its transaction's calls
    // meanwhile and shows nothing new).
    target.broker_down(1).expect("down");
    produce(&source.bootstrap_servers(), "orders", 1000..2000);
    std::thread::sleep(Duration::from_secs(3));
    target.broker_up(1).expect("up");
    let seen = count_ids(&tservers, "primary.orders", 2000, Duration::from_secs(90));
    assert_eq!(seen.len(), 2000, "all mirrored");
    stop_flag.store(stop::GRACEFUL, Ordering::Release);
    let ended = holds_within(Duration::from_secs(30), || thread.is_finished());
    assert!(ended, "a stopped shard ends");
    let result = thread.join().expect("the shard panicked");
    assert!(result.is_ok(), "{result:?}");
    // Everything the target holds now, read to its end (no id is wanted past the 2,000:
    // the reader reads on for its whole time).
    let seen = count_ids(&tservers, "primary.orders", 2001, Duration::from_secs(5));
    let missing: Vec<usize> = (0..2000)
        .filter(|i| !seen.contains_key(&format!("id-{i}")))
        .collect();
    assert!(missing.is_empty(), "missing {missing:?}");
    let duplicated: usize = seen.values().map(|c| c - 1).sum();
    assert_eq!(duplicated, 0, "each record committed once");
}

/// A single instance's producer gives a record up a quarter of a lease after it was queued
/// (750 ms here): with the target down for longer, records time out, what was queued
/// behind them is purged with them, and all are sent again once the target is back —
/// none lost, each partition's records first arriving in their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_instance_sends_again_in_order_what_timed_out_while_the_target_was_down() {
    logs();
    let (source, target) = mocks();
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..500))
        .await
        .expect("produce");
    let single = SingleRun::start(&source, &target);
    let (telemetry, shutdown) = (single.telemetry.clone(), single.shutdown.clone());
    let t = target.bootstrap_servers();
    let early = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", 500, Duration::from_secs(30))
    })
    .await
    .expect("read");
    assert_eq!(early.len(), 500, "mirroring");
    target.broker_down(1).expect("down");
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 500..2500))
        .await
        .expect("produce");
    let retrying = || {
        telemetry
            .status()
            .partitions
            .values()
            .flat_map(|p| p.values())
            .any(|p| p.state == "retrying")
    };
    wait_until(
        "records given up and retried",
        Duration::from_secs(30),
        retrying,
    )
    .await;
    target.broker_up(1).expect("up");
    let t = target.bootstrap_servers();
    let order = tokio::task::spawn_blocking(move || {
        let c = checker(&t);
        let mut tpl = TopicPartitionList::new();
        for p in 0..2 {
            tpl.add_partition_offset("primary.orders", p, Offset::Beginning)
                .expect("tpl");
        }
        c.assign(&tpl).expect("assign");
        let (mut firsts, mut seen) = (
            BTreeMap::<i32, Vec<usize>>::new(),
            std::collections::HashSet::new(),
        );
        let deadline = Instant::now() + Duration::from_secs(90);
        while seen.len() < 2500 && Instant::now() < deadline {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
                let id = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                let n: usize = id.trim_start_matches("id-").parse().expect("id");
                if seen.insert(n) {
                    firsts.entry(m.partition()).or_default().push(n);
                }
            }
        }
        firsts
    })
    .await
    .expect("read");
    shutdown.cancel();
    single.task.await.expect("join").expect("a clean stop");
    let total: usize = order.values().map(Vec::len).sum();
    assert_eq!(total, 2500, "every record arrived");
    for (p, ids) in &order {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "partition {p}: records first arrived out of order"
        );
    }
}

/// A single instance's target that stores records but answers later than their give-up
/// time (a quarter of the lease: 750 ms here; the mock delays every answer by 2 s for a
/// while): the records given up were possibly stored, are sent again, and the target then
/// holds some twice. Nothing is lost, and every duplicate is one kmirror counted
/// (`kmirror_records_resent_possibly_stored_total`) — CI's 10,000-topic run found 3
/// duplicates no figure explained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_instance_counts_the_records_it_sent_again_that_a_slow_target_may_have_stored() {
    logs();
    let (source, target) = mocks();
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 0..200))
        .await
        .expect("produce");
    let single = SingleRun::start(&source, &target);
    let (telemetry, shutdown) = (single.telemetry.clone(), single.shutdown.clone());
    let t = target.bootstrap_servers();
    let early = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", 200, Duration::from_secs(30))
    })
    .await
    .expect("read");
    assert_eq!(early.len(), 200, "mirroring");
    target
        .broker_round_trip_time(1, Duration::from_secs(2))
        .expect("rtt");
    let servers = source.bootstrap_servers();
    tokio::task::spawn_blocking(move || produce(&servers, "orders", 200..400))
        .await
        .expect("produce");
    wait_until(
        "records possibly stored sent again",
        Duration::from_secs(30),
        || telemetry.count(Counter::RecordsResentPossiblyStored) > 0,
    )
    .await;
    target
        .broker_round_trip_time(1, Duration::ZERO)
        .expect("rtt");
    let t = target.bootstrap_servers();
    let counts = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", 400, Duration::from_secs(60))
    })
    .await
    .expect("read");
    // What was sent again settles before the tally is read: nothing in flight any more.
    wait_until("nothing in flight", Duration::from_secs(30), || {
        telemetry
            .status()
            .partitions
            .values()
            .flat_map(|p| p.values())
            .all(|p| p.in_flight == 0)
    })
    .await;
    let t = target.bootstrap_servers();
    // Every copy: read to the end, not only until each id was seen.
    let counts_after = tokio::task::spawn_blocking(move || {
        count_ids(&t, "primary.orders", usize::MAX, Duration::from_secs(5))
    })
    .await
    .expect("read");
    shutdown.cancel();
    single.task.await.expect("join").expect("a clean stop");
    assert_eq!(counts.len(), 400, "every record arrived");
    assert_eq!(counts_after.len(), 400, "nothing but the records");
    let duplicated: usize = counts_after.values().map(|n| n - 1).sum();
    let counted = telemetry.count(Counter::RecordsResentPossiblyStored) as usize;
    eprintln!(
        "FIGURES target answering after the give-up time: {counted} records sent again possibly stored, {duplicated} duplicated"
    );
    assert!(duplicated > 0, "the late answers stored records given up");
    assert!(
        duplicated <= counted,
        "{duplicated} duplicates, {counted} counted: a duplicate kmirror did not count"
    );
}

/// Shard 0 of 1 of an exactly-once flow mirroring `orders` (2 partitions) from `source` to
/// `target`, running on a thread of its own.
struct ShardRun {
    thread: std::thread::JoinHandle<Result<(), kmirror::flow::exactly_once::shard::ShardError>>,
    stop: Arc<std::sync::atomic::AtomicU8>,
    telemetry: Arc<FlowTelemetry>,
    /// Kept for the shard's life: the routes never change.
    _routes: watch::Sender<Routes>,
}

fn run_shard(source: &MockCluster<'static, DefaultProducerContext>, target: Cluster) -> ShardRun {
    use kmirror::config::{OnSourceTruncation, OnUnproducible as OnFailure};
    use kmirror::flow::exactly_once::shard::{self, ShardContext, ShardSettings, stop};
    let telemetry = Arc::new(FlowTelemetry::new("primary->backup"));
    let routes: Routes = [("orders".to_string(), Route::new("primary.orders", 2))].into();
    let (routes_tx, routes_rx) = watch::channel(routes);
    let stop_flag = Arc::new(std::sync::atomic::AtomicU8::new(stop::RUN));
    let ctx = ShardContext {
        source: cluster("primary", source.bootstrap_servers()),
        target,
        syncs_cluster: None,
        flow: "primary->backup".into(),
        shard: 0,
        shards: 1,
        transactional_id: "kmirror-test-shard-0".into(),
        progress_group: "kmirror.primary.backup".into(),
        syncs_topic: SYNCS.into(),
        generation: 1,
        settings: ShardSettings {
            transaction_interval: Duration::from_millis(200),
            max_records: 10_000,
            max_bytes: 1 << 20,
            start_offset: StartOffset::Earliest,
            on_unproducible: OnFailure::Pause,
            on_transform_error: OnFailure::Pause,
            on_source_truncation: OnSourceTruncation::Continue,
            retry_paused_every: Duration::from_secs(5),
            offset_lag_max: 100,
            flush_interval: Duration::from_millis(200),
            refresh_every: Duration::from_secs(3600),
        },
        routes: routes_rx,
        stop: stop_flag.clone(),
        telemetry: telemetry.clone(),
        roles: None,
        session: 1,
    };
    ShardRun {
        thread: std::thread::spawn(move || shard::run(ctx)),
        stop: stop_flag,
        telemetry,
        _routes: routes_tx,
    }
}

/// What a single instance's one replication task (lease epoch 1) shares: `abandon` cancels
/// it, `term` ends its lease term. The other ends of its start report and its rejoin
/// channel come back with it, to be held while it runs.
/// A single instance's replication task mirroring `orders` (2 partitions) from `source`
/// to `target` with a 3 s lease (records given up 750 ms after they were queued), its
/// term far away.
struct SingleRun {
    task: tokio::task::JoinHandle<Result<(), replication::ReplicateError>>,
    telemetry: Arc<FlowTelemetry>,
    shutdown: CancellationToken,
    _held: (tokio::sync::mpsc::Receiver<()>, watch::Sender<u64>),
    _routes: watch::Sender<Routes>,
}

impl SingleRun {
    fn start(
        source: &MockCluster<'static, DefaultProducerContext>,
        target: &MockCluster<'static, DefaultProducerContext>,
    ) -> SingleRun {
        use kmirror::flow::single::{TermEnd, boot_time};
        let term = TermEnd::default();
        term.set(boot_time() + Duration::from_secs(3600));
        let (shared, held) = single_task(CancellationToken::new(), term);
        let (src, tgt) = (
            cluster("primary", source.bootstrap_servers()),
            cluster("backup", target.bootstrap_servers()),
        );
        let routes: Routes = [("orders".to_string(), Route::new("primary.orders", 2))].into();
        let (routes_tx, rx) = watch::channel(routes);
        let telemetry = Arc::new(FlowTelemetry::new("primary->backup"));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(replication::run(
            [src.clone(), tgt, src],
            ReplicatorSettings {
                session_timeout: Duration::from_secs(3),
                ..settings()
            },
            rx,
            shutdown.clone(),
            telemetry.clone(),
            shared,
        ));
        SingleRun {
            task,
            telemetry,
            shutdown,
            _held: held,
            _routes: routes_tx,
        }
    }
}

fn single_task(
    abandon: CancellationToken,
    term: kmirror::flow::single::TermEnd,
) -> (
    replication::TaskShared,
    (tokio::sync::mpsc::Receiver<()>, watch::Sender<u64>),
) {
    let (running_tx, running) = tokio::sync::mpsc::channel(1);
    let (rejoin_tx, rejoin) = watch::channel(0u64);
    let shared = replication::TaskShared::new(Duration::from_secs(6), rejoin).single(
        (1, 1),
        abandon,
        running_tx,
        replication::Producers::default(),
        term,
    );
    (shared, (running, rejoin_tx))
}
