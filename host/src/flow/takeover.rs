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

/// One record of MM2's offsets topic: the source partition of `source_alias` it is about,
/// and its last mirrored offset (`None`: deleted). `None` for a record that is not about
/// that cluster's MirrorSourceConnector.
pub fn parse_record(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    source_alias: &str,
) -> Option<(Tp, Option<i64>)> {
    let key: serde_json::Value = serde_json::from_slice(key?).ok()?;
    let [connector, partition] = key.as_array()?.as_slice() else {
        return None;
    };
    if connector.as_str()? != CONNECTOR || partition["cluster"].as_str()? != source_alias {
        return None;
    }
    let tp = (
        partition["topic"].as_str()?.to_string(),
        i32::try_from(partition["partition"].as_i64()?).ok()?,
    );
    let offset = match value {
        None => None,
        Some(v) => {
            let v: serde_json::Value = serde_json::from_slice(v).ok()?;
            if v.is_null() {
                None
            } else {
                Some(v["offset"].as_i64().filter(|o| *o >= 0)?)
            }
        }
    };
    Some((tp, offset))
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Takeover {
    /// Per partition MM2 mirrored.
    pub seeds: Vec<Seed>,
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
            next: o + 1,
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
    Takeover { seeds, refused }
}

/// MM2's last mirrored offset of every partition of `source_alias`, from its offsets topic
/// on `target` (empty when the topic does not exist).
pub async fn read_mm2_offsets(
    target: &Cluster,
    source_alias: &str,
) -> Result<BTreeMap<Tp, i64>, KafkaError> {
    let topic = mm2_offsets_topic(source_alias);
    if !target.topics().await?.contains_key(&topic) {
        return Ok(BTreeMap::new());
    }
    // Connect's offsets topic has 25 partitions by default: every one is read.
    let offsets = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let into = offsets.clone();
    let alias = source_alias.to_string();
    let complete = read_topic_to_end(
        target,
        &topic,
        Duration::from_secs(30),
        move |key, value| {
            if let Some((tp, offset)) = parse_record(key, value, &alias) {
                let mut o = into.lock().unwrap_or_else(|e| e.into_inner());
                match offset {
                    Some(at) => o.insert(tp, at),
                    None => o.remove(&tp),
                };
            }
        },
    )
    .await?;
    if !complete {
        return Err(target.error(
            format!("read {topic}"),
            "not read to its end within 30s; try again",
        ));
    }
    let offsets = offsets.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(offsets)
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

/// Commits the seeds of `takeover` as `group`'s progress on `source`.
pub async fn apply(
    source: &Cluster,
    group: &str,
    takeover: &Takeover,
) -> Result<usize, KafkaError> {
    let offsets: Vec<(String, i32, i64)> = takeover
        .seeds
        .iter()
        .map(|s| (s.tp.0.clone(), s.tp.1, s.next))
        .collect();
    if offsets.is_empty() {
        return Ok(0);
    }
    let client = source.group_client(group)?;
    source.commit(&client, group, &offsets).await?;
    Ok(offsets.len())
}

/// Reads MM2's offsets and the flow's progress, and plans the takeover.
pub async fn prepare(
    source: &Cluster,
    target: &Cluster,
    group: &str,
    force: bool,
) -> Result<Takeover, KafkaError> {
    let mm2 = read_mm2_offsets(target, &source.alias).await?;
    let partitions: Vec<Tp> = mm2.keys().cloned().collect();
    let stored = if partitions.is_empty() {
        BTreeMap::new()
    } else {
        stored_progress(source, group, &partitions).await?
    };
    Ok(plan(&mm2, &stored, force))
}

/// What a daemon's takeover at a flow's start did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The flow had progress for a partition MM2 mirrored: nothing was seeded.
    HasProgress,
    /// MM2 left no offsets for this source.
    NothingLeft,
    /// Progress was seeded for this many partitions.
    Seeded(usize),
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
            Some((("orders".to_string(), 3), Some(41)))
        );
        assert_eq!(
            parse_record(Some(&k), None, "primary"),
            Some((("orders".to_string(), 3), None)),
            "a tombstone deletes"
        );
        assert_eq!(
            parse_record(Some(&k), Some(b"null"), "primary").map(|r| r.1),
            Some(None)
        );
        // Field order is the converter's business.
        let reordered =
            br#"["MirrorSourceConnector",{"topic":"t","partition":0,"cluster":"primary"}]"#;
        assert_eq!(
            parse_record(Some(reordered), Some(br#"{"offset":0}"#), "primary"),
            Some((("t".to_string(), 0), Some(0)))
        );
        for (k, v) in [
            (key("other", "orders", 3), br#"{"offset":1}"#.to_vec()),
            (
                br#"["MirrorCheckpointConnector",{"cluster":"primary","partition":0,"topic":"t"}]"#
                    .to_vec(),
                br#"{"offset":1}"#.to_vec(),
            ),
            (b"not json".to_vec(), br#"{"offset":1}"#.to_vec()),
            (key("primary", "orders", 3), br#"{"offset":-5}"#.to_vec()),
            (key("primary", "orders", 3), br#"{"position":5}"#.to_vec()),
        ] {
            assert_eq!(
                parse_record(Some(&k), Some(&v), "primary"),
                None,
                "{}",
                String::from_utf8_lossy(&k)
            );
        }
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
