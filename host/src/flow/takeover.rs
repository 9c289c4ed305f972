//! Taking over from a running MirrorMaker 2 without copying again: MM2 keeps its position
//! in Kafka Connect's offsets topic on the target (`mm2-offsets.<source>.internal` in
//! dedicated mode), one record per source partition — key
//! `["MirrorSourceConnector",{"cluster":"<source>","partition":<p>,"topic":"<t>"}]`, value
//! `{"offset":<the last upstream offset it mirrored>}` as JSON (JsonConverter, schemas
//! off), the last record per key winning and a null value deleting it. At a flow's first
//! start (no kmirror progress stored for those partitions yet) kmirror seeds its progress
//! group with the next offset of every partition MM2 had mirrored; the others start per
//! `start_offset`. The offset syncs and checkpoints MM2 wrote are in the topics kmirror
//! reads and writes (same names, same formats), so translation and checkpoints go on.

use crate::flow::OWN_GROUP_PREFIX;
use crate::kafka::internal::read_topic_to_end;
use crate::kafka::{Cluster, KafkaError};
use std::collections::BTreeMap;
use std::time::Duration;

/// A source partition.
pub type Tp = (String, i32);

/// MM2's offsets topic for a source cluster (on the target).
pub fn mm2_offsets_topic(source: &str) -> String {
    format!("mm2-offsets.{source}.internal")
}

/// The connector MM2's source offsets belong to.
const CONNECTOR: &str = "MirrorSourceConnector";

/// What one record of MM2's offsets topic says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Not about `source_alias`'s MirrorSourceConnector (another cluster, another
    /// connector, or not Connect's key at all): left alone.
    Other,
    /// A source partition and its last mirrored offset (`None`: deleted).
    Offset(Tp, Option<i64>),
    /// About that connector, but not usable: the record's key as text, and why. Nothing is
    /// seeded from it; the valid records are.
    Refused(String, String),
}

/// One record of MM2's offsets topic, checked: the topic name must be a Kafka topic name,
/// the partition not negative, the offset within 0..i64::MAX (kmirror starts at the next).
/// The topic is written by anyone allowed to (MM2, a person, a tool); nothing in it is
/// trusted further than that.
pub fn parse_record(key: Option<&[u8]>, value: Option<&[u8]>, source_alias: &str) -> Parsed {
    let Some(Ok(key)) = key.map(serde_json::from_slice::<serde_json::Value>) else {
        return Parsed::Other;
    };
    let Some([connector, partition]) = key.as_array().map(Vec::as_slice) else {
        return Parsed::Other;
    };
    if connector.as_str() != Some(CONNECTOR) || partition["cluster"].as_str() != Some(source_alias)
    {
        return Parsed::Other;
    }
    let refuse = |why: String| Parsed::Refused(key.to_string(), why);
    let Some(topic) = partition["topic"].as_str() else {
        return refuse("no topic name".into());
    };
    if let Some(why) = crate::kafka::invalid_topic_name(topic) {
        return refuse(format!("topic {topic:?} is not a topic name: {why}"));
    }
    let number = match partition["partition"].as_i64().map(i32::try_from) {
        Some(Ok(p)) if p >= 0 => p,
        _ => {
            return refuse(format!(
                "partition {} is not a partition number",
                partition["partition"]
            ));
        }
    };
    let tp = (topic.to_string(), number);
    let offset = match value {
        None => None,
        Some(v) => match serde_json::from_slice::<serde_json::Value>(v) {
            Ok(serde_json::Value::Null) => None,
            Ok(v) => match v["offset"].as_i64() {
                Some(o) if (0..i64::MAX).contains(&o) => Some(o),
                _ => {
                    return refuse(format!(
                        "offset {} is not an offset kmirror can start after",
                        v["offset"]
                    ));
                }
            },
            Err(e) => return refuse(format!("the value is not JSON: {e}")),
        },
    };
    Parsed::Offset(tp, offset)
}

/// What a takeover does with one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    /// The source partition.
    pub tp: Tp,
    /// The last offset MM2 mirrored.
    pub mm2: i64,
    /// Where kmirror starts: the next one.
    pub next: i64,
    /// The flow's progress already stored there, if any.
    pub stored: Option<i64>,
}

/// The takeover of a flow: what would be seeded, or why not.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Takeover {
    /// Per partition MM2 mirrored.
    pub seeds: Vec<Seed>,
    /// Records of MM2's offsets topic that were refused: each key, and why (still
    /// current: a later valid record of the same partition replaces its entry).
    pub skipped: Vec<(String, String)>,
    /// Why nothing is seeded (the flow has progress already and the takeover is not
    /// forced), if so.
    pub refused: Option<String>,
}

/// Plans a takeover from MM2's last offsets and the flow's stored progress: refused while
/// any of those partitions has progress, unless `force`.
pub fn plan(mm2: &BTreeMap<Tp, i64>, stored: &BTreeMap<Tp, i64>, force: bool) -> Takeover {
    let seeds: Vec<Seed> = mm2
        .iter()
        .map(|(tp, o)| Seed {
            tp: tp.clone(),
            mm2: *o,
            next: o.saturating_add(1),
            stored: stored.get(tp).copied(),
        })
        .collect();
    let with_progress: Vec<String> = seeds
        .iter()
        .filter(|s| s.stored.is_some())
        .map(|s| format!("{}[{}]", s.tp.0, s.tp.1))
        .collect();
    let refused = (!with_progress.is_empty() && !force).then(|| {
        format!(
            "the flow already has progress stored for {} partition(s) MM2 mirrored (e.g. {}): a takeover would move it; force it with --force",
            with_progress.len(),
            with_progress[..with_progress.len().min(5)].join(", ")
        )
    });
    Takeover {
        seeds,
        skipped: Vec::new(),
        refused,
    }
}

/// What MM2's offsets topic holds for a source cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mm2Offsets {
    /// The last mirrored offset of every partition.
    pub offsets: BTreeMap<Tp, i64>,
    /// Records refused (the key, why), in the topic's order.
    pub skipped: Vec<(String, String)>,
}

impl Mm2Offsets {
    /// Takes in one record, the last of a partition winning.
    pub fn apply(&mut self, parsed: Parsed) {
        match parsed {
            Parsed::Other => {}
            Parsed::Offset(tp, Some(at)) => {
                self.offsets.insert(tp, at);
            }
            Parsed::Offset(tp, None) => {
                self.offsets.remove(&tp);
            }
            Parsed::Refused(key, why) => self.skipped.push((key, why)),
        }
    }
}

/// MM2's last mirrored offset of every partition of `source_alias`, from its offsets topic
/// on `target` (empty when the topic does not exist), and the records refused.
pub async fn read_mm2_offsets(
    target: &Cluster,
    source_alias: &str,
) -> Result<Mm2Offsets, KafkaError> {
    let topic = mm2_offsets_topic(source_alias);
    if !target.topics().await?.contains_key(&topic) {
        return Ok(Mm2Offsets::default());
    }
    // Connect's offsets topic has 25 partitions by default: every one is read.
    let read = std::sync::Arc::new(std::sync::Mutex::new(Mm2Offsets::default()));
    let into = read.clone();
    let alias = source_alias.to_string();
    let complete = read_topic_to_end(
        target,
        &topic,
        Duration::from_secs(30),
        move |key, value| {
            into.lock()
                .unwrap_or_else(|e| e.into_inner())
                .apply(parse_record(key, value, &alias));
        },
    )
    .await?;
    if !complete {
        return Err(target.error(
            format!("read {topic}"),
            "not read to its end within 30s; try again",
        ));
    }
    let read = read.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(read)
}

/// The flow's stored progress for `partitions`.
pub async fn stored_progress(
    source: &Cluster,
    group: &str,
    partitions: &[Tp],
) -> Result<BTreeMap<Tp, i64>, KafkaError> {
    debug_assert!(group.starts_with(OWN_GROUP_PREFIX));
    let client = source.group_client(group)?;
    Ok(source
        .committed(&client, group, partitions)
        .await?
        .into_iter()
        .map(|c| ((c.topic, c.partition), c.offset))
        .collect())
}

/// What committing a takeover's seeds stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seeded {
    /// How many partitions were seeded.
    pub stored: usize,
    /// The partitions Kafka refused to seed (no READ on the topic, a topic deleted
    /// meanwhile), each with its seed and why.
    pub refused: Vec<(Tp, i64, String)>,
}

/// Commits the seeds of `takeover` as `group`'s progress on `source`. A commit Kafka
/// refused as a whole is an error; one it refused for some partitions seeds the others and
/// names those.
pub async fn apply(
    source: &Cluster,
    group: &str,
    takeover: &Takeover,
) -> Result<Seeded, KafkaError> {
    let offsets: Vec<(String, i32, i64)> = takeover
        .seeds
        .iter()
        .map(|s| (s.tp.0.clone(), s.tp.1, s.next))
        .collect();
    if offsets.is_empty() {
        return Ok(Seeded::default());
    }
    let client = source.group_client(group)?;
    let outcome = source.commit_reporting(&client, group, &offsets).await?;
    if outcome.stored() == 0
        && let Some(why) = &outcome.error
    {
        return Err(source.error(format!("commit offsets of group {group}"), why));
    }
    Ok(Seeded {
        stored: outcome.stored(),
        refused: outcome
            .refused()
            .map(|(t, p, at, why)| ((t.clone(), *p), *at, why.clone().unwrap_or_default()))
            .collect(),
    })
}

/// Reads MM2's offsets and the flow's progress, and plans the takeover.
pub async fn prepare(
    source: &Cluster,
    target: &Cluster,
    group: &str,
    force: bool,
) -> Result<Takeover, KafkaError> {
    let mm2 = read_mm2_offsets(target, &source.alias).await?;
    let partitions: Vec<Tp> = mm2.offsets.keys().cloned().collect();
    let stored = if partitions.is_empty() {
        BTreeMap::new()
    } else {
        stored_progress(source, group, &partitions).await?
    };
    Ok(Takeover {
        skipped: mm2.skipped,
        ..plan(&mm2.offsets, &stored, force)
    })
}

/// What a daemon's takeover at a flow's start did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The flow had progress for a partition MM2 mirrored: nothing was seeded.
    HasProgress,
    /// MM2 left no offsets for this source.
    NothingLeft,
    /// Progress was seeded (for some partitions, perhaps not all).
    Seeded(Seeded),
}

/// Plans and applies a takeover, unforced. A commit refused because another instance of
/// the flow joined the group meanwhile fails here, and the retry plans again — then finding
/// that instance's progress.
pub async fn take_over(
    source: &Cluster,
    target: &Cluster,
    group: &str,
) -> Result<Outcome, KafkaError> {
    let plan = prepare(source, target, group, false).await?;
    for (key, why) in &plan.skipped {
        tracing::warn!(topic = %mm2_offsets_topic(&source.alias), cluster = %target.alias, record = %key, reason = %why, "take_over_from_mm2: a record of MirrorMaker 2's offsets topic is refused; its partition is not seeded from it");
    }
    if plan.refused.is_some() {
        return Ok(Outcome::HasProgress);
    }
    if plan.seeds.is_empty() {
        return Ok(Outcome::NothingLeft);
    }
    Ok(Outcome::Seeded(apply(source, group, &plan).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(cluster: &str, topic: &str, partition: i32) -> Vec<u8> {
        format!(
            r#"["MirrorSourceConnector",{{"cluster":"{cluster}","partition":{partition},"topic":"{topic}"}}]"#
        )
        .into_bytes()
    }

    #[test]
    fn mm2_records_are_read_as_connect_writes_them() {
        let k = key("primary", "orders", 3);
        assert_eq!(
            parse_record(Some(&k), Some(br#"{"offset":41}"#), "primary"),
            Parsed::Offset(("orders".to_string(), 3), Some(41))
        );
        assert_eq!(
            parse_record(Some(&k), None, "primary"),
            Parsed::Offset(("orders".to_string(), 3), None),
            "a tombstone deletes"
        );
        assert_eq!(
            parse_record(Some(&k), Some(b"null"), "primary"),
            Parsed::Offset(("orders".to_string(), 3), None)
        );
        // Field order is the converter's business.
        let reordered =
            br#"["MirrorSourceConnector",{"topic":"t","partition":0,"cluster":"primary"}]"#;
        assert_eq!(
            parse_record(Some(reordered), Some(br#"{"offset":0}"#), "primary"),
            Parsed::Offset(("t".to_string(), 0), Some(0))
        );
        // Not this cluster's MirrorSourceConnector: left alone, silently.
        for (k, v) in [
            (key("other", "orders", 3), br#"{"offset":1}"#.to_vec()),
            (
                br#"["MirrorCheckpointConnector",{"cluster":"primary","partition":0,"topic":"t"}]"#
                    .to_vec(),
                br#"{"offset":1}"#.to_vec(),
            ),
            (b"not json".to_vec(), br#"{"offset":1}"#.to_vec()),
        ] {
            assert_eq!(
                parse_record(Some(&k), Some(&v), "primary"),
                Parsed::Other,
                "{}",
                String::from_utf8_lossy(&k)
            );
        }
    }

    /// Records that claim to be the connector's but cannot be trusted are refused, each
    /// with a reason naming what is wrong; none of them panics or reaches a seed.
    #[test]
    fn untrusted_records_are_refused_naming_why() {
        let max = format!(r#"{{"offset":{}}}"#, i64::MAX);
        for (k, v, why) in [
            (key("primary", "orders", 3), br#"{"offset":-5}"#.to_vec(), "offset -5"),
            (key("primary", "orders", 3), br#"{"position":5}"#.to_vec(), "offset null"),
            (key("primary", "orders", 3), max.into_bytes(), "offset 9223372036854775807"),
            (key("primary", "orders", 3), b"{not json".to_vec(), "not JSON"),
            (key("primary", "orders", -1), br#"{"offset":1}"#.to_vec(), "partition -1"),
            (
                br#"["MirrorSourceConnector",{"cluster":"primary","partition":3000000000,"topic":"t"}]"#.to_vec(),
                br#"{"offset":1}"#.to_vec(),
                "partition 3000000000",
            ),
            (key("primary", "../bad topic", 0), br#"{"offset":1}"#.to_vec(), "is not a topic name"),
            (key("primary", "", 0), br#"{"offset":1}"#.to_vec(), "is not a topic name"),
            (
                br#"["MirrorSourceConnector",{"cluster":"primary","partition":0}]"#.to_vec(),
                br#"{"offset":1}"#.to_vec(),
                "no topic name",
            ),
        ] {
            match parse_record(Some(&k), Some(&v), "primary") {
                Parsed::Refused(key, reason) => {
                    assert!(reason.contains(why), "{reason}");
                    assert!(key.contains("MirrorSourceConnector"), "{key}");
                }
                other => panic!("{}: {other:?}", String::from_utf8_lossy(&k)),
            }
        }
    }

    /// One valid record among bad ones: the valid one is seeded, the bad ones listed.
    #[test]
    fn the_valid_records_are_seeded_beside_refused_ones() {
        let mut read = Mm2Offsets::default();
        let max = format!(r#"{{"offset":{}}}"#, i64::MAX);
        for (k, v) in [
            (key("primary", "orders", 0), br#"{"offset":41}"#.to_vec()),
            (key("primary", "orders", 1), max.into_bytes()),
            (key("primary", "orders", -1), br#"{"offset":1}"#.to_vec()),
            (
                key("primary", "../bad topic", 0),
                br#"{"offset":1}"#.to_vec(),
            ),
        ] {
            read.apply(parse_record(Some(&k), Some(&v), "primary"));
        }
        assert_eq!(read.offsets, [(("orders".to_string(), 0), 41)].into());
        assert_eq!(read.skipped.len(), 3);
        let planned = plan(&read.offsets, &BTreeMap::new(), false);
        assert_eq!(planned.seeds.len(), 1);
        assert_eq!(planned.seeds[0].next, 42);
        // The plan itself never overflows, whatever it is handed.
        let edge: BTreeMap<Tp, i64> = [(("t".to_string(), 0), i64::MAX)].into();
        assert_eq!(plan(&edge, &BTreeMap::new(), false).seeds[0].next, i64::MAX);
    }

    #[test]
    fn a_takeover_seeds_the_next_offsets_and_refuses_over_existing_progress() {
        let mm2: BTreeMap<Tp, i64> = [
            (("orders".to_string(), 0), 59),
            (("orders".to_string(), 1), 9),
        ]
        .into();
        let fresh = plan(&mm2, &BTreeMap::new(), false);
        assert_eq!(fresh.refused, None);
        assert_eq!(
            fresh
                .seeds
                .iter()
                .map(|s| (s.tp.1, s.next))
                .collect::<Vec<_>>(),
            vec![(0, 60), (1, 10)]
        );
        let stored: BTreeMap<Tp, i64> = [(("orders".to_string(), 1), 12)].into();
        let refused = plan(&mm2, &stored, false);
        assert!(
            refused
                .refused
                .as_deref()
                .is_some_and(|r| r.contains("orders[1]") && r.contains("--force")),
            "{refused:?}"
        );
        assert_eq!(plan(&mm2, &stored, true).refused, None, "forced");
    }
}
