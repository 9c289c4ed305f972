//! The single-instance lease on librdkafka's mock cluster (transactions served): a holder
//! renews, a take after a holder that did not let go waits a lease, a holder that stopped
//! lets go so the next take mirrors at once, and every take's epoch is above the last.
//!
//! The fence itself is not here: the mock answers a second InitProducerId of a
//! transactional id with a new producer id instead of the same one with its epoch bumped,
//! so the earlier holder is never refused. It is tested end to end on Apache Kafka:
//! `e2e_scaling::a_second_single_instance_fences_the_first_which_stops_before_the_second_mirrors`.

use kmirror::flow::FlowError;
use kmirror::flow::replication::Producers;
use kmirror::flow::single::{self, Lease, Tail};
use kmirror::flow::telemetry::FlowTelemetry;
use kmirror::kafka::{Cluster, ClusterSettings};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const LEASE: Duration = Duration::from_secs(3);

fn source(mock: &MockCluster<'static, DefaultProducerContext>) -> Cluster {
    Cluster::new(&ClusterSettings {
        alias: "primary".into(),
        bootstrap_servers: mock.bootstrap_servers(),
        librdkafka: Default::default(),
    })
    .expect("cluster")
}

fn names() -> (String, String) {
    (
        single::lease_topic("primary", "backup"),
        single::lease_id("primary", "backup"),
    )
}

async fn take(source: &Cluster) -> (Lease, Duration) {
    let (topic, id) = names();
    let telemetry = FlowTelemetry::new("primary->backup");
    Lease::take(
        source,
        ("primary->backup", &topic, &id),
        LEASE,
        &telemetry,
        &CancellationToken::new(),
    )
    .await
    .expect("taken")
    .expect("not stopped")
}

async fn tail(source: &Cluster) -> Tail {
    let (topic, id) = names();
    single::last_lease(
        source,
        &topic,
        &id,
        &FlowTelemetry::new("primary->backup"),
        &CancellationToken::new(),
    )
    .await
    .expect("read")
}

/// A holder running: its hold's result, and the token its replication tasks would watch.
struct Held {
    hold: tokio::task::JoinHandle<Result<(), FlowError>>,
    lost: CancellationToken,
    stop: CancellationToken,
    tasks: Option<tokio::sync::mpsc::Sender<()>>,
}

fn hold(lease: Lease) -> Held {
    let (tasks_tx, tasks) = tokio::sync::mpsc::channel(1);
    let (lost, stop) = (CancellationToken::new(), CancellationToken::new());
    let hold = tokio::spawn(lease.hold(
        tasks,
        lost.clone(),
        Producers::default(),
        stop.clone(),
        Arc::new(FlowTelemetry::new("primary->backup")),
    ));
    Held {
        hold,
        lost,
        stop,
        tasks: Some(tasks_tx),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_beside_a_holder_waits_a_lease_and_a_stopped_holder_lets_go() {
    let mock = MockCluster::new(1).expect("mock");
    let (topic, _) = names();
    mock.create_topic(&topic, 1, 1).expect("topic");
    let source = source(&mock);

    // The first take: no earlier holder, nothing to wait for.
    let (a, wait) = take(&source).await;
    assert_eq!(wait, Duration::ZERO, "no earlier holder");
    let first_epoch = a.epoch();
    let a = hold(a);

    // A second take while the first holds: it waits a lease (the first has that long to
    // notice it was fenced, on Kafka) and its epoch is above the first's.
    let (b, wait) = take(&source).await;
    assert_eq!(
        wait, LEASE,
        "the earlier holder did not let go: a lease's wait"
    );
    assert!(b.epoch() > first_epoch, "{} > {first_epoch}", b.epoch());
    // The first stops as if fenced (its hold aborted: its tasks are told at once). Not
    // fenced on the mock, it may have renewed once more after the second take.
    a.hold.abort();
    let _ = a.hold.await;
    assert!(a.lost.is_cancelled(), "its replication tasks are stopped");
    let _ = (a.stop, a.tasks);

    // The second holder renews across several renewals and past its wait, then stops: its
    // replication tasks end (the channel closes) and it lets go.
    let b_epoch = b.epoch();
    // Its wait (a lease from its take) is what it may not let go before.
    let may_let_go = std::time::Instant::now() + wait;
    let mut b = hold(b);
    // Each renewal is a record (and, on Kafka, a transaction marker): wait for a few.
    let end = || {
        let c: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .create()
            .expect("consumer");
        rdkafka::consumer::Consumer::fetch_watermarks(&c, &topic, 0, Duration::from_secs(5))
            .map(|(_, high)| high)
            .unwrap_or(0)
    };
    let before = end();
    let deadline = std::time::Instant::now() + LEASE * 5;
    while end() < before + 3 || std::time::Instant::now() < may_let_go {
        assert!(std::time::Instant::now() < deadline, "no renewals");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!b.hold.is_finished(), "renewing, not lost");
    match tail(&source).await {
        Tail::Last(r) => assert_eq!(r.epoch, b_epoch, "the holder's renewal is the last record"),
        other => panic!("{other:?}"),
    }
    b.stop.cancel();
    drop(b.tasks.take());
    tokio::time::timeout(LEASE * 3, &mut b.hold)
        .await
        .expect("the hold ended")
        .expect("joined")
        .expect("released without an error");

    // A take after a holder that let go mirrors at once, with a higher epoch.
    let (c, wait) = take(&source).await;
    assert_eq!(wait, Duration::ZERO, "the last holder let go");
    assert!(c.epoch() > b_epoch, "{} > {b_epoch}", c.epoch());
}
