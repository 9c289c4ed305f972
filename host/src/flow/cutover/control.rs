//! The failover control topic: compacted, one partition, on the target. `kmirror failover`
//! writes `topic:<source topic>` when it stops the flow mirroring that topic and
//! `group:<group>` once a group's translated offsets are committed on the target; `kmirror
//! failback` writes `failback:<source topic>` into the reverse flow's control topic (on the
//! cluster failed back to) to have that flow mirror the topic back into the topic it was
//! mirrored from, starting where the failover left it. A tombstone removes an entry.
//! Values are JSON. Every instance of the flow reads the topic from its beginning
//! and follows it ([`run`]); discovery publishes no routes before it has read it to its
//! end, so a restarted instance never mirrors a topic failed over, even for a moment.

use crate::flow::telemetry::FlowTelemetry;
use crate::kafka::Cluster;
use crate::kafka::internal::{InternalReader, ReadEvent};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Why the control topic has one partition.
pub const CONTROL_SINGLE: &str =
    "failover records are written to and read from its partition 0, in order";

/// A source topic failed over: the flow no longer mirrors it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopicFailedOver {
    /// Its name on the target.
    pub target_topic: String,
    /// When the failover stopped it (ms since the epoch).
    pub at_ms: i64,
    /// Per partition, the source records it had not mirrored when it was stopped (empty:
    /// the source could not be read to tell).
    #[serde(default)]
    pub unmirrored: BTreeMap<i32, i64>,
}

/// A consumer group failed over: its translated offsets were committed on the target.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupFailedOver {
    /// When (ms since the epoch).
    pub at_ms: i64,
    /// The partitions committed.
    pub partitions: usize,
}

/// A topic failed back (`kmirror failback`): this flow — the reverse of the one that failed
/// it over — mirrors the source topic back into `target_topic`, the topic it was mirrored
/// from, each partition from `from` (what the failed-over flow had put there ends before
/// it), whatever the flow's topic filter and replication policy say of it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopicFailedBack {
    /// Its name on this flow's target: the topic it was mirrored from.
    pub target_topic: String,
    /// When (ms since the epoch).
    pub at_ms: i64,
    /// Per partition, the source offset mirroring starts at (the first record written
    /// there after the failover).
    pub from: BTreeMap<i32, i64>,
    /// Where the target topic's divergent tail was copied to (on the target).
    pub quarantine_topic: String,
    /// Per partition, the divergent tail copied there.
    #[serde(default)]
    pub quarantined: BTreeMap<i32, Quarantined>,
}

/// The records of one partition of the failed-back topic that never reached the cluster
/// failed over to (written after its mirror stopped), copied aside before the topic
/// receives that cluster's records.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Quarantined {
    /// The tail's offsets in the failed-back topic, [from, to).
    pub from: i64,
    pub to: i64,
    /// Its records (transaction markers and aborted records are none).
    pub records: u64,
}

/// What the control topic says, read to some point.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlState {
    /// Source topics failed over, by name.
    pub topics: BTreeMap<String, TopicFailedOver>,
    /// Groups failed over, by name.
    pub groups: BTreeMap<String, GroupFailedOver>,
    /// Source topics failed back, by name.
    pub failed_back: BTreeMap<String, TopicFailedBack>,
}

/// The record key of a failed-back topic's entry.
pub fn failback_key(source_topic: &str) -> String {
    format!("failback:{source_topic}")
}

/// The record key of a topic's entry.
pub fn topic_key(source_topic: &str) -> String {
    format!("topic:{source_topic}")
}

/// The record key of a group's entry.
pub fn group_key(group: &str) -> String {
    format!("group:{group}")
}

impl ControlState {
    /// Applies one record; an error names what is wrong with it (the record is then left
    /// out, and the state is as before).
    pub fn apply(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<(), String> {
        let key = key.ok_or("a record without a key")?;
        let key = std::str::from_utf8(key).map_err(|_| "a key that is not UTF-8".to_string())?;
        if let Some(topic) = key.strip_prefix("topic:") {
            entry(&mut self.topics, topic, value, "topic").map_err(|e| format!("key {key}: {e}"))
        } else if let Some(group) = key.strip_prefix("group:") {
            entry(&mut self.groups, group, value, "group").map_err(|e| format!("key {key}: {e}"))
        } else if let Some(topic) = key.strip_prefix("failback:") {
            entry(&mut self.failed_back, topic, value, "failback")
                .map_err(|e| format!("key {key}: {e}"))
        } else {
            Err(format!(
                "key {key}: none of `topic:<name>`, `group:<name>`, `failback:<name>`"
            ))
        }
    }
}

/// Sets `name`'s entry in `map` from a JSON `value`, or removes it on a tombstone.
fn entry<T: serde::de::DeserializeOwned>(
    map: &mut BTreeMap<String, T>,
    name: &str,
    value: Option<&[u8]>,
    what: &str,
) -> Result<(), String> {
    match value {
        None => {
            map.remove(name);
        }
        Some(v) => {
            let parsed =
                serde_json::from_slice(v).map_err(|e| format!("not a {what} entry: {e}"))?;
            map.insert(name.to_string(), parsed);
        }
    }
    Ok(())
}

/// Reads the control topic to its end (`Ok(None)`: the topic does not exist, so nothing was
/// ever failed over). Records that cannot be read are named on standard error and left out.
pub async fn read(
    target: &Cluster,
    topic: &str,
    timeout: Duration,
) -> Result<Option<ControlState>, String> {
    let listed = target.topics().await.map_err(|e| e.to_string())?;
    if !listed.contains_key(topic) {
        return Ok(None);
    }
    let mut state = ControlState::default();
    let mut bad = Vec::new();
    let read = crate::kafka::internal::read_to_end(target, topic, timeout, |msg| {
        use rdkafka::Message;
        if let Err(e) = state.apply(msg.key(), msg.payload()) {
            bad.push(format!("offset {}: {e}", msg.offset()));
        }
    })
    .await
    .map_err(|e| e.to_string())?;
    for b in bad {
        eprintln!(
            "warning: {topic} on cluster {}: {b}; left out",
            target.alias
        );
    }
    if !read {
        return Err(format!(
            "{topic} on cluster {} not read to its end within {timeout:?}",
            target.alias
        ));
    }
    Ok(Some(state))
}

/// The source topics failed over, as the daemon follows them: `None` until the control
/// topic was read to its end once.
pub type FailedOver = Option<Arc<BTreeMap<String, TopicFailedOver>>>;

/// The source topics failed back, as the daemon follows them (published before the topics
/// failed over, so that both are known once those are).
pub type FailedBack = Arc<BTreeMap<String, TopicFailedBack>>;

/// Follows the control topic until `shutdown`: reads it from its beginning, publishes the
/// topics failed over once it reached the end, then every change. A read that fails is
/// reported (the flow is degraded meanwhile) and started over from the beginning.
pub async fn run(
    target: Cluster,
    topic: String,
    telemetry: Arc<FlowTelemetry>,
    (failed_over, failed_back): (watch::Sender<FailedOver>, watch::Sender<FailedBack>),
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(200);
    loop {
        let followed = follow(&target, &topic, &telemetry, (&failed_over, &failed_back));
        tokio::select! {
            _ = shutdown.cancelled() => return,
            e = followed => {
                telemetry.note_error("read the failover control topic", e.kind(), &e);
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Reads the topic from its beginning and follows it; returns only on an error.
async fn follow(
    target: &Cluster,
    topic: &str,
    telemetry: &FlowTelemetry,
    (failed_over, failed_back): (&watch::Sender<FailedOver>, &watch::Sender<FailedBack>),
) -> crate::kafka::KafkaError {
    let mut reader = match InternalReader::open(target, topic).await {
        Ok(r) => r,
        Err(e) => return e,
    };
    let mut state = ControlState::default();
    let publish = |state: &ControlState| {
        failed_back.send_if_modified(|now| {
            let changed = **now != state.failed_back;
            if changed {
                *now = Arc::new(state.failed_back.clone());
            }
            changed
        });
        let topics = Arc::new(state.topics.clone());
        failed_over.send_if_modified(|now| {
            let changed = now.as_deref() != Some(&*topics);
            if changed {
                *now = Some(topics.clone());
            }
            changed
        });
    };
    if reader.caught_up() {
        publish(&state);
    }
    loop {
        match reader.next().await {
            Ok(ReadEvent::Record(msg)) => {
                use rdkafka::Message;
                if let Err(why) = state.apply(msg.key(), msg.payload()) {
                    let what = format!("offset {}: {why}", msg.offset());
                    telemetry.note_error("read the failover control topic", "record", &what);
                    tracing::warn!(flow = %telemetry.flow, topic, offset = msg.offset(), error = %why, "a record of the failover control topic cannot be read; it is left out");
                    continue;
                }
                if reader.caught_up() {
                    publish(&state);
                }
            }
            Ok(ReadEvent::CaughtUp) => publish(&state),
            Err(e) => return e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic_entry(target: &str) -> Vec<u8> {
        serde_json::to_vec(&TopicFailedOver {
            target_topic: target.into(),
            at_ms: 5,
            unmirrored: [(0, 3)].into_iter().collect(),
        })
        .unwrap()
    }

    #[test]
    fn a_topic_entry_is_kept_until_its_tombstone() {
        let mut s = ControlState::default();
        s.apply(Some(b"topic:orders"), Some(&topic_entry("primary.orders")))
            .unwrap();
        assert_eq!(s.topics["orders"].target_topic, "primary.orders");
        assert_eq!(s.topics["orders"].unmirrored[&0], 3);
        s.apply(Some(b"topic:orders"), None).unwrap();
        assert!(s.topics.is_empty());
    }

    #[test]
    fn group_entries_are_apart_from_topic_entries() {
        let mut s = ControlState::default();
        let g = serde_json::to_vec(&GroupFailedOver {
            at_ms: 1,
            partitions: 4,
        })
        .unwrap();
        s.apply(Some(group_key("app").as_bytes()), Some(&g))
            .unwrap();
        assert_eq!(s.groups["app"].partitions, 4);
        assert!(s.topics.is_empty());
    }

    #[test]
    fn a_bad_record_is_named_and_changes_nothing() {
        let mut s = ControlState::default();
        s.apply(Some(b"topic:orders"), Some(&topic_entry("primary.orders")))
            .unwrap();
        let before = s.clone();
        let e = s
            .apply(Some(b"topic:orders"), Some(b"{not json"))
            .unwrap_err();
        assert!(e.contains("topic:orders"), "{e}");
        let e = s.apply(Some(b"orders"), Some(b"{}")).unwrap_err();
        assert!(e.contains("none of"), "{e}");
        assert!(s.apply(None, Some(b"{}")).is_err());
        assert!(s.apply(Some(&[0xff, 0xfe]), None).is_err());
        assert_eq!(s, before);
    }

    #[test]
    fn a_failback_entry_is_kept_apart_until_its_tombstone() {
        let mut s = ControlState::default();
        let f = serde_json::to_vec(&TopicFailedBack {
            target_topic: "orders".into(),
            at_ms: 9,
            from: [(0, 120), (1, 80)].into_iter().collect(),
            quarantine_topic: "kmirror-quarantine.orders.internal".into(),
            quarantined: [(
                0,
                Quarantined {
                    from: 100,
                    to: 105,
                    records: 5,
                },
            )]
            .into_iter()
            .collect(),
        })
        .unwrap();
        s.apply(Some(failback_key("primary.orders").as_bytes()), Some(&f))
            .unwrap();
        let back = &s.failed_back["primary.orders"];
        assert_eq!((back.target_topic.as_str(), back.from[&1]), ("orders", 80));
        assert_eq!(back.quarantined[&0].records, 5);
        assert!(s.topics.is_empty() && s.groups.is_empty());
        s.apply(Some(b"failback:primary.orders"), None).unwrap();
        assert!(s.failed_back.is_empty());
    }
}
