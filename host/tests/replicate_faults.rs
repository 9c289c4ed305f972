//! Data-plane faults on librdkafka's in-process mock clusters (no admin APIs there, which
//! the replicator does not use): the target broker goes down and comes back, and produce
//! requests fail transiently. The replicator runs in-process; records are checked with a
//! plain rdkafka consumer. Nothing may be lost.

use kmirror::config::StartOffset;
use kmirror::flow::replication::{self, ReplicatorSettings};
use kmirror::flow::telemetry::FlowTelemetry;
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

const SYNCS: &str = "mm2-offset-syncs.backup.internal";

fn cluster(alias: &str, servers: String) -> Cluster {
    Cluster::new(&ClusterSettings {
        alias: alias.into(),
        bootstrap_servers: servers,
        librdkafka: BTreeMap::new(),
    })
    .expect("cluster")
}

fn produce(servers: &str, topic: &str, range: std::ops::Range<usize>) {
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .create()
        .expect("producer");
    for i in range {
        let v = format!("id-{i}");
        p.send(
            BaseRecord::<str, str>::to(topic)
                .partition((i % 2) as i32)
                .key(&v)
                .payload(&v),
        )
        .map_err(|(e, _)| e)
        .expect("send");
    }
    p.flush(Duration::from_secs(30)).expect("flush");
}

/// How often each id arrived on `topic`, reading until `n` distinct ids or `timeout`.
fn count_ids(servers: &str, topic: &str, n: usize, timeout: Duration) -> BTreeMap<String, usize> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", "checker")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..2 {
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
    _assign: watch::Sender<Routes>,
}

fn start(
    source: &MockCluster<'static, DefaultProducerContext>,
    target: &MockCluster<'static, DefaultProducerContext>,
) -> Running {
    let (src, tgt) = (
        cluster("primary", source.bootstrap_servers()),
        cluster("backup", target.bootstrap_servers()),
    );
    let settings = ReplicatorSettings {
        flush_interval: Duration::from_millis(200),
        start_offset: StartOffset::Earliest,
        max_in_flight: 500,
        session_timeout: Duration::from_secs(6),
        ..ReplicatorSettings::new("primary->backup", "kmirror.primary.backup", SYNCS)
    };
    let assignment: Routes = [("orders".to_string(), Route::new("primary.orders", 2))].into();
    let (tx, rx) = watch::channel(assignment);
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let task = tokio::spawn(async move {
        replication::run(
            [src.clone(), tgt, src],
            settings,
            rx,
            stop,
            Arc::new(FlowTelemetry::new("primary->backup")),
        )
        .await
    });
    Running {
        task,
        shutdown,
        _assign: tx,
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
