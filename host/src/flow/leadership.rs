//! Which instance of a flow does the singleton duties — creating and growing target
//! topics, copying configs, checkpoints, group offset sync, heartbeats — elected through
//! Kafka's group coordinator, as the partitions are: every instance joins the flow's
//! control group (`kmirror.<source>.<target>.leader`) on the source, subscribed to a
//! single-partition, empty internal topic (`kmirror-leader.<target>.internal`); the member
//! the group assigns its one partition is the leader. When the leader leaves, dies or is
//! cut off, the group gives the partition to another member within the session timeout.

use super::telemetry::FlowTelemetry;
use crate::kafka::Cluster;
use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Why the control topic must have one partition.
pub const CONTROL_SINGLE: &str =
    "its one partition elects the flow's leader: with more, every member holding one would lead";

/// The control group of a flow.
pub fn leader_group(source: &str, target: &str) -> String {
    format!("{}.leader", super::progress_group(source, target))
}

/// The control topic of a flow (on the source; `.internal`, so never mirrored).
pub fn leader_topic(target: &str) -> String {
    format!("kmirror-leader.{target}.internal")
}

/// Publishes leadership from the control group's rebalances.
struct Elector {
    leader: watch::Sender<bool>,
    flow: String,
}

impl ClientContext for Elector {}

/// Whether `tpl` holds the control topic's partition 0, the one that makes its holder the
/// leader (the topic is refused with more partitions; this holds even if one slipped by).
fn holds_the_election(tpl: &rdkafka::TopicPartitionList) -> bool {
    tpl.elements().iter().any(|e| e.partition() == 0)
}

impl ConsumerContext for Elector {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance
            && holds_the_election(tpl)
            && *self.leader.borrow()
        {
            tracing::info!(flow = %self.flow, "this instance is no longer the flow's leader");
            self.leader.send_replace(false);
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance
            && holds_the_election(tpl)
            && !*self.leader.borrow()
        {
            tracing::info!(flow = %self.flow, "this instance leads the flow: discovery's changes, checkpoints, group offset sync and heartbeats run here");
            self.leader.send_replace(true);
        }
    }
}

/// Takes part in the election until `shutdown`, publishing on `leader` whether this
/// instance leads (on its own thread: the membership is served by `poll`).
pub async fn run(
    source: Cluster,
    flow: String,
    groups: (String, String),
    session_timeout: Duration,
    leader: watch::Sender<bool>,
    telemetry: Arc<FlowTelemetry>,
    shutdown: CancellationToken,
) {
    let (group, topic) = groups;
    let leader_flag = leader.clone();
    let stop = shutdown.clone();
    let mut settings = source.member_timing(session_timeout).to_vec();
    settings.extend([
        (
            "partition.assignment.strategy",
            "cooperative-sticky".to_string(),
        ),
        ("allow.auto.create.topics", "false".to_string()),
    ]);
    let elect = move || {
        let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let context = Elector {
            leader: leader_flag.clone(),
            flow: flow.clone(),
        };
        let consumer = match source.group_member(&group, &settings, context) {
            Ok(c) => c,
            Err(e) => {
                telemetry.note_error("join the control group", e.kind(), &e);
                return;
            }
        };
        if let Err(e) = consumer.subscribe(&[&topic]) {
            telemetry.note_error("join the control group", "kafka", &e);
            return;
        }
        while !stop.is_cancelled() {
            // Subscribed only for the assignment (partition 0 makes the leader); records on the
            // topic (ownership reports) are read elsewhere: polling serves the membership.
            let _ = consumer.poll(Duration::from_millis(100));
            telemetry.tick("leader election", Duration::from_millis(100));
        }
        telemetry.loop_ended("leader election");
        leader_flag.send_replace(false);
        drop(consumer); // leaves the group: another instance takes over at once
    };
    let done = tokio::task::spawn_blocking(elect);
    if let Err(e) = done.await
        && e.is_panic()
    {
        std::panic::resume_unwind(e.into_panic());
    }
    leader.send_replace(false);
}
